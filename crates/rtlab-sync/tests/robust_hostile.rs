//! RobustMutex against a hostile shared-memory peer and against safe-code misuse
//! (hardening issue, items 5 and 6): a peer that rewrites the list words of a mutex this
//! thread holds gets no write anywhere; a forgotten guard never leaves a dangling entry.
#![allow(unsafe_code)]

mod common;

use common::iterations;
use rtlab_sync::{RobustError, RobustGuard, RobustMutex, MAX_HELD};
use rtlab_sys::pthread::{PthreadGuard, PthreadKind, PthreadMutex};
use rtlab_sys::robust::current_robust_list;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Offsets of the list words inside a `RobustMutex` (the kernel/glibc layout).
const PREV: usize = 24;
const NEXT: usize = 32;

fn head_addr() -> usize {
    let head = current_robust_list().unwrap().unwrap();
    // SAFETY: the registered head lives as long as this thread.
    &unsafe { head.as_ref() }.list as *const AtomicUsize as usize
}

fn list_first() -> usize {
    // SAFETY: the head's `list` field of this live thread.
    unsafe { (*(head_addr() as *const AtomicUsize)).load(Ordering::Relaxed) }
}

/// The entries of this thread's list, front first (PI bit cleared), as the kernel would walk it.
fn walk() -> Vec<usize> {
    let head = head_addr();
    let mut out = Vec::new();
    let mut node = list_first() & !1;
    while node != head {
        out.push(node);
        assert!(out.len() <= 64, "the list does not come back to its head");
        // SAFETY: every node of this thread's list is a live mutex's `next` field.
        node = unsafe { (*(node as *const AtomicUsize)).load(Ordering::Relaxed) } & !1;
    }
    out
}

fn entry_of(m: &RobustMutex) -> usize {
    m as *const RobustMutex as usize + NEXT
}

/// What a peer sharing the mapping can do: rewrite the words at `offset` of `m`.
fn scribble(m: &RobustMutex, offset: usize, value: usize) {
    let word = (m as *const RobustMutex as usize + offset) as *const AtomicUsize;
    // SAFETY: inside the mutex (64 bytes); the word is an atomic in shared memory.
    unsafe { (*word).store(value, Ordering::Relaxed) };
}

/// Words a successful attack would overwrite; never written by anyone.
struct Canaries([AtomicUsize; 8]);

impl Canaries {
    const VALUE: usize = 0x5a5a_5a5a_5a5a_5a5a;
    fn new() -> Self {
        Canaries(std::array::from_fn(|_| AtomicUsize::new(Self::VALUE)))
    }
    /// The address of canary `i`, offset so that either unlink write (`*prev = next`,
    /// `*(next - 8) = prev`) lands on one.
    fn target(&self, i: usize, for_next: bool) -> usize {
        let a = &self.0[i % 8] as *const AtomicUsize as usize;
        if for_next {
            a + 8
        } else {
            a
        }
    }
    fn check(&self, when: &str) {
        for (i, c) in self.0.iter().enumerate() {
            assert_eq!(
                c.load(Ordering::Relaxed),
                Self::VALUE,
                "{when}: canary {i} was overwritten through a rewritten list word"
            );
        }
    }
}

/// Shared mutexes at the start of a fresh `MAP_SHARED` mapping, as rtlab-ipc places them.
struct SharedMutexes {
    map: rtlab_sys::mem::AnonMapping,
    n: usize,
}

impl SharedMutexes {
    fn new(n: usize) -> Self {
        let map = rtlab_sys::mem::AnonMapping::new_shared(4096).unwrap();
        assert!(n * 64 <= 4096);
        for i in 0..n {
            // SAFETY: inside the fresh, page-aligned mapping; 64-byte slots.
            unsafe {
                (map.as_ptr().add(i * 64) as *mut RobustMutex).write(RobustMutex::new_shared())
            };
        }
        SharedMutexes { map, n }
    }
    fn get(&self, i: usize) -> Pin<&RobustMutex> {
        assert!(i < self.n);
        // SAFETY: written in `new`; the mapping outlives the borrow and never moves.
        unsafe { Pin::new_unchecked(&*(self.map.as_ptr().add(i * 64) as *const RobustMutex)) }
    }
}

#[test]
fn a_peer_rewriting_the_list_words_of_a_held_mutex_gets_no_write() {
    std::thread::spawn(|| {
        let canaries = Canaries::new();
        let shared = SharedMutexes::new(3);
        let before = list_first();
        let (a, b, c) = (shared.get(0), shared.get(1), shared.get(2));
        let ga = a.lock().unwrap();
        let gb = b.lock().unwrap();
        let gc = c.lock().unwrap();
        // A child process (the peer) rewrites b's words while this thread holds it.
        let b_ref: &RobustMutex = &b;
        let (prev, next) = (canaries.target(0, false), canaries.target(1, true));
        // SAFETY: the child only stores into the shared mapping and exits.
        let child = unsafe {
            rtlab_sys::process::fork_child(|| {
                scribble(b_ref, PREV, prev);
                scribble(b_ref, NEXT, next);
                0
            })
        }
        .unwrap();
        assert_eq!(rtlab_sys::process::wait_child(child).unwrap(), 0);
        drop(gb); // from the middle: both neighbours are written
        canaries.check("after unlocking the rewritten mutex");
        assert_eq!(
            walk(),
            vec![entry_of(&c), entry_of(&a)],
            "list repaired around b"
        );
        drop(gc);
        drop(ga);
        canaries.check("after unlocking its neighbours");
        assert_eq!(list_first(), before, "the list is empty again");
        assert!(b.lock().is_ok(), "b was released");
    })
    .join()
    .unwrap();
}

/// xorshift64: the tests' reproducible randomness.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn random_lock_unlock_and_rewrites_never_write_outside_the_held_mutexes() {
    let steps = iterations(20_000);
    std::thread::spawn(move || {
        let canaries = Canaries::new();
        let shared = SharedMutexes::new(8);
        let before = list_first();
        let mut held: Vec<Option<RobustGuard<'_>>> = (0..8).map(|_| None).collect();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for step in 0..steps {
            let r = next_random(&mut rng);
            let i = (r % 8) as usize;
            match (r >> 8) % 3 {
                0 | 1 => {
                    if held[i].take().is_none() {
                        held[i] = Some(shared.get(i).lock().unwrap());
                    }
                    canaries.check(&format!("step {step}"));
                }
                _ => {
                    // The peer rewrites any held mutex's words (they are in shared memory).
                    if held[i].is_some() {
                        let word = if r & (1 << 20) != 0 { PREV } else { NEXT };
                        let target = canaries.target((r >> 24) as usize, word == NEXT);
                        scribble(&shared.get(i), word, target);
                    }
                }
            }
        }
        held.iter_mut().for_each(|g| drop(g.take()));
        canaries.check("at the end");
        assert_eq!(list_first(), before, "every entry was unlinked");
    })
    .join()
    .unwrap();
}

/// One randomized life of a thread that mixes glibc robust mutexes and rtlab ones in its one
/// list (non-LIFO), then dies holding some of each: every held one must be reported dead,
/// every released one clean. Exercises the path that follows the shared words.
#[test]
fn mixed_with_glibc_in_random_order_the_kernel_still_finds_every_held_mutex() {
    let trials = iterations(300);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for trial in 0..trials {
        let glibc: Vec<PthreadMutex> = (0..3)
            .map(|_| PthreadMutex::new(PthreadKind::Robust).unwrap())
            .collect();
        let ours: Vec<Pin<Box<RobustMutex>>> =
            (0..4).map(|_| Box::pin(RobustMutex::new())).collect();
        let seed = next_random(&mut rng);
        let held_at_death: Vec<bool> = std::thread::scope(|s| {
            s.spawn(|| {
                let mut rng = seed;
                let mut g: Vec<Option<PthreadGuard<'_>>> = (0..3).map(|_| None).collect();
                let mut o: Vec<Option<RobustGuard<'_>>> = (0..4).map(|_| None).collect();
                for _ in 0..40 {
                    let r = next_random(&mut rng);
                    let i = (r % 7) as usize;
                    if i < 3 {
                        if g[i].take().is_none() {
                            g[i] = Some(glibc[i].lock().unwrap());
                        }
                    } else if o[i - 3].take().is_none() {
                        o[i - 3] = Some(ours[i - 3].as_ref().lock().unwrap());
                    }
                }
                let held: Vec<bool> = g
                    .iter()
                    .map(Option::is_some)
                    .chain(o.iter().map(Option::is_some))
                    .collect();
                std::mem::forget((g, o)); // die holding them
                held
            })
            .join()
            .unwrap()
        });
        for (i, m) in glibc.iter().enumerate() {
            let (_g, died) = m.lock_reporting_owner_death().unwrap();
            assert_eq!(died, held_at_death[i], "trial {trial}: glibc mutex {i}");
        }
        for (i, m) in ours.iter().enumerate() {
            let died = match m.as_ref().lock() {
                Ok(_) => false,
                Err(RobustError::OwnerDied(g)) => {
                    g.make_consistent();
                    true
                }
                Err(e) => panic!("trial {trial}: rtlab mutex {i}: {e}"),
            };
            assert_eq!(died, held_at_death[3 + i], "trial {trial}: rtlab mutex {i}");
        }
    }
}

#[test]
fn a_forgotten_guard_then_dropping_the_mutex_leaves_no_dangling_entry() {
    std::thread::spawn(|| {
        let before = list_first();
        let keep = Box::pin(RobustMutex::new());
        let kept = keep.as_ref().lock().unwrap();
        {
            let m = Box::pin(RobustMutex::new());
            std::mem::forget(m.as_ref().lock().unwrap());
            // Dropping it (its memory goes back to the allocator) unlinks and releases it.
        }
        assert_eq!(
            walk(),
            vec![entry_of(&keep)],
            "only the kept mutex is linked"
        );
        // Reuse the freed memory with junk, then let glibc and rtlab both rewrite list
        // neighbours: with a dangling entry they would write into the junk.
        let junk: Vec<Box<[u8; 64]>> = (0..64).map(|_| Box::new([0xa5; 64])).collect();
        let glibc = PthreadMutex::new(PthreadKind::Robust).unwrap();
        let g = glibc.lock().unwrap();
        let other = pin!(RobustMutex::new());
        let o = other.as_ref().lock().unwrap();
        drop(kept);
        drop(g);
        drop(o);
        assert!(
            junk.iter().all(|b| b.iter().all(|&x| x == 0xa5)),
            "junk untouched"
        );
        assert_eq!(list_first(), before, "the list is empty again");
    })
    .join()
    .unwrap();
}

#[test]
fn a_forgotten_glibc_robust_guard_then_dropping_the_mutex_leaves_no_dangling_entry() {
    // Regression (hardening, second review, #10): a robust PthreadMutex dropped with its
    // guard forgotten freed memory still linked in glibc's robust list, from safe code.
    for kind in [PthreadKind::Robust, PthreadKind::RobustPi] {
        std::thread::spawn(move || {
            let before = list_first();
            {
                let m = PthreadMutex::new(kind).unwrap();
                std::mem::forget(m.lock().unwrap());
            }
            assert_eq!(list_first(), before, "{kind:?}: unlinked with the mutex");
            let junk: Vec<Box<[u8; 64]>> = (0..64).map(|_| Box::new([0xa5; 64])).collect();
            let glibc = PthreadMutex::new(kind).unwrap();
            drop(glibc.lock().unwrap());
            assert!(
                junk.iter().all(|b| b.iter().all(|&x| x == 0xa5)),
                "{kind:?}: junk untouched"
            );
        })
        .join()
        .unwrap();
    }
}

/// Run by `dropping_a_glibc_robust_mutex_another_thread_holds_aborts` in a child process.
#[test]
fn helper_drop_glibc_robust_while_another_thread_holds() {
    if std::env::var_os("RTLAB_PTHREAD_ABORT_HELPER").is_none() {
        return; // only meaningful as that test's child
    }
    let m = std::sync::Arc::new(PthreadMutex::new(PthreadKind::Robust).unwrap());
    let locked = std::sync::Arc::new(std::sync::Barrier::new(2));
    let (m2, locked2) = (m.clone(), locked.clone());
    std::thread::spawn(move || {
        std::mem::forget(m2.lock().unwrap());
        drop(m2);
        locked2.wait();
        loop {
            std::thread::park(); // alive, holding it
        }
    });
    locked.wait();
    drop(m); // the last reference: must abort
    std::process::exit(0);
}

#[test]
fn dropping_a_glibc_robust_mutex_another_thread_holds_aborts() {
    assert_helper_aborts(
        "helper_drop_glibc_robust_while_another_thread_holds",
        "RTLAB_PTHREAD_ABORT_HELPER",
    );
}

/// Runs test `helper` alone in a child process (with `env` set) and checks it aborted
/// saying why.
fn assert_helper_aborts(helper: &str, env: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", helper, "--nocapture"])
        .env(env, "1")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(6), // SIGABRT
        "expected an abort, got {:?}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("guard was forgotten"),
        "says why"
    );
}

/// Run by `dropping_a_mutex_another_thread_holds_aborts` in a child process.
#[test]
fn helper_drop_while_another_thread_holds() {
    if std::env::var_os("RTLAB_ROBUST_ABORT_HELPER").is_none() {
        return; // only meaningful as that test's child
    }
    // Safe code can get there: the holder forgets its guard and drops its reference.
    let m = std::sync::Arc::pin(RobustMutex::new());
    let locked = std::sync::Arc::new(std::sync::Barrier::new(2));
    let (m2, locked2) = (m.clone(), locked.clone());
    std::thread::spawn(move || {
        std::mem::forget(m2.as_ref().lock().unwrap());
        drop(m2);
        locked2.wait();
        loop {
            std::thread::park(); // alive, holding it
        }
    });
    locked.wait();
    drop(m); // the last reference: must abort, the other thread's list still holds the entry
    std::process::exit(0);
}

#[test]
fn dropping_a_mutex_another_thread_holds_aborts() {
    assert_helper_aborts(
        "helper_drop_while_another_thread_holds",
        "RTLAB_ROBUST_ABORT_HELPER",
    );
}

#[test]
fn the_record_is_bounded_and_refuses_cleanly_when_full() {
    std::thread::spawn(|| {
        let before = list_first();
        let mutexes: Vec<Pin<Box<RobustMutex>>> = (0..=MAX_HELD)
            .map(|_| Box::pin(RobustMutex::new()))
            .collect();
        let guards: Vec<RobustGuard<'_>> = mutexes[..MAX_HELD]
            .iter()
            .map(|m| m.as_ref().lock().unwrap())
            .collect();
        let last = mutexes[MAX_HELD].as_ref();
        assert!(matches!(last.lock(), Err(RobustError::Unsupported(_))));
        assert_eq!(last.owner_tid(), 0, "refused before taking it");
        assert_eq!(walk().len(), MAX_HELD);
        drop(guards);
        assert_eq!(list_first(), before);
        assert!(last.lock().is_ok(), "room again");
    })
    .join()
    .unwrap();
}
