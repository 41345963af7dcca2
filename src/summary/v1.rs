//! Reading a schema_version 1 summary.json (leakwatch before version 2): its
//! series, sites and types rewritten into version 2's, so `check --baseline`
//! judges an old baseline as it did. Everything else in the file is the same
//! in both versions.
//!
//! Version 1 wrote a series' estimates side by side (`slope`, `rate`,
//! `end_rate`, `end_slope`), a site's rate under a name for its unit
//! (`bytes_per_run`, `bytes_per_hour`, `bytes_per_task`), and a type's as
//! `objects_per_run`. A version 1 file from before `end_rate` existed gets
//! the rate its verdict rested on then: a leak's rate, a plateau's slope at
//! the end, the line otherwise.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Line, PerX, Series, Site, Type, TypeBytes};
use crate::fit::{DecidedBy, EndRate, PlateauInfo, RateFrom, Step, Verdict};
use crate::series::{Metric, XAxis};
use crate::store::{Scope, SiteSource};

/// `value`, a version 1 summary, as version 2 writes it; the error names the part that is
/// not version 1's.
pub fn upgrade(mut value: Value) -> Result<Value, String> {
    let Some(top) = value.as_object_mut() else {
        return Err("it is not a JSON object".into());
    };
    // Attached, every x was hours since the attach, also where a site's per-hour rate was
    // written under `bytes_per_run` (native sites before `bytes_per_hour`).
    let attached = top.get("mode").and_then(Value::as_str) == Some("attach");
    let series: Vec<Series> = each::<SeriesV1>(top, "series")?
        .into_iter()
        .map(SeriesV1::upgrade)
        .collect();
    put(top, "series", &series)?;
    // Native sites were listed in `py_sites` before `native_sites` existed.
    let (mut native, py): (Vec<Site>, Vec<Site>) = each::<SiteV1>(top, "py_sites")?
        .into_iter()
        .map(|s| s.upgrade(SiteSource::Python, attached))
        .partition(|s| s.source == SiteSource::Native);
    native.extend(
        each::<SiteV1>(top, "native_sites")?
            .into_iter()
            .map(|s| s.upgrade(SiteSource::Native, attached)),
    );
    let js: Vec<Site> = each::<SiteV1>(top, "js_sites")?
        .into_iter()
        .map(|s| s.upgrade(SiteSource::JavaScript, attached))
        .collect();
    // Python's types were `py_types` before `types` held every runtime's.
    let mut types = each::<TypeV1>(top, "types")?;
    if types.is_empty() {
        types = each::<TypeV1>(top, "py_types")?;
    }
    let types: Vec<Type> = types.into_iter().map(|t| t.upgrade(attached)).collect();
    put(top, "py_sites", &py)?;
    put(top, "native_sites", &native)?;
    put(top, "js_sites", &js)?;
    put(top, "types", &types)?;
    top.remove("py_types");
    top.insert("schema_version".into(), Value::from(super::SCHEMA_VERSION));
    Ok(value)
}

/// The entries of the array `key` (none when absent), each read as `T`.
fn each<T: for<'de> Deserialize<'de>>(
    top: &Map<String, Value>,
    key: &str,
) -> Result<Vec<T>, String> {
    match top.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(v) => Vec::<T>::deserialize(v).map_err(|e| format!("{key}: {e}")),
    }
}

fn put<T: serde::Serialize>(
    top: &mut Map<String, Value>,
    key: &str,
    items: &[T],
) -> Result<(), String> {
    let v = serde_json::to_value(items).map_err(|e| format!("{key}: {e}"))?;
    top.insert(key.into(), v);
    Ok(())
}

/// A rate and its interval as version 1 wrote them, as an end rate (a missing interval is
/// the rate itself).
fn end_rate(from: RateFrom, rate: Option<f64>, ci95: Option<(f64, f64)>) -> Option<EndRate> {
    rate.map(|r| EndRate::new(from, r, ci95.unwrap_or((r, r))))
}

#[derive(Deserialize)]
struct SeriesV1 {
    name: Scope,
    metric: Metric,
    x: XAxis,
    n: usize,
    first: f64,
    last: f64,
    slope: Option<f64>,
    slope_ci95: Option<(f64, f64)>,
    robust_slope: Option<f64>,
    trend_p: Option<f64>,
    r2: Option<f64>,
    growth_pct_per_x: Option<f64>,
    #[serde(default)]
    rate: Option<f64>,
    #[serde(default)]
    rate_ci95: Option<(f64, f64)>,
    #[serde(default)]
    rate_from: Option<RateFrom>,
    #[serde(default)]
    end_rate: Option<EndRate>,
    #[serde(default)]
    end_slope: Option<f64>,
    #[serde(default)]
    end_slope_ci95: Option<(f64, f64)>,
    #[serde(default)]
    end_start_x: Option<f64>,
    #[serde(default)]
    plateau: Option<PlateauInfo>,
    #[serde(default)]
    steps: Vec<Step>,
    #[serde(default)]
    decided_by: DecidedBy,
    verdict: Verdict,
    warmup: usize,
    runs_needed: Option<usize>,
    reason: String,
    processes: usize,
}

impl SeriesV1 {
    /// The rate the verdict rested on, for a file from before `end_rate`: a leak's rate; a
    /// plateau's slope at the end (not its fill rate: what it adds from here on); the line
    /// otherwise.
    fn judged(&self) -> Option<EndRate> {
        if self.end_rate.is_some() {
            return self.end_rate;
        }
        let line = || end_rate(RateFrom::Line, self.slope, self.slope_ci95);
        match self.verdict {
            Verdict::Leak => match self.rate_from {
                Some(RateFrom::Line) => line(),
                Some(from) => end_rate(from, self.rate, self.rate_ci95),
                None => end_rate(
                    RateFrom::Line,
                    self.rate.or(self.slope),
                    self.rate_ci95.or(self.slope_ci95),
                ),
            },
            Verdict::Plateau if self.end_slope_ci95.is_some() => {
                end_rate(RateFrom::EndSegment, self.end_slope, self.end_slope_ci95)
            }
            _ => line(),
        }
    }

    fn upgrade(self) -> Series {
        Series {
            end_rate: self.judged(),
            name: self.name,
            metric: self.metric,
            x: self.x,
            n: self.n,
            first: self.first,
            last: self.last,
            verdict: self.verdict,
            end_start_x: self.end_start_x,
            line: self.slope.map(|slope| Line {
                slope,
                ci95: self.slope_ci95,
                robust_slope: self.robust_slope,
                trend_p: self.trend_p,
                r2: self.r2,
                growth_pct_per_x: self.growth_pct_per_x,
            }),
            plateau: self.plateau,
            steps: self.steps,
            decided_by: self.decided_by,
            warmup: self.warmup,
            runs_needed: self.runs_needed,
            reason: self.reason,
            processes: self.processes,
        }
    }
}

/// A site's rates as version 1 named them: the one per task where a pool's task steps were
/// seen (what it was judged on), else the one per run or per hour.
#[derive(Deserialize, Default)]
#[serde(default)]
struct RatesV1 {
    bytes_per_run: Option<f64>,
    bytes_per_run_ci95: Option<(f64, f64)>,
    bytes_per_hour: Option<f64>,
    bytes_per_hour_ci95: Option<(f64, f64)>,
    bytes_per_task: Option<f64>,
    bytes_per_task_ci95: Option<(f64, f64)>,
}

impl RatesV1 {
    fn x(&self, attached: bool) -> PerX {
        if self.bytes_per_hour.is_some() || attached {
            PerX::Hour
        } else {
            PerX::Run
        }
    }

    fn end_rate(&self) -> Option<EndRate> {
        end_rate(
            RateFrom::TaskSteps,
            self.bytes_per_task,
            self.bytes_per_task_ci95,
        )
        .or_else(|| {
            end_rate(
                RateFrom::Line,
                self.bytes_per_hour.or(self.bytes_per_run),
                self.bytes_per_hour_ci95.or(self.bytes_per_run_ci95),
            )
        })
    }
}

#[derive(Deserialize)]
struct SiteV1 {
    scope: Scope,
    #[serde(default)]
    x: Option<PerX>,
    #[serde(default)]
    source: Option<SiteSource>,
    site: String,
    verdict: Verdict,
    #[serde(flatten)]
    rates: RatesV1,
    #[serde(default)]
    tasks_seen: usize,
    reason: String,
    held_bytes: u64,
    processes: usize,
    /// A native site's stack was its `frames`.
    #[serde(default, alias = "frames")]
    traceback: Vec<String>,
    #[serde(default)]
    share_of_anon: Option<f64>,
}

impl SiteV1 {
    /// A site without `source` is one of the list it is in (`py_sites` from before the field,
    /// every `native_sites` entry); `attached`: the file is `attach` mode's.
    fn upgrade(self, listed_as: SiteSource, attached: bool) -> Site {
        Site {
            x: self.x.unwrap_or(self.rates.x(attached)),
            end_rate: self.rates.end_rate(),
            site: self.site,
            scope: self.scope,
            source: self.source.unwrap_or(listed_as),
            processes: self.processes,
            verdict: self.verdict,
            tasks_seen: self.tasks_seen,
            share_of_anon: self.share_of_anon,
            held_bytes: self.held_bytes,
            reason: self.reason,
            traceback: self.traceback,
        }
    }
}

#[derive(Deserialize)]
struct TypeV1 {
    scope: Scope,
    #[serde(default)]
    runtime: Option<SiteSource>,
    #[serde(rename = "type")]
    name: String,
    verdict: Verdict,
    objects_per_run: Option<f64>,
    objects_per_run_ci95: Option<(f64, f64)>,
    #[serde(default)]
    objects_per_task: Option<f64>,
    #[serde(default)]
    objects_per_task_ci95: Option<(f64, f64)>,
    #[serde(default)]
    tasks_seen: usize,
    bytes_verdict: Verdict,
    bytes_per_run: Option<f64>,
    bytes_per_run_ci95: Option<(f64, f64)>,
    reason: String,
    objects: u64,
    held_bytes: u64,
    processes: usize,
    #[serde(default)]
    per_hour: bool,
}

impl TypeV1 {
    /// Version 1 kept a pool's bytes per task without an interval: the type's bytes are then
    /// judged by their line per run, whose interval it wrote, not by a point.
    fn upgrade(self, attached: bool) -> Type {
        let objects = end_rate(
            RateFrom::TaskSteps,
            self.objects_per_task,
            self.objects_per_task_ci95,
        )
        .or_else(|| {
            end_rate(
                RateFrom::Line,
                self.objects_per_run,
                self.objects_per_run_ci95,
            )
        });
        let bytes = end_rate(RateFrom::Line, self.bytes_per_run, self.bytes_per_run_ci95);
        Type {
            name: self.name,
            scope: self.scope,
            runtime: self.runtime.unwrap_or(SiteSource::Python),
            processes: self.processes,
            verdict: self.verdict,
            x: if self.per_hour || attached {
                PerX::Hour
            } else {
                PerX::Run
            },
            end_rate: objects,
            tasks_seen: self.tasks_seen,
            bytes: TypeBytes {
                verdict: self.bytes_verdict,
                end_rate: bytes,
            },
            objects: self.objects,
            held_bytes: self.held_bytes,
            reason: self.reason,
        }
    }
}
