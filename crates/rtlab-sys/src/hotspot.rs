//! A HotSpot JVM's diagnostic commands from outside, with no JDK: the dynamic attach that
//! `jcmd` uses, for a JVM on the host or in a container (its own mount and pid namespace).
//!
//! The JVM listens on a UNIX socket `/tmp/.java_pid<pid>` of its own mount namespace (`<pid>`
//! as its own pid namespace numbers it) once asked to: a file `.attach_pid<pid>` in its
//! `/tmp`, owned by root or by its user, and a SIGQUIT. It answers one command per
//! connection (protocol 1: `1`, the command, three arguments, each NUL-terminated; the reply
//! a status line, then the text), checks that the peer is root or its own user, and closes.
//!
//! rtlab runs as root and the JVM is a program it watches, which may have planted anything in
//! its `/tmp`: every path is resolved under the JVM's own root with no symlink followed
//! (`openat2` `RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS`), the socket must be one its user owns,
//! the process at its other end must be the JVM itself (`SO_PEERCRED`), the trigger file is
//! created new or not at all (`O_CREAT | O_EXCL | O_NOFOLLOW`) and removed only if it is
//! still the one created, and no SIGQUIT is sent to a process that does not catch it (a JVM
//! not yet started, or another program: the signal would end it) or was started with the
//! attach mechanism off (it would print a thread dump to its output instead).

use rustix::fd::{AsFd, AsRawFd, OwnedFd};
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// Why a JVM's diagnostic command could not be run.
#[derive(Debug)]
pub enum AttachError {
    /// Started with `-XX:+DisableAttachMechanism`: it answers no one.
    Disabled,
    /// The process does not catch SIGQUIT (not a JVM, or one not started yet, or started
    /// with `-Xrs`): asking it would end it.
    NoQuitHandler,
    /// No socket appeared within the time allowed.
    NoAnswer(Duration),
    /// Something in its `/tmp` is not what the JVM would have put there.
    Refused(String),
    /// The command ran and failed (its status, and what it said).
    Failed(i32, String),
    Io(io::Error),
}

impl std::fmt::Display for AttachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttachError::Disabled => write!(f, "started with -XX:+DisableAttachMechanism"),
            AttachError::NoQuitHandler => {
                write!(
                    f,
                    "it does not catch SIGQUIT (started with -Xrs, or not a JVM yet)"
                )
            }
            AttachError::NoAnswer(d) => write!(f, "no answer to the attach within {d:?}"),
            AttachError::Refused(why) => write!(f, "its attach socket refused: {why}"),
            AttachError::Failed(code, text) => write!(f, "status {code}: {}", text.trim()),
            AttachError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl From<io::Error> for AttachError {
    fn from(e: io::Error) -> Self {
        AttachError::Io(e)
    }
}

/// What `/proc/<pid>/status` says of a process for the attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub pid: u32,
    /// Its pid in its own pid namespace (the last of `NSpid:`).
    pub ns_pid: u32,
    /// Its effective user and group.
    pub euid: u32,
    pub egid: u32,
    /// It catches SIGQUIT (`SigCgt:`).
    pub catches_quit: bool,
}

impl Target {
    /// From the text of `/proc/<pid>/status`.
    pub fn from_status(pid: u32, status: &str) -> Option<Target> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.split_whitespace().collect::<Vec<_>>())
        };
        let ns_pid = field("NSpid:")?.last()?.parse().ok()?;
        let euid = field("Uid:")?.get(1)?.parse().ok()?;
        let egid = field("Gid:")?.get(1)?.parse().ok()?;
        let caught = u64::from_str_radix(field("SigCgt:")?.first()?, 16).ok()?;
        const SIGQUIT: u32 = 3;
        Some(Target {
            pid,
            ns_pid,
            euid,
            egid,
            catches_quit: caught & (1 << (SIGQUIT - 1)) != 0,
        })
    }

    /// Process `pid`'s, as its status says now.
    pub fn of(pid: u32) -> io::Result<Target> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        Target::from_status(pid, &status)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unreadable status"))
    }
}

/// Whether process `pid` was started with the attach mechanism off (its command line, or
/// the options the JVM reads from its environment, say `-XX:+DisableAttachMechanism`; an
/// argument file's content is not read).
pub fn attach_disabled(pid: u32) -> bool {
    let says = |file: &str| {
        std::fs::read(format!("/proc/{pid}/{file}")).is_ok_and(|b| {
            b.split(|&c| c == 0 || c == b' ')
                .any(|w| w == b"-XX:+DisableAttachMechanism")
        })
    };
    says("cmdline") || says("environ")
}

/// A JVM's `/tmp`, held open (`O_PATH`) as found under its own root with no link followed.
#[derive(Debug)]
pub struct JvmTmp {
    dir: OwnedFd,
}

impl JvmTmp {
    /// Process `pid`'s `/tmp`.
    pub fn of(pid: u32) -> io::Result<JvmTmp> {
        let dir = crate::procfs::find_in_root(pid, "/tmp", OFlags::DIRECTORY)?;
        Ok(JvmTmp { dir })
    }

    /// `name` in it, found with no link followed (`O_PATH`), and what it is.
    pub fn find(&self, name: &str) -> io::Result<(OwnedFd, rustix::fs::Stat)> {
        let fd = rustix::fs::openat2(
            &self.dir,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )?;
        let st = rustix::fs::fstat(&fd)?;
        Ok((fd, st))
    }

    /// Opens regular file `name` in it to read, if it is one owned by `uid` (what a JVM of
    /// that user wrote), never through a link.
    pub fn open_own_file(&self, name: &str, uid: u32) -> io::Result<std::fs::File> {
        let (found, st) = self.find(name)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_uid != uid {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("/tmp/{name} is not a regular file of the JVM's user"),
            ));
        }
        let fd = crate::fs::reopen_to_read(&found)?;
        let again = rustix::fs::fstat(&fd)?;
        if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
            return Err(io::Error::other("replaced while opened"));
        }
        Ok(fd)
    }

    /// Removes `name` from it if it is still the file `file` is open on (never another
    /// one put in its place since).
    pub fn remove_if_same(&self, name: &str, file: &impl AsFd) -> io::Result<()> {
        let ours = rustix::fs::fstat(file)?;
        let (_, now) = self.find(name)?;
        if (now.st_dev, now.st_ino) != (ours.st_dev, ours.st_ino) {
            return Err(io::Error::other("replaced since"));
        }
        rustix::fs::unlinkat(self.opened()?, name, rustix::fs::AtFlags::empty())?;
        Ok(())
    }

    /// The directory itself, opened (what creating and removing in it need).
    fn opened(&self) -> io::Result<OwnedFd> {
        Ok(rustix::fs::openat(
            &self.dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// Creates file `name` in it, new (never an existing one or a link's target), mode 0600.
    fn create_new(&self, name: &str) -> io::Result<OwnedFd> {
        Ok(rustix::fs::openat(
            self.opened()?,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?)
    }
}

/// Runs diagnostic command `command` (as `jcmd <pid> <command>` would: `VM.version`,
/// `VM.log output=... what=...`) in JVM `pid`, asking it to listen first where it does not
/// yet (waiting up to `wait` for it). Returns what it printed; a status other than 0 is an
/// error.
pub fn jcmd(pid: u32, command: &str, wait: Duration) -> Result<String, AttachError> {
    if attach_disabled(pid) {
        return Err(AttachError::Disabled);
    }
    let target = Target::of(pid)?;
    let tmp = JvmTmp::of(pid)?;
    let socket = match find_socket(&tmp, &target)? {
        Some(s) => s,
        None => start_listener(&tmp, &target, wait)?,
    };
    let mut stream = connect(&socket, &target)?;
    stream.set_read_timeout(Some(wait.max(Duration::from_secs(1))))?;
    // Protocol 1: its version, the command, three arguments (the rest empty).
    let mut request = Vec::with_capacity(command.len() + 16);
    for part in ["1", "jcmd", command, "", ""] {
        request.extend_from_slice(part.as_bytes());
        request.push(0);
    }
    stream.write_all(&request)?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    let (status, text) = reply.split_once('\n').unwrap_or((reply.as_str(), ""));
    match status.trim().parse::<i32>() {
        Ok(0) => Ok(text.to_string()),
        Ok(code) => Err(AttachError::Failed(code, text.to_string())),
        Err(_) => Err(AttachError::Refused(format!(
            "an answer not the JVM's: {status:?}"
        ))),
    }
}

/// The JVM's socket in its `/tmp`, if it listens: a socket its own user owns.
fn find_socket(tmp: &JvmTmp, target: &Target) -> Result<Option<OwnedFd>, AttachError> {
    let name = format!(".java_pid{}", target.ns_pid);
    match tmp.find(&name) {
        Ok((fd, st)) => {
            let socket = FileType::from_raw_mode(st.st_mode) == FileType::Socket;
            if !socket || st.st_uid != target.euid {
                return Err(AttachError::Refused(format!(
                    "/tmp/{name} is not a socket of the JVM's user"
                )));
            }
            Ok(Some(fd))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Asks the JVM to listen (a trigger file and SIGQUIT, again halfway through) and waits up
/// to `wait` for its socket; the trigger file created is removed after.
fn start_listener(tmp: &JvmTmp, target: &Target, wait: Duration) -> Result<OwnedFd, AttachError> {
    if !target.catches_quit {
        return Err(AttachError::NoQuitHandler);
    }
    let trigger = format!(".attach_pid{}", target.ns_pid);
    // One already there (another tool's, at work now) serves as well; it is not ours to
    // remove.
    let created = match tmp.create_new(&trigger) {
        Ok(fd) => Some(fd),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => None,
        Err(e) => return Err(e.into()),
    };
    send_quit(target.pid)?;
    let start = Instant::now();
    let mut resent = false;
    let found = loop {
        if let Some(fd) = find_socket(tmp, target)? {
            break Some(fd);
        }
        if start.elapsed() >= wait {
            break None;
        }
        // (Once more halfway, as the JDK's own client does: a JVM still starting may have
        // taken the first one before its handler was ready.)
        if !resent && start.elapsed() >= wait / 2 {
            resent = true;
            send_quit(target.pid)?;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if let Some(fd) = created {
        let _ = tmp.remove_if_same(&trigger, &fd);
    }
    found.ok_or(AttachError::NoAnswer(wait))
}

/// SIGQUIT to `pid`.
fn send_quit(pid: u32) -> io::Result<()> {
    let p = rustix::process::Pid::from_raw(pid as i32)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "pid 0"))?;
    rustix::process::kill_process(p, rustix::process::Signal::QUIT)?;
    Ok(())
}

/// Connects to the socket found (through its descriptor, not its name: nothing put at the
/// name since is reached), and checks that the JVM itself is at the other end.
fn connect(
    socket: &OwnedFd,
    target: &Target,
) -> Result<std::os::unix::net::UnixStream, AttachError> {
    let path = format!("/proc/self/fd/{}", socket.as_raw_fd());
    let stream = std::os::unix::net::UnixStream::connect(path)?;
    let peer = rustix::net::sockopt::socket_peercred(&stream).map_err(io::Error::from)?;
    if peer.pid.as_raw_nonzero().get() as u32 != target.pid {
        return Err(AttachError::Refused(format!(
            "the process listening is {}, not the JVM",
            peer.pid.as_raw_nonzero()
        )));
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_gives_the_namespace_pid_the_effective_user_and_the_quit_handler() {
        let status = "Name:\tjava\nUid:\t1000\t1001\t1001\t1001\nGid:\t50\t51\t51\t51\n\
                      NSpid:\t4242\t7\nSigCgt:\t0000000181005ccf\n";
        let t = Target::from_status(4242, status).unwrap();
        assert_eq!(
            (t.ns_pid, t.euid, t.egid, t.catches_quit),
            (7, 1001, 51, true)
        );
        // Not catching SIGQUIT (bit 3 clear): never signalled.
        let plain = status.replace("0000000181005ccf", "0000000000000000");
        assert!(!Target::from_status(4242, &plain).unwrap().catches_quit);
        assert!(Target::from_status(1, "Name:\tx\n").is_none());
    }

    #[test]
    fn a_process_that_does_not_catch_sigquit_is_never_sent_one() {
        // This test process does not catch SIGQUIT: no trigger file, no signal, a clear error.
        let me = std::process::id();
        let err = jcmd(me, "VM.version", Duration::from_millis(100)).unwrap_err();
        assert!(matches!(err, AttachError::NoQuitHandler), "{err}");
    }
}
