package dev.rtlab;

import java.time.Duration;
import java.util.Arrays;
import java.util.Objects;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Makes platform threads that set their own real-time settings as they start, before they run
 * their task: scheduling policy and priority, CPU affinity, timer slack. For thread pools:
 *
 * <pre>{@code
 * ThreadFactory rt = RtThreadFactory.builder()
 *         .namePrefix("control-")
 *         .scheduler(SchedPolicy.FIFO, 80)
 *         .affinity(1)
 *         .timerSlack(Duration.ofNanos(1))
 *         .build();
 * ExecutorService pool = Executors.newFixedThreadPool(2, rt);
 * }</pre>
 *
 * <p>Settings are applied by each thread to itself (Linux keeps them per thread). A setting the
 * kernel refuses (SCHED_FIFO without CAP_SYS_NICE or an RLIMIT_RTPRIO, a CPU outside the
 * process's cgroup) ends that thread with an {@link RtlabException} before it runs its task,
 * through its uncaught-exception handler: a pool thread never runs work at settings it did not
 * get. {@link #applyTo()} applies the same settings to the calling thread, to check them up
 * front. Settings left unset are inherited from the thread that starts the new one.
 */
public final class RtThreadFactory implements ThreadFactory {
    private final String namePrefix;
    private final SchedPolicy policy;
    private final int priority;
    private final int[] cpus;
    private final Duration timerSlack;
    private final boolean daemon;
    private final AtomicInteger count = new AtomicInteger();

    private RtThreadFactory(Builder b) {
        namePrefix = b.namePrefix;
        policy = b.policy;
        priority = b.priority;
        cpus = b.cpus;
        timerSlack = b.timerSlack;
        daemon = b.daemon;
    }

    /** A builder whose settings are all unset (inherited), named "rt-1", "rt-2", ... */
    public static Builder builder() {
        return new Builder();
    }

    /** Applies this factory's settings to the calling thread. */
    public void applyTo() {
        if (policy != null) {
            RtThread.setScheduler(policy, priority);
        }
        if (cpus != null) {
            RtThread.setAffinity(cpus);
        }
        if (timerSlack != null) {
            RtThread.setTimerSlack(timerSlack);
        }
    }

    @Override
    public Thread newThread(Runnable task) {
        Objects.requireNonNull(task, "task");
        Thread t = new Thread(() -> {
            applyTo();
            task.run();
        }, namePrefix + count.incrementAndGet());
        t.setDaemon(daemon);
        return t;
    }

    /** The settings of an {@link RtThreadFactory}. */
    public static final class Builder {
        private String namePrefix = "rt-";
        private SchedPolicy policy;
        private int priority;
        private int[] cpus;
        private Duration timerSlack;
        private boolean daemon;

        private Builder() {}

        /** Threads are named this prefix followed by 1, 2, 3 ... */
        public Builder namePrefix(String prefix) {
            namePrefix = Objects.requireNonNull(prefix, "prefix");
            return this;
        }

        /** The policy and priority (1-99 for FIFO and RR, 0 for OTHER). */
        public Builder scheduler(SchedPolicy policy, int priority) {
            Objects.requireNonNull(policy, "policy");
            int low = policy == SchedPolicy.OTHER ? 0 : 1;
            int high = policy == SchedPolicy.OTHER ? 0 : 99;
            if (priority < low || priority > high) {
                throw new IllegalArgumentException(policy + " takes priorities " + low + "-" + high + ", not " + priority);
            }
            this.policy = policy;
            this.priority = priority;
            return this;
        }

        /** The CPUs the threads may run on. */
        public Builder affinity(int... cpus) {
            if (cpus.length == 0) {
                throw new IllegalArgumentException("no CPU given");
            }
            for (int c : cpus) {
                if (c < 0) {
                    throw new IllegalArgumentException("negative CPU " + c);
                }
            }
            this.cpus = Arrays.copyOf(cpus, cpus.length);
            return this;
        }

        /**
         * How late the kernel may wake the threads' timed sleeps (50 us by default; the kernel
         * ignores it for FIFO and RR threads). At least 1 ns.
         */
        public Builder timerSlack(Duration slack) {
            if (slack.isNegative() || slack.isZero()) {
                throw new IllegalArgumentException("timer slack must be at least 1 ns (0 means the process default)");
            }
            timerSlack = slack;
            return this;
        }

        /** Whether the threads are daemon threads (false by default). */
        public Builder daemon(boolean daemon) {
            this.daemon = daemon;
            return this;
        }

        public RtThreadFactory build() {
            return new RtThreadFactory(this);
        }
    }
}
