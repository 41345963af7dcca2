//! Interim: least squares only (replaced by the full statistics module).

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearFit {
    pub n: usize,
    pub slope: f64,
    pub intercept: f64,
    pub slope_ci95: Option<(f64, f64)>,
    pub slope_se: f64,
    pub r2: f64,
    pub residual_sd: f64,
}

pub fn ols(x: &[f64], y: &[f64]) -> Option<LinearFit> {
    let n = x.len().min(y.len());
    if n < 2 {
        return None;
    }
    let mx = x.iter().sum::<f64>() / n as f64;
    let my = y.iter().sum::<f64>() / n as f64;
    let sxx: f64 = x.iter().map(|v| (v - mx).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let sse: f64 = x
        .iter()
        .zip(y)
        .map(|(a, b)| (b - intercept - slope * a).powi(2))
        .sum();
    let syy: f64 = y.iter().map(|v| (v - my).powi(2)).sum();
    let residual_sd = if n > 2 {
        (sse / (n - 2) as f64).sqrt()
    } else {
        0.0
    };
    Some(LinearFit {
        n,
        slope,
        intercept,
        slope_ci95: None,
        slope_se: residual_sd / sxx.sqrt(),
        r2: if syy > 0.0 { 1.0 - sse / syy } else { 1.0 },
        residual_sd,
    })
}
