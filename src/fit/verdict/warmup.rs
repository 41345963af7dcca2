//! Warm-up: the leading points left out before a series is judged.

use crate::fit::stats;

/// Number of leading points to drop as warm-up: 0 or 1. `x` must be ascending.
///
/// Rule: take the per-x rate of each step, `(y[i+1] − y[i]) / (x[i+1] − x[i])`; the steps after
/// the first are the reference, with median `med` and noise scale
/// `s = max(1.4826·MAD, 0.25·|med|, 1e-4·mean level / median step of x)` (the last term, a
/// fraction of the level, is the floor when the steps are all equal — never a fraction of a
/// median step, which can be zero). The first point is warm-up when the first step exceeds
/// `med + 5·s` (a jump) and the second step's excess over `med` is less than a quarter of the
/// first's (the jump is over: a small creep after it, like redis' 8 KiB after a 4 MiB first fill,
/// does not block the trim, while a rise that goes on — a cache's fill, a saturating curve,
/// whose second step is ≥ 0.7 of its first — is growth, not warm-up). Only upward jumps count.
///
/// At most one point is trimmed (so ≥ max(4, n/2) remain); pass an explicit warm-up to
/// `classify` for longer ones. Returns 0 for n < 5, length mismatch, non-finite values or
/// non-increasing x.
///
/// **One warm-up per scope.** Call this once per scope on its primary metric and pass the
/// same `Some(k)` to `classify` for every other metric of that scope, so RSS, anon, PSS …
/// of one process are trimmed alike (a borderline jump can otherwise be trimmed in one metric
/// and not in another).
pub fn detect_warmup(x: &[f64], y: &[f64]) -> usize {
    const K: f64 = 5.0;
    let n = y.len();
    if x.len() != n || n < 5 || !x.iter().chain(y).all(|v| v.is_finite()) {
        return 0;
    }
    let mut rates = Vec::with_capacity(n - 1);
    for i in 0..n - 1 {
        let dx = x[i + 1] - x[i];
        if dx <= 0.0 {
            return 0;
        }
        rates.push((y[i + 1] - y[i]) / dx);
    }
    let mut reference = rates[1..].to_vec();
    let Some(med) = stats::median(&mut reference) else {
        return 0;
    };
    let mut deviations: Vec<f64> = reference.iter().map(|r| (r - med).abs()).collect();
    let mad = stats::median(&mut deviations).unwrap_or(0.0);
    let level = stats::mean(y).unwrap_or(0.0).abs();
    // The level floor is per typical step, so it is a rate like the others
    // (x may be runs, or seconds 300 apart).
    let mut steps: Vec<f64> = x.windows(2).map(|w| w[1] - w[0]).collect();
    let step = stats::median(&mut steps)
        .unwrap_or(1.0)
        .max(f64::MIN_POSITIVE);
    let spread = (1.4826 * mad)
        .max(0.25 * med.abs())
        .max(1e-4 * level / step);
    let (first, second) = (rates[0] - med, rates[1] - med);
    usize::from(first > K * spread && second < 0.25 * first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::verdict::tests::*;
    use crate::fit::verdict::*;

    #[test]
    fn warmup_spike_is_trimmed() {
        // A 30 MB cache fill between runs 1 and 2, then a flat series with small wiggles.
        let y: Vec<f64> = [
            70.0, 100.0, 100.2, 99.9, 100.1, 100.0, 99.8, 100.1, 100.0, 99.9,
        ]
        .iter()
        .map(|v| v * MB)
        .collect();
        let x: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(detect_warmup(&x, &y), 1);
        let c = classify(&x, &y, None, &Thresholds::default());
        assert_eq!((c.verdict, c.warmup), (Verdict::Stable, 1), "{c:?}");
        // Forcing no warm-up: one jump then flat is no monotonic trend (Mann–Kendall p = 1).
        let c = classify(&x, &y, Some(0), &Thresholds::default());
        assert_ne!(c.verdict, Verdict::Leak, "{c:?}");
    }

    #[test]
    fn warmup_not_trimmed_on_regular_series() {
        let x: Vec<f64> = (1..=10).map(f64::from).collect();
        let line: Vec<f64> = x.iter().map(|v| 100.0 + 2.0 * v).collect();
        assert_eq!(detect_warmup(&x, &line), 0);
        assert_eq!(detect_warmup(&x, &[5.0; 10]), 0);
        assert_eq!(detect_warmup(&x[..4], &line[..4]), 0);
        assert_eq!(
            detect_warmup(&[1.0, 1.0, 2.0, 3.0, 4.0], &[1.0, 9.0, 9.0, 9.0, 9.0]),
            0
        );
    }

    /// redis overwriting the same keys: anon KiB per run, +4.1 MiB first fill, +8 KiB
    /// in run 3, then +2.8 KiB/run with page-sized noise; 20 runs.
    const REDIS_KIB: [f64; 20] = [
        12292.0, 16488.0, 16496.0, 16492.0, 16504.0, 16508.0, 16508.0, 16508.0, 16500.0, 16508.0,
        16508.0, 16524.0, 16512.0, 16516.0, 16516.0, 16528.0, 16528.0, 16528.0, 16536.0, 16540.0,
    ];

    #[test]
    fn redis_overwrite_is_stable_every_time() {
        let y: Vec<f64> = REDIS_KIB.iter().map(|v| v * KIB).collect();
        let x = runs(20);
        assert_eq!(detect_warmup(&x, &y), 1);
        // Any shorter or longer try trims the same first fill.
        for n in [8, 10, 15, 20] {
            assert_eq!(detect_warmup(&x[..n], &y[..n]), 1, "{n} runs");
            let c = classify(&x[..n], &y[..n], None, &per_run());
            assert_eq!((c.verdict, c.warmup), (Verdict::Stable, 1), "{n}: {c:#?}");
        }
        // A metric judged with the scope's warm-up gets the same answer.
        let c = classify(&x, &y, Some(1), &per_run());
        assert_eq!(c.verdict, Verdict::Stable);
    }
}
