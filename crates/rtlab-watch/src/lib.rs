//! Watching a running process's threads: their scheduling delays, measured from the same
//! kernel events that explain them, with no change to the program.
//!
//! A thread's `wakeup` delay runs from the moment it became runnable (a `sched_waking` of it,
//! the expiry of its sleep timer, or a switch-out while still runnable, i.e. preempted) to the
//! moment a `sched_switch` put it on a CPU: what `runqlat` and `perf sched timehist`'s
//! scheduling delay measure. Events of all CPUs are merged in time order first (the eBPF
//! rings are drained one CPU after another), up to a watermark a little behind the newest
//! drain, so a wakeup on one CPU is always seen before the switch it causes on another.
//!
//! A thread's `timer` delay runs from the expiry its sleep timer was set for (the deadline of
//! a `clock_nanosleep`, `nanosleep`, timed futex wait such as Java's `parkNanos`, or an
//! `epoll_wait`/`poll` timeout: every sleep the kernel ends with `hrtimer_wakeup`) to the
//! moment it ran: what a periodic loop loses each period, the timer interrupt's own path
//! included. The eBPF recorder reads the expiry from the timer itself (the tracefs fallback
//! cannot, and measures `wakeup` only). A `timerfd`, a POSIX timer or `setitimer` wakes its
//! thread through a file or a signal, not as its sleep timer: the thread woken in that
//! timer's interrupt waited for its expiry, and its `timer` delay runs from there too
//! ([`FILE_OR_SIGNAL_TIMERS`]).
//!
//! A thread's `lock` delay runs from its entry into the kernel's wait for a PI futex
//! (`FUTEX_LOCK_PI`: a `pthread_mutex_t` with `PTHREAD_PRIO_INHERIT`, rtlab-sync's `PiMutex`)
//! to its return with the lock: the time it was blocked, which the explanation splits by what
//! kept the holder (the task whose unlock woke it) from releasing sooner. Only the eBPF
//! recorder sees these (function probes on `futex_lock_pi`); plain futex waits, which glibc's
//! default mutexes, condition variables and the JVM's monitors all use, cannot be told apart
//! by the kernel and are not counted as lock waits.
//!
//! The watched threads are re-read from `/proc/<pid>/task` every second (threads created later
//! are picked up; JVM threads appear under their Java names once the JVM has set them).

use crate::book::OutlierBook;
use java::{Held, JavaWait};
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sys::affinity::CpuMask;
use rtlab_trace::event::{Event, JvmProbe, Kind};
use rtlab_trace::explain::Wait;
use rtlab_trace::Request;
pub use spec::{Scope, ThreadPattern, WatchSpec};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// One measured series: a thread's, or the sum over the threads of one name and one
/// scheduling class.
#[derive(Debug, Clone)]
pub struct WatchSeries {
    /// `<name>/<tid>/<kind>` (a thread's), `<name>/<kind>` (the real-time threads of that
    /// name: SCHED_FIFO, SCHED_RR) or `<name>:ts/<kind>` (its time-sharing ones).
    pub name: String,
    /// Real-time threads' (for a thread's own series: when it was made).
    pub rt: bool,
    /// For a name's series: the series of the threads it has summed (indices).
    pub members: Vec<u16>,
    /// For a name's series: the processes its threads were of (at most [`MAX_OWNERS`]),
    /// kept when their threads' own series give way to new ones.
    pub owners: Vec<u32>,
    /// For a thread's series: its process (pid).
    pub process: Option<u32>,
    /// The thread name.
    pub thread: String,
    /// The thread's TID; `None` for the sum over the threads of that name.
    pub tid: Option<i64>,
    /// The kind of delay.
    pub kind: DelayKind,
    /// Since the start.
    pub total: LatencyHistogram,
    /// Since the last interval was taken.
    pub interval: LatencyHistogram,
    /// The longest in the last interval taken.
    pub last_interval_max: Nanos,
    /// Delays that began but could not be measured: the watched thread's own events were
    /// lost in between.
    pub unmeasured: u64,
    /// For a `timer` series: how many of its delays had their deadline from each source.
    pub deadlines: std::collections::BTreeMap<DeadlineSource, u64>,
    /// The worst delay of each window since the watch began (by each delay's end).
    pub timeline: rtlab_stats::details::WorstPerWindow,
}

/// What a series measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DelayKind {
    /// From becoming runnable to running.
    Wakeup,
    /// From a sleep timer's requested expiry to running.
    Timer,
    /// Blocked waiting for a PI futex.
    Lock,
    /// A JVM's safepoint, from its begin to its end (a series per VM operation, not a
    /// thread's).
    Safepoint,
}

impl DelayKind {
    /// `wakeup`, `timer`: the last part of a series name.
    pub fn name(self) -> &'static str {
        match self {
            DelayKind::Wakeup => "wakeup",
            DelayKind::Timer => "timer",
            DelayKind::Lock => "lock",
            DelayKind::Safepoint => "safepoint",
        }
    }
}

/// A thread's pair of series for one kind: its own, and its name's.
#[derive(Debug, Clone, Copy)]
struct Pair {
    own: u16,
    by_name: u16,
}

#[derive(Debug)]
struct Watched {
    /// Its name, as when last read.
    name: String,
    /// Real-time (SCHED_FIFO/RR, or DEADLINE), as last seen.
    rt: bool,
    /// Series of this thread, and of its name, by kind: `wakeup` from the start, the others
    /// from its first delay of that kind.
    pairs: [Option<Pair>; 3],
    /// Kinds whose series were refused at the series limit (counted once each).
    refused: [bool; 3],
    /// How it waits: where it is in its wait, the timer that woke it, its periodic file
    /// or signal timer (see [`model`]).
    wait: model::ThreadWait,
    /// Delays whose wait returned while its JVM was at a safepoint: a Java thread runs no
    /// Java code until the safepoint is over, so they may end later (see [`Held`]).
    held: Option<Held>,
    /// In a Java park or sleep (where its JVM's probes tell): its delays end where the JVM
    /// returns to Java code, not where a wait call inside it returns.
    java_wait: Option<JavaWait>,
    /// Its clock reads, and its park that ended, not read the clock since.
    clock: clock::ThreadClock,
    /// Its period, where its timer delays begin at a steady interval (two in a row within
    /// 5 %), and where its last one began.
    period_ns: Option<u64>,
    last_timer_ns: Option<(u64, u64)>,
    /// Its last timer delay: from when, to when.
    last_timer_delay: Option<(u64, u64)>,
    /// When it last entered a wait call (or a Java park or sleep).
    entered_ns: Option<u64>,
    /// When a re-read found it gone: its last events may still be on their way through
    /// the merge, so it is kept a while longer.
    exited_ns: Option<u64>,
}

pub use model::DeadlineSource;
use model::{Delay, Expiry, Fired, Returned};
use rtlab_trace::event::{FILE_OR_SIGNAL_TIMERS, READINESS_CALLS};
use rules::RULES;

/// How long an ended thread's own series stays before another may take its place.
const RETIRED_NS: u64 = 2_000_000_000;

/// The most processes a name's series remembers its threads were of (for its labels).
pub const MAX_OWNERS: usize = 16;

/// Event with its arrival order, ordered by time (then arrival) for the merge.
#[derive(Debug)]
struct Timed(u64, u64, Event);

impl PartialEq for Timed {
    fn eq(&self, other: &Self) -> bool {
        (self.0, self.1) == (other.0, other.1)
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.0, self.1).cmp(&(other.0, other.1))
    }
}

/// How often the threads are re-read; every `EARLY_RESCAN_NS` in the first `EARLY_NS` (a
/// program just started creates its threads then).
const RESCAN_NS: u64 = 1_000_000_000;
const EARLY_RESCAN_NS: u64 = 10_000_000;
const EARLY_NS: u64 = 3_000_000_000;
/// A CPU a watched real-time thread ran on within this long is one the reader keeps off
/// (where it may move).
const RT_ON_NS: u64 = 2_000_000_000;
/// How long after an attach the reader polls every millisecond.
const JUST_ATTACHED_NS: u64 = 100_000_000;
/// At most this many series (a thread's and its name's each count): past it, a new thread's
/// series take the places of ended threads' own series (their delays stay counted in their
/// names' series); where no thread has ended, new threads are not watched and the run says
/// so.
pub const MAX_SERIES: usize = 512;
/// Processes whose names the report keeps.
const MAX_KNOWN: usize = 65536;

/// The watcher's state, fed by the reader thread, read by the command's loop.
#[derive(Debug)]
pub struct WatchState {
    spec: WatchSpec,
    threads: HashMap<i64, Watched>,
    series: Vec<WatchSeries>,
    index: HashMap<String, u16>,
    /// The own series of threads that ended, oldest first: at the series limit a new
    /// thread's series takes the place of the oldest (its delays stay in its name's series).
    retired: std::collections::VecDeque<(u16, u64)>,
    heap: BinaryHeap<Reverse<Timed>>,
    arrived: u64,
    scanned_ns: u64,
    /// Every process's parent, as last read (for a process tree, or every process).
    parents: rtlab_sys::procfs::Parents,
    /// When the watch began.
    started_ns: u64,
    /// The process is gone (its /proc directory vanished).
    gone: bool,
    /// Threads not watched because the series limit was reached.
    refused: u64,
    /// Samples abandoned because events were lost in between.
    abandoned: u64,
    /// Wakeups of the watched threads the trace never showed (no loss counted): see
    /// [`model::ThreadWait::wakeup_unseen`].
    wakeups_unseen: u64,
    /// The CPUs they were on.
    unseen_on: std::collections::BTreeSet<u16>,
    /// The most threads watched at once.
    most_threads: usize,
    /// The longest delays of this interval so far, per kind (at most `spec.keep`, shortest
    /// first): a delay is explained when it joins them.
    longest: [Vec<u64>; 3],
    book: OutlierBook,
    /// The CPUs the watched threads may run on (their affinity masks'; those of all the
    /// process's threads while none is chosen), at the last re-read; None: every CPU.
    cpus_wanted: Option<CpuMask>,
    /// The CPUs traced now, and at any time of the run (as the reader set them).
    traced: CpuMask,
    traced_ever: CpuMask,
    /// The recorder sees the watched threads' wait calls: delays end at their return.
    wait_calls: bool,
    /// rtlab's own threads (the observer), re-read with the watched ones; on which traced
    /// CPU one runs since when; and their time on the traced CPUs so far.
    ours: std::collections::HashSet<i64>,
    /// Every one of rtlab's own threads seen in the run (for the result).
    ours_ever: std::collections::BTreeSet<i64>,
    observer_since: Vec<Option<u64>>,
    observer_ns: u64,
    /// When a watched real-time thread last ran on each CPU (switched in or out, or found
    /// there at a re-read before any event) and whether one runs there now, and the CPUs the reader may move among to keep off
    /// the watched threads (none: it stays where it was put, as `--reader-cpu` asks).
    rt_on: Vec<(u64, bool)>,
    reader_among: Vec<usize>,
    /// Threads seen in a wait call but not chosen, until the next re-read.
    adopted_misses: std::collections::HashSet<i64>,
    /// Changes with the set of watched threads.
    generation: u64,
    /// The generation last handed to the event source (its set of watched processes).
    handed: u64,
    /// The processes in scope, with their names and cgroups, as last read.
    processes: HashMap<u32, (String, String)>,
    /// The process of each thread seen in them.
    thread_process: HashMap<i64, u32>,
    /// Every process watched so far, with its name and cgroup (for the report; at most
    /// [`MAX_KNOWN`]).
    known: HashMap<u32, (String, String)>,
    /// Events lost, by CPU: of the watched threads (or of every task, where they have no
    /// rings of their own), and of other tasks only.
    lost_by_cpu: std::collections::BTreeMap<u16, [u64; 2]>,
    /// Where each measured delay is written as it is measured (`watch --samples`).
    samples: Option<std::io::BufWriter<std::fs::File>>,
    /// Per CPU, a timer of [`FILE_OR_SIGNAL_TIMERS`] that just fired there: the threads it
    /// wakes waited for it.
    fired: Vec<Option<Fired>>,
    /// The watched JVMs, through HotSpot's probes.
    jvms: jvm::Jvms,
    /// The watched JVMs' clock probes.
    clocks: clock::Clocks,
    /// Explanations asked for delays of JVMs whose own log tells of their stops, held until
    /// the log is read past them (see `jvm::Jvms::log_covers`), with their processes.
    held_requests: Vec<(u32, Request)>,
    /// Threads whose readiness waits time out in whole milliseconds (by TID, with their
    /// names; at most [`MAX_NOTED`]): their own deadlines are not known (see
    /// [`model::ThreadWait::whole_ms`]).
    whole_ms: std::collections::BTreeMap<i64, String>,
}

/// The most threads a note names.
const MAX_NOTED: usize = 64;

impl WatchState {
    /// Watching `spec`; reads the threads once now.
    pub fn new(spec: WatchSpec) -> WatchState {
        let spec_keep = spec.keep;
        let spec_all = spec.scope == Scope::All;
        let java_clock = spec.java_clock_limit;
        let mut state = WatchState {
            spec,
            threads: HashMap::new(),
            series: Vec::new(),
            index: HashMap::new(),
            retired: Default::default(),
            heap: BinaryHeap::new(),
            arrived: 0,
            scanned_ns: 0,
            parents: Default::default(),
            started_ns: rtlab_sys::time::monotonic_now_ns(),
            gone: false,
            refused: 0,
            abandoned: 0,
            wakeups_unseen: 0,
            unseen_on: Default::default(),
            most_threads: 0,
            longest: Default::default(),
            book: OutlierBook::new(spec_keep),
            cpus_wanted: None,
            traced: CpuMask::default(),
            traced_ever: CpuMask::default(),
            wait_calls: false,
            ours: Default::default(),
            ours_ever: Default::default(),
            observer_since: Vec::new(),
            observer_ns: 0,
            rt_on: Vec::new(),
            reader_among: Vec::new(),
            adopted_misses: Default::default(),
            generation: 0,
            handed: u64::MAX,
            lost_by_cpu: Default::default(),
            fired: Vec::new(),
            samples: None,
            jvms: jvm::Jvms::default(),
            clocks: clock::Clocks::new(java_clock),
            whole_ms: Default::default(),
            held_requests: Vec::new(),
            processes: HashMap::new(),
            thread_process: HashMap::new(),
            known: HashMap::new(),
        };
        // Every process watched: a JVM's probes go on its file, for every process.
        state.jvms.everywhere = spec_all;
        state.jvms.second_witness = state.spec.jvm_log;
        state.rescan(rtlab_sys::time::monotonic_now_ns());
        state
    }

    /// The CPUs to trace (None: every CPU): where the watched threads may run.
    pub fn cpus_wanted(&self) -> Option<&CpuMask> {
        self.cpus_wanted.as_ref()
    }

    /// The CPUs traced from now on, as the recorder was set.
    pub(crate) fn set_traced(&mut self, mask: &CpuMask) {
        if *mask != self.traced {
            // A CPU no longer traced shows no more switches: nothing runs "since" there.
            for (cpu, since) in self.observer_since.iter_mut().enumerate() {
                if !mask.contains(cpu) {
                    *since = None;
                }
            }
            self.traced = mask.clone();
            self.traced_ever.union_with(mask);
        }
    }

    /// The watched processes now (for the recorder's filter of wait calls).
    pub fn watched_processes(&self) -> std::collections::HashSet<u32> {
        match (self.gone, &self.spec.scope) {
            (true, _) => Default::default(),
            // A command about to be started: rtlab itself until then, so that the kernel
            // takes the command in as rtlab forks it (before it can run a single instruction
            // unwatched) and everything it starts in turn.
            (false, Scope::Process { .. }) if self.spec.pid == 0 => [std::process::id()].into(),
            (false, _) => self.processes.keys().copied().collect(),
        }
    }

    /// Whether processes a watched one starts are watched too (from their start).
    pub fn follows_children(&self) -> bool {
        !matches!(self.spec.scope, Scope::Process { children: false })
    }

    /// The name (`comm`) and cgroup of watched process `pid`, as last read.
    pub fn process(&self, pid: u32) -> Option<&(String, String)> {
        self.known.get(&pid)
    }

    /// Changes whenever [`WatchState::watched_processes`] or the watched threads do.
    pub fn threads_generation(&self) -> u64 {
        self.generation
    }

    /// Whether the watched threads' wait calls are recorded (then a delay of a thread that
    /// waited in one ends where the call returned to user space, as the program sees it;
    /// else where the thread got a CPU).
    pub fn set_wait_calls(&mut self, on: bool) {
        self.wait_calls = on;
    }

    /// Whether delays end at the return to user space ([`WatchState::set_wait_calls`]).
    pub fn ends_in_user_space(&self) -> bool {
        self.wait_calls
    }

    /// The CPUs traced now and at any time of the run (masks).
    pub fn traced(&self) -> (&CpuMask, &CpuMask) {
        (&self.traced, &self.traced_ever)
    }

    /// What is watched.
    pub fn spec(&self) -> &WatchSpec {
        &self.spec
    }

    /// The series so far (totals and the current interval).
    pub fn series(&self) -> &[WatchSeries] {
        &self.series
    }

    /// Takes the interval histograms (index and histogram of each series with samples in
    /// the interval), starting a new interval: its longest delays start anew, and its worst
    /// outliers are put with the recent intervals'.
    pub fn take_interval(&mut self) -> Vec<(usize, LatencyHistogram)> {
        let mut out = Vec::new();
        for (i, s) in self.series.iter_mut().enumerate() {
            s.last_interval_max = s.interval.max();
            if !s.interval.is_empty() {
                out.push((i, s.interval.clone()));
                s.interval.reset();
            }
        }
        self.longest.iter_mut().for_each(Vec::clear);
        self.book.close_interval();
        out
    }

    /// The explained outliers.
    pub fn book(&self) -> &OutlierBook {
        &self.book
    }

    /// Takes an explained outlier of series `series`.
    pub(crate) fn explained(&mut self, series: u16, o: rtlab_stats::result::Outlier) {
        let kind = self
            .series
            .get(series as usize)
            .map_or(DelayKind::Wakeup, |s| s.kind);
        self.book.add(kind, o);
    }

    /// Watches process `pid` from now on (for a process started after the watch: its first
    /// threads are read at once, and every 10 ms for the next 3 s).
    pub fn attach(&mut self, pid: i32) {
        self.spec.pid = pid;
        // A command started for the watch: its processes are new, however early.
        self.jvms.all_new();
        self.generation += 1;
        self.started_ns = rtlab_sys::time::monotonic_now_ns();
        self.rescan(self.started_ns);
    }

    /// The process exited.
    pub fn gone(&self) -> bool {
        self.gone
    }

    /// How many threads are watched now.
    pub fn watched_threads(&self) -> usize {
        self.threads
            .values()
            .filter(|w| w.exited_ns.is_none())
            .count()
    }

    /// The most threads watched at once.
    pub fn most_threads(&self) -> usize {
        self.most_threads
    }

    /// Threads left out at the series limit, and samples abandoned at event losses.
    pub fn shortfalls(&self) -> (u64, u64) {
        (self.refused, self.abandoned)
    }

    /// Wakeups of the watched threads that the trace never showed, though no event was
    /// counted lost: a wait call returned after its thread slept in it with no wakeup or
    /// switch back in seen, or a thread left a CPU it was never seen to get (each counted
    /// unmeasured in its `wakeup` series).
    pub fn wakeups_unseen(&self) -> u64 {
        self.wakeups_unseen
    }

    /// The CPUs of the wakeups the trace never showed.
    pub fn wakeups_unseen_on(&self) -> Vec<usize> {
        self.unseen_on.iter().map(|&c| c as usize).collect()
    }

    /// Events lost so far, by CPU: `[of the watched threads, of other tasks only]` (where
    /// the watched threads have no rings of their own, every loss is counted as theirs).
    pub fn lost_by_cpu(&self) -> &std::collections::BTreeMap<u16, [u64; 2]> {
        &self.lost_by_cpu
    }

    /// Events of the watched threads lost so far (delays may be unmeasured).
    pub fn lost_watched(&self) -> u64 {
        self.lost_by_cpu.values().map(|l| l[0]).sum()
    }

    /// The patterns that match no thread of the process now.
    pub fn unmatched(&self) -> Vec<String> {
        let threads: Vec<_> = self
            .processes
            .keys()
            .flat_map(|&p| rtlab_sys::procfs::thread_names_of(p as i32).unwrap_or_default())
            .collect();
        self.spec
            .threads
            .iter()
            .filter(|p| !threads.iter().any(|t| p.matches(t.tid as i64, &t.name)))
            .map(|p| p.to_string())
            .collect()
    }

    /// Whether the watch is in its first moments after starting or attaching (a program
    /// just started creates its threads then): the reader polls more often meanwhile, so the
    /// kernel's filter of wait calls takes a new process in within a millisecond.
    pub fn just_attached(&self, now_ns: u64) -> bool {
        now_ns < self.started_ns + JUST_ATTACHED_NS
    }

    /// What the watch cannot know of the watched threads' deadlines, one line per thread (at
    /// most [`MAX_NOTED`]).
    pub fn deadline_notes(&self) -> Vec<String> {
        (self.whole_ms.iter())
            .map(|(tid, name)| {
                format!(
                    "{name}/{tid}: its poll timeouts are whole ms (asyncio, libuv): its own \
                     deadlines may be up to 1 ms earlier"
                )
            })
            .collect()
    }

    /// rtlab's own threads (the observer: its reader, log writer, metrics server) seen in
    /// the run, by TID.
    pub fn observer_threads(&self) -> impl Iterator<Item = i64> + '_ {
        self.ours_ever.iter().copied()
    }

    /// How long rtlab's own threads ran on the traced CPUs so far.
    pub fn observer_ns(&self) -> u64 {
        self.observer_ns
    }

    /// Takes a newly read event (any CPU order) if it concerns a watched thread: only those
    /// wait for the merge, so its memory follows the watched threads' event rate, not the
    /// machine's.
    pub(crate) fn offer(&mut self, e: &Event) {
        match &e.kind {
            Kind::Switch { prev, next, .. } => {
                self.observe(e.cpu as usize, e.ts_ns, prev.pid, next.pid)
            }
            Kind::Lost(n) => self.lost_by_cpu.entry(e.cpu).or_default()[0] += n,
            Kind::LostOthers(n) => self.lost_by_cpu.entry(e.cpu).or_default()[1] += n,
            Kind::Jvm { .. } => self.offer_clock_read(e),
            _ => {}
        }
        // A wait call is recorded only for the watched process: a thread of it not watched
        // yet (started since the last re-read) is taken on at its first call.
        let own_call = match &e.kind {
            Kind::WaitEnter { .. } | Kind::WaitExit { .. } => true,
            Kind::Jvm { probe, .. } => probe.of_thread(),
            _ => false,
        };
        if own_call && !self.threads.contains_key(&e.current_pid) {
            self.adopt(e.current_pid);
        }
        let watched = |pid: &i64| self.threads.contains_key(pid);
        let relevant = match &e.kind {
            Kind::Waking { task, .. } => watched(&task.pid),
            Kind::Switch { prev, next, .. } => watched(&prev.pid) || watched(&next.pid),
            Kind::HrtimerEntry {
                task: Some(task),
                expires_ns: Some(_),
                ..
            } => watched(&task.pid),
            // (Whose wait it ends shows at the waking that follows: few a second.)
            Kind::HrtimerEntry {
                function,
                expires_ns: Some(_),
                ..
            } => FILE_OR_SIGNAL_TIMERS.contains(&&**function),
            Kind::LockPi { trylock: false }
            | Kind::LockPiDone { .. }
            | Kind::WaitEnter { .. }
            | Kind::WaitExit { .. } => watched(&e.current_pid),
            Kind::Lost(_) => true,
            // (Every thread's clock reads: the VM thread's time its safepoints.)
            Kind::Jvm {
                probe: JvmProbe::ClockRead,
                process,
                ..
            } => self.processes.contains_key(process),
            Kind::Jvm { probe, .. } if probe.of_thread() => watched(&e.current_pid),
            Kind::Jvm { process, .. } => self.processes.contains_key(process),
            _ => false,
        };
        if relevant {
            self.arrived += 1;
            let e = clock::at_its_read(e);
            self.heap.push(Reverse(Timed(e.ts_ns, self.arrived, e)));
        }
    }

    /// Processes the events up to `drained_at - RULES.merge_lag_ns` in time order (`drained_at`:
    /// when the reader's latest drain started); a sample admitted (`admit`) becomes a
    /// request to explain.
    pub(crate) fn advance(&mut self, drained_at: u64, request: &mut dyn FnMut(Request)) {
        let every = if drained_at < self.started_ns + EARLY_NS {
            EARLY_RESCAN_NS
        } else {
            RESCAN_NS
        };
        if drained_at >= self.scanned_ns + every {
            self.rescan(drained_at);
        }
        self.take_logged(Some(drained_at), request);
        let watermark = drained_at.saturating_sub(RULES.merge_lag_ns);
        while self.heap.peek().is_some_and(|Reverse(t)| t.0 <= watermark) {
            let Some(Reverse(Timed(_, _, e))) = self.heap.pop() else {
                break;
            };
            self.step(&e, request);
        }
    }

    /// Processes everything left (the run is ending).
    pub(crate) fn flush(&mut self, request: &mut dyn FnMut(Request)) {
        // The JVMs' logs read to their end and turned off.
        self.jvms.logs.stop();
        self.take_logged(None, request);
        while let Some(Reverse(Timed(_, _, e))) = self.heap.pop() {
            self.step(&e, request);
        }
        let ready: Vec<i64> = self
            .threads
            .iter()
            .filter(|(_, w)| w.wait.ready.is_some())
            .map(|(&tid, _)| tid)
            .collect();
        for tid in ready {
            if let Some(r) = self.threads.get_mut(&tid).and_then(|w| w.wait.ready.take()) {
                self.settle_ready(tid, r, None, request);
            }
        }
        self.settle_java_at_end(request);
        // (The explanations asked for meanwhile: the logs are read to their end.)
        self.take_logged(None, request);
    }
}

#[cfg(test)]
mod tests;

mod account;
mod book;
mod clock;
mod handlers;
mod java;
pub(crate) mod jvm;
mod jvmlog;
mod model;
pub mod rules;
mod series;
mod spec;
mod start;
mod threads;
mod witness;
pub use clock::DEFAULT_LIMIT as DEFAULT_CLOCK_LIMIT;
pub use jvm::Stop;
pub use start::start;
pub use witness::{Pair as WitnessPair, DIFFER_MIN_NS, DIFFER_SHARE};
