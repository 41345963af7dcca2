//! The only stage that touches /proc: read processes in tiers, follow their
//! trees, drive `run` and `attach`, and hand rows to the store as they are
//! taken.
//!
//! Rooms by job, each importing only those above it in this list:
//! - `procfs`: /proc through an injectable root — file access, parsers, a
//!   process read in tiers, command lines; a fake /proc for tests.
//! - `rows`: the clock, and the rows built from what was read.
//! - `tree`: the process tree `attach` follows at the kernel's floor.
//! - `lifecycle`: what `run` starts and how it ends — the subreaper and
//!   signals, the session's confinement and record, the guardian.
//! - `targets`: what `attach` follows when it is not one PID (a name, a
//!   cgroup, a unit).
//! - `sites`: allocation sites from tracers inside the processes, behind
//!   one trait (`--py-sites`).
//! - `heap`: the heap a runtime itself counts (a JVM's hsperfdata), read
//!   with each batch.
//! - `prometheus`: Prometheus as a source (HTTP), for `analyze`.
//! - `run`, `attach`: the drivers.
//!
//! This file holds what both drivers share: sampling a scope's processes,
//! the errors that end sampling, and how it ended.

mod attach;
pub mod heap;
mod lifecycle;
pub mod procfs;
pub mod prometheus;
mod rows;
mod run;
pub mod sites;
mod targets;
mod tree;

pub use attach::{AttachPlan, attach, check_target};
pub use lifecycle::guardian;
pub use lifecycle::reaper::Interrupt;
pub use rows::{Clock, Context};
pub use run::{Prepared, RunPlan, prepare, run};
pub use targets::{Target, TargetError};
pub use tree::Tree;

use crate::store::{Row, Scope};
use procfs::{Depth, ProcError, ProcRoot, read_process};
use rows::{mapping_row, process_row};

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
                out.rows.push(process_row(ctx, scope, &s));
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
    #[error(
        "command '{0}' not found: it is one argument holding shell syntax, and leakwatch runs \
         the command directly, with no shell; ask for one (-- sh -c '{0}'), or leakwatch's own \
         output would be piped or redirected too"
    )]
    ShellLine(String),
    #[error("command '{0}' does not exist; check the path")]
    CommandMissing(String),
    #[error("command '{0}' is a directory; give the program to run in it")]
    CommandIsDirectory(String),
    #[error("command '{0}' is not executable; try `chmod +x {0}`")]
    CommandNotExecutable(String),
    #[error("PID {pid} ({name}) is a kernel thread: it has no user memory to sample")]
    KernelThread { pid: u32, name: String },
    #[error("--py-sites: {0}")]
    PySites(sites::python::PySitesError),
    #[error("--native-sites: {0}")]
    NativeSites(sites::native::NativeSitesError),
    #[error("--py-sites: {0}")]
    PyAttach(sites::python::attach::PyAttachError),
    #[error(transparent)]
    NodePreload(heap::node::PreloadError),
    #[error(transparent)]
    Metrics(heap::MetricsUrlError),
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
    #[error("{0}")]
    Heap(String),
}

/// How sampling ended.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub interrupted: bool,
    /// Things the user should know: a watched process that exited, a deep
    /// read refused, survivors that needed KILL.
    pub notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    use procfs::fake::{FakeProc, HEAP_SMAPS};

    /// At the first and last sample of `run` and of a group target, one
    /// read of `smaps` gives the row's deep figures and the mappings: no
    /// `smaps_rollup` read (the fake has an empty one, which would be
    /// "gone"), so one page walk, not two.
    #[test]
    fn a_scope_sampled_with_mappings_walks_each_process_once() {
        let fake = FakeProc::new();
        fake.process(10, 1, 'S', &[(10, &[])]);
        fake.file(10, "smaps_rollup", "");
        fake.file(10, "smaps", HEAP_SMAPS);
        let ctx = Clock::new().context(Some(1));
        let scope = crate::store::Scope::Survivors;
        let root = fake.root();
        let scoped = sample_scope(&root, &ctx, scope, &[10], Depth::Mappings);
        assert!(scoped.unreadable.is_empty(), "{:?}", scoped.unreadable);
        assert_eq!(scoped.rows.len(), 1);
        assert_eq!(scoped.rows[0].tier, crate::store::Tier::Deep);
        assert_eq!(scoped.rows[0].pss_bytes, Some(1000 * 1024));
        assert_eq!(scoped.rows[0].pss_anon_bytes, Some(1000 * 1024));
        assert_eq!(scoped.mapping_rows.len(), 1);
        assert_eq!(scoped.mapping_rows[0].comm, "[heap]");
        assert_eq!(scoped.mapping_rows[0].rss_bytes, Some(1024 * 1024));
        // At `Rollup` the same process reads smaps_rollup (here: gone).
        let scoped = sample_scope(&root, &ctx, scope, &[10], Depth::Rollup);
        assert!(scoped.rows.is_empty() && scoped.mapping_rows.is_empty());
    }
}
