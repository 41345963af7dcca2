//! The straight-piece estimator: a series with no change point, by its least-squares line.
//!
//! The end rate (the contract: `super::decide` judges it):
//! * no significant growth (neither Mann–Kendall p < α with S > 0 nor the line's 95% CI wholly
//!   above thr; or the CI includes 0, unless the points bend upwards): the line's slope and
//!   95% CI — stable when its upper end is within thr, else inconclusive;
//! * else, while the series keeps its pace — a two-segment (broken-stick) fit with the knot at
//!   the median x, whose second slope stays above half the line's at one-sided level α, and
//!   no later knot (up to 20, to the fourth point from the end) whose tail is below half the
//!   line's at that level — the line's slope and 95% CI: a straight leak's rate is best
//!   estimated from all its points;
//! * a later knot that slowed (a fill that stopped at 70% of the span, which the median's
//!   stick half-averages with the rise before it): the line, down to the lowest later tail's
//!   lower bound; not tried for steps that keep coming (`judge_line_within`'s `recurring`);
//! * else (a curve that slows down) the second half's slope, its interval's upper end at 95%
//!   and its lower end at one-sided α (the data chose this estimator over the line), reaching
//!   down to the same bound of a parabola's slope at the last point (`stats::parabola_end`):
//!   the second half averages the end with what came before;
//! * a leak that speeds up (a parabola through all points bending upwards at one-sided α):
//!   the slope at the last point of that parabola or of one through the second half,
//!   whichever is higher (`RateFrom::CurveEnd`), its interval from the line's lower end up to
//!   their 95% upper ends: the line averages the end with the slower start. Not for steps
//!   that keep coming (`stepped`): a large step that came late bends the parabola too, so
//!   the line stays the rate and only its interval reaches up to the parabolas'. Nor for a
//!   bend not significant at α/10 (`CURVE_END_ALPHA`): one straight leak in a hundred bends at
//!   α by chance, and its parabolas' end, the higher of two noisy slopes, then reads it far
//!   too high (docs/accuracy.md#curves-that-speed-up); there too the line is the rate and the
//!   interval reaches up.
//!
//! Shape knowledge that would put the end lower widens the interval down, never vetoes: a
//! single step that fits as well as the line (by 8σ², `best_step`: a step the change-point
//! search could not resolve) means no rate at all (down to 0); a Theil–Sen slope below the
//! least-squares one, down to it (one spike cannot carry a leak). A last point far below the
//! trend is set aside before any estimator (`Ctx::judge_with_last_drop`).
//!
//! Why half the pace: for a straight leak the second half's slope equals the overall slope,
//! for a levelled-off series it is ≈ 0, and for a saturating curve `1 − e^(−x/τ)` that is 95%
//! of the way to its asymptote at the last point it is 0.24–0.29 of the overall slope; halfway
//! between is 1/2, tested one-sided at α. It grew (a plateau when the end is within thr) when
//! the whole line's 95% CI lies above thr.

use super::power::{POWER, points_needed};
use super::reason::{LineRead, Reading, Trend};
use super::{Classification, Ctx, EndRate, PlateauInfo, RateFrom, Verdict, Widening};
use crate::fit::stats;

/// The fraction of α at which a parabola must bend upwards for its slope at the last point to
/// be the end's rate (`Ctx::speeds_up`).
const CURVE_END_ALPHA: f64 = 0.1;

/// What a rising line's reason names (`Ctx::line_reason`).
struct LineReading<'s> {
    end: EndRate,
    /// The broken stick at the median `knot`.
    seg: &'s stats::SegmentedFit,
    knot: f64,
    kept_pace: bool,
    /// The one step that fits the points as well as the line.
    one_step: Option<StepFit>,
    /// The robust slope, where it does not carry the rate.
    weak_robust: Option<f64>,
}

/// Whether a rising line kept its pace to the end (`Ctx::line_end`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pace {
    /// The second half keeps at least half the line's pace, and no later knot slowed.
    Kept,
    /// A knot later than the median slowed.
    StoppedLater,
    /// The second half is below half the line's pace: a curve that slows down.
    Slowed,
}

/// The straight-piece estimator.
impl Ctx<'_> {
    /// The least-squares line's slope and 95% CI.
    pub(super) fn line_rate(&self) -> EndRate {
        let own = self.fit.slope_ci95.unwrap_or(self.ci);
        EndRate::new(RateFrom::Line, self.fit.slope, own)
            .lower_to(Widening::RandomWalk, self.ci.0)
            .upper_to(Widening::RandomWalk, self.ci.1)
    }

    pub(super) fn judge_line(&self, c: Classification) -> Classification {
        self.judge_line_within(c, None, false, false)
    }

    /// The line, its interval reaching to `hull` where another estimate of the same end
    /// holds it (the end segment of rises that may be a warm-up before a slower leak).
    /// `recurring`: the change-point search saw rises that keep coming, so a flat end is the
    /// wait for the next one, not a stop (no later knot is tried); `stepped`: steps among
    /// them, so a parabola bending upwards is no curve end (a step came late).
    pub(super) fn judge_line_within(
        &self,
        mut c: Classification,
        hull: Option<(f64, f64)>,
        recurring: bool,
        stepped: bool,
    ) -> Classification {
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
        let step = self.best_step();
        // The line must beat the best single step by 8σ² (a step also chooses where it is);
        // else one step (no rate at all) is as good an account of the points.
        let line_rss = self.sd * self.sd * (n as f64 - 2.0);
        let step_wins = step.is_some_and(|s| s.rss <= line_rss + 8.0 * self.sd * self.sd);
        // A leak that speeds up: a parabola through all points bending upwards at one-sided
        // α. It lags a curve steeper than x², so the end is read from a parabola through the
        // second half as well (when that has five points), the higher of the two.
        let para = stats::parabola_end(self.x, self.y);
        let speeds = self.speeds_up(para, knot);
        // A curve that bends upwards rises even when its residuals' autocorrelation widens
        // the line's interval past 0.
        if !(rising && (self.ci.0 > 0.0 || speeds.is_some())) {
            let lower = step_wins.then_some((Widening::OneStep, 0.0));
            return self.not_significant(c, rising, lower);
        }
        let grew = self.ci.0 > self.thr;
        let Some(seg) = seg else {
            let end = self.line_rate();
            let slope = self.slope();
            return c.conclude(end, self.thr, false, Reading::RisingLine { slope });
        };
        let (mut end, pace) = self.line_end(&seg, knot, para, speeds, (recurring, stepped));
        if let Some((lo, hi)) = hull {
            end = end
                .lower_to(Widening::Staircase, lo)
                .upper_to(Widening::Staircase, hi);
        }
        if step_wins {
            end = end.lower_to(Widening::OneStep, 0.0);
        }
        // NaN (no robust slope) counts as no support.
        let weak_robust =
            (!self.robust.is_some_and(|r| r > self.thr)).then(|| self.robust.unwrap_or(0.0));
        if let Some(robust) = weak_robust {
            end = end.lower_to(Widening::RobustSlope, robust);
        }
        let reading = LineReading {
            end,
            seg: &seg,
            knot,
            kept_pace: pace == Pace::Kept,
            one_step: step.filter(|_| step_wins),
            weak_robust,
        };
        let read = self.line_read(&reading);
        let c = c.conclude(end, self.thr, grew, Reading::Line(read));
        self.finish_line(c, &seg, knot, (n, 0))
    }

    /// What a rising line's reading says.
    fn line_read(&self, r: &LineReading) -> LineRead {
        LineRead {
            slope: self.slope(),
            p: self.mk.p_two_sided,
            head: r.seg.head_slope,
            tail: r.seg.tail_slope,
            knot: r.knot,
            end: r.end.rate,
            end_low: r.end.ci95.0,
            kept_pace: r.kept_pace,
            curve_end: r.end.from == RateFrom::CurveEnd,
            one_step: r.one_step.map(|s| (s.jump, s.x)),
            weak_robust: r.weak_robust,
        }
    }

    /// A leak that speeds up: a parabola through all points bending upwards at one-sided α
    /// (for a random walk, only when its increments rise too). It lags a curve steeper than
    /// x², so the end is also read from a parabola through the points after `knot`: the
    /// higher slope at the last point and the higher 95% upper end of the two. The slope is
    /// the end's rate only where the bend is significant at α/10 (`CURVE_END_ALPHA`): `None`
    /// for a weaker bend, whose interval still reaches up to the upper end.
    fn speeds_up(&self, para: Option<stats::ParabolaEnd>, knot: f64) -> Option<(Option<f64>, f64)> {
        let p = para.filter(|p| {
            p.bends_up(self.t.alpha) && (!self.t.cumulative_errors || self.increments_rise())
        })?;
        let half = self.x.partition_point(|&v| v <= knot);
        let (slope, upper) = match stats::parabola_end(&self.x[half..], &self.y[half..]) {
            Some(h) => (
                h.slope.max(p.slope),
                h.slope_upper95().max(p.slope_upper95()),
            ),
            None => (p.slope, p.slope_upper95()),
        };
        let strong = p.bends_up(self.t.alpha * CURVE_END_ALPHA);
        Some((strong.then_some(slope), upper))
    }

    /// The end rate of a line that rises (module docs): the line while it keeps its pace,
    /// down to a later stop's tail; the second half of a curve that slows down; a curve's end
    /// when it speeds up; and whether it kept its pace. `speeds`: `speeds_up`'s reading;
    /// `(recurring, stepped)` as for `judge_line_within`.
    fn line_end(
        &self,
        seg: &stats::SegmentedFit,
        knot: f64,
        para: Option<stats::ParabolaEnd>,
        speeds: Option<(Option<f64>, f64)>,
        (recurring, stepped): (bool, bool),
    ) -> (EndRate, Pace) {
        let t_tail = stats::student_t_quantile(1.0 - self.t.alpha, seg.df);
        let t95 = stats::student_t_quantile(0.975, seg.df);
        // The second half is chosen when the data say the line does not keep its pace, so
        // its lower bound is taken at one-sided α, as that test was.
        let tail = EndRate::new(
            RateFrom::SecondHalf,
            seg.tail_slope,
            (
                seg.tail_slope - t_tail * seg.tail_slope_se,
                seg.tail_slope + t95 * seg.tail_slope_se,
            ),
        );
        let keeps_pace = seg.tail_slope - t_tail * seg.tail_slope_se > self.fit.slope / 2.0;
        // A stop later than the median: a knot whose tail is below half the pace at one-sided
        // α. Where it stopped is not known (nor whether the steps of a staircase go on), so
        // the lowest of the later tails' lower bounds is the interval's.
        let later = (!recurring)
            .then(|| self.later_knots(knot, t_tail))
            .flatten();
        let stopped_later = later.filter(|&(slowed, _)| slowed).map(|(_, lo)| lo);
        if !keeps_pace {
            // A curve that slows down: its second half's line averages the end with what came
            // before it; a parabola's slope at the last point does not, so its lower bound is
            // the interval's too, as is that of a tail after a later stop (a knot that slowed;
            // every later knot's would cost straight leaks the power the median's test left).
            let low = para.map(|p| {
                p.slope - stats::student_t_quantile(1.0 - self.t.alpha, p.df) * p.slope_se
            });
            let end = tail
                .lower_to(Widening::SlowsDown, low.unwrap_or(0.0))
                .lower_to(Widening::LaterStop, stopped_later.unwrap_or(f64::INFINITY));
            return (end, Pace::Slowed);
        }
        if let Some(lo) = stopped_later {
            let end = self.line_rate().lower_to(Widening::LaterStop, lo);
            return (end, Pace::StoppedLater);
        }
        let end = match speeds {
            // Steps that keep coming bend a parabola upwards wherever a large one came late:
            // the staircase's rate is its line, its interval reaching up to the parabolas'.
            Some((_, upper)) if stepped => self.line_rate().upper_to(Widening::SpeedsUp, upper),
            // A bend the test only just sees: one straight leak in a hundred bends so by
            // chance, and its parabolas' end would be the headline; the line is the rate, its
            // interval reaching up to theirs.
            Some((None, upper)) => self.line_rate().upper_to(Widening::SpeedsUp, upper),
            // The end is faster than the line's average: the parabolas' slope at the last
            // point, its interval from the line's lower end up to their upper one.
            Some((Some(rate), upper)) => EndRate::new(
                RateFrom::CurveEnd,
                rate.max(self.fit.slope),
                (self.ci.0, upper.max(self.ci.1)),
            ),
            None => self.line_rate(),
        };
        (end, Pace::Kept)
    }

    /// What a line verdict adds to the classification: a plateau's fill and level, a slowed
    /// leak's rate, an inconclusive end's rerun. `(n_end, before)`: the points the end was
    /// fitted on, and those before them.
    fn finish_line(
        &self,
        mut c: Classification,
        seg: &stats::SegmentedFit,
        knot: f64,
        (n_end, before): (usize, usize),
    ) -> Classification {
        let Some(end) = c.end_rate else { return c };
        match c.verdict {
            Verdict::Plateau => {
                let held: Vec<f64> = (0..self.x.len())
                    .filter(|&i| self.x[i] >= knot)
                    .map(|i| self.y[i])
                    .collect();
                c.plateau = Some(PlateauInfo {
                    fill_rate: Some(seg.head_slope),
                    stop_x: knot,
                    level: stats::mean(&held).unwrap_or(self.level),
                });
                c.set_rate(RateFrom::FirstHalf, seg.head_slope);
            }
            Verdict::Leak => c.set_rate(end.from, end.rate),
            Verdict::Inconclusive => c.runs_needed = self.needed_for(&end, n_end, before),
            Verdict::Stable => {}
        }
        c
    }

    /// No significant growth: the line's slope and 95% CI decide (stable when its upper end is
    /// within the threshold, else inconclusive). `rising`: Mann–Kendall alone says it rises (so
    /// the CI is what rejected it, and the reason says so rather than "no significant trend").
    /// `lower`: how low another model of the same points puts the end (one step, or falls as
    /// large as the rises), the interval's lower end reaching down to it.
    pub(super) fn not_significant(
        &self,
        c: Classification,
        rising: bool,
        lower: Option<(Widening, f64)>,
    ) -> Classification {
        let (lo, hi) = self.ci;
        let significant = self.mk.p_two_sided < self.t.alpha;
        let trend = if rising {
            Trend::RisesButCiHoldsZero { lo, hi }
        } else if self.mk.s > 0.0 && significant {
            let falls = matches!(lower, Some((Widening::Falls, _)));
            Trend::RisesButNotInSegments { falls }
        } else if self.mk.s < 0.0 && significant {
            Trend::Falls
        } else {
            Trend::None
        };
        let end = match lower {
            Some((by, lo)) => self.line_rate().lower_to(by, lo),
            None => self.line_rate(),
        };
        let reading = Reading::NoTrend {
            trend,
            slope: self.slope(),
            p: self.mk.p_two_sided,
            high: hi,
        };
        let mut c = c.conclude(end, self.thr, false, reading);
        if c.verdict == Verdict::Inconclusive {
            let m = points_needed(self.sd, self.dx, self.thr, 0.975, POWER);
            c.runs_needed = m.and_then(|m| self.needed(m as f64));
        }
        c
    }
}

impl Ctx<'_> {
    /// A random walk's curvature (`Thresholds::cumulative_errors`): its increments' own line
    /// rises at one-sided α. A walk's parabola bends wherever its errors wandered; its
    /// increments are independent, and rise only when the growth speeds up.
    pub(super) fn increments_rise(&self) -> bool {
        let (mid, d) = stats::increments(self.x, self.y);
        let Some(f) = (d.len() >= 4).then(|| stats::ols(&mid, &d)).flatten() else {
            return false;
        };
        let t = stats::student_t_quantile(1.0 - self.t.alpha, (f.n - 2) as f64);
        f.slope_se.is_some_and(|se| f.slope > t * se)
    }

    /// Stops after the median `knot`: over up to `LATER_KNOTS` knots between it and the
    /// fourth point from the end, whether any tail is below half the line's slope at the
    /// quantile `t_tail`, and the lowest tail lower bound at that quantile. The median's
    /// broken stick half-averages a stop at 70% of the span with the rise before it; a knot
    /// at the stop does not. `None` without later knots.
    fn later_knots(&self, knot: f64, t_tail: f64) -> Option<(bool, f64)> {
        let n = self.x.len();
        let first = self.x.partition_point(|&v| v <= knot);
        let last = n.checked_sub(4)?;
        if last <= first {
            return None;
        }
        let step = ((last - first) / LATER_KNOTS).max(1);
        (first..=last)
            .step_by(step)
            .filter_map(|k| stats::segmented_fit(self.x, self.y, self.x[k]))
            .map(|s| {
                let slowed = s.tail_slope + t_tail * s.tail_slope_se < self.fit.slope / 2.0;
                (slowed, s.tail_slope - t_tail * s.tail_slope_se)
            })
            .reduce(|a, b| (a.0 || b.0, a.1.min(b.1)))
    }
}

/// Later knots `later_knots` tries: enough to land near any stop (a 20th of the second
/// half), few enough to keep an hour of samples linear.
const LATER_KNOTS: usize = 20;

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
    /// the change-point search could not separate from the noise is no rate (why not 4σ²:
    /// docs/verdicts.md#one-step-or-a-line). A straight leak of total rise R over n points
    /// beats the best step by ≈ R²·n/48, so this costs only leaks below ≈ 0.7σ per run at 10
    /// runs (0.23σ at 20, 0.06σ at 50), under what the trend tests find anyway.
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

    /// The pantsd series: 114.2, 119.2, then ≈ +4.64 MB/run to 156.3 MB at run 10, with fixed
    /// ±0.3 MB wiggles.
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
        assert!(c.reason.to_string().contains("MiB/x"), "{}", c.reason);
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
        let c = ctx.not_significant(Classification::new(0, &t), true, None);
        assert!(
            c.reason
                .to_string()
                .starts_with("the trend test says it rises (p = "),
            "{}",
            c.reason
        );
        assert!(c.reason.to_string().contains("includes 0"), "{}", c.reason);
        let c = ctx.not_significant(Classification::new(0, &t), false, None);
        assert!(
            c.reason
                .to_string()
                .starts_with("no significant trend (p = "),
            "{}",
            c.reason
        );
        // runs_needed comes from the power calculation, not n + 1.
        let need = points_needed(ctx.sd, 1.0, ctx.thr, 0.975, POWER).unwrap();
        assert_eq!(c.runs_needed, Some(need));
        assert!(need > 13, "{need}");
    }

    #[test]
    fn a_rise_the_trend_test_sees_is_named_when_the_segments_overrule_it() {
        // A live heap read after each collection (a Node server, attached 60 s): flat but
        // for two small steps up, and reads above it where a collection came mid-request.
        // Mann–Kendall says it rises; the segments see it fall as much as it rises. The
        // reason names both, never "no significant trend" beside a significant p.
        let x: Vec<f64> = (0..61).map(f64::from).collect();
        let y: Vec<f64> = x
            .iter()
            .map(|&s| {
                let step = if s >= 58.0 {
                    25_000.0
                } else if s >= 25.0 {
                    4_368.0
                } else {
                    0.0
                };
                let mid_request = [2.0, 8.0, 23.0, 28.0, 29.0, 41.0, 57.0].contains(&s);
                2_897_392.0 + step + if mid_request { 200_000.0 } else { 0.0 }
            })
            .collect();
        let c = classify(&x, &y, Some(1), &per_hour());
        let reason = c.reason.to_string();
        assert_eq!(c.verdict, Verdict::Inconclusive, "{reason}");
        assert!(
            reason.starts_with("the trend test says it rises (p = "),
            "{reason}"
        );
        assert!(
            reason.contains("falls by more than half of what it rises; noise"),
            "{reason}"
        );
        assert!(!reason.contains("no significant trend"), "{reason}");
        // Without the falls, the segments seeing no rise.
        let x = runs(30);
        let y: Vec<f64> = x.iter().map(|&r| 100.0 * MB + r * KIB).collect();
        let t = per_run();
        let ctx = Ctx::new(&x, &y, &t, 0, 30).unwrap();
        let c = ctx.not_significant(
            Classification::new(0, &t),
            false,
            Some((Widening::NoRise, 0.0)),
        );
        let reason = c.reason.to_string();
        assert!(
            reason.starts_with("the trend test says it rises (p = ")
                && reason.contains("no step or segment of it rises above its noise"),
            "{reason}"
        );
    }

    /// A heap that grows 3.75 MB/s for 60 s, sampled each second, with a little noise.
    fn attached_heap(last_gives_back: f64) -> (Vec<f64>, Vec<f64>) {
        let x: Vec<f64> = (0..61).map(f64::from).collect();
        let mut y: Vec<f64> = x
            .iter()
            .map(|&s| 300.0 * MB + 3.75 * MB * s + [0.0, 0.4, -0.3, 0.2][s as usize % 4] * MB)
            .collect();
        y[60] -= last_gives_back;
        (x, y)
    }

    /// V8 collecting at the last sample gives back 25 MB of the 225 MB it kept: the growth it
    /// kept is still a leak, not an interval widened down to 0
    /// (docs/accuracy.md#a-last-point-that-gives-back).
    #[test]
    fn a_collection_at_the_last_sample_keeps_a_leak_a_leak() {
        let (x, y) = attached_heap(25.0 * MB);
        let c = classify(&x, &y, None, &per_hour());
        assert_eq!(c.verdict, Verdict::Leak, "{c:#?}");
        let rate = c.rate.unwrap();
        assert!((rate / (3.75 * MB) - 1.0).abs() < 0.1, "{rate}");
    }

    /// The same growth all given back at the last sample is not a leak: it kept nothing.
    #[test]
    fn growth_given_back_at_the_last_sample_is_no_leak() {
        let (x, y) = attached_heap(225.0 * MB);
        let c = classify(&x, &y, None, &per_hour());
        assert_ne!(c.verdict, Verdict::Leak, "{c:#?}");
        assert!(
            c.reason.to_string().contains("the last point gave back"),
            "{}",
            c.reason
        );
    }

    /// A leak that speeds up exponentially (its rate rising 20-fold over 20 runs to 400 KB/run
    /// at the last, 0.4% of 100 MB), with ±250 KB of fixed wiggles: the line averages the
    /// end with the slow start (≈ 130 KB/run) and its interval stops short of the end rate, so
    /// the interval reaches up to a parabola's end. Only the upper end moves.
    #[test]
    fn a_leak_that_speeds_up_has_its_end_rate_inside_the_interval() {
        let (n, end) = (20, 0.4 * MB);
        let tau = (n - 1) as f64 / 3.0;
        let x: Vec<f64> = (1..=n).map(|v| v as f64).collect();
        let y: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let rise = end * tau / 3.0_f64.exp() * (((r - 1.0) / tau).exp() - 1.0);
                let wiggle = ((i * 7919 % 13) as f64 - 6.0) / 6.0 * 0.25 * MB;
                100.0 * MB + rise + wiggle
            })
            .collect();
        let c = classify(&x, &y, None, &Thresholds::default());
        let e = c.end_rate.unwrap();
        assert!(e.ci95.0 <= end && end <= e.ci95.1, "{c:#?}");
        assert!(
            e.ci95.0 < 0.2 * MB,
            "the lower end stays the line's: {c:#?}"
        );
    }

    /// A warm-up the trim did not take (+8 MiB over about three runs, a rise that goes on)
    /// before a leak of 256 KiB/run, 50 runs under ±1 MiB: the line through it all says
    /// ≈ +300 KiB/run and its interval lies above the leak; the first points lie far below
    /// the line, so the interval reaches down to the line without them.
    #[test]
    fn a_warm_up_the_trim_missed_does_not_hold_the_interval_above_the_leak() {
        let (n, leak) = (50, 256.0 * 1024.0);
        let x: Vec<f64> = (1..=n).map(f64::from).collect();
        // Noise of sd 1 MiB: a sum of three uniforms from a fixed xorshift stream.
        let mut state = 677_541_u64;
        let mut uniform = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        let y: Vec<f64> = x
            .iter()
            .map(|&r| {
                let warm = 8.0 * MIB_ * (1.0 - (1.0 - r).exp());
                let noise = (uniform() + uniform() + uniform()) * 2.0 * MIB_;
                100.0 * MB + warm + leak * (r - 1.0) + noise
            })
            .collect();
        let c = classify(&x, &y, None, &per_run());
        let e = c.end_rate.unwrap();
        assert_eq!((c.warmup, e.from), (0, RateFrom::Line), "{c:#?}");
        assert!(c.fit.unwrap().slope > 1.1 * leak, "{c:#?}");
        assert!(e.ci95.0 <= leak && leak <= e.ci95.1, "{c:#?}");
        assert_eq!(c.verdict, Verdict::Leak, "{c:#?}");
    }

    /// An exponential leak over 10 runs (its rate rising 20-fold to 400 KB/run at the last)
    /// under noise as large as its whole rise: under ±1 MiB its line may fall, under ±256 KiB
    /// it rises at a third of the end rate; either way the interval reaches up to a parabola's
    /// end (all ten points when the line falls, the last six when it rises) and holds the end
    /// rate (docs/accuracy.md#curves-that-speed-up).
    #[test]
    fn a_noisy_leak_that_speeds_up_over_ten_runs_has_its_end_inside_the_interval() {
        for (state, sd, line_falls) in [(265_753, MIB_, true), (257_834, 0.25 * MIB_, false)] {
            let (n, end) = (10, 0.4 * MB);
            let tau = (n - 1) as f64 / 3.0;
            let mut state: u64 = state;
            let mut uniform = || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
            };
            let x: Vec<f64> = (1..=n).map(f64::from).collect();
            let y: Vec<f64> = x
                .iter()
                .map(|&r| {
                    let rise = end * tau / 3.0_f64.exp() * (((r - 1.0) / tau).exp() - 1.0);
                    let noise = (uniform() + uniform() + uniform()) * 2.0 * sd;
                    100.0 * MB + rise + noise
                })
                .collect();
            let c = classify(&x, &y, None, &Thresholds::default());
            let e = c.end_rate.unwrap();
            assert_eq!(c.fit.unwrap().slope <= 0.0, line_falls, "{c:#?}");
            assert_eq!(c.verdict, Verdict::Inconclusive, "{c:#?}");
            assert!(e.ci95.0 <= end && end <= e.ci95.1, "{c:#?}");
        }
    }

    /// A straight leak of 2 MiB/run under noise of sd 1.5 MiB (a Go heap read from its
    /// collector's goal, 20 runs) whose parabola bends upwards at one-sided α by chance, as
    /// one straight leak in a hundred does: the line stays its rate, and the interval still
    /// reaches up to the parabolas' end. The x² leak of the next test bends at α/10 and keeps its curve's end.
    #[test]
    fn a_straight_leak_that_bends_by_chance_keeps_the_line_as_its_rate() {
        let mut state: u64 = 364 * 7919 + 13;
        let mut uniform = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        let x = runs(20);
        let y: Vec<f64> = x
            .iter()
            .map(|&r| {
                let noise = (uniform() + uniform() + uniform()) * 2.0 * 1.5 * MIB_;
                30.0 * MIB_ + 2.0 * MIB_ * (r - 1.0) + noise
            })
            .collect();
        let para = stats::parabola_end(&x, &y).unwrap();
        assert!(para.bends_up(0.01) && para.slope > 2.4 * MIB_, "{para:?}");
        let c = classify(&x, &y, None, &per_run());
        let e = c.end_rate.unwrap();
        assert_eq!(
            (c.verdict, e.from),
            (Verdict::Leak, RateFrom::Line),
            "{c:#?}"
        );
        assert!(
            (c.rate.unwrap() / (2.0 * MIB_) - 1.0).abs() < 0.05,
            "{c:#?}"
        );
        assert!(e.widened_by.contains(Widening::SpeedsUp), "{c:#?}");
        assert!(e.ci95.1 > para.slope, "{c:#?}");
    }

    /// A leak whose rate rises (x², 20 runs): its headline is the end's rate, and the reason
    /// names that rate, not only the line's average (a native site read "grows +4.17 MiB/run
    /// … still +4.62 MiB/run in the second half" under a headline of +4.92 MiB/run).
    #[test]
    fn a_leak_that_speeds_up_says_its_end_rate() {
        let x: Vec<f64> = (1..=20).map(f64::from).collect();
        let y: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let wiggle = ((i * 7919 % 13) as f64 - 6.0) / 6.0 * 0.05 * MB;
                100.0 * MB + 0.02 * MB * (r - 1.0).powi(2) + wiggle
            })
            .collect();
        let c = classify(&x, &y, None, &Thresholds::default());
        let e = c.end_rate.unwrap();
        assert_eq!(
            (c.verdict, e.from),
            (Verdict::Leak, RateFrom::CurveEnd),
            "{c:#?}"
        );
        assert!(
            c.reason.to_string().contains(", and speeds up: +")
                && c.reason.to_string().ends_with(" at the end"),
            "{c:#?}"
        );
    }

    /// A worker's saw-tooth over 13 runs (reports/examples/leaky-pool): no trend, and a
    /// parabola through its end reaches far above the line; the reason names where the
    /// interval ends, not only the line's "noise allows growth up to".
    #[test]
    fn an_inconclusive_reason_names_the_end_a_curve_may_reach() {
        let x: Vec<f64> = (0..13).map(f64::from).collect();
        let y: Vec<f64> = [
            18.3, 20.3, 22.3, 24.3, 26.3, 18.4, 20.4, 22.4, 24.4, 26.4, 18.4, 20.4, 22.4,
        ]
        .iter()
        .map(|v| v * MB)
        .collect();
        let c = classify(&x, &y, None, &Thresholds::default());
        assert_eq!(c.verdict, Verdict::Inconclusive, "{c:#?}");
        let e = c.end_rate.unwrap();
        assert!(e.ci95.1 > 2.0 * MB, "{c:#?}");
        assert!(
            c.reason
                .to_string()
                .contains("if it speeds up, its end may reach"),
            "{c:#?}"
        );
    }
}
