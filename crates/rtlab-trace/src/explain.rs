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
use rtlab_stats::result::{Cause, CauseKind};

/// What the late thread was waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// Its own timer (a periodic wakeup).
    #[default]
    Timer,
    /// Its timer, then a lock: the sample ends when it holds the lock.
    Lock,
    /// Another thread's wake-up call (condition variable, message), issued at the deadline.
    Notify,
    /// A reply: the thread sends at the deadline, blocks, and the peer's answer wakes it.
    Reply,
}

impl Wait {
    /// Waits in which the thread blocks on another task within the window.
    pub fn blocks(self) -> bool {
        matches!(self, Wait::Lock | Wait::Reply)
    }
}

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
    ran: &str,
    rules: &Rules,
) -> Vec<(Key, u64, u64)> {
    let gap_ns = rules.gap_ns;
    let cpu = peer.cpu;
    let mut current = peer.base.clone();
    let mut stack: Vec<Who> = Vec::new();
    // Runnable (woken or preempted) but not on the CPU.
    // None: not known (no event of it yet, or events were lost since).
    let mut runnable: Option<bool> = None;
    // Woken since it last got the CPU: the waker traces the wakeup before it waits for the
    // task to get off its CPU, so a switch-out asleep after it is not a sleep.
    let mut woken_since_in = false;
    let mut out: Vec<(Key, u64, u64)> = Vec::new();
    let mut at = a;
    let owner = |stack: &[Who], current: &Option<Task>, runnable: Option<bool>, len: u64| -> Key {
        if let Some(top) = stack.last() {
            let (kind, name) = match top {
                Who::Irq(n) => (0, n),
                Who::Softirq(n) => (1, n),
            };
            return Key {
                kind,
                task: None,
                detail: Some(format!(
                    "{name} on CPU {cpu}, the peer's{}",
                    silent_inside(len, gap_ns)
                )),
            };
        }
        match current {
            Some(t) if t.pid == waker.pid => Key {
                kind: 9,
                task: task_key(waker),
                detail: Some(format!("{ran} on CPU {cpu}")),
            },
            Some(t) if runnable == Some(true) && !t.is_idle() => Key {
                kind: 3,
                task: task_key(t),
                detail: Some(format!(
                    "ran on CPU {cpu} while {} (pid {}), which the thread waited for, waited for that CPU",
                    waker.comm, waker.pid
                )),
            },
            Some(_) if runnable == Some(true) && rules.idle_gap_ns.is_some_and(|g| len > g) => Key {
                kind: 5,
                task: None,
                detail: Some(format!(
                    "CPU {cpu} silent for {} leaving idle to run {}: the host did not run that vCPU",
                    rtlab_stats::Nanos(len),
                    waker.comm
                )),
            },
            Some(_) if runnable == Some(true) => Key {
                kind: 4,
                task: None,
                detail: Some(format!("CPU {cpu} leaving idle to run {}", waker.comm)),
            },
            Some(_) if runnable == Some(false) => Key {
                kind: 9,
                task: task_key(waker),
                detail: Some(format!(
                    "{} itself was asleep on CPU {cpu} (waiting for its own input)",
                    waker.comm
                )),
            },
            _ => Key {
                kind: 8,
                task: None,
                detail: Some(format!(
                    "what kept {} from answering on CPU {cpu} is not known (trace events lost, or none of it in the window)",
                    waker.comm
                )),
            },
        }
    };
    // Where that CPU, busy, took no tick that was due, it did not run (its losses leave the
    // peer's state unknown, below).
    let no_tick: Vec<(u64, u64, Span)> =
        known_spans(&peer.events, cpu, peer.base.as_ref(), peer.tick)
            .into_iter()
            .filter(|s| matches!(s.2, Span::NoTick { .. }))
            .collect();
    let whose = format!(" (CPU {cpu}, the peer's)");
    let mut push = |key_of: &dyn Fn(u64) -> Key, from: u64, to: u64| {
        for (x, y, span) in split_by(&no_tick, from, to) {
            let key = match span {
                Some(Span::NoTick { due, until }) => {
                    no_tick_key(until - due, &whose, peer.tick, rules)
                }
                _ => key_of(y - x),
            };
            out.push((key, x, y));
        }
    };
    for e in &peer.events {
        if e.ts_ns > at && e.ts_ns > a {
            let to = e.ts_ns.min(b);
            if to > at {
                push(&|len| owner(&stack, &current, runnable, len), at, to);
            }
            at = to;
        }
        if e.ts_ns >= b {
            break;
        }
        match &e.kind {
            Kind::Waking { task, .. }
            | Kind::HrtimerEntry {
                task: Some(task), ..
            } if task.pid == waker.pid => {
                runnable = Some(true);
                woken_since_in = true;
            }
            // A loss anywhere may have taken the peer's wakeup with it.
            Kind::Lost(_) if e.cpu != cpu => runnable = None,
            // Other CPUs' events are the peer's wakings there.
            _ if e.cpu != cpu => {}
            Kind::Switch {
                prev,
                prev_state,
                next,
            } => {
                if prev.pid == waker.pid {
                    runnable = Some(prev_state.starts_with('R') || woken_since_in);
                }
                if next.pid == waker.pid {
                    woken_since_in = false;
                }
                current = Some(next.clone());
            }
            Kind::Lost(_) => {
                current = None;
                stack.clear();
                runnable = None;
            }
            Kind::IrqEntry { irq, name } => stack.push(Who::Irq(format!("IRQ {irq} {name}"))),
            Kind::VectorEntry { name } => stack.push(Who::Irq(name.clone())),
            Kind::SoftirqEntry { name } => stack.push(Who::Softirq(name.clone())),
            Kind::IrqExit | Kind::VectorExit | Kind::SoftirqExit => {
                stack.pop();
            }
            _ => {}
        }
    }
    if b > at {
        push(&|len| owner(&stack, &current, runnable, len), at, b);
    }
    out
}

/// The periodic scheduler tick: at `phase_ns + k * period_ns` on every CPU not idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    pub period_ns: u64,
    pub phase_ns: u64,
}

/// How late a tick may come before it counts as missed (its own entry path and jitter).
const TICK_SLACK_NS: u64 = 100_000;

/// Whether a timer expiry is the scheduler tick's.
pub fn is_tick(function: &str) -> bool {
    function.starts_with("tick_")
}

/// A CPU's tick grid from the expiry times of its ticks (in time order): the period is the
/// step most successive ticks take (one of the kernel's HZ choices), the phase the median of
/// their times modulo it. Each CPU has its own (`skew_tick=1` staggers them). None when too
/// few ticks agree.
pub fn tick_grid(ticks: &[u64]) -> Option<Tick> {
    const PERIODS: [u64; 4] = [1_000_000, 3_333_333, 4_000_000, 10_000_000];
    let mut votes = [0usize; 4];
    for w in ticks.windows(2) {
        let d = w[1].saturating_sub(w[0]);
        if let Some(i) = PERIODS.iter().position(|&p| d.abs_diff(p) < p / 50) {
            votes[i] += 1;
        }
    }
    let (i, &n) = votes.iter().enumerate().max_by_key(|&(_, n)| *n)?;
    if n < 3 {
        return None;
    }
    let period_ns = PERIODS[i];
    // Offsets from the first tick's residue, wrapped to (-period/2, period/2].
    let r0 = ticks.first()? % period_ns;
    let mut offsets: Vec<i64> = ticks
        .iter()
        .map(|t| {
            let d = (t % period_ns + period_ns - r0) % period_ns;
            if d > period_ns / 2 {
                d as i64 - period_ns as i64
            } else {
                d as i64
            }
        })
        .collect();
    offsets.sort_unstable();
    let median = offsets[offsets.len() / 2];
    let phase_ns = (r0 as i64 + median).rem_euclid(period_ns as i64) as u64;
    Some(Tick {
        period_ns,
        phase_ns,
    })
}

impl Tick {
    /// The first point of the grid after `t`.
    fn next_after(&self, t: u64) -> u64 {
        let k = t.saturating_sub(self.phase_ns) / self.period_ns + 1;
        self.phase_ns + k * self.period_ns
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
}

/// The key of a busy CPU's silence of `len` past a due tick (`whose`: where, if not the
/// thread's own CPU).
fn no_tick_key(len: u64, whose: &str, tick: Option<Tick>, rules: &Rules) -> Key {
    Key {
        kind: 5,
        task: None,
        detail: Some(format!(
            "no tick for {} on a busy CPU{whose} (one is due every {}): {}",
            rtlab_stats::Nanos(len),
            rtlab_stats::Nanos(tick.map_or(0, |t| t.period_ns)),
            if rules.virtualized {
                "the vCPU was not running (or ran with interrupts off)"
            } else {
                "interrupts were off"
            }
        )),
    }
}

/// A slice of the thread itself silent for longer than this is worth a note.
const SILENT_SELF_NS: u64 = 1_000_000;

/// A note for an interrupt slice with no event for longer than `gap_ns`: interrupts were off
/// inside it, so its length is the handler's or the host's, which the trace cannot tell apart.
fn silent_inside(len: u64, gap_ns: u64) -> String {
    if len > gap_ns {
        format!(
            " (no event for {} inside it: the handler ran that long with interrupts off, or the vCPU was not running)",
            rtlab_stats::Nanos(len)
        )
    } else {
        String::new()
    }
}

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
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    Irq(String),
    Softirq(String),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    kind: u8,
    task: Option<(String, i64, i64)>,
    detail: Option<String>,
}

fn task_key(t: &Task) -> Option<(String, i64, i64)> {
    Some((t.comm.clone(), t.pid, t.prio))
}

fn kind_of(k: u8) -> CauseKind {
    match k {
        0 => CauseKind::Irq,
        1 => CauseKind::Softirq,
        2 => CauseKind::Nmi,
        3 => CauseKind::Preemption,
        4 => CauseKind::IdleExit,
        5 => CauseKind::HypervisorGap,
        6 => CauseKind::Syscall,
        7 => CauseKind::Migration,
        9 => CauseKind::Blocking,
        _ => CauseKind::Unexplained,
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
        return Some(Key {
            kind: 0,
            task: None,
            detail: Some("local_timer".into()),
        });
    }
    if !own || len > rules.gap_ns {
        return None;
    }
    let t = current?;
    if t.is_idle() {
        return Some(Key {
            kind: 4,
            task: None,
            detail: Some(
                "after the timer woke the thread: the rest of the timer interrupt and the exit from idle (the interrupt's end is not traced)"
                    .into(),
            ),
        });
    }
    woken_prio.filter(|&p| t.prio > p).map(|_| Key {
        kind: 3,
        task: task_key(t),
        detail: Some(
            "after the timer woke the thread: the rest of the timer interrupt, then this lower-priority task until the switch (the interrupt's end is not traced)"
                .into(),
        ),
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
    // Whether a task other than idle is current (None: not known), and open interrupts.
    let mut busy = base.map(|t| !t.is_idle());
    let mut depth = 0u32;
    for e in events.iter().filter(|e| e.cpu == cpu) {
        if let Kind::Lost(n) = e.kind {
            spans.push((last.unwrap_or(0), e.ts_ns, Span::Lost(n)));
        } else if let (Some(l), Some(t), Some(true), 0) = (last, tick, busy, depth) {
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
        match &e.kind {
            Kind::Switch { next, .. } => busy = Some(!next.is_idle()),
            Kind::Lost(_) => {
                busy = None;
                depth = 0;
            }
            Kind::IrqEntry { .. } | Kind::VectorEntry { .. } | Kind::SoftirqEntry { .. } => {
                depth += 1
            }
            Kind::IrqExit | Kind::VectorExit | Kind::SoftirqExit => depth = depth.saturating_sub(1),
            _ => {}
        }
        last = Some(e.ts_ns);
    }
    spans
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
    let (t0, t1) = (late.deadline_ns, late.woke_ns.max(late.deadline_ns));
    let mut current: Option<Task> = base.cloned();
    let mut stack: Vec<Who> = Vec::new();
    let mut woken = false;
    let mut totals: std::collections::BTreeMap<Key, u64> = Default::default();
    let mut add = |key: Key, from: u64, to: u64| {
        let (a, b) = (from.max(t0), to.min(t1));
        if b > a {
            *totals.entry(key).or_default() += b - a;
        }
    };
    let mut seen_any = false;
    // The last event of this CPU was a timer expiry (true: the late thread's own); the eBPF
    // source traces no local-timer exit, so the interrupt's end is not known.
    let mut expiry: Option<bool> = None;
    let mut last = None::<u64>;
    let mut woken_prio: Option<i64> = None;
    // Lock waits: the thread ran and blocked (asleep until the holder wakes it).
    let mut blocked = false;
    // Woken since it last got the CPU (see `peer_slices`): a switch-out asleep after the
    // wakeup was traced is not a sleep.
    let mut woken_since_in = false;
    let holder = late.waker.as_ref().filter(|_| late.wait.blocks());
    let (held_by, holder_ran, waiting) = if late.wait == Wait::Reply {
        (
            "the reply of",
            "the peer ran (handling the message)",
            "waiting for the peer's reply (CPU idle: the peer ran elsewhere)",
        )
    } else {
        (
            "the lock held by",
            "the lock holder ran (its critical section)",
            "waiting for the lock holder (CPU idle: it ran elsewhere or slept)",
        )
    };
    // Woken from another CPU: until an interrupt arrives here, nothing can make this CPU
    // switch (the wake-up IPI is on its way).
    let mut ipi_pending: Option<u16> = None;
    let slice_owner = |stack: &[Who],
                       current: &Option<Task>,
                       woken: bool,
                       blocked: bool,
                       ipi_pending: Option<u16>,
                       woken_prio: Option<i64>,
                       len: u64|
     -> Key {
        if let Some(top) = stack.last() {
            let (kind, name) = match top {
                Who::Irq(n) => (0, n),
                Who::Softirq(n) => (1, n),
            };
            return Key {
                kind,
                task: None,
                detail: Some(format!("{name}{}", silent_inside(len, rules.gap_ns))),
            };
        }
        if blocked {
            return match current {
                Some(t) if holder.is_some_and(|h| h.pid == t.pid) => Key {
                    kind: 9,
                    task: task_key(t),
                    detail: Some(holder_ran.into()),
                },
                Some(t) if t.is_idle() => Key {
                    kind: 9,
                    task: holder.and_then(task_key),
                    detail: Some(waiting.into()),
                },
                Some(t) => Key {
                    kind: 3,
                    task: task_key(t),
                    detail: Some(match (holder, woken_prio) {
                        (Some(h), Some(p)) if t.prio > p && late.wait == Wait::Lock => format!(
                            "priority inversion: a lower-priority task ran while the thread waited for {held_by} {} (pid {})",
                            h.comm, h.pid
                        ),
                        (Some(h), _) => format!("ran while the thread waited for {held_by} {} (pid {})", h.comm, h.pid),
                        (None, _) => "ran while the thread was blocked".into(),
                    }),
                },
                None => Key {
                    kind: 9,
                    task: holder.and_then(task_key),
                    detail: Some(waiting.into()),
                },
            };
        }
        if let (Some(from), Some(t)) = (ipi_pending, current) {
            // Only a task the woken thread outranks had to be interrupted: for one of higher
            // priority the kernel sends no IPI and the wait is plain preemption.
            let outranked = woken_prio.is_some_and(|p| t.prio > p);
            if woken && outranked && t.pid != late.tid && !t.is_idle() {
                return if rules.virtualized {
                    Key {
                        kind: 5,
                        task: None,
                        detail: Some(format!(
                            "woken from CPU {from}, but no interrupt reached this vCPU while {} ran: the host delivered the wake-up IPI late",
                            t.comm
                        )),
                    }
                } else {
                    Key {
                        kind: 3,
                        task: task_key(t),
                        detail: Some(format!(
                            "woken from CPU {from}; the wake-up IPI waited while it ran with interrupts disabled"
                        )),
                    }
                };
            }
        }
        if late.wait == Wait::Notify && !woken {
            return Key {
                kind: 6,
                task: late.waker.as_ref().and_then(task_key),
                detail: Some(
                    "before the wakeup: the notifying thread's unlock and wake call".into(),
                ),
            };
        }
        match current {
            Some(t) if t.pid == late.tid && len <= rules.gap_ns => Key {
                kind: 6,
                task: None,
                detail: Some(format!(
                    "{}{}",
                    match late.wait {
                        Wait::Lock => {
                            "the thread itself ran: its wakeup and the lock or futex call"
                        }
                        Wait::Reply => "the thread itself ran: its send and receive calls",
                        Wait::Timer | Wait::Notify => "from the wakeup to user space",
                    },
                    // These take microseconds; a silence of milliseconds inside them is
                    // user-space work or interrupts off, or a pause of the vCPU, which the
                    // trace cannot tell apart below the gap (no tick was due yet).
                    if len > SILENT_SELF_NS {
                        format!(
                            " (no event for {} inside it: it ran that long in user space or with interrupts off, or the vCPU was not running)",
                            rtlab_stats::Nanos(len)
                        )
                    } else {
                        String::new()
                    }
                )),
            },
            Some(t) if t.is_idle() && !woken => Key {
                kind: if rules.virtualized { 5 } else { 4 },
                task: None,
                detail: Some(if rules.virtualized {
                    "CPU idle past the deadline: the host delivered the timer interrupt late".into()
                } else {
                    "CPU idle past the deadline: C-state exit before the timer interrupt".into()
                }),
            },
            Some(t) if len > rules.gap_ns && !t.is_idle() => Key {
                kind: 5,
                task: None,
                detail: Some(format!(
                    "no event for {} while {} ran: the vCPU was not running",
                    rtlab_stats::Nanos(len),
                    t.comm
                )),
            },
            // Woken on an idle CPU: the way out of idle to the switch. Only a silence past the
            // gap is the host's for sure; shorter, on a VM the guest's idle exit includes work
            // the host does for it, which the trace cannot separate.
            Some(t)
                if t.is_idle()
                    && rules.virtualized
                    && len > rules.idle_gap_ns.unwrap_or(rules.gap_ns) =>
            {
                Key {
                    kind: 5,
                    task: None,
                    detail: Some(format!(
                    "no event for {} while leaving idle after the wakeup: the vCPU was not running",
                    rtlab_stats::Nanos(len)
                )),
                }
            }
            Some(t) if t.is_idle() => Key {
                kind: 4,
                task: None,
                detail: Some(if rules.virtualized {
                    "CPU idle after the wakeup: the way out of idle (on a VM, with the host's part of it)".into()
                } else {
                    "CPU idle after the wakeup: the way out of idle".into()
                }),
            },
            Some(t) => Key {
                kind: 3,
                task: Some((t.comm.clone(), t.pid, t.prio)),
                detail: if !woken {
                    Some(if rules.virtualized {
                        "before the wakeup: no timer interrupt came while it ran (it ran with interrupts disabled, or the host held the vCPU or its timer back)".into()
                    } else {
                        "before the wakeup: no timer interrupt came while it ran (interrupts disabled)".into()
                    })
                } else if woken_prio.is_some_and(|p| t.prio > p) {
                    Some("lower priority than the woken thread: it held the CPU in a non-preemptible kernel section".into())
                } else {
                    None
                },
            },
            None => Key {
                kind: 8,
                task: None,
                detail: Some("no scheduler event before the deadline in the trace window".into()),
            },
        }
    };
    // Who owns a slice of `len` ns ending here (`waking_next`: at a sched_waking of this CPU).
    macro_rules! owner {
        ($len:expr, $waking_next:expr) => {
            stack
                .is_empty()
                .then(|| {
                    timer_tail(
                        expiry,
                        $waking_next,
                        current.as_ref(),
                        woken_prio,
                        $len,
                        rules,
                    )
                })
                .flatten()
                .unwrap_or_else(|| {
                    slice_owner(
                        &stack,
                        &current,
                        woken,
                        blocked,
                        ipi_pending,
                        woken_prio,
                        $len,
                    )
                })
        };
    }
    // Attributes `[from, to]`: while the thread is blocked on a task on another CPU (where that
    // CPU was traced), by what that CPU did (what ran here meanwhile did not delay the answer),
    // else by the owner here.
    let peer = late.peer.as_ref().filter(|p| p.cpu != late.cpu);
    macro_rules! slice {
        ($from:expr, $to:expr, $waking_next:expr) => {
            match (holder, peer) {
                (Some(h), Some(p)) if blocked => {
                    for (key, a, b) in peer_slices(p, h, ($from, $to), holder_ran, rules) {
                        add(key, a, b);
                    }
                }
                _ => {
                    let key = owner!($to - $from, $waking_next);
                    add(key, $from, $to);
                }
            }
        };
    }
    // Nothing is known of this CPU from its last event before a loss to the loss's mark (other
    // CPUs' events between them say nothing of it); from the window's start when the loss
    // comes first.
    let known = known_spans(events, late.cpu, base, rules.tick);
    let span_key = |span: Span| match span {
        Span::Lost(n) => Key {
            kind: 8,
            task: None,
            detail: Some(format!(
                "{n} trace events lost here (the reader fell behind)"
            )),
        },
        Span::NoTick { due, until } => no_tick_key(until - due, "", rules.tick, rules),
    };
    for e in events {
        if let Some(prev) = last {
            if e.ts_ns > prev {
                let waking_here = e.cpu == late.cpu && matches!(e.kind, Kind::Waking { .. });
                for (a, b, span) in split_by(&known, prev, e.ts_ns) {
                    match span {
                        // Blocked on a traced peer, this CPU's pauses did not delay the answer.
                        Some(Span::NoTick { .. })
                            if blocked && holder.is_some() && peer.is_some() =>
                        {
                            slice!(a, b, waking_here && b == e.ts_ns)
                        }
                        Some(span) => add(span_key(span), a, b),
                        None => slice!(a, b, waking_here && b == e.ts_ns),
                    }
                }
            }
        } else if e.ts_ns > t0 {
            // Nothing known between the deadline and the first event.
            for (a, b, span) in split_by(&known, t0, e.ts_ns) {
                let key = match span {
                    Some(span) => span_key(span),
                    None => Key {
                        kind: 8,
                        task: None,
                        detail: Some("before the first traced event".into()),
                    },
                };
                add(key, a, b);
            }
        }
        seen_any = true;
        last = Some(e.ts_ns);
        if e.cpu == late.cpu {
            expiry = match &e.kind {
                Kind::HrtimerEntry { task, .. } => {
                    Some(task.as_ref().is_some_and(|t| t.pid == late.tid))
                }
                _ => None,
            };
        }
        if e.ts_ns > t1 {
            break;
        }
        match &e.kind {
            Kind::Switch {
                prev,
                prev_state,
                next,
            } => {
                ipi_pending = None;
                let sleeps =
                    prev.pid == late.tid && !prev_state.starts_with('R') && !woken_since_in;
                if sleeps {
                    // It went to sleep: a wakeup before this one (an earlier period's, in the
                    // history before the deadline) is spent.
                    woken = false;
                }
                if sleeps && late.wait.blocks() && e.ts_ns >= t0 {
                    blocked = true;
                    woken_prio.get_or_insert(prev.prio);
                }
                if next.pid == late.tid {
                    woken_since_in = false;
                }
                current = Some(next.clone());
            }
            Kind::Lost(_) if e.cpu == late.cpu => {
                // Who runs now is unknown until the next switch.
                current = None;
                stack.clear();
            }
            Kind::Waking { task, .. }
            | Kind::HrtimerEntry {
                task: Some(task), ..
            } if task.pid == late.tid => {
                woken = true;
                woken_since_in = true;
                blocked = false;
                woken_prio = Some(task.prio);
                ipi_pending = (e.cpu != late.cpu).then_some(e.cpu);
            }
            _ if e.cpu != late.cpu => {}
            Kind::IrqEntry { irq, name } => {
                ipi_pending = None;
                stack.push(Who::Irq(format!("IRQ {irq} {name}")))
            }
            Kind::VectorEntry { name } => {
                ipi_pending = None;
                stack.push(Who::Irq(name.clone()))
            }
            Kind::SoftirqEntry { name } => stack.push(Who::Softirq(name.clone())),
            Kind::IrqExit | Kind::VectorExit | Kind::SoftirqExit => {
                stack.pop();
            }
            Kind::Nmi { handler, delta_ns } => {
                // Reported after the fact, with its length: carve it out of the past.
                add(
                    Key {
                        kind: 2,
                        task: None,
                        detail: Some(handler.clone()),
                    },
                    e.ts_ns.saturating_sub(*delta_ns),
                    e.ts_ns,
                );
            }
            Kind::Migrate {
                task,
                orig_cpu,
                dest_cpu,
            } if task.pid == late.tid => add(
                Key {
                    kind: 7,
                    task: None,
                    detail: Some(format!("moved from CPU {orig_cpu} to CPU {dest_cpu}")),
                },
                e.ts_ns,
                e.ts_ns,
            ),
            _ => {}
        }
    }
    if let Some(prev) = last.filter(|&p| p < t1) {
        slice!(prev, t1, false);
    }
    if !seen_any {
        add(
            Key {
                kind: 8,
                task: None,
                detail: Some("no traced event on this CPU in the window".into()),
            },
            t0,
            t1,
        );
    }
    let mut causes: Vec<Cause> = totals
        .into_iter()
        .map(|(k, d)| Cause {
            kind: kind_of(k.kind),
            duration_ns: d,
            task: k.task.as_ref().map(|t| t.0.clone()),
            pid: k.task.as_ref().map(|t| t.1),
            // The real-time priority users set (FIFO 99 is 99); 0 for time-sharing tasks.
            prio: k
                .task
                .as_ref()
                .map(|t| if t.2 < 100 { 99 - t.2 } else { 0 }),
            detail: k.detail,
        })
        .collect();
    causes.sort_by_key(|c| std::cmp::Reverse(c.duration_ns));
    causes
}

/// One readable line: "thread0 late by 3.1 ms at 12.4 s: 2.9 ms preempted by rtlab-hog (pid 42,
/// RT 99); 0.2 ms IRQ 11 virtio0".
pub fn describe(series: &str, latency_ns: u64, at_ns: u64, causes: &[Cause]) -> String {
    use rtlab_stats::Nanos;
    let parts: Vec<String> = causes
        .iter()
        .filter(|c| c.duration_ns * 100 >= latency_ns || c.duration_ns >= 10_000)
        .take(4)
        .map(|c| {
            let d = Nanos(c.duration_ns);
            match (&c.kind, &c.task) {
                (CauseKind::Blocking, Some(task)) => format!(
                    "{d} blocked on {task} (pid {}, {})",
                    c.pid.unwrap_or(-1),
                    match c.prio {
                        Some(p) if p > 0 => format!("RT {p}"),
                        _ => "time-sharing".into(),
                    }
                ),
                (CauseKind::Preemption, Some(task)) => {
                    let prio = match c.prio {
                        Some(p) if p > 0 => format!("RT {p}"),
                        _ => "time-sharing".into(),
                    };
                    let inversion = c
                        .detail
                        .as_deref()
                        .is_some_and(|d| d.starts_with("priority inversion"));
                    let before = c
                        .detail
                        .as_deref()
                        .is_some_and(|d| d.starts_with("before the wakeup: no timer"));
                    if before {
                        // Not woken yet: nothing was preempted, the timer interrupt was late.
                        return format!(
                            "{d} timer interrupt late while {task} (pid {}, {prio}) ran",
                            c.pid.unwrap_or(-1)
                        );
                    }
                    format!(
                        "{d} preempted by {task} (pid {}, {prio}){}",
                        c.pid.unwrap_or(-1),
                        if inversion {
                            " while the lock holder waited: priority inversion"
                        } else {
                            ""
                        }
                    )
                }
                (CauseKind::Irq, _) => format!("{d} {}", c.detail.as_deref().unwrap_or("IRQ")),
                (CauseKind::Softirq, _) => {
                    format!("{d} softirq {}", c.detail.as_deref().unwrap_or("?"))
                }
                (kind, _) => format!(
                    "{d} {}{}",
                    kind.as_str(),
                    c.detail
                        .as_deref()
                        .map(|x| format!(" ({x})"))
                        .unwrap_or_default()
                ),
            }
        })
        .collect();
    format!(
        "{series} late by {} at {:.1} s: {}",
        Nanos(latency_ns),
        at_ns as f64 / 1e9,
        if parts.is_empty() {
            "no cause found".into()
        } else {
            parts.join("; ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::parse_line;

    /// The rules rtlab uses (8 ms gap), on a VM or not.
    fn rules(virtualized: bool) -> Rules {
        Rules {
            gap_ns: 8_000_000,
            virtualized,
            idle_gap_ns: None,
            tick: None,
        }
    }

    /// CPU 0 idle; a timer interrupt at 5.000400 wakes the thread (pid 7), which runs at
    /// 5.000410.
    const TIMER_WAKES_T_ON_IDLE_CPU0: [&str; 4] = [
            "<idle>-0 [000] d.h1. 5.000400: local_timer_entry: vector=236",
            "<idle>-0 [000] d.h3. 5.000401: sched_waking: comm=t pid=7 prio=4 target_cpu=000",
            "<idle>-0 [000] d.h1. 5.000405: local_timer_exit: vector=236",
            "<idle>-0 [000] d..2. 5.000410: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=4",
    ];

    fn swapper0() -> Task {
        Task {
            comm: "swapper/0".into(),
            pid: 0,
            prio: 120,
        }
    }

    fn swapper1() -> Task {
        Task {
            comm: "swapper/1".into(),
            ..swapper0()
        }
    }

    fn events(lines: &[&str]) -> Vec<Event> {
        lines.iter().map(|l| parse_line(l).expect(l)).collect()
    }

    #[test]
    fn a_hog_that_preempts_is_named_with_its_share() {
        // Deadline 10.001000; the hog (FIFO 99) runs from 10.000500 to 10.004000 with a timer
        // IRQ in between; the thread is woken at 10.001002 but runs at 10.004010.
        let ev = events(&[
            "rtlab-hog-42 [000] d..2. 10.000500: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=rtlab-hog next_pid=42 next_prio=0",
            "rtlab-hog-42 [000] d.h1. 10.001000: local_timer_entry: vector=236",
            "rtlab-hog-42 [000] d.h2. 10.001001: hrtimer_expire_entry: hrtimer=0000 function=hrtimer_wakeup now=1",
            "rtlab-hog-42 [000] d.h3. 10.001002: sched_waking: comm=rtlab-wakeup0 pid=77 prio=4 target_cpu=000",
            "rtlab-hog-42 [000] d.h1. 10.001010: local_timer_exit: vector=236",
            "rtlab-hog-42 [000] d..2. 10.004000: sched_switch: prev_comm=rtlab-hog prev_pid=42 prev_prio=0 prev_state=S ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
        ]);
        let late = Late {
            tid: 77,
            deadline_ns: 10_001_000_000,
            woke_ns: 10_004_010_000,
            ..Late::default()
        };
        let rules = rules(true);
        let causes = attribute(&ev, None, &late, &rules);
        assert_eq!(causes[0].kind, CauseKind::Preemption);
        assert_eq!(causes[0].task.as_deref(), Some("rtlab-hog"));
        assert_eq!(causes[0].duration_ns, 2_990_000);
        let back = causes
            .iter()
            .find(|c| c.kind == CauseKind::Syscall)
            .unwrap();
        assert_eq!(back.duration_ns, 10_000);
        let irq = causes.iter().find(|c| c.kind == CauseKind::Irq).unwrap();
        assert_eq!(
            (irq.duration_ns, irq.detail.as_deref()),
            (10_000, Some("local_timer"))
        );
        let total: u64 = causes.iter().map(|c| c.duration_ns).sum();
        assert_eq!(
            total, 3_010_000,
            "every ns of the lateness is attributed once"
        );
        let line = describe("thread0", 3_010_000, 12_400_000_000, &causes);
        assert!(
            line.starts_with(
                "thread0 late by 3.01 ms at 12.4 s: 2.99 ms preempted by rtlab-hog (pid 42, RT 99)"
            ),
            "{line}"
        );
    }

    #[test]
    fn a_sleep_timers_expiry_stands_for_the_wakeup_and_ticks_are_not_interrupt_time() {
        // The eBPF source: no local_timer entry/exit; the timer's expiry names the task it
        // wakes (there may be no sched_waking at all), and a tick expires 1 ms later.
        let expiry = |ts_ns: u64, function: &str, task: Option<Task>| Event {
            cpu: 0,
            ts_ns,
            current_pid: -1,
            kind: Kind::HrtimerEntry {
                function: function.into(),
                task,
            },
        };
        let thread = Task {
            comm: "rtlab-wakeup0".into(),
            pid: 77,
            prio: 4,
        };
        let mut ev = events(&[
            "rtlab-hog-42 [000] d..2. 10.000500: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=rtlab-hog next_pid=42 next_prio=0",
            "rtlab-hog-42 [000] d..2. 10.004000: sched_switch: prev_comm=rtlab-hog prev_pid=42 prev_prio=0 prev_state=S ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
        ]);
        ev.insert(
            1,
            expiry(10_001_001_000, "hrtimer_wakeup", Some(thread.clone())),
        );
        ev.insert(2, expiry(10_002_000_000, "tick_nohz_handler", None));
        let late = Late {
            tid: 77,
            deadline_ns: 10_001_000_000,
            woke_ns: 10_004_010_000,
            ..Late::default()
        };
        let causes = attribute(&ev, None, &late, &rules(true));
        let woken_then = causes
            .iter()
            .find(|c| c.kind == CauseKind::Preemption && c.detail.is_none())
            .expect("preempted after the wakeup");
        assert_eq!(woken_then.task.as_deref(), Some("rtlab-hog"));
        assert_eq!(woken_then.duration_ns, 2_999_000, "{causes:?}");
        assert!(
            causes.iter().all(|c| c.kind != CauseKind::Irq),
            "{causes:?}"
        );
        assert_eq!(causes.iter().map(|c| c.duration_ns).sum::<u64>(), 3_010_000);

        // With sched_waking recorded too, expiry -> waking is the timer interrupt.
        let waking = Event {
            cpu: 0,
            ts_ns: 10_001_003_000,
            current_pid: 42,
            kind: Kind::Waking {
                task: thread,
                target_cpu: 0,
            },
        };
        ev.insert(2, waking);
        let causes = attribute(&ev, None, &late, &rules(true));
        let irq = causes.iter().find(|c| c.kind == CauseKind::Irq).unwrap();
        assert_eq!(
            (irq.duration_ns, irq.detail.as_deref()),
            (2_000, Some("local_timer"))
        );
        assert_eq!(causes.iter().map(|c| c.duration_ns).sum::<u64>(), 3_010_000);

        // An idle CPU: the timer fires 400 us late (the host), then 12 us pass before the
        // switch; without the interrupt's end, that is the interrupt's rest and idle exit.
        let mut ev = events(&[
            "t-7 [000] d..2. 4.999000: sched_switch: prev_comm=t prev_pid=7 prev_prio=4 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
            "<idle>-0 [000] d..2. 5.000412: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=4",
        ]);
        let t = Task {
            comm: "t".into(),
            pid: 7,
            prio: 4,
        };
        ev.insert(1, expiry(5_000_400_000, "hrtimer_wakeup", Some(t)));
        let late = Late {
            tid: 7,
            deadline_ns: 5_000_000_000,
            woke_ns: 5_000_412_000,
            ..Late::default()
        };
        let causes = attribute(&ev, None, &late, &rules(true));
        assert_eq!(causes[0].kind, CauseKind::HypervisorGap);
        assert_eq!(causes[0].duration_ns, 400_000);
        let exit = causes
            .iter()
            .find(|c| c.kind == CauseKind::IdleExit)
            .unwrap();
        assert_eq!(exit.duration_ns, 12_000);
        assert!(exit
            .detail
            .as_deref()
            .unwrap()
            .contains("rest of the timer interrupt"));
    }

    #[test]
    fn an_earlier_periods_wakeup_does_not_make_a_late_timer_look_woken() {
        // The history starts before the deadline: the previous period's expiry, run and sleep;
        // then a SCHED_OTHER task runs and this period's timer fires 1.35 ms late.
        let thread = Task {
            comm: "rtlab-wakeup0".into(),
            pid: 77,
            prio: 4,
        };
        let expiry = |ts_ns: u64| Event {
            cpu: 0,
            ts_ns,
            current_pid: -1,
            kind: Kind::HrtimerEntry {
                function: "hrtimer_wakeup".into(),
                task: Some(thread.clone()),
            },
        };
        let mut ev = events(&[
            "load-5 [000] d..2. 10.015004: sched_switch: prev_comm=load prev_pid=5 prev_prio=120 prev_state=R ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
            "rtlab-wakeup0-77 [000] d..2. 10.015006: sched_switch: prev_comm=rtlab-wakeup0 prev_pid=77 prev_prio=4 prev_state=S ==> next_comm=load next_pid=5 next_prio=120",
            "load-5 [000] d..2. 10.017355: sched_switch: prev_comm=load prev_pid=5 prev_prio=120 prev_state=R ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
        ]);
        ev.insert(0, expiry(10_015_001_000));
        ev.insert(3, expiry(10_017_351_000));
        let late = Late {
            tid: 77,
            deadline_ns: 10_016_000_000,
            woke_ns: 10_017_357_000,
            ..Late::default()
        };
        for virtualized in [true, false] {
            let causes = attribute(&ev, None, &late, &rules(virtualized));
            assert_eq!(causes[0].duration_ns, 1_351_000, "{causes:?}");
            assert!(
                causes[0]
                    .detail
                    .as_deref()
                    .unwrap()
                    .starts_with("before the wakeup"),
                "{causes:?}"
            );
            let line = describe("thread0", 1_357_000, 10_000_000_000, &causes);
            assert!(
                line.contains("1.35 ms timer interrupt late while load (pid 5, time-sharing)"),
                "{line}"
            );
        }
    }

    #[test]
    fn a_round_trip_follows_the_peer_to_its_cpu() {
        // CPU 0: the thread (pid 7) sends at 20.000000 and sleeps until the reply. CPU 1: the
        // peer (pid 5, asleep) is woken by the send at 20.000006 but a FIFO 99 hog (pid 6)
        // holds CPU 1 until 20.001000; the peer answers in 8 us.
        let ev = events(&[
            "t-7 [000] d..2. 20.000005: sched_switch: prev_comm=t prev_pid=7 prev_prio=9 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
            "peer-5 [001] d..2. 20.001008: sched_waking: comm=t pid=7 prio=9 target_cpu=000",
            "<idle>-0 [000] d..2. 20.001020: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=9",
        ]);
        let peer_cpu = events(&[
            "peer-5 [001] d..2. 19.999000: sched_switch: prev_comm=peer prev_pid=5 prev_prio=11 prev_state=S ==> next_comm=hog next_pid=6 next_prio=0",
            "t-7 [000] d..2. 20.000006: sched_waking: comm=peer pid=5 prio=11 target_cpu=001",
            "hog-6 [001] d..2. 20.001000: sched_switch: prev_comm=hog prev_pid=6 prev_prio=0 prev_state=S ==> next_comm=peer next_pid=5 next_prio=11",
            "peer-5 [001] d..2. 20.001008: sched_waking: comm=t pid=7 prio=9 target_cpu=000",
            "peer-5 [001] d..2. 20.001010: sched_switch: prev_comm=peer prev_pid=5 prev_prio=11 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120",
        ]);
        let peer_task = Task {
            comm: "peer".into(),
            pid: 5,
            prio: 11,
        };
        let me = Task {
            comm: "t".into(),
            pid: 7,
            prio: 9,
        };
        let mut late = Late {
            tid: 7,
            deadline_ns: 20_000_000_000,
            woke_ns: 20_001_025_000,
            wait: Wait::Reply,
            waker: Some(peer_task),
            cpu: 0,
            peer: Some(Peer {
                cpu: 1,
                events: peer_cpu,
                base: None,
                tick: None,
            }),
        };
        let causes = attribute(&ev, Some(&me), &late, &rules(true));
        assert_eq!(causes[0].kind, CauseKind::Preemption, "{causes:?}");
        assert_eq!(causes[0].task.as_deref(), Some("hog"));
        assert_eq!(causes[0].duration_ns, 994_000);
        let answered = causes
            .iter()
            .find(|c| c.kind == CauseKind::Blocking && c.detail.as_deref().unwrap().contains("ran"))
            .unwrap();
        assert_eq!(
            (answered.task.as_deref(), answered.duration_ns),
            (Some("peer"), 8_000)
        );
        let asleep = causes
            .iter()
            .find(|c| c.detail.as_deref().unwrap_or("").contains("asleep"))
            .unwrap();
        assert_eq!(asleep.duration_ns, 1_000);
        assert_eq!(causes.iter().map(|c| c.duration_ns).sum::<u64>(), 1_025_000);
        let line = describe("rtt", 1_025_000, 0, &causes);
        assert!(
            line.contains("994 us preempted by hog (pid 6, RT 99)"),
            "{line}"
        );

        // With a tick due every 400 us from 0, CPU 1 (busy with the hog from 19.999000 to
        // 20.001000, nothing traced between) missed its ticks from 19.999200 on: that stretch
        // of the hog is the vCPU not running.
        let mut gridded = late.clone();
        gridded.peer.as_mut().unwrap().tick = Some(Tick {
            period_ns: 400_000,
            phase_ns: 0,
        });
        let causes = attribute(&ev, Some(&me), &gridded, &rules(true));
        assert_eq!(causes[0].kind, CauseKind::HypervisorGap, "{causes:?}");
        // The hog's 994 us and the 1 us the peer slept before its wakeup, on that busy CPU.
        assert_eq!(causes[0].duration_ns, 995_000);
        assert!(causes[0]
            .detail
            .as_deref()
            .unwrap()
            .starts_with("no tick for 1.80 ms on a busy CPU (CPU 1, the peer's)"));
        assert_eq!(causes.iter().map(|c| c.duration_ns).sum::<u64>(), 1_025_000);

        // A loss on CPU 0 after the peer's wakeup: from there its state is not known.
        let mut lossy = late.clone();
        let peer = lossy.peer.as_mut().unwrap();
        peer.events.insert(
            2,
            Event {
                cpu: 0,
                ts_ns: 20_000_500_000,
                current_pid: -1,
                kind: Kind::Lost(3),
            },
        );
        let causes = attribute(&ev, Some(&me), &lossy, &rules(true));
        let unknown = causes
            .iter()
            .find(|c| c.kind == CauseKind::Unexplained)
            .unwrap();
        assert_eq!(unknown.duration_ns, 500_000);
        assert!(unknown.detail.as_deref().unwrap().contains("not known"));

        // The send wakes the peer (traced at 20.000006 on CPU 0) while the peer is still
        // getting off CPU 1, which is traced after it (20.000008, asleep): it was runnable
        // from then on, so the hog kept it waiting, it did not sleep.
        let mut racing = late.clone();
        let peer = racing.peer.as_mut().unwrap();
        peer.events.remove(0);
        peer.base = racing.waker.clone();
        peer.events.insert(
            1,
            events(&["peer-5 [001] d..2. 20.000008: sched_switch: prev_comm=peer prev_pid=5 prev_prio=11 prev_state=S ==> next_comm=hog next_pid=6 next_prio=0"]).remove(0),
        );
        let causes = attribute(&ev, Some(&me), &racing, &rules(true));
        assert_eq!(causes[0].task.as_deref(), Some("hog"), "{causes:?}");
        assert_eq!(causes[0].duration_ns, 992_000);
        assert!(
            !causes
                .iter()
                .any(|c| c.detail.as_deref().unwrap_or("").contains("asleep")),
            "{causes:?}"
        );

        // Without the peer's CPU, the same wait is the reply, not followed.
        late.peer = None;
        let causes = attribute(&ev, Some(&me), &late, &rules(true));
        assert_eq!(causes[0].kind, CauseKind::Blocking);
        assert!(causes[0]
            .detail
            .as_deref()
            .unwrap()
            .starts_with("waiting for the peer's reply"));

        // CPU 1 idle instead of the hog: 992 us to leave idle is the way out of idle, or,
        // where the guest's idle states take microseconds, the host not running that vCPU.
        let mut idle = racing.clone();
        let peer = idle.peer.as_mut().unwrap();
        for e in peer.events.iter_mut() {
            if let Kind::Switch { prev, next, .. } = &mut e.kind {
                for t in [prev, next] {
                    if t.pid == 6 {
                        *t = swapper1();
                    }
                }
            }
        }
        let causes = attribute(&ev, Some(&me), &idle, &rules(true));
        assert_eq!(causes[0].kind, CauseKind::IdleExit, "{causes:?}");
        assert_eq!(causes[0].duration_ns, 992_000);
        let hlt_only = Rules {
            idle_gap_ns: Some(500_000),
            ..rules(true)
        };
        let causes = attribute(&ev, Some(&me), &idle, &hlt_only);
        assert_eq!(causes[0].kind, CauseKind::HypervisorGap, "{causes:?}");
        assert_eq!(causes[0].duration_ns, 992_000);
        assert!(causes[0]
            .detail
            .as_deref()
            .unwrap()
            .starts_with("CPU 1 silent for 992 us leaving idle to run peer"));
    }

    #[test]
    fn a_silent_interrupt_past_the_gap_says_it_was_silent() {
        // A call_function_single interrupt from 5.000100 to 5.012100 with no event inside:
        // still the interrupt, but said to be silent (its handler or the host).
        let mut lines = vec![
            "<idle>-0 [000] d.h1. 4.988300: call_function_single_entry: vector=251",
            "<idle>-0 [000] d.h1. 5.000300: call_function_single_exit: vector=251",
        ];
        lines.extend(TIMER_WAKES_T_ON_IDLE_CPU0);
        let ev = events(&lines);
        let base = swapper0();
        let late = Late {
            tid: 7,
            deadline_ns: 4_988_200_000,
            woke_ns: 5_000_412_000,
            ..Late::default()
        };
        let causes = attribute(&ev, Some(&base), &late, &rules(true));
        assert_eq!(causes[0].kind, CauseKind::Irq, "{causes:?}");
        assert_eq!(causes[0].duration_ns, 12_000_000);
        let detail = causes[0].detail.as_deref().unwrap();
        assert!(
            detail.starts_with("call_function_single (no event for 12"),
            "{detail}"
        );
        // Under the gap, the interrupt is named alone.
        let causes = attribute(&ev, Some(&base), &late, &rules(false));
        assert_eq!(causes[0].kind, CauseKind::Irq);
        let short = Rules {
            gap_ns: 20_000_000,
            virtualized: true,
            idle_gap_ns: None,
            tick: None,
        };
        let causes = attribute(&ev, Some(&base), &late, &short);
        assert_eq!(causes[0].detail.as_deref(), Some("call_function_single"));
    }

    #[test]
    fn the_thread_itself_silent_for_long_is_a_gap_past_it_and_noted_below() {
        // The thread runs its round trip from 5.000000; its CPU says nothing until 5.009010.
        let ev = events(&[
            "<idle>-0 [000] d..2. 5.000000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=9",
            "t-7 [000] d..2. 5.009010: sched_waking: comm=peer pid=5 prio=9 target_cpu=001",
        ]);
        let late = Late {
            tid: 7,
            deadline_ns: 5_000_010_000,
            woke_ns: 5_009_020_000,
            wait: Wait::Reply,
            ..Late::default()
        };
        let causes = attribute(&ev, Some(&swapper0()), &late, &rules(true));
        assert_eq!(causes[0].kind, CauseKind::HypervisorGap, "{causes:?}");
        assert_eq!(causes[0].duration_ns, 9_000_000);
        assert!(causes[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("no event for 9.0"));
        // Under the gap it stays the thread's own time, with the silence noted.
        let short = Rules {
            gap_ns: 20_000_000,
            virtualized: true,
            idle_gap_ns: None,
            tick: None,
        };
        let causes = attribute(&ev, Some(&swapper0()), &late, &short);
        assert_eq!(causes[0].kind, CauseKind::Syscall, "{causes:?}");
        let detail = causes[0].detail.as_deref().unwrap();
        assert!(
            detail
                .starts_with("the thread itself ran: its send and receive calls (no event for 9.0"),
            "{detail}"
        );
    }

    #[test]
    fn the_ticks_grid_is_found_from_the_ticks_seen() {
        // HZ=250, ticks a few microseconds after 2 us past each 4 ms, skipping one (idle),
        // and one came late (the host).
        let cpu0: Vec<u64> = [0u64, 1, 2, 3, 5, 6]
            .iter()
            .map(|k| 1_000_000_000 + k * 4_000_000 + 2_000 + k % 3 * 1_000)
            .chain([1_028_900_000])
            .collect();
        let tick = tick_grid(&cpu0).unwrap();
        assert_eq!(tick.period_ns, 4_000_000);
        assert!((2_000..=4_000).contains(&tick.phase_ns), "{tick:?}");
        assert_eq!(
            tick.next_after(1_000_004_000),
            1_004_000_000 + tick.phase_ns
        );
        // With skew_tick=1 another CPU's ticks are 2 ms off these: its own grid.
        let cpu1: Vec<u64> = (0u64..5)
            .map(|k| 1_002_000_000 + k * 4_000_000 + 3_500)
            .collect();
        assert_eq!(tick_grid(&cpu1).unwrap().phase_ns, 2_003_500);
        // Too few to tell.
        assert_eq!(tick_grid(&[1_000_000_000, 1_004_000_000]), None);
    }

    #[test]
    fn a_busy_cpu_that_misses_its_tick_did_not_run() {
        // The thread runs its round trip from 5.000100; it takes the tick at 5.004002, not the
        // one due at 5.008002: the next event is at 5.010500, the late tick.
        let ev = events(&[
            "<idle>-0 [000] d..2. 5.000100: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=9",
            "t-7 [000] d.h1. 5.004002: hrtimer_expire_entry: hrtimer=000000001 function=tick_nohz_handler now=5004002000",
            "t-7 [000] d.h1. 5.010500: hrtimer_expire_entry: hrtimer=000000001 function=tick_nohz_handler now=5010500000",
            "t-7 [000] d..2. 5.010550: sched_waking: comm=peer pid=5 prio=9 target_cpu=001",
        ]);
        let late = Late {
            tid: 7,
            deadline_ns: 5_000_110_000,
            woke_ns: 5_010_600_000,
            wait: Wait::Reply,
            ..Late::default()
        };
        let gridded = Rules {
            tick: Some(Tick {
                period_ns: 4_000_000,
                phase_ns: 2_000,
            }),
            ..rules(true)
        };
        let causes = attribute(&ev, Some(&swapper0()), &late, &gridded);
        let gap = causes
            .iter()
            .find(|c| c.kind == CauseKind::HypervisorGap)
            .unwrap_or_else(|| panic!("{causes:?}"));
        assert_eq!(gap.duration_ns, 2_498_000);
        assert!(
            gap.detail
                .as_deref()
                .unwrap()
                .starts_with("no tick for 2.50 ms on a busy CPU"),
            "{gap:?}"
        );
        assert_eq!(
            causes.iter().map(|c| c.duration_ns).sum::<u64>(),
            10_490_000
        );
        // A tick a hair before its point of the grid is that point's: none missed after it.
        let mut early = ev.clone();
        early[1].ts_ns = 5_003_999_800;
        early[2].ts_ns = 5_007_999_900;
        early[3].ts_ns = 5_008_000_000;
        let late_early = Late {
            woke_ns: 5_008_100_000,
            ..late.clone()
        };
        let causes = attribute(&early, Some(&swapper0()), &late_early, &gridded);
        assert!(
            causes.iter().all(|c| c.kind != CauseKind::HypervisorGap),
            "{causes:?}"
        );

        // Without the grid, the same silence is the thread's own.
        let causes = attribute(&ev, Some(&swapper0()), &late, &rules(true));
        assert!(
            causes.iter().all(|c| c.kind != CauseKind::HypervisorGap),
            "{causes:?}"
        );
        // An idle CPU takes no tick: no gap.
        let idle = events(&[
            "<idle>-0 [000] d.h1. 5.004002: hrtimer_expire_entry: hrtimer=000000001 function=tick_nohz_handler now=5004002000",
            "<idle>-0 [000] d..2. 5.010550: sched_waking: comm=peer pid=5 prio=9 target_cpu=001",
        ]);
        let causes = attribute(&idle, Some(&swapper0()), &late, &gridded);
        assert!(
            !causes
                .iter()
                .any(|c| c.detail.as_deref().unwrap_or("").contains("no tick")),
            "{causes:?}"
        );
    }

    #[test]
    fn an_idle_cpu_woken_late_is_a_hypervisor_gap_on_a_vm() {
        let mut lines = vec!["<idle>-0 [000] d..1. 5.000000: cpu_idle: state=1 cpu_id=0"];
        lines.extend(TIMER_WAKES_T_ON_IDLE_CPU0);
        let ev = events(&lines);
        let base = swapper0();
        let late = Late {
            tid: 7,
            deadline_ns: 5_000_050_000,
            woke_ns: 5_000_412_000,
            ..Late::default()
        };
        let causes = attribute(&ev, Some(&base), &late, &rules(true));
        assert_eq!(causes[0].kind, CauseKind::HypervisorGap);
        assert_eq!(causes[0].duration_ns, 350_000);
        // After the interrupt, still idle until the switch: the way out of idle.
        let leaving = causes
            .iter()
            .find(|c| c.kind == CauseKind::IdleExit)
            .unwrap();
        assert_eq!(leaving.duration_ns, 5_000);
        assert!(leaving
            .detail
            .as_deref()
            .unwrap()
            .contains("way out of idle"));
        let on_metal = attribute(&ev, Some(&base), &late, &rules(false));
        assert_eq!(on_metal[0].kind, CauseKind::IdleExit);

        // Silent for 10 ms after the wakeup on an idle vCPU: that much is the host's.
        let mut slow = ev.clone();
        slow.last_mut().unwrap().ts_ns = 5_010_405_000;
        let late = Late {
            woke_ns: 5_010_407_000,
            ..late
        };
        let causes = attribute(&slow, Some(&base), &late, &rules(true));
        assert_eq!(causes[0].kind, CauseKind::HypervisorGap);
        assert_eq!(causes[0].duration_ns, 10_000_000);
        assert!(causes[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("leaving idle"));

        // 1 ms out of idle, where the guest's idle states take microseconds: the host's too.
        let mut slowish = ev.clone();
        slowish.last_mut().unwrap().ts_ns = 5_001_405_000;
        let late = Late {
            woke_ns: 5_001_407_000,
            ..late
        };
        let causes = attribute(&slowish, Some(&base), &late, &rules(true));
        assert_eq!(causes[0].kind, CauseKind::IdleExit, "{causes:?}");
        let hlt_only = Rules {
            idle_gap_ns: Some(500_000),
            ..rules(true)
        };
        let causes = attribute(&slowish, Some(&base), &late, &hlt_only);
        assert_eq!(causes[0].kind, CauseKind::HypervisorGap, "{causes:?}");
        assert_eq!(causes[0].duration_ns, 1_000_000);
    }

    #[test]
    fn a_lock_wait_names_the_holder_and_the_task_that_kept_it_off_the_cpu() {
        // One CPU. The high thread (pid 7, FIFO 90 = prio 9) wakes at its deadline 20.000000,
        // finds the lock held by the owner (pid 5, FIFO 88 = prio 11) and blocks; a hog (pid 6,
        // FIFO 89 = prio 10) runs 3 ms, then the owner finishes 0.5 ms and wakes the thread.
        let ev = events(&[
            "owner-5 [000] d.h1. 20.000000: local_timer_entry: vector=236",
            "owner-5 [000] d.h3. 20.000001: sched_waking: comm=high pid=7 prio=9 target_cpu=000",
            "owner-5 [000] d.h1. 20.000002: local_timer_exit: vector=236",
            "owner-5 [000] d..2. 20.000003: sched_switch: prev_comm=owner prev_pid=5 prev_prio=11 prev_state=R+ ==> next_comm=high next_pid=7 next_prio=9",
            "high-7 [000] d..2. 20.000010: sched_switch: prev_comm=high prev_pid=7 prev_prio=9 prev_state=S ==> next_comm=hog next_pid=6 next_prio=10",
            "hog-6 [000] d..2. 20.003010: sched_switch: prev_comm=hog prev_pid=6 prev_prio=10 prev_state=S ==> next_comm=owner next_pid=5 next_prio=11",
            "owner-5 [000] d..2. 20.003510: sched_waking: comm=high pid=7 prio=9 target_cpu=000",
            "owner-5 [000] d..2. 20.003512: sched_switch: prev_comm=owner prev_pid=5 prev_prio=11 prev_state=R+ ==> next_comm=high next_pid=7 next_prio=9",
        ]);
        let owner = Task {
            comm: "owner".into(),
            pid: 5,
            prio: 11,
        };
        let late = Late {
            tid: 7,
            deadline_ns: 20_000_000_000,
            woke_ns: 20_003_520_000,
            wait: Wait::Lock,
            waker: Some(owner.clone()),
            cpu: 0,
            peer: None,
        };
        let rules = rules(true);
        let causes = attribute(&ev, Some(&owner), &late, &rules);
        let total: u64 = causes.iter().map(|c| c.duration_ns).sum();
        assert_eq!(total, 3_520_000, "every ns attributed once: {causes:?}");
        assert_eq!(causes[0].kind, CauseKind::Preemption);
        assert_eq!(causes[0].task.as_deref(), Some("hog"));
        assert_eq!(causes[0].duration_ns, 3_000_000);
        assert!(causes[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("priority inversion"));
        let blocking = causes
            .iter()
            .find(|c| c.kind == CauseKind::Blocking)
            .unwrap();
        assert_eq!(
            (
                blocking.task.as_deref(),
                blocking.duration_ns,
                blocking.prio
            ),
            (Some("owner"), 500_000, Some(88))
        );
        let line = describe("none/rtlab", 3_520_000, 1_000_000_000, &causes);
        assert!(
            line.contains("500 us blocked on owner (pid 5, RT 88)"),
            "{line}"
        );
        assert!(line.contains("3.00 ms preempted by hog (pid 6, RT 89) while the lock holder waited: priority inversion"), "{line}");
        // The same events read as a timer wakeup know nothing of locks.
        let as_wakeup = attribute(
            &ev,
            Some(&owner),
            &Late {
                wait: Wait::Timer,
                ..late
            },
            &rules,
        );
        assert!(as_wakeup.iter().all(|c| c.kind != CauseKind::Blocking));
    }

    #[test]
    fn a_wakeup_from_another_cpu_waits_for_its_ipi() {
        // The notifier on CPU 1 wakes pid 7 (on CPU 0, where a time-sharing spinner runs) at
        // 30.000010; the reschedule IPI only arrives at 30.000900.
        let ev = events(&[
            "spin-3 [000] d..2. 29.990000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=spin next_pid=3 next_prio=120",
            "notify-8 [001] d..2. 30.000010: sched_waking: comm=w pid=7 prio=9 target_cpu=000",
            "spin-3 [000] d.h1. 30.000900: reschedule_entry: vector=253",
            "spin-3 [000] d.h1. 30.000901: reschedule_exit: vector=253",
            "spin-3 [000] d..2. 30.000903: sched_switch: prev_comm=spin prev_pid=3 prev_prio=120 prev_state=R+ ==> next_comm=w next_pid=7 next_prio=9",
        ]);
        let late = Late {
            tid: 7,
            deadline_ns: 30_000_000_000,
            woke_ns: 30_000_905_000,
            wait: Wait::Notify,
            cpu: 0,
            ..Late::default()
        };
        let vm = rules(true);
        let causes = attribute(&ev, None, &late, &vm);
        assert_eq!(causes[0].kind, CauseKind::HypervisorGap, "{causes:?}");
        assert_eq!(causes[0].duration_ns, 890_000);
        let notifier = causes
            .iter()
            .find(|c| c.kind == CauseKind::Syscall)
            .unwrap();
        assert_eq!(
            notifier.duration_ns, 10_000,
            "before the wake call: {causes:?}"
        );
        let metal = attribute(&ev, None, &late, &rules(false));
        assert_eq!(metal[0].kind, CauseKind::Preemption);
        assert_eq!(metal[0].task.as_deref(), Some("spin"));
    }

    #[test]
    fn time_before_lost_events_is_unexplained_not_a_gap() {
        let mut ev = events(&[
            "spin-3 [000] d..2. 40.000000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=spin next_pid=3 next_prio=120",
            "spin-3 [000] d..2. 40.030000: sched_switch: prev_comm=spin prev_pid=3 prev_prio=120 prev_state=S ==> next_comm=w next_pid=7 next_prio=9",
        ]);
        ev.insert(
            1,
            Event {
                cpu: 0,
                ts_ns: 40_029_999_999,
                current_pid: -1,
                kind: Kind::Lost(500),
            },
        );
        let late = Late {
            tid: 7,
            deadline_ns: 40_010_000_000,
            woke_ns: 40_030_000_000,
            ..Late::default()
        };
        let rules = rules(true);
        let causes = attribute(&ev, None, &late, &rules);
        assert!(
            causes.iter().all(|c| c.kind == CauseKind::Unexplained),
            "{causes:?}"
        );
        assert_eq!(
            causes.iter().map(|c| c.duration_ns).sum::<u64>(),
            20_000_000
        );
        assert!(causes[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("500 trace events lost"));

        // Another CPU's event between this CPU's last one and the loss mark says nothing of
        // this CPU: still all lost.
        let mut mixed = ev.clone();
        mixed.insert(
            1,
            events(&[
                "peer-5 [001] d..2. 40.020000: sched_waking: comm=x pid=9 prio=120 target_cpu=001",
            ])
            .remove(0),
        );
        let causes = attribute(&mixed, None, &late, &rules);
        assert!(
            causes.iter().all(|c| c.kind == CauseKind::Unexplained),
            "{causes:?}"
        );
        assert!(causes[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("500 trace events lost"));
        assert_eq!(causes[0].duration_ns, 19_999_999);

        // The loss is the window's first event: the whole of it is lost, not "before the
        // first traced event".
        let causes = attribute(&ev[1..], None, &late, &rules);
        assert_eq!(causes.len(), 2, "{causes:?}");
        assert_eq!(causes[0].duration_ns, 19_999_999);
        assert!(causes[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("500 trace events lost"));
    }
}
