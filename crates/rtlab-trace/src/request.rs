//! What a measuring thread reports of a late sample, and how: without formatting, without a
//! syscall, never blocking.

use crate::wait::Wait;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

/// A measuring thread's report of a late sample.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// Index of the series (the caller maps it to a name).
    pub series: u16,
    /// The CPU the thread ran on when it woke.
    pub cpu: u16,
    /// The thread.
    pub tid: i64,
    /// The deadline (CLOCK_MONOTONIC ns).
    pub deadline_ns: u64,
    /// When it ran (for a watch: when its wait returned to user space).
    pub woke_ns: u64,
    /// For a watch's delay measured to the return to user space: when the thread got a CPU
    /// before that (the split of the delay).
    pub running_ns: Option<u64>,
    /// What it waited for.
    pub wait: Wait,
    /// For a sleep timer's delay: how much later than `deadline_ns` the kernel may fire it
    /// (its slack), which the explanation names as such; 0 otherwise.
    pub slack_ns: u64,
}

/// Handed to measuring threads: cheap to clone, never blocks.
#[derive(Debug, Clone)]
pub struct Reporter {
    pub(crate) tx: mpsc::SyncSender<Request>,
    pub(crate) threshold: Arc<AtomicU64>,
    pub(crate) dropped: Arc<AtomicU64>,
}

impl Reporter {
    /// The current threshold: samples later than this are worth reporting.
    #[inline]
    pub fn threshold_ns(&self) -> u64 {
        self.threshold.load(Ordering::Relaxed)
    }

    /// Reports the calling thread's sample if it is later than the threshold: it should have
    /// run at `deadline_ns` and ran at `woke_ns` on the CPU it is on now.
    #[inline]
    pub fn report_if_late(&self, series: u16, tid: i64, deadline_ns: u64, woke_ns: u64) {
        self.report_wait_if_late(Wait::Timer, series, tid, deadline_ns, woke_ns);
    }

    /// [`Reporter::report_if_late`] for a thread that waited for `wait` (a lock after its
    /// timer, another thread's wake-up call ...); `woke_ns` is when the wait ended.
    #[inline]
    pub fn report_wait_if_late(
        &self,
        wait: Wait,
        series: u16,
        tid: i64,
        deadline_ns: u64,
        woke_ns: u64,
    ) {
        if woke_ns.saturating_sub(deadline_ns) > self.threshold_ns() {
            self.report(Request {
                series,
                cpu: rtlab_sys::affinity::current_cpu() as u16,
                tid,
                deadline_ns,
                woke_ns,
                running_ns: None,
                wait,
                slack_ns: 0,
            });
        }
    }

    /// Reports a late sample (dropped, and counted, if the reader is behind).
    pub fn report(&self, request: Request) {
        if self.tx.try_send(request).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}
