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

/// A share of the CPU with as many decimals as show what was lost, to two digits: 92.5 %,
/// 99.87 %, 99.9953 % (four at most).
fn share(pct: f64) -> String {
    let lost = 100.0 - pct;
    let decimals = match lost {
        l if l >= 1.0 || l <= 0.0 => 1,
        l if l >= 0.1 => 2,
        l if l >= 0.01 => 3,
        _ => 4,
    };
    format!("{pct:.decimals$} %")
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
            "{}: {} interruptions over {} ({:.1}/s), {} lost, {} of the CPU available\n",
            s.name,
            num("interruptions"),
            Nanos(num("threshold_ns")),
            num("interruptions") as f64 / (spun.max(1) as f64 / 1e9),
            Nanos(num("lost_ns")),
            share(
                s.config
                    .get("available_pct")
                    .and_then(|v| v.as_f64())
                    .unwrap_or(0.0)
            )
        ));
    }
    out
}

pub fn run(args: NoiseArgs) -> anyhow::Result<Status> {
    let explicit_cpus = args.common.cpus.is_some();
    let explain = args.explain_settings()?;
    let explaining = explain.is_some();
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
        "noise: spinning on {} for {}, {} {}, interruptions over {}{}",
        super::cpus_note(&common.cpus),
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
    if !explaining {
        table.push_str(&super::explain_hint(&doc, "gap"));
    }
    common.outputs.finish(&mut doc, &table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_shows_the_digits_that_tell_what_was_lost() {
        // Regression: `92.4944 %`.
        assert_eq!(share(92.4944), "92.5 %");
        assert_eq!(share(99.8712), "99.87 %");
        assert_eq!(share(99.953), "99.953 %");
        assert_eq!(share(99.9953), "99.9953 %");
        assert_eq!(share(99.99999), "100.0000 %");
        assert_eq!(share(100.0), "100.0 %");
    }
}
