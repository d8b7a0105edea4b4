package dev.rtlab;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static dev.rtlab.RingDescriptor.*;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.time.Duration;
import java.util.concurrent.locks.LockSupport;

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
 * Unlike rtlab's own receiver, a receive in Java always fences between its store of the
 * consumer's position and its read of the producer's waiting flag: the Java memory model does
 * not keep a store before a later load of another location without one (tryReceive's docs).
 *
 * <p><b>Closing.</b> {@link #close()} may be called from any thread, also while other threads
 * are inside {@link #send} or {@link #receive}. Each of those calls then either returns normally
 * (its message sent or received) or throws {@link IllegalStateException}; so does every call
 * made after the close. A send that throws may or may not have delivered its message. A call
 * waiting in rtlab for room or for a message notices the close within {@code NATIVE_SLICE_NS}
 * (10 ms) and throws. Nothing touches the shared memory or the native handle once they are
 * released: the Java path reads and writes the ring through a segment of a shared
 * {@link Arena}, which close() closes before rtlab unmaps the ring (closing a shared arena
 * waits for the threads accessing its segments, whose later accesses throw
 * IllegalStateException); and close() frees the native handle only after the native calls in
 * flight on it have returned (a count of callers, kept only around native calls, never on the
 * Java path of a message).
 */
public final class ShmChannel implements AutoCloseable {
    private static final int SEND = 1;
    private static final int RECV = 2;
    /** How long a receive polls in Java before it waits in rtlab (as rtlab's own spin). */
    private static final long SPIN_NS = 20_000;
    private static final Duration SPIN = Duration.ofNanos(SPIN_NS);
    /**
     * The longest a single native wait lasts: a longer timeout is waited in slices of this, so
     * that a {@link #close()} from another thread, which waits for the native calls in flight,
     * waits at most this long (rtlab itself wakes this often to check that the peer lives).
     */
    private static final long NATIVE_SLICE_NS = 10_000_000;
    private static final Duration NATIVE_SLICE = Duration.ofNanos(NATIVE_SLICE_NS);
    /**
     * Payloads up to this many bytes are copied in one piece. Longer ones are copied in two,
     * the part in the stamp's cache line last, so the receiver loses that line once per
     * message; the second copy costs more than that saves on a short payload, and less on a
     * long one (measured in bench/RESULTS.md, "ShmChannel from Java: one copy for short
     * messages").
     */
    private static final int ONE_COPY_MAX = 128;
    /** tryReceive: nothing there yet; anything else the native path must see. */
    private static final int EMPTY = -1;
    private static final int NATIVE = -2;
    private static final VarHandle LONG = JAVA_LONG.varHandle();
    private static final VarHandle INT = JAVA_INT.varHandle();
    /** {@link #calls}: the bit close() sets; the rest counts the threads in a native call. */
    private static final int CLOSING = Integer.MIN_VALUE;
    private static final VarHandle CALLS;

    static {
        try {
            CALLS = MethodHandles.lookup().findVarHandle(ShmChannel.class, "calls", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** The native handle's buffers; closed last, after the handle is freed. */
    private final Arena arena = Arena.ofShared();
    /** The ring's segment (the Java path's only way to the mapping); closed before the unmap. */
    private final Arena ringArena = Arena.ofShared();
    private final MemorySegment handle;
    private final int maxMessage;
    private final MemorySegment sendBuffer;
    private final MemorySegment receiveBuffer;
    private final MemorySegment length;
    /** {@link #attach}'s words (used under this object's lock). */
    private final MemorySegment words;
    private volatile boolean closed;
    /** Threads in a native call on {@link #handle}, plus {@link #CLOSING} once close() began. */
    @SuppressWarnings("unused") // through CALLS
    private volatile int calls;
    /** The thread in close() waiting for the native calls in flight. */
    private volatile Thread closer;

    /** The ring (either end's, once one was attached). */
    private Ring ring;
    /** The ring, when this end sends (or receives) in Java; null: through rtlab. */
    private Ring sendRing;
    private Ring receiveRing;
    /** The consumer's position as last read by this sender: a lower bound (it only grows). */
    private long tailSeen;
    /** The sum of the reads {@link #tryReceive} makes only to pull a line in (so the JIT keeps them). */
    private long pulled;
    /** The length of the last message received in Java. */
    private int lastLength;
    /** Messages sent and received in Java (for tests). */
    long sentInJava;
    long receivedInJava;

    /**
     * The ring's layout, read once an end was attached (by its first native call) and the
     * format is known. Immutable (final fields: safely seen by the other end's thread however
     * it was handed over).
     */
    private static final class Ring {
        /** The mapping, in {@link #ringArena}. */
        final MemorySegment map;
        final long magic;
        final long capacity;
        final long ringAt;
        final long headAt;
        final long tailAt;
        final long consumerWaitingAt;
        final long producerWaitingAt;

        Ring(MemorySegment words, Arena arena) {
            magic = words.getAtIndex(JAVA_LONG, MAGIC_WORD);
            capacity = words.getAtIndex(JAVA_LONG, CAPACITY_WORD);
            ringAt = words.getAtIndex(JAVA_LONG, RING_OFFSET_WORD);
            headAt = words.getAtIndex(JAVA_LONG, HEAD_OFFSET_WORD);
            tailAt = words.getAtIndex(JAVA_LONG, TAIL_OFFSET_WORD);
            consumerWaitingAt = words.getAtIndex(JAVA_LONG, CONSUMER_WAITING_OFFSET_WORD);
            producerWaitingAt = words.getAtIndex(JAVA_LONG, PRODUCER_WAITING_OFFSET_WORD);
            // CONSUMER_FENCELESS_WORD is not read: a receive in Java always fences (tryReceive
            // says why), which is correct on either kind of ring.
            // The mapping lives until rtlab_channel_close; close() closes `arena` first.
            map = MemorySegment.ofAddress(words.getAtIndex(JAVA_LONG, BASE_WORD))
                    .reinterpret(words.getAtIndex(JAVA_LONG, LENGTH_WORD), arena, null);
        }

        boolean usable() {
            return Long.bitCount(capacity) == 1 && ringAt + capacity == map.byteSize();
        }
    }

    private ShmChannel(String name, int capacity, boolean create) {
        MemorySegment out = arena.allocate(ADDRESS);
        MemorySegment cname = arena.allocateFrom(name);
        int code;
        try {
            code = create
                    ? Native.invoke("rtlab_channel_create", () -> (int) Native.CH_CREATE.invokeExact(cname, capacity, out))
                    : Native.invoke("rtlab_channel_open", () -> (int) Native.CH_OPEN.invokeExact(cname, out));
            if (code != 0) {
                throw Native.failure((create ? "ShmChannel.create(" : "ShmChannel.open(") + name + ")", code);
            }
        } catch (RuntimeException | Error e) {
            arena.close();
            ringArena.close();
            throw e;
        }
        handle = out.get(ADDRESS, 0);
        maxMessage = (int) Native.invokeLong("rtlab_channel_max_message", () -> (long) Native.CH_MAX.invokeExact(handle));
        sendBuffer = arena.allocate(Math.max(1, maxMessage));
        receiveBuffer = arena.allocate(Math.max(1, maxMessage));
        length = arena.allocate(JAVA_LONG);
        words = arena.allocate(JAVA_LONG, LAYOUT_WORDS);
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
            throw closedException();
        }
    }

    private static IllegalStateException closedException() {
        return new IllegalStateException("ShmChannel used after close()");
    }

    /**
     * Before a native call on {@link #handle}: counts this thread in, or throws
     * IllegalStateException when close() has begun (which then waits for the threads counted).
     */
    private void enter() {
        if ((int) CALLS.getAndAdd(this, 1) < 0) {
            leave();
            throw closedException();
        }
    }

    /** After a native call (each {@link #enter} that returned): counts this thread out. */
    private void leave() {
        if ((int) CALLS.getAndAdd(this, -1) == (CLOSING | 1)) {
            LockSupport.unpark(closer); // the last one out of a closing channel
        }
    }

    /**
     * Runs {@code call}, a call of the native {@code function} on {@link #handle} (and what
     * must happen before close() may free the handle's buffers), counted in as a native
     * caller: IllegalStateException when close() has begun.
     */
    private int onHandle(String function, Native.IntCall call) {
        enter();
        try {
            return Native.invoke(function, call);
        } finally {
            leave();
        }
    }

    /** The end of the next native wait for {@code deadline} (CLOCK_MONOTONIC ns, 0: poll, FOREVER). */
    private static long sliceOf(long deadline) {
        if (deadline == 0) {
            return 0;
        }
        long slice = Native.nowNs() + NATIVE_SLICE_NS;
        return Long.compareUnsigned(deadline, slice) <= 0 ? deadline : slice;
    }

    /** Sends {@code b[off, off+len)}, waiting up to {@code timeout} for room; false when it timed out. */
    public boolean send(byte[] b, int off, int len, Duration timeout) {
        java.util.Objects.checkFromIndexSize(off, len, b.length);
        checkOpen();
        if (len > maxMessage) {
            throw new IllegalArgumentException("message of " + len + " bytes exceeds the channel maximum of " + maxMessage);
        }
        Ring r = sendRing;
        if (r != null && trySend(r, b, off, len)) {
            return true;
        }
        long deadline = Native.deadlineAfter(timeout);
        long until = timeout.compareTo(NATIVE_SLICE) <= 0 ? deadline : sliceOf(deadline);
        int code;
        while (true) {
            long slice = until;
            code = onHandle("rtlab_channel_send", () -> {
                MemorySegment.copy(b, off, sendBuffer, JAVA_BYTE, 0, len);
                return (int) Native.CH_SEND.invokeExact(handle, sendBuffer, (long) len, slice);
            });
            if (code != Native.ETIMEDOUT || until == deadline) {
                break;
            }
            until = sliceOf(deadline);
        }
        if (code == Native.ETIMEDOUT) {
            return false;
        }
        Native.check("ShmChannel.send", code);
        if (sendRing == null) {
            sendRing = attach(SEND, true);
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
        Ring r = receiveRing;
        if (r != null) {
            // Small, so that it inlines into the caller's loop: a message there, or a poll.
            int n = tryReceive(r, buf);
            if (n >= 0 || (n == EMPTY && timeout.isZero())) {
                return n;
            }
            return receiveSlow(r, buf, timeout, n);
        }
        return receiveSlow(null, buf, timeout, NATIVE);
    }

    /** {@link #receive} past a first poll in Java that found {@code n} (EMPTY or NATIVE). */
    private int receiveSlow(Ring r, byte[] buf, Duration timeout, int n) {
        Duration left = timeout;
        if (n == EMPTY) {
            // Poll in Java for up to rtlab's own spin (or the timeout), then wait in rtlab for
            // what is left of the timeout.
            long start = System.nanoTime();
            long limit = timeout.compareTo(SPIN) < 0 ? timeout.toNanos() : SPIN_NS;
            while (n == EMPTY && System.nanoTime() - start < limit) {
                for (int i = 0; i < 64 && n == EMPTY; i++) {
                    Thread.onSpinWait();
                    n = tryReceive(r, buf);
                }
                if (n >= 0) {
                    return n;
                }
            }
            left = timeout.minusNanos(System.nanoTime() - start);
        }
        // Negative: the timeout passed; deadline 0 makes rtlab poll once more.
        long deadline = left.isNegative() ? 0 : Native.deadlineAfter(left);
        long until = left.compareTo(NATIVE_SLICE) <= 0 ? deadline : sliceOf(deadline);
        int got;
        while (true) {
            long slice = until;
            got = onHandle("rtlab_channel_recv", () -> {
                int code = (int) Native.CH_RECV.invokeExact(handle, receiveBuffer,
                        Math.min(buf.length, receiveBuffer.byteSize()), length, slice);
                if (code == Native.ETIMEDOUT) {
                    return -1;
                } else if (code == Native.ENOBUFS) {
                    throw tooSmall(buf.length, length.get(JAVA_LONG, 0));
                }
                Native.check("ShmChannel.receive", code);
                // Copied out before close() may free the buffer: a message taken from the
                // ring is always handed over.
                int received = (int) length.get(JAVA_LONG, 0);
                MemorySegment.copy(receiveBuffer, JAVA_BYTE, 0, buf, 0, received);
                return received;
            });
            if (got >= 0 || until == deadline) {
                break;
            }
            until = sliceOf(deadline);
        }
        if (got >= 0 && receiveRing == null) {
            receiveRing = attach(RECV, false);
        }
        return got;
    }

    private static IllegalArgumentException tooSmall(int have, long need) {
        return new IllegalArgumentException("buffer of " + have + " bytes is smaller than the " + need
                + "-byte message (it stays in the channel: give a buffer of maxMessage() bytes)");
    }

    /**
     * Reads the ring's layout for {@code end} (attached already by its first native call): the
     * ring if that end may send or receive in Java (the format is this class's; a sender also
     * needs the one-producer variant), else null. Under this object's lock, which close() also
     * takes; a thread holding it counts itself in as a native caller, never the other way
     * round (close() waits for those while it holds the lock).
     */
    private synchronized Ring attach(int end, boolean sender) {
        int code = onHandle("rtlab_channel_layout",
                () -> (int) Native.CH_LAYOUT.invokeExact(handle, end, words, (long) LAYOUT_WORDS));
        // `words` stays allocated past the call: close() takes this object's lock to free it.
        if (code != 0 || words.getAtIndex(JAVA_LONG, FORMAT_WORD) != FORMAT
                || (sender && words.getAtIndex(JAVA_LONG, SPSC_WORD) != 1)) {
            return null;
        }
        if (ring == null) {
            ring = new Ring(words, ringArena);
        }
        return ring.usable() ? ring : null;
    }

    /** head or tail (at {@code at}) if the header is intact and it is aligned, else -1. */
    private static long position(Ring r, MemorySegment m, long at) {
        if ((long) LONG.get(m, MAGIC_OFFSET) != r.magic) {
            return -1;
        }
        long p = (long) LONG.get(m, at);
        return aligned(p) ? p : -1;
    }

    /** Sends in Java when the record fits before the ring's end and there is room: true if sent. */
    private boolean trySend(Ring r, byte[] b, int off, int len) {
        MemorySegment m = r.map;
        long capacity = r.capacity;
        long ringAt = r.ringAt;
        long head = position(r, m, r.headAt); // only this process's sender writes it
        if (head == -1) {
            return false;
        }
        long offset = offset(head, capacity);
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
        if (end + STAMP_LENGTH > tailSeen + capacity) {
            long tail = (long) LONG.getAcquire(m, r.tailAt);
            if (tail > head || head - tail > capacity || !aligned(tail)) {
                return false; // rtlab reports it
            }
            tailSeen = tail;
            if (end + STAMP_LENGTH > tail + capacity) {
                return false; // full: rtlab waits
            }
        }
        long at = ringAt + offset;
        LONG.set(m, ringAt + offset(end, capacity) + STAMP_OFFSET, 0L);
        long data = at + RECORD_HEADER_LENGTH;
        if (len <= ONE_COPY_MAX) {
            MemorySegment.copy(b, off, m, JAVA_BYTE, data, len);
        } else {
            // The stores to the stamp's cache line go last and together: the receiver polls
            // that line, and while the rest of a long payload is copied it would take the line
            // back once more.
            int first = (int) Math.min(len, lineEnd(at) - data); // payload in the stamp's line
            MemorySegment.copy(b, off + first, m, JAVA_BYTE, data + first, len - first);
            MemorySegment.copy(b, off, m, JAVA_BYTE, data, first);
        }
        INT.set(m, at + LENGTH_OFFSET, len);
        LONG.setRelease(m, at + STAMP_OFFSET, head + 1); // the stamp: the record's bytes before it
        LONG.setRelease(m, r.headAt, end);
        VarHandle.fullFence(); // store head, then load the consumer's flag (see tryReceive)
        if ((int) INT.get(m, r.consumerWaitingAt) == 1) {
            wake(SEND);
        }
        sentInJava++;
        return true;
    }

    /**
     * Receives in Java: the length, EMPTY, or NATIVE for anything rtlab must handle.
     *
     * <p>After it stores {@code tail} the receiver loads the producer's waiting flag, and the
     * two must not be reordered (a store, then a load of another location): otherwise a
     * producer about to sleep on a full ring could miss the new {@code tail} while this side
     * misses its flag, and sleep until rtlab's next liveness check (10 ms) with room in the
     * ring. rtlab's own receiver leaves the fence out on a ring whose producers call
     * {@code membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)} before they sleep: that makes every
     * consumer's CPU fence, which is enough if the store comes before the load in the machine
     * code (program order). Rust can promise that (a {@code compiler_fence}); Java cannot.
     * In the Java memory model (JLS 17.4) only synchronization actions, the volatile accesses,
     * are totally ordered consistently with program order (17.4.4); plain, opaque and
     * release/acquire accesses to different variables may be reordered (a release store
     * orders the accesses before it, an acquire load those after it, neither a store before
     * a later load), and {@link VarHandle#releaseFence}, {@link VarHandle#acquireFence},
     * {@link VarHandle#storeStoreFence} and {@link VarHandle#loadLoadFence} leave out
     * store-load too. The membarrier cannot help when the JIT itself moved the load up.
     * (HotSpot's C2 happens not to: it wraps an ordered Unsafe access, which a release store
     * to native memory is, in CPU-order barriers that no memory access crosses; that is an
     * implementation detail, not a promise another JIT or a later C2 must keep.) So the
     * store of {@code tail} is followed by {@link VarHandle#fullFence}, whose effect is
     * that of C++'s {@code atomic_thread_fence(memory_order_seq_cst)}: with the producer's
     * own SeqCst fence or membarrier after it stores its flag, one of the two sides always
     * sees the other, on either kind of ring. (Making both accesses volatile would order them
     * too, at the same price on x86: a locked instruction.) Its cost, a few nanoseconds in
     * one thread and none told from noise on a round trip at 64 B, is measured in
     * bench/RESULTS.md ("Hardening, second review": a receive in Java fences again).
     */
    private int tryReceive(Ring r, byte[] buf) {
        MemorySegment m = r.map;
        long capacity = r.capacity;
        long ringAt = r.ringAt;
        long tail = position(r, m, r.tailAt); // only this process's receiver writes it
        if (tail == -1) {
            return NATIVE;
        }
        long offset = offset(tail, capacity);
        long stamp = (long) LONG.getAcquire(m, ringAt + offset + STAMP_OFFSET);
        if (stamp == 0) {
            // After a short message, expect another, and while the stamp's line is polled read
            // the line after it too. A record longer than what its first line holds continues
            // there, and the sender writes that line first: read here, it arrives while the
            // stamp is still awaited rather than after it, one transfer between CPUs fewer
            // (bench/RESULTS.md, "The receiver pulls in the record's second line"). Not
            // after a long message: read while the sender copies into it, the line would be
            // taken from the sender mid-copy (rtlab-ipc's receiver does the same).
            if (lastLength <= ONE_COPY_MAX) {
                pulled += (long) LONG.getOpaque(m, ringAt + nextLine(offset, capacity));
            }
            return EMPTY;
        }
        if (stamp != tail + 1) {
            return NATIVE;
        }
        int len = (int) INT.get(m, ringAt + offset + LENGTH_OFFSET);
        if (len == WRAP || len < 0 || len > maxMessage || offset + recordLength(len) > capacity) {
            return NATIVE;
        }
        if (len > buf.length) {
            throw tooSmall(buf.length, len);
        }
        MemorySegment.copy(m, JAVA_BYTE, ringAt + offset + RECORD_HEADER_LENGTH, buf, 0, len);
        lastLength = len;
        LONG.setRelease(m, r.tailAt, tail + recordLength(len)); // done with the bytes before it
        VarHandle.fullFence(); // store tail, then load the producer's flag: see above
        if ((int) INT.get(m, r.producerWaitingAt) == 1) {
            wake(RECV);
        }
        receivedInJava++;
        return len;
    }

    private void wake(int end) {
        Native.check("ShmChannel wake",
                onHandle("rtlab_channel_wake", () -> (int) Native.CH_WAKE.invokeExact(handle, end)));
    }

    /**
     * Closes this end (the creator's close also removes the name). Safe against other threads
     * using the channel at the same time (the class docs): it closes the ring's arena (after
     * which the Java path's accesses throw IllegalStateException), waits for the native calls
     * in flight (at most {@code NATIVE_SLICE_NS} each) while refusing new ones, and only then
     * frees the handle, which unmaps the ring. Idempotent.
     */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        closer = Thread.currentThread();
        CALLS.getAndBitwiseOr(this, CLOSING);
        closeShared(ringArena);
        while ((int) CALLS.getVolatile(this) != CLOSING) {
            LockSupport.parkNanos(this, 100_000); // leave() unparks this thread sooner
        }
        try {
            Native.invoke("rtlab_channel_close", () -> {
                Native.CH_CLOSE.invokeExact(handle);
                return 0;
            });
        } finally {
            closeShared(arena);
        }
    }

    /**
     * Closes a shared arena none of whose segments is held by a native call. Current JDKs
     * close it at once (a thread in the middle of an access gets IllegalStateException); a
     * JDK whose close instead fails while another thread is in the middle of an access, as
     * earlier versions of the FFM API did, is asked again until it succeeds.
     */
    private static void closeShared(Arena a) {
        while (true) {
            try {
                a.close();
                return;
            } catch (IllegalStateException e) {
                if (!a.scope().isAlive()) {
                    return;
                }
                Thread.onSpinWait();
            }
        }
    }
}
