//! The summary.json wire types (schema_version 2, the contract in
//! docs/summary-json.md), built from the fit and kept apart from it so the
//! contract changes only on purpose: each series, site and type carries one
//! `end_rate` (`{rate, ci95, from, widened_by}`), the estimate its verdict
//! was decided on. `report` writes them; `check` reads them back as
//! baselines, and reads version 1 files through [`v1`].

use serde::{Deserialize, Serialize};

use crate::Analysis;
use crate::fit::findings::{Finding, RecycleAdvice, TreeTotal};
use crate::fit::heap::HeapReading;
use crate::fit::sites::{SiteFit, TypeFit};
use crate::fit::{
    Attribution, DecidedBy, EndRate, PlateauInfo, Projection, SeriesFit, Step, Verdict,
};
use crate::gate::GateResult;
use crate::series::sites::Overhead;
use crate::series::{HeapProcess, Metric, XAxis};
use crate::store::{Scope, SiteSource};

pub mod v1;

pub const SCHEMA_VERSION: u32 = 2;

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
    /// Every fitted series: scope `name`, `metric`, `x`, verdict, `end_rate` …
    pub series: Vec<Series>,
    /// Where the growth is, per followed scope.
    #[serde(default)]
    pub attribution: Vec<Where>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<Projected>,
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
    /// (fastest first), grew and stopped, or hold much.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub py_sites: Vec<Site>,
    /// Where in native code (`--native-sites`): C, C++ and Rust call
    /// stacks, each named by its first frame outside the allocator and the
    /// runtimes, that leak (fastest first), grew and stopped, or hold much.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub native_sites: Vec<Site>,
    /// Where in JavaScript (`--js-sites`): functions, each named by the
    /// innermost frame of the program's own code.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub js_sites: Vec<Site>,
    /// Which types grow, every runtime's (`runtime`: `python` from
    /// `--py-sites`, `java` from `--jvm-classes`): live objects by type or
    /// class that leak (classes of the program's own code first), grew and
    /// stopped, or are many.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<Type>,
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

/// One series, judged: its verdict and the estimate it was decided on, the line over the
/// whole window beside it, and where its end starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Its scope: `command`, `survivors`, `pid:<PID>`, `target`, `cgroup`, `series:<N>`.
    pub name: Scope,
    pub metric: Metric,
    /// What its x counts: `run` or `seconds`; every rate below is per x.
    pub x: XAxis,
    pub n: usize,
    pub first: f64,
    pub last: f64,
    pub verdict: Verdict,
    /// What the verdict was decided on (the contract: its 95% CI against the threshold),
    /// what the gate judges too; absent for a series too short to fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_rate: Option<EndRate>,
    /// Where the end starts (x): after the last change point, or the second half.
    #[serde(default)]
    pub end_start_x: Option<f64>,
    /// The least-squares line over the points after warm-up: the trend of the whole window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<Line>,
    /// For a plateau: fill rate, where it stopped, the level it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plateau: Option<PlateauInfo>,
    /// Significant jumps between segments, in x order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<Step>,
    /// Which model decided: the series (`mean`) or its lower envelope (`troughs`).
    #[serde(default)]
    pub decided_by: DecidedBy,
    /// Leading points trimmed as warm-up.
    pub warmup: usize,
    /// For inconclusive: about how many points would decide it.
    pub runs_needed: Option<usize>,
    pub reason: String,
    pub processes: usize,
}

/// The least-squares line over a series' points after warm-up, with the trend tests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// Per x, and its 95% CI.
    pub slope: f64,
    pub ci95: Option<(f64, f64)>,
    /// Theil–Sen slope over the same points.
    pub robust_slope: Option<f64>,
    /// Mann–Kendall two-sided p-value.
    pub trend_p: Option<f64>,
    pub r2: Option<f64>,
    /// The slope as a share of the mean level, percent per x.
    pub growth_pct_per_x: Option<f64>,
}

impl Series {
    pub fn of(f: &SeriesFit) -> Series {
        Series {
            name: f.scope,
            metric: f.metric,
            x: f.x,
            n: f.n,
            first: f.first,
            last: f.last,
            verdict: f.verdict,
            end_rate: f.end_rate,
            end_start_x: f.end_start_x,
            line: f.slope.map(|slope| Line {
                slope,
                ci95: f.slope_ci95,
                robust_slope: f.robust_slope,
                trend_p: f.trend_p,
                r2: f.r2,
                growth_pct_per_x: f.growth_pct_per_x,
            }),
            plateau: f.plateau,
            steps: f.steps.clone(),
            decided_by: f.decided_by,
            warmup: f.warmup,
            runs_needed: f.runs_needed,
            reason: f.reason.to_string(),
            processes: f.processes,
        }
    }
}

/// What a site's or type's x counts: runs, or hours since the attach (attached).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PerX {
    Run,
    Hour,
}

impl PerX {
    fn of(per_hour: bool) -> PerX {
        if per_hour { PerX::Hour } else { PerX::Run }
    }
}

/// One allocation site (`py_sites`, `native_sites`, `js_sites`), judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Site {
    /// Python: `file:line` of the innermost frame of the program's code; native: the first
    /// frame outside the allocator and the runtimes (`function (file:line)`, or
    /// `module+0xOFFSET` in a stripped binary); JavaScript: `fn (file:line)`.
    pub site: String,
    /// The scope whose processes hold it (`survivors`, `pid:<PID>`, `target`).
    pub scope: Scope,
    /// The tracer that found it: `python`, `native` or `javascript`.
    pub source: SiteSource,
    /// Processes it was seen in.
    pub processes: usize,
    pub verdict: Verdict,
    /// What `end_rate` is per: `run`, or `hour` since the attach.
    pub x: PerX,
    /// Bytes per x (per task when `from` is `task_steps`: a pool whose workers' task steps
    /// were seen) and the interval the verdict was decided on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_rate: Option<EndRate>,
    /// In a pool: how many task steps were seen.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tasks_seen: usize,
    /// A leak's growth as a share of its scope's anonymous-memory growth, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_of_anon: Option<f64>,
    /// What it holds in the processes that answered last, bytes (native: the shim's
    /// unbiased estimate of its sampled stacks).
    pub held_bytes: u64,
    pub reason: String,
    /// Its largest stack, innermost frame first, as leakwatch named them.
    pub traceback: Vec<String>,
}

impl Site {
    pub fn of(s: &SiteFit) -> Site {
        Site {
            site: s.site.clone(),
            scope: s.scope,
            source: s.source,
            processes: s.processes,
            verdict: s.verdict,
            x: PerX::of(s.per_hour),
            end_rate: s.end_rate,
            tasks_seen: s.tasks_seen,
            share_of_anon: s.share_of_anon,
            held_bytes: s.held_bytes,
            reason: s.reason.to_string(),
            traceback: s.traceback.clone(),
        }
    }
}

/// One type's or class's live objects, judged by their count; their bytes beside.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Type {
    /// Python: the module-qualified class name (builtins bare; `(untracked)`); Java: the
    /// JVM's name (`com.example.Session`, `[B`).
    #[serde(rename = "type")]
    pub name: String,
    pub scope: Scope,
    /// Whose: `python` (`--py-sites`) or `java` (`--jvm-classes`).
    pub runtime: SiteSource,
    pub processes: usize,
    /// The count's verdict.
    pub verdict: Verdict,
    /// What `end_rate` is per: `run`, or `hour` since the attach.
    pub x: PerX,
    /// Objects per x (per task when `from` is `task_steps`), as the verdict was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_rate: Option<EndRate>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tasks_seen: usize,
    /// Their bytes (Python's `sys.getsizeof`, the JVM's shallow size), judged beside.
    pub bytes: TypeBytes,
    /// Live objects and their bytes in the processes that answered last.
    pub objects: u64,
    pub held_bytes: u64,
    pub reason: String,
}

/// A type's bytes: their verdict and the estimate it was decided on (bytes per x or per task).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TypeBytes {
    pub verdict: Verdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_rate: Option<EndRate>,
}

impl Type {
    pub fn of(t: &TypeFit) -> Type {
        Type {
            name: t.name.clone(),
            scope: t.scope,
            runtime: t.runtime,
            processes: t.processes,
            verdict: t.verdict,
            x: PerX::of(t.per_hour),
            end_rate: t.end_rate,
            tasks_seen: t.tasks_seen,
            bytes: TypeBytes {
                verdict: t.bytes_verdict,
                end_rate: t.bytes_end_rate,
            },
            objects: t.objects,
            held_bytes: t.held_bytes,
            reason: t.reason.to_string(),
        }
    }
}

/// Where one scope's growth is (`fit::Attribution`), and the phrase the terminal says of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Where {
    #[serde(flatten)]
    pub at: Attribution,
    /// `in anon memory, most in the [heap] mapping (+36.0 MiB)`.
    #[serde(default)]
    pub summary: String,
}

impl Where {
    pub fn of(at: &Attribution) -> Where {
        Where {
            at: at.clone(),
            summary: crate::phrase::attribution(at),
        }
    }
}

/// A projection to a limit or budget (`fit::Projection`), and what it rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projected {
    #[serde(flatten)]
    pub p: Projection,
    /// `at the fitted RSS slope`, or why there is no projection.
    #[serde(default)]
    pub note: String,
}

impl Projected {
    pub fn of(p: &Projection) -> Projected {
        Projected {
            p: p.clone(),
            note: crate::phrase::projection_note(p),
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
        attribution: a.attribution.iter().map(Where::of).collect(),
        projection: a.projection.as_ref().map(Projected::of),
        findings: a.findings.clone(),
        trees: a.trees.clone(),
        recycle: a.recycle.clone(),
        series: a.fits.iter().map(Series::of).collect(),
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
        py_sites: sites(a, SiteSource::Python),
        native_sites: sites(a, SiteSource::Native),
        js_sites: sites(a, SiteSource::JavaScript),
        types: a.types.iter().map(Type::of).collect(),
        py_overhead: a.py_overhead.clone(),
        heap_sources: a.heap.iter().flat_map(|h| h.processes.clone()).collect(),
        heap: a.heap.clone(),
        gauge_name: a.gauge_name.clone(),
        watched: watched(a),
        sampling: a.sampling.clone(),
        gate: gate.cloned(),
    }
}

/// The sites one tracer found, in the fit's order.
fn sites(a: &Analysis, source: SiteSource) -> Vec<Site> {
    a.sites
        .iter()
        .filter(|s| s.source == source)
        .map(Site::of)
        .collect()
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
    use crate::fit::RateFrom;

    fn site(per_hour: bool, per_task: bool) -> SiteFit {
        let (from, rate) = if per_task {
            (RateFrom::TaskSteps, 1.0e6)
        } else {
            (RateFrom::Line, 7.2e9)
        };
        SiteFit {
            scope: Scope::Target,
            source: SiteSource::Native,
            site: "leak_per_tick (fixtures/native/attach_leaker.c:20)".into(),
            verdict: Verdict::Leak,
            end_rate: Some(EndRate::new(from, rate, (0.9 * rate, 1.1 * rate))),
            bytes_per_run: Some(7.2e9),
            bytes_per_run_ci95: Some((6.8e9, 7.6e9)),
            bytes_per_task: per_task.then_some(1.0e6),
            bytes_per_task_ci95: per_task.then_some((0.9e6, 1.1e6)),
            tasks_seen: if per_task { 12 } else { 0 },
            reason: crate::fit::verdict::Reason::default(),
            held_bytes: 24 << 20,
            processes: 1,
            traceback: vec!["malloc".into(), "leak_per_tick".into()],
            share_of_anon: None,
            per_hour,
        }
    }

    /// A site's one rate is its end rate, per run or per hour by `x`, per task when its
    /// pool's task steps decided; it reads back as written.
    #[test]
    fn a_sites_one_rate_is_its_end_rate_per_its_x() {
        for (per_hour, per_task, x, from, rate) in [
            (true, false, "hour", "line", 7.2e9),
            (false, false, "run", "line", 7.2e9),
            (false, true, "run", "task_steps", 1.0e6),
        ] {
            let wire = Site::of(&site(per_hour, per_task));
            let json = serde_json::to_value(&wire).unwrap();
            assert_eq!(json["x"], x, "{json:#}");
            assert_eq!(json["end_rate"]["rate"], rate, "{json:#}");
            assert_eq!(json["end_rate"]["from"], from, "{json:#}");
            assert_eq!(json["end_rate"]["ci95"][0], 0.9 * rate, "{json:#}");
            assert_eq!(json["traceback"][1], "leak_per_tick", "{json:#}");
            for gone in [
                "bytes_per_run",
                "bytes_per_hour",
                "bytes_per_task",
                "frames",
            ] {
                assert!(json.get(gone).is_none(), "{gone}: {json:#}");
            }
            let back: Site = serde_json::from_value(json).unwrap();
            assert_eq!(back, wire);
        }
    }

    /// Version 1's sites and types (a per-hour rate under `bytes_per_hour`, a pool's under
    /// `bytes_per_task`, native `frames`, a native site listed in `py_sites`, `py_types`) read
    /// as version 2's.
    #[test]
    fn version_1_sites_and_types_read_as_version_2() {
        let v1 = serde_json::json!({
            "schema_version": 1, "mode": "attach", "duration_s": 60.0, "interrupted": false,
            "verdict": "leak", "warmup": {"mode": "auto", "trimmed": 0}, "series": [],
            "py_sites": [
                {"scope": "target", "site": "app.py:3", "verdict": "leak",
                 "bytes_per_run": null, "bytes_per_run_ci95": null,
                 "bytes_per_hour": 3.6e6, "bytes_per_hour_ci95": [3.0e6, 4.2e6],
                 "reason": "grows", "held_bytes": 1, "processes": 1, "traceback": ["app.py:3"]},
                {"scope": "target", "source": "native", "site": "f (a.c:1)", "verdict": "stable",
                 "bytes_per_run": 10.0, "bytes_per_run_ci95": [-5.0, 25.0],
                 "reason": "flat", "held_bytes": 1, "processes": 1, "traceback": []}
            ],
            "native_sites": [
                {"site": "g (b.c:2)", "scope": "survivors", "processes": 3, "verdict": "leak",
                 "x": "run", "bytes_per_run": 5.0e6, "bytes_per_run_ci95": [4.0e6, 6.0e6],
                 "bytes_per_task": 1.0e6, "bytes_per_task_ci95": [0.9e6, 1.1e6], "tasks_seen": 9,
                 "held_bytes": 2, "reason": "grows", "frames": ["malloc", "g"]}
            ],
            "types": [
                {"scope": "survivors", "runtime": "java", "type": "Keeper$Session",
                 "verdict": "leak", "objects_per_run": 2000.0,
                 "objects_per_run_ci95": [1990.0, 2010.0], "bytes_verdict": "leak",
                 "bytes_per_run": 64000.0, "bytes_per_run_ci95": [63000.0, 65000.0],
                 "reason": "gains", "objects": 20000, "held_bytes": 640000, "processes": 1}
            ],
            "py_types": []
        });
        let s: Summary = serde_json::from_value(v1::upgrade(v1.clone()).unwrap()).unwrap();
        assert_eq!(s.schema_version, SCHEMA_VERSION);
        let py = &s.py_sites[0];
        assert_eq!((py.x, py.source), (PerX::Hour, SiteSource::Python));
        assert_eq!(
            py.end_rate.map(|e| (e.rate, e.ci95)),
            Some((3.6e6, (3.0e6, 4.2e6)))
        );
        assert_eq!(
            s.py_sites.len(),
            1,
            "the native one moved: {:?}",
            s.py_sites
        );
        let names: Vec<&str> = s.native_sites.iter().map(|n| n.site.as_str()).collect();
        assert_eq!(names, ["f (a.c:1)", "g (b.c:2)"]);
        let pool = &s.native_sites[1];
        assert_eq!(
            pool.end_rate.map(|e| (e.from, e.rate)),
            Some((RateFrom::TaskSteps, 1.0e6))
        );
        assert_eq!((pool.tasks_seen, pool.traceback.len()), (9, 2));
        assert_eq!(
            s.native_sites[0].x,
            PerX::Hour,
            "attached, a rate under bytes_per_run was per hour"
        );
        let t = &s.types[0];
        assert_eq!((t.runtime, t.x), (SiteSource::Java, PerX::Hour));
        assert_eq!(t.end_rate.map(|e| e.rate), Some(2000.0));
        assert_eq!(t.bytes.end_rate.map(|e| e.ci95), Some((63000.0, 65000.0)));

        // Before `types`, Python's were `py_types`.
        let mut older = v1.clone();
        older["mode"] = "run".into();
        older["py_types"] = older["types"].take();
        older.as_object_mut().unwrap().remove("types");
        let s: Summary = serde_json::from_value(v1::upgrade(older).unwrap()).unwrap();
        assert_eq!(s.types.len(), 1, "py_types read: {:?}", s.types);
        assert_eq!(s.types[0].x, PerX::Run);
    }
}
