//! Property tests (proptest) for everything that parses outside input: the
//! size, rate and duration parsers, the /proc parsers and the samples.csv
//! reader. Never a panic, and what is printed reads back as it was. The
//! case count is proptest's default (256 per property), a few seconds in
//! all; `PROPTEST_CASES=100000 cargo test --test properties` runs longer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use leakwatch::gate::parse_max_growth;
use leakwatch::sample::procfs::{parse_smaps_rollup, parse_stat, parse_status};
use leakwatch::store;
use leakwatch::units::{format_bytes, parse_duration, parse_size};
use proptest::prelude::*;

/// Strings made of what the parsers look at, so most cases get past the
/// first character.
fn unit_text() -> impl Strategy<Value = String> {
    "[ 0-9.eE+\\-%/a-zA-Z]{0,24}"
}

proptest! {
    #[test]
    fn size_and_duration_parsers_never_panic(text in unit_text()) {
        let _ = parse_size(&text);
        let _ = parse_duration(&text);
        let _ = parse_max_growth(&text);
    }

    #[test]
    fn any_text_never_panics_the_parsers(text in "\\PC{0,64}") {
        let _ = parse_size(&text);
        let _ = parse_duration(&text);
        let _ = parse_max_growth(&text);
        let _ = parse_status(&text);
        let _ = parse_stat(&text);
        let _ = parse_smaps_rollup(&text);
    }

    #[test]
    fn sizes_read_back_in_any_binary_unit(n in 0u64..(1 << 40), unit in 0usize..4) {
        let (suffix, mult) = [("", 1u64), ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)][unit];
        let n = n >> (10 * unit);
        prop_assert_eq!(parse_size(&format!("{n}{suffix}")), Ok(n * mult));
    }

    #[test]
    fn parsed_sizes_never_wrap(mantissa in 1u64..1000, exp in 0i32..30) {
        let text = format!("{mantissa}e{exp}");
        // Exponents are not a size format: either an error or a size that fits.
        if let Ok(bytes) = parse_size(&text) {
            prop_assert!(bytes as f64 <= u64::MAX as f64);
        }
        let big = format!("{mantissa}{}TiB", "0".repeat(exp as usize));
        if let Ok(bytes) = parse_size(&big) {
            prop_assert_eq!(bytes, (mantissa * 10u64.pow(exp as u32)) << 40);
        }
    }

    #[test]
    fn printed_bytes_stay_printable(bytes in any::<f64>()) {
        let text = format_bytes(bytes);
        prop_assert!(!text.is_empty());
    }

    #[test]
    fn status_lines_in_any_order_read_as_bytes(rss in 0u64..(1 << 40), anon in 0u64..(1 << 40), swap in 0u64..(1 << 30)) {
        let text = format!("VmSwap:\t{swap} kB\nName:\tx\nRssAnon:\t{anon} kB\nVmRSS:\t{rss} kB\nPPid:\t1\n");
        let s = parse_status(&text).unwrap();
        prop_assert_eq!(s.rss_bytes, Some(rss * 1024));
        prop_assert_eq!(s.anon_bytes, Some(anon * 1024));
        prop_assert_eq!(s.swap_bytes, Some(swap * 1024));
    }

    #[test]
    fn stat_names_with_any_bytes_read_back(name in "[^\\n]{0,15}", ppid in 0u32..100_000, start in any::<u64>()) {
        let text = format!("42 ({name}) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0");
        let s = parse_stat(&text).unwrap();
        // Read back as it was, control characters shown escaped.
        prop_assert_eq!(&s.comm, &leakwatch::escape::inert(&name));
        prop_assert!(!s.comm.chars().any(|c| c.is_control()), "{:?}", s.comm);
        prop_assert_eq!(s.ppid, ppid);
        prop_assert_eq!(s.start_time, start);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any bytes as samples.csv: an error or rows, never a panic.
    #[test]
    fn samples_csv_reader_never_panics(body in proptest::collection::vec(any::<u8>(), 0..600), header in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let mut bytes = Vec::new();
        if header {
            bytes.extend_from_slice(b"sample,run,t_seconds,timestamp,scope,pid,ppid,start_time,comm,tier,event,exit_code,rss_bytes\n");
        }
        bytes.extend(body);
        std::fs::write(&path, bytes).unwrap();
        let _ = store::scan(&path, |_| {});
    }

    /// Rows with mangled fields: an error naming a line, or rows.
    #[test]
    fn mangled_rows_are_errors_with_a_line(field in 0usize..13, value in "[-0-9a-zA-Z.,\"]{0,8}") {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.csv");
        let good = "0,1,0.5,ts,survivors,42,1,7,daemon,deep,,,4096";
        let mut fields: Vec<String> = good.split(',').map(String::from).collect();
        fields[field] = value;
        let text = format!(
            "sample,run,t_seconds,timestamp,scope,pid,ppid,start_time,comm,tier,event,exit_code,rss_bytes\n{good}\n{}\n",
            fields.join(",")
        );
        std::fs::write(&path, text).unwrap();
        if let Err(e) = store::scan(&path, |_| {}) {
            prop_assert!(e.to_string().contains("line"), "{}", e);
        }
    }
}
