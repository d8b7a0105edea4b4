//! Locks in shared memory, used by two processes: seed 003's inter-process measurement of
//! the mutexes' fast path (one process, the lock in shared memory) and slow path (a ring of
//! three locks passed between a thread of this process and a forked child, every step
//! blocking and waking the other side).
//!
//! The child runs only [`child_ring`] over memory and semaphores prepared before the fork:
//! lock and unlock calls, atomics and the clock, no allocation on its success path.

use crate::peer::{ChildPlacement, PeerError};
use rtlab_sync::{RawPiMutex, RobustMutex};
use rtlab_sys::affinity::{set_current_thread_affinity, CpuList};
use rtlab_sys::mem::SharedValue;
use rtlab_sys::pthread::{PthreadKind, PthreadMutex};
use rtlab_sys::sched::set_current_thread_scheduler;
use rtlab_sys::sysv_sem::SysvSem;
use rtlab_sys::time::monotonic_now_ns;
use std::hint::black_box;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Which lock, process-shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedKind {
    /// rtlab's PI mutex (non-private futex).
    RtlabPi,
    /// rtlab's robust (PI) mutex.
    RtlabRobust,
    /// A glibc mutex with `PTHREAD_PROCESS_SHARED`.
    Glibc(PthreadKind),
    /// A System V semaphore (`semop` with `SEM_UNDO`).
    SysvSem,
}

/// What both processes see besides the locks: the child's readiness and its stamps.
#[derive(Debug, Default)]
struct Meeting {
    /// The child holds its first lock.
    ready: AtomicU32,
    /// The parent's go.
    go: AtomicU32,
    /// The child's first and last stamp.
    child_start: AtomicU64,
    child_end: AtomicU64,
}

/// Three locks of one kind in shared memory.
#[derive(Debug)]
pub enum SharedLocks {
    /// rtlab PI mutexes.
    Pi(SharedValue<[RawPiMutex; 3]>),
    /// rtlab robust mutexes.
    Robust(SharedValue<[RobustMutex; 3]>),
    /// glibc mutexes, each in its own shared mapping.
    Pthread([PthreadMutex; 3]),
    /// System V semaphores (shared by nature: the kernel holds them).
    Sem([SysvSem; 3]),
}

/// Whether a lock call succeeded, keeping the lock held (its guard given up: the ring
/// releases by hand).
#[inline]
fn held<G, E>(taken: Result<G, E>) -> bool {
    taken.map(std::mem::forget).is_ok()
}

/// One lock of the three, taken and released by any process that shares it.
trait Ring {
    /// Takes lock `i`; false on an error.
    fn take(&self, i: usize) -> bool;
    /// Releases lock `i`, held by the caller.
    fn release(&self, i: usize);
}

impl Ring for [RawPiMutex; 3] {
    #[inline]
    fn take(&self, i: usize) -> bool {
        self[i].lock().is_ok()
    }
    #[inline]
    fn release(&self, i: usize) {
        // SAFETY: `Ring` callers release only what they took (the ring's protocol).
        unsafe { self[i].unlock() }
    }
}

impl Ring for [RobustMutex; 3] {
    #[inline]
    fn take(&self, i: usize) -> bool {
        // SAFETY: the array lives in a shared mapping that never moves (SharedValue::pin).
        let m = unsafe { std::pin::Pin::new_unchecked(&self[i]) };
        held(m.lock())
    }
    #[inline]
    fn release(&self, i: usize) {
        // SAFETY: as in `take`.
        let m = unsafe { std::pin::Pin::new_unchecked(&self[i]) };
        let _ = m.unlock_held();
    }
}

impl Ring for [PthreadMutex; 3] {
    #[inline]
    fn take(&self, i: usize) -> bool {
        held(self[i].lock())
    }
    #[inline]
    fn release(&self, i: usize) {
        // SAFETY: the caller holds it (the ring's protocol).
        unsafe { self[i].unlock_held() }
    }
}

impl Ring for [SysvSem; 3] {
    #[inline]
    fn take(&self, i: usize) -> bool {
        held(self[i].lock())
    }
    #[inline]
    fn release(&self, i: usize) {
        let _ = self[i].unlock_held();
    }
}

/// ns per take+release of lock 0, over `iterations`, in the calling thread.
fn fast_path<R: Ring + ?Sized>(ring: &R, iterations: u64) -> Result<f64, PeerError> {
    if !ring.take(0) {
        return Err(PeerError::LockRefused);
    }
    ring.release(0);
    let t0 = monotonic_now_ns();
    for _ in 0..iterations {
        if !black_box(ring.take(0)) {
            return Err(PeerError::LockFailed);
        }
        ring.release(0);
    }
    Ok((monotonic_now_ns() - t0) as f64 / iterations as f64)
}

/// The ring of seed 003 (as `rtlab lock`'s in-process hand-off): the parent's side starts
/// holding lock 1 and repeats `take((n+2)%3); release((n+1)%3)`, the child's holds lock 2 and
/// repeats `take(m%3); release((m+2)%3)`. Returns the child's exit code.
fn child_ring<R: Ring + ?Sized>(ring: &R, meeting: &Meeting, steps: u64) -> i32 {
    if !ring.take(2) {
        return 20;
    }
    meeting.ready.store(1, Ordering::Release);
    while meeting.go.load(Ordering::Acquire) == 0 {
        std::hint::spin_loop();
    }
    meeting
        .child_start
        .store(monotonic_now_ns(), Ordering::Relaxed);
    let mut held = 2;
    for m in 0..steps {
        let (take, release) = ((m % 3) as usize, ((m + 2) % 3) as usize);
        if !ring.take(take) {
            return 21;
        }
        ring.release(release);
        held = take;
    }
    meeting
        .child_end
        .store(monotonic_now_ns(), Ordering::Relaxed);
    ring.release(held);
    0
}

fn parent_ring<R: Ring + ?Sized>(ring: &R, steps: u64) -> Result<u64, PeerError> {
    let mut held = 1;
    let start = monotonic_now_ns();
    for n in 0..steps {
        let (take, release) = (((n + 2) % 3) as usize, ((n + 1) % 3) as usize);
        if !ring.take(take) {
            return Err(PeerError::ParentLockFailed);
        }
        ring.release(release);
        held = take;
    }
    let end = monotonic_now_ns();
    ring.release(held);
    Ok(end - start)
}

impl SharedLocks {
    /// Three unlocked locks of `kind` in shared memory.
    pub fn new(kind: SharedKind) -> Result<Self, PeerError> {
        Ok(match kind {
            SharedKind::RtlabPi => SharedLocks::Pi(SharedValue::new(std::array::from_fn(|_| {
                RawPiMutex::new_shared()
            }))?),
            SharedKind::RtlabRobust => {
                SharedLocks::Robust(SharedValue::new(std::array::from_fn(|_| {
                    RobustMutex::new_shared()
                }))?)
            }
            SharedKind::Glibc(kind) => {
                let make = || PthreadMutex::new_shared(kind);
                SharedLocks::Pthread([make()?, make()?, make()?])
            }
            SharedKind::SysvSem => {
                let make = SysvSem::new;
                SharedLocks::Sem([make()?, make()?, make()?])
            }
        })
    }

    /// ns per lock+unlock pair of one of them, uncontended, over `iterations` in the calling
    /// thread (the fast path with the lock in shared memory).
    pub fn uncontended(&self, iterations: u64) -> Result<f64, PeerError> {
        match self {
            SharedLocks::Pi(v) => fast_path(v.get(), iterations),
            SharedLocks::Robust(v) => fast_path(v.get(), iterations),
            SharedLocks::Pthread(l) => fast_path(l, iterations),
            SharedLocks::Sem(l) => fast_path(l, iterations),
        }
    }

    /// ns per hand-off of the ring between the calling thread and a child forked from it,
    /// placed by `child`, over `steps` steps on each side.
    pub fn handoff(&self, steps: u64, child: ChildPlacement) -> Result<f64, PeerError> {
        match self {
            SharedLocks::Pi(v) => handoff(v.get(), steps, child),
            SharedLocks::Robust(v) => handoff(v.get(), steps, child),
            SharedLocks::Pthread(l) => handoff(l, steps, child),
            SharedLocks::Sem(l) => handoff(l, steps, child),
        }
    }
}

fn handoff<R: Ring + ?Sized>(
    ring: &R,
    steps: u64,
    child: ChildPlacement,
) -> Result<f64, PeerError> {
    let meeting = SharedValue::new(Meeting::default())?;
    let m = meeting.get();
    // SAFETY: the child runs `child_ring` over the locks and `meeting`, all in memory (or
    // kernel semaphores) set up before the fork, plus affinity and scheduler syscalls; it
    // allocates only on error paths, which end it with an exit code.
    let pid = unsafe {
        rtlab_sys::process::fork_peer(None, || {
            let placed = set_current_thread_affinity(&CpuList::from(vec![child.cpu]))
                .and_then(|_| set_current_thread_scheduler(child.policy, child.prio));
            if placed.is_err() {
                return 4;
            }
            child_ring(ring, m, steps)
        })
    }?;
    // The child holds lock 2 (or failed); then this side takes lock 1 (not before the fork:
    // the child would start with a copy of this thread's robust-list record holding it).
    let deadline = monotonic_now_ns() + 5_000_000_000;
    while m.ready.load(Ordering::Acquire) == 0 {
        if monotonic_now_ns() > deadline {
            let _ = rtlab_sys::process::kill_hard(pid);
            let status = rtlab_sys::process::wait_child(pid);
            return Err(PeerError::ChildNotStarted(status));
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    if !ring.take(1) {
        let _ = rtlab_sys::process::kill_hard(pid);
        let _ = rtlab_sys::process::wait_child(pid);
        return Err(PeerError::LockRefused);
    }
    m.go.store(1, Ordering::Release);
    let parent = parent_ring(ring, steps);
    if parent.is_err() {
        let _ = rtlab_sys::process::kill_hard(pid);
    }
    let status = rtlab_sys::process::wait_child(pid)?;
    let parent_ns = parent?;
    if status != 0 {
        return Err(PeerError::ChildFailed(status));
    }
    let (a, b) = (
        m.child_start.load(Ordering::Relaxed),
        m.child_end.load(Ordering::Relaxed),
    );
    // Both sides' spans overlap; the longer is the ring's time for 2 x steps hand-offs.
    let elapsed = parent_ns.max(b.saturating_sub(a));
    Ok(elapsed as f64 / (2 * steps) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtlab_sys::sched::Policy;

    #[test]
    fn every_kind_passes_the_ring_between_two_processes() {
        let child = ChildPlacement {
            cpu: rtlab_sys::affinity::usable_cpus().as_slice()[0],
            policy: Policy::Other,
            prio: 0,
        };
        for kind in [
            SharedKind::RtlabPi,
            SharedKind::RtlabRobust,
            SharedKind::Glibc(PthreadKind::Normal),
            SharedKind::Glibc(PthreadKind::PrioInherit),
            SharedKind::Glibc(PthreadKind::Robust),
            SharedKind::SysvSem,
        ] {
            let locks = SharedLocks::new(kind).unwrap();
            let fast = locks.uncontended(1_000).unwrap();
            let slow = locks.handoff(200, child).unwrap();
            assert!(fast > 0.0 && slow > 0.0, "{kind:?}: {fast} {slow}");
            // Twice: the locks were all released at the end of the first ring.
            locks.handoff(50, child).unwrap();
            assert!(locks.uncontended(10).is_ok(), "{kind:?}");
        }
    }
}
