//! `leakwatch check`: compare a fresh summary.json against a committed one
//! (a baseline): reading both, picking the series to compare, judging.
//!
//! A regression is significant when the current end rate's 95% CI lies wholly
//! above the baseline's CI widened by the tolerance and by the practical
//! threshold (64 KiB per run or per hour): two noisy runs of the same code
//! overlap and pass. Peaks regress when they exceed the baseline's by more
//! than the tolerance; they are compared only for runs of at least 0.5 s
//! (a shorter command is over before polls see its peak reliably).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::fit::MIN_SLOPE_BYTES;
use crate::gate::{self, Check, GateOn, GateResult, Rule};
use crate::store::Scope;
use crate::summary::{SCHEMA_VERSION, Series, Summary};
use crate::units::format_bytes;

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("cannot read {path}: {error}")]
    Read { path: PathBuf, error: io::Error },
    #[error(
        "{path} is not a leakwatch summary.json (schema_version 1 or {SCHEMA_VERSION}): {why}; \
         rebuild it with `leakwatch report`"
    )]
    NotSummary { path: PathBuf, why: String },
    #[error(
        "the baseline comes from `leakwatch {baseline}`, this summary from `leakwatch {current}`; \
         compare sessions of the same mode (save a baseline from a {current} session)"
    )]
    ModeMismatch { current: String, baseline: String },
}

/// Reads a summary.json written by `leakwatch`: this version's, or a version 1 file (a
/// baseline from before schema_version 2), read as version 2 (`summary::v1`).
pub fn read_summary(path: &Path) -> Result<Summary, CheckError> {
    let text = fs::read_to_string(path).map_err(|error| CheckError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let not = |why: String| CheckError::NotSummary {
        path: path.to_path_buf(),
        why,
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| not(e.to_string()))?;
    let value = match value
        .get("schema_version")
        .and_then(serde_json::Value::as_u64)
    {
        Some(1) => {
            crate::summary::v1::upgrade(value).map_err(|e| not(format!("version 1: {e}")))?
        }
        Some(v) if v == u64::from(SCHEMA_VERSION) => value,
        Some(v) => return Err(not(format!("it has schema_version {v}"))),
        None => return Err(not("it has no schema_version".into())),
    };
    serde_json::from_value(value).map_err(|e| not(e.to_string()))
}

/// A baseline judges only a run of the same kind: per run against per run,
/// over time against over time.
pub fn same_mode(current: &Summary, baseline: &Summary) -> Result<(), CheckError> {
    if current.mode == baseline.mode {
        return Ok(());
    }
    Err(CheckError::ModeMismatch {
        current: current.mode.clone(),
        baseline: baseline.mode.clone(),
    })
}

/// What a baseline gated, else the default gated series of its summary.
pub fn baseline_targets(base: &Summary) -> Vec<GateOn> {
    let mut targets: Vec<GateOn> = Vec::new();
    for c in base.gate.iter().flat_map(|g| g.checks.iter()) {
        if let Some(metric) = crate::series::Metric::from_name(&c.metric)
            && !c.name.starts_with("peak")
        {
            let on = GateOn {
                series: c.series,
                metric,
            };
            if !targets.contains(&on) {
                targets.push(on);
            }
        }
    }
    if targets.is_empty() {
        let available: Vec<(Scope, _, usize)> = base
            .series
            .iter()
            .map(|s| (s.name, s.metric, s.n))
            .collect();
        targets.push(gate::default_gate_on(&available));
    }
    targets
}

fn find<'a>(s: &'a Summary, on: &GateOn) -> Option<&'a Series> {
    s.series
        .iter()
        .find(|x| x.name == on.series && x.metric == on.metric)
}

/// Compares the series both summaries have (`targets`) and the runs' peaks.
pub fn compare(
    current: &Summary,
    baseline: &Summary,
    tolerance: f64,
    targets: &[GateOn],
) -> GateResult {
    let mut checks: Vec<Check> = targets
        .iter()
        .map(|on| compare_series(current, baseline, tolerance, on))
        .collect();
    checks.extend(compare_peak(current, baseline, tolerance));
    GateResult::from_checks(Rule::Ci, checks)
}

/// The process a watched series (`pid:<PID>`) of one summary follows, in
/// the other: the series of the same process name (`watched`), when one
/// has it; for summaries without names, the only watched series of each.
/// A restarted service has a new PID, not a new name.
fn same_process(from: &Summary, to: &Summary, series: Scope) -> Option<Scope> {
    let pids = |s: &Summary| -> Vec<Scope> {
        let mut v: Vec<Scope> = s
            .series
            .iter()
            .map(|f| f.name)
            .filter(|sc| matches!(sc, Scope::Pid(_)))
            .collect();
        v.dedup();
        v
    };
    let comm = from.watched.iter().find(|w| w.name == series);
    match comm {
        Some(w) => {
            let same: Vec<Scope> = to
                .watched
                .iter()
                .filter(|o| o.comm == w.comm && o.name != series)
                .map(|o| o.name)
                .collect();
            (same.len() == 1).then(|| same[0])
        }
        None => {
            let (a, b) = (pids(from), pids(to));
            (from.watched.is_empty() && a == [series] && b.len() == 1).then(|| b[0])
        }
    }
}

/// A regression when the current end rate's CI lies wholly above the
/// baseline's CI widened by the tolerance and the practical threshold.
fn compare_series(current: &Summary, baseline: &Summary, tolerance: f64, on: &GateOn) -> Check {
    let name = format!("{} {} vs baseline", on.series, on.metric.name());
    // A watched process restarted since the baseline: matched by its name.
    let (mut cur_on, mut base_on, mut matched) = (*on, *on, None);
    if matches!(on.series, Scope::Pid(_)) {
        if find(current, on).is_none()
            && let Some(now) = same_process(baseline, current, on.series)
        {
            cur_on.series = now;
            matched = Some((on.series, now));
        } else if find(baseline, on).is_none()
            && let Some(then) = same_process(current, baseline, on.series)
        {
            base_on.series = then;
            matched = Some((then, on.series));
        }
    }
    let matched = matched.map_or_else(String::new, |(then, now)| {
        let comm = current
            .watched
            .iter()
            .find(|w| w.name == now)
            .map_or(String::new(), |w| format!(" ({})", w.comm));
        format!(" [{then} of the baseline is {now}{comm} now: the same process name]")
    });
    let (Some(cur), Some(base)) = (find(current, &cur_on), find(baseline, &base_on)) else {
        return Check {
            name,
            series: on.series,
            metric: on.metric.name().into(),
            limit: format!("baseline +{:.0}%", tolerance * 100.0),
            passed: false,
            undecided: false,
            message: format!(
                "{} {} is missing from the {}; compare runs of the same command{}",
                on.series,
                on.metric.name(),
                if find(current, &cur_on).is_none() {
                    "current run"
                } else {
                    "baseline"
                },
                if matches!(on.series, Scope::Pid(_)) {
                    " (a watched process is matched across restarts by its name when one \
                     process of that name is watched on each side)"
                } else {
                    ""
                }
            ),
        };
    };
    let abs = if on.metric.is_bytes() {
        MIN_SLOPE_BYTES / cur.x.per_rate_unit()
    } else {
        0.0
    };
    // The rate the verdict rests on and its CI, as the gate judges them.
    let rate = |f: &Series| f.end_rate.map(|e| e.rate);
    let interval = |f: &Series| f.end_rate.map(|e| e.ci95);
    let base_hi = interval(base)
        .map(|c| c.1)
        .or(rate(base))
        .unwrap_or(0.0)
        .max(0.0);
    let allowed = base_hi * (1.0 + tolerance) + abs;
    let cur_lo = interval(cur).map(|c| c.0).or(rate(cur)).unwrap_or(0.0);
    let fmt = |v: f64| cur.x.format_limit(v, on.metric.is_bytes());
    Check {
        name,
        series: on.series,
        metric: on.metric.name().into(),
        limit: fmt(allowed),
        passed: cur_lo <= allowed,
        undecided: false,
        message: format!(
            "{} {}: rate {} (CI from {}) vs baseline {} (CI up to {}); allowed up to {}{matched}",
            cur_on.series,
            on.metric.name(),
            fmt(rate(cur).unwrap_or(0.0)),
            fmt(cur_lo),
            fmt(rate(base).unwrap_or(0.0)),
            fmt(base_hi),
            fmt(allowed)
        ),
    }
}

/// Peaks regress when above the baseline's by more than the tolerance;
/// compared only when runs last long enough for a reliable peak.
fn compare_peak(current: &Summary, baseline: &Summary, tolerance: f64) -> Option<Check> {
    // A run shorter than this is over before polling can see its peak
    // reliably; comparing such peaks would make the gate flaky.
    const MIN_RUN_S: f64 = 0.5;
    let peak = |s: &Summary| s.run_table.iter().filter_map(|r| r.peak_rss_bytes).max();
    let median_duration = |s: &Summary| {
        let mut d: Vec<f64> = s.run_table.iter().filter_map(|r| r.duration_s).collect();
        d.sort_by(f64::total_cmp);
        d.get(d.len() / 2).copied().unwrap_or(0.0)
    };
    let check = |limit: String, passed: bool, message: String| Check {
        name: "peak RSS vs baseline".into(),
        series: Scope::Command,
        metric: "rss_bytes".into(),
        limit,
        passed,
        undecided: false,
        message,
    };
    let short = median_duration(current).min(median_duration(baseline));
    if !current.run_table.is_empty() && short < MIN_RUN_S {
        return Some(check(
            "not compared".into(),
            true,
            format!(
                "peak RSS not compared: runs last {:.0} ms (median), too short for a reliable \
                 peak; gate it with --max-peak on the run if it matters",
                short * 1000.0
            ),
        ));
    }
    let (cur, base) = (peak(current)?, peak(baseline)?);
    let allowed = base as f64 * (1.0 + tolerance);
    Some(check(
        format_bytes(allowed),
        cur as f64 <= allowed,
        format!(
            "peak RSS of a run {} vs baseline {}; allowed up to {}",
            format_bytes(cur as f64),
            format_bytes(base as f64),
            format_bytes(allowed)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::Metric;

    const MIB: f64 = 1024.0 * 1024.0;

    /// A run summary with one survivors anon series and runs of `run_s` seconds, written as
    /// version 1 wrote it before `end_rate` existed (a line), read as version 2.
    fn summary(slope_mib: f64, ci_mib: (f64, f64), peak: u64, run_s: f64) -> Summary {
        let json = serde_json::json!({
            "schema_version": 1, "mode": "run", "duration_s": 10.0, "interrupted": false,
            "verdict": "leak", "warmup": {"mode": "auto", "trimmed": 0},
            "series": [{
                "name": "survivors", "metric": "anon_bytes", "x": "run", "n": 10,
                "first": 1e8, "last": 1.4e8, "slope": slope_mib * MIB,
                "slope_ci95": [ci_mib.0 * MIB, ci_mib.1 * MIB], "robust_slope": null,
                "trend_p": null, "r2": null, "growth_pct_per_x": null, "tail_slope": null,
                "verdict": "leak", "warmup": 0, "runs_needed": null, "reason": "",
                "processes": 1
            }],
            "run_table": (1..=3).map(|run| serde_json::json!({
                "run": run, "pid": 100 + run, "status": "exit:0", "exit_code": 0,
                "duration_s": run_s, "peak_rss_bytes": peak
            })).collect::<Vec<_>>()
        });
        serde_json::from_value(crate::summary::v1::upgrade(json).unwrap()).unwrap()
    }

    fn on() -> GateOn {
        GateOn {
            series: Scope::Survivors,
            metric: Metric::AnonBytes,
        }
    }

    /// `summary`'s series as `pid:PID`, watched under the process name `comm`
    /// (none: a summary written before `watched`).
    fn watched(pid: u32, comm: Option<&str>) -> Summary {
        let mut s = summary(1.0, (0.9, 1.1), 100 << 20, 1.0);
        s.series[0].name = Scope::Pid(pid);
        s.watched = comm
            .map(|c| {
                vec![crate::summary::Watched {
                    name: Scope::Pid(pid),
                    comm: c.into(),
                }]
            })
            .unwrap_or_default();
        s
    }

    /// A service restarted since its baseline has a new PID: its series is
    /// matched by the process's name (or, in summaries without names, as the
    /// only watched one on each side), and said so; another name is not.
    #[test]
    fn a_restarted_watched_process_is_matched_by_its_name() {
        let on = GateOn {
            series: Scope::Pid(100),
            metric: Metric::AnonBytes,
        };
        let base = watched(100, Some("python3"));
        let r = compare(&watched(200, Some("python3")), &base, 0.1, &[on]);
        assert!(r.passed, "{:?}", r.checks);
        let m = &r.checks[0].message;
        assert!(
            m.contains("pid:100 of the baseline is pid:200 (python3) now"),
            "{m}"
        );
        let r = compare(&watched(200, Some("java")), &base, 0.1, &[on]);
        assert!(!r.passed);
        assert!(r.checks[0].message.contains("missing from the current run"));
        let r = compare(&watched(200, None), &watched(100, None), 0.1, &[on]);
        assert!(r.passed, "{:?}", r.checks);
    }

    #[test]
    fn a_regression_is_a_ci_wholly_above_the_baselines() {
        let base = summary(1.0, (0.9, 1.1), 100 << 20, 1.0);
        // (current slope, CI, passes) against CI up to 1.1 MiB/run, +10%, +64 KiB.
        let cases = [
            ((1.0, (0.9, 1.1)), true),
            ((1.3, (1.2, 1.4)), true),
            ((1.4, (1.3, 1.5)), false),
            ((4.0, (3.9, 4.1)), false),
            ((0.0, (-0.1, 0.1)), true),
        ];
        for ((slope, ci), passes) in cases {
            let cur = summary(slope, ci, 100 << 20, 1.0);
            let r = compare(&cur, &base, 0.10, &[on()]);
            assert_eq!(
                r.checks[0].passed, passes,
                "{slope}: {}",
                r.checks[0].message
            );
        }
    }

    #[test]
    fn peaks_are_compared_only_for_runs_long_enough_to_see_them() {
        let base = summary(1.0, (0.9, 1.1), 100 << 20, 1.0);
        let bigger = summary(1.0, (0.9, 1.1), 120 << 20, 1.0);
        let r = compare(&bigger, &base, 0.10, &[on()]);
        assert!(!r.checks[1].passed, "{}", r.checks[1].message);
        let short = summary(1.0, (0.9, 1.1), 120 << 20, 0.01);
        let r = compare(&short, &base, 0.10, &[on()]);
        assert!(r.checks[1].passed);
        assert!(
            r.checks[1].message.contains("not compared"),
            "{}",
            r.checks[1].message
        );
    }

    #[test]
    fn a_series_missing_on_either_side_fails_and_says_which() {
        let base = summary(1.0, (0.9, 1.1), 100 << 20, 1.0);
        let mut cur = base.clone();
        cur.series.clear();
        let r = compare(&cur, &base, 0.10, &[on()]);
        assert!(!r.passed);
        assert!(r.checks[0].message.contains("missing from the current run"));
    }

    /// A version 1 baseline's line is the rate the gate judges; this version's file reads
    /// back as written; a later version is refused, saying which.
    #[test]
    fn baselines_of_either_version_are_read_and_another_schema_or_mode_is_an_error() {
        let base = summary(1.0, (0.9, 1.1), 100 << 20, 1.0);
        let end = base.series[0].end_rate.unwrap();
        assert_eq!((end.rate, end.ci95), (MIB, (0.9 * MIB, 1.1 * MIB)));
        assert_eq!(end.from, crate::fit::RateFrom::Line);
        assert_eq!(base.series[0].line.as_ref().map(|l| l.slope), Some(MIB));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("summary.json");
        fs::write(&path, serde_json::to_string(&base).unwrap()).unwrap();
        assert_eq!(read_summary(&path).unwrap(), base);
        let mut future = base.clone();
        future.schema_version = 3;
        fs::write(&path, serde_json::to_string(&future).unwrap()).unwrap();
        let err = read_summary(&path).unwrap_err().to_string();
        assert!(err.contains("schema_version 3"), "{err}");
        let run = summary(1.0, (0.9, 1.1), 100 << 20, 1.0);
        let mut attach = run.clone();
        attach.mode = "attach".into();
        assert!(same_mode(&run, &run).is_ok());
        let err = same_mode(&run, &attach).unwrap_err().to_string();
        assert!(err.contains("`leakwatch attach`"), "{err}");
    }

    #[test]
    fn baseline_targets_default_to_the_verdicts_own_series() {
        let base = summary(1.0, (0.9, 1.1), 100 << 20, 1.0);
        assert_eq!(baseline_targets(&base), vec![on()]);
    }
}
