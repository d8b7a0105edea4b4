//! A latency histogram as text in power-of-two microsecond buckets, as runqlat and the other
//! bcc tools print theirs, so that a user of those reads it at once.

use rtlab_stats::LatencyHistogram;

/// Width of the bars.
const BAR: usize = 40;

/// `h` in buckets `0 -> 1`, `2 -> 3`, `4 -> 7` ... microseconds, from the first bucket with a
/// count to the last, each with its count and a bar scaled to the largest.
pub fn log2_histogram(h: &LatencyHistogram) -> String {
    let mut buckets: Vec<u64> = Vec::new();
    for v in h.hdr().iter_recorded() {
        let us = v.value_iterated_to() / 1000;
        let b = if us < 2 {
            0
        } else {
            63 - us.leading_zeros() as usize
        };
        if buckets.len() <= b {
            buckets.resize(b + 1, 0);
        }
        buckets[b] += v.count_at_value();
    }
    let first = buckets.iter().position(|&c| c > 0).unwrap_or(0);
    let top = buckets.iter().copied().max().unwrap_or(0).max(1);
    let mut out = format!("{:>20}{:15}: {:<9} distribution\n", "usecs", "", "count");
    for (b, &count) in buckets.iter().enumerate().skip(first) {
        let (lo, hi) = match b {
            0 => (0u64, 1u64),
            b => (1u64 << b, (1u64 << (b + 1)) - 1),
        };
        let stars = ((count as u128 * BAR as u128).div_ceil(top as u128)) as usize;
        out.push_str(&format!(
            "{lo:>20} -> {hi:<10} : {count:<9} |{:<BAR$}|\n",
            "*".repeat(stars.min(BAR))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_stats::Nanos;

    #[test]
    fn buckets_are_powers_of_two_of_microseconds_with_bars_scaled_to_the_largest() {
        let mut h = LatencyHistogram::compact();
        for _ in 0..10 {
            h.record(Nanos(3_000)); // 3 us: 2 -> 3
        }
        for _ in 0..5 {
            h.record(Nanos(5_000)); // 4 -> 7
        }
        h.record(Nanos(1_500_000)); // 1500 us: 1024 -> 2047
        let text = log2_histogram(&h);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("usecs") && lines[0].contains("distribution"));
        assert!(lines[1].trim_start().starts_with("2 -> 3 "), "{text}");
        assert!(lines[1].contains(": 10 ") && lines[1].contains(&format!("|{}|", "*".repeat(40))));
        assert!(lines[2].trim_start().starts_with("4 -> 7 ") && lines[2].contains(": 5 "));
        assert!(lines[2].contains(&format!("|{}{}|", "*".repeat(20), " ".repeat(20))));
        let last = lines.last().unwrap();
        assert!(
            last.trim_start().starts_with("1024 -> 2047 ") && last.contains(": 1 "),
            "{text}"
        );
        // Empty buckets between are shown, as runqlat does.
        assert_eq!(lines.len(), 1 + 10);
        assert!(log2_histogram(&LatencyHistogram::compact()).lines().count() == 1);
    }
}
