//! Leak verdicts: trims warm-up, then decides leak / plateau / stable / inconclusive for one
//! memory series from the statistics in `super::stats`.
//!
//! Units: `x` in x units (run number or seconds), `y` and every level in bytes, every slope in
//! bytes per x unit, percentages are of the mean fitted level.
//!
//! The rules, in order (α = `Thresholds::alpha`, thr = practical threshold, see `classify`):
//! 1. fewer than `min_points` after warm-up → inconclusive;
//! 2. no significant growth (Mann–Kendall p ≥ α or S ≤ 0, or the OLS 95% CI includes 0) →
//!    stable if the CI's upper end is ≤ thr (or thr = 0), else inconclusive (the noise could
//!    hide a slope that matters);
//! 3. significant, but the OLS slope is ≤ thr → stable (too small to matter);
//! 4. still growing at the end → leak. "Still growing" uses a two-segment (broken-stick) fit with
//!    the knot at the median x: the second segment's slope must exceed half the overall OLS
//!    slope at one-sided level α (its lower bound `tail − t(1−α, n−3)·se` > slope/2), the last
//!    point must be no more than 3 residual sd below the overall line, and the Theil–Sen slope
//!    must also exceed thr (so a single spike cannot make a leak);
//! 5. second-segment slope below max(slope/2, thr) at one-sided level α
//!    (`tail + t(1−α, n−3)·se` < max(slope/2, thr)) → plateau;
//! 6. otherwise inconclusive (grew, but too noisy to tell whether it slowed down).
//!
//! Why rules 4–5 keep both errors rare: for a straight-line leak the second-half slope equals
//! the overall slope, for a levelled-off series it is ≈ 0, and for a saturating curve
//! `1 − e^(−x/τ)` that is 95% of the way to its asymptote at the last point it is 0.24–0.29 of
//! the overall slope. Halfway between is 1/2, and each verdict needs a one-sided α test against
//! that boundary, so turning one into the other takes a > α noise event (and far rarer when the
//! truth is not near the boundary). Testing against slope/2 rather than 0 matters: the tail of a
//! saturating curve is often *significantly* positive, just much slower. The slope/2 reference
//! is treated as exact: for equally spaced x, Var(slope/2) is ≈ 5% of Var(tail), and the two
//! estimates are positively correlated, so ignoring it changes little.

use super::stats::{self, LinearFit};
use serde::{Deserialize, Serialize};

/// What a memory series shows. Ordered by severity (`Stable` < `Plateau` <
/// `Inconclusive` < `Leak`), so the worst of several is their `max`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Significant, relevant growth that is still going at the end of the series.
    Leak,
    /// Significant growth that has levelled off.
    Plateau,
    /// No significant growth, or growth below the practical threshold.
    Stable,
    /// Too few points or too much noise to decide.
    Inconclusive,
}

impl Ord for Verdict {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.severity().cmp(&other.severity())
    }
}

impl PartialOrd for Verdict {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Verdict {
    fn severity(self) -> u8 {
        match self {
            Verdict::Stable => 0,
            Verdict::Plateau => 1,
            Verdict::Inconclusive => 2,
            Verdict::Leak => 3,
        }
    }

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

/// Verdict plus the evidence behind it.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct Classification {
    pub verdict: Verdict,
    /// Leading points (lowest x) left out as warm-up.
    pub warmup: usize,
    /// Least-squares fit over the points after warm-up.
    pub fit: Option<LinearFit>,
    /// Theil–Sen slope over the same points, bytes per x unit.
    pub robust_slope: Option<f64>,
    /// Two-sided Mann–Kendall p-value over the same points.
    pub trend_p: Option<f64>,
    /// OLS slope as a percentage of the mean fitted level, % per x unit.
    pub growth_pct_per_x: Option<f64>,
    /// Slope after the median x (second segment of the two-segment fit), bytes per x unit.
    pub tail_slope: Option<f64>,
    /// For inconclusive: estimated total number of points (warm-up included) that should decide
    /// it, assuming equal spacing and the same noise; capped at `MAX_RUNS_NEEDED`.
    pub runs_needed: Option<usize>,
    /// One short human sentence.
    pub reason: String,
}

/// Number of leading points to drop as warm-up: 0 or 1. `x` must be ascending.
///
/// Rule: take the per-x rate of each step, `(y[i+1] − y[i]) / (x[i+1] − x[i])`; the steps after
/// the first are the reference, with median `med` and noise scale
/// `s = max(1.4826·MAD, 0.25·|med|, 1e-4·mean level / median step of x)` (the floors stop a perfectly regular or
/// flat series from flagging rounding noise). The first point is warm-up when the first step
/// exceeds `med + 5·s` and the second does not: one jump, then the steady behaviour. A rise that
/// goes on is growth (a plateau's ramp, a saturating curve), not warm-up. Only upward jumps
/// count: a large early rise is what makes a cache fill look like a leak.
///
/// At most one point is trimmed (so ≥ max(4, n/2) remain): in the accuracy study, trimming up to
/// 3 turned the start of a saturating curve into "warm-up" and its rest into something
/// line-like often enough (0.4% of series at n = 10, 1% noise) to break the false-leak budget.
/// Pass an explicit warm-up to `classify` for longer ones. Returns 0 for n < 5, length
/// mismatch, non-finite values or non-increasing x.
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
    let jumps = |r: f64| r - med > K * spread;
    usize::from(jumps(rates[0]) && !jumps(rates[1]))
}

/// Classifies a memory series. `warmup`: `None` = `detect_warmup`, `Some(k)` = drop the first k
/// points (by x). Points are sorted by x first. Never panics: bad input gives `Inconclusive`.
///
/// The practical threshold is `thr = max(min_slope_abs, min_slope_fraction · |mean level|)`
/// bytes per x unit; see the module docs for the rules.
pub fn classify(x: &[f64], y: &[f64], warmup: Option<usize>, t: &Thresholds) -> Classification {
    let mut c = Classification {
        verdict: Verdict::Inconclusive,
        warmup: 0,
        fit: None,
        robust_slope: None,
        trend_p: None,
        growth_pct_per_x: None,
        tail_slope: None,
        runs_needed: None,
        reason: String::new(),
    };
    let valid_thresholds = t.alpha > 0.0
        && t.alpha < 0.5
        && t.min_slope_fraction >= 0.0
        && t.min_slope_abs >= 0.0
        && t.min_slope_fraction.is_finite()
        && t.min_slope_abs.is_finite();
    if !valid_thresholds {
        return c.decide(Verdict::Inconclusive, "invalid thresholds".into());
    }
    if x.len() != y.len() {
        return c.decide(Verdict::Inconclusive, "x and y differ in length".into());
    }
    if !x.iter().chain(y).all(|v| v.is_finite()) {
        return c.decide(
            Verdict::Inconclusive,
            "a sample is not a finite number".into(),
        );
    }

    let mut points: Vec<(f64, f64)> = x.iter().copied().zip(y.iter().copied()).collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (xs, ys): (Vec<f64>, Vec<f64>) = points.into_iter().unzip();
    let total = xs.len();
    let warm = warmup.unwrap_or_else(|| detect_warmup(&xs, &ys)).min(total);
    c.warmup = warm;
    let (x, y) = (&xs[warm..], &ys[warm..]);
    let n = x.len();

    let min_points = t.min_points.max(4);
    if n < min_points {
        c.runs_needed = Some((warm + min_points).min(MAX_RUNS_NEEDED));
        let reason = format!("only {n} points after warm-up; need at least {min_points}");
        return c.decide(Verdict::Inconclusive, reason);
    }
    let (Some(fit), Some(mk), Some(level)) =
        (stats::ols(x, y), stats::mann_kendall(y), stats::mean(y))
    else {
        return c.decide(
            Verdict::Inconclusive,
            "x does not vary or values overflow".into(),
        );
    };
    let (Some((ci_lo, ci_hi)), Some(sd)) = (fit.slope_ci95, fit.residual_sd) else {
        return c.decide(
            Verdict::Inconclusive,
            "too few points for a confidence interval".into(),
        );
    };
    c.fit = Some(fit);
    c.robust_slope = stats::theil_sen(x, y);
    c.trend_p = Some(mk.p_two_sided);
    c.growth_pct_per_x = (level != 0.0).then(|| fit.slope / level * 100.0);
    let per_x = |bytes: f64| fmt_rate(bytes * t.display_scale, t.display_unit);
    let thr = t.min_slope_abs.max(t.min_slope_fraction * level.abs());
    let mut x_sorted = x.to_vec();
    let knot = stats::median(&mut x_sorted).unwrap_or(0.0);
    let seg = stats::segmented_fit(x, y, knot);
    c.tail_slope = seg.map(|s| s.tail_slope);
    // Mean spacing of x, to turn "points needed" into a slope precision (x is sorted, n ≥ 4).
    let dx = (x[n - 1] - x[0]) / (n - 1) as f64;
    let slope_txt = format!(
        "{} ({})",
        per_x(fit.slope),
        c.growth_pct_per_x.map_or_else(
            || "n/a".into(),
            |p| { format!("{:+.2}%/{}", p * t.display_scale, t.display_unit) }
        )
    );
    let p_txt = fmt_p(mk.p_two_sided);

    // Rule 2: is there statistically significant growth at all?
    let significant = mk.s > 0.0 && mk.p_two_sided < t.alpha && ci_lo > 0.0;
    if !significant {
        if thr > 0.0 && ci_hi > thr {
            c.runs_needed = points_needed(sd, dx, thr, 0.975)
                .map(|m| (warm + m).max(total + 1).min(MAX_RUNS_NEEDED));
            let reason = format!(
                "no significant trend ({p_txt}), but noise allows growth up to {} (threshold {})",
                per_x(ci_hi),
                per_x(thr)
            );
            return c.decide(Verdict::Inconclusive, reason);
        }
        let reason = format!("no significant growth: slope {slope_txt}, {p_txt}");
        return c.decide(Verdict::Stable, reason);
    }

    // Rule 3: practically significant?
    if fit.slope <= thr {
        let reason = format!("grows {slope_txt}, below the threshold of {}", per_x(thr));
        return c.decide(Verdict::Stable, reason);
    }

    // Rules 4–6: is the growth still going on in the second half?
    let Some(seg) = seg else {
        return c.decide(
            Verdict::Inconclusive,
            format!("grows {slope_txt}, but the second half cannot be fitted on its own"),
        );
    };
    let t_tail = stats::student_t_quantile(1.0 - t.alpha, seg.df);
    let tail_lo = seg.tail_slope - t_tail * seg.tail_slope_se;
    let tail_hi = seg.tail_slope + t_tail * seg.tail_slope_se;
    // Half the overall slope separates "still going" from "slowed down".
    let pace = fit.slope / 2.0;
    let last_residual = y[n - 1] - (fit.intercept + fit.slope * x[n - 1]);
    let last_ok = last_residual >= -3.0 * sd;
    let tail_txt = per_x(seg.tail_slope);
    // The robust slope must agree, so one spike cannot carry a leak verdict.
    let robust = c.robust_slope.unwrap_or(f64::NAN);
    let robust_ok = robust > thr;
    if tail_lo > pace && last_ok && robust_ok {
        let reason = format!("grows {slope_txt}, {p_txt}, still {tail_txt} in the second half");
        return c.decide(Verdict::Leak, reason);
    }
    if tail_hi < pace.max(thr) {
        let reason = format!("grew {slope_txt} but only {tail_txt} in the second half");
        return c.decide(Verdict::Plateau, reason);
    }
    let reason = if !last_ok {
        format!("grows {slope_txt}, but the last point fell well below the trend")
    } else if !robust_ok {
        format!(
            "grows {slope_txt} by least squares, but the robust slope is only {}",
            per_x(robust)
        )
    } else {
        format!(
            "grows {slope_txt}, but too noisy to tell whether it slowed ({tail_txt} in the second half)"
        )
    };
    // The tail slope's CI half-width must shrink below slope/2 to settle it either way; it
    // shrinks like n^(-3/2) for a fixed design, so scale the current one.
    let shrink = t_tail * seg.tail_slope_se / pace;
    let m = (n as f64 * shrink.powf(2.0 / 3.0)).ceil();
    if m.is_finite() {
        let m = m.min(MAX_RUNS_NEEDED as f64) as usize;
        c.runs_needed = Some((warm + m).max(total + 1).min(MAX_RUNS_NEEDED));
    }
    c.decide(Verdict::Inconclusive, reason)
}

impl Classification {
    fn decide(mut self, verdict: Verdict, reason: String) -> Classification {
        self.verdict = verdict;
        self.reason = reason;
        self
    }
}

/// Smallest number m of equally spaced points (spacing `dx` x units) for which the slope's
/// confidence half-width `t(p, m−2) · sd/dx · sqrt(12 / (m(m²−1)))` is at most `target`
/// (bytes per x unit), capped at `MAX_RUNS_NEEDED`. `None` if the inputs make no sense.
fn points_needed(sd: f64, dx: f64, target: f64, p: f64) -> Option<usize> {
    if !(sd >= 0.0 && sd.is_finite() && dx > 0.0 && target > 0.0 && p > 0.5 && p < 1.0) {
        return None;
    }
    let half_width = |m: usize| {
        let m = m as f64;
        stats::student_t_quantile(p, m - 2.0) * sd / dx * (12.0 / (m * (m * m - 1.0))).sqrt()
    };
    // t(p, m−2) > z(p) and m(m²−1) < m³, so m > cbrt(12·(z·sd/(dx·target))²): start there and
    // step up — t is close to z by then, so this takes only a few steps.
    let ratio = stats::normal_quantile(p) * sd / (dx * target);
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

/// Bytes per unit in binary units, e.g. "+4.43 MiB/run".
fn fmt_rate(bytes: f64, unit_label: &str) -> String {
    let sign = if bytes < 0.0 { "-" } else { "+" };
    let mut v = bytes.abs();
    let mut unit = "B";
    for next in ["KiB", "MiB", "GiB", "TiB"] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = next;
    }
    format!("{sign}{v:.3} {unit}/{unit_label}")
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
        assert_eq!(points_needed(1.0, 1.0, 0.26, 0.975), Some(10));
        assert_eq!(points_needed(1.0, 1.0, 0.25, 0.975), Some(11));
        assert_eq!(points_needed(1.0, 1.0, 1e-9, 0.975), Some(MAX_RUNS_NEEDED));
        assert_eq!(points_needed(1.0, 1.0, 0.0, 0.975), None);
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
