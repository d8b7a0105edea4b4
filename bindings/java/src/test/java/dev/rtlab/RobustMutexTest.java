package dev.rtlab;

import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import org.junit.jupiter.api.Test;

class RobustMutexTest {
    /** A child JVM: maps the file, takes the mutex, tears the data, dies holding it. */
    public static final class DiesHolding {
        public static void main(String[] args) throws Exception {
            try (Arena arena = Arena.ofConfined();
                    FileChannel f = FileChannel.open(Path.of(args[0]), StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                MemorySegment shared = f.map(FileChannel.MapMode.READ_WRITE, 0, 4096, arena);
                RobustMutex m = RobustMutex.attach(shared);
                m.lock();
                shared.set(JAVA_INT, 1024, -1);
                Runtime.getRuntime().halt(0); // no unlock, no shutdown hooks
            }
        }
    }

    @Test
    void aDeadHoldersMutexIsHandedOverOnceAndRepaired() throws Exception {
        Path file = Files.createTempFile(Path.of("/dev/shm"), "rtlab-java-robust-", "");
        try (Arena arena = Arena.ofConfined();
                FileChannel f = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            f.write(java.nio.ByteBuffer.allocate(4096));
            MemorySegment shared = f.map(FileChannel.MapMode.READ_WRITE, 0, 4096, arena);
            RobustMutex m = RobustMutex.create(shared);
            assertThrows(IllegalMonitorStateException.class, m::unlock);
            for (int round = 0; round < 2; round++) {
                Process child = Proc.java(DiesHolding.class, file.toString());
                String out = new String(child.getInputStream().readAllBytes());
                assertEquals(0, child.waitFor(), out);
                assertTrue(m.lock(), "the previous holder died");
                assertEquals(-1, shared.get(JAVA_INT, 1024));
                if (round == 0) {
                    shared.set(JAVA_INT, 1024, 0);
                    m.makeConsistent();
                    m.unlock();
                    assertFalse(m.lock());
                    m.unlock();
                } else {
                    m.unlock(); // not repaired: unusable from now on
                    assertThrows(NotRecoverableException.class, m::lock);
                }
            }
        } finally {
            Files.deleteIfExists(file);
        }
    }
}
