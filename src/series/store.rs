//! `samples.csv`: one tidy row per process per sample (plus event rows),
//! appended and flushed as samples are taken, and read back for `report`.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a row holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// `status` and fd count only.
    #[default]
    Cheap,
    /// `status` plus `smaps_rollup`.
    Deep,
    /// No memory: `event` says what happened.
    Event,
    /// One mapping name of one process from `smaps` (`comm` holds the
    /// mapping: `[heap]`, `[anon]`, a path), taken at the first and last run.
    Mapping,
}

impl Row {
    /// A whole-process memory sample (not an event, not a mapping).
    pub fn is_process_sample(&self) -> bool {
        matches!(self.tier, Tier::Cheap | Tier::Deep)
    }
}

/// One row of `samples.csv`. Sizes in bytes; a field the kernel or the tier
/// did not give is empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Batch number: rows taken together share it.
    pub sample: u64,
    /// Run number in `run` mode (0 = before the first run), empty in `attach`.
    pub run: Option<u32>,
    /// Seconds since leakwatch started.
    pub t_seconds: f64,
    pub timestamp: String,
    /// `command`, `survivors`, `pid:<PID>` or `target`.
    pub scope: String,
    pub pid: u32,
    pub ppid: u32,
    /// Clock ticks since boot; with `pid` it names one process.
    pub start_time: u64,
    pub comm: String,
    pub tier: Tier,
    pub event: Option<String>,
    pub exit_code: Option<i32>,
    pub rss_bytes: Option<u64>,
    pub anon_bytes: Option<u64>,
    pub file_bytes: Option<u64>,
    pub shmem_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub hwm_bytes: Option<u64>,
    pub threads: Option<u64>,
    pub fds: Option<u64>,
    pub pss_bytes: Option<u64>,
    pub pss_anon_bytes: Option<u64>,
    pub pss_file_bytes: Option<u64>,
    pub pss_shmem_bytes: Option<u64>,
    pub shared_clean_bytes: Option<u64>,
    pub shared_dirty_bytes: Option<u64>,
    pub private_clean_bytes: Option<u64>,
    pub private_dirty_bytes: Option<u64>,
    pub uss_bytes: Option<u64>,
    pub shared_bytes: Option<u64>,
    pub swap_pss_bytes: Option<u64>,
}

/// A session-level event row: `note` (its text in `comm`) or `interrupted`.
pub fn note_row(event: &str, text: &str) -> Row {
    Row {
        scope: "leakwatch".into(),
        comm: text.to_string(),
        tier: Tier::Event,
        event: Some(event.to_string()),
        ..Row::default()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error(
        "{path} line {line} is corrupt ({what}); fix or delete that line and run \
         `leakwatch report` again (only a torn last line is skipped by itself)"
    )]
    Corrupt {
        path: PathBuf,
        line: u64,
        what: String,
    },
    #[error("{path} holds no samples; was leakwatch stopped before its first sample?")]
    Empty { path: PathBuf },
    #[error(
        "{path} is not a leakwatch samples.csv (its header lacks {missing}); give the samples.csv of a leakwatch output directory"
    )]
    NotSamples {
        path: PathBuf,
        missing: &'static str,
    },
}

/// Appends rows to `samples.csv`, flushing after each batch so a killed
/// leakwatch loses at most the batch in flight.
pub struct SampleWriter {
    path: PathBuf,
    writer: csv::Writer<File>,
    rows: u64,
}

impl SampleWriter {
    pub fn create(path: &Path) -> Result<Self, StoreError> {
        let err = |source| StoreError::Write {
            path: path.to_path_buf(),
            source,
        };
        let file = File::create(path).map_err(err)?;
        Ok(SampleWriter {
            path: path.to_path_buf(),
            writer: csv::Writer::from_writer(file),
            rows: 0,
        })
    }

    pub fn rows_written(&self) -> u64 {
        self.rows
    }

    /// Writes a batch and flushes it to the file.
    pub fn write_batch(&mut self, rows: &[Row]) -> Result<(), StoreError> {
        for row in rows {
            self.writer.serialize(row).map_err(|e| StoreError::Write {
                path: self.path.clone(),
                source: io::Error::other(e),
            })?;
            self.rows += 1;
        }
        // csv's flush also flushes the file: the rows reach the kernel now.
        self.writer.flush().map_err(|source| StoreError::Write {
            path: self.path.clone(),
            source,
        })?;
        Ok(())
    }
}

/// Reads `samples.csv`. A truncated last line (leakwatch killed mid-write) is
/// dropped silently; any other bad line is an error naming it.
pub fn read_samples(path: &Path) -> Result<Vec<Row>, StoreError> {
    let file = File::open(path).map_err(|source| StoreError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut reader = csv::Reader::from_reader(file);
    if let Ok(headers) = reader.headers().cloned()
        && !headers.is_empty()
    {
        for required in ["sample", "scope", "pid", "tier"] {
            if !headers.iter().any(|h| h == required) {
                return Err(StoreError::NotSamples {
                    path: path.to_path_buf(),
                    missing: required,
                });
            }
        }
    }
    let mut rows = Vec::new();
    let mut pending: Option<StoreError> = None;
    for result in reader.deserialize::<Row>() {
        // Only the last line may be torn; an error followed by more rows is corruption.
        if let Some(err) = pending.take() {
            return Err(err);
        }
        match result {
            Ok(row) => rows.push(row),
            Err(e) => {
                let line = e.position().map(|p| p.line()).unwrap_or(0);
                pending = Some(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    line,
                    what: e.to_string(),
                });
            }
        }
    }
    if rows.is_empty() {
        return Err(pending.unwrap_or(StoreError::Empty {
            path: path.to_path_buf(),
        }));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(sample: u64, rss: u64) -> Row {
        Row {
            sample,
            run: Some(sample as u32),
            scope: "survivors".into(),
            pid: 42,
            comm: "daemon, with \"quotes\"".into(),
            tier: Tier::Deep,
            rss_bytes: Some(rss),
            pss_bytes: Some(rss / 2),
            ..Row::default()
        }
    }

    #[test]
    fn rows_round_trip_and_empty_fields_stay_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut w = SampleWriter::create(&path).unwrap();
        w.write_batch(&[row(0, 4096), row(1, 8192)]).unwrap();
        let back = read_samples(&path).unwrap();
        assert_eq!(back, vec![row(0, 4096), row(1, 8192)]);
        assert_eq!(back[0].uss_bytes, None);
    }

    #[test]
    fn a_torn_last_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut w = SampleWriter::create(&path).unwrap();
        w.write_batch(&[row(0, 4096), row(1, 8192)]).unwrap();
        drop(w);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("2,2,0.5,ts,survivors,42,0,0,x,deep,,,12");
        std::fs::write(&path, text).unwrap();
        assert_eq!(read_samples(&path).unwrap().len(), 2);
    }

    #[test]
    fn corruption_in_the_middle_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut w = SampleWriter::create(&path).unwrap();
        w.write_batch(&[row(0, 4096)]).unwrap();
        drop(w);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        let good = lines[1].to_string();
        lines.push("not,a,row");
        lines.push(&good);
        std::fs::write(&path, lines.join("\n")).unwrap();
        let err = read_samples(&path).unwrap_err().to_string();
        assert!(err.contains("line 3"), "{err}");
    }

    #[test]
    fn an_empty_file_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        std::fs::write(&path, "").unwrap();
        assert!(matches!(read_samples(&path), Err(StoreError::Empty { .. })));
    }
}
