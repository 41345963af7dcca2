//! `attach --native-sites PID`: loads the shim into a process leakwatch did
//! not start, as `heaptrack -p` does. gdb enters the process (`enter`: a
//! thread stopped at a safe point makes the calls), that thread calls
//! `dlopen` of the shim and then its `leakwatch_inject` (the interval and
//! the directory it keeps its file in given by the call, not the
//! environment), and gdb detaches; the shim redirects the GOT entries of
//! the allocation functions itself (`shim/src/inject.rs`). Before gdb, the
//! process' mappings are checked: a program the shim cannot serve (musl,
//! static, another allocator) is refused with the reason. A shim there
//! already (an earlier attach's, running or stopped, or `run`'s preloaded
//! one) is taken over: its own file is opened again and the call starts
//! its tables afresh in this session's directory.

use std::path::Path;
use std::time::Duration;

use crate::sample::sites::enter::{self, Arg, Attempt, Gdb, IDLE_WAITS, SafePoint, Target};
pub use crate::sample::sites::enter::{ENV_GDB, InjectError};

/// The option entering a process for the shim.
const FLAG: &str = "--native-sites";

/// The shim is in the target and sampling.
#[derive(Debug, Clone)]
pub struct Injected {
    /// How long the target was stopped under gdb, from attach to detach.
    pub pause: Duration,
    /// GOT entries the shim redirected (0 when taken over).
    pub entries: u32,
    /// The shim was there already (an earlier session's) and serves this one.
    pub taken_over: bool,
    /// The thread (its id) that made the calls.
    pub thread: u32,
    /// Where it made them: idle in a system call, or at a call to malloc.
    pub stop: enter::Stop,
}

/// Loads `shim` into `pid`, its file in `dir` and sampling once per
/// `interval_bytes`.
pub fn inject(
    pid: u32,
    shim: &Path,
    dir: &Path,
    interval_bytes: u64,
) -> Result<Injected, InjectError> {
    let target = Target::new(pid, FLAG);
    enter::preflight(&target)?;
    // The resident shim is opened by the name it was loaded by, so that
    // dlopen returns it rather than loading a second copy.
    let resident = preflight(&target)?;
    let shim = resident.as_deref().unwrap_or(shim);
    let quoted = |p: &Path| -> Result<String, InjectError> {
        let text = p.to_string_lossy();
        if text.contains(['"', '\\', '\n']) || p.to_str().is_none() {
            return Err(target.refuse(format!(
                "the path {} cannot be passed to gdb as it is",
                p.display()
            )));
        }
        Ok(text.into_owned())
    };
    let (shim, dir) = (quoted(shim)?, quoted(dir)?);
    let config = format!("{interval_bytes}:{dir}");
    let point = SafePoint {
        idle_waits: IDLE_WAITS,
        doing: "the shim is loaded",
        // A process that allocates without pause is entered at malloc's
        // entry (outside it: dlopen may allocate there).
        busy_entry: Some("malloc"),
    };
    // glibc's symbols (dlopen, dlsym) and unwind tables; the loader's
    // frames are found by address.
    let entered = enter::enter(&target, point, &["libc\\.so"], |gdb, _| {
        load_shim(gdb, &target, &shim, &config)
    })?;
    Ok(Injected {
        pause: entered.pause,
        entries: entered.value.unwrap_or(0),
        taken_over: entered.value.is_none(),
        thread: entered.thread,
        stop: entered.stop,
    })
}

/// The checks of the process' mappings before any debugger: a program the
/// shim can serve (glibc, dynamically linked, glibc's malloc); the path of
/// the shim it has already, if any.
fn preflight(target: &Target) -> Result<Option<std::path::PathBuf>, InjectError> {
    let pid = target.pid;
    let refuse = |why: String| target.refuse(format!("{why}; nothing was done to it"));
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| {
        refuse(format!(
            "its mappings cannot be read ({e}); run leakwatch as its user or as root"
        ))
    })?;
    let has = |name: &str| maps.lines().any(|l| l.contains(name));
    let resident = maps
        .lines()
        .filter_map(|l| l.splitn(6, ' ').nth(5).map(str::trim_start))
        .find(|path| path.contains(super::SHIM_STEM));
    if let Some(path) = resident.filter(|p| p.ends_with(" (deleted)")) {
        return Err(refuse(format!(
            "it has a leakwatch shim from an earlier session whose file was deleted since \
             ({}): a second copy cannot be loaded beside it; restart it to attach with \
             --native-sites, or attach without",
            crate::escape::inert(path)
        )));
    }
    if has("ld-musl") {
        return Err(refuse(
            "it runs on musl, not glibc: the shim forwards to glibc's allocator".into(),
        ));
    }
    if !has("/libc.so.6") {
        return Err(refuse(
            "it has no glibc loaded (a statically linked program, or another C library): the \
             shim can only be loaded into a dynamically linked glibc program (a static one has \
             no dlopen and no GOT to redirect)"
                .into(),
        ));
    }
    for other in [
        "libjemalloc",
        "libtcmalloc",
        "libmimalloc",
        "libhoard",
        "libasan",
    ] {
        if has(other) {
            return Err(refuse(format!(
                "it allocates through {other}, not glibc's malloc: the shim forwards to glibc \
                 and would free that allocator's blocks"
            )));
        }
    }
    Ok(resident.map(std::path::PathBuf::from))
}

/// On the entered thread: `dlopen` of the shim, then its
/// `leakwatch_inject(config)`; the GOT entries it redirected, or `None`
/// when a shim already there took this session over.
fn load_shim(
    gdb: &mut Gdb,
    target: &Target,
    shim: &str,
    config: &str,
) -> Result<Option<u32>, Attempt> {
    let refuse = |why: String| Attempt::Failed(target.refuse(why));
    let handle = match gdb.invoke("dlopen", &[Arg::Str(shim), Arg::Int(2)]) {
        Ok(h) => h,
        Err(text) if text.contains("No symbol") => gdb
            .invoke(
                "__libc_dlopen_mode",
                &[Arg::Str(shim), Arg::Int(0x8000_0002)],
            )
            .map_err(|t| refuse(format!("its C library has no dlopen ({t})")))?,
        Err(text) => return Err(refuse(format!("gdb could not call dlopen: {text}"))),
    };
    if handle == 0 {
        let why = match gdb.invoke("dlerror", &[]) {
            Ok(text) if text != 0 => gdb
                .text(&format!("print (char*){text:#x}"))
                .unwrap_or_default(),
            _ => String::new(),
        };
        let hint = if why.contains("static TLS") {
            ": the room glibc keeps for the thread-locals of objects loaded later \
             (glibc.rtld.optional_static_tls) is used up; start it with \
             GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096, or use `leakwatch run \
             --native-sites`"
        } else {
            ""
        };
        return Err(refuse(format!("it could not load the shim: {why}{hint}")));
    }
    let entry = gdb
        .invoke("dlsym", &[Arg::Int(handle), Arg::Str("leakwatch_inject")])
        .map_err(|t| refuse(format!("the shim has no leakwatch_inject ({t})")))?;
    if entry == 0 {
        return Err(refuse(
            "the shim it loaded has no leakwatch_inject: an older shim; rebuild it".into(),
        ));
    }
    let code = gdb
        .invoke(&format!("{entry:#x}"), &[Arg::Str(config)])
        // An int in eax: the low 32 bits, sign-extended.
        .map(|rax| i64::from(rax as u32 as i32))
        .map_err(|t| refuse(format!("the shim's start failed: {t}")))?;
    match code {
        n if n >= 0 => Ok(Some(n as u32)),
        -5 => Ok(None),
        -1 => Err(refuse(
            "it has a shim of an older leakwatch, which cannot be taken over; restart it to \
             attach with --native-sites, or attach without"
                .into(),
        )),
        -3 => Err(refuse(
            "its malloc is not glibc's (another allocator is linked or preloaded): the shim \
             forwards to glibc and would free that allocator's blocks; the shim stays loaded, \
             idle, nothing was redirected"
                .into(),
        )),
        n => Err(refuse(format!(
            "the shim refused to start (code {n}); it stays loaded, idle"
        ))),
    }
}
