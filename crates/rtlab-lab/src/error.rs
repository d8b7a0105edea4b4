/// Why an experiment could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LabError {
    /// A configuration value is impossible (bad input: exit 2): which field of the
    /// experiment's configuration, and why. (A command line maps the field to its flag.)
    #[error("{field}: {reason}")]
    BadConfig {
        /// The configuration field, as named in the experiment's config struct.
        field: &'static str,
        /// Why, in words that name no command-line flag.
        reason: String,
    },
    /// The configuration as a whole is impossible (nothing to measure, a privilege the
    /// experiment cannot do without): bad input, exit 2.
    #[error("{0}")]
    Config(String),
    /// Something the run needs could not be set up (a network namespace, a connection to the
    /// peer, a measuring thread's scheduling): exit 1.
    #[error("{0}")]
    Setup(String),
    /// A disturbance load failed to start.
    #[error(transparent)]
    Load(#[from] rtlab_load::LoadError),
    /// A system call failed mid-run.
    #[error(transparent)]
    Sys(#[from] rtlab_sys::SysError),
    /// A measuring thread died.
    #[error("measuring thread failed: {0}")]
    Thread(String),
    /// A histogram could not be encoded.
    #[error(transparent)]
    Histogram(#[from] rtlab_stats::HistogramError),
    /// A lock under test failed.
    #[error(transparent)]
    Lock(#[from] rtlab_sync::LockError),
    /// A robust mutex under test did not simply lock: its owner died (the lock was given up
    /// again, unrepaired), it is not recoverable, or this thread's robust list cannot take it.
    /// Its words: the error itself borrows the mutex.
    #[error("{0}")]
    Robust(String),
    /// A std mutex under test was poisoned (a thread panicked holding it).
    #[error("poisoned lock: another task failed inside")]
    Poisoned,
    /// The lock under test works between threads of one process only (its part of a run
    /// between processes is skipped).
    #[error("not process-shared (it works between threads of one process only)")]
    NotProcessShared,
    /// A run with a forked peer process failed (its channel, the child, a shared lock).
    #[error(transparent)]
    Peer(#[from] rtlab_ipc::peer::PeerError),
    /// The peer process answered against the protocol (another message, another order,
    /// another count).
    #[error("{0}")]
    Protocol(String),
    /// A setting was to be given a value its kind does not take.
    #[error("'{value}' is not a value of {setting}")]
    NotAValue {
        /// The value.
        value: String,
        /// The setting's id.
        setting: &'static str,
    },
    /// A document could not be written as JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// An I/O operation failed (a socket, a file, starting a program).
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A system call on a socket or a file failed (its error says which).
    #[error(transparent)]
    Os(#[from] std::io::Error),
    /// A program the run drives (`ip`, `nft`) refused.
    #[error("{command}: {said}")]
    Tool {
        /// The command line.
        command: String,
        /// What it said on its standard error.
        said: String,
    },
    /// The peer could not be reached, or did not answer.
    #[error("{0}")]
    Unreachable(String),
    /// A network step failed (the peer broke the protocol, a socket refused an option).
    #[error("{0}")]
    Net(String),
    /// A thread of the run (named) panicked.
    #[error("{0} panicked")]
    Panicked(String),
    /// A measuring thread failed, and why.
    #[error("measuring thread failed: {0}")]
    Measuring(Box<LabError>),
}

impl LabError {
    /// True when the user gave an impossible configuration (exit 2 rather than 1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            LabError::Config(_) | LabError::BadConfig { .. } => true,
            LabError::Load(l) => l.is_bad_input(),
            _ => false,
        }
    }

    /// `what` failed with `source`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> LabError {
        LabError::Io {
            what: what.into(),
            source,
        }
    }

    /// A measuring thread's error as the run's: a setup step it could not do (the peer not
    /// reached) stays as it is; anything else is the thread's failure.
    pub fn of_measuring_thread(self) -> LabError {
        match self {
            e @ (LabError::Unreachable(_) | LabError::Setup(_)) => e,
            e => LabError::Measuring(Box::new(e)),
        }
    }

    /// A measuring thread's error as the run's, whatever it was.
    pub fn in_measuring_thread(self) -> LabError {
        LabError::Measuring(Box::new(self))
    }

    /// `field`'s value is impossible because of `reason`.
    pub fn bad(field: &'static str, reason: impl Into<String>) -> LabError {
        LabError::BadConfig {
            field,
            reason: reason.into(),
        }
    }
}
