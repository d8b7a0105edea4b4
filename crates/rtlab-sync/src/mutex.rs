//! One mutex and one guard over any raw lock (lock_api's pattern).
//!
//! A raw lock ([`RawLock`]) is a lock word and the code that takes and releases it: the PI
//! word ([`RawPiMutex`](crate::RawPiMutex)), the plain futex word
//! ([`RawFutexMutex`](crate::RawFutexMutex)), the ceiling lock
//! ([`RawCeilingMutex`](crate::RawCeilingMutex)). [`Mutex`] puts a value beside it and
//! [`MutexGuard`] gives access to the value while the lock is held; the unsafe parts of
//! handing out `&mut T` live here once, for every kind of lock.

use crate::LockError;
use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// A lock without data: lock, try, unlock.
///
/// # Safety
/// Implementations must provide mutual exclusion: from an `Ok` of [`lock`](RawLock::lock) or
/// [`try_lock`](RawLock::try_lock) until the matching [`unlock`](RawLock::unlock), no other
/// call may return `Ok`. [`Mutex`] relies on it to hand out `&mut T`.
pub unsafe trait RawLock {
    /// Takes the lock, blocking while another thread holds it.
    fn lock(&self) -> Result<(), LockError>;

    /// Takes the lock if it is free right now ([`LockError::WouldBlock`] otherwise).
    fn try_lock(&self) -> Result<(), LockError>;

    /// Releases the lock.
    ///
    /// # Safety
    /// The calling thread must hold the lock (an `Ok` from `lock`, `try_lock` or
    /// [`RawLockUntil::lock_until`] on this thread, not yet released).
    unsafe fn unlock(&self);
}

/// A raw lock that can give up at a deadline.
pub trait RawLockUntil: RawLock {
    /// Takes the lock or gives up at `deadline_ns` (absolute `CLOCK_MONOTONIC`) with
    /// [`LockError::TimedOut`].
    fn lock_until(&self, deadline_ns: u64) -> Result<(), LockError>;
}

/// A value protected by the raw lock `R`.
///
/// The named mutexes are this type: [`PiMutex`](crate::PiMutex),
/// [`FutexMutex`](crate::FutexMutex), [`CeilingMutex`](crate::CeilingMutex).
pub struct Mutex<R, T: ?Sized> {
    raw: R,
    data: UnsafeCell<T>,
}

// SAFETY: the mutex hands out access to `T` to one thread at a time (`RawLock`'s contract), so
// it may be sent between threads whenever `T` and the lock word may.
unsafe impl<R: RawLock + Send, T: ?Sized + Send> Send for Mutex<R, T> {}
// SAFETY: as above; `&Mutex` only gives `&mut T` through a guard, one owner at a time.
unsafe impl<R: RawLock + Sync, T: ?Sized + Send> Sync for Mutex<R, T> {}

impl<R: RawLock, T> Mutex<R, T> {
    /// A mutex over `raw`, which must be unlocked.
    #[inline]
    pub const fn from_raw(raw: R, value: T) -> Self {
        Mutex {
            raw,
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the mutex, returning the value.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<R: RawLock, T: ?Sized> Mutex<R, T> {
    /// Locks, blocking while held. Fails as the raw lock does (for a PI mutex: `Deadlock` when
    /// the calling thread already holds it, or an `Os` error from a corrupted lock word).
    #[inline]
    pub fn lock(&self) -> Result<MutexGuard<'_, R, T>, LockError> {
        self.raw.lock()?;
        Ok(self.guard())
    }

    /// Locks if free right now.
    #[inline]
    pub fn try_lock(&self) -> Result<MutexGuard<'_, R, T>, LockError> {
        self.raw.try_lock()?;
        Ok(self.guard())
    }

    /// The raw lock (for condition variables).
    pub fn raw(&self) -> &R {
        &self.raw
    }

    /// Mutable access without locking (the borrow proves exclusivity).
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    /// Only after the raw lock was taken by this thread.
    #[inline]
    fn guard(&self) -> MutexGuard<'_, R, T> {
        MutexGuard {
            mutex: self,
            _not_send: PhantomData,
        }
    }
}

impl<R: RawLockUntil, T: ?Sized> Mutex<R, T> {
    /// Locks or gives up at `deadline_ns` (absolute `CLOCK_MONOTONIC`).
    pub fn lock_until(&self, deadline_ns: u64) -> Result<MutexGuard<'_, R, T>, LockError> {
        self.raw.lock_until(deadline_ns)?;
        Ok(self.guard())
    }
}

impl<R: RawLock + Default, T: Default> Default for Mutex<R, T> {
    fn default() -> Self {
        Mutex::from_raw(R::default(), T::default())
    }
}

impl<R: fmt::Debug, T: ?Sized> fmt::Debug for Mutex<R, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex")
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

/// Access to the protected value; unlocks on drop. Not `Send`: a PI or ceiling lock knows its
/// owner by TID (and the ceiling changed this thread's priority), so the thread that locked
/// must be the one that unlocks.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct MutexGuard<'a, R: RawLock, T: ?Sized> {
    mutex: &'a Mutex<R, T>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing `&MutexGuard` between threads only shares `&T` and `&Mutex`.
unsafe impl<R: RawLock + Sync, T: ?Sized + Sync> Sync for MutexGuard<'_, R, T> {}

impl<'a, R: RawLock, T: ?Sized> MutexGuard<'a, R, T> {
    /// The mutex this guard holds (for condition variables).
    pub fn mutex(&self) -> &'a Mutex<R, T> {
        self.mutex
    }
}

impl<R: RawLock, T: ?Sized> Deref for MutexGuard<'_, R, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard proves this thread holds the lock, so no `&mut T` exists elsewhere.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<R: RawLock, T: ?Sized> DerefMut for MutexGuard<'_, R, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves exclusive ownership of the lock, hence of `T`.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<R: RawLock, T: ?Sized> Drop for MutexGuard<'_, R, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: a guard exists only while its thread holds the lock; it is !Send, so this
        // is that thread.
        unsafe { self.mutex.raw.unlock() }
    }
}

impl<R: RawLock, T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, R, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
