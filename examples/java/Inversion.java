// Seed 003's priority-inversion test, from Java: a low-priority thread holds a lock, a
// high-priority thread waits for it, and a medium-priority thread spins on the same CPU.
// With java.util.concurrent.locks.ReentrantLock (no priority inheritance) the medium thread
// keeps the holder off the CPU, so the high thread waits as long as the medium one spins;
// with dev.rtlab.PiMutex the kernel runs the holder at the waiter's priority, so the wait is
// bounded by the hold. Needs root (SCHED_FIFO) and two CPUs (the three threads share CPU 0;
// this main thread watches from elsewhere).
//
//   cargo build --release && (cd bindings/java && mvn -q package -DskipTests)
//   sudo java --enable-native-access=ALL-UNNAMED -Drtlab.library=target/release/librtlab.so \
//        -cp bindings/java/target/rtlab-java-0.1.0.jar examples/java/Inversion.java [TRIALS]
//
// Prints, per lock, the high thread's longest wait over the trials:
//   ReentrantLock: high waited max 507.2 ms (hold 5 ms, medium spins 500 ms)
//   PiMutex: high waited max 7.5 ms (hold 5 ms, medium spins 500 ms)
//
// On a busy machine a PI wait may be longer by up to 50 ms per second: since Linux 6.12 the
// fair server lends each CPU to starved SCHED_OTHER tasks for 50 ms of every second, ahead of
// real-time threads, the boosted holder included (seen beside stress-ng --cpu 2).
import dev.rtlab.PiMutex;
import dev.rtlab.RtThread;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.locks.ReentrantLock;

public class Inversion {
    static final long HOLD_NS = 5_000_000;
    static final long SPIN_NS = 500_000_000;

    interface Lock {
        void lock();

        void unlock();
    }

    static void spin(long ns) {
        long end = System.nanoTime() + ns;
        while (System.nanoTime() < end) {
            Thread.onSpinWait();
        }
    }

    static Thread fifo(int prio, Runnable body) {
        Thread t = new Thread(() -> {
            RtThread.setAffinity(0);
            RtThread.setFifo(prio);
            body.run();
        });
        t.setDaemon(true);
        t.start();
        return t;
    }

    /** One trial: how long the high thread waited for the lock, in ns. */
    static long trial(Lock lock) throws InterruptedException {
        CountDownLatch held = new CountDownLatch(1);
        CountDownLatch waiting = new CountDownLatch(1);
        java.util.concurrent.atomic.AtomicBoolean go = new java.util.concurrent.atomic.AtomicBoolean();
        long[] waited = {0};
        // The medium thread is SCHED_FIFO 20 on CPU 0 before the trial starts, waiting for its
        // cue: a thread that turns itself real-time while the holder is boosted got the CPU
        // ahead of the boosted holder on this kernel (6.18; bench/repro/pi-boost-vs-setscheduler.c).
        CountDownLatch cue = new CountDownLatch(1);
        CountDownLatch mediumReady = new CountDownLatch(1);
        Thread medium = fifo(20, () -> {
            mediumReady.countDown();
            try {
                cue.await();
            } catch (InterruptedException e) {
                return;
            }
            spin(SPIN_NS);
        });
        mediumReady.await();
        Thread low = fifo(10, () -> {
            lock.lock();
            held.countDown();
            while (!go.get()) { // holds on until the high thread waits for it
                Thread.onSpinWait();
            }
            spin(HOLD_NS); // the critical section: 5 ms of work
            lock.unlock();
        });
        held.await();
        Thread high = fifo(30, () -> {
            waiting.countDown();
            long t0 = System.nanoTime();
            lock.lock();
            waited[0] = System.nanoTime() - t0;
            lock.unlock();
        });
        waiting.await();
        Thread.sleep(1); // the high thread is in lock() now
        cue.countDown(); // the medium thread spins from now on ...
        Thread.sleep(1);
        go.set(true); // ... and the holder may finish its work (if it gets the CPU)
        high.join();
        low.join();
        medium.join();
        // Real-time threads may use 95 % of each second (sched_rt_runtime_us); past that the
        // kernel stops all of them on the CPU, the boosted holder too, for the rest of the
        // second. Trials back to back would measure that, not the lock: a pause in between.
        Thread.sleep(1000);
        return waited[0];
    }

    public static void main(String[] args) throws Exception {
        int trials = args.length > 0 ? Integer.parseInt(args[0]) : 3;
        ReentrantLock r = new ReentrantLock();
        PiMutex p = new PiMutex();
        Lock[] locks = {
            new Lock() {
                public void lock() { r.lock(); }
                public void unlock() { r.unlock(); }
                public String toString() { return "ReentrantLock"; }
            },
            new Lock() {
                public void lock() { p.lock(); }
                public void unlock() { p.unlock(); }
                public String toString() { return "PiMutex"; }
            },
        };
        for (Lock lock : locks) {
            trial(lock); // warms the JVM up (class loading, the first native calls)
            long max = 0;
            StringBuilder each = new StringBuilder();
            for (int i = 0; i < trials; i++) {
                long w = trial(lock);
                each.append(String.format(" %.1f", w / 1e6));
                max = Math.max(max, w);
            }
            System.err.println(lock + " waits (ms):" + each);
            System.out.printf("%s: high waited max %.1f ms (hold %d ms, medium spins %d ms)%n",
                    lock, max / 1e6, HOLD_NS / 1_000_000, SPIN_NS / 1_000_000);
        }
    }
}
