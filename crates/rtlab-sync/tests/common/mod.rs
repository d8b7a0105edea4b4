//! Shared helpers of the rtlab-sync tests.
#![allow(dead_code)]

use rtlab_sys::sched::{set_current_thread_scheduler, Policy};

/// Iterations for stress loops: large in release (`cargo test --release`), small in debug.
pub fn iterations(release: u64) -> u64 {
    if cfg!(debug_assertions) {
        release / 20
    } else {
        release
    }
}

/// True when this process may use SCHED_FIFO; prints the skip reason otherwise.
pub fn can_fifo(test: &str) -> bool {
    let ok = rtlab_sys::probe::can_use_fifo(50);
    if !ok {
        rtlab_sys::testing::say_skipped(&format!(
            "{test}: needs SCHED_FIFO (run as root or with CAP_SYS_NICE)"
        ));
    }
    ok
}

pub fn fifo(prio: u32) {
    set_current_thread_scheduler(Policy::Fifo, prio).expect("SCHED_FIFO");
}

/// Field 18 of /proc/thread-self/stat: the kernel priority as user space sees it
/// (20 + nice for SCHED_OTHER, -1 - rt_priority for RT, including a PI boost).
pub fn effective_priority() -> i64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // The comm field may contain spaces; fields are counted after its closing ')'.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split_whitespace().nth(15).unwrap().parse().unwrap()
}

/// Runs `section` `per_thread` times on each of `threads` threads started together: the
/// harness of every mutual-exclusion test (each section does a non-atomic read-modify-write
/// of a counter under the lock under test, which tears without exclusion).
pub fn hammer(threads: usize, per_thread: u64, section: impl Fn() + Sync) {
    let start = std::sync::Barrier::new(threads);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                start.wait();
                for _ in 0..per_thread {
                    section();
                }
            });
        }
    });
}
