//! The report files through the built binary: report.md and summary.json against committed
//! snapshots (a recorded run, a synthetic worker pool over hours), HTML escaping of command
//! lines and process names, charts present and inlined, and `leakwatch report` reproducing a
//! live session's files byte for byte.
//!
//! Snapshots (insta) live in tests/it/snapshots/; after an intended change, review and
//! accept them with `cargo insta review` (or `INSTA_UPDATE=always cargo test --test it`).

use std::fs;
use std::path::{Path, PathBuf};

use leakwatch::store::{Row, SampleWriter, Scope, Tier};

const MIB: u64 = 1 << 20;

fn manifest_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Compares `actual` with its insta snapshot, tests/it/snapshots/it__report_output__`name`.snap.
fn snapshot(name: &str, actual: &str) {
    insta::assert_snapshot!(name, actual);
}

/// `leakwatch report INPUT --out OUT --quiet ARGS…`, which must exit as
/// its verdict says (1 for a leak, 0 otherwise).
fn report(input: &Path, out: &Path, args: &[&str]) {
    let status = crate::common::leakwatch()
        .arg("report")
        .arg(input)
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .status()
        .unwrap();
    crate::common::assert_exit_matches_verdict(status, out);
}

fn read(dir: &Path, name: &str) -> String {
    fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every chart report.md embeds exists as SVG and PNG, and report.html inlines every SVG.
fn charts_are_written_and_inlined(dir: &Path) -> Vec<String> {
    let md = read(dir, "report.md");
    let html = read(dir, "report.html");
    let stems: Vec<String> = md
        .lines()
        .filter(|l| l.starts_with("!["))
        .filter_map(|l| {
            l.rsplit_once("](")?
                .1
                .strip_suffix(".svg)")
                .map(String::from)
        })
        .collect();
    for stem in &stems {
        let svg = read(dir, &format!("{stem}.svg"));
        let png = fs::read(dir.join(format!("{stem}.png"))).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{stem}.png");
        let body = &svg[svg.find("<svg").unwrap()..];
        assert!(html.contains(body.trim_end()), "{stem}.svg not inlined");
    }
    assert!(
        !html.contains("<link") && !html.contains("src=\""),
        "no external resources"
    );
    stems
}

#[test]
fn recorded_run_matches_snapshots() {
    let tmp = tempfile::tempdir().unwrap();
    report(
        &manifest_path("tests/data/run-leak/samples.csv"),
        tmp.path(),
        &[],
    );
    let md = read(tmp.path(), "report.md");
    snapshot("run-leak.report.md", &md);
    snapshot("run-leak.summary.json", &read(tmp.path(), "summary.json"));

    let stems = charts_are_written_and_inlined(tmp.path());
    // The headline chart of the daemon comes first; one process, so no per-process chart.
    assert!(stems[0].starts_with("survivors-"), "{stems:?}");
    for stem in ["memory-kinds", "mappings"] {
        assert!(stems.iter().any(|s| s == stem), "{stem} missing: {stems:?}");
    }
    assert!(
        !stems.iter().any(|s| s.starts_with("processes-")),
        "{stems:?}"
    );
    // The failed run is named up front and in the run table.
    assert!(md.contains("**FAILED: run 3 (exit:1)**"), "{md}");
    assert!(md.contains("| 3 | exit:1 FAILED |"), "{md}");
    let html = read(tmp.path(), "report.html");
    assert!(html.contains("<td class=\"failed\">exit:1 FAILED</td>"));
}

/// One deep sample of a process; `cow` is anonymous memory still shared with the parent.
#[allow(clippy::too_many_arguments)]
fn pool_row(sample: u64, pid: u32, start: u64, comm: &str, anon: u64, file: u64, cow: u64) -> Row {
    let t = sample as f64 * 300.0;
    let private_dirty = anon - cow;
    let shared = file + cow;
    Row {
        sample,
        run: None,
        t_seconds: t,
        timestamp: format!(
            "2026-01-01T{:02}:{:02}:00.000Z",
            sample * 5 / 60,
            sample * 5 % 60
        ),
        pid,
        ppid: if pid == 100 { 1 } else { 100 },
        start_time: start,
        comm: comm.into(),
        tier: Tier::Deep,
        rss_bytes: Some(anon + file),
        anon_bytes: Some(anon),
        file_bytes: Some(file),
        shmem_bytes: Some(0),
        swap_bytes: Some(0),
        hwm_bytes: Some(anon + file),
        threads: Some(4),
        fds: Some(12),
        pss_bytes: Some(private_dirty + shared / 5),
        shared_clean_bytes: Some(file),
        shared_dirty_bytes: Some(cow),
        private_clean_bytes: Some(0),
        private_dirty_bytes: Some(private_dirty),
        uss_bytes: Some(private_dirty),
        shared_bytes: Some(shared),
        swap_pss_bytes: Some(0),
        ..Row::new(Scope::Target)
    }
}

fn mapping_row(sample: u64, pid: u32, start: u64, mapping: &str, rss: u64) -> Row {
    Row {
        sample,
        t_seconds: sample as f64 * 300.0,
        pid,
        start_time: start,
        comm: mapping.into(),
        tier: Tier::Mapping,
        rss_bytes: Some(rss),
        ..Row::new(Scope::Target)
    }
}

/// A prefork pool attached for 3 hours, one sample every 5 minutes: master 100 (its first
/// sample taken mid-import, a warm-up step), worker 101 leaking 2 MiB/h of heap (its name
/// carries markup, as a process may set any name), workers 102–103 unsharing the parent's
/// pages (copy-on-write: RSS flat, private dirty up, shared down), and worker 104 recycled
/// at 1.5 h as 105.
fn pool_rows() -> Vec<Row> {
    let mut rows = Vec::new();
    let last = 36;
    for k in 0..=last {
        let h = k as f64 / 12.0;
        let mib = |x: f64| (x * MIB as f64) as u64;
        let wiggle = ((k * 7919) % 13) as f64 / 13.0 - 0.5; // deterministic noise, ±0.5
        let unshared = |hours: f64| 8.0 * (1.0 - (-hours).exp());
        let master_anon = if k == 0 { 28.0 } else { 40.0 };
        rows.push(pool_row(
            k,
            100,
            1000,
            "celery",
            mib(master_anon),
            mib(20.0),
            mib(20.0),
        ));
        rows.push(pool_row(
            k,
            101,
            1100,
            "<b>celery</b>",
            mib(30.0 + 2.0 * h + 0.05 * wiggle),
            mib(10.0),
            mib(28.0),
        ));
        for pid in [102, 103] {
            rows.push(pool_row(
                k,
                pid,
                1100,
                "celery",
                mib(30.0),
                mib(10.0),
                mib(30.0 - unshared(h)),
            ));
        }
        let (pid, start, age) = if h < 1.5 {
            (104, 1100, h)
        } else {
            (105, 541_100, h - 1.5)
        };
        rows.push(pool_row(
            k,
            pid,
            start,
            "celery",
            mib(30.0),
            mib(10.0),
            mib(30.0 - unshared(age)),
        ));
        if k == 0 || k == last {
            let grown = |a: f64, b: f64| mib(if k == 0 { a } else { b });
            rows.push(mapping_row(k, 101, 1100, "[heap]", grown(20.0, 25.5)));
            rows.push(mapping_row(
                k,
                101,
                1100,
                "/opt/app/<img src=x>.so",
                grown(2.0, 2.5),
            ));
            rows.push(mapping_row(k, 102, 1100, "[heap]", grown(20.0, 20.0)));
        }
    }
    rows
}

#[test]
fn worker_pool_over_hours_matches_snapshots() {
    let tmp = tempfile::tempdir().unwrap();
    let samples = tmp.path().join("samples.csv");
    let mut writer = SampleWriter::create(&samples).unwrap();
    writer.write_batch(&pool_rows()).unwrap();
    drop(writer);
    let out = tmp.path().join("out");
    // The master's first sample was taken mid-import: leave it out as warm-up.
    report(&samples, &out, &["--warmup", "1"]);

    let md = read(&out, "report.md");
    snapshot("pool.report.md", &md);
    snapshot("pool.summary.json", &read(&out, "summary.json"));
    let stems = charts_are_written_and_inlined(&out);
    assert!(stems[0].starts_with("target-"), "{stems:?}");
    for stem in ["memory-kinds", "processes-target", "mappings"] {
        assert!(stems.iter().any(|s| s == stem), "{stem} missing: {stems:?}");
    }
    assert_eq!(
        stems,
        [
            "target-anon",
            "memory-kinds",
            "processes-target",
            "mappings"
        ],
        "{md}"
    );
    // Three hours of samples: the time axis is in hours, and so is the fit's slope.
    let svg = read(&out, &format!("{}.svg", stems[0]));
    assert!(svg.contains("time (h)"), "x axis not in hours");
    assert!(svg.contains("per h"), "fit label not per hour");
    assert!(svg.contains("warm-up"), "warm-up not marked");

    // Process names and mapping paths are escaped wherever they appear.
    let html = read(&out, "report.html");
    assert!(html.contains("&lt;b&gt;celery&lt;/b&gt;"));
    assert!(html.contains("/opt/app/&lt;img src=x&gt;.so"));
    assert!(
        !html.contains("<b>celery") && !html.contains("<img"),
        "raw markup in HTML"
    );
}

#[test]
fn html_escapes_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let status = crate::common::leakwatch()
        .args(["run", "-n", "2", "--settle", "0s", "--quiet", "--out"])
        .arg(&out)
        .args(["--", "echo", "<script>alert(1)</script>"])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let html = read(&out, "report.html");
    assert!(
        html.contains("<code>echo &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39;</code>"),
        "command line missing or unescaped"
    );
    assert!(!html.contains("<script>alert"), "unescaped command line");
    // The only script is the report's own table sorter.
    assert_eq!(html.matches("<script>").count(), 1);
    let md = read(&out, "report.md");
    assert!(md.contains("`echo '<script>alert(1)</script>'`"), "{md}");
}

#[test]
fn report_rebuilds_every_file_of_a_live_session() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let socket = tmp.path().join("daemon.sock");
    let status = crate::common::leakwatch()
        .args(["run", "-n", "6", "--settle", "0s", "--quiet", "--out"])
        .arg(&live)
        .args([
            "--",
            crate::common::fixture(),
            "client",
            "--leak",
            "1MiB",
            "--socket",
        ])
        .arg(&socket)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    crate::common::assert_exit_matches_verdict(status, &live);
    let again = tmp.path().join("again");
    report(&live.join("samples.csv"), &again, &[]);

    let names = |dir: &Path| {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "samples.csv")
            .collect();
        v.sort();
        v
    };
    let files = names(&live);
    assert_eq!(files, names(&again));
    for f in [
        "summary.json",
        "report.md",
        "report.html",
        "survivors-anon.svg",
    ] {
        assert!(files.iter().any(|n| n == f), "{f} missing: {files:?}");
    }
    for name in &files {
        assert!(
            fs::read(live.join(name)).unwrap() == fs::read(again.join(name)).unwrap(),
            "{name} differs between the live session and `leakwatch report`"
        );
    }
}
