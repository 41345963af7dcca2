//! Per-series statistics, verdicts, attribution and projection. Pure
//! functions on plain data; nothing here reads /proc or writes files.

pub mod attribution;
pub mod changepoint;
pub mod envelope;
pub mod findings;
pub mod heap;
pub mod lives;
pub mod sites;
pub mod stats;
pub mod verdict;

use serde::{Deserialize, Serialize};

use crate::series::{Induced, Metric, ProcessLife, RunRecord, Samples, Series, XAxis};
use crate::store::Scope;
pub use attribution::Attribution;
pub use changepoint::Segment;
pub use verdict::{DecidedBy, EndRate, PlateauInfo, RateFrom, Step, Verdict};

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

/// Growth too small to matter, whatever the statistics say: 64 KiB or 0.1%
/// of the level per run (per hour in time series). PSS of a small process
/// moves by hundreds of KiB when other processes map or unmap the same
/// libraries; below this line such noise would keep a steady daemon
/// "inconclusive" forever. A 64 KiB/run leak takes 16,000 runs to cost 1 GiB.
pub const MIN_SLOPE_BYTES: f64 = 64.0 * 1024.0;

fn thresholds(s: &Series) -> verdict::Thresholds {
    let base = verdict::Thresholds::default();
    let per_x = 1.0 / s.x_axis.per_rate_unit();
    verdict::Thresholds {
        display_unit: s.x_axis.rate_unit(),
        display_scale: s.x_axis.per_rate_unit(),
        counts: !s.metric.is_bytes(),
        min_slope_fraction: base.min_slope_fraction * per_x,
        min_slope_abs: if s.metric.is_bytes() {
            MIN_SLOPE_BYTES * per_x
        } else {
            0.0
        },
        ..base
    }
}

/// What the fit says about one series. Slopes and rates are per x (run or
/// second). summary.json writes it as `summary::Series`.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesFit {
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
    /// The headline rate per x and its 95% CI: a leak's rate (the last
    /// segment's slope when it started leaking part-way, the steps' average
    /// rate, the troughs' slope for a saw-tooth); a plateau's fill rate;
    /// the least-squares slope otherwise; none for a one-off step.
    pub rate: Option<f64>,
    pub rate_ci95: Option<(f64, f64)>,
    /// Which estimate `rate` is (`line`, `end_segment`, `first_half`,
    /// `average_fill`, `troughs`, `trough_fill`); none without a rate.
    pub rate_from: Option<RateFrom>,
    /// The estimate the verdict was decided on (the contract: its 95% CI
    /// against the threshold): the growth rate at the end, its interval,
    /// and which estimator it is; what the gate judges too. None for series
    /// too short to fit.
    pub end_rate: Option<EndRate>,
    /// The slope at the end — after the last change point, or over the
    /// second half when there is none — and where the end starts (x): the
    /// one "end" stderr and report.md show.
    pub end_slope: Option<f64>,
    /// The 95% CI of the end slope: the least-squares line over what the end
    /// slope was fitted on from `end_start_x` on (the troughs of a saw-tooth,
    /// else the points).
    pub end_slope_ci95: Option<(f64, f64)>,
    pub end_start_x: Option<f64>,
    /// For a plateau: fill rate, where it stopped, the level it holds.
    pub plateau: Option<PlateauInfo>,
    /// Significant jumps between segments, in x order.
    pub steps: Vec<Step>,
    /// Which model decided: the series (`mean`) or its lower envelope
    /// (`troughs`, a saw-tooth judged on what is left after each collection).
    pub decided_by: DecidedBy,
    pub verdict: Verdict,
    /// Leading points trimmed as warm-up.
    pub warmup: usize,
    /// For inconclusive: about how many points would decide it.
    pub runs_needed: Option<usize>,
    /// Why, as typed evidence (`crate::phrase::reason` words it).
    pub reason: verdict::Reason,
    pub processes: usize,
    /// Intercept of the least-squares line (for plots).
    pub intercept: Option<f64>,
    /// x distance from the first fitted point to the last (runs or seconds).
    pub x_span: f64,
    /// Mean of the fitted points: the level relative rates are taken of.
    pub mean_level: f64,
    /// The model the verdict used, for the charts: segments of the series,
    /// and the troughs with their line when a saw-tooth was judged on them.
    pub model: Model,
}

impl SeriesFit {
    /// The rate the verdict rests on at the end of the series, and its 95%
    /// CI: the verdict's own estimate (`end_rate`), what the gate judges
    /// against its limit; the line for a series no estimator judged.
    pub fn judged_rate(&self) -> (Option<f64>, Option<(f64, f64)>) {
        match self.end_rate {
            Some(end) => (Some(end.rate), Some(end.ci95)),
            None => (self.slope, self.slope_ci95),
        }
    }

    /// No estimator judged it (too few points, say): its line is shown
    /// without an interval, which from so few points is no verdict's (three
    /// equal points give one of no width).
    pub fn unjudged(&self) -> bool {
        self.end_rate.is_none() && self.verdict == Verdict::Inconclusive
    }
}

/// What the charts draw instead of a straight line when the verdict did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Model {
    pub segments: Vec<Segment>,
    /// One trough per window (x, y), and the line through them (slope,
    /// intercept) when troughs decided.
    pub troughs: Vec<(f64, f64)>,
    pub trough_line: Option<(f64, f64)>,
}

/// The live heap's end rate reaches down by what the old generation grew with no collection
/// of it since (`Classification::promoted_bound`): that growth at the live heap's last point
/// (read from the same heap rows; where a process without the figure makes the two series'
/// last points differ, nothing is bounded), and the live heap's own growth over the end.
fn bound_by_promotion(
    c: verdict::Classification,
    live: &Series,
    promoted: &Series,
) -> verdict::Classification {
    let (Some(((xa, ya), (xb, yb))), Some(&(xp, p))) =
        (end_growth(&c, live), promoted.points.last())
    else {
        return c;
    };
    if (xp - xb).abs() > 1e-9 * xb.abs().max(1.0) {
        return c;
    }
    c.promoted_bound(p, yb - ya, xb - xa)
}

/// The end's growth, from its first point (at `end_start_x` or after) to its last: the
/// points and their distance in x.
fn end_growth(c: &verdict::Classification, series: &Series) -> Option<((f64, f64), (f64, f64))> {
    let from = c.end_start_x?;
    let &last = series.points.last()?;
    let &first = series.points.iter().find(|q| q.0 >= from)?;
    Some((first, last))
}

/// A scope's kernel memory reaches down by what leakwatch's class histograms changed its
/// anon memory by over the end (`Classification::histograms_bound`), as the least-squares
/// slope of their sum at the end's points times its length: a slope is linear in the
/// points, so the series' own slope less this one is the slope of the series without them
/// (where two end points would read a staircase of them by its phase).
fn bound_by_histograms(
    c: verdict::Classification,
    series: &Series,
    histograms: &Induced,
) -> verdict::Classification {
    let Some(((xa, ya), (xb, yb))) = end_growth(&c, series) else {
        return c;
    };
    let (xs, sums): (Vec<f64>, Vec<f64>) = series
        .points
        .iter()
        .filter(|p| p.0 >= xa)
        .map(|p| (p.0, histograms.upto(p.0)))
        .unzip();
    let Some(slope) = stats::ols(&xs, &sums).map(|f| f.slope) else {
        return c;
    };
    c.histograms_bound(slope * (xb - xa), yb - ya, xb - xa)
}

/// Averages a long series into `verdict::MAX_MEAN_POINTS` buckets of
/// consecutive points, the one limit of the trend tests (Mann–Kendall is
/// O(n²); a day of 1 s samples is 86,400 points): the charts plot the same
/// points, so the fitted line matches.
pub fn thin(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    if points.len() <= verdict::MAX_MEAN_POINTS {
        return points.to_vec();
    }
    let per = points.len().div_ceil(verdict::MAX_MEAN_POINTS);
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

/// Leading points of a series that are warm-up: `--warmup K` (in samples;
/// a stored point may average several), else detected.
pub fn warmup_of(series: &Series, opts: &FitOptions) -> usize {
    let (xs, ys): (Vec<f64>, Vec<f64>) = series.points.iter().copied().unzip();
    match opts.warmup {
        Some(k) => {
            let samples = usize::try_from(series.count).unwrap_or(usize::MAX);
            let per_point = samples.div_ceil(series.points.len().max(1)).max(1);
            k.div_ceil(per_point)
        }
        None => verdict::detect_warmup(&xs, &ys),
    }
}

/// Fits one series, leaving out `warmup` leading points (the same for every
/// metric of a scope: see `analyse`).
pub fn fit(series: &Series, warmup: usize) -> SeriesFit {
    fit_as(series, warmup, None)
}

/// `fit`, on the path (troughs or mean, `verdict::classify_as`) the
/// scope's primary metric took.
fn fit_as(series: &Series, warmup: usize, saw_tooth: Option<bool>) -> SeriesFit {
    fit_bounded(series, warmup, saw_tooth, Bound::None)
}

/// What may have grown a series besides the program, read beside it.
#[derive(Clone, Copy)]
enum Bound<'a> {
    None,
    /// A live heap: what its JVMs' old generations promoted with no collection of it since
    /// (the scope's `heap_promoted_bytes`).
    Promoted(&'a Series),
    /// The kernel's memory of a scope leakwatch asked for class histograms: what they
    /// changed its anon memory by.
    Histograms(&'a Induced),
}

/// The kernel's metrics a histogram's growth of anon memory shows in.
const GROWN_BY_HISTOGRAMS: [Metric; 5] = [
    Metric::AnonBytes,
    Metric::RssBytes,
    Metric::PssBytes,
    Metric::UssBytes,
    Metric::PrivateDirtyBytes,
];

/// The bound of `series` among what was read beside the series (`promoted`, `histograms`).
fn bound_of<'a>(series: &Series, promoted: &'a [Series], histograms: &'a [Induced]) -> Bound<'a> {
    if series.metric == Metric::HeapLiveBytes
        && let Some(p) = promoted.iter().find(|p| p.scope == series.scope)
    {
        return Bound::Promoted(p);
    }
    if GROWN_BY_HISTOGRAMS.contains(&series.metric)
        && let Some(h) = histograms.iter().find(|h| h.scope == series.scope)
    {
        return Bound::Histograms(h);
    }
    Bound::None
}

/// `fit_as`, its end bounded by what may have grown it besides the program (`bound`).
fn fit_bounded(
    series: &Series,
    warmup: usize,
    saw_tooth: Option<bool>,
    bound: Bound<'_>,
) -> SeriesFit {
    let (xs, ys): (Vec<f64>, Vec<f64>) = series.points.iter().copied().unzip();
    let c = verdict::classify_as(&xs, &ys, Some(warmup), &thresholds(series), saw_tooth);
    let c = match bound {
        Bound::Promoted(p) => bound_by_promotion(c, series, p),
        Bound::Histograms(h) => bound_by_histograms(c, series, h),
        Bound::None => c,
    };
    // The verdict may stop before fitting (too few points); the slope and
    // its CI are still worth reporting.
    let warm = c.warmup.min(xs.len());
    let own_fit = c.fit.or_else(|| stats::ols(&xs[warm..], &ys[warm..]));
    let line = own_fit.as_ref();
    let rate_ci95 = rate_ci(&c, &xs[warm..], &ys[warm..]);
    SeriesFit {
        scope: series.scope,
        metric: series.metric,
        x: series.x_axis,
        n: usize::try_from(series.count).unwrap_or(usize::MAX),
        first: series.points.first().map(|p| p.1).unwrap_or(0.0),
        last: series.points.last().map(|p| p.1).unwrap_or(0.0),
        slope: line.map(|l| l.slope),
        slope_ci95: line.and_then(|l| l.slope_ci95),
        robust_slope: c.robust_slope,
        trend_p: c.trend_p,
        r2: line.map(|l| l.r2),
        growth_pct_per_x: c.growth_pct_per_x,
        rate: c.rate,
        rate_ci95,
        rate_from: c.rate_from,
        end_rate: c.end_rate,
        end_slope: c.end_slope,
        end_slope_ci95: end_ci(&c, &xs[warm..], &ys[warm..]),
        end_start_x: c.end_start_x,
        plateau: c.plateau,
        steps: real_steps(&c),
        decided_by: c.decided_by,
        verdict: c.verdict,
        warmup: c.warmup,
        runs_needed: c.runs_needed,
        reason: c.reason.clone(),
        processes: series.processes,
        intercept: line.map(|l| l.intercept),
        mean_level: stats::mean(&ys[warm..]).unwrap_or(0.0),
        x_span: match (xs.get(warm), xs.last()) {
            (Some(a), Some(b)) => b - a,
            _ => 0.0,
        },
        model: model(c),
    }
}

/// The jumps a person would see: a ramp that stops reads, extrapolated to
/// midway, as a drop into the flat segment after it; kept only are jumps
/// the segments' own ends show (same sign, at least half the size).
fn real_steps(c: &verdict::Classification) -> Vec<Step> {
    c.steps
        .iter()
        .filter(|step| {
            let i = c.segments.iter().position(|s| s.x_start == step.x);
            let seen = i
                .filter(|&i| i > 0)
                .map(|i| c.segments[i].level_start - c.segments[i - 1].level_end);
            seen.is_none_or(|d| d * step.bytes > 0.0 && d.abs() >= 0.5 * step.bytes.abs())
        })
        .copied()
        .collect()
}

/// The CI of the headline rate: the troughs' line's whenever they decided
/// (even when the rate is the line's: too few teeth), else the estimate's
/// own: the least-squares line's, or the last segment's line's; none for a
/// fill rate.
pub(crate) fn rate_ci(c: &verdict::Classification, xs: &[f64], ys: &[f64]) -> Option<(f64, f64)> {
    c.rate?;
    if c.rate_ci95.is_some() {
        return c.rate_ci95;
    }
    // The rate the verdict was decided on: its own interval.
    if let Some(end) = c.end_rate.filter(|e| Some(e.from) == c.rate_from) {
        return Some(end.ci95);
    }
    if c.decided_by == DecidedBy::Troughs {
        return c.envelope.as_ref()?.fit.as_ref()?.slope_ci95;
    }
    match c.rate_from? {
        RateFrom::Line | RateFrom::Staircase => c.fit.as_ref()?.slope_ci95,
        RateFrom::EndSegment => {
            let from = c.end_start_x?;
            let k = xs.partition_point(|&x| x < from);
            stats::ols(&xs[k..], &ys[k..])?.slope_ci95
        }
        RateFrom::FirstHalf | RateFrom::AverageFill => None,
        // End estimates, answered above.
        RateFrom::SecondHalf | RateFrom::TroughEnd | RateFrom::CurveEnd => None,
        // Only when troughs decided, answered above.
        RateFrom::Troughs | RateFrom::TroughFill => None,
        // A pool's estimates, never a series' headline rate.
        RateFrom::TaskSteps | RateFrom::PooledLives => None,
    }
}

/// The 95% CI of the end slope, from the points it was fitted on: the
/// window minima from the end's start when troughs decided, else the
/// series' points from there.
fn end_ci(c: &verdict::Classification, xs: &[f64], ys: &[f64]) -> Option<(f64, f64)> {
    c.end_slope?;
    let from = c.end_start_x?;
    if c.decided_by == DecidedBy::Troughs {
        let (tx, ty): (Vec<f64>, Vec<f64>) = c
            .envelope
            .as_ref()?
            .points
            .iter()
            .filter(|p| p.0 >= from)
            .copied()
            .unzip();
        return stats::ols(&tx, &ty)?.slope_ci95;
    }
    let k = xs.partition_point(|&x| x < from);
    stats::ols(&xs[k..], &ys[k..])?.slope_ci95
}

/// What the verdict rested on, for the charts: the troughs of a saw-tooth;
/// the segments of a series judged by them (a plateau, steps, a leak that
/// started part-way); nothing when the straight line was what was judged.
fn model(c: verdict::Classification) -> Model {
    let troughs = c.decided_by == DecidedBy::Troughs;
    let on_the_line = c.rate_from == Some(RateFrom::Line);
    // Segments only when the verdict rests on them (a plateau's fill and end,
    // a leak that started part-way): a stable or inconclusive series is
    // judged by its line, and a 4 KiB blip is no step to mark.
    let rests_on_segments = match c.verdict {
        Verdict::Plateau => true,
        Verdict::Leak => !on_the_line,
        Verdict::Stable | Verdict::Inconclusive => false,
    };
    let by_segments = c.segments.len() > 1 && !troughs && rests_on_segments;
    let envelope = c.envelope.filter(|_| troughs);
    Model {
        segments: if by_segments { c.segments } else { Vec::new() },
        troughs: envelope
            .as_ref()
            .map(|e| e.points.clone())
            .unwrap_or_default(),
        trough_line: envelope.and_then(|e| e.fit).map(|f| (f.slope, f.intercept)),
    }
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
    /// What the series holds at its last point, bytes (a summary without
    /// the field reads 0).
    #[serde(default)]
    pub level_bytes: f64,
    /// The headline verdict it was projected under: only a leak's slope projects.
    #[serde(skip, default = "undecided")]
    pub judged: Verdict,
}

/// A projection read back from summary.json does not carry the verdict it was made under.
fn undecided() -> Verdict {
    Verdict::Inconclusive
}

/// Projects `main` (RSS: what limits and budgets are about) when `judged`
/// (the headline verdict) says it leaks.
fn project(main: &SeriesFit, judged: Verdict, opts: &FitOptions) -> Option<Projection> {
    if opts.limit_bytes.is_none() && opts.budget_bytes.is_none() {
        return None;
    }
    let slope = main
        .rate
        .or(main.slope)
        .filter(|s| *s > 0.0 && judged == Verdict::Leak);
    let x_to_limit = opts
        .limit_bytes
        .zip(slope)
        .map(|(limit, s)| ((limit as f64 - main.last) / s).max(0.0));
    let recycle_after = opts
        .budget_bytes
        .zip(slope)
        .map(|(budget, s)| ((budget as f64 - main.first) / s).floor().max(0.0));
    Some(Projection {
        series: main.scope,
        metric: main.metric,
        x: main.x,
        limit_bytes: opts.limit_bytes,
        x_to_limit,
        budget_bytes: opts.budget_bytes,
        recycle_after,
        level_bytes: main.last,
        judged,
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
    /// What was attached to when not one PID (a cgroup, a name pattern).
    pub target: Option<String>,
    /// The label set of each `series:<N>` (`analyze --prometheus`).
    pub labels: std::collections::BTreeMap<u32, String>,
    /// Where in the code (`--py-sites`): allocation sites, judged.
    pub sites: Vec<sites::SiteFit>,
    /// What tracing cost each scope's Python processes (tracemalloc's own
    /// memory), bytes.
    pub py_overhead: Vec<crate::series::sites::Overhead>,
    /// Which types grow (`--py-sites`): live Python objects by type, judged.
    pub types: Vec<sites::TypeFit>,
    /// What sampling cost (attach mode): ticks, achieved interval, walks.
    pub sampling: Option<crate::store::SamplingCost>,
    /// Each scope whose runtime publishes its heap: the heap and the
    /// kernel's view read together.
    pub heap: Vec<heap::HeapReading>,
    /// The gauge `--metric NAME` followed, if any (series `gauge` or
    /// `gauge_bytes`).
    pub gauge_name: Option<String>,
}

impl Analysis {
    /// Every run of the command failed (none ran to exit 0): a session that
    /// judged nothing of the code under test (`run` only).
    pub fn never_worked(&self) -> bool {
        !self.runs.is_empty() && self.runs.iter().all(|r| r.failed())
    }

    pub fn mode(&self) -> &'static str {
        if self.command_line.is_some() {
            "run"
        } else if !self.labels.is_empty() {
            "analyze"
        } else {
            "attach"
        }
    }

    pub fn fit_of(&self, scope: Scope, metric: Metric) -> Option<&SeriesFit> {
        self.fits
            .iter()
            .find(|f| f.scope == scope && f.metric == metric)
    }

    /// A metric's label for people: the gauge's own name for `--metric`'s
    /// series, else `Metric::label`.
    pub fn label(&self, metric: Metric) -> &str {
        match (metric, &self.gauge_name) {
            (Metric::Gauge | Metric::GaugeBytes, Some(name)) => name,
            _ => metric.label(),
        }
    }

    /// The series the overall verdict rests on: the first headline with
    /// that verdict, else the first followed series with it (a leak beside
    /// the primary: anon beside a live heap, fds, a `--metric` gauge), else
    /// the first headline.
    pub fn verdict_series(&self) -> Option<&SeriesFit> {
        self.headlines()
            .find(|f| f.verdict == self.verdict)
            .or_else(|| {
                let mut with = self
                    .fits
                    .iter()
                    .filter(|f| f.scope != Scope::Command && f.n > 0)
                    .filter(|f| f.verdict == self.verdict);
                let judged = |f: &&SeriesFit| {
                    f.metric == kernel_primary(&self.fits, f.scope)
                        || f.metric.judged_beside_primary()
                };
                with.clone().find(judged).or_else(|| with.next())
            })
            .or_else(|| self.headlines().next())
    }

    /// The headline fits: one per scope, the main scope first.
    pub fn headlines(&self) -> impl Iterator<Item = &SeriesFit> {
        self.headline.iter().filter_map(|&i| self.fits.get(i))
    }
}

/// The metric a scope is judged by: the heap its runtime counts
/// (`heap_live_bytes`) where its processes publish one, else its kernel
/// primary (`kernel_primary`).
///
/// A garbage-collected heap is what a program's objects occupy: RSS lags it
/// (a pre-touched JVM heap is resident from the start; V8 and Go commit
/// memory in chunks and keep it), so a leak inside the heap can leave RSS
/// flat for hours, and a heap filling its committed space moves RSS in
/// steps that say nothing of the rate. The kernel's primary stays beside it
/// (see `overall_verdict`).
pub fn primary_metric(fits: &[SeriesFit], scope: Scope) -> Metric {
    let has = |m: Metric| fits.iter().any(|f| f.scope == scope && f.metric == m);
    if has(Metric::HeapLiveBytes) {
        Metric::HeapLiveBytes
    } else {
        kernel_primary(fits, scope)
    }
}

/// The kernel's metric a scope is judged by: resident anonymous memory
/// (RssAnon, what heap leaks grow), else RSS on kernels without the split.
///
/// Not PSS or USS: both move whenever *other* processes map or unmap the
/// same files (a page is private only while no one else maps it), and the
/// rank-based trend test turns even a small such drift into a false trend
/// or hides a real plateau. RssAnon is also blind to copy-on-write
/// unsharing (a page counts in RSS whether shared or not), which is not a
/// leak. Shared-memory leaks are caught by `shmem_bytes`, judged beside it.
/// (`command` has only its RSS peak series: see `series::build`.)
pub fn kernel_primary(fits: &[SeriesFit], scope: Scope) -> Metric {
    let has_anon = fits
        .iter()
        .any(|f| f.scope == scope && f.metric == Metric::AnonBytes && f.n >= 2);
    if has_anon {
        Metric::AnonBytes
    } else {
        Metric::RssBytes
    }
}

/// The metric whose warm-up and path (troughs or mean) `metric` follows in
/// its scope: the heap's for the heap's metrics, the kernel primary's for
/// the others, before they are fitted.
fn family_primary(series: &[Series], scope: Scope, metric: Metric) -> Metric {
    if metric.is_heap() {
        return Metric::HeapLiveBytes;
    }
    let has_anon = series
        .iter()
        .any(|s| s.scope == scope && s.metric == Metric::AnonBytes && s.points.len() >= 2);
    if has_anon {
        Metric::AnonBytes
    } else {
        Metric::RssBytes
    }
}

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

/// The overall verdict: the primary series' (the worst over the followed
/// scopes' private memory), or a leak where shmem, fds, threads or kernel
/// memory judged beside it leak; the command's own peak only when nothing
/// else is followed. A side series that cannot tell (a server's fd count
/// moving with its connections) is shown beside the primary, not put in
/// its place. Workers that leak while they live make the tree leak, even
/// when recycling keeps the tree's total flat. Every verdict folded here was
/// decided by `verdict::decide` on its own estimate (the workers' pooled
/// rate or task steps: `findings::workers::leak`); this only takes the worst.
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
    let followed = || fits.iter().filter(|f| f.scope != Scope::Command);
    // Beside a runtime's heap, its anon (or RSS) too: memory outside the
    // heap (direct buffers, thread stacks, native libraries) leaks as well.
    let beside = |f: &SeriesFit| {
        f.metric.judged_beside_primary()
            || (primary_metric(fits, f.scope) == Metric::HeapLiveBytes
                && f.metric == kernel_primary(fits, f.scope))
    };
    if followed().any(|f| beside(f) && f.verdict == Verdict::Leak) {
        return Verdict::Leak;
    }
    let judged = followed()
        .filter(|f| f.metric == primary_metric(fits, f.scope))
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

/// The command's peak per run, where some runs were over before the command could be read
/// (`/bin/true` is, nine runs in ten): those runs are no points, so the rerun that would
/// decide it asks for that many more runs, and the reason says why (it asked for
/// `--repeat 4` of a command read once in 10 runs).
fn unseen_runs(f: &mut SeriesFit, runs: &[RunRecord]) {
    let unseen = runs.iter().filter(|r| r.peak_rss_bytes.is_none()).count();
    let (total, seen) = (runs.len(), runs.len() - unseen);
    if f.x != XAxis::Run || unseen == 0 || seen == 0 {
        return;
    }
    f.reason
        .asides
        .push(verdict::reason::Aside::UnseenRuns { unseen, total });
    f.runs_needed = f
        .runs_needed
        .map(|k| (k * total).div_ceil(seen).min(verdict::MAX_RUNS_NEEDED));
}

/// A live heap is seen only after its collector ran (`sample::heap`): of
/// the samples of its heap (`used`, one per sample), those that followed a
/// collection are its points. An undecided live heap says so, and the rerun
/// that would decide it asks for the samples that give the points it lacks;
/// without a collection in the window it says that nothing is known of what
/// the program keeps, beside what the heap in use did.
fn seen_at_collections(f: &mut SeriesFit, used: &SeriesFit) {
    let (points, samples) = (f.n, used.n);
    if points >= samples || f.verdict != Verdict::Inconclusive {
        return;
    }
    if points <= 1 {
        f.reason.reading = verdict::reason::Reading::NoCollection { in_use: used.slope };
        f.reason.clauses.clear();
        f.reason.asides.clear();
        f.runs_needed = None;
        return;
    }
    f.reason
        .asides
        .push(verdict::reason::Aside::SeenAtCollections { points, samples });
    // Over time the rerun is already read at the points' own pace.
    if f.x == XAxis::Run {
        f.runs_needed = f
            .runs_needed
            .map(|k| (k * samples).div_ceil(points).min(verdict::MAX_RUNS_NEEDED));
    }
}

/// The analysis of everything samples.csv held.
pub fn analyse(mut samples: Samples, opts: &FitOptions) -> Analysis {
    // What a JVM's old generation promoted bounds its live heap's fit; it is not a series of
    // its own (judged, charted or reported): its growth between full collections is normal.
    let (promoted, series): (Vec<Series>, Vec<Series>) = std::mem::take(&mut samples.series)
        .into_iter()
        .partition(|s| s.metric == Metric::HeapPromotedBytes);
    samples.series = series;
    let mut scopes: Vec<Scope> = samples.series.iter().map(|s| s.scope).collect();
    scopes.dedup();
    // One warm-up per scope and family (the kernel's metrics, a runtime's
    // heap), found on the family's primary metric, so every metric of a
    // process tree leaves out the same first fill; and that primary's path
    // (troughs or mean) for every byte metric of its family: one series,
    // one story.
    let families = family_fits(
        &samples.series,
        &promoted,
        &samples.histograms,
        &scopes,
        opts,
    );
    let mut fits = fits_by_family(&samples.series, &samples.histograms, &families);
    explain_missing_points(&mut fits, &samples.runs, samples.target_ended);
    let headline = headlines(&fits, &scopes);
    let attribution = attributions(&fits, &headline, &samples);
    let heap = heap::read(&fits, &samples.heap_sources);
    let tree = findings::analyse(&samples, &scopes, opts.budget_bytes);
    let verdict = overall_verdict(&fits, &headline, &tree);
    let projection = headline_projection(&fits, &headline, &tree, opts);
    let site_fits = sites::fit_sites(&samples.sites, &fits, &tree.findings);
    Analysis {
        options: *opts,
        sites: site_fits,
        types: sites::fit_types(&samples.types),
        py_overhead: samples.py_overhead,
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
        target: samples.target,
        labels: samples.labels,
        sampling: samples.sampling,
        heap,
        gauge_name: samples.gauge_name,
    }
}

/// A family's scope, primary metric, warm-up (points) and the fit of that primary.
type FamilyFit = (Scope, Metric, usize, SeriesFit);

/// Each scope's families (kernel metrics, runtime heap) fitted on their primary metric,
/// bounded by what was read beside it (`bound_of`).
fn family_fits(
    series: &[Series],
    promoted: &[Series],
    histograms: &[Induced],
    scopes: &[Scope],
    opts: &FitOptions,
) -> Vec<FamilyFit> {
    scopes
        .iter()
        .flat_map(|&scope| {
            [
                Metric::HeapLiveBytes,
                family_primary(series, scope, Metric::RssBytes),
            ]
            .map(|m| (scope, m))
        })
        .filter_map(|(scope, metric)| {
            let s = series
                .iter()
                .find(|s| s.scope == scope && s.metric == metric)?;
            let k = warmup_of(s, opts);
            let bound = bound_of(s, promoted, histograms);
            Some((scope, metric, k, fit_bounded(s, k, None, bound)))
        })
        .collect()
}

/// Every series fitted with its family's warm-up and, for bytes, its family's path; the
/// kernel's memory bounded by what leakwatch's class histograms grew it by.
fn fits_by_family(
    series: &[Series],
    histograms: &[Induced],
    families: &[FamilyFit],
) -> Vec<SeriesFit> {
    series
        .iter()
        .map(|s| {
            let primary = family_primary(series, s.scope, s.metric);
            let family = families.iter().find(|p| p.0 == s.scope && p.1 == primary);
            if let Some(p) = family.filter(|p| p.1 == s.metric) {
                // Fitted once, in `family_fits`.
                return p.3.clone();
            }
            let k = family.map_or(0, |p| p.2);
            let path = family
                .filter(|_| s.metric.is_bytes())
                .map(|p| p.3.decided_by == DecidedBy::Troughs);
            fit_bounded(s, k, path, bound_of(s, &[], histograms))
        })
        .collect()
}

/// An attached target that exited ended the session: a `--duration` past its
/// life cannot be had, so an undecided series of it says so instead.
fn ended_early(fits: &mut [SeriesFit], after: f64) {
    for f in fits
        .iter_mut()
        .filter(|f| f.scope == Scope::Target && f.runs_needed.is_some())
    {
        f.runs_needed = None;
        f.reason
            .asides
            .push(verdict::reason::Aside::TargetEnded { after });
    }
}

/// Points the command, an attached target that exited (`target_ended`, s) or a live heap
/// could not have: said in its reason and its rerun.
fn explain_missing_points(fits: &mut [SeriesFit], runs: &[RunRecord], target_ended: Option<f64>) {
    for f in fits.iter_mut().filter(|f| f.scope == Scope::Command) {
        unseen_runs(f, runs);
    }
    if let Some(after) = target_ended {
        ended_early(fits, after);
    }
    let used: Vec<SeriesFit> = fits
        .iter()
        .filter(|f| f.metric == Metric::HeapUsedBytes)
        .cloned()
        .collect();
    for f in fits
        .iter_mut()
        .filter(|f| f.metric == Metric::HeapLiveBytes)
    {
        if let Some(u) = used.iter().find(|u| u.scope == f.scope) {
            seen_at_collections(f, u);
        }
    }
}

/// Which kind of memory grows in each headline scope but the command's.
fn attributions(fits: &[SeriesFit], headline: &[usize], samples: &Samples) -> Vec<Attribution> {
    // The kernel's view, also of a scope judged by its runtime's heap.
    headline
        .iter()
        .filter_map(|&i| fits.get(i))
        .filter(|f| f.scope != Scope::Command)
        .filter_map(|f| {
            fits.iter()
                .find(|k| k.scope == f.scope && k.metric == kernel_primary(fits, f.scope))
        })
        .map(|f| attribution::attribute(f, fits, samples))
        .collect()
}

/// The first headline scope's RSS, or its headline series, projected to `--limit` and `--budget`.
fn headline_projection(
    fits: &[SeriesFit],
    headline: &[usize],
    tree: &findings::TreeFindings,
    opts: &FitOptions,
) -> Option<Projection> {
    // Recycle advice for a pool's workers supersedes the whole tree's.
    let project_opts = FitOptions {
        budget_bytes: opts.budget_bytes.filter(|_| tree.recycle.is_empty()),
        ..*opts
    };
    headline.first().and_then(|&i| fits.get(i)).and_then(|f| {
        let rss = fits
            .iter()
            .find(|r| r.scope == f.scope && r.metric == Metric::RssBytes)
            .unwrap_or(f);
        project(rss, f.verdict, &project_opts)
    })
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

    /// A JVM attached a minute with `--jvm-classes` whose anon rose only during leakwatch's
    /// class histograms (a first step of 576 KiB, then 4 KiB every other one, as a healthy
    /// Parallel JVM's did; docs/runtimes.md) is no leak by its anon or RSS; where the
    /// histograms grew a tenth of a steady rise, the rise is still a leak. Spoiled events are
    /// left out; run mode's show from the next run.
    #[test]
    fn what_leakwatchs_histograms_grew_is_not_the_programs_leak() {
        use crate::store::{HISTOGRAM_ANON_EVENT, Row, Tier};
        let session = |anon: &dyn Fn(u64) -> u64, induced: &dyn Fn(u64) -> Option<i64>| {
            let mut rows = Vec::new();
            for t in 0..61u64 {
                rows.push(Row {
                    sample: t,
                    t_seconds: t as f64,
                    pid: 7,
                    tier: Tier::Cheap,
                    anon_bytes: Some(anon(t)),
                    rss_bytes: Some(anon(t) + 20_000_000),
                    ..Row::new(Scope::Target)
                });
                if let Some(grew) = induced(t) {
                    rows.push(Row {
                        sample: t,
                        t_seconds: t as f64 + 0.5,
                        pid: 7,
                        tier: Tier::Event,
                        event: Some(format!("{HISTOGRAM_ANON_EVENT} {grew}")),
                        ..Row::new(Scope::Target)
                    });
                }
            }
            rows.push(Row {
                tier: Tier::Event,
                event: Some(format!("{HISTOGRAM_ANON_EVENT} 12 KiB")),
                ..Row::new(Scope::Target)
            });
            analyse(crate::series::from_rows(rows), &FitOptions::default())
        };
        let judged = |a: &Analysis, metric: Metric| {
            let f = a
                .fits
                .iter()
                .find(|f| f.scope == Scope::Target && f.metric == metric)
                .unwrap();
            (f.verdict, f.end_rate, f.reason.to_string())
        };
        // The histograms, answered after the samples at 0, 2, 4 …: each shows in the next.
        let steps = |t: u64| 589_824 * u64::from(t >= 1) + 4096 * (t.saturating_sub(1) / 2);
        let healthy = session(&|t| 290_000_000 + steps(t), &|t| {
            (t % 2 == 0 && t < 60).then_some(if t == 0 { 589_824 } else { 4096 })
        });
        for metric in [Metric::AnonBytes, Metric::RssBytes] {
            let (verdict, end, reason) = judged(&healthy, metric);
            assert_ne!(verdict, Verdict::Leak, "{metric:?}: {reason}");
            if let Some(end) = end.filter(|e| e.ci95.1 > 0.0) {
                assert!(end.ci95.0 <= 0.0, "{metric:?}: {end:?} {reason}");
            }
        }
        assert_ne!(healthy.verdict, Verdict::Leak);
        let leaking = session(&|t| 290_000_000 + 40_960 * t, &|t| {
            (t % 2 == 0 && t < 60).then_some(8192)
        });
        let (verdict, end, reason) = judged(&leaking, Metric::AnonBytes);
        assert_eq!(verdict, Verdict::Leak, "{reason}");
        assert!(
            end.unwrap()
                .widened_by
                .contains(verdict::Widening::Histograms)
        );
        // Run mode: the histogram after run k shows from run k + 1.
        let runs: Vec<Row> = (1..=3u32)
            .map(|run| Row {
                run: Some(run),
                tier: Tier::Event,
                event: Some(format!("{HISTOGRAM_ANON_EVENT} -4096")),
                ..Row::new(Scope::Target)
            })
            .collect();
        let h = crate::series::from_rows(runs).histograms;
        assert_eq!(
            h[0].points,
            vec![(1.5, -4096.0), (2.5, -8192.0), (3.5, -12288.0)]
        );
        assert_eq!(h[0].upto(3.0) - h[0].upto(1.0), -8192.0);
    }

    /// A command read in 2 runs of 10 (the others over before it could be read): the rerun
    /// that would decide its peak asks for the runs that give the points it lacks, and the
    /// reason says why.
    #[test]
    fn a_command_seen_in_few_runs_asks_for_runs_not_points() {
        let series = Series {
            scope: Scope::Command,
            metric: Metric::RssBytes,
            x_axis: XAxis::Run,
            count: 2,
            points: vec![(1.0, 1e6), (6.0, 1e6)],
            processes: 1,
        };
        let runs: Vec<RunRecord> = (1..=10)
            .map(|run| RunRecord {
                run,
                pid: 100 + run,
                exit_code: Some(0),
                status: "exit:0".into(),
                duration_s: Some(0.001),
                peak_rss_bytes: [1, 6].contains(&run).then_some(1_000_000),
                peak_bound_bytes: None,
            })
            .collect();
        let mut f = fit(&series, 0);
        assert_eq!((f.verdict, f.runs_needed), (Verdict::Inconclusive, Some(4)));
        unseen_runs(&mut f, &runs);
        assert_eq!(f.runs_needed, Some(20));
        assert!(
            f.reason.to_string().ends_with("in 8 of 10 runs"),
            "{}",
            f.reason
        );
    }

    /// The overall verdict is the primary series' (anon): a server's fd
    /// count that moves with its connections cannot put "inconclusive" in
    /// the place of stable memory; an fd leak still makes it a leak.
    #[test]
    fn the_overall_verdict_is_the_primarys_unless_a_side_series_leaks() {
        let series = |metric: Metric, y: &dyn Fn(f64) -> f64| Series {
            scope: Scope::Target,
            metric,
            x_axis: XAxis::Run,
            count: 20,
            points: (1..=20).map(|r| (f64::from(r), y(f64::from(r)))).collect(),
            processes: 1,
        };
        let anon = fit(&series(Metric::AnonBytes, &|_| 50.0 * 1024.0 * 1024.0), 0);
        let wobble = [9.0, 12.0, 8.0, 13.0, 9.0];
        let fds = fit(&series(Metric::Fds, &|r| wobble[r as usize % 5]), 0);
        let leaking = fit(&series(Metric::Fds, &|r| 9.0 + r), 0);
        assert_eq!(
            (anon.verdict, fds.verdict, leaking.verdict),
            (Verdict::Stable, Verdict::Inconclusive, Verdict::Leak)
        );
        let tree = findings::TreeFindings {
            findings: vec![],
            trees: vec![],
            recycle: vec![],
        };
        let overall = |fits: &[SeriesFit]| overall_verdict(fits, &[0], &tree);
        assert_eq!(overall(&[anon.clone(), fds]), Verdict::Stable);
        assert_eq!(overall(&[anon, leaking]), Verdict::Leak);
    }

    /// The fixture's fill, then a slower leak: the verdict says its rate is
    /// the last segment's, the CI is that segment's line's, the gate judges
    /// that, and summary.json names it.
    #[test]
    fn the_rate_says_which_estimate_it_is() {
        const KIB: f64 = 1024.0;
        const MIB: f64 = 1024.0 * KIB;
        let points = (1..=30)
            .map(|r: i32| {
                let r = f64::from(r);
                let y =
                    12.2 * MIB + 4.0 * MIB * (r - 1.0).min(7.0) + 512.0 * KIB * (r - 8.0).max(0.0);
                (r, y)
            })
            .collect();
        let s = Series {
            scope: Scope::Command,
            metric: Metric::AnonBytes,
            x_axis: XAxis::Run,
            count: 30,
            points,
            processes: 1,
        };
        let f = fit(&s, 0);
        assert_eq!(
            (f.verdict, f.rate_from),
            (Verdict::Leak, Some(RateFrom::EndSegment))
        );
        let (lo, hi) = f.rate_ci95.unwrap();
        assert!(lo <= 512.0 * KIB && 512.0 * KIB <= hi, "{:?}", f.rate_ci95);
        assert!(f.slope.unwrap() > 1.2 * 512.0 * KIB, "{:?}", f.slope);
        assert_eq!(f.judged_rate(), (f.rate, f.rate_ci95));
        let json = serde_json::to_value(crate::summary::Series::of(&f)).unwrap();
        assert_eq!(json["end_rate"]["from"], "end_segment");
        assert_eq!(json["end_rate"]["rate"], f.rate.unwrap());
    }
}
