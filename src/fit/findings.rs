//! Process-tree findings: copy-on-write unsharing in forked children, leaks
//! in workers (pooled over recycled workers), recycled workers with their
//! lifetime, recycle advice, and tree totals (PSS sum vs RSS sum).
//!
//! Copy-on-write: a forked child starts sharing its parent's pages. When it
//! writes one (CPython's gc writes every object header it visits), the
//! kernel copies the page: the child's Private_Dirty rises and its
//! Shared_Dirty falls by the same amount while its RSS stays flat — memory
//! moved from "shared" to "private", nothing new was allocated. A leak raises
//! RSS. `gc.freeze()` before fork moves the inherited objects out of the
//! collector's reach and prevents most of it.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{MIN_SLOPE_BYTES, stats};
use crate::series::store::{Row, Tier};
use crate::series::{self, ProcessLife, XAxis, row_x};

/// Unsharing smaller than this (or than 2% of the process's RSS) is noise.
const MIN_UNSHARED_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// A forked child unshared `bytes` of its parent's pages.
    CowUnsharing {
        scope: String,
        pid: u32,
        comm: String,
        /// Bytes that moved from shared to private (min of the Private_Dirty
        /// rise and the shared fall).
        bytes: u64,
        private_dirty_change_bytes: i64,
        shared_change_bytes: i64,
        rss_change_bytes: i64,
    },
    /// Workers of a tree grow while they live: the slope within each
    /// worker's lifetime, pooled over workers (recycled ones included).
    Leak {
        scope: String,
        /// The worker that grew most.
        pid: u32,
        pids: Vec<u32>,
        comm: String,
        /// RSS growth per x (run/task or second) within a worker's life.
        bytes_per_x: f64,
        bytes_per_x_ci95: Option<(f64, f64)>,
        x: XAxis,
        /// RSS of a fresh worker (median of the workers' first samples).
        fresh_rss_bytes: f64,
    },
    /// A worker that ended while the tree was sampled (and maybe was replaced).
    Recycled {
        scope: String,
        pid: u32,
        comm: String,
        /// x of its first and last sample (run numbers or seconds).
        first_x: f64,
        last_x: f64,
        /// RSS when last seen: what it held when it went.
        last_rss_bytes: u64,
        x: XAxis,
    },
}

/// Memory of a tree: PSS adds up, RSS double counts what is shared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeTotal {
    pub scope: String,
    pub processes: usize,
    pub pss_sum_bytes: u64,
    pub rss_sum_bytes: u64,
    /// RSS sum − PSS sum: shared pages counted once per process mapping them.
    pub double_counted_bytes: u64,
}

/// Recycle advice for a pool under `--budget`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecycleAdvice {
    pub scope: String,
    pub budget_bytes: u64,
    /// Recycle a worker after this many runs/tasks (x = run) or seconds
    /// (x = seconds): max-tasks-per-child, maximum_uses, max_requests.
    pub recycle_after_x: f64,
    pub x: XAxis,
    /// The cost side: worker restarts per 100 x (runs, tasks or seconds).
    pub restarts_per_100_x: f64,
}

fn cow(scope: &str, life: &ProcessLife) -> Option<Finding> {
    let deep: Vec<&&Row> = life.rows.iter().filter(|r| r.tier == Tier::Deep).collect();
    let (first, last) = (deep.first()?, deep.last()?);
    let diff =
        |f: fn(&Row) -> Option<u64>| -> Option<i64> { Some(f(last)? as i64 - f(first)? as i64) };
    let d_private = diff(|r| r.private_dirty_bytes)?;
    let d_shared = diff(|r| r.shared_bytes)?;
    let d_rss = diff(|r| r.rss_bytes)?;
    let unshared = d_private.min(-d_shared).max(0) as u64;
    let floor = MIN_UNSHARED_BYTES.max(first.rss_bytes.unwrap_or(0) / 50);
    // Mostly a move from shared to private, with RSS roughly flat.
    let is_cow = unshared >= floor
        && unshared as f64 >= 0.5 * d_private as f64
        && (d_rss as f64) < 0.5 * unshared as f64;
    is_cow.then(|| Finding::CowUnsharing {
        scope: scope.to_string(),
        pid: life.pid,
        comm: life.comm.clone(),
        bytes: unshared,
        private_dirty_change_bytes: d_private,
        shared_change_bytes: d_shared,
        rss_change_bytes: d_rss,
    })
}

/// Within-worker slope pooled over workers (a fixed-effects regression:
/// each worker has its own intercept, all share the slope), with a Student t
/// 95% CI on N − G − 1 degrees of freedom.
fn pooled_slope(workers: &[Vec<(f64, f64)>]) -> Option<(f64, (f64, f64))> {
    let (mut sxy, mut sxx, mut n, mut groups) = (0.0, 0.0, 0usize, 0usize);
    for pts in workers.iter().filter(|p| p.len() >= 2) {
        let k = pts.len() as f64;
        let mx = pts.iter().map(|p| p.0).sum::<f64>() / k;
        let my = pts.iter().map(|p| p.1).sum::<f64>() / k;
        sxx += pts.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
        sxy += pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>();
        n += pts.len();
        groups += 1;
    }
    let df = n.checked_sub(groups + 1).filter(|d| *d >= 1)? as f64;
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let mut sse = 0.0;
    for pts in workers.iter().filter(|p| p.len() >= 2) {
        let k = pts.len() as f64;
        let mx = pts.iter().map(|p| p.0).sum::<f64>() / k;
        let my = pts.iter().map(|p| p.1).sum::<f64>() / k;
        sse += pts
            .iter()
            .map(|p| (p.1 - my - slope * (p.0 - mx)).powi(2))
            .sum::<f64>();
    }
    let se = (sse / df / sxx).sqrt();
    let t = stats::student_t_quantile(0.975, df);
    Some((slope, (slope - t * se, slope + t * se)))
}

/// Findings, tree totals and recycle advice for every followed scope.
pub fn analyse(
    rows: &[Row],
    scopes: &[String],
    x: XAxis,
    budget_bytes: Option<u64>,
) -> (Vec<Finding>, Vec<TreeTotal>, Vec<RecycleAdvice>) {
    let mut findings = Vec::new();
    let mut totals = Vec::new();
    let mut advice = Vec::new();
    let last_x_overall = rows
        .iter()
        .filter(|r| r.is_process_sample())
        .map(|r| row_x(r, x))
        .fold(f64::MIN, f64::max);
    for scope in scopes.iter().filter(|s| s.as_str() != "command") {
        let lives = series::processes(rows, scope);
        let pids: BTreeSet<u32> = lives.iter().map(|l| l.pid).collect();
        // Workers: processes whose parent is in the same tree.
        let workers: Vec<&ProcessLife> = lives.iter().filter(|l| pids.contains(&l.ppid)).collect();

        findings.extend(workers.iter().filter_map(|l| cow(scope, l)));

        for w in &workers {
            let last = w.rows.last().map(|r| row_x(r, x)).unwrap_or(0.0);
            if last < last_x_overall {
                findings.push(Finding::Recycled {
                    scope: scope.clone(),
                    pid: w.pid,
                    comm: w.comm.clone(),
                    first_x: w.rows.first().map(|r| row_x(r, x)).unwrap_or(0.0),
                    last_x: last,
                    last_rss_bytes: w.rows.last().and_then(|r| r.rss_bytes).unwrap_or(0),
                    x,
                });
            }
        }

        let series: Vec<Vec<(f64, f64)>> = workers
            .iter()
            .map(|w| w.points(scope, x, |r| r.rss_bytes))
            .collect();
        let threshold = match x {
            XAxis::Run => MIN_SLOPE_BYTES,
            XAxis::Seconds => MIN_SLOPE_BYTES / 3600.0,
        };
        // Growing, and still growing late in each worker's life: a one-off
        // step (a task's first allocation, a cache) is not a leak. Same
        // "second half at least half as fast" rule as the verdicts.
        let tails: Vec<Vec<(f64, f64)>> =
            series.iter().map(|p| p[p.len() / 2..].to_vec()).collect();
        let still_growing =
            |slope: f64| pooled_slope(&tails).is_some_and(|(_, tail_ci)| tail_ci.0 > slope / 2.0);
        if let Some((slope, ci)) = pooled_slope(&series)
            && ci.0 > threshold
            && still_growing(slope)
        {
            let mut fresh: Vec<f64> = series
                .iter()
                .filter_map(|p| p.first().map(|q| q.1))
                .collect();
            let fresh_rss = stats::median(&mut fresh).unwrap_or(0.0);
            let grew = |p: &Vec<(f64, f64)>| {
                p.last().map(|l| l.1).unwrap_or(0.0) - p.first().map(|f| f.1).unwrap_or(0.0)
            };
            let top = workers
                .iter()
                .zip(&series)
                .max_by(|a, b| grew(a.1).total_cmp(&grew(b.1)))
                .map(|(w, _)| (w.pid, w.comm.clone()))
                .unwrap_or_default();
            findings.push(Finding::Leak {
                scope: scope.clone(),
                pid: top.0,
                pids: workers.iter().map(|w| w.pid).collect(),
                comm: top.1,
                bytes_per_x: slope,
                bytes_per_x_ci95: Some(ci),
                x,
                fresh_rss_bytes: fresh_rss,
            });
            if let Some(budget) = budget_bytes {
                let after = ((budget as f64 - fresh_rss) / slope).floor().max(0.0);
                advice.push(RecycleAdvice {
                    scope: scope.clone(),
                    budget_bytes: budget,
                    recycle_after_x: after,
                    x,
                    restarts_per_100_x: if after > 0.0 { 100.0 / after } else { 100.0 },
                });
            }
        }

        if lives.len() > 1 {
            let last_sample = rows
                .iter()
                .filter(|r| r.scope == *scope && r.tier == Tier::Deep)
                .map(|r| r.sample)
                .max();
            let at_last: Vec<&Row> = rows
                .iter()
                .filter(|r| {
                    r.scope == *scope && r.tier == Tier::Deep && Some(r.sample) == last_sample
                })
                .collect();
            let pss: u64 = at_last.iter().filter_map(|r| r.pss_bytes).sum();
            let rss: u64 = at_last.iter().filter_map(|r| r.rss_bytes).sum();
            if !at_last.is_empty() {
                totals.push(TreeTotal {
                    scope: scope.clone(),
                    processes: at_last.len(),
                    pss_sum_bytes: pss,
                    rss_sum_bytes: rss,
                    double_counted_bytes: rss.saturating_sub(pss),
                });
            }
        }
    }
    (findings, totals, advice)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_slope_ignores_the_jump_between_workers() {
        // Two workers of 5 tasks, each +2 per task, the second starting low
        // again (recycled): a plain regression would see a sawtooth.
        let w1: Vec<(f64, f64)> = (1..=5).map(|i| (i as f64, 10.0 + 2.0 * i as f64)).collect();
        let w2: Vec<(f64, f64)> = (6..=10)
            .map(|i| (i as f64, 10.0 + 2.0 * (i - 5) as f64))
            .collect();
        let (slope, ci) = pooled_slope(&[w1, w2]).unwrap();
        assert!((slope - 2.0).abs() < 1e-9);
        assert!((ci.0 - 2.0).abs() < 1e-6 && (ci.1 - 2.0).abs() < 1e-6);
    }

    fn deep(sample: u64, pid: u32, ppid: u32, rss: u64, private: u64, shared: u64) -> Row {
        Row {
            sample,
            t_seconds: sample as f64,
            scope: "target".into(),
            pid,
            ppid,
            tier: Tier::Deep,
            rss_bytes: Some(rss),
            pss_bytes: Some(private + shared / 2),
            private_dirty_bytes: Some(private),
            shared_bytes: Some(shared),
            ..Row::default()
        }
    }

    #[test]
    fn unsharing_is_told_from_allocation() {
        const M: u64 = 1 << 20;
        let rows = vec![
            deep(0, 1, 0, 100 * M, 40 * M, 60 * M),
            // worker 2 unshares 50 MiB: RSS flat
            deep(0, 2, 1, 100 * M, 2 * M, 98 * M),
            deep(1, 2, 1, 101 * M, 52 * M, 49 * M),
            // worker 3 allocates 50 MiB: RSS up, shared unchanged
            deep(0, 3, 1, 100 * M, 2 * M, 98 * M),
            deep(1, 3, 1, 150 * M, 52 * M, 98 * M),
            deep(1, 1, 0, 100 * M, 40 * M, 60 * M),
        ];
        let (findings, totals, _) = analyse(&rows, &["target".into()], XAxis::Seconds, None);
        let cow: Vec<_> = findings
            .iter()
            .filter_map(|f| match f {
                Finding::CowUnsharing { pid, bytes, .. } => Some((*pid, *bytes)),
                _ => None,
            })
            .collect();
        assert_eq!(cow, vec![(2, 49 * M)]);
        assert_eq!(totals[0].processes, 3);
        assert!(totals[0].double_counted_bytes > 0);
    }
}
