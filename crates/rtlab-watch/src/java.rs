//! A Java thread's own view: its waits end where its Java code goes on. Inside a park or a
//! sleep (where its JVM's probes mark them) that is the probe at its end; elsewhere, a wait
//! that returned while its JVM was at a safepoint ends where the safepoint's barrier lets the
//! thread go ([`Held`]); and the periods a periodic Java thread runs at once after a long
//! delay are counted late as it counts them.

use super::*;

/// A thread's delays whose wait returned while its JVM was at a safepoint. A Java thread
/// then blocks at the safepoint's barrier until the VM thread lets every thread go, at the
/// safepoint's end: its delays end where that barrier wait returns, as the thread lives
/// them. A thread the safepoint does not stop (the VM's own, a collector's, native code)
/// goes on: its delays end where they returned. Which one it is shows at its returns after:
/// a wait woken within `RULES.barrier_ns` of the safepoint's end is the barrier's; more than
/// `RULES.max_returns_to_barrier` woken returns in one safepoint, a thread running through it.
#[derive(Debug, Clone)]
pub(super) struct Held {
    /// The return that held them.
    pub(super) at: Event,
    pub(super) delays: Vec<(DelayKind, Delay)>,
    /// Its next return, while the safepoint was still on (the barrier's wait is woken just
    /// before the JVM's end probe fires): when its wait was woken, and its own delays.
    pub(super) next: Option<NextReturn>,
    /// When that safepoint ended, if it has (its next return, or its next wait, decides).
    pub(super) ended_ns: Option<u64>,
    /// When its VM operation ended, where seen.
    pub(super) done_ns: Option<u64>,
    /// Its woken returns since (a Java thread's way to the barrier has one or two: a lock
    /// handed over on its way back, then the barrier's; a thread that runs through the
    /// safepoint has more).
    pub(super) returns: u32,
}

/// A Java thread's park or sleep in progress (its JVM's `thread__park__begin`, or
/// `thread__sleep__begin`, came; its end has not): the wait calls it makes inside (the
/// park's own, a lock taken back, a safepoint's barrier) are one wait, as the Java code
/// lives it, from its first timer's expiry or wakeup to the probe at its end.
#[derive(Debug, Clone, Default)]
pub(super) struct JavaWait {
    /// The time the park asked for: `parkNanos`' relative time from the thread's clock read
    /// just before (see `clock`: up to 20 ms before where the host held the park back),
    /// else from its begin probe (either nearer the program's own deadline than the time the
    /// JVM asks the kernel for, computed later).
    pub(super) deadline_ns: Option<u64>,
    /// That read (else its begin probe), and its first wait call's entry: the JVM reads its
    /// clock again in between, on its way to the wait, for the kernel's deadline (later
    /// than the thread's by as much: by the time the host stops the vCPU there, too).
    pub(super) base_ns: u64,
    pub(super) entry_ns: Option<u64>,
    /// The delays its first woken wait call returned with.
    pub(super) delays: Vec<(DelayKind, Delay)>,
}

/// Where a periodic thread that ran `m` periods at once (the first due at `first`, `period`
/// apart) measured each: where it read its clock as often for each (`reads`: since the delay
/// before them ended, up to its next wait, `waits` if it waits again: then the last read found
/// that wait's period not due yet), at its own read of it (the first for one read a period,
/// the second for two ...); else each at `caught_up`.
pub(super) fn measured_at(
    (first, period, m): (u64, u64, u64),
    reads: &[u64],
    waits: bool,
    caught_up: u64,
) -> impl Iterator<Item = (u64, u64)> + '_ {
    let stride = reads_per_period((first, period, m), reads, waits);
    (0..m).map(move |j| {
        let at = stride.map_or(caught_up, |s| reads[((j + 1) * s - 1) as usize]);
        (first + j * period, at)
    })
}

/// How many of `reads` the thread made for each of the `m` periods (see [`measured_at`]),
/// where they say so: as many for each, each period's own read at or after its deadline.
pub(super) fn reads_per_period(
    (first, period, m): (u64, u64, u64),
    reads: &[u64],
    waits: bool,
) -> Option<u64> {
    let n = (reads.len() as u64).saturating_sub(waits as u64);
    (m > 0 && n >= m && n.is_multiple_of(m))
        .then(|| n / m)
        .filter(|&s| (0..m).all(|j| reads[((j + 1) * s - 1) as usize] >= first + j * period))
}

/// A return from a wait: where, when its wait was woken, and the delays it ends.
pub(super) type NextReturn = (Event, Option<u64>, Vec<(DelayKind, Delay)>);

/// Whether a wait woken at `woken` is a safepoint's barrier (ended at `end_ns`, its VM
/// operation at `done_ns`): the VM thread wakes the Java threads after its operation, just
/// before the end probe (later where it is itself kept off its CPU meanwhile).
pub(super) fn barrier_wake(woken: u64, end_ns: u64, done_ns: Option<u64>) -> bool {
    woken.abs_diff(end_ns) <= RULES.barrier_ns
        || done_ns.is_some_and(|done| woken >= done && woken <= end_ns + RULES.barrier_ns)
}

impl WatchState {
    /// A Java thread's park or sleep begun or ended at `e` (its JVM's probe): at its end, the
    /// delays its wait calls returned with end here, where its Java code goes on. A timer
    /// delay counts from the time the park asked for, where its begin probe said.
    pub(super) fn java_wait(
        &mut self,
        e: &Event,
        probe: JvmProbe,
        park_ns: Option<u64>,
        request: &mut dyn FnMut(Request),
    ) {
        let tid = e.current_pid;
        if probe == JvmProbe::ClockRead {
            return self.clock_read(e, request);
        }
        if matches!(probe, JvmProbe::ParkBegin | JvmProbe::SleepBegin) {
            // One that ended with no clock read since: ended at its end probe.
            self.end_park_unread(tid, request);
        }
        let base = self.park_base(tid, e.ts_ns, park_ns);
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        if matches!(probe, JvmProbe::ParkBegin | JvmProbe::SleepBegin) {
            // One begun before without its end (lost from sight): nothing measured from it.
            if w.java_wait.take().is_some_and(|j| !j.delays.is_empty()) {
                self.abandoned += 1;
            }
            let Some(w) = self.threads.get_mut(&tid) else {
                return;
            };
            w.entered_ns = Some(e.ts_ns);
            w.java_wait = Some(JavaWait {
                deadline_ns: park_ns.map(|t| base.saturating_add(t)),
                base_ns: base,
                entry_ns: None,
                delays: Vec::new(),
            });
            return;
        }
        let Some(j) = w.java_wait.take() else {
            return; // begun before the watch saw it: ended where its call returned
        };
        let mut delays = j.delays;
        let read_to_wait = j.entry_ns.map_or(0, |t| t.saturating_sub(j.base_ns));
        let java = match probe {
            JvmProbe::SleepEnd => DeadlineSource::JavaSleep,
            _ => DeadlineSource::JavaPark,
        };
        for (kind, d) in delays.iter_mut() {
            if let Some(asked) = j.deadline_ns.filter(|_| *kind == DelayKind::Timer) {
                if asked < d.since && d.since - asked <= RULES.park_deadline_ns + read_to_wait {
                    d.since = asked;
                    d.source = Some(java);
                }
            }
        }
        // Ended past the time it asked for with no timer seen (its expiry and wakeup not
        // recorded: the futex wait's own deadline is not in its call): late from that time,
        // as the thread sees it, all the same.
        if let Some(asked) = j.deadline_ns.filter(|&a| a <= e.ts_ns) {
            if !delays.iter().any(|(k, _)| *k == DelayKind::Timer) {
                let source = Some(java);
                delays.push((
                    DelayKind::Timer,
                    Delay {
                        source,
                        ..Delay::from(asked)
                    },
                ));
            }
        }
        self.park_ended(tid, delays, e, request);
    }

    /// Held delays that end at `end`: each, and the periods it absorbed.
    pub(super) fn stretch(
        &mut self,
        tid: i64,
        delays: Vec<(DelayKind, Delay)>,
        end: &Event,
        request: &mut dyn FnMut(Request),
    ) {
        for (kind, delay) in delays {
            self.sample_kind(kind, tid, delay, end, request);
        }
    }

    /// Held delays of a thread the safepoint did not stop: each ends where it returned.
    pub(super) fn release_at_own_returns(
        &mut self,
        tid: i64,
        h: Held,
        request: &mut dyn FnMut(Request),
    ) {
        for (kind, delay) in h.delays {
            self.sample_kind(kind, tid, delay, &h.at, request);
        }
        if let Some((at, _, delays)) = h.next {
            for (kind, delay) in delays {
                self.sample_kind(kind, tid, delay, &at, request);
            }
        }
    }

    /// JVM `stop.process`'s safepoint ended: its threads' held delays with a second return
    /// in it are settled (that return was the barrier's where woken at the end); the others
    /// wait for their next return or wait, knowing the end.
    pub(super) fn settle_held(&mut self, stop: &Stop, request: &mut dyn FnMut(Request)) {
        let mut settled = Vec::new();
        for (tid, w) in self.threads.iter_mut() {
            if self.thread_process.get(tid) != Some(&stop.process) {
                continue;
            }
            match w.held.as_mut() {
                // Held since an earlier safepoint, asleep through this one: they were not
                // this one's to stretch.
                Some(h) if h.next.is_some() || h.ended_ns.is_some() => {
                    settled.push((*tid, w.held.take().expect("some")))
                }
                Some(h) => {
                    h.ended_ns = Some(stop.end_ns);
                    h.done_ns = stop.done_ns;
                }
                None => {}
            }
        }
        for (tid, mut h) in settled {
            let barrier = h.ended_ns.is_none()
                && h.next.as_ref().is_some_and(|n| {
                    n.1.is_some_and(|woken| barrier_wake(woken, stop.end_ns, stop.done_ns))
                });
            if !barrier {
                self.release_at_own_returns(tid, h, request);
                continue;
            }
            let (at, _, delays) = h.next.take().expect("checked");
            self.stretch(tid, h.delays, &at, request);
            for (kind, delay) in delays {
                self.sample_kind(kind, tid, delay, &at, request);
            }
        }
    }

    /// The periods of a periodic Java thread it ran without waiting, seen when its next
    /// timer delay begins at `next`: its deadlines after the last one's start (one period
    /// apart) that it never waited for. After any delay over a period (a JVM's stop, while it
    /// waited or while it ran, or the machine's), a Java thread runs the periods it missed at
    /// once (`LockSupport.parkNanos` with a time already past makes no system call), then
    /// waits for the next: each such period is late, as it sees it, by the time from its
    /// deadline to its own clock read of it where seen, else to that wait's entry. (Periods
    /// the kernel never sees, as HdrHistogram's correction for an expected interval counts
    /// them.)
    ///
    /// With `next` None the thread waits no more (the run ends, or the thread did): the
    /// periods it ran at once up to its last clock read count, where it read its clock as
    /// often for each; none asked about.
    pub(super) fn skipped(
        &mut self,
        tid: i64,
        next: Option<(u64, &Event)>,
        request: &mut dyn FnMut(Request),
    ) {
        // Only a Java thread: a C program's sleep to a time already past is a call of its
        // own (counted), and one that skips the periods it missed (cyclictest) does not
        // count them. (One that waits no more is counted at its clock reads, a Java thread's
        // only: its process may be gone by now.)
        let jvm =
            next.is_none() || (self.thread_process.get(&tid)).is_some_and(|&p| self.jvms.is_jvm(p));
        let Some(w) = self.threads.get(&tid).filter(|_| jvm) else {
            return;
        };
        let (Some(period), Some((since, end))) = (w.period_ns, w.last_timer_delay) else {
            return;
        };
        let Some(pair) = w.pairs[DelayKind::Timer as usize] else {
            return;
        };
        // It ran the periods it missed at once, each measured at a read of its own: its
        // reads since the last delay ended, up to the wait it entered next (where its reads
        // are not seen, all at that entry; else, where the last delay ended). Not at the
        // entry where they are: the host may stop the vCPU between its last read and the wait.
        let entered = w.entered_ns.filter(|&t| t >= end);
        // (Waiting no more: every read since, those after a wait that was no period's, a
        // safepoint's barrier on its way back, too.)
        let until = entered.filter(|_| next.is_some()).unwrap_or(u64::MAX);
        let reads: Vec<u64> = (w.clock.recent.iter().copied())
            .filter(|&r| r > end && r <= until)
            .filter(|_| entered.is_some() || next.is_none())
            .collect();
        let caught_up = match (reads.last(), next) {
            (Some(&last), _) => last,
            (None, Some(_)) => entered.unwrap_or(end),
            (None, None) => return,
        };
        let (cpu, next) = (next.map(|(_, e)| e.cpu), next.map_or(u64::MAX, |(t, _)| t));
        let first = since + period;
        let m = match first + period / 2 < next && first < caught_up {
            true => ((caught_up - 1 - first) / period + 1)
                .min((next - period / 2 - 1 - first) / period + 1),
            false => 0,
        };
        // Waiting no more, only where its reads show it ran them: a thread on its way out
        // may read its clock after its last period (a JVM's thread exit does, after a
        // collection), which is no period of its own.
        if cpu.is_none() && reads_per_period((first, period, m), &reads, false).is_none() {
            return;
        }
        // The first period due after the last delay ended: the ones before lie in that delay
        // (explained with it); this one was late for a reason of its own, met while the
        // thread ran (a safepoint that stopped it in its Java code), and is asked about.
        let mut first_own = None;
        for (deadline, at) in measured_at((first, period, m), &reads, cpu.is_some(), caught_up) {
            for i in [pair.own, pair.by_name] {
                let s = &mut self.series[i as usize];
                s.total.record(Nanos(at - deadline));
                s.interval.record(Nanos(at - deadline));
            }
            let source = Some(DeadlineSource::JavaPeriod);
            self.write_sample(tid, DelayKind::Timer, (deadline, at), source);
            for i in [pair.own, pair.by_name] {
                *self.series[i as usize]
                    .deadlines
                    .entry(DeadlineSource::JavaPeriod)
                    .or_default() += 1;
            }
            if deadline >= end && first_own.is_none() {
                first_own = Some((deadline, at));
            }
        }
        let Some(cpu) = cpu else {
            return;
        };
        if let Some((due, at)) = first_own {
            if self.admit(DelayKind::Timer, at - due) {
                let r = Request {
                    series: pair.own,
                    cpu,
                    tid,
                    deadline_ns: due,
                    woke_ns: at,
                    running_ns: None,
                    wait: Wait::Timer,
                    slack_ns: 0,
                };
                self.ask(r, request);
            }
        }
    }

    /// A timed futex wait `call` of a JVM thread (a park, a sleep, a timed `Object.wait`)
    /// that its JVM's probes do not mark (a JVM without them, or a wait they do not cover),
    /// where its clock reads are seen, returned at `e` with `delays`: timed as a park is at
    /// its probes. The JVM counts the time the Java code asked for from its own clock read
    /// just before the call (so the call asked for its deadline less its entry), and the
    /// Java code computed that time from its read before: the thread's deadline is that
    /// time from its read (see `park_base`: time off its CPU in between, at a safepoint's
    /// barrier on its way in, is not the thread's), and its delays end at its next read (see
    /// `park_ended`). None: taken (they end at that read); else the delays as they were
    /// (no read for this wait: the kernel's deadline, the call's return).
    pub(super) fn kernel_park(
        &mut self,
        call: &model::Call,
        mut delays: Vec<(DelayKind, Delay)>,
        e: &Event,
        request: &mut dyn FnMut(Request),
    ) -> Option<Vec<(DelayKind, Delay)>> {
        let tid = e.current_pid;
        let clocked =
            (self.thread_process.get(&tid)).is_some_and(|p| self.clocks.probed.contains(p));
        let in_park = (self.threads.get(&tid)).is_some_and(|w| w.java_wait.is_some());
        let asked = call
            .asked
            .filter(|_| call.is_futex())
            .map(|t| t.saturating_sub(call.entered));
        let (Some(asked), true, false) = (asked, clocked, in_park) else {
            return Some(delays);
        };
        let base = self.park_base(tid, call.entered, Some(asked));
        if base >= call.entered {
            return Some(delays);
        }
        for (_, d) in delays.iter_mut().filter(|(k, _)| *k == DelayKind::Timer) {
            d.since = d.since.min(base + asked);
            d.source = Some(DeadlineSource::JavaPark);
        }
        self.park_ended(tid, delays, e, request);
        None
    }

    /// Thread `e.current_pid` enters a wait with delays held since a safepoint, its JVM no
    /// longer stopped: it went on without waiting at the safepoint's barrier. A Java thread
    /// (the safepoint ended just after its return, before it got there) lived them to the
    /// safepoint's end; another thread to its return.
    pub(super) fn release_held(&mut self, e: &Event, request: &mut dyn FnMut(Request)) {
        let tid = e.current_pid;
        let Some(process) = self.thread_process.get(&tid).copied() else {
            return;
        };
        if self.jvms.at_safepoint(process) {
            return; // the barrier's own wait
        }
        let Some(h) = self.threads.get_mut(&tid).and_then(|w| w.held.take()) else {
            return;
        };
        // A Java thread gets to the barrier within microseconds of its return: one that
        // missed it saw the safepoint end soon after. Another thread just went on.
        let end = h.ended_ns.unwrap_or(e.ts_ns);
        if h.next.is_some() || end.saturating_sub(h.at.ts_ns) > RULES.barrier_ns {
            return self.release_at_own_returns(tid, h, request);
        }
        let end = Event {
            ts_ns: end.max(h.at.ts_ns).min(e.ts_ns),
            ..e.clone()
        };
        self.stretch(tid, h.delays, &end, request);
    }

    /// The JVM about to be started uses `libjvm`: its probes are attached now, before it
    /// runs (see [`WatchState::jvm_pending`]).
    pub fn expect_jvm(&mut self, libjvm: &std::path::Path) {
        self.jvms.expect(libjvm);
    }

    /// A libjvm.so given to [`WatchState::expect_jvm`] is not attached to yet.
    pub fn jvm_pending(&self) -> bool {
        self.jvms.pending()
    }

    /// The libjvm.so files of watched JVMs found since the last call (for the recorder to
    /// attach to their probes), each with the process to probe (None: every process).
    pub(crate) fn take_jvm_libraries(&mut self) -> Vec<(rtlab_trace::usdt::Library, Option<u32>)> {
        self.jvms.take_found()
    }

    /// What came of attaching to a JVM's probes (`waits`: its threads' parks and sleeps too).
    pub(crate) fn jvm_probed(
        &mut self,
        libjvm: &rtlab_trace::usdt::Library,
        r: Result<usize, rtlab_trace::usdt::ProbeError>,
        waits: bool,
    ) {
        let note = match r {
            Ok(0) => return,
            Err(why) if why.not_permitted() => return self.jvms.uprobes_refused(&why),
            // (Its own log is read instead: its follower says what came of it.)
            Err(rtlab_trace::usdt::ProbeError::NoSafepointProbes(_)) => return,
            // (Said in each JVM's note at the end.)
            Ok(n) => return self.jvms.accounts.probed(libjvm.id, n, waits),
            Err(why) => {
                format!("JVM: no probes ({why}): its threads are watched from the kernel only")
            }
        };
        self.jvms.note(note);
    }

    /// Whether the JVMs' own logs are read beside their probes (`--jvm-log`).
    pub fn jvm_log_asked(&self) -> bool {
        self.spec.jvm_log
    }

    /// With `--jvm-log`: the stops the probes and the JVMs' own logs both told (compared,
    /// differing), and the first that differ.
    pub fn jvm_witnesses(&self) -> ((u64, u64), &[crate::WitnessPair]) {
        let w = &self.jvms.witnesses;
        (w.totals(), &w.flagged)
    }

    /// With `--jvm-log`: the JVM's own log's total of the stop of `process` that began at
    /// `begin_ns` by the probes.
    pub fn jvm_log_total(&self, process: u32, begin_ns: u64) -> Option<u64> {
        self.jvms.witnesses.log_total(process, begin_ns)
    }

    /// The watched JVMs' latest safepoints (at most a thousand, oldest first), and how many
    /// there were in all.
    pub fn jvm_stops(&self) -> (impl Iterator<Item = &Stop>, u64) {
        (self.jvms.stops.iter(), self.jvms.stops_seen)
    }

    /// What the watch knows of each JVM it watched and from where (one note each), then what
    /// it could not do; and how many more were not kept.
    pub fn jvm_notes(&self) -> (Vec<String>, u64) {
        let (general, more) = self.jvms.notes();
        let (each, over) = (self.jvms.accounts).notes(|p| self.jvms.witnesses.of(p));
        let notes = each.into_iter().chain(general.iter().cloned()).collect();
        (notes, more + over as u64)
    }

    /// Thread `e.current_pid`'s wait call returned at `e`, woken at `woken`, with `delays`:
    /// those a Java park or sleep in progress, or its JVM's safepoint, holds (they end where
    /// its Java code goes on), or those that end here (returned).
    pub(super) fn java_view(
        &mut self,
        e: &Event,
        woken: Option<u64>,
        delays: Vec<(DelayKind, Delay)>,
        request: &mut dyn FnMut(Request),
    ) -> Option<Vec<(DelayKind, Delay)>> {
        let tid = e.current_pid;
        // In a Java park or sleep: they end where it returns to Java code. (Its first wait
        // call is the park's own; later ones take its lock back or wait at a safepoint's
        // barrier on its way out.)
        if let Some(j) = self
            .threads
            .get_mut(&tid)
            .and_then(|w| w.java_wait.as_mut())
        {
            if j.delays.is_empty() {
                j.delays = delays;
            }
            return None;
        }
        // Its JVM at a safepoint: no Java code runs until it is over (see `Held`).
        let process = self.thread_process.get(&tid).copied();
        let jvm_stopped = process.is_some_and(|p| self.jvms.at_safepoint(p));
        let w = self.threads.get_mut(&tid)?;
        // A call that returned without being woken (a lock taken at once on the way back
        // from a timed wait) is no sign either way.
        if w.held.is_some() && woken.is_none() && delays.is_empty() {
            return None;
        }
        // Held in a safepoint since ended: this first return after it was the barrier's
        // where its wake came at the end, else the thread had gone on.
        if let Some(h) = w.held.take_if(|h| h.ended_ns.is_some()) {
            let end = h.ended_ns.unwrap_or(0);
            match woken {
                Some(woken) if barrier_wake(woken, end, h.done_ns) => {
                    self.stretch(tid, h.delays, e, request)
                }
                _ => self.release_at_own_returns(tid, h, request),
            }
        }
        let w = self.threads.get_mut(&tid)?;
        match w.held.take() {
            None if jvm_stopped && !delays.is_empty() => {
                w.held = Some(Held {
                    at: e.clone(),
                    delays,
                    next: None,
                    ended_ns: None,
                    done_ns: None,
                    returns: 0,
                });
                return None;
            }
            None => {}
            // Its latest return, the safepoint still on: the barrier's, if the JVM's end
            // comes soon after its wake (decided then, in `settle_held`); an earlier one was
            // on its way there and ends where it returned.
            Some(mut h) if jvm_stopped && h.returns < RULES.max_returns_to_barrier => {
                h.returns += 1;
                let earlier = h.next.replace((e.clone(), woken, delays));
                w.held = Some(h);
                if let Some((at, _, delays)) = earlier {
                    for (kind, delay) in delays {
                        self.sample_kind(kind, tid, delay, &at, request);
                    }
                }
                return None;
            }
            // More returns in one safepoint: it runs on through it. (Or its end was lost
            // from sight: nothing is stretched.)
            Some(h) => self.release_at_own_returns(tid, h, request),
        }
        Some(delays)
    }

    /// The run ends: delays held since a safepoint still on end where their waits returned
    /// (what is known of them); those of a park or sleep not over yet, whose end is not
    /// known, are counted unmeasured.
    pub(super) fn settle_java_at_end(&mut self, request: &mut dyn FnMut(Request)) {
        let mut held = Vec::new();
        let mut open = Vec::new();
        for (&tid, w) in self.threads.iter_mut() {
            if let Some(h) = w.held.take() {
                held.push((tid, h));
            }
            if let Some(j) = w.java_wait.take() {
                open.extend(j.delays.into_iter().map(|(k, _)| (tid, k)));
            }
        }
        for (tid, h) in held {
            self.release_at_own_returns(tid, h, request);
        }
        self.end_parks_unread(request);
        // The periods each ran at once after its last wait.
        let tids: Vec<i64> = self.threads.keys().copied().collect();
        for tid in tids {
            self.skipped(tid, None, request);
        }
        for (tid, kind) in open {
            self.unmeasured(tid, kind);
        }
    }
}
