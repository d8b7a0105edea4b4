//! Raw command-line arguments (clap), split by job: the argument structs per command group,
//! the help texts, and the value parsers that make bad input one clear line.

mod experiments;
mod help;
mod net;
mod parse;
mod tools;

pub use experiments::*;
pub use net::*;
pub use parse::FOREVER;
pub use tools::*;

use clap::{Parser, Subcommand};

/// The flag that sets a lab configuration field (`LabError::BadConfig`): `--` and the field
/// with dashes, but for the fields whose flag is named otherwise.
pub fn flag_of(field: &str) -> String {
    let flag = match field {
        "high_prio" => "prio",
        "sizes" => "size",
        "streams" => "stream",
        "reverse" => "reverse-stream",
        "loss_pct" => "loss",
        "sysctls" => "netns-sysctl",
        "waiters" => "waiter",
        "placement" => "cpus",
        other => return format!("--{}", other.replace('_', "-")),
    };
    format!("--{flag}")
}
use help::*;
use rtlab_load::LOAD_HELP;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(name = "rtlab", version, about = ABOUT, after_help = AFTER_HELP, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Each experiment's default `--duration` and `--prio`: its help shows them, its command
/// uses them (one place for both).
pub mod defaults {
    use rtlab_stats::Nanos;

    /// `(--duration, --prio)`.
    pub type Defaults = (Nanos, u32);
    pub const WAKEUP: Defaults = (Nanos::from_secs(10), 95);
    pub const LOCK: Defaults = (Nanos::from_secs(6), 10);
    pub const INVERT: Defaults = (Nanos::from_secs(10), 30);
    pub const MMAP: Defaults = (Nanos::from_secs(8), 95);
    pub const SLACK: Defaults = (Nanos::from_secs(20), 95);
    pub const IPC: Defaults = (Nanos::from_secs(10), 50);
    pub const NET: Defaults = (Nanos::from_secs(10), 80);
    pub const NOISE: Defaults = (Nanos::from_secs(10), 1);

    /// The help of the shared `--duration` with this default.
    pub fn duration_help(d: Defaults) -> String {
        format!(
            "How long to measure: 500ms, 10s, 1m30s (units ns, us, ms, s, m, h, d; default {}s){}.",
            d.0 .0 / 1_000_000_000,
            if d == WAKEUP {
                "; forever: until Ctrl-C or SIGTERM"
            } else {
                ""
            }
        )
    }

    /// The help of the shared `--prio` with this default.
    pub fn prio_help(d: Defaults) -> String {
        format!(
            "Priority of the measuring threads, 1-99 for fifo/rr (default {}).",
            d.1
        )
    }
}

#[derive(Debug, Subcommand)]
// Parsed once per run: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Timed-wakeup latency: wake at absolute deadlines, latency = actual - scheduled.
    #[command(after_help = WAKEUP_HELP, mut_arg("duration", |a| a.help(defaults::duration_help(defaults::WAKEUP))), mut_arg("prio", |a| a.help(defaults::prio_help(defaults::WAKEUP))))]
    Wakeup(WakeupArgs),
    /// Mutex cost: fast path (uncontended) and slow path (hand-off) of rtlab's and others' locks.
    #[command(after_help = LOCK_HELP, mut_arg("duration", |a| a.help(defaults::duration_help(defaults::LOCK))), mut_arg("prio", |a| a.help(defaults::prio_help(defaults::LOCK))))]
    Lock(LockArgs),
    /// Priority inversion: how long a high-priority thread waits for a lock, per protocol.
    #[command(after_help = INVERT_HELP, mut_arg("duration", |a| a.help(defaults::duration_help(defaults::INVERT))), mut_arg("prio", |a| a.help(defaults::prio_help(defaults::INVERT))))]
    Invert(InvertArgs),
    /// Does a non-RT thread's mmap delay an RT thread's timed futex wait (shared vs private)?
    #[command(after_help = MMAP_HELP, mut_arg("duration", |a| a.help(defaults::duration_help(defaults::MMAP))), mut_arg("prio", |a| a.help(defaults::prio_help(defaults::MMAP))))]
    Mmap(MmapArgs),
    /// Timer slack: what it adds to each way of sleeping (a sweep), or get/set it on a process.
    #[command(after_help = SLACK_HELP, args_conflicts_with_subcommands = true, mut_arg("duration", |a| a.help(defaults::duration_help(defaults::SLACK))), mut_arg("prio", |a| a.help("Not for the sweep: it runs SCHED_OTHER (slack does not apply to FIFO/RR) and adds its own SCHED_FIFO row.")))]
    Slack(SlackArgs),
    /// Run a command with timer slack, scheduling and CPU affinity set (like chrt/taskset).
    #[command(after_help = EXEC_HELP)]
    Exec(ExecArgs),
    /// Message passing between two processes: rtlab's shared-memory channel vs the kernel's.
    #[command(after_help = IPC_HELP, mut_arg("duration", |a| a.help(defaults::duration_help(defaults::IPC))), mut_arg("prio", |a| a.help(defaults::prio_help(defaults::IPC))))]
    Ipc(IpcArgs),
    /// Bounded-latency messaging over TCP/UDP: periodic streams, ping-pong, the peer.
    #[command(after_help = NET_HELP)]
    Net(NetArgs),
    /// Busy-loop noise: how much of each CPU a spinning thread gets, and what takes the rest.
    #[command(after_help = NOISE_HELP, mut_arg("duration", |a| a.help(defaults::duration_help(defaults::NOISE))), mut_arg("prio", |a| a.help(defaults::prio_help(defaults::NOISE))), mut_arg("cpus", |a| a.help("CPUs to measure, one spinning thread each: 0, 0,1, 0-3 (default: every usable CPU but the lowest, left for housekeeping; all of them on a one-CPU machine).")), mut_arg("top", |a| a.help("How many interruptions to explain, the longest first (implies --explain; default 100).")))]
    Noise(NoiseArgs),
    /// Audit this machine's real-time settings: status, value, why, and the fix for each.
    #[command(after_help = CHECK_HELP)]
    Check(CheckArgs),
    /// Apply the run-time fixes of rtlab check (saving every prior value), or revert them.
    #[command(after_help = TUNE_HELP)]
    Tune(TuneArgs),
    /// Render result documents as one self-contained HTML report with SVG plots.
    #[command(after_help = REPORT_HELP)]
    Report(ReportArgs),
    /// Compare two result documents: B/A per series and percentile, with significance.
    #[command(after_help = DIFF_HELP)]
    Diff(DiffArgs),
    /// Run disturbance loads alone (the same loads --load adds to any experiment).
    #[command(after_help = LOAD_HELP)]
    Load(LoadArgs),
    /// Check this machine end to end: wakeup idle and under load, one verdict, a report.
    #[command(after_help = SURVEY_HELP)]
    Survey(SurveyArgs),
    /// Watch a running program's threads: how late each was scheduled, and why.
    #[command(after_help = WATCH_HELP)]
    Watch(WatchArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = COMPLETIONS_HELP)]
    Completions(CompletionsArgs),
    /// Print the manual page of rtlab or of one of its commands (troff, for man -l).
    #[command(after_help = MAN_HELP)]
    Man(ManArgs),
}

/// Parses the process arguments. Help and version print and exit 0; any other error prints
/// its first line (which names the argument and why) and exits 2.
/// clap's error as one line: its message with what it names (the missing argument, the
/// value) and its tip ("a similar subcommand exists: 'wakeup'"), without the usage.
fn one_line(text: &str) -> String {
    let mut message = String::new();
    let mut named = Vec::new();
    let mut tips = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if message.is_empty() {
            message = line.trim_end_matches(':').to_string();
        } else if let Some(tip) = line.strip_prefix("tip:") {
            tips.push(tip.trim().to_string());
        } else {
            named.push(line.to_string());
        }
    }
    if message.is_empty() {
        message = "error: bad arguments".into();
    }
    if !named.is_empty() {
        message = format!("{message}: {}", named.join(", "));
    }
    for tip in tips {
        message = format!("{message} ({tip})");
    }
    message
}

pub fn parse() -> Result<Cli, ExitCode> {
    Cli::try_parse().map_err(|err| {
        use clap::error::ErrorKind;
        match err.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                let _ = err.print();
                if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                }
            }
            _ => {
                eprintln!("{}", one_line(&err.render().to_string()));
                ExitCode::from(2)
            }
        }
    })
}
