//! Validated options: units parsed, PIDs and commands checked, defaults
//! resolved. Errors name the flag, quote the value and say the fix.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cli::{AnalysisArgs, AttachArgs, CheckArgs, GateArgs, OutputArgs, ReportArgs, RunArgs};
use crate::fit::FitOptions;
use crate::gate::{self, GateError, GateOn, GateOptions};
use crate::sample::proc::ProcRoot;
use crate::series::XAxis;
use crate::units::{UnitError, parse_duration, parse_size};

#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    #[error("--{flag} {source}")]
    Unit {
        flag: &'static str,
        source: UnitError,
    },
    #[error("--repeat {0}: the command must run at least once; try --repeat 10")]
    Repeat(u64),
    #[error("--{flag} '{value}' must be longer than zero; try '100ms'")]
    ZeroInterval { flag: &'static str, value: String },
    #[error("{what} '{value}' is not a PID; give the number `pgrep NAME` prints")]
    NotAPid { what: &'static str, value: String },
    #[error("{what} {pid}: no such process; check the PID with `ps -p {pid}` or `pgrep NAME`")]
    NoSuchProcess { what: &'static str, pid: u32 },
    #[error("command '{0}' not found in PATH; give its path (e.g. ./{0}) or install it")]
    CommandNotFound(String),
    #[error("command '{0}' does not exist; check the path")]
    CommandMissing(String),
    #[error("command '{0}' is not executable; try `chmod +x {0}`")]
    CommandNotExecutable(String),
    #[error(
        "--out {0} already holds a leakwatch report (samples.csv); choose another \
         directory or remove it"
    )]
    OutExists(PathBuf),
    #[error("--deep-budget '{0}' is not a fraction; try '0.1%' or '0.001'")]
    DeepBudget(String),
    #[error("{0} has no samples.csv; give a leakwatch output directory or a samples.csv file")]
    NoSamples(PathBuf),
    #[error("{0} has no summary.json; give a leakwatch output directory or its summary.json")]
    NoSummary(PathBuf),
    #[error("--baseline {0} does not exist; write one with --save-baseline FILE on a good run")]
    NoBaseline(PathBuf),
    #[error("--tolerance '{0}' is not a percentage; try '10%'")]
    Tolerance(String),
    #[error(transparent)]
    Gate(#[from] GateError),
    #[error("PID {pid} ({name}) is a kernel thread: it has no user memory to sample")]
    KernelThread { pid: u32, name: String },
}

/// The gate and where its CI outputs go.
#[derive(Debug, Clone, Default)]
pub struct GateSetup {
    pub gate: GateOptions,
    pub junit: Option<PathBuf>,
    pub save_baseline: Option<PathBuf>,
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
        },
        junit: args.junit.clone(),
        save_baseline: args.save_baseline.clone(),
    })
}

fn gate_on(values: &[String]) -> Result<Vec<GateOn>, OptionsError> {
    Ok(values
        .iter()
        .map(|g| gate::parse_gate_on(g))
        .collect::<Result<_, _>>()?)
}

#[derive(Debug, Clone)]
pub struct CheckOptions {
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
        let current = if args.current.is_dir() {
            args.current.join("summary.json")
        } else {
            args.current.clone()
        };
        if !current.is_file() {
            return Err(OptionsError::NoSummary(args.current.clone()));
        }
        if !args.baseline.is_file() {
            return Err(OptionsError::NoBaseline(args.baseline.clone()));
        }
        let tolerance = args
            .tolerance
            .trim()
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<f64>().ok())
            .filter(|p| p.is_finite() && *p >= 0.0)
            .ok_or_else(|| OptionsError::Tolerance(args.tolerance.clone()))?
            / 100.0;
        Ok(CheckOptions {
            current,
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
    pub dir: PathBuf,
    pub quiet: bool,
}

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub repeat: u32,
    pub watch: Vec<u32>,
    pub interval: Duration,
    pub settle: Duration,
    pub keep_survivors: bool,
    /// The program resolved to a path, then its arguments.
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The command line as typed, for reports.
    pub command_line: Vec<String>,
    pub fit: FitOptions,
    pub gate: GateSetup,
    pub output: Output,
}

#[derive(Debug, Clone)]
pub struct AttachOptions {
    pub pid: u32,
    pub interval: Duration,
    pub duration: Option<Duration>,
    /// Fraction of wall time (0.001 = 0.1%) the deep reads may take.
    pub deep_budget: f64,
    pub fit: FitOptions,
    pub gate: GateSetup,
    pub output: Output,
}

#[derive(Debug, Clone)]
pub struct ReportOptions {
    pub samples: PathBuf,
    pub fit: FitOptions,
    pub gate: GateSetup,
    pub output: Output,
}

fn duration(flag: &'static str, value: &str) -> Result<Duration, OptionsError> {
    parse_duration(value).map_err(|source| OptionsError::Unit { flag, source })
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

/// A PID that names a running process.
fn live_pid(what: &'static str, value: &str) -> Result<u32, OptionsError> {
    let pid: u32 = value
        .trim()
        .parse()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| OptionsError::NotAPid {
            what,
            value: value.to_string(),
        })?;
    if !ProcRoot::default().alive(pid) {
        return Err(OptionsError::NoSuchProcess { what, pid });
    }
    Ok(pid)
}

/// Finds the program as `execvp` would, so "not found" is reported before
/// any output directory exists.
pub fn resolve_program(name: &str) -> Result<PathBuf, OptionsError> {
    let is_executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let path = PathBuf::from(name);
        if !path.exists() {
            return Err(OptionsError::CommandMissing(name.to_string()));
        }
        if !is_executable(&path) {
            return Err(OptionsError::CommandNotExecutable(name.to_string()));
        }
        return Ok(path);
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_var)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
        .ok_or_else(|| OptionsError::CommandNotFound(name.to_string()))
}

/// The output directory: `--out`, or `reports/<timestamp>/` (made unique).
fn output(args: &OutputArgs) -> Result<Output, OptionsError> {
    let dir = match &args.out {
        Some(dir) => {
            if dir.join("samples.csv").exists() {
                return Err(OptionsError::OutExists(dir.clone()));
            }
            dir.clone()
        }
        None => default_out_dir(),
    };
    Ok(Output {
        dir,
        quiet: args.quiet,
    })
}

fn default_out_dir() -> PathBuf {
    let stamp = chrono::Local::now().format("%Y-%m-%dT%H-%M-%S").to_string();
    let base = PathBuf::from("reports");
    let mut dir = base.join(&stamp);
    let mut n = 2;
    while dir.exists() {
        dir = base.join(format!("{stamp}-{n}"));
        n += 1;
    }
    dir
}

impl RunOptions {
    pub fn from_args(args: &RunArgs) -> Result<Self, OptionsError> {
        if args.repeat == 0 {
            return Err(OptionsError::Repeat(args.repeat));
        }
        let repeat = u32::try_from(args.repeat).map_err(|_| OptionsError::Repeat(args.repeat))?;
        let interval = positive("interval", &args.interval)?;
        let settle = duration("settle", &args.settle)?;
        let mut watch: Vec<u32> = Vec::new();
        for w in &args.watch {
            let pid = live_pid("--watch", w)?;
            // The same pid twice would be summed twice into one series.
            if !watch.contains(&pid) {
                watch.push(pid);
            }
        }
        let command_line: Vec<String> = args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let name = command_line.first().cloned().unwrap_or_default();
        let program = resolve_program(&name)?;
        Ok(RunOptions {
            repeat,
            watch,
            interval,
            settle,
            keep_survivors: args.keep_survivors,
            program,
            args: args.command.iter().skip(1).cloned().collect(),
            command_line,
            fit: fit_options(&args.analysis)?,
            gate: gate_setup(&args.gate, Some(XAxis::Run))?,
            output: output(&args.output)?,
        })
    }
}

impl AttachOptions {
    pub fn from_args(args: &AttachArgs) -> Result<Self, OptionsError> {
        let interval = positive("interval", &args.interval)?;
        let duration = args
            .duration
            .as_deref()
            .map(|d| positive("duration", d))
            .transpose()?;
        let deep_budget = parse_fraction(&args.deep_budget)
            .ok_or_else(|| OptionsError::DeepBudget(args.deep_budget.clone()))?;
        let pid = live_pid("PID", &args.pid)?;
        if let Ok(status) = ProcRoot::default().status(pid)
            && status.rss_bytes.is_none()
        {
            return Err(OptionsError::KernelThread {
                pid,
                name: status.name,
            });
        }
        Ok(AttachOptions {
            pid,
            interval,
            duration,
            deep_budget,
            fit: fit_options(&args.analysis)?,
            gate: gate_setup(&args.gate, Some(XAxis::Seconds))?,
            output: output(&args.output)?,
        })
    }
}

impl ReportOptions {
    pub fn from_args(args: &ReportArgs) -> Result<Self, OptionsError> {
        let samples = if args.input.is_dir() {
            args.input.join("samples.csv")
        } else {
            args.input.clone()
        };
        if !samples.is_file() {
            return Err(OptionsError::NoSamples(args.input.clone()));
        }
        let dir = match &args.out {
            Some(d) => d.clone(),
            None => samples
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from(".")),
        };
        Ok(ReportOptions {
            samples,
            fit: fit_options(&args.analysis)?,
            gate: gate_setup(&args.gate, None)?,
            output: Output {
                dir,
                quiet: args.quiet,
            },
        })
    }
}

fn size(flag: &'static str, value: Option<&str>) -> Result<Option<u64>, OptionsError> {
    value
        .map(|v| parse_size(v).map_err(|source| OptionsError::Unit { flag, source }))
        .transpose()
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
    (value > 0.0 && value <= 1.0).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions() {
        assert_eq!(parse_fraction("0.1%"), Some(0.001));
        assert_eq!(parse_fraction("0.5"), Some(0.5));
        assert_eq!(parse_fraction("0%"), None);
        assert_eq!(parse_fraction("abc%"), None);
    }

    #[test]
    fn programs_are_resolved_like_execvp() {
        assert!(resolve_program("sh").is_ok());
        assert!(matches!(
            resolve_program("no-such-program-xyz"),
            Err(OptionsError::CommandNotFound(_))
        ));
        assert!(matches!(
            resolve_program("./no/such/file"),
            Err(OptionsError::CommandMissing(_))
        ));
    }
}
