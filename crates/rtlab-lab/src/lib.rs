//! The latency experiments. Each one implements [`Experiment`], measures, and returns series;
//! none of them prints. [`harness::run_experiment`] wraps one run with what every experiment
//! shares: memory locking, the `/dev/cpu_dma_latency` hold, the disturbance loads, privilege
//! probing with graceful degradation, and the facts of the result document.
#![deny(unsafe_code)]

mod error;
pub mod harness;
pub mod lock;
pub mod survey;
pub mod wakeup;

pub use error::LabError;
pub use harness::{run_experiment, CommonConfig, LiveSeries, Observer, RunRecord};

use rtlab_stats::result::Series;

/// What an experiment returns.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The measured series.
    pub series: Vec<Series>,
    /// Degradations noticed while measuring.
    pub warnings: Vec<String>,
}

/// One latency experiment.
pub trait Experiment {
    /// The subcommand name (`wakeup`).
    fn command(&self) -> &'static str;

    /// Measures for `common.duration` (or until Ctrl-C), reporting live progress and warnings
    /// through `observer`. Never prints.
    fn run(&self, common: &CommonConfig, observer: &mut dyn Observer) -> Result<Outcome, LabError>;
}
