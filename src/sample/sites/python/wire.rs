//! The wire format between leakwatch and its Python bootstrap, version 1,
//! and its parser into typed snapshots.
//!
//! # Transport
//!
//! Each instrumented process listens on the Unix stream socket
//! `D/<pid>.sock` (D: the private directory, mode 0700, so only its owner and
//! root can connect). Per connection: leakwatch writes one request line and
//! half-closes; the process writes one answer document on one line, ending
//! in `\n`, and closes. Both are UTF-8 JSON. Readers stop at the newline,
//! not at EOF: a process that forks while answering leaves a copy of the
//! connection in its child, which never closes it.
//!
//! # Request
//!
//! ```json
//! {"version": 1, "op": "snapshot", "run": 3,
//!  "top_bytes": 50, "top_blocks": 20, "top_growth": 20, "sticky_max": 200,
//!  "top_types": 30, "top_types_bytes": 10, "top_types_growth": 20, "sticky_types": 100}
//! ```
//!
//! - `version`: 1. `op`: `"snapshot"` (default) or `"ping"` (answers the
//!   common fields and `seq` only, no snapshot).
//! - `run`: an integer echoed back in the answer.
//! - `top_*`, `sticky_max`: selection sizes (0..=100000), defaults as shown.
//! - `top_types` > 0 asks for live objects by type as well (`by_type`);
//!   the bootstrap's default is 0 (none), so an older request gets the
//!   answer it knew. `top_types_*`, `sticky_types` size that selection.
//!
//! # Answer
//!
//! Always: `format` (`"leakwatch-py-sites"`), `version` (1), `pid`, `ppid`,
//! `run` (the echo, or null). On failure `error` (a sentence) and nothing
//! else. A snapshot adds:
//!
//! | field | meaning |
//! |---|---|
//! | `seq` | 1-based count of snapshots this process answered (a forked child starts at 1) |
//! | `time_unix` | seconds since the epoch when the snapshot was finished |
//! | `uptime_s` | seconds since the bootstrap started in this process, or since its fork |
//! | `forked` | the process is a forked child of an instrumented one (not exec'd) |
//! | `argv0`, `executable` | `sys.argv[0]` (null if unset), `sys.executable` |
//! | `python`, `implementation` | `"3.11.7"`, `"cpython"` |
//! | `frames_limit` | frames tracemalloc keeps per allocation (`get_traceback_limit()`) |
//! | `totals` | `traced_bytes`, `traced_blocks`: every live traced block, the bootstrap's own included; `self_bytes`, `self_blocks`: the bootstrap's own, left out of the groupings; `current_bytes`, `peak_bytes`: `get_traced_memory()`, the peak since `peak_since` (`"start"` or `"previous_answer"`, 3.9+ resets it after each answer); `tracemalloc_bytes`: `get_tracemalloc_memory()`, what tracemalloc's own tables cost |
//! | `timing` | `traces_ms`: copying the traces; `group_ms`: grouping and selecting (JSON encoding not included); `types_ms`: counting objects by type (null when not asked) |
//! | `files` | file names; a frame is `[index into files, line]` |
//! | `by_traceback` | grouped by full traceback |
//! | `by_line` | grouped by innermost *user* frame |
//! | `by_type` | only when `top_types` > 0: live objects by type, below |
//!
//! A grouping is `{"groups": N, "other_bytes": B, "other_blocks": K, "sites":
//! [...]}`: `groups` counts all groups, `other_*` is what the listed sites
//! leave out. Sites are sorted by bytes, largest first. A `by_traceback`
//! site is `{"frames": [[f, line], ...], "bytes", "blocks", "prev_bytes"}`,
//! frames innermost (the allocating line) first, at most `frames_limit`. A
//! `by_line` site is `{"frame": [f, line], "bytes", "blocks", "prev_bytes",
//! "tracebacks", "internal"}`: `tracebacks` counts the tracebacks merged;
//! `internal` is true when no frame of the traceback was user code, and the
//! frame is then the innermost one. A *user* frame is one outside the
//! standard library (importlib, tracemalloc, json, … but not site-packages),
//! frozen modules, `<unknown>` and the bootstrap.
//!
//! Which sites: the `top_bytes` largest, the `top_blocks` with most blocks,
//! the `top_growth` that grew most since the previous answer, and up to
//! `sticky_max` sites listed in an earlier answer and not in those tops now
//! (at 0 bytes once freed), so a site's series continues once it has
//! appeared. `prev_bytes` is the group's size at the process' previous
//! answer (0 if it had none), null on its first answer.
//!
//! `by_type` counts every object the cyclic GC tracks (`gc.get_objects()`,
//! as objgraph does, no collection first): `{"types": N, "objects": K,
//! "bytes": B, "other_count", "other_bytes", "untracked_count",
//! "untracked_bytes", "rows": [{"type", "count", "bytes", "prev_count"}]}`.
//! `type` is the module-qualified class name (`logging.LogRecord`; builtins
//! bare: `dict`), classes of one name merged; `bytes` the `sys.getsizeof`
//! total; `types`, `objects`, `bytes` cover all tracked objects, `other_*`
//! what the rows leave out. `untracked_*` is tracemalloc's view of the
//! program (traced minus the bootstrap's own) minus the tracked objects:
//! untracked leaves (str, bytes, int …) and storage no object's size
//! covers, an estimate, clamped at 0. Rows are chosen as sites are, by
//! count, bytes and growth in count (`prev_count`: the count at the
//! previous answer that counted types, null on the first), largest count
//! first.
//!
//! Fields may be added within version 1 (readers ignore unknown ones);
//! removing a field or changing its meaning bumps the version.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::AnswerError;

/// The `format` every answer carries.
pub const WIRE_FORMAT: &str = "leakwatch-py-sites";
/// The version this leakwatch speaks and reads.
pub const WIRE_VERSION: u32 = 1;

/// How many sites a process lists per grouping (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub top_bytes: u32,
    pub top_blocks: u32,
    pub top_growth: u32,
    pub sticky_max: u32,
    /// Types listed by count (0: no type counts), by bytes, by growth, and
    /// kept from earlier answers.
    pub top_types: u32,
    pub top_types_bytes: u32,
    pub top_types_growth: u32,
    pub sticky_types: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            top_bytes: 50,
            top_blocks: 20,
            top_growth: 20,
            sticky_max: 200,
            top_types: 30,
            top_types_bytes: 10,
            top_types_growth: 20,
            sticky_types: 100,
        }
    }
}

/// The request line for a snapshot after `run`.
pub fn request(run: u32, limits: &Limits) -> String {
    #[derive(Serialize)]
    struct Request<'a> {
        version: u32,
        op: &'a str,
        run: u32,
        #[serde(flatten)]
        limits: &'a Limits,
    }
    let req = Request {
        version: WIRE_VERSION,
        op: "snapshot",
        run,
        limits,
    };
    // Serialising plain integers and strings cannot fail.
    let mut line = serde_json::to_string(&req).unwrap_or_default();
    line.push('\n');
    line
}

/// One source line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    pub file: String,
    pub line: u32,
}

/// Memory held by one full traceback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracebackSite {
    /// Innermost (the allocating line) first; at most `frames_limit`.
    pub frames: Vec<Frame>,
    pub bytes: u64,
    pub blocks: u64,
    /// At the process' previous answer (0: the group did not exist); `None`
    /// on its first answer.
    pub prev_bytes: Option<u64>,
}

/// Memory held by the tracebacks whose innermost user frame is one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineSite {
    pub frame: Frame,
    pub bytes: u64,
    pub blocks: u64,
    pub prev_bytes: Option<u64>,
    /// Distinct tracebacks merged into this line.
    pub tracebacks: u64,
    /// No frame was user code; `frame` is then the innermost frame.
    pub internal: bool,
}

/// One grouping: the listed sites and what they leave out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grouping<T> {
    /// All groups in the process, listed or not.
    pub groups: u64,
    pub other_bytes: u64,
    pub other_blocks: u64,
    /// Largest first.
    pub sites: Vec<T>,
}

/// Live objects of one type name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TypeRow {
    /// Module-qualified class name (`logging.LogRecord`; builtins bare).
    #[serde(rename = "type")]
    pub name: String,
    pub count: u64,
    /// `sys.getsizeof` total.
    pub bytes: u64,
    /// At the previous answer that counted types; `None` on the first.
    pub prev_count: Option<u64>,
}

/// Live objects by type (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TypeCounts {
    /// Type names, objects and bytes over all tracked objects.
    pub types: u64,
    pub objects: u64,
    pub bytes: u64,
    /// What the rows leave out.
    pub other_count: u64,
    pub other_bytes: u64,
    /// Traced blocks and bytes no tracked object accounts for (an estimate).
    pub untracked_count: u64,
    pub untracked_bytes: u64,
    /// Largest count first.
    pub rows: Vec<TypeRow>,
}

/// Since when `Totals::peak_bytes` is the peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeakSince {
    /// Tracing started (or, in a forked child, the parent's last reset).
    Start,
    PreviousAnswer,
}

/// tracemalloc's view of the whole process. Bytes and blocks (allocations).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Totals {
    /// Every live traced block, the bootstrap's own included.
    pub traced_bytes: u64,
    pub traced_blocks: u64,
    /// The bootstrap's own blocks, left out of the groupings.
    pub self_bytes: u64,
    pub self_blocks: u64,
    /// `tracemalloc.get_traced_memory()`.
    pub current_bytes: u64,
    pub peak_bytes: u64,
    pub peak_since: PeakSince,
    /// `tracemalloc.get_tracemalloc_memory()`: the cost of tracing itself.
    pub tracemalloc_bytes: u64,
}

/// One process' answer, resolved into typed sites.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub pid: u32,
    pub ppid: u32,
    pub run: Option<u32>,
    pub seq: u64,
    pub time_unix: f64,
    pub uptime_seconds: f64,
    pub forked: bool,
    pub argv0: Option<String>,
    pub executable: String,
    pub python: String,
    pub implementation: String,
    pub frames_limit: u32,
    pub totals: Totals,
    /// Measured in the process: copying the traces, grouping them.
    pub traces_time: Duration,
    pub group_time: Duration,
    pub by_traceback: Grouping<TracebackSite>,
    pub by_line: Grouping<LineSite>,
    /// Live objects by type, when asked (`Limits::top_types` > 0) and the
    /// bootstrap counts them; and the time counting took.
    pub by_type: Option<TypeCounts>,
    pub types_time: Option<Duration>,
    /// Measured by leakwatch: the answer's size and connect-to-end time.
    pub answer_bytes: usize,
    pub latency: Duration,
}

#[derive(Deserialize)]
struct Header {
    format: String,
    version: u32,
    pid: u32,
    run: Option<u32>,
    error: Option<String>,
}

#[derive(Deserialize)]
struct Timing {
    traces_ms: f64,
    group_ms: f64,
    #[serde(default)]
    types_ms: Option<f64>,
}

type WireFrame = (usize, u32);

#[derive(Deserialize)]
struct WireGrouping<T> {
    groups: u64,
    other_bytes: u64,
    other_blocks: u64,
    sites: Vec<T>,
}

#[derive(Deserialize)]
struct WireTracebackSite {
    frames: Vec<WireFrame>,
    bytes: u64,
    blocks: u64,
    prev_bytes: Option<u64>,
}

#[derive(Deserialize)]
struct WireLineSite {
    frame: WireFrame,
    bytes: u64,
    blocks: u64,
    prev_bytes: Option<u64>,
    tracebacks: u64,
    internal: bool,
}

#[derive(Deserialize)]
struct WireSnapshot {
    pid: u32,
    ppid: u32,
    run: Option<u32>,
    seq: u64,
    time_unix: f64,
    uptime_s: f64,
    forked: bool,
    argv0: Option<String>,
    executable: String,
    python: String,
    implementation: String,
    frames_limit: u32,
    totals: Totals,
    timing: Timing,
    files: Vec<String>,
    by_traceback: WireGrouping<WireTracebackSite>,
    by_line: WireGrouping<WireLineSite>,
    #[serde(default)]
    by_type: Option<TypeCounts>,
}

/// Parses one answer of process `pid` to the request for `run`.
/// `answer_bytes` and `latency` are left at zero for the caller to fill.
pub fn parse_answer(pid: u32, run: Option<u32>, text: &str) -> Result<Snapshot, AnswerError> {
    let malformed = |e: serde_json::Error| AnswerError::Malformed {
        pid,
        detail: e.to_string(),
    };
    let header: Header = serde_json::from_str(text).map_err(malformed)?;
    if header.format != WIRE_FORMAT {
        return Err(AnswerError::Malformed {
            pid,
            detail: format!("format is '{}', not '{WIRE_FORMAT}'", header.format),
        });
    }
    if header.version != WIRE_VERSION {
        return Err(AnswerError::Version {
            pid,
            got: header.version,
        });
    }
    if header.pid != pid {
        return Err(AnswerError::Malformed {
            pid,
            detail: format!("the answer is from pid {}", header.pid),
        });
    }
    if let Some(message) = header.error {
        return Err(AnswerError::Reported { pid, message });
    }
    if run.is_some() && header.run != run {
        return Err(AnswerError::RunMismatch {
            pid,
            asked: run,
            got: header.run,
        });
    }
    let wire: WireSnapshot = serde_json::from_str(text).map_err(malformed)?;
    resolve(wire).map_err(|detail| AnswerError::Malformed { pid, detail })
}

fn resolve(w: WireSnapshot) -> Result<Snapshot, String> {
    let files = &w.files;
    let frame = |(i, line): WireFrame| -> Result<Frame, String> {
        let file = files
            .get(i)
            .ok_or_else(|| format!("frame refers to file {i}, only {} listed", files.len()))?;
        Ok(Frame {
            file: file.clone(),
            line,
        })
    };
    let by_traceback = Grouping {
        groups: w.by_traceback.groups,
        other_bytes: w.by_traceback.other_bytes,
        other_blocks: w.by_traceback.other_blocks,
        sites: w
            .by_traceback
            .sites
            .into_iter()
            .map(|s| {
                Ok(TracebackSite {
                    frames: s.frames.into_iter().map(frame).collect::<Result<_, _>>()?,
                    bytes: s.bytes,
                    blocks: s.blocks,
                    prev_bytes: s.prev_bytes,
                })
            })
            .collect::<Result<_, String>>()?,
    };
    let by_line = Grouping {
        groups: w.by_line.groups,
        other_bytes: w.by_line.other_bytes,
        other_blocks: w.by_line.other_blocks,
        sites: w
            .by_line
            .sites
            .into_iter()
            .map(|s| {
                Ok(LineSite {
                    frame: frame(s.frame)?,
                    bytes: s.bytes,
                    blocks: s.blocks,
                    prev_bytes: s.prev_bytes,
                    tracebacks: s.tracebacks,
                    internal: s.internal,
                })
            })
            .collect::<Result<_, String>>()?,
    };
    Ok(Snapshot {
        pid: w.pid,
        ppid: w.ppid,
        run: w.run,
        seq: w.seq,
        time_unix: w.time_unix,
        uptime_seconds: w.uptime_s,
        forked: w.forked,
        argv0: w.argv0,
        executable: w.executable,
        python: w.python,
        implementation: w.implementation,
        frames_limit: w.frames_limit,
        totals: w.totals,
        traces_time: millis(w.timing.traces_ms),
        group_time: millis(w.timing.group_ms),
        by_traceback,
        by_line,
        by_type: w.by_type,
        types_time: w.timing.types_ms.map(millis),
        answer_bytes: 0,
        latency: Duration::ZERO,
    })
}

fn millis(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms / 1000.0).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real answer (abridged) of the bootstrap, Python 3.11, second request.
    const ANSWER: &str = r#"{"format":"leakwatch-py-sites","version":1,"pid":4242,"ppid":1,"run":2,
      "seq":2,"time_unix":1796004908.95,"uptime_s":1.470943,"forked":true,"argv0":"/tmp/leaky.py",
      "executable":"/usr/bin/python3","python":"3.11.7","implementation":"cpython","frames_limit":16,
      "totals":{"traced_bytes":414349,"traced_blocks":1355,"self_bytes":154703,"self_blocks":1132,
        "current_bytes":414257,"peak_bytes":670694,"peak_since":"previous_answer","tracemalloc_bytes":191440},
      "timing":{"traces_ms":0.858,"group_ms":20.143},
      "files":["/tmp/leaky.py","<frozen importlib._bootstrap>"],
      "by_traceback":{"groups":40,"other_bytes":1000,"other_blocks":10,"sites":[
        {"frames":[[0,4],[0,7]],"bytes":200146,"blocks":5,"prev_bytes":100073},
        {"frames":[[1,241]],"bytes":9193,"blocks":73,"prev_bytes":0}]},
      "by_line":{"groups":12,"other_bytes":500,"other_blocks":3,"sites":[
        {"frame":[0,4],"bytes":200146,"blocks":5,"prev_bytes":100073,"tracebacks":1,"internal":false},
        {"frame":[1,241],"bytes":9193,"blocks":73,"prev_bytes":0,"tracebacks":3,"internal":true}]},
      "some_later_field":{"ignored":true}}"#;

    #[test]
    fn parses_a_snapshot() {
        let s = parse_answer(4242, Some(2), ANSWER).unwrap();
        assert_eq!((s.pid, s.ppid, s.run, s.seq), (4242, 1, Some(2), 2));
        assert!(s.forked);
        assert_eq!(s.frames_limit, 16);
        assert_eq!(s.totals.peak_since, PeakSince::PreviousAnswer);
        assert_eq!(s.totals.tracemalloc_bytes, 191_440);
        assert_eq!(s.traces_time, Duration::from_micros(858));
        let leak = &s.by_traceback.sites[0];
        assert_eq!(
            leak.frames,
            vec![
                Frame {
                    file: "/tmp/leaky.py".into(),
                    line: 4
                },
                Frame {
                    file: "/tmp/leaky.py".into(),
                    line: 7
                }
            ]
        );
        assert_eq!(leak.bytes - leak.prev_bytes.unwrap(), 100_073);
        let line = &s.by_line.sites[1];
        assert_eq!(line.frame.file, "<frozen importlib._bootstrap>");
        assert!(line.internal);
        assert_eq!(line.tracebacks, 3);
        assert_eq!(s.by_line.groups, 12);
    }

    #[test]
    fn parses_type_counts_and_reads_answers_without_them() {
        let text = ANSWER.replace(
            r#""some_later_field""#,
            r#""by_type":{"types":120,"objects":5000,"bytes":600000,"other_count":800,
              "other_bytes":90000,"untracked_count":3000,"untracked_bytes":2000000,"rows":[
              {"type":"__main__.Parser","count":700,"bytes":39200,"prev_count":0},
              {"type":"dict","count":650,"bytes":120000,"prev_count":null}]},
              "some_later_field""#,
        );
        let text = text.replace(
            r#""group_ms":20.143}"#,
            r#""group_ms":20.143,"types_ms":1.5}"#,
        );
        let s = parse_answer(4242, Some(2), &text).unwrap();
        let t = s.by_type.unwrap();
        assert_eq!((t.types, t.objects, t.untracked_count), (120, 5000, 3000));
        assert_eq!(t.rows[0].name, "__main__.Parser");
        assert_eq!((t.rows[0].count, t.rows[0].prev_count), (700, Some(0)));
        assert_eq!(t.rows[1].prev_count, None);
        assert_eq!(s.types_time, Some(Duration::from_micros(1500)));
        // An answer from a bootstrap that counts no types.
        let old = parse_answer(4242, Some(2), ANSWER).unwrap();
        assert_eq!((old.by_type, old.types_time), (None, None));
    }

    #[test]
    fn first_answer_has_no_previous_size() {
        let text = ANSWER
            .replace(r#""prev_bytes":100073"#, r#""prev_bytes":null"#)
            .replace(
                r#""peak_since":"previous_answer""#,
                r#""peak_since":"start""#,
            );
        let s = parse_answer(4242, Some(2), &text).unwrap();
        assert_eq!(s.by_line.sites[0].prev_bytes, None);
        assert_eq!(s.totals.peak_since, PeakSince::Start);
    }

    #[test]
    fn reported_errors_become_typed() {
        let text = r#"{"format":"leakwatch-py-sites","version":1,"pid":7,"ppid":1,"run":3,
            "error":"tracemalloc is not tracing: the program stopped it"}"#;
        let err = parse_answer(7, Some(3), text).unwrap_err();
        assert!(
            matches!(&err, AnswerError::Reported { pid: 7, message } if message.contains("stopped")),
            "{err}"
        );
    }

    #[test]
    fn another_version_is_refused_by_name() {
        let text = r#"{"format":"leakwatch-py-sites","version":2,"pid":7,"ppid":1,"run":3}"#;
        let err = parse_answer(7, Some(3), text).unwrap_err();
        assert!(matches!(err, AnswerError::Version { pid: 7, got: 2 }));
        assert!(err.to_string().contains("version 2"), "{err}");
    }

    #[test]
    fn mismatches_and_garbage_are_malformed() {
        let other_run = parse_answer(4242, Some(3), ANSWER).unwrap_err();
        assert!(matches!(other_run, AnswerError::RunMismatch { .. }));
        let other_pid = parse_answer(1, Some(2), ANSWER).unwrap_err();
        assert!(matches!(other_pid, AnswerError::Malformed { .. }));
        let bad_index = ANSWER.replace("[[1,241]]", "[[9,241]]");
        let err = parse_answer(4242, Some(2), &bad_index).unwrap_err();
        assert!(err.to_string().contains("file 9"), "{err}");
        let truncated = &ANSWER[..ANSWER.len() / 2];
        assert!(matches!(
            parse_answer(4242, Some(2), truncated),
            Err(AnswerError::Malformed { .. })
        ));
        let not_ours = r#"{"format":"x","version":1,"pid":4242,"run":2}"#;
        assert!(matches!(
            parse_answer(4242, Some(2), not_ours),
            Err(AnswerError::Malformed { .. })
        ));
    }

    #[test]
    fn request_is_one_json_line() {
        let line = request(3, &Limits::default());
        assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["version"], 1);
        assert_eq!(v["op"], "snapshot");
        assert_eq!(v["run"], 3);
        assert_eq!(v["top_bytes"], 50);
        assert_eq!(v["sticky_max"], 200);
        assert_eq!(v["top_types"], 30, "type counts are asked by default");
    }
}
