//! What `run` starts and how it ends, beyond the sampling itself.
//!
//! - `reaper`: leakwatch as a child subreaper — every exit reaped, survivors
//!   stopped (TERM, then KILL), and the signals that interrupt a session.
//! - `confine`: the session's freezer cgroup, where the machine allows, and
//!   its record, so a later session names what a killed one left.
//! - `guardian`: a process of its own that stops what the session started
//!   should leakwatch die first.

pub(super) mod confine;
pub mod guardian;
pub(super) mod reaper;
