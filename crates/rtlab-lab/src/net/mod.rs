//! `rtlab net`: bounded-latency messaging between periodic real-time threads over TCP and UDP
//! (seeds 001 and 002), and a ping-pong comparable with sockperf.
//!
//! * [`NetRun`]: periodic streams (`SIZE@PERIOD`, each with its own sender thread on an
//!   absolute schedule and its own connection), acknowledged by the peer as soon as the useful
//!   bytes arrived; reverse streams sent by the peer; optional bulk background traffic.
//! * [`PingPong`]: one message in flight, echoed whole.
//!
//! Topologies: loopback (peer thread in this process), a network namespace behind a veth
//! pair (with MTU, static neighbours, random loss), or a remote `rtlab net serve`.

pub mod peer;
pub mod protocol;
pub mod stream;
pub mod topology;
pub mod wire;

use crate::harness::{CommonConfig, Observer};
use crate::{Experiment, LabError, Outcome};
use peer::{Hello, Role};
use rtlab_stats::result::Series;
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sys::sched::Policy;
use rtlab_sys::time::monotonic_now_ns;
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;
pub use stream::SocketOptions;
use stream::{Plan, StreamStats, Timing};
pub use topology::{Topology, DEFAULT_PORT};

/// Series names (for help text).
pub const SERIES_HELP: &str = "net run: <SIZE>@<PERIOD>/rtt per stream as written (metric rtt, from the \
scheduled send time to the acknowledgement), <SIZE>@<PERIOD>/send_lateness (actual send start minus \
scheduled time), reverse/<SIZE>@<PERIOD>/rtt and /send_lateness for streams the peer sends, and all/rtt \
(every stream). net pingpong: pingpong/rtt.";

/// One plain sentence for the survey: the worst round trip of periodic messaging.
pub fn reading(series: &[Series], prefix: &str) -> Option<String> {
    let all = series
        .iter()
        .find(|s| s.name == format!("{prefix}all/rtt"))?;
    let topology = all
        .config
        .get("topology")
        .and_then(|t| t["topology"].as_str())
        .unwrap_or("loopback");
    Some(format!(
        "periodic TCP messages over {topology} ({} streams, each acknowledged): round trip p50 {}, p99 {}, worst {}",
        all.config.get("streams").and_then(Value::as_u64).unwrap_or(0),
        Nanos(all.p50? as u64),
        Nanos(all.p99? as u64),
        Nanos(all.max? as u64)
    ))
}

/// Protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP (one datagram per message).
    Udp,
}

impl Proto {
    /// `tcp` or `udp`.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// One stream as written on the command line: `SIZE@PERIOD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// As written (`120KiB@50ms`): the series name.
    pub label: String,
    /// Bytes per message (rtlab's 40-byte header included).
    pub size: usize,
    /// Period.
    pub period: Nanos,
}

impl std::str::FromStr for StreamSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (size, period) = text
            .split_once('@')
            .ok_or_else(|| format!("'{text}': expected SIZE@PERIOD, e.g. 1KiB@50ms"))?;
        let size = rtlab_stats::parse_size(size).map_err(|e| format!("'{text}': {e}"))? as usize;
        let period = rtlab_stats::parse_duration(period).map_err(|e| format!("'{text}': {e}"))?;
        if !(1..=(64 << 20)).contains(&size) {
            return Err(format!("'{text}': size must be 1 byte to 64MiB"));
        }
        if period < Nanos::from_micros(100) {
            return Err(format!("'{text}': period must be at least 100us"));
        }
        Ok(StreamSpec {
            label: text.to_string(),
            size,
            period,
        })
    }
}

/// The seed's two-machine mix (seed 001): 120 KB, 1 KB, 100 B and 200 B every 50 ms one
/// way; 300 B and 350 B every 50 ms the other.
pub fn seed_poc_profile() -> (Vec<StreamSpec>, Vec<StreamSpec>) {
    let parse = |s: &str| s.parse::<StreamSpec>().expect("valid profile");
    (
        ["120KiB@50ms", "1KiB@50ms", "100B@50ms", "200B@50ms"]
            .map(parse)
            .to_vec(),
        ["300B@50ms", "350B@50ms"].map(parse).to_vec(),
    )
}

/// The TCP loss-recovery settings that decide the worst case after a drop.
pub fn tcp_sysctls() -> Value {
    let mut out = serde_json::Map::new();
    for (key, path) in [
        ("tcp_rto_min_us", "/proc/sys/net/ipv4/tcp_rto_min_us"),
        ("tcp_early_retrans", "/proc/sys/net/ipv4/tcp_early_retrans"),
        ("tcp_recovery", "/proc/sys/net/ipv4/tcp_recovery"),
        ("tcp_sack", "/proc/sys/net/ipv4/tcp_sack"),
        (
            "tcp_thin_linear_timeouts",
            "/proc/sys/net/ipv4/tcp_thin_linear_timeouts",
        ),
        ("tcp_low_latency", "/proc/sys/net/ipv4/tcp_low_latency"),
        ("rmem_max", "/proc/sys/net/core/rmem_max"),
        ("wmem_max", "/proc/sys/net/core/wmem_max"),
        ("busy_poll", "/proc/sys/net/core/busy_poll"),
        ("busy_read", "/proc/sys/net/core/busy_read"),
    ] {
        if let Ok(v) = std::fs::read_to_string(path) {
            let v = v.trim();
            out.insert(
                key.into(),
                v.parse::<i64>().map_or_else(|_| json!(v), |n| json!(n)),
            );
        }
    }
    Value::Object(out)
}

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

fn connect(to: &topology::PeerAddr, hello: &Hello) -> Result<TcpStream, String> {
    let peer = to.addr;
    let mut s = TcpStream::connect_timeout(&peer, CONNECT_TIMEOUT).map_err(|e| {
        format!("cannot connect to {peer}: {e} (is `rtlab net serve` running there?)")
    })?;
    hello.options.apply_tcp(&s)?;
    let refused = |e: std::io::Error| {
        let hint = if e.kind() == std::io::ErrorKind::InvalidData {
            ""
        } else {
            " (is `rtlab net serve` running there?)"
        };
        format!("no rtlab handshake from {peer} within 3 s: {e}{hint}")
    };
    let hello = Hello {
        token: to.token.clone(),
        ..hello.clone()
    };
    hello.send(&mut s).map_err(refused)?;
    s.set_read_timeout(Some(CONNECT_TIMEOUT)).map_err(refused)?;
    let h = wire::Header::read_from(&mut s).map_err(refused)?;
    if h.kind != wire::Kind::Hello {
        return Err(format!("{peer} answered the handshake with {:?}", h.kind));
    }
    let _: protocol::Welcome = wire::read_control(&mut s, &h).map_err(refused)?;
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    Ok(s)
}

/// A connected UDP socket that got an answer from the peer (3 tries, 1 s each).
fn connect_udp(peer: SocketAddr, options: &SocketOptions) -> Result<UdpSocket, String> {
    let local: SocketAddr = if peer.is_ipv4() {
        "0.0.0.0:0".parse().expect("addr")
    } else {
        "[::]:0".parse().expect("addr")
    };
    let s = UdpSocket::bind(local).map_err(|e| e.to_string())?;
    s.connect(peer).map_err(|e| format!("UDP {peer}: {e}"))?;
    options.apply_udp(&s)?;
    s.set_read_timeout(Some(Duration::from_secs(1)))
        .map_err(|e| e.to_string())?;
    let mut probe = [0u8; wire::HEADER_LEN];
    let mut h = wire::Header::new(wire::Kind::Echo);
    h.seq = u64::MAX;
    h.encode(&mut probe);
    let mut back = [0u8; 256];
    for _ in 0..3 {
        let _ = s.send(&probe);
        if let Ok(n) = s.recv(&mut back) {
            if wire::Header::decode(&back[..n]).is_ok_and(|r| r.seq == u64::MAX) {
                return Ok(s);
            }
        }
    }
    Err(format!(
        "no answer from {peer} over UDP within 3 s (is `rtlab net serve` running there?)"
    ))
}

/// Configuration of `rtlab net run`.
#[derive(Debug, Clone)]
pub struct NetRunConfig {
    /// Where the peer is.
    pub topology: Topology,
    /// TCP or UDP.
    pub proto: Proto,
    /// Streams this side sends.
    pub streams: Vec<StreamSpec>,
    /// Streams the peer sends (TCP only).
    pub reverse: Vec<StreamSpec>,
    /// Socket options (both ends).
    pub options: SocketOptions,
    /// Pad small messages to this many segments (TCP).
    pub pad_segments: u32,
    /// Round trips over this are deadline misses (None: the stream's period).
    pub deadline: Option<Nanos>,
    /// Not recorded at the start of each stream (None: min(1 s, duration / 5)).
    pub warmup: Option<Nanos>,
    /// Bulk TCP traffic on another connection while measuring.
    pub background_traffic: bool,
    /// Scheduling of the stream threads.
    pub policy: Policy,
    /// Their priority.
    pub prio: u32,
    /// CPUs the stream threads may use (empty: any).
    pub cpus: Vec<usize>,
    /// Explain the worst send lateness of the stream threads.
    pub explain: Option<crate::explain::ExplainSettings>,
}

/// `rtlab net run`.
#[derive(Debug, Clone)]
pub struct NetRun {
    config: NetRunConfig,
    prefix: String,
}

/// A network namespace needs root: said before anything starts (bad input, not a failure).
fn needs_root_for(topology: &Topology) -> Result<(), LabError> {
    if matches!(topology, Topology::Netns { .. }) && rtlab_sys::process::effective_uid() != 0 {
        return Err(LabError::Config(
            "a network namespace needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN)".into(),
        ));
    }
    Ok(())
}

impl NetRun {
    /// Checks what can be checked before anything starts.
    pub fn new(config: NetRunConfig) -> Result<NetRun, LabError> {
        needs_root_for(&config.topology)?;
        if config.streams.is_empty() && config.reverse.is_empty() {
            return Err(LabError::bad("streams", "no stream given"));
        }
        if config.proto == Proto::Udp {
            if !config.reverse.is_empty() {
                return Err(LabError::bad("reverse", "needs TCP (not UDP)"));
            }
            if let Some(s) = config.streams.iter().find(|s| s.size > 65_000) {
                return Err(LabError::bad(
                    "streams",
                    format!(
                        "{}: a UDP message must fit one datagram (at most 65000 bytes)",
                        s.label
                    ),
                ));
            }
            if config.pad_segments > 0 {
                return Err(LabError::bad("pad_segments", "applies to TCP only"));
            }
        }
        if let Topology::Netns {
            loss_pct, sysctls, ..
        } = &config.topology
        {
            if loss_pct.is_some_and(|p| !(0.0..=100.0).contains(&p)) {
                return Err(LabError::bad("loss_pct", "is a percentage, 0 to 100"));
            }
            for s in sysctls {
                topology::netns_sysctl(s).map_err(|e| LabError::bad("sysctls", e))?;
            }
        }
        Ok(NetRun {
            config,
            prefix: String::new(),
        })
    }

    /// Prefixes every series name (the survey's `net/`).
    pub fn with_series_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }
}

/// Labels made unique (`1KiB@50ms`, `1KiB@50ms#2`).
fn unique_labels(specs: &[StreamSpec]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    specs
        .iter()
        .map(|s| {
            let n = seen.iter().filter(|l| **l == s.label).count();
            seen.push(s.label.clone());
            if n == 0 {
                s.label.clone()
            } else {
                format!("{}#{}", s.label, n + 1)
            }
        })
        .collect()
}

/// A background thread pushing bulk data over its own connection until `stop`.
fn background(
    peer: &topology::PeerAddr,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<u64, String> {
    use std::io::Write;
    let hello = Hello {
        role: Role::Bulk,
        options: SocketOptions::default(),
        policy: Policy::Other,
        prio: 0,
        plan: None,
        pad_segments: 0,
        token: None, // connect() sets the peer's
    };
    let mut s = connect(peer, &hello)?;
    let chunk = vec![0u8; 64 << 10];
    let mut bytes = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && !rtlab_sys::signal::interrupted() {
        s.write_all(&chunk)
            .map_err(|e| format!("background traffic: {e}"))?;
        bytes += chunk.len() as u64;
    }
    Ok(bytes)
}

impl Experiment for NetRun {
    fn command(&self) -> &'static str {
        "net"
    }

    fn run(&self, common: &CommonConfig, observer: &mut dyn Observer) -> Result<Outcome, LabError> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let cfg = &self.config;
        let mut outcome = Outcome::default();
        let (policy, prio) = outcome.effective_sched(
            observer,
            cfg.policy,
            cfg.prio,
            "so every message waits behind time-sharing threads",
        );
        let running = topology::bring_up(&cfg.topology).map_err(LabError::Setup)?;
        let duration = common.duration.get();
        let warmup = cfg
            .warmup
            .map_or((duration / 5).min(1_000_000_000), |w| w.get());
        let plan = |i: usize, spec: &StreamSpec| Plan {
            stream: i as u16,
            size: spec.size.max(wire::HEADER_LEN),
            period_ns: spec.period.get(),
            pad_segments: cfg.pad_segments,
            warmup_ns: warmup,
            deadline_ns: cfg.deadline.map_or(spec.period.get(), |d| d.get()),
            policy,
            prio,
        };
        // Connect everything first, then start every stream on one schedule.
        let mut forward = Vec::new();
        for (i, spec) in cfg.streams.iter().enumerate() {
            let p = plan(i, spec);
            let conn = match cfg.proto {
                Proto::Tcp => {
                    let hello = Hello {
                        role: Role::Stream,
                        options: cfg.options.clone(),
                        policy,
                        prio,
                        plan: None,
                        pad_segments: cfg.pad_segments,
                        token: None, // connect() sets the peer's
                    };
                    Conn::Tcp(connect(&running.peer, &hello).map_err(LabError::Setup)?)
                }
                Proto::Udp => Conn::Udp(
                    connect_udp(running.peer.addr, &cfg.options).map_err(LabError::Setup)?,
                ),
            };
            forward.push((p, conn));
        }
        let mut reverse = Vec::new();
        for (i, spec) in cfg.reverse.iter().enumerate() {
            let p = plan(1000 + i, spec);
            let hello = Hello {
                role: Role::Reverse,
                options: cfg.options.clone(),
                policy,
                prio,
                plan: Some(p.clone()),
                pad_segments: cfg.pad_segments,
                token: None, // connect() sets the peer's
            };
            reverse.push((p, connect(&running.peer, &hello).map_err(LabError::Setup)?));
        }
        let measured: Vec<usize> = if cfg.cpus.is_empty() {
            rtlab_sys::affinity::usable_cpus().as_slice().to_vec()
        } else {
            cfg.cpus.clone()
        };
        let labels_now = unique_labels(&cfg.streams);
        let session = cfg.explain.as_ref().map(|settings| {
            crate::explain::Session::start(
                settings,
                &measured,
                labels_now
                    .iter()
                    .map(|l| format!("{}{l}/send_lateness", self.prefix))
                    .collect(),
                &[crate::explain::Wait::Timer],
                observer,
                &mut outcome,
            )
        });
        let reporter = session.as_ref().and_then(|s| s.reporter());
        let start = monotonic_now_ns() + 20_000_000;
        let timing = Timing {
            start_ns: start,
            end_ns: start.saturating_add(duration),
        };
        let stop_background = AtomicBool::new(false);
        let cpus = cfg.cpus.clone();
        let pin = move || {
            if !cpus.is_empty() {
                let _ = rtlab_sys::affinity::set_current_thread_affinity(
                    &rtlab_sys::affinity::CpuList::from(cpus.clone()),
                );
            }
        };
        let quickack = cfg.options.quickack;
        let (fwd_stats, rev_stats, bg) = std::thread::scope(|scope| {
            let bg = cfg
                .background_traffic
                .then(|| scope.spawn(|| background(&running.peer, &stop_background)));
            let fwd: Vec<_> = forward
                .into_iter()
                .enumerate()
                .map(|(i, (p, conn))| {
                    let options = cfg.options.clone();
                    let pin = pin.clone();
                    let report = reporter.clone().map(|r| (r, i as u16));
                    scope.spawn(move || {
                        pin();
                        match conn {
                            Conn::Tcp(s) => {
                                stream::run_tcp(s, &p, &timing, &options, false, report)
                            }
                            Conn::Udp(s) => stream::run_udp(s, &p, &timing, report),
                        }
                    })
                })
                .collect();
            let rev: Vec<_> = reverse
                .into_iter()
                .map(|(p, s)| {
                    let pin = pin.clone();
                    scope.spawn(move || {
                        pin();
                        stream::receive_reverse(s, timing.end_ns, quickack, &p)
                    })
                })
                .collect();
            while fwd.iter().any(|h| !h.is_finished()) || rev.iter().any(|h| !h.is_finished()) {
                let now = monotonic_now_ns();
                observer.tick(
                    Nanos(now.saturating_sub(start).min(duration)),
                    common.duration,
                    &[],
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            stop_background.store(true, Ordering::Relaxed);
            let join = |h: std::thread::ScopedJoinHandle<'_, Result<StreamStats, String>>| {
                h.join()
                    .unwrap_or_else(|_| Err("stream thread panicked".into()))
            };
            let fwd: Vec<_> = fwd.into_iter().map(join).collect();
            let rev: Vec<_> = rev.into_iter().map(join).collect();
            let bg = bg.map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())));
            (fwd, rev, bg)
        });
        if let Some(Err(e)) = bg {
            outcome.warn(observer, format!("background traffic stopped: {e}"));
        }
        if let Some(session) = session {
            session.finish(&measured, observer, &mut outcome);
        }
        let sysctls = tcp_sysctls();
        let mut all = LatencyHistogram::new();
        let labels = unique_labels(&cfg.streams);
        let rlabels = unique_labels(&cfg.reverse);
        let mut trimmed = 0u64;
        let results = labels
            .iter()
            .zip(&cfg.streams)
            .zip(fwd_stats)
            .map(|((l, s), r)| (l.clone(), s, r))
            .chain(
                rlabels
                    .iter()
                    .zip(&cfg.reverse)
                    .zip(rev_stats)
                    .map(|((l, s), r)| (format!("reverse/{l}"), s, r)),
            );
        for (label, spec, result) in results {
            let stats = result.map_err(LabError::Thread)?;
            trimmed += stats.warmup_trimmed;
            all.merge(&stats.rtt);
            let with = |s: Series| {
                s.with_config("proto", cfg.proto.as_str())
                    .with_config("size_bytes", spec.size)
                    .with_config("period_ns", spec.period.get())
                    .with_config("pad_segments", cfg.pad_segments)
                    .with_config("warmup_ns", warmup)
                    .with_config(
                        "deadline_ns",
                        cfg.deadline.map_or(spec.period.get(), |d| d.get()),
                    )
                    .with_config("policy", policy.as_str())
                    .with_config("prio", prio)
                    .with_config("options", cfg.options.to_json())
                    .with_config("topology", running.facts.clone())
                    .with_config("background_traffic", cfg.background_traffic)
                    .with_config("counters", stats.counters().to_json())
                    .with_config("sysctls", sysctls.clone())
            };
            if stats.lost > 0 {
                outcome.warn(
                    observer,
                    format!(
                        "{label}: {} of {} messages never acknowledged",
                        stats.lost, stats.sent
                    ),
                );
            }
            if !stats.rtt.is_empty() {
                outcome.series.push(with(Series::distribution(
                    format!("{}{label}/rtt", self.prefix),
                    "rtt",
                    &stats.rtt,
                )?));
            }
            if !stats.lateness.is_empty() {
                outcome.series.push(with(Series::distribution(
                    format!("{}{label}/send_lateness", self.prefix),
                    "send_lateness",
                    &stats.lateness,
                )?));
            }
        }
        if trimmed > 0 {
            outcome.warn(
                observer,
                format!(
                    "warm-up: messages scheduled in the first {} of each stream are not recorded ({trimmed} in all)",
                    Nanos(warmup)
                ),
            );
        }
        if !all.is_empty() {
            outcome.series.push(
                Series::distribution(format!("{}all/rtt", self.prefix), "rtt", &all)?
                    .with_config("proto", cfg.proto.as_str())
                    .with_config("streams", cfg.streams.len() + cfg.reverse.len())
                    .with_config("topology", running.facts.clone())
                    .with_config("sysctls", sysctls),
            );
        }
        drop(running);
        Ok(outcome)
    }
}

enum Conn {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// Configuration of `rtlab net pingpong`.
#[derive(Debug, Clone)]
pub struct PingPongConfig {
    /// Where the peer is.
    pub topology: Topology,
    /// TCP or UDP.
    pub proto: Proto,
    /// Message size (at least 40 bytes are sent: rtlab's header).
    pub size: usize,
    /// Socket options.
    pub options: SocketOptions,
    /// Scheduling of the measuring thread.
    pub policy: Policy,
    /// Its priority.
    pub prio: u32,
    /// CPUs it may use (empty: any).
    pub cpus: Vec<usize>,
    /// Attribute the slowest round trips (`--explain`): a reply wait, the peer named.
    pub explain: Option<crate::explain::ExplainSettings>,
}

/// `rtlab net pingpong`: one message in flight, echoed whole.
#[derive(Debug, Clone)]
pub struct PingPong {
    config: PingPongConfig,
    prefix: String,
}

impl PingPong {
    /// Checks the configuration.
    pub fn new(config: PingPongConfig) -> Result<PingPong, LabError> {
        needs_root_for(&config.topology)?;
        if config.proto == Proto::Udp && config.size > 65_000 {
            return Err(LabError::bad(
                "size",
                "a UDP message must fit one datagram (at most 65000 bytes)",
            ));
        }
        if config.size == 0 || config.size > 64 << 20 {
            return Err(LabError::bad("size", "must be 1 byte to 64MiB"));
        }
        Ok(PingPong {
            config,
            prefix: String::new(),
        })
    }

    /// Prefixes every series name.
    pub fn with_series_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }
}

impl Experiment for PingPong {
    fn command(&self) -> &'static str {
        "net"
    }

    fn run(&self, common: &CommonConfig, observer: &mut dyn Observer) -> Result<Outcome, LabError> {
        let cfg = &self.config;
        let mut outcome = Outcome::default();
        let (policy, prio) = outcome.effective_sched(
            observer,
            cfg.policy,
            cfg.prio,
            "so every round trip waits behind time-sharing threads",
        );
        let running = topology::bring_up(&cfg.topology).map_err(LabError::Setup)?;
        let duration = common.duration.get();
        let warmup = (duration / 10).min(500_000_000);
        let measured: Vec<usize> = if cfg.cpus.is_empty() {
            rtlab_sys::affinity::usable_cpus().as_slice().to_vec()
        } else {
            cfg.cpus.clone()
        };
        let session = cfg.explain.as_ref().map(|settings| {
            crate::explain::Session::start(
                settings,
                &measured,
                vec![format!("{}pingpong/rtt", self.prefix)],
                &[crate::explain::Wait::Reply],
                observer,
                &mut outcome,
            )
        });
        let reporter = session.as_ref().and_then(|s| s.reporter());
        let start = monotonic_now_ns();
        let end = start.saturating_add(duration);
        let peer = running.peer.clone();
        let (hist, lost) = std::thread::scope(|scope| {
            let report = reporter.as_ref().map(|r| (r, 0u16));
            let h = scope.spawn(move || -> Result<(LatencyHistogram, u64), String> {
                if !cfg.cpus.is_empty() {
                    let _ = rtlab_sys::affinity::set_current_thread_affinity(
                        &rtlab_sys::affinity::CpuList::from(cfg.cpus.clone()),
                    );
                }
                let _ = rtlab_sys::sched::set_current_thread_scheduler(policy, prio);
                match cfg.proto {
                    Proto::Tcp => {
                        let hello = Hello {
                            role: Role::Pingpong,
                            options: cfg.options.clone(),
                            policy,
                            prio,
                            plan: None,
                            pad_segments: 0,
                            token: None, // connect() sets the peer's
                        };
                        let s = connect(&peer, &hello)?;
                        let quickack = cfg.options.quickack;
                        stream::pingpong_tcp(s, cfg.size, (end, start + warmup), quickack, report)
                    }
                    Proto::Udp => {
                        let s = connect_udp(peer.addr, &cfg.options)?;
                        stream::pingpong_udp(s, cfg.size, (end, start + warmup), report)
                    }
                }
            });
            while !h.is_finished() {
                observer.tick(
                    Nanos((monotonic_now_ns() - start).min(duration)),
                    common.duration,
                    &[],
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            h.join()
                .unwrap_or_else(|_| Err("ping-pong thread panicked".into()))
        })
        .map_err(|e| {
            if e.starts_with("cannot connect") || e.starts_with("no answer") {
                LabError::Setup(e)
            } else {
                LabError::Thread(e)
            }
        })?;
        if let Some(session) = session {
            session.finish(&measured, observer, &mut outcome);
        }
        if lost > 0 {
            outcome.warn(
                observer,
                format!("pingpong: {lost} UDP replies lost (200 ms timeout)"),
            );
        }
        if !hist.is_empty() {
            outcome.series.push(
                Series::distribution(format!("{}pingpong/rtt", self.prefix), "rtt", &hist)?
                    .with_config("proto", cfg.proto.as_str())
                    .with_config("size_bytes", cfg.size)
                    .with_config("wire_bytes", cfg.size.max(wire::HEADER_LEN))
                    .with_config("policy", policy.as_str())
                    .with_config("prio", prio)
                    .with_config("options", cfg.options.to_json())
                    .with_config("topology", running.facts.clone())
                    .with_config("lost", lost)
                    .with_config("warmup_ns", warmup)
                    .with_config("sysctls", tcp_sysctls()),
            );
        }
        drop(running);
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_specs_parse_as_written() {
        let s: StreamSpec = "120KiB@50ms".parse().unwrap();
        assert_eq!(
            (s.size, s.period, s.label.as_str()),
            (120 << 10, Nanos::from_millis(50), "120KiB@50ms")
        );
        for bad in ["", "1KiB", "@50ms", "1KiB@", "0@1ms", "1KiB@10us", "x@1ms"] {
            assert!(bad.parse::<StreamSpec>().is_err(), "{bad}");
        }
        let labels = unique_labels(&["1KiB@1ms".parse().unwrap(), "1KiB@1ms".parse().unwrap()]);
        assert_eq!(labels, ["1KiB@1ms", "1KiB@1ms#2"]);
    }
}
