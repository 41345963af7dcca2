//! report.md, and the document model it shares with report.html: the content is built once
//! as blocks (headings, paragraphs, lists, tables, charts) and each format renders the blocks.

use std::time::Duration;

use super::charts::{Kind, Plot};
use super::text;
use crate::Analysis;
use crate::fit::findings::Finding;
use crate::fit::{Attribution, MIN_SLOPE_BYTES, SeriesFit, Verdict};
use crate::series::{Metric, XAxis};
use crate::units::{format_bytes, format_duration};

/// Text within a paragraph or list item.
#[derive(Debug, Clone, PartialEq)]
pub enum Inline {
    Text(String),
    /// Verbatim text: a command line.
    Code(String),
    Strong(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// Level 1–3.
    Heading(u8, String),
    Para(Vec<Inline>),
    List(Vec<Vec<Inline>>),
    Table(Table),
    /// A chart written as `<stem>.svg` and `<stem>.png`.
    Chart {
        stem: String,
        caption: String,
    },
}

/// A table of plain text cells; each format escapes them.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Whether every non-empty cell of column `i` is a number (`+4.00 MiB/run`, `12`, `3.1%`),
    /// so the column is right-aligned.
    pub fn numeric_column(&self, i: usize) -> bool {
        let cells: Vec<&str> = self
            .rows
            .iter()
            .filter_map(|r| r.get(i).map(|c| c.trim()))
            .filter(|c| !c.is_empty() && *c != "–")
            .collect();
        !cells.is_empty()
            && cells.iter().all(|c| {
                let c = c.trim_start_matches(['+', '-']);
                c.starts_with(|ch: char| ch.is_ascii_digit())
            })
    }
}

fn text(s: impl Into<String>) -> Inline {
    Inline::Text(s.into())
}

fn strong(s: impl Into<String>) -> Inline {
    Inline::Strong(s.into())
}

fn para(parts: Vec<Inline>) -> Block {
    Block::Para(parts)
}

fn heading(level: u8, s: impl Into<String>) -> Block {
    Block::Heading(level, s.into())
}

/// The report's content, in reading order.
pub fn document(a: &Analysis, plots: &[Plot]) -> Vec<Block> {
    let mut doc = vec![heading(1, "leakwatch report")];
    doc.push(para(intro(a)));
    if a.interrupted {
        doc.push(para(vec![
            strong("Interrupted:"),
            text(" this report covers the samples taken so far."),
        ]));
    }
    verdict(a, plots, &mut doc);
    growth(a, &mut doc);
    attribution(a, plots, &mut doc);
    process_tree(a, &mut doc);
    projection(a, &mut doc);
    gate(a, &mut doc);
    runs(a, &mut doc);
    notes(a, &mut doc);
    how_to_read(&mut doc);
    doc
}

fn seconds(s: f64) -> String {
    Duration::try_from_secs_f64(s)
        .map(format_duration)
        .unwrap_or_else(|_| "–".to_string())
}

fn failed_runs(a: &Analysis) -> Vec<String> {
    a.runs
        .iter()
        .filter(|r| r.failed())
        .map(|r| format!("run {} ({})", r.run, r.status))
        .collect()
}

fn intro(a: &Analysis) -> Vec<Inline> {
    match (&a.command_line, a.target_pid) {
        (Some(cmd), _) => {
            let failed = failed_runs(a);
            let mut parts = vec![
                text(format!("{} run(s) of ", a.runs.len())),
                Inline::Code(cmd.clone()),
                text(format!(" over {}", seconds(a.duration_s))),
            ];
            if failed.is_empty() {
                parts.push(text(", all exited 0."));
            } else {
                parts.push(text("; "));
                parts.push(strong(format!("FAILED: {}", failed.join(", "))));
                parts.push(text("."));
            }
            parts
        }
        (None, Some(pid)) => vec![text(format!(
            "Attached to PID {pid} and its descendants for {}.",
            seconds(a.duration_s)
        ))],
        (None, None) => vec![text(format!("Samples over {}.", seconds(a.duration_s)))],
    }
}

/// Fits the verdict section lists beside the headlines: shmem, fd and thread leaks (judged
/// with the headline metric, as on the terminal).
fn other_leaks(a: &Analysis) -> impl Iterator<Item = &SeriesFit> {
    a.fits.iter().filter(|f| {
        f.verdict == Verdict::Leak
            && f.name != "command"
            && matches!(f.metric, Metric::ShmemBytes | Metric::Fds | Metric::Threads)
            && !a
                .headlines()
                .any(|h| h.name == f.name && h.metric == f.metric)
    })
}

fn charts_of<'a>(
    plots: &'a [Plot],
    kind: Kind,
    scope: &'a str,
) -> impl Iterator<Item = Block> + 'a {
    plots
        .iter()
        .filter(move |p| p.kind == kind && p.scope == scope)
        .map(|p| Block::Chart {
            stem: p.stem.clone(),
            caption: p.caption.clone(),
        })
}

fn verdict(a: &Analysis, plots: &[Plot], doc: &mut Vec<Block>) {
    doc.push(heading(2, "Verdict"));
    doc.push(para(vec![
        text("Overall: "),
        strong(a.verdict.as_str().to_uppercase()),
    ]));
    let lines: Vec<Vec<Inline>> = a
        .headlines()
        .chain(other_leaks(a))
        .map(|f| vec![text(text::verdict_line(a, f))])
        .collect();
    if !lines.is_empty() {
        doc.push(Block::List(lines));
    }
    for f in a.headlines() {
        doc.extend(charts_of(plots, Kind::Headline, &f.name));
    }
}

fn per_x(x: XAxis) -> &'static str {
    match x {
        XAxis::Run => "run",
        XAxis::Seconds => "h",
    }
}

fn growth(a: &Analysis, doc: &mut Vec<Block>) {
    let Some(x) = a.headlines().next().map(|f| f.x) else {
        return;
    };
    doc.push(heading(2, "Growth"));
    doc.push(para(vec![text(format!(
        "Least-squares slope per {} over the points after warm-up, with its 95% confidence \
         interval; the growth in % is of the mean fitted level.",
        if x == XAxis::Run { "run" } else { "hour" }
    ))]));
    let listed = [
        Metric::RssBytes,
        Metric::PssBytes,
        Metric::UssBytes,
        Metric::AnonBytes,
        Metric::FileBytes,
        Metric::ShmemBytes,
        Metric::Fds,
        Metric::Threads,
    ];
    let mut rows = Vec::new();
    for h in a.headlines() {
        // The scope's judged metric first, then the others in a fixed order.
        let metrics =
            std::iter::once(h.metric).chain(listed.into_iter().filter(|m| *m != h.metric));
        for f in metrics.filter_map(|m| a.fit_of(&h.name, m)) {
            let (slope, ci) = match (f.slope, f.slope_ci95) {
                (Some(s), Some((lo, hi))) => (
                    text::rate(f, s),
                    format!("{} … {}", text::rate(f, lo), text::rate(f, hi)),
                ),
                (Some(s), None) => (text::rate(f, s), "–".to_string()),
                _ => ("–".to_string(), "–".to_string()),
            };
            let pct = f
                .growth_pct_per_x
                .map(|p| match f.x {
                    XAxis::Run => format!("{p:.2}"),
                    XAxis::Seconds => format!("{:.2}", p * 3600.0),
                })
                .unwrap_or_else(|| "–".to_string());
            rows.push(vec![
                f.name.clone(),
                f.metric.label().to_string(),
                f.n.to_string(),
                slope,
                ci,
                pct,
                f.verdict.as_str().to_string(),
            ]);
        }
    }
    doc.push(Block::Table(Table {
        headers: [
            "series",
            "metric",
            "n",
            "slope",
            "95% CI",
            &format!("%/{}", per_x(x)),
            "verdict",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }));
}

/// Private dirty rising while shared falls by about as much, with RSS flat: a forked child
/// copying its parent's pages as it writes them.
fn looks_like_cow(at: &Attribution, rss_slope: Option<f64>) -> bool {
    match (at.private_dirty_slope, at.shared_slope) {
        (Some(pd), Some(sh)) if pd > 0.0 && sh < 0.0 => {
            (pd + sh).abs() < 0.5 * pd && rss_slope.is_some_and(|r| r.abs() < 0.5 * pd)
        }
        _ => false,
    }
}

fn attribution(a: &Analysis, plots: &[Plot], doc: &mut Vec<Block>) {
    let mut section = Vec::new();
    for (i, f) in a.headlines().enumerate() {
        let mut blocks = Vec::new();
        if let Some(at) = a.attribution.iter().find(|at| at.series == f.name) {
            if !at.summary.is_empty() {
                blocks.push(para(vec![text(format!("Mostly: {}.", at.summary))]));
            }
            let mut kinds: Vec<Vec<String>> = at
                .kinds
                .iter()
                .map(|k| vec![k.metric.label().to_string(), text::rate(f, k.slope)])
                .collect();
            for (label, slope) in [
                ("private dirty", at.private_dirty_slope),
                ("shared", at.shared_slope),
            ] {
                if let Some(s) = slope {
                    kinds.push(vec![label.to_string(), text::rate(f, s)]);
                }
            }
            if !kinds.is_empty() {
                blocks.push(para(vec![text("By kind of memory:")]));
                blocks.push(Block::Table(Table {
                    headers: vec!["memory".into(), "growth".into()],
                    rows: kinds,
                }));
            }
            let rss = a.fit_of(&f.name, Metric::RssBytes).and_then(|r| r.slope);
            if looks_like_cow(at, rss) {
                blocks.push(para(vec![
                    strong("Copy-on-write?"),
                    text(
                        " Private dirty grows while shared shrinks by about as much and RSS \
                         stays flat: a forked process unsharing its parent's pages, not \
                         allocating (see How to read this).",
                    ),
                ]));
            }
            if i == 0 {
                blocks.extend(charts_of(plots, Kind::MemoryKinds, &f.name));
            }
            if !at.processes.is_empty() {
                blocks.push(para(vec![text(format!(
                    "By process ({}), fastest growing first:",
                    at.metric.label()
                ))]));
                blocks.push(Block::Table(Table {
                    headers: ["pid", "process", "points", "first", "last", "growth"]
                        .map(String::from)
                        .to_vec(),
                    rows: at
                        .processes
                        .iter()
                        .map(|p| {
                            vec![
                                p.pid.to_string(),
                                p.comm.clone(),
                                p.n.to_string(),
                                format_bytes(p.first_bytes),
                                format_bytes(p.last_bytes),
                                p.slope
                                    .map(|s| text::rate(f, s))
                                    .unwrap_or_else(|| "–".into()),
                            ]
                        })
                        .collect(),
                }));
            }
        }
        blocks.extend(charts_of(plots, Kind::Processes, &f.name));
        if let Some(at) = a.attribution.iter().find(|at| at.series == f.name)
            && !at.mappings.is_empty()
        {
            blocks.push(para(vec![text(
                "Mappings that grew most between the first and the last smaps snapshot:",
            )]));
            blocks.push(Block::Table(Table {
                headers: ["pid", "mapping", "first RSS", "last RSS", "growth"]
                    .map(String::from)
                    .to_vec(),
                rows: at
                    .mappings
                    .iter()
                    .map(|m| {
                        vec![
                            m.pid.to_string(),
                            m.mapping.clone(),
                            format_bytes(m.first_rss_bytes as f64),
                            format_bytes(m.last_rss_bytes as f64),
                            crate::units::format_signed_bytes(m.growth_bytes as f64),
                        ]
                    })
                    .collect(),
            }));
        }
        blocks.extend(charts_of(plots, Kind::Mappings, &f.name));
        if !blocks.is_empty() {
            section.push(heading(3, format!("{} ({})", f.name, f.metric.label())));
            section.extend(blocks);
        }
    }
    if !section.is_empty() {
        doc.push(heading(2, "Where it grows"));
        doc.extend(section);
    }
}

fn process_tree(a: &Analysis, doc: &mut Vec<Block>) {
    if a.findings.is_empty() && a.trees.is_empty() && a.recycle.is_empty() {
        return;
    }
    doc.push(heading(2, "Process tree"));
    let notable: Vec<Vec<Inline>> = a
        .findings
        .iter()
        .filter(|f| !matches!(f, Finding::Recycled { .. }))
        .map(|f| vec![text(text::finding_line(f))])
        .collect();
    if !notable.is_empty() {
        doc.push(Block::List(notable));
    }
    if a.findings
        .iter()
        .any(|f| matches!(f, Finding::CowUnsharing { .. }))
    {
        doc.push(para(vec![
            strong("Copy-on-write is not a leak."),
            text(
                " A forked worker shares its parent's pages until one of them writes to a page; \
                 then the kernel copies it, and the page moves from the worker's Shared_Dirty to \
                 its Private_Dirty while its RSS stays flat. In CPython the garbage collector \
                 writes every object header it visits, so a full collection in a worker unshares \
                 most of the parent's heap. Cures: call gc.freeze() in the parent before forking \
                 (Python 3.7+), start workers with the forkserver or spawn method, or recycle \
                 workers (max-tasks-per-child) if the unshared memory matters.",
            ),
        ]));
    }
    let recycled: Vec<Vec<String>> = a
        .findings
        .iter()
        .filter_map(|f| match f {
            Finding::Recycled {
                pid,
                comm,
                first_x,
                last_x,
                last_rss_bytes,
                x,
                ..
            } => Some(vec![
                pid.to_string(),
                comm.clone(),
                match x {
                    XAxis::Run => format!("runs {first_x:.0}–{last_x:.0}"),
                    XAxis::Seconds => format!("{first_x:.0}s–{last_x:.0}s"),
                },
                format_bytes(*last_rss_bytes as f64),
            ]),
            _ => None,
        })
        .collect();
    if !recycled.is_empty() {
        doc.push(para(vec![text(
            "Workers that ended while sampled (recycled or exited), with what they held:",
        )]));
        doc.push(Block::Table(Table {
            headers: ["pid", "process", "lived", "RSS at the end"]
                .map(String::from)
                .to_vec(),
            rows: recycled,
        }));
    }
    for r in &a.recycle {
        doc.push(para(vec![
            strong("Recycle:"),
            text(format!(" {}", text::recycle_line(r))),
        ]));
    }
    for t in &a.trees {
        doc.push(para(vec![text(format!("Tree {}.", text::tree_line(t)))]));
    }
}

fn gate(a: &Analysis, doc: &mut Vec<Block>) {
    let Some(g) = &a.gate else { return };
    doc.push(heading(2, "Gate"));
    doc.push(para(vec![strong(if g.passed {
        "Passed."
    } else {
        "FAILED."
    })]));
    doc.push(Block::Table(Table {
        headers: ["check", "result", "numbers"].map(String::from).to_vec(),
        rows: g
            .checks
            .iter()
            .map(|c| {
                vec![
                    c.name.clone(),
                    if c.passed { "ok" } else { "FAIL" }.to_string(),
                    c.message.clone(),
                ]
            })
            .collect(),
    }));
}

fn projection(a: &Analysis, doc: &mut Vec<Block>) {
    doc.push(heading(2, "Projection"));
    doc.push(para(vec![text(match &a.projection {
        Some(p) => format!("{}.", text::projection_line(p)),
        None => "Pass --limit SIZE to see when the main series reaches a limit, or \
                 --budget SIZE for how often to recycle a process to stay under it."
            .to_string(),
    })]));
}

fn runs(a: &Analysis, doc: &mut Vec<Block>) {
    if a.runs.is_empty() {
        return;
    }
    doc.push(heading(2, "Runs"));
    let failed = failed_runs(a);
    if !failed.is_empty() {
        doc.push(para(vec![
            strong(format!("Failed: {}.", failed.join(", "))),
            text(if failed.len() == 1 {
                " Its points are kept (the memory left behind after it is real), but a \
                 failing command may not have done the work that leaks."
            } else {
                " Their points are kept (the memory left behind after them is real), but a \
                 failing command may not have done the work that leaks."
            }),
        ]));
    }
    let rows = a
        .runs
        .iter()
        .map(|r| {
            vec![
                r.run.to_string(),
                if r.failed() {
                    format!("{} FAILED", r.status)
                } else {
                    r.status.clone()
                },
                r.duration_s.map(seconds).unwrap_or_else(|| "–".into()),
                r.peak_rss_bytes
                    .map(|b| format_bytes(b as f64))
                    .unwrap_or_else(|| "–".into()),
            ]
        })
        .collect();
    doc.push(Block::Table(Table {
        headers: ["run", "status", "duration", "peak RSS"]
            .map(String::from)
            .to_vec(),
        rows,
    }));
}

fn notes(a: &Analysis, doc: &mut Vec<Block>) {
    if a.notes.is_empty() {
        return;
    }
    doc.push(heading(2, "Notes"));
    doc.push(Block::List(
        a.notes.iter().map(|n| vec![text(n.clone())]).collect(),
    ));
}

fn how_to_read(doc: &mut Vec<Block>) {
    doc.push(heading(2, "How to read this"));
    doc.push(heading(3, "RSS, PSS, USS and shared"));
    doc.push(Block::List(vec![
        vec![
            strong("RSS"),
            text(
                " (resident set size): the process's pages in RAM, counting every shared page \
                 (libraries, memory still shared with a forked parent) in full. Summed over a \
                 worker pool it counts shared pages once per worker.",
            ),
        ],
        vec![
            strong("PSS"),
            text(
                " (proportional set size): each shared page divided among the processes that \
                 share it, so the PSS of a process tree adds up to the RAM it really uses. It \
                 moves when other processes map or unmap the same files, even if this one \
                 does nothing.",
            ),
        ],
        vec![
            strong("USS"),
            text(
                " (unique set size): private pages only (Private_Clean + Private_Dirty), what \
                 exiting the process would free.",
            ),
        ],
        vec![
            strong("shared"),
            text(
                ": Shared_Clean + Shared_Dirty, pages another process maps too. \
                 RSS = USS + shared.",
            ),
        ],
        vec![
            strong("anon / file / shmem"),
            text(
                ": RSS by what backs the pages: anonymous memory (heap, malloc arenas, \
                 anonymous mmap), mapped files (code, data files), shared memory (tmpfs, \
                 memfd). A heap leak grows anon, so a scope is judged by anon (RssAnon; RSS \
                 on kernels without it), with shmem, fds and threads judged beside it: \
                 unlike PSS and USS, anon ignores what other processes map and does not \
                 move when a forked worker unshares its parent's pages.",
            ),
        ],
    ]));
    doc.push(heading(3, "Verdicts"));
    doc.push(Block::List(vec![
        vec![
            strong("leak"),
            text(format!(
                ": significant growth (Mann–Kendall trend test and the slope's 95% CI above \
                 zero) that is large enough to matter (more than {} or 0.1% of the level \
                 per run, or per hour over time) and still going at the end: the second half \
                 of the series grows at least half as fast as the whole.",
                format_bytes(MIN_SLOPE_BYTES)
            )),
        ],
        vec![
            strong("plateau"),
            text(
                ": significant growth that has levelled off, the second half growing at less \
                 than half the overall rate: a cache filling up, an allocator's high-water \
                 mark.",
            ),
        ],
        vec![
            strong("stable"),
            text(": no significant growth, or growth too small to matter."),
        ],
        vec![
            strong("inconclusive"),
            text(
                ": too few points (fewer than 5 after warm-up) or too much noise to tell; the \
                 verdict line says about how many more runs would decide it.",
            ),
        ],
    ]));
    doc.push(para(vec![text(
        "Warm-up: leading points left out of the fit (a first run that loads code and fills \
         caches); the charts shade them. The 95% CI is the range the true slope lies in with \
         95% confidence; more runs narrow it.",
    )]));
    doc.push(heading(3, "Copy-on-write after fork"));
    doc.push(para(vec![text(
        "A forked worker (Celery prefork, gunicorn, multiprocessing, a process pool) starts \
         out sharing all its pages with its parent. Each page it writes is copied for it \
         alone: its Private_Dirty rises and its Shared_Dirty falls by the same amount while \
         its RSS stays flat. That is unsharing, not a leak: the worker allocates nothing new, \
         yet the pool's real memory (the PSS sum) grows until every touched page is copied. \
         CPython writes reference counts and garbage-collector headers even when objects are \
         only read, so its workers unshare the parent's heap steadily; calling gc.freeze() \
         in the parent just before forking keeps the collector off those pages.",
    )]));
}

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
