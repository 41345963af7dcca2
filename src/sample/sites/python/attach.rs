//! `attach --py-sites PID`: the bootstrap run in a CPython already running,
//! without a restart. gdb enters the process (`enter`), and one of its
//! threads stopped at a safe point calls `PyGILState_Ensure`, then
//! `PyRun_SimpleString` of one expression that executes the bootstrap
//! from D with `_leakwatch_attach` = (D, frames, leakwatch's pid), then
//! `PyGILState_Release` — the C API's way for any thread to run Python
//! code (pyrasite's; memray's attach runs its own library the same way).
//! The bootstrap starts tracemalloc and its answering thread there (growth
//! counts from the attach; types are whole from the first answer), and
//! registers its fork hook, so children forked afterwards answer too. The
//! Python processes below the target that were forked before the attach
//! are entered one by one the same way.
//!
//! The thread must not be waiting for the GIL: CPython waits for it on a
//! pthread condition, and a second wait of the same thread on the same
//! condition can deadlock glibc's condition variable. A futex wait counts
//! as idle here only under a semaphore wait (how CPython's own locks wait:
//! `Lock.acquire`, `Thread.join`, `queue.get`). While the calls run every
//! thread runs, so `PyGILState_Ensure` gets the GIL from whichever thread
//! holds it within the switch interval (5 ms).
//!
//! At the end [`PyAttached::detach`] asks each process to stop (tracemalloc
//! stopped, its traces freed, the endpoint closed); a session whose
//! leakwatch was killed ends by itself within 5 s (the answering thread
//! checks that its leakwatch is alive), and a later attach takes over
//! whatever copy a process still runs.
//!
//! `sys.remote_exec` (Python 3.14, PEP 768) would need no debugger; it is
//! not used yet: no 3.14 interpreter to test it against here.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use super::diagnose::looks_like_python;
use super::{PySites, PySitesError, rows::SiteSession};
use crate::sample::rows::Context;
use crate::sample::sites::Collected;
pub use crate::sample::sites::enter::Entered;
use crate::sample::sites::enter::{self, Arg, Attempt, Gdb, InjectError, SafePoint, Stop, Target};
use crate::store::{Row, SiteSource};

/// The option entering a process for the bootstrap.
const FLAG: &str = "--py-sites";
/// Futex waits a Python thread idles in safely: CPython's locks (3.7–3.12
/// wait on a semaphore where the platform has them, as glibc does).
const PY_IDLE_WAITS: &[&str] = &["sem_wait", "sem_timedwait", "sem_clockwait"];
/// Python processes below the target entered besides it; a larger pool is
/// entered up to this many (each entry stops one process for a moment).
const MAX_DESCENDANTS: usize = 32;
/// How long one answer or one detach may take (a snapshot of a large heap
/// takes seconds; see `AnswerError::Timeout`).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
/// The least time between two askings, and the multiple of the last
/// asking's time kept between two: answering costs the process CPU for as
/// long as it takes, so at 20× it spends at most 5% of one core on it.
const ASK_EVERY: Duration = Duration::from_secs(2);
const ASK_SPACING: u32 = 20;

/// Why `attach --py-sites` could not start.
#[derive(Debug, thiserror::Error)]
pub enum PyAttachError {
    #[error(transparent)]
    Setup(#[from] PySitesError),
    #[error(transparent)]
    Enter(#[from] InjectError),
}

/// The bootstrap is running in the target (and the processes below it
/// that could be entered).
#[derive(Debug)]
pub struct PyAttached {
    sites: PySites,
    session: SiteSession,
    pub pid: u32,
    /// How each process was entered, the target first.
    pub entered: Vec<(u32, Entered<()>)>,
    /// Python processes below the target that could not be entered, with why.
    pub refused: Vec<(u32, String)>,
    last: Option<Instant>,
    took: Duration,
}

impl PyAttached {
    /// Creates D with the bootstrap and runs it in `pid` (the target must
    /// be entered; its Python descendants are tried, each refusal a note).
    pub fn inject(pid: u32, frames: usize) -> Result<PyAttached, PyAttachError> {
        let mut sites = PySites::prepare(frames)?;
        sites.hand_to(pid)?;
        let first = enter_one(pid, &sites)?;
        let mut attached = PyAttached {
            sites,
            session: SiteSession::attached(pid),
            pid,
            entered: vec![(pid, first)],
            refused: Vec::new(),
            last: None,
            took: Duration::ZERO,
        };
        for child in python_descendants(pid).into_iter().take(MAX_DESCENDANTS) {
            match enter_one(child, &attached.sites) {
                Ok(entered) => attached.entered.push((child, entered)),
                Err(e) => attached.refused.push((child, e.to_string())),
            }
        }
        Ok(attached)
    }

    /// Whether this sample asks for the sites (`edge`: the first or last).
    pub fn due(&self, edge: bool) -> bool {
        let spacing = ASK_EVERY.max(self.took * ASK_SPACING);
        edge || self.last.is_none_or(|t| t.elapsed() >= spacing)
    }

    /// The sites and types of every process that answers (the entered ones
    /// and the children they forked since), as rows of this sample.
    pub fn collect(&mut self, ctx: &Context, sampled: &[Row]) -> Collected {
        let started = Instant::now();
        let mut got = self
            .session
            .collect(&self.sites, ctx, sampled, ANSWER_TIMEOUT);
        self.took = started.elapsed();
        self.last = Some(Instant::now());
        for row in &mut got.rows {
            row.site_source = Some(SiteSource::Python);
        }
        got
    }

    /// At the end: each process stops tracing and closes its endpoint.
    pub fn detach(&self) {
        for pid in self.sites.endpoints() {
            self.sites.detach(pid, ANSWER_TIMEOUT);
        }
    }
}

/// When no thread is idle: the entry of glibc's malloc, which a busy
/// interpreter reaches constantly (every block over 512 bytes, every
/// arena) and which is never inlined, unlike CPython's own allocator in an
/// LTO build.
const BUSY_ENTRY: &str = "malloc";
/// How long a queued bootstrap may take to start (the main thread runs
/// pending calls between two bytecodes; a busy one within milliseconds).
const QUEUED_WAIT: Duration = Duration::from_secs(10);

/// Runs the bootstrap in `pid`, answering in `sites`' directory.
pub(super) fn enter_one(pid: u32, sites: &PySites) -> Result<Entered<()>, InjectError> {
    let target = Target::new(pid, FLAG);
    enter::preflight(&target)?;
    preflight(&target)?;
    let code = bootstrap_call(&target, sites)?;
    let point = SafePoint {
        idle_waits: PY_IDLE_WAITS,
        doing: "the bootstrap runs",
        busy_entry: Some(BUSY_ENTRY),
    };
    // The interpreter's symbols: in the program (Debian's python3) or in
    // libpython; glibc's for the safety checks' frame names.
    let entered = enter::enter(
        &target,
        point,
        &["libpython", "libc\\.so"],
        |gdb, stop| match stop {
            Stop::Idle => run_bootstrap(gdb, &target, &code),
            Stop::Entry => queue_bootstrap(gdb, &target, &code),
        },
    )?;
    // Queued, it runs when the main thread next checks for pending calls.
    let deadline = Instant::now() + QUEUED_WAIT;
    while !sites.socket_path(pid).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if sites.socket_path(pid).exists() {
        return Ok(entered);
    }
    let said = read_err(&sites.dir().join(format!("{pid}.err"))).unwrap_or_else(|| {
        "it gave no reason (it could not read the bootstrap, or its main thread never \
             reached a point to run it)"
            .into()
    });
    Err(target.refuse(format!(
        "the bootstrap does not answer: {said}; the process runs on as before"
    )))
}

/// What the bootstrap wrote in D/<pid>.err: its first 4 KiB, first line,
/// escaped (the process wrote it).
fn read_err(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    let line = text
        .lines()
        .next()?
        .trim()
        .trim_start_matches("leakwatch: ");
    Some(crate::escape::inert(line).into_owned())
}

/// The checks before gdb: a CPython of 3.7 or later, in this mount
/// namespace (it must reach D).
fn preflight(target: &Target) -> Result<(), InjectError> {
    let pid = target.pid;
    let refuse = |why: String| target.refuse(format!("{why}; nothing was done to it"));
    let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| {
        refuse(format!(
            "its mappings cannot be read ({e}); run leakwatch as its user or as root"
        ))
    })?;
    let python = std::iter::once(exe.as_path())
        .chain(
            maps.lines()
                .filter_map(|l| l.split_once('/').map(|(_, p)| Path::new(p))),
        )
        .find(|p| looks_like_python(p.as_os_str()));
    let Some(python) = python else {
        return Err(refuse(format!(
            "it is not CPython (its program is {}); --py-sites runs its bootstrap in CPython \
             3.7 or later",
            exe.display()
        )));
    };
    if let Some((major, minor)) = version_of(python).filter(|&v| v < (3, 7)) {
        return Err(refuse(format!(
            "it runs Python {major}.{minor}; --py-sites needs 3.7 or later"
        )));
    }
    let namespace = |p: &str| fs::read_link(format!("/proc/{p}/ns/mnt")).ok();
    if namespace("self") != namespace(&pid.to_string()) {
        return Err(refuse(
            "it runs in another mount namespace (a container): it cannot reach the bootstrap's \
             directory; run leakwatch inside the container"
                .into(),
        ));
    }
    if maps.contains("ld-musl") {
        return Err(refuse(
            "it runs on musl: gdb's calls here assume glibc's threads".into(),
        ));
    }
    Ok(())
}

/// `3.11` from `…/python3.11` or `…/libpython3.11.so.1.0`.
fn version_of(path: &Path) -> Option<(u32, u32)> {
    let name = path.file_name()?.to_str()?;
    let rest = &name[name.find("python")? + "python".len()..];
    let (major, rest) = rest.split_once('.')?;
    let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The one Python statement the target runs: the bootstrap executed from D
/// in a namespace of its own (nothing is bound in `__main__`), any error
/// swallowed (the bootstrap says its own in D/<pid>.err): a queued call that
/// failed would surface in the program's main thread as a SystemError.
fn bootstrap_call(target: &Target, sites: &PySites) -> Result<String, InjectError> {
    let boot = sites.boot_dir().join("sitecustomize.py");
    let text = |p: &Path| -> Result<String, InjectError> {
        match p.to_str() {
            Some(t) if !t.contains(['\'', '"', '\\', '\n']) => Ok(t.to_string()),
            _ => Err(target.refuse(format!(
                "the path {} cannot be passed to Python as it is; set TMPDIR to a plain \
                 directory such as /tmp",
                p.display()
            ))),
        }
    };
    let (boot, dir) = (text(&boot)?, text(sites.dir())?);
    Ok(format!(
        "with __import__('contextlib').suppress(Exception): exec(compile(open('{boot}','rb')\
         .read(),'{boot}','exec'),{{'__name__':'_leakwatch_attached','__file__':'{boot}',\
         '_leakwatch_attach':('{dir}',{frames},{me})}})",
        frames = sites.frames(),
        me = std::process::id(),
    ))
}

/// On the entered thread: the GIL, the bootstrap, the GIL given back (also
/// when the bootstrap failed).
fn run_bootstrap(gdb: &mut Gdb, target: &Target, code: &str) -> Result<(), Attempt> {
    let refuse = |why: String| Attempt::Failed(target.refuse(why));
    let state = gdb.invoke("PyGILState_Ensure", &[]).map_err(|t| {
        if t.contains("No symbol") {
            refuse(
                "it has no PyGILState_Ensure: not CPython, or an interpreter built without its \
                 C API's symbols; nothing was done to it"
                    .into(),
            )
        } else {
            refuse(format!("gdb could not take the GIL: {t}"))
        }
    })?;
    let ran = gdb.invoke("PyRun_SimpleString", &[Arg::Str(code)]);
    // PyGILState_STATE is an int enum.
    let released = gdb.invoke("PyGILState_Release", &[Arg::Int(state & 0xffff_ffff)]);
    // An int in eax: 0, or -1 when the code raised (its traceback printed
    // on the process' stderr).
    match ran.map(|rax| rax as u32 as i32) {
        Ok(0) => {}
        Ok(_) => {
            return Err(refuse(
                "the bootstrap raised an exception (its traceback is on the process' stderr)"
                    .into(),
            ));
        }
        Err(t) => return Err(refuse(format!("the bootstrap could not be run: {t}"))),
    }
    released.map_err(|t| refuse(format!("the GIL could not be given back: {t}")))?;
    Ok(())
}

/// On a thread at the entry of [`BUSY_ENTRY`] (in the middle of the
/// interpreter's work, the GIL perhaps held: no Python code may run here,
/// and only calls that take no lock the thread could hold): the statement
/// copied into memory of its own (`malloc`; never freed, a few hundred
/// bytes) and queued with `Py_AddPendingCall(PyRun_SimpleString, it)`, which
/// any thread may call; the main thread runs it at its next safe point.
fn queue_bootstrap(gdb: &mut Gdb, target: &Target, code: &str) -> Result<(), Attempt> {
    let refuse = |why: String| Attempt::Failed(target.refuse(why));
    let len = code.len() + 1;
    let text = gdb
        .invoke("malloc", &[Arg::Int(len as u64)])
        .map_err(|t| refuse(format!("gdb could not call malloc: {t}")))?;
    if text == 0 {
        return Err(refuse("malloc failed in it".into()));
    }
    gdb.text(&format!("set {{char[{len}]}}{text:#x} = \"{code}\""))
        .map_err(|t| refuse(format!("the bootstrap could not be written: {t}")))?;
    let run = gdb
        .text("print/x (unsigned long)&PyRun_SimpleString")
        .ok()
        .and_then(|out| enter::hex_after(&out, "= "))
        .ok_or_else(|| refuse("it has no PyRun_SimpleString".into()))?;
    let queued = gdb
        .invoke("Py_AddPendingCall", &[Arg::Int(run), Arg::Int(text)])
        .map_err(|t| refuse(format!("gdb could not call Py_AddPendingCall: {t}")))?;
    match queued as u32 as i32 {
        0 => Ok(()),
        _ => Err(refuse(
            "its queue of pending calls is full; try again in a moment".into(),
        )),
    }
}

/// The Python processes below `pid` now (children, theirs, …), ascending.
fn python_descendants(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(u32, u32)> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| {
            let stat = fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let ppid = stat.rsplit_once(')')?.1.split_ascii_whitespace().nth(1)?;
            Some((p, ppid.parse().ok()?))
        })
        .collect();
    let mut below = BTreeSet::from([pid]);
    loop {
        let before = below.len();
        for &(p, ppid) in &parents {
            if below.contains(&ppid) {
                below.insert(p);
            }
        }
        if below.len() == before {
            break;
        }
    }
    below.remove(&pid);
    below
        .into_iter()
        .filter(|p| {
            fs::read_link(format!("/proc/{p}/exe"))
                .is_ok_and(|exe| looks_like_python(exe.as_os_str()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_read_from_the_interpreter_or_its_library() {
        assert_eq!(version_of(Path::new("/usr/bin/python3.11")), Some((3, 11)));
        assert_eq!(
            version_of(Path::new("/usr/lib/libpython3.9.so.1.0")),
            Some((3, 9))
        );
        assert_eq!(version_of(Path::new("/usr/bin/python2.7")), Some((2, 7)));
        assert_eq!(version_of(Path::new("/usr/bin/python3")), None);
    }

    #[test]
    fn the_bootstrap_call_binds_nothing_in_main_and_refuses_quotes() {
        let parent = tempfile::tempdir_in("/tmp").unwrap();
        let sites = PySites::prepare_in(parent.path(), 2).unwrap();
        let target = Target {
            pid: 1,
            comm: "x".into(),
            flag: FLAG,
        };
        let code = bootstrap_call(&target, &sites).unwrap();
        assert!(
            code.starts_with("with __import__('contextlib').suppress(Exception): exec("),
            "{code}"
        );
        assert!(!code.contains('"') && !code.contains('\n'));
        assert!(
            code.contains(&format!(",2,{})", std::process::id())),
            "{code}"
        );
        let odd = tempfile::Builder::new()
            .prefix("it's")
            .tempdir_in("/tmp")
            .unwrap();
        let sites = PySites::prepare_in(odd.path(), 1).unwrap();
        let err = bootstrap_call(&target, &sites).unwrap_err().to_string();
        assert!(err.contains("cannot be passed to Python"), "{err}");
    }
}
