//! A record's fields read back: its raw words, a timer's expiry and a wait call's deadline
//! on CLOCK_MONOTONIC.

use super::*;

/// A timer's expiry `raw`, on whichever clock it was set (CLOCK_MONOTONIC, or one of the
/// clocks `offsets` lead it by), brought to CLOCK_MONOTONIC near the record's time `ts_ns`.
pub(super) fn monotonic_expiry(raw: u64, ts_ns: u64, offsets: &[i64; 3]) -> Option<u64> {
    const BEFORE: u64 = 3_600_000_000_000;
    const AFTER: u64 = 1_000_000;
    if raw == 0 || raw > i64::MAX as u64 {
        return None;
    }
    std::iter::once(0)
        .chain(offsets.iter().copied())
        .map(|off| raw as i64 - off)
        .filter(|&t| t >= 0)
        .map(|t| t as u64)
        .find(|&t| t <= ts_ns + AFTER && t + BEFORE >= ts_ns)
        .map(|t| t.min(ts_ns))
}

/// The CLOCK_MONOTONIC time a wait call's entry record asks to wait to: a
/// `clock_nanosleep`'s absolute time on its clock (TIMER_ABSTIME) or a `nanosleep`'s, a
/// `FUTEX_WAIT`'s the entry's time plus the relative request, a `FUTEX_WAIT_BITSET`'s its
/// absolute timeout on CLOCK_MONOTONIC or CLOCK_REALTIME, a readiness wait's the entry's
/// time plus its timeout. None for other calls and operations, other clocks, a futex or
/// readiness wait without a timeout (or one of 0), or a request not read.
pub(super) fn wait_deadline(r: &[u8; REC as usize], clock_offsets: &[i64; 3]) -> Option<u64> {
    let u32_at = |o: i16| u32::from_ne_bytes(r[o as usize..o as usize + 4].try_into().unwrap());
    let i64_at = |o: i16| i64::from_ne_bytes(r[o as usize..o as usize + 8].try_into().unwrap());
    let call = u32_at(OFF_A) as i32;
    let op = u32_at(OFF_PID1);
    let entered =
        u64::from_ne_bytes(r[OFF_TS as usize..OFF_TS as usize + 8].try_into().unwrap()) as i64;
    let futex_cmd = (call == SYS_FUTEX).then_some(op as i32 & FUTEX_CMD_MASK);
    // A readiness wait's timeout, from its entry (none: negative milliseconds, or no
    // request; 0 is a look that does not wait).
    if let Some(unit) = readiness_timeout_unit(call) {
        let (sec, frac) = (i64_at(OFF_PID2), i64_at(OFF_X));
        // (A timespec's nanoseconds must be under a second; the kernel takes a timeval's
        // microseconds past one as more seconds.)
        let t = match unit {
            0 => op as i32 as i64 * 1_000_000,
            _ if sec < 0 || frac < 0 || (unit == 1 && frac >= 1_000_000_000) => return None,
            unit => (sec.checked_mul(1_000_000_000)?).checked_add(frac.checked_mul(unit)?)?,
        };
        return (t > 0)
            .then(|| entered.checked_add(t))
            .flatten()
            .map(|t| t as u64);
    }
    if call != SYS_CLOCK_NANOSLEEP && call != SYS_NANOSLEEP && futex_cmd.is_none() {
        return None;
    }
    let (sec, nsec) = (i64_at(OFF_PID2), i64_at(OFF_X));
    if !(0..1_000_000_000).contains(&nsec) || !(0..=i64::MAX / 2_000_000_000).contains(&sec) {
        return None;
    }
    let t = sec * 1_000_000_000 + nsec;
    const TIMER_ABSTIME: u32 = 1;
    let (clock, absolute) = match futex_cmd {
        // No timeout (the read left zeros): a wait with no deadline.
        Some(_) if t == 0 => return None,
        Some(FUTEX_WAIT) => (1, false),
        Some(FUTEX_WAIT_BITSET) => match op & FUTEX_CLOCK_REALTIME {
            0 => (1, true),
            _ => (0, true),
        },
        Some(_) => return None,
        None => (
            op as i32,
            call == SYS_CLOCK_NANOSLEEP && u32_at(OFF_PRIO1) & TIMER_ABSTIME != 0,
        ),
    };
    let monotonic = if !absolute {
        // A relative sleep: from its entry (the kernel starts the timer a little later).
        entered.checked_add(t)?
    } else {
        match clock {
            // CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW's base, CLOCK_BOOTTIME's and TAI's.
            1 => t,
            0 => t - clock_offsets[0],
            11 => t - clock_offsets[1],
            7 => t - clock_offsets[2],
            _ => return None,
        }
    };
    u64::try_from(monotonic).ok()
}

/// A record's field at `o`: 32 bits, 32 bits sign-extended, 64 bits.
pub(super) fn u32_at(r: &[u8; REC as usize], o: i16) -> u32 {
    u32::from_ne_bytes(r[o as usize..o as usize + 4].try_into().unwrap())
}

pub(super) fn i32_at(r: &[u8; REC as usize], o: i16) -> i64 {
    u32_at(r, o) as i32 as i64
}

pub(super) fn u64_at(r: &[u8; REC as usize], o: i16) -> u64 {
    u64::from_ne_bytes(r[o as usize..o as usize + 8].try_into().unwrap())
}

/// How a readiness wait call (`epoll_wait`, `poll`, `select` and kin, `rt_sigtimedwait`)
/// gives its timeout, where `call` is one: in milliseconds (0), as a timespec (1 ns a unit
/// of its second field) or a timeval (1000).
fn readiness_timeout_unit(call: i32) -> Option<i64> {
    match call {
        232 | 281 | 7 => Some(0),
        441 | 271 | 270 | SYS_RT_SIGTIMEDWAIT => Some(1),
        23 => Some(1000),
        _ => None,
    }
}
