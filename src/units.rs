//! Sizes, durations and their human forms: parse what users type, print bytes in binary units.

use std::time::Duration;

/// Why a size or duration did not parse; the caller names the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("'{0}' is not a size; try '4MiB', '512KiB', '1.5GB' or a number of bytes")]
    Size(String),
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

/// Parses a size such as `4MiB`, `512 KiB`, `1.5GB`, `4m` or `1024` into bytes.
///
/// Binary suffixes (KiB, MiB, GiB, TiB and the one-letter K/M/G/T) are powers
/// of 1024; decimal ones (kB, MB, GB, TB) powers of 1000, as their names say.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let err = || UnitError::Size(text.to_string());
    let (value, suffix) = split_number(text).ok_or_else(err)?;
    let multiplier: f64 = match suffix {
        "" | "B" | "b" => 1.0,
        "k" | "K" | "KiB" | "Ki" | "kiB" => 1024.0,
        "m" | "M" | "MiB" | "Mi" => 1024.0 * 1024.0,
        "g" | "G" | "GiB" | "Gi" => 1024.0 * 1024.0 * 1024.0,
        "t" | "T" | "TiB" | "Ti" => 1024.0f64.powi(4),
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return Err(err()),
    };
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn bytes_are_printed_in_binary_units() {
        assert_eq!(format_bytes(0.0), "0 B");
        assert_eq!(format_bytes(4.0 * 1024.0 * 1024.0), "4.00 MiB");
        assert_eq!(format_bytes(156.3e6), "149 MiB");
        assert_eq!(format_signed_bytes(-2048.0), "-2.00 KiB");
        assert_eq!(format_signed_bytes(12.5 * 1024.0), "+12.5 KiB");
    }
}
