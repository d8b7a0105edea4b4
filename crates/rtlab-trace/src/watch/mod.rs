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
//! included. The eBPF recorder reads the expiry from the timer itself (the text fallback
//! cannot, and measures `wakeup` only). A `timerfd` wakes its reader through the file, not a
//! sleep timer, so it counts as a `wakeup`.
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
use crate::event::{Event, JvmProbe, Kind};
use crate::explain::Wait;
use crate::replay::{Follow, Moved};
use crate::Request;
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sys::affinity::CpuMask;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Which threads to watch: by name (a glob with `*` and `?`, matched against the
/// 15-character kernel name) or by TID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadPattern {
    /// One thread.
    Tid(i64),
    /// Threads whose name matches.
    Name(String),
}

impl ThreadPattern {
    /// A TID when `text` is a number, else a name glob.
    pub fn parse(text: &str) -> Result<ThreadPattern, String> {
        if text.is_empty() {
            return Err("an empty thread pattern".into());
        }
        if let Ok(tid) = text.parse::<i64>() {
            return if tid > 0 {
                Ok(ThreadPattern::Tid(tid))
            } else {
                Err(format!("'{text}': not a thread id"))
            };
        }
        Ok(ThreadPattern::Name(text.to_string()))
    }

    fn matches(&self, tid: i64, name: &str) -> bool {
        match self {
            ThreadPattern::Tid(t) => *t == tid,
            // The kernel keeps 15 bytes of a name: a longer pattern matches its prefix.
            ThreadPattern::Name(p) => glob(p.as_bytes(), name.as_bytes()),
        }
    }
}

impl std::fmt::Display for ThreadPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ThreadPattern::Tid(t) => write!(f, "{t}"),
            ThreadPattern::Name(n) => f.write_str(n),
        }
    }
}

/// `*` (any run) and `?` (any one byte) glob matching, whole string.
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, si));
                pi += 1;
            }
            Some(&c) if c == b'?' || c == s[si] => {
                pi += 1;
                si += 1;
            }
            _ => match star {
                Some((sp, ss)) => {
                    pi = sp + 1;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Which processes to watch, besides [`WatchSpec::pid`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Scope {
    /// The process, and (`children`) the processes it starts and they start, each from its
    /// start (the kernel adds a watched process's child to the watched set as it is created).
    Process { children: bool },
    /// Every process of a cgroup (v2), and of the cgroups below it: a container, a pod.
    Cgroup(std::path::PathBuf),
    /// Every process of the machine (rtlab's own and the kernel's threads excepted).
    #[default]
    All,
}

/// What to watch.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    /// The process, for [`Scope::Process`] (0: none yet, see [`WatchState::attach`]).
    pub pid: i32,
    /// Which processes.
    pub scope: Scope,
    /// Which of its threads (empty: all).
    pub threads: Vec<ThreadPattern>,
    /// Only threads with a real-time policy (SCHED_FIFO/RR), judged at each re-read.
    pub rt_only: bool,
    /// Delays over this are explained (0: any)...
    pub threshold_ns: u64,
    /// ... when among the `keep` longest of their kind in the interval so far; `keep` of each
    /// interval and kind are kept, and of the run.
    pub keep: usize,
    /// How far to go to record PI lock waits (the `lock` kind).
    pub locks: crate::LockWaits,
    /// Trace every CPU, not only those the watched threads may run on (to follow their
    /// wakers and lock holders elsewhere).
    pub all_cpus: bool,
    /// End delays where a wait returns to user space (the program's own view: a program on
    /// every system call's entry and exit where the kernel has no cheaper probe); false:
    /// where the thread got a CPU.
    pub user_view: bool,
}

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
    /// In the kernel's wait for a PI futex since.
    lock_since: Option<u64>,
    /// The requested expiry of the sleep timer that woke it, and its slack, until it runs.
    timer_expired: Option<(u64, u64)>,
    /// Runnable since (woken or preempted), not yet on a CPU.
    runnable_since: Option<u64>,
    /// The thread through its wakeups and switches, by the explainer's rules (a wakeup can
    /// come while it is still on its CPU going to sleep: the switch-out then still says
    /// asleep, and it counts from the wakeup).
    follow: Follow,
    /// Inside a system call it waits in, since its entry (where the recorder sees those):
    /// its delays then end where the call returns to user space.
    in_call: Option<InCall>,
    /// Delays whose wait returned while its JVM was at a safepoint: a Java thread runs no
    /// Java code until the safepoint is over, so they may end later (see [`Held`]).
    held: Option<Held>,
    /// In a Java park or sleep (where its JVM's probes tell): its delays end where the JVM
    /// returns to Java code, not where a wait call inside it returns.
    java_wait: Option<JavaWait>,
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

/// A delay begun: since when, the timer's slack in it, and when the thread got a CPU in
/// between (where that is not its end).
type Delay = (u64, u64, Option<u64>);

/// A thread's delays whose wait returned while its JVM was at a safepoint. A Java thread
/// then blocks at the safepoint's barrier until the VM thread lets every thread go, at the
/// safepoint's end: its delays end where that barrier wait returns, as the thread lives
/// them. A thread the safepoint does not stop (the VM's own, a collector's, native code)
/// goes on: its delays end where they returned. Which one it is shows at its returns after:
/// a wait woken within [`BARRIER_NS`] of the safepoint's end is the barrier's; more than
/// [`MAX_RETURNS_TO_BARRIER`] woken returns in one safepoint, a thread running through it.
#[derive(Debug, Clone)]
struct Held {
    /// The return that held them.
    at: Event,
    delays: Vec<(DelayKind, Delay)>,
    /// Its next return, while the safepoint was still on (the barrier's wait is woken just
    /// before the JVM's end probe fires): when its wait was woken, and its own delays.
    next: Option<NextReturn>,
    /// When that safepoint ended, if it has (its next return, or its next wait, decides).
    ended_ns: Option<u64>,
    /// When its VM operation ended, where seen.
    done_ns: Option<u64>,
    /// Its woken returns since (a Java thread's way to the barrier has one or two: a lock
    /// handed over on its way back, then the barrier's; a thread that runs through the
    /// safepoint has more).
    returns: u32,
}

/// A Java thread's park or sleep in progress (its JVM's `thread__park__begin`, or
/// `thread__sleep__begin`, came; its end has not): the wait calls it makes inside (the
/// park's own, a lock taken back, a safepoint's barrier) are one wait, as the Java code
/// lives it, from its first timer's expiry or wakeup to the probe at its end.
#[derive(Debug, Clone, Default)]
struct JavaWait {
    /// The time the park asked for, as its begin probe says (`parkNanos`' relative time from
    /// there: nearer the program's own deadline than the time the JVM asks the kernel for,
    /// computed later).
    deadline_ns: Option<u64>,
    /// The delays its first woken wait call returned with.
    delays: Vec<(DelayKind, Delay)>,
}

/// How far before the kernel's deadline a park's own may be (the JVM's way from the probe
/// to its wait call; more: not this wait's).
const PARK_DEADLINE_NS: u64 = 1_000_000;

/// A return from a wait: where, when its wait was woken, and the delays it ends.
type NextReturn = (Event, Option<u64>, Vec<(DelayKind, Delay)>);

/// How long an ended thread's own series stays before another may take its place.
const RETIRED_NS: u64 = 2_000_000_000;

/// The most processes a name's series remembers its threads were of (for its labels).
pub const MAX_OWNERS: usize = 16;

/// Whether a wait woken at `woken` is a safepoint's barrier (ended at `end_ns`, its VM
/// operation at `done_ns`): the VM thread wakes the Java threads after its operation, just
/// before the end probe (later where it is itself kept off its CPU meanwhile).
fn barrier_wake(woken: u64, end_ns: u64, done_ns: Option<u64>) -> bool {
    woken.abs_diff(end_ns) <= BARRIER_NS
        || done_ns.is_some_and(|done| woken >= done && woken <= end_ns + BARRIER_NS)
}

/// The most woken returns a thread makes in a safepoint on its way to the barrier.
const MAX_RETURNS_TO_BARRIER: u32 = 3;

/// How close to a safepoint's end a barrier's wait is woken (the VM thread wakes them, then
/// fires the end probe; on a busy machine the wake can lag).
const BARRIER_NS: u64 = 1_000_000;

/// A wait call in progress (see [`Watched::in_call`]).
#[derive(Debug, Clone, Copy)]
struct InCall {
    /// The time a sleep call asked for (CLOCK_MONOTONIC), where known.
    deadline_ns: Option<u64>,
    /// Its latest wakeup within the call, and when it got a CPU after it.
    woken_ns: Option<u64>,
    running_ns: Option<u64>,
}

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

/// How far behind the newest drain events are merged: the rings are drained one CPU after
/// another, and a record written during a drain is read by the next one.
const MERGE_LAG_NS: u64 = 20_000_000;
/// How often the threads are re-read; every `EARLY_RESCAN_NS` in the first `EARLY_NS` (a
/// program just started creates its threads then).
const RESCAN_NS: u64 = 1_000_000_000;
const EARLY_RESCAN_NS: u64 = 10_000_000;
const EARLY_NS: u64 = 3_000_000_000;
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
    observer_since: Vec<Option<u64>>,
    observer_ns: u64,
    /// Threads seen in a wait call but not chosen, until the next re-read.
    adopted_misses: std::collections::HashSet<i64>,
    /// Changes with the set of watched threads.
    generation: u64,
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
    /// The watched JVMs, through HotSpot's probes.
    jvms: jvm::Jvms,
}

impl WatchState {
    /// Watching `spec`; reads the threads once now.
    pub fn new(spec: WatchSpec) -> WatchState {
        let spec_keep = spec.keep;
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
            most_threads: 0,
            longest: Default::default(),
            book: OutlierBook::new(spec_keep),
            cpus_wanted: None,
            traced: CpuMask::default(),
            traced_ever: CpuMask::default(),
            wait_calls: false,
            ours: Default::default(),
            observer_since: Vec::new(),
            observer_ns: 0,
            adopted_misses: Default::default(),
            generation: 0,
            lost_by_cpu: Default::default(),
            jvms: jvm::Jvms::default(),
            processes: HashMap::new(),
            thread_process: HashMap::new(),
            known: HashMap::new(),
        };
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

    /// The processes in scope now (by [`WatchSpec::scope`], as last read), or None before a
    /// command's process is attached.
    fn processes_in_scope(&mut self) -> Option<Vec<u32>> {
        let ours = std::process::id();
        match &self.spec.scope {
            Scope::Process { .. } if self.spec.pid <= 0 => None,
            Scope::Process { children } => {
                let pid = self.spec.pid as u32;
                if !rtlab_sys::procfs::process_alive(pid as i32) {
                    return Some(Vec::new());
                }
                Some(match children {
                    true => self.parents.tree(pid),
                    false => vec![pid],
                })
            }
            Scope::Cgroup(dir) => Some(
                rtlab_sys::procfs::cgroup_processes(dir)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|&p| p != ours)
                    .collect(),
            ),
            Scope::All => Some(
                self.parents
                    .read()
                    .into_iter()
                    .filter(|&(pid, ppid)| pid != 2 && ppid != 2 && pid != ours)
                    .map(|(pid, _)| pid)
                    .collect(),
            ),
        }
    }

    /// Whether process `pid`, found through one of its threads' events, is in scope (a
    /// process started since the last re-read).
    fn in_scope(&self, pid: u32) -> bool {
        if self.processes.contains_key(&pid) {
            return true;
        }
        match &self.spec.scope {
            Scope::Process { children: false } => false,
            Scope::Process { children: true } => {
                // A descendant of the watched process.
                let root = self.spec.pid as u32;
                let mut p = pid;
                for _ in 0..64 {
                    match rtlab_sys::procfs::parent_of(p) {
                        Some(parent) if parent == root => return true,
                        Some(parent) if parent > 1 && parent != p => p = parent,
                        _ => return false,
                    }
                }
                false
            }
            // (Read again: any hierarchy, v1 or v2, has cgroup.procs.)
            Scope::Cgroup(dir) => {
                rtlab_sys::procfs::cgroup_processes(dir).is_ok_and(|procs| procs.contains(&pid))
            }
            Scope::All => pid != std::process::id(),
        }
    }

    /// The name (`comm`) and cgroup of watched process `pid`, as last read.
    pub fn process(&self, pid: u32) -> Option<&(String, String)> {
        self.known.get(&pid)
    }

    fn know(&mut self, pid: u32, what: &(String, String)) {
        if self.known.len() < MAX_KNOWN || self.known.contains_key(&pid) {
            self.known.insert(pid, what.clone());
        }
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

    /// Whether a `kind` delay of `ns` is to be explained: over the threshold and among the
    /// interval's longest so far.
    fn admit(&mut self, kind: DelayKind, ns: u64) -> bool {
        if ns <= self.spec.threshold_ns {
            return false;
        }
        let longest = &mut self.longest[kind as usize];
        let keep = self.spec.keep.max(1);
        if longest.len() >= keep {
            if ns <= longest[0] {
                return false;
            }
            longest.remove(0);
        }
        let at = longest.partition_point(|&l| l < ns);
        longest.insert(at, ns);
        true
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

    fn series_index(
        &mut self,
        thread: &str,
        tid: Option<i64>,
        kind: DelayKind,
        rt: bool,
    ) -> Option<u16> {
        let name = match (tid, rt) {
            _ if kind == DelayKind::Safepoint => format!("jvm:{thread}/safepoint"),
            (Some(tid), _) => format!("{thread}/{tid}/{}", kind.name()),
            (None, true) => format!("{thread}/{}", kind.name()),
            (None, false) => format!("{thread}:ts/{}", kind.name()),
        };
        if let Some(&i) = self.index.get(&name) {
            // A thread of an ended one's TID and name: the series is its own again.
            self.retired.retain(|&(r, _)| r != i);
            return Some(i);
        }
        let fresh = WatchSeries {
            name: name.clone(),
            rt,
            members: Vec::new(),
            owners: Vec::new(),
            process: tid.and_then(|t| self.thread_process.get(&t).copied()),
            thread: thread.to_string(),
            tid,
            kind,
            total: LatencyHistogram::compact(),
            interval: LatencyHistogram::compact(),
            last_interval_max: Nanos(0),
            unmeasured: 0,
        };
        let i = if self.series.len() < MAX_SERIES {
            self.series.push(fresh);
            self.series.len() as u16 - 1
        } else {
            // At the limit: in the place of an ended thread's own series, one ended a while
            // ago (an explanation still pending names its series by index) whose interval
            // has gone to the log.
            let now = self.scanned_ns;
            let free = self.retired.iter().position(|&(r, at)| {
                now >= at + RETIRED_NS && self.series[r as usize].interval.is_empty()
            })?;
            let (i, _) = self.retired.remove(free)?;
            let old = std::mem::replace(&mut self.series[i as usize], fresh);
            self.index.remove(&old.name);
            for s in &mut self.series {
                s.members.retain(|&m| m != i);
            }
            i
        };
        self.index.insert(name, i);
        Some(i)
    }

    /// The series of thread `tid` called `name`, and of its name and class, for `kind`.
    fn pair(&mut self, name: &str, tid: i64, kind: DelayKind, rt: bool) -> Option<Pair> {
        let own = self.series_index(name, Some(tid), kind, rt)?;
        let Some(by_name) = self.series_index(name, None, kind, rt) else {
            // In no pair: free for the next thread.
            self.retired.push_front((own, 0));
            return None;
        };
        self.join(by_name, own);
        Some(Pair { own, by_name })
    }

    /// Thread series `own` counts to name series `by_name` (from now on).
    fn join(&mut self, by_name: u16, own: u16) {
        let process = self.series[own as usize].process;
        let s = &mut self.series[by_name as usize];
        if !s.members.contains(&own) {
            s.members.push(own);
        }
        if let Some(p) = process {
            if !s.owners.contains(&p) && s.owners.len() < MAX_OWNERS {
                s.owners.push(p);
            }
        }
    }

    /// Thread `tid` is real-time now (`rt`) or time-sharing: its delays from now on count
    /// to its name's series of that class.
    fn classify(&mut self, tid: i64, rt: bool) {
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        if w.rt == rt {
            return;
        }
        w.rt = rt;
        let (name, pairs) = (w.name.clone(), w.pairs);
        for (k, pair) in pairs.iter().enumerate() {
            let Some(p) = pair else { continue };
            let kind = self.series[p.own as usize].kind;
            let by_name = self.series_index(&name, None, kind, rt);
            if let Some(b) = by_name {
                self.join(b, p.own);
            }
            if let Some(w) = self.threads.get_mut(&tid) {
                w.pairs[k] = by_name.map(|by_name| Pair {
                    own: p.own,
                    by_name,
                });
            }
        }
    }

    /// Whether the watch is in its first moments after starting or attaching (a program
    /// just started creates its threads then): the reader polls more often meanwhile, so the
    /// kernel's filter of wait calls takes a new process in within a millisecond.
    pub fn just_attached(&self, now_ns: u64) -> bool {
        now_ns < self.started_ns + JUST_ATTACHED_NS
    }

    /// How long rtlab's own threads (the observer: its reader, log writer, metrics server)
    /// ran on the traced CPUs so far.
    pub fn observer_ns(&self) -> u64 {
        self.observer_ns
    }

    /// Re-reads the threads: new ones are watched, exited ones dropped (their series stay).
    fn rescan(&mut self, now: u64) {
        self.scanned_ns = now;
        if let Ok(ours) = rtlab_sys::procfs::thread_names_of(std::process::id() as i32) {
            self.ours = ours
                .iter()
                .filter(|t| crate::reader::is_observer_thread(&t.name))
                .map(|t| t.tid as i64)
                .collect();
        }
        self.adopted_misses.clear();
        let Some(procs) = self.processes_in_scope() else {
            return; // not attached yet
        };
        // The watched process gone (or a cgroup removed): the watch ends.
        let whole_scope_gone = match &self.spec.scope {
            Scope::Process { .. } => procs.is_empty(),
            Scope::Cgroup(dir) => !dir.is_dir(),
            Scope::All => false,
        };
        if whole_scope_gone {
            self.gone = true;
            return;
        }
        let mut processes = HashMap::new();
        let mut threads = Vec::new();
        for pid in procs {
            let Ok(mut of) = rtlab_sys::procfs::thread_names_of(pid as i32) else {
                continue;
            };
            // Read each time: an exec renames it.
            let name = rtlab_sys::procfs::task_comm(pid as i64)
                .or_else(|| self.processes.get(&pid).map(|p| p.0.clone()))
                .unwrap_or_default();
            let cgroup = rtlab_sys::procfs::cgroup_of(pid).unwrap_or_default();
            processes.insert(pid, (name, cgroup));
            for t in &of {
                self.thread_process.insert(t.tid as i64, pid);
            }
            threads.append(&mut of);
        }
        for (p, what) in &processes {
            self.know(*p, what);
        }
        self.jvms.look(processes.keys().copied(), now);
        self.thread_process.retain(|_, p| processes.contains_key(p));
        let mut alive = HashMap::new();
        let cpus_of = |tid: i64| {
            rtlab_sys::affinity::thread_cpus(tid as i32)
                .map_or_else(CpuMask::default, |c| CpuMask::of(c.as_slice()))
        };
        // Until a thread is chosen, where any of them may run (a new thread starts where its
        // creator may run).
        let mut wanted = if self.spec.all_cpus {
            None
        } else {
            Some(threads.iter().fold(CpuMask::default(), |mut m, t| {
                m.union_with(&cpus_of(t.tid as i64));
                m
            }))
        };
        let mut chosen_cpus = CpuMask::default();
        let mut reclassify = Vec::new();
        for t in threads {
            let tid = t.tid as i64;
            let chosen = self.spec.threads.is_empty()
                || self.spec.threads.iter().any(|p| p.matches(tid, &t.name));
            if !chosen {
                continue;
            }
            let rt = rtlab_sys::sched::thread_is_realtime(tid as i32).unwrap_or(false);
            if self.spec.rt_only && !rt {
                continue;
            }
            if wanted.is_some() {
                chosen_cpus.union_with(&cpus_of(tid));
            }
            let watched = match self.threads.remove(&tid) {
                Some(w) if w.name == t.name => w,
                // New, or renamed (a JVM names its threads after starting them): a renamed
                // one keeps its state, under its new name's series.
                previous => match self.new_watched(tid, t.name, rt) {
                    Some(fresh) => match previous {
                        Some(p) => {
                            let old = p.pairs.iter().flatten().map(|q| (q.own, now));
                            self.retired.extend(old);
                            Watched {
                                name: fresh.name,
                                rt: fresh.rt,
                                pairs: fresh.pairs,
                                refused: fresh.refused,
                                ..p
                            }
                        }
                        None => fresh,
                    },
                    None => continue,
                },
            };
            alive.insert(tid, watched);
            reclassify.push((tid, rt));
        }
        let changed = alive.len() != self.threads.len()
            || alive.keys().any(|t| !self.threads.contains_key(t));
        // A thread that exited is kept until its last events have been merged (they lag
        // the re-read by up to the merge's lag): its last periods count.
        for (tid, mut w) in self.threads.drain() {
            let since = *w.exited_ns.get_or_insert(now);
            if now < since + 4 * MERGE_LAG_NS {
                alive.insert(tid, w);
            } else {
                self.retired
                    .extend(w.pairs.iter().flatten().map(|p| (p.own, now)));
                // Delays it still held (its JVM's safepoint never seen to end) are lost.
                if let Some(h) = w.held.take() {
                    let next = h.next.into_iter().flat_map(|n| n.2);
                    for (kind, _) in h.delays.into_iter().chain(next) {
                        self.abandoned += 1;
                        if let Some(p) = w.pairs.get(kind as usize).copied().flatten() {
                            self.series[p.own as usize].unmeasured += 1;
                            self.series[p.by_name as usize].unmeasured += 1;
                        }
                    }
                }
            }
        }
        self.threads = alive;
        for (tid, rt) in reclassify {
            self.classify(tid, rt);
        }
        // A node's or a cgroup's real-time threads: only their processes are watched in the
        // kernel (their events in rings of their own, their wait calls recorded); the others
        // are read again for new real-time threads at each re-read.
        if self.spec.rt_only && !matches!(self.spec.scope, Scope::Process { .. }) {
            let with: std::collections::HashSet<u32> = self
                .threads
                .keys()
                .filter_map(|t| self.thread_process.get(t))
                .copied()
                .collect();
            processes.retain(|p, _| with.contains(p));
        }
        if processes.len() != self.processes.len()
            || processes.keys().any(|p| !self.processes.contains_key(p))
        {
            self.generation += 1;
        }
        self.processes = processes;
        self.generation += changed as u64;
        self.most_threads = self.most_threads.max(self.watched_threads());
        if !chosen_cpus.is_empty() {
            wanted = Some(chosen_cpus);
        }
        if wanted.as_ref().is_none_or(|w| !w.is_empty()) {
            self.cpus_wanted = wanted;
        }
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
            Kind::LockPi { trylock: false }
            | Kind::LockPiDone { .. }
            | Kind::WaitEnter { .. }
            | Kind::WaitExit { .. } => watched(&e.current_pid),
            Kind::Lost(_) => true,
            Kind::Jvm { probe, .. } if probe.of_thread() => watched(&e.current_pid),
            Kind::Jvm { process, .. } => self.processes.contains_key(process),
            _ => false,
        };
        if relevant {
            self.arrived += 1;
            self.heap
                .push(Reverse(Timed(e.ts_ns, self.arrived, e.clone())));
        }
    }

    /// Watches thread `tid` of the process now, if it is one and the spec chooses it
    /// (between re-reads: a thread the program just started).
    fn adopt(&mut self, tid: i64) {
        if self.adopted_misses.contains(&tid) {
            return;
        }
        // Its process: a watched one, or one started since the last re-read that is in scope
        // (a child of the watched process, a new process of the cgroup).
        let process = rtlab_sys::procfs::process_of(tid).filter(|&p| self.in_scope(p));
        if let Some(p) = process {
            self.thread_process.insert(tid, p);
        }
        if let Some(p) = process.filter(|p| !self.processes.contains_key(p)) {
            let name = rtlab_sys::procfs::task_comm(p as i64).unwrap_or_default();
            let cgroup = rtlab_sys::procfs::cgroup_of(p).unwrap_or_default();
            self.know(p, &(name.clone(), cgroup.clone()));
            self.processes.insert(p, (name, cgroup));
            self.generation += 1;
        }
        let name = match process {
            Some(_) => std::fs::read_to_string(format!("/proc/{tid}/comm"))
                .map(|s| s.trim_end().to_string()),
            None => Err(std::io::Error::other("not in scope")),
        };
        let rt = rtlab_sys::sched::thread_is_realtime(tid as i32).unwrap_or(false);
        let chosen = name.as_ref().is_ok_and(|n| {
            (self.spec.threads.is_empty() || self.spec.threads.iter().any(|p| p.matches(tid, n)))
                && (!self.spec.rt_only || rt)
        });
        match (chosen, name) {
            (true, Ok(name)) => {
                if let Some(w) = self.new_watched(tid, name, rt) {
                    self.threads.insert(tid, w);
                    self.generation += 1;
                    self.most_threads = self.most_threads.max(self.watched_threads());
                }
            }
            // Not chosen (or gone): not looked up again until the next re-read.
            _ => {
                self.adopted_misses.insert(tid);
            }
        }
    }

    /// A newly watched thread's state, with its `wakeup` series (None at the series limit,
    /// counted).
    fn new_watched(&mut self, tid: i64, name: String, rt: bool) -> Option<Watched> {
        // Its series are made at its first delay of each kind, under the name it has then
        // (a thread named right after it starts, as most are, is counted under that name).
        Some(Watched {
            name,
            rt,
            pairs: [None; 3],
            refused: [false; 3],
            lock_since: None,
            timer_expired: None,
            runnable_since: None,
            follow: Follow::anywhere(tid),
            in_call: None,
            held: None,
            java_wait: None,
            period_ns: None,
            last_timer_ns: None,
            last_timer_delay: None,
            entered_ns: None,
            exited_ns: None,
        })
    }

    /// Counts the observer's time on `cpu` at a switch from `prev` to `next` (each CPU's
    /// events arrive in order).
    fn observe(&mut self, cpu: usize, ts_ns: u64, prev: i64, next: i64) {
        if self.observer_since.len() <= cpu {
            self.observer_since.resize(cpu + 1, None);
        }
        if let Some(since) = self.observer_since[cpu].take() {
            if self.ours.contains(&prev) {
                self.observer_ns += ts_ns.saturating_sub(since);
            }
        }
        if next > 0 && self.ours.contains(&next) {
            self.observer_since[cpu] = Some(ts_ns);
        }
    }

    /// Processes the events up to `drained_at - MERGE_LAG_NS` in time order (`drained_at`:
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
        let watermark = drained_at.saturating_sub(MERGE_LAG_NS);
        while self.heap.peek().is_some_and(|Reverse(t)| t.0 <= watermark) {
            let Some(Reverse(Timed(_, _, e))) = self.heap.pop() else {
                break;
            };
            self.step(&e, request);
        }
    }

    /// Processes everything left (the run is ending).
    pub(crate) fn flush(&mut self, request: &mut dyn FnMut(Request)) {
        while let Some(Reverse(Timed(_, _, e))) = self.heap.pop() {
            self.step(&e, request);
        }
    }

    fn step(&mut self, e: &Event, request: &mut dyn FnMut(Request)) {
        match &e.kind {
            // From `sched_waking` (the decision to wake it), as the scheduler's own wakeup
            // tracepoints count, not from its timer's expiry (earlier by the timer
            // interrupt's path): that is the `timer` kind's start.
            Kind::Waking { task, .. } => {
                // A waking only comes for a task that set itself asleep, so the latest one
                // marks the start (an earlier one was for a sleep it never entered).
                if let Some(w) = self.threads.get_mut(&task.pid) {
                    w.follow.step(e);
                    w.runnable_since = Some(e.ts_ns);
                    if let Some(c) = w.in_call.as_mut() {
                        c.woken_ns = Some(e.ts_ns);
                        c.running_ns = None;
                    }
                }
            }
            Kind::HrtimerEntry {
                function,
                task: Some(task),
                expires_ns: Some(expires),
                slack_ns,
            } if &**function == "hrtimer_wakeup" => {
                if let Some(w) = self.threads.get_mut(&task.pid) {
                    // (Its wakeup counts from the `sched_waking` that follows.)
                    w.follow.step(e);
                    w.timer_expired = Some((*expires, *slack_ns));
                }
            }
            Kind::Switch { prev, next, .. } => {
                if let Some(w) = self.threads.get_mut(&prev.pid) {
                    // An expiry seen before it left its CPU ended no wait of it (a sleep
                    // timer that fired while it ran, woken otherwise, before it was
                    // cancelled), unless it came within the wait call it is in (the timer
                    // fired before it was off its CPU, or it was preempted after it).
                    if w.in_call.is_none() {
                        w.timer_expired = None;
                    }
                    // Preempted: runnable from now on; asleep: not until woken, unless the
                    // wakeup already came (then from that wakeup).
                    if let Moved::SwitchedOut {
                        asleep, preempted, ..
                    } = w.follow.step(e)
                    {
                        w.runnable_since = match (preempted, asleep) {
                            (true, _) => Some(e.ts_ns),
                            (false, false) => w.runnable_since,
                            (false, true) => None,
                        };
                    }
                }
                // Its class as the scheduler has it now (a thread made real-time after it
                // started counts to its name's real-time series from here on).
                if self.threads.contains_key(&next.pid) && next.pid != 0 {
                    self.classify(next.pid, next.prio < 100);
                }
                self.switched_in(next.pid, e, request);
            }
            Kind::LockPi { trylock: false } => {
                if let Some(w) = self.threads.get_mut(&e.current_pid) {
                    w.lock_since = Some(e.ts_ns);
                }
            }
            Kind::LockPiDone { .. } => {
                let tid = e.current_pid;
                let Some(since) = self.threads.get_mut(&tid).and_then(|w| w.lock_since.take())
                else {
                    return;
                };
                if let Some(pair) = self.pair_of(tid, DelayKind::Lock) {
                    self.sample((pair, tid), (since, 0, None), e, Wait::Lock, request);
                }
            }
            Kind::WaitEnter { deadline_ns, .. } => {
                self.release_held(e, request);
                if let Some(w) = self.threads.get_mut(&e.current_pid) {
                    w.timer_expired = None;
                    // (A Java park's own entry is its begin probe's.)
                    if w.java_wait.is_none() {
                        w.entered_ns = Some(e.ts_ns);
                    }
                    w.in_call = Some(InCall {
                        deadline_ns: *deadline_ns,
                        woken_ns: None,
                        running_ns: None,
                    });
                }
            }
            Kind::WaitExit { ret, .. } => self.returned(e, *ret, request),
            Kind::Jvm { probe, park_ns, .. } if probe.of_thread() => {
                self.java_wait(e, *probe, *park_ns, request)
            }
            Kind::Jvm { .. } => {
                if let Some(stop) = self.jvms.step(e) {
                    self.jvms.keep(&stop);
                    self.settle_held(&stop, request);
                    let op = stop.operation.as_deref().unwrap_or("unnamed");
                    if let Some(i) = self.series_index(op, None, DelayKind::Safepoint, true) {
                        let s = &mut self.series[i as usize];
                        s.process = Some(stop.process);
                        let d = Nanos(stop.end_ns.saturating_sub(stop.begin_ns));
                        s.total.record(d);
                        s.interval.record(d);
                    }
                }
            }
            Kind::Lost(_) => {
                self.jvms.forget();
                // The observer's switch away may be among them too.
                if let Some(since) = self.observer_since.get_mut(e.cpu as usize) {
                    *since = None;
                }
                // The switch that ended a pending delay may be among the lost events: a
                // later one would measure too long a delay. Each is counted unmeasured, in
                // its thread's series and its name's.
                let mut cut = Vec::new();
                for (&tid, w) in self.threads.iter_mut() {
                    let in_call = w.in_call.take();
                    if let Some(h) = w.held.take() {
                        let next = h.next.into_iter().flat_map(|n| n.2);
                        cut.extend(h.delays.into_iter().chain(next).map(|(k, _)| (tid, k)));
                    }
                    if let Some(j) = w.java_wait.take() {
                        cut.extend(j.delays.into_iter().map(|(k, _)| (tid, k)));
                    }
                    let pending = [
                        (w.runnable_since.take().is_some(), DelayKind::Wakeup),
                        (w.timer_expired.take().is_some(), DelayKind::Timer),
                        (w.lock_since.take().is_some(), DelayKind::Lock),
                        (
                            in_call.is_some(),
                            match in_call.and_then(|c| c.deadline_ns) {
                                Some(_) => DelayKind::Timer,
                                None => DelayKind::Wakeup,
                            },
                        ),
                    ];
                    cut.extend(pending.into_iter().filter(|p| p.0).map(|p| (tid, p.1)));
                }
                for (tid, kind) in cut {
                    self.abandoned += 1;
                    if let Some(pair) = self.pair_of(tid, kind) {
                        for i in [pair.own, pair.by_name] {
                            self.series[i as usize].unmeasured += 1;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// Thread `tid` got a CPU at `e`: the delays it ends, unless it is inside a wait call
    /// (then they end where the call returns, [`WatchState::returned`]).
    fn switched_in(&mut self, tid: i64, e: &Event, request: &mut dyn FnMut(Request)) {
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        w.follow.step(e);
        if let Some(c) = w.in_call.as_mut() {
            c.running_ns.get_or_insert(e.ts_ns);
            w.runnable_since = None;
            return;
        }
        let wakeup = w.runnable_since.take().map(|since| (since, 0));
        let timer = w.timer_expired.take();
        if let Some((since, slack)) = wakeup {
            self.sample_kind(DelayKind::Wakeup, tid, (since, slack, None), e, request);
        }
        if let Some((since, slack)) = timer {
            self.sample_kind(DelayKind::Timer, tid, (since, slack, None), e, request);
        }
    }

    /// Thread `tid`'s wait call returned to user space at `e` with `ret`: its delays in that
    /// call end here, as the program sees them. A sleep timer that expired in the call is a
    /// `timer` delay from its expiry; a sleep to a time already past when it was asked for
    /// (no timer was armed: the period ran late) one from that time; a wakeup within the
    /// call a `wakeup` delay from it.
    fn returned(&mut self, e: &Event, ret: i64, request: &mut dyn FnMut(Request)) {
        let tid = e.current_pid;
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        let Some(call) = w.in_call.take() else {
            return; // entered before the watch saw it: ended at its switch-in
        };
        w.runnable_since = None;
        // The timer that fired within the call (the entry clears an older one). Its expiry
        // may be before the entry: a wait to a deadline that passed on the way into the call
        // (a Java park of a few microseconds left) is late from that deadline.
        let timer = w.timer_expired.take();
        let running = call.running_ns;
        // The time the program asked for where the call says (what it measures its lateness
        // against), else the timer's expiry; a sleep cut short (a signal) is no lateness.
        // A timer that expired far from the time asked belongs to another call (this call's
        // own events were lost): nothing is measured from it.
        if let (Some(asked), Some((expiry, _))) = (call.deadline_ns, timer) {
            if asked.abs_diff(expiry) > 1_000_000 {
                self.abandoned += 1;
                return;
            }
        }
        let start = match (call.deadline_ns, timer) {
            (Some(asked), t) if ret == 0 || t.is_some() => Some((asked, t.map_or(0, |t| t.1))),
            (None, t) => t,
            _ => None,
        };
        let mut delays = Vec::new();
        if let Some((since, slack)) = start.filter(|s| s.0 <= e.ts_ns) {
            delays.push((
                DelayKind::Timer,
                (since, slack, running.filter(|&r| r >= since)),
            ));
        }
        if let Some(woken) = call.woken_ns {
            delays.push((
                DelayKind::Wakeup,
                (woken, 0, running.filter(|&r| r >= woken)),
            ));
        }
        // In a Java park or sleep: they end where it returns to Java code. (Its first wait
        // call is the park's own; later ones take its lock back or wait at a safepoint's
        // barrier on its way out.)
        if let Some(j) = self
            .threads
            .get_mut(&tid)
            .and_then(|w| w.java_wait.as_mut())
        {
            if j.delays.is_empty() {
                j.delays = delays;
            }
            return;
        }
        // Its JVM at a safepoint: no Java code runs until it is over (see `Held`).
        let process = self.thread_process.get(&tid).copied();
        let jvm_stopped = process.is_some_and(|p| self.jvms.at_safepoint(p));
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        // A call that returned without being woken (a lock taken at once on the way back
        // from a timed wait) is no sign either way.
        if w.held.is_some() && call.woken_ns.is_none() && delays.is_empty() {
            return;
        }
        // Held in a safepoint since ended: this first return after it was the barrier's
        // where its wake came at the end, else the thread had gone on.
        if let Some(h) = w.held.take_if(|h| h.ended_ns.is_some()) {
            let end = h.ended_ns.unwrap_or(0);
            match call.woken_ns {
                Some(woken) if barrier_wake(woken, end, h.done_ns) => {
                    self.stretch(tid, h.delays, e, request)
                }
                _ => self.release_at_own_returns(tid, h, request),
            }
        }
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        match w.held.take() {
            None if jvm_stopped && !delays.is_empty() => {
                w.held = Some(Held {
                    at: e.clone(),
                    delays,
                    next: None,
                    ended_ns: None,
                    done_ns: None,
                    returns: 0,
                });
                return;
            }
            None => {}
            // Its latest return, the safepoint still on: the barrier's, if the JVM's end
            // comes soon after its wake (decided then, in `settle_held`); an earlier one was
            // on its way there and ends where it returned.
            Some(mut h) if jvm_stopped && h.returns < MAX_RETURNS_TO_BARRIER => {
                h.returns += 1;
                let earlier = h.next.replace((e.clone(), call.woken_ns, delays));
                w.held = Some(h);
                if let Some((at, _, delays)) = earlier {
                    for (kind, delay) in delays {
                        self.sample_kind(kind, tid, delay, &at, request);
                    }
                }
                return;
            }
            // More returns in one safepoint: it runs on through it. (Or its end was lost
            // from sight: nothing is stretched.)
            Some(h) => self.release_at_own_returns(tid, h, request),
        }
        for (kind, delay) in delays {
            self.sample_kind(kind, tid, delay, e, request);
        }
    }

    /// A Java thread's park or sleep begun or ended at `e` (its JVM's probe): at its end, the
    /// delays its wait calls returned with end here, where its Java code goes on. A timer
    /// delay counts from the time the park asked for, where its begin probe said.
    fn java_wait(
        &mut self,
        e: &Event,
        probe: JvmProbe,
        park_ns: Option<u64>,
        request: &mut dyn FnMut(Request),
    ) {
        let tid = e.current_pid;
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        if matches!(probe, JvmProbe::ParkBegin | JvmProbe::SleepBegin) {
            // One begun before without its end (lost from sight): nothing measured from it.
            if w.java_wait.take().is_some_and(|j| !j.delays.is_empty()) {
                self.abandoned += 1;
            }
            let Some(w) = self.threads.get_mut(&tid) else {
                return;
            };
            w.entered_ns = Some(e.ts_ns);
            w.java_wait = Some(JavaWait {
                deadline_ns: park_ns.map(|t| e.ts_ns.saturating_add(t)),
                delays: Vec::new(),
            });
            return;
        }
        let Some(j) = w.java_wait.take() else {
            return; // begun before the watch saw it: ended where its call returned
        };
        for (kind, (mut since, slack, running)) in j.delays {
            if let Some(asked) = j.deadline_ns.filter(|_| kind == DelayKind::Timer) {
                if asked < since && since - asked <= PARK_DEADLINE_NS {
                    since = asked;
                }
            }
            self.sample_kind(kind, tid, (since, slack, running), e, request);
        }
    }

    /// Held delays that end at `end`: each, and the periods it absorbed.
    fn stretch(
        &mut self,
        tid: i64,
        delays: Vec<(DelayKind, Delay)>,
        end: &Event,
        request: &mut dyn FnMut(Request),
    ) {
        for (kind, delay) in delays {
            self.sample_kind(kind, tid, delay, end, request);
        }
    }

    /// Held delays of a thread the safepoint did not stop: each ends where it returned.
    fn release_at_own_returns(&mut self, tid: i64, h: Held, request: &mut dyn FnMut(Request)) {
        for (kind, delay) in h.delays {
            self.sample_kind(kind, tid, delay, &h.at, request);
        }
        if let Some((at, _, delays)) = h.next {
            for (kind, delay) in delays {
                self.sample_kind(kind, tid, delay, &at, request);
            }
        }
    }

    /// JVM `stop.process`'s safepoint ended: its threads' held delays with a second return
    /// in it are settled (that return was the barrier's where woken at the end); the others
    /// wait for their next return or wait, knowing the end.
    fn settle_held(&mut self, stop: &Stop, request: &mut dyn FnMut(Request)) {
        let mut settled = Vec::new();
        for (tid, w) in self.threads.iter_mut() {
            if self.thread_process.get(tid) != Some(&stop.process) {
                continue;
            }
            match w.held.as_mut() {
                // Held since an earlier safepoint, asleep through this one: they were not
                // this one's to stretch.
                Some(h) if h.next.is_some() || h.ended_ns.is_some() => {
                    settled.push((*tid, w.held.take().expect("some")))
                }
                Some(h) => {
                    h.ended_ns = Some(stop.end_ns);
                    h.done_ns = stop.done_ns;
                }
                None => {}
            }
        }
        for (tid, mut h) in settled {
            let barrier = h.ended_ns.is_none()
                && h.next.as_ref().is_some_and(|n| {
                    n.1.is_some_and(|woken| barrier_wake(woken, stop.end_ns, stop.done_ns))
                });
            if !barrier {
                self.release_at_own_returns(tid, h, request);
                continue;
            }
            let (at, _, delays) = h.next.take().expect("checked");
            self.stretch(tid, h.delays, &at, request);
            for (kind, delay) in delays {
                self.sample_kind(kind, tid, delay, &at, request);
            }
        }
    }

    /// The periods of a periodic Java thread it ran without waiting, seen when its next
    /// timer delay begins at `next`: its deadlines after the last one's start (one period
    /// apart) that it never waited for. After any delay over a period (a JVM's stop, while it
    /// waited or while it ran, or the machine's), a Java thread runs the periods it missed at
    /// once (`LockSupport.parkNanos` with a time already past makes no system call), then
    /// waits for the next: each such period is late, as it sees it, by the time from its
    /// deadline to that wait's entry. (Periods the kernel never sees, as HdrHistogram's
    /// correction for an expected interval counts them.)
    fn skipped(&mut self, tid: i64, next: u64) {
        // Only a Java thread: a C program's sleep to a time already past is a call of its
        // own (counted), and one that skips the periods it missed (cyclictest) does not
        // count them.
        let jvm = self
            .thread_process
            .get(&tid)
            .is_some_and(|&p| self.jvms.is_jvm(p));
        let Some(w) = self.threads.get(&tid).filter(|_| jvm) else {
            return;
        };
        let (Some(period), Some((since, end))) = (w.period_ns, w.last_timer_delay) else {
            return;
        };
        let Some(pair) = w.pairs[DelayKind::Timer as usize] else {
            return;
        };
        // Caught up just before it entered this wait (else, where the last delay ended).
        let caught_up = w.entered_ns.filter(|&t| t >= end).unwrap_or(end);
        let mut deadline = since + period;
        while deadline + period / 2 < next && deadline < caught_up {
            for i in [pair.own, pair.by_name] {
                let s = &mut self.series[i as usize];
                s.total.record(Nanos(caught_up - deadline));
                s.interval.record(Nanos(caught_up - deadline));
            }
            deadline += period;
        }
    }

    /// Thread `e.current_pid` enters a wait with delays held since a safepoint, its JVM no
    /// longer stopped: it went on without waiting at the safepoint's barrier. A Java thread
    /// (the safepoint ended just after its return, before it got there) lived them to the
    /// safepoint's end; another thread to its return.
    fn release_held(&mut self, e: &Event, request: &mut dyn FnMut(Request)) {
        let tid = e.current_pid;
        let Some(process) = self.thread_process.get(&tid).copied() else {
            return;
        };
        if self.jvms.at_safepoint(process) {
            return; // the barrier's own wait
        }
        let Some(h) = self.threads.get_mut(&tid).and_then(|w| w.held.take()) else {
            return;
        };
        // A Java thread gets to the barrier within microseconds of its return: one that
        // missed it saw the safepoint end soon after. Another thread just went on.
        let end = h.ended_ns.unwrap_or(e.ts_ns);
        if h.next.is_some() || end.saturating_sub(h.at.ts_ns) > BARRIER_NS {
            return self.release_at_own_returns(tid, h, request);
        }
        let end = Event {
            ts_ns: end.max(h.at.ts_ns).min(e.ts_ns),
            ..e.clone()
        };
        self.stretch(tid, h.delays, &end, request);
    }

    /// The JVM about to be started uses `libjvm`: its probes are attached now, before it
    /// runs (see [`WatchState::jvm_pending`]).
    pub fn expect_jvm(&mut self, libjvm: std::path::PathBuf) {
        self.jvms.expect(libjvm);
    }

    /// A libjvm.so given to [`WatchState::expect_jvm`] is not attached to yet.
    pub fn jvm_pending(&self) -> bool {
        self.jvms.pending()
    }

    /// The libjvm.so files of watched JVMs found since the last call (for the recorder to
    /// attach to their probes).
    pub(crate) fn take_jvm_libraries(&mut self) -> Vec<std::path::PathBuf> {
        self.jvms.take_found()
    }

    /// What came of attaching to a JVM's probes.
    pub(crate) fn jvm_probed(&mut self, libjvm: &std::path::Path, r: Result<usize, String>) {
        // Named as the process maps it (opened through its /proc/<pid>/root).
        let shown = libjvm.to_string_lossy();
        let shown = match shown.strip_prefix("/proc/") {
            Some(rest) => rest
                .split_once("/root")
                .map_or(shown.to_string(), |(_, p)| p.to_string()),
            None => shown.to_string(),
        };
        let libjvm = std::path::Path::new(&shown);
        let note = match r {
            Ok(0) => return,
            Ok(n) => format!(
                "JVM: {} of HotSpot's probes attached in {} (safepoints, VM operations, collections, the watched threads' parks and sleeps)",
                n,
                libjvm.display()
            ),
            Err(why) => format!("JVM: no probes ({why}): its threads are watched from the kernel only"),
        };
        self.jvms.notes.push(note);
    }

    /// The watched JVMs' latest safepoints (at most a thousand, oldest first), and how many
    /// there were in all.
    pub fn jvm_stops(&self) -> (impl Iterator<Item = &Stop>, u64) {
        (self.jvms.stops.iter(), self.jvms.stops_seen)
    }

    /// What the watch did with the JVMs it watched (one line each).
    pub fn jvm_notes(&self) -> &[String] {
        &self.jvms.notes
    }

    /// One `kind` delay of thread `tid` from `since` to `e`, `running` the time it got a CPU
    /// in between where that is not `e` itself.
    fn sample_kind(
        &mut self,
        kind: DelayKind,
        tid: i64,
        (since, slack, running): (u64, u64, Option<u64>),
        e: &Event,
        request: &mut dyn FnMut(Request),
    ) {
        if kind == DelayKind::Timer {
            self.skipped(tid, since);
            self.learn_period(tid, since);
            if let Some(w) = self.threads.get_mut(&tid) {
                w.last_timer_delay = Some((since, e.ts_ns));
            }
        }
        if let Some(pair) = self.pair_of(tid, kind) {
            self.sample(
                (pair, tid),
                (since, slack, running),
                e,
                Wait::Timer,
                request,
            );
        }
    }

    /// Thread `tid`'s timer delay began at `since`: its period, where two intervals in a row
    /// agree within 5 %.
    fn learn_period(&mut self, tid: i64, since: u64) {
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        if let Some((last, interval)) = w.last_timer_ns {
            let now = since.saturating_sub(last);
            if interval > 0 && now.abs_diff(interval) * 20 <= interval {
                w.period_ns = Some(now);
            }
            w.last_timer_ns = Some((since, now));
        } else {
            w.last_timer_ns = Some((since, 0));
        }
    }

    /// Thread `tid`'s series of `kind`, made at its first delay of that kind (None at the
    /// series limit, counted once per thread and kind).
    fn pair_of(&mut self, tid: i64, kind: DelayKind) -> Option<Pair> {
        let w = self.threads.get(&tid)?;
        let k = kind as usize;
        if let Some(p) = w.pairs[k] {
            return Some(p);
        }
        if w.refused[k] && self.retired.is_empty() {
            return None;
        }
        // Its first series: under its name now (it may have been renamed since it was read).
        if w.pairs.iter().all(Option::is_none) {
            if let Some(now) = rtlab_sys::procfs::task_comm(tid) {
                if let Some(w) = self.threads.get_mut(&tid) {
                    w.name = now;
                }
            }
        }
        let w = self.threads.get(&tid)?;
        let (name, rt) = (w.name.clone(), w.rt);
        let pair = self.pair(&name, tid, kind, rt);
        let w = self.threads.get_mut(&tid)?;
        w.pairs[k] = pair;
        // Counted once per thread and kind, however often it is tried again.
        self.refused += (pair.is_none() && !w.refused[k]) as u64;
        w.refused[k] = pair.is_none();
        pair
    }

    /// Records a delay of thread `tid` from `since` (with the timer's slack in it) to `e`,
    /// and asks for its explanation when it is admitted.
    fn sample(
        &mut self,
        (pair, tid): (Pair, i64),
        (since, slack_ns, running_ns): (u64, u64, Option<u64>),
        e: &Event,
        wait: Wait,
        request: &mut dyn FnMut(Request),
    ) {
        let delay = e.ts_ns.saturating_sub(since);
        for i in [pair.own, pair.by_name] {
            let s = &mut self.series[i as usize];
            s.total.record(Nanos(delay));
            s.interval.record(Nanos(delay));
        }
        let kind = self.series[pair.own as usize].kind;
        if self.admit(kind, delay) {
            request(Request {
                series: pair.own,
                cpu: e.cpu,
                tid,
                deadline_ns: since,
                woke_ns: e.ts_ns,
                running_ns,
                wait,
                slack_ns,
            });
        }
    }
}

#[cfg(test)]
mod tests;

pub(crate) mod jvm;
pub use jvm::Stop;
