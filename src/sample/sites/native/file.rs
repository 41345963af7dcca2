//! Reads a process' sites file, `D/<pid>.sites`, which the shim keeps
//! current (its layout: `shim/src/layout.rs`, included here), into a
//! snapshot of its live sampled bytes by stack.

use std::fs::File;
use std::os::unix::fs::FileExt;

#[allow(dead_code)] // the writer's offsets too
#[path = "../../../../shim/src/layout.rs"]
pub mod layout;

use layout::{
    AT_DROPPED, AT_INTERVAL, AT_MAX_FRAMES, AT_PID, AT_SAMPLES, AT_STACKS, AT_VERSION, HEADER,
    MAGIC, MAX_FRAMES, SLOT, SLOT_BLOCKS, SLOT_DEPTH, SLOT_LIVE, STACKS, VERSION, frames_at,
};

/// One call stack's live sampled memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// Its slot in the file: the same stack in every snapshot of a process.
    pub slot: u32,
    /// Estimated live bytes (the samples' weights summed).
    pub bytes: u64,
    /// Live sampled blocks behind the estimate.
    pub samples: u64,
    /// Return addresses, innermost first.
    pub frames: Vec<u64>,
}

/// One process' stacks, as its file had them when read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub pid: u32,
    /// The mean sampling interval, bytes.
    pub interval_bytes: u64,
    /// Samples taken since the shim started (in this process or its parent
    /// before a fork), and those the shim's tables had no room for.
    pub samples: u64,
    pub dropped: u64,
    /// Every stack published so far, holding memory or not.
    pub stacks: Vec<Stack>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(w)
}

/// Reads `file`, process `pid`'s; the error says what is wrong with it.
pub fn read(file: &File, pid: u32) -> Result<Snapshot, String> {
    let io = |e: std::io::Error| format!("cannot read it: {e}");
    let mut header = [0u8; 64];
    file.read_exact_at(&mut header, 0).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            "it is shorter than a header: not the shim's".to_string()
        } else {
            io(e)
        }
    })?;
    if header[..8] != MAGIC {
        return Err("it does not start as the shim's sites files do".into());
    }
    let version = u32_at(&header, AT_VERSION);
    if version != VERSION {
        return Err(format!(
            "it is of version {version}, this leakwatch reads {VERSION} (the shim of another \
             leakwatch?)"
        ));
    }
    let (stacks, max_frames) = (
        u32_at(&header, AT_STACKS) as usize,
        u32_at(&header, AT_MAX_FRAMES) as usize,
    );
    if (stacks, max_frames) != (STACKS, MAX_FRAMES) {
        return Err(format!(
            "its tables are {stacks} stacks of {max_frames} frames, this leakwatch reads \
             {STACKS} of {MAX_FRAMES}"
        ));
    }
    let owner = u32_at(&header, AT_PID);
    if owner != pid {
        return Err(format!("it is process {owner}'s"));
    }
    let mut slots = vec![0u8; STACKS * SLOT];
    file.read_exact_at(&mut slots, HEADER as u64).map_err(io)?;
    let mut out = Snapshot {
        pid,
        interval_bytes: u64_at(&header, AT_INTERVAL),
        samples: u64_at(&header, AT_SAMPLES),
        dropped: u64_at(&header, AT_DROPPED),
        stacks: Vec::new(),
    };
    let mut row = vec![0u8; MAX_FRAMES * 8];
    for i in 0..STACKS {
        let slot = &slots[i * SLOT..(i + 1) * SLOT];
        let depth = u32_at(slot, SLOT_DEPTH) as usize;
        if depth == 0 {
            continue;
        }
        if depth > MAX_FRAMES {
            return Err(format!(
                "stack {i} has {depth} frames, at most {MAX_FRAMES} fit"
            ));
        }
        // Read after its depth: the shim wrote the frames before it.
        let row = &mut row[..depth * 8];
        file.read_exact_at(row, frames_at(i) as u64).map_err(io)?;
        let mut frames: Vec<u64> = (0..depth).map(|k| u64_at(row, k * 8)).collect();
        if frames == [0] {
            frames.clear();
        }
        out.stacks.push(Stack {
            slot: i as u32,
            bytes: (u64_at(slot, SLOT_LIVE) as i64).max(0) as u64,
            samples: (u64_at(slot, SLOT_BLOCKS) as i64).max(0) as u64,
            frames,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file as the shim writes it: `stacks` as (slot, live, blocks, frames).
    fn sites_file(pid: u32, stacks: &[(usize, i64, i64, &[u64])]) -> tempfile::NamedTempFile {
        let mut b = vec![0u8; layout::SIZE];
        b[..8].copy_from_slice(&MAGIC);
        b[AT_VERSION..AT_VERSION + 4].copy_from_slice(&VERSION.to_ne_bytes());
        b[AT_PID..AT_PID + 4].copy_from_slice(&pid.to_ne_bytes());
        b[AT_INTERVAL..AT_INTERVAL + 8].copy_from_slice(&65536u64.to_ne_bytes());
        b[AT_SAMPLES..AT_SAMPLES + 8].copy_from_slice(&136u64.to_ne_bytes());
        b[AT_STACKS..AT_STACKS + 4].copy_from_slice(&(STACKS as u32).to_ne_bytes());
        b[AT_MAX_FRAMES..AT_MAX_FRAMES + 4].copy_from_slice(&(MAX_FRAMES as u32).to_ne_bytes());
        for &(i, live, blocks, frames) in stacks {
            let s = layout::slot_at(i);
            let depth = frames.len().max(1) as u32;
            b[s + SLOT_DEPTH..s + SLOT_DEPTH + 4].copy_from_slice(&depth.to_ne_bytes());
            b[s + SLOT_LIVE..s + SLOT_LIVE + 8].copy_from_slice(&live.to_ne_bytes());
            b[s + SLOT_BLOCKS..s + SLOT_BLOCKS + 8].copy_from_slice(&blocks.to_ne_bytes());
            for (k, f) in frames.iter().enumerate() {
                let at = frames_at(i) + k * 8;
                b[at..at + 8].copy_from_slice(&f.to_ne_bytes());
            }
        }
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&b).unwrap();
        f
    }

    #[test]
    fn a_sites_file_reads_into_its_stacks() {
        let f = sites_file(
            42,
            &[
                (7, 5_629_168, 76, &[0x5607_b317_6738, 0x5607_b317_6565]),
                (8000, -3, 0, &[]),
            ],
        );
        let s = read(f.as_file(), 42).unwrap();
        assert_eq!(
            (s.pid, s.interval_bytes, s.samples, s.dropped),
            (42, 65536, 136, 0)
        );
        assert_eq!(s.stacks.len(), 2);
        assert_eq!(
            s.stacks[0],
            Stack {
                slot: 7,
                bytes: 5_629_168,
                samples: 76,
                frames: vec![0x5607_b317_6738, 0x5607_b317_6565],
            }
        );
        // A transient negative sum reads 0; a walk with no frame, none.
        assert_eq!((s.stacks[1].bytes, s.stacks[1].frames.len()), (0, 0));
    }

    #[test]
    fn another_process_file_or_format_is_refused_with_the_reason() {
        let f = sites_file(42, &[]);
        assert!(read(f.as_file(), 43).unwrap_err().contains("process 42's"));
        let mut short = tempfile::NamedTempFile::new().unwrap();
        short.write_all(b"lwsites\0").unwrap();
        assert!(read(short.as_file(), 42).unwrap_err().contains("shorter"));
        let mut other = tempfile::NamedTempFile::new().unwrap();
        other.write_all(&[b'x'; 4096]).unwrap();
        assert!(
            read(other.as_file(), 42)
                .unwrap_err()
                .contains("does not start")
        );
        let g = sites_file(42, &[]);
        g.as_file()
            .write_all_at(&2u32.to_ne_bytes(), AT_VERSION as u64)
            .unwrap();
        assert!(read(g.as_file(), 42).unwrap_err().contains("version 2"));
    }
}
