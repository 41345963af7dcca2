//! A process's command line and name as `ps -f` shows them: for matching
//! `attach --name` and for telling leakwatch's own helpers apart.

use std::fs;

use super::{ProcError, ProcRoot};

/// One process's name and command line, for matching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub pid: u32,
    pub comm: String,
    pub cmdline: String,
}

impl ProcRoot {
    /// `/proc/PID/cmdline`: the arguments, each ended by a NUL (empty for a
    /// kernel thread).
    pub fn cmdline(&self, pid: u32) -> Result<Vec<u8>, ProcError> {
        let path = self.path(pid, "cmdline");
        fs::read(&path).map_err(|e| ProcError::from_io(pid, path, e))
    }

    /// Every user process (kernel threads have an empty command line and
    /// are left out), with its name and command line, by pid.
    pub fn candidates(&self) -> Vec<Candidate> {
        let Ok(entries) = fs::read_dir(self.dir()) else {
            return Vec::new();
        };
        let mut out: Vec<Candidate> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| {
                let cmdline = self.cmdline(pid).ok()?;
                if cmdline.is_empty() {
                    return None;
                }
                let comm = fs::read(self.path(pid, "comm")).ok()?;
                let comm = crate::escape::inert_bytes(comm.strip_suffix(b"\n").unwrap_or(&comm));
                let cmdline: Vec<String> = cmdline
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                Some(Candidate {
                    pid,
                    comm,
                    cmdline: cmdline.join(" "),
                })
            })
            .collect();
        out.sort_by_key(|c| c.pid);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fake_proc_lists_user_processes_only() {
        let dir = tempfile::tempdir().unwrap();
        for (pid, comm, cmdline) in [("7", "kthreadd", ""), ("42", "app", "app\0--serve\0")] {
            let p = dir.path().join(pid);
            fs::create_dir(&p).unwrap();
            fs::write(p.join("comm"), format!("{comm}\n")).unwrap();
            fs::write(p.join("cmdline"), cmdline).unwrap();
        }
        fs::create_dir(dir.path().join("self")).unwrap();
        let found = ProcRoot::new(dir.path()).candidates();
        let app = Candidate {
            pid: 42,
            comm: "app".into(),
            cmdline: "app --serve".into(),
        };
        assert_eq!(found, vec![app]);
    }
}
