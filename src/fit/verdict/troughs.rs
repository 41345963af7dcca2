//! The trough path: a saw-tooth judged by its lower envelope (`envelope`).
//!
//! Rules of the trough path (a saw-tooth: `Envelope::sharpness` < `SAWTOOTH_SHARPNESS` and at
//! least one drop per window, `envelope::MIN_WINDOWS` windows at least — collections seen): see
//! `judge_troughs` — Mann–Kendall at α/10 on the window minima plus a one-sided t test at α,
//! slope and Theil–Sen above thr → the floor rises: a plateau if it stopped (the minima's
//! last change-point segment, or the second half of a broken stick, below half the pace
//! before it at α), inconclusive if its second half rose less than half the pace, else a
//! leak; 95% upper bound within thr → stable; fewer than `envelope::MIN_WINDOWS` windows of
//! two teeth → inconclusive.

use super::power::POWER;
use super::{
    Classification, Ctx, DecidedBy, PlateauInfo, RateFrom, Verdict, fmt_p, halves, segment_sigma,
    slope_se,
};
use crate::fit::changepoint;
use crate::fit::envelope::{self, Envelope};
use crate::fit::stats;

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
    pub(super) fn judge_troughs(&self, mut c: Classification, env: &Envelope) -> Classification {
        c.decided_by = DecidedBy::Troughs;
        c.end_start_x = self.x.first().copied();
        let mean_txt = self.per_x(self.fit.slope);
        let teeth = self.amount(2.0 * env.mean_height);
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
        c.set_rate(RateFrom::Troughs, fit.slope);
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
            c.set_rate(RateFrom::TroughFill, fill);
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

#[cfg(test)]
mod tests {
    use crate::fit::verdict::tests::*;
    use crate::fit::verdict::*;

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
        assert_eq!(c.rate_from, Some(RateFrom::Troughs));
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
                assert_eq!(c.rate_from, Some(RateFrom::TroughFill), "{keep} KiB/s");
                let fill = p.fill_rate.unwrap() / (keep * KIB);
                assert!((fill - 1.0).abs() < 0.10, "{keep} KiB/s: fill {fill}");
            }
        }
    }
}
