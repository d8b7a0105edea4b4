//! The arguments of the experiments: wakeup, lock, invert, mmap, slack, ipc, and what they share.

use super::parse::*;
use clap::{Args, Subcommand};
use rtlab_load::LoadSpec;
use rtlab_stats::Nanos;
use rtlab_sys::affinity::CpuList;
use rtlab_sys::sched::Policy;
use std::path::PathBuf;

/// Options every experiment command shares (see CONTRACT.md).
#[derive(Debug, Args, Clone)]
pub struct CommonArgs {
    /// How long to measure: 500ms, 10s, 1m30s (units ns, us, ms, s, m, h, d).
    #[arg(long, value_name = "DUR", value_parser = duration_or_forever, allow_hyphen_values = true)]
    pub duration: Option<Nanos>,
    /// Write the result document to PATH ('-' for stdout).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write one HdrHistogram percentile file (<series>.hgrm) per distribution into DIR.
    #[arg(long, value_name = "DIR")]
    pub hgrm: Option<PathBuf>,
    /// Run a disturbance load while measuring; repeatable (see 'rtlab load --help').
    #[arg(long = "load", value_name = "SPEC", value_parser = parse_load)]
    pub loads: Vec<LoadSpec>,
    /// CPUs for the measuring threads: 0, 0,1, 0-3 (default: all usable CPUs).
    #[arg(long, value_name = "LIST", value_parser = parse_cpus, allow_hyphen_values = true)]
    pub cpus: Option<CpuList>,
    /// Priority of the measuring threads, 1-99 for fifo/rr.
    #[arg(long, value_name = "N", value_parser = parse_prio, allow_hyphen_values = true)]
    pub prio: Option<u32>,
    /// Scheduling policy of the measuring threads: fifo, rr or other (default fifo).
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    pub policy: Option<Policy>,
    /// Exit 3 when any measured latency exceeds DUR (a CI gate).
    #[arg(long, value_name = "DUR", value_parser = positive_duration, allow_hyphen_values = true)]
    pub fail_above: Option<Nanos>,
    /// Print only the final table (warnings still go to stderr).
    #[arg(long, short)]
    pub quiet: bool,
    /// When stderr is not a terminal, a one-line status every DUR (default 60s; a CI or pod
    /// log shows life); --quiet silences it.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = positive_duration)]
    pub status_every: Nanos,
    /// Lock all memory with mlockall before measuring (default).
    #[arg(long, overrides_with = "no_mlock")]
    pub mlock: bool,
    /// Do not lock memory.
    #[arg(long)]
    pub no_mlock: bool,
    /// Do not hold /dev/cpu_dma_latency at 0 during the run.
    #[arg(long)]
    pub no_dma_latency: bool,
}

#[derive(Debug, Args)]
pub struct WakeupArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Append each thread's histogram of every --interval-log to FILE, as an HdrHistogram
    /// interval log (what jHiccup and HdrHistogram's log tools read), as the run goes; an
    /// existing FILE keeps what it has and gets a new log section with this run's start time.
    #[arg(long, value_name = "FILE")]
    pub hlog: Option<PathBuf>,
    /// The interval of --hlog.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = positive_duration, requires = "hlog")]
    pub interval_log: Nanos,
    /// Period between wakeups (shorter than --duration, at most 10s: a run stops at each
    /// thread's next wakeup).
    #[arg(long, value_name = "DUR", default_value = "1ms", value_parser = positive_duration, allow_hyphen_values = true)]
    pub interval: Nanos,
    /// Wake all threads at the same instants, on whole multiples of the interval (default:
    /// phases spread evenly over the interval, none on the kernel's scheduler tick).
    #[arg(long)]
    pub aligned: bool,
    /// Number of measuring threads instead of one per CPU; with --cpus, spread over them.
    #[arg(long, value_name = "N", value_parser = parse_threads, allow_hyphen_values = true)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub explain: ExplainArgs,
}

/// `--explain` and its settings (wakeup, net run).
#[derive(Debug, Args, Clone)]
pub struct ExplainArgs {
    /// Trace the measured CPUs (eBPF or tracefs, root) and name the cause of each outlier:
    /// IRQs, softirqs, preempting tasks, lock holders, idle exit, hypervisor gaps.
    #[arg(long)]
    pub explain: bool,
    /// Explain every sample later than DUR (implies --explain; default: the --top worst).
    #[arg(long, value_name = "DUR", value_parser = positive_duration)]
    pub threshold: Option<Nanos>,
    #[command(flatten)]
    pub trace: TraceArgs,
}

/// How many outliers to explain and where their events come from (`--explain` and `rtlab
/// noise`).
#[derive(Debug, Args, Clone)]
pub struct TraceArgs {
    /// How many outliers to explain, the worst first (implies --explain; default 10, 1000
    /// with --threshold).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub top: Option<u16>,
    /// Save the raw trace window of each outlier as DIR/outlier-NNNN-<series>.txt (implies
    /// --explain).
    #[arg(long, value_name = "DIR")]
    pub trace_out: Option<std::path::PathBuf>,
    /// Where the events come from: `bpf` (programs on raw tracepoints write per-CPU rings in a
    /// BPF map; the cheapest per event), `tracefs` (a private tracefs instance, any kernel with tracefs), or `auto`
    /// (bpf, else tracefs with a warning).
    #[arg(long, value_name = "SOURCE", default_value = "auto", value_parser = by_name::<rtlab_lab::explain::Backend>)]
    pub explain_with: rtlab_lab::explain::Backend,
}

impl TraceArgs {
    /// The settings for `explain` (asked for by the caller's own flags or by these), every
    /// sample over `threshold` or the worst `top`, `default_top` when --top is not given.
    /// `--trace-out` is checked (made, and written to once) before anything runs.
    fn settings(
        &self,
        explain: bool,
        threshold: Option<Nanos>,
        default_top: usize,
    ) -> Result<Option<rtlab_lab::explain::ExplainSettings>, crate::BadInput> {
        if let Some(dir) = &self.trace_out {
            rtlab_report::check_writable_dir(dir)
                .map_err(|e| crate::BadInput(format!("--trace-out {e}")))?;
        }
        Ok(
            (explain || self.trace_out.is_some() || self.top.is_some()).then(|| {
                rtlab_lab::explain::ExplainSettings {
                    threshold,
                    top: self.top.map_or(default_top, usize::from),
                    trace_out: self.trace_out.clone(),
                    backend: self.explain_with,
                }
            }),
        )
    }
}

impl ExplainArgs {
    /// The settings, when any of the options asks for explaining.
    pub fn settings(&self) -> Result<Option<rtlab_lab::explain::ExplainSettings>, crate::BadInput> {
        self.trace.settings(
            self.explain || self.threshold.is_some(),
            self.threshold,
            if self.threshold.is_some() { 1000 } else { 10 },
        )
    }
}

#[derive(Debug, Args)]
pub struct NoiseArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// A gap of the spinning loop longer than DUR is an interruption: counted, summed into the
    /// CPU time lost, and explained with --explain.
    #[arg(long, value_name = "DUR", default_value = "10us", value_parser = positive_duration, allow_hyphen_values = true)]
    pub threshold: Nanos,
    /// Trace the measured CPUs (eBPF or tracefs, root) and name what took the CPU in each
    /// interruption: IRQs, softirqs, preempting tasks, RT throttling, silences of the vCPU.
    #[arg(long)]
    pub explain: bool,
    #[command(flatten)]
    pub trace: TraceArgs,
}

impl NoiseArgs {
    /// The explainer's settings: every interruption over the threshold, the longest `top`
    /// (default 100) kept.
    pub fn explain_settings(
        &self,
    ) -> Result<Option<rtlab_lab::explain::ExplainSettings>, crate::BadInput> {
        self.trace.settings(self.explain, Some(self.threshold), 100)
    }
}

#[derive(Debug, Args)]
pub struct LockArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Implementations to measure, comma-separated (default: all).
    #[arg(long = "impl", value_name = "LIST", value_delimiter = ',', value_parser = by_name::<rtlab_lab::lock::Impl>)]
    pub impls: Vec<rtlab_lab::lock::Impl>,
    /// Lock cost between processes, as a 2007 study of glibc's mutexes measured it: each lock
    /// process-shared in shared memory, the hand-off ring passed between this process and a
    /// forked child (rtlab-ceiling, std and parking_lot are process-private and skipped; no
    /// condvar series).
    #[arg(long)]
    pub processes: bool,
    #[command(flatten)]
    pub explain: ExplainArgs,
}

#[derive(Debug, Args)]
pub struct InvertArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Work the low-priority owner does inside the lock.
    #[arg(long, value_name = "DUR", default_value = "1ms", value_parser = positive_duration, allow_hyphen_values = true)]
    pub hold: Nanos,
    /// Period of the high-priority thread's lock requests (shorter than --duration, at most
    /// 10s).
    #[arg(long, value_name = "DUR", default_value = "10ms", value_parser = positive_duration, allow_hyphen_values = true)]
    pub period: Nanos,
    /// Medium-priority hogs (default: one per CPU in --cpus).
    #[arg(long, value_name = "N", value_parser = parse_threads, allow_hyphen_values = true)]
    pub hogs: Option<usize>,
    /// Spin time of each hog per hog period.
    #[arg(long, value_name = "DUR", default_value = "30ms", value_parser = positive_duration, allow_hyphen_values = true)]
    pub hog_run: Nanos,
    /// Hog period.
    #[arg(long, value_name = "DUR", default_value = "50ms", value_parser = positive_duration, allow_hyphen_values = true)]
    pub hog_period: Nanos,
    /// Variants to run, comma-separated (default: all).
    #[arg(long = "variant", value_name = "LIST", value_delimiter = ',', value_parser = by_name::<rtlab_lab::invert::Variant>)]
    pub variants: Vec<rtlab_lab::invert::Variant>,
    /// Correctness mode: pi_stress-style inversion groups; exit 1 on a stall.
    #[arg(long)]
    pub check: bool,
    /// Attribute the high thread's late lock waits: the holder, the tasks that ran while it
    /// waited (priority inversion), IRQs.
    #[command(flatten)]
    pub explain: ExplainArgs,
}

#[derive(Debug, Args)]
pub struct MmapArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Bytes the disturbing thread maps, touches and unmaps per cycle.
    #[arg(long, value_name = "SIZE", default_value = "100MiB", value_parser = parse_size_arg)]
    pub size: u64,
    /// Period of the real-time thread's timed waits (shorter than --duration, at most 10s).
    #[arg(long, value_name = "DUR", default_value = "1ms", value_parser = positive_duration, allow_hyphen_values = true)]
    pub interval: Nanos,
    /// Waiters to compare, comma-separated (default: all).
    #[arg(long = "waiter", value_name = "LIST", value_delimiter = ',', value_parser = by_name::<rtlab_lab::mmap::Waiter>)]
    pub waiters: Vec<rtlab_lab::mmap::Waiter>,
    #[command(flatten)]
    pub explain: ExplainArgs,
}

#[derive(Debug, Args)]
pub struct SlackArgs {
    #[command(subcommand)]
    pub action: Option<SlackAction>,
    #[command(flatten)]
    pub sweep: SweepArgs,
}

/// The sweep (`rtlab slack` without a subcommand).
#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Requested sleeps, comma-separated.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1us,2us,5us,10us,20us,50us,100us,200us", value_parser = positive_duration)]
    pub sleeps: Vec<Nanos>,
    /// Timer slack values, comma-separated.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1ns,1us,10us,50us,200us", value_parser = positive_duration)]
    pub slacks: Vec<Nanos>,
    /// Mechanisms, comma-separated (default: all): clock_nanosleep_rel, clock_nanosleep_abs,
    /// nanosleep, futex, cond_timedwait, timerfd_epoll.
    #[arg(long = "mechanism", value_name = "LIST", value_delimiter = ',', value_parser = by_name::<rtlab_sys::sleep::Mechanism>)]
    pub mechanisms: Vec<rtlab_sys::sleep::Mechanism>,
    /// Attribute sleeps that end later than requested + slack (the slack itself is by
    /// design): IRQs, preempting tasks, hypervisor gaps.
    #[command(flatten)]
    pub explain: ExplainArgs,
}

#[derive(Debug, Subcommand)]
pub enum SlackAction {
    /// List every thread of a process with its timer slack.
    Get {
        /// The process.
        #[arg(long, value_name = "PID", value_parser = parse_pid)]
        pid: i32,
        /// Write the threads as a result document to PATH ('-' for stdout).
        #[arg(long, value_name = "PATH")]
        json: Option<PathBuf>,
    },
    /// Set the timer slack of threads of a process.
    Set {
        /// The process.
        #[arg(long, value_name = "PID", value_parser = parse_pid)]
        pid: i32,
        /// Every thread of the process.
        #[arg(long, group = "which")]
        all: bool,
        /// One thread by its tid.
        #[arg(long, value_name = "TID", value_parser = parse_pid, group = "which")]
        tid: Option<i32>,
        /// Threads whose name (comm) equals NAME or starts with it (15 characters at most count).
        #[arg(long, value_name = "NAME", group = "which")]
        thread: Option<String>,
        /// The new slack: 1ns to 1s; 0 restores each thread's default.
        #[arg(value_name = "DUR", value_parser = duration_arg, allow_hyphen_values = true)]
        slack: Nanos,
    },
}

#[derive(Debug, Args)]
pub struct IpcArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Message sizes, comma-separated (16 bytes to 64KiB).
    #[arg(long = "size", value_name = "LIST", value_delimiter = ',', default_value = "64", value_parser = parse_size_arg)]
    pub sizes: Vec<u64>,
    /// Mechanisms, comma-separated (default: all).
    #[arg(long = "mechanism", value_name = "LIST", value_delimiter = ',', value_parser = by_name::<rtlab_lab::ipc::Mechanism>)]
    pub mechanisms: Vec<rtlab_lab::ipc::Mechanism>,
    /// Run both processes on one CPU (default: two different CPUs).
    #[arg(long)]
    pub same_cpu: bool,
    /// Add the busy-polling variants (rtlab-shm-busy): both ends spin instead of sleeping,
    /// each burning a CPU; reported as separate series.
    #[arg(long)]
    pub busy_poll: bool,
    #[command(flatten)]
    pub explain: ExplainArgs,
}
