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

use crate::LockError;
use rtlab_sys::futex::{self, Scope};
use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};

/// A non-PI mutex protecting a `T` (process-private).
pub struct FutexMutex<T: ?Sized> {
    word: AtomicU32,
    data: UnsafeCell<T>,
}

// SAFETY: one owner at a time gets access to `T`.
unsafe impl<T: ?Sized + Send> Send for FutexMutex<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send> Sync for FutexMutex<T> {}

impl<T: Default> Default for FutexMutex<T> {
    fn default() -> Self {
        FutexMutex::new(T::default())
    }
}

impl<T> FutexMutex<T> {
    /// An unlocked mutex.
    pub const fn new(value: T) -> Self {
        FutexMutex {
            word: AtomicU32::new(0),
            data: UnsafeCell::new(value),
        }
    }
}

impl<T: ?Sized> FutexMutex<T> {
    /// Locks, sleeping in `FUTEX_WAIT` while held.
    #[inline]
    pub fn lock(&self) -> Result<FutexMutexGuard<'_, T>, LockError> {
        // Acquire: see the previous owner's writes (its Release unlock).
        if self
            .word
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        Ok(FutexMutexGuard {
            mutex: self,
            _not_send: PhantomData,
        })
    }

    #[cold]
    fn lock_contended(&self) {
        // Mark "maybe waiters" and sleep until the swap finds it free.
        while self.word.swap(2, Ordering::Acquire) != 0 {
            futex::wait_until(&self.word, Scope::Private, 2, None);
        }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for FutexMutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FutexMutex")
            .field("word", &self.word.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Access to the value; unlocks on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct FutexMutexGuard<'a, T: ?Sized> {
    mutex: &'a FutexMutex<T>,
    _not_send: PhantomData<*const ()>,
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for FutexMutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized> Deref for FutexMutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves this thread owns the lock.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T: ?Sized> DerefMut for FutexMutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves exclusive ownership of the lock.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T: ?Sized> Drop for FutexMutexGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Release: publish the critical section. 2 means someone may sleep: wake one.
        if self.mutex.word.swap(0, Ordering::Release) == 2 {
            futex::wake(&self.mutex.word, Scope::Private, 1);
        }
    }
}
