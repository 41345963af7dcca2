//! The look shared by every chart: canvas and margin sizes, font sizes and colours.

use plotters::style::RGBColor;

/// Canvas of the line charts: wide enough for ~10 legend entries beside the data, short enough
/// to sit in a report page without scrolling.
pub(crate) const LINE_SIZE: (u32, u32) = (1000, 560);

/// The family the embedded DejaVu Sans is registered under (see `plot::ensure_font`).
pub(crate) const FAMILY: &str = "sans-serif";
pub(crate) const TITLE_H: u32 = 44;
// plotters sizes are not CSS pixels: ab_glyph draws an em of 0.86×size and the SVG backend
// writes font-size = size/1.24, so these come out at roughly 20/14/13/13 px in both outputs.
pub(crate) const TITLE_PX: f64 = 24.0;
pub(crate) const DESC_PX: f64 = 17.0;
pub(crate) const TICK_PX: f64 = 16.0;
pub(crate) const LEGEND_PX: f64 = 15.5;
pub(crate) const TICK_LEN: i32 = 5;
pub(crate) const MARGIN: u32 = 16;
/// Room above the plot for the "warm-up" label, which lives outside the data so it can
/// never collide with points or the legend.
pub(crate) const TOP_GAP: u32 = 22;
pub(crate) const X_AREA: u32 = 52;

/// matplotlib's "tab10": ten hues that stay distinguishable on white and for most colour-blind
/// readers; a process tree rarely has more lines than that, and beyond it colours repeat.
pub(crate) const PALETTE: [RGBColor; 10] = [
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
pub(crate) const TEXT: RGBColor = RGBColor(0x22, 0x22, 0x22);
pub(crate) const MUTED: RGBColor = RGBColor(0x66, 0x66, 0x66);
pub(crate) const GRID: RGBColor = RGBColor(0xe4, 0xe4, 0xe4);
pub(crate) const AXIS: RGBColor = RGBColor(0x88, 0x88, 0x88);
pub(crate) const FIT: RGBColor = RGBColor(0x22, 0x22, 0x22);
pub(crate) const WARMUP_FILL: RGBColor = RGBColor(0xfa, 0xf0, 0xdc);
/// Model lines (segments, envelopes), by position in `LineChart::model`: Okabe–Ito vermillion
/// first (no tab10 data line is close to it, and it stands out on the blue first series),
/// then purple and near-black for a second or third model.
pub(crate) const MODEL: [RGBColor; 3] = [
    RGBColor(0xd5, 0x5e, 0x00),
    RGBColor(0x6a, 0x3d, 0x9a),
    RGBColor(0x22, 0x22, 0x22),
];
/// Stroke widths: data lines are 2 px; a step model is drawn wider so it reads as the
/// summary of the points it covers, an envelope a little wider than the data.
pub(crate) const STEPS_W: u32 = 4;
pub(crate) const STEPS_ALPHA: f64 = 0.75;
pub(crate) const ENVELOPE_W: u32 = 3;
/// The dotted marker lines.
pub(crate) const MARKER: RGBColor = RGBColor(0x55, 0x55, 0x55);
