//! `rtlab net run`: per stream, what was sent, acknowledged, lost, late.

use super::Table;
use rtlab_stats::details::StreamCounters;
use rtlab_stats::result::ResultDoc;

/// One row per stream with counters (its `<label>/rtt` series); empty when none has them.
pub fn counters(doc: &ResultDoc) -> String {
    let mut t = Table::new(&[
        "stream",
        "sent",
        "acked",
        "lost",
        "deadline misses",
        "retransmits",
        "pad bytes",
    ]);
    let mut any = false;
    for s in doc.series.iter().filter(|s| s.name.ends_with("/rtt")) {
        let Some(c) = StreamCounters::of(s) else {
            continue;
        };
        any = true;
        t.row(vec![
            s.name.trim_end_matches("/rtt").to_string(),
            c.sent.to_string(),
            c.acked.to_string(),
            c.lost.to_string(),
            c.deadline_misses.to_string(),
            c.retransmits.map_or("-".into(), |r| r.to_string()),
            c.pad_bytes.to_string(),
        ]);
    }
    if any {
        t.render()
    } else {
        String::new()
    }
}
