//! Lives of series that restarted (`analyze --prometheus` cuts a series
//! where it reset): which life is worst, and the growth within a life pooled
//! over the lives of one label set. A life is its points (Unix seconds,
//! value); callers say how to reach them, so this module needs no sampler
//! type.

use std::collections::BTreeMap;

use super::{FitOptions, SeriesFit, stats};
use crate::series::{Metric, Series, XAxis};
use crate::store::Scope;

/// A life's points (x from `start`, seconds) fitted as a series, for
/// ordering lives before they get indices.
fn quick_fit(points: &[(f64, f64)], start: f64, metric: Metric, opts: &FitOptions) -> SeriesFit {
    let points: Vec<(f64, f64)> = points.iter().map(|&(t, v)| (t - start, v)).collect();
    let s = Series {
        scope: Scope::Series(0),
        metric,
        x_axis: XAxis::Seconds,
        count: points.len() as u64,
        points,
        processes: 1,
    };
    super::fit(&s, super::warmup_of(&s, opts))
}

/// Lives ordered worst first (leak before inconclusive, plateau, stable;
/// then by growth in bytes per second: the leak that costs most), so
/// `series:0` is the worst and every report lists them in that order.
/// `points` gives a life's points.
pub fn worst_first<L>(
    lives: Vec<L>,
    points: impl Fn(&L) -> &[(f64, f64)],
    start: f64,
    metric: Metric,
    opts: &FitOptions,
) -> Vec<L> {
    let mut judged: Vec<(SeriesFit, L)> = lives
        .into_iter()
        .map(|l| (quick_fit(points(&l), start, metric, opts), l))
        .collect();
    judged.sort_by(|(a, _), (b, _)| {
        b.verdict.cmp(&a.verdict).then(
            b.slope
                .unwrap_or(f64::MIN)
                .total_cmp(&a.slope.unwrap_or(f64::MIN)),
        )
    });
    judged.into_iter().map(|(_, l)| l).collect()
}

/// One label set that restarted: its growth within a life, pooled over its lives (each life
/// is judged on its own as well). Slopes per second.
#[derive(Debug, Clone, PartialEq)]
pub struct PooledLives {
    pub labels: String,
    pub lives: usize,
    pub slope: f64,
    pub ci95: (f64, f64),
}

/// Every label set that restarted, pooled (`crate::phrase::pooled_lives` words each).
/// `lives`: each life's label set (as text) and points.
pub fn pooled<'a>(lives: impl IntoIterator<Item = (String, &'a [(f64, f64)])>) -> Vec<PooledLives> {
    let mut by_labels: BTreeMap<String, Vec<&[(f64, f64)]>> = BTreeMap::new();
    for (labels, points) in lives {
        by_labels.entry(labels).or_default().push(points);
    }
    by_labels
        .into_iter()
        .filter(|(_, l)| l.len() > 1)
        .filter_map(|(labels, l)| {
            let (slope, ci95) = stats::pooled_slope(&l)?;
            Some(PooledLives {
                labels,
                lives: l.len(),
                slope,
                ci95,
            })
        })
        .collect()
}
