//! Per-series statistics, verdicts, attribution and projection. Pure
//! functions on plain data; nothing here reads /proc or writes files.

pub mod attribution;
pub mod changepoint;
pub mod envelope;
pub mod findings;
pub mod stats;
pub mod verdict;

use serde::{Deserialize, Serialize};

use crate::series::store::Row;
use crate::series::{self, Metric, RunRecord, Series, XAxis};
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
#[derive(Debug, Clone, Serialize)]
pub struct SeriesFit {
    pub name: String,
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
    pub intercept: Option<f64>,
    /// x distance from the first fitted point to the last (runs or seconds).
    pub x_span: f64,
    /// Mean of the fitted points: the level relative rates are taken of.
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
    let per_bucket = series.points.len().div_ceil(points.len().max(1)).max(1);
    let warmup = opts.warmup.map(|k| k.div_ceil(per_bucket));
    let c = verdict::classify(&xs, &ys, warmup, &thresholds(series));
    // The verdict may stop before fitting (too few points); the slope and
    // its CI are still worth reporting.
    let warm = c.warmup.min(xs.len());
    let own_fit = c.fit.or_else(|| stats::ols(&xs[warm..], &ys[warm..]));
    let line = own_fit.as_ref();
    SeriesFit {
        name: series.name.clone(),
        metric: series.metric,
        x: series.x_axis,
        n: series.points.len(),
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

/// How bad a verdict is, for picking the headline: leak first.
pub fn severity(v: Verdict) -> u8 {
    match v {
        Verdict::Leak => 3,
        Verdict::Inconclusive => 2,
        Verdict::Plateau => 1,
        Verdict::Stable => 0,
    }
}

/// When the main series reaches `--limit`, and when to recycle under `--budget`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Projection {
    pub series: String,
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
        series: main.name.clone(),
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
    /// The CI gate's result, when limits were given (set after the fit).
    pub gate: Option<crate::gate::GateResult>,
    pub interrupted: bool,
    pub notes: Vec<String>,
}

impl Analysis {
    pub fn mode(&self) -> &'static str {
        if self.command_line.is_some() {
            "run"
        } else {
            "attach"
        }
    }

    pub fn fit_of(&self, name: &str, metric: Metric) -> Option<&SeriesFit> {
        self.fits
            .iter()
            .find(|f| f.name == name && f.metric == metric)
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
pub fn primary_metric(fits: &[SeriesFit], scope: &str) -> Metric {
    let has_anon = fits
        .iter()
        .any(|f| f.name == scope && f.metric == Metric::AnonBytes && f.n >= 2);
    if has_anon {
        Metric::AnonBytes
    } else {
        Metric::RssBytes
    }
}

/// Metrics judged beside the primary one for the overall verdict.
const ALSO_JUDGED: [Metric; 3] = [Metric::ShmemBytes, Metric::Fds, Metric::Threads];

/// Notes for processes left behind that exited on their own (a daemon that
/// crashed mid-way): the first five, then a count.
fn survivor_exits(rows: &[Row]) -> Vec<String> {
    const SHOWN: usize = 5;
    let exits: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let how = r.event.as_deref()?.strip_prefix("exited ")?;
            (r.scope == "survivors").then(|| {
                format!(
                    "survivor {} exited ({how}) during run {}",
                    r.pid,
                    r.run.unwrap_or(0)
                )
            })
        })
        .collect();
    let more = exits.len().saturating_sub(SHOWN);
    let mut notes: Vec<String> = exits.into_iter().take(SHOWN).collect();
    if more > 0 {
        notes.push(format!(
            "… and {more} more processes left behind exited on their own"
        ));
    }
    notes
}

pub fn analyse(rows: &[Row], opts: &FitOptions) -> Analysis {
    let series = series::build(rows);
    let fits: Vec<SeriesFit> = series.iter().map(|s| fit(s, opts)).collect();
    let runs = series::runs(rows, &series);
    let command_line = rows
        .iter()
        .find(|r| r.event.as_deref() == Some("run_start"))
        .map(|r| r.comm.clone());
    let target_pid = if command_line.is_none() {
        rows.iter().find(|r| r.scope == "target").map(|r| r.pid)
    } else {
        None
    };

    // One headline per scope, in scope order (survivors, pid:…, target, command).
    let mut headline = Vec::new();
    for scope in series::scopes(rows) {
        let metric = primary_metric(&fits, &scope);
        if let Some(i) = fits
            .iter()
            .position(|f| f.name == scope && f.metric == metric)
        {
            headline.push(i);
        }
    }
    // The overall verdict: the worst over the followed processes' private
    // memory, shmem, fds and threads; the command's own peak only when
    // nothing else is followed.
    let judged: Vec<&SeriesFit> = fits
        .iter()
        .filter(|f| f.name != "command")
        .filter(|f| f.metric == primary_metric(&fits, &f.name) || ALSO_JUDGED.contains(&f.metric))
        .collect();
    let verdict = if judged.is_empty() {
        headline
            .iter()
            .filter_map(|&i| fits.get(i))
            .map(|f| f.verdict)
            .max_by_key(|v| severity(*v))
    } else {
        judged
            .iter()
            .map(|f| f.verdict)
            .max_by_key(|v| severity(*v))
    }
    .unwrap_or(Verdict::Inconclusive);

    let attribution = headline
        .iter()
        .filter_map(|&i| fits.get(i))
        .filter(|f| f.name != "command")
        .map(|f| attribution::attribute(f, &fits, rows))
        .collect();
    let scope_names = series::scopes(rows);
    let (findings, trees, recycle) = findings::analyse(
        rows,
        &scope_names,
        series::x_axis_of(rows),
        opts.budget_bytes,
    );
    // Workers that leak while they live make the tree leak, even when
    // recycling keeps the tree's total flat.
    let verdict = if findings
        .iter()
        .any(|f| matches!(f, findings::Finding::Leak { .. }))
    {
        Verdict::Leak
    } else {
        verdict
    };

    // Recycle advice for a pool's workers supersedes the whole tree's.
    let project_opts = FitOptions {
        budget_bytes: opts.budget_bytes.filter(|_| recycle.is_empty()),
        ..*opts
    };
    let projection = headline.first().and_then(|&i| fits.get(i)).and_then(|f| {
        let rss = fits
            .iter()
            .find(|r| r.name == f.name && r.metric == Metric::RssBytes)
            .unwrap_or(f);
        project(rss, f.verdict, &project_opts)
    });

    // Session rows (notes) carry no time; the span is that of the samples.
    let timed = || {
        rows.iter()
            .filter(|r| r.scope != "leakwatch")
            .map(|r| r.t_seconds)
    };
    let (t0, t1) = (
        timed().fold(f64::INFINITY, f64::min),
        timed().fold(f64::NEG_INFINITY, f64::max),
    );
    let session = |event: &'static str| {
        rows.iter()
            .filter(move |r| r.scope == "leakwatch" && r.event.as_deref() == Some(event))
    };
    Analysis {
        options: *opts,
        series,
        fits,
        runs,
        command_line,
        target_pid,
        duration_s: if t1 >= t0 { t1 - t0 } else { 0.0 },
        verdict,
        headline,
        attribution,
        projection,
        findings,
        trees,
        recycle,
        gate: None,
        interrupted: session("interrupted").next().is_some(),
        notes: session("note")
            .map(|r| r.comm.clone())
            .chain(survivor_exits(rows))
            .collect(),
    }
}
