//! One process read once, in tiers: the cheap tier (`stat`, `status`, the
//! fd count) always, a page walk (`smaps_rollup`, or `smaps` with the
//! mappings) when asked.

use super::{Mapping, ProcError, ProcRoot, Rollup, Status};

/// One process read once: the cheap tier always, the deep tier when asked.
/// All sizes are bytes.
#[derive(Debug, Clone, Default)]
pub struct ProcSample {
    pub pid: u32,
    pub ppid: u32,
    pub start_time: u64,
    pub comm: String,
    pub status: Status,
    pub fds: Option<u64>,
    pub rollup: Option<Rollup>,
    /// Its mappings by name, when read at `Depth::Mappings`.
    pub mappings: Vec<Mapping>,
    /// The deep read was refused (another user's process without ptrace-read access).
    pub deep_denied: bool,
}

/// How far a process is read. Each deep depth walks its page tables once:
/// `smaps` gives the rollup's figures as well as the mappings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// `stat`, `status` and the fd count: no page walk.
    Cheap,
    /// And `smaps_rollup`: PSS, USS, shared and private.
    Rollup,
    /// And `smaps` instead of `smaps_rollup`: the same figures plus the
    /// mappings, for attribution at the first and last sample.
    Mappings,
}

/// Reads one process: `stat` (identity), `status` and the fd count through
/// one held directory; a page walk too at a deep `depth`. `Err(Gone)` means
/// it exited: an event, not a failure.
pub fn read_process(root: &ProcRoot, pid: u32, depth: Depth) -> Result<ProcSample, ProcError> {
    let dir = root.open_dir(pid)?;
    let mut buf = Vec::with_capacity(4096);
    let stat = dir.stat(&mut buf)?;
    let mut status = Status::default();
    dir.status(&mut buf, &mut status)?;
    let fds = dir.fd_count();
    let walked = match depth {
        Depth::Cheap => Ok((None, Vec::new())),
        Depth::Rollup => dir.smaps_rollup(&mut buf).map(|r| (Some(r), Vec::new())),
        Depth::Mappings => dir.smaps(&mut buf).map(|s| (Some(s.rollup), s.mappings)),
    };
    let ((rollup, mappings), deep_denied) = match walked {
        Ok(walked) => (walked, false),
        Err(ProcError::PermissionDenied { .. }) => ((None, Vec::new()), true),
        Err(e) => return Err(e),
    };
    Ok(ProcSample {
        pid,
        ppid: stat.ppid,
        start_time: stat.start_time,
        comm: stat.comm,
        status,
        fds,
        rollup,
        mappings,
        deep_denied,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::fake::FakeProc;

    #[test]
    fn a_process_is_read_in_tiers_from_the_fake_root() {
        let fake = FakeProc::new();
        fake.process(10, 1, 'S', &[(10, &[])]);
        for fd in 0..3 {
            std::fs::write(fake.dir.path().join(format!("10/fd/{fd}")), "").unwrap();
        }
        let root = fake.root();
        let cheap = read_process(&root, 10, Depth::Cheap).unwrap();
        assert_eq!(cheap.status.anon_bytes, Some(140_000 * 1024));
        assert_eq!(cheap.fds, Some(3));
        assert!(cheap.rollup.is_none());
        let deep = read_process(&root, 10, Depth::Rollup).unwrap();
        assert_eq!(deep.rollup.map(|r| r.pss_bytes), Some(150_000 * 1024));
        // An exited-but-unreaped process has an empty smaps_rollup: gone.
        fake.file(10, "smaps_rollup", "");
        let err = read_process(&root, 10, Depth::Rollup).unwrap_err();
        assert!(err.is_gone(), "{err}");
    }
}
