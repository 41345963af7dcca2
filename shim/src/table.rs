//! Fixed-size tables, allocated once in `.bss` (untouched pages cost
//! nothing): the sampled blocks by address (of which only as many slots
//! are used as the live samples need, doubling as they grow), the call
//! stacks they came from with their live bytes, and a filter that lets
//! `free` of an unsampled block (nearly all of them) return after one load
//! of one bit.
//!
//! The block and stack tables are written under one spin lock, taken only
//! by a sample (one per interval of bytes) and by a free that passes the
//! filter. A stack, once published (its depth stored with release order),
//! never changes. Every write to a stack is repeated in the process' sites
//! file ([`sites`](crate::sites)), which leakwatch reads.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};

pub use crate::layout::STACKS;
use crate::sampler::{HOT, MAX_FRAMES, Start, Trace, mix};
use crate::sites;

/// Sampled blocks live at once, at most (at the default interval, 2^17
/// covers a live heap of ≈ 48 GiB at three quarters full).
const BLOCKS: usize = 1 << 17;
/// The block table's first capacity; it doubles when three quarters full.
/// A sample's insert and a sampled free's removal each land on a random
/// slot, so in a table sized for the most a process could need (3 MiB) each
/// is a cache and TLB miss; 2^10 slots (24 KiB, 768 live samples, ≈ 48 MiB
/// of live heap at 64 KiB) stay in cache, and a process with more live heap
/// gets a table in proportion. Measured:
/// docs/performance.md#the-shims-tables-in-cache.
pub(crate) const FIRST_BLOCKS: usize = 1 << 10;
/// Granules of the filter, one bit each (128 KiB of bits). A granule is
/// 16 bytes of address (malloc's alignment), taken straight from the
/// address, not hashed: the frees of a heap's neighbouring blocks read
/// neighbouring bits, so the part of the filter a program's heap uses stays
/// in cache (a hashed index puts every free's load on a cache miss:
/// docs/performance.md#the-shims-tables-in-cache). A free of an unsampled
/// block takes the lock only on a collision: a live sampled block in the
/// same granule of another 16 MiB window, probability (live samples) /
/// FILTER at most.
const FILTER: usize = 1 << 20;
/// Linear probing looks this far for a stack before giving up.
const MAX_PROBE: usize = 64;

#[derive(Clone, Copy)]
struct Block {
    /// 0: empty.
    addr: usize,
    weight: u64,
    stack: u32,
}

const EMPTY: Block = Block {
    addr: 0,
    weight: 0,
    stack: 0,
};

/// What only the lock holder touches.
struct Locked {
    /// Two block tables: the live one (`LIVE_TABLE`) uses its first
    /// `CAPACITY` slots; growing rehashes it into the other. Pages never
    /// touched cost nothing, so the process holds ≈ 1.5× the slots in use.
    blocks: [[Block; BLOCKS]; 2],
    used: usize,
    /// Granules more than one live sampled block maps to (blocks in
    /// different 16 MiB windows, [`granule`]), with how many more: their
    /// bit stays set until the last goes. Full: a granule that cannot be
    /// recorded stays set for good (a free there only takes the lock).
    shared: [(u32, u32); SHARED],
    shared_used: usize,
    /// The sampled anonymous mappings (start, length in bytes), sorted by start, so that an
    /// unmap of part of one (`unmap`) keeps the rest counted. Full: a mapping sampled then is
    /// forgotten only when unmapped from its start, as a block is.
    maps: [(usize, usize); MAPS],
    maps_used: usize,
    /// The last whole walk from each of `MEMOS` places and the stack it
    /// found ([`insert_again`]).
    memos: [Memo; MEMOS],
}

/// A walk's trace and the stack it read. A stack once published never
/// changes, so the index stays right for the process' life (across a fork,
/// a take-over, a new sites file).
#[derive(Clone, Copy)]
struct Memo {
    trace: Trace,
    stack: u32,
}

/// Places remembered (40 KiB of `.bss`, touched only by samples): the
/// allocation sites of a program's hot loops, on all its threads.
const MEMOS: usize = 64;
const _: () = assert!(MEMOS * std::mem::size_of::<Memo>() <= 40 << 10);

/// Sampled mappings recorded at once (16 KiB; at the default interval nearly every mapping
/// of 1 MiB or more is sampled: CPython's arenas of a 4 GiB heap).
const MAPS: usize = 4096;
/// How many mappings are recorded: a munmap takes the lock only when some are (or its
/// address passes the filter).
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// Granules shared by live sampled blocks recorded (a pair of blocks
/// `2^24` bytes apart modulo the filter: with `n` live samples, about
/// `n² / 2^21` of them; 1,000 live samples share ≈ 0.5).
const SHARED: usize = 64;

struct Shared<T>(UnsafeCell<T>);
// SAFETY: every access goes through the lock, or (frames) reads a slot
// after its release-ordered publication and never while it is written.
unsafe impl<T> Sync for Shared<T> {}

static LOCK: AtomicBool = AtomicBool::new(false);
static LOCKED: Shared<Locked> = Shared(UnsafeCell::new(Locked {
    blocks: [[EMPTY; BLOCKS]; 2],
    used: 0,
    shared: [(0, 0); SHARED],
    shared_used: 0,
    maps: [(0, 0); MAPS],
    maps_used: 0,
    memos: [Memo {
        trace: Trace::new(),
        stack: 0,
    }; MEMOS],
}));
static FRAMES: Shared<[[usize; MAX_FRAMES]; STACKS]> =
    Shared(UnsafeCell::new([[0; MAX_FRAMES]; STACKS]));
/// What a sample and a free of one of its blocks touch of a stack, side by
/// side (in four arrays, each would be a cache miss per sample).
#[repr(C, align(32))]
struct StackSlot {
    /// Its frames' hash (written and read under the lock).
    hash: AtomicU64,
    /// Its depth; 0 while the slot is free.
    depth: AtomicU32,
    /// Estimated live bytes (sum of its live samples' weights).
    live: AtomicI64,
    /// Live sampled blocks.
    blocks: AtomicI64,
}

static STACK_SLOTS: [StackSlot; STACKS] = [const {
    StackSlot {
        hash: AtomicU64::new(0),
        depth: AtomicU32::new(0),
        live: AtomicI64::new(0),
        blocks: AtomicI64::new(0),
    }
}; STACKS];
/// Written only under the lock, by a load and a store (a locked
/// read-modify-write would cost a sample more than its table work:
/// docs/performance.md#the-allocator-shim); read without it by `free`.
static FILTER_BITS: [AtomicU64; FILTER / 64] = [const { AtomicU64::new(0) }; FILTER / 64];
/// Samples taken under the lock (a load and a store there, as the filter).
static SAMPLES: AtomicU64 = AtomicU64::new(0);
/// Samples taken while a fork held the table: dropped, and counted apart.
static SAMPLES_UNLOCKED: AtomicU64 = AtomicU64::new(0);
/// Samples not kept (a table full, or taken while a fork held the table).
pub static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Frees not seen because a fork held the table.
pub static MISSED_FREES: AtomicU64 = AtomicU64::new(0);

/// Set for good once a shared granule could not be recorded: from then on
/// no bit of the filter is cleared (frees of unsampled blocks in the
/// granules of freed samples take the lock, and find nothing).
static STICKY: AtomicBool = AtomicBool::new(false);

/// Set while a fork holds the lock (`lock_for_fork` until `unlock_after_fork`).
static FORKING: AtomicBool = AtomicBool::new(false);

/// Takes the lock, unless a fork holds it: then false at once, and the
/// caller skips its sample or removal. Waiting would deadlock: a signal
/// handler that maps memory in a thread interrupted inside glibc's malloc
/// holds that arena's lock, which the forking thread waits for
/// (`__malloc_fork_lock_parent`) while holding this one.
fn lock() -> bool {
    let mut spins = 0u32;
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        if FORKING.load(Ordering::Acquire) {
            return false;
        }
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
    true
}

fn unlock() {
    LOCK.store(false, Ordering::Release);
}

/// The lock held across fork (pthread_atfork's prepare), so the child never
/// inherits a table half written; others give up rather than wait for it.
pub fn lock_for_fork() {
    while !lock() {}
    FORKING.store(true, Ordering::Release);
}

/// After fork, in the parent and in the child.
pub fn unlock_after_fork() {
    FORKING.store(false, Ordering::Release);
    unlock();
}

/// The slot where the probe for `addr` starts in a block table of
/// `capacity` slots.
#[inline]
fn home(addr: usize, capacity: usize) -> usize {
    mix(addr as u64) as usize & (capacity - 1)
}

/// Which of `Locked::blocks` is live, and its capacity (a power of two):
/// written under the lock, read without it only to prefetch.
#[inline]
fn live_table() -> usize {
    usize::from(HOT.live_table.load(Ordering::Relaxed) & 1)
}

#[inline]
fn capacity() -> usize {
    HOT.capacity.load(Ordering::Relaxed) as usize
}

/// The live block table, its slots in use (under the lock).
fn live_blocks(t: &mut Locked) -> &mut [Block] {
    let capacity = capacity();
    &mut t.blocks[live_table()][..capacity]
}

/// Asks the cache for the slots `insert(addr, …)` will touch, so that their
/// misses overlap the unwinding that comes first. Reads the table's shape
/// without the lock: a stale one only fetches a line for nothing.
#[inline]
pub fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let capacity = capacity();
        let live = live_table();
        let t = LOCKED.0.get();
        // SAFETY: only addresses are computed, within the static tables
        // (capacity ≤ BLOCKS); nothing is read or
        // written through them, and a prefetch never faults.
        unsafe {
            let block = (&raw const (*t).blocks[live]).cast::<Block>();
            _mm_prefetch(block.add(home(addr, capacity)).cast(), _MM_HINT_T0);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// `addr`'s granule in the filter: its 16-byte granule in a 16 MiB window,
/// xor the window's number (so that page-aligned blocks of different
/// windows spread too).
#[inline]
fn granule(addr: usize) -> usize {
    ((addr >> 4) ^ (addr >> 24)) & (FILTER - 1)
}

/// False when `addr` is certainly not a live sampled block.
#[inline]
pub fn maybe_sampled(addr: usize) -> bool {
    let g = granule(addr);
    FILTER_BITS[g / 64].load(Ordering::Relaxed) & (1 << (g % 64)) != 0
}

/// Records a sampled block of `weight` estimated bytes allocated from
/// `frames`; `mapped`: the length of the anonymous mapping it is (0 for a
/// block of the heap).
/// `trace`: what the walk that found `frames` read; a whole one is kept as
/// this place's memo ([`insert_again`]).
pub fn insert(addr: usize, weight: u64, frames: &[usize], mapped: usize, trace: &Trace) {
    if !lock() {
        SAMPLES_UNLOCKED.fetch_add(1, Ordering::Relaxed);
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // SAFETY: the lock is held.
    let t = unsafe { &mut *LOCKED.0.get() };
    let stack = stack_slot(t, frames);
    if let Some(stack) = stack.filter(|_| trace.whole()) {
        t.memos[memo_of(trace.sp())] = Memo {
            trace: *trace,
            stack,
        };
    }
    keep(t, addr, weight, stack, mapped);
    unlock();
}

/// Records a sample whose stack is the one its memo holds, if a walk from
/// `from` would read what that memo's walk did ([`Trace::again`]): no
/// unwinding, no stack lookup. False, with nothing recorded, if not.
pub fn insert_again(addr: usize, weight: u64, from: Start, mapped: usize) -> bool {
    if !lock() {
        return false;
    }
    // SAFETY: the lock is held.
    let t = unsafe { &mut *LOCKED.0.get() };
    let memo = &t.memos[memo_of(from.sp())];
    let again = memo.trace.again(from);
    if again {
        let stack = memo.stack;
        keep(t, addr, weight, Some(stack), mapped);
    }
    unlock();
    again
}

/// A sample's block under its stack (`None`: the stack table was full), under
/// the lock; the sites file made first if there is none.
fn keep(t: &mut Locked, addr: usize, weight: u64, stack: Option<u32>, mapped: usize) {
    SAMPLES.store(SAMPLES.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    if sites::missing() {
        sites::create(crate::sampler::interval(), copy_stacks);
    }
    let kept = stack.is_some_and(|stack| insert_block(t, addr, weight, stack));
    if kept && mapped > 0 {
        record_map(t, addr, mapped);
    }
    if !kept {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
    sites::counts(
        SAMPLES.load(Ordering::Relaxed) + SAMPLES_UNLOCKED.load(Ordering::Relaxed),
        DROPPED.load(Ordering::Relaxed),
    );
}

/// The memo a walk from stack pointer `sp` is kept in: one per place on
/// each thread's stack, by the hash of its stack pointer (another place or
/// thread with the same slot takes it over; its next sample unwinds).
fn memo_of(sp: usize) -> usize {
    mix(sp as u64) as usize & (MEMOS - 1)
}

/// Makes the sites file now if there is none (a process the shim was
/// injected into: leakwatch finds it at once).
pub fn make_sites_file() {
    if !lock() {
        return;
    }
    if sites::missing() {
        sites::create(crate::sampler::interval(), copy_stacks);
    }
    unlock();
}

/// A later `attach --native-sites` takes the resident shim over: under the
/// lock, every sampled block is forgotten (growth is counted from this
/// attach), the stacks kept at 0, and the sites file from now on is a new
/// one in `dir`, made at once. `resume` runs under the lock too (sampling
/// back on at `interval`). False if `dir` is unusable.
pub fn take_over(dir: &[u8], interval: u64, resume: impl FnOnce()) -> bool {
    // A fork holds the lock only for the fork's duration.
    while !lock() {
        std::hint::spin_loop();
    }
    let ok = sites::switch_dir(dir);
    if ok {
        // SAFETY: the lock is held.
        let t = unsafe { &mut *LOCKED.0.get() };
        live_blocks(t).fill(EMPTY);
        t.used = 0;
        t.shared_used = 0;
        t.maps_used = 0;
        MAPPED.store(0, Ordering::Relaxed);
        for word in &FILTER_BITS {
            word.store(0, Ordering::Relaxed);
        }
        STICKY.store(false, Ordering::Relaxed);
        for slot in &STACK_SLOTS {
            slot.live.store(0, Ordering::Relaxed);
            slot.blocks.store(0, Ordering::Relaxed);
        }
        SAMPLES.store(0, Ordering::Relaxed);
        SAMPLES_UNLOCKED.store(0, Ordering::Relaxed);
        DROPPED.store(0, Ordering::Relaxed);
        MISSED_FREES.store(0, Ordering::Relaxed);
        resume();
        sites::create(interval, copy_stacks);
    }
    unlock();
    ok
}

/// The patching thread's check, under the lock so that a take-over
/// ([`take_over`]) never meets it halfway: if the session's leakwatch asked
/// sampling to stop, stops it (`stop`) and says so.
pub fn stop_if_requested(stop: impl FnOnce()) -> bool {
    if !lock() {
        return false;
    }
    let asked = sites::stop_requested();
    if asked {
        stop();
    }
    unlock();
    asked
}

/// Into a new sites file, under the lock: every stack published so far.
fn copy_stacks() {
    for i in 0..STACKS {
        if let Some((frames, live, blocks)) = stack(i) {
            sites::publish(i, frames);
            sites::account(i, live, blocks);
        }
    }
}

/// Forgets `addr` if it is a sampled block, before glibc frees it.
pub fn remove(addr: usize) {
    let _ = take(addr);
}

/// A sampled block taken out of the table while its mapping is moved
/// (`mremap`): its weight and stack, to be put back where it lands.
pub struct Taken {
    weight: u64,
    stack: u32,
    /// Recorded as a mapping (`insert`'s `mapped`).
    mapped: bool,
}

/// Takes `addr`'s block out, if it is a sampled one.
pub fn take(addr: usize) -> Option<Taken> {
    if !lock() {
        // During a fork: the block stays counted (rare: a free that races a
        // fork in another thread and hits a sampled block).
        MISSED_FREES.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    // SAFETY: the lock is held.
    let t = unsafe { &mut *LOCKED.0.get() };
    let b = remove_block(t, addr);
    let mapped = b.is_some() && forget_map(t, addr);
    unlock();
    b.map(|b| Taken {
        weight: b.weight,
        stack: b.stack,
        mapped,
    })
}

/// Puts a taken block back at `addr`, its weight scaled from `old_len` to
/// `new_len` bytes: it was sampled with the probability of its old size and
/// weighed by it, so the scaled weight stays an unbiased estimate of the
/// new size (as a block that was not sampled stays unsampled).
pub fn put_back(b: Taken, addr: usize, old_len: usize, new_len: usize) {
    let scaled = u128::from(b.weight) * new_len as u128 / (old_len.max(1) as u128);
    let weight = u64::try_from(scaled).unwrap_or(u64::MAX);
    if !lock() {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // SAFETY: the lock is held.
    let t = unsafe { &mut *LOCKED.0.get() };
    let kept = insert_block(t, addr, weight, b.stack);
    if kept && b.mapped {
        record_map(t, addr, new_len);
    }
    unlock();
    if !kept {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Before `len` bytes at `addr` are unmapped (munmap, or a fixed mapping over them): every
/// sampled mapping they cover is forgotten, and of one they cover in part the rest stays
/// counted, its weight in proportion to the bytes left (as `put_back` scales a resized
/// one). A block at `addr` that is not a recorded mapping is forgotten as a free forgets it.
pub fn unmap(addr: usize, len: usize) {
    let len = pages(len);
    if MAPPED.load(Ordering::Relaxed) == 0 {
        if maybe_sampled(addr) {
            remove(addr);
        }
        return;
    }
    if !lock() {
        MISSED_FREES.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // SAFETY: the lock is held.
    let t = unsafe { &mut *LOCKED.0.get() };
    let end = addr.saturating_add(len.max(1));
    let mut hit = false;
    // The recorded mappings are sorted and disjoint: those that overlap [addr, end) are
    // the run before the first that starts at or after `end`.
    let mut i = t.maps[..t.maps_used].partition_point(|m| m.0 < end);
    while i > 0 && t.maps[i - 1].0 + t.maps[i - 1].1 > addr {
        i -= 1;
        let (start, mlen) = t.maps[i];
        hit = true;
        forget_map(t, start);
        let Some(b) = remove_block(t, start) else {
            continue;
        };
        let pieces = [(start, addr.min(start + mlen).saturating_sub(start)), {
            let from = end.max(start);
            (from, (start + mlen).saturating_sub(from))
        }];
        for (at, left) in pieces.into_iter().filter(|p| p.1 > 0) {
            let scaled = u128::from(b.weight) * left as u128 / (mlen.max(1) as u128);
            let weight = u64::try_from(scaled).unwrap_or(u64::MAX);
            if insert_block(t, at, weight, b.stack) {
                record_map(t, at, left);
            } else {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    if !hit && maybe_sampled(addr) {
        let _ = remove_block(t, addr);
    }
    unlock();
}

/// `len` rounded up to whole pages, as the kernel maps and unmaps them.
fn pages(len: usize) -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let mut page = PAGE.load(Ordering::Relaxed);
    if page == 0 {
        // SAFETY: no preconditions; it reads the auxiliary vector, allocates nothing.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        page = usize::try_from(size)
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096);
        PAGE.store(page, Ordering::Relaxed);
    }
    len.saturating_add(page - 1) & !(page - 1)
}

/// Whether any sampled mapping is recorded (read without the lock).
#[inline]
pub fn any_mapping() -> bool {
    MAPPED.load(Ordering::Relaxed) > 0
}

/// Records a sampled mapping, in start order; a full record leaves it out.
fn record_map(t: &mut Locked, addr: usize, len: usize) {
    let len = pages(len);
    let used = t.maps_used;
    if used >= MAPS {
        return;
    }
    let i = t.maps[..used].partition_point(|m| m.0 < addr);
    if i < used && t.maps[i].0 == addr {
        t.maps[i].1 = len;
        return;
    }
    t.maps.copy_within(i..used, i + 1);
    t.maps[i] = (addr, len);
    t.maps_used += 1;
    MAPPED.store(t.maps_used, Ordering::Relaxed);
}

/// Forgets the record of the mapping at `addr`; false if there was none.
fn forget_map(t: &mut Locked, addr: usize) -> bool {
    let used = t.maps_used;
    let i = t.maps[..used].partition_point(|m| m.0 < addr);
    if i >= used || t.maps[i].0 != addr {
        return false;
    }
    t.maps.copy_within(i + 1..used, i);
    t.maps_used -= 1;
    MAPPED.store(t.maps_used, Ordering::Relaxed);
    true
}

/// Doubles the live block table into the other one, if it may grow.
fn grow(t: &mut Locked) -> bool {
    let (from, capacity) = (live_table(), capacity());
    if capacity >= BLOCKS {
        return false;
    }
    let bigger = capacity * 2;
    let [a, b] = &mut t.blocks;
    let (old, new) = if from == 0 { (a, b) } else { (b, a) };
    let (old, new) = (&mut old[..capacity], &mut new[..bigger]);
    // The other table is empty: cleared when it was last left.
    for slot in old.iter_mut() {
        if slot.addr != 0 {
            let mut i = home(slot.addr, bigger);
            while new[i].addr != 0 {
                i = (i + 1) & (bigger - 1);
            }
            new[i] = *slot;
            *slot = EMPTY;
        }
    }
    HOT.capacity.store(bigger as u32, Ordering::Relaxed);
    HOT.live_table.store(1 - from as u8, Ordering::Relaxed);
    true
}

fn insert_block(t: &mut Locked, addr: usize, weight: u64, stack: u32) -> bool {
    if t.used >= capacity() / 4 * 3 && !grow(t) {
        return false;
    }
    let blocks = live_blocks(t);
    let mask = blocks.len() - 1;
    let mut i = home(addr, blocks.len());
    while blocks[i].addr != 0 && blocks[i].addr != addr {
        i = (i + 1) & mask;
    }
    let old = blocks[i];
    if old.addr == addr {
        // A free the shim did not see (from a signal handler inside a
        // sample): the old block is gone.
        account(old.stack, -(old.weight as i64), -1);
    } else {
        t.used += 1;
        let g = granule(addr);
        let bit = 1 << (g % 64);
        let word = &FILTER_BITS[g / 64];
        let bits = word.load(Ordering::Relaxed);
        word.store(bits | bit, Ordering::Relaxed);
        if bits & bit != 0 {
            share(t, g as u32);
        }
    }
    live_blocks(t)[i] = Block {
        addr,
        weight,
        stack,
    };
    account(stack, weight as i64, 1);
    true
}

/// Forgets `addr`'s block, if sampled, and returns it.
fn remove_block(t: &mut Locked, addr: usize) -> Option<Block> {
    let blocks = live_blocks(t);
    let (capacity, mask) = (blocks.len(), blocks.len() - 1);
    let mut i = home(addr, capacity);
    loop {
        match blocks[i].addr {
            0 => return None,
            a if a == addr => break,
            _ => i = (i + 1) & mask,
        }
    }
    let b = blocks[i];
    let removed = Some(b);
    account(b.stack, -(b.weight as i64), -1);
    t.used -= 1;
    let g = granule(addr);
    if !unshare(t, g as u32) {
        let word = &FILTER_BITS[g / 64];
        word.store(
            word.load(Ordering::Relaxed) & !(1 << (g % 64)),
            Ordering::Relaxed,
        );
    }
    // Backward-shift deletion keeps every probe chain unbroken without
    // tombstones (Knuth, TAOCP vol. 3, 6.4, algorithm R).
    let blocks = live_blocks(t);
    let mut j = i;
    loop {
        j = (j + 1) & mask;
        let next = blocks[j];
        if next.addr == 0 {
            blocks[i] = EMPTY;
            return removed;
        }
        let k = home(next.addr, capacity);
        let stays = if i <= j {
            i < k && k <= j
        } else {
            i < k || k <= j
        };
        if !stays {
            blocks[i] = next;
            i = j;
        }
    }
}

/// One more live sampled block in granule `g`, whose bit was set already.
/// A full record leaves it unrecorded: its bit is then never cleared.
fn share(t: &mut Locked, g: u32) {
    let used = t.shared_used;
    if let Some(entry) = t.shared[..used].iter_mut().find(|e| e.0 == g) {
        entry.1 += 1;
    } else if used < SHARED {
        t.shared[used] = (g, 1);
        t.shared_used += 1;
    } else {
        STICKY.store(true, Ordering::Relaxed);
    }
}

/// One fewer live sampled block in granule `g`: true while others remain
/// (or may: the record overflowed once), so its bit stays set.
fn unshare(t: &mut Locked, g: u32) -> bool {
    let used = t.shared_used;
    if let Some(i) = t.shared[..used].iter().position(|e| e.0 == g) {
        t.shared[i].1 -= 1;
        if t.shared[i].1 == 0 {
            t.shared[i] = t.shared[used - 1];
            t.shared_used -= 1;
        }
        return true;
    }
    STICKY.load(Ordering::Relaxed)
}

/// Under the lock: every writer holds it, so a load and a store (no locked
/// read-modify-write) keep the sums exact; the sites file gets them too.
fn account(stack: u32, bytes: i64, blocks: i64) {
    let slot = &STACK_SLOTS[stack as usize];
    let (live, count) = (&slot.live, &slot.blocks);
    let (live_now, count_now) = (
        live.load(Ordering::Relaxed) + bytes,
        count.load(Ordering::Relaxed) + blocks,
    );
    live.store(live_now, Ordering::Relaxed);
    count.store(count_now, Ordering::Relaxed);
    sites::account(stack as usize, live_now, count_now);
}

/// The slot of `frames`, added if new; `None` when the table is full.
/// `_locked`: proof that the lock is held.
fn stack_slot(_locked: &mut Locked, frames: &[usize]) -> Option<u32> {
    let hash = frames
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &f| mix(h ^ f as u64));
    let start = hash as usize & (STACKS - 1);
    for probe in 0..MAX_PROBE {
        let i = (start + probe) & (STACKS - 1);
        let depth = STACK_SLOTS[i].depth.load(Ordering::Relaxed) as usize;
        if depth == 0 {
            let slot = FRAMES.0.get().cast::<[usize; MAX_FRAMES]>();
            // SAFETY: slot i is unpublished (depth 0) and the lock is held:
            // nobody else reads or writes it.
            let dst = unsafe { &mut *slot.add(i) };
            dst[..frames.len()].copy_from_slice(frames);
            STACK_SLOTS[i].hash.store(hash, Ordering::Relaxed);
            // An empty stack (the unwinder failed) still needs depth ≥ 1.
            STACK_SLOTS[i]
                .depth
                .store(frames.len().max(1) as u32, Ordering::Release);
            sites::publish(i, frames);
            return Some(i as u32);
        }
        if STACK_SLOTS[i].hash.load(Ordering::Relaxed) == hash
            && stack(i).is_some_and(|(f, _, _)| f == frames)
        {
            return Some(i as u32);
        }
    }
    None
}

/// Stack `i`'s frames (innermost first), live bytes and live sampled blocks,
/// if the slot is in use.
pub fn stack(i: usize) -> Option<(&'static [usize], i64, i64)> {
    let slot = STACK_SLOTS.get(i)?;
    let depth = slot.depth.load(Ordering::Acquire) as usize;
    if depth == 0 {
        return None;
    }
    let all = FRAMES.0.get().cast::<[usize; MAX_FRAMES]>();
    // SAFETY: a published slot is never written again.
    let frames = unsafe { &*all.add(i) };
    // Depth 1 with a zero frame: the unwinder found nothing.
    let frames = &frames[..depth.min(MAX_FRAMES)];
    let frames = if frames == [0] { &[][..] } else { frames };
    Some((
        frames,
        slot.live.load(Ordering::Relaxed),
        slot.blocks.load(Ordering::Relaxed),
    ))
}
