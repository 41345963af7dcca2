//! What the /proc files leakwatch reads say, parsed from bytes: the types
//! of a process's `status`, `stat`, `smaps_rollup` and mappings, and their
//! parsers. No file access here (procfs-core's split): `super` opens the
//! files, `smaps` streams through `kb_bytes`, tests feed literal text.
//!
//! Every file is parsed by hand from bytes: `status` is read every tick for
//! every process of a tree, and a parser that only looks for the dozen keys
//! we keep costs a fraction of the kernel's own read time (see
//! `benches/criterion/sampler.rs`, `benches/criterion/sweep.rs`).

/// What a /proc file held that is not what the kernel writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A key every version of the file has (`Name`, `Pss`).
    #[error("no {0}: line")]
    NoLine(&'static str),
    #[error("{0} the command name")]
    NoCommandName(&'static str),
    #[error("field {0} missing or not a number")]
    Field(usize),
    #[error("no state field")]
    NoState,
    #[error("field {0} is not a pid")]
    NotAPid(usize),
}

/// Cheap tier: `/proc/PID/status`. All sizes in bytes (the file says kB).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// The command name as `stat` gives it (`status` escapes `\n` and `\`;
    /// they are unescaped here).
    pub name: String,
    /// `R`, `S`, `D`, `Z` (zombie) …
    pub state: Option<char>,
    pub ppid: u32,
    pub rss_bytes: Option<u64>,
    pub anon_bytes: Option<u64>,
    pub file_bytes: Option<u64>,
    pub shmem_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub hwm_bytes: Option<u64>,
    pub threads: Option<u64>,
}

impl Status {
    /// Exited and not yet reaped by its parent.
    pub fn is_zombie(&self) -> bool {
        matches!(self.state, Some('Z' | 'X'))
    }
}

/// Deep tier: `/proc/PID/smaps_rollup`. All sizes in bytes (the file says kB).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rollup {
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    pub pss_anon_bytes: Option<u64>,
    pub pss_file_bytes: Option<u64>,
    pub pss_shmem_bytes: Option<u64>,
    pub shared_clean_bytes: u64,
    pub shared_dirty_bytes: u64,
    pub private_clean_bytes: u64,
    pub private_dirty_bytes: u64,
    pub swap_bytes: u64,
    pub swap_pss_bytes: Option<u64>,
}

impl Rollup {
    /// Unique set size: pages only this process maps.
    pub fn uss_bytes(&self) -> u64 {
        self.private_clean_bytes + self.private_dirty_bytes
    }

    pub fn shared_bytes(&self) -> u64 {
        self.shared_clean_bytes + self.shared_dirty_bytes
    }
}

/// The fields of `/proc/PID/stat` that identify a process over time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub comm: String,
    /// `R`, `S`, `D`, `Z` (zombie: exited, not yet reaped) …
    pub state: char,
    pub ppid: u32,
    /// Start time in clock ticks since boot: with the pid, it names one process
    /// even when the pid is reused.
    pub start_time: u64,
}

/// One mapping name's memory in one process (bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mapping {
    pub name: String,
    pub regions: u64,
    pub size_bytes: u64,
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    pub anon_bytes: u64,
    pub private_dirty_bytes: u64,
    pub swap_bytes: u64,
}

/// A decimal number of ASCII digits, `None` when empty, not digits or too
/// large for a u64.
pub(super) fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        d.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
            .flatten()
    })
}

/// The value of a `Key:   1234 kB` line (what follows the colon) in bytes;
/// a value without unit is returned as it is.
pub(super) fn kb_bytes(rest: &[u8]) -> Option<u64> {
    let mut parts = rest
        .split(u8::is_ascii_whitespace)
        .filter(|p| !p.is_empty());
    let value = parse_u64(parts.next()?)?;
    match parts.next() {
        Some(b"kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

/// Parses `/proc/PID/status`; only the keys leakwatch keeps.
pub fn parse_status(text: &str) -> Result<Status, ParseError> {
    let mut status = Status::default();
    parse_status_into(text.as_bytes(), &mut status)?;
    Ok(status)
}

/// Parses `/proc/PID/status` into `out` (every field replaced; the name's
/// allocation reused).
pub fn parse_status_into(text: &[u8], out: &mut Status) -> Result<(), ParseError> {
    let mut name = std::mem::take(&mut out.name);
    name.clear();
    *out = Status::default();
    let mut saw_name = false;
    // The keys kept, counted down: the kernel writes them all before
    // `Threads`, so the signal masks and CPU lists after it are not read.
    let mut wanted = 10; // the arms of the match below
    for line in lines(text) {
        if wanted == 0 {
            break;
        }
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let (key, rest) = (&line[..colon], &line[colon + 1..]);
        match key {
            b"Name" => {
                unescape_name(rest.strip_prefix(b"\t").unwrap_or(rest), &mut name);
                saw_name = true;
            }
            b"State" => out.state = rest.trim_ascii_start().first().map(|&c| char::from(c)),
            b"PPid" => {
                out.ppid = kb_bytes(rest)
                    .and_then(|p| u32::try_from(p).ok())
                    .unwrap_or(0)
            }
            b"VmRSS" => out.rss_bytes = kb_bytes(rest),
            b"RssAnon" => out.anon_bytes = kb_bytes(rest),
            b"RssFile" => out.file_bytes = kb_bytes(rest),
            b"RssShmem" => out.shmem_bytes = kb_bytes(rest),
            b"VmSwap" => out.swap_bytes = kb_bytes(rest),
            b"VmHWM" => out.hwm_bytes = kb_bytes(rest),
            b"Threads" => out.threads = kb_bytes(rest),
            _ => continue,
        }
        // One of the keys kept (the match above is their list).
        wanted -= 1;
    }
    out.name = name;
    if saw_name {
        Ok(())
    } else {
        Err(ParseError::NoLine("Name"))
    }
}

/// `text`'s lines as `split(|&b| b == b'\n')` gives them (a last piece
/// after the last newline too), found with `memchr`: a byte-at-a-time
/// search was half of parsing `status`, itself the largest part of a tick
/// that is not the kernel's.
fn lines(mut text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        match memchr::memchr(b'\n', text) {
            Some(at) => {
                let line = &text[..at];
                text = &text[at + 1..];
                Some(line)
            }
            None => {
                done = true;
                Some(text)
            }
        }
    })
}

/// `status` writes the command name with `\n` as `\n` and `\` as `\\`
/// (`proc_task_name`); `stat` writes it raw. Undone here so both agree.
fn unescape_name(escaped: &[u8], out: &mut String) {
    let mut bytes = Vec::with_capacity(escaped.len());
    let mut i = 0;
    while i < escaped.len() {
        match (escaped[i], escaped.get(i + 1)) {
            (b'\\', Some(b'n')) => {
                bytes.push(b'\n');
                i += 2;
            }
            (b'\\', Some(b'\\')) => {
                bytes.push(b'\\');
                i += 2;
            }
            (b, _) => {
                bytes.push(b);
                i += 1;
            }
        }
    }
    out.push_str(&crate::escape::inert_bytes(&bytes));
}

/// Parses `/proc/PID/smaps_rollup` (the header line is skipped).
pub fn parse_smaps_rollup(text: &str) -> Result<Rollup, ParseError> {
    parse_smaps_rollup_bytes(text.as_bytes())
}

pub(super) fn parse_smaps_rollup_bytes(text: &[u8]) -> Result<Rollup, ParseError> {
    let mut r = Rollup::default();
    let mut saw_pss = false;
    for line in text.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let Some(value) = kb_bytes(&line[colon + 1..]) else {
            continue;
        };
        match &line[..colon] {
            b"Rss" => r.rss_bytes = value,
            b"Pss" => {
                r.pss_bytes = value;
                saw_pss = true;
            }
            b"Pss_Anon" => r.pss_anon_bytes = Some(value),
            b"Pss_File" => r.pss_file_bytes = Some(value),
            b"Pss_Shmem" => r.pss_shmem_bytes = Some(value),
            b"Shared_Clean" => r.shared_clean_bytes = value,
            b"Shared_Dirty" => r.shared_dirty_bytes = value,
            b"Private_Clean" => r.private_clean_bytes = value,
            b"Private_Dirty" => r.private_dirty_bytes = value,
            b"Swap" => r.swap_bytes = value,
            b"SwapPss" => r.swap_pss_bytes = Some(value),
            _ => {}
        }
    }
    if saw_pss {
        Ok(r)
    } else {
        Err(ParseError::NoLine("Pss"))
    }
}

/// Parses `/proc/PID/stat`. The command name may hold spaces and parentheses,
/// so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Result<Stat, ParseError> {
    parse_stat_bytes(text.as_bytes())
}

pub(super) fn parse_stat_bytes(text: &[u8]) -> Result<Stat, ParseError> {
    let open = text
        .iter()
        .position(|&b| b == b'(')
        .ok_or(ParseError::NoCommandName("no '(' before"))?;
    let close = text
        .iter()
        .rposition(|&b| b == b')')
        .ok_or(ParseError::NoCommandName("no ')' after"))?;
    let comm = crate::escape::inert_bytes(text.get(open + 1..close).unwrap_or_default());
    // After ")": state(3) ppid(4) ... starttime(22); index 0 here is field 3.
    let fields: Vec<&[u8]> = text
        .get(close + 1..)
        .unwrap_or_default()
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty())
        .take(20)
        .collect();
    let field = |n: usize| -> Result<u64, ParseError> {
        fields
            .get(n - 3)
            .and_then(|f| parse_u64(f))
            .ok_or(ParseError::Field(n))
    };
    let state = fields
        .first()
        .and_then(|f| f.first())
        .map(|&c| char::from(c))
        .ok_or(ParseError::NoState)?;
    Ok(Stat {
        comm,
        state,
        ppid: u32::try_from(field(4)?).map_err(|_| ParseError::NotAPid(4))?,
        start_time: field(22)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_what_split_gives() {
        for text in [
            "",
            "\n",
            "a",
            "a\n",
            "a\nb",
            "a\n\nb\n",
            "Name:\tx\nState:\tS\n",
        ] {
            let ours: Vec<&[u8]> = lines(text.as_bytes()).collect();
            let split: Vec<&[u8]> = text.as_bytes().split(|&b| b == b'\n').collect();
            assert_eq!(ours, split, "{text:?}");
        }
    }

    use super::super::fake::{ROLLUP, STATUS};

    #[test]
    fn status_values_are_bytes() {
        let s = parse_status(STATUS).unwrap();
        assert_eq!(s.name, "pantsd");
        assert_eq!(s.ppid, 1);
        assert_eq!(s.rss_bytes, Some(156_300 * 1024));
        assert_eq!(s.anon_bytes, Some(140_000 * 1024));
        assert_eq!(s.file_bytes, Some(16_000 * 1024));
        assert_eq!(s.shmem_bytes, Some(300 * 1024));
        assert_eq!(s.swap_bytes, Some(12 * 1024));
        assert_eq!(s.hwm_bytes, Some(160_000 * 1024));
        assert_eq!(s.threads, Some(7));
    }

    #[test]
    fn status_of_a_kernel_thread_has_no_memory_fields() {
        let s = parse_status("Name:\tkthreadd\nPPid:\t0\nThreads:\t1\n").unwrap();
        assert_eq!(s.rss_bytes, None);
        assert!(parse_status("garbage").is_err());
    }

    #[test]
    fn rollup_values_are_bytes_and_uss_is_private() {
        let r = parse_smaps_rollup(ROLLUP).unwrap();
        assert_eq!(r.pss_bytes, 150_000 * 1024);
        assert_eq!(r.pss_anon_bytes, Some(140_000 * 1024));
        assert_eq!(r.uss_bytes(), (4000 + 139_700) * 1024);
        assert_eq!(r.shared_bytes(), (12_000 + 600) * 1024);
        assert_eq!(r.swap_pss_bytes, Some(12 * 1024));
    }

    #[test]
    fn rollup_of_an_old_kernel_lacks_the_pss_split() {
        let r = parse_smaps_rollup("Rss: 10 kB\nPss: 8 kB\nPrivate_Dirty: 8 kB\n").unwrap();
        assert_eq!(r.pss_anon_bytes, None);
        assert_eq!(r.uss_bytes(), 8 * 1024);
    }

    #[test]
    fn stat_with_parentheses_in_the_name() {
        let text = "4242 (my (odd) daemon) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 7 0 987654 300000 39000 ...";
        let s = parse_stat(text).unwrap();
        assert_eq!(s.comm, "my (odd) daemon");
        assert_eq!(s.ppid, 1);
        assert_eq!(s.start_time, 987_654);
        assert_eq!(s.state, 'S');
        assert!(parse_stat("4242 (x) S").is_err());
    }

    #[test]
    fn status_names_are_unescaped_like_stat_gives_them() {
        let s = parse_status("Name:\ta\\nb\\\\c  \nState:\tZ (zombie)\nPPid:\t7\n").unwrap();
        // Unescaped, then shown inert as every name is (`stat` gives the same).
        assert_eq!(s.name, "a\\x0ab\\c  ");
        assert_eq!(s.ppid, 7);
        assert!(s.is_zombie());
        // Bytes that are not UTF-8 do not make the process unreadable.
        let mut out = Status::default();
        parse_status_into(b"Name:\tx\xffy\nVmRSS:\t4 kB\n", &mut out).unwrap();
        assert_eq!(out.name, "x\\xffy");
        assert_eq!(out.rss_bytes, Some(4096));
        // A reused Status keeps nothing of the last read.
        parse_status_into(b"Name:\tz\n", &mut out).unwrap();
        assert_eq!((out.name.as_str(), out.rss_bytes), ("z", None));
    }

    #[test]
    fn numbers_that_overflow_are_no_value() {
        assert_eq!(kb_bytes(b" 18014398509481984 kB"), None);
        assert_eq!(kb_bytes(b" 18014398509481983 kB"), Some(u64::MAX - 1023));
        assert_eq!(kb_bytes(b" 99999999999999999999"), None);
        assert_eq!(kb_bytes(b" 12 MB"), None);
        assert_eq!(kb_bytes(b"   7"), Some(7));
        assert!(parse_stat("1 (x) S 99999999999 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5").is_err());
    }
}
