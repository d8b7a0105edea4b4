package dev.rtlab;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Queue;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;
import org.junit.jupiter.api.Test;

/**
 * close() from one thread while eight others send and receive: each call returns normally or
 * throws IllegalStateException (only once the close began), and the JVM never touches the
 * ring after it is unmapped or the handle after it is freed (which would be a SIGSEGV, the
 * forked test JVM dying, rather than a failed assertion).
 */
class ShmChannelCloseRaceTest {
    private static final int ROUNDS = 1000;
    private static final int SENDERS = 4;
    private static final int RECEIVERS = 4;
    /** A round closes once the threads made a random number of calls below this. */
    private static final int MOST_CALLS_BEFORE_CLOSE = 100;

    /** The length of message {@code seq}: every size up to the maximum, 0 included. */
    private static int lengthOf(long seq, int max) {
        return (int) ((seq * 37) % (max + 1));
    }

    private static byte byteOf(long seq, int k) {
        return (byte) (seq * 31 + k);
    }

    /** One channel's round: its ends each used by one thread at a time, as the class requires. */
    private static final class Round {
        final ShmChannel ch;
        final int max;
        /**
         * The senders pause between messages, so that the receivers mostly poll an empty ring
         * in Java (a receive's first 20 us) when the close comes; else both sides run flat out.
         */
        final boolean slowSenders;
        final ReentrantLock sendLock = new ReentrantLock();
        final ReentrantLock receiveLock = new ReentrantLock();
        final AtomicLong calls = new AtomicLong();
        final Queue<Throwable> failures;
        volatile boolean closing;
        long sendSeq; // under sendLock
        long receiveSeq; // under receiveLock

        Round(ShmChannel ch, boolean slowSenders, Queue<Throwable> failures) {
            this.ch = ch;
            this.slowSenders = slowSenders;
            this.max = ch.maxMessage();
            this.failures = failures;
        }

        /** A call threw: fine if IllegalStateException once close() began, else a failure. */
        void threw(Throwable t, String what) {
            if (!(t instanceof IllegalStateException && closing)) {
                failures.add(new AssertionError(what + (closing ? " during close: " : " before close: ") + t, t));
            }
        }

        void send(int thread) {
            byte[] msg = new byte[max];
            for (long i = 0; ; i++) {
                sendLock.lock();
                try {
                    long seq = sendSeq;
                    int len = lengthOf(seq, max);
                    for (int k = 0; k < len; k++) {
                        msg[k] = byteOf(seq, k);
                    }
                    // Mostly a poll; now and then a wait in rtlab for room (a native call in flight).
                    Duration timeout = (i + thread) % 4 == 0 ? Duration.ofMillis(1) : Duration.ZERO;
                    if (ch.send(msg, 0, len, timeout)) {
                        sendSeq = seq + 1;
                    }
                } catch (Throwable t) {
                    threw(t, "send");
                    return; // closed (or failed): this thread is done
                } finally {
                    sendLock.unlock();
                }
                calls.incrementAndGet();
                if (slowSenders) {
                    LockSupport.parkNanos(10_000 + (i * 7919 + thread * 104_729) % 40_000);
                }
            }
        }

        void receive(int thread) {
            byte[] buf = new byte[max];
            for (long i = 0; ; i++) {
                receiveLock.lock();
                try {
                    Duration timeout = slowSenders || (i + thread) % 4 == 0 ? Duration.ofMillis(1) : Duration.ZERO;
                    int n = ch.receive(buf, timeout);
                    if (n >= 0) {
                        long seq = receiveSeq++;
                        if (n != lengthOf(seq, max)) {
                            throw new AssertionError("message " + seq + ": " + n + " bytes, sent " + lengthOf(seq, max));
                        }
                        for (int k = 0; k < n; k++) {
                            if (buf[k] != byteOf(seq, k)) {
                                throw new AssertionError("message " + seq + " differs at byte " + k);
                            }
                        }
                    } else if (n != -1) {
                        throw new AssertionError("receive returned " + n);
                    }
                } catch (Throwable t) {
                    threw(t, "receive");
                    return;
                } finally {
                    receiveLock.unlock();
                }
                calls.incrementAndGet();
            }
        }
    }

    @Test
    void closingWhileEightThreadsSendAndReceiveOnlyEverThrowsIllegalStateException() throws Exception {
        String name = ShmChannelTest.name("close-race");
        Queue<Throwable> failures = new ConcurrentLinkedQueue<>();
        SplittableRandom random = new SplittableRandom(18);
        ExecutorService pool = Executors.newFixedThreadPool(SENDERS + RECEIVERS);
        long inJava = 0;
        long closedMidway = 0;
        long t0 = System.nanoTime();
        try {
            for (int round = 0; round < ROUNDS && failures.isEmpty(); round++) {
                // One handle for both ends: close() races with its sender and its receiver.
                Round r = new Round(ShmChannel.create(name, 4096), round % 2 == 1, failures);
                List<Future<?>> threads = new ArrayList<>();
                for (int i = 0; i < SENDERS; i++) {
                    int thread = i;
                    threads.add(pool.submit(() -> r.send(thread)));
                }
                for (int i = 0; i < RECEIVERS; i++) {
                    int thread = i;
                    threads.add(pool.submit(() -> r.receive(thread)));
                }
                // Close at a random point: before the ends attached, in the Java path, or while
                // a call waits in rtlab.
                long target = random.nextInt(MOST_CALLS_BEFORE_CLOSE);
                long until = System.nanoTime() + 2_000_000_000L;
                while (r.calls.get() < target && System.nanoTime() < until) {
                    Thread.onSpinWait();
                }
                r.closing = true;
                try {
                    r.ch.close();
                } catch (Throwable t) {
                    failures.add(new AssertionError("round " + round + ": close() threw " + t, t));
                }
                for (Future<?> f : threads) {
                    f.get(10, TimeUnit.SECONDS); // a thread that never returns fails here
                }
                inJava += r.ch.sentInJava + r.ch.receivedInJava;
                if (r.ch.sentInJava > 0 && r.ch.receivedInJava > 0) {
                    closedMidway++;
                }
            }
        } finally {
            pool.shutdownNow();
            assertTrue(pool.awaitTermination(10, TimeUnit.SECONDS), "the threads of the last round ended");
        }
        if (!failures.isEmpty()) {
            Throwable first = failures.peek();
            fail(failures.size() + " failures, the first: " + first, first);
        }
        // The closes hit the Java path, not only the native calls of a fresh channel.
        assertTrue(closedMidway > ROUNDS / 4, closedMidway + " rounds closed after both ends went to Java");
        assertTrue(inJava > 10_000, inJava + " messages through the Java path");
        System.out.printf("close race: %d rounds, %d after both ends went to Java, %d messages in Java, %.1f s%n",
                ROUNDS, closedMidway, inJava, (System.nanoTime() - t0) / 1e9);
    }
}
