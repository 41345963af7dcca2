//! Prometheus as a source (`analyze --prometheus`): series pulled from the
//! HTTP API's `/api/v1/query_range`, one per label set, in chunks under the
//! server's limit of 11,000 points per series per query; then split into
//! lives where the series restarted (a new pod or process: a gap, a counter
//! reset, a fall to less than half), as recycled workers are.
//!
//! API: <https://prometheus.io/docs/prometheus/latest/querying/api/>
//! (`status`, `data.resultType` = `matrix`, `data.result[].metric` and
//! `.values` as `[unix seconds, "value"]`; errors as `errorType` + `error`).

use crate::escape::inert;
use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// Prometheus refuses a range query of more points per series than this.
pub const MAX_POINTS: u64 = 11_000;
/// Points per request leakwatch asks for: under the limit, with room.
const CHUNK_POINTS: u64 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum PromError {
    #[error(
        "--prometheus {url}: https needs leakwatch built with TLS (`cargo install leakwatch \
         --features https`); or reach Prometheus over http (a port-forward, a sidecar)"
    )]
    NoTls { url: String },
    #[error("--prometheus '{0}' is not an http:// or https:// URL; try 'http://127.0.0.1:9090'")]
    BadUrl(String),
    #[error(
        "cannot reach Prometheus at {url}: {error}; check --prometheus (e.g. \
         http://127.0.0.1:9090) and that the server is up"
    )]
    Unreachable { url: String, error: String },
    #[error("Prometheus at {url} rejected --query '{query}' ({kind}): {error}; {hint}")]
    Rejected {
        url: String,
        query: String,
        kind: String,
        error: String,
        hint: &'static str,
    },
    #[error(
        "{url} answered HTTP {status} without a Prometheus API reply ({body}); is --prometheus \
         the server's base URL (without /api/v1, with any path prefix it is served under)?"
    )]
    NotPrometheus {
        url: String,
        status: u16,
        body: String,
    },
    #[error(
        "--query '{query}' gives a {kind}, not series over time; give an expression that \
         selects series, e.g. 'container_memory_working_set_bytes{{pod=~\"api-.*\"}}'"
    )]
    NotSeries { query: String, kind: String },
    #[error(
        "--query '{query}' returned no series from {start} to {end}; check the metric name \
         and labels in Prometheus' graph page, or widen --range"
    )]
    Empty {
        query: String,
        start: String,
        end: String,
    },
}

/// The fix for each of Prometheus' error types.
fn hint(kind: &str, error: &str) -> &'static str {
    if error.contains("11,000 points") || error.contains("11000 points") {
        return "use a larger --step";
    }
    match kind {
        "bad_data" => "check the PromQL (try it in Prometheus' graph page) and --step, --range",
        "timeout" => "the query timed out on the server: narrow it or use a larger --step",
        "canceled" => "the server canceled it (overloaded or shutting down): try again",
        "execution" => {
            "the server could not evaluate it (too many samples? narrow the query or use a \
             larger --step)"
        }
        "unavailable" => "the server is not ready (starting, or replaying its WAL): try again",
        _ => "check the query and the server",
    }
}

/// One query over a time range.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeQuery {
    pub url: String,
    pub query: String,
    /// Unix seconds.
    pub start: f64,
    pub end: f64,
    pub step: Duration,
    pub timeout: Duration,
}

/// One returned series: its label set and its (unix seconds, value) points.
#[derive(Debug, Clone, PartialEq)]
pub struct PromSeries {
    pub labels: BTreeMap<String, String>,
    pub points: Vec<(f64, f64)>,
}

impl PromSeries {
    /// `{job="api",pod="api-7d9f"}`, as PromQL writes a selector.
    pub fn label_text(&self) -> String {
        label_text(&self.labels)
    }
}

pub fn label_text(labels: &BTreeMap<String, String>) -> String {
    let body: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    format!("{{{}}}", body.join(","))
}

#[derive(Deserialize)]
struct Reply {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct MatrixSeries {
    metric: BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<(f64, String)>,
}

/// Chunks of `[start, end]` of at most `CHUNK_POINTS` steps each, touching
/// end to start + step so no point is asked for twice.
pub fn chunks(start: f64, end: f64, step: f64) -> Vec<(f64, f64)> {
    let span = CHUNK_POINTS as f64 * step;
    let mut out = Vec::new();
    let mut from = start;
    while from <= end {
        let to = (from + span - step).min(end);
        out.push((from, to));
        from = to + step;
    }
    out
}

/// Parses one `query_range` reply body into series (points not finite —
/// NaN, ±Inf — are left out).
pub fn parse_reply(q: &RangeQuery, status: u16, body: &str) -> Result<Vec<PromSeries>, PromError> {
    let reply: Reply = serde_json::from_str(body).map_err(|_| PromError::NotPrometheus {
        url: q.url.clone(),
        status,
        body: body
            .chars()
            .take(120)
            .collect::<String>()
            .trim()
            .to_string(),
    })?;
    if reply.status != "success" {
        let kind = reply.error_type.unwrap_or_else(|| "error".into());
        let error = reply.error.unwrap_or_default();
        return Err(PromError::Rejected {
            url: q.url.clone(),
            query: q.query.clone(),
            hint: hint(&kind, &error),
            kind,
            error,
        });
    }
    let Some(data) = reply.data else {
        return Ok(Vec::new());
    };
    if data.result_type != "matrix" {
        return Err(PromError::NotSeries {
            query: q.query.clone(),
            kind: data.result_type,
        });
    }
    let matrix: Vec<MatrixSeries> =
        serde_json::from_value(data.result).map_err(|e| PromError::NotPrometheus {
            url: q.url.clone(),
            status,
            body: e.to_string(),
        })?;
    Ok(matrix
        .into_iter()
        .map(|m| PromSeries {
            // Labels are anyone's text (a pod name, a path): inert from here on.
            labels: m
                .metric
                .into_iter()
                .map(|(k, v)| (inert(&k).into_owned(), inert(&v).into_owned()))
                .collect(),
            points: m
                .values
                .into_iter()
                .filter_map(|(t, v)| {
                    v.parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite())
                        .map(|v| (t, v))
                })
                .collect(),
        })
        .collect())
}

/// What `fetch` pulled: the series, and how they were read.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    pub series: Vec<PromSeries>,
    /// The series' own sample spacing, seconds, when they were read as raw samples (a range
    /// selector) because `--step` is no coarser; `None`: `query_range` steps.
    pub raw_spacing: Option<f64>,
}

/// Pulls every series of the query over the range, chunk by chunk, merged by label set.
///
/// A `query_range` step answers with the latest sample in its lookback window, at the step's
/// time: a step finer than the series' own samples repeats each until the next (a held
/// staircase whose repeats are not observations: its line's interval would count each sample
/// many times), and a step as fine as them shifts each sample by up to a step (a series
/// growing 2 MiB a second then reads a step low wherever a scrape came late, the last point
/// too). So the query is first probed as a range selector (`QUERY[window]`, raw samples with
/// their own timestamps) over the last ten steps (at least five minutes): when its samples
/// are no denser than the steps (spaced over 0.9 of one), the raw samples are what is read,
/// chunk by chunk. An expression that is not a plain selector cannot take a range; it is
/// read by steps.
pub fn fetch(q: &RangeQuery) -> Result<Fetched, PromError> {
    let base = q.url.trim_end_matches('/');
    if base.starts_with("https://") && !cfg!(feature = "https") {
        return Err(PromError::NoTls { url: q.url.clone() });
    }
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(PromError::BadUrl(q.url.clone()));
    }
    let api = Api {
        agent: ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(q.timeout))
            .build()
            .into(),
        base,
        q,
    };
    let step = q.step.as_secs_f64();
    let raw_spacing = api.raw_spacing()?.filter(|&s| s > 0.9 * step);
    let mut merged: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
    for (from, to) in chunks(q.start, q.end, step) {
        let part = match raw_spacing {
            // Raw samples over (from − step, to]: the chunks touch, so none is lost between
            // them; a sample on a boundary is read twice and kept once (dedup below).
            Some(_) => api.raw(from - step, to)?,
            None => api.range(from, to)?,
        };
        for s in part {
            merged.entry(s.labels).or_default().extend(s.points);
        }
    }
    let series: Vec<PromSeries> = merged
        .into_iter()
        .map(|(labels, mut points)| {
            points.retain(|p| (q.start..=q.end).contains(&p.0));
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            points.dedup_by(|a, b| a.0 == b.0);
            PromSeries { labels, points }
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    if series.is_empty() {
        let iso = |t: f64| {
            chrono::DateTime::from_timestamp(t as i64, 0)
                .map(|d| d.to_rfc3339())
                .unwrap_or_else(|| format!("{t}"))
        };
        return Err(PromError::Empty {
            query: q.query.clone(),
            start: iso(q.start),
            end: iso(q.end),
        });
    }
    Ok(Fetched {
        series,
        raw_spacing,
    })
}

/// One Prometheus server's HTTP API, for one query.
struct Api<'a> {
    agent: ureq::Agent,
    base: &'a str,
    q: &'a RangeQuery,
}

impl Api<'_> {
    /// GET `/api/v1/<path>` with `params`: the reply's status and body.
    fn get(&self, path: &str, params: &[(&str, String)]) -> Result<(u16, String), PromError> {
        let unreachable = |e: ureq::Error| PromError::Unreachable {
            url: self.q.url.clone(),
            error: e.to_string(),
        };
        let mut req = self.agent.get(format!("{}/api/v1/{path}", self.base));
        for (k, v) in params {
            req = req.query(k, v);
        }
        let mut resp = req.call().map_err(unreachable)?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_string()
            .map_err(unreachable)?;
        Ok((status, body))
    }

    /// `query_range` from `from` to `to` at the query's step.
    fn range(&self, from: f64, to: f64) -> Result<Vec<PromSeries>, PromError> {
        let (status, body) = self.get(
            "query_range",
            &[
                ("query", self.q.query.clone()),
                ("start", format!("{from:.3}")),
                ("end", format!("{to:.3}")),
                ("step", format!("{}", self.q.step.as_secs_f64())),
            ],
        )?;
        parse_reply(self.q, status, &body)
    }

    /// The raw samples of the query over (from, to]: an instant query of the query as a range
    /// selector, `QUERY[window]`, at `to`.
    fn raw(&self, from: f64, to: f64) -> Result<Vec<PromSeries>, PromError> {
        let window_ms = ((to - from) * 1000.0).round().max(1.0);
        let (status, body) = self.get(
            "query",
            &[
                ("query", format!("{}[{window_ms:.0}ms]", self.q.query)),
                ("time", format!("{to:.3}")),
            ],
        )?;
        parse_reply(self.q, status, &body)
    }

    /// The median spacing of the query's raw samples over the last ten steps (at least five
    /// minutes) of the range, seconds; `None` when Prometheus rejects the range (`bad_data`:
    /// no plain selector) or there are fewer than two samples there.
    fn raw_spacing(&self) -> Result<Option<f64>, PromError> {
        let window = (10.0 * self.q.step.as_secs_f64()).max(300.0);
        let from = (self.q.end - window).max(self.q.start);
        let series = match self.raw(from, self.q.end) {
            Ok(s) => s,
            // Not a plain selector (bad_data), or too much for the server: read by steps.
            Err(PromError::Rejected { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut gaps: Vec<f64> = series
            .iter()
            .flat_map(|s| s.points.windows(2).map(|w| w[1].0 - w[0].0))
            .collect();
        gaps.sort_by(f64::total_cmp);
        Ok(gaps.get(gaps.len() / 2).copied())
    }
}

/// One life of a series: from a (re)start to the next restart or the end.
#[derive(Debug, Clone, PartialEq)]
pub struct Life {
    pub labels: BTreeMap<String, String>,
    /// 1 for the first life of the label set, 2 after its first restart …
    pub life: u32,
    pub points: Vec<(f64, f64)>,
}

/// A series is cut into lives where it restarted: a gap longer than
/// `max(5 min, 3 steps)` (Prometheus marks a series stale after 5 min
/// without a scrape, so a gap means the target was gone); for a counter
/// (`_total`, `_count`, `_sum`), any decrease (a reset); for a gauge, a
/// fall to less than half the previous value (a process that restarts
/// gives back its memory at once; a collector rarely frees half).
pub fn lives(series: &PromSeries, step: Duration) -> Vec<Life> {
    let gap = (3.0 * step.as_secs_f64()).max(300.0);
    let name = series
        .labels
        .get("__name__")
        .map(String::as_str)
        .unwrap_or("");
    let counter = ["_total", "_count", "_sum"]
        .iter()
        .any(|s| name.ends_with(s));
    let mut out: Vec<Life> = Vec::new();
    let mut current: Vec<(f64, f64)> = Vec::new();
    for &(t, v) in &series.points {
        if let Some(&(pt, pv)) = current.last() {
            let restarted = t - pt > gap || if counter { v < pv } else { v < pv / 2.0 };
            if restarted {
                out.push(Life {
                    labels: series.labels.clone(),
                    life: out.len() as u32 + 1,
                    points: std::mem::take(&mut current),
                });
            }
        }
        current.push((t, v));
    }
    if !current.is_empty() {
        out.push(Life {
            labels: series.labels.clone(),
            life: out.len() as u32 + 1,
            points: current,
        });
    }
    out
}

/// A gauge held between its exporter's refreshes: read each refresh once.
///
/// An exporter that refreshes slower than Prometheus scrapes it (cAdvisor's housekeeping
/// every 10–15 s under a 1 s scrape; any cached collector) answers every scrape in between
/// with the same value. Those repeats are not observations: a line through them counts each
/// refresh's noise 15 times, and false leaks follow (measured:
/// docs/prometheus.md#in-analyze---prometheus). Held means: at least four runs of
/// equal values, and the runs inside the window (the first and last are cut by it) mostly
/// (4 in 5) of one length of two samples or more, within a quarter of it or one sample. A
/// value that only rarely or irregularly changes is what the process did, and is kept.
///
/// Returns the first point of each run (the first at one refresh before the second) and the
/// median time between refreshes, seconds.
pub fn refreshes(points: &[(f64, f64)]) -> Option<(Vec<(f64, f64)>, f64)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, p) in points.iter().enumerate() {
        match runs.last_mut() {
            Some((start, len)) if points[*start].1 == p.1 => *len += 1,
            _ => runs.push((i, 1)),
        }
    }
    if runs.len() < 4 {
        return None;
    }
    let mut inside: Vec<usize> = runs[1..runs.len() - 1].iter().map(|r| r.1).collect();
    inside.sort_unstable();
    let median = inside[inside.len() / 2];
    let near = |len: usize| len.abs_diff(median) <= (median / 4).max(1);
    let regular = inside.iter().filter(|&&len| near(len)).count() * 5 >= inside.len() * 4;
    if median < 2 || !regular {
        return None;
    }
    let mut firsts: Vec<(f64, f64)> = runs.iter().map(|&(start, _)| points[start]).collect();
    let mut gaps: Vec<f64> = firsts.windows(2).map(|w| w[1].0 - w[0].0).collect();
    gaps.sort_by(f64::total_cmp);
    let every = gaps[gaps.len() / 2];
    // The window cut the first run: its value was refreshed before the first scrape, about
    // one refresh before the next; at the first scrape it would be read up to a refresh late
    // (measured: docs/prometheus.md#the-first-refresh-the-range-cut).
    firsts[0].0 = firsts[0].0.min(firsts[1].0 - every);
    Some((firsts, every))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scrapes each second of a gauge refreshed every `every` s (its value: the refresh's
    /// index), from `phase`.
    fn held(n: usize, every: usize, phase: usize) -> Vec<(f64, f64)> {
        (0..n)
            .map(|i| (i as f64, ((i + phase) / every) as f64))
            .collect()
    }

    #[test]
    fn a_gauge_held_between_refreshes_is_read_once_per_refresh() {
        let (firsts, every) = refreshes(&held(60, 15, 7)).unwrap();
        assert_eq!(every, 15.0);
        let x: Vec<f64> = firsts.iter().map(|p| p.0).collect();
        // The first was refreshed before the window, one refresh before the second.
        assert_eq!(x, [-7.0, 8.0, 23.0, 38.0, 53.0]);
        // A scrape late or early by one sample is still a hold of about 15.
        let mut p = held(90, 15, 0);
        p[15].1 = 0.0;
        p[44].1 = 3.0;
        assert_eq!(refreshes(&p).unwrap().0.len(), 6);
    }

    #[test]
    fn values_that_change_rarely_or_every_scrape_are_kept() {
        // Every scrape new: nothing to collapse.
        let every: Vec<(f64, f64)> = (0..60).map(|i| (i as f64, (i * 7 % 5) as f64)).collect();
        assert!(refreshes(&every).is_none());
        // Flat, or three values: what the process did.
        assert!(refreshes(&held(60, 60, 0)).is_none());
        assert!(refreshes(&held(60, 25, 0)).is_none());
        // Irregular runs (2, 9, 3, 20, 4): an idle process that sometimes moves.
        let lens = [5, 2, 9, 3, 20, 4, 6];
        let mut p = Vec::new();
        for (v, len) in lens.iter().enumerate() {
            for _ in 0..*len {
                p.push((p.len() as f64, v as f64));
            }
        }
        assert!(refreshes(&p).is_none());
    }

    fn q() -> RangeQuery {
        RangeQuery {
            url: "http://p:9090".into(),
            query: "up".into(),
            start: 0.0,
            end: 100.0,
            step: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn long_ranges_are_chunked_under_the_server_limit() {
        let c = chunks(0.0, 7.0 * 86400.0, 15.0);
        assert!(c.len() >= 5);
        for &(a, b) in &c {
            assert!((b - a) / 15.0 + 1.0 <= MAX_POINTS as f64);
        }
        for w in c.windows(2) {
            assert_eq!(w[1].0, w[0].1 + 15.0);
        }
        assert_eq!(c.last().unwrap().1, 7.0 * 86400.0);
        assert_eq!(chunks(0.0, 10.0, 1.0), vec![(0.0, 10.0)]);
    }

    #[test]
    fn replies_errors_and_non_series_are_told_apart() {
        let ok = r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"__name__":"m","pod":"a"},"values":[[1,"10"],[2,"NaN"],[3,"12"]]}]}}"#;
        let s = parse_reply(&q(), 200, ok).unwrap();
        assert_eq!(s[0].points, vec![(1.0, 10.0), (3.0, 12.0)]);
        assert_eq!(s[0].label_text(), r#"{__name__="m",pod="a"}"#);
        let bad = r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#;
        let e = parse_reply(&q(), 400, bad).unwrap_err().to_string();
        assert!(
            e.contains("parse error at char 3") && e.contains("check the PromQL"),
            "{e}"
        );
        let scalar = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}"#;
        let e = parse_reply(&q(), 200, scalar).unwrap_err().to_string();
        assert!(e.contains("gives a scalar"), "{e}");
        let html = "<html>404 page not found</html>";
        let e = parse_reply(&q(), 404, html).unwrap_err().to_string();
        assert!(e.contains("HTTP 404") && e.contains("base URL"), "{e}");
    }

    #[test]
    fn restarts_gaps_and_counter_resets_start_new_lives() {
        let step = Duration::from_secs(60);
        let gauge = PromSeries {
            labels: BTreeMap::from([("__name__".into(), "mem".into())]),
            // grows, restarts (falls to a tenth), grows, then a 20 min gap
            points: vec![
                (0.0, 100.0),
                (60.0, 110.0),
                (120.0, 10.0),
                (180.0, 20.0),
                (1380.0, 30.0),
            ],
        };
        let l = lives(&gauge, step);
        assert_eq!(
            l.iter().map(|l| l.points.len()).collect::<Vec<_>>(),
            vec![2, 2, 1]
        );
        assert_eq!(l[2].life, 3);
        let counter = PromSeries {
            labels: BTreeMap::from([("__name__".into(), "x_total".into())]),
            points: vec![(0.0, 100.0), (60.0, 110.0), (120.0, 90.0)],
        };
        assert_eq!(lives(&counter, step).len(), 2);
    }

    #[test]
    fn an_unreachable_server_names_the_url_and_the_fix() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let q = RangeQuery {
            url: format!("http://127.0.0.1:{port}"),
            ..q()
        };
        let e = fetch(&q).unwrap_err().to_string();
        assert!(
            e.contains("cannot reach Prometheus") && e.contains(&q.url),
            "{e}"
        );
        let e = fetch(&RangeQuery {
            url: "ftp://x".into(),
            ..q
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("not an http"), "{e}");
    }
}
