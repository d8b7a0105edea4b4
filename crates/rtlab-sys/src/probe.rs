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
