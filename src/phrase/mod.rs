//! The sentences and figures the outputs say of an analysis, on top of `crate::units`: the
//! stderr summary (`crate::report::text`), report.md and report.html
//! (`crate::report::sections`), summary.json, the fleet table and the charts take them from
//! here, so one figure reads the same everywhere. A verdict's reason is estimated as typed
//! evidence (`crate::fit::verdict::reason`) and worded in [`reason`].

pub mod reason;

use std::fmt::Write;

use crate::Analysis;
use crate::fit::findings::{Finding, RecycleAdvice, TreeTotal};
use crate::fit::heap::{HeapFinding, HeapReading};
use crate::fit::lives::PooledLives;
use crate::fit::{Attribution, DecidedBy, Projection, RateFrom, SeriesFit, Verdict};
use crate::series::{Metric, XAxis};
use crate::store::Scope;
use crate::store::{HeapSource, SiteSource};
use crate::units::{format_bytes, format_sig3, format_signed_bytes};

/// A rate in the unit a person thinks in: per run, or per hour for time.
pub fn rate(f: &SeriesFit, slope: f64) -> String {
    f.x.format_rate(slope, f.metric.is_bytes())
}

/// A level of the series' unit: bytes in binary units, or a whole count.
pub fn level(f: &SeriesFit, v: f64) -> String {
    if f.metric.is_bytes() {
        format_bytes(v)
    } else {
        format!("{v:.0}")
    }
}

/// `+4.00 MiB/run (95% CI +3.99 MiB/run … +4.01 MiB/run)`: the least-squares
/// slope and its CI (the Growth table's columns).
pub fn rate_with_ci(f: &SeriesFit) -> String {
    with_ci(f, f.slope, f.slope_ci95)
        .unwrap_or_else(|| "no slope (fewer than 2 points)".to_string())
}

fn with_ci(f: &SeriesFit, v: Option<f64>, ci: Option<(f64, f64)>) -> Option<String> {
    Some(match ci {
        Some((lo, hi)) => format!("{} (95% CI {} … {})", rate(f, v?), rate(f, lo), rate(f, hi)),
        None => rate(f, v?),
    })
}

/// How fast against its size: `3.7% of its size per run`, or over time the
/// growth across the session, `+104% in 1m00s` — a percentage per hour from
/// a session of a minute is an extrapolation nobody reads (6260%/h). The
/// rate is the one the verdict rests on (`judged_rate`) against the mean
/// level; a summary without that level: the least-squares slope's.
pub fn pct(f: &SeriesFit) -> Option<String> {
    let of_level = f
        .judged_rate()
        .0
        .filter(|_| f.mean_level > 0.0)
        .map(|rate| rate / f.mean_level * 100.0);
    let per_x = of_level.or(f.growth_pct_per_x)?;
    Some(match f.x {
        XAxis::Seconds if f.x_span < 3600.0 => format!(
            "{}{}% in {}",
            if per_x >= 0.0 { "+" } else { "" },
            format_sig3(per_x * f.x_span),
            crate::units::format_seconds(f.x_span)
        ),
        _ => format!(
            "{}% of its size per {}",
            format_sig3(per_x * f.x.per_rate_unit()),
            match f.x {
                XAxis::Run => "run",
                XAxis::Seconds => "hour",
            }
        ),
    })
}

/// Where x is, for people: `run 15`, or a time since the start.
pub fn at_x(x: XAxis, v: f64) -> String {
    match x {
        XAxis::Run => format!("run {v:.0}"),
        XAxis::Seconds => crate::units::format_seconds(v),
    }
}

/// What the verdict rests on: the headline rate of a leak (its troughs' for
/// a saw-tooth), a plateau's fill and the level it holds, a one-off step.
fn headline_rate(f: &SeriesFit) -> Option<String> {
    match (f.verdict, f.plateau) {
        (Verdict::Plateau, Some(p)) => Some(match p.fill_rate {
            // The rise up to the last change over its span: fills and flat stretches alike.
            Some(fill) => format!(
                "filled at {}{} until {}, holds {}",
                rate(f, fill),
                if f.rate_from == Some(RateFrom::AverageFill) {
                    " on average"
                } else {
                    ""
                },
                at_x(f.x, p.stop_x),
                level(f, p.level)
            ),
            None => {
                let step = f.steps.last().map_or(0.0, |s| s.bytes);
                format!(
                    "one-off step of {} at {}, holds {}",
                    format_signed_bytes(step),
                    at_x(f.x, p.stop_x),
                    level(f, p.level)
                )
            }
        }),
        (Verdict::Leak, _) if f.decided_by == DecidedBy::Troughs => with_ci(f, f.rate, f.rate_ci95)
            .map(|r| format!("{r} in its troughs (what is left after each collection)")),
        // The estimate the verdict was decided on, and its interval.
        _ if f.end_rate.is_some() => f
            .end_rate
            .and_then(|e| with_ci(f, Some(e.rate), Some(e.ci95))),
        (Verdict::Leak, _) => with_ci(f, f.rate.or(f.slope), f.rate_ci95.or(f.slope_ci95)),
        _ if f.unjudged() => f.slope.map(|s| rate(f, s)),
        _ => f.slope.map(|_| rate_with_ci(f)),
    }
}

/// One line per series: `survivors anon: leak, +4.00 MiB/run (95% CI …), 3.7% of its
/// size per run; in anon memory, most in the [heap] mapping (+9.47 MiB)`.
pub fn verdict_line(a: &Analysis, f: &SeriesFit) -> String {
    let mut line = format!("{} {}: {}", f.scope, a.label(f.metric), f.verdict.as_str());
    if let Some(r) = headline_rate(f) {
        line.push_str(&format!(", {r}"));
    }
    if let Some(p) = pct(f).filter(|_| matches!(f.verdict, Verdict::Leak | Verdict::Inconclusive)) {
        line.push_str(&format!(", {p}"));
    }
    if f.verdict == Verdict::Leak
        && let Some(at) = a
            .attribution
            .iter()
            .find(|at| at.series == f.scope && at.metric == f.metric)
        && let where_ = attribution(at)
        && !where_.is_empty()
    {
        line.push_str(&format!("; {where_}"));
    }
    match f.verdict {
        Verdict::Plateau => {
            if let Some(t) = f.end_slope {
                line.push_str(&format!("; {} at the end", rate(f, t)));
            }
        }
        Verdict::Inconclusive => {
            line.push_str(&format!("; {}", f.reason));
            line.push_str(&rerun_advice(f));
        }
        _ => {}
    }
    if f.warmup > 0 {
        line.push_str(&format!(" [warm-up: first {} left out]", f.warmup));
    }
    line
}

/// Leaks of other metrics than the headlines': shmem, fds and threads
/// (judged beside the headline metric; an fd or thread leak is a leak too).
pub fn other_leaks(a: &Analysis) -> impl Iterator<Item = &SeriesFit> {
    a.fits.iter().filter(|f| {
        f.verdict == Verdict::Leak
            && f.scope != Scope::Command
            && f.metric.judged_beside_primary()
            && !a
                .headlines()
                .any(|h| h.scope == f.scope && h.metric == f.metric)
    })
}

/// Whether the session read Java classes (`--jvm-classes`): their rows are where a JVM's
/// objects are named.
pub fn jvm_classes_read(a: &Analysis) -> bool {
    a.types.iter().any(|t| t.runtime == SiteSource::Java)
}

/// Where to look at a runtime's objects, by the source its heap came from; for a JVM, the
/// class rows where the session read them (`classes`).
fn objects_hint(h: &HeapReading, classes: bool) -> String {
    let pid = h.processes.first().map_or(0, |p| p.pid);
    match h.sources().first() {
        Some(HeapSource::Hsperfdata) if classes => "the classes below (--jvm-classes)".to_string(),
        Some(HeapSource::Hsperfdata) => format!(
            "compare two class histograms (`jcmd {pid} GC.class_histogram`) taken a while apart"
        ),
        Some(HeapSource::NodePreload | HeapSource::NodeInspector) => {
            "compare heap snapshots (Chrome DevTools' three-snapshot technique)".to_string()
        }
        Some(HeapSource::Tracemalloc) => "the lines and types below (--py-sites)".to_string(),
        Some(HeapSource::Metrics) | None => "its own heap profiler".to_string(),
    }
}

/// A runtime's heap and anon read together, in one line: what grows and
/// where to look (`classes`: `jvm_classes_read`); `None` when neither grows.
pub fn heap_line(h: &HeapReading, classes: bool) -> Option<String> {
    let runtime = h
        .sources()
        .iter()
        .map(|s| format!("{} ({})", s.runtime(), s.name()))
        .collect::<Vec<_>>()
        .join(", ");
    let per =
        |v: Option<f64>| v.map_or_else(String::new, |v| format!(" {}", h.x.format_rate(v, true)));
    let kernel = h.kernel_metric.label();
    let line = match h.finding {
        HeapFinding::Neither => return None,
        HeapFinding::Managed | HeapFinding::Both => {
            let mut line = format!(
                "{}: the heap its runtime counts, {runtime}, grows{}: objects the program keeps; {}",
                h.scope,
                per(h.heap_rate),
                objects_hint(h, classes)
            );
            if !h.kernel_leaks {
                let _ = write!(
                    line,
                    "; its {kernel} does not show it: the heap's memory was resident already \
                     (a pre-touched or grown heap)"
                );
            }
            if let (Some(x), Some(max)) = (h.x_to_max, h.heap_max_bytes) {
                let when = match h.x {
                    XAxis::Run => format!("{x:.0} runs"),
                    XAxis::Seconds => crate::units::format_seconds(x),
                };
                let _ = write!(
                    line,
                    "; at this rate it reaches the heap's maximum of {} in about {when} \
                     (out of memory)",
                    format_bytes(max)
                );
            }
            line
        }
        HeapFinding::OutsideHeap => format!(
            "{}: the heap its runtime counts, {runtime}, does not leak while its {kernel} grows{}: \
             memory outside the heap (direct buffers, native libraries and JNI, thread stacks, \
             malloc arenas); --native-sites names the native call stacks",
            h.scope,
            per(h.kernel_rate)
        ),
    };
    Some(line)
}

/// `limit 2.00 GiB reached in about 12 runs; recycle after 40 runs to stay under 512 MiB`.
pub fn projection_line(p: &Projection) -> String {
    let unit = |x: f64| match p.x {
        XAxis::Run => format!("{x:.0} runs"),
        XAxis::Seconds => crate::units::format_seconds(x),
    };
    let mut parts = Vec::new();
    if let Some(limit) = p.limit_bytes {
        parts.push(match p.x_to_limit {
            Some(x) => format!(
                "{} reaches {} in about {}",
                p.series,
                format_bytes(limit as f64),
                unit(x)
            ),
            None if p.level_bytes >= limit as f64 => format!(
                "{} {} is {} already, above {}",
                p.series,
                p.metric.label(),
                format_bytes(p.level_bytes),
                format_bytes(limit as f64)
            ),
            None => format!(
                "{} does not approach {}",
                p.series,
                format_bytes(limit as f64)
            ),
        });
    }
    if let Some(budget) = p.budget_bytes {
        parts.push(match p.recycle_after {
            Some(x) => format!(
                "recycle after {} to stay under {}",
                unit(x),
                format_bytes(budget as f64)
            ),
            // Not growing, yet over the budget: recycling cannot help.
            None if p.level_bytes >= budget as f64 => format!(
                "{} {} is {} already, over the budget of {}: recycling cannot keep it under \
                 (raise the budget)",
                p.series,
                p.metric.label(),
                format_bytes(p.level_bytes),
                format_bytes(budget as f64)
            ),
            None => format!(
                "no recycling needed for {}: {} {} is {} and does not grow",
                format_bytes(budget as f64),
                p.series,
                p.metric.label(),
                format_bytes(p.level_bytes)
            ),
        });
    }
    if p.x_to_limit.is_none() && p.recycle_after.is_none() {
        parts.push(projection_note(p));
    }
    parts.join("; ")
}

/// What a projection rests on: the fitted slope, or why there is none.
pub fn projection_note(p: &Projection) -> String {
    if p.x_to_limit.is_some() || p.recycle_after.is_some() {
        "at the fitted RSS slope".to_string()
    } else {
        format!("no projection: the series is {}", p.judged.as_str())
    }
}

/// One line per finding, for the terminal and the reports.
pub fn finding_line(f: &Finding) -> String {
    match f {
        Finding::CowUnsharing {
            pid,
            comm,
            bytes,
            private_dirty_change_bytes,
            shared_change_bytes,
            rss_change_bytes,
            ..
        } => format!(
            "pid {pid} ({comm}): copy-on-write unsharing of {} (private dirty {}, shared {}, RSS {}): \
             pages inherited from its parent became private, nothing new was allocated; not a leak",
            format_bytes(*bytes as f64),
            format_signed_bytes(*private_dirty_change_bytes as f64),
            format_signed_bytes(*shared_change_bytes as f64),
            format_signed_bytes(*rss_change_bytes as f64),
        ),
        Finding::Leak {
            scope,
            pids,
            bytes_per_x,
            bytes_per_x_ci95,
            x,
            fresh_rss_bytes,
            bytes_per_task,
            bytes_per_task_ci95,
            tasks_seen,
            ..
        } => {
            let ci = |ci: &Option<(f64, f64)>, unit: &dyn Fn(f64) -> String| {
                ci.map(|(lo, hi)| format!(" (95% CI {} … {})", unit(lo), unit(hi)))
                    .unwrap_or_default()
            };
            let per_run = |v: f64| x.format_rate(v, true);
            let per_task = |v: f64| format!("{} per task", format_signed_bytes(v));
            let workers = format!(
                "{}, fresh at {} RSS",
                crate::units::counted(pids.len() as u64, "worker", "workers"),
                format_bytes(*fresh_rss_bytes)
            );
            match bytes_per_task {
                Some(t) => format!(
                    "workers of {scope} leak {}{} handled ({tasks_seen} tasks seen; {} of the \
                     whole pool); {workers}",
                    per_task(*t),
                    ci(bytes_per_task_ci95, &per_task),
                    per_run(*bytes_per_x),
                ),
                None => format!(
                    "workers of {scope} leak {}{} while they live ({workers})",
                    per_run(*bytes_per_x),
                    ci(bytes_per_x_ci95, &per_run),
                ),
            }
        }
        Finding::Recycled {
            pid,
            comm,
            first_x,
            last_x,
            last_rss_bytes,
            x,
            ..
        } => format!(
            "pid {pid} ({comm}) ended after {} … {}, holding {} RSS",
            at_x(*x, *first_x),
            at_x(*x, *last_x),
            format_bytes(*last_rss_bytes as f64)
        ),
    }
}

/// `recycle workers of target after 5 runs to stay under 30 MiB (20 restarts per 100 runs)`.
pub fn recycle_line(r: &RecycleAdvice) -> String {
    let after = match r.x {
        XAxis::Run if r.per_task => format!("{:.0} tasks", r.recycle_after_x),
        XAxis::Run => format!("{:.0} runs (tasks)", r.recycle_after_x),
        XAxis::Seconds => crate::units::format_seconds(r.recycle_after_x),
    };
    let cost = match r.x {
        XAxis::Run if r.per_task => format!("{:.1} restarts per 100 tasks", r.restarts_per_100_x),
        XAxis::Run => format!("{:.1} restarts per 100 runs", r.restarts_per_100_x),
        XAxis::Seconds => format!("{:.1} restarts per hour", r.restarts_per_100_x * 36.0),
    };
    format!(
        "recycle workers of {} after {after} to stay under {} RSS (max-tasks-per-child / maximum_uses / max_requests); cost: {cost}",
        r.scope,
        format_bytes(r.budget_bytes as f64)
    )
}

/// `target: 4 processes, PSS sum 120 MiB, RSS sum 300 MiB (180 MiB counted more than once)`.
pub fn tree_line(t: &TreeTotal) -> String {
    format!(
        "{}: {} processes, PSS sum {}, RSS sum {} ({} of shared pages counted more than once in the RSS sum)",
        t.scope,
        t.processes,
        format_bytes(t.pss_sum_bytes as f64),
        format_bytes(t.rss_sum_bytes as f64),
        format_bytes(t.double_counted_bytes as f64)
    )
}

/// A site's growth per x as people read it: per run, or (`attach
/// --native-sites`, whose site series count x in hours) per hour.
pub(crate) fn site_rate(a: &Analysis, per_x: f64) -> String {
    if a.mode() == "run" {
        XAxis::Run.format_rate(per_x, true)
    } else {
        format!("{}/h", format_signed_bytes(per_x))
    }
}

/// The rerun that would decide an inconclusive series, as the flag to
/// type: `--repeat 34` for runs; `--duration 8m` for attach (the points
/// `runs_needed` asks for at this series' own sampling pace, rounded up
/// to a whole second under two minutes, else to a whole minute).
pub fn rerun_flag(f: &SeriesFit) -> Option<String> {
    let n = f.runs_needed?;
    match f.x {
        XAxis::Run => Some(format!("--repeat {n}")),
        XAxis::Seconds => {
            let fitted = f.n.saturating_sub(f.warmup).max(2);
            let every = f.x_span / (fitted - 1) as f64;
            let secs = n as f64 * every;
            if !(secs.is_finite() && secs > 0.0) {
                return None;
            }
            Some(if secs < 120.0 {
                format!("--duration {}s", secs.ceil())
            } else {
                format!("--duration {}m", (secs / 60.0).ceil())
            })
        }
    }
}

/// "; `--repeat 34` would decide it" (empty when nothing would).
pub fn rerun_advice(f: &SeriesFit) -> String {
    rerun_flag(f)
        .map(|flag| format!("; {flag} would decide it"))
        .unwrap_or_default()
}

/// Where a leak grows, in one phrase for the terminal: `in anon memory, most in the [heap]
/// mapping (+36.0 MiB), mainly in pid 4242 (python3)` (empty when nothing grew).
pub fn attribution(at: &Attribution) -> String {
    let mut parts = Vec::new();
    if let Some(top) = at.kinds.first().filter(|k| k.slope > 0.0) {
        parts.push(format!("in {} memory", top.metric.label()));
    }
    if let Some(m) = at.mappings.first().filter(|m| m.growth_bytes > 0) {
        parts.push(format!(
            "most in the {} mapping ({})",
            m.mapping,
            format_signed_bytes(m.growth_bytes as f64)
        ));
    }
    if at.processes.len() > 1
        && let Some(p) = at.processes.first()
    {
        parts.push(format!("mainly in pid {} ({})", p.pid, p.comm));
    }
    parts.join(", ")
}

/// `{job="api"} restarted 2 times: growth within a life, pooled over its 3 lives: +1.00 MiB/h
/// (95% CI … )`: a fleet note.
pub fn pooled_lives(p: &PooledLives, metric: Metric) -> String {
    let rate = |v: f64| XAxis::Seconds.format_rate(v, metric.is_bytes());
    format!(
        "{} restarted {}: growth within a life, pooled over its {} lives: {} (95% CI {} … {})",
        p.labels,
        crate::units::counted((p.lives - 1) as u64, "time", "times"),
        p.lives,
        rate(p.slope),
        rate(p.ci95.0),
        rate(p.ci95.1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::HeapProcess;

    /// A JVM's growing heap points to two class histograms to compare, or to the classes
    /// leakwatch read itself (`--jvm-classes`).
    #[test]
    fn a_jvms_heap_line_points_to_its_classes_where_they_were_read() {
        let h = HeapReading {
            scope: Scope::Pid(4242),
            processes: vec![HeapProcess {
                scope: Scope::Pid(4242),
                pid: 4242,
                comm: "java".into(),
                source: HeapSource::Hsperfdata,
            }],
            finding: HeapFinding::Managed,
            heap_rate: Some(786_432.0),
            kernel_metric: Metric::AnonBytes,
            kernel_rate: Some(0.0),
            kernel_leaks: false,
            heap_max_bytes: None,
            x_to_max: None,
            x: XAxis::Run,
        };
        let asked = heap_line(&h, false).unwrap_or_default();
        assert!(
            asked.contains("compare two class histograms (`jcmd 4242 GC.class_histogram`)"),
            "{asked}"
        );
        let read = heap_line(&h, true).unwrap_or_default();
        assert!(read.contains("the classes below (--jvm-classes)"), "{read}");
        assert!(!read.contains("jcmd"), "{read}");
    }
}
