//! `rtlab mmap`.

use crate::cli::MmapArgs;
use crate::output::result_doc;
use crate::Status;
use rtlab_lab::mmap::{Disturbance, MmapConfig, MmapExperiment, Waiter};
use rtlab_report::table::Table;
use rtlab_stats::result::ResultDoc;
use rtlab_stats::Nanos;
use rtlab_sys::affinity::usable_cpus;

fn max_of(doc: &ResultDoc, waiter: Waiter, d: Disturbance) -> Option<f64> {
    let name = format!("{}/{}", waiter.name(), d.name());
    doc.series
        .iter()
        .find(|s| s.name == name)
        .and_then(|s| s.max)
}

/// Loaded/idle per waiter, then one plain sentence on the seed's effect.
pub fn verdict(doc: &ResultDoc) -> (String, String) {
    let mut t = Table::new(&[
        "waiter",
        "idle max",
        "mmap max",
        "mmap/idle",
        "mlock max",
        "mlock/idle",
    ]);
    for w in Waiter::ALL {
        let Some(idle) = max_of(doc, w, Disturbance::Idle) else {
            continue;
        };
        let cell = |v: Option<f64>| v.map_or("-".into(), |v| Nanos(v as u64).to_string());
        let ratio = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.1}x", v / idle.max(1.0)));
        let (mmap, mlock) = (
            max_of(doc, w, Disturbance::Mmap),
            max_of(doc, w, Disturbance::Mlock),
        );
        t.row(vec![
            w.name().into(),
            cell(Some(idle)),
            cell(mmap),
            ratio(mmap),
            cell(mlock),
            ratio(mlock),
        ]);
    }
    let sentence = rtlab_lab::mmap::seed_effect_reading(&doc.series, "");
    (t.render(), sentence)
}

pub fn run(args: MmapArgs) -> anyhow::Result<Status> {
    let explicit_cpus = args.common.cpus.is_some();
    let explicit_mlock = args.common.mlock;
    let mut common = args.common.validate_with(crate::cli::defaults::MMAP)?;
    common.check_period("--interval", args.interval)?;
    common.config.mlock = explicit_mlock;
    let cpu = if explicit_cpus {
        common.cpus.as_slice()[0]
    } else {
        *usable_cpus().as_slice().last().unwrap_or(&0)
    };
    let experiment = MmapExperiment::new(MmapConfig {
        cpu,
        interval: args.interval,
        policy: common.policy,
        prio: common.prio,
        size: args.size,
        waiters: if args.waiters.is_empty() {
            Waiter::ALL.to_vec()
        } else {
            args.waiters
        },
        explain: args.explain.settings()?,
    })?;
    let mut console = common.console();
    console.note(&format!(
        "mmap: RT thread on CPU {cpu} every {}, {} {}; disturbing thread maps {} per cycle; for {}",
        args.interval,
        common.policy,
        common.prio,
        rtlab_report::table::format_bytes(args.size),
        common.config.duration
    ));
    let record = rtlab_lab::run_experiment(&experiment, &common.config, &mut console)?;
    console.finish();
    let mut doc = result_doc("mmap", record);
    let (table, sentence) = verdict(&doc);
    doc.verdict
        .details
        .insert("reading".into(), serde_json::json!(sentence));
    let mut text = rtlab_report::table::summary(&doc);
    text.push('\n');
    text.push_str(&table);
    text.push_str(&sentence);
    text.push('\n');
    text.push_str(&crate::output::outlier_lines(&doc));
    common.outputs.finish(&mut doc, &text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_stats::result::{Series, SystemInfo, Unit};

    fn doc(maxima: &[(&str, f64)]) -> ResultDoc {
        let series = maxima
            .iter()
            .map(|(name, max)| Series {
                name: name.to_string(),
                metric: "wakeup_latency".into(),
                unit: Unit::Ns,
                count: Some(1000),
                min: Some(1.0),
                p50: Some(1.0),
                p99: Some(*max),
                max: Some(*max),
                ..Series::default()
            })
            .collect();
        let mut d = crate::output::result_doc(
            "mmap",
            rtlab_lab::RunRecord {
                started_at_ns: 0,
                duration: Nanos(0),
                system: SystemInfo {
                    kernel: "k".into(),
                    cpus: 1,
                    preempt_model: "none".into(),
                    clocksource: "tsc".into(),
                    virtualized: false,
                    privileges: rtlab_stats::result::PrivilegeInfo {
                        rt_sched: true,
                        mlock: true,
                        tracefs: true,
                    },
                },
                load: vec![],
                warnings: vec![],
                series: vec![],
                outliers: vec![],
                interrupted: false,
                load_reports: vec![],
            },
        );
        d.series = series;
        d
    }

    #[test]
    fn a_seed_sized_stall_is_called_visible() {
        let d = doc(&[
            ("private/idle", 50e3),
            ("shared/idle", 60e3),
            ("private/mmap", 70e3),
            ("shared/mmap", 900e6),
        ]);
        let (_, sentence) = verdict(&d);
        assert!(sentence.starts_with("mmap effect VISIBLE"), "{sentence}");
    }

    #[test]
    fn noise_is_not_called_visible() {
        // Shared is 3x private under mmap, but within the idle noise floor.
        let d = doc(&[
            ("private/idle", 300e3),
            ("shared/idle", 250e3),
            ("private/mmap", 100e3),
            ("shared/mmap", 300e3),
        ]);
        let (table, sentence) = verdict(&d);
        assert!(
            sentence.starts_with("mmap effect not visible"),
            "{sentence}"
        );
        assert!(table.contains("private"));
    }
}
