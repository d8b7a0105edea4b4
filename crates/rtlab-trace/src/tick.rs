//! The scheduler tick's grid on a CPU, from the expiries of its ticks: a busy CPU takes a tick
//! at every point of it, so a silence across one is time the CPU took no interrupt.

/// The periodic scheduler tick: at `phase_ns + k * period_ns` on every CPU not idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    pub period_ns: u64,
    pub phase_ns: u64,
}

/// How late a tick may come before it counts as missed (its own entry path and jitter).
pub(crate) const TICK_SLACK_NS: u64 = 100_000;

/// Whether a timer expiry is the scheduler tick's.
pub fn is_tick(function: &str) -> bool {
    function.starts_with("tick_")
}

/// A CPU's tick grid from the expiry times of its ticks (in time order): the period is the
/// step most successive ticks take (one of the kernel's HZ choices), the phase the median of
/// their times modulo it. Each CPU has its own (`skew_tick=1` staggers them). None when too
/// few ticks agree.
pub fn tick_grid(ticks: &[u64]) -> Option<Tick> {
    const PERIODS: [u64; 4] = [1_000_000, 3_333_333, 4_000_000, 10_000_000];
    let mut votes = [0usize; 4];
    for w in ticks.windows(2) {
        let d = w[1].saturating_sub(w[0]);
        if let Some(i) = PERIODS.iter().position(|&p| d.abs_diff(p) < p / 50) {
            votes[i] += 1;
        }
    }
    let (i, &n) = votes.iter().enumerate().max_by_key(|&(_, n)| *n)?;
    if n < 3 {
        return None;
    }
    let period_ns = PERIODS[i];
    // Offsets from the first tick's residue, wrapped to (-period/2, period/2].
    let r0 = ticks.first()? % period_ns;
    let mut offsets: Vec<i64> = ticks
        .iter()
        .map(|t| {
            let d = (t % period_ns + period_ns - r0) % period_ns;
            if d > period_ns / 2 {
                d as i64 - period_ns as i64
            } else {
                d as i64
            }
        })
        .collect();
    offsets.sort_unstable();
    let median = offsets[offsets.len() / 2];
    let phase_ns = (r0 as i64 + median).rem_euclid(period_ns as i64) as u64;
    Some(Tick {
        period_ns,
        phase_ns,
    })
}

impl Tick {
    /// The first point of the grid after `t`.
    pub(crate) fn next_after(&self, t: u64) -> u64 {
        let k = t.saturating_sub(self.phase_ns) / self.period_ns + 1;
        self.phase_ns + k * self.period_ns
    }
}
