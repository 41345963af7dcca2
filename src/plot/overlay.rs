//! What the line chart draws over the data to explain it: the fitted line with its 95% CI band.

use super::layout;
use super::{FitOverlay, YUnit};

/// Fit line and CI band in plot units (y divided by the unit factor).
pub(crate) struct FitGeom {
    pub line: [(f64, f64); 2],
    /// Closed polygon of the band, if a CI was given.
    pub band: Option<Vec<(f64, f64)>>,
    pub label: String,
    pub band_label: Option<String>,
}

/// How the fitted series is shown: its first line's points (plot units), the bytes per plot
/// unit, and the wording of its axes.
pub(crate) struct FitContext<'a> {
    /// Finite points of the fitted line, sorted by x, y in plot units.
    pub points: &'a [(f64, f64)],
    pub factor: f64,
    pub y_unit: YUnit,
    /// The x unit for "per …", e.g. "run" or "h".
    pub per: &'a str,
}

pub(crate) fn fit_geometry(f: &FitOverlay, cx: &FitContext<'_>) -> Option<FitGeom> {
    let finite = [f.slope, f.intercept, f.x_from, f.x_to]
        .iter()
        .all(|v| v.is_finite());
    if !finite {
        return None;
    }
    let (a, b) = if f.x_from <= f.x_to {
        (f.x_from, f.x_to)
    } else {
        (f.x_to, f.x_from)
    };
    let at = |x: f64| (f.intercept + f.slope * x) / cx.factor;
    let label = format!(
        "fit: {} per {}",
        layout::signed_amount(f.slope, cx.y_unit),
        cx.per
    );
    let (band, band_label) = match f.slope_ci95 {
        Some((lo, hi)) if lo.is_finite() && hi.is_finite() => (
            Some(band_polygon(f, (lo, hi), (a, b), cx)),
            Some(band_label(lo.min(hi), lo.max(hi), cx)),
        ),
        _ => (None, None),
    };
    Some(FitGeom {
        line: [(a, at(a)), (b, at(b))],
        band,
        label,
        band_label,
    })
}

/// The region between the lines with the CI's slopes through the fitted point at the mean x:
/// a bow-tie, narrowest at that pivot (where an OLS fit's uncertainty is smallest).
fn band_polygon(
    f: &FitOverlay,
    (lo, hi): (f64, f64),
    (a, b): (f64, f64),
    cx: &FitContext<'_>,
) -> Vec<(f64, f64)> {
    let xm = f
        .x_mean
        .filter(|v| v.is_finite())
        .or_else(|| {
            // The OLS pivot is the mean x of the fitted points; recover it from the data.
            let xs: Vec<f64> = cx
                .points
                .iter()
                .map(|(x, _)| *x)
                .filter(|x| *x >= a && *x <= b)
                .collect();
            (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
        })
        .unwrap_or((a + b) / 2.0);
    let ym = f.intercept + f.slope * xm;
    // Sample along x so the bow-tie (narrowest at the pivot) is traced faithfully.
    let n = 48;
    let mut xs: Vec<f64> = (0..=n).map(|k| a + (b - a) * k as f64 / n as f64).collect();
    if xm > a && xm < b {
        xs.push(xm);
        xs.sort_by(f64::total_cmp);
    }
    let edge = |x: f64, s: f64| (ym + s * (x - xm)) / cx.factor;
    let upper = xs.iter().map(|&x| (x, edge(x, lo).max(edge(x, hi))));
    let lower = xs.iter().rev().map(|&x| (x, edge(x, lo).min(edge(x, hi))));
    upper.chain(lower).collect()
}

/// "95% CI: 4.40 to 4.90 MiB per run": both bounds in one unit.
fn band_label(lo: f64, hi: f64, cx: &FitContext<'_>) -> String {
    let per = cx.per;
    match cx.y_unit {
        YUnit::Bytes => {
            let u = layout::byte_unit_for(lo.abs().max(hi.abs()));
            format!(
                "95% CI: {} to {} {} per {per}",
                layout::sig3(lo / u.factor),
                layout::sig3(hi / u.factor),
                u.name
            )
        }
        YUnit::Count => format!(
            "95% CI: {} to {} per {per}",
            layout::sig3(lo),
            layout::sig3(hi)
        ),
    }
}

/// Clips a segment to the y span so a steep fit can't draw outside the plot.
pub(crate) fn clip_segment(seg: [(f64, f64); 2], ys: layout::Span) -> Vec<(f64, f64)> {
    let [(x0, y0), (x1, y1)] = seg;
    let mut t0 = 0.0f64;
    let mut t1 = 1.0f64;
    let dy = y1 - y0;
    if dy.abs() > 0.0 {
        let ta = (ys.lo - y0) / dy;
        let tb = (ys.hi - y0) / dy;
        t0 = t0.max(ta.min(tb));
        t1 = t1.min(ta.max(tb));
    } else if y0 < ys.lo || y0 > ys.hi {
        return Vec::new();
    }
    if t0 > t1 {
        return Vec::new();
    }
    let at = |t: f64| (x0 + (x1 - x0) * t, y0 + dy * t);
    vec![at(t0), at(t1)]
}
