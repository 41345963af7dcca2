//! `run --native-sites`: which C, C++ and Rust call stacks hold the memory.
//! The command runs with the sampling allocator shim preloaded
//! (`libleakwatch_shim.so`, the workspace's `shim/` crate, built into the
//! leakwatch binary: [`shim`]); every process it starts inherits it,
//! detached daemons and forked workers included. Each process keeps its live sampled bytes
//! by stack in a file of D, `<pid>.sites` ([`file`]); after each run's deep sample leakwatch
//! reads them and names the frames itself ([`symbols`]); the stacks become site rows
//! ([`rows`], source `native`), fitted and judged as Python sites are.
//!
//! It plugs into the run driver as a [`Sites`] tracer ([`NativeTracer`]):
//! [`NativeTracer::prepare`] once (finds the shim, creates the private
//! directory D, mode 0700); `env` on every run's command (`LD_PRELOAD`,
//! `LEAKWATCH_NATIVE_DIR`, `LEAKWATCH_NATIVE_INTERVAL`); `collect` after
//! each run; Drop removes D.

pub mod file;
pub mod inject;
pub mod rows;
mod shim;
pub mod symbols;

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use file::Snapshot;
use file::layout::{AT_STOP, MAX_DIR, SUFFIX};

use super::enter::Ids;
use super::{Collected, Sites};
use crate::sample::Context;
use crate::store::{Row, SiteSource};

/// The shim's file name, beside the leakwatch binary.
pub const SHIM_FILE: &str = "libleakwatch_shim.so";
/// What every name of the shim starts with, in a process' maps (the copy
/// written out of the binary is `libleakwatch_shim-<hash>.so`).
pub const SHIM_STEM: &str = "libleakwatch_shim";
/// Overrides where the shim is (an installed leakwatch, a test).
pub const ENV_SHIM: &str = "LEAKWATCH_SHIM";
/// Names D for the shim; without it the shim stays idle.
pub const ENV_DIR: &str = "LEAKWATCH_NATIVE_DIR";
/// The mean sampling interval in bytes.
pub const ENV_INTERVAL: &str = "LEAKWATCH_NATIVE_INTERVAL";
/// The default `--native-interval`, from the trade-off between accuracy
/// (`benches/harness/native_accuracy.sh`, `native_false_leaks.sh`) and cost
/// (`native_shim.py`), measured: docs/native-sites.md. A stack's growth in a
/// run is estimated from a Poisson count (relative error 1/√(growth /
/// interval)) that accumulates run after run (a native site is judged as a
/// random walk, `Thresholds::cumulative_errors`): at 128 KiB a 1 MiB/run
/// stack's error is about twice as wide and fewer slow leaks are found, for
/// a cost that hardly differs. The shim starts no thread: one would put
/// glibc's malloc in its multi-threaded mode. At 512 KiB (tcmalloc's and
/// jemalloc's range) a 1 MiB/run stack gets 20 samples in 10 runs: too coarse.
pub const DEFAULT_INTERVAL_BYTES: u64 = 64 * 1024;

/// Setting up `--native-sites` failed. Each message names the path and the fix.
#[derive(Debug, thiserror::Error)]
pub enum NativeSitesError {
    #[error(
        "{ENV_SHIM}={path} names no file: point it at a built {SHIM_FILE} (`cargo build \
         --release -p leakwatch-shim` in the leakwatch repository), or unset it to use the shim \
         built into leakwatch"
    )]
    ShimOverride { path: PathBuf },
    #[error(
        "this leakwatch was built without its allocator shim (shim/ was missing or did not \
         compile: see the build's warning) and there is no {beside}: install leakwatch from its \
         repository with `cargo install --locked --path .`, which builds the shim in, or build \
         it (`cargo build --release -p leakwatch-shim`) and set {ENV_SHIM} to \
         target/release/{SHIM_FILE}"
    )]
    ShimMissing { beside: PathBuf },
    #[error(
        "cannot use {path} for the shim: {why} (or set TMPDIR to a directory of yours, or \
         {ENV_SHIM} to a built {SHIM_FILE})"
    )]
    ShimCache { path: PathBuf, why: String },
    #[error(
        "cannot create the --native-sites directory in {parent}: {source}; set TMPDIR to a \
         writable directory"
    )]
    CreateDir { parent: PathBuf, source: io::Error },
    #[error(transparent)]
    Inject(#[from] inject::InjectError),
    #[error(
        "the --native-sites directory {dir} is too long for the shim ({len} of at most \
         {MAX_DIR} bytes); set TMPDIR to a shorter directory such as /tmp"
    )]
    PathTooLong { dir: PathBuf, len: usize },
    #[error(
        "process {pid} runs as uid {uid}, and the shim in it keeps its file in {dir}, which leakwatch \
         cannot give to that user: {source}; set TMPDIR to a local directory such as /tmp, or \
         run leakwatch as uid {uid}"
    )]
    HandDir {
        pid: u32,
        uid: u32,
        dir: PathBuf,
        source: io::Error,
    },
}

/// The private directory D of one session, where the shim keeps its files.
#[derive(Debug)]
pub struct NativeSites {
    dir: PathBuf,
    shim: PathBuf,
    interval_bytes: u64,
    /// The user D was handed to ([`NativeSites::hand_to`]), whose
    /// filesystem rights leakwatch opens the files in D with.
    owner: Option<Ids>,
}

/// This thread's filesystem rights switched to `ids` until dropped
/// (setfsuid(2): per thread, and it leaves root's file capabilities only
/// while the uid is 0).
struct FsRights {
    before: Ids,
}

impl FsRights {
    fn assume(ids: Ids) -> FsRights {
        // SAFETY: plain system calls on this thread's credentials; each
        // returns the previous id.
        let before = unsafe {
            Ids {
                gid: libc::setfsgid(ids.gid) as u32,
                uid: libc::setfsuid(ids.uid) as u32,
            }
        };
        FsRights { before }
    }
}

impl Drop for FsRights {
    fn drop(&mut self) {
        // SAFETY: as above, back to what they were.
        unsafe {
            libc::setfsuid(self.before.uid);
            libc::setfsgid(self.before.gid);
        }
    }
}

impl NativeSites {
    /// Finds the shim and creates D in the temporary directory.
    pub fn prepare(interval_bytes: u64) -> Result<NativeSites, NativeSitesError> {
        let shim = shim::find()?;
        NativeSites::prepare_in(&std::env::temp_dir(), shim, interval_bytes)
    }

    pub fn prepare_in(
        parent: &Path,
        shim: PathBuf,
        interval_bytes: u64,
    ) -> Result<NativeSites, NativeSitesError> {
        let dir = create_private_dir(parent)?;
        let sites = NativeSites {
            dir,
            shim,
            interval_bytes,
            owner: None,
        };
        let len = sites.dir.as_os_str().len();
        if len > MAX_DIR {
            return Err(NativeSitesError::PathTooLong {
                dir: sites.dir.clone(),
                len,
            });
        }
        Ok(sites)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Gives D to the user `pid` runs as, when leakwatch runs as root and
    /// that user is another (root attached to another user's process): the
    /// shim there creates its file in D with that user's rights. D stays
    /// 0700, and leakwatch then opens the files in D with that user's
    /// filesystem rights and without following a link, so that a path the
    /// user replaced leads nowhere they could not read themselves. Not root:
    /// the injection refuses another user's process first (ptrace), with its
    /// reason.
    pub fn hand_to(&mut self, pid: u32) -> Result<(), NativeSitesError> {
        let Some(ids) = Ids::of(pid) else {
            // Gone: the injection says so next.
            return Ok(());
        };
        // SAFETY: no preconditions.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 || ids.uid == euid {
            return Ok(());
        }
        std::os::unix::fs::chown(&self.dir, Some(ids.uid), Some(ids.gid)).map_err(|source| {
            NativeSitesError::HandDir {
                pid,
                uid: ids.uid,
                dir: self.dir.clone(),
                source,
            }
        })?;
        self.owner = Some(ids);
        Ok(())
    }

    /// Opens process `pid`'s file in D (`write`: to set its stop flag),
    /// with the rights of the user D was handed to: a regular file, not
    /// through a link, and never waiting (a FIFO put in its place would
    /// block an open for reading).
    fn open(&self, pid: u32, write: bool) -> io::Result<fs::File> {
        let _rights = self.owner.map(FsRights::assume);
        let file = fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.file_of(pid))?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(file)
    }

    fn file_of(&self, pid: u32) -> PathBuf {
        self.dir.join(format!("{pid}{SUFFIX}"))
    }

    pub fn interval_bytes(&self) -> u64 {
        self.interval_bytes
    }

    /// The variables to set on the command: the shim first in `LD_PRELOAD`
    /// (before `existing_preload`, which is kept), D and the interval.
    pub fn env(&self, existing_preload: Option<&OsStr>) -> Vec<(OsString, OsString)> {
        let mut preload = self.shim.clone().into_os_string();
        if let Some(existing) = existing_preload.filter(|p| !p.is_empty()) {
            preload.push(" ");
            preload.push(existing);
        }
        vec![
            ("LD_PRELOAD".into(), preload),
            (ENV_DIR.into(), self.dir.clone().into_os_string()),
            (ENV_INTERVAL.into(), self.interval_bytes.to_string().into()),
        ]
    }

    /// The pids with a sites file in D, ascending.
    pub fn endpoints(&self) -> Vec<u32> {
        super::endpoints(&self.dir, SUFFIX)
    }

    /// Removes the file of `pid` if that process has exited.
    pub fn forget_if_gone(&self, pid: u32) {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_file(self.file_of(pid));
        }
    }

    /// Reads process `pid`'s live sampled stacks from its file; the error
    /// is a sentence for a note.
    pub fn read(&self, pid: u32) -> Result<Snapshot, String> {
        let path = self.file_of(pid);
        let file = self
            .open(pid, false)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        file::read(&file, pid)
            .map_err(|e| format!("{} is not the shim's sites file: {e}", path.display()))
    }
}

/// `--native-sites` as the run driver holds it: the shim's directory and
/// what this session has named and written so far.
#[derive(Debug)]
pub struct NativeTracer {
    sites: NativeSites,
    session: rows::NativeSession,
}

impl NativeTracer {
    /// Finds the shim and creates D (see [`NativeSites::prepare`]),
    /// sampling once per `interval_bytes` on average.
    pub fn prepare(interval_bytes: u64) -> Result<NativeTracer, NativeSitesError> {
        Ok(NativeTracer {
            sites: NativeSites::prepare(interval_bytes)?,
            session: rows::NativeSession::default(),
        })
    }
}

impl Sites for NativeTracer {
    fn source(&self) -> SiteSource {
        SiteSource::Native
    }

    /// `LD_PRELOAD` with the shim first, then the one leakwatch has.
    fn env(&self) -> Vec<(OsString, OsString)> {
        self.sites.env(std::env::var_os("LD_PRELOAD").as_deref())
    }

    /// Reads the files: no process is asked, so nothing waits (`_timeout`).
    fn collect(&mut self, ctx: &Context, sampled: &[Row], _timeout: Duration) -> Collected {
        let (rows, notes) = self.session.collect(&self.sites, ctx, sampled);
        Collected { rows, notes }
    }
}

/// `attach --native-sites PID`: the shim loaded into a running process
/// ([`inject`]), asked for its sites every [`ATTACH_EVERY`] of the session
/// (and at its first and last sample). Its growth counts from the attach:
/// the shim's tables start empty then.
#[derive(Debug)]
pub struct NativeAttached {
    sites: NativeSites,
    session: rows::NativeSession,
    pub pid: u32,
    pub injected: inject::Injected,
    last: Option<Instant>,
}

/// How often `attach --native-sites` reads the sites: each reading is a
/// point of every site's series (a file read and its frames named by
/// leakwatch: milliseconds), and a few seconds apart is enough for growth
/// over minutes and hours.
pub const ATTACH_EVERY: Duration = Duration::from_secs(2);

impl NativeAttached {
    /// Finds the shim, creates D and loads the shim into `pid`.
    pub fn inject(pid: u32, interval_bytes: u64) -> Result<NativeAttached, NativeSitesError> {
        let mut sites = NativeSites::prepare(interval_bytes)?;
        sites.hand_to(pid)?;
        let injected = inject::inject(pid, &sites.shim, &sites.dir, interval_bytes)?;
        Ok(NativeAttached {
            sites,
            session: rows::NativeSession::default(),
            pid,
            injected,
            last: None,
        })
    }

    /// Whether this sample asks for the sites (`edge`: the first or last).
    pub fn due(&self, edge: bool) -> bool {
        edge || self.last.is_none_or(|t| t.elapsed() >= ATTACH_EVERY)
    }

    /// The sites of every process of the tree that has the shim (the target
    /// and the children it forked since), as rows of this sample.
    pub fn collect(&mut self, ctx: &Context, sampled: &[Row]) -> Collected {
        self.last = Some(Instant::now());
        let (mut rows, notes) = self.session.collect(&self.sites, ctx, sampled);
        for row in &mut rows {
            row.site_source = Some(SiteSource::Native);
        }
        Collected { rows, notes }
    }

    /// At the end: the shim in each process stops sampling (its hooks stay,
    /// forwarding to glibc: a process cannot unload them safely), within
    /// 200 ms of the stop flag set in its file (the shim looks that often).
    pub fn stop(&self) {
        for pid in self.sites.endpoints() {
            if let Ok(file) = self.sites.open(pid, true) {
                let _ = file.write_all_at(&1u64.to_ne_bytes(), AT_STOP as u64);
            }
        }
    }
}

impl Drop for NativeSites {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Creates a fresh directory `leakwatch-native-<pid>-<random>` in `parent`,
/// mode 0700 (nobody else may read the files or plant one), absolute.
fn create_private_dir(parent: &Path) -> Result<PathBuf, NativeSitesError> {
    use std::hash::{BuildHasher, Hasher};
    let fail = |source| NativeSitesError::CreateDir {
        parent: parent.to_path_buf(),
        source,
    };
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..32 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let dir = parent.join(format!(
            "leakwatch-native-{}-{:016x}",
            std::process::id(),
            hasher.finish()
        ));
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return fs::canonicalize(&dir).map_err(fail),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(fail(e)),
        }
    }
    Err(fail(last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn prepare_makes_a_private_dir_and_env_preloads_the_shim_first() {
        let parent = tempfile::tempdir_in("/tmp").unwrap();
        let sites =
            NativeSites::prepare_in(parent.path(), PathBuf::from("/x/libshim.so"), 4096).unwrap();
        let dir = sites.dir().to_path_buf();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let env = sites.env(Some(OsStr::new("/other.so")));
        assert_eq!(env[0].1, "/x/libshim.so /other.so");
        assert_eq!(env[1].1, dir.as_os_str());
        assert_eq!(env[2].1, "4096");
        assert_eq!(sites.env(Some(OsStr::new("")))[0].1, "/x/libshim.so");
        drop(sites);
        assert!(!dir.exists());
    }

    /// A FIFO or a link in place of a process' file is refused at once:
    /// never waited on, never followed.
    #[test]
    fn a_fifo_or_a_link_in_place_of_a_sites_file_is_refused_at_once() {
        let parent = tempfile::tempdir_in("/tmp").unwrap();
        let sites =
            NativeSites::prepare_in(parent.path(), PathBuf::from("/x/libshim.so"), 4096).unwrap();
        let fifo = sites.file_of(41);
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = sites.read(41).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
        let target = parent.path().join("elsewhere");
        fs::write(&target, b"lwsites").unwrap();
        std::os::unix::fs::symlink(&target, sites.file_of(42)).unwrap();
        let err = sites.read(42).unwrap_err();
        assert!(err.contains("cannot open"), "{err}");
    }

    #[test]
    fn a_missing_shim_names_the_fix() {
        let err = NativeSitesError::ShimMissing {
            beside: PathBuf::from("/opt/leakwatch/libleakwatch_shim.so"),
        };
        let text = err.to_string();
        assert!(
            text.contains("cargo install --locked --path .")
                && text.contains("cargo build --release -p leakwatch-shim")
                && text.contains(ENV_SHIM),
            "{text}"
        );
    }
}
