//! The events the explainer reads, and their `trace_pipe` text form (what `--trace-out`
//! writes, and tests read back).
//!
//! A line is `COMM-PID [CPU] FLAGS SECONDS.MICROS: EVENT: FIELDS`, e.g.
//! `  rtlab-hog-42  [000] d.h2.  1234.567890: irq_handler_entry: irq=11 name=virtio0`.
//! The command name may hold spaces and dashes, so the line is cut at the `[CPU]` field.
//! With the `mono` trace clock the timestamp is CLOCK_MONOTONIC, the clock rtlab measures on.

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// `sched_switch`.
    Switch {
        /// The task leaving the CPU.
        prev: Task,
        /// Its state (runnable: preempted; S, D ...: blocked).
        prev_state: TaskState,
        /// The task taking it.
        next: Task,
    },
    /// `sched_waking` (the wakeup decision, on the waker's CPU).
    Waking {
        /// The woken task.
        task: Task,
        /// The CPU it will run on.
        target_cpu: u16,
    },
    /// `irq_handler_entry`.
    IrqEntry {
        /// IRQ number.
        irq: u32,
        /// Handler name.
        name: String,
    },
    /// `irq_handler_exit`.
    IrqExit,
    /// `softirq_entry`.
    SoftirqEntry {
        /// Vector name (TIMER, NET_RX ...).
        name: String,
    },
    /// `softirq_exit`.
    SoftirqExit,
    /// An `irq_vectors` entry (`local_timer`, `reschedule`, `call_function` ...).
    VectorEntry {
        /// The vector.
        name: String,
    },
    /// Its exit.
    VectorExit,
    /// `hrtimer_expire_entry`: a high-resolution timer expires (in the timer interrupt).
    HrtimerEntry {
        /// The expiry function (`hrtimer_wakeup` for a sleeping task).
        function: std::sync::Arc<str>,
        /// The task a sleep timer wakes (the eBPF recorder names it; the tracefs event does not).
        task: Option<Task>,
        /// The expiry the timer was set for (CLOCK_MONOTONIC ns; the eBPF recorder reads it,
        /// the tracefs event does not carry it).
        expires_ns: Option<u64>,
        /// How much later the kernel may fire it (the timer slack; 0 where not known).
        slack_ns: u64,
        /// The timer's address (`struct hrtimer *`), where known and it is not a sleep timer:
        /// one timer's expiries told from another's.
        timer: Option<u64>,
    },
    /// The current thread enters the kernel's wait for a PI futex (`futex_lock_pi`).
    LockPi {
        /// `FUTEX_TRYLOCK_PI`: it will not wait.
        trylock: bool,
    },
    /// ... and returns from it: 0 when it holds the lock, else a negative errno
    /// (`-ETIMEDOUT`, `-EINTR`, `-EDEADLK` ...).
    LockPiDone {
        /// The result.
        ret: i32,
    },
    /// A watched thread enters a system call it may wait in (`clock_nanosleep`, `futex`,
    /// `epoll_wait`, `poll` ...; the eBPF recorder's wait-call probes only).
    WaitEnter {
        /// The system call's number (x86-64).
        call: i32,
        /// For a sleep to a time (`clock_nanosleep`, `nanosleep`), a futex wait with a
        /// timeout (`FUTEX_WAIT`, `FUTEX_WAIT_BITSET`), a readiness or signal wait with one
        /// (`epoll_wait`, `poll`, `select` and kin, `rt_sigtimedwait`; from its entry): that
        /// time, CLOCK_MONOTONIC ns, read from the caller's request at the entry.
        deadline_ns: Option<u64>,
    },
    /// ... and returns from it to user space.
    WaitExit {
        /// The system call's number.
        call: i32,
        /// Its result (0 or a count; a negative errno).
        ret: i64,
    },
    /// `power:cpu_idle`: entering a C-state, or `None` when leaving idle.
    Idle(Option<u32>),
    /// `nmi:nmi_handler`, with the handler's duration.
    Nmi {
        /// Handler.
        handler: String,
        /// How long it ran.
        delta_ns: u64,
    },
    /// `sched_migrate_task`.
    Migrate {
        /// The task.
        task: Task,
        /// From.
        orig_cpu: u16,
        /// To.
        dest_cpu: u16,
    },
    /// A `trace_marker` write.
    Marker(String),
    /// Anything else this parser keeps no detail of.
    Other(String),
    /// Events of this CPU were lost just before this point (the reader fell a ring behind):
    /// what happened since the previous event is unknown.
    Lost(u64),
    /// As `Lost`, but only of other tasks than the watched threads: theirs have rings of their
    /// own, none of them was lost.
    LostOthers(u64),
    /// A probe of a JVM fired (HotSpot's USDT probes, where they are attached), in thread
    /// `current_pid` of process `process`: a safepoint's or a VM operation's or a
    /// collection's begin or end. `name`: the VM operation's (`G1CollectForAllocation`).
    Jvm {
        probe: JvmProbe,
        process: u32,
        name: Option<std::sync::Arc<str>>,
        /// A time the probe gives: a park's time asked for (`LockSupport.parkNanos`:
        /// relative, in nanoseconds), where it is one; the time a clock read returned
        /// (`System.nanoTime()`: CLOCK_MONOTONIC, as the trace's), where seen.
        time_ns: Option<u64>,
    },
    /// The kernel stack of `task` at the event just before (where the recorder keeps
    /// stacks): at a switch, the task leaving the CPU; at a watched thread's waking, the
    /// waker (for a timer, the task its interrupt stopped). `id` in the recorder's stack map.
    Stack {
        /// The task switched out.
        task: i64,
        /// Its stack's key.
        id: u32,
    },
}

/// The HotSpot probes rtlab attaches to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JvmProbe {
    /// `safepoint__begin`: the VM thread starts to bring every Java thread to a stop ...
    SafepointBegin,
    /// ... `safepoint__end`: and lets them go on.
    SafepointEnd,
    /// `vmops__begin` / `vmops__end`: a VM operation (inside a safepoint, or not).
    VmopBegin,
    VmopEnd,
    /// `gc__begin` / `gc__end`: a collection.
    GcBegin,
    GcEnd,
    /// `thread__park__begin` / `thread__park__end`: a Java thread's park
    /// (`LockSupport.park*`), from its call to its return to Java code ...
    ParkBegin,
    ParkEnd,
    /// ... `thread__sleep__begin` / `thread__sleep__end`: its `Thread.sleep`.
    SleepBegin,
    SleepEnd,
    /// A thread's read of the JVM's clock (`System.nanoTime()`; HotSpot's `os::javaTimeNanos`,
    /// a function probe, not a USDT one): where a Java thread reads the time its own
    /// measure of its lateness is made of.
    ClockRead,
}

/// The name given to a task that ended before anything named it (its /proc entry gone, its
/// end not recorded: events lost): said as what it is, where ftrace writes `<...>`.
pub const ENDED_TASK: &str = "ended task";

/// Timers that end a wait through a file or a signal, not as the waiting thread's own sleep
/// timer: a `timerfd` (`timerfd_tmrproc`: its reader's `read`, `poll` or `epoll_wait`
/// returns), a POSIX timer (`posix_timer_fn`: its signal ends a `sigwaitinfo`), `setitimer`
/// and `alarm` (`it_real_fn`: SIGALRM). The threads it wakes, in the same interrupt right
/// after its expiry, waited for the time it was set for: their `timer` delay runs from there.
pub const FILE_OR_SIGNAL_TIMERS: [&str; 3] = ["timerfd_tmrproc", "posix_timer_fn", "it_real_fn"];

/// The kernel's softirq vectors by number (`softirq_entry`'s `vec`).
pub const SOFTIRQS: &[&str] = &[
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

/// The wait calls that only say a file is ready (x86-64's `epoll_wait`, `epoll_pwait`,
/// `epoll_pwait2`, `poll`, `ppoll`, `select`, `pselect6`): what woke the thread is taken by
/// the call that follows, a `read` of the file (a timerfd's count of expiries, a signalfd's
/// signal).
pub const READINESS_CALLS: [i32; 7] = [232, 281, 441, 7, 271, 23, 270];
/// x86-64's `read`.
pub const SYS_READ: i32 = 0;

/// HotSpot's clock for `System.nanoTime()` (`os::javaTimeNanos()`, mangled as in its symbol
/// table): compiled Java code calls it directly, the interpreter through `JVM_NanoTime`.
pub const CLOCK_FUNCTION: &str = "_ZN2os13javaTimeNanosEv";

impl JvmProbe {
    /// The USDT providers of HotSpot's probes.
    pub const PROVIDERS: [&'static str; 2] = ["hotspot", "hs_private"];

    /// Every one, with the USDT probe names it is attached at (any provider).
    pub const ALL: [(JvmProbe, &'static str); 10] = [
        (JvmProbe::SafepointBegin, "safepoint__begin"),
        (JvmProbe::SafepointEnd, "safepoint__end"),
        (JvmProbe::VmopBegin, "vmops__begin"),
        (JvmProbe::VmopEnd, "vmops__end"),
        (JvmProbe::GcBegin, "gc__begin"),
        (JvmProbe::GcEnd, "gc__end"),
        (JvmProbe::ParkBegin, "thread__park__begin"),
        (JvmProbe::ParkEnd, "thread__park__end"),
        (JvmProbe::SleepBegin, "thread__sleep__begin"),
        (JvmProbe::SleepEnd, "thread__sleep__end"),
    ];

    /// A thread's own wait (a park, a sleep): recorded for the watched processes' threads
    /// only (they fire at every wait of every thread).
    pub fn of_thread(self) -> bool {
        matches!(
            self,
            JvmProbe::ParkBegin
                | JvmProbe::ParkEnd
                | JvmProbe::SleepBegin
                | JvmProbe::SleepEnd
                | JvmProbe::ClockRead
        )
    }

    /// Which of the probe's arguments the recorder keeps (its 64-bit value, and the low 32
    /// bits of another): a VM operation's name (address, length), a park's time and whether
    /// it is absolute.
    pub fn kept_args(self) -> [usize; 2] {
        match self {
            JvmProbe::ParkBegin => [2, 1],
            _ => [0, 1],
        }
    }

    pub fn name(self) -> &'static str {
        if self == JvmProbe::ClockRead {
            return "os::javaTimeNanos";
        }
        JvmProbe::ALL
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("?", |(_, n)| n)
    }
}

impl Kind {
    /// How many of this CPU's events were lost here, if that is what this marks (of any
    /// task, or of other tasks than the watched threads).
    pub fn lost(&self) -> Option<u64> {
        match self {
            Kind::Lost(n) | Kind::LostOthers(n) => Some(*n),
            _ => None,
        }
    }

    /// The task this event wakes: `sched_waking`'s, or the sleeper whose timer expires.
    pub fn woken(&self) -> Option<&Task> {
        match self {
            Kind::Waking { task, .. } => Some(task),
            Kind::HrtimerEntry { task, .. } => task.as_ref(),
            _ => None,
        }
    }
}

/// The state of a task leaving the CPU, as `sched_switch` reports it: the kernel's task-state
/// bits (the ones it reports), and whether it was preempted (`R+`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskState {
    bits: u16,
    preempted: bool,
}

impl TaskState {
    /// `(bit, letter)` as the kernel's `sched_switch` prints them.
    const LETTERS: [(u16, char); 8] = [
        (0x1, 'S'),
        (0x2, 'D'),
        (0x4, 'T'),
        (0x8, 't'),
        (0x10, 'X'),
        (0x20, 'Z'),
        (0x40, 'P'),
        (0x80, 'I'),
    ];
    /// A letter this parser does not know (printed as `?`).
    const UNKNOWN: u16 = 0x8000;
    /// Runnable (`R`): it left the CPU without blocking.
    pub const RUNNING: TaskState = TaskState {
        bits: 0,
        preempted: false,
    };
    /// Preempted (`R+`).
    pub const PREEMPTED: TaskState = TaskState {
        bits: 0,
        preempted: true,
    };
    /// Sleeping interruptibly (`S`).
    pub const SLEEPING: TaskState = TaskState {
        bits: 0x1,
        preempted: false,
    };

    /// From the kernel's values: the `preempt` argument of the tracepoint and the state bits.
    pub fn from_kernel(preempt: bool, state: u64) -> TaskState {
        if preempt {
            return TaskState::PREEMPTED;
        }
        // Bits past the reported ones (TASK_NOLOAD ...) are not shown, as by the kernel.
        TaskState {
            bits: (state & 0xff) as u16,
            preempted: false,
        }
    }

    /// From `sched_switch`'s text (`R`, `R+`, `S`, `D|W` ...).
    pub fn parse(text: &str) -> TaskState {
        match text {
            "R" => TaskState::RUNNING,
            "R+" => TaskState::PREEMPTED,
            _ => {
                let bits = text.split('|').fold(0, |acc, letter| {
                    let mut chars = letter.chars();
                    let bit = match (chars.next(), chars.next()) {
                        (Some(c), None) => Self::LETTERS
                            .iter()
                            .find(|(_, l)| *l == c)
                            .map_or(Self::UNKNOWN, |(b, _)| *b),
                        _ => Self::UNKNOWN,
                    };
                    acc | bit
                });
                TaskState {
                    bits,
                    preempted: false,
                }
            }
        }
    }

    /// It left the CPU runnable (preempted or yielding), not blocked.
    pub fn is_runnable(self) -> bool {
        self.bits == 0
    }

    /// It was preempted.
    pub fn is_preempted(self) -> bool {
        self.preempted
    }
}

impl std::fmt::Display for TaskState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.preempted {
            return f.write_str("R+");
        }
        if self.bits == 0 {
            return f.write_str("R");
        }
        let mut first = true;
        for (bit, letter) in Self::LETTERS.iter().chain(&[(Self::UNKNOWN, '?')]) {
            if self.bits & bit != 0 {
                if !first {
                    f.write_str("|")?;
                }
                write!(f, "{letter}")?;
                first = false;
            }
        }
        Ok(())
    }
}

/// A task as the scheduler events name it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Task {
    /// Command name (shared: the reader keeps a million events, each naming two tasks).
    pub comm: std::sync::Arc<str>,
    /// Thread id.
    pub pid: i64,
    /// Kernel priority: 0-99 real-time (99 - rtprio), 100-139 normal (120 + nice).
    pub prio: i64,
}

impl Task {
    /// `FIFO 99` / `nice 0` style, from the kernel priority.
    pub fn describe_prio(&self) -> String {
        if self.prio < 100 {
            format!("RT {}", 99 - self.prio)
        } else {
            format!("nice {}", self.prio - 120)
        }
    }

    /// The idle task.
    pub fn is_idle(&self) -> bool {
        self.pid == 0
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// CPU it happened on.
    pub cpu: u16,
    /// CLOCK_MONOTONIC, ns.
    pub ts_ns: u64,
    /// The task that was current (for `Waking`: the waker).
    pub current_pid: i64,
    /// What happened.
    pub kind: Kind,
}

/// `key=value` fields; values end at the next ` key=` (command names may hold spaces).
fn field<'a>(fields: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("{key}=");
    let mut search = 0;
    let start = loop {
        let i = fields[search..].find(&pat)? + search;
        if i == 0 || fields.as_bytes()[i - 1] == b' ' {
            break i + pat.len();
        }
        search = i + 1;
    };
    let rest = &fields[start..];
    // The value runs until the next " word=" or " ==>".
    let mut end = rest.len();
    let bytes = rest.as_bytes();
    for (i, _) in rest.match_indices(' ') {
        let tail = &rest[i + 1..];
        let next_key = tail
            .split(' ')
            .next()
            .is_some_and(|w| w.contains('=') && !w.starts_with('='));
        if next_key || tail.starts_with("==>") {
            end = i;
            break;
        }
        let _ = bytes;
    }
    Some(rest[..end].trim())
}

fn num<T: std::str::FromStr>(fields: &str, key: &str) -> Option<T> {
    field(fields, key)?.parse().ok()
}

fn task(fields: &str, prefix: &str) -> Option<Task> {
    Some(Task {
        comm: field(fields, &format!("{prefix}comm"))?.into(),
        pid: num(fields, &format!("{prefix}pid"))?,
        prio: num(fields, &format!("{prefix}prio"))?,
    })
}

/// Parses one `trace_pipe` line; `None` for lines that are not events (comments, garbage).
pub fn parse_line(line: &str) -> Option<Event> {
    // The CPU field: " [ddd] ".
    let open = line.match_indices(" [").find_map(|(i, _)| {
        let close = line[i + 2..].find(']')? + i + 2;
        line[i + 2..close]
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then_some((i, close))
    })?;
    let (cpu_start, cpu_end) = open;
    let cpu: u16 = line[cpu_start + 2..cpu_end].parse().ok()?;
    let who = line[..cpu_start].trim();
    let current_pid = who
        .rsplit_once('-')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(-1);
    let rest = line[cpu_end + 1..].trim_start();
    // Optional flags column, then "SECONDS.MICROS: name: fields".
    let (head, after) = rest.split_once(": ")?;
    let ts_text = head.rsplit(' ').next()?;
    let (secs, frac) = ts_text.split_once('.')?;
    let secs: u64 = secs.parse().ok()?;
    let frac_ns = match frac.len() {
        6 => frac.parse::<u64>().ok()? * 1_000,
        9 => frac.parse::<u64>().ok()?,
        n if n < 9 => frac.parse::<u64>().ok()? * 10u64.pow(9 - n as u32),
        _ => return None,
    };
    let ts_ns = secs * 1_000_000_000 + frac_ns;
    let (name, fields) = after
        .split_once(": ")
        .unwrap_or((after.trim_end_matches(':'), ""));
    let kind = match name {
        "sched_switch" => {
            let (left, right) = fields.split_once(" ==> ")?;
            Kind::Switch {
                prev: task(left, "prev_")?,
                prev_state: TaskState::parse(field(left, "prev_state").unwrap_or("?")),
                next: task(right, "next_")?,
            }
        }
        "sched_waking" | "sched_wakeup" if name == "sched_waking" => Kind::Waking {
            task: task(fields, "")?,
            target_cpu: num(fields, "target_cpu")?,
        },
        "irq_handler_entry" => Kind::IrqEntry {
            irq: num(fields, "irq")?,
            name: field(fields, "name").unwrap_or("?").to_string(),
        },
        "irq_handler_exit" => Kind::IrqExit,
        "softirq_entry" => Kind::SoftirqEntry {
            name: fields
                .split_once("action=")
                .map(|(_, a)| a.trim().trim_end_matches(']').to_string())
                .unwrap_or_else(|| "?".into()),
        },
        "softirq_exit" => Kind::SoftirqExit,
        "hrtimer_expire_entry" => Kind::HrtimerEntry {
            function: field(fields, "function").unwrap_or("?").into(),
            task: None,
            expires_ns: None,
            slack_ns: 0,
            timer: field(fields, "hrtimer")
                .and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok()),
        },
        "cpu_idle" => {
            let state: u64 = num(fields, "state")?;
            Kind::Idle((state != u32::MAX as u64).then_some(state as u32))
        }
        "nmi_handler" => Kind::Nmi {
            handler: field(fields, "handler").unwrap_or("?").to_string(),
            delta_ns: num(fields, "delta_ns").unwrap_or(0),
        },
        "sched_migrate_task" => Kind::Migrate {
            task: task(fields, "")?,
            orig_cpu: num(fields, "orig_cpu")?,
            dest_cpu: num(fields, "dest_cpu")?,
        },
        "tracing_mark_write" => Kind::Marker(fields.to_string()),
        "lost_events" => Kind::Lost(num(fields, "count")?),
        // A JVM's probe through a uprobe event (`hotspot_<probe>_<n>`); its process is the
        // reader's to find (the text gives the thread only).
        n if n.starts_with("hotspot_") => {
            let probe_name = n["hotspot_".len()..].rsplit_once('_')?.0;
            let (probe, _) = JvmProbe::ALL.iter().find(|(_, p)| *p == probe_name)?;
            Kind::Jvm {
                probe: *probe,
                process: 0,
                name: field(fields, "op").map(|op| op.trim_matches('"').into()),
                time_ns: None,
            }
        }
        n if n.ends_with("_entry") && !n.starts_with("hrtimer") => Kind::VectorEntry {
            name: n.trim_end_matches("_entry").to_string(),
        },
        n if n.ends_with("_exit") && !n.starts_with("hrtimer") => Kind::VectorExit,
        other => Kind::Other(other.to_string()),
    };
    Some(Event {
        cpu,
        ts_ns,
        current_pid,
        kind,
    })
}

/// The event as a `trace_pipe` line (what `--trace-out` saves, and what [`parse_line`]
/// reads back): for events that did not come from tracefs text. The task current on its
/// CPU is named `<idle>` (pid 0) or `<...>` (a name not known), as the kernel names them.
pub fn format_line(e: &Event) -> String {
    format_line_as(e, None)
}

/// [`format_line`], the current task named `current` where that is its name.
pub fn format_line_as(e: &Event, current: Option<&str>) -> String {
    let task = |t: &Task, prefix: &str| {
        format!(
            "{prefix}comm={} {prefix}pid={} {prefix}prio={}",
            t.comm, t.pid, t.prio
        )
    };
    let body = match &e.kind {
        Kind::Switch {
            prev,
            prev_state,
            next,
        } => format!(
            "sched_switch: {} prev_state={prev_state} ==> {}",
            task(prev, "prev_"),
            task(next, "next_")
        ),
        Kind::Waking {
            task: t,
            target_cpu,
        } => {
            format!("sched_waking: {} target_cpu={target_cpu:03}", task(t, ""))
        }
        Kind::IrqEntry { irq, name } => format!("irq_handler_entry: irq={irq} name={name}"),
        Kind::IrqExit => "irq_handler_exit: ret=handled".into(),
        Kind::SoftirqEntry { name } => format!("softirq_entry: [action={name}]"),
        Kind::SoftirqExit => "softirq_exit:".into(),
        Kind::VectorEntry { name } => format!("{name}_entry:"),
        Kind::VectorExit => "vector_exit:".into(),
        Kind::HrtimerEntry {
            function, task: t, ..
        } => match t {
            Some(t) => format!("hrtimer_expire_entry: function={function} {}", task(t, "")),
            None => format!("hrtimer_expire_entry: function={function}"),
        },
        Kind::Idle(state) => format!(
            "cpu_idle: state={} cpu_id={}",
            state.unwrap_or(u32::MAX),
            e.cpu
        ),
        Kind::Nmi { handler, delta_ns } => {
            format!("nmi_handler: handler={handler} delta_ns={delta_ns}")
        }
        Kind::Migrate {
            task: t,
            orig_cpu,
            dest_cpu,
        } => format!(
            "sched_migrate_task: {} orig_cpu={orig_cpu} dest_cpu={dest_cpu}",
            task(t, "")
        ),
        Kind::LockPi { trylock } => format!("futex_lock_pi: trylock={}", *trylock as u8),
        Kind::LockPiDone { ret } => format!("futex_lock_pi_return: ret={ret}"),
        Kind::WaitEnter { call, deadline_ns } => match deadline_ns {
            Some(d) => format!(
                "wait_enter: NR {call} deadline={}.{:09}",
                d / 1_000_000_000,
                d % 1_000_000_000
            ),
            None => format!("wait_enter: NR {call}"),
        },
        Kind::WaitExit { call, ret } => format!("wait_exit: NR {call} = {ret}"),
        Kind::Marker(m) => format!("tracing_mark_write: {m}"),
        Kind::Other(name) => format!("{name}:"),
        Kind::Lost(n) | Kind::LostOthers(n) => format!("lost_events: count={n}"),
        Kind::Stack { task, id } => format!("kernel_stack: pid={task} id={id}"),
        Kind::Jvm {
            probe,
            process,
            name,
            time_ns,
        } => format!(
            "hotspot:{}: process={process}{}{}",
            probe.name(),
            name.as_ref()
                .map(|n| format!(" name={n}"))
                .unwrap_or_default(),
            time_ns.map(|t| format!(" time={t}")).unwrap_or_default()
        ),
    };
    let who = match (e.current_pid, current) {
        (0, _) => "<idle>",
        (_, Some(name)) => name,
        _ => "<...>",
    };
    // (A task not known: no pid, which the line's reader takes as none.)
    let pid = match e.current_pid {
        p if p >= 0 => p.to_string(),
        _ => "?".into(),
    };
    format!(
        "{:>16}-{:<7} [{:03}] {}.{:09}: {body}",
        who,
        pid,
        e.cpu,
        e.ts_ns / 1_000_000_000,
        e.ts_ns % 1_000_000_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_lines_parse() {
        let e = parse_line("     rtlab-hog-42      [000] d..2.   123.456789: sched_switch: prev_comm=rtlab-hog prev_pid=42 prev_prio=0 prev_state=R+ ==> next_comm=rtlab-wakeup0 next_pid=77 next_prio=4").unwrap();
        assert_eq!((e.cpu, e.ts_ns, e.current_pid), (0, 123_456_789_000, 42));
        match e.kind {
            Kind::Switch {
                prev,
                prev_state,
                next,
            } => {
                assert_eq!((&*prev.comm, prev.pid, prev.prio), ("rtlab-hog", 42, 0));
                assert_eq!(prev_state, TaskState::PREEMPTED);
                assert_eq!(prev_state.to_string(), "R+");
                assert_eq!((&*next.comm, next.pid, next.prio), ("rtlab-wakeup0", 77, 4));
                assert_eq!(prev.describe_prio(), "RT 99");
            }
            k => panic!("{k:?}"),
        }
        let e = parse_line("          <idle>-0       [001] d.h1.  9.000001: irq_handler_entry: irq=11 name=virtio0-input.0").unwrap();
        assert_eq!(
            e.kind,
            Kind::IrqEntry {
                irq: 11,
                name: "virtio0-input.0".into()
            }
        );
        let e =
            parse_line(" Web Content-1234 [001] ..s1. 9.5: softirq_entry: vec=3 [action=NET_RX]")
                .unwrap();
        assert_eq!(e.current_pid, 1234);
        assert_eq!(e.ts_ns, 9_500_000_000);
        assert_eq!(
            e.kind,
            Kind::SoftirqEntry {
                name: "NET_RX".into()
            }
        );
        let e =
            parse_line("  <idle>-0 [000] d.h1. 10.000002: local_timer_entry: vector=236").unwrap();
        assert_eq!(
            e.kind,
            Kind::VectorEntry {
                name: "local_timer".into()
            }
        );
        let e = parse_line("  <idle>-0 [000] d..1. 10.000003: cpu_idle: state=4294967295 cpu_id=0")
            .unwrap();
        assert_eq!(e.kind, Kind::Idle(None));
        let e = parse_line("  my task-9 [000] d..2. 10.000004: sched_waking: comm=my task pid=9 prio=120 target_cpu=001").unwrap();
        assert_eq!(
            e.kind,
            Kind::Waking {
                task: Task {
                    comm: "my task".into(),
                    pid: 9,
                    prio: 120
                },
                target_cpu: 1
            }
        );
        assert!(parse_line("# tracer: nop").is_none());
        assert!(parse_line("").is_none());
    }

    #[test]
    fn formatted_lines_parse_back() {
        let t = |comm: &str, pid, prio| Task {
            comm: comm.into(),
            pid,
            prio,
        };
        let kinds = vec![
            Kind::Switch {
                prev: t("rtlab hog", 42, 0),
                prev_state: TaskState::PREEMPTED,
                next: t("swapper/0", 0, 120),
            },
            Kind::Waking {
                task: t("w", 7, 4),
                target_cpu: 1,
            },
            Kind::IrqEntry {
                irq: 11,
                name: "virtio0-input.0".into(),
            },
            Kind::IrqExit,
            Kind::SoftirqEntry {
                name: "NET_RX".into(),
            },
            Kind::SoftirqExit,
            Kind::VectorEntry {
                name: "local_timer".into(),
            },
            Kind::VectorExit,
            Kind::Nmi {
                handler: "perf_event_nmi_handler".into(),
                delta_ns: 1234,
            },
            Kind::Migrate {
                task: t("m", 9, 120),
                orig_cpu: 0,
                dest_cpu: 1,
            },
            Kind::Lost(42),
        ];
        for kind in kinds {
            let e = Event {
                cpu: 1,
                ts_ns: 12_345_678_901,
                current_pid: 42,
                kind,
            };
            assert_eq!(parse_line(&format_line(&e)), Some(e.clone()), "{e:?}");
        }
    }
}
