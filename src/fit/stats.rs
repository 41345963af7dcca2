//! Pure statistics on memory samples: least-squares line with a Student-t slope CI, Theil–Sen
//! slope, Mann–Kendall trend test, a two-segment fit, and the special functions they need.
//!
//! Conventions used throughout: `x` is where a sample was taken (run number or seconds — called
//! "x units" below) and `y` is memory in bytes, so every slope is in bytes per x unit. Functions
//! never panic: bad input (too few points, constant `x`, non-finite values, length mismatch)
//! gives `None`, or NaN from the two quantile functions when `p` or `df` is out of range.

use serde::Serialize;
use std::f64::consts::{FRAC_1_SQRT_2, PI};

/// Ordinary least-squares line `y = intercept + slope·x`.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub struct LinearFit {
    /// Number of points fitted.
    pub n: usize,
    /// Slope, bytes per x unit.
    pub slope: f64,
    /// Fitted value at x = 0, bytes.
    pub intercept: f64,
    /// Two-sided 95% confidence interval of the slope, bytes per x unit: `slope ± t(0.975, n−2)·se`
    /// (Student t, assuming independent normal errors). `None` when n = 2 (no degrees of freedom
    /// left to estimate the noise). An `Option` rather than ±infinity so it serialises to JSON.
    pub slope_ci95: Option<(f64, f64)>,
    /// Standard error of the slope, bytes per x unit. `None` when n = 2.
    pub slope_se: Option<f64>,
    /// Coefficient of determination, 0..=1 (1 when `y` is constant: the flat line fits exactly).
    pub r2: f64,
    /// Residual standard deviation `sqrt(SSR / (n−2))`, bytes. `None` when n = 2.
    pub residual_sd: Option<f64>,
}

/// The least-squares slope's 95% CI with its error widened for lag-1
/// autocorrelation of the residuals (Santer et al. 2000, J. Geophys. Res.
/// 105(D6): the variance and the degrees of freedom by the effective sample
/// size n(1−ρ)/(1+ρ), ρ ≥ 0). Memory between steps is such a series: flat,
/// then a bump, then flat; its plain CI is far too narrow. `None` when fewer
/// than three effective points are left.
pub fn ols_ar1_ci95(x: &[f64], y: &[f64]) -> Option<(f64, f64)> {
    let f = ols(x, y)?;
    let r: Vec<f64> = x
        .iter()
        .zip(y)
        .map(|(xi, yi)| yi - (f.intercept + f.slope * xi))
        .collect();
    let ss: f64 = r.iter().map(|v| v * v).sum();
    let rho = if ss > 0.0 {
        (r.windows(2).map(|w| w[0] * w[1]).sum::<f64>() / ss).clamp(0.0, 0.99)
    } else {
        0.0
    };
    let n = f.n as f64;
    let n_eff = n * (1.0 - rho) / (1.0 + rho);
    if n_eff < 3.0 {
        return None;
    }
    let se = f.slope_se? * ((n - 2.0) / (n_eff - 2.0)).sqrt();
    let half = student_t_quantile(0.975, n_eff - 2.0) * se;
    Some((f.slope - half, f.slope + half))
}

/// A least-squares parabola through `(x, y)`, fitted about the last x: its slope there and
/// its curvature, each with its standard error (from `(XᵀX)⁻¹σ²`), on n − 3 degrees of
/// freedom.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParabolaEnd {
    /// Slope at the last point, y per x unit: the end rate of a curve that slows down (or
    /// speeds up), unbiased when the curve is a parabola, less biased than a line through its
    /// second half when it levels off like `1 − e^(−x/τ)` (which overstates the end by
    /// averaging it with what came before).
    pub slope: f64,
    pub slope_se: f64,
    /// The coefficient of u² (u = x − last x): negative when the curve slows down.
    pub curvature: f64,
    pub curvature_se: f64,
    pub df: f64,
}

impl ParabolaEnd {
    /// The upper end of the 95% interval of its slope at the last point.
    pub fn slope_upper95(&self) -> f64 {
        self.slope + student_t_quantile(0.975, self.df) * self.slope_se
    }

    /// The lower end of the 95% interval of its slope at the last point.
    pub fn slope_lower95(&self) -> f64 {
        self.slope - student_t_quantile(0.975, self.df) * self.slope_se
    }

    /// Whether it bends upwards at one-sided level `alpha`.
    pub fn bends_up(&self, alpha: f64) -> bool {
        self.curvature > student_t_quantile(1.0 - alpha, self.df) * self.curvature_se
    }

    /// Whether it bends downwards at one-sided level `alpha`.
    pub fn bends_down(&self, alpha: f64) -> bool {
        -self.curvature > student_t_quantile(1.0 - alpha, self.df) * self.curvature_se
    }
}

/// The parabola of `ParabolaEnd`. `None` with fewer than five points, fewer than three
/// distinct x, or non-finite values.
pub fn parabola_end(x: &[f64], y: &[f64]) -> Option<ParabolaEnd> {
    let n = x.len();
    if n < 5 || y.len() != n || !all_finite(x) || !all_finite(y) {
        return None;
    }
    let x_end = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let x_first = x.iter().copied().fold(f64::INFINITY, f64::min);
    // u in units of the span (−1 … 0): in seconds, Σu⁴ over a 600 s attach is 10¹² times Σ1,
    // and the normal equations read as singular (no parabola beyond a span of about 60).
    let span = x_end - x_first;
    if span <= 0.0 {
        return None;
    }
    let y_mean = mean(y)?;
    // Normal equations of y − ȳ = a + b·u + c·u², u = (x − x_end)/span (sums of u^k, u^k·y).
    let (mut su, mut sy) = ([0.0; 5], [0.0; 3]);
    for (&xi, &yi) in x.iter().zip(y) {
        let u = (xi - x_end) / span;
        let mut p = 1.0;
        for (k, s) in su.iter_mut().enumerate() {
            *s += p;
            if k < 3 {
                sy[k] += p * (yi - y_mean);
            }
            p *= u;
        }
    }
    let m = [
        [su[0], su[1], su[2]],
        [su[1], su[2], su[3]],
        [su[2], su[3], su[4]],
    ];
    let inv = invert3(&m)?;
    let coef: Vec<f64> = (0..3)
        .map(|i| (0..3).map(|j| inv[i][j] * sy[j]).sum())
        .collect();
    let ssr: f64 = x
        .iter()
        .zip(y)
        .map(|(&xi, &yi)| {
            let u = (xi - x_end) / span;
            let r = yi - y_mean - (coef[0] + coef[1] * u + coef[2] * u * u);
            r * r
        })
        .sum();
    let df = n as f64 - 3.0;
    // Back to x units: per span for the slope, per span² for the curvature.
    let p = ParabolaEnd {
        slope: coef[1] / span,
        slope_se: (ssr / df * inv[1][1]).sqrt() / span,
        curvature: coef[2] / (span * span),
        curvature_se: (ssr / df * inv[2][2]).sqrt() / (span * span),
        df,
    };
    let finite = [p.slope, p.slope_se, p.curvature, p.curvature_se];
    finite.iter().all(|v| v.is_finite()).then_some(p)
}

/// Inverse of a symmetric 3×3 matrix by cofactors; `None` when singular.
fn invert3(m: &[[f64; 3]; 3]) -> Option<[[f64; 3]; 3]> {
    let c = |i: usize, j: usize| {
        let (r0, r1) = ((i + 1) % 3, (i + 2) % 3);
        let (c0, c1) = ((j + 1) % 3, (j + 2) % 3);
        m[r0][c0] * m[r1][c1] - m[r0][c1] * m[r1][c0]
    };
    let det = m[0][0] * c(0, 0) + m[0][1] * c(0, 1) + m[0][2] * c(0, 2);
    let scale = m.iter().flatten().map(|v| v.abs()).fold(0.0, f64::max);
    if det.abs() <= 1e-12 * scale.powi(3) || !det.is_finite() {
        return None;
    }
    let mut inv = [[0.0; 3]; 3];
    for (i, row) in inv.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            // The adjugate is the transposed cofactor matrix.
            *v = c(j, i) / det;
        }
    }
    Some(inv)
}

/// A random walk with drift, differenced (Box & Jenkins, ch. 4): the
/// increments `(y[i] − y[i−1]) / (x[i] − x[i−1])`, each at the midpoint of
/// its step, as `(midpoints, increments)`. A series whose every step adds
/// its own independent error (a sum of sampled blocks' weights) is white
/// noise about its rate once differenced.
pub fn increments(x: &[f64], y: &[f64]) -> (Vec<f64>, Vec<f64>) {
    x.windows(2)
        .zip(y.windows(2))
        .filter(|(xw, _)| xw[1] > xw[0])
        .map(|(xw, yw)| ((xw[0] + xw[1]) / 2.0, (yw[1] - yw[0]) / (xw[1] - xw[0])))
        .unzip()
}

/// The 95% CI of a random walk's drift, for steps of any length. Each step adds an independent
/// error whose variance grows with its length (Brownian motion with drift: a step of `dx`
/// rises `dy ~ N(μ·dx, σ²·dx)`, as a sum of sampled blocks' weights does), so by maximum
/// likelihood the drift is the whole rise over the whole span, `μ = Σdy / Σdx`, with variance
/// `σ² / Σdx`, `σ²` the steps' `(dy − μ·dx)² / dx` over n − 1; the t interval on n − 1
/// degrees of freedom. Equal steps give the t interval of the mean increment; a short step (an
/// attach's last sample, soon after the one before) counts by its length, where as one
/// increment a single sampled block in it would read as many times the rate
/// (docs/native-sites.md). `None` below three steps.
pub fn drift_ci95(x: &[f64], y: &[f64]) -> Option<(f64, f64)> {
    let steps: Vec<(f64, f64)> = x
        .windows(2)
        .zip(y.windows(2))
        .filter(|(xw, _)| xw[1] > xw[0])
        .map(|(xw, yw)| (xw[1] - xw[0], yw[1] - yw[0]))
        .collect();
    let n = steps.len();
    if n < 3 {
        return None;
    }
    let span: f64 = steps.iter().map(|s| s.0).sum();
    let drift = steps.iter().map(|s| s.1).sum::<f64>() / span;
    let var = steps
        .iter()
        .map(|(dx, dy)| (dy - drift * dx).powi(2) / dx)
        .sum::<f64>()
        / (n - 1) as f64;
    let half = student_t_quantile(0.975, (n - 1) as f64) * (var / span).sqrt();
    half.is_finite().then_some((drift - half, drift + half))
}

/// Least-squares line through `(x, y)`, with the slope's 95% CI from Student's t distribution
/// with n−2 degrees of freedom.
///
/// Returns `None` if the lengths differ, n < 2, any value is non-finite, or `x` is constant
/// (slope undefined). Sums are taken about the means so byte-sized `y` (~1e8) keeps its precision.
pub fn ols(x: &[f64], y: &[f64]) -> Option<LinearFit> {
    let n = x.len();
    if n < 2 || y.len() != n || !all_finite(x) || !all_finite(y) || is_constant(x) {
        return None;
    }
    let (xm, ym) = (mean(x)?, mean(y)?);
    let (mut sxx, mut sxy, mut syy) = (0.0, 0.0, 0.0);
    for (xi, yi) in x.iter().zip(y) {
        let (dx, dy) = (xi - xm, yi - ym);
        sxx += dx * dx;
        sxy += dx * dy;
        syy += dy * dy;
    }
    if sxx.is_nan() || sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = ym - slope * xm;
    let ssr: f64 = x
        .iter()
        .zip(y)
        .map(|(xi, yi)| {
            let r = (yi - ym) - slope * (xi - xm);
            r * r
        })
        .sum();
    let r2 = if syy > 0.0 {
        (1.0 - ssr / syy).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let (mut slope_se, mut residual_sd, mut slope_ci95) = (None, None, None);
    if n >= 3 {
        let df = (n - 2) as f64;
        let sd = (ssr / df).sqrt();
        let se = sd / sxx.sqrt();
        let half = student_t_quantile(0.975, df) * se;
        slope_se = Some(se);
        residual_sd = Some(sd);
        slope_ci95 = Some((slope - half, slope + half));
    }
    let fit = LinearFit {
        n,
        slope,
        intercept,
        slope_ci95,
        slope_se,
        r2,
        residual_sd,
    };
    // Overflow (e.g. |y| near f64::MAX) would leave NaN/inf that cannot go to JSON.
    let finite = [slope, intercept, r2]
        .into_iter()
        .chain(slope_se)
        .chain(residual_sd)
        .chain(slope_ci95.map(|c| c.0))
        .chain(slope_ci95.map(|c| c.1))
        .all(f64::is_finite);
    finite.then_some(fit)
}

/// Above this many points `theil_sen` thins the series (see there).
pub const THEIL_SEN_MAX_POINTS: usize = 4096;

/// Theil–Sen slope estimator (Sen 1968; Theil 1950): the median of the slopes
/// `(y_j − y_i)/(x_j − x_i)` over all pairs i < j, skipping pairs with equal x. Bytes per x unit.
///
/// Robust to up to ~29% outliers. O(n²) time and memory; above `THEIL_SEN_MAX_POINTS` points it
/// uses every k-th point (k = ⌈n / 4096⌉), still a consistent slope estimate, so memory stays
/// under ~70 MB. `None` if there is no usable pair or a value is non-finite.
pub fn theil_sen(x: &[f64], y: &[f64]) -> Option<f64> {
    if y.len() != x.len() || !all_finite(x) || !all_finite(y) {
        return None;
    }
    let step = x.len().div_ceil(THEIL_SEN_MAX_POINTS).max(1);
    let (x, y): (Vec<f64>, Vec<f64>) = x
        .iter()
        .copied()
        .zip(y.iter().copied())
        .step_by(step)
        .unzip();
    let n = x.len();
    let mut slopes = Vec::with_capacity(n * n.saturating_sub(1) / 2);
    for i in 0..n {
        for j in i + 1..n {
            if x[j] != x[i] {
                slopes.push((y[j] - y[i]) / (x[j] - x[i]));
            }
        }
    }
    median(&mut slopes).filter(|s| s.is_finite())
}

/// Result of the Mann–Kendall trend test.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub struct MannKendall {
    /// Kendall's S = Σ_{i<j} sign(y_j − y_i): positive for a rising series. Dimensionless.
    pub s: f64,
    /// Standardised statistic (S ∓ 1)/sqrt(Var S), continuity-corrected. Dimensionless.
    pub z: f64,
    /// Two-sided p-value for "no monotonic trend", from the normal approximation.
    pub p_two_sided: f64,
}

/// Mann–Kendall test for a monotonic trend (Mann 1945; Kendall 1975) on `y` ordered by x.
/// O(n²) time.
///
/// Var(S) uses the tie correction `[n(n−1)(2n+5) − Σ t(t−1)(2t+5)]/18` over groups of `t` equal
/// values. The p-value uses the normal approximation with continuity correction (S−1 for S > 0,
/// S+1 for S < 0) at every n — not the exact distribution; for n < 10 this is slightly
/// conservative, which suits a leak detector that must not cry wolf.
///
/// `None` if n < 2 or a value is non-finite. If every value is tied, S = 0 and the result is
/// z = 0, p = 1 (no trend), not a division by zero.
pub fn mann_kendall(y: &[f64]) -> Option<MannKendall> {
    let n = y.len();
    if n < 2 || !all_finite(y) {
        return None;
    }
    let mut s: i64 = 0;
    for i in 0..n {
        for j in i + 1..n {
            s += match y[j].partial_cmp(&y[i]) {
                Some(std::cmp::Ordering::Greater) => 1,
                Some(std::cmp::Ordering::Less) => -1,
                _ => 0,
            };
        }
    }
    let mut sorted = y.to_vec();
    sorted.sort_by(f64::total_cmp);
    let ties: f64 = sorted
        .chunk_by(|a, b| a == b)
        .map(|group| {
            let t = group.len() as f64;
            t * (t - 1.0) * (2.0 * t + 5.0)
        })
        .sum();
    let nf = n as f64;
    let var = (nf * (nf - 1.0) * (2.0 * nf + 5.0) - ties) / 18.0;
    let s = s as f64;
    if var.is_nan() || var <= 0.0 || s == 0.0 {
        return Some(MannKendall {
            s,
            z: 0.0,
            p_two_sided: 1.0,
        });
    }
    let z = (s - s.signum()) / var.sqrt();
    Some(MannKendall {
        s,
        z,
        p_two_sided: erfc(z.abs() * FRAC_1_SQRT_2).min(1.0),
    })
}

/// Continuous two-segment ("broken-stick") least-squares fit with a fixed knot:
/// `y = a + head_slope·min(x, knot) + tail_slope·max(x − knot, 0)`.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub struct SegmentedFit {
    /// Where the two segments meet, x units.
    pub knot: f64,
    /// Slope before the knot, bytes per x unit.
    pub head_slope: f64,
    /// Slope after the knot, bytes per x unit.
    pub tail_slope: f64,
    /// Standard error of `tail_slope`, bytes per x unit.
    pub tail_slope_se: f64,
    /// Residual degrees of freedom, n − 3.
    pub df: f64,
}

/// Fits a linear spline with one fixed knot (ordinary least squares on the regressors
/// `min(x, knot)` and `max(x − knot, 0)`, see e.g. Draper & Smith, *Applied Regression
/// Analysis*, ch. on spline/segmented regression). With the knot fixed this is an ordinary linear
/// model, so `tail_slope / tail_slope_se` follows Student's t with n − 3 df under normal errors.
///
/// Unlike fitting the last points alone, the noise is estimated from all n points, which gives
/// the tail test more power on short series. `None` if n < 4, lengths differ, a value is
/// non-finite, or the knot leaves fewer than two distinct x on one side (segments not identifiable).
pub fn segmented_fit(x: &[f64], y: &[f64], knot: f64) -> Option<SegmentedFit> {
    let n = x.len();
    if n < 4 || y.len() != n || !all_finite(x) || !all_finite(y) || !knot.is_finite() {
        return None;
    }
    let u: Vec<f64> = x.iter().map(|&xi| xi.min(knot)).collect();
    let v: Vec<f64> = x.iter().map(|&xi| (xi - knot).max(0.0)).collect();
    let (um, vm, ym) = (mean(&u)?, mean(&v)?, mean(y)?);
    let (mut suu, mut svv, mut suv, mut suy, mut svy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for i in 0..n {
        let (du, dv, dy) = (u[i] - um, v[i] - vm, y[i] - ym);
        suu += du * du;
        svv += dv * dv;
        suv += du * dv;
        suy += du * dy;
        svy += dv * dy;
    }
    let det = suu * svv - suv * suv;
    // A tiny determinant means the two regressors are (nearly) collinear.
    if det.is_nan() || det <= 1e-9 * suu * svv {
        return None;
    }
    let head_slope = (svv * suy - suv * svy) / det;
    let tail_slope = (suu * svy - suv * suy) / det;
    let ssr: f64 = (0..n)
        .map(|i| {
            let r = (y[i] - ym) - head_slope * (u[i] - um) - tail_slope * (v[i] - vm);
            r * r
        })
        .sum();
    let df = (n - 3) as f64;
    let tail_slope_se = (ssr / df * suu / det).sqrt();
    let fit = SegmentedFit {
        knot,
        head_slope,
        tail_slope,
        tail_slope_se,
        df,
    };
    [head_slope, tail_slope, tail_slope_se]
        .iter()
        .all(|v| v.is_finite())
        .then_some(fit)
}

/// Slope shared by groups that each have their own intercept, with its Student t 95% CI on
/// N − G − 1 degrees of freedom (N points in G groups): a fixed-effects ("within") regression,
/// e.g. growth within each worker's life pooled over the workers of a pool, or within each life
/// of a restarted series pooled over its lives — the jump from one group's end to the next
/// group's start does not count. Groups of fewer than two points are left out. `None` without a
/// degree of freedom left, or when x does not vary within any group.
pub fn pooled_slope<G: AsRef<[(f64, f64)]>>(groups: &[G]) -> Option<(f64, (f64, f64))> {
    // Each group centred on its own means (its own intercept); sums per group, then added.
    let centred = || {
        groups
            .iter()
            .map(AsRef::as_ref)
            .filter(|g| g.len() >= 2)
            .map(|g| {
                let k = g.len() as f64;
                let mx = g.iter().map(|p| p.0).sum::<f64>() / k;
                let my = g.iter().map(|p| p.1).sum::<f64>() / k;
                (g, mx, my)
            })
    };
    let (mut sxy, mut sxx, mut n, mut count) = (0.0, 0.0, 0usize, 0usize);
    for (g, mx, my) in centred() {
        sxx += g.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
        sxy += g.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>();
        n += g.len();
        count += 1;
    }
    let df = n.checked_sub(count + 1).filter(|d| *d >= 1)? as f64;
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let sse: f64 = centred()
        .map(|(g, mx, my)| {
            g.iter()
                .map(|p| (p.1 - my - slope * (p.0 - mx)).powi(2))
                .sum::<f64>()
        })
        .sum();
    let se = (sse / df / sxx).sqrt();
    let t = student_t_quantile(0.975, df);
    Some((slope, (slope - t * se, slope + t * se)))
}

/// Inverse CDF of Student's t distribution with `df` (> 0, need not be an integer) degrees of
/// freedom: the t with P(T ≤ t) = p. Dimensionless.
///
/// Closed forms for df = 1 and 2; otherwise a Cornish–Fisher start (Abramowitz & Stegun 26.7.5)
/// refined by safeguarded Newton steps on the exact CDF (regularised incomplete beta), which is
/// accurate to ~1e-12. For df > 1e5 the Cornish–Fisher value itself is used (error < 1e-15).
/// Returns NaN if p is not in (0, 1) or df is not > 0.
pub fn student_t_quantile(p: f64, df: f64) -> f64 {
    let valid = p > 0.0 && p < 1.0 && df > 0.0;
    if !valid {
        return f64::NAN;
    }
    if p < 0.5 {
        return -student_t_quantile(1.0 - p, df);
    }
    if p == 0.5 {
        return 0.0;
    }
    if df == 1.0 {
        return (PI * (p - 0.5)).tan();
    }
    if df == 2.0 {
        return (2.0 * p - 1.0) / (2.0 * p * (1.0 - p)).sqrt();
    }
    let z = normal_quantile(p);
    let mut t = cornish_fisher(z, df);
    if df > 1e5 {
        return t;
    }
    let q = 1.0 - p; // target upper-tail probability
    if t.is_nan() || t <= 0.0 {
        t = 1.0;
    }
    // Newton on sf(t) = q, kept inside a bracket [lo, hi] with sf(lo) > q > sf(hi): a step that
    // leaves it becomes a bisection (or a doubling while no upper end is known yet).
    let (mut lo, mut hi) = (0.0, f64::INFINITY);
    let ln_norm = ln_gamma(0.5 * (df + 1.0)) - ln_gamma(0.5 * df) - 0.5 * (df * PI).ln();
    for _ in 0..500 {
        let f = student_t_sf(t, df) - q;
        if f > 0.0 {
            lo = t;
        } else {
            hi = t;
        }
        let pdf = (ln_norm - 0.5 * (df + 1.0) * (t * t / df).ln_1p()).exp();
        let mut next = t + f / pdf;
        if !(next > lo && next < hi) {
            next = if hi.is_finite() {
                0.5 * (lo + hi)
            } else {
                2.0 * t
            };
        }
        // Newton's error squares each step, so a step this small leaves an error ~1e-18.
        if (next - t).abs() <= 1e-9 * t {
            return next;
        }
        t = next;
    }
    t
}

/// Upper-tail probability P(T > t) of Student's t, for t ≥ 0:
/// `½·I_{df/(df+t²)}(df/2, ½)`.
fn student_t_sf(t: f64, df: f64) -> f64 {
    0.5 * reg_inc_beta(0.5 * df, 0.5, df / (df + t * t))
}

/// Cornish–Fisher expansion of the t quantile in powers of 1/df (Abramowitz & Stegun 26.7.5).
fn cornish_fisher(z: f64, df: f64) -> f64 {
    let z2 = z * z;
    let g1 = (z2 + 1.0) * z / 4.0;
    let g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0;
    let g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0;
    let g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0;
    z + (g1 + (g2 + (g3 + g4 / df) / df) / df) / df
}

/// Regularised incomplete beta I_x(a, b) by its continued fraction (modified Lentz), using the
/// symmetry I_x(a,b) = 1 − I_{1−x}(b,a) where the fraction converges slowly
/// (Numerical Recipes, 3rd ed., §6.4).
fn reg_inc_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_cont_frac(a, b, x) / a
    } else {
        1.0 - ln_front.exp() * beta_cont_frac(b, a, 1.0 - x) / b
    }
}

fn beta_cont_frac(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..10_000 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        // Even step.
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        // Odd step.
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 by the Lanczos approximation (g = 7, 9 terms; relative error ~1e-15).
fn ln_gamma(x: f64) -> f64 {
    const COEF: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection formula keeps the series in its accurate range.
        return (PI / (PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = COEF[0];
    for (i, c) in COEF.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + 7.5;
    0.5 * (2.0 * PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// Complementary error function erfc(x) = 1 − erf(x), relative error ~1e-14.
///
/// |x| < 2: Maclaurin series of erf (Abramowitz & Stegun 7.1.5); x ≥ 2: continued fraction
/// for erfc (A&S 7.1.14) evaluated by modified Lentz; x < 0 via erfc(−x) = 2 − erfc(x).
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 2.0 {
        // erf(x) = 2/√π Σ (−1)^k x^(2k+1) / (k! (2k+1))
        let x2 = x * x;
        let mut term = x; // (−1)^k x^(2k+1) / k!
        let mut sum = x;
        for k in 1..100 {
            let k = f64::from(k);
            term *= -x2 / k;
            let add = term / (2.0 * k + 1.0);
            sum += add;
            if add.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        return 1.0 - 2.0 / PI.sqrt() * sum;
    }
    if x > 27.3 {
        return 0.0; // below the smallest subnormal
    }
    // erfc(x) = exp(−x²)/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + …)))))
    const TINY: f64 = 1e-300;
    let mut f = x;
    let mut c = x;
    let mut d = 0.0;
    for k in 1..500 {
        let a = 0.5 * f64::from(k);
        d = x + a * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = x + a / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-x * x).exp() / PI.sqrt() / f
}

/// Standard normal CDF Φ(z) = ½·erfc(−z/√2).
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * erfc(-z * FRAC_1_SQRT_2)
}

/// Standard normal quantile Φ⁻¹(p): Acklam's rational approximation (relative error 1.2e-9)
/// polished by one Halley step on `normal_cdf`. NaN if p is not in (0, 1).
pub fn normal_quantile(p: f64) -> f64 {
    if !(p > 0.0 && p < 1.0) {
        return f64::NAN;
    }
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const P_LOW: f64 = 0.02425;
    let tail = |q: f64| {
        let r = (-2.0 * q.ln()).sqrt();
        (((((C[0] * r + C[1]) * r + C[2]) * r + C[3]) * r + C[4]) * r + C[5])
            / ((((D[0] * r + D[1]) * r + D[2]) * r + D[3]) * r + 1.0)
    };
    let z = if p < P_LOW {
        tail(p)
    } else if p > 1.0 - P_LOW {
        -tail(1.0 - p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    };
    // One Halley step (Acklam's suggested refinement).
    let e = normal_cdf(z) - p;
    let u = e * (2.0 * PI).sqrt() * (0.5 * z * z).exp();
    z - u / (1.0 + 0.5 * z * u)
}

/// Arithmetic mean; `None` for an empty slice.
pub fn mean(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    Some(v.iter().sum::<f64>() / v.len() as f64)
}

/// Median (mean of the middle two for even length); reorders `v`. `None` if empty.
pub fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let (mid, odd) = (v.len() / 2, v.len() % 2 == 1);
    // Selection instead of a full sort: Theil–Sen takes the median of n(n−1)/2 slopes.
    let (below, &mut middle, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    if odd {
        Some(middle)
    } else {
        let below_max = below.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(0.5 * (below_max + middle))
    }
}

fn all_finite(v: &[f64]) -> bool {
    v.iter().all(|a| a.is_finite())
}

fn is_constant(v: &[f64]) -> bool {
    v.windows(2).all(|w| w[0] == w[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parabolas_end_slope_is_its_derivative_at_the_last_point() {
        let x: Vec<f64> = (0..12).map(f64::from).collect();
        let y: Vec<f64> = x.iter().map(|&v| 5.0 + 3.0 * v - 0.1 * v * v).collect();
        let p = parabola_end(&x, &y).unwrap();
        assert!((p.slope - (3.0 - 0.2 * 11.0)).abs() < 1e-9, "{p:?}");
        assert!((p.curvature + 0.1).abs() < 1e-9, "{p:?}");
        assert!(
            p.slope_se < 1e-6 && p.curvature_se < 1e-6 && p.df == 9.0,
            "{p:?}"
        );
        // A line has its own slope at the end, with noise an error of the right size.
        let noisy: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| 2.0 * v + [0.3, -0.3][i % 2])
            .collect();
        let p = parabola_end(&x, &noisy).unwrap();
        assert!(
            (p.slope - 2.0).abs() < 3.0 * p.slope_se && p.slope_se > 0.0,
            "{p:?}"
        );
        assert!(p.curvature.abs() < 3.0 * p.curvature_se, "{p:?}");
        assert!(parabola_end(&x[..4], &y[..4]).is_none());
        assert!(parabola_end(&[1.0; 6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).is_none());
        // Seconds of a long attach: the same parabola over 600 s (its normal equations span
        // twelve orders of magnitude unscaled, and read as singular beyond about 60).
        let x: Vec<f64> = (0..600).map(f64::from).collect();
        let y: Vec<f64> = x.iter().map(|&v| 5e8 + 3e4 * v - 20.0 * v * v).collect();
        let p = parabola_end(&x, &y).unwrap();
        assert!((p.slope - (3e4 - 40.0 * 599.0)).abs() < 1e-6 * 3e4, "{p:?}");
        assert!((p.curvature + 20.0).abs() < 1e-9 * 20.0, "{p:?}");
    }

    #[test]
    fn pooled_slope_ignores_the_jump_between_workers() {
        // Two workers of 5 tasks, each +2 per task, the second starting low
        // again (recycled): a plain regression would see a sawtooth.
        let w1: Vec<(f64, f64)> = (1..=5).map(|i| (i as f64, 10.0 + 2.0 * i as f64)).collect();
        let w2: Vec<(f64, f64)> = (6..=10)
            .map(|i| (i as f64, 10.0 + 2.0 * (i - 5) as f64))
            .collect();
        let (slope, ci) = pooled_slope(&[w1, w2]).unwrap();
        assert!((slope - 2.0).abs() < 1e-9);
        assert!((ci.0 - 2.0).abs() < 1e-6 && (ci.1 - 2.0).abs() < 1e-6);
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn t_quantiles_match_tables() {
        // Values from the brief (4 decimals) ...
        for (df, want) in [
            (1.0, 12.7062),
            (2.0, 4.3027),
            (8.0, 2.3060),
            (30.0, 2.0423),
            (1000.0, 1.9623),
        ] {
            let got = student_t_quantile(0.975, df);
            assert!(close(got, want, 1e-4), "df {df}: {got} vs {want}");
        }
        // ... and to more digits (standard tables / R's qt).
        for (p, df, want) in [
            (0.975, 1.0, 12.706_204_736_174_7),
            (0.975, 2.0, 4.302_652_729_749_46),
            (0.975, 8.0, 2.306_004_135_204_17),
            (0.975, 30.0, 2.042_272_456_301_24),
            (0.99, 7.0, 2.997_951_566_868_53),
            (0.995, 3.0, 5.840_909_309_733_35),
        ] {
            let got = student_t_quantile(p, df);
            assert!(close(got, want, 1e-10), "p {p} df {df}: {got} vs {want}");
        }
        assert!(close(student_t_quantile(0.025, 8.0), -2.306_004_135, 1e-7));
        // Beyond df = 1e5 the first Cornish–Fisher term is all that is left: z + (z³ + z)/(4·df).
        let z = 1.959_963_984_540_054;
        let want = z + (z * z * z + z) / 4e7;
        assert!(close(student_t_quantile(0.975, 1e7), want, 1e-12));
        assert!(student_t_quantile(0.0, 5.0).is_nan());
        assert!(student_t_quantile(0.5, 0.0).is_nan());
    }

    #[test]
    fn t_quantile_round_trips_through_cdf() {
        for df in [0.5, 1.5, 3.0, 4.0, 7.5, 25.0, 300.0, 50_000.0] {
            for p in [0.6, 0.9, 0.975, 0.999, 0.999_999] {
                let t = student_t_quantile(p, df);
                let back = 1.0 - student_t_sf(t, df);
                assert!(close(back, p, 1e-10), "df {df} p {p}: t {t} cdf {back}");
            }
        }
    }

    #[test]
    fn erfc_matches_reference() {
        // Reference values from Python's math.erfc.
        for (x, want) in [
            (0.0, 1.0),
            (0.1, 0.887_537_083_981_715_2),
            (0.5, 0.479_500_122_186_953_5),
            (1.0, 0.157_299_207_050_285_13),
            (1.5, 0.033_894_853_524_689_274),
            (2.0, 0.004_677_734_981_047_265),
            (2.5, 0.000_406_952_017_444_958_9),
            (3.0, 2.209_049_699_858_543_8e-5),
            (4.0, 1.541_725_790_028_002e-8),
            (5.0, 1.537_459_794_428_035_1e-12),
            (6.0, 2.151_973_671_249_891_6e-17),
            (10.0, 2.088_487_583_762_545e-45),
        ] {
            let got = erfc(x);
            assert!(
                (got - want).abs() <= 1e-13 * want,
                "erfc({x}) = {got}, want {want}"
            );
            assert!(close(erfc(-x), 2.0 - want, 1e-15));
        }
        assert!(close(normal_quantile(0.975), 1.959_963_984_540_054, 1e-12));
        assert!(close(normal_quantile(1e-10), -6.361_340_902_404_056, 1e-9));
    }

    #[test]
    fn ols_recovers_exact_line_and_ci() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let y: Vec<f64> = x.iter().map(|v| 100e6 + 4.5e6 * v).collect();
        let f = ols(&x, &y).unwrap();
        assert!(close(f.slope, 4.5e6, 1e-6));
        assert!(close(f.intercept, 100e6, 1e-5));
        assert!(close(f.r2, 1.0, 1e-12));
        let (lo, hi) = f.slope_ci95.unwrap();
        assert!(close(lo, 4.5e6, 1e-3) && close(hi, 4.5e6, 1e-3));

        // Hand-computed: x = 1..5, y = [1, 3, 2, 5, 4]: slope 0.8, SSR 3.6, se = sqrt(1.2/10).
        let f = ols(&x, &[1.0, 3.0, 2.0, 5.0, 4.0]).unwrap();
        assert!(close(f.slope, 0.8, 1e-12));
        assert!(close(f.intercept, 0.6, 1e-12));
        let se = (1.2_f64 / 10.0).sqrt();
        assert!(close(f.slope_se.unwrap(), se, 1e-12));
        let half = 3.182_446_305_284_263 * se; // t(0.975, 3)
        let (lo, hi) = f.slope_ci95.unwrap();
        assert!(close(lo, 0.8 - half, 1e-9) && close(hi, 0.8 + half, 1e-9));
        assert!(close(f.r2, 0.64, 1e-12));
    }

    #[test]
    fn a_random_walks_drift_has_the_t_interval_of_its_increments() {
        // Increments 0.8, 1.2, 0.9, 1.1 per x (x steps of 1, the last of 2).
        let x = [1.0, 2.0, 3.0, 4.0, 6.0];
        let y = [0.0, 0.8, 2.0, 2.9, 5.1];
        let (mid, d) = increments(&x, &y);
        assert_eq!(mid, vec![1.5, 2.5, 3.5, 5.0]);
        assert!(
            d.iter()
                .zip([0.8, 1.2, 0.9, 1.1])
                .all(|(a, b)| (a - b).abs() < 1e-12)
        );
        // Drift 5.1 / 5 = 1.02; (dy − 1.02·dx)²/dx: 0.0484, 0.0324, 0.0144, 0.0128, over 3:
        // 0.036; se √(0.036 / 5) = 0.0849, t(0.975, 3) = 3.182: ±0.2700.
        let (lo, hi) = drift_ci95(&x, &y).unwrap();
        assert!((lo - (1.02 - 0.2700)).abs() < 1e-3, "{lo}");
        assert!((hi - (1.02 + 0.2700)).abs() < 1e-3, "{hi}");
        // Equal steps: the t interval of the mean increment (mean 1.0, sd 0.183, ±0.2906).
        let y = [0.0, 0.8, 2.0, 2.9, 4.0];
        let (lo, hi) = drift_ci95(&[1.0, 2.0, 3.0, 4.0, 5.0], &y).unwrap();
        assert!((lo - (1.0 - 0.2906)).abs() < 1e-3 && (hi - (1.0 + 0.2906)).abs() < 1e-3);
        // Blocks of 0.05 sampled at a rate of 1 per x (20 a step, ±0.2), and a last step of
        // 0.01 x holding one block: counted by its length, drift 0.988 ± 0.266; as one
        // increment among six (5.0 per x) it would widen the interval to ±1.73.
        let x = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 5.01];
        let y = [0.0, 1.1, 1.9, 3.0, 4.1, 4.9, 4.95];
        let (lo, hi) = drift_ci95(&x, &y).unwrap();
        assert!((lo - (0.988 - 0.266)).abs() < 2e-3, "{lo}");
        assert!((hi - (0.988 + 0.266)).abs() < 2e-3, "{hi}");
        // Too few increments; a repeated x is no step.
        assert_eq!(drift_ci95(&x[..3], &y[..3]), None);
        assert_eq!(increments(&[1.0, 1.0, 2.0], &[0.0, 5.0, 6.0]).1, vec![1.0]);
    }

    #[test]
    fn ols_edge_cases() {
        assert!(ols(&[], &[]).is_none());
        assert!(ols(&[1.0], &[5.0]).is_none());
        assert!(ols(&[2.0, 2.0, 2.0], &[1.0, 2.0, 3.0]).is_none());
        assert!(ols(&[1.0, 2.0], &[1.0]).is_none());
        assert!(ols(&[1.0, f64::NAN], &[1.0, 2.0]).is_none());
        let two = ols(&[1.0, 3.0], &[10.0, 14.0]).unwrap();
        assert!(close(two.slope, 2.0, 1e-12));
        assert_eq!(two.slope_ci95, None);
        assert_eq!(two.residual_sd, None);
        let flat = ols(&[1.0, 2.0, 3.0], &[7.0, 7.0, 7.0]).unwrap();
        assert_eq!((flat.slope, flat.r2), (0.0, 1.0));
        // Overflowing sums are refused rather than returned as NaN.
        assert!(ols(&[1.0, 2.0, 3.0], &[f64::MAX, -f64::MAX, f64::MAX]).is_none());
    }

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn theil_sen_thins_long_series() {
        let n = 2 * THEIL_SEN_MAX_POINTS + 1;
        let x: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let y: Vec<f64> = x.iter().map(|v| 7.0 + 0.5 * v).collect();
        assert!(close(theil_sen(&x, &y).unwrap(), 0.5, 1e-12));
    }

    #[test]
    fn theil_sen_ignores_an_outlier_and_equal_x() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let y = [10.0, 12.0, 14.0, 1000.0, 18.0, 20.0];
        assert!(close(theil_sen(&x, &y).unwrap(), 2.0, 1e-12));
        // Pairs with equal x are skipped: only (1,1)→(2,3) and (1,2)→(2,3) remain.
        assert!(close(
            theil_sen(&[1.0, 1.0, 2.0], &[1.0, 2.0, 3.0]).unwrap(),
            1.5,
            1e-12
        ));
        assert!(theil_sen(&[3.0, 3.0], &[1.0, 2.0]).is_none());
        assert!(theil_sen(&[], &[]).is_none());
    }

    #[test]
    fn mann_kendall_hand_computed() {
        // y = 1..5: S = 10, Var = 5·4·15/18, z = 9/sqrt(Var).
        let mk = mann_kendall(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let z = 9.0 / (50.0_f64 / 3.0).sqrt();
        assert_eq!(mk.s, 10.0);
        assert!(close(mk.z, z, 1e-12));
        assert!(close(mk.p_two_sided, erfc(z / 2.0_f64.sqrt()), 1e-15));
        assert!(close(mk.p_two_sided, 0.027_486_336_111_510_353, 1e-12));
        // With a tie: y = [1, 1, 2, 3]: S = 5, Var = (4·3·13 − 2·1·9)/18 = 23/3.
        let mk = mann_kendall(&[1.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(mk.s, 5.0);
        assert!(close(mk.z, 4.0 / (23.0_f64 / 3.0).sqrt(), 1e-12));
        // Falling series is symmetric.
        let down = mann_kendall(&[5.0, 4.0, 3.0, 2.0, 1.0]).unwrap();
        assert_eq!(down.s, -10.0);
        assert!(close(down.z, -z, 1e-12));
        // All tied and degenerate inputs.
        let flat = mann_kendall(&[3.0; 6]).unwrap();
        assert_eq!((flat.s, flat.z, flat.p_two_sided), (0.0, 0.0, 1.0));
        assert!(mann_kendall(&[1.0]).is_none());
        assert!(mann_kendall(&[1.0, f64::INFINITY]).is_none());
    }

    #[test]
    fn segmented_fit_recovers_both_slopes() {
        let x: Vec<f64> = (1..=10).map(f64::from).collect();
        let y: Vec<f64> = x
            .iter()
            .map(|&v| 3.0 * v.min(5.5) + 0.5 * (v - 5.5).max(0.0))
            .collect();
        let s = segmented_fit(&x, &y, 5.5).unwrap();
        assert!(close(s.head_slope, 3.0, 1e-9));
        assert!(close(s.tail_slope, 0.5, 1e-9));
        assert!(s.tail_slope_se < 1e-9);
        assert_eq!(s.df, 7.0);
        // Knot beyond the data: the tail regressor is all zero.
        assert!(segmented_fit(&x, &y, 20.0).is_none());
        assert!(segmented_fit(&x[..3], &y[..3], 2.0).is_none());
    }
}
