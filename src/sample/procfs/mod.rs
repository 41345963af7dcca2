//! /proc through an injectable root: `ProcRoot` (a view of /proc, or of a
//! fake tree built by a test), `ProcDir` (one process's directory held
//! open) and `ProcError`. Parsing lives apart from file access, as in
//! procfs-core: `parse` turns bytes into the process types, `smaps` streams
//! the one large file; `process` reads a process in tiers, `cmdline` its
//! command line.
//!
//! A process read more than once is read through a `ProcDir`, its
//! directory held open, so that each read is one `openat` with no path
//! lookup and the handle itself tells a reused pid from the process it
//! named. A process read every tick (`ProcDir::hold_files`) also keeps the
//! files of the cheap tier open, read again from offset 0 with no `openat`
//! or `close` at all.

mod cmdline;
#[cfg(test)]
pub(crate) mod fake;
mod net;
mod parse;
mod process;
mod smaps;

use std::cell::OnceCell;
use std::collections::HashSet;
use std::fs;
use std::io::{self, ErrorKind};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;

pub use cmdline::Candidate;
pub use parse::{
    Mapping, ParseError, Rollup, Stat, Status, parse_smaps_rollup, parse_stat, parse_status,
    parse_status_into,
};
use parse::{parse_smaps_rollup_bytes, parse_stat_bytes, parse_u64};
pub use process::{Depth, ProcSample, read_process};
pub use smaps::{Smaps, SmapsParser, mapping_name};

/// Why a /proc read failed, kept apart as procfs-core does: a process that is
/// gone is an event in the data, permission denied needs a hint.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("process {pid} is gone ({path})")]
    Gone { pid: u32, path: PathBuf },
    #[error(
        "permission denied reading {path}; reading another user's memory maps needs \
         ptrace-read access (run as that user or as root, or lower kernel.yama.ptrace_scope)"
    )]
    PermissionDenied { pid: u32, path: PathBuf },
    #[error("cannot read {path}: {error}")]
    Io {
        pid: u32,
        path: PathBuf,
        error: io::Error,
    },
    #[error("cannot parse {path}: {error}")]
    Parse {
        pid: u32,
        path: PathBuf,
        error: ParseError,
    },
}

impl ProcError {
    fn from_io(pid: u32, path: PathBuf, error: io::Error) -> Self {
        match error.kind() {
            // ESRCH shows up as an "other" error when the task dies mid-read.
            ErrorKind::NotFound => ProcError::Gone { pid, path },
            _ if error.raw_os_error() == Some(libc::ESRCH) => ProcError::Gone { pid, path },
            ErrorKind::PermissionDenied => ProcError::PermissionDenied { pid, path },
            _ => ProcError::Io { pid, path, error },
        }
    }

    pub fn is_gone(&self) -> bool {
        matches!(self, ProcError::Gone { .. })
    }
}

/// A view of /proc, or of a fake /proc tree built by a test.
#[derive(Debug, Clone)]
pub struct ProcRoot {
    root: PathBuf,
    /// `stat()` of `/proc/PID/fd` gives the number of open fds as its size
    /// (Linux 6.2+): one call instead of listing the directory.
    fd_size_is_count: bool,
    /// The root is procfs, whose files a `pread` at 0 renders afresh and
    /// which fail once their process is gone: files may be held open
    /// (`ProcDir::hold_files`). A fake tree's plain files may not.
    procfs: bool,
}

impl Default for ProcRoot {
    fn default() -> Self {
        ProcRoot::new("/proc")
    }
}

/// Bytes a /proc file of the cheap tier is read into at first; `status` is
/// about 1.5 KiB.
const SMALL_FILE: usize = 4096;

impl ProcRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let fd_size_is_count = fd_size_counts(&root);
        let procfs = nix::sys::statfs::statfs(&root)
            .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC);
        ProcRoot {
            root,
            fd_size_is_count,
            procfs,
        }
    }

    /// The directory this view reads (`/proc`).
    pub fn dir(&self) -> &Path {
        &self.root
    }

    pub fn path(&self, pid: u32, file: &str) -> PathBuf {
        self.root.join(pid.to_string()).join(file)
    }

    /// Holds the process's directory open for reads through it. Out of file
    /// descriptors, the handle reads through paths instead (and cannot tell
    /// a reused pid by itself: `ProcDir::holds_identity`).
    pub fn open_dir(&self, pid: u32) -> Result<ProcDir, ProcError> {
        let path = self.root.join(pid.to_string());
        let opened = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(&path);
        let fd = match opened {
            Ok(dir) => Some(OwnedFd::from(dir)),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                if !path.exists() {
                    return Err(ProcError::Gone { pid, path });
                }
                None
            }
            Err(e) => return Err(ProcError::from_io(pid, path, e)),
        };
        Ok(ProcDir {
            pid,
            own_children: format!("task/{pid}/children"),
            path,
            fd,
            fd_size_is_count: self.fd_size_is_count,
            procfs: self.procfs,
            held: None,
        })
    }

    fn read(&self, pid: u32, file: &str, buf: &mut Vec<u8>) -> Result<usize, ProcError> {
        let path = self.path(pid, file);
        fs::File::open(&path)
            .and_then(|f| read_all(&f, buf, Reads::ToEnd))
            .map_err(|e| ProcError::from_io(pid, path, e))
    }

    /// Running (not exited, not a zombie awaiting its parent's wait).
    pub fn alive(&self, pid: u32) -> bool {
        self.stat(pid)
            .is_ok_and(|s| s.state != 'Z' && s.state != 'X')
    }

    pub fn status(&self, pid: u32) -> Result<Status, ProcError> {
        let mut buf = Vec::new();
        let n = self.read(pid, "status", &mut buf)?;
        let mut status = Status::default();
        parse_status_into(&buf[..n], &mut status).map_err(|error| ProcError::Parse {
            pid,
            path: self.path(pid, "status"),
            error,
        })?;
        Ok(status)
    }

    pub fn smaps_rollup(&self, pid: u32) -> Result<Rollup, ProcError> {
        self.open_dir(pid)?.smaps_rollup(&mut Vec::new())
    }

    pub fn stat(&self, pid: u32) -> Result<Stat, ProcError> {
        let mut buf = Vec::new();
        let n = self.read(pid, "stat", &mut buf)?;
        parse_stat_bytes(&buf[..n]).map_err(|error| ProcError::Parse {
            pid,
            path: self.path(pid, "stat"),
            error,
        })
    }

    /// Number of open file descriptors, `None` if it cannot be read.
    pub fn fd_count(&self, pid: u32) -> Option<u64> {
        self.open_dir(pid).ok()?.fd_count()
    }

    /// Direct children of `pid`: the union of every thread's `children` file,
    /// since each lists only the children forked by that thread.
    pub fn children(&self, pid: u32) -> Result<Vec<u32>, ProcError> {
        let dir = self.open_dir(pid)?;
        let mut children = Vec::new();
        dir.children(None, &mut Vec::new(), &mut children)?;
        Ok(children)
    }

    /// `pid` and all its descendants, parents before children. Processes that
    /// vanish during the walk are skipped.
    pub fn tree(&self, pid: u32) -> Vec<u32> {
        self.tree_without(pid, None)
    }

    /// As `tree`, leaving out `skip` and its descendants: leakwatch itself
    /// when the watched or attached process is one of its ancestors (a shell
    /// that started it), so leakwatch and its survivors are not counted twice.
    pub fn tree_without(&self, pid: u32, skip: Option<u32>) -> Vec<u32> {
        let mut out = vec![pid];
        let mut seen: HashSet<u32> = HashSet::from([pid]);
        let mut i = 0;
        while i < out.len() {
            if let Ok(children) = self.children(out[i]) {
                for child in children {
                    if Some(child) != skip && seen.insert(child) {
                        out.push(child);
                    }
                }
            }
            i += 1;
        }
        out
    }

    /// Per-mapping memory from `/proc/PID/smaps`, summed by mapping name:
    /// `[heap]`, `[stack]`, `[anon]` for anonymous regions, or the file's
    /// path. Sorted by name.
    pub fn mappings(&self, pid: u32) -> Result<Vec<Mapping>, ProcError> {
        Ok(self.smaps(pid)?.mappings)
    }

    /// One read of `/proc/PID/smaps`: the mappings and the rollup's figures.
    pub fn smaps(&self, pid: u32) -> Result<Smaps, ProcError> {
        self.open_dir(pid)?.smaps(&mut Vec::new())
    }
}

/// Whether `stat()` of `/proc/self/fd` counts our own descriptors (a
/// listing opens one more: its own). Asked a few times, so that another
/// thread opening a file meanwhile does not turn it off.
fn fd_size_counts(root: &Path) -> bool {
    let dir = root.join("self/fd");
    (0..3).any(|_| {
        let Ok(size) = fs::metadata(&dir).map(|m| m.len()) else {
            return false;
        };
        let Ok(listed) = fs::read_dir(&dir).map(|d| d.count() as u64) else {
            return false;
        };
        size > 0 && (listed == size || listed == size + 1)
    })
}

/// One process's directory in /proc, held open.
///
/// Files are opened relative to it (`openat`): no path lookup per read. And
/// the handle is the process's identity: once the process is gone (reaped)
/// every read through it fails, even when its pid has been reused by another
/// process, so a process read through a held directory needs no `stat` read
/// per tick to notice pid reuse. Without a descriptor to spare (EMFILE) it
/// reads through paths.
#[derive(Debug)]
pub struct ProcDir {
    pid: u32,
    path: PathBuf,
    fd: Option<OwnedFd>,
    /// `task/PID/children`: the main thread's children.
    own_children: String,
    fd_size_is_count: bool,
    procfs: bool,
    /// The cheap tier's files, held open after their first read
    /// (`hold_files`); `None`: opened for each read.
    held: Option<Held>,
}

/// The files of a process read every tick, each opened at its first read
/// and then held: a `pread` at offset 0 makes the kernel render a /proc
/// file afresh, so a held file costs one system call a read instead of
/// three (`openat`, `read`, `close`; an fd count by `fstat` instead of
/// `fstatat`; measured: docs/performance.md#held-proc-files). Each slot:
/// not tried yet, `Some(file)`, or `None` when it could not be held (no
/// descriptor to spare, or not opened). A held `status` or `children` keeps its
/// seq_file's buffer, 4 KiB of kernel memory (`children` is let go while
/// listings find new processes).
#[derive(Debug, Default)]
struct Held {
    status: OnceCell<Option<fs::File>>,
    children: OnceCell<Option<fs::File>>,
    /// `fd`, opened `O_PATH`: `fstat` counts the descriptors as `fstatat`
    /// does, without the lookup (and without read access to the directory).
    fd_dir: OnceCell<Option<OwnedFd>>,
}

/// Whether `fd` may stay open: below half the limit on open files, so a
/// large tree's held files never take the descriptors its directories,
/// samples.csv and the reports need.
fn spare(fd: &impl AsRawFd) -> bool {
    use nix::sys::resource::{Resource, getrlimit};
    getrlimit(Resource::RLIMIT_NOFILE)
        .is_ok_and(|(soft, _)| u64::try_from(fd.as_raw_fd()).is_ok_and(|n| n < soft / 2))
}

impl ProcDir {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Reads through a held directory: a reused pid cannot be mistaken for
    /// this process (else compare `stat`'s start time).
    pub fn holds_identity(&self) -> bool {
        self.fd.is_some()
    }

    /// Keeps `status`, the main thread's `children` and the `fd` directory
    /// open after their first read, for a process read every tick (a held
    /// file, like the held directory, fails once the process is gone).
    /// Nothing is held without a held directory (descriptors ran out), nor
    /// outside procfs.
    pub fn hold_files(mut self) -> Self {
        if self.fd.is_some() && self.procfs {
            self.held = Some(Held::default());
        }
        self
    }

    /// Closes the held `children` file (4 KiB of kernel memory each, the
    /// seq_file's buffer) while new processes are found by listing /proc.
    pub fn release_children(&mut self) {
        if let Some(held) = &mut self.held {
            held.children.take();
        }
    }

    /// Reads `name` through its held file in `slot`, opening (and, with a
    /// descriptor to spare, holding) it the first time; opens it for this
    /// read alone when files are not held.
    fn read_held(
        &self,
        slot: Option<&OnceCell<Option<fs::File>>>,
        name: &str,
        buf: &mut Vec<u8>,
        reads: Reads,
    ) -> Result<usize, ProcError> {
        if let Some(Some(file)) = slot.and_then(OnceCell::get) {
            return read_all(file, buf, reads).map_err(|e| self.error(name, e));
        }
        let file = self
            .open(name, OFlag::O_RDONLY)
            .map(fs::File::from)
            .map_err(|e| self.error(name, e))?;
        let n = read_all(&file, buf, reads).map_err(|e| self.error(name, e))?;
        if let Some(slot) = slot {
            let _ = slot.set(spare(&file).then_some(file));
        }
        Ok(n)
    }

    fn open(&self, name: &str, flags: OFlag) -> io::Result<OwnedFd> {
        match &self.fd {
            Some(dir) => nix::fcntl::openat(dir, name, flags | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(io::Error::from),
            None => fs::OpenOptions::new()
                .read(true)
                .custom_flags(flags.bits())
                .open(self.path.join(name))
                .map(OwnedFd::from),
        }
    }

    fn error(&self, name: &str, e: io::Error) -> ProcError {
        ProcError::from_io(self.pid, self.path.join(name), e)
    }

    fn parse_error(&self, name: &str, error: ParseError) -> ProcError {
        ProcError::Parse {
            pid: self.pid,
            path: self.path.join(name),
            error,
        }
    }

    /// Reads a whole file into `buf` (a work area, reused between calls);
    /// the file is `buf[..n]`.
    pub fn read(&self, name: &str, buf: &mut Vec<u8>) -> Result<usize, ProcError> {
        self.open(name, OFlag::O_RDONLY)
            .and_then(|fd| read_all(&fs::File::from(fd), buf, Reads::ToEnd))
            .map_err(|e| self.error(name, e))
    }

    /// As `read`, for a file the kernel writes in one piece (`status`,
    /// `stat`, `smaps_rollup`): a read short of the buffer is its end.
    fn read_single(&self, name: &str, buf: &mut Vec<u8>) -> Result<usize, ProcError> {
        self.open(name, OFlag::O_RDONLY)
            .and_then(|fd| read_all(&fs::File::from(fd), buf, Reads::Single))
            .map_err(|e| self.error(name, e))
    }

    /// `status` into `out`, reusing its name's allocation.
    pub fn status(&self, buf: &mut Vec<u8>, out: &mut Status) -> Result<(), ProcError> {
        let slot = self.held.as_ref().map(|h| &h.status);
        let n = self.read_held(slot, "status", buf, Reads::Single)?;
        parse_status_into(&buf[..n], out).map_err(|what| self.parse_error("status", what))
    }

    pub fn stat(&self, buf: &mut Vec<u8>) -> Result<Stat, ProcError> {
        let n = self.read_single("stat", buf)?;
        parse_stat_bytes(&buf[..n]).map_err(|what| self.parse_error("stat", what))
    }

    /// Number of open file descriptors: the size `stat()` gives the `fd`
    /// directory where the kernel counts them there, else a listing;
    /// `None` when neither can be read.
    pub fn fd_count(&self) -> Option<u64> {
        if self.fd_size_is_count {
            let size = match &self.fd {
                Some(dir) => self.fd_dir_size(dir),
                None => fs::metadata(self.path.join("fd")).ok().map(|m| m.len()),
            };
            // 0 is also what an older kernel says: then count.
            if let Some(n) = size.filter(|&n| n > 0) {
                return Some(n);
            }
        }
        fs::read_dir(self.path.join("fd"))
            .ok()
            .map(|d| d.count() as u64)
    }

    /// The `fd` directory's size: `fstat` of it held (`O_PATH`), else
    /// `fstatat` through the process's directory.
    fn fd_dir_size(&self, dir: &OwnedFd) -> Option<u64> {
        let size = |s: nix::sys::stat::FileStat| u64::try_from(s.st_size).ok();
        let slot = self.held.as_ref().map(|h| &h.fd_dir);
        match slot.and_then(OnceCell::get) {
            Some(Some(fd)) => return nix::sys::stat::fstat(fd).ok().and_then(size),
            Some(None) => {}
            None => {
                if let Some(slot) = slot {
                    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
                    let held = nix::fcntl::openat(dir, "fd", flags, Mode::empty())
                        .ok()
                        .filter(spare);
                    if let Some(fd) = slot.get_or_init(|| held) {
                        return nix::sys::stat::fstat(fd).ok().and_then(size);
                    }
                }
            }
        }
        nix::sys::stat::fstatat(dir, "fd", AtFlags::empty())
            .ok()
            .and_then(size)
    }

    /// The direct children: `threads` (from `status`) = 1 reads the main
    /// thread's `children` only; otherwise (or `None`) every thread's, since
    /// each lists only the children it forked. Sorted, without repeats.
    pub fn children(
        &self,
        threads: Option<u64>,
        buf: &mut Vec<u8>,
        out: &mut Vec<u32>,
    ) -> Result<(), ProcError> {
        out.clear();
        if threads == Some(1) {
            let slot = self.held.as_ref().map(|h| &h.children);
            let n = self.read_held(slot, &self.own_children, buf, Reads::ToEnd)?;
            out.extend(pids_in(&buf[..n]));
            return Ok(());
        }
        for tid in self.tasks()? {
            let name = format!("task/{tid}/children");
            match self.read(&name, buf) {
                Ok(n) => out.extend(pids_in(&buf[..n])),
                // A thread that exits between listing and read is not an error.
                Err(ProcError::Gone { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(())
    }

    /// The process's thread ids.
    fn tasks(&self) -> Result<Vec<u32>, ProcError> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
        let mut dir = self
            .open("task", flags)
            .and_then(|fd| nix::dir::Dir::from_fd(fd).map_err(io::Error::from))
            .map_err(|e| self.error("task", e))?;
        Ok(dir
            .iter()
            .filter_map(|entry| entry.ok()?.file_name().to_str().ok()?.parse().ok())
            .collect())
    }

    /// `smaps_rollup`: one walk of the process's page tables.
    pub fn smaps_rollup(&self, buf: &mut Vec<u8>) -> Result<Rollup, ProcError> {
        const NAME: &str = "smaps_rollup";
        let n = self.read_single(NAME, buf)?;
        let text = &buf[..n];
        // A process that has exited but not yet been reaped has no mm: the
        // file is empty. That is "gone" as far as memory goes.
        if text.iter().all(u8::is_ascii_whitespace) {
            return Err(self.error(NAME, io::Error::from(ErrorKind::NotFound)));
        }
        parse_smaps_rollup_bytes(text).map_err(|what| self.parse_error(NAME, what))
    }

    /// `smaps`, streamed through `buf`: one walk of the page tables gives
    /// both the mappings and the rollup's figures.
    pub fn smaps(&self, buf: &mut Vec<u8>) -> Result<Smaps, ProcError> {
        const NAME: &str = "smaps";
        let smaps = self
            .open(NAME, OFlag::O_RDONLY)
            .and_then(|fd| SmapsParser::read(&mut fs::File::from(fd), buf))
            .map_err(|e| self.error(NAME, e))?;
        if smaps.regions == 0 {
            // No mm (exited, not reaped): gone, as for smaps_rollup.
            return Err(self.error(NAME, io::Error::from(ErrorKind::NotFound)));
        }
        Ok(smaps)
    }
}

/// How a file's end is found.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reads {
    /// A read that returns 0: a file of records (`children`, `smaps`)
    /// comes a buffer of the kernel's at a time, so a short read is not
    /// its end.
    ToEnd,
    /// A read short of the buffer: a file the kernel renders whole before
    /// the first read (`single_open`: `status`, `stat`, `smaps_rollup`)
    /// hands out all of it to a buffer large enough, and the read that
    /// would return 0 is one system call per file for nothing.
    Single,
}

/// Reads `file` from its start to its end into `buf`, a work area reused
/// between calls (grown, never shrunk); returns the length read. `pread`
/// calls from offset 0: a held /proc file is rendered afresh by a read at
/// 0 (`seq_read_iter` starts over), and `read_to_end` on a `File` would
/// first ask its size and position (statx and lseek), two system calls
/// more per /proc file, which are empty there.
fn read_all(file: &fs::File, buf: &mut Vec<u8>, reads: Reads) -> io::Result<usize> {
    if buf.len() < SMALL_FILE {
        buf.resize(SMALL_FILE, 0);
    }
    let mut filled = 0;
    loop {
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match file.read_at(&mut buf[filled..], filled as u64) {
            Ok(0) => return Ok(filled),
            Ok(n) if reads == Reads::Single && filled + n < buf.len() => return Ok(filled + n),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The numbers of a `children` file.
fn pids_in(text: &[u8]) -> impl Iterator<Item = u32> + '_ {
    text.split(u8::is_ascii_whitespace)
        .filter_map(|p| parse_u64(p).and_then(|n| u32::try_from(n).ok()))
}

/// Raises the soft limit on open files to the hard limit: a held directory
/// per process of a large tree needs more than the usual 1024. Returns the
/// limit now in force.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

#[cfg(test)]
mod tests {
    use super::*;

    use fake::FakeProc;

    #[test]
    fn the_tree_walk_reads_the_children_of_every_thread() {
        let fake = FakeProc::new();
        // 10 has two threads: its main thread forked 20, its second 21.
        fake.process(10, 1, 'S', &[(10, &[20]), (11, &[21])])
            .process(20, 10, 'S', &[(20, &[30])])
            .process(21, 10, 'S', &[(21, &[])])
            .process(30, 20, 'S', &[(30, &[])]);
        let root = fake.root();
        assert_eq!(root.children(10).unwrap(), vec![20, 21]);
        assert_eq!(root.tree(10), vec![10, 20, 21, 30]);
        // leakwatch (20 here) and its descendants are left out of a watched tree.
        assert_eq!(root.tree_without(10, Some(20)), vec![10, 21]);
        // A child listed but gone by the time it is read is still listed;
        // reading it is where "gone" shows.
        fake.process(40, 1, 'S', &[(40, &[41])]);
        assert_eq!(root.tree(40), vec![40, 41]);
        assert!(root.stat(41).unwrap_err().is_gone());
    }

    #[test]
    fn zombies_are_not_alive_and_missing_processes_are_gone() {
        let fake = FakeProc::new();
        fake.process(10, 1, 'S', &[(10, &[])])
            .process(11, 1, 'Z', &[(11, &[])]);
        let root = fake.root();
        assert!(root.alive(10));
        assert!(!root.alive(11));
        assert!(!root.alive(12));
        assert_eq!(root.stat(10).unwrap().start_time, 1010);
    }

    #[test]
    fn mappings_are_summed_by_name() {
        let fake = FakeProc::new();
        fake.process(10, 1, 'S', &[(10, &[])]).file(
            10,
            "smaps",
            "00400000-00401000 r-xp 00000000 08:01 1234 /usr/bin/daemon\n\
             Size: 4 kB\nRss: 4 kB\nPss: 4 kB\nPrivate_Dirty: 0 kB\nAnonymous: 0 kB\nSwap: 0 kB\n\
             01000000-01100000 rw-p 00000000 00:00 0 [heap]\n\
             Size: 1024 kB\nRss: 1024 kB\nPss: 1024 kB\nPrivate_Dirty: 1024 kB\nAnonymous: 1024 kB\nSwap: 0 kB\n\
             7f0000000000-7f0000100000 rw-p 00000000 00:00 0 \n\
             Size: 1024 kB\nRss: 512 kB\nPss: 512 kB\nPrivate_Dirty: 512 kB\nAnonymous: 512 kB\nSwap: 0 kB\n\
             7f0000200000-7f0000300000 rw-p 00000000 00:00 0 \n\
             Size: 1024 kB\nRss: 256 kB\nPss: 256 kB\nPrivate_Dirty: 256 kB\nAnonymous: 256 kB\nSwap: 8 kB\n",
        );
        let maps = fake.root().mappings(10).unwrap();
        let names: Vec<&str> = maps.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, vec!["/usr/bin/daemon", "[anon]", "[heap]"]);
        let anon = &maps[1];
        assert_eq!((anon.regions, anon.rss_bytes), (2, 768 * 1024));
        assert_eq!(anon.swap_bytes, 8 * 1024);
        assert_eq!(maps[2].anon_bytes, 1024 * 1024);
    }

    #[test]
    fn a_held_directory_reads_the_cheap_tier_and_the_main_threads_children() {
        let fake = FakeProc::new();
        fake.process(10, 1, 'S', &[(10, &[20]), (11, &[21])]);
        for fd in 0..4 {
            std::fs::write(fake.path(10).join(format!("fd/{fd}")), "").unwrap();
        }
        let dir = fake.root().open_dir(10).unwrap();
        assert!(dir.holds_identity());
        let mut buf = Vec::new();
        let mut status = Status::default();
        dir.status(&mut buf, &mut status).unwrap();
        assert_eq!((status.name.as_str(), status.ppid), ("proc 10", 1));
        assert_eq!(status.threads, Some(2));
        assert_eq!(dir.stat(&mut buf).unwrap().start_time, 1010);
        // Not /proc: the fd directory's size is no count, so it is listed.
        assert_eq!(dir.fd_count(), Some(4));
        let mut kids = Vec::new();
        dir.children(Some(1), &mut buf, &mut kids).unwrap();
        assert_eq!(kids, vec![20]);
        dir.children(Some(2), &mut buf, &mut kids).unwrap();
        assert_eq!(kids, vec![20, 21]);
        let rollup = dir.smaps_rollup(&mut buf).unwrap();
        assert_eq!(rollup.pss_bytes, 150_000 * 1024);
    }

    #[test]
    fn a_held_directory_is_the_process_not_its_pid() {
        let fake = FakeProc::new();
        fake.process(10, 1, 'S', &[(10, &[])]);
        let dir = fake.root().open_dir(10).unwrap();
        // Reaped, and the pid reused by another process: the old handle
        // reads nothing of the new one.
        fake.remove(10).process(10, 1, 'S', &[(10, &[])]);
        let mut buf = Vec::new();
        assert!(dir.stat(&mut buf).unwrap_err().is_gone());
        assert!(fake.root().open_dir(10).unwrap().stat(&mut buf).is_ok());
        assert!(fake.root().open_dir(11).unwrap_err().is_gone());
    }

    /// Waits until `sleep` (spawned as `pid`) sleeps. `spawn` returns
    /// before the kernel renames the child at its exec, and the loader
    /// opens, maps and closes its libraries after that: its fd count and
    /// its mappings hold still once it sleeps (in clock_nanosleep, 230, or
    /// nanosleep, 35, by /proc/PID/syscall; a count read while the loader
    /// held libc open differed by one under load, and a fixed 100 ms wait
    /// read its rollup changing under a parallel test run).
    fn wait_until_asleep(pid: u32) {
        for _ in 0..400 {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let call = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
            let sleeping = matches!(call.split(' ').next(), Some("230" | "35"));
            if comm.trim_end() == "sleep" && sleeping {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("sleep ({pid}) did not fall asleep in 2 s");
    }

    /// Held files read a real process afresh each time, as opened files
    /// do, and fail once it is gone, as the held directory does.
    #[test]
    fn held_files_read_a_real_process_afresh_until_it_is_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let root = ProcRoot::default();
        let held = root.open_dir(pid).unwrap().hold_files();
        let (mut buf, mut status) = (Vec::new(), Status::default());
        let mut kids = Vec::new();
        wait_until_asleep(pid);
        for _ in 0..3 {
            held.status(&mut buf, &mut status).unwrap();
            assert_eq!(status.name, "sleep");
            assert_eq!(status.threads, Some(1));
            held.children(Some(1), &mut buf, &mut kids).unwrap();
            assert!(kids.is_empty());
            let opened = root.open_dir(pid).unwrap();
            assert_eq!(held.fd_count(), opened.fd_count());
        }
        let fresh = root.open_dir(pid).unwrap();
        let mut again = Status::default();
        fresh.status(&mut buf, &mut again).unwrap();
        assert_eq!(status, again);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(held.status(&mut buf, &mut status).unwrap_err().is_gone());
        assert_eq!(held.fd_count(), None);
    }

    #[test]
    fn the_fd_count_of_a_real_process_matches_a_listing() {
        let root = ProcRoot::default();
        let dir = root.open_dir(std::process::id()).unwrap();
        let counted = dir.fd_count().unwrap();
        let listed = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        // Other test threads open files meanwhile: close, not equal.
        assert!(counted.abs_diff(listed) <= 8, "{counted} vs {listed}");
    }

    /// smaps summed gives smaps_rollup's figures (kernel 6.18: exactly for
    /// whole pages; Pss lower by under 1 kB per region). A quiet process:
    /// `sleep`, read twice around the smaps read so it did not change.
    #[test]
    fn smaps_sums_are_the_rollup_of_a_real_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let root = ProcRoot::default();
        let pid = child.id();
        wait_until_asleep(pid);
        // Its PSS moves when other processes map or unmap the same libc
        // pages (the sleeps of tests running beside it: 1 KiB once in a
        // parallel run): read until nothing changed around the smaps read.
        let (mut before, mut smaps, mut after);
        let mut tries = 0;
        loop {
            before = root.smaps_rollup(pid).unwrap();
            smaps = root.smaps(pid).unwrap();
            after = root.smaps_rollup(pid).unwrap();
            tries += 1;
            if before == after || tries == 50 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            before, after,
            "the process or its sharers changed while read"
        );
        let sum = &smaps.rollup;
        assert_eq!(sum.rss_bytes, before.rss_bytes);
        assert_eq!(sum.shared_clean_bytes, before.shared_clean_bytes);
        assert_eq!(sum.shared_dirty_bytes, before.shared_dirty_bytes);
        assert_eq!(sum.private_clean_bytes, before.private_clean_bytes);
        assert_eq!(sum.private_dirty_bytes, before.private_dirty_bytes);
        assert_eq!(sum.swap_bytes, before.swap_bytes);
        assert!(sum.pss_bytes <= before.pss_bytes);
        assert!(before.pss_bytes - sum.pss_bytes < smaps.regions * 1024);
        if let Some(anon) = before.pss_anon_bytes {
            assert_eq!(sum.pss_anon_bytes, Some(anon), "{sum:?} vs {before:?}");
        }
    }
}
