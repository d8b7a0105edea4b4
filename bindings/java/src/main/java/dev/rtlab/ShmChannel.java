package dev.rtlab;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.VarHandle;
import java.time.Duration;

/**
 * A message channel between two processes in shared memory ({@code /dev/shm/<name>}): one
 * process sends, one receives, each from one thread at a time; no system call per message while
 * both are busy. A peer that dies is reported as {@link PeerDiedException} within the caller's
 * timeout; a killed sender never leaves a torn message. The creator's {@link #close()} removes
 * the name.
 *
 * <p>Once an end has been used, its messages go through the shared ring in Java (the ring's
 * protocol, as crates/rtlab-ipc/src/ring/mod.rs documents it), without a native call: a send writes
 * the record and its stamp, a receive polls the stamp where the record is. rtlab's native code
 * still does everything else: waiting for room or for a message past a short spin, a wrap at
 * the ring's end, waking a sleeping peer, noticing a dead one, and reporting anything corrupt.
 */
public final class ShmChannel implements AutoCloseable {
    /** The ring format this class was written for (RTLAB_CHANNEL_FORMAT). */
    private static final int FORMAT = 4;
    private static final int SEND = 1;
    private static final int RECV = 2;
    private static final int LAYOUT_WORDS = 13;
    /** How long a receive polls in Java before it waits in rtlab (as rtlab's own spin). */
    private static final long SPIN_NS = 20_000;
    private static final Duration SPIN = Duration.ofNanos(SPIN_NS);
    private static final long RECORD_HEADER = 16;
    /**
     * Payloads up to this many bytes are copied in one piece. Longer ones are copied in two,
     * the part in the stamp's cache line last. The second copy costs ~10 ns in one thread,
     * more than it saves on a short copy: ping-pong with Aeron, 64 B, 1.08x/1.04x/1.05x Aeron's
     * round trip with two copies, 1.02x/1.03x/1.00x with one; at 1 KiB two copies win
     * (0.89x/0.88x/0.95x against 0.95x/0.98x). bench/RESULTS.md, issue 18.
     */
    private static final int ONE_COPY_MAX = 128;
    private static final int WRAP = -1;
    /** tryReceive: nothing there yet; anything else the native path must see. */
    private static final int EMPTY = -1;
    private static final int NATIVE = -2;
    private static final VarHandle LONG = JAVA_LONG.varHandle();
    private static final VarHandle INT = JAVA_INT.varHandle();

    private final Arena arena = Arena.ofShared();
    private final MemorySegment handle;
    private final int maxMessage;
    private final MemorySegment sendBuffer;
    private final MemorySegment receiveBuffer;
    private final MemorySegment length;
    private volatile boolean closed;

    // The ring, once an end was attached (by its first native call) and the format is known.
    private MemorySegment map;
    private long magic;
    private long capacity;
    private long ringAt;
    private long headAt;
    private long tailAt;
    private long consumerWaitingAt;
    private long producerWaitingAt;
    /** A receive leaves out the fence before it reads the producer's flag (rtlab.h). */
    private boolean consumerFenceless;
    private boolean sendInJava;
    private boolean receiveInJava;
    /** The consumer's position as last read by this sender: a lower bound (it only grows). */
    private long tailSeen;
    /** The sum of the reads {@link #tryReceive} makes only to pull a line in (so the JIT keeps them). */
    private long pulled;
    /** The length of the last message received in Java. */
    private int lastLength;
    /** Messages sent and received in Java (for tests). */
    long sentInJava;
    long receivedInJava;

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

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("ShmChannel used after close()");
        }
    }

    /** Sends {@code b[off, off+len)}, waiting up to {@code timeout} for room; false when it timed out. */
    public boolean send(byte[] b, int off, int len, Duration timeout) {
        java.util.Objects.checkFromIndexSize(off, len, b.length);
        checkOpen();
        if (len > maxMessage) {
            throw new IllegalArgumentException("message of " + len + " bytes exceeds the channel maximum of " + maxMessage);
        }
        if (sendInJava && trySend(b, off, len)) {
            return true;
        }
        MemorySegment.copy(b, off, sendBuffer, JAVA_BYTE, 0, len);
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
        if (!sendInJava) {
            sendInJava = attach(SEND, true);
        }
        return true;
    }

    /**
     * Receives a message into {@code buf}, waiting up to {@code timeout}: its length, or -1 when
     * it timed out. A message longer than {@code buf} stays in the channel
     * (IllegalArgumentException; a buffer of {@link #maxMessage()} bytes always fits).
     */
    public int receive(byte[] buf, Duration timeout) {
        checkOpen();
        if (timeout.isNegative()) {
            throw new IllegalArgumentException("negative timeout " + timeout);
        }
        if (receiveInJava) {
            // Small, so that it inlines into the caller's loop: a message there, or a poll.
            int n = tryReceive(buf);
            if (n >= 0 || (n == EMPTY && timeout.isZero())) {
                return n;
            }
            return receiveSlow(buf, timeout, n);
        }
        return receiveSlow(buf, timeout, NATIVE);
    }

    /** {@link #receive} past a first poll in Java that found {@code n} (EMPTY or NATIVE). */
    private int receiveSlow(byte[] buf, Duration timeout, int n) {
        long deadline;
        if (n == NATIVE) {
            deadline = Native.deadlineAfter(timeout);
        } else {
            // Poll in Java for up to rtlab's own spin (or the timeout), then wait in rtlab for
            // what is left of the timeout.
            long start = System.nanoTime();
            long limit = timeout.compareTo(SPIN) < 0 ? timeout.toNanos() : SPIN_NS;
            while (n == EMPTY && System.nanoTime() - start < limit) {
                for (int i = 0; i < 64 && n == EMPTY; i++) {
                    Thread.onSpinWait();
                    n = tryReceive(buf);
                }
                if (n >= 0) {
                    return n;
                }
            }
            Duration left = timeout.minusNanos(System.nanoTime() - start);
            deadline = left.isNegative() ? 0 : Native.deadlineAfter(left); // 0: rtlab polls once more
        }
        int code;
        try {
            code = (int) Native.CH_RECV.invokeExact(handle, receiveBuffer, Math.min(buf.length, receiveBuffer.byteSize()),
                    length, deadline);
        } catch (Throwable t) {
            throw new IllegalStateException("rtlab: rtlab_channel_recv failed", t);
        }
        if (code == Native.ETIMEDOUT) {
            return -1;
        }
        if (code == Native.ENOBUFS) {
            throw tooSmall(buf.length, length.get(JAVA_LONG, 0));
        }
        Native.check("ShmChannel.receive", code);
        int got = (int) length.get(JAVA_LONG, 0);
        MemorySegment.copy(receiveBuffer, JAVA_BYTE, 0, buf, 0, got);
        if (!receiveInJava) {
            receiveInJava = attach(RECV, false);
        }
        return got;
    }

    private static IllegalArgumentException tooSmall(int have, long need) {
        return new IllegalArgumentException("buffer of " + have + " bytes is smaller than the " + need
                + "-byte message (it stays in the channel: give a buffer of maxMessage() bytes)");
    }

    /**
     * Reads the ring's layout for {@code end} (attached already by its first native call):
     * whether that end may send or receive in Java (the format is this class's; a sender also
     * needs the one-producer variant).
     */
    private boolean attach(int end, boolean sender) {
        MemorySegment words = arena.allocate(JAVA_LONG, LAYOUT_WORDS);
        int code;
        try {
            code = (int) Native.CH_LAYOUT.invokeExact(handle, end, words, (long) LAYOUT_WORDS);
        } catch (Throwable t) {
            throw new IllegalStateException("rtlab: rtlab_channel_layout failed", t);
        }
        if (code != 0 || words.getAtIndex(JAVA_LONG, 0) != FORMAT || (sender && words.getAtIndex(JAVA_LONG, 1) != 1)) {
            return false;
        }
        if (map == null) {
            magic = words.getAtIndex(JAVA_LONG, 4);
            capacity = words.getAtIndex(JAVA_LONG, 5);
            ringAt = words.getAtIndex(JAVA_LONG, 7);
            headAt = words.getAtIndex(JAVA_LONG, 8);
            tailAt = words.getAtIndex(JAVA_LONG, 9);
            consumerWaitingAt = words.getAtIndex(JAVA_LONG, 10);
            producerWaitingAt = words.getAtIndex(JAVA_LONG, 11);
            consumerFenceless = words.getAtIndex(JAVA_LONG, 12) == 1;
            // The mapping lives until rtlab_channel_close (close() stops both ends first).
            map = MemorySegment.ofAddress(words.getAtIndex(JAVA_LONG, 2)).reinterpret(words.getAtIndex(JAVA_LONG, 3));
        }
        return Long.bitCount(capacity) == 1 && ringAt + capacity == map.byteSize();
    }

    private static long recordLength(long len) {
        return RECORD_HEADER + ((len + 15) & ~15L);
    }

    /** head or tail (at {@code at}) if the header is intact and it is 16-aligned, else -1. */
    private long position(MemorySegment m, long at) {
        if ((long) LONG.get(m, 0L) != magic) {
            return -1;
        }
        long p = (long) LONG.get(m, at);
        return (p & 15) == 0 ? p : -1;
    }

    /** Sends in Java when the record fits before the ring's end and there is room: true if sent. */
    private boolean trySend(byte[] b, int off, int len) {
        MemorySegment m = map;
        long head = position(m, headAt); // only this process's sender writes it
        if (head == -1) {
            return false;
        }
        long offset = head & (capacity - 1);
        // No look at the stamp at head (for a record a dead sender published without moving
        // head): rtlab did that on this end's first send, and since then only this end
        // writes head. The receiver is polling that cache line; reading it would fetch it
        // back before the record's first store, a transfer between CPUs on every message.
        long need = recordLength(len);
        if (capacity - offset < need) {
            return false; // a wrap: rtlab writes the marker
        }
        long end = head + need;
        // Room for the record and the stamp slot past it, which is zeroed below.
        if (end + 8 > tailSeen + capacity) {
            long tail = (long) LONG.getAcquire(m, tailAt);
            if (tail > head || head - tail > capacity || (tail & 15) != 0) {
                return false; // rtlab reports it
            }
            tailSeen = tail;
            if (end + 8 > tail + capacity) {
                return false; // full: rtlab waits
            }
        }
        long at = ringAt + offset;
        LONG.set(m, ringAt + (end & (capacity - 1)), 0L);
        long data = at + RECORD_HEADER;
        if (len <= ONE_COPY_MAX) {
            MemorySegment.copy(b, off, m, JAVA_BYTE, data, len);
        } else {
            // The stores to the stamp's cache line go last and together: the receiver polls
            // that line, and while the rest of a long payload is copied it would take the line
            // back once more.
            int first = (int) Math.min(len, ((at | 63) + 1) - data); // payload in the stamp's line
            MemorySegment.copy(b, off + first, m, JAVA_BYTE, data + first, len - first);
            MemorySegment.copy(b, off, m, JAVA_BYTE, data, first);
        }
        INT.set(m, at + 8, len);
        LONG.setRelease(m, at, head + 1); // the stamp: the record's bytes before it
        LONG.setRelease(m, headAt, end);
        VarHandle.fullFence();
        if ((int) INT.get(m, consumerWaitingAt) == 1) {
            wake(SEND);
        }
        sentInJava++;
        return true;
    }

    /** Receives in Java: the length, EMPTY, or NATIVE for anything rtlab must handle. */
    private int tryReceive(byte[] buf) {
        MemorySegment m = map;
        long tail = position(m, tailAt); // only this process's receiver writes it
        if (tail == -1) {
            return NATIVE;
        }
        long offset = tail & (capacity - 1);
        long stamp = (long) LONG.getAcquire(m, ringAt + offset);
        if (stamp == 0) {
            // After a short message, expect another, and while the stamp's line is polled read
            // the line after it too. A record longer than what its first line holds continues
            // there, and the sender writes that line first: read here, it arrives while the
            // stamp is still awaited rather than after it, one transfer between CPUs fewer
            // (64 B ping-pong: 0.90-0.96x the round trip without it, bench/RESULTS.md). Not
            // after a long message: read while the sender copies into it, the line would be
            // taken from the sender mid-copy (rtlab-ipc's receiver does the same).
            if (lastLength <= ONE_COPY_MAX) {
                pulled += (long) LONG.getOpaque(m, ringAt + (((offset | 63) + 1) & (capacity - 1)));
            }
            return EMPTY;
        }
        if (stamp != tail + 1) {
            return NATIVE;
        }
        int len = (int) INT.get(m, ringAt + offset + 8);
        if (len == WRAP || len < 0 || len > maxMessage || offset + recordLength(len) > capacity) {
            return NATIVE;
        }
        if (len > buf.length) {
            throw tooSmall(buf.length, len);
        }
        MemorySegment.copy(m, JAVA_BYTE, ringAt + offset + RECORD_HEADER, buf, 0, len);
        lastLength = len;
        LONG.setRelease(m, tailAt, tail + recordLength(len)); // done with the bytes before it
        if (!consumerFenceless) {
            VarHandle.fullFence();
        }
        // Else no fence: a sender about to sleep on a full ring makes this CPU fence
        // (membarrier), which needs only program order here. The Java memory model has no
        // compiler-only store-load order; HotSpot keeps it: the interpreter and C1 do not
        // reorder, and C2 wraps an ordered (release) access to memory outside the heap in
        // CPU-order barriers, which no memory access crosses.
        if ((int) INT.get(m, producerWaitingAt) == 1) {
            wake(RECV);
        }
        receivedInJava++;
        return len;
    }

    private void wake(int end) {
        int code;
        try {
            code = (int) Native.CH_WAKE.invokeExact(handle, end);
        } catch (Throwable t) {
            throw new IllegalStateException("rtlab: rtlab_channel_wake failed", t);
        }
        Native.check("ShmChannel wake", code);
    }

    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        sendInJava = false;
        receiveInJava = false;
        try {
            Native.CH_CLOSE.invokeExact(handle);
        } catch (Throwable t) {
            throw new IllegalStateException("rtlab: rtlab_channel_close failed", t);
        } finally {
            arena.close();
        }
    }
}
