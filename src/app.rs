//! Orchestration: options → sampling into samples.csv → analysis → reports.
//! The only place that uses anyhow; the stages below return typed errors.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::{Cli, Command};
use crate::error::Exit;
use crate::fit::{self, Analysis, FitOptions};
use crate::options::{AttachOptions, Output, ReportOptions, RunOptions};
use crate::report;
use crate::sample::reaper::Interrupt;
use crate::sample::{self, Outcome, Progress, SampleError};
use crate::series::store::{self, SampleWriter};

pub fn run(cli: Cli) -> Result<Exit> {
    match cli.command {
        Command::Run(args) => {
            let opts = RunOptions::from_args(&args)?;
            let output = opts.output.clone();
            sample_then_report(&output, &opts.fit, |writer, interrupt, progress| {
                sample::run::run(&opts, writer, interrupt, progress)
            })
        }
        Command::Attach(args) => {
            let opts = AttachOptions::from_args(&args)?;
            let output = opts.output.clone();
            sample_then_report(&output, &opts.fit, |writer, interrupt, progress| {
                sample::attach::attach(&opts, writer, interrupt, progress)
            })
        }
        Command::Report(args) => {
            let opts = ReportOptions::from_args(&args)?;
            let rows = store::read_samples(&opts.samples)?;
            let analysis = fit::analyse(&rows, &opts.fit);
            fs::create_dir_all(&opts.output.dir)
                .with_context(|| format!("cannot create {}", opts.output.dir.display()))?;
            finish(&analysis, &opts.output)
        }
    }
}

/// Creates the output directory, samples into it, then analyses what is on
/// disk. Reports are written even when sampling failed part-way or was
/// interrupted; a directory that never got a sample is removed again.
fn sample_then_report(
    output: &Output,
    fit_options: &FitOptions,
    sampler: impl FnOnce(&mut SampleWriter, &Interrupt, &Progress) -> Result<Outcome, SampleError>,
) -> Result<Exit> {
    let interrupt = Interrupt::install().context("cannot install the Ctrl-C handler")?;
    let created = !output.dir.exists();
    fs::create_dir_all(&output.dir)
        .with_context(|| format!("cannot create --out {}", output.dir.display()))?;
    let samples = output.dir.join("samples.csv");
    let mut writer = SampleWriter::create(&samples)?;
    let progress = Progress {
        quiet: output.quiet,
    };

    let result = sampler(&mut writer, &interrupt, &progress);
    let rows_written = writer.rows_written();
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
    let exit = match &result {
        Ok(outcome) => {
            analysis.notes.extend(outcome.notes.iter().cloned());
            analysis.interrupted = outcome.interrupted;
            finish(&analysis, output)?
        }
        Err(e) => {
            analysis.notes.push(format!("sampling stopped early: {e}"));
            finish(&analysis, output)?;
            Exit::Error
        }
    };
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

/// Writes the reports and prints the human summary.
fn finish(analysis: &Analysis, output: &Output) -> Result<Exit> {
    report::write_all(analysis, &output.dir)?;
    if !output.quiet {
        eprint!("{}", report::text::render(analysis));
        eprintln!("report: {}", display_dir(&output.dir));
    }
    Ok(Exit::Ok)
}

fn display_dir(dir: &Path) -> String {
    format!("{}/", dir.display())
}
