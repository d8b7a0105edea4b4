//! `rtlab survey`: short stages of every experiment, one verdict.
//!
//! Stages: wakeup idle, wakeup under `cpu` + `mmap` load, then short stages of lock, invert,
//! mmap, slack, ipc, net and noise. Series are prefixed with their stage
//! (`wakeup-idle/thread0`, `lock/rtlab-pi/uncontended`). The verdict rows go into `verdict.survey` of the
//! result document so any writer can render them from the JSON alone.

use crate::harness::{run_experiment, CommonConfig, Observer, RunRecord};
use crate::invert::{Invert, InvertConfig, Variant};
use crate::ipc::{IpcConfig, IpcExperiment};
use crate::lock::{Impl, LockConfig, LockExperiment, Sched};
use crate::mmap::{MmapConfig, MmapExperiment, Waiter};
use crate::slack::{SlackSweep, SweepConfig};
use crate::wakeup::{Placement, Wakeup, WakeupConfig};
use crate::Experiment;
use crate::LabError;
use rtlab_load::LoadSpec;
use rtlab_stats::details::{CauseShare, SurveyRow};
use rtlab_stats::result::Series;
use rtlab_stats::Nanos;
use rtlab_sys::affinity::CpuList;
use rtlab_sys::sched::Policy;

/// The loads of the survey's loaded stage.
pub const LOADED_STAGE_LOADS: &[&str] = &["cpu", "mmap"];

/// Survey settings.
#[derive(Debug, Clone)]
pub struct SurveyConfig {
    /// Duration of each stage.
    pub stage_duration: Nanos,
    /// CPUs to measure on.
    pub cpus: CpuList,
    /// Lock memory.
    pub mlock: bool,
    /// Hold /dev/cpu_dma_latency.
    pub dma_latency: bool,
}

/// All stages' records, merged.
#[derive(Debug)]
pub struct SurveyRecord {
    /// The merged record (series of all stages, warnings deduplicated).
    pub record: RunRecord,
    /// `verdict.survey`: one object per area.
    pub verdict_rows: Vec<SurveyRow>,
}

/// The longest any of the short stages (lock, invert, mmap ...) runs.
const SHORT_STAGE: Nanos = Nanos::from_secs(4);

/// How many short stages follow the wakeup stages.
const SHORT_STAGES: usize = 7;

/// The implementations the survey's lock stage compares.
const LOCK_STAGE_IMPLS: [Impl; 5] = [
    Impl::RtlabPi,
    Impl::RtlabRobust,
    Impl::GlibcNormal,
    Impl::GlibcPi,
    Impl::GlibcRobust,
];

/// The causes that account for most of the explained lateness: (name, share of the total).
pub fn top_causes(outliers: &[rtlab_stats::result::Outlier], n: usize) -> Vec<(String, f64)> {
    let mut by: std::collections::BTreeMap<String, u64> = Default::default();
    for c in outliers.iter().flat_map(|o| &o.causes) {
        let name = match (&c.task, &c.detail) {
            // Throttling first: the task that ran meanwhile did not preempt anything.
            _ if c.reason == Some(rtlab_stats::result::ReasonCode::Throttled) => {
                "rt throttling".to_string()
            }
            _ if c.reason == Some(rtlab_stats::result::ReasonCode::FairServer) => {
                "rt throttling (fair server)".to_string()
            }
            (Some(task), _) => format!("{} by {task}", c.kind.as_str()),
            (None, Some(detail))
                if matches!(
                    c.kind,
                    rtlab_stats::result::CauseKind::Irq | rtlab_stats::result::CauseKind::Softirq
                ) =>
            {
                format!("{} {detail}", c.kind.as_str())
            }
            _ => c.kind.as_str().to_string(),
        };
        *by.entry(name).or_default() += c.duration_ns;
    }
    let total: u64 = by.values().sum();
    let mut v: Vec<(String, f64)> = by
        .into_iter()
        .map(|(k, d)| (k, d as f64 / total.max(1) as f64))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.truncate(n);
    v
}

/// "name (58 %), name (32 %)": causes with their shares, as the readings say them.
pub fn causes_text(causes: &[(String, f64)]) -> String {
    causes
        .iter()
        .map(|(n, share)| format!("{n} ({:.0} %)", share * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Adds one stage's record to the merged one.
fn absorb(merged: Option<RunRecord>, record: RunRecord) -> RunRecord {
    let Some(mut m) = merged else { return record };
    m.duration = Nanos(m.duration.get() + record.duration.get());
    for w in record.warnings {
        if !m.warnings.contains(&w) {
            m.warnings.push(w);
        }
    }
    m.series.extend(record.series);
    m.outliers.extend(record.outliers);
    m.load.extend(record.load);
    m.load_reports.extend(record.load_reports);
    m.interrupted |= record.interrupted;
    m
}

fn value_of(series: &[Series], name: &str) -> Option<f64> {
    series.iter().find(|s| s.name == name).and_then(|s| s.value)
}

/// A one-line reading of the lock stage.
fn lock_reading(series: &[Series]) -> Option<String> {
    let pi = value_of(series, "lock/rtlab-pi/uncontended")?;
    let normal = value_of(series, "lock/glibc-normal/uncontended")?;
    let pi_handoff = value_of(series, "lock/rtlab-pi/handoff")?;
    let glibc_handoff = value_of(series, "lock/glibc-pi/handoff")?;
    Some(format!(
        "PI mutex lock+unlock {} vs {} for glibc's normal mutex, hand-off {} vs {} for glibc PI: \
         priority inheritance costs {} on the fast path here",
        Nanos(pi.round() as u64),
        Nanos(normal.round() as u64),
        Nanos(pi_handoff.round() as u64),
        Nanos(glibc_handoff.round() as u64),
        if pi <= normal * 1.2 {
            "nothing"
        } else {
            "extra"
        }
    ))
}

struct Stage {
    name: &'static str,
    loads: Vec<LoadSpec>,
}

fn worst(series: &[Series], prefix: &str, pick: fn(&Series) -> Option<f64>) -> Option<u64> {
    series
        .iter()
        .filter(|s| s.name.starts_with(prefix))
        .filter_map(pick)
        .map(|v| v as u64)
        .max()
}

/// A one-line reading of idle vs loaded worst cases for a periodic task with `interval`.
pub fn wakeup_reading(idle_max: u64, loaded_max: u64, interval: Nanos) -> String {
    let ratio = loaded_max as f64 / idle_max.max(1) as f64;
    let fit = if loaded_max < 100_000 {
        "fit for sub-100 us deadlines".to_string()
    } else if loaded_max < interval.get() {
        format!("every wakeup stayed inside its {} period", interval)
    } else {
        format!("a {} periodic task misses deadlines here", interval)
    };
    let spread = if ratio < 2.0 {
        "load barely moves the worst case".to_string()
    } else {
        format!(
            "load makes the worst case {ratio:.1}x worse: isolate the RT CPUs and move IRQs away"
        )
    };
    format!("{fit}; {spread}")
}

/// Runs every stage in turn.
pub fn run_survey(
    config: &SurveyConfig,
    observer: &mut dyn Observer,
) -> Result<SurveyRecord, LabError> {
    let interval = Nanos::from_millis(1);
    let loaded: Vec<LoadSpec> = LOADED_STAGE_LOADS
        .iter()
        .map(|s| s.parse().expect("built-in load specs parse"))
        .collect();
    let stages = [
        Stage {
            name: "wakeup-idle",
            loads: vec![],
        },
        Stage {
            name: "wakeup-loaded",
            loads: loaded,
        },
    ];
    let mut merged: Option<RunRecord> = None;
    for (i, stage) in stages.iter().enumerate() {
        if rtlab_sys::signal::interrupted() {
            break;
        }
        // What is left: this and the other wakeup stages, then the short ones.
        let left = config.stage_duration.get() * (stages.len() - i) as u64
            + SHORT_STAGES as u64 * config.stage_duration.get().min(SHORT_STAGE.get());
        observer.stage(
            &format!("{}, about {} left", stage.name, Nanos(left)),
            i,
            stages.len() + SHORT_STAGES,
        );
        let wakeup = Wakeup::new(WakeupConfig {
            placement: Placement::PerCpu(config.cpus.clone()),
            interval,
            policy: Policy::Fifo,
            prio: 95,
            aligned: false,
            // The loaded stage names the causes of its worst wakeups.
            explain: (!stage.loads.is_empty()).then_some(crate::explain::ExplainSettings {
                threshold: None,
                top: 10,
                trace_out: None,
                backend: Default::default(),
            }),
            interval_log: None,
        })?
        .with_series_prefix(&format!("{}/", stage.name));
        let common = CommonConfig {
            duration: config.stage_duration,
            loads: stage.loads.clone(),
            mlock: config.mlock,
            dma_latency: config.dma_latency,
        };
        let record = run_experiment(&wakeup, &common, observer)?;
        merged = Some(absorb(merged, record));
    }
    // Short stages of the other experiments: each at most `SHORT_STAGE` long.
    let short = Nanos(config.stage_duration.get().min(SHORT_STAGE.get()));
    let last_cpu = CpuList::from(vec![*config
        .cpus
        .as_slice()
        .last()
        .expect("non-empty CPU list")]);
    let total = stages.len() + SHORT_STAGES;
    let lock = LockExperiment::new(LockConfig {
        impls: LOCK_STAGE_IMPLS.to_vec(),
        cpus: config.cpus.clone(),
        sched: Sched {
            policy: Policy::Fifo,
            prio: 10,
        },
        explain: None,
        processes: false,
    })?
    .with_series_prefix("lock/");
    let invert = Invert::new(InvertConfig {
        // Its worst waits are explained too: the inversion is named in the reading.
        explain: Some(crate::explain::ExplainSettings {
            threshold: None,
            top: 5,
            trace_out: None,
            backend: Default::default(),
        }),
        ..InvertConfig::with_defaults(
            last_cpu.clone(),
            vec![
                Variant::NoneRtlab,
                Variant::InheritRtlab,
                Variant::InheritGlibc,
            ],
        )
    })?
    .with_series_prefix("invert/");
    let mmap = MmapExperiment::new(MmapConfig {
        cpu: last_cpu.as_slice()[0],
        interval: Nanos::from_millis(1),
        policy: Policy::Fifo,
        prio: 95,
        size: 100 << 20,
        waiters: vec![Waiter::Private, Waiter::Shared],
        explain: None,
    })?
    .with_series_prefix("mmap/");
    // The slack this process inherited is the one the user's programs get too.
    let default_slack = Nanos(
        rtlab_sys::slack::current_timer_slack_ns()
            .unwrap_or(50_000)
            .max(1),
    );
    let mut slacks = vec![default_slack, Nanos::from_micros(1)];
    slacks.dedup();
    let slack = SlackSweep::new(SweepConfig {
        sleeps: vec![Nanos::from_micros(10)],
        slacks,
        mechanisms: vec![rtlab_sys::sleep::Mechanism::Futex],
        cpu: last_cpu.as_slice()[0],
        fifo_row: false,
        prefix: "slack/".into(),
        explain: None,
    })?;
    let cpus = config.cpus.as_slice();
    let ipc = IpcExperiment::new(IpcConfig {
        mechanisms: vec![
            crate::ipc::Mechanism::RtlabShm,
            crate::ipc::Mechanism::Kernel(rtlab_sys::ipc::Kind::PosixMq),
            crate::ipc::Mechanism::Kernel(rtlab_sys::ipc::Kind::Pipe),
        ],
        sizes: vec![64],
        cpus: (cpus[0], cpus[1 % cpus.len()]),
        policy: Policy::Fifo,
        prio: 50,
        explain: None,
    })?
    .with_series_prefix("ipc/");
    let parse = |s: &str| {
        s.parse::<crate::net::StreamSpec>()
            .map_err(LabError::Config)
    };
    let net = crate::net::NetRun::new(crate::net::NetRunConfig {
        topology: crate::net::Topology::Loopback,
        proto: crate::net::Proto::Tcp,
        streams: vec![parse("1KiB@10ms")?, parse("100B@10ms")?],
        reverse: vec![parse("300B@20ms")?],
        options: crate::net::SocketOptions::default(),
        pad_segments: 0,
        deadline: None,
        warmup: Some(Nanos::from_millis(200)),
        background_traffic: false,
        policy: Policy::Fifo,
        prio: 80,
        cpus: vec![],
        explain: None,
    })?
    .with_series_prefix("net/");
    // A spinner at FIFO 1 on the last CPU: what a busy-polling thread keeps of it, and (as
    // root) what takes the rest.
    let noise = crate::noise::Noise::new(crate::noise::NoiseConfig {
        cpus: last_cpu.clone(),
        policy: Policy::Fifo,
        prio: 1,
        threshold: crate::noise::DEFAULT_THRESHOLD,
        explain: Some(crate::explain::ExplainSettings {
            threshold: Some(crate::noise::DEFAULT_THRESHOLD),
            top: 20,
            trace_out: None,
            backend: Default::default(),
        }),
    })?
    .with_series_prefix("noise/");
    let short_stages: [(&str, &dyn Experiment, bool); SHORT_STAGES] = [
        ("lock", &lock, config.mlock),
        ("invert", &invert, config.mlock),
        ("mmap", &mmap, false),
        ("slack", &slack, false),
        ("ipc", &ipc, config.mlock),
        ("net", &net, config.mlock),
        ("noise", &noise, config.mlock),
    ];
    for (i, (name, experiment, mlock)) in short_stages.into_iter().enumerate() {
        if rtlab_sys::signal::interrupted() {
            break;
        }
        if name == "invert" && !rtlab_sys::probe::can_use_fifo(30) {
            let warning = "invert stage: skipped: needs SCHED_FIFO (run as root)".to_string();
            observer.warn(&warning);
            if let Some(m) = merged.as_mut() {
                m.warnings.push(warning);
            }
            continue;
        }
        let left = short.get() * (SHORT_STAGES - i) as u64;
        observer.stage(
            &format!("{name}, about {} left", Nanos(left)),
            stages.len() + i,
            total,
        );
        let common = CommonConfig {
            duration: short,
            loads: vec![],
            mlock,
            dma_latency: false,
        };
        let record = run_experiment(experiment, &common, observer)?;
        merged = Some(absorb(merged, record));
    }
    let record = merged
        .ok_or_else(|| LabError::Thread("survey interrupted before its first stage".into()))?;
    let mut verdict_rows = Vec::new();
    let idle_max = worst(&record.series, "wakeup-idle/", |s| s.max);
    let loaded_max = worst(&record.series, "wakeup-loaded/", |s| s.max);
    let outliers_of = |prefix: &str| -> Vec<rtlab_stats::result::Outlier> {
        record
            .outliers
            .iter()
            .filter(|o| o.series.starts_with(prefix))
            .cloned()
            .collect()
    };
    if let (Some(idle_max), Some(loaded_max)) = (idle_max, loaded_max) {
        let loaded_outliers = outliers_of("wakeup-loaded/");
        let mut causes = top_causes(&loaded_outliers, 3);
        causes.retain(|c| c.1 >= 0.01);
        let top_causes: Vec<CauseShare> = causes
            .iter()
            .map(|(name, share)| CauseShare {
                cause: name.clone(),
                share: *share,
            })
            .collect();
        let mut reading = wakeup_reading(idle_max, loaded_max, interval);
        if !causes.is_empty() {
            reading.push_str(&format!(
                "; its {} worst loaded wakeups were late because of {}",
                loaded_outliers.len(),
                causes_text(&causes)
            ));
        }
        verdict_rows.push(SurveyRow {
            area: "wakeup".into(),
            idle_p99_ns: worst(&record.series, "wakeup-idle/", |s| s.p99),
            idle_max_ns: Some(idle_max),
            loaded_p99_ns: worst(&record.series, "wakeup-loaded/", |s| s.p99),
            loaded_max_ns: Some(loaded_max),
            loaded_over_idle: Some(
                (loaded_max as f64 / idle_max.max(1) as f64 * 1000.0).round() / 1000.0,
            ),
            top_causes: Some(top_causes),
            reading,
        });
    }
    if let Some(reading) = lock_reading(&record.series) {
        verdict_rows.push(SurveyRow::reading("lock", reading));
    }
    if let Some(mut reading) = crate::invert::reading(&record.series, "invert/") {
        let mut causes = top_causes(&outliers_of("invert/none/"), 2);
        causes.retain(|c| c.1 >= 0.01);
        if !causes.is_empty() {
            reading.push_str(&format!(
                "; the worst waits without a protocol: {}",
                causes_text(&causes)
            ));
        }
        verdict_rows.push(SurveyRow::reading("invert", reading));
    }
    if let Some(reading) = crate::slack::reading(
        &record.series,
        "slack/",
        default_slack,
        Nanos::from_micros(1),
    ) {
        verdict_rows.push(SurveyRow::reading("slack", reading));
    }
    if let Some(reading) = crate::ipc::reading(&record.series, "ipc/") {
        verdict_rows.push(SurveyRow::reading("ipc", reading));
    }
    if let Some(mut reading) = crate::net::reading(&record.series, "net/") {
        let stack = crate::check::net_stack();
        if stack.status == crate::check::Status::Warn {
            reading.push_str(&format!(
                "; received packets are processed at SCHED_OTHER here ({}): an RT receiver \
                 waits for its own packets whenever a lower real-time task holds the CPU that \
                 processes them, the network stack's priority inversion (the fix: \
                 rtlab check net_stack)",
                stack.value
            ));
        }
        verdict_rows.push(SurveyRow::reading("net", reading));
    }
    if let Some(reading) = crate::noise::reading(&record.series, "noise/", &outliers_of("noise/")) {
        verdict_rows.push(SurveyRow::reading("noise", reading));
    }
    if record.series.iter().any(|s| s.name.starts_with("mmap/")) {
        let reading = crate::mmap::seed_effect_reading(&record.series, "mmap/");
        verdict_rows.push(SurveyRow::reading("mmap", reading));
    }
    Ok(SurveyRecord {
        record,
        verdict_rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_name_fit_and_spread() {
        let r = wakeup_reading(20_000, 30_000, Nanos::from_millis(1));
        assert!(r.contains("sub-100 us") && r.contains("barely"), "{r}");
        let r = wakeup_reading(200_000, 5_000_000, Nanos::from_millis(1));
        assert!(r.contains("misses deadlines") && r.contains("25.0x"), "{r}");
    }
}
