//! The chart-building step both chart kinds share: a white canvas with the title on top, then
//! a plotting area on our own tick axes with grid, axis lines, tick labels and axis titles.
//! The line and bar charts decide the spans, ticks and label columns; this draws them.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::layout::Span;
use super::output::DrawErr;
use super::style::{
    AXIS, DESC_PX, GRID, MARGIN, MUTED, TEXT, TICK_LEN, TICK_PX, TITLE_H, TITLE_PX, X_AREA,
};
use super::text::{Keep, TextMode, Txt, fit_px, put_text, text_w};

/// A linear f64 axis whose ticks we choose ourselves (integers for run numbers, nice steps
/// otherwise) instead of plotters' heuristics, which put ticks at 2.5 runs.
#[derive(Clone)]
pub(crate) struct TickAxis {
    span: Span,
    ticks: Vec<f64>,
}

impl Ranged for TickAxis {
    // DefaultFormatting lets the mesh accept our label formatters.
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let len = self.span.len();
        let px = (limit.1 - limit.0) as f64;
        if !(len.is_finite() && len > 0.0) {
            return (limit.0 + limit.1) / 2;
        }
        // Float→int `as` saturates, so far-out values can't wrap around.
        limit.0 + (px * (v - self.span.lo) / len).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // No light (minor) grid lines: they add clutter without helping to read values.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.span.lo..self.span.hi
    }
}

/// A chart on our tick axes, in data coordinates (y already divided by the unit factor).
pub(crate) type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<TickAxis, TickAxis>>;

/// Everything the shared step needs to know about the axes of one chart.
pub(crate) struct Axes<'a> {
    pub xs: Span,
    pub ys: Span,
    /// Tick positions and their labels; empty for no ticks.
    pub x_ticks: &'a [(f64, String)],
    pub y_ticks: &'a [(f64, String)],
    /// Axis titles; empty for none.
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    /// Width of the column left of the plot that holds the y tick labels and title.
    pub y_area: u32,
    /// Room above the plot (labels that must not touch the data live there).
    pub top_gap: u32,
    /// Extra room right of the plot (for a legend beside it).
    pub right_col: u32,
    /// Horizontal grid lines at the y ticks (a bar chart's categories get none).
    pub y_grid: bool,
}

/// Paints the canvas white and draws the title; returns the area below the title.
pub(crate) fn begin<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    title: &str,
) -> Result<DrawingArea<DB, Shift>, DrawErr> {
    root.fill(&WHITE)?;
    let (title_area, body) = root.split_vertically(TITLE_H);
    let (w, _) = title_area.dim_in_pixel();
    let mut t = Txt::new(TITLE_PX, TEXT, HPos::Center, VPos::Center);
    t.bold = true;
    let title = fit_px(t.px, t.bold, title, w.saturating_sub(24), Keep::Start);
    put_text(
        &title_area,
        mode,
        t,
        &title,
        ((w / 2) as i32, (TITLE_H / 2) as i32 + 2),
    )?;
    Ok(body)
}

/// Builds the plotting area in `body` and draws grid, axes and their text. `root` is the whole
/// canvas: axis text is placed in absolute pixels.
pub(crate) fn build<'a, DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    body: &'a DrawingArea<DB, Shift>,
    mode: TextMode,
    a: &Axes<'_>,
) -> Result<Chart<'a, DB>, DrawErr> {
    // Ascending, whatever order the labels come in (the bar chart lists its categories top
    // down), so the mesh draws its tick marks bottom-up as plotters expects.
    let positions = |ticks: &[(f64, String)]| {
        let mut v: Vec<f64> = ticks.iter().map(|(v, _)| *v).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let mut chart: Chart<'a, DB> = ChartBuilder::on(body)
        .margin_top(a.top_gap)
        .margin_left(MARGIN)
        .margin_right(MARGIN + a.right_col)
        .margin_bottom(MARGIN / 2)
        .x_label_area_size(X_AREA)
        .y_label_area_size(a.y_area)
        .build_cartesian_2d(
            TickAxis {
                span: a.xs,
                ticks: positions(a.x_ticks),
            },
            TickAxis {
                span: a.ys,
                ticks: positions(a.y_ticks),
            },
        )?;
    draw_mesh(&mut chart, a.y_grid)?;
    draw_axis_text(root, mode, &chart, a)?;
    Ok(chart)
}

/// Y-axis label column: widest tick label + tick mark + rotated axis title + breathing room.
pub(crate) fn y_area_width(tick_labels: &[(f64, String)]) -> u32 {
    let widest = tick_labels
        .iter()
        .map(|(_, s)| text_w(TICK_PX, s))
        .max()
        .unwrap_or(0);
    widest + (TICK_LEN + 5) as u32 + 12 + DESC_PX as u32
}

/// Grid and axes only; labels are drawn by [`draw_axis_text`].
fn draw_mesh<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, y_grid: bool) -> Result<(), DrawErr> {
    let blank = |_: &f64| String::new();
    let mut mesh = chart.configure_mesh();
    mesh.x_label_formatter(&blank)
        .y_label_formatter(&blank)
        .set_all_tick_mark_size(TICK_LEN)
        .bold_line_style(GRID.stroke_width(1))
        .light_line_style(TRANSPARENT)
        .axis_style(AXIS.stroke_width(1));
    if !y_grid {
        mesh.disable_y_mesh();
    }
    mesh.draw()?;
    Ok(())
}

/// Tick labels and axis titles, drawn by us rather than by the mesh so that bitmap text gets
/// the glyph fix and the placement is exact.
fn draw_axis_text<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    chart: &Chart<'_, DB>,
    a: &Axes<'_>,
) -> Result<(), DrawErr> {
    let (px, py) = chart.plotting_area().get_pixel_range();
    let (x_lo, y_lo) = {
        let r = chart.as_coord_spec();
        (r.get_x_range().start, r.get_y_range().start)
    };
    let tick = Txt::new(TICK_PX, TEXT, HPos::Center, VPos::Top);
    for (v, label) in a.x_ticks {
        let (x, _) = chart.backend_coord(&(*v, y_lo));
        put_text(root, mode, tick, label, (x, py.end + TICK_LEN + 5))?;
    }
    let tick = Txt::new(TICK_PX, TEXT, HPos::Right, VPos::Center);
    for (v, label) in a.y_ticks {
        let (_, y) = chart.backend_coord(&(x_lo, *v));
        put_text(root, mode, tick, label, (px.start - TICK_LEN - 5, y))?;
    }
    if !a.x_desc.is_empty() {
        put_text(
            root,
            mode,
            Txt::new(DESC_PX, TEXT, HPos::Center, VPos::Bottom),
            a.x_desc,
            ((px.start + px.end) / 2, py.end + X_AREA as i32 - 4),
        )?;
    }
    if !a.y_desc.is_empty() {
        let mut t = Txt::new(DESC_PX, TEXT, HPos::Center, VPos::Top);
        t.vertical = true;
        put_text(
            root,
            mode,
            t,
            a.y_desc,
            (px.start - a.y_area as i32 + 2, (py.start + py.end) / 2),
        )?;
    }
    Ok(())
}

/// Centres `text` in the plotting area (used for "no data").
pub(crate) fn centre_note<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    chart: &Chart<'_, DB>,
    text: &str,
) -> Result<(), DrawErr> {
    let (px, py) = chart.plotting_area().get_pixel_range();
    put_text(
        root,
        mode,
        Txt::new(DESC_PX, MUTED, HPos::Center, VPos::Center),
        text,
        ((px.start + px.end) / 2, (py.start + py.end) / 2),
    )
}
