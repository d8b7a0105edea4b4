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
}

impl LabError {
    /// True when the user gave an impossible configuration (exit 2 rather than 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, LabError::Config(_) | LabError::BadConfig { .. })
    }

    /// `field`'s value is impossible because of `reason`.
    pub fn bad(field: &'static str, reason: impl Into<String>) -> LabError {
        LabError::BadConfig {
            field,
            reason: reason.into(),
        }
    }
}
