//! Orchestration: options → sampling into samples.csv → analysis → reports.
//! The only place that uses anyhow; the stages below return typed errors.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::{Cli, Command};
use crate::error::Exit;
use crate::fit::{self, Analysis, FitOptions};
use crate::gate::{self, GateOn, GateResult, baseline, junit};
use crate::options::{AttachOptions, CheckOptions, GateSetup, Output, ReportOptions, RunOptions};
use crate::report;
use crate::report::json::Summary;
use crate::sample::reaper::Interrupt;
use crate::sample::{self, Outcome, Progress, SampleError};
use crate::series::store::{self, Row, SampleWriter};

pub fn run(cli: Cli) -> Result<Exit> {
    match cli.command {
        Command::Run(args) => {
            let opts = RunOptions::from_args(&args)?;
            let output = opts.output.clone();
            sample_then_report(
                &output,
                Some(u64::from(opts.repeat)),
                &opts.fit,
                &opts.gate,
                |writer, interrupt, progress| sample::run::run(&opts, writer, interrupt, progress),
            )
        }
        Command::Attach(args) => {
            let opts = AttachOptions::from_args(&args)?;
            let output = opts.output.clone();
            sample_then_report(
                &output,
                None,
                &opts.fit,
                &opts.gate,
                |writer, interrupt, progress| {
                    sample::attach::attach(&opts, writer, interrupt, progress)
                },
            )
        }
        Command::Report(args) => {
            let opts = ReportOptions::from_args(&args)?;
            let rows = store::read_samples(&opts.samples)?;
            let mut analysis = fit::analyse(&rows, &opts.fit);
            fs::create_dir_all(&opts.output.dir)
                .with_context(|| format!("cannot create {}", opts.output.dir.display()))?;
            finish(&mut analysis, &rows, &opts.output, &opts.gate)
        }
        Command::Check(args) => check(&CheckOptions::from_args(&args)?),
    }
}

/// Creates the output directory, samples into it, then analyses what is on
/// disk. Reports are written even when sampling failed part-way or was
/// interrupted; a directory that never got a sample is removed again.
fn sample_then_report(
    output: &Output,
    total_runs: Option<u64>,
    fit_options: &FitOptions,
    gate: &GateSetup,
    sampler: impl FnOnce(&mut SampleWriter, &Interrupt, &Progress) -> Result<Outcome, SampleError>,
) -> Result<Exit> {
    let interrupt = Interrupt::install().context("cannot install the Ctrl-C handler")?;
    let created = !output.dir.exists();
    fs::create_dir_all(&output.dir)
        .with_context(|| format!("cannot create --out {}", output.dir.display()))?;
    let samples = output.dir.join("samples.csv");
    let mut writer = SampleWriter::create(&samples)?;
    let progress = Progress::new(output.quiet, total_runs);
    let result = sampler(&mut writer, &interrupt, &progress);
    progress.finish();
    let rows_written = writer.rows_written();
    if rows_written > 0 {
        // Notes and the interruption go into samples.csv too, so that
        // `leakwatch report` rebuilds exactly these reports.
        let (notes, interrupted) = match &result {
            Ok(o) => (o.notes.clone(), o.interrupted),
            Err(e) => (vec![format!("sampling stopped early: {e}")], false),
        };
        let mut rows: Vec<Row> = notes.iter().map(|n| store::note_row("note", n)).collect();
        if interrupted {
            rows.push(store::note_row("interrupted", ""));
        }
        writer.write_batch(&rows)?;
    }
    drop(writer);

    if rows_written == 0 {
        let _ = fs::remove_file(&samples);
        if created {
            let _ = fs::remove_dir(&output.dir);
        }
        return match result {
            Err(e) => Err(e.into()),
            Ok(o) if o.interrupted => Ok(Exit::Interrupted),
            Ok(_) => anyhow::bail!("no samples were taken; nothing to report"),
        };
    }

    let rows = store::read_samples(&samples)?;
    let mut analysis = fit::analyse(&rows, fit_options);
    // Reports first, whatever happened; then the sampling error, if any.
    let exit = finish(&mut analysis, &rows, output, gate)?;
    match result {
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "sampling stopped early; the {} rows taken are in {}",
            rows.len(),
            samples.display()
        ))),
        Ok(_) if analysis.interrupted => Ok(Exit::Interrupted),
        Ok(_) => Ok(exit),
    }
}

/// Judges the gate, writes the reports (always, even when the gate cannot
/// be judged) and the CI outputs, and prints the human summary.
fn finish(
    analysis: &mut Analysis,
    rows: &[Row],
    output: &Output,
    setup: &GateSetup,
) -> Result<Exit> {
    let judged = gate::evaluate(analysis, &setup.gate);
    analysis.gate = judged.as_ref().ok().cloned().flatten();
    report::write_all(analysis, rows, &output.dir)?;
    let judged = judged?;
    if let Some(path) = &setup.save_baseline {
        fs::copy(output.dir.join("summary.json"), path)
            .with_context(|| format!("cannot write --save-baseline {}", path.display()))?;
    }
    if !output.quiet {
        eprint!("{}", report::text::render(analysis));
        if let Some(result) = &judged {
            eprint!("{}", gate_text(result));
        }
        eprintln!("report: {}", display_dir(&output.dir));
    }
    let verdict_md = format!(
        "### leakwatch: {}\n\n```\n{}```\n",
        analysis.verdict.as_str(),
        report::text::render(analysis)
    );
    ci_outputs(judged.as_ref(), setup.junit.as_deref(), &verdict_md)?;
    Ok(match judged {
        Some(result) if !result.passed => Exit::GateFailed,
        _ => Exit::Ok,
    })
}

/// `gate: FAILED` / `gate: passed` and one line per check.
fn gate_text(result: &GateResult) -> String {
    let mut out = format!(
        "gate: {} ({} rule)\n",
        if result.passed { "passed" } else { "FAILED" },
        match result.rule {
            gate::Rule::Ci => "95% CI",
            gate::Rule::Slope => "slope",
        }
    );
    for c in &result.checks {
        out.push_str(&format!(
            "  [{}] {}\n",
            if c.passed { "ok" } else { "FAIL" },
            c.message
        ));
    }
    out
}

/// JUnit XML (when asked) and the GitHub step summary (when its variable is set).
fn ci_outputs(
    result: Option<&GateResult>,
    junit_path: Option<&Path>,
    verdict_md: &str,
) -> Result<()> {
    let empty = GateResult::from_checks(gate::Rule::Ci, Vec::new());
    let result_or_empty = result.unwrap_or(&empty);
    if let Some(path) = junit_path {
        fs::write(path, junit::render(result_or_empty))
            .with_context(|| format!("cannot write --junit {}", path.display()))?;
    }
    if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
        let mut md = verdict_md.to_string();
        if let Some(result) = result {
            md.push_str(&format!(
                "\n**Gate: {}**\n\n| | check |\n|---|---|\n",
                if result.passed { "passed" } else { "FAILED" }
            ));
            for c in &result.checks {
                md.push_str(&format!(
                    "| {} | {} |\n",
                    if c.passed { "✅" } else { "❌" },
                    c.message.replace('|', "\\|")
                ));
            }
        }
        use std::io::Write;
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(md.as_bytes()))
            .with_context(|| {
                format!(
                    "cannot append to GITHUB_STEP_SUMMARY {}",
                    Path::new(&path).display()
                )
            })?;
    }
    Ok(())
}

fn read_summary(path: &Path) -> Result<Summary> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a leakwatch summary.json (schema_version 1); rebuild it with `leakwatch report`",
            path.display()
        )
    })
}

/// `leakwatch check`: the current summary against a baseline.
fn check(opts: &CheckOptions) -> Result<Exit> {
    let current = read_summary(&opts.current)?;
    let base = read_summary(&opts.baseline)?;
    let targets = if !opts.gate_on.is_empty() {
        opts.gate_on.clone()
    } else {
        baseline_targets(&base)
    };
    let result = baseline::compare(&current, &base, opts.tolerance, &targets);
    if !opts.quiet {
        eprint!("{}", gate_text(&result));
    }
    let md = format!(
        "### leakwatch check against {}: {}\n",
        opts.baseline.display(),
        if result.passed { "passed" } else { "FAILED" }
    );
    ci_outputs(Some(&result), opts.junit.as_deref(), &md)?;
    Ok(if result.passed {
        Exit::Ok
    } else {
        Exit::GateFailed
    })
}

/// What a baseline gated, else its first followed scope's PSS, else the
/// command's RSS.
fn baseline_targets(base: &Summary) -> Vec<GateOn> {
    let mut targets: Vec<GateOn> = Vec::new();
    for c in base.gate.iter().flat_map(|g| g.checks.iter()) {
        if let Some(metric) = crate::series::Metric::from_name(&c.metric)
            && !c.name.starts_with("peak")
        {
            let on = GateOn {
                series: c.series.clone(),
                metric,
            };
            if !targets.contains(&on) {
                targets.push(on);
            }
        }
    }
    if targets.is_empty() {
        let pick = base
            .series
            .iter()
            .find(|s| s.name != "command" && s.metric == "pss_bytes")
            .or_else(|| {
                base.series
                    .iter()
                    .find(|s| s.name != "command" && s.metric == "rss_bytes")
            });
        targets.push(match pick {
            Some(s) => GateOn {
                series: s.name.clone(),
                metric: crate::series::Metric::from_name(&s.metric)
                    .unwrap_or(crate::series::Metric::RssBytes),
            },
            None => GateOn {
                series: "command".into(),
                metric: crate::series::Metric::RssBytes,
            },
        });
    }
    targets
}

fn display_dir(dir: &Path) -> String {
    format!("{}/", dir.display())
}
