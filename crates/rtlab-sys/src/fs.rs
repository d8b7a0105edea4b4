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
/// followed; the temporary file is removed on failure.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
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

/// Fails unless `dir` (a directory, links followed) belongs to root, to this process's
/// effective user or to the invoking user: a directory another user owns lets that user swap
/// its entries under rtlab's feet.
pub fn check_dir_owner(dir: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "not a directory",
        ));
    }
    let owner = meta.uid();
    let trusted = [
        0,
        rustix::process::geteuid().as_raw(),
        rustix::process::getuid().as_raw(),
        invoking_uid(),
    ];
    if trusted.contains(&owner) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "owned by uid {owner}, neither root nor the invoking user: refusing to write there"
            ),
        ))
    }
}

/// Opens `path` for reading with `O_NONBLOCK` (a pipe-like file such as tracefs's
/// `trace_pipe`, whose reads should return at once when it is empty).
pub fn open_nonblocking(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            eprintln!("a_directory_of_another_user_is_refused: skipped: needs root to chown");
            return;
        }
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let err = check_dir_owner(&theirs).unwrap_err();
        assert!(err.to_string().contains("uid 65534"), "{err}");
    }
}
