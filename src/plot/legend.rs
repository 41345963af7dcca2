//! The line chart's legend: its rows, its size, where it goes (a corner free of data, else a
//! strip made above the data, else a column beside the plot) and how it is drawn.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::layout::Span;
use super::output::DrawErr;
use super::style::{AXIS, LEGEND_PX, MARGIN, TEXT, TOP_GAP};
use super::text::{Keep, TextMode, Txt, fit_px, put_text, text_w};

const LEGEND_ROW: i32 = 20;
/// Longer process names are shortened so the legend never takes over the plot.
const LEGEND_LABEL_MAX_PX: u32 = 320;
const LEGEND_PAD: i32 = 8;
const SWATCH_W: i32 = 28;

/// The sample drawn left of a legend label.
pub(crate) enum Swatch {
    /// Line with a point marker.
    Series(RGBColor),
    /// Dashed line of this width.
    Dashed(RGBColor, u32),
    /// Solid line of this width, no marker.
    Solid(RGBAColor, u32),
    Band(RGBAColor),
    /// Text only ("… 7 more").
    None,
}

pub(crate) struct Entry {
    pub label: String,
    pub swatch: Swatch,
}

impl Entry {
    /// A data series' row; long names are shortened from the end.
    pub fn series(name: &str, color: RGBColor) -> Entry {
        Entry {
            label: fit_px(LEGEND_PX, false, name, LEGEND_LABEL_MAX_PX, Keep::Start),
            swatch: Swatch::Series(color),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Corner {
    UpperLeft,
    UpperRight,
    LowerRight,
    LowerLeft,
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum LegendPlace {
    Inside(Corner),
    /// Too tall to fit over the data: put it in a column right of the plot.
    Outside,
}

/// The rows of a legend that fits on the canvas.
pub(crate) struct Legend {
    entries: Vec<Entry>,
}

impl Legend {
    /// Unnamed rows are dropped (a single unnamed series thus gets no legend at all). The
    /// legend may not run off a body `body_h` pixels tall: beyond what fits, series rows are
    /// summarised in one row; the other rows stay, they explain the lines drawn over the data.
    pub fn new(mut entries: Vec<Entry>, body_h: u32) -> Legend {
        entries.retain(|e| !e.label.is_empty());
        let max_rows = ((body_h as i32 - (TOP_GAP + MARGIN) as i32 - 2 * LEGEND_PAD) / LEGEND_ROW)
            .max(2) as usize;
        if entries.len() > max_rows {
            let fit_rows = entries
                .iter()
                .filter(|e| !matches!(e.swatch, Swatch::Series(_)))
                .count();
            let keep = max_rows.saturating_sub(fit_rows + 1);
            let tail = entries.split_off(entries.len() - fit_rows);
            let hidden = entries.len() - keep;
            entries.truncate(keep);
            entries.push(Entry {
                label: format!("… {hidden} more"),
                swatch: Swatch::None,
            });
            entries.extend(tail);
        }
        Legend { entries }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Width and height in pixels.
    pub fn size(&self) -> (i32, i32) {
        let text = self
            .entries
            .iter()
            .map(|e| text_w(LEGEND_PX, &e.label) as i32)
            .max()
            .unwrap_or(0);
        (
            LEGEND_PAD * 2 + SWATCH_W + 8 + text,
            LEGEND_PAD * 2 + LEGEND_ROW * self.entries.len() as i32,
        )
    }

    /// Chooses where the legend goes on a plot of about `plot_px` pixels showing `xs`×`ys`.
    /// `paths` are the polylines the legend must not cover (plot units); `data_top` is the
    /// highest y of the data. May raise `ys.hi` to make an empty strip above the data.
    /// Returns the place and the width of the column to reserve right of the plot.
    pub fn place<'p>(
        &self,
        plot_px: (f64, f64),
        xs: Span,
        ys: &mut Span,
        data_top: Option<f64>,
        paths: impl IntoIterator<Item = &'p [(f64, f64)]>,
    ) -> (LegendPlace, u32) {
        let (lw, lh) = self.size();
        let fw = (lw as f64 + 16.0) / plot_px.0.max(1.0);
        let fh = (lh as f64 + 16.0) / plot_px.1.max(1.0);
        if fh > 0.55 || fw > 0.45 {
            return (LegendPlace::Outside, lw as u32 + 12);
        }
        let mut raw = Vec::new();
        for pts in paths {
            densify(pts, &mut raw);
        }
        let norm = |ys: Span| -> Vec<(f64, f64)> {
            raw.iter()
                .map(|(x, y)| ((x - xs.lo) / xs.len(), (y - ys.lo) / ys.len()))
                .collect()
        };
        let samples = norm(*ys);
        let corners = [
            Corner::UpperLeft,
            Corner::UpperRight,
            Corner::LowerRight,
            Corner::LowerLeft,
        ];
        let best = corners
            .iter()
            .map(|&k| (corner_hits(&samples, k, fw, fh), k))
            .min_by_key(|(hits, _)| *hits);
        if let Some((0, k)) = best {
            return (LegendPlace::Inside(k), 0);
        }
        // Every corner has data: raise the top of the y axis so the legend gets an empty
        // strip above the data instead of hiding points.
        let top = data_top.unwrap_or(ys.hi);
        let need = (top - ys.lo) / (1.0 - fh).max(0.2) + ys.len() * 0.02;
        ys.hi = ys.hi.max(ys.lo + need);
        let samples = norm(*ys);
        let k = if corner_hits(&samples, Corner::UpperLeft, fw, fh)
            <= corner_hits(&samples, Corner::UpperRight, fw, fh)
        {
            Corner::UpperLeft
        } else {
            Corner::UpperRight
        };
        (LegendPlace::Inside(k), 0)
    }

    /// Top-left corner of the legend for a plot spanning these pixel ranges.
    pub fn origin(
        &self,
        place: LegendPlace,
        px: std::ops::Range<i32>,
        py: std::ops::Range<i32>,
    ) -> (i32, i32) {
        let (lw, lh) = self.size();
        match place {
            LegendPlace::Outside => (px.end + MARGIN as i32, py.start),
            LegendPlace::Inside(k) => {
                let inset = 10;
                let x = match k {
                    Corner::UpperLeft | Corner::LowerLeft => px.start + inset,
                    Corner::UpperRight | Corner::LowerRight => px.end - inset - lw,
                };
                let y = match k {
                    Corner::UpperLeft | Corner::UpperRight => py.start + inset,
                    Corner::LowerLeft | Corner::LowerRight => py.end - inset - lh,
                };
                (x, y)
            }
        }
    }

    /// Draws the legend with its top-left corner at `at` (absolute backend pixels).
    pub fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        mode: TextMode,
        at: (i32, i32),
    ) -> Result<(), DrawErr> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let (w, h) = self.size();
        let (x0, y0) = at;
        root.draw(&Rectangle::new(
            [(x0, y0), (x0 + w, y0 + h)],
            WHITE.filled(),
        ))?;
        root.draw(&Rectangle::new(
            [(x0, y0), (x0 + w, y0 + h)],
            AXIS.stroke_width(1),
        ))?;
        let label_style = Txt::new(LEGEND_PX, TEXT, HPos::Left, VPos::Center);
        for (i, e) in self.entries.iter().enumerate() {
            let cy = y0 + LEGEND_PAD + LEGEND_ROW * i as i32 + LEGEND_ROW / 2;
            let sx0 = x0 + LEGEND_PAD;
            draw_swatch(root, &e.swatch, (sx0, sx0 + SWATCH_W), cy)?;
            put_text(
                root,
                mode,
                label_style,
                &e.label,
                (sx0 + SWATCH_W + 8, cy + 1),
            )?;
        }
        Ok(())
    }
}

fn draw_swatch<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    swatch: &Swatch,
    (sx0, sx1): (i32, i32),
    cy: i32,
) -> Result<(), DrawErr> {
    match swatch {
        Swatch::Series(c) => {
            root.draw(&PathElement::new(
                vec![(sx0, cy), (sx1, cy)],
                c.stroke_width(2),
            ))?;
            root.draw(&Circle::new(((sx0 + sx1) / 2, cy), 4, c.filled()))?;
        }
        Swatch::Dashed(c, w) => {
            for k in 0..3 {
                let a = sx0 + k * 11;
                root.draw(&PathElement::new(
                    vec![(a, cy), ((a + 7).min(sx1), cy)],
                    c.stroke_width(*w),
                ))?;
            }
        }
        Swatch::Solid(c, w) => {
            root.draw(&PathElement::new(
                vec![(sx0, cy), (sx1, cy)],
                c.stroke_width(*w),
            ))?;
        }
        Swatch::Band(c) => {
            root.draw(&Rectangle::new([(sx0, cy - 6), (sx1, cy + 6)], c.filled()))?;
        }
        Swatch::None => {}
    }
    Ok(())
}

/// How many of the samples (in 0..1 plot coordinates, v up) fall in the legend box at
/// `corner`, the box being `fw`×`fh` of the plot plus a small clearance.
fn corner_hits(samples: &[(f64, f64)], corner: Corner, fw: f64, fh: f64) -> usize {
    let (u0, u1) = match corner {
        Corner::UpperLeft | Corner::LowerLeft => (0.0, fw),
        Corner::UpperRight | Corner::LowerRight => (1.0 - fw, 1.0),
    };
    let (v0, v1) = match corner {
        Corner::UpperLeft | Corner::UpperRight => (1.0 - fh, 1.0),
        Corner::LowerLeft | Corner::LowerRight => (0.0, fh),
    };
    samples
        .iter()
        .filter(|(u, v)| *u >= u0 && *u <= u1 && *v >= v0 && *v <= v1)
        .count()
}

/// Points along a polyline, dense enough that a segment crossing a legend box is noticed.
fn densify(points: &[(f64, f64)], out: &mut Vec<(f64, f64)>) {
    if let Some(first) = points.first() {
        out.push(*first);
    }
    for w in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        for k in 1..=16 {
            let t = k as f64 / 16.0;
            out.push((x0 + (x1 - x0) * t, y0 + (y1 - y0) * t));
        }
    }
}
