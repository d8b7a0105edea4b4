//! A loom model of the ring's sleep/wake protocol (module docs, "Sleep/wake"), as tokio keeps
//! `runtime/tests/loom_*.rs`: the model checker runs every interleaving of a side about to
//! sleep and its peer moving, under the C11 memory model (loom keeps old stores visible to
//! relaxed and acquire loads, so it finds store-buffering outcomes), and a wake-up lost there
//! leaves the sleeper blocked for ever, which loom reports as a deadlock. (In the ring such a
//! sleep ends at the next liveness check, 10 ms later.)
//!
//! It models the protocol, not the code: the steps of [`ShmChannel::wait`](super::ShmChannel)
//! and of a publish or consume followed by `wake_sleeper`, each access with the ordering the
//! code uses, over loom's atomics and a futex made of a loom mutex and condvar.
//!
//! **The membarrier.** `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` runs a full barrier on
//! every CPU that runs a registered process, by an interrupt, and returns once all have run
//! it; a registered thread off its CPU meets a full barrier in the context switch instead. So
//! to the consumer it is a full barrier at *some* point of its program, a point it does not
//! choose. Modelled as that: the producer's call asks ([`Membarrier::call`]) and waits until
//! the consumer has taken the interrupt or is off its CPU; the consumer may take it at every
//! step ([`Membarrier::interrupt_point`]: a SeqCst fence, then the answer), and loom chooses
//! the step by choosing when the producer's request becomes visible. The other ways of
//! writing it down were rejected: a SeqCst fence fixed between the consumer's store and load
//! is the fenced protocol, not this one (it puts the barrier where the consumer would put it
//! and tests nothing the membarrier adds); a fence "in both threads at the barrier point"
//! assumes the interrupt lands between the two accesses. The handshake's release and acquire
//! carry the ordering as the interrupt does on a CPU (the caller's barrier before the request,
//! the handler's after it); what the model tests is that the consumer's store of `tail` and
//! its read of the flag both fall on one side of that point, in program order: the
//! `compiler_fence` in `Receiver::recv`. [`consumer_reordered_loses_the_wake`] shows the same
//! membarrier failing when the compiler (or a JIT, the Java binding's reason to fence) moves
//! the read above the store.

use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use loom::sync::Mutex;
use loom::thread::{self, Thread};
use std::sync::atomic::{AtomicUsize as Count, Ordering::Relaxed};

/// FUTEX_WAIT / FUTEX_WAKE on one word: the kernel compares the word with the expected value
/// under the hash bucket's lock and queues the sleeper there, and a waker takes the same lock,
/// so a wake either finds the sleeper queued or the sleeper finds the word already changed.
/// (Parking, not a condvar: a sleeper left blocked holds no lock guard, so loom's report of
/// the deadlock unwinds cleanly.)
struct Futex {
    word: AtomicU32,
    bucket: Mutex<Option<Thread>>,
    woken: AtomicBool,
}

impl Futex {
    fn new() -> Self {
        Futex {
            word: AtomicU32::new(0),
            bucket: Mutex::new(None),
            woken: AtomicBool::new(false),
        }
    }

    /// Sleeps while the word is `expected`, until a wake; true if it slept.
    fn wait(&self, expected: u32) -> bool {
        {
            let mut queue = self.bucket.lock().unwrap();
            if self.word.load(Ordering::Relaxed) != expected {
                return false;
            }
            self.woken.store(false, Ordering::Relaxed);
            *queue = Some(thread::current());
        }
        while !self.woken.load(Ordering::Acquire) {
            thread::park();
        }
        true
    }

    fn wake(&self) {
        if let Some(sleeper) = self.bucket.lock().unwrap().take() {
            self.woken.store(true, Ordering::Release);
            sleeper.unpark();
        }
    }
}

/// `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` with one registered thread (the module docs
/// say why it is modelled this way). Each call asks anew: a producer that sleeps twice calls
/// it twice, and an interrupt taken for the first call does nothing for the second.
struct Membarrier {
    /// Calls made so far.
    requested: AtomicUsize,
    /// The last call the consumer took the interrupt for.
    served: AtomicUsize,
    /// The consumer has left its CPU for good.
    off_cpu: AtomicBool,
    /// The consumer's step at which it last took an interrupt (0: none), for coverage.
    served_at: AtomicUsize,
}

impl Membarrier {
    fn new() -> Self {
        Membarrier {
            requested: AtomicUsize::new(0),
            served: AtomicUsize::new(0),
            off_cpu: AtomicBool::new(false),
            served_at: AtomicUsize::new(0),
        }
    }

    /// The caller's side: a full barrier, the interrupt, a wait for it, a full barrier.
    fn call(&self) {
        fence(Ordering::SeqCst);
        // Only the producer calls: a load and a store are its fetch_add.
        let call = self.requested.load(Ordering::Relaxed) + 1;
        self.requested.store(call, Ordering::Release);
        while self.served.load(Ordering::Acquire) < call && !self.off_cpu.load(Ordering::Acquire) {
            thread::yield_now();
        }
        fence(Ordering::SeqCst);
    }

    /// The consumer's side, between any two of its steps: the interrupt, if a call is pending.
    fn interrupt_point(&self, step: usize) {
        let call = self.requested.load(Ordering::Acquire);
        if call > self.served.load(Ordering::Relaxed) {
            fence(Ordering::SeqCst);
            self.served_at.store(step, Ordering::Relaxed);
            self.served.store(call, Ordering::Release);
        }
    }

    /// The consumer leaves its CPU (here: its last step): a context switch is a full
    /// barrier, and later calls need no interrupt.
    fn off_cpu(&self) {
        fence(Ordering::SeqCst);
        self.off_cpu.store(true, Ordering::Release);
    }
}

/// What the side about to sleep does between storing its waiting flag and re-reading.
#[derive(Clone, Copy, Debug)]
enum SleeperBarrier {
    /// `fence(SeqCst)` (a consumer on an empty ring; a producer without the membarrier).
    Fence,
    /// `membarrier(GLOBAL_EXPEDITED)` (a producer on a full ring, `wake_barrier` 1).
    Membarrier,
    /// Nothing: the barrier removed.
    Removed,
}

/// What the moving side does between storing its position and reading the sleeper's flag.
#[derive(Clone, Copy, Debug)]
enum MoverOrder {
    /// `fence(SeqCst)` (every producer; a consumer when `wake_barrier` is 0).
    Fence,
    /// Program order only (`compiler_fence`: a consumer when `wake_barrier` is 1).
    ProgramOrder,
    /// The read moved above the store (what `compiler_fence` forbids).
    Reordered,
}

/// One side finds the ring full (or empty: the same steps with the roles swapped) and goes to
/// sleep on its flag while the other side moves its position once and wakes it if flagged.
/// The sleeper must end up seeing the move; a lost wake-up is a deadlock.
fn wake_protocol(sleeper: SleeperBarrier, mover: MoverOrder) -> &'static Coverage {
    let coverage: &'static Coverage = Box::leak(Box::default());
    let mut builder = loom::model::Builder::new();
    // Past a bound of 12 preemptions the count of executions stops growing (the membarrier
    // model: 1483 at 8, 1565 at 12, 16 and 24), so 16 explores all of them, in about 0.1 s.
    // Not unbounded: loom 0.7.3 then explored fewer (573, none interrupted before the store).
    builder.preemption_bound = Some(16);
    builder.check(move || {
        // `position` is `tail` (or a stamp); `flag` is `producer_waiting` (or the consumer's).
        // Leaked, not in loom's Arc: a sleeper left blocked by a lost wake-up is dropped
        // outside loom's runtime when loom reports it, where a loom Arc cannot be released.
        let position: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let flag: &'static Futex = Box::leak(Box::new(Futex::new()));
        let barrier: &'static Membarrier = Box::leak(Box::new(Membarrier::new()));

        let sleeper_thread = thread::spawn(move || {
            let mut slept = false;
            // ShmChannel::wait's steps, looped as `send_locked` loops until the ring fits.
            while position.load(Ordering::Acquire) == 0 {
                flag.word.store(1, Ordering::Relaxed);
                match sleeper {
                    SleeperBarrier::Fence => fence(Ordering::SeqCst),
                    SleeperBarrier::Membarrier => barrier.call(),
                    SleeperBarrier::Removed => {}
                }
                if position.load(Ordering::Acquire) != 0 {
                    flag.word.store(0, Ordering::Relaxed);
                    break;
                }
                slept |= flag.wait(1);
                flag.word.store(0, Ordering::Relaxed);
            }
            slept
        });

        // The mover: a consume (or publish), then `wake_sleeper`.
        let irq = |step| barrier.interrupt_point(step);
        irq(1);
        let flagged = if let MoverOrder::Reordered = mover {
            let flagged = flag.word.load(Ordering::Relaxed);
            irq(2);
            position.store(16, Ordering::Release);
            flagged
        } else {
            position.store(16, Ordering::Release);
            irq(2);
            if let MoverOrder::Fence = mover {
                fence(Ordering::SeqCst);
            }
            flag.word.load(Ordering::Relaxed)
        };
        irq(3);
        if flagged == 1 {
            flag.word.store(0, Ordering::Relaxed);
            flag.wake();
        }
        barrier.off_cpu();
        let slept = sleeper_thread.join().unwrap();
        coverage.record(slept, barrier.served_at.load(Ordering::Relaxed));
    });
    coverage
}

/// What the explored executions did, so that a passing model shows it reached the cases that
/// matter (a model that never let the sleeper sleep would pass without testing anything).
#[derive(Debug, Default)]
struct Coverage {
    executions: Count,
    /// Executions in which the sleeper slept in the futex and was woken.
    woken: Count,
    /// Executions whose membarrier interrupt the consumer took at step 1, 2, 3 (before the
    /// store, between store and load, after the load); 0: off its CPU, or no membarrier.
    interrupted_at: [Count; 4],
}

impl Coverage {
    fn record(&self, slept: bool, served_at: usize) {
        self.executions.fetch_add(1, Relaxed);
        self.woken.fetch_add(slept as usize, Relaxed);
        self.interrupted_at[served_at].fetch_add(1, Relaxed);
    }

    fn woken(&self) -> usize {
        self.woken.load(Relaxed)
    }

    fn interrupted_at(&self, step: usize) -> usize {
        self.interrupted_at[step].load(Relaxed)
    }
}

/// Format 4's full ring: the producer calls membarrier, the consumer only keeps program order.
#[test]
fn membarrier_wakes_a_producer_on_a_full_ring() {
    let seen = wake_protocol(SleeperBarrier::Membarrier, MoverOrder::ProgramOrder);
    assert!(seen.woken() > 0, "the producer never slept: {seen:?}");
    for step in 1..=3 {
        assert!(
            seen.interrupted_at(step) > 0,
            "no interrupt at step {step}: {seen:?}"
        );
    }
}

/// A ring without the membarrier (`wake_barrier` 0), and every consumer sleeping on an empty
/// ring: both sides fence.
#[test]
fn fences_on_both_sides_wake_the_sleeper() {
    let seen = wake_protocol(SleeperBarrier::Fence, MoverOrder::Fence);
    assert!(seen.woken() > 0, "the sleeper never slept: {seen:?}");
}

/// The model can fail: take the producer's membarrier away and the fenceless consumer misses
/// the flag while the producer misses the new `tail` (store buffering), and the producer
/// sleeps with room in the ring.
#[test]
#[should_panic(expected = "deadlock")]
fn without_the_membarrier_the_wake_is_lost() {
    wake_protocol(SleeperBarrier::Removed, MoverOrder::ProgramOrder);
}

/// A fence on one side only is no better: the consumer must fence when the producer does not
/// call membarrier (why `wake_barrier` 0 makes both fence).
#[test]
#[should_panic(expected = "deadlock")]
fn a_fence_on_the_sleeper_alone_loses_the_wake() {
    wake_protocol(SleeperBarrier::Fence, MoverOrder::ProgramOrder);
}

/// The membarrier needs the consumer's store before its read in program order: moved above
/// the store, the read can come before the barrier point and the store after it.
#[test]
#[should_panic(expected = "deadlock")]
fn consumer_reordered_loses_the_wake() {
    wake_protocol(SleeperBarrier::Membarrier, MoverOrder::Reordered);
}
