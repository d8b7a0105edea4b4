use super::*;

#[test]
fn timer_expiries_are_brought_to_monotonic_time_from_their_clock() {
    let ts = 5_000_000_000_000; // 5000 s since boot
    let offsets = [1_700_000_000_000_000_000, 1_700_000_037_000_000_000, 0];
    let cases = [
        (ts - 300, Some(ts - 300)),                             // monotonic
        (ts - 300 + 1_700_000_000_000_000_000, Some(ts - 300)), // realtime
        (ts - 9 + 1_700_000_037_000_000_000, Some(ts - 9)),     // TAI
        (ts + 500, Some(ts)),                                   // offset drift
        (ts + 2_000_000, None),                                 // in the future
        (0, None),                                              // not read
        (ts - 4_000_000_000_000, None),                         // over an hour before
    ];
    for (raw, want) in cases {
        assert_eq!(monotonic_expiry(raw, ts, &offsets), want, "{raw}");
    }
}

#[test]
fn a_readiness_waits_timeout_is_its_deadline_from_its_entry() {
    let entry = |call: i32, ms: i32, request: (i64, i64)| {
        let mut r = [0u8; REC as usize];
        r[OFF_TS as usize..][..8].copy_from_slice(&1_000_000_000u64.to_ne_bytes());
        r[OFF_A as usize..][..4].copy_from_slice(&call.to_ne_bytes());
        r[OFF_PID1 as usize..][..4].copy_from_slice(&ms.to_ne_bytes());
        r[OFF_PID2 as usize..][..8].copy_from_slice(&request.0.to_ne_bytes());
        r[OFF_X as usize..][..8].copy_from_slice(&request.1.to_ne_bytes());
        wait_deadline(&r, &[0; 3])
    };
    let at = |ns: u64| Some(1_000_000_000 + ns);
    // epoll_wait, epoll_pwait, poll: milliseconds (negative: none; 0: no wait at all).
    for call in [232, 281, 7] {
        assert_eq!(entry(call, 3, (0, 0)), at(3_000_000), "{call}");
        assert_eq!(entry(call, -1, (0, 0)), None, "{call}");
        assert_eq!(entry(call, 0, (0, 0)), None, "{call}");
    }
    // epoll_pwait2, ppoll, pselect6, rt_sigtimedwait: a timespec; select: a timeval.
    for call in [441, 271, 270, 128] {
        assert_eq!(entry(call, 0, (1, 250_000)), at(1_000_250_000), "{call}");
        assert_eq!(entry(call, 0, (0, 0)), None, "{call}: none, or no wait");
        assert_eq!(entry(call, 0, (0, 1_000_000_000)), None, "{call}: refused");
    }
    assert_eq!(entry(23, 0, (0, 1_500)), at(1_500_000));
    assert_eq!(
        entry(23, 0, (0, 2_500_000)),
        at(2_500_000_000),
        "past a second: seconds"
    );
    assert_eq!(entry(23, 0, (0, -1)), None);
    // Other calls' fields mean other things.
    assert_eq!(entry(0, 3, (1, 0)), None);
}

#[test]
fn jumps_land_inside_the_program() {
    let with = TaskOffsets {
        tgid: Some(12),
        pid: 100,
        prio: 104,
        cpu: Some(36),
        timer_function: 40,
        timer_expires: Some(24),
        timer_hard_expires: Some(8),
        sleeper: Some(Sleeper {
            wakeup: 0xffff_ffff_8100_0000,
            type_id: 5,
            cast: 6,
            task: 64,
            file_or_signal: [0xffff_ffff_8100_1000, 0, 0xffff_ffff_8100_2000],
        }),
    };
    let without = TaskOffsets {
        sleeper: None,
        cpu: None,
        ..with
    };
    for probe in probes() {
        let own = OwnRings {
            watched: 5,
            slots: 6,
            rings: 2,
            size: 128,
        };
        let cases = [(true, &with), (true, &without), (false, &with)];
        let variants = cases
            .into_iter()
            .flat_map(|c| [(c, None), (c, Some(own))])
            .flat_map(|v| [(v, None), (v, Some(7))]);
        for (((direct, t), own), stacks) in variants {
            let maps = Maps {
                cpus: 2,
                heads: 3,
                slots: 4,
                own,
                size: SLOTS,
                stacks,
            };
            let insns = program(&probe, t, maps, direct);
            assert!(insns.len() < 200, "{} instructions", insns.len());
            let len = insns.len() as i64;
            // Once the record is being written, no jump may skip the store of its
            // sequence number (the reader would wait on that slot for ever). (The slot's
            // lookup before that cannot fail: the index is always in range.)
            let claim = insns
                .iter()
                .position(|i| i.code == 0x7b && i.regs & 0x0f == R7 && i.off == OFF_TS)
                .unwrap() as i64;
            let seq = insns
                .iter()
                .rposition(|i| i.code == 0x7b && i.off == OFF_SEQ)
                .unwrap() as i64;
            for (i, insn) in insns.iter().enumerate() {
                let class_jmp = insn.code & 0x07 == 0x05;
                let is_call_or_exit = insn.code == 0x85 || insn.code == 0x95;
                if class_jmp && !is_call_or_exit {
                    let to = i as i64 + 1 + insn.off as i64;
                    assert!(
                        to > i as i64 && to < len,
                        "{}: jump at {i} to {to}",
                        probe.tracepoint
                    );
                    if i as i64 > claim {
                        assert!(
                            to < seq - 1,
                            "{}: jump at {i} skips the sequence number",
                            probe.tracepoint
                        );
                    }
                }
            }
            assert_eq!(insns.last().unwrap().code, 0x95, "ends with exit");
        }
    }
    // The fork probe writes no record: every jump lands inside, on its exit at the latest.
    let fork = fork_program(5, 12);
    for (i, insn) in fork.iter().enumerate() {
        if insn.code & 0x07 == 0x05 && insn.code != 0x85 && insn.code != 0x95 {
            let to = i as i64 + 1 + insn.off as i64;
            assert!(
                to > i as i64 && to < fork.len() as i64,
                "fork: jump at {i} to {to}"
            );
        }
    }
    assert_eq!(fork.last().unwrap().code, 0x95);
}

/// A recorder on every usable CPU, started by `start`, when this runs as root and it has
/// what the test needs (`ready`); else says why not.
fn recorder_on_every_cpu(
    start: impl FnOnce(&[usize]) -> Result<Recorder, TraceError>,
    ready: impl FnOnce(&Recorder) -> bool,
) -> Option<Recorder> {
    if rtlab_sys::process::effective_uid() != 0 {
        rtlab_sys::testing::say_skipped("needs root (bpf)");
        return None;
    }
    let cpus: Vec<usize> = rtlab_sys::affinity::usable_cpus().as_slice().to_vec();
    match start(&cpus) {
        Ok(r) if ready(&r) => Some(r),
        Ok(r) => {
            rtlab_sys::testing::say_skipped(&format!("{:?}", r.missing));
            None
        }
        Err(e) => {
            rtlab_sys::testing::say_skipped(&e.to_string());
            None
        }
    }
}

/// Two CPUs to pin threads to, when this runs as root on at least two (else says why not).
fn two_cpus_as_root() -> Option<(usize, usize)> {
    if rtlab_sys::process::effective_uid() != 0 {
        rtlab_sys::testing::say_skipped("needs root (bpf)");
        return None;
    }
    let cpus = rtlab_sys::affinity::usable_cpus();
    if cpus.len() < 2 {
        rtlab_sys::testing::say_skipped("needs two CPUs");
        return None;
    }
    Some((cpus.as_slice()[0], cpus.as_slice()[1]))
}

/// This thread pinned to one CPU (`here`), and a thread asleep on another (`there`).
fn asleep_on_another_cpu() -> Option<(usize, usize, Napper)> {
    let (here, there) = two_cpus_as_root()?;
    pin(here);
    let sleeper = Napper::on(there);
    std::thread::sleep(std::time::Duration::from_millis(5));
    Some((here, there, sleeper))
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) {
    let one = rtlab_sys::affinity::CpuList::from(vec![cpu]);
    rtlab_sys::affinity::set_current_thread_affinity(&one).unwrap()
}

/// A thread pinned to a CPU that sleeps until woken (by [`Napper::wake_five`]); ends when
/// dropped.
struct Napper {
    go: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    tid: i64,
}

impl Napper {
    fn on(cpu: usize) -> Napper {
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            pin(cpu);
            tid_tx.send(rtlab_sys::futex::current_tid() as i64).unwrap();
            while wait.recv().is_ok() {}
        });
        Napper {
            go: Some(go),
            thread: Some(thread),
            tid: tid_rx.recv().unwrap(),
        }
    }

    /// Wakes it five times, each once it sleeps (or after 100 ms: on a busy machine it may
    /// wait that long for its CPU), then lets it settle for 2 ms.
    fn wake_five(&self) {
        for _ in 0..5 {
            let until = rtlab_sys::time::monotonic_now_ns() + 100_000_000;
            std::thread::sleep(std::time::Duration::from_millis(2));
            while !self.asleep() && rtlab_sys::time::monotonic_now_ns() < until {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            self.go.as_ref().unwrap().send(()).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }

    /// Whether it sleeps now (its state in /proc is `S`).
    fn asleep(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{}/stat", self.tid));
        stat.ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()
                    .map(|r| r.trim_start().starts_with('S'))
            })
            .unwrap_or(false)
    }
}

impl Drop for Napper {
    fn drop(&mut self) {
        drop(self.go.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_waking_names_the_cpu_the_woken_task_last_ran_on() {
    let Some((here, there, sleeper)) = asleep_on_another_cpu() else {
        return;
    };
    let tid = sleeper.tid;
    // Only this CPU is recorded: the wakings of the thread on the other are seen here.
    let mut r = match Recorder::start(&[here], &CpuMask::of(&[here]), true, LockWaits::No, false) {
        Ok(r) => r,
        Err(e) => {
            rtlab_sys::testing::say_skipped(&e.to_string());
            return;
        }
    };
    sleeper.wake_five();
    drop(sleeper);
    let mut events = Vec::new();
    r.drain(|e| events.push(e));
    let targets: Vec<u16> = events
        .iter()
        .filter_map(|e| match &e.kind {
            Kind::Waking { task, target_cpu } if task.pid == tid => Some(*target_cpu),
            _ => None,
        })
        .collect();
    assert!(!targets.is_empty(), "no waking of {tid}: {events:?}");
    assert!(
        targets.iter().all(|&c| c as usize == there),
        "woken on CPU {there}, recorded {targets:?}"
    );
}

#[test]
fn a_cpus_ring_is_found_through_its_entry_not_its_number() {
    let Some((_, there, sleeper)) = asleep_on_another_cpu() else {
        return;
    };
    // One ring (index 0), for the second CPU: its events must land there and read back
    // with their own CPU number.
    let mut r = match Recorder::start(&[there], &CpuMask::of(&[there]), true, LockWaits::No, false)
    {
        Ok(r) => r,
        Err(e) => {
            rtlab_sys::testing::say_skipped(&e.to_string());
            return;
        }
    };
    assert_ne!(
        there, 0,
        "the test needs a CPU whose ring index differs from its number"
    );
    sleeper.wake_five();
    drop(sleeper);
    let mut events = Vec::new();
    r.drain(|e| events.push(e));
    let switches = events
        .iter()
        .filter(|e| matches!(e.kind, Kind::Switch { .. }))
        .count();
    assert!(switches >= 1, "{events:?}");
    assert!(events.iter().all(|e| e.cpu as usize == there), "{events:?}");
}

#[test]
fn only_traced_cpus_are_recorded_but_their_tasks_wakings_anywhere() {
    let Some((here, there, sleeper)) = asleep_on_another_cpu() else {
        return;
    };
    let tid = sleeper.tid;
    // Rings for both CPUs; only the sleeper's recorded at first.
    let both = [here, there];
    let mut r = match Recorder::start(&both, &CpuMask::of(&[there]), true, LockWaits::No, false) {
        Ok(r) => r,
        Err(e) => {
            rtlab_sys::testing::say_skipped(&e.to_string());
            return;
        }
    };
    let drained = |r: &mut Recorder| {
        let mut events = Vec::new();
        r.drain(|e| events.push(e));
        events
    };
    let switches_on = |events: &[Event], cpu: usize| {
        events
            .iter()
            .filter(|e| e.cpu as usize == cpu && matches!(e.kind, Kind::Switch { .. }))
            .count()
    };
    let wakings_from_here = |events: &[Event]| {
        events
            .iter()
            .filter(|e| e.cpu as usize == here)
            .filter(|e| matches!(&e.kind, Kind::Waking { task, .. } if task.pid == tid))
            .count()
    };
    // The sleeper woken five times at a time until it was asleep when a token came, at
    // least once (on a busy machine it may still be running, or waiting for its CPU, and
    // then nothing wakes it), up to twenty times.
    let woken = |r: &mut Recorder, enough: &dyn Fn(&[Event]) -> bool| {
        let mut events = Vec::new();
        for _ in 0..20 {
            sleeper.wake_five();
            events.extend(drained(r));
            if enough(&events) {
                break;
            }
        }
        events
    };
    let first = woken(&mut r, &|e| {
        wakings_from_here(e) >= 1 && switches_on(e, there) >= 1
    });
    assert_eq!(r.traced(), &CpuMask::of(&[there]));
    assert_eq!(switches_on(&first, here), 0, "{first:?}");
    assert!(switches_on(&first, there) >= 1, "{first:?}");
    // The waker's CPU is not traced, but the woken thread's is.
    assert!(wakings_from_here(&first) >= 1, "{first:?}");
    // Widened while running.
    r.set_traced(&CpuMask::of(&both)).unwrap();
    let second = woken(&mut r, &|e| {
        wakings_from_here(e) >= 1 && switches_on(e, here) >= 1
    });
    drop(sleeper);
    assert!(switches_on(&second, here) >= 1, "{second:?}");
    assert!(wakings_from_here(&second) >= 1, "{second:?}");
}

#[test]
fn pi_lock_waits_are_recorded_from_entry_to_return() {
    use rtlab_sys::futex::{lock_pi, unlock_pi, Scope};
    use std::sync::atomic::AtomicU32;
    let Some(mut r) = recorder_on_every_cpu(
        |cpus| Recorder::start(cpus, &CpuMask::of(cpus), true, LockWaits::Any, false),
        |r| r.lock_probes.is_some(),
    ) else {
        return;
    };
    // This thread holds the lock for 3 ms, three times; the other waits for it each time
    // (it takes it only once the word shows this thread as the owner).
    static WORD: AtomicU32 = AtomicU32::new(0);
    let (taken_tx, taken) = std::sync::mpsc::channel::<()>();
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        tid_tx.send(rtlab_sys::futex::current_tid() as i64).unwrap();
        while go_rx.recv().is_ok() {
            lock_pi(&WORD, Scope::Private, None).unwrap();
            unlock_pi(&WORD, Scope::Private).unwrap();
            taken_tx.send(()).unwrap();
        }
    });
    let tid = tid_rx.recv().unwrap();
    let mut holds = Vec::new();
    for _ in 0..3 {
        lock_pi(&WORD, Scope::Private, None).unwrap();
        go.send(()).unwrap();
        // Held 3 ms from the moment the waiter blocks in the kernel (the kernel marks the
        // word FUTEX_WAITERS then), however late that thread gets to run.
        let asked = rtlab_sys::time::monotonic_now_ns();
        while WORD.load(std::sync::atomic::Ordering::Acquire) & 0x8000_0000 == 0 {
            assert!(
                rtlab_sys::time::monotonic_now_ns() < asked + 5_000_000_000,
                "the waiter never blocked"
            );
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        std::thread::sleep(std::time::Duration::from_millis(3));
        let released = rtlab_sys::time::monotonic_now_ns();
        unlock_pi(&WORD, Scope::Private).unwrap();
        taken.recv().unwrap();
        holds.push(released);
    }
    drop(go);
    waiter.join().unwrap();
    let mut events = Vec::new();
    r.drain(|e| events.push(e));
    events.sort_by_key(|e| e.ts_ns);
    let mut waits = Vec::new();
    let mut since = None;
    for e in events.iter().filter(|e| e.current_pid == tid) {
        match e.kind {
            Kind::LockPi { trylock } => {
                assert!(!trylock);
                since = Some(e.ts_ns);
            }
            Kind::LockPiDone { ret } => {
                assert_eq!(ret, 0, "it got the lock");
                waits.push((since.take().expect("an entry before the return"), e.ts_ns));
            }
            _ => {}
        }
    }
    assert_eq!(waits.len(), 3, "{waits:?}");
    for ((from, to), released) in waits.iter().zip(&holds) {
        assert!(
            to - from >= 2_000_000 && *to >= *released,
            "waited {} ns, returned {} ns after the release",
            to - from,
            *to as i64 - *released as i64
        );
    }
}

#[test]
fn a_watched_threads_wait_calls_are_recorded_with_their_deadlines_and_no_one_elses() {
    let Some(mut r) = recorder_on_every_cpu(
        |cpus| Recorder::start(cpus, &CpuMask::of(cpus), true, LockWaits::No, true),
        |r| r.records_wait_calls(),
    ) else {
        return;
    };
    // Two threads sleep to the same absolute deadlines; the test looks at one.
    let sleeper = |deadlines: Vec<u64>| {
        std::thread::spawn(move || {
            let tid = rtlab_sys::futex::current_tid();
            for d in &deadlines {
                rtlab_sys::time::sleep_until_monotonic_ns(*d).unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(1)); // nanosleep, relative
            tid as i64
        })
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let watched_thread = std::thread::spawn(move || {
        tx.send(rtlab_sys::futex::current_tid()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let start = rtlab_sys::time::monotonic_now_ns();
        let deadlines: Vec<u64> = (1..=5).map(|i| start + i * 2_000_000).collect();
        let inner = sleeper(deadlines.clone());
        inner.join().unwrap();
        for d in &deadlines {
            rtlab_sys::time::sleep_until_monotonic_ns(*d + 20_000_000).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        // Timed futex waits (FUTEX_WAIT_BITSET, absolute), which nothing wakes.
        let word = std::sync::atomic::AtomicU32::new(0);
        for d in &deadlines {
            let scope = rtlab_sys::futex::Scope::Private;
            rtlab_sys::futex::wait_until(&word, scope, 0, Some(*d + 40_000_000));
        }
        deadlines
    });
    let tid = rx.recv().unwrap();
    r.set_watched(&[std::process::id()].into_iter().collect())
        .unwrap();
    let others: Vec<u32> = (0..3)
        .filter_map(|_| {
            let mut c = std::process::Command::new("sleep")
                .arg("0.01")
                .spawn()
                .ok()?;
            let pid = c.id();
            c.wait().ok()?;
            Some(pid)
        })
        .collect();
    assert!(!others.is_empty());
    let deadlines = watched_thread.join().unwrap();
    let mut events = Vec::new();
    r.drain(|e| events.push(e));
    r.set_watched(&Default::default()).unwrap();
    // The rings are read one after another: a thread that moved between CPUs has its
    // events out of time order across them.
    events.sort_by_key(|e| e.ts_ns);
    let mine: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e.kind, Kind::WaitEnter { .. } | Kind::WaitExit { .. }))
        .collect();
    // Another process's sleeps (run meanwhile) are not recorded.
    assert!(
        !mine
            .iter()
            .any(|e| others.contains(&(e.current_pid as u32))),
        "only the watched process's"
    );
    let mine: Vec<&Event> = mine
        .into_iter()
        .filter(|e| e.current_pid == tid as i64)
        .collect();
    // The deadlines the entries of wait call `nr` asked for, in order.
    let asked_by = |nr: i32| -> Vec<u64> {
        mine.iter()
            .filter_map(|e| match e.kind {
                Kind::WaitEnter { call, deadline_ns } if call == nr => deadline_ns,
                _ => None,
            })
            .collect()
    };
    let asked = asked_by(SYS_CLOCK_NANOSLEEP);
    let want: Vec<u64> = deadlines.iter().map(|d| d + 20_000_000).collect();
    assert!(
        asked.windows(want.len()).any(|w| w == want.as_slice()),
        "each absolute deadline, as asked: {asked:?}"
    );
    let returns = mine
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                Kind::WaitExit {
                    call: SYS_CLOCK_NANOSLEEP | SYS_NANOSLEEP,
                    ret: 0
                }
            )
        })
        .count();
    assert!(returns >= 6, "{returns}: the five and the sleep of 1 ms");
    // A relative sleep's deadline is its entry plus the request (std's sleep of 1 ms).
    let relative: Vec<u64> = mine
        .iter()
        .filter_map(|e| match e.kind {
            Kind::WaitEnter {
                deadline_ns: Some(d),
                ..
            } if d < e.ts_ns + 5_000_000 => Some(d - e.ts_ns),
            _ => None,
        })
        .collect();
    assert!(relative.contains(&1_000_000), "{relative:?}");
    // A timed futex wait's deadline is its absolute timeout, and it returns -ETIMEDOUT.
    let futex_asked = asked_by(SYS_FUTEX);
    let want: Vec<u64> = deadlines.iter().map(|d| d + 40_000_000).collect();
    assert!(
        futex_asked
            .windows(want.len())
            .any(|w| w == want.as_slice()),
        "each futex timeout, as asked: {futex_asked:?}"
    );
    let timed_out = mine
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                Kind::WaitExit {
                    call: SYS_FUTEX,
                    ret: -110
                }
            )
        })
        .count();
    assert!(timed_out >= 5, "{timed_out} futex timeouts");
}

#[test]
fn task_states_print_as_sched_switch_does() {
    let text = |p, s| TaskState::from_kernel(p, s).to_string();
    assert_eq!(text(true, 1), "R+");
    assert_eq!(text(false, 0), "R");
    assert_eq!(text(false, 1), "S");
    assert_eq!(text(false, 2), "D");
    assert_eq!(
        text(false, 0x402),
        "D",
        "bits past the reported ones are not shown"
    );
    for t in ["R", "R+", "S", "D", "S|D", "I"] {
        assert_eq!(TaskState::parse(t).to_string(), t);
    }
    assert!(TaskState::parse("R+").is_runnable() && TaskState::parse("R").is_runnable());
    assert!(!TaskState::parse("S").is_runnable() && !TaskState::parse("?").is_runnable());
    assert_eq!(TaskState::parse("W").to_string(), "?");
}

/// What `twenty_sleeps` recorded: the recorder, its events, this thread's TID, the CPU,
/// the sleeps' deadlines and how many times the kernel counted this thread going off its
/// CPU to wait meanwhile.
type Sleeps = (Recorder, Vec<Event>, i64, usize, Vec<u64>, u64);

/// The kernel's count of this thread's voluntary context switches.
fn voluntary_switches() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// This thread, pinned to one CPU and recorded, sleeps 200 us twenty times, to absolute
/// CLOCK_MONOTONIC deadlines (`None`: not root, or no eBPF).
fn twenty_sleeps(wakings: bool) -> Option<Sleeps> {
    if rtlab_sys::process::effective_uid() != 0 {
        rtlab_sys::testing::say_skipped("needs root (bpf)");
        return None;
    }
    let cpu = rtlab_sys::affinity::usable_cpus().as_slice()[0];
    rtlab_sys::affinity::set_current_thread_affinity(&rtlab_sys::affinity::CpuList::from(vec![
        cpu,
    ]))
    .unwrap();
    let mut r = match Recorder::start(&[cpu], &CpuMask::of(&[cpu]), wakings, LockWaits::No, false) {
        Ok(r) => r,
        Err(e) => {
            rtlab_sys::testing::say_skipped(&e.to_string());
            return None;
        }
    };
    let tid = rtlab_sys::futex::current_tid() as i64;
    let mut deadlines = Vec::new();
    let before = voluntary_switches();
    for _ in 0..20 {
        let deadline = rtlab_sys::time::monotonic_now_ns() + 200_000;
        rtlab_sys::time::sleep_until_monotonic_ns(deadline).unwrap();
        deadlines.push(deadline);
    }
    let slept = voluntary_switches() - before;
    let mut events = Vec::new();
    r.drain(|e| events.push(e));
    Some((r, events, tid, cpu, deadlines, slept))
}

#[test]
fn records_this_threads_switches_with_names_and_priorities() {
    let Some((r, events, tid, cpu, deadlines, slept)) = twenty_sleeps(true) else {
        return;
    };
    // (A storm of other tasks' switches fills a ring of every task's events: what is lost
    // is counted, and then the thread's own switches cannot all be checked.)
    if r.lost() > 0 {
        let why = format!("{} events lost beside this load", r.lost());
        return rtlab_sys::testing::say_skipped(&why);
    }
    // A sleep whose timer fired before the thread got off its CPU (the VM's vCPU held
    // back by its host for 200 us) never switches: the kernel's own count is the truth.
    assert!(slept >= 10, "only {slept} of 20 sleeps went off the CPU");
    let me = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
    let switches_out = events
        .iter()
        .filter(|e| {
            matches!(&e.kind, Kind::Switch { prev, prev_state, .. }
                if prev.pid == tid && &*prev.comm == me.trim_end() && *prev_state == TaskState::SLEEPING)
        })
        .count();
    assert_eq!(
        switches_out as u64, slept,
        "{switches_out} of the {slept} sleeps the kernel counted: {events:?}"
    );
    assert!(
        events.iter().all(|e| e.cpu as usize == cpu),
        "only the recorded CPU"
    );
    // Records come in slot order. An interrupt arriving between an event's timestamp and
    // its slot takes the slot first (the reader's history sorts them): only there, and
    // by little, may a record be older than the one before it (seen under stress-ng).
    let interrupt = |e: &Event| {
        !matches!(
            e.kind,
            Kind::Switch { .. } | Kind::Waking { .. } | Kind::Migrate { .. }
        )
    };
    for w in events.windows(2).filter(|w| w[1].ts_ns < w[0].ts_ns) {
        assert!(interrupt(&w[0]) || interrupt(&w[1]), "out of order: {w:?}");
        assert!(
            w[0].ts_ns - w[1].ts_ns < 1_000_000,
            "far out of order: {w:?}"
        );
    }
    let now = rtlab_sys::time::monotonic_now_ns();
    assert!(
        events
            .iter()
            .all(|e| e.ts_ns <= now && e.ts_ns + 10_000_000_000 > now),
        "CLOCK_MONOTONIC stamps"
    );
    let wakings = events
        .iter()
        .filter(|e| matches!(&e.kind, Kind::Waking { task, .. } if task.pid == tid))
        .count();
    assert!(wakings >= 19, "{wakings} wakings of this thread");
    if r.names_timer_wakeups {
        let expiries: Vec<(u64, Option<u64>, u64)> = events
            .iter()
            .filter_map(|e| match &e.kind {
                Kind::HrtimerEntry {
                    function,
                    task: Some(t),
                    expires_ns,
                    slack_ns,
                    ..
                } if t.pid == tid && &**function == "hrtimer_wakeup" => {
                    Some((e.ts_ns, *expires_ns, *slack_ns))
                }
                _ => None,
            })
            .collect();
        assert!(
            expiries.len() >= 19,
            "{expiries:?}: sleep timers of this thread"
        );
        // Each timer carries the deadline it was set for (and expired at or after it)
        // and this thread's timer slack.
        let slack = rtlab_sys::slack::current_timer_slack_ns().unwrap();
        for (at, expires, slack_ns) in &expiries {
            let expires = expires.expect("the expiry is read");
            assert!(
                deadlines.contains(&expires),
                "{expires} not in {deadlines:?}"
            );
            assert!(*at >= expires, "expired at {at}, before {expires}");
            assert_eq!(*slack_ns, slack, "the timer's slack");
        }
    }
}

#[test]
fn timer_waits_alone_need_no_sched_waking() {
    let Some((r, events, tid, _, _, _)) = twenty_sleeps(false) else {
        return;
    };
    let wakings = events
        .iter()
        .filter(|e| matches!(e.kind, Kind::Waking { .. }))
        .count();
    if !r.names_timer_wakeups {
        assert!(
            wakings > 0,
            "sched_waking stays when no timer names its task"
        );
        rtlab_sys::testing::say_skipped("this kernel lets no program name a sleep timer's task");
        return;
    }
    assert_eq!(wakings, 0, "sched_waking left out");
    // (Beside a storm of switches the ring of every task's events overflows: the expiries
    // lost with them cannot be counted; as in the test of the thread's own switches.)
    if r.lost() > 0 {
        let why = format!("{} events lost beside this load", r.lost());
        return rtlab_sys::testing::say_skipped(&why);
    }
    let named: Vec<&Event> = events
        .iter()
        .filter(|e| e.kind.woken().is_some_and(|t| t.pid == tid))
        .collect();
    let mine: Vec<&Event> = events
        .iter()
        .filter(|e| e.current_pid == tid || e.kind.woken().is_some_and(|t| t.pid == tid))
        .collect();
    assert!(
        named.len() >= 19,
        "{} of 20 sleeps (of {} events, the thread's: {mine:?})",
        named.len(),
        events.len()
    );
    assert!(named
        .iter()
        .all(|e| matches!(&e.kind, Kind::HrtimerEntry { function, .. } if &**function == "hrtimer_wakeup")));
    // Each expiry comes before the thread runs again.
    for e in &named {
        assert!(events.iter().any(|s| s.ts_ns >= e.ts_ns
            && matches!(&s.kind, Kind::Switch { next, .. } if next.pid == tid)));
    }
}

#[test]
fn a_watched_process_keeps_its_events_when_other_tasks_overflow_their_ring() {
    let Some((here, _)) = two_cpus_as_root() else {
        return;
    };
    if !std::path::Path::new("/usr/bin/taskset").exists() {
        rtlab_sys::testing::say_skipped("needs taskset");
        return;
    }
    let cpus: Vec<usize> = rtlab_sys::affinity::usable_cpus().as_slice().to_vec();
    let setup = Setup {
        wakings: true,
        locks: LockWaits::No,
        wait_calls: true,
        watched: true,
        follow_forks: false,
        // A ring of 64 for everything else: overflowed at once by the pipe below.
        rings: Rings {
            slots: 64,
            own_slots: OWN_SLOTS,
        },
        stacks: false,
    };
    let mut r = match Recorder::start_with(&cpus, &CpuMask::of(&cpus), setup) {
        Ok(r) if r.has_own_rings() && r.records_wait_calls() => r,
        Ok(r) => {
            rtlab_sys::testing::say_skipped(&format!(
                "no rings of the watched processes' own ({:?})",
                r.missing
            ));
            return;
        }
        Err(e) => {
            rtlab_sys::testing::say_skipped(&e.to_string());
            return;
        }
    };
    r.set_watched(&[std::process::id()].into_iter().collect())
        .unwrap();
    // Another process's byte-by-byte pipe on the watched thread's CPU: a switch and a
    // wakeup per byte, hundreds of thousands of events.
    let mut noise = std::process::Command::new("taskset")
        .args(["-c", &here.to_string(), "sh", "-c"])
        .arg("dd if=/dev/zero bs=1 count=400000 2>/dev/null | dd bs=1 of=/dev/null 2>/dev/null")
        .spawn()
        .unwrap();
    let sleeps = 300;
    let watched = std::thread::spawn(move || {
        pin(here);
        for _ in 0..sleeps {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        rtlab_sys::futex::current_tid() as i64
    });
    let mut events = Vec::new();
    while !watched.is_finished() {
        std::thread::sleep(std::time::Duration::from_millis(10));
        r.drain(|e| events.push(e));
    }
    let tid = watched.join().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(10));
    r.drain(|e| events.push(e));
    let _ = noise.kill();
    let _ = noise.wait();
    let returns = events
        .iter()
        .filter(|e| e.current_pid == tid && matches!(e.kind, Kind::WaitExit { .. }))
        .count();
    let lost_others = events.iter().any(|e| matches!(e.kind, Kind::LostOthers(_)));
    assert!(
        r.lost() > 0 && lost_others,
        "the ring of 64 overflowed: {} lost, LostOthers {lost_others}, {} events",
        r.lost(),
        events.len()
    );
    assert_eq!(
        r.lost_own(),
        0,
        "none of the watched process's own events lost"
    );
    assert!(!events.iter().any(|e| matches!(e.kind, Kind::Lost(_))));
    assert!(
        returns >= sleeps,
        "{returns} of {sleeps} sleeps' returns recorded"
    );
    // Its switches are there too, the others' only where their ring still held them.
    let switches_in = events
        .iter()
        .filter(|e| matches!(&e.kind, Kind::Switch { next, .. } if next.pid == tid))
        .count();
    // (A sleep whose timer fired before the thread got to switch out - its virtual CPU
    // stolen for a millisecond by the host - returns with no switch: a few may lack one.)
    assert!(
        switches_in >= sleeps - sleeps / 100,
        "{switches_in} switches to it"
    );
}

#[test]
fn stacks_no_kept_event_refers_to_are_removed_from_the_stack_map() {
    // Switches record the stack of the task leaving the CPU; once no event kept refers to a
    // stack, the sweep removes it from the map (which would otherwise refuse every other
    // stack hashing to its bucket for the rest of the run), and only those.
    let setup = Setup {
        wakings: true,
        locks: LockWaits::No,
        wait_calls: false,
        watched: false,
        follow_forks: false,
        rings: Rings::default(),
        stacks: true,
    };
    let Some(mut r) = recorder_on_every_cpu(
        |cpus| Recorder::start_with(cpus, &CpuMask::of(cpus), setup),
        |r| r.stack_map.is_some(),
    ) else {
        return;
    };
    let mut ids = Vec::new();
    let drain = |r: &mut Recorder, ids: &mut Vec<(u32, u64)>| {
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        r.drain(|e| {
            if let Kind::Stack { id, .. } = e.kind {
                ids.push((id, e.ts_ns));
            }
        });
    };
    drain(&mut r, &mut ids);
    let split = rtlab_sys::time::monotonic_now_ns();
    let before: Vec<u32> = ids.iter().map(|&(id, _)| id).collect();
    assert!(!before.is_empty(), "no stack recorded");
    assert!(r.stack(before[0]).is_some());
    let mut later = Vec::new();
    drain(&mut r, &mut later);
    // Referred to since the split, by time (a ring read in the second drain can still hold
    // records from before it, beside a storm of other work).
    let newer: std::collections::HashSet<u32> = (ids.iter().chain(&later))
        .filter(|&&(_, ts)| ts >= split)
        .map(|&(id, _)| id)
        .collect();
    let now = rtlab_sys::time::monotonic_now_ns();
    let removed = r.forget_stacks(split, now);
    assert!(removed > 0, "{} stacks, none removed", before.len());
    // Those seen again after the split are kept; the rest gone from the map (a switch since
    // may have put one of them back: not all of them).
    for id in &before {
        assert_eq!(
            r.stacks_seen.contains_key(id),
            newer.contains(id),
            "stack {id}"
        );
    }
    let gone: Vec<&u32> = before.iter().filter(|id| !newer.contains(id)).collect();
    assert!(
        gone.iter().any(|id| r.stack(**id).is_none()),
        "{} stacks removed, all still in the map",
        gone.len()
    );
    // Not again before the sweep's interval.
    assert_eq!(r.forget_stacks(u64::MAX, now + 1), 0);
}

/// A recorder of every usable CPU, when this runs as root on two or more (else says why not).
fn recorder_on_two_cpus() -> Option<Recorder> {
    two_cpus_as_root()?;
    let all = rtlab_sys::affinity::usable_cpus();
    let cpus = all.as_slice();
    match Recorder::start(cpus, &CpuMask::of(cpus), true, LockWaits::No, false) {
        Ok(r) => Some(r),
        Err(e) => {
            rtlab_sys::testing::say_skipped(&e.to_string());
            None
        }
    }
}

#[test]
fn a_task_that_ended_before_its_events_were_read_is_named_by_its_end() {
    // A short-lived task (a shell loop's `sleep`, a pool's worker) is gone from /proc by the
    // time its events are read: its name comes from its end, never `<...>`.
    let Some(mut r) = recorder_on_two_cpus() else {
        return;
    };
    if r.missing
        .iter()
        .any(|m| m.to_string() == "sched_process_exit")
    {
        return rtlab_sys::testing::say_skipped("no sched_process_exit here");
    }
    let ended = std::thread::Builder::new()
        .name("rtlab-ends".into())
        .spawn(|| {
            for _ in 0..3 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            rtlab_sys::futex::current_tid() as i64
        })
        .unwrap();
    let tid = ended.join().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(!std::path::Path::new(&format!("/proc/{tid}")).exists());
    let mut names = Vec::new();
    r.drain(|e| {
        if let Kind::Switch { prev, next, .. } = &e.kind {
            for t in [prev, next] {
                if t.pid == tid {
                    names.push(t.comm.to_string());
                }
            }
        }
    });
    assert!(!names.is_empty(), "no switch of the task seen");
    assert!(names.iter().all(|n| n == "rtlab-ends"), "{names:?}");
}

#[test]
fn a_program_started_and_ended_between_two_reads_is_named_by_its_exec() {
    // Its /proc entry gone and its end record possibly in a later read: the fork and exec
    // records name it (the exec's name, the later one, whichever ring is read first).
    let Some(mut r) = recorder_on_two_cpus() else {
        return;
    };
    let missing: Vec<String> = r.missing.iter().map(|m| m.to_string()).collect();
    if ["sched_process_fork", "sched_process_exec"]
        .iter()
        .any(|p| missing.iter().any(|m| m == p))
    {
        return rtlab_sys::testing::say_skipped("no sched_process_fork or _exec here");
    }
    let mut pids = Vec::new();
    for _ in 0..3 {
        let mut spawned = std::process::Command::new("sleep")
            .arg("0.002")
            .spawn()
            .unwrap();
        pids.push(spawned.id() as i64);
        spawned.wait().unwrap();
    }
    r.drain(|_| {});
    for pid in pids {
        assert_eq!(r.names.born_as(pid), Some("sleep"), "pid {pid}");
    }
}

#[test]
#[cfg(target_arch = "x86_64")]
fn a_32_bit_system_call_is_not_read_as_the_64_bit_call_of_its_number() {
    // i386's call 230 (`lgetxattr`, on a NULL path: EFAULT at once) has the number of
    // x86-64's `clock_nanosleep`; only the real sleep after it is a wait.
    let Some(mut r) = recorder_on_every_cpu(
        |cpus| Recorder::start(cpus, &CpuMask::of(cpus), true, LockWaits::No, true),
        |r| r.records_wait_calls(),
    ) else {
        return;
    };
    r.set_watched(&[std::process::id()].into_iter().collect())
        .unwrap();
    let tid = rtlab_sys::futex::current_tid() as i64;
    let compat = rtlab_sys::testing::i386_syscall(SYS_CLOCK_NANOSLEEP, [0, 0, 0]);
    let deadline = rtlab_sys::time::monotonic_now_ns() + 1_000_000;
    rtlab_sys::time::sleep_until_monotonic_ns(deadline).unwrap();
    let mut events = Vec::new();
    r.drain(|e| events.push(e));
    r.set_watched(&Default::default()).unwrap();
    if compat == -38 {
        return rtlab_sys::testing::say_skipped("no 32-bit system calls here (ia32_emulation)");
    }
    assert_eq!(compat, -14, "i386's lgetxattr ran (EFAULT)");
    let asked: Vec<Option<u64>> = events
        .iter()
        .filter(|e| e.current_pid == tid)
        .filter_map(|e| match e.kind {
            Kind::WaitEnter {
                call: SYS_CLOCK_NANOSLEEP,
                deadline_ns,
            } => Some(deadline_ns),
            _ => None,
        })
        .collect();
    assert_eq!(
        asked,
        vec![Some(deadline)],
        "only the 64-bit sleep is a wait"
    );
}
