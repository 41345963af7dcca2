//! `run --py-sites` end to end: a pantsd-like Python daemon,
//! started detached by its client, keeps a known number of bytes per
//! request at one line (LEAK-SITE) and fills a cache once (WARMUP-SITE).

use std::path::Path;

use crate::common::*;

fn line_of(file: &Path, marker: &str) -> usize {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .position(|l| l.contains(marker))
        .expect("marker")
        + 1
}

#[test]
fn the_leaking_python_line_is_found_and_the_warm_up_is_not_a_leak() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let pyd = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/py/pyd.py");
    let status = leakwatch()
        .args([
            "run",
            "-n",
            "10",
            "--settle",
            "200ms",
            "--py-sites",
            "--quiet",
        ])
        .arg("--out")
        .arg(&out)
        .args(["--", "python3"])
        .arg(&pyd)
        .args(["client", "--sock"])
        .arg(tmp.path().join("pyd.sock"))
        .args([
            "--leak",
            "1000000",
            "--warmup",
            "5000000",
            "--scratch",
            "200000",
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    crate::common::assert_exit_matches_verdict(status, &out);
    let s = summary(&out);
    let sites = s["py_sites"].as_array().expect("py_sites");
    let leak_line = format!("{}:{}", pyd.display(), line_of(&pyd, "# LEAK-SITE"));
    let warm_line = format!("{}:{}", pyd.display(), line_of(&pyd, "# WARMUP-SITE"));
    // The leaking line is first, at its known growth: 1,000,000 bytes plus
    // a 33-byte bytes header per request.
    assert_eq!(sites[0]["site"], leak_line.as_str(), "{sites:#?}");
    assert_eq!(sites[0]["verdict"], "leak");
    // Which tracer found it, in summary.json and on every site row.
    assert!(sites.iter().all(|x| x["source"] == "python"), "{sites:#?}");
    let csv = std::fs::read_to_string(out.join("samples.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let (tier, source) = (
        header.iter().position(|h| *h == "tier").unwrap(),
        header.iter().position(|h| *h == "site_source").unwrap(),
    );
    let mut site_rows = 0;
    for record in csv::Reader::from_path(out.join("samples.csv"))
        .unwrap()
        .records()
    {
        let record = record.unwrap();
        let python = &record[source] == "python";
        match &record[tier] {
            "site" | "type" => {
                site_rows += 1;
                assert!(python, "{record:?}");
            }
            _ => assert_eq!(&record[source], "", "{record:?}"),
        }
    }
    assert!(site_rows > 0);
    assert_within(
        "bytes per run",
        sites[0]["end_rate"]["rate"].as_f64().unwrap(),
        1_000_033.0,
        0.10,
    );
    let frame = sites[0]["traceback"][0].as_str().unwrap();
    assert!(
        frame.starts_with(&leak_line) && frame.contains("# LEAK-SITE"),
        "{frame}"
    );
    // The one-off warm-up holds its 5 MB, and is not called a leak.
    let warm = sites
        .iter()
        .find(|x| x["site"] == warm_line.as_str())
        .expect("the warm-up site is listed (it holds 5 MB)");
    assert_ne!(warm["verdict"], "leak", "{warm:#}");
    assert!(warm["held_bytes"].as_f64().unwrap() >= 5e6);
    // What tracing cost is stated.
    assert!(s["py_overhead"][0]["bytes"].as_f64().unwrap() > 0.0);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Where in the code"), "{md}");
}

/// `run -n RUNS --py-sites` of the fixture daemon with `args`; its summary.
fn pyd_types(tmp: &tempfile::TempDir, runs: &str, args: &[&str]) -> serde_json::Value {
    let out = tmp.path().join("out");
    let pyd = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/py/pyd.py");
    let status = leakwatch()
        .args([
            "run",
            "-n",
            runs,
            "--settle",
            "200ms",
            "--py-sites",
            "--quiet",
        ])
        .arg("--out")
        .arg(&out)
        .args(["--", "python3"])
        .arg(&pyd)
        .args(["client", "--sock"])
        .arg(tmp.path().join("pyd.sock"))
        .args(["--leak", "0", "--warmup", "0"])
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.code().is_some_and(|c| c <= 1), "{status}");
    summary(&out)
}

fn find<'a>(types: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    types
        .iter()
        .find(|t| t["type"] == name)
        .unwrap_or_else(|| panic!("{name} not listed: {types:#?}"))
}

#[test]
fn the_leaking_python_type_is_named_first_and_warm_up_and_cache_are_not_leaks() {
    // Per request: 700 Parsers kept; 20,000 ScopeInfos on the first one
    // only; a cache of CacheEntry filling by 150 up to 600 (4 runs), then
    // holding for 8.
    let tmp = tempfile::tempdir().unwrap();
    let s = pyd_types(
        &tmp,
        "12",
        &[
            "--objects",
            "700",
            "--warmup-objects",
            "20000",
            "--cache-objects",
            "600",
            "--cache-per-request",
            "150",
        ],
    );
    let types = s["types"].as_array().expect("types");
    let first = &types[0];
    assert_eq!(first["type"], "__main__.Parser", "{types:#?}");
    assert_eq!(first["verdict"], "leak");
    assert_within(
        "Parsers per run",
        first["end_rate"]["rate"].as_f64().unwrap(),
        700.0,
        0.05,
    );
    let (lo, hi) = (
        first["end_rate"]["ci95"][0].as_f64().unwrap(),
        first["end_rate"]["ci95"][1].as_f64().unwrap(),
    );
    assert!(lo <= 700.0 && 700.0 <= hi + 1e-9, "CI {lo} … {hi}");
    assert_eq!(first["objects"], 12 * 700);
    assert!(first["bytes"]["end_rate"]["rate"].as_f64().unwrap() > 700.0 * 16.0);
    // Created once: listed for its 20,000 objects, not a leak.
    let warm = find(types, "__main__.ScopeInfo");
    assert_eq!(warm["objects"], 20_000);
    assert_ne!(warm["verdict"], "leak", "{warm:#}");
    // A cache that fills, then stops, is a plateau.
    let cache = find(types, "__main__.CacheEntry");
    assert_eq!(cache["verdict"], "plateau", "{cache:#}");
    assert_eq!(cache["objects"], 600);
    let out = tmp.path().join("out");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Which types grow"), "{md}");
    assert!(
        md.contains("| \\_\\_main\\_\\_.Parser | survivors | leak |"),
        "{md}"
    );
    // The type rows are in samples.csv, and `report` rebuilds the same.
    let csv = std::fs::read_to_string(out.join("samples.csv")).unwrap();
    assert!(csv.lines().any(|l| l.contains(",__main__.Parser,type,")));
    let rebuilt = report_again(&out, &tmp.path().join("again"));
    assert_eq!(rebuilt["types"], s["types"]);
}

#[test]
fn a_real_librarys_kept_log_records_are_the_type_that_grows() {
    // logging.handlers.MemoryHandler without a target keeps every record.
    let tmp = tempfile::tempdir().unwrap();
    let s = pyd_types(&tmp, "10", &["--log-records", "40"]);
    let types = s["types"].as_array().expect("types");
    assert_eq!(types[0]["type"], "logging.LogRecord", "{types:#?}");
    assert_eq!(types[0]["verdict"], "leak");
    assert_within(
        "LogRecords per run",
        types[0]["end_rate"]["rate"].as_f64().unwrap(),
        40.0,
        0.05,
    );
}

/// `attach --py-sites` refuses, before gdb and before any output, a process
/// that is not CPython and a target that is not one PID, each in one line
/// that says what to give; the process runs on untraced.
#[test]
fn attach_py_sites_refuses_a_process_that_is_not_python_and_a_name() {
    let tmp = tempfile::tempdir().unwrap();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = sleeper.id().to_string();
    let output = leakwatch()
        .args(["attach", &pid, "--py-sites", "--out"])
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is not CPython (its program is ")
            && stderr.contains("nothing was done to it")
            && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert!(!tmp.path().join("out").exists());
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("TracerPid:\t0"), "{status}");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let output = leakwatch()
        .args(["attach", "--py-sites", "--name", "python3", "--out"])
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("give its PID (`leakwatch attach --py-sites 4242`)"),
        "{stderr}"
    );
}
