//! SVG and PNG plumbing: runs a drawing function on the right plotters backend and turns
//! plotters' backend-specific errors into [`PlotError`]s.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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

/// Renders into a PNG file at `path`, which appears only if drawing succeeded.
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
