use std::fmt;

/// A latency or duration in integer nanoseconds: the one unit rtlab computes in.
///
/// Its `Display` is the single place where a latency becomes human text (`850 ns`, `12.3 us`,
/// `1.25 ms`, `2.70 s`, three significant digits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

impl Nanos {
    /// Zero.
    pub const ZERO: Nanos = Nanos(0);

    /// From microseconds.
    pub const fn from_micros(us: u64) -> Nanos {
        Nanos(us * 1_000)
    }

    /// From milliseconds.
    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms * 1_000_000)
    }

    /// From seconds.
    pub const fn from_secs(s: u64) -> Nanos {
        Nanos(s * 1_000_000_000)
    }

    /// The raw count of nanoseconds.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// As a `std::time::Duration`.
    pub const fn as_duration(self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.0)
    }

    /// A compact identifier for series names (`1ns`, `10us`, `1.5ms`, `2s`): the largest unit
    /// that divides it (with one decimal where that is exact), never rounded.
    pub fn label(self) -> String {
        for (unit, scale) in [("s", 1_000_000_000u64), ("ms", 1_000_000), ("us", 1_000)] {
            if self.0 >= scale && self.0.is_multiple_of(scale) {
                return format!("{}{unit}", self.0 / scale);
            }
            if self.0 >= scale && self.0.is_multiple_of(scale / 10) {
                return format!("{}.{}{unit}", self.0 / scale, self.0 % scale / (scale / 10));
            }
        }
        format!("{}ns", self.0)
    }

    /// Seconds as a float (for `duration_s` and rates).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl From<std::time::Duration> for Nanos {
    fn from(d: std::time::Duration) -> Self {
        Nanos(d.as_nanos().min(u64::MAX as u128) as u64)
    }
}

/// Formats `value` (already divided into `unit`) with three significant digits.
fn three_digits(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0 as f64;
        let text = match self.0 {
            0..=999 => format!("{} ns", self.0),
            1_000..=999_999 => format!("{} us", three_digits(ns / 1e3)),
            1_000_000..=999_999_999 => format!("{} ms", three_digits(ns / 1e6)),
            _ => format!("{} s", three_digits(ns / 1e9)),
        };
        f.pad(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_three_significant_digits() {
        assert_eq!(Nanos(0).to_string(), "0 ns");
        assert_eq!(Nanos(850).to_string(), "850 ns");
        assert_eq!(Nanos(1_000).to_string(), "1.00 us");
        assert_eq!(Nanos(12_345).to_string(), "12.3 us");
        assert_eq!(Nanos(999_999).to_string(), "1000 us");
        assert_eq!(Nanos(1_250_000).to_string(), "1.25 ms");
        assert_eq!(Nanos(2_700_000_000).to_string(), "2.70 s");
        assert_eq!(Nanos(30_000_000_000).to_string(), "30.0 s");
        assert_eq!(format!("{:>9}", Nanos(850)), "   850 ns");
    }

    #[test]
    fn labels_are_compact_and_exact() {
        assert_eq!(Nanos(1).label(), "1ns");
        assert_eq!(Nanos(10_000).label(), "10us");
        assert_eq!(Nanos(1_500_000).label(), "1.5ms");
        assert_eq!(Nanos(2_000_000_000).label(), "2s");
        assert_eq!(Nanos(1_234).label(), "1234ns");
    }
}
