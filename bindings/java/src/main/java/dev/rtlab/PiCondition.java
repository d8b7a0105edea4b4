package dev.rtlab;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * A condition variable of a {@link PiMutex} (requeue-PI): a signal hands the mutex to the
 * highest-priority waiter, with priority inheritance, instead of waking every waiter to fight for
 * it. Made by {@link PiMutex#newCondition()}.
 */
public final class PiCondition {
    private final PiMutex mutex;
    private final MemorySegment segment;

    PiCondition(PiMutex mutex, Arena arena) {
        this.mutex = mutex;
        this.segment = arena.allocate(16, 8);
        Native.check("rtlab_pi_cond_init", Native.call(Native.COND_INIT, segment, 0));
    }

    /**
     * Releases the mutex (which the calling thread must hold) and waits for a signal or until
     * {@code deadlineNanos} ({@link System#nanoTime()} terms); returns holding the mutex again:
     * true when signalled (or woken spuriously: re-check the predicate), false on timeout.
     */
    public boolean awaitUntil(long deadlineNanos) {
        int code;
        try {
            code = (int) Native.COND_WAIT_UNTIL.invokeExact(segment, mutex.segment,
                    Native.monotonicDeadline(deadlineNanos));
        } catch (Throwable t) {
            throw new IllegalStateException("rtlab: rtlab_pi_cond_wait_until failed", t);
        }
        if (code == Native.ETIMEDOUT) {
            return false;
        }
        Native.checkLock("PiCondition.awaitUntil", code);
        return true;
    }

    /** Wakes the highest-priority waiter (which returns holding the mutex). */
    public void signal() {
        Native.check("PiCondition.signal", Native.call(Native.COND_SIGNAL, segment));
    }

    /** Wakes every waiter: one now, the others queued on the mutex in priority order. */
    public void signalAll() {
        Native.check("PiCondition.signalAll", Native.call(Native.COND_BROADCAST, segment));
    }
}
