package dev.rtlab;

/** A Linux scheduling policy for {@link RtThread#setScheduler} and {@link RtThreadFactory}. */
public enum SchedPolicy {
    /** {@code SCHED_OTHER}: time-sharing (priority 0). */
    OTHER(0),
    /** {@code SCHED_FIFO}: real-time, runs until it blocks or a higher priority preempts it. */
    FIFO(1),
    /** {@code SCHED_RR}: real-time, round-robin among threads of equal priority. */
    RR(2);

    final int linuxNumber;

    SchedPolicy(int linuxNumber) {
        this.linuxNumber = linuxNumber;
    }
}
