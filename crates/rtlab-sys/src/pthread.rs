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

/// A glibc `pthread_mutex_t`, boxed (or, process-shared, in a shared mapping of its own) so
/// it never moves after `pthread_mutex_init`.
pub struct PthreadMutex {
    inner: *mut libc::pthread_mutex_t,
    _storage: MutexStorage,
    kind: PthreadKind,
}

/// Where a [`PthreadMutex`] lives.
enum MutexStorage {
    Boxed(#[allow(dead_code)] Box<UnsafeCell<libc::pthread_mutex_t>>),
    Shared(#[allow(dead_code)] crate::mem::AnonMapping),
}

// SAFETY: pthread mutexes are designed to be used from any thread; `inner` points into the
// storage this value owns, which never moves.
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
        Self::with_storage(kind, false)
    }

    /// [`PthreadMutex::new`] with `PTHREAD_PROCESS_SHARED`, in a `MAP_SHARED` mapping of its
    /// own: a child forked afterwards locks the same mutex.
    pub fn new_shared(kind: PthreadKind) -> Result<Self, SysError> {
        Self::with_storage(kind, true)
    }

    fn with_storage(kind: PthreadKind, shared: bool) -> Result<Self, SysError> {
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
            let configured = configured.and_then(|_| {
                if shared {
                    check(
                        "pthread_mutexattr_setpshared",
                        libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED),
                    )
                } else {
                    Ok(())
                }
            });
            let (inner, storage) = if shared {
                let map = crate::mem::AnonMapping::new_shared(std::mem::size_of::<
                    libc::pthread_mutex_t,
                >());
                match map {
                    Ok(map) => (map.as_ptr().cast(), MutexStorage::Shared(map)),
                    Err(e) => {
                        libc::pthread_mutexattr_destroy(&mut attr);
                        return Err(e);
                    }
                }
            } else {
                let boxed = Box::new(UnsafeCell::new(std::mem::zeroed::<libc::pthread_mutex_t>()));
                (boxed.get(), MutexStorage::Boxed(boxed))
            };
            let init = configured
                .and_then(|_| check("pthread_mutex_init", libc::pthread_mutex_init(inner, &attr)));
            libc::pthread_mutexattr_destroy(&mut attr);
            init?;
            Ok(PthreadMutex {
                inner,
                _storage: storage,
                kind,
            })
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
        let rc = unsafe { libc::pthread_mutex_lock(self.inner) };
        let owner_died = rc == libc::EOWNERDEAD;
        if owner_died {
            // SAFETY: we own it now (EOWNERDEAD returns with the lock held).
            unsafe { libc::pthread_mutex_consistent(self.inner) };
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

impl PthreadMutex {
    /// C: `pthread_mutex_unlock`, for a mutex held without a guard (its guard was given up
    /// with `mem::forget`).
    ///
    /// # Safety
    /// The calling thread holds it.
    #[inline]
    pub unsafe fn unlock_held(&self) {
        // SAFETY: per the contract; the mutex was initialised in `new` and never moves.
        let rc = unsafe { libc::pthread_mutex_unlock(self.inner) };
        debug_assert_eq!(rc, 0, "pthread_mutex_unlock failed");
    }
}

impl Drop for PthreadMutex {
    /// A robust mutex still held here had its guard forgotten (`mem::forget`; a live guard
    /// borrows it), and glibc keeps it linked in its holder's robust list: freeing it would
    /// leave that list pointing into freed memory, which glibc and the kernel write through.
    /// If this thread holds it, it is unlocked (glibc unlinks it); if another live thread of
    /// this process does, the process aborts (that thread's list cannot be touched from
    /// here), the contract of rtlab's own `RobustMutex`.
    fn drop(&mut self) {
        if matches!(self.kind, PthreadKind::Robust | PthreadKind::RobustPi) {
            // The robust mutex's futex word (`__data.__lock`, its first int) holds the
            // owner's TID, as the kernel's robust-futex ABI requires.
            // SAFETY: `inner` points to the live, initialised mutex this value owns; the
            // word is only read, atomically.
            let word = unsafe {
                (*self.inner.cast::<std::sync::atomic::AtomicU32>())
                    .load(std::sync::atomic::Ordering::Relaxed)
            };
            let owner = word & 0x3fff_ffff; // FUTEX_TID_MASK
            if owner != 0 && owner == crate::futex::current_tid() {
                // SAFETY: this thread holds it (its TID is the owner's).
                unsafe { libc::pthread_mutex_unlock(self.inner) };
            } else if owner != 0 && crate::process::thread_in_this_process(owner) {
                eprintln!(
                    "rtlab: a robust PthreadMutex was dropped while thread {owner} still held it \
                     (its guard was forgotten); aborting rather than leave that thread's robust \
                     list pointing into freed memory"
                );
                std::process::abort();
            }
        }
        // SAFETY: no guard borrows it any more (guards borrow `self`).
        unsafe { libc::pthread_mutex_destroy(self.inner) };
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
        let rc = unsafe { libc::pthread_mutex_unlock(self.mutex.inner) };
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
        let rc = unsafe { libc::pthread_cond_wait(self.inner.get(), guard.mutex.inner) };
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

/// A glibc mutex + condition variable on `CLOCK_MONOTONIC`, process-private or
/// `PTHREAD_PROCESS_SHARED` (then placed in `MAP_SHARED` memory), used for timed waits that
/// are meant to time out: the seed's "RT thread woken at an absolute time through a condvar".
pub struct PthreadTimedWait {
    // Keeps the memory alive: a box for private, a shared mapping for shared.
    _storage: Storage,
    mutex: *mut libc::pthread_mutex_t,
    cond: *mut libc::pthread_cond_t,
    shared: bool,
}

enum Storage {
    Private(#[allow(dead_code)] Box<UnsafeCell<(libc::pthread_mutex_t, libc::pthread_cond_t)>>),
    Shared(#[allow(dead_code)] crate::mem::AnonMapping),
}

// SAFETY: the objects are pinned (box or mapping) and glibc synchronises all access.
unsafe impl Send for PthreadTimedWait {}
// SAFETY: as above: every method goes through pthread calls that synchronise internally.
unsafe impl Sync for PthreadTimedWait {}

impl fmt::Debug for PthreadTimedWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PthreadTimedWait")
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

impl PthreadTimedWait {
    /// C: `pthread_mutexattr_setpshared` / `pthread_condattr_setpshared` (when `shared`),
    /// `pthread_condattr_setclock(CLOCK_MONOTONIC)`, `pthread_mutex_init`, `pthread_cond_init`.
    pub fn new(shared: bool) -> Result<Self, SysError> {
        let pshared = if shared {
            libc::PTHREAD_PROCESS_SHARED
        } else {
            libc::PTHREAD_PROCESS_PRIVATE
        };
        let (storage, mutex, cond) = if shared {
            let map = crate::mem::AnonMapping::new_shared(4096)?;
            let mutex = map.as_ptr() as *mut libc::pthread_mutex_t;
            let cond = map.as_ptr().wrapping_add(128) as *mut libc::pthread_cond_t;
            (Storage::Shared(map), mutex, cond)
        } else {
            // SAFETY: zeroed pthread objects are valid storage for *_init.
            let b: Box<UnsafeCell<(libc::pthread_mutex_t, libc::pthread_cond_t)>> =
                Box::new(UnsafeCell::new(unsafe { std::mem::zeroed() }));
            let pair = b.get();
            // SAFETY: `pair` points into the box, which lives in `Storage`.
            let (mutex, cond) = unsafe { (&raw mut (*pair).0, &raw mut (*pair).1) };
            (Storage::Private(b), mutex, cond)
        };
        // SAFETY: attrs are initialised before use and destroyed after; `mutex`/`cond` point to
        // pinned, zeroed storage that outlives `self`.
        unsafe {
            let mut mattr: libc::pthread_mutexattr_t = std::mem::zeroed();
            let mut cattr: libc::pthread_condattr_t = std::mem::zeroed();
            check(
                "pthread_mutexattr_init",
                libc::pthread_mutexattr_init(&mut mattr),
            )?;
            check(
                "pthread_condattr_init",
                libc::pthread_condattr_init(&mut cattr),
            )?;
            let result = check(
                "pthread_mutexattr_setpshared",
                libc::pthread_mutexattr_setpshared(&mut mattr, pshared),
            )
            .and_then(|_| {
                check(
                    "pthread_condattr_setpshared",
                    libc::pthread_condattr_setpshared(&mut cattr, pshared),
                )
            })
            .and_then(|_| {
                check(
                    "pthread_condattr_setclock",
                    libc::pthread_condattr_setclock(&mut cattr, libc::CLOCK_MONOTONIC),
                )
            })
            .and_then(|_| {
                check(
                    "pthread_mutex_init",
                    libc::pthread_mutex_init(mutex, &mattr),
                )
            })
            .and_then(|_| check("pthread_cond_init", libc::pthread_cond_init(cond, &cattr)));
            libc::pthread_mutexattr_destroy(&mut mattr);
            libc::pthread_condattr_destroy(&mut cattr);
            result?;
        }
        Ok(PthreadTimedWait {
            _storage: storage,
            mutex,
            cond,
            shared,
        })
    }

    /// Locks, waits on the condvar until `deadline_ns` (absolute `CLOCK_MONOTONIC`), unlocks.
    /// C: `pthread_mutex_lock; pthread_cond_timedwait(&cond, &mutex, &abstime); unlock`.
    /// Returns true when it timed out (the expected outcome: nobody signals).
    pub fn wait_until(&self, deadline_ns: u64) -> bool {
        let ts = libc::timespec {
            tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: both objects were initialised in `new` and live in pinned storage; the
        // mutex is locked around the wait as pthread_cond_timedwait requires.
        unsafe {
            libc::pthread_mutex_lock(self.mutex);
            let mut rc = 0;
            // Spurious wakeups re-wait with the same absolute deadline.
            while rc == 0 {
                rc = libc::pthread_cond_timedwait(self.cond, self.mutex, &ts);
            }
            libc::pthread_mutex_unlock(self.mutex);
            rc == libc::ETIMEDOUT
        }
    }
}

impl Drop for PthreadTimedWait {
    fn drop(&mut self) {
        // SAFETY: no waiter exists (waiting borrows `self`); storage is still alive here.
        unsafe {
            libc::pthread_cond_destroy(self.cond);
            libc::pthread_mutex_destroy(self.mutex);
        }
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

    #[test]
    fn timed_waits_time_out_on_time_private_and_shared() {
        for shared in [false, true] {
            let w = PthreadTimedWait::new(shared).unwrap();
            let deadline = crate::time::monotonic_now_ns() + 2_000_000;
            assert!(w.wait_until(deadline));
            assert!(crate::time::monotonic_now_ns() >= deadline);
        }
    }
}
