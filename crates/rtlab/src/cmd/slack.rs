//! `rtlab slack get|set` (and, later, the sweep).

use crate::cli::{SlackAction, SlackArgs, SweepArgs};
use crate::output::result_doc;
use crate::output::{standalone_doc, Outputs};
use crate::{BadInput, Status};
use rtlab_lab::slack::{SlackSweep, SweepConfig};
use rtlab_report::table::Table;
use rtlab_stats::result::{Series, Unit};
use rtlab_stats::Nanos;
use rtlab_sys::procfs::{set_thread_timer_slack_ns, threads_of, ThreadInfo};
use rtlab_sys::sleep::Mechanism;

fn slack_text(ns: Option<u64>) -> String {
    ns.map_or_else(|| "unreadable".into(), |v| Nanos(v).to_string())
}

fn list(pid: i32) -> anyhow::Result<Vec<ThreadInfo>> {
    threads_of(pid).map_err(|e| match e {
        rtlab_sys::SysError::NoSuchProcess { .. } => {
            BadInput(format!("--pid {pid}: no such process")).into()
        }
        e => anyhow::Error::from(e),
    })
}

fn get(pid: i32, json: Option<std::path::PathBuf>) -> anyhow::Result<Status> {
    let outputs = Outputs {
        json,
        ..Outputs::default()
    };
    outputs.validate()?;
    let threads = list(pid)?;
    let mut table = Table::new(&["tid", "name", "timer slack"]);
    let mut series = Vec::new();
    for t in &threads {
        table.row(vec![
            t.tid.to_string(),
            t.name.clone(),
            slack_text(t.timer_slack_ns),
        ]);
        if let Some(ns) = t.timer_slack_ns {
            let mut s = Series::value(format!("tid/{}", t.tid), "timer_slack", Unit::Ns, ns as f64);
            s.tags.insert("name".into(), t.name.clone().into());
            series.push(s);
        }
    }
    if series.is_empty() {
        anyhow::bail!(
            "cannot read the timer slack of any thread of {pid} (permission denied? run as root)"
        );
    }
    let now = rtlab_sys::time::realtime_now_ns();
    let mut doc = standalone_doc("slack get", now, Nanos::ZERO, vec![], vec![], series);
    outputs.finish(&mut doc, &table.render())
}

/// A thread name as the kernel keeps it: at most 15 bytes.
fn comm_prefix(name: &str) -> &str {
    let mut end = name.len().min(15);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

fn set(
    pid: i32,
    all: bool,
    tid: Option<i32>,
    thread: Option<String>,
    slack: Nanos,
) -> anyhow::Result<Status> {
    if slack.get() > 1_000_000_000 {
        return Err(BadInput(format!("slack {slack}: at most 1 s")).into());
    }
    if !all && tid.is_none() && thread.is_none() {
        return Err(BadInput("say which threads: --all, --tid TID or --thread NAME".into()).into());
    }
    if thread.as_deref().is_some_and(|n| n.is_empty()) {
        return Err(BadInput("--thread is empty: give a thread's name (or --all)".into()).into());
    }
    if pid > 0 && rtlab_sys::procfs::is_kernel_thread(pid as u32) {
        return Err(BadInput(format!(
            "--pid {pid} is a kernel thread: its timer slack is the kernel's to set"
        ))
        .into());
    }
    let threads = list(pid)?;
    let chosen: Vec<&ThreadInfo> = threads
        .iter()
        .filter(|t| {
            all || tid == Some(t.tid)
                || thread
                    .as_deref()
                    .is_some_and(|n| t.name.starts_with(comm_prefix(n)))
        })
        .collect();
    if chosen.is_empty() {
        let what = match (tid, &thread) {
            (Some(t), _) => format!("--tid {t}: not a thread of process {pid}"),
            (_, Some(n)) => {
                let mut names: Vec<&str> = threads.iter().map(|t| t.name.as_str()).collect();
                names.sort_unstable();
                names.dedup();
                format!(
                    "--thread '{n}': no thread of process {pid} has that name (names: {})",
                    names.join(", ")
                )
            }
            _ => format!("process {pid} has no threads"),
        };
        return Err(BadInput(what).into());
    }
    for t in chosen {
        set_thread_timer_slack_ns(t.tid, slack.get()).map_err(|e| {
            if e.is_permission() {
                anyhow::anyhow!(
                    "{e} (changing another process's timer slack needs CAP_SYS_NICE: run as root)"
                )
            } else {
                anyhow::Error::from(e)
            }
        })?;
        let now = rtlab_sys::procfs::thread_timer_slack_ns(t.tid).ok();
        println!(
            "tid {} ({}): {} -> {}",
            t.tid,
            t.name,
            slack_text(t.timer_slack_ns),
            slack_text(now)
        );
    }
    Ok(Status::Ok)
}

pub fn run(args: SlackArgs) -> anyhow::Result<Status> {
    match args.action {
        Some(SlackAction::Get { pid, json }) => get(pid, json),
        Some(SlackAction::Set {
            pid,
            all,
            tid,
            thread,
            slack,
        }) => set(pid, all, tid, thread, slack),
        None => sweep(args.sweep),
    }
}

fn sweep(args: SweepArgs) -> anyhow::Result<Status> {
    if args.common.policy.is_some() || args.common.prio.is_some() {
        return Err(BadInput(
            "--policy/--prio: the sweep runs SCHED_OTHER (slack does not apply to FIFO/RR) and adds its own SCHED_FIFO row"
                .into(),
        )
        .into());
    }
    let explicit_cpus = args.common.cpus.is_some();
    let common = args.common.validate_with(crate::cli::defaults::SLACK)?;
    let cpu = if explicit_cpus {
        common.cpus.as_slice()[0]
    } else {
        *rtlab_sys::affinity::usable_cpus()
            .as_slice()
            .last()
            .unwrap_or(&0)
    };
    let mechanisms = if args.mechanisms.is_empty() {
        Mechanism::ALL.to_vec()
    } else {
        args.mechanisms
    };
    let sweep = SlackSweep::new(SweepConfig {
        sleeps: args.sleeps,
        slacks: args.slacks.clone(),
        mechanisms,
        cpu,
        fifo_row: true,
        prefix: String::new(),
        explain: args.explain.settings()?,
    })?;
    let mut console = common.console();
    console.note(&format!(
        "slack sweep on CPU {cpu} for {}",
        common.config.duration
    ));
    let record = rtlab_lab::run_experiment(&sweep, &common.config, &mut console)?;
    console.finish();
    let mut doc = result_doc("slack", record);
    let mut text = rtlab_report::table::slack::sweep(&doc, &args.slacks);
    text.push_str(&crate::output::outlier_lines(&doc));
    common.outputs.finish(&mut doc, &text)
}
