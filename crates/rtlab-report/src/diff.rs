//! `rtlab diff A.json B.json`: per series present in both, B/A for each statistic, with a
//! significance mark for percentiles.
//!
//! Significance comes from the histograms, without assuming any distribution: the value at
//! quantile q of n samples lies, with 95 % confidence, between the values at quantiles
//! q -/+ 1.96 sqrt(q (1 - q) / n) (the order-statistic interval). A change is marked
//! significant when the two intervals do not overlap. The maximum has no such interval (one
//! sample decides it) and is never marked; single values (medians of repeated batches) are
//! compared as they are.

use rtlab_stats::result::{Series, Unit};
use rtlab_stats::LatencyHistogram;
use serde_json::json;

/// One compared statistic.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The series.
    pub series: String,
    /// `p50`, `p99`, `p999`, `max` or `value`.
    pub stat: &'static str,
    /// In A.
    pub a: f64,
    /// In B.
    pub b: f64,
    /// B / A.
    pub ratio: f64,
    /// `Some(true)`: the 95 % intervals do not overlap; `None`: no interval for this statistic.
    pub significant: Option<bool>,
    /// B is worse than A (higher latency, lower throughput).
    pub worse: bool,
    /// The unit of the series.
    pub unit: Unit,
    /// How many samples B's distribution has for each of A's (None: not known).
    pub samples_ratio: Option<f64>,
}

/// A max from this many times fewer samples than the other run's is no evidence that the
/// run got better: the largest of n samples grows with n.
pub const FEWER_SAMPLES: f64 = 2.0;

impl Change {
    /// What the comparison says: `same`, `noise` (the intervals overlap), `worse`, `better`,
    /// or `fewer samples` (a max lower in the run with far fewer samples: not comparable).
    pub fn verdict(&self) -> &'static str {
        let fewer_in_better = self.samples_ratio.is_some_and(|r| match self.worse {
            false => r * FEWER_SAMPLES <= 1.0,
            true => r >= FEWER_SAMPLES,
        });
        if (self.ratio - 1.0).abs() < 0.005 {
            "same"
        } else if self.significant == Some(false) {
            "noise"
        } else if self.stat == "max" && fewer_in_better {
            "fewer samples"
        } else if self.worse {
            "worse"
        } else {
            "better"
        }
    }
}

const Z95: f64 = 1.96;

/// The 95 % interval of the value at `q` in `h`.
pub fn quantile_interval(h: &LatencyHistogram, q: f64) -> (u64, u64) {
    let n = h.len().max(1) as f64;
    let half = Z95 * (q * (1.0 - q) / n).sqrt();
    let lo = h.value_at_quantile((q - half).max(0.0)).get();
    let hi = h.value_at_quantile((q + half).min(1.0)).get();
    (lo, hi)
}

fn higher_is_worse(unit: Unit) -> bool {
    !matches!(unit, Unit::OpsPerSec | Unit::BytesPerSec)
}

fn histogram(s: &Series) -> Option<LatencyHistogram> {
    s.decode_histogram().and_then(Result::ok)
}

/// Compares every series of `b` that `a` has too (by name and metric).
pub fn compare(a: &[Series], b: &[Series]) -> Vec<Change> {
    let mut out = Vec::new();
    for sb in b {
        let Some(sa) = a
            .iter()
            .find(|s| s.name == sb.name && s.metric == sb.metric)
        else {
            continue;
        };
        let worse_when_higher = higher_is_worse(sb.unit);
        let mut push = |stat: &'static str, va: f64, vb: f64, significant: Option<bool>| {
            let ratio = vb / va;
            // A ratio JSON cannot hold (a crafted or broken file: infinite, NaN) is no
            // comparison; `--json` wrote it as null before.
            if va <= 0.0 || !ratio.is_finite() {
                return;
            }
            out.push(Change {
                series: sb.name.clone(),
                stat,
                a: va,
                b: vb,
                ratio,
                significant,
                worse: if worse_when_higher {
                    ratio > 1.0
                } else {
                    ratio < 1.0
                },
                unit: sb.unit,
                samples_ratio: match (sa.count, sb.count) {
                    (Some(ca), Some(cb)) if ca > 0 && cb > 0 => Some(cb as f64 / ca as f64),
                    _ => None,
                },
            });
        };
        if let (Some(va), Some(vb)) = (sa.value, sb.value) {
            push("value", va, vb, None);
            continue;
        }
        let (ha, hb) = (histogram(sa), histogram(sb));
        for (stat, q, pick) in [
            (
                "p50",
                0.5,
                (|s: &Series| s.p50) as fn(&Series) -> Option<f64>,
            ),
            ("p99", 0.99, |s: &Series| s.p99),
            ("p999", 0.999, |s: &Series| s.p999),
        ] {
            let (Some(va), Some(vb)) = (pick(sa), pick(sb)) else {
                continue;
            };
            let significant = match (&ha, &hb) {
                (Some(ha), Some(hb)) => {
                    let (alo, ahi) = quantile_interval(ha, q);
                    let (blo, bhi) = quantile_interval(hb, q);
                    Some(bhi < alo || ahi < blo)
                }
                _ => None,
            };
            push(stat, va, vb, significant);
        }
        if let (Some(va), Some(vb)) = (sa.max, sb.max) {
            push("max", va, vb, None);
        }
    }
    out
}

/// The changes that fail `--fail-worse PCT`: worse by more than `pct` percent, and
/// significant where significance is known (the max, which has none, never fails the gate).
pub fn gate(changes: &[Change], pct: f64) -> Vec<&Change> {
    changes
        .iter()
        .filter(|c| c.stat != "max" && c.worse && c.significant != Some(false))
        .filter(|c| {
            let by = if higher_is_worse(c.unit) {
                c.ratio - 1.0
            } else {
                1.0 / c.ratio.max(1e-12) - 1.0
            };
            by * 100.0 > pct
        })
        .collect()
}

/// The comparison as result-document series (`<series>/<stat>`, unit ratio).
pub fn as_series(changes: &[Change], a_path: &str, b_path: &str) -> Vec<Series> {
    changes
        .iter()
        .map(|c| {
            Series::value(
                format!("{}/{}", c.series, c.stat),
                format!("{}_ratio", c.stat),
                Unit::Ratio,
                (c.ratio * 10_000.0).round() / 10_000.0,
            )
            .with_config("a", c.a)
            .with_config("b", c.b)
            .with_config("significant", json!(c.significant))
            .with_config("worse", c.worse)
            .with_config("verdict", c.verdict())
            .with_config("a_file", a_path)
            .with_config("b_file", b_path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_stats::Nanos;

    #[test]
    fn ratios_json_cannot_hold_are_left_out() {
        // Regression (hardening, low): `diff --json` wrote null for an infinite ratio.
        let a = vec![Series::value("x", "v", Unit::Ns, 1e-310)];
        let b = vec![Series::value("x", "v", Unit::Ns, 1e308)];
        assert!(compare(&a, &b).is_empty());
        let b = vec![Series::value("x", "v", Unit::Ns, 2e-310)];
        let changes = compare(&a, &b);
        assert_eq!(changes.len(), 1);
        assert!(changes[0].ratio.is_finite());
    }

    fn doc_with(name: &str, values: impl Iterator<Item = u64>) -> Vec<Series> {
        let mut h = LatencyHistogram::new();
        for v in values {
            h.record(Nanos(v));
        }
        vec![
            Series::distribution(name, "wakeup_latency", &h).unwrap(),
            Series::value("tp", "throughput", Unit::OpsPerSec, 1000.0),
        ]
    }

    #[test]
    fn a_real_shift_is_significant_and_noise_is_not() {
        let a = doc_with("t", (0..20_000).map(|i| 10_000 + i % 1000));
        let b = doc_with("t", (0..20_000).map(|i| 13_000 + i % 1000));
        let c = compare(&a, &b);
        let p50 = c.iter().find(|c| c.stat == "p50").unwrap();
        assert!((p50.ratio - 1.285).abs() < 0.02, "{p50:?}");
        assert_eq!(p50.significant, Some(true));
        assert!(p50.worse);
        assert_eq!(
            gate(&c, 10.0).len(),
            3,
            "p50, p99, p999 got worse by > 10 %"
        );
        assert!(gate(&c, 50.0).is_empty());
        let same = doc_with("t", (0..20_000).map(|i| 10_000 + (i * 7) % 1000));
        let c = compare(&a, &same);
        assert!(c.iter().all(|c| c.significant != Some(true)), "{c:?}");
        assert!(gate(&c, 1.0).is_empty());
        let tp = c.iter().find(|c| c.stat == "value").unwrap();
        assert_eq!((tp.ratio, tp.worse), (1.0, false));
    }

    #[test]
    fn a_lower_max_from_far_fewer_samples_is_not_called_better() {
        // A 60 s run against a 4 s one: the short run's max is lower because it is shorter.
        let long = doc_with("t", (0..60_000).map(|i| 10_000 + (i * 7919) % 50_000));
        let short = doc_with("t", (0..4_000).map(|i| 10_000 + (i * 7919) % 20_000));
        let c = compare(&long, &short);
        let max = c.iter().find(|c| c.stat == "max").unwrap();
        assert!(!max.worse && max.ratio < 0.6, "{max:?}");
        assert_eq!(max.verdict(), "fewer samples");
        // The other way round the longer run's higher max is not called worse either.
        let c = compare(&short, &long);
        let max = c.iter().find(|c| c.stat == "max").unwrap();
        assert_eq!(max.verdict(), "fewer samples");
        // The same length: a lower max is better.
        let low = doc_with("t", (0..60_000).map(|i| 10_000 + (i * 7919) % 20_000));
        let max = compare(&long, &low)
            .into_iter()
            .find(|c| c.stat == "max")
            .unwrap();
        assert_eq!(max.verdict(), "better");
    }

    #[test]
    fn lower_throughput_is_worse() {
        let a = doc_with("t", 0..10);
        let mut b = doc_with("t", 0..10);
        b[1].value = Some(500.0);
        let c = compare(&a, &b);
        let tp = c.iter().find(|c| c.stat == "value").unwrap();
        assert!(tp.worse);
        assert_eq!(gate(&c, 10.0).len(), 1);
    }
}
