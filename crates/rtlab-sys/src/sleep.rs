//! One requested sleep through each of the mechanisms programs actually use, timed.

use crate::futex::{self, Scope, Wait};
use crate::pthread::PthreadTimedWait;
use crate::time::{monotonic_now_ns, sleep_until_monotonic_ns};
use crate::SysError;
use rustix::event::epoll;
use rustix::fd::OwnedFd;
use rustix::thread::{clock_nanosleep_relative, nanosleep, NanosleepRelativeResult};
use rustix::time::{
    timerfd_create, timerfd_settime, ClockId, Itimerspec, TimerfdClockId, TimerfdFlags,
    TimerfdTimerFlags, Timespec,
};
use std::sync::atomic::AtomicU32;

/// How a thread sleeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// `clock_nanosleep(CLOCK_MONOTONIC, 0, &rel)`.
    ClockNanosleepRel,
    /// `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &abs)`.
    ClockNanosleepAbs,
    /// `nanosleep(&rel)`.
    Nanosleep,
    /// `futex(FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG)` with an absolute deadline: a timed park,
    /// the path of Java's `LockSupport.parkNanos`.
    Futex,
    /// glibc `pthread_cond_timedwait` on `CLOCK_MONOTONIC`.
    CondTimedwait,
    /// A relative `timerfd` waited on with `epoll_wait`.
    TimerfdEpoll,
}

impl Mechanism {
    /// All mechanisms.
    pub const ALL: [Mechanism; 6] = [
        Mechanism::ClockNanosleepRel,
        Mechanism::ClockNanosleepAbs,
        Mechanism::Nanosleep,
        Mechanism::Futex,
        Mechanism::CondTimedwait,
        Mechanism::TimerfdEpoll,
    ];

    /// Stable name (series names use it).
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ClockNanosleepRel => "clock_nanosleep_rel",
            Mechanism::ClockNanosleepAbs => "clock_nanosleep_abs",
            Mechanism::Nanosleep => "nanosleep",
            Mechanism::Futex => "futex",
            Mechanism::CondTimedwait => "cond_timedwait",
            Mechanism::TimerfdEpoll => "timerfd_epoll",
        }
    }
}

fn timespec(ns: u64) -> Timespec {
    Timespec {
        tv_sec: (ns / 1_000_000_000) as _,
        tv_nsec: (ns % 1_000_000_000) as _,
    }
}

/// What one mechanism needs, created once and reused for every sleep.
#[derive(Debug)]
pub struct Sleeper {
    mechanism: Mechanism,
    word: AtomicU32,
    cond: Option<PthreadTimedWait>,
    timer: Option<(OwnedFd, OwnedFd)>,
}

impl Sleeper {
    /// Prepares `mechanism` (a condvar, a timerfd and an epoll set where needed).
    pub fn new(mechanism: Mechanism) -> Result<Self, SysError> {
        let cond = match mechanism {
            Mechanism::CondTimedwait => Some(PthreadTimedWait::new(false)?),
            _ => None,
        };
        let timer = match mechanism {
            Mechanism::TimerfdEpoll => {
                let timer = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::CLOEXEC)
                    .map_err(|e| SysError::from_errno("timerfd_create", e))?;
                let set = epoll::create(epoll::CreateFlags::CLOEXEC)
                    .map_err(|e| SysError::from_errno("epoll_create1", e))?;
                epoll::add(
                    &set,
                    &timer,
                    epoll::EventData::new_u64(1),
                    epoll::EventFlags::IN,
                )
                .map_err(|e| SysError::from_errno("epoll_ctl(ADD)", e))?;
                Some((timer, set))
            }
            _ => None,
        };
        Ok(Sleeper {
            mechanism,
            word: AtomicU32::new(0),
            cond,
            timer,
        })
    }

    /// Sleeps `requested_ns` and returns how long it really took (ns, `CLOCK_MONOTONIC`).
    /// Signals restart the sleep for what is left (absolute mechanisms: same deadline).
    pub fn sleep(&self, requested_ns: u64) -> u64 {
        let start = monotonic_now_ns();
        let deadline = start + requested_ns;
        match self.mechanism {
            Mechanism::ClockNanosleepRel => {
                let mut left = timespec(requested_ns);
                while let NanosleepRelativeResult::Interrupted(rem) =
                    clock_nanosleep_relative(ClockId::Monotonic, &left)
                {
                    left = rem;
                }
            }
            Mechanism::ClockNanosleepAbs => {
                let _ = sleep_until_monotonic_ns(deadline);
            }
            Mechanism::Nanosleep => {
                let mut left = timespec(requested_ns);
                while let NanosleepRelativeResult::Interrupted(rem) = nanosleep(&left) {
                    left = rem;
                }
            }
            Mechanism::Futex => {
                while futex::wait_until(&self.word, Scope::Private, 0, Some(deadline))
                    != Wait::TimedOut
                {}
            }
            Mechanism::CondTimedwait => {
                if let Some(cond) = &self.cond {
                    cond.wait_until(deadline);
                }
            }
            Mechanism::TimerfdEpoll => {
                if let Some((timer, set)) = &self.timer {
                    let spec = Itimerspec {
                        it_interval: timespec(0),
                        it_value: timespec(requested_ns.max(1)),
                    };
                    if timerfd_settime(timer, TimerfdTimerFlags::empty(), &spec).is_ok() {
                        let empty = epoll::Event {
                            flags: epoll::EventFlags::empty(),
                            data: epoll::EventData::new_u64(0),
                        };
                        let mut events = [empty];
                        while !matches!(epoll::wait(set, &mut events[..], None), Ok(n) if n > 0) {}
                        let mut expirations = [0u8; 8];
                        let _ = rustix::io::read(timer, &mut expirations);
                    }
                }
            }
        }
        monotonic_now_ns() - start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mechanism_sleeps_at_least_what_was_asked() {
        for m in Mechanism::ALL {
            let s = Sleeper::new(m).unwrap();
            for requested in [1_000u64, 50_000, 200_000] {
                let took = s.sleep(requested);
                assert!(
                    took >= requested,
                    "{}: {took} ns for {requested} ns",
                    m.name()
                );
                assert!(took < requested + 1_000_000_000, "{}: {took} ns", m.name());
            }
        }
    }
}
