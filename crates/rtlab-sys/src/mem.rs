//! Memory locking and stack prefaulting, so a measuring thread never takes a page fault.

use crate::SysError;
use rustix::mm::{mlockall, munlockall, MlockAllFlags};

/// Locks all current and future mappings of the process into RAM.
///
/// C: `mlockall(MCL_CURRENT | MCL_FUTURE)`. Needs `CAP_IPC_LOCK` or a large enough
/// `RLIMIT_MEMLOCK`. With `MCL_FUTURE` every later mapping (thread stacks, `mmap` by a load
/// generator, `malloc` arenas) is populated and locked when it is created.
pub fn lock_all_memory() -> Result<(), SysError> {
    mlockall(MlockAllFlags::CURRENT | MlockAllFlags::FUTURE)
        .map_err(|e| SysError::from_errno("mlockall(MCL_CURRENT|MCL_FUTURE)", e))
}

/// Undoes [`lock_all_memory`]. C: `munlockall()`.
pub fn unlock_all_memory() -> Result<(), SysError> {
    munlockall().map_err(|e| SysError::from_errno("munlockall()", e))
}

/// Touches `bytes` of the calling thread's stack so those pages are resident before the
/// measurement starts (cyclictest does the same).
#[inline(never)]
pub fn prefault_stack(bytes: usize) {
    fn touch(remaining: usize) {
        const CHUNK: usize = 4096;
        let mut page = [0u8; CHUNK];
        std::hint::black_box(&mut page);
        if remaining > CHUNK {
            touch(remaining - CHUNK);
        }
        std::hint::black_box(&page);
    }
    touch(bytes);
}

/// A read-write memory mapping owned by this value (anonymous, or of a shared file), unmapped
/// on drop.
#[derive(Debug)]
pub struct AnonMapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned exclusively by this value; moving it to another thread moves
// that ownership. No aliasing pointer is handed out except through &mut self.
unsafe impl Send for AnonMapping {}
// SAFETY: through `&self` only the address, the length and an atomic view are reachable;
// every mutating access needs `&mut self`.
unsafe impl Sync for AnonMapping {}

impl AnonMapping {
    /// C: `mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0)`.
    pub fn new(len: usize) -> Result<Self, SysError> {
        Self::map(len, rustix::mm::MapFlags::PRIVATE)
    }

    /// C: `mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_SHARED|MAP_ANONYMOUS, -1, 0)`: zeroed
    /// memory that a `fork()`ed child shares with its parent (for process-shared futexes).
    pub fn new_shared(len: usize) -> Result<Self, SysError> {
        Self::map(len, rustix::mm::MapFlags::SHARED)
    }

    /// C: `mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_SHARED, fd, 0)`: a file (say, a POSIX
    /// shared-memory object under /dev/shm) mapped so every process mapping it shares it.
    pub fn shared_file(fd: std::os::fd::BorrowedFd<'_>, len: usize) -> Result<Self, SysError> {
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        if len == 0 {
            return Err(SysError::Invalid {
                what: "mmap(len 0)".into(),
            });
        }
        // SAFETY: a fresh mapping at an address the kernel picks aliases no Rust object; other
        // processes may write it, which callers handle through atomics and validation.
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| SysError::from_errno(format!("mmap(file, {len} bytes)"), e))?;
        Self::wrap(ptr, len)
    }

    fn wrap(ptr: *mut std::ffi::c_void, len: usize) -> Result<Self, SysError> {
        let ptr = std::ptr::NonNull::new(ptr.cast::<u8>()).ok_or_else(|| SysError::Invalid {
            what: "mmap returned NULL".into(),
        })?;
        Ok(AnonMapping { ptr, len })
    }

    fn map(len: usize, flags: rustix::mm::MapFlags) -> Result<Self, SysError> {
        use rustix::mm::{mmap_anonymous, ProtFlags};
        if len == 0 {
            return Err(SysError::Invalid {
                what: "mmap(len 0)".into(),
            });
        }
        // SAFETY: a fresh anonymous mapping at an address the kernel picks aliases nothing.
        let ptr = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                flags,
            )
        }
        .map_err(|e| SysError::from_errno(format!("mmap({len} bytes)"), e))?;
        Self::wrap(ptr, len)
    }

    /// Writes one byte per 4 KiB page so every page is faulted in. Returns pages touched.
    pub fn touch_pages(&mut self) -> usize {
        const PAGE: usize = 4096;
        let mut pages = 0;
        let mut offset = 0;
        while offset < self.len {
            // SAFETY: offset < len, inside the mapping we own; volatile so it is not elided.
            unsafe { self.ptr.as_ptr().add(offset).write_volatile(1) };
            offset += PAGE;
            pages += 1;
        }
        pages
    }

    /// C: `mlock(addr, len)`. Needs `CAP_IPC_LOCK` or enough `RLIMIT_MEMLOCK`.
    pub fn lock(&mut self) -> Result<(), SysError> {
        // SAFETY: the range is exactly our own live mapping.
        unsafe { rustix::mm::mlock(self.ptr.as_ptr().cast(), self.len) }
            .map_err(|e| SysError::from_errno(format!("mlock({} bytes)", self.len), e))
    }

    /// Start of the mapping (page aligned, zero-filled when new).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The first 4 bytes as an atomic word (a futex in shared memory, say).
    pub fn as_atomic_u32(&self) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: the mapping is page aligned (so aligned for u32), at least one page long,
        // readable and writable, and lives as long as the returned borrow of `self`.
        unsafe { &*(self.ptr.as_ptr() as *const std::sync::atomic::AtomicU32) }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a zero-length mapping cannot be made).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for AnonMapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping made by `new` and not yet unmapped; nothing
        // borrows it any more because we are being dropped.
        let result = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
        debug_assert!(result.is_ok(), "munmap failed: {result:?}");
    }
}

/// A value in a `MAP_SHARED | MAP_ANONYMOUS` mapping of its own: a child `fork()`ed later
/// sees the same memory (locks and counters shared between processes). It never moves, so
/// [`SharedValue::pin`] may hand out a pinned reference.
pub struct SharedValue<T> {
    map: AnonMapping,
    _value: std::marker::PhantomData<T>,
}

// SAFETY: it owns its T like a Box does.
unsafe impl<T: Send> Send for SharedValue<T> {}
// SAFETY: through `&self` only `&T` is reachable.
unsafe impl<T: Sync> Sync for SharedValue<T> {}

impl<T> std::fmt::Debug for SharedValue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedValue")
            .field("at", &self.map.as_ptr())
            .finish_non_exhaustive()
    }
}

impl<T> SharedValue<T> {
    /// Maps enough pages and moves `value` there.
    pub fn new(value: T) -> Result<Self, SysError> {
        if std::mem::align_of::<T>() > 4096 {
            return Err(SysError::Invalid {
                what: "SharedValue: alignment over a page".into(),
            });
        }
        let map = AnonMapping::new_shared(std::mem::size_of::<T>().max(1))?;
        // SAFETY: the mapping is page aligned (enough for T, checked above), at least
        // size_of::<T>() long, writable, and holds no value yet.
        unsafe { map.as_ptr().cast::<T>().write(value) };
        Ok(SharedValue {
            map,
            _value: std::marker::PhantomData,
        })
    }

    /// The value.
    pub fn get(&self) -> &T {
        // SAFETY: initialised in `new`, dropped only in `drop`; lives as long as `self`.
        unsafe { &*self.map.as_ptr().cast::<T>() }
    }

    /// The value, pinned: it stays at its address until dropped.
    pub fn pin(&self) -> std::pin::Pin<&T> {
        // SAFETY: the mapping never moves while `self` lives and T is dropped in place.
        unsafe { std::pin::Pin::new_unchecked(self.get()) }
    }
}

impl<T> Drop for SharedValue<T> {
    fn drop(&mut self) {
        // SAFETY: the value was written in `new` and is dropped once, here, before the
        // mapping (a field) is unmapped.
        unsafe { std::ptr::drop_in_place(self.map.as_ptr().cast::<T>()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_value_is_seen_by_a_forked_child_and_dropped_once() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let v = SharedValue::new([AtomicU32::new(1), AtomicU32::new(2)]).unwrap();
        // SAFETY: the child only stores to an atomic in memory mapped before the fork.
        let status = unsafe {
            crate::process::fork_run(|| {
                v.get()[1].store(7, Ordering::SeqCst);
                0
            })
        }
        .unwrap();
        assert_eq!(status, 0);
        assert_eq!(
            v.get()[1].load(Ordering::SeqCst),
            7,
            "the child wrote shared memory"
        );
        let counted = std::sync::Arc::new(());
        let held = SharedValue::new(counted.clone()).unwrap();
        assert_eq!(std::sync::Arc::strong_count(&counted), 2);
        drop(held);
        assert_eq!(std::sync::Arc::strong_count(&counted), 1);
    }

    #[test]
    fn mapping_is_touched_and_unmapped() {
        let mut m = AnonMapping::new(1 << 20).unwrap();
        assert_eq!(m.touch_pages(), 256);
        assert_eq!(m.len(), 1 << 20);
        assert!(AnonMapping::new(0).is_err());
    }
}
