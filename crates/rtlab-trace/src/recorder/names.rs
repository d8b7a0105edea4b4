//! Task names by pid, looked up in user space off the measured CPUs.

use std::collections::HashMap;
use std::sync::Arc;

/// How often names read from /proc are forgotten (a task renames itself, a pid is reused).
pub(super) const REFRESH_NS: u64 = 1_000_000_000;
/// How long a name from a task's end record outlives it: the task's /proc entry is gone, and
/// its earlier records on a CPU whose ring is read later (a lap behind, on a busy machine)
/// still need its name. Two refreshes, so that one taken just after the end record keeps it.
pub(super) const ENDED_KEEP_NS: u64 = 2 * REFRESH_NS;

/// The recorder's names: a live task's from /proc (read once per refresh), an ended task's
/// from its end record (kept [`ENDED_KEEP_NS`]), an idle task's `swapper/<cpu>`; a task
/// gone from /proc whose end record was not read yet, by the name its fork or exec record
/// gave it (kept as long); [`ENDED_TASK`](crate::event::ENDED_TASK) where none is known.
#[derive(Debug, Default)]
pub(super) struct Names {
    known: HashMap<i64, Arc<str>>,
    /// Names from end records, with when each was read.
    ended: HashMap<i64, (Arc<str>, u64)>,
    /// Names from fork and exec records (a fallback: a live task may rename itself), with
    /// when each was read and the record's time (the rings are read one by one, so a task's
    /// exec may be read before its fork).
    born: HashMap<i64, (Arc<str>, u64, u64)>,
    refreshed_ns: u64,
}

impl Names {
    /// Forgets the names read from /proc, at most every [`REFRESH_NS`], keeping those from
    /// end records younger than [`ENDED_KEEP_NS`]: true when it did.
    pub(super) fn refresh(&mut self, now_ns: u64) -> bool {
        if now_ns <= self.refreshed_ns + REFRESH_NS {
            return false;
        }
        self.refreshed_ns = now_ns;
        self.known.clear();
        let young = |at: u64| now_ns.saturating_sub(at) < ENDED_KEEP_NS;
        self.ended.retain(|_, (_, at)| young(*at));
        self.born.retain(|_, (_, at, _)| young(*at));
        let ended = self
            .ended
            .iter()
            .map(|(&pid, (name, _))| (pid, name.clone()));
        self.known.extend(ended);
        true
    }

    /// Task `pid` ended as `name` (its end record, read at `now_ns`).
    pub(super) fn ended(&mut self, pid: i64, name: Arc<str>, now_ns: u64) {
        self.known.insert(pid, name.clone());
        self.ended.insert(pid, (name, now_ns));
    }

    /// Task `pid` was made, or started a program, as `name` at `ts_ns` (its fork or exec
    /// record, read at `now_ns`); the latest record names it.
    pub(super) fn born(&mut self, pid: i64, name: Arc<str>, ts_ns: u64, now_ns: u64) {
        // Named `ended task` before this record was read: looked up again.
        if self
            .known
            .get(&pid)
            .is_some_and(|n| &**n == crate::event::ENDED_TASK)
        {
            self.known.remove(&pid);
        }
        match self.born.get(&pid) {
            Some(&(_, _, seen)) if seen > ts_ns => {}
            _ => {
                self.born.insert(pid, (name, now_ns, ts_ns));
            }
        }
    }

    /// The name `pid`'s fork or exec record gave it, if one was read.
    #[cfg(test)]
    pub(super) fn born_as(&self, pid: i64) -> Option<&str> {
        self.born.get(&pid).map(|b| &*b.0)
    }

    /// `pid`'s name (0: the idle task of `cpu`), from `read` (a live task's /proc entry) when
    /// not known yet, else from its fork or exec record.
    pub(super) fn get(
        &mut self,
        pid: i64,
        cpu: u16,
        read: impl FnOnce(i64) -> Option<String>,
    ) -> Arc<str> {
        // The idle tasks' names share the map under negative keys (no task has pid -1-N).
        let key = if pid == 0 { -1 - cpu as i64 } else { pid };
        self.known
            .entry(key)
            .or_insert_with(|| match pid {
                0 => format!("swapper/{cpu}").into(),
                _ => match (read(pid), self.born.get(&pid)) {
                    (Some(name), _) => name.into(),
                    (None, Some((name, _, _))) => name.clone(),
                    (None, None) => crate::event::ENDED_TASK.into(),
                },
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_tasks_name_outlives_one_refresh_and_not_two() {
        let mut n = Names::default();
        let gone = |_| None;
        assert!(n.refresh(REFRESH_NS + 1));
        n.ended(42, "worker".into(), REFRESH_NS + 5);
        // Just after its end record: a refresh keeps it.
        assert!(n.refresh(2 * REFRESH_NS + 2));
        assert_eq!(&*n.get(42, 0, gone), "worker");
        // Still younger than ENDED_KEEP_NS at the next refresh, older at the one after.
        assert!(n.refresh(3 * REFRESH_NS + 3));
        assert_eq!(&*n.get(42, 0, gone), "worker");
        assert!(n.refresh(4 * REFRESH_NS + 4));
        assert_eq!(&*n.get(42, 0, gone), crate::event::ENDED_TASK);
    }

    #[test]
    fn a_task_gone_from_proc_before_its_end_record_is_named_by_its_fork_or_exec() {
        let mut n = Names::default();
        assert!(n.refresh(REFRESH_NS + 1));
        n.born(50, "sh".into(), 10, REFRESH_NS + 2);
        // The exec read before the fork (another CPU's ring): the later record wins.
        n.born(51, "sleep".into(), 12, REFRESH_NS + 2);
        n.born(51, "sh".into(), 11, REFRESH_NS + 3);
        // Alive: /proc wins (a thread renames itself after it is made).
        assert_eq!(&*n.get(50, 0, |_| Some("worker".into())), "worker");
        // Gone: the last of its fork and exec records.
        assert_eq!(&*n.get(51, 0, |_| None), "sleep");
        assert_eq!(&*n.get(52, 0, |_| None), crate::event::ENDED_TASK);
        // Its record read after it was first asked for (its ring read later): named now.
        n.born(52, "worker".into(), 13, REFRESH_NS + 4);
        assert_eq!(&*n.get(52, 0, |_| None), "worker");
        // Kept as long as an end record's name.
        assert!(n.refresh(2 * REFRESH_NS + 2));
        assert_eq!(&*n.get(51, 0, |_| None), "sleep");
        assert!(n.refresh(4 * REFRESH_NS + 4));
        assert_eq!(&*n.get(51, 0, |_| None), crate::event::ENDED_TASK);
    }

    #[test]
    fn a_live_tasks_name_is_read_once_per_refresh() {
        let mut n = Names::default();
        let mut reads = 0;
        for _ in 0..3 {
            n.get(7, 0, |_| {
                reads += 1;
                Some("app".into())
            });
        }
        assert_eq!(reads, 1);
        assert!(!n.refresh(REFRESH_NS), "not a second yet");
        assert!(n.refresh(REFRESH_NS + 1));
        assert_eq!(&*n.get(7, 0, |_| Some("renamed".into())), "renamed");
        assert_eq!(&*n.get(0, 3, |_| unreachable!()), "swapper/3");
        assert_eq!(&*n.get(0, 4, |_| unreachable!()), "swapper/4");
    }
}
