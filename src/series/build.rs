//! One pass over samples.csv, in bounded memory: the rows become the scope
//! series, the life of each process, the run table, the first and last
//! mapping snapshots and the session's notes. Nothing holds every row, so a
//! day of samples is analysed in the memory of ten minutes of them.

use std::collections::BTreeMap;

use super::sites::{Overhead, SiteSeries, Sites, TypeSeries};
use super::thin::Thinned;
use super::{Metric, RunRecord, Series, XAxis};
use crate::store::{
    HISTOGRAM_ANON_EVENT, HeapSource, Row, SamplingCost, Scope, SessionEvent, Tier,
};

/// Most points a scope's series keeps (the fit averages further, to 1000).
const SERIES_CAP: usize = 2048;
/// Most points a process's own series keeps: per run in run mode (worker
/// leaks are judged run by run), per sample over time.
const LIFE_CAP_RUNS: usize = 4096;
const LIFE_CAP_TIME: usize = 256;
/// Survivors that exited on their own, listed by pid before a count.
const EXITS_SHOWN: usize = 5;

/// Everything the analysis needs from the rows.
#[derive(Debug, Clone)]
pub struct Samples {
    pub x_axis: XAxis,
    /// Every (scope, metric) series with at least one point, scopes in
    /// report order.
    pub series: Vec<Series>,
    /// Every process of every scope, ordered by scope, pid and start time.
    pub lives: Vec<ProcessLife>,
    pub runs: Vec<RunRecord>,
    /// Mapping rows of each scope's first and last smaps snapshot.
    pub mappings: Vec<MappingSnapshot>,
    /// PSS and RSS sums at each multi-process scope's last deep sample.
    pub trees: Vec<TreeSums>,
    /// The command line of `run` mode, as typed.
    pub command_line: Option<String>,
    /// The attached process of `attach` mode.
    pub target_pid: Option<u32>,
    /// Seconds from the first to the last sample.
    pub span_s: f64,
    /// Attached: when (s) the target exited or its pid was reused, which
    /// ended the session (`None`: it ran to the end).
    pub target_ended: Option<f64>,
    pub interrupted: bool,
    /// Notes recorded during the session, then what the rows show (survivors
    /// that exited on their own, a last line cut short).
    pub notes: Vec<String>,
    /// Python allocation sites (`--py-sites`), and what tracing cost.
    pub sites: Vec<SiteSeries>,
    pub py_overhead: Vec<Overhead>,
    /// Live Python objects by type (`--py-sites`), count and bytes.
    pub types: Vec<TypeSeries>,
    /// Rows read.
    pub rows: u64,
    /// What was attached to when it is not one PID (`cgroup /sys/fs/…`,
    /// `name 'regex'`): from the session's `target` row.
    pub target: Option<String>,
    /// The label set of each `series:<N>` scope (`analyze --prometheus`),
    /// as `{job="api",pod="api-7d9f"}`: from the session's `labels` rows.
    pub labels: BTreeMap<u32, String>,
    /// What sampling cost (attach mode), as recorded by the session.
    pub sampling: Option<SamplingCost>,
    /// The processes whose runtime published its heap, and how.
    pub heap_sources: Vec<HeapProcess>,
    /// The gauge `--metric NAME` followed (its `gauge` or `gauge_bytes`
    /// series), from the first `heap` row that names it.
    pub gauge_name: Option<String>,
    /// Per scope, what leakwatch's own class histograms (`--jvm-classes`) changed its
    /// processes' anon memory by, bytes summed up to each x where one was answered.
    pub histograms: Vec<Induced>,
}

/// A scope's anon memory changed by leakwatch's class histograms (`HISTOGRAM_ANON_EVENT`):
/// points (x, bytes in all since the first), one per answered histogram, in x order. A
/// histogram answered after run k's sample shows from run k + 1: its x is k + 0.5.
#[derive(Debug, Clone, PartialEq)]
pub struct Induced {
    pub scope: Scope,
    pub points: Vec<(f64, f64)>,
}

impl Induced {
    /// The change from the histograms up to and including `x`.
    pub fn upto(&self, x: f64) -> f64 {
        let i = self.points.partition_point(|p| p.0 <= x);
        i.checked_sub(1).map_or(0.0, |i| self.points[i].1)
    }
}

/// A process whose runtime's own heap was read (`heap` rows): summary.json's
/// `heap_sources`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeapProcess {
    /// Its scope (`pid:<PID>`, `target`, `survivors`).
    #[serde(rename = "name")]
    pub scope: Scope,
    pub pid: u32,
    pub comm: String,
    #[serde(rename = "heap_source")]
    pub source: HeapSource,
}

/// The memory of one process over its life: identity (pid and start time, so
/// a reused pid is another process), its RSS and RssAnon points (one per run
/// in run mode — the peak for `command`, else the run's last sample — one
/// per sample over time, averaged when long), and its first and last deep
/// samples.
#[derive(Debug, Clone)]
pub struct ProcessLife {
    pub scope: Scope,
    pub pid: u32,
    pub ppid: u32,
    pub start_time: u64,
    pub comm: String,
    rss: Thinned,
    anon: Thinned,
    pending: Option<Pending>,
    /// x of the first and last sample, and the RSS at the last.
    pub first_x: f64,
    pub last_x: f64,
    pub last_rss_bytes: u64,
    pub first_deep: Option<Deep>,
    pub last_deep: Option<Deep>,
}

/// What copy-on-write is told by, at one deep sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deep {
    pub rss_bytes: Option<u64>,
    pub private_dirty_bytes: Option<u64>,
    pub shared_bytes: Option<u64>,
}

/// A point being built: the rows of one run (or one sample) so far.
#[derive(Debug, Clone, Copy)]
struct Pending {
    key: u64,
    x: f64,
    rss: Option<f64>,
    anon: Option<f64>,
}

impl ProcessLife {
    /// The process's own series of a memory metric: RSS, or RssAnon.
    /// Other metrics are not kept per process (None).
    pub fn points(&self, metric: Metric) -> Option<Vec<(f64, f64)>> {
        let t = match metric {
            Metric::RssBytes => &self.rss,
            Metric::AnonBytes => &self.anon,
            _ => return None,
        };
        let mut points = t.points();
        if let Some(p) = self.pending {
            let y = match metric {
                Metric::RssBytes => p.rss,
                _ => p.anon,
            };
            points.extend(y.map(|y| (p.x, y)));
        }
        Some(points)
    }

    /// RssAnon where the kernel has it, else RSS: what a heap leak grows.
    pub fn heap_points(&self) -> Vec<(f64, f64)> {
        match self.points(Metric::AnonBytes) {
            Some(p) if !p.is_empty() => p,
            _ => self.points(Metric::RssBytes).unwrap_or_default(),
        }
    }

    fn push(&mut self, row: &Row, key: u64, x: f64) {
        let rss = row.rss_bytes.map(|b| b as f64);
        let anon = row.anon_bytes.map(|b| b as f64);
        let peak = self.scope == Scope::Command;
        match &mut self.pending {
            Some(p) if p.key == key => {
                // The command's point is its peak in the run; others keep
                // the run's last sample.
                let pick = |old: Option<f64>, new: Option<f64>| match (old, new) {
                    (Some(a), Some(b)) if peak => Some(a.max(b)),
                    (a, None) => a,
                    (_, b) => b,
                };
                p.rss = pick(p.rss, rss);
                p.anon = pick(p.anon, anon);
            }
            _ => {
                self.flush();
                self.pending = Some(Pending { key, x, rss, anon });
            }
        }
        self.last_x = x;
        self.last_rss_bytes = row.rss_bytes.unwrap_or(self.last_rss_bytes);
        if row.tier == Tier::Deep {
            let deep = Deep {
                rss_bytes: row.rss_bytes,
                private_dirty_bytes: row.private_dirty_bytes,
                shared_bytes: row.shared_bytes,
            };
            self.first_deep.get_or_insert(deep);
            self.last_deep = Some(deep);
        }
    }

    fn flush(&mut self) {
        if let Some(p) = self.pending.take() {
            if let Some(y) = p.rss {
                self.rss.push(p.x, y);
            }
            if let Some(y) = p.anon {
                self.anon.push(p.x, y);
            }
        }
    }
}

/// One mapping name of one process at a smaps snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingRow {
    pub pid: u32,
    pub start_time: u64,
    pub name: String,
    pub rss_bytes: u64,
}

/// A scope's first and last smaps snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MappingSnapshot {
    pub scope: Option<Scope>,
    first_sample: u64,
    pub first: Vec<MappingRow>,
    last_sample: u64,
    pub last: Vec<MappingRow>,
}

/// PSS and RSS sums of a scope at its last deep sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeSums {
    pub scope: Scope,
    pub processes: usize,
    pub pss_bytes: u64,
    pub rss_bytes: u64,
}

/// A scope's values at one sample: per metric, the sum over its processes,
/// or `None` when any process lacks the metric (a partial sum would show as
/// a false drop). What processes say of themselves (`Metric::OWN`: a
/// runtime heap, a `--metric` gauge) is summed over the processes with a
/// `heap` row, `None` when one of them lacks it (a gauge: a row that names
/// it without a value).
#[derive(Debug, Clone)]
struct ScopeSample {
    sums: [Option<u64>; Metric::ALL.len()],
    /// Per `Metric::OWN` metric, whether a heap row lacked it.
    own_lacks: [bool; Metric::OWN.len()],
    processes: usize,
    deep: usize,
    deep_pss: u64,
    deep_rss: u64,
}

/// Where `metric` is in `Metric::ALL` (and in a `ScopeSample`'s sums).
fn index_of(metric: Metric) -> usize {
    Metric::ALL.iter().position(|&m| m == metric).unwrap_or(0)
}

impl ScopeSample {
    fn new() -> Self {
        ScopeSample {
            sums: Metric::ALL.map(|m| if m.is_own() { None } else { Some(0) }),
            own_lacks: [false; Metric::OWN.len()],
            processes: 0,
            deep: 0,
            deep_pss: 0,
            deep_rss: 0,
        }
    }

    fn sum(&self, metric: Metric) -> Option<u64> {
        let lacks = Metric::OWN
            .iter()
            .position(|&m| m == metric)
            .is_some_and(|i| self.own_lacks[i]);
        if lacks {
            return None;
        }
        self.sums[index_of(metric)]
    }

    /// A process's `heap` row: its runtime's figures and its gauge.
    fn add_heap(&mut self, row: &Row) {
        for (i, metric) in Metric::OWN.into_iter().enumerate() {
            let sum = &mut self.sums[index_of(metric)];
            match metric.value(row) {
                Some(v) => *sum = Some(sum.unwrap_or(0).saturating_add(v)),
                None if metric.is_heap() => self.own_lacks[i] = true,
                // A gauge is the endpoint's process's alone: lacking where
                // its row names it (the read failed), not in other rows.
                None => {
                    let named_here = row.gauge_name.is_some()
                        && (metric == Metric::GaugeBytes) == row.gauge_bytes_named();
                    self.own_lacks[i] |= named_here;
                }
            }
        }
    }

    fn add(&mut self, row: &Row) {
        for (sum, metric) in self.sums.iter_mut().zip(Metric::ALL) {
            if metric.is_own() {
                continue;
            }
            *sum = match (*sum, metric.value(row)) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                _ => None,
            };
        }
        self.processes += 1;
        if row.tier == Tier::Deep {
            self.deep += 1;
            self.deep_pss += row.pss_bytes.unwrap_or(0);
            self.deep_rss += row.rss_bytes.unwrap_or(0);
        }
    }
}

/// A scope's series of one metric as it is built.
#[derive(Debug, Clone)]
struct Building {
    points: Thinned,
    pending: Option<(u64, f64, f64)>,
    processes: usize,
}

/// The rows of the sample being read.
#[derive(Debug, Clone)]
struct Batch {
    sample: u64,
    run: Option<u32>,
    t: f64,
    scopes: BTreeMap<Scope, ScopeSample>,
}

/// Builds `Samples` from rows in the order samples.csv holds them. Cloned
/// by `attach --serve` to refit what has been sampled so far.
#[derive(Debug, Clone)]
pub struct Builder {
    x_axis: Option<XAxis>,
    batch: Option<Batch>,
    series: BTreeMap<(Scope, Metric), Building>,
    lives: BTreeMap<(Scope, u32, u64), ProcessLife>,
    runs: BTreeMap<u32, (RunRecord, f64)>,
    run_peaks: BTreeMap<u32, u64>,
    /// Per run, the command's largest RSS read between its exec and its loader while nothing
    /// after its loader was read (`Some`), or `None` once something was (`Row::is_mid_exec`).
    mid_exec_only: BTreeMap<u32, Option<u64>>,
    mappings: BTreeMap<Scope, MappingSnapshot>,
    trees: BTreeMap<Scope, TreeSums>,
    command_line: Option<String>,
    target_pid: Option<u32>,
    t_range: (f64, f64),
    target_ended: Option<f64>,
    interrupted: bool,
    notes: Vec<String>,
    exits: Vec<String>,
    exits_more: usize,
    sites: Sites,
    rows: u64,
    target: Option<String>,
    labels: BTreeMap<u32, String>,
    sampling: Option<SamplingCost>,
    heap_sources: BTreeMap<(Scope, u32, u64), HeapProcess>,
    gauge_name: Option<String>,
    /// Each scope's histogram events: (x, bytes), as read.
    histograms: BTreeMap<Scope, Vec<(f64, i64)>>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    pub fn new() -> Self {
        Builder {
            x_axis: None,
            batch: None,
            series: BTreeMap::new(),
            lives: BTreeMap::new(),
            runs: BTreeMap::new(),
            run_peaks: BTreeMap::new(),
            mid_exec_only: BTreeMap::new(),
            mappings: BTreeMap::new(),
            trees: BTreeMap::new(),
            command_line: None,
            target_pid: None,
            t_range: (f64::INFINITY, f64::NEG_INFINITY),
            target_ended: None,
            interrupted: false,
            notes: Vec::new(),
            exits: Vec::new(),
            exits_more: 0,
            sites: Sites::default(),
            rows: 0,
            target: None,
            labels: BTreeMap::new(),
            sampling: None,
            heap_sources: BTreeMap::new(),
            gauge_name: None,
            histograms: BTreeMap::new(),
        }
    }

    /// Takes the next row of the file.
    pub fn push(&mut self, row: Row) {
        self.rows += 1;
        if row.scope == Scope::Session {
            self.session(&row);
            return;
        }
        // Run mode's rows carry run numbers (run 0 is the baseline).
        let x = *self.x_axis.get_or_insert(if row.run.is_some() {
            XAxis::Run
        } else {
            XAxis::Seconds
        });
        self.t_range = (
            self.t_range.0.min(row.t_seconds),
            self.t_range.1.max(row.t_seconds),
        );
        if row.scope == Scope::Target && self.target_pid.is_none() && self.target.is_none() {
            self.target_pid = Some(row.pid);
        }
        match row.tier {
            Tier::Event => self.event(&row, x),
            Tier::Mapping => self.mapping(row),
            Tier::Site | Tier::Type => self.sites.push(&row),
            Tier::Heap => self.heap(row),
            Tier::Cheap | Tier::Deep => self.process(row, x),
        }
    }

    fn session(&mut self, row: &Row) {
        match row.session_event() {
            Some(SessionEvent::Interrupted) => self.interrupted = true,
            Some(SessionEvent::Note) => self.notes.push(row.comm.clone()),
            // A target that is not one PID: no target_pid, this instead.
            Some(SessionEvent::Target) => self.target = Some(row.comm.clone()),
            // `labels` rows name the series of `analyze`: "<N> {k="v",…}".
            Some(SessionEvent::Labels) => {
                if let Some((i, labels)) = row.comm.split_once(' ')
                    && let Ok(i) = i.parse()
                {
                    self.labels.insert(i, labels.to_string());
                }
            }
            Some(SessionEvent::Sampling) => self.sampling = serde_json::from_str(&row.comm).ok(),
            None => {}
        }
    }

    fn event(&mut self, row: &Row, x_axis: XAxis) {
        let Some(event) = row.event.as_deref() else {
            return;
        };
        if let Some(bytes) = event
            .strip_prefix(HISTOGRAM_ANON_EVENT)
            .and_then(|rest| rest.strip_prefix(' '))
        {
            let at = match (x_axis, row.run) {
                (XAxis::Run, Some(run)) => f64::from(run) + 0.5,
                (XAxis::Run, None) => return,
                (XAxis::Seconds, _) => row.t_seconds,
            };
            // Not a number: a spoiled row, left out.
            if let Ok(bytes) = bytes.parse::<i64>() {
                self.histograms
                    .entry(row.scope)
                    .or_default()
                    .push((at, bytes));
            }
            return;
        }
        // Attached, the target's end ends the session (`sample::attach`).
        if row.scope == Scope::Target
            && x_axis == XAxis::Seconds
            && matches!(event, "exited" | "pid_reused")
        {
            self.target_ended.get_or_insert(row.t_seconds);
        }
        if let (Scope::Survivors, Some(how)) = (row.scope, event.strip_prefix("exited ")) {
            if self.exits.len() < EXITS_SHOWN {
                self.exits.push(format!(
                    "survivor {} exited ({how}) during run {}",
                    row.pid,
                    row.run.unwrap_or(0)
                ));
            } else {
                self.exits_more += 1;
            }
        }
        let Some(run) = row.run else { return };
        if event == "run_start" {
            self.command_line.get_or_insert_with(|| row.comm.clone());
            let record = RunRecord {
                run,
                pid: row.pid,
                exit_code: None,
                status: "unknown".into(),
                duration_s: None,
                peak_rss_bytes: None,
                peak_bound_bytes: None,
            };
            self.runs.insert(run, (record, row.t_seconds));
        } else if event == "peak_bound"
            && let Some((rec, _)) = self.runs.get_mut(&run)
        {
            rec.peak_bound_bytes = row.hwm_bytes;
        } else if let Some(status) = event.strip_prefix("run_end ")
            && let Some((rec, start)) = self.runs.get_mut(&run)
        {
            rec.exit_code = row.exit_code;
            rec.status = status.to_string();
            rec.duration_s = Some(row.t_seconds - *start);
        }
    }

    fn mapping(&mut self, row: Row) {
        let m = MappingRow {
            pid: row.pid,
            start_time: row.start_time,
            name: row.comm,
            rss_bytes: row.rss_bytes.unwrap_or(0),
        };
        let snap = self.mappings.entry(row.scope).or_default();
        if snap.scope.is_none() {
            snap.scope = Some(row.scope);
            snap.first_sample = row.sample;
            snap.last_sample = row.sample;
        }
        if row.sample == snap.first_sample {
            snap.first.push(m);
        } else {
            if row.sample != snap.last_sample || snap.last_sample == snap.first_sample {
                snap.last_sample = row.sample;
                snap.last.clear();
            }
            snap.last.push(m);
        }
    }

    /// Whether a command's row is a size of its program. The command's series is its peak
    /// per run, and a read between its exec and its loader is not one; nor is the run's peak
    /// row when nothing was read after the loader and the row is no larger than such a read
    /// (a samples.csv may hold a mid-exec read as the run's peak row).
    fn is_commands_size(&mut self, row: &Row) -> bool {
        let Some(run) = row.run else { return true };
        let rss = row.rss_bytes.unwrap_or(0);
        if row.is_mid_exec() {
            let seen = self.mid_exec_only.entry(run).or_insert(Some(rss));
            *seen = seen.map(|m| m.max(rss));
            return false;
        }
        if row.event.as_deref() == Some("peak") {
            return !matches!(self.mid_exec_only.get(&run), Some(Some(m)) if rss <= *m);
        }
        self.mid_exec_only.insert(run, None);
        true
    }

    /// A process's heap, read with its own row (same sample): into that
    /// batch's sums, and its source into the list of processes with a heap.
    fn heap(&mut self, row: Row) {
        if self.gauge_name.is_none() {
            self.gauge_name.clone_from(&row.gauge_name);
        }
        let read = row.heap_used_bytes.is_some() || row.heap_live_bytes.is_some();
        if let Some(source) = row.heap_source.filter(|_| read) {
            self.heap_sources
                .entry((row.scope, row.pid, row.start_time))
                .or_insert_with(|| HeapProcess {
                    scope: row.scope,
                    pid: row.pid,
                    comm: row.comm.clone(),
                    source,
                });
        }
        if let Some(batch) = self.batch.as_mut().filter(|b| b.sample == row.sample) {
            batch
                .scopes
                .entry(row.scope)
                .or_insert_with(ScopeSample::new)
                .add_heap(&row);
        }
    }

    fn process(&mut self, row: Row, x_axis: XAxis) {
        if row.scope == Scope::Command && !self.is_commands_size(&row) {
            return;
        }
        // Run mode: one point per run; over time: one per sample.
        let (key, x) = match (x_axis, row.run) {
            (XAxis::Run, Some(run)) => (u64::from(run), f64::from(run)),
            (XAxis::Run, None) => return,
            (XAxis::Seconds, _) => (row.sample, row.t_seconds),
        };
        if self.batch.as_ref().is_none_or(|b| b.sample != row.sample) {
            self.flush_batch();
            self.batch = Some(Batch {
                sample: row.sample,
                run: row.run,
                t: row.t_seconds,
                scopes: BTreeMap::new(),
            });
        }
        if let Some(batch) = &mut self.batch {
            batch
                .scopes
                .entry(row.scope)
                .or_insert_with(ScopeSample::new)
                .add(&row);
        }
        // A cgroup's own row is accounting, not a process with a life.
        if row.scope == Scope::Cgroup {
            return;
        }
        let cap = match x_axis {
            XAxis::Run => LIFE_CAP_RUNS,
            XAxis::Seconds => LIFE_CAP_TIME,
        };
        let life = self
            .lives
            .entry((row.scope, row.pid, row.start_time))
            .or_insert_with(|| ProcessLife {
                scope: row.scope,
                pid: row.pid,
                ppid: row.ppid,
                start_time: row.start_time,
                comm: row.comm.clone(),
                rss: Thinned::new(cap),
                anon: Thinned::new(cap),
                pending: None,
                first_x: x,
                last_x: x,
                last_rss_bytes: 0,
                first_deep: None,
                last_deep: None,
            });
        life.push(&row, key, x);
    }

    /// The sample just read becomes one point of each of its scopes' series.
    fn flush_batch(&mut self) {
        let Some(batch) = self.batch.take() else {
            return;
        };
        let x_axis = self.x_axis.unwrap_or(XAxis::Seconds);
        let (key, x) = match (x_axis, batch.run) {
            (XAxis::Run, Some(run)) => (u64::from(run), f64::from(run)),
            (XAxis::Run, None) => return,
            (XAxis::Seconds, _) => (batch.sample, batch.t),
        };
        for (scope, sample) in batch.scopes {
            if sample.deep > 0 {
                self.trees.insert(
                    scope,
                    TreeSums {
                        scope,
                        processes: sample.deep,
                        pss_bytes: sample.deep_pss,
                        rss_bytes: sample.deep_rss,
                    },
                );
            }
            if let (Scope::Command, Some(run), Some(rss)) =
                (scope, batch.run, sample.sum(Metric::RssBytes))
            {
                let peak = self.run_peaks.entry(run).or_insert(0);
                *peak = (*peak).max(rss);
            }
            for metric in Metric::ALL {
                let sum = sample.sum(metric);
                // The command's series is its peak per run: only RSS has a
                // true peak (ru_maxrss); the other fields come from polls
                // that a short command may miss or catch mid-exec.
                let (Some(sum), true) =
                    (sum, scope != Scope::Command || metric == Metric::RssBytes)
                else {
                    continue;
                };
                let b = self
                    .series
                    .entry((scope, metric))
                    .or_insert_with(Building::empty);
                b.processes = b.processes.max(sample.processes);
                b.add(key, x, sum as f64, scope == Scope::Command);
            }
        }
    }

    /// Everything read, as the analysis takes it.
    pub fn finish(mut self, torn_last_line: Option<u64>) -> Samples {
        self.flush_batch();
        // A scope whose runtime publishes its heap is judged by its live heap
        // even when no collection ran while it was watched (no point: the
        // verdict says what that means, not the kernel's view alone).
        // (tracemalloc counts the heap in use only: no live heap.)
        for p in self.heap_sources.values() {
            if p.source != HeapSource::Tracemalloc {
                self.series
                    .entry((p.scope, Metric::HeapLiveBytes))
                    .or_insert_with(Building::empty);
            }
        }
        let x_axis = self.x_axis.unwrap_or(XAxis::Seconds);
        let series = self
            .series
            .into_iter()
            .map(|((scope, metric), b)| Series {
                scope,
                metric,
                x_axis,
                points: b.finish(),
                processes: b.processes,
                count: b.points.count() + u64::from(b.pending.is_some()),
            })
            .filter(|s| !s.points.is_empty() || s.metric == Metric::HeapLiveBytes)
            .collect();
        let lives = self
            .lives
            .into_values()
            .map(|mut l| {
                l.flush();
                l
            })
            .collect();
        let runs = self
            .runs
            .into_values()
            .map(|(mut r, _)| {
                r.peak_rss_bytes = self.run_peaks.get(&r.run).copied();
                r
            })
            .collect();
        let mut notes = self.notes;
        notes.extend(self.exits);
        if self.exits_more > 0 {
            notes.push(format!(
                "… and {} more processes left behind exited on their own",
                self.exits_more
            ));
        }
        if let Some(line) = torn_last_line {
            notes.push(format!(
                "samples.csv line {line} was cut short (leakwatch stopped mid-write) and is left out"
            ));
        }
        let (t0, t1) = self.t_range;
        let (sites, py_overhead, types) = self.sites.finish();
        Samples {
            x_axis,
            series,
            lives,
            runs,
            mappings: self.mappings.into_values().collect(),
            trees: self.trees.into_values().collect(),
            command_line: self.command_line,
            target_pid: self.target_pid,
            span_s: if t1 >= t0 { t1 - t0 } else { 0.0 },
            target_ended: self.target_ended,
            interrupted: self.interrupted,
            notes,
            sites,
            py_overhead,
            types,
            rows: self.rows,
            target: self.target,
            labels: self.labels,
            sampling: self.sampling,
            gauge_name: self.gauge_name,
            heap_sources: self.heap_sources.into_values().collect(),
            histograms: self
                .histograms
                .into_iter()
                .map(|(scope, mut events)| {
                    events.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let mut sum = 0i64;
                    let points = events
                        .into_iter()
                        .map(|(x, bytes)| {
                            sum = sum.saturating_add(bytes);
                            (x, sum as f64)
                        })
                        .collect();
                    Induced { scope, points }
                })
                .collect(),
        }
    }
}

impl Building {
    fn empty() -> Self {
        Building {
            points: Thinned::new(SERIES_CAP),
            pending: None,
            processes: 0,
        }
    }

    /// One sample's value: in run mode later samples of a run replace earlier
    /// ones (the command keeps its largest).
    fn add(&mut self, key: u64, x: f64, y: f64, peak: bool) {
        match &mut self.pending {
            Some((k, _, v)) if *k == key => *v = if peak { v.max(y) } else { y },
            _ => {
                if let Some((_, px, py)) = self.pending.take() {
                    self.points.push(px, py);
                }
                self.pending = Some((key, x, y));
            }
        }
    }

    fn finish(&self) -> Vec<(f64, f64)> {
        let mut points = self.points.points();
        points.extend(self.pending.map(|(_, x, y)| (x, y)));
        points
    }
}

/// Builds `Samples` from rows in memory (tests, and the live session's
/// small files go through `store::scan` and `Builder` too).
pub fn from_rows(rows: impl IntoIterator<Item = Row>) -> Samples {
    let mut b = Builder::new();
    for row in rows {
        b.push(row);
    }
    b.finish(None)
}
