//! Process-level helpers that need raw `fork`.

use crate::SysError;

/// Forks a child that exits at once, and reaps it. Used as a disturbance (page-table copy and
/// teardown of the whole address space).
///
/// C: `pid = fork(); if (pid == 0) _exit(0); waitpid(pid, &st, 0)`. The child calls only
/// `_exit`, which is async-signal-safe, so forking from a multi-threaded process is sound.
pub fn fork_and_reap_trivial_child() -> Result<(), SysError> {
    // SAFETY: the child runs nothing but `_exit(0)`, the only thing allowed after fork in a
    // multi-threaded program; the parent continues normally.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(SysError::from_io("fork()", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: `_exit` never returns and touches no user-space state.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid writable int; pid is our own child.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc >= 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(SysError::from_io("waitpid()", err));
        }
    }
}

/// The effective user id of this process (0 means root).
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

#[cfg(test)]
mod tests {
    #[test]
    fn fork_child_is_reaped() {
        for _ in 0..10 {
            super::fork_and_reap_trivial_child().unwrap();
        }
    }
}
