//! End to end with a real Prometheus: it scrapes `leakwatch attach --serve`
//! on a leaking fixture and on a steady one; the documented alert rule
//! fires for the first only; then `leakwatch analyze --prometheus` on what
//! Prometheus stored finds the leak (slope within 10% of the truth) and
//! calls the steady one stable.
//!
//! Needs `prometheus` and `promtool` on PATH (Debian package `prometheus`;
//! `.ci/deps` installs it). Plain `cargo test` lists the test as ignored;
//! where it runs, their absence fails it with the fix.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// A program on PATH; a missing one fails the test (`missing`).
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        crate::common::missing(name, "install the Debian package `prometheus` (.ci/deps)");
    }
    found
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET `url` (plain HTTP on loopback), the body as JSON.
fn get_json(url: &str) -> Option<Value> {
    let text = ureq::get(url)
        .call()
        .ok()?
        .body_mut()
        .read_to_string()
        .ok()?;
    serde_json::from_str(&text).ok()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documented rule file passes `promtool check rules`.
fn check_rules(promtool: &Path, rules: &Path) {
    let out = Command::new(promtool)
        .args(["check", "rules"])
        .arg(rules)
        .output()
        .unwrap();
    assert!(out.status.success(), "promtool check rules: {out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("SUCCESS"));
}

/// Starts Prometheus on loopback with a temp storage dir, a 1 s scrape and
/// evaluation interval, scraping `targets`, with the documented rules (their
/// `for:` shortened to 5s so the test runs in under two minutes).
fn start_prometheus(bin: &Path, dir: &Path, port: u16, targets: &[u16]) -> Killed {
    let rules = std::fs::read_to_string(repo().join("fixtures/prometheus/leakwatch-rules.yml"))
        .unwrap()
        .replace("for: 10m", "for: 5s");
    std::fs::write(dir.join("rules.yml"), rules).unwrap();
    let targets: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files: ['{}']\n\
         scrape_configs:\n  - job_name: leakwatch\n    static_configs:\n      - targets: [{}]\n",
        dir.join("rules.yml").display(),
        targets.join(", ")
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let child = Command::new(bin)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .unwrap();
    let guard = Killed(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while get_json(&format!("http://127.0.0.1:{port}/api/v1/status/buildinfo")).is_none() {
        assert!(Instant::now() < deadline, "prometheus did not come up");
        std::thread::sleep(Duration::from_millis(200));
    }
    guard
}

/// `leakwatch attach PID --serve` for `duration`, waiting until it serves.
fn attach_serving(pid: u32, port: u16, out: &Path, duration: &str) -> Killed {
    let mut child = leakwatch()
        .args(["attach", &pid.to_string(), "--interval", "200ms"])
        .args(["--duration", duration])
        .args(["--serve", &format!("127.0.0.1:{port}"), "--out"])
        .arg(out)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut first = String::new();
    BufReader::new(stderr).read_line(&mut first).unwrap();
    assert!(first.contains("serving OpenMetrics on"), "{first}");
    Killed(child)
}

/// The alerts Prometheus holds now: (instance, state).
fn alerts(port: u16) -> Vec<(String, String)> {
    let Some(v) = get_json(&format!("http://127.0.0.1:{port}/api/v1/alerts")) else {
        return Vec::new();
    };
    v["data"]["alerts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|a| {
            (
                a["labels"]["instance"].as_str().unwrap_or("").to_string(),
                a["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The newest value of an instant query, for one instance.
fn instant(port: u16, query: &str) -> Option<f64> {
    let url = format!(
        "http://127.0.0.1:{port}/api/v1/query?query={}",
        query
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b"_.-".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            })
            .collect::<String>()
    );
    let v = get_json(&url)?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Polls Prometheus' alerts for `window`: the alert must fire for `leak`
/// and never be pending or firing for `steady`. Returns when it fired.
fn alert_fires_for_the_leak_only(
    port: u16,
    leak: &str,
    steady: &str,
    window: Duration,
) -> Duration {
    let started = Instant::now();
    let mut fired_after = None;
    while started.elapsed() < window {
        let now = alerts(port);
        assert!(
            !now.iter().any(|(i, _)| i == steady),
            "an alert for the steady fixture: {now:?}"
        );
        if fired_after.is_none() && now.contains(&(leak.to_string(), "firing".into())) {
            fired_after = Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    fired_after.expect("the alert never fired for the leaking fixture")
}

/// The live slope Prometheus scraped last and the final summary.json's
/// agree: their 95% CIs overlap.
fn live_agrees_with_the_summary(port: u16, instance: &str, out: &Path) {
    let live = |what: &str| {
        instant(
            port,
            &format!(
                "last_over_time({what}{{instance=\"{instance}\",series=\"target\",metric=\"anon_bytes\"}}[1m])"
            ),
        )
        .unwrap()
    };
    let (slope, lo, hi) = (
        live("leakwatch_growth_bytes_per_second"),
        live("leakwatch_growth_ci95_lower_bytes_per_second"),
        live("leakwatch_growth_ci95_upper_bytes_per_second"),
    );
    let s = summary(out);
    let fin = series(&s, "target", "anon_bytes");
    // The rate the verdict used: summary.json's `end_rate` (the line where
    // the fit has none).
    let ci = if fin["end_rate"]["ci95"].is_array() {
        &fin["end_rate"]["ci95"]
    } else {
        &fin["line"]["ci95"]
    };
    let (f_lo, f_hi) = (ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap());
    eprintln!(
        "live anon rate {slope:.0} B/s (CI {lo:.0} … {hi:.0}); summary.json {:.0} (CI {f_lo:.0} … {f_hi:.0})",
        fin["end_rate"]["rate"]
            .as_f64()
            .or(fin["line"]["slope"].as_f64())
            .unwrap()
    );
    assert!(
        lo <= f_hi && f_lo <= hi,
        "live and final CIs do not overlap"
    );
}

/// `leakwatch analyze --prometheus` over what the server stored.
fn analyze(port: u16, query: &str, step: &str, out: &Path) -> std::process::Output {
    leakwatch()
        .args([
            "analyze",
            "--prometheus",
            &format!("http://127.0.0.1:{port}"),
        ])
        .args(["--query", query, "--range", "2m", "--step", step])
        .args(["--max-growth", "1GiB/h", "--out"])
        .arg(out)
        .output()
        .unwrap()
}

/// The analysis at a 1 s step finds the leak (series:0, worst first)
/// within 10% of the truth and calls the steady instance stable. A step as
/// fine as the 1 s scrapes reads the raw samples, at their own times: steps
/// shift a sample by up to a second, a point 2 MiB low wherever a scrape came
/// late (read on steps, a 512 KiB/s leak can come out "inconclusive, slope
/// 0.504 MiB/s", here once in three tries "the last point fell well below the
/// trend").
fn analyze_judges(port: u16, out: &Path, leak: &str, steady: &str, rate: f64) {
    let o = analyze(
        port,
        "leakwatch_series_memory_bytes{kind=\"anon\"}",
        "1s",
        out,
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    eprintln!("analyze --step 1s:\n{stderr}");
    // The leak (7 GiB/h) fails the 1 GiB/h gate.
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let s = summary(out);
    assert_eq!(s["mode"], "analyze");
    assert!(
        s["notes"].to_string().contains("as stored (raw samples"),
        "{}",
        s["notes"]
    );
    let labels = s["series_labels"].as_object().unwrap();
    assert_eq!(labels.len(), 2, "{labels:?}");
    assert!(labels["series:0"].as_str().unwrap().contains(leak));
    assert!(labels["series:1"].as_str().unwrap().contains(steady));
    let found = series(&s, "series:0", "rss_bytes");
    assert_eq!(found["verdict"], "leak", "{found}");
    assert_within(
        "analyze slope",
        found["line"]["slope"].as_f64().unwrap(),
        rate,
        0.10,
    );
    let calm = series(&s, "series:1", "rss_bytes");
    assert_eq!(calm["verdict"], "stable", "{calm}");
    assert!(out.join("report.md").is_file());
}

/// At a step 100 times finer than the scrape interval, `query_range` would repeat each
/// scrape ≈100 times: the raw samples are read instead (one per scrape, their own timestamps),
/// in two chunks joined, and say so. An expression that takes no range selector (`… + 0`) is
/// read by steps: 2 min at 10 ms is 12,000 points a series, over the server's 11,000, pulled
/// in two chunks and joined, each scrape held ≈100 steps, and read once per scrape
/// (`prometheus::refreshes`). The slope is the same both ways.
fn analyze_in_chunks(port: u16, out: &Path, leak: &str, rate: f64) {
    let selector = "leakwatch_series_memory_bytes{kind=\"anon\"}";
    for (query, raw) in [
        (selector.to_string(), true),
        (format!("{selector} + 0"), false),
    ] {
        let out = &out.join(if raw { "raw" } else { "steps" });
        let o = analyze(port, &query, "10ms", out);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{stderr}");
        let s = summary(out);
        assert!(
            s["series_labels"]["series:0"]
                .as_str()
                .unwrap()
                .contains(leak)
        );
        let found = series(&s, "series:0", "rss_bytes");
        let n = found["n"].as_u64().unwrap();
        eprintln!(
            "analyze --step 10ms '{query}': series:0 n={n} slope {:.0} B/s ({})",
            found["line"]["slope"], found["verdict"]
        );
        let notes = s["notes"].to_string();
        if raw {
            // One point per 1 s scrape over 2 min (the leak's session lasted 30 s of it).
            assert!((20..=130).contains(&n), "{found}");
            assert!(
                notes.contains("as stored (raw samples about every"),
                "{notes}"
            );
            assert_eq!(found["verdict"], "leak", "{found}");
        } else {
            // Each scrape held ≈100 steps: read once per scrape, as raw samples are.
            assert!((20..=130).contains(&n), "{found}");
            assert!(notes.contains("every 10ms"), "{notes}");
            assert!(notes.contains("hold each value"), "{notes}");
        }
        assert_within(
            "slope at 10 ms",
            found["line"]["slope"].as_f64().unwrap(),
            rate,
            0.10,
        );
    }
}

/// `fixtures/real/metrics_server.py` refreshing its gauges every 3 s (a leak of 1 MiB/s and
/// a steady one) while Prometheus scrapes it every second, and its port.
fn cached_exporter() -> (Killed, u16) {
    let port = free_port();
    let mut child = Command::new("python3")
        .arg(repo().join("fixtures/real/metrics_server.py"))
        .args([
            "--port",
            &port.to_string(),
            "--slope",
            "1MiB",
            "--hold",
            "3",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let stdout = child.stdout.take().unwrap();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert!(line.contains("ready"), "metrics_server.py: {line}");
    (Killed(child), port)
}

/// An exporter that holds each value 3 s under 1 s scrapes: Prometheus stores each value
/// three times, and `analyze` reads each refresh of the leak once and says so; its slope is the
/// truth's within 10%, the steady gauge stable.
fn analyze_reads_each_refresh_once(port: u16, out: &Path) {
    let o = analyze(port, "lw_fixture_bytes", "1s", out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    eprintln!("analyze lw_fixture_bytes:\n{stderr}");
    // 1 MiB/s fails the 1 GiB/h gate.
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let s = summary(out);
    let notes = s["notes"].to_string();
    assert!(
        // The steady gauge never changes: one value is not a hold.
        notes.contains("1 of 2 series hold each value") && notes.contains("about every 3.0s"),
        "{notes}"
    );
    let labels = s["series_labels"].as_object().unwrap();
    assert!(labels["series:0"].as_str().unwrap().contains("leak"));
    let found = series(&s, "series:0", "rss_bytes");
    assert_eq!(found["verdict"], "leak", "{found}");
    // One point per refresh: ≈ 40 s of scrapes in the 2 min range, every 3 s.
    let n = found["n"].as_u64().unwrap();
    assert!((8..=45).contains(&n), "{found}");
    assert_within(
        "held slope",
        found["line"]["slope"].as_f64().unwrap(),
        MIB,
        0.10,
    );
    assert_eq!(series(&s, "series:1", "rss_bytes")["verdict"], "stable");
}

#[test]
#[cfg_attr(not(lw_deps), ignore = "needs .ci/deps: bash .ci/test")]
fn prometheus_scrapes_serve_alerts_on_the_leak_only_and_analyze_finds_it() {
    let (Some(prometheus), Some(promtool)) = (tool("prometheus"), tool("promtool")) else {
        return;
    };
    let started = Instant::now();
    check_rules(
        &promtool,
        &repo().join("fixtures/prometheus/leakwatch-rules.yml"),
    );
    let tmp = tempfile::tempdir().unwrap();
    let leaky = crate::targets_e2e::start_private(&["grow", "--rate", "2MiB"]);
    let steady = crate::targets_e2e::start_private(&["steady", "--size", "16MiB"]);
    let (p_leak, p_steady, p_prom) = (free_port(), free_port(), free_port());
    let (held, p_held) = cached_exporter();
    let prom = start_prometheus(&prometheus, tmp.path(), p_prom, &[p_leak, p_steady, p_held]);
    let (out_leak, out_steady) = (tmp.path().join("leak"), tmp.path().join("steady"));
    let mut a_leak = attach_serving(leaky.pid(), p_leak, &out_leak, "30s");
    let mut a_steady = attach_serving(steady.pid(), p_steady, &out_steady, "30s");
    let (leak, calm) = (
        format!("127.0.0.1:{p_leak}"),
        format!("127.0.0.1:{p_steady}"),
    );

    let fired = alert_fires_for_the_leak_only(p_prom, &leak, &calm, Duration::from_secs(28));
    eprintln!("alert firing for the leak {fired:?} after the sessions started");
    crate::common::assert_exit_matches_verdict(a_leak.0.wait().unwrap(), &out_leak);
    crate::common::assert_exit_matches_verdict(a_steady.0.wait().unwrap(), &out_steady);
    live_agrees_with_the_summary(p_prom, &leak, &out_leak);
    assert_eq!(summary(&out_steady)["verdict"], "stable");

    analyze_judges(p_prom, &tmp.path().join("a1"), &leak, &calm, 2.0 * MIB);
    analyze_in_chunks(p_prom, &tmp.path().join("a2"), &leak, 2.0 * MIB);
    analyze_reads_each_refresh_once(p_prom, &tmp.path().join("a5"));
    drop(held);
    // Prometheus' own errors come back with the fix.
    let o = analyze(
        p_prom,
        "rate(leakwatch_samples[",
        "1s",
        &tmp.path().join("a3"),
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad_data") && err.contains("check the PromQL"),
        "{err}"
    );
    let o = analyze(p_prom, "no_such_metric", "1s", &tmp.path().join("a4"));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("returned no series"));
    drop(prom);
    eprintln!("wall time {:?}", started.elapsed());
}
