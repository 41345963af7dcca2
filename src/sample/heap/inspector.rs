//! V8's heap in a Node process leakwatch did not start (`--node-inspector`),
//! through the DevTools protocol of the inspector that `SIGUSR1` opens.
//!
//! What it does to the process, all of which the report says:
//! 1. `SIGUSR1`, only when the process catches it (`SigCgt` in its status:
//!    Node installs the handler that opens the inspector; the default action
//!    would end the process). Node prints "Debugger listening on …" on its
//!    stderr and listens on 127.0.0.1 (port 9229 unless `--inspect-port`).
//! 2. The listening socket must be the process's own: a loopback socket it
//!    holds, new since the signal (or, for an inspector opened before, one it
//!    held). Its `/json/list` must name a WebSocket on that same port.
//! 3. Over the WebSocket: `Runtime.getHeapUsage` at each read (V8's used
//!    heap); `HeapProfiler.collectGarbage` where the live heap is wanted (a
//!    full collection: a pause, measured); `Runtime.evaluate` once for the
//!    heap's limit (`v8.getHeapStatistics().heap_size_limit`).
//! 4. With `--js-sites`: `HeapProfiler.startSampling` at the start, and
//!    after each full collection `HeapProfiler.getSamplingProfile`, folded
//!    here into sites (`fold_profile`) as the preload folds it; stopped at
//!    the end.
//! 5. At the end the inspector is closed again (`inspector.close()`, run
//!    from a timer after leakwatch hung up), when leakwatch opened it.
//!
//! Every answer is input from another process: frames and messages are
//! bounded, every read has a timeout, and a message that is not what the
//! protocol says is an error naming it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::super::procfs::ProcRoot;

/// Longest message taken (a reply of ours is under 200 bytes; an event the
/// process sends while we wait is skipped, but must fit; a sampling
/// profile of a large program is a few MiB, ~150 bytes a stack node).
const MAX_MESSAGE: usize = 16 << 20;
/// How long one exchange may take; a full collection of a large heap takes
/// seconds.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the inspector may take to listen after the signal.
const OPEN_TIMEOUT: Duration = Duration::from_secs(3);

/// `SIGUSR1`'s bit in `SigCgt` (signal 10: bit 9).
const SIGUSR1_BIT: u64 = 1 << 9;

/// Whether `pid` catches SIGUSR1 (its status' `SigCgt`).
pub fn catches_sigusr1(root: &ProcRoot, pid: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(root.path(pid, "status")) else {
        return false;
    };
    text.lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|mask| mask & SIGUSR1_BIT != 0)
}

/// Whether `pid` runs Node: its executable is `node*`, or it maps libnode.
pub fn is_node(root: &ProcRoot, pid: u32) -> bool {
    let exe = std::fs::read_link(root.path(pid, "exe")).unwrap_or_default();
    let name = exe.file_name().and_then(|n| n.to_str()).unwrap_or("");
    // `node`, `nodejs`, `node20`: short names only (not `node_exporter`).
    (name.starts_with("node") && name.len() <= 8) || maps_libnode(root, pid)
}

fn maps_libnode(root: &ProcRoot, pid: u32) -> bool {
    std::fs::read_to_string(root.path(pid, "maps"))
        .is_ok_and(|m| m.lines().any(|l| l.contains("/libnode.so")))
}

/// The loopback TCP ports `pid` listens on (sockets it holds).
fn loopback_listeners(root: &ProcRoot, pid: u32) -> Vec<u16> {
    let held = root.sockets(pid);
    ["net/tcp", "net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(root.path(pid, f)).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let f: Vec<&str> = line.split_ascii_whitespace().collect();
                    let (addr, port) = f.get(1)?.rsplit_once(':')?;
                    let loopback = addr == "0100007F" || addr == "00000000000000000000000001000000";
                    let inode: u64 = f.get(9)?.parse().ok()?;
                    (f.get(3) == Some(&"0A") && loopback && held.contains(&inode))
                        .then(|| u16::from_str_radix(port, 16).ok())?
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// An inspector found for a process: where, and whether leakwatch opened it.
#[derive(Debug, Clone)]
pub struct Found {
    pub port: u16,
    pub ws_path: String,
    pub opened: bool,
}

/// Opens `pid`'s inspector (SIGUSR1) unless one of its loopback listeners
/// already is one, and finds its WebSocket.
pub fn open(root: &ProcRoot, pid: u32) -> Result<Found, String> {
    let before = loopback_listeners(root, pid);
    // An inspector it was started with: only then is a port it already
    // listens on asked (another is the program's own, not ours to probe).
    let cmdline = std::fs::read(root.path(pid, "cmdline")).unwrap_or_default();
    let started_inspecting = cmdline
        .split(|&b| b == 0)
        .any(|arg| arg.starts_with(b"--inspect"));
    for &port in before.iter().filter(|_| started_inspecting) {
        if let Ok(ws_path) = websocket_path(port) {
            return Ok(Found {
                port,
                ws_path,
                opened: false,
            });
        }
    }
    if !catches_sigusr1(root, pid) {
        return Err(
            "it does not catch SIGUSR1 (started with --disable-sigusr1, or not Node): its \
             inspector cannot be opened; start it with --inspect=127.0.0.1:0"
                .into(),
        );
    }
    let pid_t = libc::pid_t::try_from(pid).map_err(|_| "no such pid".to_string())?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid_t),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .map_err(|e| format!("cannot send it SIGUSR1 ({e})"))?;
    let deadline = Instant::now() + OPEN_TIMEOUT;
    loop {
        let new: Vec<u16> = loopback_listeners(root, pid)
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        if let Some(&port) = new.first() {
            let ws_path = websocket_path(port)?;
            return Ok(Found {
                port,
                ws_path,
                opened: true,
            });
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no inspector listened within {}s of SIGUSR1: the program handles SIGUSR1 \
                 itself, another process holds port 9229 (its stderr says), or an earlier \
                 session closed its inspector (Node does not open it again); start it with \
                 --inspect=127.0.0.1:0",
                OPEN_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The WebSocket path `/json/list` names on `port`, which must be on that
/// same loopback port.
fn websocket_path(port: u16) -> Result<String, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(2)))
        .build()
        .into();
    let body = agent
        .get(format!("http://127.0.0.1:{port}/json/list"))
        .call()
        .map_err(|e| format!("its /json/list did not answer ({e})"))?
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .map_err(|e| format!("its /json/list did not answer ({e})"))?;
    let list: Value =
        serde_json::from_str(&body).map_err(|_| "its /json/list is not JSON".to_string())?;
    let url = list
        .get(0)
        .and_then(|t| t.get("webSocketDebuggerUrl"))
        .and_then(Value::as_str)
        .ok_or("its /json/list names no WebSocket")?;
    let prefix = format!("ws://127.0.0.1:{port}/");
    let path = url
        .strip_prefix(&prefix)
        .or_else(|| url.strip_prefix(&format!("ws://localhost:{port}/")))
        .ok_or_else(|| format!("its WebSocket {url} is not on 127.0.0.1:{port}"))?;
    if path.len() > 200 || !path.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(format!(
            "its WebSocket path {path:?} is not an inspector id"
        ));
    }
    Ok(format!("/{path}"))
}

/// One DevTools session over a WebSocket (RFC 6455, client side).
#[derive(Debug)]
pub struct Session {
    stream: TcpStream,
    next_id: u64,
}

impl Session {
    pub fn connect(found: &Found) -> Result<Session, String> {
        let io = |e: std::io::Error| format!("the inspector's WebSocket: {e}");
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], found.port));
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(io)?;
        stream.set_read_timeout(Some(CALL_TIMEOUT)).map_err(io)?;
        stream.set_write_timeout(Some(CALL_TIMEOUT)).map_err(io)?;
        let key = base64(&fastrand::u128(..).to_le_bytes());
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nUpgrade: websocket\r\nConnection: \
             Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n",
            found.ws_path, found.port
        );
        stream.write_all(request.as_bytes()).map_err(io)?;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if head.len() > 8192 || stream.read(&mut byte).map_err(io)? == 0 {
                return Err("the inspector did not upgrade to a WebSocket".into());
            }
            head.push(byte[0]);
        }
        if !head.starts_with(b"HTTP/1.1 101") {
            let status =
                String::from_utf8_lossy(head.split(|&b| b == b'\r').next().unwrap_or_default())
                    .into_owned();
            return Err(format!("the inspector refused the WebSocket ({status})"));
        }
        Ok(Session { stream, next_id: 1 })
    }

    /// Calls `method` and returns its `result`, skipping events.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({ "id": id, "method": method, "params": params }).to_string();
        self.send(message.as_bytes())?;
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            if Instant::now() >= deadline {
                return Err(format!(
                    "{method}: no answer within {}s",
                    CALL_TIMEOUT.as_secs()
                ));
            }
            let text = self.receive()?;
            let reply: Value = serde_json::from_slice(&text)
                .map_err(|_| format!("{method}: the inspector sent a message that is not JSON"))?;
            if reply.get("id").and_then(Value::as_u64) != Some(id) {
                continue; // an event, or an answer to another call
            }
            if let Some(err) = reply.get("error") {
                return Err(format!(
                    "{method}: {}",
                    crate::escape::inert(&err.to_string())
                ));
            }
            return reply
                .get("result")
                .cloned()
                .ok_or_else(|| format!("{method}: an answer without a result"));
        }
    }

    /// One masked text frame.
    fn send(&mut self, payload: &[u8]) -> Result<(), String> {
        let mut frame = vec![0x81u8];
        let n = payload.len();
        if n < 126 {
            frame.push(0x80 | n as u8);
        } else if n <= usize::from(u16::MAX) {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
        let mask = fastrand::u32(..).to_be_bytes();
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream
            .write_all(&frame)
            .map_err(|e| format!("the inspector's WebSocket: {e}"))
    }

    /// One whole message (text, or binary), answering pings; bounded.
    fn receive(&mut self) -> Result<Vec<u8>, String> {
        let mut message = Vec::new();
        loop {
            let (fin, opcode, payload) = self.frame()?;
            match opcode {
                0x8 => return Err("the inspector closed the WebSocket".into()),
                0x9 => {
                    let mut pong = vec![0x8a, 0x80 | payload.len().min(125) as u8, 0, 0, 0, 0];
                    pong.extend_from_slice(&payload[..payload.len().min(125)]);
                    let _ = self.stream.write_all(&pong);
                    continue;
                }
                0xa => continue,
                0x0..=0x2 => {
                    message.extend_from_slice(&payload);
                    if message.len() > MAX_MESSAGE {
                        return Err("the inspector sent a message over 16 MiB".into());
                    }
                    if fin {
                        return Ok(message);
                    }
                }
                other => return Err(format!("the inspector sent frame opcode {other}")),
            }
        }
    }

    fn frame(&mut self) -> Result<(bool, u8, Vec<u8>), String> {
        let io = |e: std::io::Error| format!("the inspector's WebSocket: {e}");
        let mut head = [0u8; 2];
        self.stream.read_exact(&mut head).map_err(io)?;
        let (fin, opcode) = (head[0] & 0x80 != 0, head[0] & 0x0f);
        let masked = head[1] & 0x80 != 0;
        let len = match head[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                self.stream.read_exact(&mut b).map_err(io)?;
                u64::from(u16::from_be_bytes(b))
            }
            127 => {
                let mut b = [0u8; 8];
                self.stream.read_exact(&mut b).map_err(io)?;
                u64::from_be_bytes(b)
            }
            n => u64::from(n),
        };
        if len > MAX_MESSAGE as u64 {
            return Err("the inspector sent a frame over 16 MiB".into());
        }
        let mut mask = [0u8; 4];
        if masked {
            self.stream.read_exact(&mut mask).map_err(io)?;
        }
        let mut payload = vec![0u8; len as usize];
        self.stream.read_exact(&mut payload).map_err(io)?;
        if masked {
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= mask[i % 4];
            }
        }
        Ok((fin, opcode, payload))
    }
}

/// Standard base64 (RFC 4648) of a handshake key.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One read through the inspector.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub used: u64,
    /// After a full collection, when one was asked.
    pub live: Option<u64>,
    /// How long that collection took, round trip.
    pub pause: Option<Duration>,
    /// `--js-sites`: the live sampled bytes by site, after that collection.
    pub sites: Vec<super::node::JsSite>,
}

/// Most sites kept from one profile (the preload's bound too).
const MAX_SITES: usize = 200;
/// Most frames of a site's stack kept.
const MAX_FRAMES: usize = 8;
/// Most stack nodes walked in one profile (a hostile or huge tree is cut).
const MAX_NODES: usize = 1_000_000;

/// Starts V8's sampling heap profiler (`--js-sites`): one sample per
/// `interval` bytes allocated on average.
pub fn start_sampling(session: &mut Session, interval: u64) -> Result<(), String> {
    session
        .call(
            "HeapProfiler.startSampling",
            json!({ "samplingInterval": interval }),
        )
        .map(|_| ())
}

/// `fn (file:line)` of a profile's call frame; `None` for a frame without a
/// script or of Node's own (`node:`): not the program's code.
fn own_frame(frame: &Value) -> (String, bool) {
    let url = frame.get("url").and_then(Value::as_str).unwrap_or("");
    let function = frame
        .get("functionName")
        .and_then(Value::as_str)
        .filter(|f| !f.is_empty())
        .unwrap_or("(anonymous)");
    let line = frame
        .get("lineNumber")
        .and_then(Value::as_i64)
        .unwrap_or(-1)
        + 1;
    let file = url.strip_prefix("file://").unwrap_or(url);
    let name: String = format!("{function} ({file}:{line})")
        .chars()
        .take(300)
        .collect();
    (name, !url.is_empty() && !url.starts_with("node:"))
}

/// A sampling profile's tree (`getSamplingProfile`'s `profile.head`) folded
/// into sites: each node's `selfSize` goes to the innermost frame of the
/// program's own code on its stack; largest first, at most `MAX_SITES`.
pub fn fold_profile(head: &Value) -> Vec<super::node::JsSite> {
    use std::collections::HashMap;
    let mut by_site: HashMap<String, super::node::JsSite> = HashMap::new();
    // (node, depth): the stack is rebuilt from the path kept alongside.
    let mut todo: Vec<(&Value, usize)> = vec![(head, 0)];
    let mut path: Vec<(String, bool)> = Vec::new();
    let mut walked = 0;
    while let Some((node, depth)) = todo.pop() {
        walked += 1;
        if walked > MAX_NODES {
            break;
        }
        path.truncate(depth);
        path.push(own_frame(node.get("callFrame").unwrap_or(&Value::Null)));
        let size = node.get("selfSize").and_then(Value::as_f64).unwrap_or(0.0);
        if size.is_finite() && size > 0.0 {
            let site = path
                .iter()
                .rev()
                .find(|f| f.1)
                .map_or_else(|| "(V8 and Node internals)".to_string(), |f| f.0.clone());
            let entry = by_site
                .entry(site.clone())
                .or_insert_with(|| super::node::JsSite {
                    site,
                    bytes: 0.0,
                    stack: path
                        .iter()
                        .rev()
                        .filter(|f| !f.0.ends_with(" (:0)"))
                        .take(MAX_FRAMES)
                        .map(|f| f.0.as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                });
            entry.bytes += size;
        }
        if let Some(children) = node.get("children").and_then(Value::as_array) {
            todo.extend(children.iter().map(|c| (c, depth + 1)));
        }
    }
    let mut sites: Vec<_> = by_site.into_values().collect();
    sites.sort_by(|a, b| b.bytes.total_cmp(&a.bytes));
    sites.truncate(MAX_SITES);
    sites
}

/// What the reader thread is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// The heap in use, after a full collection when `collect`; with
    /// `sites`, the sampling profile after that collection.
    Read { collect: bool, sites: bool },
    /// Close the inspector (when leakwatch opened it) and hang up.
    Close,
}

/// Closes the inspector 100 ms from now, once leakwatch has hung up:
/// `inspector.close()` blocks while a session is connected. `require` is
/// taken now (the console's API, which a timer no longer sees) and nothing
/// in the timer can throw into the program.
const CLOSE_LATER: &str = "((r) => { setTimeout(() => { try { r('inspector').close(); } \
     catch (e) {} }, 100); return 1; })(require)";

/// The heap's limit, through `Runtime.evaluate` (one call, at the start).
pub fn heap_limit(session: &mut Session) -> Option<u64> {
    let reply = session
        .call(
            "Runtime.evaluate",
            json!({
                "expression": "require('v8').getHeapStatistics().heap_size_limit",
                "includeCommandLineAPI": true,
                "returnByValue": true,
            }),
        )
        .ok()?;
    reply
        .pointer("/result/value")?
        .as_f64()
        .filter(|v| *v > 0.0)
        .map(|v| v as u64)
}

/// Serves one request on `session`.
pub fn serve(session: &mut Session, request: Request, opened: bool) -> Result<Reading, String> {
    match request {
        Request::Read { collect, sites } => {
            let pause = if collect {
                let t0 = Instant::now();
                session.call("HeapProfiler.collectGarbage", json!({}))?;
                Some(t0.elapsed())
            } else {
                None
            };
            let usage = session.call("Runtime.getHeapUsage", json!({}))?;
            let used = usage
                .get("usedSize")
                .and_then(Value::as_f64)
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or("Runtime.getHeapUsage: no usedSize")? as u64;
            let sites = if sites && collect {
                let reply = session.call("HeapProfiler.getSamplingProfile", json!({}))?;
                let head = reply
                    .pointer("/profile/head")
                    .ok_or("HeapProfiler.getSamplingProfile: no profile")?;
                fold_profile(head)
            } else {
                Vec::new()
            };
            Ok(Reading {
                used,
                live: collect.then_some(used),
                pause,
                sites,
            })
        }
        Request::Close => {
            let _ = session.call("HeapProfiler.stopSampling", json!({}));
            if opened {
                // Run from a timer: close() blocks until no session is left,
                // and this one hangs up right after.
                session.call(
                    "Runtime.evaluate",
                    json!({
                        "expression": CLOSE_LATER,
                        "includeCommandLineAPI": true,
                        "returnByValue": true,
                    }),
                )?;
            }
            let _ = session.stream.shutdown(std::net::Shutdown::Both);
            Ok(Reading {
                used: 0,
                live: None,
                pause: None,
                sites: Vec::new(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_is_folded_by_the_innermost_frame_of_the_programs_code() {
        let frame = |f: &str, url: &str, line: i64| json!({ "functionName": f, "url": url, "lineNumber": line });
        let head = json!({
            "callFrame": frame("(root)", "", -1), "selfSize": 0, "children": [
                { "callFrame": frame("serve", "file:///app/s.js", 9), "selfSize": 100,
                  "children": [
                    { "callFrame": frame("keep", "file:///app/s.js", 20), "selfSize": 4096,
                      "children": [
                        { "callFrame": frame("push", "", -1), "selfSize": 1000, "children": [] }
                      ] },
                    { "callFrame": frame("emit", "node:events", 470), "selfSize": 50,
                      "children": [] }
                  ] },
                { "callFrame": frame("tick", "node:internal/x", 1), "selfSize": 7,
                  "children": "not a list" }
            ]
        });
        let sites = fold_profile(&head);
        assert_eq!(sites[0].site, "keep (/app/s.js:21)");
        assert_eq!(
            sites[0].bytes, 5096.0,
            "the builtin's bytes go to its caller"
        );
        assert!(
            sites[0].stack.starts_with("keep (/app/s.js:21)\nserve"),
            "{}",
            sites[0].stack
        );
        assert_eq!(sites[1].site, "serve (/app/s.js:10)");
        assert_eq!(
            sites[1].bytes, 150.0,
            "Node's own frames go to the program's caller"
        );
        assert_eq!(sites[2].site, "(V8 and Node internals)");
        assert!(fold_profile(&json!("garbage")).is_empty());
    }

    #[test]
    fn handshake_keys_are_base64() {
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(&[0u8; 16]).len(), 24);
    }

    /// A process that does not catch SIGUSR1 (this test binary) is never
    /// sent it: the default action would end it.
    #[test]
    fn a_process_without_a_sigusr1_handler_is_not_signalled() {
        let root = ProcRoot::default();
        let me = std::process::id();
        assert!(!catches_sigusr1(&root, me));
        let err = open(&root, me).unwrap_err();
        assert!(err.contains("does not catch SIGUSR1"), "{err}");
    }
}
