//! What every experiment run shares.

use crate::{Experiment, LabError};
use rtlab_load::{LoadReport, LoadSpec};
use rtlab_stats::result::{LoadEntry, PrivilegeInfo, Series, SystemInfo};
use rtlab_stats::{LatencyHistogram, LiveHistogram, Nanos};
use rtlab_sys::dma::DmaLatencyGuard;
use rtlab_sys::probe::{probe_privileges, Privileges};
use std::sync::Arc;

/// Options every experiment command shares.
#[derive(Debug, Clone)]
pub struct CommonConfig {
    /// How long to measure.
    pub duration: Nanos,
    /// Disturbance loads to run meanwhile.
    pub loads: Vec<LoadSpec>,
    /// `mlockall(MCL_CURRENT|MCL_FUTURE)` before measuring.
    pub mlock: bool,
    /// Hold `/dev/cpu_dma_latency` at 0 while measuring.
    pub dma_latency: bool,
}

/// A live view of one series for progress display, readable while it is measured.
#[derive(Debug, Clone)]
pub struct LiveSeries {
    /// Series name.
    pub name: String,
    /// Its coarse live histogram.
    pub hist: Arc<LiveHistogram>,
}

/// Receives progress and warnings while a run is under way (the binary prints them).
pub trait Observer {
    /// A degradation, as one line, the moment it is known.
    fn warn(&mut self, message: &str);
    /// Called a few times per second while measuring.
    fn tick(&mut self, _elapsed: Nanos, _total: Nanos, _live: &[LiveSeries]) {}
    /// A new stage starts (survey).
    fn stage(&mut self, _name: &str, _index: usize, _count: usize) {}
    /// The histogram of one interval of a series (experiments configured for interval
    /// histograms, `--hlog`): the samples whose deadlines fell in `[from, to)`, times from
    /// the start of the measurement.
    fn interval(&mut self, _series: &str, _from: Nanos, _to: Nanos, _hist: &LatencyHistogram) {}
}

/// An observer that drops everything (tests, quiet stages).
#[derive(Debug, Default)]
pub struct NullObserver;

impl Observer for NullObserver {
    fn warn(&mut self, _message: &str) {}
}

/// Everything a result document needs from one run, but the command line.
#[derive(Debug)]
pub struct RunRecord {
    /// Wall-clock start, ns since the epoch.
    pub started_at_ns: u64,
    /// How long it measured.
    pub duration: Nanos,
    /// Machine facts.
    pub system: SystemInfo,
    /// Loads as given.
    pub load: Vec<LoadEntry>,
    /// All warnings, in order.
    pub warnings: Vec<String>,
    /// Series measured.
    pub series: Vec<Series>,
    /// Explained outliers (`--explain`).
    pub outliers: Vec<rtlab_stats::result::Outlier>,
    /// Ctrl-C ended the run early.
    pub interrupted: bool,
    /// Work each load did.
    pub load_reports: Vec<LoadReport>,
}

/// Machine facts plus privileges, as the result document records them.
pub fn system_info(privileges: Privileges) -> SystemInfo {
    let f = rtlab_sys::sysinfo::system_facts();
    SystemInfo {
        kernel: f.kernel,
        cpus: f.cpus,
        preempt_model: f.preempt_model,
        clocksource: f.clocksource,
        virtualized: f.virtualized,
        privileges: PrivilegeInfo {
            rt_sched: privileges.rt_sched,
            mlock: privileges.mlock,
            tracefs: privileges.tracefs,
        },
    }
}

/// Collects warnings and forwards them to the observer at once.
struct Warnings<'a> {
    list: Vec<String>,
    observer: &'a mut dyn Observer,
}

impl Warnings<'_> {
    fn push(&mut self, message: String) {
        self.observer.warn(&message);
        self.list.push(message);
    }
}

/// Runs `experiment` with the shared set-up and tear-down. Loads, the DMA-latency hold and
/// everything else started here is stopped before returning, also on error and on panic
/// (they are guards).
pub fn run_experiment(
    experiment: &dyn Experiment,
    common: &CommonConfig,
    observer: &mut dyn Observer,
) -> Result<RunRecord, LabError> {
    let privileges = probe_privileges();
    let system = system_info(privileges);
    let mut warnings = Warnings {
        list: Vec::new(),
        observer,
    };

    if common.mlock {
        if let Err(e) = rtlab_sys::mem::lock_all_memory() {
            warnings.push(format!(
                "memory not locked ({e}): page faults may add latency; run as root or raise \
                 RLIMIT_MEMLOCK (ulimit -l unlimited)"
            ));
        }
    }
    let _dma = if common.dma_latency {
        match DmaLatencyGuard::hold_zero() {
            Ok(g) => Some(g),
            Err(e) => {
                warnings.push(format!(
                    "/dev/cpu_dma_latency not held ({e}): exits from deep C-states may add \
                     latency; run as root or pass --no-dma-latency to silence this"
                ));
                None
            }
        }
    } else {
        None
    };
    // Up before anything real-time starts, down after everything stopped.
    let watchdog = crate::watchdog::Watchdog::start(crate::watchdog::STARVATION_LIMIT);
    // Loads get a generous hard limit: they stop with the run, this is only the safety net.
    let hard_limit = Nanos(
        common
            .duration
            .get()
            .saturating_add(Nanos::from_secs(30).get()),
    );
    let loads = rtlab_load::start(&common.loads, hard_limit)?;
    for w in loads.warnings() {
        warnings.push(w.clone());
    }

    let started_at_ns = rtlab_sys::time::realtime_now_ns();
    let started = rtlab_sys::time::monotonic_now_ns();
    let outcome = experiment.run(common, warnings.observer);
    let duration = Nanos(rtlab_sys::time::monotonic_now_ns() - started);
    let load_reports = loads.stop();
    let tripped = watchdog.stop();
    let outcome = outcome?;
    for w in outcome.warnings {
        warnings.list.push(w);
    }
    if let Some(w) = tripped {
        warnings.push(w);
    }
    let origin = outcome.origin_ns.unwrap_or(started);
    Ok(RunRecord {
        started_at_ns,
        duration,
        system,
        load: load_reports
            .iter()
            .map(|r| LoadEntry {
                spec: r.spec.clone(),
                runs_ns: r
                    .runs
                    .iter()
                    .map(|&(from, to)| [from.saturating_sub(origin), to.saturating_sub(origin)])
                    .collect(),
            })
            .collect(),
        warnings: warnings.list,
        series: outcome.series,
        outliers: outcome.outliers,
        interrupted: rtlab_sys::signal::interrupted(),
        load_reports,
    })
}
