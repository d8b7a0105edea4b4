//! The model of how a watched thread waits: one state machine per thread, fed that thread's
//! events one at a time, in time order.
//!
//! ```text
//!   Running --enters a wait call--> InWait --woken--> Woken --gets a CPU--> OnCpu
//!      ^  \                                                                    |
//!      |   `--preempted--> Runnable --gets a CPU--> Running                    |
//!      `-------------------- back in user space (the call returns) <-----------'
//! ```
//!
//! A wait's delays end where its call returns to user space, as the program sees them (where
//! the recorder sees the watched threads' wait calls; else where the thread gets a CPU, from
//! `Runnable`). A `timer` delay begins at its deadline, and every deadline has a named source
//! ([`DeadlineSource`]): the time a sleep call asked for, the expiry of the thread's own sleep
//! timer in a timed futex or a readiness wait (`epoll_wait`, `poll`), the expiry of a timer
//! that wakes it through a file (`timerfd`) or a signal (a POSIX timer, `setitimer`), a Java
//! park's or sleep's time from the thread's clock, or a period a Java thread ran at once
//! after a late one. A wait with none of those (woken by another thread) has no deadline and
//! measures a `wakeup` delay only: nothing is guessed.
//!
//! What a Java thread's park or a JVM's safepoint does with the delays a wait returns with
//! (they end where Java code goes on) is the `java` module's; the period a thread keeps and
//! the series its delays go to are the watch's. The thresholds are [`crate::rules::RULES`].

use crate::rules::RULES;
use crate::DelayKind;
use rtlab_trace::event::{Event, READINESS_CALLS, SYS_READ};
use rtlab_trace::replay::{Follow, Moved};

/// Where a `timer` delay's deadline came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeadlineSource {
    /// The time a `clock_nanosleep` or `nanosleep` asked for (read from the call).
    Sleep,
    /// The timeout of a timed futex wait (`pthread_cond_timedwait`, `sem_timedwait`, a JVM's
    /// park): the expiry of the sleep timer the kernel armed for it.
    FutexTimeout,
    /// The timeout of an `epoll_wait`, `poll` or `select` (its sleep timer's expiry).
    PollTimeout,
    /// The timeout of a `sigtimedwait` (its sleep timer's expiry).
    SigwaitTimeout,
    /// The expiry of the thread's own sleep timer, in a wait call not seen (entered before
    /// the watch, or calls not recorded).
    SleepTimer,
    /// An armed `timerfd`'s expiry (its reader's `read`, `poll` or `epoll_wait` returns).
    TimerFd,
    /// A POSIX timer's expiry, delivered by its signal (`timer_settime` + `sigwaitinfo`).
    PosixTimer,
    /// A `setitimer`/`alarm` expiry (SIGALRM).
    Itimer,
    /// The time a Java `LockSupport.parkNanos` asked for, from the thread's clock read (where
    /// the JVM's park probes are not seen, a JVM's timed futex wait: the time it asked for
    /// from its entry, counted from the thread's read before it).
    JavaPark,
    /// The time a Java `Thread.sleep` asked for.
    JavaSleep,
    /// A period a periodic Java thread ran at once after a late one (it never waited for it):
    /// its deadline one period after the one before, late to the thread's own clock read.
    JavaPeriod,
}

impl DeadlineSource {
    /// Every source, in the order of their names in a result.
    pub const ALL: [DeadlineSource; 11] = [
        DeadlineSource::Sleep,
        DeadlineSource::FutexTimeout,
        DeadlineSource::PollTimeout,
        DeadlineSource::SigwaitTimeout,
        DeadlineSource::SleepTimer,
        DeadlineSource::TimerFd,
        DeadlineSource::PosixTimer,
        DeadlineSource::Itimer,
        DeadlineSource::JavaPark,
        DeadlineSource::JavaSleep,
        DeadlineSource::JavaPeriod,
    ];

    /// Its name in `--samples` and in a result: `sleep`, `futex-timeout`, `timerfd` ...
    pub fn name(self) -> &'static str {
        match self {
            DeadlineSource::Sleep => "sleep",
            DeadlineSource::FutexTimeout => "futex-timeout",
            DeadlineSource::PollTimeout => "poll-timeout",
            DeadlineSource::SigwaitTimeout => "sigwait-timeout",
            DeadlineSource::SleepTimer => "sleep-timer",
            DeadlineSource::TimerFd => "timerfd",
            DeadlineSource::PosixTimer => "posix-timer",
            DeadlineSource::Itimer => "itimer",
            DeadlineSource::JavaPark => "java-park",
            DeadlineSource::JavaSleep => "java-sleep",
            DeadlineSource::JavaPeriod => "java-period",
        }
    }

    /// The source of a timer that fired in kernel function `function`: the thread's own
    /// sleep timer (`hrtimer_wakeup`), or one of the timers that wake it through a file or
    /// a signal (`rtlab_trace::event::FILE_OR_SIGNAL_TIMERS`).
    pub fn of_timer(function: &str) -> Option<DeadlineSource> {
        match function {
            "hrtimer_wakeup" => Some(DeadlineSource::SleepTimer),
            "timerfd_tmrproc" => Some(DeadlineSource::TimerFd),
            "posix_timer_fn" => Some(DeadlineSource::PosixTimer),
            "it_real_fn" => Some(DeadlineSource::Itimer),
            _ => None,
        }
    }
}

/// x86-64's `clock_nanosleep`, `nanosleep`, `futex`, `futex_waitv`, `rt_sigtimedwait`.
const SLEEP_CALLS: [i32; 2] = [230, 35];
const FUTEX_CALLS: [i32; 2] = [202, 449];
const SYS_RT_SIGTIMEDWAIT: i32 = 128;

/// A delay begun: since when, the timer's slack in it, when the thread got a CPU in between
/// (where that is not its end), and where its deadline came from (a `timer` delay's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delay {
    pub(crate) since: u64,
    pub(crate) slack: u64,
    pub(crate) running: Option<u64>,
    pub(crate) source: Option<DeadlineSource>,
}

impl Delay {
    /// A delay from `since`, with no slack, CPU time or deadline source known.
    pub(crate) fn from(since: u64) -> Delay {
        Delay {
            since,
            slack: 0,
            running: None,
            source: None,
        }
    }
}

/// A timer's expiry that woke the thread: the time it was set for, its slack, its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expiry {
    pub(crate) at: u64,
    pub(crate) slack: u64,
    pub(crate) source: DeadlineSource,
}

/// A wait call in progress: which (its number), the time it asked for where it says (a
/// sleep's, CLOCK_MONOTONIC), and when it entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Call {
    pub(crate) nr: i32,
    pub(crate) asked: Option<u64>,
    pub(crate) entered: u64,
}

impl Call {
    /// The source of this call's deadline where `expiry` ended it (None: the time it asked
    /// for, a sleep's or a timed futex wait's).
    fn source(&self, expiry: Option<Expiry>) -> DeadlineSource {
        match expiry.map(|x| x.source) {
            None | Some(DeadlineSource::SleepTimer) if SLEEP_CALLS.contains(&self.nr) => {
                DeadlineSource::Sleep
            }
            None | Some(DeadlineSource::SleepTimer) if FUTEX_CALLS.contains(&self.nr) => {
                DeadlineSource::FutexTimeout
            }
            None | Some(DeadlineSource::SleepTimer) if READINESS_CALLS.contains(&self.nr) => {
                DeadlineSource::PollTimeout
            }
            None | Some(DeadlineSource::SleepTimer) if self.nr == SYS_RT_SIGTIMEDWAIT => {
                DeadlineSource::SigwaitTimeout
            }
            Some(other) => other,
            None => DeadlineSource::SleepTimer,
        }
    }
}

impl Call {
    /// Whether it is a futex wait.
    pub(crate) fn is_futex(&self) -> bool {
        FUTEX_CALLS.contains(&self.nr)
    }

    /// Whether the kernel says this call's time ran out (`ret`): a sleep that completed
    /// (0), a futex wait that timed out (`-ETIMEDOUT`; 0 there is a wake by another thread),
    /// a readiness wait with nothing ready (0), a signal wait with no signal (`-EAGAIN`).
    /// A call whose timer's expiry was not seen (its events lost) still ends at its time.
    fn timed_out(&self, ret: i64) -> bool {
        const ETIMEDOUT: i64 = 110;
        const EAGAIN: i64 = 11;
        match self.nr {
            nr if FUTEX_CALLS.contains(&nr) => ret == -ETIMEDOUT,
            SYS_RT_SIGTIMEDWAIT => ret == -EAGAIN,
            _ => ret == 0,
        }
    }

    /// Whether `x` ended it as its deadline rather than the time it asked for: a file or
    /// signal timer that fired in a readiness or signal wait (whose own timeout, if any, is
    /// only a bound).
    fn ended_by_timer(&self, x: &Expiry) -> bool {
        x.source != DeadlineSource::SleepTimer && self.waits_for_events()
    }

    /// Whether it is a readiness or signal wait: it waits for something else, its timeout
    /// (relative to its entry, where it has one) only a bound.
    pub(crate) fn waits_for_events(&self) -> bool {
        READINESS_CALLS.contains(&self.nr) || self.nr == SYS_RT_SIGTIMEDWAIT
    }
}

/// Where a watched thread is in its wait.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Phase {
    /// In user space, or in a wait the watch does not see (entered before the watch, or its
    /// calls not recorded): nothing pending but a timer's expiry that woke it.
    #[default]
    Running,
    /// Off its CPU and runnable outside any wait call seen (preempted; or woken, where its
    /// calls are not seen), since then: a `wakeup` delay that ends where it gets a CPU.
    Runnable { since: u64 },
    /// In wait call `call`, not woken since it entered.
    InWait { call: Call },
    /// Woken in its wait call, not on a CPU since.
    Woken { call: Call, at: u64 },
    /// On a CPU again in its wait call (since `running`, after its wakeup where one came),
    /// on its way back to user space.
    OnCpu {
        call: Call,
        woken: Option<u64>,
        running: u64,
    },
}

impl Phase {
    /// The wait call it is in, if any.
    pub(crate) fn call(&self) -> Option<&Call> {
        match self {
            Phase::InWait { call } | Phase::Woken { call, .. } | Phase::OnCpu { call, .. } => {
                Some(call)
            }
            Phase::Running | Phase::Runnable { .. } => None,
        }
    }
}

/// A thread driven by a periodic timer that wakes it through a file or a signal (a
/// `timerfd`, a POSIX timer): such a timer goes on expiring on its grid (its armed time plus
/// whole intervals) whether or not the thread waits, and the thread's next wait takes every
/// expiry since at once (a `timerfd` read returns their count, a POSIX timer's signal its
/// overruns), each late to its own time: the kernel counts them on that grid. The expiry the
/// thread last took, the wait call it takes them in, and the timer's source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerGrid {
    pub(crate) taken_ns: u64,
    pub(crate) call: i32,
    pub(crate) source: DeadlineSource,
}

/// Taken by the read: a timer that wakes its thread through a file hands the expiry over
/// when the thread reads the file. Where the wait call only said that the file was ready
/// ([`READINESS_CALLS`]: an `epoll_wait`, a `poll`), the delays it ended run on to the return
/// of the `read` that follows, as a program that reads a timerfd's count after its
/// `epoll_wait` sees them; where the thread's next wait call is not a read, or its read
/// slept (another file's), they end at the readiness wait's own return.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ready {
    /// The delays (kind, and since when), the readiness wait, its return and the expiry that
    /// woke it (for the grid).
    pub(crate) delays: Vec<(DelayKind, Delay)>,
    pub(crate) ended: Ended,
    pub(crate) returned: Event,
}

/// A wait call that ended: the call, its wakeup in it (where one came), and the expiry of
/// its periodic file or signal timer that woke it (where one did).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    pub(crate) call: Call,
    pub(crate) woken: Option<u64>,
    pub(crate) by_grid: Option<Expiry>,
}

/// What a wait call's return ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Returned {
    /// No call it entered was seen (entered before the watch saw it): its delays ended at
    /// its switch-in.
    Unseen,
    /// The expiry that woke it is far from the time the call asked for: another call's (this
    /// call's own events were lost). Nothing is measured.
    Abandoned,
    /// The call's delays, each from its start to this return.
    Delays(Ended, Vec<(DelayKind, Delay)>),
}

/// One watched thread's wait, as its events tell (see the module's doc).
#[derive(Debug, Clone)]
pub(crate) struct ThreadWait {
    pub(crate) phase: Phase,
    /// The thread through its wakeups and switches, by the explainer's rules (a wakeup can
    /// come while it is still on its CPU going to sleep: the switch-out then still says
    /// asleep, and it counts from the wakeup).
    follow: Follow,
    /// The expiry of the timer that woke it, until its delays are measured.
    pub(crate) expiry: Option<Expiry>,
    /// That expiry was its periodic file or signal timer's (see [`TimerGrid`]).
    by_grid: bool,
    /// A readiness wait its file timer ended, the expiry not yet taken (see [`Ready`]).
    pub(crate) ready: Option<Ready>,
    /// In the kernel's wait for a PI futex since.
    pub(crate) lock_since: Option<u64>,
    /// The address of the timer that woke it last through a file or a signal, and how many
    /// times in a row it did.
    own_timer: Option<(u64, u32)>,
    /// The periodic timer driving it through a file or a signal, where one does.
    pub(crate) grid: Option<TimerGrid>,
    /// Its readiness waits that ended at their timeout, and how many of those timeouts ran
    /// a whole number of milliseconds from the call's entry (see [`ThreadWait::whole_ms`]).
    pub(crate) poll_timeouts: (u64, u64),
    /// It went to sleep in the wait call it is in.
    slept: bool,
    /// A wait call of it returned though it had slept in it and no wakeup or switch back in
    /// was seen, or it left a CPU it was never seen to get: events the trace never had (no
    /// loss counted), the wakeup's delay unmeasured.
    pub(crate) wakeup_unseen: bool,
    /// Seen leaving a CPU, not seen getting one since.
    off_cpu: bool,
}

/// A timer of `rtlab_trace::event::FILE_OR_SIGNAL_TIMERS` that fired: its expiry, when, and
/// which timer it is (its address, where known).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fired {
    pub(crate) expiry: Expiry,
    pub(crate) at_ns: u64,
    pub(crate) timer: Option<u64>,
}

impl ThreadWait {
    /// Thread `tid`, in user space as far as the watch knows.
    pub(crate) fn new(tid: i64) -> ThreadWait {
        ThreadWait {
            phase: Phase::Running,
            follow: Follow::anywhere(tid),
            expiry: None,
            by_grid: false,
            ready: None,
            lock_since: None,
            own_timer: None,
            grid: None,
            poll_timeouts: (0, 0),
            slept: false,
            wakeup_unseen: false,
            off_cpu: false,
        }
    }

    /// Whether its readiness waits' timeouts are whole milliseconds (at least
    /// `RULES.whole_ms_waits` of them, all but a tenth within `RULES.whole_ms_within_ns` past a
    /// whole millisecond from their entry): an `epoll_wait`/`poll` timeout is given in ms, and
    /// a program (or its runtime: Python's asyncio, libuv) that rounds the time left up to
    /// it has a deadline of its own up to 1 ms before the kernel's, which the watch cannot
    /// know. Its `timer` delays start at the kernel's.
    pub(crate) fn whole_ms(&self) -> bool {
        let (waits, whole) = self.poll_timeouts;
        waits >= RULES.whole_ms_waits && whole * 10 >= waits * 9
    }

    /// It left its CPU at `e`: preempted (runnable from now on) or asleep. Returns whether
    /// it went to sleep, where the switch says.
    pub(crate) fn switched_out(&mut self, e: &Event) -> Option<bool> {
        // Seen leaving a CPU before and not seen getting one since: the trace missed the
        // switch that ran it (no loss counted), its wakeup's delay is not known.
        if std::mem::replace(&mut self.off_cpu, true) {
            self.wakeup_unseen = true;
        }
        // An expiry seen before it left its CPU ended no wait of it (a sleep timer that fired
        // while it ran, woken otherwise, before it was cancelled), unless it came within the
        // wait call it is in (the timer fired before it was off its CPU, or it was preempted
        // after it).
        if self.phase.call().is_none() {
            self.expiry = None;
        }
        let Moved::SwitchedOut {
            asleep, preempted, ..
        } = self.follow.step(e)
        else {
            return None;
        };
        // Outside a call: preempted, runnable from now on; asleep, not until woken, unless
        // the wakeup already came (then from that wakeup). In a call, the wakeup it waits
        // for decides.
        if matches!(self.phase, Phase::InWait { .. }) {
            self.slept |= asleep && !preempted;
        }
        if self.phase.call().is_none() {
            self.phase = match (preempted, asleep, &self.phase) {
                (true, _, _) => Phase::Runnable { since: e.ts_ns },
                (false, false, p) => p.clone(),
                (false, true, _) => Phase::Running,
            };
        }
        Some(asleep && !preempted)
    }

    /// Its sleep timer fired at `e` (set for `expiry`).
    pub(crate) fn sleep_timer(&mut self, e: &Event, expiry: Expiry) {
        self.follow.step(e);
        self.expiry = Some(expiry);
    }

    /// It was woken at `e` (a waking only comes for a task that set itself asleep, so the
    /// latest one marks the start: an earlier one was for a sleep it never entered); by
    /// `fired`, a file or signal timer that fired just before on its CPU, in the same
    /// interrupt, where one did.
    pub(crate) fn woken(&mut self, e: &Event, fired: Option<Fired>) {
        self.follow.step(e);
        self.phase = match std::mem::take(&mut self.phase) {
            Phase::Running | Phase::Runnable { .. } => Phase::Runnable { since: e.ts_ns },
            Phase::InWait { call } | Phase::Woken { call, .. } | Phase::OnCpu { call, .. } => {
                Phase::Woken { call, at: e.ts_ns }
            }
        };
        // A thread's periodic timer is one timer: known once it woke the thread twice in a
        // row, another that fired just before a wakeup of the thread (by coincidence: a
        // wakeup of its own, in the same interrupt) is not its.
        let Some(f) = fired else { return };
        let its = match (self.own_timer, f.timer) {
            (Some((known, n)), Some(this)) => n < 2 || known == this,
            _ => true,
        };
        if !its {
            // (A thread that replaced its timer: after two others, the known one is no more.)
            self.own_timer = self.own_timer.map(|(known, n)| (known, n - 1));
            return;
        }
        self.own_timer = match (self.own_timer, f.timer) {
            (Some((known, n)), Some(this)) if known == this => Some((this, n + 1)),
            (_, this) => this.map(|t| (t, 1)),
        };
        self.expiry = Some(f.expiry);
        self.by_grid = true;
    }

    /// It got a CPU at `e`: the delays that end here (outside a wait call; in one, they end
    /// where it returns).
    pub(crate) fn switched_in(&mut self, e: &Event) -> Vec<(DelayKind, Delay)> {
        self.follow.step(e);
        self.off_cpu = false;
        let mut delays = Vec::new();
        self.phase = match std::mem::take(&mut self.phase) {
            Phase::InWait { call } => Phase::OnCpu {
                call,
                woken: None,
                running: e.ts_ns,
            },
            Phase::Woken { call, at } => Phase::OnCpu {
                call,
                woken: Some(at),
                running: e.ts_ns,
            },
            on @ Phase::OnCpu { .. } => on,
            Phase::Runnable { since } => {
                delays.push((DelayKind::Wakeup, Delay::from(since)));
                Phase::Running
            }
            Phase::Running => Phase::Running,
        };
        if self.phase.call().is_none() {
            if let Some(x) = self.expiry.take() {
                let source = Some(x.source);
                let delay = Delay {
                    slack: x.slack,
                    source,
                    ..Delay::from(x.at)
                };
                delays.push((DelayKind::Timer, delay));
            }
        }
        delays
    }

    /// It entered wait call `nr` (to `asked`, where the call says) at `at`: a readiness wait
    /// pending ends now unless this is the read that takes it (returned: settle it at its
    /// own return).
    pub(crate) fn entered(&mut self, nr: i32, asked: Option<u64>, at: u64) -> Option<Ready> {
        // (In a system call: on a CPU, whatever the switches said.)
        self.off_cpu = false;
        let settle = match nr {
            SYS_READ => None,
            _ => self.ready.take(),
        };
        self.expiry = None;
        self.slept = false;
        self.phase = Phase::InWait {
            call: Call {
                nr,
                asked,
                entered: at,
            },
        };
        settle
    }

    /// It returns from a wait call with a readiness wait's delays pending: those, and
    /// whether this call is the read that took its expiry (a read not woken in it: it slept
    /// for nothing else); then it measures nothing of its own and is back in user space.
    pub(crate) fn take_ready(&mut self) -> Option<(Ready, bool)> {
        let call = self.phase.call().copied()?;
        let woken = matches!(
            self.phase,
            Phase::Woken { .. } | Phase::OnCpu { woken: Some(_), .. }
        );
        let ready = self.ready.take()?;
        let took = call.nr == SYS_READ && !woken;
        if took {
            self.phase = Phase::Running;
            self.expiry = None;
            self.by_grid = false;
        }
        Some((ready, took))
    }

    /// Its wait call returned to user space at `at` with `ret`: its delays in that call end
    /// here, as the program sees them. A sleep timer that expired in the call is a `timer`
    /// delay from its expiry (from the time the call asked for, where it says: what the
    /// program measures its lateness against); a sleep to a time already past when it was
    /// asked for (no timer was armed: the period ran late) one from that time; a sleep cut
    /// short (a signal) no lateness; a wakeup within the call a `wakeup` delay from it.
    pub(crate) fn returned(&mut self, ret: i64, at: u64) -> Returned {
        // (Back from a call: on a CPU. A switch onto it the trace missed is counted here, where
        // it slept in the call, not again at its next switch out.)
        self.off_cpu = false;
        let by_grid = std::mem::take(&mut self.by_grid);
        let slept = std::mem::take(&mut self.slept);
        let (call, woken, running) = match std::mem::take(&mut self.phase) {
            Phase::InWait { call } => {
                self.wakeup_unseen = slept;
                (call, None, None)
            }
            Phase::Woken { call, at } => (call, Some(at), None),
            Phase::OnCpu {
                call,
                woken,
                running,
            } => (call, woken, Some(running)),
            Phase::Running | Phase::Runnable { .. } => return Returned::Unseen,
        };
        // The timer that fired within the call (the entry clears an older one). Its expiry
        // may be before the entry: a wait to a deadline that passed on the way into the call
        // (a Java park of a few microseconds left) is late from that deadline.
        let expiry = self.expiry.take();
        let by_timer = expiry.filter(|x| call.ended_by_timer(x));
        // (A timeout from the entry whose timer the kernel started later: the thread was
        // held on its way in, and its deadline is still the one it asked for.)
        let held_on_way_in = |asked: u64, x: &Expiry| call.waits_for_events() && x.at >= asked;
        if let (Some(asked), Some(x), None) = (call.asked, expiry, by_timer) {
            if asked.abs_diff(x.at) > RULES.asked_off_expiry_ns && !held_on_way_in(asked, &x) {
                return Returned::Abandoned;
            }
        }
        let start = match (call.asked, expiry) {
            (_, Some(x)) if by_timer.is_some() => Some((x.at, x.slack)),
            (Some(asked), x) if call.timed_out(ret) || x.is_some() => {
                Some((asked, x.map_or(0, |x| x.slack)))
            }
            (None, Some(x)) => Some((x.at, x.slack)),
            _ => None,
        };
        let source = call.source(expiry);
        if let (DeadlineSource::PollTimeout, Some(x)) = (source, expiry) {
            let past_ms = x.at.saturating_sub(call.entered) % 1_000_000;
            let whole = past_ms <= RULES.whole_ms_within_ns;
            self.poll_timeouts.0 += 1;
            self.poll_timeouts.1 += whole as u64;
        }
        let mut delays = Vec::new();
        if let Some((since, slack)) = start.filter(|s| s.0 <= at) {
            let delay = Delay {
                since,
                slack,
                running: running.filter(|&r| r >= since),
                source: Some(source),
            };
            delays.push((DelayKind::Timer, delay));
        }
        if let Some(woken) = woken {
            let delay = Delay {
                running: running.filter(|&r| r >= woken),
                ..Delay::from(woken)
            };
            delays.push((DelayKind::Wakeup, delay));
        }
        let by_grid = by_grid
            .then(|| {
                start.map(|(since, slack)| Expiry {
                    at: since,
                    slack,
                    source,
                })
            })
            .flatten();
        let ended = Ended {
            call,
            woken,
            by_grid,
        };
        Returned::Delays(ended, delays)
    }

    /// Events were lost: the delays it had begun, which the lost events may have ended (a
    /// later end would measure them too long), each by kind.
    pub(crate) fn cut(&mut self) -> Vec<DelayKind> {
        // (Where it is now is not known either.)
        self.off_cpu = false;
        let mut cut = Vec::new();
        if let Some(r) = self.ready.take() {
            cut.extend(r.delays.into_iter().map(|(k, _)| k));
        }
        match std::mem::take(&mut self.phase) {
            Phase::Running => {}
            Phase::Runnable { .. } => cut.push(DelayKind::Wakeup),
            // (A readiness or signal wait waits for something else first: a wakeup.)
            p => cut.push(
                match p
                    .call()
                    .filter(|c| !c.waits_for_events())
                    .and_then(|c| c.asked)
                {
                    Some(_) => DelayKind::Timer,
                    None => DelayKind::Wakeup,
                },
            ),
        }
        if self.expiry.take().is_some() {
            cut.push(DelayKind::Timer);
        }
        if self.lock_since.take().is_some() {
            cut.push(DelayKind::Lock);
        }
        cut
    }
}

/// The grid of the periodic file or signal timer that woke `ended` (or the one driving the
/// thread before), and the expiries it takes at `end`: every expiry of the grid since the
/// last it took, each late to its own time (see [`TimerGrid`]); the one that woke it is
/// measured already. A wait woken by something else means the timer drives it no more.
pub(crate) fn grid_after(
    grid: Option<TimerGrid>,
    ended: &Ended,
    period: Option<u64>,
    end: u64,
) -> (Option<TimerGrid>, Vec<u64>) {
    let grid = match (ended.by_grid, grid) {
        (Some(x), _) => TimerGrid {
            taken_ns: x.at,
            call: ended.call.nr,
            source: x.source,
        },
        (None, Some(g)) if g.call != ended.call.nr => return (Some(g), Vec::new()),
        (None, Some(_)) if ended.woken.is_some() => return (None, Vec::new()),
        (None, Some(g)) => g,
        (None, None) => return (None, Vec::new()),
    };
    let Some(period) = period.filter(|&p| p > 0) else {
        return (Some(grid), Vec::new());
    };
    let mut taken = Vec::new();
    let mut last = grid.taken_ns;
    while taken.len() < RULES.grid_max_taken && last + period <= end {
        last += period;
        taken.push(last);
    }
    let grid = TimerGrid {
        taken_ns: last,
        ..grid
    };
    (Some(grid), taken)
}

#[cfg(test)]
mod tests;
