//! Latency histograms.
//!
//! [`LatencyHistogram`] is the record of truth: HdrHistogram with 3 significant digits and a
//! range from 1 ns to 1 hour, so a 30 s stall is recorded as 30 s, never dropped as an
//! overflow, plus exact min, max and sum kept beside it. [`LiveHistogram`] is a coarse
//! lock-free copy for the live status line, readable while the measuring thread writes.

use crate::Nanos;
use base64::Engine;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};

/// Values above this (1 hour) are recorded as 1 hour in the buckets; the exact max is kept.
pub const HIGHEST_TRACKABLE_NS: u64 = 3_600_000_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;

/// Errors of histogram (de)serialisation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HistogramError {
    /// The V2+deflate encoder failed.
    #[error("cannot encode histogram: {0}")]
    Encode(String),
    /// The data is not a base64 V2 (deflate) histogram.
    #[error("cannot decode histogram: {0}")]
    Decode(String),
}

/// The summary of a distribution, as the result document and the tables show it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Samples in the distribution, the coordinated-omission corrections included.
    pub count: u64,
    /// Samples synthesised for periods that never started (`count - raw_count`).
    pub missed: u64,
    /// Samples actually measured.
    pub raw_count: u64,
    /// Exact minimum.
    pub min: u64,
    /// Exact mean.
    pub mean: f64,
    /// Standard deviation (from the buckets).
    pub stddev: f64,
    /// Percentiles (bucket upper bounds, 0.1 % precision, clamped to the exact min/max).
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// 99.99th percentile.
    pub p9999: u64,
    /// Exact maximum.
    pub max: u64,
}

/// A latency distribution in nanoseconds. Recording never allocates.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    min: u64,
    max: u64,
    sum: u128,
    missed: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram covering 1 ns .. 1 h at 3 significant digits (about 256 KiB).
    pub fn new() -> Self {
        Self::with_digits(SIGNIFICANT_DIGITS)
    }

    fn with_digits(digits: u8) -> Self {
        let hist = Histogram::new_with_bounds(1, HIGHEST_TRACKABLE_NS, digits)
            .expect("constant bounds are valid");
        LatencyHistogram {
            hist,
            min: u64::MAX,
            max: 0,
            sum: 0,
            missed: 0,
        }
    }

    /// A histogram over the same range at 2 significant digits (1 % resolution, about a
    /// tenth of the memory): for watching many threads at once.
    pub fn compact() -> Self {
        Self::with_digits(2)
    }

    /// The underlying HdrHistogram (for HdrHistogram's own formats, such as interval logs).
    pub fn hdr(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// The exact sum of the samples recorded (ns).
    pub fn sum_ns(&self) -> u128 {
        self.sum
    }

    /// For each of `bounds` (ns, ascending), how many samples are at or below it: cumulative
    /// buckets, as Prometheus histograms have. At the histogram's resolution: a sample in the
    /// same bucket as a bound counts as at or below it.
    pub fn cumulative_counts(&self, bounds: &[u64]) -> Vec<u64> {
        let mut counts = vec![0u64; bounds.len()];
        for v in self.hist.iter_recorded() {
            let low = self.hist.lowest_equivalent(v.value_iterated_to());
            let first = bounds.partition_point(|&b| b < low);
            if let Some(c) = counts.get_mut(first) {
                *c += v.count_at_value();
            }
        }
        for i in 1..counts.len() {
            counts[i] += counts[i - 1];
        }
        counts
    }

    /// Empties it, keeping its allocation.
    pub fn reset(&mut self) {
        self.hist.reset();
        self.min = u64::MAX;
        self.max = 0;
        self.sum = 0;
        self.missed = 0;
    }

    #[inline]
    fn add(&mut self, ns: u64) {
        self.hist.saturating_record(ns.min(HIGHEST_TRACKABLE_NS));
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        self.sum += ns as u128;
    }

    /// Records one measured sample.
    #[inline]
    pub fn record(&mut self, latency: Nanos) {
        self.add(latency.get());
    }

    /// Records one measured sample of a periodic activity that was `latency` late, and one
    /// synthetic sample for every later period whose scheduled time had already passed when
    /// this one finally ran (HdrHistogram's "expected interval" correction for coordinated
    /// omission). The later periods were missed: their latency is `latency - k * interval`.
    /// Returns how many periods were missed, so the caller can skip them.
    #[inline]
    pub fn record_periodic(&mut self, latency: Nanos, interval: Nanos) -> u64 {
        self.record_periodic_within(latency, interval, u64::MAX)
    }

    /// [`record_periodic`](Self::record_periodic), counting at most `max_missed` missed
    /// periods: those a run still had (a late last wakeup misses no period after the run).
    #[inline]
    pub fn record_periodic_within(
        &mut self,
        latency: Nanos,
        interval: Nanos,
        max_missed: u64,
    ) -> u64 {
        self.add(latency.get());
        if interval.get() == 0 || latency.get() < interval.get() {
            return 0;
        }
        let mut missed = 0;
        let mut late = latency.get();
        while late >= interval.get() && missed < max_missed {
            late -= interval.get();
            self.add(late);
            missed += 1;
        }
        self.missed += missed;
        missed
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        self.hist
            .add(&other.hist)
            .expect("histograms share their bounds");
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
        self.missed += other.missed;
    }

    /// Samples recorded, corrections included.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// True before the first sample.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Synthetic samples recorded by [`record_periodic`](Self::record_periodic).
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// Exact maximum (0 when empty).
    pub fn max(&self) -> Nanos {
        Nanos(self.max)
    }

    /// The value at `quantile` (0..=1), clamped to the exact min and max.
    pub fn value_at_quantile(&self, quantile: f64) -> Nanos {
        if self.is_empty() {
            return Nanos::ZERO;
        }
        if quantile >= 1.0 {
            return Nanos(self.max);
        }
        let v = self.hist.value_at_quantile(quantile);
        Nanos(v.clamp(self.min, self.max))
    }

    /// Counts in power-of-two latency bins: (bin upper bound in ns, count), from the bin of the
    /// minimum to the bin of the maximum, empty bins included (for log-scale plots).
    pub fn log2_bins(&self) -> Vec<(u64, u64)> {
        if self.is_empty() {
            return Vec::new();
        }
        let first = self.min.max(1).next_power_of_two().max(16);
        self.hist
            .iter_log(first, 2.0)
            .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
            .take_while(|&(upper, _)| upper / 2 <= self.max.max(1))
            .collect()
    }

    /// The percentile curve HdrHistogram plots: (percentile, latency ns) at points that get
    /// denser towards the tail, ending at the maximum.
    pub fn percentile_curve(&self) -> Vec<(f64, u64)> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut v: Vec<(f64, u64)> = self
            .hist
            .iter_quantiles(4)
            .map(|q| {
                (
                    q.percentile(),
                    q.value_iterated_to().clamp(self.min, self.max),
                )
            })
            .filter(|&(p, _)| p < 100.0)
            .collect();
        v.push((100.0, self.max));
        v
    }

    /// Count, missed, exact min/mean/max and the standard percentiles.
    pub fn summary(&self) -> Summary {
        let count = self.len();
        let q = |p: f64| self.value_at_quantile(p).get();
        Summary {
            count,
            missed: self.missed,
            raw_count: count - self.missed,
            min: if count == 0 { 0 } else { self.min },
            mean: if count == 0 {
                0.0
            } else {
                self.sum as f64 / count as f64
            },
            stddev: if count == 0 { 0.0 } else { self.hist.stdev() },
            p50: q(0.50),
            p90: q(0.90),
            p99: q(0.99),
            p999: q(0.999),
            p9999: q(0.9999),
            max: self.max,
        }
    }

    /// The histogram in HdrHistogram's V2 + deflate format, base64 (the `histogram.data` of a
    /// series; `HistogramLogProcessor` and the HdrHistogram libraries read it).
    pub fn encode_base64(&self) -> Result<String, HistogramError> {
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&self.hist, &mut bytes)
            .map_err(|e| HistogramError::Encode(format!("{e:?}")))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// Reads what [`encode_base64`](Self::encode_base64) wrote. Min and max come from the
    /// buckets (0.1 % precision), the sum from bucket midpoints; nothing is marked missed.
    ///
    /// The data may come from a hostile file or network peer: the deflated payload is
    /// inflated under a cap and the header is checked against sane bounds before the
    /// HdrHistogram library sizes anything from it.
    pub fn decode_base64(data: &str) -> Result<Self, HistogramError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| HistogramError::Decode(e.to_string()))?;
        let plain = checked_v2(&bytes).map_err(|e| HistogramError::Decode(e.into()))?;
        let decoded: Histogram<u64> = Deserializer::new()
            .deserialize(&mut &plain[..])
            .map_err(|e| HistogramError::Decode(format!("{e:?}")))?;
        let mut out = LatencyHistogram::new();
        for v in decoded.iter_recorded() {
            let value = v.value_iterated_to();
            let n = v.count_at_value();
            out.hist
                .saturating_record_n(value.min(HIGHEST_TRACKABLE_NS), n);
            out.min = out.min.min(decoded.lowest_equivalent(value));
            out.max = out.max.max(value);
            out.sum += value as u128 * n as u128;
        }
        Ok(out)
    }

    /// Writes the HdrHistogram percentile distribution (`.hgrm`), values in microseconds, the
    /// format HdrHistogram's plotter reads.
    pub fn write_hgrm(&self, out: &mut dyn Write) -> io::Result<()> {
        const SCALE: f64 = 1_000.0;
        writeln!(
            out,
            "{:>12} {:>14} {:>10} {:>14}\n",
            "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
        )?;
        let mut total = 0u64;
        if !self.is_empty() {
            for v in self.hist.iter_quantiles(5) {
                total += v.count_since_last_iteration();
                let value = v.value_iterated_to().clamp(self.min, self.max) as f64 / SCALE;
                let p = v.quantile_iterated_to();
                if p < 1.0 {
                    writeln!(
                        out,
                        "{value:12.3} {p:14.12} {total:10} {:14.2}",
                        1.0 / (1.0 - p)
                    )?;
                } else {
                    writeln!(out, "{value:12.3} {p:14.12} {total:10}")?;
                }
            }
        }
        let s = self.summary();
        writeln!(
            out,
            "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
            s.mean / SCALE,
            s.stddev / SCALE
        )?;
        writeln!(
            out,
            "#[Max     = {:12.3}, Total count    = {:12}]",
            s.max as f64 / SCALE,
            s.count
        )?;
        writeln!(
            out,
            "#[Buckets = {:12}, SubBuckets     = {:12}]",
            self.hist.buckets(),
            self.hist.distinct_values()
        )?;
        Ok(())
    }
}

const LIVE_SUB_BITS: u32 = 3;
const LIVE_SUB: usize = 1 << LIVE_SUB_BITS;
const LIVE_BUCKETS: usize = (64 - LIVE_SUB_BITS as usize + 1) * LIVE_SUB;

/// A coarse (12.5 % precision) histogram of atomics: the measuring thread adds with one
/// relaxed increment per sample, another thread reads percentiles for the live status line.
/// Relaxed ordering throughout: each counter is independent and a status line that is a few
/// samples stale is fine. It never allocates after construction.
#[derive(Debug)]
pub struct LiveHistogram {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
}

impl Default for LiveHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveHistogram {
    /// An empty live histogram (4 KiB).
    pub fn new() -> Self {
        LiveHistogram {
            buckets: (0..LIVE_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            min: AtomicU64::new(u64::MAX),
            max: AtomicU64::new(0),
        }
    }

    fn index(ns: u64) -> usize {
        if ns < LIVE_SUB as u64 {
            return ns as usize;
        }
        let exp = 63 - ns.leading_zeros();
        let mantissa = (ns >> (exp - LIVE_SUB_BITS)) as usize & (LIVE_SUB - 1);
        (exp - LIVE_SUB_BITS + 1) as usize * LIVE_SUB + mantissa
    }

    fn upper_bound(index: usize) -> u64 {
        if index < LIVE_SUB {
            return index as u64;
        }
        let exp = (index / LIVE_SUB) as u32 + LIVE_SUB_BITS - 1;
        let mantissa = (index % LIVE_SUB) as u64;
        let width = 1u64 << (exp - LIVE_SUB_BITS);
        ((LIVE_SUB as u64 + mantissa) << (exp - LIVE_SUB_BITS)).saturating_add(width - 1)
    }

    /// Adds one sample (single writer; any number of readers).
    #[inline]
    pub fn record(&self, latency: Nanos) {
        let ns = latency.get();
        self.buckets[Self::index(ns)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        if ns < self.min.load(Ordering::Relaxed) {
            self.min.store(ns, Ordering::Relaxed);
        }
        if ns > self.max.load(Ordering::Relaxed) {
            self.max.store(ns, Ordering::Relaxed);
        }
    }

    /// Samples so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Exact min and max so far (`None` before the first sample).
    pub fn min_max(&self) -> Option<(Nanos, Nanos)> {
        let max = self.max.load(Ordering::Relaxed);
        let min = self.min.load(Ordering::Relaxed);
        (min != u64::MAX).then_some((Nanos(min), Nanos(max)))
    }

    /// Approximate value at `quantile`: the upper bound of its bucket, clamped to the max.
    pub fn approx_quantile(&self, quantile: f64) -> Option<Nanos> {
        let total: u64 = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum();
        if total == 0 {
            return None;
        }
        let rank = ((quantile * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b.load(Ordering::Relaxed);
            if seen >= rank {
                let max = self.max.load(Ordering::Relaxed);
                return Some(Nanos(Self::upper_bound(i).min(max)));
            }
        }
        None
    }
}

/// HdrHistogram's V2 cookies (plain and deflated; 0x10 is the 8-byte word-size mark).
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_DEFLATE_COOKIE: u32 = 0x1c84_9314;
/// The most an encoded histogram may inflate to. rtlab's own (1 ns to 1 h, 3 digits) takes
/// at most ~400 KB; 4 MiB leaves room for other tools' wider ones.
const MAX_INFLATED: u64 = 4 << 20;
/// V2 header: cookie, payload length, normalizing offset, significant digits (4 bytes each),
/// lowest, highest (8 each), conversion ratio (8).
const V2_HEADER: usize = 40;

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The plain V2 encoding of `bytes` (inflated if deflated), its header checked: the payload
/// length fits what is there, and the bounds and precision are ones whose counts array stays
/// small (the deserializer allocates from them).
fn checked_v2(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, &'static str> {
    use std::io::Read;
    let truncated = "truncated histogram";
    let plain: std::borrow::Cow<'_, [u8]> = match be32(bytes, 0).ok_or(truncated)? {
        V2_COOKIE => bytes.into(),
        V2_DEFLATE_COOKIE => {
            let len = be32(bytes, 4).ok_or(truncated)? as usize;
            let body = bytes.get(8..).ok_or(truncated)?;
            if len != body.len() {
                return Err("compressed length does not match the data");
            }
            // The header first: its payload length bounds the rest (a V2 encoding is exactly
            // header + payload), so no more is inflated than the header declares.
            let mut z = flate2::read::ZlibDecoder::new(body);
            let mut out = vec![0u8; V2_HEADER];
            z.read_exact(&mut out).map_err(|_| truncated)?;
            let declared = V2_HEADER as u64 + be32(&out, 4).ok_or(truncated)? as u64;
            if declared > MAX_INFLATED {
                return Err("histogram inflates to more than 4 MiB");
            }
            z.take(declared - V2_HEADER as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|_| "bad deflate stream")?;
            if out.len() as u64 > declared {
                return Err("histogram longer than its header says");
            }
            out.into()
        }
        _ => return Err("not an HdrHistogram V2 encoding"),
    };
    if be32(&plain, 0) != Some(V2_COOKIE) {
        return Err("not an HdrHistogram V2 encoding");
    }
    let payload = be32(&plain, 4).ok_or(truncated)? as usize;
    let digits = be32(&plain, 12).ok_or(truncated)?;
    let lowest = be64(&plain, 16).ok_or(truncated)?;
    let highest = be64(&plain, 24).ok_or(truncated)?;
    if payload > plain.len().saturating_sub(V2_HEADER) {
        return Err("payload length beyond the data");
    }
    // 4 digits up to 2^53 is a counts array of about 600 000 entries; more is no latency.
    if !(1..=4).contains(&digits) || lowest == 0 || highest > 1 << 53 || highest < 2 * lowest {
        return Err("histogram bounds or precision out of range");
    }
    Ok(plain)
}

/// The counts array HdrHistogram allocates for these bounds (as its constructor sizes it).
fn counts_len(digits: u32, lowest: u64, highest: u64) -> u64 {
    let single_unit = 2 * 10u64.pow(digits);
    let sub_bucket_magnitude = 64 - (single_unit - 1).leading_zeros();
    let sub_bucket_count = 1u64 << sub_bucket_magnitude;
    let unit_magnitude = 63 - lowest.leading_zeros();
    let mut smallest_untrackable = sub_bucket_count << unit_magnitude;
    let mut buckets = 1u64;
    while smallest_untrackable <= highest {
        if smallest_untrackable > u64::MAX / 2 {
            buckets += 1;
            break;
        }
        smallest_untrackable <<= 1;
        buckets += 1;
    }
    (buckets + 1) * (sub_bucket_count / 2)
}

/// What decoding `data` ([`LatencyHistogram::decode_base64`]) will cost, in work units (a
/// counts-array entry or a payload byte), read from its header alone: a document's total is
/// bounded before any histogram of it is decoded (see `ResultDoc::check_decode_work`).
pub fn decode_work(data: &str) -> Result<u64, HistogramError> {
    use std::io::Read;
    let bad = |e: &str| HistogramError::Decode(e.into());
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| HistogramError::Decode(e.to_string()))?;
    let mut header = [0u8; V2_HEADER];
    match be32(&bytes, 0) {
        Some(V2_COOKIE) => {
            header.copy_from_slice(bytes.get(..V2_HEADER).ok_or(bad("truncated histogram"))?)
        }
        Some(V2_DEFLATE_COOKIE) => flate2::read::ZlibDecoder::new(bytes.get(8..).unwrap_or(&[]))
            .read_exact(&mut header)
            .map_err(|_| bad("truncated histogram"))?,
        _ => return Err(bad("not an HdrHistogram V2 encoding")),
    }
    let payload = be32(&header, 4).unwrap_or(0) as u64;
    let room = match be32(&bytes, 0) {
        Some(V2_COOKIE) => bytes.len().saturating_sub(V2_HEADER) as u64,
        _ => MAX_INFLATED - V2_HEADER as u64,
    };
    if payload > room {
        return Err(bad("payload length beyond the data"));
    }
    let digits = be32(&header, 12).unwrap_or(0);
    let (lowest, highest) = (
        be64(&header, 16).unwrap_or(0),
        be64(&header, 24).unwrap_or(0),
    );
    if !(1..=4).contains(&digits) || lowest == 0 || highest > 1 << 53 || highest < 2 * lowest {
        return Err(bad("histogram bounds or precision out of range"));
    }
    Ok(payload + counts_len(digits, lowest, highest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decode_work_is_the_counts_array_hdrhistogram_allocates() {
        for (digits, lowest, highest) in [
            (3, 1, HIGHEST_TRACKABLE_NS),
            (2, 1, 1000),
            (4, 1, 1 << 53),
            (1, 1000, 1 << 40),
        ] {
            let h = Histogram::<u64>::new_with_bounds(lowest, highest, digits as u8).unwrap();
            assert_eq!(
                counts_len(digits, lowest, highest),
                h.distinct_values() as u64,
                "{digits} {lowest} {highest}"
            );
        }
        let mine = LatencyHistogram::new().encode_base64().unwrap();
        let work = decode_work(&mine).unwrap();
        assert!(work < 100_000, "{work}");
    }

    /// xorshift64*: deterministic pseudo-random samples without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    /// Nearest-rank percentile of a sorted slice: the reference the histogram must match.
    fn reference(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    fn assert_close(got: u64, want: u64, what: &str) {
        let tolerance = (want as f64 * 0.001).max(1.0);
        assert!(
            (got as f64 - want as f64).abs() <= tolerance,
            "{what}: histogram {got} vs reference {want}"
        );
    }

    #[test]
    fn percentiles_match_sorted_reference_on_random_data() {
        for (seed, spread) in [
            (1u64, 1_000u64),
            (7, 100_000),
            (42, 50_000_000),
            (99, 10_000_000_000),
        ] {
            let mut rng = Rng(seed);
            let mut h = LatencyHistogram::new();
            // Long-tailed data: mostly small, a few huge, like real wakeup latencies.
            let mut samples: Vec<u64> = (0..100_000)
                .map(|i| {
                    let base = rng.next() % spread;
                    if i % 997 == 0 {
                        base * 50
                    } else {
                        base
                    }
                })
                .collect();
            for &s in &samples {
                h.record(Nanos(s));
            }
            samples.sort_unstable();
            let s = h.summary();
            assert_eq!(s.count, samples.len() as u64);
            assert_eq!(s.min, samples[0]);
            assert_eq!(s.max, *samples.last().unwrap());
            let mean = samples.iter().map(|&v| v as f64).sum::<f64>() / samples.len() as f64;
            assert!((s.mean - mean).abs() < 1e-6 * mean.max(1.0));
            for (q, got) in [
                (0.5, s.p50),
                (0.9, s.p90),
                (0.99, s.p99),
                (0.999, s.p999),
                (0.9999, s.p9999),
            ] {
                assert_close(got, reference(&samples, q), &format!("seed {seed} q {q}"));
            }
        }
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn v2_header(payload: u32, digits: u32, lowest: u64, highest: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(V2_COOKIE.to_be_bytes());
        b.extend(payload.to_be_bytes());
        b.extend(0u32.to_be_bytes());
        b.extend(digits.to_be_bytes());
        b.extend(lowest.to_be_bytes());
        b.extend(highest.to_be_bytes());
        b.extend(1f64.to_bits().to_be_bytes());
        b
    }

    fn deflated(plain: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(plain).unwrap();
        let body = z.finish().unwrap();
        let mut b = V2_DEFLATE_COOKIE.to_be_bytes().to_vec();
        b.extend((body.len() as u32).to_be_bytes());
        b.extend(body);
        b
    }

    #[test]
    fn hostile_encodings_are_refused_before_anything_is_allocated_from_them() {
        // Regression (hardening #3): a 52-character string made `rtlab diff` allocate 267 MB
        // (the payload length was trusted before reading).
        let huge_payload = b64(&v2_header(u32::MAX, 3, 1, 1_000_000));
        assert!(huge_payload.len() <= 56);
        let err = LatencyHistogram::decode_base64(&huge_payload).unwrap_err();
        assert!(err.to_string().contains("payload length"), "{err}");
        let deflated_huge = b64(&deflated(&v2_header(u32::MAX, 3, 1, 1_000_000)));
        assert!(LatencyHistogram::decode_base64(&deflated_huge).is_err());
        // Bounds whose counts array would be gigabytes.
        for (digits, lowest, highest) in [(5, 1, u64::MAX / 2), (9, 1, 1000), (3, 0, 1000)] {
            let h = b64(&v2_header(0, digits, lowest, highest));
            let err = LatencyHistogram::decode_base64(&h).unwrap_err();
            assert!(err.to_string().contains("out of range"), "{err}");
        }
        // A deflate bomb: 64 MiB of zeros in ~64 KB.
        let mut bomb = v2_header(64 << 20, 3, 1, 1_000_000);
        bomb.resize(bomb.len() + (64 << 20), 0);
        let err = LatencyHistogram::decode_base64(&b64(&deflated(&bomb))).unwrap_err();
        assert!(err.to_string().contains("4 MiB"), "{err}");
        // A lying compressed length.
        let mut liar = deflated(&v2_header(0, 3, 1, 1_000_000));
        liar[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(LatencyHistogram::decode_base64(&b64(&liar)).is_err());
        assert!(LatencyHistogram::decode_base64(&b64(&[1, 2])).is_err());
    }

    #[test]
    fn encodings_of_the_reference_library_still_decode() {
        // HdrHistogram's own V2 deflate output at 3 and 4 digits, as other tools write it.
        for digits in [2u8, 3, 4] {
            let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, digits).unwrap();
            h.record_n(12_345, 10).unwrap();
            h.record(9_000_000).unwrap();
            let mut bytes = Vec::new();
            V2DeflateSerializer::new()
                .serialize(&h, &mut bytes)
                .unwrap();
            let back = LatencyHistogram::decode_base64(&b64(&bytes)).unwrap();
            assert_eq!(back.len(), 11, "{digits} digits");
        }
    }

    #[test]
    fn empty_histogram_summary_is_all_zero() {
        let s = LatencyHistogram::new().summary();
        assert_eq!(
            (s.count, s.min, s.p50, s.p99, s.max, s.missed),
            (0, 0, 0, 0, 0, 0)
        );
        assert_eq!(s.mean, 0.0);
    }

    #[test]
    fn single_sample_is_every_percentile() {
        let mut h = LatencyHistogram::new();
        h.record(Nanos(12_345));
        let s = h.summary();
        assert_eq!(
            (s.count, s.min, s.p50, s.p9999, s.max),
            (1, 12_345, 12_345, 12_345, 12_345)
        );
    }

    #[test]
    fn identical_samples_are_exact() {
        let mut h = LatencyHistogram::new();
        for _ in 0..10_000 {
            h.record(Nanos(777_777));
        }
        let s = h.summary();
        assert_eq!(
            (s.min, s.p50, s.p99, s.max),
            (777_777, 777_777, 777_777, 777_777)
        );
        assert_eq!(s.stddev, 0.0);
    }

    #[test]
    fn thirty_second_stall_is_recorded_not_dropped() {
        let mut h = LatencyHistogram::new();
        for _ in 0..999 {
            h.record(Nanos(20_000));
        }
        h.record(Nanos::from_secs(30));
        let s = h.summary();
        assert_eq!(s.count, 1000);
        assert_eq!(s.max, 30_000_000_000);
        assert_close(
            h.value_at_quantile(0.9995).get(),
            30_000_000_000,
            "stall percentile",
        );
        // Past the 1-hour range the buckets saturate but the exact max survives.
        h.record(Nanos::from_secs(7_200));
        assert_eq!(h.summary().max, 7_200_000_000_000);
        assert_eq!(h.len(), 1001);
    }

    #[test]
    fn periodic_overrun_records_the_missed_periods() {
        let mut h = LatencyHistogram::new();
        // 3.5 intervals late: periods +1, +2, +3 had already passed.
        let missed = h.record_periodic(Nanos(3_500), Nanos(1_000));
        assert_eq!(missed, 3);
        let s = h.summary();
        assert_eq!((s.count, s.missed, s.raw_count), (4, 3, 1));
        assert_eq!((s.min, s.max), (500, 3_500));
        // On time: nothing synthesised.
        assert_eq!(h.record_periodic(Nanos(999), Nanos(1_000)), 0);
        assert_eq!(h.summary().raw_count, 2);
    }

    #[test]
    fn base64_round_trip_keeps_the_distribution() {
        let mut h = LatencyHistogram::new();
        let mut rng = Rng(5);
        for _ in 0..10_000 {
            h.record(Nanos(rng.next() % 5_000_000));
        }
        let back = LatencyHistogram::decode_base64(&h.encode_base64().unwrap()).unwrap();
        assert_eq!(back.len(), h.len());
        for q in [0.5, 0.99, 0.9999] {
            assert_close(
                back.value_at_quantile(q).get(),
                h.value_at_quantile(q).get(),
                "decoded",
            );
        }
        assert!(LatencyHistogram::decode_base64("not base64!").is_err());
    }

    #[test]
    fn hgrm_has_header_rows_and_footer() {
        let mut h = LatencyHistogram::new();
        for v in 1..=1000 {
            h.record(Nanos(v * 1000));
        }
        let mut out = Vec::new();
        h.write_hgrm(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)"));
        assert!(
            text.contains("#[Max     =     1000.000, Total count    =         1000]"),
            "{text}"
        );
        let last_row = text
            .lines()
            .rfind(|l| !l.starts_with('#') && !l.is_empty())
            .unwrap();
        assert!(last_row.contains("1.000000000000"), "{last_row}");
    }

    #[test]
    fn live_histogram_tracks_quantiles_coarsely() {
        let live = LiveHistogram::new();
        assert_eq!(live.approx_quantile(0.5), None);
        for v in 1..=10_000u64 {
            live.record(Nanos(v * 100));
        }
        assert_eq!(live.count(), 10_000);
        assert_eq!(live.min_max(), Some((Nanos(100), Nanos(1_000_000))));
        let p50 = live.approx_quantile(0.5).unwrap().get() as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.13, "{p50}");
        assert_eq!(live.approx_quantile(1.0), Some(Nanos(1_000_000)));
        // Every bucket's upper bound maps back into the same bucket.
        for i in 0..LIVE_BUCKETS - 1 {
            assert_eq!(
                LiveHistogram::index(LiveHistogram::upper_bound(i)),
                i,
                "bucket {i}"
            );
        }
    }

    #[test]
    fn cumulative_counts_are_prometheus_buckets() {
        let mut h = LatencyHistogram::compact();
        for ns in [500, 1_000, 1_500, 20_000, 20_000, 7_000_000] {
            h.record(Nanos(ns));
        }
        assert_eq!(
            h.cumulative_counts(&[1_000, 10_000, 100_000, 1_000_000]),
            vec![2, 3, 5, 5]
        );
        assert_eq!(h.sum_ns(), 7_043_000);
        assert!(LatencyHistogram::new()
            .cumulative_counts(&[1])
            .iter()
            .all(|&c| c == 0));
    }
}
