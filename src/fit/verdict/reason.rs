//! Why a series, site or type got its word, as typed evidence: what the estimator read (its
//! `Reading`, with the numbers in the series' own units per x unit), the verdict it read, and
//! the clauses the widenings and the sampling add. No prose here: `crate::phrase::reason`
//! words every reason (`Display`), so one voice says them in stderr, report.md, report.html
//! and summary.json alike.

use super::Verdict;

/// How a reason's rates read: per `per` (`run`, `h`, `task`), each x unit's rate multiplied by
/// `scale`; `counts`: the series counts things (file descriptors, threads), not bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Unit {
    pub per: &'static str,
    pub scale: f64,
    pub counts: bool,
}

/// Rates per x as they are (`Thresholds::default`'s unit).
impl Default for Unit {
    fn default() -> Self {
        Unit {
            per: "x",
            scale: 1.0,
            counts: false,
        }
    }
}

/// One reason: the estimator's reading, then the widenings' clauses, then the asides.
#[derive(Clone, Debug, PartialEq)]
pub struct Reason {
    pub unit: Unit,
    /// The practical threshold the estimate was decided against, per x unit (NaN: none).
    pub thr: f64,
    /// The verdict the estimator read; its words are chosen by it (a widening may move the
    /// verdict that stands, and then adds its clause).
    pub read: Verdict,
    pub reading: Reading,
    pub clauses: Vec<(Join, Clause)>,
    pub asides: Vec<Aside>,
}

impl Default for Reason {
    fn default() -> Self {
        Reason::new(Unit::default())
    }
}

impl Reason {
    /// A reason with nothing read yet: inconclusive, unfitted.
    pub fn new(unit: Unit) -> Reason {
        Reason {
            unit,
            thr: f64::NAN,
            read: Verdict::Inconclusive,
            reading: Reading::Unfitted(Unfit::NotRead),
            clauses: Vec::new(),
            asides: Vec::new(),
        }
    }
}

/// A rate and the level it is a share of (its "%/run" reads `rate / level`; a level of 0
/// reads "n/a"), per x unit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slope {
    pub rate: f64,
    pub level: f64,
}

/// A rate since a position on the x axis: an end segment's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Since {
    pub rate: f64,
    pub x: f64,
}

/// Why an end cannot tell whether it still rises: its own points scatter by more than one x
/// step's worth of the threshold (`TooNoisy`), or lie close to their line and are too few.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Undecided {
    TooShort,
    TooNoisy,
}

/// Why nothing could be fitted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unfit {
    /// No estimator has read the series (a reason's starting value).
    NotRead,
    InvalidThresholds,
    LengthsDiffer,
    NotFinite,
    /// x does not vary, or the values overflow.
    Degenerate,
    NoInterval,
    TooFew {
        points: usize,
        need: usize,
    },
}

/// What the trend test and the line's interval said of a series without significant growth.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trend {
    /// Mann–Kendall says it rises, but the slope's 95% CI `(lo, hi)` includes 0.
    RisesButCiHoldsZero { lo: f64, hi: f64 },
    /// Mann–Kendall says it rises, but the segments read no rise that counts: `falls`, it
    /// falls by more than half of what it rises; else no step or segment rises above noise.
    RisesButNotInSegments { falls: bool },
    /// It falls at level α.
    Falls,
    /// No significant trend.
    None,
}

/// What an estimator read. Rates are per x unit; `at`, `x`: positions on the x axis;
/// `p`: the Mann–Kendall two-sided p-value.
#[derive(Clone, Debug, PartialEq)]
pub enum Reading {
    Unfitted(Unfit),
    /// A rising line too short for halves.
    RisingLine {
        slope: Slope,
    },
    /// A rising line read by its halves (knot at the median x).
    Line(LineRead),
    /// No significant growth: the line's slope and interval.
    NoTrend {
        trend: Trend,
        slope: Slope,
        p: f64,
        /// The interval's upper end.
        high: f64,
    },
    /// The segment estimator's readings.
    Segments(SegmentRead),
    /// A saw-tooth judged on its troughs.
    Troughs(TroughRead),
    /// A saw-tooth with too few teeth: its line and the interval widened for the teeth.
    FewTeeth {
        drops: usize,
        samples: usize,
        min_windows: usize,
        slope: Slope,
        ci: (f64, f64),
    },
    /// A pool's task steps: growth per task left late in workers' lives (bytes).
    TaskSteps {
        per_task: f64,
        processes: usize,
        tasks: usize,
    },
    /// A live heap with no collection in the window; what its heap in use did.
    NoCollection {
        in_use: Option<f64>,
    },
    /// A type's count of objects.
    Objects(Objects),
}

/// What the segment estimator read: steps, fills and ramps cut by change points; `end`:
/// the end segment's rate since its start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SegmentRead {
    /// No step or rise that matters among the segments; the end since its start.
    NoRise { end: Since },
    /// One step up that climbs back from a dip (`dip`) or leaves the level little higher.
    SmallStep {
        dip: bool,
        up: f64,
        at: f64,
        net: f64,
        end: Since,
    },
    /// Falls as large as the rises, with the line's slope.
    RisesAndFalls { down: f64, up: f64, slope: Slope },
    /// A step while rising and a rise after it: the line's rate, steps included.
    Chunk { line: f64, step_at: f64, end: Since },
    /// The end segment rises on its own; `before`: the average rate before it over
    /// `segments` segments.
    EndSegment {
        end: Since,
        before: f64,
        segments: usize,
    },
    /// One step, then the end.
    OneStep {
        size: f64,
        at: f64,
        end: Since,
        undecided: Undecided,
    },
    /// Changes that add up to `rise` only.
    SmallChanges {
        rise: f64,
        end: Since,
        undecided: Undecided,
    },
    /// Steps that keep coming: how many, one every `every` x on average, the line's rate.
    RecurringSteps { steps: usize, every: f64, line: f64 },
    /// Growth at `fill` on average until `at`, then the end.
    Filled {
        fill: f64,
        at: f64,
        end: Since,
        undecided: Undecided,
    },
    /// Steps whose last is too recent to tell whether they stopped: `rises` steps and ramps,
    /// the line's rate, the end segment's rate since `since`, `grew` in steps.
    TooRecent {
        rises: usize,
        line: f64,
        end: f64,
        since: f64,
        grew: f64,
    },
}

/// A rising line's reading.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LineRead {
    pub slope: Slope,
    pub p: f64,
    /// The broken stick's slopes before and after `knot`.
    pub head: f64,
    pub tail: f64,
    pub knot: f64,
    /// The end rate and its interval's lower end.
    pub end: f64,
    pub end_low: f64,
    /// It kept its pace to the end; `curve_end`: and its rate is the curve's end.
    pub kept_pace: bool,
    pub curve_end: bool,
    /// One step (its size, its x) that fits the points as well as the line.
    pub one_step: Option<(f64, f64)>,
    /// The robust slope, where it does not carry the rate.
    pub weak_robust: Option<f64>,
}

/// A saw-tooth's troughs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TroughRead {
    pub windows: usize,
    /// The troughs' slope and its p.
    pub slope: f64,
    pub p: f64,
    /// A tooth's height, and the series' own slope.
    pub teeth: f64,
    pub mean: f64,
    /// The end rate and its interval's upper end.
    pub end: f64,
    pub high: f64,
    /// Where the floor stopped: its fill rate, and the x.
    pub stop: Option<(f64, f64)>,
}

/// A type's count of objects gained since it was first seen (`per_hour`: x is hours).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Objects {
    /// Per task, with its CI, in `lives` processes over `tasks` tasks.
    PerTask {
        per_task: f64,
        ci: (f64, f64),
        lives: usize,
        tasks: usize,
    },
    Gains {
        rate: f64,
        ci: Option<(f64, f64)>,
        per_hour: bool,
    },
    Held {
        level: f64,
        stop_x: f64,
        per_hour: bool,
    },
    GrewThenHeld,
    NoGrowth {
        min: f64,
        ci: Option<(f64, f64)>,
    },
    /// The pool's processes gain in all, but no task leaves objects behind late.
    PoolOnce {
        lives: usize,
        rate: f64,
        per_hour: bool,
    },
    Undecided {
        rerun: Option<usize>,
        per_hour: bool,
    },
}

/// How a clause joins what came before: "…, but …" (it took a leak's lower end to the
/// threshold) or "…; …".
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Join {
    But,
    Then,
}

/// What a widening did, as a clause.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Clause {
    /// If it speeds up, its end may reach `to`.
    SpeedsUp { to: f64 },
    /// As it slows down, its end may be as low as `to`.
    SlowsDown { to: f64 },
    /// Without its first `points` (far below the line), its end may be as low as `to`.
    WarmUp { points: usize, to: f64 },
    /// The last point gave back `gave_back`: `line` with it, at least `kept` kept.
    LastDrop {
        gave_back: f64,
        line: f64,
        kept: f64,
    },
    /// The old generation grew `promoted` with no collection of it since: its end may be as
    /// low as `to`.
    Promoted { promoted: f64, to: f64 },
    /// `grew` came while leakwatch's class histograms ran: its end may be as low as `to`.
    Histograms { grew: f64, to: f64 },
}

/// What the sampling adds, said last.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Aside {
    /// The command was over before it could be read in `unseen` of `total` runs.
    UnseenRuns { unseen: usize, total: usize },
    /// A live heap is seen after collections: `points` of `samples` samples followed one.
    SeenAtCollections { points: usize, samples: usize },
    /// The attached target exited `after` seconds: a longer session of it cannot be had.
    TargetEnded { after: f64 },
}
