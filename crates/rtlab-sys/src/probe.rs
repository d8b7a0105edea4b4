//! Capability probes: what this process may do, checked for real where that is harmless.

use crate::sched::{set_current_thread_scheduler, Policy};
use std::path::Path;

/// What the process can do, as recorded in `system.privileges` of a result document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Privileges {
    /// A thread may switch itself to `SCHED_FIFO` (tried on a throw-away thread).
    pub rt_sched: bool,
    /// `mlockall` can lock everything: `CAP_IPC_LOCK` or an unlimited `RLIMIT_MEMLOCK`.
    pub mlock: bool,
    /// tracefs is mounted and readable, or could be mounted by this (root) process.
    pub tracefs: bool,
}

/// Runs all probes. Cheap (one short-lived thread).
pub fn probe_privileges() -> Privileges {
    Privileges {
        rt_sched: can_use_fifo(1),
        mlock: can_lock_all_memory(),
        tracefs: tracefs_usable(),
    }
}

/// True when a thread of this process may become `SCHED_FIFO` at `prio`.
pub fn can_use_fifo(prio: u32) -> bool {
    std::thread::Builder::new()
        .name("rtlab-probe".into())
        .stack_size(64 * 1024)
        .spawn(move || set_current_thread_scheduler(Policy::Fifo, prio).is_ok())
        .ok()
        .and_then(|h| h.join().ok())
        .unwrap_or(false)
}

/// Why `SCHED_FIFO` at `prio` is refused here (after [`can_use_fifo`] said no), in words a
/// user can act on: the missing capability and the RLIMIT_RTPRIO it would need, or, with the
/// capability, a cgroup without a real-time budget.
pub fn fifo_refusal_cause(prio: u32) -> String {
    const CAP_SYS_NICE: u32 = 23;
    let capable = effective_capabilities() & (1 << CAP_SYS_NICE) != 0;
    let (_, rtprio) = crate::process::rt_limits();
    let membership = crate::cgroup::Membership::of_self();
    let budget = membership
        .cpu_v1
        .as_deref()
        .and_then(crate::cgroup::rt_runtime_us);
    fifo_refusal_text(capable, rtprio, prio, membership.path(), budget)
}

/// [`fifo_refusal_cause`] from what was read.
fn fifo_refusal_text(
    capable: bool,
    rtprio: Option<u64>,
    prio: u32,
    cgroup: &str,
    rt_runtime_us: Option<i64>,
) -> String {
    if rt_runtime_us == Some(0) {
        return format!(
            "the cgroup {cgroup} has no real-time budget (cpu.rt_runtime_us=0): give it one, \
             or run outside it"
        );
    }
    if !capable && rtprio.is_some_and(|r| r < u64::from(prio)) {
        return format!(
            "no CAP_SYS_NICE, and RLIMIT_RTPRIO is {} (below {prio})",
            rtprio.unwrap_or(0)
        );
    }
    if capable && cgroup != "/" {
        return format!(
            "refused despite CAP_SYS_NICE: the cgroup {cgroup} likely has no real-time budget \
             (kernels with RT group scheduling refuse SCHED_FIFO outside the root cgroup \
             unless it has one)"
        );
    }
    if capable {
        "refused despite CAP_SYS_NICE (a security policy, e.g. seccomp or SELinux?)".into()
    } else {
        "no CAP_SYS_NICE".into()
    }
}

fn effective_capabilities() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

fn can_lock_all_memory() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    if effective_capabilities() & (1 << CAP_IPC_LOCK) != 0 {
        return true;
    }
    let limit = rustix::process::getrlimit(rustix::process::Resource::Memlock);
    limit.current.is_none()
}

/// The tracefs mount point, if tracefs is mounted there.
pub fn tracefs_mount() -> Option<&'static Path> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.join("trace").exists())
}

fn tracefs_usable() -> bool {
    if tracefs_mount().is_some() {
        return true;
    }
    let supported = std::fs::read_to_string("/proc/filesystems")
        .map(|s| {
            s.lines()
                .any(|l| l.split_whitespace().last() == Some("tracefs"))
        })
        .unwrap_or(false);
    supported && crate::process::effective_uid() == 0
}

#[cfg(test)]
mod refusal_tests {
    use super::fifo_refusal_text;

    #[test]
    fn the_cause_named_is_the_one_that_applies() {
        assert_eq!(
            fifo_refusal_text(false, Some(0), 95, "/", None),
            "no CAP_SYS_NICE, and RLIMIT_RTPRIO is 0 (below 95)"
        );
        assert!(fifo_refusal_text(true, Some(0), 95, "/docker/x", Some(0))
            .starts_with("the cgroup /docker/x has no real-time budget"));
        assert!(fifo_refusal_text(false, None, 95, "/docker/x", Some(0))
            .contains("cpu.rt_runtime_us=0"));
        assert!(
            fifo_refusal_text(true, Some(0), 95, "/kubepods/pod1/c", None)
                .starts_with("refused despite CAP_SYS_NICE: the cgroup /kubepods/pod1/c")
        );
        assert_eq!(
            fifo_refusal_text(false, Some(99), 95, "/", None),
            "no CAP_SYS_NICE"
        );
    }
}
