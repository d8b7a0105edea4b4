//! `rtlab lock`'s condition-variable wake-up latency (`<impl>/condvar_wake`): a waiter sleeps
//! on the condition variable of an implementation, the other thread sets the predicate under
//! the mutex, stamps the time, unlocks and notifies.

use super::{Impl, Sched, CONDVAR_BATCH, CONDVAR_GAP_NS};
use crate::mutex_impls::enter;
use crate::LabError;
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sync::{PiCondvar, PiMutex};
use rtlab_sys::pthread::{PthreadCond, PthreadKind, PthreadMutex};
use rtlab_sys::time::monotonic_now_ns;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A mutex + condition variable guarding a boolean predicate.
trait BenchCondvar: Sync {
    /// Locks, sets `armed`, waits until the predicate is true, clears it; returns the time at
    /// which the waiter ran again.
    fn wait_and_clear(&self, armed: &AtomicBool) -> u64;
    /// Sets the predicate under the mutex, stamps the time into `stamp`, unlocks, notifies.
    fn set_and_notify(&self, stamp: &AtomicU64);
}

pub(super) struct RtlabCond(PiMutex<bool>, PiCondvar);
pub(super) struct StdCond(std::sync::Mutex<bool>, std::sync::Condvar);
pub(super) struct ParkingLotCond(parking_lot::Mutex<bool>, parking_lot::Condvar);
pub(super) struct GlibcCond(PthreadMutex, PthreadCond, AtomicBool);

impl BenchCondvar for RtlabCond {
    fn wait_and_clear(&self, armed: &AtomicBool) -> u64 {
        let mut g = self.0.lock().expect("not held by this thread");
        armed.store(true, Ordering::Release);
        while !*g {
            self.1.wait(&mut g);
        }
        let woke = monotonic_now_ns();
        *g = false;
        woke
    }
    fn set_and_notify(&self, stamp: &AtomicU64) {
        let mut g = self.0.lock().expect("not held by this thread");
        *g = true;
        stamp.store(monotonic_now_ns(), Ordering::Relaxed);
        drop(g);
        self.1.notify_one(self.0.raw());
    }
}

impl BenchCondvar for StdCond {
    fn wait_and_clear(&self, armed: &AtomicBool) -> u64 {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        armed.store(true, Ordering::Release);
        while !*g {
            g = self.1.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        let woke = monotonic_now_ns();
        *g = false;
        woke
    }
    fn set_and_notify(&self, stamp: &AtomicU64) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *g = true;
        stamp.store(monotonic_now_ns(), Ordering::Relaxed);
        drop(g);
        self.1.notify_one();
    }
}

impl BenchCondvar for ParkingLotCond {
    fn wait_and_clear(&self, armed: &AtomicBool) -> u64 {
        let mut g = self.0.lock();
        armed.store(true, Ordering::Release);
        while !*g {
            self.1.wait(&mut g);
        }
        let woke = monotonic_now_ns();
        *g = false;
        woke
    }
    fn set_and_notify(&self, stamp: &AtomicU64) {
        let mut g = self.0.lock();
        *g = true;
        stamp.store(monotonic_now_ns(), Ordering::Relaxed);
        drop(g);
        self.1.notify_one();
    }
}

impl BenchCondvar for GlibcCond {
    fn wait_and_clear(&self, armed: &AtomicBool) -> u64 {
        let g = self.0.lock().expect("glibc mutex lock");
        armed.store(true, Ordering::Release);
        // Relaxed: the predicate is only read and written under the pthread mutex.
        while !self.2.load(Ordering::Relaxed) {
            self.1.wait(&g);
        }
        let woke = monotonic_now_ns();
        self.2.store(false, Ordering::Relaxed);
        woke
    }
    fn set_and_notify(&self, stamp: &AtomicU64) {
        let g = self.0.lock().expect("glibc mutex lock");
        self.2.store(true, Ordering::Relaxed);
        stamp.store(monotonic_now_ns(), Ordering::Relaxed);
        drop(g);
        self.1.signal();
    }
}

/// One batch of notify-to-wake latencies, recorded into `hist` after the batch.
fn condvar_batch<C: BenchCondvar>(
    cond: &C,
    cpus: (usize, usize),
    sched: Sched,
    hist: &mut LatencyHistogram,
    report: crate::explain::Report<'_>,
) -> Result<(), LabError> {
    let armed = AtomicBool::new(false);
    let stamp = AtomicU64::new(0);
    let samples = std::thread::scope(|s| {
        let waiter = s.spawn(|| -> Result<Vec<u64>, LabError> {
            // Named, so an explained outlier says who notified whom.
            let _ = rtlab_sys::process::set_current_thread_name("rtlab-cv-waiter");
            enter(cpus.1, sched.policy, sched.prio)?;
            let tid = rtlab_sys::futex::current_tid() as i64;
            let mut samples = Vec::with_capacity(CONDVAR_BATCH as usize);
            for _ in 0..CONDVAR_BATCH {
                let woke = cond.wait_and_clear(&armed);
                let stamped = stamp.load(Ordering::Relaxed);
                crate::explain::report_wait(
                    report,
                    crate::explain::Wait::Notify,
                    tid,
                    stamped,
                    woke,
                );
                samples.push(woke.saturating_sub(stamped));
            }
            Ok(samples)
        });
        let notifier = s.spawn(|| -> Result<(), LabError> {
            let _ = rtlab_sys::process::set_current_thread_name("rtlab-cv-notify");
            enter(cpus.0, sched.policy, sched.prio)?;
            for _ in 0..CONDVAR_BATCH {
                // Acquire: pairs with the waiter's Release; it holds or held the mutex then.
                while !armed.swap(false, Ordering::Acquire) {
                    std::thread::sleep(std::time::Duration::from_micros(10));
                }
                // Let the waiter fall asleep in the condvar before notifying.
                rtlab_sys::time::sleep_until_monotonic_ns(monotonic_now_ns() + CONDVAR_GAP_NS)?;
                cond.set_and_notify(&stamp);
            }
            Ok(())
        });
        let notified = notifier
            .join()
            .map_err(|_| LabError::Panicked("notifier".into()));
        let samples = waiter
            .join()
            .map_err(|_| LabError::Panicked("waiter".into()));
        notified??;
        samples?
    })?;
    for ns in samples {
        hist.record(Nanos(ns));
    }
    Ok(())
}

/// The condition variable paired with an implementation, where there is one.
pub(super) enum CondSubject {
    Rtlab(RtlabCond),
    Std(StdCond),
    ParkingLot(ParkingLotCond),
    Glibc(GlibcCond),
}

impl CondSubject {
    pub(super) fn new(which: Impl) -> Result<Option<Self>, LabError> {
        Ok(match which {
            Impl::RtlabPi => Some(CondSubject::Rtlab(RtlabCond(
                PiMutex::new(false),
                PiCondvar::new(),
            ))),
            Impl::Std => Some(CondSubject::Std(StdCond(
                Default::default(),
                Default::default(),
            ))),
            Impl::ParkingLot => Some(CondSubject::ParkingLot(ParkingLotCond(
                Default::default(),
                Default::default(),
            ))),
            Impl::GlibcNormal => Some(CondSubject::Glibc(GlibcCond(
                PthreadMutex::new(PthreadKind::Normal)?,
                PthreadCond::new()?,
                AtomicBool::new(false),
            ))),
            _ => None,
        })
    }

    pub(super) fn batch(
        &self,
        cpus: (usize, usize),
        sched: Sched,
        hist: &mut LatencyHistogram,
        report: crate::explain::Report<'_>,
    ) -> Result<(), LabError> {
        match self {
            CondSubject::Rtlab(c) => condvar_batch(c, cpus, sched, hist, report),
            CondSubject::Std(c) => condvar_batch(c, cpus, sched, hist, report),
            CondSubject::ParkingLot(c) => condvar_batch(c, cpus, sched, hist, report),
            CondSubject::Glibc(c) => condvar_batch(c, cpus, sched, hist, report),
        }
    }
}
