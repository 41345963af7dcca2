//! Writers of the output directory: summary.json and the human summary on
//! stderr. Only this stage (and `plot`) writes report files.

pub mod json;
pub mod text;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::Analysis;

#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct ReportError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// Writes `bytes` to `dir/name` through a temporary file, so a reader never
/// sees half a report.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, ReportError> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let err = |source| ReportError {
        path: path.clone(),
        source,
    };
    fs::write(&tmp, bytes).map_err(err)?;
    fs::rename(&tmp, &path).map_err(err)?;
    Ok(path)
}

/// Writes every report file of the analysis into `dir`.
pub fn write_all(a: &Analysis, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let summary = json::summary(a);
    let text = serde_json::to_vec_pretty(&summary).map_err(|e| ReportError {
        path: dir.join("summary.json"),
        source: io::Error::other(e),
    })?;
    Ok(vec![write_atomic(dir, "summary.json", &text)?])
}
