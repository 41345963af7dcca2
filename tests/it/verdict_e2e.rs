//! Verdicts and attribution end to end: the recorded pantsd series, and real
//! fixture processes (leak, plateau, steady), each judged in repeated runs.

use crate::common::*;
use std::path::Path;
use std::process::Stdio;

#[test]
fn the_pantsd_seed_is_a_leak_of_4_2_to_4_7_mb_per_run() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("pantsd");
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pantsd-seed");
    let status = leakwatch()
        .args(["report", "--quiet"])
        .arg(&seed)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert_exit_matches_verdict(status, &out);
    let s = summary(&out);
    assert_eq!(s["verdict"], "leak");
    let pss = series(&s, "pid:4242", "pss_bytes");
    assert_eq!(pss["verdict"], "leak");
    assert_eq!(series(&s, "pid:4242", "anon_bytes")["verdict"], "leak");
    let slope = pss["line"]["slope"].as_f64().unwrap();
    assert!((4.2e6..=4.7e6).contains(&slope), "slope {slope}");
    // The report went to --out, not into the fixture.
    assert!(!seed.join("summary.json").exists());
}

/// A real churning daemon (`fixtures/real/churn_daemon.py --retain-rate
/// 20KiB --retain-for 180`, 20–50 MiB freed every 0.5 s) attached for 5
/// minutes at 250 ms, recorded: its floor rose 70.3 MiB/h for 180 s, then
/// held. A plateau judged by its troughs (one straight trough line over the
/// whole session would call it a leak of +50 MiB/h).
#[test]
fn a_churning_daemon_whose_floor_stops_rising_is_a_plateau() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let recorded = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/examples/gc-fill");
    let status = leakwatch()
        .args(["report", "--quiet"])
        .arg(&recorded)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let s = summary(&out);
    let anon = series(&s, "target", "anon_bytes");
    assert_eq!(anon["verdict"], "plateau", "{anon:#}");
    assert_eq!(anon["decided_by"], "troughs", "{anon:#}");
    let fill = anon["plateau"]["fill_rate"].as_f64().unwrap() * 3600.0;
    assert_within("fill rate", fill, 20.0 * 1024.0 * 3600.0, 0.15);
    let stop = anon["plateau"]["stop_x"].as_f64().unwrap();
    assert!((150.0..=230.0).contains(&stop), "stop {stop}");
    assert_ne!(s["verdict"], "leak");
}

fn run_client(
    out: &Path,
    socket: &Path,
    repeat: u32,
    extra: &[&str],
    client: &[&str],
) -> serde_json::Value {
    let status = leakwatch()
        .args([
            "run",
            "--repeat",
            &repeat.to_string(),
            "--settle",
            "50ms",
            "--quiet",
        ])
        .args(extra)
        .arg("--out")
        .arg(out)
        .arg("--")
        .arg(fixture())
        .args(client)
        .arg("--socket")
        .arg(socket)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert_exit_matches_verdict(status, out);
    summary(out)
}

#[test]
fn leaky_daemon_is_a_leak_in_anonymous_memory_every_time() {
    for attempt in 0..3 {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("r");
        let s = run_client(
            &out,
            &tmp.path().join("s"),
            10,
            &[],
            &["client", "--leak", "4MiB"],
        );
        assert_eq!(s["verdict"], "leak", "attempt {attempt}");
        assert_eq!(series(&s, "survivors", "anon_bytes")["verdict"], "leak");
        let pss = series(&s, "survivors", "pss_bytes");
        assert_eq!(pss["verdict"], "leak");
        assert_within(
            "pss slope",
            pss["line"]["slope"].as_f64().unwrap(),
            4.0 * MIB,
            0.05,
        );
        let ci = pss["line"]["ci95"].as_array().unwrap();
        assert!(ci[0].as_f64().unwrap() <= 4.0 * MIB * 1.05);
        assert!(ci[1].as_f64().unwrap() >= 4.0 * MIB * 0.95);

        let at = &s["attribution"][0];
        assert_eq!(at["series"], "survivors");
        assert_eq!(at["kinds"][0]["metric"], "anon_bytes", "{at:#}");
        assert_within(
            "anon slope",
            at["kinds"][0]["slope"].as_f64().unwrap(),
            4.0 * MIB,
            0.05,
        );
        // smaps at runs 1 and 10: nine requests' worth of anonymous memory.
        assert_eq!(at["mappings"][0]["mapping"], "[anon]", "{at:#}");
        assert_within(
            "[anon] growth",
            at["mappings"][0]["growth_bytes"].as_f64().unwrap(),
            36.0 * MIB,
            0.02,
        );
    }
}

/// Watches a daemon started here through 15 no-spawn client runs. (15, not
/// 10: parallel tests start and stop processes of the same binary, which
/// moves a small daemon's PSS by a few hundred KiB; 10 runs cannot always
/// tell that noise from slow growth, and say "inconclusive" rather than guess.)
fn watched(daemon_args: &[&str]) -> (serde_json::Value, String) {
    watched_for(15, daemon_args)
}

fn watched_for(runs: u32, daemon_args: &[&str]) -> (serde_json::Value, String) {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("s");
    let mut args = vec!["daemon", "--socket", socket.to_str().unwrap()];
    args.extend_from_slice(daemon_args);
    let daemon = Fixture::start(&args);
    daemon.wait_for(&socket);
    let pid = daemon.pid().to_string();
    let out = tmp.path().join("r");
    let s = run_client(
        &out,
        &socket,
        runs,
        &["--watch", &pid],
        &["client", "--no-spawn"],
    );
    (s, format!("pid:{pid}"))
}

#[test]
fn plateauing_daemon_is_a_plateau_not_a_leak_every_time() {
    for attempt in 0..3 {
        // Keeps 4 MiB for each of the first 5 requests, then nothing.
        let (s, name) = watched(&["--leak", "4MiB", "--plateau-after", "5"]);
        let anon = series(&s, &name, "anon_bytes");
        assert_eq!(anon["verdict"], "plateau", "attempt {attempt}: {anon:#}");
        assert_eq!(s["verdict"], "plateau");
        // Filled at 4 MiB/run, flat at the end, and 5 x 4 MiB in all.
        let end = anon["end_rate"]["rate"].as_f64().unwrap();
        assert!(end.abs() < 64.0 * 1024.0, "end slope {end}");
        let fill = anon["plateau"]["fill_rate"].as_f64().unwrap();
        assert_within("fill rate", fill, 4.0 * MIB, 0.10);
        let grown = anon["last"].as_f64().unwrap() - anon["first"].as_f64().unwrap();
        assert_within("total growth", grown, 20.0 * MIB, 0.02);
    }
}

#[test]
fn a_fill_then_a_slower_leak_is_a_leak_at_the_slower_rate_every_time() {
    for attempt in 0..2 {
        // 4 MiB for each of the first 8 requests, then 512 KiB for each.
        let (s, name) = watched_for(
            30,
            &[
                "--leak",
                "4MiB",
                "--plateau-after",
                "8",
                "--then-leak",
                "512KiB",
            ],
        );
        let anon = series(&s, &name, "anon_bytes");
        assert_eq!(anon["verdict"], "leak", "attempt {attempt}: {anon:#}");
        assert_eq!(s["verdict"], "leak");
        // The headline is the end's rate, not the fill's nor the line's.
        let rate = anon["end_rate"]["rate"].as_f64().unwrap();
        assert_within("rate", rate, 0.5 * MIB, 0.10);
        assert!(anon["plateau"].is_null(), "{anon:#}");
    }
}

#[test]
fn steady_daemon_is_stable_every_time() {
    for attempt in 0..3 {
        let (s, name) = watched(&["--leak", "0"]);
        let anon = series(&s, &name, "anon_bytes");
        assert_eq!(anon["verdict"], "stable", "attempt {attempt}: {anon:#}");
        assert_eq!(s["verdict"], "stable");
    }
}
