//! The HotSpot performance-data file (`hsperfdata`), the counters `jstat`
//! reads, parsed from its bytes. Layout (OpenJDK `perfMemory.hpp`,
//! `sun.jvmstat.perfdata.monitor.v2_0.PerfDataBufferPrologue`): a 32-byte
//! prologue — magic `0xcafec0c0` (big-endian bytes), byte order (0 big,
//! 1 little), major and minor version, an `accessible` flag, the bytes
//! used, overflow, a modification time stamp, the offset of the first
//! entry and the number of entries — then the entries, each a 20-byte
//! header (its length, the offset of its NUL-terminated name, a vector
//! length, a type code, flags, units, variability, the offset of its data)
//! followed by its name and data. Longs (`J`, vector length 0) and byte
//! vectors (`B`, strings) are all the JVM writes.
//!
//! The file belongs to another process: every length and offset is checked
//! against the bytes read, names and texts are bounded, and a spoiled file
//! is an error naming what is wrong, never a panic.

use std::fmt;

/// Most bytes read of one file: HotSpot's default is 64 KiB
/// (`-XX:PerfDataMemorySize`, rounded up to pages); 4 MiB leaves room for
/// a JVM that raised it and bounds what a planted file can make us read.
pub const MAX_FILE_BYTES: usize = 4 << 20;
/// Most entries, names' and texts' lengths taken from one file.
const MAX_ENTRIES: usize = 100_000;
const MAX_NAME: usize = 256;
const MAX_TEXT: usize = 4096;

const PROLOGUE: usize = 32;
const ENTRY_HEADER: usize = 20;
const MAGIC: [u8; 4] = [0xca, 0xfe, 0xc0, 0xc0];

/// Why a file is not counters leakwatch can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HsperfError {
    #[error("not an hsperfdata file (its magic number is {0:02x?})")]
    Magic([u8; 4]),
    #[error("hsperfdata version {0}.{1}, where 2.0 is what JDK 6 to 25 write")]
    Version(u8, u8),
    #[error("the JVM has not made its counters accessible yet")]
    NotReady,
    #[error("spoiled hsperfdata file: {0}")]
    Spoiled(&'static str),
}

/// One counter's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Long(i64),
    Text(String),
}

/// The counters of one file, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerfData {
    pub counters: Vec<(String, Value)>,
}

impl PerfData {
    pub fn long(&self, name: &str) -> Option<i64> {
        self.counters.iter().find_map(|(n, v)| match v {
            Value::Long(x) if n == name => Some(*x),
            _ => None,
        })
    }

    pub fn text(&self, name: &str) -> Option<&str> {
        self.counters.iter().find_map(|(n, v)| match v {
            Value::Text(t) if n == name => Some(t.as_str()),
            _ => None,
        })
    }
}

impl fmt::Display for PerfData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, value) in &self.counters {
            match value {
                Value::Long(x) => writeln!(f, "{name}={x}")?,
                Value::Text(t) => writeln!(f, "{name}=\"{t}\"")?,
            }
        }
        Ok(())
    }
}

/// A little- or big-endian reader over the file's bytes, every read checked.
struct Bytes<'a> {
    data: &'a [u8],
    little: bool,
}

impl Bytes<'_> {
    fn array<const N: usize>(&self, at: usize) -> Option<[u8; N]> {
        self.data.get(at..at.checked_add(N)?)?.try_into().ok()
    }

    fn i32(&self, at: usize) -> Option<i32> {
        let b = self.array::<4>(at)?;
        Some(if self.little {
            i32::from_le_bytes(b)
        } else {
            i32::from_be_bytes(b)
        })
    }

    fn i64(&self, at: usize) -> Option<i64> {
        let b = self.array::<8>(at)?;
        Some(if self.little {
            i64::from_le_bytes(b)
        } else {
            i64::from_be_bytes(b)
        })
    }

    /// A non-negative `i32` offset or length as `usize`.
    fn offset(&self, at: usize) -> Option<usize> {
        usize::try_from(self.i32(at)?).ok()
    }

    /// The NUL-terminated text at `at`, ending before `end`, at most `max`
    /// bytes: `None` without its NUL; bytes outside printable ASCII made `?`.
    fn text(&self, at: usize, end: usize, max: usize) -> Option<String> {
        self.raw_text(at, end)
            .map(|t| printable(&t[..t.len().min(max)]))
    }

    /// The bytes of the NUL-terminated text at `at`, ending before `end`.
    fn raw_text(&self, at: usize, end: usize) -> Option<&[u8]> {
        let field = self.data.get(at..end.min(self.data.len()))?;
        let len = field.iter().position(|&b| b == 0)?;
        Some(&field[..len])
    }
}

/// Text from the file, bytes outside printable ASCII made `?`.
fn printable(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '?'
            }
        })
        .collect()
}

/// Parses the counters whose names `keep` accepts (all others are skipped
/// without being copied), from a whole file's bytes.
pub fn parse(data: &[u8], keep: impl Fn(&str) -> bool) -> Result<PerfData, HsperfError> {
    let data = &data[..data.len().min(MAX_FILE_BYTES)];
    let magic: [u8; 4] = data
        .get(..4)
        .and_then(|m| m.try_into().ok())
        .ok_or(HsperfError::Spoiled("shorter than its prologue"))?;
    if magic != MAGIC {
        return Err(HsperfError::Magic(magic));
    }
    if data.len() < PROLOGUE {
        return Err(HsperfError::Spoiled("shorter than its prologue"));
    }
    let little = match data[4] {
        0 => false,
        1 => true,
        _ => return Err(HsperfError::Spoiled("byte order is neither 0 nor 1")),
    };
    if (data[5], data[6]) != (2, 0) {
        return Err(HsperfError::Version(data[5], data[6]));
    }
    if data[7] == 0 {
        return Err(HsperfError::NotReady);
    }
    let b = Bytes { data, little };
    let spoiled = HsperfError::Spoiled;
    let used = b
        .offset(8)
        .filter(|&u| (PROLOGUE..=data.len()).contains(&u))
        .ok_or(spoiled("its used size is outside the file"))?;
    let mut at = b
        .offset(24)
        .filter(|&o| o >= PROLOGUE && o <= used)
        .ok_or(spoiled("its first entry is outside the file"))?;
    let entries = b
        .offset(28)
        .filter(|&n| n <= MAX_ENTRIES)
        .ok_or(spoiled("its entry count is negative or too large"))?;
    let mut out = PerfData::default();
    for _ in 0..entries {
        let len = b
            .offset(at)
            .filter(|&l| l >= ENTRY_HEADER && at + l <= used)
            .ok_or(spoiled("an entry's length runs outside the file"))?;
        let end = at + len;
        let name_at = b
            .offset(at + 4)
            .filter(|&o| o >= ENTRY_HEADER && o < len)
            .ok_or(spoiled("an entry's name is outside the entry"))?;
        let raw = b
            .raw_text(at + name_at, end)
            .ok_or(spoiled("an entry's name has no end"))?;
        let raw = &raw[..raw.len().min(MAX_NAME)];
        // Names are ASCII; one that is not is no counter of ours.
        let name = std::str::from_utf8(raw).unwrap_or("");
        let vector = b
            .offset(at + 8)
            .ok_or(spoiled("an entry's vector length is negative"))?;
        let kind = data[at + 12];
        let data_at = b
            .offset(at + 16)
            .filter(|&o| o >= ENTRY_HEADER && o <= len)
            .ok_or(spoiled("an entry's data is outside the entry"))?;
        if !name.is_empty() && keep(name) {
            let value = match (kind, vector) {
                (b'J', 0) => b
                    .i64(at + data_at)
                    .filter(|_| data_at + 8 <= len)
                    .map(Value::Long)
                    .ok_or(spoiled("a long runs outside its entry"))?,
                (b'B', n) if n > 0 => {
                    let field_end = (at + data_at).checked_add(n).filter(|&e| e <= end);
                    let field_end = field_end.ok_or(spoiled("a text runs outside its entry"))?;
                    // A text fills its vector when it has no NUL: take it whole.
                    let text = b
                        .text(at + data_at, field_end, MAX_TEXT)
                        .unwrap_or_else(|| {
                            String::from_utf8_lossy(
                                &data[at + data_at..field_end.min(at + data_at + MAX_TEXT)],
                            )
                            .into_owned()
                        });
                    Value::Text(text)
                }
                // Other types and vectors of longs: none of ours.
                _ => {
                    at = end;
                    continue;
                }
            };
            out.counters.push((printable(raw), value));
        }
        at = end;
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An hsperfdata file as a JVM writes it (little-endian, version 2.0)
    /// holding `counters`; for tests of the parser and the readers.
    pub(crate) fn file(counters: &[(&str, Value)]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[1, 2, 0, 1]);
        out.extend_from_slice(&0i32.to_le_bytes()); // used, set below
        out.extend_from_slice(&0i32.to_le_bytes());
        out.extend_from_slice(&0i64.to_le_bytes());
        out.extend_from_slice(&(PROLOGUE as i32).to_le_bytes());
        out.extend_from_slice(&(counters.len() as i32).to_le_bytes());
        for (name, value) in counters {
            let name_at = ENTRY_HEADER;
            let mut name_bytes = name.as_bytes().to_vec();
            name_bytes.push(0);
            while (name_at + name_bytes.len()) % 8 != 0 {
                name_bytes.push(0);
            }
            let data_at = name_at + name_bytes.len();
            let (kind, vector, payload) = match value {
                Value::Long(x) => (b'J', 0, x.to_le_bytes().to_vec()),
                Value::Text(t) => {
                    let mut p = t.as_bytes().to_vec();
                    p.push(0);
                    while p.len() % 8 != 0 {
                        p.push(0);
                    }
                    (b'B', p.len() as i32, p)
                }
            };
            let len = data_at + payload.len();
            out.extend_from_slice(&(len as i32).to_le_bytes());
            out.extend_from_slice(&(name_at as i32).to_le_bytes());
            out.extend_from_slice(&vector.to_le_bytes());
            out.extend_from_slice(&[kind, 0, 1, 3]);
            out.extend_from_slice(&(data_at as i32).to_le_bytes());
            out.extend_from_slice(&name_bytes);
            out.extend_from_slice(&payload);
        }
        let used = out.len() as i32;
        out[8..12].copy_from_slice(&used.to_le_bytes());
        out.resize(out.len().next_multiple_of(4096), 0);
        out
    }

    #[test]
    fn counters_read_as_written_and_others_are_skipped() {
        let bytes = file(&[
            ("sun.gc.policy.name", Value::Text("GarbageFirst".into())),
            ("sun.gc.generation.1.space.0.used", Value::Long(123_456)),
            ("java.property.java.version", Value::Text("17.0.15".into())),
        ]);
        let all = parse(&bytes, |_| true).unwrap();
        assert_eq!(all.text("sun.gc.policy.name"), Some("GarbageFirst"));
        assert_eq!(all.long("sun.gc.generation.1.space.0.used"), Some(123_456));
        let gc = parse(&bytes, |n| n.starts_with("sun.gc.")).unwrap();
        assert_eq!(gc.counters.len(), 2);
    }

    /// Any bytes in place of a real file's — flipped, cut short, lengths
    /// and offsets made huge or negative — parse or are refused; never a
    /// panic, never a read outside the bytes.
    #[test]
    fn spoiled_files_are_parsed_or_refused_never_a_panic() {
        use proptest::prelude::*;
        let good = file(&[
            ("sun.gc.policy.name", Value::Text("GarbageFirst".into())),
            ("sun.gc.collector.0.invocations", Value::Long(4)),
            (
                "sun.gc.generation.0.space.0.name",
                Value::Text("eden".into()),
            ),
            ("sun.gc.generation.0.space.0.used", Value::Long(1 << 20)),
            ("sun.gc.generation.1.space.0.used", Value::Long(5 << 20)),
            ("sun.gc.generation.1.maxCapacity", Value::Long(256 << 20)),
        ]);
        let used: usize = 400;
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(4000));
        runner
            .run(
                &(
                    proptest::collection::vec((0..used, any::<u8>()), 0..24),
                    0..good.len() + 1,
                ),
                |(flips, cut)| {
                    let mut bytes = good.clone();
                    for (at, b) in flips {
                        bytes[at] = b;
                    }
                    bytes.truncate(cut);
                    if let Ok(data) = parse(&bytes, |_| true) {
                        let _ = super::super::jvm::counters(&data);
                    }
                    Ok(())
                },
            )
            .unwrap();
    }

    #[test]
    fn a_file_that_is_not_counters_says_why() {
        let good = file(&[("sun.gc.x", Value::Long(1))]);
        assert!(matches!(
            parse(b"<html>", |_| true),
            Err(HsperfError::Magic(_))
        ));
        assert!(matches!(
            parse(&good[..16], |_| true),
            Err(HsperfError::Spoiled(_))
        ));
        let mut v1 = good.clone();
        v1[5] = 1;
        assert_eq!(parse(&v1, |_| true), Err(HsperfError::Version(1, 0)));
        let mut starting = good.clone();
        starting[7] = 0;
        assert_eq!(parse(&starting, |_| true), Err(HsperfError::NotReady));
        let mut huge = good.clone();
        huge[28..32].copy_from_slice(&i32::MAX.to_le_bytes());
        assert!(matches!(
            parse(&huge, |_| true),
            Err(HsperfError::Spoiled(_))
        ));
        let mut outside = good;
        outside[PROLOGUE..PROLOGUE + 4].copy_from_slice(&(1i32 << 30).to_le_bytes());
        assert!(matches!(
            parse(&outside, |_| true),
            Err(HsperfError::Spoiled(_))
        ));
    }
}
