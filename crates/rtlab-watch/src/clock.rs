//! A Java thread's clock reads (`System.nanoTime()`, HotSpot's `os::javaTimeNanos`, probed
//! in each watched JVM process): a Java thread measures its own lateness with them, from the
//! read its park's time was computed from to the read after the park. HotSpot's park probes
//! lie a few microseconds inside those (the JVM's way into the park and back to Java code):
//! where the reads are seen, a park's time asked for counts from the read just before it,
//! and its delays end at the first read after it, as the thread's own figures do.

use super::*;

/// Event `e` at the time it happened: a clock read at the time it read, where its probe gives
/// it (its probe's own time is later), any other at its own.
pub(super) fn at_its_read(e: &Event) -> Event {
    let read = match &e.kind {
        Kind::Jvm {
            probe: JvmProbe::ClockRead,
            time_ns: Some(t),
            ..
        } => Some(*t).filter(|&t| t <= e.ts_ns && e.ts_ns - t <= RULES.read_before_probe_ns),
        _ => None,
    };
    Event {
        ts_ns: read.unwrap_or(e.ts_ns),
        ..e.clone()
    }
}

/// A Java park or sleep that ended, its delays waiting for the thread's next clock read.
#[derive(Debug, Clone)]
pub(super) struct ParkEnded {
    pub(super) delays: Vec<(DelayKind, Delay)>,
    /// Its end probe.
    pub(super) end: Event,
    /// How long the thread was kept off its CPU since (preempted), and since when it is.
    pub(super) off_ns: u64,
    pub(super) out_since: Option<u64>,
}

/// A watched thread's clock, as its JVM's probe shows it.
#[derive(Debug, Clone, Default)]
pub(super) struct ThreadClock {
    /// Its latest read.
    pub(super) read_ns: Option<u64>,
    /// Its latest reads (up to [`RECENT_READS`]): the periods a periodic thread runs at once
    /// are each measured at one.
    pub(super) recent: std::collections::VecDeque<u64>,
    /// Its park that ended, not read the clock since.
    pub(super) ended: Option<ParkEnded>,
    /// Its parks in a row read within `RULES.prompt_read_ns` of their return: a thread that
    /// measures itself right after each park.
    pub(super) prompt: u32,
    /// How long it has been off its CPU since its latest read, and since when it is.
    pub(super) off_since_read_ns: u64,
    pub(super) out_since: Option<u64>,
}

/// The most reads of a thread kept.
pub(super) const RECENT_READS: usize = 256;
/// Above this many reads a second in one JVM process (by default), its clock probe costs too
/// much (each read traps, a fraction of a microsecond: 20 000 of them about 1 % of a CPU
/// here): it is removed, and the process's parks are timed at the park probes.
pub const DEFAULT_LIMIT: u64 = 20_000;

/// The watched JVM processes' clock probes.
#[derive(Debug, Default)]
pub(super) struct Clocks {
    /// The most reads a second a probed process may make (0: no probes).
    pub(super) limit: u64,
    /// The processes whose reads are seen.
    pub(super) probed: std::collections::HashSet<u32>,
    /// Reads per process in the current second: since when, how many.
    rate: HashMap<u32, (u64, u64)>,
    /// Processes whose probes are to be removed.
    remove: Vec<u32>,
    /// The files (device, inode) a note told of.
    announced: std::collections::HashSet<(u64, u64)>,
}

impl Clocks {
    pub(super) fn new(limit: u64) -> Clocks {
        Clocks {
            limit,
            ..Default::default()
        }
    }

    /// Keeps the processes `alive` says are.
    pub(super) fn retain(&mut self, alive: impl Fn(&u32) -> bool) {
        self.probed.retain(&alive);
        self.rate.retain(|p, _| alive(p));
    }

    /// A read in `process` at `ts_ns`, any CPU's order: whether the process's reads just
    /// went over the limit.
    fn count(&mut self, process: u32, ts_ns: u64) -> bool {
        let (since, n) = self.rate.entry(process).or_insert((ts_ns, 0));
        if ts_ns >= *since + 1_000_000_000 {
            (*since, *n) = (ts_ns, 0);
        }
        *n += 1;
        *n == self.limit.saturating_add(1) && self.probed.remove(&process)
    }
}

impl WatchState {
    /// Whether the watch attaches to the watched JVMs' clocks.
    pub(crate) fn java_clock(&self) -> bool {
        self.clocks.limit > 0
    }

    /// What came of attaching to JVM `pid`'s clock (in `libjvm`).
    pub(crate) fn jvm_clock_probed(
        &mut self,
        libjvm: &rtlab_trace::usdt::Library,
        pid: u32,
        r: Result<bool, rtlab_trace::usdt::ProbeError>,
    ) {
        let first = self.clocks.announced.insert(libjvm.id);
        let note = match r {
            Ok(false) => return,
            Ok(true) => {
                self.clocks.probed.insert(pid);
                if let Some(a) = self.jvms.accounts.of(pid) {
                    a.clock = crate::account::Clock::Probed;
                    a.lib = a.lib.or(Some(libjvm.id));
                }
                return;
            }
            Err(why) => format!(
                "JVM: no clock probe ({why}): a Java thread's park is timed at HotSpot's park \
                 probes, a few microseconds inside the thread's own measure"
            ),
        };
        if first {
            self.jvms.note(note);
        }
    }

    /// The processes whose clock probes are to be removed (too many reads).
    pub(crate) fn take_clocks_to_remove(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.clocks.remove)
    }

    /// A clock read offered (any CPU order): counted against its process's limit.
    pub(super) fn offer_clock_read(&mut self, e: &Event) {
        let Kind::Jvm {
            probe: JvmProbe::ClockRead,
            process,
            ..
        } = &e.kind
        else {
            return;
        };
        if self.clocks.count(*process, e.ts_ns) {
            self.clocks.remove.push(*process);
            self.jvms.unclock(*process);
            if let Some(a) = self.jvms.accounts.of(*process) {
                a.clock = crate::account::Clock::Removed;
            }
        }
    }

    /// Thread `e.current_pid` read its clock at `e`: a park that ended just before ends here.
    pub(super) fn clock_read(&mut self, e: &Event, request: &mut dyn FnMut(Request)) {
        let tid = e.current_pid;
        // (Still coming from a process whose probe was just removed: not used.)
        let probed = self
            .thread_process
            .get(&tid)
            .is_some_and(|p| self.clocks.probed.contains(p));
        let Some(w) = self.threads.get_mut(&tid).filter(|_| probed) else {
            return;
        };
        w.clock.read_ns = Some(e.ts_ns);
        w.clock.off_since_read_ns = 0;
        if w.clock.recent.len() >= RECENT_READS {
            w.clock.recent.pop_front();
        }
        w.clock.recent.push_back(e.ts_ns);
        let Some(p) = w.clock.ended.take() else {
            return;
        };
        let ran = e.ts_ns.saturating_sub(p.end.ts_ns).saturating_sub(p.off_ns);
        let prompt = w.clock.prompt >= RULES.prompt_parks;
        let stalled = prompt && ran > RULES.after_park_ns && ran <= RULES.stalled_after_park_ns;
        // A stalled read leaves the thread's habit as it was, and so does one under 1 ms (a
        // short stall, or a little work: the host stops the vCPU often when it does so at
        // all); a longer one not taken as a stall is work: the habit is not known any more.
        if ran <= RULES.prompt_read_ns {
            w.clock.prompt = w.clock.prompt.saturating_add(1);
        } else if ran > RULES.after_park_ns && !stalled {
            w.clock.prompt = 0;
        }
        let end = if ran <= RULES.after_park_ns || stalled {
            e
        } else {
            &p.end
        };
        for (kind, delay) in p.delays {
            self.sample_kind(kind, tid, delay, end, request);
        }
    }

    /// Where the park thread `tid` begins at `begin_ns`, for `asked` (relative), counts its
    /// time from: its clock read just before (running; off its CPU in between, any time);
    /// or one up to `RULES.stalled_before_park_ns` before,
    /// where that read plus the time asked is the thread's next period to within
    /// `RULES.on_period_ns` (`parkNanos(next - System.nanoTime())`, the vCPU stopped after the
    /// read, or a read of the JVM's own came after it); else its begin probe.
    pub(super) fn park_base(&self, tid: i64, begin_ns: u64, asked: Option<u64>) -> u64 {
        let Some(w) = self.threads.get(&tid) else {
            return begin_ns;
        };
        // (A read after its last timer delay ended: one for this park.)
        let on_period = |r: u64| {
            let (Some(period), Some((last, _)), Some(asked), Some((_, end))) =
                (w.period_ns, w.last_timer_ns, asked, w.last_timer_delay)
            else {
                return false;
            };
            if r < end {
                return false;
            }
            let due = r.saturating_add(asked);
            let k = (due.saturating_sub(last) + period / 2) / period.max(1);
            k >= 1 && due.abs_diff(last + k * period) <= RULES.on_period_ns
        };
        // (Time off its CPU in between is no code of its own: blocked at a safepoint on its
        // way into the park, it parks for the time it computed before.)
        let ran = |r: u64| (begin_ns - r).saturating_sub(w.clock.off_since_read_ns);
        let latest = (w.clock.read_ns).filter(|&r| r <= begin_ns).filter(|&r| {
            ran(r) <= RULES.before_park_ns
                || (ran(r) <= RULES.stalled_before_park_ns && on_period(r))
        });
        // Where the latest read does not give its period, an earlier one since its last
        // delay that does is the Java code's: the JVM reads the clock itself on its way in
        // (after a handshake that held it there), later by as much.
        let earlier = || {
            (w.clock.recent.iter().rev().copied())
                .filter(|&r| r <= begin_ns && begin_ns - r <= RULES.stalled_before_park_ns)
                .find(|&r| on_period(r))
        };
        match latest {
            Some(r) if on_period(r) => r,
            _ => earlier().or(latest).unwrap_or(begin_ns),
        }
    }

    /// A Java park of thread `tid` ended at `end` with `delays`: they end at its next clock
    /// read where its JVM's reads are seen, else here.
    pub(super) fn park_ended(
        &mut self,
        tid: i64,
        delays: Vec<(DelayKind, Delay)>,
        end: &Event,
        request: &mut dyn FnMut(Request),
    ) {
        let probed = self
            .thread_process
            .get(&tid)
            .is_some_and(|p| self.clocks.probed.contains(p));
        self.end_park_unread(tid, request);
        match self.threads.get_mut(&tid) {
            Some(w) if probed && !delays.is_empty() => {
                w.clock.ended = Some(ParkEnded {
                    delays,
                    end: end.clone(),
                    off_ns: 0,
                    out_since: None,
                })
            }
            _ => {
                for (kind, delay) in delays {
                    self.sample_kind(kind, tid, delay, end, request);
                }
            }
        }
    }

    /// Thread `tid`'s park that ended with no clock read since ends at its end probe.
    pub(super) fn end_park_unread(&mut self, tid: i64, request: &mut dyn FnMut(Request)) {
        let Some(p) = self
            .threads
            .get_mut(&tid)
            .and_then(|w| w.clock.ended.take())
        else {
            return;
        };
        for (kind, delay) in p.delays {
            self.sample_kind(kind, tid, delay, &p.end, request);
        }
    }

    /// Thread `tid` left its CPU at `ts_ns` (`asleep`, or preempted): a park ended before,
    /// with no clock read since, ends at its probe if it went to sleep; if preempted, or
    /// asleep at its JVM's safepoint (a safepoint begun on its way back to Java code: it
    /// waits at the barrier, and its own measure counts that), the time off its CPU does not
    /// count against its next read. So too asleep in a wait with no time of its own, where
    /// the thread reads its clock right after each park (`RULES.prompt_parks` in a row):
    /// held on its way back to its read (at a safepoint's barrier its JVM's probes do not
    /// show, its log telling of it only later; a lock), which its own measure counts. (A
    /// new park of its own would ask for a time.)
    pub(super) fn clock_switched_out(
        &mut self,
        tid: i64,
        asleep: bool,
        ts_ns: u64,
        request: &mut dyn FnMut(Request),
    ) {
        let stopped = self
            .thread_process
            .get(&tid)
            .is_some_and(|&p| self.jvms.at_safepoint(p));
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        w.clock.out_since = Some(ts_ns);
        let held_back = w.clock.prompt >= RULES.prompt_parks
            && (w.wait.phase.call()).is_some_and(|c| c.asked.is_none() || c.waits_for_events());
        let Some(p) = w.clock.ended.as_mut() else {
            return;
        };
        match asleep && !stopped && !held_back {
            true => self.end_park_unread(tid, request),
            false => p.out_since = Some(ts_ns),
        }
    }

    /// Thread `tid` got a CPU at `ts_ns`.
    pub(super) fn clock_switched_in(&mut self, tid: i64, ts_ns: u64) {
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        if let Some(out) = w.clock.out_since.take() {
            w.clock.off_since_read_ns += ts_ns.saturating_sub(out);
        }
        if let Some(p) = w.clock.ended.as_mut() {
            if let Some(out) = p.out_since.take() {
                p.off_ns += ts_ns.saturating_sub(out);
            }
        }
    }

    /// Every park that ended with no clock read since ends at its end probe (events lost, or
    /// the run's end).
    pub(super) fn end_parks_unread(&mut self, request: &mut dyn FnMut(Request)) {
        let tids: Vec<i64> = self
            .threads
            .iter()
            .filter(|(_, w)| w.clock.ended.is_some())
            .map(|(&t, _)| t)
            .collect();
        for tid in tids {
            self.end_park_unread(tid, request);
        }
    }
}
