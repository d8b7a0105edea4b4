package dev.rtlab;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** Runs examples/java/Inversion.java (seed 003's inversion test) as a program would. */
class InversionTest {
    @Test
    void reentrantLockWaitsForTheMediumThreadAndPiMutexOnlyForTheHold() throws Exception {
        assumeTrue(Proc.root(), "needs root for SCHED_FIFO");
        assumeTrue(Runtime.getRuntime().availableProcessors() >= 2, "needs two CPUs");
        Path demo = Path.of("../../examples/java/Inversion.java");
        assumeTrue(Files.exists(demo), "no examples/java/Inversion.java beside the binding");
        String jvm = ProcessHandle.current().info().command().orElse("java");
        Process p = new ProcessBuilder(jvm, "--enable-native-access=ALL-UNNAMED",
                "-Drtlab.library=" + System.getProperty("rtlab.library"),
                "-cp", System.getProperty("java.class.path"), demo.toString(), "3")
                .redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertEquals(0, p.waitFor(), out);
        // Every trial's wait, per lock ("ReentrantLock waits (ms): 507.1 506.9 ...").
        double reentrantMin = Double.MAX_VALUE, piMax = -1;
        Matcher m = Pattern.compile("(\\w+) waits \\(ms\\):([0-9. ]+)").matcher(out);
        while (m.find()) {
            for (String w : m.group(2).trim().split(" ")) {
                double ms = Double.parseDouble(w);
                if (m.group(1).equals("ReentrantLock")) {
                    reentrantMin = Math.min(reentrantMin, ms);
                } else if (m.group(1).equals("PiMutex")) {
                    piMax = Math.max(piMax, ms);
                }
            }
        }
        // The medium thread spins 500 ms; the holder's work is 5 ms. Without inheritance the
        // high thread waits out the spin in every trial; with it, for the hold (plus, on a busy
        // machine, what the kernel's fair server lends SCHED_OTHER tasks: 50 ms a second).
        assertTrue(reentrantMin >= 450 && reentrantMin < Double.MAX_VALUE,
                "ReentrantLock: the high thread waits for the medium one: " + out);
        assertTrue(piMax >= 5 && piMax * 2 < reentrantMin, "PiMutex: the wait is bounded by the hold: " + out);
    }
}
