//! Counting semaphore and manual-reset event on futexes, private or in shared memory.
//!
//! Semaphore words (`#[repr(C)]`):
//!
//! | word      | meaning                                                         |
//! |-----------|-----------------------------------------------------------------|
//! | `count`   | permits available; waiters sleep in FUTEX_WAIT_BITSET while 0   |
//! | `waiters` | threads that are (about to be) asleep: `post` wakes only if > 0 |
//!
//! Ordering: `post` does `count += 1` then reads `waiters`; a waiter does `waiters += 1` then
//! sleeps only if `count == 0` (checked by the kernel under its bucket lock). Both pairs are
//! SeqCst, so either the poster sees the waiter or the waiter sees the permit: no lost wakeup.
//!
//! Event word: `0` unset, `1` set; waiters sleep while 0; `set` wakes all.

use rtlab_sys::futex::{self, Scope, Wait};
use std::sync::atomic::{AtomicU32, Ordering};

fn scope(shared: u32) -> Scope {
    Scope::from_flag(shared)
}

/// A counting semaphore.
#[repr(C)]
#[derive(Debug)]
pub struct Semaphore {
    count: AtomicU32,
    waiters: AtomicU32,
    shared: u32,
}

impl Semaphore {
    /// A process-private semaphore with `permits`.
    pub const fn new(permits: u32) -> Self {
        Semaphore {
            count: AtomicU32::new(permits),
            waiters: AtomicU32::new(0),
            shared: 0,
        }
    }

    /// A process-shared semaphore, for `MAP_SHARED` memory.
    pub const fn new_shared(permits: u32) -> Self {
        Semaphore {
            count: AtomicU32::new(permits),
            waiters: AtomicU32::new(0),
            shared: 1,
        }
    }

    /// Takes a permit if one is available now.
    pub fn try_wait(&self) -> bool {
        let mut c = self.count.load(Ordering::Relaxed);
        while c > 0 {
            // Acquire: taking a permit sees what the poster did before posting.
            match self
                .count
                .compare_exchange_weak(c, c - 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => c = now,
            }
        }
        false
    }

    /// Takes a permit, waiting until `deadline_ns` (absolute `CLOCK_MONOTONIC`; `None` =
    /// forever). Returns false on timeout.
    pub fn wait_until(&self, deadline_ns: Option<u64>) -> bool {
        loop {
            if self.try_wait() {
                return true;
            }
            self.waiters.fetch_add(1, Ordering::SeqCst);
            let outcome = futex::wait_until(&self.count, scope(self.shared), 0, deadline_ns);
            self.waiters.fetch_sub(1, Ordering::SeqCst);
            if outcome == Wait::TimedOut {
                return self.try_wait();
            }
        }
    }

    /// Returns a permit, waking one waiter if any sleeps.
    pub fn post(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            futex::wake(&self.count, scope(self.shared), 1);
        }
    }

    /// Permits available now (a snapshot).
    pub fn available(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }
}

/// A manual-reset event: `wait` returns once `set` has been called, until `reset`.
#[repr(C)]
#[derive(Debug)]
pub struct Event {
    state: AtomicU32,
    shared: u32,
}

impl Default for Event {
    fn default() -> Self {
        Self::new()
    }
}

impl Event {
    /// An unset, process-private event.
    pub const fn new() -> Self {
        Event {
            state: AtomicU32::new(0),
            shared: 0,
        }
    }

    /// An unset, process-shared event for `MAP_SHARED` memory.
    pub const fn new_shared() -> Self {
        Event {
            state: AtomicU32::new(0),
            shared: 1,
        }
    }

    /// Waits until set or `deadline_ns` (absolute `CLOCK_MONOTONIC`). True if set.
    pub fn wait_until(&self, deadline_ns: Option<u64>) -> bool {
        // Acquire: a waiter that sees the event set sees what the setter wrote before.
        while self.state.load(Ordering::Acquire) == 0 {
            if futex::wait_until(&self.state, scope(self.shared), 0, deadline_ns) == Wait::TimedOut
            {
                return self.state.load(Ordering::Acquire) != 0;
            }
        }
        true
    }

    /// Sets the event and wakes every waiter.
    pub fn set(&self) {
        // Release: pairs with the Acquire in wait_until.
        if self.state.swap(1, Ordering::Release) == 0 {
            futex::wake(&self.state, scope(self.shared), u32::MAX);
        }
    }

    /// Unsets the event.
    pub fn reset(&self) {
        self.state.store(0, Ordering::Relaxed);
    }

    /// True when set (a snapshot).
    pub fn is_set(&self) -> bool {
        self.state.load(Ordering::Acquire) != 0
    }
}
