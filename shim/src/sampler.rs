//! When to sample (each thread's byte countdown), what a sample weighs, and
//! taking one: the call stack, unwound from `.eh_frame`.

use std::cell::Cell;
use std::ffi::{CStr, c_void};
use std::sync::atomic::{
    AtomicBool, AtomicIsize, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

use crate::{sites, table};

/// The private directory D where the shim keeps each process' sites file; idle without it.
const ENV_DIR: &CStr = c"LEAKWATCH_NATIVE_DIR";
/// Mean bytes between samples.
const ENV_INTERVAL: &CStr = c"LEAKWATCH_NATIVE_INTERVAL";
/// The default mean interval (leakwatch passes its own; see its docs).
const DEFAULT_INTERVAL: u64 = 512 * 1024;
/// Frames kept per sampled stack, innermost first.
pub use crate::layout::MAX_FRAMES;

/// How far a sample that may start the patching thread unwinds to look for
/// a signal frame beyond the frames it keeps.
const MAX_CHECKED_FRAMES: usize = 1024;

/// The globals a sample reads, in the one cache line every malloc reads
/// (`countdown_from_tp`), so that a sample finds them in cache: scattered
/// over the shim's data, each would be a miss per sample (between two samples
/// the program's heap evicts whatever the fast path does not touch). Set
/// at start (and the block table's shape when it grows), read everywhere.
#[repr(C, align(64))]
pub(crate) struct Hot {
    /// The countdown's address ([`ThreadState`]) minus the thread pointer, the same in every
    /// thread when the shim's TLS is in the static TLS block (always for an
    /// object loaded at startup, as a preloaded one is); 0 until known and
    /// while idle. Reading it through the thread pointer spares every
    /// malloc a call of `__tls_get_addr`, the general-dynamic access of a
    /// shared object's TLS.
    countdown_from_tp: AtomicIsize,
    /// The same offset, of the whole [`ThreadState`], set once known and
    /// never cleared: the shim's own paths reach a thread's state through
    /// it whether sampling or not.
    state_from_tp: AtomicIsize,
    /// Mean bytes between samples.
    interval: AtomicU64,
    /// The shim's own text: frames in it are left off every stack.
    own_start: AtomicUsize,
    own_end: AtomicUsize,
    /// The dynamic loader's text: a sample taken inside it (its TLS setup
    /// in pthread_create, dlopen) must not start the patching thread.
    loader_start: AtomicUsize,
    loader_end: AtomicUsize,
    /// The block table's capacity and which of its two is live
    /// ([`crate::table`]).
    pub(crate) capacity: AtomicU32,
    pub(crate) live_table: AtomicU8,
    enabled: AtomicBool,
}

pub(crate) static HOT: Hot = Hot {
    countdown_from_tp: AtomicIsize::new(0),
    state_from_tp: AtomicIsize::new(0),
    interval: AtomicU64::new(DEFAULT_INTERVAL),
    own_start: AtomicUsize::new(0),
    own_end: AtomicUsize::new(0),
    loader_start: AtomicUsize::new(0),
    loader_end: AtomicUsize::new(0),
    capacity: AtomicU32::new(crate::table::FIRST_BLOCKS as u32),
    live_table: AtomicU8::new(0),
    enabled: AtomicBool::new(false),
};

/// How far below the thread pointer a static TLS block may lie (x86-64's
/// TLS variant II; glibc's static block is a few KiB).
const STATIC_TLS_MAX_BYTES: isize = 1 << 20;

/// What the shim keeps per thread, in one thread-local: one offset from the
/// thread pointer reaches all of it ([`with_state`]), where each of its own
/// would be a call of `__tls_get_addr` (seven a sample: 77 instructions of its
/// ≈ 800).
#[repr(C)]
pub(crate) struct ThreadState {
    /// Bytes left until this thread's next sample. First: the fast path
    /// reads it at `countdown_from_tp`.
    countdown: Cell<i64>,
    /// xorshift state; 0 until the thread's first allocation seeds it.
    rng: Cell<u64>,
    /// The highest CFA libgcc reached on this thread's stack: the fast walk
    /// reads nothing above it ([`crate::cfi`]); 0 until known.
    pub(crate) top: Cell<usize>,
    /// Set while this thread runs the shim's own code ([`crate::guarded`]).
    pub(crate) busy: Cell<bool>,
    /// The rules of this thread's last walk, by depth ([`crate::cfi`]).
    pub(crate) recent: crate::cfi::Recent,
}

thread_local! {
    static STATE: ThreadState = const {
        ThreadState {
            countdown: Cell::new(0),
            rng: Cell::new(0),
            top: Cell::new(0),
            busy: Cell::new(false),
            recent: crate::cfi::Recent::empty(),
        }
    };
}

/// Runs `f` on this thread's state: at its offset from the thread pointer
/// when that is known (the shim preloaded), else by the thread-local's
/// own access.
#[inline(always)]
pub(crate) fn with_state<R>(f: impl FnOnce(&ThreadState) -> R) -> R {
    let from_tp = HOT.state_from_tp.load(Ordering::Relaxed);
    if from_tp != 0 {
        let addr = (thread_pointer() as isize).wrapping_add(from_tp) as *const ThreadState;
        // SAFETY: STATE lies at `from_tp` from every thread's pointer in the
        // static TLS block (found in `find_tls_offset`), initialised from
        // the TLS image (its initialiser is const, with no destructor);
        // only this thread uses its own.
        return f(unsafe { &*addr });
    }
    STATE.with(f)
}

#[inline]
pub fn enabled() -> bool {
    HOT.enabled.load(Ordering::Relaxed)
}

/// Stops sampling for good (`attach --native-sites` is over): frees of
/// sampled blocks are still forgotten.
pub fn stop() {
    HOT.countdown_from_tp.store(0, Ordering::Relaxed);
    HOT.enabled.store(false, Ordering::Release);
}

/// Sampling back on at `interval` (a later attach took the shim over,
/// [`crate::table::take_over`]).
pub fn resume(interval: u64) {
    HOT.interval.store(interval, Ordering::Relaxed);
    HOT.enabled.store(true, Ordering::Release);
    find_tls_offset();
}

pub fn interval() -> u64 {
    HOT.interval.load(Ordering::Relaxed)
}

/// Counts an allocation about to be made off this thread's countdown, when
/// it lies in the static TLS block (the shim preloaded) and sampling is
/// on: true when it did not cross zero (no sample). False otherwise: then
/// [`count_slow`] decides. Counted before the allocation, so that a hook on
/// the fast path ends in a tail call into glibc.
#[inline(always)]
pub fn count_fast(size: usize) -> bool {
    // Not 0 only while sampling with the countdown in the static TLS block
    // (set after `enabled`, cleared before it): one load decides both.
    let from_tp = HOT.countdown_from_tp.load(Ordering::Relaxed);
    from_tp != 0 && tls_count(from_tp, size)
}

/// What [`count_fast`] left undecided: the bytes left (≤ 0) when this
/// allocation crossed the countdown, `None` when it did not or the shim is
/// idle. Counts it first when the countdown is not in the static TLS block.
pub fn count_slow(size: usize) -> Option<i64> {
    let from_tp = HOT.countdown_from_tp.load(Ordering::Relaxed);
    if from_tp != 0 {
        // Counted by count_fast already.
        let left = with_state(|t| t.countdown.get());
        return (left <= 0).then_some(left);
    }
    if !enabled() {
        return None;
    }
    with_state(|t| {
        let left = t.countdown.get().wrapping_sub(size as i64);
        t.countdown.set(left);
        (left <= 0).then_some(left)
    })
}

/// Subtracts `size` from this thread's countdown, at `from_tp` from its
/// thread pointer: true while it stays above zero. One instruction with a
/// memory operand and the branch on its flags (a load, a subtraction and a
/// store in one, no register kept for the value). A size above `i64::MAX`
/// (a request bound to fail) wraps to a negative one and only delays the
/// next sample.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tls_count(from_tp: isize, size: usize) -> bool {
    // SAFETY: in the static TLS block the countdown lies at `from_tp` from every
    // thread's pointer (checked in `find_tls_offset`), %fs-relative; only this
    // thread touches its own countdown, and nothing else in the asm.
    unsafe {
        std::arch::asm!(
            "sub qword ptr fs:[{off}], {size}",
            "jle {crossed}",
            off = in(reg) from_tp,
            size = in(reg) size,
            crossed = label { return false; },
            options(nostack),
        );
    }
    true
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn tls_count(_from_tp: isize, _size: usize) -> bool {
    false
}

/// The calling thread's thread pointer (x86-64: its TCB's self pointer at
/// %fs:0).
#[cfg(target_arch = "x86_64")]
#[inline]
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: %fs:0 holds the TCB's own address on x86-64 Linux (glibc).
    unsafe {
        std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    tp
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn thread_pointer() -> usize {
    0
}

// One initial-exec access of a thread-local of the shim's own, so that the
// shim's whole TLS block is static in every process: the linker marks an
// object with such a relocation `DF_STATIC_TLS`, and glibc's dlopen then
// places its block in the static TLS surplus it reserves for objects loaded
// later (`glibc.rtld.optional_static_tls`, 512 bytes by default, more than
// the shim's block) or fails the dlopen. Without it an injected shim's block
// would be dynamic: every hook would reach its countdown through
// `__tls_get_addr`.
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".type leakwatch_static_tls_anchor, @tls_object",
    ".size leakwatch_static_tls_anchor, 8",
    "leakwatch_static_tls_anchor:",
    ".zero 8",
    ".popsection",
);

/// The anchor's offset from the thread pointer, from its initial-exec GOT
/// entry (filled by the loader at load time).
#[cfg(target_arch = "x86_64")]
fn anchor_from_tp() -> isize {
    let off: isize;
    // SAFETY: reads the GOT entry the loader filled for the anchor.
    unsafe {
        std::arch::asm!(
            "mov {}, qword ptr [rip + leakwatch_static_tls_anchor@GOTTPOFF]",
            out(reg) off,
            options(nostack, readonly, preserves_flags),
        );
    }
    off
}

/// Finds the thread state's offset from the thread pointer: the shim's TLS
/// is static (the anchor above), preloaded or dlopened; checked here all
/// the same (the state must lie in the static block below the thread
/// pointer, as the anchor does).
fn find_tls_offset() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if !(-STATIC_TLS_MAX_BYTES..0).contains(&anchor_from_tp()) {
        return;
    }
    let addr = STATE.with(|t| std::ptr::from_ref(t) as usize);
    let from_tp = (addr as isize).wrapping_sub(thread_pointer() as isize);
    if (-STATIC_TLS_MAX_BYTES..0).contains(&from_tp) {
        HOT.state_from_tp.store(from_tp, Ordering::Relaxed);
        HOT.countdown_from_tp.store(from_tp, Ordering::Relaxed);
    }
}

/// Reads the environment (`run --native-sites`): the shim is idle without
/// its directory.
pub fn init() {
    // SAFETY: getenv at load time, before the program's threads.
    let dir = unsafe { libc::getenv(ENV_DIR.as_ptr()) };
    if dir.is_null() {
        return;
    }
    // SAFETY: getenv returned a NUL-terminated string.
    let dir = unsafe { CStr::from_ptr(dir) }.to_bytes();
    // SAFETY: as above.
    let interval = unsafe { libc::getenv(ENV_INTERVAL.as_ptr()) };
    let interval = if interval.is_null() {
        None
    } else {
        // SAFETY: as above.
        parse_u64(unsafe { CStr::from_ptr(interval) }.to_bytes())
    };
    if start(dir, interval.filter(|&n| n > 0).unwrap_or(DEFAULT_INTERVAL)) {
        sites::remove_stale();
    }
}

/// Starts sampling, its sites file in `dir`: finds the shim's own text, warms the
/// unwinder up (its first use may allocate) and registers the fork
/// handlers. False if `dir` is unusable.
pub fn start(dir: &[u8], interval: u64) -> bool {
    if !sites::set_dir(dir) {
        return false;
    }
    HOT.interval.store(interval, Ordering::Relaxed);
    find_text_ranges();
    let mut frames = [0usize; MAX_FRAMES];
    let _ = unwind(&mut frames, false, Start::here(), &mut Trace::new());
    // The walk above learned this thread's stack top, but injected, the
    // call runs on a stack the debugger made up below the real one, and
    // every later walk of the thread would stop at that top (its frames lie
    // above it). The thread's next sample from its own code learns it
    // afresh.
    with_state(|t| t.top.set(0));
    // SAFETY: the handlers are plain functions that only touch atomics.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        );
    }
    HOT.enabled.store(true, Ordering::Release);
    find_tls_offset();
    true
}

pub(crate) fn parse_u64(text: &[u8]) -> Option<u64> {
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
/// child then makes its own sites file. The forking thread
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
    // Still under the lock: no sample can reach the parent's file.
    sites::forked();
    sites::remove_stale();
    #[cfg(target_arch = "x86_64")]
    crate::patcher::forked();
    table::unlock_after_fork();
    crate::leave();
}

/// The allocation at `addr` of `size` bytes crossed this thread's countdown
/// (`left` bytes past zero): record the sample and draw the next one.
pub fn sample(addr: usize, size: usize, left: i64, from: Start, mapped: usize) {
    // Its slot in the block table is likely out of cache: fetched while
    // the stack is unwound.
    table::prefetch(addr);
    let mean = interval() as f64;
    let first = with_state(|t| {
        if t.rng.get() == 0 {
            // A thread's first allocation: the countdown starts here, so
            // the first block is not always sampled.
            seed(t, addr);
            let next = draw(t, mean) + left;
            t.countdown.set(next);
            return next > 0;
        }
        false
    });
    if first {
        return;
    }
    // P(sampled) = 1 - exp(-s/T) for a Poisson process of rate 1/T over the
    // block's bytes; dividing by it makes the estimate unbiased.
    let weight = weight(size as f64, mean) as u64;
    let starting = patcher_wanted();
    // The same stack as this thread's last sample from the same place (an
    // allocation in a loop): recorded without unwinding. A sample that may
    // start the patching thread unwinds all the same, for what it checks.
    let walk = if !starting && table::insert_again(addr, weight, from, mapped) {
        None
    } else {
        let mut frames = [0usize; MAX_FRAMES];
        let mut trace = Trace::new();
        let walk = unwind(&mut frames, starting, from, &mut trace);
        table::insert(addr, weight, &frames[..walk.depth], mapped, &trace);
        Some(walk)
    };
    // The next countdown last: nothing above waits for its logarithm (a chain of dependent
    // multiplications), which the program's own code after the hook returns overlaps.
    with_state(|t| t.countdown.set(draw(t, mean)));
    // pthread_create is not async-signal-safe: it allocates (the new
    // thread's TLS, under the arena lock) and takes the loader's locks. A
    // hook called from a signal handler that interrupted malloc, or from
    // inside the loader, would wait forever for a lock its own thread holds
    // (the stress test hung in tcache_init that way: SIGALRM's handler
    // mapped memory while main's pthread_create held main_arena). Such a
    // sample is kept; the thread starts at the next one from plain code.
    #[cfg(target_arch = "x86_64")]
    if starting && walk.is_some_and(|w| w.plain) {
        crate::patcher::ensure_started();
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (starting, walk);
}

/// Whether this process needs the patching thread and has none yet: a
/// process the shim was injected into (and its forked children), which
/// must patch the objects it loads later. A preloaded shim has no thread.
fn patcher_wanted() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::inject::injected() && !crate::patcher::started();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

fn seed(t: &ThreadState, addr: usize) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into ts (vDSO, no allocation).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    let tls = std::ptr::from_ref(t) as u64;
    let s = (addr as u64) ^ tls.rotate_left(17) ^ (ts.tv_nsec as u64).rotate_left(40);
    t.rng.set(mix(s) | 1);
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
fn draw(t: &ThreadState, mean: f64) -> i64 {
    let mut x = t.rng.get();
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t.rng.set(x);
    // Uniform in (0, 1]: 53 random bits, never 0.
    let u = ((x >> 11) + 1) as f64 / (1u64 << 53) as f64;
    (-ln(u) * mean).max(1.0) as i64
}

/// The natural logarithm of a normal `u > 0` (relative error below 2·10⁻¹²
/// against libm's over 2·10⁷ draws), not libm's, whose code a sample would find out of cache
/// (0.85% of an allocation-heavy program's time at a 64 KiB interval, a
/// tenth of the shim's): `u = m · 2^e` with `m` in [√½, √2), and
/// `ln m = 2 atanh(s)`, `s = (m − 1)/(m + 1)`, `|s| ≤ 0.172`, by its series
/// to s¹³ (the first term left off, s¹⁵/15, is below 2·10⁻¹³).
#[inline]
fn ln(u: f64) -> f64 {
    let bits = u.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    if m > std::f64::consts::SQRT_2 {
        m /= 2.0;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let series = 1.0
        + s2 * (1.0 / 3.0
            + s2 * (1.0 / 5.0
                + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0 + s2 * (1.0 / 11.0 + s2 / 13.0)))));
    e as f64 * std::f64::consts::LN_2 + 2.0 * s * series
}

/// What a sampled block of `s` bytes stands for: `s / (1 - exp(-s/T))`.
/// A block much smaller than the interval (nearly all of them) by its
/// series, `T · x/(1 - e^-x) = T (1 + x/2 + x²/12 - x⁴/720 …)` with
/// `x = s/T < 1/16` (the first term left off is below 3·10⁻⁸ of it): no
/// call into libm, whose code a sample would find out of cache.
#[inline]
fn weight(s: f64, mean: f64) -> f64 {
    if s * 16.0 < mean {
        mean + s / 2.0 + s * s / (12.0 * mean)
    } else {
        s / -(-s / mean).exp_m1()
    }
}

#[cfg(target_arch = "x86_64")]
pub use crate::cfi::{Start, Trace};

/// Where an unwind starts (only the fast unwinder uses it).
#[cfg(not(target_arch = "x86_64"))]
#[derive(Clone, Copy)]
pub struct Start;

#[cfg(not(target_arch = "x86_64"))]
impl Start {
    #[inline(always)]
    pub fn here() -> Start {
        Start
    }

    pub fn sp(&self) -> usize {
        0
    }
}

/// What a fast walk read (only the fast unwinder traces one).
#[cfg(not(target_arch = "x86_64"))]
#[derive(Clone, Copy)]
pub struct Trace;

#[cfg(not(target_arch = "x86_64"))]
impl Trace {
    pub const fn new() -> Trace {
        Trace
    }

    pub fn sp(&self) -> usize {
        0
    }

    pub fn whole(&self) -> bool {
        false
    }

    pub fn again(&self, _from: Start) -> bool {
        false
    }
}

// libgcc's unwinder (linked by every Rust program on linux-gnu).
type TraceFn = extern "C" fn(ctx: *mut c_void, arg: *mut c_void) -> i32;
unsafe extern "C" {
    fn _Unwind_Backtrace(trace: TraceFn, arg: *mut c_void) -> i32;
    fn _Unwind_GetIPInfo(ctx: *mut c_void, ip_before_insn: *mut i32) -> usize;
    fn _Unwind_GetCFA(ctx: *mut c_void) -> usize;
}
const URC_NO_REASON: i32 = 0;
const URC_END_OF_STACK: i32 = 5;

struct Walk<'a> {
    frames: &'a mut [usize; MAX_FRAMES],
    depth: usize,
    /// Frames seen, kept or not.
    seen: usize,
    own: (usize, usize),
    loader: (usize, usize),
    /// Looking for a signal frame or a loader frame (then the walk goes on
    /// past the kept frames, up to MAX_CHECKED_FRAMES).
    checking: bool,
    /// A signal frame or a loader frame was seen.
    unsafe_context: bool,
    /// The fast unwinder does not know this thread's stack top yet: walk
    /// to the end (up to MAX_CHECKED_FRAMES) and tell it each CFA.
    learning: bool,
}

/// What [`unwind`] found.
pub struct Unwound {
    pub depth: usize,
    /// Asked to check, and the stack has no signal frame, no loader frame,
    /// and ended within MAX_CHECKED_FRAMES: the hook runs in plain code.
    pub plain: bool,
}

extern "C" fn step(ctx: *mut c_void, arg: *mut c_void) -> i32 {
    // SAFETY: arg is the Walk passed to _Unwind_Backtrace below.
    let walk = unsafe { &mut *arg.cast::<Walk>() };
    let mut signal_frame = 0;
    // SAFETY: ctx is the unwinder's current frame. The frame a signal
    // interrupted is marked as a signal frame (libgcc unwinds through the
    // sigreturn trampoline by its CFI's 'S' augmentation).
    let ip = unsafe { _Unwind_GetIPInfo(ctx, &raw mut signal_frame) };
    if ip == 0 {
        return URC_END_OF_STACK;
    }
    walk.seen += 1;
    #[cfg(target_arch = "x86_64")]
    if walk.learning {
        // SAFETY: ctx is the unwinder's current frame.
        crate::cfi::saw_cfa(unsafe { _Unwind_GetCFA(ctx) });
    }
    if walk.checking && (signal_frame != 0 || (walk.loader.0..walk.loader.1).contains(&ip)) {
        walk.unsafe_context = true;
        walk.checking = false;
    }
    let keeping = walk.depth < MAX_FRAMES;
    if keeping && !(walk.own.0..walk.own.1).contains(&ip) {
        walk.frames[walk.depth] = ip;
        walk.depth += 1;
    }
    let more = if walk.checking || walk.learning {
        walk.seen < MAX_CHECKED_FRAMES
    } else {
        walk.depth < MAX_FRAMES
    };
    if more {
        URC_NO_REASON
    } else {
        URC_END_OF_STACK
    }
}

/// The calling thread's return addresses outside the shim, innermost first;
/// with `check`, also whether the call comes from plain code (no signal
/// handler, not the loader) on the whole stack. Without `check`, the fast
/// unwinder first ([`crate::cfi`]), libgcc's when it gives up.
/// `trace`: what the fast unwinder read, when it unwound the whole stack.
fn unwind(
    frames: &mut [usize; MAX_FRAMES],
    check: bool,
    from: Start,
    trace: &mut Trace,
) -> Unwound {
    if !check {
        if let Some(depth) = unwind_fast(frames, from, trace) {
            return Unwound {
                depth,
                plain: false,
            };
        }
    }
    let mut walk = Walk {
        frames,
        depth: 0,
        seen: 0,
        own: (
            HOT.own_start.load(Ordering::Relaxed),
            HOT.own_end.load(Ordering::Relaxed),
        ),
        loader: (
            HOT.loader_start.load(Ordering::Relaxed),
            HOT.loader_end.load(Ordering::Relaxed),
        ),
        checking: check,
        unsafe_context: false,
        learning: !top_known(),
    };
    // SAFETY: step only writes within walk, which outlives the call.
    unsafe { _Unwind_Backtrace(step, (&raw mut walk).cast()) };
    Unwound {
        depth: walk.depth,
        plain: check && !walk.unsafe_context && walk.seen < MAX_CHECKED_FRAMES,
    }
}

#[cfg(target_arch = "x86_64")]
fn top_known() -> bool {
    crate::cfi::top_known()
}

#[cfg(not(target_arch = "x86_64"))]
fn top_known() -> bool {
    true
}

/// [`unwind`] by the fast unwinder, the shim's own frames left off; `None`
/// when it gave up.
#[cfg(target_arch = "x86_64")]
fn unwind_fast(frames: &mut [usize; MAX_FRAMES], from: Start, trace: &mut Trace) -> Option<usize> {
    let own = HOT.own_start.load(Ordering::Relaxed)..HOT.own_end.load(Ordering::Relaxed);
    crate::cfi::walk(from, frames, own, trace)
}

#[cfg(not(target_arch = "x86_64"))]
fn unwind_fast(
    _frames: &mut [usize; MAX_FRAMES],
    _from: Start,
    _trace: &mut Trace,
) -> Option<usize> {
    None
}

/// Records the address ranges of the shim's own loaded segments and of the
/// dynamic loader's.
fn find_text_ranges() {
    extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, _arg: *mut c_void) -> i32 {
        let me = find_text_ranges as *const () as usize;
        // SAFETY: no preconditions; 0 when there is no interpreter.
        let loader_base = unsafe { libc::getauxval(libc::AT_BASE) } as usize;
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
            HOT.own_start.store(lo, Ordering::Relaxed);
            HOT.own_end.store(hi, Ordering::Relaxed);
        } else if loader_base != 0 && base == loader_base {
            HOT.loader_start.store(lo, Ordering::Relaxed);
            HOT.loader_end.store(hi, Ordering::Relaxed);
        }
        0
    }
    // SAFETY: each only reads the loader's info.
    unsafe { libc::dl_iterate_phdr(Some(each), std::ptr::null_mut()) };
}
