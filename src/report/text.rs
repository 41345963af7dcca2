//! The short human summary printed on stderr at the end of a session.

use std::fmt::Write;

use crate::Analysis;
use crate::fit::SeriesFit;
use crate::series::{Metric, XAxis};
use crate::units::{format_bytes, format_signed_bytes};

/// The metrics worth a line each in the terminal; the rest are in the reports.
const HEADLINE: [Metric; 3] = [Metric::RssBytes, Metric::PssBytes, Metric::UssBytes];

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
    let width = a.fits.iter().map(|f| f.name.len()).max().unwrap_or(0);
    for f in a.fits.iter().filter(|f| HEADLINE.contains(&f.metric)) {
        let slope = match f.slope {
            Some(s) => rate(f, s),
            None => "n/a (fewer than 2 points)".to_string(),
        };
        let _ = writeln!(
            out,
            "  {:width$}  {:<4} {slope:>16}   {} → {} over {} points, {} process(es)",
            f.name,
            f.metric.label(),
            level(f, f.first),
            level(f, f.last),
            f.n,
            f.processes,
        );
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
