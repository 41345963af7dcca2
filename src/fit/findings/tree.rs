//! Memory of a whole tree: the PSS sum adds up to what it really uses; the
//! RSS sum counts every shared page once per process mapping it.

use super::TreeTotal;
use crate::series::Samples;
use crate::store::Scope;

/// PSS and RSS sums over the scope's last deep sample.
pub(super) fn total(samples: &Samples, scope: Scope) -> Option<TreeTotal> {
    let sums = samples.trees.iter().find(|t| t.scope == scope)?;
    Some(TreeTotal {
        scope,
        processes: sums.processes,
        pss_sum_bytes: sums.pss_bytes,
        rss_sum_bytes: sums.rss_bytes,
        double_counted_bytes: sums.rss_bytes.saturating_sub(sums.pss_bytes),
    })
}
