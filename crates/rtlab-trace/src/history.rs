//! The reader's per-CPU flight recorder: the last second of each traced CPU's events, and
//! the windows cut from it for one outlier.

use crate::event::{Event, Kind, Task};
use crate::explain;
use std::collections::VecDeque;

/// Keeps this much history per CPU.
const RETENTION_NS: u64 = 1_000_000_000;
/// And at most this many events per CPU, beyond what the explanations still pending need
/// and the newest [`RECENT_NS`] (a CPU busy with a switch storm makes hundreds of thousands
/// a second).
const MAX_EVENTS: usize = 65_536;
/// Kept whatever their count: a request sent now may reach this far back.
const RECENT_NS: u64 = 200_000_000;
/// Never more than this many events per CPU, even for an explanation still pending (about
/// 100 MB; reached only when the reader is seconds behind a CPU that makes hundreds of
/// thousands of events a second). What this cuts is said in the explanation it concerns.
const HARD_CAP_EVENTS: usize = 1 << 20;

/// Per-CPU history.
#[derive(Debug, Default)]
pub(crate) struct History {
    pub(crate) events: VecDeque<Event>,
    /// The task current before the oldest kept event.
    pub(crate) base: Option<Task>,
    pub(crate) newest_ns: u64,
    /// The latest scheduler ticks' times (for the tick's grid).
    pub(crate) ticks: VecDeque<u64>,
    /// Events of the drain under way, merged in at its end ([`History::settle`]).
    pending: Vec<Event>,
    /// Where the oldest events were dropped: the newest of them, and its age then. None: nothing dropped yet (the history starts where the trace
    /// does).
    pub(crate) cut: Option<crate::explain::Cut>,
}

impl History {
    /// The scheduler tick's grid on this CPU, from its latest ticks.
    pub(crate) fn tick_grid(&self) -> Option<crate::tick::Tick> {
        explain::tick_grid(&self.ticks.iter().copied().collect::<Vec<u64>>())
    }

    pub(crate) fn push(&mut self, e: Event) {
        self.newest_ns = self.newest_ns.max(e.ts_ns);
        if let Kind::HrtimerEntry { function, .. } = &e.kind {
            if explain::is_tick(function) {
                if self.ticks.len() >= 64 {
                    self.ticks.pop_front();
                }
                self.ticks.push_back(e.ts_ns);
            }
        }
        self.pending.push(e);
    }

    /// Merges the events of a drain in, in time order. They come a ring at a time (the
    /// watched processes' ring, then every task's, which may lag it), and the eBPF recorder
    /// can store an NMI's or IRQ's record between another event's timestamp and its slot:
    /// one sort and one merge a drain, not an insertion in the middle per event (under a
    /// storm of switches that moved more memory than anything else the reader did).
    pub(crate) fn settle(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut batch = std::mem::take(&mut self.pending);
        let came = batch.len();
        batch.sort_by_key(|e| e.ts_ns);
        let first = batch[0].ts_ns;
        let at = self.events.partition_point(|x| x.ts_ns <= first);
        if at == self.events.len() {
            self.events.extend(batch.drain(..));
        } else {
            // The kept events after the batch's first go back in merged (a few, usually).
            let tail: Vec<Event> = self.events.drain(at..).collect();
            let (mut a, mut b) = (tail.into_iter().peekable(), batch.drain(..).peekable());
            loop {
                let take_a = match (a.peek(), b.peek()) {
                    (Some(x), Some(y)) => x.ts_ns <= y.ts_ns,
                    (Some(_), None) => true,
                    (None, Some(_)) => false,
                    (None, None) => break,
                };
                let next = if take_a { a.next() } else { b.next() };
                self.events.extend(next);
            }
        }
        // Its room is kept for the next drain, but not what a burst took.
        if batch.capacity() > 4 * came.max(4096) {
            batch.shrink_to(2 * came.max(4096));
        }
        self.pending = batch;
    }

    /// Drops the oldest events: those past a second, or past [`MAX_EVENTS`] and older than
    /// [`RECENT_NS`], but none from `keep_from_ns` on (the earliest window an explanation
    /// still pending needs) unless past [`HARD_CAP_EVENTS`]. Sized by time, not by count: a
    /// reader that fell behind drains a burst of events at once, and a count alone dropped
    /// the windows of the outliers it had not explained yet. `now_ns` is CLOCK_MONOTONIC, as
    /// the events.
    pub(crate) fn trim(&mut self, keep_from_ns: u64, now_ns: u64) {
        let recent = self.newest_ns.saturating_sub(RECENT_NS);
        let mut dropped = None;
        while self.events.front().is_some_and(|f| {
            let old = f.ts_ns + RETENTION_NS < self.newest_ns
                || (self.events.len() > MAX_EVENTS && f.ts_ns < recent);
            (old && f.ts_ns < keep_from_ns) || self.events.len() > HARD_CAP_EVENTS
        }) {
            if let Some(old) = self.events.pop_front() {
                dropped = Some(old.ts_ns);
                if let Kind::Switch { next, .. } = old.kind {
                    self.base = Some(next);
                }
            }
        }
        if let Some(through_ns) = dropped {
            self.cut = Some(crate::explain::Cut {
                through_ns,
                age_ns: now_ns.saturating_sub(through_ns),
            });
        }
        // Give back what a burst took (a watch runs for days).
        if self.events.capacity() > 4 * self.events.len().max(4096) {
            self.events.shrink_to(2 * self.events.len());
        }
    }
}

/// The wake-ups of `tid` (wakings, its timer's expiry) on the other CPUs within `[from, to]` (the waker's side of a
/// cross-CPU wakeup), in time order.
pub(crate) fn wakings_elsewhere(
    histories: &[History],
    cpu: u16,
    tid: i64,
    from: u64,
    to: u64,
) -> Vec<Event> {
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
pub(crate) fn find_task(histories: &[History], pid: i64) -> Task {
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
    let comm = rtlab_sys::procfs::task_comm(pid).unwrap_or_else(|| crate::event::ENDED_TASK.into());
    let prio = rtlab_sys::procfs::task_kernel_prio(pid).unwrap_or(120);
    Task {
        comm: comm.into(),
        pid,
        prio,
    }
}

/// A CPU's events from `from` on, and the task current before the first of them (the base,
/// updated by the switches before it).
pub(crate) fn window_of(h: &History, from: u64) -> (Option<Task>, Vec<Event>) {
    window_from(h, h.events.partition_point(|e| e.ts_ns < from))
}

/// A CPU's events from its `start`-th kept on, and the task current before them.
fn window_from(h: &History, start: usize) -> (Option<Task>, Vec<Event>) {
    let mut base = h.base.clone();
    for e in h.events.range(..start) {
        if let Kind::Switch { next, .. } = &e.kind {
            base = Some(next.clone());
        }
    }
    (base, h.events.range(start..).cloned().collect())
}

/// The late thread's own CPU's window from `from` (its base task, and its events) with its
/// wakings seen on other CPUs (`elsewhere`) merged in.
pub(crate) fn late_window(
    h: &History,
    from: u64,
    elsewhere: &[Event],
) -> (Option<Task>, Vec<Event>) {
    // From the CPU's last event before `from`: a CPU silent from before the window until
    // past the deadline was silent (a stretch like any other), the trace had begun.
    let start = h.events.partition_point(|e| e.ts_ns < from);
    let (base, mut window) = window_from(h, start.saturating_sub(1));
    if !elsewhere.is_empty() {
        window.extend(elsewhere.iter().cloned());
        window.sort_by_key(|e| e.ts_ns);
    }
    (base, window)
}

/// Who woke thread `r.tid` last between its deadline and its wake (for a lock wait: the
/// holder), and on which CPU: on its own CPU's history, or among its `elsewhere` wakings.
pub(crate) fn last_waker(
    histories: &[History],
    r: &crate::request::Request,
    elsewhere: &[Event],
) -> Option<(i64, u16)> {
    histories
        .get(r.cpu as usize)
        .into_iter()
        .flat_map(|h| {
            let start = h.events.partition_point(|e| e.ts_ns < r.deadline_ns);
            h.events.range(start..).take_while(|e| e.ts_ns <= r.woke_ns)
        })
        .chain(elsewhere.iter().filter(|e| e.ts_ns >= r.deadline_ns))
        .filter(|e| e.kind.woken().is_some_and(|t| t.pid == r.tid))
        .max_by_key(|e| e.ts_ns)
        .map(|e| (e.current_pid, e.cpu))
        .filter(|&(p, _)| p > 0 && p != r.tid)
}

/// What the CPU of a peer (`pid`, which a blocked thread waited for) did in `[from, to]`:
/// its window, its wakings elsewhere, and the losses of every other CPU (which may have taken
/// the peer's wakeup with them), in time order.
pub(crate) fn peer_window(
    histories: &[History],
    (pid, cpu): (i64, u16),
    from: u64,
    to: u64,
) -> Option<explain::Peer> {
    let h = histories.get(cpu as usize)?;
    let (base, mut events) = window_of(h, from);
    events.extend(wakings_elsewhere(histories, cpu, pid, from, to));
    events.extend(
        histories
            .iter()
            .enumerate()
            .filter(|(c, _)| *c != cpu as usize)
            .flat_map(|(_, h)| h.events.iter())
            .filter(|e| e.kind.lost().is_some() && e.ts_ns >= from && e.ts_ns <= to)
            .cloned(),
    );
    events.sort_by_key(|e| e.ts_ns);
    Some(explain::Peer {
        cpu,
        events,
        base,
        tick: h.tick_grid(),
    })
}

/// Every traced CPU's events in `[from, to]`, in time order.
pub(crate) fn window_events(histories: &[History], from: u64, to: u64) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    for h in histories {
        let start = h.events.partition_point(|e| e.ts_ns < from);
        let end = h.events.partition_point(|e| e.ts_ns <= to).max(start);
        out.extend(h.events.range(start..end).cloned());
    }
    out.sort_by_key(|e| e.ts_ns);
    out
}

/// The stack recorded with `events[i]` (the event right after it, at the same time), if
/// it is `task`'s.
fn stack_after(events: &[&Event], i: usize, task: i64) -> Option<u32> {
    let next = events.get(i + 1)?;
    match &next.kind {
        Kind::Stack { task: t, id } if *t == task && next.ts_ns == events[i].ts_ns => Some(*id),
        _ => None,
    }
}

/// The kernel stacks of the delay `r` asked about, as the recorder kept them (`resolve`
/// turns a stack's key into its frames): the late thread's, at its last switch away before
/// the delay began, the waker's at the wakeup, and the culprit's (`culprit`, the task of
/// the main cause, else the task that held the CPU last) as it gave the CPU back.
pub(crate) fn stacks_of(
    r: &crate::request::Request,
    culprit: Option<i64>,
    histories: &[History],
    started_ns: u64,
    resolve: &dyn Fn(u32) -> Option<Vec<String>>,
) -> Vec<rtlab_stats::result::KernelStack> {
    use rtlab_stats::result::{KernelStack, StackRole};
    let stack = |role, task: &Task, at_ns: u64, id: u32| {
        resolve(id).map(|frames| KernelStack {
            role,
            task: task.comm.to_string(),
            pid: task.pid,
            at_ns: at_ns.saturating_sub(started_ns),
            frames,
        })
    };
    let mut out = Vec::new();
    let ran = r.running_ns.unwrap_or(r.woke_ns);
    // The late thread's switch away before its delay began, on whichever CPU it was.
    let late = histories
        .iter()
        .flat_map(|h| {
            let end = h.events.partition_point(|e| e.ts_ns <= r.deadline_ns);
            h.events.range(..end).rev().find_map(|e| match &e.kind {
                Kind::Stack { task, id } if *task == r.tid => Some((e.ts_ns, *id)),
                _ => None,
            })
        })
        .max_by_key(|&(ts, _)| ts);
    if let Some((ts, id)) = late {
        let task = find_task(histories, r.tid);
        out.extend(stack(StackRole::Late, &task, ts, id));
    }
    // The task current where it was woken (for a timer: the code its interrupt stopped).
    let waking = histories
        .iter()
        .flat_map(|h| {
            let from = h.events.partition_point(|e| e.ts_ns < r.deadline_ns);
            let to = h.events.partition_point(|e| e.ts_ns <= ran);
            let events: Vec<&Event> = h.events.range(from..to).collect();
            let i = events
                .iter()
                .position(|e| matches!(&e.kind, Kind::Waking { task, .. } if task.pid == r.tid))?;
            let waker = events[i].current_pid;
            stack_after(&events, i, waker).map(|id| (events[i].ts_ns, waker, id))
        })
        .min_by_key(|&(ts, _, _)| ts);
    if let Some((ts, waker, id)) = waking {
        let task = find_task(histories, waker);
        out.extend(stack(StackRole::Waker, &task, ts, id));
    }
    // The culprit's switch away within the delay (the last; else the last switch that gave
    // the thread its CPU), and the stack that came with it. (To the delay's end: a thread
    // may get its CPU and lose it again before its wait returns.)
    if let Some(h) = histories.get(r.cpu as usize) {
        let from = h.events.partition_point(|e| e.ts_ns < r.deadline_ns);
        let to = h.events.partition_point(|e| e.ts_ns <= r.woke_ns);
        let events: Vec<&Event> = h.events.range(from..to).collect();
        let away = |who: &dyn Fn(&Task, &Task) -> bool| {
            events.iter().rposition(|e| {
                matches!(&e.kind, Kind::Switch { prev, next, .. } if prev.pid != 0 && who(prev, next))
            })
        };
        let switch = culprit
            .filter(|&c| c != r.tid && c > 0)
            .and_then(|c| away(&|prev, _| prev.pid == c))
            .or_else(|| away(&|_, next| next.pid == r.tid));
        if let Some(i) = switch {
            if let Kind::Switch { prev, .. } = &events[i].kind {
                if let Some(id) = stack_after(&events, i, prev.pid) {
                    out.extend(stack(StackRole::RanInstead, prev, events[i].ts_ns, id));
                }
            }
        }
    }
    out
}

/// How far before a delay a JVM's safepoint may have begun and still be found.
pub(crate) const STOP_LEAD_NS: u64 = 900_000_000;

/// The late thread's delay `r` as its JVM's safepoints overlapping it made it (from
/// HotSpot's events in the history; none for a thread of no JVM): a cause each, first. The
/// kernel's causes (what its CPU did while the JVM held the thread: the collector's threads,
/// others) are named in it and shrunk in proportion to the rest of the delay, so that the
/// causes still add up to the delay.
pub(crate) fn with_jvm_stops(
    o: &mut rtlab_stats::result::Outlier,
    r: &crate::request::Request,
    histories: &[History],
    logged: &crate::watcher::LoggedStops,
) {
    let from = r.deadline_ns.saturating_sub(STOP_LEAD_NS);
    // Its process, as /proc says, else (ended before this is explained, as at the run's
    // end) as its own JVM events said.
    let own = || {
        histories.iter().find_map(|h| {
            let a = h.events.partition_point(|e| e.ts_ns < from);
            h.events.range(a..).find_map(|e| match &e.kind {
                Kind::Jvm { process, .. } if e.current_pid == r.tid => Some(*process),
                _ => None,
            })
        })
    };
    let Some(process) = rtlab_sys::procfs::process_of(r.tid).or_else(own) else {
        return apply_stops(o, r, logged.stops.clone(), logged.vm_thread, histories);
    };
    let mut events: Vec<&Event> = histories
        .iter()
        .flat_map(|h| {
            let a = h.events.partition_point(|e| e.ts_ns < from);
            let b = h.events.partition_point(|e| e.ts_ns <= r.woke_ns);
            h.events.range(a..b)
        })
        .filter(|e| matches!(&e.kind, Kind::Jvm { process: p, .. } if *p == process))
        .collect();
    events.sort_by_key(|e| e.ts_ns);
    let mut jvm = crate::safepoint::Safepoints::default();
    let mut stops = Vec::new();
    let mut vm_thread = None;
    for e in &events {
        if matches!(
            &e.kind,
            Kind::Jvm {
                probe: crate::event::JvmProbe::SafepointBegin,
                ..
            }
        ) {
            vm_thread = Some(e.current_pid);
        }
        stops.extend(jvm.step(e));
    }
    // One still in progress when the delay ended.
    stops.extend(jvm.open_at(process, r.woke_ns));
    // Those its own log told of (where it has no probes: then none of the above).
    stops.extend(logged.stops.iter().cloned());
    apply_stops(o, r, stops, vm_thread.or(logged.vm_thread), histories);
}

/// Names `stops` (a JVM's safepoints) in the causes of delay `r` (see [`with_jvm_stops`]),
/// the JVM's `vm_thread` as the task.
fn apply_stops(
    o: &mut rtlab_stats::result::Outlier,
    r: &crate::request::Request,
    stops: Vec<crate::safepoint::Stop>,
    vm_thread: Option<i64>,
    histories: &[History],
) {
    use rtlab_stats::result::{Cause, CauseKind, ReasonCode};
    if stops.is_empty() {
        return;
    }
    let vm_thread = vm_thread.map(|t| find_task(histories, t));
    // What ran on its CPU meanwhile, by task (rtlab's own threads as one, the observer).
    let mut ran: Vec<(&str, u64)> = Vec::new();
    for c in &o.causes {
        let Some(task) = c.task.as_deref() else {
            continue;
        };
        // rtlab's own threads are the observer, never named as a cause.
        let ours = c
            .pid
            .is_some_and(|p| p > 0 && rtlab_sys::process::thread_in_this_process(p as u32));
        let task = match ours && crate::observer::is_observer_thread(task) {
            true => "the observer (rtlab itself)",
            false => task,
        };
        match ran.iter_mut().find(|(t, _)| *t == task) {
            Some(r) => r.1 += c.duration_ns,
            None => ran.push((task, c.duration_ns)),
        }
    }
    ran.sort_by_key(|r| std::cmp::Reverse(r.1));
    let meanwhile: Vec<String> = ran
        .iter()
        .take(3)
        .map(|(task, ns)| format!("{task} {}", rtlab_stats::Nanos(*ns)))
        .collect();
    let mut added = Vec::new();
    for s in stops {
        let overlap = s
            .end_ns
            .min(r.woke_ns)
            .saturating_sub(s.begin_ns.max(r.deadline_ns));
        if overlap == 0 {
            continue;
        }
        let reach = s.reached_ns.map(|t| t.saturating_sub(s.begin_ns));
        let detail = format!(
            "JVM safepoint: {}{} ({}at safepoint {}{})",
            s.operation.as_deref().unwrap_or("VM operation unnamed"),
            s.cause
                .as_deref()
                .map_or(String::new(), |c| format!(", {c}")),
            reach.map_or(String::new(), |r| format!(
                "reaching {}, ",
                rtlab_stats::Nanos(r)
            )),
            rtlab_stats::Nanos(s.end_ns.saturating_sub(s.reached_ns.unwrap_or(s.begin_ns))),
            match meanwhile.is_empty() {
                true => String::new(),
                false => format!("; on its CPU meanwhile: {}", meanwhile.join(", ")),
            }
        );
        added.push(Cause {
            kind: CauseKind::Safepoint,
            duration_ns: overlap,
            task: vm_thread.as_ref().map(|t| t.comm.to_string()),
            pid: vm_thread.as_ref().map(|t| t.pid),
            prio: vm_thread.as_ref().map(|t| t.prio),
            detail: Some(detail),
            reason: Some(ReasonCode::JvmSafepoint),
            stall_ns: None,
        });
    }
    let stopped: u64 = added.iter().map(|c| c.duration_ns).sum();
    // Its sleep after its wakeup (at the safepoint's barrier) is the stop's own time.
    let mut covered = stopped;
    for c in o.causes.iter_mut() {
        if c.reason == Some(ReasonCode::AsleepAgain) {
            let part = c.duration_ns.min(covered);
            c.duration_ns -= part;
            covered -= part;
        }
    }
    let rest = o.latency_ns.saturating_sub(stopped);
    let kernel: u64 = o.causes.iter().map(|c| c.duration_ns).sum();
    if kernel > rest {
        for c in o.causes.iter_mut() {
            c.duration_ns = (c.duration_ns as u128 * rest as u128 / kernel as u128) as u64;
        }
    }
    o.causes.retain(|c| c.duration_ns > 0);
    o.causes.extend(added);
    o.causes.sort_by_key(|c| std::cmp::Reverse(c.duration_ns));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ts_ns: u64, mark: &str) -> Event {
        Event {
            cpu: 0,
            ts_ns,
            current_pid: 0,
            kind: Kind::Marker(mark.into()),
        }
    }

    fn marks(h: &History) -> Vec<(u64, String)> {
        h.events
            .iter()
            .map(|e| match &e.kind {
                Kind::Marker(m) => (e.ts_ns, m.clone()),
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn a_task_no_event_or_proc_entry_names_is_an_ended_task_never_dots() {
        // A thread that ran and ended: no switch in the history names it, /proc has no
        // entry for it any more.
        let tid = std::thread::spawn(rtlab_sys::futex::current_tid)
            .join()
            .unwrap() as i64;
        // Joined once it ran its last code; the kernel lets its /proc entry go a moment
        // later (longer on a busy machine).
        let gone_by = rtlab_sys::time::monotonic_now_ns() + 2_000_000_000;
        while std::path::Path::new(&format!("/proc/self/task/{tid}")).exists()
            && rtlab_sys::time::monotonic_now_ns() < gone_by
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let t = find_task(&[History::default()], tid);
        assert_eq!((&*t.comm, t.pid), (crate::event::ENDED_TASK, tid));
        // One that lives is named by /proc.
        let me = rtlab_sys::futex::current_tid() as i64;
        let t = find_task(&[History::default()], me);
        assert_eq!(Some(t.comm.to_string()), rtlab_sys::procfs::task_comm(me));
    }

    #[test]
    fn a_drains_events_are_merged_in_time_order_those_kept_first_at_equal_times() {
        let mut h = History::default();
        for (ts, m) in [(10, "a"), (20, "b"), (30, "c")] {
            h.push(at(ts, m));
        }
        assert!(h.events.is_empty(), "not before the drain is over");
        h.settle();
        // The next drain: the watched processes' ring first (25, 40), then every task's,
        // behind it (20, 35), with an IRQ's record stored after a later one (33 after 35).
        for (ts, m) in [(25, "d"), (40, "e"), (20, "f"), (35, "g"), (33, "h")] {
            h.push(at(ts, m));
        }
        h.settle();
        let want = [
            (10, "a"),
            (20, "b"),
            (20, "f"),
            (25, "d"),
            (30, "c"),
            (33, "h"),
            (35, "g"),
            (40, "e"),
        ];
        let want: Vec<(u64, String)> = want.iter().map(|&(t, m)| (t, m.to_string())).collect();
        assert_eq!(marks(&h), want);
        assert_eq!(h.newest_ns, 40);
        // Older than the retention: dropped at the trim after the drain, and said.
        h.push(at(40 + RETENTION_NS + 1, "i"));
        h.settle();
        assert_eq!(marks(&h).len(), 9, "not at the merge");
        h.trim(u64::MAX, 50 + RETENTION_NS);
        assert_eq!(marks(&h).len(), 1);
        assert_eq!(
            h.cut,
            Some(crate::explain::Cut {
                through_ns: 40,
                age_ns: 10 + RETENTION_NS
            })
        );
    }

    #[test]
    fn a_burst_drained_at_once_keeps_the_windows_still_pending_whatever_its_count() {
        // The reader fell behind: one drain brings 3 * MAX_EVENTS events of one CPU, 10 us
        // apart (2 s). A request pending from 0.5 s keeps everything from there; without one,
        // past the count and older than RECENT_NS goes.
        let burst = |h: &mut History| {
            for i in 0..3 * MAX_EVENTS as u64 {
                h.push(at(1 + i * 10_000, "x"));
            }
            h.settle();
        };
        let mut h = History::default();
        burst(&mut h);
        let newest = h.newest_ns;
        h.trim(500_000_000, newest);
        assert_eq!(h.events.front().unwrap().ts_ns, 500_000_001);
        assert!(h.cut.unwrap().through_ns < 500_000_000);
        let mut h = History::default();
        burst(&mut h);
        h.trim(u64::MAX, newest);
        assert_eq!(h.events.len(), MAX_EVENTS);
    }

    #[test]
    fn a_thread_ended_before_its_delay_is_explained_still_has_its_safepoint_named() {
        // A JVM (process 999 999 999, no such one) that ended at the run's end: its thread's
        // own probes say which process it was, and its delay overlapping the safepoint is
        // named by it.
        let (tid, process) = (999_999_999, 999_999_999);
        let jvm = |ts, probe, current_pid| Event {
            cpu: 0,
            ts_ns: ts,
            current_pid,
            kind: Kind::Jvm {
                probe,
                process,
                name: None,
                time_ns: None,
            },
        };
        use crate::event::JvmProbe::*;
        use rtlab_stats::result::{Cause, CauseKind, ReasonCode};
        let cause = |kind, duration_ns, reason| Cause {
            kind,
            duration_ns,
            task: None,
            pid: None,
            prio: None,
            detail: None,
            reason: Some(reason),
            stall_ns: None,
        };
        let mut h = History::default();
        for e in [
            jvm(1_000, ParkBegin, tid),
            jvm(2_000, SafepointBegin, 7),
            jvm(50_000_000, SafepointEnd, 7),
            jvm(50_010_000, ParkEnd, tid),
        ] {
            h.push(e);
        }
        h.settle();
        let r = crate::request::Request {
            series: 0,
            cpu: 0,
            tid,
            deadline_ns: 1_000_000,
            woke_ns: 50_010_000,
            running_ns: None,
            wait: crate::explain::Wait::Timer,
            slack_ns: 0,
        };
        let mut o = rtlab_stats::result::Outlier {
            series: "t".into(),
            at_ns: 0,
            latency_ns: 49_010_000,
            cpu: None,
            until_running_ns: None,
            // As the kernel's events tell it: asleep again after its timer's wakeup (at the
            // safepoint's barrier), then its way out of idle.
            causes: vec![
                cause(CauseKind::Blocking, 48_900_000, ReasonCode::AsleepAgain),
                cause(
                    CauseKind::IdleExit,
                    110_000,
                    ReasonCode::IdleExitAfterWakeup,
                ),
            ],
            stacks: Vec::new(),
        };
        with_jvm_stops(&mut o, &r, std::slice::from_ref(&h), &Default::default());
        // The sleep is the stop's; what is left of the delay outside it, the way out of idle.
        let kinds: Vec<(CauseKind, u64)> =
            o.causes.iter().map(|c| (c.kind, c.duration_ns)).collect();
        assert_eq!(
            kinds,
            vec![
                (CauseKind::Safepoint, 49_000_000),
                (CauseKind::IdleExit, 10_000)
            ]
        );
        let named = o
            .causes
            .iter()
            .find(|c| c.kind == rtlab_stats::result::CauseKind::Safepoint);
        assert_eq!(
            named.map(|c| c.duration_ns),
            Some(49_000_000),
            "{:?}",
            o.causes
        );
    }
}
