//! The kernel's own message-passing mechanisms, as pairs of endpoints for a parent and a
//! forked child: the anchors `rtlab ipc` compares its shared-memory channel with.
//!
//! Messages have a fixed size per pair. Names and queues are removed as soon as both ends
//! hold them (POSIX mq is unlinked at once; the System V queues are removed when the parent's
//! endpoint is dropped), so nothing is left behind, also after a crash of the child.

use crate::mem::AnonMapping;
use crate::SysError;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixDatagram, UnixStream};

/// A kernel mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// POSIX message queues (`mq_send` / `mq_receive`).
    PosixMq,
    /// System V message queues (`msgsnd` / `msgrcv`).
    SysvMsg,
    /// A pipe per direction.
    Pipe,
    /// A `SOCK_STREAM` Unix socket pair.
    UnixStream,
    /// A `SOCK_DGRAM` Unix socket pair.
    UnixDgram,
    /// A shared-memory slot per direction, signalled through an eventfd.
    EventfdShm,
}

impl Kind {
    /// All mechanisms.
    pub const ALL: [Kind; 6] = [
        Kind::PosixMq,
        Kind::SysvMsg,
        Kind::Pipe,
        Kind::UnixStream,
        Kind::UnixDgram,
        Kind::EventfdShm,
    ];

    /// Stable name (series names use it).
    pub fn name(self) -> &'static str {
        match self {
            Kind::PosixMq => "posix-mq",
            Kind::SysvMsg => "sysv-msg",
            Kind::Pipe => "pipe",
            Kind::UnixStream => "unix-stream",
            Kind::UnixDgram => "unix-dgram",
            Kind::EventfdShm => "eventfd-shm",
        }
    }
}

/// One end of a pair.
#[derive(Debug)]
pub struct Endpoint {
    inner: Inner,
    size: usize,
    /// Scratch for mechanisms that need a header (System V's `mtype`); allocated up front.
    scratch: Vec<u8>,
    owner: bool,
}

#[derive(Debug)]
enum Inner {
    Mq {
        tx: libc::mqd_t,
        rx: libc::mqd_t,
    },
    Sysv {
        tx: i32,
        rx: i32,
    },
    Stream {
        tx: std::fs::File,
        rx: std::fs::File,
    },
    Unix(UnixStream),
    Dgram(UnixDatagram),
    Eventfd {
        map: std::sync::Arc<AnonMapping>,
        tx_slot: usize,
        rx_slot: usize,
        tx: Slot,
        rx: Slot,
    },
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> SysError + '_ {
    move |e| SysError::from_io(what, e)
}

fn last(what: &str) -> SysError {
    SysError::from_io(what, std::io::Error::last_os_error())
}

/// A kernel limit from /proc/sys, when readable.
fn sysctl_limit(path: &str) -> Option<usize> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Refuses a size above a kernel limit with the exact setting to raise.
fn within_limit(size: usize, path: &str, name: &str) -> Result<(), SysError> {
    match sysctl_limit(path) {
        Some(max) if size > max => Err(SysError::Invalid {
            what: format!(
                "message size {size} > {name} {max} (raise it: sysctl -w {name}={})",
                size.next_power_of_two().max(65536)
            ),
        }),
        _ => Ok(()),
    }
}

/// Raises this process's RLIMIT_MSGQUEUE to unlimited (soft and hard: root only) or the soft
/// limit to the hard one. False the first time (the caller retries), true after that.
fn retried_after_raising_limit() -> bool {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    static RAISED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if RAISED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return true;
    }
    let unlimited = Rlimit {
        current: None,
        maximum: None,
    };
    if setrlimit(Resource::Msgqueue, unlimited).is_err() {
        let hard = getrlimit(Resource::Msgqueue).maximum;
        let _ = setrlimit(
            Resource::Msgqueue,
            Rlimit {
                current: hard,
                maximum: hard,
            },
        );
    }
    false
}

fn mq_pair(size: usize) -> Result<(libc::mqd_t, libc::mqd_t), SysError> {
    use std::ffi::CString;
    within_limit(
        size,
        "/proc/sys/fs/mqueue/msgsize_max",
        "fs.mqueue.msgsize_max",
    )?;
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = CString::new(format!("/rtlab-{}-{n}", std::process::id())).expect("no NUL");
    // SAFETY: zeroed mq_attr is valid; only maxmsg/msgsize are meaningful to mq_open.
    let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
    // Ten messages per queue, fewer when two such queues would not fit this user's
    // RLIMIT_MSGQUEUE (800 KiB by default: 64 KiB messages get 6).
    let budget = rustix::process::getrlimit(rustix::process::Resource::Msgqueue)
        .current
        .unwrap_or(u64::MAX);
    let per_queue = budget / 2 / (size as u64 + 128);
    attr.mq_maxmsg = per_queue.clamp(1, 10) as libc::c_long;
    attr.mq_msgsize = size.max(1) as libc::c_long;
    // SAFETY: valid NUL-terminated name and attr pointer; the variadic mode/attr args follow
    // O_CREAT as mq_open requires.
    let q = unsafe {
        libc::mq_open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
            0o600 as libc::mode_t,
            &attr,
        )
    };
    if q == -1 {
        let err = std::io::Error::last_os_error();
        // EMFILE from mq_open: this user's RLIMIT_MSGQUEUE (bytes of all its queues, 800 KiB
        // by default) is spent. Raise the limit for this process where allowed, then retry once.
        if err.raw_os_error() == Some(libc::EMFILE) && !retried_after_raising_limit() {
            return mq_pair(size);
        }
        return Err(SysError::from_io(
            format!(
                "mq_open(2 x 10 messages of {size} bytes; RLIMIT_MSGQUEUE is {} bytes, see ulimit -q)",
                rustix::process::getrlimit(rustix::process::Resource::Msgqueue)
                    .current
                    .map_or("unlimited".to_string(), |c| c.to_string())
            ),
            err,
        ));
    }
    // SAFETY: the name was just created by us; unlinking keeps the open descriptor valid.
    unsafe { libc::mq_unlink(name.as_ptr()) };
    // Each end owns its own descriptor (on Linux an mqd_t is a file descriptor), so closing
    // one end never closes the other's.
    // SAFETY: q is an open descriptor.
    let second = unsafe { libc::dup(q) };
    if second < 0 {
        let err = last("dup(mqd)");
        // SAFETY: q is ours and open; nothing else refers to it.
        unsafe { libc::mq_close(q) };
        return Err(err);
    }
    Ok((q, second))
}

/// The two semaphore eventfds guarding one shared slot: `ready` counts messages written and
/// not yet read, `free` is 1 while the slot may be written.
#[derive(Debug)]
struct Slot {
    ready: OwnedFd,
    free: OwnedFd,
}

impl Slot {
    fn new() -> Result<(Slot, Slot), SysError> {
        use rustix::event::{eventfd, EventfdFlags};
        let flags = EventfdFlags::CLOEXEC | EventfdFlags::SEMAPHORE;
        let ready = eventfd(0, flags).map_err(|e| SysError::from_errno("eventfd", e))?;
        let free = eventfd(1, flags).map_err(|e| SysError::from_errno("eventfd", e))?;
        let copy = Slot {
            ready: ready.try_clone().map_err(io("dup"))?,
            free: free.try_clone().map_err(io("dup"))?,
        };
        Ok((Slot { ready, free }, copy))
    }
}

fn take(fd: &OwnedFd, what: &str) -> Result<(), SysError> {
    let mut count = [0u8; 8];
    rustix::io::read(fd, &mut count)
        .map(|_| ())
        .map_err(|e| SysError::from_errno(what, e))
}

fn give(fd: &OwnedFd, what: &str) -> Result<(), SysError> {
    rustix::io::write(fd, &1u64.to_ne_bytes())
        .map(|_| ())
        .map_err(|e| SysError::from_errno(what, e))
}

/// Creates a connected pair: `(parent_end, child_end)` for messages of `size` bytes.
pub fn pair(kind: Kind, size: usize) -> Result<(Endpoint, Endpoint), SysError> {
    let end = |inner, owner| Endpoint {
        inner,
        size,
        scratch: vec![0u8; size + 8],
        owner,
    };
    Ok(match kind {
        Kind::PosixMq => {
            let (a1, a2) = mq_pair(size)?;
            let (b1, b2) = match mq_pair(size) {
                Ok(pair) => pair,
                Err(e) => {
                    // SAFETY: the first pair is ours and open; nothing else refers to it.
                    unsafe {
                        libc::mq_close(a1);
                        libc::mq_close(a2);
                    }
                    return Err(e);
                }
            };
            (
                end(Inner::Mq { tx: a1, rx: b1 }, true),
                end(Inner::Mq { tx: b2, rx: a2 }, false),
            )
        }
        Kind::SysvMsg => {
            within_limit(size, "/proc/sys/kernel/msgmax", "kernel.msgmax")?;
            // A message larger than a whole queue would block its sender forever.
            within_limit(size, "/proc/sys/kernel/msgmnb", "kernel.msgmnb")?;
            // SAFETY: plain syscalls creating private queues.
            let (a, b) = unsafe {
                (
                    libc::msgget(libc::IPC_PRIVATE, libc::IPC_CREAT | 0o600),
                    libc::msgget(libc::IPC_PRIVATE, libc::IPC_CREAT | 0o600),
                )
            };
            if a < 0 || b < 0 {
                let err = last("msgget");
                // A queue is a kernel object that outlives the process: remove the one made.
                for q in [a, b].into_iter().filter(|&q| q >= 0) {
                    // SAFETY: IPC_RMID on a queue this call just created.
                    unsafe { libc::msgctl(q, libc::IPC_RMID, std::ptr::null_mut()) };
                }
                return Err(err);
            }
            (
                end(Inner::Sysv { tx: a, rx: b }, true),
                end(Inner::Sysv { tx: b, rx: a }, false),
            )
        }
        Kind::Pipe => {
            let (r1, w1) = std::io::pipe().map_err(io("pipe"))?;
            let (r2, w2) = std::io::pipe().map_err(io("pipe"))?;
            let f = |fd: OwnedFd| std::fs::File::from(fd);
            (
                end(
                    Inner::Stream {
                        tx: f(w1.into()),
                        rx: f(r2.into()),
                    },
                    true,
                ),
                end(
                    Inner::Stream {
                        tx: f(w2.into()),
                        rx: f(r1.into()),
                    },
                    false,
                ),
            )
        }
        Kind::UnixStream => {
            let (a, b) = UnixStream::pair().map_err(io("socketpair(SOCK_STREAM)"))?;
            (end(Inner::Unix(a), true), end(Inner::Unix(b), false))
        }
        Kind::UnixDgram => {
            let (a, b) = UnixDatagram::pair().map_err(io("socketpair(SOCK_DGRAM)"))?;
            (end(Inner::Dgram(a), true), end(Inner::Dgram(b), false))
        }
        Kind::EventfdShm => {
            let map = std::sync::Arc::new(AnonMapping::new_shared((2 * size).max(4096))?);
            let (to_child, to_child2) = Slot::new()?;
            let (to_parent, to_parent2) = Slot::new()?;
            (
                end(
                    Inner::Eventfd {
                        map: map.clone(),
                        tx_slot: 0,
                        rx_slot: size,
                        tx: to_child,
                        rx: to_parent,
                    },
                    true,
                ),
                end(
                    Inner::Eventfd {
                        map,
                        tx_slot: size,
                        rx_slot: 0,
                        tx: to_parent2,
                        rx: to_child2,
                    },
                    false,
                ),
            )
        }
    })
}

impl Endpoint {
    /// Sends one message of exactly the pair's size (blocking).
    pub fn send(&mut self, msg: &[u8]) -> Result<(), SysError> {
        debug_assert_eq!(msg.len(), self.size);
        match &mut self.inner {
            Inner::Mq { tx, .. } => {
                // SAFETY: msg is valid for msg.len() bytes; tx is an open queue descriptor.
                let rc = unsafe { libc::mq_send(*tx, msg.as_ptr().cast(), msg.len(), 0) };
                if rc != 0 {
                    return Err(last("mq_send"));
                }
            }
            Inner::Sysv { tx, .. } => {
                self.scratch[..8].copy_from_slice(&1i64.to_ne_bytes());
                self.scratch[8..8 + msg.len()].copy_from_slice(msg);
                // SAFETY: scratch holds mtype (8 bytes) followed by msg.len() payload bytes.
                let rc = unsafe { libc::msgsnd(*tx, self.scratch.as_ptr().cast(), msg.len(), 0) };
                if rc != 0 {
                    return Err(last("msgsnd"));
                }
            }
            Inner::Stream { tx, .. } => tx.write_all(msg).map_err(io("write(pipe)"))?,
            Inner::Unix(s) => s.write_all(msg).map_err(io("write(unix stream)"))?,
            Inner::Dgram(s) => {
                s.send(msg).map_err(io("send(unix dgram)"))?;
            }
            Inner::Eventfd {
                map, tx_slot, tx, ..
            } => {
                take(&tx.free, "read(eventfd free)")?;
                // SAFETY: the slot [tx_slot, tx_slot + size) is inside the mapping; `free` says
                // the reader is done with it; the eventfd write publishes it (a syscall is a
                // full barrier).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        msg.as_ptr(),
                        map.as_ptr().add(*tx_slot),
                        msg.len(),
                    )
                };
                give(&tx.ready, "write(eventfd ready)")?;
            }
        }
        Ok(())
    }

    /// Receives one message into `buf` (the pair's size; blocking). Returns its length.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, SysError> {
        let size = self.size;
        match &mut self.inner {
            Inner::Mq { rx, .. } => {
                self.scratch.resize(size.max(1) + 8, 0);
                // SAFETY: scratch has at least msgsize bytes; rx is an open queue descriptor.
                let n = unsafe {
                    libc::mq_receive(
                        *rx,
                        self.scratch.as_mut_ptr().cast(),
                        self.scratch.len(),
                        std::ptr::null_mut(),
                    )
                };
                if n < 0 {
                    return Err(last("mq_receive"));
                }
                buf[..n as usize].copy_from_slice(&self.scratch[..n as usize]);
                Ok(n as usize)
            }
            Inner::Sysv { rx, .. } => {
                // SAFETY: scratch holds 8 bytes of mtype plus `size` payload bytes.
                let n = unsafe { libc::msgrcv(*rx, self.scratch.as_mut_ptr().cast(), size, 0, 0) };
                if n < 0 {
                    return Err(last("msgrcv"));
                }
                buf[..n as usize].copy_from_slice(&self.scratch[8..8 + n as usize]);
                Ok(n as usize)
            }
            Inner::Stream { rx, .. } => rx
                .read_exact(&mut buf[..size])
                .map(|_| size)
                .map_err(io("read(pipe)")),
            Inner::Unix(s) => s
                .read_exact(&mut buf[..size])
                .map(|_| size)
                .map_err(io("read(unix stream)")),
            Inner::Dgram(s) => s.recv(buf).map_err(io("recv(unix dgram)")),
            Inner::Eventfd {
                map, rx_slot, rx, ..
            } => {
                take(&rx.ready, "read(eventfd ready)")?;
                // SAFETY: the peer wrote the slot before signalling `ready`; it will not write
                // again until we signal `free`.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        map.as_ptr().add(*rx_slot),
                        buf.as_mut_ptr(),
                        size,
                    )
                };
                give(&rx.free, "write(eventfd free)")?;
                Ok(size)
            }
        }
    }
}

impl Endpoint {
    /// The SysV queue ids of a `sysv-msg` endpoint (for its peer to remove if this process
    /// dies first).
    pub fn sysv_queues(&self) -> Option<(i32, i32)> {
        match self.inner {
            Inner::Sysv { tx, rx } => Some((tx, rx)),
            _ => None,
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        match self.inner {
            // SAFETY: closing descriptors this endpoint owns (each end opened its own copy
            // across fork).
            Inner::Mq { tx, rx } => unsafe {
                libc::mq_close(tx);
                libc::mq_close(rx);
            },
            // SAFETY: IPC_RMID on queues we created; only the creating (parent) end removes.
            Inner::Sysv { tx, rx } if self.owner => unsafe {
                libc::msgctl(tx, libc::IPC_RMID, std::ptr::null_mut());
                libc::msgctl(rx, libc::IPC_RMID, std::ptr::null_mut());
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_carries_messages_both_ways_in_one_process() {
        for kind in Kind::ALL {
            let (mut a, mut b) = pair(kind, 64).unwrap();
            let mut buf = [0u8; 64];
            a.send(&[7u8; 64]).unwrap();
            assert_eq!(b.recv(&mut buf).unwrap(), 64, "{}", kind.name());
            assert_eq!(buf, [7u8; 64]);
            b.send(&[9u8; 64]).unwrap();
            assert_eq!(a.recv(&mut buf).unwrap(), 64);
            assert_eq!(buf, [9u8; 64], "{}", kind.name());
        }
    }
}
