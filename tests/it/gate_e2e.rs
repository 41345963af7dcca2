//! The CI gate end to end: it fails on a real leak above the limit, passes
//! a steady daemon and a leak below the limit — every time — and rejects
//! malformed limits. (benches/harness/gate_reliability.sh runs 30 of each.)

use crate::common::*;
use std::path::Path;
use std::process::Stdio;

/// Runs the pantsd-like client 10 times with `--max-growth limit`;
/// returns the exit code and the output directory's summary.
fn gated(dir: &Path, leak: &str, limit: &str, extra: &[&str]) -> (i32, serde_json::Value) {
    let out = dir.join("r");
    let status = leakwatch()
        .args(["run", "-n", "10", "--settle", "50ms", "--quiet"])
        .args(["--max-growth", limit])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .arg("--")
        .arg(fixture())
        .args(["client", "--leak", leak, "--socket"])
        .arg(dir.join("s"))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    (status.code().unwrap(), summary(&out))
}

#[test]
fn a_steady_daemon_passes_a_small_limit_every_time() {
    for attempt in 0..5 {
        let tmp = tempfile::tempdir().unwrap();
        let (code, s) = gated(tmp.path(), "0", "64KiB/run", &[]);
        assert_eq!(code, 0, "attempt {attempt}: {:#}", s["gate"]);
        assert_eq!(s["gate"]["passed"], true);
    }
}

#[test]
fn a_leak_well_below_the_limit_passes_every_time() {
    for attempt in 0..5 {
        let tmp = tempfile::tempdir().unwrap();
        let (code, s) = gated(tmp.path(), "256KiB", "2MiB/run", &[]);
        assert_eq!(code, 0, "attempt {attempt}: {:#}", s["gate"]);
    }
}

#[test]
fn a_leak_well_above_the_limit_fails_every_time_with_the_numbers() {
    for attempt in 0..5 {
        let tmp = tempfile::tempdir().unwrap();
        let junit = tmp.path().join("junit.xml");
        let step = tmp.path().join("step.md");
        std::fs::write(&step, "earlier step\n").unwrap();
        let out = tmp.path().join("r");
        let status = leakwatch()
            .env("GITHUB_STEP_SUMMARY", &step)
            .args(["run", "-n", "10", "--settle", "50ms", "--quiet"])
            .args(["--max-growth", "1MiB/run", "--junit"])
            .arg(&junit)
            .arg("--out")
            .arg(&out)
            .arg("--")
            .arg(fixture())
            .args(["client", "--leak", "4MiB", "--socket"])
            .arg(tmp.path().join("s"))
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(1), "attempt {attempt}");
        let s = summary(&out);
        assert_eq!(s["gate"]["passed"], false);
        let violation = s["gate"]["violations"][0].as_str().unwrap();
        assert!(
            violation.starts_with("survivors anon_bytes: leak, "),
            "{violation}"
        );
        assert!(violation.contains("limit 1.00 MiB/run"), "{violation}");
        let xml = std::fs::read_to_string(&junit).unwrap();
        assert!(xml.contains("tests=\"1\" failures=\"1\""), "{xml}");
        assert!(
            xml.contains("<failure message=\"survivors anon_bytes: leak"),
            "{xml}"
        );
        let md = std::fs::read_to_string(&step).unwrap();
        assert!(md.starts_with("earlier step\n### leakwatch: leak"), "{md}");
        assert!(md.contains("**Gate: FAILED**"), "{md}");
    }
}

#[test]
fn a_total_limit_and_a_peak_limit() {
    let tmp = tempfile::tempdir().unwrap();
    // 8 MiB base + 4 MiB/run: far more than 40% over 10 runs.
    let (code, s) = gated(tmp.path(), "4MiB", "40%", &["--max-peak", "1GiB"]);
    assert_eq!(code, 1, "{:#}", s["gate"]);
    let checks = s["gate"]["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 2);
    assert_eq!(checks[0]["passed"], false);
    assert_eq!(
        checks[1]["passed"], true,
        "peak of a tiny client is under 1 GiB"
    );

    let tmp = tempfile::tempdir().unwrap();
    let (code, _) = gated(tmp.path(), "0", "1GiB/run", &["--max-peak", "4KiB"]);
    assert_eq!(code, 1, "a client's peak RSS is above 4 KiB");
}

#[test]
fn check_against_a_baseline_catches_a_regression() {
    let tmp = tempfile::tempdir().unwrap();
    let baseline = tmp.path().join("baseline.json");
    let run = |name: &str, leak: &str, save: bool| {
        let out = tmp.path().join(name);
        let mut cmd = leakwatch();
        cmd.args(["run", "-n", "10", "--settle", "50ms", "--quiet", "--out"])
            .arg(&out);
        if save {
            cmd.arg("--save-baseline").arg(&baseline);
        }
        let status = cmd
            .arg("--")
            .arg(fixture())
            .args(["client", "--leak", leak, "--socket"])
            .arg(tmp.path().join(format!("{name}.sock")))
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert_exit_matches_verdict(status, &out);
        out
    };
    run("base", "1MiB", true);
    let same = run("same", "1MiB", false);
    let worse = run("worse", "4MiB", false);
    let check = |dir: &Path| {
        leakwatch()
            .arg("check")
            .arg(dir)
            .arg("--baseline")
            .arg(&baseline)
            .output()
            .unwrap()
    };
    let ok = check(&same);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let bad = check(&worse);
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("gate: FAILED"), "{stderr}");
    // About 4 MiB/run, judged on the verdict's own series (anon).
    assert!(
        stderr.contains("survivors anon_bytes: rate 4.")
            || stderr.contains("survivors anon_bytes: rate 3.9"),
        "{stderr}"
    );
}

/// A baseline written by leakwatch before schema_version 2 (`fixtures/summary-v1`: the
/// examples as they were) still gates: its rate reads as the one the example has now, in
/// either role, and the same run passes.
#[test]
fn a_version_1_baseline_still_gates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (example, rate) in [
        ("pantsd-seed", "4.44 MiB/run"),
        ("leaky-pool", "89.3 KiB/run"),
    ] {
        let v1 = root.join(format!("fixtures/summary-v1/{example}.json"));
        let v2 = root.join(format!("reports/examples/{example}/summary.json"));
        for (current, baseline) in [(&v2, &v1), (&v1, &v2)] {
            let out = leakwatch()
                .arg("check")
                .arg(current)
                .arg("--baseline")
                .arg(baseline)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{example}: {stderr}");
            assert!(stderr.contains("gate: passed"), "{example}: {stderr}");
            assert!(
                stderr.contains(&format!("rate {rate}"))
                    && stderr.contains(&format!("vs baseline {rate}")),
                "{example}: {rate} on both sides: {stderr}"
            );
        }
    }
}

#[test]
fn bad_limits_are_rejected_with_the_accepted_forms() {
    let forms = "'512KiB/run', '20MiB/h', '1%/run'";
    for (bad, needles) in [
        (
            "5 MB",
            vec![
                "--max-growth '5 MB' is a size, not a rate",
                "did you mean '5 MB/run'",
            ],
        ),
        (
            "-1KiB/run",
            vec!["--max-growth '-1KiB/run': '-1KiB' is not a size"],
        ),
        (
            "abc%",
            vec!["--max-growth 'abc%' is not a growth limit", forms],
        ),
        ("5", vec!["--max-growth '5' is not a growth limit", forms]),
        (
            "1MiB/fortnight",
            vec!["--max-growth '1MiB/fortnight' is not a growth limit", forms],
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("r");
        let output = leakwatch()
            .args(["run", "--max-growth", bad, "--out"])
            .arg(&out)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{bad}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        for needle in needles {
            assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
        }
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(!out.exists());
    }
    let output = leakwatch()
        .args(["check", "nowhere", "--baseline", "nothing.json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

/// At 5 runs of exactly 4 MiB/run Mann–Kendall cannot reach p < 0.01, so
/// the verdict may be "inconclusive, … 95% CI lower end 4.00 MiB/run"; the
/// gate is decided by the interval, whatever the verdict: a 1 MiB/run limit
/// fails, 5 times of 5 (a gate that judged only leaks would pass).
#[test]
fn five_runs_of_a_4mib_leak_fail_a_1mib_limit_every_time() {
    for attempt in 0..5 {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("r");
        let status = leakwatch()
            .args(["run", "-n", "5", "--settle", "50ms", "--quiet"])
            .args(["--max-growth", "1MiB/run", "--out"])
            .arg(&out)
            .arg("--")
            .arg(fixture())
            .args(["client", "--leak", "4MiB", "--socket"])
            .arg(tmp.path().join("s"))
            .stdout(Stdio::null())
            .status()
            .unwrap();
        let s = summary(&out);
        assert_eq!(status.code(), Some(1), "attempt {attempt}: {:#}", s["gate"]);
        assert_eq!(s["gate"]["passed"], false, "{:#}", s["gate"]);
        assert_eq!(s["verdict"], "leak", "{:#}", s["series"]);
    }
}

/// A command that holds nothing passes the same limit, 20 of 20, and an
/// interval that contains the limit is shown as undecided, never silently.
#[test]
fn sleep_passes_a_1mib_limit_twenty_times_of_twenty() {
    for attempt in 0..20 {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("r");
        let output = leakwatch()
            .args(["run", "-n", "5", "--settle", "10ms", "--quiet"])
            .args(["--max-growth", "1MiB/run", "--out"])
            .arg(&out)
            .args(["--", "sleep", "0.05"])
            .output()
            .unwrap();
        let s = summary(&out);
        assert_eq!(
            output.status.code(),
            Some(0),
            "attempt {attempt}: {:#}",
            s["gate"]
        );
        assert_eq!(s["gate"]["passed"], true);
        for check in s["gate"]["checks"].as_array().unwrap() {
            let undecided = check["undecided"].as_bool().unwrap_or(false);
            let message = check["message"].as_str().unwrap_or_default();
            assert_eq!(undecided, message.contains("undecided"), "{message}");
        }
    }
}

/// `--undecided fail`: an interval that contains the limit fails the gate
/// (exit 1) and says so; the default passes it and says so. On the pantsd
/// seed series (+4.44 MiB/run, 95% CI 4.39 … 4.48), rebuilt by `report`.
#[test]
fn undecided_checks_follow_the_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("seed");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pantsd-seed/samples.csv"),
        dir.join("samples.csv"),
    )
    .unwrap();
    let gate = |limit: &str, policy: &str| {
        let out = leakwatch()
            .args(["report", "--max-growth", limit, "--undecided", policy])
            .arg(&dir)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = gate("4.45MiB/run", "pass");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("gate: passed") && stderr.contains("[undecided] pid:4242 anon_bytes"),
        "{stderr}"
    );
    let (code, stderr) = gate("4.45MiB/run", "fail");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("gate: FAILED") && stderr.contains("[undecided]"),
        "{stderr}"
    );
    // Outside the interval the policy does not matter.
    let (code, stderr) = gate("4MiB/run", "pass");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("[FAIL]"), "{stderr}");
    let (code, stderr) = gate("5MiB/run", "fail");
    assert_eq!(code, Some(0), "{stderr}");
}

/// A service restarted between its baseline and the check has a new PID:
/// `check` matches its `pid:` series by the process's name and says so.
#[test]
fn a_baseline_is_checked_against_the_same_service_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let baseline = tmp.path().join("baseline.json");
    let session = |name: &str, save: bool| {
        let mut service = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let out = tmp.path().join(name);
        let mut cmd = leakwatch();
        cmd.args(["run", "-n", "4", "--settle", "50ms", "--quiet", "--watch"])
            .arg(service.id().to_string())
            .arg("--out")
            .arg(&out);
        if save {
            cmd.arg("--save-baseline").arg(&baseline);
        }
        let status = cmd.args(["--", "true"]).status().unwrap();
        let _ = service.kill();
        let _ = service.wait();
        assert_eq!(status.code(), Some(0));
        (out, service.id())
    };
    let (_, before) = session("before", true);
    let (after, now) = session("after", false);
    assert_ne!(before, now);
    let check = leakwatch()
        .arg("check")
        .arg(&after)
        .arg("--baseline")
        .arg(&baseline)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "pid:{before} of the baseline is pid:{now} (sleep) now"
        )),
        "{stderr}"
    );
}
