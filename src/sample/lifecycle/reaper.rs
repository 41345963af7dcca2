//! Child subreaper: keep detached daemons in leakwatch's tree, reap every
//! orphan, and stop survivors at the end.
//!
//! leakwatch does all waiting itself with `waitpid(-1, WNOHANG)`: orphans
//! reparented to a subreaper must be reaped or they pile up as zombies, and a
//! wait on "any child" would otherwise steal the command's exit status from
//! `std::process::Child::wait`.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

/// How a reaped child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildExit {
    Code(i32),
    Signal(i32),
}

impl ChildExit {
    /// Shell convention: 128 + signal number for a signalled process.
    pub fn code(self) -> i32 {
        match self {
            ChildExit::Code(c) => c,
            ChildExit::Signal(s) => 128 + s,
        }
    }

    pub fn describe(self) -> String {
        match self {
            ChildExit::Code(c) => format!("exit:{c}"),
            ChildExit::Signal(s) => format!("signal:{s}"),
        }
    }
}

/// Makes this process a child subreaper (Linux ≥ 3.4).
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// A reaped child: how it ended and its peak RSS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    pub exit: ChildExit,
    /// `ru_maxrss` from wait4, in bytes: the largest RSS of the child and of
    /// the descendants it waited for. Catches peaks between polls.
    pub max_rss_bytes: u64,
}

/// Reaps every child that has exited, returning pid → how it ended.
pub fn reap_all() -> HashMap<u32, Reaped> {
    let mut reaped = HashMap::new();
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 writes only into the two out-pointers we pass.
        let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage) };
        if pid == 0 {
            return reaped; // children exist, none has exited
        }
        if pid < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return reaped; // ECHILD: no children at all
        }
        let exit = if libc::WIFEXITED(status) {
            ChildExit::Code(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            ChildExit::Signal(libc::WTERMSIG(status))
        } else {
            continue; // stopped or continued, not an exit
        };
        reaped.insert(
            pid as u32,
            Reaped {
                exit,
                max_rss_bytes: (usage.ru_maxrss.max(0) as u64) * 1024,
            },
        );
    }
}

/// Ctrl-C and the other ways a session is ended from outside (SIGTERM, a
/// dropped ssh session's SIGHUP, SIGQUIT), seen as a flag the loops poll.
/// The first signal stops sampling; what was started is stopped (TERM, then
/// KILL after a grace period) and every report is written. A second signal
/// cuts the grace period short (KILL now) and the reports are still
/// written; a third ends leakwatch at once (its guardian stops the rest).
#[derive(Clone)]
pub struct Interrupt {
    /// The first signal's number, 0 before any.
    first: Arc<AtomicUsize>,
    /// How many signals arrived.
    count: Arc<AtomicUsize>,
}

/// The signals that interrupt a session.
const SIGNALS: [i32; 4] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
    signal_hook::consts::SIGQUIT,
];

impl Interrupt {
    /// Registers the handlers; the flag holds the first signal's number.
    pub fn install() -> io::Result<Self> {
        let first = Arc::new(AtomicUsize::new(0));
        let count = Arc::new(AtomicUsize::new(0));
        let twice = Arc::new(AtomicBool::new(false));
        for sig in SIGNALS {
            // Order matters: the shutdown check runs before the count goes
            // up, so only a third signal exits (with the shell's 128 + signal).
            signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, Arc::clone(&twice))?;
            let (first, count, twice) =
                (Arc::clone(&first), Arc::clone(&count), Arc::clone(&twice));
            let handler = move || {
                let _ = first.compare_exchange(0, sig as usize, Ordering::SeqCst, Ordering::SeqCst);
                if count.fetch_add(1, Ordering::SeqCst) >= 1 {
                    twice.store(true, Ordering::SeqCst);
                }
            };
            // SAFETY: the handler only touches atomics (async-signal-safe).
            unsafe { signal_hook::low_level::register(sig, handler)? };
        }
        Ok(Interrupt { first, count })
    }

    /// A second signal came: stop waiting for processes to exit.
    pub fn hurried(&self) -> bool {
        self.count.load(Ordering::Relaxed) >= 2
    }

    /// The number of the signal that interrupted the session, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.first.load(Ordering::Relaxed) {
            0 => None,
            sig => i32::try_from(sig).ok(),
        }
    }

    pub fn is_set(&self) -> bool {
        self.signal().is_some()
    }

    /// Sleeps for `d`, waking early (in 20 ms steps) on interrupt.
    /// Returns false when interrupted.
    pub fn sleep(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        loop {
            if self.is_set() {
                return false;
            }
            let now = Instant::now();
            if now >= end {
                return true;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(20)));
        }
    }
}

/// Sends `sig` to a pid; a process already gone is not an error. A pid that
/// does not fit a positive `pid_t` is never signalled: cast, it would name a
/// whole process group (or every process, for -1).
pub fn send(pid: u32, sig: Signal) {
    if let Ok(pid) = i32::try_from(pid)
        && pid > 0
    {
        let _ = signal::kill(Pid::from_raw(pid), sig);
    }
}

/// Stops a set of processes that may still grow while it is being stopped
/// (a daemon that forks a helper in its TERM handler, a master that
/// re-forks its workers): `walk` names the processes to stop *now*, and is
/// asked again every round. Each new one gets TERM; whoever is still there
/// after `grace` gets KILL, round after round, until `walk` comes back
/// empty (a killed process forks no more) or 5 more seconds have passed.
/// `hurry` cuts the grace period short (a second Ctrl-C). Reaps them all
/// (they are our children or orphans reparented to us). Returns the pids
/// that needed KILL and those that could not be stopped.
pub fn stop(walk: impl Fn() -> Vec<u32>, grace: Duration, hurry: impl Fn() -> bool) -> Stopped {
    let mut termed = std::collections::BTreeSet::new();
    let mut stopped = Stopped::default();
    let deadline = Instant::now() + grace;
    loop {
        reap_all();
        let now = walk();
        if now.is_empty() {
            return stopped;
        }
        if Instant::now() >= deadline || hurry() {
            break;
        }
        for pid in now.into_iter().filter(|p| termed.insert(*p)) {
            send(pid, Signal::SIGTERM);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let hard = Instant::now() + Duration::from_secs(5);
    loop {
        reap_all();
        let now = walk();
        if now.is_empty() {
            return stopped;
        }
        if Instant::now() >= hard {
            stopped.remaining = now;
            return stopped;
        }
        for pid in now {
            send(pid, Signal::SIGKILL);
            if !stopped.killed.contains(&pid) {
                stopped.killed.push(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What stopping a set of processes took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stopped {
    /// Ignored TERM for the whole grace period and were killed.
    pub killed: Vec<u32>,
    /// Still there after every KILL (in uninterruptible sleep, or another
    /// user's that leakwatch may not signal).
    pub remaining: Vec<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_that_would_wrap_negative_are_not_signalled() {
        // u32::MAX as i32 is -1: kill(-1, …) signals every process we may.
        // This must be a no-op, not the end of the test runner.
        send(u32::MAX, Signal::SIGCONT);
        send(0, Signal::SIGCONT);
        send(1 << 31, Signal::SIGCONT);
    }
}
