//! Priority-inheritance mutex on a PI futex.
//!
//! The futex word (kernel-defined for PI futexes):
//!
//! | value                     | state                                                    |
//! |---------------------------|----------------------------------------------------------|
//! | `0`                       | unlocked                                                 |
//! | `tid`                     | locked by `tid`, no waiters: unlock is a user-space CAS  |
//! | `tid \| FUTEX_WAITERS`    | locked, waiters queued in the kernel: unlock must call `FUTEX_UNLOCK_PI`, which hands the lock to the highest-priority waiter |
//! | `... \| FUTEX_OWNER_DIED` | only for robust use (see `RobustMutex`); never set here   |
//!
//! Fast paths never enter the kernel: lock is `CAS(0 -> tid)`, unlock is `CAS(tid -> 0)`.
//! While a thread waits in `FUTEX_LOCK_PI`, the kernel boosts the owner to the waiter's
//! priority (priority inheritance), which is the point of the whole exercise.

use crate::LockError;
use rtlab_sys::futex::{self, current_tid, Scope, TID_MASK};
use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};

/// The lock word alone, `#[repr(C)]` and pointer-free so it can live in shared memory.
///
/// A process-shared one must be placed in `MAP_SHARED` memory ([`RawPiMutex::new_shared`]);
/// a private one must never be shared between processes.
#[repr(C)]
pub struct RawPiMutex {
    word: AtomicU32,
    /// 0 = private, 1 = shared (a plain integer so the layout is the same in every process).
    shared: u32,
}

impl fmt::Debug for RawPiMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawPiMutex")
            .field(
                "word",
                &format_args!("{:#x}", self.word.load(Ordering::Relaxed)),
            )
            .field("scope", &self.scope())
            .finish()
    }
}

impl Default for RawPiMutex {
    fn default() -> Self {
        Self::new()
    }
}

impl RawPiMutex {
    /// An unlocked process-private mutex.
    pub const fn new() -> Self {
        RawPiMutex {
            word: AtomicU32::new(0),
            shared: 0,
        }
    }

    /// An unlocked process-shared mutex, to be placed in `MAP_SHARED` memory.
    pub const fn new_shared() -> Self {
        RawPiMutex {
            word: AtomicU32::new(0),
            shared: 1,
        }
    }

    /// Private or shared.
    #[inline]
    pub fn scope(&self) -> Scope {
        Scope::from_flag(self.shared)
    }

    /// The futex word (for condition variables that requeue onto it).
    pub fn futex_word(&self) -> &AtomicU32 {
        &self.word
    }

    /// TID of the current owner, 0 when unlocked (a snapshot).
    pub fn owner_tid(&self) -> u32 {
        self.word.load(Ordering::Relaxed) & TID_MASK
    }

    /// Takes the lock, blocking with priority inheritance if it is held.
    #[inline]
    pub fn lock(&self) -> Result<(), LockError> {
        self.lock_inner(None)
    }

    /// Takes the lock or gives up at `deadline_ns` (absolute `CLOCK_MONOTONIC`, see
    /// `rtlab_sys::time::monotonic_now_ns`). Uses `FUTEX_LOCK_PI2` (Linux 5.14+); older
    /// kernels fall back to `FUTEX_LOCK_PI` with the deadline converted to `CLOCK_REALTIME`,
    /// so a wall-clock step during the wait would move it.
    pub fn lock_until(&self, deadline_ns: u64) -> Result<(), LockError> {
        self.lock_inner(Some(deadline_ns))
    }

    #[inline]
    fn lock_inner(&self, deadline_ns: Option<u64>) -> Result<(), LockError> {
        let tid = current_tid();
        // Acquire: the critical section must see everything the previous owner wrote before
        // its Release unlock (or before the kernel's full barrier in UNLOCK_PI).
        match self
            .word
            .compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Ok(()),
            Err(current) if current & TID_MASK == tid => Err(LockError::Deadlock),
            Err(_) => self.lock_slow(deadline_ns),
        }
    }

    #[cold]
    fn lock_slow(&self, deadline_ns: Option<u64>) -> Result<(), LockError> {
        // The syscall is a full barrier, so the Acquire above need not be repeated.
        futex::lock_pi(&self.word, self.scope(), deadline_ns).map_err(LockError::from)
    }

    /// Takes the lock if no other thread holds it.
    pub fn try_lock(&self) -> Result<(), LockError> {
        let tid = current_tid();
        match self
            .word
            .compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Ok(()),
            Err(current) if current & TID_MASK == tid => Err(LockError::Deadlock),
            // Owner bits clear but WAITERS set (the kernel is mid hand-over): let it decide.
            Err(current) if current & TID_MASK == 0 => {
                match futex::trylock_pi(&self.word, self.scope()) {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(LockError::WouldBlock),
                    Err(e) => Err(e.into()),
                }
            }
            Err(_) => Err(LockError::WouldBlock),
        }
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The calling thread must own the lock (took it with `lock`, `lock_until` or `try_lock`
    /// and has not released it).
    #[inline]
    pub unsafe fn unlock(&self) {
        let tid = current_tid();
        // Release: publishes the critical section's writes to the next owner's Acquire.
        if self
            .word
            .compare_exchange(tid, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            self.unlock_slow();
        }
    }

    #[cold]
    fn unlock_slow(&self) {
        // WAITERS is set: the kernel hands the lock to the top waiter and un-boosts us.
        let result = futex::unlock_pi(&self.word, self.scope());
        debug_assert!(
            result.is_ok(),
            "unlock of a PI mutex not owned by this thread"
        );
    }
}

/// A priority-inheritance mutex protecting a `T`.
///
/// ```
/// use rtlab_sync::PiMutex;
/// let m = PiMutex::new(0u64);
/// *m.lock().unwrap() += 1;
/// assert_eq!(*m.lock().unwrap(), 1);
/// ```
pub struct PiMutex<T: ?Sized> {
    raw: RawPiMutex,
    data: UnsafeCell<T>,
}

// SAFETY: the mutex hands out access to `T` to one thread at a time, so it may be shared
// and sent between threads whenever `T` itself may be sent.
unsafe impl<T: ?Sized + Send> Send for PiMutex<T> {}
// SAFETY: as above; `&PiMutex<T>` only gives `&mut T` through a guard, one owner at a time.
unsafe impl<T: ?Sized + Send> Sync for PiMutex<T> {}

impl<T> PiMutex<T> {
    /// A process-private PI mutex.
    pub const fn new(value: T) -> Self {
        PiMutex {
            raw: RawPiMutex::new(),
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the mutex, returning the value.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> PiMutex<T> {
    /// Locks, blocking with priority inheritance. Fails only with `Deadlock` (the calling
    /// thread already holds it) or an `Os` error from a corrupted lock word.
    #[inline]
    pub fn lock(&self) -> Result<PiMutexGuard<'_, T>, LockError> {
        self.raw.lock()?;
        Ok(PiMutexGuard {
            mutex: self,
            _not_send: PhantomData,
        })
    }

    /// Locks or gives up at `deadline_ns` (absolute `CLOCK_MONOTONIC`).
    pub fn lock_until(&self, deadline_ns: u64) -> Result<PiMutexGuard<'_, T>, LockError> {
        self.raw.lock_until(deadline_ns)?;
        Ok(PiMutexGuard {
            mutex: self,
            _not_send: PhantomData,
        })
    }

    /// Locks if free right now.
    pub fn try_lock(&self) -> Result<PiMutexGuard<'_, T>, LockError> {
        self.raw.try_lock()?;
        Ok(PiMutexGuard {
            mutex: self,
            _not_send: PhantomData,
        })
    }

    /// The raw lock (for condition variables).
    pub fn raw(&self) -> &RawPiMutex {
        &self.raw
    }

    /// Mutable access without locking (the borrow proves exclusivity).
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for PiMutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PiMutex")
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

impl<T: Default> Default for PiMutex<T> {
    fn default() -> Self {
        PiMutex::new(T::default())
    }
}

/// Access to the protected value; unlocks on drop. Not `Send`: the kernel knows the owner
/// by TID, so the thread that locked must be the one that unlocks.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct PiMutexGuard<'a, T: ?Sized> {
    mutex: &'a PiMutex<T>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing `&PiMutexGuard` between threads only shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for PiMutexGuard<'_, T> {}

impl<'a, T: ?Sized> PiMutexGuard<'a, T> {
    /// The mutex this guard holds (for condition variables).
    pub fn mutex(&self) -> &'a PiMutex<T> {
        self.mutex
    }
}

impl<T: ?Sized> Deref for PiMutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves this thread owns the lock, so no `&mut T` exists elsewhere.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T: ?Sized> DerefMut for PiMutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves exclusive ownership of the lock, hence of `T`.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T: ?Sized> Drop for PiMutexGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: a guard exists only while its thread owns the lock; it is !Send, so this is
        // that thread.
        unsafe { self.mutex.raw.unlock() }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for PiMutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
