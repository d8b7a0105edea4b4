//! The thresholds of the wait model ([`crate::model`]) and of a Java thread's view of it, in
//! one place, each with the reason for its value. Their orderings are checked when the crate
//! compiles; each rule's name is in the code that applies it and in a test of it (checked by
//! this module's test).

/// The model's thresholds.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// A waking this soon after a file or signal timer fired on the same CPU is that timer's
    /// (the same interrupt: a few microseconds; far more, with no switch between, is not).
    pub timer_wakes_within_ns: u64,
    /// A sleep timer whose expiry is this far from the time the call asked for belongs to
    /// another call (this one's own events were lost): nothing is measured from it. A
    /// relative sleep's time counts from its entry, the kernel arms its timer microseconds
    /// later; a millisecond is far outside that and far inside a period.
    pub asked_off_expiry_ns: u64,
    /// The most expiries of a periodic file or signal timer one wait takes at once (a bound
    /// on the work of one return, far above a late loop's: 10 s of a 1 ms timer).
    pub grid_max_taken: usize,
    /// A thread's timer delays that begin this close (percent) to the same interval twice in
    /// a row give its period.
    pub period_agree_pct: u64,
    /// How long before its probe a Java clock read's value may be (the probe fires at the
    /// clock's return: the host may stop the vCPU in between). More: the read is at its
    /// probe.
    pub read_before_probe_ns: u64,
    /// How far behind the newest drain events are merged in time order (the rings are
    /// drained one CPU after another; a record written during a drain is read by the next).
    pub merge_lag_ns: u64,
    /// A clock read this long before a park's begin probe is the one the park's time was
    /// computed from (`parkNanos(deadline - System.nanoTime())`: microseconds, more where
    /// the host stops the vCPU in between).
    pub before_park_ns: u64,
    /// A read up to this long before the park's begin probe is its base where the two give
    /// the thread's next period.
    pub stalled_before_park_ns: u64,
    /// How near a periodic thread's period a park's time from a read must be to be computed
    /// from it (exact where the read is the thread's own; microseconds off where the period
    /// was learned at probes).
    pub on_period_ns: u64,
    /// A read after a park's end probe is the park's while the thread ran at most this long
    /// since (the host may stop the vCPU there too).
    pub after_park_ns: u64,
    /// A thread whose last `prompt_parks` parks were each read within `prompt_read_ns` of
    /// their return measures itself right after each park; a later read of such a thread,
    /// up to `stalled_after_park_ns`, was held back by the host and counts.
    pub prompt_read_ns: u64,
    pub prompt_parks: u32,
    pub stalled_after_park_ns: u64,
    /// How far before the kernel's deadline a park's own may be, past the time from its
    /// clock read to its wait call (more: not this wait's).
    pub park_deadline_ns: u64,
    /// How close to a safepoint's end a Java thread's wait at its barrier is woken (the VM
    /// thread wakes them, then fires its end probe; later on a busy machine).
    pub barrier_ns: u64,
    /// A readiness wait's timeout that expired at most this long past a whole number of
    /// milliseconds from the call's entry was given in milliseconds (the kernel reads its
    /// clock microseconds after the entry's event; a timeout in finer units lands there one
    /// time in twenty at most).
    pub whole_ms_within_ns: u64,
    /// How many such waits a thread makes before its timeouts are taken as whole ms.
    pub whole_ms_waits: u64,
    /// The most woken returns a Java thread makes in one safepoint on its way to the barrier
    /// (a lock handed over on the way back, then the barrier's); more, it runs through it.
    pub max_returns_to_barrier: u32,
}

/// The rules the watch applies.
pub const RULES: Rules = Rules {
    timer_wakes_within_ns: 100_000,
    asked_off_expiry_ns: 1_000_000,
    grid_max_taken: 10_000,
    period_agree_pct: 5,
    read_before_probe_ns: 10_000_000,
    merge_lag_ns: 20_000_000,
    before_park_ns: 1_000_000,
    stalled_before_park_ns: 20_000_000,
    on_period_ns: 10_000,
    after_park_ns: 1_000_000,
    prompt_read_ns: 50_000,
    prompt_parks: 16,
    stalled_after_park_ns: 20_000_000,
    park_deadline_ns: 1_000_000,
    barrier_ns: 1_000_000,
    max_returns_to_barrier: 3,
    whole_ms_within_ns: 50_000,
    whole_ms_waits: 20,
};

// The orderings the rules rely on.
const _: () = {
    let r = RULES;
    // A clock read moved back to its value stays within the merge's lag: the merge still
    // orders it among the events around it.
    assert!(r.read_before_probe_ns < r.merge_lag_ns);
    // The reads that may be a park's base: the near one first, the stalled one further back.
    assert!(r.before_park_ns < r.stalled_before_park_ns);
    assert!(r.stalled_before_park_ns <= r.merge_lag_ns);
    // After a park: prompt is a fraction of the ordinary bound, the stalled one beyond it.
    assert!(r.prompt_read_ns < r.after_park_ns);
    assert!(r.after_park_ns < r.stalled_after_park_ns);
    // A deadline on a period is far closer than a prompt read.
    assert!(r.on_period_ns < r.prompt_read_ns);
    // A timer's own waking is within its interrupt: far less than a call's expiry may be off.
    assert!(r.timer_wakes_within_ns < r.asked_off_expiry_ns);
    // A period is learned only where two intervals agree within a fraction of it.
    assert!(r.period_agree_pct > 0 && r.period_agree_pct < 50);
    assert!(r.max_returns_to_barrier >= 2 && r.prompt_parks >= 2);
    // Whole milliseconds told apart from finer timeouts: a small part of a millisecond.
    assert!(r.whole_ms_within_ns * 10 < 1_000_000 && r.whole_ms_waits >= 10);
};

#[cfg(test)]
mod tests {
    /// Every rule is documented, applied in the code and named in a test.
    #[test]
    fn every_rule_is_documented_applied_and_tested() {
        let me = include_str!("rules.rs");
        let code = [
            include_str!("lib.rs"),
            include_str!("handlers.rs"),
            include_str!("model/mod.rs"),
            include_str!("clock.rs"),
            include_str!("java.rs"),
            include_str!("series.rs"),
        ]
        .concat();
        let tests = [
            include_str!("tests.rs"),
            include_str!("tests/clock.rs"),
            include_str!("model/tests.rs"),
        ]
        .concat();
        let start = me.find("pub struct Rules {").expect("the struct");
        let end = start + me[start..].find("\n}").expect("its end");
        let fields: Vec<&str> = me[start..end]
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub "))
            .filter_map(|l| l.split(':').next())
            .filter(|name| !name.starts_with("struct"))
            .collect();
        assert!(fields.len() >= 15, "{fields:?}");
        for f in fields {
            let used = format!("RULES.{f}");
            let in_code = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .any(|l| l.contains(&used));
            assert!(in_code, "rule {f} is applied nowhere");
            assert!(tests.contains(&used), "rule {f} is named in no test");
            let doc = me.contains(&format!("`{f}`")) || {
                let at = me.find(&format!("pub {f}:")).expect("field");
                me[..at]
                    .trim_end()
                    .lines()
                    .last()
                    .is_some_and(|l| l.contains("///"))
            };
            assert!(doc, "rule {f} has no doc");
        }
    }
}
