//! Hostile inputs, signals and leftovers, each with real
//! processes: never overwrite through a link, never orphan a process, never
//! panic, never a silently wrong number.

use std::io::Read;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

fn manifest(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Processes whose command line contains `tag` (pgrep -f, without pgrep).
fn running_with(tag: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(tag) && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

fn kill_all(tag: &str) {
    for pid in running_with(tag) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
}

/// `leakwatch run ARGS` of the fixture client against a daemon on `socket`.
fn run_client(out: &Path, socket: &Path, repeat: &str, args: &[&str]) -> Command {
    let mut cmd = leakwatch();
    cmd.args(["run", "-n", repeat, "--settle", "100ms"])
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--")
        .arg(fixture())
        .args(["client", "--leak", "1MiB", "--socket"])
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    cmd
}

/// A leakwatch the test started, killed (with what it runs) if the test
/// fails before it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "leakwatch did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn planted_links_in_a_report_directory_are_replaced_never_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("artifact");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(
        manifest("tests/data/run-leak/samples.csv"),
        dir.join("samples.csv"),
    )
    .unwrap();
    let bashrc = tmp.path().join("bashrc");
    let keys = tmp.path().join("authorized_keys");
    std::fs::write(&bashrc, "export PATH=/usr/bin\n").unwrap();
    std::fs::write(&keys, "ssh-ed25519 AAAA me\n").unwrap();
    symlink(&bashrc, dir.join(".summary.json.tmp")).unwrap();
    symlink(&bashrc, dir.join("summary.json")).unwrap();
    symlink(&keys, dir.join("report.md")).unwrap();
    symlink(&keys, dir.join(".report.html.tmp")).unwrap();
    let status = leakwatch()
        .args(["report", "--quiet"])
        .arg(&dir)
        .status()
        .unwrap();
    crate::common::assert_exit_matches_verdict(status, &dir);
    assert_eq!(
        std::fs::read_to_string(&bashrc).unwrap(),
        "export PATH=/usr/bin\n"
    );
    assert_eq!(
        std::fs::read_to_string(&keys).unwrap(),
        "ssh-ed25519 AAAA me\n"
    );
    for name in ["summary.json", "report.md", "report.html"] {
        let meta = std::fs::symlink_metadata(dir.join(name)).unwrap();
        assert!(meta.is_file(), "{name} is still a link");
    }
    assert!(
        std::fs::read_to_string(dir.join("report.md"))
            .unwrap()
            .starts_with("# leakwatch report")
    );

    // A dangling samples.csv link in --out is refused, not written through.
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let target = tmp.path().join("created-through-link");
    symlink(&target, out.join("samples.csv")).unwrap();
    let output = leakwatch()
        .args(["run", "-n", "1", "--out"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(!target.exists());
    // A linked --out directory is refused too.
    let linked = tmp.path().join("linked-out");
    symlink(tmp.path(), &linked).unwrap();
    let output = leakwatch()
        .args(["run", "-n", "1", "--out"])
        .arg(&linked)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("is a symbolic link"), "{err}");
}

/// SIGHUP (a dropped ssh session) and SIGQUIT end a run like Ctrl-C: the
/// reports are written, the daemon is stopped, exit 128 + signal.
#[test]
fn hangup_and_quit_mid_run_write_the_reports_and_stop_the_daemon() {
    for (signal, code) in [("-HUP", 129), ("-QUIT", 131)] {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join(format!("sig{code}.sock"));
        let out = tmp.path().join("out");
        let mut lw = Running(
            run_client(&out, &socket, "1000", &["--quiet"])
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let tag = socket.to_string_lossy().into_owned();
        wait_until("the daemon", Duration::from_secs(20), || {
            out.join("samples.csv").exists() && !running_with(&tag).is_empty()
        });
        std::thread::sleep(Duration::from_millis(800));
        Command::new("kill")
            .args([signal, &lw.0.id().to_string()])
            .status()
            .unwrap();
        let status = wait_exit(&mut lw.0, Duration::from_secs(20));
        assert_eq!(status.code(), Some(code), "{signal}");
        let s = summary(&out);
        assert_eq!(s["interrupted"], true);
        assert!(out.join("report.md").exists() && out.join("report.html").exists());
        assert!(
            running_with(&tag).is_empty(),
            "{signal}: daemon left running"
        );
    }
}

/// A second Ctrl-C while a TERM-ignoring daemon gets its grace period:
/// KILL now, every report still written from the samples taken, exit 130.
#[test]
fn a_second_interrupt_cuts_the_grace_short_and_still_writes_every_report() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let tag = format!("twice-{}", tmp.path().display());
    let mut lw = Running(
        leakwatch()
            .args(["run", "-n", "3", "--settle", "5s", "--quiet", "--out"])
            .arg(&out)
            .args(["--", "python3"])
            .arg(manifest("fixtures/hostile/refork_daemon.py"))
            .args(["--ignore-term", &tag])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = std::panic::catch_unwind(|| {
        wait_until("the daemon and its worker", Duration::from_secs(20), || {
            running_with(&tag).len() >= 2 && csv_text(&out).contains("run_end")
        })
    });
    if started.is_err() {
        kill_all(&tag);
        panic!("the daemon never started");
    }
    let pid = lw.0.id().to_string();
    Command::new("kill").args(["-INT", &pid]).status().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        lw.0.try_wait().unwrap().is_none(),
        "still in the grace period"
    );
    Command::new("kill").args(["-INT", &pid]).status().unwrap();
    let status = wait_exit(&mut lw.0, Duration::from_secs(20));
    let left = running_with(&tag);
    kill_all(&tag);
    assert_eq!(status.code(), Some(130), "{status}");
    assert!(left.is_empty(), "left running: {left:?}");
    for name in ["summary.json", "report.md", "report.html", "samples.csv"] {
        assert!(out.join(name).is_file(), "no {name}");
    }
    let s = summary(&out);
    assert_eq!(s["interrupted"], true);
    let notes = s["notes"].to_string();
    assert!(
        notes.contains("until a second interrupt and were killed"),
        "{notes}"
    );
    // Everything taken is on disk: `report` rebuilds the same notes.
    let rebuilt = leakwatch()
        .args(["report", "--quiet", "--out"])
        .arg(tmp.path().join("again"))
        .arg(&out)
        .status()
        .unwrap();
    assert_eq!(rebuilt.code(), Some(0));
    assert_eq!(
        summary(&tmp.path().join("again"))["notes"].to_string(),
        notes
    );
}

/// `leakwatch run … 2>&1 >/dev/null | head -1`: stderr closed under it.
#[test]
fn a_closed_stderr_pipe_is_no_panic_and_no_lost_report() {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("pipe.sock");
    let out = tmp.path().join("out");
    let junit = tmp.path().join("junit.xml");
    let junit_arg = junit.to_string_lossy().into_owned();
    let mut lw = Running(
        run_client(
            &out,
            &socket,
            "3",
            &["--max-growth", "64MiB/run", "--junit", &junit_arg],
        )
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    );
    // Read one byte, then close the pipe like `head -c1` would.
    let mut stderr = lw.0.stderr.take().unwrap();
    let mut first = [0u8; 1];
    let _ = stderr.read(&mut first);
    drop(stderr);
    let status = wait_exit(&mut lw.0, Duration::from_secs(60));
    assert!(status.code().is_some_and(|c| c <= 1), "{status}");
    assert!(out.join("summary.json").exists());
    assert!(
        std::fs::read_to_string(&junit)
            .unwrap()
            .contains("<testsuite")
    );
    assert!(running_with(&socket.to_string_lossy()).is_empty());
}

/// A daemon that forks a helper from its TERM handler, and one that ignores
/// TERM and re-forks its worker whenever it dies: nothing is left running.
#[test]
fn daemons_that_refork_when_stopped_leave_nothing_behind() {
    for flag in ["--fork-on-term", "--ignore-term"] {
        let tmp = tempfile::tempdir().unwrap();
        let tag = format!("refork-{}", tmp.path().display());
        let status = leakwatch()
            .args(["run", "-n", "2", "--settle", "100ms", "--quiet", "--out"])
            .arg(tmp.path().join("out"))
            .args(["--", "python3"])
            .arg(manifest("fixtures/hostile/refork_daemon.py"))
            .args([flag, &tag])
            .status()
            .unwrap();
        assert!(status.success(), "{flag}: {status}");
        std::thread::sleep(Duration::from_millis(300));
        let left = running_with(&tag);
        kill_all(&tag);
        assert!(left.is_empty(), "{flag}: left running: {left:?}");
    }
}

#[test]
fn a_hung_run_is_stopped_at_its_timeout_and_the_session_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let started = Instant::now();
    let status = leakwatch()
        .args(["run", "-n", "2", "--timeout", "300ms", "--quiet", "--out"])
        .arg(&out)
        .args(["--", "sleep", "600"])
        .status()
        .unwrap();
    // Every run timed out: the command never worked, an error (2) once its
    // reports are written.
    assert_eq!(status.code(), Some(2));
    assert!(started.elapsed() < Duration::from_secs(20));
    let s = summary(&out);
    assert_eq!(s["failed_runs"], serde_json::json!([1, 2]));
    assert_eq!(s["run_table"][0]["status"], "timeout:300ms");
    assert!(running_with("sleep 600").is_empty() || !s["run_table"].is_null());
}

#[test]
fn a_duplicated_or_damaged_samples_csv_is_an_error_not_a_doubled_slope() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(manifest("tests/data/run-leak/samples.csv")).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let doubled: String = std::iter::once(header.to_string())
        .chain(lines.flat_map(|l| [l.to_string(), l.to_string()]))
        .map(|l| l + "\n")
        .collect();
    let dup = tmp.path().join("dup.csv");
    std::fs::write(&dup, doubled).unwrap();
    let output = leakwatch()
        .args(["report", "--quiet", "--out"])
        .arg(tmp.path().join("dup"))
        .arg(&dup)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("appears twice"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    let nan = tmp.path().join("nan.csv");
    let last = text.lines().last().unwrap();
    let bad_row = last.replacen(',', ",NaN,", 1);
    std::fs::write(&nan, format!("{text}{bad_row}\n")).unwrap();
    let output = leakwatch()
        .args(["report", "--quiet", "--out"])
        .arg(tmp.path().join("nan"))
        .arg(&nan)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "a bad complete last line");
}

#[test]
fn numbers_that_overflow_are_usage_errors_naming_the_flag() {
    for (args, needle) in [
        (
            vec!["run", "--max-peak", "18446744073709551617", "--", "true"],
            "--max-peak '18446744073709551617' is too large",
        ),
        (
            vec!["run", "--interval", "200000000000000d", "--", "true"],
            "--interval '200000000000000d' is too long",
        ),
        (
            vec!["run", "--settle", "200000000000000d", "--", "true"],
            "--settle '200000000000000d' is too long",
        ),
        (
            vec!["run", "--repeat", "10000000000", "--", "true"],
            "--repeat 10000000000: at most",
        ),
        (vec!["attach", "1", "--interval", "1ms"], "is below 10ms"),
        (vec!["run", "--", "/tmp"], "is a directory"),
    ] {
        let output = leakwatch().args(&args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// Processes carrying session `pid`'s mark (`LEAKWATCH_SESSION=pid.…`).
fn marked_by(pid: u32) -> Vec<u32> {
    let mark = format!("LEAKWATCH_SESSION={pid}.");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let env = std::fs::read(format!("/proc/{p}/environ")).unwrap_or_default();
        let env = String::from_utf8_lossy(&env);
        if env.split('\0').any(|v| v.starts_with(&mark)) && alive(p) {
            pids.push(p);
        }
    }
    pids
}

/// The rows of samples.csv so far, as text.
fn csv_text(out: &Path) -> String {
    std::fs::read_to_string(out.join("samples.csv")).unwrap_or_default()
}

/// Waits until session `out` is in run `run` (its start event is on disk).
fn wait_for_run(out: &Path, run: u32, tag: &str) {
    let run = run.to_string();
    let started = std::panic::catch_unwind(|| {
        wait_until("the run", Duration::from_secs(30), || {
            csv_text(out)
                .lines()
                .any(|l| l.contains("run_start") && l.split(',').nth(1) == Some(run.as_str()))
        })
    });
    if started.is_err() {
        kill_all(tag);
        panic!("run {run} never started: {}", csv_text(out));
    }
}

/// `kill -9` of leakwatch during run 4 of 8: its guardian stops the daemon
/// the command started within seconds — through the session's cgroup as
/// root, and by the tracked tree and the environment mark as a user with
/// no cgroup of its own (`nobody`, when the test runs as root) — and the
/// samples taken are rebuilt by `report`.
#[test]
fn a_killed_leakwatch_leaves_nothing_it_started_running() {
    let is_root = nix::unistd::getuid().is_root();
    for unprivileged in [false, true] {
        if unprivileged && !is_root {
            // Already the unprivileged case.
            continue;
        }
        let tmp = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let runtime = tmp.path().join("runtime");
        std::fs::create_dir(&runtime).unwrap();
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o777)).unwrap();
        let socket = tmp.path().join("k9.sock");
        let out = tmp.path().join("out");
        let tag = socket.to_string_lossy().into_owned();
        // Copies in the temp dir: the build tree may sit where `nobody`
        // cannot enter.
        let (lw, fx) = (tmp.path().join("leakwatch"), tmp.path().join("fixture"));
        for (from, to) in [(env!("CARGO_BIN_EXE_leakwatch"), &lw), (fixture(), &fx)] {
            std::fs::copy(from, to).unwrap();
            std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let mut cmd = if unprivileged {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&lw);
            c
        } else {
            Command::new(&lw)
        };
        cmd.args(["run", "-n", "8", "--settle", "700ms", "--quiet", "--out"])
            .arg(&out)
            .arg("--")
            .arg(&fx)
            .args(["client", "--leak", "1MiB", "--socket"])
            .arg(&socket)
            .env("XDG_RUNTIME_DIR", &runtime)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let mut session = Running(cmd.spawn().unwrap());
        let pid = session.0.id();
        wait_for_run(&out, 4, &tag);
        let daemon = running_with(&format!("daemon --socket {tag}"));
        assert_eq!(daemon.len(), 1, "the daemon runs: {daemon:?}");
        assert!(!marked_by(pid).is_empty(), "the daemon carries the mark");
        // Both ways of stopping are exercised: the cgroup as root (where the
        // freezer hierarchy exists), the tracked tree and the mark without.
        let guardian = running_with(&format!("__guardian {pid} "));
        assert_eq!(guardian.len(), 1, "one guardian: {guardian:?}");
        let argv = std::fs::read(format!("/proc/{}/cmdline", guardian[0])).unwrap();
        let with_cgroup = String::from_utf8_lossy(&argv).contains("--cgroup");
        let freezer =
            nix::unistd::access("/sys/fs/cgroup/freezer", nix::unistd::AccessFlags::W_OK).is_ok();
        assert_eq!(with_cgroup, is_root && !unprivileged && freezer, "{argv:?}");
        session.0.kill().unwrap(); // SIGKILL: leakwatch stops nothing itself
        session.0.wait().unwrap();
        let gone = std::panic::catch_unwind(|| {
            wait_until(
                "the session's processes to stop",
                Duration::from_secs(6),
                || running_with(&tag).is_empty() && marked_by(pid).is_empty(),
            )
        });
        let left = running_with(&tag);
        kill_all(&tag);
        assert!(
            gone.is_ok(),
            "unprivileged={unprivileged}: left running {left:?}"
        );
        // Nothing is left to name: the record goes with the processes.
        let records = || {
            std::fs::read_dir(runtime.join("leakwatch"))
                .unwrap()
                .count()
        };
        wait_until("the session record to go", Duration::from_secs(3), || {
            records() == 0
        });
        let guardian = format!("__guardian {pid} ");
        wait_until("the guardian to exit", Duration::from_secs(3), || {
            running_with(&guardian).is_empty()
        });
        let rebuilt = leakwatch()
            .args(["report", "--quiet"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(rebuilt.status.code().is_some_and(|c| c <= 1), "{rebuilt:?}");
        let s = summary(&out);
        assert!(s["runs"].as_u64().unwrap() >= 3, "{s}");
    }
}

/// `kill -9` of leakwatch while a daemon that ignores TERM and re-forks its
/// worker runs: the guardian's KILL after the grace period leaves nothing.
#[test]
fn a_killed_leakwatchs_term_ignoring_daemon_is_killed_by_the_guardian() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let tag = format!("k9-refork-{}", tmp.path().display());
    let mut session = Running(
        leakwatch()
            .args(["run", "-n", "8", "--settle", "700ms", "--quiet", "--out"])
            .arg(&out)
            .env("XDG_RUNTIME_DIR", tmp.path())
            .args(["--", "python3"])
            .arg(manifest("fixtures/hostile/refork_daemon.py"))
            .args(["--ignore-term", &tag])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_run(&out, 2, &tag);
    assert!(running_with(&tag).len() >= 2, "daemon and worker run");
    session.0.kill().unwrap();
    session.0.wait().unwrap();
    let gone = std::panic::catch_unwind(|| {
        wait_until("the daemons to be killed", Duration::from_secs(10), || {
            running_with(&tag).is_empty()
        })
    });
    let left = running_with(&tag);
    kill_all(&tag);
    assert!(gone.is_ok(), "left running: {left:?}");
}

/// When the guardian cannot act either (killed with leakwatch), the daemon
/// outlives the session and the next run names it.
#[test]
fn a_killed_sessions_daemon_is_named_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let runtime = tmp.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    let socket = tmp.path().join("killed.sock");
    let tag = socket.to_string_lossy().into_owned();
    let lw = run_client(&tmp.path().join("a"), &socket, "1000", &["--quiet"])
        .env("XDG_RUNTIME_DIR", &runtime)
        .spawn()
        .unwrap();
    let lw = Running(lw);
    let found = std::panic::catch_unwind(|| {
        wait_until("the daemon", Duration::from_secs(20), || {
            running_with(&format!("daemon --socket {tag}")).len() == 1
        })
    });
    if found.is_err() {
        kill_all(&tag);
        panic!("the daemon never started");
    }
    std::thread::sleep(Duration::from_millis(500));
    let guardian = running_with(&format!("__guardian {} ", lw.0.id()));
    assert_eq!(guardian.len(), 1, "one guardian: {guardian:?}");
    kill_all(&format!("__guardian {} ", lw.0.id()));
    let cgroup = Path::new("/sys/fs/cgroup/freezer").join(format!("leakwatch-{}", lw.0.id()));
    drop(lw); // SIGKILL: leakwatch gets no chance to stop its daemon
    let daemon = running_with(&format!("daemon --socket {tag}"));
    assert_eq!(
        daemon.len(),
        1,
        "the daemon outlives leakwatch and its guardian"
    );
    let output = run_client(&tmp.path().join("b"), &socket, "1", &[])
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    kill_all(&tag);
    let _ = std::fs::remove_dir(&cgroup); // empty now: what the session left is gone
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains("left by an earlier leakwatch session")
            && err.contains(&daemon[0].to_string()),
        "{err}"
    );
    let s = summary(&tmp.path().join("b"));
    assert!(s["notes"].to_string().contains("earlier leakwatch session"));
}

/// Names from outside (a process renamed to a formula or a Markdown image)
/// reach samples.csv spreadsheet-safe and report.md inert.
#[test]
#[cfg_attr(not(lw_deps), ignore = "needs .ci/deps: bash .ci/test")]
fn hostile_process_names_are_inert_in_csv_and_markdown() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    // Two processes that rename themselves (PR_SET_NAME, 15 bytes at most).
    let script = "import ctypes, os, sys, time\n\
        name = sys.argv[1].encode()\n\
        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name), 0, 0, 0)\n\
        time.sleep(float(sys.argv[2]))\n";
    let mut named: Vec<Child> = ["![x](//e.vil/p", "=cmd|'/C calc'!"]
        .iter()
        .map(|name| {
            Command::new("python3")
                .args(["-c", script, name, "30"])
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut cmd = leakwatch();
    cmd.args(["run", "-n", "2", "--settle", "50ms", "--quiet", "--out"])
        .arg(&out);
    for child in &named {
        cmd.args(["--watch", &child.id().to_string()]);
    }
    let status = cmd.args(["--", "true"]).status().unwrap();
    for child in &mut named {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(status.success());
    let csv = std::fs::read_to_string(out.join("samples.csv")).unwrap();
    assert!(csv.contains(",'=cmd|'/C calc'!,"), "{csv}");
    assert!(!csv.contains(",=cmd"));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("!\\[x\\](//e.vil/p"), "{md}");
    assert!(!md.contains("![x]("), "{md}");
    rendered_by_github_makes_no_link_or_image(&out.join("report.md"));
}

/// Control characters in a text: C0 but the newline, DEL, C1 (U+0080–U+009F);
/// the text must be UTF-8 (a byte that is not would be raw too).
fn raw_controls(what: &str, bytes: &[u8]) -> Vec<char> {
    let text = std::str::from_utf8(bytes).unwrap_or_else(|e| panic!("{what}: not UTF-8: {e}"));
    text.chars()
        .filter(|&c| matches!(c, '\0'..='\x09' | '\x0b'..='\x1f' | '\x7f' | '\u{80}'..='\u{9f}'))
        .collect()
}

/// A daemon that names itself ESC ] 0;pwn BEL ESC [2J and maps a file named
/// with colour codes, a lone 0x9b and a byte that is not UTF-8, started by
/// a command line that holds such bytes too: none reaches stderr, the
/// reports, samples.csv, summary.json, JUnit or OpenMetrics raw; the names
/// are there escaped (`\x1b`), and `report` rebuilds the same text.
#[test]
fn escape_sequences_from_a_process_reach_no_terminal_and_no_file_raw() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let junit = tmp.path().join("junit.xml");
    let tag = format!("escapes-{}", tmp.path().display());
    let mut arg = b"\x1b[2J\xc2\x9b\xff".to_vec();
    arg.extend_from_slice(tag.as_bytes());
    let gate = ["--max-growth", "1GiB/run"];
    let output = leakwatch()
        .args(["run", "-n", "2", "--settle", "300ms", "--out"])
        .arg(&out)
        .args(gate)
        .arg("--junit")
        .arg(&junit)
        .args(["--", "python3"])
        .arg(manifest("fixtures/hostile/escape_daemon.py"))
        .arg(tmp.path())
        .arg(std::ffi::OsStr::from_bytes(&arg))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let left = running_with(&tag);
    kill_all(&tag);
    assert!(left.is_empty(), "left running: {left:?}");
    assert!(output.status.code().is_some_and(|c| c <= 1), "{output:?}");
    let export = leakwatch()
        .args(["export", "--format", "openmetrics"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(export.status.success(), "{export:?}");
    let rebuilt = tmp.path().join("again");
    let status = leakwatch()
        .args(["report", "--quiet", "--out"])
        .arg(&rebuilt)
        .args(gate)
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.code().is_some_and(|c| c <= 1));
    let read = |p: PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let texts = [
        ("stderr", output.stderr.clone()),
        ("openmetrics", export.stdout.clone()),
        ("junit", read(junit)),
        ("report.md", read(out.join("report.md"))),
        ("report.html", read(out.join("report.html"))),
        ("samples.csv", read(out.join("samples.csv"))),
        ("summary.json", read(out.join("summary.json"))),
        ("rebuilt report.md", read(rebuilt.join("report.md"))),
    ];
    for (what, bytes) in &texts {
        let raw = raw_controls(what, bytes);
        assert!(raw.is_empty(), "{what} holds raw {raw:?}");
    }
    let csv = String::from_utf8_lossy(&texts[5].1);
    assert!(
        csv.contains(r"\x1b]0;pwn\x07\x1b[2J"),
        "the name, escaped: {csv}"
    );
    assert!(
        csv.contains(r"map\x1b[31mred\x1b[0m\x9b\xff.so"),
        "the mapping, escaped"
    );
    assert!(String::from_utf8_lossy(&texts[3].1).contains("0;pwn"));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains(r"\x1b[2J\xc2\x9b\xff"),
        "the command line, escaped: {err}"
    );
    assert!(String::from_utf8_lossy(&export.stdout).contains("pwn"));
    assert_eq!(texts[3].1, texts[7].1, "report rebuilds the same report.md");
}

/// `--py-sites` on a Python daemon whose file name and leaking source line
/// hold escape sequences: the sites reach samples.csv, the reports and
/// stderr escaped, never raw.
#[test]
fn python_file_names_and_source_lines_with_escapes_are_shown_escaped() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let source = std::fs::read_to_string(manifest("fixtures/py/pyd.py")).unwrap();
    let source = source.replace("# LEAK-SITE", "# LEAK-SITE \x1b]0;pwn\x07\u{9b}2J");
    assert!(source.contains('\x1b'));
    let script = tmp
        .path()
        .join(std::ffi::OsStr::from_bytes(b"pyd\x1b[31m\xc2\x9b.py"));
    std::fs::write(&script, source).unwrap();
    let sock = tmp.path().join("pyd.sock");
    let output = leakwatch()
        .args(["run", "-n", "3", "--settle", "200ms", "--py-sites", "--out"])
        .arg(&out)
        .args(["--", "python3"])
        .arg(&script)
        .args(["client", "--leak", "1000000", "--sock"])
        .arg(&sock)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let left = running_with(&sock.to_string_lossy());
    kill_all(&sock.to_string_lossy());
    assert!(left.is_empty(), "left running: {left:?}");
    assert!(output.status.code().is_some_and(|c| c <= 1), "{output:?}");
    let csv = std::fs::read(out.join("samples.csv")).unwrap();
    for (what, bytes) in [
        ("stderr", output.stderr.clone()),
        ("samples.csv", csv.clone()),
        ("report.md", std::fs::read(out.join("report.md")).unwrap()),
        (
            "report.html",
            std::fs::read(out.join("report.html")).unwrap(),
        ),
        (
            "summary.json",
            std::fs::read(out.join("summary.json")).unwrap(),
        ),
    ] {
        let raw = raw_controls(what, &bytes);
        assert!(raw.is_empty(), "{what} holds raw {raw:?}");
    }
    let csv = String::from_utf8_lossy(&csv);
    assert!(
        csv.contains(r"pyd\x1b[31m\xc2\x9b.py:"),
        "the file name, escaped: {csv}"
    );
    assert!(
        csv.contains(r"# LEAK-SITE \x1b]0;pwn\x07\xc2\x9b2J"),
        "the line, escaped"
    );
}

/// report.md through cmark-gfm (GitHub's renderer, from the test venv):
/// no image, no link to the outside, no raw HTML from the names.
fn rendered_by_github_makes_no_link_or_image(md: &Path) {
    let venv = std::env::var_os("LEAKWATCH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest("target/leakwatch-venv"));
    let python = venv.join("bin/python");
    if !python.exists() {
        crate::common::missing(&python.display().to_string(), "run `bash .ci/deps`");
    }
    let out = Command::new(&python)
        .args([
            "-c",
            "import sys, cmarkgfm; print(cmarkgfm.github_flavored_markdown_to_html(open(sys.argv[1]).read()))",
        ])
        .arg(md)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = String::from_utf8_lossy(&out.stdout);
    // The only images are leakwatch's own charts, and nothing links out.
    for img in html.split("<img ").skip(1) {
        let src = img.split('"').nth(1).unwrap_or("");
        assert!(src.ends_with(".svg") && !src.contains('/'), "image {src}");
    }
    assert!(!html.contains("<a "), "a link: {html}");
    assert!(html.contains("=cmd|&#39;/C calc&#39;!") || html.contains("=cmd|'/C calc'!"));
}
