//! `rtlab mmap`: seed 000's experiment. A real-time thread is woken at absolute deadlines
//! through a timed condition wait (a futex wait that times out); a non-real-time thread maps,
//! touches and unmaps `size` bytes in a loop. In 2008 a non-private futex synchronised with
//! `mmap` through the address-space lock and the RT thread was delayed by up to a second
//! (worse with mlock). Each variant here is a waiter (futex private or shared, glibc condvar
//! private or process-shared) under a disturbance (idle, mmap, mmap + mlock), measured in
//! interleaved slices. Latency = wake time - deadline.

use crate::harness::{CommonConfig, Observer};
use crate::mutex_impls::enter;
use crate::{Experiment, LabError, Outcome};
use rtlab_load::{LoadKind, LoadSpec};
use rtlab_stats::result::Series;
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sys::futex::{self, Scope, Wait};
use rtlab_sys::mem::AnonMapping;
use rtlab_sys::pthread::PthreadTimedWait;
use rtlab_sys::sched::Policy;
use rtlab_sys::time::monotonic_now_ns;
use std::sync::atomic::AtomicU32;

/// Series names this experiment emits (for help text).
pub const SERIES_HELP: &str =
    "<waiter>/<disturbance> (metric wakeup_latency) for waiter in private, \
shared, glibc-private, glibc-shared and disturbance in idle, mmap, mlock";

/// How the real-time thread waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiter {
    /// `FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG`.
    Private,
    /// `FUTEX_WAIT_BITSET` without the private flag, on a word in `MAP_SHARED` memory.
    Shared,
    /// glibc `pthread_cond_timedwait`, process-private condvar.
    GlibcPrivate,
    /// glibc `pthread_cond_timedwait`, `PTHREAD_PROCESS_SHARED` condvar in shared memory.
    GlibcShared,
}

impl Waiter {
    /// All waiters.
    pub const ALL: [Waiter; 4] = [
        Waiter::Private,
        Waiter::Shared,
        Waiter::GlibcPrivate,
        Waiter::GlibcShared,
    ];

    /// Name (first part of the series name).
    pub fn name(self) -> &'static str {
        match self {
            Waiter::Private => "private",
            Waiter::Shared => "shared",
            Waiter::GlibcPrivate => "glibc-private",
            Waiter::GlibcShared => "glibc-shared",
        }
    }
}

/// What the non-real-time thread does meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disturbance {
    /// Nothing (the baseline).
    Idle,
    /// map, touch, unmap.
    Mmap,
    /// map, mlock, touch, unmap.
    Mlock,
}

impl Disturbance {
    /// All disturbances.
    pub const ALL: [Disturbance; 3] = [Disturbance::Idle, Disturbance::Mmap, Disturbance::Mlock];

    /// Name (second part of the series name).
    pub fn name(self) -> &'static str {
        match self {
            Disturbance::Idle => "idle",
            Disturbance::Mmap => "mmap",
            Disturbance::Mlock => "mlock",
        }
    }
}

/// Configuration of an mmap run.
#[derive(Debug, Clone)]
pub struct MmapConfig {
    /// The real-time thread's CPU.
    pub cpu: usize,
    /// Period of the timed waits.
    pub interval: Nanos,
    /// Scheduling of the real-time thread.
    pub policy: Policy,
    /// Its priority.
    pub prio: u32,
    /// Bytes the disturbing thread maps per cycle.
    pub size: u64,
    /// Waiters to compare.
    pub waiters: Vec<Waiter>,
    /// Attribute late wakeups to causes (`--explain`): a wait that blocks after its timeout
    /// (on `mmap_lock`, say) names the task that released it.
    pub explain: Option<crate::explain::ExplainSettings>,
}

/// The mmap experiment.
#[derive(Debug, Clone)]
pub struct MmapExperiment {
    config: MmapConfig,
    prefix: String,
}

impl MmapExperiment {
    /// Validates the configuration.
    pub fn new(config: MmapConfig) -> Result<Self, LabError> {
        if config.waiters.is_empty() {
            return Err(LabError::bad("waiters", "no waiter to measure"));
        }
        if config.interval.get() < 50_000 {
            return Err(LabError::bad("interval", "must be at least 50us"));
        }
        if config.size < 4096 {
            return Err(LabError::bad("size", "must be at least 4KiB"));
        }
        if let Some(total) = rtlab_sys::sysinfo::total_memory_bytes() {
            if config.size > total / 2 {
                return Err(LabError::bad(
                    "size",
                    format!(
                        "must be at most half of this machine's memory ({} MiB)",
                        total >> 20
                    ),
                ));
            }
        }
        Ok(MmapExperiment {
            config,
            prefix: String::new(),
        })
    }

    /// Prefixes every series name (the survey's `mmap/`).
    pub fn with_series_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }
}

/// The max of `<prefix><waiter>/<disturbance>`, if measured.
pub fn max_of(series: &[Series], prefix: &str, waiter: Waiter, d: Disturbance) -> Option<f64> {
    let name = format!("{prefix}{}/{}", waiter.name(), d.name());
    series.iter().find(|s| s.name == name).and_then(|s| s.max)
}

/// One plain sentence: does this kernel show seed 000's effect?
///
/// The effect counts only when the shared futex's disturbed worst case stands out both from
/// the private futex's under the same disturbance and from the idle noise floor of both: on a
/// VM a single max from a few hundred samples swings by 2x on its own.
pub fn seed_effect_reading(series: &[Series], prefix: &str) -> String {
    let floor = [Waiter::Private, Waiter::Shared]
        .iter()
        .filter_map(|&w| max_of(series, prefix, w, Disturbance::Idle))
        .fold(0.0f64, f64::max);
    let mut worst: Option<(f64, f64, &str)> = None;
    for d in [Disturbance::Mmap, Disturbance::Mlock] {
        if let (Some(shared), Some(private)) = (
            max_of(series, prefix, Waiter::Shared, d),
            max_of(series, prefix, Waiter::Private, d),
        ) {
            let (vs_private, vs_floor) = (shared / private.max(1.0), shared / floor.max(1.0));
            if worst.is_none_or(|(p, f, _)| vs_private.min(vs_floor) > p.min(f)) {
                worst = Some((vs_private, vs_floor, d.name()));
            }
        }
    }
    match worst {
        Some((p, f, d)) if p > 2.0 && f > 2.0 => format!(
            "mmap effect VISIBLE on this kernel: under {d} the shared futex's worst wakeup is {p:.1}x the private one's and {f:.1}x the idle worst case; use private futexes (rtlab's default) for real-time waits"
        ),
        Some((p, f, d)) => format!(
            "mmap effect not visible on this kernel: under {d} the shared futex's worst wakeup is {p:.1}x the private one's and {f:.1}x the idle worst case (both must exceed 2x); the 2008 mmap/futex contention does not show here"
        ),
        None => "mmap effect not assessed: run with --waiter private,shared".into(),
    }
}

/// A timed waiter ready to use.
enum TimedWait {
    Futex(Box<AtomicU32>),
    SharedFutex(AnonMapping),
    Glibc(PthreadTimedWait),
}

impl TimedWait {
    fn new(waiter: Waiter) -> Result<Self, LabError> {
        Ok(match waiter {
            Waiter::Private => TimedWait::Futex(Box::new(AtomicU32::new(0))),
            Waiter::Shared => TimedWait::SharedFutex(AnonMapping::new_shared(4096)?),
            Waiter::GlibcPrivate => TimedWait::Glibc(PthreadTimedWait::new(false)?),
            Waiter::GlibcShared => TimedWait::Glibc(PthreadTimedWait::new(true)?),
        })
    }

    /// Waits until `deadline` (nobody wakes it: every wait times out).
    #[inline]
    fn wait_until(&self, deadline: u64) {
        match self {
            TimedWait::Futex(word) => {
                while futex::wait_until(word, Scope::Private, 0, Some(deadline)) != Wait::TimedOut {
                }
            }
            TimedWait::SharedFutex(map) => {
                while futex::wait_until(map.as_atomic_u32(), Scope::Shared, 0, Some(deadline))
                    != Wait::TimedOut
                {}
            }
            TimedWait::Glibc(w) => {
                w.wait_until(deadline);
            }
        }
    }
}

fn slice(
    waiter: &TimedWait,
    cfg: &MmapConfig,
    disturbance: Disturbance,
    end: u64,
    hist: &mut LatencyHistogram,
    report: crate::explain::Report<'_>,
) -> Result<(), LabError> {
    let mlock = match disturbance {
        Disturbance::Idle => None,
        Disturbance::Mmap => Some(false),
        Disturbance::Mlock => Some(true),
    };
    // Written as `--load` would take it: the text names the load in its errors.
    let specs: Vec<LoadSpec> = mlock
        .map(|mlock| LoadSpec {
            text: format!("mmap:{}{}", cfg.size, if mlock { ":mlock" } else { "" }),
            kind: LoadKind::Mmap {
                size: cfg.size,
                mlock,
            },
        })
        .into_iter()
        .collect();
    let interval = cfg.interval.get();
    // The measuring thread is made (its stack mapped, its histogram allocated) before the
    // load starts: made after, it would wait for the mmap_lock the load holds, and a slice
    // could end before its first wait (beside a busy machine, none of a slice's waits).
    let ready = std::sync::Barrier::new(2);
    let no_load = std::sync::atomic::AtomicBool::new(false);
    let (measured, loads) = std::thread::scope(|s| {
        let waiting = s.spawn(|| -> Result<LatencyHistogram, LabError> {
            let entered = enter(cfg.cpu, cfg.policy, cfg.prio);
            let tid = rtlab_sys::futex::current_tid() as i64;
            let mut local = LatencyHistogram::new();
            ready.wait();
            entered?;
            if no_load.load(std::sync::atomic::Ordering::Acquire) {
                return Ok(local);
            }
            let mut next = monotonic_now_ns() + interval;
            while next < end && !rtlab_sys::signal::interrupted() {
                waiter.wait_until(next);
                let now = monotonic_now_ns();
                // A lock wait: after its timeout the futex call may block on mmap_lock.
                crate::explain::report_wait(report, crate::explain::Wait::Lock, tid, next, now);
                let late = Nanos(now.saturating_sub(next));
                let missed = local.record_periodic(late, Nanos(interval));
                next += (1 + missed) * interval;
            }
            Ok(local)
        });
        let loads = rtlab_load::start(
            &specs,
            Nanos(end.saturating_sub(monotonic_now_ns()) + 5_000_000_000),
        );
        no_load.store(loads.is_err(), std::sync::atomic::Ordering::Release);
        ready.wait();
        let measured = (waiting.join()).map_err(|_| LabError::Panicked("measuring thread".into()));
        (measured, loads)
    });
    drop(loads?);
    hist.merge(&measured??);
    Ok(())
}

impl Experiment for MmapExperiment {
    fn command(&self) -> &'static str {
        "mmap"
    }

    fn run(&self, common: &CommonConfig, observer: &mut dyn Observer) -> Result<Outcome, LabError> {
        let mut outcome = Outcome::default();
        let (policy, prio) = outcome.effective_sched(
            observer,
            self.config.policy,
            self.config.prio,
            "so the timer slack and time-sharing hide the effect",
        );
        let cfg = MmapConfig {
            policy,
            prio,
            ..self.config.clone()
        };
        let mut waiters: Vec<(Waiter, TimedWait)> = Vec::new();
        for &w in &cfg.waiters {
            match TimedWait::new(w) {
                Ok(t) => waiters.push((w, t)),
                Err(e) => outcome.warn(observer, format!("{}: skipped: {e}", w.name())),
            }
        }
        let mut tracks: Vec<(usize, Disturbance, LatencyHistogram)> = Vec::new();
        for i in 0..waiters.len() {
            for d in Disturbance::ALL {
                tracks.push((i, d, LatencyHistogram::new()));
            }
        }
        let session = cfg.explain.as_ref().map(|settings| {
            crate::explain::Session::start(
                settings,
                &[cfg.cpu],
                tracks
                    .iter()
                    .map(|(i, d, _)| {
                        format!("{}{}/{}", self.prefix, waiters[*i].0.name(), d.name())
                    })
                    .collect(),
                &[crate::explain::Wait::Lock],
                observer,
                &mut outcome,
            )
        });
        let reporter = session.as_ref().and_then(|s| s.reporter());
        let began = monotonic_now_ns();
        let end = began.saturating_add(common.duration.get());
        let slice_ns = (common.duration.get() / (tracks.len().max(1) as u64 * 2))
            .clamp(200_000_000, 1_000_000_000);
        while monotonic_now_ns() < end && !rtlab_sys::signal::interrupted() {
            for (index, (i, d, hist)) in tracks.iter_mut().enumerate() {
                let slice_end = monotonic_now_ns() + slice_ns;
                let report = reporter.as_ref().map(|r| (r, index as u16));
                slice(&waiters[*i].1, &cfg, *d, slice_end, hist, report)
                    .map_err(LabError::in_measuring_thread)?;
                observer.tick(Nanos(monotonic_now_ns() - began), common.duration, &[]);
                if rtlab_sys::signal::interrupted() {
                    break;
                }
            }
        }
        if let Some(session) = session {
            session.finish(&[cfg.cpu], observer, &mut outcome);
        }
        for (i, d, hist) in &tracks {
            let w = waiters[*i].0;
            if hist.is_empty() {
                // Its slices measured nothing (a machine busy enough to keep the waiter off
                // its CPU for all of them): said, not left out in silence.
                let name = format!("{}{}/{}", self.prefix, w.name(), d.name());
                outcome.warn(
                    observer,
                    format!(
                        "{name}: skipped: no wakeup measured in its slices of {}",
                        Nanos(slice_ns)
                    ),
                );
                continue;
            }
            let idle_max = tracks
                .iter()
                .find(|(x, y, _)| x == i && *y == Disturbance::Idle)
                .map(|(_, _, h)| h.max().get())
                .unwrap_or(0);
            let mut s = Series::distribution(
                format!("{}{}/{}", self.prefix, w.name(), d.name()),
                "wakeup_latency",
                hist,
            )?
            .with_config("cpu", cfg.cpu)
            .with_config("interval_ns", cfg.interval.get())
            .with_config("policy", cfg.policy.as_str())
            .with_config("prio", cfg.prio)
            .with_config("size_bytes", cfg.size)
            .with_config("mlockall", common.mlock);
            if *d != Disturbance::Idle && idle_max > 0 {
                s = s.with_config(
                    "max_over_idle_max",
                    (hist.max().get() as f64 / idle_max as f64 * 1000.0).round() / 1000.0,
                );
            }
            outcome.series.push(s);
        }
        Ok(outcome)
    }
}
