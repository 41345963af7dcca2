//! Leak verdicts: trims warm-up, then decides leak / plateau / stable / inconclusive for one
//! memory series, judging each shape by its own model (DESIGN.md, "fit"):
//!
//! * **saw-teeth** (a hard floor with memory piling above it: garbage collection, per-request
//!   scratch) by their lower envelope (`super::envelope`): growth of the troughs is a leak,
//!   growth of the teeth is not;
//! * **steps, fills and ramps** by their change points (`super::changepoint`): steps that stop
//!   → plateau, steps that keep coming at a steady average rate → leak at that rate, one step →
//!   a one-off step (plateau, no per-x rate), a rise that levels off → plateau;
//! * **one straight piece** (no change point: a straight leak, a flat series, a smooth curve in
//!   noise) by the least-squares line, Mann–Kendall and Theil–Sen, with a two-segment
//!   (broken-stick) test of whether it is still going at the end.
//!
//! **The end** is one notion everywhere: the points after the last change point, or, with no
//! change point, the points after the median x; `Classification::end_slope` is the fitted
//! slope there (the last segment's least-squares slope, or the broken-stick's second slope; the
//! floor's slope when the troughs decided). Reports should say "at the end" with that number.
//!
//! Units: `x` in x units (run number or seconds), `y` and every level in bytes, every slope in
//! bytes per x unit, percentages are of the mean fitted level.
//!
//! Rules of the straight-piece path (α = `Thresholds::alpha`, thr = practical threshold):
//! 1. fewer than `min_points` after warm-up → inconclusive;
//! 2. no significant growth (neither Mann–Kendall p < α with S > 0 nor the OLS 95% CI wholly
//!    above thr; or the CI includes 0) →
//!    stable if the CI's upper end is ≤ thr (or thr = 0), else inconclusive (the noise could
//!    hide a slope that matters);
//! 3. significant, but the OLS slope is ≤ thr → stable (too small to matter);
//! 4. still growing at the end → leak. "Still growing" uses a two-segment (broken-stick) fit with
//!    the knot at the median x: the second segment's slope must exceed half the overall OLS
//!    slope at one-sided level α (its lower bound `tail − t(1−α, n−3)·se` > slope/2), the last
//!    point must be no more than 3 residual sd below the overall line, and the Theil–Sen slope
//!    must also exceed thr (so a single spike cannot make a leak);
//! 5. second-segment slope below max(slope/2, thr) at one-sided level α → plateau;
//! 6. otherwise inconclusive (grew, but too noisy to tell whether it slowed down).
//!
//! Why rules 4–5 keep both errors rare: for a straight-line leak the second-half slope equals
//! the overall slope, for a levelled-off series it is ≈ 0, and for a saturating curve
//! `1 − e^(−x/τ)` that is 95% of the way to its asymptote at the last point it is 0.24–0.29 of
//! the overall slope. Halfway between is 1/2, and each verdict needs a one-sided α test against
//! that boundary, so turning one into the other takes a > α noise event. The segment path uses
//! the same half-pace boundary for its last segment (see `judge_segments`). One more guard: a
//! straight-piece leak must fit better than the best single step by 8σ² (`best_step`), so a
//! step the change-point search could not resolve is not read as a rate.
//!
//! Rules of the segment path (two or more segments, `changepoint::segment` with a noise floor
//! of a quarter of thr per x step):
//! * segments that are one line in all but name (every slope within a quarter of the overall
//!   one, no jump over two x steps of it) → the straight-piece path;
//! * jumps count as steps when significant at two-sided α (≈ σ·√(4/m₁ + 4/m₂)) and over
//!   thr·Δx; segments rise or fall when beyond ±thr at one-sided α;
//! * nothing rises → stable or inconclusive by the line; it falls as much as it rises and the
//!   line does not rise → the same; it rises and falls → inconclusive;
//! * the last segment rises (one-sided α/10 — the search chose where it starts — above
//!   max(thr, half the average rate before it), 5+ points and a fifth of the series, Theil–Sen
//!   above thr) → leak at the last segment's slope;
//! * a fill, then a slower leak: the last segment rises above thr (one-sided α/10, robustly),
//!   spans 8+ points and a third of the series, keeps its pace inside (its second half's slope
//!   above half of its own at α/10), and what came before did not slow down (its second half
//!   not below ¾ of its first at α) → leak at the last segment's slope. A saturating curve
//!   slows down all along, so it fails one of the last two;
//! * the last segment is flat (its upper bound below that boundary): one step up and no ramp →
//!   plateau, "one-off step", no rate; three or more steps with no gap (before, between, or
//!   after them to the end) over twice their mean spacing, and the whole series rising
//!   (Mann–Kendall, CI, Theil–Sen) → leak at the OLS slope; the end at least `ln(1/0.01)` ×
//!   the expected spacing of steps at the average rate without one (ramps: at once) →
//!   plateau with the average fill rate up to the last change; otherwise inconclusive, with
//!   the runs until that end length would be reached.
//!
//! Rules of the trough path (a saw-tooth: `Envelope::sharpness` < `SAWTOOTH_SHARPNESS` and at
//! least one drop per window, `envelope::MIN_WINDOWS` windows at least — collections seen): see
//! `judge_troughs` — Mann–Kendall at α/10 on the window minima plus a one-sided t test at α,
//! slope and Theil–Sen above thr → the floor rises: a plateau if it stopped (the minima's
//! last change-point segment, or the second half of a broken stick, below half the pace
//! before it at α), inconclusive if its second half rose less than half the pace, else a
//! leak; 95% upper bound within thr → stable; fewer than `envelope::MIN_WINDOWS` windows of
//! two teeth → inconclusive.

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

/// Decision thresholds.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Significance level of the trend tests (Mann–Kendall, tail slope), in (0, 0.5). Default 0.01.
    pub alpha: f64,
    /// Fewest points, after warm-up, to decide anything (at least 4 is used). Default 5.
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
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            alpha: 0.01,
            min_points: 5,
            min_slope_fraction: 0.001,
            min_slope_abs: 0.0,
            display_unit: "x",
            display_scale: 1.0,
        }
    }
}

/// Upper bound reported by `Classification::runs_needed` (meaning "this many or more").
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
    /// `None` when no such number follows from the data. Capped at `MAX_RUNS_NEEDED`.
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

    fn decide(mut self, verdict: Verdict, reason: String) -> Classification {
        self.verdict = verdict;
        self.reason = reason;
        self
    }
}

/// Number of leading points to drop as warm-up: 0 or 1. `x` must be ascending.
///
/// Rule: take the per-x rate of each step, `(y[i+1] − y[i]) / (x[i+1] − x[i])`; the steps after
/// the first are the reference, with median `med` and noise scale
/// `s = max(1.4826·MAD, 0.25·|med|, 1e-4·mean level / median step of x)` (the last term, a
/// fraction of the level, is the floor when the steps are all equal — never a fraction of a
/// median step, which can be zero). The first point is warm-up when the first step exceeds
/// `med + 5·s` (a jump) and the second step's excess over `med` is less than a quarter of the
/// first's (the jump is over: a small creep after it, like redis' 8 KiB after a 4 MiB first fill,
/// does not block the trim, while a rise that goes on — a cache's fill, a saturating curve,
/// whose second step is ≥ 0.7 of its first — is growth, not warm-up). Only upward jumps count.
///
/// At most one point is trimmed (so ≥ max(4, n/2) remain); pass an explicit warm-up to
/// `classify` for longer ones. Returns 0 for n < 5, length mismatch, non-finite values or
/// non-increasing x.
///
/// **One warm-up per scope.** Call this once per scope on its primary metric and pass the
/// same `Some(k)` to `classify` for every other metric of that scope, so RSS, anon, PSS …
/// of one process are trimmed alike (a borderline jump can otherwise be trimmed in one metric
/// and not in another).
pub fn detect_warmup(x: &[f64], y: &[f64]) -> usize {
    const K: f64 = 5.0;
    let n = y.len();
    if x.len() != n || n < 5 || !x.iter().chain(y).all(|v| v.is_finite()) {
        return 0;
    }
    let mut rates = Vec::with_capacity(n - 1);
    for i in 0..n - 1 {
        let dx = x[i + 1] - x[i];
        if dx <= 0.0 {
            return 0;
        }
        rates.push((y[i + 1] - y[i]) / dx);
    }
    let mut reference = rates[1..].to_vec();
    let Some(med) = stats::median(&mut reference) else {
        return 0;
    };
    let mut deviations: Vec<f64> = reference.iter().map(|r| (r - med).abs()).collect();
    let mad = stats::median(&mut deviations).unwrap_or(0.0);
    let level = stats::mean(y).unwrap_or(0.0).abs();
    // The level floor is per typical step, so it is a rate like the others
    // (x may be runs, or seconds 300 apart).
    let mut steps: Vec<f64> = x.windows(2).map(|w| w[1] - w[0]).collect();
    let step = stats::median(&mut steps)
        .unwrap_or(1.0)
        .max(f64::MIN_POSITIVE);
    let spread = (1.4826 * mad)
        .max(0.25 * med.abs())
        .max(1e-4 * level / step);
    let (first, second) = (rates[0] - med, rates[1] - med);
    usize::from(first > K * spread && second < 0.25 * first)
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
        let reason = format!("only {n} points after warm-up; need at least {min_points}");
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
    match c.envelope.clone() {
        // A saw-tooth only when collections were seen: a hard floor *and* at least one drop
        // per window. A ramp that curves has a hard lower edge of residuals too, but no drops
        // (a PostgreSQL backend growing 2 GiB/h was judged on "0 drops" before).
        Some(env)
            if env.sharpness < envelope::SAWTOOTH_SHARPNESS
                && env.drops >= env.windows.max(envelope::MIN_WINDOWS) =>
        {
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

/// Power of the "how many runs would decide it" estimates: the number of points at which the
/// deciding test would succeed with this probability if the truth were at the boundary.
const POWER: f64 = 0.8;

/// When steps have stopped: no step for `ln(1/STOP_P)` expected step gaps at the average rate
/// (a steady Poisson stream of steps leaves such a gap with probability `STOP_P`).
const STOP_P: f64 = 0.01;

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
        let (Some(ci), Some(sd)) = (fit.slope_ci95, fit.residual_sd) else {
            return Err("too few points for a confidence interval");
        };
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
        c.rate = Some(self.fit.slope);
        c
    }

    fn per_x(&self, bytes: f64) -> String {
        fmt_rate(bytes * self.t.display_scale, self.t.display_unit)
    }

    fn at_x(&self, x: f64) -> String {
        if self.t.display_unit == "run" || self.t.display_unit == "x" {
            format!("{} {x:.0}", self.t.display_unit)
        } else {
            format!("{x:.0} s")
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

    /// Total points (warm-up included) for `m` points of the fitted (possibly averaged) series;
    /// `None` unless more than there are now.
    fn needed(&self, m: f64) -> Option<usize> {
        let raw = (m * self.per_point).ceil();
        (raw.is_finite() && raw > self.raw_n as f64)
            .then(|| (self.warm + raw.min(MAX_RUNS_NEEDED as f64) as usize).min(MAX_RUNS_NEEDED))
    }

    fn judge_mean(&self, mut c: Classification) -> Classification {
        // Wobbles under a quarter of the threshold's growth per x step are noise, however
        // regular the rest of the series is.
        match changepoint::segment(self.x, self.y, 0.25 * self.thr * self.dx) {
            Some(seg) if seg.segments.len() > 1 => self.judge_segments(c, &seg),
            seg => {
                c.segments = seg.map(|s| s.segments).unwrap_or_default();
                self.judge_line(c)
            }
        }
    }
}

/// The straight-piece path: rules 2–6 of the module docs.
impl Ctx<'_> {
    fn judge_line(&self, mut c: Classification) -> Classification {
        let n = self.x.len();
        let mut sorted = self.x.to_vec();
        let knot = stats::median(&mut sorted).unwrap_or(0.0);
        let seg = stats::segmented_fit(self.x, self.y, knot);
        if let Some(s) = seg {
            c.end_slope = Some(s.tail_slope);
            c.end_start_x = Some(knot);
        }
        // Growth is significant by the trend test, or by the line's CI lying wholly above the
        // threshold: Mann–Kendall cannot reach p < 0.01 on 5 points (its least p is 0.017),
        // and a perfect 4 MiB/run line over 5 runs is growth, not "no significant trend".
        let rising = self.mk.s > 0.0 && self.mk.p_two_sided < self.t.alpha || self.ci.0 > self.thr;
        if !(rising && self.ci.0 > 0.0) {
            return self.not_significant(c, rising);
        }
        let slope_txt = self.slope_txt();
        if self.fit.slope <= self.thr {
            let reason = format!(
                "grows {slope_txt}, below the threshold of {}",
                self.per_x(self.thr)
            );
            return c.decide(Verdict::Stable, reason);
        }
        let Some(seg) = seg else {
            let reason = format!("grows {slope_txt}, but the end cannot be fitted on its own");
            return c.decide(Verdict::Inconclusive, reason);
        };
        let t_tail = stats::student_t_quantile(1.0 - self.t.alpha, seg.df);
        let (tail_lo, tail_hi) = (
            seg.tail_slope - t_tail * seg.tail_slope_se,
            seg.tail_slope + t_tail * seg.tail_slope_se,
        );
        // Half the overall slope separates "still going" from "slowed down".
        let pace = self.fit.slope / 2.0;
        let last_residual = self.y[n - 1] - (self.fit.intercept + self.fit.slope * self.x[n - 1]);
        let last_ok = last_residual >= -3.0 * self.sd;
        // The robust slope must agree, so one spike cannot carry a leak verdict.
        let robust = self.robust.unwrap_or(f64::NAN);
        // With no change point the end is the second half (after the median x).
        let end_txt = format!("{} in the second half", self.per_x(seg.tail_slope));
        let p_txt = fmt_p(self.mk.p_two_sided);
        let step = self.best_step();
        // The line must beat the best single step by 8σ² (a step also chooses where it is).
        let line_rss = self.sd * self.sd * (n as f64 - 2.0);
        let step_wins = step.is_some_and(|s| s.rss <= line_rss + 8.0 * self.sd * self.sd);
        if tail_lo > pace && last_ok && robust > self.thr && !step_wins {
            let reason = format!("grows {slope_txt}, {p_txt}, still {end_txt}");
            return c.decide(Verdict::Leak, reason);
        }
        if tail_hi < pace.max(self.thr) {
            let end: Vec<f64> = (0..n)
                .filter(|&i| self.x[i] >= knot)
                .map(|i| self.y[i])
                .collect();
            c.plateau = Some(PlateauInfo {
                fill_rate: Some(seg.head_slope),
                stop_x: knot,
                level: stats::mean(&end).unwrap_or(self.level),
            });
            c.rate = Some(seg.head_slope);
            let reason = format!(
                "grew {} until {}, then {end_txt}",
                self.per_x(seg.head_slope),
                self.at_x(knot)
            );
            return c.decide(Verdict::Plateau, reason);
        }
        let reason = if let Some(s) = step.filter(|_| step_wins) {
            format!(
                "rises {slope_txt}, but as much like one step of {} at {} as like a line",
                fmt_signed(s.jump),
                self.at_x(s.x)
            )
        } else if !last_ok {
            format!("grows {slope_txt}, but the last point fell well below the trend")
        } else if robust <= self.thr {
            format!(
                "grows {slope_txt} by least squares, but the robust slope is only {}",
                self.per_x(robust)
            )
        } else {
            format!("grows {slope_txt}, but too noisy to tell whether it slowed ({end_txt})")
        };
        // Power calculation: the tail slope's one-sided bound must clear the half-pace boundary
        // with probability POWER; its standard error shrinks like n^(−3/2) for a fixed design.
        let gap = (seg.tail_slope - pace.max(self.thr))
            .abs()
            .max(0.25 * pace.abs());
        let z = stats::normal_quantile(POWER);
        let m = n as f64 * ((t_tail + z) * seg.tail_slope_se / gap).powf(2.0 / 3.0);
        c.runs_needed = self.needed(m);
        c.decide(Verdict::Inconclusive, reason)
    }

    /// Rule 2: no significant growth. `rising`: Mann–Kendall alone says it rises (so the CI is
    /// what rejected it, and the reason says so rather than "no significant trend").
    fn not_significant(&self, mut c: Classification, rising: bool) -> Classification {
        let (lo, hi) = self.ci;
        let p_txt = fmt_p(self.mk.p_two_sided);
        let slope_txt = self.slope_txt();
        let why = if rising {
            format!(
                "the trend test says it rises ({p_txt}) but the slope's 95% CI [{}, {}] includes 0",
                self.per_x(lo),
                self.per_x(hi)
            )
        } else if self.mk.s < 0.0 && self.mk.p_two_sided < self.t.alpha {
            format!("it falls ({p_txt})")
        } else {
            format!("no significant trend ({p_txt})")
        };
        if self.thr > 0.0 && hi > self.thr {
            let m = points_needed(self.sd, self.dx, self.thr, 0.975, POWER);
            c.runs_needed = m.and_then(|m| self.needed(m as f64));
            let reason = format!(
                "{why}, but noise allows growth up to {} (threshold {})",
                self.per_x(hi),
                self.per_x(self.thr)
            );
            return c.decide(Verdict::Inconclusive, reason);
        }
        let reason = if rising {
            format!("{why}: slope {slope_txt}")
        } else {
            format!("no significant growth: slope {slope_txt}, {p_txt}")
        };
        c.decide(Verdict::Stable, reason)
    }
}

/// The best single step: two flat pieces split between points k−1 and k.
#[derive(Clone, Copy, Debug)]
struct StepFit {
    /// Residual sum of squares, bytes².
    rss: f64,
    /// x of the first point after the step.
    x: f64,
    /// Later mean minus earlier mean, bytes.
    jump: f64,
}

impl Ctx<'_> {
    /// Best fit of one step (two flat pieces, each at least 2 points) by least squares. A
    /// straight-piece leak needs the line to fit better than this by 8σ²: a single step that
    /// the change-point search could not separate from the noise is no rate (at 4σ², a 2σ
    /// step at 20 runs was still a leak in 0.15% of series). A straight leak of total rise R
    /// over n points beats the best step by ≈ R²·n/48, so this costs only leaks below ≈ 0.7σ
    /// per run at 10 runs (0.23σ at 20, 0.06σ at 50), under what the trend tests find anyway.
    fn best_step(&self) -> Option<StepFit> {
        let n = self.y.len();
        if n < 4 {
            return None;
        }
        let y0 = self.level;
        let (mut s, mut ss) = (vec![0.0; n + 1], vec![0.0; n + 1]);
        for (i, v) in self.y.iter().enumerate() {
            s[i + 1] = s[i] + (v - y0);
            ss[i + 1] = ss[i] + (v - y0) * (v - y0);
        }
        let piece = |a: usize, b: usize| {
            let m = (b - a) as f64;
            let sum = s[b] - s[a];
            ss[b] - ss[a] - sum * sum / m
        };
        (2..=n - 2)
            .map(|k| StepFit {
                rss: piece(0, k) + piece(k, n),
                x: self.x[k],
                jump: (s[n] - s[k]) / (n - k) as f64 - s[k] / k as f64,
            })
            .min_by(|a, b| a.rss.total_cmp(&b.rss))
    }
}

/// Smallest number m of equally spaced points (spacing `dx` x units) for which a slope test at
/// confidence `p` has power `power` against a slope `target` away (bytes per x unit):
/// `(t(p, m−2) + z(power)) · sd/dx · sqrt(12 / (m(m²−1))) ≤ target` (z(0.5) = 0: the plain
/// half-width). Capped at `MAX_RUNS_NEEDED`. `None` if the inputs make no sense.
fn points_needed(sd: f64, dx: f64, target: f64, p: f64, power: f64) -> Option<usize> {
    let valid = sd >= 0.0
        && sd.is_finite()
        && dx > 0.0
        && target > 0.0
        && p > 0.5
        && p < 1.0
        && (0.5..1.0).contains(&power);
    if !valid {
        return None;
    }
    let z = if power > 0.5 {
        stats::normal_quantile(power)
    } else {
        0.0
    };
    let half_width = |m: usize| {
        let m = m as f64;
        (stats::student_t_quantile(p, m - 2.0) + z) * sd / dx * (12.0 / (m * (m * m - 1.0))).sqrt()
    };
    // t(p, m−2) > z(p) and m(m²−1) < m³, so m > cbrt(12·((z(p)+z)·sd/(dx·target))²): start
    // there and step up — t is close to z by then, so this takes only a few steps.
    let ratio = (stats::normal_quantile(p) + z) * sd / (dx * target);
    let lower = (12.0 * ratio * ratio).cbrt().floor();
    if lower.is_nan() || lower >= MAX_RUNS_NEEDED as f64 {
        return Some(MAX_RUNS_NEEDED);
    }
    let mut m = (lower as usize).max(3);
    while m < MAX_RUNS_NEEDED && half_width(m) > target {
        m += 1;
    }
    Some(m)
}

/// The jump from segment `a` to the next, `b`: the smaller gap between
/// their lines at the two points that separate them (a's last, b's first),
/// and none when the lines cross in between — a kink where a ramp slows or
/// stops at a sample is not a step, however the points were split.
fn jump_between(a: &Segment, b: &Segment) -> f64 {
    let at_end = b.level_at(a.x_end) - a.level_end;
    let at_start = b.level_start - a.level_at(b.x_start);
    if at_end.signum() != at_start.signum() {
        0.0
    } else if at_end.abs() < at_start.abs() {
        at_end
    } else {
        at_start
    }
}

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

/// Whether a ramp `a` ran into the next segment `b` nearer to b's first
/// point than to its own last: where their lines cross, the kink a sample
/// was assigned to `b`.
fn ramp_met_at_end(a: &Segment, b: &Segment) -> bool {
    let converging = a.slope - b.slope;
    if converging <= 0.0 {
        return false;
    }
    let cross = a.x_end + (b.level_at(a.x_end) - a.level_end) / converging;
    cross - a.x_end > b.x_start - cross
}

/// Growth events read off the segments.
#[derive(Default)]
struct Events {
    /// Significant jumps (up and down), in x order.
    steps: Vec<Step>,
    /// x of each significant upward jump.
    up_x: Vec<f64>,
    /// Rising segments before the last one.
    ramps: usize,
    /// Largest upward jump, bytes (0 without one). A ramp's growth is continuous: whether it
    /// stopped is the end slope's test; a jump's is also how long the end has gone without one.
    quantum: f64,
    /// Total growth (upward jumps and rising segments) and total decline (drops and falling
    /// segments) before the end, bytes.
    up_total: f64,
    down_total: f64,
}

/// The segment path: steps, fills and ramps.
impl Ctx<'_> {
    /// Slope of a segment and its standard error with noise sd `sigma`.
    fn segment_slope(&self, s: &Segment, sigma: f64) -> (f64, f64) {
        (s.slope, slope_se(&self.x[s.start..s.end], sigma))
    }

    /// Jumps between segments are significant at two-sided level α (standard error from the two
    /// lines' ends, ≈ σ·√(4/m₁ + 4/m₂)) and at least one x step's worth of the threshold;
    /// segments rise (or fall) when their slope is beyond ±thr at one-sided level α.
    fn events(&self, segs: &[Segment], sigma: f64) -> Events {
        let mut ev = Events::default();
        let z2 = stats::normal_quantile(1.0 - self.t.alpha / 2.0);
        let z1 = stats::normal_quantile(1.0 - self.t.alpha);
        for pair in segs.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let jump = jump_between(a, b);
            let se = sigma * (4.0 / a.len() as f64 + 4.0 / b.len() as f64).sqrt();
            if jump.abs() > z2 * se && jump.abs() > self.thr * self.dx {
                ev.steps.push(Step {
                    x: b.x_start,
                    bytes: jump,
                });
                if jump > 0.0 {
                    ev.up_x.push(b.x_start);
                    ev.up_total += jump;
                    ev.quantum = ev.quantum.max(jump);
                } else {
                    ev.down_total -= jump;
                }
            }
        }
        for s in &segs[..segs.len() - 1] {
            let (slope, se) = self.segment_slope(s, sigma);
            let growth = slope * (s.x_end - s.x_start);
            if slope > self.thr && slope - z1 * se > self.thr {
                ev.ramps += 1;
                ev.up_total += growth;
            } else if slope < -self.thr && slope + z1 * se < -self.thr {
                ev.down_total -= growth;
            }
        }
        ev
    }

    fn judge_segments(
        &self,
        mut c: Classification,
        seg: &changepoint::Segmentation,
    ) -> Classification {
        let segs = &seg.segments;
        let (Some(first), Some(last)) = (segs.first(), segs.last()) else {
            return self.judge_line(c);
        };
        let sigma = segment_sigma(seg);
        let (end_slope, end_se) = self.segment_slope(last, sigma);
        let ev = self.events(segs, sigma);
        c.segments = segs.clone();
        c.steps = ev.steps.clone();
        c.end_slope = Some(end_slope);
        c.end_start_x = Some(last.x_start);
        let n_last = self.x.len() - last.start;
        let end_txt = format!(
            "{} since {}",
            self.per_x(end_slope),
            self.at_x(last.x_start)
        );
        if self.one_line(segs, &ev.steps, sigma) {
            // Changes in name only: every piece has the overall slope and no jump exceeds two
            // x steps of it (a straight leak stays a straight leak, with its least-squares
            // slope, even when its noise is regular enough to cut).
            return self.judge_line(c);
        }
        if ev.up_x.is_empty() && ev.ramps == 0 {
            return self.no_growth_events(c, &end_txt);
        }
        if ev.down_total > 0.5 * ev.up_total {
            let rising = self.mk.s > 0.0 && self.mk.p_two_sided < self.t.alpha && self.ci.0 > 0.0;
            if !rising {
                // Falls as much as it rises and shows no trend up: judged by the line, which
                // cannot make it a leak from here.
                return self.not_significant(c, false);
            }
            let reason = format!(
                "rises and falls ({} down, {} up in steps and ramps); not a steady trend",
                fmt_bytes(ev.down_total),
                fmt_bytes(ev.up_total)
            );
            return c.decide(Verdict::Inconclusive, reason);
        }
        // Half the average rate before the end separates "still going" from "slowed down".
        let before = (last.x_start - first.x_start).max(f64::MIN_POSITIVE);
        let pace = 0.5 * (last.level_start - first.level_start) / before;
        let bound = pace.max(self.thr);
        // σ is pooled over all segments, so its degrees of freedom are n − 2·segments.
        let df = (self.x.len() as f64 - 2.0 * segs.len() as f64).max(1.0);
        let t1 = stats::student_t_quantile(1.0 - self.t.alpha, df);
        // The search put the last change where the end looks most unlike what came before, so
        // a rising end is tested at α/10, and needs 5 points and a fifth of the series.
        let t_leak = stats::student_t_quantile(1.0 - self.t.alpha / 10.0, df);
        let end_robust = stats::theil_sen(&self.x[last.start..], &self.y[last.start..]);
        if end_slope - t_leak * end_se > bound
            && n_last >= 5.max(self.x.len() / 5)
            && end_robust.is_some_and(|r| r > self.thr)
        {
            c.rate = Some(end_slope);
            let reason = format!(
                "grows {end_txt} (before that {} in {} segments)",
                self.per_x(2.0 * pace),
                segs.len() - 1
            );
            return c.decide(Verdict::Leak, reason);
        }
        // A fill, then a slower leak: the end rises on its own (above thr
        // at α/10, a third of the series, robustly) at a steady pace to the
        // last point, after a rise that did not slow down before it. A
        // curve levelling off slows down all along, so fails one of them.
        if end_slope - t_leak * end_se > self.thr
            && n_last >= 8.max(self.x.len() / 3)
            && end_robust.is_some_and(|r| r > self.thr)
            && self.keeps_pace(last.start, self.x.len())
            && !self.slows_down(0, last.start)
        {
            c.rate = Some(end_slope);
            let reason = format!(
                "grows {end_txt}, at a steady pace to the end, after a faster rise ({} before)",
                self.per_x(2.0 * pace),
            );
            return c.decide(Verdict::Leak, reason);
        }
        if end_slope + t1 * end_se < bound {
            let before = segs.len().checked_sub(2).and_then(|i| segs.get(i));
            return self.judge_stopped(c, &ev, first, (before, last), &end_txt);
        }
        let gap = (end_slope - bound).abs().max(0.25 * bound);
        let z = stats::normal_quantile(POWER);
        let m_end = n_last as f64 * ((t1 + z) * end_se / gap).powf(2.0 / 3.0);
        c.runs_needed = self.needed(last.start as f64 + m_end);
        let reason = format!(
            "grew {} before {}, but too noisy to tell whether the end still rises ({end_txt})",
            fmt_bytes(ev.up_total),
            self.at_x(last.x_start)
        );
        c.decide(Verdict::Inconclusive, reason)
    }

    /// A broken stick over points `a..b`, knot at their median x: (its
    /// fit, the slope of the whole piece's line, the one-sided t quantile
    /// at `alpha`).
    fn halves_of(&self, a: usize, b: usize, alpha: f64) -> Option<(stats::SegmentedFit, f64, f64)> {
        let (x, y) = (&self.x[a..b], &self.y[a..b]);
        let fit = halves(x, y)?;
        let line = stats::ols(x, y)?;
        Some((
            fit,
            line.slope,
            stats::student_t_quantile(1.0 - alpha, fit.df),
        ))
    }

    /// Points `a..b` keep their pace to the last: their second half's
    /// slope is above half their line's at one-sided α/10 (the half-pace
    /// rule of the straight-piece path, inside a piece the search chose).
    fn keeps_pace(&self, a: usize, b: usize) -> bool {
        self.halves_of(a, b, self.t.alpha / 10.0)
            .is_some_and(|(h, slope, t)| h.tail_slope - t * h.tail_slope_se > 0.5 * slope)
    }

    /// Points `a..b` slow down: their second half's slope is below three
    /// quarters of their first half's at one-sided α. A saturating fill
    /// does; a fill at a steady pace does not (too few points to tell: no).
    fn slows_down(&self, a: usize, b: usize) -> bool {
        self.halves_of(a, b, self.t.alpha).is_some_and(|(h, _, t)| {
            h.head_slope > 0.0 && h.tail_slope + t * h.tail_slope_se < 0.75 * h.head_slope
        })
    }

    /// Every segment's slope agrees with the overall least-squares slope (at two-sided level α,
    /// give or take a quarter of it or the threshold), and every jump is within two x steps'
    /// worth of that slope.
    fn one_line(&self, segs: &[Segment], steps: &[Step], sigma: f64) -> bool {
        let z2 = stats::normal_quantile(1.0 - self.t.alpha / 2.0);
        let small = 2.0 * self.fit.slope.abs() * self.dx;
        // Slopes within a quarter of the overall one (or the threshold) are the same slope.
        let tolerance = self.thr.max(0.25 * self.fit.slope.abs());
        steps.iter().all(|s| s.bytes.abs() <= small)
            && segs.iter().all(|s| {
                let (slope, se) = self.segment_slope(s, sigma);
                (slope - self.fit.slope).abs() <= z2 * se + tolerance
            })
    }

    /// No step up and no rising segment: stable or inconclusive by the line, never a leak or a
    /// plateau (whatever moved was a drop or too small to matter).
    fn no_growth_events(&self, c: Classification, end_txt: &str) -> Classification {
        let c = self.not_significant(c, false);
        if c.verdict == Verdict::Stable {
            let reason = format!("no step or rise that matters; {end_txt}");
            return c.decide(Verdict::Stable, reason);
        }
        c
    }

    /// The end does not rise: a plateau, a one-off step, steps that keep coming (a leak), or too
    /// early to tell.
    fn judge_stopped(
        &self,
        mut c: Classification,
        ev: &Events,
        first: &Segment,
        (before, last): (Option<&Segment>, &Segment),
        end_txt: &str,
    ) -> Classification {
        let n = self.x.len();
        // Where the growth ended: with a step into the end, at the end's
        // first point; with a ramp that ran into it, where their lines
        // meet (the ramp's last point or the end's first).
        let (stop_x, stop_level) = match before {
            Some(b) if !ev.up_x.contains(&last.x_start) && !ramp_met_at_end(b, last) => {
                (b.x_end, b.level_end)
            }
            _ => (last.x_start, last.level_start),
        };
        let span = (stop_x - first.x_start).max(f64::MIN_POSITIVE);
        let rise = stop_level - first.level_start;
        let end_level = 0.5 * (last.level_start + last.level_end);
        let up: f64 = ev
            .steps
            .iter()
            .filter(|s| s.bytes > 0.0)
            .map(|s| s.bytes)
            .sum();
        let first_mean = stats::mean(&self.y[first.start..first.end]).unwrap_or(first.level_start);
        let net = end_level - first_mean;
        if ev.up_x.len() == 1 && ev.ramps == 0 && (net < 0.5 * up || net <= self.thr * self.dx) {
            // The one step up climbs back from a dip (an allocator giving
            // pages back, then taking them again), or leaves the level
            // less than one x step's worth of the threshold higher: no
            // rise that matters, so the line judges it, as when nothing
            // moved.
            let c = self.not_significant(c, false);
            if c.verdict == Verdict::Stable {
                let what = if net < 0.5 * up {
                    "a dip and its recovery"
                } else {
                    "a step too small to matter"
                };
                let reason = format!(
                    "{what} ({} up at {}, net {}); {end_txt}",
                    fmt_signed(up),
                    self.at_x(ev.up_x[0]),
                    fmt_signed(net)
                );
                return c.decide(Verdict::Stable, reason);
            }
            return c;
        }
        if ev.up_x.len() == 1 && ev.ramps == 0 {
            c.rate = None;
            c.plateau = Some(PlateauInfo {
                fill_rate: None,
                stop_x: ev.up_x[0],
                level: end_level,
            });
            let size = ev
                .steps
                .iter()
                .filter(|s| s.bytes > 0.0)
                .map(|s| s.bytes)
                .sum::<f64>();
            let reason = format!(
                "one-off step of {} at {}, not a rate; {end_txt}",
                fmt_signed(size),
                self.at_x(ev.up_x[0])
            );
            return c.decide(Verdict::Plateau, reason);
        }
        if rise <= self.thr * span {
            let reason = format!("changes add up to {} only; {end_txt}", fmt_signed(rise));
            return c.decide(Verdict::Stable, reason);
        }
        let rate = rise / span;
        // Expected spacing of steps at the average rate, and the end's length (0 and a plateau
        // when the growth was all ramps: the end slope's test already said it stopped).
        let spacing = ev.quantum / rate;
        let end_len = self.x[n - 1] - last.x_start + self.dx;
        if ev.up_x.len() >= 3 && self.steady(ev, first.x_start, end_len) {
            c.rate = Some(self.fit.slope);
            let k = (ev.up_x[ev.up_x.len() - 1] - ev.up_x[0]) / (ev.up_x.len() - 1) as f64;
            let reason = format!(
                "rises in steps that keep coming: {} steps, one every {k:.1} x on average, {} on average",
                ev.up_x.len(),
                self.per_x(self.fit.slope)
            );
            return c.decide(Verdict::Leak, reason);
        }
        let stop_len = spacing * (1.0 / STOP_P).ln();
        if end_len >= stop_len {
            c.rate = Some(rate);
            c.plateau = Some(PlateauInfo {
                fill_rate: Some(rate),
                stop_x,
                level: end_level,
            });
            let reason = format!(
                "grew {} on average until {}, then {end_txt}",
                self.per_x(rate),
                self.at_x(stop_x)
            );
            return c.decide(Verdict::Plateau, reason);
        }
        c.runs_needed = self.needed(n as f64 + (stop_len - end_len) / self.dx);
        let reason = format!(
            "grew {} in {} steps and rises; the last at {}, too recent to tell whether they stopped",
            fmt_bytes(ev.up_total),
            ev.up_x.len() + ev.ramps,
            self.at_x(last.x_start)
        );
        c.decide(Verdict::Inconclusive, reason)
    }

    /// Steps at a steady rate: no gap between upward steps (nor before the first, nor after the
    /// last until the end) longer than twice their mean spacing, and the whole series rises
    /// significantly (Mann–Kendall, CI) with a robust slope above the threshold.
    fn steady(&self, ev: &Events, x0: f64, end_len: f64) -> bool {
        let k = ev.up_x.len();
        let mean_gap = (ev.up_x[k - 1] - ev.up_x[0]) / (k - 1) as f64;
        let max_gap = ev
            .up_x
            .windows(2)
            .map(|w| w[1] - w[0])
            .fold(ev.up_x[0] - x0, f64::max);
        let rising = self.mk.s > 0.0 && self.mk.p_two_sided < self.t.alpha && self.ci.0 > 0.0;
        rising
            && self.robust.is_some_and(|r| r > self.thr)
            && max_gap <= 2.0 * mean_gap
            && end_len <= 2.0 * mean_gap
    }
}

/// The saw-tooth path.
impl Ctx<'_> {
    /// Judges the troughs (window minima, `Envelope`) with the straight-piece tests of a short
    /// series: a leak when the minima rise by Mann–Kendall at α/10 and by least squares at
    /// one-sided level α, with the slope and the Theil–Sen slope above the threshold; stable
    /// when the slope's 95% upper bound is within the threshold; otherwise inconclusive. Too few
    /// windows (teeth slower than the series allows) → inconclusive, never a leak.
    ///
    /// Why Mann–Kendall at α/10: the minima are ≈ 12 points whose errors are skewed (the
    /// distance from a window's lowest sample to the floor is roughly exponential), where the t
    /// test's tails are too thin and the tests agree more often than on long series; a
    /// rank test is exact for independent minima whatever their distribution, and α/10 keeps
    /// the false-leak rate under the 0.1% budget by construction.
    fn judge_troughs(&self, mut c: Classification, env: &Envelope) -> Classification {
        c.decided_by = DecidedBy::Troughs;
        c.end_start_x = self.x.first().copied();
        let mean_txt = self.per_x(self.fit.slope);
        let teeth = fmt_bytes(2.0 * env.mean_height);
        let (Some(fit), Some(mk), Some(se), Some((_, hi))) = (
            env.fit,
            env.trend,
            env.fit.and_then(|f| f.slope_se),
            env.fit.and_then(|f| f.slope_ci95),
        ) else {
            return self.few_teeth(c, env);
        };
        if env.windows < envelope::MIN_WINDOWS {
            return self.few_teeth(c, env);
        }
        c.rate = Some(fit.slope);
        c.end_slope = Some(fit.slope);
        let df = (env.windows as f64 - 2.0).max(1.0);
        let t1 = stats::student_t_quantile(1.0 - self.t.alpha, df);
        let troughs = format!(
            "troughs (the lowest sample of each of {} windows) {}, {}; teeth ≈ {teeth} high; mean {mean_txt}",
            env.windows,
            self.per_x(fit.slope),
            fmt_p(mk.p_two_sided)
        );
        let robust = env.robust_slope.unwrap_or(f64::NAN);
        if mk.s > 0.0
            && mk.p_two_sided < self.t.alpha / 10.0
            && fit.slope - t1 * se > 0.0
            && fit.slope > self.thr
            && robust > self.thr
        {
            return self.judge_rising_floor(c, env, fit.slope, &troughs);
        }
        if hi <= self.thr {
            return c.decide(Verdict::Stable, format!("saw-tooth with flat {troughs}"));
        }
        // The minima's slope error falls at least like n^(−3/2) (like a least-squares slope;
        // longer windows make it fall faster), so this is an upper estimate.
        let z = stats::normal_quantile(POWER);
        let t95 = stats::student_t_quantile(0.975, df);
        let m = self.raw_n as f64 * ((t95 + z) * se / self.thr).powf(2.0 / 3.0);
        c.runs_needed = self.needed(m / self.per_point);
        let reason = format!(
            "saw-tooth whose {troughs}; too noisy to rule out trough growth up to {} (threshold {})",
            self.per_x(hi),
            self.per_x(self.thr)
        );
        c.decide(Verdict::Inconclusive, reason)
    }

    /// The troughs rise: whether the floor kept rising, over the window
    /// minima. It stopped (a cache filling under churn) when their last
    /// change-point segment (3+ windows) or the second half of a broken
    /// stick with the knot at their median x rises less than half the pace
    /// before it (or thr) at one-sided α — rule 5 of the other paths, on the
    /// troughs: a plateau. A second half below half the pace, but not
    /// significantly, is too early to tell. Otherwise a leak.
    fn judge_rising_floor(
        &self,
        mut c: Classification,
        env: &Envelope,
        slope: f64,
        troughs: &str,
    ) -> Classification {
        let (x, y): (Vec<f64>, Vec<f64>) = env.points.iter().copied().unzip();
        if let Some((fill, end, stop)) = self.floor_stop(&x, &y, slope) {
            let held: Vec<f64> = env
                .points
                .iter()
                .filter(|(px, _)| *px >= stop)
                .map(|(_, py)| *py)
                .collect();
            c.rate = Some(fill);
            c.end_slope = Some(end);
            c.end_start_x = Some(stop);
            c.plateau = Some(PlateauInfo {
                fill_rate: Some(fill),
                stop_x: stop,
                level: stats::mean(&held).unwrap_or(self.level),
            });
            let reason = format!(
                "saw-tooth whose troughs rose {} until {}, then {} ({troughs})",
                self.per_x(fill),
                self.at_x(stop),
                self.per_x(end)
            );
            return c.decide(Verdict::Plateau, reason);
        }
        if let Some(h) = halves(&x, &y).filter(|h| h.tail_slope < 0.5 * slope) {
            c.end_slope = Some(h.tail_slope);
            c.end_start_x = Some(h.knot);
            let reason = format!(
                "saw-tooth whose {troughs}; only {} in the second half: too early to tell whether the floor stopped",
                self.per_x(h.tail_slope)
            );
            return c.decide(Verdict::Inconclusive, reason);
        }
        c.decide(Verdict::Leak, format!("saw-tooth whose {troughs}"))
    }

    /// Where the floor (window minima `x`, `y`) stopped rising, if it did:
    /// (rate before, slope after, x where it stopped).
    fn floor_stop(&self, x: &[f64], y: &[f64], slope: f64) -> Option<(f64, f64, f64)> {
        let n = x.len();
        let dx = (x[n - 1] - x[0]) / (n.max(2) - 1) as f64;
        // The last change-point segment, when the search finds one.
        if let Some(seg) = changepoint::segment(x, y, 0.25 * self.thr * dx)
            && let [first, .., last] = seg.segments.as_slice()
            && last.len() >= 3
        {
            let se = slope_se(&x[last.start..last.end], segment_sigma(&seg));
            let df = (n as f64 - 2.0 * seg.segments.len() as f64).max(1.0);
            // The search chose where the last segment starts: α/10.
            let t = stats::student_t_quantile(1.0 - self.t.alpha / 10.0, df);
            let pace = (last.level_start - first.level_start)
                / (last.x_start - first.x_start).max(f64::MIN_POSITIVE);
            if pace > self.thr && last.slope + t * se < (0.5 * pace).max(self.thr) {
                return Some((pace, last.slope, last.x_start));
            }
        }
        // Else the second half of a broken stick.
        let h = halves(x, y)?;
        let t = stats::student_t_quantile(1.0 - self.t.alpha, h.df);
        (h.tail_slope + t * h.tail_slope_se < (0.5 * slope).max(self.thr)).then_some((
            h.head_slope,
            h.tail_slope,
            h.knot,
        ))
    }

    /// A saw-tooth whose teeth are too slow for the series: too few windows of two teeth each.
    fn few_teeth(&self, mut c: Classification, env: &Envelope) -> Classification {
        let need = self.raw_n as f64 * envelope::MIN_WINDOWS as f64 / env.windows.max(1) as f64;
        c.runs_needed = self.needed(need / self.per_point);
        let reason = format!(
            "saw-tooth with {} drops in {} samples: too few teeth to judge the troughs (needs {} windows of two teeth)",
            env.drops,
            self.raw_n,
            envelope::MIN_WINDOWS
        );
        c.decide(Verdict::Inconclusive, reason)
    }
}

/// Bytes per unit in binary units, e.g. "+4.43 MiB/run".
fn fmt_rate(bytes: f64, unit_label: &str) -> String {
    format!("{}/{unit_label}", fmt_signed(bytes))
}

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

    const MB: f64 = 1e6;

    /// The pantsd series from the issue: 114.2, 119.2, then ≈ +4.64 MB/run to 156.3 MB at run
    /// 10, with fixed ±0.3 MB wiggles.
    fn pantsd() -> (Vec<f64>, Vec<f64>) {
        let wiggle = [0.0, 0.0, 0.3, -0.2, 0.1, -0.3, 0.25, -0.1, 0.2, 0.0];
        let x: Vec<f64> = (1..=10).map(f64::from).collect();
        let y = x
            .iter()
            .zip(wiggle)
            .map(|(&run, w)| {
                let base = if run < 2.0 {
                    114.2
                } else {
                    119.2 + (156.3 - 119.2) / 8.0 * (run - 2.0)
                };
                (base + w) * MB
            })
            .collect();
        (x, y)
    }

    #[test]
    fn pantsd_is_a_leak() {
        let (x, y) = pantsd();
        assert!((y[9] - 156.3 * MB).abs() < 1.0);
        let c = classify(&x, &y, None, &Thresholds::default());
        assert_eq!(c.verdict, Verdict::Leak, "{c:?}");
        assert!(c.warmup <= 1, "{c:?}");
        let slope = c.fit.unwrap().slope;
        assert!((4.2 * MB..=4.7 * MB).contains(&slope), "slope {slope}");
        assert!(c.reason.contains("MiB/x"), "{}", c.reason);
    }

    #[test]
    fn warmup_spike_is_trimmed() {
        // A 30 MB cache fill between runs 1 and 2, then a flat series with small wiggles.
        let y: Vec<f64> = [
            70.0, 100.0, 100.2, 99.9, 100.1, 100.0, 99.8, 100.1, 100.0, 99.9,
        ]
        .iter()
        .map(|v| v * MB)
        .collect();
        let x: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(detect_warmup(&x, &y), 1);
        let c = classify(&x, &y, None, &Thresholds::default());
        assert_eq!((c.verdict, c.warmup), (Verdict::Stable, 1), "{c:?}");
        // Forcing no warm-up: one jump then flat is no monotonic trend (Mann–Kendall p = 1).
        let c = classify(&x, &y, Some(0), &Thresholds::default());
        assert_ne!(c.verdict, Verdict::Leak, "{c:?}");
    }

    #[test]
    fn warmup_not_trimmed_on_regular_series() {
        let x: Vec<f64> = (1..=10).map(f64::from).collect();
        let line: Vec<f64> = x.iter().map(|v| 100.0 + 2.0 * v).collect();
        assert_eq!(detect_warmup(&x, &line), 0);
        assert_eq!(detect_warmup(&x, &[5.0; 10]), 0);
        assert_eq!(detect_warmup(&x[..4], &line[..4]), 0);
        assert_eq!(
            detect_warmup(&[1.0, 1.0, 2.0, 3.0, 4.0], &[1.0, 9.0, 9.0, 9.0, 9.0]),
            0
        );
    }

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
            (Verdict::Inconclusive, Some(5))
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

    #[test]
    fn noisy_flat_series_asks_for_more_runs() {
        // ±5% noise over 6 points cannot rule out 0.1%/run growth.
        let x: Vec<f64> = (1..=6).map(f64::from).collect();
        let y: Vec<f64> = [100.0, 95.0, 104.0, 97.0, 103.0, 99.0]
            .iter()
            .map(|v| v * MB)
            .collect();
        let c = classify(&x, &y, Some(0), &Thresholds::default());
        assert_eq!(c.verdict, Verdict::Inconclusive, "{c:?}");
        let need = c.runs_needed.unwrap();
        assert!(need > 6 && need <= MAX_RUNS_NEEDED, "{need}");
    }

    #[test]
    fn points_needed_matches_formula() {
        // t(0.975, 8)·1·sqrt(12/990) = 0.2539: 10 points suffice for 0.26 but not for 0.25.
        assert_eq!(points_needed(1.0, 1.0, 0.26, 0.975, 0.5), Some(10));
        assert_eq!(points_needed(1.0, 1.0, 0.25, 0.975, 0.5), Some(11));
        assert_eq!(
            points_needed(1.0, 1.0, 1e-9, 0.975, 0.5),
            Some(MAX_RUNS_NEEDED)
        );
        assert_eq!(points_needed(1.0, 1.0, 0.0, 0.975, 0.5), None);
    }

    /// Thresholds as `fit::thresholds` sets them for a run series of bytes.
    fn per_run() -> Thresholds {
        Thresholds {
            min_slope_abs: 64.0 * 1024.0,
            display_unit: "run",
            ..Thresholds::default()
        }
    }

    /// As `fit::thresholds` makes them for x = seconds.
    fn per_hour() -> Thresholds {
        Thresholds {
            min_slope_fraction: 0.001 / 3600.0,
            min_slope_abs: 64.0 * KIB / 3600.0,
            display_unit: "h",
            display_scale: 3600.0,
            ..Thresholds::default()
        }
    }

    const KIB: f64 = 1024.0;
    const MIB_: f64 = 1024.0 * 1024.0;

    fn runs(n: usize) -> Vec<f64> {
        (1..=n).map(|v| v as f64).collect()
    }

    /// Regression (gate_e2e under load): memory that grows by exactly 4 MiB every run, with one
    /// 8 KiB wobble, is one straight leak — not segments cut at the wobble.
    #[test]
    fn an_exact_leak_with_a_tiny_wobble_is_a_leak() {
        let mut y: Vec<f64> = runs(10)
            .iter()
            .map(|r| 30.0 * MIB_ + 4.0 * MIB_ * r)
            .collect();
        y[6] += 8.0 * KIB;
        let c = classify(&runs(10), &y, None, &per_run());
        assert_eq!(c.verdict, Verdict::Leak, "{c:#?}");
        assert_eq!(c.segments.len(), 1);
        assert!((c.rate.unwrap() / (4.0 * MIB_) - 1.0).abs() < 0.001);
    }

    #[test]
    fn verdicts_order_by_severity() {
        use Verdict::*;
        assert!(Stable < Plateau && Plateau < Inconclusive && Inconclusive < Leak);
        assert_eq!([Plateau, Leak, Stable].into_iter().max(), Some(Leak));
        assert_eq!([Plateau, Stable].into_iter().max(), Some(Plateau));
    }

    /// The fixture's `--leak 4MiB --plateau-after 8 --then-leak 512KiB` over
    /// 30 runs, as recorded: a leak at the end's rate, and the kink where the
    /// fill slows is no step (the lines meet at run 8).
    #[test]
    fn a_fill_then_a_slower_leak_is_a_leak_at_the_end_rate_without_a_step() {
        let y: Vec<f64> = (1..=30)
            .map(|r: i32| {
                let r = f64::from(r);
                12.2 * MIB_ + 4.0 * MIB_ * (r - 1.0).min(7.0) + 512.0 * KIB * (r - 8.0).max(0.0)
            })
            .collect();
        let c = classify(&runs(30), &y, None, &per_run());
        assert_eq!(c.verdict, Verdict::Leak, "{c:#?}");
        assert!(
            (c.rate.unwrap() / (512.0 * KIB) - 1.0).abs() < 0.001,
            "{c:?}"
        );
        assert!(c.steps.is_empty(), "{:?}", c.steps);
        assert!(c.plateau.is_none());
        // The same fill that stops instead is a plateau that stopped at run 8.
        let y: Vec<f64> = (1..=30)
            .map(|r: i32| 12.2 * MIB_ + 4.0 * MIB_ * (f64::from(r) - 1.0).min(7.0))
            .collect();
        let c = classify(&runs(30), &y, None, &per_run());
        assert_eq!(c.verdict, Verdict::Plateau, "{c:#?}");
        assert!(c.steps.is_empty(), "{:?}", c.steps);
        assert_eq!(c.plateau.map(|p| p.stop_x), Some(8.0));
    }

    /// memcached -m 64 driven past its cap (issue 10): anon KiB per run, ≈4.6 MiB/run for 14
    /// runs, then flat with eviction noise, 40 runs. Modelled on the description.
    const MEMCACHED_KIB: [f64; 40] = [
        3140.0, 7904.0, 12568.0, 17268.0, 22012.0, 26764.0, 31268.0, 35976.0, 40852.0, 45544.0,
        50336.0, 55036.0, 59528.0, 64192.0, 68596.0, 68520.0, 68440.0, 68412.0, 68640.0, 68780.0,
        68820.0, 68720.0, 68692.0, 68388.0, 68672.0, 68568.0, 68596.0, 68700.0, 68744.0, 68680.0,
        68700.0, 68448.0, 68684.0, 68372.0, 68792.0, 68636.0, 68400.0, 68396.0, 68384.0, 68464.0,
    ];

    #[test]
    fn memcached_fill_is_a_plateau_with_its_fill_rate() {
        let y: Vec<f64> = MEMCACHED_KIB.iter().map(|v| v * KIB).collect();
        let c = classify(&runs(40), &y, None, &per_run());
        assert_eq!(c.verdict, Verdict::Plateau, "{c:#?}");
        let p = c.plateau.unwrap();
        let fill = p.fill_rate.unwrap();
        assert!((fill / (4.6 * MIB_) - 1.0).abs() < 0.05, "fill {fill}");
        assert_eq!(c.rate, Some(fill));
        assert!((14.0..=16.0).contains(&p.stop_x), "{p:?}");
        assert!((p.level / (68_560.0 * KIB) - 1.0).abs() < 0.01, "{p:?}");
        // One "end" for every output: the last segment, flat.
        assert_eq!(c.end_start_x, Some(p.stop_x));
        assert!(c.end_slope.unwrap().abs() < 16.0 * KIB, "{c:?}");
        assert!(c.reason.contains("MiB/run"), "{}", c.reason);
        assert_eq!(c.decided_by, DecidedBy::Mean);
    }

    /// redis overwriting the same keys (issue 10): anon KiB per run, +4.1 MiB first fill, +8 KiB
    /// in run 3, then +2.8 KiB/run with page-sized noise; 20 runs.
    const REDIS_KIB: [f64; 20] = [
        12292.0, 16488.0, 16496.0, 16492.0, 16504.0, 16508.0, 16508.0, 16508.0, 16500.0, 16508.0,
        16508.0, 16524.0, 16512.0, 16516.0, 16516.0, 16528.0, 16528.0, 16528.0, 16536.0, 16540.0,
    ];

    #[test]
    fn redis_overwrite_is_stable_every_time() {
        let y: Vec<f64> = REDIS_KIB.iter().map(|v| v * KIB).collect();
        let x = runs(20);
        assert_eq!(detect_warmup(&x, &y), 1);
        // Any shorter or longer try trims the same first fill.
        for n in [8, 10, 15, 20] {
            assert_eq!(detect_warmup(&x[..n], &y[..n]), 1, "{n} runs");
            let c = classify(&x[..n], &y[..n], None, &per_run());
            assert_eq!((c.verdict, c.warmup), (Verdict::Stable, 1), "{n}: {c:#?}");
        }
        // A metric judged with the scope's warm-up gets the same answer.
        let c = classify(&x, &y, Some(1), &per_run());
        assert_eq!(c.verdict, Verdict::Stable);
    }

    /// A settled redis (a real recording, anon bytes after runs 0–20): the
    /// allocator gives 188 KiB back at run 2 and takes 209 KiB again at run
    /// 3, then holds. A dip and its recovery, not a step up: stable.
    #[test]
    fn a_dip_and_its_recovery_is_not_a_step() {
        let y: Vec<f64> = [
            8536064.0, 8536064.0, 8343552.0, 8503296.0, 8540160.0, 8556544.0, 8556544.0, 8556544.0,
            8556544.0, 8556544.0, 8556544.0, 8556544.0, 8556544.0, 8556544.0, 8556544.0, 8556544.0,
            8556544.0, 8556544.0, 8556544.0, 8556544.0, 8556544.0,
        ]
        .to_vec();
        let x: Vec<f64> = (0..=20).map(f64::from).collect();
        let c = classify(&x, &y, Some(0), &per_run());
        assert_eq!(c.verdict, Verdict::Stable, "{c:#?}");
    }

    /// Another settled redis (CI, anon bytes after runs 0–20): 104 KiB back
    /// at run 3, 88 KiB again at run 4, 20 KiB above where it began from run
    /// 5 on. One step whose net rise is under one run's threshold: stable.
    #[test]
    fn a_step_too_small_to_matter_is_stable() {
        let mut y = vec![8540160.0, 8540160.0, 8540160.0, 8433664.0, 8540160.0];
        y.extend([8560640.0; 16]);
        let x: Vec<f64> = (0..=20).map(f64::from).collect();
        let c = classify(&x, &y, Some(0), &per_run());
        assert_eq!(c.verdict, Verdict::Stable, "{c:#?}");
        // A net step of 200 KiB (over the 64 KiB/run threshold) is a plateau.
        let mut big = vec![8540160.0; 5];
        big.extend([8540160.0 + 200.0 * KIB; 16]);
        let c = classify(&x, &big, Some(0), &per_run());
        assert_eq!(c.verdict, Verdict::Plateau, "{c:#?}");
    }

    /// The LRU of issue 10: +2 MiB/run for 6 runs, flat 7, +2 MiB at run 14, flat to 24.
    fn lru() -> Vec<f64> {
        let wiggle = [
            3.0, -5.0, 8.0, -2.0, 6.0, -9.0, 1.0, 4.0, -6.0, 7.0, -3.0, 2.0,
        ];
        runs(24)
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let step = if r >= 14.0 { 2.0 * MIB_ } else { 0.0 };
                64.0 * MIB_ + 2.0 * MIB_ * (r - 1.0).min(6.0) + step + wiggle[i % 12] * KIB
            })
            .collect()
    }

    #[test]
    fn fill_then_a_later_step_is_a_plateau() {
        let c = classify(&runs(24), &lru(), None, &per_run());
        assert_eq!(c.verdict, Verdict::Plateau, "{c:#?}");
        let p = c.plateau.unwrap();
        assert_eq!(p.stop_x, 14.0);
        assert!(
            (p.fill_rate.unwrap() / (14.0 * MIB_ / 13.0) - 1.0).abs() < 0.03,
            "{p:?}"
        );
        assert!(
            c.steps
                .iter()
                .any(|s| s.x == 14.0 && (s.bytes / (2.0 * MIB_) - 1.0).abs() < 0.02)
        );
        assert!(c.segments.len() >= 3, "{:?}", c.segments);
    }

    #[test]
    fn steps_that_keep_coming_are_a_leak_at_their_average_rate() {
        let wiggle = [3.0, -5.0, 8.0, -2.0, 6.0, -9.0, 1.0];
        let y: Vec<f64> = runs(30)
            .iter()
            .enumerate()
            .map(|(i, &r)| 80.0 * MIB_ + MIB_ * ((r - 1.0) / 4.0).floor() + wiggle[i % 7] * KIB)
            .collect();
        let c = classify(&runs(30), &y, None, &per_run());
        assert_eq!(c.verdict, Verdict::Leak, "{c:#?}");
        let rate = c.rate.unwrap();
        assert!((rate / (0.25 * MIB_) - 1.0).abs() < 0.1, "{rate}");
    }

    #[test]
    fn one_step_is_not_a_rate() {
        let wiggle = [3.0, -5.0, 8.0, -2.0, 6.0, -9.0, 1.0];
        let y: Vec<f64> = runs(20)
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                50.0 * MIB_ + if r >= 9.0 { 3.0 * MIB_ } else { 0.0 } + wiggle[i % 7] * KIB
            })
            .collect();
        let c = classify(&runs(20), &y, None, &per_run());
        assert_eq!(c.verdict, Verdict::Plateau, "{c:#?}");
        assert_eq!(c.rate, None);
        let p = c.plateau.unwrap();
        assert_eq!((p.fill_rate, p.stop_x), (None, 9.0));
        assert!(c.reason.contains("one-off step of +3.0"), "{}", c.reason);
    }

    /// The churning daemon: allocates and frees 20–50 MiB every 0.5 s, sampled every
    /// 0.5 s ± 30% for 120 s; with and without keeping 100 KiB/s, and with one lucky last sample
    /// on a peak.
    fn churn(keep_per_s: f64) -> (Vec<f64>, Vec<f64>) {
        let mut rng = crate::fit::changepoint::tests::Rng::new(17);
        let (mut x, mut y) = (Vec::new(), Vec::new());
        let mut t = 0.0;
        for _ in 0..240 {
            t += 0.5 * (0.7 + 0.6 * rng.uniform());
            let tooth = (20.0 + 30.0 * rng.uniform()) * MIB_;
            x.push(t);
            y.push(200.0 * MIB_ + keep_per_s * t + tooth * (t / 0.5).fract());
        }
        y[239] = 200.0 * MIB_ + keep_per_s * t + 50.0 * MIB_;
        (x, y)
    }

    #[test]
    fn churn_is_judged_by_its_troughs() {
        let per_h = per_hour();
        let (x, y) = churn(0.0);
        let c = classify(&x, &y, None, &per_h);
        assert_eq!(c.decided_by, DecidedBy::Troughs, "{c:#?}");
        assert_ne!(c.verdict, Verdict::Leak, "{c:#?}");
        assert!(c.reason.contains("troughs"), "{}", c.reason);
        let (x, y) = churn(100.0 * KIB);
        let c = classify(&x, &y, None, &per_h);
        assert_eq!(
            (c.verdict, c.decided_by),
            (Verdict::Leak, DecidedBy::Troughs),
            "{c:#?}"
        );
        let rate = c.rate.unwrap();
        assert!((rate / (100.0 * KIB) - 1.0).abs() < 0.25, "{rate}");
        assert_eq!(c.end_slope, c.rate);
    }

    /// A floor that rises, then holds (a cache filling under churn): an
    /// hour at 0.5 s ± 30% under 30 MiB teeth, `keep` KiB/s kept for the
    /// first 40 minutes — a plateau with its fill rate, never a leak. (The
    /// straight line through the troughs called these leaks before.)
    #[test]
    fn a_floor_that_stops_rising_is_a_plateau() {
        let per_h = per_hour();
        for keep in [2.0, 5.0, 10.0, 20.0] {
            let mut rng = crate::fit::changepoint::tests::Rng::new(3);
            let (mut x, mut y) = (Vec::new(), Vec::new());
            let mut t = 0.0;
            for _ in 0..7200 {
                t += 0.5 * (0.7 + 0.6 * rng.uniform());
                x.push(t);
                let floor = 200.0 * MIB_ + keep * KIB * f64::min(t, 2400.0);
                y.push(floor + 30.0 * MIB_ * (t / 0.5).fract());
            }
            let c = classify(&x, &y, None, &per_h);
            assert_eq!(c.verdict, Verdict::Plateau, "{keep} KiB/s: {c:#?}");
            let p = c.plateau.unwrap();
            // Stopped at 2,400 s, give or take a window (300 s).
            assert!((2100.0..=2700.0).contains(&p.stop_x), "{keep} KiB/s: {p:?}");
            if keep <= 10.0 {
                // Small next to the teeth: the troughs decide.
                assert_eq!(c.decided_by, DecidedBy::Troughs, "{keep} KiB/s");
                let fill = p.fill_rate.unwrap() / (keep * KIB);
                assert!((fill - 1.0).abs() < 0.10, "{keep} KiB/s: fill {fill}");
            }
        }
    }

    #[test]
    fn the_reason_says_what_rejected_a_trend() {
        // When Mann–Kendall says "rises" and the least-squares CI is what rejected the trend,
        // the reason says so instead of "no significant trend".
        let x = runs(12);
        let y: Vec<f64> = [
            100.0, 95.0, 104.0, 97.0, 103.0, 99.0, 101.0, 96.0, 105.0, 98.0, 102.0, 100.0,
        ]
        .iter()
        .map(|v| v * MB)
        .collect();
        let t = per_run();
        let ctx = Ctx::new(&x, &y, &t, 0, 12).unwrap();
        let c = ctx.not_significant(Classification::new(0), true);
        assert!(
            c.reason.starts_with("the trend test says it rises (p = "),
            "{}",
            c.reason
        );
        assert!(c.reason.contains("includes 0"), "{}", c.reason);
        let c = ctx.not_significant(Classification::new(0), false);
        assert!(
            c.reason.starts_with("no significant trend (p = "),
            "{}",
            c.reason
        );
        // runs_needed comes from the power calculation, not n + 1.
        let need = points_needed(ctx.sd, 1.0, ctx.thr, 0.975, POWER).unwrap();
        assert_eq!(c.runs_needed, Some(need));
        assert!(need > 13, "{need}");
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
