//! `rtlab ipc`.

use crate::cli::IpcArgs;
use crate::output::result_doc;
use crate::Status;
use rtlab_lab::ipc::{size_label, IpcConfig, IpcExperiment, Mechanism};
use rtlab_stats::result::ResultDoc;

fn figure(
    doc: &ResultDoc,
    name: &str,
    pick: fn(&rtlab_stats::result::Series) -> Option<f64>,
) -> Option<f64> {
    doc.series.iter().find(|s| s.name == name).and_then(pick)
}

/// rtlab-shm against posix-mq, per size: the figures the targets are stated in.
fn ratios(doc: &ResultDoc, sizes: &[usize]) -> String {
    let mut out = String::new();
    for &size in sizes {
        let suffix = if sizes.len() > 1 {
            format!("/{}", size_label(size))
        } else {
            String::new()
        };
        let rtt = |m: &str| figure(doc, &format!("{m}/rtt{suffix}"), |s| s.p50);
        let tput = |m: &str| figure(doc, &format!("{m}/throughput{suffix}"), |s| s.value);
        if let (Some(a), Some(b)) = (rtt("rtlab-shm"), rtt("posix-mq")) {
            out.push_str(&format!(
                "rtlab-shm/rtt{suffix} p50 / posix-mq p50 = {:.2}x\n",
                a / b
            ));
        }
        if let (Some(a), Some(b)) = (tput("rtlab-shm"), tput("posix-mq")) {
            out.push_str(&format!(
                "rtlab-shm/throughput{suffix} / posix-mq = {:.2}x\n",
                a / b
            ));
        }
    }
    out
}

pub fn run(args: IpcArgs) -> anyhow::Result<Status> {
    let common = args.common.validate_with(crate::cli::defaults::IPC)?;
    let cpus = common.cpus.as_slice();
    let pair = if args.same_cpu || cpus.len() == 1 {
        (cpus[0], cpus[0])
    } else {
        (cpus[0], cpus[1])
    };
    let sizes: Vec<usize> = super::once_each(args.sizes.iter().map(|&s| s as usize).collect());
    let experiment = IpcExperiment::new(IpcConfig {
        mechanisms: {
            let mut chosen = if args.mechanisms.is_empty() {
                Mechanism::all()
            } else {
                super::once_each(args.mechanisms)
            };
            if args.busy_poll {
                for m in Mechanism::busy_polling() {
                    if !chosen.contains(&m) {
                        chosen.push(m);
                    }
                }
            }
            chosen
        },
        sizes: sizes.clone(),
        cpus: pair,
        policy: common.policy,
        prio: common.prio,
        explain: args.explain.settings()?,
    })?;
    let mut console = common.console();
    console.note(&format!(
        "ipc: CPUs {} and {}, sizes {}, {} {}, for {}",
        pair.0,
        pair.1,
        sizes
            .iter()
            .map(|&s| size_label(s))
            .collect::<Vec<_>>()
            .join(","),
        common.policy,
        common.prio,
        common.config.duration
    ));
    let record = rtlab_lab::run_experiment(&experiment, &common.config, &mut console)?;
    console.finish();
    let mut doc = result_doc("ipc", record);
    let mut text = rtlab_report::table::summary(&doc);
    text.push_str(&ratios(&doc, &sizes));
    text.push_str(&crate::output::outlier_lines(&doc));
    common.outputs.finish(&mut doc, &text)
}
