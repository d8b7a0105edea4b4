//! A Java thread's parks timed between its own clock reads.

use super::*;

use rtlab_trace::event::JvmProbe;

/// Thread `tid` reads its JVM's clock at `ts` (a probe at the clock's entry).
fn clock_read(tid: i64, ts: u64) -> Event {
    clock_read_returned(tid, ts, None)
}

/// Thread `tid`'s clock read whose probe fired at `ts`, the time it read `value` where its
/// probe is at the clock's return.
fn clock_read_returned(tid: i64, ts: u64, value: Option<u64>) -> Event {
    let kind = Kind::Jvm {
        probe: JvmProbe::ClockRead,
        process: std::process::id(),
        name: None,
        time_ns: value,
    };
    own(tid, 0, ts, kind)
}

/// A file opened as a library (the test's own executable: no probe is placed in it).
fn a_library() -> rtlab_trace::usdt::Library {
    rtlab_trace::usdt::Library::open(std::path::Path::new("/proc/self/exe")).unwrap()
}

/// This test's thread watched with its wait calls, its process's clock probed (`probed`).
fn watched(probed: bool) -> (i64, WatchState) {
    watched_above(probed, u64::MAX)
}

/// The same, its delays over `threshold_ns` explained.
fn watched_above(probed: bool, threshold_ns: u64) -> (i64, WatchState) {
    let (tid, mut w) = watch_this_thread(threshold_ns);
    w.set_wait_calls(true);
    if probed {
        w.jvm_clock_probed(&a_library(), std::process::id(), Ok(true));
    }
    (tid, w)
}

/// This test's thread watched, its process's clock probed (`probed`), in a park asked at
/// 100 us for 901 us after a clock read at 99 us (its deadline 1 ms), the kernel's timer
/// at 1.002 ms, on its CPU at 1.01 ms, its wait back at 1.02 ms, the park's end probe at 1.03 ms.
fn parked(probed: bool) -> (i64, WatchState) {
    let (tid, mut w) = watched(probed);
    w.offer(&clock_read(tid, 99_000));
    w.offer(&park(tid, 100_000, Some(901_000)));
    sleep_to(&mut w, tid, (101_000, 1_002_000, 1_020_000));
    w.offer(&switch(0, 1_010_000, 0, TaskState::RUNNING, tid));
    w.offer(&park(tid, 1_030_000, None));
    (tid, w)
}

fn switch(cpu: u16, ts: u64, prev: i64, state: TaskState, next: i64) -> Event {
    let kind = Kind::Switch {
        prev: task(prev),
        prev_state: state,
        next: task(next),
    };
    ev(cpu, ts, kind)
}

fn timer_max(w: &mut WatchState) -> (u64, Nanos) {
    w.flush(&mut |_| {});
    let timer = series_of(w, DelayKind::Timer);
    (timer.total.len(), timer.total.max())
}

#[test]
fn a_java_park_is_late_from_the_clock_read_before_it_to_the_one_after_it() {
    let (tid, mut w) = parked(true);
    w.offer(&clock_read(tid, 1_032_000));
    // From 99 us + 901 us to the read at 1.032 ms.
    assert_eq!(timer_max(&mut w), (1, Nanos(32_000)));
    // Its clock not probed: from its begin probe plus 901 us to its end probe.
    let (tid, mut w) = parked(false);
    w.offer(&clock_read(tid, 1_032_000));
    assert_eq!(timer_max(&mut w), (1, Nanos(29_000)));
}

#[test]
fn time_off_its_cpu_before_the_read_counts_and_a_read_after_a_sleep_or_long_run_does_not() {
    // Preempted for 500 us after the park's end, then its read: late to the read.
    let (tid, mut w) = parked(true);
    w.offer(&switch(0, 1_031_000, tid, TaskState::RUNNING, 0));
    w.offer(&switch(0, 1_531_000, 0, TaskState::RUNNING, tid));
    w.offer(&clock_read(tid, 1_533_000));
    assert_eq!(timer_max(&mut w), (1, Nanos(533_000)));
    // Asleep after it (waiting for something else): ended at the park's end probe.
    let (tid, mut w) = parked(true);
    w.offer(&switch(0, 1_031_000, tid, TaskState::SLEEPING, 0));
    w.offer(&switch(0, 1_531_000, 0, TaskState::RUNNING, tid));
    w.offer(&clock_read(tid, 1_533_000));
    assert_eq!(timer_max(&mut w), (1, Nanos(30_000)));
    // Its next read after running 1.1 ms: not the park's.
    let (tid, mut w) = parked(true);
    w.offer(&clock_read(tid, 1_030_000 + RULES.after_park_ns + 100_000));
    assert_eq!(timer_max(&mut w), (1, Nanos(30_000)));
    // Its next park before any read: ended at the end probe.
    let (tid, mut w) = parked(true);
    w.offer(&park(tid, 1_040_000, Some(960_000)));
    assert_eq!(timer_max(&mut w), (1, Nanos(30_000)));
    // The run ends before a read: the same.
    let (_, mut w) = parked(true);
    assert_eq!(timer_max(&mut w), (1, Nanos(30_000)));
}

/// Thread `tid`'s periods `from..to`, 10 ms apart: each a park to 1 ms past its start (as
/// `parked`), its Java code reading the clock `after` its end probe.
fn periods(w: &mut WatchState, tid: i64, from: u64, to: u64, after: u64) {
    for k in from..to {
        let o = k * 10_000_000;
        w.offer(&clock_read(tid, o + 99_000));
        w.offer(&park(tid, o + 100_000, Some(901_000)));
        sleep_to(w, tid, (o + 101_000, o + 1_002_000, o + 1_020_000));
        w.offer(&park(tid, o + 1_030_000, None));
        w.offer(&clock_read(tid, o + 1_030_000 + after));
    }
}

#[test]
fn a_thread_that_reads_its_clock_right_after_each_park_is_late_to_a_read_the_host_held_back() {
    // Sixteen parks read 2 us after their return, then one read 1.5 ms after it (the vCPU
    // stopped there: no event says so, the thread seems to run): late to that read, as the
    // thread measures itself.
    let (tid, mut w) = watched(true);
    periods(&mut w, tid, 0, RULES.prompt_parks as u64, 2_000);
    periods(&mut w, tid, 16, 17, 1_500_000);
    assert_eq!(timer_max(&mut w), (17, Nanos(1_530_000)));
    // One park fewer read at once: the thread's habit is not known, the park ends at its
    // probe.
    let (tid, mut w) = watched(true);
    periods(&mut w, tid, 1, RULES.prompt_parks as u64, 2_000);
    periods(&mut w, tid, 16, 17, 1_500_000);
    assert_eq!(timer_max(&mut w), (16, Nanos(32_000)));
    // A thread that works 200 us between its park and its read: the same.
    let (tid, mut w) = watched(true);
    let work = 4 * RULES.prompt_read_ns;
    periods(&mut w, tid, 0, RULES.prompt_parks as u64, work);
    periods(&mut w, tid, 16, 17, 1_500_000);
    assert_eq!(timer_max(&mut w), (17, Nanos(work + 30_000)));
    // Prompt, then a few reads held back under 1 ms (a burst of short stalls), then one
    // 1.5 ms: still its habit, late to that read. After one read 25 ms on (work), not.
    let (tid, mut w) = watched(true);
    periods(&mut w, tid, 0, RULES.prompt_parks as u64, 2_000);
    periods(&mut w, tid, 16, 19, 400_000);
    periods(&mut w, tid, 19, 20, 1_500_000);
    assert_eq!(timer_max(&mut w), (20, Nanos(1_530_000)));
    let (tid, mut w) = watched(true);
    periods(&mut w, tid, 0, RULES.prompt_parks as u64, 2_000);
    periods(&mut w, tid, 16, 17, RULES.stalled_after_park_ns + 5_000_000);
    w.advance(RULES.merge_lag_ns + 200_000_000, &mut |_| {});
    assert_eq!(w.threads[&tid].clock.prompt, 0);
}

#[test]
fn a_read_long_before_the_park_is_not_what_its_time_counts_from() {
    let (tid, mut w) = watched(true);
    w.offer(&clock_read(tid, 1_100_000 - RULES.before_park_ns - 90_000));
    w.offer(&park(tid, 1_100_000, Some(900_000)));
    sleep_to(&mut w, tid, (1_101_000, 2_002_000, 2_020_000));
    w.offer(&park(tid, 2_030_000, None));
    w.offer(&clock_read(tid, 2_031_000));
    // From its begin probe: 1.1 ms + 900 us.
    assert_eq!(timer_max(&mut w), (1, Nanos(31_000)));
}

#[test]
fn a_process_reading_its_clock_too_often_has_its_probe_removed() {
    let (tid, mut w) = watch_this_thread(u64::MAX);
    let pid = std::process::id();
    w.jvm_clock_probed(&a_library(), pid, Ok(true));
    w.jvm_probed(&a_library(), Ok(13), true);
    assert!(
        w.jvm_notes().0[0].contains("timed from its clock reads"),
        "{:?}",
        w.jvm_notes()
    );
    // As many as allowed in a second, then one more in the same second.
    for i in 0..crate::clock::DEFAULT_LIMIT {
        w.offer(&clock_read(tid, 1_000 + i * 10_000));
    }
    assert!(w.take_clocks_to_remove().is_empty());
    w.offer(&clock_read(tid, 999_000_000));
    assert_eq!(w.take_clocks_to_remove(), vec![pid]);
    // Said in its JVM's one note.
    let (notes, _) = w.jvm_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("clock probe removed"), "{notes:?}");
    // Its parks are timed at the probes from now on.
    w.set_wait_calls(true);
    w.offer(&park(tid, 1_000_100_000, Some(900_000)));
    sleep_to(&mut w, tid, (1_000_101_000, 1_001_002_000, 1_001_020_000));
    w.offer(&park(tid, 1_001_030_000, None));
    w.offer(&clock_read(tid, 1_001_032_000));
    assert_eq!(timer_max(&mut w), (1, Nanos(30_000)));
}

#[test]
fn a_safepoint_is_timed_at_the_vm_threads_own_clock_reads_where_seen() {
    // The VM thread (current_pid 0 in `safepoint`) reads its clock at 1 us and fires the
    // begin probe at 3 us; its VM operation ends at 9 us; it reads the clock at 9.8 us (the
    // operation's timer), 11 us (the JVM's end of the safepoint) and 12.5 us (its log's
    // time stamp); the end probe at 20 us. As -Xlog:safepoint counts it: 1 to 11 us.
    let vmop = |ts, begin| {
        let probe = match begin {
            true => JvmProbe::VmopBegin,
            false => JvmProbe::VmopEnd,
        };
        let kind = Kind::Jvm {
            probe,
            process: std::process::id(),
            name: Some("FindDeadlocks".into()),
            time_ns: None,
        };
        ev(1, ts, kind)
    };
    // (The read `before` the begin probe; every time stamp 20 ms on.)
    let stop = |probed: bool, before: u64| {
        let (_, mut w) = watch_this_thread(u64::MAX);
        if probed {
            w.jvm_clock_probed(&a_library(), std::process::id(), Ok(true));
        }
        let t = |ns: u64| 20_000_000 + ns;
        for e in [
            clock_read(0, t(3_000) - before),
            safepoint(t(3_000), true),
            vmop(t(5_000), true),
            vmop(t(9_000), false),
            clock_read(0, t(9_800)),
            clock_read(0, t(11_000)),
            clock_read(0, t(12_500)),
            safepoint(t(20_000), false),
        ] {
            w.offer(&e);
        }
        w.flush(&mut |_| {});
        let s = w.jvm_stops().0.next().cloned().expect("a safepoint");
        (s.begin_ns as i64 - 20_000_000, s.end_ns as i64 - 20_000_000)
    };
    assert_eq!(stop(true, 2_000), (1_000, 11_000));
    // The host stopped the vCPU 60 us between the read and the probe: the JVM counts it.
    assert_eq!(stop(true, 62_000), (-59_000, 11_000));
    // One 1.5 ms before, the vCPU stopped that long: the JVM counts it too.
    assert_eq!(stop(true, 1_500_000).0, -1_497_000);
    // A read 11 ms before is another's: at the probe. (So is one before the JVM's previous
    // safepoint ended, and any once its clock probe is removed.)
    assert_eq!(stop(true, 11_000_000).0, 3_000);
    // Its clock not probed: at its probes.
    assert_eq!(stop(false, 2_000), (3_000, 20_000));
}

#[test]
fn a_safepoints_begin_is_never_a_read_from_before_the_previous_one_ended() {
    // The VM thread reads its clock at 1 us, begins a safepoint at 2 us, ends it at 5 us;
    // the next begins at 8 us with no read of its own seen in between.
    let (_, mut w) = watch_this_thread(u64::MAX);
    w.jvm_clock_probed(&a_library(), std::process::id(), Ok(true));
    for e in [
        clock_read(0, 1_000),
        safepoint(2_000, true),
        safepoint(5_000, false),
        safepoint(8_000, true),
        safepoint(9_000, false),
    ] {
        w.offer(&e);
    }
    w.flush(&mut |_| {});
    let begins: Vec<u64> = w.jvm_stops().0.map(|s| s.begin_ns).collect();
    assert_eq!(begins, vec![1_000, 8_000]);
}

#[test]
fn a_park_that_ends_past_its_time_with_no_timer_seen_is_late_from_that_time() {
    // Its futex wait returned (timed out) with neither the timer's expiry nor a wakeup
    // recorded: late from the time it asked for to where its Java code read the clock.
    let (tid, mut w) = watched(true);
    w.offer(&clock_read(tid, 99_000));
    w.offer(&park(tid, 100_000, Some(901_000)));
    futex_wait(&mut w, tid, 101_000, 0, 1_020_000);
    w.offer(&park(tid, 1_030_000, None));
    w.offer(&clock_read(tid, 1_032_000));
    assert_eq!(timer_max(&mut w), (1, Nanos(32_000)));
    // One that ended before its time (unparked): no lateness.
    let (tid, mut w) = watch_this_thread(u64::MAX);
    w.set_wait_calls(true);
    w.offer(&park(tid, 100_000, Some(901_000)));
    futex_wait(&mut w, tid, 101_000, 500_000, 510_000);
    w.offer(&park(tid, 520_000, None));
    w.flush(&mut |_| {});
    assert!(w
        .series()
        .iter()
        .all(|s| s.kind != DelayKind::Timer || s.total.is_empty()));
}

#[test]
fn a_park_whose_thread_then_waits_at_a_safepoints_barrier_ends_at_its_read_after_it() {
    // Back from its park at 1.03 ms, it meets a safepoint begun at 1.031 ms on its way to
    // Java code: asleep at the barrier until 3 ms, then its read: late to that read.
    let (tid, mut w) = parked(true);
    w.offer(&safepoint(1_031_000, true));
    w.offer(&switch(0, 1_032_000, tid, TaskState::SLEEPING, 0));
    w.offer(&safepoint(2_990_000, false));
    w.offer(&switch(0, 3_000_000, 0, TaskState::RUNNING, tid));
    w.offer(&clock_read(tid, 3_002_000));
    assert_eq!(timer_max(&mut w), (1, Nanos(2_002_000)));
}

/// Thread `tid` reads its clock at `read`, parks at `begin` for `asked` (its timer fires at
/// `read + asked`), is back at `back`, its park's end probe 5 us later, its read 1 us after.
fn cycle(w: &mut WatchState, tid: i64, read: u64, begin: u64, asked: u64, back: u64) {
    w.offer(&clock_read(tid, read));
    w.offer(&park(tid, begin, Some(asked)));
    sleep_to(w, tid, (begin + 1_000, read + asked, back));
    w.offer(&park(tid, back + 5_000, None));
    w.offer(&clock_read(tid, back + 6_000));
}

/// Thread `tid` parks to 1, 2 and 3 ms on time (each asked 1 us after a read).
fn on_time_to_3_ms(w: &mut WatchState, tid: i64) {
    for d in [1_000_000, 2_000_000, 3_000_000] {
        cycle(w, tid, d - 501_000, d - 500_000, 501_000, d + 20_000);
    }
}

/// Thread `tid` parks to 1, 2 and 3 ms on time; its park for 4 ms returns at 6.194 ms (read
/// at 6.2 ms), and it runs 5 and 6 ms at once (reads at 6.21 and 6.22 ms).
fn late_by_over_two_periods(w: &mut WatchState, tid: i64) {
    on_time_to_3_ms(w, tid);
    cycle(w, tid, 3_500_000, 3_501_000, 500_000, 6_194_000);
    w.offer(&clock_read(tid, 6_210_000));
    w.offer(&clock_read(tid, 6_220_000));
}

#[test]
fn periods_run_at_once_are_each_late_to_the_thread_s_own_read_of_it() {
    // 1 ms periods, each a park asked 1 us after a read. The park for 4 ms returns at
    // 6.195 ms (read at 6.2 ms); the thread runs 5 and 6 ms at once (reads at 6.21 and 6.22
    // ms), reads at 6.9 ms for 7 ms (the vCPU stopped before it) and parks 30 us later.
    let (tid, mut w) = watched(true);
    w.offer(&safepoint(10_000, true)); // a JVM
    w.offer(&safepoint(20_000, false));
    late_by_over_two_periods(&mut w, tid);
    cycle(&mut w, tid, 6_900_000, 6_930_000, 100_000, 7_020_000);
    w.flush(&mut |_| {});
    let timer = series_of(&w, DelayKind::Timer);
    assert_eq!(timer.total.len(), 7);
    assert_eq!(timer.total.max(), Nanos(2_200_000));
    // 4 ms late by 2.2 ms, 5 ms by 1.21 ms, 6 ms by 220 us (at their reads); not by 1.9 ms
    // and 900 us (to its last read) nor 1.93 ms and 930 us (to the park's begin).
    let at_most = timer.total.cumulative_counts(&[30_000, 250_000, 1_300_000]);
    assert_eq!(at_most, vec![4, 5, 6]);
}

#[test]
fn a_period_run_at_once_is_measured_at_its_own_read_where_the_reads_say_which() {
    use crate::java::measured_at;
    let at = |reads: &[u64], waits: bool| -> Vec<u64> {
        measured_at((5_000, 1_000, 2), reads, waits, 6_900)
            .map(|(due, at)| at - due)
            .collect()
    };
    // One read a period, then the one before the next wait.
    assert_eq!(at(&[6_210, 6_220, 6_900], true), [1_210, 220]);
    // Two a period (one before the wait it skips, one after).
    assert_eq!(at(&[6_205, 6_210, 6_215, 6_220, 6_900], true), [1_210, 220]);
    // No wait after them (the run ended): one a period.
    assert_eq!(at(&[6_210, 6_220], false), [1_210, 220]);
    // No such pattern, or a read before its period was due: each at the last read.
    assert_eq!(at(&[6_210, 6_900], true), [1_900, 900]);
    assert_eq!(at(&[4_000, 6_220, 6_900], true), [1_900, 900]);
    assert_eq!(
        measured_at((5_000, 1_000, 0), &[6_900], true, 6_900).count(),
        0
    );
    // No read seen at all: each where it caught up.
    assert_eq!(at(&[], true), [1_900, 900]);
    assert_eq!(at(&[], false), [1_900, 900]);
}

#[test]
fn a_read_is_where_the_thread_read_its_clock_not_where_the_probe_fired() {
    // The read after the park returned 1.032 ms; the probe at the clock's return fired 318 us
    // later (the vCPU stopped in between): late by 32 us, as the thread measures itself.
    let (tid, mut w) = parked(true);
    w.offer(&clock_read_returned(tid, 1_350_000, Some(1_032_000)));
    assert_eq!(timer_max(&mut w), (1, Nanos(32_000)));
    // A value after its probe is no time of this clock: at the probe's; and so is one too
    // long before it.
    let (tid, mut w) = parked(true);
    w.offer(&clock_read_returned(tid, 1_350_000, Some(1_360_000)));
    assert_eq!(timer_max(&mut w), (1, Nanos(350_000)));
    let (tid, mut w) = parked(true);
    let probe = 1_032_000 + RULES.read_before_probe_ns + 1_000;
    w.offer(&clock_read_returned(tid, probe, Some(1_032_000)));
    assert_eq!(timer_max(&mut w), (1, Nanos(30_000)));
}

#[test]
fn periods_run_at_once_just_before_the_end_count_in_a_jvm_known_by_its_park_probes() {
    // No safepoint seen, its libjvm.so not found yet: a JVM by its park probes. It runs 5
    // and 6 ms at once after its late park, and the run ends before it waits again.
    let (tid, mut w) = watched(true);
    late_by_over_two_periods(&mut w, tid);
    w.flush(&mut |_| {});
    let timer = series_of(&w, DelayKind::Timer);
    assert_eq!(timer.total.len(), 6);
    let at_most = timer.total.cumulative_counts(&[30_000, 250_000, 1_300_000]);
    assert_eq!(at_most, vec![3, 4, 5]);
    // On time to 3 ms, then a read at 48 ms on its way out (after a collection): no period
    // of its own, none counted.
    let (tid, mut w) = watched(true);
    on_time_to_3_ms(&mut w, tid);
    w.offer(&clock_read(tid, 48_000_000));
    w.flush(&mut |_| {});
    assert_eq!(series_of(&w, DelayKind::Timer).total.len(), 3);
}

#[test]
fn a_park_begun_long_after_its_read_counts_from_it_where_that_gives_the_next_period() {
    // On time at 1, 2 and 3 ms; it reads at 3.5 ms for 4 ms, and its park's begin probe
    // comes 1.69 ms later (the vCPU stopped in between): parkNanos(500 us), for which the
    // JVM asks the kernel for 5.69 ms. Late for 4 ms by 1.71 ms, as it measures itself.
    let held_back_from = |begin: u64, asked: u64| {
        let (tid, mut w) = watched(true);
        on_time_to_3_ms(&mut w, tid);
        w.offer(&clock_read(tid, 3_500_000));
        w.offer(&park(tid, begin, Some(asked)));
        let timer = begin + asked;
        sleep_to(&mut w, tid, (5_191_000, timer, timer + 14_000));
        w.offer(&park(tid, timer + 19_000, None));
        w.offer(&clock_read(tid, timer + 20_000));
        timer_max(&mut w)
    };
    let held_back = |asked| held_back_from(5_190_000, asked);
    assert_eq!(held_back(500_000), (4, Nanos(1_710_000)));
    // Asked 400 us: off its period, not computed from that read; from its begin probe (its
    // on-time periods' 26 us the longest). Off by less than the rule: from the read.
    assert_eq!(held_back(400_000), (4, Nanos(26_000)));
    assert_eq!(
        held_back(500_000 + RULES.on_period_ns / 2),
        (4, Nanos(1_710_000))
    );
    // The read further back than a stalled one may be: from its begin probe.
    let long_after = 3_500_000 + RULES.stalled_before_park_ns + 10_000;
    assert_eq!(held_back_from(long_after, 500_000), (4, Nanos(26_000)));
}

#[test]
fn a_park_whose_wait_call_the_host_held_back_counts_from_the_time_the_thread_asked_for() {
    // It reads at 3.5 ms for 4 ms and parks 200 us later (parkNanos(500 us)); the JVM gets
    // to its wait call 1.08 ms after that (the vCPU stopped), its own read on the way making
    // the kernel's deadline 5.28 ms. Late for 4 ms by 1.3 ms, as it measures itself.
    let (tid, mut w) = watched(true);
    on_time_to_3_ms(&mut w, tid);
    w.offer(&clock_read(tid, 3_500_000));
    w.offer(&park(tid, 3_700_000, Some(500_000)));
    sleep_to(&mut w, tid, (4_780_000, 5_280_000, 5_294_000));
    w.offer(&park(tid, 5_299_000, None));
    w.offer(&clock_read(tid, 5_300_000));
    assert_eq!(timer_max(&mut w), (4, Nanos(1_300_000)));
}

#[test]
fn a_park_begun_after_a_block_counts_from_the_read_before_the_block() {
    // It reads at 3.5 ms for 4 ms, then blocks 40 ms on its way into the park (at a
    // safepoint: off its CPU, asleep); the park begins at 43.6 ms with the 500 us it computed
    // before, and its timer fires at 44.1 ms. Late for 4 ms by 40.12 ms, as it measures
    // itself; not 20 us from its begin probe.
    let (tid, mut w) = watched(true);
    on_time_to_3_ms(&mut w, tid);
    w.offer(&clock_read(tid, 3_500_000));
    w.offer(&switch(0, 3_510_000, tid, TaskState::SLEEPING, 0));
    w.offer(&switch(0, 43_590_000, 0, TaskState::RUNNING, tid));
    w.offer(&park(tid, 43_600_000, Some(500_000)));
    sleep_to(&mut w, tid, (43_601_000, 44_100_000, 44_114_000));
    w.offer(&park(tid, 44_119_000, None));
    w.offer(&clock_read(tid, 44_120_000));
    assert_eq!(timer_max(&mut w), (4, Nanos(40_120_000)));
}

/// This test's thread as a JVM's with its clock probed (`probed`), its delays over 1 ms
/// explained, its parks seen only as
/// timed futex waits (no park probes): to 1 to 4 ms, each after a clock read 501 us before
/// its deadline and asked 501 us (the kernel's deadline 1 us later: the JVM's own read,
/// just before the call), back 20 us late, read 1 us after.
fn kernel_parks_to_4ms(probed: bool) -> (i64, WatchState) {
    kernel_parks_to(probed, 4)
}

/// The same, to 1 to `last` ms.
fn kernel_parks_to(probed: bool, last: u64) -> (i64, WatchState) {
    let (tid, mut w) = watched_above(probed, 1_000_000);
    w.offer(&safepoint(10_000, true)); // a JVM
    w.offer(&safepoint(20_000, false));
    for d in (1..=last).map(|ms| ms * 1_000_000) {
        w.offer(&clock_read(tid, d - 501_000));
        park_to(&mut w, tid, (d - 500_000, d + 1_000, d + 20_000));
        w.offer(&clock_read(tid, d + 21_000));
    }
    (tid, w)
}

#[test]
fn a_thread_that_reads_right_after_each_park_lives_a_wait_on_its_way_back_to_its_read() {
    // Its 21st park back at 21.02 ms, it sleeps in a wait of no time (a safepoint's barrier,
    // its JVM's stops not seen yet: they come from its log) until 24 ms, then reads: late to
    // that read, as it counts. A thread not known to read right after its parks (4 of
    // them): to the park's return (its earlier ones 21 us late).
    for (parks, late) in [(20, 3_012_000), (3, 21_000)] {
        let (tid, mut w) = kernel_parks_to(true, parks);
        let d = (parks + 1) * 1_000_000;
        w.offer(&clock_read(tid, d - 501_000));
        park_to(&mut w, tid, (d - 500_000, d + 1_000, d + 20_000));
        w.offer(&switch(0, d + 10_000, 0, TaskState::RUNNING, tid));
        futex_wait(&mut w, tid, d + 25_000, d + 3_000_000, d + 3_010_000);
        w.offer(&switch(0, d + 26_000, tid, TaskState::SLEEPING, 0));
        w.offer(&switch(0, d + 3_005_000, 0, TaskState::RUNNING, tid));
        w.offer(&clock_read(tid, d + 3_012_000));
        assert_eq!(timer_max(&mut w), (parks + 1, Nanos(late)), "{parks}");
    }
}

#[test]
fn a_jvms_timed_futex_wait_its_probes_do_not_mark_is_timed_from_read_to_read() {
    // Its fifth park: the kernel's deadline 5.001 ms, its own 5 ms (the read at 4.499 ms
    // plus the 501 us asked), its read after at 5.025 ms: 25 us late, as the thread counts.
    let (tid, mut w) = kernel_parks_to_4ms(true);
    w.offer(&clock_read(tid, 4_499_000));
    park_to(&mut w, tid, (4_500_000, 5_001_000, 5_020_000));
    w.offer(&clock_read(tid, 5_025_000));
    assert_eq!(timer_max(&mut w), (5, Nanos(25_000)));
    let timer = series_of(&w, DelayKind::Timer);
    assert_eq!(timer.deadlines.get(&DeadlineSource::JavaPark), Some(&5));
    // Its clock not probed: from the kernel's deadline to the call's return.
    let (tid, mut w) = kernel_parks_to_4ms(false);
    park_to(&mut w, tid, (4_500_000, 5_001_000, 5_020_000));
    assert_eq!(timer_max(&mut w), (5, Nanos(19_000)));
}

#[test]
fn a_park_its_thread_was_held_on_the_way_into_is_late_from_its_own_deadline() {
    // Its read at 4.025 ms for 5 ms (975 us to go), then held at a safepoint's barrier from
    // 4.031 ms (off its CPU from 4.032 to 9.005 ms) on its way into the park: its JVM counts
    // the 975 us from 9.012 ms, where it got free. Late from 5 ms to its read at 9.991 ms;
    // 6 to 9 ms it runs at once (a read each), then parks for 10 ms.
    let (tid, mut w) = kernel_parks_to_4ms(true);
    w.offer(&clock_read(tid, 4_025_000));
    w.offer(&safepoint(4_030_000, true));
    futex_wait(&mut w, tid, 4_031_000, 9_000_000, 9_010_000);
    w.offer(&switch(0, 4_032_000, tid, TaskState::SLEEPING, 0));
    w.offer(&switch(0, 9_005_000, 0, TaskState::RUNNING, tid));
    w.offer(&safepoint(9_008_000, false));
    park_to(&mut w, tid, (9_012_000, 9_987_000, 9_990_000));
    for read in (9_991..=9_996).map(|us| us * 1_000) {
        w.offer(&clock_read(tid, read));
    }
    park_to(&mut w, tid, (9_997_000, 10_001_000, 10_020_000));
    w.offer(&clock_read(tid, 10_021_000));
    let mut requests = Vec::new();
    w.flush(&mut |r| requests.push(r));
    let timer = series_of(&w, DelayKind::Timer);
    assert_eq!(timer.total.len(), 10);
    assert_eq!(timer.total.max(), Nanos(4_991_000));
    let asked: Vec<u64> = requests.iter().map(|r| r.deadline_ns).collect();
    assert_eq!(asked, vec![5_000_000]);
}

#[test]
fn a_park_whose_jvm_read_the_clock_again_on_the_way_in_counts_from_the_java_codes_read() {
    // The thread's read for its 21 ms park at 20.499 ms (its Java code: 501 us to go), then
    // the JVM's own at 20.7 ms (held on its way in, a handshake), which it counts the 501 us
    // from: the kernel's deadline 21.201 ms. Its own deadline is 21 ms (the earlier read, on
    // its period); back at 21.21 ms, its read at 21.211 ms: 212 us late, as it counts.
    let (tid, mut w) = kernel_parks_to(true, 20);
    w.offer(&clock_read(tid, 20_499_000));
    w.offer(&clock_read(tid, 20_700_000));
    park_to(&mut w, tid, (20_701_000, 21_201_000, 21_210_000));
    w.offer(&clock_read(tid, 21_211_000));
    assert_eq!(timer_max(&mut w), (21, Nanos(212_000)));
}
