//! The segment estimator: steps, fills and ramps, cut by their change points (`changepoint`,
//! with a noise floor of a quarter of thr per x step).
//!
//! Which end rate (the contract: `super::decide` judges it):
//! * segments that are one line in all but name (every slope within a quarter of the overall
//!   one, no jump over two x steps of it), or rises that keep the whole line's pace to the end
//!   (a staircase: a GC heap or an allocator growing in chunks) → the straight-piece
//!   estimator, steps included; rises without a step that slow one after the other into an
//!   end wholly slower than the line may be a warm-up before a slower leak instead, and the
//!   interval holds the end segment's too;
//! * jumps count as steps when significant at two-sided α (≈ σ·√(4/m₁ + 4/m₂)) and over
//!   thr·Δx; segments rise or fall when beyond ±thr at one-sided α;
//! * nothing rises, or it falls as much as it rises → the line, its interval reaching down to
//!   0 — the segments say the end may be flat;
//! * else the end segment's line: the last change point's segment, merged back until it holds
//!   `max(5, n/5)` points (`end_window`), its lower bound at one-sided α/10 (the search chose
//!   where it starts) and its upper one at 95%, reaching down to its Theil–Sen slope and,
//!   when it does not keep its pace inside, to a parabola's slope at the last point. A leak
//!   when that lower bound clears the threshold (a leak that started part-way, a fill then a
//!   slower leak); when its last step came while the series was rising at no more than twice
//!   the end's pace (growth, a chunk, growth: a heap that keeps mapping chunks while it
//!   leaks), the rate is the long-run line,
//!   steps included, its interval from the end's lower bound up to the line's;
//! * otherwise what the steps say: one step up (or one that only climbs back from a dip) is
//!   not a rate, so the end segment decides (a one-off step: plateau when it holds); three or
//!   more steps with no gap over twice their mean spacing → their long-run line; no step for
//!   `ln(1/0.01)` × the expected spacing of steps at the average rate → they stopped, the end
//!   segment decides (plateau with the average fill); else too recent to tell → the
//!   staircase's line, its interval from the end's own lower bound (widened for
//!   autocorrelation) to the line's upper one.

use super::reason::{Reading, SegmentRead, Since, Undecided};
use super::{
    Classification, Ctx, EndRate, PlateauInfo, RateFrom, Step, Verdict, Widening, halves,
    segment_sigma, slope_se,
};
use crate::fit::changepoint::{self, Segment};
use crate::fit::stats;

/// When steps have stopped: no step for `ln(1/STOP_P)` expected step gaps at the average rate
/// (a steady Poisson stream of steps leaves such a gap with probability `STOP_P`).
const STOP_P: f64 = 0.01;

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

/// Where the growth ended, (x, level): with a step into the end, at the end's first point;
/// with a ramp that ran into it, where their lines meet (the ramp's last point or the end's
/// first).
fn stop_point(ev: &Events, before: Option<&Segment>, last: &Segment) -> (f64, f64) {
    match before {
        Some(b) if !ev.up_x.contains(&last.x_start) && !ramp_met_at_end(b, last) => {
            (b.x_end, b.level_end)
        }
        _ => (last.x_start, last.level_start),
    }
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

    /// The end segment's rate and its standard error: its least-squares slope, its interval
    /// at one-sided α/10 below (the search put the last change where the end looks most
    /// unlike what came before) and 95% above, widened down to a robust slope below the
    /// threshold or a parabola's end when it slows, up to one when it speeds up. `merged`:
    /// the end window holds a change the search saw.
    fn end_segment(
        &self,
        seg: &changepoint::Segmentation,
        (segs, last): (&[Segment], &Segment),
        merged: bool,
        sigma: f64,
    ) -> (EndRate, f64) {
        let (end_slope, end_se) = if merged {
            // The end window holds a change the search saw: its own residuals say how well
            // one line fits it (a step inside widens its error, as it should).
            let (x, y) = (&self.x[last.start..], &self.y[last.start..]);
            let own = stats::ols(x, y)
                .and_then(|f| f.slope_se)
                .unwrap_or(f64::INFINITY);
            (last.slope, own.max(slope_se(x, sigma)))
        } else {
            // The end's interval rests on the noise about the segments the search chose, down
            // to what matters (a quarter of the threshold per x step): the search's own floor,
            // a robust scale of first differences, counts every ramp and step as noise.
            let end_sigma = seg
                .residual_sd
                .unwrap_or(seg.noise_sd)
                .max(0.25 * self.thr * self.dx);
            self.segment_slope(last, end_sigma)
        };
        // σ is pooled over all segments, so its degrees of freedom are n − 2·segments.
        let df = (self.x.len() as f64 - 2.0 * segs.len() as f64).max(1.0);
        // The search put the last change where the end looks most unlike what came before, so
        // the end's lower bound is taken at one-sided α/10; its upper one at 95%.
        let t_low = stats::student_t_quantile(1.0 - self.t.alpha / 10.0, df);
        let t95 = stats::student_t_quantile(0.975, df);
        let mut end = EndRate::new(
            RateFrom::EndSegment,
            end_slope,
            (end_slope - t_low * end_se, end_slope + t95 * end_se),
        );
        // Shape knowledge that puts the end lower: a robust slope below the threshold (one
        // spike cannot carry it), or an end that may be slowing inside (a curve levelling
        // off: down to a parabola's slope at the last point).
        let end_robust = stats::theil_sen(&self.x[last.start..], &self.y[last.start..]);
        if !end_robust.is_some_and(|r| r > self.thr) {
            end = end.lower_to(Widening::RobustSlope, end_robust.unwrap_or(0.0));
        }
        let n = self.x.len();
        let para = stats::parabola_end(&self.x[last.start..], &self.y[last.start..]);
        if !self.keeps_pace(last.start, n) || self.slows_down(last.start, n) {
            if let Some(p) = para {
                let t = stats::student_t_quantile(1.0 - self.t.alpha, p.df);
                end = end.lower_to(Widening::SlowsDown, p.slope - t * p.slope_se);
            }
        } else if let Some(p) = para {
            // An end that speeds up (bends upwards at one-sided α): up to its parabola's
            // slope at the last point.
            if p.bends_up(self.t.alpha) {
                end = end.upper_to(Widening::SpeedsUp, p.slope_upper95());
            }
        }
        (end, end_se)
    }

    pub(super) fn judge_segments(
        &self,
        mut c: Classification,
        seg: &changepoint::Segmentation,
    ) -> Classification {
        let sigma = segment_sigma(seg);
        let (segs, merged) = self.end_window(&seg.segments);
        let segs = &segs;
        let (Some(first), Some(last)) = (segs.first(), segs.last()) else {
            return self.judge_line(c);
        };
        if segs.len() == 1 {
            return self.judge_line(c);
        }
        let (end, end_se) = self.end_segment(seg, (segs, last), merged, sigma);
        let end_slope = end.rate;
        let ev = self.events(segs, sigma);
        c.segments = segs.clone();
        c.steps = ev.steps.clone();
        c.end_slope = Some(end_slope);
        c.end_start_x = Some(last.x_start);
        let end_since = Since {
            rate: end_slope,
            x: last.x_start,
        };
        // Half the average rate before the end: what "before that" says.
        let before = (last.x_start - first.x_start).max(f64::MIN_POSITIVE);
        let pace = 0.5 * (last.level_start - first.level_start) / before;
        if self.one_line(segs, &ev.steps, sigma) {
            // Changes in name only: every piece has the overall slope and no jump exceeds two
            // x steps of it (a straight leak stays a straight leak, with its least-squares
            // slope, even when its noise is regular enough to cut).
            return self.judge_line(c);
        }
        let z1 = stats::normal_quantile(1.0 - self.t.alpha);
        // The end segment is not counted among the ramps: a leak that starts (or speeds up)
        // part-way, without a step, rises only there.
        let end_rises = end_slope - z1 * end_se > self.thr;
        if ev.up_x.is_empty() && ev.ramps == 0 && !end_rises {
            return self.no_growth_events(c, end_since);
        }
        let all_rise = ev.ramps + 1 == segs.len() && end_rises;
        if self.staircase(&ev, all_rise) {
            // Rises that keep coming — a GC heap or an allocator growing in chunks — at the
            // same long-run pace to the end: their line, steps included, is the end's rate.
            // Two rises without a step, the end's wholly slower than the line, may also be a
            // warm-up then a leak at the end's own pace: the interval holds the end's too.
            // So may more rises, each slower than the one before (an exponential approach
            // the search cut in pieces); those are still rises that keep coming, so no later
            // stop is looked for: a staircase's flat wait for its next step is not a stop.
            // Measured: docs/accuracy.md#heap-chunks-curves-held-gauges-and-warm-ups.
            // The line over a few steps reads by where in their cycle the series ends: its
            // interval holds the staircase's phase too.
            let no_step = ev.up_x.is_empty() && end.ci95.1 < self.fit.slope;
            let slowing = segs.windows(2).all(|w| w[1].slope <= w[0].slope);
            let two_rises = no_step && ev.ramps < 2;
            let warmup = two_rises || no_step && slowing;
            let hull = [warmup.then_some(end.ci95), self.last_phase_spread(&ev)]
                .into_iter()
                .flatten()
                .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
            return self.judge_line_within(c, hull, !two_rises, !ev.up_x.is_empty());
        }
        if ev.down_total > 0.5 * ev.up_total {
            let rising = self.mk.s > 0.0 && self.mk.p_two_sided < self.t.alpha && self.ci.0 > 0.0;
            if !rising {
                // Falls as much as it rises and shows no trend up: judged by the line, down
                // to no rate at all.
                return self.not_significant(c, false, Some((Widening::Falls, 0.0)));
            }
            // Rises and falls: the line, down to no rate at all (the falls may be the trend).
            let end = self.line_rate().lower_to(Widening::Falls, 0.0);
            let reading = Reading::Segments(SegmentRead::RisesAndFalls {
                down: ev.down_total,
                up: ev.up_total,
                slope: self.slope(),
            });
            return c.conclude(end, self.thr, false, reading);
        }
        if end.ci95.0 > self.thr
            && let Some(step_x) = self.chunk_between_rises(&ev, end_slope)
        {
            // A step that came while the series was rising, and a rise after it: a heap that
            // grows in chunks (V8 maps its heap so) keeps needing new ones while it leaks, so
            // the long-run line, steps included, is the end's rate. The end rises on its own
            // (its lower bound is the interval's); the interval reaches up to the line's and
            // the staircase's phase (a series ending just after a chunk reads high).
            let high = self.last_phase_spread(&ev).map_or(self.ci.1, |p| p.1);
            let staircase = EndRate::new(
                RateFrom::Staircase,
                self.fit.slope,
                (end.ci95.0, self.ci.1.max(end.ci95.1).max(high)),
            );
            let reading = Reading::Segments(SegmentRead::Chunk {
                line: self.fit.slope,
                step_at: step_x,
                end: end_since,
            });
            let mut c = c.conclude(staircase, self.thr, true, reading);
            if c.verdict == Verdict::Leak {
                c.set_rate(RateFrom::Staircase, self.fit.slope);
            }
            return c;
        }
        if end.ci95.0 > self.thr {
            c.set_rate(RateFrom::EndSegment, end_slope);
            let reading = Reading::Segments(SegmentRead::EndSegment {
                end: end_since,
                before: 2.0 * pace,
                segments: segs.len() - 1,
            });
            return c.conclude(end, self.thr, true, reading);
        }
        let before = segs.len().checked_sub(2).and_then(|i| segs.get(i));
        self.judge_stopped(c, &ev, first, (before, last), (end, end_since))
    }

    /// Growth in two or more rises (steps or ramps), or in segments that all rise, that keeps
    /// its long-run pace to the end: the whole series rises (its least-squares CI above thr,
    /// Theil–Sen above thr) and its second half's slope stays above half the whole line's at
    /// one-sided α/10, as a straight leak's does; a fill that stops, or slows down, does not.
    /// Its rate is the line, not the last piece: a chunk of heap mapped near the end makes that
    /// piece steeper than what the heap grows by over the span. A leak that starts part-way
    /// has a flat first segment, so its end segment stays its rate.
    fn staircase(&self, ev: &Events, all_rise: bool) -> bool {
        (ev.up_x.len() + ev.ramps >= 2 || all_rise)
            && self.ci.0 > self.thr
            && self.robust.is_some_and(|r| r > self.thr)
            && self.keeps_pace(0, self.x.len())
    }

    /// The segments with the end window long enough for a rate of its own: a change point
    /// found within the last `max(5, n/5)` points leaves too few after it to estimate what the
    /// end adds, so the last segment reaches back over the ones before it until it holds that
    /// many (refitted by least squares over its points). True when segments were merged.
    fn end_window(&self, segs: &[Segment]) -> (Vec<Segment>, bool) {
        let n = self.x.len();
        let need = 5.max(n / 5);
        let mut out = segs.to_vec();
        let mut merged = false;
        while out.len() >= 2 && out.last().is_some_and(|s| n - s.start < need) {
            let prev = &out[out.len() - 2];
            let (x, y) = (&self.x[prev.start..n], &self.y[prev.start..n]);
            let Some(f) = stats::ols(x, y) else { break };
            out.pop();
            let Some(prev) = out.pop() else { break };
            let x_end = self.x[n - 1];
            out.push(Segment {
                start: prev.start,
                end: n,
                x_start: prev.x_start,
                x_end,
                slope: f.slope,
                level_start: f.intercept + f.slope * prev.x_start,
                level_end: f.intercept + f.slope * x_end,
            });
            merged = true;
        }
        (out, merged)
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
    fn no_growth_events(&self, c: Classification, end: Since) -> Classification {
        // The segments show no rise: the line, down to no rate at all.
        let c = self.not_significant(c, false, Some((Widening::NoRise, 0.0)));
        if c.verdict == Verdict::Stable {
            return c.reworded(Reading::Segments(SegmentRead::NoRise { end }));
        }
        c
    }

    /// One step up that climbs back from a dip (an allocator giving pages back, then taking
    /// them again), or leaves the level less than one x step's worth of the threshold higher:
    /// no rise that matters, so the line judges it, as when nothing moved, down to the end's
    /// lower bound. `(up, at)`: the step's size and x; `net`: the end's level over the first
    /// segment's.
    fn judge_small_step(
        &self,
        c: Classification,
        (up, at): (f64, f64),
        net: f64,
        (end, since): (EndRate, Since),
    ) -> Classification {
        let c = self.not_significant(c, false, Some((Widening::NoRise, end.ci95.0)));
        if c.verdict != Verdict::Stable {
            return c;
        }
        c.reworded(Reading::Segments(SegmentRead::SmallStep {
            dip: net < 0.5 * up,
            up,
            at,
            net,
            end: since,
        }))
    }

    /// Why an end segment cannot tell whether it still rises: its own points scatter by more
    /// than one x step's worth of the threshold ("too noisy"), or they lie close to their line
    /// and are too few ("too short").
    fn why_undecided(&self, last: &Segment) -> Undecided {
        let end_sd =
            stats::ols(&self.x[last.start..], &self.y[last.start..]).and_then(|f| f.residual_sd);
        match end_sd {
            Some(sd) if sd <= self.thr * self.dx => Undecided::TooShort,
            _ => Undecided::TooNoisy,
        }
    }

    /// The end does not rise above the threshold on its own: a one-off step, steps too small
    /// to matter, steps that keep coming (their long-run rate), steps that stopped (the end's
    /// own estimate), or steps too recent to tell (spanning both).
    fn judge_stopped(
        &self,
        mut c: Classification,
        ev: &Events,
        first: &Segment,
        (before, last): (Option<&Segment>, &Segment),
        (end, since): (EndRate, Since),
    ) -> Classification {
        let n = self.x.len();
        let n_last = n - last.start;
        let (stop_x, stop_level) = stop_point(ev, before, last);
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
        let one_step = ev.up_x.len() == 1 && ev.ramps == 0;
        if one_step && (net < 0.5 * up || net <= self.thr * self.dx) {
            return self.judge_small_step(c, (up, ev.up_x[0]), net, (end, since));
        }
        let undecided = self.why_undecided(last);
        if one_step {
            // One step is not a rate: the end after it decides.
            let reading = Reading::Segments(SegmentRead::OneStep {
                size: up,
                at: ev.up_x[0],
                end: since,
                undecided,
            });
            c = c.conclude(end, self.thr, true, reading);
            if c.verdict == Verdict::Plateau {
                (c.rate, c.rate_from) = (None, None);
                c.plateau = Some(PlateauInfo {
                    fill_rate: None,
                    stop_x: ev.up_x[0],
                    level: end_level,
                });
            } else {
                c.runs_needed = self.needed_for(&end, n_last, last.start);
            }
            return c;
        }
        if rise <= self.thr * span {
            let reading = Reading::Segments(SegmentRead::SmallChanges {
                rise,
                end: since,
                undecided,
            });
            c = c.conclude(end, self.thr, false, reading);
            if c.verdict == Verdict::Inconclusive {
                c.runs_needed = self.needed_for(&end, n_last, last.start);
            }
            return c;
        }
        let rate = rise / span;
        // Expected spacing of steps at the average rate, and the end's length (0 and a plateau
        // when the growth was all ramps: the end slope's test already said it stopped).
        let spacing = ev.quantum / rate;
        let end_len = self.x[n - 1] - last.x_start + self.dx;
        if ev.up_x.len() >= 3 && self.steady(ev, first.x_start, end_len) {
            // Steps that keep coming: their long-run rate, steps included.
            let k = (ev.up_x[ev.up_x.len() - 1] - ev.up_x[0]) / (ev.up_x.len() - 1) as f64;
            let steps = ev.up_x.len();
            let mut line = self.line_rate();
            if let Some((lo, hi)) = self.last_phase_spread(ev) {
                line = line
                    .lower_to(Widening::Staircase, lo)
                    .upper_to(Widening::Staircase, hi);
            }
            let reading = Reading::Segments(SegmentRead::RecurringSteps {
                steps,
                every: k,
                line: self.fit.slope,
            });
            c = c.conclude(line, self.thr, true, reading);
            if c.verdict == Verdict::Inconclusive {
                c.runs_needed = self.needed_for(&line, n, 0);
            }
            return c;
        }
        let stop_len = spacing * (1.0 / STOP_P).ln();
        if end_len >= stop_len {
            // No step for as long as a steady stream of them leaves such a gap with
            // probability STOP_P: they stopped, and the end's own line decides.
            let reading = Reading::Segments(SegmentRead::Filled {
                fill: rate,
                at: stop_x,
                end: since,
                undecided,
            });
            c = c.conclude(end, self.thr, true, reading);
            if c.verdict == Verdict::Plateau {
                c.set_rate(RateFrom::AverageFill, rate);
                c.plateau = Some(PlateauInfo {
                    fill_rate: Some(rate),
                    stop_x,
                    level: end_level,
                });
            } else {
                c.runs_needed = self.needed_for(&end, n_last, last.start);
            }
            return c;
        }
        self.too_recent(c, ev, last, end, stop_len - end_len)
    }

    /// Steps whose last is too recent to tell from the gaps whether they stopped (`missing`: the
    /// x the end lacks to tell): the estimate is the staircase's long-run rate, steps included.
    /// Its interval depends on what came before the last step:
    /// * growth was still going when the last step came (`rises_into`): the
    ///   steps recur, as a G1 or V8 heap's do when it takes a chunk ahead and fills it (anon flat
    ///   for runs after each), so the flat end is the wait for the next step, as a line's end is
    ///   its continuation. The interval is the line's, widened for the staircase's phase
    ///   (`phase_spread`: the line refitted ending just before the last step and just after);
    /// * growth had already slowed or stopped before the last step (a fill, a pause, then one
    ///   more step): the interval spans both stories — from the end's own lower bound (they
    ///   stopped: the 95% CI of the end's line widened for its residuals' autocorrelation,
    ///   `stats::ols_ar1_ci95`) to the whole line's upper one (they keep coming).
    ///
    /// Either way it reaches up to the pace the steps kept up to the last one (from the first
    /// point to the first after it): steps whose gaps grow with them (a heap doubling its
    /// chunks) have a long-run rate above any line's through them (measured:
    /// docs/verdicts.md#a-staircase-whose-steps-grow).
    ///
    /// A leak when the lower end clears the threshold; an end flat after a fill that had
    /// already slowed leaves it open (a heap sizing itself in two steps may go on slowly).
    fn too_recent(
        &self,
        c: Classification,
        ev: &Events,
        last: &Segment,
        end: EndRate,
        missing: f64,
    ) -> Classification {
        let n = self.x.len();
        let last_step = ev
            .up_x
            .last()
            .map_or(n, |&at| self.x.partition_point(|&x| x < at));
        let phase = self.phase_spread(last_step);
        let low = match phase {
            Some((low, _)) if self.rises_into(ev, last_step) => low,
            _ => stats::ols_ar1_ci95(&self.x[last.start..], &self.y[last.start..])
                .filter(|_| n - last.start >= 5)
                .map_or(f64::NEG_INFINITY, |o| o.0),
        };
        // The pace the steps kept up to the last one (from the first point to the first
        // after it) bounds what the next would bring: a staircase whose gaps grow with its
        // steps (a heap doubling its chunks) reads its long-run rate above any line's.
        let pace = (last_step < n && last_step > 0)
            .then(|| (self.y[last_step] - self.y[0]) / (self.x[last_step] - self.x[0]))
            .filter(|p| p.is_finite());
        let high = phase
            .map_or(f64::NEG_INFINITY, |p| p.1)
            .max(pace.unwrap_or(f64::NEG_INFINITY));
        let staircase = EndRate::new(
            RateFrom::Staircase,
            self.fit.slope,
            (low.min(self.ci.0), self.ci.1.max(end.ci95.1).max(high)),
        );
        let rises = ev.up_x.len() + ev.ramps;
        let reading = Reading::Segments(SegmentRead::TooRecent {
            rises,
            line: self.fit.slope,
            end: end.rate,
            since: last.x_start,
            grew: ev.up_total,
        });
        let mut c = c.conclude(staircase, self.thr, true, reading);
        match c.verdict {
            Verdict::Leak => c.set_rate(RateFrom::Staircase, self.fit.slope),
            Verdict::Inconclusive => c.runs_needed = self.needed(n as f64 + missing / self.dx),
            _ => {}
        }
        c
    }

    /// The line's 95% interval widened by a staircase's phase: down by as much as the line
    /// refitted on the points before the step at index `step` (the series ending just before
    /// it) reads lower, up by as much as the line refitted through the first point after it
    /// (ending just after) reads higher. A staircase of steps Q every S runs has the long-run
    /// rate Q/S, and a line over a few steps reads from below it (ending before a step) to
    /// above it (ending after one): that spread comes on top of the noise's. `None` with
    /// fewer than five points before the step.
    fn phase_spread(&self, step: usize) -> Option<(f64, f64)> {
        let slope = |end: usize| Some(stats::ols(&self.x[..end], &self.y[..end])?.slope);
        if step < 5 || step >= self.x.len() {
            return None;
        }
        let (before, after) = (slope(step)?, slope(step + 1)?);
        Some((
            self.ci.0 + (before - self.fit.slope).min(0.0),
            self.ci.1 + (after - self.fit.slope).max(0.0),
        ))
    }

    /// `phase_spread` at the last upward step, if any.
    fn last_phase_spread(&self, ev: &Events) -> Option<(f64, f64)> {
        let &at = ev.up_x.last()?;
        self.phase_spread(self.x.partition_point(|&x| x < at))
    }

    /// Growth was still going when the last upward step came (at index `step`): the last
    /// third of the points before it (at least five), none of them before an earlier step,
    /// rise above the threshold by their own line, at one-sided α/10 (the search chose where
    /// the step is). A fill that had stopped before its last step, or steps with flat waits
    /// between them, do not: a window reaching back over the step before would read that
    /// step as a rise.
    fn rises_into(&self, ev: &Events, step: usize) -> bool {
        self.rise_into(ev, step).is_some()
    }

    /// `rises_into`'s slope, bytes per x, when it rises.
    fn rise_into(&self, ev: &Events, step: usize) -> Option<f64> {
        let k = (step / 3).max(5);
        let from = step.checked_sub(k)?;
        let at = self.x[step.min(self.x.len() - 1)];
        let after_earlier = ev
            .steps
            .iter()
            .filter(|s| s.x < at)
            .map(|s| self.x.partition_point(|&x| x < s.x))
            .max()
            .unwrap_or(0);
        if from < after_earlier {
            return None;
        }
        let (x, y) = (&self.x[from..step], &self.y[from..step]);
        let f = stats::ols(x, y)?;
        let t = stats::student_t_quantile(1.0 - self.t.alpha / 10.0, (k - 2) as f64);
        (f.slope - t * f.slope_se? > self.thr).then_some(f.slope)
    }

    /// The last upward step came while the series was rising (`rises_into`) at no more than
    /// twice the end's pace `end_slope`: growth before it, the step, growth after it at about
    /// the same pace — one chunk of a heap that keeps growing. A fill that ended with it rose
    /// faster before (a fill of 2 MiB/run before a leak of 512 KiB/run: four times). Its x.
    fn chunk_between_rises(&self, ev: &Events, end_slope: f64) -> Option<f64> {
        let &at = ev.up_x.last()?;
        let before = self.rise_into(ev, self.x.partition_point(|&x| x < at))?;
        (before <= 2.0 * end_slope).then_some(at)
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

#[cfg(test)]
mod tests {
    use crate::fit::verdict::tests::*;
    use crate::fit::verdict::*;

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
        assert_eq!(c.rate_from, Some(RateFrom::EndSegment));
        // The same fill that stops instead is a plateau that stopped at run 8.
        let y: Vec<f64> = (1..=30)
            .map(|r: i32| 12.2 * MIB_ + 4.0 * MIB_ * (f64::from(r) - 1.0).min(7.0))
            .collect();
        let c = classify(&runs(30), &y, None, &per_run());
        assert_eq!(c.verdict, Verdict::Plateau, "{c:#?}");
        assert!(c.steps.is_empty(), "{:?}", c.steps);
        assert_eq!(c.plateau.map(|p| p.stop_x), Some(8.0));
    }

    /// A CPython keeping nothing, attached a minute: its anon took three pages, at 15 s, 29 s
    /// and 33 s, and none since (docs/verdicts.md#a-staircase-whose-steps-grow). The last step is too
    /// recent to tell whether they stopped, and the points before it are the step at 29 s and
    /// a flat wait, not growth running into it: the interval reaches down to the flat end's,
    /// and the verdict waits for a longer session.
    #[test]
    fn a_last_step_after_a_flat_wait_does_not_rise_into_it() {
        let x: Vec<f64> = (0..61).map(f64::from).collect();
        let y: Vec<f64> = x
            .iter()
            .map(|&t| {
                let pages = [15.0, 29.0, 33.0].iter().filter(|&&at| t >= at).count();
                12.0 * MIB_ + 4096.0 * pages as f64
            })
            .collect();
        let c = classify(&x, &y, None, &per_hour());
        assert_eq!(c.verdict, Verdict::Inconclusive, "{c:#?}");
        assert!(c.end_rate.unwrap().ci95.0 <= 0.0, "{c:#?}");
        assert!(
            c.reason
                .to_string()
                .contains("too recent to tell whether they stopped"),
            "{}",
            c.reason
        );
    }

    /// A V8 heap read from anon, 20 runs: rising ≈700 KiB/run, a 13 MiB chunk mapped at
    /// run 11, then +447 KiB/run. The headline is the long-run line, the chunk included (the
    /// leak keeps needing chunks), not the slope since it; the interval still holds the end
    /// segment's. The same chunk after a flat start is a load, then a leak at the end's rate.
    #[test]
    fn a_chunk_between_rises_is_a_leak_at_the_long_run_rate() {
        let wobble = [0.0, 90.0, -60.0, 30.0, -120.0, 70.0];
        let series = |before: f64| -> Vec<f64> {
            (1..=20)
                .map(|r: i32| {
                    let x = f64::from(r);
                    let chunk = if r >= 11 {
                        13.0 * MIB_ + 447.0 * KIB * (x - 11.0)
                    } else {
                        0.0
                    };
                    20.0 * MIB_
                        + wobble[r as usize % 6] * KIB
                        + before * KIB * (x - 1.0).min(10.0)
                        + chunk
                })
                .collect()
        };
        let c = classify(&runs(20), &series(700.0), None, &per_run());
        assert_eq!(c.verdict, Verdict::Leak, "{c:#?}");
        assert_eq!(c.rate_from, Some(RateFrom::Staircase), "{c:#?}");
        let line = c.fit.as_ref().unwrap().slope;
        assert!((c.rate.unwrap() - line).abs() < 1.0, "{c:#?}");
        assert!(line > 1.2 * MIB_, "{c:#?}");
        let end = c.end_rate.as_ref().unwrap();
        assert!(end.ci95.0 < 447.0 * KIB && end.ci95.1 > line, "{end:?}");
        let c = classify(&runs(20), &series(0.0), None, &per_run());
        assert_eq!(c.verdict, Verdict::Leak, "{c:#?}");
        assert_eq!(c.rate_from, Some(RateFrom::EndSegment), "{c:#?}");
        assert!(
            (c.rate.unwrap() / (447.0 * KIB) - 1.0).abs() < 0.05,
            "{c:#?}"
        );
    }

    /// memcached -m 64 driven past its cap: anon KiB per run, ≈4.6 MiB/run for 14 runs, then
    /// flat with eviction noise, 40 runs. Modelled on a reported fill.
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
        assert_eq!(c.rate_from, Some(RateFrom::AverageFill));
        assert!((14.0..=16.0).contains(&p.stop_x), "{p:?}");
        assert!((p.level / (68_560.0 * KIB) - 1.0).abs() < 0.01, "{p:?}");
        // One "end" for every output: the last segment, flat.
        assert_eq!(c.end_start_x, Some(p.stop_x));
        assert!(c.end_slope.unwrap().abs() < 16.0 * KIB, "{c:?}");
        assert!(c.reason.to_string().contains("MiB/run"), "{}", c.reason);
        assert_eq!(c.decided_by, DecidedBy::Mean);
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

    /// An LRU cache: +2 MiB/run for 6 runs, flat 7, +2 MiB at run 14, flat to 24.
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
        assert_eq!(c.rate_from, Some(RateFrom::Line));
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
        assert_eq!((c.rate, c.rate_from), (None, None));
        let p = c.plateau.unwrap();
        assert_eq!((p.fill_rate, p.stop_x), (None, 9.0));
        assert!(
            c.reason.to_string().contains("one-off step of +3.0"),
            "{}",
            c.reason
        );
    }
    /// A G1 heap keeping 1 MiB per request (tests/real_runtimes.rs, anon KiB after runs 0–20,
    /// a real recording): +1.07 MiB/run as old regions are touched, a chunk of 5.2 MiB at run
    /// 5 and one of 6.1 MiB at run 15, after which the heap fills the chunk it took ahead and
    /// anon holds. The flat end is the wait for the next step: a leak at the staircase's rate.
    /// Shifted so the last chunk comes at run 14 and holds for 7 runs (a shape seen in CI),
    /// still a leak; the same chunk after a fill that had stopped before it is not.
    #[test]
    fn a_g1_heap_waiting_for_its_next_chunk_is_a_leak() {
        let kib = [
            22316.0, 23520.0, 24620.0, 25716.0, 26792.0, 32128.0, 32128.0, 32944.0, 35468.0,
            36540.0, 37680.0, 38812.0, 39884.0, 40956.0, 42108.0, 48320.0, 48320.0, 48320.0,
            48320.0, 48352.0, 48352.0,
        ];
        let x: Vec<f64> = (0..=20).map(f64::from).collect();
        let mut y: Vec<f64> = kib.iter().map(|v| v * KIB).collect();
        let c = classify(&x, &y, None, &per_run());
        assert_eq!(c.verdict, Verdict::Leak, "{c:#?}");
        y.remove(14);
        y.push(y[19]);
        let c = classify(&x, &y, None, &per_run());
        assert_eq!(c.verdict, Verdict::Leak, "{c:#?}");
        let grew = (y[20] - y[0]) / 20.0;
        assert!((c.rate.unwrap() / grew - 1.0).abs() < 0.2, "{c:#?}");
        // Growth that had stopped before the last chunk: runs 0–6 rise, 7–13 hold, then the
        // chunk and a flat end. Not called a leak.
        let z: Vec<f64> = x
            .iter()
            .map(|&r| {
                22.0 * MIB_ + 1.07 * MIB_ * r.min(6.0) + if r >= 14.0 { 6.0 * MIB_ } else { 0.0 }
            })
            .collect();
        let c = classify(&x, &z, None, &per_run());
        assert_ne!(c.verdict, Verdict::Leak, "{c:#?}");
    }
}

#[cfg(test)]
mod v8_tests {
    use crate::fit::verdict::tests::*;
    use crate::fit::verdict::*;

    /// A Node server keeping ≈0.5 MB of JS strings per request (V8's own
    /// `used_heap_size` after a forced GC), anon KiB after runs 0–20 (a real
    /// recording): the heap grows in chunks, the last at run 12, then rises
    /// 204 KiB/run in a convex curve whose residuals are strongly
    /// autocorrelated, so even the end's own rise does not clear the
    /// threshold. Never a plateau or stable; inconclusive, with the runs that
    /// would tell. (At 2 MiB per request the same server's steps come often
    /// enough for its line: tests/real_runtimes.rs.)
    #[test]
    fn a_v8_heap_growing_in_chunks_is_never_a_plateau() {
        let kib = [
            7500.0, 8188.0, 9740.0, 9916.0, 10368.0, 12156.0, 13900.0, 13928.0, 13940.0, 14544.0,
            15204.0, 17572.0, 21364.0, 21388.0, 21400.0, 21432.0, 21492.0, 21552.0, 21976.0,
            22648.0, 23328.0,
        ];
        let y: Vec<f64> = kib.iter().map(|v| v * 1024.0).collect();
        let x: Vec<f64> = (0..=20).map(f64::from).collect();
        let c = classify(&x, &y, None, &per_run());
        assert_eq!(c.verdict, Verdict::Inconclusive, "{c:#?}");
        assert!(c.runs_needed.is_some_and(|m| m > 21), "{c:#?}");
        // The same recording with the end rising twice as steeply and
        // straight: a leak whatever the steps do next.
        let mut y2 = y.clone();
        for (i, v) in y2.iter_mut().enumerate().skip(13) {
            *v = y[12] + 450.0 * 1024.0 * (i - 12) as f64 + [0.0, 9e3, -7e3][i % 3];
        }
        let c = classify(&x, &y2, None, &per_run());
        assert_eq!(c.verdict, Verdict::Leak, "{c:#?}");
        assert!(c.rate.is_some_and(|r| r > 400.0 * 1024.0), "{c:#?}");
    }
}
