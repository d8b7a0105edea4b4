// A periodic loop in Java to point `rtlab watch` at: a thread named "rt-loop" parks until
// each 1 ms deadline (LockSupport.parkNanos, as real-time Java code does) and measures its own
// lateness; at the end it prints "samples N p50 X p99 Y max Z" (ns). The JVM gives the thread
// its Java name, so `rtlab watch --thread rt-loop` finds it.
//
//   java examples/java/Periodic.java [SECONDS] [PERIOD_US] &
//   sudo rtlab watch --pid $! --thread rt-loop --duration 10s
import java.util.Arrays;
import java.util.concurrent.locks.LockSupport;

public class Periodic {
    public static void main(String[] args) throws InterruptedException {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 10;
        long period = (args.length > 1 ? Long.parseLong(args[1]) : 1000) * 1000;
        int n = (int) (seconds * 1e9 / period) + 1;
        long[] late = new long[n];
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
        System.out.printf("samples %d p50 %d p99 %d max %d%n", n, late[n / 2], late[n * 99 / 100],
                late[n - 1]);
    }
}
