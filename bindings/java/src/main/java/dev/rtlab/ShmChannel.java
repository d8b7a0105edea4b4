package dev.rtlab;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;

/**
 * A message channel between two processes in shared memory ({@code /dev/shm/<name>}): one
 * process sends, one receives, each from one thread at a time; no system call per message while
 * both are busy. A peer that dies is reported as {@link PeerDiedException} within the caller's
 * timeout; a killed sender never leaves a torn message. The creator's {@link #close()} removes
 * the name.
 */
public final class ShmChannel implements AutoCloseable {
    private final Arena arena = Arena.ofShared();
    private final MemorySegment handle;
    private final int maxMessage;
    private final MemorySegment sendBuffer;
    private final MemorySegment receiveBuffer;
    private final MemorySegment length;
    private boolean closed;

    private ShmChannel(String name, int capacity, boolean create) {
        MemorySegment out = arena.allocate(ADDRESS);
        MemorySegment cname = arena.allocateFrom(name);
        int code;
        try {
            code = create
                    ? (int) Native.CH_CREATE.invokeExact(cname, capacity, out)
                    : (int) Native.CH_OPEN.invokeExact(cname, out);
        } catch (Throwable t) {
            arena.close();
            throw new IllegalStateException("rtlab: channel call failed", t);
        }
        if (code != 0) {
            arena.close();
            throw Native.failure((create ? "ShmChannel.create(" : "ShmChannel.open(") + name + ")", code);
        }
        handle = out.get(ADDRESS, 0);
        try {
            maxMessage = (int) (long) Native.CH_MAX.invokeExact(handle);
        } catch (Throwable t) {
            throw new IllegalStateException("rtlab: rtlab_channel_max_message failed", t);
        }
        sendBuffer = arena.allocate(Math.max(1, maxMessage));
        receiveBuffer = arena.allocate(Math.max(1, maxMessage));
        length = arena.allocate(JAVA_LONG);
    }

    /** Creates the channel {@code name} ("/name") with a ring of {@code capacity} bytes (a power of two, at least 4096). */
    public static ShmChannel create(String name, int capacity) {
        return new ShmChannel(name, capacity, true);
    }

    /** Opens the channel {@code name} another process created. */
    public static ShmChannel open(String name) {
        return new ShmChannel(name, 0, false);
    }

    /** The longest message (a quarter of the ring). */
    public int maxMessage() {
        return maxMessage;
    }

    /** Sends {@code b[off, off+len)}, waiting up to {@code timeout} for room; false when it timed out. */
    public boolean send(byte[] b, int off, int len, Duration timeout) {
        java.util.Objects.checkFromIndexSize(off, len, b.length);
        if (len > maxMessage) {
            throw new IllegalArgumentException("message of " + len + " bytes exceeds the channel maximum of " + maxMessage);
        }
        MemorySegment.copy(b, off, sendBuffer, java.lang.foreign.ValueLayout.JAVA_BYTE, 0, len);
        int code;
        try {
            code = (int) Native.CH_SEND.invokeExact(handle, sendBuffer, (long) len, Native.deadlineAfter(timeout));
        } catch (Throwable t) {
            throw new IllegalStateException("rtlab: rtlab_channel_send failed", t);
        }
        if (code == Native.ETIMEDOUT) {
            return false;
        }
        Native.check("ShmChannel.send", code);
        return true;
    }

    /** Receives a message into {@code buf}, waiting up to {@code timeout}: its length, or -1 when it timed out. */
    public int receive(byte[] buf, Duration timeout) {
        int code;
        try {
            code = (int) Native.CH_RECV.invokeExact(handle, receiveBuffer, receiveBuffer.byteSize(), length,
                    Native.deadlineAfter(timeout));
        } catch (Throwable t) {
            throw new IllegalStateException("rtlab: rtlab_channel_recv failed", t);
        }
        if (code == Native.ETIMEDOUT) {
            return -1;
        }
        Native.check("ShmChannel.receive", code);
        int n = (int) length.get(JAVA_LONG, 0);
        if (n > buf.length) {
            throw new IllegalArgumentException("buffer of " + buf.length + " bytes is smaller than the " + n
                    + "-byte message (received, and lost: give a buffer of maxMessage() bytes)");
        }
        MemorySegment.copy(receiveBuffer, java.lang.foreign.ValueLayout.JAVA_BYTE, 0, buf, 0, n);
        return n;
    }

    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            Native.CH_CLOSE.invokeExact(handle);
        } catch (Throwable t) {
            throw new IllegalStateException("rtlab: rtlab_channel_close failed", t);
        } finally {
            arena.close();
        }
    }
}
