//! `leakwatch attach`: sample a running process and its descendants over
//! time. The cheap tier every tick (`tree::Tree`, at the kernel's floor);
//! the deep tier (a page-table walk per process under its mmap lock) at the
//! first and last sample and while its cost stays within a budget fraction
//! of wall time, across the whole tree; none at all with a budget of 0.
//! What it cost — ticks, the interval achieved, walks, the longest walk —
//! is recorded for the summary.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

use nix::time::{ClockId, clock_gettime};

use super::heap::{Heaps, MetricsEndpoint};
use super::lifecycle::reaper::Interrupt;
use super::procfs::{Depth, ProcRoot, Stat};
use super::rows::{Clock, Context, event_row};
use super::sites::enter::Stop;
use super::sites::jvm::JvmClasses;
use super::sites::native::NativeAttached;
use super::sites::python::attach::PyAttached;
use super::targets::{self, Members, Target, TargetError};
use super::tree::{DeepPass, Member, TargetState, Tree, Walk};
use super::{Outcome, ResolveError, SampleError, Scoped, sample_scope};
use crate::console::Progress;
use crate::store::{self, LongestWalk, Row, SampleWriter, SamplingCost, Scope, Tier};
use crate::units::{format_bytes, format_duration, format_signed_bytes};

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
    /// `--max-samples`: the rows samples.csv may hold.
    pub max_rows: Option<u64>,
    /// `--native-sites`: load the sampling allocator shim into the PID,
    /// sampling once per this many bytes.
    pub native_sites: Option<u64>,
    /// `--py-sites`: run the Python bootstrap in the PID, tracing this many
    /// frames per allocation.
    pub py_sites: Option<usize>,
    /// `--metrics URL`: a followed process's own metrics endpoint.
    pub metrics: Option<String>,
    /// `--metric NAME`: a gauge of that endpoint followed as a series.
    pub gauge: Option<String>,
    /// `--node-inspector`: read Node processes' heaps through their inspector.
    pub node_inspector: bool,
    /// `--jvm-classes`: ask the JVMs followed for their class histograms,
    /// within a pause budget.
    pub jvm_classes: bool,
    /// `--js-sites`: V8's sampling heap profiler in the inspected Node
    /// processes, one sample per this many bytes on average.
    pub js_sites: Option<u64>,
    /// Where the processes are read: /proc, or a fake tree in a test.
    pub root: ProcRoot,
}

/// Resolves the target (a name to its PID, a unit to its cgroup) and checks
/// that a PID is a live user process, before any output exists.
pub fn check_target(plan: &AttachPlan) -> Result<AttachPlan, TargetError> {
    let target = targets::resolve(&plan.target, &plan.root)?;
    if let Target::Pid(pid) = target {
        check_pid(&plan.root, pid)?;
    }
    Ok(AttachPlan {
        target,
        ..plan.clone()
    })
}

fn check_pid(root: &ProcRoot, pid: u32) -> Result<(), ResolveError> {
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
/// total time spent in deep reads stays under `budget` × elapsed time. A
/// budget of 0 turns the deep tier off.
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

    /// Whether page walks are allowed at all (`--deep-budget` above 0).
    pub fn is_on(&self) -> bool {
        self.budget > 0.0
    }

    pub fn allows(&self) -> bool {
        let elapsed = self.started.elapsed().as_secs_f64();
        let next = (self.spent + self.last_cost).as_secs_f64();
        self.is_on() && (self.spent.is_zero() || next <= self.budget * elapsed)
    }

    pub fn record(&mut self, cost: Duration) {
        self.spent += cost;
        self.last_cost = cost;
    }
}

/// Most processes whose mappings (`smaps`) a deep pass reads; the others
/// get `smaps_rollup` (the same one walk, no per-mapping detail). At the
/// first pass: the target and the largest by RSS. Later: those of the first
/// still running, then the largest started since (all their mappings are
/// growth since the first snapshot), at least `MAPPED_NEW` of them.
const MAPPED_MAX: usize = 32;
const MAPPED_NEW: usize = 8;
/// Processes named one by one in the "left out" note, before a count.
const NOTED_MAX: usize = 32;

/// What is followed: one process with its descendants (`Tree`, at the
/// kernel's floor), or a group — a cgroup's processes, every match of a
/// name — read afresh each tick.
enum Followed {
    Tree {
        pid: u32,
        tree: Tree,
    },
    Group {
        root: ProcRoot,
        /// (pid, start time) → comm at the last tick, for started/exited events.
        known: BTreeMap<(u32, u64), String>,
        ticks: u64,
    },
}

/// One `attach` session and what it has seen so far.
struct Session<'a> {
    plan: &'a AttachPlan,
    target: Stat,
    writer: &'a mut SampleWriter,
    progress: &'a Progress,
    followed: Followed,
    members: Members,
    clock: Clock,
    outcome: Outcome,
    budget: DeepBudget,
    cost: CostMeter,
    started: Instant,
    last_progress: Instant,
    /// Whether the start line (what is sampled, where reports go) was said.
    start_said: bool,
    denied_noted: bool,
    /// Processes noted as unreadable (at most `NOTED_MAX`, then a count).
    unreadable_noted: BTreeSet<u32>,
    unreadable_more: bool,
    /// How often the sampling rate was halved to bound samples.csv.
    halvings: u32,
    /// `--max-samples`: how often samples.csv was thinned, and the rows
    /// written before it may be again (thinning that frees little must
    /// not run every tick).
    thinnings: u32,
    thin_after_rows: u64,
    /// (pid, start time) of the processes whose mappings the first deep
    /// pass read.
    mapped_first: BTreeSet<(u32, u64)>,
    /// The newest mapping snapshot, written only if the target exits before
    /// the final one can be taken (so attribution still has an end point).
    latest_maps: Vec<Row>,
    /// `--native-sites`: the shim loaded into the target.
    native: Option<&'a mut NativeAttached>,
    /// `--py-sites`: the Python bootstrap run in the target.
    python: Option<&'a mut PyAttached>,
    /// The heaps the followed processes' runtimes count, read every tick.
    heaps: Heaps,
    /// `--jvm-classes`: the JVMs' class histograms.
    classes: Option<JvmClasses>,
}

/// Samples the target until it exits, `plan.duration` passes or an
/// interrupt; with `native` (`--native-sites`, the shim already loaded into
/// the target) its sites too, and the shim stops sampling at the end; with
/// `python` (`--py-sites`, the bootstrap already running in the target) its
/// Python sites and types, and it stops tracing at the end.
pub fn attach(
    plan: &AttachPlan,
    native: Option<&mut NativeAttached>,
    python: Option<&mut PyAttached>,
    writer: &mut SampleWriter,
    interrupt: &Interrupt,
    progress: &Progress,
) -> Result<Outcome, SampleError> {
    let root = plan.root.clone();
    let members = Members::new(&plan.target);
    let (target, followed) = match members.leader() {
        Some(pid) => {
            let target = root
                .stat(pid)
                .map_err(|error| SampleError::Target { pid, error })?;
            let tree = Tree::new(root, pid, Some(std::process::id()))
                .map_err(|error| SampleError::Target { pid, error })?;
            (target, Followed::Tree { pid, tree })
        }
        None => {
            let target = Stat {
                comm: members.describe().unwrap_or_default(),
                state: 'R',
                ppid: 0,
                start_time: 0,
            };
            let group = Followed::Group {
                root,
                known: BTreeMap::new(),
                ticks: 0,
            };
            (target, group)
        }
    };
    if let Some(what) = members.describe() {
        writer.write_batch(&[store::note_row(store::SessionEvent::Target, &what)])?;
    }
    let heaps = heaps(plan)?;
    let mut session = Session {
        plan,
        target,
        writer,
        progress,
        followed,
        members,
        clock: Clock::new(),
        outcome: Outcome::default(),
        budget: DeepBudget::new(plan.deep_budget),
        cost: CostMeter::new(plan),
        started: Instant::now(),
        last_progress: Instant::now(),
        start_said: false,
        denied_noted: false,
        unreadable_noted: BTreeSet::new(),
        unreadable_more: false,
        halvings: 0,
        thinnings: 0,
        thin_after_rows: 0,
        mapped_first: BTreeSet::new(),
        latest_maps: Vec::new(),
        native,
        python,
        heaps,
        classes: plan
            .jvm_classes
            .then(|| JvmClasses::new(plan.root.clone(), false)),
    };
    session.native_started()?;
    session.python_started()?;
    let mut rng = fastrand::Rng::new();
    // Ticks are due at fixed (jittered) times, not a fixed wait after each
    // sweep: a slow sweep shortens the next wait instead of shifting every
    // later sample, and a sweep longer than the interval makes the next
    // tick late (counted and noted) rather than silently dropping ticks.
    let mut due = Instant::now();
    loop {
        let done = plan
            .duration
            .is_some_and(|d| session.started.elapsed() >= d)
            || interrupt.is_set();
        session.heaps.ask();
        let ctx = session.clock.context(None);
        session.cost.tick(due);
        if !session.tick(&ctx, done)? {
            break;
        }
        session.hold_rows()?;
        if done {
            session.outcome.interrupted = interrupt.is_set();
            break;
        }
        due += jittered(session.interval(), &mut rng);
        let now = Instant::now();
        if now > due {
            session.behind(now - due);
            due = now;
        }
        let wait = due - now;
        let wait = match plan.duration {
            Some(d) => wait.min(d.saturating_sub(session.started.elapsed())),
            None => wait,
        };
        wait_for(wait, interrupt);
    }
    if let Some(native) = session.native.as_deref() {
        native.stop();
    }
    if let Some(python) = session.python.as_deref() {
        python.detach();
    }
    session.finish()?;
    Ok(session.outcome)
}

/// The heaps read every tick: with `--node-inspector` (full collections
/// within a budget) and `--metrics` where asked.
fn heaps(plan: &AttachPlan) -> Result<Heaps, SampleError> {
    let mut heaps = Heaps::new(plan.root.clone()).with_wait(endpoint_wait(plan.interval));
    if plan.node_inspector {
        heaps = heaps.with_node_inspector(false);
        if let Some(interval) = plan.js_sites {
            heaps = heaps.with_js_sites(interval);
        }
    }
    if let Some(url) = &plan.metrics {
        let endpoint = MetricsEndpoint::new(url)
            .map_err(|e| SampleError::Heap(e.to_string()))?
            .with_gauge(plan.gauge.clone());
        heaps = heaps.with_metrics(endpoint);
    }
    Ok(heaps)
}

/// How long a tick waits for an endpoint's answer (`--metrics`) asked at
/// its start: a quarter of the interval, at most 500 ms; a later answer
/// is the next tick's.
fn endpoint_wait(interval: Duration) -> Duration {
    (interval / 4).min(Duration::from_millis(500))
}

/// How often the wait between ticks looks at the interrupt flag: Ctrl-C is
/// seen within this; `Interrupt::sleep`'s 20 ms steps would wake leakwatch
/// 50 times a second between samples, for nothing.
const WAKE_STEP: Duration = Duration::from_millis(100);

/// Sleeps for `d`, in `WAKE_STEP`s, until then or an interrupt.
fn wait_for(d: Duration, interrupt: &Interrupt) {
    let end = Instant::now() + d;
    while !interrupt.is_set() {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(WAKE_STEP));
    }
}

/// samples.csv's rows before a long session starts sampling at half the
/// rate, and again after as many more: a session of any length writes
/// `ROWS_PER_HALVING` rows per doubling of its length, not rows in
/// proportion to it (a day at 1 s on 100 processes: ≈1.4 M rows, not 8.6 M).
const ROWS_PER_HALVING: u64 = 1_000_000;

impl Session<'_> {
    /// `--native-sites`: says how the shim came in, on stderr and in the
    /// notes.
    fn native_started(&mut self) -> Result<(), SampleError> {
        let Some(native) = self.native.as_deref() else {
            return Ok(());
        };
        let i = &native.injected;
        let at = match i.stop {
            Stop::Idle => "idle in a system call",
            Stop::Entry => "at its call to malloc: no thread was idle",
        };
        let pid = native.pid;
        let (what, done) = if i.taken_over {
            (
                format!("the shim an earlier session left in {pid} was taken over"),
                "its tables started afresh".to_owned(),
            )
        } else {
            (
                format!("the shim was loaded into {pid}"),
                format!(
                    "{} GOT entries of the allocation functions redirected",
                    i.entries
                ),
            )
        };
        let note = format!(
            "--native-sites: {what} by gdb from its thread {} ({at}); the process was stopped \
             {:.0} ms; {done}; sites grow from the attach on",
            i.thread,
            i.pause.as_secs_f64() * 1000.0,
        );
        self.progress.line(&note);
        self.writer
            .write_batch(&[store::note_row(store::SessionEvent::Note, &note)])?;
        Ok(())
    }

    /// `--py-sites`: says how the bootstrap came in (and where it could
    /// not), on stderr and in the notes.
    fn python_started(&mut self) -> Result<(), SampleError> {
        let Some(python) = self.python.as_deref() else {
            return Ok(());
        };
        let mut notes: Vec<String> = python
            .entered
            .iter()
            .map(|(pid, e)| {
                let how = match e.stop {
                    Stop::Idle => format!("started by gdb from its thread {}", e.thread),
                    Stop::Entry => format!(
                        "queued by gdb from its thread {} at a call to malloc (no thread was \
                         idle) and started by its main thread",
                        e.thread
                    ),
                };
                format!(
                    "--py-sites: the bootstrap runs in {pid}, {how} (the process was stopped \
                     {:.0} ms); Python sites grow from the attach on",
                    e.pause.as_secs_f64() * 1000.0
                )
            })
            .collect();
        notes.extend(
            python
                .refused
                .iter()
                .map(|(pid, why)| format!("--py-sites: {pid} was not entered: {why}")),
        );
        for note in &notes {
            self.progress.line(note);
        }
        let rows: Vec<Row> = notes
            .iter()
            .map(|n| store::note_row(store::SessionEvent::Note, n))
            .collect();
        self.writer.write_batch(&rows)?;
        Ok(())
    }

    /// The mean interval now: `--interval`, doubled for each
    /// `ROWS_PER_HALVING` rows written (noted the first time).
    fn interval(&mut self) -> Duration {
        if self.plan.max_rows.is_some() {
            // `hold_rows` halves the rate as it thins the file.
            self.cost.interval = self.halved(self.halvings);
            return self.cost.interval;
        }
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
        self.cost.interval = self.halved(self.halvings);
        self.cost.interval
    }

    /// `--max-samples`: when samples.csv holds that many rows, every other
    /// sample of the cheap tier alone is dropped from it — the first and
    /// the last kept, and every sample with a deep row (PSS, mappings),
    /// every event and note — and the rate halves from then on, so the
    /// series stays evenly spaced and the file holds between half the
    /// limit and the limit. Two passes over the file, in bounded memory.
    fn hold_rows(&mut self) -> Result<(), SampleError> {
        let Some(max) = self.plan.max_rows else {
            return Ok(());
        };
        if self.writer.rows_in_file() < max || self.writer.rows_written() < self.thin_after_rows {
            return Ok(());
        }
        let mut cheap: Vec<u64> = Vec::new();
        let mut deep = BTreeSet::new();
        store::scan(self.writer.path(), |row| match row.tier {
            Tier::Cheap if cheap.last() != Some(&row.sample) => cheap.push(row.sample),
            Tier::Deep | Tier::Mapping => {
                deep.insert(row.sample);
            }
            _ => {}
        })?;
        cheap.retain(|s| !deep.contains(s));
        let last = cheap.len().saturating_sub(1);
        let dropped: HashSet<u64> = cheap
            .iter()
            .enumerate()
            .filter(|&(i, _)| i % 2 == 1 && i != last)
            .map(|(_, &s)| s)
            .collect();
        // A heap row goes with its process's cheap row.
        self.writer.retain(|row| {
            !matches!(row.tier, Tier::Cheap | Tier::Heap) || !dropped.contains(&row.sample)
        })?;
        self.thinnings += 1;
        self.halvings = (self.halvings + 1).min(16);
        self.thin_after_rows = self.writer.rows_written() + max / 4;
        Ok(())
    }

    fn halved(&self, halvings: u32) -> Duration {
        self.plan
            .interval
            .saturating_mul(2u32.pow(halvings))
            .min(crate::units::MAX_DURATION)
    }

    /// The next tick is late by `by`: said once, as it happens; counted for
    /// the summary. After a deep pass it is expected (its time is reported
    /// as the deep tier's cost), and not counted.
    fn behind(&mut self, by: Duration) {
        if self.cost.last_tick_deep {
            return;
        }
        if self.cost.late_ticks == 0 {
            self.progress.line(&format!(
                "sampling fell behind by {}: a sweep of {} took {} \
                 (interval {}); samples now come as fast as the tree can be read",
                format_duration(by),
                crate::units::counted(self.cost.processes_last as u64, "process", "processes"),
                format_duration(self.cost.last_tick_cost),
                format_duration(self.cost.interval)
            ));
        }
        self.cost.late_ticks += 1;
    }

    /// Records that the target exited or its pid was reused, and files the
    /// last mapping snapshot taken.
    fn target_gone(&mut self, ctx: &Context, fate: TargetState) -> Result<(), SampleError> {
        let pid = self.members.leader().unwrap_or(0);
        let (event, comm, note) = match fate {
            TargetState::Replaced(comm) => {
                let note = format!(
                    "target {pid} exited and its pid was reused by '{comm}'; sampling stopped"
                );
                ("pid_reused", comm, note)
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
        Ok(())
    }

    /// One sample of the tree: the cheap tier; deep at the first and last
    /// sample and when the budget allows (never with a budget of 0).
    /// Returns false when the target is gone (recorded).
    fn tick(&mut self, ctx: &Context, done: bool) -> Result<bool, SampleError> {
        if matches!(self.followed, Followed::Group { .. }) {
            return self.group_tick(ctx, done);
        }
        let t0 = Instant::now();
        let cpu0 = thread_cpu();
        let Followed::Tree { tree, .. } = &mut self.followed else {
            return Ok(false);
        };
        let sweep = tree.sweep(ctx, SCOPE);
        let first = tree.sweeps() == 1;
        if sweep.target != TargetState::Alive {
            self.target_gone(ctx, sweep.target)?;
            return Ok(false);
        }
        self.cost.sweep(
            t0.elapsed(),
            thread_cpu().saturating_sub(cpu0),
            sweep.rows.len(),
            sweep.listed,
        );
        self.note_unreadable(sweep.unreadable);
        let mut rows = sweep.rows;
        let processes = rows.len();
        self.cost.last_tick_deep = false;
        if self.budget.is_on() && (first || done || self.budget.allows()) {
            self.cost.last_tick_deep = true;
            let mapped = self.mapped_set(first);
            let cpu0 = thread_cpu();
            let Followed::Tree { tree, .. } = &mut self.followed else {
                return Ok(false);
            };
            let pass = tree.deep(&mut rows, &mapped, ctx, SCOPE);
            self.budget.record(pass.cost);
            self.cost.deep(
                &pass,
                thread_cpu().saturating_sub(cpu0),
                mapped.len(),
                rows.len(),
            );
            self.note_denied(&pass.denied);
            // Mappings at the first and the last sample, for attribution;
            // in between the newest snapshot is held back in case the
            // target exits.
            if first || done {
                rows.extend(pass.mapping_rows);
                self.latest_maps.clear();
            } else {
                self.latest_maps = pass.mapping_rows;
            }
            if done {
                self.note_skipped_mappings(&mapped);
            }
        }
        self.read_heaps(ctx, &mut rows);
        rows.extend(tree_events(ctx, &sweep.started, &sweep.exited));
        if let Some(native) = self.native.as_deref_mut()
            && native.due(first || done)
        {
            let got = native.collect(ctx, &rows);
            rows.extend(got.rows);
            self.outcome.notes.extend(got.notes);
        }
        if let Some(python) = self.python.as_deref_mut()
            && python.due(first || done)
        {
            let got = python.collect(ctx, &rows);
            rows.extend(got.rows);
            self.outcome.notes.extend(got.notes);
        }
        self.writer.write_batch(&rows)?;
        self.cost.last_tick_cost = t0.elapsed();
        self.show_progress(&rows, processes);
        Ok(true)
    }

    /// One sample of a group target (a cgroup's processes, every match of
    /// a name), read afresh: the cheap tier of each, deep by the same budget,
    /// mappings of up to `MAPPED_MAX` at the first and last sample, and the
    /// cgroup's own accounting. Returns false when the group is gone.
    fn group_tick(&mut self, ctx: &Context, done: bool) -> Result<bool, SampleError> {
        let Followed::Group { root, known, ticks } = &mut self.followed else {
            return Ok(false);
        };
        if let Some(note) = self.members.ended(root) {
            let comm = self.target.comm.clone();
            self.writer
                .write_batch(&[event_row(ctx, SCOPE, 0, &comm, "exited", None)])?;
            self.outcome.notes.push(note);
            return Ok(false);
        }
        *ticks += 1;
        let first = *ticks == 1;
        let t0 = Instant::now();
        let pids = self.members.pids(root, std::process::id());
        let deep = self.budget.is_on() && (first || done || self.budget.allows());
        // One page walk each: `smaps` for up to MAPPED_MAX at the first and
        // last sample (its sums are the rollup), `smaps_rollup` otherwise.
        let (depth, mapped) = match (deep, first || done) {
            (false, _) => (Depth::Cheap, 0),
            (true, false) => (Depth::Rollup, 0),
            (true, true) => (Depth::Rollup, MAPPED_MAX.min(pids.len())),
        };
        let mut scoped = sample_scope(root, ctx, SCOPE, &pids[..mapped], Depth::Mappings);
        scoped.extend(sample_scope(root, ctx, SCOPE, &pids[mapped..], depth));
        let Scoped {
            mut rows,
            mapping_rows,
            unreadable,
            denied,
        } = scoped;
        rows.extend(mapping_rows);
        let events = group_events(ctx, &rows, known);
        let own = self.members.own_rows(ctx);
        let took = t0.elapsed();
        if deep {
            self.budget.record(took);
        }
        self.cost.sweep(took, Duration::ZERO, rows.len(), false);
        self.cost.last_tick_deep = deep;
        self.note_unreadable(unreadable);
        self.note_denied(&denied);
        let processes = rows.len();
        self.read_heaps(ctx, &mut rows);
        rows.extend(events);
        rows.extend(own);
        self.writer.write_batch(&rows)?;
        self.cost.last_tick_cost = took;
        self.show_progress(&rows, processes);
        Ok(true)
    }

    /// The heaps of the processes among `rows`, as their runtimes count
    /// them, appended to the batch; what was found or refused is said once.
    fn read_heaps(&mut self, ctx: &Context, rows: &mut Vec<Row>) {
        let mut got = self.heaps.read(ctx, rows);
        if let Some(classes) = &mut self.classes {
            // Taken as they come: a histogram is never waited for.
            let more = classes.read(ctx, rows, Duration::ZERO);
            got.rows.extend(more.rows);
            got.notes.extend(more.notes);
        }
        for note in &got.notes {
            self.progress.line(note);
        }
        self.outcome.notes.extend(got.notes);
        rows.extend(got.rows);
    }

    /// Whose mappings this deep pass reads (see `MAPPED_MAX`).
    fn mapped_set(&mut self, first: bool) -> BTreeSet<u32> {
        let Followed::Tree { pid: target, tree } = &self.followed else {
            return BTreeSet::new();
        };
        let mut live: Vec<(u32, &Member)> = tree.members().filter(|(_, m)| m.is_live()).collect();
        // Largest first; the target before all.
        live.sort_by_key(|(pid, m)| {
            (
                pid != target,
                std::cmp::Reverse(m.status.rss_bytes.unwrap_or(0)),
            )
        });
        if first {
            let chosen: Vec<(u32, u64)> = live
                .iter()
                .take(MAPPED_MAX)
                .map(|(pid, m)| (*pid, m.start_time))
                .collect();
            self.mapped_first = chosen.iter().copied().collect();
            return chosen.into_iter().map(|(pid, _)| pid).collect();
        }
        let mut mapped: BTreeSet<u32> = live
            .iter()
            .filter(|(pid, m)| self.mapped_first.contains(&(*pid, m.start_time)))
            .map(|(pid, _)| *pid)
            .collect();
        let room = MAPPED_MAX.saturating_sub(mapped.len()).max(MAPPED_NEW);
        mapped.extend(
            live.iter()
                .filter(|(_, m)| m.found_at > 1)
                .take(room)
                .map(|(pid, _)| *pid),
        );
        mapped
    }

    /// At the last deep pass: whose mappings were not read, and which of
    /// them grew most (by the cheap tier), so a reader knows what the
    /// mapping attribution does not cover.
    fn note_skipped_mappings(&mut self, mapped: &BTreeSet<u32>) {
        let Followed::Tree { tree, .. } = &self.followed else {
            return;
        };
        let mut skipped: Vec<(u32, i64)> = tree
            .members()
            .filter(|(pid, m)| m.is_live() && !mapped.contains(pid))
            .map(|(pid, m)| (pid, m.rss_growth()))
            .collect();
        if skipped.is_empty() {
            return;
        }
        let total = skipped.len() + mapped.len();
        skipped.sort_by_key(|&(_, growth)| std::cmp::Reverse(growth));
        let grew: Vec<String> = skipped
            .iter()
            .filter(|(_, g)| *g > 0)
            .take(3)
            .map(|(pid, g)| format!("pid {pid} ({} RSS)", format_signed_bytes(*g as f64)))
            .collect();
        let grew = if grew.is_empty() {
            "none of them grew by RSS".to_string()
        } else {
            format!("grew most among them: {}", grew.join(", "))
        };
        self.outcome.notes.push(format!(
            "mappings (smaps) were read for {} of {total} processes at the last sample \
             (at most {MAPPED_MAX}: the target and the largest at the first sample, then those \
             still running and the largest started since); the other {} had their PSS read \
             from smaps_rollup, one page walk each, without mapping detail; {grew}",
            mapped.len(),
            skipped.len(),
        ));
    }

    /// The sampling cost record (samples.csv, so `report` rebuilds it) and
    /// the notes on what the deep tier did.
    fn finish(&mut self) -> Result<(), SampleError> {
        let heap_notes = self.heaps.finish();
        self.outcome.notes.extend(heap_notes);
        if let Some(classes) = &mut self.classes {
            let notes = classes.finish();
            self.outcome.notes.extend(notes);
        }
        let record = self.cost.record();
        if !self.budget.is_on() {
            self.outcome.notes.push(
                "deep tier off (--deep-budget 0): the target's page tables were never walked; \
                 RSS and its anon/file/shmem split only, no PSS/USS and no mappings"
                    .to_string(),
            );
        }
        if record.late_ticks > 0 {
            self.outcome.notes.push(format!(
                "{} of {} samples started late: a cheap sweep took up to {:.1} ms (mean \
                 {:.1} ms, up to {} processes) and the deep passes {:.0} ms in all, against \
                 an interval of {}; samples came every {} on average",
                record.late_ticks,
                record.ticks,
                record.sweep_max_ms,
                record.sweep_mean_ms,
                record.processes_max,
                record.deep_cost_s * 1000.0,
                format_duration(self.cost.interval),
                format_duration(Duration::from_secs_f64(record.achieved_interval_s.max(0.0)))
            ));
        }
        if self.unreadable_more {
            self.outcome.notes.push(format!(
                "more processes than the {NOTED_MAX} named above could not be read"
            ));
        }
        if let (Some(max), 1..) = (self.plan.max_rows, self.thinnings) {
            self.outcome.notes.push(format!(
                "samples.csv held to --max-samples {max} rows: thinned {}, every other \
                 older sample of the cheap tier dropped (the first, the last and every deep \
                 sample kept); sampling every {} at the end",
                crate::units::counted(self.thinnings as u64, "time", "times"),
                format_duration(self.halved(self.halvings))
            ));
        }
        self.writer.write_batch(&[store::sampling_row(&record)])?;
        Ok(())
    }

    fn note_unreadable(&mut self, unreadable: Vec<(u32, String)>) {
        for (pid, why) in unreadable {
            if self.unreadable_noted.len() >= NOTED_MAX {
                self.unreadable_more |= !self.unreadable_noted.contains(&pid);
            } else if self.unreadable_noted.insert(pid) {
                self.outcome.notes.push(format!(
                    "process {pid} left out of the target's series: {why}"
                ));
            }
        }
    }

    fn note_denied(&mut self, denied: &[u32]) {
        if !denied.is_empty() && !self.denied_noted {
            self.denied_noted = true;
            let shown: Vec<u32> = denied.iter().take(NOTED_MAX).copied().collect();
            self.outcome.notes.push(format!(
                "no PSS/USS for {} {shown:?}{}: smaps_rollup needs ptrace-read access \
                 (run leakwatch as the target's user or as root); RSS is still sampled",
                if denied.len() == 1 {
                    "process"
                } else {
                    "processes"
                },
                if denied.len() > NOTED_MAX { " …" } else { "" }
            ));
        }
    }

    /// The bar's status every tick; a log line every 10 s without a terminal.
    /// After the first sample, once: what is sampled and where the reports go.
    fn show_progress(&mut self, rows: &[Row], processes: usize) {
        if !self.start_said {
            self.start_said = true;
            self.progress.line(&self.start_line(processes));
        }
        // Nothing to show this tick (no bar, no log line due): no text made.
        let interactive = self.progress.is_interactive();
        let log_due = !interactive
            && !self.progress.is_silent()
            && self.last_progress.elapsed() >= Duration::from_secs(10);
        if !interactive && !log_due {
            return;
        }
        let rss: u64 = rows
            .iter()
            .filter(|r| r.is_process_sample())
            .filter_map(|r| r.rss_bytes)
            .sum();
        let elapsed = self.started.elapsed();
        let now = format!(
            "{}, RSS {}",
            crate::units::counted(processes as u64, "process", "processes"),
            format_bytes(rss as f64)
        );
        // The bar shows the elapsed time itself: it says what is left.
        self.progress.status(&match self.plan.duration {
            Some(d) => format!(
                "{} left of {}: {now}",
                format_duration(d.saturating_sub(elapsed)),
                format_duration(d)
            ),
            None => format!("until it exits or Ctrl-C: {now}"),
        });
        if log_due {
            self.last_progress = Instant::now();
            let of = self
                .plan
                .duration
                .map(|d| format!(" of {}", format_duration(d)))
                .unwrap_or_default();
            self.progress
                .line(&format!("{}{of}: {now}", format_duration(elapsed)));
        }
    }
}

impl Session<'_> {
    /// `sampling 4242 (python3) and its descendants: 3 processes every 1.0s
    /// for 30m00s; reports go to reports/…/ at the end; Ctrl-C stops early
    /// and still writes them`.
    fn start_line(&self, processes: usize) -> String {
        let what = match (&self.followed, self.members.describe()) {
            (Followed::Tree { pid, .. }, _) => {
                format!("{pid} ({}) and its descendants", self.target.comm)
            }
            (Followed::Group { .. }, Some(what)) => what,
            (Followed::Group { .. }, None) => "the target".to_string(),
        };
        let until = match self.plan.duration {
            Some(d) => format!("for {}", format_duration(d)),
            None => "until it exits".to_string(),
        };
        let dir = self
            .writer
            .path()
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        format!(
            "sampling {what}: {} every {} {until}; reports go to {}/ \
             at the end; Ctrl-C stops early and still writes them",
            crate::units::counted(processes as u64, "process", "processes"),
            format_duration(self.plan.interval),
            dir.display()
        )
    }
}

/// What sampling costs and achieves, measured as it goes (see
/// `store::SamplingCost`).
struct CostMeter {
    /// The mean interval in force.
    interval: Duration,
    deep_budget: f64,
    ticks: u64,
    first_tick: Option<Instant>,
    last_tick: Option<Instant>,
    late_ticks: u64,
    sweeps: u64,
    sweep_total: Duration,
    sweep_cpu: Duration,
    sweep_max: Duration,
    listing_sweeps: u64,
    processes_max: usize,
    processes_last: usize,
    last_tick_cost: Duration,
    last_tick_deep: bool,
    deep_samples: u64,
    walks: u64,
    deep_cost: Duration,
    deep_cpu: Duration,
    longest: Option<Walk>,
    mapped: usize,
    mapped_of: usize,
    /// The process's CPU time when sampling started.
    cpu_start: Duration,
}

impl CostMeter {
    fn new(plan: &AttachPlan) -> Self {
        CostMeter {
            interval: plan.interval,
            deep_budget: plan.deep_budget,
            ticks: 0,
            first_tick: None,
            last_tick: None,
            late_ticks: 0,
            sweeps: 0,
            sweep_total: Duration::ZERO,
            sweep_cpu: Duration::ZERO,
            sweep_max: Duration::ZERO,
            listing_sweeps: 0,
            processes_max: 0,
            processes_last: 0,
            last_tick_cost: Duration::ZERO,
            last_tick_deep: false,
            deep_samples: 0,
            walks: 0,
            deep_cost: Duration::ZERO,
            deep_cpu: Duration::ZERO,
            longest: None,
            mapped: 0,
            mapped_of: 0,
            cpu_start: process_cpu(),
        }
    }

    /// A tick starts (it was due at `due`).
    fn tick(&mut self, due: Instant) {
        let now = Instant::now().max(due);
        self.first_tick.get_or_insert(now);
        self.last_tick = Some(now);
        self.ticks += 1;
    }

    fn sweep(&mut self, took: Duration, cpu: Duration, processes: usize, listed: bool) {
        self.sweeps += 1;
        self.sweep_total += took;
        self.sweep_cpu += cpu;
        self.listing_sweeps += u64::from(listed);
        self.sweep_max = self.sweep_max.max(took);
        self.processes_max = self.processes_max.max(processes);
        self.processes_last = processes;
    }

    fn deep(&mut self, pass: &DeepPass, cpu: Duration, mapped: usize, of: usize) {
        self.deep_samples += 1;
        self.walks += pass.walks;
        self.deep_cost += pass.cost;
        self.deep_cpu += cpu;
        if let Some(w) = &pass.longest
            && self
                .longest
                .as_ref()
                .is_none_or(|l| w.duration > l.duration)
        {
            self.longest = Some(w.clone());
        }
        self.mapped = mapped;
        self.mapped_of = of;
    }

    fn record(&self) -> SamplingCost {
        let span = match (self.first_tick, self.last_tick) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        };
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let per_sweep = |d: Duration| {
            if self.sweeps > 0 {
                ms(d) / self.sweeps as f64
            } else {
                0.0
            }
        };
        SamplingCost {
            interval_s: self.interval.as_secs_f64(),
            ticks: self.ticks,
            achieved_interval_s: if self.ticks > 1 {
                span / (self.ticks - 1) as f64
            } else {
                0.0
            },
            late_ticks: self.late_ticks,
            sweep_mean_ms: per_sweep(self.sweep_total),
            sweep_max_ms: ms(self.sweep_max),
            sweep_cpu_mean_ms: per_sweep(self.sweep_cpu),
            processes_max: self.processes_max as u64,
            listing_sweeps: self.listing_sweeps,
            deep_budget: self.deep_budget,
            deep_samples: self.deep_samples,
            page_walks: self.walks,
            deep_cost_s: self.deep_cost.as_secs_f64(),
            deep_cpu_s: self.deep_cpu.as_secs_f64(),
            longest_walk: self.longest.as_ref().map(|w| LongestWalk {
                pid: w.pid,
                comm: w.comm.clone(),
                ms: ms(w.duration),
            }),
            mapped_processes: self.mapped as u64,
            mapped_of: self.mapped_of as u64,
            cpu_s: (process_cpu().saturating_sub(self.cpu_start)).as_secs_f64(),
        }
    }
}

/// CPU time (user + system) of this thread, to the nanosecond; zero where
/// the clock cannot be read.
fn thread_cpu() -> Duration {
    cpu_clock(ClockId::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process (every thread).
fn process_cpu() -> Duration {
    cpu_clock(ClockId::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_clock(clock: ClockId) -> Duration {
    clock_gettime(clock).map_or(Duration::ZERO, |t| {
        Duration::new(
            t.tv_sec().max(0) as u64,
            t.tv_nsec().clamp(0, 999_999_999) as u32,
        )
    })
}

/// Events for descendants that appeared or disappeared since the last sample
/// (worker recycling shows as one pid ending and another starting).
fn tree_events(ctx: &Context, started: &[(u32, String)], exited: &[(u32, String)]) -> Vec<Row> {
    let ended = exited
        .iter()
        .map(|(pid, comm)| event_row(ctx, SCOPE, *pid, comm, "exited", None));
    let began = started
        .iter()
        .map(|(pid, comm)| event_row(ctx, SCOPE, *pid, comm, "started", None));
    ended.chain(began).collect()
}

/// Events for a group's processes that appeared or disappeared since the
/// last sample.
fn group_events(ctx: &Context, rows: &[Row], known: &mut BTreeMap<(u32, u64), String>) -> Vec<Row> {
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
