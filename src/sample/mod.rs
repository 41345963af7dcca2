//! The only stage that touches /proc: read processes in tiers, walk trees,
//! drive `run` and `attach`, and hand rows to the store as they are taken.

pub mod attach;
pub mod cgroup;
pub mod confine;
#[cfg(test)]
pub mod fake;
pub mod guardian;
pub mod native;
pub mod proc;
pub mod pysites;
pub mod reaper;
pub mod run;
// Targets beyond a PID and Prometheus as a source (issue 12).
pub mod prometheus;
pub mod site_rows;
pub mod smaps;
pub mod sweep;
pub mod targets;

use std::time::Instant;

use crate::store::{Row, Scope, Tier};
use proc::{ProcError, ProcRoot};

/// One process read once: the cheap tier always, the deep tier when asked.
/// All sizes are bytes.
#[derive(Debug, Clone, Default)]
pub struct ProcSample {
    pub pid: u32,
    pub ppid: u32,
    pub start_time: u64,
    pub comm: String,
    pub status: proc::Status,
    pub fds: Option<u64>,
    pub rollup: Option<proc::Rollup>,
    /// Its mappings by name, when read at `Depth::Mappings`.
    pub mappings: Vec<proc::Mapping>,
    /// The deep read was refused (another user's process without ptrace-read access).
    pub deep_denied: bool,
}

/// How far a process is read. Each deep depth walks its page tables once:
/// `smaps` gives the rollup's figures as well as the mappings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// `stat`, `status` and the fd count: no page walk.
    Cheap,
    /// And `smaps_rollup`: PSS, USS, shared and private.
    Rollup,
    /// And `smaps` instead of `smaps_rollup`: the same figures plus the
    /// mappings, for attribution at the first and last sample.
    Mappings,
}

/// Reads one process: `stat` (identity), `status` and the fd count through
/// one held directory; a page walk too at a deep `depth`. `Err(Gone)` means
/// it exited: an event, not a failure.
pub fn read_process(root: &ProcRoot, pid: u32, depth: Depth) -> Result<ProcSample, ProcError> {
    let dir = root.open_dir(pid)?;
    let mut buf = Vec::with_capacity(4096);
    let stat = dir.stat(&mut buf)?;
    let mut status = proc::Status::default();
    dir.status(&mut buf, &mut status)?;
    let fds = dir.fd_count();
    let walked = match depth {
        Depth::Cheap => Ok((None, Vec::new())),
        Depth::Rollup => dir.smaps_rollup(&mut buf).map(|r| (Some(r), Vec::new())),
        Depth::Mappings => dir.smaps(&mut buf).map(|s| (Some(s.rollup), s.mappings)),
    };
    let ((rollup, mappings), deep_denied) = match walked {
        Ok(walked) => (walked, false),
        Err(ProcError::PermissionDenied { .. }) => ((None, Vec::new()), true),
        Err(e) => return Err(e),
    };
    Ok(ProcSample {
        pid,
        ppid: stat.ppid,
        start_time: stat.start_time,
        comm: stat.comm,
        status,
        fds,
        rollup,
        mappings,
        deep_denied,
    })
}

/// Where and when a batch of samples was taken.
#[derive(Debug, Clone)]
pub struct Context {
    pub sample: u64,
    pub run: Option<u32>,
    pub t_seconds: f64,
    pub timestamp: String,
}

impl Context {
    /// A row of this batch for `scope`, with nothing measured yet.
    pub fn row(&self, scope: Scope) -> Row {
        Row {
            sample: self.sample,
            run: self.run,
            t_seconds: self.t_seconds,
            timestamp: self.timestamp.clone(),
            ..Row::new(scope)
        }
    }
}

/// The clock of one leakwatch session: sample numbers and seconds since start.
pub struct Clock {
    start: Instant,
    next_sample: u64,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Clock {
            start: Instant::now(),
            next_sample: 0,
        }
    }

    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// A fresh context for the next batch of rows.
    pub fn context(&mut self, run: Option<u32>) -> Context {
        let sample = self.next_sample;
        self.next_sample += 1;
        Context {
            sample,
            run,
            t_seconds: self.elapsed(),
            timestamp: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        }
    }
}

/// Turns a process sample into a CSV row for `scope`.
pub fn to_row(ctx: &Context, scope: Scope, s: &ProcSample) -> Row {
    let mut row = Row {
        pid: s.pid,
        ppid: s.ppid,
        start_time: s.start_time,
        comm: s.comm.clone(),
        tier: Tier::Cheap,
        rss_bytes: s.status.rss_bytes,
        anon_bytes: s.status.anon_bytes,
        file_bytes: s.status.file_bytes,
        shmem_bytes: s.status.shmem_bytes,
        swap_bytes: s.status.swap_bytes,
        hwm_bytes: s.status.hwm_bytes,
        threads: s.status.threads,
        fds: s.fds,
        ..ctx.row(scope)
    };
    if let Some(r) = &s.rollup {
        fill_deep(&mut row, r);
    }
    row
}

/// Makes a cheap row deep: the rollup's figures (read from `smaps_rollup`,
/// or summed from `smaps`).
pub fn fill_deep(row: &mut Row, r: &proc::Rollup) {
    row.tier = Tier::Deep;
    row.pss_bytes = Some(r.pss_bytes);
    row.pss_anon_bytes = r.pss_anon_bytes;
    row.pss_file_bytes = r.pss_file_bytes;
    row.pss_shmem_bytes = r.pss_shmem_bytes;
    row.shared_clean_bytes = Some(r.shared_clean_bytes);
    row.shared_dirty_bytes = Some(r.shared_dirty_bytes);
    row.private_clean_bytes = Some(r.private_clean_bytes);
    row.private_dirty_bytes = Some(r.private_dirty_bytes);
    row.uss_bytes = Some(r.uss_bytes());
    row.shared_bytes = Some(r.shared_bytes());
    row.swap_pss_bytes = r.swap_pss_bytes;
}

/// The row of one mapping name of one process.
pub fn mapping_row(
    ctx: &Context,
    scope: Scope,
    pid: u32,
    ppid: u32,
    start_time: u64,
    m: &proc::Mapping,
) -> Row {
    Row {
        pid,
        ppid,
        start_time,
        comm: m.name.clone(),
        tier: Tier::Mapping,
        rss_bytes: Some(m.rss_bytes),
        pss_bytes: Some(m.pss_bytes),
        anon_bytes: Some(m.anon_bytes),
        private_dirty_bytes: Some(m.private_dirty_bytes),
        swap_bytes: Some(m.swap_bytes),
        ..ctx.row(scope)
    }
}

/// An event row: a run starting or ending, a process exiting, a pid reused.
pub fn event_row(
    ctx: &Context,
    scope: Scope,
    pid: u32,
    comm: &str,
    event: &str,
    exit_code: Option<i32>,
) -> Row {
    Row {
        pid,
        comm: comm.to_string(),
        tier: Tier::Event,
        event: Some(event.to_string()),
        exit_code,
        ..ctx.row(scope)
    }
}

/// What sampling the processes of a scope gave.
#[derive(Debug, Default)]
pub struct Scoped {
    /// One row per process read (zombies and kernel threads have none).
    pub rows: Vec<Row>,
    /// Rows per mapping name, at `Depth::Mappings`.
    pub mapping_rows: Vec<Row>,
    /// Processes that could not be read for another reason than exiting
    /// (pid, why): the caller notes them, since they are missing from the sums.
    pub unreadable: Vec<(u32, String)>,
    /// Processes whose deep read was refused.
    pub denied: Vec<u32>,
}

impl Scoped {
    /// Adds another part of the same scope's sample.
    pub fn extend(&mut self, other: Scoped) {
        self.rows.extend(other.rows);
        self.mapping_rows.extend(other.mapping_rows);
        self.unreadable.extend(other.unreadable);
        self.denied.extend(other.denied);
    }

    /// The process rows followed by the mapping rows.
    pub fn all_rows(self) -> Vec<Row> {
        let mut rows = self.rows;
        rows.extend(self.mapping_rows);
        rows
    }
}

/// Samples each pid for `scope` at `depth`. Processes that exited since the
/// tree was walked are skipped (an event, not an error); zombies and kernel
/// threads (no memory) are skipped silently. Mappings (`Depth::Mappings`)
/// cost a page-table walk plus a few µs per mapping: asked at the first and
/// last sample only, for attribution.
pub fn sample_scope(
    root: &ProcRoot,
    ctx: &Context,
    scope: Scope,
    pids: &[u32],
    depth: Depth,
) -> Scoped {
    let mut out = Scoped {
        rows: Vec::with_capacity(pids.len()),
        ..Scoped::default()
    };
    for &pid in pids {
        match read_process(root, pid, depth) {
            Ok(s) if s.status.rss_bytes.is_none() => {} // zombie or kernel thread
            Ok(s) => {
                if s.deep_denied {
                    out.denied.push(pid);
                }
                out.mapping_rows.extend(
                    s.mappings
                        .iter()
                        .filter(|m| m.rss_bytes > 0 || m.swap_bytes > 0)
                        .map(|m| mapping_row(ctx, scope, pid, s.ppid, s.start_time, m)),
                );
                out.rows.push(to_row(ctx, scope, &s));
            }
            Err(e) if e.is_gone() => {}
            Err(e) => out.unreadable.push((pid, e.to_string())),
        }
    }
    out
}

/// The fix for the usual reasons a command does not start.
fn spawn_hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOEXEC) => {
            "; a script needs a '#!' first line, or run it through its interpreter (-- sh script.sh)"
        }
        Some(libc::EACCES) => "; check that it is executable (chmod +x)",
        _ => "",
    }
}

/// What the environment says about the targets the user named: checked
/// before any output directory exists.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{what} {pid}: no such process; check the PID with `ps -p {pid}` or `pgrep NAME`")]
    NoSuchProcess { what: &'static str, pid: u32 },
    #[error("command '{0}' not found in PATH; give its path (e.g. ./{0}) or install it")]
    CommandNotFound(String),
    #[error(
        "command '{0}' not found: it is one argument with spaces, and leakwatch runs the \
         command directly, with no shell; drop the quotes (-- {0}) or ask for a shell \
         (-- sh -c '{0}')"
    )]
    CommandWithSpaces(String),
    #[error("command '{0}' does not exist; check the path")]
    CommandMissing(String),
    #[error("command '{0}' is a directory; give the program to run in it")]
    CommandIsDirectory(String),
    #[error("command '{0}' is not executable; try `chmod +x {0}`")]
    CommandNotExecutable(String),
    #[error("PID {pid} ({name}) is a kernel thread: it has no user memory to sample")]
    KernelThread { pid: u32, name: String },
    #[error("--py-sites: {0}")]
    PySites(String),
    #[error("--native-sites: {0}")]
    NativeSites(String),
}

/// Errors that end sampling early. Samples taken before stay on disk.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("cannot start '{program}': {}{}", .error, spawn_hint(.error))]
    Spawn {
        program: String,
        error: std::io::Error,
    },
    #[error(
        "cannot become a child subreaper ({0}); daemons the command detaches would escape \
         to init — Linux 3.4 or later is needed"
    )]
    Subreaper(std::io::Error),
    #[error("cannot read the target {pid}: {error}")]
    Target { pid: u32, error: ProcError },
}

/// How sampling ended.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub interrupted: bool,
    /// Things the user should know: a watched process that exited, a deep
    /// read refused, survivors that needed KILL.
    pub notes: Vec<String>,
}

/// Progress on stderr: a bar (run i of N, elapsed, current memory) when
/// stderr is a terminal, plain log lines otherwise, nothing when quiet.
pub struct Progress {
    quiet: bool,
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    /// `total` runs for `run`; `None` for `attach` (a spinner with elapsed time).
    pub fn new(quiet: bool, total: Option<u64>) -> Self {
        use std::io::IsTerminal;
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let (bar, template) = match total {
                Some(n) => (
                    indicatif::ProgressBar::new(n),
                    "{spinner} run {pos}/{len} [{bar:30}] {elapsed_precise}  {msg}",
                ),
                None => (
                    indicatif::ProgressBar::new_spinner(),
                    "{spinner} attached {elapsed_precise}  {msg}",
                ),
            };
            if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            bar
        });
        Progress { quiet, bar }
    }

    pub fn is_interactive(&self) -> bool {
        self.bar.is_some()
    }

    /// A completed step (a run): the bar moves, or a log line is printed.
    pub fn step(&self, pos: u64, text: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(pos);
                bar.set_message(crate::escape::inert(text).into_owned());
            }
            None => self.line(text),
        }
    }

    /// The bar's message only (no log line): per-tick status in attach mode.
    pub fn status(&self, text: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(crate::escape::inert(text).into_owned());
        }
    }

    /// A line that stays: above the bar, or on its own.
    pub fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("leakwatch: {}", crate::escape::inert_lines(text))),
            None if !self.quiet => crate::console::say_line(&format!("leakwatch: {text}")),
            None => {}
        }
    }

    /// Removes the bar before the summary is printed.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
