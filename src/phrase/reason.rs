//! A verdict's reason in words: the estimator's reading chosen by the verdict it read, then
//! the widenings' clauses, then the asides (`crate::fit::verdict::reason` holds the typed
//! evidence). Rates read per the reason's unit (`+1.00 MiB/run`, `+2.00/h` for counts).

use std::fmt::{self, Display, Formatter};

use crate::fit::Verdict;
use crate::fit::verdict::reason::{
    Aside, Clause, Join, LineRead, Objects, Reading, Reason, SegmentRead, Since, Slope, Trend,
    TroughRead, Undecided, Unfit, Unit,
};
use crate::series::XAxis;
use crate::units::{format_bytes, format_duration, format_p, format_sig3, format_signed_bytes};
use crate::units::{format_signed_count, format_signed_sig3};

impl Display for Reason {
    fn fmt(&self, out: &mut Formatter<'_>) -> fmt::Result {
        let say = Say {
            unit: self.unit,
            thr: self.thr,
        };
        out.write_str(&say.reading(self.read, &self.reading))?;
        for (join, clause) in &self.clauses {
            let joint = match join {
                Join::But => ", but ",
                Join::Then => "; ",
            };
            write!(out, "{joint}{}", say.clause(clause))?;
        }
        for aside in &self.asides {
            write!(out, "; {}", aside_text(aside))?;
        }
        Ok(())
    }
}

/// Numbers in a reason's unit.
struct Say {
    unit: Unit,
    thr: f64,
}

impl Say {
    /// A rate per x unit, in the display unit: `+1.00 MiB/run`.
    fn per_x(&self, v: f64) -> String {
        format!("{}/{}", self.signed(v * self.unit.scale), self.unit.per)
    }

    /// A signed amount of the series' unit: bytes in binary units, or a count.
    fn signed(&self, v: f64) -> String {
        if self.unit.counts {
            format_signed_sig3(v)
        } else {
            format_signed_bytes(v)
        }
    }

    /// |v| in the series' unit.
    fn amount(&self, v: f64) -> String {
        if self.unit.counts {
            format_sig3(v.abs())
        } else {
            format_bytes(v.abs())
        }
    }

    /// A position on the x axis: `run 12` (`x 12` for a bare x), or a duration over time.
    fn at_x(&self, x: f64) -> String {
        match self.unit.per {
            "run" => super::at_x(XAxis::Run, x),
            "x" => format!("x {x:.0}"),
            _ => super::at_x(XAxis::Seconds, x),
        }
    }

    /// `+1.00 MiB/run (+3.7%/run)`: a rate and its share of the level.
    fn slope(&self, s: Slope) -> String {
        let pct = if s.level != 0.0 {
            let p = s.rate / s.level * 100.0 * self.unit.scale;
            let sign = if p >= 0.0 { "+" } else { "" };
            format!("{sign}{}%/{}", format_sig3(p), self.unit.per)
        } else {
            "n/a".into()
        };
        format!("{} ({pct})", self.per_x(s.rate))
    }

    fn since(&self, e: Since) -> String {
        format!("{} since {}", self.per_x(e.rate), self.at_x(e.x))
    }

    fn thr(&self) -> String {
        self.per_x(self.thr)
    }

    fn reading(&self, v: Verdict, r: &Reading) -> String {
        match *r {
            Reading::Unfitted(u) => unfit_text(u),
            Reading::RisingLine { slope } => {
                let slope = self.slope(slope);
                match v {
                    Verdict::Leak => format!("grows {slope}"),
                    Verdict::Inconclusive => {
                        format!("grows {slope}, but the end cannot be fitted on its own")
                    }
                    _ => format!("grows {slope}, below the threshold of {}", self.thr()),
                }
            }
            Reading::Line(ref l) => self.line(v, l),
            Reading::NoTrend {
                trend,
                slope,
                p,
                high,
            } => self.no_trend(v, trend, slope, p, high),
            Reading::Troughs(ref t) => self.troughs(v, t),
            Reading::FewTeeth {
                drops,
                samples,
                min_windows,
                slope,
                ci,
            } => {
                let slope = self.slope(slope);
                match v {
                    Verdict::Inconclusive => format!(
                        "saw-tooth with {drops} drops in {samples} samples: too few teeth to judge the troughs (needs {min_windows} windows of two teeth), and its line {slope} is too uncertain"
                    ),
                    _ => format!(
                        "saw-tooth with {drops} drops in {samples} samples, too few teeth to judge the troughs; its line {slope} (95% CI widened for the teeth {} … {})",
                        self.per_x(ci.0),
                        self.per_x(ci.1)
                    ),
                }
            }
            Reading::TaskSteps {
                per_task,
                processes,
                tasks,
            } => format!(
                "grows {} per task in {processes} processes ({tasks} tasks seen), still late in their lives",
                format_signed_bytes(per_task)
            ),
            Reading::NoCollection { in_use } => {
                let grew = in_use
                    .map(|s| {
                        format!(
                            "; its heap in use grew {} (garbage included)",
                            self.per_x(s)
                        )
                    })
                    .unwrap_or_default();
                format!(
                    "no collection ran while it was watched, so what the program keeps in its heap \
                     is not known yet{grew}; watch it longer or under more load"
                )
            }
            Reading::Objects(o) => objects(o),
            Reading::Segments(seg) => self.segments(v, seg),
        }
    }

    /// The segment estimator's readings.
    fn segments(&self, v: Verdict, r: SegmentRead) -> String {
        match r {
            // Only a no-rise whose end did not rise significantly is read so: an end rate above
            // the threshold is its noise, and said to be (a bare rate above the threshold in
            // a stable reason reads as the leak it is not).
            SegmentRead::NoRise { end } if end.rate > self.thr => format!(
                "no step or rise that matters (its last segment, {}, is within its noise)",
                self.since(end)
            ),
            SegmentRead::NoRise { end } => {
                format!("no step or rise that matters; {}", self.since(end))
            }
            SegmentRead::SmallStep {
                dip,
                up,
                at,
                net,
                end,
            } => self.small_step(dip, (up, at), net, end),
            SegmentRead::RisesAndFalls { down, up, slope } => {
                let (down, up) = (self.amount(down), self.amount(up));
                match v {
                    Verdict::Inconclusive => format!(
                        "rises and falls ({down} down, {up} up in steps and ramps); not a steady trend"
                    ),
                    _ => format!(
                        "rises and falls ({down} down, {up} up); slope {}",
                        self.slope(slope)
                    ),
                }
            }
            SegmentRead::Chunk { line, step_at, end } => format!(
                "grows {} with its step at {} (a heap growing in chunks keeps needing new ones), {}",
                self.per_x(line),
                self.at_x(step_at),
                self.since(end)
            ),
            SegmentRead::EndSegment {
                end,
                before,
                segments,
            } => format!(
                "grows {} (before that {} in {})",
                self.since(end),
                self.per_x(before),
                crate::units::counted(segments as u64, "segment", "segments")
            ),
            SegmentRead::OneStep {
                size,
                at,
                end,
                undecided,
            } => {
                let (size, at) = (self.signed(size), self.at_x(at));
                match v {
                    Verdict::Plateau => {
                        format!(
                            "one-off step of {size} at {at}, not a rate; {}",
                            self.since(end)
                        )
                    }
                    _ => self.noisy_end(format!("one step of {size} at {at}"), end, undecided),
                }
            }
            SegmentRead::SmallChanges {
                rise,
                end,
                undecided,
            } => {
                let rise = self.signed(rise);
                match v {
                    Verdict::Stable => {
                        format!("changes add up to {rise} only; {}", self.since(end))
                    }
                    _ => self.noisy_end(format!("changes add up to {rise} only"), end, undecided),
                }
            }
            SegmentRead::RecurringSteps { steps, every, line } => format!(
                "rises in steps that keep coming: {steps} steps, one every {every:.1} x on average, {} on average",
                self.per_x(line)
            ),
            SegmentRead::Filled {
                fill,
                at,
                end,
                undecided,
            } => {
                let (fill, at) = (self.per_x(fill), self.at_x(at));
                match v {
                    Verdict::Plateau => {
                        format!(
                            "grew {fill} on average until {at}, then {}",
                            self.since(end)
                        )
                    }
                    _ => {
                        self.noisy_end(format!("grew {fill} on average until {at}"), end, undecided)
                    }
                }
            }
            SegmentRead::TooRecent {
                rises,
                line,
                end,
                since,
                grew,
            } => self.too_recent(v, rises, (line, end, since), grew),
        }
    }

    /// One step up that climbs back from a dip, or leaves the level little higher.
    fn small_step(&self, dip: bool, (up, at): (f64, f64), net: f64, end: Since) -> String {
        let what = if dip {
            "a dip and its recovery"
        } else {
            "a step too small to matter"
        };
        format!(
            "{what} ({} up at {}, net {}); {}",
            self.signed(up),
            self.at_x(at),
            self.signed(net),
            self.since(end)
        )
    }

    /// Steps whose last is too recent to tell whether they stopped: the line's rate, and the
    /// end's since `since`.
    fn too_recent(
        &self,
        v: Verdict,
        rises: usize,
        (line, end, since): (f64, f64, f64),
        grew: f64,
    ) -> String {
        match v {
            Verdict::Leak => format!(
                "rises in {rises} steps and between them: {} on average, {} since {}",
                self.per_x(line),
                self.per_x(end),
                self.at_x(since)
            ),
            _ => format!(
                "grew {} in {rises} steps and rises; the last at {}, too recent to tell whether they stopped",
                self.amount(grew),
                self.at_x(since)
            ),
        }
    }

    /// "…, but too noisy to tell whether the end still rises (+1 KiB/run since run 12)".
    fn noisy_end(&self, what: String, end: Since, undecided: Undecided) -> String {
        let why = match undecided {
            Undecided::TooShort => "too short",
            Undecided::TooNoisy => "too noisy",
        };
        format!(
            "{what}, but {why} to tell whether the end still rises ({})",
            self.since(end)
        )
    }

    fn line(&self, v: Verdict, r: &LineRead) -> String {
        let slope = self.slope(r.slope);
        let end = format!("{} in the second half", self.per_x(r.tail));
        let p = format_p(r.p);
        match v {
            // The headline is the end's rate: the reason names it.
            Verdict::Leak if r.kept_pace && r.curve_end => format!(
                "grows {slope}, {p}, and speeds up: {} at the end",
                self.per_x(r.end)
            ),
            Verdict::Leak if r.kept_pace => format!("grows {slope}, {p}, still {end}"),
            Verdict::Leak => format!("grows {end}, slower than {slope} overall"),
            Verdict::Plateau => format!(
                "grew {} until {}, then {end}",
                self.per_x(r.head),
                self.at_x(r.knot)
            ),
            Verdict::Stable => format!("grows {slope}, below the threshold of {}", self.thr()),
            Verdict::Inconclusive => match (r.one_step, r.weak_robust) {
                (Some((jump, at)), _) => format!(
                    "rises {slope}, but as much like one step of {} at {} as like a line",
                    self.signed(jump),
                    self.at_x(at)
                ),
                (None, Some(robust)) => format!(
                    "grows {slope} by least squares, but the robust slope is only {}",
                    self.per_x(robust)
                ),
                (None, None) if r.kept_pace => format!(
                    "grows {slope}, but the 95% CI reaches down to {} (threshold {})",
                    self.per_x(r.end_low),
                    self.thr()
                ),
                (None, None) => {
                    format!("grows {slope}, but too noisy to tell whether it slowed ({end})")
                }
            },
        }
    }

    fn no_trend(&self, v: Verdict, trend: Trend, slope: Slope, p: f64, high: f64) -> String {
        let p = format_p(p);
        let slope = self.slope(slope);
        let why = match trend {
            Trend::RisesButCiHoldsZero { lo, hi } => format!(
                "the trend test says it rises ({p}) but the slope's 95% CI [{}, {}] includes 0",
                self.per_x(lo),
                self.per_x(hi)
            ),
            Trend::RisesButNotInSegments { falls: true } => format!(
                "the trend test says it rises ({p}), but it falls by more than half of what it \
                 rises"
            ),
            Trend::RisesButNotInSegments { falls: false } => format!(
                "the trend test says it rises ({p}), but no step or segment of it rises above \
                 its noise"
            ),
            Trend::Falls => format!("it falls ({p})"),
            Trend::None => format!("no significant trend ({p})"),
        };
        // A rise the test saw is named as such whatever the verdict; one "but" to a sentence,
        // so after it the noise is a new clause.
        let rises = !matches!(trend, Trend::None | Trend::Falls);
        let noise = if rises { "; noise" } else { ", but noise" };
        match v {
            Verdict::Inconclusive => format!(
                "{why}{noise} allows growth up to {} (threshold {})",
                self.per_x(high),
                self.thr()
            ),
            Verdict::Leak => format!("grows {slope}, {p}"),
            _ if rises => format!("{why}: slope {slope}"),
            _ => format!("no significant growth: slope {slope}, {p}"),
        }
    }

    fn troughs(&self, v: Verdict, t: &TroughRead) -> String {
        let troughs = format!(
            "troughs (the lowest sample of each of {} windows) {}, {}; teeth ≈ {} high; mean {}",
            t.windows,
            self.per_x(t.slope),
            format_p(t.p),
            self.amount(t.teeth),
            self.per_x(t.mean)
        );
        let end = self.per_x(t.end);
        match (v, t.stop) {
            (Verdict::Stable, _) => format!("saw-tooth with flat {troughs}"),
            (Verdict::Plateau | Verdict::Leak, Some((fill, at))) => format!(
                "saw-tooth whose troughs rose {} until {}, then {end} ({troughs})",
                self.per_x(fill),
                self.at_x(at)
            ),
            (Verdict::Inconclusive, Some(_)) => format!(
                "saw-tooth whose {troughs}; only {end} at the end: too early to tell whether the floor stopped"
            ),
            (Verdict::Inconclusive, None) => format!(
                "saw-tooth whose {troughs}; too noisy to rule out trough growth up to {} (threshold {})",
                self.per_x(t.high),
                self.thr()
            ),
            _ => format!("saw-tooth whose {troughs}"),
        }
    }

    fn clause(&self, c: &Clause) -> String {
        match *c {
            Clause::SpeedsUp { to } => {
                format!("if it speeds up, its end may reach {}", self.per_x(to))
            }
            Clause::SlowsDown { to } => format!(
                "as it slows down, its end may be as low as {}",
                self.per_x(to)
            ),
            Clause::WarmUp { points, to } => format!(
                "without its first {points} point{} (far below the line: a warm-up?) its end may be as low as {}",
                if points == 1 { "" } else { "s" },
                self.per_x(to)
            ),
            Clause::LastDrop {
                gave_back,
                line,
                kept,
            } => format!(
                "the last point gave back {}: {} with it, at least {} kept",
                self.amount(gave_back),
                self.per_x(line),
                self.per_x(kept.max(0.0))
            ),
            Clause::Promoted { promoted, to } => format!(
                "{} of it was promoted since the old generation was last collected, and may be \
                 garbage: its end may be as low as {} (a full collection tells; --jvm-classes \
                 asks for one)",
                self.amount(promoted),
                self.per_x(to)
            ),
            Clause::Histograms { grew, to } => format!(
                "{} of it came while leakwatch's class histograms ran (--jvm-classes), not \
                 from the program: its end may be as low as {}",
                self.amount(grew),
                self.per_x(to)
            ),
        }
    }
}

fn unfit_text(u: Unfit) -> String {
    match u {
        Unfit::NotRead => "not read".into(),
        Unfit::InvalidThresholds => "invalid thresholds".into(),
        Unfit::LengthsDiffer => "x and y differ in length".into(),
        Unfit::NotFinite => "a sample is not a finite number".into(),
        Unfit::Degenerate => "x does not vary or values overflow".into(),
        Unfit::NoInterval => "too few points for a confidence interval".into(),
        Unfit::TooFew { points, need } => {
            let noun = if points == 1 { "point" } else { "points" };
            format!("only {points} {noun} after warm-up; need at least {need}")
        }
    }
}

fn aside_text(a: &Aside) -> String {
    match *a {
        Aside::UnseenRuns { unseen, total } => {
            format!("the command was over before it could be read in {unseen} of {total} runs")
        }
        Aside::TargetEnded { after } => format!(
            "the target exited after {}, so no longer session of it can decide it",
            crate::units::format_duration(
                std::time::Duration::try_from_secs_f64(after).unwrap_or_default()
            )
        ),
        Aside::SeenAtCollections { points, samples } => format!(
            "the live heap is seen after each collection: {points} of {samples} samples \
             followed one"
        ),
    }
}

/// A type's count, in objects (the classifier's reading is in bytes).
fn objects(o: Objects) -> String {
    let n = format_signed_count;
    let show = |ci: Option<(f64, f64)>| {
        ci.map(|(lo, hi)| format!(" (95% CI {} … {})", n(lo), n(hi)))
            .unwrap_or_default()
    };
    let unit = |per_hour: bool| if per_hour { "h" } else { "run" };
    match o {
        Objects::PerTask {
            per_task,
            ci,
            lives,
            tasks,
        } => format!(
            "gains {} objects per task{} in {lives} processes ({tasks} tasks seen), still late \
             in their lives",
            n(per_task),
            show(Some(ci)),
        ),
        Objects::Gains { rate, ci, per_hour } => format!(
            "gains {} objects/{}{}, still at the end",
            n(rate),
            unit(per_hour),
            show(ci)
        ),
        Objects::Held {
            level,
            stop_x,
            per_hour: true,
        } => format!(
            "gained {level:.0} objects, then held from {} on",
            format_duration(std::time::Duration::from_secs_f64(
                (stop_x * 3600.0).max(0.0)
            ))
        ),
        Objects::Held { level, stop_x, .. } => {
            format!("gained {level:.0} objects, then held from run {stop_x:.0}")
        }
        Objects::GrewThenHeld => "grew, then held".into(),
        Objects::NoGrowth { min, ci } => {
            format!("no growth beyond {min} objects/run{}", show(ci))
        }
        Objects::PoolOnce {
            lives,
            rate,
            per_hour,
        } => format!(
            "the pool's {lives} processes gain {} objects/{} in all, but no task leaves \
             objects behind late in its worker's life (made once per worker?)",
            n(rate),
            unit(per_hour)
        ),
        Objects::Undecided {
            rerun: Some(k),
            per_hour: false,
        } => format!("too few or too noisy runs to tell; --repeat {k} would decide"),
        Objects::Undecided { per_hour: true, .. } => "too short or too noisy to tell".into(),
        Objects::Undecided { .. } => "too few or too noisy runs to tell".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::verdict::reason::Reason;

    const MIB: f64 = 1024.0 * 1024.0;

    fn per_run(read: Verdict, reading: Reading) -> String {
        Reason {
            thr: 64.0 * 1024.0,
            read,
            reading,
            ..Reason::new(Unit {
                per: "run",
                scale: 1.0,
                counts: false,
            })
        }
        .to_string()
    }

    /// Each reading is worded by the verdict its estimator read, with its numbers in the
    /// reason's unit; the widenings' clauses and the asides follow in order.
    #[test]
    fn readings_clauses_and_asides_read_as_one_sentence() {
        let end = Since { rate: 0.0, x: 12.0 };
        let dip = Reading::Segments(SegmentRead::SmallStep {
            dip: true,
            up: 2.0 * MIB,
            at: 5.0,
            net: 0.5 * MIB,
            end,
        });
        assert_eq!(
            per_run(Verdict::Stable, dip),
            "a dip and its recovery (+2.00 MiB up at run 5, net +512 KiB); +0 B/run since run 12"
        );
        // An end rising above the threshold that the segments did not count is their noise.
        let quiet = Reading::Segments(SegmentRead::NoRise { end });
        assert_eq!(
            per_run(Verdict::Stable, quiet),
            "no step or rise that matters; +0 B/run since run 12"
        );
        let noisy = Since { rate: MIB, x: 12.0 };
        let noisy = Reading::Segments(SegmentRead::NoRise { end: noisy });
        assert_eq!(
            per_run(Verdict::Stable, noisy),
            "no step or rise that matters (its last segment, +1.00 MiB/run since run 12, is \
             within its noise)"
        );
        let recent = Reading::Segments(SegmentRead::TooRecent {
            rises: 3,
            line: MIB,
            end: 0.25 * MIB,
            since: 12.0,
            grew: 3.0 * MIB,
        });
        assert_eq!(
            per_run(Verdict::Leak, recent.clone()),
            "rises in 3 steps and between them: +1.00 MiB/run on average, +256 KiB/run since run 12"
        );
        assert_eq!(
            per_run(Verdict::Inconclusive, recent),
            "grew 3.00 MiB in 3 steps and rises; the last at run 12, too recent to tell whether \
             they stopped"
        );
        let mut r = Reason::new(Unit {
            per: "h",
            scale: 3600.0,
            counts: true,
        });
        r.read = Verdict::Leak;
        r.reading = Reading::RisingLine {
            slope: Slope {
                rate: 2.0 / 3600.0,
                level: 0.0,
            },
        };
        r.clauses
            .push((Join::But, Clause::WarmUp { points: 1, to: 0.0 }));
        r.asides.push(Aside::SeenAtCollections {
            points: 3,
            samples: 60,
        });
        assert_eq!(
            r.to_string(),
            "grows +2.00/h (n/a), but without its first 1 point (far below the line: a warm-up?) \
             its end may be as low as +0/h; the live heap is seen after each collection: 3 of 60 \
             samples followed one"
        );
        assert_eq!(
            per_run(
                Verdict::Inconclusive,
                Reading::Unfitted(Unfit::TooFew { points: 1, need: 4 })
            ),
            "only 1 point after warm-up; need at least 4"
        );
        let held = Reading::Objects(Objects::Held {
            level: 700.0,
            stop_x: 0.5,
            per_hour: true,
        });
        assert_eq!(
            per_run(Verdict::Plateau, held),
            "gained 700 objects, then held from 30m00s on"
        );
    }
}
