//! Python allocation sites (`run --py-sites`) as series: per scope and site,
//! the growth a site showed run after run, pooled over the processes that
//! hold it. A process that exits (a recycled worker) takes its memory with
//! it, but what grew while it lived still counts; a new one starts from what
//! it holds at its first answer. So a leak that recycling keeps hidden in
//! the totals still shows as growth per run, here as in the worker findings.
//! Live objects by type (objgraph's table) are pooled the same way, their
//! count and their `sys.getsizeof` bytes each a series.

use std::collections::BTreeMap;

use crate::store::{Row, Scope, SiteSource, Tier};

pub use crate::store::TRACEMALLOC_SITE as TRACEMALLOC;
pub use crate::store::UNTRACKED_TYPE as UNTRACKED;

/// One site of one scope over the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteSeries {
    pub scope: Scope,
    /// The tracer that found it.
    pub source: SiteSource,
    /// `file:line` of the innermost user frame.
    pub site: String,
    /// (run, growth since the site was first seen, bytes), one per run;
    /// over time (`attach --native-sites`) x is in hours since the session
    /// began, one point per answer.
    pub points: Vec<(f64, f64)>,
    /// Bytes the site holds in the processes that answered last.
    pub last_bytes: u64,
    /// Processes the site was seen in.
    pub processes: usize,
    /// The largest traceback seen for it, innermost first, one frame a line.
    pub traceback: Option<String>,
    /// Each process's own (run, bytes) points, a forked one's starting from
    /// what its parent held: per-task growth steps are read from these.
    pub lives: Vec<Vec<(f64, f64)>>,
    /// x is hours since the session began (`attach --native-sites`), not runs.
    pub per_hour: bool,
}

#[derive(Debug, Clone, Default)]
struct Building {
    /// point (run, or sample over time) → (x, growth since the last point,
    /// summed over processes).
    growth: BTreeMap<u64, (f64, f64)>,
    /// (pid, start time) → bytes at its last answer.
    held: BTreeMap<(u32, u64), u64>,
    /// (pid, start time) → its (run, bytes) points.
    lives: BTreeMap<(u32, u64), Vec<(f64, f64)>>,
    traceback: Option<String>,
    /// Its points are over time (x in hours), not runs.
    per_hour: bool,
}

/// Most processes whose own points a site keeps (a pool recycling workers
/// for hours has thousands; the first ones tell the per-task growth).
const MAX_LIVES: usize = 256;

/// One type name of one scope over the runs: its live objects and their
/// bytes, each pooled as a site's bytes are (`SiteSeries::site` holds the
/// type name).
#[derive(Debug, Clone, PartialEq)]
pub struct TypeSeries {
    pub count: SiteSeries,
    pub bytes: SiteSeries,
}

/// A site or type of one scope, as one tracer names it: two tracers'
/// sites stay apart even when their names are alike.
type Key = (Scope, SiteSource, String);

/// Gathers site and type rows as they are read. (Cloned with the `Builder`
/// by `attach --serve`'s refits.)
#[derive(Debug, Clone, Default)]
pub struct Sites {
    sites: BTreeMap<Key, Building>,
    type_counts: BTreeMap<Key, Building>,
    type_bytes: BTreeMap<Key, Building>,
    /// What tracing itself cost, per scope: (run, sum over its processes
    /// in that run, the largest such sum).
    overhead: BTreeMap<Scope, (u32, u64, u64)>,
}

/// What tracing cost one scope's processes (tracemalloc's own memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Overhead {
    pub scope: Scope,
    pub bytes: u64,
}

impl Sites {
    pub fn push(&mut self, row: &Row) {
        // Run mode: one point per run. Over time (attach): one per sample,
        // x in hours, so a site's rate reads per hour as the other series'
        // do and the fits' floor (64 KiB per x) is per hour as theirs is.
        let at = match row.run {
            Some(run) => Point {
                key: u64::from(run),
                x: f64::from(run),
                before: 0.5,
                per_hour: false,
            },
            None => Point {
                key: row.sample,
                x: row.t_seconds / 3600.0,
                before: 1.0 / 3600.0,
                per_hour: true,
            },
        };
        let run = row.run.unwrap_or(0);
        let source = row.site_source.unwrap_or_default();
        if row.event.as_deref() == Some("traceback") {
            let (site, frames) = row.comm.split_once('\n').unwrap_or((&row.comm, ""));
            let b = self
                .sites
                .entry((row.scope, source, site.to_string()))
                .or_default();
            b.traceback = Some(frames.to_string());
            return;
        }
        let bytes = row.site_bytes.unwrap_or(0);
        if row.tier == Tier::Type {
            let key = (row.scope, source, row.comm.clone());
            let count = row.objects.unwrap_or(0);
            self.type_counts
                .entry(key.clone())
                .or_default()
                .add(at, row, count);
            self.type_bytes.entry(key).or_default().add(at, row, bytes);
            return;
        }
        if row.comm == TRACEMALLOC {
            let (at, sum, max) = self.overhead.entry(row.scope).or_insert((run, 0, 0));
            if *at != run {
                (*at, *sum) = (run, 0);
            }
            *sum += bytes;
            *max = (*max).max(*sum);
            return;
        }
        self.sites
            .entry((row.scope, source, row.comm.clone()))
            .or_default()
            .add(at, row, bytes);
    }

    pub fn finish(self) -> (Vec<SiteSeries>, Vec<Overhead>, Vec<TypeSeries>) {
        let series = finish_all(self.sites);
        let types = finish_all(self.type_counts)
            .into_iter()
            .zip(finish_all(self.type_bytes))
            .map(|(count, bytes)| TypeSeries { count, bytes })
            .collect();
        let overhead = self
            .overhead
            .into_iter()
            .map(|(scope, (_, _, bytes))| Overhead { scope, bytes })
            .collect();
        (series, overhead, types)
    }
}

/// Where a row's value goes: its point's key and x, and how far before x
/// a process forked since the last point is put at its parent's value.
#[derive(Debug, Clone, Copy)]
struct Point {
    key: u64,
    x: f64,
    before: f64,
    per_hour: bool,
}

impl Building {
    /// One process' value at point `at`.
    fn add(&mut self, at: Point, row: &Row, value: u64) {
        let (b, bytes) = (self, value);
        b.per_hour |= at.per_hour;
        // A process seen for the first time grew from what its parent held
        // when it forked it (a worker inherits its master's traces), if its
        // parent is followed too; else its history is unknown: no growth.
        let parent = b
            .held
            .iter()
            .find(|(k, _)| k.0 == row.ppid)
            .map(|(_, &held)| held);
        let before = b.held.insert((row.pid, row.start_time), bytes);
        let delta = match (before, parent) {
            (Some(old), _) => bytes as f64 - old as f64,
            (None, Some(parent)) => bytes as f64 - parent as f64,
            (None, None) => 0.0,
        };
        b.growth.entry(at.key).or_insert((at.x, 0.0)).1 += delta;
        let key = (row.pid, row.start_time);
        if b.lives.contains_key(&key) || b.lives.len() < MAX_LIVES {
            let life = b.lives.entry(key).or_default();
            if let (true, Some(parent)) = (life.is_empty(), parent.filter(|_| before.is_none())) {
                // Forked since the last run: it started from its parent's.
                life.push((at.x - at.before, parent as f64));
            }
            life.push((at.x, bytes as f64));
        }
    }
}

/// The series of every key that has points, in key order.
fn finish_all(map: BTreeMap<Key, Building>) -> Vec<SiteSeries> {
    map.into_iter()
        .filter(|(_, b)| !b.growth.is_empty())
        .map(|((scope, source, site), b)| {
            let mut total = 0.0;
            let points = b
                .growth
                .values()
                .map(|&(x, g)| {
                    total += g;
                    (x, total)
                })
                .collect();
            SiteSeries {
                scope,
                source,
                site,
                points,
                last_bytes: b.held.values().sum(),
                processes: b.held.len(),
                traceback: b.traceback,
                lives: b.lives.into_values().collect(),
                per_hour: b.per_hour,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Tier;

    fn site(run: u32, pid: u32, site: &str, bytes: u64) -> Row {
        Row {
            run: Some(run),
            pid,
            start_time: u64::from(pid),
            comm: site.into(),
            tier: Tier::Site,
            site_bytes: Some(bytes),
            ..Row::new(Scope::Pid(1))
        }
    }

    #[test]
    fn growth_is_pooled_over_recycled_workers() {
        const M: u64 = 1 << 20;
        // Worker 10 keeps 1 MiB per run for runs 1-3, then is replaced by
        // worker 11, which starts from 1 MiB and keeps going.
        let rows = [
            site(1, 10, "app.py:71", M),
            site(2, 10, "app.py:71", 2 * M),
            site(3, 10, "app.py:71", 3 * M),
            site(4, 11, "app.py:71", M),
            site(5, 11, "app.py:71", 2 * M),
            site(6, 11, "app.py:71", 3 * M),
        ];
        let mut sites = Sites::default();
        for r in &rows {
            sites.push(r);
        }
        let (series, _, _) = sites.finish();
        let ys: Vec<f64> = series[0].points.iter().map(|p| p.1 / M as f64).collect();
        assert_eq!(ys, [0.0, 1.0, 2.0, 2.0, 3.0, 4.0]);
        assert_eq!(series[0].processes, 2);
    }

    #[test]
    fn over_time_a_sites_points_are_its_answers_in_hours() {
        const M: u64 = 1 << 20;
        let mut sites = Sites::default();
        for (sample, t, bytes) in [(3, 0.0, 5 * M), (7, 1800.0, 6 * M), (11, 3600.0, 7 * M)] {
            sites.push(&Row {
                run: None,
                sample,
                t_seconds: t,
                ..site(0, 10, "leak (a.c:3)", bytes)
            });
        }
        let (series, _, _) = sites.finish();
        let points: Vec<(f64, f64)> = series[0]
            .points
            .iter()
            .map(|&(x, y)| (x, y / M as f64))
            .collect();
        // Growth from the first answer (the attach), per hour.
        assert_eq!(points, [(0.0, 0.0), (0.5, 1.0), (1.0, 2.0)]);
    }

    #[test]
    fn type_rows_become_a_count_and_a_bytes_series() {
        let kind = |run: u32, pid: u32, objects: u64| Row {
            tier: Tier::Type,
            objects: Some(objects),
            ..site(run, pid, "__main__.Parser", objects * 56)
        };
        let mut sites = Sites::default();
        for run in 1..=4 {
            sites.push(&kind(run, 10, 1000 * u64::from(run)));
        }
        sites.push(&site(1, 10, "app.py:3", 100));
        let (lines, _, types) = sites.finish();
        assert_eq!(lines.len(), 1, "sites and types stay apart");
        let t = &types[0];
        assert_eq!(t.count.site, "__main__.Parser");
        let counts: Vec<f64> = t.count.points.iter().map(|p| p.1).collect();
        assert_eq!(counts, [0.0, 1000.0, 2000.0, 3000.0]);
        assert_eq!(t.bytes.points.last(), Some(&(4.0, 3000.0 * 56.0)));
        assert_eq!((t.count.last_bytes, t.bytes.last_bytes), (4000, 4000 * 56));
    }
}
