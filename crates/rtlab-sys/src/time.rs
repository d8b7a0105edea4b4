//! Monotonic time and absolute-deadline sleeps.

use crate::SysError;
use rustix::thread::clock_nanosleep_absolute;
use rustix::time::{clock_gettime, ClockId, Timespec};

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Nanoseconds on `CLOCK_MONOTONIC`. C: `clock_gettime(CLOCK_MONOTONIC, &ts)` (vDSO, no syscall).
#[inline]
pub fn monotonic_now_ns() -> u64 {
    let ts = clock_gettime(ClockId::Monotonic);
    ts.tv_sec as u64 * NANOS_PER_SEC + ts.tv_nsec as u64
}

/// Nanoseconds since the Unix epoch on `CLOCK_REALTIME`.
pub fn realtime_now_ns() -> u64 {
    let ts = clock_gettime(ClockId::Realtime);
    ts.tv_sec as u64 * NANOS_PER_SEC + ts.tv_nsec as u64
}

/// How far `CLOCK_REALTIME`, `CLOCK_TAI` and `CLOCK_BOOTTIME` are ahead of
/// `CLOCK_MONOTONIC` now, in ns: what converts a kernel timer's expiry on those clocks' bases
/// to monotonic time.
pub fn clock_offsets_ns() -> [i64; 3] {
    let ns = |id| {
        let ts = clock_gettime(id);
        ts.tv_sec as i64 * NANOS_PER_SEC as i64 + ts.tv_nsec as i64
    };
    let mono = ns(ClockId::Monotonic);
    [
        ns(ClockId::Realtime) - mono,
        ns(ClockId::Tai) - mono,
        ns(ClockId::Boottime) - mono,
    ]
}

/// Sleeps until `deadline_ns` on `CLOCK_MONOTONIC` (an **absolute** time).
///
/// C: `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL)`. An interrupting signal
/// (`EINTR`) restarts the sleep with the same absolute deadline, so there is no drift. Returns
/// at once when the deadline has already passed. Does not allocate.
#[inline]
pub fn sleep_until_monotonic_ns(deadline_ns: u64) -> Result<(), SysError> {
    let ts = Timespec {
        tv_sec: (deadline_ns / NANOS_PER_SEC) as _,
        tv_nsec: (deadline_ns % NANOS_PER_SEC) as _,
    };
    loop {
        match clock_nanosleep_absolute(ClockId::Monotonic, &ts) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                debug_assert!(false, "clock_nanosleep(TIMER_ABSTIME) failed: {e}");
                return Err(SysError::from_errno(
                    "clock_nanosleep(CLOCK_MONOTONIC, ABS)",
                    e,
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_sleep_never_wakes_early() {
        for _ in 0..20 {
            let deadline = monotonic_now_ns() + 200_000;
            sleep_until_monotonic_ns(deadline).unwrap();
            assert!(monotonic_now_ns() >= deadline);
        }
    }

    #[test]
    fn past_deadline_returns_at_once() {
        let before = monotonic_now_ns();
        sleep_until_monotonic_ns(before.saturating_sub(1_000_000)).unwrap();
        // Generous bound: only proves the call did not sleep a whole second.
        assert!(monotonic_now_ns() - before < 1_000_000_000);
    }
}
