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

/// Tracing instances (`instances/rtlab-<pid>`) whose rtlab is gone: a run killed with SIGKILL
/// leaves its instance tracing (its events on, its buffers allocated) until someone removes it.
pub fn stale_instances() -> Vec<std::path::PathBuf> {
    let Some(root) = crate::probe::tracefs_mount() else {
        return Vec::new();
    };
    stale_instances_in(&root.join("instances"), |pid| {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    })
}

fn stale_instances_in(
    instances: &std::path::Path,
    alive: impl Fn(u32) -> bool,
) -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = std::fs::read_dir(instances)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("rtlab-"))
                .and_then(|p| p.parse::<u32>().ok())
                .is_some_and(|pid| !alive(pid))
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Removes [`stale_instances`] (tracing off first); returns those it removed.
pub fn remove_stale_instances() -> Vec<std::path::PathBuf> {
    stale_instances()
        .into_iter()
        .filter(|dir| {
            let _ = std::fs::write(dir.join("tracing_on"), "0");
            let _ = std::fs::write(dir.join("events/enable"), "0");
            std::fs::remove_dir(dir).is_ok()
        })
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

/// Removes the uprobe events of `group` (disabled first: nothing may trace them any more);
/// returns how many were removed.
pub fn remove_uprobe_group(group: &str) -> usize {
    let Some(root) = crate::probe::tracefs_mount() else {
        return 0;
    };
    let text = std::fs::read_to_string(root.join("uprobe_events")).unwrap_or_default();
    uprobe_events_in(&text)
        .into_iter()
        .filter(|(g, _)| g == group)
        .filter(|(g, n)| {
            let _ = std::fs::write(root.join(format!("events/{g}/{n}/enable")), "0");
            define_uprobe(&format!("-:{g}/{n}")).is_ok()
        })
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
                .and_then(|p| p.parse::<u32>().ok())
                .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
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
        for name in ["rtlab-100", "rtlab-200", "rtlab-x", "other-300", "rtlab-"] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        let stale = stale_instances_in(dir.path(), |pid| pid == 200);
        assert_eq!(stale, vec![dir.path().join("rtlab-100")]);
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
