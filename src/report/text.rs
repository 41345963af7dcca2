//! The short human summary printed on stderr at the end of a session.

use std::fmt::Write;

use crate::Analysis;
use crate::fit::{Projection, SeriesFit, Verdict};
use crate::series::{Metric, XAxis};
use crate::units::{format_bytes, format_signed_bytes};

/// A rate in the unit a person thinks in: per run, or per hour for time.
pub fn rate(f: &SeriesFit, slope: f64) -> String {
    let (value, per) = match f.x {
        XAxis::Run => (slope, "run"),
        XAxis::Seconds => (slope * 3600.0, "h"),
    };
    if f.metric.is_bytes() {
        format!("{}/{per}", format_signed_bytes(value))
    } else {
        format!("{value:+.2}/{per}")
    }
}

fn level(f: &SeriesFit, v: f64) -> String {
    if f.metric.is_bytes() {
        format_bytes(v)
    } else {
        format!("{v:.0}")
    }
}

/// `+4.00 MiB/run (95% CI +3.99 MiB/run … +4.01 MiB/run)`.
pub fn rate_with_ci(f: &SeriesFit) -> String {
    match (f.slope, f.slope_ci95) {
        (Some(s), Some((lo, hi))) => {
            format!("{} (95% CI {} … {})", rate(f, s), rate(f, lo), rate(f, hi))
        }
        (Some(s), None) => rate(f, s),
        (None, _) => "no slope (fewer than 2 points)".to_string(),
    }
}

/// `3.7%/run` or `0.41%/h`.
pub fn pct(f: &SeriesFit) -> Option<String> {
    let p = f.growth_pct_per_x?;
    Some(match f.x {
        XAxis::Run => format!("{p:.2}%/run"),
        XAxis::Seconds => format!("{:.2}%/h", p * 3600.0),
    })
}

/// One line per series: `survivors: leak, +4.00 MiB/run (95% CI …), 3.7%/run, anon`.
pub fn verdict_line(a: &Analysis, f: &SeriesFit) -> String {
    let mut line = format!("{} {}: {}", f.name, f.metric.label(), f.verdict.as_str());
    if f.slope.is_some() {
        line.push_str(&format!(", {}", rate_with_ci(f)));
    }
    if let Some(p) = pct(f).filter(|_| f.verdict != Verdict::Stable) {
        line.push_str(&format!(", {p}"));
    }
    if f.verdict == Verdict::Leak
        && let Some(at) = a.attribution.iter().find(|at| at.series == f.name)
        && !at.summary.is_empty()
    {
        line.push_str(&format!(", {}", at.summary));
    }
    match f.verdict {
        Verdict::Plateau => {
            if let Some(t) = f.tail_slope {
                line.push_str(&format!("; flat at the end ({})", rate(f, t)));
            }
        }
        Verdict::Inconclusive => {
            line.push_str(&format!("; {}", f.reason));
            if let Some(n) = f.runs_needed {
                let unit = if f.x == XAxis::Run { "runs" } else { "samples" };
                line.push_str(&format!("; about {n} {unit} would decide it"));
            }
        }
        _ => {}
    }
    if f.warmup > 0 {
        line.push_str(&format!(" [warm-up: first {} left out]", f.warmup));
    }
    line
}

pub fn render(a: &Analysis) -> String {
    let mut out = String::new();
    let failed: Vec<String> = a
        .runs
        .iter()
        .filter(|r| r.failed())
        .map(|r| format!("run {} ({})", r.run, r.status))
        .collect();
    match (&a.command_line, a.target_pid) {
        (Some(cmd), _) => {
            let _ = write!(out, "{} run(s) of `{cmd}`", a.runs.len());
            if failed.is_empty() {
                let _ = writeln!(out, ", all exited 0");
            } else {
                let _ = writeln!(out, "; FAILED: {}", failed.join(", "));
            }
        }
        (None, Some(pid)) => {
            let _ = writeln!(out, "attached to {pid} for {:.0}s", a.duration_s);
        }
        (None, None) => {}
    }
    let _ = writeln!(out, "verdict: {}", a.verdict.as_str().to_uppercase());
    for f in a.headlines() {
        let _ = writeln!(out, "  {}", verdict_line(a, f));
        let _ = writeln!(
            out,
            "      {} → {} over {} points, {} process(es)",
            level(f, f.first),
            level(f, f.last),
            f.n,
            f.processes
        );
    }
    // Other metrics only when they leak (an fd or thread leak is a leak too).
    for f in a.fits.iter().filter(|f| {
        f.verdict == Verdict::Leak
            && f.name != "command"
            && !a
                .headlines()
                .any(|h| h.name == f.name && h.metric == f.metric)
            && matches!(f.metric, Metric::ShmemBytes | Metric::Fds | Metric::Threads)
    }) {
        let _ = writeln!(out, "  {}", verdict_line(a, f));
    }
    if let Some(p) = &a.projection {
        let _ = writeln!(out, "  {}", projection_line(p));
    }
    for note in &a.notes {
        let _ = writeln!(out, "note: {note}");
    }
    if a.interrupted {
        let _ = writeln!(
            out,
            "interrupted: the reports cover the samples taken so far"
        );
    }
    out
}

/// `limit 2.00 GiB reached in about 12 runs; recycle after 40 runs to stay under 512 MiB`.
pub fn projection_line(p: &Projection) -> String {
    let unit = |x: f64| match p.x {
        XAxis::Run => format!("{x:.0} runs"),
        XAxis::Seconds => format!("{:.1} h", x / 3600.0),
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
            None => format!("no recycling needed for {}", format_bytes(budget as f64)),
        });
    }
    if p.x_to_limit.is_none() && p.recycle_after.is_none() {
        parts.push(p.note.clone());
    }
    parts.join("; ")
}
