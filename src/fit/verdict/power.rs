//! The power calculation: how many runs would decide an inconclusive series.

use super::{Ctx, EndRate, MAX_RUNS_NEEDED};
use crate::fit::stats;

/// Power of the "how many runs would decide it" estimates: the number of points at which the
/// deciding test would succeed with this probability if the truth were at the boundary.
pub(super) const POWER: f64 = 0.8;

/// Smallest number m of equally spaced points (spacing `dx` x units) for which a slope test at
/// confidence `p` has power `power` against a slope `target` away (bytes per x unit):
/// `(t(p, m−2) + z(power)) · sd/dx · sqrt(12 / (m(m²−1))) ≤ target` (z(0.5) = 0: the plain
/// half-width). Capped at `MAX_RUNS_NEEDED`. `None` if the inputs make no sense.
pub(super) fn points_needed(sd: f64, dx: f64, target: f64, p: f64, power: f64) -> Option<usize> {
    let valid = sd >= 0.0
        && sd.is_finite()
        && dx > 0.0
        && target > 0.0
        && p > 0.5
        && p < 1.0
        && (0.5..1.0).contains(&power);
    if !valid {
        return None;
    }
    let z = if power > 0.5 {
        stats::normal_quantile(power)
    } else {
        0.0
    };
    let half_width = |m: usize| {
        let m = m as f64;
        (stats::student_t_quantile(p, m - 2.0) + z) * sd / dx * (12.0 / (m * (m * m - 1.0))).sqrt()
    };
    // t(p, m−2) > z(p) and m(m²−1) < m³, so m > cbrt(12·((z(p)+z)·sd/(dx·target))²): start
    // there and step up — t is close to z by then, so this takes only a few steps.
    let ratio = (stats::normal_quantile(p) + z) * sd / (dx * target);
    let lower = (12.0 * ratio * ratio).cbrt().floor();
    if lower.is_nan() || lower >= MAX_RUNS_NEEDED as f64 {
        return Some(MAX_RUNS_NEEDED);
    }
    let mut m = (lower as usize).max(3);
    while m < MAX_RUNS_NEEDED && half_width(m) > target {
        m += 1;
    }
    Some(m)
}

impl Ctx<'_> {
    /// Total points (warm-up included) that would decide an inconclusive end estimate fitted
    /// on the last `n_end` of the points (`before` points before them, which stay as they
    /// are): its interval's half-width shrinks like m^(−3/2), as a least-squares slope's over
    /// equally spaced points does, until it would clear the threshold with power `POWER` if
    /// the rate stayed where it is (at least a quarter of the threshold away).
    pub(super) fn needed_for(&self, end: &EndRate, n_end: usize, before: usize) -> Option<usize> {
        let half = 0.5 * (end.ci95.1 - end.ci95.0);
        let gap = (end.rate - self.thr).abs().max(0.25 * self.thr);
        if !(half > 0.0 && gap > 0.0) {
            return None;
        }
        let z95 = stats::normal_quantile(0.975);
        let ratio = (1.0 + stats::normal_quantile(POWER) / z95) * half / gap;
        self.needed(before as f64 + n_end as f64 * ratio.powf(2.0 / 3.0))
    }

    /// Total points (warm-up included) for `m` points of the fitted (possibly averaged) series;
    /// `None` unless more than there are now.
    /// Capped at `MAX_RUNS_NEEDED`, or at ten times the points there are when that is more
    /// (an hour of attach samples is past a thousand already).
    pub(super) fn needed(&self, m: f64) -> Option<usize> {
        let raw = (m * self.per_point).ceil();
        let cap = MAX_RUNS_NEEDED.max(10 * (self.warm + self.raw_n));
        (raw.is_finite() && raw > self.raw_n as f64)
            .then(|| (self.warm + raw.min(cap as f64) as usize).min(cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_needed_matches_formula() {
        // t(0.975, 8)·1·sqrt(12/990) = 0.2539: 10 points suffice for 0.26 but not for 0.25.
        assert_eq!(points_needed(1.0, 1.0, 0.26, 0.975, 0.5), Some(10));
        assert_eq!(points_needed(1.0, 1.0, 0.25, 0.975, 0.5), Some(11));
        assert_eq!(
            points_needed(1.0, 1.0, 1e-9, 0.975, 0.5),
            Some(MAX_RUNS_NEEDED)
        );
        assert_eq!(points_needed(1.0, 1.0, 0.0, 0.975, 0.5), None);
    }
}
