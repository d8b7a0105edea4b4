//! Creating files safely as root.
//!
//! rtlab runs as root and writes into directories other users may share (`/tmp`, a report
//! directory). A file opened by a predictable name with `open(O_CREAT|O_TRUNC)` follows a
//! symlink another user planted there and truncates whatever it points to. Every file rtlab
//! creates goes through this module instead: a new name nobody can guess, created with
//! `O_CREAT|O_EXCL|O_NOFOLLOW` (fails on anything already there, link or not), and for a
//! result file that must have a fixed name, `rename(2)` of that new file onto the name, which
//! replaces a planted link itself and never writes through it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
#[cfg(test)]
use std::os::unix::fs::PermissionsExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// 64 unpredictable bits as 16 hex digits, from the kernel's random source.
pub fn random_suffix() -> io::Result<String> {
    let mut bytes = [0u8; 8];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(format!("{:016x}", u64::from_ne_bytes(bytes)))
}

/// `open(path, O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode)`: a file that did not
/// exist before, never an existing file or the target of a link.
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates a new file `dir/<prefix><random><suffix>` (see [`create_new`]) and returns it with
/// its path. Retries on the (astronomically unlikely) collision with an existing name.
pub fn create_unique(
    dir: &Path,
    prefix: &str,
    suffix: &str,
    mode: u32,
) -> io::Result<(File, PathBuf)> {
    let mut last = None;
    for _ in 0..8 {
        let path = dir.join(format!("{prefix}{}{suffix}", random_suffix()?));
        match create_new(&path, mode) {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free name")))
}

/// The directory `path` is in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Writes `bytes` to `path` atomically and safely: a new file under an unguessable name in
/// the same directory (mode 0644 less the umask), fsync, then `rename(2)` onto `path`. A crash
/// leaves the old file or the whole new one; a link planted at `path` is replaced, not
/// followed; the temporary file is removed on failure. A device or a FIFO that root or the
/// user made there (or a link of theirs to one) is written into instead, as a stream
/// (`--json /dev/stdout`): never replaced by a file ([`is_stream`]).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if is_stream(path)? {
        return OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .and_then(|mut f| f.write_all(bytes));
    }
    replace(path, bytes)
}

/// Whether `path` is a stream to write into: a character device, a FIFO or a socket that a
/// trusted user ([`trusted_uids`]) made, or reached by a link of theirs. Not for anything
/// another user made (a FIFO planted in a shared directory would block the run or read the
/// result: it is replaced), a plain file or a link to one (replaced, as ever), or nothing
/// there. A block device or a directory is an error: a result written there would
/// overwrite a disk, or cannot be.
fn is_stream(path: &Path) -> io::Result<bool> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(own) = std::fs::symlink_metadata(path) else {
        return Ok(false);
    };
    if own.file_type().is_file() || !trusted_uids().contains(&own.uid()) {
        return Ok(false);
    }
    let Ok(what) = std::fs::metadata(path) else {
        return Ok(false);
    };
    let kind = what.file_type();
    if kind.is_block_device() {
        return Err(io::Error::other(
            "is a block device (a result written there would overwrite the disk)",
        ));
    }
    if kind.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory",
        ));
    }
    Ok(!kind.is_file())
}

/// The rename of a new file onto `path` ([`write_atomically`]).
fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (mut file, tmp) = create_unique(&parent_dir(path), &format!(".{name}.tmp-"), "", 0o644)?;
    let result = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The user who invoked rtlab: `SUDO_UID` when run through sudo, else the real user id.
pub fn invoking_uid() -> u32 {
    std::env::var("SUDO_UID")
        .ok()
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| rustix::process::getuid().as_raw())
}

/// The users rtlab trusts with the files it reads and the directories it writes: root, its
/// own real and effective users and the invoking user ([`invoking_uid`]).
pub fn trusted_uids() -> [u32; 4] {
    [
        0,
        rustix::process::geteuid().as_raw(),
        rustix::process::getuid().as_raw(),
        invoking_uid(),
    ]
}

fn refused(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why)
}

/// A directory only trusted users can change: owned by one of them, and writable by no one
/// else (unless sticky, where others may add entries but not replace ours).
fn dir_is_safe(meta: &std::fs::Metadata) -> bool {
    trusted_uids().contains(&meta.uid()) && (meta.mode() & 0o022 == 0 || meta.mode() & 0o1000 != 0)
}

/// Resolves `path` one component at a time, following a symbolic link only where no one but
/// a trusted user could have put it: the link is owned by a trusted user and sits in a
/// directory only trusted users can change ([`dir_is_safe`]; in a sticky directory such as
/// /tmp another user can plant a link of their own, which is refused). Returns the path with
/// every link resolved (a missing tail is kept as given).
pub fn resolve_trusted(path: &Path) -> io::Result<PathBuf> {
    let mut pending: Vec<std::ffi::OsString> = Vec::new();
    let start = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    for c in start.components().rev() {
        pending.push(c.as_os_str().to_os_string());
    }
    let mut resolved = PathBuf::from("/");
    let mut links = 0;
    while let Some(part) = pending.pop() {
        match part.to_str() {
            Some("/") | Some(".") => continue,
            Some("..") => {
                resolved.pop();
                continue;
            }
            _ => {}
        }
        let next = resolved.join(&part);
        let meta = match std::fs::symlink_metadata(&next) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // The rest does not exist (yet): nothing there to follow.
                resolved = next;
                while let Some(rest) = pending.pop() {
                    resolved.push(rest);
                }
                return Ok(resolved);
            }
            Err(e) => return Err(e),
        };
        if !meta.file_type().is_symlink() {
            resolved = next;
            continue;
        }
        let holder = std::fs::metadata(&resolved)?;
        if !trusted_uids().contains(&meta.uid()) || !dir_is_safe(&holder) {
            return Err(refused(format!(
                "{} is a symbolic link that another user (uid {}) could have planted: refusing \
                 to follow it",
                next.display(),
                if trusted_uids().contains(&meta.uid()) {
                    holder.uid()
                } else {
                    meta.uid()
                }
            )));
        }
        links += 1;
        if links > 40 {
            return Err(io::Error::other(format!(
                "{}: too many levels of symbolic links",
                path.display()
            )));
        }
        let target = std::fs::read_link(&next)?;
        if target.is_absolute() {
            resolved = PathBuf::from("/");
        }
        for c in target.components().rev() {
            pending.push(c.as_os_str().to_os_string());
        }
    }
    Ok(resolved)
}

/// Fails unless `dir` is a directory that belongs to root, to this process's effective user
/// or to the invoking user, reached without following a link another user could have planted
/// ([`resolve_trusted`]): a directory another user owns, or a link of theirs on the way to it,
/// lets that user point rtlab's writes anywhere.
pub fn check_dir_owner(dir: &Path) -> io::Result<()> {
    let dir = resolve_trusted(dir)?;
    let meta = std::fs::metadata(&dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "not a directory",
        ));
    }
    let owner = meta.uid();
    if trusted_uids().contains(&owner) {
        Ok(())
    } else {
        Err(refused(format!(
            "owned by uid {owner}, neither root nor the invoking user: refusing to write there"
        )))
    }
}

/// Opens a file rtlab is about to trust as root (a state file that says what to write where):
/// refused, with the rule that refused it, unless it is a regular file (not a link: never
/// followed) owned by a trusted user ([`trusted_uids`]), writable by no one else, in a directory
/// chain no one else can change (each directory from / down owned by a trusted user and not
/// writable by others unless sticky), as sudo and sshd judge their files. The checks are made
/// on the open file, so it cannot be swapped after them.
pub fn open_trusted(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                refused("is a symbolic link (never followed)".into())
            } else {
                e
            }
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused("not a regular file".into()));
    }
    if !trusted_uids().contains(&meta.uid()) {
        return Err(refused(format!(
            "owned by uid {}, neither root nor the invoking user",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(refused(format!(
            "group- or world-writable (mode {:o}): another user could have written it",
            meta.mode() & 0o777
        )));
    }
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let mut dir = parent_dir(&absolute);
    loop {
        let m = std::fs::metadata(&dir)?;
        if !trusted_uids().contains(&m.uid()) {
            return Err(refused(format!(
                "its directory {} is owned by uid {}, neither root nor the invoking user",
                dir.display(),
                m.uid()
            )));
        }
        if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
            return Err(refused(format!(
                "its directory {} is writable by others and not sticky (mode {:o})",
                dir.display(),
                m.mode() & 0o7777
            )));
        }
        if !dir.pop() {
            break;
        }
    }
    Ok(file)
}

/// Opens `path` to append to it, creating it (mode 0644 less the umask) when missing, never
/// through a link (`O_APPEND|O_CREAT|O_NOFOLLOW`), and refusing a file that is not a regular
/// file of a trusted user ([`trusted_uids`]): a log another user planted under the name stays
/// theirs, untouched.
pub fn open_append(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused("not a regular file".into()));
    }
    if !trusted_uids().contains(&meta.uid()) {
        return Err(refused(format!(
            "owned by uid {}, neither root nor the invoking user: refusing to append to it",
            meta.uid()
        )));
    }
    Ok(file)
}

/// The filesystems of the kernel's own settings: procfs, sysfs, debugfs, tracefs.
pub fn is_kernel_settings_file(file: &File) -> io::Result<bool> {
    const SYSFS_MAGIC: u64 = 0x6265_6572;
    const DEBUGFS_MAGIC: u64 = 0x6462_6720;
    const TRACEFS_MAGIC: u64 = 0x7472_6163;
    let kind = rustix::fs::fstatfs(file)?.f_type as u64;
    Ok([
        rustix::fs::PROC_SUPER_MAGIC as u64,
        SYSFS_MAGIC,
        DEBUGFS_MAGIC,
        TRACEFS_MAGIC,
    ]
    .contains(&kind))
}

/// Opens an existing file to write a setting into it, as `echo value > path` would but never
/// creating it and never through a link in its last component (`O_WRONLY|O_NOFOLLOW`, no
/// `O_CREAT`); with `kernel_only`, also refuses a file that is not one of the kernel's own
/// settings ([`is_kernel_settings_file`]).
pub fn open_setting(path: &Path, kernel_only: bool) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    if kernel_only && !is_kernel_settings_file(&file)? {
        return Err(refused(
            "not a kernel setting (not in procfs, sysfs, debugfs or tracefs)".into(),
        ));
    }
    Ok(file)
}

/// Opens `path` for reading with `O_NONBLOCK` (a pipe-like file such as tracefs's
/// `trace_pipe`, whose reads should return at once when it is empty), never as the
/// controlling terminal (`O_NOCTTY`: a terminal put at its place would be one).
pub fn open_nonblocking(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
}

/// Opens `path` for reading only if it is a regular file, checked before it is opened
/// (found with `O_PATH`, then opened through that descriptor): a device, a FIFO or a
/// terminal at its place is never opened (never armed, waited on, or made the controlling
/// terminal).
pub fn open_regular(path: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let found = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
    open_found_regular(&found)
}

/// The file `found` (an `O_PATH` descriptor) names, opened for reading through it if it is a
/// regular file; never opened otherwise.
pub fn open_found_regular(found: &rustix::fd::OwnedFd) -> io::Result<File> {
    use rustix::fs::FileType;
    let st = rustix::fs::fstat(found)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    reopen_to_read(found)
}

/// The file `found` (an `O_PATH` descriptor) names, opened to read through that descriptor
/// (never by its path again: the very file found), without blocking or becoming a terminal.
pub fn reopen_to_read(found: &rustix::fd::OwnedFd) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::AsRawFd;
    let fd = rustix::fs::open(
        format!("/proc/self/fd/{}", found.as_raw_fd()),
        OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make_fifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    #[test]
    fn open_regular_opens_a_file_and_never_a_fifo_or_a_device() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(open_regular(&file).is_ok());
        let fifo = dir.path().join("fifo");
        make_fifo(&fifo);
        // (A plain open would wait for a writer.)
        let e = open_regular(&fifo).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file");
        assert!(open_regular(Path::new("/dev/null")).is_err());
        assert!(open_regular(Path::new("/proc/self/cwd")).is_err());
    }

    #[test]
    fn create_new_refuses_a_planted_symlink_and_leaves_its_target_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, b"precious").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = create_new(&link, 0o600).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    }

    #[test]
    fn write_atomically_replaces_a_planted_link_instead_of_writing_through_it() {
        // Regression (hardening #1): `rtlab report -o DIR` overwrote a link's target.
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, b"precious").unwrap();
        let out = dir.path().join("report.html");
        std::os::unix::fs::symlink(&target, &out).unwrap();
        write_atomically(&out, b"<html>").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        assert!(!std::fs::symlink_metadata(&out).unwrap().is_symlink());
        assert_eq!(std::fs::read(&out).unwrap(), b"<html>");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
    }

    #[test]
    fn write_atomically_writes_into_a_device_or_fifo_and_never_replaces_it() {
        // Regression: `--json /dev/full` (or /dev/stdout) renamed a file onto the device node.
        let dir = tempfile::tempdir().unwrap();
        // Devices, through a link here (a failure replaces only the link): written into.
        let null = dir.path().join("null");
        std::os::unix::fs::symlink("/dev/null", &null).unwrap();
        write_atomically(&null, b"{}").unwrap();
        assert!(std::fs::symlink_metadata(&null).unwrap().is_symlink());
        let full = dir.path().join("full");
        std::os::unix::fs::symlink("/dev/full", &full).unwrap();
        let e = write_atomically(&full, b"{}").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        assert!(std::fs::symlink_metadata(&full).unwrap().is_symlink());
        // A FIFO the user made: a stream to its reader.
        let fifo = dir.path().join("fifo");
        make_fifo(&fifo);
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        write_atomically(&fifo, b"through").unwrap();
        assert_eq!(reader.join().unwrap(), b"through");
        // One another user planted is replaced (opening it would wait for a reader).
        if rustix::process::geteuid().as_raw() == 0 {
            let planted = dir.path().join("planted");
            make_fifo(&planted);
            std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
            write_atomically(&planted, b"result").unwrap();
            assert_eq!(std::fs::read(&planted).unwrap(), b"result");
            std::fs::remove_file(&planted).unwrap();
        }
        let names = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(names, 3, "no file added beside them");
    }

    #[test]
    fn unique_names_are_unpredictable() {
        let dir = tempfile::tempdir().unwrap();
        let (_, a) = create_unique(dir.path(), "x-", ".tmp", 0o600).unwrap();
        let (_, b) = create_unique(dir.path(), "x-", ".tmp", 0o600).unwrap();
        assert_ne!(a, b);
        let name = a.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("x-") && name.ends_with(".tmp") && name.len() == 22);
    }

    #[test]
    fn a_directory_of_another_user_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_dir_owner(dir.path()).is_ok());
        if rustix::process::geteuid().as_raw() != 0 {
            crate::testing::say_skipped("needs root to chown");
            return;
        }
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let err = check_dir_owner(&theirs).unwrap_err();
        assert!(err.to_string().contains("uid 65534"), "{err}");
    }

    #[test]
    fn a_link_in_a_directory_of_another_user_is_not_followed() {
        // Regression (hardening, second review, #6): `--json bob/results/r.json` with
        // `results` a link bob made to a root-only directory wrote there.
        let dir = tempfile::tempdir().unwrap();
        let root_only = dir.path().join("root-only");
        std::fs::create_dir(&root_only).unwrap();
        let mine = dir.path().join("mine");
        std::os::unix::fs::symlink(&root_only, &mine).unwrap();
        // A link of a trusted user in a directory only they can change is followed.
        assert_eq!(
            resolve_trusted(&mine.join("r.json")).unwrap(),
            root_only.join("r.json")
        );
        assert!(check_dir_owner(&mine).is_ok());
        if rustix::process::geteuid().as_raw() != 0 {
            crate::testing::say_skipped("needs root");
            return;
        }
        let bob = dir.path().join("bob");
        std::fs::create_dir(&bob).unwrap();
        let link = bob.join("results");
        std::os::unix::fs::symlink(&root_only, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        std::os::unix::fs::chown(&bob, Some(65534), Some(65534)).unwrap();
        let err = check_dir_owner(&link).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        // Root's own link in bob's directory: bob can swap it, so it is refused too.
        let dir2 = tempfile::tempdir().unwrap();
        let bob2 = dir2.path().join("bob");
        std::fs::create_dir(&bob2).unwrap();
        std::os::unix::fs::symlink(&root_only, bob2.join("results")).unwrap();
        std::os::unix::fs::chown(&bob2, Some(65534), Some(65534)).unwrap();
        assert!(check_dir_owner(&bob2.join("results")).is_err());
        // And bob's link in a sticky shared directory (like /tmp).
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let planted = shared.join("out");
        std::os::unix::fs::symlink(&root_only, &planted).unwrap();
        std::os::unix::fs::lchown(&planted, Some(65534), Some(65534)).unwrap();
        assert!(check_dir_owner(&planted).is_err());
    }

    #[test]
    fn a_file_to_trust_is_judged_as_sudo_would() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("state.json");
        std::fs::write(&good, "{}").unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(open_trusted(&good).is_ok());
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(open_trusted(&link)
            .unwrap_err()
            .to_string()
            .contains("symbolic link"));
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(open_trusted(&good)
            .unwrap_err()
            .to_string()
            .contains("world-writable"));
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(open.join("s.json"), "{}").unwrap();
        let err = open_trusted(&open.join("s.json")).unwrap_err().to_string();
        assert!(err.contains("writable by others and not sticky"), "{err}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(
            open_trusted(&open.join("s.json")).is_ok(),
            "sticky, like /tmp"
        );
        if rustix::process::geteuid().as_raw() == 0 {
            std::os::unix::fs::chown(open.join("s.json"), Some(65534), Some(65534)).unwrap();
            let err = open_trusted(&open.join("s.json")).unwrap_err().to_string();
            assert!(err.contains("owned by uid 65534"), "{err}");
        }
    }

    #[test]
    fn only_the_kernels_own_files_are_settings() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("x");
        std::fs::write(&plain, "1").unwrap();
        assert!(open_setting(&plain, false).is_ok());
        assert!(open_setting(&plain, true).is_err(), "a file on a disk");
        assert!(
            open_setting(&dir.path().join("new"), false).is_err(),
            "never created"
        );
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&plain, &link).unwrap();
        assert!(open_setting(&link, false).is_err(), "never through a link");
        let proc_file = File::open("/proc/self/stat").unwrap();
        assert!(is_kernel_settings_file(&proc_file).unwrap());
    }
}
