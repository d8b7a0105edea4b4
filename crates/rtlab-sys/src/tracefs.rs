//! Mounting tracefs where it is not mounted yet (root only).

use crate::error::SysError;
use std::ffi::CString;

/// Where rtlab mounts tracefs.
pub const MOUNT_POINT: &str = "/sys/kernel/tracing";

/// C: `mount("nodev", "/sys/kernel/tracing", "tracefs", 0, NULL)`.
pub fn mount() -> Result<(), SysError> {
    let (src, dst, fs) = (
        CString::new("nodev").expect("no NUL"),
        CString::new(MOUNT_POINT).expect("no NUL"),
        CString::new("tracefs").expect("no NUL"),
    );
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        return Err(SysError::from_io(
            format!("mount(tracefs, {MOUNT_POINT})"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// C: `umount2("/sys/kernel/tracing", MNT_DETACH)`.
pub fn unmount() -> Result<(), SysError> {
    let dst = CString::new(MOUNT_POINT).expect("no NUL");
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::umount2(dst.as_ptr(), libc::MNT_DETACH) };
    if rc != 0 {
        return Err(SysError::from_io(
            format!("umount({MOUNT_POINT})"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// What this run names the things it makes in tracefs with (its instance `rtlab-<tag>`, its
/// uprobe group `rtlab_<tag>`): its pid, its start time and the boot's (`<pid>_<start>_<boot>`).
/// A later process given the same pid, or a run of an earlier boot, is not this one.
pub fn run_tag() -> String {
    let pid = std::process::id();
    match (crate::procfs::task_start_ticks(pid as i64), boot_tag()) {
        (Some(start), Some(boot)) => format!("{pid}_{start}_{boot}"),
        _ => pid.to_string(),
    }
}

/// The first 8 hex digits of this boot's id.
fn boot_tag() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let hex: String = id
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .take(8)
        .collect();
    (hex.len() == 8).then_some(hex)
}

/// Whether the run of `tag` ([`run_tag`]; a bare pid from an older version) is alive as far
/// as this PID namespace sees: its pid there, started when the tag says, in this boot. A run
/// in another PID namespace sharing this tracefs looks gone from here: what is removed as
/// stale is only ever removed if the kernel lets it go (see [`remove_stale_instances`]).
fn tag_alive(tag: &str) -> bool {
    let mut parts = tag.split('_');
    let Some(pid) = parts.next().and_then(|p| p.parse::<i64>().ok()) else {
        return true; // not one of ours: left alone
    };
    let (start, boot) = (parts.next(), parts.next());
    let started = crate::procfs::task_start_ticks(pid);
    started.is_some()
        && start.is_none_or(|s| s.parse::<u64>().ok() == started)
        && boot.is_none_or(|b| boot_tag().is_none_or(|ours| ours == b))
}

/// Tracing instances (`instances/rtlab-<tag>`) whose rtlab is gone: a run killed with SIGKILL
/// leaves its instance tracing (its events on, its buffers allocated) until someone removes it.
pub fn stale_instances() -> Vec<std::path::PathBuf> {
    let Some(root) = crate::probe::tracefs_mount() else {
        return Vec::new();
    };
    stale_instances_in(&root.join("instances"), tag_alive)
}

fn stale_instances_in(
    instances: &std::path::Path,
    alive: impl Fn(&str) -> bool,
) -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = std::fs::read_dir(instances)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("rtlab-"))
                .filter(|tag| {
                    tag.split('_')
                        .next()
                        .is_some_and(|p| p.parse::<u32>().is_ok())
                })
                .is_some_and(|tag| !alive(tag))
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Removes [`stale_instances`]; returns those it removed. Only by `rmdir`, which the kernel
/// refuses (EBUSY) while a run still reads the instance: nothing of a live run is ever
/// turned off, even one in another PID namespace that looks gone from here.
pub fn remove_stale_instances() -> Vec<std::path::PathBuf> {
    stale_instances()
        .into_iter()
        .filter(|dir| std::fs::remove_dir(dir).is_ok())
        .collect()
}

/// Appends `line` to tracefs' `uprobe_events` (appending: opening it to write from the start
/// would remove every uprobe event of the machine).
pub fn define_uprobe(line: &str) -> Result<(), SysError> {
    use std::io::Write;
    let root = crate::probe::tracefs_mount().ok_or_else(|| SysError::Invalid {
        what: "tracefs is not mounted".into(),
    })?;
    let path = root.join("uprobe_events");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()))
        .map_err(|e| SysError::from_io(path.display().to_string(), e))
}

/// The groups of the uprobe events in `text` (uprobe_events' `p:GROUP/NAME ...` lines), with
/// each event's name.
fn uprobe_events_in(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let spec = l.split_whitespace().next()?;
            let (group, name) = spec.split_once(':')?.1.split_once('/')?;
            Some((group.to_string(), name.to_string()))
        })
        .collect()
}

/// Removes the uprobe events of `group`; returns how many were removed. The kernel refuses
/// (EBUSY) to remove one an instance still traces: a live run's are never disturbed.
pub fn remove_uprobe_group(group: &str) -> usize {
    let Some(root) = crate::probe::tracefs_mount() else {
        return 0;
    };
    let text = std::fs::read_to_string(root.join("uprobe_events")).unwrap_or_default();
    uprobe_events_in(&text)
        .into_iter()
        .filter(|(g, _)| g == group)
        .filter(|(g, n)| define_uprobe(&format!("-:{g}/{n}")).is_ok())
        .count()
}

/// Removes the uprobe events of rtlab runs that are gone (groups `rtlab_<pid>`: a run killed
/// with SIGKILL leaves its definitions behind); returns the groups removed.
pub fn remove_stale_uprobes() -> Vec<String> {
    let Some(root) = crate::probe::tracefs_mount() else {
        return Vec::new();
    };
    let text = std::fs::read_to_string(root.join("uprobe_events")).unwrap_or_default();
    let mut groups: Vec<String> = uprobe_events_in(&text)
        .into_iter()
        .map(|(g, _)| g)
        .filter(|g| {
            g.strip_prefix("rtlab_")
                .filter(|tag| {
                    tag.split('_')
                        .next()
                        .is_some_and(|p| p.parse::<u32>().is_ok())
                })
                .is_some_and(|tag| !tag_alive(tag))
        })
        .collect();
    groups.dedup();
    groups.retain(|g| remove_uprobe_group(g) > 0);
    groups
}

#[cfg(test)]
mod stale_tests {
    use super::*;

    #[test]
    fn only_instances_of_dead_rtlab_runs_are_stale() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "rtlab-100",
            "rtlab-200",
            "rtlab-x",
            "other-300",
            "rtlab-",
            "rtlab-7_9_ab",
        ] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        let stale = stale_instances_in(dir.path(), |tag| tag == "200");
        assert_eq!(
            stale,
            vec![
                dir.path().join("rtlab-100"),
                dir.path().join("rtlab-7_9_ab")
            ]
        );
    }

    #[test]
    fn a_run_is_its_pid_started_when_its_tag_says_in_this_boot() {
        // Regression (hardening, third review, #7): a run was judged by its pid alone.
        let me = run_tag();
        assert!(tag_alive(&me), "{me}");
        let mut parts = me.split('_');
        let (pid, start, boot) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        // The same pid started at another time: a later process, not this run.
        let later: u64 = start.parse::<u64>().unwrap() + 1;
        assert!(!tag_alive(&format!("{pid}_{later}_{boot}")));
        // ... or of another boot.
        assert!(!tag_alive(&format!("{pid}_{start}_00000000")));
        assert!(
            tag_alive(pid),
            "a bare pid of an older version, still running"
        );
    }

    #[test]
    fn uprobe_events_are_read_by_group_and_name() {
        let text = "p:rtlab_42/hotspot_safepoint__begin_0 /usr/lib/libjvm.so:0x0000000000f333c0\n\
                    p:other/x /bin/sh:0x10 arg=%ax:u64\n";
        assert_eq!(
            uprobe_events_in(text),
            vec![
                (
                    "rtlab_42".to_string(),
                    "hotspot_safepoint__begin_0".to_string()
                ),
                ("other".to_string(), "x".to_string())
            ]
        );
    }
}
