//! What CI systems read: the gate on the terminal and the GitHub step
//! summary, rendered through the report's document model.

use super::doc::{Block, Table, heading, para, strong};
use super::markdown;
use crate::Analysis;
use crate::console::{self, Colour};
use crate::fit::{SeriesFit, Verdict};
use crate::gate::{GateResult, Rule};
use crate::units::format_bytes;

/// The line a CI log is grepped for, last on stderr: the verdict, the main
/// series' rate with its 95% CI, the gate, the exit status.
/// `leakwatch: LEAK survivors anon +4.00 MiB/run (95% CI +3.99 MiB/run … +4.01 MiB/run); no gate; exit 1`
pub fn one_line(a: &Analysis, gate: Option<&GateResult>, exit: u8) -> String {
    let on = console::colour_on();
    let verdict = a.verdict.as_str().to_uppercase();
    let colour = match a.verdict {
        Verdict::Leak => Colour::Red,
        Verdict::Inconclusive => Colour::Yellow,
        Verdict::Stable | Verdict::Plateau => Colour::Green,
    };
    let mut line = format!("leakwatch: {}", console::paint(&verdict, colour, on));
    if let Some(f) = a.verdict_series() {
        line.push_str(&format!(" {} {}", f.scope, a.label(f.metric)));
        if let Some(rate) = headline_rate(f) {
            line.push_str(&format!(" {rate}"));
        }
    }
    let gate = match gate {
        None if a.never_worked() => format!(
            "no gate; all {} runs failed ({}): fix the command, its memory says nothing",
            a.runs.len(),
            a.runs.first().map_or("", |r| r.status.as_str())
        ),
        None => "no gate".to_string(),
        Some(g) => {
            let word = if g.passed {
                console::paint("passed", Colour::Green, on)
            } else {
                console::paint("FAILED", Colour::Red, on)
            };
            match g.undecided.len() {
                0 => format!("gate {word}"),
                k => format!(
                    "gate {word} ({k} undecided, --undecided {})",
                    g.on_undecided.as_str()
                ),
            }
        }
    };
    format!("{line}; {gate}; exit {exit}")
}

/// The rate the verdict rests on, with its interval (`SeriesFit::judged_rate`,
/// as the gate judges it).
fn headline_rate(f: &SeriesFit) -> Option<String> {
    // The gate's number: one home for "the rate the verdict rests on".
    let (rate, ci) = f.judged_rate();
    let rate = rate?;
    let ci = ci.filter(|_| !f.unjudged());
    let r = |v: f64| f.x.format_rate(v, f.metric.is_bytes());
    Some(match ci {
        Some((lo, hi)) => format!("{} (95% CI {} … {})", r(rate), r(lo), r(hi)),
        None => r(rate),
    })
}

/// After a leak: where to look next, as flags to add. `None` for anything
/// but a leak.
pub fn next_steps(a: &Analysis, gated: bool) -> Option<String> {
    if a.verdict != Verdict::Leak {
        return None;
    }
    let main = a.headlines().next()?;
    let mut steps = Vec::new();
    let python = a
        .lives
        .iter()
        .find(|l| l.scope == main.scope && l.comm.starts_with("python"));
    // Asked for already when a process was found not instrumented by it.
    let asked = a
        .notes
        .iter()
        .any(|n| n.contains("not instrumented by --py-sites"));
    let traced = a
        .sites
        .iter()
        .any(|s| s.source == crate::store::SiteSource::Python);
    if let Some(life) = python.filter(|_| !asked && !traced) {
        // Attached: the running process is entered, no restart needed.
        steps.push(match a.mode() {
            "run" => "which Python line: rerun with --py-sites".to_string(),
            "attach" => format!(
                "which Python line: `leakwatch attach --py-sites {}` (no restart)",
                life.pid
            ),
            _ => "which Python line: `leakwatch run --py-sites -- <the command>`".to_string(),
        });
    }
    if main.processes > 1 && a.recycle.is_empty() && main.metric.is_bytes() {
        // A budget a little above today's level, as an example to edit.
        let budget_mib = ((main.last * 1.5) / (1024.0 * 1024.0)).ceil().max(1.0);
        steps.push(format!(
            "when to recycle a worker: --budget {budget_mib:.0}MiB (now {})",
            format_bytes(main.last)
        ));
    }
    if !gated {
        steps.push(ci_hint(a));
    }
    (!steps.is_empty()).then(|| format!("next: {}", steps.join("; ")))
}

/// The gate to paste into CI, one that fails this run: a round limit below
/// the lower end of the leaking series' 95% interval (the gate fails when
/// that end is above the limit), on the gate's default series or, when
/// another series leaked (anon beside a heap, fds), with `--gate-on` it.
fn ci_hint(a: &Analysis) -> String {
    let default = crate::gate::default_gate_on(&crate::gate::available(a));
    let gated = a
        .fit_of(default.series, default.metric)
        .filter(|f| f.verdict == Verdict::Leak)
        .map(|f| (f, String::new()))
        .or_else(|| {
            let f = a.verdict_series().filter(|f| f.verdict == Verdict::Leak)?;
            Some((f, format!(" --gate-on {}:{}", f.scope, f.metric.name())))
        });
    let limit = gated.and_then(|(f, on)| {
        let low = f.judged_rate().1?.0 * f.x.per_rate_unit();
        let limit = round_limit(low, f.metric.is_bytes())?;
        Some(format!(
            "--max-growth {limit}/{}{on} fails this run (at least {})",
            f.x.rate_unit(),
            f.x.format_limit(low / f.x.per_rate_unit(), f.metric.is_bytes())
        ))
    });
    match limit {
        Some(l) => format!("in CI: {l}; --exit-zero reports only"),
        None => "in CI: --max-growth RATE fails above a limit (--exit-zero: reports only)".into(),
    }
}

/// The largest of 1, 1.5, 2, 3, 4, 5, 6, 8 × 10^k below `v` (bytes, or a
/// count), in KiB, MiB or GiB for bytes: `400KiB`, `3MiB`, `15`; `None`
/// for nothing above zero.
fn round_limit(v: f64, bytes: bool) -> Option<String> {
    if !v.is_finite() || v <= 0.0 {
        return None;
    }
    const KIB: f64 = 1024.0;
    let (unit, scale) = match v {
        _ if !bytes => ("", 1.0),
        v if v >= KIB * KIB * KIB => ("GiB", KIB * KIB * KIB),
        v if v >= KIB * KIB => ("MiB", KIB * KIB),
        _ => ("KiB", KIB),
    };
    let x = v / scale;
    let decade = 10f64.powf(x.log10().floor());
    let step = [8.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.5, 1.0]
        .into_iter()
        .map(|m| m * decade)
        .find(|&c| c < x)
        .unwrap_or(0.8 * decade);
    let text = format!("{step:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    Some(format!("{text}{unit}"))
}

/// `gate: FAILED (95% CI rule)` and one `[ok]`/`[FAIL]`/`[undecided]` line per check.
pub fn gate_text(result: &GateResult) -> String {
    let mut out = format!(
        "gate: {} ({} rule)\n",
        if result.passed { "passed" } else { "FAILED" },
        match result.rule {
            Rule::Ci => "95% CI",
            Rule::Slope => "slope",
        }
    );
    for c in &result.checks {
        out.push_str(&format!("  [{}] {}\n", c.mark(), c.message));
    }
    out
}

/// A GitHub step summary: a heading, the terminal summary as code, and the
/// gate's checks as a table.
pub fn step_summary(title: &str, summary: Option<&str>, gate: Option<&GateResult>) -> String {
    let mut doc = vec![heading(3, title)];
    doc.extend(summary.map(|s| Block::Code(s.to_string())));
    if let Some(g) = gate {
        doc.push(para(vec![strong(format!(
            "Gate: {}",
            if g.passed { "passed" } else { "FAILED" }
        ))]));
        let rows = g
            .checks
            .iter()
            .map(|c| {
                vec![
                    match (c.undecided, c.passed) {
                        (true, _) => "❔",
                        (false, true) => "✅",
                        (false, false) => "❌",
                    }
                    .to_string(),
                    c.message.clone(),
                ]
            })
            .collect();
        doc.push(Block::Table(Table::new(["", "check"], rows)));
    }
    markdown::render(&doc)
}

#[cfg(test)]
mod tests {
    use super::round_limit;

    /// A round limit strictly below the rate: the gate it builds fails it.
    #[test]
    fn round_limits_sit_below_the_rate() {
        const KIB: f64 = 1024.0;
        assert_eq!(round_limit(489.0 * KIB, true).as_deref(), Some("400KiB"));
        assert_eq!(round_limit(4.0 * KIB * KIB, true).as_deref(), Some("3MiB"));
        assert_eq!(round_limit(1000.0 * KIB, true).as_deref(), Some("800KiB"));
        assert_eq!(
            round_limit(3.5 * KIB * KIB * KIB, true).as_deref(),
            Some("3GiB")
        );
        assert_eq!(round_limit(16.0, false).as_deref(), Some("15"));
        assert_eq!(round_limit(0.8, false).as_deref(), Some("0.6"));
        assert_eq!(round_limit(1.0, false).as_deref(), Some("0.8"));
        assert_eq!(round_limit(0.0, true), None);
        assert_eq!(round_limit(f64::NAN, true), None);
    }
}
