//! `rtlab net run`: periodic streams to the peer (each with its own sender thread on an
//! absolute schedule and its own connection), reverse streams the peer sends, optional bulk
//! background traffic; connected first, then started on one schedule.

use super::peer::{Hello, Role};
use super::stream::{self, Plan, SocketOptions, StreamStats, Timing};
use super::{
    connect, connect_udp, needs_root_for, tcp_sysctls, topology, wire, Proto, StreamSpec, Topology,
};
use crate::harness::{CommonConfig, Observer};
use crate::{Experiment, LabError, Outcome};
use rtlab_stats::result::Series;
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sys::sched::Policy;
use rtlab_sys::time::monotonic_now_ns;
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

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

impl NetRun {
    /// Checks what can be checked before anything starts.
    pub fn new(config: NetRunConfig) -> Result<NetRun, LabError> {
        needs_root_for(&config.topology)?;
        if config.streams.is_empty() && config.reverse.is_empty() {
            return Err(LabError::bad(
                "streams",
                "is needed: name at least one (e.g. --stream 1KiB@10ms), or a mix (--profile rt-java-poc)",
            ));
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
                topology::netns_sysctl(s).map_err(|e| LabError::bad("sysctls", e.to_string()))?;
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
pub(super) fn unique_labels(specs: &[StreamSpec]) -> Vec<String> {
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
) -> Result<u64, LabError> {
    use std::io::Write;
    let hello = Hello {
        role: Role::Bulk,
        options: SocketOptions::default(),
        policy: Policy::Other,
        prio: 0,
        plan: None,
        pad_segments: 0,
        token: None, // connect() sets the peer's
        udp_port: None,
    };
    let mut s = connect(peer, &hello)?;
    let chunk = vec![0u8; 64 << 10];
    let mut bytes = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && !rtlab_sys::signal::interrupted() {
        s.write_all(&chunk)
            .map_err(|e| LabError::Net(format!("background traffic: {e}")))?;
        bytes += chunk.len() as u64;
    }
    Ok(bytes)
}

/// The connections of a run, made before any stream starts.
struct Connections {
    /// This side's streams: their plans and sockets.
    forward: Vec<(Plan, Conn)>,
    /// The peer's streams: their plans and the connections they come in on.
    reverse: Vec<(Plan, TcpStream)>,
}

/// What the stream threads measured (in the order of the configuration), and the background
/// traffic's end.
struct Measured {
    forward: Vec<Result<StreamStats, LabError>>,
    reverse: Vec<Result<StreamStats, LabError>>,
    background: Option<Result<u64, LabError>>,
}

impl NetRun {
    /// A stream's plan: the run's schedule and priority, the stream's size and period.
    fn plan(
        &self,
        i: usize,
        spec: &StreamSpec,
        warmup: u64,
        (policy, prio): (Policy, u32),
    ) -> Plan {
        let cfg = &self.config;
        Plan {
            stream: i as u16,
            size: spec.size.max(wire::HEADER_LEN),
            period_ns: spec.period.get(),
            pad_segments: cfg.pad_segments,
            warmup_ns: warmup,
            deadline_ns: cfg.deadline.map_or(spec.period.get(), |d| d.get()),
            policy,
            prio,
        }
    }

    /// Connects every stream (a hello each on TCP, a probe on UDP), the peer's included.
    fn connect_all(
        &self,
        peer: &topology::PeerAddr,
        warmup: u64,
        sched: (Policy, u32),
    ) -> Result<Connections, LabError> {
        let cfg = &self.config;
        let hello = |role, plan| Hello {
            role,
            options: cfg.options.clone(),
            policy: sched.0,
            prio: sched.1,
            plan,
            pad_segments: cfg.pad_segments,
            token: None, // connect() sets the peer's
            udp_port: None,
        };
        let mut forward = Vec::new();
        for (i, spec) in cfg.streams.iter().enumerate() {
            let conn = match cfg.proto {
                Proto::Tcp => connect(peer, &hello(Role::Stream, None)).map(Conn::Tcp),
                Proto::Udp => connect_udp(peer, &cfg.options).map(|(s, c)| Conn::Udp(s, c)),
            }?;
            forward.push((self.plan(i, spec, warmup, sched), conn));
        }
        let mut reverse = Vec::new();
        for (i, spec) in cfg.reverse.iter().enumerate() {
            let p = self.plan(1000 + i, spec, warmup, sched);
            let s = connect(peer, &hello(Role::Reverse, Some(p.clone())))?;
            reverse.push((p, s));
        }
        Ok(Connections { forward, reverse })
    }

    /// Runs every stream on one schedule (and the background traffic), ticking the
    /// observer, until all have ended.
    fn measure(
        &self,
        conns: Connections,
        peer: &topology::PeerAddr,
        (timing, duration): (Timing, u64),
        reporter: Option<rtlab_trace::Reporter>,
        (common, observer): (&CommonConfig, &mut dyn Observer),
    ) -> Measured {
        use std::sync::atomic::{AtomicBool, Ordering};
        let cfg = &self.config;
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
        std::thread::scope(|scope| {
            let bg = cfg
                .background_traffic
                .then(|| scope.spawn(|| background(peer, &stop_background)));
            let fwd: Vec<_> = conns
                .forward
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
                            Conn::Udp(s, _session) => stream::run_udp(s, &p, &timing, report),
                        }
                    })
                })
                .collect();
            let rev: Vec<_> = conns
                .reverse
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
                    Nanos(now.saturating_sub(timing.start_ns).min(duration)),
                    common.duration,
                    &[],
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            stop_background.store(true, Ordering::Relaxed);
            let join = |h: std::thread::ScopedJoinHandle<'_, Result<StreamStats, LabError>>| {
                h.join()
                    .unwrap_or_else(|_| Err(LabError::Net("stream thread panicked".into())))
            };
            Measured {
                forward: fwd.into_iter().map(join).collect(),
                reverse: rev.into_iter().map(join).collect(),
                background: bg.map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(LabError::Net("panicked".into())))
                }),
            }
        })
    }

    /// The series of each stream (`<label>/rtt`, `<label>/send_lateness`, the peer's under
    /// `reverse/`) and of all of them (`all/rtt`), with their warnings.
    fn record(
        &self,
        measured: Measured,
        (warmup, sched): (u64, (Policy, u32)),
        facts: &serde_json::Value,
        (outcome, observer): (&mut Outcome, &mut dyn Observer),
    ) -> Result<(), LabError> {
        let cfg = &self.config;
        let sysctls = tcp_sysctls();
        let mut all = LatencyHistogram::new();
        let labels = unique_labels(&cfg.streams);
        let rlabels = unique_labels(&cfg.reverse);
        let mut trimmed = 0u64;
        let results = labels
            .iter()
            .zip(&cfg.streams)
            .zip(measured.forward)
            .map(|((l, s), r)| (l.clone(), s, r))
            .chain(
                rlabels
                    .iter()
                    .zip(&cfg.reverse)
                    .zip(measured.reverse)
                    .map(|((l, s), r)| (format!("reverse/{l}"), s, r)),
            );
        for (label, spec, result) in results {
            let stats = result.map_err(|e| LabError::Measuring(Box::new(e)))?;
            trimmed += stats.counters.warmup_trimmed;
            all.merge(&stats.rtt);
            let with = |s: Series| {
                let s = s
                    .with_config("proto", cfg.proto.as_str())
                    .with_config("size_bytes", spec.size)
                    .with_config("period_ns", spec.period.get())
                    .with_config("pad_segments", cfg.pad_segments)
                    .with_config("warmup_ns", warmup)
                    .with_config(
                        "deadline_ns",
                        cfg.deadline.map_or(spec.period.get(), |d| d.get()),
                    )
                    .with_config("policy", sched.0.as_str())
                    .with_config("prio", sched.1)
                    .with_config("options", cfg.options.to_json())
                    .with_config("topology", facts.clone())
                    .with_config("background_traffic", cfg.background_traffic)
                    .with_config("sysctls", sysctls.clone());
                stats.counters().into_config_of(s)
            };
            if stats.counters.lost > 0 {
                outcome.warn(
                    observer,
                    format!(
                        "{label}: {} of {} messages never acknowledged",
                        stats.counters.lost, stats.counters.sent
                    ),
                );
            }
            for (metric, hist) in [("rtt", &stats.rtt), ("send_lateness", &stats.lateness)] {
                if !hist.is_empty() {
                    outcome.series.push(with(Series::distribution(
                        format!("{}{label}/{metric}", self.prefix),
                        metric,
                        hist,
                    )?));
                }
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
                    .with_config("topology", facts.clone())
                    .with_config("sysctls", sysctls),
            );
        }
        Ok(())
    }
}

impl Experiment for NetRun {
    fn command(&self) -> &'static str {
        "net"
    }

    fn run(&self, common: &CommonConfig, observer: &mut dyn Observer) -> Result<Outcome, LabError> {
        let cfg = &self.config;
        let mut outcome = Outcome::default();
        let sched = outcome.effective_sched(
            observer,
            cfg.policy,
            cfg.prio,
            "so every message waits behind time-sharing threads",
        );
        let running = topology::bring_up(&cfg.topology)?;
        let duration = common.duration.get();
        let warmup = cfg
            .warmup
            .map_or((duration / 5).min(1_000_000_000), |w| w.get());
        // Connect everything first, then start every stream on one schedule.
        let conns = self.connect_all(&running.peer, warmup, sched)?;
        let measured_cpus: Vec<usize> = if cfg.cpus.is_empty() {
            rtlab_sys::affinity::usable_cpus().as_slice().to_vec()
        } else {
            cfg.cpus.clone()
        };
        let session = cfg.explain.as_ref().map(|settings| {
            crate::explain::Session::start(
                settings,
                &measured_cpus,
                unique_labels(&cfg.streams)
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
        let measured = self.measure(
            conns,
            &running.peer,
            (timing, duration),
            reporter,
            (common, observer),
        );
        if let Some(Err(e)) = &measured.background {
            outcome.warn(observer, format!("background traffic stopped: {e}"));
        }
        if let Some(session) = session {
            session.finish(&measured_cpus, observer, &mut outcome);
        }
        self.record(
            measured,
            (warmup, sched),
            &running.facts,
            (&mut outcome, observer),
        )?;
        drop(running);
        Ok(outcome)
    }
}

enum Conn {
    Tcp(TcpStream),
    /// The datagram socket, and the connection holding its session open on the peer.
    Udp(UdpSocket, TcpStream),
}
