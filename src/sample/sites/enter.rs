//! Entering a running process to make calls on one of its threads, as
//! `heaptrack -p` and memray's attach do: gdb attaches, one thread stopped
//! at a safe point makes the calls, and gdb detaches. `attach
//! --native-sites` loads the allocator shim this way (`native::inject`),
//! `attach --py-sites` runs the Python bootstrap (`python::attach`).
//!
//! Nothing is tried that could hurt the target: the checks before gdb
//! (permission, a stopped process, and the caller's own) refuse with the
//! reason; the calls are made only on a thread stopped at a safe point —
//! blocked in an idle system call (sleeping, polling, accepting, waiting on
//! a condition) with no frame in malloc, the loader or a signal handler —
//! else gdb detaches and tries again a few times, then refuses. A fault
//! inside a call ends it with the thread's registers put back, and gdb
//! always detaches: on its own exit too, and it runs in its own process
//! group, so a Ctrl-C to leakwatch never reaches it in the middle of a call.
//!
//! The calls are made by hand (`Gdb::invoke`), not with gdb's `call`: the
//! thread's general registers are saved, the arguments set, strings written
//! below its stack, the return address set to the program's entry point
//! (which no thread runs again) with a temporary breakpoint there, and after
//! it returns the registers are put back. gdb's `call` saves and restores
//! the vector state too, and gdb 13 (Debian 12's) cannot write it back on a
//! CPU with AMX (the kernel wants the whole 11 KiB XSAVE area: "Couldn't
//! write extended state status: Bad address"), so no call could be made
//! there. The vector registers are the caller's to save in the System V
//! ABI, and the thread is stopped at a system call, where none is live.
//! While a call runs, every thread of the process runs (gdb's default):
//! a call that waits for a lock another thread holds gets it.

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Overrides which gdb is run (a test, an installed one off PATH).
pub const ENV_GDB: &str = "LEAKWATCH_GDB";
/// Tries at a busy process' function entry (`SafePoint::busy_entry`), and
/// how long the process may run before one thread reaches it.
const ENTRY_TRIES: u32 = 5;
const IDLE_TRIES_BEFORE_ENTRY: u32 = 3;
const ENTRY_WAIT: Duration = Duration::from_secs(2);
/// Attempts at finding a thread at a safe point, and the wait between.
const ATTEMPTS: u32 = 10;
const RETRY_WAIT: Duration = Duration::from_millis(150);
/// How long one gdb command may take (attaching to a large process loads
/// libc's symbols; a call runs the target's code: dlopen of the shim runs
/// its constructors, the Python bootstrap counts the live objects).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// CAP_SYS_PTRACE's bit in CapEff.
const CAP_SYS_PTRACE: u32 = 19;

/// x86-64 system calls a thread idles in outside any allocator or loader
/// lock: read, poll, select, pause, nanosleep, accept, recvfrom, recvmsg,
/// wait4, msgrcv, rt_sigtimedwait, rt_sigsuspend, clock_nanosleep,
/// epoll_wait, waitid, pselect6, ppoll, epoll_pwait, accept4, epoll_pwait2.
const IDLE_SYSCALLS: [i64; 20] = [
    0, 7, 23, 34, 35, 43, 45, 47, 61, 70, 128, 130, 230, 232, 247, 270, 271, 281, 288, 441,
];
const FUTEX: i64 = 202;
/// A futex wait is idle only under one of these (a condition, a join, a
/// semaphore); under malloc's or the loader's locks it is not.
pub(crate) const IDLE_WAITS: &[&str] = &[
    "pthread_cond_",
    "pthread_join",
    "pthread_clockjoin",
    "sem_wait",
    "sem_timedwait",
];
/// Frames no call may interrupt: the allocator, the loader, fork. At a
/// function's entry (`SafePoint::busy_entry`) only its callers are looked
/// at, from `CALLER_FRAMES` on: an allocation wrapper (`g_malloc`) calling
/// malloc holds none of the allocator's locks.
const UNSAFE_FRAMES: [&str; 14] = [
    "malloc",
    "free",
    "calloc",
    "realloc",
    "memalign",
    "arena",
    "tcache",
    "_int_",
    "_dl_",
    "dl_open",
    "dlopen",
    "dlclose",
    "dl_iterate_phdr",
    "fork",
];
const CALLER_FRAMES: usize = 8;

/// Why nothing was done to the process; each message names the process
/// and the fix. `flag` is the option that asked (`--native-sites`,
/// `--py-sites`).
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error(
        "process {pid}: ptrace is not permitted: {why}; {fix} (nothing was done to the process)"
    )]
    PtraceDenied { pid: u32, why: String, fix: String },
    #[error(
        "process {pid}: gdb enters a running process for {flag} and {gdb} was not found; \
         install gdb (apt-get install gdb) or set {ENV_GDB} to its path"
    )]
    GdbMissing {
        pid: u32,
        flag: &'static str,
        gdb: String,
    },
    #[error(
        "process {pid} ({comm}) cannot be entered: {why} (attach without {flag} still samples \
         its memory)"
    )]
    Refused {
        pid: u32,
        comm: String,
        flag: &'static str,
        why: String,
    },
    #[error("process {pid}: gdb failed: {detail}; the process was left as it was (gdb detached)")]
    Gdb { pid: u32, detail: String },
}

/// The process being entered, for the errors' words.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub pid: u32,
    pub comm: String,
    /// The option that asked (`--native-sites`, `--py-sites`).
    pub flag: &'static str,
}

impl Target {
    /// `comm` is the process' own text: shown escaped.
    pub(crate) fn new(pid: u32, flag: &'static str) -> Target {
        Target {
            pid,
            comm: crate::escape::inert(&comm(pid)).into_owned(),
            flag,
        }
    }

    /// A refusal: `why` says what was found and what to do.
    pub(crate) fn refuse(&self, why: impl Into<String>) -> InjectError {
        InjectError::Refused {
            pid: self.pid,
            comm: self.comm.clone(),
            flag: self.flag,
            why: why.into(),
        }
    }
}

/// Which threads may make the calls: the rules above, and the futex waits
/// that count as idle for this target.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SafePoint {
    /// A thread in a futex wait is idle only under one of these frames.
    pub idle_waits: &'static [&'static str],
    /// What the calls do, for the refusal when no thread is idle ("the shim
    /// is loaded").
    pub doing: &'static str,
    /// When no thread is idle: a function whose entry is a safe point too
    /// (a call boundary: no vector register is live there in the System V
    /// ABI), which a busy process reaches often; the first thread to reach
    /// it makes the calls, outside the loader and signal handlers.
    pub busy_entry: Option<&'static str>,
}

/// Where the calls are being made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// A thread idle in a system call.
    Idle,
    /// A thread at the entry of `SafePoint::busy_entry`.
    Entry,
}

/// The calls were made.
#[derive(Debug, Clone)]
pub struct Entered<T> {
    /// What the calls returned.
    pub value: T,
    /// How long the target was stopped under gdb, from attach to detach.
    pub pause: Duration,
    /// The thread (its id) that made the calls.
    pub thread: u32,
    /// Where it made them.
    pub stop: Stop,
}

/// Enters `target` (checked by [`preflight`]) with gdb (the symbols of the program and of the
/// `libraries`, gdb regexes, read), picks a thread at `point`'s safe point
/// and runs `calls` on it, then detaches. Retries a few times while no
/// thread is at a safe point. Signals that would stop leakwatch wait until
/// gdb has detached.
pub(crate) fn enter<T>(
    target: &Target,
    point: SafePoint,
    libraries: &[&str],
    mut calls: impl FnMut(&mut Gdb, Stop) -> Result<T, Attempt>,
) -> Result<Entered<T>, InjectError> {
    let gdb = find_gdb(target)?;
    // Ctrl-C, TERM or HUP while gdb holds the process wait until it has
    // detached (they are then delivered, and leakwatch stops as usual).
    let _deferred = DeferSignals::new();
    let mut last = String::new();
    // With a function entry to fall back on, a busy process is not tried
    // for idle threads as long.
    let idle_tries = match point.busy_entry {
        Some(_) => IDLE_TRIES_BEFORE_ENTRY,
        None => ATTEMPTS,
    };
    let stops = std::iter::repeat_n(Stop::Idle, idle_tries as usize)
        .chain(point.busy_entry.map(|_| Stop::Entry));
    for stop in stops {
        let mut session = Gdb::start(&gdb, target.pid)?;
        let outcome =
            session
                .enter(target, point, libraries, stop)
                .and_then(|(stopped, thread)| {
                    let value = calls(&mut session, stop)?;
                    session.detach();
                    Ok(Entered {
                        value,
                        pause: stopped.elapsed(),
                        thread,
                        stop,
                    })
                });
        session.finish();
        match outcome {
            Ok(entered) => return Ok(entered),
            Err(Attempt::Busy(why)) => last = why,
            Err(Attempt::Failed(e)) => return Err(e),
        }
        std::thread::sleep(RETRY_WAIT);
    }
    let entry = match point.busy_entry {
        Some(f) => format!(", or from the first thread to call {f}"),
        None => String::new(),
    };
    Err(target.refuse(format!(
        "no thread stopped at a safe point in {idle_tries} tries ({last}): {} only from a thread \
         idle in a system call, outside malloc, the loader and signal handlers{entry}; nothing \
         was done to it; try again when it is idle",
        point.doing
    )))
}

/// Blocks the signals that stop leakwatch until dropped (threads started
/// meanwhile, gdb's reader, inherit the mask).
struct DeferSignals(Option<nix::sys::signal::SigSet>);

impl DeferSignals {
    fn new() -> DeferSignals {
        use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
        let mut set = SigSet::empty();
        for s in [
            Signal::SIGINT,
            Signal::SIGTERM,
            Signal::SIGHUP,
            Signal::SIGQUIT,
        ] {
            set.add(s);
        }
        let mut old = SigSet::empty();
        let blocked = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), Some(&mut old));
        DeferSignals(blocked.is_ok().then_some(old))
    }
}

impl Drop for DeferSignals {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            let _ = nix::sys::signal::pthread_sigmask(
                nix::sys::signal::SigmaskHow::SIG_SETMASK,
                Some(&old),
                None,
            );
        }
    }
}

pub(crate) fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The checks before any debugger: permission, and a stopped process.
/// The callers run it first, before their own checks: a process leakwatch
/// may not trace is refused for that, whatever else it is.
pub(crate) fn preflight(target: &Target) -> Result<(), InjectError> {
    let pid = target.pid;
    ptrace_permitted(target)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let state = field(&status, "State:").unwrap_or_default();
    if state.starts_with('T') || state.starts_with('t') {
        return Err(target.refuse(format!(
            "it is stopped ({state}); resume it first (kill -CONT {pid}); nothing was done to it"
        )));
    }
    Ok(())
}

/// A process' filesystem uid and gid (the rights it creates and opens files with).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Ids {
    pub uid: u32,
    pub gid: u32,
}

impl Ids {
    /// `pid`'s, from the fourth field of its status' Uid: and Gid: lines.
    pub(crate) fn of(pid: u32) -> Option<Ids> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let fs_id = |key: &str| -> Option<u32> {
            field(&status, key)?
                .split_ascii_whitespace()
                .nth(3)?
                .parse()
                .ok()
        };
        Some(Ids {
            uid: fs_id("Uid:")?,
            gid: fs_id("Gid:")?,
        })
    }
}

/// The value of a `/proc/PID/status` line (`Uid:`, `State:` …), trimmed.
pub(crate) fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

/// Whether this process may ptrace `pid`: Yama's scope, the target's user,
/// CAP_SYS_PTRACE (the kernel's own rules, checked first for a clear
/// message; gdb's EPERM is the final word).
fn ptrace_permitted(target: &Target) -> Result<(), InjectError> {
    let pid = target.pid;
    let own = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let cap = field(&own, "CapEff:")
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .is_some_and(|c| c & (1 << CAP_SYS_PTRACE) != 0);
    let uid = nix::unistd::geteuid().as_raw();
    let deny = |why: String, fix: &str| InjectError::PtraceDenied {
        pid,
        why,
        fix: fix.to_string(),
    };
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(0);
    match scope {
        3 => {
            return Err(deny(
                "kernel.yama.ptrace_scope is 3 (no process may be traced until reboot)".into(),
                &format!(
                    "start the program under `leakwatch run {}` instead",
                    target.flag
                ),
            ));
        }
        2 if !cap => {
            return Err(deny(
                "kernel.yama.ptrace_scope is 2 (only a process with CAP_SYS_PTRACE may trace) \
                 and leakwatch has not got it"
                    .into(),
                "run leakwatch as root (sudo)",
            ));
        }
        1 if !cap => {
            return Err(deny(
                "kernel.yama.ptrace_scope is 1 (a process may trace only its own descendants) \
                 and leakwatch lacks CAP_SYS_PTRACE"
                    .into(),
                "run leakwatch as root (sudo), or allow it with `sysctl kernel.yama.ptrace_scope=0`",
            ));
        }
        _ => {}
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let uids: Vec<u32> = field(&status, "Uid:")
        .unwrap_or_default()
        .split_ascii_whitespace()
        .filter_map(|u| u.parse().ok())
        .collect();
    if !cap && uids.iter().any(|&u| u != uid) {
        let theirs = uids.first().copied().unwrap_or(0);
        return Err(deny(
            format!(
                "the process belongs to uid {theirs} and leakwatch runs as uid {uid} without \
                 CAP_SYS_PTRACE"
            ),
            &format!("run leakwatch as uid {theirs} (the process' user) or as root"),
        ));
    }
    Ok(())
}

/// gdb: `LEAKWATCH_GDB`, else the first on PATH.
fn find_gdb(target: &Target) -> Result<PathBuf, InjectError> {
    let (pid, flag) = (target.pid, target.flag);
    if let Some(p) = std::env::var_os(ENV_GDB).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(InjectError::GdbMissing {
                pid,
                flag,
                gdb: format!("{ENV_GDB}={}", p.display()),
            })
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("gdb"))
        .find(|p| p.is_file())
        .ok_or(InjectError::GdbMissing {
            pid,
            flag,
            gdb: "gdb (on PATH)".into(),
        })
}

/// How one attempt ended without the calls made.
pub(crate) enum Attempt {
    /// No thread at a safe point this time.
    Busy(String),
    Failed(InjectError),
}

/// One gdb, driven command by command through its standard input; its
/// output (stdout and stderr in one pipe) read line by line.
pub(crate) struct Gdb {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    marks: u32,
    pid: u32,
    attached: bool,
    /// The gdb thread number the calls are made on (`safe_thread`).
    thread: Option<u32>,
    /// The program's entry point (`AT_ENTRY`): the calls' return address.
    entry: u64,
}

impl Gdb {
    fn start(gdb: &Path, pid: u32) -> Result<Gdb, InjectError> {
        let fail = |e: io::Error| InjectError::Gdb {
            pid,
            detail: format!("cannot start {}: {e}", gdb.display()),
        };
        let (read, write) = nix::unistd::pipe().map_err(|e| fail(e.into()))?;
        let write2: OwnedFd = write.try_clone().map_err(fail)?;
        let mut command = Command::new(gdb);
        command
            .args(["-nx", "-nh", "-q"])
            .stdin(Stdio::piped())
            .stdout(Stdio::from(write))
            .stderr(Stdio::from(write2))
            .env("TERM", "dumb")
            // Its own process group: a Ctrl-C meant for leakwatch must not
            // interrupt a call inside the target.
            .process_group(0);
        // SAFETY: only signal(2) and sigprocmask(2), async-signal-safe,
        // between fork and exec. If leakwatch dies, gdb's writes fail with
        // EPIPE instead of killing it mid-call; its input at EOF, it detaches
        // and quits. The signals `DeferSignals` blocks in leakwatch are
        // unblocked in gdb: its SIGINT is how `run_bounded` stops a
        // `continue` (a Ctrl-C to leakwatch still cannot reach it: its own
        // process group).
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGPIPE, libc::SIG_IGN);
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(fail)?;
        let stdin = child.stdin.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(std::fs::File::from(read)).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut g = Gdb {
            child,
            stdin,
            lines: rx,
            marks: 0,
            pid,
            attached: false,
            thread: None,
            entry: 0,
        };
        for setting in [
            "set pagination off",
            "set confirm off",
            "set width 0",
            "set height 0",
            "set print thread-events off",
            "set print inferior-events off",
            "set auto-solib-add off",
            "set debuginfod enabled off",
            // Separate debug info is not needed (the calls are cast, the
            // safety checks read .dynsym's names), and reading libc's and
            // the loader's keeps the process stopped 150 ms longer.
            "set debug-file-directory /nonexistent/leakwatch-needs-no-debug-info",
            // The program's own signals (a timer, SIGUSR1, SIGCHLD) pass
            // through as they come, never stopping it: a stop inside the
            // call would abandon dlopen half done. A fault stops it, and
            // the call is unwound; a fault elsewhere recurs once resumed.
            "handle all nostop noprint pass",
            "handle SIGSEGV SIGBUS SIGILL SIGFPE SIGABRT stop print nopass",
        ] {
            g.run(setting)?;
        }
        Ok(g)
    }

    /// Runs one command; its output lines.
    fn run(&mut self, command: &str) -> Result<Vec<String>, InjectError> {
        self.marks += 1;
        let mark = format!("@@leakwatch-{}@@", self.marks);
        let pid = self.pid;
        let io_fail = |e: io::Error| InjectError::Gdb {
            pid,
            detail: format!("gdb stopped taking commands ({e})"),
        };
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| io_fail(io::ErrorKind::BrokenPipe.into()))?;
        writeln!(stdin, "{command}\necho \\n{mark}\\n").map_err(io_fail)?;
        stdin.flush().map_err(io_fail)?;
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(&mark) => return Ok(out),
                Ok(line) => {
                    // Its prompts come out even without a terminal.
                    let mut line = line.as_str();
                    while let Some(rest) = line.strip_prefix("(gdb) ") {
                        line = rest;
                    }
                    out.push(line.to_string());
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(InjectError::Gdb {
                        pid,
                        detail: format!("`{command}` did not finish within {COMMAND_TIMEOUT:?}"),
                    });
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(InjectError::Gdb {
                        pid,
                        detail: format!("gdb exited during `{command}`: {}", out.join(" / ")),
                    });
                }
            }
        }
    }

    /// Attaches to the target (reading the symbols of its program and of
    /// `libraries`) and selects a thread at a safe point: when it stopped,
    /// and the thread's id.
    fn enter(
        &mut self,
        target: &Target,
        point: SafePoint,
        libraries: &[&str],
        stop: Stop,
    ) -> Result<(Instant, u32), Attempt> {
        let pid = target.pid;
        let failed = Attempt::Failed;
        // The program's symbols read before the process is stopped, not
        // while it is.
        self.run(&format!("file /proc/{pid}/exe")).map_err(failed)?;
        // From before the attach: the process stops at its start.
        let stopped = Instant::now();
        let out = self.run(&format!("attach {pid}")).map_err(failed)?;
        let text = out.join("\n");
        if text.contains("Operation not permitted") || text.contains("ptrace:") {
            return Err(failed(InjectError::PtraceDenied {
                pid,
                why: format!(
                    "the kernel refused it ({}), though the process' user and Yama allow it: a \
                     container without CAP_SYS_PTRACE, a seccomp profile, or a process that made \
                     itself undumpable",
                    first_line(&text, "ptrace")
                ),
                fix: format!(
                    "run the container with --cap-add SYS_PTRACE, run leakwatch as root, or \
                     start the program under `leakwatch run {}`",
                    target.flag
                ),
            }));
        }
        if !text.contains("Attaching to") {
            return Err(failed(InjectError::Gdb {
                pid,
                detail: format!("it could not attach: {}", text.replace('\n', " / ")),
            }));
        }
        self.attached = true;
        // glibc's symbols (dlopen, dlsym) and unwind tables; the loader's
        // frames are found by address.
        for library in libraries {
            self.run(&format!("sharedlibrary {library}"))
                .map_err(failed)?;
        }
        let thread = match (stop, point.busy_entry) {
            (Stop::Entry, Some(function)) => self.thread_at_entry(target, function)?,
            _ => self.safe_thread(pid, point)?,
        };
        self.entry = auxv_entry(pid)
            .ok_or_else(|| failed(target.refuse("its entry point is not in /proc/PID/auxv")))?;
        Ok((stopped, thread))
    }

    /// The first thread to reach `function`'s entry outside the loader and
    /// signal handlers, selected: its id. The process runs meanwhile, for at
    /// most `ENTRY_TRIES` × `ENTRY_WAIT`; a breakpoint never stays behind.
    fn thread_at_entry(&mut self, target: &Target, function: &str) -> Result<u32, Attempt> {
        let pid = target.pid;
        let loader = loader_range(pid);
        let mut seen = Vec::new();
        for _ in 0..ENTRY_TRIES {
            let set = self
                .run(&format!("tbreak {function}"))
                .map_err(Attempt::Failed)?;
            if !set.iter().any(|l| l.contains("reakpoint")) {
                return Err(Attempt::Failed(target.refuse(format!(
                    "it has no {function} ({}); nothing was done to it",
                    set.join(" ")
                ))));
            }
            let (ran, interrupted) = self.run_bounded("continue", ENTRY_WAIT)?;
            // "Thread 2 "x" hit Temporary breakpoint 1, …", or without
            // "Thread … hit" in a process of one thread.
            if interrupted || !ran.iter().any(|l| l.contains("Temporary breakpoint")) {
                let _ = self.run("delete");
                return Err(Attempt::Busy(format!(
                    "no thread reached {function} within {ENTRY_WAIT:?}"
                )));
            }
            let current = self.run("thread").map_err(Attempt::Failed)?;
            let Some((number, lwp)) = current.iter().find_map(|l| current_thread(l)) else {
                return Err(Attempt::Busy(format!(
                    "gdb named no thread: {}",
                    current.join(" ")
                )));
            };
            let (bt, pc) = self.stack()?;
            // Frame 0 is the function itself: only its callers count.
            match unsafe_frame(bt.get(1..).unwrap_or_default(), pc, loader, None, true) {
                Some(why) => seen.push(format!("thread {lwp} {why}")),
                None => {
                    self.thread = Some(number);
                    return Ok(lwp);
                }
            }
        }
        Err(Attempt::Busy(seen.join("; ")))
    }

    /// The selected thread's backtrace (64 frames at most) and its pc.
    fn stack(&mut self) -> Result<(Vec<String>, u64), Attempt> {
        let bt = self.run("bt 64").map_err(Attempt::Failed)?;
        let pc = self
            .run("p/x $pc")
            .map_err(Attempt::Failed)?
            .iter()
            .find_map(|l| hex_after(l, "= "))
            .unwrap_or(0);
        Ok((bt, pc))
    }

    /// Runs `command` (one that resumes the process), interrupting it after
    /// `wait`: its output, and whether it was interrupted (gdb stops the
    /// process on SIGINT whatever `handle` says).
    fn run_bounded(
        &mut self,
        command: &str,
        wait: Duration,
    ) -> Result<(Vec<String>, bool), Attempt> {
        let gdb = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let (done, rx) = mpsc::channel::<()>();
        let interrupter = std::thread::spawn(move || {
            if rx.recv_timeout(wait) == Err(RecvTimeoutError::Timeout) {
                let _ = nix::sys::signal::kill(gdb, nix::sys::signal::Signal::SIGINT);
                return true;
            }
            false
        });
        let out = self.run(command);
        let _ = done.send(());
        let interrupted = interrupter.join().unwrap_or(true);
        Ok((out.map_err(Attempt::Failed)?, interrupted))
    }

    /// The gdb thread number of a thread stopped at a safe point, selected.
    fn safe_thread(&mut self, pid: u32, point: SafePoint) -> Result<u32, Attempt> {
        let threads = self.run("info threads").map_err(Attempt::Failed)?;
        let loader = loader_range(pid);
        let mut seen = Vec::new();
        for (number, lwp) in threads.iter().filter_map(|l| thread_line(l)) {
            let syscall = std::fs::read_to_string(format!("/proc/{pid}/task/{lwp}/syscall"))
                .ok()
                .and_then(|s| s.split_ascii_whitespace().next()?.parse::<i64>().ok())
                .unwrap_or(-1);
            let idle = IDLE_SYSCALLS.contains(&syscall) || syscall == FUTEX;
            if !idle {
                seen.push(match syscall {
                    -1 => format!("thread {lwp} running"),
                    n => format!("thread {lwp} in system call {n}"),
                });
                continue;
            }
            self.run(&format!("thread {number}"))
                .map_err(Attempt::Failed)?;
            let (bt, pc) = self.stack()?;
            match unsafe_frame(
                &bt,
                pc,
                loader,
                (syscall == FUTEX).then_some(point.idle_waits),
                false,
            ) {
                Some(why) => seen.push(format!("thread {lwp} {why}")),
                None => {
                    self.thread = Some(number);
                    return Ok(lwp);
                }
            }
        }
        Err(Attempt::Busy(seen.join("; ")))
    }

    /// Calls `function` (a symbol, or an address) with `args` on the safe thread, by hand
    /// (see the module docs): its return value (rax), or gdb's words when it could not be
    /// made or ended in a fault. The thread's registers are put back either way.
    pub(crate) fn invoke(&mut self, function: &str, args: &[Arg]) -> Result<u64, String> {
        const REGS: [&str; 19] = [
            "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
            "r12", "r13", "r14", "r15", "rip", "eflags", "orig_rax",
        ];
        const ARG_REGS: [&str; 6] = ["rdi", "rsi", "rdx", "rcx", "r8", "r9"];
        let thread = self.thread.ok_or("no thread was chosen")?;
        let address = match function.strip_prefix("0x") {
            Some(_) => function.to_string(),
            None => {
                let out = self.text(&format!("print/x (unsigned long)&{function}"))?;
                hex_after(&out, "= ")
                    .map(|a| format!("{a:#x}"))
                    .ok_or(out)?
            }
        };
        // Commands go to gdb in three batches (save, set up, put back) and the call, not
        // one by one: each round trip kept the process stopped a little longer.
        let save: Vec<String> = REGS.iter().map(|r| format!("set $lw_{r} = ${r}")).collect();
        self.text(&save.join("\n"))?;
        // Below the thread's stack and its red zone: strings at the scratch area's bottom
        // upwards, the call's stack from just under it downwards.
        // Frame 0: registers are written in the selected frame, and only the
        // innermost one's can be ("Attempt to assign to an unmodifiable value").
        let mut setup = vec![
            "frame 0".to_string(),
            "set $lw_scratch = ((unsigned long)$rsp - 8192) & ~15".to_string(),
        ];
        let mut offset = 0;
        for (arg, reg) in args.iter().zip(ARG_REGS) {
            match arg {
                Arg::Int(v) => setup.push(format!("set ${reg} = {v:#x}")),
                Arg::Str(text) => {
                    let len = text.len() + 1;
                    setup.push(format!(
                        "set {{char[{len}]}}($lw_scratch + {offset}) = \"{text}\""
                    ));
                    setup.push(format!("set ${reg} = $lw_scratch + {offset}"));
                    offset += len.next_multiple_of(16);
                }
            }
        }
        // At the function's first instruction rsp + 8 is 16-aligned, the return address at
        // rsp; a thread stopped in a system call would restart it there unless orig_rax
        // says there is none.
        let entry = self.entry;
        setup.extend([
            "set $rsp = $lw_scratch - 8".to_string(),
            format!("set *(unsigned long*)$rsp = {entry:#x}"),
            format!("set $rip = {address}"),
            "set $orig_rax = -1".to_string(),
            format!("tbreak *{entry:#x}"),
        ]);
        let result = self.text(&setup.join("\n")).and_then(|_| {
            let ran = self.text("continue");
            self.text(&format!("thread {thread}"))?;
            let ran = ran?;
            if !ran.contains("Temporary breakpoint") {
                return Err(format!("it did not return: {ran}"));
            }
            let out = self.text("print/x $rax")?;
            hex_after(&out, "= ").ok_or(out)
        });
        // Put back: rip before orig_rax (a system call stopped in restarts as it would have).
        let restore: Vec<String> = ["delete", "frame 0"]
            .into_iter()
            .map(String::from)
            .chain(REGS.iter().map(|r| format!("set ${r} = $lw_{r}")))
            .chain(std::iter::once("frame 0".to_string()))
            .collect();
        self.text(&restore.join("\n"))?;
        result
    }

    /// Runs one command that must succeed; its output in one line.
    pub(crate) fn text(&mut self, command: &str) -> Result<String, String> {
        let out = self.run(command).map_err(|e| e.to_string())?.join(" ");
        let failed = [
            "No symbol",
            "Cannot access memory",
            "Couldn't",
            "not running",
            "Attempt to assign",
            "syntax error",
        ];
        match failed.iter().find(|f| out.contains(*f)) {
            Some(_) => Err(out),
            None => Ok(out),
        }
    }

    fn detach(&mut self) {
        if self.attached {
            let _ = self.run("detach");
            self.attached = false;
        }
    }

    /// Detaches if attached and waits for gdb to exit (closing its input
    /// makes it quit, which detaches too).
    fn finish(mut self) {
        self.detach();
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "quit");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // SIGTERM: gdb detaches from what it attached to, then exits; a gdb
        // that does not (stuck waiting on a call that never returns) is
        // killed, which detaches too: leakwatch must not hang on it.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An argument of a call made by hand: a number, or a string written into the target.
pub(crate) enum Arg<'a> {
    Int(u64),
    Str(&'a str),
}

/// The program's entry point, from its auxiliary vector (`AT_ENTRY`).
fn auxv_entry(pid: u32) -> Option<u64> {
    const AT_ENTRY: u64 = 9;
    let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
    auxv.chunks_exact(16).find_map(|pair| {
        let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
        (word(&pair[..8]) == AT_ENTRY).then(|| word(&pair[8..]))
    })
}

pub(crate) fn first_line(text: &str, containing: &str) -> String {
    text.lines()
        .find(|l| l.contains(containing))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// `* 1    Thread 0x7f… (LWP 4242) "name" 0x… in …` → (1, 4242); without
/// libthread_db gdb writes `1    LWP 4242 "name" …`, or `process 4242` for
/// a process of one thread.
fn thread_line(line: &str) -> Option<(u32, u32)> {
    number_and_lwp(line.trim_start().trim_start_matches('*').trim_start())
}

/// `[Current thread is 3 (Thread 0x7f… (LWP 4243))]` → (3, 4243).
fn current_thread(line: &str) -> Option<(u32, u32)> {
    number_and_lwp(line.split_once("Current thread is ")?.1)
}

/// gdb's thread number (the first word) and the thread's id (after `LWP `,
/// or `process ` in a process of one thread).
fn number_and_lwp(text: &str) -> Option<(u32, u32)> {
    let number = text.split_ascii_whitespace().next()?.parse().ok()?;
    let lwp = text
        .split_once("LWP ")
        .or_else(|| text.split_once("process "))?
        .1;
    let digits = lwp.find(|c: char| !c.is_ascii_digit()).unwrap_or(lwp.len());
    Some((number, lwp[..digits].parse().ok()?))
}

pub(crate) fn hex_after(line: &str, after: &str) -> Option<u64> {
    let h = line.split_once(after)?.1.trim();
    u64::from_str_radix(h.trim_start_matches("0x"), 16).ok()
}

/// The dynamic loader's address range in `pid`.
fn loader_range(pid: u32) -> (u64, u64) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    maps.lines()
        .filter(|l| l.contains("/ld-linux"))
        .filter_map(|l| {
            let (a, b) = l.split_ascii_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .fold((u64::MAX, 0), |(lo, hi), (a, b)| (lo.min(a), hi.max(b)))
}

/// Why a thread stopped with backtrace `bt` at `pc` must not make the
/// call, if it must not: a signal handler on its stack, a frame in the
/// loader or the allocator, or a futex wait that is not a condition, join
/// or semaphore wait.
fn unsafe_frame(
    bt: &[String],
    pc: u64,
    loader: (u64, u64),
    futex: Option<&[&str]>,
    callers: bool,
) -> Option<String> {
    let unsafe_names = &UNSAFE_FRAMES[if callers { CALLER_FRAMES } else { 0 }..];
    let in_loader = |a: u64| (loader.0..loader.1).contains(&a);
    if in_loader(pc) {
        return Some("is in the dynamic loader".into());
    }
    let mut waits = false;
    for line in bt.iter().filter(|l| l.starts_with('#')) {
        if line.contains("<signal handler called>") {
            return Some("is in a signal handler".into());
        }
        if line
            .split_ascii_whitespace()
            .nth(1)
            .and_then(|a| a.strip_prefix("0x"))
            .and_then(|a| u64::from_str_radix(a, 16).ok())
            .is_some_and(in_loader)
        {
            return Some("has a frame in the dynamic loader".into());
        }
        let function = frame_function(line);
        if let Some(f) = unsafe_names.iter().find(|f| function.contains(**f)) {
            return Some(format!("has a frame in {function} ({f})"));
        }
        waits |= futex.is_some_and(|idle| idle.iter().any(|w| function.contains(w)));
    }
    (futex.is_some() && !waits).then(|| "waits on a lock (futex), not a condition".into())
}

/// The function of a backtrace line: `#1  0x… in name (args) at …` or
/// `#0  name (args) at …`.
fn frame_function(line: &str) -> &str {
    let rest = line.split_once("  ").map_or(line, |(_, r)| r).trim_start();
    let rest = rest.split_once(" in ").map_or(rest, |(_, r)| r);
    rest.split([' ', '(']).next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdb_thread_lines_give_number_and_lwp() {
        let line = "* 1    Thread 0x7f54c8c2a740 (LWP 21760) \"attach_leaker\" 0x00007f in clock_nanosleep ()";
        assert_eq!(thread_line(line), Some((1, 21760)));
        assert_eq!(
            thread_line("  12   LWP 99 \"x\" 0x1 in f ()"),
            Some((12, 99))
        );
        assert_eq!(
            thread_line("* 1    process 7 \"x\" 0x1 in f ()"),
            Some((1, 7))
        );
        assert_eq!(thread_line("  Id   Target Id   Frame"), None);
    }

    #[test]
    fn only_an_idle_thread_outside_malloc_the_loader_and_handlers_is_safe() {
        let bt = |lines: &[&str]| lines.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let sleeping = bt(&[
            "#0  __GI___clock_nanosleep (clock_id=0) at clock_nanosleep.c:71",
            "#1  0x00007f54c8e3ee53 in __GI___nanosleep (req=0x7fff) at nanosleep.c:25",
            "#2  0x0000559d87fd91ee in main () at attach_leaker.c:63",
        ]);
        assert_eq!(
            unsafe_frame(&sleeping, 0x7f00, (0x1000, 0x2000), None, false),
            None
        );
        assert!(unsafe_frame(&sleeping, 0x1800, (0x1000, 0x2000), None, false).is_some());
        let handler = bt(&[
            "#0  0x00007f in __GI___poll () from libc.so.6",
            "#1  <signal handler called>",
            "#2  0x0000559d in main ()",
        ]);
        assert!(
            unsafe_frame(&handler, 0x7f00, (0, 0), None, false)
                .unwrap()
                .contains("signal")
        );
        let in_malloc = bt(&[
            "#0  0x00007f in __lll_lock_wait_private () from libc.so.6",
            "#1  0x00007f in _int_free () from libc.so.6",
            "#2  0x0000559d in main ()",
        ]);
        assert!(unsafe_frame(&in_malloc, 0x7f00, (0, 0), Some(IDLE_WAITS), false).is_some());
        let cond = bt(&[
            "#0  0x00007f in __futex_abstimed_wait_common () from libc.so.6",
            "#1  0x00007f in ___pthread_cond_wait () from libc.so.6",
            "#2  0x0000559d in worker ()",
        ]);
        assert_eq!(
            unsafe_frame(&cond, 0x7f00, (0, 0), Some(IDLE_WAITS), false),
            None
        );
        let locked = bt(&[
            "#0  0x00007f in __lll_lock_wait () from libc.so.6",
            "#1  0x55 in main ()",
        ]);
        assert!(unsafe_frame(&locked, 0x7f00, (0, 0), Some(IDLE_WAITS), false).is_some());
    }

    /// At malloc's entry only the callers count: an allocation wrapper is
    /// fine, the loader or a signal handler is not.
    #[test]
    fn at_a_functions_entry_only_its_callers_are_judged() {
        let bt = |lines: &[&str]| lines.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let wrapped = bt(&["#1  0x55 in g_malloc ()", "#2  0x55 in main ()"]);
        assert_eq!(unsafe_frame(&wrapped, 0x7f00, (0, 0), None, true), None);
        assert!(unsafe_frame(&wrapped, 0x7f00, (0, 0), None, false).is_some());
        let loading = bt(&["#1  0x7f in _dl_map_object ()", "#2  0x55 in main ()"]);
        assert!(unsafe_frame(&loading, 0x7f00, (0, 0), None, true).is_some());
        let handler = bt(&["#1  <signal handler called>", "#2  0x55 in main ()"]);
        assert!(unsafe_frame(&handler, 0x7f00, (0, 0), None, true).is_some());
    }

    #[test]
    fn the_current_thread_is_read_from_gdbs_words() {
        let line = "[Current thread is 3 (Thread 0x7f54c8c2a740 (LWP 21762))]";
        assert_eq!(current_thread(line), Some((3, 21762)));
        assert_eq!(
            current_thread("[Current thread is 1 (process 7)]"),
            Some((1, 7))
        );
        assert_eq!(current_thread("No thread selected"), None);
    }
}
