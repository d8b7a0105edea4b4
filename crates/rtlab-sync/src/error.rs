/// Why a lock operation did not return the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The calling thread already owns this lock (`EDEADLK`).
    #[error("deadlock: the calling thread already owns this lock")]
    Deadlock,
    /// The deadline passed before the lock was free.
    #[error("timed out waiting for the lock")]
    TimedOut,
    /// The lock is held by another thread (`try_lock`).
    #[error("the lock is held by another thread")]
    WouldBlock,
    /// The caller's priority is above a priority-protect mutex's ceiling (POSIX `EINVAL`).
    #[error("the calling thread's priority {caller} is above the mutex ceiling {ceiling}")]
    CeilingViolation {
        /// The caller's real-time priority.
        caller: u32,
        /// The mutex's ceiling.
        ceiling: u32,
    },
    /// The thread may not be raised to the ceiling (no `CAP_SYS_NICE` / `RLIMIT_RTPRIO`).
    #[error("cannot raise the calling thread to the ceiling priority: permission denied")]
    PermissionDenied,
    /// The calling thread does not own this lock (an unlock or repair by a non-owner,
    /// `EPERM`).
    #[error("the calling thread does not own this lock")]
    NotOwner,
    /// The kernel refused the operation (errno given), e.g. `EINVAL` when the word was used
    /// with a non-PI futex operation, `ESRCH` when the word names a thread that does not exist.
    #[error("futex operation failed (errno {0})")]
    Os(i32),
}

impl From<rtlab_sys::futex::LockPiError> for LockError {
    fn from(e: rtlab_sys::futex::LockPiError) -> Self {
        use rtlab_sys::futex::LockPiError as E;
        match e {
            E::Deadlock => LockError::Deadlock,
            E::TimedOut => LockError::TimedOut,
            E::Other(errno) => LockError::Os(errno),
        }
    }
}
