//! Every sentence about a cause, made from the result document: an outlier's one line (the
//! terminal), its causes (the HTML report) and the causes that took most of a set of outliers'
//! time (the survey's and noise's readings, and the survey's `top_causes` in the JSON).
//!
//! A cause's `detail` is the exception: the explainer writes it when it finds the cause,
//! from what it saw and the document does not keep (rtlab-trace's `Reason`); here it is
//! quoted where a cause has nothing better to say. Everything here decides by a cause's kind,
//! reason code and priority, never by its text.

use rtlab_stats::details::CauseShare;
use rtlab_stats::result::{Cause, CauseKind, Outlier, ReasonCode};
use rtlab_stats::Nanos;

/// What an outlier's figure measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// How late the thread was ("late by").
    Lateness,
    /// How long the thread waited (a watched thread's lock waits: "waited").
    Wait,
}

/// One readable line: "thread0 late by 3.1 ms at 12.4 s: 2.9 ms preempted by rtlab-hog (pid 42,
/// RT 99); 0.2 ms IRQ 11 virtio0".
pub fn describe(outlier: &Outlier, measure: Measure) -> String {
    line(
        &outlier.series,
        measure,
        outlier.latency_ns,
        outlier.at_ns,
        &outlier.causes,
    )
}

/// [`describe`] from the outlier's parts.
pub fn line(
    series: &str,
    measure: Measure,
    latency_ns: u64,
    at_ns: u64,
    causes: &[Cause],
) -> String {
    let what = match measure {
        Measure::Lateness => "late by",
        Measure::Wait => "waited",
    };
    format!(
        "{series} {what} {} at {:.1} s: {}",
        Nanos(latency_ns),
        at_ns as f64 / 1e9,
        causes_text(latency_ns, causes)
    )
}

/// The causes of an outlier `latency_ns` long that matter (1 % of it or 10 us, at most four),
/// "; " between them: "2.9 ms preempted by rtlab-hog (pid 42, RT 99); 0.2 ms IRQ 11 virtio0".
pub fn causes_text(latency_ns: u64, causes: &[Cause]) -> String {
    let parts: Vec<String> = causes
        .iter()
        .filter(|c| c.duration_ns * 100 >= latency_ns || c.duration_ns >= 10_000)
        .take(4)
        .map(phrase)
        .collect();
    if parts.is_empty() {
        "no cause found".into()
    } else {
        parts.join("; ")
    }
}

/// "RT 99", or "time-sharing" for a task without a real-time priority.
fn priority(c: &Cause) -> String {
    match c.prio {
        Some(p) if p > 0 => format!("RT {p}"),
        _ => "time-sharing".into(),
    }
}

/// One cause with its time: "2.9 ms preempted by rtlab-hog (pid 42, RT 99)".
pub fn phrase(c: &Cause) -> String {
    let d = Nanos(c.duration_ns);
    match (&c.kind, &c.task) {
        (CauseKind::Blocking, Some(task)) => format!(
            "{d} blocked on {task} (pid {}, {}){}",
            c.pid.unwrap_or(-1),
            priority(c),
            match c.reason {
                Some(ReasonCode::HolderRan) => ", running",
                Some(ReasonCode::WaitingForHolder) => ", elsewhere or asleep",
                Some(ReasonCode::PeerAsleep) => ", itself asleep",
                _ => "",
            }
        ),
        (CauseKind::Preemption, Some(task)) => preemption(c, task),
        (CauseKind::Preemption, None) if c.reason == Some(ReasonCode::Throttled) => {
            format!("{d} throttled (the CPU idled while the thread could run)")
        }
        (CauseKind::Syscall, _) if c.reason == Some(ReasonCode::TimerSlack) => {
            format!("{d} timer slack")
        }
        (CauseKind::Observer, _) => format!("{d} observer (rtlab itself)"),
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
}

/// A task that held the thread's CPU, by what let it: a lower class never preempts.
fn preemption(c: &Cause, task: &str) -> String {
    let d = Nanos(c.duration_ns);
    let pid = c.pid.unwrap_or(-1);
    let prio = priority(c);
    let time_sharing = !matches!(c.prio, Some(p) if p > 0);
    match c.reason {
        // Nor in its kernel code: the kernel did not let it be preempted.
        Some(ReasonCode::NonPreemptible) if time_sharing => {
            format!("{d} {task} (pid {pid}, {prio}) held the CPU in non-preemptible kernel code")
        }
        // A lower class never preempts: the scheduler gave it the time.
        Some(ReasonCode::FairServer) => {
            format!("{d} throttled (the fair server): {task} (pid {pid}, {prio}) ran meanwhile")
        }
        Some(ReasonCode::Throttled) => {
            format!("{d} throttled (RT bandwidth): {task} (pid {pid}, {prio}) ran meanwhile")
        }
        // A lower-priority task preempts nothing: the switch was on its way.
        Some(ReasonCode::TimerTailLowerPriority) => format!(
            "{d} rest of the timer interrupt, then {task} (pid {pid}, {prio}) until the switch"
        ),
        // Not woken yet: nothing was preempted, the timer interrupt was late.
        Some(ReasonCode::TimerLateWhileRunning) => {
            format!("{d} timer interrupt late while {task} (pid {pid}, {prio}) ran")
        }
        Some(ReasonCode::PriorityInversion) => format!(
            "{d} preempted by {task} (pid {pid}, {prio}) while the lock holder waited: priority inversion"
        ),
        Some(ReasonCode::NetStackInversion) => format!(
            "{d} preempted by {task} (pid {pid}, {prio}) while the packet thread with the reply waited: priority inversion in the network stack"
        ),
        _ => format!("{d} preempted by {task} (pid {pid}, {prio})"),
    }
}

/// A cause's name without its time, pid or priority, so that the same cause in several
/// outliers counts as one: "preemption by rtlab-hog", "rt throttling", "irq virtio0".
pub fn name(c: &Cause) -> String {
    match c.reason {
        // Throttling first: the task that ran meanwhile did not preempt anything.
        Some(ReasonCode::Throttled) => return "rt throttling".into(),
        Some(ReasonCode::FairServer) => return "rt throttling (fair server)".into(),
        _ => {}
    }
    match (&c.task, &c.detail) {
        (Some(task), _) => format!("{} by {task}", c.kind.as_str()),
        (None, Some(detail)) if matches!(c.kind, CauseKind::Irq | CauseKind::Softirq) => {
            format!("{} {detail}", c.kind.as_str())
        }
        _ => c.kind.as_str().to_string(),
    }
}

/// The (at most `n`) causes that took most of `outliers`' explained time, by [`name`], with
/// their shares; those under 1 % left out.
pub fn top_shares(outliers: &[Outlier], n: usize) -> Vec<CauseShare> {
    let mut by: std::collections::BTreeMap<String, u64> = Default::default();
    for c in outliers.iter().flat_map(|o| &o.causes) {
        *by.entry(name(c)).or_default() += c.duration_ns;
    }
    let total: u64 = by.values().sum();
    let mut shares: Vec<CauseShare> = by
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

/// "name (58 %), name (32 %)": causes with their shares, as the readings say them.
pub fn shares_text(shares: &[CauseShare]) -> String {
    shares
        .iter()
        .map(|c| format!("{} ({:.0} %)", c.cause, c.share * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
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
        }
    }

    #[test]
    fn a_time_sharing_task_is_never_said_to_preempt_when_throttling_gave_it_the_time() {
        let throttled = cause(
            CauseKind::Preemption,
            3_000_000,
            Some("sh"),
            Some(ReasonCode::FairServer),
        );
        assert_eq!(
            phrase(&throttled),
            "3.00 ms throttled (the fair server): sh (pid 42, time-sharing) ran meanwhile"
        );
        assert_eq!(name(&throttled), "rt throttling (fair server)");
        let line = line("cpu0", Measure::Lateness, 3_003_000, 0, &[throttled]);
        assert!(
            line.starts_with("cpu0 late by 3.00 ms at 0.0 s: 3.00 ms throttled"),
            "{line}"
        );
    }

    #[test]
    fn a_wait_is_worded_as_one_and_an_outlier_without_causes_says_so() {
        let line = line("app/12/lock", Measure::Wait, 2_000_000, 1_000_000_000, &[]);
        assert_eq!(line, "app/12/lock waited 2.00 ms at 1.0 s: no cause found");
    }

    #[test]
    fn shares_group_by_name_and_leave_out_the_small_ones() {
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
        let named: Vec<&str> = shares.iter().map(|s| s.cause.as_str()).collect();
        assert_eq!(named, ["preemption by hog", "syscall"]);
        assert_eq!(
            shares_text(&shares),
            "preemption by hog (90 %), syscall (10 %)"
        );
    }
}
