//! A program's own accounting as the truth: a log of `unix_time kept_bytes`
//! lines it appends as it keeps memory (`fixtures/real/py_attach_daemon.py`,
//! `fixtures/native/busy_alloc.c`).

use std::path::Path;

/// The kept bytes per hour the log shows between `from` and `to` (Unix
/// seconds): its first and last lines in that window.
pub fn kept_per_hour(log: &Path, from: f64, to: f64) -> f64 {
    let points: Vec<(f64, f64)> = std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (t, b) = l.split_once(' ')?;
            Some((t.parse().ok()?, b.parse().ok()?))
        })
        .filter(|&(t, _)| (from..=to).contains(&t))
        .collect();
    let (first, last) = (points[0], points[points.len() - 1]);
    (last.1 - first.1) / (last.0 - first.0) * 3600.0
}

/// Now, in Unix seconds (the clock the logs are written with).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}
