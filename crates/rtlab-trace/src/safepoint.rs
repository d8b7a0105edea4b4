//! A JVM's safepoints, as HotSpot's own probes tell them (its USDT probes, which the seeds'
//! engineers read with DTrace): when each began, when every Java thread had stopped, what VM
//! operation ran, when the threads were let go, from the JVM's own clock reads where they are
//! probed.

use crate::event::{Event, JvmProbe, Kind};
use std::collections::HashMap;
use std::sync::Arc;

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

/// Every watched JVM's safepoint in progress, from its probes' events in time order.
#[derive(Debug, Default)]
pub struct Safepoints {
    /// Per JVM process, its safepoint in progress.
    open: HashMap<u32, Open>,
    /// Per JVM process whose clock is probed, each thread's latest clock read.
    reads: HashMap<u32, HashMap<i64, u64>>,
    /// JVM processes whose clock probe was removed: their reads are not used.
    unclocked: std::collections::HashSet<u32>,
    /// Per JVM process, when its latest safepoint ended.
    ended: HashMap<u32, u64>,
}

impl Safepoints {
    /// A JVM's event: its safepoint begun or ended (returned, with what it did).
    pub fn step(&mut self, e: &Event) -> Option<Stop> {
        let Kind::Jvm {
            probe,
            process,
            name,
            ..
        } = &e.kind
        else {
            return None;
        };
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
    pub fn unclock(&mut self, process: u32) {
        self.unclocked.insert(process);
        self.reads.remove(&process);
    }

    /// Whether JVM `process` is at a safepoint (its threads stopped).
    pub fn at_safepoint(&self, process: u32) -> bool {
        self.open.contains_key(&process)
    }

    /// JVM `process`'s safepoint in progress, as if it ended at `now_ns`.
    pub fn open_at(&self, process: u32, now_ns: u64) -> Option<Stop> {
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

    /// Forgets the processes not in `alive` (ended, or no longer watched).
    pub fn retain(&mut self, alive: &std::collections::HashSet<u32>) {
        self.open.retain(|p, _| alive.contains(p));
        self.reads.retain(|p, _| alive.contains(p));
        self.ended.retain(|p, _| alive.contains(p));
        self.unclocked.retain(|p| alive.contains(p));
    }

    /// Events lost: a safepoint's end may be among them.
    pub fn forget(&mut self) {
        self.open.clear();
    }
}
