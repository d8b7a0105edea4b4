//! Attribution: what one CPU did between a thread's deadline and the moment it ran.
//!
//! The window `[deadline, woke]` is cut at every event of that CPU; each slice goes to what
//! was on the CPU then, innermost first: an NMI, an IRQ handler or vector (`irq`), a softirq,
//! then the current task: another task (`preemption`, with its name, pid and priority), the
//! idle task before the thread was woken (`idle_exit`: the CPU slept past the deadline and
//! the timer interrupt came late; on a VM `hypervisor_gap`, as the host delivers it), the
//! idle task after the wakeup (`idle_exit`: the way out of idle, which on a VM includes the
//! host's part; `hypervisor_gap` only past `gap_ns`), the thread itself once switched in (`syscall`: the way back to user space). A slice with no
//! event for longer than `gap_ns` while a task ran is a `hypervisor_gap` (even a busy CPU
//! takes a timer tick every few ms; on a VM the vCPU was not running). Time before the first
//! event is `unexplained`.
//!
//! Lock waits ([`Wait::Lock`]): once the thread has run and blocked (switched out asleep), the
//! time until it is woken again is spent waiting for the lock holder, the task that wakes it:
//! the slices where the holder runs are `blocking` (named after the holder), the slices where
//! another task runs are `preemption` by it, marked as priority inversion when that task has a
//! lower priority than the waiting thread (it keeps the holder off the CPU), and an idle CPU is
//! `blocking` too (the holder runs elsewhere). A round trip ([`Wait::Reply`]) is read the
//! same way, with the peer that answers in the holder's place. Woken by another thread
//! ([`Wait::Notify`]), the time before the wakeup is the notifier's.

use crate::event::{Event, Kind, Task};
#[cfg(test)]
use crate::reason::describe;
use crate::reason::{Blocker, Named, Reason};
use crate::replay::{repair_switches, Cpu, Follow, Moved};
use crate::tick::TICK_SLACK_NS;
pub use crate::tick::{is_tick, tick_grid, Tick};
pub use crate::wait::Wait;
use rtlab_stats::result::{Cause, CauseKind};

/// What is known about the outlier.
#[derive(Debug, Clone, Default)]
pub struct Late {
    /// The thread (TID).
    pub tid: i64,
    /// When it should have run (CLOCK_MONOTONIC ns).
    pub deadline_ns: u64,
    /// When it did.
    pub woke_ns: u64,
    /// What it waited for.
    pub wait: Wait,
    /// The task that woke it last in the window (any CPU): for a lock wait, the holder.
    pub waker: Option<Task>,
    /// The CPU it ran on (the events of other CPUs in the window are its wakeups there).
    pub cpu: u16,
    /// For a wait that blocks on another task: that task's CPU, where it was traced.
    pub peer: Option<Peer>,
}

/// The CPU of the task a blocked thread waits for (the waker), to follow what kept that
/// task from answering while the thread's own CPU idled.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    /// Its CPU.
    pub cpu: u16,
    /// That CPU's events over the window, with the task's wakings on other CPUs, in time
    /// order.
    pub events: Vec<Event>,
    /// The task current there before the first of them.
    pub base: Option<Task>,
    /// That CPU's tick grid, where known (each CPU's own: `skew_tick=1` staggers them).
    pub tick: Option<Tick>,
}

/// Splits `[a, b]`, while the late thread slept waiting for `waker`, by what the waker's own
/// CPU did: the waker ran, was kept off its CPU by another task (or an
/// interrupt), or was itself asleep.
fn peer_slices(
    peer: &Peer,
    waker: &Task,
    (a, b): (u64, u64),
    blocker: Blocker,
    rules: &Rules,
) -> Vec<(Key, u64, u64)> {
    let mut cpu = Cpu::new(peer.cpu, peer.base.as_ref());
    let mut follow = Follow::new(waker.pid, peer.cpu);
    // Where that CPU, busy, took no tick that was due, it did not run (its losses leave the
    // peer's state unknown, below).
    let no_tick: Vec<(u64, u64, Span)> =
        known_spans(&peer.events, peer.cpu, peer.base.as_ref(), peer.tick)
            .into_iter()
            .filter(|s| matches!(s.2, Span::NoTick { .. }))
            .collect();
    let mut out: Vec<(Key, u64, u64)> = Vec::new();
    let mut push = |cpu: &Cpu, follow: &Follow, from: u64, to: u64| {
        for (x, y, span) in split_by(&no_tick, from, to) {
            let key = match span {
                Some(Span::NoTick { due, until }) => {
                    no_tick_key(until - due, Some(peer.cpu), peer.tick, rules)
                }
                _ => peer_owner(cpu, follow, waker, blocker, y - x, rules),
            };
            out.push((key, x, y));
        }
    };
    let mut at = a;
    for e in &repair_switches(&peer.events, peer.cpu, peer.base.as_ref()) {
        if e.ts_ns > at && e.ts_ns > a {
            let to = e.ts_ns.min(b);
            if to > at {
                push(&cpu, &follow, at, to);
            }
            at = to;
        }
        if e.ts_ns >= b {
            break;
        }
        follow.step(e);
        cpu.step(e);
    }
    if b > at {
        push(&cpu, &follow, at, b);
    }
    out
}

/// Who owns a slice of `len` on the peer's CPU, in the state replayed so far.
fn peer_owner(
    cpu: &Cpu,
    follow: &Follow,
    waker: &Task,
    blocker: Blocker,
    len: u64,
    rules: &Rules,
) -> Key {
    let at = cpu.cpu;
    if let Some(top) = cpu.handlers.last() {
        let (kind, name) = top.kind_and_name();
        return Key::new(
            kind,
            None,
            Reason::PeerInterrupt {
                name: name.to_string(),
                cpu: at,
                silent_ns: (len > rules.gap_ns).then_some(len),
            },
        );
    }
    let peer = waker.comm.to_string();
    match (&cpu.current, follow.runnable) {
        (Some(t), _) if t.pid == waker.pid => Key::new(
            CauseKind::Blocking,
            Some(waker),
            Reason::HolderRanOn { blocker, cpu: at },
        ),
        (Some(t), Some(true)) if !t.is_idle() => Key::new(
            CauseKind::Preemption,
            Some(t),
            Reason::KeptPeerOff {
                cpu: at,
                peer: named(waker),
            },
        ),
        (Some(_), Some(true)) if rules.idle_gap_ns.is_some_and(|g| len > g) => Key::new(
            CauseKind::HypervisorGap,
            None,
            Reason::PeerIdleGap {
                cpu: at,
                len_ns: len,
                peer,
            },
        ),
        (Some(_), Some(true)) => Key::new(
            CauseKind::IdleExit,
            None,
            Reason::PeerIdleExit { cpu: at, peer },
        ),
        (Some(_), Some(false)) => Key::new(
            CauseKind::Blocking,
            Some(waker),
            Reason::PeerAsleep { cpu: at, peer },
        ),
        _ => Key::new(
            CauseKind::Unexplained,
            None,
            Reason::PeerUnknown { cpu: at, peer },
        ),
    }
}

/// What the attribution knows beforehand of a stretch of the late thread's CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Span {
    /// Events were lost (this many).
    Lost(u64),
    /// A busy CPU took no tick from the one due at `due` until its next event at `until`:
    /// it took no interrupt.
    NoTick { due: u64, until: u64 },
    /// Not read yet when explained: the reader was `behind_ns` behind the window's end.
    Unread { behind_ns: u64 },
}

/// The key of a busy CPU's silence of `len` past a due tick (`whose`: where, if not the
/// thread's own CPU).
fn no_tick_key(len: u64, peer_cpu: Option<u16>, tick: Option<Tick>, rules: &Rules) -> Key {
    Key::new(
        CauseKind::HypervisorGap,
        None,
        Reason::NoTick {
            len_ns: len,
            period_ns: tick.map_or(0, |t| t.period_ns),
            peer_cpu,
            virtualized: rules.virtualized,
        },
    )
}

/// A slice of the thread itself silent for longer than this is worth a note.
const SILENT_SELF_NS: u64 = 1_000_000;

/// After a timer expiry, this long may still be the interrupt (tick work, a softirq raised,
/// the exit); longer is not.
const TIMER_TAIL_NS: u64 = 50_000;

/// A spinning thread's own part of a gap (the way into and out of an interruption, not
/// traced) is shorter than this; a longer silence with it current is not its own.
const SPIN_SELF_NS: u64 = 5_000;

/// Settings of the attribution.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// A silent slice longer than this while a task runs is a hypervisor gap.
    pub gap_ns: u64,
    /// This machine is a VM: a late timer on an idle CPU is the host's delay.
    pub virtualized: bool,
    /// On a VM: the longest way out of idle the guest takes by itself (its idle states' exit
    /// latencies, with margin); a longer one is the host not running the vCPU.
    pub idle_gap_ns: Option<u64>,
    /// The late thread's CPU's tick grid, where the trace shows it: a busy CPU takes a tick
    /// at every point of it, so a silence across one is time the CPU did not take interrupts.
    pub tick: Option<Tick>,
    /// Where the late thread's CPU's history was cut (its oldest events dropped): a window
    /// that begins with no event is then not the start of the trace.
    pub cut: Option<Cut>,
    /// Where the late thread's CPU's events were read up to when it was explained, if not
    /// past the window (the reader behind, given up waiting): what follows is not known.
    pub unread_from: Option<u64>,
    /// Another CPU, from which the late thread's wakeup may come, whose events in the window
    /// are not all known (lost there, or not read yet): a wakeup not seen may be among them.
    pub elsewhere_unknown: Option<ElsewhereUnknown>,
}

/// Another CPU's events not all known over a late thread's window: from `from_ns` on, `lost`
/// of them lost (0: not read yet, the reader `behind_ns` behind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElsewhereUnknown {
    pub cpu: u16,
    pub from_ns: u64,
    pub lost: u64,
    pub behind_ns: u64,
}

/// The oldest events of a CPU's history were dropped, the newest of them at `through_ns`,
/// when it was `age_ns` old.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    pub through_ns: u64,
    pub age_ns: u64,
}

/// Time-sharing tasks on a real-time thread's CPU this long, while the thread could run, are
/// throttling, not a non-preemptible kernel section.
const THROTTLE_MIN_NS: u64 = 2_000_000;

/// A time-sharing task (not the idle task): one the scheduler runs over a runnable real-time
/// thread only when that thread is throttled (or in the task's non-preemptible code).
/// How a task that ran is named in a reason: rtlab's own observing threads as the observer.
fn shown(t: &Task) -> String {
    let ours = t.pid > 0 && rtlab_sys::process::thread_in_this_process(t.pid as u32);
    match ours && crate::observer::is_observer_thread(&t.comm) {
        true => "the observer (rtlab itself)".into(),
        false => t.comm.to_string(),
    }
}

fn time_sharing(t: &Task) -> bool {
    t.prio >= 100 && !t.is_idle()
}

/// Whether this kernel has the fair server (Linux 6.12 and later): SCHED_OTHER work that
/// waits gets up to 50 ms of every second over real-time threads.
fn fair_server_kernel() -> bool {
    static FAIR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FAIR.get_or_init(|| {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut v = release
            .trim()
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse::<u32>().ok());
        (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 12)
    })
}

/// What a slice of the window is charged to; equal keys add up.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    kind: CauseKind,
    /// (name, pid, kernel priority)
    task: Option<(String, i64, i64)>,
    reason: Option<Reason>,
}

impl Key {
    fn new(kind: CauseKind, task: Option<&Task>, reason: Reason) -> Key {
        Key {
            kind,
            task: task.map(|t| (t.comm.to_string(), t.pid, t.prio)),
            reason: Some(reason),
        }
    }
}

/// A kernel thread that processes received packets: `napi/<dev>-<id>` (threaded NAPI) or
/// `ksoftirqd/<cpu>` (deferred softirqs).
fn is_packet_thread(t: &Task) -> bool {
    t.comm.starts_with("napi/") || t.comm.starts_with("ksoftirqd/")
}

fn named(t: &Task) -> Named {
    Named {
        comm: t.comm.to_string(),
        pid: t.pid,
    }
}

/// The slice right after a timer expiry on the late thread's CPU, where the expiry says more
/// than who is current: up to a `sched_waking` it makes, the timer interrupt; after the late
/// thread's own expiry (no `sched_waking` recorded), the rest of the interrupt and the way to
/// the switch, whose end is not traced (`expiry`: the last event was an expiry, and whether it
/// was the late thread's).
fn timer_tail(
    expiry: Option<bool>,
    waking_next: bool,
    current: Option<&Task>,
    woken_prio: Option<i64>,
    len: u64,
    rules: &Rules,
) -> Option<Key> {
    let own = expiry?;
    if waking_next {
        return Some(Key::new(
            CauseKind::Irq,
            None,
            Reason::Interrupt {
                name: "local_timer".into(),
                silent_ns: None,
            },
        ));
    }
    if !own || len > rules.gap_ns {
        return None;
    }
    let t = current?;
    if t.is_idle() {
        return Some(Key::new(CauseKind::IdleExit, None, Reason::TimerTailIdle));
    }
    // The interrupt's rest and the switch take microseconds: a lower-priority task still on
    // the CPU past them was not preempted (non-preemptible code, or the thread throttled),
    // which the task's own rules name.
    if len > TIMER_TAIL_NS {
        return None;
    }
    woken_prio.filter(|&p| t.prio > p).map(|_| {
        Key::new(
            CauseKind::Preemption,
            Some(t),
            Reason::TimerTailLowerPriority,
        )
    })
}

/// What is known beforehand of stretches of `cpu`: lost to the tracer, from its last event
/// before each loss mark (the start of time when there is none) to the mark; and, where the
/// tick's grid is known, each silence of a busy CPU (outside interrupts) across a tick it did
/// not take, from that tick's point to the CPU's next event. In time order, disjoint.
fn known_spans(
    events: &[Event],
    cpu: u16,
    base: Option<&Task>,
    tick: Option<Tick>,
) -> Vec<(u64, u64, Span)> {
    let mut spans = Vec::new();
    let mut last: Option<u64> = None;
    let mut state = Cpu::new(cpu, base);
    // A loss: nothing is known from this CPU's last event before its mark to its first
    // after it (the mark may sit anywhere between: both sources put it just after the last
    // event they read from that CPU's ring).
    let mut lost: Option<(u64, u64)> = None;
    for e in events.iter().filter(|e| e.cpu == cpu) {
        if let Some(n) = e.kind.lost() {
            let (from, before) = lost.unwrap_or((last.unwrap_or(0), 0));
            lost = Some((from, before + n));
            state.step(e);
            continue;
        }
        if let Some((from, n)) = lost.take() {
            spans.push((from, e.ts_ns, Span::Lost(n)));
        } else if let (Some(l), Some(t), Some(true), true) =
            (last, tick, state.busy(), state.handlers.is_empty())
        {
            // Past the slack: an event at a point of the grid may be that point's tick,
            // a hair early or late.
            let due = t.next_after(l + TICK_SLACK_NS);
            if e.ts_ns > due + TICK_SLACK_NS {
                spans.push((
                    due,
                    e.ts_ns,
                    Span::NoTick {
                        due,
                        until: e.ts_ns,
                    },
                ));
            }
        }
        state.step(e);
        last = Some(e.ts_ns);
    }
    if let Some((from, n)) = lost {
        spans.push((from, u64::MAX, Span::Lost(n)));
    }
    spans
}

/// `known` with the stretch not read yet where the late thread's CPU was read only up to
/// `rules.unread_from` (nothing after it is known: a silence there is no tick missed).
fn with_unread(
    mut known: Vec<(u64, u64, Span)>,
    late: &Late,
    rules: &Rules,
) -> Vec<(u64, u64, Span)> {
    let Some(from) = rules.unread_from.filter(|&t| t < late.woke_ns) else {
        return known;
    };
    known.retain(|s| s.0 < from);
    for s in known.iter_mut() {
        s.1 = s.1.min(from);
    }
    let behind_ns = late.woke_ns - from;
    known.push((from, u64::MAX, Span::Unread { behind_ns }));
    known
}

/// `[a, b]` cut at the `spans` (sorted, disjoint): each piece with what is known of it, if it
/// lies in one.
fn split_by(spans: &[(u64, u64, Span)], a: u64, b: u64) -> Vec<(u64, u64, Option<Span>)> {
    let mut out = Vec::new();
    let mut at = a;
    for &(from, to, n) in spans {
        if to <= at || from >= b {
            continue;
        }
        if from > at {
            out.push((at, from, None));
        }
        let end = to.min(b);
        out.push((from.max(at), end, Some(n)));
        at = end;
    }
    if at < b {
        out.push((at, b, None));
    }
    out
}

/// Attributes `late` using the events of its CPU (`events`, in time order, starting before
/// the deadline) and `base`, the task current before the first of them.
pub fn attribute(events: &[Event], base: Option<&Task>, late: &Late, rules: &Rules) -> Vec<Cause> {
    let events = &repair_switches(events, late.cpu, base);
    let mut attribution = Attribution::new(events, base, late, rules);
    attribution.run(events);
    attribution.causes()
}

/// One attribution: the late thread's CPU and the thread itself replayed through the window,
/// each stretch between two events charged to what the state says owned it.
struct Attribution<'a> {
    late: &'a Late,
    rules: &'a Rules,
    /// The window: the deadline, and when the thread ran (not before the deadline).
    t0: u64,
    t1: u64,
    cpu: Cpu,
    thread: Follow,
    /// Woken since it last went to sleep.
    woken: bool,
    /// Lock waits: the thread ran and blocked (asleep until the holder wakes it).
    blocked: bool,
    /// A timer wait: woken past the deadline, the thread ran and went to sleep again
    /// (waiting for something else on its way back to its code).
    asleep_again: bool,
    /// Its priority when woken (or, for a lock wait, when it blocked).
    woken_prio: Option<i64>,
    /// Its priority as its last wakeup or switch-out showed it (a spinner is never woken).
    thread_prio: Option<i64>,
    /// When time-sharing tasks began to hold the late thread's CPU (one after another: under
    /// the fair server they share its time), and the end of the slice being charged.
    time_sharing_since: u64,
    slice_to: u64,
    /// When the thread last became runnable (woken, or switched out runnable); 0 for a
    /// spinner, runnable throughout.
    runnable_since: u64,
    /// The current time-sharing stretch began with a time-sharing task taking the CPU from
    /// a runnable real-time one: only throttling does that.
    stretch_throttled: bool,
    /// The slices of the current time-sharing stretch charged to its tasks before it had
    /// lasted [`THROTTLE_MIN_NS`] (their non-preemptible code, a timer's tail): throttling
    /// too once the stretch lasts that long.
    stretch_early: Vec<(Key, u64, u64)>,
    /// Woken from this other CPU: until an interrupt arrives here, nothing can make this CPU
    /// switch (the wake-up IPI is on its way).
    ipi_pending: Option<u16>,
    /// Its sleep timers fire on this CPU (one did, in the history): any hrtimer interrupt
    /// here past the deadline expires its timer too.
    timer_here: bool,
    /// Another timer expired here past the deadline while it slept, and its own expiry was
    /// not traced (yet: the next event says whether it came in the same interrupt).
    expiry_unseen: Option<u64>,
    /// The last event of this CPU was a timer expiry (true: the late thread's own); the eBPF
    /// source traces no local-timer exit, so the interrupt's end is not known.
    expiry: Option<bool>,
    /// For a wait that blocks: the task waited for (lock holder, peer), and its CPU's events
    /// when it ran elsewhere.
    holder: Option<&'a Task>,
    blocker: Blocker,
    peer: Option<&'a Peer>,
    /// What is known beforehand of stretches of this CPU (losses, missed ticks).
    known: Vec<(u64, u64, Span)>,
    totals: std::collections::BTreeMap<Key, u64>,
}

impl<'a> Attribution<'a> {
    fn new(
        events: &[Event],
        base: Option<&Task>,
        late: &'a Late,
        rules: &'a Rules,
    ) -> Attribution<'a> {
        Attribution {
            late,
            rules,
            t0: late.deadline_ns,
            t1: late.woke_ns.max(late.deadline_ns),
            cpu: Cpu::new(late.cpu, base),
            thread: Follow::new(late.tid, late.cpu),
            // A spinning thread is runnable throughout: nothing has to wake it.
            woken: late.wait == Wait::Spin,
            // A notified thread sleeps from before the deadline (its notifier's call) to its
            // wakeup.
            blocked: late.wait == Wait::Notify && base.is_none_or(|b| b.pid != late.tid),
            asleep_again: false,
            woken_prio: None,
            thread_prio: None,
            time_sharing_since: 0,
            slice_to: 0,
            runnable_since: 0,
            stretch_throttled: false,
            stretch_early: Vec::new(),
            ipi_pending: None,
            timer_here: false,
            expiry_unseen: None,
            expiry: None,
            holder: late.waker.as_ref().filter(|_| late.wait.blocks()),
            blocker: match late.wait {
                Wait::Reply => Blocker::Reply,
                Wait::Notify => Blocker::Notify,
                _ => Blocker::Lock,
            },
            // Followed only where it ran on another CPU (and that CPU was traced).
            peer: late.peer.as_ref().filter(|p| p.cpu != late.cpu),
            known: with_unread(known_spans(events, late.cpu, base, rules.tick), late, rules),
            totals: Default::default(),
        }
    }

    fn run(&mut self, events: &[Event]) {
        let mut last = None::<u64>;
        for e in events {
            match last {
                Some(prev) if e.ts_ns > prev => self.stretch(prev, e),
                Some(_) => {}
                None if e.ts_ns > self.t0 => {
                    // Nothing known between the deadline and the first event: the trace began
                    // after it, or its events were no longer kept.
                    let unknown = match self.rules.cut {
                        Some(Cut { age_ns, .. }) => Reason::HistoryCut { age_ns },
                        None => Reason::BeforeFirstEvent,
                    };
                    for (a, b, span) in split_by(&self.known, self.t0, e.ts_ns) {
                        let key = match span {
                            Some(span) => self.span_key(span),
                            None => Key::new(CauseKind::Unexplained, None, unknown.clone()),
                        };
                        self.add(key, a, b);
                    }
                }
                None => {}
            }
            last = Some(e.ts_ns);
            if e.cpu == self.late.cpu {
                self.expiry = match &e.kind {
                    Kind::HrtimerEntry { task, .. } => {
                        Some(task.as_ref().is_some_and(|t| t.pid == self.late.tid))
                    }
                    _ => None,
                };
            }
            if e.ts_ns > self.t1 {
                break;
            }
            self.step(e);
        }
        match last {
            // After the last event: what is known of it (lost, not read yet) before a silence.
            Some(prev) if prev < self.t1 => {
                for (a, b, span) in split_by(&self.known, prev, self.t1) {
                    match span {
                        Some(span) => {
                            let key = self.span_key(span);
                            self.add(key, a, b)
                        }
                        None => self.slice(a, b, false),
                    }
                }
            }
            Some(_) => {}
            None => self.add(
                Key::new(CauseKind::Unexplained, None, Reason::NoEventInWindow),
                self.t0,
                self.t1,
            ),
        }
    }

    /// The stretch from the previous event (at `prev`) to `e`. Nothing is known of this CPU
    /// from its last event before a loss to its first after it (other CPUs' events between
    /// them say nothing of it).
    fn stretch(&mut self, prev: u64, e: &Event) {
        let waking_here = e.cpu == self.late.cpu && matches!(e.kind, Kind::Waking { .. });
        let blocked_on_peer = self.blocked && self.holder.is_some() && self.peer.is_some();
        for (a, b, span) in split_by(&self.known, prev, e.ts_ns) {
            match span {
                // Blocked on a traced peer, this CPU's pauses did not delay the answer.
                Some(Span::NoTick { .. }) if blocked_on_peer => {
                    self.slice(a, b, waking_here && b == e.ts_ns)
                }
                Some(span) => {
                    let key = self.span_key(span);
                    self.add(key, a, b)
                }
                None => self.slice(a, b, waking_here && b == e.ts_ns),
            }
        }
    }

    /// Applies one event to the replayed state.
    fn step(&mut self, e: &Event) {
        let moved = self.thread.step(e);
        if let Moved::SwitchedOut { prio, .. } | Moved::Woken { prio, .. } = moved {
            self.thread_prio = Some(prio);
        }
        match moved {
            Moved::Woken { from_cpu, prio, .. } => {
                self.woken = true;
                self.blocked = false;
                self.asleep_again = false;
                self.woken_prio = Some(prio);
                self.runnable_since = e.ts_ns;
                self.ipi_pending = (from_cpu != self.late.cpu).then_some(from_cpu);
            }
            // Preempted (or yielded): runnable with no wakeup to wait for, as a watched
            // thread's delay that starts at its preemption; a notified thread so (a message
            // came while it ran, or was queued for it) waits for no notifier.
            Moved::SwitchedOut {
                asleep: false,
                prio,
                ..
            } if matches!(self.late.wait, Wait::Timer | Wait::Notify) => {
                self.woken = true;
                self.blocked = false;
                self.woken_prio = Some(prio);
                self.runnable_since = e.ts_ns;
            }
            Moved::SwitchedOut {
                asleep: true, prio, ..
            } => {
                // It went to sleep: a wakeup before this one (an earlier period's, in the
                // history before the deadline) is spent. Woken past the deadline, it sleeps
                // again on its way back (the delay runs to where its code goes on).
                self.asleep_again =
                    self.late.wait == Wait::Timer && self.woken && e.ts_ns >= self.t0;
                self.woken = false;
                // (A notified thread's sleep before the deadline waits for its notifier.)
                let waits = e.ts_ns >= self.t0 || self.late.wait == Wait::Notify;
                if self.late.wait.blocks() && waits {
                    self.blocked = true;
                    self.woken_prio.get_or_insert(prio);
                }
            }
            _ => {}
        }
        if e.cpu == self.late.cpu {
            self.expiry_seen_or_not(e, &moved);
            match &e.kind {
                Kind::Switch {
                    prev,
                    prev_state,
                    next,
                } => {
                    // No IPI is pending any more; a new task holds the CPU.
                    self.ipi_pending = None;
                    if !(time_sharing(prev) && time_sharing(next)) {
                        self.time_sharing_since = e.ts_ns;
                        self.stretch_throttled =
                            prev.prio < 100 && prev_state.is_runnable() && time_sharing(next);
                        self.stretch_early.clear();
                    }
                }
                // An interrupt arriving: no IPI is pending any more.
                Kind::IrqEntry { .. } | Kind::VectorEntry { .. } => self.ipi_pending = None,
                Kind::Nmi { handler, delta_ns } => {
                    // Reported after the fact, with its length: carve it out of the past.
                    self.add(
                        Key::new(
                            CauseKind::Nmi,
                            None,
                            Reason::Nmi {
                                handler: handler.clone(),
                            },
                        ),
                        e.ts_ns.saturating_sub(*delta_ns),
                        e.ts_ns,
                    );
                }
                _ => {}
            }
        }
        self.cpu.step(e);
    }

    /// A timer wait whose expiry the trace lacks: where a task the tracer does not see holds
    /// the CPU, no event is recorded, its interrupts' included (seen on this VM: the
    /// hypervisor agent's threads). A later expiry of another timer on this CPU, with none of
    /// the thread's own in the same interrupt, means its timer (due at the deadline, on this
    /// CPU) expired unseen by then: it is runnable from there, not a late timer.
    fn expiry_seen_or_not(&mut self, e: &Event, moved: &Moved) {
        if let Some(at) = self.expiry_unseen.take() {
            if !self.woken && !matches!(moved, Moved::Woken { .. }) {
                self.woken = true;
                self.woken_prio = self.thread_prio;
                self.runnable_since = at;
            }
        }
        if let Kind::HrtimerEntry { task, .. } = &e.kind {
            let own = task.as_ref().is_some_and(|t| t.pid == self.late.tid);
            self.timer_here |= own;
            let asleep = self.late.wait == Wait::Timer && !self.woken && self.timer_here;
            if !own && asleep && e.ts_ns >= self.t0 {
                self.expiry_unseen = Some(e.ts_ns);
            }
        }
    }

    fn add(&mut self, key: Key, from: u64, to: u64) {
        let (a, b) = (from.max(self.t0), to.min(self.t1));
        if b > a {
            *self.totals.entry(key).or_default() += b - a;
        }
    }

    /// Keeps the slices of a time-sharing stretch charged before it showed it was throttling,
    /// and re-charges them as throttling (each to its own task) once it does.
    fn follow_stretch(&mut self, key: Key, from: u64, to: u64) {
        let time_sharing_task = key.task.as_ref().is_some_and(|t| t.2 >= 100);
        match key.reason {
            Some(Reason::NonPreemptible | Reason::TimerTailLowerPriority) if time_sharing_task => {
                self.stretch_early.push((key, from, to))
            }
            Some(Reason::ThrottledWhileRan { fair_server }) => {
                for (early, a, b) in std::mem::take(&mut self.stretch_early) {
                    let (a, b) = (a.max(self.t0), b.min(self.t1));
                    let Some(ns) = self.totals.get_mut(&early).filter(|_| b > a) else {
                        continue;
                    };
                    *ns -= b - a;
                    if *ns == 0 {
                        self.totals.remove(&early);
                    }
                    let throttled = Key {
                        reason: Some(Reason::ThrottledWhileRan { fair_server }),
                        ..early
                    };
                    self.add(throttled, a, b);
                }
            }
            _ => {}
        }
    }

    fn span_key(&self, span: Span) -> Key {
        match span {
            Span::Lost(n) => Key::new(CauseKind::Unexplained, None, Reason::EventsLost { n }),
            Span::Unread { behind_ns } => {
                Key::new(CauseKind::Unexplained, None, Reason::Unread { behind_ns })
            }
            Span::NoTick { due, until } => {
                no_tick_key(until - due, None, self.rules.tick, self.rules)
            }
        }
    }

    /// Charges `[from, to]`: while the thread is blocked on a task on another CPU (where that
    /// CPU was traced), by what that CPU did (what ran here meanwhile did not delay the
    /// answer), else to the owner here (`waking_next`: it ends at a `sched_waking` here).
    fn slice(&mut self, from: u64, to: u64, waking_next: bool) {
        match (self.holder, self.peer) {
            (Some(h), Some(p)) if self.blocked => {
                for (key, a, b) in peer_slices(p, h, (from, to), self.blocker, self.rules) {
                    self.add(key, a, b);
                }
            }
            _ => {
                // A spinner runs right up to the gap: only the part inside it says anything.
                let (from, to) = if self.late.wait == Wait::Spin {
                    (from.max(self.t0), to.min(self.t1).max(from.max(self.t0)))
                } else {
                    (from, to)
                };
                self.slice_to = to;
                let key = self.owner(to - from, waking_next);
                self.add(key.clone(), from, to);
                self.follow_stretch(key, from, to);
            }
        }
    }

    /// The causes, largest first.
    fn causes(self) -> Vec<Cause> {
        let mut causes: Vec<Cause> = self
            .totals
            .into_iter()
            .map(|(k, d)| Cause {
                kind: k.kind,
                duration_ns: d,
                task: k.task.as_ref().map(|t| t.0.clone()),
                pid: k.task.as_ref().map(|t| t.1),
                // The real-time priority users set (FIFO 99 is 99); 0 for time-sharing tasks.
                prio: k
                    .task
                    .as_ref()
                    .map(|t| if t.2 < 100 { 99 - t.2 } else { 0 }),
                detail: k.reason.as_ref().map(Reason::to_string),
                reason: k.reason.as_ref().map(Reason::code),
                stall_ns: k.reason.as_ref().and_then(Reason::stall_ns),
            })
            .collect();
        causes.sort_by_key(|c| std::cmp::Reverse(c.duration_ns));
        causes
    }
}

mod owner;

#[cfg(test)]
mod tests;
