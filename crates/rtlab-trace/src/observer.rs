//! rtlab's own threads: never named as the culprit of what they watch; what they cost is said
//! as the observer's.

use crate::reason::{taskless, Reason};
use rtlab_stats::result::{Cause, CauseKind};

/// The threads of rtlab that watch rather than measure or disturb: its main thread, the
/// reader, the log writer, the metrics server, the watchdog and its canaries. (The measuring
/// threads and the loads an experiment runs are its subject, not the observer.)
pub fn is_observer_thread(comm: &str) -> bool {
    matches!(
        comm,
        "rtlab" | "rtlab-explain" | "rtlab-hlog" | "rtlab-watchdog" | "rtlab-jvmlog"
    ) || comm.starts_with("rtlab-metrics")
        || comm.starts_with("rtlab-canary")
}

/// Causes that are rtlab's own observing threads become one `observer` cause: rtlab is never
/// named as the culprit of what it watches, and what it cost is said as such.
pub(crate) fn as_observer(mut causes: Vec<Cause>) -> Vec<Cause> {
    let own_thread = |c: &Cause| {
        c.task.as_deref().is_some_and(is_observer_thread)
            && c.pid
                .is_some_and(|p| p > 0 && rtlab_sys::process::thread_in_this_process(p as u32))
    };
    // Where the late thread was asleep again, what ran on its CPU did not keep it: rtlab's
    // own threads there are not named at all (the sleep is one cause, whoever ran).
    let again = |c: &Cause| c.reason == Some(rtlab_stats::result::ReasonCode::AsleepAgain);
    if causes.iter().any(|c| again(c) && own_thread(c)) {
        let mut asleep = 0;
        causes.retain(|c| {
            let drop = again(c) && (own_thread(c) || c.task.is_none());
            asleep += if drop { c.duration_ns } else { 0 };
            !drop
        });
        causes.push(taskless(CauseKind::Blocking, asleep, Reason::AsleepAgain));
        causes.sort_by_key(|c| std::cmp::Reverse(c.duration_ns));
    }
    let ours = own_thread;
    if !causes.iter().any(ours) {
        return causes;
    }
    let (observer, mut rest): (Vec<Cause>, Vec<Cause>) = causes.into_iter().partition(ours);
    let comm = observer
        .iter()
        .max_by_key(|c| c.duration_ns)
        .and_then(|c| c.task.clone())
        .unwrap_or_else(|| "rtlab".into());
    let ns = observer.iter().map(|c| c.duration_ns).sum();
    rest.push(taskless(CauseKind::Observer, ns, Reason::Observer { comm }));
    rest.sort_by_key(|c| std::cmp::Reverse(c.duration_ns));
    rest
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_stats::result::ReasonCode;

    fn cause(kind: CauseKind, ns: u64, task: Option<&str>, reason: Reason) -> Cause {
        Cause {
            kind,
            duration_ns: ns,
            task: task.map(String::from),
            pid: task.map(|_| rtlab_sys::futex::current_tid() as i64),
            prio: None,
            detail: Some(reason.to_string()),
            reason: Some(reason.code()),
            stall_ns: None,
        }
    }

    #[test]
    fn rtlab_running_while_the_thread_slept_again_is_not_named_and_when_it_ran_it_is_the_observer()
    {
        let again = Reason::AsleepAgain;
        let causes = as_observer(vec![
            cause(
                CauseKind::Blocking,
                3_000_000,
                Some("rtlab-explain"),
                again.clone(),
            ),
            cause(CauseKind::Blocking, 1_000_000, None, again.clone()),
            cause(CauseKind::Blocking, 200_000, Some("kworker/0:1"), again),
            cause(
                CauseKind::Preemption,
                50_000,
                Some("rtlab"),
                Reason::NonPreemptible,
            ),
        ]);
        let got: Vec<(CauseKind, u64, Option<&str>, Option<ReasonCode>)> = causes
            .iter()
            .map(|c| (c.kind, c.duration_ns, c.task.as_deref(), c.reason))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    CauseKind::Blocking,
                    4_000_000,
                    None,
                    Some(ReasonCode::AsleepAgain)
                ),
                (
                    CauseKind::Blocking,
                    200_000,
                    Some("kworker/0:1"),
                    Some(ReasonCode::AsleepAgain)
                ),
                (
                    CauseKind::Observer,
                    50_000,
                    None,
                    Some(ReasonCode::Observer)
                ),
            ]
        );
    }
}
