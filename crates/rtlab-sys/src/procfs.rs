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

/// The file process `pid` maps whose name is `file_name` (`libjvm.so`), as a path rtlab can
/// open whatever the process's mount namespace (through `/proc/<pid>/root`).
pub fn mapped_file(pid: u32, file_name: &str) -> Option<std::path::PathBuf> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let suffix = format!("/{file_name}");
    let path = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with(&suffix))?;
    let rooted = std::path::PathBuf::from(format!("/proc/{pid}/root{path}"));
    Some(if rooted.exists() { rooted } else { path.into() })
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
