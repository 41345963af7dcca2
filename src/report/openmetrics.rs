//! OpenMetrics text for Prometheus: the processes and series being sampled
//! and the fitted growth with its verdict. One model, two uses: `attach
//! --serve` renders it at each scrape from the rows sampled so far (`Live`,
//! refit every `REFIT_EVERY` samples); `export DIR` renders it once from a
//! finished samples.csv for node-exporter's textfile collector.
//!
//! Only gauges are written and no timestamps, so the same text is valid
//! OpenMetrics 1.0 and Prometheus text format 0.0.4 (which reads `# EOF` as
//! a comment), as the textfile collector requires. Label values are
//! escaped as both formats say (backslash, double quote, newline).
//! Cardinality is bounded: at most `top` processes (the largest by RSS),
//! the others counted in `leakwatch_processes`.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::fit::{self, Analysis, FitOptions, Verdict};
use crate::series::{self, Metric};
use crate::store::{Row, Scope, Tier};

/// The content type of the text this module writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Samples between two refits of the live series.
pub const REFIT_EVERY: u64 = 10;

/// Per-process memory kinds exported, with their label.
const PROCESS_KINDS: [(Metric, &str); 8] = [
    (Metric::RssBytes, "rss"),
    (Metric::PssBytes, "pss"),
    (Metric::UssBytes, "uss"),
    (Metric::AnonBytes, "anon"),
    (Metric::FileBytes, "file"),
    (Metric::ShmemBytes, "shmem"),
    (Metric::SharedBytes, "shared"),
    (Metric::SwapBytes, "swap"),
];

/// One metric family: its samples as (labels, value).
#[derive(Debug, Clone, PartialEq)]
struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str) -> Self {
        Family {
            name,
            help,
            samples: Vec::new(),
        }
    }

    fn push(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        if value.is_finite() {
            self.samples.push((labels, value));
        }
    }
}

/// A label value as both text formats escape it.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in crate::escape::inert_lines(value).chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn render(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let _ = writeln!(out, "# TYPE {} gauge", f.name);
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        for (labels, value) in &f.samples {
            out.push_str(f.name);
            if !labels.is_empty() {
                let body: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                let _ = write!(out, "{{{}}}", body.join(","));
            }
            let _ = writeln!(out, " {value}");
        }
    }
    out.push_str("# EOF\n");
    out
}

/// The newest sample's rows, with each process's last deep values carried
/// (PSS, USS and shared are read on a budget, not every tick) and its last
/// heap row (a runtime's live heap is known only after a collection: the
/// last one seen is carried until the next).
#[derive(Debug, Clone, Default)]
pub struct Latest {
    sample: Option<u64>,
    rows: Vec<Row>,
    deep: BTreeMap<(Scope, u32, u64), Row>,
    heap: BTreeMap<(Scope, u32, u64), Row>,
    /// Samples seen.
    pub samples: u64,
}

impl Latest {
    pub fn push(&mut self, row: &Row) {
        let key = (row.scope, row.pid, row.start_time);
        if row.tier == Tier::Heap {
            let live = row.heap_live_bytes.or_else(|| {
                let last = self.heap.get(&key)?;
                (last.heap_source == row.heap_source)
                    .then_some(last.heap_live_bytes)
                    .flatten()
            });
            let mut row = row.clone();
            row.heap_live_bytes = live;
            self.heap.insert(key, row);
            return;
        }
        if !row.is_process_sample() {
            return;
        }
        if self.sample != Some(row.sample) {
            self.sample = Some(row.sample);
            self.samples += 1;
            // Keep the deep values of processes still there only.
            let live: Vec<(Scope, u32, u64)> = self
                .rows
                .iter()
                .map(|r| (r.scope, r.pid, r.start_time))
                .collect();
            self.deep.retain(|k, _| live.contains(k));
            self.heap.retain(|k, _| live.contains(k));
            self.rows.clear();
        }
        let mut row = row.clone();
        if row.tier == Tier::Deep {
            self.deep.insert(key, row.clone());
        } else if let Some(d) = self.deep.get(&key) {
            row.pss_bytes = d.pss_bytes;
            row.uss_bytes = d.uss_bytes;
            row.shared_bytes = d.shared_bytes;
        }
        self.rows.push(row);
    }
}

/// What `attach --serve` keeps: every row goes into a `series::Builder`
/// (bounded memory, as `leakwatch report` reads samples.csv) and the
/// newest sample; a refit is the same analysis `report` does, on a clone.
#[derive(Debug, Clone, Default)]
pub struct Live {
    builder: series::Builder,
    pub latest: Latest,
    fitted: Option<Analysis>,
    fitted_at: u64,
}

impl Live {
    pub fn push(&mut self, rows: &[Row]) {
        for row in rows {
            self.latest.push(row);
            self.builder.push(row.clone());
        }
    }

    /// Whether the fit is missing or `REFIT_EVERY` samples old.
    pub fn stale(&self) -> bool {
        self.fitted.is_none() || self.latest.samples >= self.fitted_at + REFIT_EVERY
    }

    /// What a refit needs, taken under the lock: a copy of the builder.
    pub fn snapshot(&self) -> (series::Builder, u64) {
        (self.builder.clone(), self.latest.samples)
    }

    pub fn set_fit(&mut self, analysis: Analysis, at: u64) {
        self.fitted = Some(analysis);
        self.fitted_at = at;
    }

    pub fn render(&self, top: usize) -> String {
        render(&families(self.fitted.as_ref(), &self.latest, top))
    }
}

/// The analysis of what a builder holds: the same `fit::analyse` the
/// final summary.json comes from.
pub fn refit(builder: series::Builder, opts: &FitOptions) -> Analysis {
    fit::analyse(builder.finish(None), opts)
}

/// The exposition of a finished run: its samples (as `leakwatch report`
/// reads them) and its last sample.
pub fn export(analysis: &Analysis, latest: &Latest, top: usize) -> String {
    render(&families(Some(analysis), latest, top))
}

fn process_families(latest: &Latest, top: usize) -> Vec<Family> {
    let mut memory = Family::new(
        "leakwatch_process_memory_bytes",
        "Memory of a sampled process by kind (rss, pss, uss, anon, file, shmem, shared, swap), bytes.",
    );
    let mut fds = Family::new(
        "leakwatch_process_open_fds",
        "Open file descriptors of a process.",
    );
    let mut threads = Family::new("leakwatch_process_threads", "Threads of a process.");
    let mut heap = Family::new(
        "leakwatch_process_heap_bytes",
        "A runtime's own heap of a process by kind (live: after its last collection; used; max) and source (hsperfdata, node_preload, node_inspector, metrics, tracemalloc), bytes.",
    );
    let mut count = Family::new(
        "leakwatch_processes",
        "Processes sampled in the newest sample, per scope (exported or not).",
    );
    let mut exported = Family::new(
        "leakwatch_processes_exported",
        "Processes with per-process metrics here: the largest by RSS, at most --export-top.",
    );
    let mut by_scope: BTreeMap<Scope, Vec<&Row>> = BTreeMap::new();
    for r in latest.rows.iter().filter(|r| r.scope != Scope::Cgroup) {
        by_scope.entry(r.scope).or_default().push(r);
    }
    for (scope, mut rows) in by_scope {
        count.push(vec![("scope", scope.to_string())], rows.len() as f64);
        rows.sort_by_key(|r| std::cmp::Reverse(r.rss_bytes.unwrap_or(0)));
        rows.truncate(top);
        exported.push(vec![("scope", scope.to_string())], rows.len() as f64);
        for r in rows {
            let id = || {
                vec![
                    ("scope", scope.to_string()),
                    ("pid", r.pid.to_string()),
                    ("comm", r.comm.clone()),
                ]
            };
            for (metric, kind) in PROCESS_KINDS {
                if let Some(v) = metric.value(r) {
                    let mut labels = id();
                    labels.push(("kind", kind.to_string()));
                    memory.push(labels, v as f64);
                }
            }
            if let Some(v) = r.fds {
                fds.push(id(), v as f64);
            }
            if let Some(v) = r.threads {
                threads.push(id(), v as f64);
            }
            let Some(h) = latest.heap.get(&(r.scope, r.pid, r.start_time)) else {
                continue;
            };
            let source = h.heap_source.map_or("", |s| s.name());
            // `promoted` only bounds the live heap's fit: not a kind of heap to publish.
            let kinds = Metric::HEAP
                .into_iter()
                .filter(|&m| m != Metric::HeapPromotedBytes);
            for metric in kinds {
                if let Some(v) = metric.value(h) {
                    let mut labels = id();
                    let kind = metric.name().trim_start_matches("heap_");
                    labels.push(("kind", kind.trim_end_matches("_bytes").to_string()));
                    labels.push(("source", source.to_string()));
                    heap.push(labels, v as f64);
                }
            }
        }
    }
    vec![memory, fds, threads, heap, count, exported]
}

/// Each scope's sums over its processes in the newest sample (a cgroup's
/// own row as it is): a metric only where every process has it.
fn series_families(latest: &Latest) -> Vec<Family> {
    let mut memory = Family::new(
        "leakwatch_series_memory_bytes",
        "A series' memory by kind (summed over its processes; a cgroup's own accounting), bytes.",
    );
    let mut fds = Family::new(
        "leakwatch_series_open_fds",
        "Open file descriptors of a series.",
    );
    let mut threads = Family::new("leakwatch_series_threads", "Threads of a series.");
    let mut sums: BTreeMap<Scope, Vec<Option<u64>>> = BTreeMap::new();
    for r in &latest.rows {
        let s = sums
            .entry(r.scope)
            .or_insert_with(|| vec![Some(0); Metric::ALL.len()]);
        for (sum, m) in s.iter_mut().zip(Metric::ALL) {
            *sum = sum.zip(m.value(r)).map(|(a, b)| a.saturating_add(b));
        }
    }
    for (scope, s) in sums {
        for (sum, m) in s.into_iter().zip(Metric::ALL) {
            let Some(v) = sum else { continue };
            let series = ("series", scope.to_string());
            match m {
                Metric::Fds => fds.push(vec![series], v as f64),
                Metric::Threads => threads.push(vec![series], v as f64),
                m => memory.push(
                    vec![
                        series,
                        ("kind", m.name().trim_end_matches("_bytes").to_string()),
                    ],
                    v as f64,
                ),
            }
        }
    }
    vec![memory, fds, threads]
}

fn fit_families(a: &Analysis) -> Vec<Family> {
    let mut growth = Family::new(
        "leakwatch_growth_bytes_per_second",
        "Growth of a series at the end of the samples so far: the rate its verdict was decided on (summary.json's end_rate), bytes per second.",
    );
    let mut lower = Family::new(
        "leakwatch_growth_ci95_lower_bytes_per_second",
        "Lower end of that rate's 95% confidence interval, bytes per second.",
    );
    let mut upper = Family::new(
        "leakwatch_growth_ci95_upper_bytes_per_second",
        "Upper end of that rate's 95% confidence interval, bytes per second.",
    );
    let mut counts = Family::new(
        "leakwatch_growth_per_second",
        "Growth of a count series (fds, threads) at the end, as its verdict was decided, per second.",
    );
    let mut verdict = Family::new(
        "leakwatch_verdict",
        "The series' verdict as a state set: 1 for the current one of leak, plateau, stable, inconclusive.",
    );
    let mut points = Family::new("leakwatch_fit_points", "Points the fit used.");
    for f in a.fits.iter().filter(|f| f.x == series::XAxis::Seconds) {
        let id = || {
            vec![
                ("series", f.scope.to_string()),
                ("metric", f.metric.name().to_string()),
            ]
        };
        // The rate the verdict was decided on, as the gate judges it.
        let (rate, ci) = f.judged_rate();
        if let Some(s) = rate {
            if f.metric.is_bytes() {
                growth.push(id(), s);
            } else {
                counts.push(id(), s);
            }
        }
        if let (Some((lo, hi)), true) = (ci, f.metric.is_bytes()) {
            lower.push(id(), lo);
            upper.push(id(), hi);
        }
        for v in [
            Verdict::Leak,
            Verdict::Plateau,
            Verdict::Stable,
            Verdict::Inconclusive,
        ] {
            let mut labels = id();
            labels.push(("verdict", v.as_str().to_string()));
            verdict.push(labels, if f.verdict == v { 1.0 } else { 0.0 });
        }
        points.push(id(), f.n as f64);
    }
    let mut overall = Family::new(
        "leakwatch_overall_verdict",
        "The session's overall verdict as a state set (the primary series', or leak where a side series leaks).",
    );
    for v in [
        Verdict::Leak,
        Verdict::Plateau,
        Verdict::Stable,
        Verdict::Inconclusive,
    ] {
        overall.push(
            vec![("verdict", v.as_str().to_string())],
            if a.verdict == v { 1.0 } else { 0.0 },
        );
    }
    vec![growth, lower, upper, counts, verdict, points, overall]
}

fn families(a: Option<&Analysis>, latest: &Latest, top: usize) -> Vec<Family> {
    let mut info = Family::new(
        "leakwatch_target",
        "What leakwatch follows: the mode and the target (always 1).",
    );
    let target = a
        .and_then(|a| {
            a.target
                .clone()
                .or_else(|| a.target_pid.map(|p| format!("pid {p}")))
        })
        .unwrap_or_default();
    info.push(
        vec![
            ("mode", a.map(|a| a.mode()).unwrap_or("attach").to_string()),
            ("target", target),
            ("version", env!("CARGO_PKG_VERSION").to_string()),
        ],
        1.0,
    );
    let mut samples = Family::new("leakwatch_samples", "Samples taken so far.");
    samples.push(Vec::new(), latest.samples as f64);
    let mut out = vec![info, samples];
    out.extend(process_families(latest, top));
    out.extend(series_families(latest));
    if let Some(a) = a {
        out.extend(fit_families(a));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(sample: u64, pid: u32, rss: u64, tier: Tier) -> Row {
        Row {
            sample,
            t_seconds: sample as f64,
            pid,
            comm: "a \"quoted\"\nname".into(),
            tier,
            rss_bytes: Some(rss),
            anon_bytes: Some(rss / 2),
            pss_bytes: (tier == Tier::Deep).then_some(rss / 4),
            fds: Some(3),
            threads: Some(1),
            ..Row::new(Scope::Target)
        }
    }

    #[test]
    fn live_exposition_is_valid_text_with_bounded_processes_and_a_fit() {
        let mut live = Live::default();
        for s in 0..30u64 {
            let tier = if s % 10 == 0 { Tier::Deep } else { Tier::Cheap };
            let rows: Vec<Row> = (1..=5)
                .map(|pid| row(s, pid, (100 + pid as u64 + 10 * s) << 20, tier))
                .collect();
            live.push(&rows);
        }
        assert!(live.stale());
        let (b, at) = live.snapshot();
        live.set_fit(refit(b, &FitOptions::default()), at);
        assert!(!live.stale());
        let text = live.render(2);
        assert!(text.ends_with("# EOF\n"));
        assert!(
            text.contains("leakwatch_processes{scope=\"target\"} 5"),
            "{text}"
        );
        assert!(text.contains("leakwatch_processes_exported{scope=\"target\"} 2"));
        // Carried deep values: PSS of the last deep sample is still exported.
        assert!(text.contains("kind=\"pss\""), "{text}");
        assert!(text.contains("comm=\"a \\\"quoted\\\"\\nname\""), "{text}");
        assert!(text.contains(
            "leakwatch_verdict{series=\"target\",metric=\"anon_bytes\",verdict=\"leak\"} 1"
        ));
        let growth = text
            .lines()
            .find(|l| {
                l.starts_with(
                    "leakwatch_growth_bytes_per_second{series=\"target\",metric=\"rss_bytes\"}",
                )
            })
            .unwrap();
        let v: f64 = growth.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((v - 50.0 * 1048576.0).abs() < 1.0, "{v}");
        // Every family's samples follow its TYPE line, once.
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
        let mut dedup = types.clone();
        dedup.dedup();
        assert_eq!(types, dedup);
    }

    /// A process's heap rows: exported beside its memory, the live heap
    /// carried from the last collection seen, gone with the process.
    #[test]
    fn heap_rows_are_exported_with_the_last_live_heap_carried() {
        let heap = |sample: u64, live: Option<u64>| Row {
            sample,
            pid: 1,
            tier: Tier::Heap,
            heap_live_bytes: live,
            heap_used_bytes: Some(300 << 20),
            heap_max_bytes: Some(512 << 20),
            heap_source: Some(crate::store::HeapSource::Hsperfdata),
            ..Row::new(Scope::Target)
        };
        let mut latest = Latest::default();
        latest.push(&row(0, 1, 100 << 20, Tier::Deep));
        latest.push(&heap(0, Some(200 << 20)));
        latest.push(&row(1, 1, 100 << 20, Tier::Cheap));
        latest.push(&heap(1, None));
        let text = render(&families(None, &latest, 5));
        let line = |kind: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with("leakwatch_process_heap_bytes{")
                        && l.contains(&format!("kind=\"{kind}\""))
                })
                .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        };
        assert_eq!(line("live"), Some(f64::from(200u32 << 20)), "{text}");
        assert_eq!(line("used"), Some(f64::from(300u32 << 20)), "{text}");
        assert_eq!(line("max"), Some(f64::from(512u32 << 20)), "{text}");
        assert!(text.contains("source=\"hsperfdata\""), "{text}");
        // The process is gone from the next sample: so is its heap.
        latest.push(&row(2, 2, 100 << 20, Tier::Cheap));
        latest.push(&row(3, 2, 100 << 20, Tier::Cheap));
        let text = render(&families(None, &latest, 5));
        assert!(!text.contains("leakwatch_process_heap_bytes{"), "{text}");
    }
}
