//! report.md: the document blocks as Markdown. Every outside string (process
//! names, paths, command lines) is escaped for Markdown here.

use super::doc::{Block, Inline, Table};

/// Escapes text from outside (process names, mapping paths, notes) so that
/// Markdown shows it as it is: no link, image, HTML or emphasis can be made
/// of it. `[` and `]` are escaped (no link or image without them), `<` and
/// `>` (no raw HTML, no `<autolink>`), `` ` ``, `*`, `~`, `|` (a table cell
/// ends there), `&` (no entity), `\` itself, and `#` at the start (a
/// heading in a list item), `_` unless its run sits inside a word (where it
/// cannot emphasise: `pss_bytes` stays, `__main__.Parser` and
/// `__init__.py` do not turn bold). GitHub's bare autolinks are broken up by
/// escaping the slashes of `://` and the dot of `www.`; checked against
/// cmark-gfm, GitHub's own renderer. (`user@host.name` still becomes a
/// mailto link there, which fetches nothing.)
fn md_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    let chars: Vec<char> = crate::escape::inert_lines(s).chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let after_scheme = c == '/'
            && (chars.get(i.wrapping_sub(1)) == Some(&':')
                || (i >= 2 && chars[i - 1] == '/' && chars[i - 2] == ':'));
        let www_dot = c == '.'
            && i >= 3
            && chars[i - 3..i]
                .iter()
                .collect::<String>()
                .eq_ignore_ascii_case("www")
            && (i == 3 || !chars[i - 4].is_alphanumeric());
        let loose_underscore = c == '_' && {
            let before = chars[..i].iter().rev().find(|&&b| b != '_');
            let after = chars[i..].iter().find(|&&a| a != '_');
            !(before.is_some_and(|b| b.is_alphanumeric())
                && after.is_some_and(|a| a.is_alphanumeric()))
        };
        match c {
            '_' if loose_underscore => out.push_str("\\_"),
            '\\' | '`' | '*' | '<' | '>' | '|' | '[' | ']' | '~' | '&' => {
                out.push('\\');
                out.push(c);
            }
            '#' if i == 0 => out.push_str("\\#"),
            '/' if after_scheme => out.push_str("\\/"),
            '.' if www_dot => out.push_str("\\."),
            '\n' | '\r' => out.push(' '),
            _ => out.push(c),
        }
    }
    out
}

/// A code span that holds any text: the fence is one backtick longer than the longest run
/// inside it.
fn md_code(s: &str) -> String {
    let s = crate::escape::inert_lines(s).replace('\n', " ");
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
                let s = crate::escape::inert_lines(s);
                // A fence longer than any run of backticks inside.
                let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
                let fence = "`".repeat((longest + 1).max(3));
                out.push_str(&format!("{fence}\n{s}{fence}\n"));
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
    fn underscores_that_could_emphasise_are_escaped() {
        assert_eq!(md_text("__main__.Parser"), "\\_\\_main\\_\\_.Parser");
        assert_eq!(md_text("/app/__init__.py:3"), "/app/\\_\\_init\\_\\_.py:3");
        assert_eq!(
            md_text("pss_bytes and Private_Dirty"),
            "pss_bytes and Private_Dirty"
        );
    }

    #[test]
    fn text_escapes_html_and_table_pipes() {
        assert_eq!(md_text("a|b <x>"), "a\\|b \\<x\\>");
    }

    #[test]
    fn outside_text_makes_no_link_or_image() {
        assert_eq!(md_text("![x](//e.vil/p)"), "!\\[x\\](//e.vil/p)");
        assert_eq!(md_text("[click](https:e.vil)"), "\\[click\\](https:e.vil)");
        assert_eq!(md_text("see https://e.vil/x"), "see https:\\/\\/e.vil/x");
        assert_eq!(md_text("www.e.vil and awww.x"), "www\\.e.vil and awww.x");
        assert_eq!(md_text("# not a heading #1"), "\\# not a heading #1");
        assert_eq!(md_text("&lt;img&gt;"), "\\&lt;img\\&gt;");
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
