use super::*;
use rtlab_trace::event::{Kind, Task};

const TID: i64 = 7;

fn task(pid: i64) -> Task {
    Task {
        pid,
        comm: "t".into(),
        prio: 120,
    }
}

fn switch(ts_ns: u64, prev: i64, next: i64, prev_state: &str) -> Event {
    Event {
        ts_ns,
        cpu: 0,
        current_pid: prev,
        kind: Kind::Switch {
            prev: task(prev),
            prev_state: rtlab_trace::event::TaskState::parse(prev_state),
            next: task(next),
        },
    }
}

fn waking(ts_ns: u64) -> Event {
    Event {
        ts_ns,
        cpu: 0,
        current_pid: 0,
        kind: Kind::Waking {
            task: task(TID),
            target_cpu: 0,
        },
    }
}

fn returned_at(ts_ns: u64) -> Event {
    Event {
        ts_ns,
        cpu: 0,
        current_pid: TID,
        kind: Kind::WaitExit { ret: 0, call: 0 },
    }
}

fn sleep_timer(at: u64) -> Expiry {
    Expiry {
        at,
        slack: 0,
        source: DeadlineSource::SleepTimer,
    }
}

/// A wait call through every phase: entered, asleep, its timer, woken, on a CPU, back.
fn one_wait(w: &mut ThreadWait, nr: i32, asked: Option<u64>, t: u64) -> Returned {
    assert!(w.entered(nr, asked, t).is_none());
    assert!(matches!(w.phase, Phase::InWait { .. }));
    assert_eq!(w.switched_out(&switch(t + 10, TID, 0, "S")), Some(true));
    w.sleep_timer(&waking(t + 1_000), sleep_timer(t + 1_000));
    w.woken(&waking(t + 1_005), None);
    assert!(matches!(w.phase, Phase::Woken { at, .. } if at == t + 1_005));
    assert!(w.switched_in(&switch(t + 1_020, 0, TID, "R")).is_empty());
    assert!(matches!(w.phase, Phase::OnCpu { running, .. } if running == t + 1_020));
    let r = w.returned(0, t + 1_030);
    assert_eq!(w.phase, Phase::Running);
    assert!(!w.wakeup_unseen);
    r
}

fn delays(r: Returned) -> Vec<(DelayKind, Delay)> {
    match r {
        Returned::Delays(_, d) => d,
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_wait_calls_deadline_is_named_by_its_source() {
    let cases = [
        (230, Some(1_000_000 + 1_000), DeadlineSource::Sleep),
        (202, None, DeadlineSource::FutexTimeout),
        (232, None, DeadlineSource::PollTimeout),
        (128, None, DeadlineSource::SigwaitTimeout),
        (0, None, DeadlineSource::SleepTimer),
    ];
    for (nr, asked, source) in cases {
        let mut w = ThreadWait::new(TID);
        let d = delays(one_wait(&mut w, nr, asked, 1_000_000));
        let (kind, timer) = d[0];
        assert_eq!((kind, timer.since), (DelayKind::Timer, 1_001_000), "{nr}");
        assert_eq!(timer.source, Some(source), "{nr}");
        assert_eq!(timer.running, Some(1_001_020));
        let (kind, wakeup) = d[1];
        assert_eq!(
            (kind, wakeup.since, wakeup.source),
            (DelayKind::Wakeup, 1_001_005, None)
        );
    }
    for source in DeadlineSource::ALL {
        let name = source.name();
        assert!(!name.is_empty() && !name.contains(char::is_whitespace));
    }
}

#[test]
fn a_file_timers_expiry_is_a_timerfd_deadline_and_starts_its_grid() {
    let mut w = ThreadWait::new(TID);
    w.entered(0, None, 0);
    w.switched_out(&switch(10, TID, 0, "S"));
    let expiry = Expiry {
        at: 1_000_000,
        slack: 0,
        source: DeadlineSource::TimerFd,
    };
    let fired = Fired {
        expiry,
        at_ns: 1_000_002,
        timer: Some(0xabc),
    };
    w.woken(&waking(1_000_004), Some(fired));
    w.switched_in(&switch(1_000_010, 0, TID, "R"));
    let Returned::Delays(ended, d) = w.returned(8, 1_000_020) else {
        panic!()
    };
    assert_eq!(d[0].1.source, Some(DeadlineSource::TimerFd));
    assert_eq!(ended.by_grid.map(|x| x.at), Some(1_000_000));
    // The next wait returns 3.5 periods later: the expiries it took at once, each late
    // to its own time.
    let (grid, taken) = grid_after(None, &ended, Some(1_000_000), 1_000_020);
    assert!(taken.is_empty());
    let later = Ended {
        by_grid: None,
        woken: None,
        ..ended
    };
    let (grid, taken) = grid_after(grid, &later, Some(1_000_000), 4_500_000);
    assert_eq!(taken, vec![2_000_000, 3_000_000, 4_000_000]);
    assert_eq!(grid.map(|g| g.source), Some(DeadlineSource::TimerFd));
    // Woken by something else: the timer drives it no more.
    let woken = Ended {
        woken: Some(5),
        ..later
    };
    assert_eq!(
        grid_after(grid, &woken, Some(1_000_000), 9_000_000),
        (None, vec![])
    );
    // Back 20 s late: at most so many taken in one return.
    let (_, taken) = grid_after(grid, &later, Some(1_000_000), 20_004_500_000);
    assert_eq!(taken.len(), RULES.grid_max_taken);
}

#[test]
fn preempted_outside_a_call_is_a_wakeup_delay_to_its_next_cpu() {
    let mut w = ThreadWait::new(TID);
    w.switched_in(&switch(0, 0, TID, "R"));
    assert_eq!(w.switched_out(&switch(100, TID, 0, "R+")), Some(false));
    assert_eq!(w.phase, Phase::Runnable { since: 100 });
    let d = w.switched_in(&switch(250, 0, TID, "R"));
    assert_eq!(d, vec![(DelayKind::Wakeup, Delay::from(100))]);
    assert_eq!(w.phase, Phase::Running);
}

#[test]
fn a_return_far_from_the_time_asked_is_another_calls_and_measures_nothing() {
    let mut w = ThreadWait::new(TID);
    w.entered(230, Some(10_000_000), 0);
    w.sleep_timer(
        &waking(1),
        sleep_timer(10_000_000 + RULES.asked_off_expiry_ns + 1),
    );
    assert_eq!(w.returned(0, 20_000_000), Returned::Abandoned);
    // A return with no entry seen: ended at its switch-in.
    assert_eq!(w.returned(0, 20_000_001), Returned::Unseen);
}

#[test]
fn a_timed_futex_wait_that_timed_out_ends_at_its_time_though_its_wakeup_was_not_seen() {
    // Its timer's expiry, its wakeup and its switch back in were not recorded: the
    // kernel's -ETIMEDOUT and the timeout the call asked for still measure it.
    let mut w = ThreadWait::new(TID);
    w.entered(202, Some(1_000_000), 0);
    assert_eq!(w.switched_out(&switch(10, TID, 0, "S")), Some(true));
    let d = delays(w.returned(-110, 1_032_000));
    assert_eq!(d.len(), 1, "{d:?}");
    let (kind, timer) = d[0];
    assert_eq!((kind, timer.since), (DelayKind::Timer, 1_000_000));
    assert_eq!(timer.source, Some(DeadlineSource::FutexTimeout));
    // Woken by another thread (0) before its time: no lateness.
    w.entered(202, Some(3_000_000), 2_000_000);
    assert!(delays(w.returned(0, 2_500_000)).is_empty());
    // ... and after it, with no expiry seen: a wake, not its timeout (0, not -ETIMEDOUT).
    w.entered(202, Some(4_000_000), 3_000_000);
    assert!(delays(w.returned(0, 4_100_000)).is_empty());
    // A sleep's completion is 0.
    w.entered(230, Some(6_000_000), 5_000_000);
    let d = delays(w.returned(0, 6_010_000));
    assert_eq!(
        (d[0].1.since, d[0].1.source),
        (6_000_000, Some(DeadlineSource::Sleep))
    );
}

#[test]
fn a_readiness_wait_that_timed_out_ends_at_its_timeout_though_its_timer_was_not_seen() {
    // epoll_wait's or poll's timeout from its entry, sigtimedwait's: where the events of
    // its expiry, wakeup and switch back in are missing (the task running on its CPU
    // then traced by nothing), the call's 0 (-EAGAIN) still says its time ran out.
    for (nr, ret, source) in [
        (232, 0, DeadlineSource::PollTimeout),
        (441, 0, DeadlineSource::PollTimeout),
        (128, -11, DeadlineSource::SigwaitTimeout),
    ] {
        let mut w = ThreadWait::new(TID);
        w.entered(nr, Some(1_000_000), 0);
        assert_eq!(w.switched_out(&switch(10, TID, 0, "S")), Some(true));
        let d = delays(w.returned(ret, 1_025_000));
        assert!(w.wakeup_unseen, "{nr}: it slept, and came back unseen");
        w.wakeup_unseen = false;
        assert_eq!(d.len(), 1, "{nr}: {d:?}");
        assert_eq!(
            (d[0].0, d[0].1.since),
            (DelayKind::Timer, 1_000_000),
            "{nr}"
        );
        assert_eq!(d[0].1.source, Some(source), "{nr}");
        // Something ready (a count), a signal taken: no lateness; it never slept.
        w.entered(nr, Some(3_000_000), 2_000_000);
        assert!(delays(w.returned(1, 2_500_000)).is_empty(), "{nr}");
        assert!(!w.wakeup_unseen, "{nr}");
    }
    // Held 2 ms on its way in (its timeout's timer started late): still late from the
    // time it asked for, not a return far from it.
    let mut w = ThreadWait::new(TID);
    w.entered(232, Some(1_000_000), 0);
    w.switched_out(&switch(2_100_000, TID, 0, "S"));
    w.sleep_timer(&waking(3_000_000), sleep_timer(3_000_000));
    w.woken(&waking(3_001_000), None);
    w.switched_in(&switch(3_002_000, 0, TID, "R"));
    let d = delays(w.returned(0, 3_003_000));
    assert_eq!(
        (d[0].1.since, d[0].1.source),
        (1_000_000, Some(DeadlineSource::PollTimeout))
    );
    // A loss in a readiness wait with a timeout cuts what it waits for first: a wakeup.
    w.entered(232, Some(5_000_000), 4_000_000);
    assert_eq!(w.cut(), [DelayKind::Wakeup]);
    // A file timer that fired within a readiness wait's longer timeout: the timer's
    // expiry is its deadline (the timeout only a bound), not a return far from its time.
    let mut w = ThreadWait::new(TID);
    w.entered(232, Some(100_000_000), 0);
    assert_eq!(w.switched_out(&switch(10, TID, 0, "S")), Some(true));
    let fired = Fired {
        expiry: Expiry {
            at: 1_000_000,
            slack: 0,
            source: DeadlineSource::TimerFd,
        },
        at_ns: 1_001_000,
        timer: Some(7),
    };
    w.woken(&waking(1_002_000), Some(fired));
    w.switched_in(&switch(1_010_000, 0, TID, "R"));
    let d = delays(w.returned(1, 1_020_000));
    assert_eq!(
        (d[0].1.since, d[0].1.source),
        (1_000_000, Some(DeadlineSource::TimerFd))
    );
}

#[test]
fn a_read_after_a_readiness_wait_takes_its_delays_unless_it_slept() {
    let ready = |w: &mut ThreadWait| {
        w.ready = Some(Ready {
            delays: vec![(DelayKind::Timer, Delay::from(5))],
            ended: Ended {
                call: Call {
                    nr: 232,
                    asked: None,
                    entered: 0,
                },
                woken: Some(4),
                by_grid: None,
            },
            returned: returned_at(10),
        })
    };
    let mut w = ThreadWait::new(TID);
    ready(&mut w);
    assert!(w.entered(SYS_READ, None, 20).is_none());
    let (r, took) = w.take_ready().expect("pending");
    assert!(took && r.delays.len() == 1 && w.phase == Phase::Running);
    // A read that slept (another file's): the delays end at the readiness wait's return.
    ready(&mut w);
    w.entered(SYS_READ, None, 20);
    w.woken(&waking(30), None);
    assert!(matches!(w.take_ready(), Some((_, false))));
    // Any other call first: settled at its entry.
    ready(&mut w);
    assert!(w.entered(202, None, 40).is_some());
}

/// A readiness wait entered at `entered`, ended by its timeout `span` later.
fn poll_timeout(w: &mut ThreadWait, entered: u64, span: u64) {
    w.entered(232, None, entered);
    let at = entered + span;
    w.sleep_timer(&waking(at), sleep_timer(at));
    w.woken(&waking(at + 2_000), None);
    assert!(matches!(w.returned(0, at + 5_000), Returned::Delays(..)));
}

#[test]
fn timeouts_of_whole_milliseconds_are_known_as_such_and_finer_ones_are_not() {
    // Python's asyncio: the time left rounded up to whole ms, the kernel's clock read a
    // few microseconds after the entry.
    let mut w = ThreadWait::new(TID);
    let waits = RULES.whole_ms_waits;
    for k in 0..waits {
        assert!(!w.whole_ms());
        poll_timeout(&mut w, k * 3_000_000, 1_000_000 * (1 + k % 2) + 3_000);
    }
    assert!(w.whole_ms());
    // One in ten past the rule's margin still leaves them whole; more does not.
    let off = RULES.whole_ms_within_ns + 1_000;
    poll_timeout(&mut w, 90_000_000, 1_000_000 + off);
    assert!(w.whole_ms());
    poll_timeout(&mut w, 93_000_000, 1_000_000 + off);
    poll_timeout(&mut w, 96_000_000, 1_000_000 + off);
    assert!(!w.whole_ms());
    // A loop whose timeouts are the time left in ns (epoll_pwait2): not whole.
    let mut w = ThreadWait::new(TID);
    for k in 0..2 * waits {
        poll_timeout(
            &mut w,
            k * 1_000_000 + 37_000 * (k % 20),
            963_000 - 37_000 * (k % 20),
        );
    }
    assert!(!w.whole_ms());
}

#[test]
fn a_loss_cuts_every_delay_begun() {
    let mut w = ThreadWait::new(TID);
    w.entered(230, Some(1_000), 0);
    w.sleep_timer(&waking(1_000), sleep_timer(1_000));
    w.lock_since = Some(3);
    let mut cut = w.cut();
    cut.sort();
    assert_eq!(
        cut,
        vec![DelayKind::Timer, DelayKind::Timer, DelayKind::Lock]
    );
    assert_eq!(w.phase, Phase::Running);
    assert!(w.cut().is_empty());
}
