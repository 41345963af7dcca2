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
//! * `warmup` trims the start; `power` says how many points would decide.
//!
//! How a verdict comes about, so it can be predicted:
//! 1. `classify` trims the warm-up and picks the path: the troughs of a saw-tooth, else the
//!    mean (a last point far below the trend is set aside first, `Ctx::last_drop`).
//! 2. The shape's estimator gives its end rate and interval; the shape knowledge inside it
//!    (a robust slope below the line, one step as good as a line, a later stop, a staircase's
//!    phase …) only widens that interval.
//! 3. Every mean-path estimate then goes through the same widenings, in order
//!    (`Ctx::judge_mean`): a curve that may speed up reaches up to a parabola's end rate
//!    (`Ctx::may_speed_up`), an undecided end that bends downwards down to one
//!    (`Ctx::may_slow_down`), a line tilted by a warm-up the trim did not take down to the
//!    line without it (`Ctx::may_have_warmed_up`), a last point set aside down to the growth
//!    the whole kept (`Ctx::last_drop_bound`).
//! 4. `decide` on the widened interval is the verdict (`Ctx::settle`; a saw-tooth's floor has
//!    no later widening, so its estimator's `decide` stands); nothing else sets one. Each
//!    widening that moved the interval is named in it (`EndRate::widened_by`).
//! 5. Why is evidence, not prose: each estimator records what it read (`reason::Reading`,
//!    with its numbers) and each widening that spoke its clause (`reason::Clause`); the words
//!    are `crate::phrase::reason`'s, chosen by the verdict the estimator read.
//!
//! A pool's sites and types are judged per task when their workers' task steps are seen
//! (`Classification::judged_per_task`), and widened down to 0 when none are
//! (`Classification::without_task_steps`); `decide` again is the verdict.
//!
//! The practical threshold is `thr = max(min_slope_abs, min_slope_fraction · |mean level|)`
//! bytes per x unit. Units: `x` in x units (run number or seconds), `y` and every level in
//! bytes, every slope in bytes per x unit, percentages are of the mean fitted level.

mod line;
mod power;
pub mod reason;
mod segments;
mod troughs;
mod warmup;

pub use reason::Reason;
use reason::{Clause, Join, Reading, Slope, Unfit};
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
    /// A pool's growth per task: the mean of its workers' task steps and its Student-t 95%
    /// CI (`crate::fit::findings::workers::task_steps`), per task rather than per x unit.
    TaskSteps,
    /// A pool's growth within each worker's life, pooled over the workers
    /// (`super::stats::pooled_slope`): a leak in the workers over time.
    PooledLives,
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
    /// The shape knowledge that moved the interval beyond the estimator's own (empty: none).
    /// A summary without the field reads as none.
    #[serde(default)]
    pub widened_by: Widenings,
}

/// Shape knowledge that widens an end rate's interval: another reading of the same points
/// that puts the end lower or higher. Each is a better estimate of the interval, never a
/// veto: the verdict follows from the widened interval (`decide`). Declared in the order
/// the rules apply: the estimators' own first, then the passes every mean-path estimate
/// goes through (`Ctx::widen`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Widening {
    /// Every step of x adds its own error (`Thresholds::cumulative_errors`): the line's
    /// interval is its drift's (`stats::drift_ci95`).
    RandomWalk,
    /// The Theil–Sen slope is below the least-squares one and the threshold: one spike
    /// cannot carry a rate, so the interval reaches down to the robust slope.
    RobustSlope,
    /// The rank test does not say the troughs rise: down to no rate at all.
    RanksFlat,
    /// One step fits the points as well as a line: down to no rate at all.
    OneStep,
    /// The series falls about as much as it rises: the falls may be the trend, down to 0.
    Falls,
    /// The change points show no rise that matters (none, a dip and its recovery, a step
    /// too small): down to 0, or to the end segment's lower bound.
    NoRise,
    /// A knot later than the median slowed: down to the lowest later tail's lower bound.
    LaterStop,
    /// The end bends downwards: down to a parabola's slope at the last point.
    SlowsDown,
    /// The end bends upwards: up to a parabola's slope at the last point.
    SpeedsUp,
    /// Rises that keep coming read by where in their cycle the series ends, or a warm-up
    /// before a slower leak: out to the staircase's phase and the end segment's interval.
    Staircase,
    /// The first points lie far below the line (a warm-up the trim did not take): down to
    /// the line without them.
    WarmUp,
    /// The last point fell far below the trend: down to the net rate the whole kept.
    LastDrop,
    /// A pool judged per task where no task left growth behind late in its worker's life:
    /// the total's growth is what each new worker makes once at its start, down to 0.
    NoTaskSteps,
    /// A JVM's live heap grew by what young collections promoted since its old generation
    /// last gave back, garbage included: down to the growth without it.
    Promoted,
    /// The memory grew while leakwatch's own class histograms ran (`--jvm-classes`): down to
    /// the growth without it.
    Histograms,
}

impl Widening {
    const ALL: [Widening; 15] = [
        Widening::RandomWalk,
        Widening::RobustSlope,
        Widening::RanksFlat,
        Widening::OneStep,
        Widening::Falls,
        Widening::NoRise,
        Widening::LaterStop,
        Widening::SlowsDown,
        Widening::SpeedsUp,
        Widening::Staircase,
        Widening::WarmUp,
        Widening::LastDrop,
        Widening::NoTaskSteps,
        Widening::Promoted,
        Widening::Histograms,
    ];

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// The set of `Widening`s that moved an interval, serialised as their names in the order
/// of `Widening`'s declaration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Widenings(u16);

impl Widenings {
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn contains(self, w: Widening) -> bool {
        self.0 & w.bit() != 0
    }

    pub fn iter(self) -> impl Iterator<Item = Widening> {
        Widening::ALL.into_iter().filter(move |w| self.contains(*w))
    }

    fn insert(&mut self, w: Widening) {
        self.0 |= w.bit();
    }
}

impl Serialize for Widenings {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Widenings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<Widening>::deserialize(d)?;
        let mut set = Widenings::default();
        for w in names {
            set.insert(w);
        }
        Ok(set)
    }
}

impl EndRate {
    /// An estimator's end rate, widened by nothing yet.
    pub fn new(from: RateFrom, rate: f64, ci95: (f64, f64)) -> EndRate {
        EndRate {
            rate,
            ci95,
            from,
            widened_by: Widenings::default(),
        }
    }

    /// The interval widened down to `lo` by `by` (shape knowledge: another model of the same
    /// points that would put the end lower); `by` is recorded when the interval moves.
    fn lower_to(mut self, by: Widening, lo: f64) -> EndRate {
        if lo.is_finite() {
            let low = self.ci95.0.min(lo);
            if low != self.ci95.0 {
                self.widened_by.insert(by);
            }
            self.ci95.0 = low;
        }
        self
    }

    /// The interval widened up to `hi` by `by` (shape knowledge: a model of the same points
    /// that puts the end higher, a curve that speeds up).
    fn upper_to(mut self, by: Widening, hi: f64) -> EndRate {
        if hi.is_finite() {
            let high = self.ci95.1.max(hi);
            if high != self.ci95.1 {
                self.widened_by.insert(by);
            }
            self.ci95.1 = high;
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
#[derive(Clone, Debug, PartialEq)]
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
    /// Why, as typed evidence (`crate::phrase::reason` words it).
    pub reason: Reason,
    /// The practical threshold the end rate was decided against, bytes (or counts) per x
    /// unit; `None` when the series could not be fitted.
    pub threshold: Option<f64>,
}

impl Classification {
    fn new(warmup: usize, t: &Thresholds) -> Classification {
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
            reason: Reason::new(reason::Unit {
                per: t.display_unit,
                scale: t.display_scale,
                counts: t.counts,
            }),
            threshold: None,
        }
    }

    /// The headline rate, and which estimate it is.
    fn set_rate(&mut self, from: RateFrom, rate: f64) {
        self.rate = Some(rate);
        self.rate_from = Some(from);
    }

    /// No estimate at all (too few points, bad input): inconclusive, and why.
    fn unfitted(mut self, why: Unfit) -> Classification {
        self.verdict = Verdict::Inconclusive;
        self.reason.read = Verdict::Inconclusive;
        self.reason.reading = Reading::Unfitted(why);
        self
    }

    /// The same verdict, read more precisely by the estimator that knows why.
    fn reworded(mut self, reading: Reading) -> Classification {
        self.reason.reading = reading;
        self
    }

    /// An estimator's reading: `decide` on its end estimate, with what it read (worded for
    /// the verdict it gives). On the mean path the widenings may still move the interval;
    /// `Ctx::settle` then decides on the widened one, which is the verdict that stands.
    fn conclude(mut self, end: EndRate, thr: f64, grew: bool, reading: Reading) -> Classification {
        self.verdict = decide(&end, thr, grew);
        self.end_rate = Some(end);
        self.reason.thr = thr;
        self.reason.read = self.verdict;
        self.reason.reading = reading;
        self
    }
}

/// A pool's series (several processes hold it) is judged per task, as its workers are
/// (`crate::fit::sites`): idle runs and a recycled worker's unsampled last task neither dilute
/// nor cancel it.
impl Classification {
    /// Task steps that keep coming were seen (`crate::fit::findings::workers::leaking_steps`):
    /// their mean per task and its 95% CI are the end rate the verdict is decided on, against
    /// `thr` per task (the series' own fit stays, for its per-run figures).
    pub fn judged_per_task(mut self, rate: f64, ci95: (f64, f64), thr: f64) -> Classification {
        let end = EndRate::new(RateFrom::TaskSteps, rate, ci95);
        self.verdict = decide(&end, thr, true);
        self.end_rate = Some(end);
        self
    }

    /// No task left growth behind late in its worker's life: the total's growth is what each
    /// new worker makes once at its start, summed over the recycled ones, so the end rate per
    /// task reaches down to 0 (`Widening::NoTaskSteps`). No rerun of the same pool decides it.
    pub fn without_task_steps(mut self) -> Classification {
        let (Some(end), Some(thr)) = (self.end_rate, self.threshold) else {
            return self;
        };
        let end = end.lower_to(Widening::NoTaskSteps, 0.0);
        let verdict = decide(&end, thr, self.verdict == Verdict::Plateau);
        if verdict != self.verdict {
            self.runs_needed = None;
        }
        self.verdict = verdict;
        self.end_rate = Some(end);
        self
    }

    /// A generational JVM's live heap (`sample::heap::jvm`): its old generation holds what
    /// young collections promoted since it last gave back, garbage included, and only a
    /// collection of the old generation tells what is kept. `promoted`: that growth at the
    /// end's last point, bytes; `grown`: the live heap's growth over the end (from
    /// `end_start_x` to its last point), bytes; `span`: the end's length in x units. The end
    /// rate reaches down by the smaller of promoted and the end's growth per x unit
    /// (`lowered_by`, `Widening::Promoted`): an end without such a collection may have kept
    /// none of its growth. A saw-tooth's floor is read where the old generation gave back,
    /// and stands.
    pub fn promoted_bound(self, promoted: f64, grown: f64, span: f64) -> Classification {
        if self.decided_by == DecidedBy::Troughs {
            return self;
        }
        self.lowered_by(promoted, grown, span, Widening::Promoted, |promoted, to| {
            Clause::Promoted { promoted, to }
        })
    }

    /// A process leakwatch asked for class histograms (`--jvm-classes`): `grew`, bytes over
    /// the end, is what its memory changed by while they ran (read just before each request
    /// and just after its answer; over the end as `fit::bound_by_histograms` reads it),
    /// leakwatch's doing rather than the program's (docs/runtimes.md); `grown` and `span` as
    /// `promoted_bound`'s. The end rate reaches down by the smaller of the two per x unit
    /// (`lowered_by`, `Widening::Histograms`), a saw-tooth's floor too.
    pub fn histograms_bound(self, grew: f64, grown: f64, span: f64) -> Classification {
        self.lowered_by(grew, grown, span, Widening::Histograms, |grew, to| {
            Clause::Histograms { grew, to }
        })
    }

    /// The end's lower bound lowered by `amount` (bytes over the end) of its growth that
    /// may not be the program's: the smaller of `amount` and the growth, the larger of
    /// `grown` and the end rate times `span` (two single points carry noise; where they read
    /// less than the fit, all of it must still take the lower end to the rate minus itself,
    /// ≤ 0). `decide` runs again on the result; the clause is said where the verdict is not a
    /// leak because of it, or undecided.
    fn lowered_by(
        mut self,
        amount: f64,
        grown: f64,
        span: f64,
        widening: Widening,
        clause: impl FnOnce(f64, f64) -> Clause,
    ) -> Classification {
        let (Some(end), Some(thr)) = (self.end_rate, self.threshold) else {
            return self;
        };
        let unconfirmed = amount.min(grown.max(end.rate * span));
        if !(unconfirmed > 0.0 && span > 0.0) {
            return self;
        }
        let lowered = end.lower_to(widening, end.ci95.0 - unconfirmed / span);
        let was = self.verdict;
        let verdict = decide(&lowered, thr, was == Verdict::Plateau);
        let clause = clause(unconfirmed, lowered.ci95.0);
        if was == Verdict::Leak && verdict != Verdict::Leak {
            // No rerun of the same length decides it: what it may be (a collection of the old
            // generation, the histograms' share) grows with the length too.
            self.reason.clauses.push((Join::But, clause));
            self.runs_needed = None;
        } else if verdict == Verdict::Inconclusive {
            self.reason.clauses.push((Join::Then, clause));
        }
        self.verdict = verdict;
        self.end_rate = Some(lowered);
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
    if let Err(why) = validate(x, y, t) {
        return Classification::new(0, t).unfitted(why);
    }
    let mut points: Vec<(f64, f64)> = x.iter().copied().zip(y.iter().copied()).collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (xs, ys): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
    let total = xs.len();
    let warm = warmup.unwrap_or_else(|| detect_warmup(&xs, &ys)).min(total);
    let mut c = Classification::new(warm, t);
    let (x, y) = (&xs[warm..], &ys[warm..]);
    let n = x.len();
    let min_points = t.min_points.max(4);
    if n < min_points {
        c.runs_needed = Some((warm + min_points).min(MAX_RUNS_NEEDED));
        let need = Unfit::TooFew {
            points: n,
            need: min_points,
        };
        return c.unfitted(need);
    }
    let thinned = if n > MAX_MEAN_POINTS {
        super::thin(&points[warm..])
    } else {
        points[warm..].to_vec()
    };
    let (tx, ty): (Vec<f64>, Vec<f64>) = thinned.into_iter().unzip();
    let ctx = match Ctx::new(&tx, &ty, t, warm, n) {
        Ok(ctx) => ctx,
        Err(why) => return c.unfitted(why),
    };
    c = ctx.describe(c);
    c.threshold = Some(ctx.thr);
    c.envelope = envelope::lower_envelope(x, y);
    // A saw-tooth only when collections were seen: a hard floor *and* at least one drop per
    // window. A ramp that curves has a hard lower edge of residuals too, but no drops: it is
    // judged on its mean, not on troughs it does not have.
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

fn validate(x: &[f64], y: &[f64], t: &Thresholds) -> Result<(), Unfit> {
    let valid_thresholds = t.alpha > 0.0
        && t.alpha < 0.5
        && t.min_slope_fraction >= 0.0
        && t.min_slope_abs >= 0.0
        && t.min_slope_fraction.is_finite()
        && t.min_slope_abs.is_finite();
    if !valid_thresholds {
        return Err(Unfit::InvalidThresholds);
    }
    if x.len() != y.len() {
        return Err(Unfit::LengthsDiffer);
    }
    if !x.iter().chain(y).all(|v| v.is_finite()) {
        return Err(Unfit::NotFinite);
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
    ) -> Result<Ctx<'a>, Unfit> {
        let n = x.len();
        let (Some(fit), Some(mk), Some(level)) =
            (stats::ols(x, y), stats::mann_kendall(y), stats::mean(y))
        else {
            return Err(Unfit::Degenerate);
        };
        let (Some(mut ci), Some(sd)) = (fit.slope_ci95, fit.residual_sd) else {
            return Err(Unfit::NoInterval);
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

    /// The line's slope and the level it is a share of.
    fn slope(&self) -> Slope {
        Slope {
            rate: self.fit.slope,
            level: self.level,
        }
    }

    /// The mean path: a last point far below the trend set aside (`last_drop`), the shape's
    /// estimator on the rest (`judge_shape`), then the widenings every estimate goes through,
    /// in order — a curve that may speed up, one that may slow down, a warm-up the trim did
    /// not take, the last point's drop — each moving the interval, none setting a verdict;
    /// then the verdict, decided once on the widened interval (`settle`).
    fn judge_mean(&self, c: Classification) -> Classification {
        let rest = self.last_drop();
        let ctx = rest.as_ref().unwrap_or(self);
        let c = ctx.judge_shape(c);
        let Some(mut end) = c.end_rate else { return c };
        let mut notes = Vec::new();
        let passes: [Widen<'a>; 3] = [
            Self::may_speed_up,
            Self::may_slow_down,
            Self::may_have_warmed_up,
        ];
        for pass in passes {
            if let Some(note) = pass(ctx, &c, end) {
                end = note.end;
                notes.push(note);
            }
        }
        if let Some(note) = rest.as_ref().and_then(|r| r.last_drop_bound(self, end)) {
            notes.push(note);
        }
        ctx.settle(c, notes)
    }

    /// The verdict, decided once on the widened interval (`decide`; `reading`'s plateau says
    /// it grew), and the widenings' clauses added to the estimator's reason: the first that
    /// takes a leak's lower end to the threshold with its "but" (and its rerun and rate); the
    /// others where an undecided end, or a leak that stays one, names them.
    fn settle(&self, mut c: Classification, notes: Vec<Note>) -> Classification {
        let Some(end) = notes.last().map(|n| n.end) else {
            return c;
        };
        let mut reading = c.verdict;
        c.end_rate = Some(end);
        c.verdict = decide(&end, self.thr, reading == Verdict::Plateau);
        for note in notes {
            let leak = reading == Verdict::Leak;
            if leak && note.end.ci95.0 <= self.thr {
                c.reason.clauses.push((Join::But, note.clause));
                c.runs_needed = note.rerun;
                if let Some((from, rate)) = note.undecided_rate {
                    c.set_rate(from, rate);
                }
                reading = Verdict::Inconclusive;
            } else if leak && note.says_kept {
                c.reason.clauses.push((Join::Then, note.clause));
                c.set_rate(note.end.from, note.end.rate);
            } else if reading == Verdict::Inconclusive && note.says_undecided {
                c.reason.clauses.push((Join::Then, note.clause));
            }
        }
        c
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
    /// series is judged as any series is (`self`), and its end rate's interval reaches down
    /// to the net rate the whole kept (from the rest's line at the first x to the last point,
    /// less 2 sd of noise). A heap that gave back a ninth of itself at the last sample stays
    /// a leak; growth all given back is none. `whole`: the series with its last point.
    fn last_drop_bound(&self, whole: &Ctx, mut end: EndRate) -> Option<Note> {
        let n = whole.x.len();
        let (x0, xl, yl) = (whole.x[0], whole.x[n - 1], whole.y[n - 1]);
        let start = self.fit.intercept + self.fit.slope * x0;
        let kept = (yl - start - 2.0 * self.sd) / (xl - x0);
        let gave_back = self.fit.intercept + self.fit.slope * xl - yl;
        // What it gave back was garbage kept until then: the rest's rate counts it as growth,
        // the line through every point spreads it over the whole: the lower of the two
        // (docs/accuracy.md#a-last-point-that-gives-back).
        end.rate = end.rate.min(whole.fit.slope).max(end.ci95.0);
        let end = end.lower_to(Widening::LastDrop, kept.min(end.rate));
        Some(Note {
            end,
            clause: Clause::LastDrop {
                gave_back,
                line: whole.fit.slope,
                kept,
            },
            says_undecided: false,
            says_kept: true,
            rerun: whole.needed_for(&end, n, 0),
            undecided_rate: Some((RateFrom::Line, whole.fit.slope)),
        })
    }

    /// The shapes' estimators: segments when the change-point search finds any, else the line.
    fn judge_shape(&self, mut c: Classification) -> Classification {
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

    /// A series may be a leak that speeds up: its end is then faster than any line through it
    /// says (a parabola's end rate is twice its average, an exponential's up to three times),
    /// and under noise the curve is not told from a line. Rule: where the interval's upper end
    /// is above the threshold, it reaches up to the 95% upper end of the slope at the last
    /// point of a parabola through all points and through the second half (for an undecided
    /// series, the last `MIN_END_PARABOLA` under 12 points); when the whole bends upwards at
    /// one-sided α, through the last third, quarter and `MIN_END_PARABOLA` too. Ends nearer
    /// the last point lag an exponential less but bend wherever a heap's chunks came late, so
    /// they are read only when the whole series bends. Only the upper end moves: what changes
    /// is what the interval admits (a gate's pass becomes undecided when the end may exceed
    /// its limit). Coverage with and without the rule: docs/accuracy.md#curves-that-speed-up.
    fn may_speed_up(&self, c: &Classification, end: EndRate) -> Option<Note> {
        if end.ci95.1 <= self.thr {
            return None;
        }
        if self.t.cumulative_errors && !self.increments_rise() {
            // A random walk's parabola bends wherever its errors wandered.
            return None;
        }
        let n = self.x.len();
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
            .reduce(f64::max)?;
        // A parabola through a perfect line ends at the line's slope, give or take rounding.
        // The estimator's reason names the line's upper end; the interval reaches further.
        (top > end.ci95.1 + 1e-9 * end.ci95.1.abs()).then(|| {
            Note::undecided(
                end.upper_to(Widening::SpeedsUp, top),
                Clause::SpeedsUp { to: top },
            )
        })
    }

    /// The mirror of `may_speed_up`: a curve that slows down has its end below any line
    /// through its end. Rule: when the points the end was read on (all for the line, the
    /// second half or the end segment) bend downwards at one-sided 5% (not α: no verdict
    /// rests on it), the interval reaches down to the 95% lower end of a parabola's slope at
    /// the last point. Only where the interval already admits the threshold, so no verdict
    /// changes: what changes is what an undecided end admits. Not for random walks (they bend
    /// wherever their errors wandered), a series that does not grow (memory given back is no
    /// slowing leak), recurring steps, a curve that speeds up or a saw-tooth's floor.
    /// Coverage: docs/accuracy.md#curves-that-slow-down.
    fn may_slow_down(&self, c: &Classification, end: EndRate) -> Option<Note> {
        let from = match end.from {
            RateFrom::Line => self.x.first().copied(),
            RateFrom::SecondHalf | RateFrom::EndSegment => c.end_start_x,
            _ => None,
        };
        let grows = self.fit.slope > 0.0;
        let from = from.filter(|_| grows && end.ci95.0 <= self.thr && !self.t.cumulative_errors)?;
        let i = self.x.partition_point(|&v| v < from);
        if self.x.len() - i < MIN_END_PARABOLA {
            return None;
        }
        let p = stats::parabola_end(&self.x[i..], &self.y[i..]).filter(|p| p.bends_down(0.05))?;
        let low = p.slope_lower95();
        (low < end.ci95.0 - 1e-9 * end.ci95.0.abs()).then(|| {
            Note::undecided(
                end.lower_to(Widening::SlowsDown, low),
                Clause::SlowsDown { to: low },
            )
        })
    }

    /// A line whose first points lie far below it may be tilted by a warm-up the trim did
    /// not take (`detect_warmup` trims one jump; a cache that fills over two or three runs
    /// under noise is a rise that goes on): its slope then overstates the end. Rule: when the
    /// leading residuals are below −2σ, the first below −3σ (a straight series starts so one
    /// time in 700), the interval reaches down to the line's without them (at most a quarter
    /// of the points). Coverage: docs/accuracy.md#a-warm-up-the-trim-did-not-take.
    fn may_have_warmed_up(&self, _: &Classification, end: EndRate) -> Option<Note> {
        if end.from != RateFrom::Line
            || self.t.cumulative_errors
            || self.sd.is_nan()
            || self.sd <= 0.0
        {
            return None;
        }
        let n = self.x.len();
        let resid = |i: usize| self.y[i] - (self.fit.intercept + self.fit.slope * self.x[i]);
        if resid(0) >= -3.0 * self.sd {
            return None;
        }
        let k = (0..n / 4)
            .take_while(|&i| resid(i) < -2.0 * self.sd)
            .count();
        let low = stats::ols(&self.x[k..], &self.y[k..])
            .and_then(|f| f.slope_ci95)
            .map(|ci| ci.0)
            .filter(|&lo| lo < end.ci95.0)?;
        let end = end.lower_to(Widening::WarmUp, low);
        let clause = Clause::WarmUp { points: k, to: low };
        Some(Note {
            rerun: self.needed_for(&end, n - k, k),
            ..Note::undecided(end, clause)
        })
    }
}

/// A widening every mean-path estimate goes through (`Ctx::judge_mean`): given the estimator's
/// reading and the end rate so far, the end rate it widens to and why, or `None`.
type Widen<'a> = fn(&Ctx<'a>, &Classification, EndRate) -> Option<Note>;

/// What one widening did to the end rate, for `Ctx::settle` to word once the verdict is
/// decided.
struct Note {
    /// The end rate after it.
    end: EndRate,
    /// Why, as a clause ("if it speeds up, its end may reach +1.00 MiB/run").
    clause: Clause,
    /// Said after an undecided end's reason; after a leak's that stays one.
    says_undecided: bool,
    says_kept: bool,
    /// Where it takes a leak's lower end to the threshold: the rerun that would decide, and
    /// the headline rate (`None`: the estimator's stays).
    rerun: Option<usize>,
    undecided_rate: Option<(RateFrom, f64)>,
}

impl Note {
    /// A note said only after an undecided end's reason.
    fn undecided(end: EndRate, clause: Clause) -> Note {
        Note {
            end,
            clause,
            says_undecided: true,
            says_kept: false,
            rerun: None,
            undecided_rate: None,
        }
    }
}

/// Points a parabola through the end of a series needs before `Ctx::may_speed_up` reads its
/// end rate: on five (2 degrees of freedom, t = 4.3) its interval is several times the line's,
/// and a crisp straight leak's end reads well above its line
/// (docs/verdicts.md#a-parabola-through-the-end).
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A minute of a series rising `rate` per second around 700 KB, ±300 B every other
    /// point, judged against 64 KiB/h: its classification (a leak), the thresholds, x, and
    /// the growth and length of its end between its first and last points.
    fn leaking_minute(rate: f64) -> (Classification, Thresholds, Vec<f64>, f64, f64) {
        let x: Vec<f64> = (0..60).map(f64::from).collect();
        let y: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, t)| 700_000.0 + rate * t + if i % 2 == 0 { 300.0 } else { -300.0 })
            .collect();
        let t = Thresholds {
            min_slope_abs: 65536.0 / 3600.0,
            ..Thresholds::default()
        };
        let c = classify(&x, &y, Some(0), &t);
        assert_eq!(c.verdict, Verdict::Leak);
        let from = c.end_start_x.unwrap();
        let a = x.iter().position(|&v| v >= from).unwrap();
        let (grown, span) = (y[59] - y[a], x[59] - x[a]);
        (c, t, x, grown, span)
    }

    /// A JVM's live heap rising 1,000 B/s, all of it promoted with no full collection: the
    /// end reaches down by that growth and the leak is undecided, with no rerun; where only
    /// the last 4 s were (a full collection then), it stays a leak; two end points that read
    /// less growth than the fit do not keep the lower end above 0. A saw-tooth's floor and a
    /// series that did not grow over its end are left as they are.
    #[test]
    fn growth_promoted_with_no_collection_since_bounds_the_end_rate() {
        let (c, t, x, grown, span) = leaking_minute(1000.0);
        let all = c.clone().promoted_bound(59_000.0, grown, span);
        assert_eq!(all.verdict, Verdict::Inconclusive, "{all:?}");
        let end = all.end_rate.unwrap();
        assert!(end.widened_by.contains(Widening::Promoted));
        assert!(
            end.ci95.0 < t.min_slope_abs && end.ci95.1 > 900.0,
            "{end:?}"
        );
        assert_eq!(all.runs_needed, None);
        assert!(
            all.reason
                .to_string()
                .contains("was promoted since the old generation was last collected"),
            "{}",
            all.reason
        );
        let recent = c.clone().promoted_bound(4_000.0, grown, span);
        assert_eq!(recent.verdict, Verdict::Leak, "{recent:?}");
        // Two points reading less than the fit (survivor noise): all promoted still takes
        // the lower end to at most 0.
        let noisy = c.clone().promoted_bound(59_000.0, grown / 4.0, span);
        assert_eq!(noisy.verdict, Verdict::Inconclusive, "{noisy:?}");
        assert!(noisy.end_rate.unwrap().ci95.0 <= 0.0, "{noisy:?}");
        let level: Vec<f64> = (0..60)
            .map(|i| 700_000.0 + if i % 2 == 0 { 300.0 } else { -300.0 })
            .collect();
        let flat = classify(&x, &level, Some(0), &t);
        let bounded = flat.clone().promoted_bound(59_000.0, -10.0, span);
        assert_eq!(bounded.end_rate, flat.end_rate);
        assert_eq!(bounded.verdict, flat.verdict);
        let troughs = Classification {
            decided_by: DecidedBy::Troughs,
            ..c.clone()
        };
        assert_eq!(
            troughs.promoted_bound(59_000.0, grown, span).verdict,
            Verdict::Leak
        );
    }

    /// A healthy JVM's anon rising by what leakwatch's class histograms grew it (all of the
    /// end's growth): the end reaches down to 0 or below and the leak is undecided, a
    /// saw-tooth's floor too; a leak whose histograms grew it by a tenth stays a leak.
    #[test]
    fn growth_while_leakwatchs_histograms_ran_bounds_the_end_rate() {
        let (c, _, _, grown, span) = leaking_minute(1200.0);
        // All of the line's growth (the two end points read it ±300 B).
        let all = c.clone().histograms_bound(1200.0 * span, grown, span);
        assert_eq!(all.verdict, Verdict::Inconclusive, "{all:?}");
        let end = all.end_rate.unwrap();
        assert!(end.widened_by.contains(Widening::Histograms));
        assert!(end.ci95.0 <= 0.0 && end.ci95.1 > 1000.0, "{end:?}");
        assert_eq!(all.runs_needed, None);
        assert!(
            all.reason
                .to_string()
                .contains("came while leakwatch's class histograms ran (--jvm-classes)"),
            "{}",
            all.reason
        );
        let tenth = c.clone().histograms_bound(120.0 * span, grown, span);
        assert_eq!(tenth.verdict, Verdict::Leak, "{tenth:?}");
        let shrank = c.clone().histograms_bound(-grown, grown, span);
        assert_eq!(shrank.end_rate, c.end_rate);
        let troughs = Classification {
            decided_by: DecidedBy::Troughs,
            ..c.clone()
        };
        assert_eq!(
            troughs.histograms_bound(1200.0 * span, grown, span).verdict,
            Verdict::Inconclusive
        );
    }

    /// `Widening::ALL` lists every variant at its own bit, in declaration order (the match
    /// is exhaustive: a new variant does not compile until it is placed here).
    #[test]
    fn every_widening_is_listed_once_and_round_trips_by_name() {
        for (i, w) in Widening::ALL.into_iter().enumerate() {
            let listed = match w {
                Widening::RandomWalk => 0,
                Widening::RobustSlope => 1,
                Widening::RanksFlat => 2,
                Widening::OneStep => 3,
                Widening::Falls => 4,
                Widening::NoRise => 5,
                Widening::LaterStop => 6,
                Widening::SlowsDown => 7,
                Widening::SpeedsUp => 8,
                Widening::Staircase => 9,
                Widening::WarmUp => 10,
                Widening::LastDrop => 11,
                Widening::NoTaskSteps => 12,
                Widening::Promoted => 13,
                Widening::Histograms => 14,
            };
            assert_eq!((listed, w as usize), (i, i), "{w:?}");
        }
        let end = EndRate::new(RateFrom::Line, 1.0, (0.5, 1.5))
            .lower_to(Widening::LastDrop, 0.1)
            .upper_to(Widening::SpeedsUp, 1.7)
            .upper_to(Widening::RandomWalk, 2.0)
            // Inside the interval already: moves nothing, named nowhere.
            .lower_to(Widening::OneStep, 0.3);
        assert_eq!(end.ci95, (0.1, 2.0));
        let json = serde_json::to_string(&end).unwrap();
        assert!(
            json.contains(r#""widened_by":["random_walk","speeds_up","last_drop"]"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<EndRate>(&json).unwrap(), end);
        // A summary without `widened_by` reads as widened by nothing.
        let old: EndRate =
            serde_json::from_str(r#"{"rate":1.0,"ci95":[0.5,1.5],"from":"line"}"#).unwrap();
        assert!(old.widened_by.is_empty());
    }

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
                assert!(!c.reason.to_string().is_empty());
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
        assert!(c.reason.to_string().contains("+2.00/run"), "{}", c.reason);
        assert!(!c.reason.to_string().contains(" B"), "{}", c.reason);
    }

    #[test]
    fn verdicts_order_by_severity() {
        use Verdict::*;
        assert!(Stable < Plateau && Plateau < Inconclusive && Inconclusive < Leak);
        assert_eq!([Plateau, Leak, Stable].into_iter().max(), Some(Leak));
        assert_eq!([Plateau, Stable].into_iter().max(), Some(Plateau));
    }

    /// A PostgreSQL backend keeping prepared statements, attached for 60 s, grows 64 GiB/h in
    /// a slightly convex ramp with no drop at all; its residuals have a hard lower edge, yet
    /// it is no saw-tooth. A saw-tooth needs collections: at least one drop per window, and
    /// enough windows.
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
