//! Accuracy study of the leak verdicts on simulated memory series whose truth is known.
//!
//! Series: x = 1..n runs, level 100 MiB at run 1, Gaussian noise with sd a fixed percentage of
//! the level. Truths: stable; linear leaks of 0.05%, 0.2%, 1%, 4% of the level per run; and
//! four that grow by 20% of the level — a ramp over the first 30% or 50% of the runs then flat,
//! and a saturating curve 1 − e^(−(x−1)/τ) with τ = (n−1)/3 (95% of the way there at the last
//! run: at 10 and 20 runs it still rises faster than the threshold at its end, so by the
//! contract a leak is no false alarm there) or τ = (n−1)/6.
//!
//! The contract's estimate: `end_rate_intervals_cover_the_truth` asserts that the 95% interval
//! of the end rate holds the true end rate; `print_coverage_table` (ignored) prints the table.
//!
//! The real shapes (`REAL_SHAPES`): one-off steps, steady steps (a leak), a fill then a later
//! step (plateau), a first fill followed by a small creep (redis: stable), and in attach mode
//! saw-teeth sampled at jittered times, with and without growth of their troughs; see `Shape`.
//!
//! The hard shapes (`HARD_SHAPES`: heap chunks, curves, held gauges and warm-ups): geometric
//! staircases (a heap whose chunks grow ×1.5 or ×2), accelerating ramps (x² and exponential),
//! held-value staircases from 1 s scrapes of a gauge refreshed every 15 s, a warm-up then a
//! straight leak (runs and attach), and straight lines in attach mode (steady or leaking);
//! `print_power_table` (ignored) prints how often a leak of twice the threshold is found at 20
//! runs and at 60 s of attach, beside a plain least-squares line's CI as the yardstick;
//! `print_coverage_misses` (ignored) prints which estimator a missed interval came from and
//! why. `LEAKWATCH_TEST_STUDY_SHAPES=hard` limits the shape and coverage tables to these
//! families.
//!
//! `rates_at_{10,20,50}_points`, `shapes_in_run_mode` and `sawteeth_at_120_and_600_samples`
//! assert the claims (about 13 s of CPU in debug on 2 cores, run
//! in parallel); `print_accuracy_table` and `print_shape_table` (ignored) print the markdown
//! tables kept in the README (Accuracy):
//! `cargo test --release --test fit_accuracy -- --ignored --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use leakwatch::fit::{stats, verdict};
use verdict::{Thresholds, Verdict, classify};

const MIB: f64 = 1024.0 * 1024.0;
const LEVEL: f64 = 100.0 * MIB;
const POINTS: [usize; 3] = [10, 20, 50];
/// Noise sd, % of the level.
const NOISE_PCT: [f64; 3] = [0.1, 1.0, 5.0];
/// Total growth of the plateau truths, fraction of the level.
const PLATEAU_GROWTH: f64 = 0.20;

/// Tiny deterministic PRNG: splitmix64 for uniforms, Box–Muller for normals.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1]: never 0, so ln() below is finite.
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Truth {
    Stable,
    /// Growth per run as a fraction of the level.
    Leak(f64),
    /// Linear growth over this fraction of the span, then flat.
    PlateauRamp(f64),
    /// 1 − e^(−(x−1)/τ) with τ = (n − 1)/k: 95% of the way at the end with k = 3 (still
    /// rising over the 0.1%/run threshold at the end at 10 and 20 runs: a leak by the
    /// contract there, whose end rate is what is judged), 99.75% with k = 6.
    PlateauExp(f64),
}

const TRUTHS: [Truth; 9] = [
    Truth::Stable,
    Truth::Leak(0.0005),
    Truth::Leak(0.002),
    Truth::Leak(0.01),
    Truth::Leak(0.04),
    Truth::PlateauRamp(0.3),
    Truth::PlateauRamp(0.5),
    Truth::PlateauExp(3.0),
    Truth::PlateauExp(6.0),
];

impl Truth {
    fn label(self) -> String {
        match self {
            Truth::Stable => "stable".into(),
            Truth::Leak(f) => format!("leak {}%/run", f * 100.0),
            Truth::PlateauRamp(k) => format!("plateau ramp {}%", k * 100.0),
            Truth::PlateauExp(k) => format!("plateau exp τ=span/{k}"),
        }
    }

    /// True slope in bytes per run, where one exists.
    fn slope(self) -> Option<f64> {
        match self {
            Truth::Stable => Some(0.0),
            Truth::Leak(f) => Some(f * LEVEL),
            _ => None,
        }
    }

    /// Noise-free memory at run `x` of `n`, bytes.
    fn mean_at(self, x: f64, n: usize) -> f64 {
        let span = (n - 1) as f64;
        let growth = PLATEAU_GROWTH * LEVEL;
        match self {
            Truth::Stable => LEVEL,
            Truth::Leak(f) => LEVEL * (1.0 + f * (x - 1.0)),
            Truth::PlateauRamp(k) => LEVEL + growth * ((x - 1.0) / (k * span)).min(1.0),
            Truth::PlateauExp(k) => LEVEL + growth * (1.0 - (-(x - 1.0) / (span / k)).exp()),
        }
    }

    /// Memory at runs `x` (1..=n) with Gaussian noise of `noise_pct`% of the level: a
    /// distinct, reproducible stream per cell and seed.
    fn series(self, x: &[f64], noise_pct: f64, seed: u64) -> Vec<f64> {
        let n = x.len();
        let mut rng = Rng::new(seed ^ ((n as u64) << 40) ^ (noise_pct.to_bits() >> 3));
        x.iter()
            .map(|&xi| self.mean_at(xi, n) + rng.normal() * noise_pct / 100.0 * LEVEL)
            .collect()
    }

    /// Whether the series still rises faster than the default threshold (0.1% of its mean
    /// level per run) at its last point: what the verdict judges (the contract's end rate).
    fn rises_at_end(self, n: usize) -> bool {
        let mean = (1..=n).map(|v| self.mean_at(v as f64, n)).sum::<f64>() / n as f64;
        truth_end_rate(self, n) > 0.001 * mean
    }
}

/// Outcome counts for one (points, noise, truth) cell.
#[derive(Default)]
struct Cell {
    runs: usize,
    leak: usize,
    plateau: usize,
    stable: usize,
    inconclusive: usize,
    /// Sum of |OLS slope − true slope|, bytes per run, over runs that produced a fit.
    abs_err: f64,
    fits: usize,
}

impl Cell {
    fn rate(&self, count: usize) -> f64 {
        count as f64 / self.runs as f64
    }

    fn mean_abs_err(&self) -> Option<f64> {
        (self.fits > 0).then(|| self.abs_err / self.fits as f64)
    }
}

fn simulate(n: usize, noise_pct: f64, truth: Truth, seeds: u64) -> Cell {
    let thresholds = Thresholds::default();
    let x: Vec<f64> = (1..=n).map(|v| v as f64).collect();
    let mut cell = Cell::default();
    for seed in 0..seeds {
        let y = truth.series(&x, noise_pct, seed);
        let c = classify(&x, &y, None, &thresholds);
        cell.runs += 1;
        match c.verdict {
            Verdict::Leak => cell.leak += 1,
            Verdict::Plateau => cell.plateau += 1,
            Verdict::Stable => cell.stable += 1,
            Verdict::Inconclusive => cell.inconclusive += 1,
        }
        if let (Some(fit), Some(true_slope)) = (c.fit, truth.slope()) {
            cell.abs_err += (fit.slope - true_slope).abs();
            cell.fits += 1;
        }
    }
    cell
}

/// Every (points, noise, truth) combination.
fn grid() -> impl Iterator<Item = (usize, f64, Truth)> {
    POINTS.into_iter().flat_map(|n| {
        NOISE_PCT
            .into_iter()
            .flat_map(move |noise| TRUTHS.into_iter().map(move |truth| (n, noise, truth)))
    })
}

/// Checks every noise level and truth for one series length; asserts the claims in the module
/// docs and the README (Accuracy), over `seeds` series per cell. Split by length so the three run in
/// parallel (< 5 s in debug on 2 cores).
fn check_rates(n: usize, seeds: u64) {
    let (mut false_runs, mut false_leaks) = (0, 0);
    for noise in NOISE_PCT {
        for truth in TRUTHS {
            let cell = simulate(n, noise, truth, seeds);
            let what = format!("n={n} noise={noise}% {}", truth.label());
            let leak_rate = cell.rate(cell.leak);
            if !matches!(truth, Truth::Leak(_)) && truth.rises_at_end(n) {
                // Still rising over the threshold at the end: no false alarm to count.
                continue;
            }
            let Truth::Leak(f) = truth else {
                // Stable or plateau: a leak verdict is a false alarm.
                false_runs += cell.runs;
                false_leaks += cell.leak;
                assert!(leak_rate < 0.01, "{what}: false-leak rate {leak_rate}");
                continue;
            };
            let sd = noise / 100.0 * LEVEL;
            let slope = f * LEVEL;
            // Clear leak: ≥ 3 noise sd per run and ≥ 2× the default 0.1%/run threshold.
            if slope >= 3.0 * sd && f >= 0.002 {
                assert!(leak_rate >= 0.95, "{what}: detection rate {leak_rate}");
                let rel = cell.mean_abs_err().unwrap_or(f64::MAX) / slope;
                assert!(rel < 0.05, "{what}: mean |slope error| {rel}");
            }
            // Modest leak: ≥ 2 noise sd per run (and ≥ 2× the threshold).
            if slope >= 2.0 * sd && f >= 0.002 {
                assert!(leak_rate >= 0.75, "{what}: detection rate {leak_rate}");
            }
            // Below the practical threshold (0.1%/run): rarely a leak.
            if f < 0.001 {
                assert!(
                    leak_rate < 0.01,
                    "{what}: sub-threshold leak rate {leak_rate}"
                );
            }
        }
    }
    let rate = false_leaks as f64 / false_runs as f64;
    assert!(
        rate < 0.005,
        "n={n}: false-leak rate over stable and plateau series {rate}"
    );
}

#[test]
fn rates_at_10_points() {
    check_rates(10, 500);
}

#[test]
fn rates_at_20_points() {
    check_rates(20, 500);
}

#[test]
fn rates_at_50_points() {
    check_rates(50, 500);
}

/// The brief's yardstick: over 10 runs, a leak of 2–3 noise sd per run is found most of the time.
#[test]
fn modest_leaks_over_ten_runs_are_found() {
    let x: Vec<f64> = (1..=10).map(f64::from).collect();
    let sd = 0.01 * LEVEL;
    for (sds_per_run, min_rate) in [(2.0, 0.75), (3.0, 0.95)] {
        let mut rng = Rng::new(42);
        let mut found = 0;
        for _ in 0..500 {
            let y: Vec<f64> = x
                .iter()
                .map(|&xi| LEVEL + sds_per_run * sd * (xi - 1.0) + sd * rng.normal())
                .collect();
            if classify(&x, &y, None, &Thresholds::default()).verdict == Verdict::Leak {
                found += 1;
            }
        }
        let rate = f64::from(found) / 500.0;
        println!("leak of {sds_per_run} sd/run over 10 runs: found {rate}");
        assert!(rate >= min_rate, "{sds_per_run} sd/run: found {rate}");
    }
}

/// A straight leak's headline stays near its truth: 2 MiB/run over 20 runs under noise of
/// sd 1.5 MiB (a Go heap read from its collector's goal), the first point also 0, 0.5 or
/// 1 MiB high (the goal's floor). A parabola bends upwards at one-sided α by chance in one
/// series in a hundred, and its end as the headline reads such a series far too high; the
/// line stays the rate unless the bend holds at α/10. At most one series in 200 over 15% off
/// (docs/accuracy.md#curves-that-speed-up).
#[test]
fn straight_leaks_are_not_read_as_speeding_up() {
    const SEEDS: u64 = 4000;
    let x: Vec<f64> = (1..=20).map(f64::from).collect();
    let t = Thresholds {
        min_slope_abs: 64.0 * KIB,
        display_unit: "run",
        ..Thresholds::default()
    };
    for first in [0.0, 0.5, 1.0] {
        let mut rng = Rng::new(7);
        let far = (0..SEEDS)
            .filter(|_| {
                let y: Vec<f64> = x
                    .iter()
                    .map(|&r| {
                        let start = if r == 1.0 { first * MIB } else { 0.0 };
                        LEVEL + 2.0 * MIB * (r - 1.0) + 1.5 * MIB * rng.normal() + start
                    })
                    .collect();
                let c = classify(&x, &y, None, &t);
                c.rate.is_none_or(|r| (r / (2.0 * MIB) - 1.0).abs() > 0.15)
            })
            .count();
        println!("first point +{first} MiB: headline over 15% off in {far} of {SEEDS}");
        assert!(
            far * 200 <= SEEDS as usize,
            "+{first} MiB: {far} of {SEEDS}"
        );
    }
}

#[test]
fn prng_is_deterministic_and_roughly_normal() {
    let mut a = Rng::new(7);
    let mut b = Rng::new(7);
    let draws: Vec<f64> = (0..20_000).map(|_| a.normal()).collect();
    assert!(draws.iter().all(|&d| d == b.normal()));
    let mean = stats::mean(&draws).unwrap_or(f64::NAN);
    let var = draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / draws.len() as f64;
    assert!(
        mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
        "{mean} {var}"
    );
}

/// Two decimals: one series in 2,000 is 0.05%.
fn pct2(v: f64) -> String {
    format!("{:.2}%", v * 100.0)
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

#[test]
#[ignore = "slow: prints the README (Accuracy) table"]
fn print_accuracy_table() {
    const SEEDS: u64 = 2000;
    println!("# Leak verdict accuracy\n");
    println!(
        "{SEEDS} simulated series per row; x = runs 1..n; level 100 MiB at run 1; Gaussian noise \
         (sd as % of the level); default thresholds (alpha 0.01, min 5 points, practical \
         threshold 0.1% of the level per run); automatic warm-up detection. Plateaus rise by 20% \
         of the level: `ramp K%` rises linearly over the first K% of the runs then stays flat; \
         `exp` is 1 − e^(−(x−1)/τ) with τ = (n−1)/3 (95% of the rise reached at the last run). \
         Slope error: mean |OLS slope − true slope| over the fitted points, as % of the true \
         slope and as % of the level per run. Rates are fractions of the {SEEDS} series. \
         Generated by `cargo test --release --test fit_accuracy -- --ignored --nocapture`.\n"
    );
    println!(
        "| points | noise sd | truth | \\|slope err\\| % of true | \\|slope err\\| %L/run | leak | plateau | stable | inconclusive |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|");
    let (mut worst_false, mut false_leaks, mut false_runs) = (0.0_f64, 0, 0);
    for (n, noise, truth) in grid() {
        let cell = simulate(n, noise, truth, SEEDS);
        let err = cell.mean_abs_err();
        let rel = match (err, truth.slope()) {
            (Some(e), Some(s)) if s > 0.0 => format!("{:.1}", e / s * 100.0),
            _ => "—".into(),
        };
        let abs = err.map_or_else(|| "—".into(), |e| format!("{:.3}", e / LEVEL * 100.0));
        println!(
            "| {n} | {noise}% | {} | {rel} | {abs} | {} | {} | {} | {} |",
            truth.label(),
            pct(cell.rate(cell.leak)),
            pct(cell.rate(cell.plateau)),
            pct(cell.rate(cell.stable)),
            pct(cell.rate(cell.inconclusive)),
        );
        if !matches!(truth, Truth::Leak(_)) {
            worst_false = worst_false.max(cell.rate(cell.leak));
            false_leaks += cell.leak;
            false_runs += cell.runs;
        }
    }
    println!(
        "\nFalse leaks (stable and plateau truths): {false_leaks} of {false_runs} series \
         ({:.3}%); worst row {:.2}%.",
        100.0 * false_leaks as f64 / false_runs as f64,
        100.0 * worst_false
    );
}

// ---------------------------------------------------------------------------------------------
// Shape families: the real shapes, then the hard ones (heap chunks, curves, held gauges and
// warm-ups).

const KIB: f64 = 1024.0;

/// A memory shape whose truth is known. Run shapes have x = runs 1..n at a 100 MiB level;
/// attach shapes have x = seconds, sampled every 1 s ± 30% (uniform jitter, as the sampler
/// does), n samples.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    /// Flat, one step of +2 MiB at a run drawn uniformly from 30–70% of the series.
    OneOffStep,
    /// +1 MiB every `k` runs (random phase) to the end: a leak of 1/k MiB/run.
    SteadySteps(usize),
    /// An LRU cache that fills, then takes one more step, scaled to n runs: +2 MiB/run over
    /// the first n/4 runs, flat, one +2 MiB step at run 0.55·n + 1, flat to the end (at 24
    /// runs: 6 runs of fill, step at 14).
    FillThenStep,
    /// A cache that fills, then a slower leak: +2 MiB/run over the first n/4 runs, then
    /// +512 KiB/run to the end (the fixture's `--plateau-after 8 --then-leak 512KiB`).
    FillThenLeak,
    /// redis overwriting the same keys: level 12 MiB, +4.1 MiB from run 1 to run 2, then
    /// +2.8 KiB/run.
    FirstFillCreep,
    /// A garbage collector's saw-tooth of period `period` seconds over a floor of 100 MiB that
    /// grows `pct_per_h`% of the floor per hour; each tooth's height is drawn from 20–50% of
    /// the floor; the noise sd applies to the floor.
    Sawtooth { period: f64, pct_per_h: f64 },
    /// The same, whose floor grows `pct_per_h`% per hour for the first 40% of the samples,
    /// then holds (a cache filling under churn): a plateau.
    SawtoothFill { period: f64, pct_per_h: f64 },
    /// A heap growing in chunks that grow by `ratio` (V8, a doubling arena): its content grows
    /// 1 MiB/run; memory is the capacity, a new chunk taking it to `ratio` times itself each
    /// time the content would not fit. Steps grow ×`ratio` and so do the gaps
    /// between them; see `geometric_steps` for the true end rate.
    GeometricSteps(f64),
    /// A leak whose rate rises: `LEVEL + a·(x−1)²` (power 2) or `LEVEL + A·(e^((x−1)/τ) − 1)`
    /// with τ = (n−1)/3 (power 0: exponential), either rising 0.4% of the level per run at the
    /// last run; the true end rate is that derivative.
    Accelerating { power: u32 },
    /// A Prometheus scrape every 1 s of a gauge the exporter refreshes every `every` seconds
    /// (random phase): the series holds each value, its reading noise included, then jumps.
    /// Underneath, memory grows `pct_per_h`% of the level per hour; the true end rate is that
    /// rate. x = scrape times, no jitter. Read as `analyze` reads it: each refresh once where
    /// `sample::prometheus::refreshes` recognises the holds. `raw`: an exporter that stamps its
    /// samples, whose raw samples (`sample::prometheus::fetch`) are one per refresh, at the
    /// first scrape after it.
    HeldScrape {
        every: f64,
        pct_per_h: f64,
        raw: bool,
    },
    /// A warm-up, then a straight leak: +8 MiB rising as 1 − e^(−(x−1)/τ) (τ = 1 run: most of
    /// it in the first three runs), on top of a leak of 256 KiB/run from run 1.
    WarmupThenLeak,
    /// The same in attach mode: +20 MiB with τ = 5 s, on top of +30%/h of the level.
    WarmupThenLeakAttach,
    /// A straight line in attach mode (jittered 1 s sampling): `pct_per_h`% of the level per
    /// hour, 0 for a steady process.
    AttachLine(f64),
}

impl Shape {
    fn label(self) -> String {
        match self {
            Shape::OneOffStep => "one-off step +2 MiB".into(),
            Shape::SteadySteps(k) => format!("steps +1 MiB every {k} runs"),
            Shape::FillThenStep => "fill, then one +2 MiB step".into(),
            Shape::FillThenLeak => "fill +2 MiB/run, then +512 KiB/run".into(),
            Shape::FirstFillCreep => "first fill +4.1 MiB, creep +2.8 KiB/run".into(),
            Shape::Sawtooth { period, pct_per_h } => {
                let p = if period < 1.0 {
                    format!("{period} s")
                } else {
                    format!("{period:.0} s")
                };
                if pct_per_h > 0.0 {
                    format!("saw-tooth {p}, troughs +{pct_per_h}%/h")
                } else {
                    format!("saw-tooth {p}, no retention")
                }
            }
            Shape::SawtoothFill { period, pct_per_h } => {
                format!("saw-tooth {period:.0} s, troughs +{pct_per_h}%/h for 40%, then flat")
            }
            Shape::GeometricSteps(r) => format!("geometric steps ×{r}, content +1 MiB/run"),
            Shape::Accelerating { power: 0 } => "accelerating exp, end +0.4%/run".into(),
            Shape::Accelerating { power } => format!("accelerating x^{power}, end +0.4%/run"),
            Shape::HeldScrape {
                every,
                pct_per_h,
                raw: false,
            } => format!("scrape 1 s of a gauge held {every:.0} s, +{pct_per_h}%/h"),
            Shape::HeldScrape {
                every, pct_per_h, ..
            } => format!("raw samples of a gauge every {every:.0} s, +{pct_per_h}%/h"),
            Shape::WarmupThenLeak => "warm-up +8 MiB, then +256 KiB/run".into(),
            Shape::WarmupThenLeakAttach => "warm-up +20 MiB (τ 5 s), then +30%/h".into(),
            Shape::AttachLine(0.0) => "attach, steady".into(),
            Shape::AttachLine(p) => format!("attach, straight leak +{p}%/h"),
        }
    }

    fn is_attach(self) -> bool {
        matches!(
            self,
            Shape::Sawtooth { .. }
                | Shape::SawtoothFill { .. }
                | Shape::HeldScrape { .. }
                | Shape::WarmupThenLeakAttach
                | Shape::AttachLine(_)
        )
    }

    /// The verdict that is right.
    fn truth(self) -> Verdict {
        match self {
            Shape::OneOffStep | Shape::FillThenStep | Shape::SawtoothFill { .. } => {
                Verdict::Plateau
            }
            Shape::SteadySteps(_)
            | Shape::FillThenLeak
            | Shape::GeometricSteps(_)
            | Shape::Accelerating { .. }
            | Shape::WarmupThenLeak
            | Shape::WarmupThenLeakAttach => Verdict::Leak,
            Shape::FirstFillCreep => Verdict::Stable,
            Shape::Sawtooth { pct_per_h, .. }
            | Shape::HeldScrape { pct_per_h, .. }
            | Shape::AttachLine(pct_per_h) => {
                if pct_per_h > 0.0 {
                    Verdict::Leak
                } else {
                    Verdict::Stable
                }
            }
        }
    }

    /// The true headline rate (leak rate, or a plateau's average fill rate), bytes per x.
    fn rate(self, n: usize) -> Option<f64> {
        match self {
            Shape::SteadySteps(k) => Some(MIB / k as f64),
            Shape::FillThenLeak => Some(512.0 * KIB),
            Shape::FillThenStep => {
                let (fill_runs, step_run) = fill_then_step(n);
                Some((2.0 * MIB * fill_runs + 2.0 * MIB) / (step_run - 1.0))
            }
            Shape::Sawtooth { pct_per_h, .. } | Shape::SawtoothFill { pct_per_h, .. }
                if pct_per_h > 0.0 =>
            {
                Some(pct_per_h / 100.0 * LEVEL / 3600.0)
            }
            Shape::GeometricSteps(_)
            | Shape::Accelerating { .. }
            | Shape::HeldScrape { .. }
            | Shape::WarmupThenLeak
            | Shape::WarmupThenLeakAttach
            | Shape::AttachLine(_) => Some(shape_end_rate(self, n)).filter(|&r| r > 0.0),
            _ => None,
        }
    }

    /// Noise sd (bytes) of each row.
    fn noises(self) -> &'static [f64] {
        match self {
            Shape::FirstFillCreep => &[2.0 * KIB, 4.0 * KIB, 8.0 * KIB],
            Shape::Sawtooth { .. }
            | Shape::SawtoothFill { .. }
            | Shape::HeldScrape { .. }
            | Shape::WarmupThenLeakAttach => &[64.0 * KIB],
            Shape::AttachLine(_) => &[4.0 * KIB, 64.0 * KIB],
            _ => &[64.0 * KIB, 256.0 * KIB, 1024.0 * KIB],
        }
    }

    /// Series lengths of each row.
    fn lengths(self) -> &'static [usize] {
        match self {
            Shape::Sawtooth { .. } | Shape::SawtoothFill { .. } => &[120, 600, 3600],
            Shape::HeldScrape { .. } | Shape::WarmupThenLeakAttach => &[60, 120, 600],
            Shape::AttachLine(_) => &[30, 60, 120, 600],
            Shape::GeometricSteps(_) => &[20, 50],
            Shape::FillThenStep => &[10, 20, 24, 50],
            Shape::FillThenLeak => &[20, 30, 50],
            _ => &[10, 20, 50],
        }
    }

    fn series(self, n: usize, noise: f64, rng: &mut Rng) -> (Vec<f64>, Vec<f64>) {
        if let Shape::Sawtooth { period, pct_per_h } = self {
            return sawtooth(n, period, pct_per_h, f64::INFINITY, noise, rng);
        }
        if let Shape::SawtoothFill { period, pct_per_h } = self {
            return sawtooth(n, period, pct_per_h, 0.4 * n as f64, noise, rng);
        }
        match self {
            Shape::GeometricSteps(ratio) => return geometric_steps(n, ratio, noise, rng),
            Shape::Accelerating { power } => return accelerating(n, power, noise, rng),
            Shape::HeldScrape {
                every,
                pct_per_h,
                raw,
            } => {
                let (x, y) = held_scrape(n, every, pct_per_h, noise, rng);
                if raw {
                    return first_of_each_hold(&x, &y);
                }
                // As `analyze` reads it: each refresh once where the holds are recognised.
                let points: Vec<(f64, f64)> = x.iter().copied().zip(y).collect();
                return match leakwatch::sample::prometheus::refreshes(&points) {
                    Some((firsts, _)) => firsts.into_iter().unzip(),
                    None => points.into_iter().unzip(),
                };
            }
            Shape::WarmupThenLeak => return warmup_then_leak(n, noise, rng),
            Shape::WarmupThenLeakAttach => return warmup_then_leak_attach(n, noise, rng),
            Shape::AttachLine(pct_per_h) => return attach_line(n, pct_per_h, noise, rng),
            _ => {}
        }
        let x: Vec<f64> = (1..=n).map(|v| v as f64).collect();
        let phase = rng.uniform();
        let step_at = (0.3 + 0.4 * rng.uniform()) * n as f64;
        let (fill_runs, step_run) = fill_then_step(n);
        let y = x
            .iter()
            .map(|&r| {
                let mean = match self {
                    Shape::OneOffStep => LEVEL + if r > step_at { 2.0 * MIB } else { 0.0 },
                    Shape::SteadySteps(k) => {
                        let k = k as f64;
                        LEVEL + MIB * ((r - 1.0) / k + phase).floor()
                    }
                    Shape::FillThenStep => {
                        let step = if r >= step_run { 2.0 * MIB } else { 0.0 };
                        LEVEL + 2.0 * MIB * (r - 1.0).min(fill_runs) + step
                    }
                    Shape::FillThenLeak => {
                        let fill_runs = (n as f64 / 4.0).round();
                        LEVEL
                            + 2.0 * MIB * (r - 1.0).min(fill_runs)
                            + 512.0 * KIB * (r - 1.0 - fill_runs).max(0.0)
                    }
                    Shape::FirstFillCreep => {
                        let fill = if r >= 2.0 { 4.1 * MIB } else { 0.0 };
                        12.0 * MIB + fill + 2.8 * KIB * (r - 1.0)
                    }
                    _ => LEVEL,
                };
                mean + noise * rng.normal()
            })
            .collect();
        (x, y)
    }
}

/// (runs of fill, run of the later step) of `Shape::FillThenStep` at n runs.
fn fill_then_step(n: usize) -> (f64, f64) {
    ((n as f64 / 4.0).round(), (0.55 * n as f64).round() + 1.0)
}

/// Jittered sampling (1 s ± 30%) of a saw-tooth: floor `LEVEL·(1 + pct_per_h/100·min(t, stop)/3600)`
/// plus Gaussian noise, plus `height·phase` where each tooth's height is drawn from 20–50% of LEVEL.
fn sawtooth(
    n: usize,
    period: f64,
    pct_per_h: f64,
    stop: f64,
    noise: f64,
    rng: &mut Rng,
) -> (Vec<f64>, Vec<f64>) {
    let mut heights: Vec<f64> = Vec::new();
    let mut t = 0.0;
    let (mut x, mut y) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        t += 0.7 + 0.6 * rng.uniform();
        let cycle = (t / period).floor() as usize;
        while heights.len() <= cycle {
            heights.push((0.2 + 0.3 * rng.uniform()) * LEVEL);
        }
        let floor = LEVEL * (1.0 + pct_per_h / 100.0 * t.min(stop) / 3600.0);
        x.push(t);
        y.push(floor + heights[cycle] * (t / period).fract() + noise * rng.normal());
    }
    (x, y)
}

/// Jittered sample times of attach mode: every 1 s ± 30% (uniform), from about 1 s.
fn jittered_times(n: usize, rng: &mut Rng) -> Vec<f64> {
    let mut t = 0.0;
    (0..n)
        .map(|_| {
            t += 0.7 + 0.6 * rng.uniform();
            t
        })
        .collect()
}

/// `Shape::GeometricSteps`: the content is `x` MiB at run x; the capacity starts at one chunk
/// of `c0 = ratio^u / (ratio − 1)` MiB (u uniform in [0, 1): a random phase of the steps on a
/// log scale) and is multiplied by `ratio` whenever the content would not fit; memory is
/// `LEVEL` + the capacity + noise. With ratio 2: steps at about runs 1–2, 2–4, 4–8, 8–16,
/// 16–32 of 1–2, 2–4, … MiB.
///
/// The true end rate (`geometric_rate`) is the memory's long-run rate, steps included (the
/// contract's staircase): the capacity C(x) is the content times a factor that runs from 1
/// (just before a step) to `ratio` (just after) once per step on a log scale of x, so C(x)/x
/// never settles; its mean over that phase, the rate from here on of a future whose phase is
/// unknown, is 1 MiB/run · (ratio − 1)/ln(ratio): 1.233 MiB/run at ×1.5, 1.443 at ×2. The
/// content's own 1 MiB/run is the floor of it (the slope through the points just before the
/// steps), `ratio` MiB/run the ceiling (just after).
fn geometric_steps(n: usize, ratio: f64, noise: f64, rng: &mut Rng) -> (Vec<f64>, Vec<f64>) {
    let first = ratio.powf(rng.uniform()) / (ratio - 1.0) * MIB;
    let x: Vec<f64> = (1..=n).map(|v| v as f64).collect();
    let mut capacity = first;
    let y = x
        .iter()
        .map(|&r| {
            while capacity < r * MIB {
                capacity *= ratio;
            }
            LEVEL + capacity + noise * rng.normal()
        })
        .collect();
    (x, y)
}

/// `Shape::GeometricSteps`' true end rate, bytes per run (see `geometric_steps`).
fn geometric_rate(ratio: f64) -> f64 {
    MIB * (ratio - 1.0) / ratio.ln()
}

/// `Shape::Accelerating`: the rate at the last run, fraction of the level per run.
const ACCELERATING_END: f64 = 0.004;

/// `Shape::Accelerating`: a parabola `a·(x−1)²` (power 2) or an exponential
/// `A·(e^((x−1)/τ) − 1)` with τ = (n−1)/3 (power 0, its rate rising 20-fold over the series),
/// each with the slope `ACCELERATING_END · LEVEL` at run n.
fn accelerating(n: usize, power: u32, noise: f64, rng: &mut Rng) -> (Vec<f64>, Vec<f64>) {
    let span = (n - 1) as f64;
    let end = ACCELERATING_END * LEVEL;
    let x: Vec<f64> = (1..=n).map(|v| v as f64).collect();
    let y = x
        .iter()
        .map(|&r| {
            let rise = if power == 0 {
                let tau = span / 3.0;
                end * tau / 3.0_f64.exp() * (((r - 1.0) / tau).exp() - 1.0)
            } else {
                let p = f64::from(power);
                end / (p * span.powf(p - 1.0)) * (r - 1.0).powf(p)
            };
            LEVEL + rise + noise * rng.normal()
        })
        .collect();
    (x, y)
}

/// `Shape::HeldScrape`: scrapes at x = 1, 2, …, n s of a gauge refreshed every `every` s from
/// a random phase; each refresh reads `LEVEL·(1 + pct_per_h/100 · t/3600)` at its own time t
/// plus its own noise, which the gauge then holds until the next refresh.
fn held_scrape(
    n: usize,
    every: f64,
    pct_per_h: f64,
    noise: f64,
    rng: &mut Rng,
) -> (Vec<f64>, Vec<f64>) {
    let phase = every * rng.uniform();
    let x: Vec<f64> = (1..=n).map(|v| v as f64).collect();
    let mut held: Option<(f64, f64)> = None;
    let y = x
        .iter()
        .map(|&t| {
            let refreshed = phase + ((t - phase) / every).floor() * every;
            let (at, value) = match held {
                Some((at, value)) if at == refreshed => (at, value),
                _ => {
                    let value = LEVEL * (1.0 + pct_per_h / 100.0 * refreshed / 3600.0)
                        + noise * rng.normal();
                    (refreshed, value)
                }
            };
            held = Some((at, value));
            value
        })
        .collect();
    (x, y)
}

/// The first point of each run of equal values: a held gauge read as its raw samples.
fn first_of_each_hold(x: &[f64], y: &[f64]) -> (Vec<f64>, Vec<f64>) {
    x.iter()
        .zip(y)
        .enumerate()
        .filter(|&(i, (_, v))| i == 0 || y[i - 1] != *v)
        .map(|(_, (&x, &y))| (x, y))
        .unzip()
}

/// `Shape::WarmupThenLeak`: `8 MiB·(1 − e^(−(x−1)))` + 256 KiB/run from run 1.
fn warmup_then_leak(n: usize, noise: f64, rng: &mut Rng) -> (Vec<f64>, Vec<f64>) {
    let x: Vec<f64> = (1..=n).map(|v| v as f64).collect();
    let y = x
        .iter()
        .map(|&r| {
            LEVEL
                + 8.0 * MIB * (1.0 - (-(r - 1.0)).exp())
                + 256.0 * KIB * (r - 1.0)
                + noise * rng.normal()
        })
        .collect();
    (x, y)
}

/// `Shape::WarmupThenLeakAttach`: `20 MiB·(1 − e^(−t/5 s))` + 30%/h of the level, sampled
/// at jittered times.
fn warmup_then_leak_attach(n: usize, noise: f64, rng: &mut Rng) -> (Vec<f64>, Vec<f64>) {
    let x = jittered_times(n, rng);
    let y = x
        .iter()
        .map(|&t| {
            LEVEL
                + 20.0 * MIB * (1.0 - (-t / 5.0).exp())
                + 0.3 * LEVEL * t / 3600.0
                + noise * rng.normal()
        })
        .collect();
    (x, y)
}

/// `Shape::AttachLine`: `LEVEL·(1 + pct_per_h/100 · t/3600)` at jittered times.
fn attach_line(n: usize, pct_per_h: f64, noise: f64, rng: &mut Rng) -> (Vec<f64>, Vec<f64>) {
    let x = jittered_times(n, rng);
    let y = x
        .iter()
        .map(|&t| LEVEL * (1.0 + pct_per_h / 100.0 * t / 3600.0) + noise * rng.normal())
        .collect();
    (x, y)
}

/// The hard shapes: heap chunks, curves, held gauges and warm-ups (the shapes of runtimes and
/// exporters; `REAL_SHAPES` are the others).
const HARD_SHAPES: [Shape; 17] = [
    Shape::GeometricSteps(1.5),
    Shape::GeometricSteps(2.0),
    Shape::Accelerating { power: 2 },
    Shape::Accelerating { power: 0 },
    Shape::HeldScrape {
        every: 15.0,
        pct_per_h: 0.0,
        raw: false,
    },
    Shape::HeldScrape {
        every: 15.0,
        pct_per_h: 0.0,
        raw: true,
    },
    Shape::HeldScrape {
        every: 15.0,
        pct_per_h: 3.0,
        raw: false,
    },
    Shape::HeldScrape {
        every: 15.0,
        pct_per_h: 3.0,
        raw: true,
    },
    Shape::HeldScrape {
        every: 15.0,
        pct_per_h: 30.0,
        raw: false,
    },
    Shape::HeldScrape {
        every: 15.0,
        pct_per_h: 30.0,
        raw: true,
    },
    Shape::HeldScrape {
        every: 15.0,
        pct_per_h: 1800.0,
        raw: false,
    },
    Shape::HeldScrape {
        every: 15.0,
        pct_per_h: 1800.0,
        raw: true,
    },
    Shape::WarmupThenLeak,
    Shape::WarmupThenLeakAttach,
    Shape::AttachLine(0.0),
    Shape::AttachLine(3.0),
    Shape::AttachLine(30.0),
];

/// Every shape of the study, the real shapes first; only the hard ones with
/// `LEAKWATCH_TEST_STUDY_SHAPES=hard` (a quick look at heap chunks, curves, held gauges and
/// warm-ups).
fn all_shapes() -> impl Iterator<Item = Shape> {
    let only_hard = std::env::var("LEAKWATCH_TEST_STUDY_SHAPES").is_ok_and(|v| v == "hard");
    REAL_SHAPES
        .into_iter()
        .filter(move |_| !only_hard)
        .chain(HARD_SHAPES)
}

/// The real shapes: steps, fills and creeps over runs, saw-teeth in attach mode.
const REAL_SHAPES: [Shape; 18] = [
    Shape::OneOffStep,
    Shape::SteadySteps(3),
    Shape::SteadySteps(5),
    Shape::FillThenStep,
    Shape::FillThenLeak,
    Shape::FirstFillCreep,
    Shape::Sawtooth {
        period: 0.5,
        pct_per_h: 0.0,
    },
    Shape::Sawtooth {
        period: 1.0,
        pct_per_h: 0.0,
    },
    Shape::Sawtooth {
        period: 7.0,
        pct_per_h: 0.0,
    },
    Shape::Sawtooth {
        period: 30.0,
        pct_per_h: 0.0,
    },
    Shape::Sawtooth {
        period: 1.0,
        pct_per_h: 0.3,
    },
    Shape::Sawtooth {
        period: 7.0,
        pct_per_h: 0.3,
    },
    Shape::Sawtooth {
        period: 1.0,
        pct_per_h: 3.0,
    },
    Shape::Sawtooth {
        period: 30.0,
        pct_per_h: 3.0,
    },
    Shape::Sawtooth {
        period: 1.0,
        pct_per_h: 30.0,
    },
    Shape::Sawtooth {
        period: 30.0,
        pct_per_h: 30.0,
    },
    Shape::SawtoothFill {
        period: 1.0,
        pct_per_h: 30.0,
    },
    Shape::SawtoothFill {
        period: 30.0,
        pct_per_h: 30.0,
    },
];

/// Outcome counts of one (shape, n, noise) row.
#[derive(Default)]
struct ShapeCell {
    runs: usize,
    counts: [usize; 4],
    troughs: usize,
    /// Sum of |headline rate − true rate| / true rate, over series with a rate.
    rel_err: f64,
    rated: usize,
    /// The first wrong leak verdict's reason, for failure messages.
    false_leak: Option<String>,
}

impl ShapeCell {
    fn share(&self, v: Verdict) -> f64 {
        self.counts[v as usize] as f64 / self.runs as f64
    }
}

/// Thresholds as `fit::thresholds` sets them for the shape's x: 64 KiB or 0.1% of the level
/// per run, or per hour for x = seconds.
fn shape_thresholds(shape: Shape) -> Thresholds {
    let mut t = Thresholds::default();
    if shape.is_attach() {
        t.min_slope_fraction = 0.001 / 3600.0;
        t.min_slope_abs = 64.0 * KIB / 3600.0;
    } else {
        t.min_slope_abs = 64.0 * KIB;
    }
    t
}

/// The shape's series for one seed (a distinct, reproducible stream per row and seed).
fn shape_series(shape: Shape, n: usize, noise: f64, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = Rng::new(seed ^ ((n as u64) << 40) ^ (noise.to_bits() >> 5) ^ 0x5eed);
    shape.series(n, noise, &mut rng)
}

fn simulate_shape(shape: Shape, n: usize, noise: f64, seeds: u64) -> ShapeCell {
    let t = shape_thresholds(shape);
    let mut cell = ShapeCell::default();
    for seed in 0..seeds {
        let (x, y) = shape_series(shape, n, noise, seed);
        let c = classify(&x, &y, None, &t);
        say_reason(&format!("{} n={n} seed={seed}", shape.label()), &c);
        cell.runs += 1;
        cell.counts[c.verdict as usize] += 1;
        if c.verdict == Verdict::Leak && shape.truth() != Verdict::Leak && cell.false_leak.is_none()
        {
            cell.false_leak = Some(format!("seed {seed}: {:?} {}", c.decided_by, c.reason));
        }
        if c.decided_by == verdict::DecidedBy::Troughs {
            cell.troughs += 1;
        }
        if let (Some(truth), Some(got)) = (shape.rate(n), c.rate) {
            if c.verdict == shape.truth() {
                cell.rel_err += (got - truth).abs() / truth;
                cell.rated += 1;
            }
        }
    }
    cell
}

/// Asserts on `seeds` series per row of `shapes` what the shape families must meet: no more
/// than 0.5% false leaks on a shape that does not leak, a fill then a step read as a plateau, a
/// fill then a slower leak found at the end's rate, redis's first fill and creep stable, a
/// trough leak of 30%/h found in 600 samples, and saw-teeth of 600 samples judged by their
/// troughs.
fn check_shapes(shapes: &[Shape], lengths: &[usize], seeds: u64) {
    for &shape in shapes {
        for &n in shape.lengths().iter().filter(|n| lengths.contains(n)) {
            for &noise in shape.noises() {
                let cell = simulate_shape(shape, n, noise, seeds);
                let what = format!("{} n={n} noise={:.0} KiB", shape.label(), noise / KIB);
                let leak = cell.share(Verdict::Leak);
                if shape.truth() != Verdict::Leak {
                    assert!(
                        leak <= 0.005,
                        "{what}: false leaks {leak}, {:?}",
                        cell.false_leak
                    );
                }
                // A plateau needs the end's 95% CI within the threshold (64 KiB/run): ten flat
                // runs after the step pin it that well most of the time, in 256 KiB noise less.
                if shape == Shape::FillThenStep && n == 24 && noise <= 256.0 * KIB {
                    let plateau = cell.share(Verdict::Plateau);
                    let need = if noise <= 64.0 * KIB { 0.9 } else { 0.85 };
                    assert!(plateau >= need, "{what}: plateau {plateau}");
                }
                // A fill, then a slower leak: the leak at the end's rate, not a plateau.
                if shape == Shape::FillThenLeak && noise <= 256.0 * KIB {
                    assert!(leak >= 0.95, "{what}: found {leak}");
                    let err = cell.rel_err / cell.rated as f64;
                    assert!(err <= 0.05, "{what}: rate error {err}");
                }
                if shape == Shape::FirstFillCreep {
                    let stable = cell.share(Verdict::Stable);
                    assert!(stable >= 0.99, "{what}: stable {stable}");
                }
                // A trough leak of 30%/h under 20–50% teeth: found most of the time in 600
                // samples (a trough leak of 0.3%/h needs far more: see the README).
                if let Shape::Sawtooth { pct_per_h, .. } = shape
                    && pct_per_h >= 30.0
                    && n >= 600
                {
                    assert!(leak >= 0.6, "{what}: found {leak}");
                }
                if shape.is_attach() {
                    let by_troughs = cell.troughs as f64 / cell.runs as f64;
                    assert!(
                        n < 600 || by_troughs >= 0.95,
                        "{what}: by troughs {by_troughs}"
                    );
                }
            }
        }
    }
}

#[test]
fn shapes_in_run_mode() {
    check_shapes(&REAL_SHAPES[..6], &[10, 20, 24, 30, 50], 200);
}

/// Saw-teeth are slow in debug builds (Mann–Kendall and Theil–Sen on 600 points), so few seeds.
#[test]
fn sawteeth_at_120_and_600_samples() {
    check_shapes(&REAL_SHAPES[6..], &[120, 600], 20);
}

#[test]
#[ignore = "slow: prints the README (Accuracy) shape table"]
fn print_shape_table() {
    // LEAKWATCH_TEST_SHAPE_SEEDS=200 for a quick look.
    let seeds: u64 = std::env::var("LEAKWATCH_TEST_SHAPE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    println!(
        "| shape | n | noise sd | truth | leak | plateau | stable | inconclusive | by troughs | \\|rate err\\| |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|");
    // LEAKWATCH_TEST_SHAPE_ONLY keeps the families whose label holds it.
    let only = std::env::var("LEAKWATCH_TEST_SHAPE_ONLY").unwrap_or_default();
    for shape in all_shapes().filter(|s| s.label().contains(&only)) {
        for &n in shape.lengths() {
            for &noise in shape.noises() {
                let cell = simulate_shape(shape, n, noise, seeds);
                if let Some(why) = cell
                    .false_leak
                    .as_ref()
                    .filter(|_| std::env::var("LEAKWATCH_TEST_SHAPE_WHY").is_ok())
                {
                    eprintln!("FALSE {} n={n}: {why}", shape.label());
                }
                let err = if cell.rated > 0 {
                    format!("{:.1}%", 100.0 * cell.rel_err / cell.rated as f64)
                } else {
                    "—".into()
                };
                println!(
                    "| {} | {n} | {:.0} KiB | {} | {} | {} | {} | {} | {} | {err} |",
                    shape.label(),
                    noise / KIB,
                    shape.truth().as_str(),
                    pct2(cell.share(Verdict::Leak)),
                    pct2(cell.share(Verdict::Plateau)),
                    pct2(cell.share(Verdict::Stable)),
                    pct2(cell.share(Verdict::Inconclusive)),
                    pct2(cell.troughs as f64 / cell.runs as f64),
                );
            }
        }
    }
}

/// The true end rate of a run-mode truth at n runs: what the series adds per run at its last
/// point (bytes per run).
fn truth_end_rate(truth: Truth, n: usize) -> f64 {
    let span = (n - 1) as f64;
    match truth {
        Truth::Stable | Truth::PlateauRamp(_) => 0.0,
        Truth::Leak(f) => f * LEVEL,
        Truth::PlateauExp(k) => PLATEAU_GROWTH * LEVEL * k / span * (-k).exp(),
    }
}

/// The true end rate of a shape at n points (bytes per x): the long-run rate of steps that
/// keep coming, the end's slope otherwise.
fn shape_end_rate(shape: Shape, n: usize) -> f64 {
    match shape {
        Shape::SteadySteps(k) => MIB / k as f64,
        Shape::FillThenLeak => 512.0 * KIB,
        Shape::FirstFillCreep => 2.8 * KIB,
        Shape::Sawtooth { pct_per_h, .. } => pct_per_h / 100.0 * LEVEL / 3600.0,
        Shape::OneOffStep | Shape::FillThenStep | Shape::SawtoothFill { .. } => 0.0,
        Shape::GeometricSteps(ratio) => geometric_rate(ratio),
        Shape::Accelerating { .. } => ACCELERATING_END * LEVEL,
        Shape::HeldScrape { pct_per_h, .. } | Shape::AttachLine(pct_per_h) => {
            pct_per_h / 100.0 * LEVEL / 3600.0
        }
        Shape::WarmupThenLeak => 256.0 * KIB + 8.0 * MIB * (-((n - 1) as f64)).exp(),
        // The warm-up's own slope at t = n s (the last sample's mean time): under 0.3% of the
        // leak from 60 samples on.
        Shape::WarmupThenLeakAttach => {
            0.3 * LEVEL / 3600.0 + 20.0 * MIB / 5.0 * (-(n as f64) / 5.0).exp()
        }
    }
}

/// Share of series whose end-rate interval (`Classification::end_rate`) holds the true end
/// rate, and the share with no interval at all.
#[derive(Default)]
struct Coverage {
    runs: usize,
    covered: usize,
    missing: usize,
}

impl Coverage {
    fn add(&mut self, c: &verdict::Classification, truth: f64) {
        self.runs += 1;
        match c.end_rate {
            Some(e) if e.ci95.0 <= truth && truth <= e.ci95.1 => self.covered += 1,
            Some(_) => {}
            None => self.missing += 1,
        }
    }

    fn share(&self) -> f64 {
        self.covered as f64 / self.runs.max(1) as f64
    }
}

fn rate_coverage(n: usize, noise_pct: f64, truth: Truth, seeds: u64) -> Coverage {
    let x: Vec<f64> = (1..=n).map(|v| v as f64).collect();
    let mut cov = Coverage::default();
    for seed in 0..seeds {
        let y = truth.series(&x, noise_pct, seed);
        let c = classify(&x, &y, None, &Thresholds::default());
        say_reason(
            &format!("{truth:?} n={n} noise={noise_pct} seed={seed}"),
            &c,
        );
        cov.add(&c, truth_end_rate(truth, n));
    }
    cov
}

/// With LEAKWATCH_TEST_SHAPE_REASONS set, every series' word and reason on stderr: two
/// builds' lists show whether a change of wording changed any sentence.
fn say_reason(what: &str, c: &verdict::Classification) {
    if std::env::var_os("LEAKWATCH_TEST_SHAPE_REASONS").is_some() {
        eprintln!("{what}: {:?} {}", c.verdict, c.reason);
    }
}

/// The end rate's interval holds the truth in ≥ 90% of `seeds` series of the row: the
/// asserted form of a ≥ 93% row of the coverage table (a row at 95% falls under 93% by chance
/// one time in eight at 200 seeds).
fn assert_covered(shape: Shape, n: usize, noise: f64, seeds: u64) {
    let cov = shape_coverage(shape, n, noise, seeds);
    assert!(
        cov.share() >= 0.9,
        "{} n={n} noise={:.0} KiB: {}",
        shape.label(),
        noise / KIB,
        cov.share()
    );
}

fn shape_coverage(shape: Shape, n: usize, noise: f64, seeds: u64) -> Coverage {
    let t = shape_thresholds(shape);
    let mut cov = Coverage::default();
    for seed in 0..seeds {
        let (x, y) = shape_series(shape, n, noise, seed);
        let c = classify(&x, &y, None, &t);
        say_reason(
            &format!("{} n={n} noise={noise} seed={seed}", shape.label()),
            &c,
        );
        cov.add(&c, shape_end_rate(shape, n));
    }
    cov
}

#[test]
#[ignore = "slow: prints the coverage of the end rate's interval (docs/accuracy.md)"]
fn print_coverage_table() {
    let seeds: u64 = std::env::var("LEAKWATCH_TEST_COVERAGE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    println!("| family | n | noise sd | true end rate | covered | no interval |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (n, noise, truth) in grid() {
        let cov = rate_coverage(n, noise, truth, seeds);
        println!(
            "| {} | {n} | {noise}% | {:.3}%/run | {} | {} |",
            truth.label(),
            truth_end_rate(truth, n) / LEVEL * 100.0,
            pct(cov.share()),
            pct(cov.missing as f64 / cov.runs as f64),
        );
    }
    let seeds = seeds / 5;
    for shape in all_shapes() {
        for &n in shape.lengths().iter().filter(|&&n| n <= 600) {
            for &noise in shape.noises() {
                let cov = shape_coverage(shape, n, noise, seeds);
                println!(
                    "| {} | {n} | {:.0} KiB | {:.1} KiB/x | {} | {} |",
                    shape.label(),
                    noise / KIB,
                    shape_end_rate(shape, n) / KIB,
                    pct(cov.share()),
                    pct(cov.missing as f64 / cov.runs as f64),
                );
            }
        }
    }
}

/// The contract's estimate is honest: its 95% interval holds the true end rate in ≥ 93% of
/// series (`print_coverage_table`, 1,000 seeds a row, docs/accuracy.md), asserted here at 90%
/// on 200 seeds a row (a row at 95% falls under 93% by chance one time in eight). Rows kept
/// out, below 93% in the table and said so in the docs: steps every 5 runs seen over 10 runs
/// (one step reads as a one-off: 81%). Saw-teeth (attach, 120 samples and more: slow in
/// debug builds) are not asserted here; every row is covered in 95–100% (1,000 seeds,
/// `LEAKWATCH_TEST_MISSES_ONLY=saw-tooth … print_coverage_misses`; a 1 s saw-tooth over 120
/// samples: 96.0% read by the contract's troughs, 91.5% without them). A saturating curve
/// at 50 runs and 0.1% noise (its end segment overstates the end: 85.5%) is in since
/// its interval reaches down to a parabola's end when it bends down (`Ctx::may_slow_down`).
#[test]
fn end_rate_intervals_cover_the_truth() {
    const SEEDS: u64 = 200;
    for (n, noise, truth) in grid() {
        let cov = rate_coverage(n, noise, truth, SEEDS);
        assert!(
            cov.share() >= 0.9,
            "{} n={n} noise={noise}%: {}",
            truth.label(),
            cov.share()
        );
    }
    for shape in REAL_SHAPES {
        for &n in shape.lengths().iter().filter(|&&n| n <= 50) {
            if shape == Shape::SteadySteps(5) && n == 10 {
                continue;
            }
            for &noise in shape.noises() {
                assert_covered(shape, n, noise, SEEDS);
            }
        }
    }
    // Leaks that speed up (their interval reaches up to a parabola's end rate). The
    // exponential over 10 runs at 256 KiB or 1 MiB of noise is covered in 97.2% and 96.7%
    // (1,000 seeds) with the last six runs' parabola read and falling lines widened too; with
    // only a rising line widened, and only by a parabola through all ten points (it lags an
    // exponential's end), 82% and 80%. At 64 KiB it reaches 93% since the last six runs'
    // parabola is read where the last quarter is under six runs (96.7%, 500 seeds; 91.8%
    // without that).
    for shape in [
        Shape::Accelerating { power: 2 },
        Shape::Accelerating { power: 0 },
    ] {
        for &n in shape.lengths() {
            for &noise in shape.noises() {
                assert_covered(shape, n, noise, SEEDS);
            }
        }
    }
    let cov = shape_coverage(Shape::Accelerating { power: 0 }, 10, 64.0 * KIB, 500);
    assert!(cov.share() >= 0.93, "exp n=10 64 KiB: {}", cov.share());
    // A gauge held 15 s, read once per refresh (`prometheus::refreshes`), its first refresh
    // placed one period before its second (read at the first scrape, up to 15 s late, it
    // looks like a warm-up: 56–77% covered). At 60 s, 4 or 5 refreshes, every one with an
    // interval since four points are enough (t with two degrees of freedom): 96–99% covered
    // (500 seeds); 85–92% if the 7–14% of windows holding four refreshes had none.
    for pct_per_h in [0.0, 3.0, 30.0, 1800.0] {
        let shape = Shape::HeldScrape {
            every: 15.0,
            pct_per_h,
            raw: false,
        };
        for &n in shape.lengths() {
            let cov = shape_coverage(shape, n, 64.0 * KIB, SEEDS);
            assert!(
                cov.share() >= 0.9 && cov.missing == 0,
                "{} n={n}: {} ({} without an interval)",
                shape.label(),
                cov.share(),
                cov.missing
            );
        }
    }
}

/// Why intervals miss: for each row of the study's families, the share covered and the first
/// `LEAKWATCH_TEST_MISSES_SHOWN` (default 3) seeds whose end-rate interval misses the truth,
/// with the estimator (`end_rate.from`), the interval and the reason.
/// `LEAKWATCH_TEST_MISSES_SEEDS` series a row (default 200); `LEAKWATCH_TEST_MISSES_ONLY`
/// keeps the families whose label holds it.
#[test]
#[ignore = "slow: prints the misses of the end rate's interval on every shape family"]
fn print_coverage_misses() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let (seeds, shown) = (
        env("LEAKWATCH_TEST_MISSES_SEEDS", 200),
        env("LEAKWATCH_TEST_MISSES_SHOWN", 3),
    );
    let only = std::env::var("LEAKWATCH_TEST_MISSES_ONLY").unwrap_or_default();
    for shape in REAL_SHAPES
        .into_iter()
        .chain(HARD_SHAPES)
        .filter(|s| s.label().contains(&only))
    {
        for &n in shape.lengths() {
            for &noise in shape.noises() {
                let (t, truth) = (shape_thresholds(shape), shape_end_rate(shape, n));
                let (mut cov, mut misses) = (Coverage::default(), Vec::new());
                let mut from = std::collections::BTreeMap::<String, usize>::new();
                // Misses by estimator and side: the interval wholly above or below the truth.
                let mut missed = std::collections::BTreeMap::<String, usize>::new();
                for seed in 0..seeds {
                    let (x, y) = shape_series(shape, n, noise, seed);
                    let c = classify(&x, &y, None, &t);
                    let before = cov.covered;
                    cov.add(&c, truth);
                    let name = c
                        .end_rate
                        .map_or("none".into(), |e| format!("{:?}", e.from));
                    *from.entry(name).or_default() += 1;
                    if let Some(e) = c.end_rate.filter(|_| cov.covered == before) {
                        let side = if e.ci95.0 > truth { "high" } else { "low" };
                        *missed.entry(format!("{:?} {side}", e.from)).or_default() += 1;
                    }
                    if cov.covered == before && (misses.len() as u64) < shown {
                        // As multiples of the truth, or of the threshold for a zero truth.
                        let unit = if truth > 0.0 {
                            truth
                        } else {
                            threshold_of(&t, &y)
                        };
                        let ci = c.end_rate.map(|e| (e.ci95.0 / unit, e.ci95.1 / unit));
                        let per = if truth > 0.0 { "truth" } else { "threshold" };
                        misses.push(format!(
                            "  seed {seed}: {} from {:?} CI/{per} {ci:.2?}: {}",
                            c.verdict.as_str(),
                            c.end_rate.map(|e| e.from),
                            c.reason
                        ));
                    }
                }
                println!(
                    "{} n={n} noise={:.0} KiB: covered {} estimators {from:?} misses {missed:?}",
                    shape.label(),
                    noise / KIB,
                    pct(cov.share())
                );
                for m in misses {
                    println!("{m}");
                }
            }
        }
    }
}

/// The practical threshold of a series as `verdict` takes it, bytes per x unit:
/// `max(min_slope_abs, min_slope_fraction · |mean level|)` (the mean of all its points here;
/// the verdict's is after warm-up).
fn threshold_of(t: &Thresholds, y: &[f64]) -> f64 {
    let level = stats::mean(y).unwrap_or(LEVEL).abs();
    t.min_slope_abs.max(t.min_slope_fraction * level)
}

// ---------------------------------------------------------------------------------------------
// Power: leaks of twice the threshold.

/// One power row: a straight leak of exactly twice the threshold (0.2% of its mean level,
/// `LEVEL`, per run, or per hour in attach mode) under Gaussian noise of `noise_pct`% of the
/// level; and the same series without the leak (a steady process).
#[derive(Default)]
struct PowerCell {
    runs: usize,
    /// The verdict found the leak.
    found: usize,
    /// A plain least-squares line's 95% CI lies wholly above the threshold: the yardstick.
    ols_found: usize,
    /// The steady series was called a leak.
    false_leaks: usize,
    /// The first leaks the verdict missed that the yardstick found: seed, estimator, reason.
    misses: Vec<String>,
}

/// x: runs 1..=n, or `n` jittered samples (1 s ± 30%) in attach mode; y centred on `LEVEL` at
/// the mean x, so the threshold (0.1% of the mean level) is exactly half the leak.
fn power_cell(attach: bool, n: usize, noise_pct: f64, seeds: u64) -> PowerCell {
    let t = if attach {
        shape_thresholds(Shape::AttachLine(0.0))
    } else {
        shape_thresholds(Shape::WarmupThenLeak)
    };
    let per_x = if attach { 3600.0 } else { 1.0 };
    let slope = 0.002 * LEVEL / per_x;
    let mut cell = PowerCell::default();
    for seed in 0..seeds {
        let mut rng = Rng::new(seed ^ ((n as u64) << 40) ^ (noise_pct.to_bits() >> 7) ^ 0x90e);
        let x: Vec<f64> = if attach {
            jittered_times(n, &mut rng)
        } else {
            (1..=n).map(|v| v as f64).collect()
        };
        let xm = stats::mean(&x).unwrap_or(0.0);
        let noise: Vec<f64> = x
            .iter()
            .map(|_| noise_pct / 100.0 * LEVEL * rng.normal())
            .collect();
        let leak: Vec<f64> = x
            .iter()
            .zip(&noise)
            .map(|(&xi, e)| LEVEL + slope * (xi - xm) + e)
            .collect();
        let steady: Vec<f64> = noise.iter().map(|e| LEVEL + e).collect();
        cell.runs += 1;
        let c = classify(&x, &leak, None, &t);
        let found = c.verdict == Verdict::Leak;
        cell.found += usize::from(found);
        let thr = threshold_of(&t, &leak);
        let ols_found = stats::ols(&x, &leak)
            .and_then(|f| f.slope_ci95)
            .is_some_and(|ci| ci.0 > thr);
        cell.ols_found += usize::from(ols_found);
        if ols_found && !found && cell.misses.len() < 3 {
            let ci = c.end_rate.map(|e| (e.ci95.0 / thr, e.ci95.1 / thr));
            cell.misses.push(format!(
                "seed {seed}: {} from {:?}, CI/threshold {ci:.2?}: {}",
                c.verdict.as_str(),
                c.end_rate.map(|e| e.from),
                c.reason
            ));
        }
        if classify(&x, &steady, None, &t).verdict == Verdict::Leak {
            cell.false_leaks += 1;
        }
    }
    cell
}

/// Noise sd (% of the level) of the power rows: four for both modes, and in attach mode three
/// quieter ones where 60 samples can resolve 0.2%/h at all (a steady process's anon moves by
/// a few pages: 4 KiB is 0.004% of 100 MiB).
const POWER_NOISE_PCT: [f64; 4] = [0.1, 0.25, 0.5, 1.0];
const POWER_QUIET_PCT: [f64; 3] = [0.0005, 0.001, 0.002];

#[test]
#[ignore = "prints the power table (docs/accuracy.md)"]
fn print_power_table() {
    let seeds: u64 = std::env::var("LEAKWATCH_TEST_POWER_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    println!(
        "| mode | points | noise sd | leak 2× threshold found | OLS 95% CI above threshold | steady called leak |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let rows = POWER_NOISE_PCT
        .iter()
        .map(|&p| (false, p))
        .chain(POWER_QUIET_PCT.iter().map(|&p| (true, p)))
        .chain(POWER_NOISE_PCT.iter().map(|&p| (true, p)));
    for (attach, noise) in rows {
        let (mode, n) = if attach {
            ("attach 60 s at 1 s", 60)
        } else {
            ("run", 20)
        };
        let c = power_cell(attach, n, noise, seeds);
        println!(
            "| {mode} | {n} | {noise}% | {} | {} | {} |",
            pct(c.found as f64 / c.runs as f64),
            pct(c.ols_found as f64 / c.runs as f64),
            pct2(c.false_leaks as f64 / c.runs as f64),
        );
        if std::env::var("LEAKWATCH_TEST_POWER_WHY").is_ok() {
            for m in &c.misses {
                eprintln!("MISSED {mode} {noise}%: {m}");
            }
        }
    }
}

/// The hard families (heap chunks, curves, held gauges and warm-ups) where the estimators meet
/// the contract (the rest are below its targets in docs/accuracy.md, with why): a steady
/// attached process, or a steady gauge held between an exporter's refreshes, is never a leak
/// (≤ 0.1%: none of 200 per row here, none of 2,000 in the table), and the end rate's interval
/// holds the truth in ≥ 90% of 200 series (as `end_rate_intervals_cover_the_truth`) on the
/// rows at ≥ 93% in the table (x² at 10 runs and 64 KiB needs `CurveEnd`: 0% without it).
#[test]
fn hard_families_that_meet_the_contract() {
    const SEEDS: u64 = 200;
    for n in [30, 60, 120] {
        for &noise in Shape::AttachLine(0.0).noises() {
            let cell = simulate_shape(Shape::AttachLine(0.0), n, noise, SEEDS);
            assert_eq!(
                cell.counts[Verdict::Leak as usize],
                0,
                "steady attach n={n} noise={:.0} KiB: {:?}",
                noise / KIB,
                cell.false_leak
            );
        }
    }
    // A steady gauge its exporter holds 15 s, read once per refresh: never a leak (counting
    // each repeat as an observation makes 2.2–2.7% of them leaks).
    let held = Shape::HeldScrape {
        every: 15.0,
        pct_per_h: 0.0,
        raw: false,
    };
    for n in [60, 120, 600] {
        let cell = simulate_shape(held, n, 64.0 * KIB, SEEDS);
        assert_eq!(cell.counts[Verdict::Leak as usize], 0, "held n={n}");
    }
    let covered: [(Shape, &[usize]); 9] = [
        (Shape::GeometricSteps(1.5), &[20, 50]),
        // Covered with the staircase's phase in its interval (`segments::phase_spread`;
        // without it 68–78% at 50 runs and 89–94% at 20) and, at 50 runs, the pace up to the
        // last step (without it 87.5–92.5%).
        (Shape::GeometricSteps(2.0), &[20, 50]),
        (Shape::WarmupThenLeak, &[10, 20]),
        // A warm-up the change-point search cuts into several slowing rises: the interval
        // holds the end segment's too (`staircase`; 18.5% at 600 s without it).
        (Shape::WarmupThenLeakAttach, &[60, 120, 600]),
        // Read once per refresh (`prometheus::refreshes`): 60 s are 4–5 refreshes, "only 4
        // points" in 43% of them (the raw family's 60 s row, the same points).
        (
            Shape::HeldScrape {
                every: 15.0,
                pct_per_h: 1800.0,
                raw: false,
            },
            &[120, 600],
        ),
        // What `analyze` reads of a held gauge since it reads raw samples: 600 s (40 points).
        (
            Shape::HeldScrape {
                every: 15.0,
                pct_per_h: 1800.0,
                raw: true,
            },
            &[600],
        ),
        (Shape::AttachLine(0.0), &[30, 60, 120]),
        (Shape::AttachLine(3.0), &[30, 60, 120]),
        (Shape::AttachLine(30.0), &[30, 60, 120]),
    ];
    let rows = covered.into_iter().flat_map(|(shape, lengths)| {
        lengths
            .iter()
            .flat_map(move |&n| shape.noises().iter().map(move |&noise| (shape, n, noise)))
    });
    // And single rows at ≥ 93% in the table (a leak that speeds up: through the parabola's end
    // slope; a warm-up then a slower leak: through the end segment's interval, kept).
    let single_rows = [
        (Shape::Accelerating { power: 2 }, 10, 64.0 * KIB),
        (Shape::Accelerating { power: 2 }, 50, 64.0 * KIB),
        (Shape::WarmupThenLeak, 50, 256.0 * KIB),
        // 63.5% without slowing rises read as a warm-up (`staircase`).
        (Shape::WarmupThenLeak, 50, 64.0 * KIB),
    ];
    for (shape, n, noise) in rows.chain(single_rows) {
        assert_covered(shape, n, noise, SEEDS);
    }
}

/// A leak of twice the threshold over 20 runs is found ≥ 90% of the time where a plain line's
/// CI could (noise sd 0.1% and 0.25% of the level; at 0.5% it is not yet: docs/accuracy.md).
#[test]
fn leaks_of_twice_the_threshold_over_20_runs() {
    for noise in [0.1, 0.25] {
        let c = power_cell(false, 20, noise, 500);
        let found = c.found as f64 / c.runs as f64;
        assert!(found >= 0.9, "noise {noise}%: found {found}");
        assert_eq!(c.false_leaks, 0, "noise {noise}%: steady called leak");
    }
}
