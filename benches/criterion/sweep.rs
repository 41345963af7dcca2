#![allow(clippy::expect_used, clippy::unwrap_used)]
//! The cheap sweep and the deep pass of a large tree against the kernel's
//! floor, measured in the same run.
//!
//! The tree: a Python master forking `LEAKWATCH_TEST_SWEEP_PROCESSES`
//! (default 1000) processes in all, sleepers that die with it. Benchmarks
//! (criterion):
//!
//! - `sweep/kernel floor`: the system calls the sweep makes and nothing
//!   else — one listing of /proc, then per process `openat(status)`, `read`
//!   to the end into a reused buffer, `close`, and `fstatat(fd)` — through
//!   directories opened beforehand, as the sweep holds them;
//! - `sweep/leakwatch`: `Tree::sweep`, rows and all;
//! - `sweep/previous tier floor`: the reads per process of a heavier cheap
//!   tier (stat, status, a listing of fd/, a listing of task/ and each
//!   thread's children file), bare, for comparison.
//!
//! Then, without criterion, the same sweep and floor alternated 40 times
//! (CPU time of this thread, so that other load on the machine weighs on
//! both alike), and the deep pass at the first sample (smaps for 32
//! processes, smaps_rollup for the rest) against its bare reads: the ratio
//! table the README quotes. `cargo bench --bench sweep`.

use std::fs::File;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use leakwatch::sample::Clock;
use leakwatch::sample::Tree;
use leakwatch::sample::procfs::ProcRoot;
use leakwatch::store::Scope;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{Mode, fstatat};
use nix::time::{ClockId, clock_gettime};

/// A Python master and its sleepers; dropped, all of them go.
struct PyTree {
    child: Child,
}

const FORKER: &str = r#"
import ctypes, os, signal, sys
libc = ctypes.CDLL(None)
libc.prctl(1, signal.SIGKILL)  # die with the bench
n = int(sys.argv[1])
for _ in range(n - 1):
    if os.fork() == 0:
        libc.prctl(1, signal.SIGKILL)
        while True:
            signal.pause()
print("ready", flush=True)
signal.signal(signal.SIGTERM, lambda *a: os.killpg(0, signal.SIGKILL))
while True:
    signal.pause()
"#;

impl PyTree {
    fn start(n: usize) -> PyTree {
        let mut child = Command::new("python3")
            .args(["-c", FORKER, &n.to_string()])
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("ready");
        PyTree { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for PyTree {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(-(self.child.id() as i32));
        let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

fn tree_size() -> usize {
    std::env::var("LEAKWATCH_TEST_SWEEP_PROCESSES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000)
}

/// The pids of the tree: the master and its children.
fn members(master: u32) -> Vec<u32> {
    let text = std::fs::read_to_string(format!("/proc/{master}/task/{master}/children"))
        .expect("children");
    std::iter::once(master)
        .chain(text.split_whitespace().map(|p| p.parse().expect("pid")))
        .collect()
}

fn open_dirs(pids: &[u32]) -> Vec<OwnedFd> {
    pids.iter()
        .map(|pid| {
            OwnedFd::from(
                File::open(format!("/proc/{pid}")).expect("open /proc/PID as a directory"),
            )
        })
        .collect()
}

/// `read` until end of file into a fixed buffer: the least a reader can do.
fn drain(mut file: File, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while let Ok(k) = file.read(buf) {
        if k == 0 {
            break;
        }
        n += k;
    }
    n
}

fn read_at(dir: &OwnedFd, name: &str, buf: &mut [u8]) -> usize {
    match openat(dir, name, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty()) {
        Ok(fd) => drain(File::from(fd), buf),
        Err(_) => 0,
    }
}

fn read_path(path: &str, buf: &mut [u8]) -> usize {
    File::open(path).map_or(0, |f| drain(f, buf))
}

/// The sweep's system calls, bare.
fn floor(proc_dir: &mut nix::dir::Dir, dirs: &[OwnedFd], buf: &mut [u8]) -> usize {
    let mut n = proc_dir.iter().count();
    for dir in dirs {
        n += read_at(dir, "status", buf);
        n += fstatat(dir, "fd", AtFlags::empty()).map_or(0, |s| s.st_size as usize);
    }
    n
}

/// What the previous cheap tier read per process, bare.
fn previous_floor(pids: &[u32], buf: &mut [u8]) -> usize {
    let mut n = 0;
    for pid in pids {
        n += read_path(&format!("/proc/{pid}/stat"), buf);
        n += read_path(&format!("/proc/{pid}/status"), buf);
        n += std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for task in tasks.flatten() {
                let path = task.path().join("children");
                n += read_path(&path.to_string_lossy(), buf);
            }
        }
    }
    n
}

/// This thread's CPU time (user + system), to the nanosecond: getrusage
/// counts in scheduler ticks (4 ms here).
fn cpu_now() -> Duration {
    let t = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).expect("clock_gettime");
    Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
}

fn cpu_of(f: impl FnOnce()) -> Duration {
    let t0 = cpu_now();
    f();
    cpu_now() - t0
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn bench(c: &mut Criterion) {
    let tree = PyTree::start(tree_size());
    let pids = members(tree.pid());
    let dirs = open_dirs(&pids);
    let root = ProcRoot::default();
    let mut proc_dir = nix::dir::Dir::open(
        "/proc",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .expect("/proc");
    let mut sweeper = Tree::new(root.clone(), tree.pid(), None).expect("tree");
    let mut clock = Clock::new();
    let mut buf = vec![0u8; 1 << 16];
    // Two sweeps first: the second is the first that finds processes by
    // listing /proc (the first primes it), as every later one does.
    for _ in 0..2 {
        sweeper.sweep(&clock.context(None), Scope::Target);
    }
    let found = sweeper.sweep(&clock.context(None), Scope::Target);
    assert_eq!(
        found.rows.len(),
        pids.len(),
        "the sweep sees the whole tree"
    );
    eprintln!(
        "tree of {} processes; new processes found by {}",
        pids.len(),
        if found.listed {
            "listing /proc"
        } else {
            "children files"
        }
    );

    let mut group = c.benchmark_group(format!("sweep of {} processes", pids.len()));
    group.bench_function("kernel floor", |b| {
        b.iter(|| black_box(floor(&mut proc_dir, &dirs, &mut buf)))
    });
    group.bench_function("leakwatch", |b| {
        b.iter(|| {
            black_box(
                sweeper
                    .sweep(&clock.context(None), Scope::Target)
                    .rows
                    .len(),
            )
        })
    });
    group.bench_function("previous tier floor", |b| {
        b.iter(|| black_box(previous_floor(&pids, &mut buf)))
    });
    group.finish();

    ratios(
        &mut sweeper,
        &mut proc_dir,
        &dirs,
        &pids,
        &mut clock,
        &mut buf,
    );
}

/// The sweep against its floor, alternated, in CPU time; then the first
/// deep pass against its bare reads.
fn ratios(
    sweeper: &mut Tree,
    proc_dir: &mut nix::dir::Dir,
    dirs: &[OwnedFd],
    pids: &[u32],
    clock: &mut Clock,
    buf: &mut [u8],
) {
    let (mut lw, mut fl, mut prev, mut lw_wall) = (vec![], vec![], vec![], vec![]);
    for _ in 0..40 {
        fl.push(cpu_of(|| {
            black_box(floor(proc_dir, dirs, buf));
        }));
        let wall = std::time::Instant::now();
        lw.push(cpu_of(|| {
            black_box(sweeper.sweep(&clock.context(None), Scope::Target));
        }));
        lw_wall.push(wall.elapsed());
        prev.push(cpu_of(|| {
            black_box(previous_floor(pids, buf));
        }));
    }
    let (lw, fl, prev, wall) = (median(lw), median(fl), median(prev), median(lw_wall));
    println!(
        "\n| {} processes, CPU time (median of 40, alternated) | ms | ratio |",
        pids.len()
    );
    println!("|---|---:|---:|");
    println!(
        "| kernel floor (listing + status + fstat(fd)) | {:.2} | 1.00× |",
        ms(fl)
    );
    println!(
        "| leakwatch cheap sweep | {:.2} (wall {:.2}) | {:.2}× |",
        ms(lw),
        ms(wall),
        ms(lw) / ms(fl)
    );
    println!(
        "| previous tier's reads, bare (stat, status, fd/, task/, children) | {:.2} | {:.2}× |",
        ms(prev),
        ms(prev) / ms(fl)
    );

    // The first deep pass: smaps for the 32 largest, smaps_rollup for the rest.
    let mapped: std::collections::BTreeSet<u32> = pids.iter().take(32).copied().collect();
    let ctx = clock.context(None);
    let mut rows = sweeper.sweep(&ctx, Scope::Target).rows;
    let mut pass = None;
    let deep = cpu_of(|| pass = Some(sweeper.deep(&mut rows, &mapped, &ctx, Scope::Target)));
    let pass = pass.expect("pass");
    let bare = cpu_of(|| {
        for (pid, dir) in pids.iter().zip(dirs) {
            let name = if mapped.contains(pid) {
                "smaps"
            } else {
                "smaps_rollup"
            };
            black_box(read_at(dir, name, buf));
        }
    });
    let both = cpu_of(|| {
        for dir in dirs {
            black_box(read_at(dir, "smaps_rollup", buf));
            black_box(read_at(dir, "smaps", buf));
        }
    });
    println!(
        "| deep pass, bare reads (smaps ×{}, smaps_rollup ×{}) | {:.1} | 1.00× |",
        mapped.len(),
        pids.len() - mapped.len(),
        ms(bare)
    );
    println!(
        "| leakwatch deep pass ({} walks, {} mapping rows, longest walk {:.2} ms) | {:.1} | {:.2}× |",
        pass.walks,
        pass.mapping_rows.len(),
        pass.longest.map_or(0.0, |w| ms(w.duration)),
        ms(deep),
        ms(deep) / ms(bare)
    );
    println!(
        "| previous first/last pass, bare (smaps_rollup + smaps of every process) | {:.1} | {:.2}× |",
        ms(both),
        ms(both) / ms(bare)
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4));
    targets = bench
}
criterion_main!(benches);
