//! What CI systems read: the gate on the terminal and the GitHub step
//! summary, rendered through the report's document model.

use super::doc::{Block, Table, heading, para, strong};
use super::markdown;
use crate::gate::{GateResult, Rule};

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
