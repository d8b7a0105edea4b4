import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;

/**
 * Brings the JVM to a safepoint as fast as it can, and times it: each call of
 * ThreadMXBean.findDeadlockedThreads() is one VM operation at a safepoint (FindDeadlocks),
 * four hotspot probe hits (safepoint begin and end, VM operation begin and end). Prints one
 * line per block of BLOCK_MS: "block END_EPOCH_MS CALLS NS_PER_CALL", after one "start EPOCH_MS"
 * (the JVM's start, from which -Xlog's uptime counts).
 *
 * With "park" as third argument, each call is instead a park with its permit already given
 * (LockSupport.unpark of itself, then LockSupport.park): no system call, no safepoint, two
 * hotspot probe hits (thread park begin and end).
 *
 * With "clock", each call is one System.nanoTime() (HotSpot's os::javaTimeNanos: one hit of
 * rtlab's clock probe where it is attached), the loop's own read being the call.
 *
 * Usage: java SafepointLoop [SECONDS] [BLOCK_MS] [park|clock]
 */
public final class SafepointLoop {
    public static void main(String[] args) {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 60;
        long blockMs = args.length > 1 ? Long.parseLong(args[1]) : 100;
        boolean park = args.length > 2 && args[2].equals("park");
        boolean clock = args.length > 2 && args[2].equals("clock");
        Thread self = Thread.currentThread();
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        // What -Xlog's uptime decorations count from.
        System.out.println("start " + ManagementFactory.getRuntimeMXBean().getStartTime());
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        long sink = 0;
        while (System.nanoTime() < end) {
            long start = System.nanoTime();
            long stop = start + blockMs * 1_000_000L;
            long calls = 0;
            long now = start;
            while (now < stop) {
                if (clock) {
                    // (The read below is the call.)
                } else if (park) {
                    java.util.concurrent.locks.LockSupport.unpark(self);
                    java.util.concurrent.locks.LockSupport.park();
                } else {
                    long[] ids = mx.findDeadlockedThreads();
                    sink += ids == null ? 0 : ids.length;
                }
                calls++;
                now = System.nanoTime();
            }
            System.out.println("block " + System.currentTimeMillis() + " " + calls + " " + (now - start) / calls);
        }
        if (sink < 0) System.out.println(sink);
    }
}
