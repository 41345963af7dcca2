//! Where in the code (`run --py-sites`): each Python allocation site's growth
//! per run, fitted and judged like every other series — the lines that
//! leak, the ones that grew once and stopped — and the share of their
//! scope's anonymous-memory growth they explain. And which types grow: each
//! Python type's live objects (count and bytes) per run, through the same
//! fits, verdicts and per-task pooling as the sites.

use serde::{Deserialize, Serialize};

use super::findings::Finding;
use super::findings::workers::{TaskSteps, leaking_steps};
use super::{MIN_SLOPE_BYTES, SeriesFit, verdict};
use crate::series::sites::{SiteSeries, TypeSeries, UNTRACKED};
use crate::series::{Metric, XAxis};
use crate::store::Scope;
use crate::units::format_signed_bytes;

/// Sites kept in the report and summary.json (leaks first).
const MAX_SITES: usize = 50;
/// A site that holds this much without growing is listed (a warm-up, a
/// cache filled at the first run).
const HELD_BYTES: u64 = 1 << 20;

/// One allocation site, judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteFit {
    pub scope: Scope,
    /// `file:line` of the innermost user frame.
    pub site: String,
    pub verdict: verdict::Verdict,
    /// Growth per run pooled over the scope's processes, bytes, with its CI.
    pub bytes_per_run: Option<f64>,
    pub bytes_per_run_ci95: Option<(f64, f64)>,
    /// In a pool (several processes hold it): growth per task a process
    /// handled, with its CI, and how many such steps were seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_task: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_task_ci95: Option<(f64, f64)>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tasks_seen: usize,
    pub reason: String,
    /// What it holds in the processes that answered last, bytes.
    pub held_bytes: u64,
    pub processes: usize,
    /// Its largest traceback, innermost frame first.
    pub traceback: Vec<String>,
    /// Its growth as a share of the scope's anonymous-memory growth (a leak
    /// of both), 0–1; tracemalloc sees Python's allocators only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_of_anon: Option<f64>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `min_slope_abs` per run: bytes for sites and type sizes, objects for
/// type counts.
fn thresholds(min_slope_abs: f64) -> verdict::Thresholds {
    verdict::Thresholds {
        display_unit: XAxis::Run.rate_unit(),
        display_scale: 1.0,
        min_slope_abs,
        ..verdict::Thresholds::default()
    }
}

/// A series of sites or types judged: by its own points, or per task when
/// several processes hold it (a pool), like worker leaks: idle runs and a
/// recycled worker's unsampled last task neither dilute nor cancel it.
fn judge(s: &SiteSeries, min_slope_abs: f64) -> (verdict::Classification, Option<TaskSteps>) {
    let (xs, ys): (Vec<f64>, Vec<f64>) = s.points.iter().copied().unzip();
    let mut c = verdict::classify(&xs, &ys, Some(0), &thresholds(min_slope_abs));
    let steps = (s.lives.len() > 1)
        .then(|| leaking_steps(&s.lives, min_slope_abs))
        .flatten();
    if steps.is_some() {
        c.verdict = verdict::Verdict::Leak;
    }
    (c, steps)
}

/// Fits every site; leaks fastest first, then what grew and stopped, then
/// what holds much without growing.
pub fn fit_sites(sites: &[SiteSeries], fits: &[SeriesFit], found: &[Finding]) -> Vec<SiteFit> {
    let mut out: Vec<SiteFit> = sites.iter().map(|s| fit_site(s, fits, found)).collect();
    // Leaks and plateaus; anything else only when it holds much (a
    // warm-up, a cache) — a site seen once or twice says nothing.
    out.retain(|s| {
        matches!(
            s.verdict,
            verdict::Verdict::Leak | verdict::Verdict::Plateau
        ) || s.held_bytes >= HELD_BYTES
    });
    out.sort_by(|a, b| {
        b.verdict
            .cmp(&a.verdict)
            .then(
                b.bytes_per_run
                    .unwrap_or(0.0)
                    .total_cmp(&a.bytes_per_run.unwrap_or(0.0)),
            )
            .then(b.held_bytes.cmp(&a.held_bytes))
    });
    out.truncate(MAX_SITES);
    out
}

/// A site several processes hold (a pool) is judged per task, like worker
/// leaks: idle runs and a recycled worker's unsampled last task neither
/// dilute nor cancel it. One process's site is judged by its series.
fn fit_site(s: &SiteSeries, fits: &[SeriesFit], found: &[Finding]) -> SiteFit {
    let (mut c, steps) = judge(s, MIN_SLOPE_BYTES);
    if let Some(st) = steps {
        c.reason = format!(
            "grows {} per task in {} processes ({} tasks seen), still late in their lives",
            format_signed_bytes(st.per_task),
            s.lives.len(),
            st.steps
        );
    }
    let rate = c.rate.or(c.fit.as_ref().map(|f| f.slope));
    let ci = c.fit.as_ref().and_then(|f| f.slope_ci95);
    let anon = fits
        .iter()
        .find(|f| f.scope == s.scope && f.metric == Metric::AnonBytes)
        .and_then(|f| f.rate.or(f.slope))
        .filter(|&r| r > 0.0);
    // Per task against the workers' own growth per task; per run against
    // the scope's.
    let worker_task = found.iter().find_map(|f| match f {
        Finding::Leak {
            scope,
            bytes_per_task: Some(t),
            ..
        } if *scope == s.scope => Some(*t),
        _ => None,
    });
    let share = match (c.verdict, steps, rate, anon) {
        (verdict::Verdict::Leak, Some(st), _, _) => worker_task.map(|w| (st.per_task / w).min(1.5)),
        (verdict::Verdict::Leak, None, Some(r), Some(a)) if r > 0.0 => Some((r / a).min(1.5)),
        _ => None,
    };
    SiteFit {
        scope: s.scope,
        site: s.site.clone(),
        verdict: c.verdict,
        bytes_per_run: rate,
        bytes_per_run_ci95: ci,
        bytes_per_task: steps.map(|s| s.per_task),
        bytes_per_task_ci95: steps.map(|s| s.ci),
        tasks_seen: steps.map_or(0, |s| s.steps),
        reason: c.reason,
        held_bytes: s.last_bytes,
        processes: s.processes,
        traceback: s
            .traceback
            .as_deref()
            .map(|t| t.lines().map(String::from).collect())
            .unwrap_or_default(),
        share_of_anon: share,
    }
}

/// Growth below half an object per run is none; one more object every run,
/// for ever, is a leak (the mean level's 0.1% per run applies as well: a
/// type with 250,000 dicts must gain 250 a run).
pub const MIN_SLOPE_OBJECTS: f64 = 0.5;
/// Types kept in the report and summary.json (leaks first).
const MAX_TYPES: usize = 50;
/// A type with this many live objects is listed without growing (the
/// largest types, objgraph's `most_common_types`).
const HELD_OBJECTS: u64 = 10_000;

/// One Python type's live objects, judged by their count; their bytes
/// (`sys.getsizeof`) are judged beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TypeFit {
    pub scope: Scope,
    /// Module-qualified class name (`logging.LogRecord`; builtins bare;
    /// `(untracked)`: what tracemalloc traces beyond the tracked objects).
    #[serde(rename = "type")]
    pub name: String,
    /// The count's verdict.
    pub verdict: verdict::Verdict,
    /// Objects gained per run pooled over the scope's processes, with CI.
    pub objects_per_run: Option<f64>,
    pub objects_per_run_ci95: Option<(f64, f64)>,
    /// In a pool: objects gained per task a process handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects_per_task: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects_per_task_ci95: Option<(f64, f64)>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tasks_seen: usize,
    /// The bytes' verdict and growth, bytes per run (per task in a pool).
    pub bytes_verdict: verdict::Verdict,
    pub bytes_per_run: Option<f64>,
    pub bytes_per_run_ci95: Option<(f64, f64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_task: Option<f64>,
    pub reason: String,
    /// Live objects and their bytes in the processes that answered last.
    pub objects: u64,
    pub held_bytes: u64,
    pub processes: usize,
}

impl TypeFit {
    /// A class of some module: it names code (`logging.LogRecord`), where
    /// `dict` or `(untracked)` name none.
    pub fn names_code(&self) -> bool {
        self.name.contains('.') && self.name != UNTRACKED
    }

    /// Objects per task in a pool, else per run.
    fn growth(&self) -> f64 {
        self.objects_per_task
            .or(self.objects_per_run)
            .unwrap_or(0.0)
    }
}

/// Fits every type; leaks first (classes of a module before builtins at
/// the same verdict: they name the code, as `Parser` did beside `dict` in
/// pantsd's table), fastest first; then what grew and stopped; then the
/// largest.
pub fn fit_types(types: &[TypeSeries]) -> Vec<TypeFit> {
    let mut out: Vec<TypeFit> = types.iter().map(fit_type).collect();
    out.retain(|t| {
        matches!(
            t.verdict,
            verdict::Verdict::Leak | verdict::Verdict::Plateau
        ) || t.objects >= HELD_OBJECTS
            || t.held_bytes >= HELD_BYTES
    });
    out.sort_by(|a, b| {
        b.verdict
            .cmp(&a.verdict)
            .then(b.names_code().cmp(&a.names_code()))
            .then(b.growth().total_cmp(&a.growth()))
            .then(b.objects.cmp(&a.objects))
    });
    out.truncate(MAX_TYPES);
    out
}

fn fit_type(t: &TypeSeries) -> TypeFit {
    let (mut c, steps) = judge(&t.count, MIN_SLOPE_OBJECTS);
    let pool = t.count.lives.len() > 1;
    if pool && steps.is_none() && c.verdict == verdict::Verdict::Leak {
        // A pool is judged per task (as its workers are): a total that grows
        // while no task leaves objects behind late in its worker's life is
        // what each new worker makes once at its start, summed over the
        // recycled ones — a few objects, where a site's 64 KiB floor hides
        // the same. Not a leak the per-task estimate shows.
        c.verdict = verdict::Verdict::Inconclusive;
        c.runs_needed = None;
    }
    let (b, byte_steps) = judge(&t.bytes, MIN_SLOPE_BYTES);
    let rate = c.rate.or(c.fit.as_ref().map(|f| f.slope));
    let ci = c.fit.as_ref().and_then(|f| f.slope_ci95);
    TypeFit {
        scope: t.count.scope,
        name: t.count.site.clone(),
        verdict: c.verdict,
        objects_per_run: rate,
        objects_per_run_ci95: ci,
        objects_per_task: steps.map(|s| s.per_task),
        objects_per_task_ci95: steps.map(|s| s.ci),
        tasks_seen: steps.map_or(0, |s| s.steps),
        bytes_verdict: b.verdict,
        bytes_per_run: b.rate.or(b.fit.as_ref().map(|f| f.slope)),
        bytes_per_run_ci95: b.fit.as_ref().and_then(|f| f.slope_ci95),
        bytes_per_task: byte_steps.map(|s| s.per_task),
        reason: count_reason(&c, steps, rate, ci, t.count.lives.len(), pool),
        objects: t.count.last_bytes,
        held_bytes: t.bytes.last_bytes,
        processes: t.count.processes,
    }
}

/// The count's verdict in objects (the classifier words its reasons in
/// bytes). The series counts objects gained since a type was first seen.
fn count_reason(
    c: &verdict::Classification,
    steps: Option<TaskSteps>,
    rate: Option<f64>,
    ci: Option<(f64, f64)>,
    lives: usize,
    pool: bool,
) -> String {
    let show = |ci: Option<(f64, f64)>| {
        ci.map(|(lo, hi)| format!(" (95% CI {lo:+.1} … {hi:+.1})"))
            .unwrap_or_default()
    };
    match (c.verdict, steps) {
        (verdict::Verdict::Leak, Some(st)) => format!(
            "gains {:+.1} objects per task{} in {lives} processes ({} tasks seen), still late \
             in their lives",
            st.per_task,
            show(Some(st.ci)),
            st.steps
        ),
        (verdict::Verdict::Leak, None) => format!(
            "gains {:+.1} objects/run{}, still at the end",
            rate.unwrap_or(0.0),
            show(ci)
        ),
        (verdict::Verdict::Plateau, _) => match &c.plateau {
            Some(p) => format!(
                "gained {:.0} objects, then held from run {:.0}",
                p.level, p.stop_x
            ),
            None => "grew, then held".into(),
        },
        (verdict::Verdict::Stable, _) => format!(
            "no growth beyond {MIN_SLOPE_OBJECTS} objects/run{}",
            show(ci)
        ),
        (verdict::Verdict::Inconclusive, _) if pool && c.runs_needed.is_none() => format!(
            "the pool's {lives} processes gain {:+.1} objects/run in all, but no task leaves \
             objects behind late in its worker's life (made once per worker?)",
            rate.unwrap_or(0.0)
        ),
        (verdict::Verdict::Inconclusive, _) => match c.runs_needed {
            Some(n) => format!("too few or too noisy runs to tell; --repeat {n} would decide"),
            None => "too few or too noisy runs to tell".into(),
        },
    }
}
