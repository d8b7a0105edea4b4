//! The watched JVMs, seen through HotSpot's own probes (its USDT probes, which the seeds'
//! engineers read with DTrace): which watched processes are JVMs, and when each is at a
//! safepoint (every Java thread stopped).

use rtlab_trace::event::{Event, Kind};
pub use rtlab_trace::safepoint::{Safepoints, Stop};
use rtlab_trace::usdt::Library;
use std::collections::HashMap;

/// A JVM maps libjvm.so within milliseconds of its start: a process started during the
/// watch is looked at this long, at most every `MAPS_EVERY_NS` (one running when the watch
/// began, once).
const MAPS_NS: u64 = 3_000_000_000;
const MAPS_EVERY_NS: u64 = 100_000_000;
/// The latest safepoints kept one by one (for the result).
const KEEP_STOPS: usize = 1000;
/// The most notes of what became of the JVMs (each said once; past these, counted). A node
/// may run thousands of short-lived processes that map a file named libjvm.so.
const MAX_NOTES: usize = 16;
/// The longest note kept (a path in it is the process owner's choice).
const MAX_NOTE_LEN: usize = 600;

#[derive(Debug, Default)]
pub(crate) struct Jvms {
    /// Processes looked at: since when and when last (`u64::MAX`: done with it).
    checked: HashMap<u32, (u64, u64)>,
    /// The processes in scope were looked at once.
    looked: bool,
    /// libjvm.so files found, not yet handed to the recorder: each with the process to probe
    /// (None: every process that maps it).
    found: Vec<(Library, Option<u32>)>,
    /// Probe the JVMs found in every process (the watch takes in every process anyway), where
    /// the file is root's.
    pub(crate) everywhere: bool,
    /// What became of each file found: probes attached, or why none (at most [`MAX_NOTES`],
    /// each once), and how many more there were.
    notes: Vec<String>,
    notes_over: u64,
    /// The kernel refused a uprobe for lack of privilege (a service with CAP_BPF and
    /// CAP_PERFMON only): no libjvm.so is looked for or read from then on.
    no_uprobes: bool,
    /// The processes that map a libjvm.so.
    jvms: std::collections::HashSet<u32>,
    /// Their safepoints.
    pub(crate) safepoints: Safepoints,
    /// The latest safepoints, oldest first, and how many there were in all.
    pub(crate) stops: std::collections::VecDeque<Stop>,
    pub(crate) stops_seen: u64,
    /// The libjvm.so each JVM process maps (device, inode), and those without probes.
    lib_of: HashMap<u32, (u64, u64)>,
    no_probes: std::collections::HashSet<(u64, u64)>,
    /// The JVMs whose own log is read (where they have no probes), and what it told.
    pub(crate) logs: crate::jvmlog::Followers,
    pub(crate) logged: HashMap<u32, Logged>,
    /// What is known of each JVM process and where from (said once each at the end).
    pub(crate) accounts: crate::account::Accounts,
    /// Read each JVM's own log beside its probes too (`--jvm-log`).
    pub(crate) second_witness: bool,
    /// The JVMs with probes whose log is read too, and the two accounts of their stops.
    witnessed: std::collections::HashSet<u32>,
    pub(crate) witnesses: crate::witness::Witnesses,
}

/// A thread a JVM starts for its virtual threads (JDK 21's VirtualThread-unparker, which
/// keeps their timed sleeps and parks; JDK 25's VirtualThread-unblocker), by its name as the
/// kernel has it (its first 15 bytes).
pub(crate) fn keeps_virtual_threads(thread: &str) -> bool {
    ["VirtualThread-unparker", "VirtualThread-unblocker"]
        .iter()
        .any(|n| n.starts_with(thread) && thread.len() >= 15)
}

/// What a JVM's own log told of it: its VM thread, its latest safepoints (oldest first), and
/// its collections' pauses not yet matched with the safepoint they were in.
#[derive(Debug, Default)]
pub(crate) struct Logged {
    pub(crate) vm_thread: Option<i64>,
    /// When its log was last read to its end.
    read_ns: u64,
    pub(crate) stops: std::collections::VecDeque<Stop>,
    pauses: Vec<(String, u64, u64)>,
}

/// How long a JVM's logged safepoints are kept for the explanations (past the explainer's
/// reach).
const LOGGED_KEPT_NS: u64 = 10_000_000_000;
/// How long after a safepoint's end its line may be written: the VM thread logs it after it
/// lets the Java threads go, and a real-time Java thread may then hold the VM thread's CPU.
const LOG_WRITE_LAG_NS: u64 = 100_000_000;
/// How long an explanation waits for a JVM's log at most when its follower has stopped (the
/// log could not be turned on, or the JVM ended: nothing more will be read).
const LOG_WAIT_MAX_NS: u64 = 500_000_000;
/// How long it waits at most for a follower still at work: the follower is one of rtlab's
/// time-sharing threads, and beside a busy machine such a thread waits for a CPU (beside a
/// storm of context switches, for up to 0.7 s at a time here); what it has not read yet is
/// not a log that says nothing.
const LOG_WAIT_READING_NS: u64 = 2_000_000_000;
const _: () = assert!(LOG_WRITE_LAG_NS < LOG_WAIT_MAX_NS && LOG_WAIT_MAX_NS < LOG_WAIT_READING_NS);

impl Jvms {
    /// Looks for libjvm.so in the processes in scope now (each for a while after it was first
    /// seen).
    pub(crate) fn look(&mut self, processes: impl Iterator<Item = u32> + Clone, now: u64) {
        if self.no_uprobes {
            return;
        }
        let started_since = self.looked;
        self.looked = true;
        for pid in processes.clone() {
            let (first, last) = *self.checked.entry(pid).or_insert((now, 0));
            if first == u64::MAX
                || now > first.saturating_add(MAPS_NS)
                || now < last + MAPS_EVERY_NS
            {
                continue;
            }
            // Opened once, as the process maps it: what the recorder reads and probes.
            let lib = match Library::of_process(pid) {
                Ok(lib) => lib,
                Err(why) => {
                    self.note(format!("JVM: process {pid} not probed ({why})"));
                    None
                }
            };
            // Running before the watch began: it has mapped whatever it maps.
            let done = lib.is_some() || !started_since;
            if let Some(l) = lib.as_ref() {
                self.jvms.insert(pid);
                self.lib_of.insert(pid, l.id);
                if let Some(a) = self.accounts.of(pid) {
                    a.lib = Some(l.id);
                    a.home = crate::account::home_of(&l.shown);
                    let home = a.home.as_deref().unwrap_or("");
                    a.version = a
                        .version
                        .take()
                        .or_else(|| crate::account::release_version(pid, home));
                }
                if self.no_probes.contains(&l.id) {
                    self.logs.follow(pid);
                } else if self.second_witness {
                    // (Its probes are the account used; the log a second, compared.)
                    self.witnessed.insert(pid);
                    self.logs.follow(pid);
                }
            }
            self.checked
                .insert(pid, if done { (u64::MAX, 0) } else { (first, now) });
            // In every process only a file of root's; another only in this process.
            let everywhere = |l: &Library| self.everywhere && l.root_owned;
            self.found.extend(lib.map(|l| {
                let whose = (!everywhere(&l)).then_some(pid);
                (l, whose)
            }));
        }
        let alive: std::collections::HashSet<u32> = processes.collect();
        self.checked.retain(|p, _| alive.contains(p));
        self.safepoints.retain(&alive);
        self.jvms.retain(|p| alive.contains(p));
        self.lib_of.retain(|p, _| alive.contains(p));
    }

    /// `libjvm` has no safepoint probes: the JVMs that map it (`pid`, and any found) are
    /// followed through their own log.
    pub(crate) fn without_probes(&mut self, libjvm: (u64, u64), pid: Option<u32>) {
        self.no_probes.insert(libjvm);
        let mapping: Vec<u32> = (self.lib_of.iter())
            .filter(|(_, id)| **id == libjvm)
            .map(|(p, _)| *p)
            .collect();
        for p in mapping.into_iter().chain(pid) {
            self.witnessed.remove(&p);
            self.logs.follow(p);
        }
    }

    /// What the JVMs' own logs told since the last call: their safepoints (each once, a
    /// collection's pause and cause named in the one it was in); their notes said.
    pub(crate) fn take_logged(&mut self) -> Vec<Stop> {
        let found = self.logs.take();
        for note in found.notes {
            self.note(note);
        }
        for (pid, version, on_ns) in found.logs_on {
            if self.witnessed.contains(&pid) {
                self.witnesses.log_on(pid, on_ns);
            }
            if let Some(a) = self.accounts.of(pid) {
                a.log = true;
                a.version = a.version.take().or(version);
            }
        }
        for (pid, vm) in found.vm_threads {
            self.logged.entry(pid).or_default().vm_thread = vm;
        }
        for (pid, at) in found.read_at {
            self.logged.entry(pid).or_default().read_ns = at;
        }
        let mut stops = Vec::new();
        for (pid, logged) in found.logged {
            let l = self.logged.entry(pid).or_default();
            match logged {
                rtlab_trace::safepoint::Logged::Pause {
                    title,
                    cause,
                    begin_ns,
                    end_ns,
                } => {
                    let what = match cause {
                        Some(c) => format!("{title} for {c}"),
                        None => title,
                    };
                    l.pauses.push((what, begin_ns, end_ns));
                }
                rtlab_trace::safepoint::Logged::Safepoint(mut stop) => {
                    // A collection's pause is logged inside its safepoint, before it.
                    let inside =
                        |p: &(String, u64, u64)| p.1 >= stop.begin_ns && p.2 <= stop.end_ns;
                    if let Some(p) = l.pauses.iter().find(|p| inside(p)) {
                        stop.cause = Some(p.0.as_str().into());
                    }
                    l.pauses.retain(|p| p.2 > stop.end_ns);
                    if self.witnessed.contains(&pid) {
                        self.witnesses.logged(&stop);
                        continue;
                    }
                    while l
                        .stops
                        .front()
                        .is_some_and(|s| s.end_ns + LOGGED_KEPT_NS < stop.end_ns)
                    {
                        l.stops.pop_front();
                    }
                    l.stops.push_back(stop.clone());
                    stops.push(stop);
                }
            }
        }
        stops
    }

    /// Whether a delay of JVM `process`'s that ended at `woke_ns` can be explained now (at
    /// `now_ns`): its log read far enough (a stop ending after it already read: the log is
    /// written in order; or read long enough after it for any stop before it to be written),
    /// or waited for long enough. Any process whose log is not followed: at once.
    pub(crate) fn log_covers(&self, process: u32, woke_ns: u64, now_ns: u64) -> bool {
        // (A JVM with probes is explained by them, its log only compared.)
        let explained_by_log = self.logs.follows(process) && !self.witnessed.contains(&process);
        if !explained_by_log {
            return true;
        }
        let read = self.logged.get(&process).is_some_and(|l| {
            let latest = l.stops.back().map_or(0, |s| s.end_ns);
            latest >= woke_ns || l.read_ns >= woke_ns + LOG_WRITE_LAG_NS
        });
        let wait = match self.logs.reading(process) {
            true => LOG_WAIT_READING_NS,
            false => LOG_WAIT_MAX_NS,
        };
        read || now_ns >= woke_ns + wait
    }

    /// JVM `process`'s logged safepoints over `from_ns..to_ns`, and its VM thread.
    pub(crate) fn logged_over(
        &self,
        process: u32,
        (from_ns, to_ns): (u64, u64),
    ) -> rtlab_trace::watcher::LoggedStops {
        let Some(l) = self.logged.get(&process) else {
            return Default::default();
        };
        rtlab_trace::watcher::LoggedStops {
            stops: (l.stops.iter())
                .filter(|s| s.end_ns > from_ns && s.begin_ns < to_ns)
                .cloned()
                .collect(),
            vm_thread: l.vm_thread,
        }
    }

    /// Process `process` fired a JVM's probe: a JVM.
    pub(super) fn saw(&mut self, process: u32) {
        self.jvms.insert(process);
    }

    /// Whether `process` is a JVM (it maps a libjvm.so), or one whose probes fired.
    pub(crate) fn is_jvm(&self, process: u32) -> bool {
        self.jvms.contains(&process) || self.safepoints.at_safepoint(process)
    }

    /// Process `pid` has a thread a JVM starts for its virtual threads.
    pub(crate) fn runs_virtual_threads(&mut self, pid: u32) {
        if let Some(a) = self.accounts.of(pid) {
            a.virtual_threads = true;
        }
    }

    /// Every process from now on is one started during the watch (a command's).
    pub(crate) fn all_new(&mut self) {
        self.looked = true;
    }

    /// The libjvm.so files found since the last call, each with the process to probe.
    pub(crate) fn take_found(&mut self) -> Vec<(Library, Option<u32>)> {
        std::mem::take(&mut self.found)
    }

    /// A JVM about to start will map `libjvm` (probed in every process: its process is not
    /// known before it starts). Only a file of root's: another is probed in the JVM's own
    /// process once it maps it.
    pub(crate) fn expect(&mut self, libjvm: &std::path::Path) {
        match Library::open(libjvm) {
            Ok(lib) if lib.root_owned => self.found.push((lib, None)),
            Ok(_) => {}
            Err(why) => self.note(format!("JVM: {why}")),
        }
    }

    /// Uprobes are not permitted here (`why`): said once, and no JVM is looked for again.
    pub(crate) fn uprobes_refused(&mut self, why: &rtlab_trace::usdt::ProbeError) {
        if !self.no_uprobes {
            self.no_uprobes = true;
            self.found.clear();
            self.note(format!(
                "JVM: uprobes are not permitted to rtlab here ({why}): no JVM's libjvm.so is \
                 read or probed, its threads are watched from the kernel only (root with \
                 CAP_SYS_ADMIN attaches them)"
            ));
        }
    }

    /// Says `text` once (the first [`MAX_NOTES`] different ones; past them, counted).
    pub(crate) fn note(&mut self, mut text: String) {
        if self.notes.contains(&text) {
            return;
        }
        if self.notes.len() >= MAX_NOTES {
            self.notes_over += 1;
            return;
        }
        if text.len() > MAX_NOTE_LEN {
            let mut end = MAX_NOTE_LEN;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push_str("...");
        }
        self.notes.push(text);
    }

    /// The notes said, and how many more were not kept.
    pub(crate) fn notes(&self) -> (&[String], u64) {
        (&self.notes, self.notes_over)
    }

    /// Files found not yet handed to the recorder.
    pub(crate) fn pending(&self) -> bool {
        !self.found.is_empty()
    }

    /// A JVM's event: its safepoint begun or ended (returned, with what it did).
    pub(crate) fn step(&mut self, e: &Event) -> Option<Stop> {
        if let Kind::Jvm { process, .. } = &e.kind {
            self.jvms.insert(*process);
        }
        self.safepoints.step(e)
    }

    /// JVM `process`'s clock probe was removed: its reads are not used from now on.
    pub(crate) fn unclock(&mut self, process: u32) {
        self.safepoints.unclock(process);
    }

    /// Keeps `stop` among the latest.
    pub(crate) fn keep(&mut self, stop: &Stop) {
        if self.stops.len() >= KEEP_STOPS {
            self.stops.pop_front();
        }
        self.stops.push_back(stop.clone());
        self.stops_seen += 1;
        if self.witnessed.contains(&stop.process) {
            self.witnesses.probe(stop);
        }
    }

    /// Whether JVM `process` is at a safepoint (its threads stopped).
    pub(crate) fn at_safepoint(&self, process: u32) -> bool {
        self.safepoints.at_safepoint(process)
    }

    /// Events lost: a safepoint's end may be among them.
    pub(crate) fn forget(&mut self) {
        self.safepoints.forget();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jvm_running_virtual_threads_is_known_by_its_threads_kernel_names() {
        assert!(keeps_virtual_threads("VirtualThread-u"));
        assert!(keeps_virtual_threads("VirtualThread-unparker"));
        assert!(!keeps_virtual_threads("VirtualThread"));
        assert!(!keeps_virtual_threads("ForkJoinPool-1-"));
        let mut j = Jvms::default();
        j.runs_virtual_threads(7);
        j.runs_virtual_threads(7);
        let (notes, _) = j.accounts.notes(|_| None);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("JVM: process 7,") && notes[0].contains("virtual threads"));
    }

    #[test]
    fn notes_are_said_once_each_a_few_of_them_and_short_the_rest_counted() {
        // Regression (hardening, third review, #4): 3 000 short-lived processes mapping a
        // bogus libjvm.so made 3 000 note lines (11.7 MB of output).
        let mut j = Jvms::default();
        for _ in 0..3 {
            j.note("JVM: no probes (same file)".into());
        }
        assert_eq!(
            j.notes(),
            (&["JVM: no probes (same file)".to_string()][..], 0)
        );
        for pid in 0..3_000 {
            j.note(format!(
                "JVM: process {pid} not probed ({})",
                "x".repeat(10_000)
            ));
        }
        let (notes, more) = j.notes();
        assert_eq!(notes.len(), MAX_NOTES);
        assert_eq!(more, 3_000 - (MAX_NOTES as u64 - 1));
        assert!(notes.iter().all(|n| n.len() <= MAX_NOTE_LEN + 3));
    }

    #[test]
    fn an_explanation_waits_for_the_jvms_own_log_to_be_read_past_its_delay() {
        let mut j = Jvms::default();
        let (woke, p) = (1_000_000_000, u32::MAX - 7);
        // A process whose log is not followed: at once.
        assert!(j.log_covers(p, woke, woke));
        // (No such process: its follower ends at once, having said so.)
        j.logs.follow(p);
        assert!(!j.log_covers(p, woke, woke + 1));
        // Read to its end long enough after the delay: any stop in it would be there.
        j.logged.entry(p).or_default().read_ns = woke + LOG_WRITE_LAG_NS - 1;
        assert!(!j.log_covers(p, woke, woke + 1));
        j.logged.entry(p).or_default().read_ns = woke + LOG_WRITE_LAG_NS;
        assert!(j.log_covers(p, woke, woke + 1));
        // A stop that ended after it already read: the log is written in order.
        let mut k = Jvms::default();
        k.logs.follow(p);
        let stop = Stop {
            process: p,
            begin_ns: woke - 5,
            reached_ns: None,
            end_ns: woke + 1,
            done_ns: None,
            operation: None,
            cause: None,
        };
        k.logged.entry(p).or_default().stops.push_back(stop);
        assert!(k.log_covers(p, woke, woke + 1));
        // Never read (its log could not be turned on): while its follower is at work, up to
        // the longer wait (a follower held off its CPU is not a log that says nothing);
        // once it has stopped, the shorter.
        let mut n = Jvms::default();
        n.logs.follow(p);
        let began = std::time::Instant::now();
        while n.logs.reading(p) && began.elapsed() < std::time::Duration::from_secs(10) {
            assert!(!n.log_covers(p, woke, woke + LOG_WAIT_READING_NS - 1));
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!n.logs.reading(p), "its follower ends (no such process)");
        assert!(!n.log_covers(p, woke, woke + LOG_WAIT_MAX_NS - 1));
        assert!(n.log_covers(p, woke, woke + LOG_WAIT_MAX_NS));
    }

    #[test]
    fn where_uprobes_are_refused_no_jvm_is_looked_for_again_and_it_is_said_once() {
        // Regression (hardening, third review, #8): the unit (no CAP_SYS_ADMIN) could attach
        // no uprobe yet opened and parsed every libjvm.so mapped.
        let mut j = Jvms::default();
        let refused =
            rtlab_trace::usdt::ProbeError::Attach(rtlab_sys::SysError::PermissionDenied {
                what: "perf_event_open(uprobe)".into(),
            });
        assert!(refused.not_permitted());
        j.uprobes_refused(&refused);
        j.uprobes_refused(&refused);
        assert_eq!(j.notes().0.len(), 1, "{:?}", j.notes());
        // This process maps files: none is looked at.
        j.look([std::process::id()].into_iter(), 1);
        assert!(j.take_found().is_empty() && j.checked.is_empty());
    }
}
