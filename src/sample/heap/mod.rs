//! The heap a garbage-collected runtime itself counts, read beside /proc:
//! per process and sample, its live heap after the last collection, its
//! heap in use and the most it may grow to (`heap` rows: see
//! `store::Tier::Heap`). RSS lags such a heap (a JVM with a pre-touched
//! heap has a flat RSS while its heap leaks; V8 and Go commit memory in
//! chunks), so where a process has one, its heap is judged first.
//!
//! Sources, by runtime:
//! - [`jvm`]: HotSpot's hsperfdata file ([`hsperf`]), always on: found
//!   through the process's own mappings, opened inside its root without
//!   following links, checked to be the mapped file and owned by the
//!   process's user, read with one `pread` per sample. Nothing is sent to
//!   the JVM.
//!
//! - [`node`]: V8's own statistics after a collection, from a preload in
//!   the Node processes `run` starts (`NODE_OPTIONS`), asked after each run.
//!
//! [`Heaps::read`] is called by the drivers with the process rows of a
//! batch, right after they are taken: run mode at each run's deep sample,
//! attach at every tick (a `pread` of a 32–64 KiB file).

pub(crate) mod fetcher;
pub mod hsperf;
pub mod inspector;
pub mod jvm;
pub mod metrics;
pub mod node;

pub use fetcher::Fetcher;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use super::procfs::ProcRoot;
use super::rows::Context;
use super::sites::Collected;
use crate::store::{HeapSource, Row, Scope, Tier};
use crate::units::format_bytes;

/// Most bytes of `/proc/PID/maps` read to find a runtime (a JVM maps a few
/// hundred files; a planted process with millions of mappings is cut short).
const MAX_MAPS_BYTES: u64 = 8 << 20;

/// What a process's mappings say about its runtime.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mapped {
    /// The hsperfdata file it maps: its path inside the process's root and
    /// its inode.
    pub hsperfdata: Option<(String, u64)>,
    /// It maps HotSpot (`libjvm.so`).
    pub jvm: bool,
}

/// Reads what a runtime maps from `/proc/PID/maps` text: the fields are
/// `start-end perms offset dev inode path`.
pub fn mapped(maps: &str) -> Mapped {
    let mut out = Mapped::default();
    for line in maps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let (Some(inode), Some(path)) = (fields.nth(4), fields.next()) else {
            continue;
        };
        if path.ends_with("/libjvm.so") {
            out.jvm = true;
        }
        let Some((dir, file)) = path.rsplit_once('/') else {
            continue;
        };
        let in_perfdata_dir = dir
            .rsplit_once('/')
            .is_some_and(|(_, d)| d.starts_with("hsperfdata_"));
        if in_perfdata_dir
            && !file.is_empty()
            && file.bytes().all(|b| b.is_ascii_digit())
            && let Ok(inode) = inode.parse()
        {
            out.hsperfdata.get_or_insert((path.to_string(), inode));
        }
    }
    out
}

/// Why a runtime's heap file was refused.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("a path component is '..', '.' or empty")]
    BadPath,
    #[error("it is not a regular file")]
    NotRegular,
    #[error("it is not the file the process maps (inode {found}, mapped {mapped})")]
    NotMapped { found: u64, mapped: u64 },
    #[error("it is owned by uid {owner}, not by the process's user (uid {user})")]
    Owner { owner: u32, user: u32 },
    #[error("it is {0} bytes, more than an hsperfdata file holds")]
    TooLarge(u64),
}

fn openat(dir: Option<&OwnedFd>, name: &[u8], flags: i32) -> io::Result<OwnedFd> {
    let name =
        std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let dirfd = dir.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: a plain system call with a NUL-terminated name; the result is
    // checked before it is owned.
    let fd = unsafe { libc::openat(dirfd, name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `path` (absolute, as the process sees it) inside the directory
/// `root` (its `/proc/PID/root`), one component at a time and never through
/// a link: a link planted in the process's /tmp cannot send leakwatch to a
/// file of its choosing, nor a FIFO block it.
pub fn open_beneath(root: &Path, path: &str) -> Result<File, OpenError> {
    let dir_flags = libc::O_PATH | libc::O_DIRECTORY;
    let mut dir = openat(None, root.as_os_str().as_bytes(), dir_flags)?;
    let mut parts: Vec<&str> = path.split('/').collect();
    if parts.first() == Some(&"") {
        parts.remove(0);
    }
    let Some(last) = parts.pop() else {
        return Err(OpenError::BadPath);
    };
    for part in parts.iter().chain([&last]) {
        if matches!(*part, "" | "." | "..") {
            return Err(OpenError::BadPath);
        }
    }
    for part in parts {
        dir = openat(Some(&dir), part.as_bytes(), dir_flags | libc::O_NOFOLLOW)?;
    }
    let file = openat(
        Some(&dir),
        last.as_bytes(),
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
    )?;
    Ok(File::from(file))
}

/// The process's effective uid (status `Uid:`, its second field).
fn effective_uid(root: &ProcRoot, pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(root.path(pid, "status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_ascii_whitespace().nth(2)?.parse().ok()
}

/// An open hsperfdata file, checked.
#[derive(Debug)]
struct PerfFile {
    file: File,
    /// Where it is, for notes: the path as the process sees it.
    path: String,
    size: usize,
}

fn open_perfdata(root: &ProcRoot, pid: u32, path: &str, inode: u64) -> Result<PerfFile, OpenError> {
    let file = open_beneath(&root.path(pid, "root"), path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(OpenError::NotRegular);
    }
    if meta.ino() != inode {
        return Err(OpenError::NotMapped {
            found: meta.ino(),
            mapped: inode,
        });
    }
    if let Some(user) = effective_uid(root, pid)
        && meta.uid() != user
    {
        return Err(OpenError::Owner {
            owner: meta.uid(),
            user,
        });
    }
    if meta.len() > hsperf::MAX_FILE_BYTES as u64 {
        return Err(OpenError::TooLarge(meta.len()));
    }
    Ok(PerfFile {
        file,
        path: path.to_string(),
        size: meta.len() as usize,
    })
}

/// What leakwatch knows of one process's runtime.
#[derive(Debug)]
enum Runtime {
    /// No heap leakwatch can read (not a runtime it knows, or refused).
    None,
    /// A Node process answering the preload.
    Node,
    Jvm {
        file: PerfFile,
        heap: jvm::Heap,
        /// Said why the last read failed (once, until a read succeeds).
        failing: bool,
    },
    /// A Node process read through its inspector (`--node-inspector`).
    Inspected(Box<Inspected>),
}

/// Largest share of wall time the full collections `--node-inspector` asks
/// for may pause a process while attached (each gives one exact live-heap
/// point; the heap in use is read every tick without one).
const COLLECT_BUDGET: f64 = 0.01;

/// A Node process whose inspector leakwatch reads.
#[derive(Debug)]
struct Inspected {
    fetcher: Fetcher<inspector::Reading, inspector::Request>,
    /// The process's name, for the note at the end.
    comm: String,
    port: u16,
    opened: bool,
    max: Option<u64>,
    started: std::time::Instant,
    /// Full collections asked, their time in all and the longest.
    collections: u32,
    collect_time: std::time::Duration,
    longest: std::time::Duration,
    failing: bool,
    /// `--js-sites`: V8's sampling heap profiler runs in it.
    sampling: bool,
}

impl Inspected {
    /// Asks for a read: with a full collection at every read (`always`:
    /// run mode's one per run), else while collections stay within
    /// `COLLECT_BUDGET` of the time since the attach.
    fn ask(&mut self, always: bool) {
        let elapsed = self.started.elapsed().as_secs_f64();
        let next = (self.collect_time + self.longest).as_secs_f64();
        let collect = always || self.collections == 0 || next <= COLLECT_BUDGET * elapsed;
        self.fetcher.ask(inspector::Request::Read {
            collect,
            sites: self.sampling,
        });
    }

    /// What the session did to the process, for the notes.
    fn summary(&self, pid: u32) -> String {
        let share =
            self.collect_time.as_secs_f64() / self.started.elapsed().as_secs_f64().max(1e-9);
        format!(
            "--node-inspector: {pid} ({}): {} its inspector on 127.0.0.1:{}; {} full \
             collection(s) asked, the longest a pause of {:.0} ms, {:.2}% of the session in all{}",
            self.comm,
            if self.opened {
                "opened (SIGUSR1)"
            } else {
                "read"
            },
            self.port,
            self.collections,
            self.longest.as_secs_f64() * 1000.0,
            share * 100.0,
            if self.opened {
                "; closed again at the end"
            } else {
                ""
            },
        )
    }
}

/// The heaps of the processes sampled, over a session.
#[derive(Debug)]
pub struct Heaps {
    root: ProcRoot,
    known: HashMap<(u32, u64), Runtime>,
    buf: Vec<u8>,
    /// `run`: the preload in the Node processes the commands start.
    node: Option<node::NodePreload>,
    /// Node processes whose last answer failed (said once until one works).
    node_failing: HashSet<(u32, u64)>,
    /// `--metrics URL`.
    metrics: Option<MetricsEndpoint>,
    /// How long `read` waits for an endpoint's answer.
    wait: std::time::Duration,
    /// `--node-inspector`: read the Node processes followed through their
    /// inspector; `collect_always`: a full collection at every read (run).
    node_inspector: bool,
    collect_always: bool,
    /// (scope, site) whose stack was written (`--js-sites`).
    js_tracebacks: HashSet<(Scope, String)>,
    /// `attach --js-sites`: the sampling interval for the inspected ones.
    js_interval: Option<u64>,
}

impl Heaps {
    pub fn new(root: ProcRoot) -> Self {
        Heaps {
            root,
            known: HashMap::new(),
            buf: Vec::new(),
            node: None,
            node_failing: HashSet::new(),
            metrics: None,
            wait: std::time::Duration::from_millis(300),
            node_inspector: false,
            collect_always: false,
            js_tracebacks: HashSet::new(),
            js_interval: None,
        }
    }

    /// With the Node preload (`run`): its variables go on every command.
    pub fn with_node_preload(mut self, preload: node::NodePreload) -> Self {
        self.node = Some(preload);
        self
    }

    /// The variables to set on every command a run starts.
    pub fn env(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        self.node.as_ref().map_or_else(Vec::new, |n| {
            n.env(std::env::var_os("NODE_OPTIONS").as_deref())
        })
    }

    /// With a `--metrics URL` endpoint, read for the process that serves it.
    pub fn with_metrics(mut self, endpoint: MetricsEndpoint) -> Self {
        self.metrics = Some(endpoint);
        self
    }

    /// How long `read` waits for an endpoint's answer to this tick's request.
    pub fn with_wait(mut self, wait: std::time::Duration) -> Self {
        self.wait = wait;
        self
    }

    /// `--node-inspector`: Node processes followed are read through their
    /// inspector, with a full collection at each read (`collect_always`,
    /// run mode) or within a budget of the time (attach).
    pub fn with_node_inspector(mut self, collect_always: bool) -> Self {
        self.node_inspector = true;
        self.collect_always = collect_always;
        self
    }

    /// `--js-sites` for the Node processes read through their inspector:
    /// V8's sampling heap profiler, one sample per `interval` bytes.
    pub fn with_js_sites(mut self, interval: u64) -> Self {
        self.js_interval = Some(interval);
        self
    }

    /// Asks the endpoints read off the sampling path (`--metrics`,
    /// inspectors), at the start of a tick: their answers are taken by `read`.
    pub fn ask(&mut self) {
        if let Some(m) = &mut self.metrics {
            m.fetcher.ask(());
        }
        for runtime in self.known.values_mut() {
            if let Runtime::Inspected(i) = runtime {
                i.ask(self.collect_always);
            }
        }
    }

    /// At the end of a session: each inspector leakwatch opened is closed
    /// again; the notes say what was done to each process.
    pub fn finish(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        for ((pid, _), runtime) in &mut self.known {
            let Runtime::Inspected(i) = runtime else {
                continue;
            };
            let _ = i.fetcher.take(std::time::Duration::from_secs(2));
            i.fetcher.ask(inspector::Request::Close);
            let closed = i.fetcher.take(std::time::Duration::from_secs(3));
            let mut note = i.summary(*pid);
            if i.opened && !matches!(closed, Some((_, Ok(_)))) && self.root.alive(*pid) {
                note.push_str(
                    " (closing it failed: its inspector may still listen; it closes when the \
                     process ends)",
                );
            }
            notes.push(note);
        }
        notes
    }

    /// A `heap` row for each process among `rows` (a batch's process rows,
    /// the command's left out) whose runtime publishes its heap, and notes:
    /// a runtime found (once), refused or unreadable (once, with the fix).
    /// A process that no longer appears is forgotten (its file closed).
    pub fn read(&mut self, ctx: &Context, rows: &[Row]) -> Collected {
        let mut out = Collected::default();
        let processes: Vec<&Row> = rows
            .iter()
            .filter(|r| r.is_process_sample() && r.scope != Scope::Command)
            .collect();
        let metrics_owner = self.read_metrics(ctx, &processes, &mut out);
        let mut seen = HashSet::new();
        let mut alive = HashSet::new();
        for row in processes {
            let key = (row.pid, row.start_time);
            alive.insert(key);
            if !seen.insert((row.scope, key)) || metrics_owner == Some(key) {
                continue;
            }
            if !self.known.contains_key(&key) {
                let runtime = self.discover(row, &mut out.notes);
                self.known.insert(key, runtime);
            }
            let mut sites = Vec::new();
            let read = match self.known.get_mut(&key) {
                Some(Runtime::Jvm {
                    file,
                    heap,
                    failing,
                }) => Some(read_hsperfdata(file, heap, failing, &mut self.buf, row)),
                Some(Runtime::Inspected(i)) => {
                    i.ask(self.collect_always);
                    Some(read_inspected(i, self.wait, row, &mut sites))
                }
                _ => self.ask_node(row, &mut sites),
            };
            if let Some((source, figures, note)) = read {
                out.notes.extend(note);
                out.rows.push(heap_row(ctx, row, source, figures));
            }
            for site in sites {
                out.rows.extend(self.js_site_rows(ctx, row, site));
            }
        }
        self.known.retain(|key, _| alive.contains(key));
        self.node_failing.retain(|key| alive.contains(key));
        out
    }

    /// `--metrics`: this tick's answer, as a heap row of the process that
    /// serves the endpoint (found at the first answer); that process's key.
    fn read_metrics(
        &mut self,
        ctx: &Context,
        processes: &[&Row],
        out: &mut Collected,
    ) -> Option<(u32, u64)> {
        let m = self.metrics.as_mut()?;
        if m.owner.is_none() && !processes.is_empty() {
            // Until a followed process serves it (a daemon the first run
            // starts); why not is said once.
            let (owner, note) = m.resolve(&self.root, processes);
            m.owner = owner;
            if owner.is_some() || !m.unresolved_said {
                out.notes.push(note);
            }
            m.unresolved_said |= owner.is_none();
        }
        let owner = m.owner?;
        let row = processes.iter().find(|r| (r.pid, r.start_time) == owner)?;
        if !m.paced {
            // Go's pacing, from the process's own environment.
            let environ =
                read_bounded(&self.root.path(row.pid, "environ"), 1 << 20).unwrap_or_default();
            m.heap = std::mem::take(&mut m.heap).with_gogc(metrics::go_pacing(&environ));
            m.paced = true;
        }
        let (figures, gauge) = match m.fetcher.take(self.wait) {
            None => (None, None),
            Some((_, answer)) => {
                let gauge = match (&answer, &m.gauge) {
                    (Ok(body), Some(name)) => metrics::gauge(body, name),
                    _ => None,
                };
                if let (Some(name), None, Ok(_)) = (&m.gauge, gauge, &answer) {
                    if !m.gauge_missing_said {
                        out.notes.push(format!(
                            "--metric {name}: {} answers no number of that name (a gauge in \
                             Prometheus text, a dotted path in expvar JSON); its series has \
                             a gap until it does",
                            m.url
                        ));
                    }
                    m.gauge_missing_said = true;
                }
                let heap = match answer
                    .and_then(|body| metrics::parse(&body).map_err(|e| e.to_string()))
                {
                    Ok(g) => {
                        m.failing = false;
                        Some(m.heap.update(&g))
                    }
                    Err(why) => {
                        if !m.failing {
                            out.notes.push(format!(
                                "--metrics {}: {why}; the heap of {} ({}) is left out until it \
                             answers with heap gauges",
                                m.url, row.pid, row.comm
                            ));
                        }
                        m.failing = true;
                        None
                    }
                };
                (heap, gauge)
            }
        };
        let mut heap = heap_row(ctx, row, HeapSource::Metrics, figures);
        if let Some(name) = &m.gauge {
            heap.gauge_name = Some(name.clone());
            let value = gauge.filter(|v| *v >= 0.0).map(|v| v.round() as u64);
            if heap.gauge_bytes_named() {
                heap.gauge_bytes = value;
            } else {
                heap.gauge = value;
            }
        }
        out.rows.push(heap);
        Some(owner)
    }

    /// `row`'s process's V8 heap through the preload, if it listens; its
    /// JavaScript sites (`--js-sites`) into `sites`.
    fn ask_node(
        &mut self,
        row: &Row,
        sites: &mut Vec<node::JsSite>,
    ) -> Option<(HeapSource, Option<jvm::Figures>, Option<String>)> {
        let preload = self.node.as_ref().filter(|n| n.listens(row.pid))?;
        let key = (row.pid, row.start_time);
        let mut note = None;
        let figures = match preload.ask(row.pid, node::ANSWER_TIMEOUT) {
            Ok(a) => {
                self.node_failing.remove(&key);
                *sites = a.sites;
                Some(jvm::Figures {
                    live: Some(a.used_after),
                    used: a.used_before,
                    max: Some(a.limit),
                    promoted: None,
                })
            }
            Err(why) => {
                if self.node_failing.insert(key) {
                    note = Some(format!(
                        "the Node process {} ({}) did not give its heap: {why}; its heap is \
                         left out of this sample",
                        row.pid, row.comm
                    ));
                }
                None
            }
        };
        if !self.known_node(key) {
            note.get_or_insert(format!(
                "the Node process {} ({}): heap read by leakwatch's preload, after a full \
                 collection at each run's end",
                row.pid, row.comm
            ));
        }
        Some((HeapSource::NodePreload, figures, note))
    }

    /// A JavaScript site's row (`--js-sites`), and its stack's the first
    /// time the scope has the site.
    fn js_site_rows(&mut self, ctx: &Context, process: &Row, site: node::JsSite) -> Vec<Row> {
        let name = crate::escape::inert(&site.site).into_owned();
        let row = |comm: String, bytes: u64| Row {
            site_source: Some(crate::store::SiteSource::JavaScript),
            ..super::sites::site_row(ctx, process, comm, bytes)
        };
        let mut rows = Vec::new();
        if self.js_tracebacks.insert((process.scope, name.clone())) {
            rows.push(Row {
                event: Some("traceback".into()),
                ..row(format!("{name}\n{}", site.stack), 0)
            });
        }
        // Finite and not negative (`node::parse_answer`); f64 → u64 saturates.
        rows.push(row(name, site.bytes.round() as u64));
        rows
    }

    /// Whether the Node process `key` was read before (marking it read).
    fn known_node(&mut self, key: (u32, u64)) -> bool {
        match self.known.get_mut(&key) {
            Some(r @ Runtime::None) => {
                *r = Runtime::Node;
                false
            }
            _ => true,
        }
    }

    /// What runtime `row`'s process has, from its mappings, with the note
    /// that says so.
    fn discover(&self, row: &Row, notes: &mut Vec<String>) -> Runtime {
        let pid = row.pid;
        let Some(found) = maps_of(&self.root, pid) else {
            return Runtime::None;
        };
        let who = format!("{pid} ({})", row.comm);
        // Not the processes a run started: they have the preload.
        if self.node_inspector
            && row.scope != Scope::Survivors
            && !found.jvm
            && inspector::is_node(&self.root, pid)
        {
            return inspect(&self.root, row, &who, self.js_interval, notes);
        }
        let Some((path, inode)) = found.hsperfdata else {
            if found.jvm {
                notes.push(format!(
                    "the JVM {who} has no hsperfdata file (started with -XX:-UsePerfData or \
                     -XX:+PerfDisableSharedMem): its heap cannot be read without talking to it; \
                     start it without that flag to have its heap judged (its anon memory is \
                     judged instead)"
                ));
            }
            return Runtime::None;
        };
        let mut file = match open_perfdata(&self.root, pid, &path, inode) {
            Ok(f) => f,
            Err(why) => {
                notes.push(format!(
                    "the JVM {who}: its hsperfdata file {path} was refused ({why}); its heap \
                     is not read (its anon memory is judged instead)"
                ));
                return Runtime::None;
            }
        };
        let mut buf = Vec::new();
        let described = describe_jvm(&mut file, &mut buf);
        notes.push(format!(
            "the JVM {who}: heap read from its hsperfdata file {path}{described}; reading it \
             sends nothing to the JVM"
        ));
        Runtime::Jvm {
            file,
            heap: jvm::Heap::default(),
            failing: false,
        }
    }
}

/// Opens `pid`'s inspector and starts its reader thread (`--node-inspector`).
fn inspect(
    root: &ProcRoot,
    row: &Row,
    who: &str,
    js_interval: Option<u64>,
    notes: &mut Vec<String>,
) -> Runtime {
    let found = match inspector::open(root, row.pid) {
        Ok(found) => found,
        Err(why) => {
            notes.push(format!(
                "--node-inspector: the Node process {who}: {why}; its heap is not read"
            ));
            return Runtime::None;
        }
    };
    let mut session = match inspector::Session::connect(&found) {
        Ok(s) => s,
        Err(why) => {
            notes.push(format!(
                "--node-inspector: the Node process {who}: {why}; its heap is not read"
            ));
            return Runtime::None;
        }
    };
    let max = inspector::heap_limit(&mut session);
    let opened = found.opened;
    let sampling = match js_interval.map(|i| inspector::start_sampling(&mut session, i)) {
        Some(Err(why)) => {
            notes.push(format!(
                "--js-sites: the Node process {who}: its sampling heap profiler did not start \
                 ({why}); its heap is read, its sites are not"
            ));
            false
        }
        Some(Ok(())) => true,
        None => false,
    };
    notes.push(format!(
        "--node-inspector: the Node process {who}: {} its inspector on 127.0.0.1:{} (the \
         process printed \"Debugger listening\" on its stderr); its heap is read there",
        if opened { "SIGUSR1 opened" } else { "read" },
        found.port
    ));
    let fetcher = Fetcher::start("leakwatch-inspector", move |request| {
        inspector::serve(&mut session, request, opened)
    });
    Runtime::Inspected(Box::new(Inspected {
        fetcher,
        comm: row.comm.clone(),
        port: found.port,
        opened,
        max,
        started: std::time::Instant::now(),
        collections: 0,
        collect_time: std::time::Duration::ZERO,
        longest: std::time::Duration::ZERO,
        failing: false,
        sampling,
    }))
}

/// This read's answer through an inspector, with the note a failure gets
/// (once, until a read succeeds again).
fn read_inspected(
    i: &mut Inspected,
    wait: std::time::Duration,
    row: &Row,
    sites: &mut Vec<node::JsSite>,
) -> (HeapSource, Option<jvm::Figures>, Option<String>) {
    let figures = match i.fetcher.take(wait) {
        None => None,
        Some((_, Ok(r))) => {
            i.failing = false;
            sites.clone_from(&r.sites);
            if let Some(pause) = r.pause {
                i.collections += 1;
                i.collect_time += pause;
                i.longest = i.longest.max(pause);
            }
            Some(jvm::Figures {
                live: r.live,
                used: r.used,
                max: i.max,
                promoted: None,
            })
        }
        Some((_, Err(why))) => {
            let note = (!i.failing).then(|| {
                format!(
                    "--node-inspector: the Node process {} ({}): {why}; its heap is left out \
                     until it answers",
                    row.pid, row.comm
                )
            });
            i.failing = true;
            return (HeapSource::NodeInspector, None, note);
        }
    };
    (HeapSource::NodeInspector, figures, None)
}

/// One read of a JVM's hsperfdata file, with the note a failure gets
/// (once, until a read succeeds again).
fn read_hsperfdata(
    file: &PerfFile,
    heap: &mut jvm::Heap,
    failing: &mut bool,
    buf: &mut Vec<u8>,
    row: &Row,
) -> (HeapSource, Option<jvm::Figures>, Option<String>) {
    match read_jvm(file, heap, buf) {
        Ok(f) => {
            *failing = false;
            (HeapSource::Hsperfdata, Some(f), None)
        }
        Err(why) => {
            let note = (!*failing).then(|| {
                format!(
                    "the JVM {} ({}): its hsperfdata file {} could not be read ({why}); its \
                     heap is left out of this sample",
                    row.pid, row.comm, file.path
                )
            });
            *failing = true;
            (HeapSource::Hsperfdata, None, note)
        }
    }
}

/// ` (G1, JDK 17.0.15+6, heap max 512 MiB)`, or empty when unreadable yet.
fn describe_jvm(file: &mut PerfFile, buf: &mut Vec<u8>) -> String {
    let Ok(data) = read_perfdata(file, buf) else {
        return String::new();
    };
    let mut parts = vec![jvm::collector(&data)];
    if let Some(v) = data.text("java.property.java.vm.version") {
        parts.push(format!("JVM {v}"));
    }
    if let Ok(c) = jvm::counters(&data)
        && let Some(max) = c.max
    {
        parts.push(format!("heap max {}", format_bytes(max as f64)));
    }
    format!(" ({})", parts.join(", "))
}

fn read_perfdata(file: &PerfFile, buf: &mut Vec<u8>) -> Result<hsperf::PerfData, String> {
    buf.resize(file.size, 0);
    let n = file.file.read_at(buf, 0).map_err(|e| e.to_string())?;
    hsperf::parse(&buf[..n], jvm::wanted).map_err(|e| e.to_string())
}

fn read_jvm(
    file: &PerfFile,
    heap: &mut jvm::Heap,
    buf: &mut Vec<u8>,
) -> Result<jvm::Figures, String> {
    let data = read_perfdata(file, buf)?;
    let counters = jvm::counters(&data).map_err(|e| e.to_string())?;
    Ok(heap.update(&counters))
}

/// The heap row of `process`'s row, from `source` (values empty when this
/// read failed: its scope's heap sum is then unknown for the sample, not
/// short by one process).
fn heap_row(ctx: &Context, process: &Row, source: HeapSource, f: Option<jvm::Figures>) -> Row {
    Row {
        pid: process.pid,
        ppid: process.ppid,
        start_time: process.start_time,
        comm: process.comm.clone(),
        tier: Tier::Heap,
        heap_live_bytes: f.and_then(|f| f.live),
        heap_used_bytes: f.map(|f| f.used),
        heap_max_bytes: f.and_then(|f| f.max),
        heap_promoted_bytes: f.and_then(|f| f.promoted),
        heap_source: Some(source),
        ..ctx.row(process.scope)
    }
}

/// `--metrics URL`: a process's own metrics endpoint, read by a thread of
/// its own (`Fetcher`), for the followed process that serves it.
#[derive(Debug)]
pub struct MetricsEndpoint {
    url: String,
    /// The port, when the host is this machine's (loopback): its server is
    /// found among the followed processes.
    local_port: Option<u16>,
    fetcher: Fetcher<String>,
    heap: metrics::Heap,
    owner: Option<(u32, u64)>,
    unresolved_said: bool,
    failing: bool,
    /// Whether the owner's GOGC was read.
    paced: bool,
    /// `--metric NAME`: a gauge followed as a series of its own.
    gauge: Option<String>,
    gauge_missing_said: bool,
}

/// Why a `--metrics` URL cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricsUrlError {
    #[error(
        "--metrics '{0}' is not an http:// URL; give the endpoint the process serves, e.g. \
         http://127.0.0.1:8080/metrics or http://127.0.0.1:8080/debug/vars"
    )]
    NotHttp(String),
    #[error(
        "--metrics '{0}' is https: this leakwatch was built without TLS; read it over http \
         (a port-forward), or build with `--features https`"
    )]
    NoTls(String),
}

/// The host and port of an http URL (`None` port: 80).
fn host_port(url: &str) -> Option<(&str, u16)> {
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None => 80,
        };
        return Some((host, port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host, port.parse().ok()?)),
        None => Some((authority, 80)),
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

/// How long one GET of `--metrics` may take.
const METRICS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl MetricsEndpoint {
    /// Checks a URL: http, with a host and a port that parse. Returns the
    /// port when the host is this machine.
    pub fn check(url: &str) -> Result<Option<u16>, MetricsUrlError> {
        if url.starts_with("https://") {
            return Err(MetricsUrlError::NoTls(url.to_string()));
        }
        let (host, port) =
            host_port(url).ok_or_else(|| MetricsUrlError::NotHttp(url.to_string()))?;
        if host.is_empty() {
            return Err(MetricsUrlError::NotHttp(url.to_string()));
        }
        Ok(is_loopback(host).then_some(port))
    }

    /// Checks the URL and starts its reader thread.
    pub fn new(url: &str) -> Result<Self, MetricsUrlError> {
        let local_port = MetricsEndpoint::check(url)?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(METRICS_TIMEOUT))
            .build()
            .into();
        let target = url.to_string();
        let fetcher = Fetcher::start("leakwatch-metrics", move |()| {
            let mut resp = agent.get(&target).call().map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            if status != 200 {
                return Err(format!("it answered HTTP {status}"));
            }
            resp.body_mut()
                .with_config()
                .limit(metrics::MAX_BODY)
                .read_to_string()
                .map_err(|e| e.to_string())
        });
        Ok(MetricsEndpoint {
            url: url.to_string(),
            local_port,
            fetcher,
            heap: metrics::Heap::default(),
            owner: None,
            unresolved_said: false,
            failing: false,
            paced: false,
            gauge: None,
            gauge_missing_said: false,
        })
    }

    /// Also follows the gauge NAME (`--metric`; `metrics::is_gauge_name`).
    pub fn with_gauge(mut self, name: Option<String>) -> Self {
        self.gauge = name;
        self
    }

    /// Which followed process the endpoint is read for, and the note that
    /// says so: the one listening on its port (a local URL); for a remote
    /// host, which cannot be checked, the first followed process.
    fn resolve(&self, root: &ProcRoot, processes: &[&Row]) -> (Option<(u32, u64)>, String) {
        let key = |r: &&Row| (r.pid, r.start_time);
        let Some(port) = self.local_port else {
            let first = processes.first();
            let note = match first {
                Some(r) => format!(
                    "--metrics {}: a remote host, whose server cannot be checked; read as the \
                     heap of {} ({})",
                    self.url, r.pid, r.comm
                ),
                None => format!("--metrics {}: no process to read it for", self.url),
            };
            return (first.map(key), note);
        };
        let pids: Vec<u32> = processes.iter().map(|r| r.pid).collect();
        match root.serving(&pids, port) {
            Some(pid) => {
                let row = processes.iter().find(|r| r.pid == pid);
                let comm = row.map_or("", |r| r.comm.as_str());
                (
                    row.map(key),
                    format!(
                        "--metrics {}: heap read from the endpoint of {pid} ({comm}), which \
                         listens on port {port}",
                        self.url
                    ),
                )
            }
            None => (
                None,
                format!(
                    "--metrics {}: no process leakwatch follows listens on port {port}, so its \
                     figures are not read (they would be another process's heap); give the \
                     URL of the followed process's own endpoint",
                    self.url
                ),
            ),
        }
    }
}

/// What `pid`'s mappings say about its runtime; `None` when they cannot
/// be read.
pub fn maps_of(root: &ProcRoot, pid: u32) -> Option<Mapped> {
    let maps = read_bounded(&root.path(pid, "maps"), MAX_MAPS_BYTES).ok()?;
    Some(mapped(&String::from_utf8_lossy(&maps)))
}

/// A file's first `max` bytes.
fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    File::open(path)?.take(max).read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jvm_is_known_by_its_mappings() {
        let maps = "\
7f0000000000-7f0000008000 rw-s 00000000 00:2a 1234 /tmp/hsperfdata_app/57
7f0000100000-7f0000200000 r-xp 00000000 fd:01 999 /usr/lib/jvm/java-17/lib/server/libjvm.so
7f0000300000-7f0000400000 rw-p 00000000 00:00 0 
7f0000500000-7f0000600000 rw-s 00000000 00:2a 77 /tmp/not_perf/58
";
        let m = mapped(maps);
        assert_eq!(m.hsperfdata, Some(("/tmp/hsperfdata_app/57".into(), 1234)));
        assert!(m.jvm);
        let plain = mapped("00400000-00401000 r-xp 00000000 fd:01 5 /usr/bin/sleep\n");
        assert_eq!(plain, Mapped::default());
    }

    /// A link anywhere on the way, a `..`, a FIFO: refused, never followed
    /// or blocked on.
    #[test]
    fn a_runtime_file_is_opened_beneath_its_root_without_links() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("tmp/hsperfdata_u")).unwrap();
        std::fs::write(root.join("tmp/hsperfdata_u/7"), b"x").unwrap();
        std::fs::write(root.join("secret"), b"s").unwrap();
        assert!(open_beneath(root, "/tmp/hsperfdata_u/7").is_ok());
        std::os::unix::fs::symlink(root.join("secret"), root.join("tmp/hsperfdata_u/8")).unwrap();
        assert!(open_beneath(root, "/tmp/hsperfdata_u/8").is_err());
        std::os::unix::fs::symlink(root.join("tmp"), root.join("link")).unwrap();
        assert!(open_beneath(root, "/link/hsperfdata_u/7").is_err());
        assert!(matches!(
            open_beneath(root, "/tmp/../secret"),
            Err(OpenError::BadPath)
        ));
        nix::unistd::mkfifo(
            &root.join("tmp/hsperfdata_u/9"),
            nix::sys::stat::Mode::S_IRWXU,
        )
        .unwrap();
        let fifo = open_beneath(root, "/tmp/hsperfdata_u/9").unwrap();
        assert!(!fifo.metadata().unwrap().file_type().is_file());
    }
}
