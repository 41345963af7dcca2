//! Leak verdicts, by one contract (DESIGN.md, "the verdict contract"):
//!
//! 1. **One estimate per series**: the growth rate at the end of the observation — what the
//!    same work would add per run (per hour) from here on — with a 95% confidence interval
//!    honest for its shape (`EndRate`). Shape knowledge chooses the estimator and widens its
//!    interval where it must; it never vetoes a verdict.
//! 2. **The verdict follows from that interval and the threshold alone** (`decide`): leak when
//!    its lower end is above the threshold; plateau (it grew, then stopped) or stable (it
//!    never grew) when its upper end is at most the threshold; inconclusive only when the
//!    interval contains the threshold, with the rerun that would decide it.
//!
//! The estimators, each in its own module with its rules and sources:
//! * `line` — one straight piece (no change point): the least-squares line while the second
//!   half keeps its pace, else the second half's own line (a curve that slows down);
//! * `segments` — steps, fills and ramps cut by change points (`super::changepoint`): the end
//!   segment's line; recurring steps at their long-run rate, steps included (a staircase: a
//!   GC heap or an allocator growing in chunks); steps too recent to tell whether they
//!   stopped span both;
//! * `troughs` — a saw-tooth (collections seen: a hard floor and drops), judged on its lower
//!   envelope (`super::envelope`): the floor's rate at the end;
//! * `warmup` trims the start; `power` says how many points would decide; a last point far
//!   below the trend (memory given back at the last sample) is set aside and bounds the end
//!   rate from below by the growth the whole kept (`Ctx::judge_with_last_drop`); an
//!   undecided or leaking series' interval reaches up to a parabola's end rate, as it may be
//!   speeding up (`Ctx::may_speed_up`), and an undecided end that bends downwards reaches
//!   down to one (`Ctx::may_slow_down`).
//!
//! The practical threshold is `thr = max(min_slope_abs, min_slope_fraction · |mean level|)`
//! bytes per x unit. Units: `x` in x units (run number or seconds), `y` and every level in
//! bytes, every slope in bytes per x unit, percentages are of the mean fitted level.

mod line;
mod power;
mod segments;
mod troughs;
mod warmup;

pub use warmup::detect_warmup;

use super::changepoint::{self, Segment};
use super::envelope::{self, Envelope};
use super::stats::{self, LinearFit, MannKendall};
use serde::{Deserialize, Serialize};

/// What a memory series shows. Ordered by severity (`Stable < Plateau < Inconclusive < Leak`),
/// so the worst of several is their `max()`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// No significant growth, or growth below the practical threshold.
    Stable,
    /// Significant growth that has levelled off (or one one-off step).
    Plateau,
    /// Too few points or too much noise to decide.
    Inconclusive,
    /// Significant, relevant growth that is still going at the end of the series.
    Leak,
}

impl Verdict {
    /// Lower-case name, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Leak => "leak",
            Verdict::Plateau => "plateau",
            Verdict::Stable => "stable",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// Which model decided the verdict.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum DecidedBy {
    /// The series itself: its segments, or its least-squares line.
    #[default]
    Mean,
    /// The lower envelope (troughs) of a saw-tooth: `Classification::envelope`.
    Troughs,
}

impl DecidedBy {
    /// Lower-case name, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Mean => "mean",
            DecidedBy::Troughs => "troughs",
        }
    }
}

/// Which estimate the headline rate (`Classification::rate`) is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RateFrom {
    /// The least-squares line over the points after warm-up.
    Line,
    /// The last change-point segment's least-squares slope: a leak that started part-way.
    EndSegment,
    /// The broken stick's slope before the median x: a plateau's fill, one straight piece.
    FirstHalf,
    /// The segments' rise up to the last change over its span: a plateau's average fill.
    AverageFill,
    /// The troughs' least-squares line: a saw-tooth.
    Troughs,
    /// The troughs' rate until the floor stopped: a saw-tooth's plateau.
    TroughFill,
    /// The least-squares line over the points after the median x: the end of one straight
    /// piece that slowed down.
    SecondHalf,
    /// The troughs' line at the end (after the floor's last change, or its second half).
    TroughEnd,
    /// The least-squares line, steps included, of a staircase whose last steps are too recent
    /// to tell whether they stopped but whose end rises above the threshold on its own; its CI
    /// (`Classification::rate_ci95`) runs from the end's lower bound to the line's upper one.
    Staircase,
    /// The slope at the last point of a least-squares parabola through the points: a leak
    /// that speeds up.
    CurveEnd,
}

/// Decision thresholds.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Significance level of the trend tests (Mann–Kendall, tail slope), in (0, 0.5). Default 0.01.
    pub alpha: f64,
    /// Fewest points, after warm-up, to decide anything (at least 4 is used). Default 4: the
    /// line's interval has two degrees of freedom there (t = 4.30), wide but honest; three
    /// would leave one (t = 12.7), and a single bend would read as a trend.
    pub min_points: usize,
    /// Practical significance: growth per x unit below this fraction of the mean level is
    /// ignored. Default 0.001 (0.1% of the level per x unit).
    pub min_slope_fraction: f64,
    /// Growth below this many bytes per x unit is ignored. Default 0; a caller might use
    /// 64 KiB/run.
    pub min_slope_abs: f64,
    /// How rates read in `reason`: per `display_unit` (default "x"), each x unit's rate
    /// multiplied by `display_scale` (e.g. "h" and 3600 when x is seconds).
    pub display_unit: &'static str,
    pub display_scale: f64,
    /// The series counts things (file descriptors, threads), not bytes: reasons print plain
    /// numbers ("+2.00/run"), not "+2 B/run".
    pub counts: bool,
    /// Every step of x adds its own independent error, which stays: the series is a sum of
    /// sampled blocks' weights (the native shim's estimate of what a stack holds; a leak's new
    /// blocks are sampled afresh each run), a random walk with drift rather than a line plus
    /// independent noise. The line's interval is then widened to its drift's
    /// (`stats::drift_ci95`), and a curve is said to speed up only when its increments rise.
    pub cumulative_errors: bool,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            alpha: 0.01,
            min_points: 4,
            min_slope_fraction: 0.001,
            min_slope_abs: 0.0,
            display_unit: "x",
            display_scale: 1.0,
            counts: false,
            cumulative_errors: false,
        }
    }
}

/// The estimate a verdict is decided on: the growth rate at the end of the series and its
/// 95% confidence interval, as honest for the series' shape as its estimator can make it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct EndRate {
    /// Bytes (or counts) per x unit.
    pub rate: f64,
    /// 95% CI of `rate`, (lower, upper).
    pub ci95: (f64, f64),
    /// Which estimator it is.
    pub from: RateFrom,
}

impl EndRate {
    fn new(from: RateFrom, rate: f64, ci95: (f64, f64)) -> EndRate {
        EndRate { rate, ci95, from }
    }

    /// The interval widened down to `lo` (shape knowledge: another model of the same points
    /// that would put the end lower).
    fn lower_to(mut self, lo: f64) -> EndRate {
        if lo.is_finite() {
            self.ci95.0 = self.ci95.0.min(lo);
        }
        self
    }

    /// The interval widened up to `hi` (shape knowledge: a model of the same points that puts
    /// the end higher, a curve that speeds up).
    fn upper_to(mut self, hi: f64) -> EndRate {
        if hi.is_finite() {
            self.ci95.1 = self.ci95.1.max(hi);
        }
        self
    }
}

/// The verdict contract: the end rate's interval against the threshold `thr`, and nothing
/// else. `grew`: the series rose by more than the threshold before its end, so an end below
/// the threshold is a plateau rather than stable.
pub fn decide(end: &EndRate, thr: f64, grew: bool) -> Verdict {
    let (lo, hi) = end.ci95;
    if lo > thr {
        Verdict::Leak
    } else if hi > thr {
        Verdict::Inconclusive
    } else if grew {
        Verdict::Plateau
    } else {
        Verdict::Stable
    }
}

/// Upper bound reported by `Classification::runs_needed` (meaning "this many or more"), for
/// series of up to a hundred points.
pub const MAX_RUNS_NEEDED: usize = 1000;

/// Series longer than this are averaged into this many buckets (`super::thin`) for the mean
/// path (Mann–Kendall and Theil–Sen are O(n²)); the envelope always sees every sample.
pub const MAX_MEAN_POINTS: usize = 1000;

/// A jump between two segments.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// x of the first point after the jump, x units.
    pub x: f64,
    /// Size of the jump (the later segment's line minus the earlier one's, midway between
    /// them), bytes; negative for a drop.
    pub bytes: f64,
}

/// What a plateau filled and where it stopped.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct PlateauInfo {
    /// Average growth from the first point to where it stopped, bytes per x unit; `None` for a
    /// one-off step (one jump is not a rate).
    pub fill_rate: Option<f64>,
    /// x of the last significant change (where the end starts), x units.
    pub stop_x: f64,
    /// Level it holds: the mean fitted level of the end, bytes.
    pub level: f64,
}

/// Verdict plus the evidence behind it.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Classification {
    pub verdict: Verdict,
    /// Leading points (lowest x) left out as warm-up.
    pub warmup: usize,
    /// Least-squares fit over the points after warm-up (the mean fit).
    pub fit: Option<LinearFit>,
    /// Theil–Sen slope over the same points, bytes per x unit.
    pub robust_slope: Option<f64>,
    /// Two-sided Mann–Kendall p-value over the same points.
    pub trend_p: Option<f64>,
    /// OLS slope as a percentage of the mean fitted level, % per x unit.
    pub growth_pct_per_x: Option<f64>,
    /// The headline rate, bytes per x unit: a leak's rate (the last segment's slope when the
    /// series started leaking part-way, the average rate of steps that keep coming, the floor's
    /// slope when troughs decided, else the OLS slope); a plateau's fill rate; the OLS slope for
    /// stable and inconclusive; `None` for a one-off step.
    pub rate: Option<f64>,
    /// The rate's 95% CI when the path that chose the rate knows it better than its line's
    /// (a staircase whose last steps are too recent to tell whether they stopped: from the end's
    /// own lower bound to the whole line's upper bound); `None`: the CI of the line the rate
    /// was fitted on.
    pub rate_ci95: Option<(f64, f64)>,
    /// Which estimate `rate` is; `None` when there is no rate.
    pub rate_from: Option<RateFrom>,
    /// The estimate the verdict was decided on (`decide`): the end rate and its 95% CI;
    /// `None` when the series could not be fitted at all.
    pub end_rate: Option<EndRate>,
    /// Slope at the end (see the module docs: after the last change point, or after the median x
    /// when there is none; the floor's slope when troughs decided), bytes per x unit.
    pub end_slope: Option<f64>,
    /// x where the end starts, x units.
    pub end_start_x: Option<f64>,
    /// For a plateau: fill rate, where it stopped, the level it holds.
    pub plateau: Option<PlateauInfo>,
    /// Significant jumps between segments (up or down), in x order.
    pub steps: Vec<Step>,
    /// The straight-line segments of the mean path (one when no change point was found; empty
    /// when the series was too short or troughs decided), for charts.
    pub segments: Vec<Segment>,
    /// Which model decided: the series (`mean`) or its lower envelope (`troughs`).
    pub decided_by: DecidedBy,
    /// Lower envelope, for series of at least `envelope::MIN_POINTS` points (charts draw its
    /// `points` and line when `decided_by` is `troughs`).
    pub envelope: Option<Envelope>,
    /// For inconclusive: estimated total number of points (warm-up included) that should decide
    /// it, from a power calculation on the measured noise (or, for steps, their spacing);
    /// `None` when no such number follows from the data. Capped at `MAX_RUNS_NEEDED` (or ten
    /// times the points there are, when more).
    pub runs_needed: Option<usize>,
    /// One short human sentence.
    pub reason: String,
}

impl Classification {
    fn new(warmup: usize) -> Classification {
        Classification {
            verdict: Verdict::Inconclusive,
            warmup,
            fit: None,
            robust_slope: None,
            trend_p: None,
            growth_pct_per_x: None,
            rate: None,
            rate_ci95: None,
            rate_from: None,
            end_rate: None,
            end_slope: None,
            end_start_x: None,
            plateau: None,
            steps: Vec::new(),
            segments: Vec::new(),
            decided_by: DecidedBy::Mean,
            envelope: None,
            runs_needed: None,
            reason: String::new(),
        }
    }

    /// The headline rate, and which estimate it is.
    fn set_rate(&mut self, from: RateFrom, rate: f64) {
        self.rate = Some(rate);
        self.rate_from = Some(from);
    }

    /// Records a verdict that no estimate decided (too few points, bad input).
    fn decide(mut self, verdict: Verdict, reason: String) -> Classification {
        self.verdict = verdict;
        self.reason = reason;
        self
    }

    /// The contract: `decide` on the end estimate; `reason` words the verdict it gives.
    fn conclude(
        mut self,
        end: EndRate,
        thr: f64,
        grew: bool,
        reason: impl FnOnce(Verdict) -> String,
    ) -> Classification {
        self.verdict = decide(&end, thr, grew);
        self.end_rate = Some(end);
        self.reason = reason(self.verdict);
        self
    }
}

/// Classifies a memory series. `warmup`: `None` = `detect_warmup`, `Some(k)` = drop the first k
/// points (by x). Points are sorted by x first. Never panics: bad input gives `Inconclusive`.
///
/// Pass every sample (not averages of buckets): the lower envelope needs the individual
/// troughs; the mean path averages long series into `MAX_MEAN_POINTS` buckets itself.
///
/// The practical threshold is `thr = max(min_slope_abs, min_slope_fraction · |mean level|)`
/// bytes per x unit; see the module docs for the paths and rules.
pub fn classify(x: &[f64], y: &[f64], warmup: Option<usize>, t: &Thresholds) -> Classification {
    classify_as(x, y, warmup, t, None)
}

/// `classify`, on the path another metric of the same series took (`saw_tooth`: `Some(true)`
/// for its troughs, `Some(false)` for its mean), so one series tells one story: the PSS of a
/// process whose anon is a saw-tooth is judged on its troughs too. `None`: its own shape.
pub fn classify_as(
    x: &[f64],
    y: &[f64],
    warmup: Option<usize>,
    t: &Thresholds,
    saw_tooth: Option<bool>,
) -> Classification {
    if let Err(reason) = validate(x, y, t) {
        return Classification::new(0).decide(Verdict::Inconclusive, reason.into());
    }
    let mut points: Vec<(f64, f64)> = x.iter().copied().zip(y.iter().copied()).collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (xs, ys): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
    let total = xs.len();
    let warm = warmup.unwrap_or_else(|| detect_warmup(&xs, &ys)).min(total);
    let mut c = Classification::new(warm);
    let (x, y) = (&xs[warm..], &ys[warm..]);
    let n = x.len();
    let min_points = t.min_points.max(4);
    if n < min_points {
        c.runs_needed = Some((warm + min_points).min(MAX_RUNS_NEEDED));
        let points = if n == 1 { "point" } else { "points" };
        let reason = format!("only {n} {points} after warm-up; need at least {min_points}");
        return c.decide(Verdict::Inconclusive, reason);
    }
    let thinned = if n > MAX_MEAN_POINTS {
        super::thin(&points[warm..])
    } else {
        points[warm..].to_vec()
    };
    let (tx, ty): (Vec<f64>, Vec<f64>) = thinned.into_iter().unzip();
    let ctx = match Ctx::new(&tx, &ty, t, warm, n) {
        Ok(ctx) => ctx,
        Err(reason) => return c.decide(Verdict::Inconclusive, reason.into()),
    };
    c = ctx.describe(c);
    c.envelope = envelope::lower_envelope(x, y);
    // A saw-tooth only when collections were seen: a hard floor *and* at least one drop per
    // window. A ramp that curves has a hard lower edge of residuals too, but no drops (a
    // PostgreSQL backend growing 2 GiB/h was judged on "0 drops" before).
    let own = |env: &Envelope| {
        env.sharpness < envelope::SAWTOOTH_SHARPNESS
            && env.drops >= env.windows.max(envelope::MIN_WINDOWS)
    };
    match c.envelope.clone() {
        // Another metric's saw-tooth, where this one shows collections too.
        Some(env) if saw_tooth.map_or_else(|| own(&env), |s| s && env.drops > 0) => {
            ctx.judge_troughs(c, &env)
        }
        _ => ctx.judge_mean(c),
    }
}

fn validate(x: &[f64], y: &[f64], t: &Thresholds) -> Result<(), &'static str> {
    let valid_thresholds = t.alpha > 0.0
        && t.alpha < 0.5
        && t.min_slope_fraction >= 0.0
        && t.min_slope_abs >= 0.0
        && t.min_slope_fraction.is_finite()
        && t.min_slope_abs.is_finite();
    if !valid_thresholds {
        return Err("invalid thresholds");
    }
    if x.len() != y.len() {
        return Err("x and y differ in length");
    }
    if !x.iter().chain(y).all(|v| v.is_finite()) {
        return Err("a sample is not a finite number");
    }
    Ok(())
}

/// What the mean path works on: the points after warm-up (averaged into buckets when long) and
/// the statistics every rule uses.
struct Ctx<'a> {
    x: &'a [f64],
    y: &'a [f64],
    t: &'a Thresholds,
    warm: usize,
    /// Points after warm-up before any averaging, and samples per averaged point.
    raw_n: usize,
    per_point: f64,
    fit: LinearFit,
    mk: MannKendall,
    robust: Option<f64>,
    level: f64,
    /// Practical threshold, bytes per x unit.
    thr: f64,
    ci: (f64, f64),
    sd: f64,
    /// Mean spacing of x, x units.
    dx: f64,
}

impl<'a> Ctx<'a> {
    fn new(
        x: &'a [f64],
        y: &'a [f64],
        t: &'a Thresholds,
        warm: usize,
        raw_n: usize,
    ) -> Result<Ctx<'a>, &'static str> {
        let n = x.len();
        let (Some(fit), Some(mk), Some(level)) =
            (stats::ols(x, y), stats::mann_kendall(y), stats::mean(y))
        else {
            return Err("x does not vary or values overflow");
        };
        let (Some(mut ci), Some(sd)) = (fit.slope_ci95, fit.residual_sd) else {
            return Err("too few points for a confidence interval");
        };
        if t.cumulative_errors {
            // The drift's interval, centred on the line's slope (nearly the same estimate:
            // both weigh the whole walk), where it is the wider.
            if let Some((lo, hi)) = stats::drift_ci95(x, y) {
                let half = (hi - lo) / 2.0;
                ci = (ci.0.min(fit.slope - half), ci.1.max(fit.slope + half));
            }
        }
        Ok(Ctx {
            x,
            y,
            t,
            warm,
            raw_n,
            per_point: raw_n as f64 / n as f64,
            fit,
            mk,
            robust: stats::theil_sen(x, y),
            level,
            thr: t.min_slope_abs.max(t.min_slope_fraction * level.abs()),
            ci,
            sd,
            dx: (x[n - 1] - x[0]) / (n - 1) as f64,
        })
    }

    /// Fills in the mean fit's numbers.
    fn describe(&self, mut c: Classification) -> Classification {
        c.fit = Some(self.fit);
        c.robust_slope = self.robust;
        c.trend_p = Some(self.mk.p_two_sided);
        c.growth_pct_per_x = (self.level != 0.0).then(|| self.fit.slope / self.level * 100.0);
        c.set_rate(RateFrom::Line, self.fit.slope);
        c
    }

    fn per_x(&self, bytes: f64) -> String {
        format!(
            "{}/{}",
            self.signed(bytes * self.t.display_scale),
            self.t.display_unit
        )
    }

    /// A signed amount of the series' unit: bytes in binary units, or a count.
    fn signed(&self, v: f64) -> String {
        if self.t.counts {
            let sign = if v >= 0.0 { "+" } else { "-" };
            format!("{sign}{}", crate::units::format_sig3(v.abs()))
        } else {
            fmt_signed(v)
        }
    }

    /// |v| in the series' unit.
    fn amount(&self, v: f64) -> String {
        if self.t.counts {
            crate::units::format_sig3(v.abs())
        } else {
            fmt_bytes(v)
        }
    }

    fn at_x(&self, x: f64) -> String {
        if self.t.display_unit == "run" || self.t.display_unit == "x" {
            format!("{} {x:.0}", self.t.display_unit)
        } else {
            crate::units::format_seconds(x)
        }
    }

    fn slope_txt(&self) -> String {
        let pct = if self.level != 0.0 {
            let p = self.fit.slope / self.level * 100.0 * self.t.display_scale;
            let sign = if p >= 0.0 { "+" } else { "" };
            format!(
                "{sign}{}%/{}",
                crate::units::format_sig3(p),
                self.t.display_unit
            )
        } else {
            "n/a".into()
        };
        format!("{} ({pct})", self.per_x(self.fit.slope))
    }

    fn judge_mean(&self, c: Classification) -> Classification {
        match self.last_drop() {
            Some(rest) => rest.judge_with_last_drop(c, self),
            None => self.judge_shape(c),
        }
    }

    /// The points before the last, when the last fell over 3 residual sd below the line (a
    /// collection, or memory given back at the last sample), and at least 4 remain. The sd is
    /// the whole series', which the drop itself inflates: a studentized residual cannot reach
    /// 3 under 11 points, so noise alone almost never sets a point aside.
    fn last_drop(&self) -> Option<Ctx<'a>> {
        let n = self.x.len();
        let residual = self.y[n - 1] - (self.fit.intercept + self.fit.slope * self.x[n - 1]);
        if n < 5 || residual >= -3.0 * self.sd {
            return None;
        }
        let per_point = self.per_point;
        let raw_n = self
            .raw_n
            .saturating_sub(per_point.round() as usize)
            .max(n - 1);
        Ctx::new(&self.x[..n - 1], &self.y[..n - 1], self.t, self.warm, raw_n).ok()
    }

    /// One low last point does not tell the end rate, but it bounds it: the rest of the
    /// series is judged as any series is, and its end rate's interval reaches down to the net
    /// rate the whole kept (from the rest's line at the first x to the last point, less 2 sd
    /// of noise). A V8 heap that gave back 25 of 225 MB at the last sample stays a leak;
    /// growth all given back is none. `whole`: the series with its last point.
    fn judge_with_last_drop(&self, c: Classification, whole: &Ctx) -> Classification {
        let n = whole.x.len();
        let (x0, xl, yl) = (whole.x[0], whole.x[n - 1], whole.y[n - 1]);
        let start = self.fit.intercept + self.fit.slope * x0;
        let kept = (yl - start - 2.0 * self.sd) / (xl - x0);
        let gave_back = self.fit.intercept + self.fit.slope * xl - yl;
        let mut c = self.judge_shape(c);
        let Some(mut end) = c.end_rate else { return c };
        // What it gave back was garbage kept until then: the rest's rate counts it as growth,
        // the line through every point spreads it over the whole (a V8 server attached 60 s:
        // +4.29 MB/s without the last point, while its heap's own accounting grew 4.12 MB/s
        // and anon 3.76): the lower of the two.
        end.rate = end.rate.min(whole.fit.slope).max(end.ci95.0);
        let end = end.lower_to(kept.min(end.rate));
        c.end_rate = Some(end);
        if c.verdict == Verdict::Leak {
            c.set_rate(end.from, end.rate);
        }
        let dropped = format!(
            "the last point gave back {}: {} with it, at least {} kept",
            self.amount(gave_back),
            self.per_x(whole.fit.slope),
            self.per_x(kept.max(0.0))
        );
        if c.verdict == Verdict::Leak && decide(&end, self.thr, false) != Verdict::Leak {
            c.verdict = Verdict::Inconclusive;
            c.set_rate(RateFrom::Line, whole.fit.slope);
            c.runs_needed = whole.needed_for(&end, n, 0);
            c.reason = format!("{}, but {dropped}", c.reason);
        } else if c.verdict == Verdict::Leak {
            c.reason = format!("{}; {dropped}", c.reason);
        }
        c
    }

    /// The shapes' estimators: segments when the change-point search finds any, else the line.
    fn judge_shape(&self, mut c: Classification) -> Classification {
        // Wobbles under a quarter of the threshold's growth per x step are noise, however
        // regular the rest of the series is.
        let c = match changepoint::segment(self.x, self.y, 0.25 * self.thr * self.dx) {
            Some(seg) if seg.segments.len() > 1 => self.judge_segments(c, &seg),
            seg => {
                c.segments = seg.map(|s| s.segments).unwrap_or_default();
                self.judge_line(c)
            }
        };
        let c = self.may_speed_up(c);
        let c = self.may_slow_down(c);
        self.may_have_warmed_up(c)
    }

    /// A series may be a leak that speeds up: its end is then faster than any line through it says
    /// (a parabola's end rate is twice its average, an exponential's up to three times), and under
    /// noise the curve is not told from a line. The line's or an end segment's interval covered an
    /// accelerating leak's end rate in 5–92% of the study's rows (tests/fit_accuracy.rs); it now
    /// reaches up to the 95% upper end of the slope at the last point of a parabola through all
    /// points and through the second half (for an undecided series, the last six under 12 points),
    /// and, when the whole bends upwards at one-sided α, the last third, the last quarter and the
    /// last six too (they lag an exponential less, but alone they bend wherever a heap's chunks
    /// came late: a V8 heap attached 60 s at +4.1 MB/s read up to 7.4; the last six of pantsd's
    /// straight 10 runs, a leak, said +12% above its line). A line that does not rise is read on
    /// the whole parabola alone: an exponential over 10 runs under 1 MiB of noise has a falling
    /// line in one series of six, and a flat Node heap whose PSS dipped twice near the end of 60 s
    /// read up to +62 MiB/h on its second half's parabola (+5.1 on the whole's). Only the upper end
    /// moves, and only when it is above the threshold already: a leak stays a leak and stable stays
    /// stable; what changes is what the interval admits (a gate's pass becomes undecided when the
    /// end may exceed its limit). Straight leaks' coverage rose from 94–96% to 96–99.7%; the
    /// exponential's rows are 96.7–99.9% (82–93% with neither the last six nor a falling line,
    /// 1,000 seeds).
    fn may_speed_up(&self, mut c: Classification) -> Classification {
        let Some(end) = c.end_rate else { return c };
        if end.ci95.1 <= self.thr {
            return c;
        }
        if self.t.cumulative_errors && !self.increments_rise() {
            // A random walk's parabola bends wherever its errors wandered.
            return c;
        }
        let n = self.x.len();
        // Ends nearer the last point lag an exponential less, but bend wherever a heap's
        // chunks came late: they are read only when the whole series bends upwards at
        // one-sided α (the acceleration is the series', not its end's).
        let whole = stats::parabola_end(self.x, self.y);
        let accelerates = whole.is_some_and(|p| p.bends_up(self.t.alpha));
        let last_six = n.saturating_sub(MIN_END_PARABOLA);
        let windows: &[usize] = if accelerates {
            &[n / 2, n - n / 3, n - n / 4, last_six]
        } else if self.fit.slope > 0.0 && c.verdict == Verdict::Inconclusive {
            &[(n / 2).min(last_six)]
        } else if self.fit.slope > 0.0 {
            &[n / 2]
        } else {
            &[]
        };
        let top = windows
            .iter()
            .filter(|&&from| n - from >= MIN_END_PARABOLA)
            .filter_map(|&from| stats::parabola_end(&self.x[from..], &self.y[from..]))
            .chain(whole)
            .map(|p| p.slope_upper95())
            .reduce(f64::max);
        // A parabola through a perfect line ends at the line's slope, give or take rounding.
        if let Some(top) = top.filter(|&t| t > end.ci95.1 + 1e-9 * end.ci95.1.abs()) {
            c.end_rate = Some(end.upper_to(top));
            if c.verdict == Verdict::Inconclusive {
                // The reason names the line's upper end; the interval now reaches further.
                c.reason = format!(
                    "{}; if it speeds up, its end may reach {}",
                    c.reason,
                    self.per_x(top)
                );
            }
        }
        c
    }

    /// The mirror of `may_speed_up`: a curve that slows down has its end below any line
    /// through its end (a segment over the last 40% of a saturating `1 − e^(−3x/n)` says
    /// 1.8× its end's slope, and its interval held the end in 85.5% of the study's series at
    /// 50 runs and 0.1% noise). When the points the end was read on (all for the line, the
    /// second half or the end segment) bend downwards at one-sided 5% (not α: no verdict
    /// rests on it), the interval reaches down to the 95% lower end of a parabola's slope at
    /// the last point. Only where the interval already admits the threshold, so no verdict
    /// changes: a leak stays a leak (its lower end above the threshold is what a leak is),
    /// and what changes is what an undecided end admits. Not for random walks (they bend
    /// wherever their errors wandered), a series that does not grow (a real glibc pool
    /// giving memory back read "as it slows down, its end may be as low as -11.8 MiB/h"),
    /// recurring steps, a curve that speeds up or a saw-tooth's floor.
    fn may_slow_down(&self, mut c: Classification) -> Classification {
        let Some(end) = c.end_rate else { return c };
        let from = match end.from {
            RateFrom::Line => self.x.first().copied(),
            RateFrom::SecondHalf | RateFrom::EndSegment => c.end_start_x,
            _ => None,
        };
        let grows = self.fit.slope > 0.0;
        let Some(from) =
            from.filter(|_| grows && end.ci95.0 <= self.thr && !self.t.cumulative_errors)
        else {
            return c;
        };
        let i = self.x.partition_point(|&v| v < from);
        if self.x.len() - i < MIN_END_PARABOLA {
            return c;
        }
        let Some(p) =
            stats::parabola_end(&self.x[i..], &self.y[i..]).filter(|p| p.bends_down(0.05))
        else {
            return c;
        };
        let low = p.slope_lower95();
        if low < end.ci95.0 - 1e-9 * end.ci95.0.abs() {
            c.end_rate = Some(end.lower_to(low));
            if c.verdict == Verdict::Inconclusive {
                c.reason = format!(
                    "{}; as it slows down, its end may be as low as {}",
                    c.reason,
                    self.per_x(low)
                );
            }
        }
        c
    }

    /// A line whose first points lie far below it may be tilted by a warm-up the trim did
    /// not take (`detect_warmup` trims one jump; a cache that fills over two or three runs
    /// under noise is a rise that goes on): its slope then overstates the end. When the
    /// leading residuals are below −2σ, the first below −3σ (a straight series starts so one
    /// time in 700), the interval reaches down to the line's without them (at most a
    /// quarter of the points). A warm-up of +8 MiB over about three runs before a leak of
    /// 256 KiB/run under 1 MiB of noise, 50 runs: the line's interval held the leak in 92–94%;
    /// the verdict follows the widened interval, as every verdict does.
    fn may_have_warmed_up(&self, mut c: Classification) -> Classification {
        let Some(end) = c.end_rate.filter(|e| e.from == RateFrom::Line) else {
            return c;
        };
        if self.t.cumulative_errors || self.sd.is_nan() || self.sd <= 0.0 {
            return c;
        }
        let n = self.x.len();
        let resid = |i: usize| self.y[i] - (self.fit.intercept + self.fit.slope * self.x[i]);
        if resid(0) >= -3.0 * self.sd {
            return c;
        }
        let k = (0..n / 4)
            .take_while(|&i| resid(i) < -2.0 * self.sd)
            .count();
        let Some(low) = stats::ols(&self.x[k..], &self.y[k..])
            .and_then(|f| f.slope_ci95)
            .map(|ci| ci.0)
            .filter(|&lo| lo < end.ci95.0)
        else {
            return c;
        };
        let end = end.lower_to(low);
        c.end_rate = Some(end);
        let without = format!(
            "without its first {k} point{} (far below the line: a warm-up?) its end may be as low as {}",
            if k == 1 { "" } else { "s" },
            self.per_x(low)
        );
        match decide(&end, self.thr, false) {
            Verdict::Inconclusive if c.verdict == Verdict::Leak => {
                c.verdict = Verdict::Inconclusive;
                c.reason = format!("{}, but {without}", c.reason);
                c.runs_needed = self.needed_for(&end, n - k, k);
            }
            Verdict::Inconclusive => c.reason = format!("{}; {without}", c.reason),
            _ => {}
        }
        c
    }
}

/// Points a parabola through the end of a series needs before `Ctx::may_speed_up` reads its
/// end rate: on five (2 degrees of freedom, t = 4.3) its interval is several times the line's,
/// and a crisp straight leak over 10 runs (pantsd's) read up to +17% above its line.
const MIN_END_PARABOLA: usize = 6;

/// Standard error of a least-squares slope over the points at `xs`, with
/// noise sd `sigma`.
fn slope_se(xs: &[f64], sigma: f64) -> f64 {
    let xm = stats::mean(xs).unwrap_or(0.0);
    let sxx: f64 = xs.iter().map(|v| (v - xm).powi(2)).sum();
    sigma / sxx.sqrt().max(f64::MIN_POSITIVE)
}

/// The noise sd a segmentation's slopes are tested with: the residuals'
/// about the segments, never below the noise floor the search used.
fn segment_sigma(seg: &changepoint::Segmentation) -> f64 {
    seg.residual_sd.unwrap_or(seg.noise_sd).max(seg.noise_sd)
}

/// A broken stick over `x`, `y` with the knot at their median x.
fn halves(x: &[f64], y: &[f64]) -> Option<stats::SegmentedFit> {
    let mut sorted = x.to_vec();
    stats::segmented_fit(x, y, stats::median(&mut sorted)?)
}

/// Bytes per unit in binary units, e.g. "+4.43 MiB/run".
/// Signed bytes in binary units, 3 significant digits, e.g. "+4.43 MiB" (`units`, as
/// every other number leakwatch prints).
fn fmt_signed(bytes: f64) -> String {
    crate::units::format_signed_bytes(bytes)
}

/// |bytes| in binary units, 3 significant digits, e.g. "4.43 MiB".
fn fmt_bytes(bytes: f64) -> String {
    crate::units::format_bytes(bytes.abs())
}

fn fmt_p(p: f64) -> String {
    if p >= 0.001 {
        format!("p = {p:.3}")
    } else {
        format!("p = {p:.0e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const MB: f64 = 1e6;

    #[test]
    fn degenerate_inputs_never_panic() {
        let t = Thresholds::default();
        let nan = f64::NAN;
        let cases: Vec<(Vec<f64>, Vec<f64>)> = vec![
            (vec![], vec![]),
            (vec![1.0], vec![1.0]),
            (vec![1.0, 2.0], vec![1.0]),
            (vec![1.0; 8], (0..8).map(f64::from).collect()),
            ((0..8).map(f64::from).collect(), vec![5.0; 8]),
            ((0..8).map(f64::from).collect(), vec![0.0; 8]),
            ((0..8).map(f64::from).collect(), vec![nan; 8]),
            (
                vec![1.0, 2.0, 3.0, 4.0, 5.0],
                vec![f64::MAX, -f64::MAX, f64::MAX, 0.0, 1.0],
            ),
            (
                vec![3.0, 1.0, 2.0, 2.0, 5.0, 4.0],
                vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            ),
        ];
        for (x, y) in &cases {
            for w in [None, Some(0), Some(3), Some(100)] {
                let c = classify(x, y, w, &t);
                assert!(!c.reason.is_empty());
                assert_ne!(c.verdict, Verdict::Leak, "{x:?} {y:?} -> {c:?}");
            }
        }
        let flat = classify(&cases[4].0, &cases[4].1, None, &t);
        assert_eq!(flat.verdict, Verdict::Stable, "{flat:?}");
        let short = classify(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0], None, &t);
        assert_eq!(
            (short.verdict, short.runs_needed),
            (Verdict::Inconclusive, Some(4))
        );
        let bad = Thresholds {
            alpha: f64::NAN,
            ..t
        };
        assert_eq!(
            classify(&[1.0; 5], &[1.0; 5], None, &bad).verdict,
            Verdict::Inconclusive
        );
    }

    /// Four points are enough for an interval (t on two degrees of freedom, 4.30): a crisp
    /// 4 MiB/run is a leak, the same rate under 2 MiB of noise is inconclusive with the rerun
    /// that would decide it, and one step among four is no rate.
    #[test]
    fn four_points_decide_with_their_wide_interval() {
        let t = per_run();
        let x = [1.0, 2.0, 3.0, 4.0];
        let y = |noise: [f64; 4]| -> Vec<f64> {
            x.iter()
                .zip(noise)
                .map(|(&r, e)| 100.0 * MB + 4.0 * MIB_ * r + e)
                .collect()
        };
        let crisp = classify(&x, &y([0.0; 4]), Some(0), &t);
        assert_eq!(crisp.verdict, Verdict::Leak, "{crisp:?}");
        let e = crisp.end_rate.unwrap();
        assert!((e.rate - 4.0 * MIB_).abs() < 1.0, "{e:?}");
        let noisy = [0.0, 2.0, -2.0, 0.0].map(|v| v * MIB_);
        let noisy = classify(&x, &y(noisy), Some(0), &t);
        assert_eq!(noisy.verdict, Verdict::Inconclusive, "{noisy:?}");
        assert!(noisy.runs_needed.is_some_and(|n| n > 4), "{noisy:?}");
        let step = [0.0, 0.0, 2.0, 2.0].map(|v| 100.0 * MB + v * MIB_);
        let step = classify(&x, &step, Some(0), &t);
        assert_ne!(step.verdict, Verdict::Leak, "{step:?}");
    }

    /// Thresholds as `fit::thresholds` sets them for a run series of bytes.
    pub(super) fn per_run() -> Thresholds {
        Thresholds {
            min_slope_abs: 64.0 * 1024.0,
            display_unit: "run",
            ..Thresholds::default()
        }
    }

    /// As `fit::thresholds` makes them for x = seconds.
    pub(super) fn per_hour() -> Thresholds {
        Thresholds {
            min_slope_fraction: 0.001 / 3600.0,
            min_slope_abs: 64.0 * KIB / 3600.0,
            display_unit: "h",
            display_scale: 3600.0,
            ..Thresholds::default()
        }
    }

    pub(super) const KIB: f64 = 1024.0;
    pub(super) const MIB_: f64 = 1024.0 * 1024.0;

    pub(super) fn runs(n: usize) -> Vec<f64> {
        (1..=n).map(|v| v as f64).collect()
    }

    /// Counts (fds, threads, Python objects) read as counts, not bytes.
    #[test]
    fn counted_series_speak_in_counts() {
        let x = runs(20);
        let y: Vec<f64> = x.iter().map(|r| 40.0 + 2.0 * r).collect();
        let t = Thresholds {
            counts: true,
            min_slope_abs: 0.5,
            display_unit: "run",
            ..Thresholds::default()
        };
        let c = classify(&x, &y, Some(0), &t);
        assert_eq!(c.verdict, Verdict::Leak, "{c:#?}");
        assert!(c.reason.contains("+2.00/run"), "{}", c.reason);
        assert!(!c.reason.contains(" B"), "{}", c.reason);
    }

    #[test]
    fn verdicts_order_by_severity() {
        use Verdict::*;
        assert!(Stable < Plateau && Plateau < Inconclusive && Inconclusive < Leak);
        assert_eq!([Plateau, Leak, Stable].into_iter().max(), Some(Leak));
        assert_eq!([Plateau, Stable].into_iter().max(), Some(Plateau));
    }

    /// Regression (issue 19): a PostgreSQL backend keeping prepared statements, attached
    /// for 60 s, grew 64 GiB/h in a slightly convex ramp with no drop at all; its residuals'
    /// hard lower edge read as a saw-tooth with "too few teeth" (inconclusive). A saw-tooth
    /// needs collections: at least one drop per window, and enough windows.
    #[test]
    fn a_convex_ramp_without_drops_is_no_saw_tooth() {
        let x: Vec<f64> = (0..60).map(f64::from).collect();
        let y: Vec<f64> = x
            .iter()
            .map(|&t| 43.0 * MIB_ + 17.0 * MIB_ * t + 0.02 * MIB_ * t * t)
            .collect();
        let c = classify(&x, &y, Some(0), &per_hour());
        assert_eq!(c.envelope.as_ref().map(|e| e.drops), Some(0));
        assert_eq!(c.decided_by, DecidedBy::Mean, "{c:#?}");
        assert_eq!(c.verdict, Verdict::Leak, "{c:#?}");
    }

    #[test]
    fn verdict_names() {
        for v in [
            Verdict::Leak,
            Verdict::Plateau,
            Verdict::Stable,
            Verdict::Inconclusive,
        ] {
            assert_eq!(format!("{v:?}").to_lowercase(), v.as_str());
        }
    }
}
