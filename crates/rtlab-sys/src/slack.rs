//! Timer slack of the calling thread.
//!
//! The kernel may delay a sleeping `SCHED_OTHER` thread's wakeup by up to its timer slack
//! (default 50 us) to batch timer interrupts. Slack is ignored for `SCHED_FIFO`/`SCHED_RR`
//! threads and is inherited by new threads and child processes.

use crate::SysError;
use std::num::NonZeroU64;

/// The calling thread's timer slack in ns. C: `prctl(PR_GET_TIMERSLACK)`.
pub fn current_timer_slack_ns() -> Result<u64, SysError> {
    rustix::thread::current_timer_slack()
        .map_err(|e| SysError::from_errno("prctl(PR_GET_TIMERSLACK)", e))
}

/// Sets the calling thread's timer slack. C: `prctl(PR_SET_TIMERSLACK, ns)`; 0 restores the
/// thread's default (the slack it inherited when it was created).
pub fn set_current_timer_slack_ns(ns: u64) -> Result<(), SysError> {
    rustix::thread::set_current_timer_slack(NonZeroU64::new(ns))
        .map_err(|e| SysError::from_errno(format!("prctl(PR_SET_TIMERSLACK, {ns})"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_round_trips_on_a_fresh_thread() {
        std::thread::spawn(|| {
            set_current_timer_slack_ns(1_000).unwrap();
            assert_eq!(current_timer_slack_ns().unwrap(), 1_000);
        })
        .join()
        .unwrap();
    }
}
