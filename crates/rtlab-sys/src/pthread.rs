//! glibc's pthread mutexes, for side-by-side comparison with rtlab's own primitives.

use crate::SysError;
use std::cell::UnsafeCell;
use std::fmt;

/// Which `pthread_mutexattr_t` settings a [`PthreadMutex`] is created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PthreadKind {
    /// `PTHREAD_MUTEX_NORMAL`, `PTHREAD_PRIO_NONE`.
    Normal,
    /// `PTHREAD_PRIO_INHERIT`.
    PrioInherit,
    /// `PTHREAD_PRIO_PROTECT` with this ceiling (callers must be SCHED_FIFO/RR at or below it).
    PrioProtect(u32),
    /// `PTHREAD_MUTEX_ROBUST` (process-private here).
    Robust,
    /// `PTHREAD_MUTEX_ROBUST` with `PTHREAD_PRIO_INHERIT`.
    RobustPi,
}

/// A glibc `pthread_mutex_t`, boxed so it never moves after `pthread_mutex_init`.
pub struct PthreadMutex {
    inner: Box<UnsafeCell<libc::pthread_mutex_t>>,
    kind: PthreadKind,
}

// SAFETY: pthread mutexes are designed to be used from any thread; the box pins the object.
unsafe impl Send for PthreadMutex {}
// SAFETY: as above; all access goes through pthread_mutex_* which synchronise internally.
unsafe impl Sync for PthreadMutex {}

impl fmt::Debug for PthreadMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PthreadMutex")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

fn check(what: &str, rc: libc::c_int) -> Result<(), SysError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(SysError::from_io(
            what,
            std::io::Error::from_raw_os_error(rc),
        ))
    }
}

impl PthreadMutex {
    /// C: `pthread_mutexattr_init; ...set*(kind); pthread_mutex_init`.
    pub fn new(kind: PthreadKind) -> Result<Self, SysError> {
        // SAFETY: zeroed pthread types are valid storage for the *_init calls that follow;
        // every call gets pointers to live, pinned (boxed or stack) objects.
        unsafe {
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            check(
                "pthread_mutexattr_init",
                libc::pthread_mutexattr_init(&mut attr),
            )?;
            let configured = match kind {
                PthreadKind::Normal => check(
                    "pthread_mutexattr_settype(NORMAL)",
                    libc::pthread_mutexattr_settype(&mut attr, libc::PTHREAD_MUTEX_NORMAL),
                ),
                PthreadKind::PrioInherit => check(
                    "pthread_mutexattr_setprotocol(PRIO_INHERIT)",
                    libc::pthread_mutexattr_setprotocol(&mut attr, libc::PTHREAD_PRIO_INHERIT),
                ),
                PthreadKind::PrioProtect(ceiling) => check(
                    "pthread_mutexattr_setprotocol(PRIO_PROTECT)",
                    libc::pthread_mutexattr_setprotocol(&mut attr, libc::PTHREAD_PRIO_PROTECT),
                )
                .and_then(|_| {
                    check(
                        "pthread_mutexattr_setprioceiling",
                        pthread_mutexattr_setprioceiling(&mut attr, ceiling as libc::c_int),
                    )
                }),
                PthreadKind::Robust => check(
                    "pthread_mutexattr_setrobust",
                    libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST),
                ),
                PthreadKind::RobustPi => check(
                    "pthread_mutexattr_setrobust",
                    libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST),
                )
                .and_then(|_| {
                    check(
                        "pthread_mutexattr_setprotocol(PRIO_INHERIT)",
                        libc::pthread_mutexattr_setprotocol(&mut attr, libc::PTHREAD_PRIO_INHERIT),
                    )
                }),
            };
            let inner = Box::new(UnsafeCell::new(std::mem::zeroed::<libc::pthread_mutex_t>()));
            let init = configured.and_then(|_| {
                check(
                    "pthread_mutex_init",
                    libc::pthread_mutex_init(inner.get(), &attr),
                )
            });
            libc::pthread_mutexattr_destroy(&mut attr);
            init?;
            Ok(PthreadMutex { inner, kind })
        }
    }

    /// The kind it was created with.
    pub fn kind(&self) -> PthreadKind {
        self.kind
    }

    /// C: `pthread_mutex_lock`. A robust mutex whose owner died is made consistent and
    /// returned locked. Fails e.g. with `EINVAL` for a priority-protect mutex locked by a
    /// thread above its ceiling or not running SCHED_FIFO/RR.
    #[inline]
    pub fn lock(&self) -> Result<PthreadGuard<'_>, SysError> {
        self.lock_reporting_owner_death().map(|(guard, _)| guard)
    }

    /// Like [`lock`](Self::lock), also telling whether the previous owner had died holding it
    /// (`EOWNERDEAD`; the mutex has been made consistent again).
    #[inline]
    pub fn lock_reporting_owner_death(&self) -> Result<(PthreadGuard<'_>, bool), SysError> {
        // SAFETY: the mutex was initialised in `new` and is pinned in its box.
        let rc = unsafe { libc::pthread_mutex_lock(self.inner.get()) };
        let owner_died = rc == libc::EOWNERDEAD;
        if owner_died {
            // SAFETY: we own it now (EOWNERDEAD returns with the lock held).
            unsafe { libc::pthread_mutex_consistent(self.inner.get()) };
        } else {
            check("pthread_mutex_lock", rc)?;
        }
        let guard = PthreadGuard {
            mutex: self,
            _not_send: std::marker::PhantomData,
        };
        Ok((guard, owner_died))
    }
}

impl Drop for PthreadMutex {
    fn drop(&mut self) {
        // SAFETY: no guard borrows it any more (guards borrow `self`).
        unsafe { libc::pthread_mutex_destroy(self.inner.get()) };
    }
}

/// Unlocks on drop; stays on the locking thread.
#[derive(Debug)]
#[must_use = "the mutex is unlocked when the guard is dropped"]
pub struct PthreadGuard<'a> {
    mutex: &'a PthreadMutex,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for PthreadGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard exists only while this thread holds the lock.
        let rc = unsafe { libc::pthread_mutex_unlock(self.mutex.inner.get()) };
        debug_assert_eq!(rc, 0, "pthread_mutex_unlock failed");
    }
}

extern "C" {
    // Not exported by the libc crate for Linux gnu targets at every version.
    fn pthread_mutexattr_setprioceiling(
        attr: *mut libc::pthread_mutexattr_t,
        ceiling: libc::c_int,
    ) -> libc::c_int;
}

/// A glibc `pthread_cond_t` (default attributes, `CLOCK_REALTIME`, process-private), boxed so
/// it never moves after `pthread_cond_init`.
pub struct PthreadCond {
    inner: Box<UnsafeCell<libc::pthread_cond_t>>,
}

// SAFETY: condition variables are designed for use from any thread; the box pins the object.
unsafe impl Send for PthreadCond {}
// SAFETY: as above.
unsafe impl Sync for PthreadCond {}

impl fmt::Debug for PthreadCond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PthreadCond").finish_non_exhaustive()
    }
}

impl PthreadCond {
    /// C: `pthread_cond_init(&cond, NULL)`.
    pub fn new() -> Result<Self, SysError> {
        // SAFETY: zeroed storage is valid input for pthread_cond_init; the box pins it.
        let inner = Box::new(UnsafeCell::new(unsafe {
            std::mem::zeroed::<libc::pthread_cond_t>()
        }));
        // SAFETY: `inner` points to pinned storage; a null attr means defaults.
        check("pthread_cond_init", unsafe {
            libc::pthread_cond_init(inner.get(), std::ptr::null())
        })?;
        Ok(PthreadCond { inner })
    }

    /// C: `pthread_cond_wait(&cond, mutex)`: releases the guard's mutex while waiting.
    pub fn wait(&self, guard: &PthreadGuard<'_>) {
        // SAFETY: the guard proves this thread holds the (initialised, pinned) mutex.
        let rc = unsafe { libc::pthread_cond_wait(self.inner.get(), guard.mutex.inner.get()) };
        debug_assert_eq!(rc, 0, "pthread_cond_wait failed");
    }

    /// C: `pthread_cond_signal(&cond)`.
    pub fn signal(&self) {
        // SAFETY: initialised and pinned.
        unsafe { libc::pthread_cond_signal(self.inner.get()) };
    }
}

impl Drop for PthreadCond {
    fn drop(&mut self) {
        // SAFETY: no waiter can exist: waiting borrows `self`.
        unsafe { libc::pthread_cond_destroy(self.inner.get()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_locks_and_unlocks() {
        for kind in [
            PthreadKind::Normal,
            PthreadKind::PrioInherit,
            PthreadKind::Robust,
        ] {
            let m = PthreadMutex::new(kind).unwrap();
            drop(m.lock().unwrap());
            drop(m.lock().unwrap());
        }
    }

    #[test]
    fn priority_protect_refuses_a_sched_other_caller() {
        let m = PthreadMutex::new(PthreadKind::PrioProtect(10)).unwrap();
        std::thread::spawn(move || {
            crate::sched::set_current_thread_scheduler(crate::sched::Policy::Other, 0).unwrap();
            assert!(m.lock().is_err());
        })
        .join()
        .unwrap();
    }
}
