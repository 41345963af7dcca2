//! Allocation sites: which lines of code hold the memory, from a tracer
//! inside the sampled processes, behind one trait so that the run driver
//! knows none of them.
//!
//! A tracer plugs into `leakwatch run` at two points, and nowhere else:
//!
//! 1. [`Sites::env`] when each run's command is started: the variables it
//!    gets (and only it — leakwatch's own environment stays as it is).
//!    Every process the command starts inherits them, daemons included, so
//!    this is where a tracer gets itself loaded: Python's `PYTHONPATH` with
//!    a bootstrap `sitecustomize` first, a preloaded library for native
//!    code. A variable that may already be set (`PYTHONPATH`,
//!    `LD_PRELOAD`) is read from leakwatch's own environment and kept
//!    after the tracer's entry.
//! 2. [`Sites::collect`] after each run, once the command has exited, the
//!    settle delay has passed and the run's deep sample is written — not
//!    before: answering costs a process CPU and memory that must not show
//!    in that sample. It asks every instrumented process, waits at most
//!    `timeout` for each, and returns the run's report ([`Collected`]):
//!    rows for samples.csv and notes for the user.
//!
//! The rows a tracer returns are `store::Row`s built on the run's
//! [`Context`] (`ctx.row(scope)`), one per site and process: tier
//! `Tier::Site`, `comm` the site's name (`file:line`, or what identifies a
//! native frame), `site_bytes` what it holds after the run and
//! `site_blocks` in how many allocations; pid, ppid, start time and scope
//! copied from the process's row in `sampled`, the deep sample of the same
//! run (a pid not in it is not followed: leave it out). Optional rows: a
//! `traceback` event row (tier `Site`, `event` `traceback`, `comm` the site,
//! a newline, then its frames one a line, innermost first) once per scope
//! and site, `Tier::Type` rows, and one `Tier::Heap` row per process (the
//! heap its tracer counts, `heap_source` set). The driver stamps every site
//! and type row with the
//! tracer's [`Sites::source`] (samples.csv's `site_source`), so series,
//! fits and reports keep each tracer's sites apart and say which found
//! them.
//!
//! A process that does not answer is data, not an error: no row, and a
//! note once per process saying why (`python::Silence`). `collect` never
//! fails the run. The tracer's own files are removed when it is dropped,
//! which the driver does after the survivors are stopped.
//!
//! Today: [`python`] (`run --py-sites`, tracemalloc through a Unix socket
//! per process), [`native`] (`run --native-sites`, a preloaded sampling
//! allocator shim keeping a file per process) and [`jvm`]
//! (`--jvm-classes`, each JVM's class histogram through its attach socket).

pub mod enter;
pub mod jvm;
pub mod native;
pub mod python;

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use super::rows::Context;
use crate::store::{Row, SiteSource};

/// How long one process may take to answer after a run (a snapshot of a
/// large Python heap takes seconds).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// One tracer of allocation sites, as the run driver sees it.
pub trait Sites: fmt::Debug {
    /// Which tracer this is: the `site_source` of every row it gives.
    fn source(&self) -> SiteSource;

    /// The variables to set on every command a run starts.
    fn env(&self) -> Vec<(OsString, OsString)>;

    /// After the run of `ctx` (its deep sample `sampled` written): the
    /// sites of every instrumented process of the followed scopes, each
    /// waited for at most `timeout`.
    fn collect(&mut self, ctx: &Context, sampled: &[Row], timeout: Duration) -> Collected;

    /// At the end of the session: what the tracer did to the processes it
    /// asked, for the notes.
    fn finish(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// What one tracer gave after one run.
#[derive(Debug, Default)]
pub struct Collected {
    /// Rows for samples.csv (see the module doc for their fields).
    pub rows: Vec<Row>,
    /// Processes that did not answer, each with the reason, once.
    pub notes: Vec<String>,
}

/// A `Tier::Site` row of `process` for the batch of `ctx`: the site's name
/// in `comm`, what it holds in `site_bytes`.
pub(crate) fn site_row(ctx: &Context, process: &Row, comm: String, bytes: u64) -> Row {
    Row {
        pid: process.pid,
        ppid: process.ppid,
        start_time: process.start_time,
        comm,
        tier: crate::store::Tier::Site,
        site_bytes: Some(bytes),
        ..ctx.row(process.scope)
    }
}

/// The pids with an endpoint (`<pid><suffix>`: a socket `.sock`, a sites
/// file `.sites`) in a tracer's private directory, ascending.
fn endpoints(dir: &Path, suffix: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let stem = name.as_bytes().strip_suffix(suffix.as_bytes())?;
            std::str::from_utf8(stem).ok()?.parse().ok()
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Connects to a tracer's endpoint without blocking: a Unix socket whose
/// accept queue is full (a process whose answering thread hangs, or that is
/// stopped) fails with EAGAIN at once instead of blocking leakwatch; std's
/// connect would wait forever.
pub(crate) fn connect(path: &Path) -> io::Result<UnixStream> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
    let flags = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: plain syscall; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_UNIX, flags, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw is a fresh descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: addr is initialised and len covers sun_family, the path and its NUL.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&raw const addr).cast::<libc::sockaddr>(),
            len as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// Asks every tracer after a run; their rows stamped with their source.
pub fn collect_all(
    sites: &mut [Box<dyn Sites>],
    ctx: &Context,
    sampled: &[Row],
    timeout: Duration,
) -> Collected {
    let mut all = Collected::default();
    for tracer in sites {
        let source = tracer.source();
        let mut got = tracer.collect(ctx, sampled, timeout);
        for row in got
            .rows
            .iter_mut()
            .filter(|r| matches!(r.tier, crate::store::Tier::Site | crate::store::Tier::Type))
        {
            row.site_source = Some(source);
        }
        all.rows.extend(got.rows);
        all.notes.extend(got.notes);
    }
    all
}
