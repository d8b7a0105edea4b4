//! The arguments of the tools: watch, exec, report, check, diff, load, survey.

use super::parse::*;
use clap::Args;
use rtlab_load::LoadSpec;
use rtlab_stats::Nanos;
use rtlab_sys::affinity::CpuList;
use rtlab_sys::sched::Policy;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The process to watch (all of its threads, and those it creates later; and the
    /// processes it starts, unless --no-children).
    #[arg(long, value_name = "PID", value_parser = parse_pid)]
    pub pid: Option<i32>,
    /// Watch only the process itself (--pid, or the command), not the processes it starts.
    #[arg(long)]
    pub no_children: bool,
    /// Watch every process of a cgroup (v2) and of the cgroups below it: a container or a
    /// Kubernetes pod, by its directory (/sys/fs/cgroup/..., or relative to /sys/fs/cgroup)
    /// or by the pod's UID.
    #[arg(long, value_name = "PATH|POD-UID")]
    pub cgroup: Option<String>,
    /// Watch every process of the machine (with --rt-only: its real-time threads, new ones
    /// included); until --duration or Ctrl-C.
    #[arg(long)]
    pub all: bool,
    /// Threads to watch, repeatable: a name as in /proc/<tid>/comm, a glob such as 'rt-*', or
    /// a TID (default: all).
    #[arg(long = "thread", value_name = "PATTERN")]
    pub threads: Vec<String>,
    /// Only threads with a real-time policy (SCHED_FIFO, SCHED_RR), and only their delays
    /// while real-time.
    #[arg(long)]
    pub rt_only: bool,
    /// How long to watch (default: until Ctrl-C, SIGTERM or the process's exit).
    #[arg(long, value_name = "DUR", value_parser = positive_duration)]
    pub duration: Option<Nanos>,
    /// Explain only delays longer than DUR (still at most the --top longest of each interval
    /// and kind).
    #[arg(long, value_name = "DUR", value_parser = positive_duration)]
    pub threshold: Option<Nanos>,
    /// How many delays to explain per interval and kind, and to keep of each interval and of
    /// the run, the worst first (default 10).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub top: Option<u16>,
    /// Every DUR: one summary line per series on stderr, and the interval histograms to
    /// --hlog.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = positive_duration)]
    pub interval_log: Nanos,
    /// Append each series' interval histograms to FILE (HdrHistogram interval log); an
    /// existing FILE keeps what it has and gets a new log section with this run's start time.
    #[arg(long, value_name = "FILE")]
    pub hlog: Option<PathBuf>,
    /// Write every measured delay to FILE as it is measured, one line each (thread, kind,
    /// deadline and end in CLOCK_MONOTONIC ns, delay, where a timer delay's deadline came
    /// from: sleep, futex-timeout, poll-timeout, timerfd, posix-timer, java-park ...): to join
    /// with the program's own log of each period. An existing FILE gets this run's lines
    /// after its own.
    #[arg(long, value_name = "FILE")]
    pub samples: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (e.g. 127.0.0.1:9464; port 0
    /// picks a free one, printed at the start).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Write the result document to PATH ('-' for stdout).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Where the events come from: bpf, tracefs or auto.
    #[arg(long, value_name = "SOURCE", default_value = "auto", value_parser = by_name::<rtlab_lab::explain::Backend>)]
    pub explain_with: rtlab_lab::explain::Backend,
    /// Save the raw trace window of each explained delay as DIR/outlier-NNNN-<series>.txt
    /// (every CPU's events around it): one file per explained delay, so for a diagnosis of
    /// minutes, not for a watch of days.
    #[arg(long, value_name = "DIR")]
    pub trace_out: Option<PathBuf>,
    /// Record PI lock waits (the lock kind) even where the kernel allows no function probes:
    /// on every system call's entry and exit, a cost to all of them (~110 ns each on the
    /// VM this was measured on); without it, only through function probes (a cost to
    /// contended PI locks alone), where the kernel has them
    #[arg(long)]
    pub locks: bool,
    /// Trace every CPU, not only those the watched threads may run on (their affinity):
    /// follows wakers and lock holders on other CPUs, at a cost to every CPU.
    #[arg(long)]
    pub all_cpus: bool,
    /// End each delay where the thread got a CPU, not where its wait returned to user space
    /// (the program's own view, the default): no program on every system call's entry and
    /// exit, which the default needs on kernels without BPF function probes.
    #[arg(long)]
    pub until_running: bool,
    /// Do not probe a watched JVM's clock (System.nanoTime). By default each watched JVM
    /// process's clock reads are probed, so a Java thread's park is timed from the read
    /// before it to the read after it, as the thread times itself; each read then traps (a
    /// fraction of a microsecond). Without it, parks are timed at HotSpot's park probes, a
    /// few microseconds inside the thread's own measure.
    #[arg(long)]
    pub no_java_clock: bool,
    /// Read each watched JVM's own log of its safepoints and collections beside HotSpot's
    /// probes too (turned on through the attach mechanism jcmd uses, off at the end), and
    /// compare the two stop by stop: the JSON has both totals of each stop, and the stops
    /// whose two accounts differ by over 5 % (and 5 us) are flagged. A JVM without the probes
    /// has its log read anyway.
    #[arg(long)]
    pub jvm_log: bool,
    /// Remove a JVM process's clock probe once it reads the clock more than READS times in
    /// a second (its parks are then timed at HotSpot's park probes; 0: never probed).
    #[arg(long, value_name = "READS", default_value_t = rtlab_watch::DEFAULT_CLOCK_LIMIT)]
    pub java_clock_limit: u64,
    /// Exit with status 3 when trace events of the watched threads were lost (some of their
    /// delays then went unmeasured; each series says how many). Losses of other tasks'
    /// events only leave explanations incomplete, and are reported without failing.
    #[arg(long)]
    pub fail_on_loss: bool,
    /// Print each series' delays as a histogram in power-of-two microsecond buckets after the
    /// final table, as runqlat does.
    #[arg(long)]
    pub histogram: bool,
    /// Keep kernel stacks with each explained delay, as rtla's -s and offcputime do: the
    /// late thread's where its delay began (where it slept or was preempted), the waker's at
    /// the wakeup (for a sleep timer, the code its interrupt stopped) and the culprit's as it
    /// gave the CPU back. Printed under the worst outliers and in the JSON. A stack lookup on
    /// every context switch of the traced CPUs (eBPF only).
    #[arg(long)]
    pub stacks: bool,
    /// CPUs for rtlab's trace reader (default: those the watched threads may not run on,
    /// where there are any; else those their real-time threads have not run on lately,
    /// followed as they move). On them it never delays a watched thread.
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    pub reader_cpu: Option<CpuList>,
    /// Slots per CPU of the trace rings, a power of two (default: sized to hold a second of
    /// this machine's events, measured at the start). A small ring loses events under load.
    #[arg(long, value_name = "N")]
    pub ring_slots: Option<u32>,
    /// Print only the final table (warnings, and where --metrics listens, still go to stderr).
    #[arg(short, long)]
    pub quiet: bool,
    /// A command to start and watch instead of --pid, after `--`; rtlab ends with its exit
    /// status.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Timer slack for CMD and its threads.
    #[arg(long, value_name = "DUR", value_parser = duration_arg, allow_hyphen_values = true)]
    pub slack: Option<Nanos>,
    /// Scheduling policy: fifo, rr or other.
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    pub policy: Option<Policy>,
    /// Priority, 1-99 for fifo/rr.
    #[arg(long, value_name = "N", value_parser = parse_prio, allow_hyphen_values = true)]
    pub prio: Option<u32>,
    /// CPU affinity: 0, 0,1, 0-3.
    #[arg(long, value_name = "LIST", value_parser = parse_cpus, allow_hyphen_values = true)]
    pub cpus: Option<CpuList>,
    /// Raise RLIMIT_MEMLOCK so CMD may lock its memory (locks themselves do not survive exec).
    #[arg(long)]
    pub mlock: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Result documents (from --json of any command, or a survey's report.json).
    #[arg(value_name = "FILE.json", required = true)]
    pub files: Vec<std::path::PathBuf>,
    /// Directory to write report.html into.
    #[arg(
        short = 'o',
        long = "out",
        value_name = "DIR",
        default_value = "rtlab-report"
    )]
    pub out: std::path::PathBuf,
}

#[derive(Debug, Args)]
pub struct TuneArgs {
    /// Apply the run-time fixes (root); needs --state.
    #[arg(long, requires = "state", conflicts_with = "revert")]
    pub apply: bool,
    /// Save every value --apply changes to FILE first (it must not exist yet).
    #[arg(long, value_name = "FILE")]
    pub state: Option<std::path::PathBuf>,
    /// Restore every value saved in FILE by an earlier --apply, then remove FILE.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["state", "only", "cpus", "pid"])]
    pub revert: Option<std::path::PathBuf>,
    /// Only these fixes, by check id, comma-separated: preempt_model, rt_throttling,
    /// fair_server, irq_affinity, transparent_hugepages, damon, cpufreq_governor, c_states,
    /// timer_slack.
    #[arg(long, value_name = "IDS", value_delimiter = ',', value_parser = parse_tunable)]
    pub only: Vec<String>,
    /// The real-time CPUs: interrupts move off them, their fair server, governor and idle
    /// states are set (default: the last isolated CPU, else the last CPU of this machine or
    /// container, as rtlab check assumes).
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    pub cpus: Option<rtlab_sys::affinity::CpuList>,
    /// Set the timer slack of every thread of process PID to 1 ns (timer_slack). With
    /// --verify (and no --verify-with), each block measures that process (rtlab watch --pid).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Carry the fixes to the next boot and to other machines: `tuned DIR` writes a tuned
    /// profile (DIR/tuned.conf), `systemd DIR` a oneshot unit that applies them at each boot
    /// and reverts them when stopped (DIR/rtlab-tune.service), `cmdline` prints the kernel
    /// parameters of the fixes only a boot makes. The fixes: those an earlier --apply saved
    /// in --state FILE, else this machine's plan. Each says what it cannot carry.
    #[arg(long, num_args = 1..=2, value_names = ["FORMAT", "DIR"], conflicts_with_all = ["apply", "revert"])]
    pub export: Vec<String>,
    /// With --apply: measure each fix before keeping it. Timed wakeups (rtlab wakeup) on the
    /// real-time CPUs run in --rounds rounds of --block each: the machine as found, then each
    /// fix alone, in a rotating order; a fix is kept when its p99 or max ratio (with it /
    /// without it, same round) is below 1 by the 95 % interval and neither is above; every
    /// other fix is reverted. Exit 3 when none helped.
    #[arg(long, requires = "apply")]
    pub verify: bool,
    /// With --verify: measure with your own program instead: `--verify-with -- CMD ARGS`
    /// runs it under rtlab watch in each block (started anew each time) and takes its
    /// threads' worst p99 and max.
    #[arg(long, requires = "verify")]
    pub verify_with: bool,
    /// With --verify: a disturbance load beside every block (started once, for the whole
    /// run); repeatable (see 'rtlab load --help').
    #[arg(long = "load", value_name = "SPEC", value_parser = parse_load, requires = "verify")]
    pub loads: Vec<LoadSpec>,
    /// With --verify: rounds of blocks (6 or more give an interval).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub rounds: u32,
    /// With --verify: how long each block measures.
    #[arg(long, value_name = "DUR", default_value = "3s", value_parser = positive_duration)]
    pub block: Nanos,
    /// With --verify: keep every fix, whatever it did (the effects are still reported).
    #[arg(long, requires = "verify")]
    pub keep_all: bool,
    /// With --verify: write the verification (every block, each fix's ratios and verdict,
    /// the causes before and after, what was kept) as a result document to PATH ('-' for
    /// stdout).
    #[arg(long, value_name = "PATH", requires = "verify")]
    pub json: Option<PathBuf>,
    /// Reverts FILE (and removes the run's directory DIR) if the --verify run that started
    /// this process dies (internal).
    #[arg(long, num_args = 1..=2, value_names = ["FILE", "DIR"], hide = true)]
    pub guard: Vec<PathBuf>,
    /// The program --verify-with runs (after --).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Write the audit as a result document to PATH ('-' for stdout).
    #[arg(long, value_name = "PATH")]
    pub json: Option<std::path::PathBuf>,
    /// Exit 3 when a check is at LEVEL or worse: warn (a warn or a fail) or fail (a fail).
    #[arg(long, value_name = "LEVEL")]
    pub fail_on: Option<FailLevel>,
}

/// The level of a check at which a gate (`--fail-on`) exits 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailLevel {
    /// A warn or a fail.
    Warn,
    /// A fail.
    Fail,
}

impl FailLevel {
    /// `warn` or `fail`.
    pub fn name(self) -> &'static str {
        match self {
            FailLevel::Warn => "warn",
            FailLevel::Fail => "fail",
        }
    }

    /// Whether a check that came out `status` trips this gate.
    pub fn tripped_by(self, status: rtlab_lab::check::Status) -> bool {
        use rtlab_lab::check::Status;
        match self {
            FailLevel::Warn => matches!(status, Status::Warn | Status::Fail),
            FailLevel::Fail => status == Status::Fail,
        }
    }
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The command whose page to print, e.g. `wakeup` or `net run` (default: rtlab's own).
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Write every page (rtlab.1, rtlab-wakeup.1, rtlab-net-run.1, ...) into DIR instead, as
    /// a package installs them.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub out_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline result document.
    #[arg(value_name = "A.json")]
    pub a: std::path::PathBuf,
    /// The result document to compare with it.
    #[arg(value_name = "B.json")]
    pub b: std::path::PathBuf,
    /// Exit 3 when a statistic got worse by more than PCT percent (significantly).
    #[arg(long, value_name = "PCT", value_parser = parse_regression_pct)]
    pub fail_worse: Option<f64>,
    /// Write the comparison as a result document to PATH ('-' for stdout).
    #[arg(long, value_name = "PATH")]
    pub json: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Loads to run (see below).
    #[arg(value_name = "SPEC", required = true, value_parser = parse_load)]
    pub specs: Vec<LoadSpec>,
    /// How long to run them.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = positive_duration, allow_hyphen_values = true)]
    pub duration: Nanos,
    /// Write what each load did as a result document to PATH ('-' for stdout).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Print only the final table.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct SurveyArgs {
    /// Duration of each wakeup stage (the other stages take at most 4 s each).
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = positive_duration, allow_hyphen_values = true)]
    pub duration: Nanos,
    /// A quick survey (4 s per wakeup stage; about 30 s in all).
    #[arg(long, conflicts_with = "duration")]
    pub quick: bool,
    /// Report directory.
    #[arg(long, value_name = "DIR", default_value = "rtlab-report")]
    pub out: PathBuf,
    /// CPUs to measure on (default: all usable CPUs).
    #[arg(long, value_name = "LIST", value_parser = parse_cpus, allow_hyphen_values = true)]
    pub cpus: Option<CpuList>,
    /// Print only the final verdict.
    #[arg(long, short)]
    pub quiet: bool,
    /// When stderr is not a terminal, a one-line status every DUR (default 60s).
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = positive_duration)]
    pub status_every: Nanos,
    /// Do not lock memory.
    #[arg(long)]
    pub no_mlock: bool,
    /// Do not hold /dev/cpu_dma_latency at 0 during the run.
    #[arg(long)]
    pub no_dma_latency: bool,
    /// Exit 3 when the loaded wakeup stage's worst wakeup is over DUR (the survey's headline
    /// figure), after writing the report.
    #[arg(long, value_name = "DUR", value_parser = positive_duration)]
    pub fail_above: Option<Nanos>,
    /// Exit 3 when any latency of one area is over DUR, e.g. `ipc=200us`, `net=5ms`,
    /// `wakeup-idle=100us`; repeatable. Areas: the series' first part (wakeup-idle,
    /// wakeup-loaded, lock, invert, mmap, slack, ipc, net, noise).
    #[arg(long, value_name = "AREA=DUR", value_parser = parse_area_bound)]
    pub fail_area: Vec<(rtlab_stats::area::SurveyStage, Nanos)>,
    /// Exit 3 when a check of the machine is at LEVEL or worse (warn or fail).
    #[arg(long, value_name = "LEVEL")]
    pub fail_on: Option<FailLevel>,
}
