//! What the line chart draws over the data to explain it: the fitted line with its 95% CI
//! band, and the model lines (segments, trough envelopes) the verdict used.

use plotters::style::RGBColor;

use super::layout::{self, Span};
use super::style::MODEL;
use super::{FitOverlay, ModelLine, ModelStyle, YUnit};

/// Fit line and CI band in plot units (y divided by the unit factor).
pub(crate) struct FitGeom {
    pub line: [(f64, f64); 2],
    /// Closed polygon of the band, if a CI was given.
    pub band: Option<Vec<(f64, f64)>>,
    pub label: String,
    pub band_label: Option<String>,
    /// The judged rate's legend row, when the line is not its model.
    pub judged_label: Option<String>,
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
    // The legend's rates in the report's unit (per hour for time), the line in the axis'.
    let (scale, per) = match &f.legend_per {
        Some((k, name)) => (*k, name.as_str()),
        None => (1.0, cx.per),
    };
    let label = format!(
        "{}: {} per {per}",
        f.name,
        layout::signed_amount(f.slope * scale, cx.y_unit),
    );
    let (band, band_label) = match f.slope_ci95 {
        Some((lo, hi)) if lo.is_finite() && hi.is_finite() => (
            Some(band_polygon(f, (lo, hi), (a, b), cx)),
            Some(band_label(
                lo.min(hi) * scale,
                lo.max(hi) * scale,
                cx.y_unit,
                per,
            )),
        ),
        _ => (None, None),
    };
    let judged_label = f.judged_rate.as_ref().map(|(name, r)| {
        format!(
            "{name}: {} per {per}",
            layout::signed_amount(r * scale, cx.y_unit)
        )
    });
    Some(FitGeom {
        line: [(a, at(a)), (b, at(b))],
        band,
        label,
        band_label,
        judged_label,
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

/// "95% CI: +4.40 to +4.90 MiB per run": both bounds in one unit, signed
/// as the text signs rates.
fn band_label(lo: f64, hi: f64, y_unit: YUnit, per: &str) -> String {
    let signed = |v: f64| {
        let s = layout::sig3(v);
        if v > 0.0 { format!("+{s}") } else { s }
    };
    match y_unit {
        YUnit::Bytes => {
            let u = layout::byte_unit_for(lo.abs().max(hi.abs()));
            format!(
                "95% CI: {} to {} {} per {per}",
                signed(lo / u.factor),
                signed(hi / u.factor),
                u.name
            )
        }
        YUnit::Count => format!("95% CI: {} to {} per {per}", signed(lo), signed(hi)),
    }
}

/// Clips a segment to the y span so a steep fit can't draw outside the plot.
pub(crate) fn clip_segment(seg: [(f64, f64); 2], ys: Span) -> Vec<(f64, f64)> {
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

/// A model line in plot units, split at its gaps.
pub(crate) struct ModelGeom {
    pub label: String,
    pub style: ModelStyle,
    pub color: RGBColor,
    /// Runs of finite points, y divided by the unit factor; each is drawn as one polyline.
    pub pieces: Vec<Vec<(f64, f64)>>,
}

impl ModelGeom {
    pub fn points(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.pieces.iter().flatten().copied()
    }
}

/// Scales the model lines to plot units and splits them where a point is not finite.
pub(crate) fn model_geometry(model: &[ModelLine], factor: f64) -> Vec<ModelGeom> {
    model
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let scaled = |&(x, y): &(f64, f64)| (x, y / factor);
            let finite = |(x, y): &(f64, f64)| x.is_finite() && y.is_finite();
            let pieces = m
                .points
                .split(|p| !finite(&scaled(p)))
                .filter(|piece| !piece.is_empty())
                .map(|piece| piece.iter().map(scaled).collect())
                .collect();
            ModelGeom {
                label: m.name.clone(),
                style: m.style,
                color: MODEL[i % MODEL.len()],
                pieces,
            }
        })
        .collect()
}

/// The visible parts of a polyline inside `xs`×`ys` (Liang–Barsky clipping per segment):
/// plotters draws outside the plotting area unless told otherwise.
pub(crate) fn clip_polyline(points: &[(f64, f64)], xs: Span, ys: Span) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
    // Whether the previous segment reached its end unclipped, so the next one continues it.
    let mut joined = false;
    for w in points.windows(2) {
        let (p0, p1) = (w[0], w[1]);
        let Some((t0, t1)) = clip_to_rect(p0, p1, xs, ys) else {
            joined = false;
            continue;
        };
        let at = |t: f64| (p0.0 + (p1.0 - p0.0) * t, p0.1 + (p1.1 - p0.1) * t);
        match out.last_mut() {
            Some(piece) if joined && t0 == 0.0 => piece.push(at(t1)),
            _ => out.push(vec![at(t0), at(t1)]),
        }
        joined = t1 == 1.0;
    }
    if let [p] = points {
        // A lone point (a one-sample segment) stays a piece of its own: drawn as a dot.
        if in_rect(*p, xs, ys) {
            out.push(vec![*p]);
        }
    }
    out
}

fn in_rect((x, y): (f64, f64), xs: Span, ys: Span) -> bool {
    x >= xs.lo && x <= xs.hi && y >= ys.lo && y <= ys.hi
}

/// The part of segment `p0`–`p1` inside the rectangle, as the interval of t (0 at `p0`, 1 at
/// `p1`) it spans; `None` if it misses the rectangle.
fn clip_to_rect(p0: (f64, f64), p1: (f64, f64), xs: Span, ys: Span) -> Option<(f64, f64)> {
    let (dx, dy) = (p1.0 - p0.0, p1.1 - p0.1);
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    // Each edge as p·t ≤ q: left, right, bottom, top.
    for (p, q) in [
        (-dx, p0.0 - xs.lo),
        (dx, xs.hi - p0.0),
        (-dy, p0.1 - ys.lo),
        (dy, ys.hi - p0.1),
    ] {
        if p == 0.0 {
            if q < 0.0 {
                return None;
            }
        } else if p < 0.0 {
            t0 = t0.max(q / p);
        } else {
            t1 = t1.min(q / p);
        }
    }
    (t0 <= t1).then_some((t0, t1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOX: Span = Span { lo: 0.0, hi: 10.0 };

    #[test]
    fn gaps_split_a_model_into_pieces() {
        let m = ModelLine {
            name: "segments".into(),
            points: vec![
                (f64::NAN, 1.0),
                (1.0, 2.0),
                (6.0, 2.0),
                (6.0, f64::NAN),
                (f64::NAN, f64::NAN),
                (7.0, 4.0),
                (9.0, 4.0),
                (9.5, f64::INFINITY),
            ],
            style: ModelStyle::Steps,
        };
        let g = &model_geometry(&[m], 2.0)[0];
        assert_eq!(
            g.pieces,
            [vec![(1.0, 1.0), (6.0, 1.0)], vec![(7.0, 2.0), (9.0, 2.0)]]
        );
        assert_eq!(g.color, MODEL[0]);
    }

    #[test]
    fn polylines_are_clipped_to_the_plot() {
        // Inside: unchanged, one piece.
        let inside = [(1.0, 1.0), (2.0, 5.0), (3.0, 2.0)];
        assert_eq!(clip_polyline(&inside, BOX, BOX), [inside.to_vec()]);
        // Leaves through the top and comes back: two pieces, cut at y = 10.
        let out = clip_polyline(&[(1.0, 5.0), (3.0, 15.0), (5.0, 5.0)], BOX, BOX);
        assert_eq!(
            out,
            [vec![(1.0, 5.0), (2.0, 10.0)], vec![(4.0, 10.0), (5.0, 5.0)]]
        );
        // Starts left of the plot; a vertical step on the right edge is kept.
        let out = clip_polyline(
            &[(-5.0, 1.0), (5.0, 1.0), (10.0, 1.0), (10.0, 3.0)],
            BOX,
            BOX,
        );
        assert_eq!(
            out,
            [vec![(0.0, 1.0), (5.0, 1.0), (10.0, 1.0), (10.0, 3.0)]]
        );
        // Entirely outside, and a lone point inside.
        assert!(clip_polyline(&[(11.0, 1.0), (12.0, 2.0)], BOX, BOX).is_empty());
        assert_eq!(clip_polyline(&[(3.0, 3.0)], BOX, BOX), [vec![(3.0, 3.0)]]);
        assert!(clip_polyline(&[(30.0, 3.0)], BOX, BOX).is_empty());
    }
}
