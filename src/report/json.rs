//! The summary.json wire types (schema_version 1, see DESIGN.md), kept apart
//! from the in-memory model so the contract changes only on purpose.

use serde::{Deserialize, Serialize};

use crate::Analysis;

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
    pub series: Vec<SeriesJson>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_table: Vec<RunJson>,
    /// Runs whose command did not exit 0: their points are kept (the daemon's
    /// memory after them is real) but they are listed here and in the report.
    #[serde(default)]
    pub failed_runs: Vec<u32>,
    #[serde(default)]
    pub notes: Vec<String>,
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
    pub slope: Option<f64>,
    pub r2: Option<f64>,
    /// Largest number of processes summed into one point.
    pub processes: usize,
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
                r2: f.r2,
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
    }
}
