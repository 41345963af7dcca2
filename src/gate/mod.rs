//! The CI gate: `--max-growth` and `--max-peak` limits judged on the
//! verdict's own evidence, into a `GateResult` (each check, the violations,
//! passed or not). Limits only: comparing against a baseline summary.json
//! is `check`'s, and `report` writes the result (JUnit among its files).
//!
//! The rule (default, `ci`): a rate limit is judged on the rate the verdict
//! rests on and its 95% CI (`SeriesFit::judged_rate`) — it **fails**
//! when the interval's lower end is above the limit, whatever the verdict,
//! **passes** when its upper end is below, and is **undecided** in between;
//! `--undecided pass|fail` says what undecided does (default pass: the data
//! do not show the limit exceeded, and a gate that fails on noise is a flaky
//! gate; an undecided check is printed as such with the rerun that would
//! decide it). `--gate-rule slope` compares the rate itself (stricter, and
//! flakier). A total limit (`40%`) is the growth over the whole run at the
//! interval's ends.

use serde::{Deserialize, Serialize};

use crate::fit::{Analysis, SeriesFit};
use crate::series::{Metric, XAxis};
use crate::store::Scope;
use crate::units::{format_bytes, parse_size};

const FORMS: &str =
    "accepted forms: '512KiB/run', '20MiB/h', '1%/run', '2%/h', '40%' (total over the whole run)";

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GateError {
    #[error("--max-growth '{0}' is not a growth limit; {FORMS}")]
    Growth(String),
    /// A size without a period (`10mb`): the fix is plain.
    #[error(
        "--max-growth '{text}' is a size, not a rate; did you mean '{per_run}' (run) or \
         '{per_hour}' (attach)?"
    )]
    NoPeriod {
        text: String,
        per_run: String,
        per_hour: String,
    },
    #[error("--max-growth '{text}': {error}")]
    Size {
        text: String,
        error: crate::units::UnitError,
    },
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
    #[error("--undecided '{0}' is not a choice; use 'pass' (default) or 'fail'")]
    Undecided(String),
    #[error("--gate-on '{target}': this run has no such series; it has {available}")]
    NoSeries { target: String, available: String },
}

/// What a growth limit measures.
#[derive(Debug, Clone, Copy, PartialEq)]
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
#[derive(Debug, Clone, PartialEq)]
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
        match p.to_ascii_lowercase().as_str() {
            "s" | "sec" | "second" => Some(1.0),
            "min" | "m" | "minute" => Some(60.0),
            "h" | "hour" | "hr" => Some(3600.0),
            "d" | "day" => Some(86400.0),
            _ => None,
        }
    };
    let per_run = |p: &str| p.eq_ignore_ascii_case("run");
    let limit = if let Some(pct) = amount.strip_suffix('%') {
        let fraction: f64 = pct.trim().parse::<f64>().map_err(|_| err())? / 100.0;
        if !fraction.is_finite() || fraction <= 0.0 {
            return Err(err());
        }
        match per {
            None => Limit::Total(fraction),
            Some(p) if per_run(p) => Limit::FractionPerRun(fraction),
            Some(p) => Limit::FractionPerSecond(fraction / seconds_per(p).ok_or_else(err)?),
        }
    } else {
        // A size needs a unit: '5' alone is ambiguous, '5 MB' without a
        // period is not a rate.
        if amount.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Err(err());
        }
        let bytes = parse_size(amount).map_err(|error| GateError::Size {
            text: text.to_string(),
            error,
        })? as f64;
        if bytes <= 0.0 {
            return Err(err());
        }
        match per {
            Some(p) if per_run(p) => Limit::BytesPerRun(bytes),
            Some(p) => Limit::BytesPerSecond(bytes / seconds_per(p).ok_or_else(err)?),
            None => {
                return Err(GateError::NoPeriod {
                    text: text.to_string(),
                    per_run: format!("{amount}/run"),
                    per_hour: format!("{amount}/h"),
                });
            }
        }
    };
    Ok(GrowthLimit {
        text: t.to_string(),
        limit,
    })
}

/// Which series to gate: `survivors:pss_bytes`, `pid:4242:rss_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateOn {
    pub series: Scope,
    pub metric: Metric,
}

impl std::fmt::Display for GateOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.series, self.metric.name())
    }
}

pub fn parse_gate_on(text: &str) -> Result<GateOn, GateError> {
    let err = || GateError::GateOn(text.to_string());
    let (series, metric) = text.trim().rsplit_once(':').ok_or_else(err)?;
    let metric = Metric::from_name(metric).ok_or_else(err)?;
    let series = series.parse().map_err(|_| err())?;
    Ok(GateOn { series, metric })
}

/// The default gated series: the verdict's own — the first followed scope's
/// primary metric (its runtime's live heap, else anon, else RSS:
/// `fit::primary_metric`, with at least two points to judge), else the
/// command's RSS peak.
/// `available` is every (scope, metric, points) there is, in any order.
pub fn default_gate_on(available: &[(Scope, Metric, usize)]) -> GateOn {
    // A live heap is the verdict's series however few collections it saw.
    let has = |scope: Scope, metric: Metric| {
        available
            .iter()
            .any(|&(s, m, n)| s == scope && m == metric && (n >= 2 || m == Metric::HeapLiveBytes))
    };
    let mut scopes: Vec<Scope> = available.iter().map(|a| a.0).collect();
    scopes.sort();
    scopes.dedup();
    scopes
        .into_iter()
        .filter(|&s| s != Scope::Command && s != Scope::Session)
        .flat_map(|s| [Metric::HeapLiveBytes, Metric::AnonBytes, Metric::RssBytes].map(|m| (s, m)))
        .find(|&(s, m)| has(s, m))
        .map(|(series, metric)| GateOn { series, metric })
        .unwrap_or(GateOn {
            series: Scope::Command,
            metric: Metric::RssBytes,
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

/// What an undecided check does to the gate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnUndecided {
    #[default]
    Pass,
    Fail,
}

impl OnUndecided {
    pub fn as_str(self) -> &'static str {
        match self {
            OnUndecided::Pass => "pass",
            OnUndecided::Fail => "fail",
        }
    }
}

pub fn parse_on_undecided(text: &str) -> Result<OnUndecided, GateError> {
    match text.trim() {
        "pass" => Ok(OnUndecided::Pass),
        "fail" => Ok(OnUndecided::Fail),
        other => Err(GateError::Undecided(other.to_string())),
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct GateOptions {
    pub max_growth: Vec<GrowthLimit>,
    pub gate_on: Vec<GateOn>,
    pub max_peak_bytes: Option<u64>,
    pub rule: Rule,
    pub on_undecided: OnUndecided,
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
    pub series: Scope,
    pub metric: String,
    pub limit: String,
    /// Not failed: below the limit, or undecided under `--undecided pass`.
    pub passed: bool,
    /// The interval contains the limit: the data cannot tell.
    #[serde(default)]
    pub undecided: bool,
    /// The numbers behind the outcome, for people.
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    pub passed: bool,
    /// `ci` or `slope`.
    pub rule: Rule,
    /// What undecided checks did: `pass` or `fail`.
    #[serde(default)]
    pub on_undecided: OnUndecided,
    pub checks: Vec<Check>,
    /// Messages of the failed checks.
    pub violations: Vec<String>,
    /// Messages of the undecided checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecided: Vec<String>,
}

impl GateResult {
    pub fn from_checks(rule: Rule, checks: Vec<Check>) -> GateResult {
        GateResult::with_policy(rule, OnUndecided::Pass, checks)
    }

    /// Undecided checks fail under `OnUndecided::Fail`.
    pub fn with_policy(
        rule: Rule,
        on_undecided: OnUndecided,
        mut checks: Vec<Check>,
    ) -> GateResult {
        for c in checks.iter_mut().filter(|c| c.undecided) {
            c.passed = on_undecided == OnUndecided::Pass;
        }
        let violations = checks
            .iter()
            .filter(|c| !c.passed && !c.undecided)
            .map(|c| c.message.clone())
            .collect();
        let undecided = checks
            .iter()
            .filter(|c| c.undecided)
            .map(|c| c.message.clone())
            .collect();
        let passed = checks.iter().all(|c| c.passed);
        GateResult {
            passed,
            rule,
            on_undecided,
            checks,
            violations,
            undecided,
        }
    }
}

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

impl Check {
    /// `ok`, `FAIL` or `undecided` (which passed or failed by `--undecided`).
    pub fn mark(&self) -> &'static str {
        match (self.undecided, self.passed) {
            (true, _) => "undecided",
            (false, true) => "ok",
            (false, false) => "FAIL",
        }
    }

    fn new(name: String, series: Scope, metric: Metric, limit: String) -> Check {
        Check {
            name,
            series,
            metric: metric.name().into(),
            limit,
            passed: true,
            undecided: false,
            message: String::new(),
        }
    }

    fn outcome(self, passed: bool, message: String) -> Check {
        Check {
            passed,
            message,
            ..self
        }
    }

    fn undecided(self, message: String) -> Check {
        Check {
            undecided: true,
            message,
            ..self
        }
    }
}

fn check_growth(f: &SeriesFit, limit: &GrowthLimit, rule: Rule) -> Result<Check, GateError> {
    check_axis(limit, f.x)?;
    let what = format!("{} {}", f.scope, f.metric.name());
    let check = Check::new(
        format!("{what} ≤ {}", limit.text),
        f.scope,
        f.metric,
        limit.text.clone(),
    );
    // A gate that cannot judge must not pass quietly: a broken command in CI
    // would otherwise "pass" the leak gate.
    // The verdict's own estimate and interval, whatever the verdict; a total
    // is the growth over the whole series, so it takes the whole line.
    let (rate, ci) = match limit.limit {
        Limit::Total(_) => (f.slope, f.slope_ci95),
        _ => f.judged_rate(),
    };
    let (Some(rate), Some((lo, hi))) = (rate, ci) else {
        return Ok(check.outcome(
            false,
            format!(
                "{what}: cannot be judged, {} ({} after warm-up) give no confidence \
                 interval; run more (--repeat) or longer",
                crate::units::counted(f.n as u64, "point", "points"),
                f.n.saturating_sub(f.warmup)
            ),
        ));
    };
    let (tested_lo, tested_hi) = match rule {
        Rule::Ci => (lo, hi),
        Rule::Slope => (rate, rate),
    };
    // The level relative limits refer to: the mean of the fitted points,
    // as for growth_pct_per_x (a warm-up point does not set it).
    let level = f.mean_level.max(1.0);
    // check_axis above made sure a rate's unit is the series' x.
    let (scale, threshold, total) = match limit.limit {
        Limit::BytesPerRun(b) | Limit::BytesPerSecond(b) => (1.0, b, false),
        Limit::FractionPerRun(p) | Limit::FractionPerSecond(p) => (1.0, p * level, false),
        // A total is of the starting level: the fitted line at the first
        // fitted point (the mean sits mid-span for evenly spaced points).
        Limit::Total(p) => {
            let start = (f.mean_level - rate * f.x_span / 2.0).max(1.0);
            (f.x_span, p * start, true)
        }
    };
    let (low, high) = (tested_lo * scale, tested_hi * scale);
    let judged_on = match rule {
        Rule::Ci => "95% CI".to_string(),
        Rule::Slope => "rate".into(),
    };
    let limit_rate = |v: f64| f.x.format_limit(v, f.metric.is_bytes());
    let numbers = if total {
        format!(
            "grew {} … {} over the series ({judged_on}); limit {} ({})",
            format_bytes(low),
            format_bytes(high),
            format_bytes(threshold),
            limit.text
        )
    } else {
        format!(
            "{} ({judged_on} {} … {}); limit {} ({})",
            limit_rate(rate),
            limit_rate(lo),
            limit_rate(hi),
            limit_rate(threshold),
            limit.text
        )
    };
    let message = format!("{what}: {}, {numbers}", f.verdict.as_str());
    // The slope rule compares one number: at the limit is within it.
    let within = if rule == Rule::Slope {
        high <= threshold
    } else {
        high < threshold
    };
    Ok(if low > threshold {
        check.outcome(false, message)
    } else if within {
        check.outcome(true, message)
    } else {
        check.undecided(format!(
            "{message}: undecided, the interval contains the limit{}",
            crate::phrase::rerun_advice(f)
        ))
    })
}

/// A command that is over within a millisecond or two, leaves nothing
/// behind and is all there is to gate: its peak could not be read in some
/// runs, so its series is too short to judge — but in each such run the
/// kernel bounds it (below leakwatch's own peak). Too small and too short
/// to hold a leak: the check passes, saying why, rather than failing one
/// session in twenty on a command that does nothing.
fn too_short_to_see(
    a: &Analysis,
    target: &GateOn,
    fit: Option<&SeriesFit>,
    limit: &GrowthLimit,
) -> Option<Check> {
    let judgeable = fit.is_some_and(|f| f.slope_ci95.is_some());
    let unseen: Vec<u64> = a.runs.iter().filter_map(|r| r.peak_bound_bytes).collect();
    let is_command_peak = target.series == Scope::Command && target.metric == Metric::RssBytes;
    if judgeable || !is_command_peak || unseen.is_empty() || a.runs.iter().any(|r| r.failed()) {
        return None;
    }
    let bound = unseen.iter().copied().max().unwrap_or(0);
    let check = Check::new(
        format!("command rss_bytes ≤ {}", limit.text),
        Scope::Command,
        Metric::RssBytes,
        limit.text.clone(),
    );
    Some(check.outcome(
        true,
        format!(
            "command rss_bytes: {} of {} runs were over before their peak could be read \
             (each at most {}, leakwatch's own peak included) and nothing was left behind: \
             too short and too small to hold a growth; follow a process (--watch) to gate one",
            unseen.len(),
            a.runs.len(),
            format_bytes(bound as f64)
        ),
    ))
}

/// Memory of a command that never worked says nothing about the code
/// under test: all runs failing is a failure, not a pass.
fn check_ran(a: &Analysis) -> Option<Check> {
    let first = a.runs.first()?;
    if !a.never_worked() {
        return None;
    }
    let check = Check::new(
        "the command ran".into(),
        Scope::Command,
        Metric::RssBytes,
        "exit 0".into(),
    );
    Some(check.outcome(
        false,
        format!(
            "all {} runs failed ({}); fix the command before gating its memory",
            a.runs.len(),
            first.status
        ),
    ))
}

/// The largest RSS: of a run's command tree in `run` mode, of the target
/// tree in any sample in `attach` mode.
fn check_peak(a: &Analysis, max_peak: u64) -> Check {
    let limit = format_bytes(max_peak as f64);
    let series = if a.runs.is_empty() {
        Scope::Target
    } else {
        Scope::Command
    };
    let check = Check::new(
        format!("peak RSS ≤ {limit}"),
        series,
        Metric::RssBytes,
        limit.clone(),
    );
    let run_peak = a
        .runs
        .iter()
        .filter_map(|r| r.peak_rss_bytes.map(|p| (p, r.run)))
        .max_by_key(|&(p, run)| (p, std::cmp::Reverse(run)));
    if let Some((peak, run)) = run_peak {
        return check.outcome(
            peak <= max_peak,
            format!(
                "peak RSS of a run is {} (run {run}), limit {limit}",
                format_bytes(peak as f64)
            ),
        );
    }
    let target = a
        .series
        .iter()
        .find(|s| s.scope == Scope::Target && s.metric == Metric::RssBytes);
    match target {
        Some(s) => {
            let peak = s.ys().into_iter().fold(0.0, f64::max);
            check.outcome(
                peak <= max_peak as f64,
                format!(
                    "peak RSS of the target tree is {}, limit {limit}",
                    format_bytes(peak)
                ),
            )
        }
        None => check.outcome(true, "no peak recorded; --max-peak not gated".into()),
    }
}

/// Evaluates the gate over an analysis. `Ok(None)` when no limit was given.
pub fn evaluate(a: &Analysis, opts: &GateOptions) -> Result<Option<GateResult>, GateError> {
    if !opts.is_active() {
        return Ok(None);
    }
    let targets = if opts.gate_on.is_empty() {
        vec![default_gate_on(&available(a))]
    } else {
        opts.gate_on.clone()
    };
    let mut checks = Vec::new();
    for limit in &opts.max_growth {
        for target in &targets {
            let fit = a.fit_of(target.series, target.metric);
            if let Some(check) = too_short_to_see(a, target, fit, limit) {
                checks.push(check);
                continue;
            }
            let Some(f) = fit else {
                return Err(GateError::NoSeries {
                    target: target.to_string(),
                    available: series_names(a),
                });
            };
            checks.push(check_growth(f, limit, opts.rule)?);
        }
    }
    checks.extend(check_ran(a));
    if let Some(max_peak) = opts.max_peak_bytes {
        checks.push(check_peak(a, max_peak));
    }
    Ok(Some(GateResult::with_policy(
        opts.rule,
        opts.on_undecided,
        checks,
    )))
}

/// Every fitted (scope, metric, points) of an analysis.
pub(crate) fn available(a: &Analysis) -> Vec<(Scope, Metric, usize)> {
    a.fits.iter().map(|f| (f.scope, f.metric, f.n)).collect()
}

/// `survivors:{rss_bytes,pss_bytes,…}, command:{rss_bytes}`, or why there
/// is none.
fn series_names(a: &Analysis) -> String {
    if a.fits.is_empty() {
        return "no series at all (no process could be sampled)".into();
    }
    let mut scopes: Vec<(Scope, Vec<&str>)> = Vec::new();
    for f in &a.fits {
        match scopes.iter_mut().find(|(s, _)| *s == f.scope) {
            Some((_, metrics)) => metrics.push(f.metric.name()),
            None => scopes.push((f.scope, vec![f.metric.name()])),
        }
    }
    scopes
        .iter()
        .map(|(s, m)| format!("{s}:{{{}}}", m.join(",")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::{RateFrom, Verdict};

    const MIB: f64 = 1024.0 * 1024.0;

    #[test]
    fn growth_limits_parse_in_every_accepted_form() {
        let cases: &[(&str, Limit)] = &[
            ("512KiB/run", Limit::BytesPerRun(512.0 * 1024.0)),
            ("1%/run", Limit::FractionPerRun(0.01)),
            ("2%/h", Limit::FractionPerSecond(0.02 / 3600.0)),
            ("20MiB/h", Limit::BytesPerSecond(20.0 * MIB / 3600.0)),
            ("1MiB/min", Limit::BytesPerSecond(MIB / 60.0)),
            ("1GiB/d", Limit::BytesPerSecond(1024.0 * MIB / 86400.0)),
            ("40%", Limit::Total(0.4)),
            (" 4 MiB / run ", Limit::BytesPerRun(4.0 * MIB)),
        ];
        for (text, want) in cases {
            let got = parse_max_growth(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(got.limit, *want, "{text}");
            assert_eq!(got.text, text.trim());
        }
    }

    #[test]
    fn bad_growth_limits_name_the_value_and_the_forms() {
        for bad in ["5", "abc%", "0%", "1MiB/fortnight", "%/run", "", "1%/"] {
            let err = parse_max_growth(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("'{bad}'")), "{bad}: {err}");
            assert!(err.contains("accepted forms"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_size_without_a_period_or_a_bad_size_gets_the_exact_fix() {
        let err = parse_max_growth("10mb").unwrap_err().to_string();
        assert!(
            err.contains("did you mean '10mb/run' (run) or '10mb/h' (attach)?"),
            "{err}"
        );
        let err = parse_max_growth("10megs/h").unwrap_err().to_string();
        assert!(
            err.contains("'10megs/h'") && err.contains("did you mean '10MiB'?"),
            "{err}"
        );
        let err = parse_max_growth("-1KiB/run").unwrap_err().to_string();
        assert!(err.contains("'-1KiB/run'"), "{err}");
        // Any case, SI and IEC: what was read is what the names say.
        for (text, want) in [
            ("10mb/run", Limit::BytesPerRun(1e7)),
            ("10MB/Run", Limit::BytesPerRun(1e7)),
            ("10mib/H", Limit::BytesPerSecond(10.0 * MIB / 3600.0)),
            ("10M/hour", Limit::BytesPerSecond(10.0 * MIB / 3600.0)),
            ("2%/RUN", Limit::FractionPerRun(0.02)),
        ] {
            assert_eq!(parse_max_growth(text).unwrap().limit, want, "{text}");
        }
    }

    #[test]
    fn gate_on_parses_scopes_and_metrics() {
        let on = parse_gate_on("pid:4242:rss_bytes").unwrap();
        assert_eq!((on.series, on.metric), (Scope::Pid(4242), Metric::RssBytes));
        assert_eq!(on.to_string(), "pid:4242:rss_bytes");
        for bad in [
            "survivors",
            "survivors:rss",
            "daemon:pss_bytes",
            ":pss_bytes",
        ] {
            assert!(parse_gate_on(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_rule("slope"), Ok(Rule::Slope));
        assert!(parse_rule("strict").is_err());
    }

    #[test]
    fn limits_must_match_the_axis() {
        let per_run = parse_max_growth("1MiB/run").unwrap();
        let per_hour = parse_max_growth("1MiB/h").unwrap();
        let total = parse_max_growth("10%").unwrap();
        assert!(check_axis(&per_run, XAxis::Run).is_ok());
        assert!(check_axis(&per_hour, XAxis::Seconds).is_ok());
        assert!(
            check_axis(&total, XAxis::Run).is_ok() && check_axis(&total, XAxis::Seconds).is_ok()
        );
        let err = check_axis(&per_run, XAxis::Seconds)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("give the limit per hour (e.g. '512KiB/h')"),
            "{err}"
        );
        assert!(check_axis(&per_hour, XAxis::Run).is_err());
    }

    /// A fitted series of 10 runs at 100 MiB with the given slope and CI.
    fn fit(verdict: Verdict, slope: f64, ci: (f64, f64)) -> SeriesFit {
        SeriesFit {
            scope: Scope::Survivors,
            metric: Metric::PssBytes,
            x: XAxis::Run,
            n: 10,
            first: 100.0 * MIB,
            last: 100.0 * MIB + 9.0 * slope,
            slope: Some(slope),
            slope_ci95: Some(ci),
            robust_slope: Some(slope),
            trend_p: Some(0.001),
            r2: Some(0.99),
            growth_pct_per_x: Some(slope / (100.0 * MIB) * 100.0),
            rate: Some(slope),
            rate_ci95: Some(ci),
            rate_from: Some(RateFrom::Line),
            // A plateau's end holds: its end rate is 0 (± 0.1 MiB/run).
            end_rate: Some(if verdict == Verdict::Plateau {
                crate::fit::EndRate {
                    rate: 0.0,
                    ci95: (-0.1 * MIB, 0.1 * MIB),
                    from: RateFrom::EndSegment,
                    widened_by: Default::default(),
                }
            } else {
                crate::fit::EndRate {
                    rate: slope,
                    ci95: ci,
                    from: RateFrom::Line,
                    widened_by: Default::default(),
                }
            }),
            end_slope: Some(if verdict == Verdict::Plateau {
                0.0
            } else {
                slope
            }),
            end_slope_ci95: Some(if verdict == Verdict::Plateau {
                (-0.1 * MIB, 0.1 * MIB)
            } else {
                ci
            }),
            end_start_x: Some(5.0),
            plateau: None,
            steps: Vec::new(),
            decided_by: crate::fit::DecidedBy::Mean,
            verdict,
            warmup: 0,
            runs_needed: None,
            reason: crate::fit::verdict::Reason::default(),
            processes: 1,
            intercept: Some(100.0 * MIB),
            x_span: 9.0,
            mean_level: 100.0 * MIB + 4.5 * slope,
            model: crate::fit::Model::default(),
        }
    }

    #[test]
    fn growth_is_judged_on_the_verdicts_interval_whatever_the_verdict() {
        let limit = |t: &str| parse_max_growth(t).unwrap();
        use Outcome::*;
        // (verdict, rate MiB/run, interval MiB/run, limit, rule, outcome)
        let cases = [
            (Verdict::Leak, 4.0, (3.9, 4.1), "1MiB/run", Rule::Ci, Fail),
            // The interval contains the limit: undecided.
            (
                Verdict::Leak,
                1.2,
                (0.9, 1.5),
                "1MiB/run",
                Rule::Ci,
                Undecided,
            ),
            // …but the rate itself is above it.
            (
                Verdict::Leak,
                1.2,
                (0.9, 1.5),
                "1MiB/run",
                Rule::Slope,
                Fail,
            ),
            (
                Verdict::Leak,
                1.5,
                (1.0, 2.0),
                "1MiB/run",
                Rule::Ci,
                Undecided,
            ),
            // Whatever the verdict: an inconclusive series whose interval is
            // above the limit fails, one below it passes.
            (
                Verdict::Inconclusive,
                4.0,
                (3.0, 5.0),
                "1MiB/run",
                Rule::Ci,
                Fail,
            ),
            (
                Verdict::Plateau,
                0.0,
                (-0.1, 0.1),
                "1MiB/run",
                Rule::Ci,
                Pass,
            ),
            // 1%/run of a ~100 MiB level is ~1 MiB/run.
            (Verdict::Leak, 4.0, (3.9, 4.1), "1%/run", Rule::Ci, Fail),
            (Verdict::Leak, 0.5, (0.45, 0.55), "1%/run", Rule::Ci, Pass),
            // A total is the whole series' growth, whatever the end does: a
            // plateau that grew 35% fails 30% (its end slope is 0 here).
            (Verdict::Plateau, 4.0, (3.9, 4.1), "30%", Rule::Ci, Fail),
            // At the limit is within it for the slope rule.
            (
                Verdict::Leak,
                1.0,
                (0.5, 1.5),
                "1MiB/run",
                Rule::Slope,
                Pass,
            ),
            // A total: 9 runs × 3.9 MiB ≈ 35% of 100 MiB.
            (Verdict::Leak, 4.0, (3.9, 4.1), "30%", Rule::Ci, Fail),
            (Verdict::Leak, 4.0, (3.9, 4.1), "40%", Rule::Ci, Pass),
        ];
        for (verdict, slope, (lo, hi), text, rule, outcome) in cases {
            let f = fit(verdict, slope * MIB, (lo * MIB, hi * MIB));
            let check = check_growth(&f, &limit(text), rule).unwrap();
            let got = match (check.passed, check.undecided) {
                (_, true) => Undecided,
                (true, false) => Pass,
                (false, false) => Fail,
            };
            assert_eq!(
                got, outcome,
                "{verdict:?} {slope} MiB/run [{lo}, {hi}] vs {text} ({rule:?}): {}",
                check.message
            );
            assert_eq!(check.series, Scope::Survivors);
        }
    }

    #[derive(Debug, PartialEq)]
    enum Outcome {
        Pass,
        Fail,
        Undecided,
    }

    #[test]
    fn undecided_does_what_the_policy_says() {
        let f = fit(Verdict::Leak, 1.2 * MIB, (0.9 * MIB, 1.5 * MIB));
        let check = check_growth(&f, &parse_max_growth("1MiB/run").unwrap(), Rule::Ci).unwrap();
        assert!(
            check.undecided && check.message.contains("undecided"),
            "{}",
            check.message
        );
        let pass = GateResult::with_policy(Rule::Ci, OnUndecided::Pass, vec![check.clone()]);
        assert!(pass.passed && pass.violations.is_empty() && pass.undecided.len() == 1);
        let fail = GateResult::with_policy(Rule::Ci, OnUndecided::Fail, vec![check]);
        assert!(!fail.passed && fail.violations.is_empty() && fail.undecided.len() == 1);
        assert_eq!(parse_on_undecided("fail"), Ok(OnUndecided::Fail));
        assert!(parse_on_undecided("maybe").is_err());
    }

    #[test]
    fn a_series_without_a_ci_fails_rather_than_passing_quietly() {
        let mut f = fit(Verdict::Inconclusive, 0.0, (0.0, 0.0));
        f.slope_ci95 = None;
        f.end_rate = None;
        f.n = 2;
        let check = check_growth(&f, &parse_max_growth("1MiB/run").unwrap(), Rule::Ci).unwrap();
        assert!(!check.passed);
        assert!(
            check.message.contains("cannot be judged, 2 points"),
            "{}",
            check.message
        );
    }

    #[test]
    fn the_default_gated_series_is_the_verdicts_own() {
        let pick = |available: &[(Scope, Metric, usize)]| default_gate_on(available).to_string();
        let full = [
            (Scope::Command, Metric::RssBytes, 10),
            (Scope::Pid(7), Metric::AnonBytes, 11),
            (Scope::Survivors, Metric::RssBytes, 10),
            (Scope::Survivors, Metric::PssBytes, 10),
            (Scope::Survivors, Metric::AnonBytes, 10),
        ];
        assert_eq!(pick(&full), "survivors:anon_bytes");
        // Without anon: the first scope's RSS, before a later scope's anon.
        assert_eq!(pick(&full[..4]), "survivors:rss_bytes");
        assert_eq!(pick(&full[..2]), "pid:7:anon_bytes");
        assert_eq!(
            pick(&[
                (Scope::Target, Metric::AnonBytes, 1),
                (Scope::Target, Metric::RssBytes, 5)
            ]),
            "target:rss_bytes"
        );
        assert_eq!(pick(&full[..1]), "command:rss_bytes");
        assert_eq!(pick(&[]), "command:rss_bytes");
    }
}
