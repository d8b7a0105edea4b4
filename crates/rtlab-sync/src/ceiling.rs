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

use crate::mutex::{Mutex, MutexGuard, RawLock};
use crate::{LockError, RawPiMutex};
use rtlab_sys::sched::{current_thread_scheduler, set_current_thread_scheduler, Policy};
use std::cell::RefCell;
use std::fmt;

/// The ceiling lock alone: a ceiling priority and a [`RawPiMutex`] (process-private).
pub struct RawCeilingMutex {
    ceiling: u32,
    raw: RawPiMutex,
}

impl RawCeilingMutex {
    /// An unlocked lock with `ceiling` (1-99, a SCHED_FIFO priority).
    ///
    /// # Panics
    /// If `ceiling` is outside 1-99.
    pub fn new(ceiling: u32) -> Self {
        assert!(
            (1..=99).contains(&ceiling),
            "ceiling {ceiling} outside 1-99"
        );
        RawCeilingMutex {
            ceiling,
            raw: RawPiMutex::new(),
        }
    }

    /// The ceiling priority.
    pub fn ceiling(&self) -> u32 {
        self.ceiling
    }

    /// Raises the caller to the ceiling (recording what it had), then runs `take` on the
    /// word; on failure puts the caller's scheduling back.
    fn raise_then(
        &self,
        take: impl FnOnce(&RawPiMutex) -> Result<(), LockError>,
    ) -> Result<(), LockError> {
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
        take(&self.raw).inspect_err(|_| release_ceiling(self.ceiling))
    }
}

// SAFETY: exclusion is the inner `RawPiMutex`'s; the ceiling only changes the holder's
// scheduling.
unsafe impl RawLock for RawCeilingMutex {
    /// Raises the caller to the ceiling, then locks.
    fn lock(&self) -> Result<(), LockError> {
        self.raise_then(RawPiMutex::lock)
    }

    /// Raises the caller to the ceiling, then locks if free (and lowers it again if not).
    fn try_lock(&self) -> Result<(), LockError> {
        self.raise_then(RawPiMutex::try_lock)
    }

    unsafe fn unlock(&self) {
        // SAFETY: forwarded: the caller holds the lock.
        unsafe { self.raw.unlock() };
        // Only after the release: lowering first could let a medium thread preempt the holder.
        release_ceiling(self.ceiling);
    }
}

impl fmt::Debug for RawCeilingMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawCeilingMutex")
            .field("ceiling", &self.ceiling)
            .field("raw", &self.raw)
            .finish()
    }
}

/// A priority-protect mutex protecting a `T`. `lock` raises the caller to the ceiling, then
/// locks; dropping the guard unlocks, then restores the caller's scheduling.
pub type CeilingMutex<T> = Mutex<RawCeilingMutex, T>;

/// Access to a [`CeilingMutex`]'s value; unlocks, then restores the caller's scheduling, on
/// drop.
pub type CeilingGuard<'a, T> = MutexGuard<'a, RawCeilingMutex, T>;

impl<T> Mutex<RawCeilingMutex, T> {
    /// A process-private mutex with `ceiling` (1-99, a SCHED_FIFO priority).
    ///
    /// # Panics
    /// If `ceiling` is outside 1-99.
    pub fn new(ceiling: u32, value: T) -> Self {
        Mutex::from_raw(RawCeilingMutex::new(ceiling), value)
    }
}

impl<T: ?Sized> Mutex<RawCeilingMutex, T> {
    /// The ceiling priority.
    pub fn ceiling(&self) -> u32 {
        self.raw().ceiling()
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
