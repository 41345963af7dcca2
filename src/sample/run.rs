//! `leakwatch run`: run a command N times as a child subreaper; per run poll
//! the command tree for its peak, then, after a settle delay, deep-sample the
//! survivors (what this and earlier runs left behind) and each watched PID.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::proc::ProcRoot;
use super::reaper::{self, Interrupt, Reaped};
use super::{Clock, Outcome, Progress, SampleError, event_row, mapping_rows, sample_scope};
use crate::options::RunOptions;
use crate::series::store::{Row, SampleWriter};
use crate::units::{format_bytes, format_duration};

/// How long survivors get between TERM and KILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// A `--watch` process, identified by pid and start time.
struct Watched {
    pid: u32,
    start_time: u64,
    alive: bool,
}

impl Watched {
    fn scope(&self) -> String {
        format!("pid:{}", self.pid)
    }
}

pub fn run(
    opts: &RunOptions,
    writer: &mut SampleWriter,
    interrupt: &Interrupt,
    progress: &Progress,
) -> Result<Outcome, SampleError> {
    reaper::become_subreaper().map_err(SampleError::Subreaper)?;
    let root = ProcRoot::default();
    let me = std::process::id();
    let mut clock = Clock::new();
    let mut outcome = Outcome::default();
    let mut noted = BTreeSet::new();

    let mut watched: Vec<Watched> = opts
        .watch
        .iter()
        .map(|&pid| Watched {
            pid,
            start_time: root.stat(pid).map(|s| s.start_time).unwrap_or(0),
            alive: true,
        })
        .collect();

    // Run 0: the watched processes before the first run, a baseline point.
    if !watched.is_empty() {
        let ctx = clock.context(Some(0));
        let mut rows = sample_watched(&root, &ctx, &mut watched, &mut outcome, &mut noted);
        rows.extend(watched_mappings(&root, &ctx, &watched));
        writer.write_batch(&rows)?;
    }

    let result = run_loop(
        opts,
        writer,
        interrupt,
        progress,
        &root,
        me,
        &mut clock,
        &mut watched,
        &mut outcome,
        &mut noted,
    );

    // Mappings at the end, for attribution: what grew since the first run.
    // (A write error is returned after the survivors are stopped.)
    let mut result = result;
    if let Ok(Some(last)) = result {
        let ctx = clock.context(Some(last));
        let mut rows = mapping_rows(&root, &ctx, "survivors", &survivors(&root, me));
        rows.extend(watched_mappings(&root, &ctx, &watched));
        if let Err(e) = writer.write_batch(&rows) {
            result = Err(e.into());
        }
    }

    // Whatever happened, do not leave the command's daemons behind (a fresh
    // walk: a survivor may have forked since the last one).
    let survivors = survivors(&root, me);
    if opts.keep_survivors {
        if !survivors.is_empty() {
            outcome.notes.push(format!(
                "left {} survivor(s) running (--keep-survivors): {}",
                survivors.len(),
                pid_list(&survivors)
            ));
        }
    } else if !survivors.is_empty() {
        let killed = reaper::stop(&survivors, STOP_GRACE, |p| root.alive(p));
        if !killed.is_empty() {
            outcome.notes.push(format!(
                "survivor(s) {} ignored TERM for {}s and were killed",
                pid_list(&killed),
                STOP_GRACE.as_secs()
            ));
        }
    }
    result.map(|_| outcome)
}

/// `, survivors RSS 31.4 MiB, pid:4242 RSS 120 MiB` for the progress line.
fn scope_rss(rows: &[Row]) -> String {
    let mut totals: Vec<(&str, u64)> = Vec::new();
    for row in rows.iter().filter(|r| r.is_process_sample()) {
        let rss = row.rss_bytes.unwrap_or(0);
        match totals.iter_mut().find(|(s, _)| *s == row.scope) {
            Some((_, total)) => *total += rss,
            None => totals.push((&row.scope, rss)),
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
fn survivors(root: &ProcRoot, me: u32) -> Vec<u32> {
    root.tree(me).into_iter().filter(|&p| p != me).collect()
}

fn pid_list(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[allow(clippy::too_many_arguments)]
fn run_loop(
    opts: &RunOptions,
    writer: &mut SampleWriter,
    interrupt: &Interrupt,
    progress: &Progress,
    root: &ProcRoot,
    me: u32,
    clock: &mut Clock,
    watched: &mut [Watched],
    outcome: &mut Outcome,
    noted: &mut BTreeSet<u32>,
) -> Result<Option<u32>, SampleError> {
    let name = shell_words(&opts.command_line);
    let mut completed = None;
    for run in 1..=opts.repeat {
        if interrupt.is_set() {
            outcome.interrupted = true;
            return Ok(completed);
        }
        let started = Instant::now();
        let child = Command::new(&opts.program)
            .args(&opts.args)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|error| SampleError::Spawn {
                program: opts.program.display().to_string(),
                error,
            })?;
        let pid = child.id();
        // `child` is never waited on through std: reap_all() collects its
        // status together with the orphans'.
        drop(child);
        writer.write_batch(&[event_row(
            &clock.context(Some(run)),
            "command",
            pid,
            &name,
            "run_start",
            None,
        )])?;

        let (reaped, polled_hwm) =
            poll_command(pid, run, opts.interval, writer, interrupt, root, clock)?;
        let ran_for = started.elapsed();
        let ctx = clock.context(Some(run));
        let Some(reaped) = reaped else {
            writer.write_batch(&[event_row(
                &ctx,
                "command",
                pid,
                &name,
                "run_end interrupted",
                None,
            )])?;
            outcome.interrupted = true;
            return Ok(completed);
        };
        let exit = reaped.exit;
        let end = event_row(
            &ctx,
            "command",
            pid,
            &name,
            &format!("run_end {}", exit.describe()),
            Some(exit.code()),
        );
        // The command's peak as one more command sample: a short command can
        // exit between two polls. The kernel's ru_maxrss also counts the mm
        // the child had before exec — leakwatch's own, since spawn uses
        // vfork — so it is only believed above leakwatch's own peak; below
        // that, the last polled VmHWM is the best we have.
        let own_hwm = root.status(me).ok().and_then(|s| s.hwm_bytes).unwrap_or(0);
        let kernel_peak = Some(reaped.max_rss_bytes).filter(|&p| p > own_hwm);
        let peak_bytes = kernel_peak.unwrap_or(0).max(polled_hwm);
        let peak = (peak_bytes > 0).then(|| Row {
            tier: crate::series::store::Tier::Cheap,
            event: Some("peak".into()),
            exit_code: None,
            rss_bytes: Some(peak_bytes),
            hwm_bytes: Some(peak_bytes),
            ..end.clone()
        });
        writer.write_batch(&[end])?;
        writer.write_batch(peak.as_slice())?;

        // Let the daemon finish what the command asked of it.
        let settled = interrupt.sleep(opts.settle);
        record_exits(&reaper::reap_all(), run, writer, clock)?;

        let ctx = clock.context(Some(run));
        let left_behind = survivors(root, me);
        let (mut rows, unreadable, denied) =
            sample_scope(root, &ctx, "survivors", &left_behind, true);
        note_denied(&denied, noted, outcome);
        note_unreadable(&unreadable, noted, outcome);
        rows.extend(sample_watched(root, &ctx, watched, outcome, noted));
        if run == 1 {
            rows.extend(mapping_rows(root, &ctx, "survivors", &left_behind));
        }
        writer.write_batch(&rows)?;
        completed = Some(run);

        progress.step(
            u64::from(run),
            &format!(
                "run {run}/{}: {} in {}{}",
                opts.repeat,
                exit.describe(),
                format_duration(ran_for),
                scope_rss(&rows)
            ),
        );
        if !settled {
            outcome.interrupted = true;
            return Ok(completed);
        }
    }
    Ok(completed)
}

/// Mapping rows for every live watched process tree.
fn watched_mappings(root: &ProcRoot, ctx: &super::Context, watched: &[Watched]) -> Vec<Row> {
    watched
        .iter()
        .filter(|w| w.alive)
        .flat_map(|w| mapping_rows(root, ctx, &w.scope(), &watched_tree(root, w.pid)))
        .collect()
}

/// Polls the command's tree (cheap tier) every `interval` until the command
/// is reaped, checking for its exit every few milliseconds so a short command
/// is not charged a whole interval. Returns `None` when interrupted (the
/// command is then stopped).
fn poll_command(
    pid: u32,
    run: u32,
    interval: Duration,
    writer: &mut SampleWriter,
    interrupt: &Interrupt,
    root: &ProcRoot,
    clock: &mut Clock,
) -> Result<(Option<Reaped>, u64), SampleError> {
    const EXIT_CHECK: Duration = Duration::from_millis(2);
    // Most commands that talk to a daemon exit within milliseconds: poll at
    // every exit check for the first 200 ms so their VmHWM is read shortly
    // before they exit, then at the user's interval.
    const FAST_START: Duration = Duration::from_millis(200);
    let started = Instant::now();
    let mut next_sample = Instant::now();
    // The command's own VmHWM as last polled: its peak up to that poll.
    let mut polled_hwm = 0;
    loop {
        let mut reaped = reaper::reap_all();
        let ours = reaped.remove(&pid);
        record_exits(&reaped, run, writer, clock)?;
        if let Some(ours) = ours {
            return Ok((Some(ours), polled_hwm));
        }
        if Instant::now() >= next_sample {
            let ctx = clock.context(Some(run));
            let (rows, _, _) = sample_scope(root, &ctx, "command", &root.tree(pid), false);
            if let Some(hwm) = rows.iter().find(|r| r.pid == pid).and_then(|r| r.hwm_bytes) {
                polled_hwm = polled_hwm.max(hwm);
            }
            writer.write_batch(&rows)?;
            next_sample = if started.elapsed() < FAST_START {
                Instant::now() + EXIT_CHECK
            } else {
                next_sample.max(started + FAST_START) + interval
            };
        }
        if !interrupt.sleep(EXIT_CHECK.min(interval)) {
            reaper::stop(&[pid], STOP_GRACE, |p| root.alive(p));
            return Ok((None, polled_hwm));
        }
    }
}

/// Event rows for reaped processes other than the command: a daemon that
/// crashed or exited between runs is part of the story, not noise.
fn record_exits(
    reaped: &std::collections::HashMap<u32, Reaped>,
    run: u32,
    writer: &mut SampleWriter,
    clock: &mut Clock,
) -> Result<(), SampleError> {
    if reaped.is_empty() {
        return Ok(());
    }
    let ctx = clock.context(Some(run));
    let rows: Vec<Row> = reaped
        .iter()
        .map(|(&pid, r)| {
            event_row(
                &ctx,
                "survivors",
                pid,
                "",
                &format!("exited {}", r.exit.describe()),
                Some(r.exit.code()),
            )
        })
        .collect();
    writer.write_batch(&rows)?;
    Ok(())
}

/// Deep-samples each live watched process with its descendants. A watched
/// process that exited or whose pid was reused is recorded once and dropped.
fn sample_watched(
    root: &ProcRoot,
    ctx: &super::Context,
    watched: &mut [Watched],
    outcome: &mut Outcome,
    noted: &mut BTreeSet<u32>,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for w in watched.iter_mut().filter(|w| w.alive) {
        let scope = w.scope();
        let current = root.stat(w.pid).ok().filter(|s| s.state != 'Z');
        let event = match current {
            None => Some("exited"),
            Some(s) if s.start_time != w.start_time => Some("pid_reused"),
            Some(_) => None,
        };
        if let Some(event) = event {
            w.alive = false;
            rows.push(event_row(ctx, &scope, w.pid, "", event, None));
            outcome.notes.push(format!(
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
        let (r, unreadable, denied) =
            sample_scope(root, ctx, &scope, &watched_tree(root, w.pid), true);
        note_denied(&denied, noted, outcome);
        note_unreadable(&unreadable, noted, outcome);
        rows.extend(r);
    }
    rows
}

/// Records once per process that it could not be read at all (it is then
/// missing from its scope's sums).
fn note_unreadable(unreadable: &[(u32, String)], noted: &mut BTreeSet<u32>, outcome: &mut Outcome) {
    for (pid, why) in unreadable {
        if noted.insert(*pid) {
            outcome
                .notes
                .push(format!("process {pid} left out of its series: {why}"));
        }
    }
}

/// Records once per process that its PSS/USS could not be read.
fn note_denied(denied: &[u32], noted: &mut BTreeSet<u32>, outcome: &mut Outcome) {
    for &pid in denied {
        if noted.insert(pid) {
            outcome.notes.push(format!(
                "no PSS/USS for process {pid}: /proc/{pid}/smaps_rollup needs ptrace-read \
                 access (run leakwatch as that process's user or as root); RSS and the \
                 other status fields are still sampled"
            ));
        }
    }
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
