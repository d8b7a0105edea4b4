//! The report's SVG charts: percentile curves, histograms, latency over time and bars.

use super::esc;
use crate::cause::causes_text;
use rtlab_stats::result::{Outlier, Series, Unit};
use rtlab_stats::{LatencyHistogram, Nanos};
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

fn px(v: f64, lo: f64, hi: f64, a: f64, b: f64) -> f64 {
    if hi <= lo {
        return (a + b) / 2.0;
    }
    a + (v - lo) / (hi - lo) * (b - a)
}

/// How a legend entry is drawn.
#[derive(Debug, Clone, Copy)]
enum Marker {
    /// A square of the `i`-th palette colour (a curve or a bar).
    Swatch(usize),
    /// A black circle (the explained outliers).
    Circle,
}

/// A chart frame: title, axes box, tick labels, and a legend below the plot that flows
/// across the width in as many rows as it needs (never over the curves).
struct Frame {
    title: String,
    svg: String,
    legend: Vec<(String, Marker)>,
}

/// Legend rows' height, the legend's font size, and the space between two entries.
const LEGEND_ROW: f64 = 16.0;
const LEGEND_FONT: f64 = 11.0;
const LEGEND_GAP: f64 = 12.0;

/// How wide `text` is drawn in the legend's font, in pixels: the advance widths of DejaVu
/// Sans (Linux browsers' usual sans-serif, and wider than the others) by class of character,
/// each class at its widest, so that an entry never runs into the next ("mmap/private/mmap"
/// is half as wide again as "illicit/little/fill").
fn legend_text_width(text: &str) -> f64 {
    let em: f64 = text
        .chars()
        .map(|c| match c {
            'i' | 'j' | 'l' | 'I' | '\'' | '|' => 0.30,
            ' ' | '.' | ',' | ':' | ';' | '/' | '!' => 0.34,
            'f' | 't' | 'r' | '(' | ')' | '[' | ']' | '-' => 0.42,
            'm' | 'W' | '@' | '%' => 1.0,
            'w' | 'M' => 0.87,
            'a'..='z' | '0'..='9' | '_' | '=' | '+' | '?' | '<' | '>' | '#' | '$' => 0.64,
            'A'..='Z' | '&' => 0.78,
            _ => 1.0,
        })
        .sum();
    em * LEGEND_FONT
}

impl Frame {
    fn new(title: &str) -> Frame {
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<text x="{ML}" y="18" class="title">{t}</text><rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" class="plot"/>"#,
            t = esc(title),
            pw = W - ML - MR,
            ph = H - MT - MB
        );
        Frame {
            title: title.to_string(),
            svg,
            legend: Vec::new(),
        }
    }

    fn x_tick(&mut self, x: f64, label: &str) {
        // A label at the right edge ends there instead of running past it.
        let anchor = if x > W - MR - 30.0 { "end" } else { "middle" };
        let _ = write!(
            self.svg,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{MT}" y2="{y2}" class="grid"/><text x="{x:.1}" y="{ty}" class="tick" text-anchor="{anchor}">{l}</text>"#,
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

    /// One legend entry per curve, in palette order.
    fn legend(&mut self, names: &[String]) {
        for (i, n) in names.iter().enumerate() {
            self.legend.push((n.clone(), Marker::Swatch(i)));
        }
    }

    /// The legend's entries laid out below the plot; returns its height.
    fn draw_legend(&mut self) -> f64 {
        let (mut x, mut row) = (ML, 0.0);
        for (n, marker) in std::mem::take(&mut self.legend) {
            // The marker and its space (14), the text, the gap to the next entry.
            let w = 14.0 + legend_text_width(&n) + LEGEND_GAP;
            if x > ML && x + w > W - MR {
                x = ML;
                row += 1.0;
            }
            let y = H + 10.0 + LEGEND_ROW * row;
            let _ = match marker {
                Marker::Swatch(i) => write!(
                    self.svg,
                    r#"<rect x="{x:.1}" y="{ry:.1}" width="10" height="10" fill="{c}"/>"#,
                    ry = y - 9.0,
                    c = PALETTE[i % PALETTE.len()],
                ),
                Marker::Circle => write!(
                    self.svg,
                    r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="4.5" fill="none" stroke="#000" stroke-width="1.5"/>"##,
                    cx = x + 5.0,
                    cy = y - 4.0,
                ),
            };
            let _ = write!(
                self.svg,
                r#"<text x="{tx:.1}" y="{y:.1}" class="legend">{n}</text>"#,
                tx = x + 14.0,
                n = esc(&n)
            );
            x += w;
        }
        match x > ML || row > 0.0 {
            true => LEGEND_ROW * (row + 1.0) + 10.0,
            false => 0.0,
        }
    }

    fn finish(mut self) -> String {
        let h = H + self.draw_legend();
        format!(
            r#"<svg class="chart" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img" aria-label="{t}">{body}</svg>"#,
            t = esc(&self.title),
            body = self.svg
        )
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

pub(super) fn histogram_of(s: &Series) -> Option<LatencyHistogram> {
    s.decode_histogram().and_then(Result::ok)
}

/// Percentile curves: x is 1/(1-p) on a log scale (50, 90, 99, 99.9 ...), y latency (log).
pub(super) fn percentile_chart(title: &str, series: &[(String, LatencyHistogram)]) -> String {
    let curves: Vec<(String, Vec<(f64, u64)>)> = series
        .iter()
        .map(|(name, h)| (name.clone(), h.percentile_curve()))
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
pub(super) fn histogram_chart(title: &str, series: &[(String, LatencyHistogram)]) -> String {
    let bins: Vec<(String, Vec<(u64, u64)>)> = series
        .iter()
        .map(|(name, h)| (name.clone(), h.log2_bins()))
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

/// Latency over time: the worst latency of each window per series (when the run recorded
/// a timeline), with the explained outliers marked on top (causes on hover).
/// Ticks for a time axis from 0 to `tmax` seconds: a step of 1, 2 or 5 times a power of
/// ten giving 3 to 5 intervals, and the decimals its labels need (so that no two labels read
/// alike and none is rounded: 0.15 s is not written 0.1 s).
fn time_step(tmax: f64) -> (f64, usize) {
    let raw = tmax / 4.0;
    let p = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&s| s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * p);
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    (step, decimals)
}

pub(super) fn time_chart(
    title: &str,
    timelines: &[(String, u64, Vec<u64>)],
    outliers: &[&Outlier],
) -> String {
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
    let (step, decimals) = time_step(tmax);
    let mut k = 0.0;
    while k * step <= tmax * (1.0 + 1e-9) {
        let t = k * step;
        f.x_tick(px(t, 0.0, tmax, ML, W - MR), &format!("{t:.decimals$} s"));
        k += 1.0;
    }
    let mut e = ya;
    while e <= yb {
        f.y_tick(px(e, ya, yb, H - MB, MT), &decade_label(e));
        e += 1.0;
    }
    match timelines.is_empty() {
        true => f.axis_labels("time since the start", "latency of each explained outlier"),
        false => f.axis_labels("time since the start", "worst latency per window"),
    }
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
        let (c, n, s) = (PALETTE[i % PALETTE.len()], esc(name), Nanos(*step));
        let _ = match points.as_slice() {
            // A window alone is a dot (a line of one point draws nothing).
            [only] => {
                let (x, y) = only.split_once(',').unwrap_or(("0", "0"));
                write!(
                    f.svg,
                    r#"<circle cx="{x}" cy="{y}" r="2.2" fill="{c}"><title>{n}: worst latency per {s}</title></circle>"#
                )
            }
            _ => write!(
                f.svg,
                r#"<polyline fill="none" stroke="{c}" stroke-width="1.2" points="{p}"><title>{n}: worst latency per {s}</title></polyline>"#,
                p = points.join(" "),
            ),
        };
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
            why = esc(&causes_text(o.latency_ns, &o.causes))
        );
    }
    let names: Vec<String> = timelines.iter().map(|t| t.0.clone()).collect();
    f.legend(&names);
    if !outliers.is_empty() {
        f.legend.push((
            "explained outliers (hover for causes)".into(),
            Marker::Circle,
        ));
    }
    f.finish()
}

/// A single value as the report says it (a bar's label, a value's cell).
pub(super) fn value_label(v: f64, unit: Unit) -> String {
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
pub(super) fn bar_chart(title: &str, bars: &[(String, f64)], unit: Unit) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_have_their_data() {
        let mut h = LatencyHistogram::new();
        for i in 0..10_000u64 {
            h.record(Nanos(5_000 + (i * 37) % 20_000));
        }
        h.record(Nanos(2_000_000));
        let s = Series::distribution("thread0", "wakeup_latency", &h).unwrap();
        let pc = percentile_chart("t", &[(s.name.clone(), h.clone())]);
        assert!(pc.contains("<polyline") && pc.contains("thread0"));
        assert!(
            pc.contains(">2.0ms<") || pc.contains(">10ms<") || pc.contains("ms<"),
            "{pc}"
        );
        let hc = histogram_chart("t", &[(s.name.clone(), h.clone())]);
        assert!(hc.contains("<path"));
        let bins = h.log2_bins();
        assert_eq!(bins.iter().map(|b| b.1).sum::<u64>(), 10_001);
        let curve = h.percentile_curve();
        assert_eq!(curve.last().unwrap(), &(100.0, 2_000_000));
    }

    /// The y of every element of `class` in `svg`.
    fn ys_of(svg: &str, class: &str) -> Vec<f64> {
        svg.split("<text ")
            .filter(|t| t.contains(&format!("class=\"{class}\"")))
            .filter_map(|t| {
                let at = t.find(" y=\"")? + 4;
                t[at..].split('"').next()?.parse().ok()
            })
            .collect()
    }

    #[test]
    fn time_ticks_are_round_and_their_labels_exact() {
        assert_eq!(time_step(0.6), (0.2, 1));
        assert_eq!(time_step(4.1), (2.0, 0));
        assert_eq!(time_step(60.0), (20.0, 0));
        assert_eq!(time_step(0.05), (0.02, 2));
        let (step, _) = time_step(3600.0);
        assert_eq!(step, 1000.0);
        let o = Outlier {
            series: "s".into(),
            at_ns: 600_000_000,
            latency_ns: 2_000_000,
            causes: vec![],
            cpu: None,
            until_running_ns: None,
            stacks: vec![],
        };
        let svg = time_chart("t", &[], &[&o]);
        for label in ["0.0 s", "0.2 s", "0.4 s", "0.6 s"] {
            assert!(svg.contains(&format!(">{label}<")), "{label}: {svg}");
        }
    }

    #[test]
    fn legend_entries_never_run_into_each_other_whatever_their_letters() {
        assert!(
            legend_text_width("mmap/private/mmap") > 1.5 * legend_text_width("illicit/little/fill")
        );
        let mut h = LatencyHistogram::new();
        h.record(Nanos(5_000));
        let names: Vec<(String, LatencyHistogram)> = [
            "mmap/private/idle",
            "mmap/private/mmap",
            "mmap/shared/mmap",
            "WWW/mmm/@%",
        ]
        .iter()
        .map(|n| (n.to_string(), h.clone()))
        .collect();
        let svg = percentile_chart("t", &names);
        // (x, y, name) of each entry's text: on one row, each starts past the end of the
        // one before it, drawn at 11 px in DejaVu Sans (whose widest letter is under 1 em).
        let texts: Vec<(f64, f64, String)> = svg
            .split("<text ")
            .filter(|t| t.contains("class=\"legend\""))
            .map(|t| {
                let attr = |a: &str| -> f64 {
                    t.split(&format!("{a}=\""))
                        .nth(1)
                        .unwrap()
                        .split('"')
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap()
                };
                let name = t
                    .split('>')
                    .nth(1)
                    .unwrap()
                    .split('<')
                    .next()
                    .unwrap()
                    .to_string();
                (attr("x"), attr("y"), name)
            })
            .collect();
        assert_eq!(texts.len(), 4);
        for pair in texts.windows(2) {
            let ((x0, y0, n0), (x1, y1, _)) = (&pair[0], &pair[1]);
            if y0 == y1 {
                assert!(
                    x1 - x0 >= legend_text_width(n0) + 10.0,
                    "{n0} at {x0}, next at {x1}"
                );
            }
        }
    }

    #[test]
    fn a_legend_goes_below_the_plot_and_the_last_tick_ends_inside_the_chart() {
        let mut h = LatencyHistogram::new();
        for i in 0..200_000u64 {
            h.record(Nanos(5_000 + i % 7_000));
        }
        let names: Vec<(String, LatencyHistogram)> = (0..8)
            .map(|i| (format!("a-rather-long-series-name-{i}/wakeup"), h.clone()))
            .collect();
        let pc = percentile_chart("t", &names);
        let legend = ys_of(&pc, "legend");
        assert_eq!(legend.len(), 8);
        assert!(legend.iter().all(|&y| y > H), "{legend:?}");
        // Several rows, and the chart is as tall as they need.
        assert!(legend.iter().any(|&y| y > H + LEGEND_ROW), "{legend:?}");
        let height: f64 = pc
            .split("height=\"")
            .nth(1)
            .and_then(|t| t.split('"').next())
            .and_then(|t| t.parse().ok())
            .unwrap();
        assert!(
            height > legend.iter().cloned().fold(0.0, f64::max),
            "{height}"
        );
        // 200 000 samples reach 99.9999 %: its label ends at the right edge.
        assert!(pc.contains(r#"text-anchor="end">99.9999%<"#), "{pc}");
        // The outliers' marker is a circle, in the legend too.
        let o = Outlier {
            series: "s".into(),
            at_ns: 1_000_000_000,
            latency_ns: 2_000_000,
            causes: vec![],
            cpu: None,
            until_running_ns: None,
            stacks: vec![],
        };
        let tc = time_chart("t", &[], &[&o]);
        assert_eq!(tc.matches("<circle").count(), 2, "{tc}");
        assert!(tc.contains("latency of each explained outlier"));
    }
}
