//! `leakwatch attach`: sample a running process and its descendants over
//! time. The cheap tier every tick; the deep tier (smaps_rollup, a page-table
//! walk under the target's mmap lock) only while its cost stays within a
//! budget fraction of wall time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::proc::{ProcRoot, Stat};
use super::reaper::Interrupt;
use super::targets::{Members, Target, TargetError};
use super::{
    Clock, Context, Outcome, Progress, ResolveError, SampleError, event_row, mapping_rows,
    sample_scope,
};
use crate::store::{Row, SampleWriter, Scope};
use crate::units::{format_bytes, format_duration};

const SCOPE: Scope = Scope::Target;

/// What to attach to and how, as the user asked.
#[derive(Debug, Clone)]
pub struct AttachPlan {
    /// A PID, a name pattern, a cgroup or a unit; `check_target` resolves it.
    pub target: Target,
    pub interval: Duration,
    /// Stop after this long; `None`: when the target exits or on Ctrl-C.
    pub duration: Option<Duration>,
    /// Fraction of wall time (0.001 = 0.1%) the deep reads may take.
    pub deep_budget: f64,
}

/// Resolves the target (a name to its PID, a unit to its cgroup) and checks
/// that a PID is a live user process, before any output exists.
pub fn check_target(plan: &AttachPlan) -> Result<AttachPlan, TargetError> {
    let target = super::targets::resolve(&plan.target)?;
    if let Target::Pid(pid) = target {
        check_pid(pid)?;
    }
    Ok(AttachPlan {
        target,
        ..plan.clone()
    })
}

fn check_pid(pid: u32) -> Result<(), ResolveError> {
    let root = ProcRoot::default();
    if !root.alive(pid) {
        return Err(ResolveError::NoSuchProcess { what: "PID", pid });
    }
    if let Ok(status) = root.status(pid)
        && status.rss_bytes.is_none()
    {
        return Err(ResolveError::KernelThread {
            pid,
            name: status.name,
        });
    }
    Ok(())
}

/// Sampling intervals are drawn uniformly within ±30% of `--interval` (the
/// mean stays the interval): a workload that cycles with the interval's
/// period (a GC every second, sampled every second) would otherwise be seen
/// at the same phase every time — always at its peak, or always at its
/// trough — and its saw-tooth would alias into a false trend.
const JITTER: f64 = 0.3;

fn jittered(interval: Duration, rng: &mut fastrand::Rng) -> Duration {
    interval.mul_f64(1.0 - JITTER + 2.0 * JITTER * rng.f64())
}

/// Decides when a deep read is affordable: after the first, only while the
/// total time spent in deep reads stays under `budget` × elapsed time.
pub struct DeepBudget {
    budget: f64,
    spent: Duration,
    last_cost: Duration,
    started: Instant,
}

impl DeepBudget {
    pub fn new(budget: f64) -> Self {
        DeepBudget {
            budget,
            spent: Duration::ZERO,
            last_cost: Duration::ZERO,
            started: Instant::now(),
        }
    }

    pub fn allows(&self) -> bool {
        let elapsed = self.started.elapsed().as_secs_f64();
        let next = (self.spent + self.last_cost).as_secs_f64();
        self.spent.is_zero() || next <= self.budget * elapsed
    }

    pub fn record(&mut self, cost: Duration) {
        self.spent += cost;
        self.last_cost = cost;
    }
}

/// One `attach` session and what it has seen so far.
struct Session<'a> {
    plan: &'a AttachPlan,
    /// Which processes each tick samples (and a cgroup's own row).
    members: Members,
    /// The process attached to; for a cgroup or `--name --all`, a stand-in.
    target: Stat,
    writer: &'a mut SampleWriter,
    progress: &'a Progress,
    root: ProcRoot,
    clock: Clock,
    outcome: Outcome,
    budget: DeepBudget,
    started: Instant,
    last_progress: Instant,
    /// (pid, start time) → comm, for "started"/"exited" events of descendants.
    known: BTreeMap<(u32, u64), String>,
    denied_noted: bool,
    unreadable_noted: BTreeSet<u32>,
    /// How often the sampling rate was halved to bound samples.csv.
    halvings: u32,
    /// The newest mapping snapshot, written only if the target exits before
    /// the final one can be taken (so attribution still has an end point).
    latest_maps: Vec<Row>,
}

pub fn attach(
    plan: &AttachPlan,
    writer: &mut SampleWriter,
    interrupt: &Interrupt,
    progress: &Progress,
) -> Result<Outcome, SampleError> {
    let root = ProcRoot::default();
    let members = Members::new(&plan.target);
    let target = match members.leader() {
        Some(pid) => root
            .stat(pid)
            .map_err(|error| SampleError::Target { pid, error })?,
        None => Stat {
            comm: members.describe().unwrap_or_default(),
            state: 'R',
            ppid: 0,
            start_time: 0,
        },
    };
    if let Some(what) = members.describe() {
        writer.write_batch(&[crate::store::note_row("target", &what)])?;
    }
    let mut session = Session {
        plan,
        members,
        target,
        writer,
        progress,
        root,
        clock: Clock::new(),
        outcome: Outcome::default(),
        budget: DeepBudget::new(plan.deep_budget),
        started: Instant::now(),
        last_progress: Instant::now(),
        known: BTreeMap::new(),
        denied_noted: false,
        unreadable_noted: BTreeSet::new(),
        halvings: 0,
        latest_maps: Vec::new(),
    };
    let mut rng = fastrand::Rng::new();
    loop {
        let done = plan
            .duration
            .is_some_and(|d| session.started.elapsed() >= d)
            || interrupt.is_set();
        let ctx = session.clock.context(None);
        if !session.target_alive(&ctx)? {
            break;
        }
        session.tick(&ctx, done)?;
        if done {
            session.outcome.interrupted = interrupt.is_set();
            break;
        }
        let wait = jittered(session.interval(), &mut rng);
        let wait = match plan.duration {
            Some(d) => wait.min(d.saturating_sub(session.started.elapsed())),
            None => wait,
        };
        interrupt.sleep(wait);
    }
    Ok(session.outcome)
}

/// samples.csv's rows before a long session starts sampling at half the
/// rate, and again after as many more: a session of any length writes
/// `ROWS_PER_HALVING` rows per doubling of its length, not rows in
/// proportion to it (a day at 1 s on 100 processes: ≈1.4 M rows, not 8.6 M).
const ROWS_PER_HALVING: u64 = 1_000_000;

impl Session<'_> {
    /// The mean interval now: `--interval`, doubled for each
    /// `ROWS_PER_HALVING` rows written (noted the first time).
    fn interval(&mut self) -> Duration {
        let halvings = (self.writer.rows_written() / ROWS_PER_HALVING).min(16) as u32;
        if halvings > self.halvings {
            self.halvings = halvings;
            let now = self.halved(halvings);
            self.outcome.notes.push(format!(
                "samples.csv reached {} rows after {}: sampling every {} from then on \
                 (the rate halves every {} rows, so a long session stays bounded)",
                self.writer.rows_written(),
                format_duration(self.started.elapsed()),
                format_duration(now),
                ROWS_PER_HALVING
            ));
        }
        self.halved(self.halvings)
    }

    fn halved(&self, halvings: u32) -> Duration {
        self.plan
            .interval
            .saturating_mul(2u32.pow(halvings))
            .min(crate::units::MAX_DURATION)
    }

    /// Whether the target is still the process attached to; when it exited
    /// or its pid was reused, records that (and the last mapping snapshot).
    fn target_alive(&mut self, ctx: &Context) -> Result<bool, SampleError> {
        let Some(pid) = self.members.leader() else {
            return self.group_alive(ctx);
        };
        let (event, comm, note) = match self.root.stat(pid) {
            Ok(s) if s.state != 'Z' && s.start_time == self.target.start_time => return Ok(true),
            Ok(s) if s.start_time != self.target.start_time => {
                let note = format!(
                    "target {pid} exited and its pid was reused by '{}'; sampling stopped",
                    s.comm
                );
                ("pid_reused", s.comm, note)
            }
            _ => {
                let note = format!(
                    "target {pid} ({}) exited after {}; sampling stopped",
                    self.target.comm,
                    format_duration(self.started.elapsed())
                );
                ("exited", self.target.comm.clone(), note)
            }
        };
        self.writer
            .write_batch(&[event_row(ctx, SCOPE, pid, &comm, event, None)])?;
        self.outcome.notes.push(note);
        // The last snapshot taken, filed now (samples.csv stays in order).
        let maps: Vec<Row> = self
            .latest_maps
            .drain(..)
            .map(|r| Row {
                sample: ctx.sample,
                t_seconds: ctx.t_seconds,
                timestamp: ctx.timestamp.clone(),
                ..r
            })
            .collect();
        self.writer.write_batch(&maps)?;
        Ok(false)
    }

    /// A cgroup or `--name --all` target: alive until the cgroup is removed
    /// or nothing matches any more.
    fn group_alive(&mut self, ctx: &Context) -> Result<bool, SampleError> {
        let Some(note) = self.members.ended(&self.root) else {
            return Ok(true);
        };
        let comm = self.target.comm.clone();
        self.writer
            .write_batch(&[event_row(ctx, SCOPE, 0, &comm, "exited", None)])?;
        self.outcome.notes.push(note);
        Ok(false)
    }

    /// One sample of the tree: cheap, or deep when the budget allows (the
    /// last sample is always deep, so PSS/USS have an end point).
    fn tick(&mut self, ctx: &Context, done: bool) -> Result<(), SampleError> {
        let deep = self.budget.allows() || done;
        let tree = self.members.pids(&self.root, std::process::id());
        let t0 = Instant::now();
        let (mut rows, unreadable, denied) = sample_scope(&self.root, ctx, SCOPE, &tree, deep);
        self.note_unreadable(unreadable);
        // Mappings at the first and the last sample, for attribution; in
        // between, a snapshot with each deep sample, held back in case the
        // target exits (smaps costs the same walk: it counts in the budget).
        if ctx.sample == 0 || done {
            rows.extend(mapping_rows(&self.root, ctx, SCOPE, &tree));
        } else if deep {
            self.latest_maps = mapping_rows(&self.root, ctx, SCOPE, &tree);
        }
        if deep {
            self.budget.record(t0.elapsed());
        }
        self.note_denied(&denied);
        rows.extend(tree_events(ctx, &rows, &mut self.known));
        rows.extend(self.members.own_rows(ctx));
        self.writer.write_batch(&rows)?;
        self.show_progress(&rows, tree.len());
        Ok(())
    }

    fn note_unreadable(&mut self, unreadable: Vec<(u32, String)>) {
        for (pid, why) in unreadable {
            if self.unreadable_noted.insert(pid) {
                self.outcome.notes.push(format!(
                    "process {pid} left out of the target's series: {why}"
                ));
            }
        }
    }

    fn note_denied(&mut self, denied: &[u32]) {
        if !denied.is_empty() && !self.denied_noted {
            self.denied_noted = true;
            self.outcome.notes.push(format!(
                "no PSS/USS for process(es) {denied:?}: smaps_rollup needs ptrace-read access \
                 (run leakwatch as the target's user or as root); RSS is still sampled"
            ));
        }
    }

    /// The bar's status every tick; a log line every 10 s without a terminal.
    fn show_progress(&mut self, rows: &[Row], processes: usize) {
        let rss: u64 = rows
            .iter()
            .filter(|r| r.is_process_sample())
            .filter_map(|r| r.rss_bytes)
            .sum();
        let status = format!(
            "{}: {processes} process(es), RSS {}",
            format_duration(self.started.elapsed()),
            format_bytes(rss as f64)
        );
        self.progress.status(&status);
        if !self.progress.is_interactive()
            && self.last_progress.elapsed() >= Duration::from_secs(10)
        {
            self.last_progress = Instant::now();
            self.progress.line(&status);
        }
    }
}

/// Events for descendants that appeared or disappeared since the last sample
/// (worker recycling shows as one pid ending and another starting).
fn tree_events(ctx: &Context, rows: &[Row], known: &mut BTreeMap<(u32, u64), String>) -> Vec<Row> {
    let first = known.is_empty();
    let now: BTreeMap<(u32, u64), String> = rows
        .iter()
        .filter(|r| r.is_process_sample())
        .map(|r| ((r.pid, r.start_time), r.comm.clone()))
        .collect();
    let mut events = Vec::new();
    for ((pid, _), comm) in known.iter().filter(|(k, _)| !now.contains_key(k)) {
        events.push(event_row(ctx, SCOPE, *pid, comm, "exited", None));
    }
    if !first {
        for ((pid, _), comm) in now.iter().filter(|(k, _)| !known.contains_key(k)) {
            events.push(event_row(ctx, SCOPE, *pid, comm, "started", None));
        }
    }
    *known = now;
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_jittered_around_the_asked_one() {
        let mut rng = fastrand::Rng::with_seed(7);
        let base = Duration::from_millis(500);
        let waits: Vec<f64> = (0..2000)
            .map(|_| jittered(base, &mut rng).as_secs_f64())
            .collect();
        assert!(waits.iter().all(|&w| (0.35..=0.65).contains(&w)));
        let mean = waits.iter().sum::<f64>() / waits.len() as f64;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
        // Spread over the whole band, not a few values.
        assert!(waits.iter().any(|&w| w < 0.37) && waits.iter().any(|&w| w > 0.63));
    }
}
