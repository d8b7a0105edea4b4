package dev.rtlab;

import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;

/** Real-time settings of the calling thread (a platform thread: each is a kernel thread). */
public final class RtThread {
    private RtThread() {}

    /** SCHED_FIFO at {@code prio} (1-99); needs CAP_SYS_NICE or RLIMIT_RTPRIO. */
    public static void setFifo(int prio) {
        int code = Native.invoke("rtlab_thread_set_fifo", () -> (int) Native.SET_FIFO.invokeExact(prio));
        Native.check("RtThread.setFifo(" + prio + ")", code);
    }

    /**
     * The calling thread's scheduling policy and priority: 1-99 for {@link SchedPolicy#FIFO}
     * and {@link SchedPolicy#RR} (which need CAP_SYS_NICE or RLIMIT_RTPRIO), 0 for
     * {@link SchedPolicy#OTHER}.
     */
    public static void setScheduler(SchedPolicy policy, int prio) {
        int code = Native.invoke("rtlab_thread_set_scheduler",
                () -> (int) Native.SET_SCHEDULER.invokeExact(policy.linuxNumber, prio));
        Native.check("RtThread.setScheduler(" + policy + ", " + prio + ")", code);
    }

    /** Runs the calling thread on {@code cpus} only. */
    public static void setAffinity(int... cpus) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment list = arena.allocateFrom(JAVA_INT, cpus);
            int code = Native.invoke("rtlab_thread_set_affinity",
                    () -> (int) Native.SET_AFFINITY.invokeExact(list, (long) cpus.length));
            Native.check("RtThread.setAffinity", code);
        }
    }

    /** The calling thread's timer slack (how late the kernel may wake its timed sleeps; 50 us by default). */
    public static void setTimerSlack(Duration slack) {
        long ns = slack.toNanos();
        int code = Native.invoke("rtlab_thread_set_timer_slack_ns", () -> (int) Native.SET_SLACK.invokeExact(ns));
        Native.check("RtThread.setTimerSlack", code);
    }

    /** Locks the process's memory (now and future) against paging. */
    public static void mlockAll() {
        int code = Native.invoke("rtlab_mlockall", () -> (int) Native.MLOCKALL.invokeExact());
        Native.check("RtThread.mlockAll", code);
    }

    /** The calling thread's kernel TID (what /proc, rtlab watch and perf call it). */
    public static long tid() {
        return PiMutex.tid();
    }
}
