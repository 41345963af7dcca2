//! Charts for leakwatch reports: memory per run or over time (with the fitted leak line, or
//! the model the verdict used: segments, a trough envelope, change-point markers) and growth
//! per mapping, as PNG files or self-contained SVG strings.
//!
//! Everything here takes plain data and returns files or strings, so the report code never sees
//! plotters types. Text is laid out with the embedded DejaVu Sans font (registered once under the
//! generic name "sans-serif"), so rendering needs no system font libraries; in SVG output text
//! stays as `<text font-family="sans-serif">` elements and the viewer's own font draws it.
//!
//! `line` and `bar` decide what each chart shows; `frame` is the step both share (canvas,
//! title, plotting area, grid, axis labels); `legend`, `overlay` (fit, band, model lines) and
//! `markers` serve the line chart; `text` measures and draws text; `layout` holds the pure
//! arithmetic (units, spans, ticks, label shortening); `style` the sizes and colours; `output`
//! the SVG and PNG backends.

mod bar;
mod frame;
mod layout;
mod legend;
mod line;
mod markers;
mod output;
mod overlay;
mod style;
mod text;

use std::sync::OnceLock;

/// What the y values measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YUnit {
    /// Values are bytes; the axis is scaled to B/KiB/MiB/GiB/TiB (binary) and the label names
    /// the unit, e.g. "PSS (MiB)".
    Bytes,
    /// Plain counts (file descriptors, threads, …), shown as they are.
    Count,
}

/// One series: `(x, y)` points, y in bytes when the chart's unit is [`YUnit::Bytes`].
/// Non-finite points are skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A fitted line `y = slope·x + intercept` drawn dashed over `[x_from, x_to]`, with an optional
/// 95% confidence band for the slope.
#[derive(Debug, Clone, PartialEq)]
pub struct FitOverlay {
    /// What the legend calls the line, e.g. "fit" (over every point) or "end fit" (over the
    /// end the verdict was read on).
    pub name: String,
    pub slope: f64,
    pub intercept: f64,
    pub x_from: f64,
    pub x_to: f64,
    /// Lower and upper 95% bounds of the slope. The band is drawn between the lines with these
    /// slopes through the fitted point at `x_mean`, which is where an OLS fit's uncertainty is
    /// smallest.
    pub slope_ci95: Option<(f64, f64)>,
    /// Mean x of the points the fit used. `None` means: the mean x of `lines[0]`'s points
    /// within `[x_from, x_to]` (or the midpoint if there are none).
    pub x_mean: Option<f64>,
    /// The rate unit of the legend when it is not the x axis' own: (x units per rate unit,
    /// its name), e.g. `(60.0, "h")` for an axis in minutes whose rates read per hour, as
    /// the report's text says them. `None`: per x unit.
    pub legend_per: Option<(f64, String)>,
    /// The rate the verdict judged, per x unit, when the line is not the model it was read
    /// on (a curve's slope at its end): a legend row of its own, so the chart and the text
    /// give the same figure. `None`: the line's slope is that rate.
    pub judged_rate: Option<(String, f64)>,
}

/// How a [`ModelLine`] is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelStyle {
    /// Segments of a plateau or step series (a level or a line per segment): thick and solid,
    /// in a colour no data line uses.
    Steps,
    /// A lower envelope, e.g. the troughs of a saw-tooth: dashed.
    Envelope,
}

/// A model the verdict judged a series by, drawn over the data and listed in the legend.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelLine {
    /// Legend label, e.g. "segments" or "troughs (10th percentile)"; empty for no legend row.
    pub name: String,
    /// A polyline in data coordinates (x as in [`Line`], y in bytes for [`YUnit::Bytes`]),
    /// drawn in the given order. A point with a non-finite y (NaN) ends one piece and starts
    /// the next, so separate segments need no connecting line. Clipped to the plot; its y
    /// values widen the y range like the data's.
    pub points: Vec<(f64, f64)>,
    pub style: ModelStyle,
}

/// Memory (or a count) against run number or time; one line per process.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    pub title: String,
    /// E.g. "run" or "time (h)". When every x is a whole number, ticks are whole numbers too.
    pub x_label: String,
    /// E.g. "PSS"; the unit is appended for [`YUnit::Bytes`].
    pub y_label: String,
    pub y_unit: YUnit,
    pub lines: Vec<Line>,
    /// Fit of `lines[0]`.
    pub fit: Option<FitOverlay>,
    /// Points with x below this are warm-up: that region is shaded and labelled "warm-up".
    pub warmup_until: Option<f64>,
    /// Models of `lines` (segments, a trough envelope), drawn over the data and the fit in
    /// this order, each with a legend row after the fit's.
    pub model: Vec<ModelLine>,
    /// The narrowest y range to show, in data units (bytes for [`YUnit::Bytes`]): changes
    /// smaller than what the verdict counts as noise then look small, not like a cliff.
    /// Centred on the data (never below 0 for data that is not).
    pub min_y_span: Option<f64>,
    /// Vertical dotted lines at x (data coordinates) with a short label above the plot, e.g.
    /// `(7.0, "plateau from run 7")` or `(14.0, "step +2.00 MiB")`. A label hangs beside its
    /// line; labels that would overlap are stacked in up to three rows, and one that fits in
    /// none is left out (its line stays). An empty label draws the line alone. Markers outside
    /// the data's x range are left out.
    pub markers: Vec<(f64, String)>,
}

/// Horizontal bars, e.g. bytes grown per mapping. Bars are drawn top to bottom in the given
/// order; long labels are shortened from the front so a path keeps its file name.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    pub title: String,
    pub y_unit: YUnit,
    pub bars: Vec<(String, f64)>,
}

/// Why a chart could not be produced.
#[derive(thiserror::Error, Debug)]
pub enum PlotError {
    /// Drawing the SVG failed (in practice only a font problem).
    #[error("cannot render SVG chart: {message}")]
    Svg { message: String },
    /// Drawing or encoding the PNG failed.
    #[error("cannot render PNG chart: {message}")]
    Png { message: String },
    /// The embedded font was rejected by the font loader.
    #[error("cannot load the embedded DejaVu Sans font")]
    Font,
}

/// Renders a line chart as a standalone SVG document (text as `<text>`, no external references).
pub fn line_chart_svg(c: &LineChart) -> Result<String, PlotError> {
    ensure_font()?;
    output::svg(style::LINE_SIZE, |root| {
        line::draw_line_chart(root, text::TextMode::Svg, c)
    })
}

/// Renders a line chart to a PNG file; the file appears only if rendering succeeded.
pub fn line_chart_png(c: &LineChart) -> Result<Vec<u8>, PlotError> {
    ensure_font()?;
    output::png(style::LINE_SIZE, |root| {
        line::draw_line_chart(root, text::TextMode::Bitmap, c)
    })
}

/// Renders a bar chart as a standalone SVG document.
pub fn bar_chart_svg(c: &BarChart) -> Result<String, PlotError> {
    ensure_font()?;
    output::svg(bar::bar_size(c), |root| {
        bar::draw_bar_chart(root, text::TextMode::Svg, c)
    })
}

/// Renders a bar chart to a PNG file; the file appears only if rendering succeeded.
pub fn bar_chart_png(c: &BarChart) -> Result<Vec<u8>, PlotError> {
    ensure_font()?;
    output::png(bar::bar_size(c), |root| {
        bar::draw_bar_chart(root, text::TextMode::Bitmap, c)
    })
}

/// plotters looks fonts up by family name in a process-wide table; without the `ttf` feature
/// that table starts empty, so every text draw would fail until we register one.
fn ensure_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        use plotters::style::{FontStyle, register_font};
        // Bold is for titles; other styles fall back to Normal inside plotters.
        register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular()).is_ok()
            && register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold()).is_ok()
    });
    // The same faces, parsed by ab_glyph for measuring (see `text::Fonts`).
    if ok && text::fonts().is_some() {
        Ok(())
    } else {
        Err(PlotError::Font)
    }
}

#[cfg(test)]
mod tests;
