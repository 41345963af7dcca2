//! A runtime's heap sources given hostile or wrong input: a spoiled
//! hsperfdata file, one replaced by a link, a `--metrics` port another
//! process serves, an endpoint answering HTML or without the `--metric`
//! asked for, a Node that will not open its inspector. Each is one note naming the process and the fix; sampling of
//! /proc goes on, the session exits as usual, no heap series is made up.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::common::{leakwatch, summary};

/// A Python process (this machine's python3) running `script`, its first
/// line of output read (`ready`, or what the script prints first).
fn python(script: &str, args: &[&str]) -> (Child, String) {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line.trim().to_string())
}

fn attach(pid: u32, out: &Path, extra: &[&str]) -> (Option<i32>, Value) {
    let status = leakwatch()
        .args([
            "attach",
            &pid.to_string(),
            "--duration",
            "3s",
            "--interval",
            "250ms",
        ])
        .args(["--quiet", "--out"])
        .arg(out)
        .args(extra)
        .status()
        .unwrap();
    (status.code(), summary(out))
}

fn notes(s: &Value) -> String {
    s["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn has_series(s: &Value, metric: &str) -> bool {
    s["series"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["metric"] == metric)
}

/// Maps a file it names as a JVM names its hsperfdata file
/// (`/tmp/hsperfdata_<user>/<pid>`), holding `content`; with `link`, the
/// file is then replaced by a link to another file (a planted link).
const MAPS_PERFDATA: &str = r#"
import mmap, os, sys, time
d = f"/tmp/hsperfdata_lwtest{os.getpid()}"
os.makedirs(d, exist_ok=True)
path = f"{d}/{os.getpid()}"
with open(path, "wb") as f:
    f.write(bytes.fromhex(sys.argv[1]) + b"\0" * 32768)
f = open(path, "r+b")
m = mmap.mmap(f.fileno(), 32768)
if sys.argv[2] == "link":
    # The mapping stays (its path now "… (deleted)"); a link takes its name.
    os.unlink(path)
    with open(f"{d}/secret", "wb") as s:
        s.write(b"secret")
    os.symlink(f"{d}/secret", path)
print("ready", flush=True)
try:
    time.sleep(60)
finally:
    for name in os.listdir(d):
        os.unlink(f"{d}/{name}")
    os.rmdir(d)
"#;

#[test]
fn a_spoiled_hsperfdata_file_is_a_note_and_sampling_goes_on() {
    let t = tempfile::tempdir().unwrap();
    // The magic number of hsperfdata, then a prologue that lies: its first
    // entry far outside the file.
    let spoiled = "cafec0c0010200010000ffff00000000000000000000000000ffffff00000100";
    let (mut child, ready) = python(MAPS_PERFDATA, &[spoiled, "plain"]);
    assert_eq!(ready, "ready");
    let (code, s) = attach(child.id(), &t.path().join("spoiled"), &[]);
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(code, Some(0), "{s:#}");
    let notes = notes(&s);
    assert!(
        notes.contains("could not be read (spoiled hsperfdata file"),
        "{notes}"
    );
    assert!(has_series(&s, "anon_bytes"), "/proc is still sampled");
    assert!(!has_series(&s, "heap_used_bytes"), "no heap made up: {s:#}");
    assert!(!has_series(&s, "heap_live_bytes"), "no heap made up: {s:#}");
}

#[test]
fn a_hsperfdata_file_replaced_by_a_link_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let (mut child, ready) = python(MAPS_PERFDATA, &["cafec0c0", "link"]);
    assert_eq!(ready, "ready");
    let (code, s) = attach(child.id(), &t.path().join("link"), &[]);
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(code, Some(0), "{s:#}");
    let notes = notes(&s);
    assert!(notes.contains("was refused"), "{notes}");
    assert!(!has_series(&s, "heap_live_bytes"), "{s:#}");
}

/// Serves `body` over HTTP on a free port; prints the port.
const SERVES: &str = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = sys.argv[1].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

#[test]
fn a_metrics_port_another_process_serves_is_not_read_as_the_targets_heap() {
    let t = tempfile::tempdir().unwrap();
    let (mut other, port) = python(SERVES, &["go_memstats_heap_alloc_bytes 123\n"]);
    let (mut target, _) = python(
        "import time; print('ready', flush=True); time.sleep(60)",
        &[],
    );
    let url = format!("http://127.0.0.1:{port}/metrics");
    let (code, s) = attach(target.id(), &t.path().join("foreign"), &["--metrics", &url]);
    for c in [&mut other, &mut target] {
        c.kill().unwrap();
        let _ = c.wait();
    }
    assert_eq!(code, Some(0), "{s:#}");
    let notes = notes(&s);
    assert!(
        notes.contains(&format!(
            "no process leakwatch follows listens on port {port}"
        )),
        "{notes}"
    );
    assert!(!has_series(&s, "heap_used_bytes"), "{s:#}");
}

#[test]
fn a_metrics_endpoint_answering_html_or_garbage_is_a_note() {
    for (body, says) in [
        (
            "<!DOCTYPE html><html><body>login</body></html>",
            "it answered HTML",
        ),
        (
            "\u{1}\u{2}garbage",
            "neither Prometheus text nor expvar JSON",
        ),
    ] {
        let t = tempfile::tempdir().unwrap();
        let (mut srv, port) = python(SERVES, &[body]);
        let url = format!("http://127.0.0.1:{port}/metrics");
        let (code, s) = attach(srv.id(), &t.path().join("html"), &["--metrics", &url]);
        srv.kill().unwrap();
        let _ = srv.wait();
        assert_eq!(code, Some(0), "{s:#}");
        let notes = notes(&s);
        assert!(notes.contains(says), "{body:?}: {notes}");
        assert_eq!(notes.matches(says).count(), 1, "said once: {notes}");
        assert!(has_series(&s, "anon_bytes"), "/proc is still sampled");
    }
}

/// `--metric NAME` on an endpoint with no heap gauge: the gauge is a series
/// of its own (its label sets summed), the missing heap one note; a name the
/// endpoint does not answer is one note and no series.
#[test]
fn a_metric_gauge_is_followed_without_a_heap_and_a_missing_one_is_a_note() {
    let body = "# TYPE queue_length gauge\nqueue_length{q=\"a\"} 3\nqueue_length{q=\"b\"} 4\n";
    for (name, series) in [("queue_length", true), ("queue_depth", false)] {
        let t = tempfile::tempdir().unwrap();
        let (mut srv, port) = python(SERVES, &[body]);
        let url = format!("http://127.0.0.1:{port}/metrics");
        let (code, s) = attach(
            srv.id(),
            &t.path().join(name),
            &["--metrics", &url, "--metric", name],
        );
        srv.kill().unwrap();
        let _ = srv.wait();
        assert_eq!(code, Some(0), "{s:#}");
        let notes = notes(&s);
        assert_eq!(notes.matches("hold no heap gauge").count(), 1, "{notes}");
        assert!(!has_series(&s, "heap_live_bytes"), "{s:#}");
        assert_eq!(has_series(&s, "gauge"), series, "{name}: {s:#}");
        if series {
            assert_eq!(s["gauge_name"], name);
            let gauge = s["series"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["metric"] == "gauge")
                .unwrap();
            assert_eq!(gauge["last"], 7.0, "{gauge:#}");
            assert_eq!(gauge["verdict"], "stable", "{gauge:#}");
        } else {
            let says = "--metric queue_depth: ";
            assert_eq!(notes.matches(says).count(), 1, "{notes}");
        }
    }
    let out = leakwatch()
        .args(["attach", "1", "--metrics", "http://127.0.0.1:1/metrics"])
        .args(["--metric", "queue{q=\"a\"}"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a metric name"), "{err}");
}

#[test]
fn a_metrics_url_that_is_not_http_is_refused_before_anything_runs() {
    let out = leakwatch()
        .args(["attach", "1", "--metrics", "ftp://host/metrics"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--metrics 'ftp://host/metrics' is not an http:// URL"),
        "{err}"
    );
}

/// A Node program that uses SIGUSR1 itself (its own handler replaces the one
/// that opens the inspector): asked once, no inspector, a note; the program
/// runs on.
#[test]
#[cfg_attr(not(lw_deps), ignore = "needs .ci/deps: bash .ci/test")]
fn a_node_that_will_not_open_its_inspector_is_a_note() {
    let Some(node) = crate::common::which("node") else {
        crate::common::missing("node", "bash .ci/deps installs it");
    };
    let t = tempfile::tempdir().unwrap();
    let mut child = Command::new(node)
        .args([
            "-e",
            "process.on('SIGUSR1', () => {}); setInterval(() => {}, 1000)",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (code, s) = attach(child.id(), &t.path().join("node"), &["--node-inspector"]);
    let alive = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    let _ = child.wait();
    assert!(alive, "the process was not ended by a signal");
    assert_eq!(code, Some(0), "{s:#}");
    let notes = notes(&s);
    assert!(
        notes.contains("no inspector listened within 3s of SIGUSR1"),
        "{notes}"
    );
}
