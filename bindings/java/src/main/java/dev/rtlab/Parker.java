package dev.rtlab;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * One thread parks until an absolute deadline or an unpark (a token: an unpark before the park
 * makes it return at once), like {@code LockSupport.parkNanos} but to an absolute
 * {@code CLOCK_MONOTONIC} deadline, so a loop of parks never drifts.
 */
public final class Parker implements AutoCloseable {
    private final Arena arena = Arena.ofShared();
    private final MemorySegment segment = arena.allocate(8, 4);

    public Parker() {
        Native.check("rtlab_parker_init", Native.call(Native.PARKER_INIT, segment));
    }

    /** Parks until unparked (true) or until {@code deadlineNanos}, in {@link System#nanoTime()} terms (false). */
    public boolean parkUntil(long deadlineNanos) {
        int code = Native.call(Native.PARK_UNTIL, segment, Native.monotonicDeadline(deadlineNanos));
        if (code == Native.ETIMEDOUT) {
            return false;
        }
        Native.check("Parker.parkUntil", code);
        return true;
    }

    /** Wakes the parked thread, or lets its next park return at once. */
    public void unpark() {
        Native.check("Parker.unpark", Native.call(Native.UNPARK, segment));
    }

    @Override
    public void close() {
        arena.close();
    }
}
