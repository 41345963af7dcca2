//! report.md: the document blocks as Markdown. Every outside string (process
//! names, paths, command lines) is escaped for Markdown here.

use super::doc::{Block, Inline, Table};

/// Escapes Markdown's active characters in running text.
fn md_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '`' | '*' | '<' | '>' | '|' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            _ => out.push(c),
        }
    }
    out
}

/// A code span that holds any text: the fence is one backtick longer than the longest run
/// inside it.
fn md_code(s: &str) -> String {
    let s = s.replace(['\n', '\r'], " ");
    let mut longest = 0;
    let mut run = 0;
    for c in s.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}

fn md_inline(parts: &[Inline]) -> String {
    parts
        .iter()
        .map(|p| match p {
            Inline::Text(s) => md_text(s),
            Inline::Code(s) => md_code(s),
            Inline::Strong(s) => format!("**{}**", md_text(s)),
        })
        .collect()
}

fn md_table(t: &Table, out: &mut String) {
    let row = |cells: &[String]| {
        let cells: Vec<String> = cells.iter().map(|c| md_text(c)).collect();
        format!("| {} |\n", cells.join(" | "))
    };
    out.push_str(&row(&t.headers));
    let rule: Vec<&str> = (0..t.headers.len())
        .map(|i| if t.numeric_column(i) { "---:" } else { "---" })
        .collect();
    out.push_str(&format!("|{}|\n", rule.join("|")));
    for r in &t.rows {
        out.push_str(&row(r));
    }
}

/// Renders the document as Markdown; charts link their SVG files.
pub fn render(doc: &[Block]) -> String {
    let mut out = String::new();
    for block in doc {
        match block {
            Block::Heading(level, s) => {
                out.push_str(&format!(
                    "{} {}\n",
                    "#".repeat(usize::from(*level)),
                    md_text(s)
                ));
            }
            Block::Para(parts) => {
                out.push_str(&md_inline(parts));
                out.push('\n');
            }
            Block::List(items) => {
                for item in items {
                    out.push_str(&format!("- {}\n", md_inline(item)));
                }
            }
            Block::Table(t) => md_table(t, &mut out),
            Block::Code(s) => {
                out.push_str(&format!("```\n{s}```\n"));
            }
            Block::Chart { stem, caption } => {
                let alt = md_text(caption).replace(['[', ']'], "");
                out.push_str(&format!("![{alt}]({stem}.svg)\n"));
            }
        }
        out.push('\n');
    }
    // One trailing newline, not a blank line.
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_spans_hold_backticks() {
        assert_eq!(md_code("ls -l"), "`ls -l`");
        assert_eq!(md_code("echo `date`"), "`` echo `date` ``");
    }

    #[test]
    fn text_escapes_html_and_table_pipes() {
        assert_eq!(md_text("a|b <x>"), "a\\|b \\<x\\>");
    }

    #[test]
    fn numeric_columns_are_detected() {
        let t = Table {
            headers: vec!["a".into(), "b".into()],
            rows: vec![
                vec!["x".into(), "+4.00 MiB/run".into()],
                vec!["y".into(), "–".into()],
            ],
        };
        assert!(!t.numeric_column(0));
        assert!(t.numeric_column(1));
    }
}
