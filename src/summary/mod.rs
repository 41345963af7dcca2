//! The summary.json wire types (schema_version 1, the contract in
//! docs/summary-json.md), kept apart from the in-memory model so the
//! contract changes only on purpose. `report`
//! writes them; `check` reads them back as baselines.

use serde::{Deserialize, Serialize};

use crate::Analysis;
use crate::fit::findings::{Finding, RecycleAdvice, TreeTotal};
use crate::fit::heap::HeapReading;
use crate::fit::sites::{SiteFit, TypeFit};
use crate::fit::{Attribution, Projection, SeriesFit, Verdict};
use crate::gate::GateResult;
use crate::series::HeapProcess;
use crate::series::sites::Overhead;
use crate::store::{Scope, SiteSource};

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub schema_version: u32,
    /// `run` or `attach`.
    pub mode: String,
    /// The command line of `run` mode, as typed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The attached process of `attach` mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_pid: Option<u32>,
    /// What was attached to when it is not one PID: `cgroup /sys/fs/…`,
    /// `processes matching 'regex' (all, matched at each sample)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `analyze --prometheus`: the label set of each `series:<N>` name, as
    /// PromQL writes it (`{job="api",pod="api-7d9f"}`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub series_labels: std::collections::BTreeMap<String, String>,
    /// Runs completed (run mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<u32>,
    /// Seconds from the first to the last sample.
    pub duration_s: f64,
    pub interrupted: bool,
    /// The worst verdict over the followed processes' memory, fds and threads:
    /// `leak`, `inconclusive`, `plateau` or `stable`.
    pub verdict: String,
    /// The series the verdict is read from, `SERIES:METRIC` as `--gate-on`
    /// takes it (`survivors:anon_bytes`, `pid:4242:heap_live_bytes`); the
    /// stderr summary's last line names the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict_series: Option<String>,
    /// Warm-up handling: `auto` (detected per series) or the `--warmup` given.
    pub warmup: WarmupJson,
    /// Every fitted series (scope `name`, `metric`, `x`, slope with its CI, verdict …).
    pub series: Vec<SeriesFit>,
    /// Where the growth is, per followed scope.
    #[serde(default)]
    pub attribution: Vec<Attribution>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<Projection>,
    /// Process-tree findings: `cow_unsharing`, `leak` (in workers), `recycled`.
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// PSS sum vs RSS sum of each multi-process scope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trees: Vec<TreeTotal>,
    /// Recycle advice for worker pools under `--budget`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recycle: Vec<RecycleAdvice>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_table: Vec<RunJson>,
    /// Runs whose command did not exit 0: their points are kept (the daemon's
    /// memory after them is real) but they are listed here and in the report.
    #[serde(default)]
    pub failed_runs: Vec<u32>,
    #[serde(default)]
    pub notes: Vec<String>,
    /// Where in the code (`--py-sites`): Python allocation sites that leak
    /// (fastest first), grew and stopped, or hold much; their rate named for
    /// its unit ([`SiteFit::named_for_its_unit`]). (A summary.json
    /// written before `native_sites` existed has native sites here too,
    /// `source` `native`.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub py_sites: Vec<SiteFit>,
    /// Where in native code (`--native-sites`): C, C++ and Rust call
    /// stacks, each named by its first frame outside the allocator and the
    /// runtimes, that leak (fastest first), grew and stopped, or hold much.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub native_sites: Vec<NativeSite>,
    /// Where in JavaScript (`--js-sites`): functions, each named by the
    /// innermost frame of the program's own code, with `site`, `scope`,
    /// `verdict`, `bytes_per_run` and its `_ci95` (`bytes_per_hour` when
    /// attached), `traceback`, `source` `javascript`, as `py_sites` has them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub js_sites: Vec<SiteFit>,
    /// Which types grow, every runtime's (`runtime`: `python` from
    /// `--py-sites`, `java` from `--jvm-classes`): live objects by type or
    /// class that leak (classes of the program's own code first), grew and
    /// stopped, or are many.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<TypeFit>,
    /// The Python ones among `types`, as summaries before `types` existed
    /// had them (for their readers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub py_types: Vec<TypeFit>,
    /// tracemalloc's own memory in each scope's Python processes, bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub py_overhead: Vec<Overhead>,
    /// The processes whose runtime published its heap (`heap_live_bytes`,
    /// `heap_used_bytes`, `heap_max_bytes`), each with its scope (`name`),
    /// pid, name and `heap_source`: `hsperfdata` (a JVM), `node_preload`,
    /// `node_inspector`, `metrics` or `tracemalloc`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub heap_sources: Vec<HeapProcess>,
    /// Per scope with a heap: the heap and the kernel's view read together
    /// (`finding`: `managed`, `outside_heap`, `both`, `neither`), the rates,
    /// and when the live heap reaches its maximum (`x_to_max`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub heap: Vec<HeapReading>,
    /// Each `pid:<PID>` series (`run --watch`) with the name of the process
    /// it follows: `check --baseline` matches a restarted process by it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watched: Vec<Watched>,
    /// The gauge `run`/`attach --metric NAME` followed: its name; its
    /// series are metric `gauge` (a count) or `gauge_bytes` (a name ending
    /// in `_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gauge_name: Option<String>,
    /// What sampling cost and achieved (attach mode): samples taken and the
    /// mean interval between them, late samples, the cheap sweep's time,
    /// deep passes, page walks, their time and the longest single walk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<crate::store::SamplingCost>,
    /// The CI gate, when limits were given: `passed`, the `rule`, each
    /// check and the `violations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateResult>,
}

/// One native call stack's site (`--native-sites`), judged: summary.json's
/// `native_sites`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NativeSite {
    /// Its name: the first frame outside the allocator and the runtimes
    /// (malloc, `operator new`, `std::`, `alloc::`), `function (file:line)`,
    /// or `module+0xOFFSET` in a stripped binary without the symbol.
    pub site: String,
    /// The scope whose processes hold it (`survivors`, `pid:<PID>`, `target`).
    pub scope: Scope,
    /// Processes it was seen in.
    pub processes: usize,
    pub verdict: Verdict,
    /// Its growth with the 95% interval it was judged on (the fit's,
    /// widened by the sampling error): per run, or per hour when attached.
    #[serde(flatten)]
    pub rate: NativeRate,
    /// In a pool (several processes hold it): growth per task a process
    /// handled, bytes, with its CI, and how many such steps were seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_task: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_task_ci95: Option<(f64, f64)>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tasks_seen: usize,
    /// Its growth as a share of the scope's anonymous-memory growth, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_of_anon: Option<f64>,
    /// What its sampled stacks hold (the shim's unbiased estimate) in the
    /// processes that answered last, bytes.
    pub held_bytes: u64,
    pub reason: String,
    /// Its largest stack, innermost frame first (the allocator's frames
    /// included), as leakwatch named them.
    pub frames: Vec<String>,
}

/// A native site's rate, in a field whose name gives its unit; `x` says
/// which: `run` (`run --native-sites`) or `hour` (`attach --native-sites`,
/// growth since the attach).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "x")]
pub enum NativeRate {
    #[serde(rename = "run")]
    PerRun {
        bytes_per_run: Option<f64>,
        bytes_per_run_ci95: Option<(f64, f64)>,
    },
    #[serde(rename = "hour")]
    PerHour {
        bytes_per_hour: Option<f64>,
        bytes_per_hour_ci95: Option<(f64, f64)>,
    },
}

impl NativeSite {
    fn of(s: &SiteFit) -> NativeSite {
        let rate = if s.per_hour {
            NativeRate::PerHour {
                bytes_per_hour: s.bytes_per_run,
                bytes_per_hour_ci95: s.bytes_per_run_ci95,
            }
        } else {
            NativeRate::PerRun {
                bytes_per_run: s.bytes_per_run,
                bytes_per_run_ci95: s.bytes_per_run_ci95,
            }
        };
        NativeSite {
            site: s.site.clone(),
            scope: s.scope,
            processes: s.processes,
            verdict: s.verdict,
            rate,
            bytes_per_task: s.bytes_per_task,
            bytes_per_task_ci95: s.bytes_per_task_ci95,
            tasks_seen: s.tasks_seen,
            share_of_anon: s.share_of_anon,
            held_bytes: s.held_bytes,
            reason: s.reason.clone(),
            frames: s.traceback.clone(),
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmupJson {
    /// `auto` or `fixed`.
    pub mode: String,
    /// Points trimmed from the headline series (the first of `series` judged).
    pub trimmed: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunJson {
    pub run: u32,
    pub pid: u32,
    pub status: String,
    pub exit_code: Option<i32>,
    pub duration_s: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
}

/// The summary of an analysis and, when a gate was given, its result.
pub fn summary(a: &Analysis, gate: Option<&GateResult>) -> Summary {
    Summary {
        schema_version: SCHEMA_VERSION,
        mode: a.mode().to_string(),
        command: a.command_line.clone(),
        target_pid: a.target_pid,
        target: a.target.clone(),
        series_labels: a
            .labels
            .iter()
            .map(|(i, l)| (crate::store::Scope::Series(*i).to_string(), l.clone()))
            .collect(),
        runs: (!a.runs.is_empty()).then_some(a.runs.len() as u32),
        duration_s: a.duration_s,
        interrupted: a.interrupted,
        verdict: a.verdict.as_str().to_string(),
        verdict_series: a
            .verdict_series()
            .map(|f| format!("{}:{}", f.scope, f.metric.name())),
        warmup: WarmupJson {
            mode: if a.options.warmup.is_some() {
                "fixed"
            } else {
                "auto"
            }
            .to_string(),
            trimmed: a.headlines().next().map(|f| f.warmup).unwrap_or(0),
        },
        attribution: a.attribution.clone(),
        projection: a.projection.clone(),
        findings: a.findings.clone(),
        trees: a.trees.clone(),
        recycle: a.recycle.clone(),
        series: a.fits.clone(),
        run_table: a
            .runs
            .iter()
            .map(|r| RunJson {
                run: r.run,
                pid: r.pid,
                status: r.status.clone(),
                exit_code: r.exit_code,
                duration_s: r.duration_s,
                peak_rss_bytes: r.peak_rss_bytes,
            })
            .collect(),
        failed_runs: a
            .runs
            .iter()
            .filter(|r| r.failed())
            .map(|r| r.run)
            .collect(),
        notes: a.notes.clone(),
        py_sites: a
            .sites
            .iter()
            .filter(|s| s.source == SiteSource::Python)
            .map(SiteFit::named_for_its_unit)
            .collect(),
        native_sites: a
            .sites
            .iter()
            .filter(|s| s.source == SiteSource::Native)
            .map(NativeSite::of)
            .collect(),
        js_sites: a
            .sites
            .iter()
            .filter(|s| s.source == SiteSource::JavaScript)
            .map(SiteFit::named_for_its_unit)
            .collect(),
        types: a.types.clone(),
        py_types: a
            .types
            .iter()
            .filter(|t| t.runtime == SiteSource::Python)
            .cloned()
            .collect(),
        py_overhead: a.py_overhead.clone(),
        heap_sources: a.heap.iter().flat_map(|h| h.processes.clone()).collect(),
        heap: a.heap.clone(),
        gauge_name: a.gauge_name.clone(),
        watched: watched(a),
        sampling: a.sampling.clone(),
        gate: gate.cloned(),
    }
}

/// A `pid:<PID>` series and its process's name (summary.json's `watched`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watched {
    pub name: Scope,
    pub comm: String,
}

/// The watched scopes, each named by the process it started from.
fn watched(a: &Analysis) -> Vec<Watched> {
    let mut out: Vec<Watched> = a
        .lives
        .iter()
        .filter(|l| l.scope == Scope::Pid(l.pid))
        .map(|l| Watched {
            name: l.scope,
            comm: l.comm.clone(),
        })
        .collect();
    out.dedup_by_key(|w| w.name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(per_hour: bool) -> SiteFit {
        SiteFit {
            scope: Scope::Target,
            source: SiteSource::Native,
            site: "leak_per_tick (fixtures/native/attach_leaker.c:20)".into(),
            verdict: Verdict::Leak,
            bytes_per_run: Some(7.2e9),
            bytes_per_run_ci95: Some((6.8e9, 7.6e9)),
            bytes_per_hour: None,
            bytes_per_hour_ci95: None,
            bytes_per_task: None,
            bytes_per_task_ci95: None,
            tasks_seen: 0,
            reason: "grows".into(),
            held_bytes: 24 << 20,
            processes: 1,
            traceback: vec!["malloc".into(), "leak_per_tick".into()],
            share_of_anon: None,
            per_hour,
        }
    }

    /// An attached site's rate is per hour, and its field says so; a run's
    /// is per run. Both read back as they were written.
    #[test]
    fn a_native_sites_rate_is_in_a_field_named_for_its_unit() {
        for (per_hour, field, other, x) in [
            (true, "bytes_per_hour", "bytes_per_run", "hour"),
            (false, "bytes_per_run", "bytes_per_hour", "run"),
        ] {
            let wire = NativeSite::of(&site(per_hour));
            let json = serde_json::to_value(&wire).unwrap();
            assert_eq!(json["x"], x, "{json:#}");
            assert_eq!(json[field], 7.2e9, "{json:#}");
            assert_eq!(json[format!("{field}_ci95")][0], 6.8e9, "{json:#}");
            assert!(json.get(other).is_none(), "{json:#}");
            assert_eq!(json["frames"][1], "leak_per_tick", "{json:#}");
            assert_eq!(json["scope"], "target", "{json:#}");
            let back: NativeSite = serde_json::from_value(json).unwrap();
            assert_eq!(back, wire);
        }
    }

    /// A Python or JavaScript site read while attached names its rate per
    /// hour; a run's keeps the per-run name.
    #[test]
    fn a_py_or_js_sites_rate_is_in_a_field_named_for_its_unit() {
        for (per_hour, field, other) in [
            (true, "bytes_per_hour", "bytes_per_run"),
            (false, "bytes_per_run", "bytes_per_hour"),
        ] {
            let json = serde_json::to_value(site(per_hour).named_for_its_unit()).unwrap();
            assert_eq!(json[field], 7.2e9, "{json:#}");
            assert_eq!(json[format!("{field}_ci95")][0], 6.8e9, "{json:#}");
            assert!(json[other].is_null(), "{json:#}");
        }
    }
}
