//! Why a slice of an outlier went where it went: one variant per reason the attribution
//! gives, and the text of each (a cause's `detail`, written when the cause is found, from what
//! the attribution saw). The result document also carries the reason's code ([`ReasonCode`]),
//! so whatever reads a result later decides by the code, never by matching the English text;
//! every other sentence about a cause (an outlier's one line, the report's, the survey's) is
//! made from the document by `rtlab_report::cause`.

use rtlab_stats::result::ReasonCode;
use rtlab_stats::Nanos;
use std::fmt;

/// What a lock-like wait was for: the lock's holder, or a peer's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Blocker {
    /// A lock (its holder runs the critical section).
    Lock,
    /// A round trip (the peer handles the message).
    Reply,
    /// A notification (the notifying thread's unlock and wake call).
    Notify,
}

/// A task named in a reason (name and pid).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Named {
    /// Its name.
    pub comm: String,
    /// Its pid.
    pub pid: i64,
}

/// The reason for a slice of an outlier.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// An interrupt handler, vector or softirq (by name); `silent_ns`: no event inside it for
    /// that long.
    Interrupt {
        name: String,
        silent_ns: Option<u64>,
    },
    /// The same on the CPU of the peer the thread waited for.
    PeerInterrupt {
        name: String,
        cpu: u16,
        silent_ns: Option<u64>,
    },
    /// An NMI handler.
    Nmi { handler: String },
    /// The holder (or peer) ran: the thread waited for it.
    HolderRan { blocker: Blocker },
    /// The holder (or peer) ran on its own CPU.
    HolderRanOn { blocker: Blocker, cpu: u16 },
    /// The thread's CPU idled while it waited for the holder (running elsewhere).
    WaitingForHolder { blocker: Blocker },
    /// A lower-priority task ran while the thread waited for a lock's holder.
    PriorityInversion { holder: Named },
    /// A task below the waiting thread ran while `via`, the kernel thread that processes the
    /// thread's received packets (and so would deliver its reply), waited for the CPU: the
    /// network stack's priority inversion.
    NetStackInversion { via: Named },
    /// A task ran while the thread was blocked (on `holder`, when known).
    RanWhileBlocked {
        blocker: Blocker,
        holder: Option<Named>,
    },
    /// After its wakeup past the deadline the thread ran and went to sleep again, waiting for
    /// something else on its way back to its code (a Java thread: its JVM's safepoint
    /// barrier, a lock): its CPU idled, or other tasks ran, meanwhile.
    AsleepAgain,
    /// Woken from another CPU; on a VM the host delivered the IPI late while `running` ran.
    IpiLateOnHost { from_cpu: u16, running: String },
    /// Woken from another CPU; the IPI waited while the current task had interrupts off.
    IpiWaited { from_cpu: u16 },
    /// Before a notify wakeup: the notifier's unlock and wake call.
    NotifierCall,
    /// The thread itself ran (its wakeup path, its calls); `silent_ns`: a long silence in it.
    ThreadItself {
        wait: crate::wait::Wait,
        silent_ns: Option<u64>,
    },
    /// The CPU idled past the deadline (the timer interrupt came late).
    IdlePastDeadline { virtualized: bool },
    /// No event for `len_ns` while `running` ran: the vCPU did not run.
    SilentWhileRunning { len_ns: u64, running: String },
    /// A spinning thread was current and no event came for `len_ns`: the kernel did not see
    /// the time go (the host, on a VM; SMIs or firmware on bare metal).
    SilentWhileSpinning { len_ns: u64, virtualized: bool },
    /// The CPU idled while the (spinning) thread could run: the scheduler held it back.
    Throttled,
    /// A time-sharing task held the real-time thread's CPU for long while the thread could
    /// run: RT throttling gave it the time (`fair_server`: by the fair server of 6.12+
    /// kernels).
    ThrottledWhileRan { fair_server: bool },
    /// No event for `len_ns` leaving idle after the wakeup: the vCPU did not run.
    SilentLeavingIdle { len_ns: u64 },
    /// The way out of idle after the wakeup.
    IdleExitAfterWakeup { virtualized: bool },
    /// Not woken yet while another task ran: no timer interrupt came.
    TimerLateWhileRunning { virtualized: bool },
    /// A lower-priority task held the CPU in a non-preemptible section after the wakeup.
    NonPreemptible,
    /// After the thread's own timer expiry, on an idle CPU.
    TimerTailIdle,
    /// After the thread's own timer expiry, a lower-priority task until the switch.
    TimerTailLowerPriority,
    /// No scheduler event before the deadline in the trace window.
    NoSchedulerEvent,
    /// `n` trace events were lost here.
    EventsLost { n: u64 },
    /// Not read yet when explained: the trace reader was this far behind.
    Unread { behind_ns: u64 },
    /// Not known whether the thread had been woken: its wakeup would come from `cpu`, whose
    /// events were lost there (`lost`), or not read yet (the reader `behind_ns` behind).
    WakeupNotSeen { cpu: u16, lost: u64, behind_ns: u64 },
    /// A busy CPU took no tick for `len_ns` (one is due every `period_ns`); `peer_cpu`: the
    /// peer's CPU, not the thread's own.
    NoTick {
        len_ns: u64,
        period_ns: u64,
        peer_cpu: Option<u16>,
        virtualized: bool,
    },
    /// Between the deadline and the first traced event.
    BeforeFirstEvent,
    /// Between the deadline and the first event kept: older ones were dropped at `age_ns`
    /// old (the reader was behind, or the delay was reported late).
    HistoryCut { age_ns: u64 },
    /// No traced event on the thread's CPU in the window.
    NoEventInWindow,
    /// No traced event on `cpu` at all.
    NoEventOnCpu { cpu: u16 },
    /// A task kept the peer off its CPU.
    KeptPeerOff { cpu: u16, peer: Named },
    /// The peer's CPU was silent for `len_ns` leaving idle to run it (host).
    PeerIdleGap { cpu: u16, len_ns: u64, peer: String },
    /// The peer's CPU leaving idle to run it.
    PeerIdleExit { cpu: u16, peer: String },
    /// The peer itself was asleep, waiting for its own input.
    PeerAsleep { cpu: u16, peer: String },
    /// What kept the peer from answering is not known.
    PeerUnknown { cpu: u16, peer: String },
    /// The thread's own timer slack: the kernel may fire its sleep timer up to `slack_ns`
    /// after the requested expiry.
    TimerSlack { slack_ns: u64 },
    /// rtlab's own thread `comm` (the observer) held the CPU.
    Observer { comm: String },
}

impl Reason {
    /// The code the result document carries.
    pub fn code(&self) -> ReasonCode {
        match self {
            Reason::Interrupt { .. } => ReasonCode::Interrupt,
            Reason::PeerInterrupt { .. } => ReasonCode::PeerInterrupt,
            Reason::Nmi { .. } => ReasonCode::Nmi,
            Reason::HolderRan { blocker } | Reason::HolderRanOn { blocker, .. } => match blocker {
                Blocker::Notify => ReasonCode::NotifierCall,
                Blocker::Lock | Blocker::Reply => ReasonCode::HolderRan,
            },
            Reason::WaitingForHolder { .. } => ReasonCode::WaitingForHolder,
            Reason::PriorityInversion { .. } => ReasonCode::PriorityInversion,
            Reason::RanWhileBlocked { .. } => ReasonCode::RanWhileBlocked,
            Reason::NetStackInversion { .. } => ReasonCode::NetStackInversion,
            Reason::AsleepAgain => ReasonCode::AsleepAgain,
            Reason::IpiLateOnHost { .. } => ReasonCode::IpiLateOnHost,
            Reason::IpiWaited { .. } => ReasonCode::IpiWaited,
            Reason::NotifierCall => ReasonCode::NotifierCall,
            Reason::ThreadItself { .. } => ReasonCode::ThreadItself,
            Reason::IdlePastDeadline { .. } => ReasonCode::IdlePastDeadline,
            Reason::SilentWhileRunning { .. } => ReasonCode::SilentWhileRunning,
            Reason::SilentLeavingIdle { .. } => ReasonCode::SilentLeavingIdle,
            Reason::SilentWhileSpinning { .. } => ReasonCode::SilentWhileSpinning,
            Reason::Throttled | Reason::ThrottledWhileRan { fair_server: false } => {
                ReasonCode::Throttled
            }
            Reason::ThrottledWhileRan { fair_server: true } => ReasonCode::FairServer,
            Reason::Observer { .. } => ReasonCode::Observer,
            Reason::IdleExitAfterWakeup { .. } => ReasonCode::IdleExitAfterWakeup,
            Reason::TimerLateWhileRunning { .. } => ReasonCode::TimerLateWhileRunning,
            Reason::NonPreemptible => ReasonCode::NonPreemptible,
            Reason::TimerTailIdle => ReasonCode::TimerTailIdle,
            Reason::TimerTailLowerPriority => ReasonCode::TimerTailLowerPriority,
            Reason::NoSchedulerEvent => ReasonCode::NoSchedulerEvent,
            Reason::EventsLost { .. } => ReasonCode::EventsLost,
            Reason::Unread { .. } => ReasonCode::Unread,
            Reason::WakeupNotSeen { lost: 0, .. } => ReasonCode::Unread,
            Reason::WakeupNotSeen { .. } => ReasonCode::EventsLost,
            Reason::NoTick { .. } => ReasonCode::NoTick,
            Reason::BeforeFirstEvent => ReasonCode::BeforeFirstEvent,
            Reason::HistoryCut { .. } => ReasonCode::HistoryCut,
            Reason::NoEventInWindow | Reason::NoEventOnCpu { .. } => ReasonCode::NoEvent,
            Reason::KeptPeerOff { .. } => ReasonCode::KeptPeerOff,
            Reason::PeerIdleGap { .. } => ReasonCode::PeerIdleGap,
            Reason::PeerIdleExit { .. } => ReasonCode::PeerIdleExit,
            Reason::PeerAsleep { .. } => ReasonCode::PeerAsleep,
            Reason::PeerUnknown { .. } => ReasonCode::PeerUnknown,
            Reason::TimerSlack { .. } => ReasonCode::TimerSlack,
        }
    }
}

impl Blocker {
    fn held_by(self) -> &'static str {
        match self {
            Blocker::Lock => "the lock held by",
            Blocker::Reply => "the reply of",
            Blocker::Notify => "the notification of",
        }
    }
    fn ran(self) -> &'static str {
        match self {
            Blocker::Lock => "the lock holder ran (its critical section)",
            Blocker::Reply => "the peer ran (handling the message)",
            Blocker::Notify => "the notifying thread's unlock and wake call",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::wait::Wait;
        match self {
            // A silence inside is the cause's stall (`Cause::stall_ns`), said by the report.
            Reason::Interrupt { name, .. } => f.write_str(name),
            Reason::PeerInterrupt { name, cpu, .. } => {
                write!(f, "{name} on CPU {cpu}, the peer's")
            }
            Reason::Nmi { handler } => f.write_str(handler),
            Reason::HolderRan { blocker } => f.write_str(blocker.ran()),
            Reason::HolderRanOn { blocker, cpu } => write!(f, "{} on CPU {cpu}", blocker.ran()),
            Reason::WaitingForHolder { blocker } => f.write_str(match blocker {
                Blocker::Lock => "waiting for the lock holder (CPU idle: it ran elsewhere or slept)",
                Blocker::Reply => "waiting for the peer's reply (CPU idle: the peer ran elsewhere)",
                Blocker::Notify => "waiting for the notifying thread (CPU idle: it ran elsewhere)",
            }),
            Reason::PriorityInversion { holder } => write!(
                f,
                "priority inversion: a lower-priority task ran while the thread waited for {} {} (pid {})",
                Blocker::Lock.held_by(),
                holder.comm,
                holder.pid
            ),
            Reason::NetStackInversion { via } => write!(
                f,
                "priority inversion in the network stack: a lower-priority task ran while {} (pid {}), which processes the thread's received packets, waited for the CPU with its reply (raise it above the task: rtlab check net_stack)",
                via.comm, via.pid
            ),
            Reason::RanWhileBlocked {
                blocker,
                holder: Some(h),
            } => write!(
                f,
                "ran while the thread waited for {} {} (pid {})",
                blocker.held_by(),
                h.comm,
                h.pid
            ),
            Reason::RanWhileBlocked { holder: None, .. } => {
                f.write_str("ran while the thread was blocked")
            }
            Reason::IpiLateOnHost { from_cpu, running } => write!(
                f,
                "woken from CPU {from_cpu}, but no interrupt reached this vCPU while {running} ran: the host delivered the wake-up IPI late"
            ),
            Reason::IpiWaited { from_cpu } => write!(
                f,
                "woken from CPU {from_cpu}; the wake-up IPI waited while it ran with interrupts disabled"
            ),
            Reason::NotifierCall => {
                f.write_str("before the wakeup: the notifying thread's unlock and wake call")
            }
            Reason::ThreadItself { wait, .. } => f.write_str(match wait {
                    Wait::Lock => "the thread itself ran: its wakeup and the lock or futex call",
                    Wait::Reply => "the thread itself ran: its send and receive calls",
                    Wait::Timer | Wait::Notify => "from the wakeup to user space",
                Wait::Spin => {
                    "the spinning thread itself: its way into and out of the interruption (not traced)"
                }
            }),
            Reason::IdlePastDeadline { virtualized: true } => f.write_str(
                "CPU idle past the deadline: the host delivered the timer interrupt late",
            ),
            Reason::IdlePastDeadline { virtualized: false } => f.write_str(
                "CPU idle past the deadline: C-state exit before the timer interrupt",
            ),
            Reason::SilentWhileRunning { len_ns, running } => write!(
                f,
                "no event for {} while {running} ran: the vCPU was not running",
                Nanos(*len_ns)
            ),
            Reason::SilentWhileSpinning {
                len_ns,
                virtualized,
            } => write!(
                f,
                "no event for {} while the thread spun: the CPU was taken without the kernel seeing it ({})",
                Nanos(*len_ns),
                if *virtualized {
                    "the host did not run the vCPU"
                } else {
                    "a system management interrupt or firmware"
                }
            ),
            Reason::Observer { comm } => write!(f, "rtlab's own {comm} thread ran here"),
            Reason::AsleepAgain => f.write_str(
                "asleep again after its wakeup, waiting for something else on its way back to its code (a Java thread: its JVM's safepoint barrier, or a lock)",
            ),
            Reason::ThrottledWhileRan { fair_server: true } => f.write_str(
                "RT throttling by the fair server: this kernel (6.12+) runs waiting SCHED_OTHER work up to 50 ms of every second over real-time threads (debugfs sched/fair_server/cpuN/runtime; rtlab check fair_server)",
            ),
            Reason::ThrottledWhileRan { fair_server: false } => f.write_str(
                "RT throttling: real-time threads may use at most kernel.sched_rt_runtime_us of every sched_rt_period_us, the rest goes to SCHED_OTHER work",
            ),
            Reason::Throttled => f.write_str(
                "the CPU idled while the thread could run: the scheduler held it back (real-time throttling, kernel.sched_rt_runtime_us; or a cgroup's cpu.max)",
            ),
            Reason::SilentLeavingIdle { len_ns } => write!(
                f,
                "no event for {} while leaving idle after the wakeup: the vCPU was not running",
                Nanos(*len_ns)
            ),
            Reason::IdleExitAfterWakeup { virtualized: true } => f.write_str(
                "CPU idle after the wakeup: the way out of idle (on a VM, with the host's part of it)",
            ),
            Reason::IdleExitAfterWakeup { virtualized: false } => {
                f.write_str("CPU idle after the wakeup: the way out of idle")
            }
            Reason::TimerLateWhileRunning { virtualized: true } => f.write_str(
                "before the wakeup: no timer interrupt came while it ran (it ran with interrupts disabled, or the host held the vCPU or its timer back)",
            ),
            Reason::TimerLateWhileRunning { virtualized: false } => f.write_str(
                "before the wakeup: no timer interrupt came while it ran (interrupts disabled)",
            ),
            Reason::NonPreemptible => f.write_str(
                "lower priority than the woken thread: it held the CPU in a non-preemptible kernel section",
            ),
            Reason::TimerTailIdle => f.write_str(
                "after the timer woke the thread: the rest of the timer interrupt and the exit from idle (the interrupt's end is not traced)",
            ),
            Reason::TimerTailLowerPriority => f.write_str(
                "after the timer woke the thread: the rest of the timer interrupt, then this lower-priority task until the switch (the interrupt's end is not traced)",
            ),
            Reason::NoSchedulerEvent => {
                f.write_str("no scheduler event before the deadline in the trace window")
            }
            Reason::EventsLost { n } => {
                write!(f, "{n} trace events lost here (the reader fell behind)")
            }
            Reason::Unread { behind_ns } => write!(
                f,
                "not known: the trace reader was {} behind this CPU's events when it explained this",
                Nanos(*behind_ns)
            ),
            Reason::WakeupNotSeen {
                cpu, lost: 0, behind_ns,
            } => write!(
                f,
                "not known: its wakeup would come from CPU {cpu}, whose events the trace reader was {} behind when it explained this",
                Nanos(*behind_ns)
            ),
            Reason::WakeupNotSeen { cpu, lost, .. } => write!(
                f,
                "not known: {lost} trace events lost on CPU {cpu}, where its wakeup would come from"
            ),
            Reason::NoTick {
                len_ns,
                period_ns,
                peer_cpu,
                virtualized,
            } => {
                write!(f, "no tick for {} on a busy CPU", Nanos(*len_ns))?;
                if let Some(cpu) = peer_cpu {
                    write!(f, " (CPU {cpu}, the peer's)")?;
                }
                write!(
                    f,
                    " (one is due every {}): {}",
                    Nanos(*period_ns),
                    if *virtualized {
                        "the vCPU was not running (or ran with interrupts off)"
                    } else {
                        "interrupts were off"
                    }
                )
            }
            Reason::BeforeFirstEvent => f.write_str("before the first traced event"),
            Reason::HistoryCut { age_ns } => write!(
                f,
                "not known: the trace no longer held these events (dropped {} after they happened, the reader behind)",
                Nanos(*age_ns)
            ),
            Reason::NoEventInWindow => f.write_str("no traced event on this CPU in the window"),
            Reason::NoEventOnCpu { cpu } => write!(f, "no traced event on CPU {cpu}"),
            Reason::KeptPeerOff { cpu, peer } => write!(
                f,
                "ran on CPU {cpu} while {} (pid {}), which the thread waited for, waited for that CPU",
                peer.comm, peer.pid
            ),
            Reason::PeerIdleGap { cpu, len_ns, peer } => write!(
                f,
                "CPU {cpu} silent for {} leaving idle to run {peer}: the host did not run that vCPU",
                Nanos(*len_ns)
            ),
            Reason::PeerIdleExit { cpu, peer } => {
                write!(f, "CPU {cpu} leaving idle to run {peer}")
            }
            Reason::PeerAsleep { cpu, peer } => write!(
                f,
                "{peer} itself was asleep on CPU {cpu} (waiting for its own input)"
            ),
            Reason::PeerUnknown { cpu, peer } => write!(
                f,
                "what kept {peer} from answering on CPU {cpu} is not known (trace events lost, or none of it in the window)"
            ),
            Reason::TimerSlack { slack_ns } => write!(
                f,
                "the thread's own timer slack: the kernel may expire its sleep up to {} after the time asked for, to batch wakeups (prctl PR_SET_TIMERSLACK, /proc/<tid>/timerslack_ns; none for SCHED_FIFO/RR threads)",
                Nanos(*slack_ns)
            ),
        }
    }
}

/// An outlier's one line, as users read it (made in the report layer, from the document):
/// the explainer's tests check their causes through it.
#[cfg(test)]
pub(crate) fn describe(
    series: &str,
    latency_ns: u64,
    at_ns: u64,
    causes: &[rtlab_stats::result::Cause],
) -> String {
    use rtlab_report::cause::{line, Measure};
    line(series, Measure::Lateness, latency_ns, at_ns, causes)
}

impl Reason {
    /// The silence inside an interrupt or the thread's own kernel work: no event for that
    /// long, so the CPU ran with interrupts off or the vCPU was stopped (a stall).
    pub fn stall_ns(&self) -> Option<u64> {
        match self {
            Reason::Interrupt { silent_ns, .. }
            | Reason::PeerInterrupt { silent_ns, .. }
            | Reason::ThreadItself { silent_ns, .. } => *silent_ns,
            _ => None,
        }
    }
}

/// A cause that names no task.
pub(crate) fn taskless(
    kind: rtlab_stats::result::CauseKind,
    duration_ns: u64,
    reason: Reason,
) -> rtlab_stats::result::Cause {
    rtlab_stats::result::Cause {
        kind,
        duration_ns,
        task: None,
        pid: None,
        prio: None,
        detail: Some(reason.to_string()),
        reason: Some(reason.code()),
        stall_ns: reason.stall_ns(),
    }
}
