//! The command line through the built binary: bad input gets exit 2, one
//! line naming the input and the fix, and no report directory.

use assert_cmd::Command;
use predicates::prelude::*;

fn leakwatch() -> Command {
    Command::cargo_bin("leakwatch").unwrap()
}

/// Runs leakwatch with `args` (plus `--out DIR`), expects exit 2 with a
/// single error line containing every `needles`, and no DIR afterwards.
fn rejects(args: &[&str], needles: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("report");
    let (before, after) = match args.iter().position(|a| *a == "--") {
        Some(i) => (&args[..i], &args[i..]),
        None => (args, &[][..]),
    };
    let assert = leakwatch()
        .args(before)
        .arg("--out")
        .arg(&out)
        .args(after)
        .assert()
        .code(2);
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got:\n{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "{needle:?} not in {stderr:?}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!out.exists(), "a report directory was left behind");
    stderr
}

#[test]
fn a_pid_that_does_not_exist() {
    rejects(
        &["attach", "4000000"],
        &["4000000", "no such process", "ps -p"],
    );
    rejects(
        &["run", "--watch", "4000000", "--", "true"],
        &["--watch 4000000", "no such process"],
    );
    rejects(&["attach", "pantsd"], &["'pantsd' is not a PID", "pgrep"]);
}

#[test]
fn a_command_that_is_not_found() {
    rejects(
        &["run", "--", "no-such-command-xyz", "--flag"],
        &["'no-such-command-xyz' not found in PATH", "give its path"],
    );
    rejects(
        &["run", "--", "./no/such/cmd"],
        &["'./no/such/cmd' does not exist"],
    );
}

#[test]
fn repeat_zero() {
    rejects(
        &["run", "--repeat", "0", "--", "true"],
        &["--repeat 0", "try --repeat 10"],
    );
}

#[test]
fn malformed_durations() {
    rejects(
        &["run", "--settle", "soon", "--", "true"],
        &["--settle 'soon' is not a duration", "'500ms'"],
    );
    rejects(
        &["attach", "1", "--interval", "0s"],
        &["--interval '0s' must be longer than zero"],
    );
    rejects(
        &["attach", "1", "--duration", "5 fortnights"],
        &["--duration '5 fortnights' is not a duration"],
    );
}

#[test]
fn an_existing_report_is_not_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("samples.csv"), "precious").unwrap();
    leakwatch()
        .args(["run", "-n", "1", "--out"])
        .arg(tmp.path())
        .args(["--", "true"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("already holds a leakwatch report"));
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("samples.csv")).unwrap(),
        "precious"
    );
}

/// Failed runs are recorded; a command that never worked is an error (2),
/// with its reports, not a memory verdict a CI step would pass on; one that
/// fails some runs is judged as usual.
#[test]
fn a_failing_command_is_recorded_not_averaged_in_silently() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    leakwatch()
        .args(["run", "-n", "3", "--settle", "0s", "--out"])
        .arg(&out)
        .args(["--", "false"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "3 runs of `false`; FAILED: all 3 (exit:1)",
        ))
        .stderr(predicate::str::contains(
            "no gate; all 3 runs failed (exit:1): fix the command, its memory says nothing; \
             exit 2",
        ));
    let s = crate::common::summary(&out);
    assert_eq!(s["failed_runs"], serde_json::json!([1, 2, 3]));
    assert_eq!(s["run_table"][0]["exit_code"], 1);
    // Every other run fails (a flag file toggled by each run).
    let flag = tmp.path().join("flag");
    let toggle = format!(
        "if [ -e {f} ]; then rm {f}; else touch {f}; exit 1; fi",
        f = flag.display()
    );
    let some = tmp.path().join("some");
    leakwatch()
        .args(["run", "-n", "4", "--settle", "0s", "--out"])
        .arg(&some)
        .args(["--", "sh", "-c", &toggle])
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "FAILED: run 1 (exit:1), run 3 (exit:1)\n",
        ))
        .stderr(predicate::str::contains("; no gate; exit 0"));
    let s = crate::common::summary(&some);
    assert_eq!(s["failed_runs"], serde_json::json!([1, 3]));
}

#[test]
fn report_rebuilds_the_summary_from_samples_csv() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    leakwatch()
        .args(["run", "-n", "3", "--settle", "0s", "--quiet", "--out"])
        .arg(&out)
        .args(["--", "true"])
        .assert()
        .success();
    let live = crate::common::summary(&out);
    let again = tmp.path().join("again");
    leakwatch()
        .args(["report", "--quiet"])
        .arg(out.join("samples.csv"))
        .arg("--out")
        .arg(&again)
        .assert()
        .success();
    assert_eq!(crate::common::summary(&again), live);
}

#[test]
fn report_on_a_directory_without_samples() {
    let tmp = tempfile::tempdir().unwrap();
    leakwatch()
        .arg("report")
        .arg(tmp.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("has no samples.csv"));
}

#[test]
fn help_lists_the_subcommands_and_exit_codes() {
    leakwatch()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("run").and(predicate::str::contains("attach")))
        .stdout(predicate::str::contains("130 Ctrl-C"))
        .stdout(predicate::str::contains("129 SIGHUP"));
}

#[test]
fn a_watched_process_that_exits_is_a_note_and_report_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mut watched = std::process::Command::new("sleep")
        .arg("0.3")
        .spawn()
        .unwrap();
    let out = tmp.path().join("r");
    let assert = leakwatch()
        .args(["run", "-n", "6", "--settle", "100ms", "--watch"])
        .arg(watched.id().to_string())
        .arg("--out")
        .arg(&out)
        .args(["--", "true"])
        .assert()
        .success();
    let _ = watched.wait();
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    assert!(stderr.contains("exited before run"), "{stderr}");
    let live = crate::common::summary(&out);
    assert_eq!(live["notes"].as_array().unwrap().len(), 1, "{live:#}");
    let again = tmp.path().join("again");
    leakwatch()
        .args(["report", "--quiet"])
        .arg(&out)
        .arg("--out")
        .arg(&again)
        .assert()
        .success();
    assert_eq!(crate::common::summary(&again), live);
}

#[test]
fn attach_without_a_target_shows_every_way_to_name_one() {
    rejects(
        &["attach", "--duration", "1s"],
        &[
            "attach needs a target",
            "-p 4242",
            "--name",
            "--cgroup",
            "--unit",
        ],
    );
}

#[test]
fn a_name_where_a_pid_goes_suggests_name() {
    rejects(
        &["attach", "python3"],
        &["'python3' is not a PID", "--name python3"],
    );
    rejects(
        &["attach", "-p", "python3"],
        &["'python3' is not a PID", "--name python3"],
    );
}

#[test]
fn pid_is_also_a_flag() {
    let target = crate::common::Fixture::start(&["steady", "--size", "4MiB"]);
    for flag in ["-p", "--pid"] {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("r");
        leakwatch()
            .args(["attach", flag, &target.pid().to_string()])
            .args([
                "--interval",
                "100ms",
                "--duration",
                "1s",
                "--quiet",
                "--out",
            ])
            .arg(&out)
            .assert()
            .success();
        let s = crate::common::summary(&out);
        assert_eq!(s["mode"], "attach");
        assert_eq!(s["target_pid"], target.pid(), "{s:#}");
    }
    leakwatch()
        .args(["attach", "1", "-p", "1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot be used with"));
}

#[test]
fn a_command_before_the_double_dash_is_told_where_it_goes() {
    rejects(
        &["run", "--repeat", "3", "/bin/true"],
        &[
            "'/bin/true' is not an option",
            "`leakwatch run --repeat 3 -- /bin/true",
        ],
    );
    rejects(
        &["run", "-n", "2", "python3", "-c", "print(1)"],
        &["`leakwatch run -n 2 -- python3 -c 'print(1)'"],
    );
}

/// A size or duration typed as two words is told which option takes one; a
/// command before `--` after a count is still told where it goes.
#[test]
fn a_value_typed_as_two_words_is_told_it_is_one() {
    rejects(
        &[
            "run",
            "-n",
            "3",
            "--max-growth",
            "10",
            "MiB/h",
            "--",
            "true",
        ],
        &["--max-growth takes one word, as in `--max-growth 10MiB/h` (no space)"],
    );
    rejects(
        &["attach", "1", "--duration", "5", "m"],
        &["'m' is not an argument: --duration takes one word"],
    );
    rejects(
        &["run", "--repeat", "3", "true"],
        &["the command goes after `--`"],
    );
}

#[test]
fn a_quoted_command_line_is_told_there_is_no_shell() {
    rejects(
        &["run", "--", "python3 -c pass"],
        &[
            "no shell",
            "drop the quotes (-- python3 -c pass)",
            "sh -c 'python3 -c pass'",
        ],
    );
}

/// A quoted pipeline is not told to drop its quotes: unquoted, the pipe would
/// take leakwatch's own output.
#[test]
fn a_quoted_pipeline_is_told_to_use_a_shell_only() {
    let out = rejects(
        &["run", "--", "ls | wc -l"],
        &["shell syntax", "sh -c 'ls | wc -l'"],
    );
    assert!(!out.contains("drop the quotes"), "{out}");
}

/// The options under one heading of a help text (`Prometheus:`).
fn section<'a>(help: &'a str, heading: &str) -> Vec<&'a str> {
    help.lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect()
}

#[test]
fn attach_help_puts_sampling_flags_under_sampling_not_prometheus() {
    let out = leakwatch().args(["attach", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    let prometheus = section(&help, "Prometheus:").join("\n");
    let sampling = section(&help, "Sampling:").join("\n");
    assert!(prometheus.contains("--serve"), "{help}");
    for flag in ["--interval", "--duration", "--deep-budget"] {
        assert!(
            !prometheus.contains(flag),
            "{flag} under Prometheus:\n{help}"
        );
        assert!(
            sampling.contains(flag),
            "{flag} not under Sampling:\n{help}"
        );
    }
    let target = section(&help, "Target (instead of PID):").join("\n");
    for flag in ["--pid", "--name", "--cgroup", "--unit"] {
        assert!(target.contains(flag), "{flag}:\n{help}");
    }
}

#[test]
fn sizes_refused_with_the_exact_fix() {
    rejects(
        &["run", "--max-growth", "10mb", "--", "true"],
        &["'10mb' is a size, not a rate", "did you mean '10mb/run'"],
    );
    rejects(
        &["run", "--max-peak", "10megs", "--", "true"],
        &["--max-peak '10megs'", "did you mean '10MiB'?", "SI (1000)"],
    );
    rejects(
        &["attach", "1", "--limit", "1,5GiB"],
        &["--limit '1,5GiB'", "did you mean '1.5GiB'?"],
    );
}

/// A local server each run talks to, that `run` does not follow: named in
/// a note with the `--watch` that would judge it; watched, no note.
#[test]
fn a_local_server_the_runs_connect_to_is_named_with_the_watch_to_add() {
    use std::io::{BufRead, BufReader};
    let mut server = std::process::Command::new("python3")
        .args([
            "-c",
            "import socket\n\
             s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(16)\n\
             print(s.getsockname()[1], flush=True)\n\
             while True:\n    c, _ = s.accept(); c.recv(16); c.close()\n",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().to_string();
    let client = format!(
        "import socket; c = socket.create_connection(('127.0.0.1', {port})); c.send(b'hi'); c.recv(1); c.close()"
    );
    let tmp = tempfile::tempdir().unwrap();
    let session = |name: &str, watch: bool| {
        let out = tmp.path().join(name);
        let mut cmd = leakwatch();
        cmd.args(["run", "-n", "3", "--settle", "50ms", "--quiet", "--out"])
            .arg(&out);
        if watch {
            cmd.args(["--watch", &server.id().to_string()]);
        }
        cmd.args(["--", "python3", "-c", &client])
            .assert()
            .success();
        crate::common::summary(&out)["notes"].to_string()
    };
    let unwatched = session("unwatched", false);
    let watched = session("watched", true);
    let _ = server.kill();
    let _ = server.wait();
    let says = format!(
        "each run connected to 127.0.0.1:{port}, served by {} (python3)",
        server.id()
    );
    assert!(unwatched.contains(&says), "{unwatched}");
    assert!(unwatched.contains(&format!("--watch {}", server.id())));
    assert!(!watched.contains("each run connected"), "{watched}");
}
