//! The per-thread robust futex list (kernel ABI, Documentation/locking/robust-futex-ABI.rst).
//!
//! The kernel keeps, per thread, one user-space pointer to a `robust_list_head`. At thread
//! exit it walks `list` (each entry's address + `futex_offset` is a futex word) and the
//! `list_op_pending` entry; every word whose TID bits name the dying thread becomes
//! `(word & FUTEX_WAITERS) | FUTEX_OWNER_DIED` and one waiter is woken. Bit 0 of an entry
//! pointer marks a PI futex.
//!
//! glibc registers such a head for every thread it creates (in `struct pthread`, with a
//! `robust_prev` slot right before it). Calling `set_robust_list` again would silently
//! replace glibc's list and break pthread robust mutexes, so rtlab never does that for a
//! thread that already has one: it links its entries into the registered list (see
//! rtlab-sync's `RobustMutex`).

use crate::SysError;
use std::ptr::NonNull;
use std::sync::atomic::AtomicUsize;

/// `struct robust_list_head`. The thread that owns it is the only writer; the kernel reads it
/// when that thread exits. Atomics (Relaxed, with compiler fences at the call sites) keep the
/// compiler from reordering or eliding the stores the kernel must observe.
#[repr(C)]
#[derive(Debug)]
pub struct RobustListHead {
    /// First entry (address of its `next` field, bit 0 = PI), or the head itself when empty.
    pub list: AtomicUsize,
    /// Futex word address minus entry address, the same for every entry of this list.
    pub futex_offset: isize,
    /// The entry being locked or unlocked right now, or 0.
    pub list_op_pending: AtomicUsize,
}

/// The calling thread's registered head, if any.
///
/// C: `syscall(SYS_get_robust_list, 0, &head, &len)`.
pub fn current_robust_list() -> Result<Option<NonNull<RobustListHead>>, SysError> {
    let mut head: *mut RobustListHead = std::ptr::null_mut();
    let mut len: libc::size_t = 0;
    // SAFETY: both out-pointers are valid for writes; pid 0 is the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_get_robust_list, 0, &mut head, &mut len) };
    if rc != 0 {
        return Err(SysError::from_io(
            "get_robust_list(0)",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(NonNull::new(head))
}

/// Registers `head` as the calling thread's robust list.
///
/// C: `syscall(SYS_set_robust_list, head, sizeof(*head))`.
///
/// # Safety
/// `head` must stay valid until the thread exits (the kernel reads it then), and must not
/// replace a list that another library still uses for this thread.
pub unsafe fn register_robust_list(head: NonNull<RobustListHead>) -> Result<(), SysError> {
    // SAFETY: forwarded from the caller.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_robust_list,
            head.as_ptr(),
            std::mem::size_of::<RobustListHead>(),
        )
    };
    if rc != 0 {
        return Err(SysError::from_io(
            "set_robust_list",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Whether the kernel supports robust lists at all (it fails `get_robust_list` with ENOSYS
/// otherwise).
pub fn robust_lists_supported() -> bool {
    current_robust_list().is_ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn glibc_registered_a_list_for_this_thread() {
        let head = super::current_robust_list()
            .unwrap()
            .expect("glibc registers a robust list");
        // SAFETY: glibc's head lives as long as this thread.
        let offset = unsafe { head.as_ref() }.futex_offset;
        // glibc x86-64: offsetof(__lock) - offsetof(__list.__next) = 0 - 32.
        #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
        assert_eq!(offset, -32);
        let _ = offset;
    }
}
