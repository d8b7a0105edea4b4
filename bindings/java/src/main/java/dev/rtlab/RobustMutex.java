package dev.rtlab;

import java.lang.foreign.MemorySegment;

/**
 * A robust priority-inheritance mutex in memory shared between processes (a file under
 * {@code /dev/shm} mapped with {@code FileChannel.map}, say): when its holder dies, the next
 * {@link #lock()} returns true and holds it; the caller repairs the shared data, then calls
 * {@link #makeConsistent()} before {@link #unlock()} (unlocking without that makes it unusable
 * for everyone: {@link NotRecoverableException}).
 *
 * <p>It occupies {@link #SIZE} bytes aligned to {@link #ALIGN} of the segment given, which must
 * stay mapped while any thread holds it. A thread holds at most 32 robust mutexes at once.
 */
public final class RobustMutex {
    /** Bytes it occupies. */
    public static final long SIZE = 64;
    /** The alignment it needs. */
    public static final long ALIGN = 64;

    private final MemorySegment segment;

    private RobustMutex(MemorySegment at) {
        if (at.byteSize() < SIZE || at.address() % ALIGN != 0) {
            throw new IllegalArgumentException("a RobustMutex needs " + SIZE + " bytes aligned to " + ALIGN
                    + " (got " + at.byteSize() + " bytes at 0x" + Long.toHexString(at.address()) + ")");
        }
        this.segment = at.asSlice(0, SIZE);
    }

    /** Writes a fresh, unlocked mutex at the start of {@code at} (once, before any process uses it). */
    public static RobustMutex create(MemorySegment at) {
        RobustMutex m = new RobustMutex(at);
        Native.check("rtlab_robust_mutex_init", Native.call(Native.ROBUST_INIT, m.segment));
        return m;
    }

    /** The mutex another process created at the start of {@code at}. */
    public static RobustMutex attach(MemorySegment at) {
        return new RobustMutex(at);
    }

    /**
     * Takes the lock; true when its previous holder died holding it (this thread holds it now:
     * repair, then {@link #makeConsistent()}).
     */
    public boolean lock() {
        int code = Native.call(Native.ROBUST_LOCK, segment);
        if (code == Native.EOWNERDEAD) {
            return true;
        }
        Native.checkLock("RobustMutex.lock", code);
        return false;
    }

    /** Declares the shared data repaired after a {@link #lock()} that returned true. */
    public void makeConsistent() {
        Native.checkLock("RobustMutex.makeConsistent", Native.call(Native.ROBUST_CONSISTENT, segment));
    }

    /** Releases it (only its holder may). */
    public void unlock() {
        Native.checkLock("RobustMutex.unlock", Native.call(Native.ROBUST_UNLOCK, segment));
    }
}
