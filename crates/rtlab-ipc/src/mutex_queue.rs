//! Seed 003's design, kept for the comparison: a queue of fixed-size slots in shared memory,
//! guarded by a robust PI mutex, with a semaphore counting filled slots and one counting free
//! ones. Every message costs a lock, an unlock and two semaphore operations.
//!
//! Shared layout (`#[repr(C)]`, positions, never pointers): the mutex (cache-line aligned),
//! the two semaphores, `head`/`tail` slot counters (changed only under the mutex), then
//! `slots x slot_size` bytes; a slot is a `u32` length and the payload.

use crate::IpcError;
use rtlab_sync::{RobustError, RobustMutex, Semaphore};
use rtlab_sys::mem::AnonMapping;

#[repr(C)]
struct Header {
    mutex: RobustMutex,
    items: Semaphore,
    spaces: Semaphore,
    head: u64,
    tail: u64,
    slots: u64,
    slot_size: u64,
}

const HEADER_LEN: usize = std::mem::size_of::<Header>().next_multiple_of(64);

/// A mutex + semaphore queue in an anonymous shared mapping (share it by `fork`).
#[derive(Debug)]
pub struct MutexSemQueue {
    map: AnonMapping,
    slots: u64,
    slot_size: u64,
}

impl MutexSemQueue {
    /// `slots` slots of `max_message` bytes.
    pub fn create(slots: usize, max_message: usize) -> Result<Self, IpcError> {
        let slot_size = (max_message as u64 + 8).next_multiple_of(8);
        let map = AnonMapping::new_shared(HEADER_LEN + slots * slot_size as usize)
            .map_err(|e| IpcError::Create(e.to_string()))?;
        let header = Header {
            mutex: RobustMutex::new_shared(),
            items: Semaphore::new_shared(0),
            spaces: Semaphore::new_shared(slots as u32),
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
        })
    }

    fn header(&self) -> *mut Header {
        self.map.as_ptr() as *mut Header
    }

    fn lock(&self) -> Result<rtlab_sync::RobustGuard<'_>, IpcError> {
        // SAFETY: the header lives as long as the mapping; the mutex is only used through &.
        let mutex = unsafe { &(*self.header()).mutex };
        match mutex.lock() {
            Ok(g) => Ok(g),
            // The counters are only written together under the lock, so a dead holder
            // cannot have left them half-updated: carry on.
            Err(RobustError::OwnerDied(g)) => {
                g.make_consistent();
                Ok(g)
            }
            Err(e) => Err(IpcError::Corrupt(e.to_string())),
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
        // SAFETY: see `lock`: shared parts are used through & only.
        let h = unsafe { &*self.header() };
        if !h.spaces.wait_until(deadline_ns) {
            return Err(IpcError::TimedOut);
        }
        {
            let _g = self.lock()?;
            // SAFETY: under the mutex this process alone touches head and the slot at head;
            // the slot lies inside the mapping (index reduced modulo slots).
            unsafe {
                let head = std::ptr::read_volatile(&raw const (*self.header()).head);
                let slot = self.slot(head);
                (slot as *mut u32).write_volatile(msg.len() as u32);
                std::ptr::copy_nonoverlapping(msg.as_ptr(), slot.add(8), msg.len());
                std::ptr::write_volatile(&raw mut (*self.header()).head, head + 1);
            }
        }
        h.items.post();
        Ok(())
    }

    /// Receives into `buf` (blocking until a message or `deadline_ns`); returns its length.
    pub fn recv(&self, buf: &mut [u8], deadline_ns: Option<u64>) -> Result<usize, IpcError> {
        // SAFETY: see `lock`.
        let h = unsafe { &*self.header() };
        if !h.items.wait_until(deadline_ns) {
            return Err(IpcError::TimedOut);
        }
        let len = {
            let _g = self.lock()?;
            // SAFETY: under the mutex; the slot is inside the mapping; the length read from
            // shared memory is checked before it is used.
            unsafe {
                let tail = std::ptr::read_volatile(&raw const (*self.header()).tail);
                let slot = self.slot(tail);
                let len = (slot as *const u32).read_volatile() as usize;
                if len as u64 > self.slot_size - 8 || len > buf.len() {
                    return Err(IpcError::Corrupt(format!("slot length {len}")));
                }
                std::ptr::copy_nonoverlapping(slot.add(8), buf.as_mut_ptr(), len);
                std::ptr::write_volatile(&raw mut (*self.header()).tail, tail + 1);
                len
            }
        };
        h.spaces.post();
        Ok(len)
    }
}
