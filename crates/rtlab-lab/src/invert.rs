//! `rtlab invert`: priority inversion, seed 003's experiment (805 ms without PI, 23 ms with).
//!
//! On one CPU (by default): a low-priority thread takes the lock and works `hold` inside it
//! (on the clock, so preemption stretches the hold), then sleeps a pseudo-random time up to
//! `2 x hold` (a fixed sleep phase-locks the owner to the hogs' pauses, so it would never be
//! preempted while holding and no inversion would ever be seen); medium-priority
//! hogs spin `hog_run` of every `hog_period`; a high-priority thread asks for the lock every
//! `period` and its wait is measured. Without a protocol, a hog that preempts the low owner
//! keeps the high thread waiting as long as it spins. With priority inheritance the owner
//! runs at the waiter's priority; with priority protect it holds the lock at the ceiling.
//! The variants run in interleaved slices, and every thread stops at the end of its slice, so
//! a no-protocol run can never hang the machine.

use crate::explain::Report;
use crate::harness::{CommonConfig, Observer};
use crate::mutex_impls::{enter, spin_until, BenchLock};
use crate::{Experiment, LabError, Outcome};
use rtlab_stats::details::WaitBound;
use rtlab_stats::result::Series;
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sync::{CeilingMutex, FutexMutex, PiMutex};
use rtlab_sys::affinity::CpuList;
use rtlab_sys::pthread::{PthreadKind, PthreadMutex};
use rtlab_sys::sched::Policy;
use rtlab_sys::time::{monotonic_now_ns, sleep_until_monotonic_ns};

/// Series names this experiment emits (for help text).
pub const SERIES_HELP: &str =
    "none/glibc, none/rtlab, inherit/rtlab, inherit/glibc, protect/rtlab, \
protect/glibc (metric lock_wait: from the high thread's scheduled request time until it held \
the lock), and \
high/wakeup_latency (the high thread's own timer wakeup, used for the bound)";

/// A protocol and an implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// glibc `PTHREAD_PRIO_NONE` mutex.
    NoneGlibc,
    /// rtlab's plain futex mutex.
    NoneRtlab,
    /// rtlab `PiMutex`.
    InheritRtlab,
    /// glibc `PTHREAD_PRIO_INHERIT`.
    InheritGlibc,
    /// rtlab `CeilingMutex` (ceiling = the high priority).
    ProtectRtlab,
    /// glibc `PTHREAD_PRIO_PROTECT` (ceiling = the high priority).
    ProtectGlibc,
}

impl Variant {
    /// Every variant, in table order.
    pub const ALL: [Variant; 6] = [
        Variant::NoneGlibc,
        Variant::NoneRtlab,
        Variant::InheritRtlab,
        Variant::InheritGlibc,
        Variant::ProtectRtlab,
        Variant::ProtectGlibc,
    ];

    /// Series name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::NoneGlibc => "none/glibc",
            Variant::NoneRtlab => "none/rtlab",
            Variant::InheritRtlab => "inherit/rtlab",
            Variant::InheritGlibc => "inherit/glibc",
            Variant::ProtectRtlab => "protect/rtlab",
            Variant::ProtectGlibc => "protect/glibc",
        }
    }

    /// True for the variants that bound the wait.
    pub fn has_protocol(self) -> bool {
        !matches!(self, Variant::NoneGlibc | Variant::NoneRtlab)
    }
}

/// Configuration of an invert run.
#[derive(Debug, Clone)]
pub struct InvertConfig {
    /// CPUs all threads are pinned to (threads spread round-robin).
    pub cpus: CpuList,
    /// Work inside the lock per acquisition by the low thread.
    pub hold: Nanos,
    /// Period of the high thread's lock requests.
    pub period: Nanos,
    /// Medium-priority hogs.
    pub hogs: usize,
    /// Spin time of a hog per hog period.
    pub hog_run: Nanos,
    /// Hog period.
    pub hog_period: Nanos,
    /// Priority of the high thread; hogs run at `high - 1`, the low thread at `high - 2`.
    pub high_prio: u32,
    /// Variants to run.
    pub variants: Vec<Variant>,
    /// Attribute the high thread's late lock waits to causes (`--explain`): the lock holder,
    /// the tasks that kept it off the CPU, IRQs ...
    pub explain: Option<crate::explain::ExplainSettings>,
}

impl InvertConfig {
    /// The defaults of `rtlab invert` (the same as its command-line defaults): hold 1 ms, a
    /// request every 10 ms, one hog per CPU spinning 30 ms of every 50 ms, high priority 30.
    pub fn with_defaults(cpus: CpuList, variants: Vec<Variant>) -> Self {
        InvertConfig {
            hogs: cpus.len(),
            cpus,
            hold: Nanos::from_millis(1),
            period: Nanos::from_millis(10),
            hog_run: Nanos::from_millis(30),
            hog_period: Nanos::from_millis(50),
            high_prio: 30,
            variants,
            explain: None,
        }
    }
}

/// The invert experiment.
#[derive(Debug, Clone)]
pub struct Invert {
    config: InvertConfig,
    prefix: String,
}

/// One plain sentence comparing the worst waits without a protocol and with rtlab's PI mutex.
pub fn reading(series: &[Series], prefix: &str) -> Option<String> {
    let max = |v: Variant| {
        let name = format!("{prefix}{}", v.name());
        series.iter().find(|s| s.name == name).and_then(|s| s.max)
    };
    let (none, pi) = (max(Variant::NoneRtlab)?, max(Variant::InheritRtlab)?);
    Some(format!(
        "without a protocol a medium-priority hog kept the high thread waiting up to {}; with rtlab's PI mutex at most {} ({:.3}x)",
        Nanos(none as u64),
        Nanos(pi as u64),
        pi / none.max(1.0)
    ))
}

impl Invert {
    /// Validates the configuration.
    pub fn new(config: InvertConfig) -> Result<Self, LabError> {
        let c = &config;
        if c.cpus.is_empty() || c.variants.is_empty() {
            return Err(LabError::Config(
                "nothing to run: no CPU or no variant".into(),
            ));
        }
        if !(3..=98).contains(&c.high_prio) {
            return Err(LabError::bad(
                "high_prio",
                format!(
                    "{} leaves no room below it (hogs run one below, the owner two below): use 3-98",
                    c.high_prio
                ),
            ));
        }
        if c.hold.get() == 0 || c.hold >= c.period {
            return Err(LabError::bad(
                "hold",
                "must be above 0 and below the period",
            ));
        }
        if c.hog_run >= c.hog_period {
            return Err(LabError::bad("hog_run", "must be below the hog period"));
        }
        // Keep real-time demand under the kernel's RT throttle (95 % by default): a throttled
        // CPU would stall every variant alike and hide the difference.
        let hog_share = c.hog_run.get() as f64 / c.hog_period.get() as f64 * c.hogs as f64
            / c.cpus.len() as f64;
        if hog_share > 0.8 {
            return Err(LabError::bad(
                "hogs",
                format!(
                    "would use {:.0} % of the CPUs: keep hog run / hog period x hogs / CPUs at or below 80 % \
                     (the kernel throttles real-time threads at 95 %)",
                    hog_share * 100.0
                ),
            ));
        }
        Ok(Invert {
            config,
            prefix: String::new(),
        })
    }

    /// Prefixes every series name (the survey's `invert/`).
    pub fn with_series_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }
}

/// The measured waits of one slice.
struct Slice {
    waits: LatencyHistogram,
    wakeups: LatencyHistogram,
}

fn spawn_named<'scope, 'env, T: Send + 'scope>(
    s: &'scope std::thread::Scope<'scope, 'env>,
    name: String,
    f: impl FnOnce() -> Result<T, LabError> + Send + 'scope,
) -> Result<std::thread::ScopedJoinHandle<'scope, Result<T, LabError>>, LabError> {
    Ok(std::thread::Builder::new().name(name).spawn_scoped(s, f)?)
}

fn run_slice<L: BenchLock>(
    lock: &L,
    cfg: &InvertConfig,
    slice_end: u64,
    report: Report<'_>,
) -> Result<Slice, LabError> {
    let cpus = cfg.cpus.as_slice();
    let (high, hog, low) = (cfg.high_prio, cfg.high_prio - 1, cfg.high_prio - 2);
    let hold = cfg.hold.get();
    // Named threads, so an explained outlier says who held the lock and who ran.
    std::thread::scope(|s| {
        let owner = spawn_named(s, "rtlab-owner".into(), || -> Result<(), LabError> {
            enter(cpus[0], Policy::Fifo, low)?;
            let mut rng = monotonic_now_ns() | 1;
            while monotonic_now_ns() < slice_end {
                let guard = lock.acquire()?;
                spin_until(monotonic_now_ns() + hold);
                drop(guard);
                // xorshift64: a pause with no fixed phase relative to the hogs.
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let _ = sleep_until_monotonic_ns(monotonic_now_ns() + rng % (2 * hold));
            }
            Ok(())
        })?;
        let hogs = (0..cfg.hogs)
            .map(|i| {
                let cpu = cpus[i % cpus.len()];
                spawn_named(
                    s,
                    format!("rtlab-inv-hog{i}"),
                    move || -> Result<(), LabError> {
                        enter(cpu, Policy::Fifo, hog)?;
                        // Offset each hog so they do not all pause together.
                        let mut next = monotonic_now_ns()
                            + cfg.hog_period.get() * i as u64 / cfg.hogs.max(1) as u64;
                        while next < slice_end {
                            let _ = sleep_until_monotonic_ns(next);
                            spin_until((next + cfg.hog_run.get()).min(slice_end));
                            next += cfg.hog_period.get();
                        }
                        Ok(())
                    },
                )
            })
            .collect::<Result<Vec<_>, LabError>>()?;
        let measurer = spawn_named(s, "rtlab-high".into(), || -> Result<Slice, LabError> {
            enter(cpus[0], Policy::Fifo, high)?;
            let tid = rtlab_sys::futex::current_tid() as i64;
            let (mut waits, mut wakeups) = (LatencyHistogram::new(), LatencyHistogram::new());
            let period = cfg.period.get();
            let mut next = monotonic_now_ns() + period;
            while next < slice_end && !rtlab_sys::signal::interrupted() {
                let _ = sleep_until_monotonic_ns(next);
                let woke = monotonic_now_ns();
                let guard = lock.acquire()?;
                let got = monotonic_now_ns();
                drop(guard);
                crate::explain::report_wait(report, crate::explain::Wait::Lock, tid, next, got);
                wakeups.record(Nanos(woke - next));
                // From the scheduled request time, as every periodic latency in rtlab: under
                // priority protect the delay shows up before the wakeup, not in the lock call.
                waits.record(Nanos(got - next));
                next += period;
                // A request that could not even start on time is not measured again later.
                while next <= got {
                    next += period;
                }
            }
            Ok(Slice { waits, wakeups })
        })?;
        let slice = measurer
            .join()
            .map_err(|_| LabError::Panicked("high thread".into()))?;
        for h in hogs {
            h.join().map_err(|_| LabError::Panicked("hog".into()))??;
        }
        owner
            .join()
            .map_err(|_| LabError::Panicked("owner".into()))??;
        slice
    })
}

/// One variant's lock and its accumulated figures.
enum Subject {
    Futex(FutexMutex<()>),
    Pi(PiMutex<()>),
    Ceiling(CeilingMutex<()>),
    Pthread(PthreadMutex),
}

impl Subject {
    fn new(variant: Variant, ceiling: u32) -> Result<Self, LabError> {
        let pthread = |k| Ok(Subject::Pthread(PthreadMutex::new(k)?));
        match variant {
            Variant::NoneGlibc => pthread(PthreadKind::Normal),
            Variant::NoneRtlab => Ok(Subject::Futex(FutexMutex::new(()))),
            Variant::InheritRtlab => Ok(Subject::Pi(PiMutex::new(()))),
            Variant::InheritGlibc => pthread(PthreadKind::PrioInherit),
            Variant::ProtectRtlab => Ok(Subject::Ceiling(CeilingMutex::new(ceiling, ()))),
            Variant::ProtectGlibc => pthread(PthreadKind::PrioProtect(ceiling)),
        }
    }

    fn slice(&self, cfg: &InvertConfig, end: u64, report: Report<'_>) -> Result<Slice, LabError> {
        match self {
            Subject::Futex(l) => run_slice(l, cfg, end, report),
            Subject::Pi(l) => run_slice(l, cfg, end, report),
            Subject::Ceiling(l) => run_slice(l, cfg, end, report),
            Subject::Pthread(l) => run_slice(l, cfg, end, report),
        }
    }
}

impl Experiment for Invert {
    fn command(&self) -> &'static str {
        "invert"
    }

    fn run(&self, common: &CommonConfig, observer: &mut dyn Observer) -> Result<Outcome, LabError> {
        let cfg = &self.config;
        let mut outcome = Outcome::default();
        if !rtlab_sys::probe::can_use_fifo(cfg.high_prio) {
            return Err(LabError::Config(
                "rtlab invert needs SCHED_FIFO (run as root or with CAP_SYS_NICE): priority inversion \
                 cannot happen between SCHED_OTHER threads"
                    .into(),
            ));
        }
        let mut tracks = Vec::new();
        for &v in &cfg.variants {
            match Subject::new(v, cfg.high_prio) {
                Ok(s) => tracks.push((v, s, LatencyHistogram::new(), None::<LabError>)),
                Err(e) => outcome.warn(observer, format!("{}: skipped: {e}", v.name())),
            }
        }
        let session = cfg.explain.as_ref().map(|settings| {
            crate::explain::Session::start(
                settings,
                cfg.cpus.as_slice(),
                tracks
                    .iter()
                    .map(|t| format!("{}{}", self.prefix, t.0.name()))
                    .collect(),
                &[crate::explain::Wait::Lock],
                observer,
                &mut outcome,
            )
        });
        let reporter = session.as_ref().and_then(|s| s.reporter());
        let mut wakeups = LatencyHistogram::new();
        let began = monotonic_now_ns();
        let end = began.saturating_add(common.duration.get());
        // At least two rounds so each variant meets the hogs in more than one phase.
        let slice = (common.duration.get() / (tracks.len().max(1) as u64 * 2))
            .clamp(200_000_000, 2_000_000_000);
        while monotonic_now_ns() < end && !rtlab_sys::signal::interrupted() {
            for (index, (_, subject, waits, failed)) in tracks.iter_mut().enumerate() {
                if failed.is_some() {
                    continue;
                }
                let slice_end =
                    (monotonic_now_ns() + slice).min(end.max(monotonic_now_ns() + 100_000_000));
                let report = reporter.as_ref().map(|r| (r, index as u16));
                match subject.slice(cfg, slice_end, report) {
                    Ok(s) => {
                        waits.merge(&s.waits);
                        wakeups.merge(&s.wakeups);
                    }
                    Err(e) => *failed = Some(e),
                }
                observer.tick(Nanos(monotonic_now_ns() - began), common.duration, &[]);
                if rtlab_sys::signal::interrupted() {
                    break;
                }
            }
        }
        if let Some(session) = session {
            session.finish(cfg.cpus.as_slice(), observer, &mut outcome);
        }
        let wake_p99 = wakeups.value_at_quantile(0.99).get();
        let bound = cfg.hold.get() + wake_p99;
        for (variant, _, waits, failed) in &tracks {
            if let Some(e) = failed {
                outcome.warn(observer, format!("{}: skipped: {e}", variant.name()));
                continue;
            }
            if waits.is_empty() {
                continue;
            }
            let max = waits.max().get();
            let series = Series::distribution(
                format!("{}{}", self.prefix, variant.name()),
                "lock_wait",
                waits,
            )?
            .with_config("protocol", variant.name().split('/').next().unwrap_or(""))
            .with_config("hold_ns", cfg.hold.get())
            .with_config("period_ns", cfg.period.get())
            .with_config("hogs", cfg.hogs)
            .with_config("hog_run_ns", cfg.hog_run.get())
            .with_config("hog_period_ns", cfg.hog_period.get())
            .with_config("cpus", cfg.cpus.to_string())
            .with_config("high_prio", cfg.high_prio);
            outcome.series.push(
                WaitBound {
                    bound_ns: bound,
                    bounded: max <= bound,
                    exceeded_by_ns: max.saturating_sub(bound),
                }
                .into_config_of(series),
            );
        }
        outcome.series.push(
            Series::distribution(
                format!("{}high/wakeup_latency", self.prefix),
                "wakeup_latency",
                &wakeups,
            )?
            .with_config("period_ns", cfg.period.get())
            .with_config("prio", cfg.high_prio),
        );
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::NullObserver;

    fn config(variants: Vec<Variant>) -> InvertConfig {
        let cpus = rtlab_sys::affinity::usable_cpus();
        InvertConfig::with_defaults(
            CpuList::from(vec![*cpus.as_slice().last().unwrap()]),
            variants,
        )
    }

    #[test]
    fn bad_configs_are_refused() {
        let mut c = config(vec![Variant::NoneRtlab]);
        c.hog_run = Nanos::from_millis(49);
        assert!(Invert::new(c).is_err(), "98 % hog share must be refused");
        let mut c = config(vec![Variant::NoneRtlab]);
        c.hold = Nanos::from_millis(20);
        assert!(Invert::new(c).is_err());
        let mut c = config(vec![Variant::NoneRtlab]);
        c.high_prio = 2;
        assert!(Invert::new(c).is_err());
    }

    #[test]
    // Regression: with a fixed sleep the owner phase-locked to the hogs' pauses and no
    // inversion ever happened, so no-protocol waits stayed at the hold time.
    fn without_a_protocol_the_wait_exceeds_the_hold_and_with_pi_it_does_not() {
        if !rtlab_sys::probe::can_use_fifo(30) {
            rtlab_sys::testing::say_skipped("needs SCHED_FIFO (run as root)");
            return;
        }
        // Hogs that start often (every 20 ms, 12 ms each), so a 4 s run meets many inversions.
        let mut cfg = config(vec![Variant::NoneRtlab, Variant::InheritRtlab]);
        cfg.hog_run = Nanos::from_millis(12);
        cfg.hog_period = Nanos::from_millis(20);
        let exp = Invert::new(cfg).unwrap();
        let common = CommonConfig {
            duration: Nanos::from_secs(4),
            loads: vec![],
            mlock: false,
            dma_latency: false,
        };
        let out = exp.run(&common, &mut NullObserver).unwrap();
        // Waits of three holds or more, and all waits, of one variant.
        let long = |name: &str| {
            let series = out.series.iter().find(|s| s.name == name).unwrap();
            let hist = series.decode_histogram().unwrap().unwrap();
            let short = hist.hdr().count_between(0, 3_000_000);
            (hist.len() - short, hist.len())
        };
        let (none, pi) = (long("none/rtlab"), long("inherit/rtlab"));
        // What the test injects: a hog that starts while the owner holds the lock keeps the
        // high thread waiting for the rest of its 12 ms run, which happens in about half of
        // the hogs' 100 periods per variant; with inheritance the owner finishes its 1 ms
        // hold first. Counts, not the max: beside other load the kernel's fair server
        // (6.12+) takes even a boosted owner's CPU for up to 50 ms a second, which a max
        // over the run would catch whatever the protocol (a soak beside stress-ng saw PI
        // 31.8 ms vs no-PI 28.4 ms), but it cannot make many waits long.
        assert!(
            none.0 >= 10,
            "only {} of {} no-PI waits lasted three 1 ms holds or more",
            none.0,
            none.1
        );
        assert!(
            pi.0 * 3 <= none.0,
            "{} of {} PI waits lasted three holds or more, against {} of {} without PI",
            pi.0,
            pi.1,
            none.0,
            none.1
        );
    }
}

/// `rtlab invert --check`: pi_stress-style correctness run. Inversion groups (low owner,
/// medium spinner, high requester, all on one CPU) repeat for the duration on rtlab's
/// `PiMutex`; a high thread that waits longer than [`STALL_NS`] is a stall (the medium spinner
/// gives up after [`WATCHDOG_NS`], so a broken protocol cannot hang the machine).
#[derive(Debug, Clone)]
pub struct InvertCheck {
    /// The CPU the groups run on.
    pub cpu: usize,
    /// Priority of the high thread (medium `-1`, low `-2`).
    pub high_prio: u32,
}

/// A high thread waiting longer than this is a stall.
pub const STALL_NS: u64 = 1_000_000_000;
/// The medium spinner's watchdog.
pub const WATCHDOG_NS: u64 = 2_000_000_000;
/// Work the low owner does inside the lock, per group.
const GROUP_HOLD_NS: u64 = 2_000_000;

fn inversion_group(mutex: &PiMutex<()>, cpu: usize, high_prio: u32) -> Result<u64, LabError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let held = rtlab_sync::Event::new();
    let done = AtomicBool::new(false);
    // The medium spinner waits until the high thread is a FIFO thread on the CPU: a new
    // thread is SCHED_OTHER until it enters, and one placed on the spinner's CPU would wait
    // for RT throttling (about a second) before it could (seen as a group a second long
    // under a compile load).
    let high_entered = rtlab_sync::Event::new();
    std::thread::scope(|s| {
        let low = s.spawn(|| -> Result<(), LabError> {
            enter(cpu, Policy::Fifo, high_prio - 2)?;
            let guard = mutex.lock()?;
            held.set();
            spin_until(monotonic_now_ns() + GROUP_HOLD_NS);
            drop(guard);
            Ok(())
        });
        if !held.wait_until(Some(monotonic_now_ns() + WATCHDOG_NS)) {
            return Err(LabError::Setup("the low thread never took the lock".into()));
        }
        let high = s.spawn(|| -> Result<u64, LabError> {
            let entered = enter(cpu, Policy::Fifo, high_prio);
            high_entered.set();
            entered?;
            // Let the medium spinner start first, so the inversion is set up.
            let _ = sleep_until_monotonic_ns(monotonic_now_ns() + 1_000_000);
            let t0 = monotonic_now_ns();
            let guard = mutex.lock()?;
            let waited = monotonic_now_ns() - t0;
            drop(guard);
            done.store(true, Ordering::Release);
            Ok(waited)
        });
        let medium = s.spawn(|| -> Result<(), LabError> {
            enter(cpu, Policy::Fifo, high_prio - 1)?;
            let _ = high_entered.wait_until(Some(monotonic_now_ns() + WATCHDOG_NS));
            let deadline = monotonic_now_ns() + WATCHDOG_NS;
            while !done.load(Ordering::Acquire) && monotonic_now_ns() < deadline {
                std::hint::spin_loop();
            }
            Ok(())
        });
        let waited = high.join().map_err(|_| LabError::Panicked("high".into()))?;
        medium
            .join()
            .map_err(|_| LabError::Panicked("medium".into()))??;
        low.join().map_err(|_| LabError::Panicked("low".into()))??;
        waited
    })
}

impl Experiment for InvertCheck {
    fn command(&self) -> &'static str {
        "invert"
    }

    fn run(&self, common: &CommonConfig, observer: &mut dyn Observer) -> Result<Outcome, LabError> {
        if !rtlab_sys::probe::can_use_fifo(self.high_prio) {
            return Err(LabError::Config(
                "the correctness mode needs SCHED_FIFO (run as root)".into(),
            ));
        }
        if !(3..=98).contains(&self.high_prio) {
            return Err(LabError::bad(
                "high_prio",
                format!("{} must be 3-98", self.high_prio),
            ));
        }
        let mut outcome = Outcome::default();
        let mut waits = LatencyHistogram::new();
        let (mut groups, mut stalls) = (0u64, 0u64);
        let began = monotonic_now_ns();
        let end = began.saturating_add(common.duration.get());
        let mutex = PiMutex::new(());
        while monotonic_now_ns() < end && !rtlab_sys::signal::interrupted() {
            let waited = inversion_group(&mutex, self.cpu, self.high_prio)
                .map_err(LabError::in_measuring_thread)?;
            waits.record(Nanos(waited));
            groups += 1;
            if waited > STALL_NS {
                stalls += 1;
                outcome.warn(
                    observer,
                    format!(
                        "stall: group {groups}: the high thread waited {} for the PI mutex",
                        Nanos(waited)
                    ),
                );
            }
            if groups % 50 == 0 {
                observer.tick(Nanos(monotonic_now_ns() - began), common.duration, &[]);
            }
        }
        use rtlab_stats::result::Unit;
        outcome.series.push(
            Series::distribution("check/lock_wait", "lock_wait", &waits)?
                .with_config("cpu", self.cpu)
                .with_config("high_prio", self.high_prio)
                .with_config("hold_ns", GROUP_HOLD_NS)
                .with_config("stall_ns", STALL_NS),
        );
        outcome.series.push(Series::value(
            "check/groups",
            "inversion_groups",
            Unit::Count,
            groups as f64,
        ));
        outcome.series.push(Series::value(
            "check/stalls",
            "stalls",
            Unit::Count,
            stalls as f64,
        ));
        Ok(outcome)
    }
}
