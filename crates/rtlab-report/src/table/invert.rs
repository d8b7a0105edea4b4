//! `rtlab invert`: bounded or not, per variant, and how the protocols compare with none.

use super::Table;
use rtlab_stats::details::WaitBound;
use rtlab_stats::result::{ResultDoc, Series};
use rtlab_stats::Nanos;

fn series<'a>(doc: &'a ResultDoc, name: &str) -> Option<&'a Series> {
    doc.series.iter().find(|s| s.name == name)
}

/// A row per variant in `variants` (those measured), then `with max / without max` for each
/// pair of `compare`.
pub fn verdict(doc: &ResultDoc, variants: &[&str], compare: &[(&str, &str)]) -> String {
    let mut t = Table::new(&["variant", "max wait", "bound", "bounded", "exceeded by"]);
    for &name in variants {
        let Some(s) = series(doc, name) else {
            continue;
        };
        let b = WaitBound::of(s);
        let ns = |v: Option<u64>| v.map_or("-".into(), |v| Nanos(v).to_string());
        let bounded = b.is_some_and(|b| b.bounded);
        t.row(vec![
            name.to_string(),
            Nanos(s.max.unwrap_or(0.0) as u64).to_string(),
            ns(b.map(|b| b.bound_ns)),
            if bounded { "yes" } else { "NO" }.to_string(),
            if bounded {
                "-".into()
            } else {
                ns(b.map(|b| b.exceeded_by_ns))
            },
        ]);
    }
    let mut out = t.render();
    for &(with, without) in compare {
        if let (Some(a), Some(b)) = (
            series(doc, with).and_then(|s| s.max),
            series(doc, without).and_then(|s| s.max),
        ) {
            out.push_str(&format!(
                "{with} max / {without} max = {:.3}x\n",
                a / b.max(1.0)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_stats::result::Unit;

    #[test]
    fn variants_read_their_bound_from_the_typed_config() {
        let variant = |name: &str, max: f64, bound: WaitBound| {
            let mut s = Series::value(name.to_string(), "lock_wait", Unit::Ns, max);
            s.max = Some(max);
            bound.into_config_of(s)
        };
        let mut doc: ResultDoc = serde_json::from_value(serde_json::json!({
            "schema_version": 1, "tool": {"name": "rtlab", "version": "0"}, "command": "invert",
            "argv": [], "started_at": "2026-11-23T00:00:00Z", "duration_s": 1.0,
            "system": {"kernel": "6", "cpus": 2, "preempt_model": "none", "clocksource": "tsc",
                       "virtualized": true,
                       "privileges": {"rt_sched": true, "mlock": true, "tracefs": true}},
            "load": [], "warnings": [], "series": [], "outliers": [],
            "verdict": {"interrupted": false}
        }))
        .unwrap();
        doc.series = vec![
            variant(
                "none/rtlab",
                8_000_000.0,
                WaitBound {
                    bound_ns: 1_000_000,
                    bounded: false,
                    exceeded_by_ns: 7_000_000,
                },
            ),
            variant(
                "inherit/rtlab",
                500_000.0,
                WaitBound {
                    bound_ns: 1_000_000,
                    bounded: true,
                    exceeded_by_ns: 0,
                },
            ),
        ];
        let text = verdict(
            &doc,
            &["none/rtlab", "inherit/rtlab", "protect/rtlab"],
            &[("inherit/rtlab", "none/rtlab")],
        );
        let rows: Vec<&str> = text.lines().collect();
        assert!(
            rows.iter()
                .any(|r| r.starts_with("none/rtlab") && r.contains("NO") && r.contains("7.00 ms")),
            "{text}"
        );
        assert!(
            rows.iter()
                .any(|r| r.starts_with("inherit/rtlab") && r.contains("yes")),
            "{text}"
        );
        assert!(
            !text.contains("protect/rtlab "),
            "not measured, no row: {text}"
        );
        assert!(
            text.contains("inherit/rtlab max / none/rtlab max = 0.062x"),
            "{text}"
        );
    }
}
