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
pub mod bench;
#[allow(unsafe_code)]
mod mutex_queue;
#[allow(unsafe_code)]
mod ring;

pub use mutex_queue::MutexSemQueue;
pub use ring::{IpcError, Receiver, Sender, ShmChannel};
