// A periodic loop in Java to point `rtlab watch` at: a thread named "rt-loop" parks until
// each 1 ms deadline (LockSupport.parkNanos, as real-time Java code does) and measures its own
// lateness; at the end it prints "samples N p50 X p99 Y max Z late1ms L" (ns; L periods late
// by more than 1 ms). The JVM gives the thread its Java name, so `rtlab watch --thread
// rt-loop` finds it. With GC_MS, another thread keeps RETAINED_MB of small objects alive and
// calls System.gc() every GC_MS ms: full collections, each a safepoint that stops rt-loop.
// How it waits for each deadline (HOW in the environment):
//   park      LockSupport.parkNanos (the default)
//   sleep     Thread.sleep(ms, ns) of the time left (to the nanosecond from JDK 21; JDK 17
//             rounds it to whole milliseconds)
//   wait      Object.wait(ms, ns) of the time left, on a monitor nobody notifies
//   await     Condition.awaitNanos of a ReentrantLock, never signalled
//   executor  a ScheduledThreadPoolExecutor at a fixed rate (its one thread named rt-loop),
//             each run late from the deadline the rate sets
//   virtual   as park, in a virtual thread named rt-loop (JDK 21 on): its parks are kept by
//             the JVM's VirtualThread-unparker thread and run on a carrier thread
// With LOG=path, each period's deadline (System.nanoTime: CLOCK_MONOTONIC) and lateness
// ("deadline_ns late_ns") go to that file.
//
//   java examples/java/Periodic.java [SECONDS] [PERIOD_US] [GC_MS] [RETAINED_MB] &
//   sudo rtlab watch --pid $! --thread rt-loop --duration 10s
import java.io.PrintWriter;
import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;

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
        String how = System.getenv().getOrDefault("HOW", "park");
        long[] when = new long[n];
        if (how.equals("executor")) {
            CountDownLatch done = new CountDownLatch(n);
            ScheduledThreadPoolExecutor ex = new ScheduledThreadPoolExecutor(1, r -> new Thread(r, "rt-loop"));
            int[] i = {0};
            // Each run's deadline is the executor's own: the time it was due (getDelay while
            // it runs is how late it is, before the next run is set).
            AtomicReference<ScheduledFuture<?>> self = new AtomicReference<>();
            Runnable task = () -> {
                long now = System.nanoTime();
                ScheduledFuture<?> f = self.get();
                if (f != null && i[0] < n) {
                    when[i[0]] = now + f.getDelay(TimeUnit.NANOSECONDS);
                    late[i[0]] = now - when[i[0]];
                    i[0]++;
                    done.countDown();
                }
            };
            self.set(ex.scheduleAtFixedRate(task, period, period, TimeUnit.NANOSECONDS));
            done.await();
            ex.shutdownNow();
        } else {
            Runnable loop = () -> {
                Object monitor = new Object();
                ReentrantLock lock = new ReentrantLock();
                Condition never = lock.newCondition();
                // The first deadline is taken once the thread runs: one taken before it
                // existed makes its first periods late by its own start (the thread's
                // creation and the loop's first linking), which no wait of it delayed.
                long next = System.nanoTime() + period;
                for (int i = 0; i < n; i++) {
                    long now;
                    while ((now = System.nanoTime()) < next) {
                        wait(how, next - now, monitor, lock, never);
                    }
                    when[i] = next;
                    late[i] = now - next;
                    next += period;
                }
            };
            if (how.equals("virtual")) {
                inVirtualThread(loop);
            } else {
                Thread t = new Thread(loop, "rt-loop");
                t.start();
                t.join();
            }
        }
        String log = System.getenv("LOG");
        if (log != null) {
            try (PrintWriter w = new PrintWriter(log)) {
                for (int i = 0; i < n; i++) w.println(when[i] + " " + late[i]);
            } catch (java.io.IOException e) {
                System.err.println("LOG: " + e);
            }
        }
        Arrays.sort(late);
        long over = Arrays.stream(late).filter(l -> l > 1_000_000).count();
        System.out.printf("samples %d p50 %d p99 %d max %d late1ms %d%n", n, late[n / 2],
                late[n * 99 / 100], late[n - 1], over);
    }

    /** Runs {@code loop} in a virtual thread named rt-loop and waits for it (found at run
     *  time: this file compiles with JDK 17 too). */
    static void inVirtualThread(Runnable loop) {
        try {
            ExecutorService vt = (ExecutorService) Executors.class
                    .getMethod("newVirtualThreadPerTaskExecutor").invoke(null);
            vt.submit(() -> {
                Thread.currentThread().setName("rt-loop");
                loop.run();
            }).get();
            vt.shutdown();
        } catch (NoSuchMethodException e) {
            System.err.println("HOW=virtual: virtual threads need JDK 21 or later");
            System.exit(2);
        } catch (ReflectiveOperationException | ExecutionException | InterruptedException e) {
            throw new RuntimeException(e);
        }
    }

    /** Waits up to {@code left} ns the way {@code how} names. */
    static void wait(String how, long left, Object monitor, ReentrantLock lock, Condition never) {
        try {
            switch (how) {
                case "sleep" -> Thread.sleep(left / 1_000_000, (int) (left % 1_000_000));
                case "wait" -> {
                    synchronized (monitor) {
                        monitor.wait(left / 1_000_000, (int) (left % 1_000_000));
                    }
                }
                case "await" -> {
                    lock.lock();
                    try {
                        never.awaitNanos(left);
                    } finally {
                        lock.unlock();
                    }
                }
                default -> LockSupport.parkNanos(left);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
