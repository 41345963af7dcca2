//! `leakwatch check`: compare a fresh summary.json against a committed one.
//!
//! A regression is significant when the current slope's 95% CI lies wholly
//! above the baseline's CI widened by the tolerance and by the practical
//! threshold (64 KiB per run or per hour): two noisy runs of the same code
//! overlap and pass. Peaks regress when they exceed the baseline's by more
//! than the tolerance; they are compared only for runs of at least 0.5 s
//! (a shorter command is over before polls see its peak reliably).

use super::{Check, GateOn, GateResult, Rule};
use crate::fit::MIN_SLOPE_BYTES;
use crate::report::json::{SeriesJson, Summary};
use crate::units::format_bytes;

fn find<'a>(s: &'a Summary, on: &GateOn) -> Option<&'a SeriesJson> {
    s.series
        .iter()
        .find(|x| x.name == on.series && x.metric == on.metric.name())
}

fn per(x: &str) -> (&'static str, f64) {
    if x == "seconds" {
        ("h", 3600.0)
    } else {
        ("run", 1.0)
    }
}

/// The series both summaries gate: the baseline's own gate targets when it
/// recorded them, else the given defaults.
pub fn compare(
    current: &Summary,
    baseline: &Summary,
    tolerance: f64,
    targets: &[GateOn],
) -> GateResult {
    let mut checks = Vec::new();
    for on in targets {
        let name = format!("{} {} vs baseline", on.series, on.metric.name());
        let (Some(cur), Some(base)) = (find(current, on), find(baseline, on)) else {
            checks.push(Check {
                name,
                series: on.series.clone(),
                metric: on.metric.name().into(),
                limit: format!("baseline +{:.0}%", tolerance * 100.0),
                passed: false,
                message: format!(
                    "{} {} is missing from the {}; compare runs of the same command",
                    on.series,
                    on.metric.name(),
                    if find(current, on).is_none() {
                        "current run"
                    } else {
                        "baseline"
                    }
                ),
            });
            continue;
        };
        let (unit, scale) = per(&cur.x);
        let abs = if on.metric.is_bytes() {
            MIN_SLOPE_BYTES / scale
        } else {
            0.0
        };
        let base_hi = base
            .slope_ci95
            .map(|c| c.1)
            .or(base.slope)
            .unwrap_or(0.0)
            .max(0.0);
        let allowed = base_hi * (1.0 + tolerance) + abs;
        let cur_lo = cur.slope_ci95.map(|c| c.0).or(cur.slope).unwrap_or(0.0);
        let passed = cur_lo <= allowed;
        let fmt = |v: f64| {
            if on.metric.is_bytes() {
                format!("{}/{unit}", format_bytes(v * scale))
            } else {
                format!("{:.2}/{unit}", v * scale)
            }
        };
        checks.push(Check {
            name,
            series: on.series.clone(),
            metric: on.metric.name().into(),
            limit: fmt(allowed),
            passed,
            message: format!(
                "{} {}: slope {} (95% CI from {}) vs baseline {} (CI up to {}); allowed up to {}",
                on.series,
                on.metric.name(),
                fmt(cur.slope.unwrap_or(0.0)),
                fmt(cur_lo),
                fmt(base.slope.unwrap_or(0.0)),
                fmt(base_hi),
                fmt(allowed)
            ),
        });
    }
    let peak = |s: &Summary| s.run_table.iter().filter_map(|r| r.peak_rss_bytes).max();
    // A run shorter than this is over before polling can see its peak
    // reliably; comparing such peaks would make the gate flaky.
    const MIN_RUN_S: f64 = 0.5;
    let median_duration = |s: &Summary| {
        let mut d: Vec<f64> = s.run_table.iter().filter_map(|r| r.duration_s).collect();
        d.sort_by(f64::total_cmp);
        d.get(d.len() / 2).copied().unwrap_or(0.0)
    };
    let short = median_duration(current).min(median_duration(baseline));
    if !current.run_table.is_empty() && short < MIN_RUN_S {
        checks.push(Check {
            name: "peak RSS vs baseline".into(),
            series: "command".into(),
            metric: "rss_bytes".into(),
            limit: "not compared".into(),
            passed: true,
            message: format!(
                "peak RSS not compared: runs last {:.0} ms (median), too short for a reliable \
                 peak; gate it with --max-peak on the run if it matters",
                short * 1000.0
            ),
        });
    } else if let (Some(cur), Some(base)) = (peak(current), peak(baseline)) {
        let allowed = base as f64 * (1.0 + tolerance);
        checks.push(Check {
            name: "peak RSS vs baseline".into(),
            series: "command".into(),
            metric: "rss_bytes".into(),
            limit: format_bytes(allowed),
            passed: cur as f64 <= allowed,
            message: format!(
                "peak RSS of a run {} vs baseline {}; allowed up to {}",
                format_bytes(cur as f64),
                format_bytes(base as f64),
                format_bytes(allowed)
            ),
        });
    }
    GateResult::from_checks(Rule::Ci, checks)
}
