//! From rows to series: per scope (`command`, `survivors`, `pid:<PID>`,
//! `target`) and metric, one point per run or per sample.

use std::collections::BTreeMap;

use crate::store::{Row, Scope, Tier};
use crate::units::{format_bytes, format_signed_bytes};
use serde::{Deserialize, Serialize};

/// The metrics of the summary.json contract, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    RssBytes,
    PssBytes,
    UssBytes,
    SharedBytes,
    PrivateDirtyBytes,
    AnonBytes,
    FileBytes,
    ShmemBytes,
    SwapBytes,
    Fds,
    Threads,
}

impl Metric {
    pub const ALL: [Metric; 11] = [
        Metric::RssBytes,
        Metric::PssBytes,
        Metric::UssBytes,
        Metric::SharedBytes,
        Metric::PrivateDirtyBytes,
        Metric::AnonBytes,
        Metric::FileBytes,
        Metric::ShmemBytes,
        Metric::SwapBytes,
        Metric::Fds,
        Metric::Threads,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::RssBytes => "rss_bytes",
            Metric::PssBytes => "pss_bytes",
            Metric::UssBytes => "uss_bytes",
            Metric::SharedBytes => "shared_bytes",
            Metric::PrivateDirtyBytes => "private_dirty_bytes",
            Metric::AnonBytes => "anon_bytes",
            Metric::FileBytes => "file_bytes",
            Metric::ShmemBytes => "shmem_bytes",
            Metric::SwapBytes => "swap_bytes",
            Metric::Fds => "fds",
            Metric::Threads => "threads",
        }
    }

    /// Short label for humans: `RSS`, `PSS`, `fds`.
    pub fn label(self) -> &'static str {
        match self {
            Metric::RssBytes => "RSS",
            Metric::PssBytes => "PSS",
            Metric::UssBytes => "USS",
            Metric::SharedBytes => "shared",
            Metric::PrivateDirtyBytes => "private dirty",
            Metric::AnonBytes => "anon",
            Metric::FileBytes => "file",
            Metric::ShmemBytes => "shmem",
            Metric::SwapBytes => "swap",
            Metric::Fds => "fds",
            Metric::Threads => "threads",
        }
    }

    pub fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }

    pub fn is_bytes(self) -> bool {
        !matches!(self, Metric::Fds | Metric::Threads)
    }

    pub fn value(self, row: &Row) -> Option<u64> {
        match self {
            Metric::RssBytes => row.rss_bytes,
            Metric::PssBytes => row.pss_bytes,
            Metric::UssBytes => row.uss_bytes,
            Metric::SharedBytes => row.shared_bytes,
            Metric::PrivateDirtyBytes => row.private_dirty_bytes,
            Metric::AnonBytes => row.anon_bytes,
            Metric::FileBytes => row.file_bytes,
            Metric::ShmemBytes => row.shmem_bytes,
            Metric::SwapBytes => row.swap_bytes,
            Metric::Fds => row.fds,
            Metric::Threads => row.threads,
        }
    }
}

/// What the x axis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XAxis {
    Run,
    Seconds,
}

impl XAxis {
    pub fn name(self) -> &'static str {
        match self {
            XAxis::Run => "run",
            XAxis::Seconds => "seconds",
        }
    }

    pub fn from_name(name: &str) -> Option<XAxis> {
        [XAxis::Run, XAxis::Seconds]
            .into_iter()
            .find(|x| x.name() == name)
    }

    /// The unit people read rates in: per run, or per hour over time.
    pub fn rate_unit(self) -> &'static str {
        match self {
            XAxis::Run => "run",
            XAxis::Seconds => "h",
        }
    }

    /// x units in one rate unit: 1 run, or 3,600 seconds.
    pub fn per_rate_unit(self) -> f64 {
        match self {
            XAxis::Run => 1.0,
            XAxis::Seconds => 3600.0,
        }
    }

    /// A per-x value in the rate unit: `+4.00 MiB/run`, `-1.20 KiB/h`, `+0.50/h`.
    pub fn format_rate(self, per_x: f64, bytes: bool) -> String {
        let v = per_x * self.per_rate_unit();
        let unit = self.rate_unit();
        if bytes {
            format!("{}/{unit}", format_signed_bytes(v))
        } else {
            format!("{v:+.2}/{unit}")
        }
    }

    /// A limit in the rate unit, without a sign: `1.00 MiB/run`, `0.50/h`.
    pub fn format_limit(self, per_x: f64, bytes: bool) -> String {
        let v = per_x * self.per_rate_unit();
        let unit = self.rate_unit();
        if bytes {
            format!("{}/{unit}", format_bytes(v))
        } else {
            format!("{v:.2}/{unit}")
        }
    }

    /// A growth in % per x, in the rate unit: `3.70%/run`, `0.41%/h`.
    pub fn format_pct(self, pct_per_x: f64) -> String {
        format!(
            "{:.2}%/{}",
            pct_per_x * self.per_rate_unit(),
            self.rate_unit()
        )
    }

    /// What a point is: `runs` or `samples`.
    pub fn points_name(self) -> &'static str {
        match self {
            XAxis::Run => "runs",
            XAxis::Seconds => "samples",
        }
    }
}

/// One series: a scope's metric, summed over its processes, per x.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub scope: Scope,
    pub metric: Metric,
    pub x_axis: XAxis,
    /// (x, y) in x order; y in the metric's unit.
    pub points: Vec<(f64, f64)>,
    /// Largest number of processes summed into one point.
    pub processes: usize,
}

impl Series {
    pub fn ys(&self) -> Vec<f64> {
        self.points.iter().map(|p| p.1).collect()
    }
}

/// A scope's value at one sample: the sum over its processes, or `None` when
/// any process lacks the metric (a partial sum would show as a false drop).
fn sum_metric(rows: &[&Row], metric: Metric) -> Option<f64> {
    let mut total = 0u64;
    for row in rows {
        total = total.saturating_add(metric.value(row)?);
    }
    Some(total as f64)
}

/// Whether the rows come from `run` mode (they carry run numbers).
pub fn x_axis_of(rows: &[Row]) -> XAxis {
    if rows.iter().any(|r| r.run.is_some()) {
        XAxis::Run
    } else {
        XAxis::Seconds
    }
}

/// The scopes that have process samples, in report order: survivors,
/// watched pids, target, command.
pub fn scopes(rows: &[Row]) -> Vec<Scope> {
    let set: std::collections::BTreeSet<Scope> = rows
        .iter()
        .filter(|r| r.is_process_sample())
        .map(|r| r.scope)
        .collect();
    set.into_iter().collect()
}

/// Builds every (scope, metric) series that has at least one point.
///
/// In run mode a point is one run: for `command` the peak of the tree during
/// the run (max over the polled samples), for the others the sample taken
/// after the run settled (the last one of that run). In attach mode a point
/// is one sample, x in seconds since leakwatch started.
pub fn build(rows: &[Row]) -> Vec<Series> {
    let x_axis = x_axis_of(rows);
    let mut out = Vec::new();
    for scope in scopes(rows) {
        // sample number -> rows of this scope in that sample
        let mut by_sample: BTreeMap<u64, Vec<&Row>> = BTreeMap::new();
        for row in rows
            .iter()
            .filter(|r| r.scope == scope && r.is_process_sample())
        {
            by_sample.entry(row.sample).or_default().push(row);
        }
        for metric in Metric::ALL {
            // The command's series is its peak per run: only RSS has a true
            // peak (ru_maxrss); the other fields come from polls that a short
            // command may miss or catch mid-exec.
            if scope == Scope::Command && metric != Metric::RssBytes {
                continue;
            }
            let mut points: BTreeMap<i64, (f64, f64)> = BTreeMap::new();
            let mut processes = 0;
            for group in by_sample.values() {
                let Some(y) = sum_metric(group, metric) else {
                    continue;
                };
                processes = processes.max(group.len());
                match x_axis {
                    XAxis::Seconds => {
                        let x = group[0].t_seconds;
                        points.insert(points.len() as i64, (x, y));
                    }
                    XAxis::Run => {
                        let Some(run) = group[0].run else { continue };
                        let x = f64::from(run);
                        let entry = points.entry(i64::from(run)).or_insert((x, y));
                        entry.1 = if scope == Scope::Command {
                            entry.1.max(y)
                        } else {
                            y // later samples of a run replace earlier ones
                        };
                    }
                }
            }
            if !points.is_empty() {
                out.push(Series {
                    scope,
                    metric,
                    x_axis,
                    points: points.into_values().collect(),
                    processes,
                });
            }
        }
    }
    out
}

/// The x of a row: its run number in run mode, else seconds.
pub fn row_x(row: &Row, x: XAxis) -> f64 {
    match (x, row.run) {
        (XAxis::Run, Some(run)) => f64::from(run),
        _ => row.t_seconds,
    }
}

/// One process of a scope over its life: identity (pid and start time, so a
/// reused pid is another process) and its process-sample rows in order.
#[derive(Debug, Clone)]
pub struct ProcessLife<'a> {
    pub pid: u32,
    pub ppid: u32,
    pub start_time: u64,
    pub comm: String,
    pub rows: Vec<&'a Row>,
}

impl ProcessLife<'_> {
    /// The process's own series, built like the scope's (see `build`): in
    /// run mode one point per run — the peak for `command`, else the run's
    /// last sample — in time one point per sample.
    pub fn points(
        &self,
        scope: Scope,
        x: XAxis,
        value: impl Fn(&Row) -> Option<u64>,
    ) -> Vec<(f64, f64)> {
        let mut by_key: BTreeMap<i64, (f64, f64)> = BTreeMap::new();
        for row in &self.rows {
            let Some(y) = value(row) else { continue };
            let key = match (x, row.run) {
                (XAxis::Run, Some(run)) => i64::from(run),
                (XAxis::Run, None) => continue,
                (XAxis::Seconds, _) => row.sample as i64,
            };
            let y = y as f64;
            let point = by_key.entry(key).or_insert((row_x(row, x), y));
            point.1 = if scope == Scope::Command {
                point.1.max(y)
            } else {
                y
            };
        }
        by_key.into_values().collect()
    }
}

/// Every process of a scope, ordered by pid and start time.
pub fn processes<'a>(rows: &'a [Row], scope: Scope) -> Vec<ProcessLife<'a>> {
    let mut by: BTreeMap<(u32, u64), ProcessLife<'a>> = BTreeMap::new();
    for row in rows
        .iter()
        .filter(|r| r.scope == scope && r.is_process_sample())
    {
        by.entry((row.pid, row.start_time))
            .or_insert_with(|| ProcessLife {
                pid: row.pid,
                ppid: row.ppid,
                start_time: row.start_time,
                comm: row.comm.clone(),
                rows: Vec::new(),
            })
            .rows
            .push(row);
    }
    by.into_values().collect()
}

/// One run of the command, from the event rows.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub run: u32,
    pub pid: u32,
    pub exit_code: Option<i32>,
    /// `exit:N`, `signal:N`, `timeout:DUR` when it ran past `--timeout`, or
    /// `interrupted` when leakwatch was stopped mid-run.
    pub status: String,
    pub duration_s: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
}

impl RunRecord {
    /// Exited non-zero or was killed; a run cut short by Ctrl-C is not
    /// counted as failed.
    pub fn failed(&self) -> bool {
        self.exit_code != Some(0) && self.status != "interrupted"
    }
}

/// The run table: start/end events joined with the command's peak RSS.
pub fn runs(rows: &[Row], series: &[Series]) -> Vec<RunRecord> {
    let peak: BTreeMap<u32, f64> = series
        .iter()
        .find(|s| s.scope == Scope::Command && s.metric == Metric::RssBytes)
        .map(|s| s.points.iter().map(|&(x, y)| (x as u32, y)).collect())
        .unwrap_or_default();
    let mut out: BTreeMap<u32, RunRecord> = BTreeMap::new();
    let mut starts: BTreeMap<u32, f64> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.tier == Tier::Event) {
        let (Some(run), Some(event)) = (row.run, row.event.as_deref()) else {
            continue;
        };
        match event {
            "run_start" => {
                starts.insert(run, row.t_seconds);
                out.insert(
                    run,
                    RunRecord {
                        run,
                        pid: row.pid,
                        exit_code: None,
                        status: "unknown".into(),
                        duration_s: None,
                        peak_rss_bytes: peak.get(&run).map(|&p| p as u64),
                    },
                );
            }
            e if e.starts_with("run_end") => {
                if let Some(rec) = out.get_mut(&run) {
                    rec.exit_code = row.exit_code;
                    rec.status = e.trim_start_matches("run_end ").to_string();
                    rec.duration_s = starts.get(&run).map(|s| row.t_seconds - s);
                }
            }
            _ => {}
        }
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deep(sample: u64, run: u32, scope: Scope, pid: u32, rss: u64) -> Row {
        Row {
            sample,
            run: Some(run),
            pid,
            tier: Tier::Deep,
            rss_bytes: Some(rss),
            pss_bytes: Some(rss),
            ..Row::new(scope)
        }
    }

    #[test]
    fn run_series_sum_processes_and_keep_the_last_sample_of_a_run() {
        let rows = vec![
            deep(0, 1, Scope::Survivors, 10, 100),
            deep(0, 1, Scope::Survivors, 11, 50),
            deep(1, 2, Scope::Survivors, 10, 300),
            deep(2, 2, Scope::Survivors, 10, 200),
        ];
        let s = build(&rows);
        let rss = s
            .iter()
            .find(|s| s.metric == Metric::RssBytes)
            .expect("rss series");
        assert_eq!(rss.points, vec![(1.0, 150.0), (2.0, 200.0)]);
        assert_eq!(rss.processes, 2);
        assert!(!s.iter().any(|s| s.metric == Metric::UssBytes));
    }

    #[test]
    fn command_series_is_the_peak_of_the_run() {
        let mut a = deep(0, 1, Scope::Command, 10, 100);
        a.tier = Tier::Cheap;
        let mut b = deep(1, 1, Scope::Command, 10, 400);
        b.tier = Tier::Cheap;
        let c = deep(2, 1, Scope::Command, 10, 50);
        let s = build(&[a, b, c]);
        assert_eq!(s[0].points, vec![(1.0, 400.0)]);
    }

    #[test]
    fn a_partial_sample_is_not_a_point() {
        let mut denied = deep(0, 1, Scope::Survivors, 11, 50);
        denied.pss_bytes = None;
        let rows = vec![deep(0, 1, Scope::Survivors, 10, 100), denied];
        let s = build(&rows);
        assert!(s.iter().any(|s| s.metric == Metric::RssBytes));
        assert!(!s.iter().any(|s| s.metric == Metric::PssBytes));
    }
}
