//! The latency experiments. Each one implements [`Experiment`], measures, and returns series;
//! none of them prints. [`harness::run_experiment`] wraps one run with what every experiment
//! shares: memory locking, the `/dev/cpu_dma_latency` hold, the disturbance loads, privilege
//! probing with graceful degradation, and the facts of the result document.
#![deny(unsafe_code)]

pub mod check;
mod error;
pub mod explain;
pub mod harness;
pub mod invert;
pub mod ipc;
pub mod lock;
pub mod mmap;
mod mutex_impls;
pub mod net;
pub mod noise;
pub mod slack;
pub mod survey;
pub mod tune;
pub mod wakeup;
pub mod watchdog;

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
    /// Outliers explained by the tracer (`--explain`).
    pub outliers: Vec<rtlab_stats::result::Outlier>,
    /// The CLOCK_MONOTONIC time the outliers' `at_ns` count from (set by the explainer).
    pub origin_ns: Option<u64>,
}

impl Outcome {
    /// Records a degradation and tells the observer at once.
    pub fn warn(&mut self, observer: &mut dyn harness::Observer, message: String) {
        observer.warn(&message);
        self.warnings.push(message);
    }

    /// The scheduling the measuring threads can really get: `policy`/`prio` when this
    /// process may use them, else SCHED_OTHER with one warning saying what it costs (`cost`).
    pub fn effective_sched(
        &mut self,
        observer: &mut dyn harness::Observer,
        policy: rtlab_sys::sched::Policy,
        prio: u32,
        cost: &str,
    ) -> (rtlab_sys::sched::Policy, u32) {
        if !policy.is_realtime() || rtlab_sys::probe::can_use_fifo(prio) {
            return (policy, prio);
        }
        let message = format!(
            "cannot use SCHED_{} {prio} ({}): measuring under SCHED_OTHER, {cost}; run as root \
             for real-time numbers",
            policy.as_str().to_uppercase(),
            rtlab_sys::probe::fifo_refusal_cause(prio)
        );
        self.warn(observer, message);
        (rtlab_sys::sched::Policy::Other, 0)
    }
}

/// One latency experiment.
pub trait Experiment {
    /// The subcommand name (`wakeup`).
    fn command(&self) -> &'static str;

    /// Measures for `common.duration` (or until Ctrl-C), reporting live progress and warnings
    /// through `observer`. Never prints.
    fn run(&self, common: &CommonConfig, observer: &mut dyn Observer) -> Result<Outcome, LabError>;
}
