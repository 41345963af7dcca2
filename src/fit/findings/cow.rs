//! Copy-on-write unsharing: a forked child's Private_Dirty rises and its
//! shared memory falls by the same amount while its RSS stays flat.

use super::Finding;
use crate::series::ProcessLife;
use crate::series::build::Deep;
use crate::store::Scope;

/// Unsharing smaller than this (or than 2% of the process's RSS) is noise.
const MIN_UNSHARED_BYTES: u64 = 1 << 20;

/// The unsharing of one forked child between its first and last deep sample.
pub(super) fn unsharing(scope: Scope, life: &ProcessLife) -> Option<Finding> {
    let (first, last) = (life.first_deep?, life.last_deep?);
    let diff =
        |f: fn(&Deep) -> Option<u64>| -> Option<i64> { Some(f(&last)? as i64 - f(&first)? as i64) };
    let d_private = diff(|r| r.private_dirty_bytes)?;
    let d_shared = diff(|r| r.shared_bytes)?;
    let d_rss = diff(|r| r.rss_bytes)?;
    let unshared = d_private.min(-d_shared).max(0) as u64;
    let floor = MIN_UNSHARED_BYTES.max(first.rss_bytes.unwrap_or(0) / 50);
    // Mostly a move from shared to private, with RSS roughly flat.
    let is_cow = unshared >= floor
        && unshared as f64 >= 0.5 * d_private as f64
        && (d_rss as f64) < 0.5 * unshared as f64;
    is_cow.then(|| Finding::CowUnsharing {
        scope,
        pid: life.pid,
        comm: life.comm.clone(),
        bytes: unshared,
        private_dirty_change_bytes: d_private,
        shared_change_bytes: d_shared,
        rss_change_bytes: d_rss,
    })
}
