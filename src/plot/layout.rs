//! Pure layout helpers for the charts: unit choice, axis ranges, tick positions and label text.
//!
//! Kept free of drawing so it can be unit-tested without rendering anything.

use super::YUnit;

/// A binary byte unit with its divisor: the axis of a byte chart is scaled to one unit for
/// all its ticks (one value's own label goes through `units::format_bytes` instead).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ByteUnit {
    pub name: &'static str,
    pub factor: f64,
}

/// Largest unit in which `magnitude` is still >= 1, so tick labels stay short (e.g. "156" MiB
/// rather than "163577856" B or "0.15" GiB): the report's own choice (`units::binary_unit`).
pub(crate) fn byte_unit_for(magnitude: f64) -> ByteUnit {
    let (factor, name) = crate::units::binary_unit(magnitude);
    ByteUnit { name, factor }
}

/// A growth as the labels show it: "+" when positive (zero stays "0"), bytes in the report's
/// own wording (`units::format_bytes`: binary units, three significant figures), counts with
/// three significant digits.
pub(crate) fn signed_amount(v: f64, unit: YUnit) -> String {
    let body = match unit {
        YUnit::Bytes => crate::units::format_bytes(v),
        YUnit::Count => sig3(v),
    };
    if v > 0.0 { format!("+{body}") } else { body }
}

/// Three significant digits without scientific notation for the magnitudes we meet.
pub(crate) fn sig3(v: f64) -> String {
    let a = v.abs();
    let decimals = if a == 0.0 || a >= 100.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        // Small values: enough decimals to show three significant digits, capped so that
        // denormal-ish noise doesn't produce absurd strings.
        let lead = (-a.log10()).floor() as i32;
        (lead + 3).clamp(2, 9) as usize
    };
    format!("{v:.decimals$}")
}

/// A closed axis interval that is never degenerate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Span {
    pub lo: f64,
    pub hi: f64,
}

impl Span {
    pub fn len(&self) -> f64 {
        self.hi - self.lo
    }
}

/// Min/max of the finite values, or `None` if there are none.
pub(crate) fn extent(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

/// Y range for memory-like data: anchor at 0 only when the data comes close to it (otherwise a
/// 114→156 MiB leak would be squashed into the top quarter of the plot), else pad 7% each side.
pub(crate) fn y_span(data: Option<(f64, f64)>) -> Span {
    let Some((lo, hi)) = data else {
        return Span { lo: 0.0, hi: 1.0 };
    };
    let span = hi - lo;
    if span <= f64::EPSILON * hi.abs().max(lo.abs()).max(1.0) {
        // Flat series: give it a band of ±5% of its value (±1 at zero) so it shows as a line
        // in the middle instead of a zero-height axis.
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.05 };
        let lo2 = if lo >= 0.0 && lo - pad < 0.0 {
            0.0
        } else {
            lo - pad
        };
        return Span {
            lo: lo2,
            hi: hi + pad,
        };
    }
    let pad = span * 0.07;
    let near_zero = lo >= 0.0 && lo <= 0.25 * hi;
    let lo2 = if near_zero { 0.0 } else { lo - pad };
    Span {
        lo: lo2,
        hi: hi + pad,
    }
}

/// `span` widened to at least `min` (plot units) around the middle of the data, shifted up
/// so that data that is not negative gets no negative axis.
pub(crate) fn at_least(span: Span, data: Option<(f64, f64)>, min: Option<f64>) -> Span {
    let (Some(min), Some((lo, hi))) = (min.filter(|m| m.is_finite() && *m > 0.0), data) else {
        return span;
    };
    if span.len() >= min {
        return span;
    }
    let mid = (lo + hi) / 2.0;
    let mut wide = Span {
        lo: mid - min / 2.0,
        hi: mid + min / 2.0,
    };
    if lo >= 0.0 && wide.lo < 0.0 {
        wide = Span { lo: 0.0, hi: min };
    }
    wide
}

/// X range: runs get half a run of slack so the first/last markers don't sit on the axes;
/// continuous x gets 2% each side.
pub(crate) fn x_span(data: Option<(f64, f64)>, integral: bool) -> Span {
    let Some((lo, hi)) = data else {
        return Span { lo: 0.0, hi: 1.0 };
    };
    let span = hi - lo;
    if integral {
        return Span {
            lo: lo - 0.5,
            hi: hi + 0.5,
        };
    }
    if span <= f64::EPSILON * hi.abs().max(lo.abs()).max(1.0) {
        let pad = (lo.abs() * 0.05).max(0.5);
        return Span {
            lo: lo - pad,
            hi: hi + pad,
        };
    }
    let pad = span * 0.02;
    Span {
        lo: lo - pad,
        hi: hi + pad,
    }
}

/// "Nice" tick positions (steps of 1, 2, 2.5, 5 × 10^k) inside `span`, plus the step used.
/// With `integral`, steps are whole numbers ≥ 1 so run numbers never get fractional ticks.
pub(crate) fn nice_ticks(span: Span, target: usize, integral: bool) -> (Vec<f64>, f64) {
    let len = span.len();
    if !(len.is_finite() && len > 0.0) {
        return (vec![span.lo], 1.0);
    }
    let target = target.max(2) as f64;
    let raw = len / target;
    let mag = 10f64.powf(raw.log10().floor());
    // Of the nice steps around the raw one, take the one whose tick count is nearest the
    // target (ties go to fewer ticks); "smallest step ≥ raw" alone often yields only 3-4 ticks.
    let mut step = mag * 10.0;
    let mut best = f64::INFINITY;
    for m in [1.0, 2.0, 2.5, 5.0, 10.0, 20.0] {
        // 2.5 gives x.5 ticks, which are wrong for integer axes.
        if integral && m == 2.5 {
            continue;
        }
        let cand = if integral {
            (mag * m).round().max(1.0)
        } else {
            mag * m
        };
        let miss = (len / cand - target).abs();
        if miss < best - 1e-9 || (miss - best).abs() <= 1e-9 && cand > step {
            best = miss;
            step = cand;
        }
    }
    let first = (span.lo / step).ceil() as i64;
    let last = (span.hi / step).floor() as i64;
    // Bounded loop: target is small and step >= len/target, so this is at most ~target+2.
    let ticks = (first..=last.min(first + 100))
        .map(|k| k as f64 * step)
        .collect();
    (ticks, step)
}

/// Decimals needed to distinguish ticks `step` apart.
pub(crate) fn decimals_for_step(step: f64) -> usize {
    if !(step.is_finite() && step > 0.0) {
        return 0;
    }
    let mut d = 0usize;
    let mut s = step;
    // Count decimals until the step is (nearly) a whole number; 2.5 → 1, 0.25 → 2.
    while d < 9 && (s - s.round()).abs() > 1e-9 * s.max(1.0) {
        s *= 10.0;
        d += 1;
    }
    d
}

/// Tick label with a fixed number of decimals; avoids printing "-0".
pub(crate) fn tick_label(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    if s.trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        s.trim_start_matches('-').to_string()
    } else {
        s
    }
}

/// Shortens a label to at most `max` characters. Paths keep their end (the file name is what
/// identifies a mapping), cut at a '/' when possible: "…/x86_64-linux-gnu/libpython3.11.so.1.0".
pub(crate) fn truncate_label(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max || max < 2 {
        return s.to_string();
    }
    let keep = max - 1; // room for the ellipsis
    let tail: String = s.chars().skip(n - keep).collect();
    if s.contains('/') {
        // Prefer starting at a path separator so we don't show half a directory name.
        if let Some(pos) = tail.find('/') {
            let cut = &tail[pos..];
            if cut.chars().count() > 1 {
                return format!("…{cut}");
            }
        }
    }
    format!("…{tail}")
}

/// Shortens to at most `max` characters keeping the start: "python3 -m pants --no-pan…".
pub(crate) fn truncate_end(s: &str, max: usize) -> String {
    if s.chars().count() <= max || max < 2 {
        return s.to_string();
    }
    let head: String = s.chars().take(max - 1).collect();
    format!("{}…", head.trim_end())
}

/// The unit of the x axis for "per …" phrases: "time (h)" → "h", "run" → "run".
pub(crate) fn x_unit_name(x_label: &str) -> String {
    // No let-chains: leakwatch's MSRV is 1.85.
    if let (Some(a), Some(b)) = (x_label.rfind('('), x_label.rfind(')')) {
        let inner = if a < b { x_label[a + 1..b].trim() } else { "" };
        if !inner.is_empty() {
            return inner.to_string();
        }
    }
    let t = x_label.trim();
    if t.is_empty() {
        "x".to_string()
    } else {
        t.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimum_span_widens_around_the_data_and_stays_above_zero() {
        let data = Some((28.109, 28.113));
        let tight = y_span(data);
        let wide = at_least(tight, data, Some(0.5));
        assert!((wide.len() - 0.5).abs() < 1e-9, "{wide:?}");
        assert!((wide.lo + wide.hi) / 2.0 - 28.111 < 1e-9);
        assert_eq!(at_least(tight, data, None), tight);
        // Never narrower than it was.
        let broad = at_least(y_span(Some((0.0, 10.0))), Some((0.0, 10.0)), Some(1.0));
        assert_eq!(broad, y_span(Some((0.0, 10.0))));
        let low = at_least(y_span(Some((0.1, 0.2))), Some((0.1, 0.2)), Some(4.0));
        assert_eq!((low.lo, low.hi), (0.0, 4.0));
    }

    #[test]
    fn units_are_binary_and_pick_largest_fitting() {
        assert_eq!(byte_unit_for(0.0).name, "B");
        assert_eq!(byte_unit_for(1023.0).name, "B");
        assert_eq!(byte_unit_for(1024.0).name, "KiB");
        assert_eq!(byte_unit_for(156.0 * 1048576.0).name, "MiB");
        assert_eq!(byte_unit_for(40.0 * 1073741824.0).name, "GiB");
        assert_eq!(signed_amount(4.67 * 1048576.0, YUnit::Bytes), "+4.67 MiB");
        assert_eq!(signed_amount(-2048.0, YUnit::Bytes), "-2.00 KiB");
        assert_eq!(signed_amount(0.0, YUnit::Bytes), "0 B");
        assert_eq!(signed_amount(12.5, YUnit::Count), "+12.5");
    }

    #[test]
    fn y_span_anchors_zero_only_near_zero() {
        let s = y_span(Some((114.0, 156.0)));
        assert!(s.lo > 100.0 && s.hi > 156.0);
        let s = y_span(Some((1.0, 100.0)));
        assert_eq!(s.lo, 0.0);
    }

    #[test]
    fn flat_and_empty_spans_are_not_degenerate() {
        for s in [
            y_span(Some((5.0, 5.0))),
            y_span(Some((0.0, 0.0))),
            y_span(Some((-3.0, -3.0))),
            y_span(None),
            x_span(Some((3.0, 3.0)), true),
            x_span(Some((3.0, 3.0)), false),
            x_span(None, false),
        ] {
            assert!(s.len() > 0.0, "{s:?}");
        }
    }

    #[test]
    fn integral_ticks_are_integers() {
        let (t, step) = nice_ticks(Span { lo: 0.5, hi: 10.5 }, 10, true);
        assert_eq!(step, 1.0);
        assert!(t.iter().all(|v| v.fract() == 0.0));
        assert_eq!(t.first(), Some(&1.0));
        assert_eq!(t.last(), Some(&10.0));
        let (t, _) = nice_ticks(Span { lo: 0.5, hi: 1.5 }, 10, true);
        assert_eq!(t, vec![1.0]);
    }

    #[test]
    fn ticks_cover_huge_values() {
        let (t, step) = nice_ticks(
            Span {
                lo: 30.0 * 1073741824.0,
                hi: 40.0 * 1073741824.0,
            },
            7,
            false,
        );
        assert!(!t.is_empty() && t.len() < 20 && step > 0.0);
    }

    #[test]
    fn decimals() {
        assert_eq!(decimals_for_step(5.0), 0);
        assert_eq!(decimals_for_step(2.5), 1);
        assert_eq!(decimals_for_step(0.25), 2);
        assert_eq!(tick_label(-0.0001, 1), "0.0");
    }

    #[test]
    fn truncation_keeps_path_end() {
        let p = "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0";
        let t = truncate_label(p, 40);
        assert!(t.chars().count() <= 40);
        assert!(t.ends_with("libpython3.11.so.1.0"));
        assert!(t.starts_with("…/"));
        assert_eq!(truncate_label("[heap]", 40), "[heap]");
        // Multi-byte characters must not cause a slicing panic.
        let u = "ééééééééééééééééééééééééééééééééééééééééééééé";
        assert_eq!(truncate_label(u, 10).chars().count(), 10);
        assert_eq!(truncate_end("python3 -m pants", 9), "python3…");
        assert_eq!(truncate_end(u, 10).chars().count(), 10);
    }

    #[test]
    fn x_unit() {
        assert_eq!(x_unit_name("time (h)"), "h");
        assert_eq!(x_unit_name("run"), "run");
    }
}
