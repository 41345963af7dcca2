//! What a new user meets first, through the built binary: an
//! exit status a script can trust, files other users can read, an attach
//! that says at once what it does, help and hints for the common mistakes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::*;

/// The recorded run of the fixture daemon that keeps 4 MiB per request.
fn recorded_leak() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/run-leak")
}

/// `leakwatch report <recorded leak> --out OUT ARGS…`.
fn report_leak(out: &Path, args: &[&str]) -> Output {
    leakwatch()
        .arg("report")
        .arg(recorded_leak())
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Text with its line wrapping undone: one space between words.
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---- exit status --------------------------------------------------------

#[test]
fn a_leak_without_a_gate_exits_1_and_exit_zero_gives_0_with_the_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    let o = report_leak(&plain, &["--quiet"]);
    assert_eq!(summary(&plain)["verdict"], "leak");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));

    let zero = tmp.path().join("zero");
    let o = report_leak(&zero, &["--quiet", "--exit-zero"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(summary(&zero)["verdict"], "leak");
    for name in ["report.md", "report.html", "summary.json"] {
        assert!(zero.join(name).is_file(), "{name} not written");
    }
}

#[test]
fn with_a_gate_the_gate_decides_the_exit_status() {
    let tmp = tempfile::tempdir().unwrap();
    // The recorded daemon keeps 4 MiB per run: a 64 MiB/run limit passes.
    let loose = tmp.path().join("loose");
    let o = report_leak(&loose, &["--quiet", "--max-growth", "64MiB/run"]);
    assert_eq!(summary(&loose)["verdict"], "leak");
    assert_eq!(summary(&loose)["gate"]["passed"], true);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let tight = tmp.path().join("tight");
    let o = report_leak(&tight, &["--quiet", "--max-growth", "1MiB/run"]);
    assert_eq!(summary(&tight)["gate"]["passed"], false);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));

    // A peak limit alone is a gate too: it decides, not the leak verdict.
    let peak = tmp.path().join("peak");
    let o = report_leak(&peak, &["--quiet", "--max-peak", "1GiB"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let zero = tmp.path().join("zero");
    let o = report_leak(
        &zero,
        &["--quiet", "--max-growth", "1MiB/run", "--exit-zero"],
    );
    assert_eq!(summary(&zero)["gate"]["passed"], false);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn attach_on_a_growing_process_exits_1_and_on_a_steady_one_0() {
    let tmp = tempfile::tempdir().unwrap();
    let attach = |pid: u32, out: &Path| {
        leakwatch()
            .args(["attach", &pid.to_string(), "--interval", "100ms"])
            .args(["--duration", "3s", "--quiet", "--out"])
            .arg(out)
            .status()
            .unwrap()
    };
    let grower = Fixture::start(&["grow", "--rate", "8MiB"]);
    let steady = Fixture::start(&["steady", "--size", "8MiB"]);
    let (grows, holds) = (tmp.path().join("grows"), tmp.path().join("holds"));
    let grows_status = {
        let out = grows.clone();
        let pid = grower.pid();
        std::thread::spawn(move || attach(pid, &out))
    };
    let holds_status = attach(steady.pid(), &holds);
    let grows_status = grows_status.join().unwrap();
    assert_eq!(summary(&grows)["verdict"], "leak");
    assert_eq!(grows_status.code(), Some(1));
    assert_ne!(summary(&holds)["verdict"], "leak");
    assert_eq!(holds_status.code(), Some(0));
}

#[test]
fn help_states_the_exit_statuses_and_the_opt_out() {
    let o = leakwatch().arg("--help").output().unwrap();
    let help = words(&String::from_utf8_lossy(&o.stdout));
    assert!(
        help.contains("1 a leak verdict when no gate is given"),
        "{help}"
    );
    assert!(help.contains("--exit-zero"), "{help}");
    let o = leakwatch().args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--exit-zero"), "{help}");
    let o = leakwatch()
        .args(["run", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

// ---- file modes ---------------------------------------------------------

/// Whether this test can switch to user `nobody` (root and runuser); in CI
/// it must.
fn can_be_nobody() -> bool {
    let root = nix_uid_is_root();
    let runuser = Command::new("runuser")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !(root && runuser) {
        crate::common::missing(
            "root or runuser (util-linux)",
            "reading as nobody needs both",
        );
    }
    true
}

fn nix_uid_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// leakwatch with `args` under `umask`, through sh.
fn under_umask(umask: &str, args: &[&std::ffi::OsStr]) -> Output {
    Command::new("sh")
        .args(["-c", &format!("umask {umask} && exec \"$@\""), "sh"])
        .arg(env!("CARGO_BIN_EXE_leakwatch"))
        .args(args)
        .stdout(Stdio::null())
        .output()
        .unwrap()
}

/// Every output of a session, a baseline, JUnit and an export.
fn every_output(umask: &str, dir: &Path) -> Vec<PathBuf> {
    let out = dir.join("r");
    let (junit, baseline, prom) = (
        dir.join("junit.xml"),
        dir.join("baseline.json"),
        dir.join("lw.prom"),
    );
    let o = under_umask(
        umask,
        &[
            "report".as_ref(),
            recorded_leak().as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
            "--quiet".as_ref(),
            "--max-growth".as_ref(),
            "64MiB/run".as_ref(),
            "--junit".as_ref(),
            junit.as_os_str(),
            "--save-baseline".as_ref(),
            baseline.as_os_str(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = under_umask(
        umask,
        &[
            "export".as_ref(),
            out.as_os_str(),
            "--out".as_ref(),
            prom.as_os_str(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.extend([junit, baseline, prom]);
    files.sort();
    for ext in ["md", "html", "json", "svg", "png"] {
        assert!(
            files
                .iter()
                .any(|f| f.extension().is_some_and(|e| e == ext)),
            "no .{ext} among {files:?}"
        );
    }
    files
}

#[test]
#[cfg_attr(not(lw_deps), ignore = "needs root: bash .ci/test as root")]
fn outputs_honour_the_umask_and_are_readable_by_another_user() {
    if !can_be_nobody() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // The temp dir itself is 0700; nobody must be able to reach the files.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for file in every_output("022", tmp.path()) {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644, "{} is {mode:o}", file.display());
        let cat = Command::new("runuser")
            .args(["-u", "nobody", "--", "cat"])
            .arg(&file)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(
            cat.status.success(),
            "nobody cannot read {}: {}",
            file.display(),
            stderr(&cat)
        );
    }
    // A stricter umask is honoured too: nothing wider than asked.
    let private = tmp.path().join("private");
    std::fs::create_dir(&private).unwrap();
    for file in every_output("077", &private) {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is {mode:o}", file.display());
    }
}

#[test]
fn an_unwritable_junit_path_is_named_as_given() {
    let tmp = tempfile::tempdir().unwrap();
    let junit = tmp.path().join("no/such/dir/junit.xml");
    let o = report_leak(
        &tmp.path().join("r"),
        &["--quiet", "--junit", junit.to_str().unwrap()],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(junit.to_str().unwrap()), "{err}");
    assert!(!err.contains(".leakwatch-"), "an internal name: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A leaking Python process attached without --py-sites: the next step is
/// `attach --py-sites PID`, which enters it as it runs, not `run`, which
/// would need it restarted.
#[test]
fn a_python_leak_found_attached_points_to_attach_py_sites() {
    let tmp = tempfile::tempdir().unwrap();
    let script = "import time\nkept = []\nwhile True:\n    kept.append(bytearray(1 << 20))\n    \
                  time.sleep(0.1)\n";
    let mut python = match Command::new("python3").args(["-c", script]).spawn() {
        Ok(child) => child,
        Err(e) => missing(&format!("python3 ({e})"), "bash .ci/deps installs it"),
    };
    let pid = python.id().to_string();
    // `python3` may be a launcher (pyenv's shell scripts) that becomes
    // Python by exec: wait until the program running is the interpreter.
    let exe = format!("/proc/{pid}/exe");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let is_python = |p: PathBuf| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("python"))
    };
    while !std::fs::read_link(&exe).is_ok_and(is_python) {
        assert!(
            std::time::Instant::now() < deadline,
            "{pid} never became python"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = leakwatch()
        .args(["attach", &pid, "--duration", "6s", "--out"])
        .arg(tmp.path().join("r"))
        .output()
        .unwrap();
    let _ = python.kill();
    let _ = python.wait();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let next = err
        .lines()
        .find(|l| l.starts_with("next: "))
        .unwrap_or_default();
    assert!(
        next.contains(&format!("`leakwatch attach --py-sites {pid}` (no restart)")),
        "{err}"
    );
    assert!(!next.contains("run --py-sites"), "{err}");
}

// ---- sessions started together ----------------------------------------------

/// Sessions started in the same second without --out (two CI jobs, two
/// terminals) each get a directory of their own under reports/: none fails
/// on another's samples.csv.
#[test]
fn sessions_started_together_each_get_their_own_reports_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let target = Fixture::start(&["steady", "--size", "4MiB"]);
    let sessions: Vec<_> = (0..4)
        .map(|_| {
            leakwatch()
                .current_dir(tmp.path())
                .args([
                    "attach",
                    &target.pid().to_string(),
                    "--duration",
                    "2s",
                    "-q",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in sessions {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{:?}: {err}", out.status);
    }
    let dirs: Vec<PathBuf> = std::fs::read_dir(tmp.path().join("reports"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 4, "{dirs:?}");
    for dir in &dirs {
        assert!(dir.join("summary.json").is_file(), "{}", dir.display());
    }
}

// ---- attach says at once what it does ------------------------------------

/// The first line of attach, on a pipe (not a terminal): what is sampled,
/// for how long, where the reports go, how to stop, within a second.
#[test]
fn attach_says_what_it_samples_within_a_second_without_a_terminal() {
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let target = Fixture::start(&["steady", "--size", "4MiB"]);
    let out = tmp.path().join("r");
    for duration in [Some("30s"), None] {
        let mut cmd = leakwatch();
        cmd.args(["attach", &target.pid().to_string(), "--out"])
            .arg(&out)
            .stderr(Stdio::piped());
        if let Some(d) = duration {
            cmd.args(["--duration", d]);
        }
        let started = std::time::Instant::now();
        let mut child = cmd.spawn().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stderr).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(std::time::Duration::from_secs(5));
        let took = started.elapsed();
        nix_interrupt(child.id());
        let status = child.wait().unwrap();
        let line = line.expect("no stderr line within 5 s");
        assert!(
            took.as_secs_f64() < 1.0,
            "first line after {took:?}: {line}"
        );
        let pid = target.pid().to_string();
        let until = match duration {
            Some(_) => "for 30.0s",
            None => "until it exits",
        };
        for needle in [
            pid.as_str(),
            "leakwatch-fixt",
            "1 process every",
            "every 1.0s",
            until,
            out.to_str().unwrap(),
            "Ctrl-C",
        ] {
            assert!(line.contains(needle), "{needle:?} not in {line:?}");
        }
        // Ctrl-C: 130, and the reports are still written.
        assert_eq!(status.code(), Some(130));
        assert!(out.join("report.md").is_file());
        std::fs::remove_dir_all(&out).unwrap();
    }
}

fn nix_interrupt(pid: u32) {
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

// ---- sizes --------------------------------------------------------------

/// SI and IEC in any case are accepted, and the gate prints what it read.
#[test]
fn the_gate_prints_the_limit_it_read() {
    let tmp = tempfile::tempdir().unwrap();
    for (typed, read) in [
        ("10mb/run", "limit 9.54 MiB/run (10mb/run"),
        ("10MiB/RUN", "limit 10.0 MiB/run (10MiB/RUN"),
        ("10m/run", "limit 10.0 MiB/run (10m/run"),
    ] {
        let out = tmp.path().join(typed.replace('/', "-"));
        let o = report_leak(&out, &["--max-growth", typed]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert!(err.contains(read), "{read:?} not in {err}");
    }
}

// ---- machine-readable and CI-friendly ------------------------------------

#[test]
fn json_prints_summary_json_on_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let o = report_leak(&out, &["--json", "--quiet"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let printed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(printed, summary(&out));
    assert!(o.stderr.is_empty(), "--quiet: {}", stderr(&o));
}

#[test]
fn the_last_line_is_one_line_for_ci_logs_and_a_leak_says_what_next() {
    let tmp = tempfile::tempdir().unwrap();
    let o = report_leak(&tmp.path().join("r"), &[]);
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    let last = lines.last().unwrap();
    assert!(
        last.starts_with("leakwatch: LEAK survivors anon +4.00 MiB/run (95% CI "),
        "{err}"
    );
    assert!(last.ends_with("; no gate; exit 1"), "{err}");
    let next = lines[lines.len() - 2];
    assert!(
        next.starts_with("next: ") && next.contains("--max-growth"),
        "{err}"
    );
    // The hint is a gate that fails the run it was printed for.
    let hint: Vec<&str> = next
        .split("--max-growth ")
        .nth(1)
        .unwrap()
        .split(" fails this run")
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let mut gate = vec!["--max-growth"];
    gate.extend(&hint);
    let o = report_leak(&tmp.path().join("hint"), &gate);
    assert!(
        stderr(&o)
            .lines()
            .last()
            .unwrap()
            .ends_with("; gate FAILED; exit 1"),
        "{hint:?}: {}",
        stderr(&o)
    );
    // With a gate: the gate in the line, no gate hint.
    let o = report_leak(&tmp.path().join("g"), &["--max-growth", "64MiB/run"]);
    let err = stderr(&o);
    assert!(
        err.lines()
            .last()
            .unwrap()
            .ends_with("; gate passed; exit 0"),
        "{err}"
    );
    assert!(!err.contains("next: in CI"), "{err}");
    // No leak, no next step.
    let out = tmp.path().join("true");
    let o = leakwatch()
        .args(["run", "-n", "3", "--settle", "0s", "--out"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_ne!(summary(&out)["verdict"], "leak");
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("next:"), "{err}");
    assert!(
        err.lines().last().unwrap().starts_with("leakwatch: "),
        "{err}"
    );
}

/// On a terminal (script(1) gives one) the verdict is coloured, unless
/// NO_COLOR; through a pipe never.
#[test]
fn colour_on_a_terminal_unless_no_color() {
    if Command::new("script").arg("--version").output().is_err() {
        crate::common::missing("script(1)", "it gives a terminal; apt-get install bsdutils");
    }
    let tmp = tempfile::tempdir().unwrap();
    let on_terminal = |name: &str, no_color: bool| {
        let line = format!(
            "{} report {} --out {}",
            env!("CARGO_BIN_EXE_leakwatch"),
            recorded_leak().display(),
            tmp.path().join(name).display()
        );
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &line, "/dev/null"])
            .env_remove("NO_COLOR");
        if no_color {
            cmd.env("NO_COLOR", "1");
        }
        String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned()
    };
    let coloured = on_terminal("tty", false);
    assert!(
        coloured.contains("leakwatch: \x1b[1;31mLEAK\x1b[0m"),
        "{coloured}"
    );
    let plain = on_terminal("no-color", true);
    assert!(plain.contains("leakwatch: LEAK survivors"), "{plain}");
    assert!(!plain.contains('\x1b'), "{plain}");
    let piped = stderr(&report_leak(&tmp.path().join("pipe"), &[]));
    assert!(!piped.contains('\x1b'), "{piped}");
}

#[test]
fn report_out_can_be_reported_again_and_a_missing_input_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("first");
    report_leak(&first, &["--quiet"]);
    assert!(first.join("samples.csv").is_file());
    let second = tmp.path().join("second");
    let o = leakwatch()
        .args(["report", "--quiet"])
        .arg(&first)
        .arg("--out")
        .arg(&second)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(summary(&second), summary(&first));
    // Again into the same directory: the same samples, no complaint.
    let o = leakwatch()
        .args(["report", "--quiet"])
        .arg(&first)
        .arg("--out")
        .arg(&second)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // Another session's samples.csv there is not overwritten.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("samples.csv"), "precious").unwrap();
    let o = report_leak(&other, &["--quiet"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(other.join("samples.csv")).unwrap(),
        "precious"
    );

    let o = leakwatch()
        .args(["report", "/no/such/dir"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("/no/such/dir does not exist"),
        "{}",
        stderr(&o)
    );
}
