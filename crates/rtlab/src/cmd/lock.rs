//! `rtlab lock`.

use crate::cli::LockArgs;
use crate::output::result_doc;
use crate::Status;
use rtlab_lab::lock::{Impl, LockConfig, LockExperiment, Sched};
use rtlab_stats::result::Series;

/// The comparisons the targets are stated in: (rtlab series, anchor series).
const COMPARISONS: &[(&str, &str)] = &[
    ("rtlab-pi/uncontended", "glibc-normal/uncontended"),
    ("rtlab-pi/uncontended", "glibc-pi/uncontended"),
    ("rtlab-pi/handoff", "glibc-pi/handoff"),
    ("rtlab-robust/uncontended", "glibc-robust/uncontended"),
    ("rtlab-robust/uncontended", "glibc-robust-pi/uncontended"),
    ("rtlab-ceiling/uncontended", "glibc-pp/uncontended"),
    ("rtlab-robust/uncontended", "sysv-sem/uncontended"),
    ("rtlab-robust/handoff", "sysv-sem/handoff"),
];

fn value(series: &[Series], name: &str) -> Option<f64> {
    series.iter().find(|s| s.name == name).and_then(|s| s.value)
}

pub fn run(args: LockArgs) -> anyhow::Result<Status> {
    let impls = if args.impls.is_empty() {
        Impl::ALL.to_vec()
    } else {
        super::once_each(args.impls)
    };
    let common = args.common.validate_with(crate::cli::defaults::LOCK)?;
    let experiment = LockExperiment::new(LockConfig {
        impls,
        cpus: common.cpus.clone(),
        sched: Sched {
            policy: common.policy,
            prio: common.prio,
        },
        explain: args.explain.settings()?,
        processes: args.processes,
    })?;
    let mut console = common.console();
    console.note(&format!(
        "lock: {} implementations{} for {}, {} {}, CPUs {}",
        experiment.implementations(),
        if args.processes {
            ", in shared memory between two processes"
        } else {
            ""
        },
        common.config.duration,
        common.policy,
        common.prio,
        common.cpus
    ));
    let record = rtlab_lab::run_experiment(&experiment, &common.config, &mut console)?;
    console.finish();
    let mut doc = result_doc("lock", record);
    let mut table = rtlab_report::table::summary(&doc);
    for (ours, theirs) in COMPARISONS {
        if let (Some(a), Some(b)) = (value(&doc.series, ours), value(&doc.series, theirs)) {
            table.push_str(&format!("{ours} / {theirs} = {:.2}x\n", a / b));
        }
    }
    table.push_str(&crate::output::outlier_lines(&doc));
    common.outputs.finish(&mut doc, &table)
}
