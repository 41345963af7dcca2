//! Where growth is: which kind of memory (anon / file / shmem / swap,
//! private / shared), which process of the tree, which mappings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{SeriesFit, stats};
use crate::series::{self, Metric};
use crate::store::{Row, Scope, Tier};
use crate::units::format_signed_bytes;

/// Kinds a scope's growth can be split into (they add up to RSS).
const KINDS: [Metric; 4] = [
    Metric::AnonBytes,
    Metric::FileBytes,
    Metric::ShmemBytes,
    Metric::SwapBytes,
];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KindGrowth {
    pub metric: Metric,
    /// Least-squares slope, bytes per x.
    pub slope: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessGrowth {
    pub pid: u32,
    pub comm: String,
    pub n: usize,
    pub first_bytes: f64,
    pub last_bytes: f64,
    /// Least-squares slope of this process's memory (the scope's metric, or
    /// RSS where that is missing), bytes per x.
    pub slope: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MappingGrowth {
    pub pid: u32,
    /// `[heap]`, `[anon]` (anonymous regions), `[stack]`, or a file path.
    pub mapping: String,
    pub first_rss_bytes: u64,
    pub last_rss_bytes: u64,
    pub growth_bytes: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Attribution {
    pub series: Scope,
    pub metric: Metric,
    /// Slopes of anon/file/shmem/swap, largest first.
    pub kinds: Vec<KindGrowth>,
    /// Slopes of private dirty and shared memory.
    pub private_dirty_slope: Option<f64>,
    pub shared_slope: Option<f64>,
    /// Processes of the scope, fastest growing first (at most 10).
    pub processes: Vec<ProcessGrowth>,
    /// Mappings that grew most between the first and last smaps (at most 10).
    pub mappings: Vec<MappingGrowth>,
    /// One phrase for the terminal: `anon, [anon] +36.0 MiB`.
    pub summary: String,
}

/// Attributes the growth of `main` (a headline fit) within its scope.
pub fn attribute(main: &SeriesFit, fits: &[SeriesFit], rows: &[Row]) -> Attribution {
    let scope_slope = |m: Metric| {
        fits.iter()
            .find(|f| f.scope == main.scope && f.metric == m)
            .and_then(|f| f.slope)
    };
    let mut kinds: Vec<KindGrowth> = KINDS
        .iter()
        .filter_map(|&metric| scope_slope(metric).map(|slope| KindGrowth { metric, slope }))
        .collect();
    kinds.sort_by(|a, b| b.slope.total_cmp(&a.slope));
    let processes = processes(main, rows);
    let mappings = mappings(main.scope, rows);

    let mut parts = Vec::new();
    if let Some(top) = kinds.first().filter(|k| k.slope > 0.0) {
        parts.push(top.metric.label().to_string());
    }
    if let Some(m) = mappings.first().filter(|m| m.growth_bytes > 0) {
        parts.push(format!(
            "{} {}",
            m.mapping,
            format_signed_bytes(m.growth_bytes as f64)
        ));
    }
    if processes.len() > 1
        && let Some(p) = processes.first()
    {
        parts.push(format!("mostly pid {} ({})", p.pid, p.comm));
    }
    Attribution {
        series: main.scope,
        metric: main.metric,
        kinds,
        private_dirty_slope: scope_slope(Metric::PrivateDirtyBytes),
        shared_slope: scope_slope(Metric::SharedBytes),
        processes,
        mappings,
        summary: parts.join(", "),
    }
}

/// Per-process series within the scope (the scope's metric, or RSS where a
/// sample lacks it), fastest growing first.
fn processes(main: &SeriesFit, rows: &[Row]) -> Vec<ProcessGrowth> {
    let mut out: Vec<ProcessGrowth> = series::processes(rows, main.scope)
        .iter()
        .map(|life| {
            let points = life.points(main.scope, main.x, |r| main.metric.value(r).or(r.rss_bytes));
            let (xs, ys): (Vec<f64>, Vec<f64>) = points.into_iter().unzip();
            ProcessGrowth {
                pid: life.pid,
                comm: life.comm.clone(),
                n: ys.len(),
                first_bytes: ys.first().copied().unwrap_or(0.0),
                last_bytes: ys.last().copied().unwrap_or(0.0),
                slope: stats::ols(&xs, &ys).map(|l| l.slope),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.slope
            .unwrap_or(f64::MIN)
            .total_cmp(&a.slope.unwrap_or(f64::MIN))
    });
    out.truncate(10);
    out
}

/// Mapping growth between the first and the last smaps snapshot of the scope.
fn mappings(scope: Scope, rows: &[Row]) -> Vec<MappingGrowth> {
    let maps: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scope == scope && r.tier == Tier::Mapping)
        .collect();
    let (Some(first), Some(last)) = (
        maps.iter().map(|r| r.sample).min(),
        maps.iter().map(|r| r.sample).max(),
    ) else {
        return Vec::new();
    };
    if first == last {
        return Vec::new();
    }
    // (pid, start time, mapping) → (rss at first, rss at last)
    let mut table: BTreeMap<(u32, u64, &str), (u64, u64)> = BTreeMap::new();
    for r in &maps {
        let rss = r.rss_bytes.unwrap_or(0);
        let entry = table
            .entry((r.pid, r.start_time, r.comm.as_str()))
            .or_insert((0, 0));
        if r.sample == first {
            entry.0 = rss;
        } else if r.sample == last {
            entry.1 = rss;
        }
    }
    let mut out: Vec<MappingGrowth> = table
        .into_iter()
        .map(|((pid, _, name), (a, b))| MappingGrowth {
            pid,
            mapping: name.to_string(),
            first_rss_bytes: a,
            last_rss_bytes: b,
            growth_bytes: b as i64 - a as i64,
        })
        .filter(|m| m.growth_bytes != 0)
        .collect();
    out.sort_by_key(|m| std::cmp::Reverse(m.growth_bytes));
    out.truncate(10);
    out
}
