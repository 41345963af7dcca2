//! samples.csv's rows by column position, both ways. Read: the header read
//! once into an index per `Row` field, then each record's fields parsed in
//! place; serde's path matches every header name against the fields for
//! every row (a string compare per cell) and was half of `report`'s time
//! and the largest part of what a long `attach` spends after sampling.
//! Written: a batch formatted into one buffer, one `write` per tick, the
//! bytes serde and the csv crate write (itoa, ryu, quotes only around a
//! `,` `"` CR or LF, quotes doubled; `comm` through `cell`).
//!
//! It reads exactly what serde's does (the csv crate's `Deserializer`): an
//! empty cell is `None`, integers parse as `str::parse` does or as hex after
//! `0x`, floats as `str::parse`, `comm` through `cell`, enums by their names,
//! unknown columns ignored, missing `Option` columns `None`. Anything else —
//! a cell it cannot parse, a file without a column serde requires or with
//! one twice — goes to serde, which then says what is wrong in its words.

use std::fmt::Write as _;

use csv::StringRecord;

use super::{HeapSource, Row, Scope, SiteSource, Tier, cell};

/// `Row`'s fields in declaration order: samples.csv's header as written.
const FIELDS: [&str; 50] = [
    "sample",
    "run",
    "t_seconds",
    "timestamp",
    "scope",
    "pid",
    "ppid",
    "start_time",
    "comm",
    "tier",
    "event",
    "exit_code",
    "rss_bytes",
    "anon_bytes",
    "file_bytes",
    "shmem_bytes",
    "swap_bytes",
    "hwm_bytes",
    "threads",
    "fds",
    "pss_bytes",
    "pss_anon_bytes",
    "pss_file_bytes",
    "pss_shmem_bytes",
    "shared_clean_bytes",
    "shared_dirty_bytes",
    "private_clean_bytes",
    "private_dirty_bytes",
    "uss_bytes",
    "shared_bytes",
    "swap_pss_bytes",
    "usage_bytes",
    "kernel_bytes",
    "sock_bytes",
    "slab_reclaimable_bytes",
    "slab_unreclaimable_bytes",
    "kernel_stack_bytes",
    "pagetables_bytes",
    "site_bytes",
    "site_blocks",
    "objects",
    "site_source",
    "heap_live_bytes",
    "heap_used_bytes",
    "heap_max_bytes",
    "heap_source",
    "gauge",
    "gauge_bytes",
    "gauge_name",
    "heap_promoted_bytes",
];

/// The fields serde requires (not `Option`): a file without one of them
/// is serde's to reject.
const REQUIRED: [usize; 9] = [0, 2, 3, 4, 5, 6, 7, 8, 9];

/// Where each of `FIELDS` is in the records of one file.
pub(super) struct Columns {
    at: [Option<usize>; FIELDS.len()],
}

impl Columns {
    /// The positions of the fields in `headers`; `None` when serde must
    /// read this file (a required column missing, a known one repeated).
    pub(super) fn new(headers: &StringRecord) -> Option<Columns> {
        let mut at = [None; FIELDS.len()];
        for (i, name) in headers.iter().enumerate() {
            if let Some(field) = FIELDS.iter().position(|f| *f == name) {
                if at[field].is_some() {
                    return None;
                }
                at[field] = Some(i);
            }
        }
        REQUIRED
            .iter()
            .all(|&f| at[f].is_some())
            .then_some(Columns { at })
    }

    /// The row in `record`, or `None` if a cell is not what serde would
    /// take without complaint.
    pub(super) fn row(&self, record: &StringRecord) -> Option<Row> {
        let cell_of = |field: usize| self.at[field].and_then(|i| record.get(i));
        let text = |field: usize| cell_of(field).unwrap_or("");
        let u64_at = |field: usize| cell_of(field).and_then(int::<u64>);
        let opt_u64 = |field: usize| optional(cell_of(field), int::<u64>);
        Some(Row {
            sample: u64_at(0)?,
            run: optional(cell_of(1), int::<u32>)?,
            t_seconds: text(2).parse().ok()?,
            timestamp: text(3).to_string(),
            scope: text(4).parse::<Scope>().ok()?,
            pid: cell_of(5).and_then(int::<u32>)?,
            ppid: cell_of(6).and_then(int::<u32>)?,
            start_time: u64_at(7)?,
            comm: cell::from_file(text(8)),
            tier: tier(text(9))?,
            event: optional(cell_of(10), |s| Some(s.to_string()))?,
            exit_code: optional(cell_of(11), int::<i32>)?,
            rss_bytes: opt_u64(12)?,
            anon_bytes: opt_u64(13)?,
            file_bytes: opt_u64(14)?,
            shmem_bytes: opt_u64(15)?,
            swap_bytes: opt_u64(16)?,
            hwm_bytes: opt_u64(17)?,
            threads: opt_u64(18)?,
            fds: opt_u64(19)?,
            pss_bytes: opt_u64(20)?,
            pss_anon_bytes: opt_u64(21)?,
            pss_file_bytes: opt_u64(22)?,
            pss_shmem_bytes: opt_u64(23)?,
            shared_clean_bytes: opt_u64(24)?,
            shared_dirty_bytes: opt_u64(25)?,
            private_clean_bytes: opt_u64(26)?,
            private_dirty_bytes: opt_u64(27)?,
            uss_bytes: opt_u64(28)?,
            shared_bytes: opt_u64(29)?,
            swap_pss_bytes: opt_u64(30)?,
            usage_bytes: opt_u64(31)?,
            kernel_bytes: opt_u64(32)?,
            sock_bytes: opt_u64(33)?,
            slab_reclaimable_bytes: opt_u64(34)?,
            slab_unreclaimable_bytes: opt_u64(35)?,
            kernel_stack_bytes: opt_u64(36)?,
            pagetables_bytes: opt_u64(37)?,
            site_bytes: opt_u64(38)?,
            site_blocks: opt_u64(39)?,
            objects: opt_u64(40)?,
            site_source: optional(cell_of(41), site_source)?,
            heap_live_bytes: opt_u64(42)?,
            heap_used_bytes: opt_u64(43)?,
            heap_max_bytes: opt_u64(44)?,
            heap_source: optional(cell_of(45), HeapSource::from_name)?,
            gauge: opt_u64(46)?,
            gauge_bytes: opt_u64(47)?,
            gauge_name: optional(cell_of(48), |s| Some(s.to_string()))?,
            heap_promoted_bytes: opt_u64(49)?,
        })
    }
}

/// An `Option` cell: no column or an empty cell is `None`; `Some(None)`
/// means serde would reject it.
fn optional<T>(cell: Option<&str>, parse: impl Fn(&str) -> Option<T>) -> Option<Option<T>> {
    match cell {
        None | Some("") => Some(None),
        Some(text) => parse(text).map(Some),
    }
}

/// An integer as the csv crate reads one: hex after `0x`, else `str::parse`.
fn int<T: Hex + std::str::FromStr>(text: &str) -> Option<T> {
    match text.strip_prefix("0x") {
        Some(digits) => T::from_hex(digits),
        None => text.parse().ok(),
    }
}

trait Hex: Sized {
    fn from_hex(digits: &str) -> Option<Self>;
}

macro_rules! hex {
    ($($t:ty),*) => {$(
        impl Hex for $t {
            fn from_hex(digits: &str) -> Option<Self> {
                <$t>::from_str_radix(digits, 16).ok()
            }
        }
    )*};
}
hex!(u32, u64, i32);

fn tier(name: &str) -> Option<Tier> {
    Some(match name {
        "cheap" => Tier::Cheap,
        "deep" => Tier::Deep,
        "event" => Tier::Event,
        "mapping" => Tier::Mapping,
        "site" => Tier::Site,
        "type" => Tier::Type,
        "heap" => Tier::Heap,
        _ => return None,
    })
}

fn site_source(name: &str) -> Option<SiteSource> {
    match name {
        "python" => Some(SiteSource::Python),
        "native" => Some(SiteSource::Native),
        "java" => Some(SiteSource::Java),
        "javascript" => Some(SiteSource::JavaScript),
        _ => None,
    }
}

/// samples.csv's header line, as serde writes it before the first row.
pub(super) fn write_header(out: &mut Vec<u8>) {
    out.extend_from_slice(FIELDS.join(",").as_bytes());
    out.push(b'\n');
}

/// One row as its line of samples.csv; `scratch` is a work area.
pub(super) fn write_row(out: &mut Vec<u8>, row: &Row, scratch: &mut String) {
    let mut line = Line { out, first: true };
    line.uint(row.sample);
    line.opt(row.run.map(u64::from));
    line.cell(ryu::Buffer::new().format(row.t_seconds));
    line.text(&row.timestamp);
    scratch.clear();
    let _ = write!(scratch, "{}", row.scope);
    line.text(scratch);
    line.uint(u64::from(row.pid));
    line.uint(u64::from(row.ppid));
    line.uint(row.start_time);
    scratch.clear();
    cell::to_file(&row.comm, scratch);
    line.text(scratch);
    line.cell(tier_name(row.tier));
    line.text(row.event.as_deref().unwrap_or(""));
    match row.exit_code {
        Some(code) => line.cell(itoa::Buffer::new().format(code)),
        None => line.cell(""),
    }
    for value in [
        row.rss_bytes,
        row.anon_bytes,
        row.file_bytes,
        row.shmem_bytes,
        row.swap_bytes,
        row.hwm_bytes,
        row.threads,
        row.fds,
        row.pss_bytes,
        row.pss_anon_bytes,
        row.pss_file_bytes,
        row.pss_shmem_bytes,
        row.shared_clean_bytes,
        row.shared_dirty_bytes,
        row.private_clean_bytes,
        row.private_dirty_bytes,
        row.uss_bytes,
        row.shared_bytes,
        row.swap_pss_bytes,
        row.usage_bytes,
        row.kernel_bytes,
        row.sock_bytes,
        row.slab_reclaimable_bytes,
        row.slab_unreclaimable_bytes,
        row.kernel_stack_bytes,
        row.pagetables_bytes,
        row.site_bytes,
        row.site_blocks,
        row.objects,
    ] {
        line.opt(value);
    }
    line.cell(match row.site_source {
        Some(SiteSource::Python) => "python",
        Some(SiteSource::Native) => "native",
        Some(SiteSource::Java) => "java",
        Some(SiteSource::JavaScript) => "javascript",
        None => "",
    });
    for value in [row.heap_live_bytes, row.heap_used_bytes, row.heap_max_bytes] {
        line.opt(value);
    }
    line.cell(row.heap_source.map_or("", HeapSource::name));
    for value in [row.gauge, row.gauge_bytes] {
        line.opt(value);
    }
    line.text(row.gauge_name.as_deref().unwrap_or(""));
    line.opt(row.heap_promoted_bytes);
    line.out.push(b'\n');
}

/// A line being written: cells with commas between them.
struct Line<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl Line<'_> {
    /// A cell that needs no quotes (a number, a name leakwatch chose).
    fn cell(&mut self, text: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.extend_from_slice(text.as_bytes());
    }

    fn uint(&mut self, n: u64) {
        self.cell(itoa::Buffer::new().format(n));
    }

    fn opt(&mut self, n: Option<u64>) {
        match n {
            Some(n) => self.uint(n),
            None => self.cell(""),
        }
    }

    /// Text from outside: quoted when it holds a comma, a quote, CR or LF
    /// (csv's `QuoteStyle::Necessary`), its quotes doubled.
    fn text(&mut self, text: &str) {
        if !text
            .bytes()
            .any(|b| matches!(b, b',' | b'"' | b'\r' | b'\n'))
        {
            return self.cell(text);
        }
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.push(b'"');
        for b in text.bytes() {
            if b == b'"' {
                self.out.push(b'"');
            }
            self.out.push(b);
        }
        self.out.push(b'"');
    }
}

fn tier_name(tier: Tier) -> &'static str {
    match tier {
        Tier::Cheap => "cheap",
        Tier::Deep => "deep",
        Tier::Event => "event",
        Tier::Mapping => "mapping",
        Tier::Site => "site",
        Tier::Type => "type",
        Tier::Heap => "heap",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(names: &[&str]) -> StringRecord {
        StringRecord::from(names.to_vec())
    }

    /// Both ways of reading a record: serde's and by column.
    fn both(headers: &StringRecord, cells: &[&str]) -> (Option<Row>, Result<Row, String>) {
        let record = StringRecord::from(cells.to_vec());
        let fast = Columns::new(headers).and_then(|c| c.row(&record));
        let serde = record
            .deserialize::<Row>(Some(headers))
            .map_err(|e| e.to_string());
        (fast, serde)
    }

    #[test]
    fn the_fields_are_rows_fields_in_order() {
        // serde writes the header from the struct: the same names.
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(Row::new(Scope::Target)).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(text.lines().next().unwrap(), FIELDS.join(","));
    }

    /// Every row serde reads, read by column the same; every cell serde
    /// rejects, left to serde.
    #[test]
    fn records_read_as_serde_reads_them() {
        let all = headers(&FIELDS);
        let mut cells: Vec<&str> = vec![""; FIELDS.len()];
        cells[0] = "7";
        cells[2] = "1.5e-3";
        cells[3] = "2026-12-01T10:00:00.000Z";
        cells[4] = "pid:42";
        cells[5] = "42";
        cells[6] = "1";
        cells[7] = "0x1f";
        cells[8] = "'=cmd|' /C calc'!A0";
        cells[9] = "type";
        cells[12] = "+4096";
        cells[41] = "native";
        cells[42] = "123";
        cells[45] = "node_inspector";
        let (fast, serde) = both(&all, &cells);
        assert_eq!(fast, Some(serde.unwrap()));
        for (field, bad) in [
            (0, "-1"),
            (2, "x"),
            (4, "nowhere"),
            (9, "Cheap"),
            (11, "1.5"),
            (12, " 5"),
            (41, "rust"),
            (44, "1e3"),
            (45, "jvm"),
        ] {
            let mut cells = cells.clone();
            cells[field] = bad;
            let (fast, serde) = both(&all, &cells);
            assert!(fast.is_none() && serde.is_err(), "{field} {bad}: {fast:?}");
        }
        // Cells serde takes that look odd: taken alike.
        for (field, odd) in [(2, "NaN"), (10, "exited"), (11, "-9"), (1, "0x0")] {
            let mut cells = cells.clone();
            cells[field] = odd;
            let (fast, serde) = both(&all, &cells);
            let (fast, serde) = (fast.unwrap(), serde.unwrap());
            assert_eq!(format!("{fast:?}"), format!("{serde:?}"), "{field} {odd}");
        }
    }

    #[test]
    fn older_files_and_odd_headers_read_as_serde_reads_them() {
        // Written before the cgroup and site columns, with one unknown.
        let old: Vec<&str> = FIELDS[..31].iter().copied().chain(["extra"]).collect();
        let mut cells = vec![""; old.len()];
        cells[0] = "0";
        cells[2] = "0";
        cells[4] = "target";
        cells[5] = "1";
        cells[6] = "0";
        cells[7] = "5";
        cells[9] = "cheap";
        cells[31] = "anything";
        let (fast, serde) = both(&headers(&old), &cells);
        assert_eq!(fast, Some(serde.unwrap()));
        // A required column missing, a known one twice: serde's to refuse.
        let mut short: Vec<&str> = FIELDS.to_vec();
        short.retain(|f| *f != "tier");
        assert!(Columns::new(&headers(&short)).is_none());
        let twice: Vec<&str> = FIELDS.iter().copied().chain(["pid"]).collect();
        assert!(Columns::new(&headers(&twice)).is_none());
    }

    /// Rows of every kind, with text that needs quotes, an injection and
    /// control characters: the bytes serde and the csv crate write.
    #[test]
    fn rows_are_written_as_serde_writes_them() {
        let mut rows = vec![Row::new(Scope::Session)];
        for (i, comm) in [
            "python3",
            "a, b",
            "say \"hi\"",
            "line\nbreak",
            "cr\rhere",
            "=cmd|' /C calc'!A0",
            "'quoted",
            "tab\there",
            "esc\u{1b}[31m",
            "",
        ]
        .iter()
        .enumerate()
        {
            rows.push(Row {
                sample: i as u64 * 1_000_003,
                run: (i % 2 == 0).then_some(i as u32),
                t_seconds: [0.0, 1.5e-7, 12345.678901, 1e21, f64::NAN][i % 5],
                timestamp: "2026-12-01T15:38:00.330Z".into(),
                scope: [
                    Scope::Target,
                    Scope::Pid(42),
                    Scope::Series(3),
                    Scope::Survivors,
                ][i % 4],
                pid: 4_000_000_000,
                ppid: i as u32,
                start_time: u64::MAX,
                comm: (*comm).into(),
                tier: [
                    Tier::Cheap,
                    Tier::Deep,
                    Tier::Event,
                    Tier::Mapping,
                    Tier::Site,
                    Tier::Type,
                    Tier::Heap,
                ][i % 7],
                event: (i % 3 == 0).then(|| format!("exited, {comm}")),
                exit_code: (i % 3 == 1).then_some(-(i as i32)),
                rss_bytes: Some(i as u64),
                swap_pss_bytes: Some(0),
                pagetables_bytes: Some(1 << 40),
                objects: (i % 2 == 1).then_some(7),
                site_source: [None, Some(SiteSource::Python), Some(SiteSource::Native)][i % 3],
                heap_live_bytes: (i % 3 == 2).then_some(1 << 33),
                heap_used_bytes: Some(i as u64 * 7),
                heap_source: HeapSource::ALL.get(i % 6).copied(),
                gauge: (i % 2 == 0).then_some(i as u64),
                gauge_bytes: (i % 4 == 1).then_some(1 << 20),
                gauge_name: (i % 2 == 0).then(|| format!("queue_length, {comm}")),
                ..Row::new(Scope::Target)
            });
        }
        let mut serde = csv::Writer::from_writer(Vec::new());
        for row in &rows {
            serde.serialize(row).unwrap();
        }
        let serde = serde.into_inner().unwrap();
        let mut ours = Vec::new();
        write_header(&mut ours);
        let mut scratch = String::new();
        for row in &rows {
            write_row(&mut ours, row, &mut scratch);
        }
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&serde)
        );
    }
}
