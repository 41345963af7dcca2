//! Orchestration of the fleet commands, beside `app`: `attach
//! --serve` (start the /metrics endpoint), `analyze --prometheus` (series
//! from Prometheus → samples.csv → the usual analysis, reports and gate),
//! `export` (a finished run as OpenMetrics text), and the shell completions
//! and man page generated from the clap definition. Like `app`, the only
//! other place that uses anyhow.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::CommandFactory;

use super as app;
use super::serve::Server;
use crate::cli::Cli;
use crate::console;
use crate::error::Exit;
use crate::fit::{self, FitOptions};
use crate::gate::GateOn;
use crate::options::{AnalyzeOptions, ExportOptions, GateSetup, ServeOptions};
use crate::output;
use crate::phrase;
use crate::report::openmetrics::{self, Latest};
use crate::sample::prometheus::{self, Life, RangeQuery};
use crate::series::{self, Metric};
use crate::store::{self, Row, SampleWriter, Scope, SessionEvent, Tier};

/// Starts /metrics before sampling (a port in use fails before any output
/// exists) and says where it is.
pub fn serve(opts: Option<&ServeOptions>, fit: &FitOptions, quiet: bool) -> Result<Option<Server>> {
    let Some(opts) = opts else { return Ok(None) };
    let server = Server::start(opts.addr, *fit, opts.top)?;
    if !quiet {
        console::say_line(&format!(
            "leakwatch: serving OpenMetrics on http://{}/metrics",
            server.addr
        ));
    }
    Ok(Some(server))
}

/// `--json`: a value on stdout; a closed pipe is not an error.
pub fn print_json<T: serde::Serialize>(value: &T) -> Result<()> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Ok(())
}

/// The default resolution: about 1,000 points over the range, at least 15 s
/// (Prometheus' usual scrape interval).
fn default_step(range: Duration) -> Duration {
    (range / 1000).max(Duration::from_secs(15))
}

fn now_unix() -> f64 {
    chrono::Utc::now().timestamp_millis() as f64 / 1000.0
}

/// A life's label set, with `leakwatch_life` when its series restarted.
fn life_labels(life: &Life, lives_of_series: usize) -> String {
    let mut labels = life.labels.clone();
    if lives_of_series > 1 {
        labels.insert("leakwatch_life".into(), life.life.to_string());
    }
    prometheus::label_text(&labels)
}

/// samples.csv of an `analyze`: the label table and a note first, then one
/// row per series per timestamp, in time order.
fn write_samples(
    path: &Path,
    lives: &[Life],
    counts: &[usize],
    start: f64,
    metric: Metric,
    notes: &[String],
) -> Result<u64> {
    let mut writer = SampleWriter::create(path)?;
    let mut head: Vec<Row> = lives
        .iter()
        .zip(counts)
        .enumerate()
        .map(|(i, (l, &n))| {
            store::note_row(SessionEvent::Labels, &format!("{i} {}", life_labels(l, n)))
        })
        .collect();
    head.extend(notes.iter().map(|n| store::note_row(SessionEvent::Note, n)));
    writer.write_batch(&head)?;
    let mut points: Vec<(f64, usize, f64)> = lives
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.points.iter().map(move |&(t, v)| (t, i, v)))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut sample = 0u64;
    let mut batch: Vec<Row> = Vec::new();
    let mut batch_t = None;
    for (t, i, v) in points {
        if batch_t.is_some_and(|bt| bt != t) {
            writer.write_batch(&batch)?;
            batch.clear();
            sample += 1;
        }
        batch_t = Some(t);
        let life = &lives[i];
        let mut row = Row {
            sample,
            t_seconds: (t - start).max(0.0),
            timestamp: chrono::DateTime::from_timestamp_millis((t * 1000.0) as i64)
                .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                .unwrap_or_default(),
            pid: life.life,
            start_time: life.points.first().map(|p| p.0 as u64).unwrap_or(0),
            // The label set is in the label table: rows stay short (a week
            // of a deployment is millions of them).
            comm: format!("life {}", life.life),
            tier: Tier::Cheap,
            ..Row::new(Scope::Series(i as u32))
        };
        row.set(metric, v.max(0.0).round() as u64);
        batch.push(row);
    }
    writer.write_batch(&batch)?;
    Ok(writer.rows_written())
}

/// `leakwatch analyze --prometheus URL --query PROMQL`.
pub fn analyze(opts: &AnalyzeOptions) -> Result<Exit> {
    app::check_outputs(&opts.gate)?;
    let end = opts.end.unwrap_or_else(now_unix);
    let start = end - opts.range.as_secs_f64();
    let step = opts.step.unwrap_or_else(|| default_step(opts.range));
    let query = RangeQuery {
        url: opts.url.clone(),
        query: opts.query.clone(),
        start,
        end,
        step,
        timeout: opts.timeout,
    };
    let fetched = prometheus::fetch(&query)?;
    let series = fetched.series;
    let mut all_lives = Vec::new();
    let mut lives_per_series: BTreeMap<String, usize> = BTreeMap::new();
    for s in &series {
        let lives = prometheus::lives(s, step);
        lives_per_series.insert(s.label_text(), lives.len());
        all_lives.extend(lives);
    }
    let mut holds: Vec<f64> = Vec::new();
    for life in &mut all_lives {
        if let Some((firsts, every)) = prometheus::refreshes(&life.points) {
            life.points = firsts;
            holds.push(every);
        }
    }
    let all_count = all_lives.len();
    let lives = fit::lives::worst_first(all_lives, |l| &l.points, start, opts.metric, &opts.fit);
    let counts: Vec<usize> = lives
        .iter()
        .map(|l| {
            lives_per_series
                .get(&prometheus::label_text(&l.labels))
                .copied()
                .unwrap_or(1)
        })
        .collect();
    let restarted = counts.iter().filter(|&&n| n > 1).count();
    let every = match fetched.raw_spacing {
        Some(s) => format!(
            "as stored (raw samples about every {}; steps of {} would repeat or shift them)",
            crate::units::format_duration(Duration::try_from_secs_f64(s).unwrap_or_default()),
            crate::units::format_duration(step)
        ),
        None => format!("every {}", crate::units::format_duration(step)),
    };
    let note = format!(
        "{} series from Prometheus {} for '{}', {} to {} {every}{}",
        series.len(),
        opts.url,
        opts.query,
        iso(start),
        iso(end),
        if restarted > 0 {
            format!(
                "; {} of them restarted (a gap, a reset or a fall to under half): each life is \
                 its own series, labelled leakwatch_life",
                series
                    .iter()
                    .filter(|s| prometheus::lives(s, step).len() > 1)
                    .count()
            )
        } else {
            String::new()
        }
    );
    let mut notes = vec![note];
    if !holds.is_empty() {
        holds.sort_by(f64::total_cmp);
        notes.push(format!(
            "{} of {} series hold each value between their exporter's refreshes (about every \
             {}): each refresh is read once, as its repeats are not observations",
            holds.len(),
            all_count,
            crate::units::format_duration(
                Duration::try_from_secs_f64(holds[holds.len() / 2]).unwrap_or_default()
            )
        ));
    }
    let pooled = fit::lives::pooled(
        lives
            .iter()
            .map(|l| (prometheus::label_text(&l.labels), l.points.as_slice())),
    );
    notes.extend(pooled.iter().map(|p| phrase::pooled_lives(p, opts.metric)));
    let dir = app::new_out_dir(&opts.output)?;
    output::create_dir(&dir).context("--out")?;
    let samples = dir.join("samples.csv");
    write_samples(&samples, &lives, &counts, start, opts.metric, &notes)?;
    let analysis = fit::analyse(app::read(&samples)?, &opts.fit);
    let gate = gate_every_series(&analysis, &opts.gate);
    if !opts.output.quiet {
        console::say(&legend(&analysis, opts.metric));
    }
    app::finish(&analysis, &dir, &opts.output, &gate, None)
}

/// The gate of an analysis of Prometheus series: unless `--gate-on` says
/// otherwise, every series is gated (on its judged metric), so the command
/// fails when any leaks too fast. Other analyses: the gate as given.
pub fn gate_every_series(analysis: &fit::Analysis, gate: &GateSetup) -> GateSetup {
    let mut gate = gate.clone();
    if gate.gate.gate_on.is_empty() && !analysis.labels.is_empty() {
        gate.gate.gate_on = analysis
            .labels
            .keys()
            .map(|&i| Scope::Series(i))
            .filter_map(|series| {
                // The judged metric; an analysis of one `--as` metric
                // (fds, threads) has only that one.
                let primary = fit::primary_metric(&analysis.fits, series);
                analysis
                    .fit_of(series, primary)
                    .or_else(|| analysis.fits.iter().find(|f| f.scope == series))
                    .map(|f| GateOn {
                        series,
                        metric: f.metric,
                    })
            })
            .collect();
    }
    gate
}

fn iso(t: f64) -> String {
    chrono::DateTime::from_timestamp(t as i64, 0)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| format!("{t}"))
}

/// Most series listed on stderr (all are in the reports).
const LEGEND_MAX: usize = 20;

/// Series by label set, worst first: what `series:<N>` in the summary below means.
fn legend(a: &fit::Analysis, metric: Metric) -> String {
    let mut out = format!("{} series, worst first:\n", a.labels.len());
    for (i, labels) in a.labels.iter().take(LEGEND_MAX) {
        let fit = a.fit_of(Scope::Series(*i), metric);
        let verdict = fit.map(|f| f.verdict.as_str()).unwrap_or("–");
        let rate = fit
            .and_then(|f| f.slope.map(|s| phrase::rate(f, s)))
            .unwrap_or_else(|| "–".into());
        out.push_str(&format!("  series:{i} {labels}: {verdict}, {rate}\n"));
    }
    if a.labels.len() > LEGEND_MAX {
        out.push_str(&format!(
            "  … and {} more (see report.md)\n",
            a.labels.len() - LEGEND_MAX
        ));
    }
    out
}

/// `leakwatch export DIR --format openmetrics`.
pub fn export(opts: &ExportOptions) -> Result<Exit> {
    let samples = app::input_samples(&opts.input)?;
    let mut builder = series::Builder::new();
    let mut latest = Latest::default();
    let scan = store::scan(&samples, |row| {
        latest.push(&row);
        builder.push(row);
    })?;
    let analysis = fit::analyse(builder.finish(scan.torn_last_line), &opts.fit);
    let text = openmetrics::export(&analysis, &latest, opts.top);
    match &opts.out {
        Some(path) => output::write_atomic(path, text.as_bytes())
            .with_context(|| format!("--out {}", path.display()))?,
        None => {
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
        }
    }
    Ok(Exit::Ok)
}

/// `leakwatch completions SHELL`: the script on stdout.
pub fn completions(shell: &str) -> Result<Exit> {
    let Ok(shell) = shell.trim().parse::<clap_complete::Shell>() else {
        bail!(
            "'{shell}' is not a shell leakwatch completes; use bash, zsh, fish, elvish or powershell"
        );
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "leakwatch", &mut out);
    let _ = std::io::stdout().lock().write_all(&out);
    Ok(Exit::Ok)
}

/// The man page of `cmd`, as roff, titled `title`.
fn man_page(cmd: clap::Command, title: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd).title(title).render(&mut out)?;
    Ok(out)
}

/// `leakwatch man`: leakwatch.1 on stdout, or every page into `--out DIR`.
pub fn man(out: Option<&Path>) -> Result<Exit> {
    let cmd = Cli::command();
    let Some(dir) = out else {
        let _ = std::io::stdout()
            .lock()
            .write_all(&man_page(cmd, "leakwatch")?);
        return Ok(Exit::Ok);
    };
    output::create_dir(dir).context("--out")?;
    let mut written: Vec<PathBuf> = Vec::new();
    let path = dir.join("leakwatch.1");
    output::write_atomic(&path, &man_page(cmd.clone(), "leakwatch")?)?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("leakwatch-{}", sub.get_name());
        let sub = sub
            .clone()
            .name(name.clone())
            .bin_name(format!("leakwatch {}", sub.get_name()))
            .version(env!("CARGO_PKG_VERSION"));
        let page = man_page(sub, &name)?;
        let path = dir.join(format!("{name}.1"));
        output::write_atomic(&path, &page)?;
        written.push(path);
    }
    console::say_line(&format!(
        "wrote {} man pages to {}",
        written.len(),
        dir.display()
    ));
    Ok(Exit::Ok)
}
