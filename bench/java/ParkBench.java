// Timed parks from Java, for bench/java.sh: how late a 10 us park returns with
// LockSupport.parkNanos and with dev.rtlab.Parker.parkUntil, at the thread's default timer
// slack (50 us for SCHED_OTHER), then with the thread's slack set to 1 ns
// (RtThread.setTimerSlack). Usage (the jar of bindings/java on the class path):
//
//   java --enable-native-access=ALL-UNNAMED -Drtlab.library=.../librtlab.so \
//        -cp rtlab-java.jar bench/java/ParkBench.java BLOCKS PARKS
//
// Prints one line per block, the two interleaved: "<slack> parkNanos <p50 ns> <p99 ns>
// parkUntil <p50 ns> <p99 ns>", each the overshoot past the 10 us asked for.
import dev.rtlab.Parker;
import dev.rtlab.RtThread;
import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.locks.LockSupport;

public class ParkBench {
    static final long PARK_NS = 10_000;

    static long[] overshoots(boolean rtlab, Parker parker, int parks) {
        long[] late = new long[parks];
        for (int i = 0; i < parks; i++) {
            long t0 = System.nanoTime();
            if (rtlab) {
                parker.parkUntil(t0 + PARK_NS);
            } else {
                LockSupport.parkNanos(PARK_NS);
            }
            late[i] = System.nanoTime() - t0 - PARK_NS;
        }
        Arrays.sort(late);
        return late;
    }

    public static void main(String[] args) {
        int blocks = Integer.parseInt(args[0]);
        int parks = Integer.parseInt(args[1]);
        try (Parker parker = new Parker()) {
            for (String slack : new String[] {"default", "1ns"}) {
                if (slack.equals("1ns")) {
                    RtThread.setTimerSlack(Duration.ofNanos(1));
                }
                for (int b = -2; b < blocks; b++) {
                    long[] j = overshoots(false, parker, parks);
                    long[] r = overshoots(true, parker, parks);
                    if (b >= 0) {
                        System.out.printf("%s parkNanos %d %d parkUntil %d %d%n", slack, j[parks / 2],
                                j[parks * 99 / 100], r[parks / 2], r[parks * 99 / 100]);
                    }
                }
            }
        }
    }
}
