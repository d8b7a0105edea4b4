package dev.rtlab;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import org.junit.jupiter.api.Test;

class ShmChannelTest {
    /** A child JVM: opens the channel, sends "hello", then waits to be killed. */
    public static final class Sender {
        public static void main(String[] args) throws Exception {
            ShmChannel ch = ShmChannel.open(args[0]);
            byte[] hello = "hello".getBytes(StandardCharsets.UTF_8);
            ch.send(hello, 0, hello.length, Duration.ofSeconds(5));
            Thread.sleep(60_000);
        }
    }

    static String name(String what) {
        return "/rtlab-java-" + what + "-" + ProcessHandle.current().pid();
    }

    @Test
    void aZeroTimeoutPolls() {
        try (ShmChannel rx = ShmChannel.create(name("poll"), 8192); ShmChannel tx = ShmChannel.open(name("poll"))) {
            byte[] buf = new byte[rx.maxMessage()];
            assertEquals(-1, rx.receive(buf, Duration.ZERO));
            byte[] msg = "polled".getBytes(StandardCharsets.UTF_8);
            assertTrue(tx.send(msg, 0, msg.length, Duration.ZERO));
            assertEquals(msg.length, rx.receive(buf, Duration.ZERO));
            assertArrayEquals(msg, Arrays.copyOf(buf, msg.length));
            assertEquals(-1, rx.receive(buf, Duration.ZERO));
        }
    }

    @Test
    void messagesArriveWholeAndInOrder() throws Exception {
        try (ShmChannel rx = ShmChannel.create(name("order"), 8192); ShmChannel tx = ShmChannel.open(name("order"))) {
            assertEquals(2048, rx.maxMessage());
            Thread sender = new Thread(() -> {
                for (int i = 0; i < 10_000; i++) {
                    byte[] msg = ("message " + i).getBytes(StandardCharsets.UTF_8);
                    if (!tx.send(msg, 0, msg.length, Duration.ofSeconds(5))) {
                        throw new AssertionError("send timed out");
                    }
                }
            });
            sender.start();
            byte[] buf = new byte[rx.maxMessage()];
            for (int i = 0; i < 10_000; i++) {
                int n = rx.receive(buf, Duration.ofSeconds(5));
                assertArrayEquals(("message " + i).getBytes(StandardCharsets.UTF_8), Arrays.copyOf(buf, n));
            }
            sender.join();
            long t0 = System.nanoTime();
            assertEquals(-1, rx.receive(buf, Duration.ofMillis(2)));
            assertTrue(System.nanoTime() - t0 >= 2_000_000);
            byte[] big = new byte[4096];
            assertThrows(IllegalArgumentException.class, () -> tx.send(big, 0, big.length, Duration.ZERO));
        }
        RtlabException gone = assertThrows(RtlabException.class, () -> ShmChannel.open(name("order")));
        assertEquals(2, gone.code(), "the creator's close removed the name");
    }

    /** A message of {@code len} bytes that differ with {@code i}. */
    static byte[] message(int i, int len) {
        byte[] m = new byte[len];
        for (int k = 0; k < len; k++) {
            m[k] = (byte) (i * 31 + k);
        }
        return m;
    }

    @Test
    void messagesOfEverySizeCrossManyLapsIntact() {
        // Sent and received in Java past each end's first call, by rtlab at each wrap and when
        // full: the two must agree on every record.
        try (ShmChannel rx = ShmChannel.create(name("laps"), 4096); ShmChannel tx = ShmChannel.open(name("laps"))) {
            byte[] buf = new byte[rx.maxMessage()];
            java.util.ArrayDeque<byte[]> pending = new java.util.ArrayDeque<>();
            long bytes = 0;
            for (int i = 0; i < 20_000; i++) {
                byte[] m = message(i, (i * 37) % (rx.maxMessage() + 1));
                if (!tx.send(m, 0, m.length, Duration.ZERO)) {
                    while (!pending.isEmpty()) {
                        int n = rx.receive(buf, Duration.ZERO);
                        assertArrayEquals(pending.poll(), Arrays.copyOf(buf, n), "before message " + i);
                    }
                    assertTrue(tx.send(m, 0, m.length, Duration.ZERO), "an empty ring takes " + m.length + " bytes");
                }
                pending.add(m);
                bytes += m.length;
            }
            while (!pending.isEmpty()) {
                int n = rx.receive(buf, Duration.ZERO);
                assertArrayEquals(pending.poll(), Arrays.copyOf(buf, n));
            }
            assertEquals(-1, rx.receive(buf, Duration.ZERO));
            assertTrue(bytes > 100 * 4096, "many laps");
            // Most went through Java (not the first, the wraps, or a send that found it full).
            assertTrue(tx.sentInJava > 15_000, "sent in Java: " + tx.sentInJava);
            assertTrue(rx.receivedInJava > 15_000, "received in Java: " + rx.receivedInJava);
        }
    }

    @Test
    void aMessageLongerThanTheBufferStaysInTheChannel() {
        try (ShmChannel rx = ShmChannel.create(name("small"), 8192); ShmChannel tx = ShmChannel.open(name("small"))) {
            byte[] buf = new byte[rx.maxMessage()];
            for (int i = 0; i < 3; i++) { // the first goes through rtlab, the others in Java
                byte[] m = message(i, 100);
                assertTrue(tx.send(m, 0, m.length, Duration.ZERO));
                assertThrows(IllegalArgumentException.class, () -> rx.receive(new byte[10], Duration.ZERO));
                int n = rx.receive(buf, Duration.ZERO);
                assertArrayEquals(m, Arrays.copyOf(buf, n));
            }
        }
    }

    @Test
    void aSleepingPeerIsWokenByTheOtherSidesJavaPath() throws Exception {
        try (ShmChannel rx = ShmChannel.create(name("wake"), 4096); ShmChannel tx = ShmChannel.open(name("wake"))) {
            byte[] buf = new byte[rx.maxMessage()];
            byte[] m = message(1, 64);
            // Attach both ends (their Java paths start after the first call).
            assertTrue(tx.send(m, 0, m.length, Duration.ZERO));
            assertEquals(64, rx.receive(buf, Duration.ZERO));
            for (int round = 0; round < 5; round++) {
                // The receiver sleeps on an empty ring; a send in Java must wake it.
                java.util.concurrent.CompletableFuture<Integer> got = java.util.concurrent.CompletableFuture
                        .supplyAsync(() -> rx.receive(buf, Duration.ofSeconds(20)));
                Thread.sleep(50);
                long t0 = System.nanoTime();
                assertTrue(tx.send(m, 0, m.length, Duration.ZERO));
                assertEquals(64, got.get());
                assertTrue(System.nanoTime() - t0 < 5_000_000_000L, "woken, not timed out");
                // The sender sleeps on a full ring; a receive in Java must wake it.
                int sent = 0;
                while (tx.send(m, 0, m.length, Duration.ZERO)) {
                    sent++;
                }
                java.util.concurrent.CompletableFuture<Boolean> room = java.util.concurrent.CompletableFuture
                        .supplyAsync(() -> tx.send(m, 0, m.length, Duration.ofSeconds(20)));
                Thread.sleep(50);
                t0 = System.nanoTime();
                assertEquals(64, rx.receive(buf, Duration.ZERO));
                assertTrue(room.get());
                assertTrue(System.nanoTime() - t0 < 5_000_000_000L, "woken, not timed out");
                for (int i = 0; i < sent; i++) {
                    assertEquals(64, rx.receive(buf, Duration.ZERO));
                }
            }
        }
    }

    @Test
    void aClosedChannelIsRefused() {
        ShmChannel rx = ShmChannel.create(name("closed"), 4096);
        rx.close();
        assertThrows(IllegalStateException.class, () -> rx.receive(new byte[8], Duration.ZERO));
    }

    @Test
    void aKilledSenderIsReportedWithinTheTimeout() throws Exception {
        try (ShmChannel rx = ShmChannel.create(name("peer"), 8192)) {
            Process child = Proc.java(Sender.class, name("peer"));
            try {
                byte[] buf = new byte[rx.maxMessage()];
                int n = rx.receive(buf, Duration.ofSeconds(30));
                assertEquals("hello", new String(buf, 0, n, StandardCharsets.UTF_8));
                child.destroyForcibly().waitFor(); // SIGKILL
                long t0 = System.nanoTime();
                assertThrows(PeerDiedException.class, () -> rx.receive(buf, Duration.ofSeconds(2)));
                assertTrue(System.nanoTime() - t0 < 2_000_000_000L);
            } finally {
                child.destroyForcibly();
            }
        }
    }
}
