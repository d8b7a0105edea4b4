//! `rtlab wakeup`: timed-wakeup latency (seed 000's benchmark, cyclictest's method).
//!
//! Each measuring thread sleeps until absolute deadlines on `CLOCK_MONOTONIC`
//! (`next += interval`) and records `latency = wake time - scheduled time`. A wakeup so late
//! that later deadlines had already passed records those periods as missed (coordinated
//! omission correction) and skips to the next future deadline.

use crate::harness::{CommonConfig, LiveSeries, Observer};
use crate::{Experiment, LabError, Outcome};
use rtlab_stats::result::Series;
use rtlab_stats::{LatencyHistogram, LiveHistogram, Nanos};
use rtlab_sys::affinity::{set_current_thread_affinity, CpuList};
use rtlab_sys::sched::{set_current_thread_scheduler, Policy};
use rtlab_sys::time::{monotonic_now_ns, sleep_until_monotonic_ns};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

/// Series names this experiment emits (for help text).
pub const SERIES_HELP: &str =
    "thread0, thread1, ... (metric wakeup_latency, one per measuring thread)";

const WORKER_STACK: usize = 256 * 1024;
const PREFAULT_STACK: usize = 64 * 1024;
const TICK_NS: u64 = 250_000_000;

/// Where each measuring thread runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// One thread pinned to each listed CPU.
    PerCpu(CpuList),
    /// `n` threads, pinned round-robin over the CPUs if given, else free to migrate.
    Threads(usize, Option<CpuList>),
}

impl Placement {
    fn cpus(&self) -> Vec<Option<usize>> {
        match self {
            Placement::PerCpu(list) => list.as_slice().iter().map(|&c| Some(c)).collect(),
            Placement::Threads(n, None) => vec![None; *n],
            Placement::Threads(n, Some(list)) => (0..*n)
                .map(|i| Some(list.as_slice()[i % list.len()]))
                .collect(),
        }
    }
}

/// Configuration of a wakeup run.
#[derive(Debug, Clone)]
pub struct WakeupConfig {
    /// Measuring threads and their CPUs.
    pub placement: Placement,
    /// Period between deadlines.
    pub interval: Nanos,
    /// Scheduling policy of the measuring threads.
    pub policy: Policy,
    /// Priority (0 for `other`).
    pub prio: u32,
    /// All threads wake at the same instants (lockstep), on the whole multiples of the
    /// interval. Default: thread `i` of `n` is offset by `(i + 1/2) * interval / n`, so CPUs
    /// do not all leave idle at once (on a VM, simultaneous vCPU wakeups add latency of their
    /// own; cyclictest's threads are not in lockstep either), and no deadline falls on the
    /// scheduler tick, which the kernel fires at whole multiples of its period (1/HZ) on
    /// CLOCK_MONOTONIC: a deadline on a tick waits for the tick's own work first.
    pub aligned: bool,
    /// Trace the measured CPUs and attribute outliers to causes (`--explain`).
    pub explain: Option<crate::explain::ExplainSettings>,
    /// Hand each thread's histogram of every interval this long to the observer
    /// ([`Observer::interval`], for `--hlog`); None: no interval histograms.
    pub interval_log: Option<Nanos>,
}

impl WakeupConfig {
    /// Offset of thread `index`'s deadlines from the common grid.
    pub fn phase_ns(&self, index: usize, threads: usize) -> u64 {
        if self.aligned || threads == 0 {
            0
        } else {
            self.interval.get() * (2 * index as u64 + 1) / (2 * threads as u64)
        }
    }
}

/// The wakeup experiment.
#[derive(Debug, Clone)]
pub struct Wakeup {
    config: WakeupConfig,
    /// Prefix for series names (`idle/` in the survey), empty otherwise.
    prefix: String,
}

impl Wakeup {
    /// Validates `config`.
    pub fn new(config: WakeupConfig) -> Result<Self, LabError> {
        if config.interval.get() < 10_000 {
            return Err(LabError::bad("interval", "must be at least 10us"));
        }
        if config.placement.cpus().is_empty() {
            return Err(LabError::bad("placement", "no measuring thread: no CPU"));
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
        Ok(Wakeup {
            config,
            prefix: String::new(),
        })
    }

    /// Prefixes every series name (used by the survey to keep stages apart).
    pub fn with_series_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }
}

/// Lets the coordinator release all measuring threads at once after their set-up, or abort.
#[derive(Debug, Default)]
pub(crate) struct StartGate {
    ready: AtomicUsize,
    go: AtomicBool,
    pub(crate) abort: AtomicBool,
}

impl StartGate {
    /// Worker side: announce set-up done, wait for go. Returns false when aborted.
    /// Release/Acquire on `go` orders the coordinator's writes before the workers' start.
    pub(crate) fn arrive_and_wait(&self) -> bool {
        self.ready.fetch_add(1, Ordering::AcqRel);
        while !self.go.load(Ordering::Acquire) {
            if self.aborted() {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        true
    }

    pub(crate) fn open_when_ready(&self, workers: usize) {
        while self.ready.load(Ordering::Acquire) < workers && !self.aborted() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.go.store(true, Ordering::Release);
    }

    pub(crate) fn aborted(&self) -> bool {
        self.abort.load(Ordering::Relaxed) || rtlab_sys::signal::interrupted()
    }
}

/// A measuring thread's histogram of one interval of deadlines, `[from_ns, to_ns)`.
struct IntervalHist {
    from_ns: u64,
    to_ns: u64,
    hist: LatencyHistogram,
}

/// Histograms a measuring thread keeps besides its run's: one per interval (`--hlog`).
/// They circulate between the thread and the coordinator through two bounded channels, so
/// closing an interval neither allocates nor blocks: the thread swaps its full histogram for
/// an emptied one when the coordinator has returned one, and otherwise lets the interval run
/// on into the next (nothing is lost, the interval is longer).
struct IntervalSide {
    every: u64,
    from_ns: u64,
    current: LatencyHistogram,
    full: SyncSender<IntervalHist>,
    empty: Receiver<LatencyHistogram>,
}

/// The coordinator's end of one thread's [`IntervalSide`].
struct IntervalTap {
    full: Receiver<IntervalHist>,
    empty: SyncSender<LatencyHistogram>,
}

/// Histograms in circulation per thread besides the one being filled.
const INTERVAL_SPARES: usize = 2;

fn interval_pair(every: Nanos) -> (IntervalSide, IntervalTap) {
    // Room in `full` for every histogram there is, so the thread's last send never blocks.
    let (full_tx, full_rx) = sync_channel(INTERVAL_SPARES + 1);
    let (empty_tx, empty_rx) = sync_channel(INTERVAL_SPARES);
    for _ in 0..INTERVAL_SPARES {
        let _ = empty_tx.try_send(LatencyHistogram::new());
    }
    (
        IntervalSide {
            every: every.get(),
            from_ns: 0,
            current: LatencyHistogram::new(),
            full: full_tx,
            empty: empty_rx,
        },
        IntervalTap {
            full: full_rx,
            empty: empty_tx,
        },
    )
}

impl IntervalSide {
    /// Records a sample of the deadline `deadline` (and its missed periods), closing the
    /// interval first when `deadline` is past its end.
    fn record(&mut self, deadline: u64, latency: Nanos, step: Nanos, left: u64) {
        if self.from_ns == 0 {
            self.from_ns = deadline;
        }
        if deadline >= self.from_ns.saturating_add(self.every) {
            if let Ok(mut fresh) = self.empty.try_recv() {
                std::mem::swap(&mut fresh, &mut self.current);
                let _ = self.full.try_send(IntervalHist {
                    from_ns: self.from_ns,
                    to_ns: deadline,
                    hist: fresh,
                });
                self.from_ns = deadline;
            }
        }
        self.current.record_periodic_within(latency, step, left);
    }

    /// The last, partial interval, up to `end_ns`.
    fn close(self, end_ns: u64) {
        if !self.current.is_empty() {
            let _ = self.full.try_send(IntervalHist {
                from_ns: self.from_ns,
                to_ns: end_ns.max(self.from_ns),
                hist: self.current,
            });
        }
    }
}

impl IntervalTap {
    /// Hands each finished interval to the observer, times from `began_ns`, and returns
    /// its histogram to the thread emptied.
    fn drain(&self, series: &str, began_ns: u64, observer: &mut dyn Observer) {
        while let Ok(mut done) = self.full.try_recv() {
            observer.interval(
                series,
                Nanos(done.from_ns.saturating_sub(began_ns)),
                Nanos(done.to_ns.saturating_sub(began_ns)),
                &done.hist,
            );
            done.hist.reset();
            let _ = self.empty.try_send(done.hist);
        }
    }
}

struct WorkerResult {
    hist: LatencyHistogram,
    timer_slack_ns: Option<u64>,
    setup_error: Option<String>,
    /// The worst latency of each `timeline_step(duration)` window, from the first deadline.
    timeline: Vec<u64>,
}

/// Width of a timeline window: 100 ms, or wider so a run has at most 1000 windows.
pub fn timeline_step(duration_ns: u64) -> u64 {
    (duration_ns / 1000).max(100_000_000)
}

/// What one measuring thread does.
#[derive(Debug, Clone, Copy)]
struct ThreadPlan {
    cpu: Option<usize>,
    policy: Policy,
    prio: u32,
    interval: u64,
    phase: u64,
    duration: u64,
}

fn measure(
    plan: ThreadPlan,
    gate: &StartGate,
    live: &LiveHistogram,
    reporter: Option<(rtlab_trace::Reporter, u16)>,
    mut intervals: Option<IntervalSide>,
) -> WorkerResult {
    let ThreadPlan {
        cpu,
        policy,
        prio,
        interval,
        phase,
        duration,
    } = plan;
    let mut hist = LatencyHistogram::new();
    let mut setup_error = None;
    if let Some(cpu) = cpu {
        if let Err(e) = set_current_thread_affinity(&CpuList::from(vec![cpu])) {
            setup_error = Some(format!("cannot pin to CPU {cpu}: {e}"));
        }
    }
    if let Err(e) = set_current_thread_scheduler(policy, prio) {
        setup_error.get_or_insert(format!("cannot set {policy} {prio}: {e}"));
    }
    let timer_slack_ns = rtlab_sys::slack::current_timer_slack_ns().ok();
    let tid = rtlab_sys::futex::current_tid() as i64;
    rtlab_sys::mem::prefault_stack(PREFAULT_STACK);
    if setup_error.is_some() {
        gate.abort.store(true, Ordering::Relaxed);
    }
    // Allocated before the loop: recording into it never allocates. A run without an end
    // (u64::MAX: `--duration forever`) has no timeline: its length is not known in advance.
    let step_ns = timeline_step(duration);
    let slots = if duration == u64::MAX {
        0
    } else {
        (duration / step_ns + 2) as usize
    };
    let mut timeline = vec![0u64; slots];
    if !gate.arrive_and_wait() {
        return WorkerResult {
            hist,
            timer_slack_ns,
            setup_error,
            timeline: Vec::new(),
        };
    }
    // Deadlines sit on a common grid plus this thread's phase, so runs are reproducible.
    let mut next = (monotonic_now_ns() / interval + 2) * interval + phase;
    let first = next;
    let end = next.saturating_add(duration);
    let step = Nanos(interval);
    // The measuring loop: sleep, read the clock, record. No allocation, no lock, no syscall
    // but the sleep and the vDSO clock read.
    while !gate.aborted() {
        if sleep_until_monotonic_ns(next).is_err() {
            gate.abort.store(true, Ordering::Relaxed);
            break;
        }
        let woke = monotonic_now_ns();
        let latency = Nanos(woke.saturating_sub(next));
        // Deadlines after `next` still inside the run: a late last wakeup misses none after it.
        let left = end.saturating_sub(next + 1) / interval;
        let missed = hist.record_periodic_within(latency, step, left);
        if let Some(side) = intervals.as_mut() {
            side.record(next, latency, step, left);
        }
        live.record(latency);
        if let Some(slot) = timeline.get_mut(((next - first) / step_ns) as usize) {
            *slot = (*slot).max(latency.get());
        }
        if let Some((reporter, series)) = &reporter {
            reporter.report_if_late(*series, tid, next, woke);
        }
        next += (1 + missed) * interval;
        if next >= end {
            break;
        }
    }
    if let Some(side) = intervals {
        side.close(next.min(end));
    }
    let used = ((next.min(end) - first) / step_ns + 1) as usize;
    timeline.truncate(used.min(timeline.len()));
    WorkerResult {
        hist,
        timer_slack_ns,
        setup_error,
        timeline,
    }
}

impl Experiment for Wakeup {
    fn command(&self) -> &'static str {
        "wakeup"
    }

    fn run(&self, common: &CommonConfig, observer: &mut dyn Observer) -> Result<Outcome, LabError> {
        let cfg = &self.config;
        let mut outcome = Outcome::default();
        let (policy, prio) = outcome.effective_sched(
            observer,
            cfg.policy,
            cfg.prio,
            "so latencies include time-sharing delays",
        );

        let cpus = cfg.placement.cpus();
        let gate = Arc::new(StartGate::default());
        let live: Vec<LiveSeries> = (0..cpus.len())
            .map(|i| LiveSeries {
                name: format!("{}thread{i}", self.prefix),
                hist: Arc::new(LiveHistogram::new()),
            })
            .collect();
        let (interval, duration) = (cfg.interval.get(), common.duration.get());
        let measured: Vec<usize> = if cpus.iter().all(Option::is_some) {
            let mut m: Vec<usize> = cpus.iter().flatten().copied().collect();
            m.sort_unstable();
            m.dedup();
            m
        } else {
            rtlab_sys::affinity::usable_cpus().as_slice().to_vec()
        };
        let session = cfg.explain.as_ref().map(|settings| {
            crate::explain::Session::start(
                settings,
                &measured,
                live.iter().map(|l| l.name.clone()).collect(),
                &[crate::explain::Wait::Timer],
                observer,
                &mut outcome,
            )
        });
        let reporter = session.as_ref().and_then(|s| s.reporter());
        let mut handles = Vec::new();
        let mut taps = Vec::new();
        for (i, &cpu) in cpus.iter().enumerate() {
            let side = cfg.interval_log.map(|every| {
                let (side, tap) = interval_pair(every);
                taps.push(tap);
                side
            });
            let (worker_gate, hist) = (gate.clone(), live[i].hist.clone());
            let plan = ThreadPlan {
                cpu,
                policy,
                prio,
                interval,
                phase: cfg.phase_ns(i, cpus.len()),
                duration,
            };
            let reporter = reporter.clone().map(|r| (r, i as u16));
            let spawned = std::thread::Builder::new()
                .name(format!("rtlab-wakeup{i}"))
                .stack_size(WORKER_STACK)
                .spawn(move || measure(plan, &worker_gate, &hist, reporter, side));
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
        let drain = |observer: &mut dyn Observer| {
            for (tap, series) in taps.iter().zip(&live) {
                tap.drain(&series.name, began, observer);
            }
        };
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(std::time::Duration::from_nanos(TICK_NS));
            drain(observer);
            observer.tick(Nanos(monotonic_now_ns() - began), common.duration, &live);
        }
        // The threads' last, partial intervals.
        drain(observer);
        if let Some(session) = session {
            session.finish(&measured, observer, &mut outcome);
            outcome.measured_from(began);
        }
        for (i, handle) in handles.into_iter().enumerate() {
            let result = handle
                .join()
                .map_err(|_| LabError::Thread(format!("thread{i} panicked")))?;
            if let Some(e) = result.setup_error {
                return Err(LabError::Setup(format!("thread{i}: {e}")));
            }
            let mut series = Series::distribution(&live[i].name, "wakeup_latency", &result.hist)?
                .with_config("cpu", cpus[i])
                .with_config("interval_ns", interval)
                .with_config("phase_ns", cfg.phase_ns(i, cpus.len()))
                .with_config("policy", policy.as_str())
                .with_config("prio", prio)
                .with_config("mlock", common.mlock);
            if let Some(slack) = result.timer_slack_ns {
                series = series.with_config("timer_slack_ns", slack);
            }
            if !result.timeline.is_empty() {
                series = rtlab_stats::details::Timeline {
                    step_ns: timeline_step(duration),
                    max_ns: result.timeline,
                }
                .into_config_of(series);
            }
            outcome.series.push(series);
        }
        Ok(outcome)
    }
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

    #[test]
    fn measures_every_period_of_the_duration() {
        let wakeup = Wakeup::new(WakeupConfig {
            placement: Placement::Threads(2, None),
            interval: Nanos::from_millis(1),
            policy: Policy::Other,
            prio: 0,
            aligned: false,
            explain: None,
            interval_log: Some(Nanos::from_millis(50)),
        })
        .unwrap();
        /// Keeps the interval histograms handed over.
        #[derive(Default)]
        struct Intervals(Vec<(String, Nanos, Nanos, u64)>);
        impl Observer for Intervals {
            fn warn(&mut self, _: &str) {}
            fn interval(&mut self, series: &str, from: Nanos, to: Nanos, h: &LatencyHistogram) {
                self.0.push((series.to_string(), from, to, h.len()));
            }
        }
        let mut intervals = Intervals::default();
        let out = wakeup.run(&common(300), &mut intervals).unwrap();
        assert_eq!(out.series.len(), 2);
        for s in &out.series {
            // Every deadline in 300 ms at 1 ms is either measured or counted as missed.
            assert_eq!(s.count, Some(300), "{s:?}");
            // The 50 ms intervals (some longer, if the coordinator was slow to return an
            // emptied histogram) add up to the run, and follow each other without a gap.
            let mine: Vec<_> = intervals.0.iter().filter(|i| i.0 == s.name).collect();
            assert!(mine.len() >= 3, "{:?}", intervals.0);
            assert_eq!(mine.iter().map(|i| i.3).sum::<u64>(), 300, "{mine:?}");
            for pair in mine.windows(2) {
                assert_eq!(pair[0].2, pair[1].1, "{mine:?}");
            }
            assert_eq!(s.count.unwrap(), s.raw_count.unwrap() + s.missed.unwrap());
            assert!(s.min.unwrap() <= s.p50.unwrap() && s.p50.unwrap() <= s.max.unwrap());
            assert_eq!(s.metric, "wakeup_latency");
            assert_eq!(s.config["policy"], "other");
        }
        assert_eq!(out.series[1].name, "thread1");
        assert_eq!(out.series[0].config["phase_ns"], 250_000);
        assert_eq!(out.series[1].config["phase_ns"], 750_000);
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let base = WakeupConfig {
            placement: Placement::PerCpu(CpuList::from(vec![0])),
            interval: Nanos::from_millis(1),
            policy: Policy::Fifo,
            prio: 95,
            aligned: false,
            explain: None,
            interval_log: None,
        };
        assert!(Wakeup::new(WakeupConfig {
            interval: Nanos(10),
            ..base.clone()
        })
        .is_err());
        assert!(Wakeup::new(WakeupConfig {
            prio: 0,
            ..base.clone()
        })
        .is_err());
        assert!(Wakeup::new(WakeupConfig {
            placement: Placement::Threads(0, None),
            ..base
        })
        .is_err());
    }

    #[test]
    fn placement_spreads_threads_over_cpus() {
        let p = Placement::Threads(3, Some(CpuList::from(vec![0, 1])));
        assert_eq!(p.cpus(), vec![Some(0), Some(1), Some(0)]);
    }
}
