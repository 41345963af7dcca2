//! Per-series statistics, verdicts, attribution and projection. Pure
//! functions on plain data; nothing here reads /proc or writes files.

pub mod attribution;
pub mod findings;
pub mod stats;
pub mod verdict;

use serde::{Deserialize, Serialize};

use crate::series::{Metric, ProcessLife, RunRecord, Samples, Series, XAxis};
use crate::store::Scope;
pub use attribution::Attribution;
pub use verdict::Verdict;

/// How to analyse: what the user may change when re-running `report`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FitOptions {
    /// Leading points to trim as warm-up; `None` = detect.
    pub warmup: Option<usize>,
    /// Project when the main series reaches this many bytes.
    pub limit_bytes: Option<u64>,
    /// Advise recycling so a process stays under this many bytes.
    pub budget_bytes: Option<u64>,
}

/// Series longer than this are averaged into this many buckets before the
/// trend tests (Mann–Kendall is O(n²); a day of 1 s samples is 86,400 points).
const MAX_FIT_POINTS: usize = 1000;

/// Growth too small to matter, whatever the statistics say: 64 KiB or 0.1%
/// of the level per run (per hour in time series). PSS of a small process
/// moves by hundreds of KiB when other processes map or unmap the same
/// libraries; below this line such noise would keep a steady daemon
/// "inconclusive" forever. A 64 KiB/run leak takes 16,000 runs to cost 1 GiB.
pub const MIN_SLOPE_BYTES: f64 = 64.0 * 1024.0;

fn thresholds(s: &Series) -> verdict::Thresholds {
    let base = verdict::Thresholds::default();
    let per_x = match s.x_axis {
        XAxis::Run => 1.0,
        XAxis::Seconds => 1.0 / 3600.0,
    };
    let (display_unit, display_scale) = match s.x_axis {
        XAxis::Run => ("run", 1.0),
        XAxis::Seconds => ("h", 3600.0),
    };
    verdict::Thresholds {
        display_unit,
        display_scale,
        min_slope_fraction: base.min_slope_fraction * per_x,
        min_slope_abs: if s.metric.is_bytes() {
            MIN_SLOPE_BYTES * per_x
        } else {
            0.0
        },
        ..base
    }
}

/// What the fit says about one series. Slopes are per x (run or second).
/// Serialised as it is in summary.json's `series` (the last three fields are
/// for the charts and the gate, not the contract).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesFit {
    #[serde(rename = "name")]
    pub scope: Scope,
    pub metric: Metric,
    pub x: XAxis,
    pub n: usize,
    pub first: f64,
    pub last: f64,
    /// Least-squares slope over the points after warm-up.
    pub slope: Option<f64>,
    pub slope_ci95: Option<(f64, f64)>,
    /// Theil–Sen slope.
    pub robust_slope: Option<f64>,
    /// Mann–Kendall two-sided p-value.
    pub trend_p: Option<f64>,
    pub r2: Option<f64>,
    pub growth_pct_per_x: Option<f64>,
    /// Least-squares slope over the second half of the fitted points.
    pub tail_slope: Option<f64>,
    pub verdict: Verdict,
    /// Leading points trimmed as warm-up.
    pub warmup: usize,
    /// For inconclusive: about how many points would decide it.
    pub runs_needed: Option<usize>,
    pub reason: String,
    pub processes: usize,
    /// Intercept of the least-squares line (for plots).
    #[serde(skip)]
    pub intercept: Option<f64>,
    /// x distance from the first fitted point to the last (runs or seconds).
    #[serde(skip)]
    pub x_span: f64,
    /// Mean of the fitted points: the level relative rates are taken of.
    #[serde(skip)]
    pub mean_level: f64,
}

/// Averages a long series into `MAX_FIT_POINTS` buckets of consecutive points
/// (the charts plot the same points, so the fitted line matches).
pub fn thin(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    if points.len() <= MAX_FIT_POINTS {
        return points.to_vec();
    }
    let per = points.len().div_ceil(MAX_FIT_POINTS);
    points
        .chunks(per)
        .map(|c| {
            let n = c.len() as f64;
            (
                c.iter().map(|p| p.0).sum::<f64>() / n,
                c.iter().map(|p| p.1).sum::<f64>() / n,
            )
        })
        .collect()
}

pub fn fit(series: &Series, opts: &FitOptions) -> SeriesFit {
    let points = thin(&series.points);
    let (xs, ys): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
    // --warmup counts samples; after thinning, a point is a bucket of them.
    let samples = usize::try_from(series.count).unwrap_or(usize::MAX);
    let per_bucket = samples.div_ceil(points.len().max(1)).max(1);
    let warmup = opts.warmup.map(|k| k.div_ceil(per_bucket));
    let c = verdict::classify(&xs, &ys, warmup, &thresholds(series));
    // The verdict may stop before fitting (too few points); the slope and
    // its CI are still worth reporting.
    let warm = c.warmup.min(xs.len());
    let own_fit = c.fit.or_else(|| stats::ols(&xs[warm..], &ys[warm..]));
    let line = own_fit.as_ref();
    SeriesFit {
        scope: series.scope,
        metric: series.metric,
        x: series.x_axis,
        n: samples,
        first: series.points.first().map(|p| p.1).unwrap_or(0.0),
        last: series.points.last().map(|p| p.1).unwrap_or(0.0),
        slope: line.map(|l| l.slope),
        slope_ci95: line.and_then(|l| l.slope_ci95),
        robust_slope: c.robust_slope,
        trend_p: c.trend_p,
        r2: line.map(|l| l.r2),
        growth_pct_per_x: c.growth_pct_per_x,
        tail_slope: end_slope(&xs[c.warmup.min(xs.len())..], &ys[c.warmup.min(ys.len())..]),
        verdict: c.verdict,
        warmup: c.warmup,
        runs_needed: c.runs_needed,
        reason: c.reason,
        processes: series.processes,
        intercept: line.map(|l| l.intercept),
        mean_level: stats::mean(&ys[warm..]).unwrap_or(0.0),
        x_span: match (xs.get(c.warmup), xs.last()) {
            (Some(a), Some(b)) => b - a,
            _ => 0.0,
        },
    }
}

/// Least-squares slope over the second half of the points: "is it still
/// growing at the end", in the plainest terms. (The verdict's own test uses
/// a two-segment fit, whose tail slope can dip below zero right after a
/// plateau's knee; this one reads as people expect.)
fn end_slope(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let half = xs.len() / 2;
    stats::ols(&xs[half..], &ys[half..]).map(|l| l.slope)
}

/// When the main series reaches `--limit`, and when to recycle under `--budget`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Projection {
    pub series: Scope,
    pub metric: Metric,
    pub x: XAxis,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// x units (runs or seconds) from the last point until the limit is
    /// reached at the fitted slope; `None` when the series does not grow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_to_limit: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_bytes: Option<u64>,
    /// Recycle after this many runs (or seconds) from a fresh start (the
    /// first point) to stay under the budget: TVM's maximum_uses, Celery's
    /// max-tasks-per-child, gunicorn's max_requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recycle_after: Option<f64>,
    pub note: String,
}

/// Projects `main` (RSS: what limits and budgets are about) when `judged`
/// (the headline verdict) says it leaks.
fn project(main: &SeriesFit, judged: Verdict, opts: &FitOptions) -> Option<Projection> {
    if opts.limit_bytes.is_none() && opts.budget_bytes.is_none() {
        return None;
    }
    let slope = main.slope.filter(|s| *s > 0.0 && judged == Verdict::Leak);
    let x_to_limit = opts
        .limit_bytes
        .zip(slope)
        .map(|(limit, s)| ((limit as f64 - main.last) / s).max(0.0));
    let recycle_after = opts
        .budget_bytes
        .zip(slope)
        .map(|(budget, s)| ((budget as f64 - main.first) / s).floor().max(0.0));
    let note = match (slope, judged) {
        (Some(_), _) => "at the fitted RSS slope".to_string(),
        (None, v) => format!("no projection: the series is {}", v.as_str()),
    };
    Some(Projection {
        series: main.scope,
        metric: main.metric,
        x: main.x,
        limit_bytes: opts.limit_bytes,
        x_to_limit,
        budget_bytes: opts.budget_bytes,
        recycle_after,
        note,
    })
}

/// Everything the reports need, computed from the rows alone so that
/// `leakwatch report` rebuilds exactly what the live session wrote.
#[derive(Debug, Clone)]
pub struct Analysis {
    pub options: FitOptions,
    pub series: Vec<Series>,
    /// Every process of every scope, for per-process tables and charts.
    pub lives: Vec<ProcessLife>,
    pub fits: Vec<SeriesFit>,
    pub runs: Vec<RunRecord>,
    pub command_line: Option<String>,
    pub target_pid: Option<u32>,
    /// Seconds from the first to the last row.
    pub duration_s: f64,
    pub verdict: Verdict,
    /// Index into `fits` of the headline series of each scope.
    pub headline: Vec<usize>,
    pub attribution: Vec<Attribution>,
    pub projection: Option<Projection>,
    /// Copy-on-write unsharing, worker leaks, recycled workers.
    pub findings: Vec<findings::Finding>,
    /// PSS sum vs RSS sum of each multi-process scope.
    pub trees: Vec<findings::TreeTotal>,
    /// Recycle advice for worker pools under `--budget`.
    pub recycle: Vec<findings::RecycleAdvice>,
    pub interrupted: bool,
    pub notes: Vec<String>,
    /// What sampling cost (attach mode): ticks, achieved interval, walks.
    pub sampling: Option<crate::store::SamplingCost>,
}

impl Analysis {
    pub fn mode(&self) -> &'static str {
        if self.command_line.is_some() {
            "run"
        } else {
            "attach"
        }
    }

    pub fn fit_of(&self, scope: Scope, metric: Metric) -> Option<&SeriesFit> {
        self.fits
            .iter()
            .find(|f| f.scope == scope && f.metric == metric)
    }

    /// The headline fits: one per scope, the main scope first.
    pub fn headlines(&self) -> impl Iterator<Item = &SeriesFit> {
        self.headline.iter().filter_map(|&i| self.fits.get(i))
    }
}

/// The metric a scope is judged by: resident anonymous memory (RssAnon,
/// what heap leaks grow), else RSS on kernels without the split.
///
/// Not PSS or USS: both move whenever *other* processes map or unmap the
/// same files (a page is private only while no one else maps it), and the
/// rank-based trend test turns even a small such drift into a false trend
/// or hides a real plateau. RssAnon is also blind to copy-on-write
/// unsharing (a page counts in RSS whether shared or not), which is not a
/// leak. Shared-memory leaks are caught by `shmem_bytes`, judged beside it.
/// (`command` has only its RSS peak series: see `series::build`.)
pub fn primary_metric(fits: &[SeriesFit], scope: Scope) -> Metric {
    let has_anon = fits
        .iter()
        .any(|f| f.scope == scope && f.metric == Metric::AnonBytes && f.n >= 2);
    if has_anon {
        Metric::AnonBytes
    } else {
        Metric::RssBytes
    }
}

/// Metrics judged beside the primary one for the overall verdict.
const ALSO_JUDGED: [Metric; 3] = [Metric::ShmemBytes, Metric::Fds, Metric::Threads];

/// One headline per scope, in scope order (survivors, pid:…, target,
/// command): indices into `fits` of each scope's primary metric.
fn headlines(fits: &[SeriesFit], scopes: &[Scope]) -> Vec<usize> {
    scopes
        .iter()
        .filter_map(|&scope| {
            let metric = primary_metric(fits, scope);
            fits.iter()
                .position(|f| f.scope == scope && f.metric == metric)
        })
        .collect()
}

/// The overall verdict: the worst over the followed processes' private
/// memory, shmem, fds and threads; the command's own peak only when nothing
/// else is followed. Workers that leak while they live make the tree leak,
/// even when recycling keeps the tree's total flat.
fn overall_verdict(
    fits: &[SeriesFit],
    headline: &[usize],
    tree: &findings::TreeFindings,
) -> Verdict {
    if tree
        .findings
        .iter()
        .any(|f| matches!(f, findings::Finding::Leak { .. }))
    {
        return Verdict::Leak;
    }
    let judged = fits
        .iter()
        .filter(|f| f.scope != Scope::Command)
        .filter(|f| f.metric == primary_metric(fits, f.scope) || ALSO_JUDGED.contains(&f.metric))
        .map(|f| f.verdict)
        .max();
    judged
        .or_else(|| {
            headline
                .iter()
                .filter_map(|&i| fits.get(i))
                .map(|f| f.verdict)
                .max()
        })
        .unwrap_or(Verdict::Inconclusive)
}

/// The analysis of everything samples.csv held.
pub fn analyse(samples: Samples, opts: &FitOptions) -> Analysis {
    let fits: Vec<SeriesFit> = samples.series.iter().map(|s| fit(s, opts)).collect();
    let mut scopes: Vec<Scope> = samples.series.iter().map(|s| s.scope).collect();
    scopes.dedup();
    let headline = headlines(&fits, &scopes);
    let attribution = headline
        .iter()
        .filter_map(|&i| fits.get(i))
        .filter(|f| f.scope != Scope::Command)
        .map(|f| attribution::attribute(f, &fits, &samples))
        .collect();
    let tree = findings::analyse(&samples, &scopes, opts.budget_bytes);
    let verdict = overall_verdict(&fits, &headline, &tree);

    // Recycle advice for a pool's workers supersedes the whole tree's.
    let project_opts = FitOptions {
        budget_bytes: opts.budget_bytes.filter(|_| tree.recycle.is_empty()),
        ..*opts
    };
    let projection = headline.first().and_then(|&i| fits.get(i)).and_then(|f| {
        let rss = fits
            .iter()
            .find(|r| r.scope == f.scope && r.metric == Metric::RssBytes)
            .unwrap_or(f);
        project(rss, f.verdict, &project_opts)
    });
    Analysis {
        options: *opts,
        series: samples.series,
        lives: samples.lives,
        fits,
        runs: samples.runs,
        command_line: samples.command_line,
        target_pid: samples.target_pid,
        duration_s: samples.span_s,
        verdict,
        headline,
        attribution,
        projection,
        findings: tree.findings,
        trees: tree.trees,
        recycle: tree.recycle,
        interrupted: samples.interrupted,
        notes: samples.notes,
        sampling: samples.sampling,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_series_are_averaged_into_buckets_for_the_fit_and_the_charts() {
        let pts: Vec<(f64, f64)> = (0..2500).map(|i| (i as f64, 1.0)).collect();
        let t = thin(&pts);
        assert_eq!(t.len(), 834);
        assert_eq!(t[0], (1.0, 1.0));
        assert_eq!(thin(&pts[..10]), pts[..10].to_vec());
    }
}
