//! `--explain` for the experiments: starts the tracer around a run, or says why it cannot
//! and falls back to what /proc tells.

use crate::harness::Observer;
use crate::Outcome;
use rtlab_stats::Nanos;
pub use rtlab_trace::explain::Wait;
pub use rtlab_trace::{Backend, Reporter, Request};

/// Where a measuring thread reports its late samples: the explainer's reporter and the
/// index of the series (None when not explaining).
pub type Report<'a> = Option<(&'a Reporter, u16)>;

/// Reports a sample that waited for `wait` from `deadline_ns` to `woke_ns`, if explaining and
/// it is late.
#[inline]
pub fn report_wait(report: Report<'_>, wait: Wait, tid: i64, deadline_ns: u64, woke_ns: u64) {
    if let Some((reporter, series)) = report {
        reporter.report_wait_if_late(wait, series, tid, deadline_ns, woke_ns);
    }
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct ExplainSettings {
    /// Explain every sample over this (None: the `top` worst).
    pub threshold: Option<Nanos>,
    /// How many outliers to keep.
    pub top: usize,
    /// Save each outlier's raw trace window here.
    pub trace_out: Option<std::path::PathBuf>,
    /// Event source.
    pub backend: rtlab_trace::Backend,
}

/// The explainer of one run, or the /proc fallback.
#[derive(Debug)]
pub enum Session {
    /// Tracing.
    Traced(Box<rtlab_trace::Explainer>),
    /// No tracer: /proc counters at the start.
    Proc(rtlab_trace::ProcSnapshot, String),
}

impl Session {
    /// Starts explaining the measured `cpus` for series `names`, whose samples wait for
    /// `waits` (what the tracer must record to attribute them).
    pub fn start(
        settings: &ExplainSettings,
        cpus: &[usize],
        names: Vec<String>,
        waits: &[Wait],
        observer: &mut dyn Observer,
        outcome: &mut Outcome,
    ) -> Session {
        let usable = rtlab_sys::affinity::usable_cpus();
        let mut reader_cpus: Vec<usize> = usable
            .as_slice()
            .iter()
            .copied()
            .filter(|c| !cpus.contains(c))
            .collect();
        if reader_cpus.is_empty() {
            reader_cpus = usable.as_slice().to_vec();
            outcome.warn(
                observer,
                "explain: every CPU is measured, so the trace reader (rtlab-explain) shares them; \
                 it may show up as a cause (measure fewer CPUs with --cpus to keep one free)"
                    .into(),
            );
        }
        let options = rtlab_trace::Options {
            backend: settings.backend,
            threshold_ns: settings.threshold.map(Nanos::get),
            top: settings.top,
            trace_out: settings.trace_out.clone(),
            reader_cpus,
            series_names: names,
            started_ns: rtlab_sys::time::monotonic_now_ns(),
            waits: waits.to_vec(),
            rings: None,
            stacks: false,
        };
        outcome.origin_ns = Some(options.started_ns);
        match rtlab_trace::Explainer::start(cpus, options) {
            Ok(e) => Session::Traced(Box::new(e)),
            Err(e) => {
                let why = e.to_string();
                outcome.warn(
                    observer,
                    format!(
                        "explain: no kernel tracer ({why}): outliers cannot be attributed; \
                         falling back to /proc counters for the run"
                    ),
                );
                Session::Proc(rtlab_trace::ProcSnapshot::take(), why)
            }
        }
    }

    /// For the measuring threads (None without a tracer).
    pub fn reporter(&self) -> Option<Reporter> {
        match self {
            Session::Traced(e) => Some(e.reporter()),
            Session::Proc(..) => None,
        }
    }

    /// Ends the session: explained outliers into `outcome`, with warnings for anything lost.
    pub fn finish(self, cpus: &[usize], observer: &mut dyn Observer, outcome: &mut Outcome) {
        match self {
            Session::Traced(e) => match e.finish() {
                Ok(f) => {
                    if let Some(why) = &f.fallback {
                        outcome.warn(
                            observer,
                            format!(
                                "explain: the eBPF recorder could not start ({why}); using tracefs, \
                                 which costs the measured CPUs more per event"
                            ),
                        );
                    }
                    if f.lost_events > 0 {
                        outcome.warn(
                            observer,
                            format!(
                                "explain: the kernel lost {} trace events: attributions near them may be incomplete",
                                f.lost_events
                            ),
                        );
                    }
                    if f.dropped_reports > 0 {
                        outcome.warn(
                            observer,
                            format!(
                                "explain: {} late samples were not explained (the trace reader fell behind)",
                                f.dropped_reports
                            ),
                        );
                    }
                    if !f.missing_events.is_empty() {
                        outcome.warn(
                            observer,
                            format!(
                                "explain: events not available on this kernel: {}",
                                f.missing_events
                                    .iter()
                                    .map(|m| m.to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        );
                    }
                    let gaps: Vec<u64> = f
                        .outliers
                        .iter()
                        .map(|o| {
                            o.causes
                                .iter()
                                .filter(|c| c.kind == rtlab_stats::result::CauseKind::HypervisorGap)
                                .map(|c| c.duration_ns)
                                .sum::<u64>()
                        })
                        .filter(|&ns| ns > 0)
                        .collect();
                    if !gaps.is_empty() {
                        outcome.warn(
                            observer,
                            format!(
                                "explain: {} outliers include {} of hypervisor_gap; the host's steal time on the measured CPUs grew {:.0} ms over the run{}",
                                gaps.len(),
                                Nanos(gaps.iter().sum()),
                                f.steal_ms,
                                if f.steal_ms > 0.0 {
                                    " (the host did take the CPUs away)"
                                } else {
                                    " (none counted: at 10 ms resolution short stalls may not show)"
                                }
                            ),
                        );
                    }
                    outcome.outliers.extend(f.outliers);
                }
                Err(e) => outcome.warn(observer, format!("explain: failed: {e}")),
            },
            Session::Proc(before, why) => {
                let after = rtlab_trace::ProcSnapshot::take();
                outcome.warn(
                    observer,
                    format!(
                        "explain (from /proc, {why}): {}",
                        before.describe_since(&after, cpus)
                    ),
                );
            }
        }
    }
}
