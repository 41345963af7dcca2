//! End to end: `leakwatch attach` on a process growing at a known rate.

use crate::common::*;

#[test]
fn attach_measures_growth_per_second_within_10_percent() {
    let tmp = tempfile::tempdir().unwrap();
    let grower = Fixture::start(&["grow", "--rate", "8MiB"]);
    let out = out_dir(&tmp, "report");
    let status = leakwatch()
        .args(["attach", &grower.pid().to_string()])
        .args([
            "--interval",
            "100ms",
            "--duration",
            "3s",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert_exit_matches_verdict(status, &out);
    let s = summary(&out);
    assert_eq!(s["mode"], "attach");
    assert_eq!(s["target_pid"], grower.pid());
    let rss = series(&s, "target", "rss_bytes");
    assert_eq!(rss["x"], "seconds");
    assert!(rss["n"].as_u64().unwrap() >= 20, "{rss}");
    assert_within(
        "rss slope",
        rss["line"]["slope"].as_f64().unwrap(),
        8.0 * MIB,
        0.10,
    );
    // The deep tier ran (the fixture is small: the budget allows it).
    let pss = series(&s, "target", "pss_bytes");
    assert!(pss["n"].as_u64().unwrap() >= 2, "{pss}");
}

#[test]
fn attach_ends_cleanly_when_the_target_exits() {
    use std::io::{BufRead, BufReader, Read};
    let tmp = tempfile::tempdir().unwrap();
    // A target that lives 0.2 s once leakwatch has started sampling it: too
    // short a life for the four points a verdict needs at 100 ms.
    let go = tmp.path().join("go");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.01; done; sleep 0.2",
        go.display()
    );
    let mut target = std::process::Command::new("sh")
        .args(["-c", &script])
        .spawn()
        .unwrap();
    let out = out_dir(&tmp, "report");
    let mut lw = leakwatch()
        .args([
            "attach",
            &target.id().to_string(),
            "--interval",
            "100ms",
            "--out",
        ])
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(lw.stderr.take().unwrap());
    let mut stderr = String::new();
    err.read_line(&mut stderr).unwrap();
    std::fs::write(&go, "").unwrap();
    err.read_to_string(&mut stderr).unwrap();
    let status = lw.wait().unwrap();
    let _ = target.wait();
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(stderr.contains("exited after"), "{stderr}");
    let s = summary(&out);
    assert!(s["series"].as_array().unwrap().len() > 1);
    // An undecided series of it does not ask for a --duration it cannot have.
    let undecided: Vec<&serde_json::Value> = s["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["verdict"] == "inconclusive")
        .filter(|f| f["name"].as_str().is_some_and(|n| n.starts_with("target")))
        .collect();
    assert!(!undecided.is_empty(), "{s:#}");
    for f in undecided {
        let reason = f["reason"].as_str().unwrap_or_default();
        assert!(f["runs_needed"].is_null(), "{f:#}");
        assert!(
            reason.contains("the target exited after") && reason.contains("no longer session"),
            "{reason}"
        );
    }
    assert!(!stderr.contains("would decide it"), "{stderr}");
    // Too few points for a verdict have no interval to show: three equal
    // ones read "+0 B/h (95% CI +0 B/h … +0 B/h)", certainty from nothing.
    let too_few = s["series"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["n"].as_u64().is_some_and(|n| n < 4));
    if too_few {
        assert!(!stderr.contains("95% CI"), "{stderr}");
    }
}

/// Another user's process: smaps_rollup needs ptrace-read access. leakwatch
/// runs as `nobody` against a root-owned fixture, says what is missing once,
/// and still samples RSS. Needs root (to switch user) and setpriv.
#[test]
#[cfg_attr(not(lw_deps), ignore = "needs root: bash .ci/test as root")]
fn permission_denied_falls_back_to_status_with_a_hint() {
    let is_root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    let has_setpriv = std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok();
    if !is_root || !has_setpriv {
        crate::common::missing(
            "root or setpriv",
            "running leakwatch as another user needs both",
        );
    }
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let target = Fixture::start(&["steady", "--size", "4MiB"]);
    // A copy in the temp dir: the build tree may sit under a directory
    // `nobody` cannot enter.
    let exe = tmp.path().join("leakwatch");
    std::fs::copy(env!("CARGO_BIN_EXE_leakwatch"), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = tmp.path().join("r");
    let output = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args(["attach", &target.pid().to_string()])
        .args(["--interval", "100ms", "--duration", "1s", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("needs ptrace-read access"), "{stderr}");
    let s = summary(&out);
    assert!(series(&s, "target", "rss_bytes")["n"].as_u64().unwrap() >= 5);
    assert!(
        !s["series"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["metric"] == "pss_bytes"),
        "PSS cannot have been read"
    );
}

/// Ctrl-C (SIGINT) ends sampling cleanly: exit 130 and the reports of the
/// samples so far are written.
#[test]
fn interrupt_writes_the_reports_and_exits_130() {
    let tmp = tempfile::tempdir().unwrap();
    let target = Fixture::start(&["steady", "--size", "4MiB"]);
    let out = out_dir(&tmp, "report");
    let child = leakwatch()
        .args([
            "attach",
            &target.pid().to_string(),
            "--interval",
            "100ms",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130));
    let s = summary(&out);
    assert_eq!(s["interrupted"], true);
    assert!(series(&s, "target", "rss_bytes")["n"].as_u64().unwrap() >= 3);
    assert!(out.join("report.md").exists());
}

/// What sampling cost reaches summary.json and the report, and `report`
/// rebuilds it from samples.csv: samples taken at the interval asked, the
/// first and last deep passes (one walk per process each), the longest walk.
#[test]
fn the_sampling_cost_is_recorded_and_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let target = Fixture::start(&["steady", "--size", "4MiB"]);
    let out = out_dir(&tmp, "report");
    let status = leakwatch()
        .args(["attach", &target.pid().to_string()])
        .args([
            "--interval",
            "100ms",
            "--duration",
            "2s",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    let s = summary(&out);
    let cost = &s["sampling"];
    let ticks = cost["ticks"].as_u64().unwrap();
    assert!((12..=25).contains(&ticks), "{cost}");
    let achieved = cost["achieved_interval_s"].as_f64().unwrap();
    assert!((0.07..=0.14).contains(&achieved), "{cost}");
    assert!(cost["deep_samples"].as_u64().unwrap() >= 2, "{cost}");
    assert_eq!(
        cost["page_walks"].as_u64().unwrap(),
        cost["deep_samples"].as_u64().unwrap(),
        "one walk per process per deep pass: {cost}"
    );
    assert_eq!(cost["longest_walk"]["pid"], target.pid());
    assert!(cost["cpu_s"].as_f64().unwrap() > 0.0);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    // Its own section, not a paragraph of the projection before it.
    assert!(md.contains("\n## Sampling cost\n"), "{md}");
    assert!(md.contains("the longest walk took"), "{md}");

    let again = tmp.path().join("again");
    let status = leakwatch()
        .arg("report")
        .arg(&out)
        .args(["--quiet", "--out"])
        .arg(&again)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(summary(&again)["sampling"], s["sampling"]);
}

/// `--deep-budget 0`: the cheap tier only — no page walk, so no PSS and no
/// mappings — and the report says so.
#[test]
fn a_deep_budget_of_zero_walks_no_page() {
    let tmp = tempfile::tempdir().unwrap();
    let target = Fixture::start(&["steady", "--size", "4MiB"]);
    let out = out_dir(&tmp, "report");
    let status = leakwatch()
        .args(["attach", &target.pid().to_string()])
        .args([
            "--interval",
            "100ms",
            "--duration",
            "1s",
            "--deep-budget",
            "0",
        ])
        .args(["--quiet", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    let s = summary(&out);
    assert_eq!(s["sampling"]["page_walks"], 0);
    assert_eq!(s["sampling"]["deep_samples"], 0);
    assert!(s["sampling"].get("longest_walk").is_none());
    assert!(series(&s, "target", "rss_bytes")["n"].as_u64().unwrap() >= 5);
    assert!(
        !s["series"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["metric"] == "pss_bytes"),
        "no walk, no PSS"
    );
    let csv = std::fs::read_to_string(out.join("samples.csv")).unwrap();
    assert!(!csv.contains(",deep,") && !csv.contains(",mapping,"));
    let notes = s["notes"].to_string();
    assert!(notes.contains("deep tier off"), "{notes}");
}

/// `--max-samples`: a 10 ms attach that would write ≈400 rows holds
/// samples.csv to 200 — older cheap samples thinned, the first, the last
/// and every deep sample kept, the rate halved — says so, still measures
/// the growth, and `report` rebuilds the same from the thinned file.
#[test]
fn max_samples_thins_older_cheap_samples_and_report_rebuilds_them() {
    let tmp = tempfile::tempdir().unwrap();
    let grower = Fixture::start(&["grow", "--rate", "8MiB"]);
    let out = out_dir(&tmp, "report");
    let status = leakwatch()
        .args(["attach", &grower.pid().to_string()])
        .args([
            "--interval",
            "10ms",
            "--duration",
            "4s",
            "--max-samples",
            "200",
            "--exit-zero",
        ])
        .args(["--quiet", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    let rows = store_rows(&out);
    let samples = |tiers: &[&str]| {
        let mut s: Vec<u64> = rows
            .iter()
            .filter(|r| tiers.contains(&r["tier"].as_str()))
            .map(|r| r["sample"].parse().unwrap())
            .collect();
        s.dedup();
        s
    };
    let measured = samples(&["cheap", "deep"]);
    assert!(measured.len() <= 200, "{} samples kept", measured.len());
    let cost: serde_json::Value =
        serde_json::from_str(&rows.iter().find(|r| r["event"] == "sampling").unwrap()["comm"])
            .unwrap();
    let ticks = cost["ticks"].as_u64().unwrap();
    assert!(
        ticks > measured.len() as u64 + 50,
        "{ticks} ticks, nothing thinned"
    );
    // The first sample, the last and every deep one are still there.
    assert_eq!(measured.first(), Some(&0));
    assert_eq!(
        samples(&["deep"]).len() as u64,
        cost["deep_samples"].as_u64().unwrap()
    );
    let s = summary(&out);
    let notes = s["notes"].to_string();
    assert!(notes.contains("held to --max-samples 200 rows"), "{notes}");
    assert!(
        std::fs::read_to_string(out.join("report.md"))
            .unwrap()
            .contains("--max-samples 200")
    );
    let rss = series(&s, "target", "rss_bytes");
    assert_within(
        "rss slope",
        rss["line"]["slope"].as_f64().unwrap(),
        8.0 * MIB,
        0.10,
    );
    let again = out_dir(&tmp, "again");
    let status = leakwatch()
        .args(["report", "--quiet", "--exit-zero", "--out"])
        .arg(&again)
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let rebuilt = summary(&again);
    assert_eq!(
        series(&rebuilt, "target", "rss_bytes")["line"]["slope"],
        rss["line"]["slope"]
    );
    assert_eq!(rebuilt["notes"], s["notes"]);
}

/// samples.csv's rows as maps of column → text.
fn store_rows(dir: &std::path::Path) -> Vec<std::collections::HashMap<String, String>> {
    let mut reader = csv::Reader::from_path(dir.join("samples.csv")).unwrap();
    let headers = reader.headers().unwrap().clone();
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            headers
                .iter()
                .map(String::from)
                .zip(r.iter().map(String::from))
                .collect()
        })
        .collect()
}
