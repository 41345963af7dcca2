//! Per-series statistics: slope, confidence, trend, verdict. Pure functions
//! on plain data; nothing here reads /proc or writes files.

pub mod stats;

use serde::Serialize;

use crate::series::{Metric, Series, XAxis};

/// What the fit says about one series.
#[derive(Debug, Clone, Serialize)]
pub struct SeriesFit {
    pub name: String,
    pub metric: Metric,
    pub x: XAxis,
    pub n: usize,
    pub first: f64,
    pub last: f64,
    /// Least-squares slope, metric unit per x (bytes per run or per second).
    pub slope: Option<f64>,
    pub r2: Option<f64>,
    pub processes: usize,
}

pub fn fit(series: &Series) -> SeriesFit {
    let (xs, ys) = (series.xs(), series.ys());
    let line = stats::ols(&xs, &ys);
    SeriesFit {
        name: series.name.clone(),
        metric: series.metric,
        x: series.x_axis,
        n: series.points.len(),
        first: ys.first().copied().unwrap_or(0.0),
        last: ys.last().copied().unwrap_or(0.0),
        slope: line.map(|l| l.slope),
        r2: line.map(|l| l.r2),
        processes: series.processes,
    }
}

/// Everything the reports need, computed from the rows alone so that
/// `leakwatch report` rebuilds exactly what the live session wrote.
#[derive(Debug, Clone)]
pub struct Analysis {
    pub series: Vec<Series>,
    pub fits: Vec<SeriesFit>,
    pub runs: Vec<crate::series::RunRecord>,
    pub command_line: Option<String>,
    pub target_pid: Option<u32>,
    /// Seconds from the first to the last row.
    pub duration_s: f64,
    pub interrupted: bool,
    pub notes: Vec<String>,
}

impl Analysis {
    pub fn mode(&self) -> &'static str {
        if self.command_line.is_some() {
            "run"
        } else {
            "attach"
        }
    }
}

pub fn analyse(rows: &[crate::series::store::Row]) -> Analysis {
    let series = crate::series::build(rows);
    let fits = series.iter().map(fit).collect();
    let runs = crate::series::runs(rows, &series);
    let command_line = rows
        .iter()
        .find(|r| r.event.as_deref() == Some("run_start"))
        .map(|r| r.comm.clone());
    let target_pid = if command_line.is_none() {
        rows.iter().find(|r| r.scope == "target").map(|r| r.pid)
    } else {
        None
    };
    let t = |r: Option<&crate::series::store::Row>| r.map(|r| r.t_seconds).unwrap_or(0.0);
    Analysis {
        series,
        fits,
        runs,
        command_line,
        target_pid,
        duration_s: t(rows.last()) - t(rows.first()),
        interrupted: false,
        notes: Vec::new(),
    }
}
