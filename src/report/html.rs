//! report.html: the Markdown report's blocks as one self-contained page (charts inlined as
//! SVG, inline CSS, a few lines of inline JS to sort tables, nothing fetched from the network).

use super::doc::{Block, Inline, Table};

/// Escapes text for HTML element content and quoted attribute values. Every string that
/// comes from outside leakwatch (command lines, process names, mapping paths, notes) goes
/// through here.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    // No control character either (a terminal shows a `cat report.html`).
    for c in crate::escape::inert_lines(s).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2330; background: #fff; margin: 0; }
main { max-width: 1000px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 1.7em; margin: .4em 0; }
h2 { font-size: 1.3em; border-bottom: 1px solid #d8dce6; padding-bottom: .2em; margin-top: 1.8em; }
h3 { font-size: 1.1em; margin-top: 1.4em; }
code { font: .9em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f1f3f7; padding: .1em .35em; border-radius: 3px; overflow-wrap: anywhere; }
ul { padding-left: 1.4em; }
li { margin: .25em 0; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: .6em 0 1em; font-size: .9em; }
th, td { border: 1px solid #d8dce6; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f1f3f7; cursor: pointer; user-select: none; white-space: nowrap; }
th:hover { background: #e4e8f0; }
th[data-dir="asc"]::after { content: " \25B2"; font-size: .75em; }
th[data-dir="desc"]::after { content: " \25BC"; font-size: .75em; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) td { background: #fafbfd; }
figure { margin: 1em 0 1.5em; }
figure svg { display: block; max-width: 100%; height: auto; border: 1px solid #e6e8ee; }
figcaption { color: #5a6272; font-size: .88em; margin-top: .3em; }
.leak, .failed { color: #b3001b; font-weight: 600; }
.plateau { color: #9a5b00; font-weight: 600; }
.stable { color: #1b7a3a; font-weight: 600; }
.inconclusive { color: #5a6272; font-weight: 600; }
"#;

/// Sorts a table by the clicked column; sizes (`4.00 MiB`), durations (`850ms`, `2.1s`) and
/// plain numbers compare by value, anything else as text.
const SCRIPT: &str = r#"
(function () {
  var scale = { B: 1, KiB: 1024, MiB: 1048576, GiB: 1073741824, TiB: 1099511627776,
                ms: 0.001, s: 1, m: 60, h: 3600 };
  function key(row, col) {
    var t = row.cells[col].textContent.trim();
    var m = /^([+-]?\d+(?:\.\d+)?)\s*(KiB|MiB|GiB|TiB|B|ms|s|m|h)?/.exec(t);
    return m ? parseFloat(m[1]) * (scale[m[2]] || 1) : t;
  }
  document.querySelectorAll("table th").forEach(function (th) {
    th.title = "sort";
    th.addEventListener("click", function () {
      var table = th.closest("table"), body = table.tBodies[0], col = th.cellIndex;
      var dir = th.dataset.dir === "asc" ? "desc" : "asc";
      table.querySelectorAll("th").forEach(function (h) { delete h.dataset.dir; });
      th.dataset.dir = dir;
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a, col), y = key(b, col), c;
        if (typeof x === "number" && typeof y === "number") c = x - y;
        else if (typeof x === "number") c = -1;
        else if (typeof y === "number") c = 1;
        else c = x.localeCompare(y);
        return dir === "asc" ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
})();
"#;

/// A class that colours a verdict word (`leak`, `LEAK`) or a failed run.
fn class_of(cell: &str) -> Option<&'static str> {
    match cell.to_ascii_lowercase().as_str() {
        "leak" => Some("leak"),
        "plateau" => Some("plateau"),
        "stable" => Some("stable"),
        "inconclusive" => Some("inconclusive"),
        c if c.ends_with(" failed") => Some("failed"),
        _ => None,
    }
}

fn inline(parts: &[Inline]) -> String {
    parts
        .iter()
        .map(|p| match p {
            Inline::Text(s) => escape(s),
            Inline::Code(s) => format!("<code>{}</code>", escape(s)),
            Inline::Strong(s) => match class_of(s) {
                Some(class) => format!("<strong class=\"{class}\">{}</strong>", escape(s)),
                None => format!("<strong>{}</strong>", escape(s)),
            },
        })
        .collect()
}

fn table(t: &Table, out: &mut String) {
    let numeric: Vec<bool> = (0..t.headers.len()).map(|i| t.numeric_column(i)).collect();
    let num = |i: usize| numeric.get(i).copied().unwrap_or(false);
    out.push_str("<div class=\"scroll\"><table>\n<thead><tr>");
    for (i, h) in t.headers.iter().enumerate() {
        let class = if num(i) { " class=\"num\"" } else { "" };
        out.push_str(&format!("<th{class}>{}</th>", escape(h)));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &t.rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let class = if num(i) { Some("num") } else { class_of(cell) };
            match class {
                Some(c) => out.push_str(&format!("<td class=\"{c}\">{}</td>", escape(cell))),
                None => out.push_str(&format!("<td>{}</td>", escape(cell))),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table></div>\n");
}

/// Drops anything before `<svg` (an XML declaration is not allowed inside HTML).
fn inline_svg(svg: &str) -> &str {
    svg.find("<svg").map(|i| &svg[i..]).unwrap_or(svg)
}

/// Renders the document as a standalone page; `svgs` maps a chart's stem to its SVG text.
pub fn render(doc: &[Block], svgs: &[(String, String)]) -> String {
    let title = doc
        .iter()
        .find_map(|b| match b {
            Block::Heading(1, s) => Some(s.as_str()),
            _ => None,
        })
        .unwrap_or("leakwatch report");
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n",
        escape(title)
    );
    for block in doc {
        match block {
            Block::Heading(level, s) => {
                out.push_str(&format!("<h{level}>{}</h{level}>\n", escape(s)));
            }
            Block::Para(parts) => out.push_str(&format!("<p>{}</p>\n", inline(parts))),
            Block::List(items) => {
                out.push_str("<ul>\n");
                for item in items {
                    out.push_str(&format!("<li>{}</li>\n", inline(item)));
                }
                out.push_str("</ul>\n");
            }
            Block::Table(t) => table(t, &mut out),
            Block::Code(s) => out.push_str(&format!("<pre><code>{}</code></pre>\n", escape(s))),
            Block::Chart { stem, caption } => {
                // The SVG comes from `plot`, which escapes every text it draws.
                let svg = svgs
                    .iter()
                    .find(|(s, _)| s == stem)
                    .map(|(_, svg)| inline_svg(svg))
                    .unwrap_or("");
                out.push_str(&format!(
                    "<figure>\n{svg}\n<figcaption>{} ({stem}.svg, {stem}.png)</figcaption>\n</figure>\n",
                    escape(caption),
                    stem = escape(stem),
                ));
            }
        }
    }
    out.push_str(&format!(
        "</main>\n<script>{SCRIPT}</script>\n</body>\n</html>\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape(r#"<script>alert("x" & 'y')</script>"#),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
    }

    #[test]
    fn cells_and_code_are_escaped() {
        let doc = vec![
            Block::Para(vec![Inline::Code("echo '<b>'".into())]),
            Block::Table(Table {
                headers: vec!["<h>".into()],
                rows: vec![vec!["/tmp/<i>.so".into()]],
            }),
        ];
        let html = render(&doc, &[]);
        assert!(html.contains("<code>echo &#39;&lt;b&gt;&#39;</code>"));
        assert!(html.contains("<th>&lt;h&gt;</th>"));
        assert!(html.contains("<td>/tmp/&lt;i&gt;.so</td>"));
        assert!(!html.contains("<b>") && !html.contains("<i>"));
    }
}
