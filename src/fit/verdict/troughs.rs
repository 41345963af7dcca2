//! The trough estimator: a saw-tooth judged by its lower envelope (`envelope`).
//!
//! A saw-tooth is only a saw-tooth when collections were seen: `Envelope::sharpness` <
//! `SAWTOOTH_SHARPNESS` and at least one drop per window, `envelope::MIN_WINDOWS` windows at
//! least. Growth of the teeth is no leak; growth of the floor (each window's lowest sample)
//! is. The end rate (the contract: `super::decide` judges it):
//! * the floor's least-squares line and its 95% CI — its lower end no higher than 0 unless
//!   Mann–Kendall rejects no trend at α/10 and the t test at one-sided α (the minima are ≈ 12
//!   points whose errors are skewed: the distance from a window's lowest sample to the floor
//!   is roughly exponential, where the t test's tails are too thin; a rank test is exact for
//!   independent minima whatever their distribution, and α/10 keeps false leaks under the
//!   0.1% budget), and no higher than the floor's Theil–Sen slope;
//! * when the floor rose and then slowed — the minima's last change-point segment (3+
//!   windows), or the second half of a broken stick at their median x, below half the pace
//!   before it at one-sided α, or a second half below half the pace at all — that end's own
//!   line and 95% CI, through the minima of the shortest windows of two teeth from there
//!   (`Envelope::floor_from`; a dozen windows leave too few to the end): a plateau when it is
//!   within thr (a cache filling under churn);
//! * too few windows of two teeth (teeth slower than the series allows): the series' own
//!   line with its CI widened for its residuals' autocorrelation (`stats::ols_ar1_ci95`).

use super::power::POWER;
use super::reason::{Reading, TroughRead};
use super::{
    Classification, Ctx, DecidedBy, EndRate, PlateauInfo, RateFrom, Verdict, Widening, halves,
    segment_sigma, slope_se,
};
use crate::fit::changepoint;
use crate::fit::envelope::{self, Envelope};
use crate::fit::stats;

/// Where a rising floor ended: its fill rate, the end's estimate, and where the end starts.
struct FloorEnd {
    fill: f64,
    end: EndRate,
    stop_x: f64,
}

/// The saw-tooth estimator.
impl Ctx<'_> {
    pub(super) fn judge_troughs(&self, mut c: Classification, env: &Envelope) -> Classification {
        c.decided_by = DecidedBy::Troughs;
        c.end_start_x = self.x.first().copied();
        let (Some(fit), Some(mk), Some(se), Some(ci)) = (
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
        let mut floor = EndRate::new(RateFrom::Troughs, fit.slope, ci);
        let ranks_rise =
            mk.s > 0.0 && mk.p_two_sided < self.t.alpha / 10.0 && fit.slope - t1 * se > 0.0;
        if !ranks_rise {
            floor = floor.lower_to(Widening::RanksFlat, 0.0);
        }
        let robust = env.robust_slope.unwrap_or(0.0);
        floor = floor.lower_to(Widening::RobustSlope, robust);
        let grew = floor.ci95.0 > self.thr;
        let stopped = if grew {
            self.floor_end(env, fit.slope)
        } else {
            None
        };
        let stopped = stopped.map(|s| self.fine_end(env, s));
        let end = stopped.as_ref().map_or(floor, |s| s.end);
        let reading = Reading::Troughs(TroughRead {
            windows: env.windows,
            slope: fit.slope,
            p: mk.p_two_sided,
            teeth: 2.0 * env.mean_height,
            mean: self.fit.slope,
            end: end.rate,
            high: end.ci95.1,
            stop: stopped.as_ref().map(|s| (s.fill, s.stop_x)),
        });
        c = c.conclude(end, self.thr, grew, reading);
        if let Some(s) = stopped {
            c.end_slope = Some(s.end.rate);
            c.end_start_x = Some(s.stop_x);
            if c.verdict == Verdict::Plateau {
                let held: Vec<f64> = env
                    .points
                    .iter()
                    .filter(|(px, _)| *px >= s.stop_x)
                    .map(|(_, py)| *py)
                    .collect();
                c.set_rate(RateFrom::TroughFill, s.fill);
                c.plateau = Some(PlateauInfo {
                    fill_rate: Some(s.fill),
                    stop_x: s.stop_x,
                    level: stats::mean(&held).unwrap_or(self.level),
                });
            } else if c.verdict == Verdict::Leak {
                c.set_rate(RateFrom::TroughEnd, s.end.rate);
            }
        }
        c.runs_needed = self.troughs_needed(&c, end, (se, df));
        c
    }

    /// Where the floor slowed, the end's rate from the fine minima when there are enough of
    /// them: a dozen windows leave three or four troughs to the end, too few for its rate. As
    /// for the whole floor, skewed minima rise only by the rank test.
    fn fine_end(&self, env: &Envelope, mut s: FloorEnd) -> FloorEnd {
        if let Some((f, ci, pts)) = env
            .floor_from(s.stop_x)
            .and_then(|(f, pts)| Some((f, f.slope_ci95?, pts)))
        {
            s.end = EndRate::new(RateFrom::TroughEnd, f.slope, ci);
            let (_, py): (Vec<f64>, Vec<f64>) = pts.into_iter().unzip();
            let ranks = stats::mann_kendall(&py);
            if !ranks.is_some_and(|m| m.s > 0.0 && m.p_two_sided < self.t.alpha / 10.0) {
                s.end = s.end.lower_to(Widening::RanksFlat, 0.0);
            }
        }
        s
    }

    /// The rerun an undecided saw-tooth needs: the end's own interval over the points from
    /// where the floor slowed; else the whole floor's, from its slope's standard error `se`
    /// on `df` degrees of freedom. The minima's slope error falls at least like n^(−3/2)
    /// (like a least-squares slope; longer windows make it fall faster), so this is an upper
    /// estimate. A decided verdict keeps what it has.
    fn troughs_needed(
        &self,
        c: &Classification,
        end: EndRate,
        (se, df): (f64, f64),
    ) -> Option<usize> {
        if c.verdict != Verdict::Inconclusive {
            return c.runs_needed;
        }
        if end.from == RateFrom::TroughEnd {
            let from = c.end_start_x.unwrap_or(f64::NEG_INFINITY);
            let n_end = self.x.iter().filter(|&&v| v >= from).count();
            return self.needed_for(&end, n_end, self.x.len() - n_end);
        }
        let z = stats::normal_quantile(POWER);
        let t95 = stats::student_t_quantile(0.975, df);
        let m = self.raw_n as f64 * ((t95 + z) * se / self.thr).powf(2.0 / 3.0);
        self.needed(m / self.per_point)
    }

    /// A floor that rose (window minima of `env`, least-squares slope `slope`): where it
    /// slowed, and the end's estimate, if it did. It stopped (a cache filling under churn)
    /// when the minima's last change-point segment (3+ windows) or the second half of a broken
    /// stick with the knot at their median x rises less than half the pace before it (or thr)
    /// at one-sided α; a second half below half the pace, but not significantly, is an end
    /// of its own too, whose interval says how sure it is.
    fn floor_end(&self, env: &Envelope, slope: f64) -> Option<FloorEnd> {
        let (x, y): (Vec<f64>, Vec<f64>) = env.points.iter().copied().unzip();
        let n = x.len();
        let dx = (x[n - 1] - x[0]) / (n.max(2) - 1) as f64;
        // The last change-point segment, when the search finds one.
        if let Some(seg) = changepoint::segment(&x, &y, 0.25 * self.thr * dx)
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
                let half = stats::student_t_quantile(0.975, df) * se;
                return Some(FloorEnd {
                    fill: pace,
                    end: EndRate::new(
                        RateFrom::TroughEnd,
                        last.slope,
                        (last.slope - t * se, last.slope + half),
                    ),
                    stop_x: last.x_start,
                });
            }
        }
        // Else the second half of a broken stick.
        let h = halves(&x, &y)?;
        let half = stats::student_t_quantile(0.975, h.df) * h.tail_slope_se;
        (h.tail_slope < 0.5 * slope).then_some(FloorEnd {
            fill: h.head_slope,
            end: EndRate::new(
                RateFrom::TroughEnd,
                h.tail_slope,
                (h.tail_slope - half, h.tail_slope + half),
            ),
            stop_x: h.knot,
        })
    }

    /// A saw-tooth whose teeth are too slow for the series (too few windows of two teeth):
    /// the series' own line, its interval widened for its residuals' autocorrelation (teeth
    /// are long runs of residuals of one sign; with too little left to estimate that, an
    /// interval spanning 0 and twice the slope) and by a tooth's height over the span (the
    /// phase of the first and last teeth).
    fn few_teeth(&self, mut c: Classification, env: &Envelope) -> Classification {
        c.decided_by = DecidedBy::Mean;
        let slope = self.fit.slope;
        let ci = stats::ols_ar1_ci95(self.x, self.y).unwrap_or((
            self.ci.0.min(0.0) - slope.abs(),
            self.ci.1.max(0.0) + slope.abs(),
        ));
        // Where the first and the last tooth happened to be sampled moves the line by up to a
        // tooth over the whole span, whatever the noise says.
        let span = (self.x[self.x.len() - 1] - self.x[0]).max(f64::MIN_POSITIVE);
        let phase = 2.0 * env.mean_height / span;
        let ci = (ci.0 - phase, ci.1 + phase);
        let end = EndRate::new(RateFrom::Line, slope, ci);
        let reading = Reading::FewTeeth {
            drops: env.drops,
            samples: self.raw_n,
            min_windows: envelope::MIN_WINDOWS,
            slope: self.slope(),
            ci,
        };
        c = c.conclude(end, self.thr, false, reading);
        if c.verdict == Verdict::Inconclusive {
            let need = self.raw_n as f64 * envelope::MIN_WINDOWS as f64 / env.windows.max(1) as f64;
            c.runs_needed = self.needed(need / self.per_point);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use crate::fit::verdict::tests::*;
    use crate::fit::verdict::*;

    /// A churning daemon: allocates and frees 20–50 MiB every 0.5 s, sampled every
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
        assert!(c.reason.to_string().contains("troughs"), "{}", c.reason);
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
    /// first 40 minutes — never a leak (a straight line through the troughs
    /// calls these leaks). Twenty minutes of 30 MiB teeth pin the
    /// floor's end to ± 1.6 MiB/h, not to the 0.2 MiB/h threshold: the
    /// contract says inconclusive, with the end's interval around 0 and the
    /// attach that would decide it, rather than a plateau it cannot show.
    #[test]
    fn a_floor_that_stops_rising_is_no_leak_and_its_end_is_measured() {
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
            let end = c.end_rate.unwrap();
            assert_ne!(c.verdict, Verdict::Leak, "{keep} KiB/s: {c:#?}");
            // The end's interval holds its true rate, 0, and is far below the fill.
            assert!(
                end.ci95.0 < 0.0 && 0.0 < end.ci95.1,
                "{keep} KiB/s: {end:?}"
            );
            assert!(end.ci95.1 < 0.5 * keep * KIB, "{keep} KiB/s: {end:?}");
            if c.verdict == Verdict::Inconclusive {
                assert!(
                    c.runs_needed.is_some_and(|m| m > 7200),
                    "{keep} KiB/s: {c:#?}"
                );
            }
            if keep <= 10.0 {
                // Small next to the teeth: the troughs decide, from where the floor stopped
                // (2,400 s, give or take a window of 300 s).
                assert_eq!(c.decided_by, DecidedBy::Troughs, "{keep} KiB/s");
                assert_eq!(end.from, RateFrom::TroughEnd, "{keep} KiB/s");
                let stop = c.end_start_x.unwrap();
                assert!((2100.0..=2700.0).contains(&stop), "{keep} KiB/s: {stop}");
            }
        }
    }
}
