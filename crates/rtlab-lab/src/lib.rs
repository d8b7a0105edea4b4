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

    /// Counts the outliers' `at_ns` from `began_ns`, when measuring began, instead of from the
    /// explainer's start, which comes first and may take a while (loading the eBPF programs):
    /// an outlier near the end of a 5 s run read `at 5.3 s`.
    pub fn measured_from(&mut self, began_ns: u64) {
        let Some(origin) = self.origin_ns else {
            return;
        };
        let shift = began_ns.saturating_sub(origin);
        for o in &mut self.outliers {
            o.at_ns = o.at_ns.saturating_sub(shift);
        }
        self.origin_ns = Some(origin + shift);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outliers_are_timed_from_when_measuring_began() {
        // Regression: an outlier near the end of a 5 s noise run read `at 5.3 s`, timed from
        // the explainer's start, 0.3 s before the spinners.
        let outlier = |at_ns: u64| -> rtlab_stats::result::Outlier {
            serde_json::from_value(serde_json::json!({
                "series": "cpu1", "at_ns": at_ns, "latency_ns": 1000, "causes": []
            }))
            .unwrap()
        };
        let mut outcome = Outcome {
            outliers: vec![outlier(5_300_000_000), outlier(400_000_000)],
            origin_ns: Some(1_000_000_000),
            ..Outcome::default()
        };
        outcome.measured_from(1_300_000_000);
        let at: Vec<u64> = outcome.outliers.iter().map(|o| o.at_ns).collect();
        assert_eq!(at, [5_000_000_000, 100_000_000]);
        assert_eq!(outcome.origin_ns, Some(1_300_000_000));
        // Without an explainer there is nothing to move.
        let mut plain = Outcome::default();
        plain.measured_from(5);
        assert_eq!(plain.origin_ns, None);
    }
}
