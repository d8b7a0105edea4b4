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
//! never pointers, in shared memory" that the kernel ABI forces. A peer that shares the
//! memory can rewrite them while this thread holds the mutex, so unlocking never writes
//! through them blindly: each thread keeps a private record of the rtlab entries it linked
//! (at most [`MAX_HELD`]), and as long as its list holds nothing else it unlinks from that
//! record alone, never reading the shared words. Once a node rtlab did not link (a glibc
//! robust mutex) has been seen in the thread's list, neighbours may be foreign and the shared
//! words are trusted exactly as glibc trusts them, until the thread again holds no rtlab
//! robust mutex. See the README's Security section.
//!
//! The mutex must not move or vanish while it is linked: locking takes `Pin<&Self>`, and a
//! mutex dropped while a forgotten guard (`mem::forget`) still holds it unlinks itself when
//! that guard was this thread's, and aborts the process when it was another live thread's
//! (whose list this thread cannot touch): a clean abort instead of a dangling list entry that
//! glibc and the kernel would write through.
//!
//! Every list update is bracketed by `list_op_pending`, so a death between taking the futex
//! and linking the entry (or unlinking it and releasing) is still cleaned up by the kernel.
//! Those stores only need to be ordered as the thread itself sees them (the kernel reads them
//! after the thread stopped), hence Relaxed atomics plus compiler fences.
//!
//! ```
//! use rtlab_sync::RobustMutex;
//! let m = std::pin::pin!(RobustMutex::new());
//! let guard = m.as_ref().lock().expect("no previous owner died");
//! drop(guard);
//! ```
//!
//! An unpinned mutex cannot be locked (it could move while linked):
//!
//! ```compile_fail
//! use rtlab_sync::RobustMutex;
//! let m = RobustMutex::new();
//! let guard = std::pin::Pin::new(&m).lock();
//! ```

use crate::{LockError, PiCondvar};
use rtlab_sys::futex::{self, current_tid, Scope, OWNER_DIED, TID_MASK};
use rtlab_sys::robust::{current_robust_list, register_robust_list, RobustListHead};
use std::cell::Cell;
use std::fmt;
use std::marker::{PhantomData, PhantomPinned};
use std::pin::Pin;
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
/// How many [`RobustMutex`]es one thread can hold at once (the size of its private record).
pub const MAX_HELD: usize = 32;

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
    /// This thread's robust list cannot take rtlab entries, or it already holds
    /// [`MAX_HELD`] robust mutexes.
    #[error("robust list unusable: {0}")]
    Unsupported(ListUnusable),
    /// An ordinary lock failure (deadlock, timeout ...).
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// Why this thread's robust list cannot take rtlab's entries.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListUnusable {
    /// Reading or registering the list failed.
    #[error(transparent)]
    Sys(#[from] rtlab_sys::SysError),
    /// The list registered (by another library) has another futex offset.
    #[error("this thread's list has futex_offset {found}, rtlab needs {FUTEX_OFFSET}")]
    FutexOffset {
        /// Its offset.
        found: isize,
    },
    /// The thread already holds [`MAX_HELD`] robust mutexes.
    #[error("this thread already holds {MAX_HELD} robust mutexes")]
    Full,
}

/// A robust PI mutex, `#[repr(C)]`, to be placed in `MAP_SHARED` memory (or used privately).
/// Aligned to a cache line: the word and the list fields are then always in one line (an
/// unaligned one would touch two per lock+unlock), and neighbours in an array or a shared
/// segment never false-share.
///
/// Locking takes `Pin<&Self>` (`std::pin::pin!`, `Box::pin`, `Pin::static_ref`; for a mutex
/// in a shared mapping, `Pin::new_unchecked` with the promise that the mapping outlives every
/// guard): a held mutex is linked into the thread's robust list, so it must not move.
#[repr(C, align(64))]
pub struct RobustMutex {
    word: AtomicU32,
    state: AtomicU32,
    shared: u32,
    _reserved: [u32; 3],
    prev: AtomicUsize,
    next: AtomicUsize,
    _pinned: PhantomPinned,
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

/// A thread's private view of its robust list: the registered head and the rtlab entries
/// it linked, oldest first. Never in shared memory, so a peer cannot change it.
struct ThreadList {
    /// The TID it was set up for: a forked child (new TID, list reset by glibc) starts over.
    tid: Cell<u32>,
    head: Cell<Option<NonNull<RobustListHead>>>,
    /// A node rtlab did not link was at the list's front since the record was last empty:
    /// neighbours may be foreign (glibc's), so unlinking follows the shared words.
    foreign: Cell<bool>,
    len: Cell<usize>,
    /// Entry addresses (`next` fields), oldest first: the list runs newest first, so an
    /// entry's list predecessor is the one after it here, its successor the one before.
    held: [Cell<usize>; MAX_HELD],
}

thread_local! {
    static LIST: ThreadList = const {
        ThreadList {
            tid: Cell::new(0),
            head: Cell::new(None),
            foreign: Cell::new(false),
            len: Cell::new(0),
            held: [const { Cell::new(0) }; MAX_HELD],
        }
    };
}

/// This thread's list record. A plain pointer read out of the thread-local (instead of
/// running the lock and unlock paths inside `LocalKey::with`, which the compiler then keeps
/// out of line: two calls per lock+unlock; bench/RESULTS.md).
#[inline(always)]
fn thread_list<R>(f: impl FnOnce(&ThreadList) -> R) -> R {
    let list: *const ThreadList = LIST.with(|l| l as *const ThreadList);
    // SAFETY: a const-initialized thread-local without a destructor lives until the thread
    // exits; the reference does not outlive this call on this thread.
    f(unsafe { &*list })
}

impl ThreadList {
    /// The head, set up for `tid` (pointer-sized result: no error value on the hot path).
    #[inline(always)]
    fn head_for(&self, tid: u32) -> Option<NonNull<RobustListHead>> {
        if self.tid.get() == tid {
            self.head.get()
        } else {
            None
        }
    }

    #[cold]
    fn set_up(&self, tid: u32) -> Result<NonNull<RobustListHead>, ListUnusable> {
        let head = look_up_thread_head()?;
        self.tid.set(tid);
        self.head.set(Some(head));
        self.len.set(0);
        self.foreign.set(false);
        Ok(head)
    }

    /// Where `entry` sits in the record, searching from the newest (unlocks are mostly LIFO).
    #[inline(always)]
    fn position(&self, entry: usize) -> Option<usize> {
        (0..self.len.get())
            .rev()
            .find(|&i| self.held[i].get() == entry)
    }

    /// Notes whether the list's current front is foreign (neither the head nor rtlab's
    /// newest entry): glibc links its nodes there, so every foreign node passes the front.
    #[inline(always)]
    fn observe_front(&self, first: usize, head_addr: usize) {
        let len = self.len.get();
        if first != head_addr && (len == 0 || first & !PI_BIT != self.held[len - 1].get()) {
            self.foreign.set(true);
        }
    }

    fn remove(&self, i: usize) {
        let len = self.len.get();
        for j in i..len - 1 {
            self.held[j].set(self.held[j + 1].get());
        }
        self.len.set(len - 1);
        if len == 1 {
            // No rtlab entry left: the next link looks at the front afresh.
            self.foreign.set(false);
        }
    }
}

#[cold]
fn look_up_thread_head() -> Result<NonNull<RobustListHead>, ListUnusable> {
    match current_robust_list()? {
        Some(head) => {
            // SAFETY: the registered head lives as long as this thread (the kernel requires it).
            let offset = unsafe { head.as_ref() }.futex_offset;
            if offset != FUTEX_OFFSET {
                return Err(ListUnusable::FutexOffset { found: offset });
            }
            Ok(head)
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
            unsafe { register_robust_list(head) }?;
            Ok(head)
        }
    }
}

/// Writes `value` into the `prev` slot of the list node whose `next` field is at `next_field`.
///
/// # Safety
/// `next_field` (PI bit cleared) must be the `next` field of a live entry of this thread's
/// list, or the head's `list` field (whose slot before it glibc and `OwnHead` provide).
// Always inlined: called from the fast path after that is inlined into another crate, where a
// plain call becomes an indirect one through the GOT, on every lock+unlock (bench/RESULTS.md).
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
            _pinned: PhantomPinned,
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
    pub fn lock(self: Pin<&Self>) -> Result<RobustGuard<'_>, RobustError<'_>> {
        self.get_ref().lock_inner(None)
    }

    /// Locks or gives up at `deadline_ns` (absolute `CLOCK_MONOTONIC`).
    pub fn lock_until(
        self: Pin<&Self>,
        deadline_ns: u64,
    ) -> Result<RobustGuard<'_>, RobustError<'_>> {
        self.get_ref().lock_inner(Some(deadline_ns))
    }

    /// Only called through a `Pin`: the entry stays where it is while linked.
    #[inline(always)]
    fn lock_inner(&self, deadline_ns: Option<u64>) -> Result<RobustGuard<'_>, RobustError<'_>> {
        let tid = current_tid();
        thread_list(|list| {
            let head_ptr = match list.head_for(tid) {
                Some(head) => head,
                None => list.set_up(tid).map_err(RobustError::Unsupported)?,
            };
            if list.len.get() == MAX_HELD {
                return Err(RobustError::Unsupported(ListUnusable::Full));
            }
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
            self.link(list, head);
            let guard = RobustGuard {
                mutex: self,
                _not_send: PhantomData,
            };
            // Taken from 0 by CAS: no dead owner to report. Otherwise the kernel may have
            // handed us an orphan, which it marks with OWNER_DIED.
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
        })
    }

    /// Links the (just acquired) entry into this thread's list and record, then clears
    /// `list_op_pending`. The record has room (checked before acquiring).
    #[inline(always)]
    fn link(&self, list: &ThreadList, head: &RobustListHead) {
        let entry = self.entry();
        let head_addr = &head.list as *const AtomicUsize as usize;
        compiler_fence(Ordering::SeqCst);
        // Link at the front, exactly as glibc's ENQUEUE_MUTEX does. `first` comes from the
        // private head: the head itself, rtlab's newest entry, or a glibc node.
        let first = head.list.load(Ordering::Relaxed);
        list.observe_front(first, head_addr);
        self.next.store(first, Ordering::Relaxed);
        self.prev.store(head_addr, Ordering::Relaxed);
        // SAFETY: `first` is the head's first node (or the head itself), both live.
        unsafe { set_prev_of(first, entry) };
        compiler_fence(Ordering::SeqCst);
        head.list.store(entry | PI_BIT, Ordering::Relaxed);
        let len = list.len.get();
        list.held[len].set(entry);
        list.len.set(len + 1);
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

    /// Unlinks and releases. Only called by the owner (through its guard, or when a mutex
    /// whose guard this thread forgot is dropped).
    #[inline]
    fn unlock(&self) {
        thread_list(|list| self.unlock_in(list));
    }

    #[inline(always)]
    fn unlock_in(&self, list: &ThreadList) {
        if self.state.load(Ordering::Relaxed) == INCONSISTENT {
            self.state.store(NOT_RECOVERABLE, Ordering::Relaxed);
        }
        let entry = self.entry();
        let tid = current_tid();
        let linked = match (list.head_for(tid), list.position(entry)) {
            (Some(head_ptr), Some(i)) => Some((head_ptr, i)),
            // Not in this thread's record (a guard carried into a forked child): the list
            // is not this thread's to change, nor the lock, unless it names this thread.
            _ if self.word.load(Ordering::Relaxed) & TID_MASK != tid => return,
            _ => None,
        };
        let head = linked.map(|(head_ptr, i)| {
            // SAFETY: the head lives as long as this (owning) thread.
            let head = unsafe { head_ptr.as_ref() };
            head.list_op_pending
                .store(entry | PI_BIT, Ordering::Relaxed);
            compiler_fence(Ordering::SeqCst);
            self.unlink(list, head, i);
            head
        });
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
            debug_assert!(
                released.is_ok() || linked.is_none(),
                "FUTEX_UNLOCK_PI failed: {released:?}"
            );
        }
        compiler_fence(Ordering::SeqCst);
        if let Some(head) = head {
            head.list_op_pending.store(0, Ordering::Relaxed);
        }
    }

    /// Takes the entry at record position `i` out of the list (as glibc's DEQUEUE_MUTEX)
    /// and out of the record.
    #[inline(always)]
    fn unlink(&self, list: &ThreadList, head: &RobustListHead, i: usize) {
        let head_addr = &head.list as *const AtomicUsize as usize;
        let len = list.len.get();
        list.observe_front(head.list.load(Ordering::Relaxed), head_addr);
        let (next, prev) = if list.foreign.get() {
            // Foreign neighbours are possible: follow the shared words, as glibc does.
            (
                self.next.load(Ordering::Relaxed),
                self.prev.load(Ordering::Relaxed),
            )
        } else {
            // Only rtlab entries: the record alone says who the neighbours are; the shared
            // words, which a peer may have rewritten, are not read.
            let next = if i > 0 {
                list.held[i - 1].get() | PI_BIT
            } else {
                head_addr
            };
            let prev = if i + 1 < len {
                list.held[i + 1].get()
            } else {
                head_addr
            };
            (next, prev)
        };
        // SAFETY: without foreign nodes `next` and `prev` are this thread's head or entries
        // it holds (live: pinned, and a dropped one unlinks itself first); with them, they
        // are the list neighbours glibc would write through too.
        unsafe {
            set_prev_of(next, prev);
            set_next_at(prev, next);
        }
        list.remove(i);
    }

    /// Releases the mutex the calling thread holds without a guard (its guard was given up
    /// with `mem::forget`, as a binding for another language does, whose callers lock and
    /// unlock by hand). [`LockError::NotOwner`] when this thread does not hold it.
    pub fn unlock_held(self: Pin<&Self>) -> Result<(), LockError> {
        if self.owner_tid() != current_tid() {
            return Err(LockError::NotOwner);
        }
        self.unlock();
        Ok(())
    }

    /// [`RobustGuard::make_consistent`] for a mutex held without a guard (see
    /// [`RobustMutex::unlock_held`]).
    pub fn make_consistent_held(self: Pin<&Self>) -> Result<(), LockError> {
        if self.owner_tid() != current_tid() {
            return Err(LockError::NotOwner);
        }
        self.state.store(CONSISTENT, Ordering::Relaxed);
        Ok(())
    }

    /// TID of the owner, 0 when unlocked or orphaned (a snapshot).
    pub fn owner_tid(&self) -> u32 {
        self.word.load(Ordering::Relaxed) & TID_MASK
    }
}

impl Drop for RobustMutex {
    /// A mutex still held here had its guard forgotten (`mem::forget`): a live guard borrows
    /// it. If this thread holds it, it is unlinked and released; if another live thread of
    /// this process does, its robust list would keep an entry into freed memory, so the
    /// process aborts.
    fn drop(&mut self) {
        let owner = *self.word.get_mut() & TID_MASK;
        if owner == 0 {
            return;
        }
        if owner == current_tid() {
            self.unlock();
        } else if rtlab_sys::process::thread_in_this_process(owner) {
            eprintln!(
                "rtlab: a RobustMutex was dropped while thread {owner} still held it (its guard \
                 was forgotten); aborting rather than leave that thread's robust list pointing \
                 into freed memory"
            );
            std::process::abort();
        }
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
        thread_list(|list| {
            let tid = current_tid();
            // A guard comes from a lock on this thread, which set the list up; only a guard
            // carried into a forked child finds it missing.
            let head_ptr = match list.head_for(tid) {
                Some(head) => head,
                None => list
                    .set_up(tid)
                    .unwrap_or_else(|e| panic!("robust list unusable after fork: {e}")),
            };
            // SAFETY: the head lives as long as this (owning) thread.
            let head = unsafe { head_ptr.as_ref() };
            // Read while holding the mutex: a notify after our unlock must bump it.
            let seq = cv.seq.load(Ordering::Relaxed);
            m.unlock_in(list);
            head.list_op_pending
                .store(m.entry() | PI_BIT, Ordering::Relaxed);
            compiler_fence(Ordering::SeqCst);
            let result = futex::wait_requeue_pi(&cv.seq, cv.scope(), seq, deadline_ns, &m.word);
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
            // The unlock freed the record slot this entry had.
            m.link(list, head);
            match m.taken() {
                Taken::OwnerDied => RobustWait::OwnerDied,
                Taken::NotRecoverable => RobustWait::NotRecoverable,
                Taken::Clean if result == Err(futex::Errno::TIMEDOUT) => RobustWait::TimedOut,
                Taken::Clean => RobustWait::Notified,
            }
        })
    }
}

impl Drop for RobustGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.mutex.unlock();
    }
}
