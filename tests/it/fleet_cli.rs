//! The CLI conventions for fleets and scripts: `export --format
//! openmetrics`, shell completions and man pages generated from the clap
//! definition, NO_COLOR, `check --json`.

use std::process::Command;

use crate::common::*;

/// A short attach on a growing fixture, for export.
fn attach_run(tmp: &tempfile::TempDir) -> std::path::PathBuf {
    let grower = crate::targets_e2e::start_private(&["grow", "--rate", "4MiB"]);
    let out = out_dir(tmp, "run");
    let status = leakwatch()
        .args(["attach", &grower.pid().to_string()])
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
    crate::common::assert_exit_matches_verdict(status, &out);
    out
}

/// The value of one sample line of an exposition.
fn sample(text: &str, line_start: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .unwrap_or_else(|| panic!("no {line_start} in\n{text}"))
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn export_writes_the_finished_runs_fit_as_openmetrics() {
    let tmp = tempfile::tempdir().unwrap();
    let out = attach_run(&tmp);
    let o = leakwatch().arg("export").arg(&out).output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.ends_with("# EOF\n"));
    // The same numbers as summary.json: the same analysis.
    let s = summary(&out);
    let fit = series(&s, "target", "anon_bytes");
    let exported = sample(
        &text,
        "leakwatch_growth_bytes_per_second{series=\"target\",metric=\"anon_bytes\"}",
    );
    // (serde_json reads floats to within an ulp: compare to 1e-12.)
    let rate = fit["end_rate"]["rate"]
        .as_f64()
        .or(fit["line"]["slope"].as_f64())
        .unwrap();
    assert!(
        (exported - rate).abs() <= 1e-12 * rate.abs(),
        "{exported} vs {rate}"
    );
    assert_eq!(
        sample(
            &text,
            "leakwatch_verdict{series=\"target\",metric=\"anon_bytes\",verdict=\"leak\"}"
        ),
        1.0
    );
    assert!(text.contains("leakwatch_process_memory_bytes{scope=\"target\",pid="));

    // --out: written whole for the textfile collector, and it lints clean.
    let prom = tmp.path().join("leakwatch.prom");
    let o = leakwatch()
        .arg("export")
        .arg(&out)
        .args(["--format", "openmetrics", "--out"])
        .arg(&prom)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(std::fs::read_to_string(&prom).unwrap(), text);
    if let Some(promtool) = crate::prometheus_e2e::tool("promtool") {
        let check = Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(std::fs::File::open(&prom).unwrap())
            .output()
            .unwrap();
        assert!(check.status.success(), "promtool check metrics: {check:?}");
    }
    let o = leakwatch()
        .arg("export")
        .arg(&out)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("use 'openmetrics'"));
}

#[test]
fn completions_are_generated_from_the_clap_definition() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = leakwatch().args(["completions", shell]).output().unwrap();
        assert!(o.status.success(), "{shell}: {o:?}");
        let text = String::from_utf8(o.stdout).unwrap();
        for word in ["attach", "analyze", "serve", "cgroup", "prometheus"] {
            assert!(text.contains(word), "{shell} completion lacks {word}");
        }
    }
    // The bash script is valid bash.
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("leakwatch.bash");
    let o = leakwatch().args(["completions", "bash"]).output().unwrap();
    std::fs::write(&script, o.stdout).unwrap();
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .status()
        .unwrap();
    assert!(syntax.success());
    let o = leakwatch().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("use bash, zsh, fish"));
}

#[test]
fn man_pages_are_generated_from_the_clap_definition() {
    let o = leakwatch().arg("man").output().unwrap();
    assert!(o.status.success());
    let page = String::from_utf8(o.stdout).unwrap();
    assert!(page.contains(".TH leakwatch 1"), "{page}");
    assert!(page.contains("attach") && page.contains("analyze"));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("man1");
    let o = leakwatch()
        .arg("man")
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let attach = std::fs::read_to_string(dir.join("leakwatch-attach.1")).unwrap();
    assert!(attach.contains(".TH leakwatch-attach 1"), "{attach}");
    assert!(attach.contains("leakwatch attach"), "{attach}");
    for flag in ["serve", "cgroup", "unit", "name"] {
        assert!(
            attach.contains(&format!("\\-\\-{flag}")),
            "attach page lacks --{flag}"
        );
    }
    for sub in ["run", "report", "check", "analyze", "export", "completions"] {
        assert!(dir.join(format!("leakwatch-{sub}.1")).is_file(), "{sub}");
    }
    // man renders it, where man is installed.
    if let Ok(rendered) = Command::new("man")
        .arg("-l")
        .arg(dir.join("leakwatch-attach.1"))
        .env("MANWIDTH", "80")
        .output()
        && rendered.status.success()
    {
        assert!(String::from_utf8_lossy(&rendered.stdout).contains("--serve"));
    }
}

#[test]
fn no_color_turns_colour_off_even_when_forced() {
    let help = |no_color: bool| {
        let mut cmd = leakwatch();
        cmd.arg("--help")
            .env("CLICOLOR_FORCE", "1")
            .env_remove("NO_COLOR");
        if no_color {
            cmd.env("NO_COLOR", "1");
        }
        String::from_utf8(cmd.output().unwrap().stdout).unwrap()
    };
    assert!(help(false).contains('\x1b'), "clap colours forced help");
    assert!(!help(true).contains('\x1b'));
}

#[test]
fn check_json_prints_the_gate_result() {
    let tmp = tempfile::tempdir().unwrap();
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/run-leak");
    let out = tmp.path().join("again");
    let baseline = tmp.path().join("baseline.json");
    let o = leakwatch()
        .arg("report")
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .arg("--save-baseline")
        .arg(&baseline)
        .arg("--quiet")
        .output()
        .unwrap();
    crate::common::assert_exit_matches_verdict(o.status, &out);
    let o = leakwatch()
        .arg("check")
        .arg(&out)
        .arg("--baseline")
        .arg(&baseline)
        .arg("--json")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["passed"], true);
    assert!(v["checks"].as_array().is_some_and(|c| !c.is_empty()), "{v}");
    assert!(o.stderr.is_empty(), "--json prints nothing else");
}

/// A stand-in for Prometheus' query_range and instant queries of a range
/// selector (`QUERY[Nms]` at `time`, the raw samples in (time − N ms,
/// time]): answers every request with the points of `series` (label set,
/// values at t = 0, 60, … s) that fall in the request's window, as the real
/// API does; counts requests.
fn fake_prometheus(
    series: Vec<(&'static str, Vec<Option<f64>>)>,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut line = String::new();
            BufReader::new(&stream).read_line(&mut line).unwrap();
            let param = |name: &str| -> f64 {
                line.split(['?', '&', ' '])
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                    .and_then(|v| v.parse().ok())
                    .unwrap()
            };
            let (start, end) = if line.contains("/api/v1/query?") {
                // query=mem%5B300000ms%5D&time=14340.000
                let window_ms: f64 = line
                    .split("%5B")
                    .nth(1)
                    .and_then(|w| w.split("ms%5D").next())
                    .and_then(|w| w.parse().ok())
                    .unwrap();
                let time = param("time");
                (time - window_ms / 1000.0, time)
            } else {
                (param("start"), param("end"))
            };
            let result: Vec<String> = series
                .iter()
                .map(|(pod, values)| {
                    let points: Vec<String> = values
                        .iter()
                        .enumerate()
                        .filter_map(|(i, v)| v.map(|v| (i as f64 * 60.0, v)))
                        .filter(|(t, _)| *t >= start && *t <= end)
                        .map(|(t, v)| format!("[{t},\"{v}\"]"))
                        .collect();
                    format!(
                        r#"{{"metric":{{"__name__":"mem","pod":"{pod}"}},"values":[{}]}}"#,
                        points.join(",")
                    )
                })
                .collect();
            let body = format!(
                r#"{{"status":"success","data":{{"resultType":"matrix","result":[{}]}}}}"#,
                result.join(",")
            );
            let mut s = stream;
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, requests)
}

/// Four hours at 1 min of three pods, as `fake_prometheus` serves them.
fn three_pods() -> Vec<(&'static str, Vec<Option<f64>>)> {
    // 4 h at 1 min. Pod "a" leaks 1 MiB/min, restarts at 2 h (memory back
    // to its base); pod "b" holds steady with a 30 min gap in the middle
    // (it was gone: a new life); pod "c" leaks 4 MiB/min without restarts.
    let a: Vec<Option<f64>> = (0..240)
        .map(|i| Some(100.0 * MIB + (i % 120) as f64 * MIB))
        .collect();
    let b: Vec<Option<f64>> = (0..240)
        .map(|i| (!(100..130).contains(&i)).then_some(50.0 * MIB + (i % 3) as f64 * 4096.0))
        .collect();
    let c: Vec<Option<f64>> = (0..240)
        .map(|i| Some(200.0 * MIB + i as f64 * 4.0 * MIB))
        .collect();
    vec![("a", a), ("b", b), ("c", c)]
}

/// `analyze --prometheus` of the fake server's `mem` over its 4 h at a 1 s step, into `out`.
fn analyze_fake_prometheus(port: u16, out: &std::path::Path) -> std::process::Output {
    leakwatch()
        .args([
            "analyze",
            "--prometheus",
            &format!("http://127.0.0.1:{port}"),
        ])
        .args(["--query", "mem", "--end", "14340", "--range", "14340s"])
        // 14,341 points at 1 s: two chunks under the 11,000 limit.
        .args(["--step", "1s", "--max-growth", "100MiB/h", "--out"])
        .arg(out)
        .output()
        .unwrap()
}

/// The label sets in summary.json are c, then a's two lives, then b's two lives.
fn assert_worst_first(s: &serde_json::Value) {
    let labels: Vec<String> = s["series_labels"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    // Worst first: c (4 MiB/min), then a's two lives; b's two lives last.
    assert_eq!(labels.len(), 5, "{labels:?}");
    assert!(labels[0].contains("pod=\"c\"") && !labels[0].contains("leakwatch_life"));
    for l in &labels[1..3] {
        assert!(
            l.contains("pod=\"a\"") && l.contains("leakwatch_life"),
            "{l}"
        );
    }
    for l in &labels[3..] {
        assert!(
            l.contains("pod=\"b\"") && l.contains("leakwatch_life"),
            "{l}"
        );
    }
}

/// Pod c and each of a's lives leak at their own rate; b's lives do not leak.
fn assert_leaking_lives(s: &serde_json::Value) {
    let slope = |i: usize| {
        series(s, &format!("series:{i}"), "rss_bytes")["line"]["slope"]
            .as_f64()
            .unwrap()
    };
    assert_within("pod c", slope(0), 4.0 * MIB / 60.0, 0.01);
    assert_within("pod a, life 1", slope(1), MIB / 60.0, 0.01);
    assert_within("pod a, life 2", slope(2), MIB / 60.0, 0.01);
    for i in 0..3 {
        assert_eq!(
            series(s, &format!("series:{i}"), "rss_bytes")["verdict"],
            "leak"
        );
    }
    for i in 3..5 {
        assert_ne!(
            series(s, &format!("series:{i}"), "rss_bytes")["verdict"],
            "leak"
        );
    }
}

/// A note says pod a restarted once, with its lives' pooled rate.
fn assert_restart_noted(s: &serde_json::Value) {
    // Pod a's two lives pooled: 1 MiB/min = 60 MiB/h within a life.
    let notes: Vec<&str> = s["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("pod=\"a\"} restarted 1 time") && n.contains("+60.0 MiB/h")),
        "{notes:?}"
    );
}

/// `report` on the directory gates every series again, as analyze did.
fn assert_report_gates_every_series(out: &std::path::Path) {
    let again = leakwatch()
        .arg("report")
        .arg(out)
        .args(["--max-growth", "100MiB/h", "--quiet"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    let gate = &summary(out)["gate"]["checks"];
    assert_eq!(gate.as_array().unwrap().len(), 5, "{gate}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("Series by label set"), "{report}");
}

#[test]
fn analyze_splits_restarts_and_gaps_into_lives_and_lists_the_worst_first() {
    let (port, requests) = fake_prometheus(three_pods());
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = analyze_fake_prometheus(port, &out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    // The samples are a minute apart, coarser than the 1 s step: a probe of
    // the raw samples, then the raw samples in two chunks.
    assert_eq!(
        requests.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "a probe and two chunks"
    );
    let s = summary(&out);
    assert!(
        s["notes"]
            .to_string()
            .contains("as stored (raw samples about every 1m"),
        "{}",
        s["notes"]
    );
    eprintln!("{stderr}");
    assert_worst_first(&s);
    assert_leaking_lives(&s);
    assert_restart_noted(&s);
    assert_report_gates_every_series(&out);
    assert!(stderr.contains("worst first"), "{stderr}");
}
