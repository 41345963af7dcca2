//! Validated options: units parsed, limits checked, defaults resolved — from
//! what the user typed alone. Nothing here reads /proc, PATH or the file
//! system (ripgrep's `lowargs` rule): a PID is checked to be alive, a program
//! found and an output directory created where the environment is used.
//! Errors name the flag, quote the value and say the fix.

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{AnalysisArgs, AttachArgs, CheckArgs, GateArgs, OutputArgs, ReportArgs, RunArgs};
use crate::fit::FitOptions;
use crate::gate::{self, GateError, GateOn, GateOptions};
use crate::sample::attach::AttachPlan;
use crate::sample::run::RunPlan;
use crate::series::XAxis;
use crate::units::{UnitError, parse_duration, parse_size};

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
    #[error("--deep-budget '{0}' is not a fraction; try '0.1%' or '0.001'")]
    DeepBudget(String),
    #[error("--tolerance '{0}' is not a percentage; try '10%'")]
    Tolerance(String),
    #[error(transparent)]
    Gate(#[from] GateError),
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

/// `check`: paths as typed; `app` finds the summary.json in a directory.
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
        let tolerance = args
            .tolerance
            .trim()
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<f64>().ok())
            .filter(|p| p.is_finite() && *p >= 0.0)
            .ok_or_else(|| OptionsError::Tolerance(args.tolerance.clone()))?
            / 100.0;
        Ok(CheckOptions {
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
                command: args.command.clone(),
            },
            fit: fit_options(&args.analysis)?,
            gate: gate_setup(&args.gate, Some(XAxis::Run))?,
            output: output(&args.output),
        })
    }
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
        Ok(AttachOptions {
            plan: AttachPlan {
                pid: pid("PID", &args.pid)?,
                interval,
                duration,
                deep_budget,
            },
            fit: fit_options(&args.analysis)?,
            gate: gate_setup(&args.gate, Some(XAxis::Seconds))?,
            output: output(&args.output),
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
            },
        })
    }
}

fn size(flag: &'static str, value: Option<&str>) -> Result<Option<u64>, OptionsError> {
    value
        .map(|v| parse_size(v).map_err(|error| OptionsError::Unit { flag, error }))
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
    // 0 turns the deep tier off (`attach --deep-budget 0`: no page walk).
    (0.0..=1.0).contains(&value).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

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
