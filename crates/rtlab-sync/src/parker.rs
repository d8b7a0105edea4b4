//! Park a thread until an absolute deadline or an unpark, on one futex word.
//!
//! | word value      | state                                                  |
//! |-----------------|--------------------------------------------------------|
//! | `0` EMPTY       | no token, nobody parked                                |
//! | `1` NOTIFIED    | a token is waiting: the next park returns at once      |
//! | `u32::MAX` PARKED | the owner thread sleeps (or is about to) in FUTEX_WAIT_BITSET |
//!
//! `park` decrements (EMPTY -> PARKED, NOTIFIED -> EMPTY); `unpark` swaps in NOTIFIED and
//! wakes only if it replaced PARKED, so an unpark with nobody parked costs no syscall.

use rtlab_sys::futex::{self, Scope, Wait};
use std::sync::atomic::{AtomicU32, Ordering};

const EMPTY: u32 = 0;
const NOTIFIED: u32 = 1;
const PARKED: u32 = u32::MAX;

/// A one-token parker (like `std::thread::park`, with absolute `CLOCK_MONOTONIC` deadlines).
/// `#[repr(C)]` and pointer-free: a shared one may live in `MAP_SHARED` memory.
#[repr(C)]
#[derive(Debug)]
pub struct Parker {
    state: AtomicU32,
    shared: u32,
}

impl Default for Parker {
    fn default() -> Self {
        Self::new()
    }
}

impl Parker {
    /// A process-private parker.
    pub const fn new() -> Self {
        Parker {
            state: AtomicU32::new(EMPTY),
            shared: 0,
        }
    }

    /// A process-shared parker, for `MAP_SHARED` memory.
    pub const fn new_shared() -> Self {
        Parker {
            state: AtomicU32::new(EMPTY),
            shared: 1,
        }
    }

    fn scope(&self) -> Scope {
        Scope::from_flag(self.shared)
    }

    /// Sleeps until unparked or until `deadline_ns` (absolute `CLOCK_MONOTONIC`; `None` =
    /// forever). Returns true when a token was consumed, false on timeout. Signals and
    /// spurious wakeups re-sleep with the same absolute deadline, so there is no drift.
    /// Only one thread may park on a given parker at a time.
    ///
    /// For `SCHED_OTHER` threads the wakeup may be late by the thread's timer slack (50 us by
    /// default, see `rtlab_sys::slack`); `SCHED_FIFO/RR` threads have no slack.
    pub fn park_until(&self, deadline_ns: Option<u64>) -> bool {
        // Acquire: a consumed token makes the unparker's earlier writes visible.
        if self.state.fetch_sub(1, Ordering::Acquire) == NOTIFIED {
            return true; // NOTIFIED -> EMPTY
        }
        // Now PARKED (EMPTY - 1 wraps to u32::MAX).
        loop {
            let outcome = futex::wait_until(&self.state, self.scope(), PARKED, deadline_ns);
            if self
                .state
                .compare_exchange(NOTIFIED, EMPTY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return true;
            }
            if outcome == Wait::TimedOut {
                // Give up, but an unpark may have raced in: swap tells.
                return self.state.swap(EMPTY, Ordering::Acquire) == NOTIFIED;
            }
            // Neither PARKED nor NOTIFIED: a shared word someone scribbled on. The wait would
            // return at once forever (a busy loop, maybe at real-time priority): take it as a
            // wakeup, which a peer sharing the word could cause anyway.
            if self.state.load(Ordering::Relaxed) != PARKED {
                self.state.store(EMPTY, Ordering::Relaxed);
                return true;
            }
        }
    }

    /// Makes the token available and wakes the parked thread, if any.
    pub fn unpark(&self) {
        // Release: pairs with the Acquire in park_until.
        if self.state.swap(NOTIFIED, Ordering::Release) == PARKED {
            futex::wake(&self.state, self.scope(), 1);
        }
    }
}

/// Sleeps until `deadline_ns` (absolute `CLOCK_MONOTONIC`): `clock_nanosleep(TIMER_ABSTIME)`,
/// restarted on signals with the same deadline.
pub fn sleep_until(deadline_ns: u64) {
    let _ = rtlab_sys::time::sleep_until_monotonic_ns(deadline_ns);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scribbled_shared_word_wakes_the_parker_instead_of_spinning() {
        // Regression (hardening, low): a value other than the three states made park loop on
        // a futex wait that returned at once, forever.
        let p = std::sync::Arc::new(Parker::new());
        let q = p.clone();
        let t = std::thread::spawn(move || q.park_until(None));
        std::thread::sleep(std::time::Duration::from_millis(50));
        p.state.store(7, Ordering::Relaxed);
        // The word changing under a waiter reaches it through a wake (or its next wait).
        futex::wake(&p.state, p.scope(), 1);
        assert!(t.join().unwrap());
        assert_eq!(p.state.load(Ordering::Relaxed), EMPTY);
    }
}
