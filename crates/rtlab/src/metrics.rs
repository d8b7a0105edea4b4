//! `--metrics ADDR:PORT`: a minimal HTTP/1.1 server for Prometheus's scrapes, on std's
//! `TcpListener`. One connection at a time, each bounded (2 s to send its request, at most
//! 8 KiB of it, 2 s to take the answer), then closed: a slow or hostile client delays a scrape
//! by at most that, never the watch itself (the page is made on this thread, from a copy of
//! the watcher's figures taken under its lock).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(2);
const MAX_REQUEST: usize = 8192;

/// A running server; stops when dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `page()` at `/metrics` on `listener`.
    pub fn start(
        listener: TcpListener,
        page: Box<dyn Fn() -> String + Send>,
    ) -> std::io::Result<MetricsServer> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("rtlab-metrics".into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        if let Ok(conn) = conn {
                            let _ = answer(conn, &*page);
                        }
                    }
                })?
        };
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens (the port chosen when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the blocking accept with a connection of our own.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, TIMEOUT);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one request and answers it.
fn answer(mut conn: TcpStream, page: &dyn Fn() -> String) -> std::io::Result<()> {
    conn.set_read_timeout(Some(TIMEOUT))?;
    conn.set_write_timeout(Some(TIMEOUT))?;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
        if request.len() > MAX_REQUEST {
            return respond(
                &mut conn,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
                false,
            );
        }
    }
    let line = request
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let head = method == "HEAD";
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => respond(
            &mut conn,
            "200 OK",
            rtlab_report::prometheus::CONTENT_TYPE,
            &page(),
            head,
        ),
        ("GET" | "HEAD", "/") => respond(
            &mut conn,
            "200 OK",
            "text/plain; charset=utf-8",
            "rtlab watch: the metrics are at /metrics\n",
            head,
        ),
        ("GET" | "HEAD", _) => respond(
            &mut conn,
            "404 Not Found",
            "text/plain",
            "not found\n",
            head,
        ),
        ("", _) | (_, "") => respond(&mut conn, "400 Bad Request", "text/plain", "", false),
        _ => respond(
            &mut conn,
            "405 Method Not Allowed",
            "text/plain",
            "only GET\n",
            false,
        ),
    }
}

fn respond(
    conn: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
    head_only: bool,
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        out.push_str(body);
    }
    conn.write_all(out.as_bytes())?;
    conn.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &[u8]) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(request).unwrap();
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out
    }

    #[test]
    fn serves_the_page_and_refuses_the_rest_then_stops() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let server = {
            let n = n.clone();
            MetricsServer::start(
                listener,
                Box::new(move || format!("scrape {}\n", n.fetch_add(1, Ordering::Relaxed))),
            )
            .unwrap()
        };
        let addr = server.addr();
        let ok = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains("version=0.0.4") && ok.ends_with("\r\n\r\nscrape 0\n"),
            "{ok}"
        );
        assert!(get(addr, b"GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        let big = vec![b'a'; MAX_REQUEST + 2000];
        assert!(get(addr, &big).starts_with("HTTP/1.1 431"));
        // A client that says nothing is dropped after the timeout; the next one is served.
        let silent = TcpStream::connect(addr).unwrap();
        let head = get(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        drop(silent);
        drop(server);
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(),
            "stopped"
        );
    }
}
