//! The charts of a report, built as `plot::LineChart` / `plot::BarChart` values from an
//! `Analysis` and its rows; `plot` draws them, `write_all` saves them as SVG and PNG.

use std::collections::BTreeMap;

use crate::Analysis;
use crate::fit::{DecidedBy, PlateauInfo, RateFrom, SeriesFit, thin};
use crate::plot::{
    self, BarChart, FitOverlay, Line, LineChart, ModelLine, ModelStyle, PlotError, YUnit,
};
use crate::series::{Metric, Series, XAxis};
use crate::store::Scope;
use crate::units::format_signed_bytes;

/// At most this many processes get a line of their own; the fastest growing are kept.
const MAX_PROCESS_LINES: usize = 20;

/// One chart of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    pub kind: Kind,
    /// The scope the chart is about.
    pub scope: Scope,
    /// File name without extension, e.g. `survivors-pss`: `.svg` and `.png` are added.
    pub stem: String,
    /// A sentence saying what the chart shows (alt text and caption).
    pub caption: String,
    pub chart: Chart,
}

/// What a chart shows, so a report can place it in the right section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A headline series with its fit.
    Headline,
    /// RSS, PSS, USS and shared of the main scope.
    MemoryKinds,
    /// One line per process of a scope.
    Processes,
    /// Growth per mapping.
    Mappings,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Chart {
    /// Boxed: a line chart is several times the size of a bar chart.
    Line(Box<LineChart>),
    Bar(BarChart),
}

impl Plot {
    pub fn svg(&self) -> Result<String, PlotError> {
        match &self.chart {
            Chart::Line(c) => plot::line_chart_svg(c),
            Chart::Bar(c) => plot::bar_chart_svg(c),
        }
    }

    /// The chart as PNG bytes.
    pub fn png(&self) -> Result<Vec<u8>, PlotError> {
        match &self.chart {
            Chart::Line(c) => plot::line_chart_png(c),
            Chart::Bar(c) => plot::bar_chart_png(c),
        }
    }
}

/// A scope as a file name part: `pid:4242` → `pid-4242`.
pub fn file_safe(scope: Scope) -> String {
    scope
        .to_string()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// `pss_bytes` → `pss`, for file names.
fn metric_stem(m: Metric) -> &'static str {
    m.name().trim_end_matches("_bytes")
}

/// How x values are shown: runs as they are; seconds as hours when the session spans more than
/// two hours, as minutes when more than two minutes, else as seconds.
#[derive(Debug, Clone, Copy)]
struct XScale {
    /// x units (runs or seconds) per shown unit.
    per_unit: f64,
    label: &'static str,
}

fn x_scale(x: XAxis, span_s: f64) -> XScale {
    match x {
        XAxis::Run => XScale {
            per_unit: 1.0,
            label: "run",
        },
        XAxis::Seconds if span_s > 2.0 * 3600.0 => XScale {
            per_unit: 3600.0,
            label: "time (h)",
        },
        XAxis::Seconds if span_s > 120.0 => XScale {
            per_unit: 60.0,
            label: "time (min)",
        },
        XAxis::Seconds => XScale {
            per_unit: 1.0,
            label: "time (s)",
        },
    }
}

impl XScale {
    fn points(&self, points: &[(f64, f64)]) -> Vec<(f64, f64)> {
        points
            .iter()
            .map(|&(x, y)| (x / self.per_unit, y))
            .collect()
    }
}

fn y_unit(m: Metric) -> YUnit {
    if m.is_bytes() {
        YUnit::Bytes
    } else {
        YUnit::Count
    }
}

/// Every chart of the report, in report order: one per headline series, then the memory
/// kinds of the main scope, the processes of multi-process scopes, and the mappings.
pub fn build(a: &Analysis) -> Vec<Plot> {
    let mut plots: Vec<Plot> = a.headlines().filter_map(|f| headline(a, f)).collect();
    if let Some(main) = a.headlines().next() {
        plots.extend(memory_kinds(a, main));
    }
    for f in a.headlines() {
        plots.extend(processes(a, f));
    }
    for (i, at) in a
        .attribution
        .iter()
        .filter(|at| !at.mappings.is_empty())
        .enumerate()
    {
        let stem = if i == 0 {
            "mappings".to_string()
        } else {
            format!("mappings-{}", file_safe(at.series))
        };
        let several_pids = at.mappings.iter().any(|m| m.pid != at.mappings[0].pid);
        let bars = at
            .mappings
            .iter()
            .map(|m| {
                let label = if several_pids {
                    format!("{} (pid {})", m.mapping, m.pid)
                } else {
                    m.mapping.clone()
                };
                (label, m.growth_bytes as f64)
            })
            .collect();
        plots.push(Plot {
            kind: Kind::Mappings,
            scope: at.series,
            stem,
            caption: format!(
                "{}: RSS growth per mapping, first to last smaps snapshot",
                at.series
            ),
            chart: Chart::Bar(BarChart {
                title: format!("{}: mappings that grew most", at.series),
                y_unit: YUnit::Bytes,
                bars,
            }),
        });
    }
    plots
}

fn series_of(a: &Analysis, scope: Scope, metric: Metric) -> Option<&Series> {
    a.series
        .iter()
        .find(|s| s.scope == scope && s.metric == metric)
}

/// The headline series with its fitted line, 95% CI band and warm-up.
fn headline(a: &Analysis, f: &SeriesFit) -> Option<Plot> {
    let s = series_of(a, f.scope, f.metric)?;
    let scale = x_scale(f.x, a.duration_s);
    let k = scale.per_unit;
    // Every sample while a chart can show them (a saw-tooth's teeth), means
    // of consecutive ones beyond.
    let points = if s.points.len() <= MAX_CHART_POINTS {
        s.points.clone()
    } else {
        thin(&s.points)
    };
    // The fit left out the warm-up: it starts at the first point after it.
    let fit_from = s.points.get(f.warmup).map(|p| p.0);
    let fit_to = s.points.last().map(|p| p.0);
    let model = model_lines(f, k);
    // The chart draws the model the verdict used: segments or troughs when
    // it used them, else the least-squares line whose interval was judged —
    // over the end alone when the end rate was read there (a second half, a
    // last segment), over every point after warm-up otherwise.
    let line = match (end_line(f), f.slope, fit_from) {
        (Some((slope, from)), ..) => Some((END_FIT, slope, None, from)),
        (None, Some(slope), Some(from)) => Some(("fit", slope, f.intercept, from)),
        _ => None,
    };
    let overlay = match (line, fit_to) {
        (Some((name, slope, intercept, from)), Some(to))
            if model.is_empty() && f.verdict != crate::fit::Verdict::Plateau =>
        {
            // The mean of the fitted points: the band's pivot, and where the end's
            // least-squares line passes (its intercept is not kept).
            let fitted = s.points.iter().filter(|p| p.0 >= from);
            let (sx, sy, n) = fitted.fold((0.0, 0.0, 0usize), |(sx, sy, n), p| {
                (sx + p.0, sy + p.1, n + 1)
            });
            let mean = (n > 0).then(|| (sx / n as f64, sy / n as f64));
            // y = intercept + slope·x = intercept + (slope·k)·(x/k).
            let intercept = intercept.or(mean.map(|(mx, my)| my - slope * mx));
            // The line is the model the rate was read on (its interval the band), or the
            // whole line beside a rate read elsewhere (a curve's end): then the band is the
            // line's own interval and the judged rate a legend row of its own.
            let line_judged = name == END_FIT
                || f.end_rate
                    .is_none_or(|e| matches!(e.from, RateFrom::Line | RateFrom::Staircase));
            intercept.map(|intercept| FitOverlay {
                name: name.to_string(),
                slope: slope * k,
                intercept,
                x_from: from / k,
                x_to: to / k,
                // The interval the verdict judged (the line's, or wider where the shape
                // widened it: a staircase's phase, a curve that speeds up), as the text says.
                slope_ci95: f
                    .end_rate
                    .filter(|_| line_judged)
                    .map(|e| e.ci95)
                    .filter(|(lo, hi)| lo.is_finite() && hi.is_finite())
                    .or(f.slope_ci95)
                    .map(|(lo, hi)| (lo * k, hi * k)),
                x_mean: mean.map(|(mx, _)| mx / k),
                // Rates per run, or per hour as the text says them, whatever the axis.
                legend_per: (f.x == XAxis::Seconds)
                    .then(|| (f.x.per_rate_unit() / k, f.x.rate_unit().to_string())),
                judged_rate: f
                    .end_rate
                    .filter(|e| !line_judged && e.rate.is_finite())
                    .map(|e| (JUDGED.to_string(), e.rate * k)),
            })
        }
        _ => None,
    };
    let drawn = if overlay.as_ref().is_some_and(|o| o.name == END_FIT) {
        " with the line of its end and its 95% CI"
    } else if overlay.is_some() {
        " with the fitted line and its 95% CI"
    } else if f.decided_by == crate::fit::DecidedBy::Troughs {
        " with its troughs, which the verdict judged"
    } else if !model.is_empty() {
        " with the segments the verdict judged"
    } else {
        ""
    };
    let per = if f.x == XAxis::Run {
        "per run"
    } else {
        "over time"
    };
    let name = scope_name(&a.labels, f.scope);
    Some(Plot {
        kind: Kind::Headline,
        scope: f.scope,
        stem: format!("{}-{}", file_safe(f.scope), metric_stem(f.metric)),
        caption: format!(
            "{name} {} {per}{drawn} ({})",
            f.metric.label(),
            f.verdict.as_str()
        ),
        chart: Chart::Line(Box::new(LineChart {
            title: format!("{name} {} {per}: {}", f.metric.label(), f.verdict.as_str()),
            x_label: scale.label.to_string(),
            y_label: f.metric.label().to_string(),
            y_unit: y_unit(f.metric),
            lines: vec![Line {
                name: format!("{} {}", f.scope, f.metric.label()),
                points: scale.points(&points),
            }],
            fit: overlay,
            warmup_until: fit_from.filter(|_| f.warmup > 0).map(|x| x / k),
            model,
            min_y_span: noise_span(f, &s.points),
            markers: markers(f, k),
        })),
    })
}

/// The line an end rate was read on, when it is not the whole line: the
/// least-squares line from `end_start_x` on (a second half, a last segment),
/// as (slope, from x).
fn end_line(f: &SeriesFit) -> Option<(f64, f64)> {
    let from = f.end_rate?.from;
    if !matches!(from, RateFrom::SecondHalf | RateFrom::EndSegment) {
        return None;
    }
    Some((f.end_slope?, f.end_start_x?))
}

/// The legend's name of a line over the series' end (`end_line`).
const END_FIT: &str = "end fit";

/// The legend's name of the judged rate beside a line it was not read on.
const JUDGED: &str = "judged rate at the end";

/// A scope as charts name it: an `analyze` series with its label set
/// (`series:0 {job="api",pod="api-7d9f"}`, cut to fit a title), others as
/// they are.
fn scope_name(labels: &BTreeMap<u32, String>, scope: Scope) -> String {
    const MAX_LABELS: usize = 40;
    match scope {
        Scope::Series(i) => match labels.get(&i) {
            Some(labels) if labels.chars().count() > MAX_LABELS => {
                let cut: String = labels.chars().take(MAX_LABELS - 1).collect();
                format!("{scope} {cut}…")
            }
            Some(labels) => format!("{scope} {labels}"),
            None => scope.to_string(),
        },
        _ => scope.to_string(),
    }
}

/// Most points a chart draws one by one (a day of 1 s samples is averaged).
const MAX_CHART_POINTS: usize = 4000;

/// The segments of a step or plateau series (a NaN between them: no line
/// across a jump), or the troughs of a saw-tooth with their line.
fn model_lines(f: &SeriesFit, k: f64) -> Vec<ModelLine> {
    let m = &f.model;
    let mut out = Vec::new();
    if !m.segments.is_empty() {
        let mut points = Vec::new();
        for seg in &m.segments {
            points.push((seg.x_start / k, seg.level_start));
            points.push((seg.x_end / k, seg.level_end));
            points.push((seg.x_end / k, f64::NAN));
        }
        out.push(ModelLine {
            name: "segments".into(),
            points,
            style: ModelStyle::Steps,
        });
    }
    if let (Some((slope, intercept)), Some(first), Some(last)) =
        (m.trough_line, m.troughs.first(), m.troughs.last())
    {
        out.push(ModelLine {
            name: "troughs (lowest of each window)".into(),
            points: m.troughs.iter().map(|&(x, y)| (x / k, y)).collect(),
            style: ModelStyle::Envelope,
        });
        let bytes = f.metric.is_bytes();
        out.push(
            match f.plateau.filter(|_| f.decided_by == DecidedBy::Troughs) {
                // The floor rose, then held: the two pieces the verdict judged.
                Some(PlateauInfo {
                    fill_rate: Some(fill),
                    stop_x,
                    level,
                }) => {
                    let end = f.end_slope.unwrap_or(0.0);
                    ModelLine {
                        name: format!("troughs: {}, then held", f.x.format_rate(fill, bytes)),
                        points: vec![
                            (first.0 / k, level - fill * (stop_x - first.0)),
                            (stop_x / k, level),
                            (last.0 / k, level + end * (last.0 - stop_x)),
                        ],
                        style: ModelStyle::Steps,
                    }
                }
                _ => ModelLine {
                    name: format!("troughs' line ({})", f.x.format_rate(slope, bytes)),
                    points: [first.0, last.0]
                        .iter()
                        .map(|&x| (x / k, intercept + slope * x))
                        .collect(),
                    style: ModelStyle::Steps,
                },
            },
        );
    }
    out
}

/// Where a plateau stopped, and the steps, marked on the x axis — steps only
/// when the chart draws the segments they join (what the model found).
fn markers(f: &SeriesFit, k: f64) -> Vec<(f64, String)> {
    let drawn = if f.model.segments.is_empty() {
        &[][..]
    } else {
        &f.steps[..]
    };
    let mut out: Vec<(f64, String)> = drawn
        .iter()
        .map(|s| (s.x / k, format!("step {}", format_signed_bytes(s.bytes))))
        .collect();
    if let Some(p) = f.plateau
        && p.fill_rate.is_some()
    {
        // Worded as the report's text words it ("until 3m10s").
        let at = crate::phrase::at_x(f.x, p.stop_x);
        out.retain(|m| (m.0 - p.stop_x / k).abs() > f64::EPSILON);
        out.push((p.stop_x / k, format!("plateau from {at}")));
    }
    out
}

/// RSS, PSS, USS and shared of one scope on one chart: where they part is where pages are
/// shared (RSS − USS) and how that sharing is split (PSS).
fn memory_kinds(a: &Analysis, main: &SeriesFit) -> Option<Plot> {
    let kinds = [
        Metric::RssBytes,
        Metric::PssBytes,
        Metric::UssBytes,
        Metric::SharedBytes,
    ];
    let scale = x_scale(main.x, a.duration_s);
    let lines: Vec<Line> = kinds
        .iter()
        .filter_map(|&m| series_of(a, main.scope, m))
        .map(|s| Line {
            name: s.metric.label().to_string(),
            points: scale.points(&thin(&s.points)),
        })
        .collect();
    // With RSS alone (no deep samples) this would repeat the headline chart.
    if lines.len() < 2 {
        return None;
    }
    let per = if main.x == XAxis::Run {
        "per run"
    } else {
        "over time"
    };
    Some(Plot {
        kind: Kind::MemoryKinds,
        scope: main.scope,
        stem: "memory-kinds".to_string(),
        caption: format!("{}: RSS, PSS, USS and shared memory {per}", main.scope),
        chart: Chart::Line(Box::new(LineChart {
            title: format!("{}: RSS vs PSS vs USS vs shared", main.scope),
            x_label: scale.label.to_string(),
            y_label: "memory".to_string(),
            y_unit: YUnit::Bytes,
            lines,
            fit: None,
            warmup_until: None,
            model: Vec::new(),
            min_y_span: None,
            markers: Vec::new(),
        })),
    })
}

/// How many practical thresholds (each side) a headline chart's y axis
/// spans at least: a change within them is one the verdict would not call
/// growth however long it lasted.
const THRESHOLDS_EACH_SIDE: f64 = 3.0;

/// How many noise sds (each side): ±2 sd hold 95% of the series' noise.
const SDS_EACH_SIDE: f64 = 2.0;

/// The narrowest y range of a series' chart (bytes or a count): ± a few
/// times what the verdict counts as noise — the practical threshold (64 KiB,
/// or 0.1% of the level: `fit::MIN_SLOPE_BYTES`, the default
/// `min_slope_fraction`) or the noise sd of what was judged (the troughs of
/// a saw-tooth, else the series), whichever is larger. A 4 KiB blip on
/// 28 MiB then shows as a blip, not as a cliff.
fn noise_span(f: &SeriesFit, points: &[(f64, f64)]) -> Option<f64> {
    let judged: Vec<f64> = if f.decided_by == crate::fit::DecidedBy::Troughs {
        f.model.troughs.iter().map(|p| p.1).collect()
    } else {
        points.iter().map(|p| p.1).collect()
    };
    let sd = crate::fit::changepoint::noise_sd(&judged).unwrap_or(0.0);
    let practical = if f.metric.is_bytes() {
        crate::fit::MIN_SLOPE_BYTES.max(0.001 * f.mean_level.abs())
    } else {
        // Counts (fds, threads) move by whole units.
        1.0
    };
    Some(2.0 * (THRESHOLDS_EACH_SIDE * practical).max(SDS_EACH_SIDE * sd))
}

/// One line per process (pid and start time) of a scope with more than one.
fn processes(a: &Analysis, f: &SeriesFit) -> Option<Plot> {
    // A point per run (the last sample of it, or the peak for `command`), as
    // in the scope's own series; per sample over time.
    let lives: Vec<(String, Vec<(f64, f64)>)> = a
        .lives
        .iter()
        .filter(|life| life.scope == f.scope)
        .map(|life| {
            (
                format!("{} {}", life.pid, life.comm),
                life.points(f.metric).unwrap_or_default(),
            )
        })
        .filter(|(_, points)| !points.is_empty())
        .collect();
    // Lines need two processes that each have a history: `command` starts a new process every
    // run, and a chart of lone dots says nothing the headline chart does not.
    let total = lives.len();
    if lives.iter().filter(|(_, p)| p.len() >= 2).count() < 2 {
        return None;
    }
    let mut lines: Vec<(f64, Line)> = lives
        .into_iter()
        .map(|(name, points)| {
            let growth = match (points.first(), points.last()) {
                (Some(a), Some(b)) => b.1 - a.1,
                _ => 0.0,
            };
            (growth, Line { name, points })
        })
        .collect();
    lines.sort_by(|a, b| b.0.total_cmp(&a.0));
    lines.truncate(MAX_PROCESS_LINES);
    let scale = x_scale(f.x, a.duration_s);
    let shown = if total > MAX_PROCESS_LINES {
        format!(" (the {MAX_PROCESS_LINES} that grew most of {total})")
    } else {
        String::new()
    };
    Some(Plot {
        kind: Kind::Processes,
        scope: f.scope,
        stem: format!("processes-{}", file_safe(f.scope)),
        caption: format!(
            "{}: {} per process{shown}, fastest growing first",
            f.scope,
            f.metric.label()
        ),
        chart: Chart::Line(Box::new(LineChart {
            title: format!("{}: {} per process{shown}", f.scope, f.metric.label()),
            x_label: scale.label.to_string(),
            y_label: f.metric.label().to_string(),
            y_unit: y_unit(f.metric),
            lines: lines
                .into_iter()
                .map(|(_, l)| Line {
                    points: scale.points(&thin(&l.points)),
                    ..l
                })
                .collect(),
            fit: None,
            warmup_until: None,
            model: Vec::new(),
            min_y_span: noise_span(f, &[]),
            markers: Vec::new(),
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_become_file_names() {
        assert_eq!(file_safe(Scope::Pid(4242)), "pid-4242");
        assert_eq!(file_safe(Scope::Survivors), "survivors");
    }

    #[test]
    fn an_analyzed_series_is_named_by_its_labels_in_charts() {
        let labels = BTreeMap::from([
            (0, r#"{container="api",pod="api-7d9f"}"#.to_string()),
            (1, format!(r#"{{pod="{}"}}"#, "x".repeat(60))),
        ]);
        assert_eq!(
            scope_name(&labels, Scope::Series(0)),
            r#"series:0 {container="api",pod="api-7d9f"}"#
        );
        let long = scope_name(&labels, Scope::Series(1));
        assert!(
            long.ends_with('…') && long.chars().count() == 9 + 40,
            "{long}"
        );
        assert_eq!(scope_name(&labels, Scope::Series(2)), "series:2");
        assert_eq!(scope_name(&labels, Scope::Target), "target");
    }

    /// A process attached for `seconds`, sampled every second, whose anon is `anon(t)` (RSS
    /// 4 MiB more).
    fn attached(comm: &str, seconds: u64, anon: impl Fn(f64) -> f64) -> Analysis {
        use crate::store::{Row, Tier};
        let mut builder = crate::series::Builder::new();
        for i in 0..seconds {
            let anon = anon(i as f64) as u64;
            builder.push(Row {
                sample: i,
                t_seconds: i as f64,
                pid: 42,
                start_time: 1,
                comm: comm.into(),
                tier: Tier::Cheap,
                rss_bytes: Some(anon + 4 * 1024 * 1024),
                anon_bytes: Some(anon),
                ..Row::new(Scope::Target)
            });
        }
        crate::fit::analyse(builder.finish(None), &crate::fit::FitOptions::default())
    }

    /// The headline chart among `plots`.
    fn headline_chart(plots: &[Plot]) -> &LineChart {
        match plots
            .iter()
            .find(|p| p.kind == Kind::Headline)
            .map(|p| &p.chart)
        {
            Some(Chart::Line(c)) => c,
            _ => panic!("no headline chart"),
        }
    }

    /// An attached process holding 28 MiB, sampled every second for a minute, with one
    /// 4 KiB blip at 30 s (an axis fitted to the data alone spans 28.109–28.113 MiB).
    fn steady_with_a_blip() -> Analysis {
        attached("steady", 60, |t| {
            28.0 * 1024.0 * 1024.0 + if t == 30.0 { 4096.0 } else { 0.0 }
        })
    }

    #[test]
    fn a_headline_chart_is_never_narrower_than_the_noise_and_reads_per_hour() {
        let a = steady_with_a_blip();
        let plots = build(&a);
        let c = headline_chart(&plots);
        // ± 3 × the 64 KiB practical threshold at least: the blip is 1% of the height.
        let min = c.min_y_span.unwrap();
        assert!(min >= 6.0 * 64.0 * 1024.0, "{min}");
        assert!(4096.0 / min < 0.011, "{min}");
        // Rates per hour in the legend, as on stderr; never "per s".
        let svg = plots[0].svg().unwrap();
        assert!(svg.contains(" per h"), "{svg}");
        assert!(
            !svg.contains(" per s<") && !svg.contains(" per s "),
            "{svg}"
        );
    }

    /// A JVM attached 90 s whose cache filled for 25 s and then held (anon from a real
    /// G1 heap: +10 MiB over 5 s, flat, +56 MiB at 24–25 s, then +7 KiB and +164 KiB): the
    /// verdict reads the end after the fill, and the chart draws that end's line, not one
    /// through the fill (+2.60 GiB/h beside a verdict of +5.10 MiB/h).
    #[test]
    fn a_chart_draws_the_end_the_verdict_read() {
        const MIB: f64 = 1024.0 * 1024.0;
        let anon = |t: f64| -> f64 {
            let base = 170.0 * MIB + (t.min(5.0) / 5.0) * 10.0 * MIB;
            let fill = if t >= 25.0 {
                56.0 * MIB
            } else if t >= 24.0 {
                36.0 * MIB
            } else {
                0.0
            };
            let late = if t >= 81.0 {
                171.0 * 1024.0
            } else if t >= 59.0 {
                7.0 * 1024.0
            } else {
                0.0
            };
            base + fill + late
        };
        let a = attached("java", 91, anon);
        let f = a.headlines().next().unwrap();
        let end = f.end_rate.unwrap();
        assert!(
            matches!(
                end.from,
                crate::fit::RateFrom::EndSegment | crate::fit::RateFrom::SecondHalf
            ),
            "{f:?}"
        );
        let plots = build(&a);
        let fit = headline_chart(&plots).fit.as_ref().unwrap();
        assert_eq!(fit.name, END_FIT);
        assert!(fit.x_from >= 24.0, "{fit:?}");
        // The line ends on the data it was fitted to, and is the verdict's slope.
        let at_end = fit.intercept + fit.slope * fit.x_to;
        assert!((at_end - anon(90.0)).abs() < 0.5 * MIB, "{fit:?}");
        assert!((fit.slope - f.end_slope.unwrap()).abs() < 1e-6, "{fit:?}");
        // The growth in % beside the rate is the rate's, not the whole line's.
        let line = crate::phrase::verdict_line(&a, f);
        // Over a session shorter than an hour: the growth across it.
        let pct = end.rate * f.x_span / f.mean_level * 100.0;
        let said = format!("{}% in 1m30s", crate::units::format_sig3(pct));
        assert!(line.contains(&said), "{line} ({said})");
    }

    /// A rate read off the drawn line (a curve's slope at its end, where no segments are
    /// drawn): the legend gives that rate in a row of its own, and the band is the line's
    /// own interval, so the chart and the text never give two figures for one rate.
    #[test]
    fn a_rate_read_off_the_line_has_its_own_legend_row() {
        let mut a = attached("speeds-up", 120, |t| 64.0 * 1024.0 * 1024.0 + 30_000.0 * t);
        let i = a.headline[0];
        assert!(a.fits[i].model.segments.is_empty(), "{:?}", a.fits[i]);
        let judged = crate::fit::EndRate {
            rate: 45_000.0,
            ci95: (40_000.0, 50_000.0),
            from: RateFrom::CurveEnd,
            widened_by: Default::default(),
        };
        a.fits[i].end_rate = Some(judged);
        let f = &a.fits[i];
        let plots = build(&a);
        let fit = headline_chart(&plots).fit.as_ref().unwrap();
        let k = x_scale(f.x, a.duration_s).per_unit;
        assert_eq!(fit.judged_rate, Some((JUDGED.to_string(), 45_000.0 * k)));
        let (lo, hi) = fit.slope_ci95.unwrap();
        let (llo, lhi) = f.slope_ci95.unwrap();
        assert!(
            (lo - llo * k).abs() < 1e-6 && (hi - lhi * k).abs() < 1e-6,
            "{fit:?}"
        );
        let svg = plots[0].svg().unwrap();
        assert!(svg.contains(&format!("{JUDGED}: +154 MiB per h")), "{svg}");
        // Read on the line itself, the legend has no such row.
        a.fits[i].end_rate = Some(crate::fit::EndRate {
            from: RateFrom::Line,
            ..judged
        });
        let plots = build(&a);
        assert_eq!(
            headline_chart(&plots).fit.as_ref().unwrap().judged_rate,
            None
        );
    }

    /// A cache that filled 1 MiB/s for 8 s, held, stepped +200 KiB at 17 s and held again
    /// (a Python `lru_cache` of 200 KB values behind HTTP, read per run): the plateau's fill
    /// rate is the rise over everything up to the last change, flat stretch included, and the
    /// verdict line says it is an average.
    #[test]
    fn a_plateau_s_average_fill_says_it_is_an_average() {
        const MIB: f64 = 1024.0 * 1024.0;
        let a = attached("python3", 60, |t| {
            10.0 * MIB + t.min(8.0) * MIB + if t >= 17.0 { 0.2 * MIB } else { 0.0 }
        });
        let f = a.headlines().next().unwrap();
        assert_eq!(f.verdict, crate::fit::Verdict::Plateau, "{f:?}");
        assert_eq!(
            f.rate_from,
            Some(crate::fit::RateFrom::AverageFill),
            "{f:?}"
        );
        let line = crate::phrase::verdict_line(&a, f);
        assert!(line.contains("on average until 17.0s"), "{line}");
    }

    #[test]
    fn time_axis_unit_follows_the_span() {
        assert_eq!(x_scale(XAxis::Seconds, 3.0 * 3600.0).label, "time (h)");
        assert_eq!(x_scale(XAxis::Seconds, 1800.0).label, "time (min)");
        assert_eq!(x_scale(XAxis::Seconds, 90.0).label, "time (s)");
        assert_eq!(x_scale(XAxis::Run, 1e6).label, "run");
    }
}
