//! A JVM's safepoints, as HotSpot's own probes tell them (its USDT probes, which the seeds'
//! engineers read with DTrace): when each began, when every Java thread had stopped, what VM
//! operation ran, when the threads were let go, from the JVM's own clock reads where they are
//! probed.

use crate::event::{Event, JvmProbe, Kind};
use std::collections::HashMap;
use std::sync::Arc;

/// One safepoint of a watched JVM, as its probes told it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
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
    /// For a collection's, what the JVM's own log said of it (`Pause Full for System.gc()`),
    /// where that log is read.
    pub cause: Option<Arc<str>>,
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
                    cause: None,
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
            cause: None,
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

/// A JVM's own account of a stop, from its unified log (`-Xlog:safepoint,gc` or the same
/// turned on at run time with `VM.log`, decorated with `timenanos`: CLOCK_MONOTONIC): what
/// a JVM without HotSpot's probes tells of its safepoints, and a second witness where the
/// probes are there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logged {
    /// A safepoint (`[safepoint]`): timed as the JVM times it.
    Safepoint(Stop),
    /// A collection's pause (`[gc]`): its title (`Pause Full`, `Pause Young (Normal)`), its
    /// cause (`System.gc()`, `Allocation Failure`, `G1 Evacuation Pause`), and when it ran.
    Pause {
        title: String,
        cause: Option<String>,
        begin_ns: u64,
        end_ns: u64,
    },
}

/// One line of a JVM's unified log, decorated with `timenanos` (and its tags); None for a
/// line that is no stop (another tag, `Using G1`, a partial line).
///
/// JDK 17: `Safepoint "G1CollectFull", Time since last: N ns, Reaching safepoint: N ns,
/// Cleanup: N ns, At safepoint: N ns, Total: N ns`; JDK 21 adds `Leaving safepoint: N ns`,
/// JDK 25 drops `Cleanup` and adds `, Threads: ...`. Written when the safepoint is over:
/// it began `Total` before the line's time. A collection's pause: `GC(3) Pause Full
/// (System.gc()) 10M->1M(20M) 12.345ms`, written at its end.
pub fn parse_logged(process: u32, line: &str) -> Option<Logged> {
    let (time_ns, message) = logged_time(line)?;
    if let Some(rest) = message.strip_prefix("Safepoint \"") {
        let (operation, rest) = rest.split_once('"')?;
        let ns = |field: &str| -> Option<u64> {
            let at = rest.find(&format!("{field}: "))? + field.len() + 2;
            rest[at..].split(' ').next()?.parse().ok()
        };
        let total = ns("Total")?;
        let begin_ns = time_ns.checked_sub(total)?;
        let reaching = ns("Reaching safepoint")?;
        // (JDK 17 cleans up before the operation; the probes' "reached" is the operation's
        // begin.)
        let reached = reaching + ns("Cleanup").unwrap_or(0);
        let at = ns("At safepoint")?;
        return Some(Logged::Safepoint(Stop {
            process,
            begin_ns,
            reached_ns: Some(begin_ns + reached),
            end_ns: begin_ns + total,
            done_ns: Some(begin_ns + reached + at),
            operation: Some(operation.into()),
            cause: None,
        }));
    }
    // `GC(3) Pause ...`: the pause's title and its cause (the last parenthesis before the
    // heap sizes), its length at the end.
    let rest = message.strip_prefix("GC(")?.split_once(") ")?.1;
    if !rest.starts_with("Pause ") {
        return None;
    }
    let (head, millis) = rest.rsplit_once(' ')?;
    let ms: f64 = millis.strip_suffix("ms")?.parse().ok()?;
    let head = match head.rsplit_once(' ') {
        Some((h, sizes)) if sizes.contains("->") => h,
        _ => head,
    };
    let (title, cause) = match head
        .rsplit_once(" (")
        .map(|(t, c)| (t, c.strip_suffix(')')))
    {
        Some((t, Some(c))) => (t, Some(c.to_string())),
        _ => (head, None),
    };
    let length = (ms * 1e6).round() as u64;
    Some(Logged::Pause {
        title: title.to_string(),
        cause,
        begin_ns: time_ns.checked_sub(length)?,
        end_ns: time_ns,
    })
}

/// A log line's `timenanos` decoration (`[123456789ns]`, its first one ending in `ns`) and
/// its message after the decorations.
fn logged_time(line: &str) -> Option<(u64, &str)> {
    let mut rest = line.trim_end();
    let mut time = None;
    while let Some(inner) = rest.strip_prefix('[') {
        let (decoration, after) = inner.split_once(']')?;
        let d = decoration.trim();
        if time.is_none() {
            time = d.strip_suffix("ns").and_then(|n| n.parse::<u64>().ok());
        }
        rest = after;
    }
    Some((time?, rest.trim_start()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_safepoint_is_timed_as_the_jvm_times_it_in_jdk_17_and_25() {
        let jdk17 = "[5000000000ns][safepoint] Safepoint \"G1CollectFull\", Time since last: \
                     1000 ns, Reaching safepoint: 30000 ns, Cleanup: 2000 ns, At safepoint: \
                     9000000 ns, Total: 9040000 ns";
        let Some(Logged::Safepoint(s)) = parse_logged(9, jdk17) else {
            panic!()
        };
        assert_eq!(s.begin_ns, 5_000_000_000 - 9_040_000);
        assert_eq!(s.reached_ns, Some(s.begin_ns + 32_000));
        assert_eq!(s.done_ns, Some(s.begin_ns + 32_000 + 9_000_000));
        assert_eq!((s.end_ns, s.process), (5_000_000_000, 9));
        assert_eq!(s.operation.as_deref(), Some("G1CollectFull"));
        // JDK 25: no Cleanup, Leaving and Threads added; padded decorations.
        let jdk25 = "[ 7000000000ns][safepoint    ] Safepoint \"ThreadDump\", Time since last: \
                     5 ns, Reaching safepoint: 40000 ns, At safepoint: 100000 ns, Leaving \
                     safepoint: 10000 ns, Total: 150000 ns, Threads: 1 runnable, 12 total";
        let Some(Logged::Safepoint(s)) = parse_logged(9, jdk25) else {
            panic!()
        };
        assert_eq!(s.begin_ns, 7_000_000_000 - 150_000);
        assert_eq!(s.reached_ns, Some(s.begin_ns + 40_000));
        assert_eq!(s.done_ns, Some(s.begin_ns + 140_000));
        assert_eq!(s.operation.as_deref(), Some("ThreadDump"));
    }

    #[test]
    fn a_logged_pause_gives_its_title_cause_and_time_and_other_lines_nothing() {
        let pause = |line| match parse_logged(1, line) {
            Some(Logged::Pause {
                title,
                cause,
                begin_ns,
                end_ns,
            }) => (title, cause, end_ns - begin_ns),
            other => panic!("{other:?}"),
        };
        let full = "[2000000000ns][gc] GC(3) Pause Full (System.gc()) 10M->1M(20M) 12.345ms";
        assert_eq!(
            pause(full),
            ("Pause Full".into(), Some("System.gc()".into()), 12_345_000)
        );
        let young = "[2000000000ns][gc] GC(4) Pause Young (Normal) (G1 Evacuation Pause) \
                     24M->3M(256M) 3.001ms";
        assert_eq!(
            pause(young),
            (
                "Pause Young (Normal)".into(),
                Some("G1 Evacuation Pause".into()),
                3_001_000
            )
        );
        for none in [
            "[2000000000ns][gc] Using G1",
            "[2000000000ns][gc] GC(4) To-space exhausted",
            "[2000000000ns][gc,start] GC(4) Pause Young",
            "Safepoint \"X\", Total: 5 ns",
            "[2000000000ns][safepoint] Safepoint \"X\", Reaching safepoint: 1 ns",
            "",
        ] {
            assert_eq!(parse_logged(1, none), None, "{none}");
        }
    }
}
