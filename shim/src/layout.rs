//! The sites file, `D/<pid>.sites`: one process' sampled call stacks and
//! their live bytes, in a file the shim maps shared and keeps current
//! (`shim/src/sites.rs`), which leakwatch reads whenever it likes
//! (`src/sample/sites/native/file.rs`, which includes this file). No thread
//! and no socket in the process: a thread of the shim's own would put
//! glibc's malloc of a single-threaded program in its multi-threaded mode
//! (atomic operations and arena locks on every call), ≈ 4% of an
//! allocation-heavy program's time.
//!
//! Version 3, native byte order, every field aligned to its size:
//!
//! | offset | field |
//! |---|---|
//! | 0 | `MAGIC` |
//! | 8 | version, u32 |
//! | 12 | pid, u32 |
//! | 16 | the mean sampling interval, bytes, u64 |
//! | 24 | samples taken (in this process, and in its parent before a fork), u64 |
//! | 32 | samples the tables had no room for, u64 |
//! | 40 | stop, u64: leakwatch writes non-zero when its attach is over |
//! | 48 | `STACKS`, u32 |
//! | 52 | `MAX_FRAMES`, u32 |
//! | `HEADER` | `STACKS` slots of `SLOT` bytes: depth u32 (0: empty), 4 bytes unused, live bytes i64 (the live samples' weights summed), live sampled blocks i64, 8 bytes unused |
//! | `FRAMES_AT` | `STACKS` rows of `MAX_FRAMES` u64: return addresses, innermost first |
//!
//! A slot's frames are written before its depth, which is stored with
//! release order and never changes after; so a reader that sees a depth
//! reads whole frames after it. A stack whose walk found no frame has depth
//! 1 and frame 0. The file is created under another name and renamed into
//! place once its header and the stacks so far are in it: a reader never
//! sees it half made.

/// The first eight bytes.
pub const MAGIC: [u8; 8] = *b"lwsites\0";
pub const VERSION: u32 = 3;
/// What the file's name ends with, after the pid.
pub const SUFFIX: &str = ".sites";
/// The longest directory D the shim takes (its path buffers are static).
pub const MAX_DIR: usize = 3072;
/// Distinct call stacks.
pub const STACKS: usize = 1 << 13;
/// Frames kept of a stack, innermost first.
pub const MAX_FRAMES: usize = 48;
/// Bytes before the first slot.
pub const HEADER: usize = 4096;
/// Bytes per slot.
pub const SLOT: usize = 32;
/// Where the frames begin.
pub const FRAMES_AT: usize = HEADER + STACKS * SLOT;
/// The file's size (sparse: pages never written take no space).
pub const SIZE: usize = FRAMES_AT + STACKS * MAX_FRAMES * 8;

/// Header offsets.
pub const AT_VERSION: usize = 8;
pub const AT_PID: usize = 12;
pub const AT_INTERVAL: usize = 16;
pub const AT_SAMPLES: usize = 24;
pub const AT_DROPPED: usize = 32;
pub const AT_STOP: usize = 40;
pub const AT_STACKS: usize = 48;
pub const AT_MAX_FRAMES: usize = 52;

/// Offsets in a slot.
pub const SLOT_DEPTH: usize = 0;
pub const SLOT_LIVE: usize = 8;
pub const SLOT_BLOCKS: usize = 16;

/// Where slot `i` begins.
pub const fn slot_at(i: usize) -> usize {
    HEADER + i * SLOT
}

/// Where slot `i`'s frames begin.
pub const fn frames_at(i: usize) -> usize {
    FRAMES_AT + i * MAX_FRAMES * 8
}
