//! CeilingMutex, Parker, Semaphore, Event and PiCondvar.
#![allow(unsafe_code)]

mod common;

use common::*;
use rtlab_sync::{
    CeilingMutex, Event, LockError, Parker, PiCondvar, PiMutex, Semaphore, WaitResult,
};
use rtlab_sys::futex::current_tid;
use rtlab_sys::time::monotonic_now_ns;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SECOND: u64 = 1_000_000_000;

#[test]
fn ceiling_raises_the_holder_and_restores_it() {
    if !can_fifo("ceiling_raises_the_holder_and_restores_it") {
        return;
    }
    std::thread::spawn(|| {
        let outer = CeilingMutex::new(20, ());
        let inner = CeilingMutex::new(30, ());
        assert_eq!(effective_priority(), 20, "starts SCHED_OTHER");
        {
            let _a = outer.lock().unwrap();
            assert_eq!(effective_priority(), -21, "at ceiling 20");
            {
                let _b = inner.lock().unwrap();
                assert_eq!(effective_priority(), -31, "nested at ceiling 30");
                // Holding ceiling 30, a ceiling-20 mutex would be a priority violation.
                let lower = CeilingMutex::new(20, ());
                assert_eq!(
                    lower.lock().err(),
                    Some(LockError::CeilingViolation {
                        caller: 30,
                        ceiling: 20
                    })
                );
            }
            assert_eq!(effective_priority(), -21, "back to the outer ceiling");
        }
        assert_eq!(effective_priority(), 20, "restored to SCHED_OTHER");
        fifo(50);
        assert_eq!(
            outer.lock().err(),
            Some(LockError::CeilingViolation {
                caller: 50,
                ceiling: 20
            })
        );
    })
    .join()
    .unwrap();
}

#[test]
fn ceiling_guards_dropped_out_of_order_leave_the_thread_as_it_was() {
    // Regression (hardening, low): each guard restored the scheduling saved when it was
    // taken, so dropping the outer one first left the thread at the outer ceiling for good.
    if !can_fifo("ceiling_guards_dropped_out_of_order") {
        return;
    }
    std::thread::spawn(|| {
        let outer = CeilingMutex::new(20, ());
        let inner = CeilingMutex::new(30, ());
        let a = outer.lock().unwrap();
        let b = inner.lock().unwrap();
        assert_eq!(effective_priority(), -31);
        drop(a);
        assert_eq!(
            effective_priority(),
            -31,
            "still holding the ceiling-30 mutex"
        );
        drop(b);
        assert_eq!(effective_priority(), 20, "restored to SCHED_OTHER");
    })
    .join()
    .unwrap();
}

#[test]
fn ceiling_mutex_excludes() {
    if !can_fifo("ceiling_mutex_excludes") {
        return;
    }
    let m = CeilingMutex::new(10, 0u64);
    let per_thread = iterations(20_000);
    hammer(4, per_thread, || {
        let mut g = m.lock().unwrap();
        let v = std::hint::black_box(*g);
        *g = v + 1;
    });
    assert_eq!(*m.lock().unwrap(), 4 * per_thread);
}

/// try_lock on a held ceiling mutex refuses and leaves the caller's scheduling as it was
/// (the raise before the attempt is taken back).
#[test]
fn ceiling_try_lock_refuses_a_held_mutex_and_restores_the_caller() {
    if !can_fifo("ceiling_try_lock_refuses_a_held_mutex_and_restores_the_caller") {
        return;
    }
    let m = CeilingMutex::new(10, ());
    let held = m.lock().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            let before = rtlab_sys::sched::current_thread_scheduler();
            assert_eq!(m.try_lock().err(), Some(LockError::WouldBlock));
            assert_eq!(rtlab_sys::sched::current_thread_scheduler(), before);
        });
    });
    drop(held);
    let again = m.try_lock().expect("free again");
    assert_eq!(
        rtlab_sys::sched::current_thread_scheduler(),
        (Some(rtlab_sys::sched::Policy::Fifo), 10),
        "try_lock raises to the ceiling"
    );
    drop(again);
}

#[test]
fn parker_token_timeout_and_wakeup() {
    let p = Parker::new();
    p.unpark();
    assert!(
        p.park_until(Some(monotonic_now_ns() + SECOND)),
        "token consumed at once"
    );
    let deadline = monotonic_now_ns() + 10_000_000;
    assert!(!p.park_until(Some(deadline)), "no token: times out");
    assert!(monotonic_now_ns() >= deadline);
    let p = Arc::new(Parker::new());
    let q = p.clone();
    let t = std::thread::spawn(move || q.park_until(Some(monotonic_now_ns() + 10 * SECOND)));
    std::thread::sleep(Duration::from_millis(20));
    p.unpark();
    assert!(t.join().unwrap(), "woken by unpark, not by the deadline");
}

#[test]
fn parker_ping_pong_loses_no_wakeup() {
    let rounds = iterations(200_000);
    let (a, b) = (Arc::new(Parker::new()), Arc::new(Parker::new()));
    let (a2, b2) = (a.clone(), b.clone());
    let other = std::thread::spawn(move || {
        for i in 0..rounds {
            assert!(
                a2.park_until(Some(monotonic_now_ns() + 10 * SECOND)),
                "lost wakeup at {i}"
            );
            b2.unpark();
        }
    });
    for i in 0..rounds {
        a.unpark();
        assert!(
            b.park_until(Some(monotonic_now_ns() + 10 * SECOND)),
            "lost wakeup at {i}"
        );
    }
    other.join().unwrap();
}

#[test]
fn semaphore_passes_every_permit_exactly_once() {
    let per_producer = iterations(200_000) as u32;
    let sem = Arc::new(Semaphore::new(0));
    let taken = Arc::new(AtomicU32::new(0));
    let producers: Vec<_> = (0..2)
        .map(|_| {
            let sem = sem.clone();
            std::thread::spawn(move || (0..per_producer).for_each(|_| sem.post()))
        })
        .collect();
    let consumers: Vec<_> = (0..3)
        .map(|_| {
            let (sem, taken) = (sem.clone(), taken.clone());
            std::thread::spawn(move || loop {
                if taken.load(Ordering::SeqCst) >= 2 * per_producer {
                    return;
                }
                if sem.wait_until(Some(monotonic_now_ns() + 50_000_000)) {
                    taken.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for h in producers.into_iter().chain(consumers) {
        h.join().unwrap();
    }
    assert_eq!(taken.load(Ordering::SeqCst), 2 * per_producer);
    assert_eq!(sem.available(), 0, "no permit created or lost");
    let deadline = monotonic_now_ns() + 5_000_000;
    assert!(!sem.wait_until(Some(deadline)));
    assert!(monotonic_now_ns() >= deadline);
}

#[test]
fn shared_semaphore_signals_across_fork() {
    let map = rtlab_sys::mem::AnonMapping::new_shared(4096).unwrap();
    let (ping, pong) = (
        map.as_ptr() as *mut Semaphore,
        map.as_ptr().wrapping_add(64) as *mut Semaphore,
    );
    // SAFETY: two non-overlapping, aligned slots of a fresh zeroed shared mapping.
    unsafe {
        ping.write(Semaphore::new_shared(0));
        pong.write(Semaphore::new_shared(0));
    }
    // SAFETY: as above; they live as long as `map`.
    let (ping, pong) = unsafe { (&*ping, &*pong) };
    let rounds = iterations(20_000);
    // SAFETY: the child only uses futexes and atomics on memory mapped before the fork.
    let child = unsafe {
        rtlab_sys::process::fork_child(|| {
            for _ in 0..rounds {
                if !ping.wait_until(Some(monotonic_now_ns() + 10 * SECOND)) {
                    return 1;
                }
                pong.post();
            }
            0
        })
    }
    .unwrap();
    for i in 0..rounds {
        ping.post();
        assert!(
            pong.wait_until(Some(monotonic_now_ns() + 10 * SECOND)),
            "lost wakeup at {i}"
        );
    }
    assert_eq!(rtlab_sys::process::wait_child(child).unwrap(), 0);
}

#[test]
fn event_releases_every_waiter_until_reset() {
    let ev = Arc::new(Event::new());
    let woke = Arc::new(AtomicU32::new(0));
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let (ev, woke) = (ev.clone(), woke.clone());
            std::thread::spawn(move || {
                if ev.wait_until(Some(monotonic_now_ns() + 10 * SECOND)) {
                    woke.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    ev.set();
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(woke.load(Ordering::SeqCst), 4);
    assert!(ev.wait_until(None), "stays set");
    ev.reset();
    assert!(!ev.wait_until(Some(monotonic_now_ns() + 5_000_000)));
}

#[test]
fn condvar_queue_loses_no_wakeup() {
    let messages = iterations(100_000);
    let queue = Arc::new((PiMutex::new(VecDeque::new()), PiCondvar::new()));
    let received = Arc::new(AtomicU64::new(0));
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (queue, received) = (queue.clone(), received.clone());
            std::thread::spawn(move || {
                let (mutex, cv) = &*queue;
                let mut g = mutex.lock().unwrap();
                loop {
                    match g.pop_front() {
                        Some(None) => return,
                        Some(Some(_)) => {
                            received.fetch_add(1, Ordering::SeqCst);
                        }
                        None => {
                            let deadline = monotonic_now_ns() + 10 * SECOND;
                            assert_eq!(
                                cv.wait_until(&mut g, deadline),
                                WaitResult::Notified,
                                "lost wakeup"
                            );
                        }
                    }
                }
            })
        })
        .collect();
    let (mutex, cv) = &*queue;
    for i in 0..messages {
        mutex.lock().unwrap().push_back(Some(i));
        cv.notify_one(mutex.raw());
    }
    {
        let mut g = mutex.lock().unwrap();
        g.push_back(None);
        g.push_back(None);
    }
    cv.notify_all(mutex.raw());
    for c in consumers {
        c.join().unwrap();
    }
    assert_eq!(received.load(Ordering::SeqCst), messages);
}

#[test]
fn condvar_timeout_returns_holding_the_mutex() {
    let m = PiMutex::new(());
    let cv = PiCondvar::new();
    let mut g = m.lock().unwrap();
    let deadline = monotonic_now_ns() + 10_000_000;
    assert_eq!(cv.wait_until(&mut g, deadline), WaitResult::TimedOut);
    assert!(monotonic_now_ns() >= deadline);
    assert_eq!(m.raw().owner_tid(), current_tid());
}

#[test]
fn condvar_notify_all_hands_the_mutex_to_each_waiter_in_turn() {
    let shared = Arc::new((PiMutex::new((false, 0u32)), PiCondvar::new()));
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let (m, cv) = &*shared;
                let mut g = m.lock().unwrap();
                while !g.0 {
                    cv.wait_until(&mut g, monotonic_now_ns() + 10 * SECOND);
                }
                g.1 += 1;
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    let (m, cv) = &*shared;
    m.lock().unwrap().0 = true;
    cv.notify_all(m.raw());
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(m.lock().unwrap().1, 4);
}

#[test]
fn condvar_wakes_waiters_in_priority_order() {
    if !can_fifo("condvar_wakes_waiters_in_priority_order") {
        return;
    }
    let shared = Arc::new((PiMutex::new(0u32), PiCondvar::new()));
    let order = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = [10u32, 30, 20]
        .into_iter()
        .map(|prio| {
            let (shared, order) = (shared.clone(), order.clone());
            std::thread::spawn(move || {
                fifo(prio);
                let (m, cv) = &*shared;
                let mut g = m.lock().unwrap();
                *g += 1;
                cv.wait_until(&mut g, monotonic_now_ns() + 10 * SECOND);
                order.lock().unwrap().push(prio);
            })
        })
        .collect();
    let (m, cv) = &*shared;
    while *m.lock().unwrap() < 3 {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(20));
    for woken in 1..=3 {
        cv.notify_one(m.raw());
        let deadline = monotonic_now_ns() + 5 * SECOND;
        while order.lock().unwrap().len() < woken && monotonic_now_ns() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![30, 20, 10]);
}

#[test]
fn shared_condvar_and_pi_mutex_ping_pong_across_fork() {
    use rtlab_sync::RawPiMutex;
    #[repr(C)]
    struct Shared {
        mutex: RawPiMutex,
        cv: PiCondvar,
        turn: AtomicU32,
    }
    let rounds = iterations(20_000) as u32;
    let map = rtlab_sys::mem::AnonMapping::new_shared(4096).unwrap();
    let shared = map.as_ptr() as *mut Shared;
    // SAFETY: a fresh zeroed, page-aligned shared mapping is large enough for `Shared`.
    unsafe {
        shared.write(Shared {
            mutex: RawPiMutex::new_shared(),
            cv: PiCondvar::new_shared(),
            turn: AtomicU32::new(0),
        })
    };
    // SAFETY: lives as long as `map`; both processes use it only through atomics and futexes.
    let shared = unsafe { &*shared };
    // Each side waits for its parity, then passes the turn; `me` is 0 (parent) or 1 (child).
    let play = move |me: u32| -> bool {
        for i in 0..rounds {
            shared.mutex.lock().unwrap();
            while shared.turn.load(Ordering::Relaxed) % 2 != me {
                // SAFETY: this thread holds the shared mutex; it holds it again on return.
                let r = unsafe {
                    shared
                        .cv
                        .wait_raw(&shared.mutex, Some(monotonic_now_ns() + 10 * SECOND))
                };
                if r == WaitResult::TimedOut {
                    // SAFETY: held (wait_raw returns owning it).
                    unsafe { shared.mutex.unlock() };
                    eprintln!("side {me}: lost wakeup at round {i}");
                    return false;
                }
            }
            shared.turn.fetch_add(1, Ordering::Relaxed);
            // SAFETY: held since the lock above.
            unsafe { shared.mutex.unlock() };
            shared.cv.notify_one(&shared.mutex);
        }
        true
    };
    // SAFETY: the child uses only the shared mapping (atomics, futexes) and its TLS.
    let child =
        unsafe { rtlab_sys::process::fork_child(move || if play(1) { 0 } else { 1 }) }.unwrap();
    let parent_ok = play(0);
    assert_eq!(
        rtlab_sys::process::wait_child(child).unwrap(),
        0,
        "child lost a wakeup"
    );
    assert!(parent_ok, "parent lost a wakeup");
    assert_eq!(shared.turn.load(Ordering::Relaxed), 2 * rounds);
}

#[test]
fn futex_mutex_try_lock_refuses_while_held() {
    let m = rtlab_sync::FutexMutex::new(1u32);
    let held = m.try_lock().expect("free");
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(m.try_lock().err(), Some(LockError::WouldBlock)));
    });
    drop(held);
    assert_eq!(*m.try_lock().expect("free again"), 1);
}

#[test]
fn futex_mutex_excludes() {
    let per_thread = iterations(200_000);
    let m = rtlab_sync::FutexMutex::new(0u64);
    hammer(4, per_thread, || {
        let mut g = m.lock().unwrap();
        let v = std::hint::black_box(*g);
        *g = v + 1;
    });
    assert_eq!(*m.lock().unwrap(), 4 * per_thread);
}
