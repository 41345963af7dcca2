//! Every allocation site of a session judged, not only those the report
//! lists (`fit_sites` keeps leaks, plateaus and sites holding ≥ 1 MiB): for
//! benches/harness/native_false_leaks.sh, which counts how often scratch
//! sites were stable, inconclusive or called a leak.
//!
//! `site-verdicts DIR` reads DIR/samples.csv and prints one tab-separated
//! line per site: scope, source, site, points, verdict, rate and its 95% CI
//! (bytes per run, the CI widened for sampling as summary.json's is),
//! verdict as listed by `fit_sites` (`-`: not listed), reason.
//!
//! A one-process site is judged as `fit::sites` judges it (`classify` with
//! the 64 KiB floor, warm-up 0); a pool's (several processes) per-task
//! judgement is not repeated here: its verdict is `fit_sites`' when listed,
//! else `pool`. Where both exist they are compared, and a mismatch is an
//! error (exit 1), so this copy cannot drift from the report silently.

use std::path::PathBuf;
use std::process::ExitCode;

use leakwatch::fit::MIN_SLOPE_BYTES;
use leakwatch::fit::sites::fit_sites;
use leakwatch::fit::verdict::{Thresholds, classify};
use leakwatch::series::from_rows;
use leakwatch::store::read_samples;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: site-verdicts DIR (a leakwatch output directory)");
        return ExitCode::from(2);
    };
    let rows = match read_samples(&dir.join("samples.csv")) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("error: {}: {e}", dir.join("samples.csv").display());
            return ExitCode::from(2);
        }
    };
    let samples = from_rows(rows);
    let mut mismatches = 0;
    for s in &samples.sites {
        let listed = fit_sites(std::slice::from_ref(s), &[], &[]).pop();
        let (xs, ys): (Vec<f64>, Vec<f64>) = s.points.iter().copied().unzip();
        let t = Thresholds {
            display_unit: "run",
            min_slope_abs: MIN_SLOPE_BYTES,
            ..Thresholds::default()
        };
        let pool = s.lives.len() > 1;
        let own = (!pool).then(|| classify(&xs, &ys, Some(0), &t));
        let verdict = match (&own, &listed) {
            (Some(c), _) => c.verdict.as_str(),
            (None, Some(l)) => l.verdict.as_str(),
            (None, None) => "pool",
        };
        if let (Some(c), Some(l)) = (&own, &listed) {
            if c.verdict != l.verdict {
                mismatches += 1;
            }
        }
        // Rate and CI as summary.json gives them, when listed; else the fit's.
        let (rate, ci, reason) = match (&listed, &own) {
            (Some(l), _) => (l.bytes_per_run, l.bytes_per_run_ci95, l.reason.clone()),
            (None, Some(c)) => (
                c.rate.or(c.fit.as_ref().map(|f| f.slope)),
                c.fit.as_ref().and_then(|f| f.slope_ci95),
                c.reason.clone(),
            ),
            (None, None) => (None, None, String::new()),
        };
        let num = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        println!(
            "{}\t{:?}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            s.scope,
            s.source,
            s.site,
            s.points.len(),
            verdict,
            num(rate),
            num(ci.map(|c| c.0)),
            num(ci.map(|c| c.1)),
            listed.as_ref().map_or("-", |l| l.verdict.as_str()),
            reason.replace(['\t', '\n'], " "),
        );
    }
    if mismatches > 0 {
        eprintln!("error: {mismatches} site(s) judged differently here and by fit_sites");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
