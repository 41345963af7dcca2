//! Where in the code (`run --py-sites`): each Python allocation site's growth
//! per run, fitted and judged like every other series — the lines that
//! leak, the ones that grew once and stopped — and the share of their
//! scope's anonymous-memory growth they explain.

use serde::{Deserialize, Serialize};

use super::findings::Finding;
use super::findings::workers::leaking_steps;
use super::{MIN_SLOPE_BYTES, SeriesFit, verdict};
use crate::series::sites::SiteSeries;
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

fn thresholds() -> verdict::Thresholds {
    verdict::Thresholds {
        display_unit: XAxis::Run.rate_unit(),
        display_scale: 1.0,
        min_slope_abs: MIN_SLOPE_BYTES,
        ..verdict::Thresholds::default()
    }
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
    let (xs, ys): (Vec<f64>, Vec<f64>) = s.points.iter().copied().unzip();
    let mut c = verdict::classify(&xs, &ys, Some(0), &thresholds());
    let steps = (s.lives.len() > 1)
        .then(|| leaking_steps(&s.lives, MIN_SLOPE_BYTES))
        .flatten();
    if let Some(st) = steps {
        c.verdict = verdict::Verdict::Leak;
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
