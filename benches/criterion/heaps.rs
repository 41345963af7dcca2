#![allow(clippy::expect_used, clippy::unwrap_used)]
//! What reading a JVM's heap costs per sample, beside what the cheap tier
//! already pays for the same process, measured in the same run:
//!
//! - `status`: leakwatch's read of `/proc/PID/status` (the cheap tier);
//! - `hsperfdata pread`: the kernel's part, one `pread` of the whole file;
//! - `hsperfdata`: leakwatch's per-sample read of the JVM's heap
//!   (`Heaps::read` for one process row: the `pread`, the parse of the
//!   counters it needs, the live-heap bookkeeping and the heap row).
//!
//! The target is a real JVM (fixtures/real/runtimes/Keeper.java, G1) idle on
//! a loopback port. Ratios hsperfdata / status and hsperfdata / pread go
//! in docs/performance.md.

use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use leakwatch::sample::Clock;
use leakwatch::sample::heap::Heaps;
use leakwatch::sample::procfs::ProcRoot;
use leakwatch::store::{Row, Scope, Tier};

fn jvm() -> Child {
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/real/runtimes/Keeper.java"
    );
    let child = Command::new("java")
        .args(["-XX:+UseG1GC", "-Xmx64m", src, "29917", "drop"])
        .stdout(Stdio::null())
        .spawn()
        .expect("start a JVM (java on PATH: bash .ci/deps)");
    // Source launch compiles first: wait for its hsperfdata file.
    let file = format!("/tmp/hsperfdata_{}/{}", whoami(), child.id());
    for _ in 0..200 {
        if std::path::Path::new(&file).exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    child
}

fn whoami() -> String {
    String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string()
}

fn bench(c: &mut Criterion) {
    let mut child = jvm();
    let pid = child.id();
    let root = ProcRoot::default();
    let stat = root.stat(pid).expect("stat");
    let row = Row {
        pid,
        start_time: stat.start_time,
        comm: stat.comm.clone(),
        tier: Tier::Cheap,
        rss_bytes: Some(1),
        ..Row::new(Scope::Target)
    };
    let mut clock = Clock::new();
    let ctx = clock.context(None);
    let mut heaps = Heaps::new(root.clone());
    let first = heaps.read(&ctx, std::slice::from_ref(&row));
    assert_eq!(
        first.rows.len(),
        1,
        "the JVM's heap is read: {:?}",
        first.notes
    );
    let file = std::fs::File::open(format!("/tmp/hsperfdata_{}/{pid}", whoami())).unwrap();
    let mut buf = vec![0u8; file.metadata().unwrap().len() as usize];

    let mut group = c.benchmark_group("per sample");
    group.bench_function("status", |b| {
        b.iter(|| black_box(root.status(pid).unwrap()))
    });
    group.bench_function("hsperfdata pread", |b| {
        b.iter(|| black_box(file.read_at(&mut buf, 0).unwrap()))
    });
    group.bench_function("hsperfdata", |b| {
        b.iter(|| black_box(heaps.read(&ctx, std::slice::from_ref(&row))))
    });
    group.finish();
    let _ = child.kill();
    let _ = child.wait();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
