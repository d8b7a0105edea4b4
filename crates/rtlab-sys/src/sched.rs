//! Scheduling policy and priority of the calling thread.

use crate::SysError;
use std::fmt;
use std::str::FromStr;

/// A Linux scheduling policy that rtlab uses for measuring threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// `SCHED_FIFO`: real-time, runs until it blocks or a higher priority preempts it.
    Fifo,
    /// `SCHED_RR`: real-time, round-robin among equal priorities.
    Rr,
    /// `SCHED_OTHER`: the default time-sharing policy (priority is always 0).
    Other,
}

impl Policy {
    /// Lowest and highest static priority the kernel accepts for this policy.
    pub fn priority_range(self) -> (u32, u32) {
        match self {
            Policy::Fifo | Policy::Rr => (1, 99),
            Policy::Other => (0, 0),
        }
    }

    /// True for the real-time policies.
    pub fn is_realtime(self) -> bool {
        !matches!(self, Policy::Other)
    }

    fn raw(self) -> libc::c_int {
        match self {
            Policy::Fifo => libc::SCHED_FIFO,
            Policy::Rr => libc::SCHED_RR,
            Policy::Other => libc::SCHED_OTHER,
        }
    }

    /// The name used on the command line and in result documents (`fifo`, `rr`, `other`).
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Rr => "rr",
            Policy::Other => "other",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy name that is none of rtlab's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy '{0}' (expected fifo, rr or other)")]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, UnknownPolicy> {
        match s.to_ascii_lowercase().as_str() {
            "fifo" => Ok(Policy::Fifo),
            "rr" => Ok(Policy::Rr),
            "other" | "normal" => Ok(Policy::Other),
            _ => Err(UnknownPolicy(s.to_string())),
        }
    }
}

/// Sets the policy and static priority of the calling thread.
///
/// C: `sched_setscheduler(0, policy, &(struct sched_param){prio})`; with pid 0 Linux applies it
/// to the calling thread only. Fails with [`SysError::PermissionDenied`] without
/// `CAP_SYS_NICE` or a sufficient `RLIMIT_RTPRIO`.
pub fn set_current_thread_scheduler(policy: Policy, prio: u32) -> Result<(), SysError> {
    set_thread_scheduler(0, policy, prio)
}

/// [`set_current_thread_scheduler`] for thread `tid` (0: the calling thread), any process's
/// (a kernel thread's too, as root): `chrt -p`.
pub fn set_thread_scheduler(tid: i32, policy: Policy, prio: u32) -> Result<(), SysError> {
    let what = || {
        format!(
            "sched_setscheduler({tid}, {}, {prio})",
            policy.as_str().to_uppercase()
        )
    };
    let (lo, hi) = policy.priority_range();
    if prio < lo || prio > hi {
        return Err(SysError::Invalid { what: what() });
    }
    let param = libc::sched_param {
        sched_priority: prio as libc::c_int,
    };
    // SAFETY: `param` is a valid, initialised sched_param that outlives the call; the kernel
    // checks `tid` and the caller's right to change it.
    let rc = unsafe { libc::sched_setscheduler(tid, policy.raw(), &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(SysError::from_io(what(), std::io::Error::last_os_error()))
    }
}

/// Whether thread `tid` runs under a real-time policy (FIFO, RR or DEADLINE), None where it
/// is gone. C: `sched_getscheduler(tid)` (a system call, no `/proc` file to read).
pub fn thread_is_realtime(tid: i32) -> Option<bool> {
    // SAFETY: no pointer arguments; the kernel checks `tid`.
    let raw = unsafe { libc::sched_getscheduler(tid) };
    let policy = raw & !libc::SCHED_RESET_ON_FORK;
    // 6: SCHED_DEADLINE.
    (raw >= 0).then_some(matches!(policy, libc::SCHED_FIFO | libc::SCHED_RR | 6))
}

/// Policy and priority of the calling thread, as the kernel reports them.
pub fn current_thread_scheduler() -> (Option<Policy>, u32) {
    // SAFETY: pid 0 is the calling thread; sched_getscheduler has no pointer arguments.
    let raw = unsafe { libc::sched_getscheduler(0) };
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid, writable sched_param for the duration of the call.
    let rc = unsafe { libc::sched_getparam(0, &mut param) };
    let prio = if rc == 0 {
        param.sched_priority.max(0) as u32
    } else {
        0
    };
    // SCHED_RESET_ON_FORK may be or-ed into the returned policy.
    let policy = match raw & !libc::SCHED_RESET_ON_FORK {
        libc::SCHED_FIFO => Some(Policy::Fifo),
        libc::SCHED_RR => Some(Policy::Rr),
        libc::SCHED_OTHER => Some(Policy::Other),
        _ => None,
    };
    (policy, prio)
}

/// Sets every SCHED_FIFO/SCHED_RR thread of process `pid` but those in `except` to
/// SCHED_OTHER; returns how many it demoted. C: `sched_setscheduler(tid, SCHED_OTHER, 0)` on
/// each thread whose `sched_getscheduler(tid)` is real-time. Threads may come and go while
/// it runs: one that vanished is skipped.
pub fn demote_realtime_threads(pid: u32, except: &[i32]) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    let mut demoted = 0;
    for tid in tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<i32>().ok())
        .filter(|tid| !except.contains(tid))
    {
        // SAFETY: plain syscalls on a thread id; a stale id fails with ESRCH and is skipped.
        let raw = unsafe { libc::sched_getscheduler(tid) };
        if raw < 0 {
            continue;
        }
        if matches!(
            raw & !libc::SCHED_RESET_ON_FORK,
            libc::SCHED_FIFO | libc::SCHED_RR
        ) {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: `param` is a valid sched_param that outlives the call.
            if unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) } == 0 {
                demoted += 1;
            }
        }
    }
    demoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_policies() {
        assert_eq!("FIFO".parse::<Policy>(), Ok(Policy::Fifo));
        assert_eq!("rr".parse::<Policy>(), Ok(Policy::Rr));
        assert_eq!("other".parse::<Policy>(), Ok(Policy::Other));
        assert!("deadline".parse::<Policy>().is_err());
    }

    #[test]
    fn out_of_range_priority_is_rejected_before_the_syscall() {
        let err = set_current_thread_scheduler(Policy::Fifo, 100).unwrap_err();
        assert!(matches!(err, SysError::Invalid { .. }), "{err}");
        let err = set_current_thread_scheduler(Policy::Other, 5).unwrap_err();
        assert!(matches!(err, SysError::Invalid { .. }), "{err}");
    }

    #[test]
    fn a_thread_is_real_time_as_its_policy_says() {
        assert_eq!(thread_is_realtime(0), Some(false));
        assert_eq!(thread_is_realtime(i32::MAX), None);
        std::thread::spawn(|| {
            if set_current_thread_scheduler(Policy::Fifo, 1).is_ok() {
                assert_eq!(thread_is_realtime(0), Some(true));
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn other_policy_round_trips() {
        // Runs on a fresh thread so the test harness thread keeps its own policy.
        std::thread::spawn(|| {
            set_current_thread_scheduler(Policy::Other, 0).unwrap();
            assert_eq!(current_thread_scheduler(), (Some(Policy::Other), 0));
        })
        .join()
        .unwrap();
    }
}
