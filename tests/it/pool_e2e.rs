//! Worker pools end to end, on real CPython pools (fixtures/*.py): copy-on-write
//! unsharing told from a leak, and a per-task leak found across recycled workers.

use crate::common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

fn fixture_py(name: &str) -> String {
    format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A Python fixture, stopped when dropped: TERM (it stops its workers),
/// then KILL if it has not exited within 5 s, so a test never hangs here.
struct Py(Child);

impl Drop for Py {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn findings<'a>(s: &'a Value, kind: &str) -> Vec<&'a Value> {
    s["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

/// Starts the prefork pool, attaches to its master while the workers run
/// their gc tasks, and returns the summary and the workers' own smaps truth.
fn cow_pool(freeze: bool, tmp: &Path) -> (Value, Vec<Value>) {
    let truth = tmp.join("truth.jsonl");
    let mut cmd = Command::new("python3");
    cmd.arg(fixture_py("cow_pool.py"))
        .args([
            "--workers",
            "3",
            "--heap-mb",
            "64",
            "--delay",
            "1.5",
            "--truth",
        ])
        .arg(&truth)
        .stdout(Stdio::piped());
    if freeze {
        cmd.arg("--freeze");
    }
    let mut pool = Py(cmd
        .spawn()
        .expect("python3 is needed for the pool fixtures"));
    // "ready <pids>" once the workers are forked: attach before they unshare.
    let mut line = String::new();
    BufReader::new(pool.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("ready"), "{line}");
    let out = tmp.join("r");
    let status = leakwatch()
        .args(["attach", &pool.0.id().to_string(), "--interval", "200ms"])
        .args([
            "--duration",
            "5s",
            "--deep-budget",
            "20%",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let truth: Vec<Value> = std::fs::read_to_string(&truth)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(truth.len(), 3, "every worker finished its tasks");
    (summary(&out), truth)
}

#[test]
fn cpython_pool_without_gc_freeze_is_copy_on_write_not_a_leak() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, truth) = cow_pool(false, tmp.path());
    let cow = findings(&s, "cow_unsharing");
    assert!(findings(&s, "leak").is_empty(), "{:#}", s["findings"]);
    assert_ne!(s["verdict"], "leak");
    for worker in &truth {
        let pid = worker["pid"].as_u64().unwrap();
        let f = cow
            .iter()
            .find(|f| f["pid"] == pid)
            .unwrap_or_else(|| panic!("no cow finding for worker {pid}: {:#}", s["findings"]));
        // What smaps says the worker unshared: its Private_Dirty rise.
        let private = |k: &str| worker[k]["Private_Dirty"].as_f64().unwrap();
        let truth_bytes = private("after") - private("before");
        assert!(
            truth_bytes > 30.0 * MIB,
            "the fixture unshared only {truth_bytes}"
        );
        assert_within(
            "unshared bytes",
            f["bytes"].as_f64().unwrap(),
            truth_bytes,
            0.10,
        );
    }
}

#[test]
fn cpython_pool_with_gc_freeze_barely_unshares() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, _) = cow_pool(true, tmp.path());
    assert!(findings(&s, "leak").is_empty(), "{:#}", s["findings"]);
    for f in findings(&s, "cow_unsharing") {
        // Gone, or a small fraction of the 64 MiB heap.
        assert!(f["bytes"].as_f64().unwrap() < 6.4 * MIB, "{f:#}");
    }
}

#[test]
fn leaking_pool_with_recycling_per_task_leak_and_advice() {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("pool.sock");
    let socket_s = socket.to_str().unwrap();
    // One worker, 2 MiB kept per task, recycled after 5 tasks.
    let master = Py(Command::new("python3")
        .arg(fixture_py("leaky_pool.py"))
        .args([
            "serve",
            "--socket",
            socket_s,
            "--leak-mb",
            "2",
            "--max-tasks",
            "5",
        ])
        .spawn()
        .expect("python3 is needed for the pool fixtures"));
    Fixture::wait_for_path(&socket);
    let out = tmp.path().join("r");
    let status = leakwatch()
        .args(["run", "-n", "12", "--settle", "100ms", "--quiet"])
        .args(["--watch", &master.0.id().to_string(), "--out"])
        .arg(&out)
        .args([
            "--",
            "python3",
            &fixture_py("leaky_pool.py"),
            "client",
            "--socket",
            socket_s,
        ])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert_exit_matches_verdict(status, &out);
    let s = summary(&out);

    let leaks = findings(&s, "leak");
    assert_eq!(leaks.len(), 1, "{:#}", s["findings"]);
    // Recycling keeps the tree flat, but its workers leak: a leak.
    assert_eq!(s["verdict"], "leak");
    assert_within(
        "per-task leak",
        leaks[0]["bytes_per_x"].as_f64().unwrap(),
        2.0 * MIB,
        0.05,
    );
    // Tasks 1-5 and 6-10 ran on workers that were recycled; 11-12 on a third.
    assert_eq!(leaks[0]["pids"].as_array().unwrap().len(), 3);
    assert_eq!(findings(&s, "recycled").len(), 2, "{:#}", s["findings"]);
    assert!(findings(&s, "cow_unsharing").is_empty());

    // Advice: a budget of a fresh worker plus 5.5 tasks' leak → recycle after 5.
    let fresh = leaks[0]["fresh_rss_bytes"].as_f64().unwrap();
    let budget = (fresh + 5.5 * 2.0 * MIB) as u64;
    let again = tmp.path().join("again");
    let status = leakwatch()
        .args([
            "report",
            "--quiet",
            "--budget",
            &budget.to_string(),
            "--out",
        ])
        .arg(&again)
        .arg(&out)
        .status()
        .unwrap();
    assert_exit_matches_verdict(status, &again);
    let advice = &summary(&again)["recycle"][0];
    assert_eq!(advice["recycle_after_x"], 5.0, "{advice:#}");
    assert_eq!(advice["restarts_per_100_x"], 20.0);
}
