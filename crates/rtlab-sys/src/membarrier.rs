//! `membarrier(2)` between processes: an asymmetric fence. A thread on a hot path may leave
//! out its full fence (a compiler fence keeps program order) when the thread on the rare
//! path calls [`global_expedited`], which makes every CPU running a thread of a registered
//! process execute a full barrier before it returns. The cost moves to the rare path: an
//! inter-processor interrupt to each such CPU, so it suits only a path that is rare by
//! design (rtlab-ipc: a producer about to sleep on a full ring).

use crate::SysError;
use rustix::thread::{membarrier, membarrier_query, MembarrierCommand};
use std::sync::OnceLock;

/// True when the kernel has `MEMBARRIER_CMD_GLOBAL_EXPEDITED` and its registration
/// (Linux 4.16+, unless a seccomp filter hides the call). Asked once per process.
pub fn global_expedited_supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let q = membarrier_query();
        q.contains_command(MembarrierCommand::GlobalExpedited)
            && q.contains_command(MembarrierCommand::RegisterGlobalExpedited)
    })
}

/// `MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED`: from now on this process's threads take part
/// in [`global_expedited`] barriers. Done once per process; later calls return the first
/// outcome.
pub fn register_global_expedited() -> Result<(), SysError> {
    static REGISTERED: OnceLock<Result<(), i32>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            membarrier(MembarrierCommand::RegisterGlobalExpedited).map_err(|e| e.raw_os_error())
        })
        .map_err(|errno| {
            SysError::from_io(
                "membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED)",
                std::io::Error::from_raw_os_error(errno),
            )
        })
}

/// `MEMBARRIER_CMD_GLOBAL_EXPEDITED`: a full memory barrier on every CPU that runs a thread
/// of a registered process (and on the caller's), ordered between what each of them did
/// before and after; a thread not running passes one at its next context switch anyway.
pub fn global_expedited() -> Result<(), SysError> {
    membarrier(MembarrierCommand::GlobalExpedited)
        .map_err(|e| SysError::from_errno("membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_then_a_barrier_succeed_where_the_kernel_has_them() {
        if !global_expedited_supported() {
            crate::testing::say_skipped("no MEMBARRIER_CMD_GLOBAL_EXPEDITED on this kernel");
            return;
        }
        register_global_expedited().unwrap();
        register_global_expedited().unwrap(); // once per process: the same outcome again
        global_expedited().unwrap();
    }
}
