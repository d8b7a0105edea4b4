package dev.rtlab;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A Java process and a C process (examples/c/channel_peer.c, on the same librtlab) on one
 * named channel, each side killed with SIGKILL in turn.
 */
class ChannelInteropTest {
    @TempDir
    static Path dir;
    static Path peer;

    /** Builds the C peer with the system compiler (the test is skipped without one). */
    @BeforeAll
    static void buildPeer() throws Exception {
        Path lib = Path.of(System.getProperty("rtlab.library")).toAbsolutePath();
        Path repo = Path.of("../..").toAbsolutePath().normalize();
        peer = dir.resolve("channel_peer");
        Process cc;
        try {
            cc = new ProcessBuilder("cc", "-O2", "-I", repo.resolve("include").toString(), "-o", peer.toString(),
                    repo.resolve("examples/c/channel_peer.c").toString(), lib.toString(),
                    "-Wl,-rpath," + lib.getParent()).redirectErrorStream(true).start();
        } catch (java.io.IOException e) {
            peer = null;
            return;
        }
        String out = new String(cc.getInputStream().readAllBytes());
        assertEquals(0, cc.waitFor(), out);
    }

    /** A sender JVM: opens the channel, sends "msg 0".."msg N-1", waits to be killed. */
    public static final class JavaSender {
        public static void main(String[] args) throws Exception {
            ShmChannel ch = ShmChannel.open(args[0]);
            int n = Integer.parseInt(args[1]);
            for (int i = 0; i < n; i++) {
                byte[] msg = ("msg " + i).getBytes(StandardCharsets.UTF_8);
                if (!ch.send(msg, 0, msg.length, Duration.ofSeconds(10))) {
                    System.exit(1);
                }
            }
            System.out.println("sent " + n);
            Thread.sleep(60_000);
        }
    }

    @Test
    void javaReceivesFromCAndHearsOfItsDeath() throws Exception {
        assumeTrue(peer != null, "no C compiler (cc)");
        String name = "/rtlab-interop-c2j-" + ProcessHandle.current().pid();
        try (ShmChannel rx = ShmChannel.create(name, 16384)) {
            Process c = new ProcessBuilder(peer.toString(), "send", name, "5000").redirectErrorStream(true).start();
            try {
                byte[] buf = new byte[rx.maxMessage()];
                for (int i = 0; i < 5000; i++) {
                    int n = rx.receive(buf, Duration.ofSeconds(10));
                    assertArrayEquals(("msg " + i).getBytes(StandardCharsets.UTF_8), Arrays.copyOf(buf, n));
                }
                c.destroyForcibly().waitFor();
                long t0 = System.nanoTime();
                assertThrows(PeerDiedException.class, () -> rx.receive(buf, Duration.ofSeconds(2)));
                assertTrue(System.nanoTime() - t0 < 2_000_000_000L);
            } finally {
                c.destroyForcibly();
            }
        }
    }

    @Test
    void cReceivesFromJavaAndHearsOfItsDeath() throws Exception {
        assumeTrue(peer != null, "no C compiler (cc)");
        String name = "/rtlab-interop-j2c-" + ProcessHandle.current().pid();
        // This process creates the channel (and removes it at the end); the ends are the others.
        try (ShmChannel owner = ShmChannel.create(name, 16384)) {
            assertEquals(4096, owner.maxMessage());
            Process c = new ProcessBuilder(peer.toString(), "recv", name, "5000").redirectErrorStream(true).start();
            Process java = Proc.java(JavaSender.class, name, "5000");
            try {
                // The C side reads all 5000, then waits for one more: the sender JVM is killed.
                String sent = new String(java.getInputStream().readNBytes(9), StandardCharsets.UTF_8);
                assertEquals("sent 5000", sent);
                java.destroyForcibly().waitFor();
                assertTrue(c.waitFor(10, TimeUnit.SECONDS), "the C receiver did not end");
                String out = new String(c.getInputStream().readAllBytes());
                assertEquals(0, c.exitValue(), out);
                assertTrue(out.contains("received 5000") && out.contains("peer died"), out);
            } finally {
                java.destroyForcibly();
                c.destroyForcibly();
            }
        }
    }
}
