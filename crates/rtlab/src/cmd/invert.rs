//! `rtlab invert`.

use crate::cli::InvertArgs;
use crate::output::result_doc;
use crate::{BadInput, Status};
use rtlab_lab::invert::{Invert, InvertCheck, InvertConfig, Variant};
use rtlab_sys::affinity::{usable_cpus, CpuList};
use rtlab_sys::sched::Policy;

pub fn run(args: InvertArgs) -> anyhow::Result<Status> {
    let explicit_cpus = args.common.cpus.is_some();
    if args.common.policy.is_some_and(|p| p != Policy::Fifo) {
        return Err(BadInput(
            "--policy: rtlab invert runs SCHED_FIFO threads (inversion needs fixed priorities)"
                .into(),
        )
        .into());
    }
    let common = args.common.validate_with(crate::cli::defaults::INVERT)?;
    common.check_period("--period", args.period)?;
    let cpus = if explicit_cpus {
        common.cpus.clone()
    } else {
        CpuList::from(vec![*usable_cpus().as_slice().last().unwrap_or(&0)])
    };
    let mut console = common.console();
    if args.check {
        let check = InvertCheck {
            cpu: cpus.as_slice()[0],
            high_prio: common.prio,
        };
        console.note(&format!(
            "invert --check: inversion groups on CPU {} for {}",
            check.cpu, common.config.duration
        ));
        let record = rtlab_lab::run_experiment(&check, &common.config, &mut console)?;
        console.finish();
        let mut doc = result_doc("invert", record);
        let value = |name: &str| {
            doc.series
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| s.value)
                .unwrap_or(0.0)
        };
        let (stalls, groups) = (value("check/stalls"), value("check/groups"));
        doc.verdict
            .details
            .insert("stalls".into(), serde_json::json!(stalls as u64));
        let mut table = rtlab_report::table::summary(&doc);
        table.push_str(&format!(
            "{groups:.0} inversion groups, {stalls:.0} stalls\n"
        ));
        let status = common.outputs.finish(&mut doc, &table)?;
        if stalls > 0.0 {
            anyhow::bail!(
                "priority-inversion stall: {stalls:.0} of {groups:.0} groups waited over 1 s"
            );
        }
        return Ok(status);
    }
    let invert = Invert::new(InvertConfig {
        hogs: args.hogs.unwrap_or(cpus.len()),
        cpus: cpus.clone(),
        hold: args.hold,
        period: args.period,
        hog_run: args.hog_run,
        hog_period: args.hog_period,
        high_prio: common.prio,
        variants: if args.variants.is_empty() {
            Variant::ALL.to_vec()
        } else {
            super::once_each(args.variants)
        },
        explain: args.explain.settings()?,
    })?;
    console.note(&format!(
        "invert: CPUs {cpus}, hold {}, high every {}, hogs spin {} of {}, for {}",
        args.hold, args.period, args.hog_run, args.hog_period, common.config.duration
    ));
    let record = rtlab_lab::run_experiment(&invert, &common.config, &mut console)?;
    console.finish();
    let mut doc = result_doc("invert", record);
    let mut table = rtlab_report::table::summary(&doc);
    table.push('\n');
    let variants: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
    table.push_str(&rtlab_report::table::invert::verdict(
        &doc,
        &variants,
        &[
            ("inherit/rtlab", "none/rtlab"),
            ("inherit/glibc", "none/glibc"),
            ("protect/rtlab", "none/rtlab"),
        ],
    ));
    table.push_str(&crate::output::outlier_lines(&doc));
    common.outputs.finish(&mut doc, &table)
}
