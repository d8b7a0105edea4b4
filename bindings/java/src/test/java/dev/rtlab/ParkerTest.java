package dev.rtlab;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import org.junit.jupiter.api.Test;

class ParkerTest {
    @Test
    void parksUntilTheDeadlineOrAnUnpark() throws Exception {
        try (Parker p = new Parker()) {
            long t0 = System.nanoTime();
            assertFalse(p.parkUntil(t0 + 2_000_000));
            assertTrue(System.nanoTime() - t0 >= 2_000_000);
            p.unpark(); // a token: the next park returns at once
            assertTrue(p.parkUntil(System.nanoTime() + 5_000_000_000L));
            Thread t = new Thread(() -> {
                try {
                    Thread.sleep(2);
                } catch (InterruptedException e) {
                    return;
                }
                p.unpark();
            });
            t.start();
            assertTrue(p.parkUntil(System.nanoTime() + 5_000_000_000L));
            t.join();
        }
    }

    @Test
    void threadSettingsApplyToTheCallingThread() throws Exception {
        String self = java.nio.file.Files.readSymbolicLink(java.nio.file.Path.of("/proc/thread-self")).toString();
        assertEquals(self.substring(self.lastIndexOf('/') + 1), Long.toString(RtThread.tid()));
        String cpu = PiMutexTest.onOtherThread(() -> {
            RtThread.setAffinity(0);
            RtThread.setTimerSlack(Duration.ofNanos(1));
            return Proc.statField(39);
        });
        assertEquals("0", cpu, "runs on CPU 0");
        RtlabException e = org.junit.jupiter.api.Assertions.assertThrows(RtlabException.class,
                () -> RtThread.setAffinity(-1));
        assertEquals(Native.EINVAL, e.code());
    }
}
