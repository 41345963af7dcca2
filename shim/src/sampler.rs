//! When to sample (each thread's byte countdown), what a sample weighs, and
//! taking one: the call stack, unwound from `.eh_frame`.

use std::cell::Cell;
use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::{listen, table};

/// The private directory D leakwatch listens in; the shim is idle without it.
const ENV_DIR: &CStr = c"LEAKWATCH_NATIVE_DIR";
/// Mean bytes between samples.
const ENV_INTERVAL: &CStr = c"LEAKWATCH_NATIVE_INTERVAL";
/// The default mean interval (leakwatch passes its own; see its docs).
const DEFAULT_INTERVAL: u64 = 512 * 1024;
/// Frames kept per sampled stack, innermost first.
pub const MAX_FRAMES: usize = 48;

static ENABLED: AtomicBool = AtomicBool::new(false);
static INTERVAL: AtomicU64 = AtomicU64::new(DEFAULT_INTERVAL);
/// The shim's own text: frames in it are left off every stack.
static OWN_START: AtomicUsize = AtomicUsize::new(0);
static OWN_END: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Bytes left until this thread's next sample.
    static COUNTDOWN: Cell<i64> = const { Cell::new(0) };
    /// xorshift state; 0 until the thread's first allocation seeds it.
    static RNG: Cell<u64> = const { Cell::new(0) };
}

#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

pub fn interval() -> u64 {
    INTERVAL.load(Ordering::Relaxed)
}

/// Counts an allocation off this thread's countdown: the bytes left (≤ 0)
/// when it crossed zero, `None` on the fast path.
#[inline]
pub fn count(size: usize) -> Option<i64> {
    COUNTDOWN.with(|c| {
        let left = c.get() - size.min(i64::MAX as usize) as i64;
        c.set(left);
        (left <= 0).then_some(left)
    })
}

/// Reads the environment, finds the shim's own text, warms the unwinder up
/// (its first use may allocate) and registers the fork handlers.
pub fn init() {
    // SAFETY: getenv at load time, before the program's threads.
    let dir = unsafe { libc::getenv(ENV_DIR.as_ptr()) };
    if dir.is_null() {
        return;
    }
    // SAFETY: getenv returned a NUL-terminated string.
    let dir = unsafe { CStr::from_ptr(dir) }.to_bytes();
    if dir.is_empty() || !listen::set_dir(dir) {
        return;
    }
    // SAFETY: as above.
    let interval = unsafe { libc::getenv(ENV_INTERVAL.as_ptr()) };
    if !interval.is_null() {
        // SAFETY: as above.
        let text = unsafe { CStr::from_ptr(interval) }.to_bytes();
        if let Some(n) = parse_u64(text).filter(|&n| n > 0) {
            INTERVAL.store(n, Ordering::Relaxed);
        }
    }
    find_own_text();
    let mut frames = [0usize; MAX_FRAMES];
    let _ = unwind(&mut frames);
    // SAFETY: the handlers are plain functions that only touch atomics.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        );
    }
    ENABLED.store(true, Ordering::Release);
}

fn parse_u64(text: &[u8]) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    text.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
            .flatten()
    })
}

/// The lock is held across fork so the child never inherits a table half
/// written (other threads skip their samples meanwhile, `table::lock`); the
/// child then answers on its own endpoint. The forking thread
/// counts as inside the shim meanwhile: a signal handler that allocates
/// there must pass straight through, not wait for the lock it holds.
extern "C" fn before_fork() {
    crate::enter();
    table::lock_for_fork();
}

extern "C" fn after_fork_parent() {
    table::unlock_after_fork();
    crate::leave();
}

extern "C" fn after_fork_child() {
    table::unlock_after_fork();
    listen::forked();
    crate::leave();
}

/// The allocation at `addr` of `size` bytes crossed this thread's countdown
/// (`left` bytes past zero): draw the next one and record the sample.
pub fn sample(addr: usize, size: usize, left: i64) {
    let mean = interval() as f64;
    if RNG.with(Cell::get) == 0 {
        // A thread's first allocation: the countdown starts here, so the
        // first block is not always sampled.
        seed(addr);
        let next = draw(mean) + left;
        COUNTDOWN.with(|c| c.set(next));
        if next > 0 {
            return;
        }
    }
    COUNTDOWN.with(|c| c.set(draw(mean)));
    // P(sampled) = 1 - exp(-s/T) for a Poisson process of rate 1/T over the
    // block's bytes; dividing by it makes the estimate unbiased.
    let s = size as f64;
    let weight = if size == 0 {
        mean
    } else {
        s / -(-s / mean).exp_m1()
    };
    let mut frames = [0usize; MAX_FRAMES];
    let depth = unwind(&mut frames);
    table::insert(addr, weight as u64, &frames[..depth]);
    listen::ensure_started();
}

fn seed(addr: usize) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into ts (vDSO, no allocation).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    let tls = RNG.with(|r| std::ptr::from_ref(r) as u64);
    let s = (addr as u64) ^ tls.rotate_left(17) ^ (ts.tv_nsec as u64).rotate_left(40);
    RNG.with(|r| r.set(mix(s) | 1));
}

/// The murmur3 finaliser: a well-spread 64-bit hash.
pub fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// An exponential draw of mean `mean` bytes, at least 1.
fn draw(mean: f64) -> i64 {
    let x = RNG.with(|r| {
        let mut x = r.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        x
    });
    // Uniform in (0, 1]: 53 random bits, never 0.
    let u = ((x >> 11) + 1) as f64 / (1u64 << 53) as f64;
    (-u.ln() * mean).max(1.0) as i64
}

// libgcc's unwinder (linked by every Rust program on linux-gnu).
type TraceFn = extern "C" fn(ctx: *mut c_void, arg: *mut c_void) -> i32;
unsafe extern "C" {
    fn _Unwind_Backtrace(trace: TraceFn, arg: *mut c_void) -> i32;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
}
const URC_NO_REASON: i32 = 0;
const URC_END_OF_STACK: i32 = 5;

struct Walk<'a> {
    frames: &'a mut [usize; MAX_FRAMES],
    depth: usize,
    own: (usize, usize),
}

extern "C" fn step(ctx: *mut c_void, arg: *mut c_void) -> i32 {
    // SAFETY: arg is the Walk passed to _Unwind_Backtrace below.
    let walk = unsafe { &mut *arg.cast::<Walk>() };
    // SAFETY: ctx is the unwinder's current frame.
    let ip = unsafe { _Unwind_GetIP(ctx) };
    if ip == 0 {
        return URC_END_OF_STACK;
    }
    if (walk.own.0..walk.own.1).contains(&ip) {
        return URC_NO_REASON;
    }
    walk.frames[walk.depth] = ip;
    walk.depth += 1;
    if walk.depth == MAX_FRAMES {
        URC_END_OF_STACK
    } else {
        URC_NO_REASON
    }
}

/// The calling thread's return addresses outside the shim, innermost first.
fn unwind(frames: &mut [usize; MAX_FRAMES]) -> usize {
    let mut walk = Walk {
        frames,
        depth: 0,
        own: (
            OWN_START.load(Ordering::Relaxed),
            OWN_END.load(Ordering::Relaxed),
        ),
    };
    // SAFETY: step only writes within walk, which outlives the call.
    unsafe { _Unwind_Backtrace(step, (&raw mut walk).cast()) };
    walk.depth
}

/// Records the address range of the shim's own loaded segments.
fn find_own_text() {
    extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, _arg: *mut c_void) -> i32 {
        let me = find_own_text as *const () as usize;
        // SAFETY: the loader passes a valid info for the call's duration.
        let info = unsafe { &*info };
        let base = info.dlpi_addr as usize;
        let (mut lo, mut hi, mut mine) = (usize::MAX, 0, false);
        for i in 0..usize::from(info.dlpi_phnum) {
            // SAFETY: dlpi_phdr has dlpi_phnum entries.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type != libc::PT_LOAD {
                continue;
            }
            let start = base + ph.p_vaddr as usize;
            let end = start + ph.p_memsz as usize;
            lo = lo.min(start);
            hi = hi.max(end);
            mine |= (start..end).contains(&me);
        }
        if mine {
            OWN_START.store(lo, Ordering::Relaxed);
            OWN_END.store(hi, Ordering::Relaxed);
            return 1;
        }
        0
    }
    // SAFETY: each only reads the loader's info.
    unsafe { libc::dl_iterate_phdr(Some(each), std::ptr::null_mut()) };
}
