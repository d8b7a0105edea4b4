//! The series: a thread's own and its name's, per kind of delay, within [`MAX_SERIES`] (an
//! ended thread's own series given to a new thread), and each delay recorded in them and
//! offered for explanation.

use super::*;

impl WatchState {
    /// Whether a `kind` delay of `ns` is to be explained: over the threshold and among the
    /// interval's longest so far.
    pub(super) fn admit(&mut self, kind: DelayKind, ns: u64) -> bool {
        if ns <= self.spec.threshold_ns {
            return false;
        }
        let longest = &mut self.longest[kind as usize];
        let keep = self.spec.keep.max(1);
        if longest.len() >= keep {
            if ns <= longest[0] {
                return false;
            }
            longest.remove(0);
        }
        let at = longest.partition_point(|&l| l < ns);
        longest.insert(at, ns);
        true
    }

    pub(super) fn series_index(
        &mut self,
        thread: &str,
        tid: Option<i64>,
        kind: DelayKind,
        rt: bool,
    ) -> Option<u16> {
        let name = series_name(thread, tid, kind, rt);
        if let Some(&i) = self.index.get(&name) {
            // A thread of an ended one's TID and name: the series is its own again.
            self.retired.retain(|&(r, _)| r != i);
            return Some(i);
        }
        let fresh = WatchSeries {
            name: name.clone(),
            rt,
            members: Vec::new(),
            owners: Vec::new(),
            process: tid.and_then(|t| self.thread_process.get(&t).copied()),
            thread: thread.to_string(),
            tid,
            kind,
            total: LatencyHistogram::compact(),
            interval: LatencyHistogram::compact(),
            last_interval_max: Nanos(0),
            unmeasured: 0,
            deadlines: Default::default(),
            timeline: Default::default(),
        };
        let i = if self.series.len() < MAX_SERIES {
            self.series.push(fresh);
            self.series.len() as u16 - 1
        } else {
            // At the limit: in the place of an ended thread's own series, one ended a while
            // ago (an explanation still pending names its series by index) whose interval
            // has gone to the log.
            let now = self.scanned_ns;
            let free = self.retired.iter().position(|&(r, at)| {
                now >= at + RETIRED_NS && self.series[r as usize].interval.is_empty()
            })?;
            let (i, _) = self.retired.remove(free)?;
            let old = std::mem::replace(&mut self.series[i as usize], fresh);
            self.index.remove(&old.name);
            for s in &mut self.series {
                s.members.retain(|&m| m != i);
            }
            i
        };
        self.index.insert(name, i);
        Some(i)
    }

    /// The series of thread `tid` called `name`, and of its name and class, for `kind`.
    pub(super) fn pair(&mut self, name: &str, tid: i64, kind: DelayKind, rt: bool) -> Option<Pair> {
        let own = self.series_index(name, Some(tid), kind, rt)?;
        let Some(by_name) = self.series_index(name, None, kind, rt) else {
            // In no pair: free for the next thread.
            self.retired.push_front((own, 0));
            return None;
        };
        self.join(by_name, own);
        Some(Pair { own, by_name })
    }

    /// Thread `tid`'s own series for its delays of class `rt` from now on: `own` itself,
    /// renamed, if it holds none yet, else the thread's series of that class.
    pub(super) fn own_of_class(
        &mut self,
        own: u16,
        thread: &str,
        tid: i64,
        rt: bool,
    ) -> Option<u16> {
        let kind = self.series[own as usize].kind;
        let name = series_name(thread, Some(tid), kind, rt);
        let s = &mut self.series[own as usize];
        if !s.total.is_empty() || self.index.contains_key(&name) {
            return self.series_index(thread, Some(tid), kind, rt);
        }
        self.index.remove(&s.name);
        s.name = name.clone();
        s.rt = rt;
        self.index.insert(name, own);
        Some(own)
    }

    /// Thread series `own` counts to name series `by_name` (from now on).
    pub(super) fn join(&mut self, by_name: u16, own: u16) {
        let process = self.series[own as usize].process;
        let s = &mut self.series[by_name as usize];
        if !s.members.contains(&own) {
            s.members.push(own);
        }
        if let Some(p) = process {
            if !s.owners.contains(&p) && s.owners.len() < MAX_OWNERS {
                s.owners.push(p);
            }
        }
    }

    /// One `kind` delay of thread `tid` from `since` to `e`, `running` the time it got a CPU
    /// in between where that is not `e` itself.
    pub(super) fn sample_kind(
        &mut self,
        kind: DelayKind,
        tid: i64,
        delay: Delay,
        e: &Event,
        request: &mut dyn FnMut(Request),
    ) {
        if kind == DelayKind::Timer {
            self.skipped(tid, Some((delay.since, e)), request);
            self.learn_period(tid, delay.since);
            if let Some(w) = self.threads.get_mut(&tid) {
                w.last_timer_delay = Some((delay.since, e.ts_ns));
            }
        }
        if let Some(pair) = self.pair_of(tid, kind) {
            self.sample((pair, tid), delay, e, Wait::Timer, request);
        }
    }

    /// Thread `tid`'s timer delay began at `since`: its period, where two intervals in a row
    /// agree within 5 % (and are not a multiple of the period known: a thread late by over a
    /// period again and again runs every other one at once, and waits two periods apart).
    pub(super) fn learn_period(&mut self, tid: i64, since: u64) {
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        if let Some((last, interval)) = w.last_timer_ns {
            let now = since.saturating_sub(last);
            let multiple = w.period_ns.is_some_and(|p| {
                let k = (now + p / 2) / p.max(1);
                k >= 2 && now.abs_diff(k * p) * 100 <= p * RULES.period_agree_pct
            });
            let agree = now.abs_diff(interval) * 100 <= interval * RULES.period_agree_pct;
            if interval > 0 && agree && !multiple {
                w.period_ns = Some(now);
            }
            w.last_timer_ns = Some((since, now));
        } else {
            w.last_timer_ns = Some((since, 0));
        }
    }

    /// Thread `tid`'s series of `kind`, made at its first delay of that kind (None at the
    /// series limit, counted once per thread and kind).
    pub(super) fn pair_of(&mut self, tid: i64, kind: DelayKind) -> Option<Pair> {
        let w = self.threads.get(&tid)?;
        // `--rt-only`: a thread's delays while it is time-sharing are not watched.
        if self.spec.rt_only && !w.rt {
            return None;
        }
        let k = kind as usize;
        if let Some(p) = w.pairs[k] {
            return Some(p);
        }
        if w.refused[k] && self.retired.is_empty() {
            return None;
        }
        // Its first series: under its name now (it may have been renamed since it was read).
        if w.pairs.iter().all(Option::is_none) {
            if let Some(now) = rtlab_sys::procfs::task_comm(tid) {
                if let Some(w) = self.threads.get_mut(&tid) {
                    w.name = now;
                }
            }
        }
        let w = self.threads.get(&tid)?;
        let (name, rt) = (w.name.clone(), w.rt);
        let pair = self.pair(&name, tid, kind, rt);
        let w = self.threads.get_mut(&tid)?;
        w.pairs[k] = pair;
        // Counted once per thread and kind, however often it is tried again.
        self.refused += (pair.is_none() && !w.refused[k]) as u64;
        w.refused[k] = pair.is_none();
        pair
    }

    /// Records a delay of thread `tid` from `since` (with the timer's slack in it) to `e`,
    /// and asks for its explanation when it is admitted.
    pub(super) fn sample(
        &mut self,
        (pair, tid): (Pair, i64),
        d: Delay,
        e: &Event,
        wait: Wait,
        request: &mut dyn FnMut(Request),
    ) {
        let (since, slack_ns, running_ns) = (d.since, d.slack, d.running);
        let delay = e.ts_ns.saturating_sub(since);
        self.record((pair, tid), (since, e.ts_ns), d.source);
        let kind = self.series[pair.own as usize].kind;
        if self.admit(kind, delay) {
            let r = Request {
                series: pair.own,
                cpu: e.cpu,
                tid,
                deadline_ns: since,
                woke_ns: e.ts_ns,
                running_ns,
                wait,
                slack_ns,
            };
            self.ask(r, request);
        }
    }

    /// Writes every delay measured from now on to `file` (`watch --samples`): a header
    /// line, then one line per delay, tab-separated: the thread (for a safepoint, its JVM
    /// process), the kind, its deadline and its end (CLOCK_MONOTONIC ns, as the program's
    /// own `clock_gettime(CLOCK_MONOTONIC)` and `System.nanoTime()` read it), the delay and,
    /// for a `timer` delay, where its deadline came from ([`DeadlineSource`]; `-` for the
    /// others). A run's delays can be joined with the program's own log of each period.
    pub fn write_samples(&mut self, file: std::fs::File) -> std::io::Result<()> {
        use std::io::Write;
        let mut w = std::io::BufWriter::with_capacity(1 << 16, file);
        writeln!(w, "# tid\tkind\tdeadline_ns\tend_ns\tdelay_ns\tsource")?;
        self.samples = Some(w);
        Ok(())
    }

    /// Writes out what the samples file holds so far; its first error, if any.
    pub fn flush_samples(&mut self) -> std::io::Result<()> {
        use std::io::Write;
        self.samples.as_mut().map_or(Ok(()), |w| w.flush())
    }

    /// One measured delay to the samples file, where one is written (a write that fails
    /// drops the file: the series go on).
    pub(super) fn write_sample(
        &mut self,
        who: i64,
        kind: DelayKind,
        (from, to): (u64, u64),
        source: Option<DeadlineSource>,
    ) {
        use std::io::Write;
        let Some(w) = self.samples.as_mut() else {
            return;
        };
        let delay = to.saturating_sub(from);
        let source = source.map_or("-", DeadlineSource::name);
        if writeln!(w, "{who}\t{}\t{from}\t{to}\t{delay}\t{source}", kind.name()).is_err() {
            self.samples = None;
        }
    }

    /// A delay of thread `tid` from `from` to `to` into its series `pair` (its own and its
    /// name's) and the samples file.
    pub(super) fn record(
        &mut self,
        (pair, tid): (Pair, i64),
        (from, to): (u64, u64),
        source: Option<DeadlineSource>,
    ) {
        let delay = Nanos(to.saturating_sub(from));
        let at = to.saturating_sub(self.started_ns);
        for i in [pair.own, pair.by_name] {
            let s = &mut self.series[i as usize];
            s.total.record(delay);
            s.interval.record(delay);
            s.timeline.record(at, delay.0);
            if let Some(src) = source.filter(|_| s.kind == DelayKind::Timer) {
                *s.deadlines.entry(src).or_default() += 1;
            }
        }
        let kind = self.series[pair.own as usize].kind;
        self.write_sample(tid, kind, (from, to), source);
    }

    /// A `kind` delay of thread `tid` that could not be measured (its end, or its start, is
    /// not known): counted as such in its series and its name's.
    pub(super) fn unmeasured(&mut self, tid: i64, kind: DelayKind) {
        self.abandoned += 1;
        self.count_unmeasured(tid, kind);
    }

    /// Counts a `kind` delay of thread `tid` unmeasured in its series and its name's.
    pub(super) fn count_unmeasured(&mut self, tid: i64, kind: DelayKind) {
        if let Some(pair) = self.pair_of(tid, kind) {
            for i in [pair.own, pair.by_name] {
                self.series[i as usize].unmeasured += 1;
            }
        }
    }
}

/// A series' name: a JVM's safepoints; a thread's own (`<name>/<tid>/<kind>`, its delays
/// while real-time; `<name>:ts/<tid>/<kind>` while time-sharing: one whose policy changed
/// while watched has both); its name's over its threads of a class (`<name>/<kind>`,
/// `<name>:ts/<kind>`).
fn series_name(thread: &str, tid: Option<i64>, kind: DelayKind, rt: bool) -> String {
    match (tid, rt) {
        _ if kind == DelayKind::Safepoint => format!("jvm:{thread}/safepoint"),
        // A thread's own, by the class it had at each delay (one whose policy changed
        // while watched has both).
        (Some(tid), true) => format!("{thread}/{tid}/{}", kind.name()),
        (Some(tid), false) => format!("{thread}:ts/{tid}/{}", kind.name()),
        (None, true) => format!("{thread}/{}", kind.name()),
        (None, false) => format!("{thread}:ts/{}", kind.name()),
    }
}
