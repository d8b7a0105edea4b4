//! The reader thread: drains the event source into the per-CPU history, takes the measuring
//! threads' reports, and explains each once the trace has caught up with it.

use crate::error::TraceError;
use crate::event::{format_line_as, Event, Kind};
use crate::history::{
    find_task, last_waker, late_window, peer_window, stacks_of, wakings_elsewhere, window_events,
    with_jvm_stops, History,
};
use crate::observer::as_observer;
use crate::options::Options;
use crate::reason::taskless;
use crate::reason::Reason;
use crate::request::Request;
use crate::watcher::{Probes, Watcher};
use crate::{explain, recorder};
use rtlab_stats::result::{Cause, CauseKind, Outlier};
use rtlab_sys::affinity::CpuMask;
use rtlab_sys::time::monotonic_now_ns;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};

/// History kept before a deadline, to know who was running.
const LEAD_NS: u64 = 20_000_000;
/// A request is explained once the trace reached this far past its wake time, or
/// `GIVE_UP_NS` after it in wall time.
const SETTLE_NS: u64 = 2_000_000;
const GIVE_UP_NS: u64 = 300_000_000;
/// The kernel stacks of events this old are no longer needed, unless a pending explanation's
/// window reaches back to them: twice the history's retention.
const STACKS_KEPT_NS: u64 = 2_000_000_000;

#[derive(Debug, Default)]
pub(crate) struct ReaderOut {
    pub(crate) outliers: Vec<Outlier>,
    pub(crate) over_threshold: u64,
    /// `--trace-out` windows, written when the run ends (formatting them while it runs
    /// would keep the reader from its events).
    pub(crate) windows: Vec<SavedWindow>,
}

#[derive(Debug)]
pub(crate) struct SavedWindow {
    path: PathBuf,
    header: String,
    /// Every traced CPU's events in time order.
    events: Vec<Event>,
}

impl SavedWindow {
    /// The `index`-th outlier's window, of `series`, for `--trace-out` in `dir`: every traced
    /// CPU's events from `from` to a little past its wake.
    fn new(
        dir: &std::path::Path,
        (index, series): (usize, &str),
        r: &Request,
        histories: &[History],
        from: u64,
    ) -> SavedWindow {
        let latency = r.woke_ns.saturating_sub(r.deadline_ns);
        SavedWindow {
            path: dir.join(format!("outlier-{index:04}-{series}.txt").replace('/', "_")),
            header: format!(
                "# {series}: cpu {} tid {} deadline {} woke {} (latency {latency} ns); every traced CPU\n",
                r.cpu, r.tid, r.deadline_ns, r.woke_ns
            ),
            events: window_events(histories, from, r.woke_ns + SETTLE_NS),
        }
    }

    pub(crate) fn write(&self) -> Result<(), TraceError> {
        let mut text = self.header.clone();
        // The tasks' names as the window's scheduler events give them.
        let mut names: std::collections::HashMap<i64, &str> = Default::default();
        for e in &self.events {
            match &e.kind {
                Kind::Switch { prev, next, .. } => {
                    names.insert(prev.pid, &prev.comm);
                    names.insert(next.pid, &next.comm);
                }
                Kind::Waking { task, .. } | Kind::Migrate { task, .. } => {
                    names.insert(task.pid, &task.comm);
                }
                _ => {}
            }
        }
        for e in &self.events {
            let current = names.get(&e.current_pid).copied();
            text.push_str(&format_line_as(e, current));
            text.push('\n');
        }
        // Never through a link planted at the predictable name (rtlab runs as root).
        rtlab_sys::fs::write_atomically(&self.path, text.as_bytes()).map_err(|error| {
            TraceError::TraceOut {
                path: self.path.clone(),
                error,
            }
        })
    }
}

/// Where the reader gets events.
pub(crate) enum Source {
    /// A tracefs instance's ring buffers, read raw.
    Tracefs {
        pages: Box<crate::instance::Pages>,
        /// The instance's directory (a JVM's uprobe events are enabled there), the libjvm.so
        /// files probed (by device and inode), and the processes of the threads whose JVM
        /// probes fired (the events name the thread only).
        dir: PathBuf,
        jvm_files: std::collections::HashSet<(u64, u64)>,
        processes: std::collections::HashMap<i64, u32>,
    },
    /// The eBPF recorder's per-CPU rings.
    Bpf(Box<recorder::Recorder>),
}

impl Source {
    /// When `cpu`'s events were all read up to.
    fn read_until(&self, cpu: u16) -> u64 {
        match self {
            Source::Bpf(r) => r.read_until(cpu),
            Source::Tracefs { pages, .. } => pages.read_until(cpu),
        }
    }

    /// Where the events of every CPU below `cpus` were all read up to.
    fn read_through(&self, cpus: usize) -> u64 {
        (0..cpus as u16)
            .map(|c| self.read_until(c))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Hands newly arrived events to `f`; returns how many records arrived (eBPF), or on how
    /// many CPUs pages were left to read (tracefs): 0 when there was nothing more.
    fn poll(&mut self, f: &mut dyn FnMut(Event)) -> Result<usize, TraceError> {
        match self {
            Source::Tracefs {
                pages, processes, ..
            } => pages.poll(&mut |mut e| {
                if let Kind::Jvm { process, .. } = &mut e.kind {
                    let tid = e.current_pid;
                    *process = *processes
                        .entry(tid)
                        .or_insert_with(|| rtlab_sys::procfs::process_of(tid).unwrap_or(0));
                }
                f(e)
            }),
            Source::Bpf(r) => Ok(r.drain(f)),
        }
    }

    /// How long to sleep when nothing arrived: the rings hold seconds of events, and every
    /// poll is a wakeup of a CPU.
    fn idle_ms(&self) -> u64 {
        10
    }
}

/// The per-CPU histories.
#[derive(Debug, Default)]
pub(crate) struct Histories {
    per_cpu: Vec<History>,
}

impl std::ops::Deref for Histories {
    type Target = [History];
    fn deref(&self) -> &[History] {
        &self.per_cpu
    }
}

impl Histories {
    /// A drain is over: its events are merged into each CPU's history.
    pub(crate) fn settle(&mut self) {
        for h in &mut self.per_cpu {
            h.settle();
        }
    }

    /// Drops what no explanation needs any more (see [`History::trim`]): nothing from
    /// `keep_from_ns` on.
    fn trim(&mut self, keep_from_ns: u64, now_ns: u64) {
        for h in &mut self.per_cpu {
            h.trim(keep_from_ns, now_ns);
        }
    }
}

impl Histories {
    /// Keeps `e` (each CPU's events in time order, the CPUs one after another).
    fn offer(&mut self, e: Event) {
        let cpu = e.cpu as usize;
        if self.per_cpu.len() <= cpu {
            self.per_cpu.resize_with(cpu + 1, History::default);
        }
        self.per_cpu[cpu].push(e);
    }
}

/// Which CPUs were traced when: the mask in effect from each change on, oldest first (the
/// last few changes: explanations look back well under a second).
#[derive(Debug)]
pub(crate) struct TracedLog(std::collections::VecDeque<(u64, CpuMask)>);

impl TracedLog {
    const KEEP: usize = 32;

    pub(crate) fn new(mask: CpuMask) -> TracedLog {
        TracedLog([(0, mask)].into())
    }

    fn set(&mut self, at_ns: u64, mask: CpuMask) {
        if self.0.len() >= Self::KEEP {
            self.0.pop_front();
        }
        self.0.push_back((at_ns, mask));
    }

    /// Whether `cpu` was traced all through `[from, to]`.
    pub(crate) fn throughout(&self, cpu: u16, from: u64, to: u64) -> bool {
        let bit = |m: &CpuMask| m.contains(cpu as usize);
        let at_start = self.0.iter().rev().find(|c| c.0 <= from);
        at_start.is_some_and(|c| bit(&c.1))
            && self
                .0
                .iter()
                .filter(|c| c.0 > from && c.0 <= to)
                .all(|c| bit(&c.1))
    }
}

/// What the reader shares with the explainer's owner.
pub(crate) struct Shared<'a> {
    /// Set when the run ends.
    pub(crate) stop: &'a AtomicBool,
    /// Samples over this are explained (raised in top-N mode).
    pub(crate) threshold: &'a AtomicU64,
    /// Events the recorder lost, kept current.
    pub(crate) lost: &'a AtomicU64,
    /// The watcher, when watching a process.
    pub(crate) watch: Option<&'a Mutex<dyn Watcher>>,
}

/// Requests waiting for the trace to catch up with them: each with when it was asked.
#[derive(Debug, Default)]
struct Pending(Vec<(Request, u64)>);

impl Pending {
    fn push(&mut self, r: Request, asked_ns: u64) {
        self.0.push((r, asked_ns));
    }

    /// Those ready at `now`: the trace of their CPU reached [`SETTLE_NS`] past their wake
    /// (and every traced CPU's rings were read that far: a blocked thread's peer may be on
    /// any, and a ring of every task's events can lag the watched threads' own), or they
    /// waited [`GIVE_UP_NS`], or the run ends and the last read found nothing more (a reader
    /// behind at the end reads on first: what it has not read is not a silence).
    /// (`read_through`: where every traced CPU's rings were last read up to.)
    fn take_ready(
        &mut self,
        histories: &[History],
        read_through: u64,
        now: u64,
        (stopping, drained): (bool, bool),
    ) -> Vec<Request> {
        let mut ready = Vec::new();
        self.0.retain(|&(r, asked)| {
            let through = r.woke_ns + SETTLE_NS;
            let caught_up = read_through >= through
                && histories
                    .get(r.cpu as usize)
                    .is_some_and(|h| h.newest_ns >= through);
            let go = caught_up || now > asked + GIVE_UP_NS || (stopping && drained);
            if go {
                ready.push(r);
            }
            !go
        });
        ready
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Where the earliest window a pending request needs begins (`u64::MAX`: none pending).
    fn keep_from(&self) -> u64 {
        self.0
            .iter()
            .map(|(r, _)| r.deadline_ns.saturating_sub(LEAD_NS))
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// The explained outliers a run keeps (a watch keeps its own): with a threshold, the largest
/// `top`; without, the largest `top` so far, and the threshold raised to the smallest of them
/// (later samples below it are not asked about).
fn keep_top(outliers: &mut Vec<Outlier>, o: Outlier, options: &Options, threshold: &AtomicU64) {
    outliers.push(o);
    let full = match options.threshold_ns {
        Some(_) => outliers.len() >= 2 * options.top.max(1),
        None => outliers.len() >= options.top,
    };
    if !full {
        return;
    }
    outliers.sort_by_key(|o| std::cmp::Reverse(o.latency_ns));
    outliers.truncate(options.top);
    if options.threshold_ns.is_none() {
        let nth = outliers.last().map_or(0, |o| o.latency_ns);
        threshold.fetch_max(nth, Ordering::Relaxed);
    }
}

/// The event source as a watch may change it ([`Probes`]); a change of the CPUs traced is
/// logged for the explanations.
struct Follow<'a> {
    source: &'a mut Source,
    traced: &'a mut TracedLog,
}

impl Probes for Follow<'_> {
    fn probe_jvm(
        &mut self,
        lib: &crate::usdt::Library,
        pid: Option<u32>,
    ) -> Result<usize, crate::usdt::ProbeError> {
        match &mut *self.source {
            Source::Bpf(r) => r.probe_jvm(lib, pid),
            Source::Tracefs {
                dir,
                jvm_files,
                pages,
                ..
            } => {
                let probed = probe_jvm_text(dir, jvm_files, lib);
                // (Defined, or defined and taken back: ids may have been handed out again.)
                if !matches!(probed, Ok(0)) {
                    pages.uprobes_changed();
                }
                probed
            }
        }
    }

    fn takes_watched(&self) -> bool {
        matches!(&*self.source, Source::Bpf(r) if r.takes_watched())
    }

    fn probe_jvm_clock(
        &mut self,
        lib: &crate::usdt::Library,
        pid: u32,
    ) -> Option<Result<bool, crate::usdt::ProbeError>> {
        match &mut *self.source {
            Source::Bpf(r) => Some(r.probe_jvm_clock(lib, pid)),
            Source::Tracefs { .. } => None,
        }
    }

    fn unprobe_jvm_clock(&mut self, pid: u32) {
        if let Source::Bpf(r) = &mut *self.source {
            r.unprobe_jvm_clock(pid);
        }
    }

    fn set_watched(&mut self, processes: &std::collections::HashSet<u32>) -> bool {
        let Source::Bpf(r) = &mut *self.source else {
            return false;
        };
        r.forget_jvms(processes);
        r.takes_watched() && r.set_watched(processes).is_ok() && r.records_wait_calls()
    }

    fn trace_cpus(&mut self, want: Option<&CpuMask>) -> CpuMask {
        let Source::Bpf(r) = &mut *self.source else {
            return CpuMask::every();
        };
        let all = r.ring_cpus();
        let want = want.map_or_else(|| all.clone(), |m| m.and(all));
        if &want != r.traced() && r.set_traced(&want).is_ok() {
            self.traced.set(monotonic_now_ns(), want);
        }
        r.traced().clone()
    }
}

/// The reader moves to keep off the watched threads as they and their affinity change
/// ([`Watcher::reader_cpus`], decided under the watch's lock, applied after it): on a
/// kernel that is not fully preemptible a thread woken on its CPU waits for the reader's
/// work in the kernel to end. Where it is now changes only when the move succeeds.
fn place_reader(want: Option<Vec<usize>>, placed: &mut Option<Vec<usize>>) {
    let Some(want) = want.filter(|w| placed.as_ref() != Some(w)) else {
        return;
    };
    let cpus = rtlab_sys::affinity::CpuList::from(want.clone());
    if rtlab_sys::affinity::set_current_thread_affinity(&cpus).is_ok() {
        *placed = Some(want);
    }
}

/// A JVM's probes through tracefs (once per file): every process's, whatever `--pid` says
/// (so a file of root's only).
fn probe_jvm_text(
    dir: &std::path::Path,
    files: &mut std::collections::HashSet<(u64, u64)>,
    libjvm: &crate::usdt::Library,
) -> Result<usize, crate::usdt::ProbeError> {
    if !files.insert(libjvm.id) {
        return Ok(0);
    }
    crate::instance::probe_jvm(dir, libjvm)
}

/// The first other traced CPU whose events over `r`'s window are not all known (lost there,
/// or not read yet): a wakeup of `r`'s thread from there may be among them.
fn elsewhere_unknown(
    r: &Request,
    histories: &[History],
    traced: &TracedLog,
    source: &Source,
) -> Option<explain::ElsewhereUnknown> {
    let (t0, t1) = (r.deadline_ns, r.woke_ns);
    (0..histories.len() as u16)
        .filter(|&c| c != r.cpu && traced.throughout(c, t0, t1))
        .filter_map(|cpu| {
            let read = source.read_until(cpu);
            let unread = (read < t1).then_some(explain::ElsewhereUnknown {
                cpu,
                from_ns: read.max(t0),
                lost: 0,
                behind_ns: t1 - read,
            });
            let lost = loss_within(cpu, &histories[cpu as usize].events, t0, t1);
            [lost, unread]
                .into_iter()
                .flatten()
                .min_by_key(|u| u.from_ns)
        })
        .min_by_key(|u| u.from_ns)
}

/// The earliest loss on `cpu` whose unknown stretch overlaps `t0..=t1`: nothing is known
/// there from the CPU's kept event before its loss mark to its kept event after it (the mark
/// may sit anywhere between).
fn loss_within(
    cpu: u16,
    events: &std::collections::VecDeque<Event>,
    t0: u64,
    t1: u64,
) -> Option<explain::ElsewhereUnknown> {
    let lo = events.partition_point(|e| e.ts_ns < t0).saturating_sub(1);
    let hi = (events.partition_point(|e| e.ts_ns <= t1) + 1).min(events.len());
    let kept = |e: &&Event| e.kind.lost().is_none();
    (lo..hi)
        .filter_map(|i| {
            let n = events[i].kind.lost()?;
            let before = events.range(..i).rev().find(kept).map_or(0, |e| e.ts_ns);
            let after = events
                .range(i + 1..)
                .find(kept)
                .map_or(u64::MAX, |e| e.ts_ns);
            (before < t1 && after > t0).then_some(explain::ElsewhereUnknown {
                cpu,
                from_ns: before.max(t0),
                lost: n,
                behind_ns: 0,
            })
        })
        .min_by_key(|u| u.from_ns)
}

/// Explains request `r` (the run's `index`-th) of series `series`, with what only the eBPF
/// recorder gives: a JVM's safepoints over it, kernel stacks.
fn explain_request(
    r: &Request,
    (series, index): (&str, usize),
    (histories, traced): (&[History], &TracedLog),
    (source, watch): (&Source, Option<&Mutex<dyn Watcher>>),
    (rules, options): (&explain::Rules, &Options),
) -> Result<(Outlier, Option<SavedWindow>), TraceError> {
    // (Given up waiting for the reader: its CPU's events past where they were read are
    // said not known, not taken for a silence.)
    let read = source.read_until(r.cpu);
    let rules = &explain::Rules {
        unread_from: (read < r.woke_ns + SETTLE_NS).then_some(read),
        elsewhere_unknown: elsewhere_unknown(r, histories, traced, source),
        ..*rules
    };
    let (mut o, window) = explain_one(r, series, (histories, traced), rules, options, index)?;
    if let Source::Bpf(rec) = source {
        let logged = logged_stops(watch, r);
        // (Only where a JVM's probes are attached, or its own log told of stops: the search
        // spans a second of every CPU's history.)
        if rec.probes_jvm() || !logged.stops.is_empty() {
            with_jvm_stops(&mut o, r, histories, &logged);
        }
        if options.stacks {
            let culprit = o.causes.iter().find_map(|c| c.pid);
            o.stacks = stacks_of(r, culprit, histories, options.started_ns, &|id| {
                rec.stack(id)
            });
        }
    }
    Ok((o, window))
}

/// The safepoints a watched JVM's own log told of over request `r` (none for a run that is
/// no watch).
fn logged_stops(watch: Option<&Mutex<dyn Watcher>>, r: &Request) -> crate::watcher::LoggedStops {
    let from = r.deadline_ns.saturating_sub(crate::history::STOP_LEAD_NS);
    watch.map_or_else(Default::default, |w| {
        let w = w.lock().unwrap_or_else(|p| p.into_inner());
        w.logged_stops(r.tid, from, r.woke_ns)
    })
}

/// The name of series `index`: the watch's, or the run's.
fn series_name(watch: Option<&Mutex<dyn Watcher>>, options: &Options, index: u16) -> String {
    match watch {
        Some(w) => w
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .series_name(index),
        None => options.series_names.get(index as usize).cloned(),
    }
    .unwrap_or_else(|| format!("series{index}"))
}

pub(crate) fn read_loop(
    mut source: Source,
    rx: mpsc::Receiver<Request>,
    shared: Shared<'_>,
    options: &Options,
    rules: &explain::Rules,
) -> Result<ReaderOut, TraceError> {
    let Shared {
        stop,
        threshold,
        lost,
        watch,
    } = shared;
    // Where the reader runs now, where it may move (see `place_reader`).
    let mut placed = None;
    if !options.reader_cpus.is_empty() {
        place_reader(Some(options.reader_cpus.clone()), &mut placed);
    }
    make_trace_out(options)?;
    let mut histories = Histories::default();
    let mut traced = TracedLog::new(match &source {
        Source::Bpf(r) => r.traced().clone(),
        Source::Tracefs { .. } => CpuMask::every(),
    });
    let mut pending = Pending::default();
    let mut out = ReaderOut::default();
    // The watcher ends its run once (its flush, at the first drain after the stop); the
    // reader may read on after it, for the explanations still waiting, offering it nothing.
    let mut flushed = false;
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        // The requests sent before this drain first: their windows are kept through it
        // (a reader that fell behind drains a burst, and trims only after explaining).
        take_requests(&rx, &mut pending, &mut out);
        let drained_at = monotonic_now_ns();
        // Each event goes to a watcher, then to the history (which takes the
        // events of its threads as they are read; one lock per poll).
        let mut watching = watch
            .filter(|_| !flushed)
            .map(|w| w.lock().unwrap_or_else(|p| p.into_inner()));
        flushed |= stopping;
        let tracefs = matches!(source, Source::Tracefs { .. });
        let got = source.poll(&mut |e| {
            if let (true, Kind::Lost(n)) = (tracefs, &e.kind) {
                lost.fetch_add(*n, Ordering::Relaxed);
            }
            // The history keeps every event: it is offered each one last, so none is copied.
            if let Some(w) = watching.as_deref_mut() {
                w.offer(&e);
            }
            histories.offer(e);
        })?;
        histories.settle();
        let mut move_to = None;
        let mut held_from = u64::MAX;
        if let Some(mut w) = watching {
            let mut ask = |r: Request| {
                out.over_threshold += 1;
                pending.push(r, drained_at);
            };
            // (The tracefs source reads a CPU's ring at most so far per poll: the watch
            // merges the CPUs' events in time order only up to where all were read.)
            let read_all_to = match &source {
                Source::Tracefs { pages, .. } => pages.read_through(),
                Source::Bpf(_) => u64::MAX,
            };
            w.drained(drained_at.min(read_all_to), stopping, &mut ask);
            w.follow(&mut Follow {
                source: &mut source,
                traced: &mut traced,
            });
            move_to = w.reader_cpus(drained_at);
            held_from = w.held_from().saturating_sub(LEAD_NS);
        }
        place_reader(move_to, &mut placed);
        if let Source::Bpf(r) = &source {
            lost.store(r.lost(), Ordering::Relaxed);
        }
        take_requests(&rx, &mut pending, &mut out);
        let read = match pending.is_empty() {
            true => 0,
            false => source.read_through(histories.len()),
        };
        let now = monotonic_now_ns();
        let ready = pending.take_ready(&histories, read, now, (stopping, got == 0));
        let context = (&*histories, &traced, &source);
        explain_ready(
            ready,
            context,
            (watch, threshold),
            (rules, options),
            &mut out,
        )?;
        let now = monotonic_now_ns();
        let keep_from = pending.keep_from().min(held_from);
        histories.trim(keep_from, now);
        // The kernel stacks no event kept refers to any more (past the history's reach).
        if let Source::Bpf(r) = &mut source {
            let reach = now.saturating_sub(STACKS_KEPT_NS);
            r.forget_stacks(keep_from.min(reach), now);
        }
        if stopping && pending.is_empty() {
            return Ok(out);
        }
        if got == 0 {
            let now = monotonic_now_ns();
            let eager = watch.is_some_and(|w| {
                w.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .just_attached(now)
            });
            let ms = if eager { 1 } else { source.idle_ms() };
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }
}

/// Makes the directory the raw windows go to (`--trace-out`), if asked for, and checks that
/// it is the user's own.
fn make_trace_out(options: &Options) -> Result<(), TraceError> {
    if let Some(dir) = &options.trace_out {
        std::fs::create_dir_all(dir)
            .and_then(|()| rtlab_sys::fs::check_dir_owner(dir))
            .map_err(|error| TraceError::TraceOut {
                path: dir.clone(),
                error,
            })?;
    }
    Ok(())
}

/// Explains the requests whose windows are complete: to the watch, which keeps its own (the
/// worst of each interval, and counts), or into the run's top outliers.
fn explain_ready(
    ready: Vec<Request>,
    (histories, traced, source): (&[History], &TracedLog, &Source),
    (watch, threshold): (Option<&Mutex<dyn Watcher>>, &AtomicU64),
    (rules, options): (&explain::Rules, &Options),
    out: &mut ReaderOut,
) -> Result<(), TraceError> {
    for r in ready {
        let series = series_name(watch, options, r.series);
        let (o, window) = explain_request(
            &r,
            (&series, out.outliers.len()),
            (histories, traced),
            (source, watch),
            (rules, options),
        )?;
        out.windows.extend(window);
        match watch {
            Some(w) => w
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .explained(r.series, o),
            None => keep_top(&mut out.outliers, o, options, threshold),
        }
    }
    Ok(())
}

/// The measuring threads' requests sent so far, pending from now.
fn take_requests(rx: &mpsc::Receiver<Request>, pending: &mut Pending, out: &mut ReaderOut) {
    while let Ok(r) = rx.try_recv() {
        out.over_threshold += 1;
        pending.push(r, monotonic_now_ns());
    }
}

fn explain_one(
    r: &Request,
    series: &str,
    (histories, traced): (&[History], &TracedLog),
    rules: &explain::Rules,
    options: &Options,
    index: usize,
) -> Result<(Outlier, Option<SavedWindow>), TraceError> {
    let history = histories.get(r.cpu as usize);
    let from = r.deadline_ns.saturating_sub(LEAD_NS);
    let elsewhere = wakings_elsewhere(histories, r.cpu, r.tid, from, r.woke_ns);
    let waker = last_waker(histories, r, &elsewhere);
    // A thread blocked on another (a lock holder, a peer) waits for what that one's CPU did,
    // where that CPU was traced.
    let peer = waker
        .filter(|&(_, cpu)| {
            r.wait.blocks() && cpu != r.cpu && traced.throughout(cpu, from, r.woke_ns)
        })
        .and_then(|peer| peer_window(histories, peer, from, r.woke_ns));
    // A sleep timer's slack is the thread's own: the kernel was not due to fire the timer
    // before the hard expiry, so what happened is explained from there.
    let slack = r.slack_ns.min(r.woke_ns.saturating_sub(r.deadline_ns));
    let late = explain::Late {
        tid: r.tid,
        deadline_ns: r.deadline_ns + slack,
        woke_ns: r.woke_ns,
        wait: r.wait,
        waker: waker.map(|(p, _)| find_task(histories, p)),
        cpu: r.cpu,
        peer,
    };
    let latency = r.woke_ns.saturating_sub(r.deadline_ns);
    let mut saved = None;
    let causes = match history {
        Some(h) => {
            let (base, window) = late_window(h, from, &elsewhere);
            saved = options
                .trace_out
                .as_ref()
                .map(|dir| SavedWindow::new(dir, (index, series), r, histories, from));
            let rules = explain::Rules {
                tick: h.tick_grid(),
                cut: h.cut,
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
            detail: Some(Reason::NoEventOnCpu { cpu: r.cpu }.to_string()),
            reason: Some(Reason::NoEventOnCpu { cpu: r.cpu }.code()),
            stall_ns: None,
        }],
    };
    let mut causes = causes;
    if slack > 0 {
        let reason = Reason::TimerSlack {
            slack_ns: r.slack_ns,
        };
        causes.push(taskless(CauseKind::Syscall, slack, reason));
        causes.sort_by_key(|c| std::cmp::Reverse(c.duration_ns));
    }
    let causes = as_observer(causes);
    let at_ns = r.deadline_ns.saturating_sub(options.started_ns);
    Ok((
        Outlier {
            series: series.to_string(),
            at_ns,
            latency_ns: latency,
            cpu: Some(r.cpu as u32),
            until_running_ns: r
                .running_ns
                .map(|t| t.saturating_sub(r.deadline_ns).min(latency)),
            causes,
            stacks: Vec::new(),
        },
        saved,
    ))
}

#[cfg(test)]
mod tests;
