//! Shared helpers of the end-to-end tests: the built binaries and the
//! summary.json they write.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const MIB: f64 = 1024.0 * 1024.0;

/// True when running in CI (`CI` set to anything but empty, `0` or
/// `false`): a missing dependency is then a failure, not a skip.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// A dependency of this test is missing: it fails, saying how to get it. Tests that need
/// what `.ci/deps` installs (or root) carry `#[cfg_attr(not(lw_deps), ignore = …)]` and run
/// only where it is declared present (CI, `bash .ci/test`: build.rs) or when asked for by
/// name (`-- --ignored NAME`): a test that did not run is never counted as passed.
pub fn missing(what: &str, fix: &str) -> ! {
    panic!("{what} is missing: {fix}")
}

pub fn leakwatch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_leakwatch"))
}

/// The fixture binary (an example of this crate, built by `cargo test`; a
/// filtered `cargo test --test it` may not have built it, so build it then).
pub fn fixture() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        // target/<profile>/deps/it-<hash> → target/<profile>/examples/
        let exe = std::env::current_exe().unwrap();
        let profile = exe.parent().and_then(Path::parent).unwrap();
        let path = profile.join("examples").join("leakwatch-fixture");
        if !path.exists() {
            let mut build = Command::new(env!("CARGO"));
            build.args(["build", "--example", "leakwatch-fixture"]);
            if profile.ends_with("release") {
                build.arg("--release");
            }
            let status = build
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .unwrap();
            assert!(status.success(), "cannot build the fixture: {status}");
        }
        path.to_string_lossy().into_owned()
    })
}

/// `leakwatch report OUT --out AGAIN`: the reports rebuilt from OUT's
/// samples.csv into AGAIN (exit 0 or 1, as the verdict says), and their
/// summary.json.
pub fn report_again(out: &Path, again: &Path) -> Value {
    let status = leakwatch()
        .arg("report")
        .arg(out)
        .arg("--out")
        .arg(again)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.code().is_some_and(|c| c <= 1), "{status}");
    summary(again)
}

pub fn summary(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json parses")
}

/// The series object for (name, metric) in a summary.
pub fn series<'a>(summary: &'a Value, name: &str, metric: &str) -> &'a Value {
    summary["series"]
        .as_array()
        .expect("series array")
        .iter()
        .find(|s| s["name"] == name && s["metric"] == metric)
        .unwrap_or_else(|| panic!("no series {name} {metric} in {summary:#}"))
}

pub fn assert_within(what: &str, got: f64, truth: f64, tolerance: f64) {
    let err = (got - truth).abs() / truth.abs();
    assert!(
        err <= tolerance,
        "{what}: got {got:.0}, truth {truth:.0}, error {:.2}% > {:.0}%",
        err * 100.0,
        tolerance * 100.0
    );
}

/// A fixture process started by the test, killed when dropped.
pub struct Fixture {
    pub child: Child,
}

impl Fixture {
    pub fn start(args: &[&str]) -> Fixture {
        let child = Command::new(fixture())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start fixture");
        Fixture { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the daemon's socket exists.
    pub fn wait_for(&self, path: &Path) {
        Fixture::wait_for_path(path)
    }

    pub fn wait_for_path(path: &Path) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !path.exists() {
            assert!(
                Instant::now() < deadline,
                "{} never appeared",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pids of processes in a samples.csv scope.
pub fn pids_in_scope(dir: &Path, scope: &str) -> Vec<u32> {
    let mut reader = csv::Reader::from_path(dir.join("samples.csv")).expect("samples.csv");
    let headers = reader.headers().expect("headers").clone();
    let col = |name: &str| headers.iter().position(|h| h == name).expect(name);
    let (scope_col, pid_col, tier_col) = (col("scope"), col("pid"), col("tier"));
    let mut pids: Vec<u32> = reader
        .records()
        .map(|r| r.expect("record"))
        .filter(|r| &r[scope_col] == scope && &r[tier_col] != "event")
        .map(|r| r[pid_col].parse().expect("pid"))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

pub fn out_dir(tmp: &tempfile::TempDir, name: &str) -> PathBuf {
    tmp.path().join(name)
}

/// A finished session's exit status against the verdict it wrote: without
/// a gate, 1 for a `leak` (a finding, as a linter's), 0 for anything else.
pub fn assert_exit_matches_verdict(status: std::process::ExitStatus, dir: &Path) {
    let verdict = summary(dir)["verdict"].clone();
    let want = if verdict == "leak" { 1 } else { 0 };
    assert_eq!(
        status.code(),
        Some(want),
        "verdict {verdict} must exit {want}: {status}"
    );
}

/// A program on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
