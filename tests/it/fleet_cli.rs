//! The CLI conventions of issue 12: `export --format openmetrics`, shell
//! completions and man pages generated from the clap definition, NO_COLOR,
//! `check --json`.

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
    assert!(status.success());
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
    assert_eq!(exported, fit["slope"].as_f64().unwrap());
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
    assert!(o.status.success(), "{o:?}");
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
