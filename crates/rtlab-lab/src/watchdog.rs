//! The watchdog of every run (rtkit's canary design): rtlab starts real-time threads
//! (measuring threads, hogs, ipc and net peers) and relies on nothing else to keep them from
//! starving a CPU, not even the kernel's RT throttling, which `rtlab check` itself advises
//! turning off.
//!
//! One SCHED_OTHER canary thread per usable CPU, pinned there, ticks a counter every
//! [`CANARY_PERIOD_NS`]. A SCHED_FIFO 99 watchdog thread (above every real-time thread rtlab
//! starts but the bounded `hog`, which always leaves its CPU part of each period) looks every
//! [`TICK_NS`]: a canary that did not tick while the watchdog itself kept running for the
//! whole limit means ordinary work on that CPU has been starved that long. The watchdog then
//! demotes every real-time thread of this process and of its child processes to SCHED_OTHER
//! and says so in the run's warnings. A pause of the whole machine (a VM stall) stops the
//! watchdog too and is not mistaken for starvation: only ticks the watchdog saw count.
//!
//! Cost on the measured CPUs: one wakeup of the watchdog every [`TICK_NS`] (a few
//! microseconds at FIFO 99) and one SCHED_OTHER wakeup per CPU every [`CANARY_PERIOD_NS`].

use rtlab_stats::Nanos;
use rtlab_sys::affinity::{set_current_thread_affinity, usable_cpus, CpuList};
use rtlab_sys::sched::{demote_realtime_threads, set_current_thread_scheduler, Policy};
use rtlab_sys::time::{monotonic_now_ns, sleep_until_monotonic_ns};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The highest real-time priority of a thread that never yields its CPU (a noise spinner, a
/// busy-polling ipc end): the watchdog runs at 99 and must be able to run over it (two at 99
/// would take turns only by round robin or not at all, and Ctrl-C would never be seen).
pub const MAX_SPINNER_PRIO: u32 = 98;

/// Refuses a priority above [`MAX_SPINNER_PRIO`] for threads that never yield.
pub fn check_spinner_prio(policy: Policy, prio: u32, who: &str) -> Result<(), crate::LabError> {
    if policy.is_realtime() && prio > MAX_SPINNER_PRIO {
        return Err(crate::LabError::bad(
            "prio",
            format!(
                "{prio}: {who} never yield their CPU, so they run at most at \
                 {MAX_SPINNER_PRIO} (99 is the watchdog's, which must run over them)"
            ),
        ));
    }
    Ok(())
}

/// How long ordinary work on a CPU may be starved before the watchdog acts.
pub const STARVATION_LIMIT: Nanos = Nanos::from_secs(5);
/// The watchdog's period.
pub const TICK_NS: u64 = 500_000_000;
/// A canary's period.
pub const CANARY_PERIOD_NS: u64 = 250_000_000;
/// Threads here need little stack (they are locked in memory under mlockall).
const STACK: usize = 64 * 1024;

/// A running watchdog; [`Watchdog::stop`] (or drop) ends its threads.
#[derive(Debug)]
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    tripped: Arc<Mutex<Option<String>>>,
}

impl Watchdog {
    /// Starts the canaries and the watchdog; acts after `limit` of starvation. Threads that
    /// cannot start (no CPU to pin to, no SCHED_FIFO) degrade it, never the run.
    pub fn start(limit: Nanos) -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let tripped = Arc::new(Mutex::new(None));
        let mut threads = Vec::new();
        let mut canaries = Vec::new();
        // A canary ticks several times per limit, or a short limit would trip between two
        // ordinary ticks (a test's 100 ms against the 250 ms period did, on the wrong CPU).
        let period = CANARY_PERIOD_NS.min(limit.get() / 4).max(1_000_000);
        for cpu in usable_cpus().as_slice().iter().copied() {
            let ticks = Arc::new(AtomicU64::new(0));
            let (stop, counter) = (stop.clone(), ticks.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("rtlab-canary{cpu}"))
                .stack_size(STACK)
                .spawn(move || canary(cpu, period, &stop, &counter));
            if let Ok(t) = spawned {
                threads.push(t);
                canaries.push((cpu, ticks));
            }
        }
        let (stop2, tripped2) = (stop.clone(), tripped.clone());
        if let Ok(t) = std::thread::Builder::new()
            .name("rtlab-watchdog".into())
            .stack_size(STACK)
            .spawn(move || watch(&canaries, limit, &stop2, &tripped2))
        {
            threads.push(t);
        }
        Watchdog {
            stop,
            threads,
            tripped,
        }
    }

    /// Stops the threads; returns what the watchdog did, if it had to act.
    pub fn stop(mut self) -> Option<String> {
        self.shutdown();
        self.tripped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Sleeps until `deadline_ns` or the stop flag, in steps short enough to stop promptly.
fn sleep_until(deadline_ns: u64, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) && monotonic_now_ns() < deadline_ns {
        let _ = sleep_until_monotonic_ns(deadline_ns.min(monotonic_now_ns() + 50_000_000));
    }
}

fn canary(cpu: usize, period: u64, stop: &AtomicBool, ticks: &AtomicU64) {
    // Unpinned, a canary would run wherever there is room and prove nothing about `cpu`.
    if set_current_thread_affinity(&CpuList::from(vec![cpu])).is_err() {
        return;
    }
    let mut next = monotonic_now_ns();
    while !stop.load(Ordering::Relaxed) {
        // Relaxed: a counter compared with itself; no data travels with it.
        ticks.fetch_add(1, Ordering::Relaxed);
        next += period;
        sleep_until(next, stop);
    }
}

fn watch(
    canaries: &[(usize, Arc<AtomicU64>)],
    limit: Nanos,
    stop: &AtomicBool,
    tripped: &Mutex<Option<String>>,
) {
    let _ = set_current_thread_scheduler(Policy::Fifo, 99);
    let me = rtlab_sys::futex::current_tid() as i32;
    let tick = TICK_NS.min(limit.get() / 2).max(1_000_000);
    let mut last: Vec<u64> = canaries
        .iter()
        .map(|(_, t)| t.load(Ordering::Relaxed))
        .collect();
    let mut starved_ns = vec![0u64; canaries.len()];
    let mut next = monotonic_now_ns() + tick;
    while !stop.load(Ordering::Relaxed) {
        sleep_until(next, stop);
        let now = monotonic_now_ns();
        // Only the time the watchdog itself was running counts: after a pause of the whole
        // machine it wakes late, and that gap says nothing about the canaries.
        let seen = tick.min(now.saturating_sub(next - tick));
        next = now + tick;
        for (i, (cpu, ticks)) in canaries.iter().enumerate() {
            let t = ticks.load(Ordering::Relaxed);
            if t != last[i] {
                (last[i], starved_ns[i]) = (t, 0);
                continue;
            }
            starved_ns[i] += seen;
            if starved_ns[i] >= limit.get() {
                let demoted = demote_all(me);
                let message = format!(
                    "watchdog: ordinary work on CPU {cpu} could not run for {}; {demoted} \
                     real-time threads of rtlab were demoted to SCHED_OTHER (what was measured \
                     after that is not real-time)",
                    Nanos(starved_ns[i])
                );
                starved_ns[i] = 0;
                let mut slot = tripped.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert(message);
            }
        }
    }
}

/// Demotes the real-time threads of this process (but the watchdog's) and of its children.
fn demote_all(watchdog_tid: i32) -> usize {
    let me = std::process::id();
    let mut demoted = demote_realtime_threads(me, &[watchdog_tid]);
    for child in rtlab_sys::procfs::children_of(me) {
        demoted += demote_realtime_threads(child, &[]);
    }
    demoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_starving_fifo_spinner_is_demoted_and_reported() {
        // Regression (hardening #8): rtlab relied on RT throttling alone.
        if !rtlab_sys::probe::can_use_fifo(50) {
            rtlab_sys::testing::say_skipped("needs SCHED_FIFO (root)");
            return;
        }
        let watchdog = Watchdog::start(Nanos::from_millis(200));
        let cpu = usable_cpus().as_slice()[0];
        // The spinner starves its CPU's canary for 1.5 s, far past the 200 ms limit (RT
        // throttling would let the canary run only after 950 ms).
        let spinner = std::thread::spawn(move || {
            set_current_thread_affinity(&CpuList::from(vec![cpu])).unwrap();
            set_current_thread_scheduler(Policy::Fifo, 50).unwrap();
            let end = monotonic_now_ns() + 1_500_000_000;
            while monotonic_now_ns() < end {
                std::hint::spin_loop();
            }
            rtlab_sys::sched::current_thread_scheduler().0
        });
        let policy_after = spinner.join().unwrap();
        let message = watchdog.stop().expect("the watchdog acted");
        assert_eq!(policy_after, Some(Policy::Other), "{message}");
        assert!(message.contains(&format!("CPU {cpu}")), "{message}");
    }

    #[test]
    fn a_quiet_run_leaves_the_watchdog_silent() {
        let watchdog = Watchdog::start(Nanos::from_millis(600));
        // A witness of its own on each CPU: a time-sharing thread's longest wait to run.
        // Beside other work (another test's real-time spinner, a storm of other tasks)
        // ordinary work may really be held that long: then the run was not quiet.
        let stop = Arc::new(AtomicBool::new(false));
        let witnesses: Vec<_> = usable_cpus()
            .as_slice()
            .iter()
            .map(|&cpu| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let _ = set_current_thread_affinity(&CpuList::from(vec![cpu]));
                    let (mut last, mut longest) = (monotonic_now_ns(), 0);
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        let now = monotonic_now_ns();
                        longest = longest.max(now - last);
                        last = now;
                    }
                    (cpu, longest)
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(1_500));
        let tripped = watchdog.stop();
        stop.store(true, Ordering::Relaxed);
        let held: Vec<(usize, u64)> = witnesses.into_iter().map(|w| w.join().unwrap()).collect();
        if let Some(&(cpu, ns)) = held.iter().find(|(_, ns)| *ns >= 400_000_000) {
            rtlab_sys::testing::say_skipped(&format!(
                "not a quiet run: ordinary work on CPU {cpu} waited {} to run (other work on this machine); the watchdog said {tripped:?}",
                Nanos(ns)
            ));
            return;
        }
        assert_eq!(tripped, None, "longest waits to run: {held:?}");
    }
}
