//! What a cause is, typed: the mechanism by which it took an outlier's time, decided once from
//! its kind, reason code and priority. The report layer words a cause from it (an outlier's
//! line, a cause's name); the survey adds up a set of outliers' causes by it.

use crate::details::CauseShare;
use crate::result::{Cause, CauseKind, Outlier, ReasonCode};

/// How a cause took an outlier's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    /// It waited for a lock the task held.
    Blocked,
    /// A time-sharing task held the CPU in kernel code the kernel did not let it leave.
    NonPreemptible,
    /// The fair server throttled the thread (a time-sharing task ran meanwhile).
    FairServer,
    /// RT bandwidth throttling held the thread off its CPU while a task ran.
    Throttled,
    /// RT bandwidth throttling held the thread off its CPU while the CPU idled.
    ThrottledIdle,
    /// The rest of the timer interrupt, then a lower-priority task until the switch.
    TimerTail,
    /// Not woken yet: the timer interrupt was late while the task ran.
    TimerLate,
    /// Preempted while the lock holder waited: priority inversion.
    PriorityInversion,
    /// Preempted while the packet thread with the reply waited.
    NetStackInversion,
    /// A higher-priority task preempted it.
    Preempted,
    /// The timer slack of its sleep.
    TimerSlack,
    /// rtlab's own threads.
    Observer,
    /// A hard interrupt.
    Irq,
    /// A softirq.
    Softirq,
    /// Anything else: its kind says it.
    Other(CauseKind),
}

/// A cause without its time, pid, priority or what belongs to one outlier alone: the same
/// cause in several outliers has one key, and reads the same wherever it is named.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CauseKey {
    /// How it took the time.
    pub mechanism: Mechanism,
    /// The task that held the CPU or the lock, where the mechanism names one (throttling does
    /// not: whichever task ran meanwhile, it is the same throttling).
    pub task: Option<String>,
    /// The interrupt or softirq, where the mechanism is one.
    pub detail: Option<String>,
}

impl CauseKey {
    /// The key of `c`.
    pub fn of(c: &Cause) -> CauseKey {
        let time_sharing = !matches!(c.prio, Some(p) if p > 0);
        let mechanism = match (c.kind, &c.task, c.reason) {
            // Asleep again after its wakeup: the task is what ran on its CPU meanwhile, not
            // what it waited for.
            (CauseKind::Blocking, _, Some(ReasonCode::AsleepAgain)) => {
                Mechanism::Other(CauseKind::Blocking)
            }
            (CauseKind::Blocking, Some(_), _) => Mechanism::Blocked,
            (CauseKind::Preemption, Some(_), reason) => match reason {
                Some(ReasonCode::NonPreemptible) if time_sharing => Mechanism::NonPreemptible,
                Some(ReasonCode::FairServer) => Mechanism::FairServer,
                Some(ReasonCode::Throttled) => Mechanism::Throttled,
                Some(ReasonCode::TimerTailLowerPriority) => Mechanism::TimerTail,
                Some(ReasonCode::TimerLateWhileRunning) => Mechanism::TimerLate,
                Some(ReasonCode::PriorityInversion) => Mechanism::PriorityInversion,
                Some(ReasonCode::NetStackInversion) => Mechanism::NetStackInversion,
                _ => Mechanism::Preempted,
            },
            (CauseKind::Preemption, None, Some(ReasonCode::Throttled)) => Mechanism::ThrottledIdle,
            (CauseKind::Syscall, _, Some(ReasonCode::TimerSlack)) => Mechanism::TimerSlack,
            (CauseKind::Observer, _, _) => Mechanism::Observer,
            (CauseKind::Irq, _, _) => Mechanism::Irq,
            (CauseKind::Softirq, _, _) => Mechanism::Softirq,
            (kind, _, _) => Mechanism::Other(kind),
        };
        let names_task = !matches!(
            mechanism,
            Mechanism::FairServer
                | Mechanism::Throttled
                | Mechanism::ThrottledIdle
                | Mechanism::TimerSlack
                | Mechanism::Observer
                | Mechanism::Irq
                | Mechanism::Softirq
                | Mechanism::Other(_)
        );
        let names_detail = matches!(mechanism, Mechanism::Irq | Mechanism::Softirq);
        CauseKey {
            mechanism,
            task: c.task.clone().filter(|_| names_task),
            detail: c.detail.clone().filter(|_| names_detail),
        }
    }
}

/// The (at most `n`) causes that took most of `outliers`' explained time, by [`CauseKey`],
/// with their shares, most first; those under 1 % left out.
pub fn top_shares(outliers: &[Outlier], n: usize) -> Vec<CauseShare<CauseKey>> {
    let mut by: std::collections::BTreeMap<CauseKey, u64> = Default::default();
    for c in outliers.iter().flat_map(|o| &o.causes) {
        *by.entry(CauseKey::of(c)).or_default() += c.duration_ns;
    }
    let total: u64 = by.values().sum();
    let mut shares: Vec<CauseShare<CauseKey>> = by
        .into_iter()
        .map(|(cause, d)| CauseShare {
            cause,
            share: d as f64 / total.max(1) as f64,
        })
        .collect();
    shares.sort_by(|a, b| b.share.total_cmp(&a.share));
    shares.truncate(n);
    shares.retain(|c| c.share >= 0.01);
    shares
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause(kind: CauseKind, ns: u64, task: Option<&str>, reason: Option<ReasonCode>) -> Cause {
        Cause {
            kind,
            duration_ns: ns,
            task: task.map(Into::into),
            pid: task.map(|_| 42),
            prio: Some(0),
            detail: None,
            reason,
            stall_ns: None,
        }
    }

    #[test]
    fn shares_add_up_one_cause_over_outliers_and_leave_out_the_small_ones() {
        let outlier = |causes: Vec<Cause>| Outlier {
            series: "s".into(),
            at_ns: 0,
            latency_ns: 1,
            cpu: None,
            until_running_ns: None,
            causes,
            stacks: vec![],
        };
        let hog = |ns| cause(CauseKind::Preemption, ns, Some("hog"), None);
        let outliers = [
            outlier(vec![hog(600), cause(CauseKind::Irq, 5, None, None)]),
            outlier(vec![hog(300), cause(CauseKind::Syscall, 100, None, None)]),
        ];
        let shares = top_shares(&outliers, 3);
        let keys: Vec<(Mechanism, Option<&str>)> = shares
            .iter()
            .map(|s| (s.cause.mechanism, s.cause.task.as_deref()))
            .collect();
        assert_eq!(
            keys,
            [
                (Mechanism::Preempted, Some("hog")),
                (Mechanism::Other(CauseKind::Syscall), None)
            ]
        );
        assert_eq!(
            shares
                .iter()
                .map(|s| (s.share * 100.0).round())
                .collect::<Vec<_>>(),
            [90.0, 10.0]
        );
    }

    #[test]
    fn throttling_is_one_cause_whichever_task_ran_meanwhile() {
        let throttled = |task| {
            CauseKey::of(&cause(
                CauseKind::Preemption,
                1,
                Some(task),
                Some(ReasonCode::FairServer),
            ))
        };
        assert_eq!(throttled("sh"), throttled("make"));
        assert_eq!(throttled("sh").mechanism, Mechanism::FairServer);
        let rt_task = Cause {
            prio: Some(50),
            ..cause(
                CauseKind::Preemption,
                1,
                Some("irq/11"),
                Some(ReasonCode::NonPreemptible),
            )
        };
        assert_eq!(CauseKey::of(&rt_task).mechanism, Mechanism::Preempted);
    }
}
