//! Futex operations (through rustix) and the thread id they are keyed on.
//!
//! A futex word is a 32-bit integer in (possibly shared) memory. For the PI and robust
//! operations the kernel defines its bits:
//!
//! | bits  | name               | meaning                                              |
//! |-------|--------------------|------------------------------------------------------|
//! | 0-29  | `FUTEX_TID_MASK`   | TID of the owner; 0 = unlocked                        |
//! | 30    | `FUTEX_OWNER_DIED` | the owner died holding it (robust futexes)            |
//! | 31    | `FUTEX_WAITERS`    | the kernel has waiters queued: unlock must go through it |
//!
//! Facts that are easy to get wrong (see the kernel's futex documentation):
//! `FUTEX_LOCK_PI` takes an **absolute `CLOCK_REALTIME`** timeout, `FUTEX_LOCK_PI2`
//! (Linux 5.14+) an **absolute `CLOCK_MONOTONIC`** one; `FUTEX_WAIT` a **relative** one;
//! `FUTEX_WAIT_BITSET` an **absolute** one (monotonic unless `FUTEX_CLOCK_REALTIME`).
//! Mixing `FUTEX_WAIT` and `LOCK_PI` on one word gives `EINVAL`. Requeue-PI needs
//! `nr_wake == 1` and returns with the target mutex owned.

use crate::SysError;
pub use rustix::io::Errno;
use rustix::thread::futex as fx;
use rustix::time::Timespec;
use std::cell::Cell;
use std::num::NonZeroU32;
use std::sync::atomic::AtomicU32;
use std::sync::Once;

/// Bits 0-29: the owner's TID.
pub const TID_MASK: u32 = 0x3fff_ffff;
/// Bit 30: the owner died holding the lock.
pub const OWNER_DIED: u32 = fx::OWNER_DIED;
/// Bit 31: waiters are queued in the kernel.
pub const WAITERS: u32 = fx::WAITERS;

/// Whether a futex is private to this process or shared through shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `FUTEX_PRIVATE_FLAG`: keyed on the virtual address, no `mm` lock taken.
    Private,
    /// Keyed on the backing page: the word must live in `MAP_SHARED` memory.
    Shared,
}

impl Scope {
    /// The scope a primitive stored as a plain integer in its (possibly shared) memory:
    /// 0 = private, anything else = shared.
    #[inline]
    pub fn from_flag(shared: u32) -> Scope {
        if shared == 0 {
            Scope::Private
        } else {
            Scope::Shared
        }
    }

    #[inline]
    fn flags(self) -> fx::Flags {
        match self {
            Scope::Private => fx::Flags::PRIVATE,
            Scope::Shared => fx::Flags::empty(),
        }
    }
}

/// The outcome of a blocking futex call that can time out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Woken (or the value had already changed).
    Woken,
    /// The deadline passed.
    TimedOut,
}

thread_local! {
    static CACHED_TID: Cell<u32> = const { Cell::new(0) };
}

static ATFORK: Once = Once::new();

extern "C" fn reset_tid_in_child() {
    // The child's only thread is the one that called fork; its cached TID is the parent's.
    CACHED_TID.with(|c| c.set(0));
}

/// The calling thread's kernel TID, cached per thread (one syscall per thread, then a TLS
/// read). The cache is reset in a `fork()`ed child by a `pthread_atfork` handler, so a child
/// never locks with its parent's TID. (A raw `clone` that bypasses libc's fork would bypass
/// the handler too; rtlab never does that.)
#[inline]
pub fn current_tid() -> u32 {
    let cached = CACHED_TID.with(Cell::get);
    if cached != 0 {
        return cached;
    }
    current_tid_slow()
}

#[cold]
fn current_tid_slow() -> u32 {
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only writes this thread's TLS cell; libc keeps the
        // function pointer, which is 'static.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(reset_tid_in_child)) };
        debug_assert_eq!(rc, 0, "pthread_atfork failed");
    });
    let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
    CACHED_TID.with(|c| c.set(tid));
    tid
}

fn to_timespec(ns: u64) -> Timespec {
    Timespec {
        tv_sec: (ns / 1_000_000_000) as _,
        tv_nsec: (ns % 1_000_000_000) as _,
    }
}

/// Why a PI lock failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockPiError {
    /// `EDEADLK`: the caller already owns it.
    Deadlock,
    /// `ETIMEDOUT`: the deadline passed.
    TimedOut,
    /// Any other errno (`EINVAL` for a word used with `FUTEX_WAIT`, `ESRCH` for a bogus
    /// owner TID in the word, `ENOSYS` for an absent operation).
    Other(i32),
}

/// Blocks until the PI futex is acquired: `futex(uaddr, FUTEX_LOCK_PI[2], 0, deadline)`.
///
/// Without a deadline uses `FUTEX_LOCK_PI`. With a deadline (absolute `CLOCK_MONOTONIC` ns)
/// uses `FUTEX_LOCK_PI2` (Linux 5.14+), and on `ENOSYS` falls back to `FUTEX_LOCK_PI` with
/// the deadline converted to absolute `CLOCK_REALTIME` (then a wall-clock step during the
/// wait moves the deadline). `EINTR` is not returned by the kernel for LOCK_PI (it restarts),
/// but is retried here anyway. On return the word holds the caller's TID (plus maybe
/// `WAITERS`, `OWNER_DIED`).
pub fn lock_pi(
    word: &AtomicU32,
    scope: Scope,
    deadline_monotonic_ns: Option<u64>,
) -> Result<(), LockPiError> {
    loop {
        let result = match deadline_monotonic_ns {
            None => fx::lock_pi(word, scope.flags(), None),
            Some(deadline) => {
                let ts = to_timespec(deadline);
                match fx::lock_pi2(word, scope.flags(), Some(&ts)) {
                    Err(Errno::NOSYS) => {
                        let now_mono = crate::time::monotonic_now_ns();
                        let real =
                            crate::time::realtime_now_ns() + deadline.saturating_sub(now_mono);
                        fx::lock_pi(word, scope.flags(), Some(&to_timespec(real)))
                    }
                    other => other,
                }
            }
        };
        return match result {
            Ok(()) => Ok(()),
            Err(Errno::INTR) => continue,
            Err(Errno::DEADLK) => Err(LockPiError::Deadlock),
            Err(Errno::TIMEDOUT) => Err(LockPiError::TimedOut),
            Err(e) => Err(LockPiError::Other(e.raw_os_error())),
        };
    }
}

/// True when `FUTEX_LOCK_PI2` exists: tries it on `word` (which must be free; the caller then
/// owns it and must unlock it when this returns true).
pub fn lock_pi2_supported(word: &AtomicU32, scope: Scope) -> bool {
    let past = to_timespec(crate::time::monotonic_now_ns());
    !matches!(
        fx::lock_pi2(word, scope.flags(), Some(&past)),
        Err(Errno::NOSYS) | Err(Errno::INVAL)
    ) && word.load(std::sync::atomic::Ordering::Relaxed) & TID_MASK == current_tid()
}

/// `futex(uaddr, FUTEX_TRYLOCK_PI)`: takes the lock if it is free (also when only the
/// `WAITERS`/`OWNER_DIED` bits are set). Returns false when another thread owns it.
pub fn trylock_pi(word: &AtomicU32, scope: Scope) -> Result<bool, LockPiError> {
    match fx::trylock_pi(word, scope.flags()) {
        Ok(got) => Ok(got),
        Err(Errno::AGAIN) | Err(Errno::BUSY) => Ok(false),
        Err(Errno::DEADLK) => Err(LockPiError::Deadlock),
        Err(e) => Err(LockPiError::Other(e.raw_os_error())),
    }
}

/// `futex(uaddr, FUTEX_UNLOCK_PI)`: releases a PI futex the caller owns, handing it to the
/// highest-priority waiter. `EPERM` means the caller is not the owner.
pub fn unlock_pi(word: &AtomicU32, scope: Scope) -> Result<(), SysError> {
    loop {
        match fx::unlock_pi(word, scope.flags()) {
            Ok(()) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(e) => {
                debug_assert!(false, "FUTEX_UNLOCK_PI failed: {e}");
                return Err(SysError::from_errno("futex(FUTEX_UNLOCK_PI)", e));
            }
        }
    }
}

/// `futex(uaddr, FUTEX_WAIT_BITSET, expected, deadline, NULL, FUTEX_BITSET_MATCH_ANY)`:
/// sleeps while `*word == expected`, until woken or the **absolute `CLOCK_MONOTONIC`**
/// deadline. Returns at once (`Woken`) if the value differs. `EINTR` returns `Woken` too:
/// callers re-check their condition in a loop, so a spurious wake is harmless and the
/// absolute deadline means no drift.
pub fn wait_until(
    word: &AtomicU32,
    scope: Scope,
    expected: u32,
    deadline_monotonic_ns: Option<u64>,
) -> Wait {
    let ts = deadline_monotonic_ns.map(to_timespec);
    let any = NonZeroU32::new(u32::MAX).expect("nonzero");
    match fx::wait_bitset(word, scope.flags(), expected, ts.as_ref(), any) {
        Ok(()) | Err(Errno::AGAIN) | Err(Errno::INTR) => Wait::Woken,
        Err(Errno::TIMEDOUT) => Wait::TimedOut,
        Err(e) => {
            debug_assert!(false, "FUTEX_WAIT_BITSET failed: {e}");
            Wait::Woken
        }
    }
}

/// `futex(uaddr, FUTEX_WAKE, n)`: wakes up to `n` waiters; returns how many were woken.
pub fn wake(word: &AtomicU32, scope: Scope, n: u32) -> usize {
    fx::wake(word, scope.flags(), n).unwrap_or(0)
}

/// `futex(cond, FUTEX_WAIT_REQUEUE_PI, expected, deadline, mutex)`: waits on a condition
/// word and, when requeued by [`cmp_requeue_pi`], returns with the PI `mutex` **owned**.
/// The deadline is absolute `CLOCK_MONOTONIC`. Returns `Err(AGAIN)` if `*cond != expected`
/// (caller still owns nothing and must re-lock), `TimedOut` if the deadline passed before the
/// requeue (mutex not owned).
pub fn wait_requeue_pi(
    cond: &AtomicU32,
    scope: Scope,
    expected: u32,
    deadline_monotonic_ns: Option<u64>,
    mutex: &AtomicU32,
) -> Result<(), Errno> {
    let ts = deadline_monotonic_ns.map(to_timespec);
    fx::wait_requeue_pi(cond, scope.flags(), expected, ts.as_ref(), mutex)
}

/// `futex(cond, FUTEX_CMP_REQUEUE_PI, 1, nr_requeue, mutex, expected)`: wakes one waiter
/// of `cond` (which takes `mutex` for it, PI-boosting as needed) and requeues up to
/// `nr_requeue` others onto `mutex`, if `*cond == expected`. Returns woken + requeued.
pub fn cmp_requeue_pi(
    cond: &AtomicU32,
    scope: Scope,
    nr_requeue: u32,
    mutex: &AtomicU32,
    expected: u32,
) -> Result<usize, Errno> {
    fx::cmp_requeue_pi(cond, scope.flags(), nr_requeue, mutex, expected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn tid_is_cached_and_per_thread() {
        let main = current_tid();
        assert_eq!(main, current_tid());
        let other = std::thread::spawn(current_tid).join().unwrap();
        assert_ne!(main, other);
    }

    #[test]
    fn lock_pi_on_free_word_takes_it_and_unlock_frees_it() {
        let word = AtomicU32::new(0);
        lock_pi(&word, Scope::Private, None).unwrap();
        assert_eq!(word.load(Ordering::SeqCst) & TID_MASK, current_tid());
        assert_eq!(
            lock_pi(&word, Scope::Private, None),
            Err(LockPiError::Deadlock)
        );
        unlock_pi(&word, Scope::Private).unwrap();
        assert_eq!(word.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn timed_lock_pi_times_out_on_an_owned_word() {
        let word = std::sync::Arc::new(AtomicU32::new(0));
        let w = word.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let owner = std::thread::spawn(move || {
            lock_pi(&w, Scope::Private, None).unwrap();
            tx.send(()).unwrap();
            done_rx.recv().unwrap();
            unlock_pi(&w, Scope::Private).unwrap();
        });
        rx.recv().unwrap();
        let deadline = crate::time::monotonic_now_ns() + 20_000_000;
        assert_eq!(
            lock_pi(&word, Scope::Private, Some(deadline)),
            Err(LockPiError::TimedOut)
        );
        assert!(crate::time::monotonic_now_ns() >= deadline);
        assert_eq!(trylock_pi(&word, Scope::Private), Ok(false));
        done_tx.send(()).unwrap();
        owner.join().unwrap();
    }

    #[test]
    fn wait_times_out_and_returns_on_value_change() {
        let word = AtomicU32::new(7);
        let deadline = crate::time::monotonic_now_ns() + 5_000_000;
        assert_eq!(
            wait_until(&word, Scope::Private, 7, Some(deadline)),
            Wait::TimedOut
        );
        assert_eq!(wait_until(&word, Scope::Private, 8, None), Wait::Woken);
        assert_eq!(wake(&word, Scope::Private, 1), 0);
    }
}
