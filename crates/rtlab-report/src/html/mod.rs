//! The HTML report: one self-contained file (inline CSS and SVG, no script, no network),
//! readable on a laptop and printable. Built from any result documents.
//!
//! Sections: the machine; the verdict and the tuning actions (survey); the check table;
//! per area, HdrHistogram-style percentile curves (idle and loaded on one chart),
//! log-scale latency histograms, explained outliers over time (causes on hover, through SVG
//! `<title>`), bars for single values (lock, ipc throughput), the slack sweep; the outliers.

use rtlab_stats::area::{area_of, command_word, Area, SurveyStage};
use rtlab_stats::details::{CheckFinding, CheckStatus, Timeline};
use rtlab_stats::result::{Outlier, ResultDoc, Series, Unit};
use rtlab_stats::{LatencyHistogram, Nanos};
use std::collections::BTreeMap;
use std::fmt::Write;

mod chart;
use crate::cause::causes_text;
use chart::{bar_chart, histogram_chart, histogram_of, percentile_chart, time_chart, value_label};

/// HTML-escapes text.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// The areas in the order a reader wants them: wakeups first; the others after these, by name.
const AREA_ORDER: [Area; 7] = [
    Area::Wakeup,
    Area::Net,
    Area::Ipc,
    Area::Lock,
    Area::Invert,
    Area::Slack,
    Area::Mmap,
];

/// The area a series belongs to, and its section's name: the survey's area, else the
/// command's (`watch`).
fn area(command: &str, name: &str) -> (Option<Area>, String) {
    match area_of(command, name) {
        Some(area) => (Some(area), area.name().to_string()),
        None => (None, command_word(command).to_string()),
    }
}

/// A `check/<id>` series: the check table's, not an area's.
fn is_check(s: &Series) -> bool {
    check_id(s).is_some()
}

fn check_id(s: &Series) -> Option<&str> {
    s.name
        .strip_prefix(Area::Check.name())
        .and_then(|rest| rest.strip_prefix('/'))
}

/// The whole report.
pub fn render(docs: &[ResultDoc]) -> String {
    let body: String = docs.iter().map(document).collect();
    page(&body)
}

/// One document's section: the machine, the survey's verdict and actions, the check table,
/// each area, the outliers and the warnings.
fn document(doc: &ResultDoc) -> String {
    let mut body = facts(doc);
    body.push_str(&verdict(doc));
    body.push_str(&actions(doc));
    body.push_str(&checks(doc));
    for group in groups(doc) {
        body.push_str(&group.section(doc));
    }
    body.push_str(&outliers(doc));
    body.push_str(&warnings(doc));
    body.push_str("</section>");
    body
}

/// The heading and the machine.
fn facts(doc: &ResultDoc) -> String {
    format!(
        "<section><h2>rtlab {} <small>{} &middot; {:.0} s</small></h2><p class=\"facts\">kernel {} &middot; {} CPUs &middot; preempt model {} &middot; clocksource {} &middot; {}{}</p>",
        esc(&doc.command),
        esc(&doc.started_at),
        doc.duration_s,
        esc(&doc.system.kernel),
        doc.system.cpus,
        esc(&doc.system.preempt_model),
        esc(&doc.system.clocksource),
        if doc.system.virtualized { "virtual machine" } else { "bare metal" },
        if doc.verdict.interrupted { " &middot; <b>interrupted</b>" } else { "" }
    )
}

/// The survey's reading per area.
fn verdict(doc: &ResultDoc) -> String {
    let rows = doc.verdict.survey_rows();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = "<h3>Verdict</h3><table><tr><th>area</th><th>reading</th></tr>".to_string();
    for r in &rows {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td></tr>",
            esc(r.area.name()),
            esc(&r.reading)
        );
    }
    out.push_str("</table>");
    out
}

/// The survey's tuning actions.
fn actions(doc: &ResultDoc) -> String {
    let actions = doc.verdict.top_actions();
    if actions.is_empty() {
        return String::new();
    }
    let mut out = "<h3>The tuning actions that matter most here</h3><ol>".to_string();
    for a in &actions {
        let _ = write!(
            out,
            "<li><code>{}</code> <small>({})</small></li>",
            esc(&a.fix),
            esc(&a.check)
        );
    }
    out.push_str("</ol>");
    out
}

/// The check table.
fn checks(doc: &ResultDoc) -> String {
    let checks: Vec<(&str, CheckFinding)> = doc
        .series
        .iter()
        .filter_map(|s| Some((check_id(s)?, CheckFinding::of(s))))
        .collect();
    if checks.is_empty() {
        return String::new();
    }
    let mut out =
        "<h3>Check</h3><table><tr><th>check</th><th>status</th><th>found</th><th>fix</th></tr>"
            .to_string();
    for (id, f) in &checks {
        // The status names a CSS class: a status this version does not know is "unknown".
        let st = f.status.map_or("unknown", CheckStatus::as_str);
        let _ = write!(
            out,
            "<tr class=\"{st}\"><td>{}</td><td>{st}</td><td>{}</td><td>{}<small>{}</small></td></tr>",
            esc(id),
            esc(&f.value),
            match f.fix.as_str() {
                "" => String::new(),
                fix => format!("<code>{}</code><br>", esc(fix)),
            },
            esc(&f.why)
        );
    }
    out.push_str("</table>");
    out
}

/// The series of one area of a document.
struct Group<'a> {
    /// The section's name (the area's, else the command's).
    name: String,
    area: Option<Area>,
    distributions: Vec<&'a Series>,
    values: Vec<&'a Series>,
}

/// The document's series by area, in [`AREA_ORDER`].
fn groups(doc: &ResultDoc) -> Vec<Group<'_>> {
    let mut by_name: BTreeMap<String, Group> = BTreeMap::new();
    for s in doc.series.iter().filter(|s| !is_check(s)) {
        let (area, name) = area(&doc.command, &s.name);
        let group = by_name.entry(name.clone()).or_insert_with(|| Group {
            name,
            area,
            distributions: Vec::new(),
            values: Vec::new(),
        });
        if s.is_distribution() {
            group.distributions.push(s);
        } else {
            group.values.push(s);
        }
    }
    let rank = |g: &Group| {
        g.area
            .and_then(|a| AREA_ORDER.iter().position(|o| *o == a))
            .unwrap_or(AREA_ORDER.len())
    };
    let mut groups: Vec<Group> = by_name.into_values().collect();
    groups.sort_by_key(|g| rank(g));
    groups
}

/// What an area shows beside its percentile curves, latency over time and values.
#[derive(Debug, Default, Clone, Copy)]
struct AreaCharts {
    /// A histogram beside every percentile chart (else only for up to four series).
    histograms: bool,
    /// Bars of the distributions' medians.
    medians: Option<Medians>,
}

/// Which medians an area compares.
#[derive(Debug, Clone, Copy)]
enum Medians {
    /// The slack sweep's oversleep, per cell.
    Oversleep,
    /// Round trips, per mechanism or stream.
    RoundTrip,
}

impl AreaCharts {
    fn of(area: Option<Area>) -> AreaCharts {
        let (histograms, medians) = match area {
            Some(Area::Wakeup) => (true, None),
            Some(Area::Net) => (true, Some(Medians::RoundTrip)),
            Some(Area::Ipc) => (false, Some(Medians::RoundTrip)),
            Some(Area::Slack) => (false, Some(Medians::Oversleep)),
            _ => (false, None),
        };
        AreaCharts {
            histograms,
            medians,
        }
    }
}

/// The metric of a round trip's distribution.
const ROUND_TRIP: &str = "rtt";

impl Group<'_> {
    /// The area's heading, charts and numbers.
    fn section(&self, doc: &ResultDoc) -> String {
        let charts = AreaCharts::of(self.area);
        let mut out = format!("<h3>{}</h3><div class=\"charts\">", esc(&self.name));
        out.push_str(&self.distribution_charts(charts.histograms));
        out.push_str(&self.time_chart(doc));
        if let Some(medians) = charts.medians {
            out.push_str(&self.median_bars(medians));
        }
        let (bars, single) = self.value_bars();
        out.push_str(&bars);
        out.push_str("</div>");
        out.push_str(&self.numbers());
        out.push_str(&single);
        out
    }

    /// The distributions to draw, each once: a series whose histogram is an earlier one's
    /// (a name's series over its one thread, the thread's own) joins its label ("rt-loop/timer
    /// = rt-loop/1920/timer"), the shorter name first. The numbers' table keeps them all.
    fn distinct(&self) -> Vec<(String, &Series)> {
        let mut out: Vec<(String, &Series)> = Vec::new();
        let mut by_len: Vec<&Series> = self.distributions.clone();
        by_len.sort_by_key(|s| s.name.len());
        for s in by_len {
            match out
                .iter_mut()
                .find(|(_, k)| s.histogram.is_some() && k.histogram == s.histogram)
            {
                Some((label, _)) => *label = format!("{label} = {}", s.name),
                None => out.push((s.name.clone(), s)),
            }
        }
        // Back in the document's order.
        let at = |s: &Series| self.distributions.iter().position(|d| std::ptr::eq(*d, s));
        out.sort_by_key(|(_, s)| at(s));
        out
    }

    /// Percentile curves, eight series a chart, each with its histogram where asked.
    fn distribution_charts(&self, histograms: bool) -> String {
        let name = &self.name;
        let decoded: Vec<(String, LatencyHistogram)> = self
            .distinct()
            .into_iter()
            .filter_map(|(label, s)| histogram_of(s).map(|h| (label, h)))
            .filter(|(_, h)| !h.is_empty())
            .collect();
        let mut out = String::new();
        for (i, chunk) in decoded.chunks(8).enumerate() {
            let suffix = if decoded.len() > 8 {
                format!(" ({})", i + 1)
            } else {
                String::new()
            };
            out.push_str(&percentile_chart(
                &format!("{name}: latency by percentile{suffix}"),
                chunk,
            ));
            if histograms || decoded.len() <= 4 {
                out.push_str(&histogram_chart(
                    &format!("{name}: latency histogram{suffix}"),
                    chunk,
                ));
            }
        }
        out
    }

    /// Latency over time, when the area has timelines or explained outliers.
    fn time_chart(&self, doc: &ResultDoc) -> String {
        let outs: Vec<&Outlier> = doc
            .outliers
            .iter()
            .filter(|o| area(&doc.command, &o.series).1 == self.name)
            .collect();
        // The eight with the most delays (a shell's many short-lived helpers would
        // otherwise take the places of the loop that matters), in the document's order.
        let mut chosen: Vec<(usize, u64, (String, &Series))> = (self.distinct().into_iter())
            .enumerate()
            .filter(|(_, (_, s))| Timeline::of(s).is_some())
            .map(|(i, (label, s))| (i, s.count.unwrap_or(0), (label, s)))
            .collect();
        chosen.sort_by_key(|&(i, count, _)| (std::cmp::Reverse(count), i));
        chosen.truncate(8);
        chosen.sort_by_key(|&(i, ..)| i);
        let timelines: Vec<(String, u64, Vec<u64>)> = (chosen.into_iter())
            .filter_map(|(.., (label, s))| {
                let t = Timeline::of(s)?;
                Some((label, t.step_ns, t.max_ns))
            })
            .collect();
        if outs.is_empty() && timelines.is_empty() {
            return String::new();
        }
        time_chart(
            &format!("{}: latency over time", self.name),
            &timelines,
            &outs,
        )
    }

    /// The medians the area compares.
    fn median_bars(&self, medians: Medians) -> String {
        let dists = self.distributions.iter();
        match medians {
            Medians::Oversleep => {
                let prefix = SurveyStage::Slack.prefix();
                let bars: Vec<(String, f64)> = dists
                    .filter_map(|s| Some((s.name.trim_start_matches(&prefix).to_string(), s.p50?)))
                    .collect();
                if bars.is_empty() {
                    return String::new();
                }
                bar_chart(
                    "slack: oversleep p50 by mechanism / sleep / slack",
                    &bars,
                    Unit::Ns,
                )
            }
            Medians::RoundTrip => {
                let bars: Vec<(String, f64)> = dists
                    .filter(|s| s.metric == ROUND_TRIP)
                    .filter_map(|s| Some((s.name.clone(), s.p50?)))
                    .collect();
                if bars.len() < 2 {
                    return String::new();
                }
                bar_chart(&format!("{}: round trip p50", self.name), &bars, Unit::Ns)
            }
        }
    }

    /// One bar chart per metric of two values or more, and a table of the metrics of one.
    fn value_bars(&self) -> (String, String) {
        let mut by_metric: BTreeMap<(&str, String), Vec<(String, f64)>> = BTreeMap::new();
        for s in &self.values {
            if let Some(v) = s.value {
                by_metric
                    .entry((s.metric.as_str(), format!("{:?}", s.unit)))
                    .or_default()
                    .push((s.name.clone(), v));
            }
        }
        let mut out = String::new();
        let mut single: Vec<(String, String, String)> = Vec::new();
        for ((metric, _), bars) in &by_metric {
            let unit = self
                .values
                .iter()
                .find(|s| s.metric == *metric)
                .map_or(Unit::Ns, |s| s.unit);
            match bars.as_slice() {
                // One number is said, not drawn.
                [(name, v)] => {
                    single.push((name.clone(), metric.to_string(), value_label(*v, unit)))
                }
                _ => out.push_str(&bar_chart(&format!("{}: {metric}", self.name), bars, unit)),
            }
        }
        let mut table = String::new();
        if !single.is_empty() {
            table.push_str(
                "<table class=\"num\"><tr><th>series</th><th>metric</th><th>value</th></tr>",
            );
            for (name, metric, v) in single {
                let _ = write!(
                    table,
                    "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&name),
                    esc(&metric),
                    esc(&v)
                );
            }
            table.push_str("</table>");
        }
        (out, table)
    }

    /// The numbers behind the charts.
    fn numbers(&self) -> String {
        if self.distributions.is_empty() {
            return String::new();
        }
        let mut out = "<table class=\"num\"><tr><th>series</th><th>count</th><th>missed</th><th>min</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th></tr>".to_string();
        let n = |v: Option<f64>| v.map_or("-".into(), |v| Nanos(v as u64).to_string());
        for s in &self.distributions {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&s.name),
                s.count.unwrap_or(0),
                s.missed.unwrap_or(0),
                n(s.min),
                n(s.p50),
                n(s.p99),
                n(s.p999),
                n(s.max)
            );
        }
        out.push_str("</table>");
        out
    }
}

/// The worst 50 outliers and their causes.
fn outliers(doc: &ResultDoc) -> String {
    if doc.outliers.is_empty() {
        return String::new();
    }
    let mut out = "<h3>Outliers, worst first</h3><table><tr><th>series</th><th>at</th><th>late by</th><th>causes</th></tr>".to_string();
    let mut outs: Vec<&Outlier> = doc.outliers.iter().collect();
    outs.sort_by_key(|o| std::cmp::Reverse(o.latency_ns));
    for o in outs.iter().take(50) {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{:.2} s</td><td>{}</td><td>{}</td></tr>",
            esc(&o.series),
            o.at_ns as f64 / 1e9,
            Nanos(o.latency_ns),
            esc(&causes_text(o.latency_ns, &o.causes))
        );
    }
    out.push_str("</table>");
    out
}

fn warnings(doc: &ResultDoc) -> String {
    if doc.warnings.is_empty() {
        return String::new();
    }
    let mut out = "<h3>Warnings</h3><ul>".to_string();
    for w in &doc.warnings {
        let _ = write!(out, "<li>{}</li>", esc(w));
    }
    out.push_str("</ul>");
    out
}

/// The page around the documents' sections: head, style, introduction.
fn page(body: &str) -> String {
    let charts = chart_count(body);
    format!(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="rtlab {version}"><meta name="rtlab-charts" content="{charts}">
<title>rtlab report</title>
<style>
body{{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1500px;padding:16px 24px;color:#222}}
h1{{font-size:22px}} h2{{font-size:19px;border-bottom:1px solid #ccc;padding-bottom:4px}} h3{{font-size:16px;margin-top:22px}}
small{{color:#666;font-weight:normal}} .facts{{color:#444}}
table{{border-collapse:collapse;margin:8px 0 14px}} td,th{{border:1px solid #ddd;padding:3px 8px;vertical-align:top;text-align:left}}
table.num td{{text-align:right;white-space:nowrap}} table.num td:first-child{{text-align:left;white-space:normal;overflow-wrap:anywhere}}
tr.fail td:nth-child(2){{color:#b00;font-weight:bold}} tr.warn td:nth-child(2){{color:#b60}} tr.ok td:nth-child(2){{color:#070}}
code{{font-size:12px;background:#f4f4f4;padding:1px 3px}}
.charts{{display:flex;flex-wrap:wrap;gap:12px}}
svg.chart{{max-width:100%;height:auto;background:#fff;border:1px solid #e4e4e4}}
svg .title{{font-size:13px;font-weight:600}} svg .tick{{font-size:10.5px;fill:#444}} svg .axis{{font-size:11px;fill:#333}}
svg .legend{{font-size:11px}} svg .plot{{fill:none;stroke:#999}} svg .grid{{stroke:#eee}}
@media print{{body{{max-width:none;padding:0}} .charts{{display:block}} svg.chart{{page-break-inside:avoid;width:100%}}}}
</style></head><body>
<h1>rtlab report</h1>
<p>Worst-case latency on this machine: every distribution as percentile curves (the tail is what matters), histograms, the explained outliers, and the settings to change. Generated by rtlab {version}; self-contained, no scripts.</p>
{body}
</body></html>
"#,
        version = env!("CARGO_PKG_VERSION"),
    )
}

/// Charts in a rendered report (from its metadata).
pub fn chart_count(html: &str) -> usize {
    html.matches("<svg class=\"chart\"").count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_areas() {
        assert_eq!(esc("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
        assert_eq!(area("survey", "wakeup-idle/thread0").1, "wakeup");
        assert_eq!(area("survey", "ipc/rtlab-shm/rtt").1, "ipc");
        assert_eq!(area("wakeup", "thread0").1, "wakeup");
        assert_eq!(area("net run", "1KiB@10ms/rtt").1, "net");
        assert_eq!(area("watch", "cyclictest/wakeup"), (None, "watch".into()));
    }

    /// A document with every kind of string the renderer shows: series of both kinds, a check
    /// row, survey readings and actions, outliers with causes, warnings.
    fn full_document() -> serde_json::Value {
        use rtlab_stats::result::Unit;
        let mut h = LatencyHistogram::new();
        for i in 0..1000u64 {
            h.record(Nanos(5_000 + i * 10));
        }
        let dist = Series::distribution("wakeup-idle/thread0", "wakeup_latency", &h)
            .unwrap()
            .with_config(
                "timeline",
                serde_json::json!({"step_ns": 1000, "max_ns": [1, 2]}),
            );
        let value = Series::value("lock/pi/uncontended", "lock_unlock", Unit::Ns, 9.0);
        let check = Series::value("check/preempt", "check", Unit::Count, 1.0)
            .with_config("status", "warn")
            .with_config("value", "none")
            .with_config("fix", "preempt=full")
            .with_config("why", "seed 000");
        serde_json::json!({
            "schema_version": 1,
            "tool": {"name": "rtlab", "version": "0.1.0"},
            "command": "survey",
            "argv": ["rtlab", "survey"],
            "started_at": "2026-11-22T10:00:00Z",
            "duration_s": 1.0,
            "system": {"kernel": "6.1", "cpus": 2, "preempt_model": "none", "clocksource": "tsc",
                       "virtualized": true,
                       "privileges": {"rt_sched": true, "mlock": true, "tracefs": true}},
            "load": [{"spec": "cpu"}],
            "warnings": ["a warning"],
            "series": [dist, value, check],
            "outliers": [{"series": "wakeup-idle/thread0", "at_ns": 500, "latency_ns": 900,
                          "causes": [{"kind": "preemption", "duration_ns": 800, "task": "hog",
                                      "pid": 1, "prio": 99, "detail": "a detail"}]}],
            "verdict": {"interrupted": false,
                        "survey": [{"area": "wakeup", "reading": "fine"}],
                        "top_actions": [{"fix": "isolcpus=1", "check": "isolation"}]}
        })
    }

    #[test]
    fn areas_come_in_the_readers_order_and_the_checks_in_their_table() {
        let doc: ResultDoc = serde_json::from_value(full_document()).unwrap();
        let names: Vec<String> = groups(&doc).into_iter().map(|g| g.name).collect();
        assert_eq!(names, ["wakeup", "lock"]);
        let html = render(&[doc]);
        assert!(
            html.contains("<tr class=\"warn\"><td>preempt</td>"),
            "{html}"
        );
    }

    #[test]
    fn a_thread_and_its_names_series_are_one_curve_and_one_number_is_a_cell() {
        let mut doc = full_document();
        let dist = doc["series"][0].clone();
        let mut same = dist.clone();
        same["name"] = "wakeup-idle/1234/thread0".into();
        let mut other = dist.clone();
        let mut h = LatencyHistogram::new();
        h.record(Nanos(70_000));
        other["name"] = "wakeup-idle/thread1".into();
        other["histogram"] = serde_json::to_value(
            Series::distribution("x", "wakeup_latency", &h)
                .unwrap()
                .histogram,
        )
        .unwrap();
        let series = doc["series"].as_array_mut().unwrap();
        series.push(same);
        series.push(other);
        let html = render(&[serde_json::from_value(doc).unwrap()]);
        // One curve each in the percentile chart: the duplicate joins the label.
        let chart = &html[html.find("latency by percentile").unwrap()..];
        let chart = &chart[..chart.find("</svg>").unwrap()];
        assert_eq!(chart.matches("<polyline").count(), 2, "{chart}");
        assert!(chart.contains("wakeup-idle/thread0 = wakeup-idle/1234/thread0"));
        // The numbers keep all three.
        for name in [
            "wakeup-idle/thread0",
            "wakeup-idle/1234/thread0",
            "wakeup-idle/thread1",
        ] {
            assert!(html.contains(&format!("<tr><td>{name}</td><td>")), "{name}");
        }
        // The lock area's one value: a table's cell, no chart.
        assert!(!html.contains("lock: lock_unlock"), "a chart of one bar");
        assert!(html.contains("<td>lock/pi/uncontended</td><td>lock_unlock</td>"));
    }

    #[test]
    fn the_time_chart_draws_the_series_with_most_delays_and_a_lone_window_as_a_dot() {
        let mut doc = full_document();
        let dist = doc["series"][0].clone();
        let series = doc["series"].as_array_mut().unwrap();
        // Nine short-lived helpers of two delays each (a shell's), one window each, before
        // the loop with a thousand: the loop's line is drawn, the last two helpers are not.
        for i in 0..9 {
            let mut helper = dist.clone();
            helper["name"] = format!("wakeup-idle/helper{i}").into();
            helper["count"] = 2.into();
            helper["histogram"] = serde_json::Value::Null;
            helper["config"]["timeline"] = serde_json::json!({"step_ns": 1000, "max_ns": [7]});
            series.insert(i, helper);
        }
        let html = render(&[serde_json::from_value(doc).unwrap()]);
        let chart = &html[html.find("latency over time").unwrap()..];
        let chart = &chart[..chart.find("</svg>").unwrap()];
        assert!(
            chart.contains("wakeup-idle/thread0: worst latency per"),
            "{chart}"
        );
        assert_eq!(chart.matches("<polyline").count(), 1, "{chart}");
        let dots = chart.matches("<circle").count();
        // Seven helpers' dots, the outlier's circle and its legend's.
        assert_eq!(dots, 7 + 2, "{chart}");
        assert!(chart.contains("helper6: worst") && !chart.contains("helper7: worst"));
    }

    #[test]
    fn charts_are_chosen_by_area() {
        let of = AreaCharts::of;
        assert!(of(Some(Area::Wakeup)).histograms && of(Some(Area::Net)).histograms);
        assert!(!of(Some(Area::Ipc)).histograms && !of(None).histograms);
        assert!(matches!(
            of(Some(Area::Net)).medians,
            Some(Medians::RoundTrip)
        ));
        assert!(matches!(
            of(Some(Area::Ipc)).medians,
            Some(Medians::RoundTrip)
        ));
        assert!(matches!(
            of(Some(Area::Slack)).medians,
            Some(Medians::Oversleep)
        ));
        for area in [
            Area::Wakeup,
            Area::Lock,
            Area::Invert,
            Area::Mmap,
            Area::Noise,
        ] {
            assert!(of(Some(area)).medians.is_none(), "{area}");
        }
    }

    /// Paths to every string in `v`.
    fn string_paths(v: &serde_json::Value, at: String, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(_) => out.push(at),
            serde_json::Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    string_paths(x, format!("{at}/{i}"), out);
                }
            }
            serde_json::Value::Object(o) => {
                for (k, x) in o {
                    string_paths(x, format!("{at}/{k}"), out);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn markup_in_any_string_of_a_result_file_is_shown_as_text() {
        // Regression (hardening #4): a check's status went unescaped into an attribute and a
        // cell, and a crafted result file produced a live <script> in the report.
        const EVIL: &str = "x\"'><script>alert(1)</script><img src=x onerror=alert(2)>";
        let base = full_document();
        let mut paths = Vec::new();
        string_paths(&base, String::new(), &mut paths);
        assert!(paths.len() > 30, "{paths:?}");
        let mut rendered = 0;
        for path in &paths {
            let mut doc = base.clone();
            *doc.pointer_mut(path).unwrap() = serde_json::Value::String(EVIL.into());
            // Strings the format constrains (units, cause kinds, the histogram) are refused
            // by the reader before rendering; every other one reaches the page.
            let Ok(parsed) = serde_json::from_value::<ResultDoc>(doc) else {
                continue;
            };
            let html = render(&[parsed]);
            rendered += 1;
            for raw in ["<script", "<img", "'>", "\"'"] {
                assert!(!html.contains(raw), "{path}: {raw} got through");
            }
        }
        assert!(
            rendered * 10 >= paths.len() * 8,
            "{rendered} of {}",
            paths.len()
        );
    }
}
