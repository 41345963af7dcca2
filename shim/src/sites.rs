//! This process' sites file, `D/<pid>.sites` ([`layout`]): the stacks of
//! [`table`](crate::table) and their live bytes, kept current in a file
//! mapped shared, which leakwatch reads whenever it likes.
//!
//! The tables stay in the process' own memory and the file follows them:
//! every write to a stack's slot (under the table lock) is repeated in the
//! file. So a forked child, whose own tables are its parent's at the fork,
//! drops the parent's mapping at once (in its atfork handler, before any of
//! its code runs) and makes a file of its own at its next sample, copied
//! from those tables. The file is made at the process' first sample, with
//! system calls only (open, ftruncate, mmap, rename: safe in a signal
//! handler or in the loader, unlike a thread), and never again if that
//! fails (a full disk: the process is not followed).

use std::cell::UnsafeCell;
use std::sync::atomic::{
    AtomicI64, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

use crate::layout::{
    AT_DROPPED, AT_INTERVAL, AT_MAX_FRAMES, AT_PID, AT_SAMPLES, AT_STACKS, AT_STOP, AT_VERSION,
    MAGIC, MAX_DIR, MAX_FRAMES, SIZE, SLOT_BLOCKS, SLOT_DEPTH, SLOT_LIVE, STACKS, SUFFIX, VERSION,
    frames_at, slot_at,
};

/// D, `/`, `.`, a pid, the suffix, `.new`, NUL.
const MAX_PATH: usize = MAX_DIR + 48;

struct Buf<const N: usize>(UnsafeCell<[u8; N]>);
// SAFETY: DIR is written by `set_dir` at load time, before any reader, and
// by `switch_dir` under the table lock, under which it is read; the path
// buffers only under the table lock (`create`).
unsafe impl<const N: usize> Sync for Buf<N> {}
static DIR: Buf<MAX_DIR> = Buf(UnsafeCell::new([0; MAX_DIR]));
static DIR_LEN: AtomicUsize = AtomicUsize::new(0);
static NEW: Buf<MAX_PATH> = Buf(UnsafeCell::new([0; MAX_PATH]));
static DONE: Buf<MAX_PATH> = Buf(UnsafeCell::new([0; MAX_PATH]));

/// The mapping, or null.
static BASE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static STATE: AtomicU8 = AtomicU8::new(NONE);
const NONE: u8 = 0;
const MAPPED: u8 = 1;
const FAILED: u8 = 2;

/// Keeps D; false if it is too long.
pub fn set_dir(dir: &[u8]) -> bool {
    if dir.is_empty() || dir.len() > MAX_DIR || dir.contains(&0) {
        return false;
    }
    // SAFETY: called once from the load-time constructor (or the injected
    // call), before any sample can read DIR; or by `switch_dir` under the
    // table lock.
    unsafe { (&mut *DIR.0.get())[..dir.len()].copy_from_slice(dir) };
    DIR_LEN.store(dir.len(), Ordering::Release);
    true
}

/// Under the table lock, when a later attach takes the shim over: the
/// current file (the earlier session's) is let go, and the next one is
/// made in `dir`. False if `dir` is unusable (nothing changed then).
pub fn switch_dir(dir: &[u8]) -> bool {
    if dir.is_empty() || dir.len() > MAX_DIR || dir.contains(&0) {
        return false;
    }
    // The earlier session's mapping, let go as a fork's child lets go its
    // parent's.
    forked();
    set_dir(dir)
}

/// No file yet, and none failed: the next sample makes it.
#[inline]
pub fn missing() -> bool {
    STATE.load(Ordering::Relaxed) == NONE
}

/// Writes `D/[.]<pid>.sites[.new]` NUL-terminated into `buf`.
fn path(buf: &mut [u8; MAX_PATH], pid: u32, new: bool) {
    let len = DIR_LEN.load(Ordering::Acquire);
    // SAFETY: DIR is not written after set_dir.
    let dir = unsafe { &(&*DIR.0.get())[..len] };
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        buf[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    put(dir);
    put(if new { b"/." } else { b"/" });
    let mut digits = [0u8; 10];
    let mut n = pid;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    put(&digits[i..]);
    put(SUFFIX.as_bytes());
    if new {
        put(b".new");
    }
    put(b"\0");
}

/// Under the table lock, at a sample: makes this process' file under a
/// temporary name, writes its header, lets `fill` copy the stacks so far
/// in (through [`publish`] and [`account`]), then renames it into place.
pub fn create(interval: u64, fill: impl FnOnce()) {
    // SAFETY: plain system calls; the paths are NUL-terminated buffers only
    // the lock holder writes.
    let made = unsafe {
        let pid = libc::getpid() as u32;
        let (new, done) = (&mut *NEW.0.get(), &mut *DONE.0.get());
        path(new, pid, true);
        path(done, pid, false);
        let fd = libc::open(
            new.as_ptr().cast(),
            libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o600,
        );
        if fd < 0 {
            None
        } else {
            let sized = libc::ftruncate(fd, SIZE as libc::off_t) == 0;
            let p = if sized {
                // Every argument 64 bits wide: a variadic call leaves the
                // upper half of a 32-bit one undefined.
                libc::syscall(
                    libc::SYS_mmap,
                    std::ptr::null_mut::<u8>(),
                    SIZE,
                    libc::c_long::from(libc::PROT_READ | libc::PROT_WRITE),
                    libc::c_long::from(libc::MAP_SHARED),
                    libc::c_long::from(fd),
                    0 as libc::c_long,
                )
            } else {
                -1
            };
            libc::close(fd);
            if p == -1 {
                libc::unlink(new.as_ptr().cast());
                None
            } else {
                Some((p as *mut u8, new.as_ptr(), done.as_ptr()))
            }
        }
    };
    let Some((base, new, done)) = made else {
        STATE.store(FAILED, Ordering::Relaxed);
        return;
    };
    // SAFETY: base maps SIZE bytes, read-write; the header's fields are
    // within its first page, aligned to their sizes.
    unsafe {
        base.copy_from_nonoverlapping(MAGIC.as_ptr(), MAGIC.len());
        base.add(AT_VERSION).cast::<u32>().write(VERSION);
        base.add(AT_PID).cast::<u32>().write(libc::getpid() as u32);
        base.add(AT_INTERVAL).cast::<u64>().write(interval);
        base.add(AT_STACKS).cast::<u32>().write(STACKS as u32);
        base.add(AT_MAX_FRAMES)
            .cast::<u32>()
            .write(MAX_FRAMES as u32);
    }
    BASE.store(base, Ordering::Release);
    fill();
    // SAFETY: both are NUL-terminated paths built above.
    if unsafe { libc::rename(new.cast(), done.cast()) } != 0 {
        // SAFETY: as above.
        unsafe { libc::unlink(new.cast()) };
        forked();
        STATE.store(FAILED, Ordering::Relaxed);
        return;
    }
    STATE.store(MAPPED, Ordering::Relaxed);
}

/// An atomic field of the mapping at `at` (aligned), if there is one.
fn field<T>(at: usize) -> Option<&'static T> {
    let base = BASE.load(Ordering::Acquire);
    // SAFETY: a non-null base maps SIZE bytes until `forked` unmaps it,
    // which happens only in a child before any other of its code; callers
    // pass offsets inside, aligned for T (an atomic of that size).
    (!base.is_null()).then(|| unsafe { &*base.add(at).cast::<T>() })
}

/// Stack `i` was published with `frames` (under the lock): its frames, then its depth.
pub fn publish(i: usize, frames: &[usize]) {
    let base = BASE.load(Ordering::Acquire);
    if base.is_null() || i >= STACKS {
        return;
    }
    let n = frames.len().min(MAX_FRAMES);
    // SAFETY: the row of slot i is inside the mapping, 8-aligned; nobody
    // reads a row before its depth is published below.
    unsafe {
        let row = base.add(frames_at(i)).cast::<u64>();
        for (k, &f) in frames[..n].iter().enumerate() {
            row.add(k).write(f as u64);
        }
    }
    if let Some(depth) = field::<AtomicU32>(slot_at(i) + SLOT_DEPTH) {
        depth.store(n.max(1) as u32, Ordering::Release);
    }
}

/// Stack `i` now holds `live` bytes in `blocks` sampled blocks (under the lock).
pub fn account(i: usize, live: i64, blocks: i64) {
    if i >= STACKS {
        return;
    }
    if let Some(f) = field::<AtomicI64>(slot_at(i) + SLOT_LIVE) {
        f.store(live, Ordering::Relaxed);
    }
    if let Some(f) = field::<AtomicI64>(slot_at(i) + SLOT_BLOCKS) {
        f.store(blocks, Ordering::Relaxed);
    }
}

/// The sample counts so far.
pub fn counts(samples: u64, dropped: u64) {
    if let Some(f) = field::<AtomicU64>(AT_SAMPLES) {
        f.store(samples, Ordering::Relaxed);
    }
    if let Some(f) = field::<AtomicU64>(AT_DROPPED) {
        f.store(dropped, Ordering::Relaxed);
    }
}

/// Whether leakwatch asked sampling to stop (its attach is over).
pub fn stop_requested() -> bool {
    field::<AtomicU64>(AT_STOP).is_some_and(|f| f.load(Ordering::Relaxed) != 0)
}

/// Removes a file of this pid left by another program: the one this
/// process ran before an exec (the constructor of the new one calls this,
/// before any thread), or an exited process whose pid a forked child got
/// (its atfork handler, holding the table lock). Else leakwatch could read
/// another program's stacks as this one's until its first sample.
pub fn remove_stale() {
    if DIR_LEN.load(Ordering::Acquire) == 0 {
        return;
    }
    // SAFETY: DONE is written only by a caller that excludes the others
    // (see above); unlink takes the NUL-terminated path built there.
    unsafe {
        let done = &mut *DONE.0.get();
        path(done, libc::getpid() as u32, false);
        libc::unlink(done.as_ptr().cast());
    }
}

/// In a forked child, holding the table lock (or after a failed rename):
/// the mapping is the parent's file; dropped, so the next sample makes
/// this process' own.
pub fn forked() {
    let base = BASE.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !base.is_null() {
        // SAFETY: base maps SIZE bytes that nothing references any more.
        unsafe { libc::syscall(libc::SYS_munmap, base, SIZE) };
    }
    STATE.store(NONE, Ordering::Relaxed);
}
