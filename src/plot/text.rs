//! Text: how it is measured, shortened to fit, and drawn (with the glyph-bearing fix for
//! bitmaps).

use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, ScaleFont};
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

/// The embedded DejaVu Sans faces as ab_glyph reads them: the same font data and the same
/// arithmetic as plotters' ab_glyph text path, so what we measure is what it draws.
pub(crate) struct Fonts {
    regular: FontRef<'static>,
    bold: FontRef<'static>,
}

/// `None` only if the embedded font does not parse (then `plot::ensure_font` fails first).
pub(crate) fn fonts() -> Option<&'static Fonts> {
    static FONTS: OnceLock<Option<Fonts>> = OnceLock::new();
    FONTS
        .get_or_init(|| {
            Some(Fonts {
                regular: FontRef::try_from_slice(dejavu::sans::regular()).ok()?,
                bold: FontRef::try_from_slice(dejavu::sans::bold()).ok()?,
            })
        })
        .as_ref()
}

impl Fonts {
    fn face(&self, bold: bool) -> &FontRef<'static> {
        if bold { &self.bold } else { &self.regular }
    }

    /// Advance width of `s` in pixels at plotters size `px`: the sum of the glyph advances and
    /// kerning, truncated, exactly as plotters' `estimate_layout` computes it.
    pub fn width(&self, bold: bool, px: f64, s: &str) -> i32 {
        let font = self.face(bold).as_scaled(px as f32);
        let mut w = 0f32;
        let mut prev = None;
        for c in s.chars() {
            let id = font.glyph_id(c);
            w += font.h_advance(id);
            if let Some(p) = prev {
                w += font.kern(p, id);
            }
            prev = Some(id);
        }
        w as i32
    }

    /// Where ab_glyph puts the first pixel column of `c` relative to the pen at plotters size
    /// `px`: the glyph's left side bearing, floored as the outline's pixel bounds are. A
    /// character the font lacks is drawn as the .notdef box and gets that glyph's bearing.
    pub fn bearing(&self, bold: bool, px: f64, c: char) -> i32 {
        let font = self.face(bold).as_scaled(px as f32);
        font.h_side_bearing(font.glyph_id(c)).floor() as i32
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::style::{DESC_PX, LEGEND_PX, TICK_PX, TITLE_PX};

    /// Labels of the kinds the charts draw, every printable ASCII character, and the
    /// non-ASCII characters that occur (ellipsis, accents, units, a CJK name, an emoji).
    fn samples() -> Vec<String> {
        let mut v: Vec<String> = [
            "leak <&> \"quoted\"",
            "PSS (MiB)",
            "time (h)",
            "run",
            "warm-up",
            "fit: +4.67 MiB per run",
            "95% CI: 4.40 to 4.90 MiB per run",
            "+31.0 MiB",
            "-4.00 KiB",
            "…/x86_64-linux-gnu/libpython3.11.so.1.0",
            "python3 -m pants --no-pantsd …",
            "worker --config /etc/x.toml",
            "[heap] [stack] [vdso] anonymous",
            "1 10 11 111 1.5 0.25 1024 -0",
            "AVAVA Te To Yo LT WAW fi fl ff",
            "café naïve Ünïcödé µs × − – — ° ±",
            "日本語 プロセス",
            "🙂 emoji",
            "\u{10FFFF}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.push((' '..='~').collect());
        v
    }

    /// Sizes the charts use, and a few around them.
    const SIZES: [f64; 8] = [
        TITLE_PX, DESC_PX, TICK_PX, LEGEND_PX, 10.0, 12.5, 20.0, 31.0,
    ];

    /// The replacement of the hand-written cmap/hmtx reader: per character, where put_text
    /// puts the glyph (pen position from the width of the text before it, plus the bearing),
    /// old (plotters' estimator + hand-read hmtx) against new (ab_glyph).
    #[test]
    fn ab_glyph_metrics_match_the_old_measurement() {
        crate::plot::ensure_font().unwrap();
        let f = fonts().unwrap();
        let (mut max_w, mut max_pos, mut n) = (0i32, 0i32, 0usize);
        for bold in [false, true] {
            let old_face = face(bold).unwrap();
            for px in SIZES {
                let style = if bold {
                    FontStyle::Bold
                } else {
                    FontStyle::Normal
                };
                let desc = FontDesc::new(FontFamily::Name(FAMILY), px, style);
                let old_w = |p: &str| {
                    desc.layout_box(p)
                        .map(|((x0, _), (x1, _))| x1 - x0)
                        .unwrap()
                };
                for s in samples() {
                    max_w = max_w.max((old_w(&s) - f.width(bold, px, &s)).abs());
                    for (i, ch) in s.char_indices() {
                        let old = old_w(&s[..i]) + old_face.bearing_px(ch, px);
                        let new = f.width(bold, px, &s[..i]) + f.bearing(bold, px, ch);
                        max_pos = max_pos.max((old - new).abs());
                        n += 1;
                    }
                }
            }
        }
        // Every character of the Basic Multilingual Plane, bearing alone.
        let mut max_b = 0i32;
        for bold in [false, true] {
            let old_face = face(bold).unwrap();
            for px in [TITLE_PX, DESC_PX, TICK_PX, LEGEND_PX] {
                for ch in (0x20u32..0x1_0000).filter_map(char::from_u32) {
                    let d = old_face.bearing_px(ch, px) - f.bearing(bold, px, ch);
                    max_b = max_b.max(d.abs());
                }
            }
        }
        eprintln!("every BMP character: max bearing diff {max_b} px");
        eprintln!(
            "compared {n} glyph positions: max width diff {max_w} px, max glyph position diff {max_pos} px"
        );
        assert!(
            max_w <= 1 && max_pos <= 1 && max_b <= 1,
            "width {max_w}, position {max_pos}"
        );
    }
}
