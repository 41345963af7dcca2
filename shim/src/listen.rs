//! The answering thread: listens on `D/<pid>.sock` and, per connection,
//! reads one request line and writes the live sampled bytes by stack.
//!
//! Request: `snapshot <run>\n` (or `stop\n`: sampling stops, for good;
//! answered `stopped`). Answer (text, one record a line):
//!
//! ```text
//! leakwatch-native-sites 2 pid <pid> run <run> interval <bytes> samples <n> dropped <n>
//! s <live_bytes> <live_samples> <hex return address>,<hex>,…
//! m <hex start> <hex end> <hex file offset> <hex stated address> <build id in hex, or -> <path>
//! end
//! ```
//!
//! One `s` line per stack holding memory now, or having held some at an
//! earlier answer (then at 0, so its series goes on); addresses innermost
//! first, return addresses as the unwinder gave them. One `m` line per
//! executable segment of each loaded object (version 2): where it is
//! mapped, the address its ELF states for it, its object's GNU build id
//! and path, so that leakwatch names the
//! addresses by the object they came from even once the process has exited
//! (its `/proc/PID/maps` gone) or the file was replaced on disk. The thread starts at
//! a process' first sample taken in plain code (a process that allocates
//! little never gets one; a sample in a signal handler or in the loader
//! waits for the next), and again in a forked child, which answers on its
//! own endpoint. Injected into a running process
//! (`attach --native-sites`), it starts at once, and also patches the
//! objects loaded since (`inject::rescan`).

use std::cell::UnsafeCell;
use std::ffi::{CStr, c_void};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::{sampler, table};

/// The longest directory that leaves room for `/<pid>.sock` in `sun_path`.
const MAX_DIR: usize = 107 - "/4194304.sock".len();

struct Dir(UnsafeCell<[u8; MAX_DIR]>);
// SAFETY: written once by `set_dir` at load time, before any reader.
unsafe impl Sync for Dir {}
static DIR: Dir = Dir(UnsafeCell::new([0; MAX_DIR]));
static DIR_LEN: AtomicUsize = AtomicUsize::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);
/// Stacks already listed in an answer: listed at 0 once freed.
static LISTED: [AtomicBool; table::STACKS] = [const { AtomicBool::new(false) }; table::STACKS];

/// Keeps D; false if it does not fit a socket path.
pub fn set_dir(dir: &[u8]) -> bool {
    if dir.len() > MAX_DIR {
        return false;
    }
    // SAFETY: called once from the load-time constructor, before any thread
    // can read DIR.
    unsafe { (&mut *DIR.0.get())[..dir.len()].copy_from_slice(dir) };
    DIR_LEN.store(dir.len(), Ordering::Release);
    true
}

/// In a forked child: its parent's thread is not there.
pub fn forked() {
    STARTED.store(false, Ordering::Relaxed);
}

/// Whether this process' answering thread has been started.
pub fn started() -> bool {
    STARTED.load(Ordering::Relaxed)
}

/// Starts the answering thread once per process; only from plain code (the
/// sampler checks the stack), never from a signal handler or the loader. With pthread_create
/// directly, not std::thread: std looks weak symbols up with dlsym on its
/// first spawn, and a dlsym inside a hook that ran inside dlopen's error
/// path replaces the program's pending dlerror() result (bash crashed on
/// it). All signals are blocked in the thread: the program's handlers run
/// on its own threads, never on the shim's.
pub fn ensure_started() {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    extern "C" fn entry(_: *mut libc::c_void) -> *mut libc::c_void {
        serve();
        std::ptr::null_mut()
    }
    // SAFETY: plain pthread calls on local, initialised values; the thread
    // runs `entry`, which takes no argument.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_attr_init(&raw mut attr) != 0 {
            return;
        }
        libc::pthread_attr_setstacksize(&raw mut attr, 256 * 1024);
        libc::pthread_attr_setdetachstate(&raw mut attr, libc::PTHREAD_CREATE_DETACHED);
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&raw mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const all, &raw mut old);
        let mut thread: libc::pthread_t = 0;
        libc::pthread_create(
            &raw mut thread,
            &raw const attr,
            entry,
            std::ptr::null_mut(),
        );
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const old, std::ptr::null_mut());
        libc::pthread_attr_destroy(&raw mut attr);
    }
}

fn socket_path(pid: u32) -> PathBuf {
    let len = DIR_LEN.load(Ordering::Acquire);
    // SAFETY: DIR is not written after set_dir.
    let dir = unsafe { &(&*DIR.0.get())[..len] };
    std::path::Path::new(std::ffi::OsStr::from_bytes(dir)).join(format!("{pid}.sock"))
}

fn serve() {
    crate::mark_own_thread();
    let pid = std::process::id();
    let path = socket_path(pid);
    // An exec'd program of the same pid left its endpoint: ours now.
    let _ = std::fs::remove_file(&path);
    let mut failures = 0;
    // A daemon that closes every descriptor at start closes ours too:
    // listen again, a few times.
    while failures < 10 {
        let Ok(listener) = UnixListener::bind(&path) else {
            return;
        };
        loop {
            if !wait_for_connection(&listener) {
                continue;
            }
            match listener.accept() {
                Ok((stream, _)) => {
                    failures = 0;
                    answer(stream, pid);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        failures += 1;
        let _ = std::fs::remove_file(&path);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for a connection; in a process the shim was injected into, at
/// most `inject::RESCAN`, patching the objects loaded meanwhile (false:
/// none came yet). A preloaded shim's hooks cover every object already.
fn wait_for_connection(listener: &UnixListener) -> bool {
    #[cfg(target_arch = "x86_64")]
    if crate::inject::injected() {
        use std::os::fd::AsRawFd;
        let mut fd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Stopped: nothing to patch any more, no wake-ups.
        let ms = if sampler::enabled() {
            crate::inject::RESCAN.as_millis() as i32
        } else {
            -1
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&raw mut fd, 1, ms) };
        crate::inject::rescan();
        return ready != 0;
    }
    let _ = listener;
    true
}

fn answer(mut stream: UnixStream, pid: u32) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    let mut request = Vec::new();
    let mut buf = [0u8; 256];
    while !request.contains(&b'\n') && request.len() < 4096 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    if request.trim_ascii() == b"stop" {
        // The session that attached is over: sampling stops, the hooks
        // stay (forwarding to glibc, a filter check per free).
        sampler::stop();
        let _ = stream.write_all(b"stopped\n");
        return;
    }
    let run = std::str::from_utf8(&request)
        .ok()
        .and_then(|r| r.trim().strip_prefix("snapshot "))
        .and_then(|r| r.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let _ = stream.write_all(snapshot(pid, run).as_bytes());
}

fn snapshot(pid: u32, run: u64) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let _ = writeln!(
        out,
        "leakwatch-native-sites 2 pid {pid} run {run} interval {} samples {} dropped {}",
        sampler::interval(),
        table::SAMPLES.load(Ordering::Relaxed),
        table::DROPPED.load(Ordering::Relaxed),
    );
    for (i, listed) in LISTED.iter().enumerate() {
        let Some((frames, live, samples)) = table::stack(i) else {
            continue;
        };
        if live <= 0 && !listed.load(Ordering::Relaxed) {
            continue;
        }
        listed.store(true, Ordering::Relaxed);
        let _ = write!(out, "s {} {}", live.max(0), samples.max(0));
        for (n, f) in frames.iter().enumerate() {
            let sep = if n == 0 { ' ' } else { ',' };
            let _ = write!(out, "{sep}{f:x}");
        }
        out.push('\n');
    }
    modules(&mut out);
    out.push_str("end\n");
    out
}

/// NT_GNU_BUILD_ID, the note type of the linker's `--build-id`.
const NT_GNU_BUILD_ID: u32 = 3;

/// One `m` line per executable segment of every loaded object.
fn modules(out: &mut String) {
    extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, arg: *mut c_void) -> i32 {
        // SAFETY: arg is the String passed below; the loader passes a valid
        // info for the call's duration.
        let (out, info) = unsafe { (&mut *arg.cast::<String>(), &*info) };
        let bias = info.dlpi_addr as usize;
        // SAFETY: dlpi_phdr has dlpi_phnum entries.
        let headers =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        let path = if info.dlpi_name.is_null() {
            None
        } else {
            // SAFETY: a NUL-terminated name, the loader's.
            Some(
                unsafe { CStr::from_ptr(info.dlpi_name) }
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        // The program itself has no name in the loader's list.
        let path = match path {
            Some(p) if !p.is_empty() => p,
            _ => std::fs::read_link("/proc/self/exe")
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        if path.is_empty() || path.contains('\n') {
            return 0;
        }
        let build_id = headers
            .iter()
            .filter(|h| h.p_type == libc::PT_NOTE)
            .find_map(|h| build_id(bias + h.p_vaddr as usize, h.p_memsz as usize))
            .unwrap_or_else(|| "-".into());
        for h in headers
            .iter()
            .filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0)
        {
            let start = bias + h.p_vaddr as usize;
            let _ = writeln!(
                out,
                "m {start:x} {:x} {:x} {:x} {build_id} {path}",
                start + h.p_memsz as usize,
                h.p_offset,
                h.p_vaddr
            );
        }
        0
    }
    // SAFETY: each only reads the loader's info and appends to `out`.
    unsafe { libc::dl_iterate_phdr(Some(each), std::ptr::from_mut(out).cast()) };
}

/// The GNU build id in the notes at `at` (`len` bytes, mapped: a PT_NOTE
/// segment of a loaded object), in hex.
fn build_id(at: usize, len: usize) -> Option<String> {
    // SAFETY: the loader mapped the object's PT_NOTE segment, within a
    // loaded PT_LOAD one; it is read-only data for the object's lifetime.
    let notes = unsafe { std::slice::from_raw_parts(at as *const u8, len) };
    let word = |i: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(notes.get(i..i + 4)?.try_into().ok()?))
    };
    let align4 = |n: usize| (n + 3) & !3;
    let mut i = 0;
    while i + 12 <= notes.len() {
        let (namesz, descsz, kind) = (word(i)? as usize, word(i + 4)? as usize, word(i + 8)?);
        let name = i + 12;
        let desc = name + align4(namesz);
        let next = desc + align4(descsz);
        if kind == NT_GNU_BUILD_ID && notes.get(name..name + namesz)? == b"GNU\0" {
            let id = notes.get(desc..desc + descsz)?;
            return Some(id.iter().fold(String::new(), |mut s, b| {
                let _ = write!(s, "{b:02x}");
                s
            }));
        }
        i = next;
    }
    None
}
