//! SVG and PNG plumbing: runs a drawing function on the right plotters backend and turns
//! plotters' backend-specific errors into [`PlotError`]s.

use std::cell::RefCell;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::PlotError;

/// Internal drawing error; plotters' error types are generic over the backend, so we flatten
/// them to text at this boundary and attach the output path in the public error.
pub(crate) struct DrawErr(String);

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for DrawErr {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        DrawErr(e.to_string())
    }
}

/// Renders into an SVG document held in memory.
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

thread_local! {
    /// The pixels of the last PNG drawn, reused by the next: a fresh buffer
    /// is a page fault per 4 KiB at its first touch (410 for a 1000×560
    /// chart; measured: docs/performance.md#one-canvas-for-every-chart).
    static CANVAS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Renders into a PNG image held in memory: the caller writes it where it
/// belongs (the report writes every file without following links), and a
/// failed draw writes nothing at all.
pub(crate) fn png<F>(size: (u32, u32), draw: F) -> Result<Vec<u8>, PlotError>
where
    F: FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), DrawErr>,
{
    CANVAS.with_borrow_mut(|rgb| {
        let (w, h) = size;
        rgb.clear();
        rgb.resize(w as usize * h as usize * 3, 0);
        {
            let root = BitMapBackend::with_buffer(rgb, size).into_drawing_area();
            draw(&root)
                .and_then(|()| root.present().map_err(DrawErr::from))
                .map_err(|DrawErr(message)| PlotError::Png { message })?;
        }
        let mut out = Vec::new();
        let encoded = (|| {
            let mut encoder = png::Encoder::new(&mut out, w, h);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            encoder.write_header()?.write_image_data(rgb)
        })();
        encoded.map_err(|e| PlotError::Png {
            message: e.to_string(),
        })?;
        Ok(out)
    })
}
