//! Change points: splits a memory series into straight-line segments where its level or its
//! slope changes (PELT, Killick, Fearnhead & Eckley 2012, "Optimal detection of changepoints
//! with a linear computational cost", JASA 107:1590), so a verdict can judge steps, fills and
//! ramps by their own model.
//!
//! Model: y is piecewise linear in x — each segment has its own intercept and slope, with a jump
//! allowed at each change — plus independent noise of sd σ. A step (allocator arena, hash-table
//! doubling, copy-on-write) is a jump between two flat segments; a cache fill is a rising
//! segment followed by a flat one; a straight leak is one rising segment. Piecewise *constant*
//! segments (the usual mean-shift model) would cut a straight leak into a staircase whose steps
//! depend on the noise, and a verdict would then read a leak as "a few one-off steps"; lines
//! keep a straight leak in one piece and its OLS slope.
//!
//! Cost of a segment: its least-squares residual sum of squares divided by σ² (−2·log-likelihood
//! up to a constant), from prefix sums in O(1). Penalty per change point: `penalty(n)` (see
//! there for the calibration). σ comes from `noise_sd`: a robust scale of the first differences,
//! which removes any trend and treats steps as outliers.
//!
//! Units: x in x units, y in bytes, slopes in bytes per x unit.

use super::stats;

/// Fewest points in a segment: a line through 3 points leaves one degree of freedom.
pub const MIN_SEGMENT: usize = 3;

/// One straight-line piece of a series.
#[derive(serde::Serialize, Clone, Copy, Debug, PartialEq)]
pub struct Segment {
    /// Index of the segment's first point in the series given to `segment`.
    pub start: usize,
    /// One past the index of its last point.
    pub end: usize,
    /// x of its first and last point, x units.
    pub x_start: f64,
    pub x_end: f64,
    /// Least-squares line over the segment's points: slope in bytes per x unit.
    pub slope: f64,
    /// Fitted level at `x_start` and at `x_end`, bytes.
    pub level_start: f64,
    pub level_end: f64,
}

impl Segment {
    /// Number of points.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Always false (a segment has at least `MIN_SEGMENT` points); for clippy's `len` rule.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Fitted level at `x`, bytes.
    pub fn level_at(&self, x: f64) -> f64 {
        self.level_start + self.slope * (x - self.x_start)
    }
}

/// The segments of a series and the noise they were cut against.
#[derive(Clone, Debug, PartialEq)]
pub struct Segmentation {
    /// In x order, covering every point; one segment when no change was found.
    pub segments: Vec<Segment>,
    /// Noise sd used for the costs (`noise_sd`), bytes.
    pub noise_sd: f64,
    /// Penalty per change point used, in units of σ².
    pub penalty: f64,
    /// Residual sd about the segment lines, pooled over segments, bytes (`None` when no
    /// degree of freedom is left).
    pub residual_sd: Option<f64>,
}

/// Robust noise sd of a series, bytes: the smaller of two robust scales, one from the first
/// differences Δy (Var = 2σ² for independent noise; a trend only shifts them, a step is one
/// outlier) and one from the second differences Δ²y (Var = 6σ²; a ramp vanishes, a knee is one
/// outlier, a step two). Each is the 20%-trimmed root mean square of the deviations from their
/// median (divided by 0.4377 = E[Z² | |Z| < 1.2816] for consistency at the normal) — steadier
/// on 10 points than the MAD, and blind to up to 20% of the differences being changes. Taking
/// the smaller keeps a one-off step on 10 points (two of eight Δ²y, one of nine Δy) and a fill
/// that is a third of the series (many equal Δy, few Δ²y) from inflating the noise; the bias
/// this leaves on a series without changes is paid for by `penalty`.
///
/// When nearly all differences are equal (page-granular memory that rarely moves) a scale is
/// 0, and the mean absolute deviation (`· √(π/2)`) is used instead; the result is never below
/// `1e-6 · |median level|` (and 1e-9), so it is never 0 — in particular never a fraction of a
/// median step that can be zero. `None` for fewer than 4 points or non-finite values.
pub fn noise_sd(y: &[f64]) -> Option<f64> {
    if y.len() < 4 || !y.iter().all(|v| v.is_finite()) {
        return None;
    }
    let d1: Vec<f64> = y.windows(2).map(|w| w[1] - w[0]).collect();
    let d2: Vec<f64> = y.windows(3).map(|w| w[2] - 2.0 * w[1] + w[0]).collect();
    let scale = (trimmed_scale(d1)? / 2f64.sqrt()).min(trimmed_scale(d2)? / 6f64.sqrt());
    let mut levels = y.to_vec();
    let floor = (1e-6 * stats::median(&mut levels)?.abs()).max(1e-9);
    Some(scale.max(floor))
}

/// 20%-trimmed, normal-consistent root mean square of |d − median(d)|; the mean absolute
/// deviation · √(π/2) when that is 0.
fn trimmed_scale(mut d: Vec<f64>) -> Option<f64> {
    let med = stats::median(&mut d)?;
    let mut dev: Vec<f64> = d.iter().map(|v| (v - med).abs()).collect();
    dev.sort_by(f64::total_cmp);
    let keep = (dev.len() * 4).div_ceil(5).max(1);
    let trimmed = (dev[..keep].iter().map(|v| v * v).sum::<f64>() / keep as f64 / 0.4377).sqrt();
    if trimmed > 0.0 {
        Some(trimmed)
    } else {
        Some(stats::mean(&dev)? * (std::f64::consts::PI / 2.0).sqrt())
    }
}

/// Penalty per change point, in units of σ² (cost = RSS/σ²), for a series of n points.
///
/// Calibration (`tests::calibrate_penalty`, ignored): one straight line (slope 0 or 1 σ per
/// point) plus independent Gaussian noise, σ estimated by `noise_sd`, PELT over every split.
/// With 26 a series with nothing to find gets a spurious change point in about one series
/// in a hundred or fewer at every length from 10 to 600 points (measured:
/// docs/verdicts.md#the-change-point-penalty), which the verdicts must survive (a spurious
/// change in a flat series reads as a one-off step — never a leak — and one in a straight leak
/// leaves two rising segments, still a leak). A flat penalty is right here: the false-change
/// rate of a known-σ search grows only like log log n, and the noise estimate varies more on
/// short series, which costs as much as the extra split positions of long ones. For
/// comparison, BIC for the 3 parameters of a change (where, jump, new slope) is 3·ln n ≈ 7–21.
pub fn penalty(_n: usize) -> f64 {
    26.0
}

/// Prefix sums of x, y, x², xy, y² (x and y centred and y scaled by 1/σ, for precision).
struct Prefix {
    sx: Vec<f64>,
    sy: Vec<f64>,
    sxx: Vec<f64>,
    sxy: Vec<f64>,
    syy: Vec<f64>,
}

impl Prefix {
    fn new(x: &[f64], y: &[f64], sd: f64) -> Prefix {
        let n = x.len();
        let x0 = x.first().copied().unwrap_or(0.0);
        let y0 = stats::mean(y).unwrap_or(0.0);
        let mut p = Prefix {
            sx: vec![0.0; n + 1],
            sy: vec![0.0; n + 1],
            sxx: vec![0.0; n + 1],
            sxy: vec![0.0; n + 1],
            syy: vec![0.0; n + 1],
        };
        for i in 0..n {
            let (u, v) = (x[i] - x0, (y[i] - y0) / sd);
            p.sx[i + 1] = p.sx[i] + u;
            p.sy[i + 1] = p.sy[i] + v;
            p.sxx[i + 1] = p.sxx[i] + u * u;
            p.sxy[i + 1] = p.sxy[i] + u * v;
            p.syy[i + 1] = p.syy[i] + v * v;
        }
        p
    }

    /// RSS/σ² of the least-squares line through points a..b (b − a ≥ 2).
    fn cost(&self, a: usize, b: usize) -> f64 {
        let m = (b - a) as f64;
        let sx = self.sx[b] - self.sx[a];
        let sy = self.sy[b] - self.sy[a];
        let sxx = self.sxx[b] - self.sxx[a] - sx * sx / m;
        let sxy = self.sxy[b] - self.sxy[a] - sx * sy / m;
        let syy = self.syy[b] - self.syy[a] - sy * sy / m;
        let rss = if sxx > 0.0 {
            syy - sxy * sxy / sxx
        } else {
            syy
        };
        rss.max(0.0)
    }
}

/// Splits `(x, y)` (x ascending) into straight-line segments by PELT with `penalty(n)` per change
/// and the noise σ = max(`noise_sd`, `min_sd`). `min_sd` (bytes) is the caller's floor for what
/// counts as noise: memory that moves by exactly the same bytes every run has a robust σ of
/// almost 0, and then a 4 KiB wobble in a 4 MiB/run leak would be a "change"; a verdict passes
/// a fraction of its practical threshold per x step. `None` for fewer than `MIN_SEGMENT` points,
/// a length mismatch, non-finite values or x not strictly ascending.
pub fn segment(x: &[f64], y: &[f64], min_sd: f64) -> Option<Segmentation> {
    segment_with(x, y, penalty(x.len()), min_sd)
}

/// `segment` with a given penalty per change point (units of σ²).
pub fn segment_with(x: &[f64], y: &[f64], beta: f64, min_sd: f64) -> Option<Segmentation> {
    let n = x.len();
    let ascending = x.windows(2).all(|w| w[1] > w[0]);
    if n < MIN_SEGMENT || y.len() != n || !ascending || !x.iter().all(|v| v.is_finite()) {
        return None;
    }
    let sd = noise_sd(y)?.max(min_sd);
    let ends = pelt(&Prefix::new(x, y, sd), n, beta);
    let mut segments = Vec::with_capacity(ends.len());
    let mut start = 0;
    for end in ends {
        segments.push(fit_segment(x, y, start, end)?);
        start = end;
    }
    let rss: f64 = segments
        .iter()
        .map(|s| {
            (s.start..s.end)
                .map(|i| (y[i] - s.level_at(x[i])).powi(2))
                .sum::<f64>()
        })
        .sum();
    let df = n.saturating_sub(2 * segments.len());
    Some(Segmentation {
        segments,
        noise_sd: sd,
        penalty: beta,
        residual_sd: (df > 0).then(|| (rss / df as f64).sqrt()),
    })
}

/// PELT's optimal partition: the end index of each segment, in order. `F[t]` is the least
/// penalised cost of points 0..t; a candidate last change τ is dropped for good once
/// `F[τ] + C(τ, t) > F[t]` (no later split can revive it, since splitting a segment never
/// raises its RSS).
fn pelt(p: &Prefix, n: usize, beta: f64) -> Vec<usize> {
    let mut best = vec![f64::INFINITY; n + 1];
    let mut prev = vec![0usize; n + 1];
    best[0] = -beta;
    let mut candidates: Vec<usize> = Vec::new();
    for t in MIN_SEGMENT..=n {
        let s = t - MIN_SEGMENT;
        if best[s].is_finite() {
            candidates.push(s);
        }
        for &tau in &candidates {
            let v = best[tau] + p.cost(tau, t) + beta;
            if v < best[t] {
                best[t] = v;
                prev[t] = tau;
            }
        }
        let bound = best[t];
        candidates.retain(|&tau| best[tau] + p.cost(tau, t) <= bound);
    }
    let mut ends = Vec::new();
    let mut t = n;
    while t > 0 {
        ends.push(t);
        t = prev[t];
    }
    ends.reverse();
    ends
}

fn fit_segment(x: &[f64], y: &[f64], start: usize, end: usize) -> Option<Segment> {
    let line = stats::ols(&x[start..end], &y[start..end])?;
    let (x_start, x_end) = (x[start], x[end - 1]);
    Some(Segment {
        start,
        end,
        x_start,
        x_end,
        slope: line.slope,
        level_start: line.intercept + line.slope * x_start,
        level_end: line.intercept + line.slope * x_end,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// splitmix64 + Box–Muller, as in tests/fit_accuracy.rs.
    pub(crate) struct Rng(u64);
    impl Rng {
        pub(crate) fn new(seed: u64) -> Rng {
            Rng(seed)
        }
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        pub(crate) fn uniform(&mut self) -> f64 {
            ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
        }
        pub(crate) fn normal(&mut self) -> f64 {
            let u1 = ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
            let u2 = ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        }
    }

    fn xs(n: usize) -> Vec<f64> {
        (1..=n).map(|v| v as f64).collect()
    }

    #[test]
    fn noise_sd_is_robust_and_never_zero() {
        let mut rng = Rng::new(1);
        let y: Vec<f64> = (0..2000)
            .map(|i| 1e8 + 50.0 * i as f64 + 1e4 * rng.normal())
            .collect();
        let sd = noise_sd(&y).unwrap();
        assert!((sd / 1e4 - 1.0).abs() < 0.06, "{sd}");
        // Steps are outliers among the differences.
        let stepped: Vec<f64> = y
            .iter()
            .enumerate()
            .map(|(i, v)| v + 1e6 * (i / 100) as f64)
            .collect();
        assert!((noise_sd(&stepped).unwrap() / 1e4 - 1.0).abs() < 0.08);
        // Mostly unchanged pages: not 0, not a fraction of the (zero) median step.
        let mut flat = vec![4096.0 * 25_000.0; 30];
        flat[7] += 8192.0;
        let sd = noise_sd(&flat).unwrap();
        assert!(sd > 300.0 && sd < 8192.0, "{sd}");
        assert!(noise_sd(&[5.0; 10]).unwrap() > 0.0);
        assert!(noise_sd(&[1.0, 2.0, 3.0]).is_none());
    }

    #[test]
    fn finds_a_fill_and_a_later_step() {
        // An LRU cache: +2 MiB/run for 6 runs, flat 7, +2 MiB at run 14, flat to 24.
        const MIB: f64 = 1024.0 * 1024.0;
        let mut rng = Rng::new(3);
        let x = xs(24);
        let y: Vec<f64> = x
            .iter()
            .map(|&r| {
                let fill = 2.0 * MIB * (r - 1.0).min(6.0);
                let step = if r >= 14.0 { 2.0 * MIB } else { 0.0 };
                64.0 * MIB + fill + step + 20_000.0 * rng.normal()
            })
            .collect();
        let s = segment(&x, &y, 0.0).unwrap();
        let starts: Vec<f64> = s.segments.iter().map(|g| g.x_start).collect();
        // The fill ends at run 7, which lies on both lines.
        assert!(
            starts == [1.0, 7.0, 14.0] || starts == [1.0, 8.0, 14.0],
            "{s:?}"
        );
        assert!((s.segments[0].slope / (2.0 * MIB) - 1.0).abs() < 0.02);
        assert!(s.segments[2].slope.abs() < 20_000.0);
    }

    #[test]
    fn a_straight_line_is_one_segment() {
        let x = xs(50);
        let mut rng = Rng::new(9);
        let y: Vec<f64> = x
            .iter()
            .map(|v| 1e8 + 1e6 * v + 1e5 * rng.normal())
            .collect();
        let s = segment(&x, &y, 0.0).unwrap();
        assert_eq!(s.segments.len(), 1, "{s:?}");
        assert_eq!((s.segments[0].start, s.segments[0].end), (0, 50));
        assert!(segment(&x[..2], &y[..2], 0.0).is_none());
        assert!(segment(&[1.0, 1.0, 2.0], &[1.0, 2.0, 3.0], 0.0).is_none());
    }

    /// Prints the share of straight-line series with any change point, per n, for candidate
    /// penalties: `cargo test --release --lib changepoint -- --ignored --nocapture`.
    #[test]
    #[ignore = "slow: penalty calibration"]
    fn calibrate_penalty() {
        for n in [10usize, 20, 50, 120, 600] {
            let x = xs(n);
            let seeds = if n > 200 { 400 } else { 2000 };
            let betas = [18.0, 22.0, 26.0, 30.0, 34.0, 40.0, penalty(n)];
            let mut split = [0u32; 7];
            for seed in 0..seeds {
                let mut rng = Rng::new(seed as u64 ^ ((n as u64) << 32));
                let slope = if seed % 2 == 0 { 0.0 } else { 1.0 };
                let y: Vec<f64> = x.iter().map(|v| 1e3 + slope * v + rng.normal()).collect();
                for (k, &b) in betas.iter().enumerate() {
                    if segment_with(&x, &y, b, 0.0).unwrap().segments.len() > 1 {
                        split[k] += 1;
                    }
                }
            }
            let shares: Vec<String> = betas
                .iter()
                .zip(split)
                .map(|(b, c)| format!("{b:.1}: {:.2}%", 100.0 * f64::from(c) / seeds as f64))
                .collect();
            println!("n {n} ({seeds} series): {}", shares.join(", "));
        }
    }
}
