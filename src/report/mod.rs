//! Writers of the output directory: summary.json, report.md, report.html, the
//! charts (SVG and PNG), and the human summary on stderr. Only this stage (and
//! `plot`) writes report files.

pub mod charts;
pub mod ci;
pub mod doc;
pub mod html;
pub mod junit;
pub mod markdown;
pub mod sections;
pub mod text;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::Analysis;
use crate::gate::GateResult;
use crate::plot::PlotError;
use crate::store::Row;
use crate::summary;

#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {error}")]
pub struct ReportError {
    pub path: PathBuf,
    pub error: io::Error,
}

/// Writes `bytes` to `dir/name` through a temporary file, so a reader never
/// sees half a report.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, ReportError> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let err = |error| ReportError {
        path: path.clone(),
        error,
    };
    fs::write(&tmp, bytes).map_err(err)?;
    fs::rename(&tmp, &path).map_err(err)?;
    Ok(path)
}

/// Writes every report file of the analysis into `dir`: summary.json, report.md,
/// the charts as `<name>.svg` and `<name>.png`, and report.html with the charts
/// inlined, and the gate's result beside the analysis. `rows` are the samples the analysis came from (per-process lines).
/// The text reports come first, so a chart that fails to render costs no text.
pub fn write_all(
    a: &Analysis,
    gate: Option<&GateResult>,
    rows: &[Row],
    dir: &Path,
) -> Result<Vec<PathBuf>, ReportError> {
    let summary = summary::summary(a, gate);
    let text = serde_json::to_vec_pretty(&summary).map_err(|e| ReportError {
        path: dir.join("summary.json"),
        error: io::Error::other(e),
    })?;
    let mut written = vec![write_atomic(dir, "summary.json", &text)?];

    let plots = charts::build(a, rows);
    let doc = sections::document(a, gate, &plots);
    written.push(write_atomic(
        dir,
        "report.md",
        markdown::render(&doc).as_bytes(),
    )?);

    let plot_err = |path: PathBuf| {
        move |e: PlotError| ReportError {
            path,
            error: io::Error::other(e),
        }
    };
    let mut svgs = Vec::new();
    for p in &plots {
        let svg_name = format!("{}.svg", p.stem);
        let svg = p.svg().map_err(plot_err(dir.join(&svg_name)))?;
        written.push(write_atomic(dir, &svg_name, svg.as_bytes())?);
        let png = dir.join(format!("{}.png", p.stem));
        p.png(&png).map_err(plot_err(png.clone()))?;
        written.push(png);
        svgs.push((p.stem.clone(), svg));
    }
    written.push(write_atomic(
        dir,
        "report.html",
        html::render(&doc, &svgs).as_bytes(),
    )?);
    Ok(written)
}
