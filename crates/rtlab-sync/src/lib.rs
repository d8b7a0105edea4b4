//! Real-time-safe synchronisation primitives built directly on Linux futexes.
//!
//! * [`PiMutex`]: priority-inheritance mutex (`FUTEX_LOCK_PI`), TID fast path in user space,
//!   process-private by default, a process-shared form for shared memory ([`RawPiMutex`]).
//!
//! Every primitive documents its futex word as a bit/state table and justifies each memory
//! ordering where it is used.
#![deny(unsafe_code)]

mod error;
#[allow(unsafe_code)]
mod pi_mutex;

pub use error::LockError;
pub use pi_mutex::{PiMutex, PiMutexGuard, RawPiMutex};
pub use rtlab_sys::futex::Scope;
