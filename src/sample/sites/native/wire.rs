//! The shim's answer, version 2 (its specification: `shim/src/listen.rs`),
//! parsed into a typed snapshot. Version 1, without `m` lines, reads too.
//!
//! ```text
//! leakwatch-native-sites 2 pid <pid> run <run> interval <bytes> samples <n> dropped <n>
//! s <live_bytes> <live_samples> <hex>,<hex>,…
//! m <hex start> <hex end> <hex file offset> <hex stated address> <build id in hex, or -> <path>
//! end
//! ```

/// The first word of every answer.
pub const WIRE_FORMAT: &str = "leakwatch-native-sites";
pub const WIRE_VERSION: u32 = 2;

/// One executable segment of an object loaded in the process, as the shim
/// saw it: the addresses can be named from this alone (the process may
/// have exited since).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
    /// Offset of `start` in the file.
    pub offset: u64,
    /// The address the object's ELF states for `start` (`start` minus the
    /// load bias).
    pub vaddr: u64,
    /// The object's GNU build id, lowercase hex.
    pub build_id: Option<String>,
    /// As the loader has it: absolute for a file, else a name
    /// (`linux-vdso.so.1`).
    pub path: String,
}

/// One call stack's live sampled memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// Estimated live bytes (the samples' weights summed).
    pub bytes: u64,
    /// Live sampled blocks behind the estimate.
    pub samples: u64,
    /// Return addresses, innermost first.
    pub frames: Vec<u64>,
}

/// One process' answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub pid: u32,
    pub run: u32,
    /// The mean sampling interval, bytes.
    pub interval_bytes: u64,
    /// Samples taken since the shim started (in this process or its parent
    /// before a fork), and those the shim's tables had no room for.
    pub samples: u64,
    pub dropped: u64,
    pub stacks: Vec<Stack>,
    /// The loaded objects' executable segments (version 2; empty from a
    /// version 1 shim).
    pub segments: Vec<Segment>,
}

/// Parses one answer; the error says what is wrong with it.
pub fn parse_answer(text: &str) -> Result<Snapshot, String> {
    let mut lines = text.lines();
    let header = lines.next().ok_or("empty answer")?;
    let words: Vec<&str> = header.split_ascii_whitespace().collect();
    match words.as_slice() {
        [format, ..] if *format != WIRE_FORMAT => {
            return Err(format!("it starts with {format:?}, not {WIRE_FORMAT:?}"));
        }
        [_, version, ..] if *version != "1" && *version != "2" => {
            return Err(format!(
                "version {version}, this leakwatch reads 1 to {WIRE_VERSION}"
            ));
        }
        _ => {}
    }
    let field = |name: &str| -> Result<u64, String> {
        words
            .iter()
            .position(|w| *w == name)
            .and_then(|i| words.get(i + 1))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no {name} in its first line"))
    };
    let small = |name: &str| -> Result<u32, String> {
        u32::try_from(field(name)?).map_err(|_| format!("{name} out of range"))
    };
    let mut snapshot = Snapshot {
        pid: small("pid")?,
        run: small("run")?,
        interval_bytes: field("interval")?,
        samples: field("samples")?,
        dropped: field("dropped")?,
        stacks: Vec::new(),
        segments: Vec::new(),
    };
    for line in lines {
        if line == "end" {
            return Ok(snapshot);
        }
        if line.starts_with("m ") {
            snapshot.segments.push(parse_segment(line)?);
        } else {
            snapshot.stacks.push(parse_stack(line)?);
        }
    }
    Err("cut short: no end line".into())
}

fn parse_segment(line: &str) -> Result<Segment, String> {
    let bad = || {
        format!(
            "not a segment line: {:?}",
            line.chars().take(80).collect::<String>()
        )
    };
    let fields: Vec<&str> = line.splitn(7, ' ').collect();
    let [_, start, end, offset, vaddr, build_id, path] = fields.as_slice() else {
        return Err(bad());
    };
    let hex = |v: &str| u64::from_str_radix(v, 16).map_err(|_| bad());
    let (start, end, offset, vaddr) = (hex(start)?, hex(end)?, hex(offset)?, hex(vaddr)?);
    let build_id = match *build_id {
        "-" => None,
        id if !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Some(id.to_ascii_lowercase())
        }
        _ => return Err(bad()),
    };
    if path.is_empty() {
        return Err(bad());
    }
    Ok(Segment {
        start,
        end,
        offset,
        vaddr,
        build_id,
        path: path.to_string(),
    })
}

fn parse_stack(line: &str) -> Result<Stack, String> {
    let bad = || {
        format!(
            "not a stack line: {:?}",
            line.chars().take(80).collect::<String>()
        )
    };
    let mut f = line.split(' ');
    if f.next() != Some("s") {
        return Err(bad());
    }
    let bytes = f.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let samples = f.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let frames = match f.next() {
        None | Some("") => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|a| u64::from_str_radix(a, 16).map_err(|_| bad()))
            .collect::<Result<_, _>>()?,
    };
    Ok(Stack {
        bytes,
        samples,
        frames,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_parses_into_stacks() {
        let text = "leakwatch-native-sites 1 pid 42 run 3 interval 65536 samples 136 dropped 0\n\
                    s 5629168 76 5607b3176738,5607b3176565\ns 0 0\nend\n";
        let s = parse_answer(text).unwrap();
        assert_eq!(
            (s.pid, s.run, s.interval_bytes, s.samples),
            (42, 3, 65536, 136)
        );
        assert_eq!(s.stacks[0].frames, vec![0x5607b3176738, 0x5607b3176565]);
        assert_eq!((s.stacks[1].bytes, s.stacks[1].frames.len()), (0, 0));
    }

    #[test]
    fn a_version_2_answer_names_its_objects_segments() {
        let text = "leakwatch-native-sites 2 pid 42 run 3 interval 65536 samples 136 dropped 0\n\
                    s 5629168 76 5607b3176738\n\
                    m 5607b3176000 5607b3177000 1000 1000 AFF9ea26 /tmp/leaky daemon\n\
                    m 7f38e3c21000 7f38e3c22562 0 0 - linux-vdso.so.1\nend\n";
        let s = parse_answer(text).unwrap();
        assert_eq!(s.stacks.len(), 1);
        assert_eq!(
            s.segments,
            vec![
                Segment {
                    start: 0x5607b3176000,
                    end: 0x5607b3177000,
                    offset: 0x1000,
                    vaddr: 0x1000,
                    build_id: Some("aff9ea26".into()),
                    path: "/tmp/leaky daemon".into(),
                },
                Segment {
                    start: 0x7f38e3c21000,
                    end: 0x7f38e3c22562,
                    offset: 0,
                    vaddr: 0,
                    build_id: None,
                    path: "linux-vdso.so.1".into(),
                }
            ]
        );
        let bad = "leakwatch-native-sites 2 pid 1 run 1 interval 1 samples 1 dropped 0\n\
                   m 10 20 0 0 xyz /a\nend\n";
        assert!(parse_answer(bad).unwrap_err().contains("not a segment"));
    }

    #[test]
    fn other_formats_and_cut_answers_are_refused() {
        assert!(
            parse_answer("leakwatch-py-sites 1\n")
                .unwrap_err()
                .contains("not")
        );
        assert!(
            parse_answer("leakwatch-native-sites 3 pid 1\n")
                .unwrap_err()
                .contains("version 3")
        );
        let cut = "leakwatch-native-sites 1 pid 1 run 1 interval 1 samples 1 dropped 0\ns 1 1 ab\n";
        assert!(parse_answer(cut).unwrap_err().contains("no end"));
        let bad = "leakwatch-native-sites 1 pid 1 run 1 interval 1 samples 1 dropped 0\ns x\nend\n";
        assert!(parse_answer(bad).unwrap_err().contains("not a stack"));
    }
}
