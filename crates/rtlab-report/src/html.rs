//! The HTML report: one self-contained file (inline CSS and SVG, no script, no network),
//! readable on a laptop and printable. Built from any result documents.
//!
//! Sections: the machine; the verdict and the tuning actions (survey); the check table;
//! per area, HdrHistogram-style percentile curves (idle and loaded on one chart),
//! log-scale latency histograms, explained outliers over time (causes on hover, through SVG
//! `<title>`), bars for single values (lock, ipc throughput), the slack sweep; the outliers.

use rtlab_stats::result::{Outlier, ResultDoc, Series, Unit};
use rtlab_stats::{LatencyHistogram, Nanos};
use std::collections::BTreeMap;
use std::fmt::Write;

const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
const W: f64 = 720.0;
const H: f64 = 320.0;
const ML: f64 = 72.0;
const MR: f64 = 16.0;
const MT: f64 = 28.0;
const MB: f64 = 44.0;

/// HTML-escapes text.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

fn px(v: f64, lo: f64, hi: f64, a: f64, b: f64) -> f64 {
    if hi <= lo {
        return (a + b) / 2.0;
    }
    a + (v - lo) / (hi - lo) * (b - a)
}

/// A chart frame: title, axes box, tick labels; returns the SVG head and the plot area.
struct Frame {
    svg: String,
}

impl Frame {
    fn new(title: &str) -> Frame {
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg class="chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{t}"><text x="{ML}" y="18" class="title">{t}</text><rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" class="plot"/>"#,
            t = esc(title),
            pw = W - ML - MR,
            ph = H - MT - MB
        );
        Frame { svg }
    }

    fn x_tick(&mut self, x: f64, label: &str) {
        let _ = write!(
            self.svg,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{MT}" y2="{y2}" class="grid"/><text x="{x:.1}" y="{ty}" class="tick" text-anchor="middle">{l}</text>"#,
            y2 = H - MB,
            ty = H - MB + 16.0,
            l = esc(label)
        );
    }

    fn y_tick(&mut self, y: f64, label: &str) {
        let _ = write!(
            self.svg,
            r#"<line x1="{ML}" x2="{x2}" y1="{y:.1}" y2="{y:.1}" class="grid"/><text x="{tx}" y="{ty:.1}" class="tick" text-anchor="end">{l}</text>"#,
            x2 = W - MR,
            tx = ML - 6.0,
            ty = y + 4.0,
            l = esc(label)
        );
    }

    fn axis_labels(&mut self, x: &str, y: &str) {
        let _ = write!(
            self.svg,
            r#"<text x="{cx}" y="{by}" class="axis" text-anchor="middle">{x}</text><text x="14" y="{cy}" class="axis" text-anchor="middle" transform="rotate(-90 14 {cy})">{y}</text>"#,
            cx = (ML + W - MR) / 2.0,
            by = H - 6.0,
            cy = (MT + H - MB) / 2.0,
            x = esc(x),
            y = esc(y)
        );
    }

    fn legend(&mut self, names: &[String]) {
        for (i, n) in names.iter().enumerate() {
            let y = MT + 14.0 + 14.0 * i as f64;
            let _ = write!(
                self.svg,
                r#"<rect x="{x}" y="{ry}" width="10" height="10" fill="{c}"/><text x="{tx}" y="{ty}" class="legend">{n}</text>"#,
                x = ML + 10.0,
                ry = y - 9.0,
                c = PALETTE[i % PALETTE.len()],
                tx = ML + 24.0,
                ty = y,
                n = esc(n)
            );
        }
    }

    fn finish(mut self) -> String {
        self.svg.push_str("</svg>");
        self.svg
    }
}

/// Decades of latency covering `lo..hi` ns, as log10 bounds.
fn latency_decades(lo: u64, hi: u64) -> (f64, f64) {
    let a = (lo.max(1) as f64).log10().floor();
    let b = (hi.max(1) as f64).log10().ceil().max(a + 1.0);
    (a, b)
}

fn decade_label(exp: f64) -> String {
    Nanos(10f64.powf(exp).round() as u64).label()
}

fn histogram_of(s: &Series) -> Option<LatencyHistogram> {
    s.decode_histogram().and_then(Result::ok)
}

/// Percentile curves: x is 1/(1-p) on a log scale (50, 90, 99, 99.9 ...), y latency (log).
fn percentile_chart(title: &str, series: &[(&Series, LatencyHistogram)]) -> String {
    let curves: Vec<(String, Vec<(f64, u64)>)> = series
        .iter()
        .map(|(s, h)| (s.name.clone(), h.percentile_curve()))
        .collect();
    let lo = curves
        .iter()
        .flat_map(|c| c.1.iter().map(|p| p.1))
        .min()
        .unwrap_or(1);
    let hi = curves
        .iter()
        .flat_map(|c| c.1.iter().map(|p| p.1))
        .max()
        .unwrap_or(10);
    let (ya, yb) = latency_decades(lo, hi);
    let nines = |p: f64| -((1.0 - (p / 100.0)).max(1e-6)).log10();
    // As far into the tail as the largest sample count resolves (n samples: 1 - 1/n).
    let xmax = series
        .iter()
        .map(|(_, h)| (h.len().max(1) as f64).log10())
        .fold(2.0f64, f64::max)
        .ceil()
        .min(6.0);
    let mut f = Frame::new(title);
    for (i, lbl) in ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"]
        .iter()
        .enumerate()
    {
        if i as f64 <= xmax {
            f.x_tick(px(i as f64, 0.0, xmax, ML, W - MR), lbl);
        }
    }
    let mut e = ya;
    while e <= yb {
        f.y_tick(px(e, ya, yb, H - MB, MT), &decade_label(e));
        e += 1.0;
    }
    f.axis_labels("percentile", "latency");
    for (i, (name, pts)) in curves.iter().enumerate() {
        let points: Vec<String> = pts
            .iter()
            .map(|&(p, v)| {
                format!(
                    "{:.1},{:.1}",
                    px(nines(p).min(xmax), 0.0, xmax, ML, W - MR),
                    px((v.max(1) as f64).log10(), ya, yb, H - MB, MT)
                )
            })
            .collect();
        let _ = write!(
            f.svg,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.8" points="{p}"><title>{n}</title></polyline>"#,
            c = PALETTE[i % PALETTE.len()],
            p = points.join(" "),
            n = esc(name)
        );
    }
    f.legend(&curves.iter().map(|c| c.0.clone()).collect::<Vec<_>>());
    f.finish()
}

/// Log-log histogram: x latency (power-of-two bins), y samples per bin.
fn histogram_chart(title: &str, series: &[(&Series, LatencyHistogram)]) -> String {
    let bins: Vec<(String, Vec<(u64, u64)>)> = series
        .iter()
        .map(|(s, h)| (s.name.clone(), h.log2_bins()))
        .collect();
    let lo = bins
        .iter()
        .filter_map(|b| b.1.first().map(|x| x.0 / 2))
        .min()
        .unwrap_or(1);
    let hi = bins
        .iter()
        .filter_map(|b| b.1.last().map(|x| x.0))
        .max()
        .unwrap_or(10);
    let (xa, xb) = latency_decades(lo, hi);
    let cmax = bins
        .iter()
        .flat_map(|b| b.1.iter().map(|x| x.1))
        .max()
        .unwrap_or(1)
        .max(1);
    let yb = (cmax as f64).log10().ceil().max(1.0);
    let mut f = Frame::new(title);
    let mut e = xa;
    while e <= xb {
        f.x_tick(px(e, xa, xb, ML, W - MR), &decade_label(e));
        e += 1.0;
    }
    for d in 0..=(yb as u32) {
        f.y_tick(px(d as f64, 0.0, yb, H - MB, MT), &format!("1e{d}"));
    }
    f.axis_labels("latency (power-of-two bins)", "samples");
    for (i, (name, pts)) in bins.iter().enumerate() {
        let mut path = String::new();
        for &(upper, count) in pts {
            let x0 = px(((upper / 2).max(1) as f64).log10(), xa, xb, ML, W - MR);
            let x1 = px((upper.max(1) as f64).log10(), xa, xb, ML, W - MR);
            let y = if count == 0 {
                H - MB
            } else {
                px((count as f64).log10(), 0.0, yb, H - MB, MT).min(H - MB - 1.0)
            };
            let _ = write!(
                path,
                "{}{x0:.1},{y:.1} L{x1:.1},{y:.1} ",
                if path.is_empty() { "M" } else { "L" }
            );
        }
        let _ = write!(
            f.svg,
            r#"<path fill="none" stroke="{c}" stroke-width="1.6" d="{path}"><title>{n}</title></path>"#,
            c = PALETTE[i % PALETTE.len()],
            n = esc(name)
        );
    }
    f.legend(&bins.iter().map(|b| b.0.clone()).collect::<Vec<_>>());
    f.finish()
}

fn describe_causes(o: &Outlier) -> String {
    o.causes
        .iter()
        .take(4)
        .map(|c| {
            let who = c
                .task
                .clone()
                .or_else(|| c.detail.clone())
                .unwrap_or_default();
            format!("{} {} {}", Nanos(c.duration_ns), c.kind.as_str(), who)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Latency over time: the worst latency of each window per series (when the run recorded
/// a timeline), with the explained outliers marked on top (causes on hover).
fn time_chart(title: &str, timelines: &[(String, u64, Vec<u64>)], outliers: &[&Outlier]) -> String {
    let values = timelines
        .iter()
        .flat_map(|t| t.2.iter().copied())
        .chain(outliers.iter().map(|o| o.latency_ns))
        .filter(|&v| v > 0);
    let (lo, hi) = values.fold((u64::MAX, 1u64), |(a, b), v| (a.min(v), b.max(v)));
    let (ya, yb) = latency_decades(lo.min(hi), hi);
    let tmax = timelines
        .iter()
        .map(|t| t.1 as f64 * t.2.len() as f64 / 1e9)
        .chain(outliers.iter().map(|o| o.at_ns as f64 / 1e9))
        .fold(0.001f64, f64::max);
    let mut f = Frame::new(title);
    for i in 0..=4 {
        let t = tmax * i as f64 / 4.0;
        f.x_tick(px(t, 0.0, tmax, ML, W - MR), &format!("{t:.1} s"));
    }
    let mut e = ya;
    while e <= yb {
        f.y_tick(px(e, ya, yb, H - MB, MT), &decade_label(e));
        e += 1.0;
    }
    f.axis_labels(
        "time since the start of the stage",
        "worst latency per window",
    );
    let y_of = |v: u64| px((v.max(1) as f64).log10(), ya, yb, H - MB, MT);
    for (i, (name, step, maxes)) in timelines.iter().enumerate() {
        let points: Vec<String> = maxes
            .iter()
            .enumerate()
            .filter(|(_, &v)| v > 0)
            .map(|(k, &v)| {
                format!(
                    "{:.1},{:.1}",
                    px((k as f64 + 0.5) * *step as f64 / 1e9, 0.0, tmax, ML, W - MR),
                    y_of(v)
                )
            })
            .collect();
        let _ = write!(
            f.svg,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.2" points="{p}"><title>{n}: worst latency per {s}</title></polyline>"#,
            c = PALETTE[i % PALETTE.len()],
            p = points.join(" "),
            n = esc(name),
            s = Nanos(*step)
        );
    }
    for o in outliers {
        let _ = write!(
            f.svg,
            r##"<circle cx="{x:.1}" cy="{y:.1}" r="4.5" fill="none" stroke="#000" stroke-width="1.5"><title>{s} late by {l} at {t:.2} s: {why}</title></circle>"##,
            x = px(o.at_ns as f64 / 1e9, 0.0, tmax, ML, W - MR),
            y = y_of(o.latency_ns),
            s = esc(&o.series),
            l = Nanos(o.latency_ns),
            t = o.at_ns as f64 / 1e9,
            why = esc(&describe_causes(o))
        );
    }
    let mut names: Vec<String> = timelines.iter().map(|t| t.0.clone()).collect();
    if !outliers.is_empty() {
        names.push("(circles: explained outliers, hover for causes)".into());
    }
    f.legend(&names);
    f.finish()
}

fn value_label(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Ns => Nanos(v.round() as u64).to_string(),
        Unit::OpsPerSec => {
            if v >= 1e6 {
                format!("{:.2}M ops/s", v / 1e6)
            } else {
                format!("{:.0}k ops/s", v / 1e3)
            }
        }
        Unit::BytesPerSec => format!("{:.1} MB/s", v / 1e6),
        Unit::Ratio | Unit::Count => format!("{v:.3}"),
    }
}

/// Horizontal bars (linear), one per (label, value).
fn bar_chart(title: &str, bars: &[(String, f64)], unit: Unit) -> String {
    let h = MT + 22.0 * bars.len() as f64 + 16.0;
    let label_w = 300.0;
    let max = bars.iter().map(|b| b.1).fold(0.0f64, f64::max).max(1e-12);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img" aria-label="{t}"><text x="8" y="18" class="title">{t}</text>"#,
        t = esc(title)
    );
    for (i, (label, v)) in bars.iter().enumerate() {
        let y = MT + 22.0 * i as f64;
        let w = (W - label_w - 120.0) * v / max;
        let _ = write!(
            svg,
            r#"<text x="{lx}" y="{ty}" class="tick" text-anchor="end">{l}</text><rect x="{label_w}" y="{y}" width="{w:.1}" height="16" fill="{c}"><title>{l}: {vl}</title></rect><text x="{vx:.1}" y="{ty}" class="tick">{vl}</text>"#,
            lx = label_w - 8.0,
            ty = y + 12.0,
            l = esc(label),
            c = PALETTE[i % PALETTE.len()],
            vx = label_w + w + 6.0,
            vl = esc(&value_label(*v, unit))
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The area a series belongs to (its chart group).
fn area(command: &str, name: &str) -> String {
    use rtlab_stats::area::{area_of, command_word};
    area_of(command, name).map_or_else(|| command_word(command).to_string(), |a| a.to_string())
}

/// The whole report.
pub fn render(docs: &[ResultDoc]) -> String {
    let mut body = String::new();
    let mut charts = 0usize;
    for doc in docs {
        let _ = write!(
            body,
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
        );
        // Verdict and actions (survey).
        let rows = doc.verdict.survey_rows();
        if !rows.is_empty() {
            body.push_str("<h3>Verdict</h3><table><tr><th>area</th><th>reading</th></tr>");
            for r in &rows {
                let _ = write!(
                    body,
                    "<tr><td>{}</td><td>{}</td></tr>",
                    esc(r.area.name()),
                    esc(&r.reading)
                );
            }
            body.push_str("</table>");
        }
        let actions = doc.verdict.top_actions();
        if !actions.is_empty() {
            body.push_str("<h3>The tuning actions that matter most here</h3><ol>");
            for a in &actions {
                let _ = write!(
                    body,
                    "<li><code>{}</code> <small>({})</small></li>",
                    esc(&a.fix),
                    esc(&a.check)
                );
            }
            body.push_str("</ol>");
        }
        // Check table.
        let checks: Vec<&Series> = doc
            .series
            .iter()
            .filter(|s| s.name.starts_with("check/"))
            .collect();
        if !checks.is_empty() {
            body.push_str("<h3>Check</h3><table><tr><th>check</th><th>status</th><th>found</th><th>fix</th></tr>");
            for s in &checks {
                let f = rtlab_stats::details::CheckFinding::of(s);
                // The status names a CSS class: only the known ones (a result file is input).
                let st = Some(f.status.as_str())
                    .filter(|st| ["ok", "warn", "fail", "skipped"].contains(st))
                    .unwrap_or("unknown");
                let _ = write!(
                    body,
                    "<tr class=\"{st}\"><td>{}</td><td>{st}</td><td>{}</td><td>{}<small>{}</small></td></tr>",
                    esc(s.name.trim_start_matches("check/")),
                    esc(&f.value),
                    match f.fix.as_str() {
                        "" => String::new(),
                        fix => format!("<code>{}</code><br>", esc(fix)),
                    },
                    esc(&f.why)
                );
            }
            body.push_str("</table>");
        }
        // Per area: distributions and values.
        let mut areas: BTreeMap<String, (Vec<&Series>, Vec<&Series>)> = BTreeMap::new();
        for s in doc.series.iter().filter(|s| !s.name.starts_with("check/")) {
            let e = areas.entry(area(&doc.command, &s.name)).or_default();
            if s.is_distribution() {
                e.0.push(s);
            } else {
                e.1.push(s);
            }
        }
        // The areas in the order a reader wants them: wakeups first.
        let order = ["wakeup", "net", "ipc", "lock", "invert", "slack", "mmap"];
        let rank = |a: &str| order.iter().position(|o| *o == a).unwrap_or(order.len());
        let mut areas: Vec<_> = areas.into_iter().collect();
        areas.sort_by_key(|(name, _)| (rank(name), name.clone()));
        for (name, (dists, values)) in &areas {
            let _ = write!(body, "<h3>{}</h3><div class=\"charts\">", esc(name));
            let decoded: Vec<(&Series, LatencyHistogram)> = dists
                .iter()
                .filter_map(|s| histogram_of(s).map(|h| (*s, h)))
                .filter(|(_, h)| !h.is_empty())
                .collect();
            for (i, chunk) in decoded.chunks(8).enumerate() {
                let suffix = if decoded.len() > 8 {
                    format!(" ({})", i + 1)
                } else {
                    String::new()
                };
                body.push_str(&percentile_chart(
                    &format!("{name}: latency by percentile{suffix}"),
                    chunk,
                ));
                charts += 1;
                if name == "wakeup" || name == "net" || decoded.len() <= 4 {
                    body.push_str(&histogram_chart(
                        &format!("{name}: latency histogram{suffix}"),
                        chunk,
                    ));
                    charts += 1;
                }
            }
            let outs: Vec<&Outlier> = doc
                .outliers
                .iter()
                .filter(|o| area(&doc.command, &o.series) == *name)
                .collect();
            let timelines: Vec<(String, u64, Vec<u64>)> = dists
                .iter()
                .filter_map(|s| {
                    let t = rtlab_stats::details::Timeline::of(s)?;
                    Some((s.name.clone(), t.step_ns, t.max_ns))
                })
                .take(8)
                .collect();
            if !outs.is_empty() || !timelines.is_empty() {
                body.push_str(&time_chart(
                    &format!("{name}: latency over time"),
                    &timelines,
                    &outs,
                ));
                charts += 1;
            }
            if name == "slack" {
                let bars: Vec<(String, f64)> = dists
                    .iter()
                    .filter_map(|s| Some((s.name.trim_start_matches("slack/").to_string(), s.p50?)))
                    .collect();
                if !bars.is_empty() {
                    body.push_str(&bar_chart(
                        "slack: oversleep p50 by mechanism / sleep / slack",
                        &bars,
                        Unit::Ns,
                    ));
                    charts += 1;
                }
            }
            if name == "ipc" || name == "net" {
                let bars: Vec<(String, f64)> = dists
                    .iter()
                    .filter(|s| s.metric == "rtt")
                    .filter_map(|s| Some((s.name.clone(), s.p50?)))
                    .collect();
                if bars.len() > 1 {
                    body.push_str(&bar_chart(
                        &format!("{name}: round trip p50"),
                        &bars,
                        Unit::Ns,
                    ));
                    charts += 1;
                }
            }
            let mut by_metric: BTreeMap<(&str, String), Vec<(String, f64)>> = BTreeMap::new();
            for s in values {
                if let Some(v) = s.value {
                    by_metric
                        .entry((s.metric.as_str(), format!("{:?}", s.unit)))
                        .or_default()
                        .push((s.name.clone(), v));
                }
            }
            for ((metric, _), bars) in &by_metric {
                let unit = values
                    .iter()
                    .find(|s| s.metric == *metric)
                    .map_or(Unit::Ns, |s| s.unit);
                body.push_str(&bar_chart(&format!("{name}: {metric}"), bars, unit));
                charts += 1;
            }
            body.push_str("</div>");
            // The numbers behind the charts.
            if !dists.is_empty() {
                body.push_str("<table class=\"num\"><tr><th>series</th><th>count</th><th>missed</th><th>min</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th></tr>");
                for s in dists {
                    let n = |v: Option<f64>| v.map_or("-".into(), |v| Nanos(v as u64).to_string());
                    let _ = write!(
                        body,
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
                body.push_str("</table>");
            }
        }
        if !doc.outliers.is_empty() {
            body.push_str("<h3>Outliers, worst first</h3><table><tr><th>series</th><th>at</th><th>late by</th><th>causes</th></tr>");
            let mut outs: Vec<&Outlier> = doc.outliers.iter().collect();
            outs.sort_by_key(|o| std::cmp::Reverse(o.latency_ns));
            for o in outs.iter().take(50) {
                let _ = write!(
                    body,
                    "<tr><td>{}</td><td>{:.2} s</td><td>{}</td><td>{}</td></tr>",
                    esc(&o.series),
                    o.at_ns as f64 / 1e9,
                    Nanos(o.latency_ns),
                    esc(&describe_causes(o))
                );
            }
            body.push_str("</table>");
        }
        if !doc.warnings.is_empty() {
            body.push_str("<h3>Warnings</h3><ul>");
            for w in &doc.warnings {
                let _ = write!(body, "<li>{}</li>", esc(w));
            }
            body.push_str("</ul>");
        }
        body.push_str("</section>");
    }
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
table.num td{{text-align:right}} table.num td:first-child{{text-align:left}}
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
        assert_eq!(area("survey", "wakeup-idle/thread0"), "wakeup");
        assert_eq!(area("survey", "ipc/rtlab-shm/rtt"), "ipc");
        assert_eq!(area("wakeup", "thread0"), "wakeup");
        assert_eq!(area("net run", "1KiB@10ms/rtt"), "net");
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

    #[test]
    fn charts_have_their_data() {
        let mut h = LatencyHistogram::new();
        for i in 0..10_000u64 {
            h.record(Nanos(5_000 + (i * 37) % 20_000));
        }
        h.record(Nanos(2_000_000));
        let s = Series::distribution("thread0", "wakeup_latency", &h).unwrap();
        let pc = percentile_chart("t", &[(&s, h.clone())]);
        assert!(pc.contains("<polyline") && pc.contains("thread0"));
        assert!(
            pc.contains(">2.0ms<") || pc.contains(">10ms<") || pc.contains("ms<"),
            "{pc}"
        );
        let hc = histogram_chart("t", &[(&s, h.clone())]);
        assert!(hc.contains("<path"));
        let bins = h.log2_bins();
        assert_eq!(bins.iter().map(|b| b.1).sum::<u64>(), 10_001);
        let curve = h.percentile_curve();
        assert_eq!(curve.last().unwrap(), &(100.0, 2_000_000));
    }
}
