//! The sampling allocator shim of `leakwatch run --native-sites`, preloaded
//! (`LD_PRELOAD`) into every process of the command.
//!
//! - The allocation functions of the C library are interposed and forwarded
//!   to glibc's own entry points (`__libc_malloc` …), which it exports for
//!   exactly this. Forwarding through `dlsym(RTLD_NEXT)` instead would need
//!   a bootstrap heap: dlsym allocates (its error buffer) before it has
//!   returned the real malloc.
//! - Allocations are sampled by bytes as a Poisson process (the scheme of
//!   tcmalloc and jemalloc): each thread counts down an exponentially
//!   distributed number of bytes, mean `LEAKWATCH_NATIVE_INTERVAL`, and the
//!   allocation that crosses zero is sampled. A block of `s` bytes is then
//!   sampled with probability `1 - exp(-s/T)`, so weighting it by
//!   `s / (1 - exp(-s/T))` makes the estimate of live bytes unbiased
//!   (≈ T for small blocks, ≈ s for large ones).
//! - A sampled block's call stack is unwound from `.eh_frame` (no frame
//!   pointers needed): by cached rules per return address ([`cfi`]), by
//!   libgcc's `_Unwind_Backtrace` where they do not reach; it is kept in
//!   fixed tables ([`table`]); nothing in a hook allocates. A sample taken
//!   from the same stack pointer as an earlier one, with the same values in
//!   every stack slot that walk read, takes its stack without unwinding
//!   (the memo, [`cfi::Trace`]).
//! - Each process keeps its stacks and their live bytes in `D/<pid>.sites`, a
//!   file mapped shared ([`sites`], its layout [`layout`]), which leakwatch
//!   reads after each run: return addresses only; leakwatch names them from
//!   the process' maps. No thread, no socket.
//! - Or, loaded into a running process by `attach --native-sites`
//!   ([`inject`]): configured by the call, the GOT entries of every
//!   loaded object redirected to the hooks; a thread ([`patcher`]) patches
//!   the objects loaded later.

#[cfg(target_arch = "x86_64")]
mod cfi;
mod glibc;
#[cfg(target_arch = "x86_64")]
mod inject;
mod layout;
#[cfg(target_arch = "x86_64")]
mod patcher;
mod sampler;
mod sites;
mod table;

use std::ffi::c_void;

use libc::size_t;

use glibc::{
    __libc_calloc, __libc_free, __libc_malloc, __libc_memalign, __libc_pvalloc, __libc_realloc,
    __libc_valloc,
};

// Allocations of the shim itself (the patching thread) go straight to
// glibc, never through the hooks.
#[global_allocator]
static OWN: glibc::Glibc = glibc::Glibc;

/// Runs `f` unless this thread is already inside the shim: its `busy` flag
/// is set while it runs the shim's own code (a sample, a sampled free, the
/// patching thread), and allocations made meanwhile (by the unwinder, by a
/// signal handler) pass straight through.
#[inline]
fn guarded(f: impl FnOnce()) {
    let entered = sampler::with_state(|t| !t.busy.replace(true));
    if entered {
        f();
        leave();
    }
}

/// Marks this thread as inside the shim until [`leave`].
pub(crate) fn enter() {
    sampler::with_state(|t| t.busy.set(true));
}

pub(crate) fn leave() {
    sampler::with_state(|t| t.busy.set(false));
}

/// Marks the current thread as the shim's own for good.
pub(crate) fn mark_own_thread() {
    enter();
}

/// Allocates by `alloc`, a forwarding call into glibc for `size` bytes,
/// and samples the block if it crosses this thread's countdown. Counted
/// first: on the fast path (all but one allocation per interval of bytes,
/// the shim preloaded) the hook is a handful of instructions and a tail
/// call into glibc, no frame and no register saved; everything else is one
/// tail call out of line.
#[inline(always)]
fn counted(
    size: usize,
    alloc: impl FnOnce() -> *mut c_void,
    slow: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    if sampler::count_fast(size) {
        return alloc();
    }
    slow()
}

/// [`counted`]'s other path, one per forwarding call: `extern "C"` (they
/// abort rather than unwind), so that a hook can make them its tail call —
/// a call into a function that may unwind needs a landing pad after it.
#[inline(never)]
extern "C" fn slow_malloc(size: size_t) -> *mut c_void {
    // SAFETY: forwarded as called.
    counted_slow(size, move || unsafe { __libc_malloc(size) })
}

#[inline(never)]
extern "C" fn slow_calloc(n: size_t, size: size_t) -> *mut c_void {
    // SAFETY: forwarded as called.
    counted_slow(n.saturating_mul(size), move || unsafe {
        __libc_calloc(n, size)
    })
}

#[inline(never)]
extern "C" fn slow_realloc(p: *mut c_void, size: size_t) -> *mut c_void {
    // SAFETY: forwarded as called.
    counted_slow(size, move || unsafe { __libc_realloc(p, size) })
}

#[inline(never)]
extern "C" fn slow_memalign(align: size_t, size: size_t) -> *mut c_void {
    // SAFETY: forwarded as called.
    counted_slow(size, move || unsafe { __libc_memalign(align, size) })
}

#[inline(never)]
extern "C" fn slow_valloc(size: size_t) -> *mut c_void {
    // SAFETY: forwarded as called.
    counted_slow(size, move || unsafe { __libc_valloc(size) })
}

#[inline(never)]
extern "C" fn slow_pvalloc(size: size_t) -> *mut c_void {
    // SAFETY: forwarded as called.
    counted_slow(size, move || unsafe { __libc_pvalloc(size) })
}

/// The countdown crossed zero, or is not in the static TLS block (the shim
/// was dlopened, or is idle).
#[inline(always)]
fn counted_slow(size: usize, alloc: impl FnOnce() -> *mut c_void) -> *mut c_void {
    match sampler::count_slow(size) {
        None => alloc(),
        Some(left) => sampled(alloc(), size, left, 0),
    }
}

/// The allocation that crossed the countdown, out of line. A failed one is
/// not sampled (the next allocation crosses again).
#[cold]
#[inline(never)]
fn sampled(p: *mut c_void, size: usize, countdown: i64, mapped: usize) -> *mut c_void {
    if !p.is_null() {
        // The stack is unwound from here (the hook's caller is one frame
        // up), while this function runs.
        let from = sampler::Start::here();
        guarded(|| sampler::sample(p as usize, size, countdown, from, mapped));
    }
    p
}

#[inline]
fn on_free(p: *mut c_void) {
    // No `enabled()` check: while the shim is idle the filter is all zero.
    // No null check either: a null pointer that passes the filter only
    // looks for address 0 in the block table, where no block is.
    if table::maybe_sampled(p as usize) {
        forget(p);
    }
}

/// The rare free that passed the filter, out of line: the fast path of
/// `free` stays a few instructions and a tail jump into glibc.
#[cold]
#[inline(never)]
fn forget(p: *mut c_void) {
    guarded(|| table::remove(p as usize));
}

/// # Safety
/// As C's `malloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc(size: size_t) -> *mut c_void {
    // SAFETY: as called.
    unsafe { hook_malloc(size) }
}

/// The body of `malloc`, with its own address: within the shim the
/// exported name binds to glibc's when the shim was dlopened.
#[inline]
pub(crate) unsafe extern "C" fn hook_malloc(size: size_t) -> *mut c_void {
    // SAFETY: forwarded as called.
    counted(
        size,
        move || unsafe { __libc_malloc(size) },
        move || slow_malloc(size),
    )
}

/// # Safety
/// As C's `calloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn calloc(n: size_t, size: size_t) -> *mut c_void {
    // SAFETY: as called.
    unsafe { hook_calloc(n, size) }
}

/// The body of `calloc`, with its own address: within the shim the
/// exported name binds to glibc's when the shim was dlopened.
#[inline]
pub(crate) unsafe extern "C" fn hook_calloc(n: size_t, size: size_t) -> *mut c_void {
    // SAFETY: forwarded as called.
    counted(
        n.saturating_mul(size),
        move || unsafe { __libc_calloc(n, size) },
        move || slow_calloc(n, size),
    )
}

/// # Safety
/// As C's `realloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: size_t) -> *mut c_void {
    // SAFETY: as called.
    unsafe { hook_realloc(p, size) }
}

/// The body of `realloc`, with its own address: within the shim the
/// exported name binds to glibc's when the shim was dlopened.
#[inline]
pub(crate) unsafe extern "C" fn hook_realloc(p: *mut c_void, size: size_t) -> *mut c_void {
    // Before glibc may hand the address to another thread.
    on_free(p);
    // SAFETY: forwarded as called.
    counted(
        size,
        move || unsafe { __libc_realloc(p, size) },
        move || slow_realloc(p, size),
    )
}

/// # Safety
/// As C's `reallocarray`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
        return std::ptr::null_mut();
    };
    // SAFETY: as realloc.
    unsafe { hook_realloc(p, total) }
}

/// # Safety
/// As C's `free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: as called.
    unsafe { hook_free(p) }
}

/// The body of `free`, with its own address: within the shim the
/// exported name binds to glibc's when the shim was dlopened.
#[inline]
pub(crate) unsafe extern "C" fn hook_free(p: *mut c_void) {
    if table::maybe_sampled(p as usize) {
        // SAFETY: as called.
        return unsafe { forget_and_free(p) };
    }
    // SAFETY: forwarded as called.
    unsafe { __libc_free(p) }
}

/// A free that passed the filter, out of line, so that the fast path of
/// `free` saves no register: forgets the block, then frees it.
#[cold]
#[inline(never)]
unsafe extern "C" fn forget_and_free(p: *mut c_void) {
    forget(p);
    // SAFETY: forwarded as called.
    unsafe { __libc_free(p) }
}

/// # Safety
/// As C's `cfree` (an old glibc alias of free).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cfree(p: *mut c_void) {
    // SAFETY: as free.
    unsafe { hook_free(p) }
}

/// # Safety
/// As C's `memalign`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memalign(align: size_t, size: size_t) -> *mut c_void {
    // SAFETY: as called.
    unsafe { hook_memalign(align, size) }
}

/// The body of `memalign`, with its own address: within the shim the
/// exported name binds to glibc's when the shim was dlopened.
#[inline]
pub(crate) unsafe extern "C" fn hook_memalign(align: size_t, size: size_t) -> *mut c_void {
    // SAFETY: forwarded as called.
    counted(
        size,
        move || unsafe { __libc_memalign(align, size) },
        move || slow_memalign(align, size),
    )
}

/// # Safety
/// As C's `aligned_alloc` (glibc's accepts any power of two, as memalign).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    // SAFETY: as called.
    unsafe { hook_aligned_alloc(align, size) }
}

/// The body of `aligned_alloc`, with its own address: within the shim the
/// exported name binds to glibc's when the shim was dlopened.
#[inline]
pub(crate) unsafe extern "C" fn hook_aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    // SAFETY: as memalign.
    unsafe { hook_memalign(align, size) }
}

/// # Safety
/// As C's `posix_memalign`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: size_t, size: size_t) -> i32 {
    // SAFETY: as called.
    unsafe { hook_posix_memalign(out, align, size) }
}

/// The body of `posix_memalign`, with its own address: within the shim the
/// exported name binds to glibc's when the shim was dlopened.
#[inline]
pub(crate) unsafe extern "C" fn hook_posix_memalign(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
) -> i32 {
    if !align.is_power_of_two() || align % size_of::<*mut c_void>() != 0 {
        return libc::EINVAL;
    }
    // SAFETY: forwarded with a valid alignment.
    let p = counted(
        size,
        move || unsafe { __libc_memalign(align, size) },
        move || slow_memalign(align, size),
    );
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a valid out pointer.
    unsafe { *out = p };
    0
}

/// # Safety
/// As C's `valloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn valloc(size: size_t) -> *mut c_void {
    // SAFETY: as called.
    unsafe { hook_valloc(size) }
}

/// The body of `valloc`, with its own address: within the shim the
/// exported name binds to glibc's when the shim was dlopened.
#[inline]
pub(crate) unsafe extern "C" fn hook_valloc(size: size_t) -> *mut c_void {
    // SAFETY: forwarded as called.
    counted(
        size,
        move || unsafe { __libc_valloc(size) },
        move || slow_valloc(size),
    )
}

/// # Safety
/// As C's `pvalloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pvalloc(size: size_t) -> *mut c_void {
    // SAFETY: as called.
    unsafe { hook_pvalloc(size) }
}

/// The body of `pvalloc`, with its own address: within the shim the
/// exported name binds to glibc's when the shim was dlopened.
#[inline]
pub(crate) unsafe extern "C" fn hook_pvalloc(size: size_t) -> *mut c_void {
    // SAFETY: forwarded as called.
    counted(
        size,
        move || unsafe { __libc_pvalloc(size) },
        move || slow_pvalloc(size),
    )
}

/// # Safety
/// As C's `mmap`. Anonymous mappings are sampled as blocks (CPython's
/// arenas, runtimes with their own heaps, programs that map their own
/// memory); glibc's malloc maps its large blocks through its internal
/// entry point, not this one, so they are never counted twice.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: i32,
    flags: i32,
    fd: i32,
    off: libc::off_t,
) -> *mut c_void {
    // SAFETY: the raw system call, as glibc's mmap makes it.
    // Every argument 64 bits wide: a variadic call leaves the upper half of
    // a 32-bit one undefined.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            addr,
            len,
            libc::c_long::from(prot),
            libc::c_long::from(flags),
            libc::c_long::from(fd),
            off,
        )
    };
    if p == -1 {
        return libc::MAP_FAILED;
    }
    let p = p as *mut c_void;
    if flags & libc::MAP_ANONYMOUS != 0 {
        if flags & libc::MAP_FIXED != 0 {
            // Mapped over whatever was there, sampled mappings included.
            unmapped(p, len);
        }
        if !sampler::count_fast(len) {
            if let Some(left) = sampler::count_slow(len) {
                sampled(p, len, left, len);
            }
        }
    }
    p
}

/// # Safety
/// As C's `mmap64` (the same call on 64-bit Linux).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: i32,
    flags: i32,
    fd: i32,
    off: libc::off_t,
) -> *mut c_void {
    // SAFETY: as mmap.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// Forgets the sampled mappings in `len` bytes at `p`, keeping what is
/// left of one unmapped in part (`table::unmap`).
/// Nothing but two loads when no sampled mapping is recorded and `p` passes
/// no filter bit (as a free of an unsampled block).
#[inline]
fn unmapped(p: *mut c_void, len: usize) {
    if table::any_mapping() || table::maybe_sampled(p as usize) {
        guarded(|| table::unmap(p as usize, len));
    }
}

/// # Safety
/// As C's `munmap`. A sampled mapping unmapped in part (its start, its end,
/// a hole inside: allocators that map ahead and give back what they did not
/// use) stays counted for the bytes left.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> i32 {
    unmapped(addr, len);
    // SAFETY: the raw system call, as glibc's munmap makes it.
    let rc = unsafe { libc::syscall(libc::SYS_munmap, addr, len) };
    if rc == -1 { -1 } else { 0 }
}

/// # Safety
/// As C's `mremap` (variadic in C: the fifth argument, the new address, is
/// passed, in the register a fixed fifth argument takes, only with
/// `MREMAP_FIXED`, and read only then). A sampled mapping that is moved or
/// resized keeps its sample where it lands, its weight scaled to the new
/// length; without this, a mapping moved by `MREMAP_MAYMOVE` stayed counted
/// at its old address for good, and its unmap at the new one was not seen.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: i32,
    new_addr: *mut c_void,
) -> *mut c_void {
    let new_addr = if flags & libc::MREMAP_FIXED != 0 {
        new_addr
    } else {
        std::ptr::null_mut()
    };
    // Taken out before the call, put back after it: once moved, the old
    // address may be mapped and sampled again by another thread at once.
    // An old length of 0 makes a second mapping of a shared one, which
    // stays: nothing moves.
    let mut taken = None;
    if old_len != 0 && table::maybe_sampled(old as usize) {
        guarded(|| taken = table::take(old as usize));
    }
    // SAFETY: the raw system call, as glibc's mremap makes it.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mremap,
            old,
            old_len,
            new_len,
            libc::c_long::from(flags),
            new_addr,
        )
    };
    if let Some(b) = taken {
        let (at, len) = if p == -1 {
            (old as usize, old_len)
        } else {
            (p as usize, new_len)
        };
        guarded(|| table::put_back(b, at, old_len, len));
    }
    if p == -1 {
        return libc::MAP_FAILED;
    }
    p as *mut c_void
}

/// Runs when the shim is loaded, before the program's `main`.
extern "C" fn init() {
    guarded(sampler::init);
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;
