//! The CI gate: growth limits judged on evidence, baselines, JUnit.
//!
//! The rule (default): a series fails a rate limit only when it is a `leak`
//! and the *lower* end of its slope's 95% confidence interval is above the
//! limit, i.e. when the data say the growth is faster than allowed, not when
//! one noisy run says so. `--gate-rule slope` compares the slope itself
//! instead (stricter, and flakier). A total limit (`40%`) fails when the
//! growth over the whole run, at the CI's lower slope, exceeds it.

pub mod baseline;
pub mod junit;

use serde::{Deserialize, Serialize};

use crate::fit::{Analysis, SeriesFit, Verdict};
use crate::series::{Metric, XAxis};
use crate::units::{format_bytes, parse_size};

const FORMS: &str =
    "accepted forms: '512KiB/run', '20MiB/h', '1%/run', '2%/h', '40%' (total over the whole run)";

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GateError {
    #[error("--max-growth '{0}' is not a growth limit; {FORMS}")]
    Growth(String),
    #[error(
        "--gate-on '{0}' is not SERIES:METRIC; try 'survivors:pss_bytes', 'pid:4242:rss_bytes' or 'target:uss_bytes'"
    )]
    GateOn(String),
    #[error(
        "--max-growth '{limit}' is per {per} but this {mode} measures per {x}; give the limit per {x} \
         (e.g. '512KiB/{x_short}')"
    )]
    Axis {
        limit: String,
        per: &'static str,
        mode: &'static str,
        x: &'static str,
        x_short: &'static str,
    },
    #[error(
        "--gate-rule '{0}' is not a rule; use 'ci' (default: the CI's lower end must exceed the limit) or 'slope'"
    )]
    Rule(String),
    #[error("--gate-on '{target}': this run has no such series; it has {available}")]
    NoSeries { target: String, available: String },
}

/// What a growth limit measures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Limit {
    /// Bytes per run.
    BytesPerRun(f64),
    /// Bytes per second (typed per hour, minute, …).
    BytesPerSecond(f64),
    /// Fraction of the level per run (0.01 = 1%/run).
    FractionPerRun(f64),
    /// Fraction of the level per second.
    FractionPerSecond(f64),
    /// Fraction of the starting level over the whole series (0.4 = 40%).
    Total(f64),
}

/// A `--max-growth` as typed and as understood.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrowthLimit {
    pub text: String,
    pub limit: Limit,
}

/// Parses `512KiB/run`, `20MiB/h`, `1%/run`, `2%/h` or `40%`.
pub fn parse_max_growth(text: &str) -> Result<GrowthLimit, GateError> {
    let err = || GateError::Growth(text.to_string());
    let t = text.trim();
    let (amount, per) = match t.split_once('/') {
        Some((a, p)) => (a.trim(), Some(p.trim())),
        None => (t, None),
    };
    let seconds_per = |p: &str| -> Option<f64> {
        match p {
            "s" | "sec" => Some(1.0),
            "min" | "m" => Some(60.0),
            "h" | "hour" | "hr" => Some(3600.0),
            "d" | "day" => Some(86400.0),
            _ => None,
        }
    };
    let limit = if let Some(pct) = amount.strip_suffix('%') {
        let fraction: f64 = pct.trim().parse::<f64>().map_err(|_| err())? / 100.0;
        if !fraction.is_finite() || fraction <= 0.0 {
            return Err(err());
        }
        match per {
            None => Limit::Total(fraction),
            Some("run") => Limit::FractionPerRun(fraction),
            Some(p) => Limit::FractionPerSecond(fraction / seconds_per(p).ok_or_else(err)?),
        }
    } else {
        // A size needs a unit: '5' alone is ambiguous, '5 MB' without a
        // period is not a rate.
        if amount.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Err(err());
        }
        let bytes = parse_size(amount).map_err(|_| err())? as f64;
        if bytes <= 0.0 {
            return Err(err());
        }
        match per {
            Some("run") => Limit::BytesPerRun(bytes),
            Some(p) => Limit::BytesPerSecond(bytes / seconds_per(p).ok_or_else(err)?),
            None => return Err(err()),
        }
    };
    Ok(GrowthLimit {
        text: t.to_string(),
        limit,
    })
}

/// Which series to gate: `survivors:pss_bytes`, `pid:4242:rss_bytes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateOn {
    pub series: String,
    pub metric: Metric,
}

pub fn parse_gate_on(text: &str) -> Result<GateOn, GateError> {
    let err = || GateError::GateOn(text.to_string());
    let (series, metric) = text.trim().rsplit_once(':').ok_or_else(err)?;
    let metric = Metric::from_name(metric).ok_or_else(err)?;
    if series.is_empty() {
        return Err(err());
    }
    Ok(GateOn {
        series: series.to_string(),
        metric,
    })
}

/// The CI-interval rule (default) or the point-estimate rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rule {
    #[default]
    Ci,
    Slope,
}

pub fn parse_rule(text: &str) -> Result<Rule, GateError> {
    match text.trim() {
        "ci" => Ok(Rule::Ci),
        "slope" => Ok(Rule::Slope),
        other => Err(GateError::Rule(other.to_string())),
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct GateOptions {
    pub max_growth: Vec<GrowthLimit>,
    pub gate_on: Vec<GateOn>,
    pub max_peak_bytes: Option<u64>,
    pub rule: Rule,
}

impl GateOptions {
    pub fn is_active(&self) -> bool {
        !self.max_growth.is_empty() || self.max_peak_bytes.is_some()
    }
}

/// One gated check and its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// `survivors pss_bytes ≤ 512KiB/run`, `peak RSS ≤ 2GiB`.
    pub name: String,
    pub series: String,
    pub metric: String,
    pub limit: String,
    pub passed: bool,
    /// The numbers behind the outcome, for people.
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    pub passed: bool,
    /// `ci` or `slope`.
    pub rule: Rule,
    pub checks: Vec<Check>,
    /// Messages of the failed checks.
    pub violations: Vec<String>,
}

impl GateResult {
    pub fn from_checks(rule: Rule, checks: Vec<Check>) -> GateResult {
        let violations: Vec<String> = checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.message.clone())
            .collect();
        GateResult {
            passed: violations.is_empty(),
            rule,
            checks,
            violations,
        }
    }
}

/// The default gated series: the followed processes' PSS (survivors, the
/// first watched pid, or the attach target), else the command's RSS peak.
pub fn default_gate_on(a: &Analysis) -> Vec<GateOn> {
    let has = |name: &str, metric: Metric| a.fit_of(name, metric).is_some_and(|f| f.n >= 2);
    for f in a.headlines().filter(|f| f.name != "command") {
        for metric in [Metric::PssBytes, Metric::RssBytes] {
            if has(&f.name, metric) {
                return vec![GateOn {
                    series: f.name.clone(),
                    metric,
                }];
            }
        }
    }
    vec![GateOn {
        series: "command".into(),
        metric: Metric::RssBytes,
    }]
}

fn rate_text(x: XAxis, metric: Metric, v: f64) -> String {
    let (v, per) = match x {
        XAxis::Run => (v, "run"),
        XAxis::Seconds => (v * 3600.0, "h"),
    };
    if metric.is_bytes() {
        format!("{}/{per}", format_bytes(v))
    } else {
        format!("{v:.2}/{per}")
    }
}

/// Judges one series against one limit. Errors when the limit's unit does
/// not fit the series' x axis.
/// Whether a limit can judge a series on this x axis: per-run limits need
/// runs, per-time limits need time; totals fit both. Checked before
/// sampling starts for `run` and `attach`.
pub fn check_axis(limit: &GrowthLimit, x: XAxis) -> Result<(), GateError> {
    let per = match (limit.limit, x) {
        (Limit::BytesPerRun(_) | Limit::FractionPerRun(_), XAxis::Seconds) => "run",
        (Limit::BytesPerSecond(_) | Limit::FractionPerSecond(_), XAxis::Run) => "unit of time",
        _ => return Ok(()),
    };
    Err(GateError::Axis {
        limit: limit.text.clone(),
        per,
        mode: if x == XAxis::Run { "run" } else { "attach" },
        x: if x == XAxis::Run { "run" } else { "hour" },
        x_short: if x == XAxis::Run { "run" } else { "h" },
    })
}

fn check_growth(f: &SeriesFit, limit: &GrowthLimit, rule: Rule) -> Result<Check, GateError> {
    check_axis(limit, f.x)?;
    let name = format!("{} {} ≤ {}", f.name, f.metric.name(), limit.text);
    // A gate that cannot judge must not pass quietly: a broken command in CI
    // would otherwise "pass" the leak gate.
    let (Some(slope), Some((lo, _))) = (f.slope, f.slope_ci95) else {
        return Ok(Check {
            name,
            series: f.name.clone(),
            metric: f.metric.name().into(),
            limit: limit.text.clone(),
            passed: false,
            message: format!(
                "{} {}: cannot be judged, {} point(s) ({} after warm-up) give no confidence \
                 interval; run more (--repeat) or longer",
                f.name,
                f.metric.name(),
                f.n,
                f.n.saturating_sub(f.warmup)
            ),
        });
    };
    let tested = match rule {
        Rule::Ci => lo,
        Rule::Slope => slope,
    };
    // The level relative limits refer to: the mean of the fitted points,
    // as for growth_pct_per_x (a warm-up point does not set it).
    let level = f.mean_level.max(1.0);
    // check_axis above made sure a rate's unit is the series' x.
    let (value, threshold, total) = match limit.limit {
        Limit::BytesPerRun(b) | Limit::BytesPerSecond(b) => (tested, b, false),
        Limit::FractionPerRun(p) | Limit::FractionPerSecond(p) => (tested, p * level, false),
        // A total is of the starting level: the fitted line at the first
        // fitted point (the mean sits mid-span for evenly spaced points).
        Limit::Total(p) => {
            let start = (f.mean_level - slope * f.x_span / 2.0).max(1.0);
            (tested * f.x_span, p * start, true)
        }
    };
    // Rate limits fail only on a leak: a plateau's early growth has stopped.
    let growing = total || f.verdict == Verdict::Leak;
    let passed = !(growing && value > threshold);
    let what = match rule {
        Rule::Ci => "95% CI lower end",
        Rule::Slope => "slope",
    };
    let message = if total {
        format!(
            "{} {} grew {} over the series ({what}), limit {} ({})",
            f.name,
            f.metric.name(),
            format_bytes(value),
            format_bytes(threshold),
            limit.text
        )
    } else {
        format!(
            "{} {}: {}, {} (95% CI lower end {}); limit {} ({}, judged on the {what})",
            f.name,
            f.metric.name(),
            f.verdict.as_str(),
            rate_text(f.x, f.metric, slope),
            rate_text(f.x, f.metric, lo),
            rate_text(f.x, f.metric, threshold),
            limit.text
        )
    };
    Ok(Check {
        name,
        series: f.name.clone(),
        metric: f.metric.name().into(),
        limit: limit.text.clone(),
        passed,
        message,
    })
}

/// Evaluates the gate over an analysis. `Ok(None)` when no limit was given.
pub fn evaluate(a: &Analysis, opts: &GateOptions) -> Result<Option<GateResult>, GateError> {
    if !opts.is_active() {
        return Ok(None);
    }
    let targets = if opts.gate_on.is_empty() {
        default_gate_on(a)
    } else {
        opts.gate_on.clone()
    };
    let mut checks = Vec::new();
    for limit in &opts.max_growth {
        for target in &targets {
            let Some(f) = a.fit_of(&target.series, target.metric) else {
                return Err(GateError::NoSeries {
                    target: format!("{}:{}", target.series, target.metric.name()),
                    available: series_names(a),
                });
            };
            checks.push(check_growth(f, limit, opts.rule)?);
        }
    }
    // Memory of a command that never worked says nothing about the code
    // under test: that is a failure, not a pass.
    if !a.runs.is_empty() && a.runs.iter().all(|r| r.failed()) {
        checks.push(Check {
            name: "the command ran".into(),
            series: "command".into(),
            metric: "rss_bytes".into(),
            limit: "exit 0".into(),
            passed: false,
            message: format!(
                "all {} runs failed ({}); fix the command before gating its memory",
                a.runs.len(),
                a.runs[0].status
            ),
        });
    }
    if let Some(max_peak) = opts.max_peak_bytes {
        let peak = a.runs.iter().filter_map(|r| r.peak_rss_bytes).max();
        let (passed, message) = match peak {
            Some(p) => (
                p <= max_peak,
                format!(
                    "peak RSS of a run is {} (run {}), limit {}",
                    format_bytes(p as f64),
                    a.runs
                        .iter()
                        .find(|r| r.peak_rss_bytes == Some(p))
                        .map(|r| r.run)
                        .unwrap_or(0),
                    format_bytes(max_peak as f64)
                ),
            ),
            // attach: the largest RSS of the target tree in any sample.
            None => match a
                .series
                .iter()
                .find(|s| s.name == "target" && s.metric == Metric::RssBytes)
            {
                Some(s) => {
                    let p = s.ys().into_iter().fold(0.0, f64::max);
                    (
                        p <= max_peak as f64,
                        format!(
                            "peak RSS of the target tree is {}, limit {}",
                            format_bytes(p),
                            format_bytes(max_peak as f64)
                        ),
                    )
                }
                None => (true, "no peak recorded; --max-peak not gated".to_string()),
            },
        };
        checks.push(Check {
            name: format!("peak RSS ≤ {}", format_bytes(max_peak as f64)),
            series: if a.runs.is_empty() {
                "target"
            } else {
                "command"
            }
            .into(),
            metric: "rss_bytes".into(),
            limit: format_bytes(max_peak as f64),
            passed,
            message,
        });
    }
    Ok(Some(GateResult::from_checks(opts.rule, checks)))
}

/// `survivors:{rss_bytes,pss_bytes,…}, command:{rss_bytes}`.
fn series_names(a: &Analysis) -> String {
    let mut scopes: Vec<(&str, Vec<&str>)> = Vec::new();
    for f in &a.fits {
        match scopes.iter_mut().find(|(s, _)| *s == f.name) {
            Some((_, metrics)) => metrics.push(f.metric.name()),
            None => scopes.push((&f.name, vec![f.metric.name()])),
        }
    }
    scopes
        .iter()
        .map(|(s, m)| format!("{s}:{{{}}}", m.join(",")))
        .collect::<Vec<_>>()
        .join(" ")
}
