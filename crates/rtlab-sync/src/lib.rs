//! Real-time-safe synchronisation primitives built directly on Linux futexes.
//!
//! * [`PiMutex`]: priority-inheritance mutex (`FUTEX_LOCK_PI`), TID fast path in user space,
//!   process-private by default, a process-shared form for shared memory ([`RawPiMutex`]).
//! * [`CeilingMutex`]: priority protect: the holder runs at the ceiling priority.
//! * [`PiCondvar`]: condition variable on requeue-PI futexes; waiters are woken in priority
//!   order and return owning the mutex.
//! * [`Parker`] and [`sleep_until`]: absolute-deadline parking.
//! * [`Semaphore`] and [`Event`].
//! * [`FutexMutex`]: a plain non-PI futex mutex, the baseline that shows priority inversion.
//! * [`RobustMutex`]: robust PI mutex for shared memory; survives its owner's death
//!   (`OwnerDied` once, then `make_consistent` or `NotRecoverable`), coexisting with glibc's
//!   own robust list.
//!
//! The three mutexes are one [`Mutex`] and one [`MutexGuard`] over a [`RawLock`] (lock_api's
//! pattern): the lock words differ, the guard and its unsafe parts are written once.
//!
//! Every primitive documents its futex word as a bit/state table and justifies each memory
//! ordering where it is used.
#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod ceiling;
#[allow(unsafe_code)]
mod condvar;
mod error;
#[allow(unsafe_code)]
mod futex_mutex;
#[allow(unsafe_code)]
mod mutex;
mod parker;
#[allow(unsafe_code)]
mod pi_mutex;
pub mod probe;
#[allow(unsafe_code)]
mod robust;
mod semaphore;

pub use ceiling::{CeilingGuard, CeilingMutex, RawCeilingMutex};
pub use condvar::{PiCondvar, WaitResult};
pub use error::LockError;
pub use futex_mutex::{FutexMutex, FutexMutexGuard, RawFutexMutex};
pub use mutex::{Mutex, MutexGuard, RawLock, RawLockUntil};
pub use parker::{sleep_until, Parker};
pub use pi_mutex::{PiMutex, PiMutexGuard, RawPiMutex};
pub use robust::{ListUnusable, RobustError, RobustGuard, RobustMutex, RobustWait, MAX_HELD};
pub use rtlab_sys::futex::Scope;
/// Per-thread timer slack: how late the kernel may wake a sleeping SCHED_OTHER thread to
/// batch timers (50 us by default; inherited by new threads and children). Ignored for
/// SCHED_FIFO/RR threads, which are woken without slack.
pub use rtlab_sys::slack::{current_timer_slack_ns, set_current_timer_slack_ns};
pub use semaphore::{Event, Semaphore};
