//! Which process serves a TCP port: the listening sockets of a network
//! namespace (`/proc/PID/net/tcp`, `tcp6`) and the sockets a process holds
//! (`/proc/PID/fd`, links `socket:[INODE]`). Used to check that an endpoint
//! leakwatch reads (`--metrics`, a Node inspector) belongs to the process
//! it is read for.

use std::collections::HashSet;

use super::ProcRoot;

/// TCP state `LISTEN` in the kernel's tables.
const LISTEN: &str = "0A";

/// Inodes of the sockets listening on `port` in a `net/tcp` or `net/tcp6`
/// table's text (`sl local_address rem_address st … uid timeout inode`).
pub fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_ascii_whitespace().collect();
            let local = f.get(1)?;
            let (_, p) = local.rsplit_once(':')?;
            let listening = f.get(3) == Some(&LISTEN);
            (listening && u16::from_str_radix(p, 16).ok()? == port)
                .then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

impl ProcRoot {
    /// The inodes of the sockets listening on `port` in `pid`'s network
    /// namespace (IPv4 and IPv6).
    pub fn listening(&self, pid: u32, port: u16) -> Vec<u64> {
        ["net/tcp", "net/tcp6"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(self.path(pid, f)).ok())
            .flat_map(|t| listening_inodes(&t, port))
            .collect()
    }

    /// The socket inodes `pid` holds open (needs ptrace-read access, as
    /// `fd/` does; empty without it).
    pub fn sockets(&self, pid: u32) -> HashSet<u64> {
        let Ok(dir) = std::fs::read_dir(self.path(pid, "fd")) else {
            return HashSet::new();
        };
        dir.filter_map(|e| e.ok())
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .filter_map(|target| {
                let t = target.to_str()?;
                t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
            })
            .collect()
    }

    /// Which of `pids` listens on `port`, if one does.
    pub fn serving(&self, pids: &[u32], port: u16) -> Option<u32> {
        pids.iter().copied().find(|&pid| {
            let listening = self.listening(pid, port);
            !listening.is_empty() && {
                let held = self.sockets(pid);
                listening.iter().any(|i| held.contains(i))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_found_by_port() {
        let table = "\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:23F1 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0
   1: 0100007F:23F1 0100007F:A980 01 00000000:00000000 03:00000029 00000000     0        0 999 3 0
   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0
";
        assert_eq!(listening_inodes(table, 9201), vec![4242]);
        assert_eq!(listening_inodes(table, 80), vec![77]);
        assert!(listening_inodes(table, 81).is_empty());
    }

    /// A real listener: this test process's own socket is found as its.
    #[test]
    fn the_process_serving_a_port_is_found() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let me = std::process::id();
        let root = ProcRoot::default();
        assert_eq!(root.serving(&[me], port), Some(me));
        drop(listener);
        assert_eq!(root.serving(&[me], port), None);
    }
}
