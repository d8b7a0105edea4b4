/// Why an experiment could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LabError {
    /// The configuration is impossible on this machine (bad input: exit 2).
    #[error("{0}")]
    Config(String),
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
        matches!(self, LabError::Config(_))
    }
}
