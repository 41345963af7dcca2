//! `run --py-sites`: which Python lines hold the memory. Instruments the
//! Python processes of a command with a bootstrap `sitecustomize` and asks
//! each of them, after a run, for tracemalloc's top allocation sites.
//!
//! [`PythonSites`] is the tracer the run driver holds (`super::Sites`);
//! `rows` turns its answers into samples.csv rows. [`PySites`] is the
//! asking itself. How it fits the run loop:
//!
//! 1. [`PySites::prepare`] once, before the first run: creates the private
//!    directory D (mode 0700) and writes the bootstrap into
//!    `D/boot/sitecustomize.py`.
//! 2. [`PySites::env`] on every run's command: `PYTHONPATH` with `D/boot`
//!    first, `LEAKWATCH_PY_DIR`, `LEAKWATCH_PY_FRAMES`. Every Python 3.7+
//!    process started from it (and every process they fork) then traces
//!    allocations and listens on `D/<pid>.sock`; see
//!    `sitecustomize.py` beside this file for what runs inside the processes.
//! 3. [`PySites::collect`] after each run, once the command has exited, the
//!    settle delay has passed and the survivors' deep sample is taken — not
//!    before it: answering costs the process CPU (0.2–3 s for 100k–350k live
//!    blocks) and a transient copy of its traces (about 100 bytes per live
//!    block) that would show in that sample. One snapshot per live endpoint,
//!    typed ([`Snapshot`]); failures are data ([`AnswerError`]), never a
//!    reason to stop. A site's growth in the run is `bytes - prev_bytes`.
//!    Each answer also counts the process' live objects by type
//!    (`Snapshot::by_type`, objgraph's table: about 0.1 s per million
//!    GC-tracked objects, a tenth of the sites' own time at that size).
//! 4. [`PySites::diagnose`] for a Python process of the tree that did not
//!    answer: the reason ([`Silence`]).
//! 5. Drop removes D (after the survivors are stopped), unless [`PySites::keep`].
//!
//! The wire format is specified in [`wire`] (version 1). A process already
//! running gets the same bootstrap through gdb instead ([`attach`]:
//! `attach --py-sites`, and the `--watch`ed processes of `run --py-sites`).

pub mod attach;
mod diagnose;
mod rows;
pub mod wire;

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{Collected, Sites};
use crate::sample::rows::Context;
use crate::store::{Row, SiteSource};
pub use diagnose::{PyFlags, Silence, python_flags};
pub use wire::{
    Frame, Grouping, Limits, LineSite, PeakSince, Snapshot, Totals, TracebackSite, TypeCounts,
    TypeRow, WIRE_FORMAT, WIRE_VERSION, parse_answer,
};

/// The bootstrap, written to `D/boot/sitecustomize.py`.
pub const BOOTSTRAP: &str = include_str!("sitecustomize.py");
/// Names the private directory D for the bootstrap.
pub const ENV_DIR: &str = "LEAKWATCH_PY_DIR";
/// Frames tracemalloc keeps per allocation.
pub const ENV_FRAMES: &str = "LEAKWATCH_PY_FRAMES";
/// The default `--py-frames`: the allocating line only. tracemalloc pays
/// for every frame it records on every allocation, and on CPython 3.11+ a
/// frame costs in proportion to its position in its code object (the line
/// table is scanned), so more frames cost far more (measured:
/// docs/python-sites.md#what-a-frame-costs). One frame names the line of
/// every direct allocation; when a growing site is inside the standard
/// library (`LineSite::internal`), rerun with `--py-frames 8` to see the
/// caller.
pub const DEFAULT_FRAMES: usize = 1;
pub const MAX_FRAMES: usize = 1000;
/// Longest socket path: `sun_path` holds 108 bytes with the final NUL.
const MAX_SOCKET_PATH: usize = 107;
/// `/<pid>.sock` for the largest pid (`pid_max` is at most 4194304).
const SOCKET_NAME_MAX: usize = "/4194304.sock".len();
/// An answer larger than this is refused (a few hundred KiB is typical).
const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// Setting up `--py-sites` failed. Each message names the path and the fix.
#[derive(Debug, thiserror::Error)]
pub enum PySitesError {
    #[error(
        "--py-frames {frames} is out of range; use 1 to {MAX_FRAMES} (the frames tracemalloc \
         keeps per allocation; more frames cost more on every allocation)"
    )]
    Frames { frames: usize },
    #[error(
        "cannot create the --py-sites directory in {parent}: {source}; set TMPDIR to a \
         writable directory"
    )]
    CreateDir { parent: PathBuf, source: io::Error },
    #[error(
        "the --py-sites directory {dir} is too long for a Unix socket path ({len} of at most \
         {MAX_SOCKET_PATH} bytes); set TMPDIR to a shorter directory such as /tmp"
    )]
    PathTooLong { dir: PathBuf, len: usize },
    #[error("cannot write the Python bootstrap {path}: {source}; check the space left on its disk")]
    WriteBootstrap { path: PathBuf, source: io::Error },
    #[error(
        "{dir} is not a leakwatch --py-sites directory ({why}); pass the directory that \
         `leakwatch run --py-sites --keep-survivors` printed"
    )]
    NotPySitesDir { dir: PathBuf, why: String },
    #[error(
        "{dir} is not private (owner uid {uid}, mode {mode:o}): another user could answer in \
         a process' place; it must be yours with mode 700 (chmod 700 {dir})"
    )]
    NotPrivate { dir: PathBuf, uid: u32, mode: u32 },
    #[error(
        "cannot hand the --py-sites directory {dir} to process {pid}'s user (uid {uid}): \
         {source}; run leakwatch as uid {uid}"
    )]
    HandDir {
        pid: u32,
        uid: u32,
        dir: PathBuf,
        source: io::Error,
    },
}

/// One process did not deliver a snapshot: an event in the data, not an error
/// of the run.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("process {pid} exited without removing its endpoint {path} (removed now)")]
    Gone { pid: u32, path: PathBuf },
    #[error(
        "process {pid} is running but nothing listens on {path}: it exec'd into a program \
         leakwatch does not instrument, or its bootstrap stopped answering (see {pid}.err \
         beside it)"
    )]
    NotListening { pid: u32, path: PathBuf },
    #[error(
        "process {pid} does not accept requests on {path} (its queue is full): its answering \
         thread is stuck, perhaps behind C code that holds the GIL"
    )]
    Busy { pid: u32, path: PathBuf },
    #[error(
        "process {pid} did not answer on {path} within {timeout:?}: a snapshot of a large heap \
         takes longer (0.3 s for 100,000 live blocks, 2 s for 350,000 in 30,000 tracebacks at \
         16 frames); raise the timeout, or it is blocked in C code that holds the GIL"
    )]
    Timeout {
        pid: u32,
        path: PathBuf,
        timeout: Duration,
    },
    #[error("cannot talk to process {pid} on {path}: {source}")]
    Io {
        pid: u32,
        path: PathBuf,
        source: io::Error,
    },
    #[error("the answer of process {pid} is not {WIRE_FORMAT} version {WIRE_VERSION}: {detail}")]
    Malformed { pid: u32, detail: String },
    #[error(
        "process {pid} answers in wire format version {got}, this leakwatch reads version \
         {WIRE_VERSION}: the process runs another leakwatch's bootstrap"
    )]
    Version { pid: u32, got: u32 },
    #[error("process {pid} could not take a snapshot: {message}")]
    Reported { pid: u32, message: String },
    #[error("process {pid} answered for run {got:?} when asked for run {asked:?}")]
    RunMismatch {
        pid: u32,
        asked: Option<u32>,
        got: Option<u32>,
    },
}

/// What one endpoint gave for one request.
#[derive(Debug)]
pub struct SiteReport {
    pub pid: u32,
    pub endpoint: PathBuf,
    pub answer: Result<Snapshot, AnswerError>,
}

/// `--py-sites` as the run driver holds it: the private directory D and
/// what this session has written of the answers so far.
#[derive(Debug)]
pub struct PythonSites {
    sites: PySites,
    session: rows::SiteSession,
    /// `run --watch PID --py-sites`: the watched Python processes the
    /// bootstrap was run in (`attach`), with how; they detach at the end.
    entered: Vec<(u32, attach::Entered<()>)>,
}

impl PythonSites {
    /// Creates D with the bootstrap (see [`PySites::prepare`]), tracing
    /// `frames` frames per allocation.
    pub fn prepare(frames: usize) -> Result<PythonSites, PySitesError> {
        Ok(PythonSites {
            sites: PySites::prepare(frames)?,
            session: rows::SiteSession::default(),
            entered: Vec::new(),
        })
    }

    /// Runs the bootstrap in the watched processes that are CPython (as
    /// `attach --py-sites` does; the others are left alone): they answer
    /// after each run as the command's own Python processes do.
    pub fn enter_watched(&mut self, watched: &[u32]) -> Result<(), attach::PyAttachError> {
        for &pid in watched {
            let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            if !diagnose::looks_like_python(exe.as_os_str()) {
                continue;
            }
            self.sites.hand_to(pid)?;
            let entered = attach::enter_one(pid, &self.sites)?;
            self.entered.push((pid, entered));
        }
        Ok(())
    }
}

impl Drop for PythonSites {
    /// The watched processes stop tracing (before D goes).
    fn drop(&mut self) {
        for (pid, _) in &self.entered {
            self.sites.detach(*pid, Duration::from_secs(5));
        }
    }
}

impl Sites for PythonSites {
    fn source(&self) -> SiteSource {
        SiteSource::Python
    }

    /// `PYTHONPATH` with the bootstrap first, then the one leakwatch has.
    fn env(&self) -> Vec<(OsString, OsString)> {
        self.sites.env(std::env::var_os("PYTHONPATH").as_deref())
    }

    fn collect(&mut self, ctx: &Context, sampled: &[Row], timeout: Duration) -> Collected {
        self.session.collect(&self.sites, ctx, sampled, timeout)
    }

    /// How the watched processes were entered.
    fn finish(&mut self) -> Vec<String> {
        self.entered
            .iter()
            .map(|(pid, e)| {
                format!(
                    "--py-sites: the bootstrap ran in the watched process {pid} from the start \
                     of the session (entered by gdb; it was stopped {:.0} ms) and detached at \
                     its end",
                    e.pause.as_secs_f64() * 1000.0
                )
            })
            .collect()
    }
}

/// The private directory D of one leakwatch session and how to ask the
/// processes that use it.
#[derive(Debug)]
pub struct PySites {
    dir: PathBuf,
    frames: usize,
    limits: Limits,
    remove_on_drop: bool,
}

impl PySites {
    /// Creates D in the temporary directory (`TMPDIR`, else /tmp) with the
    /// bootstrap in it.
    pub fn prepare(frames: usize) -> Result<PySites, PySitesError> {
        PySites::prepare_in(&std::env::temp_dir(), frames)
    }

    /// Creates D under `parent`: a new directory (never an existing one, so
    /// nobody can have planted files or links in it), mode 0700, absolute.
    pub fn prepare_in(parent: &Path, frames: usize) -> Result<PySites, PySitesError> {
        if !(1..=MAX_FRAMES).contains(&frames) {
            return Err(PySitesError::Frames { frames });
        }
        let dir = create_private_dir(parent)?;
        // From here on Drop cleans up, also when a later step fails.
        let sites = PySites {
            dir,
            frames,
            limits: Limits::default(),
            remove_on_drop: true,
        };
        let len = sites.dir.as_os_str().len() + SOCKET_NAME_MAX;
        if len > MAX_SOCKET_PATH {
            return Err(PySitesError::PathTooLong {
                dir: sites.dir.clone(),
                len,
            });
        }
        let boot = sites.boot_dir();
        let path = boot.join("sitecustomize.py");
        let write = || -> io::Result<()> {
            fs::DirBuilder::new().mode(0o700).create(&boot)?;
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            file.write_all(BOOTSTRAP.as_bytes())?;
            file.sync_all()
        };
        write().map_err(|source| PySitesError::WriteBootstrap { path, source })?;
        Ok(sites)
    }

    /// Uses a directory an earlier session kept ([`PySites::keep`]), e.g. to
    /// collect from a daemon left running with `--keep-survivors`. It must be
    /// the caller's, mode 0700. It is not removed on drop; its [`PySites::env`]
    /// names [`DEFAULT_FRAMES`].
    pub fn open(dir: &Path) -> Result<PySites, PySitesError> {
        let not_ours = |why: String| PySitesError::NotPySitesDir {
            dir: dir.to_path_buf(),
            why,
        };
        let meta = fs::symlink_metadata(dir).map_err(|e| not_ours(e.to_string()))?;
        if !meta.is_dir() {
            return Err(not_ours("not a directory".into()));
        }
        let boot = dir.join("boot").join("sitecustomize.py");
        if !boot.is_file() {
            return Err(not_ours(format!("no {}", boot.display())));
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me || meta.mode() & 0o077 != 0 {
            return Err(PySitesError::NotPrivate {
                dir: dir.to_path_buf(),
                uid: meta.uid(),
                mode: meta.mode() & 0o7777,
            });
        }
        Ok(PySites {
            dir: dir.to_path_buf(),
            frames: DEFAULT_FRAMES,
            limits: Limits::default(),
            remove_on_drop: false,
        })
    }

    /// Gives D and the bootstrap to `pid`'s user when leakwatch runs as
    /// root and the process as another user (`attach`): it reads the
    /// bootstrap and creates its endpoint there; root still reads them.
    pub fn hand_to(&mut self, pid: u32) -> Result<(), PySitesError> {
        let Some(super::enter::Ids { uid, gid }) = super::enter::Ids::of(pid) else {
            // Gone: entering it says so next.
            return Ok(());
        };
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if me != 0 || uid == me {
            return Ok(());
        }
        let boot = self.boot_dir();
        for path in [
            self.dir.clone(),
            boot.clone(),
            boot.join("sitecustomize.py"),
        ] {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid)).map_err(|source| {
                PySitesError::HandDir {
                    pid,
                    uid,
                    dir: self.dir.clone(),
                    source,
                }
            })?;
        }
        Ok(())
    }

    /// How many sites each process lists (defaults: [`Limits::default`]).
    pub fn with_limits(mut self, limits: Limits) -> PySites {
        self.limits = limits;
        self
    }

    /// The private directory D.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `D/boot`, which goes first on PYTHONPATH.
    pub fn boot_dir(&self) -> PathBuf {
        self.dir.join("boot")
    }

    pub fn frames(&self) -> usize {
        self.frames
    }

    /// The variables to set on the command (and only there: leakwatch's own
    /// environment stays as it is). `existing_pythonpath` is the PYTHONPATH
    /// the command would otherwise get; `D/boot` goes in front of it. An empty
    /// one is dropped rather than kept as an empty entry, which Python would
    /// read as the current directory.
    pub fn env(&self, existing_pythonpath: Option<&OsStr>) -> Vec<(OsString, OsString)> {
        let mut pythonpath = self.boot_dir().into_os_string();
        if let Some(existing) = existing_pythonpath.filter(|p| !p.is_empty()) {
            pythonpath.push(":");
            pythonpath.push(existing);
        }
        vec![
            ("PYTHONPATH".into(), pythonpath),
            (ENV_DIR.into(), self.dir.clone().into_os_string()),
            (ENV_FRAMES.into(), self.frames.to_string().into()),
        ]
    }

    /// The pids with an endpoint in D, ascending. Includes endpoints left by
    /// processes that died without cleaning up; [`PySites::ask`] tells.
    pub fn endpoints(&self) -> Vec<u32> {
        super::endpoints(&self.dir, ".sock")
    }

    /// Asks every endpoint for a snapshot after `run`, a few at a time (the
    /// snapshots cost the processes CPU), each within `timeout`. One report
    /// per endpoint, ascending by pid; a dead process' endpoint is removed
    /// and reported once as [`AnswerError::Gone`].
    pub fn collect(&self, run: u32, timeout: Duration) -> Vec<SiteReport> {
        let pids = self.endpoints();
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 8)
            .min(pids.len());
        let next = AtomicUsize::new(0);
        let reports = Mutex::new(Vec::with_capacity(pids.len()));
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| {
                    while let Some(&pid) = pids.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let report = self.ask(pid, Some(run), timeout);
                        if let Ok(mut all) = reports.lock() {
                            all.push(report);
                        }
                    }
                });
            }
        });
        let mut reports = reports.into_inner().unwrap_or_default();
        reports.sort_by_key(|r| r.pid);
        reports
    }

    /// Asks one process for a snapshot (see [`PySites::collect`]).
    pub fn ask(&self, pid: u32, run: Option<u32>, timeout: Duration) -> SiteReport {
        let path = self.socket_path(pid);
        let answer = self.exchange(pid, &path, run, timeout);
        SiteReport {
            pid,
            endpoint: path,
            answer,
        }
    }

    /// Why `pid`, a process of the tree, has not answered.
    pub fn diagnose(&self, pid: u32) -> Silence {
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        if !proc_dir.exists() {
            return Silence::Exited;
        }
        if let Ok(text) = fs::read_to_string(self.dir.join(format!("{pid}.err"))) {
            let message = text.trim().trim_start_matches("leakwatch: ").to_string();
            return Silence::Bootstrap { message };
        }
        let exe = fs::read_link(proc_dir.join("exe")).unwrap_or_default();
        let is_python = diagnose::looks_like_python(exe.as_os_str())
            || fs::read_to_string(proc_dir.join("maps")).is_ok_and(|maps| {
                maps.lines().any(|l| {
                    l.rsplit(' ')
                        .next()
                        .is_some_and(|p| diagnose::looks_like_python(OsStr::new(p)))
                })
            });
        if !is_python {
            return Silence::NotPython {
                exe: exe.display().to_string(),
            };
        }
        let cmdline = fs::read(proc_dir.join("cmdline")).unwrap_or_default();
        let argv: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let flags = python_flags(&argv);
        if flags.isolated || flags.ignore_environment {
            let flag = if flags.isolated { 'I' } else { 'E' };
            return Silence::IgnoresPythonpath { flag };
        }
        if flags.no_site {
            return Silence::NoSite;
        }
        if !descends_from(pid, std::process::id()) {
            return Silence::NotStarted;
        }
        if let Some(silence) = self.environment_silence(&proc_dir) {
            return silence;
        }
        Silence::Unknown
    }

    /// Keeps D after this value is dropped (for `--keep-survivors`: the
    /// survivors keep their endpoints); returns its path.
    pub fn keep(mut self) -> PathBuf {
        self.remove_on_drop = false;
        self.dir.clone()
    }

    /// Asks `pid` to end its session (attached processes): tracing stops
    /// and its endpoint closes. Best effort: a process gone or silent is
    /// left as it is (an attached one ends by itself once leakwatch is gone).
    pub fn detach(&self, pid: u32, timeout: Duration) {
        let Ok(mut stream) = super::connect(&self.socket_path(pid)) else {
            return;
        };
        let _ = stream.set_write_timeout(Some(timeout));
        let _ = stream.set_read_timeout(Some(timeout));
        let request = format!("{{\"version\":{WIRE_VERSION},\"op\":\"detach\"}}\n");
        if stream.write_all(request.as_bytes()).is_ok() {
            let _ = stream.shutdown(std::net::Shutdown::Write);
            // Its answer, bounded; the process detaches after sending it.
            let _ = stream.take(64 * 1024).read_to_end(&mut Vec::new());
        }
    }

    fn socket_path(&self, pid: u32) -> PathBuf {
        self.dir.join(format!("{pid}.sock"))
    }

    fn environment_silence(&self, proc_dir: &Path) -> Option<Silence> {
        let environ = fs::read(proc_dir.join("environ")).ok()?;
        let boot = self.boot_dir();
        let has_boot = diagnose::environ_get(&environ, "PYTHONPATH").is_some_and(|pp| {
            pp.split(|&b| b == b':')
                .any(|entry| entry == boot.as_os_str().as_bytes())
        });
        if !has_boot {
            return Some(Silence::EnvironmentChanged {
                missing: "leakwatch's PYTHONPATH entry",
            });
        }
        if diagnose::environ_get(&environ, ENV_DIR) != Some(self.dir.as_os_str().as_bytes()) {
            return Some(Silence::EnvironmentChanged { missing: ENV_DIR });
        }
        let status = fs::read_to_string(proc_dir.join("status")).ok()?;
        let uid: u32 = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        (uid != me && uid != 0).then_some(Silence::OtherUser { uid })
    }

    fn exchange(
        &self,
        pid: u32,
        path: &Path,
        run: Option<u32>,
        timeout: Duration,
    ) -> Result<Snapshot, AnswerError> {
        let started = Instant::now();
        let io_err = |source: io::Error| AnswerError::Io {
            pid,
            path: path.to_path_buf(),
            source,
        };
        let mut stream = super::connect(path).map_err(|e| connect_error(pid, path, e))?;
        let timed_out = || AnswerError::Timeout {
            pid,
            path: path.to_path_buf(),
            timeout,
        };
        let request = wire::request(run.unwrap_or(0), &self.limits);
        stream.set_write_timeout(Some(timeout)).map_err(io_err)?;
        stream
            .write_all(request.as_bytes())
            .map_err(|e| classify_io(e, timed_out, io_err))?;
        stream.shutdown(std::net::Shutdown::Write).map_err(io_err)?;
        let mut text = Vec::new();
        let mut buf = [0u8; 64 * 1024];
        loop {
            let left = timeout
                .checked_sub(started.elapsed())
                .filter(|d| !d.is_zero())
                .ok_or_else(timed_out)?;
            stream.set_read_timeout(Some(left)).map_err(io_err)?;
            match stream.read(&mut buf) {
                Ok(0) => break,
                // The answer ends at its newline, not at EOF: a process that
                // forks while answering leaves a copy of the connection in
                // the child (gunicorn's master spawning a worker), and that
                // copy is never closed.
                Ok(n) if buf[..n].ends_with(b"\n") => {
                    text.extend_from_slice(&buf[..n]);
                    break;
                }
                Ok(n) => text.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(classify_io(e, timed_out, io_err)),
            }
            if text.len() as u64 > MAX_ANSWER_BYTES {
                return Err(AnswerError::Malformed {
                    pid,
                    detail: format!("longer than {MAX_ANSWER_BYTES} bytes"),
                });
            }
        }
        let text = String::from_utf8(text).map_err(|e| AnswerError::Malformed {
            pid,
            detail: e.to_string(),
        })?;
        let mut snapshot = parse_answer(pid, run, &text)?;
        snapshot.answer_bytes = text.len();
        snapshot.latency = started.elapsed();
        Ok(snapshot)
    }
}

impl Drop for PySites {
    fn drop(&mut self) {
        if self.remove_on_drop {
            // Processes still running keep their (now unlinked) sockets: harmless.
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn classify_io(
    e: io::Error,
    timed_out: impl Fn() -> AnswerError,
    other: impl Fn(io::Error) -> AnswerError,
) -> AnswerError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => timed_out(),
        _ => other(e),
    }
}

/// Maps a failed connect to what it says about the process. A socket file
/// nobody listens on is removed only when its process is gone: a live one
/// may be between bind() and listen(), or have exec'd (diagnose tells).
fn connect_error(pid: u32, path: &Path, e: io::Error) -> AnswerError {
    let path = path.to_path_buf();
    let alive = Path::new(&format!("/proc/{pid}")).exists();
    match e.raw_os_error() {
        Some(libc::ENOENT) => AnswerError::Gone { pid, path },
        Some(libc::ECONNREFUSED) if !alive => {
            let _ = fs::remove_file(&path);
            AnswerError::Gone { pid, path }
        }
        Some(libc::ECONNREFUSED) => AnswerError::NotListening { pid, path },
        Some(libc::EAGAIN) => AnswerError::Busy { pid, path },
        _ => AnswerError::Io {
            pid,
            path,
            source: e,
        },
    }
}

/// Creates a fresh directory `leakwatch-py-<pid>-<random>` in `parent`,
/// mode 0700, and returns its absolute path.
fn create_private_dir(parent: &Path) -> Result<PathBuf, PySitesError> {
    use std::hash::{BuildHasher, Hasher};
    let fail = |source| PySitesError::CreateDir {
        parent: parent.to_path_buf(),
        source,
    };
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..32 {
        // RandomState is seeded from the OS per instance: a name nobody can guess.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let name = format!(
            "leakwatch-py-{}-{:016x}",
            std::process::id(),
            hasher.finish()
        );
        let dir = parent.join(name);
        // mkdir never follows a link at its last component and fails if the
        // name exists: the directory is ours and new.
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return fs::canonicalize(&dir).map_err(fail),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(fail(e)),
        }
    }
    Err(fail(last))
}

/// Whether `ancestor` is `pid` or one of its ancestors (by each process's
/// parent in `/proc/PID/stat`, at most 4096 steps).
fn descends_from(pid: u32, ancestor: u32) -> bool {
    let root = crate::sample::procfs::ProcRoot::default();
    let mut at = pid;
    for _ in 0..4096 {
        if at == ancestor {
            return true;
        }
        match root.stat(at) {
            Ok(stat) if stat.ppid != 0 && stat.ppid != at => at = stat.ppid,
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn temp_parent() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("lw-pysites-test")
            .tempdir_in("/tmp")
            .unwrap()
    }

    #[test]
    fn prepare_makes_a_private_dir_with_the_bootstrap_and_drop_removes_it() {
        let parent = temp_parent();
        let sites = PySites::prepare_in(parent.path(), 8).unwrap();
        let dir = sites.dir().to_path_buf();
        assert!(dir.is_absolute());
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let boot = fs::read_to_string(dir.join("boot/sitecustomize.py")).unwrap();
        assert_eq!(boot, BOOTSTRAP);
        assert!(PySites::open(&dir).is_ok());
        drop(sites);
        assert!(!dir.exists());
    }

    #[test]
    fn keep_leaves_the_dir_for_a_later_open() {
        let parent = temp_parent();
        let dir = PySites::prepare_in(parent.path(), 8).unwrap().keep();
        assert!(dir.join("boot/sitecustomize.py").is_file());
        let opened = PySites::open(&dir).unwrap();
        drop(opened);
        assert!(dir.exists(), "an opened dir is not removed");
    }

    #[test]
    fn open_refuses_dirs_that_are_not_private_or_not_ours() {
        let parent = temp_parent();
        let err = PySites::open(parent.path()).unwrap_err();
        assert!(err.to_string().contains("not a leakwatch"), "{err}");
        let dir = PySites::prepare_in(parent.path(), 8).unwrap().keep();
        fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let err = PySites::open(&dir).unwrap_err();
        assert!(err.to_string().contains("chmod 700"), "{err}");
    }

    #[test]
    fn bad_frames_and_long_paths_are_refused_with_the_fix() {
        let parent = temp_parent();
        let err = PySites::prepare_in(parent.path(), 0).unwrap_err();
        assert!(err.to_string().contains("--py-frames 0"), "{err}");
        let long = parent.path().join("x".repeat(90));
        fs::create_dir(&long).unwrap();
        let err = PySites::prepare_in(&long, 8).unwrap_err();
        assert!(matches!(err, PySitesError::PathTooLong { .. }), "{err}");
        assert!(err.to_string().contains("TMPDIR"), "{err}");
        assert_eq!(fs::read_dir(&long).unwrap().count(), 0, "cleaned up");
        let err = PySites::prepare_in(&parent.path().join("missing"), 8).unwrap_err();
        assert!(err.to_string().contains("set TMPDIR"), "{err}");
    }

    #[test]
    fn env_puts_the_bootstrap_first_and_keeps_the_rest() {
        let parent = temp_parent();
        let sites = PySites::prepare_in(parent.path(), 12).unwrap();
        let boot = sites.boot_dir().into_os_string();
        let get = |env: &[(OsString, OsString)], k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        let env = sites.env(None);
        assert_eq!(get(&env, "PYTHONPATH"), boot);
        assert_eq!(get(&env, ENV_DIR), sites.dir().as_os_str());
        assert_eq!(get(&env, ENV_FRAMES), "12");
        // An empty PYTHONPATH would become an entry for the current directory.
        assert_eq!(get(&sites.env(Some(OsStr::new(""))), "PYTHONPATH"), boot);
        let mut expected = boot.clone();
        expected.push(":/a:/b");
        assert_eq!(
            get(&sites.env(Some(OsStr::new("/a:/b"))), "PYTHONPATH"),
            expected
        );
    }

    /// A stand-in for the bootstrap: answers one request with `answer`.
    fn fake_process(sites: &PySites, pid: u32, answer: String) -> std::thread::JoinHandle<String> {
        let listener = UnixListener::bind(sites.socket_path(pid)).unwrap();
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = String::new();
            conn.read_to_string(&mut request).unwrap();
            conn.write_all(answer.as_bytes()).unwrap();
            request
        })
    }

    #[test]
    fn collect_asks_each_endpoint_and_types_the_answers() {
        let parent = temp_parent();
        let sites = PySites::prepare_in(parent.path(), 8).unwrap();
        let me = std::process::id();
        let answer = format!(
            r#"{{"format":"leakwatch-py-sites","version":1,"pid":{me},"ppid":1,"run":5,
            "seq":1,"time_unix":1.0,"uptime_s":0.5,"forked":false,"argv0":null,
            "executable":"python3","python":"3.11.7","implementation":"cpython","frames_limit":8,
            "totals":{{"traced_bytes":10,"traced_blocks":1,"self_bytes":0,"self_blocks":0,
              "current_bytes":10,"peak_bytes":10,"peak_since":"start","tracemalloc_bytes":100}},
            "timing":{{"traces_ms":1.0,"group_ms":2.0}},"files":["a.py"],
            "by_traceback":{{"groups":1,"other_bytes":0,"other_blocks":0,
              "sites":[{{"frames":[[0,3]],"bytes":10,"blocks":1,"prev_bytes":null}}]}},
            "by_line":{{"groups":1,"other_bytes":0,"other_blocks":0,"sites":[]}}}}"#
        );
        let server = fake_process(&sites, me, answer.clone());
        // A process that died without removing its socket: pid 4194304 + 1 cannot exist.
        let dead = 4_194_305;
        drop(UnixListener::bind(sites.socket_path(dead)).unwrap());
        assert_eq!(sites.endpoints(), vec![me, dead]);
        let reports = sites.collect(5, Duration::from_secs(5));
        let request = server.join().unwrap();
        assert!(request.contains(r#""run":5"#), "{request}");
        assert_eq!(reports.len(), 2);
        let snap = reports[0].answer.as_ref().unwrap();
        assert_eq!(snap.by_traceback.sites[0].frames[0].line, 3);
        assert_eq!(snap.answer_bytes, answer.len());
        assert!(matches!(reports[1].answer, Err(AnswerError::Gone { .. })));
        assert_eq!(sites.endpoints(), vec![me], "the stale socket is removed");
    }

    #[test]
    fn a_silent_process_times_out_and_a_live_unbound_one_is_not_listening() {
        let parent = temp_parent();
        let sites = PySites::prepare_in(parent.path(), 8).unwrap();
        let me = std::process::id();
        let listener = UnixListener::bind(sites.socket_path(me)).unwrap();
        let started = Instant::now();
        let report = sites.ask(me, Some(1), Duration::from_millis(300));
        assert!(
            matches!(report.answer, Err(AnswerError::Timeout { .. })),
            "{:?}",
            report.answer
        );
        assert!(started.elapsed() < Duration::from_secs(3));
        drop(listener);
        let report = sites.ask(me, Some(1), Duration::from_millis(300));
        assert!(
            matches!(report.answer, Err(AnswerError::NotListening { .. })),
            "{:?}",
            report.answer
        );
        assert!(sites.socket_path(me).exists(), "kept: the process lives");
    }

    #[test]
    fn diagnose_reads_the_bootstrap_error_first() {
        let parent = temp_parent();
        let sites = PySites::prepare_in(parent.path(), 8).unwrap();
        let me = std::process::id();
        fs::write(
            sites.dir().join(format!("{me}.err")),
            "leakwatch: Python 2.7 is too old for --py-sites (3.7 or later); not instrumented\n",
        )
        .unwrap();
        let silence = sites.diagnose(me);
        assert!(
            matches!(&silence, Silence::Bootstrap { message } if message.starts_with("Python 2.7")),
            "{silence:?}"
        );
        assert_eq!(sites.diagnose(4_194_305), Silence::Exited);
    }
}
