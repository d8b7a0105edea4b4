//! Shared-memory message channels between processes.
//!
//! [`ShmChannel`] (the `spsc` variant): a bounded ring of variable-size messages in shared
//! memory, one producer process, one consumer process. Busy, it costs no syscall per message:
//! the consumer sleeps on a futex only when the ring is empty and the producer wakes it only
//! when it sleeps (and the other way round when the ring is full). A peer that dies is
//! reported as [`IpcError::PeerDied`] within the caller's deadline; a peer that scribbles on
//! the shared header or ring cannot make the other side read out of bounds, crash or hang
//! past its deadline ([`IpcError::Corrupt`]).
#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod mutex_queue;
#[allow(unsafe_code)]
pub mod peer;
mod region;
#[allow(unsafe_code)]
mod ring;
#[allow(unsafe_code)]
pub mod shared_locks;

pub use mutex_queue::{MutexSemQueue, Signalling};
pub use ring::{
    ChannelOptions, IpcError, RawLayout, Receiver, Sender, ShmChannel, Variant, FORMAT,
    MAX_PRODUCERS,
};

/// Locks a robust mutex guarding shared state that its holders only change in ways a death
/// cannot tear (so an `OwnerDied` needs no repair), until `deadline_ns`.
fn lock_robust(
    mutex: std::pin::Pin<&rtlab_sync::RobustMutex>,
    deadline_ns: Option<u64>,
) -> Result<rtlab_sync::RobustGuard<'_>, IpcError> {
    use rtlab_sync::{LockError, RobustError};
    let taken = match deadline_ns {
        Some(d) => mutex.lock_until(d),
        None => mutex.lock(),
    };
    match taken {
        Ok(g) => Ok(g),
        Err(RobustError::OwnerDied(g)) => {
            g.make_consistent();
            Ok(g)
        }
        Err(RobustError::Lock(LockError::TimedOut)) => Err(IpcError::TimedOut),
        Err(e) => Err(IpcError::Corrupt(format!("shared mutex: {e}"))),
    }
}
