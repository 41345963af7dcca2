//! End to end: `leakwatch attach` on a process growing at a known rate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

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
    assert!(status.success(), "{status}");
    let s = summary(&out);
    assert_eq!(s["mode"], "attach");
    assert_eq!(s["target_pid"], grower.pid());
    let rss = series(&s, "target", "rss_bytes");
    assert_eq!(rss["x"], "seconds");
    assert!(rss["n"].as_u64().unwrap() >= 20, "{rss}");
    assert_within("rss slope", rss["slope"].as_f64().unwrap(), 8.0 * MIB, 0.10);
    // The deep tier ran (the fixture is small: the budget allows it).
    let pss = series(&s, "target", "pss_bytes");
    assert!(pss["n"].as_u64().unwrap() >= 2, "{pss}");
}

#[test]
fn attach_ends_cleanly_when_the_target_exits() {
    let tmp = tempfile::tempdir().unwrap();
    let mut target = std::process::Command::new("sleep")
        .arg("0.6")
        .spawn()
        .unwrap();
    let out = out_dir(&tmp, "report");
    let output = leakwatch()
        .args([
            "attach",
            &target.id().to_string(),
            "--interval",
            "100ms",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let _ = target.wait();
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("exited after"), "{stderr}");
    assert!(summary(&out)["series"].as_array().unwrap().len() > 1);
}
