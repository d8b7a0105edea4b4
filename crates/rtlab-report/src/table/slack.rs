//! `rtlab slack`'s sweep: rows mechanism x requested sleep, one column per slack.

use super::Table;
use rtlab_stats::details::SlackCell;
use rtlab_stats::result::ResultDoc;
use rtlab_stats::Nanos;

/// The p50 oversleep of each cell (`-` where a cell was not measured).
pub fn sweep(doc: &ResultDoc, slacks: &[Nanos]) -> String {
    let mut header = vec!["mechanism".to_string(), "sleep".to_string()];
    header.extend(slacks.iter().map(|s| format!("slack {}", s.label())));
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = Table::new(&header_refs);
    let cells: Vec<(SlackCell, Option<f64>)> = doc
        .series
        .iter()
        .filter_map(|s| Some((SlackCell::of(s)?, s.p50)))
        .collect();
    let mut rows: Vec<(String, u64)> = Vec::new();
    for (c, _) in &cells {
        let key = (c.row(), c.requested_ns);
        if !rows.contains(&key) {
            rows.push(key);
        }
    }
    for (row, sleep) in rows {
        let mut line = vec![row.clone(), Nanos(sleep).to_string()];
        for slack in slacks {
            let p50 = cells
                .iter()
                .find(|(c, _)| {
                    c.row() == row && c.requested_ns == sleep && c.timer_slack_ns == slack.get()
                })
                .and_then(|(_, p)| *p);
            line.push(p50.map_or("-".into(), |v| Nanos(v as u64).to_string()));
        }
        t.row(line);
    }
    format!("p50 oversleep (actual - requested sleep):\n{}", t.render())
}
