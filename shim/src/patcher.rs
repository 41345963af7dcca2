//! The patching thread of a shim injected into a running process
//! (`attach --native-sites`): every [`inject::RESCAN`] it patches the
//! objects loaded since ([`inject::rescan`]), and it stops sampling (and
//! ends) once leakwatch writes the stop flag of the sites file (its attach
//! is over; a later attach starts sampling and the thread again). It
//! starts at once in the process injected into, and in a child that process
//! forks, at the child's first sample taken in plain code. A preloaded shim
//! needs none: its hooks cover every object already.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::{inject, sampler, table};

static STARTED: AtomicBool = AtomicBool::new(false);

/// In a forked child: its parent's thread is not there.
pub fn forked() {
    STARTED.store(false, Ordering::Relaxed);
}

/// Whether this process' thread has been started.
pub fn started() -> bool {
    STARTED.load(Ordering::Relaxed)
}

/// Starts the thread once per process; only from plain code (the sampler
/// checks the stack), never from a signal handler or the loader. With
/// pthread_create directly, not std::thread: std looks weak symbols up with
/// dlsym on its first spawn, and a dlsym inside a hook that ran inside
/// dlopen's error path replaces the program's pending dlerror() result
/// (bash crashed on it). All signals are blocked in the thread: the
/// program's handlers run on its own threads, never on the shim's.
pub fn ensure_started() {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    extern "C" fn entry(_: *mut libc::c_void) -> *mut libc::c_void {
        run();
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

fn run() {
    crate::mark_own_thread();
    loop {
        std::thread::sleep(inject::RESCAN);
        // The session that attached is over: sampling stops, the hooks
        // stay (forwarding to glibc, a filter check per free), and a later
        // attach starts a thread again.
        if table::stop_if_requested(|| {
            sampler::stop();
            STARTED.store(false, Ordering::Relaxed);
        }) {
            return;
        }
        inject::rescan();
    }
}
