//! The text of `jcmd PID GC.class_histogram` (HotSpot's
//! `KlassInfoHisto::print_histo_on`): a header, one line per class —
//! rank, instances, bytes, the class's name and, from JDK 9, its module in
//! parentheses — then a `Total` line:
//!
//! ```text
//!  num     #instances         #bytes  class name (module)
//! -------------------------------------------------------
//!    1:          3064        4593032  [B (java.base@17.0.9)
//!    2:          2000          48000  Leaky$Session
//! Total          9120        5012544
//! ```
//!
//! Sorted by bytes, largest first. Names are the JVM's (`[B` is `byte[]`,
//! `[Ljava.lang.Object;` an `Object[]`), kept as they are.

/// One class's live instances and their bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    pub name: String,
    pub instances: u64,
    pub bytes: u64,
}

/// A whole histogram.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    /// The classes, largest first, at most the number asked for.
    pub classes: Vec<Class>,
    /// Every class's instances and bytes (the `Total` line).
    pub instances: u64,
    pub bytes: u64,
    /// Classes in the histogram (also those beyond the ones kept).
    pub listed: usize,
}

/// The most characters of a class name kept (a hidden class's name is its
/// class's plus an address; generated names may be long).
const MAX_NAME: usize = 300;

/// Why a text is not a class histogram.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistogramError {
    #[error("it has no histogram header (`#instances`): {0:?}")]
    NoHeader(String),
    #[error("it has no Total line (cut short?)")]
    NoTotal,
    #[error("line {0} is not `rank: instances bytes name`")]
    BadLine(usize),
}

/// Parses a histogram, keeping its `keep` largest classes.
pub fn parse(text: &str, keep: usize) -> Result<Histogram, HistogramError> {
    let mut lines = text.lines().enumerate();
    if !lines.by_ref().any(|(_, l)| l.contains("#instances")) {
        let start: String = text.trim().chars().take(120).collect();
        return Err(HistogramError::NoHeader(start));
    }
    let mut out = Histogram::default();
    for (n, line) in lines {
        let line = line.trim();
        if line.is_empty() || line.starts_with('-') {
            continue;
        }
        if let Some(total) = line.strip_prefix("Total") {
            let mut f = total.split_ascii_whitespace().map(str::parse::<u64>);
            let (Some(Ok(instances)), Some(Ok(bytes))) = (f.next(), f.next()) else {
                return Err(HistogramError::BadLine(n + 1));
            };
            out.instances = instances;
            out.bytes = bytes;
            return Ok(out);
        }
        let class = class_line(line).ok_or(HistogramError::BadLine(n + 1))?;
        out.listed += 1;
        if out.classes.len() < keep {
            out.classes.push(class);
        }
    }
    Err(HistogramError::NoTotal)
}

/// `rank: instances bytes name [(module)]`.
fn class_line(line: &str) -> Option<Class> {
    let (rank, rest) = line.split_once(':')?;
    rank.trim().parse::<u64>().ok()?;
    let rest = rest.trim_start();
    let (instances, rest) = rest.split_once(char::is_whitespace)?;
    let rest = rest.trim_start();
    let (bytes, name) = rest.split_once(char::is_whitespace)?;
    let name = name.trim();
    // The module, from JDK 9: ` (java.base@17.0.9)`. A class name has no
    // spaces, so the first space ends it.
    let name = name.split_once(' ').map_or(name, |(n, _)| n);
    if name.is_empty() {
        return None;
    }
    Some(Class {
        name: name.chars().take(MAX_NAME).collect(),
        instances: instances.parse().ok()?,
        bytes: bytes.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const JDK17: &str = " num     #instances         #bytes  class name (module)
-------------------------------------------------------
   1:          3064        4593032  [B (java.base@17.0.9)
   2:          2000          48000  Leaky$Session
   3:           612          14688  java.lang.String (java.base@17.0.9)
Total          5676        4655720
";

    #[test]
    fn a_jdk17_histogram_is_read_with_its_modules_dropped() {
        let h = parse(JDK17, 10).unwrap();
        assert_eq!(h.classes.len(), 3);
        assert_eq!(
            h.classes[1],
            Class {
                name: "Leaky$Session".into(),
                instances: 2000,
                bytes: 48000
            }
        );
        assert_eq!(h.classes[0].name, "[B");
        assert_eq!(h.classes[2].name, "java.lang.String");
        assert_eq!((h.instances, h.bytes, h.listed), (5676, 4655720, 3));
        let top = parse(JDK17, 1).unwrap();
        assert_eq!((top.classes.len(), top.listed), (1, 3));
    }

    #[test]
    fn what_is_not_a_histogram_is_refused() {
        assert!(matches!(
            parse("GC.class_histogram: unknown command", 10),
            Err(HistogramError::NoHeader(_))
        ));
        let cut = &JDK17[..JDK17.find("Total").unwrap()];
        assert_eq!(parse(cut, 10), Err(HistogramError::NoTotal));
        let bad = JDK17.replace("48000", "lots");
        assert_eq!(parse(&bad, 10), Err(HistogramError::BadLine(4)));
        assert!(parse("", 10).is_err());
    }
}
