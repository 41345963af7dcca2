//! A fast unwinder for the common case, with libgcc's as the fallback.
//!
//! libgcc's `_Unwind_Backtrace` re-reads each frame's CIE and FDE and runs
//! its CFA program on every call: ≈ 1,200 instructions a frame, ≈ 1.5 µs a
//! sample (most of the shim's cost at the default interval). Here each
//! return address' rule is worked out once from the object's
//! `.eh_frame_hdr` (found by `_dl_find_object`, lock-free and
//! async-signal-safe) and cached: the CFA as `rsp` or `rbp` plus an offset,
//! where the return address and the caller's `rbp` were saved. Anything
//! else — a DWARF expression, a signal frame, a register rule that is not
//! an offset, an encoding it does not know — makes [`walk`] give up, and
//! the caller unwinds with libgcc instead; so does any frame whose CFA
//! leaves the stack span libgcc itself has walked on this thread. Reads
//! stay in `[rsp, top]`, memory of the thread's own stack.

use std::cell::Cell;
use std::ffi::c_void;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sampler::{ThreadState, with_state};

/// Cached rules (direct-mapped by return address).
const CACHE: usize = 1 << 12;
const REG_RBP: u64 = 6;
const REG_RSP: u64 = 7;
const REG_RA: u64 = 16;
/// DW_CFA_remember_state nesting kept.
const MAX_STATES: usize = 4;

#[repr(C)]
struct DlFindObject {
    flags: u64,
    map_start: *mut c_void,
    map_end: *mut c_void,
    link_map: *mut c_void,
    eh_frame: *mut c_void,
    reserved: [u64; 8],
}

unsafe extern "C" {
    fn _dl_find_object(address: *mut c_void, result: *mut DlFindObject) -> i32;
}

/// Raises this thread's known stack top to `cfa` (from a libgcc walk).
pub fn saw_cfa(cfa: usize) {
    with_state(|t| {
        if cfa > t.top.get() {
            t.top.set(cfa);
        }
    });
}

/// How to find a frame's caller, at one return address.
#[derive(Clone, Copy, PartialEq, Debug)]
struct Rule {
    /// The CFA is `rbp` + offset, else `rsp` + offset.
    cfa_rbp: bool,
    cfa_off: i32,
    /// Where the caller's rbp was saved (CFA-relative); 0: rbp unchanged.
    rbp_off: i32,
    /// Where the return address was saved (CFA-relative); 0: none (the
    /// outermost frame).
    ra_off: i32,
}

impl Rule {
    fn pack(self) -> u64 {
        // 1 in bit 63 marks a filled slot.
        (1 << 63)
            | (u64::from(self.cfa_rbp) << 62)
            | ((self.cfa_off as u16 as u64) << 32)
            | ((self.rbp_off as u16 as u64) << 16)
            | (self.ra_off as u16 as u64)
    }

    fn unpack(v: u64) -> Rule {
        Rule {
            cfa_rbp: v & (1 << 62) != 0,
            cfa_off: i32::from((v >> 32) as u16 as i16),
            rbp_off: i32::from((v >> 16) as u16 as i16),
            ra_off: i32::from(v as u16 as i16),
        }
    }

    fn fits(self) -> bool {
        [self.cfa_off, self.rbp_off, self.ra_off]
            .iter()
            .all(|&o| i16::try_from(o).is_ok())
    }
}

/// One cached rule: the return address it is for (0: empty) and the rule,
/// side by side so that a lookup touches one cache line, not one in each of
/// two arrays (a sample's frames each missed the cache twice: a third of
/// the walk's time on benches/harness/alloc_churn.c).
#[repr(C, align(16))]
struct Slot {
    key: AtomicU64,
    rule: AtomicU64,
}

static SLOTS: [Slot; CACHE] = [const {
    Slot {
        key: AtomicU64::new(0),
        rule: AtomicU64::new(0),
    }
}; CACHE];

fn cached(pc: usize) -> Option<Rule> {
    let slot = &SLOTS[(crate::sampler::mix(pc as u64) as usize) & (CACHE - 1)];
    let k1 = slot.key.load(Ordering::Acquire);
    let v = slot.rule.load(Ordering::Acquire);
    let k2 = slot.key.load(Ordering::Acquire);
    (k1 == pc as u64 && k2 == k1 && v != 0).then(|| Rule::unpack(v))
}

fn remember(pc: usize, rule: Rule) {
    let slot = &SLOTS[(crate::sampler::mix(pc as u64) as usize) & (CACHE - 1)];
    // A reader between these stores sees the key change and misses.
    slot.key.store(0, Ordering::Release);
    slot.rule.store(rule.pack(), Ordering::Release);
    slot.key.store(pc as u64, Ordering::Release);
}

fn rule_of(pc: usize) -> Option<Rule> {
    if let Some(r) = cached(pc) {
        return Some(r);
    }
    let r = find_rule(pc)?;
    if !r.fits() {
        return None;
    }
    remember(pc, r);
    Some(r)
}

/// Whether libgcc has walked this thread's stack to its end yet (until
/// then [`walk`] cannot bound its reads and gives up).
pub fn top_known() -> bool {
    with_state(|t| t.top.get()) != 0
}

/// Where an unwind starts: an instruction of a function still running on
/// this thread, with the stack and frame pointers there. Starting at the
/// hook that took the sample, not in the unwinder, spares the walk the
/// rules of the shim's own frames between them (each a cache miss).
#[derive(Clone, Copy)]
pub struct Start {
    pc: usize,
    sp: usize,
    bp: usize,
}

impl Start {
    /// The calling function's own position (this is inlined into it). The
    /// walk must run before that function returns.
    #[inline(always)]
    pub fn here() -> Start {
        let (pc, sp, bp): (usize, usize, usize);
        // SAFETY: reads rip, rsp and rbp at one instruction boundary of the
        // caller; nothing is written.
        unsafe {
            std::arch::asm!(
                "lea {pc}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                pc = out(reg) pc,
                sp = out(reg) sp,
                bp = out(reg) bp,
                options(nostack, nomem, preserves_flags),
            );
        }
        Start { pc, sp, bp }
    }

    /// Its stack pointer.
    pub fn sp(&self) -> usize {
        self.sp
    }
}

/// Rules looked up at each depth of a thread's last walk, checked before the
/// shared cache: a thread that samples the same stack again (an allocation
/// in a loop) finds them in a few lines of its own, where each depth's slot
/// of the shared cache was a line the program's heap had evicted since the
/// last sample.
pub(crate) struct Recent {
    /// The pc looked up at each depth and its packed rule (0: none).
    slots: [(Cell<usize>, Cell<u64>); RECENT],
}

/// Depths a thread's [`Recent`] keeps.
const RECENT: usize = 16;

impl Recent {
    pub(crate) const fn empty() -> Recent {
        Recent {
            slots: [const { (Cell::new(0), Cell::new(0)) }; RECENT],
        }
    }

    /// The rule at `pc`, looked up at `depth` of a walk.
    fn rule(&self, depth: usize, pc: usize) -> Option<Rule> {
        let Some((at, rule)) = self.slots.get(depth) else {
            return rule_of(pc);
        };
        if at.get() == pc && rule.get() != 0 {
            return Some(Rule::unpack(rule.get()));
        }
        let r = rule_of(pc)?;
        at.set(pc);
        rule.set(r.pack());
        Some(r)
    }
}

/// The calling thread's return addresses into `frames`, innermost first,
/// starting with the return address into the function `from` is in, which
/// must still be running (a caller of this one), and leaving out those in
/// `skip` (the shim's own); the number kept, or `None` when a frame is
/// beyond the fast rules (then unwind with libgcc). A stack deeper than
/// `frames` is cut there.
/// `trace` is filled with what the walk read, when it is a whole one.
pub fn walk(
    from: Start,
    frames: &mut [usize],
    skip: Range<usize>,
    trace: &mut Trace,
) -> Option<usize> {
    with_state(|t| {
        *trace = Trace::new();
        trace.start[1] = from.sp;
        let depth = walk_with(t, from, frames, skip, trace)?;
        trace.start = [from.pc, from.sp, from.bp, t.top.get()];
        Some(depth)
    })
}

/// Where a walk's rbp came from, as far as a [`Trace`] needs to know.
#[derive(Clone, Copy)]
enum BpFrom {
    /// The start's, not used yet.
    Start,
    /// The slot at this address, holding this value; not used yet.
    Slot(usize, usize),
    /// Used, and traced.
    Traced,
}

/// Stack slots a [`Trace`] keeps at most: the return addresses of a stack
/// as deep as a sample keeps (`MAX_FRAMES`), or of half as deep where each
/// frame's CFA is reached through rbp (code built with frame pointers).
const TRACE_READS: usize = crate::layout::MAX_FRAMES;

/// What a fast walk started from and the stack slots it read, with their
/// values. The walk is a function of these alone (the rules are the loaded
/// code's, fixed while it stays loaded, as the rule caches assume): another
/// walk from the same start, with the same stack top, that finds the same
/// values in the same slots reads the same frames, so a sample taken again
/// from one loop's allocation is recorded without unwinding
/// ([`crate::table`]'s memo).
#[derive(Clone, Copy)]
pub struct Trace {
    /// pc, sp, bp and the thread's stack top; top 0: no whole walk traced.
    start: [usize; 4],
    /// Whether the walk used the start's bp (else any bp reads the same).
    bp_used: bool,
    /// The slots read, in order, by their offset from the start's sp (a
    /// walk reads nothing below it), and what they held; `reads` of them.
    at: [u32; TRACE_READS],
    held: [usize; TRACE_READS],
    /// `TRACE_READS + 1` once one could not be kept: no memo.
    reads: usize,
}

impl Trace {
    pub const fn new() -> Trace {
        Trace {
            start: [0; 4],
            bp_used: false,
            at: [0; TRACE_READS],
            held: [0; TRACE_READS],
            reads: 0,
        }
    }

    /// The stack pointer it started from.
    pub fn sp(&self) -> usize {
        self.start[1]
    }

    /// A whole walk's: every slot it read kept, its start recorded.
    pub fn whole(&self) -> bool {
        self.start[3] != 0 && self.reads <= TRACE_READS
    }

    /// A rule took the CFA from rbp, which came from `from`: that is read
    /// too (a saved rbp no rule uses — a register the program keeps a
    /// loop's variable in — changes nothing the walk finds).
    fn used_bp(&mut self, from: &mut BpFrom) {
        match *from {
            BpFrom::Start => self.bp_used = true,
            BpFrom::Slot(at, value) => self.read(at, value),
            BpFrom::Traced => {}
        }
        *from = BpFrom::Traced;
    }

    fn read(&mut self, at: usize, value: usize) {
        let off = at
            .checked_sub(self.start[1])
            .and_then(|o| u32::try_from(o).ok());
        match off {
            Some(off) if self.reads < TRACE_READS => {
                self.at[self.reads] = off;
                self.held[self.reads] = value;
                self.reads += 1;
            }
            _ => self.reads = TRACE_READS + 1,
        }
    }

    /// Whether a walk from `from` now reads what this one did: the same
    /// start and stack top, and the same value in every slot it read.
    pub fn again(&self, from: Start) -> bool {
        let top = with_state(|t| t.top.get());
        let bp = if self.bp_used { from.bp } else { self.start[2] };
        if !self.whole() || self.start != [from.pc, from.sp, bp, top] {
            return false;
        }
        let n = self.reads.min(TRACE_READS);
        // SAFETY: the walk read each slot within `[sp, top)` of a stack
        // pointer at or above its start's, aligned (`walk_with`); with the
        // same start and top, each lies in this thread's stack between its
        // current pointer and the highest CFA libgcc reached: mapped memory.
        self.at[..n]
            .iter()
            .zip(&self.held[..n])
            .all(|(&off, &held)| unsafe {
                std::ptr::read((from.sp + off as usize) as *const usize) == held
            })
    }
}

fn walk_with(
    t: &ThreadState,
    from: Start,
    frames: &mut [usize],
    skip: Range<usize>,
    trace: &mut Trace,
) -> Option<usize> {
    let top = t.top.get();
    if top == 0 {
        return None;
    }
    let Start {
        mut pc,
        mut sp,
        mut bp,
    } = from;
    let mut bp_from = BpFrom::Start;
    let mut depth = 0;
    // The first pc is exact; later ones are return addresses, looked up at
    // the call instruction (pc - 1).
    let mut lookup = pc;
    for looked in 0.. {
        let rule = t.recent.rule(looked, lookup)?;
        if rule.ra_off == 0 {
            return Some(depth);
        }
        let base = if rule.cfa_rbp {
            trace.used_bp(&mut bp_from);
            bp
        } else {
            sp
        };
        let cfa = base.checked_add_signed(rule.cfa_off as isize)?;
        if cfa <= sp || cfa > top {
            return None;
        }
        let slot = |off: i32| -> Option<(usize, usize)> {
            let at = cfa.checked_add_signed(off as isize)?;
            // Only within [sp, top): this thread's stack, already walked.
            let value = (at >= sp && at + 8 <= top && at % 8 == 0)
                // SAFETY: at lies in this thread's stack between its current
                // pointer and the highest CFA libgcc reached: mapped memory.
                .then(|| unsafe { std::ptr::read(at as *const usize) })?;
            Some((at, value))
        };
        let (at, ra) = slot(rule.ra_off)?;
        trace.read(at, ra);
        if rule.rbp_off != 0 {
            let (at, saved) = slot(rule.rbp_off)?;
            bp = saved;
            bp_from = BpFrom::Slot(at, saved);
        }
        sp = cfa;
        pc = ra;
        if pc == 0 {
            return Some(depth);
        }
        if !skip.contains(&pc) {
            let Some(slot) = frames.get_mut(depth) else {
                return Some(depth);
            };
            *slot = pc;
            depth += 1;
        }
        lookup = pc - 1;
    }
    Some(depth)
}

/// Reads DWARF data from `p` forward.
struct Reader {
    p: usize,
    end: usize,
}

impl Reader {
    fn u8(&mut self) -> Option<u8> {
        if self.p >= self.end {
            return None;
        }
        // SAFETY: p lies inside the object's mapped unwind data (bounded by
        // the entry's own length).
        let v = unsafe { *(self.p as *const u8) };
        self.p += 1;
        Some(v)
    }

    fn fixed<const N: usize>(&mut self) -> Option<[u8; N]> {
        let mut b = [0u8; N];
        for x in &mut b {
            *x = self.u8()?;
        }
        Some(b)
    }

    fn uleb(&mut self) -> Option<u64> {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let b = self.u8()?;
            if shift < 64 {
                v |= u64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
    }

    fn sleb(&mut self) -> Option<i64> {
        let (mut v, mut shift) = (0i64, 0);
        loop {
            let b = self.u8()?;
            if shift < 64 {
                v |= i64::from(b & 0x7f) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1 << shift;
                }
                return Some(v);
            }
        }
    }

    /// A pointer in encoding `enc` (absolute, pc-relative or
    /// data-relative to `data`; 4 or 8 bytes). None for others.
    fn pointer(&mut self, enc: u8, data: usize) -> Option<usize> {
        let at = self.p;
        let v = match enc & 0x0f {
            0x00 | 0x04 => u64::from_le_bytes(self.fixed::<8>()?) as i64,
            0x03 => i64::from(u32::from_le_bytes(self.fixed::<4>()?)),
            0x0b => i64::from(i32::from_le_bytes(self.fixed::<4>()?)),
            0x0c => i64::from_le_bytes(self.fixed::<8>()?),
            _ => return None,
        };
        let base = match enc & 0x70 {
            0x00 => 0,
            0x10 => at,
            0x30 => data,
            _ => return None,
        };
        Some(base.wrapping_add_signed(v as isize))
    }
}

/// The rule at `pc` from its object's `.eh_frame_hdr`.
fn find_rule(pc: usize) -> Option<Rule> {
    // SAFETY: all-zero is a valid value of this plain C struct.
    let mut found: DlFindObject = unsafe { std::mem::zeroed() };
    // SAFETY: _dl_find_object only writes `found`.
    if unsafe { _dl_find_object(pc as *mut c_void, &raw mut found) } != 0 {
        return None;
    }
    let hdr = found.eh_frame as usize;
    if hdr == 0 {
        return None;
    }
    let fde = search_hdr(hdr, pc)?;
    rule_from_fde(fde, pc)
}

/// The FDE covering `pc`, by binary search of the header's sorted table.
fn search_hdr(hdr: usize, pc: usize) -> Option<usize> {
    let mut r = Reader {
        p: hdr,
        end: hdr + 12,
    };
    let [version, ptr_enc, count_enc, table_enc] = r.fixed::<4>()?;
    // The table of (pc, FDE) pairs as 4-byte offsets from the header: what
    // every linker writes.
    if version != 1 || table_enc != 0x3b {
        return None;
    }
    r.end = hdr + 64;
    r.pointer(ptr_enc, hdr)?;
    let count = r.pointer(count_enc, hdr)?;
    let table = r.p;
    let entry = |i: usize| -> (usize, usize) {
        let at = table.wrapping_add(i.wrapping_mul(8));
        // SAFETY: i < count: inside the header's table.
        let (start, fde) = unsafe { (*(at as *const i32), *((at + 4) as *const i32)) };
        (
            hdr.wrapping_add_signed(start as isize),
            hdr.wrapping_add_signed(fde as isize),
        )
    };
    let (mut lo, mut hi) = (0usize, count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if entry(mid).0 <= pc {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    (lo > 0).then(|| entry(lo - 1).1)
}

/// The register rules we follow while running a CFA program.
#[derive(Clone, Copy)]
struct State {
    cfa_reg: u64,
    cfa_off: i64,
    rbp_off: Option<i64>,
    ra_off: Option<i64>,
}

struct Cie {
    code_align: u64,
    data_align: i64,
    ra_reg: u64,
    fde_enc: u8,
    has_aug_data: bool,
    insns: (usize, usize),
}

fn parse_cie(at: usize) -> Option<Cie> {
    let mut r = Reader { p: at, end: at + 4 };
    let len = u32::from_le_bytes(r.fixed::<4>()?);
    if len == 0 || len == u32::MAX {
        return None;
    }
    r.end = at.wrapping_add(4 + len as usize);
    if u32::from_le_bytes(r.fixed::<4>()?) != 0 {
        return None;
    }
    let version = r.u8()?;
    if version != 1 && version != 3 {
        return None;
    }
    let mut aug = [0u8; 8];
    let mut n = 0;
    loop {
        let c = r.u8()?;
        if c == 0 {
            break;
        }
        if n == aug.len() {
            return None;
        }
        aug[n] = c;
        n += 1;
    }
    let aug = &aug[..n];
    let code_align = r.uleb()?;
    let data_align = r.sleb()?;
    let ra_reg = if version == 1 {
        u64::from(r.u8()?)
    } else {
        r.uleb()?
    };
    let mut fde_enc = 0;
    let has_aug_data = aug.first() == Some(&b'z');
    if has_aug_data {
        let len = r.uleb()? as usize;
        let data_end = r.p.wrapping_add(len);
        for &c in &aug[1..] {
            match c {
                b'R' => fde_enc = r.u8()?,
                b'L' => {
                    r.u8()?;
                }
                b'P' => {
                    let enc = r.u8()?;
                    r.pointer(enc & 0x7f, 0)?;
                }
                // 'S' (a signal frame) and anything unknown: libgcc's job.
                _ => return None,
            }
        }
        r.p = data_end;
    } else if !aug.is_empty() {
        return None;
    }
    Some(Cie {
        code_align,
        data_align,
        ra_reg,
        fde_enc,
        has_aug_data,
        insns: (r.p, r.end),
    })
}

fn rule_from_fde(fde: usize, pc: usize) -> Option<Rule> {
    let mut r = Reader {
        p: fde,
        end: fde + 8,
    };
    let len = u32::from_le_bytes(r.fixed::<4>()?);
    if len == 0 || len == u32::MAX {
        return None;
    }
    let cie_ptr = r.p;
    let cie_off = u32::from_le_bytes(r.fixed::<4>()?);
    r.end = fde.wrapping_add(4 + len as usize);
    let cie = parse_cie(cie_ptr.checked_sub(cie_off as usize)?)?;
    if cie.ra_reg != REG_RA {
        return None;
    }
    let start = r.pointer(cie.fde_enc, 0)?;
    let range = r.pointer(cie.fde_enc & 0x0f, 0)?;
    if pc < start || pc >= start.wrapping_add(range) {
        return None;
    }
    if cie.has_aug_data {
        let len = r.uleb()? as usize;
        r.p = r.p.wrapping_add(len);
    }
    let initial = run(
        &cie,
        cie.insns,
        None,
        State {
            cfa_reg: REG_RSP,
            cfa_off: 8,
            rbp_off: None,
            ra_off: None,
        },
        usize::MAX,
        0,
    )?;
    let state = run(&cie, (r.p, r.end), Some(initial), initial, pc, start)?;
    let cfa_rbp = match state.cfa_reg {
        REG_RSP => false,
        REG_RBP => true,
        _ => return None,
    };
    Some(Rule {
        cfa_rbp,
        cfa_off: i32::try_from(state.cfa_off).ok()?,
        rbp_off: i32::try_from(state.rbp_off.unwrap_or(0)).ok()?,
        ra_off: i32::try_from(state.ra_off?).ok()?,
    })
}

/// Runs a CFA program from `loc` until the row that covers `pc`.
/// `initial` is the CIE's state (for DW_CFA_restore), None inside the CIE.
fn run(
    cie: &Cie,
    (from, to): (usize, usize),
    initial: Option<State>,
    mut s: State,
    pc: usize,
    mut loc: usize,
) -> Option<State> {
    let mut r = Reader { p: from, end: to };
    let mut saved = [s; MAX_STATES];
    let mut depth = 0;
    while r.p < r.end {
        let op = r.u8()?;
        let delta = match (op >> 6, op & 0x3f) {
            (1, delta) => Some(u64::from(delta)),
            (0, 0x02) => Some(u64::from(r.u8()?)),
            (0, 0x03) => Some(u64::from(u16::from_le_bytes(r.fixed::<2>()?))),
            (0, 0x04) => Some(u64::from(u32::from_le_bytes(r.fixed::<4>()?))),
            _ => None,
        };
        if let Some(delta) = delta {
            loc = loc.wrapping_add(delta.wrapping_mul(cie.code_align) as usize);
            if loc > pc {
                return Some(s);
            }
            continue;
        }
        match op {
            // DW_CFA_remember_state, DW_CFA_restore_state
            0x0a => {
                if depth == MAX_STATES {
                    return None;
                }
                saved[depth] = s;
                depth += 1;
            }
            0x0b => {
                depth = depth.checked_sub(1)?;
                s = saved[depth];
            }
            _ => apply(op, &mut r, cie, initial, &mut s)?,
        }
    }
    Some(s)
}

/// Sets `reg`'s rule to "saved at CFA + off" (None: unchanged); the rules
/// of registers we do not follow are skipped, an rsp rule gives up.
fn set_reg(s: &mut State, reg: u64, off: Option<i64>) -> Option<()> {
    match reg {
        REG_RBP => s.rbp_off = off,
        REG_RA => s.ra_off = off,
        REG_RSP => return None,
        _ => {}
    }
    Some(())
}

fn restore_reg(s: &mut State, reg: u64, initial: Option<State>) -> Option<()> {
    let init = initial?;
    match reg {
        REG_RBP => s.rbp_off = init.rbp_off,
        REG_RA => s.ra_off = init.ra_off,
        _ => {}
    }
    Some(())
}

/// One CFA instruction other than the advances and the state stack.
fn apply(op: u8, r: &mut Reader, cie: &Cie, initial: Option<State>, s: &mut State) -> Option<()> {
    let factored = |n: i64| n.wrapping_mul(cie.data_align);
    match (op >> 6, op & 0x3f) {
        (2, reg) => set_reg(s, u64::from(reg), Some(factored(r.uleb()? as i64))),
        (3, reg) => restore_reg(s, u64::from(reg), initial),
        (_, 0x00) => Some(()),
        (_, 0x05) => {
            let reg = r.uleb()?;
            set_reg(s, reg, Some(factored(r.uleb()? as i64)))
        }
        (_, 0x06) => restore_reg(s, r.uleb()?, initial),
        // DW_CFA_undefined: an undefined return address ends the stack.
        (_, 0x07) => match r.uleb()? {
            REG_RA => {
                s.ra_off = Some(0);
                Some(())
            }
            REG_RBP | REG_RSP => None,
            _ => Some(()),
        },
        // DW_CFA_same_value
        (_, 0x08) => set_reg(s, r.uleb()?, None),
        // DW_CFA_register: only for registers we do not follow.
        (_, 0x09) => {
            let reg = r.uleb()?;
            r.uleb()?;
            (!matches!(reg, REG_RBP | REG_RA | REG_RSP)).then_some(())
        }
        (_, 0x0c) => {
            s.cfa_reg = r.uleb()?;
            s.cfa_off = r.uleb()? as i64;
            Some(())
        }
        (_, 0x0d) => {
            s.cfa_reg = r.uleb()?;
            Some(())
        }
        (_, 0x0e) => {
            s.cfa_off = r.uleb()? as i64;
            Some(())
        }
        // DW_CFA_expression: fine for registers we do not follow.
        (_, 0x10) => {
            let reg = r.uleb()?;
            let len = r.uleb()? as usize;
            r.p = r.p.wrapping_add(len);
            (!matches!(reg, REG_RBP | REG_RA | REG_RSP)).then_some(())
        }
        (_, 0x11) => {
            let reg = r.uleb()?;
            set_reg(s, reg, Some(factored(r.sleb()?)))
        }
        (_, 0x12) => {
            s.cfa_reg = r.uleb()?;
            s.cfa_off = factored(r.sleb()?);
            Some(())
        }
        (_, 0x13) => {
            s.cfa_off = factored(r.sleb()?);
            Some(())
        }
        // DW_CFA_GNU_args_size
        (_, 0x2e) => r.uleb().map(|_| ()),
        // DW_CFA_def_cfa_expression, val_offset, val_expression, set_loc
        // and anything else: libgcc's job.
        _ => None,
    }
}
