//! `run --py-sites` end to end (issue 13): a pantsd-like Python daemon,
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
    assert_within(
        "bytes per run",
        sites[0]["bytes_per_run"].as_f64().unwrap(),
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
