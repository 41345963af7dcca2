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

mod cow;
mod tree;
pub(crate) mod workers;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::series::{ProcessLife, Samples, XAxis};
use crate::store::Scope;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// A forked child unshared `bytes` of its parent's pages.
    CowUnsharing {
        scope: Scope,
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
        scope: Scope,
        /// The worker that grew most.
        pid: u32,
        pids: Vec<u32>,
        comm: String,
        /// RSS growth per x (run or second) within a worker's life, pooled
        /// over workers: per run of the whole pool, idle runs included.
        bytes_per_x: f64,
        bytes_per_x_ci95: Option<(f64, f64)>,
        x: XAxis,
        /// RSS of a fresh worker (median of the workers' first samples).
        fresh_rss_bytes: f64,
        /// Run mode: growth per task a worker handled (a run in which it
        /// grew), the mean over every such step of every worker.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bytes_per_task: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bytes_per_task_ci95: Option<(f64, f64)>,
        /// How many such steps (tasks handled) the workers showed.
        #[serde(default, skip_serializing_if = "is_zero")]
        tasks_seen: usize,
    },
    /// A worker that ended while the tree was sampled (and maybe was replaced).
    Recycled {
        scope: Scope,
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
    pub scope: Scope,
    pub processes: usize,
    pub pss_sum_bytes: u64,
    pub rss_sum_bytes: u64,
    /// RSS sum − PSS sum: shared pages counted once per process mapping them.
    pub double_counted_bytes: u64,
}

/// Recycle advice for a pool under `--budget`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecycleAdvice {
    pub scope: Scope,
    pub budget_bytes: u64,
    /// Recycle a worker after this many tasks (`per_task`), runs (x = run)
    /// or seconds (x = seconds): max-tasks-per-child, maximum_uses,
    /// max_requests.
    pub recycle_after_x: f64,
    pub x: XAxis,
    /// Whether `recycle_after_x` counts tasks a worker handled.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_task: bool,
    /// The cost side: worker restarts per 100 x (tasks, runs or seconds).
    pub restarts_per_100_x: f64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What the process-tree analysis found, over every followed scope.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TreeFindings {
    pub findings: Vec<Finding>,
    pub trees: Vec<TreeTotal>,
    pub recycle: Vec<RecycleAdvice>,
}

/// Findings, tree totals and recycle advice for every followed scope.
pub fn analyse(samples: &Samples, scopes: &[Scope], budget_bytes: Option<u64>) -> TreeFindings {
    let x = samples.x_axis;
    let mut out = TreeFindings::default();
    let last_x_overall = samples
        .lives
        .iter()
        .map(|l| l.last_x)
        .fold(f64::MIN, f64::max);
    for &scope in scopes.iter().filter(|&&s| s != Scope::Command) {
        let lives: Vec<&ProcessLife> = samples.lives.iter().filter(|l| l.scope == scope).collect();
        let pids: BTreeSet<u32> = lives.iter().map(|l| l.pid).collect();
        // Workers: processes whose parent is in the same tree.
        let workers: Vec<&ProcessLife> = lives
            .iter()
            .copied()
            .filter(|l| pids.contains(&l.ppid))
            .collect();
        out.findings
            .extend(workers.iter().filter_map(|l| cow::unsharing(scope, l)));
        out.findings
            .extend(workers::recycled(scope, &workers, x, last_x_overall));
        if let Some(leak) = workers::leak(scope, &workers, x) {
            out.recycle
                .extend(budget_bytes.and_then(|b| workers::recycle_advice(&leak, b)));
            out.findings.push(leak);
        }
        if lives.len() > 1 {
            out.trees.extend(tree::total(samples, scope));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Row, Tier};

    fn deep(sample: u64, pid: u32, ppid: u32, rss: u64, private: u64, shared: u64) -> Row {
        Row {
            sample,
            t_seconds: sample as f64,
            pid,
            ppid,
            tier: Tier::Deep,
            rss_bytes: Some(rss),
            pss_bytes: Some(private + shared / 2),
            private_dirty_bytes: Some(private),
            shared_bytes: Some(shared),
            ..Row::new(Scope::Target)
        }
    }

    #[test]
    fn unsharing_is_told_from_allocation() {
        const M: u64 = 1 << 20;
        // As samples.csv holds them: sample by sample.
        let rows = vec![
            deep(0, 1, 0, 100 * M, 40 * M, 60 * M),
            deep(0, 2, 1, 100 * M, 2 * M, 98 * M),
            deep(0, 3, 1, 100 * M, 2 * M, 98 * M),
            deep(1, 1, 0, 100 * M, 40 * M, 60 * M),
            // worker 2 unshares 50 MiB: RSS flat
            deep(1, 2, 1, 101 * M, 52 * M, 49 * M),
            // worker 3 allocates 50 MiB: RSS up, shared unchanged
            deep(1, 3, 1, 150 * M, 52 * M, 98 * M),
        ];
        let found = analyse(&crate::series::from_rows(rows), &[Scope::Target], None);
        let totals = found.trees;
        let cow: Vec<_> = found
            .findings
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
