//! `rtlab wakeup`.

use crate::cli::WakeupArgs;
use crate::output::{result_doc, Console};
use crate::Status;
use rtlab_lab::wakeup::{Placement, Wakeup, WakeupConfig};

pub fn run(args: WakeupArgs) -> anyhow::Result<Status> {
    let explicit_cpus = args.common.cpus.is_some();
    let common = args.common.validate_with(crate::cli::defaults::WAKEUP)?;
    let placement = match args.threads {
        Some(n) => Placement::Threads(n, explicit_cpus.then(|| common.cpus.clone())),
        None => Placement::PerCpu(common.cpus.clone()),
    };
    let wakeup = Wakeup::new(WakeupConfig {
        placement,
        interval: args.interval,
        policy: common.policy,
        prio: common.prio,
        aligned: args.aligned,
        explain: args.explain.settings(),
    })?;
    let mut console = Console::new(common.quiet);
    console.note(&format!(
        "wakeup: {} for {}, interval {}, {} {}{}",
        match args.threads {
            Some(n) => format!("{n} threads"),
            None => format!("CPUs {}", common.cpus),
        },
        common.config.duration,
        args.interval,
        common.policy,
        common.prio,
        if common.config.loads.is_empty() {
            String::new()
        } else {
            format!(
                ", load {}",
                common
                    .config
                    .loads
                    .iter()
                    .map(|l| l.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" + ")
            )
        }
    ));
    let record = rtlab_lab::run_experiment(&wakeup, &common.config, &mut console)?;
    console.finish();
    let mut doc = result_doc("wakeup", record);
    let mut table = rtlab_report::table::summary(&doc);
    table.push_str(&crate::output::outlier_lines(&doc));
    common.outputs.finish(&mut doc, &table)
}
