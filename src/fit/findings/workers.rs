//! Workers of a pool: the ones that ended while sampled (recycled), a leak
//! within each worker's life pooled over workers, and recycle advice.

use super::{Finding, RecycleAdvice};
use crate::fit::verdict::{EndRate, RateFrom, Verdict, decide};
use crate::fit::{MIN_SLOPE_BYTES, stats};
use crate::series::{Metric, ProcessLife, XAxis};
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
    for w in workers.iter().filter(|w| w.last_x < last_x_overall) {
        out.push(Finding::Recycled {
            scope,
            pid: w.pid,
            comm: w.comm.clone(),
            first_x: w.first_x,
            last_x: w.last_x,
            last_rss_bytes: w.last_rss_bytes,
            x,
        });
    }
    out
}

/// Growth steps of workers, one per task handled: in run mode a worker that
/// handled a task in a run grows in that run, one that sat idle does not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TaskSteps {
    /// Mean step, bytes per task, with its 95% CI (Student t).
    pub per_task: f64,
    pub ci: (f64, f64),
    /// Steps seen, and how many of them came in the later half of their
    /// worker's observed life.
    pub steps: usize,
    pub late: usize,
    /// Steps that were not their worker's first (a worker that stepped
    /// again), and steps in the later half of the whole session.
    pub repeats: usize,
    pub session_late: usize,
}

/// The steps up between consecutive runs of each worker that stand clear
/// of the noise: more than `floor` and than 5 robust sd of the idle runs'
/// changes. None unless at least three steps
/// are seen and the workers' net growth accounts for at least half of them
/// (steps that fall back again are churn, not tasks leaving memory behind).
pub(crate) fn task_steps(lives: &[Vec<(f64, f64)>], floor: f64) -> Option<TaskSteps> {
    // (change, in the later half of its worker's changes, x, worker).
    let mut deltas: Vec<(f64, bool, f64, usize)> = Vec::new();
    let mut net = 0.0;
    let xs = lives.iter().flatten().map(|p| p.0);
    let (first_x, last_x) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    let session_mid = (first_x + last_x) / 2.0;
    for (worker, pts) in lives.iter().enumerate().filter(|(_, p)| p.len() >= 2) {
        let n = pts.len() - 1;
        for (i, w) in pts.windows(2).enumerate() {
            deltas.push((w[1].1 - w[0].1, 2 * i >= n, w[1].0, worker));
        }
        net += pts[n].1 - pts[0].1;
    }
    // The noise of idle runs, from the changes down (steps are all up; as
    // many idle changes go up as down): half-normal median → sd.
    let mut down: Vec<f64> = deltas.iter().filter(|d| d.0 < 0.0).map(|d| -d.0).collect();
    let noise = 1.4826 * stats::median(&mut down).unwrap_or(0.0);
    let clear = floor.max(5.0 * noise);
    let steps: Vec<(f64, bool, f64, usize)> = deltas.into_iter().filter(|d| d.0 > clear).collect();
    let workers_stepping = steps
        .iter()
        .map(|d| d.3)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let total: f64 = steps.iter().map(|d| d.0).sum();
    if steps.len() < 3 || net < 0.5 * total {
        return None;
    }
    let ys: Vec<f64> = steps.iter().map(|d| d.0).collect();
    let mean = stats::mean(&ys)?;
    let k = ys.len() as f64;
    let sd = (ys.iter().map(|y| (y - mean).powi(2)).sum::<f64>() / (k - 1.0)).sqrt();
    let half = stats::student_t_quantile(0.975, k - 1.0) * sd / k.sqrt();
    Some(TaskSteps {
        per_task: mean,
        ci: (mean - half, mean + half),
        steps: steps.len(),
        late: steps.iter().filter(|d| d.1).count(),
        repeats: steps.len() - workers_stepping,
        session_late: steps.iter().filter(|d| d.2 > session_mid).count(),
    })
}

/// Task steps that make a leak: at least three, their CI above the
/// threshold, and still coming: a quarter of them at least in the later
/// half of their workers' lives, or — a pool whose workers take their tasks
/// early and idle until recycled — a quarter of them a worker's second or
/// later step and a quarter in the later half of the session. What either
/// rules out is growth that stops in every worker: a first task's one-off
/// allocation (no worker steps twice) or a cache each worker fills early
/// and keeps (no step late in a life, nor in the session).
pub(crate) fn leaking_steps(lives: &[Vec<(f64, f64)>], threshold: f64) -> Option<TaskSteps> {
    let steps = task_steps(lives, threshold)?;
    let late_in_lives = steps.late * 4 >= steps.steps && steps.late >= 1;
    let again_and_late = steps.repeats * 4 >= steps.steps && steps.session_late * 4 >= steps.steps;
    let end = EndRate::new(RateFrom::TaskSteps, steps.per_task, steps.ci);
    let leaks = decide(&end, threshold, true) == Verdict::Leak;
    (leaks && (late_in_lives || again_and_late)).then_some(steps)
}

/// A leak in the workers: growth within each worker's life, pooled over
/// workers (recycled ones included), significant and above the practical
/// threshold, and still going late in the workers' lives — a one-off step
/// (a task's first allocation, a cache) is not a leak.
///
/// Run mode judges the steps a worker takes when it handles a task (see
/// `task_steps`): idle runs in between, and the last task a recycled worker
/// runs before it exits unsampled, neither dilute nor cancel it. Over time
/// the pooled slope must also hold in the later half of each life.
/// Growth is RssAnon (what a heap leak grows; blind to copy-on-write), RSS
/// where a kernel lacks it.
pub(super) fn leak(scope: Scope, workers: &[&ProcessLife], x: XAxis) -> Option<Finding> {
    let series: Vec<Vec<(f64, f64)>> = workers.iter().map(|w| w.heap_points()).collect();
    let threshold = MIN_SLOPE_BYTES / x.per_rate_unit();
    let (slope, ci) = stats::pooled_slope(&series)?;
    let steps = match x {
        XAxis::Run => Some(leaking_steps(&series, threshold)?),
        XAxis::Seconds => {
            let tails: Vec<Vec<(f64, f64)>> =
                series.iter().map(|p| p[p.len() / 2..].to_vec()).collect();
            let still_growing =
                stats::pooled_slope(&tails).is_some_and(|(_, tail_ci)| tail_ci.0 > slope / 2.0);
            let end = EndRate::new(RateFrom::PooledLives, slope, ci);
            if !(decide(&end, threshold, true) == Verdict::Leak && still_growing) {
                return None;
            }
            None
        }
    };
    let mut fresh: Vec<f64> = workers
        .iter()
        .filter_map(|w| w.points(Metric::RssBytes)?.first().map(|p| p.1))
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
        bytes_per_task: steps.map(|s| s.per_task),
        bytes_per_task_ci95: steps.map(|s| s.ci),
        tasks_seen: steps.map_or(0, |s| s.steps),
    })
}

/// After how many tasks (or runs, or seconds) a fresh worker reaches
/// `budget` at the leak's rate.
pub(super) fn recycle_advice(leak: &Finding, budget: u64) -> Option<RecycleAdvice> {
    let Finding::Leak {
        scope,
        bytes_per_x,
        x,
        fresh_rss_bytes,
        bytes_per_task,
        ..
    } = leak
    else {
        return None;
    };
    let rate = bytes_per_task.unwrap_or(*bytes_per_x);
    let after = ((budget as f64 - fresh_rss_bytes) / rate).floor().max(0.0);
    Some(RecycleAdvice {
        scope: *scope,
        budget_bytes: budget,
        recycle_after_x: after,
        x: *x,
        per_task: bytes_per_task.is_some(),
        restarts_per_100_x: if after > 0.0 { 100.0 / after } else { 100.0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1024.0 * 1024.0;

    /// A worker life over runs `from..`: +`step` MiB in the runs where
    /// `handled` says it ran a task, small noise otherwise.
    fn life(from: u32, handled: &[bool], step: f64) -> Vec<(f64, f64)> {
        let mut y = 50.0 * MIB;
        let mut out = vec![(f64::from(from), y)];
        for (i, &h) in handled.iter().enumerate() {
            y += if h {
                step * MIB
            } else {
                [4096.0, -4096.0, 0.0][i % 3]
            };
            out.push((f64::from(from) + i as f64 + 1.0, y));
        }
        out
    }

    #[test]
    fn idle_runs_and_unsampled_last_tasks_do_not_hide_a_per_task_leak() {
        // Two gunicorn-like workers taking turns, each recycled after 5 tasks
        // (the 5th is never sampled): +1 MiB per task handled.
        let turns = [true, false, true, false, true, false, true, false];
        let lives = vec![
            life(1, &turns, 1.0),
            life(2, &turns, 1.0),
            life(10, &turns, 1.0),
            life(11, &turns, 1.0),
        ];
        let s = task_steps(&lives, 64.0 * 1024.0).unwrap();
        assert!((s.per_task - MIB).abs() < 1.0, "{s:?}");
        assert_eq!((s.steps, s.late), (16, 8));
        // Per run of the pool it reads as about half that.
        let (per_run, _) = stats::pooled_slope(&lives).unwrap();
        assert!(per_run < 0.6 * MIB, "{per_run}");
    }

    #[test]
    fn growth_in_the_first_tasks_only_is_early_not_late() {
        let warm = [true, true, false, false, false, false, false, false];
        let lives = vec![life(1, &warm, 3.0), life(2, &warm, 3.0)];
        let s = task_steps(&lives, 64.0 * 1024.0).unwrap();
        assert_eq!(s.late, 0, "{s:?}");
        // Both stepped twice, but only at the session's start: a cache.
        assert_eq!(s.repeats, 2, "{s:?}");
        assert_eq!(leaking_steps(&lives, 64.0 * 1024.0), None);
    }

    #[test]
    fn workers_stepping_early_then_idling_until_recycled_still_leak() {
        // Recycled workers that each take three tasks at once and then idle:
        // no step late in any life, but every worker steps again and new
        // workers keep stepping to the session's end.
        let busy = [true, true, true, false, false, false, false, false];
        let lives: Vec<_> = (0..4).map(|k| life(1 + 8 * k, &busy, 1.0)).collect();
        let s = leaking_steps(&lives, 64.0 * 1024.0).unwrap();
        assert_eq!(s.late, 0, "{s:?}");
        assert_eq!(s.repeats, 8, "{s:?}");
        // A one-off first-task step in each recycled worker is no leak.
        let once = [true, false, false, false, false, false, false, false];
        let lives: Vec<_> = (0..4).map(|k| life(1 + 8 * k, &once, 1.0)).collect();
        assert_eq!(leaking_steps(&lives, 64.0 * 1024.0), None);
    }

    #[test]
    fn churn_that_falls_back_is_not_tasks() {
        // Up 2 MiB, down 2 MiB, again and again: no net growth.
        let pts: Vec<(f64, f64)> = (0..12)
            .map(|i| (f64::from(i), if i % 2 == 0 { 50.0 } else { 52.0 } * MIB))
            .collect();
        assert_eq!(task_steps(&[pts], 64.0 * 1024.0), None);
    }
}
