//! What `/proc` says: threads of a process and their timer slack, task names and
//! priorities, IRQ names, kernel symbols, and interference counters (steal time,
//! interrupts, context switches).
//!
//! The per-thread slack file is `/proc/<tid>/timerslack_ns` (there is none under
//! `/proc/<pid>/task/<tid>/`). Reading another process's needs ptrace-read access; writing it
//! needs `CAP_SYS_NICE` (Linux 4.18+) unless it is the caller's own.

use crate::SysError;
use std::io;

/// The processes whose parent is `pid` (from `/proc/<pid>/stat`, field 4).
pub fn children_of(pid: u32) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|&(_, ppid)| ppid == pid)
        .map(|(child, _)| child)
        .collect()
}

/// Every process of the machine with its parent (`/proc/<pid>/stat`, field 4), by pid.
pub fn processes() -> Vec<(u32, u32)> {
    Parents::default().read()
}

/// Every process of the machine, by pid (the listing of `/proc`).
pub fn pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut all: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    all.sort_unstable();
    all
}

/// Thread `tid`'s own `stat` (`/proc/<tid>/task/<tid>/stat`): `/proc/<tid>/stat` sums the
/// times of every thread of its process in the kernel, under its lock, which a JVM's hundred
/// threads make long.
fn thread_stat(tid: i64) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{tid}/task/{tid}/stat")).ok()
}

/// The parent of process `pid` (its main thread's parent is the process's).
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = thread_stat(pid as i64)?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    stat.rsplit_once(") ")?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `root` and every process it started, and they started, that is still there (from one
/// reading of every process's parent).
pub fn process_tree(root: u32) -> Vec<u32> {
    Parents::default().tree(root)
}

/// Every process's parent, kept from one reading to the next: a process's parent is read once
/// (its main thread's `stat`), again only when
/// that parent is gone (it was re-parented). Reading the tree of a process every second then
/// costs one listing of `/proc` and a read per new process, not a read per process.
#[derive(Debug, Default)]
pub struct Parents {
    known: std::collections::HashMap<u32, u32>,
}

impl Parents {
    /// Every process of the machine with its parent, by pid.
    pub fn read(&mut self) -> Vec<(u32, u32)> {
        let pids = pids();
        let alive: std::collections::HashSet<u32> = pids.iter().copied().collect();
        self.known.retain(|p, _| alive.contains(p));
        let mut all = Vec::with_capacity(pids.len());
        for pid in pids {
            let parent = match self.known.get(&pid) {
                Some(&parent) if parent <= 1 || alive.contains(&parent) => Some(parent),
                _ => parent_of(pid),
            };
            if let Some(parent) = parent {
                self.known.insert(pid, parent);
                all.push((pid, parent));
            }
        }
        all
    }

    /// `root` and every process it started, and they started, that is still there.
    pub fn tree(&mut self, root: u32) -> Vec<u32> {
        let all = self.read();
        let mut tree = vec![root];
        let mut i = 0;
        while i < tree.len() {
            let parent = tree[i];
            tree.extend(
                all.iter()
                    .filter(|p| p.1 == parent && p.0 != root)
                    .map(|p| p.0),
            );
            i += 1;
        }
        tree
    }
}

/// A file a process maps, as a line of its `/proc/<pid>/maps` names it: its path (in the
/// process's own mount namespace), its device (`makedev`) and inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub path: String,
    pub dev: u64,
    pub inode: u64,
}

/// The longest path a maps line is taken with (a kernel path is at most 4096 bytes).
const MAX_MAPPED_PATH: usize = 4096;

/// One line of `/proc/<pid>/maps`: `start-end perms offset major:minor inode path`.
fn mapping_of_line(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut fields = [""; 5];
    for f in &mut fields {
        rest = rest.trim_start();
        let end = rest.find(' ').unwrap_or(rest.len());
        *f = &rest[..end];
        rest = &rest[end..];
    }
    let path = rest.trim_start();
    let (major, minor) = fields[3].split_once(':')?;
    let dev = rustix::fs::makedev(
        u32::from_str_radix(major, 16).ok()?,
        u32::from_str_radix(minor, 16).ok()?,
    );
    let inode = fields[4].parse().ok().filter(|&i| i != 0)?;
    (path.starts_with('/') && path.len() <= MAX_MAPPED_PATH).then(|| Mapping {
        path: path.to_string(),
        dev,
        inode,
    })
}

/// The first file process `pid` maps whose name is `file_name` (`libjvm.so`).
pub fn mapping(pid: u32, file_name: &str) -> Option<Mapping> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let suffix = format!("/{file_name}");
    maps.lines()
        .filter_map(mapping_of_line)
        .find(|m| m.path.ends_with(&suffix))
}

/// A file opened as a process maps it ([`open_mapped`]), with its owner and mode.
#[derive(Debug)]
pub struct MappedFile {
    pub file: std::fs::File,
    pub mapping: Mapping,
    pub uid: u32,
    pub mode: u32,
}

impl MappedFile {
    /// Owned by root and writable by no one else: what root put there (its contents,
    /// offsets included, are root's own word).
    pub fn root_owned(&self) -> bool {
        self.uid == 0 && self.mode & 0o022 == 0
    }
}

/// Opens, once, the file process `pid` maps whose name is `file_name`, so that nothing done
/// to its path can swap it for another: the path is resolved under the process's own root
/// (`/proc/<pid>/root`, its mount namespace, a container's) with no symlink followed
/// (`openat2`, `RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, `O_PATH |
/// O_NOFOLLOW`), checked before it is opened (a regular file whose device and inode are the
/// maps line's), opened through that descriptor without blocking and never as a terminal
/// (`O_NOCTTY | O_NONBLOCK`), and kept only if the process (held by a pidfd from before its
/// maps were read) is still the one that was read.
/// `Ok(None)`: it maps no such file. Linux 5.6+ (`openat2`).
pub fn open_mapped(pid: u32, file_name: &str) -> io::Result<Option<MappedFile>> {
    let not = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
    let process = rustix::process::Pid::from_raw(pid as i32).ok_or_else(|| not("pid 0"))?;
    let pidfd = rustix::process::pidfd_open(process, rustix::process::PidfdFlags::empty())?;
    match mapping(pid, file_name) {
        Some(m) => open_as_mapped(pid, &pidfd, m).map(Some),
        None => Ok(None),
    }
}

/// `path` as process `pid` sees it (under its own root, `/proc/<pid>/root`: its mount
/// namespace, a container's), found with no symlink followed and not opened (`openat2`,
/// `RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, `O_PATH | O_NOFOLLOW`,
/// and `flags`, e.g. `O_DIRECTORY`).
pub fn find_in_root(
    pid: u32,
    path: &str,
    flags: rustix::fs::OFlags,
) -> io::Result<rustix::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let root = rustix::fs::open(
        format!("/proc/{pid}/root"),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(rustix::fs::openat2(
        &root,
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC | flags,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?)
}

/// The first `max` bytes of regular file `path` as process `pid` sees it (in its own root,
/// no link followed; a device or FIFO there is never opened).
pub fn read_in_root(pid: u32, path: &str, max: usize) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let found = find_in_root(pid, path, rustix::fs::OFlags::empty())?;
    let mut bytes = Vec::new();
    crate::fs::open_found_regular(&found)?
        .take(max as u64)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`open_mapped`] once `mapping` was read from the maps of `pid` (held by `pidfd`).
fn open_as_mapped(
    pid: u32,
    pidfd: &rustix::fd::OwnedFd,
    mapping: Mapping,
) -> io::Result<MappedFile> {
    use rustix::fs::{FileType, OFlags};
    let not = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
    // Found first without opening it (`O_PATH`): a device or a FIFO at its place is never
    // opened, so never armed, waited on or made the controlling terminal.
    let found = find_in_root(pid, mapping.path.as_str(), OFlags::empty())?;
    let st = rustix::fs::fstat(&found)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(not("not a regular file"));
    }
    if (st.st_dev, st.st_ino) != (mapping.dev, mapping.inode) {
        return Err(not("not the file the process maps (replaced since)"));
    }
    // Then that very file opened to read, through its descriptor.
    let fd = crate::fs::reopen_to_read(&found)?;
    let again = rustix::fs::fstat(&fd)?;
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
        return Err(not("not the file the process maps (replaced since)"));
    }
    // The pid still the process whose maps were read (a pidfd turns readable at its exit).
    let mut poll = [rustix::event::PollFd::new(
        pidfd,
        rustix::event::PollFlags::IN,
    )];
    if rustix::event::poll(&mut poll, Some(&rustix::time::Timespec::default()))? > 0 {
        return Err(not("the process ended while its file was opened"));
    }
    Ok(MappedFile {
        file: fd,
        mapping,
        uid: st.st_uid,
        mode: st.st_mode & 0o7777,
    })
}

/// The process a thread belongs to (`Tgid:` of `/proc/<tid>/status`).
pub fn process_of(tid: i64) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}

/// The cgroup (v2) of process `pid`, as `/proc/<pid>/cgroup` names it (`/system.slice/x`).
pub fn cgroup_of(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified`
/// on a hybrid layout), from `/proc/self/mounts`.
pub fn cgroup2_mount() -> Option<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, kind) = (f.next()?, f.next()?, f.next()?);
        (kind == "cgroup2").then(|| std::path::PathBuf::from(dir))
    })
}

/// The processes of cgroup directory `dir` and of the cgroups below it (`cgroup.procs`).
pub fn cgroup_processes(dir: &std::path::Path) -> io::Result<Vec<u32>> {
    let mut out: Vec<u32> = std::fs::read_to_string(dir.join("cgroup.procs"))?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for e in std::fs::read_dir(dir)?.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(cgroup_processes(&e.path()).unwrap_or_default());
        }
    }
    Ok(out)
}

/// One thread of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Kernel thread id (what `jstack` prints in hex as `nid=0x...`).
    pub tid: i32,
    /// The thread's name (`comm`, at most 15 bytes).
    pub name: String,
    /// Current timer slack, if readable.
    pub timer_slack_ns: Option<u64>,
}

fn classify(what: String, e: io::Error) -> SysError {
    SysError::from_io(what, e)
}

/// Every thread of `pid`, by tid.
pub fn threads_of(pid: i32) -> Result<Vec<ThreadInfo>, SysError> {
    threads_read(pid, true)
}

/// [`threads_of`] without their timer slack (a file that takes a ptrace check to read).
pub fn thread_names_of(pid: i32) -> Result<Vec<ThreadInfo>, SysError> {
    threads_read(pid, false)
}

fn threads_read(pid: i32, slack: bool) -> Result<Vec<ThreadInfo>, SysError> {
    let dir = format!("/proc/{pid}/task");
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            SysError::NoSuchProcess { pid }
        } else {
            classify(format!("read {dir}"), e)
        }
    })?;
    let mut threads: Vec<ThreadInfo> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .map(|tid| ThreadInfo {
            tid,
            name: std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .map(|s| s.trim_end().to_string())
                .unwrap_or_default(),
            timer_slack_ns: slack.then(|| thread_timer_slack_ns(tid).ok()).flatten(),
        })
        .collect();
    threads.sort_by_key(|t| t.tid);
    Ok(threads)
}

/// Reads `/proc/<tid>/timerslack_ns`.
pub fn thread_timer_slack_ns(tid: i32) -> Result<u64, SysError> {
    let path = format!("/proc/{tid}/timerslack_ns");
    let text = std::fs::read_to_string(&path).map_err(|e| classify(format!("read {path}"), e))?;
    text.trim().parse().map_err(|_| SysError::Invalid {
        what: format!("{path} holds '{}'", text.trim()),
    })
}

/// Writes `/proc/<tid>/timerslack_ns` (0 restores the thread's default).
pub fn set_thread_timer_slack_ns(tid: i32, ns: u64) -> Result<(), SysError> {
    let path = format!("/proc/{tid}/timerslack_ns");
    std::fs::write(&path, ns.to_string()).map_err(|e| classify(format!("write {path}"), e))
}

/// Whether process `pid` is running: it exists and is not a zombie (exited, waiting for its
/// parent to collect it).
pub fn process_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(") ")
                .map(|(_, rest)| rest.starts_with(['Z', 'X']))
        })
        .is_some_and(|dead| !dead)
}

/// A task's name (`/proc/<tid>/comm`), if it still exists.
pub fn task_comm(tid: i64) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{tid}/comm"))
        .ok()
        .map(|c| c.trim_end().to_string())
}

/// A task's kernel priority as the scheduler's trace events give it (0-99 real-time,
/// 100-139 time-sharing): field 18 of `/proc/<tid>/stat` plus 100.
pub fn task_kernel_prio(tid: i64) -> Option<i64> {
    let stat = thread_stat(tid)?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let after = stat.rsplit_once(')')?.1;
    after
        .split_whitespace()
        .nth(15)?
        .parse::<i64>()
        .ok()
        .map(|p| p + 100)
}

/// The CPU a task last ran on (field 39 of `/proc/<tid>/stat`), if it still exists.
pub fn task_last_cpu(tid: i64) -> Option<usize> {
    let stat = thread_stat(tid)?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(36)?
        .parse()
        .ok()
}

/// When a task started, in clock ticks since boot (field 22 of `/proc/<tid>/stat`): with its
/// pid, what tells it from a later task given the same pid.
pub fn task_start_ticks(tid: i64) -> Option<u64> {
    let stat = thread_stat(tid)?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// IRQ number -> the names of its handlers (the last column of `/proc/interrupts`).
pub fn irq_names() -> std::collections::HashMap<u32, String> {
    std::fs::read_to_string("/proc/interrupts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (n, rest) = l.trim_start().split_once(':')?;
            let irq: u32 = n.parse().ok()?;
            Some((irq, rest.split_whitespace().last()?.to_string()))
        })
        .collect()
}

/// Whether a read of a process's /proc files failed because the process ended (its entry
/// gone, or going: `ESRCH` from a file of an exiting process).
pub fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// The kernel's text symbols by address (`/proc/kallsyms`; empty where the addresses are
/// hidden).
pub fn kernel_text_symbols() -> Vec<(u64, String)> {
    let mut v: Vec<(u64, String)> = std::fs::read_to_string("/proc/kallsyms")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let a = u64::from_str_radix(it.next()?, 16).ok()?;
            let ty = it.next()?;
            let name = it.next()?;
            (a != 0 && matches!(ty, "t" | "T") && it.next().is_none()).then(|| (a, name.into()))
        })
        .collect();
    v.sort();
    v
}

/// What /proc says about interference over a run, where no tracer is available.
#[derive(Debug, Clone, Default)]
pub struct ProcSnapshot {
    steal_ticks: Vec<u64>,
    irqs: Vec<u64>,
    ctxt: u64,
}

impl ProcSnapshot {
    /// Reads /proc/stat and /proc/interrupts now.
    pub fn take() -> ProcSnapshot {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let mut steal_ticks = Vec::new();
        let mut ctxt = 0;
        for l in stat.lines() {
            let mut f = l.split_whitespace();
            match f.next() {
                Some(cpu) if cpu.starts_with("cpu") && cpu.len() > 3 => {
                    steal_ticks.push(f.nth(7).and_then(|v| v.parse().ok()).unwrap_or(0));
                }
                Some("ctxt") => ctxt = f.next().and_then(|v| v.parse().ok()).unwrap_or(0),
                _ => {}
            }
        }
        let ints = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
        let ncpu = steal_ticks.len();
        let mut irqs = vec![0u64; ncpu];
        for l in ints.lines().skip(1) {
            for (i, v) in l.split_whitespace().skip(1).take(ncpu).enumerate() {
                irqs[i] += v.parse::<u64>().unwrap_or(0);
            }
        }
        ProcSnapshot {
            steal_ticks,
            irqs,
            ctxt,
        }
    }

    /// Time the host took from `cpus` (steal time) between `self` and `later`, in ms.
    pub fn steal_ms_since(&self, later: &ProcSnapshot, cpus: &[usize]) -> f64 {
        cpus.iter()
            .map(|&c| {
                later
                    .steal_ticks
                    .get(c)
                    .unwrap_or(&0)
                    .saturating_sub(*self.steal_ticks.get(c).unwrap_or(&0))
            })
            .sum::<u64>() as f64
            * 10.0
    }

    /// Context switches, and interrupts on all CPUs, between `self` and `later`.
    pub fn switches_and_irqs_since(&self, later: &ProcSnapshot) -> (u64, u64) {
        let irqs = |s: &ProcSnapshot| s.irqs.iter().sum::<u64>();
        (
            later.ctxt.saturating_sub(self.ctxt),
            irqs(later).saturating_sub(irqs(self)),
        )
    }

    /// One sentence on what happened on `cpus` between `self` and `later`.
    pub fn describe_since(&self, later: &ProcSnapshot, cpus: &[usize]) -> String {
        // /proc/stat counts in USER_HZ, 100 on every Linux ABI rtlab runs on.
        let tick_ms = 10.0;
        let parts: Vec<String> = cpus
            .iter()
            .map(|&c| {
                let steal =
                    later.steal_ticks.get(c).unwrap_or(&0) - self.steal_ticks.get(c).unwrap_or(&0);
                let irqs = later.irqs.get(c).unwrap_or(&0) - self.irqs.get(c).unwrap_or(&0);
                format!(
                    "CPU {c}: {:.0} ms stolen by the host, {irqs} interrupts",
                    steal as f64 * tick_ms
                )
            })
            .collect();
        format!(
            "{}; {} context switches in all",
            parts.join("; "),
            later.ctxt.saturating_sub(self.ctxt)
        )
    }
}

/// PF_KTHREAD in `/proc/<pid>/stat`'s flags: set by the kernel for its own threads only.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Whether `pid` is a kernel thread, judged from `proc` (`/proc`, or a directory laid out like
/// it): PF_KTHREAD in its flags and kthreadd (pid 2) its parent, or kthreadd itself. A name is
/// no proof: any process can call itself `napi/eth0-1` or `ksoftirqd/0`.
pub fn is_kernel_thread_in(proc: &std::path::Path, pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(proc.join(pid.to_string()).join("stat")) else {
        return false;
    };
    // "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": comm may hold anything.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ppid: Option<u32> = fields.get(1).and_then(|f| f.parse().ok());
    let flags: Option<u64> = fields.get(6).and_then(|f| f.parse().ok());
    matches!((ppid, flags), (Some(p), Some(f)) if f & PF_KTHREAD != 0 && (p == 2 || pid == 2))
}

/// [`is_kernel_thread_in`] on this machine's /proc.
pub fn is_kernel_thread(pid: u32) -> bool {
    is_kernel_thread_in(std::path::Path::new("/proc"), pid)
}

/// The processes whose name (`/proc/<pid>/comm`) is `name`.
pub fn pids_named(name: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maps_line_gives_its_path_device_and_inode_whatever_the_spaces() {
        let m = mapping_of_line(
            "7f1c2a000000-7f1c2a200000 r-xp 00001000 fd:01 1234567                    /opt/my jdk/lib/server/libjvm.so",
        )
        .unwrap();
        assert_eq!(m.path, "/opt/my jdk/lib/server/libjvm.so");
        assert_eq!(m.dev, rustix::fs::makedev(0xfd, 1));
        assert_eq!(m.inode, 1234567);
        // Anonymous memory and pseudo-files are no file.
        assert_eq!(
            mapping_of_line("7ffd-7ffe rw-p 00000000 00:00 0      [stack]"),
            None
        );
        assert_eq!(mapping_of_line("7ffd-7ffe rw-p 00000000 00:00 0"), None);
    }

    /// A process (python3) mapping `path` read-only, until killed; None: no python3 here.
    fn mapping_process(path: &std::path::Path) -> Option<std::process::Child> {
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import mmap,sys,time\nf=open(sys.argv[1],'rb')\nm=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\nf.close()\nprint('mapped',flush=True)\ntime.sleep(60)",
            ])
            .arg(path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "mapped");
        Some(child)
    }

    #[test]
    fn a_mapped_file_is_opened_as_mapped_and_a_path_swapped_since_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libfake.so");
        std::fs::write(&lib, vec![7u8; 8192]).unwrap();
        let Some(mut child) = mapping_process(&lib) else {
            crate::testing::say_skipped("no python3 to map a file");
            return;
        };
        let pid = child.id();
        let opened = open_mapped(pid, "libfake.so").unwrap().unwrap();
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&lib).unwrap();
        assert_eq!(
            (opened.mapping.dev, opened.mapping.inode),
            (meta.dev(), meta.ino())
        );
        assert_eq!(opened.file.metadata().unwrap().ino(), meta.ino());
        assert_eq!(
            open_mapped(pid, "libnothing.so")
                .unwrap()
                .map(|m| m.mapping),
            None
        );
        // Its maps line read, then the path swapped (as a process's owner can, between the
        // read and the open) for a symlink to a file of root's: refused, the target never
        // opened.
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::PidfdFlags::empty(),
        )
        .unwrap();
        let read = mapping(pid, "libfake.so").unwrap();
        let moved = dir.path().join("moved.so");
        std::fs::rename(&lib, &moved).unwrap();
        std::os::unix::fs::symlink("/bin/sh", &lib).unwrap();
        // (Found as the link itself, never followed.)
        let err = open_as_mapped(pid, &pidfd, read.clone()).unwrap_err();
        assert!(
            err.raw_os_error() == Some(libc::ELOOP) || err.to_string() == "not a regular file",
            "{err}"
        );
        // ... or for another regular file: not the one mapped.
        std::fs::remove_file(&lib).unwrap();
        std::fs::write(&lib, vec![9u8; 8192]).unwrap();
        let err = open_as_mapped(pid, &pidfd, read.clone()).unwrap_err();
        assert!(
            err.to_string().contains("not the file the process maps"),
            "{err}"
        );
        // ... or for a FIFO (which would block a plain open) or a directory.
        std::fs::remove_file(&lib).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &lib,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(open_as_mapped(pid, &pidfd, read.clone()).is_err());
        // ... and once the process ended, nothing of it is taken.
        std::fs::remove_file(&lib).unwrap();
        std::fs::rename(&moved, &lib).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(open_as_mapped(pid, &pidfd, read).is_err());
    }

    #[test]
    fn only_a_file_of_roots_that_no_one_else_may_write_is_roots_own() {
        let f = |uid, mode| MappedFile {
            file: std::fs::File::open("/proc/self/stat").unwrap(),
            mapping: Mapping {
                path: "/x".into(),
                dev: 0,
                inode: 1,
            },
            uid,
            mode,
        };
        assert!(f(0, 0o644).root_owned());
        assert!(f(0, 0o755).root_owned());
        assert!(!f(0, 0o664).root_owned());
        assert!(!f(0, 0o646).root_owned());
        assert!(!f(1000, 0o644).root_owned());
    }

    #[test]
    fn the_tree_kept_from_reading_to_reading_gains_and_loses_children() {
        let me = std::process::id();
        let mut parents = Parents::default();
        let before = parents.tree(me);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let grown = parents.tree(me);
        child.kill().unwrap();
        child.wait().unwrap();
        let after = parents.tree(me);
        assert!(!before.contains(&pid) && grown.contains(&pid), "{grown:?}");
        assert!(!after.contains(&pid) && after[0] == me, "{after:?}");
        // What it keeps is what a fresh reading finds (this process and its parent).
        let kept = parents.read();
        let parent = std::os::unix::process::parent_id();
        assert!(kept.contains(&(me, parent)), "{kept:?}");
        assert!(processes().contains(&(me, parent)));
    }

    #[test]
    fn only_the_kernels_threads_are_kernel_threads() {
        assert!(is_kernel_thread(2), "kthreadd");
        assert!(!is_kernel_thread(std::process::id()));
        assert!(!is_kernel_thread(1), "init");
        let proc = tempfile::tempdir().unwrap();
        let lay = |pid: u32, stat: &str| {
            let dir = proc.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("stat"), stat).unwrap();
        };
        lay(10, "10 (napi/eth0-8193) S 2 0 0 0 -1 2129984 0 0");
        lay(11, "11 (napi/eth0-1) S 900 11 11 0 -1 4194560 0 0"); // a user process
        lay(12, "12 (x) 2 0 0 0 -1 2129984) S 900 1 1 0 -1 4194560 0"); // comm with ") S 2"
        assert!(is_kernel_thread_in(proc.path(), 10));
        assert!(!is_kernel_thread_in(proc.path(), 11));
        assert!(!is_kernel_thread_in(proc.path(), 12));
        assert!(!is_kernel_thread_in(proc.path(), 13), "gone");
    }

    #[test]
    fn a_threads_name_and_priority_read_back_as_the_trace_events_give_them() {
        std::thread::spawn(|| {
            crate::process::set_current_thread_name("rtlab-procfs-t").unwrap();
            let tid = crate::futex::current_tid() as i64;
            assert_eq!(task_comm(tid).as_deref(), Some("rtlab-procfs-t"));
            // SCHED_OTHER: 120 + nice, whatever nice the test runs at.
            let prio = task_kernel_prio(tid).unwrap();
            assert!((100..140).contains(&prio), "{prio}");
            assert_eq!(task_comm(i32::MAX as i64), None, "no such task");
            // Pinned to one CPU, it last ran there.
            let one = crate::affinity::thread_cpus(tid as i32).unwrap().as_slice()[0];
            crate::affinity::set_current_thread_affinity(&crate::affinity::CpuList::from(vec![
                one,
            ]))
            .unwrap();
            assert_eq!(task_last_cpu(tid), Some(one));
            assert_eq!(task_last_cpu(i32::MAX as i64), None);
            assert!(process_alive(std::process::id() as i32));
            assert!(!process_alive(i32::MAX));
        })
        .join()
        .unwrap();
        let snapshot = ProcSnapshot::take();
        assert!(
            snapshot
                .describe_since(&ProcSnapshot::take(), &[0])
                .starts_with("CPU 0:"),
            "reads /proc/stat"
        );
    }

    #[test]
    fn own_threads_are_listed_and_their_slack_round_trips() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let helper = std::thread::Builder::new()
            .name("rtlab-slack-t".into())
            .spawn(move || {
                tx.send(crate::futex::current_tid() as i32).unwrap();
                done_rx.recv().unwrap();
                crate::slack::current_timer_slack_ns().unwrap()
            })
            .unwrap();
        let tid = rx.recv().unwrap();
        let threads = threads_of(std::process::id() as i32).unwrap();
        let me = threads
            .iter()
            .find(|t| t.tid == tid)
            .expect("helper listed");
        assert_eq!(me.name, "rtlab-slack-t");
        set_thread_timer_slack_ns(tid, 12_345).unwrap();
        assert_eq!(thread_timer_slack_ns(tid).unwrap(), 12_345);
        done_tx.send(()).unwrap();
        // The thread itself sees what was written from outside.
        assert_eq!(helper.join().unwrap(), 12_345);
    }

    #[test]
    fn a_missing_process_is_a_clear_error() {
        let err = threads_of(i32::MAX).unwrap_err();
        assert!(matches!(err, SysError::NoSuchProcess { .. }), "{err}");
        let err = err.to_string();
        assert!(err.contains("no such process"), "{err}");
    }
}
