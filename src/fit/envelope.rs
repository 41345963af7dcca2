//! Lower envelope of a saw-tooth series: the memory left after each collection (a garbage
//! collector's troughs, a worker's memory between requests), and whether it grows.
//!
//! A saw-tooth sampled at jittered times is `y = floor(x) + A·u`, with `u` in [0, 1] the phase
//! at which the sample happened to land and A the tooth's height (often 20–50% of the level).
//! A mean fit sees the teeth as noise of sd ≈ 0.29·A, and one sample that lands on a peak near
//! the end tilts it; a low quantile per window (or quantile regression at τ = 0.1) sees noise of
//! ≈ A·√(τ(1−τ)/m) per window of m samples. The floor itself is sharp, so the samples that land
//! near it pin it down to ≈ A/n: the estimator here is the *lowest line below every sample*
//! (linear programming: maximise the line's mean height subject to lying under all points —
//! quantile regression at τ → 0, i.e. the edge of the lower convex hull under the mean x). Its
//! slope error shrinks like A/(n·span) instead of A/(√n·span).
//!
//! Inference: the points are dealt into B interleaved subsamples (every B-th sample, each
//! spanning the whole series); each gives a floor slope, and the floor slope is their mean with
//! standard error sd/√B on B − 1 degrees of freedom (independent subsamples when the samples
//! are: jittered sampling times make the phases independent). One glitch — a sample far below
//! the floor, or one lucky peak — moves one subsample's slope, which raises the spread as much
//! as the mean, so it cannot make a significant trend by itself (t ≈ 1).
//!
//! Units: x in x units (seconds in attach mode), y in bytes, slopes in bytes per x unit.

use super::stats;

/// Fewest points for an envelope fit.
pub const MIN_POINTS: usize = 60;

/// Points per window of `Envelope::points` (the chart's trough markers), at least.
const CHART_WINDOW: usize = 8;
/// At most this many trough markers.
const CHART_POINTS: usize = 60;

/// The lower envelope of a series.
#[derive(serde::Serialize, Clone, Debug, PartialEq)]
pub struct Envelope {
    /// Slope of the floor, bytes per x unit: mean of the subsamples' floor slopes.
    pub slope: f64,
    /// Its standard error, bytes per x unit (sd of the subsample slopes / √B).
    pub slope_se: f64,
    /// Degrees of freedom of `slope_se`: B − 1.
    pub df: f64,
    /// Median of the subsample slopes, bytes per x unit (a robust check on `slope`).
    pub median_slope: f64,
    /// Floor level at the mean x of the points, bytes; the floor line is
    /// `level + slope · (x − x_mean)`.
    pub level: f64,
    /// Mean x of the points, x units.
    pub x_mean: f64,
    /// How sharp the floor is, from the heights h of the samples above the floor line:
    /// `(q10(h) − q1(h)) / (q50(h) − q10(h))`. ≈ 0.22 for a saw-tooth (heights uniform above a
    /// hard floor), ≈ 0.8 for Gaussian noise (a soft lower tail). `verdict` judges by the troughs
    /// below `SAWTOOTH_SHARPNESS`.
    pub sharpness: f64,
    /// Mean height of the samples above the floor, bytes (≈ half the tooth for a saw-tooth).
    pub mean_height: f64,
    /// The lowest sample of each window of consecutive samples, for charts: (x, bytes).
    pub points: Vec<(f64, f64)>,
}

/// Below this `Envelope::sharpness` the series has a hard floor with memory piling above it (a
/// saw-tooth, or spikes over a steady base), and its growth is judged on the floor. Uniform
/// heights give 0.22, Gaussian noise 0.82 (population values); about halfway on a log scale.
pub const SAWTOOTH_SHARPNESS: f64 = 0.45;

impl Envelope {
    /// Floor level at `x`, bytes.
    pub fn level_at(&self, x: f64) -> f64 {
        self.level + self.slope * (x - self.x_mean)
    }
}

/// Number of interleaved subsamples. Each subsample's floor error grows like B/n, so the mean
/// slope's standard error like √B, while the t quantile falls with B − 1 degrees of freedom:
/// t(0.99, B−1)·√B is least near B = 6 (8.2, against 8.5 at 8 and 10.4 at 16).
const SUBSAMPLES: usize = 6;

/// Lower envelope of `(x, y)` (x ascending, at least `MIN_POINTS` points). `None` for fewer
/// points, a length mismatch, non-finite values, x not ascending or a degenerate hull.
pub fn lower_envelope(x: &[f64], y: &[f64]) -> Option<Envelope> {
    let n = x.len();
    let valid = n >= MIN_POINTS
        && y.len() == n
        && x.iter().chain(y).all(|v| v.is_finite())
        && x.windows(2).all(|w| w[1] >= w[0]);
    if !valid {
        return None;
    }
    let b = SUBSAMPLES;
    let x_mean = stats::mean(x)?;
    let mut slopes = Vec::with_capacity(b);
    let mut levels = Vec::with_capacity(b);
    for k in 0..b {
        let pts: Vec<(f64, f64)> = (k..n).step_by(b).map(|i| (x[i], y[i])).collect();
        let xm = pts.iter().map(|p| p.0).sum::<f64>() / pts.len() as f64;
        let (slope, at_xm) = floor_line(&pts, xm)?;
        slopes.push(slope);
        levels.push(at_xm + slope * (x_mean - xm));
    }
    let slope = stats::mean(&slopes)?;
    let sd = (slopes.iter().map(|s| (s - slope).powi(2)).sum::<f64>() / (b - 1) as f64).sqrt();
    let level = stats::mean(&levels)?;
    let mut heights: Vec<f64> = x
        .iter()
        .zip(y)
        .map(|(&xi, &yi)| yi - (level + slope * (xi - x_mean)))
        .collect();
    let mean_height = stats::mean(&heights)?;
    let q1 = quantile(&mut heights, 0.01)?;
    let q10 = quantile(&mut heights, 0.1)?;
    let q50 = quantile(&mut heights, 0.5)?;
    let env = Envelope {
        slope,
        slope_se: sd / (b as f64).sqrt(),
        df: (b - 1) as f64,
        median_slope: stats::median(&mut slopes)?,
        level,
        x_mean,
        sharpness: if q50 > q10 {
            (q10 - q1) / (q50 - q10)
        } else {
            1.0
        },
        mean_height,
        points: window_minima(x, y),
    };
    [env.slope, env.slope_se, env.level]
        .iter()
        .all(|v| v.is_finite())
        .then_some(env)
}

/// The highest line lying under every point, judged at `xm` (the mean x): the edge of the lower
/// convex hull (Andrew's monotone chain) that spans `xm`. Returns (slope, height at xm).
fn floor_line(pts: &[(f64, f64)], xm: f64) -> Option<(f64, f64)> {
    let mut hull: Vec<(f64, f64)> = Vec::new();
    for &p in pts {
        while hull.len() >= 2 {
            let (o, a) = (hull[hull.len() - 2], hull[hull.len() - 1]);
            let cross = (a.0 - o.0) * (p.1 - o.1) - (a.1 - o.1) * (p.0 - o.0);
            if cross > 0.0 {
                break;
            }
            hull.pop();
        }
        hull.push(p);
    }
    let edge = hull
        .windows(2)
        .find(|w| w[0].0 <= xm && xm <= w[1].0 && w[1].0 > w[0].0)?;
    let slope = (edge[1].1 - edge[0].1) / (edge[1].0 - edge[0].0);
    Some((slope, edge[0].1 + slope * (xm - edge[0].0)))
}

/// The q-quantile (nearest rank) of `v`; reorders `v`.
fn quantile(v: &mut [f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let k = ((q * v.len() as f64) as usize).min(v.len() - 1);
    let (_, &mut kth, _) = v.select_nth_unstable_by(k, f64::total_cmp);
    Some(kth)
}

/// Lowest sample of each window of consecutive samples (at least `CHART_WINDOW` per window, at
/// most `CHART_POINTS` windows): the troughs a chart draws.
fn window_minima(x: &[f64], y: &[f64]) -> Vec<(f64, f64)> {
    let per = x.len().div_ceil(CHART_POINTS).max(CHART_WINDOW);
    x.chunks(per)
        .zip(y.chunks(per))
        .filter_map(|(xs, ys)| {
            let i = (0..ys.len()).min_by(|&a, &b| ys[a].total_cmp(&ys[b]))?;
            Some((xs[i], ys[i]))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uniform in [0, 1) from splitmix64.
    struct Rng(u64);
    impl Rng {
        fn uniform(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// 1 s ± 30% sampling of a saw-tooth of period `period` s and height 30 MiB over a floor of
    /// 100 MiB growing `growth` bytes/s.
    fn sawtooth(n: usize, period: f64, growth: f64, seed: u64) -> (Vec<f64>, Vec<f64>) {
        let mut rng = Rng(seed);
        let mut t = 0.0;
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for _ in 0..n {
            t += 0.7 + 0.6 * rng.uniform();
            x.push(t);
            y.push(100.0 * 1048576.0 + growth * t + 30.0 * 1048576.0 * (t / period).fract());
        }
        (x, y)
    }

    #[test]
    fn floor_of_a_sawtooth_is_found() {
        for period in [1.0, 7.0, 45.0] {
            let (x, y) = sawtooth(600, period, 200.0, 5);
            let e = lower_envelope(&x, &y).unwrap();
            assert!(
                (e.slope - 200.0).abs() < 5.0 * e.slope_se.max(1.0),
                "{period}: {e:?}"
            );
            assert!(
                e.sharpness < SAWTOOTH_SHARPNESS,
                "{period}: {}",
                e.sharpness
            );
            let floor_mid = 100.0 * 1048576.0 + 200.0 * e.x_mean;
            assert!((e.level - floor_mid).abs() < 2.5 * 1048576.0, "{e:?}");
            assert!(e.points.len() <= CHART_POINTS && e.points.len() >= 10);
        }
    }

    #[test]
    fn one_glitch_does_not_make_a_trend() {
        let (x, mut y) = sawtooth(600, 1.0, 0.0, 8);
        y[3] -= 10.0 * 1048576.0;
        y[599] += 50.0 * 1048576.0;
        let e = lower_envelope(&x, &y).unwrap();
        assert!(e.slope / e.slope_se < 2.0, "{e:?}");
    }

    #[test]
    fn gaussian_noise_has_no_sharp_floor() {
        let mut rng = Rng(3);
        let x: Vec<f64> = (0..600).map(f64::from).collect();
        let y: Vec<f64> = x
            .iter()
            .map(|_| {
                let (u1, u2) = (rng.uniform().max(1e-12), rng.uniform());
                1e8 + 1e6 * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
            })
            .collect();
        let e = lower_envelope(&x, &y).unwrap();
        assert!(e.sharpness > SAWTOOTH_SHARPNESS + 0.1, "{}", e.sharpness);
        assert!(lower_envelope(&x[..59], &y[..59]).is_none());
    }
}
