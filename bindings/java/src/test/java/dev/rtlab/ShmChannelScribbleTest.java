package dev.rtlab;

import static java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * The Java path reads shared memory another process writes: whatever that process scribbles
 * on the header or the ring, a send or receive here returns, times out or throws an
 * RtlabException within its timeout; never another exception, a crash or a hang. (The Rust
 * side has the same test as a proptest.)
 */
class ShmChannelScribbleTest {
    static final Duration TIMEOUT = Duration.ofMillis(2);
    /**
     * What a call may run past its timeout, in CPU time: generous, not a performance bound.
     * A call that spins past its timeout burns CPU; one the machine did not run (a time-sharing
     * JVM beside a storm of other tasks: a 2 ms send once took 2.4 s) does not.
     */
    static final long LATE_NS = 500_000_000L;
    /** A hang, in wall time: a call asleep past its timeout (a wait that ignores it). */
    static final long HANG_NS = 20_000_000_000L;
    static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

    interface Call {
        void run();
    }

    static void bounded(String what, Call call) {
        long cpu0 = THREADS.getCurrentThreadCpuTime();
        long t0 = System.nanoTime();
        try {
            call.run();
        } catch (RtlabException expected) {
            // corrupt, peer died, ...: reported, not a crash
        } catch (RuntimeException e) {
            fail(what + " threw " + e, e);
        }
        long took = System.nanoTime() - t0;
        long ran = THREADS.getCurrentThreadCpuTime() - cpu0;
        assertTrue(ran < TIMEOUT.toNanos() + LATE_NS,
                what + " ran " + ran + " ns of CPU (" + took + " ns in all)");
        assertTrue(took < TIMEOUT.toNanos() + HANG_NS, what + " took " + took + " ns");
    }

    @Test
    void scribblesNeverEscapeAsAnotherExceptionOrAHang() throws Exception {
        String name = ShmChannelTest.name("scribble");
        Random random = new Random(18);
        for (int trial = 0; trial < 300; trial++) {
            try (ShmChannel rx = ShmChannel.create(name, 4096);
                    ShmChannel tx = ShmChannel.open(name);
                    Arena arena = Arena.ofConfined();
                    FileChannel file = FileChannel.open(Path.of("/dev/shm", name.substring(1)),
                            StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                MemorySegment shared = file.map(FileChannel.MapMode.READ_WRITE, 0, file.size(), arena);
                byte[] buf = new byte[rx.maxMessage()];
                // Both ends attached and on their Java paths, some records in the ring.
                for (int i = 0; i < 2 + random.nextInt(20); i++) {
                    byte[] m = ShmChannelTest.message(i, random.nextInt(rx.maxMessage() + 1));
                    tx.send(m, 0, m.length, Duration.ZERO);
                    if (i % 3 == 2) {
                        rx.receive(buf, Duration.ZERO);
                    }
                }
                for (int s = 0; s < 1 + random.nextInt(5); s++) {
                    long at;
                    long value;
                    switch (random.nextInt(3)) {
                        case 0 -> { // anywhere in the header
                            at = random.nextInt((int) (shared.byteSize() - 4096) - 8);
                            value = random.nextLong();
                        }
                        case 1 -> { // a record's stamp or length: small, plausible values
                            at = shared.byteSize() - 4096 + 8L * random.nextInt(4096 / 8);
                            value = random.nextBoolean() ? random.nextInt(3 * 4096) : 0xffffffffL;
                        }
                        default -> { // anywhere in the ring
                            at = shared.byteSize() - 4096 + 8L * random.nextInt(4096 / 8);
                            value = random.nextLong();
                        }
                    }
                    shared.set(JAVA_LONG_UNALIGNED, at, value);
                }
                for (int round = 0; round < 8; round++) {
                    bounded("receive", () -> rx.receive(buf, TIMEOUT));
                    byte[] m = ShmChannelTest.message(round, random.nextInt(rx.maxMessage() + 1));
                    bounded("send", () -> tx.send(m, 0, m.length, TIMEOUT));
                }
            }
        }
    }
}
