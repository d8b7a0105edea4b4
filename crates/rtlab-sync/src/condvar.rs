//! Priority-inheritance condition variable on requeue-PI futexes.
//!
//! The condition word is a sequence number, used **only** with `FUTEX_WAIT_REQUEUE_PI` and
//! `FUTEX_CMP_REQUEUE_PI` (mixing it with plain `FUTEX_WAIT` would give `EINVAL`):
//!
//! | word  | meaning                                                               |
//! |-------|-----------------------------------------------------------------------|
//! | `seq` | bumped by every notify; a waiter sleeps only if it still has the value it read while holding the mutex |
//!
//! A waiter reads `seq` while it holds the PI mutex, unlocks, and sleeps in
//! `FUTEX_WAIT_REQUEUE_PI(seq, mutex)`. A notifier bumps `seq` and calls
//! `FUTEX_CMP_REQUEUE_PI(nr_wake = 1)`: the kernel takes the mutex **for** the top waiter (the
//! highest-priority one: the futex queue is priority-ordered) and moves the other waiters
//! (`notify_all`) onto the mutex's PI wait queue, so they acquire it one by one in priority
//! order and never stampede. Every wait returns with the mutex owned by the caller, whether
//! it was woken, timed out or saw `seq` change before sleeping (then it locks by itself).
//! All waiters of one condvar must use the same mutex, with the same scope as the condvar.

use crate::pi_mutex::{PiMutexGuard, RawPiMutex};
use crate::robust::RobustMutex;
use rtlab_sys::futex::{self, current_tid, Errno, Scope, TID_MASK};
use std::sync::atomic::{AtomicU32, Ordering};

/// Outcome of a timed wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitResult {
    /// Notified (or woken spuriously: re-check the predicate).
    Notified,
    /// The deadline passed.
    TimedOut,
}

/// A PI condition variable. `#[repr(C)]` and pointer-free: a shared one may live in
/// `MAP_SHARED` memory beside its shared mutex.
#[repr(C)]
#[derive(Debug)]
pub struct PiCondvar {
    pub(crate) seq: AtomicU32,
    shared: u32,
}

impl Default for PiCondvar {
    fn default() -> Self {
        Self::new()
    }
}

impl PiCondvar {
    /// A process-private condvar (to be used with a private `PiMutex`).
    pub const fn new() -> Self {
        PiCondvar {
            seq: AtomicU32::new(0),
            shared: 0,
        }
    }

    /// A process-shared condvar (with a shared `RawPiMutex`, in `MAP_SHARED` memory).
    pub const fn new_shared() -> Self {
        PiCondvar {
            seq: AtomicU32::new(0),
            shared: 1,
        }
    }

    /// Private or shared.
    pub fn scope(&self) -> Scope {
        Scope::from_flag(self.shared)
    }

    /// Waits for a notify. `guard` is released while waiting and held again on return.
    pub fn wait<T: ?Sized>(&self, guard: &mut PiMutexGuard<'_, T>) {
        // SAFETY: the guard proves this thread owns the mutex.
        unsafe { self.wait_raw(guard.mutex().raw(), None) };
    }

    /// Waits for a notify or until `deadline_ns` (absolute `CLOCK_MONOTONIC`).
    pub fn wait_until<T: ?Sized>(
        &self,
        guard: &mut PiMutexGuard<'_, T>,
        deadline_ns: u64,
    ) -> WaitResult {
        // SAFETY: the guard proves this thread owns the mutex.
        unsafe { self.wait_raw(guard.mutex().raw(), Some(deadline_ns)) }
    }

    /// The raw form, for mutexes in shared memory.
    ///
    /// # Safety
    /// The calling thread must own `mutex`; it owns it again when this returns.
    pub unsafe fn wait_raw(&self, mutex: &RawPiMutex, deadline_ns: Option<u64>) -> WaitResult {
        debug_assert_eq!(
            mutex.scope(),
            self.scope(),
            "condvar and mutex scopes differ"
        );
        // Read while holding the mutex: a notify after our unlock must bump it.
        let seq = self.seq.load(Ordering::Relaxed);
        // SAFETY: forwarded: the caller owns `mutex`.
        unsafe { mutex.unlock() };
        let result = futex::wait_requeue_pi(
            &self.seq,
            self.scope(),
            seq,
            deadline_ns,
            mutex.futex_word(),
        );
        let owned = mutex.futex_word().load(Ordering::Acquire) & TID_MASK == current_tid();
        let timed_out = result == Err(Errno::TIMEDOUT);
        if !owned {
            // Not requeued-and-acquired (seq changed first, a signal, or a timeout before the
            // requeue): take the mutex ourselves so the caller always returns owning it.
            let relocked = mutex.lock();
            debug_assert!(
                relocked.is_ok(),
                "relock after condvar wait failed: {relocked:?}"
            );
        }
        if timed_out {
            WaitResult::TimedOut
        } else {
            WaitResult::Notified
        }
    }

    /// Wakes the highest-priority waiter, which returns owning `mutex`.
    pub fn notify_one(&self, mutex: &RawPiMutex) {
        self.requeue(mutex.futex_word(), 0);
    }

    /// Wakes all waiters: one now, the others requeued onto `mutex`'s PI queue.
    pub fn notify_all(&self, mutex: &RawPiMutex) {
        self.requeue(mutex.futex_word(), i32::MAX as u32);
    }

    /// [`notify_one`](Self::notify_one) for waiters that wait with
    /// [`RobustGuard::wait`](crate::RobustGuard::wait) on `mutex`.
    pub fn notify_one_robust(&self, mutex: &RobustMutex) {
        self.requeue(mutex.futex_word(), 0);
    }

    /// A notify when no thread has waited yet, so no mutex is known to requeue onto: a
    /// waiter about to sleep (it read the sequence, not yet asleep) returns at once instead.
    pub fn notify_unbound(&self) {
        // Release: as in a notify, a waiter that sees the new seq sees our writes.
        self.seq.fetch_add(1, Ordering::Release);
    }

    /// [`notify_all`](Self::notify_all) for a [`RobustMutex`].
    pub fn notify_all_robust(&self, mutex: &RobustMutex) {
        self.requeue(mutex.futex_word(), i32::MAX as u32);
    }

    fn requeue(&self, word: &AtomicU32, nr_requeue: u32) {
        if let Err(e) = self.try_requeue(word, nr_requeue) {
            debug_assert!(false, "FUTEX_CMP_REQUEUE_PI failed: {e}");
        }
    }

    fn try_requeue(&self, word: &AtomicU32, nr_requeue: u32) -> Result<(), Errno> {
        loop {
            // Release: a waiter that sees the new seq (through the kernel) sees our writes.
            let seq = self.seq.fetch_add(1, Ordering::Release).wrapping_add(1);
            match futex::cmp_requeue_pi(&self.seq, self.scope(), nr_requeue, word, seq) {
                Ok(_) => return Ok(()),
                // Another notify bumped seq in between: ours is covered by a retry.
                Err(Errno::AGAIN) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// [`notify_one`](Self::notify_one) (`all`: [`notify_all`](Self::notify_all)) onto a
    /// mutex word whose address came from memory a peer can write (a shared condition
    /// variable's record of its mutex), reporting what the kernel refuses instead of
    /// dropping it: `EINVAL` when waiters wait for another mutex (the record was scribbled),
    /// `EFAULT` when the address is not mapped. The kernel validates the word; user space
    /// never reads it.
    pub fn try_notify(&self, word: &AtomicU32, all: bool) -> Result<(), Errno> {
        self.try_requeue(word, if all { i32::MAX as u32 } else { 0 })
    }
}
