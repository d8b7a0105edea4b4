//! What to watch: which processes, which of their threads, and how.

/// Which threads to watch: by name (a glob with `*` and `?`, matched against the
/// 15-character kernel name) or by TID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadPattern {
    /// One thread.
    Tid(i64),
    /// Threads whose name matches.
    Name(String),
}

impl ThreadPattern {
    /// A TID when `text` is a number, else a name glob.
    pub fn parse(text: &str) -> Result<ThreadPattern, BadPattern> {
        if text.is_empty() {
            return Err(BadPattern::Empty);
        }
        if let Ok(tid) = text.parse::<i64>() {
            return if tid > 0 {
                Ok(ThreadPattern::Tid(tid))
            } else {
                Err(BadPattern::NotATid(text.to_string()))
            };
        }
        Ok(ThreadPattern::Name(text.to_string()))
    }

    pub(super) fn matches(&self, tid: i64, name: &str) -> bool {
        match self {
            ThreadPattern::Tid(t) => *t == tid,
            // The kernel keeps 15 bytes of a name: a longer pattern matches its prefix.
            ThreadPattern::Name(p) => glob(p.as_bytes(), name.as_bytes()),
        }
    }
}

/// Why a thread pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BadPattern {
    /// Nothing was written.
    #[error("an empty thread pattern")]
    Empty,
    /// A number that no thread has (0 or negative).
    #[error("'{0}': not a thread id")]
    NotATid(String),
}

impl std::fmt::Display for ThreadPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ThreadPattern::Tid(t) => write!(f, "{t}"),
            ThreadPattern::Name(n) => f.write_str(n),
        }
    }
}

/// `*` (any run) and `?` (any one byte) glob matching, whole string.
pub(super) fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, si));
                pi += 1;
            }
            Some(&c) if c == b'?' || c == s[si] => {
                pi += 1;
                si += 1;
            }
            _ => match star {
                Some((sp, ss)) => {
                    pi = sp + 1;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Which processes to watch, besides [`WatchSpec::pid`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Scope {
    /// The process, and (`children`) the processes it starts and they start, each from its
    /// start (the kernel adds a watched process's child to the watched set as it is created).
    Process { children: bool },
    /// Every process of a cgroup (v2), and of the cgroups below it: a container, a pod.
    Cgroup(std::path::PathBuf),
    /// Every process of the machine (rtlab's own and the kernel's threads excepted).
    #[default]
    All,
}

/// What to watch.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    /// The process, for [`Scope::Process`] (0: none yet, see [`WatchState::attach`]).
    pub pid: i32,
    /// Which processes.
    pub scope: Scope,
    /// Which of its threads (empty: all).
    pub threads: Vec<ThreadPattern>,
    /// Only threads with a real-time policy (SCHED_FIFO/RR), judged at each re-read.
    pub rt_only: bool,
    /// Delays over this are explained (0: any)...
    pub threshold_ns: u64,
    /// ... when among the `keep` longest of their kind in the interval so far; `keep` of each
    /// interval and kind are kept, and of the run.
    pub keep: usize,
    /// How far to go to record PI lock waits (the `lock` kind).
    pub locks: rtlab_trace::LockWaits,
    /// Trace every CPU, not only those the watched threads may run on (to follow their
    /// wakers and lock holders elsewhere).
    pub all_cpus: bool,
    /// End delays where a wait returns to user space (the program's own view: a program on
    /// every system call's entry and exit where the kernel has no cheaper probe); false:
    /// where the thread got a CPU.
    pub user_view: bool,
    /// Probe each watched JVM process's clock (`System.nanoTime()`): a Java thread's park is
    /// then timed between the thread's own clock reads. Each read traps: a process reading
    /// it more than this many times a second has its probe removed (0: none attached).
    pub java_clock_limit: u64,
    /// Read each watched JVM's own log of its stops beside HotSpot's probes too, and compare
    /// the two stop by stop (a JVM without probes has its log read anyway).
    pub jvm_log: bool,
}
