package dev.rtlab;

import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.VarHandle;
import java.lang.ref.Reference;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;

/**
 * A priority-inheritance mutex on a Linux PI futex: while a thread waits for it, the kernel runs
 * the holder at the waiter's priority, so a low-priority holder cannot be kept off the CPU by
 * medium-priority threads (the inversion {@code ReentrantLock} and {@code synchronized} allow).
 *
 * <p>It is a {@link Lock}, so it can replace {@code ReentrantLock} where code holds the lock
 * once per thread at a time:
 * <ul>
 * <li><b>Not reentrant.</b> A thread that holds it and locks it again ({@code lock},
 * {@code lockInterruptibly}, {@code tryLock} in any form) gets an
 * {@link IllegalMonitorStateException} at once, never a silent deadlock.
 * <li>{@link #unlock()} by a thread that does not hold it throws
 * {@link IllegalMonitorStateException}, as do its conditions' {@code await} and {@code signal}.
 * <li>{@link #lockInterruptibly()} and {@link #tryLock(long, TimeUnit)} throw
 * {@link InterruptedException} (and clear the interrupt status) when the thread is interrupted
 * on entry or while it waits. A thread blocked in the kernel cannot be woken by
 * {@link Thread#interrupt()}, so a waiting thread looks at its interrupt status every
 * {@value #INTERRUPT_CHECK_MS} ms: it notices an interrupt within that time. Between two looks
 * it stays queued with priority inheritance; each look re-queues it behind waiters of its own
 * priority.
 * <li>{@link #lock()} ignores interrupts, as {@code ReentrantLock.lock()} does.
 * <li>Acquisition is in priority order (the kernel's PI wait queue), not in arrival order.
 * </ul>
 *
 * <p>The uncontended lock and unlock stay in Java: a compare-and-set of the futex word from 0 to
 * the calling thread's TID and back, with no native call. Only a contended lock or an unlock
 * with waiters calls into rtlab (the kernel's slow path). For platform threads only: a virtual
 * thread has no kernel thread of its own to boost.
 */
public final class PiMutex implements Lock, AutoCloseable {
    static final VarHandle WORD = JAVA_INT.varHandle();
    /**
     * All of memory, for the fast paths: an access through this constant segment is checked
     * only for its offset's range and alignment (the JIT folds its size and liveness), where
     * an access through the word's own segment loads and tests the segment's kind, size,
     * address and liveness on every lock and unlock. The word's own segment is kept in
     * {@link #segment}, so its memory lives as long as this object.
     */
    private static final MemorySegment ALL = MemorySegment.NULL.reinterpret(Long.MAX_VALUE);
    /** The futex word's owner TID bits (the others: FUTEX_WAITERS, FUTEX_OWNER_DIED). */
    static final int TID_MASK = 0x3fffffff;
    /** How often a thread waiting interruptibly looks at its interrupt status. */
    static final long INTERRUPT_CHECK_MS = 10;
    static final long INTERRUPT_CHECK_NANOS = INTERRUPT_CHECK_MS * 1_000_000L;

    /** The calling thread's TID, read once per thread. */
    private static final ThreadLocal<Integer> TID = ThreadLocal.withInitial(() -> {
        if (Thread.currentThread().isVirtual()) {
            throw new UnsupportedOperationException(
                    "rtlab's PI locks need platform threads: a virtual thread has no kernel thread to boost");
        }
        return (int) Native.gettid();
    });

    /** A thread and its TID (read together: one reference). */
    private record Owner(Thread thread, int tid) {}

    // An automatic arena: the futex word lives as long as this object is reachable (its
    // accesses need no liveness check, unlike a closeable arena's; that check was a third of
    // the uncontended cost).
    private final Arena arena;
    final MemorySegment segment;
    /** The futex word's address (in {@link #ALL}). */
    private final long word;
    /** The last thread that locked it, with its TID: its next lock needs no ThreadLocal. */
    private Owner last;
    private boolean closed;

    /** An unlocked mutex for the threads of this process. */
    public PiMutex() {
        arena = Arena.ofAuto();
        segment = arena.allocate(8, 4);
        word = segment.address();
        Native.check("rtlab_pi_mutex_init", Native.call(Native.PI_INIT, segment, 0));
    }

    static int tid() {
        return TID.get();
    }

    /** The calling thread's TID, from the last locker's if that is this thread. */
    private int myTid() {
        Thread me = Thread.currentThread();
        Owner o = last;
        if (o != null && o.thread == me) {
            return o.tid;
        }
        return remember(me);
    }

    private int remember(Thread me) {
        int tid = tid();
        last = new Owner(me, tid);
        return tid;
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("PiMutex used after close()");
        }
    }

    /**
     * Takes the lock, waiting with priority inheritance while another thread holds it;
     * interrupts do not end the wait.
     *
     * @throws IllegalMonitorStateException if the calling thread holds it already
     */
    @Override
    public void lock() {
        if (!WORD.compareAndSet(ALL, word, 0, myTid())) {
            lockSlow();
        }
        // The word is in memory this object owns: it must stay reachable until the CAS is done.
        Reference.reachabilityFence(this);
    }

    // The slow paths are methods of their own: the fast ones stay small enough to inline.
    private void lockSlow() {
        checkOpen();
        Native.checkLock("PiMutex.lock", Native.call(Native.PI_LOCK, segment));
    }

    /**
     * Takes the lock unless the thread is interrupted first (see the class comment for how
     * soon an interrupt is noticed).
     *
     * @throws InterruptedException if the thread was interrupted on entry or while waiting
     *     (its interrupt status is cleared)
     * @throws IllegalMonitorStateException if the calling thread holds it already
     */
    @Override
    public void lockInterruptibly() throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        if (!WORD.compareAndSet(segment, 0L, 0, myTid())) {
            lockUntil(Long.MAX_VALUE, true);
        }
    }

    /**
     * Waits for the lock until {@code deadline} ({@link System#nanoTime()} terms; MAX_VALUE:
     * no deadline), in slices so that an interrupt is noticed; false when the deadline passed.
     */
    private boolean lockUntil(long deadline, boolean forever) throws InterruptedException {
        checkOpen();
        while (true) {
            long now = System.nanoTime();
            long sliceEnd = now + INTERRUPT_CHECK_NANOS;
            if (!forever) {
                if (deadline - now <= 0) {
                    return false;
                }
                if (deadline - sliceEnd < 0) {
                    sliceEnd = deadline;
                }
            }
            int code = Native.call(Native.PI_LOCK_UNTIL, segment, Native.monotonicDeadline(sliceEnd));
            if (code != Native.ETIMEDOUT) {
                Native.checkLock("PiMutex.lock", code);
                return true;
            }
            if (Thread.interrupted()) {
                throw new InterruptedException();
            }
        }
    }

    /**
     * Takes the lock if no other thread holds it.
     *
     * @throws IllegalMonitorStateException if the calling thread holds it already
     */
    @Override
    public boolean tryLock() {
        int tid = myTid();
        if (WORD.compareAndSet(segment, 0L, 0, tid)) {
            return true;
        }
        int word = (int) WORD.getVolatile(segment, 0L);
        if ((word & TID_MASK) == tid) {
            throw new IllegalMonitorStateException("PiMutex is not reentrant: this thread holds it");
        }
        if ((word & TID_MASK) != 0) {
            return false;
        }
        // Waiters queued but no owner (the kernel is handing it over): let the kernel decide.
        int code = Native.call(Native.PI_TRYLOCK, segment);
        if (code == Native.EBUSY) {
            return false;
        }
        Native.check("PiMutex.tryLock", code);
        return true;
    }

    /**
     * Takes the lock, waiting at most {@code time}; false when it timed out.
     *
     * @throws InterruptedException if the thread was interrupted on entry or while waiting
     *     (its interrupt status is cleared)
     * @throws IllegalMonitorStateException if the calling thread holds it already
     */
    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        long nanos = unit.toNanos(time);
        if (WORD.compareAndSet(segment, 0L, 0, myTid())) {
            return true;
        }
        if (nanos <= 0) {
            return tryLock();
        }
        long now = System.nanoTime();
        long deadline = now + nanos < now ? Long.MAX_VALUE : now + nanos;
        return lockUntil(deadline, false);
    }

    /**
     * Takes the lock, giving up after {@code timeout}; false when it timed out. Interrupts do
     * not end the wait.
     */
    public boolean lock(Duration timeout) {
        if (WORD.compareAndSet(segment, 0L, 0, myTid())) {
            return true;
        }
        checkOpen();
        int code = Native.call(Native.PI_LOCK_UNTIL, segment, Native.deadlineAfter(timeout));
        if (code == Native.ETIMEDOUT) {
            return false;
        }
        Native.checkLock("PiMutex.lock", code);
        return true;
    }

    /**
     * Releases the lock; the kernel hands it to the highest-priority waiter.
     *
     * @throws IllegalMonitorStateException if the calling thread does not hold it
     */
    @Override
    public void unlock() {
        if (!WORD.compareAndSet(ALL, word, myTid(), 0)) {
            unlockSlow();
        }
        Reference.reachabilityFence(this);
    }

    private void unlockSlow() {
        Native.checkLock("PiMutex.unlock", Native.call(Native.PI_UNLOCK, segment));
    }

    /** Whether the calling thread holds it. */
    public boolean isHeldByCurrentThread() {
        return (((int) WORD.getVolatile(segment, 0L)) & TID_MASK) == myTid();
    }

    void requireHeld(String what) {
        if (!isHeldByCurrentThread()) {
            throw new IllegalMonitorStateException(what + ": the calling thread does not hold the PiMutex");
        }
    }

    /** Whether some thread holds it (a snapshot, for monitoring). */
    public boolean isLocked() {
        return (((int) WORD.getVolatile(segment, 0L)) & TID_MASK) != 0;
    }

    /** A condition variable of this mutex (its memory is the mutex's). */
    @Override
    public PiCondition newCondition() {
        return new PiCondition(this, arena);
    }

    /**
     * Ends its use: it must not be held (its memory goes with the object, once unreachable);
     * a later contended lock fails.
     */
    @Override
    public void close() {
        if (isLocked()) {
            throw new IllegalStateException("PiMutex closed while held");
        }
        closed = true;
    }
}
