//! Text: how it is measured, shortened to fit, and drawn (with the glyph-bearing fix for
//! bitmaps).

use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::layout::{self, Face};
use super::output::DrawErr;
use super::style::FAMILY;

/// The regular face at `px` (plotters size units, see `style`).
pub(crate) fn font(px: f64) -> FontDesc<'static> {
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
pub(crate) struct Txt {
    pub px: f64,
    pub bold: bool,
    pub color: RGBColor,
    pub h: HPos,
    pub v: VPos,
    /// Reads bottom to top (the y-axis title).
    pub vertical: bool,
}

impl Txt {
    pub fn new(px: f64, color: RGBColor, h: HPos, v: VPos) -> Self {
        Txt {
            px,
            bold: false,
            color,
            h,
            v,
            vertical: false,
        }
    }

    pub fn font(&self) -> FontDesc<'static> {
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
pub(crate) fn put_text<DB: DrawingBackend>(
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
pub(crate) fn text_w(px: f64, s: &str) -> u32 {
    width_in(&font(px), s)
}

fn width_in(font: &FontDesc<'_>, s: &str) -> u32 {
    font.box_size(s)
        .map(|(w, _)| w)
        .unwrap_or((s.chars().count() as f64 * font.get_size() * 0.6) as u32)
}

/// Which end of an over-long label to keep.
#[derive(Clone, Copy)]
pub(crate) enum Keep {
    /// Paths: the file name at the end identifies them.
    End,
    /// Titles and process names: the start says what it is.
    Start,
}

/// Shortens `s` with an ellipsis until it is at most `max_px` wide in `font`, so a long
/// command line or path can't push the plot off the canvas.
pub(crate) fn fit_px(font: &FontDesc<'_>, s: &str, max_px: u32, keep: Keep) -> String {
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
