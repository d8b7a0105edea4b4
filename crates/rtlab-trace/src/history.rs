//! The reader's per-CPU flight recorder: the last second of each traced CPU's events, and
//! the windows cut from it for one outlier.

use crate::event::{Event, Kind, Task};
use crate::explain;
use std::collections::VecDeque;

/// Keeps this much history per CPU.
const RETENTION_NS: u64 = 1_000_000_000;
/// And at most this many events per CPU.
const MAX_EVENTS: usize = 65_536;

/// Per-CPU history.
#[derive(Debug, Default)]
pub(crate) struct History {
    pub(crate) events: VecDeque<Event>,
    pub(crate) raw: VecDeque<String>,
    /// The task current before the oldest kept event.
    pub(crate) base: Option<Task>,
    pub(crate) newest_ns: u64,
    /// The latest scheduler ticks' times (for the tick's grid).
    pub(crate) ticks: VecDeque<u64>,
}

impl History {
    pub(crate) fn push(&mut self, e: Event, raw: Option<String>) {
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
        // A second of history, or fewer events on a CPU that produces more than MAX_EVENTS a
        // second (the windows explained reach 20 ms before a deadline): bounded either way.
        while self.events.front().is_some_and(|f| {
            f.ts_ns + RETENTION_NS < self.newest_ns || self.events.len() > MAX_EVENTS
        }) {
            if let Some(old) = self.events.pop_front() {
                if let Kind::Switch { next, .. } = old.kind {
                    self.base = Some(next);
                }
            }
            self.raw.pop_front();
        }
        // Give back what a burst took (a watch runs for days).
        if self.events.capacity() > 4 * self.events.len().max(4096) {
            self.events.shrink_to(2 * self.events.len());
            self.raw.shrink_to(2 * self.raw.len());
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
    let comm = rtlab_sys::procfs::task_comm(pid).unwrap_or_else(|| "<...>".into());
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
pub(crate) fn window_events(
    histories: &[History],
    from: u64,
    to: u64,
) -> Vec<(Event, Option<String>)> {
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
