//! One module per subcommand.

mod check;
mod diff;
mod docs;
mod exec;
mod invert;
mod ipc;
mod load;
mod lock;
mod mmap;
mod net;
mod noise;
mod report;
mod slack;
mod survey;
mod tune;
mod tune_verify;
mod wakeup;
mod watch;
mod watch_status;

use crate::cli::{Cli, Command, CommonArgs};
use crate::output::Outputs;
use crate::{BadInput, Status};
use rtlab_lab::CommonConfig;
use rtlab_stats::Nanos;
use rtlab_sys::affinity::{usable_cpus, CpuList};
use rtlab_sys::sched::Policy;

pub fn run(cli: Cli) -> anyhow::Result<Status> {
    // A run killed with SIGKILL leaves its tracing instance on; any later run that may change
    // the machine removes it (check only reports it; the read-only commands leave it).
    let read_only = matches!(
        cli.command,
        Command::Check(_)
            | Command::Diff(_)
            | Command::Report(_)
            | Command::Completions(_)
            | Command::Man(_)
    );
    if !read_only && rtlab_sys::process::effective_uid() == 0 {
        for dir in rtlab_sys::tracefs::remove_stale_instances() {
            eprintln!(
                "rtlab: removed {}, left tracing by a killed rtlab run",
                dir.display()
            );
        }
        for group in rtlab_sys::tracefs::remove_stale_uprobes() {
            eprintln!("rtlab: removed the uprobe events {group}/*, left by a killed rtlab run");
        }
    }
    match cli.command {
        Command::Wakeup(args) => wakeup::run(args),
        Command::Lock(args) => lock::run(args),
        Command::Invert(args) => invert::run(args),
        Command::Ipc(args) => ipc::run(args),
        Command::Mmap(args) => mmap::run(args),
        Command::Slack(args) => slack::run(args),
        Command::Exec(args) => exec::run(args),
        Command::Net(args) => net::run(args),
        Command::Noise(args) => noise::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Check(args) => check::run(args),
        Command::Tune(args) => tune::run(args),
        Command::Report(args) => report::run(args),
        Command::Load(args) => load::run(args),
        Command::Completions(args) => docs::completions(args),
        Command::Man(args) => docs::man(args),
        Command::Survey(args) => survey::run(args),
        Command::Watch(args) => watch::run(args),
    }
}

/// Reads a result document for `diff` or `report`: one line naming the file when it is not
/// one, or when its histograms would cost more to decode than one document may.
pub fn read_doc(path: &std::path::Path) -> Result<rtlab_stats::result::ResultDoc, BadInput> {
    let text =
        std::fs::read_to_string(path).map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
    let doc: rtlab_stats::result::ResultDoc = serde_json::from_str(&text).map_err(|e| {
        BadInput(format!(
            "{}: not an rtlab result document ({e})",
            path.display()
        ))
    })?;
    let known = rtlab_stats::result::SCHEMA_VERSION;
    if doc.schema_version != known {
        return Err(BadInput(format!(
            "{}: a result document of schema version {}; this rtlab reads version {known}",
            path.display(),
            doc.schema_version
        )));
    }
    doc.check_decode_work()
        .map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
    Ok(doc)
}

/// Validated common options.
pub struct Common {
    pub config: CommonConfig,
    pub outputs: Outputs,
    pub cpus: CpuList,
    pub policy: Policy,
    pub prio: u32,
    pub quiet: bool,
    /// `--status-every`.
    pub status_every: Nanos,
}

/// "CPU 1" or "CPUs 0-3" for a run's first line.
pub fn cpus_note(cpus: &CpuList) -> String {
    match cpus.as_slice() {
        [one] => format!("CPU {one}"),
        _ => format!("CPUs {cpus}"),
    }
}

/// What a worst case counts as worth explaining: a millisecond is a deadline missed for most
/// real-time loops, and more than the machine's own noise on any but a loaded VM.
const WORTH_EXPLAINING: Nanos = Nanos::from_millis(1);

/// For a run without --explain whose worst `what` (wakeup, gap) is over a millisecond: one
/// line saying how to find out why (empty otherwise).
pub fn explain_hint(doc: &rtlab_stats::result::ResultDoc, what: &str) -> String {
    let worst = doc
        .series
        .iter()
        .filter_map(|s| Some((s.max?, s)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match worst {
        Some((max, s)) if max >= WORTH_EXPLAINING.get() as f64 => format!(
            "the worst {what} ({}, {}) is over {WORTH_EXPLAINING}: run again with --explain{} to \
             name what caused it\n",
            Nanos(max.round() as u64),
            s.name,
            if rtlab_sys::process::effective_uid() == 0 {
                ""
            } else {
                " (as root)"
            }
        ),
        _ => String::new(),
    }
}

/// ", load cpu + hog:99:3ms/200ms" for a run's first line (empty without loads).
pub fn loads_note(loads: &[rtlab_load::LoadSpec]) -> String {
    if loads.is_empty() {
        return String::new();
    }
    format!(
        ", load {}",
        loads
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
            .join(" + ")
    )
}

impl Common {
    /// The console of this run: live status on a terminal, status lines every
    /// `--status-every` elsewhere, nothing but warnings with `--quiet`.
    pub fn console(&self) -> crate::output::Console {
        crate::output::Console::new(self.quiet).status_every(self.status_every)
    }
}

/// A list option's values, each once, in the order first given (`--impl std,std` measures
/// std once).
pub fn once_each<T: PartialEq>(values: Vec<T>) -> Vec<T> {
    let mut kept: Vec<T> = Vec::with_capacity(values.len());
    for v in values {
        if !kept.contains(&v) {
            kept.push(v);
        }
    }
    kept
}

/// The longest period a measuring thread may wait between two wakeups: Ctrl-C and SIGTERM
/// stop a run when each thread next wakes, so a longer one would not stop in reasonable time.
const LONGEST_PERIOD: Nanos = Nanos(10_000_000_000);

impl Common {
    /// Checks a measuring thread's period (`option`, e.g. `--interval`) against the run: at
    /// most [`LONGEST_PERIOD`] and shorter than the run, or no wakeup would be measured.
    pub fn check_period(&self, option: &str, period: Nanos) -> Result<(), BadInput> {
        if period > LONGEST_PERIOD {
            return Err(BadInput(format!(
                "{option} {period}: at most {LONGEST_PERIOD} (a run stops at each thread's next \
                 wakeup, so Ctrl-C would wait that long)"
            )));
        }
        let duration = self.config.duration;
        if period >= duration {
            return Err(BadInput(format!(
                "{option} {period} is not shorter than --duration {duration}: no wakeup would be \
                 measured (give a longer --duration or a shorter {option})"
            )));
        }
        Ok(())
    }
}

impl CommonArgs {
    /// Checks the combination of options and the output destinations.
    /// [`CommonArgs::validate`] with a command's defaults (`crate::cli::defaults`).
    pub fn validate_with(self, d: crate::cli::defaults::Defaults) -> Result<Common, BadInput> {
        if self.duration == Some(crate::cli::FOREVER) {
            return Err(BadInput(
                "--duration forever: only rtlab wakeup (and rtlab watch without --duration) \
                 runs until stopped; give this command a duration"
                    .into(),
            ));
        }
        self.validate(d.0, d.1)
    }

    /// [`CommonArgs::validate_with`] for a command that may run until stopped
    /// (`--duration forever`).
    pub fn validate_until_stopped(
        self,
        d: crate::cli::defaults::Defaults,
    ) -> Result<Common, BadInput> {
        self.validate(d.0, d.1)
    }

    pub fn validate(self, default_duration: Nanos, default_prio: u32) -> Result<Common, BadInput> {
        let policy = self.policy.unwrap_or(Policy::Fifo);
        let prio = match (policy, self.prio) {
            (Policy::Other, None | Some(0)) => 0,
            (Policy::Other, Some(p)) => {
                return Err(BadInput(format!(
                    "--prio {p}: SCHED_OTHER takes no priority (omit --prio)"
                )))
            }
            (_, Some(0)) => {
                return Err(BadInput(format!(
                    "--prio 0 is only valid with --policy other; {policy} needs 1-99"
                )))
            }
            (_, Some(p)) => p,
            (_, None) => default_prio,
        };
        let outputs = Outputs {
            json: self.json,
            hgrm: self.hgrm,
            fail_above: self.fail_above,
            gates: vec![],
        };
        outputs.validate()?;
        Ok(Common {
            config: CommonConfig {
                duration: self.duration.unwrap_or(default_duration),
                loads: self.loads,
                mlock: !self.no_mlock,
                dma_latency: !self.no_dma_latency,
            },
            outputs,
            cpus: self.cpus.unwrap_or_else(usable_cpus),
            policy,
            prio,
            quiet: self.quiet,
            status_every: self.status_every,
        })
    }
}
