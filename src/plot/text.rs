//! Text: how it is measured (ab_glyph on the embedded DejaVu Sans), shortened to fit, and
//! drawn, with the glyph-bearing fix for bitmaps.

use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, ScaleFont};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::layout;
use super::output::DrawErr;
use super::style::FAMILY;

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

/// Draws `s` anchored at `pos`.
///
/// For bitmaps each glyph is drawn on its own at pen position + its left side bearing:
/// plotters' ab_glyph path places a glyph's bitmap at the pen position and drops the bearing,
/// so narrow glyphs ("1", ".", "i") sit too far left and PNG labels read "1 0" or
/// "+1.1 0 MiB". SVG text is laid out by the viewer and needs no fix.
pub(crate) fn put_text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    mode: TextMode,
    t: Txt,
    s: &str,
    pos: (i32, i32),
) -> Result<(), DrawErr> {
    let font = t.font();
    let fonts = match mode {
        TextMode::Bitmap => fonts(),
        TextMode::Svg => None,
    };
    let Some(f) = fonts else {
        area.draw_text(s, &font.color(&t.color).pos(Pos::new(t.h, t.v)), pos)?;
        return Ok(());
    };
    let width = |p: &str| f.width(t.bold, t.px, p);
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
        let along = start + width(&s[..i]) + f.bearing(t.bold, t.px, ch);
        let (dx, dy) = trans.transform(along, 0);
        area.draw_text(ch.encode_utf8(&mut buf), &style, (pos.0 + dx, pos.1 + dy))?;
    }
    Ok(())
}

/// Pixel width of `s` in the regular face.
pub(crate) fn text_w(px: f64, s: &str) -> u32 {
    width(false, px, s)
}

/// Pixel width of `s`; a rough per-character estimate if the font did not load.
fn width(bold: bool, px: f64, s: &str) -> u32 {
    match fonts() {
        Some(f) => f.width(bold, px, s).max(0) as u32,
        None => (s.chars().count() as f64 * px * 0.6) as u32,
    }
}

/// Which end of an over-long label to keep.
#[derive(Clone, Copy)]
pub(crate) enum Keep {
    /// Paths: the file name at the end identifies them.
    End,
    /// Titles and process names: the start says what it is.
    Start,
}

/// Shortens `s` with an ellipsis until it is at most `max_px` wide at size `px`, so a long
/// command line or path can't push the plot off the canvas.
pub(crate) fn fit_px(px: f64, bold: bool, s: &str, max_px: u32, keep: Keep) -> String {
    if width(bold, px, s) <= max_px {
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
        if width(bold, px, &cut(mid)) <= max_px {
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

    /// Labels of the kinds the charts draw, every printable ASCII character, and non-ASCII
    /// text (ellipsis, accents, units, CJK, an emoji, a character no font has).
    fn samples() -> Vec<String> {
        let mut v: Vec<String> = [
            "leak <&> \"quoted\"",
            "PSS (MiB)",
            "fit: +4.67 MiB per run",
            "95% CI: +4.40 to +4.90 MiB per run",
            "…/x86_64-linux-gnu/libpython3.11.so.1.0",
            "1 10 11 111 1.5 0.25 1024 -0",
            "AVAVA Te To Yo LT WAW fi fl ff",
            "café naïve Ünïcödé µs × − – — ° ±",
            "日本語 プロセス",
            "🙂 emoji \u{10FFFF}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.push((' '..='~').collect());
        v
    }

    /// Our widths are plotters' own (its estimator anchors SVG-independent layout): if a
    /// plotters upgrade changes how it measures, this says so.
    #[test]
    fn widths_match_plotters() {
        crate::plot::ensure_font().unwrap();
        let f = fonts().unwrap();
        for bold in [false, true] {
            for px in [TITLE_PX, DESC_PX, TICK_PX, LEGEND_PX, 10.0, 31.0] {
                let t = Txt {
                    bold,
                    ..Txt::new(px, RGBColor(0, 0, 0), HPos::Left, VPos::Top)
                };
                let desc = t.font();
                for s in samples() {
                    let theirs = desc.layout_box(&s).map(|((x0, _), (x1, _))| x1 - x0);
                    assert_eq!(
                        Ok(f.width(bold, px, &s)),
                        theirs.map_err(|_| ()),
                        "{s} {px}"
                    );
                }
            }
        }
    }

    /// Bearings the hand-written hmtx reader gave before ab_glyph replaced it (the same at
    /// 15.5 and 16 px): "1" sits well right of its pen position, "0" and "W" do not.
    #[test]
    fn dejavu_bearings() {
        let f = fonts().unwrap();
        let at = |bold: bool, px: f64| -> Vec<i32> {
            "10.i…Wé".chars().map(|c| f.bearing(bold, px, c)).collect()
        };
        assert_eq!(at(false, TICK_PX), [1, 0, 1, 1, 1, 0, 0]);
        assert_eq!(at(false, LEGEND_PX), [1, 0, 1, 1, 1, 0, 0]);
        assert_eq!(at(false, TITLE_PX), [2, 1, 2, 1, 2, 0, 1]);
        assert_eq!(at(true, TITLE_PX), [2, 0, 2, 1, 1, 0, 0]);
        assert_eq!(f.width(false, TICK_PX, "10"), 17);
    }

    #[test]
    fn fit_px_keeps_the_right_end() {
        let path = format!("/{}/libfoo.so.1", "deep/".repeat(40));
        let short = fit_px(TICK_PX, false, &path, 200, Keep::End);
        assert!(
            short.starts_with('…') && short.ends_with("libfoo.so.1"),
            "{short}"
        );
        assert!(text_w(TICK_PX, &short) <= 200);
        let title = fit_px(
            TITLE_PX,
            true,
            &"python3 -m pants ".repeat(20),
            300,
            Keep::Start,
        );
        assert!(
            title.starts_with("python3") && title.ends_with('…'),
            "{title}"
        );
        assert_eq!(fit_px(TICK_PX, false, "[heap]", 200, Keep::End), "[heap]");
    }
}
