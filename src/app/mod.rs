//! Orchestration: options → the environment resolved → sampling into
//! samples.csv → analysis → gate → reports. The only place that uses anyhow;
//! the stages below return typed errors. `fleet` holds the commands of
//! Prometheus in and out, completions and man pages.

mod fleet;
mod serve;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::check;
use crate::cli::{Cli, Command};
use crate::console;
use crate::console::Progress;
use crate::error::Exit;
use crate::fit::{self, Analysis, FitOptions, Verdict};
use crate::gate::{self, GateResult};
use crate::options::{
    AnalyzeOptions, AttachOptions, CheckOptions, ExportOptions, GateSetup, Output, ReportOptions,
    RunOptions,
};
use crate::output;
use crate::report::{self, ci, junit};
use crate::sample::sites::native::NativeAttached;
use crate::sample::sites::python::attach::PyAttached;
use crate::sample::{self, Interrupt, Outcome, SampleError};
use crate::series::{self, Samples};
use crate::store::{self, Row, SampleWriter, SessionEvent};

pub fn run(cli: Cli) -> Result<Exit> {
    match cli.command {
        Command::Run(args) => {
            let opts = RunOptions::from_args(&args)?;
            // `--watch PID --py-sites` enters the watched processes here: a
            // Ctrl-C meanwhile waits until gdb has left them, then dropping
            // what was prepared detaches the bootstrap.
            let entering = Interrupt::install().context("cannot install the Ctrl-C handler")?;
            let mut prepared = sample::prepare(&opts.plan)?;
            if let Some(signal) = entering.signal() {
                drop(prepared);
                eprintln!(
                    "leakwatch: interrupted while preparing the session; the watched processes \
                     run on as before; nothing was run or sampled"
                );
                return Ok(Exit::Interrupted(signal));
            }
            check_outputs(&opts.gate)?;
            let dir = new_out_dir(&opts.output)?;
            sample_then_report(
                &dir,
                &opts.output,
                Some(u64::from(opts.plan.repeat)),
                &opts.fit,
                &opts.gate,
                |writer, interrupt, progress| {
                    sample::run(&mut prepared, writer, interrupt, progress)
                },
            )
        }
        Command::Attach(args) => {
            let opts = AttachOptions::from_args(&args)?;
            let plan = sample::check_target(&opts.plan)?;
            check_outputs(&opts.gate)?;
            // The shim and the bootstrap go in before any output exists: a
            // refusal leaves nothing behind. A Ctrl-C meanwhile waits until
            // gdb has left the process, then undoes what went in.
            let entering = Interrupt::install().context("cannot install the Ctrl-C handler")?;
            let mut native = match (plan.native_sites, &plan.target) {
                (Some(interval), sample::Target::Pid(pid)) => Some(
                    NativeAttached::inject(*pid, interval)
                        .map_err(sample::ResolveError::NativeSites)?,
                ),
                _ => None,
            };
            let mut python = match (plan.py_sites, &plan.target) {
                (Some(frames), sample::Target::Pid(pid)) if !entering.is_set() => {
                    Some(PyAttached::inject(*pid, frames).map_err(sample::ResolveError::PyAttach)?)
                }
                _ => None,
            };
            if let Some(signal) = entering.signal() {
                return Ok(interrupted_entering(
                    match plan.target {
                        sample::Target::Pid(pid) => pid,
                        _ => 0,
                    },
                    native.as_ref(),
                    python.as_ref(),
                    signal,
                ));
            }
            let server = fleet::serve(opts.serve.as_ref(), &opts.fit, opts.output.quiet)?;
            let dir = new_out_dir(&opts.output)?;
            sample_then_report(
                &dir,
                &opts.output,
                None,
                &opts.fit,
                &opts.gate,
                |writer, interrupt, progress| {
                    if let Some(server) = &server {
                        writer.set_tap(server.tap());
                    }
                    sample::attach(
                        &plan,
                        native.as_mut(),
                        python.as_mut(),
                        writer,
                        interrupt,
                        progress,
                    )
                },
            )
        }
        Command::Report(args) => report_again(&ReportOptions::from_args(&args)?),
        Command::Check(args) => check_baseline(&CheckOptions::from_args(&args)?),
        Command::Analyze(args) => fleet::analyze(&AnalyzeOptions::from_args(&args)?),
        Command::Export(args) => fleet::export(&ExportOptions::from_args(&args)?),
        Command::Completions(args) => fleet::completions(&args.shell),
        Command::Man(args) => fleet::man(args.out.as_deref()),
    }
}

/// A signal came while gdb was in the process (`attach --native-sites`,
/// `--py-sites`): the bootstrap detaches and the shim stops sampling, and
/// the session ends before it began, saying so.
fn interrupted_entering(
    pid: u32,
    native: Option<&NativeAttached>,
    python: Option<&PyAttached>,
    signal: i32,
) -> Exit {
    let mut undone = Vec::new();
    if let Some(native) = native {
        native.stop();
        undone.push("the shim stopped sampling (it stays loaded, forwarding)");
    }
    if let Some(python) = python {
        python.detach();
        undone.push("the Python bootstrap detached");
    }
    let undone = match undone.is_empty() {
        true => "nothing had gone in yet".to_string(),
        false => undone.join(", "),
    };
    eprintln!(
        "leakwatch: interrupted while entering process {pid} (the signal waited until gdb had left \
         it); it runs on as before: {undone}; nothing was sampled"
    );
    Exit::Interrupted(signal)
}

/// Files written at the end of a session (`--junit`, `--save-baseline`)
/// are checked before it starts: a typo must not cost a whole session.
pub(crate) fn check_outputs(gate: &GateSetup) -> Result<()> {
    for (flag, path) in [
        ("--junit", &gate.junit),
        ("--save-baseline", &gate.save_baseline),
    ] {
        if let Some(path) = path {
            output::check_writable(path).with_context(|| format!("{flag} {}", path.display()))?;
        }
    }
    Ok(())
}

/// The directory a new session writes to: `--out` (which must not hold a
/// report already, nor be a link), or a new `reports/<timestamp>/`.
pub(crate) fn new_out_dir(output: &Output) -> Result<PathBuf> {
    let Some(dir) = &output.dir else {
        return default_out_dir();
    };
    output::refuse_symlink(dir).context("--out")?;
    if dir.join("samples.csv").exists() {
        bail!(
            "--out {} already holds a leakwatch report (samples.csv); choose another \
             directory or remove it",
            dir.display()
        );
    }
    Ok(dir.clone())
}

/// `reports/<timestamp>/`, made here: of two sessions started in the same
/// second (two CI jobs, two terminals) the first to create it has it, and
/// the other makes `<timestamp>-2` (then `-3` …).
fn default_out_dir() -> Result<PathBuf> {
    let stamp = chrono::Local::now().format("%Y-%m-%dT%H-%M-%S").to_string();
    let base = PathBuf::from("reports");
    // `reports` may be a link the user made to keep reports elsewhere.
    fs::create_dir_all(&base)
        .with_context(|| format!("cannot create {}; give --out DIR", base.display()))?;
    let mut n = 1;
    loop {
        let dir = match n {
            1 => base.join(&stamp),
            _ => base.join(format!("{stamp}-{n}")),
        };
        if output::claim_dir(&dir).context("the default output directory (or give --out DIR)")? {
            return Ok(dir);
        }
        n += 1;
    }
}

/// The samples.csv that `report` and `export` read: the file, or the one in
/// the directory; a path that does not exist says so.
pub(crate) fn input_samples(input: &Path) -> Result<PathBuf> {
    if !input.exists() {
        bail!(
            "{} does not exist; give a leakwatch output directory (reports/<timestamp>/) or \
             its samples.csv",
            input.display()
        );
    }
    file_or_in_dir(input, "samples.csv").with_context(|| {
        format!(
            "{} has no samples.csv; give a leakwatch output directory or a samples.csv file",
            input.display()
        )
    })
}

/// A directory given for a file: `DIR/name`; else the path itself, which
/// must be a file.
pub(crate) fn file_or_in_dir(path: &Path, name: &str) -> Option<PathBuf> {
    let file = if path.is_dir() {
        path.join(name)
    } else {
        path.to_path_buf()
    };
    file.is_file().then_some(file)
}

/// `leakwatch report`: the analysis again from a samples.csv.
fn report_again(opts: &ReportOptions) -> Result<Exit> {
    let samples = input_samples(&opts.input)?;
    let home = samples
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let dir = opts.output.dir.clone().unwrap_or_else(|| home.clone());
    check_outputs(&opts.gate)?;
    let analysis = fit::analyse(read(&samples)?, &opts.fit);
    output::create_dir(&dir)?;
    // A directory given with --out is one `report` can read again: it gets
    // its samples.csv too (without --out the reports go beside the input).
    if opts.output.dir.is_some() {
        output::copy_samples(&samples, &dir.join("samples.csv")).context("--out")?;
    }
    let gate = fleet::gate_every_series(&analysis, &opts.gate);
    finish(&analysis, &dir, &opts.output, &gate, None)
}

/// Creates the output directory, samples into it, then analyses what is on
/// disk. Reports are written even when sampling failed part-way or was
/// interrupted; a directory that never got a sample is removed again.
fn sample_then_report(
    dir: &Path,
    output: &Output,
    total_runs: Option<u64>,
    fit_options: &FitOptions,
    gate: &GateSetup,
    sampler: impl FnOnce(&mut SampleWriter, &Interrupt, &Progress) -> Result<Outcome, SampleError>,
) -> Result<Exit> {
    let interrupt = Interrupt::install().context("cannot install the Ctrl-C handler")?;
    // The default directory was made by `new_out_dir` for this session alone.
    let created = !dir.exists() || output.dir.is_none();
    output::create_dir(dir).context("--out")?;
    let samples = dir.join("samples.csv");
    let mut writer = SampleWriter::create(&samples)?;
    let progress = Progress::new(output.quiet, total_runs);
    let result = sampler(&mut writer, &interrupt, &progress);
    progress.finish();
    let rows_written = writer.rows_written();
    if rows_written > 0 {
        writer.write_batch(&session_rows(&result))?;
    }
    drop(writer);

    if rows_written == 0 {
        let _ = fs::remove_file(&samples);
        if created {
            let _ = fs::remove_dir(dir);
        }
        return match result {
            Err(e) => Err(e.into()),
            Ok(o) if o.interrupted => Ok(interrupted(&interrupt)),
            Ok(_) => bail!("no samples were taken; nothing to report"),
        };
    }

    let read = read(&samples)?;
    let rows = read.rows;
    let analysis = fit::analyse(read, fit_options);
    // Reports first, whatever happened; then the sampling error, if any.
    // What the process will exit with, so the CI line says it too.
    let stopped = match &result {
        Err(_) => Some(Exit::Error),
        Ok(_) if analysis.interrupted => Some(interrupted(&interrupt)),
        Ok(_) => None,
    };
    let exit = finish(&analysis, dir, output, gate, stopped)?;
    match result {
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "sampling stopped early; the {rows} rows taken are in {}",
            samples.display()
        ))),
        Ok(_) if analysis.interrupted => Ok(interrupted(&interrupt)),
        Ok(_) => Ok(exit),
    }
}

/// samples.csv, read in one pass in bounded memory.
pub(crate) fn read(path: &Path) -> Result<Samples> {
    let mut builder = series::Builder::new();
    let scan = store::scan(path, |row| builder.push(row))?;
    Ok(builder.finish(scan.torn_last_line))
}

/// 128 + the signal that stopped the session (130 for Ctrl-C).
fn interrupted(interrupt: &Interrupt) -> Exit {
    Exit::Interrupted(interrupt.signal().unwrap_or(libc::SIGINT))
}

/// Notes and the interruption go into samples.csv too, so that
/// `leakwatch report` rebuilds exactly these reports.
fn session_rows(result: &Result<Outcome, SampleError>) -> Vec<Row> {
    let (notes, interrupted) = match result {
        Ok(o) => (o.notes.clone(), o.interrupted),
        Err(e) => (vec![format!("sampling stopped early: {e}")], false),
    };
    let mut rows: Vec<Row> = notes
        .iter()
        .map(|n| store::note_row(SessionEvent::Note, n))
        .collect();
    if interrupted {
        rows.push(store::note_row(SessionEvent::Interrupted, ""));
    }
    rows
}

/// Judges the gate, writes the reports (always, even when the gate cannot
/// be judged) and the CI outputs, and prints the human summary, the one
/// line for CI logs and what to do next. `stopped`: the exit an interrupt or
/// a sampling error forces, whatever the verdict (the CI line says it).
pub(crate) fn finish(
    analysis: &Analysis,
    dir: &Path,
    output: &Output,
    setup: &GateSetup,
    stopped: Option<Exit>,
) -> Result<Exit> {
    let judged = gate::evaluate(analysis, &setup.gate);
    report::write_all(analysis, judged.as_ref().ok().and_then(Option::as_ref), dir)?;
    let judged = judged?;
    if let Some(path) = &setup.save_baseline {
        let summary = fs::read(dir.join("summary.json"))?;
        output::write_atomic(path, &summary).context("--save-baseline")?;
    }
    if output.json {
        print_summary_json(dir)?;
    }
    let exit = exit_status(
        analysis.verdict,
        judged.as_ref(),
        setup.exit_zero,
        analysis.never_worked(),
    );
    let summary = report::text::render(analysis);
    if !output.quiet {
        console::say(&summary);
        if let Some(result) = &judged {
            console::say(&ci::gate_text(result));
        }
        console::say_line(&format!("report: {}/", dir.display()));
        if let Some(next) = ci::next_steps(analysis, judged.is_some()) {
            console::say_line(&next);
        }
        let code = stopped.unwrap_or(exit).code();
        console::say_line(&ci::one_line(analysis, judged.as_ref(), code));
    }
    let title = format!("leakwatch: {}", analysis.verdict.as_str());
    let step = ci::step_summary(&title, Some(&summary), judged.as_ref());
    ci_outputs(judged.as_ref(), setup.junit.as_deref(), &step)?;
    Ok(exit)
}

/// `--json`: summary.json as written, on stdout (a closed pipe is no error).
fn print_summary_json(dir: &Path) -> Result<()> {
    use std::io::Write;
    let bytes = fs::read(dir.join("summary.json"))?;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&bytes).and_then(|()| out.flush());
    Ok(())
}

/// The one place where the outcome of an analysis becomes an exit code
/// (errors and signals are mapped where they happen). With a gate, the
/// gate decides (a command that never worked fails it); without one, a
/// command whose every run failed is an error (2: its memory says nothing
/// of the code under test, and "stable" would pass a broken CI step), and
/// a `leak` verdict fails as a linter's finding does; `--exit-zero` asks
/// for the reports only.
pub(crate) fn exit_status(
    verdict: Verdict,
    gate: Option<&GateResult>,
    exit_zero: bool,
    never_worked: bool,
) -> Exit {
    if exit_zero {
        return Exit::Ok;
    }
    match gate {
        Some(result) => gate_exit(result),
        None if never_worked => Exit::Error,
        None if verdict == Verdict::Leak => Exit::Leak,
        None => Exit::Ok,
    }
}

/// A gate's outcome as an exit code (also `check` against a baseline).
fn gate_exit(result: &GateResult) -> Exit {
    if result.passed {
        Exit::Ok
    } else {
        Exit::GateFailed
    }
}

/// JUnit XML (when asked) and the GitHub step summary (when its variable is set).
fn ci_outputs(result: Option<&GateResult>, junit_path: Option<&Path>, step: &str) -> Result<()> {
    if let Some(path) = junit_path {
        let empty = GateResult::from_checks(gate::Rule::Ci, Vec::new());
        output::write_atomic(path, junit::render(result.unwrap_or(&empty)).as_bytes())
            .context("--junit")?;
    }
    if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
        use std::io::Write;
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(step.as_bytes()))
            .with_context(|| {
                format!(
                    "cannot append to GITHUB_STEP_SUMMARY {}",
                    Path::new(&path).display()
                )
            })?;
    }
    Ok(())
}

/// `leakwatch check`: the current summary against a baseline.
fn check_baseline(opts: &CheckOptions) -> Result<Exit> {
    let Some(current) = file_or_in_dir(&opts.current, "summary.json") else {
        bail!(
            "{} has no summary.json; give a leakwatch output directory or its summary.json",
            opts.current.display()
        );
    };
    // A report directory as the baseline: its summary.json.
    let baseline = file_or_in_dir(&opts.baseline, "summary.json");
    let Some(baseline) = baseline.filter(|b| b.is_file()) else {
        bail!(
            "--baseline {} does not exist; write one with --save-baseline FILE on a good run",
            opts.baseline.display()
        );
    };
    let current = check::read_summary(&current)?;
    let base = check::read_summary(&baseline)?;
    check::same_mode(&current, &base)?;
    let targets = if opts.gate_on.is_empty() {
        check::baseline_targets(&base)
    } else {
        opts.gate_on.clone()
    };
    let result = check::compare(&current, &base, opts.tolerance, &targets);
    if opts.json {
        fleet::print_json(&result)?;
    } else if !opts.quiet {
        console::say(&ci::gate_text(&result));
    }
    let title = format!(
        "leakwatch check against {}: {}",
        opts.baseline.display(),
        if result.passed { "passed" } else { "FAILED" }
    );
    let step = ci::step_summary(&title, None, Some(&result));
    ci_outputs(Some(&result), opts.junit.as_deref(), &step)?;
    Ok(gate_exit(&result))
}
