//! `rtlab wakeup`.

use crate::cli::WakeupArgs;
use crate::hlog::HlogWriter;
use crate::output::result_doc;
use crate::{BadInput, Status};
use rtlab_lab::wakeup::{Placement, Wakeup, WakeupConfig};

pub fn run(args: WakeupArgs) -> anyhow::Result<Status> {
    let explicit_cpus = args.common.cpus.is_some();
    let common = args
        .common
        .validate_until_stopped(crate::cli::defaults::WAKEUP)?;
    common.check_period("--interval", args.interval)?;
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
        explain: args.explain.settings()?,
        interval_log: args.hlog.is_some().then_some(args.interval_log),
    })?;
    if let Some(path) = &args.hlog {
        rtlab_report::check_writable_file(path).map_err(|e| BadInput(format!("--hlog {e}")))?;
    }
    let log = match &args.hlog {
        Some(path) => Some(HlogWriter::create(
            path,
            "rtlab wakeup: wakeup latency (ns) per measuring thread, tag = series (threadN)",
        )?),
        None => None,
    };
    let mut console = common.console().hlog(log);
    console.note(&format!(
        "wakeup: {} {}, interval {}, {} {}{}",
        match args.threads {
            Some(1) => "1 thread".to_string(),
            Some(n) => format!("{n} threads"),
            None => super::cpus_note(&common.cpus),
        },
        if common.config.duration == crate::cli::FOREVER {
            "until Ctrl-C or SIGTERM".to_string()
        } else {
            format!("for {}", common.config.duration)
        },
        args.interval,
        common.policy,
        common.prio,
        super::loads_note(&common.config.loads)
    ));
    let record = rtlab_lab::run_experiment(&wakeup, &common.config, &mut console)?;
    console.finish();
    console.finish_hlog()?;
    let mut doc = result_doc("wakeup", record);
    let mut table = rtlab_report::table::summary(&doc);
    table.push_str(&crate::output::outlier_lines(&doc));
    if args.explain.settings()?.is_none() {
        table.push_str(&super::explain_hint(&doc, "wakeup"));
    }
    common.outputs.finish(&mut doc, &table)
}
