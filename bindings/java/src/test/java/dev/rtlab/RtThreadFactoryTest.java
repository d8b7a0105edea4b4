package dev.rtlab;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

class RtThreadFactoryTest {
    /** What the kernel says of the calling thread. */
    record Seen(String name, int policy, int rtPriority, String cpus, long slackNs) {
        static Seen now() throws Exception {
            String cpus = Files.readAllLines(Path.of("/proc/thread-self/status")).stream()
                    .filter(l -> l.startsWith("Cpus_allowed_list:"))
                    .map(l -> l.split(":")[1].trim()).findFirst().orElseThrow();
            long slack = Long.parseLong(
                    Files.readString(Path.of("/proc/" + RtThread.tid() + "/timerslack_ns")).trim());
            return new Seen(Thread.currentThread().getName(), Integer.parseInt(Proc.statField(41)),
                    Integer.parseInt(Proc.statField(40)), cpus, slack);
        }
    }

    /** Whether this process may make real-time threads (the kernel is asked, on a scratch thread). */
    static boolean realTimeAllowed() throws Exception {
        AtomicBoolean allowed = new AtomicBoolean();
        Thread t = new Thread(() -> {
            try {
                RtThread.setScheduler(SchedPolicy.FIFO, 1);
                allowed.set(true);
            } catch (RtlabException refused) {
                allowed.set(false);
            }
        });
        t.start();
        t.join();
        return allowed.get();
    }

    static List<Seen> runOnPool(RtThreadFactory factory) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(2, factory);
        try {
            Future<Seen> a = pool.submit(Seen::now);
            Future<Seen> b = pool.submit(Seen::now);
            return List.of(a.get(10, TimeUnit.SECONDS), b.get(10, TimeUnit.SECONDS));
        } finally {
            pool.shutdown();
            assertTrue(pool.awaitTermination(10, TimeUnit.SECONDS));
        }
    }

    @Test
    void poolThreadsRunTheirTasksWithTheAffinityTimerSlackAndNames() throws Exception {
        Seen here = Seen.now();
        long slack = here.slackNs() == 1234 ? 4321 : 1234; // not what they would inherit
        RtThreadFactory factory = RtThreadFactory.builder()
                .namePrefix("ctl-").affinity(0).timerSlack(Duration.ofNanos(slack)).daemon(true).build();
        for (Seen seen : runOnPool(factory)) {
            assertTrue(seen.name().startsWith("ctl-"), seen.toString());
            assertEquals("0", seen.cpus(), seen.toString());
            assertEquals(slack, seen.slackNs(), seen.toString());
            assertEquals(0, seen.policy(), "SCHED_OTHER inherited: " + seen);
        }
        assertEquals(here, Seen.now(), "the creating thread's own settings are untouched");
    }

    @Test
    void poolThreadsRunAtTheRealTimePolicyAndPriority() throws Exception {
        assumeTrue(realTimeAllowed(), "skipped: SCHED_FIFO refused (needs CAP_SYS_NICE or RLIMIT_RTPRIO)");
        for (Seen seen : runOnPool(RtThreadFactory.builder().scheduler(SchedPolicy.FIFO, 11).build())) {
            assertEquals(1, seen.policy(), "SCHED_FIFO: " + seen);
            assertEquals(11, seen.rtPriority(), seen.toString());
            assertTrue(seen.name().startsWith("rt-"), seen.toString());
        }
        for (Seen seen : runOnPool(RtThreadFactory.builder().scheduler(SchedPolicy.RR, 7).build())) {
            assertEquals(2, seen.policy(), "SCHED_RR: " + seen);
            assertEquals(7, seen.rtPriority(), seen.toString());
        }
    }

    @Test
    void aThreadWhoseSettingsAreRefusedEndsBeforeItsTask() throws Exception {
        // No machine has CPU 100000: the kernel refuses the affinity.
        Thread t = RtThreadFactory.builder().affinity(100_000).build().newThread(() -> {
            throw new AssertionError("the task ran at settings the kernel refused");
        });
        AtomicReference<Throwable> ended = new AtomicReference<>();
        t.setUncaughtExceptionHandler((thread, e) -> ended.set(e));
        t.start();
        t.join(10_000);
        assertFalse(t.isAlive());
        assertInstanceOf(RtlabException.class, ended.get(), String.valueOf(ended.get()));
    }

    @Test
    void invalidSettingsAreRefusedWhenBuilt() {
        assertThrows(IllegalArgumentException.class, () -> RtThreadFactory.builder().scheduler(SchedPolicy.FIFO, 0));
        assertThrows(IllegalArgumentException.class, () -> RtThreadFactory.builder().scheduler(SchedPolicy.RR, 100));
        assertThrows(IllegalArgumentException.class, () -> RtThreadFactory.builder().scheduler(SchedPolicy.OTHER, 5));
        assertThrows(IllegalArgumentException.class, () -> RtThreadFactory.builder().affinity());
        assertThrows(IllegalArgumentException.class, () -> RtThreadFactory.builder().timerSlack(Duration.ZERO));
    }
}
