//! A plain (non-PI) futex mutex: the baseline that shows what priority inheritance buys.
//!
//! | word | state                                                      |
//! |------|------------------------------------------------------------|
//! | `0`  | unlocked                                                   |
//! | `1`  | locked, no waiter: unlock needs no syscall                 |
//! | `2`  | locked, maybe waiters (sleeping in FUTEX_WAIT): unlock wakes one |
//!
//! The classic three-state design (Drepper, "Futexes Are Tricky"). A waiter sleeps in
//! `FUTEX_WAIT` and the owner keeps its own priority: a high-priority waiter can be delayed
//! without bound by medium-priority work preempting a low-priority owner (priority
//! inversion). Use [`PiMutex`](crate::PiMutex) for real-time work.

use crate::mutex::{Mutex, MutexGuard, RawLock};
use crate::LockError;
use rtlab_sys::futex::{self, Scope};
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};

/// The non-PI lock word alone (process-private).
#[derive(Default)]
pub struct RawFutexMutex {
    word: AtomicU32,
}

impl RawFutexMutex {
    /// An unlocked word.
    pub const fn new() -> Self {
        RawFutexMutex {
            word: AtomicU32::new(0),
        }
    }

    #[cold]
    fn lock_contended(&self) {
        // Mark "maybe waiters" and sleep until the swap finds it free.
        while self.word.swap(2, Ordering::Acquire) != 0 {
            futex::wait_until(&self.word, Scope::Private, 2, None);
        }
    }
}

// SAFETY: the word leaves 0 only through a CAS or swap that found it 0, which one thread wins;
// it is 0 again only after the owner's `unlock`.
unsafe impl RawLock for RawFutexMutex {
    /// Locks, sleeping in `FUTEX_WAIT` while held; never fails.
    #[inline]
    fn lock(&self) -> Result<(), LockError> {
        // Acquire: see the previous owner's writes (its Release unlock).
        if self
            .word
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        Ok(())
    }

    #[inline]
    fn try_lock(&self) -> Result<(), LockError> {
        // Acquire: as in `lock`.
        self.word
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .map(drop)
            .map_err(|_| LockError::WouldBlock)
    }

    #[inline]
    unsafe fn unlock(&self) {
        // Release: publish the critical section. 2 means someone may sleep: wake one.
        if self.word.swap(0, Ordering::Release) == 2 {
            futex::wake(&self.word, Scope::Private, 1);
        }
    }
}

impl fmt::Debug for RawFutexMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawFutexMutex")
            .field("word", &self.word.load(Ordering::Relaxed))
            .finish()
    }
}

/// A non-PI mutex protecting a `T` (process-private). `lock` never fails.
pub type FutexMutex<T> = Mutex<RawFutexMutex, T>;

/// Access to a [`FutexMutex`]'s value; unlocks on drop.
pub type FutexMutexGuard<'a, T> = MutexGuard<'a, RawFutexMutex, T>;

impl<T> Mutex<RawFutexMutex, T> {
    /// An unlocked mutex.
    pub const fn new(value: T) -> Self {
        Mutex::from_raw(RawFutexMutex::new(), value)
    }
}
