//! Horizontal bar chart (growth per mapping): bars top to bottom in the given order, a value
//! label past each bar's end, the category labels shortened from the front.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::frame::{self, Axes, Chart};
use super::layout::{self, Span};
use super::output::DrawErr;
use super::style::{
    AXIS, LINE_SIZE, MARGIN, PALETTE, TEXT, TICK_LEN, TICK_PX, TITLE_H, TOP_GAP, X_AREA,
};
use super::text::{Keep, TextMode, Txt, fit_px, put_text, text_w};
use super::{BarChart, YUnit};

/// Labels wider than this are shortened; keeps the bars at least ~60% of the width.
const BAR_LABEL_MAX_PX: u32 = 360;
/// Shrinking mappings are drawn muted: growth is what a leak report is about.
const SHRINK: RGBColor = RGBColor(0x9a, 0x9a, 0x9a);

/// Sizes the canvas to the bars: a handful get a compact chart with ~56 px per bar, many
/// bars make it taller (28 px each) instead of squeezing them into slivers.
pub(crate) fn bar_size(c: &BarChart) -> (u32, u32) {
    let n = c.bars.len() as u32;
    let plot_h = (n * 56).clamp(220, 430).max(n * 28);
    let h = (TITLE_H + TOP_GAP + X_AREA + MARGIN + plot_h).min(8000);
    (LINE_SIZE.0, h)
}

/// The finite bars with shortened labels, in axis units.
struct Bars {
    /// Label and value (bytes or count, not scaled).
    bars: Vec<(String, f64)>,
    /// Bytes per axis unit (1 for counts).
    factor: f64,
    unit_name: Option<&'static str>,
    y_unit: YUnit,
}

impl Bars {
    fn new(c: &BarChart) -> Bars {
        let bars: Vec<(String, f64)> = c
            .bars
            .iter()
            .filter(|(_, v)| v.is_finite())
            .map(|(l, v)| (fit_px(TICK_PX, false, l, BAR_LABEL_MAX_PX, Keep::End), *v))
            .collect();
        let (factor, unit_name) = match c.y_unit {
            YUnit::Bytes => {
                let max = bars.iter().map(|(_, v)| v.abs()).fold(0.0f64, f64::max);
                let u = layout::byte_unit_for(max);
                (u.factor, Some(u.name))
            }
            YUnit::Count => (1.0, None),
        };
        Bars {
            bars,
            factor,
            unit_name,
            y_unit: c.y_unit,
        }
    }

    /// The label past a bar's end: "+31.0 MiB".
    fn value_text(&self, v: f64) -> String {
        layout::signed_amount(v, self.y_unit)
    }

    /// Smallest and largest value in axis units, both including 0 (bars start at 0).
    fn extent(&self) -> (f64, f64) {
        let scaled = || self.bars.iter().map(|(_, v)| v / self.factor);
        (
            scaled().fold(0.0f64, f64::min),
            scaled().fold(0.0f64, f64::max),
        )
    }
}

pub(crate) fn draw_bar_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    c: &BarChart,
) -> Result<(), DrawErr> {
    let body = frame::begin(root, mode, &c.title)?;
    let (body_w, _) = body.dim_in_pixel();
    let b = Bars::new(c);
    let n = b.bars.len();

    let label_area = b
        .bars
        .iter()
        .map(|(l, _)| text_w(TICK_PX, l))
        .max()
        .unwrap_or(0)
        + (TICK_LEN + 5) as u32
        + 8;
    let xs = value_span(&b, body_w, label_area);
    let (x_ticks, x_step) = layout::nice_ticks(xs, 7, false);
    let x_dec = layout::decimals_for_step(x_step);
    let x_tick_text: Vec<(f64, String)> = x_ticks
        .iter()
        .map(|v| (*v, layout::tick_label(*v, x_dec)))
        .collect();
    // Category axis: bar i sits at y = n-1-i so the first bar is at the top.
    let y_tick_text: Vec<(f64, String)> = b
        .bars
        .iter()
        .enumerate()
        .map(|(i, (l, _))| ((n - 1 - i) as f64, l.clone()))
        .collect();
    let ys = Span {
        lo: -0.5,
        hi: n.max(1) as f64 - 0.5,
    };
    let mut chart = frame::build(
        root,
        &body,
        mode,
        &Axes {
            xs,
            ys,
            x_ticks: &x_tick_text,
            y_ticks: &y_tick_text,
            x_desc: b.unit_name.unwrap_or(""),
            y_desc: "",
            y_area: label_area,
            top_gap: TOP_GAP,
            right_col: 0,
            y_grid: false,
        },
    )?;

    if b.extent().0 < 0.0 {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(0.0, ys.lo), (0.0, ys.hi)],
            AXIS.stroke_width(1),
        )))?;
    }
    draw_bars(root, mode, &mut chart, &b)?;
    if n == 0 {
        frame::centre_note(root, mode, &chart, "no data")?;
    }
    Ok(())
}

/// Value axis: from the most negative to the largest bar (0 included), with room past the bar
/// ends for the value labels, measured in pixels and converted to axis units so the longest
/// label never runs off the plot.
fn value_span(b: &Bars, body_w: u32, label_area: u32) -> Span {
    let (lo, hi) = b.extent();
    let mut xs = if hi - lo > 0.0 {
        Span { lo, hi }
    } else {
        Span { lo: 0.0, hi: 1.0 }
    };
    let plot_w = (body_w as f64 - (label_area + 2 * MARGIN) as f64).max(100.0);
    let val_px = b
        .bars
        .iter()
        .map(|(_, v)| text_w(TICK_PX, &b.value_text(*v)))
        .max()
        .unwrap_or(0) as f64
        + 14.0;
    let frac = (val_px / plot_w).min(0.4);
    let grow = xs.len() * frac / (1.0 - frac);
    if hi > 0.0 {
        xs.hi += grow;
    }
    if lo < 0.0 {
        xs.lo -= grow;
    }
    xs
}

fn draw_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    chart: &mut Chart<'_, DB>,
    b: &Bars,
) -> Result<(), DrawErr> {
    let n = b.bars.len();
    // Few bars would otherwise become slabs; cap them at ~36 px thick.
    let (_, py) = chart.plotting_area().get_pixel_range();
    let slot_px = f64::from((py.end - py.start).max(1)) / n.max(1) as f64;
    let half = (18.0 / slot_px).min(0.34);
    for (i, (_, v)) in b.bars.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        let v_scaled = v / b.factor;
        let color = if *v >= 0.0 { PALETTE[0] } else { SHRINK };
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y - half), (v_scaled, y + half)],
            color.filled(),
        )))?;
        let (bx, by) = chart.backend_coord(&(v_scaled, y));
        let (anchor, dx) = if *v >= 0.0 {
            (HPos::Left, 6)
        } else {
            (HPos::Right, -6)
        };
        put_text(
            root,
            mode,
            Txt::new(TICK_PX, TEXT, anchor, VPos::Center),
            &b.value_text(*v),
            (bx + dx, by),
        )?;
    }
    Ok(())
}
