//! Vertical markers on the line chart (a change point, where a plateau starts): a dotted line
//! at x through the plot that rises into the room above it and carries a short label there,
//! like a flag on a pole. Labels live outside the data, as the warm-up label does, and are
//! stacked in rows so that no label overlaps another, the warm-up label or another marker's
//! pole.

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::frame::Chart;
use super::layout::Span;
use super::output::DrawErr;
use super::style::{MARKER, MUTED, TICK_PX, TOP_GAP};
use super::text::{Keep, TextMode, Txt, fit_px, put_text, text_w};

/// Height of one row of labels above the plot.
const ROW_H: u32 = 18;
/// More rows would eat into the plot; a label that fits in none is left out (its line stays).
const MAX_ROWS: usize = 3;
/// Longer labels are shortened: a marker label is a few words.
const LABEL_MAX_PX: u32 = 240;
/// Clearance between two labels in one row, and between a label and a pole.
const LABEL_GAP: i32 = 10;
/// Distance from the pole to the first character of its label.
const FLAG_PAD: i32 = 4;

/// Which side of its pole a label hangs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Right,
    /// Near the right edge of the canvas, where a right flag would not fit.
    Left,
}

#[derive(Debug)]
struct Label {
    x: f64,
    text: String,
    row: usize,
    side: Side,
}

/// The markers of one chart, with each label's row decided.
pub(crate) struct Marks {
    /// x of every marker inside the x range (data coordinates).
    lines: Vec<f64>,
    labels: Vec<Label>,
}

/// Where labels may go: the canvas width, how x maps to canvas pixels (an estimate before the
/// chart is built is fine, labels keep a clearance), and a span of row 0 already taken by the
/// warm-up label.
pub(crate) struct Room<F: Fn(f64) -> i32> {
    pub canvas_w: i32,
    pub to_px: F,
    pub taken: Option<(i32, i32)>,
}

/// A label (or the warm-up label) already placed, as the layout sees it.
struct Placed {
    span: (i32, i32),
    row: usize,
    /// The pole's x, for marker labels.
    pole: Option<i32>,
}

impl Placed {
    /// Whether a label spanning `span` in `row`, on a pole at `pole`, may sit beside this one.
    fn allows(&self, span: (i32, i32), row: usize, pole: i32) -> bool {
        let near = |(a, b): (i32, i32), x: i32| a - LABEL_GAP / 2 <= x && x <= b + LABEL_GAP / 2;
        let overlap = span.1 + LABEL_GAP > self.span.0 && self.span.1 + LABEL_GAP > span.0;
        // Each pole rises through the rows below its label.
        let crosses_their_pole = self.pole.is_some_and(|p| self.row > row && near(span, p));
        let our_pole_crosses = self.row < row && near(self.span, pole);
        !(crosses_their_pole || our_pole_crosses || (self.row == row && overlap))
    }
}

impl Marks {
    /// Keeps the markers inside `xs` and gives each non-empty label the lowest row where it
    /// overlaps no label and no pole; a label that fits in no row is dropped.
    pub fn layout<F: Fn(f64) -> i32>(markers: &[(f64, String)], xs: Span, room: &Room<F>) -> Marks {
        let mut inside: Vec<(f64, &str)> = markers
            .iter()
            .filter(|(x, _)| x.is_finite() && *x >= xs.lo && *x <= xs.hi)
            .map(|(x, l)| (*x, l.trim()))
            .collect();
        inside.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut placed: Vec<Placed> = room
            .taken
            .map(|span| Placed {
                span,
                row: 0,
                pole: None,
            })
            .into_iter()
            .collect();
        let mut labels = Vec::new();
        // Right to left: a flag reaches right, so the markers right of it are placed first and
        // the one to their left climbs above them when its flag would cover their poles.
        for &(x, label) in inside.iter().rev().filter(|(_, l)| !l.is_empty()) {
            let text = fit_px(TICK_PX, false, label, LABEL_MAX_PX, Keep::Start);
            let pole = (room.to_px)(x);
            let (side, span) = flag(&text, pole, room.canvas_w);
            let free = (0..MAX_ROWS).find(|&r| placed.iter().all(|p| p.allows(span, r, pole)));
            if let Some(row) = free {
                placed.push(Placed {
                    span,
                    row,
                    pole: Some(pole),
                });
                labels.push(Label { x, text, row, side });
            }
        }
        Marks {
            lines: inside.iter().map(|(x, _)| *x).collect(),
            labels,
        }
    }

    pub fn none() -> Marks {
        Marks {
            lines: Vec::new(),
            labels: Vec::new(),
        }
    }

    /// Room above the plot: the usual gap, plus a row for each extra row of labels.
    pub fn top_gap(&self) -> u32 {
        let rows = self.labels.iter().map(|l| l.row + 1).max().unwrap_or(1);
        TOP_GAP + (rows as u32 - 1) * ROW_H
    }

    /// The dotted poles, behind the data: through the plot and, for a labelled marker, up
    /// beside its label.
    pub fn draw_lines<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        chart: &Chart<'_, DB>,
        ys: Span,
    ) -> Result<(), DrawErr> {
        for &x in &self.lines {
            let (px, bottom) = chart.backend_coord(&(x, ys.lo));
            let (_, top) = chart.backend_coord(&(x, ys.hi));
            let row = self.labels.iter().find(|l| l.x == x).map(|l| l.row);
            let end = row.map_or(top, |r| baseline(top, r) - (ROW_H as i32 - 6));
            root.draw(&DashedPathElement::new(
                vec![(px, bottom), (px, end)],
                2,
                4,
                MARKER.stroke_width(1),
            ))?;
        }
        Ok(())
    }

    /// The labels, each hanging from its pole in its row.
    pub fn draw_labels<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        mode: TextMode,
        chart: &Chart<'_, DB>,
        ys: Span,
    ) -> Result<(), DrawErr> {
        let canvas_w = root.dim_in_pixel().0 as i32;
        for l in &self.labels {
            let (px, top) = chart.backend_coord(&(l.x, ys.hi));
            // The side was chosen on estimated pixels; keep it, and the text on the canvas.
            let (a, _) = span_on(l.side, &l.text, px, canvas_w);
            let style = Txt::new(TICK_PX, MUTED, HPos::Left, VPos::Bottom);
            put_text(root, mode, style, &l.text, (a, baseline(top, l.row)))?;
        }
        Ok(())
    }
}

/// Bottom of the text in label row `row` above a plot whose top is at `top`.
fn baseline(top: i32, row: usize) -> i32 {
    top - 5 - (row as u32 * ROW_H) as i32
}

/// Side and pixel span of a label on a pole at `pole`: to its right if it fits on the
/// canvas, else to its left.
fn flag(text: &str, pole: i32, canvas_w: i32) -> (Side, (i32, i32)) {
    let right = span_on(Side::Right, text, pole, canvas_w);
    if right.0 == pole + FLAG_PAD {
        (Side::Right, right)
    } else {
        (Side::Left, span_on(Side::Left, text, pole, canvas_w))
    }
}

/// Pixel span of a label hanging on `side` of a pole at `pole`, moved onto the canvas.
fn span_on(side: Side, text: &str, pole: i32, canvas_w: i32) -> (i32, i32) {
    let w = text_w(TICK_PX, text) as i32;
    let a = match side {
        Side::Right => (pole + FLAG_PAD).min(canvas_w - 2 - w),
        Side::Left => pole - FLAG_PAD - w,
    }
    .max(2);
    (a, a + w)
}

#[cfg(test)]
mod tests {
    use super::*;

    const XS: Span = Span { lo: 0.0, hi: 100.0 };

    /// x 0..100 onto pixels 100..900 of a 1000 px canvas.
    fn to_px(x: f64) -> i32 {
        100 + (x * 8.0) as i32
    }

    fn layout(xs: &[f64], taken: Option<(i32, i32)>) -> Marks {
        let markers: Vec<(f64, String)> = xs.iter().map(|x| (*x, format!("step at {x}"))).collect();
        let room = Room {
            canvas_w: 1000,
            to_px,
            taken,
        };
        Marks::layout(&markers, XS, &room)
    }

    fn rows(m: &Marks) -> Vec<(f64, usize)> {
        let mut v: Vec<(f64, usize)> = m.labels.iter().map(|l| (l.x, l.row)).collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    }

    #[test]
    fn labels_far_apart_share_the_first_row() {
        let m = layout(&[10.0, 50.0, 80.0], None);
        assert_eq!(rows(&m), [(10.0, 0), (50.0, 0), (80.0, 0)]);
        assert_eq!(m.top_gap(), TOP_GAP);
    }

    #[test]
    fn close_labels_climb_and_never_cover_a_pole_or_a_label() {
        let m = layout(&[40.0, 41.0, 42.0, 43.0, 60.0], None);
        // The rightmost close marker keeps row 0; each one left of it climbs a row; a
        // fourth finds no row and keeps only its line.
        assert_eq!(rows(&m), [(41.0, 2), (42.0, 1), (43.0, 0), (60.0, 0)]);
        assert_eq!(m.lines.len(), 5);
        assert_eq!(m.top_gap(), TOP_GAP + 2 * ROW_H);
        for a in &m.labels {
            let (_, sa) = flag(&a.text, to_px(a.x), 1000);
            for b in m.labels.iter().filter(|b| b.x != a.x) {
                let (_, sb) = flag(&b.text, to_px(b.x), 1000);
                assert!(
                    a.row != b.row || sa.1 <= sb.0 || sb.1 <= sa.0,
                    "{a:?} {b:?}"
                );
                // b's pole rises to b's row: a label below that must not cover it.
                let pole = to_px(b.x);
                assert!(
                    a.row >= b.row || pole < sa.0 || pole > sa.1,
                    "{a:?} over {b:?}"
                );
            }
        }
    }

    #[test]
    fn a_label_at_the_right_edge_hangs_left() {
        let markers = [(
            95.0,
            "a label too long for the room on the right".to_string(),
        )];
        let room = Room {
            canvas_w: 1000,
            to_px,
            taken: None,
        };
        let m = Marks::layout(&markers, XS, &room);
        assert_eq!(m.labels[0].side, Side::Left);
        let (a, b) = span_on(Side::Left, &m.labels[0].text, to_px(95.0), 1000);
        assert_eq!(b, to_px(95.0) - FLAG_PAD);
        assert!(a > 2);
    }

    #[test]
    fn the_warmup_label_keeps_its_place() {
        let m = layout(&[5.0], Some((100, 200)));
        // Row 0 is taken there, and a pole rising past the warm-up label would cross it.
        assert!(m.labels.is_empty());
        let m = layout(&[20.0], Some((100, 200)));
        assert_eq!(rows(&m), [(20.0, 0)]);
    }

    #[test]
    fn markers_outside_the_range_or_unlabelled() {
        let mut ms: Vec<(f64, String)> = [-1.0, f64::NAN, 101.0, 20.0]
            .iter()
            .map(|x| (*x, "m".to_string()))
            .collect();
        ms.push((30.0, " ".into()));
        let room = Room {
            canvas_w: 1000,
            to_px,
            taken: None,
        };
        let m = Marks::layout(&ms, XS, &room);
        assert_eq!(m.lines, [20.0, 30.0]);
        assert_eq!(m.labels.len(), 1);
    }
}
