//! `attach --serve ADDR`: `/metrics` over HTTP while sampling, for
//! Prometheus to scrape. A plain `std::net::TcpListener` on its own
//! thread, one request per connection (HTTP/1.1 with `Connection: close`,
//! which every scraper accepts): a scrape every few seconds needs no
//! server framework. The sampler hands its rows to a shared `Live` through
//! the samples.csv writer's tap; a scrape refits when `REFIT_EVERY` new
//! samples have come, outside the lock, so sampling never waits for a fit.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::fit::FitOptions;
use crate::report::openmetrics::{self, Live};
use crate::store::Tap;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "--serve {addr}: cannot listen ({error}); is another exporter on that port? \
         choose another port, e.g. --serve 127.0.0.1:9465"
    )]
    Bind {
        addr: SocketAddr,
        error: std::io::Error,
    },
}

/// A running /metrics endpoint.
pub struct Server {
    pub addr: SocketAddr,
    live: Arc<Mutex<Live>>,
}

/// Largest request head read: a scrape's is a few hundred bytes.
const MAX_HEAD: usize = 16 * 1024;

impl Server {
    /// Binds `addr` now (so a port in use fails before sampling starts) and
    /// serves from a thread of its own until leakwatch exits.
    pub fn start(addr: SocketAddr, fit: FitOptions, top: usize) -> Result<Server, ServeError> {
        let listener = TcpListener::bind(addr).map_err(|error| ServeError::Bind { addr, error })?;
        let addr = listener.local_addr().unwrap_or(addr);
        let live = Arc::new(Mutex::new(Live::default()));
        let shared = Arc::clone(&live);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                // A client that stalls or sends garbage costs one connection.
                let _ = handle(stream, &shared, &fit, top);
            }
        });
        Ok(Server { addr, live })
    }

    /// The tap to give the samples.csv writer.
    pub fn tap(&self) -> Tap {
        let live = Arc::clone(&self.live);
        Box::new(move |rows| {
            live.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(rows);
        })
    }
}

/// The exposition now, refitting first when the fit is stale.
fn metrics(live: &Mutex<Live>, fit: &FitOptions, top: usize) -> String {
    let lock = || live.lock().unwrap_or_else(PoisonError::into_inner);
    let snapshot = {
        let l = lock();
        l.stale().then(|| l.snapshot())
    };
    if let Some((builder, at)) = snapshot {
        let analysis = openmetrics::refit(builder, fit);
        lock().set_fit(analysis, at);
    }
    lock().render(top)
}

fn handle(
    stream: TcpStream,
    live: &Mutex<Live>,
    fit: &FitOptions,
    top: usize,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // The rest of the head, up to the blank line (bounded).
    let mut read = request_line.len();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line)?;
        read += n;
        if n == 0 || line == "\r\n" || line == "\n" || read > MAX_HEAD {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            ("200 OK", openmetrics::CONTENT_TYPE, metrics(live, fit, top))
        }
        ("GET" | "HEAD", "/") => (
            "200 OK",
            "text/plain; charset=utf-8",
            "leakwatch: metrics at /metrics\n".to_string(),
        ),
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found; the metrics are at /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET /metrics\n".to_string(),
        ),
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )?;
    if method != "HEAD" {
        out.write_all(body.as_bytes())?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn serves_metrics_and_nothing_else() {
        let server =
            Server::start("127.0.0.1:0".parse().unwrap(), FitOptions::default(), 50).unwrap();
        let mut tap = server.tap();
        let row = crate::store::Row {
            rss_bytes: Some(4096),
            ..crate::store::Row::new(crate::store::Scope::Target)
        };
        tap(&[row]);
        let text = get(server.addr, "/metrics");
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("application/openmetrics-text"));
        assert!(text.contains("leakwatch_samples 1\n"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        assert!(get(server.addr, "/other").starts_with("HTTP/1.1 404"));
        // The port is taken now: a second server says so and how to fix it.
        let err = Server::start(server.addr, FitOptions::default(), 50)
            .err()
            .unwrap();
        assert!(err.to_string().contains("choose another port"), "{err}");
    }
}
