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

pub mod book;
pub mod btf;
mod error;
pub mod event;
pub mod explain;
mod history;
mod instance;
mod reader;
pub mod reason;
mod recorder;
mod replay;
mod tick;
pub mod usdt;
pub mod watch;

pub use error::TraceError;
pub use recorder::{LockProbes, LockWaits, Rings};
pub use rtlab_sys::procfs::ProcSnapshot;

use instance::Instance;
use reader::{read_loop, ReaderOut, Source};
use rtlab_stats::result::Outlier;
use rtlab_sys::affinity::CpuMask;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use watch::{WatchSpec, WatchState};

/// A measuring thread's report of a late sample.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// Index of the series (the caller maps it to a name).
    pub series: u16,
    /// The CPU the thread ran on when it woke.
    pub cpu: u16,
    /// The thread.
    pub tid: i64,
    /// The deadline (CLOCK_MONOTONIC ns).
    pub deadline_ns: u64,
    /// When it ran (for a watch: when its wait returned to user space).
    pub woke_ns: u64,
    /// For a watch's delay measured to the return to user space: when the thread got a CPU
    /// before that (the split of the delay).
    pub running_ns: Option<u64>,
    /// What it waited for.
    pub wait: explain::Wait,
    /// For a sleep timer's delay: how much later than `deadline_ns` the kernel may fire it
    /// (its slack), which the explanation names as such; 0 otherwise.
    pub slack_ns: u64,
}

/// Handed to measuring threads: cheap to clone, never blocks.
#[derive(Debug, Clone)]
pub struct Reporter {
    tx: mpsc::SyncSender<Request>,
    threshold: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
}

impl Reporter {
    /// The current threshold: samples later than this are worth reporting.
    #[inline]
    pub fn threshold_ns(&self) -> u64 {
        self.threshold.load(Ordering::Relaxed)
    }

    /// Reports the calling thread's sample if it is later than the threshold: it should have
    /// run at `deadline_ns` and ran at `woke_ns` on the CPU it is on now.
    #[inline]
    pub fn report_if_late(&self, series: u16, tid: i64, deadline_ns: u64, woke_ns: u64) {
        self.report_wait_if_late(explain::Wait::Timer, series, tid, deadline_ns, woke_ns);
    }

    /// [`Reporter::report_if_late`] for a thread that waited for `wait` (a lock after its
    /// timer, another thread's wake-up call ...); `woke_ns` is when the wait ended.
    #[inline]
    pub fn report_wait_if_late(
        &self,
        wait: explain::Wait,
        series: u16,
        tid: i64,
        deadline_ns: u64,
        woke_ns: u64,
    ) {
        if woke_ns.saturating_sub(deadline_ns) > self.threshold_ns() {
            self.report(Request {
                series,
                cpu: rtlab_sys::affinity::current_cpu() as u16,
                tid,
                deadline_ns,
                woke_ns,
                running_ns: None,
                wait,
                slack_ns: 0,
            });
        }
    }

    /// Reports a late sample (dropped, and counted, if the reader is behind).
    pub fn report(&self, request: Request) {
        if self.tx.try_send(request).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

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

/// What the event source could not record on this kernel, and why: consumers decide by the
/// variant (a watch words a missing lock series apart), the text is for people.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missing {
    /// A tracepoint or tracefs event, by name.
    Event(String),
    /// The kernel stacks of explained delays, and why.
    Stacks(String),
    /// PI lock waits (a watch's `lock` kind), and why.
    LockWaits(String),
    /// A watched process's children from their start, and why.
    Children(String),
    /// The watched threads' wait calls, and why.
    WaitCalls(String),
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::Event(name) => f.write_str(name),
            Missing::Stacks(why) => write!(f, "kernel stacks ({why})"),
            Missing::LockWaits(why) => write!(f, "PI lock waits ({why})"),
            Missing::Children(why) => write!(f, "children from their start ({why})"),
            Missing::WaitCalls(why) => write!(f, "wait calls ({why})"),
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
    /// What the reported samples wait for. When every one is [`explain::Wait::Timer`], the eBPF
    /// recorder leaves `sched_waking` out (one event less on every wakeup in the measured
    /// path): the expiry of the thread's own sleep timer names it as the woken task.
    pub waits: Vec<explain::Wait>,
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
    watch: Option<Arc<Mutex<WatchState>>>,
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

    /// Starts watching `spec`'s threads on `cpus` (every CPU they may run on): their delays
    /// are measured from the events ([`watch`]), and those over the threshold explained.
    /// Unless `options.reader_cpus` says otherwise, the reader runs on the CPUs of `cpus`
    /// the watched threads may not run on, if any.
    pub fn watch(
        cpus: &[usize],
        mut options: Options,
        spec: WatchSpec,
    ) -> Result<Explainer, TraceError> {
        // Wakeups by other threads are the point: record every sched_waking.
        options.waits = vec![explain::Wait::Notify];
        let mut state = WatchState::new(spec);
        // Unless told where, the reader keeps off the watched threads' CPUs, and follows
        // them: those they may not run on where there are any (a real-time program usually
        // has CPUs of its own; the rest do the housekeeping), else those their real-time
        // threads do not run on. So does this setup: its maps and programs are made in the
        // kernel, and a thread woken on the same CPU of a kernel that is not fully
        // preemptible waits for each.
        let mut setup_cpus = None;
        if options.reader_cpus.is_empty() {
            state.let_reader_follow(cpus);
            let now = rtlab_sys::time::monotonic_now_ns();
            if let Some(spare) = state
                .reader_cpus(now)
                .filter(|spare| spare.len() < cpus.len())
            {
                setup_cpus = Some(spare.clone());
                options.reader_cpus = spare;
            }
        }
        let state = Arc::new(Mutex::new(state));
        let setup = move || {
            if options.rings.is_none() {
                options.rings = Some(rings_for_this_machine(cpus.len()));
            }
            Self::start_with(cpus, options, Some(state))
        };
        match setup_cpus {
            // In a thread of its own there, which changes no other thread's affinity (the
            // caller's, which a command it starts would inherit).
            Some(spare) => std::thread::scope(|s| {
                s.spawn(move || {
                    let _ = rtlab_sys::affinity::set_current_thread_affinity(
                        &rtlab_sys::affinity::CpuList::from(spare),
                    );
                    setup()
                })
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
            }),
            None => setup(),
        }
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

    /// The watcher's state (for [`Explainer::watch`]).
    pub fn watch_state(&self) -> Option<&Arc<Mutex<WatchState>>> {
        self.watch.as_ref()
    }

    fn start_with(
        cpus: &[usize],
        options: Options,
        watch: Option<Arc<Mutex<WatchState>>>,
    ) -> Result<Explainer, TraceError> {
        if rtlab_sys::process::effective_uid() != 0 {
            return Err(TraceError::NotRoot("eBPF and tracefs are"));
        }
        let mut fallback = None;
        let mut source = None;
        if options.backend != Backend::Tracefs {
            // A spinner is never woken either: only the switches away from it matter.
            let wakings = options
                .waits
                .iter()
                .any(|&w| !matches!(w, explain::Wait::Timer | explain::Wait::Spin));
            // A watch measures its threads' PI lock waits too.
            let locks = watch.as_ref().map_or(LockWaits::No, |w| {
                w.lock().unwrap_or_else(|p| p.into_inner()).spec().locks
            });
            // A watch traces where its threads may run (the reader follows changes).
            let all = CpuMask::of(cpus);
            let traced = match watch.as_ref() {
                Some(w) => {
                    let w = w.lock().unwrap_or_else(|p| p.into_inner());
                    w.cpus_wanted().map_or_else(|| all.clone(), |m| m.and(&all))
                }
                None => all,
            };
            // A watch ends its threads' delays where their waits return to user space.
            let waits = watch
                .as_ref()
                .is_some_and(|w| w.lock().unwrap_or_else(|p| p.into_inner()).spec().user_view);
            let setup = recorder::Setup {
                wakings,
                locks,
                wait_calls: waits,
                watched: watch.is_some(),
                follow_forks: watch.as_ref().is_some_and(|w| {
                    w.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .follows_children()
                }),
                rings: options.rings.unwrap_or_default(),
                stacks: options.stacks,
            };
            match recorder::Recorder::start_with(cpus, &traced, setup) {
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
                    if let (true, Some(w)) = (r.takes_watched(), watch.as_ref()) {
                        let w = w.lock().unwrap_or_else(|p| p.into_inner());
                        let _ = r.set_watched(&w.watched_processes());
                    }
                }
                s
            }
            None => {
                // Where eBPF failed first, both reasons: the tracefs one alone would hide it.
                let both = |e: TraceError| match &fallback {
                    Some(bpf) => TraceError::NoSource {
                        bpf: bpf.clone(),
                        tracefs: Box::new(e),
                    },
                    None => e,
                };
                let inst = Instance::create(cpus, 8192).map_err(both)?;
                let path = inst.dir.join("trace_pipe");
                let pipe = rtlab_sys::fs::open_nonblocking(&path)
                    .map_err(|e| both(TraceError::io(&path, e)))?;
                let dir = inst.dir.clone();
                instance = Some(inst);
                Source::Text {
                    pipe,
                    buf: vec![0u8; 4096],
                    partial: String::new(),
                    lost: Vec::new(),
                    dir,
                    jvm_files: Default::default(),
                    processes: Default::default(),
                }
            }
        };
        let backend = match source {
            Source::Bpf(_) => Backend::Bpf,
            Source::Text { .. } => Backend::Tracefs,
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
        let virtualized = rtlab_sys::sysinfo::system_facts().virtualized;
        let rules = explain::Rules {
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
        };
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
            watch,
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

impl Drop for Explainer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
