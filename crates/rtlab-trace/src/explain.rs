//! Attribution: what one CPU did between a thread's deadline and the moment it ran.
//!
//! The window `[deadline, woke]` is cut at every event of that CPU; each slice goes to what
//! was on the CPU then, innermost first: an NMI, an IRQ handler or vector (`irq`), a softirq,
//! then the current task: another task (`preemption`, with its name, pid and priority), the
//! idle task before the thread was woken (`idle_exit`: the CPU slept past the deadline and
//! the timer interrupt came late; on a VM `hypervisor_gap`, as the host delivers it), the
//! thread itself once switched in (`syscall`: the way back to user space). A slice with no
//! event for longer than `gap_ns` while a task ran is a `hypervisor_gap` (even a busy CPU
//! takes a timer tick every few ms; on a VM the vCPU was not running). Time before the first
//! event is `unexplained`.

use crate::event::{Event, Kind, Task};
use rtlab_stats::result::{Cause, CauseKind};

/// What is known about the outlier.
#[derive(Debug, Clone, Copy)]
pub struct Late {
    /// The thread (TID).
    pub tid: i64,
    /// When it should have run (CLOCK_MONOTONIC ns).
    pub deadline_ns: u64,
    /// When it did.
    pub woke_ns: u64,
}

/// Settings of the attribution.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// A silent slice longer than this while a task runs is a hypervisor gap.
    pub gap_ns: u64,
    /// This machine is a VM: a late timer on an idle CPU is the host's delay.
    pub virtualized: bool,
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
        _ => CauseKind::Unexplained,
    }
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
    let mut last = None::<u64>;
    let mut woken_prio: Option<i64> = None;
    let slice_owner = |stack: &[Who],
                       current: &Option<Task>,
                       woken: bool,
                       woken_prio: Option<i64>,
                       len: u64|
     -> Key {
        if let Some(top) = stack.last() {
            let (kind, detail) = match top {
                Who::Irq(n) => (0, n.clone()),
                Who::Softirq(n) => (1, n.clone()),
            };
            return Key {
                kind,
                task: None,
                detail: Some(detail),
            };
        }
        match current {
            Some(t) if t.pid == late.tid => Key {
                kind: 6,
                task: None,
                detail: Some("from the wakeup to user space".into()),
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
            Some(t) if t.is_idle() => Key {
                kind: if rules.virtualized { 5 } else { 4 },
                task: None,
                detail: Some(if rules.virtualized {
                    "CPU idle after the wakeup: the host did not run the vCPU".into()
                } else {
                    "CPU idle after the wakeup".into()
                }),
            },
            Some(t) => Key {
                kind: 3,
                task: Some((t.comm.clone(), t.pid, t.prio)),
                detail: if !woken {
                    Some("before the wakeup: the timer interrupt was held off (interrupts disabled) while it ran".into())
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
    for e in events {
        if let Some(prev) = last {
            if e.ts_ns > prev {
                let key = slice_owner(&stack, &current, woken, woken_prio, e.ts_ns - prev);
                add(key, prev, e.ts_ns);
            }
        } else if e.ts_ns > t0 {
            // Nothing known between the deadline and the first event.
            add(
                Key {
                    kind: 8,
                    task: None,
                    detail: Some("before the first traced event".into()),
                },
                t0,
                e.ts_ns,
            );
        }
        seen_any = true;
        last = Some(e.ts_ns);
        if e.ts_ns > t1 {
            break;
        }
        match &e.kind {
            Kind::Switch { next, .. } => current = Some(next.clone()),
            Kind::Waking { task, .. } if task.pid == late.tid => {
                woken = true;
                woken_prio = Some(task.prio);
            }
            Kind::IrqEntry { irq, name } => stack.push(Who::Irq(format!("IRQ {irq} {name}"))),
            Kind::VectorEntry { name } => stack.push(Who::Irq(name.clone())),
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
        let key = slice_owner(&stack, &current, woken, woken_prio, t1 - prev);
        add(key, prev, t1);
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
                (CauseKind::Preemption, Some(task)) => {
                    let prio = match c.prio {
                        Some(p) if p > 0 => format!("RT {p}"),
                        _ => "time-sharing".into(),
                    };
                    format!(
                        "{d} preempted by {task} (pid {}, {prio})",
                        c.pid.unwrap_or(-1)
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
        };
        let rules = Rules {
            gap_ns: 8_000_000,
            virtualized: true,
        };
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
    fn an_idle_cpu_woken_late_is_a_hypervisor_gap_on_a_vm() {
        let ev = events(&[
            "<idle>-0 [000] d..1. 5.000000: cpu_idle: state=1 cpu_id=0",
            "<idle>-0 [000] d.h1. 5.000400: local_timer_entry: vector=236",
            "<idle>-0 [000] d.h3. 5.000401: sched_waking: comm=t pid=7 prio=4 target_cpu=000",
            "<idle>-0 [000] d.h1. 5.000405: local_timer_exit: vector=236",
            "<idle>-0 [000] d..2. 5.000410: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=4",
        ]);
        let base = Task {
            comm: "swapper/0".into(),
            pid: 0,
            prio: 120,
        };
        let late = Late {
            tid: 7,
            deadline_ns: 5_000_050_000,
            woke_ns: 5_000_412_000,
        };
        let causes = attribute(
            &ev,
            Some(&base),
            &late,
            &Rules {
                gap_ns: 8_000_000,
                virtualized: true,
            },
        );
        assert_eq!(causes[0].kind, CauseKind::HypervisorGap);
        assert_eq!(causes[0].duration_ns, 350_000);
        let on_metal = attribute(
            &ev,
            Some(&base),
            &late,
            &Rules {
                gap_ns: 8_000_000,
                virtualized: false,
            },
        );
        assert_eq!(on_metal[0].kind, CauseKind::IdleExit);
    }
}
