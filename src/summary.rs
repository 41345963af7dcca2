//! The summary.json wire types (schema_version 1, the contract in
//! docs/summary-json.md), kept apart from the in-memory model so the
//! contract changes only on purpose. `report`
//! writes them; `check` reads them back as baselines.

use serde::{Deserialize, Serialize};

use crate::Analysis;
use crate::fit::findings::{Finding, RecycleAdvice, TreeTotal};
use crate::fit::sites::{SiteFit, TypeFit};
use crate::fit::{Attribution, Projection, SeriesFit};
use crate::gate::GateResult;
use crate::series::sites::Overhead;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub schema_version: u32,
    /// `run` or `attach`.
    pub mode: String,
    /// The command line of `run` mode, as typed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The attached process of `attach` mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_pid: Option<u32>,
    /// What was attached to when it is not one PID: `cgroup /sys/fs/…`,
    /// `processes matching 'regex' (all, matched at each sample)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `analyze --prometheus`: the label set of each `series:<N>` name, as
    /// PromQL writes it (`{job="api",pod="api-7d9f"}`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub series_labels: std::collections::BTreeMap<String, String>,
    /// Runs completed (run mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<u32>,
    /// Seconds from the first to the last sample.
    pub duration_s: f64,
    pub interrupted: bool,
    /// The worst verdict over the followed processes' memory, fds and threads:
    /// `leak`, `inconclusive`, `plateau` or `stable`.
    pub verdict: String,
    /// Warm-up handling: `auto` (detected per series) or the `--warmup` given.
    pub warmup: WarmupJson,
    /// Every fitted series (scope `name`, `metric`, `x`, slope with its CI, verdict …).
    pub series: Vec<SeriesFit>,
    /// Where the growth is, per followed scope.
    #[serde(default)]
    pub attribution: Vec<Attribution>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<Projection>,
    /// Process-tree findings: `cow_unsharing`, `leak` (in workers), `recycled`.
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// PSS sum vs RSS sum of each multi-process scope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trees: Vec<TreeTotal>,
    /// Recycle advice for worker pools under `--budget`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recycle: Vec<RecycleAdvice>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_table: Vec<RunJson>,
    /// Runs whose command did not exit 0: their points are kept (the daemon's
    /// memory after them is real) but they are listed here and in the report.
    #[serde(default)]
    pub failed_runs: Vec<u32>,
    #[serde(default)]
    pub notes: Vec<String>,
    /// Where in the code (`run --py-sites`): Python allocation sites that
    /// leak (fastest first), grew and stopped, or hold much.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub py_sites: Vec<SiteFit>,
    /// Which types grow (`run --py-sites`): live Python objects by type
    /// that leak (classes of a module first), grew and stopped, or are many.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub py_types: Vec<TypeFit>,
    /// tracemalloc's own memory in each scope's Python processes, bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub py_overhead: Vec<Overhead>,
    /// What sampling cost and achieved (attach mode): samples taken and the
    /// mean interval between them, late samples, the cheap sweep's time,
    /// deep passes, page walks, their time and the longest single walk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<crate::store::SamplingCost>,
    /// The CI gate, when limits were given: `passed`, the `rule`, each
    /// check and the `violations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmupJson {
    /// `auto` or `fixed`.
    pub mode: String,
    /// Points trimmed from the headline series (the first of `series` judged).
    pub trimmed: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunJson {
    pub run: u32,
    pub pid: u32,
    pub status: String,
    pub exit_code: Option<i32>,
    pub duration_s: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
}

/// The summary of an analysis and, when a gate was given, its result.
pub fn summary(a: &Analysis, gate: Option<&GateResult>) -> Summary {
    Summary {
        schema_version: SCHEMA_VERSION,
        mode: a.mode().to_string(),
        command: a.command_line.clone(),
        target_pid: a.target_pid,
        target: a.target.clone(),
        series_labels: a
            .labels
            .iter()
            .map(|(i, l)| (crate::store::Scope::Series(*i).to_string(), l.clone()))
            .collect(),
        runs: (!a.runs.is_empty()).then_some(a.runs.len() as u32),
        duration_s: a.duration_s,
        interrupted: a.interrupted,
        verdict: a.verdict.as_str().to_string(),
        warmup: WarmupJson {
            mode: if a.options.warmup.is_some() {
                "fixed"
            } else {
                "auto"
            }
            .to_string(),
            trimmed: a.headlines().next().map(|f| f.warmup).unwrap_or(0),
        },
        attribution: a.attribution.clone(),
        projection: a.projection.clone(),
        findings: a.findings.clone(),
        trees: a.trees.clone(),
        recycle: a.recycle.clone(),
        series: a.fits.clone(),
        run_table: a
            .runs
            .iter()
            .map(|r| RunJson {
                run: r.run,
                pid: r.pid,
                status: r.status.clone(),
                exit_code: r.exit_code,
                duration_s: r.duration_s,
                peak_rss_bytes: r.peak_rss_bytes,
            })
            .collect(),
        failed_runs: a
            .runs
            .iter()
            .filter(|r| r.failed())
            .map(|r| r.run)
            .collect(),
        notes: a.notes.clone(),
        py_sites: a.sites.clone(),
        py_types: a.py_types.clone(),
        py_overhead: a.py_overhead.clone(),
        sampling: a.sampling.clone(),
        gate: gate.cloned(),
    }
}
