//! The watch's state machine, one handler per kind of event: each event moves its thread
//! (and the waits, timers and clock reads it follows) from one state to the next, and asks for
//! an explanation where a delay ended.

use super::*;

impl WatchState {
    pub(crate) fn step(&mut self, e: &Event, request: &mut dyn FnMut(Request)) {
        match &e.kind {
            // From `sched_waking` (the decision to wake it), as the scheduler's own wakeup
            // tracepoints count, not from its timer's expiry (earlier by the timer
            // interrupt's path): that is the `timer` kind's start.
            Kind::Waking { task, .. } => self.woken(task.pid, e),
            Kind::HrtimerEntry {
                function,
                task,
                expires_ns,
                slack_ns,
                timer,
            } => self.timer_fired(function, task.as_ref(), (*expires_ns, *slack_ns, *timer), e),
            Kind::Switch { prev, next, .. } => self.switched(e, prev, next, request),
            Kind::LockPi { trylock: false } => {
                if let Some(w) = self.threads.get_mut(&e.current_pid) {
                    w.wait.lock_since = Some(e.ts_ns);
                }
            }
            Kind::LockPiDone { .. } => self.locked(e, request),
            Kind::WaitEnter { deadline_ns, call } => {
                self.entered(e, (*call, *deadline_ns), request)
            }
            Kind::WaitExit { ret, .. } => self.returned(e, *ret, request),
            Kind::Jvm {
                probe: JvmProbe::ClockRead,
                process,
                ..
            } => {
                if self.clocks.probed.contains(process) {
                    self.jvms.step(e);
                }
                self.clock_read(e, request)
            }
            Kind::Jvm {
                probe,
                process,
                time_ns,
                ..
            } if probe.of_thread() => {
                // (A JVM by its probes, before the watch finds its libjvm.so mapped.)
                self.jvms.saw(*process);
                self.java_wait(e, *probe, *time_ns, request)
            }
            Kind::Jvm { .. } => self.jvm_event(e, request),
            Kind::Lost(_) => self.lost(e, request),
            _ => {}
        }
    }

    /// A switch on `e.cpu` from `prev` to `next`: a watched thread that left its CPU is
    /// runnable (preempted) or asleep; one that got it ends its delays.
    pub(crate) fn switched(
        &mut self,
        e: &Event,
        prev: &rtlab_trace::event::Task,
        next: &rtlab_trace::event::Task,
        request: &mut dyn FnMut(Request),
    ) {
        self.fire(e.cpu, None);
        if let Some(w) = self.threads.get_mut(&prev.pid) {
            let asleep = w.wait.switched_out(e);
            if std::mem::take(&mut w.wait.wakeup_unseen) {
                self.wakeup_unseen(prev.pid, e.cpu);
            }
            if let Some(asleep) = asleep {
                self.clock_switched_out(prev.pid, asleep, e.ts_ns, request);
            }
        }
        // Its class as the scheduler has it now (a thread made real-time after it
        // started counts to its name's real-time series from here on).
        if self.threads.contains_key(&next.pid) && next.pid != 0 {
            self.classify(next.pid, next.prio < 100);
        }
        self.rt_switch(e.cpu as usize, e.ts_ns, prev, next);
        self.clock_switched_in(next.pid, e.ts_ns);
        let Some(w) = self.threads.get_mut(&next.pid) else {
            return;
        };
        for (kind, delay) in w.wait.switched_in(e) {
            self.sample_kind(kind, next.pid, delay, e, request);
        }
    }

    /// A wakeup of `tid` on `cpu` the trace did not have: counted, its delay unmeasured.
    fn wakeup_unseen(&mut self, tid: i64, cpu: u16) {
        self.wakeups_unseen += 1;
        self.unseen_on.insert(cpu);
        self.count_unmeasured(tid, DelayKind::Wakeup);
    }

    /// Thread `e.current_pid` returned from the kernel's wait for a PI futex: its `lock` delay.
    pub(crate) fn locked(&mut self, e: &Event, request: &mut dyn FnMut(Request)) {
        let tid = e.current_pid;
        let Some(since) = (self.threads.get_mut(&tid)).and_then(|w| w.wait.lock_since.take())
        else {
            return;
        };
        if let Some(pair) = self.pair_of(tid, DelayKind::Lock) {
            self.sample((pair, tid), Delay::from(since), e, Wait::Lock, request);
        }
    }

    /// Thread `e.current_pid` entered wait call `call` (to `deadline_ns`, where it says).
    pub(crate) fn entered(
        &mut self,
        e: &Event,
        (call, deadline_ns): (i32, Option<u64>),
        request: &mut dyn FnMut(Request),
    ) {
        self.release_held(e, request);
        let tid = e.current_pid;
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        // (A Java park's own entry is its begin probe's.)
        match w.java_wait.as_mut() {
            None => w.entered_ns = Some(e.ts_ns),
            Some(j) => _ = j.entry_ns.get_or_insert(e.ts_ns),
        }
        if let Some(r) = w.wait.entered(call, deadline_ns, e.ts_ns) {
            self.settle_ready(tid, r, None, request);
        }
    }

    /// A JVM's event that is not one thread's (its safepoints): a safepoint that ended is
    /// kept, ends the delays it held, and is counted in its operation's series.
    pub(crate) fn jvm_event(&mut self, e: &Event, request: &mut dyn FnMut(Request)) {
        if let Some(stop) = self.jvms.step(e) {
            self.settle_held(&stop, request);
            self.count_stop(&stop);
        }
    }

    /// A JVM's safepoint that ended (as its probes or its own log told it): kept, and counted
    /// in its VM operation's series.
    pub(crate) fn count_stop(&mut self, stop: &rtlab_trace::safepoint::Stop) {
        self.jvms.keep(stop);
        let op = stop.operation.as_deref().unwrap_or("unnamed").to_string();
        if let Some(i) = self.series_index(&op, None, DelayKind::Safepoint, true) {
            let s = &mut self.series[i as usize];
            s.process = Some(stop.process);
            let d = Nanos(stop.end_ns.saturating_sub(stop.begin_ns));
            s.total.record(d);
            s.interval.record(d);
            let (who, span) = (stop.process as i64, (stop.begin_ns, stop.end_ns));
            self.write_sample(who, DelayKind::Safepoint, span, None);
        }
    }

    /// The safepoints the JVMs' own logs told of since the last call, counted; the
    /// explanations held for them asked for (all of them with `now_ns` None: the run ends).
    pub(crate) fn take_logged(&mut self, now_ns: Option<u64>, request: &mut dyn FnMut(Request)) {
        for stop in self.jvms.take_logged() {
            self.count_stop(&stop);
        }
        let jvms = &self.jvms;
        let (ready, held): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held_requests)
            .into_iter()
            .partition(|(p, r)| now_ns.is_none_or(|now| jvms.log_covers(*p, r.woke_ns, now)));
        self.held_requests = held;
        for (_, r) in ready {
            request(r);
        }
    }

    /// Asks for the explanation of `r`, once its JVM's own log (where one is read for it)
    /// tells of the stops in it.
    pub(crate) fn ask(&mut self, r: Request, request: &mut dyn FnMut(Request)) {
        match self.thread_process.get(&r.tid).copied() {
            Some(p) if self.jvms.logs.follows(p) => self.held_requests.push((p, r)),
            _ => request(r),
        }
    }

    /// Events were lost on `e.cpu`: what they may have ended is counted unmeasured.
    pub(crate) fn lost(&mut self, e: &Event, request: &mut dyn FnMut(Request)) {
        self.jvms.forget();
        self.end_parks_unread(request);
        // The observer's switch away may be among them too.
        if let Some(since) = self.observer_since.get_mut(e.cpu as usize) {
            *since = None;
        }
        // The switch that ended a pending delay may be among the lost events: a
        // later one would measure too long a delay. Each is counted unmeasured, in
        // its thread's series and its name's.
        let mut cut = Vec::new();
        for (&tid, w) in self.threads.iter_mut() {
            if let Some(h) = w.held.take() {
                let next = h.next.into_iter().flat_map(|n| n.2);
                cut.extend(h.delays.into_iter().chain(next).map(|(k, _)| (tid, k)));
            }
            if let Some(j) = w.java_wait.take() {
                cut.extend(j.delays.into_iter().map(|(k, _)| (tid, k)));
            }
            cut.extend(w.wait.cut().into_iter().map(|k| (tid, k)));
        }
        for (tid, kind) in cut {
            self.unmeasured(tid, kind);
        }
    }

    /// Thread `tid` woken at `e`: runnable from here. Woken by a file or signal timer that
    /// fired just before on this CPU, in the same interrupt, it waited for that timer's
    /// expiry.
    pub(crate) fn woken(&mut self, tid: i64, e: &Event) {
        let fired = self.fired.get(e.cpu as usize).copied().flatten();
        let timer =
            fired.filter(|f| e.ts_ns.saturating_sub(f.at_ns) <= RULES.timer_wakes_within_ns);
        if let Some(w) = self.threads.get_mut(&tid) {
            w.wait.woken(e, timer);
        }
    }

    /// A high-resolution timer's expiry (`function`) at `e`: a watched thread's sleep timer
    /// (`hrtimer_wakeup`, with the thread it wakes and the expiry it was set for), or one of
    /// [`FILE_OR_SIGNAL_TIMERS`], whose expiry the thread woken next in its interrupt waited
    /// for. Its wakeup counts from the `sched_waking` that follows, not from here.
    pub(crate) fn timer_fired(
        &mut self,
        function: &str,
        task: Option<&rtlab_trace::event::Task>,
        (expires, slack, timer): (Option<u64>, u64, Option<u64>),
        e: &Event,
    ) {
        let source = DeadlineSource::of_timer(function);
        if FILE_OR_SIGNAL_TIMERS.contains(&function) {
            let fired = expires.zip(source).map(|(at, source)| Fired {
                expiry: Expiry { at, slack, source },
                at_ns: e.ts_ns,
                timer,
            });
            return self.fire(e.cpu, fired);
        }
        let (Some(task), Some(at), Some(DeadlineSource::SleepTimer)) = (task, expires, source)
        else {
            return;
        };
        self.fire(e.cpu, None);
        if let Some(w) = self.threads.get_mut(&task.pid) {
            let source = DeadlineSource::SleepTimer;
            w.wait.sleep_timer(e, Expiry { at, slack, source });
        }
    }

    /// A timer of [`FILE_OR_SIGNAL_TIMERS`] fired on `cpu`, or with None its interrupt is
    /// over (a switch, another timer).
    pub(crate) fn fire(&mut self, cpu: u16, timer: Option<Fired>) {
        let cpu = cpu as usize;
        if self.fired.len() <= cpu {
            if timer.is_none() {
                return;
            }
            self.fired.resize(cpu + 1, None);
        }
        self.fired[cpu] = timer;
    }

    /// Thread `tid`'s wait call returned to user space at `e` with `ret`: its delays in that
    /// call end here, as the program sees them (see [`model::ThreadWait::returned`]), unless
    /// a Java park or a safepoint holds them, or a read is to take them (a readiness wait's).
    pub(crate) fn returned(&mut self, e: &Event, ret: i64, request: &mut dyn FnMut(Request)) {
        let tid = e.current_pid;
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        // The call after a readiness wait: a read took its expiry unless it slept (another
        // file's), and measures nothing of its own then.
        if let Some((r, took)) = w.wait.take_ready() {
            self.settle_ready(tid, r, took.then_some(e), request);
            if took {
                return;
            }
        }
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        let returned = w.wait.returned(ret, e.ts_ns);
        let unseen = std::mem::take(&mut w.wait.wakeup_unseen);
        if w.wait.whole_ms() && self.whole_ms.len() < MAX_NOTED {
            self.whole_ms.entry(tid).or_insert_with(|| w.name.clone());
        }
        if unseen {
            self.wakeup_unseen(tid, e.cpu);
        }
        let (ended, delays) = match returned {
            Returned::Unseen => return, // entered before the watch saw it: ended at its switch-in
            Returned::Abandoned => {
                self.abandoned += 1;
                return;
            }
            Returned::Delays(ended, delays) => (ended, delays),
        };
        let Some(delays) = self.java_view(e, ended.woken, delays, request) else {
            return self.take_grid(tid, &ended, e.ts_ns);
        };
        let Some(delays) = self.kernel_park(&ended.call, delays, e, request) else {
            return self.take_grid(tid, &ended, e.ts_ns);
        };
        if ended.by_grid.is_some() && READINESS_CALLS.contains(&ended.call.nr) {
            if let Some(w) = self.threads.get_mut(&tid) {
                let returned = e.clone();
                w.wait.ready = Some(model::Ready {
                    delays,
                    ended,
                    returned,
                });
                return;
            }
        }
        for (kind, delay) in delays {
            self.sample_kind(kind, tid, delay, e, request);
        }
        self.take_grid(tid, &ended, e.ts_ns);
    }

    /// Thread `tid`'s readiness wait's delays ([`model::Ready`]) end: at `read`'s return
    /// where a read took the expiry, else at the wait's own.
    pub(crate) fn settle_ready(
        &mut self,
        tid: i64,
        r: model::Ready,
        read: Option<&Event>,
        request: &mut dyn FnMut(Request),
    ) {
        let end = read.unwrap_or(&r.returned);
        for (kind, delay) in r.delays {
            self.sample_kind(kind, tid, delay, end, request);
        }
        self.take_grid(tid, &r.ended, end.ts_ns);
    }

    /// Thread `tid`'s wait `ended` at `end`: the expiries of its periodic file or signal
    /// timer it took at once (see [`model::grid_after`]), each late to its own time.
    pub(crate) fn take_grid(&mut self, tid: i64, ended: &model::Ended, end: u64) {
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        let (grid, taken) = model::grid_after(w.wait.grid, ended, w.period_ns, end);
        w.wait.grid = grid;
        let Some(source) = grid.map(|g| g.source).filter(|_| !taken.is_empty()) else {
            return;
        };
        let Some(pair) = self.pair_of(tid, DelayKind::Timer) else {
            return;
        };
        for deadline in taken {
            self.record((pair, tid), (deadline, end), Some(source));
        }
    }
}
