//! The summary.json wire types (schema_version 1, see DESIGN.md), kept apart
//! from the in-memory model so the contract changes only on purpose.

use serde::{Deserialize, Serialize};

use crate::Analysis;
use crate::fit::findings::{Finding, RecycleAdvice, TreeTotal};
use crate::fit::{Attribution, Projection};
use crate::gate::GateResult;

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
    pub series: Vec<SeriesJson>,
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
    /// The CI gate, when limits were given: `passed`, the `rule`, each
    /// check and the `violations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesJson {
    pub name: String,
    pub metric: String,
    /// `run` or `seconds`; slopes are per x.
    pub x: String,
    pub n: usize,
    pub first: f64,
    pub last: f64,
    /// Least-squares slope per x after warm-up, with its 95% CI (Student t).
    pub slope: Option<f64>,
    pub slope_ci95: Option<(f64, f64)>,
    /// Theil–Sen slope.
    pub robust_slope: Option<f64>,
    /// Mann–Kendall two-sided p-value.
    pub trend_p: Option<f64>,
    pub r2: Option<f64>,
    pub growth_pct_per_x: Option<f64>,
    /// Slope over the second half of the points.
    pub tail_slope: Option<f64>,
    pub verdict: String,
    /// Leading points left out of the fit.
    pub warmup: usize,
    /// For `inconclusive`: about how many runs (points) would decide it.
    pub runs_needed: Option<usize>,
    pub reason: String,
    /// Largest number of processes summed into one point.
    pub processes: usize,
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

pub fn summary(a: &Analysis) -> Summary {
    Summary {
        schema_version: SCHEMA_VERSION,
        mode: a.mode().to_string(),
        command: a.command_line.clone(),
        target_pid: a.target_pid,
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
        series: a
            .fits
            .iter()
            .map(|f| SeriesJson {
                name: f.name.clone(),
                metric: f.metric.name().to_string(),
                x: f.x.name().to_string(),
                n: f.n,
                first: f.first,
                last: f.last,
                slope: f.slope,
                slope_ci95: f.slope_ci95,
                robust_slope: f.robust_slope,
                trend_p: f.trend_p,
                r2: f.r2,
                growth_pct_per_x: f.growth_pct_per_x,
                tail_slope: f.tail_slope,
                verdict: f.verdict.as_str().to_string(),
                warmup: f.warmup,
                runs_needed: f.runs_needed,
                reason: f.reason.clone(),
                processes: f.processes,
            })
            .collect(),
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
        gate: a.gate.clone(),
    }
}
