//! What a late thread waited for: how its delay is read.

/// What the late thread was waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Wait {
    /// Its own timer (a periodic wakeup).
    #[default]
    Timer,
    /// Its timer, then a lock: the sample ends when it holds the lock.
    Lock,
    /// Another thread's wake-up call (condition variable, message), issued at the deadline.
    Notify,
    /// A reply: the thread sends at the deadline, blocks, and the peer's answer wakes it.
    Reply,
    /// None: the thread spins and never sleeps (`rtlab noise`); the window is a gap between
    /// two of its clock reads, and whatever held the CPU meanwhile took it from the thread.
    Spin,
}

impl Wait {
    /// Waits in which the thread waits on another task within the window: a lock's holder,
    /// a peer's reply, the notifying thread's call (from the deadline to its wakeup).
    pub fn blocks(self) -> bool {
        matches!(self, Wait::Lock | Wait::Reply | Wait::Notify)
    }
}
