//! The peer: `rtlab net serve`. Acknowledges stream messages (as soon as their useful bytes
//! arrived, before any padding), echoes ping-pong messages, swallows bulk traffic, and runs
//! reverse streams. TCP and UDP on the same port.

use super::protocol::Welcome;
pub use super::protocol::{Hello, Role};
use super::stream;
use super::wire::{self, Header, Kind, HEADER_LEN};
use crate::LabError;
use rtlab_sys::sched::Policy;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Datagrams a UDP session may send per second (and at once, after a pause): far above any
/// periodic stream or ping-pong on loopback, a bound on what a session can make the peer send.
const UDP_RATE: f64 = 200_000.0;
const UDP_BURST: f64 = 20_000.0;

/// A UDP session's allowance (a token bucket).
struct Allowance {
    tokens: f64,
    at: Instant,
    /// TCP connections holding this session open (a client may open several streams).
    holders: usize,
}

/// The UDP sessions opened over TCP ([`Role::Udp`]): only their addresses are answered.
#[derive(Default, Clone)]
struct UdpSessions(Arc<Mutex<HashMap<SocketAddr, Allowance>>>);

impl UdpSessions {
    fn open(&self, addr: SocketAddr) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(addr)
            .or_insert(Allowance {
                tokens: UDP_BURST,
                at: Instant::now(),
                holders: 0,
            })
            .holders += 1;
    }

    fn close(&self, addr: SocketAddr) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = m.get_mut(&addr) {
            a.holders -= 1;
            if a.holders == 0 {
                m.remove(&addr);
            }
        }
    }

    /// Whether a datagram from `from` gets an answer: its session is open and within its
    /// rate.
    fn admit(&self, from: SocketAddr) -> bool {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let Some(a) = m.get_mut(&canonical(from)) else {
            return false;
        };
        let now = Instant::now();
        a.tokens = (a.tokens + now.duration_since(a.at).as_secs_f64() * UDP_RATE).min(UDP_BURST);
        a.at = now;
        if a.tokens >= 1.0 {
            a.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// An IPv4 address seen through an IPv6 socket, as IPv4.
fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

impl Hello {
    /// Brings what the client asked for within what the peer's owner allows: its priority
    /// (SCHED_OTHER unless the owner gave `--max-prio`), busy polling, SO_PRIORITY, buffer
    /// sizes, a reverse stream's size and period.
    pub fn within(mut self, limits: &PeerLimits) -> Result<Hello, LabError> {
        let (policy, prio) = limits.sched(self.policy, self.prio);
        (self.policy, self.prio) = (policy, prio);
        let o = &mut self.options;
        o.busy_poll_us = if limits.max_prio.is_some() {
            o.busy_poll_us.min(MAX_BUSY_POLL_US)
        } else {
            0
        };
        // 7 and above need CAP_NET_ADMIN: the client's word is not the owner's capability.
        o.priority = o.priority.map(|p| p.min(6));
        o.sndbuf = o.sndbuf.map(|b| b.min(limits.max_buffer));
        o.rcvbuf = o.rcvbuf.map(|b| b.min(limits.max_buffer));
        if let Some(plan) = &mut self.plan {
            if plan.size > limits.max_buffer {
                return Err(LabError::Net(format!(
                    "a reverse stream of {} bytes is over this peer's limit ({} bytes, --max-buffer)",
                    plan.size, limits.max_buffer
                )));
            }
            let min_period = if limits.max_prio.is_some() {
                100_000
            } else {
                1_000_000
            };
            if plan.period_ns < min_period {
                return Err(LabError::Net(format!(
                    "a reverse stream every {} ns is faster than this peer allows ({min_period} ns)",
                    plan.period_ns
                )));
            }
            (plan.policy, plan.prio) = limits.sched(plan.policy, plan.prio);
        }
        Ok(self)
    }

    /// Sends this hello as the first message of `s`.
    pub fn send(&self, s: &mut TcpStream) -> std::io::Result<()> {
        wire::write_control(s, Kind::Hello, self)
    }
}

/// Busy polling a client may ask for (with `--max-prio`; none without).
const MAX_BUSY_POLL_US: u32 = 100;

/// What the owner of a peer allows its clients. Everything a client asks for is brought
/// within these ([`Hello::within`]); a client is never trusted with more.
#[derive(Debug, Clone)]
pub struct PeerLimits {
    /// The highest real-time priority a connection's threads may get (None: SCHED_OTHER only).
    pub max_prio: Option<u32>,
    /// Connections served at once; more are closed at once.
    pub max_connections: usize,
    /// Socket buffers, echoed messages and reverse-stream messages are at most this large.
    pub max_buffer: usize,
    /// A connection silent for this long (nothing to read, or its client not reading) ends.
    pub idle_timeout: Duration,
    /// A hello must carry this secret (rtlab's own peers: only the connections it expects).
    pub token: Option<String>,
}

impl PeerLimits {
    /// A peer rtlab starts for its own run (loopback thread, namespace process): what the
    /// run asks for is allowed, but only from a client that knows `token`.
    pub fn own(token: String) -> PeerLimits {
        PeerLimits {
            max_prio: Some(99),
            max_connections: 64,
            max_buffer: wire::MAX_BODY,
            idle_timeout: Duration::from_secs(600),
            token: Some(token),
        }
    }

    /// A policy and priority within the limit.
    fn sched(&self, policy: Policy, prio: u32) -> (Policy, u32) {
        match self.max_prio {
            Some(max) if policy.is_realtime() => (policy, prio.clamp(1, max.max(1))),
            _ => (Policy::Other, 0),
        }
    }
}

/// A new secret for [`PeerLimits::own`].
pub fn new_token() -> Result<String, LabError> {
    rtlab_sys::fs::random_suffix().map_err(|e| LabError::Net(format!("no random token: {e}")))
}

/// A running peer: a TCP acceptor and a UDP responder on one port.
#[derive(Debug)]
pub struct PeerServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl PeerServer {
    /// Binds `listen` (port 0: any free port; UDP then takes the same number) and serves in
    /// background threads until [`PeerServer::stop`] or drop.
    pub fn start(listen: SocketAddr, limits: PeerLimits) -> Result<PeerServer, LabError> {
        let tcp = TcpListener::bind(listen)
            .map_err(|e| LabError::Net(format!("cannot listen on {listen}: {e}")))?;
        let addr = tcp.local_addr().map_err(LabError::from)?;
        let udp = UdpSocket::bind(addr)
            .map_err(|e| LabError::Net(format!("cannot bind UDP {addr}: {e}")))?;
        tcp.set_nonblocking(true).map_err(LabError::from)?;
        udp.set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(LabError::from)?;
        let stop = Arc::new(AtomicBool::new(false));
        let sessions = UdpSessions::default();
        let threads = vec![
            {
                let (stop, sessions) = (stop.clone(), sessions.clone());
                std::thread::Builder::new()
                    .name("rtlab-net-accept".into())
                    .spawn(move || accept_loop(tcp, &stop, Arc::new(limits), sessions))
                    .map_err(LabError::from)?
            },
            {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name("rtlab-net-udp".into())
                    .spawn(move || udp_loop(udp, &stop, &sessions))
                    .map_err(LabError::from)?
            },
        ];
        Ok(PeerServer {
            addr,
            stop,
            threads,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting (connections in progress end when their clients close).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(
    tcp: TcpListener,
    stop: &AtomicBool,
    limits: Arc<PeerLimits>,
    sessions: UdpSessions,
) {
    let open = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        match tcp.accept() {
            Ok((s, _)) => {
                // Over the limit the connection is closed at once (the client sees no hello).
                if open.load(Ordering::Relaxed) >= limits.max_connections {
                    drop(s);
                    continue;
                }
                open.fetch_add(1, Ordering::Relaxed);
                let (conn_open, conn_limits) = (open.clone(), limits.clone());
                let sessions = sessions.clone();
                let spawned = std::thread::Builder::new()
                    .name("rtlab-net-conn".into())
                    .spawn(move || {
                        let _ = s.set_nonblocking(false);
                        let _ = serve_connection(s, &conn_limits, &sessions);
                        conn_open.fetch_sub(1, Ordering::Relaxed);
                    });
                if spawned.is_err() {
                    // The closure (and with it the connection) is gone: so goes its count.
                    open.fetch_sub(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn udp_loop(udp: UdpSocket, stop: &AtomicBool, sessions: &UdpSessions) {
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = udp.recv_from(&mut buf) else {
            continue;
        };
        // Never an answer to an address that opened no session: its source may be forged.
        if !sessions.admit(from) {
            continue;
        }
        let Ok(h) = Header::decode(&buf[..n]) else {
            continue;
        };
        match h.kind {
            Kind::Data => {
                let mut ack = h;
                ack.kind = Kind::Ack;
                ack.payload = 0;
                ack.pad = 0;
                let mut out = [0u8; HEADER_LEN];
                ack.encode(&mut out);
                let _ = udp.send_to(&out, from);
            }
            Kind::Echo => {
                let _ = udp.send_to(&buf[..n], from);
            }
            _ => {}
        }
    }
}

/// The largest hello a peer reads.
const MAX_HELLO: u32 = 64 << 10;

/// One client connection: its hello, then its role.
fn serve_connection(
    mut s: TcpStream,
    limits: &PeerLimits,
    sessions: &UdpSessions,
) -> Result<(), LabError> {
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(LabError::from)?;
    let h = Header::read_from(&mut s).map_err(LabError::from)?;
    if h.kind != Kind::Hello || h.payload > MAX_HELLO {
        return Err(LabError::Net("the first message was not a hello".into()));
    }
    let hello = Hello::decode(wire::read_control(&mut s, &h).map_err(LabError::from)?)?;
    if limits.token.is_some() && hello.token != limits.token {
        return Err(LabError::Net("a hello without this peer's token".into()));
    }
    let hello = hello.within(limits)?;
    // A client that goes silent, or stops reading, frees its thread after the idle timeout.
    s.set_read_timeout(Some(limits.idle_timeout))
        .and_then(|()| s.set_write_timeout(Some(limits.idle_timeout)))
        .map_err(LabError::from)?;
    hello.options.apply_tcp(&s)?;
    // Best effort: a peer without the privilege still answers, at normal priority.
    let _ = rtlab_sys::sched::set_current_thread_scheduler(hello.policy, hello.prio);
    // The handshake's answer: the client knows it talks to an rtlab peer.
    wire::write_control(&mut s, Kind::Hello, &Welcome::this()).map_err(LabError::from)?;
    match hello.role {
        Role::Stream => acknowledge(s, hello.options.quickack, hello.pad_segments),
        Role::Pingpong => echo(s, hello.options.quickack, limits.max_buffer),
        Role::Bulk => std::io::copy(&mut s, &mut std::io::sink())
            .map(|_| ())
            .map_err(LabError::from),
        Role::Udp => {
            let port = hello
                .udp_port
                .ok_or_else(|| LabError::Net("a UDP session without its port".into()))?;
            let from = canonical(s.peer_addr().map_err(LabError::from)?);
            let addr = SocketAddr::new(from.ip(), port);
            sessions.open(addr);
            // Open while the client keeps this connection: it sends nothing more on it.
            let _ = s.set_read_timeout(None);
            let held = std::io::copy(&mut (&s).take(1 << 20), &mut std::io::sink());
            sessions.close(addr);
            held.map(|_| ()).map_err(LabError::from)
        }
        Role::Reverse => {
            let plan = hello
                .plan
                .ok_or_else(|| LabError::Net("a reverse stream without a plan".into()))?;
            let stats = stream::run_tcp(
                s.try_clone().map_err(LabError::from)?,
                &plan,
                &stream::Timing::until_stopped(),
                &hello.options,
                true,
                None,
            )?;
            wire::write_control(&mut s, Kind::Report, &stats.to_report()).map_err(LabError::from)
        }
    }
}

/// Acknowledges every `Data` message once its payload is in, then drops its padding.
fn acknowledge(mut s: TcpStream, quickack: bool, pad_segments: u32) -> Result<(), LabError> {
    let mut w = s.try_clone().map_err(LabError::from)?;
    let mut ack_buf = vec![0u8; stream::ack_length(&s, pad_segments)];
    loop {
        let h = match Header::read_from(&mut s) {
            Ok(h) => h,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if h.kind != Kind::Data {
            return Err(LabError::Net(format!(
                "unexpected {:?} on a stream connection",
                h.kind
            )));
        }
        wire::skip(&mut s, h.payload as u64).map_err(LabError::from)?;
        stream::write_ack(&mut w, &h, &mut ack_buf).map_err(LabError::from)?;
        if quickack {
            let _ = rtlab_sys::net::set_quickack(&s, true);
        }
        wire::skip(&mut s, h.pad as u64).map_err(LabError::from)?;
    }
}

/// Sends every `Echo` message straight back, whole.
fn echo(mut s: TcpStream, quickack: bool, max_payload: usize) -> Result<(), LabError> {
    let mut buf = vec![0u8; HEADER_LEN];
    loop {
        buf.resize(HEADER_LEN, 0);
        match s.read_exact(&mut buf[..HEADER_LEN]) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let h = Header::decode(&buf)?;
        if h.kind != Kind::Echo || h.pad != 0 {
            return Err(LabError::Net(format!(
                "unexpected {:?} on a ping-pong connection",
                h.kind
            )));
        }
        if h.payload as usize > max_payload {
            return Err(LabError::Net(format!(
                "an echo of {} bytes is over this peer's limit",
                h.payload
            )));
        }
        buf.resize(HEADER_LEN + h.payload as usize, 0);
        s.read_exact(&mut buf[HEADER_LEN..])
            .map_err(LabError::from)?;
        s.write_all(&buf).map_err(LabError::from)?;
        if quickack {
            let _ = rtlab_sys::net::set_quickack(&s, true);
        }
    }
}
