//! The two ends of a channel: [`Sender`] and [`Receiver`], the protocol of the module docs.

use super::*;

/// The producing end.
#[derive(Debug)]
pub struct Sender<'a> {
    ch: &'a ShmChannel,
    busy_poll: bool,
    /// `tail` as last read: a lower bound (it only grows), re-read only when it says full.
    tail_seen: AtomicU64,
    /// spsc: this end already looked past `head` for records a dead producer published.
    head_checked: AtomicBool,
}

impl<'a> Sender<'a> {
    pub(super) fn new(ch: &'a ShmChannel) -> Self {
        Sender {
            ch,
            busy_poll: false,
            tail_seen: AtomicU64::new(0),
            head_checked: AtomicBool::new(false),
        }
    }

    /// Spin instead of sleeping while the ring is full (burns a CPU; lowest latency).
    pub fn busy_poll(mut self, on: bool) -> Self {
        self.busy_poll = on;
        self
    }

    /// Sends `msg`, waiting for space until `deadline_ns` (absolute `CLOCK_MONOTONIC`; `None`
    /// waits as long as the consumer lives).
    pub fn send(&self, msg: &[u8], deadline_ns: Option<u64>) -> Result<(), IpcError> {
        let ch = self.ch;
        let max = ch.max_message();
        if msg.len() > max {
            return Err(IpcError::TooLarge {
                len: msg.len(),
                max,
            });
        }
        let _producers = match ch.variant {
            Variant::Mpsc => Some(ch.lock_producers(deadline_ns)?),
            Variant::Spsc => None,
        };
        self.send_locked(msg, deadline_ns)
    }

    /// Sends `msg` if there is room now; `Ok(false)` when the ring is full.
    pub fn try_send(&self, msg: &[u8]) -> Result<bool, IpcError> {
        match self.send(msg, Some(0)) {
            Ok(()) => Ok(true),
            Err(IpcError::TimedOut) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn send_locked(&self, msg: &[u8], deadline_ns: Option<u64>) -> Result<(), IpcError> {
        let ch = self.ch;
        let h = ch.header();
        let need = record_len(msg.len() as u64);
        loop {
            ch.check_header()?;
            let head = self.head()?;
            let offset = head % ch.capacity;
            let contiguous = ch.capacity - offset;
            let wrap = contiguous < need;
            let end = head + if wrap { contiguous + need } else { need };
            // Room for the record and the stamp slot past it (zeroed below, so it must be free).
            let fits = |tail: u64| end + STAMP_LEN <= tail + ch.capacity;
            let mut tail = self.tail_seen.load(Ordering::Relaxed);
            if !fits(tail) {
                // Acquire: the consumer is done with the bytes before `tail`.
                tail = h.tail.load(Ordering::Acquire);
                if tail > head || head - tail > ch.capacity || !tail.is_multiple_of(RECORD_ALIGN) {
                    return Err(IpcError::Corrupt(format!(
                        "positions head {head} tail {tail}"
                    )));
                }
                self.tail_seen.store(tail, Ordering::Relaxed);
            }
            if fits(tail) {
                let pos = if wrap { head + contiguous } else { head };
                let at = pos % ch.capacity;
                ch.stamp(end % ch.capacity).store(0, Ordering::Relaxed);
                // The stores to the stamp's cache line go last and together: the consumer polls
                // that line, and a store to it with other lines written in between would take
                // the line back from the consumer once more. The ring starts 64-aligned.
                let data = at + RECORD_HEADER;
                let first = (msg.len() as u64).min((at | 63) + 1 - data) as usize;
                // SAFETY: `at` is 16-aligned and `at + need <= capacity` (the record fits before
                // the end), so length and payload are inside the ring; the consumer does not
                // read them before the stamp says they are complete.
                unsafe {
                    let to = ch.ring().add(data as usize);
                    std::ptr::copy_nonoverlapping(
                        msg.as_ptr().add(first),
                        to.add(first),
                        msg.len() - first,
                    );
                    std::ptr::copy_nonoverlapping(msg.as_ptr(), to, first);
                    ch.length(at).write_volatile(msg.len() as u32);
                }
                // Release: the record's bytes (and the zeroed slot past it) before its stamp.
                ch.stamp(at).store(pos + 1, Ordering::Release);
                if wrap {
                    // SAFETY: `offset` is 16-aligned and below the capacity.
                    unsafe { ch.length(offset).write_volatile(WRAP) };
                    // Release: the record at 0 is complete before the marker that leads there.
                    ch.stamp(offset).store(head + 1, Ordering::Release);
                }
                h.head.store(end, Ordering::Release);
                fence(Ordering::SeqCst);
                ch.wake_sleeper(&h.consumer_waiting);
                return Ok(());
            }
            // Full: spin a little, then sleep (or keep spinning) until the tail moves.
            let moved = || h.tail.load(Ordering::Acquire) != tail;
            if spin_before_waiting(moved, deadline_ns) {
                continue;
            }
            ch.wait(
                &h.producer_waiting,
                &moved,
                deadline_ns,
                self.busy_poll,
                ch.barrier,
                &ShmChannel::consumer_dead,
            )?;
        }
    }

    /// Where the next record goes: `head`, past any record a producer published and then
    /// died before it advanced `head` (at most a wrap marker and the record it leads to).
    /// An spsc end looks only on its first send: from then on it alone writes `head`. Not
    /// reading the stamp at `head` matters: the consumer is polling that cache line, and the
    /// read would fetch it back before the record's first store (a whole transfer between
    /// CPUs on every message; bench/RESULTS.md, "the sender read the line the receiver
    /// polls").
    fn head(&self) -> Result<u64, IpcError> {
        let ch = self.ch;
        let h = ch.header();
        // Only the (locked) producer writes head: Relaxed reads the last value written
        // (by this side, or by the previous lock holder before its Release unlock).
        let mut head = h.head.load(Ordering::Relaxed);
        let spsc = ch.variant == Variant::Spsc;
        if spsc && self.head_checked.load(Ordering::Relaxed) {
            if !head.is_multiple_of(RECORD_ALIGN) {
                return Err(IpcError::Corrupt(format!("unaligned head {head}")));
            }
            return Ok(head);
        }
        for _ in 0..3 {
            // Before anything is read or written at `head`: a peer may have scribbled it.
            if !head.is_multiple_of(RECORD_ALIGN) {
                return Err(IpcError::Corrupt(format!("unaligned head {head}")));
            }
            let offset = head % ch.capacity;
            if ch.stamp(offset).load(Ordering::Acquire) != head + 1 {
                self.head_checked.store(spsc, Ordering::Relaxed);
                return Ok(head);
            }
            // SAFETY: `offset` is 16-aligned and below the capacity.
            let len = unsafe { ch.length(offset).read_volatile() };
            head = if len == WRAP {
                head + (ch.capacity - offset)
            } else if len as usize <= ch.max_message()
                && offset + record_len(len as u64) <= ch.capacity
            {
                head + record_len(len as u64)
            } else {
                break;
            };
            h.head.store(head, Ordering::Release);
        }
        Err(IpcError::Corrupt(format!(
            "published records past head {head}"
        )))
    }
}

/// The consuming end.
#[derive(Debug)]
pub struct Receiver<'a> {
    ch: &'a ShmChannel,
    busy_poll: bool,
    /// The length of the last message received (decides [`ShmChannel::pull_next_line`]).
    last_len: AtomicU32,
}

/// Pull in the line after the stamp's while polling when the last message was at most this
/// long (its record took two cache lines or so).
const PULL_AFTER_MAX: u32 = 128;

impl<'a> Receiver<'a> {
    pub(super) fn new(ch: &'a ShmChannel) -> Self {
        Receiver {
            ch,
            busy_poll: false,
            last_len: AtomicU32::new(0),
        }
    }

    /// Spin instead of sleeping while the ring is empty (burns a CPU; lowest latency).
    pub fn busy_poll(mut self, on: bool) -> Self {
        self.busy_poll = on;
        self
    }

    /// Receives a message now if one is there: `Ok(None)` when the ring is empty.
    pub fn try_recv(&self, buf: &mut [u8]) -> Result<Option<usize>, IpcError> {
        match self.recv(buf, Some(0)) {
            Ok(n) => Ok(Some(n)),
            Err(IpcError::TimedOut) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Receives one message into `buf`, waiting until `deadline_ns` (absolute
    /// `CLOCK_MONOTONIC`; `None` waits as long as a producer lives). Returns its length.
    pub fn recv(&self, buf: &mut [u8], deadline_ns: Option<u64>) -> Result<usize, IpcError> {
        let ch = self.ch;
        let h = ch.header();
        loop {
            ch.check_header()?;
            let tail = h.tail.load(Ordering::Relaxed);
            if !tail.is_multiple_of(RECORD_ALIGN) {
                return Err(IpcError::Corrupt(format!("unaligned tail {tail}")));
            }
            let offset = tail % ch.capacity;
            let slot = ch.stamp(offset);
            // Acquire: pairs with the producer's Release of the stamp (the record's bytes).
            let stamp = slot.load(Ordering::Acquire);
            if stamp == 0 {
                // After a short message, expect another: pull in the line after the stamp's
                // (not after a long one: read while the producer copies into it, it would be
                // taken from the producer mid-copy and lengthen the round trip; bench/RESULTS.md,
                // "The receiver pulls in the record's second line").
                let short = self.last_len.load(Ordering::Relaxed) <= PULL_AFTER_MAX;
                let arrived = || {
                    if short {
                        ch.pull_next_line(offset);
                    }
                    slot.load(Ordering::Acquire) != 0
                };
                if spin_before_waiting(arrived, deadline_ns) {
                    continue;
                }
                ch.wait(
                    &h.consumer_waiting,
                    &arrived,
                    deadline_ns,
                    self.busy_poll,
                    false,
                    &ShmChannel::producers_dead,
                )?;
                continue;
            }
            if stamp != tail + 1 {
                return Err(IpcError::Corrupt(format!("stamp {stamp} at {tail}")));
            }
            // SAFETY: offset is 16-aligned and below the capacity.
            let len = unsafe { ch.length(offset).read_volatile() };
            if len == WRAP {
                h.tail
                    .store(tail + (ch.capacity - offset), Ordering::Release);
                continue;
            }
            let need = record_len(len as u64);
            if len as usize > ch.max_message() || offset + need > ch.capacity {
                return Err(IpcError::Corrupt(format!("record length {len} at {tail}")));
            }
            if buf.len() < len as usize {
                return Err(IpcError::BufferTooSmall {
                    have: buf.len(),
                    need: len as usize,
                });
            }
            // SAFETY: the record lies inside the ring (checked above) and is complete: the
            // producer stamped it after writing it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    ch.ring().add((offset + RECORD_HEADER) as usize),
                    buf.as_mut_ptr(),
                    len as usize,
                )
            };
            // Release: we are done with these bytes before the producer may reuse them.
            h.tail.store(tail + need, Ordering::Release);
            self.last_len.store(len, Ordering::Relaxed);
            if ch.barrier {
                // A producer about to sleep on a full ring makes this CPU fence (membarrier).
                compiler_fence(Ordering::SeqCst);
            } else {
                fence(Ordering::SeqCst);
            }
            ch.wake_sleeper(&h.producer_waiting);
            return Ok(len as usize);
        }
    }
}
