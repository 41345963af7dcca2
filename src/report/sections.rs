//! The report's content: the sections of report.md and report.html, in
//! reading order, as document blocks.

use std::time::Duration;

use super::charts::{Kind, Plot};
use super::doc::{Block, Inline, Table, heading, para, strong, text};
use crate::Analysis;
use crate::fit::findings::Finding;
use crate::fit::{Attribution, MIN_SLOPE_BYTES, SeriesFit};
use crate::gate::GateResult;
use crate::phrase;
use crate::series::{Metric, RunRecord, XAxis};
use crate::store::{Scope, SiteSource};
use crate::units::{
    counted, format_bytes, format_duration, format_signed_bytes, format_signed_count,
};

/// The report's content, in reading order.
pub fn document(a: &Analysis, gate: Option<&GateResult>, plots: &[Plot]) -> Vec<Block> {
    let mut doc = vec![heading(1, "leakwatch report")];
    doc.push(para(intro(a)));
    if a.interrupted {
        doc.push(para(vec![
            strong("Interrupted:"),
            text(" this report covers the samples taken so far."),
        ]));
    }
    verdict(a, gate, plots, &mut doc);
    // The gate decides the exit status: beside the verdict, before the detail.
    doc.extend(gate.map(gate_section).unwrap_or_default());
    growth(a, &mut doc);
    doc.extend(super::fleet::series_table(a));
    attribution(a, plots, &mut doc);
    where_in_the_code(a, &mut doc);
    which_types_grow(a, &mut doc);
    process_tree(a, &mut doc);
    projection(a, &mut doc);
    runs(a, &mut doc);
    sampling_cost(a, &mut doc);
    notes(a, &mut doc);
    how_to_read(&mut doc);
    doc
}

fn seconds(s: f64) -> String {
    Duration::try_from_secs_f64(s)
        .map(format_duration)
        .unwrap_or_else(|_| "–".to_string())
}

/// The runs that failed, in a phrase: "all 20 (exit:1)" when every run failed alike, else up to
/// `LISTED` of them by number and status, then how many more ("run 3 (exit:1), …, and 12
/// more"); `None` when none failed.
pub(crate) fn failed_runs(a: &Analysis) -> Option<String> {
    failures(&a.runs)
}

/// `failed_runs` of these runs.
fn failures(runs: &[RunRecord]) -> Option<String> {
    /// Failed runs named one by one before the rest are counted.
    const LISTED: usize = 5;
    let failed: Vec<_> = runs.iter().filter(|r| r.failed()).collect();
    let first = failed.first()?;
    let alike = failed.iter().all(|r| r.status == first.status);
    if failed.len() == runs.len() && failed.len() > 1 && alike {
        return Some(format!("all {} ({})", failed.len(), first.status));
    }
    let mut named: Vec<String> = failed
        .iter()
        .take(LISTED)
        .map(|r| format!("run {} ({})", r.run, r.status))
        .collect();
    if failed.len() > LISTED {
        named.push(format!("and {} more", failed.len() - LISTED));
    }
    Some(named.join(", "))
}

fn intro(a: &Analysis) -> Vec<Inline> {
    match (&a.command_line, a.target_pid) {
        (Some(cmd), _) => {
            let mut parts = vec![
                text(format!(
                    "{} of ",
                    counted(a.runs.len() as u64, "run", "runs")
                )),
                Inline::Code(cmd.clone()),
                text(format!(" over {}", seconds(a.duration_s))),
            ];
            match failed_runs(a) {
                None => parts.push(text(", all exited 0.")),
                Some(failed) => {
                    parts.push(text("; "));
                    parts.push(strong(format!("FAILED: {failed}")));
                    parts.push(text("."));
                }
            }
            // The series' name is the one word a reader cannot guess.
            if a.fits.iter().any(|f| f.scope == Scope::Survivors) {
                parts.push(text(
                    " The processes the command left running (daemons, servers: the \
                     survivors) were sampled after each run.",
                ));
            }
            parts
        }
        (None, Some(pid)) => vec![text(format!(
            "Attached to PID {pid} and its descendants for {}.",
            seconds(a.duration_s)
        ))],
        (None, None) => vec![text(match &a.target {
            Some(target) => format!("Attached to {target} for {}.", seconds(a.duration_s)),
            None if !a.labels.is_empty() => format!(
                "{} series from Prometheus over {}, worst first.",
                a.labels.len(),
                seconds(a.duration_s)
            ),
            None => format!("Samples over {}.", seconds(a.duration_s)),
        })],
    }
}

fn charts_of<'a>(plots: &'a [Plot], kind: Kind, scope: Scope) -> impl Iterator<Item = Block> + 'a {
    plots
        .iter()
        .filter(move |p| p.kind == kind && p.scope == scope)
        .map(|p| Block::Chart {
            stem: p.stem.clone(),
            caption: p.caption.clone(),
        })
}

fn verdict(a: &Analysis, gate: Option<&GateResult>, plots: &[Plot], doc: &mut Vec<Block>) {
    doc.push(heading(2, "Verdict"));
    let mut overall = vec![text("Overall: "), strong(a.verdict.as_str().to_uppercase())];
    if let Some(g) = gate {
        overall.push(text(" · gate: "));
        overall.push(strong(if g.passed { "passed" } else { "FAILED" }));
    }
    doc.push(para(overall));
    let lines: Vec<Vec<Inline>> = a
        .headlines()
        .chain(phrase::other_leaks(a))
        .map(|f| vec![text(phrase::verdict_line(a, f))])
        .collect();
    let lines: Vec<Vec<Inline>> = lines
        .into_iter()
        .chain(
            a.heap
                .iter()
                .filter_map(|h| phrase::heap_line(h, phrase::jvm_classes_read(a)))
                .map(|l| vec![text(l)]),
        )
        .collect();
    if !lines.is_empty() {
        doc.push(Block::List(lines));
    }
    for f in a.headlines() {
        doc.extend(charts_of(plots, Kind::Headline, f.scope));
    }
}

fn growth(a: &Analysis, doc: &mut Vec<Block>) {
    let Some(x) = a.headlines().next().map(|f| f.x) else {
        return;
    };
    doc.push(heading(2, "Growth"));
    doc.push(para(vec![text(format!(
        "The verdict of each series and the end rate it was decided on: the growth at the \
         end, by the model of the series' shape (line, end segment, staircase, troughs…), \
         with its 95% interval. Then the least-squares slope per {} over the points after \
         warm-up, with its 95% confidence interval; the growth in % is of the mean fitted \
         level.",
        if x == XAxis::Run { "run" } else { "hour" }
    ))]));
    let listed = [
        Metric::HeapLiveBytes,
        Metric::HeapUsedBytes,
        Metric::RssBytes,
        Metric::PssBytes,
        Metric::UssBytes,
        Metric::AnonBytes,
        Metric::FileBytes,
        Metric::ShmemBytes,
        Metric::Fds,
        Metric::Threads,
    ]
    .into_iter()
    // A cgroup's own accounting (no process scope has these).
    .chain([Metric::UsageBytes])
    .chain(Metric::KERNEL);
    let mut rows = Vec::new();
    for h in a.headlines() {
        // The scope's judged metric first, then the others in a fixed order.
        let metrics = std::iter::once(h.metric).chain(listed.clone().filter(|m| *m != h.metric));
        for f in metrics.filter_map(|m| a.fit_of(h.scope, m)) {
            let (slope, ci) = match (f.slope, f.slope_ci95) {
                (Some(s), Some((lo, hi))) => (
                    phrase::rate(f, s),
                    format!("{} … {}", phrase::rate(f, lo), phrase::rate(f, hi)),
                ),
                (Some(s), None) => (phrase::rate(f, s), "–".to_string()),
                _ => ("–".to_string(), "–".to_string()),
            };
            let pct = f
                .growth_pct_per_x
                .map(|p| crate::units::format_sig3(p * f.x.per_rate_unit()))
                .unwrap_or_else(|| "–".to_string());
            let end = f.end_rate.map_or_else(
                || "–".to_string(),
                |e| {
                    format!(
                        "{} ({} … {})",
                        phrase::rate(f, e.rate),
                        phrase::rate(f, e.ci95.0),
                        phrase::rate(f, e.ci95.1)
                    )
                },
            );
            rows.push(vec![
                f.scope.to_string(),
                a.label(f.metric).to_string(),
                f.verdict.as_str().to_string(),
                end,
                slope,
                ci,
                pct,
                f.n.to_string(),
            ]);
        }
    }
    doc.push(Block::Table(Table::new(
        [
            // The verdict and its rate first: they fit a 1280 px window without scrolling.
            "series",
            "metric",
            "verdict",
            "end rate (95% CI)",
            "slope",
            "95% CI",
            &format!("%/{}", x.rate_unit()),
            "n",
        ],
        rows,
    )));
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

/// Growth by kind of memory (anon, file, shmem, swap; private dirty, shared).
fn kinds_table(f: &SeriesFit, at: &Attribution, blocks: &mut Vec<Block>) {
    let mut kinds: Vec<Vec<String>> = at
        .kinds
        .iter()
        .map(|k| vec![k.metric.label().to_string(), phrase::rate(f, k.slope)])
        .collect();
    for (label, slope) in [
        ("private dirty", at.private_dirty_slope),
        ("shared", at.shared_slope),
    ] {
        if let Some(s) = slope {
            kinds.push(vec![label.to_string(), phrase::rate(f, s)]);
        }
    }
    if !kinds.is_empty() {
        blocks.push(para(vec![text("By kind of memory:")]));
        blocks.push(Block::Table(Table::new(["memory", "growth"], kinds)));
    }
}

fn processes_table(f: &SeriesFit, at: &Attribution, blocks: &mut Vec<Block>) {
    if at.processes.is_empty() {
        return;
    }
    blocks.push(para(vec![text(format!(
        "By process ({}), fastest growing first:",
        at.metric.label()
    ))]));
    let rows = at
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
                    .map(|s| phrase::rate(f, s))
                    .unwrap_or_else(|| "–".into()),
            ]
        })
        .collect();
    blocks.push(Block::Table(Table::new(
        ["pid", "process", "points", "first", "last", "growth"],
        rows,
    )));
}

fn mappings_table(at: &Attribution, blocks: &mut Vec<Block>) {
    if at.mappings.is_empty() {
        return;
    }
    blocks.push(para(vec![text(
        "Mappings that grew most between the first and the last smaps snapshot:",
    )]));
    let rows = at
        .mappings
        .iter()
        .map(|m| {
            vec![
                m.pid.to_string(),
                m.mapping.clone(),
                format_bytes(m.first_rss_bytes as f64),
                format_bytes(m.last_rss_bytes as f64),
                format_signed_bytes(m.growth_bytes as f64),
            ]
        })
        .collect();
    blocks.push(Block::Table(Table::new(
        ["pid", "mapping", "first RSS", "last RSS", "growth"],
        rows,
    )));
}

/// Where one headline scope grows: by kind, by process, by mapping, with charts.
fn scope_attribution(a: &Analysis, plots: &[Plot], f: &SeriesFit, main: bool) -> Vec<Block> {
    let mut blocks = Vec::new();
    let at = a.attribution.iter().find(|at| at.series == f.scope);
    if let Some(at) = at {
        let where_ = crate::phrase::attribution(at);
        if !where_.is_empty() {
            blocks.push(para(vec![text(format!("It grows {where_}."))]));
        }
        kinds_table(f, at, &mut blocks);
        let rss = a.fit_of(f.scope, Metric::RssBytes).and_then(|r| r.slope);
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
        if main {
            blocks.extend(charts_of(plots, Kind::MemoryKinds, f.scope));
        }
        processes_table(f, at, &mut blocks);
    }
    blocks.extend(charts_of(plots, Kind::Processes, f.scope));
    if let Some(at) = at {
        mappings_table(at, &mut blocks);
    }
    blocks.extend(charts_of(plots, Kind::Mappings, f.scope));
    blocks
}

fn attribution(a: &Analysis, plots: &[Plot], doc: &mut Vec<Block>) {
    let mut section = Vec::new();
    for (i, f) in a.headlines().enumerate() {
        let blocks = scope_attribution(a, plots, f, i == 0);
        if !blocks.is_empty() {
            // The kernel's view (by kind, process, mapping), also of a
            // scope judged by its runtime's heap.
            let metric = crate::fit::kernel_primary(&a.fits, f.scope);
            section.push(heading(3, format!("{} ({})", f.scope, metric.label())));
            section.extend(blocks);
        }
    }
    if !section.is_empty() {
        doc.push(heading(2, "Where it grows"));
        doc.extend(section);
    }
}

/// `--py-sites`: the Python lines that leak, fastest first, with their
/// tracebacks and the share of the anon growth they explain; then what grew
/// once or holds much; what tracing cost.
fn where_in_the_code(a: &Analysis, doc: &mut Vec<Block>) {
    if a.sites.is_empty() && a.py_overhead.is_empty() {
        return;
    }
    doc.push(heading(2, "Where in the code"));
    doc.extend(site_sources_explained(a));
    doc.push(sites_table(a));
    doc.extend(leaking_sites(a));
    doc.extend(tracing_costs(a));
}

/// What the sites are, one paragraph per source in the table, and their unit while attached.
fn site_sources_explained(a: &Analysis) -> Vec<Block> {
    let mut blocks = Vec::new();
    let attached = a.mode() != "run";
    let has = |source: SiteSource| a.sites.iter().any(|s| s.source == source);
    if !attached && (has(SiteSource::Python) || !a.py_overhead.is_empty()) {
        blocks.push(para(vec![text(
            "Python allocation sites (tracemalloc, innermost frame of your code), their growth \
             per run pooled over the processes that hold them (a recycled worker's growth counts \
             while it lived), judged like every other series. tracemalloc sees Python's \
             allocators only: memory C extensions allocate themselves is not in these lines.",
        )]));
    }
    if has(SiteSource::JavaScript) {
        blocks.push(para(vec![text(
            "JavaScript sites (--js-sites) are functions, named by the innermost frame of the \
             program's own code, with the live bytes V8's sampling heap profiler counts after a \
             full collection (sampled by bytes, each sample weighed so the estimate is \
             unbiased); their 95% CI counts the sampling error as well as the fit's.",
        )]));
    }
    if has(SiteSource::Native) {
        blocks.push(para(vec![text(
            "Native sites (--native-sites) are C, C++ and Rust call stacks sampled by the \
             allocator shim (by bytes, each sample weighed so the estimate is unbiased) and \
             named by leakwatch, each by its first frame outside the allocator and the \
             runtimes. Their 95% CI counts the sampling error as well as the fit's.",
        )]));
    }
    if attached {
        blocks.push(para(vec![text(
            "Attached (attach --native-sites): each site's growth is per hour from the moment \
             the shim went in, one point per answer (every 2 s).",
        )]));
    }
    blocks
}

/// A site's growth per x as `site_rate` words it, or "–" without one.
fn optional_site_rate(a: &Analysis, per_x: Option<f64>) -> String {
    per_x
        .map(|r| phrase::site_rate(a, r))
        .unwrap_or_else(|| "–".into())
}

/// One row per site: its verdict, growth and 95% CI, share of the anon growth, what it holds.
fn sites_table(a: &Analysis) -> Block {
    let rows = a
        .sites
        .iter()
        .map(|s| {
            vec![
                s.site.clone(),
                s.scope.to_string(),
                s.verdict.as_str().to_string(),
                match s.bytes_per_task {
                    Some(t) => format!("{}/task", format_signed_bytes(t)),
                    None => optional_site_rate(a, s.bytes_per_run),
                },
                match (s.bytes_per_task_ci95, s.bytes_per_run_ci95) {
                    (Some((lo, hi)), _) => format!(
                        "{}/task … {}/task",
                        format_signed_bytes(lo),
                        format_signed_bytes(hi)
                    ),
                    (None, Some((lo, hi))) => format!(
                        "{} … {}",
                        optional_site_rate(a, Some(lo)),
                        optional_site_rate(a, Some(hi))
                    ),
                    _ => "–".into(),
                },
                s.share_of_anon
                    .map(|f| format!("{:.0}%", f * 100.0))
                    .unwrap_or_else(|| "–".into()),
                format_bytes(s.held_bytes as f64),
            ]
        })
        .collect();
    Block::Table(Table::new(
        [
            "site",
            "scope",
            "verdict",
            "growth",
            "95% CI",
            "of anon growth",
            "holds",
        ],
        rows,
    ))
}

/// Each leaking site's growth and the processes that hold it, then its traceback.
fn leaking_sites(a: &Analysis) -> Vec<Block> {
    let mut blocks = Vec::new();
    for s in a
        .sites
        .iter()
        .filter(|s| s.verdict == crate::fit::Verdict::Leak)
    {
        blocks.push(para(vec![
            strong(format!(
                "{} leaks {}",
                s.site,
                match s.bytes_per_task {
                    Some(t) => format!("{} per task", format_signed_bytes(t)),
                    None => optional_site_rate(a, s.bytes_per_run),
                }
            )),
            text(format!(
                " in {} of {}; traceback, innermost first:",
                counted(s.processes as u64, "process", "processes"),
                s.scope
            )),
        ]));
        blocks.push(Block::Code(s.traceback.join("\n") + "\n"));
    }
    blocks
}

/// What tracemalloc's own memory reached in each scope traced with `--py-sites`.
fn tracing_costs(a: &Analysis) -> Vec<Block> {
    a.py_overhead
        .iter()
        .map(|o| {
            para(vec![text(format!(
                "Tracing cost in {}: tracemalloc's own memory reached {} (part of the processes' \
                 RSS while --py-sites runs).",
                o.scope,
                format_bytes(o.bytes as f64)
            ))])
        })
        .collect()
}

/// `--py-sites` and `--jvm-classes`: live objects by type (objgraph's
/// table, the JVM's class histogram) fitted per run — leaks first (classes
/// of the program's code before the runtime's), their count per run (per
/// task in a pool, per hour while attached) with its CI, and their size.
fn which_types_grow(a: &Analysis, doc: &mut Vec<Block>) {
    if a.types.is_empty() {
        return;
    }
    doc.push(heading(2, "Which types grow"));
    let has = |r: SiteSource| a.types.iter().any(|t| t.runtime == r);
    if has(SiteSource::Python) {
        doc.push(para(vec![text(
            "Live Python objects by type after each run (every object the cyclic GC tracks, \
             counted as objgraph does; size is sys.getsizeof, the object itself without what it \
             refers to), pooled over the processes that hold them and judged like every other \
             series. (untracked) is what tracemalloc traces beyond those objects: str, bytes, \
             int and other untracked leaves, and storage no object's size covers.",
        )]));
    }
    if has(SiteSource::Java) {
        doc.push(para(vec![text(
            "Live Java objects by class, from each JVM's class histogram (GC.class_histogram, \
             taken after a full collection: once per run, or while attached as often as 1% of \
             the time in pauses allows); size is the objects' shallow size, without what they \
             refer to. [B is byte[], [Ljava.lang.Object; an Object[].",
        )]));
    }
    let count = |v: Option<f64>, unit: &str| {
        v.map(|r| format!("{}/{unit}", format_signed_count(r)))
            .unwrap_or_else(|| "–".into())
    };
    let rows = a
        .types
        .iter()
        .map(|t| {
            let unit = if t.objects_per_task.is_some() {
                "task"
            } else if t.per_hour {
                "h"
            } else {
                "run"
            };
            let ci = match (t.objects_per_task_ci95, t.objects_per_run_ci95) {
                (Some((lo, hi)), _) | (None, Some((lo, hi))) => {
                    format!("{} … {}", format_signed_count(lo), format_signed_count(hi))
                }
                _ => "–".into(),
            };
            let size = match (t.bytes_per_task, t.bytes_per_run) {
                (Some(b), _) => format!("{}/task", format_signed_bytes(b)),
                (None, Some(b)) if t.per_hour => XAxis::Seconds.format_rate(b / 3600.0, true),
                (None, Some(b)) => XAxis::Run.format_rate(b, true),
                _ => "–".into(),
            };
            vec![
                t.name.clone(),
                t.scope.to_string(),
                t.verdict.as_str().to_string(),
                count(t.objects_per_task.or(t.objects_per_run), unit),
                ci,
                size,
                t.objects.to_string(),
                format_bytes(t.held_bytes as f64),
            ]
        })
        .collect();
    doc.push(Block::Table(Table::new(
        [
            "type", "scope", "verdict", "objects", "95% CI", "size", "live", "holds",
        ],
        rows,
    )));
    for t in a
        .types
        .iter()
        .filter(|t| t.verdict == crate::fit::Verdict::Leak)
        .take(3)
    {
        doc.push(para(vec![
            strong(format!("{} leaks", t.name)),
            text(format!(
                " in {} of {}: {}.",
                counted(t.processes as u64, "process", "processes"),
                t.scope,
                t.reason
            )),
        ]));
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
        .map(|f| vec![text(phrase::finding_line(f))])
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
        doc.push(Block::Table(Table::new(
            ["pid", "process", "lived", "RSS at the end"],
            recycled,
        )));
    }
    for r in &a.recycle {
        doc.push(para(vec![
            strong("Recycle:"),
            text(format!(" {}", phrase::recycle_line(r))),
        ]));
    }
    for t in &a.trees {
        doc.push(para(vec![text(format!("Tree {}.", phrase::tree_line(t)))]));
    }
}

/// The gate's outcome and one row per check: report.md, report.html and
/// the CI step summary.
pub fn gate_section(g: &GateResult) -> Vec<Block> {
    vec![
        heading(2, "Gate"),
        para(vec![strong(if g.passed { "Passed." } else { "FAILED." })]),
        Block::Table(gate_table(g)),
    ]
}

fn gate_table(g: &GateResult) -> Table {
    let rows = g
        .checks
        .iter()
        .map(|c| vec![c.name.clone(), c.mark().to_string(), c.message.clone()])
        .collect();
    Table::new(["check", "result", "numbers"], rows)
}

fn projection(a: &Analysis, doc: &mut Vec<Block>) {
    doc.push(heading(2, "Projection"));
    doc.push(para(vec![text(match &a.projection {
        Some(p) => format!("{}.", phrase::projection_line(p)),
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
    if let Some(failed) = failed_runs(a) {
        doc.push(para(vec![
            strong(format!("Failed: {failed}.")),
            text(if a.runs.iter().filter(|r| r.failed()).count() == 1 {
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
    doc.push(Block::Table(Table::new(
        ["run", "status", "duration", "peak RSS"],
        rows,
    )));
}

/// What sampling cost (attach mode), in one paragraph: the interval kept,
/// the cheap sweep, the page walks and the longest one — the longest the
/// target's memory map was locked by leakwatch.
fn sampling_cost(a: &Analysis, doc: &mut Vec<Block>) {
    let Some(s) = &a.sampling else {
        return;
    };
    let late = match s.late_ticks {
        0 => String::new(),
        n => format!(", {n} of them late"),
    };
    let walks = match &s.longest_walk {
        _ if s.deep_budget <= 0.0 => "deep tier off (--deep-budget 0): no page walk".to_string(),
        None => "no page walk".to_string(),
        Some(w) => format!(
            "{}, {}, {:.0} ms in all; the longest walk took \
             {:.1} ms (pid {}, {}): the longest the target's memory map was locked",
            crate::units::counted(s.deep_samples, "deep sample", "deep samples"),
            crate::units::counted(s.page_walks, "page walk", "page walks"),
            s.deep_cost_s * 1000.0,
            w.ms,
            w.pid,
            w.comm
        ),
    };
    // Its own section: after Projection (attach has no runs, often no gate)
    // it would read as part of the projection.
    doc.push(heading(2, "Sampling cost"));
    doc.push(para(vec![text(format!(
        "{} samples, every {} on average (asked {}){late}; a cheap sweep of up to {} \
             took {:.1} ms on average, {:.1} ms at most; {walks}. leakwatch used \
             {:.2} s of CPU while sampling.",
        s.ticks,
        seconds(s.achieved_interval_s),
        seconds(s.interval_s),
        crate::units::counted(s.processes_max, "process", "processes"),
        s.sweep_mean_ms,
        s.sweep_max_ms,
        s.cpu_s
    ))]));
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
    doc.extend(memory_measures_explained());
    doc.extend(verdicts_explained());
    doc.extend(copy_on_write_explained());
}

/// "RSS, PSS, USS and shared": what each memory measure counts.
fn memory_measures_explained() -> Vec<Block> {
    vec![
        heading(3, "RSS, PSS, USS and shared"),
        Block::List(vec![
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
        ]),
    ]
}

/// "Verdicts": what each verdict means, then how warm-up and the 95% CI are shown.
fn verdicts_explained() -> Vec<Block> {
    vec![
        heading(3, "Verdicts"),
        Block::List(vec![
            vec![
                strong("leak"),
                text(format!(
                    ": the growth rate at the end of the observation — what the same work would \
                     add per run (per hour) from here on — is above the threshold ({} or 0.1% of \
                     the level per run, or per hour over time) with 95% confidence: the lower end \
                     of its interval is above it. Memory moves in steps and saw-teeth, so the rate \
                     is estimated by the model of the series' shape: its straight line, the \
                     segment after its last change point, steps at their long-run rate, or for a \
                     saw-tooth (a garbage collector, per-request scratch) the troughs, what is \
                     left after each collection. The rate shown is that estimate.",
                    format_bytes(MIN_SLOPE_BYTES)
                )),
            ],
            vec![
                strong("plateau"),
                text(
                    ": it grew, then stopped: the end rate's interval lies below the threshold \
                     after growth above it (a cache, an allocator's high-water mark), shown with \
                     its fill rate, where it stopped and the level it holds; or a one-off step, \
                     which is not a rate.",
                ),
            ],
            vec![
                strong("stable"),
                text(
                    ": it never grew by more than the threshold, and the end rate's interval lies below it.",
                ),
            ],
            vec![
                strong("inconclusive"),
                text(
                    ": the end rate's interval contains the threshold (too few points, or too much \
                     noise, to tell); the verdict line says the rerun that would decide it, as the \
                     flag to type.",
                ),
            ],
        ]),
        para(vec![text(
            "Warm-up: leading points left out of the fit (a first run that loads code and fills \
             caches), the same for every metric of a process tree; the charts shade them and draw \
             the model the verdict used (segments, troughs, or the fitted line). The 95% CI is the range the true slope lies in with \
             95% confidence; more runs narrow it.",
        )]),
    ]
}

/// "Copy-on-write after fork": why a forked worker's unsharing is not a leak.
fn copy_on_write_explained() -> Vec<Block> {
    vec![
        heading(3, "Copy-on-write after fork"),
        para(vec![text(
            "A forked worker (Celery prefork, gunicorn, multiprocessing, a process pool) starts \
             out sharing all its pages with its parent. Each page it writes is copied for it \
             alone: its Private_Dirty rises and its Shared_Dirty falls by the same amount while \
             its RSS stays flat. That is unsharing, not a leak: the worker allocates nothing new, \
             yet the pool's real memory (the PSS sum) grows until every touched page is copied. \
             CPython writes reference counts and garbage-collector headers even when objects are \
             only read, so its workers unshare the parent's heap steadily; calling gc.freeze() \
             in the parent just before forking keeps the collector off those pages.",
        )]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs whose statuses are `exit:N` (0: it passed).
    fn runs(codes: &[i32]) -> Vec<RunRecord> {
        codes
            .iter()
            .zip(1..)
            .map(|(&code, run)| RunRecord {
                run,
                pid: 100 + run,
                exit_code: Some(code),
                status: format!("exit:{code}"),
                duration_s: Some(0.01),
                peak_rss_bytes: None,
                peak_bound_bytes: None,
            })
            .collect()
    }

    /// Every run failing alike is one phrase, not twenty; a long list of
    /// failures is cut after five; none, nothing.
    #[test]
    fn failed_runs_read_as_one_phrase() {
        assert_eq!(
            failures(&runs(&[1; 20])).as_deref(),
            Some("all 20 (exit:1)")
        );
        assert_eq!(
            failures(&runs(&[1, 2, 1])).as_deref(),
            Some("run 1 (exit:1), run 2 (exit:2), run 3 (exit:1)")
        );
        let some: Vec<i32> = (0..16).map(|i| i % 2).collect();
        assert_eq!(
            failures(&runs(&some)).as_deref(),
            Some(
                "run 2 (exit:1), run 4 (exit:1), run 6 (exit:1), run 8 (exit:1), \
                 run 10 (exit:1), and 3 more"
            )
        );
        assert_eq!(failures(&runs(&[0, 0])), None);
        assert_eq!(failures(&runs(&[1])).as_deref(), Some("run 1 (exit:1)"));
    }
}
