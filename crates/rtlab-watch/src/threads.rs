//! Which threads are watched: the processes in scope (a process, its tree, a cgroup, every
//! process), their threads re-read from /proc, threads taken on at their first wait call,
//! and rtlab's own threads (the observer) on the traced CPUs.

use super::*;

impl WatchState {
    /// The processes in scope now (by [`WatchSpec::scope`], as last read), or None before a
    /// command's process is attached.
    pub(super) fn processes_in_scope(&mut self) -> Option<Vec<u32>> {
        let ours = std::process::id();
        match &self.spec.scope {
            Scope::Process { .. } if self.spec.pid <= 0 => None,
            Scope::Process { children } => {
                let pid = self.spec.pid as u32;
                if !rtlab_sys::procfs::process_alive(pid as i32) {
                    return Some(Vec::new());
                }
                Some(match children {
                    true => self.parents.tree(pid),
                    false => vec![pid],
                })
            }
            Scope::Cgroup(dir) => Some(
                rtlab_sys::procfs::cgroup_processes(dir)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|&p| p != ours)
                    .collect(),
            ),
            Scope::All => Some(
                self.parents
                    .read()
                    .into_iter()
                    .filter(|&(pid, ppid)| pid != 2 && ppid != 2 && pid != ours)
                    .map(|(pid, _)| pid)
                    .collect(),
            ),
        }
    }

    /// Whether process `pid`, found through one of its threads' events, is in scope (a
    /// process started since the last re-read).
    pub(super) fn in_scope(&self, pid: u32) -> bool {
        if self.processes.contains_key(&pid) {
            return true;
        }
        match &self.spec.scope {
            Scope::Process { children: false } => false,
            Scope::Process { children: true } => {
                // A descendant of the watched process.
                let root = self.spec.pid as u32;
                let mut p = pid;
                for _ in 0..64 {
                    match rtlab_sys::procfs::parent_of(p) {
                        Some(parent) if parent == root => return true,
                        Some(parent) if parent > 1 && parent != p => p = parent,
                        _ => return false,
                    }
                }
                false
            }
            // (Read again: any hierarchy, v1 or v2, has cgroup.procs.)
            Scope::Cgroup(dir) => {
                rtlab_sys::procfs::cgroup_processes(dir).is_ok_and(|procs| procs.contains(&pid))
            }
            Scope::All => pid != std::process::id(),
        }
    }

    pub(super) fn know(&mut self, pid: u32, what: &(String, String)) {
        if self.known.len() < MAX_KNOWN || self.known.contains_key(&pid) {
            self.known.insert(pid, what.clone());
        }
    }

    /// Thread `tid` is real-time now (`rt`) or time-sharing: its delays from now on count
    /// to its own series of that class (the one it has if it holds no delay yet, else one
    /// for the class) and to its name's series of that class.
    pub(super) fn classify(&mut self, tid: i64, rt: bool) {
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        if w.rt == rt {
            return;
        }
        w.rt = rt;
        if self.spec.rt_only && !rt {
            // Not watched while time-sharing (`--rt-only`): no series of that class; made
            // real-time again, it finds its series by name.
            w.pairs = Default::default();
            return;
        }
        let (name, pairs) = (w.name.clone(), w.pairs);
        for (k, pair) in pairs.iter().enumerate() {
            let Some(p) = pair else { continue };
            let kind = self.series[p.own as usize].kind;
            let own = self.own_of_class(p.own, &name, tid, rt);
            if own == Some(p.own) {
                (self.series[p.by_name as usize].members).retain(|&m| m != p.own);
            }
            let by_name = self.series_index(&name, None, kind, rt);
            if let (Some(b), Some(own)) = (by_name, own) {
                self.join(b, own);
            }
            if let Some(w) = self.threads.get_mut(&tid) {
                w.pairs[k] = by_name.zip(own).map(|(by_name, own)| Pair { own, by_name });
            }
        }
    }

    /// Re-reads the threads: new ones are watched, exited ones dropped (their series stay).
    /// The reads of /proc ([`WatchState::snapshot`]), then what they change
    /// ([`WatchState::apply`]), then the JVMs among the processes watched looked for.
    pub(super) fn rescan(&mut self, now: u64) {
        let snapshot = self.snapshot();
        if !self.apply(snapshot, now) {
            return;
        }
        // JVMs only among the processes actually watched (a thread of theirs chosen): a
        // file another process maps is none of the watch's business.
        let watched: std::collections::HashSet<u32> = (self.threads.keys())
            .filter_map(|t| self.thread_process.get(t))
            .copied()
            .filter(|p| self.processes.contains_key(p))
            .collect();
        self.jvms.look(watched.iter().copied(), now);
    }

    /// What a re-read finds in /proc now: rtlab's own observing threads, and the processes
    /// in scope with the threads the spec chooses (their names, classes, CPUs).
    pub(super) fn snapshot(&mut self) -> Snapshot {
        let ours = rtlab_sys::procfs::thread_names_of(std::process::id() as i32)
            .ok()
            .map(|ours| {
                ours.iter()
                    .filter(|t| rtlab_trace::observer::is_observer_thread(&t.name))
                    .map(|t| t.tid as i64)
                    .collect()
            });
        let Some(procs) = self.processes_in_scope() else {
            return Snapshot { ours, scope: None };
        };
        // The watched process gone (or a cgroup removed): the watch ends.
        let gone = match &self.spec.scope {
            Scope::Process { .. } => procs.is_empty(),
            Scope::Cgroup(dir) => !dir.is_dir(),
            Scope::All => false,
        };
        let cpus_of = |tid: i64| {
            rtlab_sys::affinity::thread_cpus(tid as i32)
                .map_or_else(CpuMask::default, |c| CpuMask::of(c.as_slice()))
        };
        let mut processes = Vec::new();
        for pid in procs.into_iter().filter(|_| !gone) {
            let Ok(of) = rtlab_sys::procfs::thread_names_of(pid as i32) else {
                continue;
            };
            let threads = of
                .into_iter()
                .map(|t| {
                    let tid = t.tid as i64;
                    let chosen = self.spec.threads.is_empty()
                        || self.spec.threads.iter().any(|p| p.matches(tid, &t.name));
                    let rt =
                        chosen && rtlab_sys::sched::thread_is_realtime(tid as i32).unwrap_or(false);
                    ThreadNow {
                        tid,
                        chosen,
                        rt,
                        cpus: (!self.spec.all_cpus).then(|| cpus_of(tid)),
                        // Before any event, where a real-time one is now.
                        last_cpu: (rt && self.arrived == 0)
                            .then(|| rtlab_sys::procfs::task_last_cpu(tid))
                            .flatten(),
                        name: t.name,
                    }
                })
                .collect();
            processes.push(ProcessNow {
                pid,
                // Read each time: an exec renames it.
                name: rtlab_sys::procfs::task_comm(pid as i64),
                cgroup: rtlab_sys::procfs::cgroup_of(pid).unwrap_or_default(),
                threads,
            });
        }
        Snapshot {
            ours,
            scope: Some((gone, processes)),
        }
    }

    /// What a re-read found ([`WatchState::snapshot`]) changes: threads found are watched
    /// (a renamed one keeps its state), those gone dropped once their last events are in,
    /// the processes in scope and the CPUs to trace follow. Whether processes in scope were
    /// read (not before the watch attaches, nor once its scope is gone).
    pub(super) fn apply(&mut self, snapshot: Snapshot, now: u64) -> bool {
        self.scanned_ns = now;
        if let Some(ours) = snapshot.ours {
            self.ours = ours;
            self.ours_ever.extend(self.ours.iter().copied());
        }
        self.adopted_misses.clear();
        let Some((gone, procs)) = snapshot.scope else {
            return false; // not attached yet
        };
        if gone {
            self.gone = true;
            return false;
        }
        let (mut processes, threads) = self.take_in(procs);
        for (p, what) in &processes {
            self.know(*p, what);
        }
        self.clocks.retain(|p| processes.contains_key(p));
        self.thread_process.retain(|_, p| processes.contains_key(p));
        let mut alive = HashMap::new();
        // Until a thread is chosen, where any of them may run (a new thread starts where its
        // creator may run).
        let mut wanted = (!self.spec.all_cpus).then(|| {
            threads.iter().fold(CpuMask::default(), |mut m, t| {
                m.union_with(t.cpus.as_ref().unwrap_or(&CpuMask::default()));
                m
            })
        });
        let mut chosen_cpus = CpuMask::default();
        let mut reclassify = Vec::new();
        let before = self.threads.len();
        for t in threads {
            let (tid, rt) = (t.tid, t.rt);
            if !t.chosen || (self.spec.rt_only && !rt) {
                continue;
            }
            if let Some(cpus) = &t.cpus {
                chosen_cpus.union_with(cpus);
            }
            let watched = match self.threads.remove(&tid) {
                Some(w) if w.name == t.name => w,
                // New, or renamed (a JVM names its threads after starting them): a renamed
                // one keeps its state, under its new name's series.
                previous => match self.new_watched(tid, t.name, rt) {
                    Some(fresh) => match previous {
                        Some(p) => {
                            let old = p.pairs.iter().flatten().map(|q| (q.own, now));
                            self.retired.extend(old);
                            Watched {
                                name: fresh.name,
                                rt: fresh.rt,
                                pairs: fresh.pairs,
                                refused: fresh.refused,
                                ..p
                            }
                        }
                        None => fresh,
                    },
                    None => continue,
                },
            };
            alive.insert(tid, watched);
            reclassify.push((tid, rt));
            // Before any event, where it is now (the watch's own setup keeps off it).
            if let Some(cpu) = t.last_cpu {
                self.rt_ran(cpu, now, false);
            }
        }
        // (Those found again were taken out of `self.threads` above: the rest are gone.)
        let changed = !self.threads.is_empty() || alive.len() != before;
        self.keep_ending(&mut alive, now);
        self.threads = alive;
        for (tid, rt) in reclassify {
            self.classify(tid, rt);
        }
        // A node's or a cgroup's real-time threads: only their processes are watched in the
        // kernel (their events in rings of their own, their wait calls recorded); the others
        // are read again for new real-time threads at each re-read.
        if self.spec.rt_only && !matches!(self.spec.scope, Scope::Process { .. }) {
            let with: std::collections::HashSet<u32> = self
                .threads
                .keys()
                .filter_map(|t| self.thread_process.get(t))
                .copied()
                .collect();
            processes.retain(|p, _| with.contains(p));
        }
        if processes.len() != self.processes.len()
            || processes.keys().any(|p| !self.processes.contains_key(p))
        {
            self.generation += 1;
        }
        self.processes = processes;
        self.generation += changed as u64;
        self.most_threads = self.most_threads.max(self.watched_threads());
        if !chosen_cpus.is_empty() {
            wanted = Some(chosen_cpus);
        }
        if wanted.as_ref().is_none_or(|w| !w.is_empty()) {
            self.cpus_wanted = wanted;
        }
        true
    }

    /// The processes a re-read found (each with its name, kept from before where it could not
    /// be read, and cgroup), and all their threads; each thread's process noted, and a JVM
    /// that runs virtual threads.
    fn take_in(
        &mut self,
        procs: Vec<ProcessNow>,
    ) -> (HashMap<u32, (String, String)>, Vec<ThreadNow>) {
        let mut processes = HashMap::new();
        let mut threads = Vec::new();
        for p in procs {
            let name = p
                .name
                .or_else(|| self.processes.get(&p.pid).map(|q| q.0.clone()))
                .unwrap_or_default();
            processes.insert(p.pid, (name, p.cgroup));
            for t in &p.threads {
                self.thread_process.insert(t.tid, p.pid);
            }
            if p.threads
                .iter()
                .any(|t| crate::jvm::keeps_virtual_threads(&t.name))
            {
                self.jvms.runs_virtual_threads(p.pid);
            }
            threads.extend(p.threads);
        }
        (processes, threads)
    }

    /// The watched threads not found again by a re-read (those left in `self.threads`): each
    /// is kept until its last events have been merged, then dropped (its series stay).
    fn keep_ending(&mut self, alive: &mut HashMap<i64, Watched>, now: u64) {
        // A thread that exited is kept until its last events have been merged (they lag
        // the re-read by up to the merge's lag): its last periods count, those it ran at once
        // after its last wait too.
        let ending: Vec<i64> = (self.threads.iter())
            .filter(|(t, _)| !alive.contains_key(t))
            .filter(|(_, w)| {
                w.exited_ns
                    .is_some_and(|s| now >= s + 4 * RULES.merge_lag_ns)
            })
            .map(|(&t, _)| t)
            .collect();
        for tid in ending {
            self.skipped(tid, None, &mut |_| {});
        }
        for (tid, mut w) in self.threads.drain() {
            let since = *w.exited_ns.get_or_insert(now);
            if now < since + 4 * RULES.merge_lag_ns {
                alive.insert(tid, w);
            } else {
                self.retired
                    .extend(w.pairs.iter().flatten().map(|p| (p.own, now)));
                // Delays it still held (its JVM's safepoint never seen to end) are lost.
                if let Some(h) = w.held.take() {
                    let next = h.next.into_iter().flat_map(|n| n.2);
                    for (kind, _) in h.delays.into_iter().chain(next) {
                        self.abandoned += 1;
                        if let Some(p) = w.pairs.get(kind as usize).copied().flatten() {
                            self.series[p.own as usize].unmeasured += 1;
                            self.series[p.by_name as usize].unmeasured += 1;
                        }
                    }
                }
            }
        }
    }

    /// Watches thread `tid` of the process now, if it is one and the spec chooses it
    /// (between re-reads: a thread the program just started).
    pub(super) fn adopt(&mut self, tid: i64) {
        if self.adopted_misses.contains(&tid) {
            return;
        }
        // Its process: a watched one, or one started since the last re-read that is in scope
        // (a child of the watched process, a new process of the cgroup).
        let process = rtlab_sys::procfs::process_of(tid).filter(|&p| self.in_scope(p));
        if let Some(p) = process {
            self.thread_process.insert(tid, p);
        }
        if let Some(p) = process.filter(|p| !self.processes.contains_key(p)) {
            let name = rtlab_sys::procfs::task_comm(p as i64).unwrap_or_default();
            let cgroup = rtlab_sys::procfs::cgroup_of(p).unwrap_or_default();
            self.know(p, &(name.clone(), cgroup.clone()));
            self.processes.insert(p, (name, cgroup));
            self.generation += 1;
        }
        let name = match process {
            Some(_) => std::fs::read_to_string(format!("/proc/{tid}/comm"))
                .map(|s| s.trim_end().to_string()),
            None => Err(std::io::Error::other("not in scope")),
        };
        let rt = rtlab_sys::sched::thread_is_realtime(tid as i32).unwrap_or(false);
        let chosen = name.as_ref().is_ok_and(|n| {
            (self.spec.threads.is_empty() || self.spec.threads.iter().any(|p| p.matches(tid, n)))
                && (!self.spec.rt_only || rt)
        });
        match (chosen, name) {
            (true, Ok(name)) => {
                if let Some(w) = self.new_watched(tid, name, rt) {
                    self.threads.insert(tid, w);
                    self.generation += 1;
                    self.most_threads = self.most_threads.max(self.watched_threads());
                }
            }
            // Not chosen (or gone): not looked up again until the next re-read.
            _ => {
                self.adopted_misses.insert(tid);
            }
        }
    }

    /// A newly watched thread's state, with its `wakeup` series (None at the series limit,
    /// counted).
    pub(super) fn new_watched(&mut self, tid: i64, name: String, rt: bool) -> Option<Watched> {
        // Its series are made at its first delay of each kind, under the name it has then
        // (a thread named right after it starts, as most are, is counted under that name).
        Some(Watched {
            name,
            rt,
            pairs: [None; 3],
            refused: [false; 3],
            wait: model::ThreadWait::new(tid),
            held: None,
            java_wait: None,
            clock: Default::default(),
            period_ns: None,
            last_timer_ns: None,
            last_timer_delay: None,
            entered_ns: None,
            exited_ns: None,
        })
    }

    /// At a switch on `cpu` from `prev` to `next`: where the watched real-time threads run
    /// (a spinner never switches out).
    pub(super) fn rt_switch(
        &mut self,
        cpu: usize,
        ts_ns: u64,
        prev: &rtlab_trace::event::Task,
        next: &rtlab_trace::event::Task,
    ) {
        let rt = |t: &rtlab_trace::event::Task| t.prio < 100 && self.threads.contains_key(&t.pid);
        let (left, came) = (rt(prev), rt(next) && next.pid != 0);
        if left || came {
            self.rt_ran(cpu, ts_ns, came);
        }
    }

    /// A watched real-time thread ran on `cpu` at `ts_ns`, and is on it now (`on`) or left.
    pub(super) fn rt_ran(&mut self, cpu: usize, ts_ns: u64, on: bool) {
        if self.rt_on.len() <= cpu {
            self.rt_on.resize(cpu + 1, (0, false));
        }
        let (at, _) = self.rt_on[cpu];
        self.rt_on[cpu] = (at.max(ts_ns), on);
    }

    /// The CPUs a watched real-time thread runs on, or ran on in the last [`RT_ON_NS`]
    /// before `now_ns`.
    pub fn rt_cpus(&self, now_ns: u64) -> CpuMask {
        let mut m = CpuMask::default();
        for (cpu, &(at, on)) in self.rt_on.iter().enumerate() {
            if on || (at > 0 && at + RT_ON_NS >= now_ns) {
                m.insert(cpu);
            }
        }
        m
    }

    /// Lets the reader move among `cpus` (the watch's, those rtlab may run on) to keep off
    /// the watched threads.
    pub(crate) fn let_reader_follow(&mut self, cpus: &[usize]) {
        let allowed = rtlab_sys::affinity::usable_cpus();
        let among: Vec<usize> = cpus
            .iter()
            .copied()
            .filter(|c| allowed.as_slice().contains(c))
            .collect();
        self.reader_among = if among.is_empty() {
            cpus.to_vec()
        } else {
            among
        };
    }

    /// Where the reader should run now, if it may move: on the CPUs the watched threads may
    /// not run on (their affinity, as last read), where there are any; else on those no
    /// watched real-time thread ran on lately; else anywhere.
    pub(crate) fn reader_cpus(&self, now_ns: u64) -> Option<Vec<usize>> {
        let all = &self.reader_among;
        if all.is_empty() {
            return None;
        }
        let off = |m: &CpuMask| -> Vec<usize> {
            all.iter().copied().filter(|&c| !m.contains(c)).collect()
        };
        let spare = self.cpus_wanted.as_ref().map(off).unwrap_or_default();
        if !spare.is_empty() {
            return Some(spare);
        }
        let spare = off(&self.rt_cpus(now_ns));
        Some(if spare.is_empty() { all.clone() } else { spare })
    }

    /// Counts the observer's time on `cpu` at a switch from `prev` to `next` (each CPU's
    /// events arrive in order).
    pub(super) fn observe(&mut self, cpu: usize, ts_ns: u64, prev: i64, next: i64) {
        if self.observer_since.len() <= cpu {
            self.observer_since.resize(cpu + 1, None);
        }
        if let Some(since) = self.observer_since[cpu].take() {
            if self.ours.contains(&prev) {
                self.observer_ns += ts_ns.saturating_sub(since);
            }
        }
        if next > 0 && self.ours.contains(&next) {
            self.observer_since[cpu] = Some(ts_ns);
        }
    }
}

/// What a re-read of /proc found ([`WatchState::snapshot`]): rtlab's own observing threads
/// (None: not read), and the processes in scope (None: not attached yet), with whether the
/// scope is gone.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) ours: Option<std::collections::HashSet<i64>>,
    pub(crate) scope: Option<(bool, Vec<ProcessNow>)>,
}

/// A process in scope, as read: its name (None: not read) and cgroup, and its threads.
#[derive(Debug, Default)]
pub(crate) struct ProcessNow {
    pub(crate) pid: u32,
    pub(crate) name: Option<String>,
    pub(crate) cgroup: String,
    pub(crate) threads: Vec<ThreadNow>,
}

/// A thread of a process in scope, as read: chosen by the spec's patterns, and if so whether
/// it is real-time; the CPUs it may run on (unless every CPU is traced anyway); where a
/// real-time one last ran (read before the watch's first event only).
#[derive(Debug, Default)]
pub(crate) struct ThreadNow {
    pub(crate) tid: i64,
    pub(crate) name: String,
    pub(crate) chosen: bool,
    pub(crate) rt: bool,
    pub(crate) cpus: Option<CpuMask>,
    pub(crate) last_cpu: Option<usize>,
}
