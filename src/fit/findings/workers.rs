//! Workers of a pool: the ones that ended while sampled (recycled), a leak
//! within each worker's life pooled over workers, and recycle advice.

use super::{Finding, RecycleAdvice};
use crate::fit::{MIN_SLOPE_BYTES, stats};
use crate::series::{ProcessLife, XAxis, row_x};
use crate::store::Scope;

/// Workers whose last sample came before the tree's last: they ended (and
/// maybe were replaced) while the tree was sampled.
pub(super) fn recycled(
    scope: Scope,
    workers: &[&ProcessLife],
    x: XAxis,
    last_x_overall: f64,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for w in workers {
        let last = w.rows.last().map(|r| row_x(r, x)).unwrap_or(0.0);
        if last < last_x_overall {
            out.push(Finding::Recycled {
                scope,
                pid: w.pid,
                comm: w.comm.clone(),
                first_x: w.rows.first().map(|r| row_x(r, x)).unwrap_or(0.0),
                last_x: last,
                last_rss_bytes: w.rows.last().and_then(|r| r.rss_bytes).unwrap_or(0),
                x,
            });
        }
    }
    out
}

/// Within-worker slope pooled over workers (a fixed-effects regression:
/// each worker has its own intercept, all share the slope), with a Student t
/// 95% CI on N − G − 1 degrees of freedom.
pub(super) fn pooled_slope(workers: &[Vec<(f64, f64)>]) -> Option<(f64, (f64, f64))> {
    let (mut sxy, mut sxx, mut n, mut groups) = (0.0, 0.0, 0usize, 0usize);
    for pts in workers.iter().filter(|p| p.len() >= 2) {
        let k = pts.len() as f64;
        let mx = pts.iter().map(|p| p.0).sum::<f64>() / k;
        let my = pts.iter().map(|p| p.1).sum::<f64>() / k;
        sxx += pts.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
        sxy += pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>();
        n += pts.len();
        groups += 1;
    }
    let df = n.checked_sub(groups + 1).filter(|d| *d >= 1)? as f64;
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let mut sse = 0.0;
    for pts in workers.iter().filter(|p| p.len() >= 2) {
        let k = pts.len() as f64;
        let mx = pts.iter().map(|p| p.0).sum::<f64>() / k;
        let my = pts.iter().map(|p| p.1).sum::<f64>() / k;
        sse += pts
            .iter()
            .map(|p| (p.1 - my - slope * (p.0 - mx)).powi(2))
            .sum::<f64>();
    }
    let se = (sse / df / sxx).sqrt();
    let t = stats::student_t_quantile(0.975, df);
    Some((slope, (slope - t * se, slope + t * se)))
}

/// A leak in the workers: RSS growth within each worker's life, pooled over
/// workers (recycled ones included), significant and above the practical
/// threshold, and still growing late in each worker's life — a one-off step
/// (a task's first allocation, a cache) is not a leak. Same "second half at
/// least half as fast" rule as the verdicts.
pub(super) fn leak(scope: Scope, workers: &[&ProcessLife], x: XAxis) -> Option<Finding> {
    let series: Vec<Vec<(f64, f64)>> = workers
        .iter()
        .map(|w| w.points(scope, x, |r| r.rss_bytes))
        .collect();
    let threshold = MIN_SLOPE_BYTES / x.per_rate_unit();
    let tails: Vec<Vec<(f64, f64)>> = series.iter().map(|p| p[p.len() / 2..].to_vec()).collect();
    let still_growing =
        |slope: f64| pooled_slope(&tails).is_some_and(|(_, tail_ci)| tail_ci.0 > slope / 2.0);
    let (slope, ci) = pooled_slope(&series)?;
    if !(ci.0 > threshold && still_growing(slope)) {
        return None;
    }
    let mut fresh: Vec<f64> = series
        .iter()
        .filter_map(|p| p.first().map(|q| q.1))
        .collect();
    let fresh_rss = stats::median(&mut fresh).unwrap_or(0.0);
    let grew = |p: &Vec<(f64, f64)>| {
        p.last().map(|l| l.1).unwrap_or(0.0) - p.first().map(|f| f.1).unwrap_or(0.0)
    };
    let top = workers
        .iter()
        .zip(&series)
        .max_by(|a, b| grew(a.1).total_cmp(&grew(b.1)))
        .map(|(w, _)| (w.pid, w.comm.clone()))
        .unwrap_or_default();
    Some(Finding::Leak {
        scope,
        pid: top.0,
        pids: workers.iter().map(|w| w.pid).collect(),
        comm: top.1,
        bytes_per_x: slope,
        bytes_per_x_ci95: Some(ci),
        x,
        fresh_rss_bytes: fresh_rss,
    })
}

/// After how many runs (or seconds) a fresh worker reaches `budget` at the
/// leak's rate.
pub(super) fn recycle_advice(leak: &Finding, budget: u64) -> Option<RecycleAdvice> {
    let Finding::Leak {
        scope,
        bytes_per_x,
        x,
        fresh_rss_bytes,
        ..
    } = leak
    else {
        return None;
    };
    let after = ((budget as f64 - fresh_rss_bytes) / bytes_per_x)
        .floor()
        .max(0.0);
    Some(RecycleAdvice {
        scope: *scope,
        budget_bytes: budget,
        recycle_after_x: after,
        x: *x,
        restarts_per_100_x: if after > 0.0 { 100.0 / after } else { 100.0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_slope_ignores_the_jump_between_workers() {
        // Two workers of 5 tasks, each +2 per task, the second starting low
        // again (recycled): a plain regression would see a sawtooth.
        let w1: Vec<(f64, f64)> = (1..=5).map(|i| (i as f64, 10.0 + 2.0 * i as f64)).collect();
        let w2: Vec<(f64, f64)> = (6..=10)
            .map(|i| (i as f64, 10.0 + 2.0 * (i - 5) as f64))
            .collect();
        let (slope, ci) = pooled_slope(&[w1, w2]).unwrap();
        assert!((slope - 2.0).abs() < 1e-9);
        assert!((ci.0 - 2.0).abs() < 1e-6 && (ci.1 - 2.0).abs() < 1e-6);
    }
}
