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
