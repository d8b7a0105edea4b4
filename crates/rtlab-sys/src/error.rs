use std::io;

/// An error from a system call, naming what was attempted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SysError {
    /// The kernel refused for lack of privilege (`EPERM`/`EACCES`).
    #[error("{what}: permission denied")]
    PermissionDenied {
        /// What was attempted, e.g. `sched_setscheduler(SCHED_FIFO, 95)`.
        what: String,
    },
    /// An argument the kernel rejected (`EINVAL`), e.g. a CPU that does not exist.
    #[error("{what}: invalid argument")]
    Invalid {
        /// What was attempted.
        what: String,
    },
    /// The process is gone (or never was).
    #[error("process {pid}: no such process")]
    NoSuchProcess {
        /// Its pid.
        pid: i32,
    },
    /// Any other failure.
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl SysError {
    pub(crate) fn from_io(what: impl Into<String>, err: io::Error) -> Self {
        let what = what.into();
        match err.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => SysError::PermissionDenied { what },
            Some(libc::EINVAL) => SysError::Invalid { what },
            _ => SysError::Io { what, source: err },
        }
    }

    pub(crate) fn from_errno(what: impl Into<String>, err: rustix::io::Errno) -> Self {
        Self::from_io(what, io::Error::from_raw_os_error(err.raw_os_error()))
    }

    /// True when the failure was a missing privilege, so a caller can degrade gracefully.
    pub fn is_permission(&self) -> bool {
        matches!(self, SysError::PermissionDenied { .. })
    }
}
