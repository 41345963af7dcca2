//! Sizes, durations and their human forms: parse what users type, print bytes in binary units.

use std::time::Duration;

/// Why a size or duration did not parse; the caller names the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error(
        "'{0}' is not a size; try '4MiB', '512KiB', '1.5GB' or a number of bytes ({SIZE_RULE})"
    )]
    Size(String),
    /// A size with a fix that is plain from what was typed.
    #[error("'{text}' is not a size; did you mean '{fix}'? ({SIZE_RULE})")]
    SizeFix { text: String, fix: String },
    #[error("'{0}' is not a duration; try '500ms', '2s', '30m' or '1h'")]
    Duration(String),
    #[error("'{0}' is too large: a size must be below 16 EiB (2^64 bytes)")]
    SizeTooLarge(String),
    #[error("'{0}' is too long: a duration must be at most a year (365d)")]
    DurationTooLong(String),
}

/// Splits `1.5GiB` into the number and the rest (`1.5`, `GiB`).
fn split_number(text: &str) -> Option<(f64, &str)> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(split);
    Some((number.parse().ok()?, suffix.trim()))
}

/// How a size's unit is read, as `--help` says it.
pub const SIZE_RULE: &str = "any case; k, m, g, t and KiB, MiB, GiB, TiB are binary (1024), \
     kB, MB, GB, TB are SI (1000)";

/// The bytes per unit of a size suffix, any case: binary for a bare letter
/// (`4m`, `4M`, as `ulimit` and `dd` read them) and for `KiB`/`Ki`; SI for a
/// prefix with `B` (`kB`, `MB`, `mb`: the names say powers of 1000, and
/// `10mb` means 10 000 000 bytes to a disk vendor and to `df -H` alike).
fn size_unit(suffix: &str) -> Option<f64> {
    let lower = suffix.to_ascii_lowercase();
    let (prefix, rest) = match lower.char_indices().nth(1) {
        Some((i, _)) => lower.split_at(i),
        None => (lower.as_str(), ""),
    };
    let power = match prefix {
        "" => return Some(1.0),
        "b" if rest.is_empty() => return Some(1.0),
        "k" => 1,
        "m" => 2,
        "g" => 3,
        "t" => 4,
        "p" => 5,
        _ => return None,
    };
    match rest {
        "" | "i" | "ib" => Some(1024f64.powi(power)),
        "b" => Some(1000f64.powi(power)),
        _ => None,
    }
}

/// The suffix a near miss meant (`10megs` → `10MiB`, `1,5GiB` → `1.5GiB`):
/// the fix a refusal suggests, when there is one.
fn size_fix(text: &str) -> Option<String> {
    let t = text.trim();
    if t.contains(',') && !t.contains('.') {
        let fixed = t.replacen(',', ".", 1);
        return parse_size(&fixed).is_ok().then_some(fixed);
    }
    let (value, suffix) = split_number(t)?;
    let first = suffix.chars().next()?.to_ascii_lowercase();
    let unit = match first {
        'k' => "KiB",
        'm' => "MiB",
        'g' => "GiB",
        't' => "TiB",
        'b' => "B",
        _ => return None,
    };
    suffix
        .chars()
        .all(|c| c.is_ascii_alphabetic())
        .then(|| format!("{}{unit}", trim_number(value)))
}

/// `10` for 10.0, `1.5` for 1.5: a number as a person types it.
fn trim_number(value: f64) -> String {
    let text = format!("{value}");
    text.strip_suffix(".0").map_or(text.clone(), str::to_string)
}

/// Parses a size such as `4MiB`, `512 KiB`, `1.5GB`, `4m`, `10mb` or `1024`
/// into bytes; the unit is read as `size_unit` says (any case).
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let err = || match size_fix(text) {
        Some(fix) => UnitError::SizeFix {
            text: text.to_string(),
            fix,
        },
        None => UnitError::Size(text.to_string()),
    };
    let (value, suffix) = split_number(text).ok_or_else(err)?;
    let multiplier = size_unit(suffix).ok_or_else(err)?;
    let bytes = value * multiplier;
    // 2^64 itself does not fit (u64::MAX as f64 rounds up to it).
    if !(0.0..18_446_744_073_709_551_616.0).contains(&bytes) {
        return Err(UnitError::SizeTooLarge(text.to_string()));
    }
    Ok(bytes.round() as u64)
}

/// Parses a duration such as `500ms`, `2s`, `1.5s`, `30m`, `1h` or `2d`.
/// A bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let err = || UnitError::Duration(text.to_string());
    let (value, suffix) = split_number(text).ok_or_else(err)?;
    let seconds_per_unit = match suffix {
        "ms" => 1e-3,
        "" | "s" | "sec" | "secs" => 1.0,
        "m" | "min" | "mins" => 60.0,
        "h" | "hr" | "hrs" => 3600.0,
        "d" => 86400.0,
        _ => return Err(err()),
    };
    let seconds = value * seconds_per_unit;
    if seconds > MAX_DURATION.as_secs_f64() {
        return Err(UnitError::DurationTooLong(text.to_string()));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| err())
}

/// The longest duration accepted anywhere: a year. Longer ones are typos,
/// and a deadline that far ahead would overflow the clock.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 86400);

/// The largest binary unit in which `bytes` is still at least 1, as (its
/// size in bytes, its name): `(1048576, "MiB")` for 156 MiB. Reports print
/// sizes in it; chart axes pick their unit with it.
pub fn binary_unit(bytes: f64) -> (f64, &'static str) {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut size = 1.0;
    let mut unit = 0;
    while bytes.abs() >= size * 1024.0 && unit < UNITS.len() - 1 {
        size *= 1024.0;
        unit += 1;
    }
    (size, UNITS[unit])
}

/// Formats bytes in binary units with three significant figures: `4.00 MiB`.
pub fn format_bytes(bytes: f64) -> String {
    let (size, unit) = binary_unit(bytes);
    let value = bytes.abs() / size;
    let sign = if bytes < 0.0 { "-" } else { "" };
    if unit == "B" {
        format!("{sign}{value:.0} B")
    } else if value >= 100.0 {
        format!("{sign}{value:.0} {unit}")
    } else if value >= 10.0 {
        format!("{sign}{value:.1} {unit}")
    } else {
        format!("{sign}{value:.2} {unit}")
    }
}

/// A number with three significant digits, never in scientific notation:
/// `14100` for 14091.74, `13.2` for 13.19, `0.0412`; the one precision the
/// text, the reports and the charts print percentages in.
pub fn format_sig3(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a == 0.0 {
        return "0".to_string();
    }
    let digits = a.log10().floor() as i32;
    if digits >= 2 {
        // 14091.74 → 14100: round away what lies below the third digit.
        let unit = 10f64.powi(digits - 2);
        return format!("{:.0}", (v / unit).round() * unit);
    }
    let decimals = (2 - digits).clamp(0, 9) as usize;
    format!("{v:.decimals$}")
}

/// A signed number with three significant digits (`format_sig3`): a rate of counts,
/// `+2.00`, `+0.0600`, `-14100`; zero and its negative read `+0`.
pub fn format_signed_sig3(v: f64) -> String {
    let sign = if v >= 0.0 { "+" } else { "-" };
    format!("{sign}{}", format_sig3(v.abs()))
}

/// A p-value as the reasons give it: three decimals, or its order of magnitude below 0.001
/// (`p = 0.012`, `p = 8e-5`): a smaller one tells nothing more about a verdict.
pub fn format_p(p: f64) -> String {
    if p >= 0.001 {
        format!("p = {p:.3}")
    } else {
        format!("p = {p:.0e}")
    }
}

/// `n` and its noun, singular or plural: `1 run`, `10 runs`, `1 process`,
/// `3 processes` (`many` is the plural).
pub fn counted(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A signed count a person reads at a glance: `+2.5`, `+2,000`, `+12.9M`
/// (below 100 one decimal, below a million whole with thousands
/// separators, then three significant digits in millions or billions).
pub fn format_signed_count(v: f64) -> String {
    let sign = if v < 0.0 { "-" } else { "+" };
    let a = v.abs();
    if !a.is_finite() {
        return format!("{v}");
    }
    if a < 99.95 {
        return format!("{sign}{a:.1}");
    }
    if a < 999_999.5 {
        let whole = format!("{:.0}", a.round());
        let mut out = String::new();
        for (i, c) in whole.chars().enumerate() {
            if i > 0 && (whole.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        return format!("{sign}{out}");
    }
    let (scaled, suffix) = if a < 1e9 {
        (a / 1e6, "M")
    } else {
        (a / 1e9, "G")
    };
    format!("{sign}{}{suffix}", format_sig3(scaled))
}

/// Formats a signed byte rate with an explicit sign: `+4.00 MiB`.
pub fn format_signed_bytes(bytes: f64) -> String {
    if bytes >= 0.0 {
        format!("+{}", format_bytes(bytes))
    } else {
        format_bytes(bytes)
    }
}

/// Formats a duration compactly for humans: `850ms`, `12.3s`, `4m05s`, `2h10m`.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 1.0 {
        format!("{:.0}ms", secs * 1e3)
    } else if secs < 60.0 {
        format!("{secs:.1}s")
    } else if secs < 3600.0 {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{}h{:02}m", d.as_secs() / 3600, (d.as_secs() % 3600) / 60)
    }
}

/// A position or span on a time axis, in seconds, as every report words it:
/// `12.0s`, `3m10s`, `2h10m`, `2.5 days` (from two days on).
pub fn format_seconds(secs: f64) -> String {
    if secs >= 2.0 * 86400.0 {
        format!("{:.1} days", secs / 86400.0)
    } else {
        Duration::try_from_secs_f64(secs.max(0.0))
            .map(format_duration)
            .unwrap_or_else(|_| format!("{secs:.0}s"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_takes_its_nouns_number() {
        assert_eq!(counted(1u32, "run", "runs"), "1 run");
        assert_eq!(counted(31u32, "process", "processes"), "31 processes");
        assert_eq!(counted(0u32, "walk", "walks"), "0 walks");
    }

    #[test]
    fn counts_read_at_a_glance() {
        assert_eq!(format_signed_count(2.54), "+2.5");
        assert_eq!(format_signed_count(-0.04), "-0.0");
        assert_eq!(format_signed_count(2000.4), "+2,000");
        assert_eq!(format_signed_count(-123_456.0), "-123,456");
        assert_eq!(format_signed_count(12_907_040.7), "+12.9M");
        assert_eq!(format_signed_count(3.2e9), "+3.20G");
    }

    #[test]
    fn sizes_in_binary_and_decimal_units() {
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("4 MiB"), Ok(4 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("4m"), Ok(4 << 20));
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("5 MB"), Ok(5_000_000));
    }

    #[test]
    fn sizes_in_any_case_si_with_b_binary_without() {
        for (text, bytes) in [
            ("10mb", 10_000_000),
            ("10MB", 10_000_000),
            ("10Mb", 10_000_000),
            ("10kb", 10_000),
            ("10KB", 10_000),
            ("10mib", 10 << 20),
            ("10MIB", 10 << 20),
            ("10MiB", 10 << 20),
            ("10mi", 10 << 20),
            ("10M", 10 << 20),
            ("10m", 10 << 20),
            ("10k", 10 << 10),
            ("10K", 10 << 10),
            ("2gib", 2 << 30),
            ("2GB", 2_000_000_000),
            ("1tb", 1_000_000_000_000),
            ("1PiB", 1 << 50),
            ("512b", 512),
            ("512B", 512),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn a_near_miss_gets_the_exact_fix() {
        for (text, fix) in [
            ("10megs", "10MiB"),
            ("10 megabytes", "10MiB"),
            ("1,5GiB", "1.5GiB"),
            ("4kilo", "4KiB"),
            ("2gigs", "2GiB"),
        ] {
            let err = parse_size(text).unwrap_err();
            assert_eq!(
                err,
                UnitError::SizeFix {
                    text: text.into(),
                    fix: fix.into()
                }
            );
            assert!(err.to_string().contains(&format!("did you mean '{fix}'?")));
            assert!(parse_size(fix).is_ok(), "the fix {fix} must parse");
        }
        // Nothing plain to suggest: the general message, with the rule.
        let err = parse_size("4 parsecs").unwrap_err().to_string();
        assert!(
            err.contains("binary (1024)") && err.contains("SI (1000)"),
            "{err}"
        );
    }

    proptest::proptest! {
        /// The case of a unit never changes what a size means.
        #[test]
        fn case_never_changes_a_size(
            n in 0u64..100_000,
            unit in proptest::sample::select(vec![
                "", "b", "k", "kb", "kib", "ki", "m", "mb", "mib", "g", "gb", "gib", "t", "tb", "tib",
            ]),
            upper in proptest::collection::vec(proptest::bool::ANY, 3),
        ) {
            let lower = format!("{n}{unit}");
            let mixed: String = unit
                .chars()
                .zip(upper.iter().cycle())
                .map(|(c, &up)| if up { c.to_ascii_uppercase() } else { c })
                .collect();
            proptest::prop_assert_eq!(parse_size(&lower), parse_size(&format!("{n}{mixed}")));
            proptest::prop_assert!(parse_size(&lower).is_ok());
        }

        /// A binary suffix is 1024 times the next smaller one, an SI one 1000.
        #[test]
        fn binary_and_si_steps(n in 1u64..1_000_000) {
            let kib = parse_size(&format!("{n}KiB")).unwrap();
            proptest::prop_assert_eq!(parse_size(&format!("{n}k")).unwrap(), kib);
            proptest::prop_assert_eq!(kib, n * 1024);
            proptest::prop_assert_eq!(parse_size(&format!("{n}kB")).unwrap(), n * 1000);
            proptest::prop_assert_eq!(parse_size(&format!("{n}mb")).unwrap(), n * 1_000_000);
            proptest::prop_assert_eq!(parse_size(&format!("{n}MiB")).unwrap(), n << 20);
        }

        /// Whatever is refused suggests nothing that is refused too.
        #[test]
        fn a_suggested_fix_parses(text in "[0-9]{1,4}[.,]?[0-9]{0,2} ?[a-zA-Z]{0,8}") {
            if let Err(UnitError::SizeFix { fix, .. }) = parse_size(&text) {
                proptest::prop_assert!(parse_size(&fix).is_ok(), "{} → {}", text, fix);
            }
        }
    }

    #[test]
    fn bad_sizes_are_rejected_with_the_input_quoted() {
        for bad in ["", "abc", "-1KiB", "4 parsecs", "1.2.3M", "MiB"] {
            let err = parse_size(bad).unwrap_err();
            assert!(err.to_string().contains(&format!("'{bad}'")), "{err}");
        }
    }

    #[test]
    fn sizes_and_durations_that_overflow_are_errors_not_wraps() {
        assert_eq!(
            parse_size("18446744073709551617"),
            Err(UnitError::SizeTooLarge("18446744073709551617".into()))
        );
        assert!(parse_size("16384PiB").is_err());
        assert!(parse_size("99999999999TiB").is_err());
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(
            parse_duration("200000000000000d"),
            Err(UnitError::DurationTooLong("200000000000000d".into()))
        );
        assert!(parse_duration("366d").is_err());
        assert_eq!(parse_duration("365d"), Ok(MAX_DURATION));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1 fortnight").is_err());
    }

    #[test]
    fn numbers_get_three_significant_digits() {
        assert_eq!(format_sig3(14091.74), "14100");
        assert_eq!(format_sig3(-14091.74), "-14100");
        assert_eq!(format_sig3(248.4), "248");
        assert_eq!(format_sig3(13.19), "13.2");
        assert_eq!(format_sig3(3.7), "3.70");
        assert_eq!(format_sig3(0.04123), "0.0412");
        assert_eq!(format_sig3(0.0), "0");
        assert_eq!(format_sig3(999.6), "1000");
        // Signed, as count rates read: no "-0.00" for a rate that rounds to nothing.
        assert_eq!(format_signed_sig3(0.0638), "+0.0638");
        assert_eq!(format_signed_sig3(-0.00441), "-0.00441");
        assert_eq!(format_signed_sig3(-0.0), "+0");
        assert_eq!(format_signed_sig3(2.0), "+2.00");
    }

    #[test]
    fn bytes_are_printed_in_binary_units() {
        assert_eq!(format_bytes(0.0), "0 B");
        assert_eq!(format_bytes(4.0 * 1024.0 * 1024.0), "4.00 MiB");
        assert_eq!(format_bytes(156.3e6), "149 MiB");
        assert_eq!(format_signed_bytes(-2048.0), "-2.00 KiB");
        assert_eq!(format_signed_bytes(12.5 * 1024.0), "+12.5 KiB");
    }
}
