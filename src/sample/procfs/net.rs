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

/// Most bytes of one `net/tcp` table read: a machine with tens of
/// thousands of sockets is not scanned whole for a hint.
const MAX_TABLE: u64 = 4 << 20;

/// Whether a `net/tcp` address (`0100007F:1F90`, or 32 hex digits in
/// `tcp6`) is on the loopback: 127.0.0.0/8, ::1, or ::ffff:127.x.
fn is_loopback(addr: &str) -> bool {
    let Some((ip, _)) = addr.rsplit_once(':') else {
        return false;
    };
    match ip.len() {
        // IPv4 in host byte order (little-endian here): the first octet last.
        8 => ip.ends_with("7F"),
        32 => {
            ip == "00000000000000000000000001000000"
                || (ip.starts_with("0000000000000000FFFF0000") && ip.ends_with("7F"))
        }
        _ => false,
    }
}

fn port_of(addr: &str) -> Option<u16> {
    u16::from_str_radix(addr.rsplit_once(':')?.1, 16).ok()
}

/// The loopback connections of a `net/tcp` or `net/tcp6` table's text, any
/// state but listening (`TIME_WAIT` included: a short request is over by
/// the time it is read), as (local port, remote port); and the listening
/// ports with their socket inodes.
pub fn loopback_table(table: &str) -> Loopback {
    let (mut conns, mut listening) = (HashSet::new(), Vec::new());
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        let (Some(local), Some(remote), Some(state)) = (f.get(1), f.get(2), f.get(3)) else {
            continue;
        };
        let Some(lport) = port_of(local) else {
            continue;
        };
        if *state == LISTEN {
            if let Some(inode) = f.get(9).and_then(|i| i.parse().ok()) {
                listening.push((lport, inode));
            }
        } else if is_loopback(local)
            && is_loopback(remote)
            && let Some(rport) = port_of(remote)
        {
            conns.insert((lport, rport));
        }
    }
    Loopback {
        connections: conns,
        listening,
    }
}

/// One look at this network namespace's loopback TCP: its connections and
/// its listening sockets (`loopback_table` over `tcp` and `tcp6`).
#[derive(Debug, Clone, Default)]
pub struct Loopback {
    pub connections: HashSet<(u16, u16)>,
    pub listening: Vec<(u16, u64)>,
}

impl Loopback {
    /// The listening ports that connections new since `before` reached:
    /// the local servers something talked to in between.
    pub fn servers_reached_since(&self, before: &Loopback) -> Vec<(u16, u64)> {
        let mut out: Vec<(u16, u64)> = Vec::new();
        for &(a, b) in self.connections.difference(&before.connections) {
            for &(port, inode) in &self.listening {
                if (port == a || port == b) && !out.iter().any(|&(p, _)| p == port) {
                    out.push((port, inode));
                }
            }
        }
        out.sort_unstable();
        out
    }
}

impl ProcRoot {
    /// This namespace's loopback TCP as process `pid` sees it (bounded reads).
    pub fn loopback(&self, pid: u32) -> Loopback {
        let mut out = Loopback::default();
        for f in ["net/tcp", "net/tcp6"] {
            let Ok(file) = std::fs::File::open(self.path(pid, f)) else {
                continue;
            };
            let mut text = String::new();
            if std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_TABLE), &mut text)
                .is_err()
            {
                continue;
            }
            let table = loopback_table(&text);
            out.connections.extend(table.connections);
            out.listening.extend(table.listening);
        }
        out
    }

    /// The process holding socket `inode`, among every process this root
    /// shows (a scan of `/proc/*/fd`: once per server found, not per tick).
    pub fn socket_owner(&self, inode: u64) -> Option<u32> {
        let dir = std::fs::read_dir(self.dir()).ok()?;
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|&pid| self.sockets(pid).contains(&inode))
    }

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

    /// Loopback connections in any state but listening, both families; the
    /// listening ports with their inodes; a remote peer is no loopback.
    #[test]
    fn loopback_connections_and_listeners_are_read() {
        let v4 = "\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1FA5 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0
   1: 0100007F:A980 0100007F:1FA5 06 00000000:00000000 03:00000029 00000000     0        0 0 3 0
   2: 0A00000A:A981 0A000001:0050 01 00000000:00000000 03:00000029 00000000     0        0 55 3 0
";
        let t = loopback_table(v4);
        assert_eq!(t.listening, vec![(8101, 4242)]);
        assert_eq!(t.connections, HashSet::from([(0xA980, 8101)]));
        let v6 = "\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1FA5 00000000000000000000000001000000:B000 01 00000000:00000000 00:00000000 00000000     0        0 9 1
   1: 0000000000000000FFFF00000100007F:1FA5 0000000000000000FFFF00000100007F:B001 01 00000000:00000000 00:00000000 00000000     0        0 10 1
";
        let t = loopback_table(v6);
        assert_eq!(
            t.connections,
            HashSet::from([(8101, 0xB000), (8101, 0xB001)])
        );
        let before = Loopback::default();
        let after = Loopback {
            connections: HashSet::from([(0xA980, 8101)]),
            listening: vec![(8101, 4242), (22, 7)],
        };
        assert_eq!(after.servers_reached_since(&before), vec![(8101, 4242)]);
        assert!(after.servers_reached_since(&after).is_empty());
    }

    /// A connection to a real listener is seen, and its owner found.
    #[test]
    fn a_connection_to_a_local_server_names_the_server() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let me = std::process::id();
        let root = ProcRoot::default();
        let before = root.loopback(me);
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _server = listener.accept().unwrap();
        let reached = root.loopback(me).servers_reached_since(&before);
        let (_, inode) = *reached.iter().find(|&&(p, _)| p == port).unwrap();
        assert_eq!(root.socket_owner(inode), Some(me));
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
