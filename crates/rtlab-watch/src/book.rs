//! What a long watch keeps of its explained outliers: the worst of each interval (per kind of
//! delay) for the last [`RECENT_INTERVALS`] intervals, the worst of the whole run, and every
//! one counted by its main cause. Memory stays bounded however long it runs.

use crate::DelayKind;
use rtlab_stats::result::{Outlier, OutlierSummary};
use std::collections::{HashSet, VecDeque};

/// Intervals whose worst outliers are kept (five minutes at the default 10 s interval log;
/// about 600 B each, so at most 30 x 2 x `--top`: 360 KiB at the default 10).
pub const RECENT_INTERVALS: usize = 30;

/// The explained outliers of a watch.
#[derive(Debug)]
pub struct OutlierBook {
    /// How many are kept per interval and kind, and of the whole run.
    keep: usize,
    /// This interval's worst, per kind.
    current: Vec<(DelayKind, Outlier)>,
    /// Earlier intervals' worst, oldest first.
    recent: VecDeque<Vec<Outlier>>,
    /// The run's worst, worst first.
    worst: Vec<Outlier>,
    summary: OutlierSummary,
}

impl OutlierBook {
    /// Keeping `keep` per interval and kind (at least one).
    pub fn new(keep: usize) -> OutlierBook {
        OutlierBook {
            keep: keep.max(1),
            current: Vec::new(),
            recent: VecDeque::new(),
            worst: Vec::new(),
            summary: OutlierSummary::default(),
        }
    }

    /// Takes an explained outlier of `kind`.
    pub fn add(&mut self, kind: DelayKind, o: Outlier) {
        self.summary.add(&o);
        let at = self.worst.partition_point(|w| w.latency_ns >= o.latency_ns);
        if at < self.keep {
            self.worst.insert(at, o.clone());
            self.worst.truncate(self.keep);
        }
        self.current.push((kind, o));
        if self.current.iter().filter(|(k, _)| *k == kind).count() > self.keep {
            let least = self
                .current
                .iter()
                .enumerate()
                .filter(|(_, (k, _))| *k == kind)
                .min_by_key(|(_, (_, o))| o.latency_ns)
                .map(|(i, _)| i);
            if let Some(i) = least {
                self.current.swap_remove(i);
            }
        }
    }

    /// Ends an interval: its worst join the recent ones, the oldest interval's leave.
    pub fn close_interval(&mut self) {
        if self.current.is_empty() {
            return;
        }
        let mut kept: Vec<Outlier> = self.current.drain(..).map(|(_, o)| o).collect();
        kept.sort_by_key(|o| std::cmp::Reverse(o.latency_ns));
        self.recent.push_back(kept);
        if self.recent.len() > RECENT_INTERVALS {
            self.recent.pop_front();
        }
    }

    /// Every outlier kept (the run's worst and the recent intervals'), worst first.
    pub fn outliers(&self) -> Vec<Outlier> {
        let mut seen = HashSet::new();
        let mut all: Vec<Outlier> = self
            .worst
            .iter()
            .chain(self.recent.iter().flatten())
            .chain(self.current.iter().map(|(_, o)| o))
            .filter(|o| seen.insert((o.series.clone(), o.at_ns)))
            .cloned()
            .collect();
        all.sort_by_key(|o| std::cmp::Reverse(o.latency_ns));
        all
    }

    /// The run's worst, worst first.
    pub fn worst(&self) -> &[Outlier] {
        &self.worst
    }

    /// Every explained outlier, counted by main cause.
    pub fn summary(&self) -> &OutlierSummary {
        &self.summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_stats::result::{Cause, CauseKind};

    fn outlier(series: &str, at_ns: u64, latency_ns: u64, task: Option<&str>) -> Outlier {
        Outlier {
            series: series.into(),
            at_ns,
            latency_ns,
            cpu: Some(0),
            until_running_ns: None,
            causes: vec![Cause {
                kind: if task.is_some() {
                    CauseKind::Preemption
                } else {
                    CauseKind::Irq
                },
                duration_ns: latency_ns / 2,
                task: task.map(String::from),
                pid: None,
                prio: None,
                detail: None,
                reason: None,
                stall_ns: None,
            }],
            stacks: Vec::new(),
        }
    }

    #[test]
    fn keeps_each_intervals_worst_per_kind_and_the_runs_worst_and_counts_all() {
        let mut b = OutlierBook::new(2);
        // Interval 1: five timer outliers and one wakeup outlier.
        for (i, late) in [10, 50, 20, 40, 30].into_iter().enumerate() {
            b.add(
                DelayKind::Timer,
                outlier("t/1/timer", i as u64, late, Some("hog")),
            );
        }
        b.add(DelayKind::Wakeup, outlier("t/1/wakeup", 9, 5, None));
        b.close_interval();
        // Interval 2: small ones only.
        b.add(
            DelayKind::Timer,
            outlier("t/1/timer", 100, 3, Some("kworker")),
        );
        b.close_interval();
        let lates: Vec<u64> = b.outliers().iter().map(|o| o.latency_ns).collect();
        assert_eq!(
            lates,
            vec![50, 40, 5, 3],
            "2 per kind and interval, worst first"
        );
        assert_eq!(
            b.worst().iter().map(|o| o.latency_ns).collect::<Vec<_>>(),
            vec![50, 40]
        );
        let s = b.summary();
        assert_eq!(s.explained, 7);
        assert_eq!(s.by_cause[&CauseKind::Preemption].outliers, 6);
        assert_eq!(s.by_cause[&CauseKind::Preemption].max_ns, 50);
        assert_eq!(s.by_cause[&CauseKind::Irq].outliers, 1);
        assert_eq!(s.by_task["hog"], 5);
    }

    #[test]
    fn memory_is_bounded_by_the_recent_intervals() {
        let mut b = OutlierBook::new(3);
        for i in 0..(RECENT_INTERVALS as u64 + 50) {
            for j in 0..10 {
                b.add(
                    DelayKind::Wakeup,
                    outlier("w", i * 100 + j, 1_000 + j, Some("x")),
                );
            }
            b.close_interval();
        }
        // The recent intervals' worst, and the run's (from the first interval, equal ones
        // keeping their place).
        assert_eq!(b.outliers().len(), 3 * RECENT_INTERVALS + 3);
        assert_eq!(b.summary().explained, 10 * (RECENT_INTERVALS as u64 + 50));
    }
}
