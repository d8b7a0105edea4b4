//! `--metrics ADDR:PORT`: a minimal HTTP/1.1 server for Prometheus's scrapes, on std's
//! `TcpListener`. Each connection is answered on a thread of its own, at most
//! [`MAX_CLIENTS`] at once and [`MAX_PER_PEER`] from one address, each with one deadline for
//! the whole exchange (2 s to send a request of at most 8 KiB, whatever pace the client reads
//! or writes at, then the answer), then closed. A connection that has not sent its request
//! yet holds its slot only until a newer one needs it: idle or dribbling connections (8 of
//! them answered no scrape at all before) cannot keep a scraper out, which sends its request
//! as soon as it connects. A slow or hostile client never costs the watch itself (the page
//! is made from a copy of the watcher's figures taken under its lock), and stopping the
//! server never waits for a client.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long one request may take, from accept to the last byte of the answer.
const DEADLINE: Duration = Duration::from_secs(2);
const MAX_REQUEST: usize = 8192;
/// Connections answered at once; Prometheus needs one (two while a scrape times out).
pub const MAX_CLIENTS: usize = 8;
/// Of them, from one address.
pub const MAX_PER_PEER: usize = 4;

/// The page's maker, shared by the connections' threads.
pub type Page = Arc<dyn Fn() -> String + Send + Sync>;

/// A running server; stops when dropped (without waiting for a client).
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// One connection being answered.
struct Client {
    id: u64,
    peer: IpAddr,
    /// True once its whole request came: answered from then on, never evicted.
    asked: Arc<AtomicBool>,
    /// To close it when evicted (its thread then ends at its next read).
    conn: TcpStream,
}

/// The connections being answered, oldest first.
#[derive(Clone, Default)]
struct Clients(Arc<Mutex<Vec<Client>>>);

impl Clients {
    /// Room for a connection from `peer`: made by closing the oldest that has not sent its
    /// request yet where the peer or the server is full; None where every one has (it is
    /// then closed at once).
    fn admit(&self, id: u64, peer: IpAddr, conn: &TcpStream) -> Option<Arc<AtomicBool>> {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let from_peer = all.iter().filter(|c| c.peer == peer).count();
        if from_peer >= MAX_PER_PEER || all.len() >= MAX_CLIENTS {
            let full_peer = from_peer >= MAX_PER_PEER;
            let evict = all
                .iter()
                .position(|c| !c.asked.load(Ordering::Acquire) && (!full_peer || c.peer == peer))?;
            let old = all.remove(evict);
            let _ = old.conn.shutdown(std::net::Shutdown::Both);
        }
        let asked = Arc::new(AtomicBool::new(false));
        all.push(Client {
            id,
            peer,
            asked: asked.clone(),
            conn: conn.try_clone().ok()?,
        });
        Some(asked)
    }

    fn remove(&self, id: u64) {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|c| c.id != id);
    }
}

/// Frees a client's slot when its thread ends, however it ends.
struct Slot(Clients, u64);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}

impl MetricsServer {
    /// Serves `page()` at `/metrics` on `listener`.
    pub fn start(listener: TcpListener, page: Page) -> std::io::Result<MetricsServer> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let clients = Clients::default();
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("rtlab-metrics".into())
                .spawn(move || {
                    for (id, conn) in (0u64..).zip(listener.incoming()) {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let Ok(conn) = conn else { continue };
                        let Ok(peer) = conn.peer_addr() else { continue };
                        let Some(asked) = clients.admit(id, peer.ip(), &conn) else {
                            continue; // closed at once: every slot is answering a request
                        };
                        let slot = Slot(clients.clone(), id);
                        let page = page.clone();
                        let spawned = std::thread::Builder::new()
                            .name("rtlab-metrics-c".into())
                            .spawn(move || {
                                let _slot = slot;
                                let _ = answer(conn, &*page, Instant::now() + DEADLINE, &asked);
                            });
                        // A thread that could not start dropped its slot with its closure.
                        drop(spawned);
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
        // Wake the blocking accept with a connection of our own; the accept loop never waits
        // on a client, so joining it is quick. Clients' threads end by their deadline.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, DEADLINE);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What is left of the time until `deadline`, or a timeout error when none is.
fn left(deadline: Instant) -> std::io::Result<Duration> {
    match deadline.checked_duration_since(Instant::now()) {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

/// Reads one request and answers it, all before `deadline` (`asked` set once it came).
fn answer(
    mut conn: TcpStream,
    page: &(dyn Fn() -> String + Send + Sync),
    deadline: Instant,
    asked: &AtomicBool,
) -> std::io::Result<()> {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        conn.set_read_timeout(Some(left(deadline)?))?;
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
        if request.len() > MAX_REQUEST {
            return respond(
                &mut conn,
                deadline,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
                false,
            );
        }
    }
    asked.store(true, Ordering::Release);
    let line = request
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let head = method == "HEAD";
    let (status, content_type, body, head) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => (
            "200 OK",
            rtlab_report::prometheus::CONTENT_TYPE,
            page(),
            head,
        ),
        ("GET" | "HEAD", "/") => (
            "200 OK",
            "text/plain; charset=utf-8",
            "rtlab watch: the metrics are at /metrics\n".to_string(),
            head,
        ),
        ("GET" | "HEAD", _) => ("404 Not Found", "text/plain", "not found\n".into(), head),
        ("", _) | (_, "") => ("400 Bad Request", "text/plain", String::new(), false),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET\n".into(),
            false,
        ),
    };
    respond(&mut conn, deadline, status, content_type, &body, head)
}

fn respond(
    conn: &mut TcpStream,
    deadline: Instant,
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
    // A client that reads slowly gets what it took by the deadline, then the connection ends.
    let mut rest = out.as_bytes();
    while !rest.is_empty() {
        conn.set_write_timeout(Some(left(deadline)?))?;
        let n = conn.write(rest)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        rest = &rest[n..];
    }
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
                Arc::new(move || format!("scrape {}\n", n.fetch_add(1, Ordering::Relaxed))),
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

    #[test]
    fn a_slow_client_neither_holds_up_a_scrape_nor_the_stop() {
        // Regression (hardening, second review, #3): a client sending a byte every 1.5 s
        // blocked every scrape and kept watch from exiting for 9-12 s.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = MetricsServer::start(listener, Arc::new(|| "ok\n".to_string())).unwrap();
        let addr = server.addr();
        let dribble = |stop: Arc<AtomicBool>| {
            std::thread::spawn(move || {
                let mut c = TcpStream::connect(addr).unwrap();
                for b in b"GET /metrics HTTP/1.1\r\n".iter().cycle() {
                    if stop.load(Ordering::Relaxed) || c.write_all(&[*b]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
            })
        };
        let stop = Arc::new(AtomicBool::new(false));
        let slow: Vec<_> = (0..3).map(|_| dribble(stop.clone())).collect();
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        let ok = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(ok.ends_with("\r\n\r\nok\n"), "{ok}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        // Stopping does not wait for the dribblers.
        let t = Instant::now();
        drop(server);
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        stop.store(true, Ordering::Relaxed);
        for s in slow {
            s.join().unwrap();
        }
    }

    #[test]
    fn idle_connections_do_not_keep_a_scrape_out() {
        // Regression (hardening, third review, #5): 8 connections that sent nothing took
        // every slot, and 0 of 20 scrapes were answered.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = MetricsServer::start(listener, Arc::new(|| "ok\n".to_string())).unwrap();
        let addr = server.addr();
        let idle: Vec<TcpStream> = (0..2 * MAX_CLIENTS)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        for _ in 0..20 {
            let ok = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
            assert!(ok.ends_with("\r\n\r\nok\n"), "{ok}");
            // ... and the idle ones come back at once, as an attacker's would.
            for _ in 0..MAX_CLIENTS {
                let _ = TcpStream::connect(addr);
            }
        }
        drop(idle);
    }

    #[test]
    fn a_peer_holds_at_most_its_share_and_a_full_server_evicts_the_idle_first() {
        let clients = Clients::default();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let conn = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let peers = |c: &Clients| -> Vec<(u64, IpAddr)> {
            c.0.lock().unwrap().iter().map(|c| (c.id, c.peer)).collect()
        };
        // Peer a fills its share; its next connection evicts its oldest idle one.
        let asked: Vec<_> = (0..MAX_PER_PEER as u64)
            .map(|id| clients.admit(id, a, &conn).unwrap())
            .collect();
        clients.admit(10, a, &conn).unwrap();
        assert_eq!(peers(&clients)[0].0, 1);
        assert_eq!(peers(&clients).len(), MAX_PER_PEER);
        // Every one of a's answering a request: the next from a is refused.
        for s in &asked {
            s.store(true, Ordering::Release);
        }
        clients.0.lock().unwrap()[MAX_PER_PEER - 1]
            .asked
            .store(true, Ordering::Release);
        assert!(clients.admit(11, a, &conn).is_none());
        // b still gets in, up to the server's bound.
        for id in 20..20 + (MAX_CLIENTS - MAX_PER_PEER) as u64 {
            clients.admit(id, b, &conn).unwrap();
        }
        assert_eq!(peers(&clients).len(), MAX_CLIENTS);
        // Full: a newcomer evicts b's oldest idle one.
        clients.admit(30, b, &conn).unwrap();
        assert!(!peers(&clients).contains(&(20, b)));
        assert_eq!(peers(&clients).len(), MAX_CLIENTS);
    }

    #[test]
    fn the_deadline_is_for_the_whole_request_not_each_read() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = MetricsServer::start(listener, Arc::new(|| "ok\n".to_string())).unwrap();
        let mut c = TcpStream::connect(server.addr()).unwrap();
        let t = Instant::now();
        // A byte every 500 ms would pass a per-read limit of 2 s forever.
        let mut closed = false;
        for _ in 0..20 {
            if c.write_all(b"G").is_err() {
                closed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut out = Vec::new();
        let read = c.read_to_end(&mut out);
        assert!(
            closed || matches!(read, Ok(0)) || read.is_err(),
            "still open after {:?}: {read:?}",
            t.elapsed()
        );
        assert!(t.elapsed() < Duration::from_secs(11));
    }
}
