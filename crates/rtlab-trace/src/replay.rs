//! Replaying a CPU's events: what ran on it, which interrupts were open, and where one
//! followed task stood (woken, running, asleep). Attribution, following a peer and finding
//! the stretches known beforehand all step these same state machines through the events,
//! so each event means the same thing to all of them.

use crate::event::{Event, Kind, Task};
use rtlab_stats::result::CauseKind;

/// An interrupt open on a CPU, by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Handler {
    /// A hardware IRQ handler or an IRQ vector.
    Irq(String),
    /// A softirq.
    Softirq(String),
}

impl Handler {
    pub fn kind_and_name(&self) -> (CauseKind, &str) {
        match self {
            Handler::Irq(n) => (CauseKind::Irq, n),
            Handler::Softirq(n) => (CauseKind::Softirq, n),
        }
    }
}

/// One CPU, replayed from its events.
#[derive(Debug, Clone)]
pub struct Cpu {
    /// Which CPU (events of others leave it unchanged).
    pub cpu: u16,
    /// The task on it; None when not known (no switch seen yet, or events lost since).
    pub current: Option<Task>,
    /// Interrupt handlers running on it, innermost last.
    pub handlers: Vec<Handler>,
    /// Trace events lost on it since the task on it was last known (None: none lost since,
    /// or no switch seen yet).
    pub lost: Option<u64>,
}

impl Cpu {
    /// `cpu` with `base` current before the first event.
    pub fn new(cpu: u16, base: Option<&Task>) -> Cpu {
        Cpu {
            cpu,
            current: base.cloned(),
            handlers: Vec::new(),
            lost: None,
        }
    }

    /// Whether a task other than idle runs (None: not known).
    pub fn busy(&self) -> Option<bool> {
        self.current.as_ref().map(|t| !t.is_idle())
    }

    /// Applies one event (of any CPU; only this CPU's change it).
    pub fn step(&mut self, e: &Event) {
        if e.cpu != self.cpu {
            return;
        }
        match &e.kind {
            Kind::Switch { next, .. } => {
                self.current = Some(next.clone());
                self.lost = None;
                // A CPU switches tasks only outside interrupt handlers: a handler still open
                // here lost its exit (or its exit was ordered after the switch), and left
                // open it would take the next task's whole run. (On PREEMPT_RT a softirq can
                // be preempted: the rest of it then counts to the task that runs it.)
                self.handlers.clear();
            }
            Kind::Lost(n) | Kind::LostOthers(n) => {
                // Who runs now is unknown until the next switch.
                self.current = None;
                self.handlers.clear();
                self.lost = Some(self.lost.unwrap_or(0) + n);
            }
            Kind::IrqEntry { irq, name } => self
                .handlers
                .push(Handler::Irq(format!("IRQ {irq} {name}"))),
            Kind::VectorEntry { name } => self.handlers.push(Handler::Irq(name.clone())),
            Kind::SoftirqEntry { name } => self.handlers.push(Handler::Softirq(name.clone())),
            Kind::IrqExit | Kind::VectorExit | Kind::SoftirqExit => {
                self.handlers.pop();
            }
            _ => {}
        }
    }
}

/// `events` with the switches `cpu`'s replay did not see put back. A switch names the task
/// it leaves, which is the truth about who ran up to it; when that is not the task the replay
/// believed current (the switch to it was lost without a loss mark, or ordered out of the
/// window), a switch from the believed task to it is inserted where the events put it: just
/// after its last wakeup since the believed task's switch-in (a woken task of higher priority
/// runs at once), else just after that switch-in. Without this, the whole stretch went to a
/// task that was no longer there (seen: a hog's 2.3 ms run given to a SCHED_OTHER thread as a
/// non-preemptible section, 2 of 20 soak runs). Events are returned unchanged when consistent.
pub fn repair_switches(events: &[Event], cpu: u16, base: Option<&Task>) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::with_capacity(events.len());
    let mut current = base.cloned();
    // Where in `out` the believed current was switched in (None: before the first event).
    let mut since: Option<usize> = None;
    for e in events {
        if e.cpu == cpu {
            match &e.kind {
                Kind::Switch { prev, next, .. } => {
                    if let Some(believed) = current.as_ref().filter(|c| c.pid != prev.pid) {
                        let from = since.map_or(0, |i| i + 1);
                        let woke = out[from..]
                            .iter()
                            .rposition(|x| x.kind.woken().is_some_and(|t| t.pid == prev.pid))
                            .map(|i| from + i + 1);
                        let at = woke.unwrap_or(from);
                        // At the window's start: the first event's time (the base was
                        // believed from before it).
                        let ts = match at {
                            0 => out.first().map_or(e.ts_ns, |f| f.ts_ns),
                            _ => out[at - 1].ts_ns,
                        };
                        out.insert(
                            at,
                            Event {
                                cpu,
                                ts_ns: ts,
                                current_pid: believed.pid,
                                kind: Kind::Switch {
                                    prev: believed.clone(),
                                    prev_state: crate::event::TaskState::RUNNING,
                                    next: prev.clone(),
                                },
                            },
                        );
                    }
                    current = Some(next.clone());
                    since = Some(out.len());
                }
                Kind::Lost(_) | Kind::LostOthers(_) => {
                    current = None;
                    since = Some(out.len());
                }
                _ => {}
            }
        }
        out.push(e.clone());
    }
    out
}

/// What an event meant for a followed task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moved {
    /// Nothing.
    Nothing,
    /// Woken (on `from_cpu`: a `sched_waking`, or `by_timer` the expiry of its sleep timer),
    /// with its priority then.
    Woken {
        from_cpu: u16,
        prio: i64,
        by_timer: bool,
    },
    /// Switched out on its CPU: `asleep` when it blocked (not preempted, and no wakeup since it
    /// last got the CPU: the waker traces a wakeup before the task is off its CPU, so a
    /// switch-out asleep after it is not a sleep).
    /// `preempted`: switched out runnable (its state says so), not merely woken already.
    SwitchedOut {
        asleep: bool,
        preempted: bool,
        prio: i64,
    },
    /// Switched in on its CPU.
    SwitchedIn,
}

/// A task followed through the events of its CPU and its wakings on others.
#[derive(Debug, Clone)]
pub struct Follow {
    /// The task (TID).
    pub tid: i64,
    /// Its CPU (switches on others are not its own); None: wherever it runs (a watch
    /// follows a thread from CPU to CPU).
    pub cpu: Option<u16>,
    /// Runnable (woken or preempted) rather than asleep; None when not known (no event of
    /// it yet, or events lost since, which may have taken its wakeup with them).
    pub runnable: Option<bool>,
    /// Woken since it last got the CPU.
    woken_since_in: bool,
}

impl Follow {
    pub fn new(tid: i64, cpu: u16) -> Follow {
        Follow {
            cpu: Some(cpu),
            ..Follow::anywhere(tid)
        }
    }

    /// Following `tid` on every CPU.
    pub fn anywhere(tid: i64) -> Follow {
        Follow {
            tid,
            cpu: None,
            runnable: None,
            woken_since_in: false,
        }
    }

    /// Applies one event.
    pub fn step(&mut self, e: &Event) -> Moved {
        match &e.kind {
            Kind::Waking { task, .. }
            | Kind::HrtimerEntry {
                task: Some(task), ..
            } if task.pid == self.tid => {
                self.runnable = Some(true);
                self.woken_since_in = true;
                Moved::Woken {
                    from_cpu: e.cpu,
                    prio: task.prio,
                    by_timer: matches!(e.kind, Kind::HrtimerEntry { .. }),
                }
            }
            Kind::Lost(_) => {
                self.runnable = None;
                Moved::Nothing
            }
            Kind::Switch {
                prev,
                prev_state,
                next,
            } if self.cpu.is_none_or(|c| c == e.cpu) => {
                if prev.pid == self.tid {
                    let preempted = prev_state.is_runnable();
                    let asleep = !preempted && !self.woken_since_in;
                    self.runnable = Some(!asleep);
                    Moved::SwitchedOut {
                        asleep,
                        preempted,
                        prio: prev.prio,
                    }
                } else if next.pid == self.tid {
                    self.woken_since_in = false;
                    Moved::SwitchedIn
                } else {
                    Moved::Nothing
                }
            }
            _ => Moved::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::TaskState;

    #[test]
    fn an_unseen_switch_is_put_back_after_the_wakeup_of_the_task_switched_away_from() {
        let task = |pid: i64| Task {
            comm: format!("t{pid}").into(),
            pid,
            prio: 0,
        };
        let at = |ts_ns: u64, kind: Kind| Event {
            cpu: 0,
            ts_ns,
            current_pid: 0,
            kind,
        };
        let switch = |ts, from, to| {
            at(
                ts,
                Kind::Switch {
                    prev: task(from),
                    prev_state: TaskState::RUNNING,
                    next: task(to),
                },
            )
        };
        let waking = |ts, pid| {
            at(
                ts,
                Kind::Waking {
                    task: task(pid),
                    target_cpu: 0,
                },
            )
        };
        // Consistent: unchanged.
        let fine = vec![switch(10, 0, 5), waking(20, 9), switch(30, 5, 9)];
        assert_eq!(repair_switches(&fine, 0, None), fine);
        // 5 -> 9 not seen; 9 was woken at 20: it ran from there.
        let lost = vec![
            switch(10, 0, 5),
            waking(15, 3),
            waking(20, 9),
            switch(90, 9, 7),
        ];
        let fixed = repair_switches(&lost, 0, None);
        assert_eq!(fixed.len(), 5);
        assert_eq!(fixed[3], switch(20, 5, 9).with_current(5));
        // No wakeup of it in the window: from the believed task's switch-in on.
        let fixed = repair_switches(&[switch(10, 0, 5), switch(90, 9, 7)], 0, None);
        assert_eq!(fixed[1], switch(10, 5, 9).with_current(5));
        // The base counts as believed too; another CPU's switches do not.
        let mut other = switch(50, 8, 8);
        other.cpu = 1;
        let fixed = repair_switches(&[other.clone(), switch(90, 9, 7)], 0, Some(&task(4)));
        assert_eq!(fixed[0], switch(50, 4, 9).with_current(4));
        assert_eq!(fixed[1], other);
    }

    impl Event {
        fn with_current(mut self, pid: i64) -> Event {
            self.current_pid = pid;
            self
        }
    }

    #[test]
    fn a_switch_closes_a_handler_whose_exit_never_came() {
        let task = |pid: i64| Task {
            comm: format!("t{pid}").into(),
            pid,
            prio: 0,
        };
        let at = |ts_ns: u64, kind: Kind| Event {
            cpu: 1,
            ts_ns,
            current_pid: 0,
            kind,
        };
        let mut cpu = Cpu::new(1, Some(&task(0)));
        cpu.step(&at(
            10,
            Kind::VectorEntry {
                name: "call_function_single".into(),
            },
        ));
        assert_eq!(cpu.handlers.len(), 1);
        cpu.step(&at(
            20,
            Kind::Switch {
                prev: task(0),
                prev_state: TaskState::RUNNING,
                next: task(7),
            },
        ));
        assert!(cpu.handlers.is_empty(), "the hog's run is the hog's");
        assert_eq!(cpu.current.as_ref().map(|t| t.pid), Some(7));
        // A matched pair inside the task's run is still its handler.
        cpu.step(&at(
            30,
            Kind::IrqEntry {
                irq: 11,
                name: "virtio0".into(),
            },
        ));
        assert_eq!(cpu.handlers.len(), 1);
        cpu.step(&at(40, Kind::IrqExit));
        assert!(cpu.handlers.is_empty());
    }
}
