//! The locks the experiments drive, behind one trait so each is monomorphised (no dynamic
//! dispatch in a loop measured in nanoseconds).

use crate::LabError;
use rtlab_sync::{CeilingMutex, FutexMutex, PiMutex, RobustError, RobustMutex};
use rtlab_sys::affinity::{set_current_thread_affinity, CpuList};
use rtlab_sys::pthread::PthreadMutex;
use rtlab_sys::sched::{set_current_thread_scheduler, Policy};
use std::pin::Pin;

/// Pins the calling thread to `cpu` and sets its scheduling.
pub(crate) fn enter(cpu: usize, policy: Policy, prio: u32) -> Result<(), LabError> {
    set_current_thread_affinity(&CpuList::from(vec![cpu]))?;
    Ok(set_current_thread_scheduler(policy, prio)?)
}

/// Spins on the clock until `until_ns` (absolute `CLOCK_MONOTONIC`): work that preemption
/// stretches, as real work would be.
#[inline]
pub(crate) fn spin_until(until_ns: u64) {
    while rtlab_sys::time::monotonic_now_ns() < until_ns {
        std::hint::spin_loop();
    }
}

/// A lock under test: `lock` returns a guard that unlocks on drop.
pub(crate) trait BenchLock: Sync {
    type Guard<'a>
    where
        Self: 'a;
    fn acquire(&self) -> Result<Self::Guard<'_>, LabError>;
}

impl BenchLock for PiMutex<()> {
    type Guard<'a> = rtlab_sync::PiMutexGuard<'a, ()>;
    #[inline]
    fn acquire(&self) -> Result<Self::Guard<'_>, LabError> {
        Ok(self.lock()?)
    }
}

impl BenchLock for CeilingMutex<()> {
    type Guard<'a> = rtlab_sync::CeilingGuard<'a, ()>;
    #[inline]
    fn acquire(&self) -> Result<Self::Guard<'_>, LabError> {
        Ok(self.lock()?)
    }
}

impl BenchLock for Pin<Box<RobustMutex>> {
    type Guard<'a> = rtlab_sync::RobustGuard<'a>;
    #[inline]
    fn acquire(&self) -> Result<Self::Guard<'_>, LabError> {
        self.as_ref().lock().map_err(|e| match e {
            RobustError::Lock(e) => LabError::Lock(e),
            e => LabError::Robust(e.to_string()),
        })
    }
}

impl BenchLock for PthreadMutex {
    type Guard<'a> = rtlab_sys::pthread::PthreadGuard<'a>;
    #[inline]
    fn acquire(&self) -> Result<Self::Guard<'_>, LabError> {
        Ok(self.lock()?)
    }
}

impl BenchLock for std::sync::Mutex<()> {
    type Guard<'a> = std::sync::MutexGuard<'a, ()>;
    #[inline]
    fn acquire(&self) -> Result<Self::Guard<'_>, LabError> {
        self.lock().map_err(|_| LabError::Poisoned)
    }
}

impl BenchLock for parking_lot::Mutex<()> {
    type Guard<'a> = parking_lot::MutexGuard<'a, ()>;
    #[inline]
    fn acquire(&self) -> Result<Self::Guard<'_>, LabError> {
        Ok(self.lock())
    }
}

impl BenchLock for FutexMutex<()> {
    type Guard<'a> = rtlab_sync::FutexMutexGuard<'a, ()>;
    #[inline]
    fn acquire(&self) -> Result<Self::Guard<'_>, LabError> {
        Ok(self.lock()?)
    }
}

impl BenchLock for rtlab_sys::sysv_sem::SysvSem {
    type Guard<'a> = rtlab_sys::sysv_sem::SysvSemGuard<'a>;
    #[inline]
    fn acquire(&self) -> Result<Self::Guard<'_>, LabError> {
        Ok(self.lock()?)
    }
}
