//! Issue 13 on a real prefork pool: gunicorn, started by its client under
//! `leakwatch run --py-sites`, recycles its 2 workers every 5 requests; the
//! app keeps 1 MiB per request at the line marked `# LEAK` and 300
//! `KeptRecord` objects. The site must be found in the workers, its growth
//! per task pooled over recycled workers, and so must the type, per task.
//! Fails under `CI=true` when gunicorn is missing (`bash .ci/deps`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/real.rs"]
mod real;

use std::process::{Command, Stdio};

/// Workers that take their tasks early and then idle until recycled (their
/// turns went to the other worker) are still judged per task: they step
/// again within their lives, and new workers step to the session's end
/// (`workers::leaking_steps`).
#[test]
fn real_gunicorn_pool_leaking_line_and_type_are_found_in_recycled_workers() {
    let Some(_) = real::venv_bin("gunicorn") else {
        return;
    };
    let app = real::fixture("gunicorn_leaky_app.py");
    let line = std::fs::read_to_string(&app)
        .unwrap()
        .lines()
        .position(|l| l.contains("# LEAK:"))
        .unwrap()
        + 1;
    let site = format!("fixtures/real/gunicorn_leaky_app.py:{line}");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let port = real::free_port().to_string();
    let status = Command::new(env!("CARGO_BIN_EXE_leakwatch"))
        .args([
            "run",
            "-n",
            "20",
            "--settle",
            "300ms",
            "--py-sites",
            "--quiet",
        ])
        .arg("--out")
        .arg(&out)
        .arg("--")
        .arg(real::python())
        .arg(real::fixture("gunicorn_client.py"))
        .args(["--port", &port, "--quiet", "--keep-objects", "300"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.code().is_some_and(|c| c <= 1), "{status}");
    let text = std::fs::read_to_string(out.join("summary.json")).unwrap();
    let s: serde_json::Value = serde_json::from_str(&text).unwrap();
    let sites = s["py_sites"].as_array().expect("py_sites");
    let leak = &sites[0];
    assert!(
        leak["site"].as_str().unwrap().ends_with(&site),
        "{site} first? {sites:#?}"
    );
    assert_eq!(leak["verdict"], "leak");
    // In the workers, recycled ones included: more processes than the two
    // alive at a time.
    assert!(leak["processes"].as_u64().unwrap() >= 3, "{leak:#}");
    // 1 MiB per request (the app's bytes object: 1,048,576 + 33 bytes).
    // Without a per-task figure the site was judged by its summed series
    // (no three task steps clear of the noise): the site says why.
    let per_task = leak["bytes_per_task"]
        .as_f64()
        .unwrap_or_else(|| panic!("no per-task figure: {leak:#}"));
    let err = (per_task - 1_048_609.0).abs() / 1_048_609.0;
    assert!(err <= 0.15, "per task {per_task}: {:.1}% off", err * 100.0);
    // The type the app keeps, first, judged per task over the recycled
    // workers: 300 objects each.
    let types = s["py_types"].as_array().expect("py_types");
    let kept = &types[0];
    assert_eq!(kept["type"], "gunicorn_leaky_app.KeptRecord", "{types:#?}");
    assert_eq!(kept["verdict"], "leak");
    assert!(kept["processes"].as_u64().unwrap() >= 3, "{kept:#}");
    assert!(kept["tasks_seen"].as_u64().unwrap() >= 3, "{kept:#}");
    let per_task = kept["objects_per_task"].as_f64().unwrap();
    assert!(
        (per_task - 300.0).abs() <= 15.0,
        "{per_task} objects per task, not 300 ± 5%"
    );
}
