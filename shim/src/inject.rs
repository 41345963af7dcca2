//! `leakwatch attach --native-sites PID`: the shim loaded into a running
//! process (a debugger makes it call `dlopen` and then
//! [`leakwatch_inject`]), as `heaptrack -p` loads its own. `LD_PRELOAD`
//! cannot reach a process that is already running, so the allocation
//! functions are redirected where each loaded object calls them: its GOT
//! entries (the `JUMP_SLOT` and `GLOB_DAT` relocations of `.rela.plt` and
//! `.rela.dyn`, found through its `DYNAMIC` segment) are rewritten to the
//! shim's hooks, RELRO pages made writable for the write and read-only
//! again.
//!
//! Only an entry that holds glibc's own function (or, not yet bound, the
//! object's own PLT stub for an undefined symbol) is rewritten: the hooks
//! forward to glibc, so a block allocated before the attach is freed by
//! the same allocator either way. A program whose allocator is not glibc's
//! (jemalloc, tcmalloc, another preloaded one) is refused.
//!
//! Objects loaded later are found by the patching thread, which looks for
//! new ones every [`RESCAN`] and patches an object only once the loader has
//! finished with it (its RELRO pages read-only). Hooking `dlopen` itself
//! would call it from the shim: glibc resolves a bare name against its
//! *caller's* RUNPATH, which would then be the shim's.

use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::sampler;

/// How often the patching thread looks for objects loaded since.
pub const RESCAN: Duration = Duration::from_millis(200);

/// Set by a successful [`leakwatch_inject`].
static INJECTED: AtomicBool = AtomicBool::new(false);
/// `dlpi_adds` when the objects were last patched.
static ADDS_SEEN: AtomicU64 = AtomicU64::new(0);

// What leakwatch_inject returns when it refuses (the debugger prints it;
// leakwatch turns it into a sentence); -1, "active already", is what a
// shim of an older leakwatch returns (it cannot be taken over).
const BAD_CONFIG: i32 = -2;
const FOREIGN_ALLOCATOR: i32 = -3;
const NO_GLIBC: i32 = -4;
/// Not a refusal: the shim was here already and serves this attach now.
const TAKEN_OVER: i32 = -5;

const PT_DYNAMIC: u32 = 2;
const PT_GNU_RELRO: u32 = 0x6474_e552;
const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_JMPREL: i64 = 23;
const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;

#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

#[repr(C)]
struct Rela {
    offset: u64,
    info: u64,
    addend: i64,
}

#[repr(C)]
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

/// One function redirected: its name, glibc's address, the hook's.
struct Hook {
    name: &'static CStr,
    real: usize,
    hook: usize,
    /// Frees first: a block sampled by a new malloc must never be freed
    /// by an old free (it would stay counted).
    frees: bool,
}

/// The functions redirected (not cfree: glibc keeps it for old binaries
/// only, and a lookup would find the shim's own). mmap and munmap are not:
/// mmap may be called from a signal handler that interrupted malloc.
fn hooks() -> [(&'static CStr, usize, bool); 9] {
    [
        (c"free", crate::hook_free as *const () as usize, true),
        (c"realloc", crate::hook_realloc as *const () as usize, true),
        (c"malloc", crate::hook_malloc as *const () as usize, false),
        (c"calloc", crate::hook_calloc as *const () as usize, false),
        (
            c"posix_memalign",
            crate::hook_posix_memalign as *const () as usize,
            false,
        ),
        (
            c"aligned_alloc",
            crate::hook_aligned_alloc as *const () as usize,
            false,
        ),
        (
            c"memalign",
            crate::hook_memalign as *const () as usize,
            false,
        ),
        (c"valloc", crate::hook_valloc as *const () as usize, false),
        (c"pvalloc", crate::hook_pvalloc as *const () as usize, false),
    ]
}

/// The hooks with glibc's addresses, or why not: every function must be
/// glibc's own (the object `__libc_malloc` is in).
fn resolve() -> Result<Vec<Hook>, i32> {
    let libc_base =
        object_base(crate::glibc::__libc_malloc as *const () as usize).ok_or(NO_GLIBC)?;
    let mut out = Vec::new();
    for (name, hook, frees) in hooks() {
        // SAFETY: dlsym with a NUL-terminated name.
        let real = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
        if real == 0 {
            return Err(NO_GLIBC);
        }
        if object_base(real) != Some(libc_base) {
            return Err(FOREIGN_ALLOCATOR);
        }
        out.push(Hook {
            name,
            real,
            hook,
            frees,
        });
    }
    Ok(out)
}

fn object_base(addr: usize) -> Option<usize> {
    // SAFETY: Dl_info is plain data; dladdr fills it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: any address may be asked about.
    let found = unsafe { libc::dladdr(addr as *const c_void, &raw mut info) };
    (found != 0).then_some(info.dli_fbase as usize)
}

/// Starts the shim in a running process: `config` is
/// `<interval bytes>:<directory>`. Returns the GOT entries redirected, or a
/// negative code: -2 a bad configuration, -3 an allocation function is not
/// glibc's, -4 no glibc; -5 the shim was here already and was taken over.
///
/// # Safety
/// Called once, by a debugger, on a thread stopped at a safe point (not
/// inside malloc, the loader or a signal handler); `config` is a
/// NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leakwatch_inject(config: *const c_char) -> i32 {
    if config.is_null() {
        return BAD_CONFIG;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let config = unsafe { CStr::from_ptr(config) }.to_bytes();
    let Some(colon) = config.iter().position(|&b| b == b':') else {
        return BAD_CONFIG;
    };
    let (interval, dir) = (&config[..colon], &config[colon + 1..]);
    let Some(interval) = sampler::parse_u64(interval).filter(|&n| n > 0) else {
        return BAD_CONFIG;
    };
    if sampler::enabled() || INJECTED.load(Ordering::Acquire) {
        return take_over(dir, interval);
    }
    let hooks = match resolve() {
        Ok(h) => h,
        Err(code) => return code,
    };
    crate::enter();
    let started = sampler::start(dir, interval);
    crate::leave();
    if !started {
        return BAD_CONFIG;
    }
    INJECTED.store(true, Ordering::Release);
    let patched = patch_all(&hooks);
    crate::enter();
    crate::table::make_sites_file();
    crate::leave();
    crate::patcher::ensure_started();
    patched.min(i32::MAX as usize) as i32
}

/// A shim already here (injected by an earlier attach, running or
/// stopped; or preloaded by `leakwatch run`) serves this attach: its
/// tables start afresh, its file is made in `dir`, objects loaded since
/// are patched, and a thread watches for this session's stop flag (a
/// preloaded shim's thread only watches). Returns [`TAKEN_OVER`].
fn take_over(dir: &[u8], interval: u64) -> i32 {
    crate::enter();
    let ok = crate::table::take_over(dir, interval, || sampler::resume(interval));
    crate::leave();
    if !ok {
        return BAD_CONFIG;
    }
    if injected()
        && let Ok(hooks) = resolve()
    {
        patch_all(&hooks);
    }
    crate::patcher::ensure_started();
    TAKEN_OVER
}

/// Whether the shim came in by [`leakwatch_inject`].
pub fn injected() -> bool {
    INJECTED.load(Ordering::Acquire)
}

/// From the patching thread: patches the objects loaded since the last
/// look, if any.
pub fn rescan() {
    if !injected() || !sampler::enabled() || current_adds() == ADDS_SEEN.load(Ordering::Acquire) {
        return;
    }
    if let Ok(hooks) = resolve() {
        patch_all(&hooks);
    }
}

fn current_adds() -> u64 {
    extern "C" fn first(info: *mut libc::dl_phdr_info, _: usize, arg: *mut c_void) -> i32 {
        // SAFETY: the loader's info, and the u64 passed below.
        unsafe { *arg.cast::<u64>() = (*info).dlpi_adds };
        1
    }
    let mut adds = 0u64;
    // SAFETY: `first` only reads the info and writes adds.
    unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut adds).cast()) };
    adds
}

/// One loaded object as `dl_iterate_phdr` gave it.
struct Object {
    base: usize,
    dynamic: usize,
    /// The RELRO pages `[start, end)` the loader made read-only.
    relro: Option<(usize, usize)>,
    /// Its loaded segments' range.
    span: (usize, usize),
}

/// Patches every loaded object but the shim and the loader; the number of
/// entries redirected.
fn patch_all(hooks: &[Hook]) -> usize {
    let mut objects: Vec<Object> = Vec::new();
    extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, arg: *mut c_void) -> i32 {
        // SAFETY: the Vec passed below (its pushes allocate from glibc
        // directly, the shim's allocator) and the loader's info.
        let (objects, info) = unsafe { (&mut *arg.cast::<Vec<Object>>(), &*info) };
        let base = info.dlpi_addr as usize;
        let (mut dynamic, mut relro, mut lo, mut hi) = (0, None, usize::MAX, 0);
        for i in 0..usize::from(info.dlpi_phnum) {
            // SAFETY: dlpi_phdr has dlpi_phnum entries.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            let start = base + ph.p_vaddr as usize;
            match ph.p_type {
                libc::PT_LOAD => {
                    lo = lo.min(start);
                    hi = hi.max(start + ph.p_memsz as usize);
                }
                PT_DYNAMIC => dynamic = start,
                PT_GNU_RELRO => {
                    let page = page_size();
                    let end = (start + ph.p_memsz as usize) & !(page - 1);
                    relro = Some((start & !(page - 1), end));
                }
                _ => {}
            }
        }
        if dynamic != 0 {
            objects.push(Object {
                base,
                dynamic,
                relro,
                span: (lo, hi),
            });
        }
        0
    }
    let adds = current_adds();
    // SAFETY: `each` only reads the loader's info and pushes onto objects.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut objects).cast()) };
    let own = object_base(patch_all as *const () as usize);
    // SAFETY: no preconditions; 0 without an interpreter.
    let loader = unsafe { libc::getauxval(libc::AT_BASE) } as usize;
    let objects: Vec<Object> = objects
        .into_iter()
        .filter(|o| Some(o.base) != own && (loader == 0 || o.base != loader))
        .collect();
    let writable = WritablePages::read();
    let mut patched = 0;
    let mut all_done = true;
    for frees in [true, false] {
        for o in &objects {
            match patch_object(o, hooks, frees, &writable) {
                Some(n) => patched += n,
                None => all_done = false,
            }
        }
    }
    if all_done {
        ADDS_SEEN.store(adds, Ordering::Release);
    }
    patched
}

fn page_size() -> usize {
    // SAFETY: no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096).max(4096)
}

/// The pages of this process mapped writable now (`/proc/self/maps`): an
/// object whose RELRO pages are still writable is being relocated by the
/// loader in another thread, and is left for the next look.
struct WritablePages(Vec<(usize, usize)>);

impl WritablePages {
    fn read() -> WritablePages {
        let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let ranges = text
            .lines()
            .filter_map(|line| {
                let mut f = line.split_ascii_whitespace();
                let (range, perms) = (f.next()?, f.next()?);
                if perms.as_bytes().get(1) != Some(&b'w') {
                    return None;
                }
                let (a, b) = range.split_once('-')?;
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                ))
            })
            .collect();
        WritablePages(ranges)
    }

    fn contains(&self, addr: usize) -> bool {
        self.0.iter().any(|&(a, b)| (a..b).contains(&addr))
    }
}

/// The dynamic section's tables of one object.
struct Tables {
    symtab: usize,
    strtab: usize,
    /// (address, size in bytes) of `.rela.plt` and `.rela.dyn`.
    relas: [(usize, usize); 2],
}

fn tables(o: &Object) -> Option<Tables> {
    let mut t = Tables {
        symtab: 0,
        strtab: 0,
        relas: [(0, 0); 2],
    };
    // The loader relocates the dynamic section's addresses in place on
    // x86-64; an address below the base is still an offset.
    let addr = |v: u64| {
        let v = v as usize;
        if v < o.base { v + o.base } else { v }
    };
    let mut d = o.dynamic as *const Dyn;
    for _ in 0..4096 {
        // SAFETY: the DYNAMIC segment is mapped and ends with DT_NULL.
        let entry = unsafe { &*d };
        match entry.tag {
            DT_NULL => break,
            DT_SYMTAB => t.symtab = addr(entry.val),
            DT_STRTAB => t.strtab = addr(entry.val),
            DT_JMPREL => t.relas[0].0 = addr(entry.val),
            DT_PLTRELSZ => t.relas[0].1 = entry.val as usize,
            DT_RELA => t.relas[1].0 = addr(entry.val),
            DT_RELASZ => t.relas[1].1 = entry.val as usize,
            _ => {}
        }
        // SAFETY: still within the segment (DT_NULL not reached yet).
        d = unsafe { d.add(1) };
    }
    (t.symtab != 0 && t.strtab != 0).then_some(t)
}

/// Redirects one object's entries of the frees (or of the rest); `None`
/// when it must wait (the loader is still relocating it).
fn patch_object(
    o: &Object,
    hooks: &[Hook],
    frees: bool,
    writable: &WritablePages,
) -> Option<usize> {
    if o.relro.is_some_and(|(a, b)| a < b && writable.contains(a)) {
        return None;
    }
    let libc = object_base(crate::glibc::__libc_malloc as *const () as usize);
    let Some(t) = tables(o) else {
        return Some(0);
    };

    let mut patched = 0;
    for &(start, size) in &t.relas {
        if start == 0 {
            continue;
        }
        for i in 0..size / size_of::<Rela>() {
            // SAFETY: the relocation table is mapped, `size` bytes long.
            let r = unsafe { &*(start as *const Rela).add(i) };
            let kind = (r.info & 0xffff_ffff) as u32;
            if kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT {
                continue;
            }
            // SAFETY: the symbol index is within the symbol table.
            let sym = unsafe { &*(t.symtab as *const Sym).add((r.info >> 32) as usize) };
            // SAFETY: st_name is an offset into the string table.
            let name = unsafe { CStr::from_ptr((t.strtab + sym.name as usize) as *const c_char) };
            let Some(h) = hooks.iter().find(|h| h.frees == frees && h.name == name) else {
                continue;
            };
            let slot = o.base + r.offset as usize;
            // SAFETY: a GOT entry of a loaded object: mapped, aligned.
            let now = unsafe { std::ptr::read_volatile(slot as *const usize) };
            // Not bound yet: the loader would bind it to glibc's (checked in
            // `resolve`), for an undefined symbol or in glibc itself.
            let lazy = kind == R_X86_64_JUMP_SLOT
                && (sym.shndx == 0 || Some(o.base) == libc)
                && (o.span.0..o.span.1).contains(&now);
            if now == h.hook || !(now == h.real || lazy) {
                continue;
            }
            let relro = o
                .relro
                .filter(|&(a, b)| (a..b).contains(&(slot & !(page_size() - 1))));
            // Neither RELRO (made writable for the store) nor writable now:
            // never written (a store there would fault).
            if relro.is_none() && !writable.contains(slot) {
                continue;
            }
            if write_slot(slot, h.hook, relro.is_some()) {
                patched += 1;
            }
        }
    }
    Some(patched)
}

/// Writes one GOT entry (an aligned word: one store, atomic for the
/// threads that call through it), its page made writable meanwhile if it
/// is a RELRO page (`protected`).
fn write_slot(slot: usize, value: usize, protected: bool) -> bool {
    let page = slot & !(page_size() - 1);
    let len = page_size();
    // SAFETY: mprotect of one page of a loaded object's RELRO, restored
    // to read-only (what the loader made it) right after the store.
    unsafe {
        if protected
            && libc::mprotect(page as *mut c_void, len, libc::PROT_READ | libc::PROT_WRITE) != 0
        {
            return false;
        }
        std::ptr::write_volatile(slot as *mut usize, value);
        if protected {
            libc::mprotect(page as *mut c_void, len, libc::PROT_READ);
        }
    }
    true
}
