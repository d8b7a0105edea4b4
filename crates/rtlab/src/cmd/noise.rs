//! `rtlab noise`.

use crate::cli::NoiseArgs;
use crate::output::result_doc;
use crate::Status;
use rtlab_lab::noise::{Noise, NoiseConfig};
use rtlab_stats::result::Series;
use rtlab_stats::Nanos;
use rtlab_sys::affinity::{usable_cpus, CpuList};

/// Every usable CPU but the lowest (left to housekeeping), or all of them when there is one.
pub fn default_cpus() -> CpuList {
    let all = usable_cpus();
    match all.as_slice() {
        [_, rest @ ..] if !rest.is_empty() => CpuList::from(rest.to_vec()),
        _ => all,
    }
}

/// One line per series: interruptions, the time they took, the share left.
pub fn interruption_lines(series: &[Series]) -> String {
    let mut out = String::new();
    for s in series
        .iter()
        .filter(|s| s.metric == rtlab_lab::noise::METRIC)
    {
        let num = |k: &str| s.config.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
        let spun = num("spun_ns");
        out.push_str(&format!(
            "{}: {} interruptions over {} ({:.1}/s), {} lost, {:.4} % of the CPU available\n",
            s.name,
            num("interruptions"),
            Nanos(num("threshold_ns")),
            num("interruptions") as f64 / (spun.max(1) as f64 / 1e9),
            Nanos(num("lost_ns")),
            s.config
                .get("available_pct")
                .and_then(|v| v.as_f64())
                .unwrap_or(0.0)
        ));
    }
    out
}

pub fn run(args: NoiseArgs) -> anyhow::Result<Status> {
    let explicit_cpus = args.common.cpus.is_some();
    let explain = args.explain_settings();
    let threshold = args.threshold;
    let mut common = args.common.validate_with(crate::cli::defaults::NOISE)?;
    if !explicit_cpus {
        common.cpus = default_cpus();
    }
    let noise = Noise::new(NoiseConfig {
        cpus: common.cpus.clone(),
        policy: common.policy,
        prio: common.prio,
        threshold,
        explain,
    })?;
    let mut console = common.console();
    console.note(&format!(
        "noise: spinning on CPUs {} for {}, {} {}, interruptions over {}{}",
        common.cpus,
        common.config.duration,
        common.policy,
        common.prio,
        threshold,
        super::loads_note(&common.config.loads)
    ));
    let record = rtlab_lab::run_experiment(&noise, &common.config, &mut console)?;
    console.finish();
    let mut doc = result_doc("noise", record);
    let mut table = rtlab_report::table::summary(&doc);
    table.push_str(&interruption_lines(&doc.series));
    table.push_str(&crate::output::outlier_lines(&doc));
    common.outputs.finish(&mut doc, &table)
}
