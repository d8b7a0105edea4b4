//! `rtlab noise`: how much of a CPU a busy-spinning thread really gets (oslat's and
//! `rtla osnoise`'s question).
//!
//! A thread that never sleeps (Aeron's, the Disruptor's, a Java spin-wait) has no wakeup
//! latency; what hurts it is the CPU being taken away while it spins. One thread per measured
//! CPU, pinned, reads `CLOCK_MONOTONIC` in a tight loop and histograms the gap between two
//! consecutive reads (every iteration, as oslat does). A gap over the threshold is an
//! interruption: counted, summed (the CPU time the spinner lost), and with `--explain`
//! attributed by the tracer to what held the CPU meanwhile (an IRQ, a softirq, a task that
//! preempted it, a silence of the vCPU).

use crate::harness::{CommonConfig, LiveSeries, Observer};
use crate::wakeup::{timeline_step, StartGate};
use crate::{Experiment, LabError, Outcome};
use rtlab_stats::details::ReadingCauses;
use rtlab_stats::result::Series;
use rtlab_stats::{LatencyHistogram, LiveHistogram, Nanos};
use rtlab_sys::affinity::{set_current_thread_affinity, CpuList};
use rtlab_sys::sched::{set_current_thread_scheduler, Policy};
use rtlab_sys::time::monotonic_now_ns;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Series names this experiment emits (for help text).
pub const SERIES_HELP: &str =
    "cpu0, cpu1, ... (metric loop_gap, one per measured CPU: the time between two clock reads of the spinning loop)";

/// The metric of the series.
pub const METRIC: &str = "loop_gap";

/// The default threshold of an interruption.
pub const DEFAULT_THRESHOLD: Nanos = Nanos::from_micros(10);

const WORKER_STACK: usize = 256 * 1024;
const PREFAULT_STACK: usize = 64 * 1024;
const TICK_NS: u64 = 250_000_000;
/// Iterations between two looks at the abort flag (a relaxed load, but not in every loop).
const ABORT_EVERY: u64 = 4096;

/// Configuration of a noise run.
#[derive(Debug, Clone)]
pub struct NoiseConfig {
    /// One spinning thread per CPU.
    pub cpus: CpuList,
    /// Scheduling policy of the spinning threads.
    pub policy: Policy,
    /// Priority (0 for `other`).
    pub prio: u32,
    /// A gap over this is an interruption (counted, summed, explained).
    pub threshold: Nanos,
    /// Attribute the interruptions (`--explain`).
    pub explain: Option<crate::explain::ExplainSettings>,
}

/// The noise experiment.
#[derive(Debug, Clone)]
pub struct Noise {
    config: NoiseConfig,
    prefix: String,
}

impl Noise {
    /// Validates `config`.
    pub fn new(config: NoiseConfig) -> Result<Self, LabError> {
        if config.cpus.is_empty() {
            return Err(LabError::bad("cpus", "no CPU to measure"));
        }
        if config.threshold.get() < 100 {
            return Err(LabError::bad(
                "threshold",
                "must be at least 100ns (one loop of the spinner takes tens of ns)",
            ));
        }
        let (lo, hi) = config.policy.priority_range();
        if config.prio < lo || config.prio > hi {
            return Err(LabError::bad(
                "prio",
                format!(
                    "{} is outside {lo}-{hi} for policy {}",
                    config.prio, config.policy
                ),
            ));
        }
        crate::watchdog::check_spinner_prio(config.policy, config.prio, "the spinners")?;
        Ok(Noise {
            config,
            prefix: String::new(),
        })
    }

    /// Prefixes every series name (the survey's stage).
    pub fn with_series_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }
}

/// What one spinning thread found.
struct Spun {
    hist: LatencyHistogram,
    /// Gaps over the threshold, and their sum.
    interruptions: u64,
    lost_ns: u64,
    /// Its first clock read (0: it never began), and from it to its last.
    first_ns: u64,
    spun_ns: u64,
    timeline: Vec<u64>,
    setup_error: Option<String>,
}

/// What one spinning thread does.
#[derive(Debug, Clone, Copy)]
struct SpinPlan {
    cpu: usize,
    policy: Policy,
    prio: u32,
    threshold: u64,
    duration: u64,
}

fn spin(
    plan: SpinPlan,
    gate: &StartGate,
    live: &LiveHistogram,
    reporter: Option<(rtlab_trace::Reporter, u16)>,
) -> Spun {
    let mut out = Spun {
        hist: LatencyHistogram::new(),
        interruptions: 0,
        lost_ns: 0,
        first_ns: 0,
        spun_ns: 0,
        timeline: Vec::new(),
        setup_error: None,
    };
    if let Err(e) = set_current_thread_affinity(&CpuList::from(vec![plan.cpu])) {
        out.setup_error = Some(format!("cannot pin to CPU {}: {e}", plan.cpu));
    }
    if let Err(e) = set_current_thread_scheduler(plan.policy, plan.prio) {
        out.setup_error
            .get_or_insert(format!("cannot set {} {}: {e}", plan.policy, plan.prio));
    }
    let tid = rtlab_sys::futex::current_tid() as i64;
    rtlab_sys::mem::prefault_stack(PREFAULT_STACK);
    if out.setup_error.is_some() {
        gate.abort.store(true, Ordering::Relaxed);
    }
    // Allocated before the loop: recording never allocates.
    let step_ns = timeline_step(plan.duration);
    let slots = if plan.duration == u64::MAX {
        0
    } else {
        (plan.duration / step_ns + 2) as usize
    };
    let mut timeline = vec![0u64; slots];
    if !gate.arrive_and_wait() {
        return out;
    }
    let first = monotonic_now_ns();
    out.first_ns = first;
    let end = first.saturating_add(plan.duration);
    let mut last = first;
    let mut n = 0u64;
    // The loop: a vDSO clock read, a subtraction, a histogram increment. A gap over the
    // threshold (rare) also goes to the live view, the timeline and the explainer.
    loop {
        let now = monotonic_now_ns();
        let gap = now - last;
        out.hist.record(Nanos(gap));
        if gap > plan.threshold {
            out.interruptions += 1;
            out.lost_ns += gap;
            live.record(Nanos(gap));
            if let Some(slot) = timeline.get_mut(((last - first) / step_ns) as usize) {
                *slot = (*slot).max(gap);
            }
            if let Some((reporter, series)) = &reporter {
                reporter.report_wait_if_late(
                    rtlab_trace::explain::Wait::Spin,
                    *series,
                    tid,
                    last,
                    now,
                );
            }
        }
        last = now;
        if now >= end {
            break;
        }
        n += 1;
        if n.is_multiple_of(ABORT_EVERY) && gate.aborted() {
            break;
        }
    }
    out.spun_ns = last - first;
    let used = (out.spun_ns / step_ns + 1) as usize;
    timeline.truncate(used.min(timeline.len()));
    out.timeline = timeline;
    out
}

impl Experiment for Noise {
    fn command(&self) -> &'static str {
        "noise"
    }

    fn run(&self, common: &CommonConfig, observer: &mut dyn Observer) -> Result<Outcome, LabError> {
        let cfg = &self.config;
        let mut outcome = Outcome::default();
        let (policy, prio) = outcome.effective_sched(
            observer,
            cfg.policy,
            cfg.prio,
            "so the gaps include time-sharing with every other task",
        );
        let cpus = cfg.cpus.as_slice().to_vec();
        let gate = Arc::new(StartGate::default());
        let live: Vec<LiveSeries> = cpus
            .iter()
            .map(|c| LiveSeries {
                name: format!("{}cpu{c}", self.prefix),
                hist: Arc::new(LiveHistogram::new()),
            })
            .collect();
        let session = cfg.explain.as_ref().map(|settings| {
            crate::explain::Session::start(
                settings,
                &cpus,
                live.iter().map(|l| l.name.clone()).collect(),
                &[crate::explain::Wait::Spin],
                observer,
                &mut outcome,
            )
        });
        let reporter = session.as_ref().and_then(|s| s.reporter());
        let mut handles = Vec::new();
        for (i, &cpu) in cpus.iter().enumerate() {
            let (worker_gate, hist) = (gate.clone(), live[i].hist.clone());
            let plan = SpinPlan {
                cpu,
                policy,
                prio,
                threshold: cfg.threshold.get(),
                duration: common.duration.get(),
            };
            let reporter = reporter.clone().map(|r| (r, i as u16));
            let spawned = std::thread::Builder::new()
                .name(format!("rtlab-noise{cpu}"))
                .stack_size(WORKER_STACK)
                .spawn(move || spin(plan, &worker_gate, &hist, reporter));
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    gate.abort.store(true, Ordering::Relaxed);
                    return Err(LabError::Thread(e.to_string()));
                }
            }
        }
        gate.open_when_ready(cpus.len());
        let began = monotonic_now_ns();
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(std::time::Duration::from_nanos(TICK_NS));
            observer.tick(Nanos(monotonic_now_ns() - began), common.duration, &live);
        }
        let spuns = (handles.into_iter().enumerate())
            .map(|(i, h)| {
                (h.join()).map_err(|_| LabError::Thread(format!("{} panicked", live[i].name)))
            })
            .collect::<Result<Vec<Spun>, LabError>>()?;
        if let Some(session) = session {
            session.finish(&cpus, observer, &mut outcome);
            // From when the spinners began (each sees the gate open a little after it does,
            // later on a busy machine), as their durations count.
            let first = spuns.iter().map(|s| s.first_ns).filter(|&f| f > 0).min();
            outcome.measured_from(first.unwrap_or(began));
        }
        let step = timeline_step(common.duration.get());
        for (i, spun) in spuns.into_iter().enumerate() {
            if let Some(e) = spun.setup_error {
                return Err(LabError::Setup(format!("{}: {e}", live[i].name)));
            }
            let mut series = Series::distribution(&live[i].name, METRIC, &spun.hist)?
                .with_config("cpu", cpus[i])
                .with_config("policy", policy.as_str())
                .with_config("prio", prio)
                .with_config("threshold_ns", cfg.threshold.get())
                .with_config("interruptions", spun.interruptions)
                .with_config("lost_ns", spun.lost_ns)
                .with_config("spun_ns", spun.spun_ns)
                .with_config("available_pct", available_pct(spun.lost_ns, spun.spun_ns))
                .with_config("gaps_over", gaps_over(&spun.hist))
                .with_config("mlock", common.mlock);
            if !spun.timeline.is_empty() {
                series = rtlab_stats::details::Timeline {
                    step_ns: step,
                    max_ns: spun.timeline,
                }
                .into_config_of(series);
            }
            // A spinner has no periods to miss: no `missed` column for it.
            series.missed = None;
            outcome.series.push(series);
        }
        Ok(outcome)
    }
}

/// How many gaps were longer than 10 us, 100 us, 1 ms and 10 ms (at the histogram's
/// resolution), keyed so.
pub fn gaps_over(hist: &LatencyHistogram) -> serde_json::Value {
    const BOUNDS: [(&str, u64); 4] = [
        ("10us", 10_000),
        ("100us", 100_000),
        ("1ms", 1_000_000),
        ("10ms", 10_000_000),
    ];
    let at_or_below = hist.cumulative_counts(&BOUNDS.map(|b| b.1));
    let mut map = serde_json::Map::new();
    for ((name, _), below) in BOUNDS.iter().zip(at_or_below) {
        map.insert((*name).into(), hist.len().saturating_sub(below).into());
    }
    serde_json::Value::Object(map)
}

/// The share of `spun_ns` the spinner had, when `lost_ns` of it went to interruptions.
pub fn available_pct(lost_ns: u64, spun_ns: u64) -> f64 {
    if spun_ns == 0 {
        return 0.0;
    }
    let pct = 100.0 * (1.0 - lost_ns.min(spun_ns) as f64 / spun_ns as f64);
    (pct * 10_000.0).round() / 10_000.0
}

/// The survey's reading of the noise series under `prefix`, and the causes of the longest
/// interruptions (`outliers`) where they were explained, which come after it.
pub fn reading(
    series: &[Series],
    prefix: &str,
    outliers: &[rtlab_stats::result::Outlier],
) -> Option<(String, ReadingCauses)> {
    let s = series
        .iter()
        .find(|s| s.name.starts_with(prefix) && s.metric == METRIC)?;
    let num = |k: &str| s.config.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    let spun = num("spun_ns").max(1);
    let text = format!(
        "a spinning thread (FIFO {}) on CPU {} kept {:.2} % of it: {:.0} interruptions/s over {}, the longest {}",
        num("prio"),
        num("cpu"),
        available_pct(num("lost_ns"), spun),
        num("interruptions") as f64 / (spun as f64 / 1e9),
        Nanos(num("threshold_ns")),
        Nanos(s.max.unwrap_or(0.0) as u64)
    );
    let mut causes = ReadingCauses {
        lead: format!("; the {} longest went to ", outliers.len()),
        shares: rtlab_stats::cause::top_shares(outliers, 3),
        ..ReadingCauses::default()
    };
    let throttled = outliers.iter().flat_map(|o| &o.causes).any(|c| {
        matches!(
            c.reason,
            Some(
                rtlab_stats::result::ReasonCode::Throttled
                    | rtlab_stats::result::ReasonCode::FairServer
            )
        )
    });
    if throttled {
        causes.rest.push_str(
            "; real-time throttling held a runnable RT thread off its CPU: \
             sysctl -w kernel.sched_rt_runtime_us=-1 on dedicated RT CPUs, and on Linux 6.12+ \
             the fair server's runtime to 0 there too, or SCHED_OTHER work still takes 50 ms \
             a second (see rtlab check: rt_throttling, fair_server)",
        );
    }
    Some((text, causes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(ms: u64) -> CommonConfig {
        CommonConfig {
            duration: Nanos::from_millis(ms),
            loads: vec![],
            mlock: false,
            dma_latency: false,
        }
    }

    fn config(cpus: Vec<usize>, threshold: Nanos) -> NoiseConfig {
        NoiseConfig {
            cpus: CpuList::from(cpus),
            policy: Policy::Other,
            prio: 0,
            threshold,
            explain: None,
        }
    }

    #[test]
    fn every_loop_is_a_sample_and_the_gaps_add_up_to_the_run() {
        let noise = Noise::new(config(vec![0], Nanos::from_micros(10))).unwrap();
        let out = noise
            .run(&common(200), &mut crate::harness::NullObserver)
            .unwrap();
        assert_eq!(out.series.len(), 1);
        let s = &out.series[0];
        assert_eq!((s.name.as_str(), s.metric.as_str()), ("cpu0", METRIC));
        // Every gap is recorded, and the gaps tile the run: their mean times their number
        // is the time spun (the histogram's mean is exact, its sum is kept).
        let count = s.count.unwrap() as f64;
        let spun = s.config["spun_ns"].as_u64().unwrap() as f64;
        assert!(spun >= 200e6, "{spun}");
        assert!(
            (s.mean.unwrap() * count - spun).abs() < 0.001 * spun,
            "{s:?}"
        );
        // Millions of loops a second, each far under a microsecond.
        assert!(count > 100_000.0, "{count}");
        assert!(s.p50.unwrap() < 1_000.0, "{s:?}");
        let lost = s.config["lost_ns"].as_u64().unwrap();
        assert!(lost as f64 <= spun);
        assert!(lost >= s.max.unwrap() as u64 || s.max.unwrap() <= 10_000.0);
        let pct = s.config["available_pct"].as_f64().unwrap();
        assert!((pct - available_pct(lost, spun as u64)).abs() < 1e-9);
    }

    #[test]
    fn gaps_over_counts_the_tail_at_each_bound() {
        let mut h = LatencyHistogram::new();
        for ns in [40, 40, 50_000, 2_000_000, 20_000_000] {
            h.record(Nanos(ns));
        }
        let g = gaps_over(&h);
        assert_eq!(
            (
                g["10us"].as_u64(),
                g["100us"].as_u64(),
                g["1ms"].as_u64(),
                g["10ms"].as_u64()
            ),
            (Some(3), Some(2), Some(2), Some(1))
        );
    }

    #[test]
    fn the_share_available_is_what_the_interruptions_left() {
        // The accounting, without a spinner: two gaps over a 1 ms threshold of 3 ms each in
        // a 100 ms run leave 94 % of it.
        assert_eq!(available_pct(6_000_000, 100_000_000), 94.0);
        assert_eq!(available_pct(0, 0), 0.0);
        assert_eq!(available_pct(5, 1), 0.0);
    }

    #[test]
    fn invalid_configs_are_rejected() {
        assert!(Noise::new(config(vec![], Nanos::from_micros(10))).is_err());
        assert!(Noise::new(config(vec![0], Nanos(10))).is_err());
        assert!(Noise::new(NoiseConfig {
            policy: Policy::Fifo,
            prio: 0,
            ..config(vec![0], Nanos::from_micros(10))
        })
        .is_err());
    }
}
