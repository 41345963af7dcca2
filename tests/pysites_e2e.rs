//! `--py-sites` end to end on real interpreters: the bootstrap finds the
//! line that keeps memory with its exact growth, forked children answer for
//! themselves, `-I` processes stay silent with a reason, an existing
//! sitecustomize still runs, and a pantsd-like daemon started detached by
//! its client is instrumented. Skipped (with a message) without python3 ≥ 3.7.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use leakwatch::sample::sites::python::{AnswerError, PySites, Silence, SiteReport, Snapshot};

const TIMEOUT: Duration = Duration::from_secs(30);

fn python() -> Option<&'static str> {
    let ok = Command::new("python3")
        .args(["-c", "import sys; sys.exit(sys.version_info < (3, 7))"])
        .status()
        .is_ok_and(|s| s.success());
    // A test that did not run is never counted as passed: a missing interpreter fails it.
    assert!(
        ok,
        "python3 >= 3.7 is missing on PATH: apt-get install python3"
    );
    ok.then_some("python3")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/py")
        .join(name)
}

/// The line of `path` marked `# MARKER`.
fn marker_line(path: &Path, marker: &str) -> u32 {
    let text = std::fs::read_to_string(path).unwrap();
    let at = text
        .lines()
        .position(|l| l.contains(&format!("# {marker}")))
        .unwrap_or_else(|| panic!("no {marker} in {}", path.display()));
    u32::try_from(at + 1).unwrap()
}

/// A Python process of `alloc_loop.py`, driven line by line, killed on drop.
struct Py {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: u32,
}

impl Py {
    fn start(env: &[(OsString, OsString)], flags: &[&str]) -> Py {
        let mut child = Command::new("python3")
            .args(flags)
            .arg(fixture("alloc_loop.py"))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut py = Py {
            pid: child.id(),
            child,
            stdin,
            stdout,
        };
        let ready = py.line();
        assert_eq!(ready, format!("ready {}", py.pid));
        py
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    fn send(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        self.line()
    }
}

impl Drop for Py {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn snapshot(reports: &[SiteReport], pid: u32) -> &Snapshot {
    let report = reports
        .iter()
        .find(|r| r.pid == pid)
        .unwrap_or_else(|| panic!("no report for {pid}: {reports:#?}"));
    report
        .answer
        .as_ref()
        .unwrap_or_else(|e| panic!("{pid}: {e}"))
}

/// (bytes, prev_bytes) of the by-line site at path:line.
fn line_bytes(s: &Snapshot, path: &Path, line: u32) -> Option<(u64, Option<u64>)> {
    s.by_line
        .sites
        .iter()
        .find(|site| Path::new(&site.frame.file) == path && site.frame.line == line)
        .map(|site| (site.bytes, site.prev_bytes))
}

#[test]
fn the_leaking_line_is_found_with_its_exact_growth() {
    let Some(_) = python() else { return };
    let sites = PySites::prepare(8).unwrap();
    let mut py = Py::start(&sites.env(None), &[]);
    let script = fixture("alloc_loop.py");
    let line = marker_line(&script, "KEEP-SITE");

    assert_eq!(py.send("keep 1000000"), "ok");
    let first = sites.collect(1, TIMEOUT);
    for _ in 0..2 {
        assert_eq!(py.send("keep 1000000"), "ok");
    }
    let second = sites.collect(2, TIMEOUT);

    let (s1, s2) = (snapshot(&first, py.pid), snapshot(&second, py.pid));
    assert_eq!((s1.run, s1.seq, s2.run, s2.seq), (Some(1), 1, Some(2), 2));
    let (b1, prev1) = line_bytes(s1, &script, line).unwrap();
    let (b2, prev2) = line_bytes(s2, &script, line).unwrap();
    // One block of 1,000,000 bytes + a 33-byte bytes header per "keep".
    assert_eq!(b1, 1_000_033);
    assert_eq!(prev1, None, "no previous answer");
    assert_eq!(prev2, Some(b1));
    assert_eq!(b2 - b1, 2 * 1_000_033);
    // The leaking line is the largest site, also by full traceback.
    let top = &s2.by_line.sites[0];
    assert_eq!((top.frame.line, top.internal), (line, false));
    let tb = &s2.by_traceback.sites[0];
    assert_eq!(tb.frames[0].line, line);
    assert!(tb.frames.len() >= 2, "the caller's frame too: {tb:?}");
    assert_eq!(s2.frames_limit, 8);
    assert!(s2.totals.traced_bytes >= b2);
    assert!(s2.totals.tracemalloc_bytes > 0);
    assert!(s2.answer_bytes > 0);
}

#[test]
fn a_forked_child_answers_with_its_own_pid() {
    let Some(_) = python() else { return };
    let sites = PySites::prepare(8).unwrap();
    let mut py = Py::start(&sites.env(None), &[]);
    let answer = py.send("fork 500000");
    let child: u32 = answer.strip_prefix("child ").unwrap().parse().unwrap();
    let script = fixture("alloc_loop.py");
    let line = marker_line(&script, "WORKER-SITE");

    let reports = sites.collect(1, TIMEOUT);
    let worker = snapshot(&reports, child);
    assert_eq!((worker.pid, worker.ppid), (child, py.pid));
    assert!(worker.forked);
    assert_eq!(worker.seq, 1, "its own count, not its parent's");
    assert_eq!(line_bytes(worker, &script, line).unwrap().0, 500_033);
    let parent = snapshot(&reports, py.pid);
    assert!(!parent.forked);
    assert_eq!(line_bytes(parent, &script, line), None);
    assert_eq!(reports.len(), 2, "{reports:#?}");
}

#[test]
fn an_isolated_python_does_not_answer_and_says_why() {
    let Some(_) = python() else { return };
    let sites = PySites::prepare(8).unwrap();
    let env = sites.env(None);
    let plain = Py::start(&env, &[]);
    let isolated = Py::start(&env, &["-I"]);
    let reports = sites.collect(1, TIMEOUT);
    assert_eq!(
        reports.iter().map(|r| r.pid).collect::<Vec<_>>(),
        vec![plain.pid]
    );
    snapshot(&reports, plain.pid);
    assert_eq!(
        sites.diagnose(isolated.pid),
        Silence::IgnoresPythonpath { flag: 'I' }
    );
    assert!(sites.diagnose(isolated.pid).to_string().contains("-I"));
}

#[test]
fn an_existing_sitecustomize_still_runs() {
    let Some(_) = python() else { return };
    let sites = PySites::prepare(8).unwrap();
    let chain = fixture("site_chain");
    let marker = sites.dir().join("marker");
    let mut env = sites.env(Some(chain.as_os_str()));
    env.push(("LEAKWATCH_CHAIN_MARKER_FILE".into(), marker.clone().into()));
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, sitecustomize; print(os.environ['LEAKWATCH_CHAIN_MARKER'], sitecustomize.__file__)",
        ])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let (value, file) = stdout.trim().split_once(' ').unwrap();
    assert_eq!(value, "chained");
    assert_eq!(
        std::fs::canonicalize(file).unwrap(),
        std::fs::canonicalize(chain.join("sitecustomize.py")).unwrap()
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap().lines().count(), 1);
    // ... and the process is instrumented all the same.
    let py = Py::start(&env, &[]);
    snapshot(&sites.collect(1, TIMEOUT), py.pid);
}

/// Stops a pyd.py daemon on drop (it also exits by itself when idle).
struct Daemon {
    sock: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("python3")
            .arg(fixture("pyd.py"))
            .arg("stop")
            .arg("--sock")
            .arg(&self.sock)
            .output();
    }
}

fn pyd_client(env: &[(OsString, OsString)], sock: &Path, exec: bool) -> u32 {
    let mut cmd = Command::new("python3");
    cmd.arg(fixture("pyd.py"))
        .arg("client")
        .arg("--sock")
        .arg(sock)
        .args(["--leak", "1048576", "--warmup", "4194304"])
        .args(["--scratch", "262144", "--idle-exit", "120"])
        .envs(env.iter().map(|(k, v)| (k, v)));
    if exec {
        cmd.arg("--exec");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    // "OK <requests> <daemon pid>"
    stdout.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// The pantsd case: a daemon its client starts detached (double fork +
/// setsid, as ./pants starts pantsd), forked from the client or exec'd.
fn pantsd_like(exec: bool, frames: usize) {
    let sites = PySites::prepare(frames).unwrap();
    let env = sites.env(None);
    let sock = sites.dir().join("pyd.sock");
    let _daemon = Daemon { sock: sock.clone() };
    let script = fixture("pyd.py");
    let leak = marker_line(&script, "LEAK-SITE");
    let warmup = marker_line(&script, "WARMUP-SITE");

    let mut daemon_pid = None;
    let mut series = Vec::new();
    for run in 1..=4 {
        let pid = pyd_client(&env, &sock, exec);
        assert_eq!(*daemon_pid.get_or_insert(pid), pid, "one daemon");
        let reports = sites.collect(run, TIMEOUT);
        // The clients and the double fork's middle process have exited; at
        // most their first report says so and their endpoints are gone.
        for r in reports.iter().filter(|r| r.pid != pid) {
            assert!(matches!(r.answer, Err(AnswerError::Gone { .. })), "{r:?}");
        }
        let s = snapshot(&reports, pid).clone();
        assert_eq!(s.forked, !exec);
        series.push(s);
    }
    assert_eq!(sites.endpoints(), vec![daemon_pid.unwrap()]);
    let per_request = 1_048_576 + 33;
    for pair in series.windows(2) {
        let (b0, _) = line_bytes(&pair[0], &script, leak).unwrap();
        let (b1, prev) = line_bytes(&pair[1], &script, leak).unwrap();
        assert_eq!((b1 - b0, prev), (per_request, Some(b0)));
        let (w0, _) = line_bytes(&pair[0], &script, warmup).unwrap();
        let (w1, _) = line_bytes(&pair[1], &script, warmup).unwrap();
        assert_eq!(w0, w1, "the warm-up grew once, on the first request");
        // The leak is the site that grew most between runs.
        let grew = |site: &leakwatch::sample::sites::python::LineSite| {
            site.bytes.saturating_sub(site.prev_bytes.unwrap_or(0))
        };
        let top = pair[1]
            .by_line
            .sites
            .iter()
            .max_by_key(|s| grew(s))
            .unwrap();
        assert_eq!(top.frame.line, leak, "{top:?}");
    }
}

#[test]
fn a_pantsd_like_daemon_forked_by_its_client_shows_its_leak_line() {
    if python().is_some() {
        pantsd_like(false, leakwatch::sample::sites::python::DEFAULT_FRAMES);
    }
}

#[test]
fn a_pantsd_like_daemon_exec_by_its_client_shows_its_leak_line() {
    if python().is_some() {
        pantsd_like(true, 16);
    }
}

/// A real prefork pool: gunicorn's master and its workers each answer for
/// themselves, recycled workers (`--max-requests`) leave no endpoint
/// behind, and the request's leak line is found in the workers. Needs an
/// interpreter with gunicorn: `LEAKWATCH_TEST_PYTHON=/venv/bin/python`.
#[test]
#[cfg_attr(
    not(lw_deps),
    ignore = "needs .ci/deps (the venv's gunicorn): bash .ci/test"
)]
fn a_gunicorn_pool_answers_per_worker() {
    let python = std::env::var("LEAKWATCH_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let has_gunicorn = Command::new(&python)
        .args(["-c", "import gunicorn"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_gunicorn,
        "gunicorn is missing for {python}: run `bash .ci/test` (its venv is first on PATH) or \
         set LEAKWATCH_TEST_PYTHON"
    );
    let sites = PySites::prepare(4).unwrap();
    let app_dir = fixture("");
    let http = sites.dir().join("http.sock");
    let mut master = Command::new(&python)
        .args(["-m", "gunicorn", "-w", "2", "--max-requests", "4"])
        .arg("-b")
        .arg(format!("unix:{}", http.display()))
        .arg("pool_app:app")
        .envs(sites.env(Some(app_dir.as_os_str())))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let get = || -> Option<String> {
        let mut s = std::os::unix::net::UnixStream::connect(&http).ok()?;
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut s, &mut answer).ok()?;
        Some(answer)
    };
    let deadline = std::time::Instant::now() + TIMEOUT;
    while get().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "gunicorn did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The master and its two workers: the master starts (and replaces a
    // recycled) worker within a second or so.
    let all_three = |run: u32| {
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            let reports = sites.collect(run, TIMEOUT);
            if reports.iter().filter(|r| r.answer.is_ok()).count() == 3 {
                return reports;
            }
            assert!(std::time::Instant::now() < deadline, "{reports:#?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let first = all_three(1);
    for _ in 0..10 {
        assert!(get().unwrap().contains("kept"));
    }
    let second = all_three(2);
    let _ = Command::new("kill").arg(master.id().to_string()).status();
    let status = master.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut master.stderr.take().unwrap(), &mut stderr).unwrap();

    let master_pid = master.id();
    let workers = |reports: &[SiteReport]| -> Vec<u32> {
        reports
            .iter()
            .filter(|r| r.pid != master_pid)
            .filter(|r| !matches!(r.answer, Err(AnswerError::Gone { .. })))
            .map(|r| {
                let s = snapshot(reports, r.pid);
                assert!(s.forked && s.ppid == master_pid, "{s:?}");
                r.pid
            })
            .collect()
    };
    assert!(!snapshot(&first, master_pid).forked);
    let (before, after) = (workers(&first), workers(&second));
    assert_eq!(
        (before.len(), after.len()),
        (2, 2),
        "{first:#?} {second:#?}"
    );
    assert_ne!(before, after, "11 requests, 4 per worker life: recycled");
    let line = marker_line(&fixture("pool_app.py"), "POOL-LEAK");
    let kept: u64 = after
        .iter()
        .filter_map(|&pid| line_bytes(snapshot(&second, pid), &fixture("pool_app.py"), line))
        .map(|(bytes, _)| bytes)
        .sum();
    assert!(kept >= 100_033, "the leak line in the live workers: {kept}");
    assert!(status.code().is_some(), "{status:?}");
    assert!(!stderr.contains("leakwatch:"), "{stderr}");
    assert!(sites.endpoints().is_empty(), "{:?}", sites.endpoints());
}

/// The bootstrap's own tests (chaining orders, fork, exec, -I/-E/-S,
/// monkey-patched threads, SIGPIPE, unusable directories) in python3.
#[test]
fn the_bootstrap_passes_its_python_tests() {
    let Some(python) = python() else { return };
    let out = Command::new(python)
        .arg(fixture("test_bootstrap.py"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
