//! A median with its 95 % interval, for ratios measured in interleaved blocks.
//!
//! The interval is distribution-free: the order statistics between which the median lies
//! with at least 95 % probability, from the binomial distribution (no assumption about how
//! a machine's noise is shaped). A ratio counts as under a limit only when the interval's
//! upper end is; as over it only when the lower end is.

use serde::{Deserialize, Serialize};

/// A median and, with 6 values or more, the interval around it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The median.
    pub median: f64,
    /// The interval's lower end (None: too few values for one).
    pub low: Option<f64>,
    /// Its upper end.
    pub high: Option<f64>,
}

/// How sure the interval is.
const CONFIDENCE: f64 = 0.95;

impl Interval {
    /// The median of `values` and its 95 % interval; None for no values (NaNs left out).
    pub fn of(values: &[f64]) -> Option<Interval> {
        let mut xs: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        xs.sort_by(f64::total_cmp);
        let n = xs.len();
        if n == 0 {
            return None;
        }
        let median = match n % 2 {
            1 => xs[n / 2],
            _ => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
        };
        // The largest rank k with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2: the
        // median lies between the k-th smallest and the k-th largest value.
        let tail = (1.0 - CONFIDENCE) / 2.0;
        let (mut cum, mut k) = (0.0, 0);
        for j in 0..=n {
            cum += binomial_half(n, j);
            if cum > tail {
                k = j;
                break;
            }
        }
        let (low, high) = match k {
            0 => (None, None),
            k => (Some(xs[k - 1]), Some(xs[n - k])),
        };
        Some(Interval { median, low, high })
    }

    /// The whole interval is under `limit`.
    pub fn under(&self, limit: f64) -> bool {
        self.high.is_some_and(|h| h < limit)
    }

    /// The whole interval is over `limit`.
    pub fn over(&self, limit: f64) -> bool {
        self.low.is_some_and(|l| l > limit)
    }
}

impl std::fmt::Display for Interval {
    /// `0.82 [0.71, 0.95]`, or the median and why there is no interval.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.low, self.high) {
            (Some(l), Some(h)) => write!(f, "{:.2} [{l:.2}, {h:.2}]", self.median),
            _ => write!(f, "{:.2} (too few blocks for an interval)", self.median),
        }
    }
}

/// P(Binomial(n, 1/2) = j), in floating point (n up to a few thousand).
fn binomial_half(n: usize, j: usize) -> f64 {
    // ln C(n, j) - n ln 2, summed in logs so large n does not overflow.
    let ln_choose: f64 = (0..j).map(|i| ((n - i) as f64 / (i + 1) as f64).ln()).sum();
    (ln_choose - n as f64 * std::f64::consts::LN_2).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ranks_are_those_of_the_binomial_tail() {
        // Ten values: P(X <= 1) = 11/1024 <= 2.5 % < P(X <= 2) = 56/1024, so the 2nd
        // smallest and the 2nd largest (as bench/ci.py gives).
        let xs: Vec<f64> = (1..=10).map(f64::from).collect();
        let i = Interval::of(&xs).unwrap();
        assert_eq!((i.median, i.low, i.high), (5.5, Some(2.0), Some(9.0)));
        // Twenty: the 6th and the 15th.
        let xs: Vec<f64> = (1..=20).map(f64::from).collect();
        let i = Interval::of(&xs).unwrap();
        assert_eq!((i.low, i.high), (Some(6.0), Some(15.0)));
        // Five values cannot give a 95 % interval: 1/32 > 2.5 %.
        let i = Interval::of(&[3.0, 1.0, 2.0, 5.0, 4.0]).unwrap();
        assert_eq!((i.median, i.low, i.high), (3.0, None, None));
        assert!(!i.under(10.0) && !i.over(0.0));
        assert_eq!(Interval::of(&[]), None);
    }

    #[test]
    fn under_and_over_need_the_whole_interval() {
        let i = Interval::of(&[0.7, 0.8, 0.8, 0.85, 0.9, 0.9, 0.95, 0.97, 0.98, 1.01]).unwrap();
        assert!(i.under(1.0));
        assert!(!i.over(0.8));
        assert_eq!(i.to_string(), "0.90 [0.80, 0.98]");
    }
}
