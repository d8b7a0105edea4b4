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
pub mod event;
pub mod explain;
pub mod reason;
mod recorder;
mod replay;

use event::{format_line, parse_text, Event, Kind, Task};
use rtlab_stats::result::{Cause, CauseKind, Outlier};
use rtlab_sys::time::monotonic_now_ns;
use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

/// Why the tracer could not start.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TraceError(pub String);

/// Events the explainer enables (category/name); missing ones are listed, not fatal. Each
/// costs the measured CPU a few hundred ns per occurrence on a VM, so only those the
/// attribution uses are on (not `timer/hrtimer_expire_entry` nor `power/cpu_idle`, which
/// would add three events to every wakeup of an idle CPU).
const EVENTS: &[&str] = &[
    "sched/sched_switch",
    "sched/sched_waking",
    "sched/sched_migrate_task",
    "irq/irq_handler_entry",
    "irq/irq_handler_exit",
    "irq/softirq_entry",
    "irq/softirq_exit",
    "irq_vectors/local_timer_entry",
    "irq_vectors/local_timer_exit",
    "irq_vectors/reschedule_entry",
    "irq_vectors/reschedule_exit",
    "irq_vectors/call_function_entry",
    "irq_vectors/call_function_exit",
    "irq_vectors/call_function_single_entry",
    "irq_vectors/call_function_single_exit",
    "irq_vectors/irq_work_entry",
    "irq_vectors/irq_work_exit",
    "irq_vectors/x86_platform_ipi_entry",
    "irq_vectors/x86_platform_ipi_exit",
    "nmi/nmi_handler",
];

/// A private tracefs instance; removed (and tracefs unmounted if rtlab mounted it) on drop.
#[derive(Debug)]
struct Instance {
    dir: PathBuf,
    mounted_here: bool,
    missing: Vec<String>,
}

fn write(path: &Path, value: &str) -> Result<(), TraceError> {
    std::fs::write(path, value).map_err(|e| TraceError(format!("{}: {e}", path.display())))
}

impl Instance {
    fn create(cpus: &[usize], buffer_kb: u32) -> Result<Instance, TraceError> {
        if rtlab_sys::process::effective_uid() != 0 {
            return Err(TraceError("needs root (tracefs is root-only here)".into()));
        }
        let mut mounted_here = false;
        let root = match rtlab_sys::probe::tracefs_mount() {
            Some(p) => p.to_path_buf(),
            None => {
                rtlab_sys::tracefs::mount()
                    .map_err(|e| TraceError(format!("tracefs is not mounted and {e}")))?;
                mounted_here = true;
                PathBuf::from(rtlab_sys::tracefs::MOUNT_POINT)
            }
        };
        let dir = root
            .join("instances")
            .join(format!("rtlab-{}", std::process::id()));
        // An instance of a crashed run with our pid cannot exist (pids are unique while
        // alive), but stale ones of dead pids are removed.
        if let Ok(entries) = std::fs::read_dir(root.join("instances")) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if let Some(pid) = name
                    .strip_prefix("rtlab-")
                    .and_then(|p| p.parse::<u32>().ok())
                {
                    if !Path::new(&format!("/proc/{pid}")).exists() {
                        let _ = std::fs::remove_dir(e.path());
                    }
                }
            }
        }
        std::fs::create_dir(&dir)
            .map_err(|e| TraceError(format!("cannot create {}: {e}", dir.display())))?;
        let mut inst = Instance {
            dir,
            mounted_here,
            missing: Vec::new(),
        };
        write(&inst.dir.join("trace_clock"), "mono")?;
        write(&inst.dir.join("buffer_size_kb"), &buffer_kb.to_string())?;
        let mask: u128 = cpus.iter().fold(0, |m, &c| m | (1u128 << c.min(127)));
        write(&inst.dir.join("tracing_cpumask"), &format!("{mask:x}"))?;
        for ev in EVENTS {
            let enable = inst.dir.join("events").join(ev).join("enable");
            if write(&enable, "1").is_err() {
                inst.missing.push(ev.to_string());
            }
        }
        if inst
            .missing
            .iter()
            .any(|e| e.starts_with("sched/sched_switch"))
        {
            return Err(TraceError("the sched_switch event is unavailable".into()));
        }
        write(&inst.dir.join("tracing_on"), "1")?;
        Ok(inst)
    }

    /// Events lost by the kernel ring buffers (overruns and drops), per the per-CPU stats.
    fn lost(&self, cpus: &[usize]) -> u64 {
        cpus.iter()
            .filter_map(|c| {
                std::fs::read_to_string(self.dir.join(format!("per_cpu/cpu{c}/stats"))).ok()
            })
            .map(|stats| {
                stats
                    .lines()
                    .filter(|l| l.starts_with("overrun:") || l.starts_with("dropped events:"))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                    .sum::<u64>()
            })
            .sum()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = write(&self.dir.join("tracing_on"), "0");
        let _ = write(&self.dir.join("events/enable"), "0");
        // The kernel refuses to remove an instance while a reader holds trace_pipe open;
        // the reader is joined before this runs.
        let _ = std::fs::remove_dir(&self.dir);
        if self.mounted_here {
            let _ = rtlab_sys::tracefs::unmount();
        }
    }
}

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
    /// When it ran.
    pub woke_ns: u64,
    /// What it waited for.
    pub wait: explain::Wait,
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
                wait,
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
}

/// What the explainer found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Explained outliers, largest first.
    pub outliers: Vec<Outlier>,
    /// Readable lines, one per outlier, in the same order.
    pub lines: Vec<String>,
    /// Samples over the threshold (explained or not).
    pub over_threshold: u64,
    /// Reports dropped because the reader was behind.
    pub dropped_reports: u64,
    /// Events the kernel lost.
    pub lost_events: u64,
    /// Events that were not available on this kernel.
    pub missing_events: Vec<String>,
    /// The event source used (`bpf` or `tracefs`).
    pub backend: &'static str,
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
    backend: &'static str,
    fallback: Option<String>,
    recorder_lost: Arc<AtomicU64>,
    recorder_missing: Vec<String>,
    proc_at_start: ProcSnapshot,
    cpus: Vec<usize>,
    reporter: Reporter,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<Result<ReaderOut, String>>>,
    lines_limit: usize,
}

#[derive(Debug, Default)]
struct ReaderOut {
    outliers: Vec<(Outlier, String)>,
    over_threshold: u64,
    /// `--trace-out` windows, written when the run ends (formatting them while it runs
    /// would keep the reader from its events).
    windows: Vec<SavedWindow>,
}

#[derive(Debug)]
struct SavedWindow {
    path: PathBuf,
    header: String,
    /// Every traced CPU's events in time order, with the kernel's text where kept.
    events: Vec<(Event, Option<String>)>,
}

impl SavedWindow {
    fn write(&self) -> Result<(), String> {
        let mut text = self.header.clone();
        for (e, raw) in &self.events {
            match raw {
                Some(line) => text.push_str(line),
                None => text.push_str(&format_line(e)),
            }
            text.push('\n');
        }
        // Never through a link planted at the predictable name (rtlab runs as root).
        rtlab_sys::fs::write_atomically(&self.path, text.as_bytes())
            .map_err(|e| format!("--trace-out {}: {e}", self.path.display()))
    }
}

/// On a VM, a way out of idle longer than this (or ten times the deepest idle state's exit
/// latency) is the host's.
const IDLE_GAP_MIN_NS: u64 = 500_000;
/// Keeps this much history per CPU.
const RETENTION_NS: u64 = 1_000_000_000;
/// History kept before a deadline, to know who was running.
const LEAD_NS: u64 = 20_000_000;
/// A request is explained once the trace reached this far past its wake time, or
/// `GIVE_UP_NS` after it in wall time.
const SETTLE_NS: u64 = 2_000_000;
const GIVE_UP_NS: u64 = 300_000_000;

impl Explainer {
    /// Starts tracing `cpus`.
    pub fn start(cpus: &[usize], options: Options) -> Result<Explainer, TraceError> {
        if rtlab_sys::process::effective_uid() != 0 {
            return Err(TraceError(
                "needs root (eBPF and tracefs are root-only here)".into(),
            ));
        }
        let mut fallback = None;
        let mut source = None;
        if options.backend != Backend::Tracefs {
            let wakings = options.waits.iter().any(|&w| w != explain::Wait::Timer);
            match recorder::Recorder::start(cpus, wakings) {
                Ok(r) => source = Some(Source::Bpf(Box::new(r))),
                Err(e) if options.backend == Backend::Bpf => {
                    return Err(TraceError(format!("eBPF recorder: {e}")))
                }
                Err(e) => fallback = Some(e.to_string()),
            }
        }
        let mut instance = None;
        let mut recorder_missing = Vec::new();
        let source = match source {
            Some(s) => {
                if let Source::Bpf(r) = &s {
                    recorder_missing = r.missing.clone();
                }
                s
            }
            None => {
                let inst = Instance::create(cpus, 8192)?;
                let pipe = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags_nonblock()
                    .open(inst.dir.join("trace_pipe"))
                    .map_err(|e| TraceError(format!("trace_pipe: {e}")))?;
                instance = Some(inst);
                Source::Text {
                    pipe,
                    buf: vec![0u8; 4096],
                    partial: String::new(),
                    lost: Vec::new(),
                }
            }
        };
        let backend = match source {
            Source::Bpf(_) => Backend::Bpf.name(),
            Source::Text { .. } => Backend::Tracefs.name(),
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
        };
        let reader = {
            let stop = stop.clone();
            let options = options.clone();
            let lost = recorder_lost.clone();
            std::thread::Builder::new()
                .name("rtlab-explain".into())
                .spawn(move || read_loop(source, rx, &stop, &threshold, &options, &rules, &lost))
                .map_err(|e| TraceError(e.to_string()))?
        };
        Ok(Explainer {
            instance,
            backend,
            fallback,
            recorder_lost,
            recorder_missing,
            proc_at_start: ProcSnapshot::take(),
            cpus: cpus.to_vec(),
            reporter,
            stop,
            reader: Some(reader),
            lines_limit: options.top,
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
            .map_err(|_| TraceError("the explainer's reader panicked".into()))?
            .map_err(TraceError)?;
        let (lost, missing) = match self.instance.take() {
            Some(instance) => (instance.lost(&self.cpus), instance.missing.clone()),
            None => (
                self.recorder_lost.load(Ordering::Relaxed),
                self.recorder_missing.clone(),
            ),
        };
        for w in &out.windows {
            w.write().map_err(TraceError)?;
        }
        let mut outliers = out.outliers;
        outliers.sort_by_key(|o| std::cmp::Reverse(o.0.latency_ns));
        outliers.truncate(self.lines_limit);
        Ok(Findings {
            lines: outliers.iter().map(|o| o.1.clone()).collect(),
            outliers: outliers.into_iter().map(|o| o.0).collect(),
            over_threshold: out.over_threshold,
            dropped_reports: self.reporter.dropped.load(Ordering::Relaxed),
            lost_events: lost,
            missing_events: missing,
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

trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc_o_nonblock())
    }
}

/// O_NONBLOCK on Linux (all architectures rtlab supports).
const fn libc_o_nonblock() -> i32 {
    0o4000
}

/// Per-CPU history.
#[derive(Debug, Default)]
struct History {
    events: VecDeque<Event>,
    raw: VecDeque<String>,
    /// The task current before the oldest kept event.
    base: Option<Task>,
    newest_ns: u64,
    /// The latest scheduler ticks' times (for the tick's grid).
    ticks: VecDeque<u64>,
}

impl History {
    fn push(&mut self, e: Event, raw: Option<String>) {
        self.newest_ns = self.newest_ns.max(e.ts_ns);
        if let Kind::HrtimerEntry { function, .. } = &e.kind {
            if explain::is_tick(function) {
                if self.ticks.len() >= 64 {
                    self.ticks.pop_front();
                }
                self.ticks.push_back(e.ts_ns);
            }
        }
        // The eBPF recorder can store an NMI's or IRQ's record between another event's
        // timestamp and its slot: keep the history sorted.
        let at = if self.events.back().is_some_and(|l| l.ts_ns > e.ts_ns) {
            self.events.partition_point(|x| x.ts_ns <= e.ts_ns)
        } else {
            self.events.len()
        };
        self.events.insert(at, e);
        if let Some(r) = raw {
            if at <= self.raw.len() {
                self.raw.insert(at, r);
            }
        }
        while self
            .events
            .front()
            .is_some_and(|f| f.ts_ns + RETENTION_NS < self.newest_ns)
        {
            if let Some(old) = self.events.pop_front() {
                if let Kind::Switch { next, .. } = old.kind {
                    self.base = Some(next);
                }
            }
            self.raw.pop_front();
        }
    }
}

/// Where the reader gets events.
enum Source {
    /// trace_pipe text.
    Text {
        pipe: std::fs::File,
        buf: Vec<u8>,
        partial: String,
        /// Losses waiting for the next event of their CPU.
        lost: Vec<(u16, u64)>,
    },
    /// The eBPF recorder's per-CPU rings.
    Bpf(Box<recorder::Recorder>),
}

impl Source {
    /// Hands newly arrived events (and their raw text) to `f`; returns how many arrived.
    fn poll(
        &mut self,
        keep_raw: bool,
        f: &mut dyn FnMut(Event, Option<String>),
    ) -> Result<usize, String> {
        match self {
            Source::Text {
                pipe,
                buf,
                partial,
                lost,
            } => {
                let got = match pipe.read(buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
                    Err(e) => return Err(format!("reading trace_pipe: {e}")),
                };
                if got > 0 {
                    partial.push_str(&String::from_utf8_lossy(&buf[..got]));
                    let complete = partial.rfind('\n').map_or(0, |i| i + 1);
                    parse_text(&partial[..complete], lost, &mut |e, line| {
                        f(e, keep_raw.then(|| line.to_string()))
                    });
                    partial.drain(..complete);
                }
                Ok(got)
            }
            Source::Bpf(r) => Ok(r.drain(|e| {
                let raw = keep_raw.then(|| format_line(&e));
                f(e, raw)
            })),
        }
    }

    /// How long to sleep when nothing arrived: the text pipe is read in small pieces and
    /// often; the eBPF rings hold seconds of events, and every poll is a wakeup of a CPU.
    fn idle_ms(&self) -> u64 {
        match self {
            Source::Text { .. } => 2,
            Source::Bpf(_) => 10,
        }
    }
}

fn read_loop(
    mut source: Source,
    rx: mpsc::Receiver<Request>,
    stop: &AtomicBool,
    threshold: &AtomicU64,
    options: &Options,
    rules: &explain::Rules,
    lost: &AtomicU64,
) -> Result<ReaderOut, String> {
    if !options.reader_cpus.is_empty() {
        let _ = rtlab_sys::affinity::set_current_thread_affinity(
            &rtlab_sys::affinity::CpuList::from(options.reader_cpus.clone()),
        );
    }
    // The text source keeps each window's lines as the kernel wrote them; the eBPF
    // recorder's are formatted only for the windows written (formatting every event would
    // slow the reader until it loses events).
    let keep_raw = options.trace_out.is_some() && matches!(source, Source::Text { .. });
    if let Some(dir) = &options.trace_out {
        std::fs::create_dir_all(dir)
            .and_then(|()| rtlab_sys::fs::check_dir_owner(dir))
            .map_err(|e| format!("--trace-out {}: {e}", dir.display()))?;
    }
    let mut histories: Vec<History> = Vec::new();
    let mut pending: Vec<(Request, u64)> = Vec::new();
    let mut out = ReaderOut::default();
    // Text reads are small (4 KiB): the kernel formats the text inside each read, and on a
    // non-preemptible kernel a long read would hold a measured CPU when there is no spare one.
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let got = source.poll(keep_raw, &mut |e, raw| {
            let cpu = e.cpu as usize;
            if histories.len() <= cpu {
                histories.resize_with(cpu + 1, History::default);
            }
            histories[cpu].push(e, raw);
        })?;
        if let Source::Bpf(r) = &source {
            lost.store(r.lost(), Ordering::Relaxed);
        }
        while let Ok(r) = rx.try_recv() {
            out.over_threshold += 1;
            pending.push((r, monotonic_now_ns()));
        }
        let now = monotonic_now_ns();
        let mut i = 0;
        while i < pending.len() {
            let (r, asked) = pending[i];
            let caught_up = histories
                .get(r.cpu as usize)
                .is_some_and(|h| h.newest_ns >= r.woke_ns + SETTLE_NS);
            if caught_up || now > asked + GIVE_UP_NS || stopping {
                pending.swap_remove(i);
                let (o, window) = explain_one(&r, &histories, rules, options, out.outliers.len())?;
                out.outliers.push(o);
                out.windows.extend(window);
                // Top-N mode: once N are in, only later samples above the N-th matter.
                if options.threshold_ns.is_none() && out.outliers.len() >= options.top {
                    out.outliers
                        .sort_by_key(|o| std::cmp::Reverse(o.0.latency_ns));
                    out.outliers.truncate(options.top);
                    let nth = out.outliers.last().map_or(0, |o| o.0.latency_ns);
                    threshold.fetch_max(nth, Ordering::Relaxed);
                }
            } else {
                i += 1;
            }
        }
        if stopping && pending.is_empty() {
            return Ok(out);
        }
        if got == 0 {
            std::thread::sleep(std::time::Duration::from_millis(source.idle_ms()));
        }
    }
}

/// The wake-ups of `tid` (wakings, its timer's expiry) on the other CPUs within `[from, to]` (the waker's side of a
/// cross-CPU wakeup), in time order.
fn wakings_elsewhere(histories: &[History], cpu: u16, tid: i64, from: u64, to: u64) -> Vec<Event> {
    let mut out: Vec<Event> = histories
        .iter()
        .enumerate()
        .filter(|(c, _)| *c != cpu as usize)
        .flat_map(|(_, h)| {
            let start = h.events.partition_point(|e| e.ts_ns < from);
            h.events
                .range(start..)
                .take_while(move |e| e.ts_ns <= to)
                .filter(move |e| e.kind.woken().is_some_and(|t| t.pid == tid))
                .cloned()
        })
        .collect();
    out.sort_by_key(|e| e.ts_ns);
    out
}

/// The task `pid` as the scheduler events last named it, else as /proc names it now.
fn find_task(histories: &[History], pid: i64) -> Task {
    for h in histories {
        for e in h.events.iter().rev() {
            if let Kind::Switch { prev, next, .. } = &e.kind {
                for t in [prev, next] {
                    if t.pid == pid {
                        return t.clone();
                    }
                }
            }
        }
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_else(|_| "<...>".into());
    // Field 18 of /proc/<pid>/stat is the kernel priority minus 100.
    let prio = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1.to_string();
            after.split_whitespace().nth(15)?.parse::<i64>().ok()
        })
        .map_or(120, |p| p + 100);
    Task { comm, pid, prio }
}

/// A CPU's events from `from` on, and the task current before the first of them (the base,
/// updated by the switches before it).
fn window_of(h: &History, from: u64) -> (Option<Task>, Vec<Event>) {
    let start = h.events.partition_point(|e| e.ts_ns < from);
    let mut base = h.base.clone();
    for e in h.events.range(..start) {
        if let Kind::Switch { next, .. } = &e.kind {
            base = Some(next.clone());
        }
    }
    (base, h.events.range(start..).cloned().collect())
}

/// Every traced CPU's events in `[from, to]` (with the kernel's lines where the text source
/// kept them), in time order.
fn window_events(histories: &[History], from: u64, to: u64) -> Vec<(Event, Option<String>)> {
    let mut out: Vec<(Event, Option<String>)> = Vec::new();
    for h in histories {
        let start = h.events.partition_point(|e| e.ts_ns < from);
        let end = h.events.partition_point(|e| e.ts_ns <= to).max(start);
        let kept = h.raw.len() == h.events.len();
        for i in start..end {
            out.push((h.events[i].clone(), kept.then(|| h.raw[i].clone())));
        }
    }
    out.sort_by_key(|(e, _)| e.ts_ns);
    out
}

fn explain_one(
    r: &Request,
    histories: &[History],
    rules: &explain::Rules,
    options: &Options,
    index: usize,
) -> Result<((Outlier, String), Option<SavedWindow>), String> {
    let history = histories.get(r.cpu as usize);
    let from = r.deadline_ns.saturating_sub(LEAD_NS);
    let elsewhere = wakings_elsewhere(histories, r.cpu, r.tid, from, r.woke_ns);
    // Who woke the thread last within the window (for a lock wait: the holder), and where.
    let waker = history
        .into_iter()
        .flat_map(|h| {
            let start = h.events.partition_point(|e| e.ts_ns < r.deadline_ns);
            h.events.range(start..).take_while(|e| e.ts_ns <= r.woke_ns)
        })
        .chain(elsewhere.iter().filter(|e| e.ts_ns >= r.deadline_ns))
        .filter(|e| e.kind.woken().is_some_and(|t| t.pid == r.tid))
        .max_by_key(|e| e.ts_ns)
        .map(|e| (e.current_pid, e.cpu))
        .filter(|&(p, _)| p > 0 && p != r.tid);
    // A thread blocked on another (a lock holder, a peer) waits for what that one's CPU did.
    let peer = waker
        .filter(|&(_, cpu)| r.wait.blocks() && cpu != r.cpu)
        .and_then(|(pid, cpu)| {
            let (base, mut events) = window_of(histories.get(cpu as usize)?, from);
            events.extend(wakings_elsewhere(histories, cpu, pid, from, r.woke_ns));
            // Losses elsewhere may have taken the peer's wakeup with them.
            events.extend(
                histories
                    .iter()
                    .enumerate()
                    .filter(|(c, _)| *c != cpu as usize)
                    .flat_map(|(_, h)| h.events.iter())
                    .filter(|e| {
                        matches!(e.kind, Kind::Lost(_)) && e.ts_ns >= from && e.ts_ns <= r.woke_ns
                    })
                    .cloned(),
            );
            events.sort_by_key(|e| e.ts_ns);
            let tick = histories
                .get(cpu as usize)
                .and_then(|h| explain::tick_grid(&h.ticks.iter().copied().collect::<Vec<u64>>()));
            Some(explain::Peer {
                cpu,
                events,
                base,
                tick,
            })
        });
    let late = explain::Late {
        tid: r.tid,
        deadline_ns: r.deadline_ns,
        woke_ns: r.woke_ns,
        wait: r.wait,
        waker: waker.map(|(p, _)| find_task(histories, p)),
        cpu: r.cpu,
        peer,
    };
    let latency = r.woke_ns.saturating_sub(r.deadline_ns);
    let series = options
        .series_names
        .get(r.series as usize)
        .cloned()
        .unwrap_or_else(|| format!("series{}", r.series));
    let mut saved = None;
    let causes = match history {
        Some(h) => {
            let (base, mut window) = window_of(h, from);
            if !elsewhere.is_empty() {
                window.extend(elsewhere.iter().cloned());
                window.sort_by_key(|e| e.ts_ns);
            }
            if let Some(dir) = &options.trace_out {
                saved = Some(SavedWindow {
                    path: dir.join(format!("outlier-{index:04}-{series}.txt").replace('/', "_")),
                    header: format!(
                        "# {series}: cpu {} tid {} deadline {} woke {} (latency {} ns); every traced CPU\n",
                        r.cpu, r.tid, r.deadline_ns, r.woke_ns, latency
                    ),
                    events: window_events(histories, from, r.woke_ns + SETTLE_NS),
                });
            }
            let ticks: Vec<u64> = h.ticks.iter().copied().collect();
            let rules = explain::Rules {
                tick: explain::tick_grid(&ticks),
                ..*rules
            };
            explain::attribute(&window, base.as_ref(), &late, &rules)
        }
        None => vec![Cause {
            kind: CauseKind::Unexplained,
            duration_ns: latency,
            task: None,
            pid: None,
            prio: None,
            detail: Some(reason::Reason::NoEventOnCpu { cpu: r.cpu }.to_string()),
            reason: Some(reason::Reason::NoEventOnCpu { cpu: r.cpu }.code()),
        }],
    };
    let at_ns = r.deadline_ns.saturating_sub(options.started_ns);
    let line = explain::describe(&series, latency, at_ns, &causes);
    Ok((
        (
            Outlier {
                series,
                at_ns,
                latency_ns: latency,
                cpu: Some(r.cpu as u32),
                causes,
            },
            line,
        ),
        saved,
    ))
}

/// What /proc says about interference over a run, where no tracer is available.
#[derive(Debug, Clone, Default)]
pub struct ProcSnapshot {
    steal_ticks: Vec<u64>,
    irqs: Vec<u64>,
    ctxt: u64,
}

impl ProcSnapshot {
    /// Reads /proc/stat and /proc/interrupts now.
    pub fn take() -> ProcSnapshot {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let mut steal_ticks = Vec::new();
        let mut ctxt = 0;
        for l in stat.lines() {
            let mut f = l.split_whitespace();
            match f.next() {
                Some(cpu) if cpu.starts_with("cpu") && cpu.len() > 3 => {
                    steal_ticks.push(f.nth(7).and_then(|v| v.parse().ok()).unwrap_or(0));
                }
                Some("ctxt") => ctxt = f.next().and_then(|v| v.parse().ok()).unwrap_or(0),
                _ => {}
            }
        }
        let ints = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
        let ncpu = steal_ticks.len();
        let mut irqs = vec![0u64; ncpu];
        for l in ints.lines().skip(1) {
            for (i, v) in l.split_whitespace().skip(1).take(ncpu).enumerate() {
                irqs[i] += v.parse::<u64>().unwrap_or(0);
            }
        }
        ProcSnapshot {
            steal_ticks,
            irqs,
            ctxt,
        }
    }

    /// Time the host took from `cpus` (steal time) between `self` and `later`, in ms.
    pub fn steal_ms_since(&self, later: &ProcSnapshot, cpus: &[usize]) -> f64 {
        cpus.iter()
            .map(|&c| {
                later
                    .steal_ticks
                    .get(c)
                    .unwrap_or(&0)
                    .saturating_sub(*self.steal_ticks.get(c).unwrap_or(&0))
            })
            .sum::<u64>() as f64
            * 10.0
    }

    /// One sentence on what happened on `cpus` between `self` and `later`.
    pub fn describe_since(&self, later: &ProcSnapshot, cpus: &[usize]) -> String {
        // /proc/stat counts in USER_HZ, 100 on every Linux ABI rtlab runs on.
        let tick_ms = 10.0;
        let parts: Vec<String> = cpus
            .iter()
            .map(|&c| {
                let steal =
                    later.steal_ticks.get(c).unwrap_or(&0) - self.steal_ticks.get(c).unwrap_or(&0);
                let irqs = later.irqs.get(c).unwrap_or(&0) - self.irqs.get(c).unwrap_or(&0);
                format!(
                    "CPU {c}: {:.0} ms stolen by the host, {irqs} interrupts",
                    steal as f64 * tick_ms
                )
            })
            .collect();
        format!(
            "{}; {} context switches in all",
            parts.join("; "),
            later.ctxt.saturating_sub(self.ctxt)
        )
    }
}
