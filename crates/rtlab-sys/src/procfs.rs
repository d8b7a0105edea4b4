//! Threads of a process and their timer slack, through `/proc`.
//!
//! The per-thread slack file is `/proc/<tid>/timerslack_ns` (there is none under
//! `/proc/<pid>/task/<tid>/`). Reading another process's needs ptrace-read access; writing it
//! needs `CAP_SYS_NICE` (Linux 4.18+) unless it is the caller's own.

use crate::SysError;
use std::io;

/// The processes whose parent is `pid` (from `/proc/<pid>/stat`, field 4).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let child: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // The command name may hold spaces and parentheses: fields start after the last ')'.
            let ppid: u32 = stat
                .rsplit_once(") ")?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == pid).then_some(child)
        })
        .collect()
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
    let dir = format!("/proc/{pid}/task");
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            SysError::Io {
                what: format!("process {pid}"),
                source: io::Error::new(io::ErrorKind::NotFound, "no such process"),
            }
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
            timer_slack_ns: thread_timer_slack_ns(tid).ok(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let err = threads_of(i32::MAX).unwrap_err().to_string();
        assert!(err.contains("no such process"), "{err}");
    }
}
