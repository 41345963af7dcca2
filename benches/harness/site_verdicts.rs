//! Every allocation site of a session judged, not only those the report
//! lists (`fit_sites` keeps leaks, plateaus and sites holding ≥ 1 MiB): for
//! benches/harness/native_false_leaks.sh, which counts how often scratch
//! sites were stable, inconclusive or called a leak.
//!
//! `site-verdicts DIR` reads DIR/samples.csv and prints one tab-separated
//! line per site: scope, source, site, points, verdict, rate and its 95% CI
//! (bytes per run, as summary.json gives them), whether `fit_sites` lists
//! it (its verdict, `-`: not listed), reason. Each site is judged by
//! `fit::sites::fit_site`, the report's own judgement (a pool's per task).

use std::path::PathBuf;
use std::process::ExitCode;

use leakwatch::fit::sites::{fit_site, fit_sites};
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
    for s in &samples.sites {
        let f = fit_site(s, &[], &[]);
        let listed = fit_sites(std::slice::from_ref(s), &[], &[]).pop();
        let num = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        println!(
            "{}\t{:?}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            s.scope,
            s.source,
            s.site,
            s.points.len(),
            f.verdict.as_str(),
            num(f.bytes_per_run),
            num(f.bytes_per_run_ci95.map(|c| c.0)),
            num(f.bytes_per_run_ci95.map(|c| c.1)),
            listed.as_ref().map_or("-", |l| l.verdict.as_str()),
            f.reason.to_string().replace(['\t', '\n'], " "),
        );
    }
    ExitCode::SUCCESS
}
