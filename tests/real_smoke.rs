//! The real software the end-to-end tests use is installed and behaves as
//! `fixtures/real/README.md` says: each server starts on loopback, each
//! driver does its work, and /proc shows the known truth. Fast (seconds per
//! test); the leakwatch verdicts on the same cases live in their own
//! tests (real_verdicts, real_pysites, it/prometheus_e2e). Fails under
//! `CI=true` when a dependency is missing (`bash .ci/deps`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/real.rs"]
mod real;

use real::{KIB, MIB};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn anon(pid: u32) -> u64 {
    real::status_bytes(pid, "RssAnon").expect("RssAnon")
}

fn settle() {
    std::thread::sleep(Duration::from_millis(200));
}

/// memcached -m 8: 2 MiB of new 64 KiB keys per run grows RssAnon by about
/// 2 MiB x 16/15 (15 items per 1 MiB slab page) until the 8 MiB cap, then
/// (nearly) stays flat.
#[test]
#[cfg_attr(
    not(lw_deps),
    ignore = "needs .ci/deps (real servers and runtimes): bash .ci/test"
)]
fn real_memcached_fills_to_its_cap_then_holds() {
    let Some(mc) = real::memcached(8) else { return };
    let port = mc.port.to_string();
    let mut series = vec![anon(mc.pid())];
    for _ in 0..8 {
        real::drive(
            "memcached_fill.py",
            &["--port", &port, "--bytes", "2MiB", "--quiet"],
        );
        settle();
        series.push(anon(mc.pid()));
    }
    let first_fill = series[2] - series[1];
    assert!(
        (2 * MIB..=3 * MIB).contains(&first_fill),
        "run 2 grew {first_fill} B: {series:?}"
    );
    let total = series[8] - series[0];
    assert!(
        (8 * MIB..=10 * MIB).contains(&total),
        "an 8 MiB cap held {total} B: {series:?}"
    );
    // Past the cap: flat (0 B/run at -m 64; a few tens of KiB per run at -m 8).
    let late = series[8].saturating_sub(series[6]);
    assert!(late <= 256 * KIB, "growth past the cap: {series:?}");
}

/// redis: the same 64 keys x 64 KiB every run: the first run fills ~4 MiB,
/// later runs add little (jemalloc reuses the freed extents).
#[test]
#[cfg_attr(
    not(lw_deps),
    ignore = "needs .ci/deps (real servers and runtimes): bash .ci/test"
)]
fn real_redis_overwrites_in_place() {
    let Some(rd) = real::redis() else { return };
    let port = rd.port.to_string();
    let mut series = vec![anon(rd.pid())];
    for _ in 0..8 {
        real::drive("redis_overwrite.py", &["--port", &port, "--quiet"]);
        settle();
        series.push(anon(rd.pid()));
    }
    let fill = series[1] - series[0];
    assert!(
        (4 * MIB..=6 * MIB).contains(&fill),
        "first fill {fill} B: {series:?}"
    );
    let creep = series[8] - series[1];
    assert!(creep <= 2 * MIB, "runs 2..8 grew {creep} B: {series:?}");
}

/// gunicorn, 2 sync workers recycled after 5 requests, 1 MiB kept per
/// request: a worker that serves a request grows by 1 MiB + 4 KiB, and a
/// worker is replaced (new pid) after its 5th request.
#[test]
#[cfg_attr(
    not(lw_deps),
    ignore = "needs .ci/deps (real servers and runtimes): bash .ci/test"
)]
fn real_gunicorn_workers_keep_a_mebibyte_per_request_and_are_recycled() {
    let Some(gu) = real::gunicorn("1MiB", 2, 5) else {
        return;
    };
    let first_workers = real::children(gu.pid());
    let mut deltas = Vec::new();
    for _ in 0..12 {
        let before: Vec<(u32, Option<u64>)> = real::children(gu.pid())
            .into_iter()
            .map(|p| (p, real::status_bytes(p, "RssAnon")))
            .collect();
        let (code, body) = real::http_get(gu.port, "/").expect("GET /");
        assert_eq!(code, 200, "{body}");
        let pid: u32 = body
            .split_whitespace()
            .find_map(|w| w.strip_prefix("pid="))
            .and_then(|p| p.parse().ok())
            .expect("pid= in the body");
        std::thread::sleep(Duration::from_millis(100));
        if let (Some((_, Some(b))), Some(a)) = (
            before.iter().find(|(p, _)| *p == pid),
            real::status_bytes(pid, "RssAnon"),
        ) {
            deltas.push(a as i64 - *b as i64);
        }
    }
    let good = deltas
        .iter()
        .filter(|&&d| (MIB as i64..=(MIB + 64 * KIB) as i64).contains(&d))
        .count();
    assert!(
        good >= 5,
        "per-request growth of the serving worker: {deltas:?}"
    );
    let now = real::children(gu.pid());
    assert!(
        now.iter().any(|p| !first_workers.contains(p)),
        "12 requests with --max-requests 5 replaced no worker: {first_workers:?} -> {now:?}"
    );
}

/// Celery prefork on a local redis: celery_send.py sends tasks and gets
/// their results; a child grows by about 1 MiB per task.
#[test]
#[cfg_attr(
    not(lw_deps),
    ignore = "needs .ci/deps (real servers and runtimes): bash .ci/test"
)]
fn real_celery_tasks_run_end_to_end() {
    let Some(rd) = real::redis() else { return };
    let Some(cel) = real::celery(rd.port, 2, 0) else {
        return;
    };
    let Some(py) = real::venv_bin("python") else {
        return;
    };
    let broker = format!("redis://127.0.0.1:{}/0", rd.port);
    let before: u64 = real::children(cel.pid()).iter().map(|&p| anon(p)).sum();
    let out = Command::new(py)
        .arg(real::fixture("celery_send.py"))
        .args(["--broker", &broker, "--tasks", "6", "--bytes", "1MiB"])
        .args(["--timeout", "60"])
        .stdin(Stdio::null())
        .output()
        .expect("celery_send.py");
    assert!(
        out.status.success(),
        "celery_send: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        cel.log()
    );
    settle();
    let after: u64 = real::children(cel.pid()).iter().map(|&p| anon(p)).sum();
    let grew = after.saturating_sub(before);
    assert!(
        (6 * MIB..=8 * MIB).contains(&grew),
        "6 tasks x 1 MiB grew the children by {grew} B"
    );
}

/// Prometheus starts without systemd, scrapes an OpenMetrics target at
/// 200 ms, and answers query_range with the target's known slope; the
/// example alert rule passes promtool and fires for the leaking series only.
#[test]
#[cfg_attr(
    not(lw_deps),
    ignore = "needs .ci/deps (real servers and runtimes): bash .ci/test"
)]
fn real_prometheus_scrapes_queries_and_alerts() {
    let Some(promtool) = real::need("promtool") else {
        return;
    };
    let rules = real::fixture("rules.yml.example");
    let check = Command::new(promtool)
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .expect("promtool");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let Some(ms) = real::metrics_server("1MiB") else {
        return;
    };
    let target = format!("127.0.0.1:{}", ms.port);
    let Some(prom) = real::prometheus(&[target], "200ms", &[rules]) else {
        return;
    };
    // First scrape ≈5 s after ready; the rule needs 30 s of range for a
    // stable deriv and 5 s of `for`, but fires as soon as it holds.
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut firing = String::new();
    while Instant::now() < deadline {
        let (_, body) = real::http_get(prom.port, "/api/v1/alerts").expect("alerts");
        if body.contains("\"state\":\"firing\"") {
            firing = body;
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        firing.contains("\"case\":\"leak\"") && !firing.contains("\"case\":\"steady\""),
        "alerts: {firing}\n{}",
        prom.log()
    );
    let end = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let path = format!(
        "/api/v1/query_range?query=deriv(lw_fixture_bytes%5B10s%5D)&start={}&end={end}&step=1",
        end - 5
    );
    let (code, body) = real::http_get(prom.port, &path).expect("query_range");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let result = v["data"]["result"].as_array().expect("result");
    assert_eq!(result.len(), 2, "{body}");
    for series in result {
        let last = series["values"].as_array().unwrap().last().unwrap()[1]
            .as_str()
            .unwrap()
            .parse::<f64>()
            .unwrap();
        let truth = if series["metric"]["case"] == "leak" {
            MIB as f64
        } else {
            0.0
        };
        assert!(
            (last - truth).abs() <= 0.01 * MIB as f64,
            "deriv of {}: {last} B/s, truth {truth}",
            series["metric"]
        );
    }
}

/// smem and psrecord (the tools benches/harness/overhead.py compares leakwatch with) run.
#[test]
#[cfg_attr(
    not(lw_deps),
    ignore = "needs .ci/deps (real servers and runtimes): bash .ci/test"
)]
fn real_smem_and_psrecord_run() {
    let Some(smem) = real::need("smem") else {
        return;
    };
    let out = Command::new(smem)
        .args(["-P", "^nothing-matches-this$"])
        .output()
        .expect("smem");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let Some(psrecord) = real::venv_bin("psrecord") else {
        return;
    };
    let log = tempfile::NamedTempFile::new().unwrap();
    let me = std::process::id().to_string();
    let out = Command::new(psrecord)
        .args([&me, "--interval", "0.1", "--duration", "0.5", "--log"])
        .arg(log.path())
        .output()
        .expect("psrecord");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(log.path()).unwrap();
    assert!(text.lines().count() >= 3, "psrecord log: {text}");
}

/// In a cgroup v1 memory cgroup: socketpairs held open grow the cgroup's
/// kernel memory, tmpfs files its shmem, while the process' RssAnon stays flat.
#[test]
#[cfg_attr(
    not(lw_deps),
    ignore = "needs .ci/deps (real servers and runtimes): bash .ci/test"
)]
fn real_kernel_memory_and_shmem_leaks_show_in_the_cgroup_only() {
    let Some(cg) = real::Cgroup::new("kmem") else {
        return;
    };
    let mut child = cg
        .command(&real::python())
        .arg(real::fixture("kmem_leak.py"))
        .args(["--sockets-per-sec", "1000", "--duration", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("kmem_leak.py");
    let line = real::first_line(&mut child);
    assert!(line.contains("ready"), "{line}");
    let pid = child.id();
    let (k0, a0) = (cg.read("memory.kmem.usage_in_bytes"), anon(pid));
    std::thread::sleep(Duration::from_secs(2));
    let (k1, a1) = (cg.read("memory.kmem.usage_in_bytes"), anon(pid));
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = child.wait();
    // ~2,000 pairs x ~4.7 KiB.
    assert!(k1.saturating_sub(k0) >= 4 * MIB, "kmem grew {k0} -> {k1}");
    assert!(a1.abs_diff(a0) <= 256 * KIB, "RssAnon moved {a0} -> {a1}");
    drop(cg);

    let Some(cg) = real::Cgroup::new("tmpfs") else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("lw-tmpfs-")
        .tempdir_in("/dev/shm")
        .expect("a dir on /dev/shm");
    let mut child = cg
        .command(&real::python())
        .arg(real::fixture("tmpfs_leak.py"))
        .args(["--rate", "8MiB", "--duration", "20", "--dir"])
        .arg(dir.path().join("files"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("tmpfs_leak.py");
    let line = real::first_line(&mut child);
    assert!(line.contains("ready"), "{line}");
    let pid = child.id();
    let (s0, a0) = (cg.read("shmem"), anon(pid));
    std::thread::sleep(Duration::from_secs(2));
    let (s1, a1) = (cg.read("shmem"), anon(pid));
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert!(
        (12 * MIB..=20 * MIB).contains(&s1.saturating_sub(s0)),
        "shmem {s0} -> {s1} in 2 s at 8 MiB/s"
    );
    assert!(a1.abs_diff(a0) <= 256 * KIB, "RssAnon moved {a0} -> {a1}");
}
