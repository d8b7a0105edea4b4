//! `rtlab invert`.

use crate::cli::InvertArgs;
use crate::output::{result_doc, Console};
use crate::{BadInput, Status};
use rtlab_lab::invert::{Invert, InvertCheck, InvertConfig, Variant};
use rtlab_report::table::Table;
use rtlab_stats::result::{ResultDoc, Series};
use rtlab_stats::Nanos;
use rtlab_sys::affinity::{usable_cpus, CpuList};
use rtlab_sys::sched::Policy;

fn series<'a>(doc: &'a ResultDoc, name: &str) -> Option<&'a Series> {
    doc.series.iter().find(|s| s.name == name)
}

/// Bounded or not, per variant, and how the protocols compare with no protocol.
fn verdict_table(doc: &ResultDoc) -> String {
    let mut t = Table::new(&["variant", "max wait", "bound", "bounded", "exceeded by"]);
    for v in Variant::ALL {
        let Some(s) = series(doc, v.name()) else {
            continue;
        };
        let ns = |key: &str| {
            s.config
                .get(key)
                .and_then(|v| v.as_u64())
                .map_or("-".into(), |v| Nanos(v).to_string())
        };
        let bounded = s
            .config
            .get("bounded")
            .and_then(|b| b.as_bool())
            .unwrap_or(false);
        t.row(vec![
            v.name().to_string(),
            Nanos(s.max.unwrap_or(0.0) as u64).to_string(),
            ns("bound_ns"),
            if bounded { "yes" } else { "NO" }.to_string(),
            if bounded {
                "-".into()
            } else {
                ns("exceeded_by_ns")
            },
        ]);
    }
    let mut out = t.render();
    for (with, without) in [
        ("inherit/rtlab", "none/rtlab"),
        ("inherit/glibc", "none/glibc"),
        ("protect/rtlab", "none/rtlab"),
    ] {
        if let (Some(a), Some(b)) = (
            series(doc, with).and_then(|s| s.max),
            series(doc, without).and_then(|s| s.max),
        ) {
            out.push_str(&format!(
                "{with} max / {without} max = {:.3}x\n",
                a / b.max(1.0)
            ));
        }
    }
    out
}

pub fn run(args: InvertArgs) -> anyhow::Result<Status> {
    let explicit_cpus = args.common.cpus.is_some();
    if args.common.policy.is_some_and(|p| p != Policy::Fifo) {
        return Err(BadInput(
            "--policy: rtlab invert runs SCHED_FIFO threads (inversion needs fixed priorities)"
                .into(),
        )
        .into());
    }
    let common = args.common.validate(Nanos::from_secs(10), 30)?;
    let cpus = if explicit_cpus {
        common.cpus.clone()
    } else {
        CpuList::from(vec![*usable_cpus().as_slice().last().unwrap_or(&0)])
    };
    let mut console = Console::new(common.quiet);
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
        let stalls = series(&doc, "check/stalls")
            .and_then(|s| s.value)
            .unwrap_or(0.0);
        let groups = series(&doc, "check/groups")
            .and_then(|s| s.value)
            .unwrap_or(0.0);
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
            args.variants
        },
        explain: args.explain.settings(),
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
    table.push_str(&verdict_table(&doc));
    table.push_str(&crate::output::outlier_lines(&doc));
    common.outputs.finish(&mut doc, &table)
}
