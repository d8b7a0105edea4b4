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
