//! What this kernel supports, tried for real on a private word (no privilege needed).

use rtlab_sys::futex::{self, Errno, Scope};
use std::sync::atomic::AtomicU32;

/// Futex features the primitives rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// `FUTEX_LOCK_PI` / `FUTEX_UNLOCK_PI` (PiMutex, RobustMutex, CeilingMutex, PiCondvar).
    pub pi_futex: bool,
    /// `FUTEX_LOCK_PI2` (Linux 5.14+): timed PI locks on `CLOCK_MONOTONIC`.
    pub lock_pi2: bool,
    /// `FUTEX_CMP_REQUEUE_PI` / `FUTEX_WAIT_REQUEUE_PI` (PiCondvar).
    pub requeue_pi: bool,
    /// `get_robust_list` / `set_robust_list` (RobustMutex).
    pub robust_list: bool,
}

impl Capabilities {
    /// One line per missing feature, naming what cannot work without it; empty when all are
    /// present.
    pub fn missing(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if !self.pi_futex {
            out.push("PI futexes (FUTEX_LOCK_PI) are absent: PiMutex, RobustMutex, CeilingMutex and PiCondvar cannot work");
        }
        if !self.lock_pi2 {
            out.push("FUTEX_LOCK_PI2 is absent (kernel < 5.14): timed PI locks fall back to CLOCK_REALTIME deadlines");
        }
        if !self.requeue_pi {
            out.push("requeue-PI futexes are absent: PiCondvar cannot work");
        }
        if !self.robust_list {
            out.push("robust futex lists are absent: RobustMutex cannot detect a dead owner");
        }
        out
    }
}

/// Probes every feature (a few syscalls on a private stack word; never blocks).
pub fn probe() -> Capabilities {
    let word = AtomicU32::new(0);
    // Lock a free word (returns at once) and unlock it: ENOSYS means no PI futexes.
    let pi_futex = futex::lock_pi(&word, Scope::Private, None).is_ok()
        && futex::unlock_pi(&word, Scope::Private).is_ok();
    // LOCK_PI2 with a deadline already past on a free word: it takes the lock at once.
    let lock_pi2 = {
        let w = AtomicU32::new(0);
        let ok = futex::lock_pi2_supported(&w, Scope::Private);
        if ok {
            let _ = futex::unlock_pi(&w, Scope::Private);
        }
        ok
    };
    // CMP_REQUEUE_PI with a mismatching expected value: EAGAIN if supported, ENOSYS if not.
    let (cond, mutex) = (AtomicU32::new(1), AtomicU32::new(0));
    let requeue_pi = !matches!(
        futex::cmp_requeue_pi(&cond, Scope::Private, 0, &mutex, 0),
        Err(Errno::NOSYS)
    );
    Capabilities {
        pi_futex,
        lock_pi2,
        requeue_pi,
        robust_list: rtlab_sys::robust::robust_lists_supported(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_kernel_has_everything() {
        // The project's machines run Linux 6.x; a failure here means a kernel without PI
        // futexes, and the message says which feature.
        let caps = super::probe();
        assert!(caps.missing().is_empty(), "{:?}", caps.missing());
    }
}
