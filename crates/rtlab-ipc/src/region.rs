//! Where a channel's shared memory lives: an anonymous `MAP_SHARED` mapping (shared with
//! `fork`ed children) or a named POSIX shared-memory object under `/dev/shm` (opened by any
//! process that knows the name and has the permission).
//!
//! A named object is created under a private temporary name, sized and initialised, and only
//! then linked to its public name (`link(2)` fails if the name exists), so no process can ever
//! open a half-initialised channel. When the name exists, the caller's `stale` check decides
//! whether it belongs to a crashed run (then it is removed and created again) or is in use.
//! The creating process removes the name when its channel is dropped.

use crate::IpcError;
use rtlab_sys::mem::AnonMapping;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

const SHM_DIR: &str = "/dev/shm";

/// Shared memory plus, for a named one this process created, the duty to remove the name.
#[derive(Debug)]
pub(crate) struct Region {
    pub(crate) map: AnonMapping,
    owned: Option<OwnedName>,
    /// (device, inode) of a named object: what a name must still point at before rtlab
    /// removes it (another process may have put a new object there meanwhile).
    identity: Option<(u64, u64)>,
}

#[derive(Debug)]
struct OwnedName {
    path: PathBuf,
    creator: u32,
    identity: (u64, u64),
}

/// (device, inode) of what `path` itself names now (a link is not followed).
fn identity_at(path: &std::path::Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Removes `path` if it still names the object `identity` (the check and the removal are
/// two steps: a replacement in between is possible but needs a process racing it exactly).
fn remove_if_same(path: &std::path::Path, identity: (u64, u64)) {
    if identity_at(path) == Some(identity) {
        let _ = std::fs::remove_file(path);
    }
}

impl Drop for OwnedName {
    fn drop(&mut self) {
        // A forked child that drops its copy must not remove its parent's name, and a name
        // that now points at somebody else's object is not ours any more.
        if std::process::id() == self.creator {
            remove_if_same(&self.path, self.identity);
        }
    }
}

/// `/dev/shm/<name>` for a POSIX-style name (`/name` or `name`: letters, digits, `.`, `_`,
/// `-`; not starting with a dot).
pub(crate) fn shm_path(name: &str) -> Result<PathBuf, IpcError> {
    let bare = name.strip_prefix('/').unwrap_or(name);
    let valid = !bare.is_empty()
        && bare.len() <= 200
        && !bare.starts_with('.')
        && bare
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !valid {
        return Err(IpcError::Create(format!(
            "invalid shared-memory name '{name}' (letters, digits, '.', '_', '-'; at most 200)"
        )));
    }
    Ok(PathBuf::from(SHM_DIR).join(bare))
}

fn io_error(what: &str, path: &std::path::Path, e: std::io::Error) -> IpcError {
    IpcError::Create(format!("{what} {}: {e}", path.display()))
}

impl Region {
    /// Anonymous shared memory of `len` zeroed bytes.
    pub(crate) fn anonymous(len: usize) -> Result<Region, IpcError> {
        let map = AnonMapping::new_shared(len).map_err(|e| IpcError::Create(e.to_string()))?;
        Ok(Region {
            map,
            owned: None,
            identity: None,
        })
    }

    /// Creates `/dev/shm/<name>` with `len` bytes and permission `mode`, initialised by `init`
    /// before anyone else can open it. An existing object of that name is replaced if
    /// `stale(&region)` says it belongs to no live process; otherwise the result is its error.
    pub(crate) fn create_named(
        name: &str,
        len: usize,
        mode: u32,
        init: impl FnOnce(&AnonMapping),
        stale: impl Fn(&Region) -> Result<(), IpcError>,
    ) -> Result<Region, IpcError> {
        let path = shm_path(name)?;
        let me = std::process::id();
        let tmp = path.with_file_name(format!(
            ".{}.{me}.{}.tmp",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("rtlab"),
            rtlab_sys::time::monotonic_now_ns()
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(|e| io_error("cannot create", &tmp, e))?;
        let meta = file
            .metadata()
            .map_err(|e| io_error("cannot stat", &tmp, e))?;
        let identity = (meta.dev(), meta.ino());
        // Remove the temporary name whatever happens below.
        let _tmp = OwnedName {
            path: tmp.clone(),
            creator: me,
            identity,
        };
        // The umask may have cleared bits the caller asked for.
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .and_then(|_| file.set_len(len as u64))
            .map_err(|e| io_error("cannot size", &tmp, e))?;
        let map = AnonMapping::shared_file(file.as_fd(), len)
            .map_err(|e| IpcError::Create(e.to_string()))?;
        init(&map);
        for attempt in 0..2 {
            match std::fs::hard_link(&tmp, &path) {
                Ok(()) => {
                    return Ok(Region {
                        map,
                        owned: Some(OwnedName {
                            path,
                            creator: me,
                            identity,
                        }),
                        identity: Some(identity),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt == 0 => {
                    match Region::open_named(name) {
                        Ok(existing) => {
                            stale(&existing)?;
                            // Only the object judged stale is removed, not one that a live
                            // process published under the name since.
                            if let Some(old) = existing.identity {
                                remove_if_same(&path, old);
                            }
                            continue;
                        }
                        // Not a channel at all: someone else's object; leave it alone.
                        Err(IpcError::Corrupt(why)) => {
                            return Err(IpcError::Busy(format!(
                                "{} exists and is not an rtlab channel ({why})",
                                path.display()
                            )))
                        }
                        // Vanished meanwhile: just retry.
                        Err(_) => {}
                    }
                }
                Err(e) => return Err(io_error("cannot publish", &path, e)),
            }
        }
        Err(IpcError::Busy(format!(
            "{} was created again while it was being reclaimed",
            path.display()
        )))
    }

    /// Maps an existing `/dev/shm/<name>`; the caller validates what it contains.
    pub(crate) fn open_named(name: &str) -> Result<Region, IpcError> {
        let path = shm_path(name)?;
        // Never through a link, and only an object of this user or root: the channel's memory
        // is trusted to be a channel, and another user's could be anything.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| io_error("cannot open", &path, e))?;
        let meta = file
            .metadata()
            .map_err(|e| io_error("cannot stat", &path, e))?;
        let me = rtlab_sys::process::effective_uid();
        if meta.uid() != me && meta.uid() != 0 {
            return Err(IpcError::Corrupt(format!(
                "{} belongs to uid {}, not to this user (uid {me}) or root",
                path.display(),
                meta.uid()
            )));
        }
        let len = meta.len();
        if !(4096..=(1 << 40)).contains(&len) {
            return Err(IpcError::Corrupt(format!(
                "{} has {len} bytes",
                path.display()
            )));
        }
        let map = AnonMapping::shared_file(file.as_fd(), len as usize)
            .map_err(|e| IpcError::Create(e.to_string()))?;
        Ok(Region {
            map,
            owned: None,
            identity: Some((meta.dev(), meta.ino())),
        })
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Start of the memory.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// The public name's path if this process created it.
    pub(crate) fn owned_path(&self) -> Option<&std::path::Path> {
        self.owned.as_ref().map(|o| o.path.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(
            shm_path("/a.b-c_1").unwrap(),
            PathBuf::from("/dev/shm/a.b-c_1")
        );
        for bad in ["", "/", "a/b", ".hidden", "x y", "../etc"] {
            assert!(shm_path(bad).is_err(), "{bad}");
        }
    }
}
