//! `/proc/PID/smaps` in one streaming pass: memory per mapping name (summed
//! over its regions) and, summed over every region, the figures of
//! `smaps_rollup` — so one page-table walk gives both, where reading the two
//! files walks the target's pages twice.
//!
//! What the sums match (kernel 6.18, checked against `smaps_rollup` by
//! `cargo bench --bench smaps_check` on every process of a machine):
//! `Rss`, `Shared_*`, `Private_*`, `Swap` and `Anonymous` are whole pages in
//! every region, so their sums equal the rollup's exactly. `Pss` and
//! `SwapPss` are truncated to whole kB per region (the rollup truncates once,
//! after summing), so the sum is lower by less than 1 kB per region holding
//! shared pages. smaps has no per-region `Pss_Anon`/`Pss_File`/`Pss_Shmem`
//! (the kernel prints them only in the rollup, `__show_smap`): they are
//! derived per region — anonymous pages of a private mapping are its dirty
//! PSS (`Pss_Dirty`, 6.0+), a shared mapping holds none, shmem is a region
//! backed by shmem by name (`/dev/zero (deleted)`, `/SYSV…`, `/memfd:…`,
//! `/dev/shm/…`) — and file is the rest.

use std::collections::HashMap;
use std::io::{self, Read};

use super::parse::{Mapping, Rollup, kb_bytes};

/// Bytes read per `read` call: the kernel produces smaps a buffer at a time
/// and takes the target's mmap lock afresh for each, so the buffer bounds
/// both our memory and how much output one lock hold produces.
const CHUNK: usize = 64 * 1024;

/// What one read of `smaps` gives: the rollup and the mappings by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Smaps {
    pub rollup: Rollup,
    /// Sorted by name.
    pub mappings: Vec<Mapping>,
    /// Regions (VMAs) read.
    pub regions: u64,
}

/// One region (VMA) while its lines are read. Sizes in bytes.
#[derive(Debug, Default)]
struct Region {
    name: String,
    size: u64,
    shared_mapping: bool,
    rss: u64,
    pss: u64,
    pss_dirty: Option<u64>,
    anonymous: u64,
    shared_clean: u64,
    shared_dirty: u64,
    private_clean: u64,
    private_dirty: u64,
    swap: u64,
    swap_pss: Option<u64>,
}

impl Region {
    /// PSS of the region's anonymous pages. A shared mapping holds none; a
    /// private one holds its written (copied-on-write) pages, which are its
    /// dirty ones; `Pss × Anonymous / Rss` where the kernel lacks Pss_Dirty.
    fn pss_anon(&self) -> u64 {
        if self.shared_mapping || self.anonymous == 0 {
            0
        } else if self.anonymous >= self.rss {
            self.pss
        } else {
            match self.pss_dirty {
                Some(dirty) => dirty.min(self.pss),
                None => scale(self.pss, self.anonymous, self.rss),
            }
        }
    }

    fn is_shmem(&self) -> bool {
        self.name == "/dev/zero (deleted)"
            || self.name.starts_with("[shm ")
            || self.name.starts_with("/memfd:")
            || self.name.starts_with("/dev/shm/")
            || self.name.starts_with("[anon_shmem")
    }
}

/// `a × num / den` without overflow, 0 when `den` is 0.
fn scale(a: u64, num: u64, den: u64) -> u64 {
    if den == 0 {
        return 0;
    }
    (u128::from(a) * u128::from(num) / u128::from(den)) as u64
}

/// Builds `Smaps` from lines, in the order the kernel writes them.
#[derive(Debug, Default)]
pub struct SmapsParser {
    region: Option<Region>,
    rollup: Rollup,
    pss_anon: u64,
    pss_shmem: u64,
    swap_pss: Option<u64>,
    by_name: HashMap<String, Mapping>,
    regions: u64,
}

impl SmapsParser {
    /// Reads `smaps` from `file` through `buf` (a work area reused between
    /// calls: at least `CHUNK` bytes, read a buffer at a time).
    pub fn read(file: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<Smaps> {
        let mut parser = SmapsParser::default();
        if buf.len() < CHUNK {
            buf.resize(CHUNK, 0);
        }
        let mut filled = 0;
        loop {
            let n = match file.read(&mut buf[filled..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                parser.line(&buf[..filled]);
                break;
            }
            filled += n;
            let consumed = parser.lines(&buf[..filled]);
            // A line longer than the whole buffer cannot be a field: drop it.
            let consumed = if consumed == 0 && filled == buf.len() {
                filled
            } else {
                consumed
            };
            buf.copy_within(consumed..filled, 0);
            filled -= consumed;
        }
        Ok(parser.finish())
    }

    /// Parses the text of a whole file (tests, fixtures).
    pub fn parse(text: &str) -> Smaps {
        let mut parser = SmapsParser::default();
        let consumed = parser.lines(text.as_bytes());
        parser.line(&text.as_bytes()[consumed..]);
        parser.finish()
    }

    /// Takes every complete line of `bytes`; returns how many bytes it used.
    fn lines(&mut self, bytes: &[u8]) -> usize {
        let mut start = 0;
        while let Some(end) = bytes[start..].iter().position(|&b| b == b'\n') {
            self.line(&bytes[start..start + end]);
            start += end + 1;
        }
        start
    }

    fn line(&mut self, line: &[u8]) {
        match line.first() {
            Some(b'0'..=b'9' | b'a'..=b'f') => {
                self.close_region();
                self.region = header(line);
            }
            Some(b'A'..=b'Z') => self.field(line),
            _ => {}
        }
    }

    fn field(&mut self, line: &[u8]) {
        let Some(region) = &mut self.region else {
            return;
        };
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return;
        };
        let (key, rest) = (&line[..colon], &line[colon + 1..]);
        let slot = match key {
            b"Rss" => &mut region.rss,
            b"Pss" => &mut region.pss,
            b"Anonymous" => &mut region.anonymous,
            b"Shared_Clean" => &mut region.shared_clean,
            b"Shared_Dirty" => &mut region.shared_dirty,
            b"Private_Clean" => &mut region.private_clean,
            b"Private_Dirty" => &mut region.private_dirty,
            b"Swap" => &mut region.swap,
            b"Pss_Dirty" => {
                region.pss_dirty = kb_bytes(rest);
                return;
            }
            b"SwapPss" => {
                region.swap_pss = kb_bytes(rest);
                return;
            }
            _ => return,
        };
        *slot = kb_bytes(rest).unwrap_or(0);
    }

    /// Adds the region just read to the sums.
    fn close_region(&mut self) {
        let Some(region) = self.region.take() else {
            return;
        };
        self.regions += 1;
        let r = &mut self.rollup;
        r.rss_bytes += region.rss;
        r.pss_bytes += region.pss;
        r.shared_clean_bytes += region.shared_clean;
        r.shared_dirty_bytes += region.shared_dirty;
        r.private_clean_bytes += region.private_clean;
        r.private_dirty_bytes += region.private_dirty;
        r.swap_bytes += region.swap;
        if let Some(s) = region.swap_pss {
            *self.swap_pss.get_or_insert(0) += s;
        }
        let anon = region.pss_anon();
        self.pss_anon += anon;
        if region.is_shmem() {
            self.pss_shmem += region.pss - anon;
        }
        let entry = match self.by_name.get_mut(region.name.as_str()) {
            Some(entry) => entry,
            None => self
                .by_name
                .entry(region.name.clone())
                .or_insert_with(|| Mapping {
                    name: region.name.clone(),
                    ..Mapping::default()
                }),
        };
        entry.regions += 1;
        entry.size_bytes += region.size;
        entry.rss_bytes += region.rss;
        entry.pss_bytes += region.pss;
        entry.anon_bytes += region.anonymous;
        entry.private_dirty_bytes += region.private_dirty;
        entry.swap_bytes += region.swap;
    }

    fn finish(mut self) -> Smaps {
        self.close_region();
        let mut rollup = self.rollup;
        rollup.pss_anon_bytes = Some(self.pss_anon);
        rollup.pss_shmem_bytes = Some(self.pss_shmem);
        rollup.pss_file_bytes = Some(
            rollup
                .pss_bytes
                .saturating_sub(self.pss_anon)
                .saturating_sub(self.pss_shmem),
        );
        rollup.swap_pss_bytes = self.swap_pss;
        let mut mappings: Vec<Mapping> = self.by_name.into_values().collect();
        mappings.sort_by(|a, b| a.name.cmp(&b.name));
        Smaps {
            rollup,
            mappings,
            regions: self.regions,
        }
    }
}

/// A region's header: `start-end perms offset dev inode [name]`.
fn header(line: &[u8]) -> Option<Region> {
    // The path is the mapped file's name: anyone who can create a file
    // chooses it, control characters included.
    let text = crate::escape::inert_bytes(line);
    let mut rest = text.as_str();
    let mut fields = [""; 5];
    for field in &mut fields {
        rest = rest.trim_start_matches(' ');
        let end = rest.find(' ').unwrap_or(rest.len());
        *field = &rest[..end];
        rest = &rest[end..];
    }
    let (start, end) = fields[0].split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    Some(Region {
        name: mapping_name(rest.trim()),
        size: end.saturating_sub(start),
        shared_mapping: fields[1].as_bytes().get(3) == Some(&b's'),
        ..Region::default()
    })
}

/// The name a mapping is reported under: `[heap]`, `[stack]` (a thread's
/// stack too), `[anon]` for anonymous regions, `[shm KEY]` for System V
/// shared memory, else the kernel's name (a path, `[vdso]`, `[anon:NAME]`).
pub fn mapping_name(name: &str) -> String {
    match name {
        "" => "[anon]".to_string(),
        n if n.starts_with("[stack") => "[stack]".to_string(),
        n if n.starts_with("/SYSV") => {
            // /SYSVaabbccdd (deleted): the key, as a signed 32-bit number.
            let key = n
                .get(5..13)
                .and_then(|k| u32::from_str_radix(k, 16).ok())
                .map_or(0, |k| k as i32);
            format!("[shm {key}]")
        }
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four regions of a small process: a binary, its heap, a private file
    /// mapping partly written (copied on write), a shared anonymous
    /// mapping. The rollup the kernel would print for it is below.
    pub const SMAPS: &str = "\
55d0c0a00000-55d0c0a02000 r-xp 00000000 fe:00 1234                       /usr/bin/daemon
Size:                  8 kB
Rss:                   8 kB
Pss:                   2 kB
Pss_Dirty:             0 kB
Shared_Clean:          8 kB
Shared_Dirty:          0 kB
Private_Clean:         0 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
Swap:                  0 kB
SwapPss:               0 kB
VmFlags: rd ex mr mw me
55d0c1000000-55d0c1100000 rw-p 00000000 00:00 0                          [heap]
Size:               1024 kB
Rss:                1024 kB
Pss:                1024 kB
Pss_Dirty:          1024 kB
Shared_Clean:          0 kB
Shared_Dirty:          0 kB
Private_Clean:         0 kB
Private_Dirty:      1024 kB
Anonymous:          1024 kB
Swap:                 16 kB
SwapPss:              16 kB
THPeligible:    0
VmFlags: rd wr mr mw me ac
7f0000000000-7f0000010000 rw-p 00010000 fe:00 99                         /usr/lib/libfoo.so
Size:                 64 kB
Rss:                  24 kB
Pss:                  16 kB
Pss_Dirty:            12 kB
Shared_Clean:         12 kB
Shared_Dirty:          0 kB
Private_Clean:         0 kB
Private_Dirty:        12 kB
Anonymous:            12 kB
Swap:                  0 kB
SwapPss:               0 kB
VmFlags: rd wr mr mw me ac
7f0000100000-7f0000200000 rw-s 00000000 00:01 2048                       /dev/zero (deleted)
Size:               1024 kB
Rss:                 256 kB
Pss:                 128 kB
Pss_Dirty:           128 kB
Shared_Clean:          0 kB
Shared_Dirty:        256 kB
Private_Clean:         0 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
Swap:                  0 kB
SwapPss:               0 kB
VmFlags: rd wr sh mr mw me ms
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Size:                132 kB
Rss:                   0 kB
Pss:                   0 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd wr mr mw me gd ac
";

    #[test]
    fn the_sums_are_the_rollup() {
        let s = SmapsParser::parse(SMAPS);
        let kb = |n: u64| n * 1024;
        let r = &s.rollup;
        assert_eq!(s.regions, 5);
        assert_eq!(r.rss_bytes, kb(8 + 1024 + 24 + 256));
        assert_eq!(r.pss_bytes, kb(2 + 1024 + 16 + 128));
        assert_eq!(r.shared_clean_bytes, kb(8 + 12));
        assert_eq!(r.shared_dirty_bytes, kb(256));
        assert_eq!(r.private_dirty_bytes, kb(1024 + 12));
        assert_eq!(r.swap_bytes, kb(16));
        assert_eq!(r.swap_pss_bytes, Some(kb(16)));
        // Anon: the heap whole, the written part of the library's data.
        assert_eq!(r.pss_anon_bytes, Some(kb(1024 + 12)));
        assert_eq!(r.pss_shmem_bytes, Some(kb(128)));
        assert_eq!(r.pss_file_bytes, Some(kb(2 + 4)));
        assert_eq!(r.uss_bytes(), kb(1024 + 12));
    }

    #[test]
    fn mappings_are_summed_by_name() {
        let s = SmapsParser::parse(SMAPS);
        let names: Vec<&str> = s.mappings.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "/dev/zero (deleted)",
                "/usr/bin/daemon",
                "/usr/lib/libfoo.so",
                "[heap]",
                "[stack]"
            ]
        );
        let heap = &s.mappings[3];
        assert_eq!((heap.regions, heap.size_bytes), (1, 1024 * 1024));
        assert_eq!(heap.anon_bytes, 1024 * 1024);
        assert_eq!(heap.swap_bytes, 16 * 1024);
    }

    #[test]
    fn a_stream_read_in_small_pieces_gives_the_same() {
        /// Hands out at most 7 bytes per read, as a slow pipe would.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(out.len()).min(7);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut buf = Vec::new();
        let streamed = SmapsParser::read(&mut Trickle(SMAPS.as_bytes()), &mut buf).unwrap();
        assert_eq!(streamed, SmapsParser::parse(SMAPS));
        // Without a final newline the last line still counts.
        let cut = SMAPS.trim_end_matches('\n');
        let streamed = SmapsParser::read(&mut Trickle(cut.as_bytes()), &mut buf).unwrap();
        assert_eq!(streamed, SmapsParser::parse(SMAPS));
    }

    #[test]
    fn names_follow_the_kernel() {
        assert_eq!(mapping_name(""), "[anon]");
        assert_eq!(mapping_name("[stack:1234]"), "[stack]");
        assert_eq!(mapping_name("/SYSV0000002a (deleted)"), "[shm 42]");
        assert_eq!(mapping_name("/SYSVffffffff (deleted)"), "[shm -1]");
        assert_eq!(mapping_name("[anon:jemalloc]"), "[anon:jemalloc]");
        assert_eq!(
            mapping_name("/tmp/a file (deleted)"),
            "/tmp/a file (deleted)"
        );
        let s = SmapsParser::parse(
            "00400000-00401000 r--p 00000000 08:01 7 /tmp/a b\nRss: 4 kB\nPss: 4 kB\n",
        );
        assert_eq!(s.mappings[0].name, "/tmp/a b");
    }

    #[test]
    fn an_old_kernel_without_pss_dirty_splits_by_anonymous_share() {
        let s = SmapsParser::parse(
            "7f0000000000-7f0000010000 rw-p 00010000 fe:00 99 /usr/lib/libfoo.so\n\
             Rss: 40 kB\nPss: 20 kB\nAnonymous: 10 kB\n",
        );
        assert_eq!(s.rollup.pss_anon_bytes, Some(5 * 1024));
        assert_eq!(s.rollup.pss_file_bytes, Some(15 * 1024));
        assert_eq!(s.rollup.swap_pss_bytes, None);
    }

    #[test]
    fn garbage_is_no_region() {
        let s = SmapsParser::parse("Rss: 4 kB\nnot a header\nzz-yy\n\u{0}\n");
        assert_eq!((s.regions, s.rollup.rss_bytes), (0, 0));
        assert!(s.mappings.is_empty());
    }
}
