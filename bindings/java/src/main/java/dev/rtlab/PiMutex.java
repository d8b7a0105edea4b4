package dev.rtlab;

import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.VarHandle;
import java.time.Duration;

/**
 * A priority-inheritance mutex on a Linux PI futex: while a thread waits for it, the kernel runs
 * the holder at the waiter's priority, so a low-priority holder cannot be kept off the CPU by
 * medium-priority threads (the inversion {@code ReentrantLock} and {@code synchronized} allow).
 *
 * <p>The uncontended lock and unlock stay in Java: a compare-and-set of the futex word from 0 to
 * the calling thread's TID and back. Only a contended lock or an unlock with waiters calls into
 * rtlab (the kernel's slow path). Not reentrant. For platform threads only: a virtual thread has
 * no kernel thread of its own to boost.
 */
public final class PiMutex implements AutoCloseable {
    static final VarHandle WORD = JAVA_INT.varHandle();

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
    /** The last thread that locked it, with its TID: its next lock needs no ThreadLocal. */
    private Owner last;
    private boolean closed;

    /** An unlocked mutex for the threads of this process. */
    public PiMutex() {
        arena = Arena.ofAuto();
        segment = arena.allocate(8, 4);
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

    /** Takes the lock, waiting with priority inheritance while another thread holds it. */
    public void lock() {
        if (!WORD.compareAndSet(segment, 0L, 0, myTid())) {
            lockSlow();
        }
    }

    // The slow paths are methods of their own: the fast ones stay small enough to inline.
    private void lockSlow() {
        checkOpen();
        Native.checkLock("PiMutex.lock", Native.call(Native.PI_LOCK, segment));
    }

    /** Takes the lock if no other thread holds it. */
    public boolean tryLock() {
        int tid = myTid();
        if (WORD.compareAndSet(segment, 0L, 0, tid)) {
            return true;
        }
        int word = (int) WORD.getVolatile(segment, 0L);
        if ((word & 0x3fffffff) == tid) {
            throw new IllegalMonitorStateException("PiMutex is not reentrant: this thread holds it");
        }
        if ((word & 0x3fffffff) != 0) {
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

    /** Takes the lock, giving up after {@code timeout}; false when it timed out. */
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

    /** Releases the lock (only its holder may); the kernel hands it to the top waiter. */
    public void unlock() {
        if (!WORD.compareAndSet(segment, 0L, myTid(), 0)) {
            unlockSlow();
        }
    }

    private void unlockSlow() {
        Native.checkLock("PiMutex.unlock", Native.call(Native.PI_UNLOCK, segment));
    }

    /** Whether the calling thread holds it. */
    public boolean isHeldByCurrentThread() {
        return (((int) WORD.getVolatile(segment, 0L)) & 0x3fffffff) == myTid();
    }

    /** A condition variable of this mutex (its memory is the mutex's). */
    public PiCondition newCondition() {
        return new PiCondition(this, arena);
    }

    /**
     * Ends its use: it must not be held (its memory goes with the object, once unreachable);
     * a later contended lock fails.
     */
    @Override
    public void close() {
        if ((((int) WORD.getVolatile(segment, 0L)) & 0x3fffffff) != 0) {
            throw new IllegalStateException("PiMutex closed while held");
        }
        closed = true;
    }
}
