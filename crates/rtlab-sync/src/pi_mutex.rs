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

use crate::mutex::{Mutex, MutexGuard, RawLock, RawLockUntil};
use crate::LockError;
use rtlab_sys::futex::{self, current_tid, Scope, TID_MASK};
use std::fmt;
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

// SAFETY: the PI word admits one owner at a time: `lock`/`try_lock` return `Ok` only after a
// CAS from 0 to this thread's TID (or the kernel's LOCK_PI/TRYLOCK_PI wrote it), and the word
// is 0 again only after the owner's `unlock`.
unsafe impl RawLock for RawPiMutex {
    #[inline]
    fn lock(&self) -> Result<(), LockError> {
        RawPiMutex::lock(self)
    }

    #[inline]
    fn try_lock(&self) -> Result<(), LockError> {
        RawPiMutex::try_lock(self)
    }

    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: forwarded: the caller holds the lock.
        unsafe { RawPiMutex::unlock(self) }
    }
}

impl RawLockUntil for RawPiMutex {
    fn lock_until(&self, deadline_ns: u64) -> Result<(), LockError> {
        RawPiMutex::lock_until(self, deadline_ns)
    }
}

/// A priority-inheritance mutex protecting a `T` (process-private). `lock` fails only with
/// `Deadlock` (the calling thread already holds it) or an `Os` error from a corrupted word;
/// `lock_until` takes an absolute `CLOCK_MONOTONIC` deadline.
///
/// ```
/// use rtlab_sync::PiMutex;
/// let m = PiMutex::new(0u64);
/// *m.lock().unwrap() += 1;
/// assert_eq!(*m.lock().unwrap(), 1);
/// ```
pub type PiMutex<T> = Mutex<RawPiMutex, T>;

/// Access to a [`PiMutex`]'s value; unlocks on drop. Not `Send`: the kernel knows the owner
/// by TID, so the thread that locked must be the one that unlocks.
pub type PiMutexGuard<'a, T> = MutexGuard<'a, RawPiMutex, T>;

impl<T> Mutex<RawPiMutex, T> {
    /// A process-private PI mutex.
    pub const fn new(value: T) -> Self {
        Mutex::from_raw(RawPiMutex::new(), value)
    }
}
