//! Drawing of the line and bar charts on any plotters backend, plus the SVG/PNG plumbing.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::layout::{self, Face, Span};
use super::{BarChart, LineChart, PlotError, YUnit};

/// Canvas of the line charts: wide enough for ~10 legend entries beside the data, short enough
/// to sit in a report page without scrolling.
pub(crate) const LINE_SIZE: (u32, u32) = (1000, 560);

const FAMILY: &str = "sans-serif";
const TITLE_H: u32 = 44;
// plotters sizes are not CSS pixels: ab_glyph draws an em of 0.86×size and the SVG backend
// writes font-size = size/1.24, so these come out at roughly 20/14/13/13 px in both outputs.
const TITLE_PX: f64 = 24.0;
const DESC_PX: f64 = 17.0;
const TICK_PX: f64 = 16.0;
const LEGEND_PX: f64 = 15.5;
const TICK_LEN: i32 = 5;
const MARGIN: u32 = 16;
/// Room above the plot for the "warm-up" label, which lives outside the data so it can
/// never collide with points or the legend.
const TOP_GAP: u32 = 22;
const X_AREA: u32 = 52;

/// matplotlib's "tab10": ten hues that stay distinguishable on white and for most colour-blind
/// readers; a process tree rarely has more lines than that, and beyond it colours repeat.
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];
const TEXT: RGBColor = RGBColor(0x22, 0x22, 0x22);
const MUTED: RGBColor = RGBColor(0x66, 0x66, 0x66);
const GRID: RGBColor = RGBColor(0xe4, 0xe4, 0xe4);
const AXIS: RGBColor = RGBColor(0x88, 0x88, 0x88);
const FIT: RGBColor = RGBColor(0x22, 0x22, 0x22);
const WARMUP_FILL: RGBColor = RGBColor(0xfa, 0xf0, 0xdc);

/// Internal drawing error; plotters' error types are generic over the backend, so we flatten
/// them to text at this boundary and attach the output path in the public error.
pub(crate) struct DrawErr(String);

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for DrawErr {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        DrawErr(e.to_string())
    }
}

/// A linear f64 axis whose ticks we choose ourselves (integers for run numbers, nice steps
/// otherwise) instead of plotters' heuristics, which put ticks at 2.5 runs.
#[derive(Clone)]
struct TickAxis {
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

type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<TickAxis, TickAxis>>;

pub(crate) fn svg<F>(size: (u32, u32), draw: F) -> Result<String, PlotError>
where
    F: FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), DrawErr>,
{
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        draw(&root)
            .and_then(|()| root.present().map_err(DrawErr::from))
            .map_err(|DrawErr(message)| PlotError::Svg { message })?;
        // The backend flushes the document into `out` when dropped, at the end of this block.
    }
    Ok(out)
}

pub(crate) fn png<F>(path: &Path, size: (u32, u32), draw: F) -> Result<(), PlotError>
where
    F: FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), DrawErr>,
{
    // BitMapBackend saves on drop even after a failed draw, so a half-drawn chart must never
    // land on the real name: draw into a sibling temp file (same directory, so the rename is
    // atomic) and move it into place only on success.
    let tmp = temp_sibling(path);
    let result = {
        let root = BitMapBackend::new(&tmp, size).into_drawing_area();
        draw(&root).and_then(|()| root.present().map_err(DrawErr::from))
    };
    match result {
        Ok(()) => fs::rename(&tmp, path).map_err(|source| {
            let _ = fs::remove_file(&tmp);
            PlotError::Io {
                path: path.to_path_buf(),
                source,
            }
        }),
        Err(DrawErr(message)) => {
            let _ = fs::remove_file(&tmp);
            Err(PlotError::Png {
                path: path.to_path_buf(),
                message,
            })
        }
    }
}

/// `dir/.name.tmp-PID-N.png`: the `.png` suffix matters because the encoder picks the image
/// format from the extension; PID and counter keep concurrent renders apart.
fn temp_sibling(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "chart".to_string());
    let name = format!(".{stem}.tmp-{}-{n}.png", std::process::id());
    match path.parent() {
        Some(dir) => dir.join(name),
        None => PathBuf::from(name),
    }
}

fn font(px: f64) -> FontDesc<'static> {
    FontDesc::new(FontFamily::Name(FAMILY), px, FontStyle::Normal)
}

/// How text reaches the output: SVG keeps whole strings as `<text>` for the browser to lay
/// out; bitmaps are rasterised here and need the glyph-bearing fix.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum TextMode {
    Svg,
    Bitmap,
}

/// Look of one piece of text.
#[derive(Clone, Copy)]
struct Txt {
    px: f64,
    bold: bool,
    color: RGBColor,
    h: HPos,
    v: VPos,
    /// Reads bottom to top (the y-axis title).
    vertical: bool,
}

impl Txt {
    fn new(px: f64, color: RGBColor, h: HPos, v: VPos) -> Self {
        Txt {
            px,
            bold: false,
            color,
            h,
            v,
            vertical: false,
        }
    }

    fn font(&self) -> FontDesc<'static> {
        let style = if self.bold {
            FontStyle::Bold
        } else {
            FontStyle::Normal
        };
        let trans = if self.vertical {
            FontTransform::Rotate270
        } else {
            FontTransform::None
        };
        FontDesc::new(FontFamily::Name(FAMILY), self.px, style).transform(trans)
    }
}

fn face(bold: bool) -> Option<&'static Face> {
    static REGULAR: OnceLock<Option<Face>> = OnceLock::new();
    static BOLD: OnceLock<Option<Face>> = OnceLock::new();
    if bold {
        BOLD.get_or_init(|| Face::parse(dejavu::sans::bold()))
            .as_ref()
    } else {
        REGULAR
            .get_or_init(|| Face::parse(dejavu::sans::regular()))
            .as_ref()
    }
}

/// Draws `s` anchored at `pos`. For bitmaps each glyph is placed separately at pen position +
/// its left side bearing, which plotters' ab_glyph path leaves out (see [`Face`]).
fn put_text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    mode: TextMode,
    t: Txt,
    s: &str,
    pos: (i32, i32),
) -> Result<(), DrawErr> {
    let font = t.font();
    let face = match mode {
        TextMode::Bitmap => face(t.bold),
        TextMode::Svg => None,
    };
    let Some(face) = face else {
        area.draw_text(s, &font.color(&t.color).pos(Pos::new(t.h, t.v)), pos)?;
        return Ok(());
    };
    // Advance widths (with kerning) come from the same estimator plotters uses, so anchoring
    // matches what the layout code measured.
    let width = |p: &str| {
        font.layout_box(p)
            .map(|((x0, _), (x1, _))| x1 - x0)
            .unwrap_or(0)
    };
    let start = match t.h {
        HPos::Left => 0,
        HPos::Center => -width(s) / 2,
        HPos::Right => -width(s),
    };
    let style = font.color(&t.color).pos(Pos::new(HPos::Left, t.v));
    let trans = font.get_transform();
    let mut buf = [0u8; 4];
    for (i, ch) in s.char_indices() {
        if ch.is_whitespace() {
            continue;
        }
        let along = start + width(&s[..i]) + face.bearing_px(ch, t.px);
        let (dx, dy) = trans.transform(along, 0);
        area.draw_text(ch.encode_utf8(&mut buf), &style, (pos.0 + dx, pos.1 + dy))?;
    }
    Ok(())
}

/// Pixel width of `s`; falls back to a rough per-character estimate if the font can't measure.
fn text_w(px: f64, s: &str) -> u32 {
    width_in(&font(px), s)
}

fn width_in(font: &FontDesc<'_>, s: &str) -> u32 {
    font.box_size(s)
        .map(|(w, _)| w)
        .unwrap_or((s.chars().count() as f64 * font.get_size() * 0.6) as u32)
}

/// Which end of an over-long label to keep.
#[derive(Clone, Copy)]
enum Keep {
    /// Paths: the file name at the end identifies them.
    End,
    /// Titles and process names: the start says what it is.
    Start,
}

/// Shortens `s` with an ellipsis until it is at most `max_px` wide in `font`, so a long
/// command line or path can't push the plot off the canvas.
fn fit_px(font: &FontDesc<'_>, s: &str, max_px: u32, keep: Keep) -> String {
    if width_in(font, s) <= max_px {
        return s.to_string();
    }
    let cut = |n: usize| match keep {
        Keep::End => layout::truncate_label(s, n),
        Keep::Start => layout::truncate_end(s, n),
    };
    // Binary search on the character count (width grows with it); measuring is the costly
    // part, and a pasted command line can be thousands of characters long.
    let (mut lo, mut hi) = (4usize, s.chars().count());
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        if width_in(font, &cut(mid)) <= max_px {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    cut(lo)
}

fn draw_title<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    title: &str,
) -> Result<DrawingArea<DB, Shift>, DrawErr> {
    let (title_area, body) = root.split_vertically(TITLE_H);
    let (w, _) = title_area.dim_in_pixel();
    let mut t = Txt::new(TITLE_PX, TEXT, HPos::Center, VPos::Center);
    t.bold = true;
    let title = fit_px(&t.font(), title, w.saturating_sub(24), Keep::Start);
    put_text(
        &title_area,
        mode,
        t,
        &title,
        ((w / 2) as i32, (TITLE_H / 2) as i32 + 2),
    )?;
    Ok(body)
}

/// Tick labels and axis titles, drawn by us rather than by the mesh so that bitmap text gets
/// the glyph fix and the placement is exact.
struct AxisText<'a> {
    x_ticks: &'a [(f64, String)],
    y_ticks: &'a [(f64, String)],
    x_desc: &'a str,
    y_desc: &'a str,
    y_area: u32,
}

fn draw_axis_text<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    chart: &Chart<'_, DB>,
    a: &AxisText<'_>,
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

// ---------------------------------------------------------------------------------------------
// Legend
// ---------------------------------------------------------------------------------------------

enum Swatch {
    /// Line with a point marker.
    Series(RGBColor),
    Dashed(RGBColor),
    Band(RGBAColor),
    /// Text only ("… 7 more").
    None,
}

struct Entry {
    label: String,
    swatch: Swatch,
}

const LEGEND_ROW: i32 = 20;
/// Longer process names are shortened so the legend never takes over the plot.
const LEGEND_LABEL_MAX_PX: u32 = 320;
const LEGEND_PAD: i32 = 8;
const SWATCH_W: i32 = 28;

fn legend_size(entries: &[Entry]) -> (i32, i32) {
    let text = entries
        .iter()
        .map(|e| text_w(LEGEND_PX, &e.label) as i32)
        .max()
        .unwrap_or(0);
    (
        LEGEND_PAD * 2 + SWATCH_W + 8 + text,
        LEGEND_PAD * 2 + LEGEND_ROW * entries.len() as i32,
    )
}

/// Draws the legend with its top-left corner at `at` (absolute backend pixels).
fn draw_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    at: (i32, i32),
    entries: &[Entry],
) -> Result<(), DrawErr> {
    if entries.is_empty() {
        return Ok(());
    }
    let (w, h) = legend_size(entries);
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
    for (i, e) in entries.iter().enumerate() {
        let cy = y0 + LEGEND_PAD + LEGEND_ROW * i as i32 + LEGEND_ROW / 2;
        let sx0 = x0 + LEGEND_PAD;
        let sx1 = sx0 + SWATCH_W;
        match &e.swatch {
            Swatch::Series(c) => {
                root.draw(&PathElement::new(
                    vec![(sx0, cy), (sx1, cy)],
                    c.stroke_width(2),
                ))?;
                root.draw(&Circle::new(((sx0 + sx1) / 2, cy), 4, c.filled()))?;
            }
            Swatch::Dashed(c) => {
                for k in 0..3 {
                    let a = sx0 + k * 11;
                    root.draw(&PathElement::new(
                        vec![(a, cy), ((a + 7).min(sx1), cy)],
                        c.stroke_width(2),
                    ))?;
                }
            }
            Swatch::Band(c) => {
                root.draw(&Rectangle::new([(sx0, cy - 6), (sx1, cy + 6)], c.filled()))?;
            }
            Swatch::None => {}
        }
        put_text(root, mode, label_style, &e.label, (sx1 + 8, cy + 1))?;
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Corner {
    UpperLeft,
    UpperRight,
    LowerRight,
    LowerLeft,
}

/// Fraction of the samples (in 0..1 plot coordinates, v up) that fall in the legend box at
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

enum LegendPlace {
    Inside(Corner),
    /// Too tall to fit over the data: put it in a column right of the plot.
    Outside,
}

// ---------------------------------------------------------------------------------------------
// Line chart
// ---------------------------------------------------------------------------------------------

struct Prepared {
    /// Per line: finite points, sorted by x, y already divided by the unit factor.
    lines: Vec<(String, Vec<(f64, f64)>)>,
    factor: f64,
    y_desc: String,
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

/// Fit line and CI band in plot units (y divided by the unit factor).
struct FitGeom {
    line: [(f64, f64); 2],
    /// Closed polygon of the band, if a CI was given.
    band: Option<Vec<(f64, f64)>>,
    label: String,
    band_label: Option<String>,
}

fn fit_geometry(c: &LineChart, p: &Prepared) -> Option<FitGeom> {
    let f = c.fit.as_ref()?;
    let finite = [f.slope, f.intercept, f.x_from, f.x_to]
        .iter()
        .all(|v| v.is_finite());
    if !finite {
        return None;
    }
    let (a, b) = if f.x_from <= f.x_to {
        (f.x_from, f.x_to)
    } else {
        (f.x_to, f.x_from)
    };
    let at = |x: f64| (f.intercept + f.slope * x) / p.factor;
    let per = layout::x_unit_name(&c.x_label);
    let fmt = |v: f64| match c.y_unit {
        YUnit::Bytes => layout::human_bytes(v),
        YUnit::Count => layout::sig3(v),
    };
    let sign = |v: f64| if v > 0.0 { "+" } else { "" };
    let label = format!("fit: {}{} per {per}", sign(f.slope), fmt(f.slope));

    let (band, band_label) = match f.slope_ci95 {
        Some((lo, hi)) if lo.is_finite() && hi.is_finite() => {
            let xm = f
                .x_mean
                .filter(|v| v.is_finite())
                .or_else(|| {
                    // The OLS pivot is the mean x of the fitted points; recover it from the data.
                    let xs: Vec<f64> = p
                        .lines
                        .first()
                        .map(|(_, pts)| {
                            pts.iter()
                                .map(|(x, _)| *x)
                                .filter(|x| *x >= a && *x <= b)
                                .collect()
                        })
                        .unwrap_or_default();
                    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
                })
                .unwrap_or((a + b) / 2.0);
            let ym = f.intercept + f.slope * xm;
            // Sample along x so the bow-tie (narrowest at the pivot) is traced faithfully.
            let n = 48;
            let mut xs: Vec<f64> = (0..=n).map(|k| a + (b - a) * k as f64 / n as f64).collect();
            if xm > a && xm < b {
                xs.push(xm);
                xs.sort_by(f64::total_cmp);
            }
            let edge = |x: f64, s: f64| (ym + s * (x - xm)) / p.factor;
            let upper: Vec<(f64, f64)> = xs
                .iter()
                .map(|&x| (x, edge(x, lo).max(edge(x, hi))))
                .collect();
            let lower: Vec<(f64, f64)> = xs
                .iter()
                .rev()
                .map(|&x| (x, edge(x, lo).min(edge(x, hi))))
                .collect();
            let poly: Vec<(f64, f64)> = upper.into_iter().chain(lower).collect();
            let (lo, hi) = (lo.min(hi), lo.max(hi));
            let band_label = match c.y_unit {
                YUnit::Bytes => {
                    let u = layout::byte_unit_for(lo.abs().max(hi.abs()));
                    format!(
                        "95% CI: {} to {} {} per {per}",
                        layout::sig3(lo / u.factor),
                        layout::sig3(hi / u.factor),
                        u.name
                    )
                }
                YUnit::Count => format!(
                    "95% CI: {} to {} per {per}",
                    layout::sig3(lo),
                    layout::sig3(hi)
                ),
            };
            (Some(poly), Some(band_label))
        }
        _ => (None, None),
    };
    Some(FitGeom {
        line: [(a, at(a)), (b, at(b))],
        band,
        label,
        band_label,
    })
}

/// X ticks: as many as read comfortably (runs get more, they are short integers), reduced
/// until the labels fit side by side in `avail_px` with a gap.
fn x_axis_ticks(xs: Span, integral: bool, avail_px: f64) -> (Vec<f64>, Vec<(f64, String)>) {
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
            return (ticks, text);
        }
        target -= 1;
    }
}

/// Y-axis label column: widest tick label + tick mark + rotated axis title + breathing room.
fn y_area_width(tick_labels: &[(f64, String)]) -> u32 {
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

pub(crate) fn draw_line_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    c: &LineChart,
) -> Result<(), DrawErr> {
    root.fill(&WHITE)?;
    let body = draw_title(root, mode, &c.title)?;
    let (body_w, body_h) = body.dim_in_pixel();

    let p = prepare(c);
    let fit = fit_geometry(c, &p);

    let all_pts = || p.lines.iter().flat_map(|(_, pts)| pts.iter().copied());
    let has_data = all_pts().next().is_some();
    let integral = has_data && all_pts().all(|(x, _)| x.fract() == 0.0 && x.abs() < 1e15);

    let x_data = layout::extent(
        all_pts()
            .map(|(x, _)| x)
            .chain(fit.iter().flat_map(|f| f.line.iter().map(|(x, _)| *x))),
    );
    let xs = layout::x_span(x_data, integral);
    // The fitted line is part of what the reader must see, so it widens the y range too; the
    // band does not (a wide CI would flatten the data) and is clipped instead.
    let y_data = layout::extent(
        all_pts()
            .map(|(_, y)| y)
            .chain(fit.iter().flat_map(|f| f.line.iter().map(|(_, y)| *y))),
    );
    let mut ys = layout::y_span(y_data);

    let (mut x_ticks, mut x_tick_text) = x_axis_ticks(xs, integral, f64::from(body_w) * 0.8);

    // Legend entries.
    let mut entries: Vec<Entry> = p
        .lines
        .iter()
        .enumerate()
        .map(|(i, (name, _))| Entry {
            label: fit_px(&font(LEGEND_PX), name, LEGEND_LABEL_MAX_PX, Keep::Start),
            swatch: Swatch::Series(PALETTE[i % PALETTE.len()]),
        })
        .collect();
    let band_color = PALETTE[0].mix(0.22);
    if let Some(f) = &fit {
        entries.push(Entry {
            label: f.label.clone(),
            swatch: Swatch::Dashed(FIT),
        });
        if let Some(l) = &f.band_label {
            entries.push(Entry {
                label: l.clone(),
                swatch: Swatch::Band(band_color),
            });
        }
    }
    // Unnamed series get no legend row (a single unnamed series thus no legend at all).
    entries.retain(|e| !e.label.is_empty());
    // The legend may not run off the canvas: beyond what fits, lines are summarised in one
    // row (the fit rows stay, they explain the dashed line and band).
    let max_rows =
        ((body_h as i32 - (TOP_GAP + MARGIN) as i32 - 2 * LEGEND_PAD) / LEGEND_ROW).max(2) as usize;
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
    let show_legend = !entries.is_empty();

    // Decide where the legend goes before building the chart, because avoiding the data may
    // mean extending the y range. Plot size is estimated from the fixed layout.
    let (lw, lh) = legend_size(&entries);
    let (y_ticks0, _) = layout::nice_ticks(ys, 7, false);
    let y_area0 = y_area_width(
        &y_ticks0
            .iter()
            .map(|v| (*v, format!("{v:.1}")))
            .collect::<Vec<_>>(),
    );
    let plot_w = body_w as f64 - (y_area0 + 2 * MARGIN) as f64;
    let plot_h = body_h as f64 - (TOP_GAP + X_AREA + MARGIN) as f64;
    let fw = (lw as f64 + 16.0) / plot_w.max(1.0);
    let fh = (lh as f64 + 16.0) / plot_h.max(1.0);

    let mut place = LegendPlace::Inside(Corner::UpperLeft);
    let mut right_col = 0u32;
    if show_legend {
        if fh > 0.55 || fw > 0.45 {
            place = LegendPlace::Outside;
            right_col = lw as u32 + 12;
        } else {
            let mut raw = Vec::new();
            for (_, pts) in &p.lines {
                densify(pts, &mut raw);
            }
            if let Some(f) = &fit {
                densify(&f.line, &mut raw);
            }
            let norm = |ys: Span| -> Vec<(f64, f64)> {
                raw.iter()
                    .map(|(x, y)| ((x - xs.lo) / xs.len(), (y - ys.lo) / ys.len()))
                    .collect()
            };
            let samples = norm(ys);
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
            match best {
                Some((0, k)) => place = LegendPlace::Inside(k),
                _ => {
                    // Every corner has data: raise the top of the y axis so the legend gets an
                    // empty strip above the data instead of hiding points.
                    let top = y_data.map(|(_, hi)| hi).unwrap_or(ys.hi);
                    let need = (top - ys.lo) / (1.0 - fh).max(0.2) + ys.len() * 0.02;
                    ys.hi = ys.hi.max(ys.lo + need);
                    let samples = norm(ys);
                    let k = if corner_hits(&samples, Corner::UpperLeft, fw, fh)
                        <= corner_hits(&samples, Corner::UpperRight, fw, fh)
                    {
                        Corner::UpperLeft
                    } else {
                        Corner::UpperRight
                    };
                    place = LegendPlace::Inside(k);
                }
            }
        }
    }

    let (mut y_ticks, y_step) = layout::nice_ticks(ys, 7, false);
    let y_dec = layout::decimals_for_step(y_step);
    if !has_data {
        // A placeholder 0..1 scale would only suggest values that don't exist.
        x_ticks.clear();
        x_tick_text.clear();
        y_ticks.clear();
    }
    let y_tick_text: Vec<(f64, String)> = y_ticks
        .iter()
        .map(|v| (*v, layout::tick_label(*v, y_dec)))
        .collect();
    let y_area = y_area_width(&y_tick_text);

    let mut chart: Chart<'_, DB> = ChartBuilder::on(&body)
        .margin_top(TOP_GAP)
        .margin_left(MARGIN)
        .margin_right(MARGIN + right_col)
        .margin_bottom(MARGIN / 2)
        .x_label_area_size(X_AREA)
        .y_label_area_size(y_area)
        .build_cartesian_2d(
            TickAxis {
                span: xs,
                ticks: x_ticks,
            },
            TickAxis {
                span: ys,
                ticks: y_ticks,
            },
        )?;

    draw_mesh(&mut chart, true)?;
    draw_axis_text(
        root,
        mode,
        &chart,
        &AxisText {
            x_ticks: &x_tick_text,
            y_ticks: &y_tick_text,
            x_desc: &c.x_label,
            y_desc: &p.y_desc,
            y_area,
        },
    )?;

    let (px_range, py_range) = chart.plotting_area().get_pixel_range();

    // Warm-up shading: up to halfway between the last warm-up point and the first real one,
    // so the boundary visibly separates the two groups.
    if let (Some(w), true) = (c.warmup_until.filter(|w| w.is_finite()), has_data) {
        let before = all_pts()
            .map(|(x, _)| x)
            .filter(|x| *x < w)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        let after = all_pts()
            .map(|(x, _)| x)
            .filter(|x| *x >= w)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
        let edge = match (before, after) {
            (Some(b), Some(a)) => (a + b) / 2.0,
            _ => w,
        }
        .clamp(xs.lo, xs.hi);
        if before.is_some() && edge > xs.lo {
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
            )?;
        }
    }

    if let Some(f) = &fit {
        if let Some(band) = &f.band {
            // plotters does not clip to the plot area, so keep the band inside the y range.
            let clipped: Vec<(f64, f64)> = band
                .iter()
                .map(|(x, y)| (*x, y.clamp(ys.lo, ys.hi)))
                .collect();
            chart.draw_series(std::iter::once(Polygon::new(clipped, band_color.filled())))?;
        }
    }

    let warm = c.warmup_until.filter(|w| w.is_finite());
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
        if r > 0 {
            for &pt in pts {
                chart.draw_series(std::iter::once(Circle::new(pt, r, color.filled())))?;
                // Warm-up points are hollow: shown, but not part of the fit.
                if warm.is_some_and(|w| pt.0 < w) && r > 2 {
                    chart.draw_series(std::iter::once(Circle::new(pt, r - 2, WHITE.filled())))?;
                }
            }
        }
    }

    if let Some(f) = &fit {
        let line: Vec<(f64, f64)> = clip_segment(f.line, ys);
        chart.draw_series(DashedLineSeries::new(line, 9, 6, FIT.stroke_width(2)))?;
    }

    if !has_data {
        let cx = (px_range.start + px_range.end) / 2;
        let cy = (py_range.start + py_range.end) / 2;
        put_text(
            root,
            mode,
            Txt::new(DESC_PX, MUTED, HPos::Center, VPos::Center),
            "no data",
            (cx, cy),
        )?;
    }

    if show_legend {
        let at = match place {
            LegendPlace::Outside => (px_range.end + MARGIN as i32, py_range.start),
            LegendPlace::Inside(k) => {
                let inset = 10;
                let x = match k {
                    Corner::UpperLeft | Corner::LowerLeft => px_range.start + inset,
                    Corner::UpperRight | Corner::LowerRight => px_range.end - inset - lw,
                };
                let y = match k {
                    Corner::UpperLeft | Corner::UpperRight => py_range.start + inset,
                    Corner::LowerLeft | Corner::LowerRight => py_range.end - inset - lh,
                };
                (x, y)
            }
        };
        draw_legend(root, mode, at, &entries)?;
    }
    Ok(())
}

/// Clips a segment to the y span so a steep fit can't draw outside the plot.
fn clip_segment(seg: [(f64, f64); 2], ys: Span) -> Vec<(f64, f64)> {
    let [(x0, y0), (x1, y1)] = seg;
    let mut t0 = 0.0f64;
    let mut t1 = 1.0f64;
    let dy = y1 - y0;
    if dy.abs() > 0.0 {
        let ta = (ys.lo - y0) / dy;
        let tb = (ys.hi - y0) / dy;
        t0 = t0.max(ta.min(tb));
        t1 = t1.min(ta.max(tb));
    } else if y0 < ys.lo || y0 > ys.hi {
        return Vec::new();
    }
    if t0 > t1 {
        return Vec::new();
    }
    let at = |t: f64| (x0 + (x1 - x0) * t, y0 + dy * t);
    vec![at(t0), at(t1)]
}

// ---------------------------------------------------------------------------------------------
// Bar chart
// ---------------------------------------------------------------------------------------------

/// Labels wider than this are shortened; keeps the bars at least ~60% of the width.
const BAR_LABEL_MAX_PX: u32 = 360;

/// Sizes the canvas to the bars: a handful get a compact chart with ~56 px per bar, many
/// bars make it taller (28 px each) instead of squeezing them into slivers.
pub(crate) fn bar_size(c: &BarChart) -> (u32, u32) {
    let n = c.bars.len() as u32;
    let plot_h = (n * 56).clamp(220, 430).max(n * 28);
    let h = (TITLE_H + TOP_GAP + X_AREA + MARGIN + plot_h).min(8000);
    (LINE_SIZE.0, h)
}

pub(crate) fn draw_bar_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    mode: TextMode,
    c: &BarChart,
) -> Result<(), DrawErr> {
    root.fill(&WHITE)?;
    let body = draw_title(root, mode, &c.title)?;
    let (body_w, _) = body.dim_in_pixel();

    let bars: Vec<(String, f64)> = c
        .bars
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(l, v)| (fit_px(&font(TICK_PX), l, BAR_LABEL_MAX_PX, Keep::End), *v))
        .collect();
    let n = bars.len();

    let (factor, unit_name) = match c.y_unit {
        YUnit::Bytes => {
            let max = bars.iter().map(|(_, v)| v.abs()).fold(0.0f64, f64::max);
            let u = layout::byte_unit_for(max);
            (u.factor, Some(u.name))
        }
        YUnit::Count => (1.0, None),
    };
    let value_text = |v: f64| -> String {
        let body = match c.y_unit {
            YUnit::Bytes => layout::human_bytes(v),
            YUnit::Count => layout::sig3(v),
        };
        if v > 0.0 { format!("+{body}") } else { body }
    };

    let lo = bars.iter().map(|(_, v)| v / factor).fold(0.0f64, f64::min);
    let hi = bars.iter().map(|(_, v)| v / factor).fold(0.0f64, f64::max);
    let mut xs = if hi - lo > 0.0 {
        Span { lo, hi }
    } else {
        Span { lo: 0.0, hi: 1.0 }
    };

    let label_area = bars
        .iter()
        .map(|(l, _)| text_w(TICK_PX, l))
        .max()
        .unwrap_or(0)
        + (TICK_LEN + 5) as u32
        + 8;
    // Reserve room past the bar ends for the value labels, measured in pixels and converted to
    // axis units so the longest label never runs off the plot.
    let plot_w = (body_w as f64 - (label_area + 2 * MARGIN) as f64).max(100.0);
    let val_px = bars
        .iter()
        .map(|(_, v)| text_w(TICK_PX, &value_text(*v)))
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

    let (x_ticks, x_step) = layout::nice_ticks(xs, 7, false);
    let x_dec = layout::decimals_for_step(x_step);
    // Category axis: bar i sits at y = n-1-i so the first bar is at the top.
    let y_ticks: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let ys = Span {
        lo: -0.5,
        hi: n.max(1) as f64 - 0.5,
    };

    let mut chart: Chart<'_, DB> = ChartBuilder::on(&body)
        .margin_top(TOP_GAP)
        .margin_left(MARGIN)
        .margin_right(MARGIN)
        .margin_bottom(MARGIN / 2)
        .x_label_area_size(X_AREA)
        .y_label_area_size(label_area)
        .build_cartesian_2d(
            TickAxis {
                span: xs,
                ticks: x_ticks,
            },
            TickAxis {
                span: ys,
                ticks: y_ticks,
            },
        )?;

    draw_mesh(&mut chart, false)?;
    let x_tick_text: Vec<(f64, String)> = chart
        .as_coord_spec()
        .x_spec()
        .ticks
        .iter()
        .map(|v| (*v, layout::tick_label(*v, x_dec)))
        .collect();
    let y_tick_text: Vec<(f64, String)> = bars
        .iter()
        .enumerate()
        .map(|(i, (l, _))| ((n - 1 - i) as f64, l.clone()))
        .collect();
    draw_axis_text(
        root,
        mode,
        &chart,
        &AxisText {
            x_ticks: &x_tick_text,
            y_ticks: &y_tick_text,
            x_desc: unit_name.unwrap_or(""),
            y_desc: "",
            y_area: label_area,
        },
    )?;

    if lo < 0.0 {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(0.0, ys.lo), (0.0, ys.hi)],
            AXIS.stroke_width(1),
        )))?;
    }

    // Few bars would otherwise become slabs; cap them at ~36 px thick.
    let (_, py) = chart.plotting_area().get_pixel_range();
    let slot_px = f64::from((py.end - py.start).max(1)) / n.max(1) as f64;
    let half = (18.0 / slot_px).min(0.34);
    for (i, (_, v)) in bars.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        let v_scaled = v / factor;
        // Growth is what a leak report is about; shrinking mappings are shown muted.
        let color = if *v >= 0.0 {
            PALETTE[0]
        } else {
            RGBColor(0x9a, 0x9a, 0x9a)
        };
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
            &value_text(*v),
            (bx + dx, by),
        )?;
    }

    if n == 0 {
        let (px, py) = chart.plotting_area().get_pixel_range();
        put_text(
            root,
            mode,
            Txt::new(DESC_PX, MUTED, HPos::Center, VPos::Center),
            "no data",
            ((px.start + px.end) / 2, (py.start + py.end) / 2),
        )?;
    }
    Ok(())
}
