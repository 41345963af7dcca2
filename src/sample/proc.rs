//! Readers for the /proc files leakwatch samples, through an injectable root.
//!
//! The hot files (`status`, `smaps_rollup`, `stat`) are parsed by hand: they are
//! read every tick for every process of a tree, and a parser that only looks for
//! the dozen keys we keep costs a fraction of the kernel's own read time (see
//! `benches/sampler.rs`). Per-mapping `smaps`, read rarely, goes through procfs.

use std::fs;
use std::io::{self, ErrorKind, Read};
use std::path::PathBuf;

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
    #[error("cannot parse {path}: {what}")]
    Parse {
        pid: u32,
        path: PathBuf,
        what: String,
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

/// Cheap tier: `/proc/PID/status`. All sizes in bytes (the file says kB).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub name: String,
    pub ppid: u32,
    pub rss_bytes: Option<u64>,
    pub anon_bytes: Option<u64>,
    pub file_bytes: Option<u64>,
    pub shmem_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub hwm_bytes: Option<u64>,
    pub threads: Option<u64>,
}

/// Deep tier: `/proc/PID/smaps_rollup`. All sizes in bytes (the file says kB).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rollup {
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    pub pss_anon_bytes: Option<u64>,
    pub pss_file_bytes: Option<u64>,
    pub pss_shmem_bytes: Option<u64>,
    pub shared_clean_bytes: u64,
    pub shared_dirty_bytes: u64,
    pub private_clean_bytes: u64,
    pub private_dirty_bytes: u64,
    pub swap_bytes: u64,
    pub swap_pss_bytes: Option<u64>,
}

impl Rollup {
    /// Unique set size: pages only this process maps.
    pub fn uss_bytes(&self) -> u64 {
        self.private_clean_bytes + self.private_dirty_bytes
    }

    pub fn shared_bytes(&self) -> u64 {
        self.shared_clean_bytes + self.shared_dirty_bytes
    }
}

/// The fields of `/proc/PID/stat` that identify a process over time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub comm: String,
    /// `R`, `S`, `D`, `Z` (zombie: exited, not yet reaped) …
    pub state: char,
    pub ppid: u32,
    /// Start time in clock ticks since boot: with the pid, it names one process
    /// even when the pid is reused.
    pub start_time: u64,
}

/// A view of /proc, or of a fake /proc tree built by a test.
#[derive(Debug, Clone)]
pub struct ProcRoot {
    root: PathBuf,
}

impl Default for ProcRoot {
    fn default() -> Self {
        ProcRoot::new("/proc")
    }
}

impl ProcRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ProcRoot { root: root.into() }
    }

    pub fn path(&self, pid: u32, file: &str) -> PathBuf {
        self.root.join(pid.to_string()).join(file)
    }

    fn read(&self, pid: u32, file: &str) -> Result<String, ProcError> {
        let path = self.path(pid, file);
        // /proc files report size 0, so fs::read_to_string would start with a
        // tiny buffer and issue several reads; each of these files fits in 4 KiB.
        let mut text = String::with_capacity(4096);
        fs::File::open(&path)
            .and_then(|mut f| f.read_to_string(&mut text))
            .map_err(|e| ProcError::from_io(pid, path, e))?;
        Ok(text)
    }

    /// Running (not exited, not a zombie awaiting its parent's wait).
    pub fn alive(&self, pid: u32) -> bool {
        self.stat(pid)
            .is_ok_and(|s| s.state != 'Z' && s.state != 'X')
    }

    pub fn status(&self, pid: u32) -> Result<Status, ProcError> {
        let text = self.read(pid, "status")?;
        parse_status(&text).map_err(|what| ProcError::Parse {
            pid,
            path: self.path(pid, "status"),
            what,
        })
    }

    pub fn smaps_rollup(&self, pid: u32) -> Result<Rollup, ProcError> {
        let text = self.read(pid, "smaps_rollup")?;
        // A process that has exited but not yet been reaped has no mm: the file
        // is empty. That is "gone" as far as memory goes.
        if text.trim().is_empty() {
            return Err(ProcError::Gone {
                pid,
                path: self.path(pid, "smaps_rollup"),
            });
        }
        parse_smaps_rollup(&text).map_err(|what| ProcError::Parse {
            pid,
            path: self.path(pid, "smaps_rollup"),
            what,
        })
    }

    pub fn stat(&self, pid: u32) -> Result<Stat, ProcError> {
        let text = self.read(pid, "stat")?;
        parse_stat(&text).map_err(|what| ProcError::Parse {
            pid,
            path: self.path(pid, "stat"),
            what,
        })
    }

    /// Number of open file descriptors, `None` if the directory is not readable.
    pub fn fd_count(&self, pid: u32) -> Option<u64> {
        let dir = fs::read_dir(self.path(pid, "fd")).ok()?;
        Some(dir.count() as u64)
    }

    /// Direct children of `pid`: the union of every thread's `children` file,
    /// since each lists only the children forked by that thread.
    pub fn children(&self, pid: u32) -> Result<Vec<u32>, ProcError> {
        let task_dir = self.path(pid, "task");
        let tasks = fs::read_dir(&task_dir).map_err(|e| ProcError::from_io(pid, task_dir, e))?;
        let mut children = Vec::new();
        for task in tasks.flatten() {
            let path = task.path().join("children");
            match fs::read_to_string(&path) {
                Ok(text) => children.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                ),
                // A thread that exits between readdir and read is not an error.
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(ProcError::from_io(pid, path, e)),
            }
        }
        children.sort_unstable();
        children.dedup();
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
        let mut i = 0;
        while i < out.len() {
            if let Ok(children) = self.children(out[i]) {
                for child in children {
                    if Some(child) != skip && !out.contains(&child) {
                        out.push(child);
                    }
                }
            }
            i += 1;
        }
        out
    }

    /// Per-mapping memory from `/proc/PID/smaps` (parsed by procfs), summed
    /// by mapping name: `[heap]`, `[stack]`, `[anon]` for anonymous regions,
    /// or the file's path. Sorted by name.
    pub fn mappings(&self, pid: u32) -> Result<Vec<Mapping>, ProcError> {
        use procfs::FromBufRead;
        use procfs::process::MMapPath;
        let path = self.path(pid, "smaps");
        let file = fs::File::open(&path).map_err(|e| ProcError::from_io(pid, path.clone(), e))?;
        let maps =
            procfs::process::MemoryMaps::from_buf_read(io::BufReader::new(file)).map_err(|e| {
                ProcError::Parse {
                    pid,
                    path: path.clone(),
                    what: e.to_string(),
                }
            })?;
        let mut by_name: std::collections::BTreeMap<String, Mapping> = Default::default();
        for map in maps.0 {
            let name = match &map.pathname {
                MMapPath::Path(p) => p.display().to_string(),
                MMapPath::Heap => "[heap]".into(),
                MMapPath::Stack | MMapPath::TStack(_) => "[stack]".into(),
                MMapPath::Anonymous => "[anon]".into(),
                MMapPath::Vdso => "[vdso]".into(),
                MMapPath::Vvar => "[vvar]".into(),
                MMapPath::Vsyscall => "[vsyscall]".into(),
                MMapPath::Vsys(key) => format!("[shm {key}]"),
                MMapPath::Rollup => "[rollup]".into(),
                MMapPath::Other(o) => o.clone(),
            };
            let get = |k: &str| map.extension.map.get(k).copied().unwrap_or(0);
            let entry = by_name.entry(name.clone()).or_insert_with(|| Mapping {
                name,
                ..Mapping::default()
            });
            entry.regions += 1;
            entry.size_bytes += map.address.1.saturating_sub(map.address.0);
            entry.rss_bytes += get("Rss");
            entry.pss_bytes += get("Pss");
            entry.anon_bytes += get("Anonymous");
            entry.private_dirty_bytes += get("Private_Dirty");
            entry.swap_bytes += get("Swap");
        }
        Ok(by_name.into_values().collect())
    }
}

/// One mapping name's memory in one process (bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mapping {
    pub name: String,
    pub regions: u64,
    pub size_bytes: u64,
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    pub anon_bytes: u64,
    pub private_dirty_bytes: u64,
    pub swap_bytes: u64,
}

/// Reads the value of a `Key:   1234 kB` line in bytes.
fn kb_value(rest: &str) -> Option<u64> {
    let mut parts = rest.split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => Some(value * 1024),
        None => Some(value),
        Some(_) => None,
    }
}

/// Parses `/proc/PID/status`; only the keys leakwatch keeps.
pub fn parse_status(text: &str) -> Result<Status, String> {
    let mut status = Status::default();
    let mut saw_name = false;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        match key {
            "Name" => {
                status.name = rest.trim().to_string();
                saw_name = true;
            }
            "PPid" => status.ppid = rest.trim().parse().unwrap_or(0),
            "VmRSS" => status.rss_bytes = kb_value(rest),
            "RssAnon" => status.anon_bytes = kb_value(rest),
            "RssFile" => status.file_bytes = kb_value(rest),
            "RssShmem" => status.shmem_bytes = kb_value(rest),
            "VmSwap" => status.swap_bytes = kb_value(rest),
            "VmHWM" => status.hwm_bytes = kb_value(rest),
            "Threads" => status.threads = rest.trim().parse().ok(),
            _ => {}
        }
    }
    if saw_name {
        Ok(status)
    } else {
        Err("no Name: line".to_string())
    }
}

/// Parses `/proc/PID/smaps_rollup` (the header line is skipped).
pub fn parse_smaps_rollup(text: &str) -> Result<Rollup, String> {
    let mut r = Rollup::default();
    let mut saw_pss = false;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let Some(value) = kb_value(rest) else {
            continue;
        };
        match key {
            "Rss" => r.rss_bytes = value,
            "Pss" => {
                r.pss_bytes = value;
                saw_pss = true;
            }
            "Pss_Anon" => r.pss_anon_bytes = Some(value),
            "Pss_File" => r.pss_file_bytes = Some(value),
            "Pss_Shmem" => r.pss_shmem_bytes = Some(value),
            "Shared_Clean" => r.shared_clean_bytes = value,
            "Shared_Dirty" => r.shared_dirty_bytes = value,
            "Private_Clean" => r.private_clean_bytes = value,
            "Private_Dirty" => r.private_dirty_bytes = value,
            "Swap" => r.swap_bytes = value,
            "SwapPss" => r.swap_pss_bytes = Some(value),
            _ => {}
        }
    }
    if saw_pss {
        Ok(r)
    } else {
        Err("no Pss: line".to_string())
    }
}

/// Parses `/proc/PID/stat`. The command name may hold spaces and parentheses,
/// so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Result<Stat, String> {
    let open = text.find('(').ok_or("no '(' before the command name")?;
    let close = text.rfind(')').ok_or("no ')' after the command name")?;
    let comm = text.get(open + 1..close).unwrap_or_default().to_string();
    // After ")": state(3) ppid(4) ... starttime(22); index 0 here is field 3.
    let fields: Vec<&str> = text
        .get(close + 1..)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let field = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("field {n} missing or not a number"))
    };
    let state = fields
        .first()
        .and_then(|f| f.chars().next())
        .ok_or("no state field")?;
    Ok(Stat {
        comm,
        state,
        ppid: field(4)? as u32,
        start_time: field(22)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tpantsd\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\n\
Pid:\t4242\nPPid:\t1\nTracerPid:\t0\nVmPeak:\t  300000 kB\nVmSize:\t  290000 kB\nVmLck:\t       0 kB\n\
VmHWM:\t  160000 kB\nVmRSS:\t  156300 kB\nRssAnon:\t  140000 kB\nRssFile:\t   16000 kB\n\
RssShmem:\t     300 kB\nVmData:\t  200000 kB\nVmSwap:\t      12 kB\nThreads:\t7\n";

    const ROLLUP: &str = "55d0c0a00000-7ffd8f5f2000 ---p 00000000 00:00 0                          [rollup]\n\
Rss:              156300 kB\nPss:              150000 kB\nPss_Dirty:        140000 kB\n\
Pss_Anon:         140000 kB\nPss_File:          9700 kB\nPss_Shmem:           300 kB\n\
Shared_Clean:      12000 kB\nShared_Dirty:        600 kB\nPrivate_Clean:      4000 kB\n\
Private_Dirty:    139700 kB\nReferenced:       156300 kB\nAnonymous:        140000 kB\n\
KSM:                   0 kB\nLazyFree:              0 kB\nAnonHugePages:         0 kB\n\
Swap:                 12 kB\nSwapPss:               12 kB\nLocked:                0 kB\n";

    #[test]
    fn status_values_are_bytes() {
        let s = parse_status(STATUS).unwrap();
        assert_eq!(s.name, "pantsd");
        assert_eq!(s.ppid, 1);
        assert_eq!(s.rss_bytes, Some(156_300 * 1024));
        assert_eq!(s.anon_bytes, Some(140_000 * 1024));
        assert_eq!(s.file_bytes, Some(16_000 * 1024));
        assert_eq!(s.shmem_bytes, Some(300 * 1024));
        assert_eq!(s.swap_bytes, Some(12 * 1024));
        assert_eq!(s.hwm_bytes, Some(160_000 * 1024));
        assert_eq!(s.threads, Some(7));
    }

    #[test]
    fn status_of_a_kernel_thread_has_no_memory_fields() {
        let s = parse_status("Name:\tkthreadd\nPPid:\t0\nThreads:\t1\n").unwrap();
        assert_eq!(s.rss_bytes, None);
        assert!(parse_status("garbage").is_err());
    }

    #[test]
    fn rollup_values_are_bytes_and_uss_is_private() {
        let r = parse_smaps_rollup(ROLLUP).unwrap();
        assert_eq!(r.pss_bytes, 150_000 * 1024);
        assert_eq!(r.pss_anon_bytes, Some(140_000 * 1024));
        assert_eq!(r.uss_bytes(), (4000 + 139_700) * 1024);
        assert_eq!(r.shared_bytes(), (12_000 + 600) * 1024);
        assert_eq!(r.swap_pss_bytes, Some(12 * 1024));
    }

    #[test]
    fn rollup_of_an_old_kernel_lacks_the_pss_split() {
        let r = parse_smaps_rollup("Rss: 10 kB\nPss: 8 kB\nPrivate_Dirty: 8 kB\n").unwrap();
        assert_eq!(r.pss_anon_bytes, None);
        assert_eq!(r.uss_bytes(), 8 * 1024);
    }

    #[test]
    fn stat_with_parentheses_in_the_name() {
        let text = "4242 (my (odd) daemon) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 7 0 987654 300000 39000 ...";
        let s = parse_stat(text).unwrap();
        assert_eq!(s.comm, "my (odd) daemon");
        assert_eq!(s.ppid, 1);
        assert_eq!(s.start_time, 987_654);
        assert_eq!(s.state, 'S');
        assert!(parse_stat("4242 (x) S").is_err());
    }

    /// A fake /proc in a temp dir (below's `procfs/src/test.rs` pattern):
    /// one directory per process with the files the sampler reads.
    struct FakeProc {
        dir: tempfile::TempDir,
    }

    impl FakeProc {
        fn new() -> Self {
            FakeProc {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn root(&self) -> ProcRoot {
            ProcRoot::new(self.dir.path())
        }

        /// A process with `tasks`, each with the children it forked.
        fn process(&self, pid: u32, ppid: u32, state: char, tasks: &[(u32, &[u32])]) -> &Self {
            let p = self.dir.path().join(pid.to_string());
            std::fs::create_dir_all(p.join("fd")).unwrap();
            std::fs::write(
                p.join("stat"),
                format!(
                    "{pid} (proc {pid}) {state} {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0",
                    1000 + pid
                ),
            )
            .unwrap();
            std::fs::write(p.join("status"), STATUS).unwrap();
            std::fs::write(p.join("smaps_rollup"), ROLLUP).unwrap();
            for (tid, children) in tasks {
                let t = p.join("task").join(tid.to_string());
                std::fs::create_dir_all(&t).unwrap();
                let list: Vec<String> = children.iter().map(u32::to_string).collect();
                std::fs::write(t.join("children"), list.join(" ") + " ").unwrap();
            }
            self
        }

        fn file(&self, pid: u32, name: &str, text: &str) -> &Self {
            std::fs::write(self.dir.path().join(pid.to_string()).join(name), text).unwrap();
            self
        }
    }

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
    fn a_process_is_read_in_tiers_from_the_fake_root() {
        let fake = FakeProc::new();
        fake.process(10, 1, 'S', &[(10, &[])]);
        for fd in 0..3 {
            std::fs::write(fake.dir.path().join(format!("10/fd/{fd}")), "").unwrap();
        }
        let root = fake.root();
        let cheap = crate::sample::read_process(&root, 10, false).unwrap();
        assert_eq!(cheap.status.anon_bytes, Some(140_000 * 1024));
        assert_eq!(cheap.fds, Some(3));
        assert!(cheap.rollup.is_none());
        let deep = crate::sample::read_process(&root, 10, true).unwrap();
        assert_eq!(deep.rollup.map(|r| r.pss_bytes), Some(150_000 * 1024));
        // An exited-but-unreaped process has an empty smaps_rollup: gone.
        fake.file(10, "smaps_rollup", "");
        let err = crate::sample::read_process(&root, 10, true).unwrap_err();
        assert!(err.is_gone(), "{err}");
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
}
