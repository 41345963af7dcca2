//! End to end: targets beyond a PID. `attach --cgroup` on a v1 memory
//! cgroup made by the test (the same growth as `attach PID`; a tmpfs or a
//! socket leak found in the cgroup's shmem or kernel series while RSS stays
//! flat), `attach --name` with zero, one and several matches, `--unit`
//! without systemd.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::*;

/// A memory cgroup (v1) under /sys/fs/cgroup/memory, removed on drop after
/// its processes are killed. `None` (skip) where it cannot be made; a
/// failure when CI=true, since CI runs as root on this kind of machine.
struct TestCgroup {
    dir: PathBuf,
}

impl TestCgroup {
    fn new(name: &str) -> Option<TestCgroup> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = PathBuf::from(format!(
            "/sys/fs/cgroup/memory/leakwatch-test-{name}-{}-{n}",
            std::process::id()
        ));
        match std::fs::create_dir(&dir) {
            Ok(()) => Some(TestCgroup { dir }),
            Err(e) => crate::common::missing(
                &format!("a v1 memory cgroup {} ({e})", dir.display()),
                "it needs root and cgroup v1's memory controller",
            ),
        }
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in text
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                // SAFETY: kill(2) on processes this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

fn attach(args: &[&str], out: &Path) -> std::process::Output {
    leakwatch()
        .arg("attach")
        .args(args)
        .args(["--interval", "200ms", "--quiet", "--out"])
        .arg(out)
        .output()
        .unwrap()
}

fn slope(s: &serde_json::Value, name: &str, metric: &str) -> f64 {
    series(s, name, metric)["line"]["slope"].as_f64().unwrap()
}

#[test]
#[cfg_attr(not(lw_deps), ignore = "needs root: bash .ci/test as root")]
fn attach_cgroup_measures_the_same_growth_as_attach_pid() {
    let Some(cg) = TestCgroup::new("grow") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let grower = start_private(&["grow", "--rate", "4MiB"]);
    cg.add(grower.pid());
    // Both at once, on the same process: the same truth for both.
    let by_pid = {
        let out = tmp.path().join("pid");
        let pid = grower.pid().to_string();
        let o = out.clone();
        std::thread::spawn(move || (attach(&[&pid, "--duration", "4s"], &o), out))
    };
    let out = tmp.path().join("cgroup");
    let cgroup = attach(
        &["--cgroup", cg.dir.to_str().unwrap(), "--duration", "4s"],
        &out,
    );
    let (pid_output, pid_out) = by_pid.join().unwrap();
    assert_exit_matches_verdict(cgroup.status, &out);
    assert_exit_matches_verdict(pid_output.status, &pid_out);
    let (c, p) = (summary(&out), summary(&pid_out));
    assert_eq!(c["target"], format!("cgroup {}", cg.dir.display()));
    assert!(c.get("target_pid").is_none());
    let (via_cgroup, via_pid) = (
        slope(&c, "target", "anon_bytes"),
        slope(&p, "target", "anon_bytes"),
    );
    eprintln!("anon slope: --cgroup {via_cgroup:.0} B/s, PID {via_pid:.0} B/s");
    assert_within("--cgroup vs PID", via_cgroup, via_pid, 0.05);
    assert_within("--cgroup vs truth", via_cgroup, 4.0 * MIB, 0.10);
    // The cgroup's own accounting sees the same anonymous memory.
    let own = slope(&c, "cgroup", "anon_bytes");
    eprintln!("cgroup memory.stat anon slope {own:.0} B/s");
    assert_within("cgroup's own anon", own, via_pid, 0.05);
    assert_eq!(series(&c, "cgroup", "usage_bytes")["verdict"], "leak");
}

#[test]
#[cfg_attr(not(lw_deps), ignore = "needs root: bash .ci/test as root")]
fn a_tmpfs_leak_is_found_in_the_cgroups_shmem_while_rss_stays_flat() {
    let Some(cg) = TestCgroup::new("tmpfs") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let leaker = start_private(&[
        "tmpfs",
        "--rate",
        "2MiB",
        "--dir",
        shm.path().to_str().unwrap(),
    ]);
    cg.add(leaker.pid());
    let out = tmp.path().join("out");
    let o = attach(
        &["--cgroup", cg.dir.to_str().unwrap(), "--duration", "5s"],
        &out,
    );
    assert_exit_matches_verdict(o.status, &out);
    let s = summary(&out);
    let shmem = series(&s, "cgroup", "shmem_bytes");
    eprintln!(
        "cgroup shmem: {} {}",
        shmem["verdict"], shmem["line"]["slope"]
    );
    assert_eq!(shmem["verdict"], "leak", "{shmem}");
    assert_within(
        "shmem slope",
        shmem["line"]["slope"].as_f64().unwrap(),
        2.0 * MIB,
        0.10,
    );
    let rss = series(&s, "target", "rss_bytes");
    eprintln!("process RSS: {} {}", rss["verdict"], rss["line"]["slope"]);
    assert_ne!(rss["verdict"], "leak", "{rss}");
    assert!(
        rss["line"]["slope"].as_f64().unwrap().abs() < 0.01 * 2.0 * MIB,
        "{rss}"
    );
    assert_eq!(s["verdict"], "leak");
}

#[test]
#[cfg_attr(not(lw_deps), ignore = "needs root: bash .ci/test as root")]
fn a_socket_leak_is_found_in_the_cgroups_kernel_memory_while_rss_stays_flat() {
    let Some(cg) = TestCgroup::new("sockets") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let leaker = start_private(&["sockets", "--rate", "4MiB"]);
    cg.add(leaker.pid());
    let out = tmp.path().join("out");
    let o = attach(
        &["--cgroup", cg.dir.to_str().unwrap(), "--duration", "5s"],
        &out,
    );
    assert_exit_matches_verdict(o.status, &out);
    let s = summary(&out);
    let kernel = series(&s, "cgroup", "kernel_bytes");
    eprintln!(
        "cgroup kernel: {} {}",
        kernel["verdict"], kernel["line"]["slope"]
    );
    assert_eq!(kernel["verdict"], "leak", "{kernel}");
    let rss = series(&s, "target", "rss_bytes");
    eprintln!("process RSS: {} {}", rss["verdict"], rss["line"]["slope"]);
    assert_ne!(rss["verdict"], "leak", "{rss}");
    assert!(
        rss["line"]["slope"].as_f64().unwrap().abs()
            < 0.05 * kernel["line"]["slope"].as_f64().unwrap(),
        "{rss}"
    );
}

/// A copy of the fixture binary for these tests (another inode): the
/// pages of its text are then shared with no process of other tests,
/// whose PSS would move as these start and stop.
pub fn private_fixture() -> &'static Path {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        // In cargo's temp dir for tests, replaced by a rename (a copy from an
        // earlier run may still be running).
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let path = dir.join("leakwatch-fixture-private");
        let tmp = dir.join(format!("leakwatch-fixture-private.{}", std::process::id()));
        std::fs::copy(fixture(), &tmp).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        path
    })
}

/// Spawns `cmd`, again while exec says ETXTBSY: the private copy's write
/// descriptor lives on, until their exec, in children other test threads
/// forked while it was being written (seen on CI).
fn spawn_busy_safe(cmd: &mut Command) -> std::process::Child {
    for _ in 0..100 {
        match cmd.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other.unwrap(),
        }
    }
    cmd.spawn().unwrap()
}

/// A private fixture process, killed when dropped.
pub fn start_private(args: &[&str]) -> Fixture {
    let child = spawn_busy_safe(
        Command::new(private_fixture())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null()),
    );
    Fixture { child }
}

/// The fixture under a name of its own (a link: the process' comm is the
/// link's name), so parallel tests cannot match it.
fn named_fixture(dir: &Path, name: &str) -> PathBuf {
    let link = dir.join(name);
    std::os::unix::fs::symlink(private_fixture(), &link).unwrap();
    link
}

fn start(program: &Path) -> Fixture {
    let child = spawn_busy_safe(
        Command::new(program)
            .args(["steady", "--size", "4MiB"])
            .stdin(Stdio::null())
            .stdout(Stdio::null()),
    );
    Fixture { child }
}

#[test]
fn attach_name_with_zero_one_and_several_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let tag = format!("lwn{}", std::process::id() % 100_000);
    let one = start(&named_fixture(tmp.path(), &format!("{tag}one")));
    let a = start(&named_fixture(tmp.path(), &format!("{tag}many")));
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let b = start(&named_fixture(&other, &format!("{tag}many")));
    std::thread::sleep(std::time::Duration::from_millis(200));

    // Zero: a clear error, exit 2, nothing written.
    let out = tmp.path().join("none");
    let o = attach(
        &["--name", &format!("^{tag}nothing$"), "--duration", "1s"],
        &out,
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("matches no process") && err.contains("pgrep"),
        "{err}"
    );
    assert!(!out.exists());

    // One: attached to it, as by PID.
    let out = tmp.path().join("one");
    let o = attach(
        &["--name", &format!("^{tag}one$"), "--duration", "1s"],
        &out,
    );
    assert!(o.status.success(), "{o:?}");
    assert_eq!(summary(&out)["target_pid"], one.pid());

    // Several: an error listing them, unless --all.
    let out = tmp.path().join("several");
    let o = attach(
        &["--name", &format!("^{tag}many$"), "--duration", "1s"],
        &out,
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("matches 2 processes") && err.contains("--all"),
        "{err}"
    );
    assert!(
        err.contains(&a.pid().to_string()) && err.contains(&b.pid().to_string()),
        "{err}"
    );
    let out = tmp.path().join("all");
    let o = attach(
        &[
            "--name",
            &format!("^{tag}many$"),
            "--all",
            "--duration",
            "1s",
        ],
        &out,
    );
    assert!(o.status.success(), "{o:?}");
    let pids = pids_in_scope(&out, "target");
    assert_eq!(pids, {
        let mut p = vec![a.pid(), b.pid()];
        p.sort();
        p
    });
    assert!(
        summary(&out)["target"]
            .as_str()
            .unwrap()
            .contains("matching")
    );
}

#[test]
fn attach_unit_without_systemd_says_what_to_do_instead() {
    if Path::new("/run/systemd/system").is_dir() {
        eprintln!("skipped: systemd runs here");
        return;
    }
    let o = leakwatch()
        .args(["attach", "--unit", "nginx", "--duration", "1s"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--unit nginx.service: systemd is not running") && err.contains("--cgroup"),
        "{err}"
    );
}

#[test]
fn bad_targets_and_public_addresses_are_usage_errors_naming_the_fix() {
    let cases: [(&[&str], &str); 4] = [
        (&["--cgroup", "/no/such/cgroup"], "no such cgroup"),
        (&["--name", "(unclosed"], "is not a regular expression"),
        (&["1", "--serve", "0.0.0.0:9464"], "--serve-public"),
        (&["1", "--serve", "nowhere"], "is not an address"),
    ];
    for (args, expected) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let o = attach(args, &out);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}
