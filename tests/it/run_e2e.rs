//! End to end: `leakwatch run` on real fixture processes with a known leak.

use crate::common::*;

#[test]
fn detached_daemon_leaking_4mib_per_request_is_measured_within_5_percent() {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("d.sock");
    let out = out_dir(&tmp, "report");
    let status = leakwatch()
        .args([
            "run", "--repeat", "10", "--settle", "200ms", "--quiet", "--out",
        ])
        .arg(&out)
        .arg("--")
        .arg(fixture())
        .args(["client", "--leak", "4MiB", "--socket"])
        .arg(&socket)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_exit_matches_verdict(status, &out);

    let s = summary(&out);
    assert_eq!(s["runs"], 10);
    assert_eq!(s["mode"], "run");
    for metric in ["rss_bytes", "pss_bytes", "uss_bytes", "anon_bytes"] {
        let slope = series(&s, "survivors", metric)["line"]["slope"]
            .as_f64()
            .unwrap();
        assert_within(metric, slope, 4.0 * MIB, 0.05);
    }
    assert_eq!(series(&s, "survivors", "rss_bytes")["n"], 10);

    // The daemon escaped its parent (double fork + setsid) but leakwatch, a
    // subreaper, kept it in its tree and stopped it at the end.
    let daemons = pids_in_scope(&out, "survivors");
    assert_eq!(daemons.len(), 1, "{daemons:?}");
    assert!(!alive(daemons[0]), "daemon {} still running", daemons[0]);
    assert!(!socket.exists() || std::os::unix::net::UnixStream::connect(&socket).is_err());
}

#[test]
fn keep_survivors_leaves_the_daemon_running() {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("d.sock");
    let out = out_dir(&tmp, "report");
    let status = leakwatch()
        .args([
            "run",
            "-n",
            "2",
            "--settle",
            "50ms",
            "--quiet",
            "--keep-survivors",
            "--out",
        ])
        .arg(&out)
        .arg("--")
        .arg(fixture())
        .args(["client", "--leak", "1MiB", "--socket"])
        .arg(&socket)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let daemons = pids_in_scope(&out, "survivors");
    assert_eq!(daemons.len(), 1);
    assert!(alive(daemons[0]));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemons[0] as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// Runs the no-spawn client 10 times against an already-running daemon
/// watched by pid and returns the summary.
fn watch_daemon(daemon_args: &[&str], tag: &str) -> (serde_json::Value, u32) {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join(format!("{tag}.sock"));
    let socket_s = socket.to_str().unwrap();
    let mut args = vec!["daemon", "--socket", socket_s];
    args.extend_from_slice(daemon_args);
    let daemon = Fixture::start(&args);
    daemon.wait_for(&socket);
    let out = out_dir(&tmp, "report");
    let status = leakwatch()
        .args(["run", "--repeat", "10", "--settle", "100ms", "--quiet"])
        .args(["--watch", &daemon.pid().to_string(), "--out"])
        .arg(&out)
        .arg("--")
        .arg(fixture())
        .args(["client", "--no-spawn", "--socket", socket_s])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_exit_matches_verdict(status, &out);
    // A watched process is not leakwatch's to stop.
    assert!(alive(daemon.pid()));
    (summary(&out), daemon.pid())
}

#[test]
fn watched_daemon_leak_is_measured_within_5_percent() {
    let (s, pid) = watch_daemon(&["--leak", "4MiB"], "leaky");
    let name = format!("pid:{pid}");
    let pss = series(&s, &name, "pss_bytes");
    // Run 0 is the baseline before the first run.
    assert_eq!(pss["n"], 11);
    assert_within(
        "pss slope",
        pss["line"]["slope"].as_f64().unwrap(),
        4.0 * MIB,
        0.05,
    );
    assert_within(
        "rss slope",
        series(&s, &name, "rss_bytes")["line"]["slope"]
            .as_f64()
            .unwrap(),
        4.0 * MIB,
        0.05,
    );
}

#[test]
fn watched_steady_daemon_does_not_grow() {
    let (s, pid) = watch_daemon(&["--leak", "0"], "steady");
    let slope = series(&s, &format!("pid:{pid}"), "rss_bytes")["line"]["slope"]
        .as_f64()
        .unwrap();
    // 1 MiB is allocated and freed per request: nothing may stay.
    assert!(slope.abs() < 16.0 * 1024.0, "steady daemon slope {slope}");
}
