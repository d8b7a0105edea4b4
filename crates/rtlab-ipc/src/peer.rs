//! Running a fixed peer in a forked child, for comparisons between mechanisms.
//!
//! The child's code is fixed here (echo every message, or count them until told to stop), so
//! forking it is safe to offer: it touches only memory and descriptors prepared before the
//! fork and makes syscalls.

use crate::{ChannelOptions, IpcError, MutexSemQueue, ShmChannel, Signalling, Variant};
use rtlab_sys::affinity::{set_current_thread_affinity, CpuList};
use rtlab_sys::ipc::{pair, Endpoint, Kind};
use rtlab_sys::sched::{set_current_thread_scheduler, Policy};
use rtlab_sys::SysError;

/// Why a run with a forked peer (this module's, or [`crate::shared_locks`]'s) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PeerError {
    /// One of rtlab's channels or queues failed.
    #[error(transparent)]
    Channel(#[from] IpcError),
    /// A system call failed: a kernel mechanism's, the fork, the wait for the child, a shared
    /// mapping, making a lock.
    #[error(transparent)]
    Sys(#[from] SysError),
    /// The child exited with a failure status (its exit code says at which step it stopped).
    #[error("the child process failed (status {0})")]
    ChildFailed(i32),
    /// The child did not get ready in time; it was killed, and this is what waiting for it
    /// returned.
    #[error("the child did not start ({0:?})")]
    ChildNotStarted(Result<i32, SysError>),
    /// The lock under test refused the calling thread at its first take.
    #[error("the lock refused this caller")]
    LockRefused,
    /// The lock under test failed while this process timed its fast path.
    #[error("lock failed")]
    LockFailed,
    /// The lock under test failed in the parent's side of the hand-off ring.
    #[error("lock failed in the parent")]
    ParentLockFailed,
}

/// A mechanism under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// rtlab-ipc's `ShmChannel` (spsc), one per direction.
    RtlabShm,
    /// `ShmChannel` in its mpsc form (the producer side takes a robust PI mutex).
    RtlabShmMpsc,
    /// `ShmChannel` (spsc) with both ends busy-polling instead of sleeping (burns CPUs).
    RtlabShmBusy,
    /// Seed 003's first design: a robust PI mutex and two PI condition variables.
    RtlabShmMutexCondvar,
    /// Seed 003's design: a robust PI mutex and two semaphores per direction.
    RtlabShmMutexSemaphore,
    /// A kernel mechanism.
    Kernel(Kind),
}

impl Mechanism {
    /// The blocking mechanisms, rtlab's first (the default set: busy-polling ones are not in it).
    pub fn all() -> Vec<Mechanism> {
        [
            Mechanism::RtlabShm,
            Mechanism::RtlabShmMpsc,
            Mechanism::RtlabShmMutexCondvar,
            Mechanism::RtlabShmMutexSemaphore,
        ]
        .into_iter()
        .chain(Kind::ALL.into_iter().map(Mechanism::Kernel))
        .collect()
    }

    /// The spinning variants that `--busy-poll` adds.
    pub fn busy_polling() -> Vec<Mechanism> {
        vec![Mechanism::RtlabShmBusy]
    }

    /// Every mechanism that can be named.
    pub fn every() -> Vec<Mechanism> {
        let mut all = Self::all();
        all.extend(Self::busy_polling());
        all
    }

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::RtlabShm => "rtlab-shm",
            Mechanism::RtlabShmMpsc => "rtlab-shm-mpsc",
            Mechanism::RtlabShmBusy => "rtlab-shm-busy",
            Mechanism::RtlabShmMutexCondvar => "rtlab-shm-mutex-condvar",
            Mechanism::RtlabShmMutexSemaphore => "rtlab-shm-mutex-semaphore",
            Mechanism::Kernel(k) => k.name(),
        }
    }

    /// True for the spinning variants.
    pub fn busy_polls(self) -> bool {
        self == Mechanism::RtlabShmBusy
    }
}

/// Where and how the child runs.
#[derive(Debug, Clone, Copy)]
pub struct ChildPlacement {
    /// Its CPU.
    pub cpu: usize,
    /// Its scheduling policy.
    pub policy: Policy,
    /// Its priority.
    pub prio: u32,
}

/// What the child does with the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRole {
    /// Sends every message straight back.
    Echo,
    /// Counts messages; on [`STOP`] replies with the count in bytes 1..9.
    Count,
    /// Sends `count` messages, one every `interval_ns` (absolute deadlines), each carrying its
    /// sequence number in bytes 1..9 and its `CLOCK_MONOTONIC` send time in bytes 9..17, then
    /// exits. The parent only receives.
    Pace {
        /// Messages to send.
        count: u64,
        /// Period between sends.
        interval_ns: u64,
    },
}

/// First byte of a data message.
pub const DATA: u8 = 0;
/// First byte of the message that ends the child's loop.
pub const STOP: u8 = 1;

/// One process's end of a mechanism.
pub enum End<'a> {
    /// rtlab's channels.
    Shm {
        /// Outgoing.
        tx: crate::Sender<'a>,
        /// Incoming.
        rx: crate::Receiver<'a>,
    },
    /// Mutex + semaphore queues.
    Queue {
        /// Outgoing.
        tx: &'a MutexSemQueue,
        /// Incoming.
        rx: &'a MutexSemQueue,
    },
    /// A kernel mechanism.
    Kernel(Endpoint),
}

impl std::fmt::Debug for End<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            End::Shm { .. } => "End::Shm",
            End::Queue { .. } => "End::Queue",
            End::Kernel(_) => "End::Kernel",
        })
    }
}

impl End<'_> {
    /// Sends one message (blocking).
    pub fn send(&mut self, msg: &[u8]) -> Result<(), PeerError> {
        match self {
            End::Shm { tx, .. } => Ok(tx.send(msg, None)?),
            End::Queue { tx, .. } => Ok(tx.send(msg, None)?),
            End::Kernel(e) => Ok(e.send(msg)?),
        }
    }

    /// Receives one message (blocking); returns its length.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, PeerError> {
        match self {
            End::Shm { rx, .. } => Ok(rx.recv(buf, None)?),
            End::Queue { rx, .. } => Ok(rx.recv(buf, None)?),
            End::Kernel(e) => Ok(e.recv(buf)?),
        }
    }
}

fn child_loop(mut end: End<'_>, buf: &mut [u8], role: PeerRole) -> i32 {
    if let PeerRole::Pace { count, interval_ns } = role {
        let mut next = rtlab_sys::time::monotonic_now_ns() + interval_ns;
        for seq in 0..count {
            let _ = rtlab_sys::time::sleep_until_monotonic_ns(next);
            buf[0] = DATA;
            buf[1..9].copy_from_slice(&seq.to_le_bytes());
            buf[9..17].copy_from_slice(&rtlab_sys::time::monotonic_now_ns().to_le_bytes());
            if end.send(buf).is_err() {
                return 5;
            }
            next += interval_ns;
        }
        return 0;
    }
    let mut count: u64 = 0;
    loop {
        let Ok(n) = end.recv(buf) else { return 1 };
        if n == 0 || buf[0] == STOP {
            if role == PeerRole::Count {
                buf[1..9].copy_from_slice(&count.to_le_bytes());
            }
            return if end.send(buf).is_ok() { 0 } else { 2 };
        }
        count += 1;
        if role == PeerRole::Echo && end.send(buf).is_err() {
            return 3;
        }
    }
}

/// The shared objects of one mechanism: the two directions (ping: parent to child, pong:
/// child to parent).
enum Channels {
    Ring(ShmChannel, ShmChannel, bool),
    Queue(MutexSemQueue, MutexSemQueue),
    Kernel(Option<Endpoint>, Option<Endpoint>),
}

impl Channels {
    fn new(mechanism: Mechanism, size: usize) -> Result<Channels, PeerError> {
        let ring = |variant| {
            let options = ChannelOptions::new(1 << 20, size.max(64)).variant(variant);
            ShmChannel::create_anonymous(&options)
        };
        let queue = |signalling| MutexSemQueue::with_signalling(16, size.max(17), signalling);
        Ok(match mechanism {
            Mechanism::RtlabShm | Mechanism::RtlabShmBusy => Channels::Ring(
                ring(Variant::Spsc)?,
                ring(Variant::Spsc)?,
                mechanism.busy_polls(),
            ),
            Mechanism::RtlabShmMpsc => {
                Channels::Ring(ring(Variant::Mpsc)?, ring(Variant::Mpsc)?, false)
            }
            Mechanism::RtlabShmMutexCondvar => {
                Channels::Queue(queue(Signalling::Condvars)?, queue(Signalling::Condvars)?)
            }
            Mechanism::RtlabShmMutexSemaphore => Channels::Queue(
                queue(Signalling::Semaphores)?,
                queue(Signalling::Semaphores)?,
            ),
            Mechanism::Kernel(kind) => {
                let (a, b) = pair(kind, size)?;
                Channels::Kernel(Some(a), Some(b))
            }
        })
    }

    /// The child's end (`child` true) or the parent's. Called once per side.
    fn end(&mut self, child: bool) -> Result<End<'_>, IpcError> {
        Ok(match self {
            Channels::Ring(ping, pong, busy) => {
                let (out, inc) = if child {
                    (&*pong, &*ping)
                } else {
                    (&*ping, &*pong)
                };
                End::Shm {
                    tx: out.sender()?.busy_poll(*busy),
                    rx: inc.receiver()?.busy_poll(*busy),
                }
            }
            Channels::Queue(ping, pong) => {
                let (tx, rx) = if child {
                    (&*pong, &*ping)
                } else {
                    (&*ping, &*pong)
                };
                End::Queue { tx, rx }
            }
            Channels::Kernel(parent, child_end) => {
                let taken = if child {
                    child_end.take()
                } else {
                    parent.take()
                };
                End::Kernel(taken.ok_or_else(|| IpcError::Busy("end taken".into()))?)
            }
        })
    }
}

/// Forks a child playing `role` over `mechanism` with `size`-byte messages, runs `parent` with
/// the parent's end, waits for the child and returns what `parent` returned. For `Echo` and
/// `Count`, `parent` must end the child with a [`STOP`] message; `Pace` ends by itself.
/// `parent`'s error type is the caller's, so it can fail for its own reasons too.
pub fn with_peer<T, E: From<PeerError>>(
    mechanism: Mechanism,
    size: usize,
    child: ChildPlacement,
    role: PeerRole,
    parent: impl FnOnce(End<'_>) -> Result<T, E>,
) -> Result<T, E> {
    let mut channels = Channels::new(mechanism, size)?;
    let mut child_buf = vec![0u8; size.max(17)];
    // If this process dies (even by SIGKILL) the child is told, removes any SysV queues
    // (their only other owner is gone) and exits: no orphan waits forever at FIFO, pinned.
    let sysv_queues = match &channels {
        Channels::Kernel(Some(parent_end), _) => parent_end.sysv_queues(),
        _ => None,
    };
    // SAFETY: the child runs only `child_loop` over memory and descriptors prepared before the
    // fork (its buffer, its endpoint, the shared mappings) plus syscalls; it never allocates
    // on success paths (an error path ends it with an exit code; the error is not formatted).
    let pid = unsafe {
        rtlab_sys::process::fork_peer(sysv_queues, || {
            let placed = set_current_thread_affinity(&CpuList::from(vec![child.cpu]))
                .and_then(|_| set_current_thread_scheduler(child.policy, child.prio));
            if placed.is_err() {
                return 4;
            }
            match channels.end(true) {
                Ok(end) => child_loop(end, &mut child_buf, role),
                Err(_) => 6,
            }
        })
    }
    .map_err(PeerError::from)?;
    // The child's kernel end must not stay open here: a dead child then reads as EOF.
    if let Channels::Kernel(_, child_end) = &mut channels {
        *child_end = None;
    }
    let result = match channels.end(false) {
        Ok(end) => parent(end),
        Err(e) => Err(PeerError::from(e).into()),
    };
    if result.is_err() {
        // The parent side gave up without a STOP: the child would wait forever.
        let _ = rtlab_sys::process::kill_hard(pid);
    }
    let status = rtlab_sys::process::wait_child(pid).map_err(PeerError::from)?;
    let value = result?;
    if status != 0 {
        return Err(PeerError::ChildFailed(status).into());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words each failure had when it was a string (the lab shows them in its warnings).
    #[test]
    fn peer_errors_say_what_their_strings_said() {
        for (error, said) in [
            (
                PeerError::ChildFailed(21),
                "the child process failed (status 21)",
            ),
            (
                PeerError::ChildNotStarted(Ok(9)),
                "the child did not start (Ok(9))",
            ),
            (PeerError::LockRefused, "the lock refused this caller"),
            (PeerError::LockFailed, "lock failed"),
            (PeerError::ParentLockFailed, "lock failed in the parent"),
            (PeerError::Channel(IpcError::TimedOut), "timed out"),
        ] {
            assert_eq!(error.to_string(), said);
        }
    }
}
