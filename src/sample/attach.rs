//! `leakwatch attach`: sample a running process and its descendants over
//! time. The cheap tier every tick; the deep tier (smaps_rollup, a page-table
//! walk under the target's mmap lock) only while its cost stays within a
//! budget fraction of wall time.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::proc::ProcRoot;
use super::reaper::Interrupt;
use super::{Clock, Outcome, Progress, SampleError, event_row, mapping_rows, sample_scope};
use crate::options::AttachOptions;
use crate::series::store::{Row, SampleWriter};
use crate::units::{format_bytes, format_duration};

const SCOPE: &str = "target";

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

pub fn attach(
    opts: &AttachOptions,
    writer: &mut SampleWriter,
    interrupt: &Interrupt,
    progress: &Progress,
) -> Result<Outcome, SampleError> {
    let root = ProcRoot::default();
    let target = root.stat(opts.pid).map_err(|source| SampleError::Target {
        pid: opts.pid,
        source,
    })?;
    let mut clock = Clock::new();
    let mut outcome = Outcome::default();
    let mut budget = DeepBudget::new(opts.deep_budget);
    // (pid, start time) → comm, for "started"/"exited" events of descendants.
    let mut known: BTreeMap<(u32, u64), String> = BTreeMap::new();
    let started = Instant::now();
    let mut last_progress = Instant::now();
    let mut denied_noted = false;
    let mut unreadable_noted = std::collections::BTreeSet::new();
    // The newest mapping snapshot, written only if the target exits before
    // the final one can be taken (so attribution still has an end point).
    let mut latest_maps: Vec<Row> = Vec::new();

    loop {
        let done = opts.duration.is_some_and(|d| started.elapsed() >= d) || interrupt.is_set();
        let ctx = clock.context(None);
        match root.stat(opts.pid) {
            Ok(s) if s.state != 'Z' && s.start_time == target.start_time => {}
            Ok(s) if s.start_time != target.start_time => {
                writer.write_batch(&[event_row(
                    &ctx,
                    SCOPE,
                    opts.pid,
                    &s.comm,
                    "pid_reused",
                    None,
                )])?;
                outcome.notes.push(format!(
                    "target {} exited and its pid was reused by '{}'; sampling stopped",
                    opts.pid, s.comm
                ));
                writer.write_batch(&latest_maps)?;
                break;
            }
            _ => {
                writer.write_batch(&[event_row(
                    &ctx,
                    SCOPE,
                    opts.pid,
                    &target.comm,
                    "exited",
                    None,
                )])?;
                outcome.notes.push(format!(
                    "target {} ({}) exited after {}; sampling stopped",
                    opts.pid,
                    target.comm,
                    format_duration(started.elapsed())
                ));
                writer.write_batch(&latest_maps)?;
                break;
            }
        }

        // The last sample is always deep, so PSS/USS have an end point.
        let deep = budget.allows() || done;
        let tree = root.tree_without(opts.pid, Some(std::process::id()));
        let t0 = Instant::now();
        let (mut rows, unreadable, denied) = sample_scope(&root, &ctx, SCOPE, &tree, deep);
        for (pid, why) in unreadable {
            if unreadable_noted.insert(pid) {
                outcome.notes.push(format!(
                    "process {pid} left out of the target's series: {why}"
                ));
            }
        }
        // Mappings at the first and the last sample, for attribution; in
        // between, a snapshot with each deep sample, held back in case the
        // target exits (smaps costs the same walk: it counts in the budget).
        if ctx.sample == 0 || done {
            rows.extend(mapping_rows(&root, &ctx, SCOPE, &tree));
        } else if deep {
            latest_maps = mapping_rows(&root, &ctx, SCOPE, &tree);
        }
        if deep {
            budget.record(t0.elapsed());
        }
        if !denied.is_empty() && !denied_noted {
            denied_noted = true;
            outcome.notes.push(format!(
                "no PSS/USS for process(es) {denied:?}: smaps_rollup needs ptrace-read access \
                 (run leakwatch as the target's user or as root); RSS is still sampled"
            ));
        }
        rows.extend(tree_events(&ctx, &rows, &mut known));
        let rss: u64 = rows
            .iter()
            .filter(|r| r.is_process_sample())
            .filter_map(|r| r.rss_bytes)
            .sum();
        writer.write_batch(&rows)?;

        let status = format!(
            "{}: {} process(es), RSS {}",
            format_duration(started.elapsed()),
            tree.len(),
            format_bytes(rss as f64)
        );
        progress.status(&status);
        if !progress.is_interactive() && last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            progress.line(&status);
        }
        if done {
            outcome.interrupted = interrupt.is_set();
            break;
        }
        let wait = match opts.duration {
            Some(d) => opts.interval.min(d.saturating_sub(started.elapsed())),
            None => opts.interval,
        };
        interrupt.sleep(wait);
    }
    Ok(outcome)
}

/// Events for descendants that appeared or disappeared since the last sample
/// (worker recycling shows as one pid ending and another starting).
fn tree_events(
    ctx: &super::Context,
    rows: &[Row],
    known: &mut BTreeMap<(u32, u64), String>,
) -> Vec<Row> {
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
