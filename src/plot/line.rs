//! Line chart: memory (or a count) against run number or time, one line per process, with
//! the fit drawn over the data, the warm-up shaded and a legend that avoids the data.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::frame::{self, Axes, Chart};
use super::layout::{self, Span};
use super::legend::{Corner, Entry, Legend, LegendPlace, Swatch};
use super::output::DrawErr;
use super::overlay::{self, FitContext, FitGeom};
use super::style::{FIT, MARGIN, MUTED, PALETTE, TICK_PX, TOP_GAP, WARMUP_FILL, X_AREA};
use super::text::{TextMode, Txt, put_text, text_w};
use super::{LineChart, YUnit};

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

/// Axes and legend of a line chart, decided before anything is drawn because keeping the
/// legend off the data may mean extending the y range.
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
}

pub(crate) fn draw_line_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    c: &LineChart,
) -> Result<(), DrawErr> {
    let body = frame::begin(root, mode, &c.title)?;
    let p = prepare(c);
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
    let plan = plan(&p, fit.as_ref(), body.dim_in_pixel());
    let mut chart = frame::build(
        root,
        &body,
        mode,
        &Axes {
            xs: plan.xs,
            ys: plan.ys,
            x_ticks: &plan.x_ticks,
            y_ticks: &plan.y_ticks,
            x_desc: &c.x_label,
            y_desc: &p.y_desc,
            y_area: plan.y_area,
            top_gap: TOP_GAP,
            right_col: plan.right_col,
            y_grid: true,
        },
    )?;
    let warmup = c.warmup_until.filter(|w| w.is_finite());
    if let (Some(w), true) = (warmup, plan.has_data) {
        draw_warmup(root, mode, &mut chart, &p, w, (plan.xs, plan.ys))?;
    }
    if let Some(band) = fit.as_ref().and_then(|f| f.band.as_ref()) {
        // plotters does not clip to the plot area, so keep the band inside the y range.
        let ys = plan.ys;
        let clipped: Vec<(f64, f64)> = band
            .iter()
            .map(|(x, y)| (*x, y.clamp(ys.lo, ys.hi)))
            .collect();
        chart.draw_series(std::iter::once(Polygon::new(
            clipped,
            band_color().filled(),
        )))?;
    }
    draw_lines(&mut chart, &p, warmup)?;
    if let Some(f) = &fit {
        let line: Vec<(f64, f64)> = overlay::clip_segment(f.line, plan.ys);
        chart.draw_series(DashedLineSeries::new(line, 9, 6, FIT.stroke_width(2)))?;
    }
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

fn plan(p: &Prepared, fit: Option<&FitGeom>, (body_w, body_h): (u32, u32)) -> Plan {
    let has_data = p.points().next().is_some();
    let integral = has_data && p.points().all(|(x, _)| x.fract() == 0.0 && x.abs() < 1e15);
    let fit_pts = || fit.into_iter().flat_map(|f| f.line.iter().copied());
    let x_data = layout::extent(p.points().chain(fit_pts()).map(|(x, _)| x));
    let xs = layout::x_span(x_data, integral);
    // The fitted line is part of what the reader must see, so it widens the y range too; the
    // band does not (a wide CI would flatten the data) and is clipped instead.
    let y_data = layout::extent(p.points().chain(fit_pts()).map(|(_, y)| y));
    let mut ys = layout::y_span(y_data);
    let mut x_ticks = x_axis_ticks(xs, integral, f64::from(body_w) * 0.8);

    let legend = Legend::new(legend_entries(p, fit), body_h);
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
        let plot_w = body_w as f64 - (y_area0 + 2 * MARGIN) as f64;
        let plot_h = body_h as f64 - (TOP_GAP + X_AREA + MARGIN) as f64;
        let paths = p
            .lines
            .iter()
            .map(|(_, pts)| &pts[..])
            .chain(fit.map(|f| &f.line[..]));
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
    Plan {
        has_data,
        xs,
        ys,
        x_ticks,
        y_area: frame::y_area_width(&y_ticks),
        y_ticks,
        legend,
        place,
        right_col,
    }
}

/// One row per named series, then the fit and its band.
fn legend_entries(p: &Prepared, fit: Option<&FitGeom>) -> Vec<Entry> {
    let mut entries: Vec<Entry> = p
        .lines
        .iter()
        .enumerate()
        .map(|(i, (name, _))| Entry::series(name, PALETTE[i % PALETTE.len()]))
        .collect();
    if let Some(f) = fit {
        entries.push(Entry {
            label: f.label.clone(),
            swatch: Swatch::Dashed(FIT),
        });
        if let Some(l) = &f.band_label {
            entries.push(Entry {
                label: l.clone(),
                swatch: Swatch::Band(band_color()),
            });
        }
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

/// Shades the warm-up up to halfway between the last warm-up point and the first real one,
/// so the boundary visibly separates the two groups, and labels it above the plot.
fn draw_warmup<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    chart: &mut Chart<'_, DB>,
    p: &Prepared,
    until: f64,
    (xs, ys): (Span, Span),
) -> Result<(), DrawErr> {
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
    if before.is_none() || edge <= xs.lo {
        return Ok(());
    }
    chart.draw_series(std::iter::once(Rectangle::new(
        [(xs.lo, ys.lo), (edge, ys.hi)],
        WARMUP_FILL.filled(),
    )))?;
    let (left, _) = chart.backend_coord(&(xs.lo, ys.hi));
    let (right, top) = chart.backend_coord(&(edge, ys.hi));
    let label = "warm-up";
    let half = text_w(TICK_PX, label) as i32 / 2;
    // Centre over the band, but never past the canvas edge.
    let cx = ((left + right) / 2).max(half + 2);
    put_text(
        root,
        mode,
        Txt::new(TICK_PX, MUTED, HPos::Center, VPos::Bottom),
        label,
        (cx, top - 5),
    )
}

/// The series with their point markers; warm-up points are hollow (shown, but not fitted).
fn draw_lines<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    p: &Prepared,
    warmup: Option<f64>,
) -> Result<(), DrawErr> {
    for (i, (_, pts)) in p.lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart.draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?;
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
