//! A guardian for `run`: a small process of its own that stops what a session
//! started when leakwatch dies without stopping it (`kill -9`, a crash, the
//! OOM killer).
//!
//! leakwatch starts it (itself again, `leakwatch __guardian`) before it
//! becomes a subreaper; the guardian forks once more and calls `setsid`, so
//! it is neither in leakwatch's tree (not a survivor) nor in the terminal's
//! process group (Ctrl-C is leakwatch's to handle). Its stdin is the read end
//! of a pipe whose write end only leakwatch holds (close-on-exec: no command
//! inherits it), so the pipe reaches end-of-file exactly when leakwatch is
//! gone, however it died — more robust than `PR_SET_PDEATHSIG`, which fires
//! when the *thread* that forked exits. Through the pipe leakwatch names the
//! processes it has seen (pid and start time) and, at a clean end, releases
//! the guardian (`release`).
//!
//! On end-of-file without a release, the guardian stops the session's
//! processes: the members of its cgroup (where there is one), the processes
//! it was told about and still the same (start time), their descendants, and
//! any process carrying the session's mark in its environment
//! (`LEAKWATCH_SESSION`, set on every command: a daemon forked after the
//! last sample is found too). TERM, then after a grace period KILL (the
//! cgroup frozen first). Signals go through a pidfd opened and checked
//! against the start time first, so a reused pid is never signalled. The
//! session record then names what could not be stopped, or is removed.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::io::{self, BufRead, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use super::confine::{self, Confinement, Left, Record};
use crate::sample::procfs::ProcRoot;

/// The hidden first argument that makes the binary a guardian.
pub const SUBCOMMAND: &str = "__guardian";

/// The environment variable every command of a session carries: the
/// sessions (`pid.start_time`, comma-separated when nested) it belongs to.
pub const MARK: &str = "LEAKWATCH_SESSION";

/// How long the session's processes get between TERM and KILL.
const GRACE: Duration = Duration::from_secs(3);

/// leakwatch's end of the pipe to its guardian.
#[derive(Debug)]
pub struct Guardian {
    pipe: fs::File,
    mark: String,
    told: HashSet<(u32, u64)>,
}

impl Guardian {
    /// Starts the guardian of session `pid` (started at `start_time`), to
    /// stop the members of `cgroup` and update the record in `records`.
    /// Must be called before leakwatch becomes a subreaper.
    pub fn start(
        pid: u32,
        start_time: u64,
        cgroup: Option<&Path>,
        records: Option<&Path>,
    ) -> io::Result<Guardian> {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        // A guardian that stops reading must never block the session.
        nix::fcntl::fcntl(
            &write,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )?;
        let mut command = Command::new("/proc/self/exe");
        command
            .arg0("leakwatch")
            .arg(SUBCOMMAND)
            .args([pid.to_string(), start_time.to_string()])
            .stdin(Stdio::from(read))
            .stdout(Stdio::null());
        if let Some(cgroup) = cgroup {
            command.arg("--cgroup").arg(cgroup);
        }
        if let Some(records) = records {
            command.arg("--records").arg(records);
        }
        // The first guardian process forks the real one and exits at once.
        let status = command.status()?;
        if !status.success() {
            return Err(io::Error::other(format!("guardian exited with {status}")));
        }
        Ok(Guardian {
            pipe: fs::File::from(write),
            mark: format!("{pid}.{start_time}"),
            told: HashSet::new(),
        })
    }

    /// The value of `MARK` for a command: this session's, after any from
    /// an enclosing session.
    pub fn mark_value(&self) -> OsString {
        match std::env::var_os(MARK).filter(|v| !v.is_empty()) {
            Some(mut outer) => {
                outer.push(",");
                outer.push(&self.mark);
                outer
            }
            None => OsString::from(&self.mark),
        }
    }

    /// Tells the guardian about a process of the session (once each).
    pub fn track(&mut self, pid: u32, start_time: u64) {
        if self.told.insert((pid, start_time)) {
            // Non-blocking: a full pipe drops the line (the mark still finds it).
            let _ = self
                .pipe
                .write_all(format!("{pid} {start_time}\n").as_bytes());
        }
    }

    /// The session stopped (or kept, on purpose) what it started: the
    /// guardian exits without touching anything.
    pub fn release(mut self) {
        let _ = self.pipe.write_all(b"release\n");
    }
}

/// The guardian's own `main`: `leakwatch __guardian PID START_TIME
/// [--cgroup DIR] [--records DIR]`, stdin the pipe.
pub fn main(args: &[OsString]) -> ExitCode {
    let Some(session) = Session::from_args(args) else {
        return ExitCode::from(2);
    };
    // SAFETY: called from the guardian's main before any thread exists.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { .. }) => return ExitCode::SUCCESS,
        Ok(nix::unistd::ForkResult::Child) => {}
        Err(_) => return ExitCode::FAILURE,
    }
    let _ = nix::unistd::setsid();
    let _ = std::env::set_current_dir("/");
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: setting a signal's disposition to "ignore" is always sound.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    let mut session = session;
    if session.listen(io::stdin().lock()) {
        return ExitCode::SUCCESS;
    }
    let remaining = session.stop();
    session.update_record(&remaining);
    ExitCode::SUCCESS
}

/// What the guardian knows of the session it guards.
struct Session {
    pid: u32,
    mark: String,
    cgroup: Option<PathBuf>,
    records: Option<PathBuf>,
    /// The processes leakwatch named: pid → start time.
    told: BTreeMap<u32, u64>,
    root: ProcRoot,
}

impl Session {
    fn from_args(args: &[OsString]) -> Option<Session> {
        let mut args = args.iter();
        let pid = args.next()?.to_str()?.parse().ok()?;
        let start_time: u64 = args.next()?.to_str()?.parse().ok()?;
        let (mut cgroup, mut records) = (None, None);
        while let Some(flag) = args.next() {
            let value = PathBuf::from(args.next()?);
            match flag.to_str()? {
                "--cgroup" => cgroup = Some(value),
                "--records" => records = Some(value),
                _ => return None,
            }
        }
        Some(Session {
            pid,
            mark: format!("{pid}.{start_time}"),
            cgroup,
            records,
            told: BTreeMap::new(),
            root: ProcRoot::default(),
        })
    }

    /// Reads the pipe until leakwatch releases the guardian (true) or the
    /// pipe ends without it: leakwatch is gone (false).
    fn listen(&mut self, mut pipe: impl BufRead) -> bool {
        let mut line = String::new();
        loop {
            line.clear();
            match pipe.read_line(&mut line) {
                Ok(0) => return false,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
            let line = line.trim();
            if line == "release" {
                return true;
            }
            if let Some((pid, start)) = line.split_once(' ')
                && let (Ok(pid), Ok(start)) = (pid.parse(), start.parse())
            {
                self.told.insert(pid, start);
            }
        }
    }

    /// The session's processes running now, with their start times.
    fn walk(&self) -> BTreeMap<u32, u64> {
        let me = std::process::id();
        let mut seeds: BTreeMap<u32, u64> = BTreeMap::new();
        let mut consider = |pid: u32, expected: Option<u64>| {
            if let Ok(stat) = self.root.stat(pid)
                && stat.state != 'Z'
                && stat.state != 'X'
                && expected.is_none_or(|t| t == stat.start_time)
            {
                seeds.insert(pid, stat.start_time);
            }
        };
        for (&pid, &start) in &self.told {
            consider(pid, Some(start));
        }
        if let Some(cgroup) = &self.cgroup {
            for pid in confine::members(cgroup) {
                consider(pid, None);
            }
        }
        for pid in all_pids(&self.root) {
            if self.marked(pid) {
                consider(pid, None);
            }
        }
        let mut all = BTreeMap::new();
        for &pid in seeds.keys() {
            for p in self.root.tree(pid) {
                if let Ok(stat) = self.root.stat(p)
                    && stat.state != 'Z'
                {
                    all.insert(p, stat.start_time);
                }
            }
        }
        all.retain(|&p, _| p != me && p != self.pid && p > 1);
        all
    }

    /// Whether the process carries this session's mark in its environment.
    fn marked(&self, pid: u32) -> bool {
        let Ok(env) = fs::read(self.root.path(pid, "environ")) else {
            return false;
        };
        let prefix = format!("{MARK}=");
        env.split(|&b| b == 0)
            .filter_map(|var| var.strip_prefix(prefix.as_bytes()))
            .any(|value| {
                value
                    .split(|&b| b == b',')
                    .any(|m| m == self.mark.as_bytes())
            })
    }

    /// TERM to everything of the session, KILL after the grace period (the
    /// cgroup frozen first, so nothing in it forks meanwhile), until nothing
    /// is left or 5 more seconds have passed. Returns what is still running.
    fn stop(&self) -> BTreeMap<u32, u64> {
        let mut termed = HashSet::new();
        let deadline = Instant::now() + GRACE;
        loop {
            let now = self.walk();
            if now.is_empty() {
                return now;
            }
            if Instant::now() >= deadline {
                break;
            }
            for (&pid, &start) in &now {
                if termed.insert((pid, start)) {
                    signal_exact(&self.root, pid, start, libc::SIGTERM);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(cgroup) = self.cgroup.as_deref().and_then(Confinement::open) {
            cgroup.kill_all(Duration::from_secs(1));
        }
        let hard = Instant::now() + Duration::from_secs(5);
        loop {
            let now = self.walk();
            if now.is_empty() || Instant::now() >= hard {
                return now;
            }
            for (&pid, &start) in &now {
                signal_exact(&self.root, pid, start, libc::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The session record names what is still running; with nothing left,
    /// it goes, and the cgroup with it.
    fn update_record(&self, remaining: &BTreeMap<u32, u64>) {
        if remaining.is_empty()
            && let Some(cgroup) = &self.cgroup
        {
            let _ = fs::remove_dir(cgroup);
        }
        let Some(dir) = &self.records else {
            return;
        };
        let Some(mut record) = Record::load(dir, self.pid) else {
            return;
        };
        if remaining.is_empty() {
            record.remove(dir);
            return;
        }
        record.survivors = remaining
            .iter()
            .map(|(&pid, &start_time)| Left {
                pid,
                start_time,
                comm: self.root.stat(pid).map(|s| s.comm).unwrap_or_default(),
            })
            .collect();
        record.save(dir);
    }
}

fn all_pids(root: &ProcRoot) -> Vec<u32> {
    fs::read_dir(root.dir())
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    std::str::from_utf8(e.file_name().as_bytes())
                        .ok()?
                        .parse()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Sends `sig` to `pid` only if it is still the process that started at
/// `start_time`: through a pidfd opened first and checked after, so the
/// check and the signal name the same process even if the pid is reused.
fn signal_exact(root: &ProcRoot, pid: u32, start_time: u64, sig: i32) {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
    let same = || root.stat(pid).is_ok_and(|s| s.start_time == start_time);
    if fd < 0 {
        // No pidfd (Linux < 5.3): check, then signal.
        if same() {
            super::reaper::send(
                pid,
                nix::sys::signal::Signal::try_from(sig).unwrap_or(nix::sys::signal::SIGKILL),
            );
        }
        return;
    }
    let Ok(fd) = i32::try_from(fd) else {
        return;
    };
    // SAFETY: fd is a new descriptor we own from here on.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    if same() {
        // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        let args: Vec<OsString> = ["4242", "99", "--records", "/nonexistent"]
            .iter()
            .map(OsString::from)
            .collect();
        Session::from_args(&args).unwrap()
    }

    #[test]
    fn a_release_ends_the_watch_and_end_of_file_means_leakwatch_is_gone() {
        let mut s = session();
        assert_eq!((s.pid, s.mark.as_str()), (4242, "4242.99"));
        assert!(s.listen(io::Cursor::new("17 5\nrelease\n")));
        assert_eq!(s.told, BTreeMap::from([(17, 5)]));
        let mut s = session();
        assert!(!s.listen(io::Cursor::new("17 5\n18 6\nnot a line\n")));
        assert_eq!(s.told.len(), 2);
        assert!(Session::from_args(&[OsString::from("x")]).is_none());
    }

    #[test]
    fn the_mark_is_found_among_nested_sessions_and_a_stranger_is_not_marked() {
        let s = session();
        let mut child = Command::new("sleep")
            .arg("30")
            .env(MARK, "1.1,4242.99")
            .spawn()
            .unwrap();
        let mut other = Command::new("sleep")
            .arg("30")
            .env(MARK, "4242.990")
            .spawn()
            .unwrap();
        // A forked child shows its parent's environment until it has exec'd:
        // wait until both carry theirs (the race failed this test once in CI).
        for c in [&child, &other] {
            let environ = format!("/proc/{}/environ", c.id());
            for _ in 0..200 {
                let seen = std::fs::read(&environ).unwrap_or_default();
                if seen.windows(MARK.len()).any(|w| w == MARK.as_bytes()) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        assert!(s.marked(child.id()));
        assert!(!s.marked(other.id()));
        assert!(!s.marked(std::process::id()));
        let walked = s.walk();
        assert!(walked.contains_key(&child.id()) && !walked.contains_key(&other.id()));
        for c in [&mut child, &mut other] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    #[test]
    fn a_pid_whose_start_time_differs_is_never_signalled() {
        let root = ProcRoot::default();
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let start = root.stat(child.id()).unwrap().start_time;
        // The same pid, another process (as after reuse): left alone.
        signal_exact(&root, child.id(), start + 1, libc::SIGKILL);
        std::thread::sleep(Duration::from_millis(50));
        assert!(child.try_wait().unwrap().is_none());
        signal_exact(&root, child.id(), start, libc::SIGKILL);
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
    }
}
