//! A JVM's two accounts of its stops, where both are read (`--jvm-log` on a JVM with
//! HotSpot's probes): the probes' and the JVM's own log's, paired stop by stop in the order
//! they happened, and a stop whose two totals differ by over [`DIFFER_SHARE`] flagged. The
//! probes time a safepoint at the VM thread's own clock reads, as `-Xlog:safepoint` does, so
//! the two should agree: a user who doubts a figure has the JVM's own word beside it.

use rtlab_trace::safepoint::Stop;
use std::collections::{HashMap, VecDeque};

/// Two totals differ when they are further apart than this share of the log's total...
pub const DIFFER_SHARE: f64 = 0.05;
/// ...and than this (the log's figures are whole nanoseconds of its own clock reads; a stop of
/// a few microseconds moves by more than 5 % between two reads of the same clock).
pub const DIFFER_MIN_NS: u64 = 5_000;
/// A stop's log line is written after the VM thread lets the Java threads go, at most this
/// long after the stop's end (a real-time Java thread may hold the VM thread's CPU).
const LINE_LAG_NS: u64 = 200_000_000;
/// How far before a probe's end a logged stop may end (the two read one clock, in the same
/// thread, a few instructions apart).
const EARLIER_NS: u64 = 1_000_000;
/// The stops kept waiting for their other account, on each side.
const WAITING: usize = 512;
/// The differing stops kept one by one (past these, counted).
const FLAGGED_KEPT: usize = 100;
/// The pairs kept for the stops' own entries in the result (the latest thousand stops).
const PAIRS_KEPT: usize = 1000;

/// One stop told by both.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub process: u32,
    pub operation: Option<std::sync::Arc<str>>,
    /// When it began, by the probes.
    pub begin_ns: u64,
    /// Its total by the probes, and by the JVM's own log.
    pub probes_ns: u64,
    pub log_ns: u64,
}

impl Pair {
    /// Whether its two totals differ (by over 5 % of the log's and over 5 us).
    pub fn differs(&self) -> bool {
        let apart = self.probes_ns.abs_diff(self.log_ns);
        apart > DIFFER_MIN_NS && apart as f64 > DIFFER_SHARE * self.log_ns as f64
    }
}

/// The two accounts of the JVMs read both ways.
#[derive(Debug, Default)]
pub(crate) struct Witnesses {
    /// Stops one account told that the other has not yet, oldest first.
    probes: VecDeque<Stop>,
    logged: VecDeque<Stop>,
    /// Per JVM: stops compared, and how many differ.
    counts: HashMap<u32, (u64, u64)>,
    /// The first differing stops.
    pub(crate) flagged: Vec<Pair>,
    /// The latest pairs, by (process, begin by the probes).
    pairs: VecDeque<Pair>,
    /// When each JVM's log was turned on: a stop that ended before is in no log.
    on: HashMap<u32, u64>,
}

impl Witnesses {
    /// JVM `process`'s log was turned on at `at_ns`.
    pub(crate) fn log_on(&mut self, process: u32, at_ns: u64) {
        self.on.insert(process, at_ns);
        (self.probes).retain(|s| s.process != process || s.end_ns >= at_ns);
    }

    /// A stop the probes told of.
    pub(crate) fn probe(&mut self, stop: &Stop) {
        if self
            .on
            .get(&stop.process)
            .is_some_and(|&on| stop.end_ns < on)
        {
            return;
        }
        // The logged stop that ended first after it (its line is written after its end).
        let found = (self.logged.iter().enumerate())
            .filter(|(_, l)| same(stop, l))
            .min_by_key(|(_, l)| l.end_ns)
            .map(|(i, _)| i);
        match found.and_then(|i| self.logged.remove(i)) {
            Some(l) => self.pair(stop, &l),
            None => push(&mut self.probes, stop),
        }
    }

    /// A stop the JVM's own log told of.
    pub(crate) fn logged(&mut self, stop: &Stop) {
        // The probes' stop that ended last before its line.
        let found = (self.probes.iter().enumerate())
            .filter(|(_, p)| same(p, stop))
            .max_by_key(|(_, p)| p.end_ns)
            .map(|(i, _)| i);
        match found.and_then(|i| self.probes.remove(i)) {
            Some(p) => self.pair(&p, stop),
            None => push(&mut self.logged, stop),
        }
    }

    fn pair(&mut self, probe: &Stop, log: &Stop) {
        // (Stops are told in order: those of this JVM before it that found no partner never
        // will.)
        let before = |s: &Stop| s.process == probe.process && s.end_ns < probe.begin_ns;
        self.probes.retain(|s| !before(s));
        self.logged.retain(|s| !before(s));
        let pair = Pair {
            process: probe.process,
            operation: probe.operation.clone(),
            begin_ns: probe.begin_ns,
            probes_ns: probe.end_ns.saturating_sub(probe.begin_ns),
            log_ns: log.end_ns.saturating_sub(log.begin_ns),
        };
        let c = self.counts.entry(probe.process).or_default();
        c.0 += 1;
        if pair.differs() {
            c.1 += 1;
            if self.flagged.len() < FLAGGED_KEPT {
                self.flagged.push(pair.clone());
            }
        }
        if self.pairs.len() >= PAIRS_KEPT {
            self.pairs.pop_front();
        }
        self.pairs.push_back(pair);
    }

    /// JVM `process`'s stops compared and how many differ (None: none compared).
    pub(crate) fn of(&self, process: u32) -> Option<(u64, u64)> {
        self.counts.get(&process).copied()
    }

    /// All JVMs': stops compared, and how many differ.
    pub(crate) fn totals(&self) -> (u64, u64) {
        (self.counts.values()).fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
    }

    /// The log's total of the stop of `process` that began at `begin_ns` by the probes.
    pub(crate) fn log_total(&self, process: u32, begin_ns: u64) -> Option<u64> {
        (self.pairs.iter().rev())
            .find(|p| p.process == process && p.begin_ns == begin_ns)
            .map(|p| p.log_ns)
    }
}

/// Whether `probe` and `log` are one stop: same JVM and VM operation, the log's line ending
/// at or after the probes' end and within the time it may take to be written.
fn same(probe: &Stop, log: &Stop) -> bool {
    probe.process == log.process
        && probe.operation == log.operation
        && log.end_ns + EARLIER_NS >= probe.end_ns
        && log.end_ns <= probe.end_ns + LINE_LAG_NS
}

fn push(waiting: &mut VecDeque<Stop>, stop: &Stop) {
    if waiting.len() >= WAITING {
        waiting.pop_front();
    }
    waiting.push_back(stop.clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stop(op: &str, begin_ns: u64, end_ns: u64) -> Stop {
        Stop {
            process: 7,
            begin_ns,
            end_ns,
            operation: Some(op.into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_two_accounts_are_paired_in_either_order_and_a_stop_apart_by_over_5_percent_flagged() {
        let mut w = Witnesses::default();
        // A collection: the probes first, the log's line 3 ms later, its total 2 % off.
        w.probe(&stop("G1CollectFull", 1_000_000, 21_000_000));
        w.logged(&stop("G1CollectFull", 3_400_000, 23_800_000));
        // A thread dump: the log first (the reader drained it first), 20 % off.
        w.logged(&stop("ThreadDump", 40_000_000, 40_120_000));
        w.probe(&stop("ThreadDump", 39_990_000, 40_090_000));
        // A short one 3 us apart: within DIFFER_MIN_NS, not flagged.
        w.probe(&stop("Cleanup", 50_000_000, 50_010_000));
        w.logged(&stop("Cleanup", 50_000_000, 50_013_000));
        // Another operation at the same time is no pair.
        w.probe(&stop("Deoptimize", 60_000_000, 60_100_000));
        w.logged(&stop("ICBufferFull", 60_000_000, 60_100_000));
        assert_eq!(w.of(7), Some((3, 1)));
        assert_eq!(w.totals(), (3, 1));
        assert_eq!(w.flagged.len(), 1);
        assert_eq!(w.flagged[0].operation.as_deref(), Some("ThreadDump"));
        assert_eq!(
            (w.flagged[0].probes_ns, w.flagged[0].log_ns),
            (100_000, 120_000)
        );
        assert_eq!(w.log_total(7, 1_000_000), Some(20_400_000));
        assert_eq!(w.log_total(7, 60_000_000), None);
    }

    #[test]
    fn a_stop_before_the_log_was_turned_on_is_no_partner_of_a_later_line() {
        // The first collection ended before the log was on; the second's line pairs with
        // the second, not the first still waiting.
        let mut w = Witnesses::default();
        w.probe(&stop("G1CollectForAllocation", 70_000_000, 89_300_000));
        w.log_on(7, 92_000_000);
        w.probe(&stop("G1CollectForAllocation", 93_500_000, 116_000_000));
        w.logged(&stop("G1CollectForAllocation", 93_460_000, 116_010_000));
        assert_eq!(w.of(7), Some((1, 0)));
        // Two waiting, the log's line pairs with the one that ended last before it.
        let mut w = Witnesses::default();
        w.probe(&stop("G1CollectForAllocation", 0, 19_300_000));
        w.probe(&stop("G1CollectForAllocation", 22_800_000, 45_300_000));
        w.logged(&stop("G1CollectForAllocation", 22_790_000, 45_330_000));
        assert_eq!(w.of(7), Some((1, 0)));
    }

    #[test]
    fn a_log_line_long_after_the_stop_is_another_stops() {
        let mut w = Witnesses::default();
        w.probe(&stop("G1CollectFull", 0, 10_000_000));
        w.logged(&stop("G1CollectFull", 500_000_000, 510_000_000));
        assert_eq!(w.of(7), None);
    }
}
