#![allow(clippy::expect_used, clippy::unwrap_used)]
//! Do `smaps`'s regions sum to `smaps_rollup`? Checked on every process of
//! this machine that holds still while read (rollup, smaps, rollup: the two
//! rollups equal), field by field: how many match exactly, and the largest
//! difference. This is what lets a deep pass read `smaps` alone for the
//! processes whose mappings it wants (`src/sample/procfs/smaps.rs`).
//!
//! `cargo bench --bench smaps_check` (as root to see every process).

use leakwatch::sample::procfs::{ProcRoot, Rollup};

type Field = (&'static str, fn(&Rollup) -> Option<u64>);

const FIELDS: [Field; 11] = [
    ("Rss", |r| Some(r.rss_bytes)),
    ("Pss", |r| Some(r.pss_bytes)),
    ("Pss_Anon", |r| r.pss_anon_bytes),
    ("Pss_File", |r| r.pss_file_bytes),
    ("Pss_Shmem", |r| r.pss_shmem_bytes),
    ("Shared_Clean", |r| Some(r.shared_clean_bytes)),
    ("Shared_Dirty", |r| Some(r.shared_dirty_bytes)),
    ("Private_Clean", |r| Some(r.private_clean_bytes)),
    ("Private_Dirty", |r| Some(r.private_dirty_bytes)),
    ("Swap", |r| Some(r.swap_bytes)),
    ("SwapPss", |r| r.swap_pss_bytes),
];

#[derive(Default, Clone, Copy)]
struct Tally {
    compared: u64,
    exact: u64,
    /// Largest |rollup − sum| in kB, and relative to the rollup's Pss.
    max_kb: u64,
    max_of_pss: f64,
    /// Differences within the truncation bound (1 kB per region).
    within_bound: u64,
}

/// Every difference of a field relative to its process's Pss, for the median.
type Spread = Vec<f64>;

fn main() {
    // `cargo bench` passes --bench; nothing to parse.
    let root = ProcRoot::default();
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let mut tallies = [Tally::default(); FIELDS.len()];
    let mut spreads: Vec<Spread> = vec![Vec::new(); FIELDS.len()];
    let (mut checked, mut moving, mut unreadable) = (0, 0, 0);
    for pid in pids {
        let (Ok(before), Ok(smaps), Ok(after)) = (
            root.smaps_rollup(pid),
            root.smaps(pid),
            root.smaps_rollup(pid),
        ) else {
            unreadable += 1;
            continue;
        };
        if before != after {
            moving += 1;
            continue;
        }
        checked += 1;
        for (((_, get), t), spread) in FIELDS.iter().zip(&mut tallies).zip(&mut spreads) {
            let (Some(want), Some(got)) = (get(&before), get(&smaps.rollup)) else {
                continue;
            };
            let diff = want.abs_diff(got) / 1024;
            t.compared += 1;
            t.exact += u64::from(diff == 0);
            t.within_bound += u64::from(diff < smaps.regions.max(1));
            t.max_kb = t.max_kb.max(diff);
            if before.pss_bytes > 0 {
                let rel = diff as f64 * 1024.0 / before.pss_bytes as f64;
                t.max_of_pss = t.max_of_pss.max(rel);
                spread.push(rel);
            }
        }
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!(
        "kernel {}: {checked} processes compared ({moving} changed while read, {unreadable} \
         unreadable or kernel threads)\n",
        release.trim()
    );
    println!(
        "| field | compared | equal | within 1 kB per region | largest difference | \
         of that process's Pss | median, of Pss |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (((name, _), t), spread) in FIELDS.iter().zip(&tallies).zip(&mut spreads) {
        spread.sort_by(f64::total_cmp);
        let median = spread.get(spread.len() / 2).copied().unwrap_or(0.0);
        println!(
            "| {name} | {} | {} | {} | {} kB | {:.3}% | {:.3}% |",
            t.compared,
            t.exact,
            t.within_bound,
            t.max_kb,
            t.max_of_pss * 100.0,
            median * 100.0
        );
    }
}
