//! What `run` started, kept track of beyond leakwatch's own life.
//!
//! A cgroup of its own, where the machine allows (root, a cgroup v1 freezer
//! hierarchy): every command is started inside it, so whatever it forks —
//! daemons, their workers, helpers forked in a TERM handler — stays inside,
//! and stopping is exact: freeze the group (nothing can fork any more), KILL
//! every member, thaw. Without it, survivors are stopped by walking the tree
//! round after round (`reaper::stop`).
//!
//! A record of each session, in a private directory: the session's pid and
//! start time, its cgroup, and the survivors seen after each run. When
//! leakwatch is killed before it can stop them (`kill -9`, a crash), the
//! next `run` finds the record of a session that is gone and names the
//! processes it left that are still running — they may be the daemon the
//! command is about to talk to.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::output;
use crate::sample::procfs::ProcRoot;

const FREEZER: &str = "/sys/fs/cgroup/freezer";

/// A freezer cgroup holding every process a `run` session started.
#[derive(Debug)]
pub struct Confinement {
    dir: PathBuf,
    /// `<dir>/cgroup.procs` as a C string, ready for the child to write to
    /// between fork and exec (no allocation there).
    procs: CString,
}

impl Confinement {
    /// A new cgroup `leakwatch-<pid>` under the freezer hierarchy, or `None`
    /// where there is none or it is not ours to write (not root).
    pub fn create(pid: u32) -> Option<Confinement> {
        sweep_stale(Path::new(FREEZER));
        let dir = Path::new(FREEZER).join(format!("leakwatch-{pid}"));
        fs::create_dir(&dir).ok()?;
        let procs = CString::new(
            dir.join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .ok()?;
        Some(Confinement { dir, procs })
    }

    /// The cgroup a session made at `dir`, as its guardian sees it.
    pub fn open(dir: &Path) -> Option<Confinement> {
        let procs = CString::new(
            dir.join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        );
        Some(Confinement {
            dir: dir.to_path_buf(),
            procs: procs.ok().filter(|_| dir.is_dir())?,
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// What a child runs between fork and exec to enter the cgroup.
    pub fn joiner(&self) -> impl Fn() -> io::Result<()> + Send + Sync + 'static {
        let procs = self.procs.clone();
        move || join(&procs)
    }

    /// The processes in the cgroup now.
    pub fn pids(&self) -> Vec<u32> {
        members(&self.dir)
    }

    /// Freezes the group, kills every member, thaws it, and waits (up to
    /// `wait`) for them to be gone. Returns the pids killed.
    pub fn kill_all(&self, wait: Duration) -> Vec<u32> {
        let state = self.dir.join("freezer.state");
        let frozen = fs::write(&state, "FROZEN").is_ok() && {
            let until = Instant::now() + Duration::from_secs(2);
            loop {
                let now = fs::read_to_string(&state).unwrap_or_default();
                if now.trim() == "FROZEN" || Instant::now() >= until {
                    break now.trim() == "FROZEN";
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let pids = self.pids();
        for &pid in &pids {
            super::reaper::send(pid, nix::sys::signal::Signal::SIGKILL);
        }
        if frozen {
            let _ = fs::write(&state, "THAWED");
        }
        let until = Instant::now() + wait;
        while !self.pids().is_empty() && Instant::now() < until {
            super::reaper::reap_all();
            std::thread::sleep(Duration::from_millis(10));
        }
        super::reaper::reap_all();
        pids
    }

    /// Removes the cgroup when it is empty; a non-empty one stays (the
    /// processes in it were kept on purpose, or could not be stopped).
    pub fn remove(&self) {
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Removes the empty cgroups of sessions that are gone (a leakwatch killed
/// before it could remove its own): they would pile up, and one named for a
/// pid that is reused would cost that session its cgroup. Only when no
/// process has that pid now (whatever a live session's binary is called),
/// and never one with a process in it (rmdir refuses).
fn sweep_stale(freezer: &Path) {
    let Ok(entries) = fs::read_dir(freezer) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("leakwatch-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let gone = !Path::new("/proc").join(pid.to_string()).exists();
        if gone && members(&entry.path()).is_empty() {
            let _ = fs::remove_dir(entry.path());
        }
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` this is:
/// meant for the child between fork and exec, where only async-signal-safe
/// calls are allowed (open, write, close; "0" means the writer itself).
fn join(procs: &CString) -> io::Result<()> {
    // SAFETY: a NUL-terminated path we own; a 1-byte buffer we own; the
    // fd is closed before returning. No allocation, no locks.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, b"0".as_ptr().cast(), 1);
        let err = io::Error::last_os_error();
        libc::close(fd);
        if written != 1 {
            return Err(err);
        }
    }
    Ok(())
}

/// The processes in the cgroup at `dir` now (its `cgroup.procs`).
pub(super) fn members(dir: &Path) -> Vec<u32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// A process a session left, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Left {
    pub pid: u32,
    pub start_time: u64,
    pub comm: String,
}

/// What a `run` session records about itself while it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub pid: u32,
    pub start_time: u64,
    pub command: String,
    pub cgroup: Option<PathBuf>,
    pub survivors: Vec<Left>,
}

/// The private directory session records live in: `$XDG_RUNTIME_DIR/
/// leakwatch`, else `<tmp>/leakwatch-<uid>`; made 0700, and refused when it
/// is a link or belongs to someone else (another user could plant records).
pub fn records_dir() -> Option<PathBuf> {
    let uid = nix::unistd::getuid().as_raw();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("leakwatch"),
        None => std::env::temp_dir().join(format!("leakwatch-{uid}")),
    };
    let _ = fs::DirBuilder::new().mode(0o700).create(&dir);
    let meta = fs::symlink_metadata(&dir).ok()?;
    (meta.is_dir() && meta.uid() == uid && meta.mode() & 0o077 == 0).then_some(dir)
}

impl Record {
    fn path(dir: &Path, pid: u32) -> PathBuf {
        dir.join(format!("session-{pid}.json"))
    }

    /// Writes (or rewrites) this session's record.
    pub fn save(&self, dir: &Path) {
        if let Ok(text) = serde_json::to_vec(self) {
            let _ = output::write_atomic(&Record::path(dir, self.pid), &text);
        }
    }

    /// The record of session `pid`, if there is one.
    pub fn load(dir: &Path, pid: u32) -> Option<Record> {
        let text = fs::read(Record::path(dir, pid)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Removes this session's record: everything it started is gone.
    pub fn remove(&self, dir: &Path) {
        let _ = fs::remove_file(Record::path(dir, self.pid));
    }
}

/// Processes left running by earlier sessions that are gone, one line each;
/// records whose processes are all gone too are removed.
pub fn leftovers(dir: &Path, root: &ProcRoot) -> Vec<(Record, Vec<Left>)> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    for path in entries.flatten().map(|e| e.path()) {
        let Some(record) = fs::read(&path)
            .ok()
            .and_then(|t| serde_json::from_slice::<Record>(&t).ok())
        else {
            continue;
        };
        let session_alive = root
            .stat(record.pid)
            .is_ok_and(|s| s.start_time == record.start_time && s.state != 'Z');
        if session_alive {
            continue;
        }
        let mut still: Vec<Left> = record
            .survivors
            .iter()
            .filter(|l| {
                root.stat(l.pid)
                    .is_ok_and(|s| s.start_time == l.start_time && s.state != 'Z')
            })
            .cloned()
            .collect();
        for pid in record.cgroup.as_deref().map(members).unwrap_or_default() {
            if !still.iter().any(|l| l.pid == pid)
                && let Ok(s) = root.stat(pid)
            {
                still.push(Left {
                    pid,
                    start_time: s.start_time,
                    comm: s.comm,
                });
            }
        }
        if still.is_empty() {
            let _ = fs::remove_file(&path);
            if let Some(cg) = &record.cgroup {
                let _ = fs::remove_dir(cg);
            }
        } else {
            out.push((record, still));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_empty_cgroups_of_pids_gone_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let names = [
            format!("leakwatch-{}", std::process::id()),
            "leakwatch-2147483600".to_string(),
            "leakwatch-2147483601".to_string(),
            "other-2147483600".to_string(),
        ];
        for n in &names {
            fs::create_dir(dir.path().join(n)).unwrap();
        }
        // A member: not empty, kept whatever its name says.
        fs::write(dir.path().join(&names[2]).join("cgroup.procs"), "77\n").unwrap();
        sweep_stale(dir.path());
        let mut left: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expected = vec![names[0].clone(), names[2].clone(), names[3].clone()];
        expected.sort();
        assert_eq!(left, expected);
    }

    #[test]
    fn a_dead_sessions_live_survivors_are_found_and_a_finished_one_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let root = ProcRoot::default();
        let me = root.stat(std::process::id()).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let sleeper = root.stat(child.id()).unwrap();
        // A session that is gone (no process 0x7fffffff), which left `sleep`.
        let gone = Record {
            pid: 0x7fff_fff0,
            start_time: 1,
            command: "./pants filter ::".into(),
            cgroup: None,
            survivors: vec![
                Left {
                    pid: child.id(),
                    start_time: sleeper.start_time,
                    comm: "sleep".into(),
                },
                // A pid reused since: not ours any more.
                Left {
                    pid: std::process::id(),
                    start_time: me.start_time + 1,
                    comm: "old".into(),
                },
            ],
        };
        gone.save(dir.path());
        // This session is alive: not a leftover.
        let alive = Record {
            pid: std::process::id(),
            start_time: me.start_time,
            survivors: vec![],
            ..gone.clone()
        };
        alive.save(dir.path());
        let found = leftovers(dir.path(), &root);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].1.len(), 1);
        assert_eq!(found[0].1[0].pid, child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(leftovers(dir.path(), &root).is_empty());
        // The record of the finished session is removed, the live one kept.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
