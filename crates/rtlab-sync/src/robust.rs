//! Robust priority-inheritance mutex for shared memory.
//!
//! Futex word: as [`RawPiMutex`](crate::RawPiMutex), plus bit 30 `FUTEX_OWNER_DIED`:
//!
//! | word                          | state                                               |
//! |-------------------------------|-----------------------------------------------------|
//! | `0`                           | unlocked                                            |
//! | `tid [\| WAITERS]`            | locked by `tid`                                     |
//! | `OWNER_DIED [\| WAITERS]`     | the owner died holding it; the kernel cleared its TID |
//! | `tid \| OWNER_DIED [...]`     | taken over by `tid` (the kernel keeps the bit); rtlab clears it and reports `OwnerDied` |
//!
//! Consistency word (`state`), as POSIX robust mutexes:
//!
//! | state             | meaning                                                          |
//! |-------------------|------------------------------------------------------------------|
//! | `0` CONSISTENT    | normal                                                           |
//! | `1` INCONSISTENT  | the holder inherited it from a dead owner and has not yet called `make_consistent` |
//! | `2` NOT_RECOVERABLE | it was unlocked while inconsistent: every later lock fails     |
//!
//! Robust list: the kernel finds held locks of a dead thread through the thread's robust
//! list. rtlab does **not** call `set_robust_list` on threads that already have a list
//! (glibc registers one for every thread and would lose its own pthread robust mutexes): it
//! links its entries into that list with glibc's own doubly-linked protocol. That requires the
//! list's `futex_offset` to match this layout (-32: the word at offset 0, the list's `next`
//! field at 32, `prev` at 24, like glibc's x86-64 `pthread_mutex_t`); a thread with no list
//! gets one of rtlab's own; any other offset is refused ([`RobustError::Unsupported`]).
//!
//! `prev`/`next` are addresses in the **owner's** address space: an exception to "offsets,
//! never pointers, in shared memory" that the kernel ABI forces. Only the current owner and
//! the kernel (when that owner dies) ever read them, and each new owner rewrites them.
//!
//! Every list update is bracketed by `list_op_pending`, so a death between taking the futex
//! and linking the entry (or unlinking it and releasing) is still cleaned up by the kernel.
//! Those stores only need to be ordered as the thread itself sees them (the kernel reads them
//! after the thread stopped), hence Relaxed atomics plus compiler fences.

use crate::{LockError, PiCondvar};
use rtlab_sys::futex::{self, current_tid, Scope, OWNER_DIED, TID_MASK};
use rtlab_sys::robust::{current_robust_list, register_robust_list, RobustListHead};
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{compiler_fence, AtomicU32, AtomicUsize, Ordering};

const CONSISTENT: u32 = 0;
const INCONSISTENT: u32 = 1;
const NOT_RECOVERABLE: u32 = 2;
/// The robust-list ABI offset of this layout: word address - entry (`next`) address.
const FUTEX_OFFSET: isize = -32;
/// Bit 0 of an entry pointer tells the kernel the futex is a PI futex.
const PI_BIT: usize = 1;
/// An entry's `prev` slot sits one word before its `next` field (glibc's layout).
const PREV_SLOT: usize = std::mem::size_of::<usize>();

/// Why a robust lock did not simply succeed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RobustError<'a> {
    /// The previous owner died holding it. The lock **is held** by the caller (in the guard):
    /// repair the protected data, then call [`RobustGuard::make_consistent`]; dropping the
    /// guard without that makes the mutex permanently unusable (`NotRecoverable`).
    #[error("the previous owner died holding the lock; it is now held by the caller")]
    OwnerDied(RobustGuard<'a>),
    /// An earlier holder unlocked it without making it consistent.
    #[error("the mutex is not recoverable: an owner died and nobody made it consistent")]
    NotRecoverable,
    /// This thread's robust list cannot take rtlab entries.
    #[error("robust list unusable: {0}")]
    Unsupported(String),
    /// An ordinary lock failure (deadlock, timeout ...).
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// A robust PI mutex, `#[repr(C)]`, to be placed in `MAP_SHARED` memory (or used privately).
/// Aligned to a cache line: the word and the list fields are then always in one line (an
/// unaligned one would touch two per lock+unlock), and neighbours in an array or a shared
/// segment never false-share.
#[repr(C, align(64))]
pub struct RobustMutex {
    word: AtomicU32,
    state: AtomicU32,
    shared: u32,
    _reserved: [u32; 3],
    prev: AtomicUsize,
    next: AtomicUsize,
}

const _: () = {
    assert!(std::mem::size_of::<RobustMutex>() == 64);
    assert!(std::mem::offset_of!(RobustMutex, word) == 0);
    assert!(std::mem::offset_of!(RobustMutex, prev) == 24);
    assert!(std::mem::offset_of!(RobustMutex, next) == 32);
};

impl fmt::Debug for RobustMutex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RobustMutex")
            .field(
                "word",
                &format_args!("{:#x}", self.word.load(Ordering::Relaxed)),
            )
            .field("state", &self.state.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for RobustMutex {
    fn default() -> Self {
        Self::new()
    }
}

/// rtlab's own head for a thread that has none: `prev_slot` mirrors glibc's `robust_prev`,
/// which list updates write through when the list is empty.
#[repr(C)]
struct OwnHead {
    prev_slot: AtomicUsize,
    head: RobustListHead,
}

thread_local! {
    /// (TID it was looked up for, head). Keyed on the TID so a forked child, whose TID cache
    /// is reset, looks its list up again instead of trusting its parent's.
    static HEAD: Cell<Option<(u32, NonNull<RobustListHead>)>> = const { Cell::new(None) };
}

/// The cached head of this thread (pointer-sized result: no error value on the hot path).
#[inline(always)]
fn cached_head(tid: u32) -> Option<NonNull<RobustListHead>> {
    match HEAD.with(Cell::get) {
        Some((owner, head)) if owner == tid => Some(head),
        _ => None,
    }
}

#[cold]
fn look_up_thread_head(tid: u32) -> Result<NonNull<RobustListHead>, String> {
    let head = match current_robust_list().map_err(|e| e.to_string())? {
        Some(head) => {
            // SAFETY: the registered head lives as long as this thread (the kernel requires it).
            let offset = unsafe { head.as_ref() }.futex_offset;
            if offset != FUTEX_OFFSET {
                return Err(format!(
                    "this thread's list has futex_offset {offset}, rtlab needs {FUTEX_OFFSET}"
                ));
            }
            head
        }
        None => {
            // Leaked on purpose: the kernel reads it when the thread exits, after TLS is gone.
            let own: &'static mut OwnHead = Box::leak(Box::new(OwnHead {
                prev_slot: AtomicUsize::new(0),
                head: RobustListHead {
                    list: AtomicUsize::new(0),
                    futex_offset: FUTEX_OFFSET,
                    list_op_pending: AtomicUsize::new(0),
                },
            }));
            let empty = &own.head.list as *const AtomicUsize as usize;
            own.head.list.store(empty, Ordering::Relaxed);
            let head = NonNull::from(&own.head);
            // SAFETY: the head is leaked (lives forever) and the thread had no list to replace.
            unsafe { register_robust_list(head) }.map_err(|e| e.to_string())?;
            head
        }
    };
    HEAD.with(|h| h.set(Some((tid, head))));
    Ok(head)
}

/// Writes `value` into the `prev` slot of the list node whose `next` field is at `next_field`.
///
/// # Safety
/// `next_field` (PI bit cleared) must be the `next` field of a live entry of this thread's
/// list, or the head's `list` field (whose slot before it glibc and `OwnHead` provide).
// Always inlined: called from the fast path after that is inlined into another crate, where a
// plain call becomes an indirect one through the GOT (measured: +50 % per lock+unlock).
#[inline(always)]
unsafe fn set_prev_of(next_field: usize, value: usize) {
    let slot = ((next_field & !PI_BIT) - PREV_SLOT) as *const AtomicUsize;
    // SAFETY: per the contract, `slot` is the prev word of a live node of this thread's list.
    unsafe { (*slot).store(value, Ordering::Relaxed) };
}

/// Writes `value` into the `next` field at `next_field` (an entry's, or the head's `list`).
///
/// # Safety
/// As for [`set_prev_of`].
#[inline(always)]
unsafe fn set_next_at(next_field: usize, value: usize) {
    let slot = (next_field & !PI_BIT) as *const AtomicUsize;
    // SAFETY: per the contract.
    unsafe { (*slot).store(value, Ordering::Relaxed) };
}

impl RobustMutex {
    /// An unlocked, consistent, process-private robust mutex.
    pub const fn new() -> Self {
        Self::with_scope(0)
    }

    /// An unlocked, consistent, process-shared robust mutex (for `MAP_SHARED` memory).
    pub const fn new_shared() -> Self {
        Self::with_scope(1)
    }

    const fn with_scope(shared: u32) -> Self {
        RobustMutex {
            word: AtomicU32::new(0),
            state: AtomicU32::new(CONSISTENT),
            shared,
            _reserved: [0; 3],
            prev: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn scope(&self) -> Scope {
        Scope::from_flag(self.shared)
    }

    #[inline(always)]
    fn entry(&self) -> usize {
        &self.next as *const AtomicUsize as usize
    }

    /// Locks; see [`RobustError`] for the owner-died protocol.
    #[inline]
    pub fn lock(&self) -> Result<RobustGuard<'_>, RobustError<'_>> {
        self.lock_inner(None)
    }

    /// Locks or gives up at `deadline_ns` (absolute `CLOCK_MONOTONIC`).
    pub fn lock_until(&self, deadline_ns: u64) -> Result<RobustGuard<'_>, RobustError<'_>> {
        self.lock_inner(Some(deadline_ns))
    }

    #[inline(always)]
    fn lock_inner(&self, deadline_ns: Option<u64>) -> Result<RobustGuard<'_>, RobustError<'_>> {
        let tid = current_tid();
        let head_ptr = match cached_head(tid) {
            Some(head) => head,
            None => look_up_thread_head(tid).map_err(RobustError::Unsupported)?,
        };
        // SAFETY: the head lives as long as this thread.
        let head = unsafe { head_ptr.as_ref() };
        let entry = self.entry();
        head.list_op_pending
            .store(entry | PI_BIT, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        // Acquire: see the previous owner's writes (kernel paths are full barriers).
        let fast = self
            .word
            .compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if !fast {
            if let Err(e) = self.lock_slow(tid, deadline_ns) {
                compiler_fence(Ordering::SeqCst);
                head.list_op_pending.store(0, Ordering::Relaxed);
                return Err(e.into());
            }
        }
        self.link(head);
        let guard = RobustGuard {
            mutex: self,
            head: head_ptr,
            _not_send: PhantomData,
        };
        // Taken from 0 by CAS: no dead owner to report. Otherwise the kernel may have handed
        // us an orphan, which it marks with OWNER_DIED.
        let taken = if !fast {
            self.taken()
        } else if self.state.load(Ordering::Relaxed) == NOT_RECOVERABLE {
            Taken::NotRecoverable
        } else {
            Taken::Clean
        };
        match taken {
            Taken::Clean => Ok(guard),
            Taken::OwnerDied => Err(RobustError::OwnerDied(guard)),
            Taken::NotRecoverable => {
                drop(guard);
                Err(RobustError::NotRecoverable)
            }
        }
    }

    /// Links the (just acquired) entry into this thread's list, then clears `list_op_pending`.
    #[inline(always)]
    fn link(&self, head: &RobustListHead) {
        let entry = self.entry();
        compiler_fence(Ordering::SeqCst);
        // Link at the front, exactly as glibc's ENQUEUE_MUTEX does.
        let first = head.list.load(Ordering::Relaxed);
        self.next.store(first, Ordering::Relaxed);
        self.prev
            .store(&head.list as *const AtomicUsize as usize, Ordering::Relaxed);
        // SAFETY: `first` is the head's first node (or the head itself), both live.
        unsafe { set_prev_of(first, entry) };
        compiler_fence(Ordering::SeqCst);
        head.list.store(entry | PI_BIT, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        head.list_op_pending.store(0, Ordering::Relaxed);
    }

    /// After taking the lock through the kernel: was it an orphan, or unrecoverable?
    #[cold]
    fn taken(&self) -> Taken {
        if self.word.load(Ordering::Relaxed) & OWNER_DIED != 0 {
            // We own it: clear the bit (atomically: the kernel may be setting WAITERS).
            self.word.fetch_and(!OWNER_DIED, Ordering::Relaxed);
            self.state.store(INCONSISTENT, Ordering::Relaxed);
            return Taken::OwnerDied;
        }
        if self.state.load(Ordering::Relaxed) == NOT_RECOVERABLE {
            return Taken::NotRecoverable;
        }
        Taken::Clean
    }

    /// The futex word (for condition variables that requeue onto it).
    pub(crate) fn futex_word(&self) -> &AtomicU32 {
        &self.word
    }

    #[cold]
    fn lock_slow(&self, tid: u32, deadline_ns: Option<u64>) -> Result<(), LockError> {
        if self.word.load(Ordering::Relaxed) & TID_MASK == tid {
            return Err(LockError::Deadlock);
        }
        futex::lock_pi(&self.word, self.scope(), deadline_ns).map_err(LockError::from)
    }

    /// Unlinks and releases. Only called by the owner, through the guard that carries the
    /// owner's list head.
    #[inline]
    fn unlock(&self, head_ptr: NonNull<RobustListHead>) {
        // SAFETY: the head lives as long as the owning thread, which is the caller.
        let head = unsafe { head_ptr.as_ref() };
        if self.state.load(Ordering::Relaxed) == INCONSISTENT {
            self.state.store(NOT_RECOVERABLE, Ordering::Relaxed);
        }
        let entry = self.entry();
        head.list_op_pending
            .store(entry | PI_BIT, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        // Unlink, exactly as glibc's DEQUEUE_MUTEX does.
        let (next, prev) = (
            self.next.load(Ordering::Relaxed),
            self.prev.load(Ordering::Relaxed),
        );
        // SAFETY: `next` and `prev` are this thread's live list neighbours (or its head): the
        // list is only changed by this thread, and they were linked while we held the lock.
        unsafe {
            set_prev_of(next, prev);
            set_next_at(prev, next);
        }
        compiler_fence(Ordering::SeqCst);
        // We own it, so the word is our TID plus maybe WAITERS: a plain TID means no waiter
        // and a user-space release. Release: publish the critical section to the next owner.
        let word = self.word.load(Ordering::Relaxed);
        if word & !TID_MASK != 0
            || self
                .word
                .compare_exchange(word, 0, Ordering::Release, Ordering::Relaxed)
                .is_err()
        {
            let released = futex::unlock_pi(&self.word, self.scope());
            debug_assert!(released.is_ok(), "FUTEX_UNLOCK_PI failed: {released:?}");
        }
        compiler_fence(Ordering::SeqCst);
        head.list_op_pending.store(0, Ordering::Relaxed);
    }

    /// TID of the owner, 0 when unlocked or orphaned (a snapshot).
    pub fn owner_tid(&self) -> u32 {
        self.word.load(Ordering::Relaxed) & TID_MASK
    }
}

/// How an acquisition through the kernel ended.
enum Taken {
    Clean,
    OwnerDied,
    NotRecoverable,
}

/// How [`RobustGuard::wait`] returned. In every case the caller holds the mutex again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RobustWait {
    /// Notified (or woken spuriously: re-check the predicate).
    Notified,
    /// The deadline passed.
    TimedOut,
    /// While this thread waited, an owner died holding the mutex: repair the protected data,
    /// then [`RobustGuard::make_consistent`].
    OwnerDied,
    /// The mutex was made unrecoverable while this thread waited; give it up.
    NotRecoverable,
}

/// Holds a [`RobustMutex`]; unlocks on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct RobustGuard<'a> {
    mutex: &'a RobustMutex,
    head: NonNull<RobustListHead>,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for RobustGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RobustGuard").field(self.mutex).finish()
    }
}

impl RobustGuard<'_> {
    /// Declares the protected state repaired after `OwnerDied`.
    pub fn make_consistent(&self) {
        self.mutex.state.store(CONSISTENT, Ordering::Relaxed);
    }

    /// Waits on `cv` (a [`PiCondvar`] with the mutex's scope), releasing the mutex meanwhile,
    /// until notified (`notify_one_robust`/`notify_all_robust`) or `deadline_ns` (absolute
    /// `CLOCK_MONOTONIC`). The kernel hands the mutex to the woken waiter with priority
    /// inheritance (requeue-PI); `list_op_pending` names the mutex throughout the sleep, so
    /// the kernel still releases it if this thread dies right after being handed it.
    pub fn wait(&mut self, cv: &PiCondvar, deadline_ns: Option<u64>) -> RobustWait {
        let m = self.mutex;
        debug_assert_eq!(m.scope(), cv.scope(), "condvar and mutex scopes differ");
        // SAFETY: the head lives as long as this (owning) thread.
        let head = unsafe { self.head.as_ref() };
        // Read while holding the mutex: a notify after our unlock must bump it.
        let seq = cv.seq.load(Ordering::Relaxed);
        m.unlock(self.head);
        head.list_op_pending
            .store(m.entry() | PI_BIT, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        let result = futex::wait_requeue_pi(&cv.seq, cv.scope(), seq, deadline_ns, &m.word);
        let tid = current_tid();
        if m.word.load(Ordering::Acquire) & TID_MASK != tid
            && m.word
                .compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            // Not requeued-and-acquired (seq changed first, or a timeout): lock as usual,
            // without a deadline (the caller must return owning the mutex).
            let relocked = m.lock_slow(tid, None);
            debug_assert!(relocked.is_ok(), "relock after wait failed: {relocked:?}");
        }
        m.link(head);
        match m.taken() {
            Taken::OwnerDied => RobustWait::OwnerDied,
            Taken::NotRecoverable => RobustWait::NotRecoverable,
            Taken::Clean if result == Err(futex::Errno::TIMEDOUT) => RobustWait::TimedOut,
            Taken::Clean => RobustWait::Notified,
        }
    }
}

impl Drop for RobustGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.mutex.unlock(self.head);
    }
}
