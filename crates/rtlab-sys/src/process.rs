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

/// Forks; the child runs `child` and `_exit`s with its return value. Returns the child's pid
/// at once; reap it with [`wait_child`].
///
/// # Safety
/// In a multi-threaded process the child has only the calling thread: `child` must not take
/// locks another thread may have held at fork time (malloc, stdio, any Mutex), i.e. it should
/// restrict itself to atomics, syscalls and memory prepared before the fork. rtlab uses it in
/// tests and stress harnesses that obey this.
pub unsafe fn fork_child(child: impl FnOnce() -> i32) -> Result<i32, SysError> {
    // SAFETY: the caller guarantees `child` is fork-safe (see above).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(SysError::from_io("fork()", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let code = child();
        // SAFETY: ends the child without running the parent's atexit handlers or destructors.
        unsafe { libc::_exit(code) };
    }
    Ok(pid)
}

/// SysV message queues a peer child removes if its parent dies first (-1: none).
static ORPHAN_QUEUES: [std::sync::atomic::AtomicI32; 2] = [
    std::sync::atomic::AtomicI32::new(-1),
    std::sync::atomic::AtomicI32::new(-1),
];

extern "C" fn on_parent_death(_: libc::c_int) {
    use std::sync::atomic::Ordering;
    for q in &ORPHAN_QUEUES {
        let id = q.load(Ordering::Relaxed);
        if id >= 0 {
            // SAFETY: msgctl(IPC_RMID) is a plain syscall, async-signal-safe.
            unsafe { libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
        }
    }
    // SAFETY: ends the process without unwinding, as a signal handler must.
    unsafe { libc::_exit(128 + libc::SIGTERM) };
}

/// [`fork_child`] for a peer process that must not outlive its parent: in the child, before
/// `child` runs, the parent-death signal is set (SIGTERM, whose handler removes
/// `sysv_queues` and exits), the parent is checked to be still the one that forked (it may
/// have died between fork and prctl), and the inherited `/dev/cpu_dma_latency` descriptor is
/// closed (an orphan holding it would keep deep C-states off system-wide).
///
/// # Safety
/// As for [`fork_child`].
pub unsafe fn fork_peer(
    sysv_queues: Option<(i32, i32)>,
    child: impl FnOnce() -> i32,
) -> Result<i32, SysError> {
    let parent = std::process::id() as i32;
    let dma = crate::dma::held_fd();
    let guarded = move || {
        use std::sync::atomic::Ordering;
        if let Some((a, b)) = sysv_queues {
            ORPHAN_QUEUES[0].store(a, Ordering::Relaxed);
            ORPHAN_QUEUES[1].store(b, Ordering::Relaxed);
        }
        // SAFETY: zeroed sigaction is "no flags, empty mask"; the handler only makes
        // async-signal-safe syscalls. close() of an inherited descriptor is safe here.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int) = on_parent_death;
            action.sa_sigaction = handler as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
            if dma >= 0 {
                libc::close(dma);
            }
        }
        if crate::net::set_parent_death_signal(libc::SIGTERM).is_err() {
            return 9;
        }
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } != parent {
            on_parent_death(libc::SIGTERM);
        }
        child()
    };
    // SAFETY: forwarded from the caller; the prologue above is syscalls and atomics only.
    unsafe { fork_child(guarded) }
}

/// A child process that cleans up after this one if it dies without saying it has (even by
/// SIGKILL): it blocks reading a pipe whose only write end this process holds (close-on-exec,
/// so no program this process runs holds it; closed in the janitor, which also closes every
/// other descriptor it inherited, the write ends of other janitors' pipes among them). End of
/// file without the "done" byte means the cleanup is due. Terminal signals (Ctrl-C to the
/// process group) are ignored: the janitor ends with its creator, not before.
#[derive(Debug)]
pub struct Janitor {
    pid: i32,
    done: std::fs::File,
}

/// The byte that tells a janitor the cleanup is done already.
const DONE: u8 = b'd';

/// C: `pipe2(fds, O_CLOEXEC)`: (read end, write end).
pub(crate) fn pipe() -> Result<(std::fs::File, std::fs::File), SysError> {
    let mut fds = [-1i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(SysError::from_io(
            "pipe2()",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: both descriptors are new and owned by nothing else.
    Ok(unsafe {
        (
            std::os::fd::FromRawFd::from_raw_fd(fds[0]),
            std::os::fd::FromRawFd::from_raw_fd(fds[1]),
        )
    })
}

/// The janitor's whole life, after fork: only async-signal-safe syscalls, then `cleanup`
/// unless told not to.
fn janitor_main(read_end: i32, cleanup: impl FnOnce()) -> i32 {
    // SAFETY: plain syscalls on integers and a one-byte stack buffer; signal dispositions of
    // this process only. Every descriptor but the pipe's read end is closed.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        if read_end > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (read_end - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (read_end + 1) as u32, u32::MAX, 0u32);
        let mut byte = 0u8;
        loop {
            let n = libc::read(read_end, (&mut byte as *mut u8).cast(), 1);
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n == 1 && byte == DONE {
                return 0;
            }
            break;
        }
    }
    cleanup();
    0
}

impl Janitor {
    /// Forks the janitor; `cleanup` runs in it when this process ends without
    /// [`Janitor::dismiss`], or at [`Janitor::clean_up`].
    ///
    /// # Safety
    /// `cleanup` runs in a child forked from a possibly multi-threaded process: only
    /// async-signal-safe syscalls on memory prepared before this call (no allocation, no lock,
    /// and nothing dropped that would free memory).
    pub unsafe fn start(cleanup: impl FnOnce()) -> Result<Janitor, SysError> {
        let (read_end, write_end) = pipe()?;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&read_end);
        // SAFETY: the child runs only `janitor_main` (syscalls on integers) and `cleanup`,
        // which the caller guarantees is as restrained.
        let pid = unsafe { fork_child(|| janitor_main(raw, cleanup)) }?;
        drop(read_end);
        Ok(Janitor {
            pid,
            done: write_end,
        })
    }

    /// Tells the janitor the cleanup is done already, and reaps it.
    pub fn dismiss(self) {
        let _ = std::io::Write::write(&mut &self.done, &[DONE]);
        self.clean_up();
    }

    /// Has the janitor clean up now (as if this process had died), and waits until it has.
    pub fn clean_up(self) {
        drop(self.done);
        let _ = wait_child(self.pid);
    }
}

/// [`fork_child`], then waits for it: returns its exit code (128 + signal if killed).
///
/// # Safety
/// As for [`fork_child`].
pub unsafe fn fork_run(child: impl FnOnce() -> i32) -> Result<i32, SysError> {
    // SAFETY: forwarded from the caller.
    let pid = unsafe { fork_child(child) }?;
    wait_child(pid)
}

/// Waits for child `pid` and returns its exit code, or 128 + signal if a signal killed it.
pub fn wait_child(pid: i32) -> Result<i32, SysError> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid writable int.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc >= 0 {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(SysError::from_io("waitpid()", err));
        }
    }
    Ok(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    })
}

/// Sends SIGKILL to `pid`. C: `kill(pid, SIGKILL)`.
pub fn kill_hard(pid: i32) -> Result<(), SysError> {
    let pid = rustix::process::Pid::from_raw(pid).ok_or_else(|| SysError::Invalid {
        what: format!("kill({pid})"),
    })?;
    rustix::process::kill_process(pid, rustix::process::Signal::KILL)
        .map_err(|e| SysError::from_errno(format!("kill({}, SIGKILL)", pid.as_raw_nonzero()), e))
}

/// Whether `tid` names a live thread of this process. C: `tgkill(getpid(), tid, 0) == 0`.
pub fn thread_in_this_process(tid: u32) -> bool {
    if tid == 0 || tid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks that the thread exists; no signal is sent.
    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, 0) == 0 }
}

/// Raises this process's `RLIMIT_MEMLOCK` to unlimited (soft and hard), so a program it
/// executes may lock its memory itself. C: `setrlimit(RLIMIT_MEMLOCK, {INF, INF})`.
pub fn raise_memlock_limit() -> Result<(), SysError> {
    use rustix::process::{setrlimit, Resource, Rlimit};
    setrlimit(
        Resource::Memlock,
        Rlimit {
            current: None,
            maximum: None,
        },
    )
    .map_err(|e| SysError::from_errno("setrlimit(RLIMIT_MEMLOCK, unlimited)", e))
}

/// Sends SIGTERM to `pid` (a polite stop). C: `kill(pid, SIGTERM)`.
pub fn terminate(pid: u32) -> Result<(), SysError> {
    // SAFETY: kill(2) with a plain pid and signal.
    if unsafe { libc::kill(pid as i32, libc::SIGTERM) } != 0 {
        return Err(SysError::from_io(
            format!("kill({pid}, SIGTERM)"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Makes the process `cmd` spawns receive SIGTERM when this process dies, however it dies
/// (even by SIGKILL): `prctl(PR_SET_PDEATHSIG)` between fork and exec.
pub fn terminate_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as i32;
    // SAFETY: the hook only calls prctl and getppid, which are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            crate::net::set_parent_death_signal(libc::SIGTERM)?;
            // The parent may have died between fork and prctl: then no signal would come.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the parent died while starting"));
            }
            Ok(())
        });
    }
}

/// This process's soft RLIMIT_MEMLOCK and RLIMIT_RTPRIO (`None`: unlimited).
pub fn rt_limits() -> (Option<u64>, Option<u64>) {
    use rustix::process::{getrlimit, Resource};
    (
        getrlimit(Resource::Memlock).current,
        getrlimit(Resource::Rtprio).current,
    )
}

/// The effective user id of this process (0 means root).
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Names the calling thread (what `ps -L`, `/proc/<tid>/comm` and the explainer show); names
/// longer than 15 bytes are cut. C: `prctl(PR_SET_NAME, name)`.
pub fn set_current_thread_name(name: &str) -> Result<(), SysError> {
    let mut bytes: Vec<u8> = name.bytes().filter(|&b| b != 0).take(15).collect();
    bytes.push(0);
    let cname = std::ffi::CStr::from_bytes_with_nul(&bytes).expect("one trailing NUL");
    rustix::thread::set_name(cname).map_err(|e| SysError::from_errno("prctl(PR_SET_NAME)", e))
}

/// Whether this process sees the machine's own PID namespace (not a container's without
/// `hostPID`): the kernel's trace events name tasks by the PIDs of that namespace. The
/// initial namespace's inode is a constant of the kernel (`PROC_PID_INIT_INO`). None where
/// `/proc/self/ns/pid` cannot be read.
pub fn in_initial_pid_namespace() -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
    let ns = std::fs::metadata("/proc/self/ns/pid").ok()?;
    Some(ns.ino() == PROC_PID_INIT_INO)
}

#[cfg(test)]
mod tests {
    #[test]
    fn fork_child_is_reaped() {
        for _ in 0..10 {
            super::fork_and_reap_trivial_child().unwrap();
        }
    }

    #[test]
    fn this_machine_runs_the_tests_in_its_own_pid_namespace_or_says_it_does_not() {
        // Where the tests run in a container, the answer is no; here (a VM) yes. Either way
        // it agrees with init's namespace as /proc shows it, where that is readable.
        let here = super::in_initial_pid_namespace();
        if let (Ok(me), Ok(init)) = (
            std::fs::read_link("/proc/self/ns/pid"),
            std::fs::read_link("/proc/1/ns/pid"),
        ) {
            if here == Some(true) {
                assert_eq!(me, init);
            }
        }
        assert!(here.is_some());
    }
}
