//! `rtlab survey`: short stages of every experiment, one verdict.
//!
//! [`STAGES`] is the survey: wakeup idle, wakeup under `cpu` + `mmap` load, then short stages
//! of lock, invert, mmap, slack, ipc, net and noise, each with how its experiment is built,
//! how it runs and how its area's verdict row reads its series. Series are prefixed with their
//! stage (`wakeup-idle/thread0`, `lock/rtlab-pi/uncontended`). The verdict rows go into
//! `verdict.survey` of the result document, in the order of [`Area::ALL`], so any writer can
//! render them from the JSON alone.

use crate::explain::ExplainSettings;
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
use rtlab_stats::area::{Area, SurveyStage};
use rtlab_stats::cause::top_shares;
use rtlab_stats::details::{ReadingCauses, RowWithCauses, SurveyRow};
use rtlab_stats::result::{Outlier, Series};
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
    /// `verdict.survey`: one object per area, its causes for the report layer to word
    /// (`rtlab_report::cause::survey_row`).
    pub verdict_rows: Vec<RowWithCauses>,
}

/// The longest any of the short stages (lock, invert, mmap ...) runs.
const SHORT_STAGE: Nanos = Nanos::from_secs(4);

/// The period of the wakeup stages' threads.
const WAKEUP_INTERVAL: Nanos = Nanos::from_millis(1);

/// The implementations the survey's lock stage compares.
const LOCK_STAGE_IMPLS: [Impl; 5] = [
    Impl::RtlabPi,
    Impl::RtlabRobust,
    Impl::GlibcNormal,
    Impl::GlibcPi,
    Impl::GlibcRobust,
];

/// How long a stage runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Length {
    /// The survey's stage duration, holding /dev/cpu_dma_latency when asked: the wakeup
    /// stages, whose worst cases lead the verdict.
    Full,
    /// At most [`SHORT_STAGE`], without /dev/cpu_dma_latency.
    Short,
}

/// A stage's experiment, built.
type Built = Result<Box<dyn Experiment>, LabError>;

/// One stage of the survey.
struct Stage {
    /// Which (its series are `<stage>/...`; its area is the stage's).
    stage: SurveyStage,
    /// Its experiment, configured for the survey, series prefixed with the stage.
    build: fn(&Plan, &Stage) -> Built,
    /// How long it runs.
    length: Length,
    /// The loads it runs under.
    loads: &'static [&'static str],
    /// Whether it locks memory when the survey does (mmap and slack measure without).
    mlock: bool,
    /// Why it cannot run here, when it cannot.
    skip: fn() -> Option<&'static str>,
    /// Its area's verdict row, read from every stage's series (none for a stage another one
    /// reads with it).
    read: Option<fn(&Ran) -> Option<RowWithCauses>>,
}

/// The survey, in the order it runs.
const STAGES: [Stage; 9] = [
    Stage {
        stage: SurveyStage::WakeupIdle,
        build: wakeup_stage,
        length: Length::Full,
        loads: &[],
        mlock: true,
        skip: runs_anywhere,
        // Read with the loaded stage.
        read: None,
    },
    Stage {
        stage: SurveyStage::WakeupLoaded,
        build: wakeup_stage,
        length: Length::Full,
        loads: LOADED_STAGE_LOADS,
        mlock: true,
        skip: runs_anywhere,
        read: Some(wakeup_row),
    },
    Stage {
        stage: SurveyStage::Lock,
        build: lock_stage,
        length: Length::Short,
        loads: &[],
        mlock: true,
        skip: runs_anywhere,
        read: Some(lock_row),
    },
    Stage {
        stage: SurveyStage::Invert,
        build: invert_stage,
        length: Length::Short,
        loads: &[],
        mlock: true,
        skip: invert_needs_fifo,
        read: Some(invert_row),
    },
    Stage {
        stage: SurveyStage::Mmap,
        build: mmap_stage,
        length: Length::Short,
        loads: &[],
        mlock: false,
        skip: runs_anywhere,
        read: Some(mmap_row),
    },
    Stage {
        stage: SurveyStage::Slack,
        build: slack_stage,
        length: Length::Short,
        loads: &[],
        mlock: false,
        skip: runs_anywhere,
        read: Some(slack_row),
    },
    Stage {
        stage: SurveyStage::Ipc,
        build: ipc_stage,
        length: Length::Short,
        loads: &[],
        mlock: true,
        skip: runs_anywhere,
        read: Some(ipc_row),
    },
    Stage {
        stage: SurveyStage::Net,
        build: net_stage,
        length: Length::Short,
        loads: &[],
        mlock: true,
        skip: runs_anywhere,
        read: Some(net_row),
    },
    Stage {
        stage: SurveyStage::Noise,
        build: noise_stage,
        length: Length::Short,
        loads: &[],
        mlock: true,
        skip: runs_anywhere,
        read: Some(noise_row),
    },
];

/// What every stage is built from.
struct Plan<'a> {
    config: &'a SurveyConfig,
    /// The last CPU of the survey's, where the one-CPU stages run.
    last_cpu: CpuList,
    /// The timer slack this process inherited: the one the user's programs get too.
    default_slack: Nanos,
}

impl Plan<'_> {
    fn new(config: &SurveyConfig) -> Plan<'_> {
        let last_cpu = *config.cpus.as_slice().last().expect("non-empty CPU list");
        Plan {
            config,
            last_cpu: CpuList::from(vec![last_cpu]),
            default_slack: Nanos(
                rtlab_sys::slack::current_timer_slack_ns()
                    .unwrap_or(50_000)
                    .max(1),
            ),
        }
    }

    /// How long `stage` runs.
    fn duration(&self, stage: &Stage) -> Nanos {
        match stage.length {
            Length::Full => self.config.stage_duration,
            Length::Short => Nanos(self.config.stage_duration.get().min(SHORT_STAGE.get())),
        }
    }

    /// How `stage` runs.
    fn common(&self, stage: &Stage) -> CommonConfig {
        CommonConfig {
            duration: self.duration(stage),
            loads: stage
                .loads
                .iter()
                .map(|s| s.parse().expect("built-in load specs parse"))
                .collect::<Vec<LoadSpec>>(),
            mlock: stage.mlock && self.config.mlock,
            dma_latency: stage.length == Length::Full && self.config.dma_latency,
        }
    }
}

fn runs_anywhere() -> Option<&'static str> {
    None
}

fn invert_needs_fifo() -> Option<&'static str> {
    (!rtlab_sys::probe::can_use_fifo(30)).then_some("needs SCHED_FIFO (run as root)")
}

/// The explainer's defaults, keeping the `top` worst.
fn explained(top: usize, threshold: Option<Nanos>) -> Option<ExplainSettings> {
    Some(ExplainSettings {
        threshold,
        top,
        trace_out: None,
        backend: Default::default(),
    })
}

fn wakeup_stage(plan: &Plan, stage: &Stage) -> Built {
    Ok(Box::new(
        Wakeup::new(WakeupConfig {
            placement: Placement::PerCpu(plan.config.cpus.clone()),
            interval: WAKEUP_INTERVAL,
            policy: Policy::Fifo,
            prio: 95,
            aligned: false,
            // The loaded stage names the causes of its worst wakeups.
            explain: if stage.loads.is_empty() {
                None
            } else {
                explained(10, None)
            },
            interval_log: None,
        })?
        .with_series_prefix(&stage.stage.prefix()),
    ))
}

fn lock_stage(plan: &Plan, stage: &Stage) -> Built {
    Ok(Box::new(
        LockExperiment::new(LockConfig {
            impls: LOCK_STAGE_IMPLS.to_vec(),
            cpus: plan.config.cpus.clone(),
            sched: Sched {
                policy: Policy::Fifo,
                prio: 10,
            },
            explain: None,
            processes: false,
        })?
        .with_series_prefix(&stage.stage.prefix()),
    ))
}

fn invert_stage(plan: &Plan, stage: &Stage) -> Built {
    Ok(Box::new(
        Invert::new(InvertConfig {
            // Its worst waits are explained too: the inversion is named in the reading.
            explain: explained(5, None),
            ..InvertConfig::with_defaults(
                plan.last_cpu.clone(),
                vec![
                    Variant::NoneRtlab,
                    Variant::InheritRtlab,
                    Variant::InheritGlibc,
                ],
            )
        })?
        .with_series_prefix(&stage.stage.prefix()),
    ))
}

fn mmap_stage(plan: &Plan, stage: &Stage) -> Built {
    Ok(Box::new(
        MmapExperiment::new(MmapConfig {
            cpu: plan.last_cpu.as_slice()[0],
            interval: Nanos::from_millis(1),
            policy: Policy::Fifo,
            prio: 95,
            size: 100 << 20,
            waiters: vec![Waiter::Private, Waiter::Shared],
            explain: None,
        })?
        .with_series_prefix(&stage.stage.prefix()),
    ))
}

fn slack_stage(plan: &Plan, stage: &Stage) -> Built {
    let mut slacks = vec![plan.default_slack, Nanos::from_micros(1)];
    slacks.dedup();
    Ok(Box::new(SlackSweep::new(SweepConfig {
        sleeps: vec![Nanos::from_micros(10)],
        slacks,
        mechanisms: vec![rtlab_sys::sleep::Mechanism::Futex],
        cpu: plan.last_cpu.as_slice()[0],
        fifo_row: false,
        prefix: stage.stage.prefix(),
        explain: None,
    })?))
}

fn ipc_stage(plan: &Plan, stage: &Stage) -> Built {
    let cpus = plan.config.cpus.as_slice();
    Ok(Box::new(
        IpcExperiment::new(IpcConfig {
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
        .with_series_prefix(&stage.stage.prefix()),
    ))
}

fn net_stage(_: &Plan, stage: &Stage) -> Built {
    let parse = |s: &str| {
        s.parse::<crate::net::StreamSpec>()
            .map_err(|e| LabError::Config(e.to_string()))
    };
    Ok(Box::new(
        crate::net::NetRun::new(crate::net::NetRunConfig {
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
        .with_series_prefix(&stage.stage.prefix()),
    ))
}

/// A spinner at FIFO 1 on the last CPU: what a busy-polling thread keeps of it, and (as
/// root) what takes the rest.
fn noise_stage(plan: &Plan, stage: &Stage) -> Built {
    Ok(Box::new(
        crate::noise::Noise::new(crate::noise::NoiseConfig {
            cpus: plan.last_cpu.clone(),
            policy: Policy::Fifo,
            prio: 1,
            threshold: crate::noise::DEFAULT_THRESHOLD,
            explain: explained(20, Some(crate::noise::DEFAULT_THRESHOLD)),
        })?
        .with_series_prefix(&stage.stage.prefix()),
    ))
}

/// Runs every stage in turn.
pub fn run_survey(
    config: &SurveyConfig,
    observer: &mut dyn Observer,
) -> Result<SurveyRecord, LabError> {
    let plan = Plan::new(config);
    let mut merged: Option<RunRecord> = None;
    let mut ran_stages = vec![false; STAGES.len()];
    for (i, stage) in STAGES.iter().enumerate() {
        if rtlab_sys::signal::interrupted() {
            break;
        }
        let name = stage.stage.name();
        if let Some(why) = (stage.skip)() {
            let warning = format!("{name} stage: skipped: {why}");
            observer.warn(&warning);
            if let Some(m) = merged.as_mut() {
                m.warnings.push(warning);
            }
            continue;
        }
        // What is left: this stage and the ones after it.
        let left: u64 = STAGES[i..].iter().map(|s| plan.duration(s).get()).sum();
        observer.stage(
            &format!("{name}, about {} left", Nanos(left)),
            i,
            STAGES.len(),
        );
        let experiment = (stage.build)(&plan, stage)?;
        let record = run_experiment(experiment.as_ref(), &plan.common(stage), observer)?;
        merged = Some(absorb(merged, record));
        ran_stages[i] = true;
    }
    let record = merged
        .ok_or_else(|| LabError::Thread("survey interrupted before its first stage".into()))?;
    let ran = Ran {
        record: &record,
        default_slack: plan.default_slack,
    };
    // A stage that ran and measured none of what its row needs says so in its row (a short
    // stage on a busy machine can), rather than leave the area out.
    let verdict_rows = Area::ALL
        .iter()
        .flat_map(|&area| {
            STAGES
                .iter()
                .enumerate()
                .filter(move |(_, s)| s.stage.area() == area)
        })
        .filter_map(|(i, stage)| {
            let read = stage.read?;
            read(&ran).or_else(|| ran_stages[i].then(|| not_measured(stage, &plan)))
        })
        .collect();
    Ok(SurveyRecord {
        record,
        verdict_rows,
    })
}

/// The row of a stage that ran and gave none of the figures its row reads.
fn not_measured(stage: &Stage, plan: &Plan) -> RowWithCauses {
    let reading = format!(
        "not measured: its {} stage gave none of the figures this reading needs (a busy \
         machine can leave a short stage without one); a longer run measures it",
        Nanos(plan.duration(stage).get())
    );
    SurveyRow::reading(stage.stage.area(), reading).into()
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

/// What the verdict is read from: every stage's series and outliers.
struct Ran<'a> {
    record: &'a RunRecord,
    default_slack: Nanos,
}

impl Ran<'_> {
    fn series(&self) -> &[Series] {
        &self.record.series
    }

    /// The outliers of series starting with `prefix`.
    fn outliers_of(&self, prefix: &str) -> Vec<Outlier> {
        self.record
            .outliers
            .iter()
            .filter(|o| o.series.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// The worst `pick` of the series of `stage`.
    fn worst(&self, stage: SurveyStage, pick: fn(&Series) -> Option<f64>) -> Option<u64> {
        let prefix = stage.prefix();
        self.series()
            .iter()
            .filter(|s| s.name.starts_with(&prefix))
            .filter_map(pick)
            .map(|v| v as u64)
            .max()
    }
}

fn value_of(series: &[Series], name: &str) -> Option<f64> {
    series.iter().find(|s| s.name == name).and_then(|s| s.value)
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

/// The wakeup area: idle and loaded worst cases, and the main causes of the loaded ones.
fn wakeup_row(ran: &Ran) -> Option<RowWithCauses> {
    use SurveyStage::{WakeupIdle, WakeupLoaded};
    let idle_max = ran.worst(WakeupIdle, |s| s.max)?;
    let loaded_max = ran.worst(WakeupLoaded, |s| s.max)?;
    let loaded_outliers = ran.outliers_of(&WakeupLoaded.prefix());
    let causes = ReadingCauses {
        lead: format!(
            "; its {} worst loaded wakeups were late because of ",
            loaded_outliers.len()
        ),
        shares: top_shares(&loaded_outliers, 3),
        rest: String::new(),
        listed: true,
    };
    let row = SurveyRow {
        area: Area::Wakeup,
        idle_p99_ns: ran.worst(WakeupIdle, |s| s.p99),
        idle_max_ns: Some(idle_max),
        loaded_p99_ns: ran.worst(WakeupLoaded, |s| s.p99),
        loaded_max_ns: Some(loaded_max),
        loaded_over_idle: Some(
            (loaded_max as f64 / idle_max.max(1) as f64 * 1000.0).round() / 1000.0,
        ),
        top_causes: None,
        reading: wakeup_reading(idle_max, loaded_max, WAKEUP_INTERVAL),
    };
    Some(RowWithCauses {
        row,
        causes: Some(causes),
    })
}

/// The lock area: the PI mutex's fast path and hand-off against glibc's.
fn lock_row(ran: &Ran) -> Option<RowWithCauses> {
    let series = ran.series();
    let pi = value_of(series, "lock/rtlab-pi/uncontended")?;
    let normal = value_of(series, "lock/glibc-normal/uncontended")?;
    let pi_handoff = value_of(series, "lock/rtlab-pi/handoff")?;
    let glibc_handoff = value_of(series, "lock/glibc-pi/handoff")?;
    let reading = format!(
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
    );
    Some(SurveyRow::reading(Area::Lock, reading).into())
}

fn invert_row(ran: &Ran) -> Option<RowWithCauses> {
    let reading = crate::invert::reading(ran.series(), &SurveyStage::Invert.prefix())?;
    Some(RowWithCauses {
        row: SurveyRow::reading(Area::Invert, reading),
        causes: Some(ReadingCauses {
            lead: "; the worst waits without a protocol: ".into(),
            shares: top_shares(&ran.outliers_of("invert/none/"), 2),
            ..ReadingCauses::default()
        }),
    })
}

fn slack_row(ran: &Ran) -> Option<RowWithCauses> {
    let reading = crate::slack::reading(
        ran.series(),
        &SurveyStage::Slack.prefix(),
        ran.default_slack,
        Nanos::from_micros(1),
    )?;
    Some(SurveyRow::reading(Area::Slack, reading).into())
}

fn ipc_row(ran: &Ran) -> Option<RowWithCauses> {
    let reading = crate::ipc::reading(ran.series(), &SurveyStage::Ipc.prefix())?;
    Some(SurveyRow::reading(Area::Ipc, reading).into())
}

fn net_row(ran: &Ran) -> Option<RowWithCauses> {
    let mut reading = crate::net::reading(ran.series(), &SurveyStage::Net.prefix())?;
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
    Some(SurveyRow::reading(Area::Net, reading).into())
}

fn noise_row(ran: &Ran) -> Option<RowWithCauses> {
    let prefix = SurveyStage::Noise.prefix();
    let (reading, causes) =
        crate::noise::reading(ran.series(), &prefix, &ran.outliers_of(&prefix))?;
    Some(RowWithCauses {
        row: SurveyRow::reading(Area::Noise, reading),
        causes: Some(causes),
    })
}

fn mmap_row(ran: &Ran) -> Option<RowWithCauses> {
    let prefix = SurveyStage::Mmap.prefix();
    if !ran.series().iter().any(|s| s.name.starts_with(&prefix)) {
        return None;
    }
    let reading = crate::mmap::seed_effect_reading(ran.series(), &prefix);
    Some(SurveyRow::reading(Area::Mmap, reading).into())
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

    #[test]
    fn every_stage_runs_once_in_order_and_every_area_is_read_once() {
        let stages: Vec<SurveyStage> = STAGES.iter().map(|s| s.stage).collect();
        assert_eq!(stages, SurveyStage::ALL);
        for &area in Area::ALL {
            let readers = STAGES
                .iter()
                .filter(|s| s.stage.area() == area && s.read.is_some())
                .count();
            // The check is no stage: it runs before them and has no verdict row.
            assert_eq!(readers, usize::from(area != Area::Check), "{area}");
        }
    }

    #[test]
    fn a_stage_that_measured_nothing_says_so_in_its_areas_row() {
        let config = SurveyConfig {
            stage_duration: Nanos::from_secs(2),
            cpus: CpuList::from(vec![0]),
            mlock: false,
            dma_latency: false,
        };
        let plan = Plan::new(&config);
        for stage in STAGES.iter().filter(|s| s.read.is_some()) {
            let row = not_measured(stage, &plan).row;
            assert_eq!(row.area, stage.stage.area());
            let stage_length = Nanos(plan.duration(stage).get()).to_string();
            assert!(
                row.reading.starts_with("not measured: its "),
                "{}",
                row.reading
            );
            assert!(row.reading.contains(&stage_length), "{}", row.reading);
        }
    }

    #[test]
    fn only_the_wakeup_stages_run_full_length_and_only_the_loaded_one_under_load() {
        for s in &STAGES {
            let wakeup = s.stage.area() == Area::Wakeup;
            assert_eq!(s.length == Length::Full, wakeup, "{}", s.stage);
            assert_eq!(
                !s.loads.is_empty(),
                s.stage == SurveyStage::WakeupLoaded,
                "{}",
                s.stage
            );
        }
    }
}
