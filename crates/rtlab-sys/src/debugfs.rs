//! Reading the scheduler's settings in debugfs (`/sys/kernel/debug/sched/...`), telling apart
//! the reasons one cannot be: debugfs not mounted, access denied (some kernels and sandboxes
//! refuse even root: `debugfs=` restrictions, lockdown, a VM's policy), or a file this kernel
//! does not have (the fair server came with Linux 6.12, the run-time preemption switch with
//! PREEMPT_DYNAMIC).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Where debugfs is mounted, relative to the root of the machine.
pub const MOUNT: &str = "sys/kernel/debug";

/// The run-time preemption model (PREEMPT_DYNAMIC kernels): `none voluntary (full) lazy`.
pub const PREEMPT: &str = "sched/preempt";

/// A CPU's fair server setting (`runtime` or `period`, in ns), Linux 6.12 and later.
pub fn fair_server(cpu: usize, setting: &str) -> String {
    format!("sched/fair_server/cpu{cpu}/{setting}")
}

/// Why a debugfs file could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DebugfsError {
    /// The file exists but reading it is refused (EPERM or EACCES).
    #[error("debugfs denies access")]
    Denied,
    /// Nothing is mounted at /sys/kernel/debug.
    #[error("debugfs is not mounted (mount -t debugfs none /sys/kernel/debug)")]
    NotMounted,
    /// debugfs is mounted but this kernel has no such file.
    #[error("this kernel has no such setting")]
    Absent,
    /// Any other error.
    #[error("read error ({0:?})")]
    Other(ErrorKind),
}

/// The file `rel` (e.g. [`PREEMPT`]) of the debugfs under `root` (`/` on the machine; a
/// directory laid out like it in tests).
pub fn path_in(root: &Path, rel: &str) -> PathBuf {
    root.join(MOUNT).join(rel)
}

/// The trimmed text of debugfs file `rel` under `root`, or why it cannot be read.
pub fn read_in(root: &Path, rel: &str) -> Result<String, DebugfsError> {
    match std::fs::read_to_string(path_in(root, rel)) {
        Ok(text) => Ok(text.trim().to_string()),
        Err(e) => Err(classify(e.kind(), || mounted(root))),
    }
}

/// [`read_in`] on this machine.
pub fn read(rel: &str) -> Result<String, DebugfsError> {
    read_in(Path::new("/"), rel)
}

/// Whether anything is mounted at debugfs's place under `root`: an unmounted mount point is
/// an empty directory; one we may not list is there and denies us.
fn mounted(root: &Path) -> Result<bool, DebugfsError> {
    match std::fs::read_dir(root.join(MOUNT)) {
        Ok(mut entries) => Ok(entries.next().is_some()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(classify(e.kind(), || Ok(true))),
    }
}

fn classify(kind: ErrorKind, mounted: impl FnOnce() -> Result<bool, DebugfsError>) -> DebugfsError {
    match kind {
        ErrorKind::PermissionDenied => DebugfsError::Denied,
        ErrorKind::NotFound => match mounted() {
            Ok(true) => DebugfsError::Absent,
            Ok(false) => DebugfsError::NotMounted,
            Err(e) => e,
        },
        other => DebugfsError::Other(other),
    }
}

/// The selected word of a debugfs selector file: `none voluntary (full) lazy` -> `full`.
pub fn selected(text: &str) -> Option<&str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('(').and_then(|w| w.strip_suffix(')')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_laid_out_debugfs_is_read_and_each_failure_named() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        assert_eq!(read_in(r, PREEMPT), Err(DebugfsError::NotMounted));
        std::fs::create_dir_all(r.join(MOUNT)).unwrap();
        assert_eq!(read_in(r, PREEMPT), Err(DebugfsError::NotMounted));
        std::fs::create_dir_all(path_in(r, "sched")).unwrap();
        assert_eq!(read_in(r, PREEMPT), Err(DebugfsError::Absent));
        std::fs::write(path_in(r, PREEMPT), "none voluntary (full) lazy\n").unwrap();
        assert_eq!(
            read_in(r, PREEMPT).as_deref(),
            Ok("none voluntary (full) lazy")
        );
        assert_eq!(
            classify(ErrorKind::PermissionDenied, || Ok(true)),
            DebugfsError::Denied
        );
        assert_eq!(
            DebugfsError::Denied.to_string(),
            "debugfs denies access",
            "check prints it after 'cannot read: '"
        );
    }

    #[test]
    fn the_selected_word_is_the_parenthesised_one() {
        assert_eq!(selected("none voluntary (full) lazy"), Some("full"));
        assert_eq!(selected("(none) voluntary full"), Some("none"));
        assert_eq!(selected("50000000"), None);
    }
}
