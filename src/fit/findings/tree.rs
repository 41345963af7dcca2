//! Memory of a whole tree: the PSS sum adds up to what it really uses; the
//! RSS sum counts every shared page once per process mapping it.

use super::TreeTotal;
use crate::store::{Row, Scope, Tier};

/// PSS and RSS sums over the scope's last deep sample.
pub(super) fn total(rows: &[Row], scope: Scope) -> Option<TreeTotal> {
    let deep = || {
        rows.iter()
            .filter(move |r| r.scope == scope && r.tier == Tier::Deep)
    };
    let last_sample = deep().map(|r| r.sample).max()?;
    let at_last: Vec<&Row> = deep().filter(|r| r.sample == last_sample).collect();
    let pss: u64 = at_last.iter().filter_map(|r| r.pss_bytes).sum();
    let rss: u64 = at_last.iter().filter_map(|r| r.rss_bytes).sum();
    Some(TreeTotal {
        scope,
        processes: at_last.len(),
        pss_sum_bytes: pss,
        rss_sum_bytes: rss,
        double_counted_bytes: rss.saturating_sub(pss),
    })
}
