// A periodic loop in Java to point `rtlab watch` at: a thread named "rt-loop" parks until
// each 1 ms deadline (LockSupport.parkNanos, as real-time Java code does) and measures its own
// lateness; at the end it prints "samples N p50 X p99 Y max Z late1ms L" (ns; L periods late
// by more than 1 ms). The JVM gives the thread its Java name, so `rtlab watch --thread
// rt-loop` finds it. With GC_MS, another thread keeps RETAINED_MB of small objects alive and
// calls System.gc() every GC_MS ms: full collections, each a safepoint that stops rt-loop.
//
//   java examples/java/Periodic.java [SECONDS] [PERIOD_US] [GC_MS] [RETAINED_MB] &
//   sudo rtlab watch --pid $! --thread rt-loop --duration 10s
import java.util.Arrays;
import java.util.concurrent.locks.LockSupport;

public class Periodic {
    public static void main(String[] args) throws InterruptedException {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 10;
        long period = (args.length > 1 ? Long.parseLong(args[1]) : 1000) * 1000;
        int n = (int) (seconds * 1e9 / period) + 1;
        long gcMs = args.length > 2 ? Long.parseLong(args[2]) : 0;
        int retainedMb = args.length > 3 ? Integer.parseInt(args[3]) : 100;
        long[] late = new long[n];
        if (gcMs > 0) {
            Thread gc = new Thread(() -> {
                // Small objects, linked: a full collection traces every one of them.
                Object[][] kept = new Object[retainedMb * 16][];
                for (int i = 0; i < kept.length; i++) {
                    kept[i] = new Object[1024];
                    for (int j = 0; j < 1024; j++) kept[i][j] = new byte[16];
                }
                while (true) {
                    try {
                        Thread.sleep(gcMs);
                    } catch (InterruptedException e) {
                        return;
                    }
                    System.gc();
                    if (kept.length == 0) System.out.println();
                }
            }, "gc-trigger");
            gc.setDaemon(true);
            gc.start();
        }
        Thread t = new Thread(() -> {
            long next = System.nanoTime() + period;
            for (int i = 0; i < n; i++) {
                long now;
                while ((now = System.nanoTime()) < next) {
                    LockSupport.parkNanos(next - now);
                }
                late[i] = now - next;
                next += period;
            }
        }, "rt-loop");
        t.start();
        t.join();
        Arrays.sort(late);
        long over = Arrays.stream(late).filter(l -> l > 1_000_000).count();
        System.out.printf("samples %d p50 %d p99 %d max %d late1ms %d%n", n, late[n / 2],
                late[n * 99 / 100], late[n - 1], over);
    }
}
