//! Validated options: units parsed, limits checked, defaults resolved — from
//! what the user typed alone. Nothing here reads /proc, PATH or the file
//! system (ripgrep's `lowargs` rule): a PID is checked to be alive, a program
//! found and an output directory created where the environment is used.
//! Errors name the flag, quote the value and say the fix.

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{
    AnalysisArgs, AnalyzeArgs, AttachArgs, CheckArgs, ExportArgs, GateArgs, HeapArgs, OutputArgs,
    ReportArgs, RunArgs, ServeArgs, TargetArgs,
};
use crate::fit::FitOptions;
use crate::gate::{self, GateError, GateOn, GateOptions};
use crate::sample::procfs::ProcRoot;
use crate::sample::{AttachPlan, RunPlan, Target};
use crate::series::{Metric, XAxis};
use crate::units::{UnitError, parse_duration, parse_size};

/// The smallest `--max-samples`: below it, one sweep of a large tree and the
/// deep samples alone could fill the file.
pub const MIN_MAX_SAMPLES: u64 = 100;

#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    #[error("--{flag} {error}")]
    Unit {
        flag: &'static str,
        error: UnitError,
    },
    #[error("--repeat {0}: the command must run at least once; try --repeat 10")]
    Repeat(u64),
    #[error("--repeat {0}: at most {max} runs; try --repeat 1000", max = MAX_REPEAT)]
    TooManyRuns(u64),
    #[error(
        "--{flag} '{value}' is below {floor}: faster sampling costs a whole core and \
         measures nothing new; try '100ms'"
    )]
    TooFast {
        flag: &'static str,
        value: String,
        floor: &'static str,
    },
    #[error("--{flag} '{value}' must be longer than zero; try '100ms'")]
    ZeroInterval { flag: &'static str, value: String },
    #[error("{what} '{value}' is not a PID; give the number `pgrep NAME` prints")]
    NotAPid { what: &'static str, value: String },
    #[error(
        "attach needs a target: a PID (`leakwatch attach 4242` or `-p 4242`), --name REGEX \
         (a process name or command line), --cgroup PATH or --unit NAME (a systemd unit)"
    )]
    NoTarget,
    #[error(
        "'{0}' is not a PID; to attach by name use `--name {0}` (or give the PID `pgrep {0}` \
         prints)"
    )]
    NameForPid(String),
    #[error("--py-frames {0}: give 1 to 64 frames; try --py-frames 1 (the default)")]
    PyFrames(usize),
    #[error(
        "--native-interval '{0}' is not a size from 1KiB to 1GiB; try --native-interval 64KiB \
         (the default)"
    )]
    NativeInterval(String),
    #[error(
        "--js-interval '{0}' is not a size from 1KiB to 1GiB; try --js-interval 256KiB \
         (the default)"
    )]
    JsInterval(String),
    #[error(
        "attach --native-sites loads the shim into one process: give its PID \
         (`leakwatch attach --native-sites 4242`), not --name, --cgroup or --unit"
    )]
    NativeSitesTarget,
    #[error(
        "attach --py-sites enters one process (and the Python processes below it): give its \
         PID (`leakwatch attach --py-sites 4242`), not --name, --cgroup or --unit"
    )]
    PySitesTarget,
    #[error(transparent)]
    Metrics(#[from] crate::sample::heap::MetricsUrlError),
    #[error(
        "--metric '{0}' is not a metric name; give a gauge's name as the endpoint exports it \
         (`queue_length`, or a dotted path in expvar JSON: `memstats.Mallocs`), without labels"
    )]
    MetricName(String),
    #[error("--deep-budget '{0}' is not a fraction; try '0.1%' or '0.001'")]
    DeepBudget(String),
    #[error("--max-samples {0}: keep at least {min} rows; try --max-samples 100000", min = MIN_MAX_SAMPLES)]
    MaxSamples(u64),
    #[error("--tolerance '{0}' is not a percentage; try '10%'")]
    Tolerance(String),
    #[error(transparent)]
    Gate(#[from] GateError),
    #[error(
        "--name '{pattern}' is not a regular expression ({why}); escape special characters, e.g. 'my\\.app'"
    )]
    Regex { pattern: String, why: String },
    #[error(
        "--serve '{0}' is not an address; try '127.0.0.1:9464', ':9464' (loopback) or '[::1]:9464'"
    )]
    ServeAddr(String),
    #[error(
        "--serve '{0}' is not a loopback address: the metrics name your processes and their \
         commands; serve on 127.0.0.1 (and scrape through a tunnel), or add --serve-public"
    )]
    ServePublic(String),
    #[error("--as '{0}' is not a metric; use rss_bytes, anon_bytes, pss_bytes, fds, threads …")]
    AsMetric(String),
    #[error("--end '{0}' is not a time; give RFC 3339 ('2026-11-30T12:00:00Z') or Unix seconds")]
    End(String),
    #[error("--format '{0}' is not an export format; use 'openmetrics'")]
    Format(String),
    #[error("--export-top 0 would export no process; give at least 1 (default 50)")]
    ExportTop,
}

/// The gate and where its CI outputs go.
#[derive(Debug, Clone, Default)]
pub struct GateSetup {
    pub gate: GateOptions,
    pub junit: Option<PathBuf>,
    pub save_baseline: Option<PathBuf>,
    /// `--exit-zero`: exit 0 whatever the verdict and the gate say.
    pub exit_zero: bool,
}

/// The gate, with its limits checked against the x axis of the mode when
/// the mode is known (`run`: per run; `attach`: per time).
fn gate_setup(args: &GateArgs, x: Option<XAxis>) -> Result<GateSetup, OptionsError> {
    let mut max_growth = Vec::new();
    for text in &args.max_growth {
        let limit = gate::parse_max_growth(text)?;
        if let Some(x) = x {
            gate::check_axis(&limit, x)?;
        }
        max_growth.push(limit);
    }
    Ok(GateSetup {
        gate: GateOptions {
            max_growth,
            gate_on: gate_on(&args.gate_on)?,
            max_peak_bytes: size("max-peak", args.max_peak.as_deref())?,
            rule: gate::parse_rule(&args.gate_rule)?,
            on_undecided: gate::parse_on_undecided(&args.undecided)?,
        },
        junit: args.junit.clone(),
        save_baseline: args.save_baseline.clone(),
        exit_zero: args.exit_zero,
    })
}

fn gate_on(values: &[String]) -> Result<Vec<GateOn>, OptionsError> {
    Ok(values
        .iter()
        .map(|g| gate::parse_gate_on(g))
        .collect::<Result<_, _>>()?)
}

/// `check`: paths as typed; `app` finds the summary.json in a directory.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// `--json`: the result on stdout as JSON.
    pub json: bool,
    pub current: PathBuf,
    pub baseline: PathBuf,
    /// 0.1 = 10%.
    pub tolerance: f64,
    pub gate_on: Vec<GateOn>,
    pub junit: Option<PathBuf>,
    pub quiet: bool,
}

impl CheckOptions {
    pub fn from_args(args: &CheckArgs) -> Result<Self, OptionsError> {
        let tolerance = args
            .tolerance
            .trim()
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<f64>().ok())
            .filter(|p| p.is_finite() && *p >= 0.0)
            .ok_or_else(|| OptionsError::Tolerance(args.tolerance.clone()))?
            / 100.0;
        Ok(CheckOptions {
            json: args.json,
            current: args.current.clone(),
            baseline: args.baseline.clone(),
            tolerance,
            gate_on: gate_on(&args.gate_on)?,
            junit: args.junit.clone(),
            quiet: args.quiet,
        })
    }
}

/// Where the outputs go and how chatty to be.
#[derive(Debug, Clone)]
pub struct Output {
    /// `--out`, or `None` for a fresh `reports/<timestamp>/`.
    pub dir: Option<PathBuf>,
    pub quiet: bool,
    /// `--json`: summary.json on stdout as well.
    pub json: bool,
}

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub plan: RunPlan,
    pub fit: FitOptions,
    pub gate: GateSetup,
    pub output: Output,
}

#[derive(Debug, Clone)]
pub struct AttachOptions {
    pub plan: AttachPlan,
    pub fit: FitOptions,
    pub gate: GateSetup,
    pub output: Output,
    /// `--serve`: where to serve /metrics, and how many processes to export.
    pub serve: Option<ServeOptions>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeOptions {
    pub addr: std::net::SocketAddr,
    pub top: usize,
}

/// `report`: the input as typed (a directory or its samples.csv).
#[derive(Debug, Clone)]
pub struct ReportOptions {
    pub input: PathBuf,
    pub fit: FitOptions,
    pub gate: GateSetup,
    pub output: Output,
}

fn duration(flag: &'static str, value: &str) -> Result<Duration, OptionsError> {
    parse_duration(value).map_err(|error| OptionsError::Unit { flag, error })
}

/// Most runs a session may ask for: a million runs already take days.
const MAX_REPEAT: u32 = 1_000_000;

/// The shortest sampling interval: 10 ms. Below it, reading /proc every tick
/// of a tree takes a whole core, and memory does not move that fast.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// A sampling interval: positive and not below `MIN_INTERVAL`.
fn interval(flag: &'static str, value: &str) -> Result<Duration, OptionsError> {
    let d = positive(flag, value)?;
    if d < MIN_INTERVAL {
        return Err(OptionsError::TooFast {
            flag,
            value: value.to_string(),
            floor: "10ms",
        });
    }
    Ok(d)
}

fn positive(flag: &'static str, value: &str) -> Result<Duration, OptionsError> {
    let d = duration(flag, value)?;
    if d.is_zero() {
        return Err(OptionsError::ZeroInterval {
            flag,
            value: value.to_string(),
        });
    }
    Ok(d)
}

/// A PID as typed: a positive number.
fn pid(what: &'static str, value: &str) -> Result<u32, OptionsError> {
    value
        .trim()
        .parse()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| OptionsError::NotAPid {
            what,
            value: value.to_string(),
        })
}

fn output(args: &OutputArgs) -> Output {
    Output {
        dir: args.out.clone(),
        quiet: args.quiet,
        json: args.json,
    }
}

impl RunOptions {
    pub fn from_args(args: &RunArgs) -> Result<Self, OptionsError> {
        if args.repeat == 0 {
            return Err(OptionsError::Repeat(args.repeat));
        }
        let repeat = u32::try_from(args.repeat)
            .ok()
            .filter(|&r| r <= MAX_REPEAT)
            .ok_or(OptionsError::TooManyRuns(args.repeat))?;
        let mut watch: Vec<u32> = Vec::new();
        for w in &args.watch {
            let pid = pid("--watch", w)?;
            // The same pid twice would be summed twice into one series.
            if !watch.contains(&pid) {
                watch.push(pid);
            }
        }
        Ok(RunOptions {
            plan: RunPlan {
                repeat,
                watch,
                interval: interval("interval", &args.interval)?,
                settle: duration("settle", &args.settle)?,
                timeout: args
                    .timeout
                    .as_deref()
                    .map(|t| positive("timeout", t))
                    .transpose()?,
                keep_survivors: args.keep_survivors,
                node_preload: !args.no_node_preload,
                js_sites: js_interval(args.js_sites, &args.js_interval)?,
                metrics: metrics_url(&args.heaps)?,
                gauge: gauge_name(&args.heaps)?,
                node_inspector: args.heaps.node_inspector,
                jvm_classes: args.heaps.jvm_classes,
                py_sites: py_frames(args.py_sites, args.py_frames)?,
                native_sites: args
                    .native_sites
                    .then(|| native_interval(&args.native_interval))
                    .transpose()?,
                command: args.command.clone(),
                root: ProcRoot::default(),
            },
            fit: fit_options(&args.analysis)?,
            gate: gate_setup(&args.gate, Some(XAxis::Run))?,
            output: output(&args.output),
        })
    }
}

/// `--py-sites` with `--py-frames N`: the frames, checked.
fn py_frames(py_sites: bool, frames: usize) -> Result<Option<usize>, OptionsError> {
    py_sites
        .then(|| {
            if (1..=64).contains(&frames) {
                Ok(frames)
            } else {
                Err(OptionsError::PyFrames(frames))
            }
        })
        .transpose()
}

impl AttachOptions {
    pub fn from_args(args: &AttachArgs) -> Result<Self, OptionsError> {
        let interval = interval("interval", &args.interval)?;
        let duration = args
            .duration
            .as_deref()
            .map(|d| positive("duration", d))
            .transpose()?;
        let deep_budget = parse_fraction(&args.deep_budget)
            .ok_or_else(|| OptionsError::DeepBudget(args.deep_budget.clone()))?;
        if let Some(rows) = args.max_samples.filter(|&r| r < MIN_MAX_SAMPLES) {
            return Err(OptionsError::MaxSamples(rows));
        }
        let target = target(
            args.pid.as_deref().or(args.pid_flag.as_deref()),
            &args.targets,
        )?;
        let native_sites = args
            .native_sites
            .then(|| native_interval(&args.native_interval))
            .transpose()?;
        if native_sites.is_some() && !matches!(target, Target::Pid(_)) {
            return Err(OptionsError::NativeSitesTarget);
        }
        let py_sites = py_frames(args.py_sites, args.py_frames)?;
        if py_sites.is_some() && !matches!(target, Target::Pid(_)) {
            return Err(OptionsError::PySitesTarget);
        }
        Ok(AttachOptions {
            plan: AttachPlan {
                target,
                native_sites,
                py_sites,
                metrics: metrics_url(&args.heaps)?,
                gauge: gauge_name(&args.heaps)?,
                node_inspector: args.heaps.node_inspector,
                jvm_classes: args.heaps.jvm_classes,
                js_sites: js_interval(args.js_sites, &args.js_interval)?,
                interval,
                duration,
                deep_budget,
                max_rows: args.max_samples,
                root: ProcRoot::default(),
            },
            fit: fit_options(&args.analysis)?,
            gate: gate_setup(&args.gate, Some(XAxis::Seconds))?,
            output: output(&args.output),
            serve: serve(&args.serve)?,
        })
    }
}

impl ReportOptions {
    pub fn from_args(args: &ReportArgs) -> Result<Self, OptionsError> {
        Ok(ReportOptions {
            input: args.input.clone(),
            fit: fit_options(&args.analysis)?,
            gate: gate_setup(&args.gate, None)?,
            output: Output {
                dir: args.out.clone(),
                quiet: args.quiet,
                json: args.json,
            },
        })
    }
}

/// A one-line fix for a usage error clap alone explains badly, or `None`
/// for clap's own message: `leakwatch run --repeat 3 /bin/true` (the
/// command is not after `--`).
pub fn usage_hint(error: &clap::Error, args: &[std::ffi::OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(unknown)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let words: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Some(hint) = split_value(&words, unknown) {
        return Some(hint);
    }
    let run = words.iter().position(|w| w == "run")?;
    if unknown.starts_with('-') || words.iter().any(|w| w == "--") {
        return None;
    }
    let at = words.iter().skip(run).position(|w| w == unknown)? + run;
    let quoted: Vec<String> = words.iter().map(|w| shell_word(w)).collect();
    Some(format!(
        "'{unknown}' is not an option of `leakwatch run`: the command goes after `--`, as in \
         `leakwatch {} -- {}`",
        quoted[..at].join(" "),
        quoted[at..].join(" ")
    ))
}

/// A size, rate or duration typed as two words (`--max-growth 10 MiB/h`): the unknown word
/// is a unit (letters, `%`, `/` and letters) after a number given to an option that takes a
/// SIZE, RATE, DUR or PERCENT. The fix names the option and the one word it takes.
fn split_value(words: &[String], unknown: &str) -> Option<String> {
    let letters = |s: &str| s.chars().all(|c| c.is_ascii_alphabetic() || c == '%');
    let unit = match unknown.split_once('/') {
        Some((head, per)) => {
            letters(head) && !per.is_empty() && per.chars().all(|c| c.is_ascii_alphabetic())
        }
        None => !unknown.is_empty() && letters(unknown),
    };
    if !unit {
        return None;
    }
    let at = words.iter().position(|w| w == unknown)?;
    let (flag, value) = (words.get(at.checked_sub(2)?)?, &words[at - 1]);
    if !value.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let long = flag.strip_prefix("--")?;
    let command = <crate::cli::Cli as clap::CommandFactory>::command();
    let sub = command.find_subcommand(words.first()?)?;
    let arg = sub.get_arguments().find(|a| a.get_long() == Some(long))?;
    let kinds = ["SIZE", "RATE", "DUR", "PERCENT"];
    arg.get_value_names()?
        .iter()
        .any(|n| kinds.contains(&n.as_str()))
        .then(|| {
            format!(
                "'{unknown}' is not an argument: {flag} takes one word, as in `{flag} \
                 {value}{unknown}` (no space)"
            )
        })
}

/// A word as a shell would need it typed: quoted when it holds anything but
/// plain characters.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+%@".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

// ---- targets beyond a PID, --serve, analyze, export ----

/// The attach target as typed: a PID, `--name`, `--cgroup` or `--unit`
/// (clap makes sure exactly one is given).
fn target(pid_text: Option<&str>, args: &TargetArgs) -> Result<Target, OptionsError> {
    if let Some(pattern) = &args.name {
        let regex = regex::Regex::new(pattern).map_err(|e| OptionsError::Regex {
            pattern: pattern.clone(),
            why: e
                .to_string()
                .lines()
                .last()
                .unwrap_or("")
                .trim()
                .to_string(),
        })?;
        return Ok(Target::Name {
            regex,
            all: args.all,
        });
    }
    if let Some(path) = &args.cgroup {
        return Ok(Target::Cgroup(path.clone()));
    }
    if let Some(unit) = &args.unit {
        // `nginx` means `nginx.service`, as systemctl reads it.
        let unit = if unit.contains('.') {
            unit.clone()
        } else {
            format!("{unit}.service")
        };
        return Ok(Target::Unit(unit));
    }
    let Some(text) = pid_text else {
        return Err(OptionsError::NoTarget);
    };
    match pid("PID", text) {
        Ok(p) => Ok(Target::Pid(p)),
        // `attach python3`: a name where a PID goes.
        Err(_)
            if !text.trim().is_empty()
                && !text.trim().starts_with(|c: char| c.is_ascii_digit()) =>
        {
            Err(OptionsError::NameForPid(text.trim().to_string()))
        }
        Err(e) => Err(e),
    }
}

/// `--serve ADDR`: `HOST:PORT` with an IP (or `localhost`), or `:PORT` for
/// loopback; anything but loopback needs `--serve-public`.
pub fn serve_addr(text: &str, public: bool) -> Result<std::net::SocketAddr, OptionsError> {
    use std::net::{Ipv4Addr, SocketAddr};
    let t = text.trim();
    let err = || OptionsError::ServeAddr(text.to_string());
    let addr = if let Some(port) = t.strip_prefix(':').or_else(|| t.strip_prefix("localhost:")) {
        SocketAddr::from((Ipv4Addr::LOCALHOST, port.parse::<u16>().map_err(|_| err())?))
    } else {
        t.parse::<SocketAddr>().map_err(|_| err())?
    };
    if !addr.ip().is_loopback() && !public {
        return Err(OptionsError::ServePublic(text.to_string()));
    }
    Ok(addr)
}

fn serve(args: &ServeArgs) -> Result<Option<ServeOptions>, OptionsError> {
    let Some(text) = &args.serve else {
        return Ok(None);
    };
    if args.export_top == 0 {
        return Err(OptionsError::ExportTop);
    }
    Ok(Some(ServeOptions {
        addr: serve_addr(text, args.serve_public)?,
        top: args.export_top,
    }))
}

/// `analyze --prometheus`: the query and its range, resolved to numbers.
#[derive(Debug, Clone)]
pub struct AnalyzeOptions {
    pub url: String,
    pub query: String,
    /// Seconds before `end`.
    pub range: Duration,
    /// Unix seconds; `None`: now (read where it is used).
    pub end: Option<f64>,
    /// `None`: the range / 1000, at least 15 s.
    pub step: Option<Duration>,
    pub timeout: Duration,
    /// The column the values are, e.g. `rss_bytes`.
    pub metric: Metric,
    pub fit: FitOptions,
    pub gate: GateSetup,
    pub output: Output,
}

/// `--end`: RFC 3339 or Unix seconds.
fn end_time(text: &str) -> Result<f64, OptionsError> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Ok(secs);
    }
    chrono::DateTime::parse_from_rfc3339(t)
        .map(|d| d.timestamp_millis() as f64 / 1000.0)
        .map_err(|_| OptionsError::End(text.to_string()))
}

impl AnalyzeOptions {
    pub fn from_args(args: &AnalyzeArgs) -> Result<Self, OptionsError> {
        Ok(AnalyzeOptions {
            url: args.prometheus.trim().to_string(),
            query: args.query.clone(),
            range: positive("range", &args.range)?,
            end: args.end.as_deref().map(end_time).transpose()?,
            step: args
                .step
                .as_deref()
                .map(|s| positive("step", s))
                .transpose()?,
            timeout: positive("timeout", &args.timeout)?,
            metric: Metric::from_name(args.as_metric.trim())
                .ok_or_else(|| OptionsError::AsMetric(args.as_metric.clone()))?,
            fit: fit_options(&args.analysis)?,
            gate: gate_setup(&args.gate, Some(XAxis::Seconds))?,
            output: output(&args.output),
        })
    }
}

/// `export DIR --format openmetrics`.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub input: PathBuf,
    pub out: Option<PathBuf>,
    pub top: usize,
    pub fit: FitOptions,
}

impl ExportOptions {
    pub fn from_args(args: &ExportArgs) -> Result<Self, OptionsError> {
        if args.format.trim() != "openmetrics" {
            return Err(OptionsError::Format(args.format.clone()));
        }
        if args.export_top == 0 {
            return Err(OptionsError::ExportTop);
        }
        Ok(ExportOptions {
            input: args.input.clone(),
            out: args.out.clone(),
            top: args.export_top,
            fit: fit_options(&args.analysis)?,
        })
    }
}

fn size(flag: &'static str, value: Option<&str>) -> Result<Option<u64>, OptionsError> {
    value
        .map(|v| parse_size(v).map_err(|error| OptionsError::Unit { flag, error }))
        .transpose()
}

/// `--js-interval`, when `--js-sites` is given.
fn js_interval(on: bool, text: &str) -> Result<Option<u64>, OptionsError> {
    on.then(|| match parse_size(text) {
        Ok(n) if (1024..=1 << 30).contains(&n) => Ok(n),
        _ => Err(OptionsError::JsInterval(text.to_string())),
    })
    .transpose()
}

/// `--native-interval`: at least 1 KiB (smaller costs an unwind every few
/// allocations) and at most 1 GiB.
fn native_interval(text: &str) -> Result<u64, OptionsError> {
    match parse_size(text) {
        Ok(n) if (1024..=1 << 30).contains(&n) => Ok(n),
        _ => Err(OptionsError::NativeInterval(text.to_string())),
    }
}

/// `--metric NAME`, checked (a metric name, or a dotted path of them).
fn gauge_name(args: &HeapArgs) -> Result<Option<String>, OptionsError> {
    let Some(name) = args.metric.as_deref().map(str::trim) else {
        return Ok(None);
    };
    if !crate::sample::heap::metrics::is_gauge_name(name) {
        return Err(OptionsError::MetricName(name.to_string()));
    }
    Ok(Some(name.to_string()))
}

/// `--metrics URL`, checked (http, a host and port that parse).
fn metrics_url(args: &HeapArgs) -> Result<Option<String>, OptionsError> {
    let Some(url) = args.metrics.as_deref().map(str::trim) else {
        return Ok(None);
    };
    crate::sample::heap::MetricsEndpoint::check(url)?;
    Ok(Some(url.to_string()))
}

fn fit_options(args: &AnalysisArgs) -> Result<FitOptions, OptionsError> {
    Ok(FitOptions {
        warmup: args.warmup,
        limit_bytes: size("limit", args.limit.as_deref())?,
        budget_bytes: size("budget", args.budget.as_deref())?,
    })
}

/// `0.1%` → 0.001, `0.001` → 0.001; must lie in (0, 1].
fn parse_fraction(text: &str) -> Option<f64> {
    let t = text.trim();
    let value = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok()? / 100.0,
        None => t.parse::<f64>().ok()?,
    };
    // 0 turns the deep tier off (`attach --deep-budget 0`: no page walk).
    (0.0..=1.0).contains(&value).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_native_interval_defaults_to_the_documented_one() {
        use crate::cli::{Cli, Command};
        use crate::sample::sites::native::DEFAULT_INTERVAL_BYTES;
        use clap::Parser;
        let run = Cli::parse_from(["leakwatch", "run", "--native-sites", "--", "true"]);
        let attach = Cli::parse_from(["leakwatch", "attach", "--native-sites", "1"]);
        let texts = match (run.command, attach.command) {
            (Command::Run(r), Command::Attach(a)) => [r.native_interval, a.native_interval],
            _ => panic!("not run and attach"),
        };
        for text in texts {
            assert_eq!(native_interval(&text).unwrap(), DEFAULT_INTERVAL_BYTES);
        }
    }

    #[test]
    fn serve_addresses_are_loopback_unless_public() {
        assert_eq!(
            serve_addr(":9464", false).unwrap().to_string(),
            "127.0.0.1:9464"
        );
        assert_eq!(
            serve_addr("localhost:9464", false).unwrap().to_string(),
            "127.0.0.1:9464"
        );
        assert!(serve_addr("[::1]:9464", false).is_ok());
        let e = serve_addr("0.0.0.0:9464", false).unwrap_err().to_string();
        assert!(e.contains("--serve-public"), "{e}");
        assert!(serve_addr("0.0.0.0:9464", true).is_ok());
        assert!(serve_addr("9464", false).is_err());
        assert!(serve_addr("host:9464", false).is_err());
    }

    #[test]
    fn end_times() {
        assert_eq!(end_time("1700000000").unwrap(), 1_700_000_000.0);
        assert_eq!(end_time("2023-11-14T22:13:20Z").unwrap(), 1_700_000_000.0);
        assert!(end_time("yesterday").is_err());
    }

    #[test]
    fn fractions() {
        assert_eq!(parse_fraction("0.1%"), Some(0.001));
        assert_eq!(parse_fraction("0.5"), Some(0.5));
        assert_eq!(parse_fraction("0%"), Some(0.0));
        assert_eq!(parse_fraction("0"), Some(0.0));
        assert_eq!(parse_fraction("-1%"), None);
        assert_eq!(parse_fraction("abc%"), None);
    }
}
