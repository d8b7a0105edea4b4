//! PiMutex: mutual exclusion, errors, timed locking, priority inheritance, fork, shared memory.
#![allow(unsafe_code)]

mod common;

use common::*;
use rtlab_sync::{LockError, PiMutex, RawPiMutex};
use rtlab_sys::affinity::{set_current_thread_affinity, usable_cpus, CpuList};
use rtlab_sys::time::monotonic_now_ns;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn mutual_exclusion_under_contention() {
    let per_thread = iterations(200_000);
    let m = PiMutex::new(0u64);
    hammer(8, per_thread, || {
        let mut g = m.lock().unwrap();
        let v = std::hint::black_box(*g);
        *g = v + 1;
    });
    assert_eq!(*m.lock().unwrap(), 8 * per_thread);
    assert_eq!(m.raw().owner_tid(), 0, "unlocked at the end");
}

#[test]
fn relocking_from_the_owner_is_a_deadlock_error() {
    let m = PiMutex::new(());
    let _g = m.lock().unwrap();
    assert_eq!(m.lock().err(), Some(LockError::Deadlock));
    assert_eq!(m.try_lock().err(), Some(LockError::Deadlock));
}

#[test]
fn try_lock_and_timed_lock_respect_another_owner() {
    let m = Arc::new(PiMutex::new(()));
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let owner = {
        let m = m.clone();
        std::thread::spawn(move || {
            let _g = m.lock().unwrap();
            locked_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        })
    };
    locked_rx.recv().unwrap();
    assert_eq!(m.try_lock().err(), Some(LockError::WouldBlock));
    let deadline = monotonic_now_ns() + 30_000_000;
    assert_eq!(m.lock_until(deadline).err(), Some(LockError::TimedOut));
    let now = monotonic_now_ns();
    assert!(now >= deadline, "woke {} ns early", deadline - now);
    // Generous: only proves the timeout is a timeout, not a hang (this machine is noisy).
    assert!(now - deadline < 2_000_000_000);
    release_tx.send(()).unwrap();
    owner.join().unwrap();
    let g = m
        .lock_until(monotonic_now_ns() + 1_000_000_000)
        .expect("free again");
    drop(g);
}

#[test]
fn waiting_fifo_thread_boosts_a_sched_other_owner() {
    if !can_fifo("waiting_fifo_thread_boosts_a_sched_other_owner") {
        return;
    }
    let m = Arc::new(PiMutex::new(()));
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let boosted = Arc::new(AtomicBool::new(false));
    let owner = {
        let (m, boosted) = (m.clone(), boosted.clone());
        std::thread::spawn(move || {
            let before = effective_priority();
            let g = m.lock().unwrap();
            locked_tx.send(before).unwrap();
            let deadline = monotonic_now_ns() + 5_000_000_000;
            // -1 - 50: the waiter's FIFO 50, lent to us while it waits.
            while effective_priority() != -51 && monotonic_now_ns() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            boosted.store(effective_priority() == -51, Ordering::SeqCst);
            drop(g);
            effective_priority()
        })
    };
    let before = locked_rx.recv().unwrap();
    assert_eq!(before, 20, "owner starts as SCHED_OTHER nice 0");
    let waiter = {
        let m = m.clone();
        std::thread::spawn(move || {
            fifo(50);
            drop(m.lock().unwrap());
        })
    };
    let after = owner.join().unwrap();
    waiter.join().unwrap();
    assert!(
        boosted.load(Ordering::SeqCst),
        "owner was never boosted to FIFO 50"
    );
    assert_eq!(after, 20, "boost removed on unlock");
}

#[test]
fn inversion_group_is_bounded_with_priority_inheritance() {
    let test = "inversion_group_is_bounded_with_priority_inheritance";
    if !can_fifo(test) {
        return;
    }
    let cpus = usable_cpus();
    if cpus.len() < 2 {
        return rtlab_sys::testing::say_skipped(&format!(
            "{test}: needs 2 CPUs (one for the group, one for the harness)"
        ));
    }
    let group_cpu = CpuList::from(vec![*cpus.as_slice().last().unwrap()]);
    set_current_thread_affinity(&CpuList::from(vec![cpus.as_slice()[0]])).unwrap();
    for round in 0..iterations(20).max(3) {
        let m = Arc::new(PiMutex::new(()));
        let stop_medium = Arc::new(AtomicBool::new(false));
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let low = {
            let (m, cpu) = (m.clone(), group_cpu.clone());
            std::thread::spawn(move || {
                set_current_thread_affinity(&cpu).unwrap();
                fifo(10);
                let _g = m.lock().unwrap();
                held_tx.send(()).unwrap();
                // 20 ms of work inside the lock, on the clock: preemption stretches it.
                let mut worked = 0;
                let mut last = monotonic_now_ns();
                while worked < 20_000_000 {
                    let now = monotonic_now_ns();
                    if now - last < 100_000 {
                        worked += now - last;
                    }
                    last = now;
                }
            })
        };
        held_rx.recv().unwrap();
        let medium = {
            let (stop, cpu) = (stop_medium.clone(), group_cpu.clone());
            std::thread::spawn(move || {
                set_current_thread_affinity(&cpu).unwrap();
                fifo(20);
                // The watchdog: without PI this spin would starve `low` for its whole length.
                let deadline = monotonic_now_ns() + 3_000_000_000;
                while !stop.load(Ordering::Relaxed) && monotonic_now_ns() < deadline {
                    std::hint::spin_loop();
                }
            })
        };
        std::thread::sleep(Duration::from_millis(5));
        let high = {
            let (m, cpu) = (m.clone(), group_cpu.clone());
            std::thread::spawn(move || {
                set_current_thread_affinity(&cpu).unwrap();
                fifo(30);
                let t0 = monotonic_now_ns();
                drop(m.lock().unwrap());
                monotonic_now_ns() - t0
            })
        };
        let waited = high.join().unwrap();
        stop_medium.store(true, Ordering::Relaxed);
        medium.join().unwrap();
        low.join().unwrap();
        assert!(
            waited < 1_000_000_000,
            "round {round}: high waited {waited} ns: the low owner was not boosted past the medium hog"
        );
    }
}

#[test]
fn a_forked_child_locks_with_its_own_tid() {
    // Prime the parent's cache first: the child inherits it and must not use it.
    let parent_tid = rtlab_sys::futex::current_tid();
    // SAFETY: the child only reads TLS, calls gettid and _exit; no locks are taken.
    let code = unsafe {
        rtlab_sys::process::fork_run(|| {
            let raw = rustix::thread::gettid().as_raw_nonzero().get() as u32;
            let cached = rtlab_sys::futex::current_tid();
            i32::from(cached != raw || cached == parent_tid)
        })
    }
    .unwrap();
    assert_eq!(code, 0, "the child used its parent's TID");
}

#[test]
fn process_shared_mutex_excludes_across_fork() {
    let per_process = iterations(100_000);
    let map = rtlab_sys::mem::AnonMapping::new_shared(4096).unwrap();
    let mutex = map.as_ptr() as *mut RawPiMutex;
    let counter = map.as_ptr().wrapping_add(64) as *mut u64;
    let ready = map.as_ptr().wrapping_add(128) as *const AtomicU32;
    // SAFETY: the mapping is 4096 bytes, page aligned and zeroed; the three objects sit at
    // distinct, suitably aligned offsets and live as long as `map`.
    unsafe { mutex.write(RawPiMutex::new_shared()) };
    // SAFETY: as above; both processes only touch these through the shared mutex or atomics.
    let (mutex, ready) = unsafe { (&*mutex, &*ready) };
    let work = move || {
        ready.fetch_add(1, Ordering::SeqCst);
        while ready.load(Ordering::SeqCst) < 2 {
            std::hint::spin_loop();
        }
        for _ in 0..per_process {
            mutex.lock().unwrap();
            // SAFETY: the shared PI mutex is held, so no other process touches the counter.
            unsafe { counter.write_volatile(counter.read_volatile() + 1) };
            // SAFETY: this thread locked it just above.
            unsafe { mutex.unlock() };
        }
    };
    // SAFETY: the child runs only atomics, futex syscalls and gettid on memory mapped before
    // the fork.
    let child = unsafe {
        rtlab_sys::process::fork_child(|| {
            work();
            0
        })
    }
    .unwrap();
    work();
    assert_eq!(rtlab_sys::process::wait_child(child).unwrap(), 0);
    // SAFETY: read after both processes are done with it.
    let total = unsafe { counter.read_volatile() };
    assert_eq!(total, 2 * per_process);
}
