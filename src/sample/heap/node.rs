//! V8's heap in the Node processes `run` starts, from a preload: every
//! command's `NODE_OPTIONS` gets `--require D/boot/leakwatch-heap.js`
//! (`node_preload.js` beside this file, written into a private directory D,
//! mode 0700), so every Node process the command starts, daemons included,
//! listens on `D/<pid>.sock`. After each run's deep sample leakwatch asks
//! each of them once: the process collects its garbage and answers V8's own
//! figures (`used_heap_size` before and after, `heap_size_limit`). No
//! signal, no port, no timer in the process.
//!
//! An answer is input from another process: read to a bounded length,
//! within a timeout, parsed into plain numbers, and refused unless it names
//! the pid it was asked as.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// The preload, written to `D/boot/leakwatch-heap.js`.
pub const PRELOAD: &str = include_str!("node_preload.js");
/// Names the private directory D for the preload.
pub const ENV_DIR: &str = "LEAKWATCH_NODE_DIR";
/// Longest answer taken: one JSON line of about 100 bytes, and with
/// `--js-sites` up to 200 sites of a few hundred bytes each.
const MAX_ANSWER: u64 = 1 << 20;
/// Names the sampling interval of `--js-sites` for the preload.
pub const ENV_SITES: &str = "LEAKWATCH_NODE_SITES";
/// The most characters of a site's name and stack kept.
const MAX_SITE_TEXT: usize = 2000;
/// How long one process may take to collect its garbage and answer (a full
/// collection of a few GiB heap takes seconds).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

/// Setting the preload up failed.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot write leakwatch's Node heap reader into {dir}: {source}; set TMPDIR to a \
     writable directory, or run with --no-node-preload"
)]
pub struct PreloadError {
    dir: PathBuf,
    source: io::Error,
}

/// One process's answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Answer {
    pub v: u32,
    pub pid: u32,
    pub used_before: u64,
    pub used_after: u64,
    pub limit: u64,
    /// `--js-sites`: live sampled bytes by the innermost frame of the
    /// program's own code, largest first.
    #[serde(default)]
    pub sites: Vec<JsSite>,
}

/// One JavaScript allocation site: `fn (file:line)`, its live bytes (V8's
/// unbiased estimate from the samples) and its stack, innermost first.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JsSite {
    #[serde(rename = "s")]
    pub site: String,
    #[serde(rename = "b")]
    pub bytes: f64,
    #[serde(rename = "t", default)]
    pub stack: String,
}

/// The preload's private directory, removed when dropped.
#[derive(Debug)]
pub struct NodePreload {
    dir: tempfile::TempDir,
    /// `--js-sites`: the sampling interval, bytes.
    sites: Option<u64>,
}

impl NodePreload {
    /// Creates D (new, mode 0700, in `TMPDIR`) with the preload in it.
    pub fn prepare() -> Result<NodePreload, PreloadError> {
        let parent = std::env::temp_dir();
        let fail = |source| PreloadError {
            dir: parent.clone(),
            source,
        };
        let dir = tempfile::Builder::new()
            .prefix("leakwatch-node-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&parent)
            .map_err(fail)?;
        let boot = dir.path().join("boot");
        std::fs::create_dir(&boot).map_err(fail)?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(boot.join("leakwatch-heap.js"))
            .map_err(fail)?;
        file.write_all(PRELOAD.as_bytes()).map_err(fail)?;
        Ok(NodePreload { dir, sites: None })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The variables for each command: `NODE_OPTIONS` with the preload
    /// first (quoted, as Node reads it), then `existing` (the one leakwatch
    /// has), and D.
    pub fn env(&self, existing: Option<&OsStr>) -> Vec<(OsString, OsString)> {
        let script = self.dir.path().join("boot").join("leakwatch-heap.js");
        let quoted = script
            .to_string_lossy()
            .replace('\\', "\\\\")
            .replace('"', "\\\"");
        let mut options = OsString::from(format!("--require \"{quoted}\""));
        if let Some(existing) = existing.filter(|e| !e.is_empty()) {
            options.push(" ");
            options.push(existing);
        }
        let mut env = vec![
            ("NODE_OPTIONS".into(), options),
            (ENV_DIR.into(), self.dir.path().as_os_str().to_owned()),
        ];
        if let Some(interval) = self.sites {
            env.push((ENV_SITES.into(), interval.to_string().into()));
        }
        env
    }

    /// With `--js-sites`: V8's sampling heap profiler in every Node process,
    /// one sample per `interval` bytes allocated on average.
    pub fn with_sites(mut self, interval: u64) -> Self {
        self.sites = Some(interval);
        self
    }

    /// Whether `pid` listens in D.
    pub fn listens(&self, pid: u32) -> bool {
        self.socket(pid).exists()
    }

    fn socket(&self, pid: u32) -> PathBuf {
        self.dir.path().join(format!("{pid}.sock"))
    }

    /// Asks `pid` for its heap, within `timeout`.
    pub fn ask(&self, pid: u32, timeout: Duration) -> Result<Answer, String> {
        let path = self.socket(pid);
        let mut stream = crate::sample::sites::connect(&path).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + timeout;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        stream.write_all(b"heap\n").map_err(|e| e.to_string())?;
        let mut text = Vec::new();
        let mut reader = (&mut stream).take(MAX_ANSWER);
        let mut chunk = [0u8; 512];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("no answer within {}s", timeout.as_secs()));
            }
            reader
                .get_mut()
                .set_read_timeout(Some(left))
                .map_err(|e| e.to_string())?;
            match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    text.extend_from_slice(&chunk[..n]);
                    if text.contains(&b'\n') {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        parse_answer(&text, pid)
    }
}

/// One answer line, checked: version 1, the pid asked, sizes that agree.
pub fn parse_answer(text: &[u8], pid: u32) -> Result<Answer, String> {
    let line = text.split(|&b| b == b'\n').next().unwrap_or_default();
    let answer: Answer = serde_json::from_slice(line)
        .map_err(|e| format!("its answer is not leakwatch's heap reader's ({e})"))?;
    if answer.v != 1 {
        return Err(format!("its answer is version {}, not 1", answer.v));
    }
    if answer.pid != pid {
        return Err(format!("it answered as pid {}", answer.pid));
    }
    if answer.used_after > answer.limit.max(answer.used_before) {
        return Err("its heap figures disagree (live above the limit)".into());
    }
    let mut answer = answer;
    if answer
        .sites
        .iter()
        .any(|s| !s.bytes.is_finite() || s.bytes < 0.0)
    {
        return Err("its sites' sizes are not sizes".into());
    }
    for s in &mut answer.sites {
        s.site = s.site.chars().take(MAX_SITE_TEXT).collect();
        s.stack = s.stack.chars().take(MAX_SITE_TEXT).collect();
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked() {
        let good = br#"{"v":1,"pid":7,"used_before":900,"used_after":500,"limit":4000}
"#;
        assert_eq!(parse_answer(good, 7).unwrap().used_after, 500);
        assert!(parse_answer(good, 8).unwrap_err().contains("as pid 7"));
        assert!(parse_answer(b"<html>", 7).is_err());
        assert!(
            parse_answer(
                br#"{"v":2,"pid":7,"used_before":1,"used_after":1,"limit":1}"#,
                7
            )
            .is_err()
        );
        assert!(
            parse_answer(
                br#"{"v":1,"pid":7,"used_before":1,"used_after":-1,"limit":1}"#,
                7
            )
            .is_err()
        );
        assert!(
            parse_answer(
                br#"{"v":1,"pid":7,"used_before":1,"used_after":9,"limit":2}"#,
                7
            )
            .is_err()
        );
    }

    #[test]
    fn sites_in_an_answer_are_sizes_and_bounded() {
        let head = r#"{"v":1,"pid":7,"used_before":900,"used_after":500,"limit":4000,"sites":"#;
        let ok = format!(r#"{head}[{{"s":"keep (a.js:3)","b":4096,"t":"keep (a.js:3)"}}]}}"#);
        let a = parse_answer(ok.as_bytes(), 7).unwrap();
        assert_eq!(
            (a.sites[0].site.as_str(), a.sites[0].bytes),
            ("keep (a.js:3)", 4096.0)
        );
        let negative = format!(r#"{head}[{{"s":"x","b":-1}}]}}"#);
        assert!(parse_answer(negative.as_bytes(), 7).is_err());
        let long = format!(r#"{head}[{{"s":"{}","b":1}}]}}"#, "f".repeat(10_000));
        let a = parse_answer(long.as_bytes(), 7).unwrap();
        assert_eq!(a.sites[0].site.len(), MAX_SITE_TEXT);
        assert!(parse_answer(format!(r#"{head}"lots"}}"#).as_bytes(), 7).is_err());
    }

    #[test]
    fn with_sites_the_interval_is_passed_to_the_preload() {
        let p = NodePreload::prepare().unwrap().with_sites(262_144);
        let env = p.env(None);
        assert!(
            env.iter().any(|(k, v)| k == ENV_SITES && v == "262144"),
            "{env:?}"
        );
    }

    #[test]
    fn node_options_keep_what_was_there_after_the_preload() {
        let p = NodePreload::prepare().unwrap();
        let env = p.env(Some(OsStr::new("--max-old-space-size=512")));
        let options = env[0].1.to_string_lossy().into_owned();
        assert!(options.starts_with("--require \""), "{options}");
        assert!(
            options.ends_with("leakwatch-heap.js\" --max-old-space-size=512"),
            "{options}"
        );
        let dir = p.dir().to_path_buf();
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        drop(p);
        assert!(!dir.exists());
    }
}
