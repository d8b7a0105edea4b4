//! `rtlab ipc`: message passing between two processes, rtlab's shared-memory channel against
//! the kernel's own mechanisms (seed 003: "may a robust-mutex queue reach POSIX mq?").
//!
//! Per mechanism and message size: `rtt`, a ping-pong with blocking waits (the real-time
//! case), as a distribution; `throughput`, messages per second one way (the receiver counts
//! until a stop message and acknowledges the count). The parent and the forked child are
//! pinned to two CPUs (or one, `same_cpu`).

use crate::harness::{CommonConfig, Observer};
use crate::mutex_impls::enter;
use crate::{Experiment, LabError, Outcome};
pub use rtlab_ipc::peer::Mechanism;
use rtlab_ipc::peer::{with_peer, ChildPlacement, PeerRole, DATA, STOP};
use rtlab_stats::result::{Series, Unit};
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sys::sched::Policy;
use rtlab_sys::time::monotonic_now_ns;

/// Series names this experiment emits (for help text).
pub const SERIES_HELP: &str = "<mechanism>/rtt (metric rtt, a distribution), <mechanism>/oneway (metric \
oneway: send-to-receive latency of messages paced 200 us apart, a distribution) and <mechanism>/throughput \
(metric throughput, ops/s) for mechanism in rtlab-shm (spsc ring), rtlab-shm-mpsc, rtlab-shm-mutex-condvar, \
rtlab-shm-mutex-semaphore, posix-mq, sysv-msg, pipe, unix-stream, unix-dgram, eventfd-shm, and with \
--busy-poll rtlab-shm-busy; with several --size values the size is appended (rtlab-shm/rtt/1KiB)";

/// Configuration of an ipc run.
#[derive(Debug, Clone)]
pub struct IpcConfig {
    /// Mechanisms to compare.
    pub mechanisms: Vec<Mechanism>,
    /// Message sizes in bytes.
    pub sizes: Vec<usize>,
    /// CPU of the parent and of the child.
    pub cpus: (usize, usize),
    /// Scheduling of both processes.
    pub policy: Policy,
    /// Priority.
    pub prio: u32,
    /// Attribute late round trips and late one-way messages to causes (`--explain`).
    pub explain: Option<crate::explain::ExplainSettings>,
}

/// The ipc experiment.
#[derive(Debug, Clone)]
pub struct IpcExperiment {
    config: IpcConfig,
    prefix: String,
}

impl IpcExperiment {
    /// Validates the configuration.
    pub fn new(config: IpcConfig) -> Result<Self, LabError> {
        if config.mechanisms.is_empty() || config.sizes.is_empty() {
            return Err(LabError::Config("nothing to measure".into()));
        }
        if let Some(s) = config
            .sizes
            .iter()
            .find(|&&s| !(16..=(64 << 10)).contains(&s))
        {
            return Err(LabError::bad(
                "sizes",
                format!("{s}: use 16 bytes to 64KiB"),
            ));
        }
        if config.mechanisms.iter().any(|m| m.busy_polls()) {
            crate::watchdog::check_spinner_prio(config.policy, config.prio, "busy-polling ends")?;
        }
        Ok(IpcExperiment {
            config,
            prefix: String::new(),
        })
    }
}

/// One plain sentence for the survey: rtlab-shm against posix-mq (single size, no suffix).
pub fn reading(series: &[Series], prefix: &str) -> Option<String> {
    let get = |name: &str, pick: fn(&Series) -> Option<f64>| {
        let full = format!("{prefix}{name}");
        series.iter().find(|s| s.name == full).and_then(pick)
    };
    let (shm, mq) = (
        get("rtlab-shm/rtt", |s| s.p50)?,
        get("posix-mq/rtt", |s| s.p50)?,
    );
    let (shm_tp, mq_tp) = (
        get("rtlab-shm/throughput", |s| s.value)?,
        get("posix-mq/throughput", |s| s.value)?,
    );
    Some(format!(
        "process-to-process round trip (p50) {} through rtlab's shared-memory channel vs {} through POSIX mq ({:.2}x); \
         throughput {:.1}x",
        Nanos(shm as u64),
        Nanos(mq as u64),
        shm / mq.max(1.0),
        shm_tp / mq_tp.max(1.0)
    ))
}

/// Compact size label for series names (`64B`, `1KiB`).
pub fn size_label(bytes: usize) -> String {
    if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{}KiB", bytes / 1024)
    } else {
        format!("{bytes}B")
    }
}

/// Runs `f` on a fresh thread, so pinning and real-time scheduling of the parent side never
/// stick to the caller's thread (regression: the survey's main thread was left SCHED_FIFO 50
/// on CPU 0 after the ipc stage, and stages after it read its timer slack as 0).
fn on_own_thread<T: Send>(f: impl FnOnce() -> Result<T, LabError> + Send) -> Result<T, LabError> {
    std::thread::scope(|s| {
        s.spawn(f)
            .join()
            .map_err(|_| LabError::Panicked("ipc measuring thread".into()))?
    })
}

fn placement(cfg: &IpcConfig) -> ChildPlacement {
    ChildPlacement {
        cpu: cfg.cpus.1,
        policy: cfg.policy,
        prio: cfg.prio,
    }
}

fn rtt_phase(
    mechanism: Mechanism,
    size: usize,
    cfg: &IpcConfig,
    budget: u64,
    hist: &mut LatencyHistogram,
    report: crate::explain::Report<'_>,
) -> Result<(), LabError> {
    let measured = with_peer(
        mechanism,
        size,
        placement(cfg),
        PeerRole::Echo,
        |mut end| -> Result<_, LabError> {
            enter(cfg.cpus.0, cfg.policy, cfg.prio)?;
            let tid = rtlab_sys::futex::current_tid() as i64;
            let (mut msg, mut buf) = (vec![DATA; size], vec![0u8; size]);
            let mut local = LatencyHistogram::new();
            let end_at = monotonic_now_ns() + budget;
            let mut n = 0u64;
            while (monotonic_now_ns() < end_at || n < 10) && !rtlab_sys::signal::interrupted() {
                msg[1..9].copy_from_slice(&n.to_le_bytes());
                let t0 = monotonic_now_ns();
                end.send(&msg)?;
                end.recv(&mut buf)?;
                let t1 = monotonic_now_ns();
                crate::explain::report_wait(report, crate::explain::Wait::Reply, tid, t0, t1);
                local.record(Nanos(t1 - t0));
                if buf[1..9] != msg[1..9] {
                    return Err(LabError::Protocol(
                        "echo returned a different message".into(),
                    ));
                }
                n += 1;
            }
            msg[0] = STOP;
            end.send(&msg)?;
            end.recv(&mut buf)?;
            Ok(local)
        },
    )?;
    hist.merge(&measured);
    Ok(())
}

/// What one mechanism x size measured.
#[derive(Default)]
struct Measured {
    rtt: LatencyHistogram,
    oneway: LatencyHistogram,
    rates: Vec<f64>,
    failed: Option<LabError>,
}

/// Period of the paced sends of the oneway phase: the receiver sleeps between messages, as a
/// real-time consumer does.
const ONEWAY_INTERVAL_NS: u64 = 200_000;

fn oneway_phase(
    mechanism: Mechanism,
    size: usize,
    cfg: &IpcConfig,
    budget: u64,
    hist: &mut LatencyHistogram,
    report: crate::explain::Report<'_>,
) -> Result<(), LabError> {
    let count = (budget / ONEWAY_INTERVAL_NS).max(10);
    let role = PeerRole::Pace {
        count,
        interval_ns: ONEWAY_INTERVAL_NS,
    };
    let measured = with_peer(
        mechanism,
        size,
        placement(cfg),
        role,
        |mut end| -> Result<_, LabError> {
            enter(cfg.cpus.0, cfg.policy, cfg.prio)?;
            let tid = rtlab_sys::futex::current_tid() as i64;
            let mut buf = vec![0u8; size];
            let mut local = LatencyHistogram::new();
            for expected in 0..count {
                end.recv(&mut buf)?;
                let now = monotonic_now_ns();
                let seq = u64::from_le_bytes(buf[1..9].try_into().expect("8 bytes"));
                let sent = u64::from_le_bytes(buf[9..17].try_into().expect("8 bytes"));
                if seq != expected {
                    return Err(LabError::Protocol(format!(
                        "oneway: message {seq} arrived where {expected} was due"
                    )));
                }
                crate::explain::report_wait(report, crate::explain::Wait::Notify, tid, sent, now);
                local.record(Nanos(now.saturating_sub(sent)));
            }
            Ok(local)
        },
    )?;
    hist.merge(&measured);
    Ok(())
}

fn throughput_phase(
    mechanism: Mechanism,
    size: usize,
    cfg: &IpcConfig,
    budget: u64,
) -> Result<f64, LabError> {
    with_peer(
        mechanism,
        size,
        placement(cfg),
        PeerRole::Count,
        |mut end| -> Result<_, LabError> {
            enter(cfg.cpus.0, cfg.policy, cfg.prio)?;
            let (mut msg, mut buf) = (vec![DATA; size], vec![0u8; size]);
            let start = monotonic_now_ns();
            let mut sent = 0u64;
            while (monotonic_now_ns() < start + budget || sent < 100)
                && !rtlab_sys::signal::interrupted()
            {
                for _ in 0..64 {
                    end.send(&msg)?;
                }
                sent += 64;
            }
            msg[0] = STOP;
            end.send(&msg)?;
            end.recv(&mut buf)?;
            let elapsed = monotonic_now_ns() - start;
            let counted = u64::from_le_bytes(buf[1..9].try_into().expect("8 bytes"));
            if counted != sent {
                return Err(LabError::Protocol(format!(
                    "sent {sent} messages, the receiver counted {counted}"
                )));
            }
            Ok(counted as f64 / (elapsed as f64 / 1e9))
        },
    )
}

impl IpcExperiment {
    /// Prefixes every series name (the survey's `ipc/`).
    pub fn with_series_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }
}

impl Experiment for IpcExperiment {
    fn command(&self) -> &'static str {
        "ipc"
    }

    fn run(&self, common: &CommonConfig, observer: &mut dyn Observer) -> Result<Outcome, LabError> {
        let mut outcome = Outcome::default();
        let (policy, prio) = outcome.effective_sched(
            observer,
            self.config.policy,
            self.config.prio,
            "so time-sharing adds to every round trip",
        );
        let cfg = IpcConfig {
            policy,
            prio,
            ..self.config.clone()
        };
        let cells: Vec<(Mechanism, usize)> = cfg
            .mechanisms
            .iter()
            .flat_map(|&m| cfg.sizes.iter().map(move |&s| (m, s)))
            .collect();
        // Two rounds (interleaved), each phase gets a quarter of a cell's share per round.
        let share = common.duration.get() / (cells.len() as u64 * 2).max(1);
        let mut results: Vec<Measured> = cells.iter().map(|_| Measured::default()).collect();
        let several = cfg.sizes.len() > 1;
        let suffix = |size: usize| {
            if several {
                format!("/{}", size_label(size))
            } else {
                String::new()
            }
        };
        let mut measured_cpus = vec![cfg.cpus.0, cfg.cpus.1];
        measured_cpus.dedup();
        // Series 2i: cell i's round trips, 2i + 1: its one-way messages.
        let mut session = cfg.explain.as_ref().map(|settings| {
            crate::explain::Session::start(
                settings,
                &measured_cpus,
                cells
                    .iter()
                    .flat_map(|&(m, size)| {
                        ["rtt", "oneway"].map(|what| {
                            format!("{}{}/{what}{}", self.prefix, m.name(), suffix(size))
                        })
                    })
                    .collect(),
                &[crate::explain::Wait::Reply, crate::explain::Wait::Notify],
                observer,
                &mut outcome,
            )
        });
        let reporter = session.as_ref().and_then(|s| s.reporter());
        let began = monotonic_now_ns();
        // The latency phases of every cell first, traced when explaining; then the throughput
        // phases, which saturate both CPUs with events nobody explains (traced, they only
        // overflowed the recorder's rings and hid the latency phases' events).
        for latency in [true, false] {
            for _round in 0..2 {
                for (i, &(m, size)) in cells.iter().enumerate() {
                    if rtlab_sys::signal::interrupted() || results[i].failed.is_some() {
                        continue;
                    }
                    let cell = &mut results[i];
                    let rtt_report = reporter.as_ref().map(|r| (r, 2 * i as u16));
                    let oneway_report = reporter.as_ref().map(|r| (r, 2 * i as u16 + 1));
                    let r = on_own_thread(|| {
                        if latency {
                            rtt_phase(m, size, &cfg, share * 2 / 5, &mut cell.rtt, rtt_report)?;
                            oneway_phase(m, size, &cfg, share / 5, &mut cell.oneway, oneway_report)
                                .map(|()| None)
                        } else {
                            throughput_phase(m, size, &cfg, share * 2 / 5).map(Some)
                        }
                    });
                    match r {
                        Ok(Some(rate)) => results[i].rates.push(rate),
                        Ok(None) => {}
                        Err(e) => results[i].failed = Some(e),
                    }
                    observer.tick(Nanos(monotonic_now_ns() - began), common.duration, &[]);
                }
            }
            if latency {
                if let Some(session) = session.take() {
                    session.finish(&measured_cpus, observer, &mut outcome);
                }
            }
        }
        for (i, &(m, size)) in cells.iter().enumerate() {
            self.push_cell(
                &cfg,
                (m, size),
                &suffix(size),
                &results[i],
                observer,
                &mut outcome,
            )?;
        }
        Ok(outcome)
    }
}

impl IpcExperiment {
    /// One cell's series (round trips, one-way messages, the median throughput), or its
    /// warning when it failed.
    fn push_cell(
        &self,
        cfg: &IpcConfig,
        (m, size): (Mechanism, usize),
        suffix: &str,
        measured: &Measured,
        observer: &mut dyn Observer,
        outcome: &mut Outcome,
    ) -> Result<(), LabError> {
        let Measured {
            rtt: hist,
            oneway,
            rates,
            failed,
        } = measured;
        if let Some(e) = failed {
            outcome.warn(observer, format!("{}{suffix}: skipped: {e}", m.name()));
            return Ok(());
        }
        if hist.is_empty() {
            return Ok(());
        }
        let with = |s: Series| {
            s.with_config("size_bytes", size)
                .with_config("cpus", vec![cfg.cpus.0, cfg.cpus.1])
                .with_config("policy", cfg.policy.as_str())
                .with_config("prio", cfg.prio)
                .with_config("busy_poll", m.busy_polls())
        };
        outcome.series.push(with(Series::distribution(
            format!("{}{}/rtt{suffix}", self.prefix, m.name()),
            "rtt",
            hist,
        )?));
        if !oneway.is_empty() {
            outcome.series.push(
                with(Series::distribution(
                    format!("{}{}/oneway{suffix}", self.prefix, m.name()),
                    "oneway",
                    oneway,
                )?)
                .with_config("interval_ns", ONEWAY_INTERVAL_NS),
            );
        }
        let mut sorted = rates.clone();
        sorted.sort_by(f64::total_cmp);
        if let Some(&median) = sorted.get(sorted.len() / 2) {
            outcome.series.push(with(Series::value(
                format!("{}{}/throughput{suffix}", self.prefix, m.name()),
                "throughput",
                Unit::OpsPerSec,
                median,
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::NullObserver;

    #[test]
    fn every_mechanism_round_trips_and_streams() {
        let cpus = rtlab_sys::affinity::usable_cpus();
        let c = cpus.as_slice();
        let exp = IpcExperiment::new(IpcConfig {
            mechanisms: Mechanism::every(),
            sizes: vec![64],
            cpus: (c[0], c[1 % c.len()]),
            policy: Policy::Other,
            prio: 0,
            explain: None,
        })
        .unwrap();
        let common = CommonConfig {
            duration: Nanos::from_millis(700),
            loads: vec![],
            mlock: false,
            dma_latency: false,
        };
        let out = exp.run(&common, &mut NullObserver).unwrap();
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        for m in Mechanism::every() {
            let rtt = out
                .series
                .iter()
                .find(|s| s.name == format!("{}/rtt", m.name()))
                .expect("rtt");
            assert!(rtt.count.unwrap() >= 10 && rtt.p50.unwrap() > 0.0);
            let tp = out
                .series
                .iter()
                .find(|s| s.name == format!("{}/throughput", m.name()))
                .expect("throughput");
            // Measured, not bounded (a rate beside a storm of other work is no test of it).
            let ops = tp.value.unwrap();
            assert!(ops.is_finite() && ops > 0.0, "{}: {ops}", m.name());
        }
    }
}
