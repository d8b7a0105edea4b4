//! The shared-memory boundary under arbitrary scribbles: whatever a peer writes into the
//! header or ring (positions, lengths, markers, pids, the producer lock), the other side's
//! calls return (a message, `Corrupt`, `TimedOut`, `PeerDied` ...) within their deadline and
//! never read or write outside the mapping.

use super::*;
use proptest::prelude::*;

const CAPACITY: usize = 4096;
const MAX: usize = 256;
const DEADLINE_NS: u64 = 2_000_000;
/// Generous: scheduling noise, not a performance bound. A call that ignored its deadline
/// would spin (its own CPU time grows past this) or sleep forever (its wall time passes
/// [`HANG_NS`]); one the machine did not run meanwhile (beside a storm of other work) did
/// neither, so its wall time alone is held only to the hang bound.
const LATE_NS: u64 = 500_000_000;
const HANG_NS: u64 = 20_000_000_000;

/// The calling thread's CPU time.
fn cpu_now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[derive(Debug, Clone)]
enum Scribble {
    /// An 8-byte value at a byte offset of the header.
    Header(usize, u64),
    /// An 8-byte value at an 8-aligned offset of the ring.
    Ring(usize, u64),
    /// A plausible-looking value: a position near the current ones.
    Position(bool, u64),
}

fn scribble() -> impl Strategy<Value = Scribble> {
    prop_oneof![
        (0..HEADER_LEN - 8, any::<u64>()).prop_map(|(o, v)| Scribble::Header(o, v)),
        (
            0..CAPACITY / 8,
            prop_oneof![any::<u64>(), 0..2048u64, Just(WRAP as u64)]
        )
            .prop_map(|(o, v)| Scribble::Ring(o * 8, v)),
        (any::<bool>(), 0..3 * CAPACITY as u64).prop_map(|(h, v)| Scribble::Position(h, v)),
    ]
}

fn apply(ch: &ShmChannel, s: &Scribble) {
    let base = ch.region.as_ptr();
    // SAFETY: test-only writes inside the channel's own mapping (offsets are bounded by
    // the strategies), as a hostile peer process could make.
    unsafe {
        match *s {
            Scribble::Header(o, v) => (base.add(o) as *mut u64).write_unaligned(v),
            Scribble::Ring(o, v) => (base.add(HEADER_LEN + o) as *mut u64).write_volatile(v),
            Scribble::Position(true, v) => ch.header().head.store(v, Ordering::Relaxed),
            Scribble::Position(false, v) => ch.header().tail.store(v, Ordering::Relaxed),
        }
    }
}

fn bounded<T>(what: &str, f: impl FnOnce(Option<u64>) -> T) -> T {
    let (start, cpu_start) = (monotonic_now_ns(), cpu_now_ns());
    let out = f(Some(start + DEADLINE_NS));
    let (took, ran) = (monotonic_now_ns() - start, cpu_now_ns() - cpu_start);
    assert!(
        ran < DEADLINE_NS + LATE_NS,
        "{what} ran {ran} ns (in {took} ns)"
    );
    assert!(took < HANG_NS, "{what} took {took} ns");
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn scribbles_never_crash_or_hang_either_side(
        mpsc in any::<bool>(),
        sizes in proptest::collection::vec(0..=MAX, 0..24),
        scribbles in proptest::collection::vec(scribble(), 1..6),
    ) {
        let variant = if mpsc { Variant::Mpsc } else { Variant::Spsc };
        let ch = ShmChannel::create_anonymous(
            &ChannelOptions::new(CAPACITY, MAX).variant(variant),
        ).unwrap();
        let (tx, rx) = (ch.sender().unwrap(), ch.receiver().unwrap());
        let mut buf = [0u8; MAX];
        for (i, &size) in sizes.iter().enumerate() {
            let _ = tx.try_send(&vec![i as u8; size]);
            if i % 3 == 2 {
                let _ = rx.try_recv(&mut buf);
            }
        }
        for s in &scribbles {
            apply(&ch, s);
        }
        for round in 0..8 {
            let got = bounded("recv", |d| rx.recv(&mut buf, d));
            if let Ok(n) = got {
                prop_assert!(n <= MAX, "length {n} past the maximum");
            }
            let msg = vec![round as u8; sizes.get(round).copied().unwrap_or(8)];
            let _ = bounded("send", |d| tx.send(&msg, d));
        }
    }
}
