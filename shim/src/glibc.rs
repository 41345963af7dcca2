//! glibc's own allocator entry points, which the hooks forward to and the
//! shim's own Rust code allocates from.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libc::size_t;

unsafe extern "C" {
    pub(crate) fn __libc_malloc(size: size_t) -> *mut c_void;
    pub(crate) fn __libc_calloc(n: size_t, size: size_t) -> *mut c_void;
    pub(crate) fn __libc_realloc(p: *mut c_void, size: size_t) -> *mut c_void;
    pub(crate) fn __libc_free(p: *mut c_void);
    pub(crate) fn __libc_memalign(align: size_t, size: size_t) -> *mut c_void;
    pub(crate) fn __libc_valloc(size: size_t) -> *mut c_void;
    pub(crate) fn __libc_pvalloc(size: size_t) -> *mut c_void;
}

/// glibc's malloc guarantees this alignment.
const MALLOC_ALIGN: usize = 16;

/// The shim's global allocator: glibc directly, so its own allocations are
/// never sampled and never re-enter a hook.
pub struct Glibc;

// SAFETY: glibc's allocator satisfies GlobalAlloc's contract; alignments
// above malloc's go through memalign.
unsafe impl GlobalAlloc for Glibc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain calls into glibc.
        unsafe {
            if layout.align() <= MALLOC_ALIGN {
                __libc_malloc(layout.size()).cast()
            } else {
                __libc_memalign(layout.align(), layout.size()).cast()
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: ptr came from alloc above.
        unsafe { __libc_free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            // SAFETY: ptr came from __libc_malloc.
            return unsafe { __libc_realloc(ptr.cast(), new_size).cast() };
        }
        // SAFETY: a fresh aligned block, the old one copied and freed.
        unsafe {
            let new = self.alloc(Layout::from_size_align_unchecked(new_size, layout.align()));
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}
