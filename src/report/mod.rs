//! Writers of the output directory: summary.json, report.md, report.html, the
//! charts (SVG and PNG), and the human summary on stderr. Only this stage (and
//! `plot`) writes report files.

pub mod charts;
pub mod ci;
pub mod doc;
pub mod fleet;
pub mod html;
pub mod junit;
pub mod markdown;
pub mod openmetrics;
pub mod sections;
pub mod text;

use std::path::{Path, PathBuf};

use crate::Analysis;
use crate::gate::GateResult;
use crate::output::{self, OutputError};
use crate::plot::PlotError;
use crate::summary;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error("cannot render {path}: {error}")]
    Render { path: PathBuf, error: String },
}

/// Writes `bytes` to `dir/name` whole (through a temporary file and a
/// rename), never through a link planted at that name; not synced, as a
/// report is rebuilt from samples.csv (`output::write_report`).
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, ReportError> {
    let path = dir.join(name);
    output::write_report(&path, bytes)?;
    Ok(path)
}

/// Writes every report file of the analysis into `dir`: summary.json, report.md,
/// the charts as `<name>.svg` and `<name>.png`, and report.html with the charts
/// inlined, and the gate's result beside the analysis.
/// The text reports come first, so a chart that fails to render costs no text.
pub fn write_all(
    a: &Analysis,
    gate: Option<&GateResult>,
    dir: &Path,
) -> Result<Vec<PathBuf>, ReportError> {
    let summary = summary::summary(a, gate);
    let text = serde_json::to_vec_pretty(&summary).map_err(|e| ReportError::Render {
        path: dir.join("summary.json"),
        error: e.to_string(),
    })?;
    let mut written = vec![write_atomic(dir, "summary.json", &text)?];

    let plots = charts::build(a);
    let doc = sections::document(a, gate, &plots);
    written.push(write_atomic(
        dir,
        "report.md",
        markdown::render(&doc).as_bytes(),
    )?);

    let plot_err = |path: PathBuf| {
        move |e: PlotError| ReportError::Render {
            path,
            error: e.to_string(),
        }
    };
    let mut svgs = Vec::new();
    for p in &plots {
        let svg_name = format!("{}.svg", p.stem);
        let svg = p.svg().map_err(plot_err(dir.join(&svg_name)))?;
        written.push(write_atomic(dir, &svg_name, svg.as_bytes())?);
        let png_name = format!("{}.png", p.stem);
        let png = p.png().map_err(plot_err(dir.join(&png_name)))?;
        written.push(write_atomic(dir, &png_name, &png)?);
        svgs.push((p.stem.clone(), svg));
    }
    written.push(write_atomic(
        dir,
        "report.html",
        html::render(&doc, &svgs).as_bytes(),
    )?);
    Ok(written)
}
