//! What the reader hands a watch, and what a watch may ask of the event source: the seam
//! between the events (this crate) and a model of the watched threads built on them
//! (rtlab-watch), so neither reaches into the other.

use crate::recorder::LockWaits;
use crate::request::Request;
use crate::usdt::{Library, ProbeError};
use rtlab_stats::result::Outlier;
use rtlab_sys::affinity::CpuMask;
use std::collections::HashSet;

/// A watch of running threads: its delays measured from the events the reader offers it,
/// those over the threshold explained by the reader. Every method is called with the watch's
/// lock held, from the reader thread (after [`Explainer::start_watching`] returns) or the
/// setup.
///
/// [`Explainer::start_watching`]: crate::Explainer::start_watching
pub trait Watcher: Send + std::fmt::Debug {
    /// What the event source records for it, decided once at the start.
    fn wants(&self) -> Wants;

    /// One event, as read (each CPU's in time order, the CPUs one after another).
    fn offer(&mut self, e: &crate::event::Event);

    /// A drain begun at `drained_at` is over (or the run, `stopping`): the delays it made
    /// complete are measured, those to explain asked for through `ask`.
    fn drained(&mut self, drained_at: u64, stopping: bool, ask: &mut dyn FnMut(Request));

    /// After a drain: the event source follows the watch (a JVM's probes once it is found,
    /// the threads watched now, the CPUs they may run on).
    fn follow(&mut self, source: &mut dyn Probes);

    /// The CPUs the reader should move to now (None: stay), off the watched threads.
    fn reader_cpus(&self, now_ns: u64) -> Option<Vec<usize>>;

    /// The name of series `index`, for the explanation.
    fn series_name(&self, index: u16) -> Option<String>;

    /// The explanation of a delay it asked for.
    fn explained(&mut self, series: u16, o: Outlier);

    /// Whether it has just attached to threads (the reader polls eagerly for a moment).
    fn just_attached(&self, now_ns: u64) -> bool;

    /// Safepoints of thread `tid`'s JVM from `from_ns` to `to_ns` that the JVM's own log told
    /// of (where its probes are not there), and its VM thread: the explanation names them
    /// as it names the probes'.
    fn logged_stops(&self, _tid: i64, _from_ns: u64, _to_ns: u64) -> LoggedStops {
        LoggedStops::default()
    }

    /// The earliest deadline of a delay it holds before asking for its explanation (a JVM's
    /// log not yet read past it), u64::MAX for none: the reader keeps the events from
    /// before it, as it keeps those of the explanations asked for.
    fn held_from(&self) -> u64 {
        u64::MAX
    }
}

/// A JVM's safepoints from its own log, for one explanation (see
/// [`Watcher::logged_stops`]).
#[derive(Debug, Clone, Default)]
pub struct LoggedStops {
    pub stops: Vec<crate::safepoint::Stop>,
    /// The JVM's VM thread (the one that runs its safepoints), where known.
    pub vm_thread: Option<i64>,
}

/// What a watch asks the event source to record, at the start.
#[derive(Debug, Clone, Default)]
pub struct Wants {
    /// The watched threads' PI lock waits.
    pub locks: LockWaits,
    /// The CPUs the watched threads may run on (None: every CPU).
    pub cpus: Option<CpuMask>,
    /// The watched threads' wait calls (their delays end at the return to user space).
    pub wait_calls: bool,
    /// The watched processes' children from their start.
    pub follow_forks: bool,
    /// The processes watched now (the kernel's set is filled before the start returns).
    pub processes: HashSet<u32>,
}

/// What a watch may change in the event source while it runs. The tracefs source
/// takes JVM probes only (for every process), never a set of watched processes, and traces
/// every CPU it started on.
pub trait Probes {
    /// Attaches to the probes of the libjvm.so `lib` (in process `pid`, or every process
    /// that maps it): how many attached (0: already done).
    fn probe_jvm(&mut self, lib: &Library, pid: Option<u32>) -> Result<usize, ProbeError>;

    /// Whether the source records the watched processes' threads only (a kernel set of
    /// them), and with them their JVMs' parks and sleeps.
    fn takes_watched(&self) -> bool {
        false
    }

    /// Attaches to JVM `pid`'s clock (in `lib`): Ok(true) if attached now, None where this
    /// source has no clock probes.
    fn probe_jvm_clock(&mut self, _lib: &Library, _pid: u32) -> Option<Result<bool, ProbeError>> {
        None
    }

    /// Removes JVM `pid`'s clock probe.
    fn unprobe_jvm_clock(&mut self, _pid: u32) {}

    /// The processes watched now: the others' JVM probes are dropped, and (where the source
    /// takes a set of them) only theirs recorded. Returns whether their wait calls are
    /// recorded.
    fn set_watched(&mut self, _processes: &HashSet<u32>) -> bool {
        false
    }

    /// Traces the CPUs of `want` (None: every CPU) among those it can; returns those traced.
    fn trace_cpus(&mut self, _want: Option<&CpuMask>) -> CpuMask {
        CpuMask::every()
    }
}
