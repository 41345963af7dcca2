//! Line chart: memory (or a count) against run number or time, one line per process, with
//! the fit or the model lines drawn over the data, markers, the warm-up shaded and a legend
//! that avoids the data.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::frame::{self, Axes, Chart};
use super::layout::{self, Span};
use super::legend::{Corner, Entry, Legend, LegendPlace, Swatch};
use super::markers::{Marks, Room};
use super::output::DrawErr;
use super::overlay::{self, FitContext, FitGeom, ModelGeom};
use super::style::{
    ENVELOPE_W, FIT, MARGIN, MUTED, PALETTE, STEPS_ALPHA, STEPS_W, TICK_PX, WARMUP_FILL, X_AREA,
};
use super::text::{TextMode, Txt, put_text, text_w};
use super::{LineChart, ModelStyle, YUnit};

struct Prepared {
    /// Per line: finite points, sorted by x, y already divided by the unit factor.
    lines: Vec<(String, Vec<(f64, f64)>)>,
    factor: f64,
    y_desc: String,
}

impl Prepared {
    fn points(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.lines.iter().flat_map(|(_, pts)| pts.iter().copied())
    }
}

fn prepare(c: &LineChart) -> Prepared {
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = c
        .lines
        .iter()
        .map(|l| {
            // Non-finite samples can't be placed on an axis; dropping them keeps the rest usable.
            let mut pts: Vec<(f64, f64)> = l
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (l.name.clone(), pts)
        })
        .collect();
    let (factor, unit_name) = match c.y_unit {
        YUnit::Bytes => {
            let max = lines
                .iter()
                .flat_map(|(_, p)| p.iter().map(|(_, y)| y.abs()))
                .fold(0.0f64, f64::max);
            let u = layout::byte_unit_for(max);
            (u.factor, Some(u.name))
        }
        YUnit::Count => (1.0, None),
    };
    for (_, pts) in &mut lines {
        for p in pts.iter_mut() {
            p.1 /= factor;
        }
    }
    let y_desc = match unit_name {
        Some(u) if c.y_label.trim().is_empty() => u.to_string(),
        Some(u) => format!("{} ({u})", c.y_label),
        None => c.y_label.clone(),
    };
    Prepared {
        lines,
        factor,
        y_desc,
    }
}

/// Everything drawn over the data to explain it, in plot units.
struct Overlays {
    fit: Option<FitGeom>,
    model: Vec<ModelGeom>,
}

impl Overlays {
    fn new(c: &LineChart, p: &Prepared) -> Overlays {
        let fit = c.fit.as_ref().and_then(|f| {
            let per = layout::x_unit_name(&c.x_label);
            let cx = FitContext {
                points: p.lines.first().map_or(&[][..], |(_, pts)| pts),
                factor: p.factor,
                y_unit: c.y_unit,
                per: &per,
            };
            overlay::fit_geometry(f, &cx)
        });
        // Without data there is nothing to explain (and no scale to draw a model on).
        let model = if p.points().next().is_some() {
            overlay::model_geometry(&c.model, p.factor)
        } else {
            Vec::new()
        };
        Overlays { fit, model }
    }

    /// Cuts the model lines to the x range, so what lies beyond it neither widens the y
    /// range nor steers the legend.
    fn clip_model(&mut self, xs: Span) {
        let all_y = Span {
            lo: f64::NEG_INFINITY,
            hi: f64::INFINITY,
        };
        for m in &mut self.model {
            m.pieces = m
                .pieces
                .iter()
                .flat_map(|p| overlay::clip_polyline(p, xs, all_y))
                .collect();
        }
    }

    /// Points that must be in view: the fitted line (not its band: a wide CI would flatten
    /// the data; it is clipped instead) and the model lines.
    fn y_points(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        let fit = self.fit.iter().flat_map(|f| f.line.iter().copied());
        fit.chain(self.model.iter().flat_map(ModelGeom::points))
    }

    /// Polylines the legend should not cover.
    fn paths(&self) -> impl Iterator<Item = &[(f64, f64)]> + '_ {
        let fit = self.fit.iter().map(|f| &f.line[..]);
        fit.chain(
            self.model
                .iter()
                .flat_map(|m| m.pieces.iter().map(|v| &v[..])),
        )
    }
}

/// Axes, legend and markers of a line chart, decided before anything is drawn because keeping
/// the legend off the data may mean extending the y range, and marker labels may need rows.
struct Plan {
    has_data: bool,
    xs: Span,
    ys: Span,
    x_ticks: Vec<(f64, String)>,
    y_ticks: Vec<(f64, String)>,
    y_area: u32,
    legend: Legend,
    place: LegendPlace,
    right_col: u32,
    /// Right edge of the shaded warm-up, if any is shown.
    warmup_edge: Option<f64>,
    marks: Marks,
}

pub(crate) fn draw_line_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    c: &LineChart,
) -> Result<(), DrawErr> {
    let body = frame::begin(root, mode, &c.title)?;
    let p = prepare(c);
    let mut o = Overlays::new(c, &p);
    let plan = plan(c, &p, &mut o, body.dim_in_pixel());
    let (xs, ys) = (plan.xs, plan.ys);
    let mut chart = frame::build(
        root,
        &body,
        mode,
        &Axes {
            xs,
            ys,
            x_ticks: &plan.x_ticks,
            y_ticks: &plan.y_ticks,
            x_desc: &c.x_label,
            y_desc: &p.y_desc,
            y_area: plan.y_area,
            top_gap: plan.marks.top_gap(),
            right_col: plan.right_col,
            y_grid: true,
        },
    )?;
    if let Some(edge) = plan.warmup_edge {
        draw_warmup(root, mode, &mut chart, edge, (xs, ys))?;
    }
    if let Some(band) = o.fit.as_ref().and_then(|f| f.band.as_ref()) {
        // plotters does not clip to the plot area, so keep the band inside the y range.
        let clipped: Vec<(f64, f64)> = band
            .iter()
            .map(|(x, y)| (*x, y.clamp(ys.lo, ys.hi)))
            .collect();
        chart.draw_series(std::iter::once(Polygon::new(
            clipped,
            band_color().filled(),
        )))?;
    }
    plan.marks.draw_lines(root, &chart, ys)?;
    draw_lines(&mut chart, &p, c.warmup_until.filter(|w| w.is_finite()))?;
    if let Some(f) = &o.fit {
        let line: Vec<(f64, f64)> = overlay::clip_segment(f.line, ys);
        chart.draw_series(DashedLineSeries::new(line, 9, 6, FIT.stroke_width(2)))?;
    }
    draw_model(&mut chart, &o.model, (xs, ys))?;
    plan.marks.draw_labels(root, mode, &chart, ys)?;
    if !plan.has_data {
        frame::centre_note(root, mode, &chart, "no data")?;
    }
    if !plan.legend.is_empty() {
        let (px, py) = chart.plotting_area().get_pixel_range();
        let at = plan.legend.origin(plan.place, px, py);
        plan.legend.draw(root, mode, at)?;
    }
    Ok(())
}

/// The CI band's fill: the first series' hue, light enough to read the data through.
fn band_color() -> RGBAColor {
    PALETTE[0].mix(0.22)
}

fn plan(c: &LineChart, p: &Prepared, o: &mut Overlays, (body_w, body_h): (u32, u32)) -> Plan {
    let has_data = p.points().next().is_some();
    let integral = has_data && p.points().all(|(x, _)| x.fract() == 0.0 && x.abs() < 1e15);
    let fit_pts = || o.fit.iter().flat_map(|f| f.line.iter().copied());
    let x_data = layout::extent(p.points().chain(fit_pts()).map(|(x, _)| x));
    let xs = layout::x_span(x_data, integral);
    o.clip_model(xs);
    let y_data = layout::extent(p.points().chain(o.y_points()).map(|(_, y)| y));
    let mut ys = layout::at_least(
        layout::y_span(y_data),
        y_data,
        c.min_y_span.map(|m| m / p.factor),
    );
    let mut x_ticks = x_axis_ticks(xs, integral, f64::from(body_w) * 0.8);
    let warmup_edge = c
        .warmup_until
        .filter(|w| w.is_finite() && has_data)
        .and_then(|w| warmup_edge(p, w, xs));
    // Marker labels go in rows above the plot; where they land depends on the final plot
    // width, so they are laid out once for the estimates below and again at the end.
    let marks_for = |y_area: u32, right_col: u32| {
        if !has_data {
            return Marks::none();
        }
        let to_px = plot_x(body_w, y_area, right_col, xs);
        let taken = warmup_edge.map(|e| warmup_label_span(to_px(xs.lo), to_px(e)));
        let room = Room {
            canvas_w: body_w as i32,
            to_px,
            taken,
        };
        Marks::layout(&c.markers, xs, &room)
    };

    let legend = Legend::new(legend_entries(p, o), body_h);
    let (place, right_col) = if legend.is_empty() {
        (LegendPlace::Inside(Corner::UpperLeft), 0)
    } else {
        // Plot size estimated from the fixed layout; the y labels are not final yet.
        let (y_ticks0, _) = layout::nice_ticks(ys, 7, false);
        let y_area0 = frame::y_area_width(
            &y_ticks0
                .iter()
                .map(|v| (*v, format!("{v:.1}")))
                .collect::<Vec<_>>(),
        );
        let top_gap = marks_for(y_area0, 0).top_gap();
        let plot_w = body_w as f64 - (y_area0 + 2 * MARGIN) as f64;
        let plot_h = body_h as f64 - (top_gap + X_AREA + MARGIN) as f64;
        let paths = p.lines.iter().map(|(_, pts)| &pts[..]).chain(o.paths());
        let data_top = y_data.map(|(_, hi)| hi);
        legend.place((plot_w, plot_h), xs, &mut ys, data_top, paths)
    };

    let (y_ticks, y_step) = layout::nice_ticks(ys, 7, false);
    let y_dec = layout::decimals_for_step(y_step);
    let mut y_ticks: Vec<(f64, String)> = y_ticks
        .iter()
        .map(|v| (*v, layout::tick_label(*v, y_dec)))
        .collect();
    if !has_data {
        // A placeholder 0..1 scale would only suggest values that don't exist.
        x_ticks.clear();
        y_ticks.clear();
    }
    let y_area = frame::y_area_width(&y_ticks);
    Plan {
        has_data,
        xs,
        ys,
        x_ticks,
        y_ticks,
        y_area,
        legend,
        place,
        right_col,
        warmup_edge,
        marks: marks_for(y_area, right_col),
    }
}

/// Where x lands on the canvas for a plot between the y label column and the right margin
/// (what [`frame::build`] will make of these sizes, to a pixel or so).
fn plot_x(body_w: u32, y_area: u32, right_col: u32, xs: Span) -> impl Fn(f64) -> i32 {
    let left = f64::from(MARGIN + y_area);
    let right = f64::from(body_w) - f64::from(MARGIN + right_col);
    move |x| (left + (right - left) * (x - xs.lo) / xs.len()).round() as i32
}

/// One row per named series, then the fit and its band, then the model lines.
fn legend_entries(p: &Prepared, o: &Overlays) -> Vec<Entry> {
    let mut entries: Vec<Entry> = p
        .lines
        .iter()
        .enumerate()
        .map(|(i, (name, _))| Entry::series(name, PALETTE[i % PALETTE.len()]))
        .collect();
    if let Some(f) = &o.fit {
        entries.push(Entry {
            label: f.label.clone(),
            swatch: Swatch::Dashed(FIT, 2),
        });
        if let Some(l) = &f.band_label {
            entries.push(Entry {
                label: l.clone(),
                swatch: Swatch::Band(band_color()),
            });
        }
        if let Some(l) = &f.judged_label {
            entries.push(Entry {
                label: l.clone(),
                swatch: Swatch::None,
            });
        }
    }
    // A model with nothing in view gets no row.
    for m in o.model.iter().filter(|m| !m.pieces.is_empty()) {
        let swatch = match m.style {
            ModelStyle::Steps => Swatch::Solid(m.color.mix(STEPS_ALPHA), STEPS_W),
            ModelStyle::Envelope => Swatch::Dashed(m.color, ENVELOPE_W),
        };
        entries.push(Entry {
            label: m.label.clone(),
            swatch,
        });
    }
    entries
}

/// X ticks: as many as read comfortably (runs get more, they are short integers), reduced
/// until the labels fit side by side in `avail_px` with a gap.
fn x_axis_ticks(xs: Span, integral: bool, avail_px: f64) -> Vec<(f64, String)> {
    let mut target = if integral { 16 } else { 9 };
    loop {
        let (ticks, step) = layout::nice_ticks(xs, target, integral);
        let dec = layout::decimals_for_step(step);
        let text: Vec<(f64, String)> = ticks
            .iter()
            .map(|v| (*v, layout::tick_label(*v, dec)))
            .collect();
        let widest = text
            .iter()
            .map(|(_, s)| f64::from(text_w(TICK_PX, s)))
            .fold(0.0, f64::max);
        if target <= 2 || text.len() as f64 * (widest + 16.0) <= avail_px {
            return text;
        }
        target -= 1;
    }
}

/// Right edge of the warm-up shading: halfway between the last warm-up point and the first
/// real one, so the boundary visibly separates the two groups. `None` if nothing is shown.
fn warmup_edge(p: &Prepared, until: f64, xs: Span) -> Option<f64> {
    let before = p
        .points()
        .map(|(x, _)| x)
        .filter(|x| *x < until)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    let after = p
        .points()
        .map(|(x, _)| x)
        .filter(|x| *x >= until)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
    let edge = match (before, after) {
        (Some(b), Some(a)) => (a + b) / 2.0,
        _ => until,
    }
    .clamp(xs.lo, xs.hi);
    (before.is_some() && edge > xs.lo).then_some(edge)
}

const WARMUP_LABEL: &str = "warm-up";

/// Pixel span of the "warm-up" label over a band from `left` to `right`: centred over the
/// band, but never past the canvas edge.
fn warmup_label_span(left: i32, right: i32) -> (i32, i32) {
    let half = text_w(TICK_PX, WARMUP_LABEL) as i32 / 2;
    let cx = ((left + right) / 2).max(half + 2);
    (cx - half, cx + half)
}

/// Shades the warm-up up to `edge` and labels it above the plot.
fn draw_warmup<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    chart: &mut Chart<'_, DB>,
    edge: f64,
    (xs, ys): (Span, Span),
) -> Result<(), DrawErr> {
    chart.draw_series(std::iter::once(Rectangle::new(
        [(xs.lo, ys.lo), (edge, ys.hi)],
        WARMUP_FILL.filled(),
    )))?;
    let (left, _) = chart.backend_coord(&(xs.lo, ys.hi));
    let (right, top) = chart.backend_coord(&(edge, ys.hi));
    let (a, b) = warmup_label_span(left, right);
    put_text(
        root,
        mode,
        Txt::new(TICK_PX, MUTED, HPos::Center, VPos::Bottom),
        WARMUP_LABEL,
        ((a + b) / 2, top - 5),
    )
}

/// The model lines over the data, clipped to the plot.
fn draw_model<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    model: &[ModelGeom],
    (xs, ys): (Span, Span),
) -> Result<(), DrawErr> {
    for m in model {
        let pieces = m
            .pieces
            .iter()
            .flat_map(|p| overlay::clip_polyline(p, xs, ys));
        for piece in pieces {
            if let [p] = piece[..] {
                let r = STEPS_W as i32;
                chart.draw_series(std::iter::once(Circle::new(p, r, m.color.filled())))?;
                continue;
            }
            match m.style {
                // Slightly see-through, so the data points it runs over stay visible.
                ModelStyle::Steps => chart.draw_series(LineSeries::new(
                    piece,
                    m.color.mix(STEPS_ALPHA).stroke_width(STEPS_W),
                ))?,
                ModelStyle::Envelope => chart.draw_series(DashedLineSeries::new(
                    piece,
                    10,
                    6,
                    m.color.stroke_width(ENVELOPE_W),
                ))?,
            };
        }
    }
    Ok(())
}

/// The series with their point markers; warm-up points are hollow (shown, but not fitted).
fn draw_lines<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    p: &Prepared,
    warmup: Option<f64>,
) -> Result<(), DrawErr> {
    for (i, (_, pts)) in p.lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        // A thick line is drawn as a polygon with mitred joins: at the sharp
        // zig-zags of a dense saw-tooth they spike far outside the plot in
        // the bitmap backend. Dense series get a one-pixel line, no joins.
        let width = if pts.len() > 400 { 1 } else { 2 };
        chart.draw_series(LineSeries::new(
            pts.iter().copied(),
            color.stroke_width(width),
        ))?;
        // Markers help with sparse per-run data; for long time series they merge into a blur,
        // so shrink them and finally drop them.
        // (Radius 3 and below rasterise as squares, hence 4.)
        let r = match pts.len() {
            0..=60 => 4,
            61..=200 => 3,
            201..=400 => 2,
            _ => 0,
        };
        if r == 0 {
            continue;
        }
        for &pt in pts {
            chart.draw_series(std::iter::once(Circle::new(pt, r, color.filled())))?;
            if warmup.is_some_and(|w| pt.0 < w) && r > 2 {
                chart.draw_series(std::iter::once(Circle::new(pt, r - 2, WHITE.filled())))?;
            }
        }
    }
    Ok(())
}
