//! Terminal tables and status lines. Latencies are shown through `Nanos`' Display only.

mod log2;
pub use log2::log2_histogram;
pub mod invert;
pub mod net;
pub mod slack;
pub mod survey;

use rtlab_stats::result::{ResultDoc, Series, Unit};
use rtlab_stats::{LiveHistogram, Nanos};
use std::fmt::Write;

/// A plain aligned text table: first column left-aligned, the rest right-aligned (or the
/// first `left` columns left-aligned, for text tables).
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
    left: usize,
}

impl Table {
    /// A table with a header row.
    pub fn new(header: &[&str]) -> Self {
        Table {
            rows: vec![header.iter().map(|s| s.to_string()).collect()],
            left: 1,
        }
    }

    /// The same with every column left-aligned (a table of words, not numbers).
    pub fn left_aligned(mut self) -> Self {
        self.left = usize::MAX;
        self
    }

    /// Whether it has no row but its header.
    pub fn is_empty(&self) -> bool {
        self.rows.len() <= 1
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders with two spaces between columns.
    pub fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                if c < self.left {
                    let _ = write!(line, "{cell:<w$}", w = widths[c]);
                } else {
                    let _ = write!(line, "{cell:>w$}", w = widths[c]);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

fn ns(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| Nanos(v.round() as u64).to_string())
}

/// One row per distribution series: count, missed (where some series has periods to miss),
/// min, p50, p90, p99, p99.9, p99.99, max.
pub fn distribution_table(series: &[Series]) -> String {
    let distributions: Vec<&Series> = series.iter().filter(|s| s.is_distribution()).collect();
    let periodic = distributions.iter().any(|s| s.missed.is_some());
    let mut head = vec!["series", "count"];
    if periodic {
        head.push("missed");
    }
    head.extend(["min", "p50", "p90", "p99", "p99.9", "p99.99", "max"]);
    let mut t = Table::new(&head);
    for s in distributions {
        let mut row = vec![s.name.clone(), s.count.unwrap_or(0).to_string()];
        if periodic {
            row.push(s.missed.map_or("-".into(), |m| m.to_string()));
        }
        row.extend([
            ns(s.min),
            ns(s.p50),
            ns(s.p90),
            ns(s.p99),
            ns(s.p999),
            ns(s.p9999),
            ns(s.max),
        ]);
        t.row(row);
    }
    t.render()
}

fn format_value(value: f64, unit: Unit) -> String {
    match unit {
        Unit::Ns if value < 1_000.0 => format!("{value:.1} ns"),
        Unit::Ns => Nanos(value.round() as u64).to_string(),
        Unit::OpsPerSec => format!("{value:.0} ops/s"),
        Unit::BytesPerSec => format!("{:.1} MiB/s", value / (1 << 20) as f64),
        Unit::Count => format!("{value:.0}"),
        Unit::Ratio => format!("{value:.3}"),
    }
}

/// A byte count in binary units (`100 MiB`).
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// One row per value series.
pub fn value_table(series: &[Series]) -> String {
    let mut t = Table::new(&["series", "metric", "value"]);
    for s in series.iter().filter(|s| !s.is_distribution()) {
        t.row(vec![
            s.name.clone(),
            s.metric.clone(),
            s.value.map_or("-".into(), |v| format_value(v, s.unit)),
        ]);
    }
    t.render()
}

/// The final text of a run: the tables, then a line on how it ended.
pub fn summary(doc: &ResultDoc) -> String {
    let mut out = String::new();
    if doc.series.iter().any(Series::is_distribution) {
        out.push_str(&distribution_table(&doc.series));
    }
    if doc.series.iter().any(|s| !s.is_distribution()) {
        out.push_str(&value_table(&doc.series));
    }
    if doc.verdict.interrupted {
        let _ = writeln!(
            out,
            "interrupted after {:.1} s: the figures cover the measured part only",
            doc.duration_s
        );
    }
    if doc.series.iter().any(|s| s.missed.unwrap_or(0) > 0) {
        out.push_str("missed: periods that could not start on time because an earlier one overran; each is also a sample\n");
    }
    out
}

/// One status line per live series, for redrawing on a terminal.
pub fn live_status(elapsed: Nanos, total: Nanos, live: &[(&str, &LiveHistogram)]) -> Vec<String> {
    let head = format!(
        "[{:>6.1}s / {:.1}s]",
        elapsed.as_secs_f64(),
        total.as_secs_f64()
    );
    live.iter()
        .map(|(name, h)| {
            let q = |p| h.approx_quantile(p).map_or_else(|| "-".into(), |v: Nanos| format!("~{v}"));
            let (min, max) = h.min_max().map_or(("-".into(), "-".into()), |(a, b)| (a.to_string(), b.to_string()));
            format!(
                "{head} {name:<10} samples {:>9}  min {min:>9}  p50 {:>10}  p99 {:>10}  max {max:>9}",
                h.count(),
                q(0.5),
                q(0.99)
            )
        })
        .collect()
}

/// One line of progress for a log (stderr off a terminal): the stage, the time so far and
/// each live series' count, p99 and max, e.g. `status: 1m00s of 10m00s: thread0 60000
/// samples p99 ~21.5 us max 1.20 ms; ...`. `total` None: running until stopped.
pub fn status_line(
    stage: Option<&str>,
    elapsed: Nanos,
    total: Option<Nanos>,
    live: &[(&str, &LiveHistogram)],
) -> String {
    let mut line = String::from("status: ");
    if let Some(stage) = stage {
        line.push_str(stage);
        line.push_str(", ");
    }
    line.push_str(&match total {
        Some(total) => format!("{} of {}", whole_seconds(elapsed), whole_seconds(total)),
        None => format!("{} (until stopped)", whole_seconds(elapsed)),
    });
    let parts: Vec<String> = live
        .iter()
        .map(|(name, h)| {
            let p99 = h
                .approx_quantile(0.99)
                .map_or_else(|| "-".into(), |v| format!("~{v}"));
            let max = h
                .min_max()
                .map_or_else(|| "-".into(), |(_, max)| max.to_string());
            format!("{name} {} samples p99 {p99} max {max}", h.count())
        })
        .collect();
    if !parts.is_empty() {
        line.push_str(": ");
        line.push_str(&parts.join("; "));
    }
    line
}

/// `1h02m03s`, `2m05s`, `42s`: elapsed time as a log reads it.
fn whole_seconds(d: Nanos) -> String {
    let s = d.get() / 1_000_000_000;
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s:02}s"),
        _ => format!("{h}h{m:02}m{s:02}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_stats::LatencyHistogram;

    #[test]
    fn status_line_names_stage_time_and_each_series() {
        let h = LiveHistogram::new();
        for v in [12_300u64, 45_000, 2_700_000] {
            h.record(Nanos(v));
        }
        let line = status_line(
            Some("wakeup-loaded (3/9)"),
            Nanos::from_secs(125),
            Some(Nanos::from_secs(3600)),
            &[("thread0", &h), ("thread1", &LiveHistogram::new())],
        );
        assert_eq!(
            line,
            "status: wakeup-loaded (3/9), 2m05s of 1h00m00s: thread0 3 samples p99 ~2.70 ms \
             max 2.70 ms; thread1 0 samples p99 - max -",
            "{line}"
        );
        let forever = status_line(None, Nanos::from_secs(42), None, &[]);
        assert_eq!(forever, "status: 42s (until stopped)");
    }

    #[test]
    fn distribution_table_shows_human_units() {
        let mut h = LatencyHistogram::new();
        for v in [12_300u64, 45_000, 2_700_000] {
            h.record(Nanos(v));
        }
        let s = Series::distribution("thread0", "wakeup_latency", &h).unwrap();
        let text = distribution_table(&[s]);
        let mut lines = text.lines();
        assert!(lines.next().unwrap().starts_with("series   count  missed"));
        let row = lines.next().unwrap();
        assert!(
            row.starts_with("thread0") && row.contains("12.3 us") && row.ends_with("2.70 ms"),
            "{row}"
        );
    }

    /// Snapshot of the exact terminal output (alignment, units, column order): a change to
    /// what users read must be deliberate.
    #[test]
    fn tables_match_their_snapshot() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        for i in 0..1000u64 {
            a.record(Nanos(10_000 + i * 10));
            b.record(Nanos(50_000 + i * 1000));
        }
        b.record(Nanos(3_000_000));
        let series = vec![
            Series::distribution("wakeup-idle/thread0", "wakeup_latency", &a).unwrap(),
            Series::distribution("wakeup-loaded/thread0", "wakeup_latency", &b).unwrap(),
            Series::value("lock/rtlab-pi/uncontended", "lock_unlock", Unit::Ns, 5.25),
            Series::value(
                "ipc/rtlab-shm/throughput",
                "throughput",
                Unit::OpsPerSec,
                12_345_678.0,
            ),
        ];
        let expected = "\
series                 count  missed      min      p50      p90      p99    p99.9   p99.99      max
wakeup-idle/thread0     1000       0  10.0 us  15.0 us  19.0 us  19.9 us  20.0 us  20.0 us  20.0 us
wakeup-loaded/thread0   1001       0  50.0 us   550 us   950 us  1.04 ms  1.05 ms  3.00 ms  3.00 ms
";
        assert_eq!(distribution_table(&series), expected);
        let expected = "\
series                          metric           value
lock/rtlab-pi/uncontended  lock_unlock          5.2 ns
ipc/rtlab-shm/throughput    throughput  12345678 ops/s
";
        assert_eq!(value_table(&series), expected);
        let mut t = Table::new(&["check", "status", "found"]).left_aligned();
        t.row(vec![
            "preempt_model".into(),
            "fail".into(),
            "dynamic(none)".into(),
        ]);
        assert_eq!(
            t.render(),
            "check          status  found\npreempt_model  fail    dynamic(none)\n"
        );
    }

    #[test]
    fn value_table_formats_by_unit() {
        let s = Series::value("pi_mutex/uncontended", "lock_unlock", Unit::Ns, 9.14);
        assert!(value_table(&[s]).contains("9.1 ns"));
    }

    #[test]
    fn live_status_has_one_line_per_series() {
        let h = LiveHistogram::new();
        h.record(Nanos(50_000));
        let lines = live_status(
            Nanos::from_secs(1),
            Nanos::from_secs(10),
            &[("thread0", &h), ("thread1", &h)],
        );
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].contains("thread0") && lines[0].contains("samples         1"),
            "{}",
            lines[0]
        );
    }
}
