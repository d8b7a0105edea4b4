//! `rtlab exec`: set inheritable attributes on this process, then become the command.

use crate::cli::ExecArgs;
use crate::{BadInput, Status};
use rtlab_stats::Nanos;
use rtlab_sys::sched::Policy;
use std::os::unix::process::CommandExt;

pub fn run(args: ExecArgs) -> anyhow::Result<Status> {
    let policy = match (args.policy, args.prio) {
        (Some(Policy::Other), Some(p)) if p > 0 => {
            return Err(BadInput(format!("--prio {p}: SCHED_OTHER takes no priority")).into())
        }
        (Some(p), None) if p.is_realtime() => {
            return Err(BadInput(format!("--policy {p} needs --prio N (1-99)")).into())
        }
        (None, Some(p)) => Some((Policy::Fifo, p)),
        (Some(policy), prio) => Some((policy, prio.unwrap_or(0))),
        (None, None) => None,
    };
    if let Some((policy, 0)) = policy {
        if policy.is_realtime() {
            return Err(BadInput(format!(
                "--prio 0 is only valid with --policy other; {policy} needs 1-99"
            ))
            .into());
        }
    }
    if let Some(slack) = args.slack {
        if slack.get() > 1_000_000_000 {
            return Err(BadInput(format!("--slack {slack}: at most 1 s")).into());
        }
    }
    let mut said = Vec::new();
    if let Some(cpus) = &args.cpus {
        rtlab_sys::affinity::set_current_thread_affinity(cpus)?;
        said.push(format!("CPUs {cpus}"));
    }
    if let Some(slack) = args.slack {
        rtlab_sys::slack::set_current_timer_slack_ns(slack.get())?;
        said.push(format!(
            "timer slack {}",
            if slack.get() == 0 {
                "default".to_string()
            } else {
                Nanos(slack.get()).to_string()
            }
        ));
    }
    if let Some((policy, prio)) = policy {
        rtlab_sys::sched::set_current_thread_scheduler(policy, prio)
            .map_err(|e| anyhow::anyhow!("{e} (real-time policies need root or CAP_SYS_NICE)"))?;
        said.push(format!("SCHED_{} {prio}", policy.as_str().to_uppercase()));
    }
    if args.mlock {
        rtlab_sys::process::raise_memlock_limit()?;
        said.push("RLIMIT_MEMLOCK unlimited (memory locks do not survive exec: the program must lock itself)".into());
    }
    let program = &args.command[0];
    if !said.is_empty() {
        eprintln!(
            "rtlab exec: {} -> {}",
            said.join(", "),
            program.to_string_lossy()
        );
    }
    let err = std::process::Command::new(program)
        .args(&args.command[1..])
        .exec();
    Err(BadInput(format!(
        "cannot execute '{}': {err}",
        program.to_string_lossy()
    ))
    .into())
}
