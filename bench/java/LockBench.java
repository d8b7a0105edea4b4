// Lock costs from Java, for bench/java.sh: dev.rtlab.PiMutex against ReentrantLock and
// synchronized, in interleaved blocks. Usage (the jar of bindings/java on the class path):
//
//   java --enable-native-access=ALL-UNNAMED -Drtlab.library=.../librtlab.so \
//        -cp rtlab-java.jar bench/java/LockBench.java uncontended|handoff BLOCKS BLOCK_MS
//
// uncontended: one thread, lock + increment a shared counter + unlock, ns per pair.
// handoff: two threads and a ring of three locks (each step locks the next lock, then
//   unlocks the one it held, so every lock call waits for the other thread's unlock: a
//   contended hand-off per step), ns per hand-off.
// Prints one line per block: "<impl> <ns>" for each implementation in turn (A B C A B C ...),
// after ten warm-up rounds of every implementation (the JIT compiles each loop first). The
// counter is printed at the end so the loops cannot be removed as dead code. Run with
// -XX:-EliminateLocks (bench/java.sh does), else the JIT merges the synchronized blocks of
// the unrolled loop into one (lock coarsening) and reports a fraction of a real monitor's cost.
import dev.rtlab.PiMutex;
import java.util.concurrent.locks.ReentrantLock;

public class LockBench {
    interface Lock {
        void lock();

        void unlock();
    }

    static final Object MONITOR = new Object();
    static long counter;

    static Lock pi() {
        PiMutex m = new PiMutex();
        return new Lock() {
            public void lock() { m.lock(); }
            public void unlock() { m.unlock(); }
        };
    }

    static Lock reentrant() {
        ReentrantLock m = new ReentrantLock();
        return new Lock() {
            public void lock() { m.lock(); }
            public void unlock() { m.unlock(); }
        };
    }

    // synchronized cannot be split into lock/unlock: its loop is written out below.
    static double uncontendedSync(long ms) {
        long n = 0, end = System.nanoTime() + ms * 1_000_000, t0 = System.nanoTime();
        while (System.nanoTime() < end) {
            for (int i = 0; i < 1000; i++) {
                synchronized (MONITOR) {
                    counter++;
                }
            }
            n += 1000;
        }
        return (double) (System.nanoTime() - t0) / n;
    }

    // One loop per implementation, as JMH has one method per benchmark: each call site sees
    // one class, so the JIT inlines each lock as it would in an application.
    static double uncontendedPi(PiMutex m, long ms) {
        long n = 0, end = System.nanoTime() + ms * 1_000_000, t0 = System.nanoTime();
        while (System.nanoTime() < end) {
            for (int i = 0; i < 1000; i++) {
                m.lock();
                counter++;
                m.unlock();
            }
            n += 1000;
        }
        return (double) (System.nanoTime() - t0) / n;
    }

    static double uncontendedReentrant(ReentrantLock m, long ms) {
        long n = 0, end = System.nanoTime() + ms * 1_000_000, t0 = System.nanoTime();
        while (System.nanoTime() < end) {
            for (int i = 0; i < 1000; i++) {
                m.lock();
                counter++;
                m.unlock();
            }
            n += 1000;
        }
        return (double) (System.nanoTime() - t0) / n;
    }

    // The floors of the two protocols: a PI futex word must be released with an atomic
    // read-modify-write (a waiter may have set FUTEX_WAITERS), so lock + unlock is two
    // compare-and-sets on the word in native memory; ReentrantLock's unlock is a plain
    // volatile store to a Java field.
    static final java.lang.invoke.VarHandle SEG = java.lang.foreign.ValueLayout.JAVA_INT.varHandle();
    static volatile int field;
    static final java.lang.invoke.VarHandle FIELD;
    static {
        try {
            FIELD = java.lang.invoke.MethodHandles.lookup().findStaticVarHandle(LockBench.class, "field", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    static double twoCas(java.lang.foreign.MemorySegment word, long ms) {
        long n = 0, end = System.nanoTime() + ms * 1_000_000, t0 = System.nanoTime();
        while (System.nanoTime() < end) {
            for (int i = 0; i < 1000; i++) {
                SEG.compareAndSet(word, 0L, 0, 77);
                counter++;
                SEG.compareAndSet(word, 0L, 77, 0);
            }
            n += 1000;
        }
        return (double) (System.nanoTime() - t0) / n;
    }

    static double casStore(long ms) {
        long n = 0, end = System.nanoTime() + ms * 1_000_000, t0 = System.nanoTime();
        while (System.nanoTime() < end) {
            for (int i = 0; i < 1000; i++) {
                FIELD.compareAndSet(0, 77);
                counter++;
                field = 0;
            }
            n += 1000;
        }
        return (double) (System.nanoTime() - t0) / n;
    }

    /** Two threads stepping through a ring of three locks for `ms`: ns per hand-off. */
    static double handoff(java.util.function.Supplier<Lock> make, long ms) throws Exception {
        Lock[] ring = {make.get(), make.get(), make.get()};
        long end = System.nanoTime() + ms * 1_000_000;
        long[] steps = new long[2];
        java.util.concurrent.CountDownLatch started = new java.util.concurrent.CountDownLatch(1);
        // A holds lock 0 from the start; B starts by waiting for it.
        Thread a = new Thread(() -> {
            ring[0].lock();
            started.countDown();
            steps[0] = walk(ring, 0, end);
        });
        Thread b = new Thread(() -> {
            try {
                started.await();
            } catch (InterruptedException e) {
                return;
            }
            ring[0].lock();
            steps[1] = walk(ring, 0, end);
        });
        long t0 = System.nanoTime();
        a.start();
        b.start();
        a.join();
        b.join();
        long took = System.nanoTime() - t0;
        return (double) took / Math.max(1, steps[0] + steps[1]);
    }

    /** Holding ring[at]: lock the next, unlock this one, until `end`; then let go. */
    static long walk(Lock[] ring, int at, long end) {
        long steps = 0;
        while (true) {
            int next = (at + 1) % 3;
            ring[next].lock();
            ring[at].unlock();
            at = next;
            steps++;
            // Both threads stop at the same deadline: each stops after its own step, holding
            // one lock, which it releases so the other's last lock call returns.
            if ((steps & 63) == 0 && System.nanoTime() >= end) {
                ring[at].unlock();
                return steps;
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        int blocks = Integer.parseInt(args[1]);
        long ms = Long.parseLong(args[2]);
        PiMutex pi = new PiMutex();
        ReentrantLock reentrant = new ReentrantLock();
        java.lang.foreign.MemorySegment word = java.lang.foreign.Arena.ofAuto().allocate(8, 4);
        // Warm-up: ten rounds of each (the JIT's tiers settle within a few seconds).
        for (int round = -10; round < blocks; round++) {
            StringBuilder line = new StringBuilder();
            if (mode.equals("uncontended")) {
                line.append("pi ").append(String.format("%.2f", uncontendedPi(pi, ms)));
                line.append(" reentrant ").append(String.format("%.2f", uncontendedReentrant(reentrant, ms)));
                line.append(" synchronized ").append(String.format("%.2f", uncontendedSync(ms)));
                line.append(" two_cas ").append(String.format("%.2f", twoCas(word, ms)));
                line.append(" cas_store ").append(String.format("%.2f", casStore(ms)));
            } else {
                line.append("pi ").append(String.format("%.1f", handoff(LockBench::pi, ms)));
                line.append(" reentrant ").append(String.format("%.1f", handoff(LockBench::reentrant, ms)));
            }
            if (round >= 0) {
                System.out.println(line);
            }
        }
        System.err.println("counter " + counter);
    }
}
