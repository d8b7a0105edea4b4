package dev.rtlab;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Date;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;

/**
 * A condition variable of a {@link PiMutex} (requeue-PI): a signal hands the mutex to the
 * highest-priority waiter, with priority inheritance, instead of waking every waiter to fight for
 * it. Made by {@link PiMutex#newCondition()}.
 *
 * <p>A {@link Condition}, with these properties:
 * <ul>
 * <li>Every method needs the calling thread to hold the mutex, else it throws
 * {@link IllegalMonitorStateException}; every {@code await} returns holding it again.
 * <li><b>Spurious wake-ups happen</b>: an {@code await} may return without a signal (for
 * instance when another thread's signal raced with its wait). Wait in a loop that re-checks
 * the condition, as the {@link Condition} contract asks.
 * <li>The interruptible forms throw {@link InterruptedException} (and clear the interrupt
 * status) when the thread is interrupted on entry or while waiting, after taking the mutex
 * back. A thread blocked in the kernel cannot be woken by {@link Thread#interrupt()}: it
 * looks at its interrupt status every {@value PiMutex#INTERRUPT_CHECK_MS} ms, so it notices an
 * interrupt within that time (plus the time to take the mutex back). If a signal and an
 * interrupt both arrive, the signal may win: the method returns normally, with the interrupt
 * status still set.
 * <li>{@link #awaitUninterruptibly()} waits through interrupts and returns with the interrupt
 * status still set.
 * <li>Signals wake waiters in priority order, not in arrival order.
 * </ul>
 */
public final class PiCondition implements Condition {
    private final PiMutex mutex;
    private final MemorySegment segment;

    PiCondition(PiMutex mutex, Arena arena) {
        this.mutex = mutex;
        this.segment = arena.allocate(16, 8);
        Native.check("rtlab_pi_cond_init", Native.call(Native.COND_INIT, segment, 0));
    }

    /** The condition word (bumped by every signal; offset 0 of rtlab_pi_cond_t). */
    private int sequence() {
        return (int) PiMutex.WORD.getVolatile(segment, 0L);
    }

    /**
     * Releases the mutex (which the calling thread must hold) and waits for a signal or until
     * {@code deadlineNanos} ({@link System#nanoTime()} terms); returns holding the mutex again:
     * true when signalled (or woken spuriously: re-check the predicate), false on timeout.
     * Interrupts do not end the wait.
     */
    public boolean awaitUntil(long deadlineNanos) {
        long deadline = Native.monotonicDeadline(deadlineNanos);
        int code = Native.invoke("rtlab_pi_cond_wait_until",
                () -> (int) Native.COND_WAIT_UNTIL.invokeExact(segment, mutex.segment, deadline));
        if (code == Native.ETIMEDOUT) {
            return false;
        }
        Native.checkLock("PiCondition.awaitUntil", code);
        return true;
    }

    /**
     * Waits until signalled, until {@code deadline} (nanoTime terms) unless {@code timed}, or
     * (when {@code interruptible}) until interrupted; true when signalled (or spuriously).
     *
     * <p>The kernel's wait runs in slices so that interrupts are seen. A slice that times out
     * is a wake-up only if the condition word moved meanwhile: signals need the mutex, which
     * this thread holds from the word's first read until it waits and again when a slice ends,
     * so an unchanged word means no signal was sent in between, and none was lost.
     */
    private boolean awaitSliced(long deadline, boolean timed, boolean interruptible)
            throws InterruptedException {
        if (interruptible && Thread.interrupted()) {
            throw new InterruptedException();
        }
        mutex.requireHeld("PiCondition.await");
        int seq = sequence();
        while (true) {
            long now = System.nanoTime();
            if (timed && deadline - now <= 0) {
                return false;
            }
            long sliceEnd;
            if (interruptible) {
                sliceEnd = now + PiMutex.INTERRUPT_CHECK_NANOS;
                if (timed && deadline - sliceEnd < 0) {
                    sliceEnd = deadline;
                }
            } else {
                sliceEnd = timed ? deadline : Long.MAX_VALUE;
            }
            boolean woken = sliceEnd == Long.MAX_VALUE ? awaitForever() : awaitUntil(sliceEnd);
            if (woken) {
                return true;
            }
            if (interruptible && Thread.interrupted()) {
                throw new InterruptedException();
            }
            if (sequence() != seq) {
                return true;
            }
        }
    }

    private boolean awaitForever() {
        int code = Native.invoke("rtlab_pi_cond_wait_until",
                () -> (int) Native.COND_WAIT_UNTIL.invokeExact(segment, mutex.segment, Native.FOREVER));
        Native.checkLock("PiCondition.await", code);
        return true;
    }

    private static long deadlineAfter(long nanos) {
        long now = System.nanoTime();
        return now + nanos < now ? Long.MAX_VALUE - 1 : now + nanos;
    }

    /** Waits until signalled (or spuriously woken) or interrupted. */
    @Override
    public void await() throws InterruptedException {
        awaitSliced(0, false, true);
    }

    /** Waits until signalled (or spuriously woken); interrupts do not end the wait. */
    @Override
    public void awaitUninterruptibly() {
        try {
            awaitSliced(0, false, false);
        } catch (InterruptedException impossible) {
            throw new AssertionError(impossible);
        }
    }

    /**
     * Waits until signalled (or spuriously woken), interrupted or {@code nanosTimeout} passed;
     * returns an estimate of the time left (0 or less: it timed out).
     */
    @Override
    public long awaitNanos(long nanosTimeout) throws InterruptedException {
        long deadline = deadlineAfter(Math.max(nanosTimeout, 0));
        awaitSliced(deadline, true, true);
        return deadline - System.nanoTime();
    }

    /** Waits until signalled (or spuriously woken), interrupted or {@code time} passed; false on timeout. */
    @Override
    public boolean await(long time, TimeUnit unit) throws InterruptedException {
        return awaitSliced(deadlineAfter(Math.max(unit.toNanos(time), 0)), true, true);
    }

    /**
     * Waits until signalled (or spuriously woken), interrupted or the wall-clock
     * {@code deadline}; false when the deadline passed. The wall-clock time is turned into a
     * monotonic timeout on entry: a later change of the system clock does not move it.
     */
    @Override
    public boolean awaitUntil(Date deadline) throws InterruptedException {
        long ms = deadline.getTime() - System.currentTimeMillis();
        long nanos = ms > Long.MAX_VALUE / 1_000_000 ? Long.MAX_VALUE : Math.max(ms, 0) * 1_000_000;
        return awaitSliced(deadlineAfter(nanos), true, true);
    }

    /**
     * Wakes the highest-priority waiter (which returns holding the mutex once this thread
     * releases it).
     *
     * @throws IllegalMonitorStateException if the calling thread does not hold the mutex
     */
    @Override
    public void signal() {
        mutex.requireHeld("PiCondition.signal");
        Native.check("PiCondition.signal", Native.call(Native.COND_SIGNAL, segment));
    }

    /**
     * Wakes every waiter: one now, the others queued on the mutex in priority order.
     *
     * @throws IllegalMonitorStateException if the calling thread does not hold the mutex
     */
    @Override
    public void signalAll() {
        mutex.requireHeld("PiCondition.signalAll");
        Native.check("PiCondition.signalAll", Native.call(Native.COND_BROADCAST, segment));
    }
}
