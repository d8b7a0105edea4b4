//! The single-producer single-consumer ring.
//!
//! Shared layout (`#[repr(C)]`, positions are byte counts, never pointers):
//!
//! | field               | written by | meaning                                                |
//! |---------------------|------------|--------------------------------------------------------|
//! | `magic`, `capacity`, `max_message` | creator | format tag, ring bytes (power of two), largest payload |
//! | `head`              | producer   | bytes published so far (monotonic)                     |
//! | `tail`              | consumer   | bytes consumed so far (monotonic)                      |
//! | `consumer_waiting`  | both       | futex word: 1 = the consumer sleeps (or is about to) on an empty ring |
//! | `producer_waiting`  | both       | futex word: 1 = the producer sleeps on a full ring      |
//! | `producer_pid`, `consumer_pid` | each end | who to check for liveness                  |
//!
//! A record at position `p` (ring offset `p % capacity`, always 8-aligned) is a `u32` payload
//! length, 4 bytes of padding, the payload, padded to 8 bytes. A record never wraps: when it
//! does not fit before the end, the producer writes the `WRAP` marker and continues at 0.
//! `head` is stored (Release) only after the record is complete, so a producer killed while
//! writing never publishes a torn message. A side that must wait first spins for at most
//! 20 us (a peer on another CPU usually answers sooner than a futex sleep and wake take). Sleep/wake: each side stores its waiting flag, then
//! a SeqCst fence, then re-reads the other side's position before sleeping; the other side
//! publishes its position, fences, then reads the flag: one of them always sees the other.

use rtlab_sys::futex::{self, Scope, Wait};
use rtlab_sys::mem::AnonMapping;
use rtlab_sys::time::monotonic_now_ns;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"RTLABCH1");
const WRAP: u32 = u32::MAX;
const RECORD_HEADER: u64 = 8;
/// How long a side that finds the ring empty (or full) spins before it sleeps: a peer on
/// another CPU usually answers within this, and a futex sleep plus wake costs ~5 us each way.
/// Bounded, so a silent peer costs at most this much CPU before the thread blocks.
const SPIN_NS: u64 = 20_000;

/// Spins until `ready()` or `SPIN_NS` passed; true if ready. Between short bursts it yields
/// the CPU: a peer on the same CPU (at the same priority) then runs at once instead of
/// waiting for the spin to end; a peer on another CPU usually answers within the first burst.
#[inline]
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let until = monotonic_now_ns() + SPIN_NS;
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if monotonic_now_ns() >= until {
            return ready();
        }
        std::thread::yield_now();
    }
}

/// Longest a blocked side sleeps before it checks whether its peer is still alive.
const LIVENESS_SLICE_NS: u64 = 10_000_000;

/// Why a channel operation did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IpcError {
    /// The deadline passed.
    #[error("timed out")]
    TimedOut,
    /// The process at the other end has exited.
    #[error("the peer process died")]
    PeerDied,
    /// The shared memory holds something this side did not write and cannot trust.
    #[error("corrupt channel: {0}")]
    Corrupt(String),
    /// The message is larger than the channel's maximum.
    #[error("message of {len} bytes exceeds the channel maximum of {max}")]
    TooLarge {
        /// Offered length.
        len: usize,
        /// Channel maximum.
        max: usize,
    },
    /// The receive buffer is smaller than the message (which stays in the channel).
    #[error("receive buffer of {have} bytes is smaller than the {need}-byte message")]
    BufferTooSmall {
        /// Buffer length.
        have: usize,
        /// Message length.
        need: usize,
    },
    /// Creating the shared memory failed.
    #[error("cannot create the channel: {0}")]
    Create(String),
}

#[repr(C)]
struct Header {
    magic: u64,
    capacity: u64,
    max_message: u64,
    _pad0: [u64; 5],
    head: AtomicU64,
    _pad1: [u64; 7],
    tail: AtomicU64,
    _pad2: [u64; 7],
    consumer_waiting: AtomicU32,
    producer_waiting: AtomicU32,
    producer_pid: AtomicU32,
    consumer_pid: AtomicU32,
    _pad3: [u64; 6],
}

const HEADER_LEN: usize = std::mem::size_of::<Header>();
const _: () = assert!(HEADER_LEN.is_multiple_of(64));

/// A channel in an anonymous shared mapping: create it, then `fork`; one process uses
/// [`ShmChannel::sender`], the other [`ShmChannel::receiver`].
#[derive(Debug)]
pub struct ShmChannel {
    map: AnonMapping,
    capacity: u64,
}

fn round8(n: u64) -> u64 {
    (n + 7) & !7
}

/// True while `pid` exists and is not a zombie (an exited child not yet reaped).
fn alive(pid: u32) -> bool {
    if pid == 0 {
        return true; // not attached yet
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                != Some("Z")
        }
        Err(_) => false,
    }
}

impl ShmChannel {
    /// A channel whose ring holds `capacity` bytes (rounded up to a power of two, at least
    /// 4 KiB) and whose messages carry at most `max_message` bytes (at most a quarter of the
    /// ring, so several fit).
    pub fn create(capacity: usize, max_message: usize) -> Result<Self, IpcError> {
        let capacity = (capacity.max(4096) as u64).next_power_of_two();
        if max_message == 0 || max_message as u64 > capacity / 4 {
            return Err(IpcError::Create(format!(
                "max_message {max_message} must be 1 to a quarter of the {capacity}-byte ring"
            )));
        }
        let map = AnonMapping::new_shared(HEADER_LEN + capacity as usize)
            .map_err(|e| IpcError::Create(e.to_string()))?;
        let header = Header {
            magic: MAGIC,
            capacity,
            max_message: max_message as u64,
            _pad0: [0; 5],
            head: AtomicU64::new(0),
            _pad1: [0; 7],
            tail: AtomicU64::new(0),
            _pad2: [0; 7],
            consumer_waiting: AtomicU32::new(0),
            producer_waiting: AtomicU32::new(0),
            producer_pid: AtomicU32::new(0),
            consumer_pid: AtomicU32::new(0),
            _pad3: [0; 6],
        };
        // SAFETY: the mapping is page aligned, at least HEADER_LEN bytes, and not yet shared.
        unsafe { (map.as_ptr() as *mut Header).write(header) };
        Ok(ShmChannel { map, capacity })
    }

    fn header(&self) -> &Header {
        // SAFETY: written in `create`; the mapping lives as long as `self`; all fields another
        // process may change are atomics.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    fn ring(&self) -> *mut u8 {
        self.map.as_ptr().wrapping_add(HEADER_LEN)
    }

    /// Checks the parts of the header the other side could have scribbled on.
    fn check_header(&self) -> Result<(), IpcError> {
        let h = self.header();
        if h.magic != MAGIC || h.capacity != self.capacity {
            return Err(IpcError::Corrupt("header overwritten".into()));
        }
        Ok(())
    }

    /// The producing end, for this process (records its pid for the consumer's liveness check).
    pub fn sender(&self) -> Sender<'_> {
        self.header()
            .producer_pid
            .store(std::process::id(), Ordering::Relaxed);
        Sender { ch: self }
    }

    /// The consuming end, for this process.
    pub fn receiver(&self) -> Receiver<'_> {
        self.header()
            .consumer_pid
            .store(std::process::id(), Ordering::Relaxed);
        Receiver { ch: self }
    }

    /// The consumer's pid once a receiver was created in some process, else 0.
    pub fn receiver_attached_pid(&self) -> u32 {
        self.header().consumer_pid.load(Ordering::Relaxed)
    }

    /// Largest payload.
    pub fn max_message(&self) -> usize {
        self.header().max_message.min(self.capacity / 4) as usize
    }

    /// Sleeps on `word` while it is 1, until woken, `deadline` or a liveness slice passes.
    /// Returns an error if the peer died or the deadline passed.
    fn wait_on(
        &self,
        word: &AtomicU32,
        deadline: Option<u64>,
        peer: &AtomicU32,
    ) -> Result<(), IpcError> {
        let now = monotonic_now_ns();
        if deadline.is_some_and(|d| now >= d) {
            word.store(0, Ordering::Relaxed);
            return Err(IpcError::TimedOut);
        }
        let until = deadline.map_or(now + LIVENESS_SLICE_NS, |d| d.min(now + LIVENESS_SLICE_NS));
        if futex::wait_until(word, Scope::Shared, 1, Some(until)) == Wait::TimedOut
            && !alive(peer.load(Ordering::Relaxed))
        {
            return Err(IpcError::PeerDied);
        }
        Ok(())
    }
}

/// The producing end.
#[derive(Debug)]
pub struct Sender<'a> {
    ch: &'a ShmChannel,
}

impl Sender<'_> {
    /// Sends `msg`, waiting for space until `deadline_ns` (absolute `CLOCK_MONOTONIC`; `None`
    /// waits as long as the consumer lives).
    pub fn send(&self, msg: &[u8], deadline_ns: Option<u64>) -> Result<(), IpcError> {
        let ch = self.ch;
        let h = ch.header();
        let max = ch.max_message();
        if msg.len() > max {
            return Err(IpcError::TooLarge {
                len: msg.len(),
                max,
            });
        }
        let need = RECORD_HEADER + round8(msg.len() as u64);
        loop {
            ch.check_header()?;
            // Only this side writes head, so Relaxed reads its own last value.
            let head = h.head.load(Ordering::Relaxed);
            // Acquire: the consumer is done with the bytes before `tail`.
            let tail = h.tail.load(Ordering::Acquire);
            if tail > head || head - tail > ch.capacity {
                return Err(IpcError::Corrupt(format!(
                    "positions head {head} tail {tail}"
                )));
            }
            let offset = head % ch.capacity;
            let contiguous = ch.capacity - offset;
            let total = if contiguous < need {
                contiguous + need
            } else {
                need
            };
            if head + total - tail <= ch.capacity {
                let mut pos = head;
                if contiguous < need {
                    // SAFETY: offset is 8-aligned and at least 8 bytes remain before the end.
                    unsafe { (ch.ring().add(offset as usize) as *mut u32).write_volatile(WRAP) };
                    pos += contiguous;
                }
                let at = (pos % ch.capacity) as usize;
                // SAFETY: `at + need <= capacity` (the record fits before the end), so header
                // and payload are inside the ring; the consumer does not read past `head`.
                unsafe {
                    (ch.ring().add(at) as *mut u32).write_volatile(msg.len() as u32);
                    std::ptr::copy_nonoverlapping(
                        msg.as_ptr(),
                        ch.ring().add(at + RECORD_HEADER as usize),
                        msg.len(),
                    );
                }
                // Release: the record's bytes before the new head.
                h.head.store(pos + need, Ordering::Release);
                fence(Ordering::SeqCst);
                if h.consumer_waiting.load(Ordering::Relaxed) == 1 {
                    h.consumer_waiting.store(0, Ordering::Relaxed);
                    futex::wake(&h.consumer_waiting, Scope::Shared, 1);
                }
                return Ok(());
            }
            // Full: spin a little, then announce, re-check, sleep.
            if spin_until(|| h.tail.load(Ordering::Acquire) != tail) {
                continue;
            }
            h.producer_waiting.store(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if h.tail.load(Ordering::Acquire) != tail {
                h.producer_waiting.store(0, Ordering::Relaxed);
                continue;
            }
            let waited = ch.wait_on(&h.producer_waiting, deadline_ns, &h.consumer_pid);
            h.producer_waiting.store(0, Ordering::Relaxed);
            waited?;
        }
    }
}

/// The consuming end.
#[derive(Debug)]
pub struct Receiver<'a> {
    ch: &'a ShmChannel,
}

impl Receiver<'_> {
    /// Receives one message into `buf`, waiting until `deadline_ns` (absolute
    /// `CLOCK_MONOTONIC`; `None` waits as long as the producer lives). Returns its length.
    pub fn recv(&self, buf: &mut [u8], deadline_ns: Option<u64>) -> Result<usize, IpcError> {
        let ch = self.ch;
        let h = ch.header();
        loop {
            ch.check_header()?;
            let tail = h.tail.load(Ordering::Relaxed);
            // Acquire: pairs with the producer's Release of head (the record's bytes).
            let head = h.head.load(Ordering::Acquire);
            if tail > head || head - tail > ch.capacity {
                return Err(IpcError::Corrupt(format!(
                    "positions head {head} tail {tail}"
                )));
            }
            if head == tail {
                if spin_until(|| h.head.load(Ordering::Acquire) != tail) {
                    continue;
                }
                h.consumer_waiting.store(1, Ordering::Relaxed);
                fence(Ordering::SeqCst);
                if h.head.load(Ordering::Acquire) != head {
                    h.consumer_waiting.store(0, Ordering::Relaxed);
                    continue;
                }
                let waited = ch.wait_on(&h.consumer_waiting, deadline_ns, &h.producer_pid);
                // Woken by a slice timeout the flag is still set: clear it, or every send
                // would pay for a wake nobody needs.
                h.consumer_waiting.store(0, Ordering::Relaxed);
                waited?;
                continue;
            }
            let offset = tail % ch.capacity;
            if !offset.is_multiple_of(8) {
                return Err(IpcError::Corrupt(format!("unaligned tail {tail}")));
            }
            // SAFETY: offset < capacity and 8-aligned, so 4 bytes are inside the ring.
            let len = unsafe { (ch.ring().add(offset as usize) as *const u32).read_volatile() };
            if len == WRAP {
                let next = tail + (ch.capacity - offset);
                if next > head {
                    return Err(IpcError::Corrupt("wrap marker past head".into()));
                }
                h.tail.store(next, Ordering::Release);
                continue;
            }
            let need = RECORD_HEADER + round8(len as u64);
            if len as usize > ch.max_message() || offset + need > ch.capacity || tail + need > head
            {
                return Err(IpcError::Corrupt(format!("record length {len} at {tail}")));
            }
            if buf.len() < len as usize {
                return Err(IpcError::BufferTooSmall {
                    have: buf.len(),
                    need: len as usize,
                });
            }
            // SAFETY: the record lies inside the ring (checked above) and before head, which the
            // producer published after writing it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    ch.ring().add((offset + RECORD_HEADER) as usize),
                    buf.as_mut_ptr(),
                    len as usize,
                )
            };
            // Release: we are done with these bytes before the producer may reuse them.
            h.tail.store(tail + need, Ordering::Release);
            fence(Ordering::SeqCst);
            if h.producer_waiting.load(Ordering::Relaxed) == 1 {
                h.producer_waiting.store(0, Ordering::Relaxed);
                futex::wake(&h.producer_waiting, Scope::Shared, 1);
            }
            return Ok(len as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corrupt_field(ch: &ShmChannel, field: impl FnOnce(&Header)) -> IpcError {
        field(ch.header());
        let mut buf = [0u8; 64];
        ch.receiver()
            .recv(&mut buf, Some(monotonic_now_ns() + 50_000_000))
            .unwrap_err()
    }

    #[test]
    fn a_scribbled_head_is_corrupt_not_a_crash() {
        let ch = ShmChannel::create(4096, 64).unwrap();
        let err = corrupt_field(&ch, |h| h.head.store(u64::MAX / 2, Ordering::Relaxed));
        assert!(matches!(err, IpcError::Corrupt(_)), "{err}");
    }

    #[test]
    fn a_scribbled_record_length_is_corrupt_not_an_out_of_bounds_read() {
        let ch = ShmChannel::create(4096, 64).unwrap();
        ch.sender().send(b"hello", None).unwrap();
        // SAFETY: test-only write to the first record's length inside our own mapping.
        unsafe { (ch.ring() as *mut u32).write_volatile(1 << 20) };
        let mut buf = [0u8; 64];
        let err = ch.receiver().recv(&mut buf, None).unwrap_err();
        assert!(matches!(err, IpcError::Corrupt(_)), "{err}");
    }

    #[test]
    fn a_scribbled_magic_is_corrupt() {
        let ch = ShmChannel::create(4096, 64).unwrap();
        // SAFETY: test-only write to our own header.
        unsafe { (ch.map.as_ptr() as *mut u64).write_volatile(0) };
        let err = ch.sender().send(b"x", None).unwrap_err();
        assert!(matches!(err, IpcError::Corrupt(_)), "{err}");
    }
}
