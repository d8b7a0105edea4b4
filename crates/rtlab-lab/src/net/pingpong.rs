//! `rtlab net pingpong`: one message in flight, echoed whole by the peer (as sockperf's
//! ping-pong), over TCP or UDP; each round trip measured from the send.

use super::peer::{Hello, Role};
use super::stream::SocketOptions;
use super::wire::{Header, Kind, HEADER_LEN};
use super::{connect, connect_udp, needs_root_for, tcp_sysctls, topology, wire, Proto, Topology};
use crate::harness::{CommonConfig, Observer};
use crate::{Experiment, LabError, Outcome};
use rtlab_stats::result::Series;
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sys::sched::Policy;
use rtlab_sys::time::monotonic_now_ns;
use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

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
        let running = topology::bring_up(&cfg.topology)?;
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
        // The run's end and its warmup's, counted from the connection (on a busy machine
        // connecting can take a good part of a short run); so is the progress shown.
        let connected_ns = std::sync::atomic::AtomicU64::new(0);
        let connected_at = &connected_ns;
        let measured_from_now = move || {
            let connected = monotonic_now_ns();
            connected_at.store(connected, std::sync::atomic::Ordering::Relaxed);
            (connected.saturating_add(duration), connected + warmup)
        };
        let peer = running.peer.clone();
        let (hist, lost) = std::thread::scope(|scope| {
            let report = reporter.as_ref().map(|r| (r, 0u16));
            let h = scope.spawn(move || -> Result<(LatencyHistogram, u64), LabError> {
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
                            udp_port: None,
                        };
                        let s = connect(&peer, &hello)?;
                        let quickack = cfg.options.quickack;
                        pingpong_tcp(s, cfg.size, measured_from_now(), quickack, report)
                    }
                    Proto::Udp => {
                        let (s, _session) = connect_udp(&peer, &cfg.options)?;
                        pingpong_udp(s, cfg.size, measured_from_now(), report)
                    }
                }
            });
            while !h.is_finished() {
                let connected = connected_ns.load(std::sync::atomic::Ordering::Relaxed);
                let done = match connected {
                    0 => 0,
                    t => monotonic_now_ns().saturating_sub(t).min(duration),
                };
                observer.tick(Nanos(done), common.duration, &[]);
                std::thread::sleep(Duration::from_millis(100));
            }
            h.join()
                .unwrap_or_else(|_| Err(LabError::Panicked("ping-pong thread".into())))
        })
        .map_err(LabError::of_measuring_thread)?;
        if let Some(session) = session {
            session.finish(&measured, observer, &mut outcome);
        }
        if lost > 0 {
            outcome.warn(
                observer,
                format!("pingpong: {lost} UDP replies lost (200 ms timeout)"),
            );
        }
        if hist.is_empty() {
            return Err(LabError::Setup(format!(
                "pingpong: no round trip completed in {} after the warmup (stopped before one did, or the peer did not answer)",
                Nanos(duration)
            )));
        }
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
        drop(running);
        Ok(outcome)
    }
}

/// Ping-pong over TCP: one message of `size` bytes in flight, echoed whole, until `end_ns`;
/// returns the round-trip distribution (messages sent before `warmup_until_ns` are not
/// recorded, nor reported to the explainer as reply waits).
pub fn pingpong_tcp(
    mut s: TcpStream,
    size: usize,
    (end_ns, warmup_until_ns): (u64, u64),
    quickack: bool,
    report: crate::explain::Report<'_>,
) -> Result<(LatencyHistogram, u64), LabError> {
    let tid = rtlab_sys::futex::current_tid() as i64;
    let total = size.max(HEADER_LEN);
    let mut out = vec![0x5au8; total];
    let mut back = vec![0u8; total];
    let mut hist = LatencyHistogram::new();
    let mut seq = 0u64;
    while monotonic_now_ns() < end_ns && !rtlab_sys::signal::interrupted() {
        let mut h = Header::new(Kind::Echo);
        h.payload = (total - HEADER_LEN) as u32;
        h.seq = seq;
        let t0 = monotonic_now_ns();
        h.sched_ns = t0;
        h.encode(&mut out);
        s.write_all(&out)
            .map_err(|e| LabError::Net(format!("send: {e}")))?;
        s.read_exact(&mut back)
            .map_err(|e| LabError::Net(format!("receive: {e}")))?;
        let now = monotonic_now_ns();
        if Header::decode(&back)?.seq != seq {
            return Err(LabError::Net(
                "the echo carried another sequence number".into(),
            ));
        }
        if quickack {
            let _ = rtlab_sys::net::set_quickack(&s, true);
        }
        if t0 >= warmup_until_ns {
            hist.record(Nanos(now - t0));
            crate::explain::report_wait(report, crate::explain::Wait::Reply, tid, t0, now);
        }
        seq += 1;
    }
    Ok((hist, 0))
}

/// Ping-pong over UDP; a reply missing for 200 ms counts as lost. Returns (rtt, lost).
pub fn pingpong_udp(
    s: UdpSocket,
    size: usize,
    (end_ns, warmup_until_ns): (u64, u64),
    report: crate::explain::Report<'_>,
) -> Result<(LatencyHistogram, u64), LabError> {
    let tid = rtlab_sys::futex::current_tid() as i64;
    let total = size.max(HEADER_LEN);
    if total > 65_000 {
        return Err(LabError::Net(format!(
            "{total}-byte messages do not fit one UDP datagram"
        )));
    }
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(LabError::from)?;
    let mut out = vec![0x5au8; total];
    let mut back = vec![0u8; total + 64];
    let mut hist = LatencyHistogram::new();
    let (mut seq, mut lost) = (0u64, 0u64);
    while monotonic_now_ns() < end_ns && !rtlab_sys::signal::interrupted() {
        let mut h = Header::new(Kind::Echo);
        h.payload = (total - HEADER_LEN) as u32;
        h.seq = seq;
        let t0 = monotonic_now_ns();
        h.encode(&mut out);
        s.send(&out)
            .map_err(|e| LabError::Net(format!("send: {e}")))?;
        loop {
            match s.recv(&mut back) {
                Ok(n) => {
                    // A late reply to an earlier (lost-counted) message is skipped.
                    if Header::decode(&back[..n]).is_ok_and(|r| r.seq == seq) {
                        if t0 >= warmup_until_ns {
                            let now = monotonic_now_ns();
                            hist.record(Nanos(now - t0));
                            crate::explain::report_wait(
                                report,
                                crate::explain::Wait::Reply,
                                tid,
                                t0,
                                now,
                            );
                        }
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    lost += 1;
                    break;
                }
                Err(e) => return Err(LabError::Net(format!("receive: {e}"))),
            }
        }
        seq += 1;
    }
    Ok((hist, lost))
}
