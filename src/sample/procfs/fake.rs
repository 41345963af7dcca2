//! A fake /proc in a temp dir (below's `procfs/src/test.rs` pattern): one
//! directory per process with the files the sampler reads, for tests of
//! the readers and the tree walk through an injectable `ProcRoot`.

use std::path::PathBuf;

use super::ProcRoot;

pub const STATUS: &str = "Name:\tpantsd\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\n\
Pid:\t4242\nPPid:\t1\nTracerPid:\t0\nVmPeak:\t  300000 kB\nVmSize:\t  290000 kB\nVmLck:\t       0 kB\n\
VmHWM:\t  160000 kB\nVmRSS:\t  156300 kB\nRssAnon:\t  140000 kB\nRssFile:\t   16000 kB\n\
RssShmem:\t     300 kB\nVmData:\t  200000 kB\nVmSwap:\t      12 kB\nThreads:\t7\n";

pub const ROLLUP: &str = "55d0c0a00000-7ffd8f5f2000 ---p 00000000 00:00 0                          [rollup]\n\
Rss:              156300 kB\nPss:              150000 kB\nPss_Dirty:        140000 kB\n\
Pss_Anon:         140000 kB\nPss_File:          9700 kB\nPss_Shmem:           300 kB\n\
Shared_Clean:      12000 kB\nShared_Dirty:        600 kB\nPrivate_Clean:      4000 kB\n\
Private_Dirty:    139700 kB\nReferenced:       156300 kB\nAnonymous:        140000 kB\n\
KSM:                   0 kB\nLazyFree:              0 kB\nAnonHugePages:         0 kB\n\
Swap:                 12 kB\nSwapPss:               12 kB\nLocked:                0 kB\n";

/// `smaps` of one heap region: 1 MiB resident, 1000 kB of PSS, all of it
/// anonymous.
pub const HEAP_SMAPS: &str = "01000000-01100000 rw-p 00000000 00:00 0 [heap]\n\
Rss: 1024 kB\nPss: 1000 kB\nPss_Dirty: 1000 kB\nPrivate_Dirty: 1024 kB\nAnonymous: 1024 kB\n";

pub struct FakeProc {
    pub dir: tempfile::TempDir,
}

impl Default for FakeProc {
    fn default() -> Self {
        FakeProc::new()
    }
}

impl FakeProc {
    pub fn new() -> Self {
        FakeProc {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn root(&self) -> ProcRoot {
        ProcRoot::new(self.dir.path())
    }

    pub fn path(&self, pid: u32) -> PathBuf {
        self.dir.path().join(pid.to_string())
    }

    /// A process with `tasks`, each with the children it forked: `stat`,
    /// a `status` naming its parent, state and thread count (a zombie's has
    /// no memory lines), `smaps_rollup`, an empty `fd` directory.
    pub fn process(&self, pid: u32, ppid: u32, state: char, tasks: &[(u32, &[u32])]) -> &Self {
        let p = self.path(pid);
        std::fs::create_dir_all(p.join("fd")).unwrap();
        std::fs::write(
            p.join("stat"),
            format!(
                "{pid} (proc {pid}) {state} {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0",
                1000 + pid
            ),
        )
        .unwrap();
        let mut status = STATUS
            .replace("Name:\tpantsd", &format!("Name:\tproc {pid}"))
            .replace("PPid:\t1\n", &format!("PPid:\t{ppid}\n"))
            .replace("State:\tS", &format!("State:\t{state}"))
            .replace("Threads:\t7", &format!("Threads:\t{}", tasks.len().max(1)));
        if state == 'Z' {
            status = status
                .lines()
                .filter(|l| !l.starts_with("Vm") && !l.starts_with("Rss"))
                .map(|l| format!("{l}\n"))
                .collect();
        }
        std::fs::write(p.join("status"), status).unwrap();
        std::fs::write(p.join("smaps_rollup"), ROLLUP).unwrap();
        let _ = std::fs::remove_dir_all(p.join("task"));
        for (tid, children) in tasks {
            let t = p.join("task").join(tid.to_string());
            std::fs::create_dir_all(&t).unwrap();
            let list: Vec<String> = children.iter().map(u32::to_string).collect();
            std::fs::write(t.join("children"), list.join(" ") + " ").unwrap();
        }
        self
    }

    pub fn file(&self, pid: u32, name: &str, text: &str) -> &Self {
        std::fs::write(self.path(pid).join(name), text).unwrap();
        self
    }

    /// The process is reaped: its directory goes.
    pub fn remove(&self, pid: u32) -> &Self {
        std::fs::remove_dir_all(self.path(pid)).unwrap();
        self
    }
}
