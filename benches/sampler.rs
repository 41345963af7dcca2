#![allow(clippy::expect_used)]
//! Sampler cost against the kernel's own read cost, measured in the same run.
//!
//! For each /proc file: `kernel` is a bare `read` of the file into a reused
//! buffer (the part no parser can avoid); `leakwatch` is what the sampler
//! does (open, read, parse into bytes). The ratio leakwatch / kernel is the
//! overhead our code adds. The target is a child holding 256 MiB resident, so
//! the smaps_rollup page-table walk has real work to do.

use std::fs::File;
use std::hint::black_box;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use leakwatch::sample::proc::ProcRoot;
use leakwatch::sample::read_process;

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

fn kernel_read(path: &str, buf: &mut Vec<u8>) -> usize {
    buf.clear();
    let mut f = File::open(path).expect("open");
    f.read_to_end(buf).expect("read")
}

fn bench(c: &mut Criterion) {
    let mut child = target();
    let pid = child.id();
    let root = ProcRoot::default();
    let mut buf = Vec::with_capacity(1 << 16);

    for file in ["status", "stat", "smaps_rollup"] {
        let path = format!("/proc/{pid}/{file}");
        let mut group = c.benchmark_group(file);
        group.bench_function("kernel", |b| {
            b.iter(|| black_box(kernel_read(&path, &mut buf)))
        });
        group.bench_function("leakwatch", |b| match file {
            "status" => b.iter(|| black_box(root.status(pid).expect("status"))),
            "stat" => b.iter(|| black_box(root.stat(pid).expect("stat"))),
            _ => b.iter(|| black_box(root.smaps_rollup(pid).expect("rollup"))),
        });
        group.finish();
    }

    let mut group = c.benchmark_group("process");
    group.bench_function("cheap tier (stat+status+fd count)", |b| {
        b.iter(|| black_box(read_process(&root, pid, false).expect("cheap")))
    });
    group.bench_function("deep tier (+smaps_rollup)", |b| {
        b.iter(|| black_box(read_process(&root, pid, true).expect("deep")))
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
