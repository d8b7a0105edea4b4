//! A time-sharing task on a runnable real-time thread's CPU: throttling (RT bandwidth, or the
//! fair server of 6.12+ kernels), never preemption.

use super::*;

/// `rtlab-wakeup0` (pid 77, FIFO 95)'s timer wait from `deadline_ns` to `woke_ns` on CPU 0:
/// `lines`, with the timer expiries of the eBPF source (`(ns, function)`; `hrtimer_wakeup` is
/// the thread's own) put in time order.
fn timer_wait(
    lines: &[&str],
    expiries: &[(u64, &str)],
    deadline_ns: u64,
    woke_ns: u64,
) -> Vec<Cause> {
    let thread = Task {
        comm: "rtlab-wakeup0".into(),
        pid: 77,
        prio: 4,
    };
    let mut ev = events(lines);
    ev.extend(expiries.iter().map(|&(ts_ns, function)| Event {
        cpu: 0,
        ts_ns,
        current_pid: -1,
        kind: Kind::HrtimerEntry {
            function: function.into(),
            task: (function == "hrtimer_wakeup").then(|| thread.clone()),
            expires_ns: None,
            slack_ns: 0,
            timer: None,
        },
    }));
    ev.sort_by_key(|e| e.ts_ns);
    let late = Late {
        tid: 77,
        deadline_ns,
        woke_ns,
        ..Late::default()
    };
    attribute(&ev, None, &late, &rules(true))
}

/// How long `causes` name one of `reasons` (for `task`, when given).
fn named(causes: &[Cause], reasons: &[ReasonCode], task: Option<&str>) -> u64 {
    causes
        .iter()
        .filter(|c| c.reason.is_some_and(|r| reasons.contains(&r)))
        .filter(|c| task.is_none() || c.task.as_deref() == task)
        .map(|c| c.duration_ns)
        .sum()
}

const THROTTLED: [ReasonCode; 2] = [ReasonCode::Throttled, ReasonCode::FairServer];

/// The part of the sentence for `causes` that names a time-sharing task as preempting.
fn says_preempted_by_time_sharing(causes: &[Cause], latency_ns: u64) -> Option<String> {
    describe("thread0", latency_ns, 0, causes)
        .split("; ")
        .find(|part| part.contains("preempted by") && part.contains("time-sharing)"))
        .map(str::to_string)
}

#[test]
fn a_time_sharing_task_on_a_real_time_spinners_cpu_for_long_is_throttling_not_preemption() {
    // A SCHED_OTHER busy loop beside a FIFO spinner took 49.8 ms slices,
    // named "preempted by sh (time-sharing)": a lower class cannot preempt; the scheduler
    // gave it the time (RT bandwidth, or the fair server of 6.12+ kernels).
    let causes = spin_gap(&[
        "sh-42 [000] d..2. 10.001000: sched_switch: prev_comm=rtlab-noise0 prev_pid=77 prev_prio=98 prev_state=R ==> next_comm=sh next_pid=42 next_prio=120",
        "rtlab-noise0-77 [000] d..2. 10.004000: sched_switch: prev_comm=sh prev_pid=42 prev_prio=120 prev_state=R ==> next_comm=rtlab-noise0 next_pid=77 next_prio=98",
    ]);
    assert_eq!(causes[0].task.as_deref(), Some("sh"), "{causes:?}");
    assert!(
        causes[0].reason.is_some_and(|r| THROTTLED.contains(&r)),
        "{causes:?}"
    );
    let line = describe("cpu0", 3_003_000, 0, &causes);
    assert!(line.contains("3.00 ms throttled ("), "{line}");
    assert!(!line.contains("preempted by sh"), "{line}");
    // A short stretch too: the scheduler chose the lower class over the runnable spinner,
    // which only throttling does (a fair server's last 0.5 ms of budget, say). Beside
    // `wakeup` a 1.99 ms one read "held the CPU in non-preemptible kernel code".
    let causes = spin_gap(&[
        "sh-42 [000] d..2. 10.001000: sched_switch: prev_comm=rtlab-noise0 prev_pid=77 prev_prio=98 prev_state=R ==> next_comm=sh next_pid=42 next_prio=120",
        "rtlab-noise0-77 [000] d..2. 10.001500: sched_switch: prev_comm=sh prev_pid=42 prev_prio=120 prev_state=R ==> next_comm=rtlab-noise0 next_pid=77 next_prio=98",
    ]);
    assert_eq!(
        named(&causes, &THROTTLED, Some("sh")),
        500_000,
        "{causes:?}"
    );
}

#[test]
fn a_timer_woken_thread_kept_off_by_the_fair_server_is_throttled_from_its_timers_tail_on() {
    // `rtlab wakeup` beside a FIFO spinner and a SCHED_OTHER loop on its CPU: the fair server
    // ran the loop for 50 ms; the thread's timer expired 1 ms into it and the next event was
    // a tick 1 ms later. That millisecond read "preempted by sh (time-sharing)" as the timer
    // interrupt's tail. Here a kworker also takes a turn: the fair server's time is shared by
    // every time-sharing task, each turn shorter than 2 ms.
    let causes = timer_wait(
        &[
            "sh-42 [000] d..2. 10.000000: sched_switch: prev_comm=spin prev_pid=5 prev_prio=49 prev_state=R ==> next_comm=sh next_pid=42 next_prio=120",
            "kworker/0:1-9 [000] d..2. 10.002500: sched_switch: prev_comm=sh prev_pid=42 prev_prio=120 prev_state=R ==> next_comm=kworker/0:1 next_pid=9 next_prio=120",
            "sh-42 [000] d..2. 10.003500: sched_switch: prev_comm=kworker/0:1 prev_pid=9 prev_prio=120 prev_state=I ==> next_comm=sh next_pid=42 next_prio=120",
            "rtlab-wakeup0-77 [000] d..2. 10.006000: sched_switch: prev_comm=sh prev_pid=42 prev_prio=120 prev_state=R ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
        ],
        &[
            (10_001_000_000, "hrtimer_wakeup"),
            (10_002_000_000, "tick_nohz_handler"),
        ],
        10_001_000_000,
        10_006_010_000,
    );
    assert_eq!(
        named(&causes, &THROTTLED, Some("sh")),
        4_000_000,
        "{causes:?}"
    );
    assert_eq!(
        named(&causes, &THROTTLED, Some("kworker/0:1")),
        1_000_000,
        "{causes:?}"
    );
    assert_eq!(
        causes.iter().map(|c| c.duration_ns).sum::<u64>(),
        5_010_000,
        "{causes:?}"
    );
    assert_eq!(says_preempted_by_time_sharing(&causes, 5_010_000), None);
    let line = describe("thread0", 5_010_000, 0, &causes);
    assert!(line.contains("4.00 ms throttled ("), "{line}");
    assert!(!line.contains("non-preemptible"), "{line}");
}

#[test]
fn a_time_sharing_task_that_ran_long_before_the_wakeup_is_not_throttling() {
    // A 10 ms period beside a SCHED_OTHER loop, no throttling: the loop had run 10 ms when
    // the timer woke the thread, which ran 10 us later. Timing the loop's turn from its
    // switch-in, not from the wakeup, named those microseconds throttling.
    let causes = timer_wait(
        &[
            "sh-42 [000] d..2. 9.991000: sched_switch: prev_comm=rtlab-wakeup0 prev_pid=77 prev_prio=4 prev_state=S ==> next_comm=sh next_pid=42 next_prio=120",
            "sh-42 [000] d.s2. 10.001005: softirq_entry: vec=9 [action=RCU]",
            "sh-42 [000] d.s2. 10.001008: softirq_exit: vec=9 [action=RCU]",
            "rtlab-wakeup0-77 [000] d..2. 10.001010: sched_switch: prev_comm=sh prev_pid=42 prev_prio=120 prev_state=R ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
        ],
        &[(10_001_000_000, "hrtimer_wakeup")],
        10_001_000_000,
        10_001_012_000,
    );
    assert_eq!(named(&causes, &THROTTLED, None), 0, "{causes:?}");
    // The timer's tail until the switch: the interrupt's rest, then the loop, which
    // preempted nothing.
    assert_eq!(
        named(&causes, &[ReasonCode::TimerTailLowerPriority], Some("sh")),
        5_000,
        "{causes:?}"
    );
    assert_eq!(says_preempted_by_time_sharing(&causes, 12_000), None);
    let line = describe("thread0", 12_000, 0, &causes);
    assert!(
        line.contains(
            "5.00 us rest of the timer interrupt, then sh (pid 42, time-sharing) until the switch"
        ),
        "{line}"
    );
    // The loop, already running, keeps the CPU 1 ms past the wakeup: shorter than any
    // throttling, its non-preemptible kernel code.
    let causes = timer_wait(
        &[
            "sh-42 [000] d..2. 9.991000: sched_switch: prev_comm=rtlab-wakeup0 prev_pid=77 prev_prio=4 prev_state=S ==> next_comm=sh next_pid=42 next_prio=120",
            "rtlab-wakeup0-77 [000] d..2. 10.002000: sched_switch: prev_comm=sh prev_pid=42 prev_prio=120 prev_state=R ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
        ],
        &[(10_001_000_000, "hrtimer_wakeup")],
        10_001_000_000,
        10_002_002_000,
    );
    let held = [ReasonCode::NonPreemptible];
    assert_eq!(named(&causes, &held, Some("sh")), 1_000_000, "{causes:?}");
    assert_eq!(named(&causes, &THROTTLED, None), 0, "{causes:?}");
    let line = describe("thread0", 1_002_000, 0, &causes);
    assert!(
        line.contains("sh (pid 42, time-sharing) held the CPU in non-preemptible kernel code"),
        "{line}"
    );
}

#[test]
fn a_preempted_real_time_thread_kept_off_by_the_fair_server_is_throttled_not_a_late_timer() {
    // `rtlab watch` on a FIFO busy loop beside a SCHED_OTHER loop: its delay starts when it
    // is switched out runnable (no wakeup comes), and the fair server's 50 ms read "timer
    // interrupt late while sh ran" as if it had been asleep.
    let ev = events(&[
        "spin-7 [000] d..2. 9.990000: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=spin next_pid=7 next_prio=49",
        "sh-42 [000] d..2. 10.000000: sched_switch: prev_comm=spin prev_pid=7 prev_prio=49 prev_state=R ==> next_comm=sh next_pid=42 next_prio=120",
        "sh-42 [000] d.s2. 10.004000: softirq_entry: vec=9 [action=RCU]",
        "sh-42 [000] d.s2. 10.004002: softirq_exit: vec=9 [action=RCU]",
        "spin-7 [000] d..2. 10.005000: sched_switch: prev_comm=sh prev_pid=42 prev_prio=120 prev_state=R ==> next_comm=spin next_pid=7 next_prio=49",
    ]);
    let late = Late {
        tid: 7,
        deadline_ns: 10_000_000_000,
        woke_ns: 10_005_000_000,
        ..Late::default()
    };
    let causes = attribute(&ev, None, &late, &rules(true));
    assert_eq!(
        named(&causes, &THROTTLED, Some("sh")),
        4_998_000,
        "{causes:?}"
    );
    assert_eq!(
        named(&causes, &[ReasonCode::TimerLateWhileRunning], None),
        0,
        "{causes:?}"
    );
}

#[test]
fn a_timer_expiry_the_trace_lacks_is_inferred_from_the_next_interrupt_not_named_a_late_timer() {
    // `rtlab wakeup` beside a FIFO spinner and a SCHED_OTHER loop, beside stress-ng: the fair
    // server's first pick was a task the tracer does not see (a hypervisor agent thread):
    // nothing of its run was recorded, the thread's timer expiry included, and the 50 ms that
    // followed read "timer interrupt late while sh ran". The next tick expires every due
    // timer of the CPU: the thread was runnable from there.
    let lines = [
        "spin-5 [000] d..2. 9.998008: sched_switch: prev_comm=spin prev_pid=5 prev_prio=49 prev_state=R ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
        "rtlab-wakeup0-77 [000] d..2. 9.998010: sched_switch: prev_comm=rtlab-wakeup0 prev_pid=77 prev_prio=4 prev_state=S ==> next_comm=spin next_pid=5 next_prio=49",
        "spin-5 [000] d..2. 10.000010: sched_switch: prev_comm=spin prev_pid=5 prev_prio=49 prev_state=R ==> next_comm=agent next_pid=75 next_prio=110",
        "kcompactd0-35 [000] d..2. 10.001800: sched_switch: prev_comm=kcompactd0 prev_pid=35 prev_prio=120 prev_state=S ==> next_comm=sh next_pid=42 next_prio=120",
        "sh-42 [000] d.s2. 10.002012: softirq_entry: vec=1 [action=TIMER]",
        "sh-42 [000] d.s2. 10.002014: softirq_exit: vec=1 [action=TIMER]",
        "rtlab-wakeup0-77 [000] d..2. 10.006000: sched_switch: prev_comm=sh prev_pid=42 prev_prio=120 prev_state=R ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4",
    ];
    let mut expiries = vec![
        (9_998_000_000, "hrtimer_wakeup"),
        (10_002_000_000, "tick_nohz_handler"),
        (10_004_000_000, "tick_nohz_handler"),
    ];
    let (deadline, woke) = (10_001_000_000, 10_006_010_000);
    let causes = timer_wait(&lines, &expiries, deadline, woke);
    assert_eq!(causes[0].task.as_deref(), Some("sh"), "{causes:?}");
    assert_eq!(
        named(&causes, &THROTTLED, Some("sh")),
        3_986_000,
        "{causes:?}"
    );
    // Up to the tick's interrupt (its next event), the trace cannot say whether the timer
    // fired.
    let late_timer = [ReasonCode::TimerLateWhileRunning];
    assert_eq!(named(&causes, &late_timer, None), 1_012_000, "{causes:?}");
    assert_eq!(says_preempted_by_time_sharing(&causes, 5_010_000), None);

    // Its own expiry in the same interrupt as the tick, a few microseconds after it: seen,
    // nothing inferred; the timer was late while the task ran.
    expiries.push((10_002_003_000, "hrtimer_wakeup"));
    let causes = timer_wait(&lines, &expiries, deadline, woke);
    assert_eq!(named(&causes, &late_timer, None), 1_003_000, "{causes:?}");
}
