//! Who owns each slice of a delay: an interrupt, the lock holder or what kept it away, a
//! pending wake-up IPI, the thread itself, an idle or silent CPU, or another task.

use super::*;

impl Attribution<'_> {
    /// Who owns a slice of `len` ns ending here: a timer expiry's tail, else the owner.
    pub(super) fn owner(&self, len: u64, waking_next: bool) -> Key {
        // A spinner current right after a timer expired on its CPU: the rest of that
        // interrupt (the eBPF source traces no local-timer exit), unless it is too long to be.
        let spinner_current = self
            .cpu
            .current
            .as_ref()
            .is_some_and(|t| t.pid == self.late.tid);
        if self.late.wait == Wait::Spin
            && self.expiry.is_some()
            && self.cpu.handlers.is_empty()
            && spinner_current
            && len <= TIMER_TAIL_NS
        {
            return Key::new(
                CauseKind::Irq,
                None,
                Reason::Interrupt {
                    name: "local_timer".into(),
                    silent_ns: None,
                },
            );
        }
        self.cpu
            .handlers
            .is_empty()
            .then(|| {
                timer_tail(
                    self.expiry,
                    waking_next,
                    self.cpu.current.as_ref(),
                    self.woken_prio,
                    len,
                    self.rules,
                )
            })
            .flatten()
            .unwrap_or_else(|| self.slice_owner(len))
    }

    /// The owner of a slice of `len` ns by the replayed state: the innermost interrupt, the
    /// holder or what kept it away (blocked), a pending wake-up IPI, then the current task.
    fn slice_owner(&self, len: u64) -> Key {
        let (late, rules) = (self.late, self.rules);
        if let Some(top) = self.cpu.handlers.last() {
            let (kind, name) = top.kind_and_name();
            return Key::new(
                kind,
                None,
                Reason::Interrupt {
                    name: name.to_string(),
                    silent_ns: (len > rules.gap_ns).then_some(len),
                },
            );
        }
        let current = self.cpu.current.as_ref();
        // Waiting on a task not seen (its wakeup of this one not in the trace), where another
        // CPU's events are not all known: what held it up is not known either.
        if self.blocked && self.holder.is_none() {
            if let Some(key) = self.wakeup_not_seen() {
                return key;
            }
        }
        // (A notifier not followed to another CPU: its call, below.)
        if self.blocked && self.late.wait != Wait::Notify {
            return self.blocked_owner(current);
        }
        if self.asleep_again {
            return Key::new(
                CauseKind::Blocking,
                current.filter(|t| !t.is_idle()),
                Reason::AsleepAgain,
            );
        }
        let (woken, woken_prio) = (self.woken, self.woken_prio);
        if let (Some(from), Some(t)) = (self.ipi_pending, current) {
            // Only a task the woken thread outranks had to be interrupted: for one of higher
            // priority the kernel sends no IPI and the wait is plain preemption.
            let outranked = woken_prio.is_some_and(|p| t.prio > p);
            if woken && outranked && t.pid != late.tid && !t.is_idle() {
                return if rules.virtualized {
                    Key::new(
                        CauseKind::HypervisorGap,
                        None,
                        Reason::IpiLateOnHost {
                            from_cpu: from,
                            running: shown(t),
                        },
                    )
                } else {
                    Key::new(
                        CauseKind::Preemption,
                        Some(t),
                        Reason::IpiWaited { from_cpu: from },
                    )
                };
            }
        }
        // (Events lost here since may have held its wakeup: not known, below.)
        // (Its notifier not seen: above, where its wakeup may be among unknown events.)
        if late.wait == Wait::Notify && !woken && self.cpu.lost.is_none() {
            return Key::new(
                CauseKind::Syscall,
                late.waker.as_ref(),
                Reason::NotifierCall,
            );
        }
        self.task_owner(current, len)
    }

    /// Where the late thread's wakeup, not seen, may be among another CPU's events not known
    /// (lost, or not read) from before this slice's end: that, as the slice's owner.
    fn wakeup_not_seen(&self) -> Option<Key> {
        let u = self
            .rules
            .elsewhere_unknown
            .filter(|u| u.from_ns < self.slice_to)?;
        Some(Key::new(
            CauseKind::Unexplained,
            None,
            Reason::WakeupNotSeen {
                cpu: u.cpu,
                lost: u.lost,
                behind_ns: u.behind_ns,
            },
        ))
    }

    /// The owner of a slice by the task on the CPU: the thread itself, idle before or after
    /// the wakeup, a silent vCPU, or another task.
    fn task_owner(&self, current: Option<&Task>, len: u64) -> Key {
        let (late, rules, woken, woken_prio) = (self.late, self.rules, self.woken, self.woken_prio);
        match current {
            // A spinner's loop takes nanoseconds: a silence longer than its way into and out
            // of an interruption, with the thread current and no interrupt traced, is time
            // the kernel did not see go (on a VM the host's; on bare metal SMIs or firmware).
            Some(t) if t.pid == late.tid && late.wait == Wait::Spin && len > SPIN_SELF_NS => {
                Key::new(
                    if rules.virtualized {
                        CauseKind::HypervisorGap
                    } else {
                        CauseKind::Unexplained
                    },
                    None,
                    Reason::SilentWhileSpinning {
                        len_ns: len,
                        virtualized: rules.virtualized,
                    },
                )
            }
            // A spinner never sleeps: an idle CPU while it could run is the scheduler holding
            // it back (RT throttling, a cgroup's CPU bandwidth).
            Some(t) if t.is_idle() && late.wait == Wait::Spin => {
                Key::new(CauseKind::Preemption, None, Reason::Throttled)
            }
            // Its wakeup path and calls take microseconds; a silence of milliseconds inside
            // them is user-space work or interrupts off, or a pause of the vCPU, which the
            // trace cannot tell apart below the gap (no tick was due yet).
            Some(t) if t.pid == late.tid && len <= rules.gap_ns => Key::new(
                CauseKind::Syscall,
                None,
                Reason::ThreadItself {
                    wait: late.wait,
                    silent_ns: (len > SILENT_SELF_NS).then_some(len),
                },
            ),
            Some(t) if t.is_idle() && !woken => Key::new(
                if rules.virtualized {
                    CauseKind::HypervisorGap
                } else {
                    CauseKind::IdleExit
                },
                None,
                Reason::IdlePastDeadline {
                    virtualized: rules.virtualized,
                },
            ),
            Some(t) if len > rules.gap_ns && !t.is_idle() => Key::new(
                CauseKind::HypervisorGap,
                None,
                Reason::SilentWhileRunning {
                    len_ns: len,
                    running: shown(t),
                },
            ),
            // Woken on an idle CPU: the way out of idle to the switch. Only a silence past the
            // gap is the host's for sure; shorter, on a VM the guest's idle exit includes work
            // the host does for it, which the trace cannot separate.
            Some(t)
                if t.is_idle()
                    && rules.virtualized
                    && len > rules.idle_gap_ns.unwrap_or(rules.gap_ns) =>
            {
                Key::new(
                    CauseKind::HypervisorGap,
                    None,
                    Reason::SilentLeavingIdle { len_ns: len },
                )
            }
            Some(t) if t.is_idle() => Key::new(
                CauseKind::IdleExit,
                None,
                Reason::IdleExitAfterWakeup {
                    virtualized: rules.virtualized,
                },
            ),
            // A time-sharing task cannot preempt a real-time thread: when such tasks took the
            // CPU from a runnable real-time task, or have held it for long while the
            // real-time thread could run, the scheduler gave them that time (RT throttling; on
            // 6.12+ kernels the fair server, whose time they share); a shorter stretch that
            // was already running is a task's non-preemptible kernel code.
            Some(t) if woken && t.prio >= 100 && self.thread_prio.is_some_and(|p| p < 100) => {
                let since = self.time_sharing_since.max(self.runnable_since);
                let tenure = self.slice_to.saturating_sub(since);
                Key::new(
                    CauseKind::Preemption,
                    Some(t),
                    if self.stretch_throttled || tenure >= THROTTLE_MIN_NS {
                        Reason::ThrottledWhileRan {
                            fair_server: fair_server_kernel(),
                        }
                    } else {
                        Reason::NonPreemptible
                    },
                )
            }
            Some(t) => Key {
                kind: CauseKind::Preemption,
                task: Some((t.comm.to_string(), t.pid, t.prio)),
                reason: if !woken {
                    Some(Reason::TimerLateWhileRunning {
                        virtualized: rules.virtualized,
                    })
                } else if woken_prio.is_some_and(|p| t.prio > p) {
                    Some(Reason::NonPreemptible)
                } else {
                    None
                },
            },
            // Not known since events were lost here (the lost ones would have said), or
            // not since the window began.
            None => match self.cpu.lost {
                Some(n) => Key::new(CauseKind::Unexplained, None, Reason::EventsLost { n }),
                None => Key::new(CauseKind::Unexplained, None, Reason::NoSchedulerEvent),
            },
        }
    }

    /// The owner of a slice while the thread is blocked on a holder (or peer) that was not
    /// followed to another CPU: the holder running, a task keeping it away, or the wait.
    fn blocked_owner(&self, current: Option<&Task>) -> Key {
        let late = self.late;
        let (holder, blocker) = (self.holder, self.blocker);
        match current {
            Some(t) if holder.is_some_and(|h| h.pid == t.pid) => {
                Key::new(CauseKind::Blocking, Some(t), Reason::HolderRan { blocker })
            }
            Some(t) if !t.is_idle() => Key::new(
                CauseKind::Preemption,
                Some(t),
                match (holder, self.woken_prio) {
                    (Some(h), Some(p)) if t.prio > p && late.wait == Wait::Lock => {
                        Reason::PriorityInversion { holder: named(h) }
                    }
                    // The reply came through a kernel thread that processes received packets
                    // (threaded NAPI, ksoftirqd), below this task that is itself below the
                    // waiting thread: this task keeps it off (a packet thread above the task
                    // would have preempted it).
                    (Some(h), Some(p))
                        if t.prio > p
                            && h.prio > t.prio
                            && late.wait == Wait::Reply
                            && is_packet_thread(h) =>
                    {
                        Reason::NetStackInversion { via: named(h) }
                    }
                    (h, _) => Reason::RanWhileBlocked {
                        blocker,
                        holder: h.map(named),
                    },
                },
            ),
            _ => Key::new(
                CauseKind::Blocking,
                holder,
                Reason::WaitingForHolder { blocker },
            ),
        }
    }
}
