//! How to explain, and what the explainer found.

use crate::error::Missing;
use crate::recorder::{LockProbes, Rings};
use crate::wait::Wait;
use rtlab_stats::result::Outlier;
use std::path::PathBuf;

/// Where the events come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The eBPF recorder when it can start, else tracefs.
    #[default]
    Auto,
    /// The eBPF flight recorder (raw tracepoints, BTF; cheapest per event).
    Bpf,
    /// A private tracefs instance read as text (any kernel with tracefs).
    Tracefs,
}

impl Backend {
    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Bpf => "bpf",
            Backend::Tracefs => "tracefs",
        }
    }
}

/// How to explain.
#[derive(Debug, Clone)]
pub struct Options {
    /// Event source.
    pub backend: Backend,
    /// Explain every sample over this; `None`: the `top` latest samples.
    pub threshold_ns: Option<u64>,
    /// How many outliers to keep (the largest).
    pub top: usize,
    /// Save each outlier's raw events as `DIR/outlier-<n>.txt`.
    pub trace_out: Option<PathBuf>,
    /// CPUs the reader may run on (not the measured ones when possible).
    pub reader_cpus: Vec<usize>,
    /// Names of the series, by index.
    pub series_names: Vec<String>,
    /// The run's start (CLOCK_MONOTONIC ns), for `at_ns`.
    pub started_ns: u64,
    /// What the reported samples wait for. When every one is [`Wait::Timer`], the eBPF
    /// recorder leaves `sched_waking` out (one event less on every wakeup in the measured
    /// path): the expiry of the thread's own sleep timer names it as the woken task.
    pub waits: Vec<Wait>,
    /// The eBPF recorder's ring sizes (None: its defaults; a watch sizes them from the
    /// machine's event rate unless forced).
    pub rings: Option<Rings>,
    /// Keep the kernel stacks of each explained delay's thread and of the task that ran
    /// instead (the eBPF recorder only).
    pub stacks: bool,
}

/// What the explainer found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Explained outliers, largest first.
    pub outliers: Vec<Outlier>,
    /// Samples over the threshold (explained or not).
    pub over_threshold: u64,
    /// Reports dropped because the reader was behind.
    pub dropped_reports: u64,
    /// Events the kernel lost.
    pub lost_events: u64,
    /// Events that were not available on this kernel.
    pub missing_events: Vec<Missing>,
    /// How PI lock waits were recorded (a watch's `lock` kind), if they were.
    pub lock_probes: Option<LockProbes>,
    /// The event source used ([`Backend::Bpf`] or [`Backend::Tracefs`]).
    pub backend: Backend,
    /// Why the eBPF recorder was not used, when `auto` fell back to tracefs.
    pub fallback: Option<String>,
    /// Steal time on the measured CPUs over the run (ms; /proc/stat, 10 ms resolution): the
    /// host's own account of taking the CPUs away, to corroborate `hypervisor_gap` causes.
    pub steal_ms: f64,
}
