//! Support for the end-to-end tests on real software (memcached, redis,
//! gunicorn, Celery, Prometheus; `fixtures/real/`). Not a test target of its
//! own (a file below `tests/support/`, which cargo does not build alone):
//! include it in a test file with
//!
//! ```ignore
//! #[path = "support/real.rs"]
//! mod real;
//! ```
//!
//! and start what a test needs with `let Some(mc) = real::memcached(64) else { return };`.
//!
//! Dependencies are installed by `bash .ci/deps` (Debian packages on PATH,
//! the Python venv at `$LEAKWATCH_VENV`, default `<repo>/target/leakwatch-venv`);
//! `bash .ci/test` runs it, then `cargo test` with `LEAKWATCH_VENV` set and the
//! venv's `bin/` first on PATH and `LEAKWATCH_DEPS=1`. Every test of these
//! files carries `#[cfg_attr(not(lw_deps), ignore = …)]`: plain `cargo test`
//! lists it as ignored; where it runs, a missing dependency FAILS it, saying
//! what is missing and how to install it (`missing`).
//!
//! Every server is started on a free loopback port, in its own temporary
//! directory and its own process group; dropping the `Server` sends TERM to
//! the group, then KILL after 5 s, so no worker outlives a test.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * 1024;

/// True when running in CI (`CI` set to anything but empty, `0` or `false`).
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// A dependency is missing: the test fails, saying how to install it. It runs only where its
/// dependencies are declared present (under CI, or `bash .ci/test`: build.rs's `lw_deps`) or
/// when asked for by name (`-- --ignored NAME`); elsewhere it is listed as ignored. A test
/// that did not run is never counted as passed. Returns `Option` so that a caller returning
/// `Option` can end with `return missing(…)`.
pub fn missing<T>(what: &str) -> Option<T> {
    panic!(
        "{what} is missing: run `bash .ci/deps` (installs memcached, redis-server, prometheus, \
         smem and the Python venv), or run the tests with `bash .ci/test`"
    )
}

/// leakwatch's practical threshold for a series at `level` bytes, in bytes per x unit:
/// `max(64 KiB, 0.1% of the level)` per run, or per hour when `per` is 3600 (x in seconds)
/// — `fit::MIN_SLOPE_BYTES` and the default `min_slope_fraction`.
pub fn practical_threshold(level: f64, per: f64) -> f64 {
    (64.0 * 1024.0_f64).max(0.001 * level) / per
}

/// Prints a line that the test harness does not capture (eprintln! output
/// of a passing test is swallowed; a skip must be visible).
pub fn skip_note(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The repository's root (where Cargo.toml is).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `fixtures/real/NAME`.
pub fn fixture(name: &str) -> PathBuf {
    repo().join("fixtures").join("real").join(name)
}

/// A program on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A program on PATH, or `missing`.
pub fn need(name: &str) -> Option<PathBuf> {
    which(name).or_else(|| missing(&format!("`{name}` (Debian package)")))
}

/// The tests' Python venv: `$LEAKWATCH_VENV`, else `<repo>/target/leakwatch-venv`.
pub fn venv_dir() -> PathBuf {
    std::env::var_os("LEAKWATCH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target").join("leakwatch-venv"))
}

/// A program of the venv (`python`, `gunicorn`, `celery`, `psrecord`), or `missing`.
pub fn venv_bin(name: &str) -> Option<PathBuf> {
    let p = venv_dir().join("bin").join(name);
    if p.is_file() {
        Some(p)
    } else {
        missing(&format!("{} (Python venv)", p.display()))
    }
}

/// The interpreter for the stdlib-only drivers: the venv's python if there
/// is one, else `python3` on PATH.
pub fn python() -> PathBuf {
    let p = venv_dir().join("bin").join("python");
    if p.is_file() {
        p
    } else {
        PathBuf::from("python3")
    }
}

/// A loopback TCP port that was free a moment ago, below the kernel's
/// ephemeral range (32768–60999 here): a port the kernel handed out could be
/// handed again as the local end of any test's outgoing connection before
/// the server that was given it binds (a gunicorn pool that "did not answer
/// on port" in one CI run). Each test process starts from its own pid.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..SPAN {
        let port = (LOW + start.wrapping_add(NEXT.fetch_add(97, Ordering::Relaxed)) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{}", LOW + SPAN)
}

/// Waits until 127.0.0.1:port accepts a connection.
pub fn wait_port(port: u16, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A plain HTTP/1.0 GET on loopback: (status, body).
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// A `/proc/PID/status` field in bytes (`RssAnon`, `VmRSS`, ...).
pub fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// The direct children of a process.
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(c.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
            }
        }
    }
    out
}

/// Runs a driver (`fixtures/real/NAME ARGS`) with `python()`; panics when it fails.
pub fn drive(name: &str, args: &[&str]) {
    let out = Command::new(python())
        .arg(fixture(name))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run a driver");
    assert!(
        out.status.success(),
        "{name} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server process in its own process group and temporary directory.
pub struct Server {
    pub name: &'static str,
    pub child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// The server process (memcached, redis-server, prometheus, the gunicorn
    /// or celery master): the PID to `--watch` or `attach`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Spawns `cmd` (its stdout and stderr to DIR/server.log), then waits up
    /// to `timeout` for `ready` to say yes; panics with the log otherwise.
    pub fn spawn(
        name: &'static str,
        mut cmd: Command,
        port: u16,
        dir: tempfile::TempDir,
        timeout: Duration,
        ready: impl Fn(&Server) -> bool,
    ) -> Server {
        let log = std::fs::File::create(dir.path().join("server.log")).expect("server.log");
        cmd.current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .process_group(0);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("start {name}: {e}"));
        let mut server = Server {
            name,
            child,
            port,
            dir,
        };
        let deadline = Instant::now() + timeout;
        loop {
            if ready(&server) {
                return server;
            }
            let exited = server.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                let log = std::fs::read_to_string(server.dir.path().join("server.log"))
                    .unwrap_or_default();
                panic!(
                    "{name} did not become ready ({}): {log}",
                    exited.map_or("timeout".to_string(), |s| s.to_string())
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let group = -(self.child.id() as i32);
        unsafe { libc::kill(group, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whatever is left of the group (workers of a master that died first).
        unsafe { libc::kill(group, libc::SIGKILL) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tempdir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("lw-{name}-"))
        .tempdir()
        .expect("temp dir")
}

fn memcached_ready(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut line = String::new();
    s.write_all(b"version\r\n").is_ok()
        && BufReader::new(s).read_line(&mut line).is_ok()
        && line.starts_with("VERSION")
}

fn redis_ready(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut line = String::new();
    s.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
        && BufReader::new(s).read_line(&mut line).is_ok()
        && line.starts_with("+PONG")
}

/// `memcached -l 127.0.0.1 -p PORT -U 0 -t 2 -c 256 -m MB [-u root]`.
pub fn memcached(megabytes: u32) -> Option<Server> {
    let bin = need("memcached")?;
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.args(["-l", "127.0.0.1", "-U", "0", "-t", "2", "-c", "256"])
        .args(["-p", &port.to_string(), "-m", &megabytes.to_string()]);
    if unsafe { libc::geteuid() } == 0 {
        cmd.args(["-u", "root"]); // memcached refuses root otherwise
    }
    let dir = tempdir("memcached");
    Some(Server::spawn(
        "memcached",
        cmd,
        port,
        dir,
        Duration::from_secs(15),
        |s| memcached_ready(s.port),
    ))
}

/// `redis-server --bind 127.0.0.1 --port PORT --save '' --appendonly no ...`.
pub fn redis() -> Option<Server> {
    let bin = need("redis-server")?;
    let port = free_port();
    let dir = tempdir("redis");
    let mut cmd = Command::new(bin);
    cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
        .args(["--daemonize", "no", "--dir"])
        .arg(dir.path());
    Some(Server::spawn(
        "redis",
        cmd,
        port,
        dir,
        Duration::from_secs(15),
        |s| redis_ready(s.port),
    ))
}

/// The gunicorn pool of `fixtures/real/gunicorn_leaky_app.py`: `workers`
/// sync workers, each recycled after `max_requests` requests (0: never),
/// keeping `keep` (e.g. "1MiB") per `GET /`.
pub fn gunicorn(keep: &str, workers: u32, max_requests: u32) -> Option<Server> {
    let bin = venv_bin("gunicorn")?;
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.args(["-w", &workers.to_string(), "-k", "sync"])
        .args(["--max-requests", &max_requests.to_string()])
        .args(["--max-requests-jitter", "0"])
        .args(["-b", &format!("127.0.0.1:{port}"), "--chdir"])
        .arg(fixture(""))
        .arg("gunicorn_leaky_app:app")
        .env("LW_KEEP_BYTES", keep);
    let dir = tempdir("gunicorn");
    // Readiness via GET /health: note gunicorn counts it toward --max-requests.
    Some(Server::spawn(
        "gunicorn",
        cmd,
        port,
        dir,
        Duration::from_secs(30),
        |s| {
            wait_port(s.port, Duration::from_millis(10))
                && children(s.pid()).len() >= workers as usize
        },
    ))
}

/// A Celery prefork worker of `fixtures/real/celery_leaky_app.py` on the
/// redis at `redis_port` (broker and result backend).
pub fn celery(redis_port: u16, concurrency: u32, max_tasks_per_child: u32) -> Option<Server> {
    let bin = venv_bin("celery")?;
    let broker = format!("redis://127.0.0.1:{redis_port}/0");
    let mut cmd = Command::new(bin);
    cmd.arg("--workdir")
        .arg(fixture(""))
        .args(["-A", "celery_leaky_app", "worker", "--pool", "prefork"])
        .args(["--concurrency", &concurrency.to_string()])
        .args([
            "--loglevel",
            "WARNING",
            "--without-mingle",
            "--without-gossip",
        ])
        .arg("--without-heartbeat")
        .env("LW_CELERY_BROKER", &broker);
    if max_tasks_per_child > 0 {
        cmd.args(["--max-tasks-per-child", &max_tasks_per_child.to_string()]);
    }
    let dir = tempdir("celery");
    Some(Server::spawn(
        "celery",
        cmd,
        redis_port,
        dir,
        Duration::from_secs(60),
        |s| {
            // Ready when all children are forked (tasks sent earlier wait in
            // the queue); a ping task would count toward --max-tasks-per-child.
            children(s.pid()).len() >= concurrency as usize
        },
    ))
}

/// `fixtures/real/metrics_server.py`: an OpenMetrics gauge growing at
/// `slope` bytes per second (`case="leak"`) beside a flat one (`case="steady"`).
pub fn metrics_server(slope: &str) -> Option<Server> {
    let port = free_port();
    let mut cmd = Command::new(python());
    cmd.arg(fixture("metrics_server.py"))
        .args(["--port", &port.to_string(), "--slope", slope]);
    let dir = tempdir("metrics");
    Some(Server::spawn(
        "metrics_server",
        cmd,
        port,
        dir,
        Duration::from_secs(15),
        |s| wait_port(s.port, Duration::from_millis(10)),
    ))
}

/// Prometheus scraping `targets` ("127.0.0.1:PORT") every `interval`
/// ("1s"), with `rules` files, from `fixtures/real/prometheus.yml.tmpl`.
/// Ready when `/-/ready` answers 200 (≈0.1–0.4 s here); the first scrape
/// happens ≈5 s later (Prometheus applies new targets on a 5 s tick).
pub fn prometheus(targets: &[String], interval: &str, rules: &[PathBuf]) -> Option<Server> {
    let bin = need("prometheus")?;
    let port = free_port();
    let dir = tempdir("prometheus");
    let list = |items: Vec<String>| {
        items
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let config = std::fs::read_to_string(fixture("prometheus.yml.tmpl"))
        .expect("prometheus.yml.tmpl")
        .replace("@INTERVAL@", interval)
        .replace("@TARGETS@", &list(targets.to_vec()))
        .replace(
            "@RULES@",
            &list(rules.iter().map(|r| r.display().to_string()).collect()),
        );
    let conf = dir.path().join("prometheus.yml");
    std::fs::write(&conf, config).expect("write prometheus.yml");
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--config.file={}", conf.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    Some(Server::spawn(
        "prometheus",
        cmd,
        port,
        dir,
        Duration::from_secs(30),
        |s| matches!(http_get(s.port, "/-/ready"), Ok((200, _))),
    ))
}

/// Whether the cgroup v1 memory controller is mounted and writable here
/// (root): where the kernel-memory fixtures can be measured.
pub fn cgroup_v1_memory() -> Option<PathBuf> {
    let root = Path::new("/sys/fs/cgroup/memory");
    // The directory shows mode 555 even where root may create cgroups in
    // it: try it.
    let probe = root.join(format!("leakwatch-probe-{}", std::process::id()));
    let ok = root.join("memory.stat").is_file()
        && std::fs::create_dir(&probe).is_ok()
        && std::fs::remove_dir(&probe).is_ok();
    if ok {
        Some(root.to_path_buf())
    } else {
        missing(&format!(
            "a writable cgroup v1 memory controller at {} (as root)",
            root.display()
        ))
    }
}

/// A fresh memory cgroup `/sys/fs/cgroup/memory/leakwatch-test-<pid>-<name>`,
/// removed when dropped (after its processes have exited).
pub struct Cgroup(pub PathBuf);

impl Cgroup {
    pub fn new(name: &str) -> Option<Cgroup> {
        let root = cgroup_v1_memory()?;
        let dir = root.join(format!("leakwatch-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        Some(Cgroup(dir))
    }

    /// A field of memory.stat, or a file such as `memory.kmem.usage_in_bytes`.
    pub fn read(&self, field: &str) -> u64 {
        if field.starts_with("memory.") {
            return std::fs::read_to_string(self.0.join(field))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
        }
        std::fs::read_to_string(self.0.join("memory.stat"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == field).then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0)
    }

    /// `fixtures/real/in_cgroup.sh DIR PROGRAM ARGS...`: the program runs in
    /// this cgroup from its first allocation on.
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg(fixture("in_cgroup.sh")).arg(&self.0).arg(program);
        cmd
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Reads a child's first stdout line (the fixtures print `... ready` once running).
pub fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    line
}

/// A runtime keeper's own accounting (fixtures/real/runtimes: the `truth`
/// request, which collects garbage first), bytes.
pub fn keeper_truth(port: u16) -> f64 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"truth\n").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line.trim()
        .parse()
        .unwrap_or_else(|_| panic!("truth: {line:?}"))
}

/// With `LEAKWATCH_TEST_KEEP_SAMPLES=DIR`, a copy of a session's files (its
/// samples.csv, summary.json, reports) in `DIR/<label>/<out's name>`, the
/// label lower case with anything but letters and digits as `-`: replayed
/// with `leakwatch report` after the temporary directory is gone, it is how
/// an estimate a real program got wrong is studied.
pub fn keep_samples(label: &str, out: &Path) {
    let Some(to) = std::env::var_os("LEAKWATCH_TEST_KEEP_SAMPLES") else {
        return;
    };
    let label: String = label
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let dst = Path::new(&to).join(label).join(out.file_name().unwrap());
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(out).unwrap().flatten() {
        if e.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
    }
}
