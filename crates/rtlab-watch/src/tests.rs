use super::*;
use rtlab_trace::event::{Task, TaskState, SYS_READ};

#[test]
fn globs_match_whole_names() {
    for (p, s, ok) in [
        ("rt-*", "rt-loop", true),
        ("rt-*", "xrt-loop", false),
        ("*loop", "rt-loop", true),
        ("r?-loop", "rt-loop", true),
        ("rt-loop", "rt-loop", true),
        ("rt-loop", "rt-loop2", false),
        ("*", "", true),
        ("a*b*c", "axxbyyc", true),
        ("a*b*c", "axxbyy", false),
    ] {
        assert_eq!(spec::glob(p.as_bytes(), s.as_bytes()), ok, "{p} vs {s}");
    }
    assert_eq!(ThreadPattern::parse("42"), Ok(ThreadPattern::Tid(42)));
    assert!(ThreadPattern::parse("0").is_err() && ThreadPattern::parse("").is_err());
}

fn task(pid: i64) -> Task {
    Task {
        comm: format!("t{pid}").into(),
        pid,
        prio: 120,
    }
}

/// `prev` leaves the CPU in `state`, `next` gets it.
fn switch(prev: i64, state: TaskState, next: i64) -> Kind {
    Kind::Switch {
        prev: task(prev),
        prev_state: state,
        next: task(next),
    }
}

fn ev(cpu: u16, ts_ns: u64, kind: Kind) -> Event {
    Event {
        cpu,
        ts_ns,
        current_pid: 0,
        kind,
    }
}

/// Watches this test's own thread (then fed synthetic events for it), explaining delays
/// over `threshold_ns`: its TID and state.
fn watch_this_thread(threshold_ns: u64) -> (i64, WatchState) {
    let tid = rtlab_sys::futex::current_tid() as i64;
    let w = WatchState::new(WatchSpec {
        pid: std::process::id() as i32,
        scope: Scope::Process { children: false },
        threads: vec![ThreadPattern::Tid(tid)],
        rt_only: false,
        threshold_ns,
        keep: 10,
        locks: rtlab_trace::LockWaits::No,
        all_cpus: false,
        user_view: true,
        java_clock_limit: DEFAULT_CLOCK_LIMIT,
        jvm_log: false,
    });
    (tid, w)
}

#[test]
fn the_cpus_to_trace_are_where_the_watched_threads_may_run() {
    // This test's own thread, pinned to one CPU, watched beside the others of the
    // process (the test harness's, which may run anywhere).
    let cpus = rtlab_sys::affinity::usable_cpus();
    let last = *cpus.as_slice().last().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let pinned = std::thread::spawn(move || {
        let one = rtlab_sys::affinity::CpuList::from(vec![last]);
        rtlab_sys::affinity::set_current_thread_affinity(&one).unwrap();
        tx.send(rtlab_sys::futex::current_tid() as i64).unwrap();
        let _ = done_rx.recv();
    });
    let tid = rx.recv().unwrap();
    let spec = |all_cpus, threads| WatchSpec {
        pid: std::process::id() as i32,
        scope: Scope::Process { children: false },
        threads,
        rt_only: false,
        threshold_ns: 0,
        keep: 10,
        locks: rtlab_trace::LockWaits::No,
        all_cpus,
        user_view: true,
        java_clock_limit: DEFAULT_CLOCK_LIMIT,
        jvm_log: false,
    };
    let w = WatchState::new(spec(false, vec![ThreadPattern::Tid(tid)]));
    assert_eq!(w.cpus_wanted(), Some(&CpuMask::of(&[last])));
    // A pattern that matches nothing yet: where the process's threads may run.
    let none = WatchState::new(spec(false, vec![ThreadPattern::Tid(i64::MAX)]));
    let everywhere = CpuMask::of(cpus.as_slice());
    assert_eq!(none.cpus_wanted(), Some(&everywhere));
    assert_eq!(
        WatchState::new(spec(true, vec![ThreadPattern::Tid(tid)])).cpus_wanted(),
        None
    );
    done_tx.send(()).unwrap();
    pinned.join().unwrap();
}

#[test]
fn a_delay_runs_from_wakeup_or_preemption_to_the_switch_in_events_merged_in_time_order() {
    let (tid, mut w) = watch_this_thread(400);
    assert_eq!(w.watched_threads(), 1);
    // Woken on CPU 1 at 1000, on CPU 0 at 1500 (delivered first, as a drain of CPU 0
    // before CPU 1 would); preempted at 2000, back at 2300; asleep at 3000.
    w.offer(&ev(0, 1_500, switch(0, TaskState::RUNNING, tid)));
    w.offer(&ev(
        1,
        1_000,
        Kind::Waking {
            task: task(tid),
            target_cpu: 0,
        },
    ));
    w.offer(&ev(0, 2_000, switch(tid, TaskState::PREEMPTED, 7)));
    w.offer(&ev(0, 2_300, switch(7, TaskState::SLEEPING, tid)));
    w.offer(&ev(0, 3_000, switch(tid, TaskState::SLEEPING, 0)));
    w.offer(&ev(0, 4_000, switch(0, TaskState::RUNNING, tid))); // not woken: no sample
    let mut requests = Vec::new();
    w.advance(RULES.merge_lag_ns + 10_000, &mut |r| requests.push(r));
    let own = &w.series()[0];
    assert!(
        own.name.ends_with(&format!("/{tid}/wakeup")),
        "{}",
        own.name
    );
    assert_eq!(own.total.len(), 2);
    assert_eq!(own.total.max(), Nanos(500));
    assert_eq!(
        w.series()[1].total.len(),
        2,
        "the name's series sums its threads"
    );
    assert_eq!(requests.len(), 1, "only the 500 ns delay is over 400 ns");
    assert_eq!(
        (
            requests[0].deadline_ns,
            requests[0].woke_ns,
            requests[0].cpu
        ),
        (1_000, 1_500, 0)
    );
    let interval = w.take_interval();
    assert_eq!(interval.len(), 2);
    assert!(w.take_interval().is_empty(), "a new interval starts empty");
}

#[test]
fn a_loss_abandons_pending_delays_instead_of_stretching_them() {
    let (tid, mut w) = watch_this_thread(u64::MAX);
    w.offer(&ev(
        1,
        1_000,
        Kind::Waking {
            task: task(tid),
            target_cpu: 0,
        },
    ));
    w.offer(&ev(0, 5_000, Kind::Lost(3)));
    w.offer(&ev(
        0,
        9_000,
        Kind::Switch {
            prev: task(0),
            prev_state: TaskState::RUNNING,
            next: task(tid),
        },
    ));
    w.flush(&mut |_| {});
    assert!(w.series().iter().all(|s| s.total.is_empty()));
    assert_eq!(w.shortfalls(), (0, 1));
    // Counted unmeasured, in the thread's series and its name's.
    assert!(
        w.series().iter().all(|s| s.unmeasured == 1),
        "{:?}",
        w.series()
    );
}

#[test]
fn a_timer_delay_runs_from_the_requested_expiry_and_a_stale_expiry_is_dropped() {
    let (tid, mut w) = watch_this_thread(700);
    let expiry = |expires: u64| Kind::HrtimerEntry {
        function: "hrtimer_wakeup".into(),
        task: Some(task(tid)),
        expires_ns: Some(expires),
        slack_ns: 50,
        timer: None,
    };
    let waking = Kind::Waking {
        task: task(tid),
        target_cpu: 0,
    };
    // Asleep at 1000 until 1800; the timer fires at 2000, the waking at 2050, on a CPU
    // at 2600: timer 800, wakeup 550.
    w.offer(&ev(0, 1_000, switch(tid, TaskState::SLEEPING, 0)));
    w.offer(&ev(0, 2_000, expiry(1_800)));
    w.offer(&ev(0, 2_050, waking.clone()));
    w.offer(&ev(0, 2_600, switch(0, TaskState::RUNNING, tid)));
    // Woken otherwise and running when its timer fires (3000): no timer sample.
    w.offer(&ev(0, 2_900, switch(tid, TaskState::SLEEPING, 0)));
    w.offer(&ev(0, 2_950, waking));
    w.offer(&ev(0, 2_960, switch(0, TaskState::RUNNING, tid)));
    w.offer(&ev(0, 3_000, expiry(2_990)));
    w.offer(&ev(0, 3_100, switch(tid, TaskState::SLEEPING, 0)));
    w.offer(&ev(0, 9_000, switch(0, TaskState::RUNNING, tid)));
    let mut requests = Vec::new();
    w.flush(&mut |r| requests.push(r));
    let by_kind =
        |k: DelayKind| -> Vec<&WatchSeries> { w.series().iter().filter(|s| s.kind == k).collect() };
    let timer = by_kind(DelayKind::Timer);
    assert_eq!(timer.len(), 2, "the thread's and its name's");
    assert!(
        timer[0].name.ends_with(&format!("/{tid}/timer")),
        "{}",
        timer[0].name
    );
    assert_eq!(
        (timer[0].total.len(), timer[0].total.max()),
        (1, Nanos(800))
    );
    assert_eq!(timer[0].total.sum_ns(), 800);
    let wakeup = by_kind(DelayKind::Wakeup);
    assert_eq!(wakeup[0].total.len(), 2);
    assert_eq!(wakeup[0].total.max(), Nanos(550));
    assert_eq!(
        requests.len(),
        1,
        "only the 800 ns timer delay is over 700 ns"
    );
    assert_eq!(
        (
            requests[0].deadline_ns,
            requests[0].woke_ns,
            requests[0].slack_ns
        ),
        (1_800, 2_600, 50)
    );
    assert_eq!(
        w.series()[requests[0].series as usize].kind,
        DelayKind::Timer
    );
}

#[test]
fn a_lock_delay_runs_from_the_pi_lock_call_to_its_return_and_asks_for_a_lock_explanation() {
    let (tid, mut w) = watch_this_thread(1_000);
    let at = |ts: u64, kind: Kind| Event {
        cpu: 1,
        ts_ns: ts,
        current_pid: tid,
        kind,
    };
    // Waits 5000 ns; a trylock and another thread's wait are not this thread's waits; a
    // wait cut by lost events is abandoned.
    w.offer(&at(10_000, Kind::LockPi { trylock: false }));
    w.offer(&at(15_000, Kind::LockPiDone { ret: 0 }));
    w.offer(&at(16_000, Kind::LockPi { trylock: true }));
    w.offer(&at(16_100, Kind::LockPiDone { ret: 0 }));
    w.offer(&Event {
        current_pid: tid + 1_000_000,
        ..at(17_000, Kind::LockPi { trylock: false })
    });
    w.offer(&at(20_000, Kind::LockPi { trylock: false }));
    w.offer(&ev(0, 21_000, Kind::Lost(1)));
    w.offer(&at(30_000, Kind::LockPiDone { ret: 0 }));
    let mut requests = Vec::new();
    w.flush(&mut |r| requests.push(r));
    let lock: Vec<&WatchSeries> = w
        .series()
        .iter()
        .filter(|s| s.kind == DelayKind::Lock)
        .collect();
    assert_eq!(lock.len(), 2, "the thread's and its name's");
    assert!(lock[0].name.ends_with(&format!("/{tid}/lock")));
    assert_eq!(
        (lock[0].total.len(), lock[0].total.max()),
        (1, Nanos(5_000))
    );
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(
        (r.deadline_ns, r.woke_ns, r.cpu, r.wait, r.slack_ns),
        (10_000, 15_000, 1, Wait::Lock, 0)
    );
    assert_eq!(w.shortfalls(), (0, 1));
}

#[test]
fn without_a_threshold_the_longest_of_each_interval_and_kind_are_explained() {
    let (tid, mut w) = watch_this_thread(0);
    w.spec.keep = 2;
    let mut requests = Vec::new();
    // Delays 5, 3, 7, 4, 9, 1 (us): explained when among the two longest so far.
    for (i, d) in [5u64, 3, 7, 4, 9, 1].into_iter().enumerate() {
        let t = 1_000_000 * (i as u64 + 1);
        w.offer(&ev(
            0,
            t,
            Kind::Waking {
                task: task(tid),
                target_cpu: 0,
            },
        ));
        w.offer(&ev(
            0,
            t + d * 1000,
            Kind::Switch {
                prev: task(0),
                prev_state: TaskState::RUNNING,
                next: task(tid),
            },
        ));
        w.offer(&ev(
            0,
            t + d * 1000 + 10,
            Kind::Switch {
                prev: task(tid),
                prev_state: TaskState::SLEEPING,
                next: task(0),
            },
        ));
    }
    w.flush(&mut |r| requests.push(r.woke_ns - r.deadline_ns));
    assert_eq!(requests, vec![5_000, 3_000, 7_000, 9_000]);
    // A new interval starts anew.
    w.take_interval();
    assert_eq!(w.series()[0].last_interval_max, Nanos(9_000));
    w.offer(&ev(
        0,
        90_000_000,
        Kind::Waking {
            task: task(tid),
            target_cpu: 0,
        },
    ));
    w.offer(&ev(
        0,
        90_001_000,
        Kind::Switch {
            prev: task(0),
            prev_state: TaskState::RUNNING,
            next: task(tid),
        },
    ));
    requests.clear();
    w.flush(&mut |r| requests.push(r.woke_ns - r.deadline_ns));
    assert_eq!(requests, vec![1_000]);
}

/// `e` as thread `tid`'s own event (the wait-call probes record the calling thread).
fn own(tid: i64, cpu: u16, ts_ns: u64, kind: Kind) -> Event {
    Event {
        cpu,
        ts_ns,
        current_pid: tid,
        kind,
    }
}

fn sleeper_timer(tid: i64, expires: u64) -> Kind {
    Kind::HrtimerEntry {
        function: "hrtimer_wakeup".into(),
        task: Some(task(tid)),
        expires_ns: Some(expires),
        slack_ns: 0,
        timer: None,
    }
}

const CLOCK_NANOSLEEP: i32 = 230;

#[test]
fn in_a_wait_call_a_delay_ends_where_the_call_returns_to_user_space() {
    // The program's own view: a periodic loop measures its lateness after its sleep returns,
    // not when the scheduler put it on a CPU.
    let (tid, mut w) = watch_this_thread(0);
    w.set_wait_calls(true);
    let enter = |deadline| Kind::WaitEnter {
        call: CLOCK_NANOSLEEP,
        deadline_ns: Some(deadline),
    };
    let exit = Kind::WaitExit {
        call: CLOCK_NANOSLEEP,
        ret: 0,
    };
    // Period 1: asks for 10 000, asleep; the timer fires at 10 300, woken at 10 400, on a
    // CPU at 10 900 and back in user space at 11 500.
    w.offer(&own(tid, 0, 1_000, enter(10_000)));
    w.offer(&ev(0, 1_100, switch(tid, TaskState::SLEEPING, 0)));
    w.offer(&ev(0, 10_300, sleeper_timer(tid, 10_000)));
    w.offer(&ev(
        0,
        10_400,
        Kind::Waking {
            task: task(tid),
            target_cpu: 0,
        },
    ));
    w.offer(&ev(0, 10_900, switch(0, TaskState::RUNNING, tid)));
    w.offer(&own(tid, 0, 11_500, exit.clone()));
    // Period 2: asks for 20 000 but is called at 21 000 (late already): no timer, no sleep,
    // the call returns at once, 1 200 late.
    w.offer(&own(tid, 0, 21_000, enter(20_000)));
    w.offer(&own(tid, 0, 21_200, exit.clone()));
    // Period 3: the timer fires before it is off its CPU (no switch at all).
    w.offer(&own(tid, 0, 29_990, enter(30_000)));
    w.offer(&ev(0, 30_050, sleeper_timer(tid, 30_000)));
    w.offer(&own(tid, 0, 30_400, exit));
    let mut requests = Vec::new();
    w.advance(RULES.merge_lag_ns + 40_000, &mut |r| requests.push(r));
    let timer = w
        .series()
        .iter()
        .find(|s| s.tid.is_some() && s.kind == DelayKind::Timer)
        .expect("a timer series");
    assert_eq!(timer.total.len(), 3, "every period counted");
    assert_eq!(
        timer.total.max(),
        Nanos(1_500),
        "to the return, not the switch-in"
    );
    assert_eq!(timer.total.summary().min, 400);
    let first = requests
        .iter()
        .find(|r| r.deadline_ns == 10_000)
        .expect("explained");
    assert_eq!((first.woke_ns, first.running_ns), (11_500, Some(10_900)));
    let wakeup = w
        .series()
        .iter()
        .find(|s| s.tid.is_some() && s.kind == DelayKind::Wakeup)
        .unwrap();
    assert_eq!(wakeup.total.len(), 1);
    assert_eq!(
        wakeup.total.max(),
        Nanos(1_100),
        "from the wakeup to the return"
    );
}

#[test]
fn without_wait_calls_or_outside_one_a_delay_ends_at_the_switch_in() {
    let (tid, mut w) = watch_this_thread(0);
    // Asleep (in a call the recorder does not see), timer at 10 000, on a CPU at 10 600.
    w.offer(&ev(0, 1_100, switch(tid, TaskState::SLEEPING, 0)));
    w.offer(&ev(0, 10_100, sleeper_timer(tid, 10_000)));
    w.offer(&ev(0, 10_600, switch(0, TaskState::RUNNING, tid)));
    // A return from a call whose entry was not seen ends nothing more.
    w.offer(&own(
        tid,
        0,
        11_000,
        Kind::WaitExit {
            call: CLOCK_NANOSLEEP,
            ret: 0,
        },
    ));
    w.advance(RULES.merge_lag_ns + 20_000, &mut |_| {});
    let timer = w
        .series()
        .iter()
        .find(|s| s.tid.is_some() && s.kind == DelayKind::Timer)
        .unwrap();
    assert_eq!((timer.total.len(), timer.total.max()), (1, Nanos(600)));
}

#[test]
fn a_thread_that_leaves_a_cpu_it_was_never_seen_to_get_had_a_wakeup_the_trace_missed() {
    // A kernel whose trace lacks the switch out of its idle task (tracefs on some VMs): the
    // thread is woken, then seen leaving its CPU again with no switch onto it between. That
    // wakeup's delay is unmeasured and counted, with its CPU; a wakeup while it was still on
    // its CPU going to sleep is no such case.
    let (tid, mut w) = watch_this_thread(0);
    let waking = |ts: u64| {
        ev(
            1,
            ts,
            Kind::Waking {
                task: task(tid),
                target_cpu: 1,
            },
        )
    };
    w.offer(&ev(1, 1_000, switch(tid, TaskState::SLEEPING, 0)));
    w.offer(&waking(10_000));
    // (The switch that ran it is missing.)
    w.offer(&ev(1, 12_000, switch(tid, TaskState::SLEEPING, 0)));
    // Woken while still on its CPU going to sleep, then off it: seen throughout.
    w.offer(&waking(20_000));
    w.offer(&ev(1, 20_500, switch(0, TaskState::RUNNING, tid)));
    w.offer(&waking(20_800));
    w.offer(&ev(1, 21_000, switch(tid, TaskState::SLEEPING, 0)));
    w.advance(RULES.merge_lag_ns + 30_000, &mut |_| {});
    assert_eq!(w.wakeups_unseen(), 1);
    assert_eq!(w.wakeups_unseen_on(), vec![1]);
    let wakeup = w
        .series()
        .iter()
        .find(|s| s.tid.is_some() && s.kind == DelayKind::Wakeup)
        .unwrap();
    assert_eq!(wakeup.unmeasured, 1);
    assert_eq!((wakeup.total.len(), wakeup.total.max()), (1, Nanos(500)));
}

#[test]
fn a_wakeup_the_trace_missed_in_a_wait_call_is_counted_once() {
    // Asleep in its sleep call, its wakeup and the switch that ran it both missing: the call's
    // return says so (counted there), and its next switch out is no second such wakeup.
    let (tid, mut w) = watch_this_thread(0);
    let sleep = |ts: u64| {
        own(
            tid,
            1,
            ts,
            Kind::WaitEnter {
                call: CLOCK_NANOSLEEP,
                deadline_ns: Some(ts + 1_000),
            },
        )
    };
    let back = |ts: u64| {
        own(
            tid,
            1,
            ts,
            Kind::WaitExit {
                call: CLOCK_NANOSLEEP,
                ret: 0,
            },
        )
    };
    w.offer(&sleep(1_000));
    w.offer(&ev(1, 1_100, switch(tid, TaskState::SLEEPING, 0)));
    w.offer(&back(2_500));
    w.offer(&sleep(3_000));
    w.offer(&ev(1, 3_100, switch(tid, TaskState::SLEEPING, 0)));
    w.advance(RULES.merge_lag_ns + 30_000, &mut |_| {});
    assert_eq!(w.wakeups_unseen(), 1);
}

#[test]
fn a_sleep_cut_short_by_a_signal_is_no_lateness() {
    let (tid, mut w) = watch_this_thread(0);
    w.offer(&own(
        tid,
        0,
        1_000,
        Kind::WaitEnter {
            call: CLOCK_NANOSLEEP,
            deadline_ns: Some(50_000),
        },
    ));
    w.offer(&own(
        tid,
        0,
        60_000,
        Kind::WaitExit {
            call: CLOCK_NANOSLEEP,
            ret: -4, // EINTR
        },
    ));
    w.advance(RULES.merge_lag_ns + 70_000, &mut |_| {});
    assert!(w
        .series()
        .iter()
        .all(|s| s.kind != DelayKind::Timer || s.total.is_empty()));
}

#[test]
fn a_names_series_sums_threads_of_one_class_and_a_thread_made_real_time_moves_to_its_rt_series() {
    // This test's thread is time-sharing: its name's series is `<name>:ts/wakeup`. Then the
    // scheduler switches it in at a real-time priority (as a program that sets SCHED_FIFO
    // after starting its thread): its later delays count to `<name>/wakeup`.
    let (tid, mut w) = watch_this_thread(u64::MAX);
    let at = |prio: i64| Task { prio, ..task(tid) };
    let wake_and_run = |w: &mut WatchState, t: u64, prio: i64, delay: u64| {
        w.offer(&ev(
            0,
            t,
            Kind::Waking {
                task: at(prio),
                target_cpu: 0,
            },
        ));
        w.offer(&ev(
            0,
            t + delay,
            Kind::Switch {
                prev: task(0),
                prev_state: TaskState::RUNNING,
                next: at(prio),
            },
        ));
        w.offer(&ev(
            0,
            t + delay + 100,
            Kind::Switch {
                prev: at(prio),
                prev_state: TaskState::SLEEPING,
                next: task(0),
            },
        ));
    };
    wake_and_run(&mut w, 1_000, 120, 700);
    wake_and_run(&mut w, 10_000, 19, 300);
    wake_and_run(&mut w, 20_000, 19, 200);
    w.advance(RULES.merge_lag_ns + 100_000, &mut |_| {});
    let named = |suffix: &str| {
        w.series()
            .iter()
            .find(|s| s.tid.is_none() && s.name.ends_with(suffix))
            .cloned()
            .unwrap_or_else(|| panic!("{suffix}: {:?}", w.series()))
    };
    let ts = named(":ts/wakeup");
    let rt = w
        .series()
        .iter()
        .find(|s| s.tid.is_none() && s.rt && s.kind == DelayKind::Wakeup)
        .cloned()
        .unwrap();
    assert!(!ts.rt && !rt.name.contains(":ts/"), "{}", rt.name);
    assert_eq!((ts.total.len(), ts.total.max()), (1, Nanos(700)));
    assert_eq!((rt.total.len(), rt.total.max()), (2, Nanos(300)));
    // The thread's own delays counted apart by the class it had at each: its time-sharing
    // series has the first, its real-time one the other two.
    let own: Vec<_> = w.series().iter().filter(|s| s.tid == Some(tid)).collect();
    assert_eq!(own.len(), 2, "{own:?}");
    assert!(!own[0].rt && own[0].name.ends_with(&format!(":ts/{tid}/wakeup")));
    assert_eq!(own[0].total.len(), 1);
    assert!(own[1].rt && !own[1].name.contains(":ts/"));
    assert!(own[1].name.ends_with(&format!("/{tid}/wakeup")));
    assert_eq!(own[1].total.len(), 2);
}

#[test]
fn a_thread_made_real_time_before_its_first_delay_has_one_series_of_that_class() {
    // cyclictest's thread sets SCHED_FIFO as it starts: its own series is real-time.
    let (tid, mut w) = watch_this_thread(u64::MAX);
    let at = Task {
        prio: 19,
        ..task(tid)
    };
    let switch = |prev: Task, state, next: Task| Kind::Switch {
        prev,
        prev_state: state,
        next,
    };
    w.offer(&ev(0, 500, switch(task(0), TaskState::RUNNING, at.clone())));
    w.offer(&ev(
        0,
        600,
        switch(at.clone(), TaskState::SLEEPING, task(0)),
    ));
    let waking = Kind::Waking {
        task: at.clone(),
        target_cpu: 0,
    };
    w.offer(&ev(0, 1_000, waking));
    w.offer(&ev(
        0,
        1_400,
        switch(task(0), TaskState::RUNNING, at.clone()),
    ));
    w.advance(RULES.merge_lag_ns + 100_000, &mut |_| {});
    let own: Vec<_> = w.series().iter().filter(|s| s.tid == Some(tid)).collect();
    assert_eq!(own.len(), 1, "{own:?}");
    assert!(own[0].rt && own[0].name.ends_with(&format!("/{tid}/wakeup")));
    assert_eq!(own[0].total.len(), 1);
}

const FUTEX: i32 = 202;

/// This process as a JVM: its safepoint begun (`true`) or ended at `ts`.
fn safepoint(ts: u64, begin: bool) -> Event {
    let probe = match begin {
        true => rtlab_trace::event::JvmProbe::SafepointBegin,
        false => rtlab_trace::event::JvmProbe::SafepointEnd,
    };
    ev(
        1,
        ts,
        Kind::Jvm {
            probe,
            process: std::process::id(),
            name: None,
            time_ns: None,
        },
    )
}

/// Thread `tid` in a futex wait from `enter`, woken at `woken`, back in user space at `back`.
fn futex_wait(w: &mut WatchState, tid: i64, enter: u64, woken: u64, back: u64) {
    let call = FUTEX;
    w.offer(&own(
        tid,
        0,
        enter,
        Kind::WaitEnter {
            call,
            deadline_ns: None,
        },
    ));
    let waking = Kind::Waking {
        task: task(tid),
        target_cpu: 0,
    };
    w.offer(&ev(0, woken, waking));
    w.offer(&own(tid, 0, back, Kind::WaitExit { call, ret: 0 }));
}

/// This test's thread watched, its wait woken (at 1.1 ms) and returned (1.13 ms: a 30 us
/// wakeup) in a safepoint of its process begun at 1 ms.
fn held_in_a_safepoint() -> (i64, WatchState) {
    let (tid, mut w) = watch_this_thread(u64::MAX);
    w.set_wait_calls(true);
    w.offer(&safepoint(1_000_000, true));
    futex_wait(&mut w, tid, 500_000, 1_100_000, 1_130_000);
    (tid, w)
}

/// Thread `tid` in a sleep to a time, `(entered, deadline, back)`: its timer fires at the
/// deadline, it is back in user space at `back`.
fn sleep_to(w: &mut WatchState, tid: i64, (enter, deadline, back): (u64, u64, u64)) {
    let (call, deadline_ns) = (CLOCK_NANOSLEEP, Some(deadline));
    w.offer(&own(tid, 0, enter, Kind::WaitEnter { call, deadline_ns }));
    w.offer(&ev(0, deadline, sleeper_timer(tid, deadline)));
    w.offer(&own(tid, 0, back, Kind::WaitExit { call, ret: 0 }));
}

fn series_of(w: &WatchState, kind: DelayKind) -> &WatchSeries {
    w.series()
        .iter()
        .find(|s| s.tid.is_some() && s.kind == kind)
        .expect("the thread's series")
}

#[test]
fn a_java_thread_lives_a_safepoint_to_the_barriers_return_with_the_periods_it_absorbed() {
    // A 1 ms periodic thread whose timer returns while its JVM is at a safepoint: it blocks
    // at the barrier until the VM thread wakes it, just before the end probe.
    let (tid, mut w) = watch_this_thread(1_000_000);
    w.set_wait_calls(true);
    for k in 1..=3 {
        let d = k * 1_000_000;
        sleep_to(&mut w, tid, (d - 500_000, d, d + 20_000));
    }
    w.offer(&safepoint(3_500_000, true));
    sleep_to(&mut w, tid, (3_500_000, 4_000_000, 4_020_000));
    // On its way back, a lock taken at once (a call that returns without a wake).
    let call = FUTEX;
    w.offer(&own(
        tid,
        0,
        4_021_000,
        Kind::WaitEnter {
            call,
            deadline_ns: None,
        },
    ));
    w.offer(&own(tid, 0, 4_022_000, Kind::WaitExit { call, ret: 0 }));
    // A lock handed over to it on its way (woken), then the barrier.
    futex_wait(&mut w, tid, 4_023_000, 4_025_000, 4_026_000);
    futex_wait(&mut w, tid, 4_030_000, 9_000_000, 9_010_000);
    w.offer(&safepoint(9_020_000, false));
    // It runs the deadlines it missed at once, then waits for the next (entered at 9.012 ms).
    sleep_to(&mut w, tid, (9_012_000, 10_000_000, 10_030_000));
    let mut requests = Vec::new();
    w.advance(RULES.merge_lag_ns + 20_000_000, &mut |r| requests.push(r));
    // Asked about once: the periods it ran at once lie in the delay the safepoint held.
    assert_eq!(requests.len(), 1, "{requests:?}");
    let timer = series_of(&w, DelayKind::Timer);
    // Three on time (20 us), the one the safepoint held (4 ms to 9.01 ms), the five
    // deadlines it ran at once (5 ms to 9 ms, each late to 9.012 ms), the next (30 us).
    assert_eq!(timer.total.len(), 10);
    assert_eq!(timer.total.max(), Nanos(5_010_000));
    assert_eq!(timer.total.summary().min, 12_000);
}

#[test]
fn a_java_threads_periods_missed_while_it_ran_are_counted_late_to_its_next_wait() {
    // Stopped by a safepoint while it ran (no wait of its own returned in it): its deadlines
    // at 4 and 5 ms passed meanwhile, run at once after it; its next wait entered at 5.5 ms.
    let (tid, mut w) = watch_this_thread(1_000_000);
    w.set_wait_calls(true);
    w.offer(&safepoint(100_000, true)); // a JVM
    w.offer(&safepoint(200_000, false));
    for k in 0..3 {
        let d = k * 1_000_000 + 1_000_000;
        sleep_to(&mut w, tid, (d - 500_000, d, d + 20_000));
    }
    sleep_to(&mut w, tid, (5_500_000, 6_000_000, 6_020_000));
    let mut requests = Vec::new();
    w.advance(RULES.merge_lag_ns + 20_000_000, &mut |r| requests.push(r));
    let timer = series_of(&w, DelayKind::Timer);
    // 1 to 3 ms waited for; 4 and 5 ms run at once at 5.5 ms; 6 ms waited for.
    assert_eq!(timer.total.len(), 6);
    assert_eq!(timer.total.max(), Nanos(1_500_000));
    // The first missed one, over the threshold (1 ms), is asked about: from its deadline to
    // where the thread caught up (what stopped it is found there).
    let asked: Vec<(u64, u64)> = requests
        .iter()
        .map(|r| (r.deadline_ns, r.woke_ns))
        .collect();
    assert_eq!(asked, vec![(4_000_000, 5_500_000)]);
}

#[test]
fn a_java_thread_late_by_over_a_period_again_and_again_keeps_its_period() {
    // 1 ms periods; from 4 ms on, each wait it makes is 1.5 ms late, so it runs the next
    // period at once and waits two periods apart (4, 6, ... 14 ms); then on time again.
    let (tid, mut w) = watch_this_thread(u64::MAX);
    w.set_wait_calls(true);
    w.offer(&safepoint(100_000, true)); // a JVM
    w.offer(&safepoint(200_000, false));
    for k in 1..=3 {
        let d = k * 1_000_000;
        sleep_to(&mut w, tid, (d - 500_000, d, d + 20_000));
    }
    for d in (4..=14).step_by(2).map(|ms| ms * 1_000_000) {
        sleep_to(&mut w, tid, (d - 490_000, d, d + 1_500_000));
    }
    sleep_to(&mut w, tid, (15_510_000, 16_000_000, 16_020_000));
    w.advance(RULES.merge_lag_ns + 30_000_000, &mut |_| {});
    // Every period from 1 to 16 ms counted: those run at once (5, 7, ... 15 ms) too.
    let timer = series_of(&w, DelayKind::Timer);
    assert_eq!(timer.total.len(), 16);
}

/// Thread `tid` in a timed futex wait to a time (a JVM's park), `(entered, deadline,
/// back)`: its timer fires at the deadline, the call returns timed out at `back`.
fn park_to(w: &mut WatchState, tid: i64, (enter, deadline, back): (u64, u64, u64)) {
    let (call, deadline_ns) = (FUTEX, Some(deadline));
    w.offer(&own(tid, 0, enter, Kind::WaitEnter { call, deadline_ns }));
    w.offer(&ev(0, deadline, sleeper_timer(tid, deadline)));
    let ret = -110; // ETIMEDOUT
    w.offer(&own(tid, 0, back, Kind::WaitExit { call, ret }));
}

#[test]
fn a_thread_that_runs_through_a_safepoint_keeps_its_own_delays() {
    // A collector's worker: woken again and again while its JVM is at a safepoint, then
    // asleep until the next collection. Its delays end where its waits returned.
    let (tid, mut w) = watch_this_thread(u64::MAX);
    w.set_wait_calls(true);
    w.offer(&safepoint(1_000_000, true));
    futex_wait(&mut w, tid, 500_000, 1_100_000, 1_150_000); // 50 us
    futex_wait(&mut w, tid, 1_300_000, 1_500_000, 1_520_000); // 20 us
    futex_wait(&mut w, tid, 1_600_000, 1_700_000, 1_750_000); // 50 us: runs on
    futex_wait(&mut w, tid, 1_800_000, 2_000_000, 2_040_000); // 40 us
    futex_wait(&mut w, tid, 2_100_000, 2_300_000, 2_350_000); // 50 us, long before the end
    w.offer(&safepoint(8_000_000, false));
    futex_wait(&mut w, tid, 2_400_000 + 6_000_000, 20_000_000, 20_010_000); // 10 us
    w.advance(RULES.merge_lag_ns + 30_000_000, &mut |_| {});
    let wakeup = series_of(&w, DelayKind::Wakeup);
    assert_eq!(wakeup.total.len(), 6);
    assert_eq!(wakeup.total.max(), Nanos(50_000));
}

#[test]
fn a_delay_held_in_one_safepoint_is_not_stretched_over_the_next() {
    // A service thread woken in a safepoint, asleep past its end, woken again in the next
    // one and on its way: its delays ended where they returned. (One that returns within
    // a millisecond of the end and goes on is taken for a Java thread that just missed the
    // barrier: lived to the end.)
    let (tid, mut w) = held_in_a_safepoint();
    w.offer(&safepoint(5_000_000, false));
    w.offer(&safepoint(300_000_000, true));
    futex_wait(&mut w, tid, 1_300_000, 300_500_000, 300_520_000); // 20 us
    w.offer(&safepoint(302_000_000, false));
    futex_wait(&mut w, tid, 302_100_000, 350_000_000, 350_010_000); // 10 us
    w.advance(RULES.merge_lag_ns + 400_000_000, &mut |_| {});
    let wakeup = series_of(&w, DelayKind::Wakeup);
    assert_eq!(wakeup.total.len(), 3);
    assert_eq!(wakeup.total.max(), Nanos(30_000));
}

#[test]
fn at_the_series_limit_a_new_threads_series_takes_an_ended_ones_place() {
    let (_, mut w) = watch_this_thread(u64::MAX);
    let by_name = w
        .series_index("churn", None, DelayKind::Timer, true)
        .unwrap();
    let mut own = Vec::new();
    for tid in 1.. {
        match w.series_index("churn", Some(tid), DelayKind::Timer, true) {
            Some(i) => {
                w.join(by_name, i);
                own.push(i);
            }
            None => break,
        }
    }
    assert_eq!(w.series().len(), MAX_SERIES);
    // Thread 1 ended (and was dropped) a while ago: its place goes to the next new thread.
    w.retired.push_back((own[0], 0));
    w.scanned_ns = RETIRED_NS;
    let i = w.series_index("churn", Some(100_000), DelayKind::Timer, true);
    assert_eq!(i, Some(own[0]));
    assert_eq!(w.series()[own[0] as usize].name, "churn/100000/timer");
    assert!(!w.series()[by_name as usize].members.contains(&own[0]));
    assert!(!w.index.contains_key("churn/1/timer"));
    // None left to take.
    assert_eq!(
        w.series_index("churn", Some(100_001), DelayKind::Timer, true),
        None
    );
    // One ended just now is not given away yet.
    w.retired.push_back((own[2], RETIRED_NS));
    assert_eq!(
        w.series_index("churn", Some(100_001), DelayKind::Timer, true),
        None
    );
    // A retired series found again by its name (a new thread of its TID) is not given away.
    w.retired.push_back((own[1], 0));
    assert_eq!(
        w.series_index("churn", Some(2), DelayKind::Timer, true),
        Some(own[1])
    );
    assert_eq!(
        w.series_index("churn", Some(100_002), DelayKind::Timer, true),
        None
    );
}

#[test]
fn a_delay_held_in_one_safepoint_and_asleep_through_the_next_ends_where_it_returned() {
    // Woken in safepoint 1, asleep through safepoint 2, woken just after safepoint 2's end
    // (a thread notified when a VM operation it asked for is done): not stretched over both.
    let (tid, mut w) = held_in_a_safepoint();
    w.offer(&safepoint(5_000_000, false));
    w.offer(&safepoint(300_000_000, true));
    w.offer(&safepoint(302_000_000, false));
    futex_wait(&mut w, tid, 1_300_000, 302_300_000, 302_320_000); // 20 us
    w.advance(RULES.merge_lag_ns + 400_000_000, &mut |_| {});
    let wakeup = series_of(&w, DelayKind::Wakeup);
    assert_eq!(wakeup.total.len(), 2);
    assert_eq!(wakeup.total.max(), Nanos(30_000));
}

#[test]
fn up_to_three_woken_returns_lead_to_the_barrier_and_a_fourth_runs_through() {
    // Held at 1.13 ms in a safepoint ending at 9 ms; then `n` woken returns, the last one
    // woken at the end: with three it is the barrier's (the held delay lives to it), with
    // four the thread ran through the safepoint (every delay its own).
    let most = RULES.max_returns_to_barrier as u64;
    for (n, longest) in [(most, 9_010_000 - 1_100_000), (most + 1, 30_000)] {
        let (tid, mut w) = held_in_a_safepoint();
        for k in 1..n {
            let t = 1_200_000 + k * 100_000;
            futex_wait(&mut w, tid, t, t + 10_000, t + 15_000); // 5 us
        }
        futex_wait(&mut w, tid, 2_000_000, 9_000_000, 9_010_000); // 10 us
        w.offer(&safepoint(9_020_000, false));
        w.advance(RULES.merge_lag_ns + 20_000_000, &mut |_| {});
        let wakeup = series_of(&w, DelayKind::Wakeup);
        assert_eq!(wakeup.total.len(), n + 1, "{n} returns");
        assert_eq!(wakeup.total.max(), Nanos(longest), "{n} returns");
    }
}

#[test]
fn a_barrier_woken_long_before_the_end_probe_is_known_by_the_vm_operations_end() {
    // The VM thread ends its operation at 8.9 ms, lets the Java threads go at 9 ms, then is
    // kept off its CPU 3 ms before its end probe fires: the thread's delay still ends at its
    // barrier's return, not where it returned first.
    let (tid, mut w) = watch_this_thread(u64::MAX);
    w.set_wait_calls(true);
    w.offer(&safepoint(1_000_000, true));
    futex_wait(&mut w, tid, 500_000, 1_100_000, 1_130_000);
    let done = Kind::Jvm {
        probe: rtlab_trace::event::JvmProbe::VmopEnd,
        process: std::process::id(),
        name: None,
        time_ns: None,
    };
    w.offer(&ev(1, 8_900_000, done));
    futex_wait(&mut w, tid, 2_000_000, 9_000_000, 9_010_000);
    // (Far more than a barrier's wake is ever before its end probe.)
    w.offer(&safepoint(9_000_000 + 3 * RULES.barrier_ns, false));
    w.advance(RULES.merge_lag_ns + 20_000_000, &mut |_| {});
    let wakeup = series_of(&w, DelayKind::Wakeup);
    assert_eq!(wakeup.total.max(), Nanos(9_010_000 - 1_100_000));
}

/// Thread `tid`'s Java park begun (`Some(time asked)`: a `parkNanos`) or ended at `ts`.
fn park(tid: i64, ts: u64, begin: Option<u64>) -> Event {
    let probe = match begin {
        Some(_) => rtlab_trace::event::JvmProbe::ParkBegin,
        None => rtlab_trace::event::JvmProbe::ParkEnd,
    };
    let kind = Kind::Jvm {
        probe,
        process: std::process::id(),
        name: None,
        time_ns: begin,
    };
    own(tid, 0, ts, kind)
}

#[test]
fn a_java_park_ends_where_its_java_code_goes_on_from_the_time_it_asked_for() {
    // parkNanos(900 us) at 100 us: the JVM asks the kernel for 1.002 ms (its clock read
    // later, within `RULES.park_deadline_ns`), the timer fires then, the wait returns at
    // 1.02 ms, the mutex taken back (a woken lock wait), the park's end probe at 1.03 ms.
    let (tid, mut w) = watch_this_thread(u64::MAX);
    w.set_wait_calls(true);
    w.offer(&park(tid, 100_000, Some(900_000)));
    sleep_to(&mut w, tid, (101_000, 1_002_000, 1_020_000));
    futex_wait(&mut w, tid, 1_021_000, 1_024_000, 1_026_000);
    w.offer(&park(tid, 1_030_000, None));
    // The next park, to 2 ms: no end yet.
    w.offer(&park(tid, 1_040_000, Some(960_000)));
    w.advance(RULES.merge_lag_ns + 20_000_000, &mut |_| {});
    let timer = series_of(&w, DelayKind::Timer);
    assert_eq!(timer.total.len(), 1);
    assert_eq!(timer.total.max(), Nanos(30_000));
    // The lock handed back inside the park is not a wakeup of its own.
    let wakeups = w
        .series()
        .iter()
        .find(|s| s.tid.is_some() && s.kind == DelayKind::Wakeup)
        .map_or(0, |s| s.total.len());
    assert_eq!(wakeups, 0);
}

#[test]
fn a_java_park_held_at_a_safepoints_barrier_ends_at_the_park_s_end() {
    // Its timer fires in a safepoint (at 1 ms); it blocks at the barrier until 6 ms; the
    // park ends at 6.01 ms. No held logic is needed: the probe says where Java goes on.
    let (tid, mut w) = watch_this_thread(u64::MAX);
    w.set_wait_calls(true);
    w.offer(&park(tid, 0, Some(1_000_000)));
    w.offer(&safepoint(500_000, true));
    sleep_to(&mut w, tid, (1_000, 1_000_000, 1_020_000));
    futex_wait(&mut w, tid, 1_030_000, 5_990_000, 6_000_000);
    w.offer(&safepoint(5_995_000, false));
    w.offer(&park(tid, 6_010_000, None));
    w.advance(RULES.merge_lag_ns + 20_000_000, &mut |_| {});
    let timer = series_of(&w, DelayKind::Timer);
    assert_eq!(timer.total.len(), 1);
    assert_eq!(timer.total.max(), Nanos(5_010_000));
}

#[test]
fn a_loss_inside_a_java_park_counts_its_delay_unmeasured() {
    let (tid, mut w) = watch_this_thread(u64::MAX);
    w.set_wait_calls(true);
    w.offer(&park(tid, 0, Some(1_000_000)));
    sleep_to(&mut w, tid, (1_000, 1_000_000, 1_020_000));
    w.offer(&ev(0, 1_025_000, Kind::Lost(3)));
    w.offer(&park(tid, 1_030_000, None));
    w.advance(RULES.merge_lag_ns + 20_000_000, &mut |_| {});
    let timer = series_of(&w, DelayKind::Timer);
    assert!(timer.total.is_empty());
    assert_eq!(timer.unmeasured, 1);
}

#[test]
fn at_the_end_a_park_not_over_is_unmeasured_and_a_held_delay_ends_where_it_returned() {
    // Its park's timer fired at 1 ms and its wait returned, but the park's end never came
    // before the run ended: its lateness is not known.
    let (tid, mut w) = watch_this_thread(u64::MAX);
    w.set_wait_calls(true);
    w.offer(&park(tid, 0, Some(1_000_000)));
    sleep_to(&mut w, tid, (1_000, 1_000_000, 1_020_000));
    w.flush(&mut |_| {});
    let timer = series_of(&w, DelayKind::Timer);
    assert!(timer.total.is_empty());
    assert_eq!(timer.unmeasured, 1);
    // A wait that returned in a safepoint still on at the end: counted to its return.
    let (_, mut w) = held_in_a_safepoint();
    w.flush(&mut |_| {});
    let wakeup = series_of(&w, DelayKind::Wakeup);
    assert_eq!(wakeup.total.len(), 1);
    assert_eq!(wakeup.total.max(), Nanos(30_000));
}

#[test]
fn where_it_may_move_the_reader_keeps_off_the_cpus_the_watched_real_time_threads_ran_on() {
    let (tid, mut w) = watch_this_thread(u64::MAX);
    let rt = Task {
        prio: 19,
        ..task(tid)
    };
    let switch_in = |cpu, ts| {
        ev(
            cpu,
            ts,
            Kind::Switch {
                prev: task(0),
                prev_state: TaskState::RUNNING,
                next: rt.clone(),
            },
        )
    };
    let at = 5_000_000_000;
    w.offer(&switch_in(1, at));
    w.flush(&mut |_| {});
    assert_eq!(w.rt_cpus(at), CpuMask::of(&[1]));
    // Not asked to move (told where, `--reader-cpu`).
    assert_eq!(w.reader_cpus(at), None);
    w.reader_among = vec![0, 1, 2];
    // A CPU the watched threads may not run on first.
    w.cpus_wanted = Some(CpuMask::of(&[0, 1]));
    assert_eq!(w.reader_cpus(at), Some(vec![2]));
    // None: off the CPUs their real-time threads ran on lately.
    w.cpus_wanted = Some(CpuMask::of(&[0, 1, 2]));
    assert_eq!(w.reader_cpus(at), Some(vec![0, 2]));
    w.cpus_wanted = None;
    assert_eq!(w.reader_cpus(at), Some(vec![0, 2]));
    // Still on CPU 1 (a spinner never switches out): kept off however long.
    assert_eq!(w.reader_cpus(at + RT_ON_NS + 1), Some(vec![0, 2]));
    // Its last run long past: anywhere again.
    w.offer(&ev(
        1,
        at + 10,
        Kind::Switch {
            prev: rt.clone(),
            prev_state: TaskState::SLEEPING,
            next: task(0),
        },
    ));
    w.flush(&mut |_| {});
    assert_eq!(w.reader_cpus(at + 10 + RT_ON_NS + 1), Some(vec![0, 1, 2]));
    // Real-time threads on every CPU: anywhere.
    w.offer(&switch_in(0, at + 11));
    w.offer(&switch_in(1, at + 12));
    w.offer(&switch_in(2, at + 13));
    w.flush(&mut |_| {});
    assert_eq!(w.reader_cpus(at + 14), Some(vec![0, 1, 2]));
    // A time-sharing thread's CPU is not kept off.
    let (tid, mut ts) = watch_this_thread(u64::MAX);
    ts.reader_among = vec![0, 1];
    ts.cpus_wanted = None;
    ts.offer(&ev(
        1,
        at,
        Kind::Switch {
            prev: task(0),
            prev_state: TaskState::RUNNING,
            next: task(tid),
        },
    ));
    ts.flush(&mut |_| {});
    assert_eq!(ts.reader_cpus(at), Some(vec![0, 1]));
}

/// Thread `tid`'s entry into (`enter`) or return from a `read()` at `ts` (no deadline).
fn read_call(tid: i64, ts: u64, enter: bool) -> Event {
    let kind = match enter {
        true => Kind::WaitEnter {
            call: 0,
            deadline_ns: None,
        },
        false => Kind::WaitExit { call: 0, ret: 8 },
    };
    own(tid, 0, ts, kind)
}

#[test]
fn a_timer_that_wakes_through_a_file_or_a_signal_is_the_deadline_of_the_wait_it_ends() {
    // A timerfd's reader (blocked in read(), no deadline of its own) is woken in the timer's
    // interrupt: its `timer` delay runs from the expiry the timerfd was armed for to the
    // read's return. A waking long after an expiry, or after a switch, is none of its.
    let (tid, mut w) = watch_this_thread(0);
    w.set_wait_calls(true);
    let fired = |expires| Kind::HrtimerEntry {
        function: "timerfd_tmrproc".into(),
        task: None,
        expires_ns: Some(expires),
        slack_ns: 0,
        timer: None,
    };
    let woken = Kind::Waking {
        task: task(tid),
        target_cpu: 0,
    };
    let read = |ts, enter| read_call(tid, ts, enter);
    // Armed for 10 000: fires at 10 300, wakes it at 10 302, back from read() at 11 000.
    w.offer(&read(1_000, true));
    w.offer(&ev(0, 1_100, switch(tid, TaskState::SLEEPING, 0)));
    w.offer(&ev(0, 10_300, fired(10_000)));
    w.offer(&ev(0, 10_302, woken.clone()));
    w.offer(&ev(0, 10_800, switch(0, TaskState::RUNNING, tid)));
    w.offer(&read(11_000, false));
    // Another timerfd fires at 20 000; this thread is woken 300 us later by something else
    // (past the interrupt the timer's own waking comes in).
    w.offer(&read(12_000, true));
    w.offer(&ev(0, 12_100, switch(tid, TaskState::SLEEPING, 0)));
    w.offer(&ev(0, 20_000, fired(20_000)));
    let late = 20_000 + 3 * RULES.timer_wakes_within_ns;
    w.offer(&ev(0, late, woken.clone()));
    w.offer(&ev(0, 320_500, switch(0, TaskState::RUNNING, tid)));
    w.offer(&read(321_000, false));
    w.advance(RULES.merge_lag_ns + 400_000, &mut |_| {});
    let timer = series_of(&w, DelayKind::Timer);
    assert_eq!(timer.total.len(), 1, "only the wait the timer ended");
    assert_eq!(
        timer.total.max(),
        Nanos(1_000),
        "from its expiry to the read's return"
    );
}

#[test]
fn a_wait_on_a_periodic_timerfd_takes_every_expiry_since_its_last_each_late_to_its_own_time() {
    // Three periods woken by the timerfd (its period learned: 1 ms), then the thread runs
    // late and its next read() returns at once at 4.5 ms: the expiries of 3.01 and 4.01 ms
    // are taken there, as the read's count tells the program, each late to its own time.
    // Then a read woken by something else (a pipe): the timer drives it no more.
    let (tid, mut w) = watch_this_thread(0);
    w.set_wait_calls(true);
    let read = |ts, enter| read_call(tid, ts, enter);
    let switch = |prev: i64, next: i64| Kind::Switch {
        prev: task(prev),
        prev_state: match prev == tid {
            true => TaskState::SLEEPING,
            false => TaskState::RUNNING,
        },
        next: task(next),
    };
    let woken = Kind::Waking {
        task: task(tid),
        target_cpu: 0,
    };
    for d in [10_000, 1_010_000, 2_010_000] {
        w.offer(&read(d - 500_000, true));
        w.offer(&ev(0, d - 499_000, switch(tid, 0)));
        w.offer(&ev(
            0,
            d + 300,
            Kind::HrtimerEntry {
                function: "timerfd_tmrproc".into(),
                task: None,
                expires_ns: Some(d),
                slack_ns: 0,
                timer: None,
            },
        ));
        w.offer(&ev(0, d + 302, woken.clone()));
        w.offer(&ev(0, d + 800, switch(0, tid)));
        w.offer(&read(d + 1_000, false));
    }
    w.offer(&read(4_499_000, true));
    w.offer(&read(4_500_000, false));
    // Woken by a pipe at 6 ms, 200 us after a timer expiry it would have taken.
    w.offer(&read(4_600_000, true));
    w.offer(&ev(0, 4_601_000, switch(tid, 0)));
    w.offer(&ev(0, 6_000_000, woken));
    w.offer(&ev(0, 6_000_100, switch(0, tid)));
    w.offer(&read(6_000_200, false));
    w.offer(&read(9_000_000, true));
    w.offer(&read(9_000_100, false));
    w.advance(RULES.merge_lag_ns + 10_000_000, &mut |_| {});
    let timer = series_of(&w, DelayKind::Timer);
    assert_eq!(
        timer.total.len(),
        5,
        "three woken, two taken at once, none after"
    );
    assert_eq!(timer.total.max(), Nanos(1_490_000));
}

#[test]
fn another_timer_that_fires_just_before_a_wakeup_is_not_the_threads_own() {
    // Woken three times by its timerfd (timer 0xa), then woken by a pipe 20 us after another
    // process's alarm (timer 0xb) fired on the same CPU: a wakeup, not a timer delay.
    let (tid, mut w) = watch_this_thread(0);
    w.set_wait_calls(true);
    let read = |ts, enter| read_call(tid, ts, enter);
    let fired = |expires, function: &str, timer| Kind::HrtimerEntry {
        function: function.into(),
        task: None,
        expires_ns: Some(expires),
        slack_ns: 0,
        timer: Some(timer),
    };
    let woken = Kind::Waking {
        task: task(tid),
        target_cpu: 0,
    };
    for d in [1_000_000, 2_000_000, 3_000_000] {
        w.offer(&read(d - 500_000, true));
        w.offer(&ev(0, d + 300, fired(d, "timerfd_tmrproc", 0xa)));
        w.offer(&ev(0, d + 302, woken.clone()));
        w.offer(&read(d + 1_000, false));
    }
    w.offer(&read(3_100_000, true));
    w.offer(&ev(0, 3_200_000, fired(3_200_000, "it_real_fn", 0xb)));
    w.offer(&ev(0, 3_200_020, woken));
    w.offer(&read(3_201_000, false));
    w.advance(RULES.merge_lag_ns + 4_000_000, &mut |_| {});
    let timer = series_of(&w, DelayKind::Timer);
    assert_eq!(timer.total.len(), 3, "its own timer's three periods only");
    assert_eq!(timer.total.max(), Nanos(1_000));
}

#[test]
fn a_timerfds_expiry_is_taken_by_the_read_after_a_readiness_wait() {
    // Taken by the read: epoll_wait woken by the timerfd returns at +1 000, the read of its
    // count at +3 000: the delay runs to the read's return. Next period: the thread waits in
    // epoll_wait again without reading (edge-triggered, read elsewhere): the epoll return
    // ends it. Last: the read that follows sleeps (another file's): the epoll return again.
    let (tid, mut w) = watch_this_thread(0);
    w.set_wait_calls(true);
    let call = |ts, no: i32, enter: bool| {
        let kind = match enter {
            true => Kind::WaitEnter {
                call: no,
                deadline_ns: None,
            },
            false => Kind::WaitExit { call: no, ret: 1 },
        };
        own(tid, 0, ts, kind)
    };
    let epoll = 232;
    let woken = Kind::Waking {
        task: task(tid),
        target_cpu: 0,
    };
    let fired = |d| Kind::HrtimerEntry {
        function: "timerfd_tmrproc".into(),
        task: None,
        expires_ns: Some(d),
        slack_ns: 0,
        timer: Some(0xa),
    };
    let period = |w: &mut WatchState, d: u64| {
        w.offer(&call(d - 500_000, epoll, true));
        w.offer(&ev(0, d + 300, fired(d)));
        w.offer(&ev(0, d + 302, woken.clone()));
        w.offer(&call(d + 1_000, epoll, false));
    };
    period(&mut w, 1_000_000);
    w.offer(&call(1_002_000, SYS_READ, true));
    w.offer(&call(1_003_000, SYS_READ, false));
    period(&mut w, 2_000_000);
    period(&mut w, 3_000_000);
    w.offer(&call(3_002_000, SYS_READ, true));
    // (Woken 0.5 ms after the expiry: not by the timer.)
    w.offer(&ev(0, 3_500_000, woken.clone()));
    w.offer(&call(3_600_000, SYS_READ, false));
    w.flush(&mut |_| {});
    let timer = series_of(&w, DelayKind::Timer);
    assert_eq!(timer.total.len(), 3, "one delay a period");
    assert_eq!(timer.total.max(), Nanos(3_000), "to the read that took it");
    assert_eq!(
        timer.total.value_at_quantile(0.0),
        Nanos(1_000),
        "to the epoll return where none did"
    );
}

#[test]
fn a_re_read_that_finds_the_same_threads_changes_nothing_for_the_event_source() {
    // The watched threads and processes unchanged: the generation the event source follows
    // stays (each change rewrites the kernel's set of watched processes).
    let (_, mut w) = watch_this_thread(0);
    let now = rtlab_sys::time::monotonic_now_ns();
    w.rescan(now);
    let g = w.threads_generation();
    w.rescan(now + RESCAN_NS);
    w.rescan(now + 2 * RESCAN_NS);
    assert_eq!(w.threads_generation(), g);
}

#[test]
fn a_re_read_applies_what_it_found_the_same_threads_change_nothing_a_new_one_does() {
    use crate::threads::{ProcessNow, Snapshot, ThreadNow};
    let (tid, mut w) = watch_this_thread(0);
    let pid = std::process::id();
    let found = |threads: &[(i64, &str)]| Snapshot {
        ours: None,
        scope: Some((
            false,
            vec![ProcessNow {
                pid,
                name: Some("p".into()),
                cgroup: String::new(),
                threads: threads
                    .iter()
                    .map(|&(tid, name)| ThreadNow {
                        tid,
                        name: name.into(),
                        chosen: true,
                        ..Default::default()
                    })
                    .collect(),
            }],
        )),
    };
    assert!(w.apply(found(&[(tid, "a")]), 1));
    let g = w.threads_generation();
    assert!(w.apply(found(&[(tid, "a")]), 2));
    assert_eq!(w.threads_generation(), g, "the same threads");
    assert!(w.apply(found(&[(tid, "b")]), 3));
    assert_eq!(w.threads_generation(), g, "renamed, the same thread");
    assert_eq!(w.threads[&tid].name, "b");
    assert!(w.apply(found(&[(tid, "b"), (tid + 1_000_000, "c")]), 4));
    assert_ne!(w.threads_generation(), g, "a new thread");
    // Not attached yet; then the scope gone: the watch ends.
    assert!(!w.apply(Snapshot::default(), 5));
    assert!(!w.gone);
    let gone = Snapshot {
        ours: None,
        scope: Some((true, Vec::new())),
    };
    assert!(!w.apply(gone, 6));
    assert!(w.gone);
}

mod clock;

#[test]
fn a_period_is_learned_where_two_intervals_in_a_row_agree_within_the_rule() {
    let (tid, mut w) = watch_this_thread(u64::MAX);
    let pct = RULES.period_agree_pct;
    let period = |w: &WatchState| w.threads[&tid].period_ns;
    // 1 ms, then 1 ms plus just over the tolerance: no period yet; then the same again.
    let off = 1_000_000 * pct / 100 + 1_000;
    for since in [0, 1_000_000, 2_000_000 + off] {
        w.learn_period(tid, since);
    }
    assert_eq!(period(&w), None);
    w.learn_period(tid, 3_000_000 + 2 * off);
    assert_eq!(period(&w), Some(1_000_000 + off));
    // Within it: learned.
    let (tid, mut w) = watch_this_thread(u64::MAX);
    let near = 1_000_000 * pct / 100 - 1_000;
    for since in [0, 1_000_000, 2_000_000 + near] {
        w.learn_period(tid, since);
    }
    assert_eq!(w.threads[&tid].period_ns, Some(1_000_000 + near));
}
