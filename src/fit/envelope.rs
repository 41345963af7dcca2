//! Lower envelope of a saw-tooth series: the memory left after each collection (a garbage
//! collector's troughs, a worker's memory between requests), and whether it grows.
//!
//! A saw-tooth sampled at jittered times is `y = floor(x) + A·u`, with `u` in [0, 1] the phase
//! at which the sample happened to land and A the tooth's height (often 20–50% of the level).
//! A mean fit sees the teeth as noise of sd ≈ 0.29·A, and one sample that lands on a peak near
//! the end tilts it. The floor is sharp, so the lowest sample of a window of m samples is
//! within ≈ A/(m+1) of it: the envelope here is the **minimum of each of W windows** of
//! consecutive samples (W ≈ 12, each window at least two tooth periods long, so each holds a
//! trough and the minima are independent), fitted by least squares with Theil–Sen and
//! Mann–Kendall beside it — the same tests as a short run series. Its slope error is
//! ≈ √12·A / (span·√(n·m)), against ≈ √12·0.29·A / (span·√n) for the mean: √m/0.29 times
//! smaller. (A low quantile per window or quantile regression at τ = 0.1 is ≈ √(τ(1−τ)·m) times
//! worse than the minimum on a hard floor; the lowest line under all points — quantile
//! regression at τ → 0 — rests on the two hull vertices around the middle, and its slope is
//! heavy-tailed in simulation.)
//!
//! Whether a series is a saw-tooth at all is read from the shape of its residuals about the
//! least-squares line: uniform-like with a hard lower edge (`sharpness`) — see
//! `SAWTOOTH_SHARPNESS`.
//!
//! Units: x in x units (seconds in attach mode), y in bytes, slopes in bytes per x unit.

use super::stats::{self, LinearFit, MannKendall};

/// Fewest points for an envelope fit.
pub const MIN_POINTS: usize = 60;

/// Target number of windows: the slope error falls with longer windows (∝ 1/√m), the t quantile
/// rises with fewer; 12 leaves 10 degrees of freedom.
const WINDOWS: usize = 12;
/// Fewest samples per window.
const MIN_WINDOW: usize = 8;
/// Fewest windows for the troughs to decide anything.
pub const MIN_WINDOWS: usize = 8;

/// The lower envelope of a series.
#[derive(serde::Serialize, Clone, Debug, PartialEq)]
pub struct Envelope {
    /// Least-squares fit through the window minima (`points`): slope in bytes per x unit, its
    /// CI, residual sd; `None` with fewer than 3 windows.
    pub fit: Option<LinearFit>,
    /// Theil–Sen slope of the minima, bytes per x unit.
    pub robust_slope: Option<f64>,
    /// Mann–Kendall over the minima.
    pub trend: Option<MannKendall>,
    /// Number of windows and samples per window.
    pub windows: usize,
    pub window_len: usize,
    /// How sharp the floor is, from the residuals r of every sample about the least-squares
    /// line: `(q10(r) − q1(r)) / (q50(r) − q10(r))`. ≈ 0.22 for a saw-tooth (residuals uniform
    /// above a hard floor), ≈ 0.82 for Gaussian noise (a soft lower tail).
    pub sharpness: f64,
    /// Drops seen: consecutive samples falling by more than the residuals' interquartile range
    /// (collections; one per tooth for slow teeth, about one sample in eight for teeth as fast
    /// as the sampling).
    pub drops: usize,
    /// Mean height of the samples above the floor line, bytes (≈ half a tooth).
    pub mean_height: f64,
    /// The window minima, (x, bytes): the troughs the floor is fitted to, for charts.
    pub points: Vec<(f64, f64)>,
    /// The minima of the shortest windows that still hold two teeth each (`MIN_WINDOW`
    /// samples at least): many more troughs than `points`, for the floor's rate over a part
    /// of the series (its end), where a dozen windows leave too few.
    #[serde(skip)]
    pub fine: Vec<(f64, f64)>,
}

/// Below this `Envelope::sharpness` the series has a hard floor with memory piling above it (a
/// saw-tooth, or spikes over a steady base), and its growth is judged on the floor. Uniform
/// residuals give 0.22, Gaussian 0.82 (population values); about halfway on a log scale.
pub const SAWTOOTH_SHARPNESS: f64 = 0.45;

impl Envelope {
    /// The floor's least-squares line from `from_x` on, and its minima: through the minima of
    /// about `WINDOWS`
    /// windows of that part (each the lowest of consecutive `fine` minima; a longer window's
    /// minimum lies nearer the floor, so fewer, longer windows fit it better, down to the t
    /// quantile's cost); `None` with fewer than `MIN_WINDOWS` fine minima there.
    pub fn floor_from(&self, from_x: f64) -> Option<(LinearFit, Vec<(f64, f64)>)> {
        let (fx, fy): (Vec<f64>, Vec<f64>) =
            self.fine.iter().filter(|p| p.0 >= from_x).copied().unzip();
        if fx.len() < MIN_WINDOWS {
            return None;
        }
        let points = window_minima(&fx, &fy, WINDOWS.min(fx.len()));
        let (x, y): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
        Some((stats::ols(&x, &y)?, points))
    }

    /// Floor level at `x`, bytes (`None` without a fit).
    pub fn level_at(&self, x: f64) -> Option<f64> {
        self.fit.map(|f| f.intercept + f.slope * x)
    }
}

/// Lower envelope of `(x, y)` (x ascending, at least `MIN_POINTS` points). `None` for fewer
/// points, a length mismatch, non-finite values, x not ascending or constant.
pub fn lower_envelope(x: &[f64], y: &[f64]) -> Option<Envelope> {
    let n = x.len();
    let valid = n >= MIN_POINTS
        && y.len() == n
        && x.iter().chain(y).all(|v| v.is_finite())
        && x.windows(2).all(|w| w[1] >= w[0]);
    if !valid {
        return None;
    }
    let line = stats::ols(x, y)?;
    let mut resid: Vec<f64> = x
        .iter()
        .zip(y)
        .map(|(&xi, &yi)| yi - (line.intercept + line.slope * xi))
        .collect();
    let q1 = quantile(&mut resid, 0.01)?;
    let q10 = quantile(&mut resid, 0.1)?;
    let q25 = quantile(&mut resid, 0.25)?;
    let q50 = quantile(&mut resid, 0.5)?;
    let q75 = quantile(&mut resid, 0.75)?;
    let drops = y.windows(2).filter(|w| w[1] - w[0] < -(q75 - q25)).count();
    // Two tooth periods per window at least (n / drops samples per tooth).
    let per_tooth = n.div_ceil(drops.max(1));
    let window_len = n.div_ceil(WINDOWS).max(MIN_WINDOW).max(2 * per_tooth);
    let windows = n / window_len;
    let points = window_minima(x, y, windows.max(1));
    let fine = window_minima(x, y, n / MIN_WINDOW.max(2 * per_tooth));
    let (px, py): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
    let fit = if windows >= 3 {
        stats::ols(&px, &py)
    } else {
        None
    };
    let mean_height = match fit {
        Some(f) => {
            x.iter()
                .zip(y)
                .map(|(&a, &b)| b - (f.intercept + f.slope * a))
                .sum::<f64>()
                / n as f64
        }
        None => stats::mean(y)? - stats::mean(&py)?,
    };
    Some(Envelope {
        fit,
        robust_slope: (windows >= 3).then(|| stats::theil_sen(&px, &py)).flatten(),
        trend: (windows >= 3).then(|| stats::mann_kendall(&py)).flatten(),
        windows,
        window_len,
        sharpness: if q50 > q10 {
            (q10 - q1) / (q50 - q10)
        } else {
            1.0
        },
        drops,
        mean_height,
        points,
        fine,
    })
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

/// Lowest sample of each of `windows` windows of consecutive samples (as equal as the count
/// allows), at that sample's own x.
fn window_minima(x: &[f64], y: &[f64], windows: usize) -> Vec<(f64, f64)> {
    let n = x.len();
    (0..windows)
        .filter_map(|w| {
            let (a, b) = (w * n / windows, (w + 1) * n / windows);
            let i = (a..b).min_by(|&i, &j| y[i].total_cmp(&y[j]))?;
            Some((x[i], y[i]))
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
        for (n, period) in [(3600, 1.0), (3600, 7.0), (3600, 45.0), (600, 1.0)] {
            let (x, y) = sawtooth(n, period, 200.0, 5);
            let e = lower_envelope(&x, &y).unwrap();
            let f = e.fit.unwrap();
            let (lo, hi) = f.slope_ci95.unwrap();
            assert!(lo - 50.0 < 200.0 && 200.0 < hi + 50.0, "{period}: {e:?}");
            assert!(
                e.sharpness < SAWTOOTH_SHARPNESS,
                "{period}: {}",
                e.sharpness
            );
            assert!(e.windows >= MIN_WINDOWS, "{e:?}");
            // Each window is at least two teeth long.
            assert!(e.window_len as f64 >= 1.5 * period, "{e:?}");
            let floor_mid = 100.0 * 1048576.0 + 200.0 * x[n / 2];
            assert!(
                (e.level_at(x[n / 2]).unwrap() - floor_mid).abs() < 3.0 * 1048576.0,
                "{e:?}"
            );
        }
    }

    #[test]
    fn one_glitch_does_not_make_a_trend() {
        let (x, mut y) = sawtooth(600, 1.0, 0.0, 8);
        y[3] -= 10.0 * 1048576.0;
        y[599] += 50.0 * 1048576.0;
        let e = lower_envelope(&x, &y).unwrap();
        assert!(e.trend.unwrap().p_two_sided > 0.01, "{e:?}");
        assert!(e.robust_slope.unwrap().abs() < 10_000.0, "{e:?}");
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
        assert!(e.sharpness > SAWTOOTH_SHARPNESS + 0.15, "{}", e.sharpness);
        assert!(lower_envelope(&x[..59], &y[..59]).is_none());
    }
}
