//! Where growth is: which kind of memory (anon / file / shmem / swap,
//! private / shared), which process of the tree, which mappings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{SeriesFit, stats};
use crate::series::{Metric, Samples};
use crate::store::Scope;

/// Kinds a scope's growth can be split into (they add up to RSS); a
/// cgroup's kernel memory (`Metric::KERNEL`, which no RSS holds) follows them.
const PROCESS_KINDS: [Metric; 4] = [
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
}

/// Attributes the growth of `main` (a headline fit) within its scope.
pub fn attribute(main: &SeriesFit, fits: &[SeriesFit], samples: &Samples) -> Attribution {
    let scope_slope = |m: Metric| {
        fits.iter()
            .find(|f| f.scope == main.scope && f.metric == m)
            .and_then(|f| f.slope)
    };
    let mut kinds: Vec<KindGrowth> = PROCESS_KINDS
        .into_iter()
        .chain(Metric::KERNEL)
        .filter_map(|metric| scope_slope(metric).map(|slope| KindGrowth { metric, slope }))
        .collect();
    kinds.sort_by(|a, b| b.slope.total_cmp(&a.slope));
    let processes = processes(main, samples);
    let mappings = mappings(main.scope, samples);

    Attribution {
        series: main.scope,
        metric: main.metric,
        kinds,
        private_dirty_slope: scope_slope(Metric::PrivateDirtyBytes),
        shared_slope: scope_slope(Metric::SharedBytes),
        processes,
        mappings,
    }
}

/// Per-process series within the scope (the scope's metric, or RSS where a
/// process lacks it), fastest growing first.
fn processes(main: &SeriesFit, samples: &Samples) -> Vec<ProcessGrowth> {
    let mut out: Vec<ProcessGrowth> = samples
        .lives
        .iter()
        .filter(|life| life.scope == main.scope)
        .map(|life| {
            let points = life
                .points(main.metric)
                .filter(|p| !p.is_empty())
                .or_else(|| life.points(Metric::RssBytes))
                .unwrap_or_default();
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
fn mappings(scope: Scope, samples: &Samples) -> Vec<MappingGrowth> {
    let Some(snap) = samples
        .mappings
        .iter()
        .find(|m| m.scope == Some(scope) && !m.last.is_empty())
    else {
        return Vec::new();
    };
    // (pid, start time, mapping) → (rss at first, rss at last)
    let mut table: BTreeMap<(u32, u64, &str), (u64, u64)> = BTreeMap::new();
    for m in &snap.first {
        table.entry((m.pid, m.start_time, &m.name)).or_default().0 = m.rss_bytes;
    }
    for m in &snap.last {
        table.entry((m.pid, m.start_time, &m.name)).or_default().1 = m.rss_bytes;
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
