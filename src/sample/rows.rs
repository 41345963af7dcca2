//! The rows sampling writes: the clock and context every row of a batch
//! shares, and one builder per kind of row — a process's cheap row (the
//! run driver's reads and the attached tree's sweeps alike), made deep by
//! its page walk, a mapping's row, an event row.

use std::time::Instant;

use super::procfs::{Mapping, ProcSample, Rollup, Status};
use crate::store::{Row, Scope, Tier};

/// Where and when a batch of samples was taken.
#[derive(Debug, Clone)]
pub struct Context {
    pub sample: u64,
    pub run: Option<u32>,
    pub t_seconds: f64,
    pub timestamp: String,
    /// The instant `t_seconds` was read.
    pub at: Instant,
}

impl Context {
    /// This context, its time moved to now (rows read later in the batch: an answer that
    /// came after the batch's page walks).
    pub fn now(&self) -> Context {
        Context {
            t_seconds: self.t_seconds + self.at.elapsed().as_secs_f64(),
            ..self.clone()
        }
    }

    /// A row of this batch for `scope`, with nothing measured yet.
    pub fn row(&self, scope: Scope) -> Row {
        Row {
            sample: self.sample,
            run: self.run,
            t_seconds: self.t_seconds,
            timestamp: self.timestamp.clone(),
            ..Row::new(scope)
        }
    }
}

/// The clock of one leakwatch session: sample numbers and seconds since start.
pub struct Clock {
    start: Instant,
    next_sample: u64,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Clock {
            start: Instant::now(),
            next_sample: 0,
        }
    }

    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// A fresh context for the next batch of rows.
    pub fn context(&mut self, run: Option<u32>) -> Context {
        let sample = self.next_sample;
        self.next_sample += 1;
        Context {
            sample,
            run,
            t_seconds: self.elapsed(),
            timestamp: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            at: Instant::now(),
        }
    }
}

/// Who a row is about: with its start time, a pid names one process.
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    pub pid: u32,
    pub ppid: u32,
    pub start_time: u64,
    pub comm: &'a str,
}

/// The cheap row of one process for `scope`: `status`'s memory by kind,
/// its threads and its open fds.
pub fn cheap_row(ctx: &Context, scope: Scope, who: Who<'_>, s: &Status, fds: Option<u64>) -> Row {
    Row {
        pid: who.pid,
        ppid: who.ppid,
        start_time: who.start_time,
        comm: who.comm.to_string(),
        tier: Tier::Cheap,
        rss_bytes: s.rss_bytes,
        anon_bytes: s.anon_bytes,
        file_bytes: s.file_bytes,
        shmem_bytes: s.shmem_bytes,
        swap_bytes: s.swap_bytes,
        hwm_bytes: s.hwm_bytes,
        threads: s.threads,
        fds,
        ..ctx.row(scope)
    }
}

/// A process read once as its row for `scope`: cheap, made deep when its
/// page walk was read.
pub fn process_row(ctx: &Context, scope: Scope, s: &ProcSample) -> Row {
    let who = Who {
        pid: s.pid,
        ppid: s.ppid,
        start_time: s.start_time,
        comm: &s.comm,
    };
    let mut row = cheap_row(ctx, scope, who, &s.status, s.fds);
    if let Some(r) = &s.rollup {
        fill_deep(&mut row, r);
    }
    row
}

/// Makes a cheap row deep: the rollup's figures (read from `smaps_rollup`,
/// or summed from `smaps`).
pub fn fill_deep(row: &mut Row, r: &Rollup) {
    row.tier = Tier::Deep;
    row.pss_bytes = Some(r.pss_bytes);
    row.pss_anon_bytes = r.pss_anon_bytes;
    row.pss_file_bytes = r.pss_file_bytes;
    row.pss_shmem_bytes = r.pss_shmem_bytes;
    row.shared_clean_bytes = Some(r.shared_clean_bytes);
    row.shared_dirty_bytes = Some(r.shared_dirty_bytes);
    row.private_clean_bytes = Some(r.private_clean_bytes);
    row.private_dirty_bytes = Some(r.private_dirty_bytes);
    row.uss_bytes = Some(r.uss_bytes());
    row.shared_bytes = Some(r.shared_bytes());
    row.swap_pss_bytes = r.swap_pss_bytes;
}

/// The row of one mapping name of one process.
pub fn mapping_row(
    ctx: &Context,
    scope: Scope,
    pid: u32,
    ppid: u32,
    start_time: u64,
    m: &Mapping,
) -> Row {
    Row {
        pid,
        ppid,
        start_time,
        comm: m.name.clone(),
        tier: Tier::Mapping,
        rss_bytes: Some(m.rss_bytes),
        pss_bytes: Some(m.pss_bytes),
        anon_bytes: Some(m.anon_bytes),
        private_dirty_bytes: Some(m.private_dirty_bytes),
        swap_bytes: Some(m.swap_bytes),
        ..ctx.row(scope)
    }
}

/// An event row: a run starting or ending, a process exiting, a pid reused.
pub fn event_row(
    ctx: &Context,
    scope: Scope,
    pid: u32,
    comm: &str,
    event: &str,
    exit_code: Option<i32>,
) -> Row {
    Row {
        pid,
        comm: comm.to_string(),
        tier: Tier::Event,
        event: Some(event.to_string()),
        exit_code,
        ..ctx.row(scope)
    }
}
