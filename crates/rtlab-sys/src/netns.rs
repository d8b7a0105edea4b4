//! Named network namespaces, as `ip netns add` makes them (a new namespace bind-mounted on
//! `/run/netns/NAME`), that never outlive the process that made them.
//!
//! The name is made in this process, from a thread of its own: `unshare(CLONE_NEWNET)` moves
//! only the calling thread (a network namespace is per thread), which then bind-mounts its
//! `/proc/thread-self/ns/net` on the name and ends; nothing else of this process changes.
//! Removal is `ip netns del`'s: detach the mount, unlink the name; the kernel destroys the
//! namespace (and a veth end in it, which destroys its pair) once nothing holds it.
//!
//! A [`Janitor`] started **before** the name exists removes it when this process ends, however
//! it ends (even by SIGKILL in the middle of making it: the janitor sees its pipe close only
//! once every thread of this process has left its system calls, so a mount in progress is
//! either made, and removed, or never made).

use crate::process::Janitor;
use crate::SysError;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where `ip netns` keeps the names.
pub const RUN_DIR: &str = "/run/netns";

/// A network namespace named `/run/netns/NAME`; removed on drop, or by its janitor if this
/// process dies first.
#[derive(Debug)]
pub struct NamedNetns {
    path: PathBuf,
    janitor: Option<Janitor>,
}

impl NamedNetns {
    /// Creates the network namespace `name` (C: `unshare(CLONE_NEWNET)` in a thread of its
    /// own, then `mount("/proc/thread-self/ns/net", "/run/netns/NAME", MS_BIND)`). Needs
    /// CAP_SYS_ADMIN. A name that exists already is an error.
    pub fn create(name: &str) -> Result<NamedNetns, SysError> {
        let path = Path::new(RUN_DIR).join(name);
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| SysError::Invalid {
            what: format!("network namespace name {name:?}"),
        })?;
        let remove = || {
            // SAFETY: two syscalls on a C string made before the fork (async-signal-safe).
            unsafe {
                libc::umount2(c_path.as_ptr(), libc::MNT_DETACH);
                libc::unlink(c_path.as_ptr());
            }
        };
        // SAFETY: `remove` makes two syscalls on memory prepared above and frees nothing (it
        // borrows the string).
        let janitor = unsafe { Janitor::start(remove) }?;
        let made = std::thread::scope(|s| {
            s.spawn(|| make_here(&path, &c_path))
                .join()
                .unwrap_or_else(|_| {
                    Err(Unmade::Partly(SysError::Invalid {
                        what: "the thread making a network namespace panicked".into(),
                    }))
                })
        });
        match made {
            Ok(()) => Ok(NamedNetns {
                path,
                janitor: Some(janitor),
            }),
            // Someone else's name (or none): not ours to remove.
            Err(Unmade::Nothing(e)) => {
                janitor.dismiss();
                Err(e)
            }
            Err(Unmade::Partly(e)) => {
                janitor.clean_up();
                Err(e)
            }
        }
    }

    /// `/run/netns/NAME`.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for NamedNetns {
    fn drop(&mut self) {
        // One way out: the janitor removes the name, now, as it would after a crash.
        if let Some(j) = self.janitor.take() {
            j.clean_up();
        }
    }
}

/// Makes [`RUN_DIR`] a mount point with shared propagation, as `ip` does, so a name removed
/// here is removed from mount namespaces made since (`ip netns exec`'s) too.
fn share_run_dir() -> Result<(), SysError> {
    std::fs::create_dir_all(RUN_DIR)
        .map_err(|e| SysError::from_io(format!("mkdir {RUN_DIR}"), e))?;
    let dir = CString::new(RUN_DIR).expect("no NUL");
    let share = || {
        // SAFETY: valid C strings; no data argument.
        unsafe {
            libc::mount(
                c"".as_ptr(),
                dir.as_ptr(),
                c"none".as_ptr(),
                libc::MS_SHARED | libc::MS_REC,
                std::ptr::null(),
            )
        }
    };
    if share() == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EINVAL) {
        return Err(SysError::from_io(
            format!("mount --make-rshared {RUN_DIR}"),
            err,
        ));
    }
    // Not a mount point yet: make it one (bind it on itself), then share it.
    // SAFETY: valid C strings; no data argument.
    let bound = unsafe {
        libc::mount(
            dir.as_ptr(),
            dir.as_ptr(),
            c"none".as_ptr(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    };
    if bound != 0 || share() != 0 {
        return Err(SysError::from_io(
            format!("mount --make-rshared {RUN_DIR}"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Why a namespace was not made, and whether its name was (to be removed).
enum Unmade {
    Nothing(SysError),
    Partly(SysError),
}

/// In a thread of its own: a new network namespace for this thread, bind-mounted on `path`.
fn make_here(path: &Path, c_path: &CString) -> Result<(), Unmade> {
    share_run_dir().map_err(Unmade::Nothing)?;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Unmade::Nothing(SysError::from_io(format!("create {}", path.display()), e)))?;
    // SAFETY: CLONE_NEWNET moves the calling thread only; it ends right after.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(Unmade::Partly(SysError::from_io(
            "unshare(CLONE_NEWNET)",
            std::io::Error::last_os_error(),
        )));
    }
    // SAFETY: valid C strings; no data argument.
    let rc = unsafe {
        libc::mount(
            c"/proc/thread-self/ns/net".as_ptr(),
            c_path.as_ptr(),
            c"none".as_ptr(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(Unmade::Partly(SysError::from_io(
            format!("mount --bind /proc/thread-self/ns/net {}", path.display()),
            std::io::Error::last_os_error(),
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_netns_mount(path: &Path) -> bool {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap()))
    }

    #[test]
    fn a_named_namespace_is_made_entered_and_removed() {
        if crate::process::effective_uid() != 0 {
            crate::testing::say_skipped("a named network namespace needs root");
            return;
        }
        let name = format!("rtlab-test-{}", std::process::id());
        let ns = NamedNetns::create(&name).unwrap();
        assert!(is_netns_mount(ns.path()), "{} mounted", ns.path().display());
        assert!(NamedNetns::create(&name).is_err(), "a name made twice");
        // Only the thread that enters it moves: its loopback is down and alone.
        let path = ns.path().to_path_buf();
        let here = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        let there = std::thread::spawn(move || {
            crate::net::enter_netns(&path).unwrap();
            std::fs::read_link("/proc/thread-self/ns/net").unwrap()
        })
        .join()
        .unwrap();
        assert_ne!(here, there);
        assert_eq!(
            std::fs::read_link("/proc/thread-self/ns/net").unwrap(),
            here
        );
        let path = ns.path().to_path_buf();
        drop(ns);
        assert!(!path.exists() && !is_netns_mount(&path), "removed on drop");
    }
}
