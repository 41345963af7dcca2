//! `run --py-sites`: after each run's deep sample, every instrumented Python
//! process of the followed scopes is asked for its allocation sites, and the
//! answers become `site` rows of samples.csv (see `super::PySites` for the
//! asking), and their live objects by type `type` rows.

use std::collections::BTreeSet;
use std::time::Duration;

use super::wire::{Frame, Snapshot};
use super::{PySites, Silence};
use crate::sample::rows::Context;
use crate::sample::sites::Collected;
use crate::store::{HeapSource, Row, Scope, TRACEMALLOC_SITE as TRACEMALLOC, Tier, UNTRACKED_TYPE};

/// What the session remembers between runs.
#[derive(Debug, Default)]
pub struct SiteSession {
    /// (scope, site) whose traceback is already in samples.csv.
    tracebacks: BTreeSet<(Scope, String)>,
    /// Processes already checked for why they did not answer.
    diagnosed: BTreeSet<u32>,
    /// `attach --py-sites`: the process entered (the others were not started
    /// by leakwatch either, and are explained so).
    attached: Option<u32>,
}

/// `file:line`, with every control character of the file name (a newline
/// included: it would forge a frame or a stderr line) shown escaped.
fn site_name(frame: &Frame) -> String {
    format!("{}:{}", crate::escape::inert(&frame.file), frame.line)
}

impl SiteSession {
    /// The session of `attach --py-sites PID`.
    pub fn attached(pid: u32) -> SiteSession {
        SiteSession {
            attached: Some(pid),
            ..SiteSession::default()
        }
    }

    /// Asks every instrumented process for its sites after `run`, each
    /// within `timeout`; `sampled` are the rows of this run's deep sample
    /// (which scope each pid is in). Returns the rows, and notes for Python
    /// processes that did not answer.
    pub fn collect(
        &mut self,
        sites: &PySites,
        ctx: &Context,
        sampled: &[Row],
        timeout: Duration,
    ) -> Collected {
        let run = ctx.run.unwrap_or(0);
        let mut rows = Vec::new();
        let mut answered = BTreeSet::new();
        for report in sites.collect(run, timeout) {
            let (Ok(snapshot), Some(process)) = (
                report.answer,
                sampled
                    .iter()
                    .find(|r| r.pid == report.pid && r.is_process_sample()),
            ) else {
                continue;
            };
            answered.insert(report.pid);
            rows.extend(self.rows_of(ctx, process, &snapshot));
        }
        let notes = self.silent(sites, sampled, &answered);
        Collected { rows, notes }
    }

    /// One row per listed site, its traceback the first time, and what
    /// tracing costs the process.
    fn rows_of(&mut self, ctx: &Context, process: &Row, snapshot: &Snapshot) -> Vec<Row> {
        let row = |comm: String, bytes: u64, blocks: Option<u64>| Row {
            site_blocks: blocks,
            ..crate::sample::sites::site_row(ctx, process, comm, bytes)
        };
        let mut rows = vec![row(
            TRACEMALLOC.to_string(),
            snapshot.totals.tracemalloc_bytes,
            None,
        )];
        for site in &snapshot.by_line.sites {
            let name = site_name(&site.frame);
            if self.tracebacks.insert((process.scope, name.clone())) {
                rows.push(Row {
                    event: Some("traceback".into()),
                    ..row(traceback(snapshot, &site.frame, &name), 0, None)
                });
            }
            rows.push(row(name, site.bytes, Some(site.blocks)));
        }
        // The memory the program's objects hold, as tracemalloc traces it
        // (the bootstrap's own blocks left out): the process's heap in use.
        rows.push(Row {
            comm: process.comm.clone(),
            tier: Tier::Heap,
            heap_used_bytes: Some(
                snapshot
                    .totals
                    .traced_bytes
                    .saturating_sub(snapshot.totals.self_bytes),
            ),
            heap_source: Some(HeapSource::Tracemalloc),
            site_bytes: None,
            ..row(String::new(), 0, None)
        });
        rows.extend(type_rows(snapshot).map(|(name, objects, bytes)| Row {
            tier: Tier::Type,
            objects: Some(objects),
            ..row(crate::escape::inert(&name).into_owned(), bytes, None)
        }));
        rows
    }

    /// Python processes of the followed scopes that did not answer, each
    /// noted once with the reason (`-I`, `-E`, a replaced environment …).
    fn silent(
        &mut self,
        sites: &PySites,
        sampled: &[Row],
        answered: &BTreeSet<u32>,
    ) -> Vec<String> {
        let mut notes = Vec::new();
        let pids: BTreeSet<u32> = sampled
            .iter()
            .filter(|r| r.is_process_sample() && r.scope != Scope::Command)
            .map(|r| r.pid)
            .collect();
        for pid in pids {
            if answered.contains(&pid) || !self.diagnosed.insert(pid) {
                continue;
            }
            match sites.diagnose(pid) {
                Silence::NotPython { .. } | Silence::Exited => {}
                Silence::NotStarted if self.attached.is_some() => notes.push(format!(
                    "Python process {pid} is not instrumented by --py-sites: leakwatch entered {} \
                     and the Python processes below it at the attach (and the children they \
                     fork since); attach to {pid} itself to see its lines",
                    self.attached.unwrap_or_default()
                )),
                why => notes.push(format!(
                    "Python process {pid} is not instrumented by --py-sites: {why}"
                )),
            }
        }
        notes
    }
}

/// (type name, objects, bytes) of each listed type, then what no tracked
/// object covers.
fn type_rows(snapshot: &Snapshot) -> impl Iterator<Item = (String, u64, u64)> + '_ {
    snapshot.by_type.iter().flat_map(|t| {
        t.rows
            .iter()
            .map(|r| (r.name.clone(), r.count, r.bytes))
            .chain([(
                UNTRACKED_TYPE.to_string(),
                t.untracked_count,
                t.untracked_bytes,
            )])
    })
}

/// The site, then the frames of its largest traceback, innermost first.
fn traceback(snapshot: &Snapshot, frame: &Frame, name: &str) -> String {
    let best = snapshot
        .by_traceback
        .sites
        .iter()
        .filter(|t| t.frames.contains(frame))
        .max_by_key(|t| t.bytes);
    let frames: Vec<String> = match best {
        Some(t) => t.frames.iter().map(with_source).collect(),
        None => vec![with_source(frame)],
    };
    format!("{name}\n{}", frames.join("\n"))
}

/// `file:line  code`: the frame with its source line, read now (the session
/// runs where the code is; a report rebuilt elsewhere keeps the text).
fn with_source(frame: &Frame) -> String {
    let code = std::fs::read_to_string(&frame.file).ok().and_then(|text| {
        let line = text
            .lines()
            .nth(frame.line.checked_sub(1)? as usize)?
            .trim();
        (!line.is_empty())
            .then(|| crate::escape::inert(&line.chars().take(120).collect::<String>()).into_owned())
    });
    match code {
        Some(code) => format!("{}    {code}", site_name(frame)),
        None => site_name(frame),
    }
}
