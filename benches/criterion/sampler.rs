#![allow(clippy::expect_used)]
//! Sampler cost against the kernel's own read cost, measured in the same run.
//!
//! For each /proc file: `kernel` is a bare `read` of the file into a reused
//! buffer (the part no parser can avoid); `leakwatch` is what the sampler
//! does (open, read, parse into bytes). The ratio leakwatch / kernel is the
//! overhead our code adds. The target is a child holding 256 MiB resident, so
//! the smaps_rollup and smaps page-table walks have real work to do (smaps:
//! the walk, a few µs per mapping, and our one-pass parse of both the
//! mappings and the rollup's sums).

use std::fs::File;
use std::hint::black_box;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use leakwatch::sample::procfs::{Depth, ProcRoot, read_process};

fn target() -> Child {
    // 256 MiB written (so resident), then held.
    let child = Command::new("python3")
        .args([
            "-c",
            "import time; x = b'\\x01' * (256 << 20); time.sleep(3600)",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("start the fixture");
    // Let it touch its pages.
    std::thread::sleep(Duration::from_millis(500));
    child
}

/// Open, `read` to the end into a fixed buffer, close: the least a reader
/// can do (`read_to_end` would add a statx and an lseek).
fn kernel_read(path: &str, buf: &mut [u8]) -> usize {
    let mut f = File::open(path).expect("open");
    let mut n = 0;
    loop {
        match f.read(buf).expect("read") {
            0 => return n,
            k => n += k,
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut child = target();
    let pid = child.id();
    let root = ProcRoot::default();
    let mut buf = vec![0u8; 1 << 16];

    for file in ["status", "stat", "smaps_rollup", "smaps"] {
        let path = format!("/proc/{pid}/{file}");
        let mut group = c.benchmark_group(file);
        group.bench_function("kernel", |b| {
            b.iter(|| black_box(kernel_read(&path, &mut buf)))
        });
        group.bench_function("leakwatch", |b| match file {
            "status" => b.iter(|| black_box(root.status(pid).expect("status"))),
            "stat" => b.iter(|| black_box(root.stat(pid).expect("stat"))),
            "smaps" => b.iter(|| black_box(root.smaps(pid).expect("smaps"))),
            _ => b.iter(|| black_box(root.smaps_rollup(pid).expect("rollup"))),
        });
        group.finish();
    }

    // The smaps parser alone, on the target's smaps captured once.
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).expect("smaps");
    let mut group = c.benchmark_group("smaps");
    group.bench_function(
        format!("parse only ({} KiB in memory)", text.len() / 1024),
        |b| b.iter(|| black_box(leakwatch::sample::procfs::SmapsParser::parse(&text))),
    );
    group.finish();

    let mut group = c.benchmark_group("process");
    let dir = root.open_dir(pid).expect("dir");
    let mut status = leakwatch::sample::procfs::Status::default();
    group.bench_function("attach's cheap tier (status+fd count, held dir)", |b| {
        b.iter(|| {
            dir.status(&mut buf, &mut status).expect("status");
            black_box(dir.fd_count())
        })
    });
    group.bench_function("run's cheap tier (stat+status+fd count)", |b| {
        b.iter(|| black_box(read_process(&root, pid, Depth::Cheap).expect("cheap")))
    });
    group.bench_function("deep tier (+smaps_rollup)", |b| {
        b.iter(|| black_box(read_process(&root, pid, Depth::Rollup).expect("deep")))
    });
    group.bench_function("tree walk (task children)", |b| {
        b.iter(|| black_box(root.tree(pid)))
    });
    group.finish();

    let _ = child.kill();
    let _ = child.wait();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
