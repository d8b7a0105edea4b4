//! What `rtlab watch` shows while it runs, every `--interval-log`: on a terminal a table
//! redrawn in place; elsewhere (a CI log, a pod's log) one line per interval.

use rtlab_report::printable;
use rtlab_report::table::Table;
use rtlab_stats::result::OutlierSummary;
use rtlab_stats::{LatencyHistogram, Nanos};

/// One thread name's delays of one kind in the interval.
pub struct Row {
    /// `<name>/<kind>`.
    pub series: String,
    /// In the interval.
    pub interval: LatencyHistogram,
    /// The longest since the start.
    pub max_ever: Nanos,
}

/// An interval's figures.
pub struct Interval {
    /// Since the start.
    pub at_ns: u64,
    /// Threads watched now.
    pub threads: usize,
    /// Per thread name and kind, with samples in the interval.
    pub rows: Vec<Row>,
    /// All explained outliers so far.
    pub outliers: OutlierSummary,
    /// Trace events lost so far.
    pub lost: u64,
}

/// Draws the intervals.
pub struct StatusView {
    terminal: bool,
    /// Lines of the table drawn last (to draw over).
    drawn: usize,
    /// Explained outliers at the last interval.
    explained_before: u64,
}

impl StatusView {
    /// A live table when stderr is a terminal, else a line per interval.
    pub fn new() -> StatusView {
        use std::io::IsTerminal;
        StatusView {
            terminal: std::io::stderr().is_terminal(),
            drawn: 0,
            explained_before: 0,
        }
    }

    /// Shows `iv`.
    /// Rows as given: real-time series first, the worst first.
    pub fn show(&mut self, iv: Interval) {
        let new = iv.outliers.explained - self.explained_before.min(iv.outliers.explained);
        self.explained_before = iv.outliers.explained;
        if self.terminal {
            let text = table(&iv, new);
            // Back to the first line drawn last time, clear to the end, draw again.
            if self.drawn > 0 {
                eprint!("\x1b[{}F\x1b[J", self.drawn);
            }
            eprint!("{text}");
            self.drawn = text.lines().count();
        } else {
            eprintln!("{}", line(&iv, new));
        }
    }
}

/// The main causes, most frequent first: `preemption 10, irq 2`.
fn causes(s: &OutlierSummary) -> String {
    let mut by: Vec<_> = s.by_cause.iter().filter(|(_, t)| t.outliers > 0).collect();
    by.sort_by_key(|(_, t)| std::cmp::Reverse(t.outliers));
    let mut out: Vec<String> = by
        .iter()
        .map(|(k, t)| format!("{} {}", k.as_str(), t.outliers))
        .collect();
    if let Some((task, n)) = s.by_task.iter().max_by_key(|(_, n)| **n) {
        out.push(format!("most by {} {n}", printable(task)));
    }
    out.join(", ")
}

/// `watch 20 s: 2 thread(s); rt-loop/timer n=1972 p99=371 us max=2.75 ms; ...; explained
/// +3 (all 24: preemption 22, irq 2, most by rtlab-hog 20); lost 0`.
fn line(iv: &Interval, new: u64) -> String {
    let mut out = format!(
        "watch {:.0} s: {} thread(s)",
        iv.at_ns as f64 / 1e9,
        iv.threads
    );
    for r in iv.rows.iter().take(3) {
        let [series, n, p50, p99, max] = cells(r);
        out.push_str(&format!("; {series} n={n} p50={p50} p99={p99} max={max}"));
    }
    if iv.rows.len() > 3 {
        out.push_str(&format!("; {} more series", iv.rows.len() - 3));
    }
    if iv.outliers.explained > 0 {
        out.push_str(&format!(
            "; explained +{new} (all {}: {})",
            iv.outliers.explained,
            causes(&iv.outliers)
        ));
    }
    out.push_str(&format!("; lost {}", iv.lost));
    out
}

/// A row's series, count, p50, p99 and max in the interval.
fn cells(r: &Row) -> [String; 5] {
    let s = r.interval.summary();
    [
        printable(&r.series).into_owned(),
        s.count.to_string(),
        Nanos(s.p50).to_string(),
        Nanos(s.p99).to_string(),
        Nanos(s.max).to_string(),
    ]
}

/// The live table: a heading line, one row per thread name and kind, the causes.
fn table(iv: &Interval, new: u64) -> String {
    let mut t = Table::new(&["series", "n", "p50", "p99", "max", "max ever"]);
    for r in iv.rows.iter().take(20) {
        let mut row = cells(r).to_vec();
        row.push(r.max_ever.to_string());
        t.row(row);
    }
    let mut out = format!(
        "rtlab watch {:.0} s: {} thread(s), {} events lost, last interval below\n",
        iv.at_ns as f64 / 1e9,
        iv.threads,
        iv.lost
    );
    out.push_str(&t.render());
    if iv.rows.len() > 20 {
        out.push_str(&format!("({} more series)\n", iv.rows.len() - 20));
    }
    if iv.outliers.explained > 0 {
        out.push_str(&format!(
            "outliers explained: {} (+{new}): {}\n",
            iv.outliers.explained,
            causes(&iv.outliers)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_stats::result::{Cause, CauseKind, Outlier};

    fn interval() -> Interval {
        let mut h = LatencyHistogram::compact();
        for ns in [10_000, 20_000, 3_000_000] {
            h.record(Nanos(ns));
        }
        let mut quiet = LatencyHistogram::compact();
        quiet.record(Nanos(5_000));
        let mut outliers = OutlierSummary::default();
        outliers.add(&Outlier {
            series: "rt-loop/7/timer".into(),
            at_ns: 1,
            latency_ns: 3_000_000,
            cpu: None,
            until_running_ns: None,
            causes: vec![Cause {
                kind: CauseKind::Preemption,
                duration_ns: 2_900_000,
                task: Some("rtlab-hog".into()),
                pid: None,
                prio: None,
                detail: None,
                reason: None,
                stall_ns: None,
            }],
            stacks: Vec::new(),
        });
        Interval {
            at_ns: 20_000_000_000,
            threads: 2,
            rows: vec![
                Row {
                    series: "gc/wakeup".into(),
                    interval: quiet,
                    max_ever: Nanos(9_000),
                },
                Row {
                    series: "rt-loop/timer".into(),
                    interval: h,
                    max_ever: Nanos(3_000_000),
                },
            ],
            outliers,
            lost: 0,
        }
    }

    #[test]
    fn one_line_per_interval_worst_series_first_with_the_causes() {
        let mut iv = interval();
        iv.rows.sort_by_key(|r| std::cmp::Reverse(r.interval.max()));
        let l = line(&iv, 1);
        assert!(
            l.starts_with("watch 20 s: 2 thread(s); rt-loop/timer n=3 "),
            "{l}"
        );
        assert!(l.contains("; gc/wakeup n=1 "), "{l}");
        assert!(
            l.ends_with("explained +1 (all 1: preemption 1, most by rtlab-hog 1); lost 0"),
            "{l}"
        );
        assert!(!l.contains('\n'));
        let t = table(&iv, 1);
        assert_eq!(t.lines().count(), 1 + 3 + 1, "{t}");
    }
}
