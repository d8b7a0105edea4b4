//! RobustMutex: owner death, recovery, glibc coexistence, SIGKILL at random points.
#![allow(unsafe_code)]

mod common;

use common::*;
use rtlab_sync::{RobustError, RobustMutex};
use rtlab_sys::pthread::{PthreadKind, PthreadMutex};
use rtlab_sys::robust::current_robust_list;
use rtlab_sys::time::monotonic_now_ns;
use std::pin::{pin, Pin};
use std::sync::atomic::Ordering;

const SECOND: u64 = 1_000_000_000;

fn list_first() -> usize {
    let head = current_robust_list().unwrap().unwrap();
    // SAFETY: the registered head lives as long as this thread.
    unsafe { head.as_ref() }.list.load(Ordering::Relaxed)
}

#[test]
fn lock_and_unlock_leave_the_thread_list_as_it_was() {
    std::thread::spawn(|| {
        let before = list_first();
        let (a, b) = (pin!(RobustMutex::new()), pin!(RobustMutex::new()));
        let (a, b) = (a.as_ref(), b.as_ref());
        let ga = a.lock().unwrap();
        let gb = b.lock().unwrap();
        assert_ne!(list_first(), before, "entries are linked while held");
        drop(ga); // out of order on purpose: unlinking from the middle
        drop(gb);
        assert_eq!(list_first(), before);
        assert!(a.lock().is_ok());
    })
    .join()
    .unwrap();
}

#[test]
fn owner_death_is_reported_once_then_recovered() {
    let m = pin!(RobustMutex::new());
    let m = m.as_ref();
    std::thread::scope(|s| {
        s.spawn(|| std::mem::forget(m.lock().unwrap()));
    });
    match m.lock_until(monotonic_now_ns() + 5 * SECOND) {
        Err(RobustError::OwnerDied(g)) => g.make_consistent(),
        other => panic!("expected OwnerDied, got {other:?}"),
    }
    assert!(m.lock().is_ok(), "reported only once");
}

#[test]
fn unlocking_without_repair_makes_it_unrecoverable() {
    let m = pin!(RobustMutex::new());
    let m = m.as_ref();
    std::thread::scope(|s| {
        s.spawn(|| std::mem::forget(m.lock().unwrap()));
    });
    match m.lock() {
        Err(RobustError::OwnerDied(g)) => drop(g),
        other => panic!("expected OwnerDied, got {other:?}"),
    }
    assert!(matches!(m.lock(), Err(RobustError::NotRecoverable)));
    assert!(
        matches!(m.lock(), Err(RobustError::NotRecoverable)),
        "stays unrecoverable"
    );
}

#[test]
fn coexists_with_glibc_robust_mutexes_in_one_list() {
    let glibc_a = PthreadMutex::new(PthreadKind::Robust).unwrap();
    let glibc_b = PthreadMutex::new(PthreadKind::Robust).unwrap();
    let ours_1 = pin!(RobustMutex::new());
    let ours_2 = pin!(RobustMutex::new());
    let (ours_1, ours_2) = (ours_1.as_ref(), ours_2.as_ref());
    std::thread::scope(|s| {
        s.spawn(|| {
            // Interleave both kinds in the thread's one list, unlink one from the middle,
            // then die holding the rest.
            let ga = glibc_a.lock().unwrap();
            let g1 = ours_1.lock().unwrap();
            let gb = glibc_b.lock().unwrap();
            let g2 = ours_2.lock().unwrap();
            drop(g1);
            std::mem::forget((ga, gb, g2));
        });
    });
    assert!(
        glibc_a.lock_reporting_owner_death().unwrap().1,
        "glibc mutex A: EOWNERDEAD"
    );
    assert!(
        glibc_b.lock_reporting_owner_death().unwrap().1,
        "glibc mutex B: EOWNERDEAD"
    );
    assert!(
        matches!(ours_2.lock(), Err(RobustError::OwnerDied(_))),
        "rtlab mutex 2: OwnerDied"
    );
    assert!(
        ours_1.lock().is_ok(),
        "rtlab mutex 1 was released before the death"
    );
}

#[test]
fn sigkill_at_random_points_never_hangs_and_reports_each_death_once() {
    let kills = iterations(1_000);
    let map = rtlab_sys::mem::AnonMapping::new_shared(4096).unwrap();
    let base = map.as_ptr();
    let mutex = base as *mut RobustMutex;
    // SAFETY: offset 0 of a fresh zeroed, page-aligned shared mapping holds the mutex.
    unsafe { mutex.write(RobustMutex::new_shared()) };
    // SAFETY: lives as long as `map`, which never moves; shared with the children through
    // MAP_SHARED.
    let mutex = unsafe { Pin::new_unchecked(&*mutex) };
    let (a, b) = (
        base.wrapping_add(64) as *mut u64,
        base.wrapping_add(72) as *mut u64,
    );
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let (mut deaths, mut progress) = (0, 0u64);
    for round in 0..kills {
        // SAFETY: the child only uses the shared mutex (futexes, atomics, its TLS) and the
        // shared counters; it never returns.
        let child = unsafe {
            rtlab_sys::process::fork_child(|| loop {
                let guard = match mutex.lock() {
                    Ok(g) => g,
                    Err(RobustError::OwnerDied(g)) => {
                        // The lock is held: repair the invariant a == b.
                        b.write_volatile(a.read_volatile());
                        g.make_consistent();
                        g
                    }
                    Err(_) => return 3,
                };
                // Counters are only touched under the lock.
                a.write_volatile(a.read_volatile() + 1);
                for _ in 0..200 {
                    std::hint::spin_loop();
                }
                b.write_volatile(b.read_volatile() + 1);
                drop(guard);
                // As long outside the lock as inside, so kills land on both sides.
                for _ in 0..200 {
                    std::hint::spin_loop();
                }
            })
        }
        .unwrap();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(std::time::Duration::from_micros(rng % 1_500));
        rtlab_sys::process::kill_hard(child).unwrap();
        let status = rtlab_sys::process::wait_child(child).unwrap();
        assert_eq!(
            status,
            128 + 9,
            "round {round}: child ended by itself with {status}"
        );
        match mutex.lock_until(monotonic_now_ns() + 5 * SECOND) {
            Ok(g) => {
                // SAFETY: under the lock.
                unsafe { assert_eq!(a.read_volatile(), b.read_volatile(), "round {round}: torn") };
                drop(g);
            }
            Err(RobustError::OwnerDied(g)) => {
                deaths += 1;
                // SAFETY: under the lock.
                unsafe { b.write_volatile(a.read_volatile()) };
                g.make_consistent();
                drop(g);
            }
            Err(e) => panic!("round {round}: {e}"),
        }
        // The death was reported exactly once: the next locker sees a clean mutex.
        match mutex.lock_until(monotonic_now_ns() + 5 * SECOND) {
            Ok(g) => drop(g),
            Err(e) => panic!("round {round}: second lock: {e}"),
        }
        // SAFETY: read outside the lock, but no child is alive.
        progress = unsafe { a.read_volatile() };
    }
    assert!(progress > 0, "the children never took the lock");
    assert!(
        deaths > 0,
        "no child was ever killed inside the lock: the test proved nothing"
    );
    assert!(
        deaths < kills,
        "no child was ever killed outside the lock: half the paths untested"
    );
    eprintln!("{kills} kills, {deaths} inside the lock, {progress} critical sections");
}

#[test]
fn robust_mutex_excludes_and_times_out() {
    let per_thread = iterations(100_000);
    let m = pin!(RobustMutex::new());
    let m = m.as_ref();
    let counter = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..per_thread {
                    let g = m.lock().unwrap();
                    // A torn read-modify-write unless the lock excludes.
                    let v = counter.load(Ordering::Relaxed);
                    counter.store(std::hint::black_box(v) + 1, Ordering::Relaxed);
                    drop(g);
                }
            });
        }
    });
    assert_eq!(counter.load(Ordering::Relaxed), 4 * per_thread);
    let held = m.lock().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            let deadline = monotonic_now_ns() + 20_000_000;
            assert!(matches!(
                m.lock_until(deadline),
                Err(RobustError::Lock(rtlab_sync::LockError::TimedOut))
            ));
            assert!(monotonic_now_ns() >= deadline);
        });
    });
    assert!(matches!(
        m.lock(),
        Err(RobustError::Lock(rtlab_sync::LockError::Deadlock))
    ));
    drop(held);
}

#[test]
fn condvar_wait_hands_the_robust_mutex_back_and_forth() {
    use rtlab_sync::{PiCondvar, RobustWait};
    use std::sync::atomic::AtomicU64;
    let rounds = iterations(20_000);
    let m = pin!(RobustMutex::new());
    let m = m.as_ref();
    let (filled, emptied) = (PiCondvar::new(), PiCondvar::new());
    let slot = AtomicU64::new(0); // 0 = empty, else the value; changed only under `m`
    std::thread::scope(|s| {
        s.spawn(|| {
            let before = list_first();
            for v in 1..=rounds {
                let mut g = m.lock().unwrap();
                while slot.load(Ordering::Relaxed) != 0 {
                    assert_eq!(g.wait(&emptied, None), RobustWait::Notified);
                }
                slot.store(v, Ordering::Relaxed);
                filled.notify_one_robust(&m);
            }
            assert_eq!(
                list_first(),
                before,
                "every wait relinked and unlinked the entry"
            );
        });
        let mut expected = 1;
        while expected <= rounds {
            let mut g = m.lock().unwrap();
            while slot.load(Ordering::Relaxed) == 0 {
                let r = g.wait(&filled, Some(monotonic_now_ns() + 10 * SECOND));
                assert_eq!(r, RobustWait::Notified, "no notify within 10 s");
            }
            assert_eq!(slot.swap(0, Ordering::Relaxed), expected);
            assert_eq!(m.owner_tid(), rtlab_sys::futex::current_tid());
            emptied.notify_one_robust(&m);
            expected += 1;
        }
    });
}

#[test]
fn condvar_wait_times_out_owning_the_mutex() {
    use rtlab_sync::{PiCondvar, RobustWait};
    let (m, cv) = (pin!(RobustMutex::new()), PiCondvar::new());
    let m = m.as_ref();
    let mut g = m.lock().unwrap();
    let t0 = monotonic_now_ns();
    assert_eq!(g.wait(&cv, Some(t0 + 20_000_000)), RobustWait::TimedOut);
    assert!(monotonic_now_ns() - t0 >= 20_000_000);
    assert_eq!(m.owner_tid(), rtlab_sys::futex::current_tid());
    drop(g);
    assert!(m.lock().is_ok());
}

#[test]
fn a_condvar_waiter_inherits_the_mutex_of_an_owner_that_died() {
    use rtlab_sync::{PiCondvar, RobustWait};
    let (m, cv) = (pin!(RobustMutex::new()), PiCondvar::new());
    let m = m.as_ref();
    let waiting = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let mut g = m.lock().unwrap();
            waiting.store(true, Ordering::Release);
            let r = g.wait(&cv, Some(monotonic_now_ns() + 5 * SECOND));
            if r == RobustWait::OwnerDied {
                g.make_consistent();
            }
            r
        });
        while !waiting.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // Takes the mutex once the waiter sleeps, then exits holding it.
        s.spawn(|| std::mem::forget(m.lock().unwrap()))
            .join()
            .unwrap();
        cv.notify_one_robust(&m);
        assert_eq!(waiter.join().unwrap(), RobustWait::OwnerDied);
    });
    assert!(m.lock().is_ok(), "repaired by the waiter");
}
