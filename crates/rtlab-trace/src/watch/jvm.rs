//! The watched JVMs, seen through HotSpot's own probes (its USDT probes, which the seeds'
//! engineers read with DTrace): which watched processes are JVMs, and when each is at a
//! safepoint (every Java thread stopped).

use crate::event::{Event, JvmProbe, Kind};
use crate::usdt::Library;
use std::collections::HashMap;
use std::sync::Arc;

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

/// One safepoint of a watched JVM, as its probes told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub process: u32,
    pub begin_ns: u64,
    /// When its VM operation began (every thread stopped by then: the time to reach the
    /// safepoint is `reached_ns - begin_ns`).
    pub reached_ns: Option<u64>,
    pub end_ns: u64,
    /// When its (last) VM operation ended: the VM thread lets the Java threads go after it.
    pub done_ns: Option<u64>,
    /// Its VM operation (`SerialGCCollect`, `ThreadDump`), where seen.
    pub operation: Option<Arc<str>>,
}

#[derive(Debug, Default)]
struct Open {
    begin_ns: u64,
    reached_ns: Option<u64>,
    done_ns: Option<u64>,
    operation: Option<Arc<str>>,
    /// The VM thread (which fired its begin probe), and its first two clock reads after
    /// its VM operation ended (where its clock is probed): the second, or the only one, is
    /// the JVM's own end of the safepoint (`SafepointTracing::end`; JDK 17 first times the
    /// operation, JDK 25 the start of leaving the safepoint).
    vm_thread: i64,
    end_reads: [Option<u64>; 2],
}

/// How long before a safepoint's begin probe the VM thread's clock read is the JVM's own
/// begin of it (`SafepointTracing::begin` reads it, then fires the probe: a microsecond
/// apart, but the vCPU is stopped in between now and then, for tens of microseconds, once
/// for 1.08 ms, which the JVM's account counts). Its latest read before the probe, and since
/// the JVM's previous safepoint ended, is that one.
const BEGIN_READ_NS: u64 = 10_000_000;
/// The most threads a JVM process's latest clock reads are kept for.
const MAX_READERS: usize = 4096;

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
    /// The files (device, inode) whose attached probes a note already told of.
    pub(crate) announced: std::collections::HashSet<(u64, u64)>,
    /// The kernel refused a uprobe for lack of privilege (a service with CAP_BPF and
    /// CAP_PERFMON only): no libjvm.so is looked for or read from then on.
    no_uprobes: bool,
    /// Per JVM process, its safepoint in progress.
    open: HashMap<u32, Open>,
    /// The processes that map a libjvm.so.
    jvms: std::collections::HashSet<u32>,
    /// The latest safepoints, oldest first, and how many there were in all.
    pub(crate) stops: std::collections::VecDeque<Stop>,
    pub(crate) stops_seen: u64,
    /// Per JVM process whose clock is probed, each thread's latest clock read.
    reads: HashMap<u32, HashMap<i64, u64>>,
    /// JVM processes whose clock probe was removed: their reads are not used.
    unclocked: std::collections::HashSet<u32>,
    /// Per JVM process, when its latest safepoint ended.
    ended: HashMap<u32, u64>,
}

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
            if lib.is_some() {
                self.jvms.insert(pid);
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
        self.open.retain(|p, _| alive.contains(p));
        self.reads.retain(|p, _| alive.contains(p));
        self.ended.retain(|p, _| alive.contains(p));
        self.unclocked.retain(|p| alive.contains(p));
        self.jvms.retain(|p| alive.contains(p));
    }

    /// Process `process` fired a JVM's probe: a JVM.
    pub(super) fn saw(&mut self, process: u32) {
        self.jvms.insert(process);
    }

    /// Whether `process` is a JVM (it maps a libjvm.so), or one whose probes fired.
    pub(crate) fn is_jvm(&self, process: u32) -> bool {
        self.jvms.contains(&process) || self.open.contains_key(&process)
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
    pub(crate) fn uprobes_refused(&mut self, why: &crate::usdt::ProbeError) {
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
        let Kind::Jvm {
            probe,
            process,
            name,
            ..
        } = &e.kind
        else {
            return None;
        };
        self.jvms.insert(*process);
        match probe {
            JvmProbe::SafepointBegin => {
                // From the JVM's own clock read where seen (as its -Xlog:safepoint counts).
                let after = self.ended.get(process).copied().unwrap_or(0);
                let read = self
                    .reads
                    .get(process)
                    .and_then(|r| r.get(&e.current_pid))
                    .filter(|&&r| r <= e.ts_ns && e.ts_ns - r <= BEGIN_READ_NS && r >= after);
                self.open.insert(
                    *process,
                    Open {
                        begin_ns: read.copied().unwrap_or(e.ts_ns),
                        vm_thread: e.current_pid,
                        ..Open::default()
                    },
                );
            }
            JvmProbe::ClockRead if self.unclocked.contains(process) => {}
            JvmProbe::ClockRead => {
                let reads = self.reads.entry(*process).or_default();
                if reads.len() >= MAX_READERS {
                    reads.clear();
                }
                reads.insert(e.current_pid, e.ts_ns);
                if let Some(o) = self.open.get_mut(process) {
                    if o.done_ns.is_some() && e.current_pid == o.vm_thread {
                        if let Some(r) = o.end_reads.iter_mut().find(|r| r.is_none()) {
                            *r = Some(e.ts_ns);
                        }
                    }
                }
            }
            JvmProbe::VmopBegin => {
                if let Some(o) = self.open.get_mut(process) {
                    o.reached_ns.get_or_insert(e.ts_ns);
                    if o.operation.is_none() {
                        o.operation = name.clone();
                    }
                }
            }
            JvmProbe::SafepointEnd => {
                let o = self.open.remove(process)?;
                // At the JVM's own clock read where seen: it logs the safepoint, then fires
                // the probe (its own account leaves the log's write out).
                let [first, second] = o.end_reads;
                let end_ns = second
                    .or(first)
                    .filter(|&r| r <= e.ts_ns)
                    .unwrap_or(e.ts_ns);
                self.ended.insert(*process, e.ts_ns);
                return Some(Stop {
                    process: *process,
                    begin_ns: o.begin_ns,
                    reached_ns: o.reached_ns,
                    end_ns,
                    done_ns: o.done_ns,
                    operation: o.operation,
                });
            }
            JvmProbe::VmopEnd => {
                if let Some(o) = self.open.get_mut(process) {
                    o.done_ns = Some(e.ts_ns);
                    o.end_reads = [None; 2];
                }
            }
            _ => {}
        }
        None
    }

    /// JVM `process`'s clock probe was removed: its reads are not used from now on.
    pub(crate) fn unclock(&mut self, process: u32) {
        self.unclocked.insert(process);
        self.reads.remove(&process);
    }

    /// Keeps `stop` among the latest.
    pub(crate) fn keep(&mut self, stop: &Stop) {
        if self.stops.len() >= KEEP_STOPS {
            self.stops.pop_front();
        }
        self.stops.push_back(stop.clone());
        self.stops_seen += 1;
    }

    /// Whether JVM `process` is at a safepoint (its threads stopped).
    pub(crate) fn at_safepoint(&self, process: u32) -> bool {
        self.open.contains_key(&process)
    }

    /// JVM `process`'s safepoint in progress, as if it ended at `now_ns`.
    pub(crate) fn open_at(&self, process: u32, now_ns: u64) -> Option<Stop> {
        let o = self.open.get(&process)?;
        Some(Stop {
            process,
            begin_ns: o.begin_ns,
            reached_ns: o.reached_ns,
            end_ns: now_ns,
            done_ns: o.done_ns,
            operation: o.operation.clone(),
        })
    }

    /// Events lost: a safepoint's end may be among them.
    pub(crate) fn forget(&mut self) {
        self.open.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn where_uprobes_are_refused_no_jvm_is_looked_for_again_and_it_is_said_once() {
        // Regression (hardening, third review, #8): the unit (no CAP_SYS_ADMIN) could attach
        // no uprobe yet opened and parsed every libjvm.so mapped.
        let mut j = Jvms::default();
        let refused = crate::usdt::ProbeError::Attach(rtlab_sys::SysError::PermissionDenied {
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
