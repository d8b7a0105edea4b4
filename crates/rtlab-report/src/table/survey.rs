//! The survey's verdict: the wakeup area's idle and loaded latencies, and every area's
//! reading.

use super::Table;
use rtlab_stats::details::SurveyRow;
use rtlab_stats::Nanos;

fn ns_cell(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| Nanos(v).to_string())
}

/// The verdict table, then one line per area's reading.
pub fn verdict(rows: &[SurveyRow]) -> String {
    let mut t = Table::new(&[
        "area",
        "idle p99",
        "idle max",
        "loaded p99",
        "loaded max",
        "loaded/idle",
    ]);
    let mut readings = String::new();
    for row in rows {
        // Areas without idle/loaded latencies (lock ...) only have a reading.
        if row.idle_max_ns.is_some() {
            t.row(vec![
                row.area.to_string(),
                ns_cell(row.idle_p99_ns),
                ns_cell(row.idle_max_ns),
                ns_cell(row.loaded_p99_ns),
                ns_cell(row.loaded_max_ns),
                row.loaded_over_idle
                    .map_or("-".into(), |r| format!("{r:.1}x")),
            ]);
        }
        for line in crate::cause::wrapped(&format!("{}: {}", row.area, row.reading), 0, 120) {
            readings.push_str(&line);
            readings.push('\n');
        }
    }
    format!("{}\n{readings}", t.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wakeup_row_is_tabled_and_every_area_read() {
        let wakeup = SurveyRow {
            idle_p99_ns: Some(10_000),
            idle_max_ns: Some(20_000),
            loaded_p99_ns: Some(30_000),
            loaded_max_ns: Some(2_000_000),
            loaded_over_idle: Some(100.0),
            top_causes: Some(vec![]),
            ..SurveyRow::reading(rtlab_stats::area::Area::Wakeup, "slow under load".into())
        };
        let text = verdict(&[
            wakeup,
            SurveyRow::reading(rtlab_stats::area::Area::Lock, "fast".into()),
        ]);
        assert!(text.contains("2.00 ms"), "{text}");
        assert!(text.contains("100.0x"), "{text}");
        assert!(
            text.contains("wakeup: slow under load\nlock: fast\n"),
            "{text}"
        );
        assert_eq!(text.matches("lock").count(), 1, "lock has no row: {text}");
    }

    #[test]
    fn a_long_reading_is_broken_into_lines_of_120_columns() {
        let long = "the mlocked arm's p99 was 3.1x the plain one's while the load ran, \
                    its worst waits came from page faults of the measuring thread, "
            .repeat(4);
        let text = verdict(&[SurveyRow::reading(
            rtlab_stats::area::Area::Mmap,
            long.clone(),
        )]);
        let lines: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("mmap:"))
            .collect();
        assert!(lines.len() > 2, "{text}");
        assert!(lines.iter().all(|l| l.chars().count() <= 120), "{text}");
        assert!(lines[1..].iter().all(|l| l.starts_with("  ")), "{text}");
        let words: Vec<&str> = lines.iter().flat_map(|l| l.split_whitespace()).collect();
        assert_eq!(words.join(" "), format!("mmap: {}", long.trim_end()));
    }
}
