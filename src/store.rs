//! `samples.csv`: one tidy row per process per sample (plus event rows),
//! appended and flushed as samples are taken, and read back for `report`.
//! The contract every stage may read: the bottom layer of the pipeline.

use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

mod columns;

/// Which processes a row (and a series) belongs to. Ordered as reports list
/// them: survivors, watched pids, the attach target, the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Processes the runs left behind (`run` mode).
    Survivors,
    /// A `--watch` process with its descendants.
    Pid(u32),
    /// The attached process with its descendants (`attach` mode).
    Target,
    /// A cgroup's own accounting (`attach --cgroup`/`--unit`): memory.stat,
    /// including kernel memory no process' RSS shows. One row per sample, pid 0.
    Cgroup,
    /// One series pulled from Prometheus (`analyze --prometheus`): an index
    /// into the label table (`Samples::labels`), which names it.
    Series(u32),
    /// The command's own tree while it runs.
    Command,
    /// leakwatch itself: notes and the interruption, no process.
    Session,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Survivors => f.write_str("survivors"),
            Scope::Pid(pid) => write!(f, "pid:{pid}"),
            Scope::Target => f.write_str("target"),
            Scope::Cgroup => f.write_str("cgroup"),
            Scope::Series(i) => write!(f, "series:{i}"),
            Scope::Command => f.write_str("command"),
            Scope::Session => f.write_str("leakwatch"),
        }
    }
}

/// A scope name that is none of `survivors`, `pid:<PID>`, `target`, `command`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a scope; use survivors, pid:<PID>, target, cgroup, series:<N> or command")]
pub struct ScopeError(pub String);

impl FromStr for Scope {
    type Err = ScopeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "survivors" => Ok(Scope::Survivors),
            "target" => Ok(Scope::Target),
            "command" => Ok(Scope::Command),
            "leakwatch" => Ok(Scope::Session),
            "cgroup" => Ok(Scope::Cgroup),
            other => other
                .strip_prefix("pid:")
                .and_then(|p| p.parse().ok())
                .map(Scope::Pid)
                .or_else(|| {
                    other
                        .strip_prefix("series:")
                        .and_then(|p| p.parse().ok())
                        .map(Scope::Series)
                })
                .ok_or_else(|| ScopeError(other.to_string())),
        }
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// What an event row of the session (scope `leakwatch`, tier `event`)
/// records, by the name in its `event` cell; `comm` holds its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEvent {
    /// A line for the reports.
    Note,
    /// The session was interrupted: the samples end early. No text.
    Interrupted,
    /// What was attached to when not one PID (a cgroup, a name pattern).
    Target,
    /// The label set of one series of `analyze`: `<N> {k="v",…}`.
    Labels,
    /// What sampling cost (attach mode): a `SamplingCost` as JSON.
    Sampling,
}

impl SessionEvent {
    pub const ALL: [SessionEvent; 5] = [
        SessionEvent::Note,
        SessionEvent::Interrupted,
        SessionEvent::Target,
        SessionEvent::Labels,
        SessionEvent::Sampling,
    ];

    /// The name in the `event` cell.
    pub fn name(self) -> &'static str {
        match self {
            SessionEvent::Note => "note",
            SessionEvent::Interrupted => "interrupted",
            SessionEvent::Target => "target",
            SessionEvent::Labels => "labels",
            SessionEvent::Sampling => "sampling",
        }
    }

    pub fn from_name(name: &str) -> Option<SessionEvent> {
        SessionEvent::ALL.into_iter().find(|e| e.name() == name)
    }
}

/// What a row holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// `status` and fd count only.
    #[default]
    Cheap,
    /// `status` plus `smaps_rollup`.
    Deep,
    /// No memory: `event` says what happened.
    Event,
    /// One mapping name of one process from `smaps` (`comm` holds the
    /// mapping: `[heap]`, `[anon]`, a path), taken at the first and last run.
    Mapping,
    /// One Python allocation site of one process (`--py-sites`): `comm`
    /// holds the site (`file:line`), `site_bytes`/`site_blocks` what it
    /// holds after the run. With `event` `traceback`, `comm` holds the site
    /// and its traceback, one frame a line.
    Site,
    /// Live Python objects of one type in one process (`--py-sites`):
    /// `comm` holds the module-qualified class name (`logging.LogRecord`,
    /// builtins bare, `(untracked)` for what no GC-tracked object covers),
    /// `objects` the count and `site_bytes` the `sys.getsizeof` total after
    /// the run.
    Type,
    /// One process's heap as its runtime counts it (see `sample::heap`):
    /// `heap_live_bytes`, `heap_used_bytes`, `heap_max_bytes` and where they
    /// came from (`heap_source`); `comm` holds the process's name. Read in
    /// the same batch as the process's own row.
    Heap,
}

/// Where a `heap` row's figures came from (samples.csv's `heap_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeapSource {
    /// The JVM's `hsperfdata` file, the counters `jstat` reads.
    Hsperfdata,
    /// V8's own statistics after a collection, from leakwatch's preload in a
    /// Node process `run` started.
    NodePreload,
    /// V8's heap usage through the DevTools inspector (`--node-inspector`).
    NodeInspector,
    /// The process's own metrics endpoint (`--metrics URL`).
    Metrics,
    /// tracemalloc's traced memory (`--py-sites`).
    Tracemalloc,
}

impl HeapSource {
    pub const ALL: [HeapSource; 5] = [
        HeapSource::Hsperfdata,
        HeapSource::NodePreload,
        HeapSource::NodeInspector,
        HeapSource::Metrics,
        HeapSource::Tracemalloc,
    ];

    /// The name in samples.csv and summary.json.
    pub fn name(self) -> &'static str {
        match self {
            HeapSource::Hsperfdata => "hsperfdata",
            HeapSource::NodePreload => "node_preload",
            HeapSource::NodeInspector => "node_inspector",
            HeapSource::Metrics => "metrics",
            HeapSource::Tracemalloc => "tracemalloc",
        }
    }

    pub fn from_name(name: &str) -> Option<HeapSource> {
        HeapSource::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Which runtime's heap it reads, for people.
    pub fn runtime(self) -> &'static str {
        match self {
            HeapSource::Hsperfdata => "JVM",
            HeapSource::NodePreload | HeapSource::NodeInspector => "V8",
            HeapSource::Metrics => "its own metrics",
            HeapSource::Tracemalloc => "CPython",
        }
    }
}

/// Which tracer found an allocation site (samples.csv's `site_source`, on
/// `site` and `type` rows; see `sample::sites`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum SiteSource {
    /// tracemalloc in each Python process (`run --py-sites`). The default:
    /// what a file without the column holds.
    #[default]
    Python,
    /// The sampling allocator shim in each process (`run --native-sites`):
    /// C, C++ and Rust call stacks; `site_blocks` counts the live samples.
    Native,
    /// A JVM's class histogram (`--jvm-classes`): type rows only, a class's
    /// live instances in `objects` and their bytes in `site_bytes`.
    Java,
    /// V8's sampling heap profiler in Node processes (`run --js-sites`):
    /// JavaScript functions; `site_bytes` is V8's unbiased estimate.
    JavaScript,
}

impl fmt::Display for SiteSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SiteSource::Python => f.write_str("python"),
            SiteSource::Native => f.write_str("native"),
            SiteSource::Java => f.write_str("java"),
            SiteSource::JavaScript => f.write_str("javascript"),
        }
    }
}

impl Row {
    /// A row of `scope` with nothing filled in.
    pub fn new(scope: Scope) -> Row {
        Row {
            sample: 0,
            run: None,
            t_seconds: 0.0,
            timestamp: String::new(),
            scope,
            pid: 0,
            ppid: 0,
            start_time: 0,
            comm: String::new(),
            tier: Tier::default(),
            event: None,
            exit_code: None,
            rss_bytes: None,
            anon_bytes: None,
            file_bytes: None,
            shmem_bytes: None,
            swap_bytes: None,
            hwm_bytes: None,
            threads: None,
            fds: None,
            pss_bytes: None,
            pss_anon_bytes: None,
            pss_file_bytes: None,
            pss_shmem_bytes: None,
            shared_clean_bytes: None,
            shared_dirty_bytes: None,
            private_clean_bytes: None,
            private_dirty_bytes: None,
            uss_bytes: None,
            shared_bytes: None,
            swap_pss_bytes: None,
            usage_bytes: None,
            kernel_bytes: None,
            sock_bytes: None,
            slab_reclaimable_bytes: None,
            slab_unreclaimable_bytes: None,
            kernel_stack_bytes: None,
            pagetables_bytes: None,
            site_bytes: None,
            site_blocks: None,
            objects: None,
            site_source: None,
            heap_live_bytes: None,
            heap_used_bytes: None,
            heap_max_bytes: None,
            heap_source: None,
            gauge: None,
            gauge_bytes: None,
            gauge_name: None,
            heap_promoted_bytes: None,
        }
    }

    /// Whether the row's `--metric` gauge is a size (its name ends in
    /// `_bytes`: `gauge_bytes`) rather than a count (`gauge`).
    pub fn gauge_bytes_named(&self) -> bool {
        self.gauge_name
            .as_deref()
            .is_some_and(|n| n.ends_with("_bytes"))
    }

    /// The session event this row records, if it is one by its `event` cell.
    pub fn session_event(&self) -> Option<SessionEvent> {
        self.event.as_deref().and_then(SessionEvent::from_name)
    }

    /// A whole-process memory sample (not an event, not a mapping).
    pub fn is_process_sample(&self) -> bool {
        matches!(self.tier, Tier::Cheap | Tier::Deep)
    }

    /// A process read between its exec and its loader: not one page of any file resident,
    /// where every program that runs has its text resident. A command over within a few
    /// milliseconds can be read only then (one 4 KiB stack page), and that size is not the
    /// program's: the command's series leaves such a read out (`series::build`).
    pub fn is_mid_exec(&self) -> bool {
        self.is_process_sample() && self.file_bytes == Some(0) && self.shmem_bytes.unwrap_or(0) == 0
    }
}

/// One row of `samples.csv`. Sizes in bytes; a field the kernel or the tier
/// did not give is empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Batch number: rows taken together share it.
    pub sample: u64,
    /// Run number in `run` mode (0 = before the first run), empty in `attach`.
    pub run: Option<u32>,
    /// Seconds since leakwatch started.
    pub t_seconds: f64,
    pub timestamp: String,
    pub scope: Scope,
    pub pid: u32,
    pub ppid: u32,
    /// Clock ticks since boot; with `pid` it names one process.
    pub start_time: u64,
    /// Process name, mapping name, note or command line: text from outside,
    /// made spreadsheet-safe in the file (see `cell`).
    #[serde(with = "cell")]
    pub comm: String,
    pub tier: Tier,
    pub event: Option<String>,
    pub exit_code: Option<i32>,
    pub rss_bytes: Option<u64>,
    pub anon_bytes: Option<u64>,
    pub file_bytes: Option<u64>,
    pub shmem_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub hwm_bytes: Option<u64>,
    pub threads: Option<u64>,
    pub fds: Option<u64>,
    pub pss_bytes: Option<u64>,
    pub pss_anon_bytes: Option<u64>,
    pub pss_file_bytes: Option<u64>,
    pub pss_shmem_bytes: Option<u64>,
    pub shared_clean_bytes: Option<u64>,
    pub shared_dirty_bytes: Option<u64>,
    pub private_clean_bytes: Option<u64>,
    pub private_dirty_bytes: Option<u64>,
    pub uss_bytes: Option<u64>,
    pub shared_bytes: Option<u64>,
    pub swap_pss_bytes: Option<u64>,
    // A cgroup's own accounting (scope `cgroup`), from memory.current or
    // memory.usage_in_bytes and memory.stat; empty in process rows and in
    // files without these columns.
    #[serde(default)]
    pub usage_bytes: Option<u64>,
    #[serde(default)]
    pub kernel_bytes: Option<u64>,
    #[serde(default)]
    pub sock_bytes: Option<u64>,
    #[serde(default)]
    pub slab_reclaimable_bytes: Option<u64>,
    #[serde(default)]
    pub slab_unreclaimable_bytes: Option<u64>,
    #[serde(default)]
    pub kernel_stack_bytes: Option<u64>,
    #[serde(default)]
    pub pagetables_bytes: Option<u64>,
    /// A Python allocation site's live bytes and blocks (tier `site`).
    #[serde(default)]
    pub site_bytes: Option<u64>,
    #[serde(default)]
    pub site_blocks: Option<u64>,
    /// Live Python objects of one type (tier `type`); empty elsewhere and in
    /// files without type rows.
    #[serde(default)]
    pub objects: Option<u64>,
    /// The tracer of a `site` or `type` row; a file without the column
    /// reads as python (`scan`): its site rows can only be tracemalloc's.
    #[serde(default)]
    pub site_source: Option<SiteSource>,
    /// A runtime's own heap (tier `heap`): live after its last collection,
    /// in use now, and the most it may grow to; empty elsewhere and in
    /// files without these columns.
    #[serde(default)]
    pub heap_live_bytes: Option<u64>,
    #[serde(default)]
    pub heap_used_bytes: Option<u64>,
    #[serde(default)]
    pub heap_max_bytes: Option<u64>,
    #[serde(default)]
    pub heap_source: Option<HeapSource>,
    /// A gauge the process exports, followed with `--metric NAME` (tier
    /// `heap`, from its `--metrics` endpoint): its value rounded to a whole
    /// number, in `gauge_bytes` when its name ends in `_bytes` (a size),
    /// else in `gauge` (a count: a queue's length, a cache's entries);
    /// `gauge_name` names it.
    #[serde(default)]
    pub gauge: Option<u64>,
    #[serde(default)]
    pub gauge_bytes: Option<u64>,
    #[serde(default)]
    pub gauge_name: Option<String>,
    /// Of `heap_live_bytes`, what a generational JVM's old generation grew
    /// by since it last gave back (`sample::heap::jvm`): promoted by young
    /// collections, garbage possibly. Last, so files without it read as
    /// before.
    #[serde(default)]
    pub heap_promoted_bytes: Option<u64>,
}

/// Spreadsheet-safe text cells, as OWASP's CSV-injection advice has it: a
/// cell that begins with `=`, `+`, `-`, `@`, a tab or a carriage return is a
/// formula to Excel and LibreOffice (`=cmd|'/C calc'!A0` in a process name),
/// so it is written with a leading `'`, which spreadsheets show as text.
/// A cell that begins with `'` gets one too, so reading strips exactly one
/// and every name comes back as it was.
mod cell {
    use serde::{Deserialize, Deserializer, Serializer};

    fn needs_quote(text: &str) -> bool {
        text.starts_with(['=', '+', '-', '@', '\t', '\r', '\''])
    }

    pub fn serialize<S: Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
        // No raw control character in the file (a traceback keeps its lines).
        let text = crate::escape::inert_lines(text);
        if needs_quote(&text) {
            s.collect_str(&format_args!("'{text}"))
        } else {
            s.serialize_str(&text)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        let text = String::deserialize(d)?;
        Ok(from_file(&text))
    }

    /// A cell's text as written (into `out`): made inert, a `'` before a
    /// formula's first character.
    pub fn to_file(text: &str, out: &mut String) {
        let text = crate::escape::inert_lines(text);
        if needs_quote(&text) {
            out.push('\'');
        }
        out.push_str(&text);
    }

    /// A cell's text as read: one leading `'` off, made inert.
    pub fn from_file(text: &str) -> String {
        let text = text.strip_prefix('\'').unwrap_or(text);
        // A planted file is inert too; what leakwatch wrote is unchanged.
        crate::escape::inert_lines(text).into_owned()
    }
}

/// The site name of `site` rows that carry what tracing itself costs a
/// process (tracemalloc's own memory), not an allocation site.
pub const TRACEMALLOC_SITE: &str = "(tracemalloc)";

/// The event of a row that says by how much a process's anon memory (`RssAnon`) changed
/// while leakwatch's own class histogram of it ran (`--jvm-classes`): `histogram_anon
/// <bytes>`, signed, read just before the request and just after the answer. That growth is
/// leakwatch's doing, not the program's (`fit`'s `Widening::Histograms`).
pub const HISTOGRAM_ANON_EVENT: &str = "histogram_anon";

/// The type name of `type` rows that carry what tracemalloc traces beyond
/// the GC-tracked objects: untracked leaves (str, bytes, int …) and storage.
pub const UNTRACKED_TYPE: &str = "(untracked)";

/// A session event row, its text in `comm`.
pub fn note_row(event: SessionEvent, text: &str) -> Row {
    Row {
        comm: text.to_string(),
        tier: Tier::Event,
        event: Some(event.name().to_string()),
        ..Row::new(Scope::Session)
    }
}

/// What sampling cost and achieved in `attach` mode. Recorded in samples.csv
/// as a session event (`sampling`, this as JSON in `comm`) so that `report`
/// rebuilds it; summary.json's `sampling`. Times in seconds or ms as named.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingCost {
    /// The mean interval asked (`--interval`, doubled by long sessions).
    pub interval_s: f64,
    /// Samples taken, and the mean time from one to the next.
    pub ticks: u64,
    pub achieved_interval_s: f64,
    /// Samples that started later than due: a sweep (or a deep pass) took
    /// longer than the wait before it.
    pub late_ticks: u64,
    /// The cheap sweep of the tree (status and fd count of every process).
    pub sweep_mean_ms: f64,
    pub sweep_max_ms: f64,
    /// CPU time of one sweep, on average.
    pub sweep_cpu_mean_ms: f64,
    pub processes_max: u64,
    /// Sweeps that found new processes by listing /proc (a large tree), the
    /// others through each process's `children`.
    pub listing_sweeps: u64,
    /// `--deep-budget` (fraction of wall time; 0: no page walk at all).
    pub deep_budget: f64,
    /// Deep passes (first, last, and those the budget allowed), the page
    /// walks they made (one per process each) and their time in all.
    pub deep_samples: u64,
    pub page_walks: u64,
    pub deep_cost_s: f64,
    /// CPU time of the deep passes.
    pub deep_cpu_s: f64,
    /// The longest single walk: the longest leakwatch held one process's
    /// mmap lock, which its page faults, mmap and munmap waited on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_walk: Option<LongestWalk>,
    /// Processes whose mappings (smaps) the last deep pass read, of all.
    pub mapped_processes: u64,
    pub mapped_of: u64,
    /// leakwatch's own CPU time (user + system) while sampling, writing
    /// samples.csv included, the analysis and reports not.
    pub cpu_s: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LongestWalk {
    pub pid: u32,
    pub comm: String,
    pub ms: f64,
}

/// The session event row that carries a `SamplingCost`.
pub fn sampling_row(cost: &SamplingCost) -> Row {
    note_row(
        SessionEvent::Sampling,
        &serde_json::to_string(cost).unwrap_or_default(),
    )
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Output(#[from] crate::output::OutputError),
    #[error("cannot write {path}: {error}")]
    Write { path: PathBuf, error: io::Error },
    #[error("cannot read {path}: {error}")]
    Read { path: PathBuf, error: io::Error },
    #[error(
        "{path} line {line} is corrupt ({what}); fix or delete that line and run \
         `leakwatch report` again (only a torn last line is skipped by itself)"
    )]
    Corrupt {
        path: PathBuf,
        line: u64,
        what: String,
    },
    #[error("{path} holds no samples; was leakwatch stopped before its first sample?")]
    Empty { path: PathBuf },
    #[error(
        "{path} is not a leakwatch samples.csv (its header lacks {missing}); give the samples.csv of a leakwatch output directory"
    )]
    NotSamples {
        path: PathBuf,
        missing: &'static str,
    },
}

/// Appends rows to `samples.csv`, flushing after each batch so a killed
/// leakwatch loses at most the batch in flight.
pub struct SampleWriter {
    path: PathBuf,
    file: File,
    /// The header goes before the first row (none in a file without rows).
    header_due: bool,
    /// A batch's lines, written with one call (`columns::write_row`).
    line_buf: Vec<u8>,
    scratch: String,
    rows: u64,
    /// Rows in the file now: `rows` less those `retain` dropped.
    in_file: u64,
    tap: Option<Tap>,
}

/// Sees every batch after it is on disk (`attach --serve` keeps its live
/// series from it), so samplers need not know who else reads their rows.
pub type Tap = Box<dyn FnMut(&[Row]) + Send>;

impl SampleWriter {
    /// Creates a new samples.csv (never over an existing file or a link).
    pub fn create(path: &Path) -> Result<Self, StoreError> {
        let file = crate::output::create_new(path)?;
        Ok(SampleWriter {
            path: path.to_path_buf(),
            file,
            header_due: true,
            line_buf: Vec::new(),
            scratch: String::new(),
            rows: 0,
            in_file: 0,
            tap: None,
        })
    }

    /// Hands every batch written from now on to `tap` as well.
    pub fn set_tap(&mut self, tap: Tap) {
        self.tap = Some(tap);
    }

    /// The samples.csv being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn rows_written(&self) -> u64 {
        self.rows
    }

    /// Rows in the file now (all written, unless `retain` dropped some).
    pub fn rows_in_file(&self) -> u64 {
        self.in_file
    }

    /// Rewrites the file with only the rows `keep` accepts, in order, in
    /// bounded memory: into a temporary file beside it, renamed over it, so
    /// a crash leaves the old file or the new one, whole. Appends go on
    /// after them. Returns the rows kept.
    pub fn retain(&mut self, mut keep: impl FnMut(&Row) -> bool) -> Result<u64, StoreError> {
        let write_error = |error: io::Error| StoreError::Write {
            path: self.path.clone(),
            error,
        };
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let tmp = tempfile::Builder::new()
            .prefix(".samples.csv.")
            .tempfile_in(dir)
            .map_err(write_error)?;
        let mode = std::fs::metadata(&self.path)
            .map_err(write_error)?
            .permissions();
        std::fs::set_permissions(tmp.path(), mode).map_err(write_error)?;
        let mut out = csv::Writer::from_writer(tmp.as_file().try_clone().map_err(write_error)?);
        let (mut kept, mut failed) = (0, None);
        scan(&self.path, |row| {
            if failed.is_none() && keep(&row) {
                match out.serialize(&row) {
                    Ok(()) => kept += 1,
                    Err(e) => failed = Some(io::Error::other(e)),
                }
            }
        })?;
        if let Some(error) = failed {
            return Err(write_error(error));
        }
        out.flush().map_err(write_error)?;
        drop(out);
        tmp.persist(&self.path).map_err(|e| write_error(e.error))?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(write_error)?;
        self.file = file;
        self.header_due = false;
        self.in_file = kept;
        Ok(kept)
    }

    /// Writes a batch to the file: the rows reach the kernel now.
    pub fn write_batch(&mut self, rows: &[Row]) -> Result<(), StoreError> {
        use std::io::Write;
        if !rows.is_empty() {
            self.line_buf.clear();
            if self.header_due {
                columns::write_header(&mut self.line_buf);
            }
            for row in rows {
                columns::write_row(&mut self.line_buf, row, &mut self.scratch);
            }
            self.file
                .write_all(&self.line_buf)
                .map_err(|error| StoreError::Write {
                    path: self.path.clone(),
                    error,
                })?;
            self.header_due = false;
            self.rows += rows.len() as u64;
            self.in_file += rows.len() as u64;
            // A batch of a huge tree's first deep pass is not held for the
            // session.
            if self.line_buf.capacity() > 1 << 20 {
                self.line_buf = Vec::new();
            }
        }
        if let Some(tap) = &mut self.tap {
            tap(rows);
        }
        Ok(())
    }
}

/// What a scan of samples.csv saw besides its rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Rows read.
    pub rows: u64,
    /// The line number of a last line cut short (leakwatch killed mid-write),
    /// which was left out.
    pub torn_last_line: Option<u64>,
}

/// Whether the file's last byte is a newline: a last line without one was
/// cut short, a bad last line with one is corrupt like any other.
fn ends_with_newline(file: &mut File) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let mut last = [0u8; 1];
    let ok = file.seek(SeekFrom::End(-1)).is_ok() && file.read_exact(&mut last).is_ok();
    let _ = file.seek(SeekFrom::Start(0));
    ok && last[0] == b'\n'
}

/// Keys of the rows of one sample, to find a row written twice.
#[derive(Default)]
struct SampleKeys {
    sample: Option<u64>,
    keys: std::collections::HashSet<(Scope, u32, u64, Tier, String)>,
}

impl SampleKeys {
    /// Why `row` cannot follow the rows before it, if it cannot.
    fn check(&mut self, row: &Row) -> Result<(), String> {
        if row.scope == Scope::Session || row.tier == Tier::Event {
            return Ok(());
        }
        match self.sample {
            Some(s) if row.sample < s => {
                return Err(format!(
                    "sample {} comes after sample {s}: rows out of order (two files joined?)",
                    row.sample
                ));
            }
            Some(s) if row.sample == s => {}
            _ => {
                self.sample = Some(row.sample);
                self.keys.clear();
            }
        }
        // A process has one row per sample, and one per mapping, site or type.
        let mapping = if matches!(row.tier, Tier::Mapping | Tier::Site | Tier::Type) {
            row.comm.clone()
        } else {
            String::new()
        };
        if !self
            .keys
            .insert((row.scope, row.pid, row.start_time, row.tier, mapping))
        {
            return Err(format!(
                "pid {} appears twice in sample {} of {}: a repeated row would count twice",
                row.pid, row.sample, row.scope
            ));
        }
        Ok(())
    }
}

/// A row as read: a site or type row of a file without `site_source`
/// is Python's.
fn upgraded(mut row: Row) -> Row {
    if matches!(row.tier, Tier::Site | Tier::Type) && row.site_source.is_none() {
        row.site_source = Some(SiteSource::Python);
    }
    row
}

/// Why a parsed row is not a sample leakwatch could have written.
fn invalid(row: &Row) -> Option<&'static str> {
    (!(row.t_seconds.is_finite() && row.t_seconds >= 0.0))
        .then_some("t_seconds is not a finite, non-negative number of seconds")
}

/// Reads `samples.csv` row by row, in bounded memory, handing each row to
/// `each`. A last line cut short (leakwatch killed mid-write) is left out
/// and reported; any other bad line — unparsable, out of order, a row
/// repeated within its sample — is an error naming it.
pub fn scan(path: &Path, mut each: impl FnMut(Row)) -> Result<ScanReport, StoreError> {
    let corrupt = |line: u64, what: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        line,
        what,
    };
    let mut file = File::open(path).map_err(|error| StoreError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let complete = ends_with_newline(&mut file);
    let mut reader = csv::Reader::from_reader(io::BufReader::new(file));
    if let Ok(headers) = reader.headers().cloned()
        && !headers.is_empty()
    {
        for required in ["sample", "scope", "pid", "tier"] {
            if !headers.iter().any(|h| h == required) {
                return Err(StoreError::NotSamples {
                    path: path.to_path_buf(),
                    missing: required,
                });
            }
        }
    }
    let mut report = ScanReport::default();
    let mut keys = SampleKeys::default();
    let mut record = csv::StringRecord::new();
    let headers = reader.headers().cloned().unwrap_or_default();
    // Rows by column position; serde for a file or a record it cannot take.
    let columns = columns::Columns::new(&headers);
    // The last line read, held back until the next one shows it was whole:
    // a last line without its newline was cut short, even if it parses.
    let mut held: Option<(u64, Result<Row, String>)> = None;
    loop {
        let line = reader.position().line();
        let next = match reader.read_record(&mut record) {
            Ok(false) => None,
            Ok(true) => Some(
                match columns.as_ref().and_then(|c| c.row(&record)) {
                    Some(row) => Ok(row),
                    None => record
                        .deserialize::<Row>(Some(&headers))
                        .map_err(|e| e.to_string()),
                }
                .and_then(|row| match invalid(&row) {
                    Some(why) => Err(why.to_string()),
                    None => Ok(upgraded(row)),
                }),
            ),
            Err(e) => Some(Err(e.to_string())),
        };
        let Some(next) = next else { break };
        if let Some((held_line, row)) = held.replace((line, next)) {
            let row = row.map_err(|what| corrupt(held_line, what))?;
            keys.check(&row).map_err(|what| corrupt(held_line, what))?;
            report.rows += 1;
            each(row);
        }
    }
    match held {
        Some((line, _)) if !complete => report.torn_last_line = Some(line),
        Some((line, row)) => {
            let row = row.map_err(|what| corrupt(line, what))?;
            keys.check(&row).map_err(|what| corrupt(line, what))?;
            report.rows += 1;
            each(row);
        }
        None => {}
    }
    if report.rows == 0 {
        return Err(StoreError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(report)
}

/// Reads every row of `samples.csv` into memory (small files and tests;
/// the analysis uses `scan`).
pub fn read_samples(path: &Path) -> Result<Vec<Row>, StoreError> {
    let mut rows = Vec::new();
    scan(path, |row| rows.push(row))?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are samples.csv's contract: a file read back names the same
    /// events it was written with.
    #[test]
    fn session_events_keep_their_names_in_the_file() {
        let names: Vec<&str> = SessionEvent::ALL.iter().map(|e| e.name()).collect();
        assert_eq!(
            names,
            ["note", "interrupted", "target", "labels", "sampling"]
        );
        for e in SessionEvent::ALL {
            let row = note_row(e, "text");
            assert_eq!(
                (row.event.as_deref(), row.session_event()),
                (Some(e.name()), Some(e))
            );
        }
        assert_eq!(SessionEvent::from_name("run_start"), None);
    }

    fn row(sample: u64, rss: u64) -> Row {
        Row {
            sample,
            run: Some(sample as u32),
            pid: 42,
            comm: "daemon, with \"quotes\"".into(),
            tier: Tier::Deep,
            rss_bytes: Some(rss),
            pss_bytes: Some(rss / 2),
            ..Row::new(Scope::Survivors)
        }
    }

    #[test]
    fn rows_round_trip_and_empty_fields_stay_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut w = SampleWriter::create(&path).unwrap();
        w.write_batch(&[row(0, 4096), row(1, 8192)]).unwrap();
        let back = read_samples(&path).unwrap();
        assert_eq!(back, vec![row(0, 4096), row(1, 8192)]);
        assert_eq!(back[0].uss_bytes, None);
    }

    #[test]
    fn type_rows_round_trip_and_files_without_the_objects_column_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let kind = |name: &str, objects: u64| Row {
            comm: name.into(),
            tier: Tier::Type,
            objects: Some(objects),
            site_bytes: Some(objects * 56),
            site_source: Some(SiteSource::Python),
            ..row(1, 0)
        };
        let rows = [row(1, 4096), kind("__main__.Parser", 700), kind("dict", 9)];
        let mut w = SampleWriter::create(&path).unwrap();
        w.write_batch(&rows).unwrap();
        drop(w);
        assert_eq!(read_samples(&path).unwrap(), rows);
        // The same file as a leakwatch without type rows wrote it: no
        // `objects` column (nor `site_source`, the heap's, the gauge's and
        // the promoted heap's, which came later), no type rows.
        let text = std::fs::read_to_string(&path).unwrap();
        let old: Vec<String> = text
            .lines()
            .filter(|l| !l.contains(",type,"))
            .map(|l| l.rsplitn(11, ',').nth(10).unwrap().to_string())
            .collect();
        assert!(old[0].ends_with(",site_blocks"), "{}", old[0]);
        std::fs::write(&path, old.join("\n") + "\n").unwrap();
        let back = read_samples(&path).unwrap();
        assert_eq!(back, vec![row(1, 4096)]);
    }

    /// samples.csv without `site_source`: its site and type rows are
    /// tracemalloc's, and read back as python.
    #[test]
    fn site_rows_of_a_file_without_site_source_read_as_python() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let site = |tier: Tier, name: &str| Row {
            comm: name.into(),
            tier,
            site_bytes: Some(4096),
            site_blocks: (tier == Tier::Site).then_some(3),
            objects: (tier == Tier::Type).then_some(7),
            site_source: Some(SiteSource::Python),
            ..row(1, 0)
        };
        let rows = [
            row(1, 4096),
            site(Tier::Site, "app.py:12"),
            site(Tier::Type, "dict"),
        ];
        let mut w = SampleWriter::create(&path).unwrap();
        w.write_batch(&rows).unwrap();
        drop(w);
        let text = std::fs::read_to_string(&path).unwrap();
        let header = ",objects,site_source,heap_live_bytes,heap_used_bytes,heap_max_bytes,\
                      heap_source,gauge,gauge_bytes,gauge_name,heap_promoted_bytes";
        assert!(text.lines().next().unwrap().ends_with(header));
        assert!(
            text.lines().nth(2).unwrap().ends_with(",python,,,,,,,,"),
            "{text}"
        );
        // Before `site_source` (and the heap's and gauge's columns after it).
        let old: Vec<String> = text
            .lines()
            .map(|l| l.rsplitn(10, ',').nth(9).unwrap().to_string())
            .collect();
        assert!(old[0].ends_with(",objects"), "{}", old[0]);
        std::fs::write(
            &path,
            old.join(
                "
",
            ) + "
",
        )
        .unwrap();
        let back = read_samples(&path).unwrap();
        assert_eq!(back, rows);
        // A process row has no tracer.
        assert_eq!(back[0].site_source, None);
    }

    #[test]
    fn a_torn_last_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut w = SampleWriter::create(&path).unwrap();
        w.write_batch(&[row(0, 4096), row(1, 8192)]).unwrap();
        drop(w);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("2,2,0.5,ts,survivors,42,0,0,x,deep,,,12");
        std::fs::write(&path, text).unwrap();
        let mut n = 0;
        let report = scan(&path, |_| n += 1).unwrap();
        assert_eq!((n, report.torn_last_line), (2, Some(4)));
        // A whole last row without its newline was cut short too: left out.
        let text = std::fs::read_to_string(&path).unwrap();
        let cut = text.rsplit_once('\n').unwrap().0;
        std::fs::write(&path, cut).unwrap();
        assert_eq!(read_samples(&path).unwrap().len(), 1);
    }

    #[test]
    fn corruption_in_the_middle_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut w = SampleWriter::create(&path).unwrap();
        w.write_batch(&[row(0, 4096)]).unwrap();
        drop(w);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        let good = lines[1].to_string();
        lines.push("not,a,row");
        lines.push(&good);
        std::fs::write(&path, lines.join("\n")).unwrap();
        let err = read_samples(&path).unwrap_err().to_string();
        assert!(err.contains("line 3"), "{err}");
    }

    #[test]
    fn scopes_read_back_as_written_and_sort_in_report_order() {
        for text in ["survivors", "pid:4242", "target", "command", "leakwatch"] {
            assert_eq!(text.parse::<Scope>().unwrap().to_string(), text);
        }
        for bad in ["pid:", "pid:x", "Target", ""] {
            assert!(bad.parse::<Scope>().is_err(), "{bad}");
        }
        let mut scopes = vec![
            Scope::Command,
            Scope::Target,
            Scope::Pid(9),
            Scope::Survivors,
        ];
        scopes.sort();
        assert_eq!(
            scopes,
            vec![
                Scope::Survivors,
                Scope::Pid(9),
                Scope::Target,
                Scope::Command
            ]
        );
    }

    #[test]
    fn a_complete_bad_last_line_is_corrupt_not_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut w = SampleWriter::create(&path).unwrap();
        w.write_batch(&[row(0, 4096), row(1, 8192)]).unwrap();
        drop(w);
        let good = std::fs::read_to_string(&path).unwrap();
        let last = good.lines().last().unwrap().to_string();
        for bad in ["NaN", "inf", "-1", "abc"] {
            // The last row again as sample 2, with t_seconds (or RSS) replaced.
            let changed = last.replacen("1,1,", "2,1,", 1);
            let changed = if bad == "NaN" || bad == "inf" {
                changed.replacen(",0.0,", &format!(",{bad},"), 1)
            } else {
                changed.replacen(",8192,", &format!(",{bad},"), 1)
            };
            assert_ne!(changed, last);
            std::fs::write(&path, format!("{good}{changed}\n")).unwrap();
            let err = read_samples(&path).unwrap_err().to_string();
            assert!(err.contains("line 4"), "{bad}: {err}");
        }
    }

    #[test]
    fn repeated_rows_and_rows_out_of_order_are_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut w = SampleWriter::create(&path).unwrap();
        w.write_batch(&[row(0, 4096), row(0, 4096)]).unwrap();
        drop(w);
        let err = read_samples(&path).unwrap_err().to_string();
        assert!(err.contains("appears twice in sample 0"), "{err}");
        let mut w = SampleWriter::create(&dir.path().join("b.csv")).unwrap();
        w.write_batch(&[row(1, 4096), row(0, 4096)]).unwrap();
        drop(w);
        let err = read_samples(&dir.path().join("b.csv"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("out of order"), "{err}");
    }

    #[test]
    fn formulas_in_names_are_neutralised_in_the_file_and_read_back_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let names = [
            "=cmd|'/C calc'!A0",
            "+1",
            "-x",
            "@SUM(1)",
            "\tx",
            "'quoted",
            "plain",
        ];
        let rows: Vec<Row> = names
            .iter()
            .enumerate()
            .map(|(i, n)| Row {
                pid: i as u32,
                comm: n.to_string(),
                ..row(0, 4096)
            })
            .collect();
        let mut w = SampleWriter::create(&path).unwrap();
        w.write_batch(&rows).unwrap();
        drop(w);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(",'=cmd|'/C calc'!A0,"), "{text}");
        assert!(!text.contains(",=cmd"));
        assert!(text.contains(",''quoted,"));
        let back: Vec<String> = read_samples(&path)
            .unwrap()
            .into_iter()
            .map(|r| r.comm)
            .collect();
        // A control character is written (and read) escaped, never raw.
        let expected: Vec<String> = names.iter().map(|n| n.replace('\t', r"\x09")).collect();
        assert_eq!(back, expected);
        assert!(!text.contains('\t'), "{text}");
    }

    #[test]
    fn retained_rows_stay_in_order_and_appends_go_on_after_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut w = SampleWriter::create(&path).unwrap();
        let rows: Vec<Row> = (0..10).map(|i| row(i, 4096 * i)).collect();
        w.write_batch(&rows).unwrap();
        assert_eq!(w.retain(|r| r.sample % 3 == 0).unwrap(), 4);
        w.write_batch(&[row(10, 1)]).unwrap();
        assert_eq!((w.rows_in_file(), w.rows_written()), (5, 11));
        let samples: Vec<u64> = read_samples(&path)
            .unwrap()
            .iter()
            .map(|r| r.sample)
            .collect();
        assert_eq!(samples, [0, 3, 6, 9, 10]);
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn an_empty_file_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        std::fs::write(&path, "").unwrap();
        assert!(matches!(read_samples(&path), Err(StoreError::Empty { .. })));
    }
}
