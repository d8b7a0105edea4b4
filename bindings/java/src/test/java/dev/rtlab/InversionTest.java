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
        Matcher m = Pattern.compile("(\\w+): high waited max ([0-9.]+) ms").matcher(out);
        double reentrant = -1, pi = -1;
        while (m.find()) {
            double ms = Double.parseDouble(m.group(2));
            if (m.group(1).equals("ReentrantLock")) {
                reentrant = ms;
            } else if (m.group(1).equals("PiMutex")) {
                pi = ms;
            }
        }
        // The medium thread spins 200 ms; the holder's work is 5 ms.
        assertTrue(reentrant >= 150, "ReentrantLock: the high thread waits for the medium one: " + out);
        assertTrue(pi >= 5 && pi < 50, "PiMutex: the wait is bounded by the hold: " + out);
    }
}
