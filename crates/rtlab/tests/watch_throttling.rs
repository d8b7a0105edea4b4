//! `rtlab watch` on real-time threads whose CPU the scheduler gives a time-sharing loop (RT
//! throttling, or the fair server of 6.12+ kernels): their delays are named throttling, never
//! preemption by the time-sharing task.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A thread of this process named `rt-periodic`, SCHED_FIFO at `prio` on `cpu`, that sleeps
/// 1 ms at a time (clock_nanosleep) until `stop`.
fn periodic_thread(
    cpu: usize,
    prio: u32,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Result<(), String>> {
    std::thread::Builder::new()
        .name("rt-periodic".into())
        .spawn(move || {
            let one = rtlab_sys::affinity::CpuList::from(vec![cpu]);
            rtlab_sys::affinity::set_current_thread_affinity(&one)
                .and_then(|()| {
                    rtlab_sys::sched::set_current_thread_scheduler(
                        rtlab_sys::sched::Policy::Fifo,
                        prio,
                    )
                })
                .map_err(|e| e.to_string())?;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        })
        .unwrap()
}

#[test]
fn real_time_threads_kept_off_their_cpu_by_the_fair_server_are_named_throttled_never_preempted() {
    // Regression: a watched SCHED_FIFO busy loop beside a SCHED_OTHER loop on its CPU waits
    // ~50 ms once a second (its delay starts when it is switched out, runnable); that read
    // "timer interrupt late while ts-loop (time-sharing) ran", as if it had been asleep. A
    // periodic FIFO thread on the same CPU waits as long: both delay kinds (wakeup, and timer
    // with the eBPF source) are checked.
    let test = "watch throttled";
    let Some((_serial, throttled_cpu)) = throttled_cpu_for(test) else {
        return;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let periodic = periodic_thread(throttled_cpu.cpu, 80, stop.clone());
    let pid = std::process::id().to_string();
    let (doc, stdout) = rtlab_json(&[
        "watch",
        "--pid",
        &pid,
        "--thread",
        "fifo-spin",
        "--thread",
        "rt-periodic",
        "--duration",
        "4s",
        "--threshold",
        "2ms",
        "--top",
        "100",
        "--quiet",
    ]);
    stop.store(true, Ordering::Relaxed);
    let periodic = periodic.join().unwrap();
    drop(throttled_cpu);
    if let Err(why) = periodic {
        return skip(test, &format!("no SCHED_FIFO thread: {why}"));
    }
    let outliers = throttle_outliers(&doc);
    if outliers.is_empty() {
        return skip(
            test,
            "no delay over 2 ms beside ts-loop: no RT throttling here",
        );
    }
    // Each thread in several of the fair server's stretches (one a second). A wakeup the
    // trace does not show (where a task the tracer does not see runs) starts no wakeup delay,
    // so the periodic thread's are counted over both kinds.
    let of = |prefix: &str, kind: &str| -> Vec<&serde_json::Value> {
        outliers
            .iter()
            .copied()
            .filter(|o| {
                let series = o["series"].as_str().unwrap();
                series.starts_with(prefix) && series.ends_with(kind)
            })
            .collect()
    };
    for (thread, kind) in [("fifo-spin/", "/wakeup"), ("rt-periodic/", "")] {
        let stretches = throttle_stretches(&of(thread, kind));
        assert!(
            stretches >= 2,
            "{thread}*{kind}: {stretches} throttled stretches in 4 s: {outliers:#?}"
        );
    }
    assert_named_throttling(&outliers);
    assert!(!stdout.contains("preempted by ts-loop"), "{stdout}");
    // The busy loop's delays start where it is switched out runnable (or woken): no part of
    // them waits for a timer.
    for o in of("fifo-spin/", "/wakeup") {
        let timer_late = o["causes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["reason"] == "timer_late_while_running");
        assert!(!timer_late, "a busy loop's timer named: {o}");
    }
}
