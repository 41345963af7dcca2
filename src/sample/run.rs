//! `leakwatch run`: run a command N times as a child subreaper; per run poll
//! the command tree for its peak, then, after a settle delay, deep-sample the
//! survivors (what this and earlier runs left behind) and each watched PID.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::heap::node::NodePreload;
use super::heap::{Heaps, MetricsEndpoint};
use super::lifecycle::confine::{self, Confinement, Record};
use super::lifecycle::guardian::{self, Guardian};
use super::lifecycle::reaper::{self, ChildExit, Interrupt, Reaped};
use super::procfs::{Depth, ProcRoot};
use super::rows::{Clock, Context, event_row};
use super::sites::jvm::JvmClasses;
use super::sites::native::NativeTracer;
use super::sites::python::PythonSites;
use super::sites::{self, ANSWER_TIMEOUT, Sites};
use super::{Outcome, ResolveError, SampleError, Scoped, sample_scope};
use crate::console::Progress;
use crate::store::{Row, SampleWriter, Scope, Tier};
use crate::units::{format_bytes, format_duration};

/// How long survivors get between TERM and KILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// What to run and how, as the user asked (validated, not yet resolved).
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub repeat: u32,
    /// `--watch` PIDs, each once.
    pub watch: Vec<u32>,
    /// How often to poll the command's tree for its peak.
    pub interval: Duration,
    /// Wait after the command exits before the deep sample.
    pub settle: Duration,
    /// Stop a run that takes longer (its tree gets TERM, then KILL).
    pub timeout: Option<Duration>,
    pub keep_survivors: bool,
    /// Load the heap reader into the Node processes the commands start
    /// (off: `--no-node-preload`).
    pub node_preload: bool,
    /// `--js-sites`: V8's sampling heap profiler in the preloaded Node
    /// processes, one sample per this many bytes on average.
    pub js_sites: Option<u64>,
    /// `--metrics URL`: a followed process's own metrics endpoint.
    pub metrics: Option<String>,
    /// `--metric NAME`: a gauge of that endpoint followed as a series.
    pub gauge: Option<String>,
    /// `--node-inspector`: read the watched Node processes' heaps through
    /// their inspector.
    pub node_inspector: bool,
    /// `--jvm-classes`: ask each JVM followed for its class histogram
    /// after each run.
    pub jvm_classes: bool,
    /// `--py-sites`: instrument Python processes, recording this many
    /// frames per allocation.
    pub py_sites: Option<usize>,
    /// `--native-sites`: preload the sampling allocator shim, sampling
    /// once per this many bytes on average.
    pub native_sites: Option<u64>,
    /// The command and its arguments, as typed.
    pub command: Vec<OsString>,
    /// Where the processes are read: /proc, or a fake tree in a test.
    pub root: ProcRoot,
}

/// A plan checked against the environment: the program found, the watched
/// processes alive, the tracers of allocation sites in place.
#[derive(Debug)]
pub struct Prepared {
    plan: RunPlan,
    program: PathBuf,
    sites: Vec<Box<dyn Sites>>,
    /// The Node heap reader's directory, while the session lasts.
    node: Option<NodePreload>,
    /// `--metrics`: the endpoint and its reader thread.
    metrics: Option<MetricsEndpoint>,
}

/// Finds the program and checks the watched PIDs, before any output exists.
pub fn prepare(plan: &RunPlan) -> Result<Prepared, ResolveError> {
    let root = &plan.root;
    for &pid in &plan.watch {
        if !root.alive(pid) {
            return Err(ResolveError::NoSuchProcess {
                what: "--watch",
                pid,
            });
        }
    }
    let name = plan
        .command
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    let program = resolve_program(&name)?;
    let mut sites: Vec<Box<dyn Sites>> = Vec::new();
    if let Some(frames) = plan.py_sites {
        let mut python = PythonSites::prepare(frames).map_err(ResolveError::PySites)?;
        python
            .enter_watched(&plan.watch)
            .map_err(ResolveError::PyAttach)?;
        sites.push(Box::new(python));
    }
    if let Some(interval) = plan.native_sites {
        let native = NativeTracer::prepare(interval).map_err(ResolveError::NativeSites)?;
        sites.push(Box::new(native));
    }
    if plan.jvm_classes {
        sites.push(Box::new(JvmClasses::new(plan.root.clone(), true)));
    }
    let node = match plan.node_preload {
        true => {
            let preload = NodePreload::prepare().map_err(ResolveError::NodePreload)?;
            Some(match plan.js_sites {
                Some(interval) => preload.with_sites(interval),
                None => preload,
            })
        }
        false => None,
    };
    let metrics = plan
        .metrics
        .as_deref()
        .map(MetricsEndpoint::new)
        .transpose()
        .map_err(ResolveError::Metrics)?
        .map(|m| m.with_gauge(plan.gauge.clone()));
    Ok(Prepared {
        plan: plan.clone(),
        program,
        sites,
        node,
        metrics,
    })
}

/// Finds the program as `execvp` would, so "not found" is reported before
/// any output directory exists.
pub fn resolve_program(name: &str) -> Result<PathBuf, ResolveError> {
    let is_executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let path = PathBuf::from(name);
        if !path.exists() {
            if name.contains(char::is_whitespace) {
                return Err(not_found(name));
            }
            return Err(ResolveError::CommandMissing(name.to_string()));
        }
        if path.is_dir() {
            return Err(ResolveError::CommandIsDirectory(name.to_string()));
        }
        if !is_executable(&path) {
            return Err(ResolveError::CommandNotExecutable(name.to_string()));
        }
        return Ok(path);
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_var)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
        .ok_or_else(|| not_found(name))
}

/// `"python3 -c pass"` quoted as one word is a shell habit: say so. With a
/// pipe, redirection, list or substitution in it only a shell reproduces it:
/// unquoted, the user's shell would apply it to leakwatch itself.
fn not_found(name: &str) -> ResolveError {
    const SHELL: &[char] = &['|', '&', ';', '<', '>', '$', '`', '(', ')', '*', '?'];
    let line = name.trim();
    if !line.contains(char::is_whitespace) {
        ResolveError::CommandNotFound(name.to_string())
    } else if line.contains(SHELL) {
        ResolveError::ShellLine(line.to_string())
    } else {
        ResolveError::CommandWithSpaces(line.to_string())
    }
}

/// How polling a run's command ended.
enum PollEnd {
    Exited(Reaped),
    Interrupted,
    /// It ran longer than `--timeout` (this long) and was stopped.
    TimedOut(Duration),
}

/// A `--watch` process, identified by pid and start time.
struct Watched {
    pid: u32,
    start_time: u64,
    alive: bool,
}

impl Watched {
    fn scope(&self) -> Scope {
        Scope::Pid(self.pid)
    }
}

/// One `run` session: what it samples into, and what it has seen so far.
struct Session<'a> {
    plan: &'a RunPlan,
    program: &'a Path,
    /// The command line as a shell would show it, for event rows.
    name: String,
    writer: &'a mut SampleWriter,
    interrupt: &'a Interrupt,
    progress: &'a Progress,
    root: ProcRoot,
    me: u32,
    clock: Clock,
    watched: Vec<Watched>,
    outcome: Outcome,
    /// Processes already noted as unreadable or refused, noted only once.
    noted: BTreeSet<u32>,
    /// The cgroup every run is started in, where the machine allows.
    cgroup: Option<Confinement>,
    /// This session's record (and where it is kept), for a later session
    /// to find what this one left should it be killed.
    record: Option<(Record, PathBuf)>,
    /// The tracers of allocation sites (`--py-sites`, `--native-sites`),
    /// asked after each run.
    sites: &'a mut [Box<dyn Sites>],
    /// Stops what this session started should leakwatch die first.
    guardian: Option<Guardian>,
    /// The heaps the followed processes' runtimes count, read with each
    /// deep sample.
    heaps: Heaps,
    /// Local servers the first runs connected to (`SERVER_LOOK_RUNS`): port
    /// → (listening socket inode, runs that reached it).
    reached: BTreeMap<u16, (u64, u32)>,
}

/// The runs whose loopback connections are looked at for a server the
/// command talks to: each of them must have reached it.
const SERVER_LOOK_RUNS: u32 = 2;

pub fn run(
    prepared: &mut Prepared,
    writer: &mut SampleWriter,
    interrupt: &Interrupt,
    progress: &Progress,
) -> Result<Outcome, SampleError> {
    let root = prepared.plan.root.clone();
    let me = std::process::id();
    let cgroup = Confinement::create(me);
    // Before becoming a subreaper: the guardian must not be in our tree.
    let start_time = root.stat(me).map(|s| s.start_time).unwrap_or(0);
    let records = confine::records_dir();
    // With --keep-survivors what the command leaves is meant to outlive us.
    let guardian = (!prepared.plan.keep_survivors).then(|| {
        Guardian::start(
            me,
            start_time,
            cgroup.as_ref().map(Confinement::path),
            records.as_deref(),
        )
    });
    if let Err(e) = reaper::become_subreaper() {
        if let Some(cgroup) = &cgroup {
            cgroup.remove();
        }
        return Err(SampleError::Subreaper(e));
    }
    let watched = prepared
        .plan
        .watch
        .iter()
        .map(|&pid| Watched {
            pid,
            start_time: root.stat(pid).map(|s| s.start_time).unwrap_or(0),
            alive: true,
        })
        .collect();
    // The user's bytes, shown inert: they reach samples.csv and stderr.
    let command_line: Vec<String> = prepared
        .plan
        .command
        .iter()
        .map(|a| crate::escape::inert_bytes(a.as_encoded_bytes()))
        .collect();
    let mut session = Session {
        plan: &prepared.plan,
        program: &prepared.program,
        name: shell_words(&command_line),
        writer,
        interrupt,
        progress,
        root,
        me,
        clock: Clock::new(),
        watched,
        outcome: Outcome::default(),
        noted: BTreeSet::new(),
        cgroup,
        record: None,
        sites: &mut prepared.sites,
        guardian: None,
        heaps: heaps(
            &prepared.plan,
            prepared.node.take(),
            prepared.metrics.take(),
        ),
        reached: BTreeMap::new(),
    };
    match guardian {
        Some(Ok(g)) => session.guardian = Some(g),
        None => {}
        Some(Err(e)) => session.outcome.notes.push(format!(
            "no guardian process ({e}): what this session starts is stopped at its end, \
             but not if leakwatch itself is killed"
        )),
    }
    session.open_record();
    // A write error is returned after the survivors are stopped.
    let result = session.baseline().and_then(|()| session.runs());
    let result = match result {
        Ok(Some(last)) => session.final_mappings(last),
        other => other.map(|_| ()),
    };
    let heap_notes = session.heaps.finish();
    session.outcome.notes.extend(heap_notes);
    for tracer in session.sites.iter_mut() {
        let notes = tracer.finish();
        session.outcome.notes.extend(notes);
    }
    session.stop_survivors();
    session.close_record();
    if let Some(guardian) = session.guardian.take() {
        guardian.release();
    }
    result.map(|()| session.outcome)
}

impl Session<'_> {
    /// Run 0: the watched processes before the first run, a baseline point.
    fn baseline(&mut self) -> Result<(), SampleError> {
        if self.watched.is_empty() {
            return Ok(());
        }
        let ctx = self.clock.context(Some(0));
        let rows = self.sample_watched(&ctx, Depth::Mappings);
        self.writer.write_batch(&rows)?;
        self.read_heaps(&ctx, &rows).map(|_| ())
    }

    /// Every run in turn; the last run completed, if any.
    fn runs(&mut self) -> Result<Option<u32>, SampleError> {
        let mut completed = None;
        for run in 1..=self.plan.repeat {
            if self.interrupt.is_set() {
                self.outcome.interrupted = true;
                break;
            }
            let (done, go_on) = self.one_run(run)?;
            if done {
                completed = Some(run);
            }
            if !go_on {
                self.outcome.interrupted = true;
                break;
            }
        }
        Ok(completed)
    }

    /// One run: start the command, poll it until it exits, settle, sample
    /// what it left behind. Returns (completed, go on).
    fn one_run(&mut self, run: u32) -> Result<(bool, bool), SampleError> {
        let mut command = Command::new(self.program);
        command
            .args(self.plan.command.iter().skip(1))
            .stdin(Stdio::null());
        for tracer in self.sites.iter() {
            command.envs(tracer.env());
        }
        command.envs(self.heaps.env());
        if let Some(guardian) = &self.guardian {
            command.env(guardian::MARK, guardian.mark_value());
        }
        if let Some(cgroup) = &self.cgroup {
            // SAFETY: the hook only opens, writes and closes a file (see
            // `confine::join`): async-signal-safe, as a pre_exec hook must be.
            unsafe {
                command.pre_exec(cgroup.joiner());
            }
        }
        let look = run <= SERVER_LOOK_RUNS;
        let before = look.then(|| self.root.loopback(self.me));
        // The run starts at its spawn: what follows it (the guardian's stat, the event's
        // write) is leakwatch's time, not the command's.
        let start = self.clock.context(Some(run));
        let child = command.spawn().map_err(|error| SampleError::Spawn {
            program: self.program.display().to_string(),
            error,
        })?;
        let pid = child.id();
        if let (Some(guardian), Ok(stat)) = (&mut self.guardian, self.root.stat(pid)) {
            guardian.track(pid, stat.start_time);
        }
        // `child` is never waited on through std: reap_all() collects its
        // status together with the orphans'.
        drop(child);
        self.write(&[self.command_event(&start, pid, "run_start", None)])?;

        let (end, polled_hwm) = self.poll_command(pid, run)?;
        let ctx = self.clock.context(Some(run));
        // From the run's start event to its end event, as report.md's Runs
        // table reads them: not the server scan before the spawn.
        let ran_for = ctx.at.saturating_duration_since(start.at);
        let reaped = match end {
            PollEnd::Exited(reaped) => reaped,
            PollEnd::Interrupted => {
                self.write(&[self.command_event(&ctx, pid, "run_end interrupted", None)])?;
                return Ok((false, false));
            }
            PollEnd::TimedOut(limit) => {
                let event = format!("run_end timeout:{}", format_duration(limit));
                self.write(&[self.command_event(&ctx, pid, &event, None)])?;
                self.outcome.notes.push(format!(
                    "run {run} took longer than --timeout {} and was stopped",
                    format_duration(limit)
                ));
                self.progress.step(
                    u64::from(run),
                    &format!("run {run}/{}: timed out", self.plan.repeat),
                );
                return Ok((false, !self.interrupt.is_set()));
            }
        };
        self.record_end(&ctx, pid, &reaped, polled_hwm)?;
        if let Some(before) = before {
            for (port, inode) in self.root.loopback(self.me).servers_reached_since(&before) {
                self.reached.entry(port).or_insert((inode, 0)).1 += 1;
            }
            if run == SERVER_LOOK_RUNS.min(self.plan.repeat) {
                self.note_servers(run);
            }
        }

        // Let the daemon finish what the command asked of it.
        let settled = self.interrupt.sleep(self.plan.settle);
        self.record_exits(&reaper::reap_all(), run)?;
        let rows = self.sample_after(run)?;
        self.progress.step(
            u64::from(run),
            &format!(
                "run {run}/{}: {} in {}{}",
                self.plan.repeat,
                reaped.exit.describe(),
                format_duration(ran_for),
                scope_rss(&rows)
            ),
        );
        Ok((true, settled))
    }

    /// The local servers every run so far connected to (over loopback TCP)
    /// that leakwatch does not follow: named with the `--watch` that would
    /// judge them (without it only the command and what it left behind are
    /// measured — a client's memory says nothing of the server's).
    fn note_servers(&mut self, runs: u32) {
        let mut followed: BTreeSet<u32> = survivors(&self.root, self.me).into_iter().collect();
        for w in &self.watched {
            followed.extend(watched_tree(&self.root, w.pid));
        }
        followed.insert(self.me);
        let mut named = BTreeSet::new();
        for (&port, &(inode, seen)) in &self.reached {
            if seen < runs {
                continue;
            }
            let Some(pid) = self.root.socket_owner(inode) else {
                continue;
            };
            if followed.contains(&pid) || !named.insert(pid) {
                continue;
            }
            let comm = self
                .root
                .status(pid)
                .map(|s| s.name)
                .unwrap_or_else(|_| "?".into());
            self.outcome.notes.push(format!(
                "each run connected to 127.0.0.1:{port}, served by {pid} ({comm}), which leakwatch \
                 does not follow: only the command and what it left behind were measured; \
                 --watch {pid} judges the server too"
            ));
        }
    }

    fn command_event(&self, ctx: &Context, pid: u32, event: &str, code: Option<i32>) -> Row {
        event_row(ctx, Scope::Command, pid, &self.name, event, code)
    }

    /// Writes rows to samples.csv, and names the processes of the session
    /// (not the watched ones) to the guardian.
    fn write(&mut self, rows: &[Row]) -> Result<(), SampleError> {
        if let Some(guardian) = &mut self.guardian {
            for r in rows.iter().filter(|r| {
                matches!(r.scope, Scope::Command | Scope::Survivors) && r.is_process_sample()
            }) {
                guardian.track(r.pid, r.start_time);
            }
        }
        Ok(self.writer.write_batch(rows)?)
    }

    /// The run's end event and the command's peak as one more command
    /// sample: a short command can exit between two polls. The kernel's
    /// ru_maxrss also counts the mm the child had before exec — leakwatch's
    /// own, since spawn uses vfork — so it is only believed above
    /// leakwatch's own peak; below that, the last polled VmHWM is the best
    /// there is.
    fn record_end(
        &mut self,
        ctx: &Context,
        pid: u32,
        reaped: &Reaped,
        polled_hwm: u64,
    ) -> Result<(), SampleError> {
        let exit: ChildExit = reaped.exit;
        let end = self.command_event(
            ctx,
            pid,
            &format!("run_end {}", exit.describe()),
            Some(exit.code()),
        );
        let own_hwm = self
            .root
            .status(self.me)
            .ok()
            .and_then(|s| s.hwm_bytes)
            .unwrap_or(0);
        let kernel_peak = Some(reaped.max_rss_bytes).filter(|&p| p > own_hwm);
        let peak_bytes = kernel_peak.unwrap_or(0).max(polled_hwm);
        // Not seen at all (a command over within a millisecond or two): all
        // that is known is the kernel's bound, which is leakwatch's own peak.
        let peak = if peak_bytes > 0 {
            Row {
                tier: Tier::Cheap,
                event: Some("peak".into()),
                exit_code: None,
                rss_bytes: Some(peak_bytes),
                hwm_bytes: Some(peak_bytes),
                ..end.clone()
            }
        } else {
            Row {
                event: Some("peak_bound".into()),
                exit_code: None,
                hwm_bytes: Some(reaped.max_rss_bytes.max(own_hwm)),
                ..end.clone()
            }
        };
        self.write(&[end, peak])
    }

    /// The deep sample after a run: survivors and watched processes, with
    /// their mappings in the same page walk after the first run (the
    /// survivors'; the watched processes' were read before it) and the last.
    fn sample_after(&mut self, run: u32) -> Result<Vec<Row>, SampleError> {
        let ctx = self.clock.context(Some(run));
        let last = run == self.plan.repeat;
        let depth = |mapped: bool| {
            if mapped {
                Depth::Mappings
            } else {
                Depth::Rollup
            }
        };
        let left_behind = survivors(&self.root, self.me);
        let scoped = sample_scope(
            &self.root,
            &ctx,
            Scope::Survivors,
            &left_behind,
            depth(run == 1 || last),
        );
        self.note_denied(&scoped.denied);
        self.note_unreadable(&scoped.unreadable);
        let mut rows = scoped.all_rows();
        rows.extend(self.sample_watched(&ctx, depth(last)));
        self.write(&rows)?;
        self.update_record(&rows);
        let with_heap = self.read_heaps(&ctx, &rows)?;
        // Asked after the deep sample: a snapshot costs the process memory
        // (a copy of its traces) that must not show in the sample.
        if !self.sites.is_empty() {
            let mut got = sites::collect_all(self.sites, &ctx, &rows, ANSWER_TIMEOUT);
            // One heap row per process and sample: a heap read already
            // (`--metrics` on a Python process) is not read again.
            got.rows.retain(|r| {
                r.tier != Tier::Heap || !with_heap.contains(&(r.scope, r.pid, r.start_time))
            });
            self.outcome.notes.extend(got.notes);
            self.write(&got.rows)?;
        }
        Ok(rows)
    }

    /// The heaps of the processes just sampled (`rows`), as their runtimes
    /// count them: rows of the same batch, written at once.
    /// Returns the processes read, by scope, pid and start time.
    fn read_heaps(
        &mut self,
        ctx: &Context,
        rows: &[Row],
    ) -> Result<BTreeSet<(Scope, u32, u64)>, SampleError> {
        self.heaps.ask();
        let got = self.heaps.read(ctx, rows);
        for note in &got.notes {
            self.progress.line(note);
        }
        self.outcome.notes.extend(got.notes);
        self.write(&got.rows)?;
        Ok(got
            .rows
            .iter()
            .map(|r| (r.scope, r.pid, r.start_time))
            .collect())
    }

    /// Mappings at the end, for attribution (what grew since the first
    /// run), when the session ended before its last run (interrupted, timed
    /// out): the last run's own deep sample read them otherwise.
    fn final_mappings(&mut self, last: u32) -> Result<(), SampleError> {
        if last == self.plan.repeat {
            return Ok(());
        }
        let ctx = self.clock.context(Some(last));
        let mut pids = vec![(Scope::Survivors, survivors(&self.root, self.me))];
        pids.extend(
            self.watched
                .iter()
                .filter(|w| w.alive)
                .map(|w| (w.scope(), watched_tree(&self.root, w.pid))),
        );
        let rows: Vec<Row> = pids
            .iter()
            .flat_map(|(scope, pids)| {
                sample_scope(&self.root, &ctx, *scope, pids, Depth::Mappings).mapping_rows
            })
            .collect();
        self.write(&rows)
    }

    /// Whatever happened, do not leave the command's daemons behind (a
    /// fresh walk: a survivor may have forked since the last one).
    fn stop_survivors(&mut self) {
        let survivors = survivors(&self.root, self.me);
        if survivors.is_empty() {
            return;
        }
        if self.plan.keep_survivors {
            self.outcome.notes.push(format!(
                "left {} the command started running (--keep-survivors): {}",
                crate::units::counted(survivors.len() as u64, "process", "processes"),
                pid_list(&survivors)
            ));
            return;
        }
        let (root, me) = (&self.root, self.me);
        let interrupt = self.interrupt;
        let mut stopped = reaper::stop(
            || survivors_of(root, me),
            STOP_GRACE,
            || interrupt.hurried(),
        );
        // The cgroup knows what the tree walk cannot see (a process that
        // escaped to another subreaper): freeze it, kill what is left.
        if let Some(cgroup) = &self.cgroup
            && !cgroup.pids().is_empty()
        {
            stopped
                .killed
                .extend(cgroup.kill_all(Duration::from_secs(2)));
            stopped.remaining = cgroup.pids();
        }
        if !stopped.killed.is_empty() {
            let waited = if interrupt.hurried() {
                "until a second interrupt".to_string()
            } else {
                format!("for {}s", STOP_GRACE.as_secs())
            };
            self.outcome.notes.push(format!(
                "processes the command left running ({}) ignored TERM {waited} and were killed",
                pid_list(&stopped.killed),
            ));
        }
        if !stopped.remaining.is_empty() {
            self.outcome.notes.push(format!(
                "processes the command left running ({}) could not be stopped and are still \
                 running",
                pid_list(&stopped.remaining)
            ));
            // The record stays, so the next session names them.
            self.record = None;
        }
    }

    /// Records this session, and warns about what killed sessions left.
    fn open_record(&mut self) {
        let Some(dir) = confine::records_dir() else {
            return;
        };
        for (old, left) in confine::leftovers(&dir, &self.root) {
            let names: Vec<String> = left
                .iter()
                .map(|l| format!("{} ({})", l.pid, l.comm))
                .collect();
            let note = format!(
                "processes left by an earlier leakwatch session ({}, pid {}, which did not \
                 stop them: killed?) are still running: {}; this command may talk to them \
                 (stop them with `kill {}`)",
                old.command,
                old.pid,
                names.join(", "),
                pid_list(&left.iter().map(|l| l.pid).collect::<Vec<_>>())
            );
            self.progress.line(&note);
            self.outcome.notes.push(note);
        }
        let start_time = self.root.stat(self.me).map(|s| s.start_time).unwrap_or(0);
        let record = Record {
            pid: self.me,
            start_time,
            command: self.name.clone(),
            cgroup: self.cgroup.as_ref().map(|c| c.path().to_path_buf()),
            survivors: Vec::new(),
        };
        record.save(&dir);
        self.record = Some((record, dir));
    }

    /// The survivors seen after a run, in the record.
    fn update_record(&mut self, rows: &[Row]) {
        let Some((record, dir)) = &mut self.record else {
            return;
        };
        let mut changed = false;
        for r in rows
            .iter()
            .filter(|r| r.scope == Scope::Survivors && r.is_process_sample())
        {
            if !record
                .survivors
                .iter()
                .any(|l| l.pid == r.pid && l.start_time == r.start_time)
            {
                record.survivors.push(confine::Left {
                    pid: r.pid,
                    start_time: r.start_time,
                    comm: r.comm.clone(),
                });
                changed = true;
            }
        }
        if changed {
            record.save(dir);
        }
    }

    /// Everything this session started is gone (or kept on purpose): its
    /// record and its cgroup go too.
    fn close_record(&mut self) {
        if let Some(cgroup) = &self.cgroup {
            cgroup.remove();
        }
        if let Some((record, dir)) = &self.record {
            record.remove(dir);
        }
    }

    /// Stops the command and what it started (TERM, then KILL).
    fn stop_tree(&self, pid: u32) {
        let root = &self.root;
        let interrupt = self.interrupt;
        reaper::stop(
            || live(root, root.tree(pid)),
            STOP_GRACE,
            || interrupt.hurried(),
        );
    }

    /// Polls the command's tree (cheap tier) every `interval` until the
    /// command is reaped, checking for its exit every few milliseconds so a
    /// short command is not charged a whole interval. An interrupted or
    /// timed-out command is stopped with its tree. Also returns the
    /// command's own VmHWM as last polled: its peak up to that poll (none
    /// from a poll between its exec and its loader, `Row::is_mid_exec`).
    fn poll_command(&mut self, pid: u32, run: u32) -> Result<(PollEnd, u64), SampleError> {
        const EXIT_CHECK: Duration = Duration::from_millis(2);
        // Most commands that talk to a daemon exit within milliseconds: poll
        // at every exit check for the first 200 ms so their VmHWM is read
        // shortly before they exit, then at the user's interval.
        const FAST_START: Duration = Duration::from_millis(200);
        let interval = self.plan.interval;
        let started = Instant::now();
        let mut next_sample = Instant::now();
        let mut polled_hwm = 0;
        loop {
            let mut reaped = reaper::reap_all();
            let ours = reaped.remove(&pid);
            self.record_exits(&reaped, run)?;
            if let Some(ours) = ours {
                return Ok((PollEnd::Exited(ours), polled_hwm));
            }
            if let Some(limit) = self.plan.timeout.filter(|&t| started.elapsed() >= t) {
                self.stop_tree(pid);
                return Ok((PollEnd::TimedOut(limit), polled_hwm));
            }
            if Instant::now() >= next_sample {
                let ctx = self.clock.context(Some(run));
                let tree = self.root.tree(pid);
                let rows = sample_scope(&self.root, &ctx, Scope::Command, &tree, Depth::Cheap).rows;
                if let Some(hwm) = rows
                    .iter()
                    .find(|r| r.pid == pid && !r.is_mid_exec())
                    .and_then(|r| r.hwm_bytes)
                {
                    polled_hwm = polled_hwm.max(hwm);
                }
                self.write(&rows)?;
                next_sample = if started.elapsed() < FAST_START {
                    Instant::now() + EXIT_CHECK
                } else {
                    next_sample.max(started + FAST_START) + interval
                };
            }
            if !self.interrupt.sleep(EXIT_CHECK.min(interval)) {
                self.stop_tree(pid);
                return Ok((PollEnd::Interrupted, polled_hwm));
            }
        }
    }

    /// Event rows for reaped processes other than the command: a daemon that
    /// crashed or exited between runs is part of the story, not noise.
    fn record_exits(&mut self, reaped: &HashMap<u32, Reaped>, run: u32) -> Result<(), SampleError> {
        if reaped.is_empty() {
            return Ok(());
        }
        let ctx = self.clock.context(Some(run));
        let rows: Vec<Row> = reaped
            .iter()
            .map(|(&pid, r)| {
                event_row(
                    &ctx,
                    Scope::Survivors,
                    pid,
                    "",
                    &format!("exited {}", r.exit.describe()),
                    Some(r.exit.code()),
                )
            })
            .collect();
        self.write(&rows)
    }

    /// Deep-samples each live watched process with its descendants (their
    /// mappings too at `Depth::Mappings`). A watched process that exited or
    /// whose pid was reused is recorded once and dropped.
    fn sample_watched(&mut self, ctx: &Context, depth: Depth) -> Vec<Row> {
        let mut events = Vec::new();
        let mut sampled = Scoped::default();
        for w in self.watched.iter_mut().filter(|w| w.alive) {
            let current = self.root.stat(w.pid).ok().filter(|s| s.state != 'Z');
            let event = match current {
                None => Some("exited"),
                Some(s) if s.start_time != w.start_time => Some("pid_reused"),
                Some(_) => None,
            };
            if let Some(event) = event {
                w.alive = false;
                events.push(event_row(ctx, w.scope(), w.pid, "", event, None));
                self.outcome.notes.push(format!(
                    "watched process {} {} before run {}; its series stops there",
                    w.pid,
                    if event == "exited" {
                        "exited"
                    } else {
                        "was replaced (pid reused)"
                    },
                    ctx.run.unwrap_or(0)
                ));
                continue;
            }
            let tree = watched_tree(&self.root, w.pid);
            sampled.extend(sample_scope(&self.root, ctx, w.scope(), &tree, depth));
        }
        self.note_denied(&sampled.denied);
        self.note_unreadable(&sampled.unreadable);
        events.extend(sampled.all_rows());
        events
    }

    /// Records once per process that it could not be read at all (it is then
    /// missing from its scope's sums).
    fn note_unreadable(&mut self, unreadable: &[(u32, String)]) {
        for (pid, why) in unreadable {
            if self.noted.insert(*pid) {
                self.outcome
                    .notes
                    .push(format!("process {pid} left out of its series: {why}"));
            }
        }
    }

    /// Records once per process that its PSS/USS could not be read.
    fn note_denied(&mut self, denied: &[u32]) {
        for &pid in denied {
            if self.noted.insert(pid) {
                self.outcome.notes.push(format!(
                    "no PSS/USS for process {pid}: /proc/{pid}/smaps_rollup needs ptrace-read \
                     access (run leakwatch as that process's user or as root); RSS and the \
                     other status fields are still sampled"
                ));
            }
        }
    }
}

/// The heaps read after each run: with the Node preload and `--metrics`
/// where there are, waiting up to 5 s for an endpoint's answer.
fn heaps(plan: &RunPlan, node: Option<NodePreload>, metrics: Option<MetricsEndpoint>) -> Heaps {
    let mut heaps = Heaps::new(plan.root.clone()).with_wait(Duration::from_secs(5));
    if plan.node_inspector {
        heaps = heaps.with_node_inspector(true);
        if let Some(interval) = plan.js_sites {
            heaps = heaps.with_js_sites(interval);
        }
    }
    if let Some(node) = node {
        heaps = heaps.with_node_preload(node);
    }
    if let Some(metrics) = metrics {
        heaps = heaps.with_metrics(metrics);
    }
    heaps
}

/// `, survivors RSS 31.4 MiB, pid:4242 RSS 120 MiB` for the progress line.
fn scope_rss(rows: &[Row]) -> String {
    let mut totals: Vec<(Scope, u64)> = Vec::new();
    for row in rows.iter().filter(|r| r.is_process_sample()) {
        let rss = row.rss_bytes.unwrap_or(0);
        match totals.iter_mut().find(|(s, _)| *s == row.scope) {
            Some((_, total)) => *total += rss,
            None => totals.push((row.scope, rss)),
        }
    }
    totals
        .iter()
        .map(|(scope, rss)| format!(", {scope} RSS {}", format_bytes(*rss as f64)))
        .collect()
}

/// A watched process and its descendants, without leakwatch and its own
/// descendants (already the survivors) should it be one of them.
fn watched_tree(root: &ProcRoot, pid: u32) -> Vec<u32> {
    root.tree_without(pid, Some(std::process::id()))
}

/// Leakwatch's own descendants: what the runs left behind.
/// Processes below leakwatch but leakwatch itself and any session guardian
/// (`leakwatch __guardian …`): one re-parents to leakwatch when leakwatch is
/// PID 1 of a container or runs inside another leakwatch session.
fn survivors(root: &ProcRoot, me: u32) -> Vec<u32> {
    root.tree(me)
        .into_iter()
        .filter(|&p| p != me && !is_guardian(root, p))
        .collect()
}

/// Whether `pid` runs `… __guardian …` as its second argument.
fn is_guardian(root: &ProcRoot, pid: u32) -> bool {
    root.cmdline(pid).is_ok_and(|argv| {
        argv.split(|&b| b == 0)
            .nth(1)
            .is_some_and(|arg| arg == guardian::SUBCOMMAND.as_bytes())
    })
}

/// The survivors that are still running (not zombies awaiting a reap).
fn survivors_of(root: &ProcRoot, me: u32) -> Vec<u32> {
    live(root, survivors(root, me))
}

fn live(root: &ProcRoot, pids: Vec<u32>) -> Vec<u32> {
    pids.into_iter().filter(|&p| root.alive(p)).collect()
}

fn pid_list(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The command line as a shell would show it: arguments with spaces or
/// quotes single-quoted.
fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            let plain = !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
            if plain {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_resolved_like_execvp() {
        assert!(resolve_program("sh").is_ok());
        assert!(matches!(
            resolve_program("no-such-program-xyz"),
            Err(ResolveError::CommandNotFound(_))
        ));
        assert!(matches!(
            resolve_program("./no/such/file"),
            Err(ResolveError::CommandMissing(_))
        ));
    }

    #[test]
    fn command_lines_are_quoted_like_a_shell() {
        let words = ["echo", "a b", "it's"].map(String::from);
        assert_eq!(shell_words(&words), r"echo 'a b' 'it'\''s'");
    }
}
