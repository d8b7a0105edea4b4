//! The explainer: names the cause of each latency outlier from kernel events, on any stock
//! kernel with eBPF or tracefs (no timerlat/osnoise tracer, no hist triggers, no compiler).
//!
//! Events come from the eBPF flight recorder ([`recorder`]: programs assembled at run time on
//! raw tracepoints, writing per-CPU rings the reader maps) or, where it cannot start, from a
//! private tracefs instance (`instances/rtlab-<pid>`, CLOCK_MONOTONIC timestamps, only the
//! measured CPUs): scheduler switches and wakeups, IRQ, softirq, IRQ-vector, NMI and
//! migration events. A reader thread, kept off the measured CPUs, consumes them continuously
//! into a short per-CPU history (a flight recorder). A measuring thread whose sample is over
//! the threshold sends a [`Request`] (its TID, CPU, deadline and wake time; no formatting, no
//! syscall); the reader attributes the window `[deadline, woke]` to causes
//! ([`explain::attribute`]) once the trace has caught up. Nothing is written to the measured
//! CPUs but the events themselves. Lost events are counted and reported.

pub mod btf;
mod error;
pub mod event;
pub mod explain;
mod history;
mod instance;
pub mod observer;
mod options;
mod reader;
pub mod reason;
mod recorder;
pub mod replay;
mod request;
pub mod safepoint;
mod tick;
pub mod usdt;
mod wait;
pub mod watcher;

pub use error::{Missing, TraceError};
pub use options::{Backend, Findings, Options};
pub use recorder::{LockProbes, LockWaits, Rings};
pub use request::{Reporter, Request};
pub use rtlab_sys::procfs::ProcSnapshot;

use instance::Instance;
use reader::{read_loop, ReaderOut, Source};
use rtlab_sys::affinity::CpuMask;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use watcher::Watcher;

/// A running explainer.
#[derive(Debug)]
pub struct Explainer {
    instance: Option<Instance>,
    backend: Backend,
    fallback: Option<String>,
    recorder_lost: Arc<AtomicU64>,
    recorder_missing: Vec<Missing>,
    lock_probes: Option<LockProbes>,
    proc_at_start: ProcSnapshot,
    cpus: Vec<usize>,
    reporter: Reporter,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<Result<ReaderOut, TraceError>>>,
    lines_limit: usize,
    /// The recorder's ring sizes, where it runs.
    rings: Option<Rings>,
}

/// Rings that hold a second of this machine's events now: its context switches (each a
/// switch and a wakeup) and interrupts (an entry and an exit) over 100 ms, per CPU, with
/// room for a burst four times that; at most a 32nd of its memory.
fn rings_for_this_machine(cpus: usize) -> Rings {
    let before = ProcSnapshot::take();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let after = ProcSnapshot::take();
    let (switches, irqs) = before.switches_and_irqs_since(&after);
    let per_cpu_s = (2 * switches + 2 * irqs) * 10 / cpus.max(1) as u64;
    let memory = rtlab_sys::sysinfo::total_memory_bytes().unwrap_or(1 << 30);
    Rings::for_rate(4 * per_cpu_s, cpus, memory / 32)
}

/// On a VM, a way out of idle longer than this (or ten times the deepest idle state's exit
/// latency) is the host's.
const IDLE_GAP_MIN_NS: u64 = 500_000;

impl Explainer {
    /// Starts tracing `cpus`.
    pub fn start(cpus: &[usize], options: Options) -> Result<Explainer, TraceError> {
        Self::start_with(cpus, options, None)
    }

    /// Starts watching `cpus` (every CPU the watched threads may run on) for `watcher`:
    /// it is offered every event, its delays over the threshold explained. Records every
    /// wakeup (wakeups by other threads are the point), in rings sized for this machine's
    /// event rate unless `options.rings` says.
    pub fn start_watching(
        cpus: &[usize],
        mut options: Options,
        watcher: Arc<Mutex<dyn Watcher>>,
    ) -> Result<Explainer, TraceError> {
        options.waits = vec![explain::Wait::Notify];
        if options.rings.is_none() {
            options.rings = Some(rings_for_this_machine(cpus.len()));
        }
        Self::start_with(cpus, options, Some(watcher))
    }

    /// The ring sizes in use (where the eBPF recorder runs).
    pub fn rings(&self) -> Option<Rings> {
        self.rings
    }

    /// Trace events lost so far, kept current by the reader (the final count is
    /// [`Findings::lost_events`]).
    pub fn lost_so_far(&self) -> Arc<AtomicU64> {
        self.recorder_lost.clone()
    }

    /// The event source in use ([`Backend::Bpf`] or [`Backend::Tracefs`]).
    pub fn backend(&self) -> Backend {
        self.backend
    }

    fn start_with(
        cpus: &[usize],
        options: Options,
        watch: Option<Arc<Mutex<dyn Watcher>>>,
    ) -> Result<Explainer, TraceError> {
        if rtlab_sys::process::effective_uid() != 0 {
            return Err(TraceError::NotRoot("eBPF and tracefs are"));
        }
        let mut fallback = None;
        let mut source = None;
        // A watch measures its threads' PI lock waits too, where they may run (the reader
        // follows changes), and ends their delays where their waits return to user space.
        let wants = watch
            .as_ref()
            .map(|w| w.lock().unwrap_or_else(|p| p.into_inner()).wants());
        if options.backend != Backend::Tracefs {
            match start_recorder(cpus, &options, wants.as_ref()) {
                Ok(r) => source = Some(Source::Bpf(Box::new(r))),
                Err(e) if options.backend == Backend::Bpf => {
                    return Err(TraceError::Recorder(Box::new(e)))
                }
                Err(e) => fallback = Some(e.to_string()),
            }
        }
        let mut instance = None;
        let mut recorder_missing = Vec::new();
        let mut lock_probes = None;
        let rings =
            matches!(source, Some(Source::Bpf(_))).then(|| options.rings.unwrap_or_default());
        let source = match source {
            Some(mut s) => {
                if let Source::Bpf(r) = &mut s {
                    recorder_missing = r.missing.clone();
                    lock_probes = r.lock_probes;
                    // The watched processes are in the kernel's set before this returns (a
                    // command started next is taken in as it is forked).
                    if let (true, Some(w)) = (r.takes_watched(), wants.as_ref()) {
                        let _ = r.set_watched(&w.processes);
                    }
                }
                s
            }
            None => {
                let (inst, text) = open_tracefs(cpus, fallback.as_deref())?;
                instance = Some(inst);
                text
            }
        };
        let backend = match source {
            Source::Bpf(_) => Backend::Bpf,
            Source::Tracefs { .. } => Backend::Tracefs,
        };
        let recorder_lost = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::sync_channel(4096);
        let threshold = Arc::new(AtomicU64::new(options.threshold_ns.unwrap_or(50_000)));
        let reporter = Reporter {
            tx,
            threshold: threshold.clone(),
            dropped: Arc::new(AtomicU64::new(0)),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let rules = rules();
        let reader = {
            let stop = stop.clone();
            let options = options.clone();
            let lost = recorder_lost.clone();
            let watch = watch.clone();
            std::thread::Builder::new()
                .name("rtlab-explain".into())
                .spawn(move || {
                    let shared = reader::Shared {
                        stop: &stop,
                        threshold: &threshold,
                        lost: &lost,
                        watch: watch.as_deref(),
                    };
                    read_loop(source, rx, shared, &options, &rules)
                })
                .map_err(TraceError::ReaderStart)?
        };
        Ok(Explainer {
            instance,
            backend,
            fallback,
            recorder_lost,
            recorder_missing,
            lock_probes,
            proc_at_start: ProcSnapshot::take(),
            cpus: cpus.to_vec(),
            reporter,
            stop,
            reader: Some(reader),
            lines_limit: options.top,
            rings,
        })
    }

    /// For the measuring threads.
    pub fn reporter(&self) -> Reporter {
        self.reporter.clone()
    }

    /// Stops tracing, explains what is pending, removes the instance.
    pub fn finish(mut self) -> Result<Findings, TraceError> {
        // Let the reader catch up with the last outliers before it stops.
        std::thread::sleep(std::time::Duration::from_millis(50));
        self.stop.store(true, Ordering::Relaxed);
        let out = self
            .reader
            .take()
            .expect("joined once")
            .join()
            .map_err(|_| TraceError::ReaderPanicked)??;
        let (lost, missing) = match self.instance.take() {
            Some(instance) => (instance.lost(&self.cpus), instance.missing.clone()),
            None => (
                self.recorder_lost.load(Ordering::Relaxed),
                self.recorder_missing.clone(),
            ),
        };
        for w in &out.windows {
            w.write()?;
        }
        let mut outliers = out.outliers;
        outliers.sort_by_key(|o| std::cmp::Reverse(o.latency_ns));
        outliers.truncate(self.lines_limit);
        Ok(Findings {
            outliers,
            over_threshold: out.over_threshold,
            dropped_reports: self.reporter.dropped.load(Ordering::Relaxed),
            lost_events: lost,
            missing_events: missing,
            lock_probes: self.lock_probes,
            backend: self.backend,
            fallback: self.fallback.take(),
            steal_ms: self
                .proc_at_start
                .steal_ms_since(&ProcSnapshot::take(), &self.cpus),
        })
    }
}

/// The eBPF recorder on `cpus`, recording what `options` and a watch's `wants` ask for.
fn start_recorder(
    cpus: &[usize],
    options: &Options,
    wants: Option<&watcher::Wants>,
) -> Result<recorder::Recorder, TraceError> {
    // A spinner is never woken either: only the switches away from it matter.
    let wakings = options
        .waits
        .iter()
        .any(|&w| !matches!(w, explain::Wait::Timer | explain::Wait::Spin));
    let all = CpuMask::of(cpus);
    let traced = match wants.and_then(|w| w.cpus.as_ref()) {
        Some(m) => m.and(&all),
        None => all,
    };
    let setup = recorder::Setup {
        wakings,
        locks: wants.map_or(LockWaits::No, |w| w.locks),
        wait_calls: wants.is_some_and(|w| w.wait_calls),
        watched: wants.is_some(),
        follow_forks: wants.is_some_and(|w| w.follow_forks),
        rings: options.rings.unwrap_or_default(),
        stacks: options.stacks,
    };
    recorder::Recorder::start_with(cpus, &traced, setup)
}

/// A private tracefs instance on `cpus` and its ring buffers, where the eBPF recorder could
/// not start (`bpf`: why, said with the tracefs error where that fails too).
fn open_tracefs(cpus: &[usize], bpf: Option<&str>) -> Result<(Instance, Source), TraceError> {
    let both = |e: TraceError| match bpf {
        Some(bpf) => TraceError::NoSource {
            bpf: bpf.to_string(),
            tracefs: Box::new(e),
        },
        None => e,
    };
    let mut inst = Instance::create(cpus, 8192).map_err(both)?;
    let (pages, undecodable) =
        crate::instance::Pages::open(&inst.dir, cpus, crate::instance::EVENTS).map_err(both)?;
    for ev in undecodable {
        if ev == "sched/sched_switch" {
            return Err(both(TraceError::Unsupported(
                "this kernel's sched_switch records are not laid out as rtlab reads them".into(),
            )));
        }
        inst.missing.push(crate::error::Missing::Event(ev));
    }
    let source = Source::Tracefs {
        pages: Box::new(pages),
        dir: inst.dir.clone(),
        jvm_files: Default::default(),
        processes: Default::default(),
    };
    Ok((inst, source))
}

/// The attribution's rules on this machine: a gap of 8 ms without an event is the host's;
/// on a VM, a way out of idle longer than [`IDLE_GAP_MIN_NS`] or ten times the deepest idle
/// state's exit latency too.
fn rules() -> explain::Rules {
    let virtualized = rtlab_sys::sysinfo::system_facts().virtualized;
    explain::Rules {
        gap_ns: 8_000_000,
        virtualized,
        // Guest idle exits take microseconds here (idle states' exits, with a wide margin);
        // the host's share is what makes one take longer.
        idle_gap_ns: virtualized.then(|| {
            rtlab_sys::sysinfo::idle_states()
                .iter()
                .filter(|s| !s.disabled)
                .map(|s| s.latency_us * 10_000)
                .fold(IDLE_GAP_MIN_NS, u64::max)
        }),
        tick: None,
        cut: None,
        unread_from: None,
        elsewhere_unknown: None,
    }
}

impl Drop for Explainer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
