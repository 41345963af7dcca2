//! `samples.csv`: one tidy row per process per sample (plus event rows),
//! appended and flushed as samples are taken, and read back for `report`.
//! The contract every stage may read: the bottom layer of the pipeline.

use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Which processes a row (and a series) belongs to. Ordered as reports list
/// them: survivors, watched pids, the attach target, the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Processes the runs left behind (`run` mode).
    Survivors,
    /// A `--watch` process with its descendants.
    Pid(u32),
    /// The attached process with its descendants (`attach` mode).
    Target,
    /// The command's own tree while it runs.
    Command,
    /// leakwatch itself: notes and the interruption, no process.
    Session,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Survivors => f.write_str("survivors"),
            Scope::Pid(pid) => write!(f, "pid:{pid}"),
            Scope::Target => f.write_str("target"),
            Scope::Command => f.write_str("command"),
            Scope::Session => f.write_str("leakwatch"),
        }
    }
}

/// A scope name that is none of `survivors`, `pid:<PID>`, `target`, `command`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a scope; use survivors, pid:<PID>, target or command")]
pub struct ScopeError(pub String);

impl FromStr for Scope {
    type Err = ScopeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "survivors" => Ok(Scope::Survivors),
            "target" => Ok(Scope::Target),
            "command" => Ok(Scope::Command),
            "leakwatch" => Ok(Scope::Session),
            other => other
                .strip_prefix("pid:")
                .and_then(|p| p.parse().ok())
                .map(Scope::Pid)
                .ok_or_else(|| ScopeError(other.to_string())),
        }
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

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
    /// A row of `scope` with nothing filled in.
    pub fn new(scope: Scope) -> Row {
        Row {
            sample: 0,
            run: None,
            t_seconds: 0.0,
            timestamp: String::new(),
            scope,
            pid: 0,
            ppid: 0,
            start_time: 0,
            comm: String::new(),
            tier: Tier::default(),
            event: None,
            exit_code: None,
            rss_bytes: None,
            anon_bytes: None,
            file_bytes: None,
            shmem_bytes: None,
            swap_bytes: None,
            hwm_bytes: None,
            threads: None,
            fds: None,
            pss_bytes: None,
            pss_anon_bytes: None,
            pss_file_bytes: None,
            pss_shmem_bytes: None,
            shared_clean_bytes: None,
            shared_dirty_bytes: None,
            private_clean_bytes: None,
            private_dirty_bytes: None,
            uss_bytes: None,
            shared_bytes: None,
            swap_pss_bytes: None,
        }
    }

    /// A whole-process memory sample (not an event, not a mapping).
    pub fn is_process_sample(&self) -> bool {
        matches!(self.tier, Tier::Cheap | Tier::Deep)
    }
}

/// One row of `samples.csv`. Sizes in bytes; a field the kernel or the tier
/// did not give is empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Batch number: rows taken together share it.
    pub sample: u64,
    /// Run number in `run` mode (0 = before the first run), empty in `attach`.
    pub run: Option<u32>,
    /// Seconds since leakwatch started.
    pub t_seconds: f64,
    pub timestamp: String,
    pub scope: Scope,
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
        comm: text.to_string(),
        tier: Tier::Event,
        event: Some(event.to_string()),
        ..Row::new(Scope::Session)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Output(#[from] crate::output::OutputError),
    #[error("cannot write {path}: {error}")]
    Write { path: PathBuf, error: io::Error },
    #[error("cannot read {path}: {error}")]
    Read { path: PathBuf, error: io::Error },
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
    /// Creates a new samples.csv (never over an existing file or a link).
    pub fn create(path: &Path) -> Result<Self, StoreError> {
        let file = crate::output::create_new(path)?;
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
                error: io::Error::other(e),
            })?;
            self.rows += 1;
        }
        // csv's flush also flushes the file: the rows reach the kernel now.
        self.writer.flush().map_err(|error| StoreError::Write {
            path: self.path.clone(),
            error,
        })?;
        Ok(())
    }
}

/// Reads `samples.csv`. A truncated last line (leakwatch killed mid-write) is
/// dropped silently; any other bad line is an error naming it.
pub fn read_samples(path: &Path) -> Result<Vec<Row>, StoreError> {
    let file = File::open(path).map_err(|error| StoreError::Read {
        path: path.to_path_buf(),
        error,
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
            pid: 42,
            comm: "daemon, with \"quotes\"".into(),
            tier: Tier::Deep,
            rss_bytes: Some(rss),
            pss_bytes: Some(rss / 2),
            ..Row::new(Scope::Survivors)
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
    fn scopes_read_back_as_written_and_sort_in_report_order() {
        for text in ["survivors", "pid:4242", "target", "command", "leakwatch"] {
            assert_eq!(text.parse::<Scope>().unwrap().to_string(), text);
        }
        for bad in ["pid:", "pid:x", "Target", ""] {
            assert!(bad.parse::<Scope>().is_err(), "{bad}");
        }
        let mut scopes = vec![
            Scope::Command,
            Scope::Target,
            Scope::Pid(9),
            Scope::Survivors,
        ];
        scopes.sort();
        assert_eq!(
            scopes,
            vec![
                Scope::Survivors,
                Scope::Pid(9),
                Scope::Target,
                Scope::Command
            ]
        );
    }

    #[test]
    fn an_empty_file_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        std::fs::write(&path, "").unwrap();
        assert!(matches!(read_samples(&path), Err(StoreError::Empty { .. })));
    }
}
