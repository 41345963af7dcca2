//! The short human summary printed on stderr at the end of a session, in the words of
//! `crate::phrase`.

use std::fmt::Write;

use crate::Analysis;
use crate::fit::Verdict;
use crate::fit::findings::Finding;
use crate::phrase::{
    finding_line, heap_line, jvm_classes_read, level, other_leaks, projection_line, recycle_line,
    site_rate, tree_line, verdict_line,
};
use crate::units::{counted, format_signed_bytes, format_signed_count};

/// What was watched: the runs of a command and how they exited, or the
/// target attached to and for how long (empty for `analyze`).
fn session_line(a: &Analysis) -> String {
    let mut out = String::new();
    match (&a.command_line, a.target_pid) {
        (Some(cmd), _) => {
            let _ = write!(
                out,
                "{} of `{cmd}`",
                counted(a.runs.len() as u64, "run", "runs")
            );
            match super::sections::failed_runs(a) {
                None => {
                    let _ = writeln!(out, ", all exited 0");
                }
                Some(failed) => {
                    let _ = writeln!(out, "; FAILED: {failed}");
                }
            }
        }
        (None, Some(pid)) => {
            let _ = writeln!(out, "attached to {pid} for {:.0}s", a.duration_s);
        }
        (None, None) => {
            if let Some(target) = &a.target {
                let _ = writeln!(out, "attached to {target} for {:.0}s", a.duration_s);
            }
        }
    }
    out
}

/// The summary printed on stderr at the end of a session.
pub fn render(a: &Analysis) -> String {
    let mut out = session_line(a);
    let _ = writeln!(out, "verdict: {}", a.verdict.as_str().to_uppercase());
    for f in a.headlines() {
        let _ = writeln!(out, "  {}", verdict_line(a, f));
        // A live heap no collection was seen in has no point to show.
        if f.n > 0 {
            let _ = writeln!(
                out,
                "      {} → {} over {}, {}",
                level(f, f.first),
                level(f, f.last),
                counted(f.n as u64, "point", "points"),
                counted(f.processes as u64, "process", "processes")
            );
        }
    }
    for f in other_leaks(a) {
        let _ = writeln!(out, "  {}", verdict_line(a, f));
    }
    for h in &a.heap {
        if let Some(line) = heap_line(h, jvm_classes_read(a)) {
            let _ = writeln!(out, "  {line}");
        }
    }
    if let Some(p) = &a.projection {
        let _ = writeln!(out, "  {}", projection_line(p));
    }
    let notable: Vec<&Finding> = a
        .findings
        .iter()
        .filter(|f| !matches!(f, Finding::Recycled { .. }))
        .collect();
    let recycled = a.findings.len() - notable.len();
    if !notable.is_empty() || recycled > 0 {
        let _ = writeln!(out, "findings:");
        for f in notable {
            let _ = writeln!(out, "  {}", finding_line(f));
        }
        if recycled > 0 {
            let _ = writeln!(
                out,
                "  {} ended and were replaced (see report.md)",
                counted(recycled as u64, "worker", "workers")
            );
        }
    }
    for site in a
        .sites
        .iter()
        .filter(|s| s.verdict == Verdict::Leak)
        .take(3)
    {
        let growth = match site.bytes_per_task {
            Some(t) => format!("{} per task", format_signed_bytes(t)),
            None => site_rate(a, site.bytes_per_run.unwrap_or(0.0)),
        };
        let share = site
            .share_of_anon
            .map(|f| format!(" ({:.0}% of the anon growth)", f * 100.0))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  where: {} leaks {growth} in {}{share}",
            site.site, site.scope
        );
    }
    if let Some(t) = a.types.iter().find(|t| t.verdict == Verdict::Leak) {
        let growth = match t.objects_per_task {
            Some(n) => format!("{} objects per task", format_signed_count(n)),
            None => format!(
                "{} objects/{}",
                format_signed_count(t.objects_per_run.unwrap_or(0.0)),
                if t.per_hour { "h" } else { "run" }
            ),
        };
        let _ = writeln!(out, "  type: {} leaks {growth} in {}", t.name, t.scope);
    }
    for r in &a.recycle {
        let _ = writeln!(out, "  {}", recycle_line(r));
    }
    for t in &a.trees {
        let _ = writeln!(out, "  tree {}", tree_line(t));
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
