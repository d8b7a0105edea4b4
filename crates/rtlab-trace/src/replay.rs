//! Replaying a CPU's events: what ran on it, which interrupts were open, and where one
//! followed task stood (woken, running, asleep). Attribution, following a peer and finding
//! the stretches known beforehand all step these same state machines through the events,
//! so each event means the same thing to all of them.

use crate::event::{Event, Kind, Task};
use rtlab_stats::result::CauseKind;

/// An interrupt open on a CPU, by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Handler {
    /// A hardware IRQ handler or an IRQ vector.
    Irq(String),
    /// A softirq.
    Softirq(String),
}

impl Handler {
    pub(crate) fn kind_and_name(&self) -> (CauseKind, &str) {
        match self {
            Handler::Irq(n) => (CauseKind::Irq, n),
            Handler::Softirq(n) => (CauseKind::Softirq, n),
        }
    }
}

/// One CPU, replayed from its events.
#[derive(Debug, Clone)]
pub(crate) struct Cpu {
    /// Which CPU (events of others leave it unchanged).
    pub(crate) cpu: u16,
    /// The task on it; None when not known (no switch seen yet, or events lost since).
    pub(crate) current: Option<Task>,
    /// Interrupt handlers running on it, innermost last.
    pub(crate) handlers: Vec<Handler>,
}

impl Cpu {
    /// `cpu` with `base` current before the first event.
    pub(crate) fn new(cpu: u16, base: Option<&Task>) -> Cpu {
        Cpu {
            cpu,
            current: base.cloned(),
            handlers: Vec::new(),
        }
    }

    /// Whether a task other than idle runs (None: not known).
    pub(crate) fn busy(&self) -> Option<bool> {
        self.current.as_ref().map(|t| !t.is_idle())
    }

    /// Before the stretch that ends at `e` is judged: a switch names the task it switches
    /// away from, which is the truth about who ran up to it. When that is not the task the
    /// replay believed current (the switch to it was not seen: ordered before the window, or
    /// lost without a loss mark), the believed one is dropped for it, so the stretch is not
    /// given to a task that was no longer there (seen: a 2.3 ms hog run given to a
    /// SCHED_OTHER thread as a non-preemptible section, 2 of 20 soak runs).
    pub(crate) fn reconcile(&mut self, e: &Event) {
        if e.cpu != self.cpu {
            return;
        }
        if let Kind::Switch { prev, .. } = &e.kind {
            if self.current.as_ref().is_some_and(|c| c.pid != prev.pid) {
                self.current = Some(prev.clone());
            }
        }
    }

    /// Applies one event (of any CPU; only this CPU's change it).
    pub(crate) fn step(&mut self, e: &Event) {
        if e.cpu != self.cpu {
            return;
        }
        match &e.kind {
            Kind::Switch { next, .. } => {
                self.current = Some(next.clone());
                // A CPU switches tasks only outside interrupt handlers: a handler still open
                // here lost its exit (or its exit was ordered after the switch), and left
                // open it would take the next task's whole run. (On PREEMPT_RT a softirq can
                // be preempted: the rest of it then counts to the task that runs it.)
                self.handlers.clear();
            }
            Kind::Lost(_) => {
                // Who runs now is unknown until the next switch.
                self.current = None;
                self.handlers.clear();
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

/// What an event meant for a followed task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Moved {
    /// Nothing.
    Nothing,
    /// Woken (on `from_cpu`: a `sched_waking`, or the expiry of its sleep timer), with its
    /// priority then.
    Woken { from_cpu: u16, prio: i64 },
    /// Switched out on its CPU: `asleep` when it blocked (not preempted, and no wakeup since it
    /// last got the CPU: the waker traces a wakeup before the task is off its CPU, so a
    /// switch-out asleep after it is not a sleep).
    SwitchedOut { asleep: bool, prio: i64 },
    /// Switched in on its CPU.
    SwitchedIn,
}

/// A task followed through the events of its CPU and its wakings on others.
#[derive(Debug, Clone)]
pub(crate) struct Follow {
    /// The task (TID).
    pub(crate) tid: i64,
    /// Its CPU.
    pub(crate) cpu: u16,
    /// Runnable (woken or preempted) rather than asleep; None when not known (no event of
    /// it yet, or events lost since, which may have taken its wakeup with them).
    pub(crate) runnable: Option<bool>,
    /// Woken since it last got the CPU.
    woken_since_in: bool,
}

impl Follow {
    pub(crate) fn new(tid: i64, cpu: u16) -> Follow {
        Follow {
            tid,
            cpu,
            runnable: None,
            woken_since_in: false,
        }
    }

    /// Applies one event.
    pub(crate) fn step(&mut self, e: &Event) -> Moved {
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
            } if e.cpu == self.cpu => {
                if prev.pid == self.tid {
                    let asleep = !prev_state.is_runnable() && !self.woken_since_in;
                    self.runnable = Some(!asleep);
                    Moved::SwitchedOut {
                        asleep,
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
