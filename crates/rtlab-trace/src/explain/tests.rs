//! The attribution's tests: trace lines in, causes out.

use super::*;
use crate::event::parse_line;
use rtlab_stats::result::ReasonCode;

mod throttling;

/// The rules rtlab uses (8 ms gap), on a VM or not.
fn rules(virtualized: bool) -> Rules {
    Rules {
        gap_ns: 8_000_000,
        virtualized,
        idle_gap_ns: None,
        tick: None,
        cut: None,
        unread_from: None,
        elsewhere_unknown: None,
    }
}

/// CPU 0 idle; a timer interrupt at 5.000400 wakes the thread (pid 7), which runs at
/// 5.000410.
const TIMER_WAKES_T_ON_IDLE_CPU0: [&str; 4] = [
        "<idle>-0 [000] d.h1. 5.000400: local_timer_entry: vector=236",
        "<idle>-0 [000] d.h3. 5.000401: sched_waking: comm=t pid=7 prio=4 target_cpu=000",
        "<idle>-0 [000] d.h1. 5.000405: local_timer_exit: vector=236",
        "<idle>-0 [000] d..2. 5.000410: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=4",
];

fn swapper0() -> Task {
    Task {
        comm: "swapper/0".into(),
        pid: 0,
        prio: 120,
    }
}

fn swapper1() -> Task {
    Task {
        comm: "swapper/1".into(),
        ..swapper0()
    }
}

fn events(lines: &[&str]) -> Vec<Event> {
    lines.iter().map(|l| parse_line(l).expect(l)).collect()
}

#[test]
fn a_hog_that_preempts_is_named_with_its_share() {
    // Deadline 10.001000; the hog (FIFO 99) runs from 10.000500 to 10.004000 with a timer
    // IRQ in between; the thread is woken at 10.001002 but runs at 10.004010.
    let ev = events(&[
        "rtlab-hog-42 [000] d..2. 10.000500: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=rtlab-hog next_pid=42 next_prio=0",
        "rtlab-hog-42 [000] d.h1. 10.001000: local_timer_entry: vector=236",
        "rtlab-hog-42 [000] d.h2. 10.001001: hrtimer_expire_entry: hrtimer=0000 function=hrtimer_wakeup now=1",
        "rtlab-hog-42 [000] d.h3. 10.001002: sched_waking: comm=rtlab-wakeup0 pid=77 prio=4 target_cpu=000",
        "rtlab-hog-42 [000] d.h1. 10.001010: local_timer_exit: vector=236",
        "rtlab-hog-42 [000] d..2. 10.004000: sched_switch: prev_comm=rtlab-hog prev_pid=42 prev_prio=0 prev_state=S ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
    ]);
    let late = Late {
        tid: 77,
        deadline_ns: 10_001_000_000,
        woke_ns: 10_004_010_000,
        ..Late::default()
    };
    let rules = rules(true);
    let causes = attribute(&ev, None, &late, &rules);
    assert_eq!(causes[0].kind, CauseKind::Preemption);
    assert_eq!(causes[0].task.as_deref(), Some("rtlab-hog"));
    assert_eq!(causes[0].duration_ns, 2_990_000);
    let back = causes
        .iter()
        .find(|c| c.kind == CauseKind::Syscall)
        .unwrap();
    assert_eq!(back.duration_ns, 10_000);
    let irq = causes.iter().find(|c| c.kind == CauseKind::Irq).unwrap();
    assert_eq!(
        (irq.duration_ns, irq.detail.as_deref()),
        (10_000, Some("local_timer"))
    );
    let total: u64 = causes.iter().map(|c| c.duration_ns).sum();
    assert_eq!(
        total, 3_010_000,
        "every ns of the lateness is attributed once"
    );
    let line = describe("thread0", 3_010_000, 12_400_000_000, &causes);
    assert!(
        line.starts_with(
            "thread0 late by 3.01 ms at 12.4 s: 2.99 ms preempted by rtlab-hog (pid 42, RT 99)"
        ),
        "{line}"
    );
}

/// A spinner (pid 77) on CPU 0 from 10.000100; the gap is 10.000999-10.004002.
fn spin_gap(lines: &[&str]) -> Vec<Cause> {
    let mut all = vec![
        "rtlab-noise0-77 [000] d..2. 10.000100: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=rtlab-noise0 next_pid=77 next_prio=98",
    ];
    all.extend_from_slice(lines);
    let late = Late {
        tid: 77,
        deadline_ns: 10_000_999_000,
        woke_ns: 10_004_002_000,
        wait: Wait::Spin,
        ..Late::default()
    };
    attribute(&events(&all), None, &late, &rules(true))
}

#[test]
fn a_spinners_gap_goes_to_the_task_that_took_its_cpu() {
    let causes = spin_gap(&[
        "rtlab-hog-42 [000] d..2. 10.001000: sched_switch: prev_comm=rtlab-noise0 prev_pid=77 prev_prio=98 prev_state=R ==> next_comm=rtlab-hog next_pid=42 next_prio=0",
        "rtlab-noise0-77 [000] d..2. 10.004000: sched_switch: prev_comm=rtlab-hog prev_pid=42 prev_prio=0 prev_state=S ==> next_comm=rtlab-noise0 next_pid=77 next_prio=98",
    ]);
    assert_eq!(causes[0].kind, CauseKind::Preemption, "{causes:?}");
    assert_eq!(causes[0].task.as_deref(), Some("rtlab-hog"));
    assert_eq!(causes[0].duration_ns, 3_000_000);
    assert_eq!(
        causes[0].reason, None,
        "no timer-late or IPI wording: {causes:?}"
    );
    let line = describe("cpu0", 3_003_000, 1_000_000_000, &causes);
    assert!(
        line.contains("3.00 ms preempted by rtlab-hog (pid 42, RT 99)"),
        "{line}"
    );
    let own: u64 = causes
        .iter()
        .filter(|c| c.reason == Some(ReasonCode::ThreadItself))
        .map(|c| c.duration_ns)
        .sum();
    assert_eq!(own, 3_000, "the edges are the thread's: {causes:?}");
}

#[test]
fn a_spinners_gap_in_an_interrupt_or_in_silence_is_named_so() {
    let causes = spin_gap(&[
        "rtlab-noise0-77 [000] d.h1. 10.001000: irq_handler_entry: irq=11 name=virtio0",
        "rtlab-noise0-77 [000] d.h1. 10.004000: irq_handler_exit: irq=11 ret=handled",
    ]);
    assert_eq!(causes[0].kind, CauseKind::Irq, "{causes:?}");
    assert_eq!(causes[0].duration_ns, 3_000_000);
    // A tick, then silence to the end: the rest of the interrupt, whose end the eBPF
    // source does not trace.
    let causes = spin_gap(&[
        "rtlab-noise0-77 [000] d.h1. 10.003980: hrtimer_expire_entry: hrtimer=0000 function=tick_nohz_handler now=1",
    ]);
    let irq = causes.iter().find(|c| c.kind == CauseKind::Irq).unwrap();
    assert_eq!(
        (irq.duration_ns, irq.detail.as_deref()),
        (22_000, Some("local_timer"))
    );
    // The spinner switched out runnable, the CPU idle: held back by the scheduler.
    let causes = spin_gap(&[
        "<idle>-0 [000] d..2. 10.001000: sched_switch: prev_comm=rtlab-noise0 prev_pid=77 prev_prio=98 prev_state=R ==> next_comm=swapper/0 next_pid=0 next_prio=120",
        "rtlab-noise0-77 [000] d..2. 10.004000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=rtlab-noise0 next_pid=77 next_prio=98",
    ]);
    assert_eq!(
        (causes[0].kind, causes[0].reason, causes[0].duration_ns),
        (
            CauseKind::Preemption,
            Some(ReasonCode::Throttled),
            3_000_000
        ),
        "{causes:?}"
    );
    assert!(describe("cpu0", 3_003_000, 0, &causes).contains("3.00 ms throttled"));
    // Nothing traced at all while it was current: not its own 3 ms.
    let causes = spin_gap(&[]);
    assert_eq!(causes[0].kind, CauseKind::HypervisorGap, "{causes:?}");
    assert_eq!(causes[0].reason, Some(ReasonCode::SilentWhileSpinning));
    assert_eq!(causes[0].duration_ns, 3_003_000);
}

#[test]
fn a_switch_not_seen_does_not_give_the_wait_to_the_task_switched_away_from_before() {
    // Regression (soak, 2 of 20 runs): the switch from a SCHED_OTHER thread to the hog
    // was not in the window, so the hog's run after the wakeup went to that thread as a
    // non-preemptible section. The switch to the woken thread names the hog as the task
    // it leaves: that is who ran.
    let ev = events(&[
        "worker-75 [000] d..2. 10.000100: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=worker next_pid=75 next_prio=120",
        "worker-75 [000] d.h2. 10.000400: hrtimer_expire_entry: hrtimer=0000 function=hrtimer_wakeup now=1",
        "worker-75 [000] d.h3. 10.000401: sched_waking: comm=rtlab-hog pid=42 prio=0 target_cpu=000",
        "rtlab-hog-42 [000] d.h1. 10.001000: local_timer_entry: vector=236",
        "rtlab-hog-42 [000] d.h2. 10.001001: hrtimer_expire_entry: hrtimer=0000 function=hrtimer_wakeup now=1",
        "rtlab-hog-42 [000] d.h3. 10.001002: sched_waking: comm=rtlab-wakeup0 pid=77 prio=4 target_cpu=000",
        "rtlab-hog-42 [000] d.h1. 10.001010: local_timer_exit: vector=236",
        "rtlab-hog-42 [000] d..2. 10.004000: sched_switch: prev_comm=rtlab-hog prev_pid=42 prev_prio=0 prev_state=S ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
    ]);
    let late = Late {
        tid: 77,
        deadline_ns: 10_001_000_000,
        woke_ns: 10_004_010_000,
        ..Late::default()
    };
    let causes = attribute(&ev, None, &late, &rules(true));
    assert_eq!(causes[0].kind, CauseKind::Preemption);
    assert_eq!(causes[0].task.as_deref(), Some("rtlab-hog"), "{causes:?}");
    assert_eq!(causes[0].duration_ns, 2_990_000);
    assert!(
        causes
            .iter()
            .all(|c| c.task.as_deref() != Some("worker") || c.duration_ns < 100_000),
        "{causes:?}"
    );
}

#[test]
fn a_sleep_timers_expiry_stands_for_the_wakeup_and_ticks_are_not_interrupt_time() {
    // The eBPF source: no local_timer entry/exit; the timer's expiry names the task it
    // wakes (there may be no sched_waking at all), and a tick expires 1 ms later.
    let expiry = |ts_ns: u64, function: &str, task: Option<Task>| Event {
        cpu: 0,
        ts_ns,
        current_pid: -1,
        kind: Kind::HrtimerEntry {
            function: function.into(),
            task,
            expires_ns: None,
            slack_ns: 0,
            timer: None,
        },
    };
    let thread = Task {
        comm: "rtlab-wakeup0".into(),
        pid: 77,
        prio: 4,
    };
    let mut ev = events(&[
        "rtlab-hog-42 [000] d..2. 10.000500: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=rtlab-hog next_pid=42 next_prio=0",
        "rtlab-hog-42 [000] d..2. 10.004000: sched_switch: prev_comm=rtlab-hog prev_pid=42 prev_prio=0 prev_state=S ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
    ]);
    ev.insert(
        1,
        expiry(10_001_001_000, "hrtimer_wakeup", Some(thread.clone())),
    );
    ev.insert(2, expiry(10_002_000_000, "tick_nohz_handler", None));
    let late = Late {
        tid: 77,
        deadline_ns: 10_001_000_000,
        woke_ns: 10_004_010_000,
        ..Late::default()
    };
    let causes = attribute(&ev, None, &late, &rules(true));
    let woken_then = causes
        .iter()
        .find(|c| c.kind == CauseKind::Preemption && c.detail.is_none())
        .expect("preempted after the wakeup");
    assert_eq!(woken_then.task.as_deref(), Some("rtlab-hog"));
    assert_eq!(woken_then.duration_ns, 2_999_000, "{causes:?}");
    assert!(
        causes.iter().all(|c| c.kind != CauseKind::Irq),
        "{causes:?}"
    );
    assert_eq!(causes.iter().map(|c| c.duration_ns).sum::<u64>(), 3_010_000);

    // With sched_waking recorded too, expiry -> waking is the timer interrupt.
    let waking = Event {
        cpu: 0,
        ts_ns: 10_001_003_000,
        current_pid: 42,
        kind: Kind::Waking {
            task: thread,
            target_cpu: 0,
        },
    };
    ev.insert(2, waking);
    let causes = attribute(&ev, None, &late, &rules(true));
    let irq = causes.iter().find(|c| c.kind == CauseKind::Irq).unwrap();
    assert_eq!(
        (irq.duration_ns, irq.detail.as_deref()),
        (2_000, Some("local_timer"))
    );
    assert_eq!(causes.iter().map(|c| c.duration_ns).sum::<u64>(), 3_010_000);

    // An idle CPU: the timer fires 400 us late (the host), then 12 us pass before the
    // switch; without the interrupt's end, that is the interrupt's rest and idle exit.
    let mut ev = events(&[
        "t-7 [000] d..2. 4.999000: sched_switch: prev_comm=t prev_pid=7 prev_prio=4 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
        "<idle>-0 [000] d..2. 5.000412: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=4",
    ]);
    let t = Task {
        comm: "t".into(),
        pid: 7,
        prio: 4,
    };
    ev.insert(1, expiry(5_000_400_000, "hrtimer_wakeup", Some(t)));
    let late = Late {
        tid: 7,
        deadline_ns: 5_000_000_000,
        woke_ns: 5_000_412_000,
        ..Late::default()
    };
    let causes = attribute(&ev, None, &late, &rules(true));
    assert_eq!(causes[0].kind, CauseKind::HypervisorGap);
    assert_eq!(causes[0].duration_ns, 400_000);
    let exit = causes
        .iter()
        .find(|c| c.kind == CauseKind::IdleExit)
        .unwrap();
    assert_eq!(exit.duration_ns, 12_000);
    assert!(exit
        .detail
        .as_deref()
        .unwrap()
        .contains("rest of the timer interrupt"));
}

#[test]
fn an_earlier_periods_wakeup_does_not_make_a_late_timer_look_woken() {
    // The history starts before the deadline: the previous period's expiry, run and sleep;
    // then a SCHED_OTHER task runs and this period's timer fires 1.35 ms late.
    let thread = Task {
        comm: "rtlab-wakeup0".into(),
        pid: 77,
        prio: 4,
    };
    let expiry = |ts_ns: u64| Event {
        cpu: 0,
        ts_ns,
        current_pid: -1,
        kind: Kind::HrtimerEntry {
            function: "hrtimer_wakeup".into(),
            task: Some(thread.clone()),
            expires_ns: None,
            slack_ns: 0,
            timer: None,
        },
    };
    let mut ev = events(&[
        "load-5 [000] d..2. 10.015004: sched_switch: prev_comm=load prev_pid=5 prev_prio=120 prev_state=R ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
        "rtlab-wakeup0-77 [000] d..2. 10.015006: sched_switch: prev_comm=rtlab-wakeup0 prev_pid=77 prev_prio=4 prev_state=S ==> next_comm=load next_pid=5 next_prio=120",
        "load-5 [000] d..2. 10.017355: sched_switch: prev_comm=load prev_pid=5 prev_prio=120 prev_state=R ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
    ]);
    ev.insert(0, expiry(10_015_001_000));
    ev.insert(3, expiry(10_017_351_000));
    let late = Late {
        tid: 77,
        deadline_ns: 10_016_000_000,
        woke_ns: 10_017_357_000,
        ..Late::default()
    };
    for virtualized in [true, false] {
        let causes = attribute(&ev, None, &late, &rules(virtualized));
        assert_eq!(causes[0].duration_ns, 1_351_000, "{causes:?}");
        assert!(
            causes[0]
                .detail
                .as_deref()
                .unwrap()
                .starts_with("before the wakeup"),
            "{causes:?}"
        );
        let line = describe("thread0", 1_357_000, 10_000_000_000, &causes);
        assert!(
            line.contains("1.35 ms timer interrupt late while load (pid 5, time-sharing)"),
            "{line}"
        );
    }
}

#[test]
fn a_round_trip_follows_the_peer_to_its_cpu() {
    // CPU 0: the thread (pid 7) sends at 20.000000 and sleeps until the reply. CPU 1: the
    // peer (pid 5, asleep) is woken by the send at 20.000006 but a FIFO 99 hog (pid 6)
    // holds CPU 1 until 20.001000; the peer answers in 8 us.
    let ev = events(&[
        "t-7 [000] d..2. 20.000005: sched_switch: prev_comm=t prev_pid=7 prev_prio=9 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
        "peer-5 [001] d..2. 20.001008: sched_waking: comm=t pid=7 prio=9 target_cpu=000",
        "<idle>-0 [000] d..2. 20.001020: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=9",
    ]);
    let peer_cpu = events(&[
        "peer-5 [001] d..2. 19.999000: sched_switch: prev_comm=peer prev_pid=5 prev_prio=11 prev_state=S ==> next_comm=hog next_pid=6 next_prio=0",
        "t-7 [000] d..2. 20.000006: sched_waking: comm=peer pid=5 prio=11 target_cpu=001",
        "hog-6 [001] d..2. 20.001000: sched_switch: prev_comm=hog prev_pid=6 prev_prio=0 prev_state=S ==> next_comm=peer next_pid=5 next_prio=11",
        "peer-5 [001] d..2. 20.001008: sched_waking: comm=t pid=7 prio=9 target_cpu=000",
        "peer-5 [001] d..2. 20.001010: sched_switch: prev_comm=peer prev_pid=5 prev_prio=11 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120",
    ]);
    let peer_task = Task {
        comm: "peer".into(),
        pid: 5,
        prio: 11,
    };
    let me = Task {
        comm: "t".into(),
        pid: 7,
        prio: 9,
    };
    let mut late = Late {
        tid: 7,
        deadline_ns: 20_000_000_000,
        woke_ns: 20_001_025_000,
        wait: Wait::Reply,
        waker: Some(peer_task),
        cpu: 0,
        peer: Some(Peer {
            cpu: 1,
            events: peer_cpu,
            base: None,
            tick: None,
        }),
    };
    let causes = attribute(&ev, Some(&me), &late, &rules(true));
    assert_eq!(causes[0].kind, CauseKind::Preemption, "{causes:?}");
    assert_eq!(causes[0].task.as_deref(), Some("hog"));
    assert_eq!(causes[0].duration_ns, 994_000);
    let answered = causes
        .iter()
        .find(|c| c.kind == CauseKind::Blocking && c.detail.as_deref().unwrap().contains("ran"))
        .unwrap();
    assert_eq!(
        (answered.task.as_deref(), answered.duration_ns),
        (Some("peer"), 8_000)
    );
    let asleep = causes
        .iter()
        .find(|c| c.detail.as_deref().unwrap_or("").contains("asleep"))
        .unwrap();
    assert_eq!(asleep.duration_ns, 1_000);
    assert_eq!(causes.iter().map(|c| c.duration_ns).sum::<u64>(), 1_025_000);
    let line = describe("rtt", 1_025_000, 0, &causes);
    assert!(
        line.contains("994 us preempted by hog (pid 6, RT 99)"),
        "{line}"
    );

    // With a tick due every 400 us from 0, CPU 1 (busy with the hog from 19.999000 to
    // 20.001000, nothing traced between) missed its ticks from 19.999200 on: that stretch
    // of the hog is the vCPU not running.
    let mut gridded = late.clone();
    gridded.peer.as_mut().unwrap().tick = Some(Tick {
        period_ns: 400_000,
        phase_ns: 0,
    });
    let causes = attribute(&ev, Some(&me), &gridded, &rules(true));
    assert_eq!(causes[0].kind, CauseKind::HypervisorGap, "{causes:?}");
    // The hog's 994 us and the 1 us the peer slept before its wakeup, on that busy CPU.
    assert_eq!(causes[0].duration_ns, 995_000);
    assert!(causes[0]
        .detail
        .as_deref()
        .unwrap()
        .starts_with("no tick for 1.80 ms on a busy CPU (CPU 1, the peer's)"));
    assert_eq!(causes.iter().map(|c| c.duration_ns).sum::<u64>(), 1_025_000);

    // A loss on CPU 0 after the peer's wakeup: from there its state is not known.
    let mut lossy = late.clone();
    let peer = lossy.peer.as_mut().unwrap();
    peer.events.insert(
        2,
        Event {
            cpu: 0,
            ts_ns: 20_000_500_000,
            current_pid: -1,
            kind: Kind::Lost(3),
        },
    );
    let causes = attribute(&ev, Some(&me), &lossy, &rules(true));
    let unknown = causes
        .iter()
        .find(|c| c.kind == CauseKind::Unexplained)
        .unwrap();
    assert_eq!(unknown.duration_ns, 500_000);
    assert!(unknown.detail.as_deref().unwrap().contains("not known"));

    // The send wakes the peer (traced at 20.000006 on CPU 0) while the peer is still
    // getting off CPU 1, which is traced after it (20.000008, asleep): it was runnable
    // from then on, so the hog kept it waiting, it did not sleep.
    let mut racing = late.clone();
    let peer = racing.peer.as_mut().unwrap();
    peer.events.remove(0);
    peer.base = racing.waker.clone();
    peer.events.insert(
        1,
        events(&["peer-5 [001] d..2. 20.000008: sched_switch: prev_comm=peer prev_pid=5 prev_prio=11 prev_state=S ==> next_comm=hog next_pid=6 next_prio=0"]).remove(0),
    );
    let causes = attribute(&ev, Some(&me), &racing, &rules(true));
    assert_eq!(causes[0].task.as_deref(), Some("hog"), "{causes:?}");
    assert_eq!(causes[0].duration_ns, 992_000);
    assert!(
        !causes
            .iter()
            .any(|c| c.detail.as_deref().unwrap_or("").contains("asleep")),
        "{causes:?}"
    );

    // Without the peer's CPU, the same wait is the reply, not followed.
    late.peer = None;
    let causes = attribute(&ev, Some(&me), &late, &rules(true));
    assert_eq!(causes[0].kind, CauseKind::Blocking);
    assert!(causes[0]
        .detail
        .as_deref()
        .unwrap()
        .starts_with("waiting for the peer's reply"));

    // CPU 1 idle instead of the hog: 992 us to leave idle is the way out of idle, or,
    // where the guest's idle states take microseconds, the host not running that vCPU.
    let mut idle = racing.clone();
    let peer = idle.peer.as_mut().unwrap();
    for e in peer.events.iter_mut() {
        if let Kind::Switch { prev, next, .. } = &mut e.kind {
            for t in [prev, next] {
                if t.pid == 6 {
                    *t = swapper1();
                }
            }
        }
    }
    let causes = attribute(&ev, Some(&me), &idle, &rules(true));
    assert_eq!(causes[0].kind, CauseKind::IdleExit, "{causes:?}");
    assert_eq!(causes[0].duration_ns, 992_000);
    let hlt_only = Rules {
        idle_gap_ns: Some(500_000),
        ..rules(true)
    };
    let causes = attribute(&ev, Some(&me), &idle, &hlt_only);
    assert_eq!(causes[0].kind, CauseKind::HypervisorGap, "{causes:?}");
    assert_eq!(causes[0].duration_ns, 992_000);
    assert!(causes[0]
        .detail
        .as_deref()
        .unwrap()
        .starts_with("CPU 1 silent for 992 us leaving idle to run peer"));
}

#[test]
fn a_silent_interrupt_past_the_gap_says_it_was_silent() {
    // A call_function_single interrupt from 5.000100 to 5.012100 with no event inside:
    // still the interrupt, but said to be silent (its handler or the host).
    let mut lines = vec![
        "<idle>-0 [000] d.h1. 4.988300: call_function_single_entry: vector=251",
        "<idle>-0 [000] d.h1. 5.000300: call_function_single_exit: vector=251",
    ];
    lines.extend(TIMER_WAKES_T_ON_IDLE_CPU0);
    let ev = events(&lines);
    let base = swapper0();
    let late = Late {
        tid: 7,
        deadline_ns: 4_988_200_000,
        woke_ns: 5_000_412_000,
        ..Late::default()
    };
    let causes = attribute(&ev, Some(&base), &late, &rules(true));
    assert_eq!(causes[0].kind, CauseKind::Irq, "{causes:?}");
    assert_eq!(causes[0].duration_ns, 12_000_000);
    // The interrupt by its name, the silence in it as the cause's stall.
    assert_eq!(causes[0].detail.as_deref(), Some("call_function_single"));
    assert!(
        causes[0].stall_ns.is_some_and(|s| s >= 11_000_000),
        "{causes:?}"
    );
    // Under the gap, the interrupt is named alone.
    let causes = attribute(&ev, Some(&base), &late, &rules(false));
    assert_eq!(causes[0].kind, CauseKind::Irq);
    let short = Rules {
        gap_ns: 20_000_000,
        virtualized: true,
        idle_gap_ns: None,
        tick: None,
        cut: None,
        unread_from: None,
        elsewhere_unknown: None,
    };
    let causes = attribute(&ev, Some(&base), &late, &short);
    assert_eq!(causes[0].detail.as_deref(), Some("call_function_single"));
    assert_eq!(causes[0].stall_ns, None);
}

#[test]
fn the_thread_itself_silent_for_long_is_a_gap_past_it_and_noted_below() {
    // The thread runs its round trip from 5.000000; its CPU says nothing until 5.009010.
    let ev = events(&[
        "<idle>-0 [000] d..2. 5.000000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=9",
        "t-7 [000] d..2. 5.009010: sched_waking: comm=peer pid=5 prio=9 target_cpu=001",
    ]);
    let late = Late {
        tid: 7,
        deadline_ns: 5_000_010_000,
        woke_ns: 5_009_020_000,
        wait: Wait::Reply,
        ..Late::default()
    };
    let causes = attribute(&ev, Some(&swapper0()), &late, &rules(true));
    assert_eq!(causes[0].kind, CauseKind::HypervisorGap, "{causes:?}");
    assert_eq!(causes[0].duration_ns, 9_000_000);
    assert!(causes[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("no event for 9.0"));
    // Under the gap it stays the thread's own time, with the silence noted.
    let short = Rules {
        gap_ns: 20_000_000,
        virtualized: true,
        idle_gap_ns: None,
        tick: None,
        cut: None,
        unread_from: None,
        elsewhere_unknown: None,
    };
    let causes = attribute(&ev, Some(&swapper0()), &late, &short);
    assert_eq!(causes[0].kind, CauseKind::Syscall, "{causes:?}");
    assert_eq!(
        causes[0].detail.as_deref(),
        Some("the thread itself ran: its send and receive calls")
    );
    assert!(
        causes[0].stall_ns.is_some_and(|s| s >= 8_900_000),
        "{causes:?}"
    );
}

#[test]
fn the_ticks_grid_is_found_from_the_ticks_seen() {
    // HZ=250, ticks a few microseconds after 2 us past each 4 ms, skipping one (idle),
    // and one came late (the host).
    let cpu0: Vec<u64> = [0u64, 1, 2, 3, 5, 6]
        .iter()
        .map(|k| 1_000_000_000 + k * 4_000_000 + 2_000 + k % 3 * 1_000)
        .chain([1_028_900_000])
        .collect();
    let tick = tick_grid(&cpu0).unwrap();
    assert_eq!(tick.period_ns, 4_000_000);
    assert!((2_000..=4_000).contains(&tick.phase_ns), "{tick:?}");
    assert_eq!(
        tick.next_after(1_000_004_000),
        1_004_000_000 + tick.phase_ns
    );
    // With skew_tick=1 another CPU's ticks are 2 ms off these: its own grid.
    let cpu1: Vec<u64> = (0u64..5)
        .map(|k| 1_002_000_000 + k * 4_000_000 + 3_500)
        .collect();
    assert_eq!(tick_grid(&cpu1).unwrap().phase_ns, 2_003_500);
    // Too few to tell.
    assert_eq!(tick_grid(&[1_000_000_000, 1_004_000_000]), None);
}

#[test]
fn a_busy_cpu_that_misses_its_tick_did_not_run() {
    // The thread runs its round trip from 5.000100; it takes the tick at 5.004002, not the
    // one due at 5.008002: the next event is at 5.010500, the late tick.
    let ev = events(&[
        "<idle>-0 [000] d..2. 5.000100: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=9",
        "t-7 [000] d.h1. 5.004002: hrtimer_expire_entry: hrtimer=000000001 function=tick_nohz_handler now=5004002000",
        "t-7 [000] d.h1. 5.010500: hrtimer_expire_entry: hrtimer=000000001 function=tick_nohz_handler now=5010500000",
        "t-7 [000] d..2. 5.010550: sched_waking: comm=peer pid=5 prio=9 target_cpu=001",
    ]);
    let late = Late {
        tid: 7,
        deadline_ns: 5_000_110_000,
        woke_ns: 5_010_600_000,
        wait: Wait::Reply,
        ..Late::default()
    };
    let gridded = Rules {
        tick: Some(Tick {
            period_ns: 4_000_000,
            phase_ns: 2_000,
        }),
        ..rules(true)
    };
    let causes = attribute(&ev, Some(&swapper0()), &late, &gridded);
    let gap = causes
        .iter()
        .find(|c| c.kind == CauseKind::HypervisorGap)
        .unwrap_or_else(|| panic!("{causes:?}"));
    assert_eq!(gap.duration_ns, 2_498_000);
    assert!(
        gap.detail
            .as_deref()
            .unwrap()
            .starts_with("no tick for 2.50 ms on a busy CPU"),
        "{gap:?}"
    );
    assert_eq!(
        causes.iter().map(|c| c.duration_ns).sum::<u64>(),
        10_490_000
    );
    // A tick a hair before its point of the grid is that point's: none missed after it.
    let mut early = ev.clone();
    early[1].ts_ns = 5_003_999_800;
    early[2].ts_ns = 5_007_999_900;
    early[3].ts_ns = 5_008_000_000;
    let late_early = Late {
        woke_ns: 5_008_100_000,
        ..late.clone()
    };
    let causes = attribute(&early, Some(&swapper0()), &late_early, &gridded);
    assert!(
        causes.iter().all(|c| c.kind != CauseKind::HypervisorGap),
        "{causes:?}"
    );

    // Without the grid, the same silence is the thread's own.
    let causes = attribute(&ev, Some(&swapper0()), &late, &rules(true));
    assert!(
        causes.iter().all(|c| c.kind != CauseKind::HypervisorGap),
        "{causes:?}"
    );
    // An idle CPU takes no tick: no gap.
    let idle = events(&[
        "<idle>-0 [000] d.h1. 5.004002: hrtimer_expire_entry: hrtimer=000000001 function=tick_nohz_handler now=5004002000",
        "<idle>-0 [000] d..2. 5.010550: sched_waking: comm=peer pid=5 prio=9 target_cpu=001",
    ]);
    let causes = attribute(&idle, Some(&swapper0()), &late, &gridded);
    assert!(
        !causes
            .iter()
            .any(|c| c.detail.as_deref().unwrap_or("").contains("no tick")),
        "{causes:?}"
    );
}

#[test]
fn a_thread_asleep_again_after_its_wakeup_waits_for_something_else_not_the_host() {
    // Its timer wakes it at 5.0004 s, it runs and goes to sleep again at 5.00042 (a Java
    // thread at its JVM's safepoint barrier), its CPU idles until the VM thread on CPU 1
    // wakes it at 5.04 s. The idle CPU is the wait, not a late timer or a stopped vCPU.
    let mut lines = vec!["<idle>-0 [000] d..1. 5.000000: cpu_idle: state=1 cpu_id=0"];
    lines.extend(TIMER_WAKES_T_ON_IDLE_CPU0);
    lines.extend([
        "t-7 [000] d..2. 5.000420: sched_switch: prev_comm=t prev_pid=7 prev_prio=4 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
        "<idle>-0 [000] d..1. 5.000421: cpu_idle: state=1 cpu_id=0",
        "vm-9 [001] d..2. 5.040000: sched_waking: comm=t pid=7 prio=4 target_cpu=000",
        "<idle>-0 [000] d..2. 5.040010: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=4",
    ]);
    let ev = events(&lines);
    let late = Late {
        tid: 7,
        deadline_ns: 5_000_400_000,
        woke_ns: 5_040_012_000,
        ..Late::default()
    };
    for virtualized in [true, false] {
        let causes = attribute(&ev, Some(&swapper0()), &late, &rules(virtualized));
        assert_eq!(causes[0].kind, CauseKind::Blocking, "{causes:?}");
        assert_eq!(
            causes[0].reason,
            Some(ReasonCode::AsleepAgain),
            "{causes:?}"
        );
        assert_eq!(causes[0].duration_ns, 39_580_000, "{causes:?}");
        let gaps: u64 = causes
            .iter()
            .filter(|c| c.kind == CauseKind::HypervisorGap)
            .map(|c| c.duration_ns)
            .sum();
        assert!(gaps <= 10_000, "{causes:?}");
    }
}

#[test]
fn an_idle_cpu_woken_late_is_a_hypervisor_gap_on_a_vm() {
    let mut lines = vec!["<idle>-0 [000] d..1. 5.000000: cpu_idle: state=1 cpu_id=0"];
    lines.extend(TIMER_WAKES_T_ON_IDLE_CPU0);
    let ev = events(&lines);
    let base = swapper0();
    let late = Late {
        tid: 7,
        deadline_ns: 5_000_050_000,
        woke_ns: 5_000_412_000,
        ..Late::default()
    };
    let causes = attribute(&ev, Some(&base), &late, &rules(true));
    assert_eq!(causes[0].kind, CauseKind::HypervisorGap);
    assert_eq!(causes[0].duration_ns, 350_000);
    // After the interrupt, still idle until the switch: the way out of idle.
    let leaving = causes
        .iter()
        .find(|c| c.kind == CauseKind::IdleExit)
        .unwrap();
    assert_eq!(leaving.duration_ns, 5_000);
    assert!(leaving
        .detail
        .as_deref()
        .unwrap()
        .contains("way out of idle"));
    let on_metal = attribute(&ev, Some(&base), &late, &rules(false));
    assert_eq!(on_metal[0].kind, CauseKind::IdleExit);

    // Silent for 10 ms after the wakeup on an idle vCPU: that much is the host's.
    let mut slow = ev.clone();
    slow.last_mut().unwrap().ts_ns = 5_010_405_000;
    let late = Late {
        woke_ns: 5_010_407_000,
        ..late
    };
    let causes = attribute(&slow, Some(&base), &late, &rules(true));
    assert_eq!(causes[0].kind, CauseKind::HypervisorGap);
    assert_eq!(causes[0].duration_ns, 10_000_000);
    assert!(causes[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("leaving idle"));

    // 1 ms out of idle, where the guest's idle states take microseconds: the host's too.
    let mut slowish = ev.clone();
    slowish.last_mut().unwrap().ts_ns = 5_001_405_000;
    let late = Late {
        woke_ns: 5_001_407_000,
        ..late
    };
    let causes = attribute(&slowish, Some(&base), &late, &rules(true));
    assert_eq!(causes[0].kind, CauseKind::IdleExit, "{causes:?}");
    let hlt_only = Rules {
        idle_gap_ns: Some(500_000),
        ..rules(true)
    };
    let causes = attribute(&slowish, Some(&base), &late, &hlt_only);
    assert_eq!(causes[0].kind, CauseKind::HypervisorGap, "{causes:?}");
    assert_eq!(causes[0].duration_ns, 1_000_000);
}

#[test]
fn a_reply_held_by_a_starved_napi_thread_is_the_network_stacks_inversion() {
    // One CPU. The sender (pid 7, FIFO 80 = prio 19) sends at 30.000000 and blocks for the
    // reply; the hog (pid 6, FIFO 50 = prio 49) runs 4 ms; the napi thread (pid 9,
    // SCHED_OTHER) that has the reply runs only then, and wakes the sender.
    let ev = events(&[
        "snd-7 [000] d..2. 30.000010: sched_switch: prev_comm=snd prev_pid=7 prev_prio=19 prev_state=S ==> next_comm=rtlab-hog next_pid=6 next_prio=49",
        "rtlab-hog-6 [000] d..2. 30.004010: sched_switch: prev_comm=rtlab-hog prev_pid=6 prev_prio=49 prev_state=S ==> next_comm=napi/rtl1a-258 next_pid=9 next_prio=120",
        "napi/rtl1a-258-9 [000] d..2. 30.004030: sched_waking: comm=snd pid=7 prio=19 target_cpu=000",
        "napi/rtl1a-258-9 [000] d..2. 30.004032: sched_switch: prev_comm=napi/rtl1a-258 prev_pid=9 prev_prio=120 prev_state=R+ ==> next_comm=snd next_pid=7 next_prio=19",
    ]);
    let napi = Task {
        comm: "napi/rtl1a-258".into(),
        pid: 9,
        prio: 120,
    };
    let late = Late {
        tid: 7,
        deadline_ns: 30_000_000_000,
        woke_ns: 30_004_040_000,
        wait: Wait::Reply,
        waker: Some(napi),
        cpu: 0,
        peer: None,
    };
    let causes = attribute(&ev, None, &late, &rules(false));
    let hog = causes
        .iter()
        .find(|c| c.task.as_deref() == Some("rtlab-hog"));
    let hog = hog.unwrap_or_else(|| panic!("{causes:?}"));
    assert_eq!(
        (hog.kind, hog.reason, hog.duration_ns),
        (
            CauseKind::Preemption,
            Some(ReasonCode::NetStackInversion),
            4_000_000
        )
    );
    let line = describe("pingpong/rtt", 4_040_000, 0, &causes);
    assert!(line.contains("4.00 ms preempted by rtlab-hog (pid 6, RT 50) while the packet thread with the reply waited: priority inversion in the network stack"), "{line}");
    // Waiting for a peer that is an ordinary process is no such inversion.
    let plain = Late {
        waker: Some(Task {
            comm: "peer".into(),
            pid: 9,
            prio: 120,
        }),
        ..late.clone()
    };
    let causes = attribute(&ev, None, &plain, &rules(false));
    assert!(causes
        .iter()
        .all(|c| c.reason != Some(ReasonCode::NetStackInversion)));
    // Nor is a napi thread raised above the task (FIFO 51 = prio 48): it would have
    // preempted the task, so the task ran while the reply was not there yet.
    let raised = Late {
        waker: Some(Task {
            comm: "napi/rtl1a-258".into(),
            pid: 9,
            prio: 48,
        }),
        ..late
    };
    let causes = attribute(&ev, None, &raised, &rules(false));
    assert!(causes
        .iter()
        .all(|c| c.reason != Some(ReasonCode::NetStackInversion)));
}

#[test]
fn a_lock_wait_names_the_holder_and_the_task_that_kept_it_off_the_cpu() {
    // One CPU. The high thread (pid 7, FIFO 90 = prio 9) wakes at its deadline 20.000000,
    // finds the lock held by the owner (pid 5, FIFO 88 = prio 11) and blocks; a hog (pid 6,
    // FIFO 89 = prio 10) runs 3 ms, then the owner finishes 0.5 ms and wakes the thread.
    let ev = events(&[
        "owner-5 [000] d.h1. 20.000000: local_timer_entry: vector=236",
        "owner-5 [000] d.h3. 20.000001: sched_waking: comm=high pid=7 prio=9 target_cpu=000",
        "owner-5 [000] d.h1. 20.000002: local_timer_exit: vector=236",
        "owner-5 [000] d..2. 20.000003: sched_switch: prev_comm=owner prev_pid=5 prev_prio=11 prev_state=R+ ==> next_comm=high next_pid=7 next_prio=9",
        "high-7 [000] d..2. 20.000010: sched_switch: prev_comm=high prev_pid=7 prev_prio=9 prev_state=S ==> next_comm=hog next_pid=6 next_prio=10",
        "hog-6 [000] d..2. 20.003010: sched_switch: prev_comm=hog prev_pid=6 prev_prio=10 prev_state=S ==> next_comm=owner next_pid=5 next_prio=11",
        "owner-5 [000] d..2. 20.003510: sched_waking: comm=high pid=7 prio=9 target_cpu=000",
        "owner-5 [000] d..2. 20.003512: sched_switch: prev_comm=owner prev_pid=5 prev_prio=11 prev_state=R+ ==> next_comm=high next_pid=7 next_prio=9",
    ]);
    let owner = Task {
        comm: "owner".into(),
        pid: 5,
        prio: 11,
    };
    let late = Late {
        tid: 7,
        deadline_ns: 20_000_000_000,
        woke_ns: 20_003_520_000,
        wait: Wait::Lock,
        waker: Some(owner.clone()),
        cpu: 0,
        peer: None,
    };
    let rules = rules(true);
    let causes = attribute(&ev, Some(&owner), &late, &rules);
    let total: u64 = causes.iter().map(|c| c.duration_ns).sum();
    assert_eq!(total, 3_520_000, "every ns attributed once: {causes:?}");
    assert_eq!(causes[0].kind, CauseKind::Preemption);
    assert_eq!(causes[0].task.as_deref(), Some("hog"));
    assert_eq!(causes[0].duration_ns, 3_000_000);
    assert!(causes[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("priority inversion"));
    let blocking = causes
        .iter()
        .find(|c| c.kind == CauseKind::Blocking)
        .unwrap();
    assert_eq!(
        (
            blocking.task.as_deref(),
            blocking.duration_ns,
            blocking.prio
        ),
        (Some("owner"), 500_000, Some(88))
    );
    let line = describe("none/rtlab", 3_520_000, 1_000_000_000, &causes);
    assert!(
        line.contains("500 us blocked on owner (pid 5, RT 88)"),
        "{line}"
    );
    assert!(line.contains("3.00 ms preempted by hog (pid 6, RT 89) while the lock holder waited: priority inversion"), "{line}");
    // The same events read as a timer wakeup know nothing of locks.
    let as_wakeup = attribute(
        &ev,
        Some(&owner),
        &Late {
            wait: Wait::Timer,
            ..late
        },
        &rules,
    );
    assert!(as_wakeup.iter().all(|c| !matches!(
        c.reason,
        Some(
            ReasonCode::HolderRan
                | ReasonCode::WaitingForHolder
                | ReasonCode::PriorityInversion
                | ReasonCode::RanWhileBlocked
        )
    )));
    // Only that it went to sleep again after its wakeup, until woken again.
    let again: u64 = as_wakeup
        .iter()
        .filter(|c| c.reason == Some(ReasonCode::AsleepAgain))
        .map(|c| c.duration_ns)
        .sum();
    assert_eq!(again, 3_500_000, "{as_wakeup:?}");
}

/// Pid 7 on CPU 0, late from `deadline_ns` to `woke_ns` in a wait of kind `wait`.
fn late7(wait: Wait, deadline_ns: u64, woke_ns: u64) -> Late {
    Late {
        tid: 7,
        deadline_ns,
        woke_ns,
        wait,
        cpu: 0,
        ..Late::default()
    }
}

/// The rules of a VM where CPU 1's events are not known from `from_ns` on: `lost` of them
/// lost (0: not read yet, the reader `behind_ns` behind).
fn unknown_on_cpu1(from_ns: u64, lost: u64, behind_ns: u64) -> Rules {
    Rules {
        elsewhere_unknown: Some(ElsewhereUnknown {
            cpu: 1,
            from_ns,
            lost,
            behind_ns,
        }),
        ..rules(true)
    }
}

#[test]
fn a_notification_follows_the_notifier_to_its_cpu() {
    // CPU 0: the thread (pid 7) sleeps for a message. CPU 1: the notifier (pid 5) begins its
    // send at the deadline, 20.000000, and is preempted by a FIFO 99 hog (pid 6) at
    // 20.000002 until 20.001000; it wakes pid 7 at 20.001008.
    let ev = events(&[
        "t-7 [000] d..2. 19.999000: sched_switch: prev_comm=t prev_pid=7 prev_prio=9 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
        "notify-5 [001] d..2. 20.001008: sched_waking: comm=t pid=7 prio=9 target_cpu=000",
        "<idle>-0 [000] d..2. 20.001020: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=9",
    ]);
    let notifier_cpu = events(&[
        "notify-5 [001] d..2. 20.000002: sched_switch: prev_comm=notify prev_pid=5 prev_prio=11 prev_state=R+ ==> next_comm=hog next_pid=6 next_prio=0",
        "hog-6 [001] d..2. 20.001000: sched_switch: prev_comm=hog prev_pid=6 prev_prio=0 prev_state=S ==> next_comm=notify next_pid=5 next_prio=11",
        "notify-5 [001] d..2. 20.001008: sched_waking: comm=t pid=7 prio=9 target_cpu=000",
    ]);
    let notifier = Task {
        comm: "notify".into(),
        pid: 5,
        prio: 11,
    };
    let late = Late {
        tid: 7,
        deadline_ns: 20_000_000_000,
        woke_ns: 20_001_020_000,
        wait: Wait::Notify,
        waker: Some(notifier.clone()),
        cpu: 0,
        peer: Some(Peer {
            cpu: 1,
            events: notifier_cpu,
            base: Some(notifier),
            tick: None,
        }),
    };
    let causes = attribute(&ev, None, &late, &rules(true));
    assert_eq!(causes[0].kind, CauseKind::Preemption, "{causes:?}");
    assert_eq!(causes[0].task.as_deref(), Some("hog"));
    assert_eq!(causes[0].duration_ns, 998_000);
    assert!(causes[0].detail.as_deref().unwrap().contains("on CPU 1"));
    // Its own call, before and after the hog: the notifier's, named as such.
    let call: u64 = causes
        .iter()
        .filter(|c| c.reason == Some(ReasonCode::NotifierCall))
        .map(|c| c.duration_ns)
        .sum();
    assert_eq!(call, 10_000, "{causes:?}");
    assert_eq!(causes.iter().map(|c| c.duration_ns).sum::<u64>(), 1_020_000);
    // Without the notifier's CPU (not traced), the time before the wakeup is its call.
    let unfollowed = Late { peer: None, ..late };
    let causes = attribute(&ev, None, &unfollowed, &rules(true));
    assert_eq!(
        causes[0].reason,
        Some(ReasonCode::NotifierCall),
        "{causes:?}"
    );
}

#[test]
fn a_notified_thread_preempted_before_its_message_waits_for_the_cpu_not_a_notifier() {
    // pid 7 runs (handling a message) when a FIFO 99 hog (pid 6) preempts it at 10.000000;
    // the next message is sent at 10.000500 (its deadline), queued: no wakeup is needed,
    // and pid 7 gets its CPU back at 10.003000.
    let ev = events(&[
        "t-7 [000] d..2. 10.000000: sched_switch: prev_comm=t prev_pid=7 prev_prio=9 prev_state=R+ ==> next_comm=hog next_pid=6 next_prio=0",
        "hog-6 [000] d..2. 10.003000: sched_switch: prev_comm=hog prev_pid=6 prev_prio=0 prev_state=S ==> next_comm=t next_pid=7 next_prio=9",
    ]);
    let late = late7(Wait::Notify, 10_000_500_000, 10_003_000_000);
    let causes = attribute(&ev, None, &late, &rules(true));
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(
        (
            causes[0].kind,
            causes[0].task.as_deref(),
            causes[0].duration_ns
        ),
        (CauseKind::Preemption, Some("hog"), 2_500_000)
    );
}

#[test]
fn a_wakeup_from_another_cpu_waits_for_its_ipi() {
    // The notifier on CPU 1 wakes pid 7 (on CPU 0, where a time-sharing spinner runs) at
    // 30.000010; the reschedule IPI only arrives at 30.000900.
    let ev = events(&[
        "spin-3 [000] d..2. 29.990000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=spin next_pid=3 next_prio=120",
        "notify-8 [001] d..2. 30.000010: sched_waking: comm=w pid=7 prio=9 target_cpu=000",
        "spin-3 [000] d.h1. 30.000900: reschedule_entry: vector=253",
        "spin-3 [000] d.h1. 30.000901: reschedule_exit: vector=253",
        "spin-3 [000] d..2. 30.000903: sched_switch: prev_comm=spin prev_pid=3 prev_prio=120 prev_state=R+ ==> next_comm=w next_pid=7 next_prio=9",
    ]);
    let late = late7(Wait::Notify, 30_000_000_000, 30_000_905_000);
    let vm = rules(true);
    let causes = attribute(&ev, None, &late, &vm);
    assert_eq!(causes[0].kind, CauseKind::HypervisorGap, "{causes:?}");
    assert_eq!(causes[0].duration_ns, 890_000);
    let notifier = causes
        .iter()
        .find(|c| c.kind == CauseKind::Syscall)
        .unwrap();
    assert_eq!(
        notifier.duration_ns, 10_000,
        "before the wake call: {causes:?}"
    );
    let metal = attribute(&ev, None, &late, &rules(false));
    assert_eq!(metal[0].kind, CauseKind::Preemption);
    assert_eq!(metal[0].task.as_deref(), Some("spin"));
}

/// CPU 0: spin switched in at `spin_from` (seconds, as the trace prints them), then w (pid 7)
/// at 40.030.
fn spin_then_w_at_40_030(spin_from: &str) -> Vec<Event> {
    let first = format!("spin-3 [000] d..2. {spin_from}: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=spin next_pid=3 next_prio=120");
    events(&[
        first.as_str(),
        "spin-3 [000] d..2. 40.030000: sched_switch: prev_comm=spin prev_pid=3 prev_prio=120 prev_state=S ==> next_comm=w next_pid=7 next_prio=9",
    ])
}

/// w (pid 7), late from `deadline_ns` to its switch-in at 40.030.
fn w_late_from(deadline_ns: u64) -> Late {
    Late {
        tid: 7,
        deadline_ns,
        woke_ns: 40_030_000_000,
        ..Late::default()
    }
}

#[test]
fn time_after_lost_events_until_the_next_switch_is_said_lost_not_an_empty_window() {
    // The loss mark sits where the lost records may begin (the ring last read to its head,
    // 40.005): from there to the next switch (40.030) who ran is not known because events
    // were lost, which the explanation says (not "no scheduler event").
    let mut ev = spin_then_w_at_40_030("40.000000");
    ev.insert(
        1,
        Event {
            cpu: 0,
            ts_ns: 40_005_000_000,
            current_pid: -1,
            kind: Kind::Lost(800),
        },
    );
    let late = w_late_from(40_010_000_000);
    let causes = attribute(&ev, None, &late, &rules(true));
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].kind, CauseKind::Unexplained);
    assert_eq!(causes[0].duration_ns, 20_000_000);
    assert_eq!(
        causes[0].detail.as_deref(),
        Some("800 trace events lost here (the reader fell behind)")
    );
}

#[test]
fn a_notified_thread_with_events_lost_before_its_wakeup_says_lost_not_its_notifier() {
    // pid 7 sleeps for a message from 40.000; the recorder lost 900 records of CPU 0 from
    // 40.005 (where its ring was last read to the end); the first kept is its switch-in at
    // 40.030, its wakeup among the lost.
    let ev = events(&[
        "t-7 [000] d..2. 40.000000: sched_switch: prev_comm=t prev_pid=7 prev_prio=9 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
        "<idle>-0 [000] d..2. 40.030000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=9",
    ]);
    let mut ev = ev;
    ev.insert(
        1,
        Event {
            cpu: 0,
            ts_ns: 40_005_000_000,
            current_pid: -1,
            kind: Kind::Lost(900),
        },
    );
    let late = late7(Wait::Notify, 40_010_000_000, 40_030_000_000);
    let causes = attribute(&ev, None, &late, &rules(true));
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(
        (causes[0].reason, causes[0].duration_ns),
        (Some(ReasonCode::EventsLost), 20_000_000)
    );
}

#[test]
fn after_the_last_event_read_the_unread_or_lost_is_said_not_a_silence_of_the_host() {
    // The reader behind: this CPU's events read only to 40.000 (a busy task switched in),
    // the thread's wake at 40.030 not read yet. Before, the stretch past the last event was
    // charged as a silence while the task ran ("the vCPU was not running").
    let mut ev = spin_then_w_at_40_030("40.000000");
    ev.truncate(1);
    let late = w_late_from(40_010_000_000);
    let behind = Rules {
        unread_from: Some(40_000_000_000),
        ..rules(true)
    };
    let causes = attribute(&ev, None, &late, &behind);
    assert!(
        causes.iter().all(|c| c.reason == Some(ReasonCode::Unread)),
        "{causes:?}"
    );
    assert_eq!(
        causes.iter().map(|c| c.duration_ns).sum::<u64>(),
        20_000_000
    );
    // Events lost after the last one read (the kernel's mark comes with the CPU's next
    // event, not read yet): lost, not a silence.
    ev.push(Event {
        cpu: 0,
        ts_ns: 40_000_000_001,
        current_pid: -1,
        kind: Kind::Lost(300),
    });
    let causes = attribute(&ev, None, &late, &rules(true));
    assert!(
        causes
            .iter()
            .all(|c| c.reason == Some(ReasonCode::EventsLost)),
        "{causes:?}"
    );
}

#[test]
fn a_stretch_the_reader_had_not_read_is_said_unread_not_a_silence_of_the_host() {
    // Explained while the reader was behind: this CPU's events read only up to 40.010, so
    // nothing after it is known, and the stretch to the wake is no silence of the CPU's.
    let ev = spin_then_w_at_40_030("40.004000");
    let late = w_late_from(40_005_000_000);
    let read_all = attribute(&ev, None, &late, &rules(true));
    assert_eq!(read_all[0].kind, CauseKind::HypervisorGap, "{read_all:?}");
    let behind = Rules {
        unread_from: Some(40_010_000_000),
        ..rules(true)
    };
    let causes = attribute(&ev, None, &late, &behind);
    let unread = causes.iter().find(|c| c.reason == Some(ReasonCode::Unread));
    assert_eq!(
        unread.map(|c| c.duration_ns),
        Some(20_000_000),
        "{causes:?}"
    );
    assert_eq!(
        unread.and_then(|c| c.detail.as_deref()),
        Some("not known: the trace reader was 20.0 ms behind this CPU's events when it explained this")
    );
    assert!(
        causes.iter().all(|c| c.kind != CauseKind::HypervisorGap),
        "{causes:?}"
    );
}

#[test]
fn time_before_lost_events_is_unexplained_not_a_gap() {
    let mut ev = spin_then_w_at_40_030("40.000000");
    ev.insert(
        1,
        Event {
            cpu: 0,
            ts_ns: 40_029_999_999,
            current_pid: -1,
            kind: Kind::Lost(500),
        },
    );
    let late = w_late_from(40_010_000_000);
    let rules = rules(true);
    let causes = attribute(&ev, None, &late, &rules);
    assert!(
        causes.iter().all(|c| c.kind == CauseKind::Unexplained),
        "{causes:?}"
    );
    assert_eq!(
        causes.iter().map(|c| c.duration_ns).sum::<u64>(),
        20_000_000
    );
    assert!(causes[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("500 trace events lost"));

    // Another CPU's event between this CPU's last one and the loss mark says nothing of
    // this CPU: still all lost.
    let mut mixed = ev.clone();
    mixed.insert(
        1,
        events(&[
            "peer-5 [001] d..2. 40.020000: sched_waking: comm=x pid=9 prio=120 target_cpu=001",
        ])
        .remove(0),
    );
    let causes = attribute(&mixed, None, &late, &rules);
    assert!(
        causes.iter().all(|c| c.kind == CauseKind::Unexplained),
        "{causes:?}"
    );
    assert!(causes[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("500 trace events lost"));
    assert_eq!(causes[0].duration_ns, 20_000_000);

    // The loss is the window's first event: the whole of it is lost, not "before the
    // first traced event" (nor, after the mark, "no scheduler event").
    let causes = attribute(&ev[1..], None, &late, &rules);
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].duration_ns, 20_000_000);
    assert!(causes[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("500 trace events lost"));
}

#[test]
fn a_window_whose_events_were_dropped_says_so_and_is_not_the_start_of_the_trace() {
    // The thread's CPU's first kept event comes 2 ms after the deadline (a reader that fell
    // behind dropped the events before it): those 2 ms are said not known and why; with
    // nothing ever dropped they are before the trace began.
    let ev = events(&[
        "rtlab-hog-42 [000] d..2. 10.003000: sched_switch: prev_comm=rtlab-hog prev_pid=42 prev_prio=0 prev_state=S ==> next_comm=t next_pid=7 next_prio=4",
    ]);
    let late = Late {
        tid: 7,
        deadline_ns: 10_001_000_000,
        woke_ns: 10_003_000_000,
        ..Late::default()
    };
    let code = |rules: &Rules| attribute(&ev, None, &late, rules)[0].reason;
    assert_eq!(code(&rules(true)), Some(ReasonCode::BeforeFirstEvent));
    let cut = Rules {
        cut: Some(crate::explain::Cut {
            through_ns: 9_990_000_000,
            age_ns: 900_000_000,
        }),
        ..rules(true)
    };
    let causes = attribute(&ev, None, &late, &cut);
    assert_eq!(causes[0].reason, Some(ReasonCode::HistoryCut), "{causes:?}");
    let detail = causes[0].detail.as_deref().unwrap();
    assert!(detail.contains("900 ms after they happened"), "{detail}");
}

#[test]
fn a_notified_thread_whose_wakeup_may_be_among_another_cpus_unknown_events_says_so() {
    // pid 7 sleeps for a message from 10.000 on CPU 0, where a FIFO 99 hog runs from
    // 10.001 to 10.004 and then switches to pid 7: no wakeup of it was seen, and CPU 1
    // (its sender's) was read only up to 10.0005 when this was explained.
    let ev = events(&[
        "t-7 [000] d..2. 10.000000: sched_switch: prev_comm=t prev_pid=7 prev_prio=9 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
        "<idle>-0 [000] d..2. 10.001000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=hog next_pid=6 next_prio=0",
        "hog-6 [000] d..2. 10.004000: sched_switch: prev_comm=hog prev_pid=6 prev_prio=0 prev_state=S ==> next_comm=t next_pid=7 next_prio=9",
    ]);
    let late = late7(Wait::Notify, 10_001_500_000, 10_004_000_000);
    let seen_all = attribute(&ev, None, &late, &rules(true));
    assert_eq!(
        seen_all[0].reason,
        Some(ReasonCode::NotifierCall),
        "{seen_all:?}"
    );
    let unread = unknown_on_cpu1(10_000_500_000, 0, 3_500_000);
    let causes = attribute(&ev, None, &late, &unread);
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].reason, Some(ReasonCode::Unread));
    assert_eq!(
        causes[0].detail.as_deref(),
        Some("not known: its wakeup would come from CPU 1, whose events the trace reader was 3.50 ms behind when it explained this")
    );
}

#[test]
fn a_reply_whose_wakeup_may_be_among_another_cpus_lost_events_blames_no_local_task() {
    // pid 7 sends at 20.000000 and sleeps for the reply; a time-sharing task runs on CPU 0
    // meanwhile; pid 7 runs again at 20.003000 with no wakeup of it seen: the peer's CPU
    // lost events from 19.999 on.
    let ev = events(&[
        "t-7 [000] d..2. 20.000005: sched_switch: prev_comm=t prev_pid=7 prev_prio=9 prev_state=S ==> next_comm=busy next_pid=3 next_prio=120",
        "busy-3 [000] d..2. 20.003000: sched_switch: prev_comm=busy prev_pid=3 prev_prio=120 prev_state=R+ ==> next_comm=t next_pid=7 next_prio=9",
    ]);
    let late = late7(Wait::Reply, 20_000_000_000, 20_003_000_000);
    let known = attribute(&ev, None, &late, &rules(true));
    assert!(
        known.iter().any(|c| c.task.as_deref() == Some("busy")),
        "{known:?}"
    );
    let lost = unknown_on_cpu1(19_999_000_000, 4_000, 0);
    let causes = attribute(&ev, None, &late, &lost);
    assert!(causes.iter().all(|c| c.task.is_none()), "{causes:?}");
    let not_seen = causes
        .iter()
        .find(|c| c.reason == Some(ReasonCode::EventsLost))
        .unwrap_or_else(|| panic!("{causes:?}"));
    assert_eq!(not_seen.duration_ns, 2_995_000);
    assert_eq!(
        not_seen.detail.as_deref(),
        Some("not known: 4000 trace events lost on CPU 1, where its wakeup would come from")
    );
}

#[test]
fn a_notification_whose_wakeup_was_seen_stays_its_notifiers_call_whatever_other_cpus_lost() {
    // The notifier (pid 5) on an untraced CPU wakes pid 7 at 10.002; CPU 1 lost events:
    // the wakeup was seen, so the time before it is the notifier's call.
    let ev = events(&[
        "t-7 [000] d..2. 10.000000: sched_switch: prev_comm=t prev_pid=7 prev_prio=9 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
        "notify-5 [002] d..2. 10.002000: sched_waking: comm=t pid=7 prio=9 target_cpu=000",
        "<idle>-0 [000] d..2. 10.002010: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=t next_pid=7 next_prio=9",
    ]);
    let late = Late {
        tid: 7,
        deadline_ns: 10_000_500_000,
        woke_ns: 10_002_010_000,
        wait: Wait::Notify,
        waker: Some(Task {
            comm: "notify".into(),
            pid: 5,
            prio: 11,
        }),
        cpu: 0,
        ..Late::default()
    };
    let lost = unknown_on_cpu1(10_000_000_000, 900, 0);
    let causes = attribute(&ev, None, &late, &lost);
    assert_eq!(
        causes[0].reason,
        Some(ReasonCode::NotifierCall),
        "{causes:?}"
    );
    assert_eq!(causes[0].duration_ns, 1_500_000);
}
