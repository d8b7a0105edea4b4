//! `rtlab slack`: the timer-slack sweep (seed 004).
//!
//! For every mechanism x requested sleep x timer slack, a SCHED_OTHER thread sleeps again and
//! again and records the oversleep (actual - requested). The 50 us default slack shows as a
//! 50 us step; one SCHED_FIFO row shows that slack does not apply to real-time threads.
//!
//! With `--explain`, a sleep is late when it ends after the requested time *plus the slack*
//! (the kernel may fire the timer anywhere in that window: that part is by design); what came
//! after is attributed like a late wakeup. SCHED_FIFO threads get no slack.

use crate::harness::{CommonConfig, Observer};
use crate::mutex_impls::enter;
use crate::{Experiment, LabError, Outcome};
use rtlab_stats::details::SlackCell;
use rtlab_stats::result::Series;
use rtlab_stats::{LatencyHistogram, Nanos};
use rtlab_sys::sched::Policy;
use rtlab_sys::sleep::{Mechanism, Sleeper};
use rtlab_sys::time::monotonic_now_ns;

/// Series names this experiment emits (for help text).
pub const SERIES_HELP: &str =
    "<mechanism>/<requested>/<slack> (metric oversleep), e.g. futex/10us/50us, and \
fifo/futex/<requested>/<slack> for the SCHED_FIFO row";

/// Configuration of a sweep.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    /// Requested sleeps.
    pub sleeps: Vec<Nanos>,
    /// Timer slack values.
    pub slacks: Vec<Nanos>,
    /// Mechanisms.
    pub mechanisms: Vec<Mechanism>,
    /// The measuring thread's CPU.
    pub cpu: usize,
    /// Also run the SCHED_FIFO row (futex, the largest slack) when allowed.
    pub fifo_row: bool,
    /// Series name prefix (the survey's `slack/`).
    pub prefix: String,
    /// Attribute sleeps that end after requested + slack (`--explain`).
    pub explain: Option<crate::explain::ExplainSettings>,
}

/// The sweep.
#[derive(Debug, Clone)]
pub struct SlackSweep {
    config: SweepConfig,
}

impl SlackSweep {
    /// Validates the configuration.
    pub fn new(config: SweepConfig) -> Result<Self, LabError> {
        if config.sleeps.is_empty() || config.slacks.is_empty() || config.mechanisms.is_empty() {
            return Err(LabError::Config(
                "nothing to sweep: give at least one sleep, slack and mechanism".into(),
            ));
        }
        if let Some(s) = config
            .slacks
            .iter()
            .find(|s| s.get() == 0 || s.get() > 1_000_000_000)
        {
            return Err(LabError::bad("slacks", format!("{s} is outside 1ns-1s")));
        }
        if let Some(s) = config
            .sleeps
            .iter()
            .find(|s| s.get() == 0 || s.get() > 1_000_000_000)
        {
            return Err(LabError::bad("sleeps", format!("{s} is outside 1ns-1s")));
        }
        Ok(SlackSweep { config })
    }
}

/// One plain sentence for the survey: what the default slack costs a 10 us futex wait.
pub fn reading(
    series: &[Series],
    prefix: &str,
    default_slack: Nanos,
    tight_slack: Nanos,
) -> Option<String> {
    let p50 = |slack: Nanos| {
        let name = format!("{prefix}futex/10us/{}", slack.label());
        series.iter().find(|s| s.name == name).and_then(|s| s.p50)
    };
    let (default_p50, tight_p50) = (p50(default_slack)?, p50(tight_slack)?);
    Some(format!(
        "timer slack is {} here: a 10 us timed wait oversleeps {} (p50) with it and {} with {}; for latency-sensitive \
         SCHED_OTHER threads start the program with `rtlab exec --slack 1us -- CMD` (or prctl PR_SET_TIMERSLACK), \
         or run them SCHED_FIFO, which has no slack",
        default_slack,
        Nanos(default_p50 as u64),
        Nanos(tight_p50 as u64),
        tight_slack
    ))
}

/// Up to this many samples per cell.
const MAX_SAMPLES: u64 = 2_000;
/// At least this many samples per cell, even past the time budget.
const MIN_SAMPLES: u64 = 10;

struct Cell {
    name: String,
    mechanism: Mechanism,
    sleep: Nanos,
    slack: Nanos,
    fifo: bool,
    hist: LatencyHistogram,
}

fn measure_cell(
    sleeper: &Sleeper,
    cell: &mut Cell,
    budget_ns: u64,
    report: crate::explain::Report<'_>,
    tid: i64,
) {
    let end = monotonic_now_ns() + budget_ns;
    // The kernel may end the sleep anywhere up to requested + slack (no slack for FIFO).
    let allowed = cell.sleep.get() + if cell.fifo { 0 } else { cell.slack.get() };
    let mut n = 0;
    while n < MAX_SAMPLES
        && (n < MIN_SAMPLES || monotonic_now_ns() < end)
        && !rtlab_sys::signal::interrupted()
    {
        let took = sleeper.sleep(cell.sleep.get());
        if report.is_some() {
            let woke = monotonic_now_ns();
            let deadline = woke.saturating_sub(took) + allowed;
            crate::explain::report_wait(report, crate::explain::Wait::Timer, tid, deadline, woke);
        }
        cell.hist
            .record(Nanos(took.saturating_sub(cell.sleep.get())));
        n += 1;
    }
}

impl Experiment for SlackSweep {
    fn command(&self) -> &'static str {
        "slack"
    }

    fn run(&self, common: &CommonConfig, observer: &mut dyn Observer) -> Result<Outcome, LabError> {
        let cfg = &self.config;
        let mut outcome = Outcome::default();
        let mut cells = cells(cfg, observer, &mut outcome);
        // Two passes over all cells, half the budget each, so drift spreads over all of them.
        let budget = common.duration.get() / (cells.len() as u64 * 2).max(1);
        let cpu = cfg.cpu;
        let session = cfg.explain.as_ref().map(|settings| {
            crate::explain::Session::start(
                settings,
                &[cpu],
                cells.iter().map(|c| c.name.clone()).collect(),
                &[crate::explain::Wait::Timer],
                observer,
                &mut outcome,
            )
        });
        let reporter = session.as_ref().and_then(|s| s.reporter());
        let began = monotonic_now_ns();
        let cells = std::thread::scope(|s| {
            let reporter = reporter.as_ref();
            s.spawn(move || -> Result<Vec<Cell>, LabError> {
                enter(cpu, Policy::Other, 0)?;
                let tid = rtlab_sys::futex::current_tid() as i64;
                let sleepers: Vec<(Mechanism, Sleeper)> = Mechanism::ALL
                    .iter()
                    .map(|&m| Sleeper::new(m).map(|s| (m, s)))
                    .collect::<Result<_, _>>()?;
                for _pass in 0..2 {
                    for (index, cell) in cells.iter_mut().enumerate() {
                        if rtlab_sys::signal::interrupted() {
                            break;
                        }
                        let policy = if cell.fifo {
                            Policy::Fifo
                        } else {
                            Policy::Other
                        };
                        rtlab_sys::sched::set_current_thread_scheduler(
                            policy,
                            u32::from(cell.fifo),
                        )?;
                        rtlab_sys::slack::set_current_timer_slack_ns(cell.slack.get())?;
                        let sleeper = &sleepers
                            .iter()
                            .find(|(m, _)| *m == cell.mechanism)
                            .expect("all built")
                            .1;
                        let report = reporter.map(|r| (r, index as u16));
                        measure_cell(sleeper, cell, budget, report, tid);
                    }
                }
                Ok(cells)
            })
            .join()
            .map_err(|_| LabError::Panicked("sweep thread".into()))?
        })
        .map_err(LabError::in_measuring_thread)?;
        observer.tick(Nanos(monotonic_now_ns() - began), common.duration, &[]);
        if let Some(session) = session {
            session.finish(&[cpu], observer, &mut outcome);
        }
        for cell in &cells {
            if cell.hist.is_empty() {
                continue;
            }
            let series =
                Series::distribution(&cell.name, "oversleep", &cell.hist)?.with_config("cpu", cpu);
            outcome.series.push(
                SlackCell {
                    mechanism: cell.mechanism.name().to_string(),
                    requested_ns: cell.sleep.get(),
                    timer_slack_ns: cell.slack.get(),
                    policy: if cell.fifo { "fifo" } else { "other" }.to_string(),
                }
                .into_config_of(series),
            );
        }
        Ok(outcome)
    }
}

/// The sweep's cells: every mechanism x sleep x slack, plus the SCHED_FIFO row when asked
/// for and allowed (warned as skipped when not).
fn cells(cfg: &SweepConfig, observer: &mut dyn Observer, outcome: &mut Outcome) -> Vec<Cell> {
    let cell = |name, mechanism, sleep, slack, fifo| Cell {
        name,
        mechanism,
        sleep,
        slack,
        fifo,
        hist: LatencyHistogram::new(),
    };
    let mut cells = Vec::new();
    for &m in &cfg.mechanisms {
        for &sleep in &cfg.sleeps {
            for &slack in &cfg.slacks {
                let name = format!(
                    "{}{}/{}/{}",
                    cfg.prefix,
                    m.name(),
                    sleep.label(),
                    slack.label()
                );
                cells.push(cell(name, m, sleep, slack, false));
            }
        }
    }
    let fifo_ok = cfg.fifo_row && rtlab_sys::probe::can_use_fifo(1);
    if cfg.fifo_row && !fifo_ok {
        outcome.warn(
            observer,
            "fifo row: skipped: needs SCHED_FIFO (run as root)".into(),
        );
    }
    if fifo_ok {
        let slack = *cfg.slacks.iter().max().expect("validated non-empty");
        for &sleep in &cfg.sleeps {
            let name = format!(
                "{}fifo/futex/{}/{}",
                cfg.prefix,
                sleep.label(),
                slack.label()
            );
            cells.push(cell(name, Mechanism::Futex, sleep, slack, true));
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::NullObserver;

    #[test]
    fn a_large_slack_shows_as_oversleep_and_a_tiny_one_does_not() {
        let sweep = SlackSweep::new(SweepConfig {
            sleeps: vec![Nanos::from_micros(10)],
            slacks: vec![Nanos(1), Nanos::from_micros(200)],
            mechanisms: vec![Mechanism::Futex, Mechanism::ClockNanosleepRel],
            cpu: 0,
            fifo_row: false,
            prefix: String::new(),
            explain: None,
        })
        .unwrap();
        let common = CommonConfig {
            duration: Nanos::from_millis(400),
            loads: vec![],
            mlock: false,
            dma_latency: false,
        };
        let out = sweep.run(&common, &mut NullObserver).unwrap();
        let p50 = |name: &str| {
            out.series
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| s.p50)
                .unwrap()
        };
        for m in ["futex", "clock_nanosleep_rel"] {
            let (tight, loose) = (
                p50(&format!("{m}/10us/1ns")),
                p50(&format!("{m}/10us/200us")),
            );
            // The kernel may defer the wakeup by up to the slack, and with nothing else to
            // batch with it does: the 200 us slack shows, the 1 ns one does not.
            assert!(
                loose > tight + 50_000.0,
                "{m}: p50 {loose} ns with 200us slack vs {tight} ns with 1ns"
            );
        }
    }

    #[test]
    fn bad_sweeps_are_refused() {
        let base = SweepConfig {
            sleeps: vec![Nanos::from_micros(10)],
            slacks: vec![Nanos(1)],
            mechanisms: vec![Mechanism::Futex],
            cpu: 0,
            fifo_row: false,
            prefix: String::new(),
            explain: None,
        };
        assert!(SlackSweep::new(SweepConfig {
            slacks: vec![Nanos(0)],
            ..base.clone()
        })
        .is_err());
        assert!(SlackSweep::new(SweepConfig {
            sleeps: vec![],
            ..base.clone()
        })
        .is_err());
        assert!(SlackSweep::new(SweepConfig {
            sleeps: vec![Nanos::from_secs(2)],
            ..base
        })
        .is_err());
    }
}
