//! The straight-piece path: a series with no change point, judged by its least-squares line.
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

use super::power::{POWER, points_needed};
use super::{Classification, Ctx, PlateauInfo, RateFrom, Verdict, fmt_p};
use crate::fit::stats;

/// The straight-piece path: rules 2–6 of the module docs.
impl Ctx<'_> {
    pub(super) fn judge_line(&self, mut c: Classification) -> Classification {
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
            c.set_rate(RateFrom::FirstHalf, seg.head_slope);
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
                self.signed(s.jump),
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
    pub(super) fn not_significant(&self, mut c: Classification, rising: bool) -> Classification {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::verdict::tests::*;
    use crate::fit::verdict::*;

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
        assert_eq!(c.rate_from, Some(RateFrom::Line));
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
}
