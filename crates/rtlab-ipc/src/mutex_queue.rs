//! Seed 003's two designs, kept for the comparison: a queue of fixed-size slots in shared
//! memory guarded by a robust PI mutex, signalled either by two semaphores (filled slots,
//! free slots) or by two PI condition variables (not empty, not full) that hand the mutex to
//! the woken waiter by requeue-PI. Every message costs a lock, an unlock and two semaphore
//! operations, or a lock, an unlock and a notify (plus a wait when the queue is empty/full).
//!
//! Shared layout (`#[repr(C)]`, counters, never pointers): the mutex (cache-line aligned),
//! the two semaphores, the two condvars, `head`/`tail` slot counters (changed only under the
//! mutex), then `slots x slot_size` bytes; a slot is a `u32` length and the payload.

use crate::IpcError;
use rtlab_sync::{PiCondvar, RobustGuard, RobustMutex, RobustWait, Semaphore};
use rtlab_sys::mem::AnonMapping;

/// How waiting for a free or filled slot works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signalling {
    /// A semaphore counts filled slots, another free ones (seed 003's final design).
    Semaphores,
    /// PI condition variables "not empty" and "not full" under the robust mutex.
    Condvars,
}

#[repr(C)]
struct Header {
    mutex: RobustMutex,
    items: Semaphore,
    spaces: Semaphore,
    not_empty: PiCondvar,
    not_full: PiCondvar,
    head: u64,
    tail: u64,
    slots: u64,
    slot_size: u64,
}

const HEADER_LEN: usize = std::mem::size_of::<Header>().next_multiple_of(64);

/// A mutex-guarded slot queue in an anonymous shared mapping (share it by `fork`).
#[derive(Debug)]
pub struct MutexSemQueue {
    map: AnonMapping,
    slots: u64,
    slot_size: u64,
    signalling: Signalling,
}

impl MutexSemQueue {
    /// `slots` slots of `max_message` bytes, signalled by semaphores.
    pub fn create(slots: usize, max_message: usize) -> Result<Self, IpcError> {
        Self::with_signalling(slots, max_message, Signalling::Semaphores)
    }

    /// `slots` slots of `max_message` bytes, signalled as `signalling` says.
    pub fn with_signalling(
        slots: usize,
        max_message: usize,
        signalling: Signalling,
    ) -> Result<Self, IpcError> {
        let slot_size = (max_message as u64 + 8).next_multiple_of(8);
        let map = AnonMapping::new_shared(HEADER_LEN + slots * slot_size as usize)
            .map_err(|e| IpcError::Create(e.to_string()))?;
        let header = Header {
            mutex: RobustMutex::new_shared(),
            items: Semaphore::new_shared(0),
            spaces: Semaphore::new_shared(slots as u32),
            not_empty: PiCondvar::new_shared(),
            not_full: PiCondvar::new_shared(),
            head: 0,
            tail: 0,
            slots: slots as u64,
            slot_size,
        };
        // SAFETY: fresh page-aligned mapping of at least HEADER_LEN bytes, not yet shared.
        unsafe { (map.as_ptr() as *mut Header).write(header) };
        Ok(MutexSemQueue {
            map,
            slots: slots as u64,
            slot_size,
            signalling,
        })
    }

    fn header(&self) -> *mut Header {
        self.map.as_ptr() as *mut Header
    }

    fn shared(&self) -> &Header {
        // SAFETY: the header lives as long as the mapping; its synchronisation objects are
        // only used through &, the counters only through raw volatile accesses under the mutex.
        unsafe { &*self.header() }
    }

    fn lock(&self, deadline_ns: Option<u64>) -> Result<RobustGuard<'_>, IpcError> {
        // The counters are only written together under the lock, so a dead holder cannot
        // have left them half-updated.
        // SAFETY: the mutex lives in the mapping, which outlives every guard (they borrow
        // `self`) and never moves.
        let mutex = unsafe { std::pin::Pin::new_unchecked(&self.shared().mutex) };
        crate::lock_robust(mutex, deadline_ns)
    }

    fn counters(&self) -> Result<(u64, u64), IpcError> {
        // SAFETY: called under the mutex; the fields lie inside the mapping.
        let (head, tail) = unsafe {
            (
                std::ptr::read_volatile(&raw const (*self.header()).head),
                std::ptr::read_volatile(&raw const (*self.header()).tail),
            )
        };
        if tail > head || head - tail > self.slots {
            return Err(IpcError::Corrupt(format!(
                "counters head {head} tail {tail}"
            )));
        }
        Ok((head, tail))
    }

    /// Waits on `cv` under `guard` until `ready(head, tail)`.
    fn wait_for(
        &self,
        guard: &mut RobustGuard<'_>,
        cv: &PiCondvar,
        deadline_ns: Option<u64>,
        ready: impl Fn(u64, u64) -> bool,
    ) -> Result<(), IpcError> {
        loop {
            let (head, tail) = self.counters()?;
            if ready(head, tail) {
                return Ok(());
            }
            match guard.wait(cv, deadline_ns) {
                RobustWait::Notified => {}
                RobustWait::TimedOut => return Err(IpcError::TimedOut),
                RobustWait::OwnerDied => guard.make_consistent(),
                RobustWait::NotRecoverable => {
                    return Err(IpcError::Corrupt("mutex not recoverable".into()))
                }
            }
        }
    }

    fn slot(&self, index: u64) -> *mut u8 {
        self.map
            .as_ptr()
            .wrapping_add(HEADER_LEN + ((index % self.slots) * self.slot_size) as usize)
    }

    /// Sends `msg` (blocking until a slot is free or `deadline_ns`).
    pub fn send(&self, msg: &[u8], deadline_ns: Option<u64>) -> Result<(), IpcError> {
        if msg.len() as u64 > self.slot_size - 8 {
            return Err(IpcError::TooLarge {
                len: msg.len(),
                max: (self.slot_size - 8) as usize,
            });
        }
        let h = self.shared();
        if self.signalling == Signalling::Semaphores && !h.spaces.wait_until(deadline_ns) {
            return Err(IpcError::TimedOut);
        }
        {
            let mut g = self.lock(deadline_ns)?;
            if self.signalling == Signalling::Condvars {
                let slots = self.slots;
                self.wait_for(&mut g, &h.not_full, deadline_ns, |hd, tl| hd - tl < slots)?;
            }
            let (head, _) = self.counters()?;
            // SAFETY: under the mutex this process alone touches head and the slot at head;
            // the slot lies inside the mapping (index reduced modulo slots).
            unsafe {
                let slot = self.slot(head);
                (slot as *mut u32).write_volatile(msg.len() as u32);
                std::ptr::copy_nonoverlapping(msg.as_ptr(), slot.add(8), msg.len());
                std::ptr::write_volatile(&raw mut (*self.header()).head, head + 1);
            }
            if self.signalling == Signalling::Condvars {
                h.not_empty.notify_one_robust(&h.mutex);
            }
        }
        if self.signalling == Signalling::Semaphores {
            h.items.post();
        }
        Ok(())
    }

    /// Receives into `buf` (blocking until a message or `deadline_ns`); returns its length.
    pub fn recv(&self, buf: &mut [u8], deadline_ns: Option<u64>) -> Result<usize, IpcError> {
        let h = self.shared();
        if self.signalling == Signalling::Semaphores && !h.items.wait_until(deadline_ns) {
            return Err(IpcError::TimedOut);
        }
        let len = {
            let mut g = self.lock(deadline_ns)?;
            if self.signalling == Signalling::Condvars {
                self.wait_for(&mut g, &h.not_empty, deadline_ns, |hd, tl| hd > tl)?;
            }
            let (_, tail) = self.counters()?;
            // SAFETY: under the mutex; the slot is inside the mapping; the length read from
            // shared memory is checked before it is used.
            let len = unsafe {
                let slot = self.slot(tail);
                let len = (slot as *const u32).read_volatile() as usize;
                if len as u64 > self.slot_size - 8 || len > buf.len() {
                    return Err(IpcError::Corrupt(format!("slot length {len}")));
                }
                std::ptr::copy_nonoverlapping(slot.add(8), buf.as_mut_ptr(), len);
                std::ptr::write_volatile(&raw mut (*self.header()).tail, tail + 1);
                len
            };
            if self.signalling == Signalling::Condvars {
                h.not_full.notify_one_robust(&h.mutex);
            }
            len
        };
        if self.signalling == Signalling::Semaphores {
            h.spaces.post();
        }
        Ok(len)
    }
}
