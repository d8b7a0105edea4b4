//! Priority-protect ("priority ceiling") mutex.
//!
//! Locking first raises the calling thread to `SCHED_FIFO` at the mutex's ceiling, then takes
//! the lock; unlocking releases the lock, then restores the scheduling the thread had. While a
//! thread holds the lock, no thread at or below the ceiling can preempt it on its CPU, so the
//! hold time is bounded without any kernel support beyond `sched_setscheduler`.
//!
//! Differences from glibc's `PTHREAD_PRIO_PROTECT`: a `SCHED_OTHER` caller is accepted (it runs
//! as FIFO at the ceiling while holding the lock; glibc refuses it with `EINVAL`). A thread
//! runs at the highest ceiling of the ceiling mutexes it holds, and at its own scheduling
//! again once it holds none, whatever order the guards are dropped in. A caller
//! whose real-time priority is above the ceiling is refused ([`LockError::CeilingViolation`]),
//! as POSIX requires. The lock word itself is a [`RawPiMutex`] (bit table there), so waiters on
//! other CPUs also lend their priority if they are above the ceiling's holder.

use crate::{LockError, RawPiMutex};
use rtlab_sys::sched::{current_thread_scheduler, set_current_thread_scheduler, Policy};
use std::cell::{RefCell, UnsafeCell};
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// A priority-protect mutex protecting a `T`.
pub struct CeilingMutex<T: ?Sized> {
    ceiling: u32,
    raw: RawPiMutex,
    data: UnsafeCell<T>,
}

// SAFETY: one owner at a time gets access to `T`, as for any mutex.
unsafe impl<T: ?Sized + Send> Send for CeilingMutex<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send> Sync for CeilingMutex<T> {}

impl<T> CeilingMutex<T> {
    /// A process-private mutex with `ceiling` (1-99, a SCHED_FIFO priority).
    ///
    /// # Panics
    /// If `ceiling` is outside 1-99.
    pub fn new(ceiling: u32, value: T) -> Self {
        assert!(
            (1..=99).contains(&ceiling),
            "ceiling {ceiling} outside 1-99"
        );
        CeilingMutex {
            ceiling,
            raw: RawPiMutex::new(),
            data: UnsafeCell::new(value),
        }
    }
}

impl<T: ?Sized> CeilingMutex<T> {
    /// The ceiling priority.
    pub fn ceiling(&self) -> u32 {
        self.ceiling
    }

    /// Raises the caller to the ceiling, then locks.
    pub fn lock(&self) -> Result<CeilingGuard<'_, T>, LockError> {
        let (policy, prio) = current_thread_scheduler();
        let policy = policy.unwrap_or(Policy::Other);
        if policy.is_realtime() && prio > self.ceiling {
            return Err(LockError::CeilingViolation {
                caller: prio,
                ceiling: self.ceiling,
            });
        }
        // Nested at the same ceiling (or already there): nothing to change.
        if !(policy == Policy::Fifo && prio == self.ceiling) {
            set_current_thread_scheduler(Policy::Fifo, self.ceiling).map_err(|e| {
                if e.is_permission() {
                    LockError::PermissionDenied
                } else {
                    LockError::Os(0)
                }
            })?;
        }
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if h.ceilings.is_empty() {
                h.base = Some((policy, prio));
            }
            h.ceilings.push(self.ceiling);
        });
        if let Err(e) = self.raw.lock() {
            release_ceiling(self.ceiling);
            return Err(e);
        }
        Ok(CeilingGuard {
            mutex: self,
            _not_send: PhantomData,
        })
    }
}

/// The ceilings this thread holds, and its scheduling from before the first of them.
struct Held {
    ceilings: Vec<u32>,
    base: Option<(Policy, u32)>,
}

thread_local! {
    static HELD: RefCell<Held> = const {
        RefCell::new(Held {
            ceilings: Vec::new(),
            base: None,
        })
    };
}

/// Forgets one held `ceiling` and sets the thread to what it still holds: the highest
/// remaining ceiling, or its own scheduling when none is left.
fn release_ceiling(ceiling: u32) {
    let now = HELD.with(|h| {
        let mut h = h.borrow_mut();
        if let Some(i) = h.ceilings.iter().rposition(|&c| c == ceiling) {
            h.ceilings.swap_remove(i);
        }
        match h.ceilings.iter().max() {
            Some(&top) => Some((Policy::Fifo, top)),
            None => h.base.take(),
        }
    });
    if let Some((policy, prio)) = now {
        if current_thread_scheduler() != (Some(policy), prio) {
            restore(Some((policy, prio)));
        }
    }
}

fn restore(saved: Option<(Policy, u32)>) {
    if let Some((policy, prio)) = saved {
        let result = set_current_thread_scheduler(policy, prio);
        debug_assert!(
            result.is_ok(),
            "restoring {policy} {prio} failed: {result:?}"
        );
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for CeilingMutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CeilingMutex")
            .field("ceiling", &self.ceiling)
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

/// Access to the value; unlocks, then restores the caller's scheduling, on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct CeilingGuard<'a, T: ?Sized> {
    mutex: &'a CeilingMutex<T>,
    _not_send: PhantomData<*const ()>,
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for CeilingGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized> Deref for CeilingGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves this thread owns the lock.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T: ?Sized> DerefMut for CeilingGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves exclusive ownership of the lock, hence of `T`.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T: ?Sized> Drop for CeilingGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: this thread (the guard is !Send) owns the lock.
        unsafe { self.mutex.raw.unlock() };
        // Only after the release: lowering first could let a medium thread preempt the holder.
        release_ceiling(self.mutex.ceiling);
    }
}
