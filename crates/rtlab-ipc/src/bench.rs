//! Running a fixed peer in a forked child, for comparisons between mechanisms.
//!
//! The child's code is fixed here (echo every message, or count them until told to stop), so
//! forking it is safe to offer: it touches only memory and descriptors prepared before the
//! fork and makes syscalls.

use crate::{MutexSemQueue, ShmChannel};
use rtlab_sys::affinity::{set_current_thread_affinity, CpuList};
use rtlab_sys::ipc::{pair, Endpoint, Kind};
use rtlab_sys::sched::{set_current_thread_scheduler, Policy};

/// A mechanism under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// rtlab-ipc's `ShmChannel` (spsc), one per direction.
    RtlabShm,
    /// Seed 003's design: a robust PI mutex and two semaphores per direction.
    RtlabShmMutexSemaphore,
    /// A kernel mechanism.
    Kernel(Kind),
}

impl Mechanism {
    /// All mechanisms, rtlab's first.
    pub fn all() -> Vec<Mechanism> {
        [Mechanism::RtlabShm, Mechanism::RtlabShmMutexSemaphore]
            .into_iter()
            .chain(Kind::ALL.into_iter().map(Mechanism::Kernel))
            .collect()
    }

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::RtlabShm => "rtlab-shm",
            Mechanism::RtlabShmMutexSemaphore => "rtlab-shm-mutex-semaphore",
            Mechanism::Kernel(k) => k.name(),
        }
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
    pub fn send(&mut self, msg: &[u8]) -> Result<(), String> {
        match self {
            End::Shm { tx, .. } => tx.send(msg, None).map_err(|e| e.to_string()),
            End::Queue { tx, .. } => tx.send(msg, None).map_err(|e| e.to_string()),
            End::Kernel(e) => e.send(msg).map_err(|e| e.to_string()),
        }
    }

    /// Receives one message (blocking); returns its length.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, String> {
        match self {
            End::Shm { rx, .. } => rx.recv(buf, None).map_err(|e| e.to_string()),
            End::Queue { rx, .. } => rx.recv(buf, None).map_err(|e| e.to_string()),
            End::Kernel(e) => e.recv(buf).map_err(|e| e.to_string()),
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

/// Forks a child playing `role` over `mechanism` with `size`-byte messages, runs `parent` with
/// the parent's end, waits for the child and returns what `parent` returned. For `Echo` and
/// `Count`, `parent` must end the child with a [`STOP`] message; `Pace` ends by itself.
pub fn with_peer<T>(
    mechanism: Mechanism,
    size: usize,
    child: ChildPlacement,
    role: PeerRole,
    parent: impl FnOnce(End<'_>) -> Result<T, String>,
) -> Result<T, String> {
    let shm = |cap, max| ShmChannel::create(cap, max).map_err(|e| e.to_string());
    let queue = |max| MutexSemQueue::create(16, max).map_err(|e| e.to_string());
    let (ping, pong, kernel) = match mechanism {
        Mechanism::RtlabShm => (
            shm(1 << 20, size.max(64))?,
            shm(1 << 20, size.max(64))?,
            None,
        ),
        Mechanism::RtlabShmMutexSemaphore => (shm(4096, 64)?, shm(4096, 64)?, None),
        Mechanism::Kernel(kind) => (
            shm(4096, 64)?,
            shm(4096, 64)?,
            Some(pair(kind, size).map_err(|e| e.to_string())?),
        ),
    };
    let use_queue = mechanism == Mechanism::RtlabShmMutexSemaphore;
    let (qping, qpong) = if use_queue {
        (queue(size.max(17))?, queue(size.max(17))?)
    } else {
        (queue(17)?, queue(17)?)
    };
    let (parent_end, child_end) = match kernel {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
    let mut child_buf = vec![0u8; size.max(17)];
    // SAFETY: the child runs only `child_loop` over memory and descriptors prepared before the
    // fork (its buffer, its endpoint, the shared mappings) plus syscalls; it never allocates.
    let pid = unsafe {
        rtlab_sys::process::fork_child(|| {
            let placed = set_current_thread_affinity(&CpuList::from(vec![child.cpu]))
                .and_then(|_| set_current_thread_scheduler(child.policy, child.prio));
            if placed.is_err() {
                return 4;
            }
            let end = match child_end {
                Some(e) => End::Kernel(e),
                None if use_queue => End::Queue {
                    tx: &qpong,
                    rx: &qping,
                },
                None => End::Shm {
                    tx: pong.sender(),
                    rx: ping.receiver(),
                },
            };
            child_loop(end, &mut child_buf, role)
        })
    }
    .map_err(|e| e.to_string())?;
    let end = match parent_end {
        Some(e) => End::Kernel(e),
        None if use_queue => End::Queue {
            tx: &qping,
            rx: &qpong,
        },
        None => End::Shm {
            tx: ping.sender(),
            rx: pong.receiver(),
        },
    };
    let result = parent(end);
    if result.is_err() {
        // The parent side gave up without a STOP: the child would wait forever.
        let _ = rtlab_sys::process::kill_hard(pid);
    }
    let status = rtlab_sys::process::wait_child(pid).map_err(|e| e.to_string())?;
    let value = result?;
    if status != 0 {
        return Err(format!("the child process failed (status {status})"));
    }
    Ok(value)
}
