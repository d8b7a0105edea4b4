package dev.rtlab;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

class PiMutexTest {
    /** Runs {@code body} on a new platform thread and waits for it. */
    static <T> T onOtherThread(java.util.concurrent.Callable<T> body) throws Exception {
        AtomicReference<T> out = new AtomicReference<>();
        AtomicReference<Exception> failed = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                out.set(body.call());
            } catch (Exception e) {
                failed.set(e);
            }
        });
        t.start();
        t.join();
        if (failed.get() != null) {
            throw failed.get();
        }
        return out.get();
    }

    @Test
    void onlyTheHolderUnlocksAndOthersWaitOrGiveUp() throws Exception {
        try (PiMutex m = new PiMutex()) {
            m.lock();
            assertTrue(m.isHeldByCurrentThread());
            assertThrows(IllegalMonitorStateException.class, m::lock);
            assertFalse(onOtherThread(() -> m.tryLock()));
            long t0 = System.nanoTime();
            assertFalse(onOtherThread(() -> m.lock(Duration.ofMillis(5))));
            assertTrue(System.nanoTime() - t0 >= 5_000_000);
            assertTrue(onOtherThread(() -> {
                assertThrows(IllegalMonitorStateException.class, m::unlock);
                return true;
            }));
            m.unlock();
            assertTrue(onOtherThread(() -> {
                boolean got = m.tryLock();
                m.unlock();
                return got;
            }));
            assertThrows(IllegalMonitorStateException.class, m::unlock);
        }
    }

    @Test
    void aSecondLockByTheHolderFailsLoudlyInEveryForm() throws Exception {
        // Not reentrant: every way of locking again throws instead of deadlocking, and the
        // holder still holds it afterwards.
        try (PiMutex m = new PiMutex()) {
            m.lock();
            assertThrows(IllegalMonitorStateException.class, m::lock);
            assertThrows(IllegalMonitorStateException.class, () -> m.tryLock());
            assertThrows(IllegalMonitorStateException.class, m::lockInterruptibly);
            assertThrows(IllegalMonitorStateException.class,
                    () -> m.tryLock(1, java.util.concurrent.TimeUnit.SECONDS));
            assertThrows(IllegalMonitorStateException.class,
                    () -> m.tryLock(0, java.util.concurrent.TimeUnit.SECONDS));
            assertThrows(IllegalMonitorStateException.class, () -> m.lock(Duration.ofSeconds(1)));
            assertTrue(m.isHeldByCurrentThread());
            m.unlock();
            assertFalse(m.isLocked());
        }
    }

    @Test
    void excludesMutuallyUnderContention() throws Exception {
        try (PiMutex m = new PiMutex()) {
            int[] counter = {0};
            Thread[] threads = new Thread[4];
            for (int i = 0; i < threads.length; i++) {
                threads[i] = new Thread(() -> {
                    for (int j = 0; j < 50_000; j++) {
                        m.lock();
                        counter[0]++;
                        m.unlock();
                    }
                });
                threads[i].start();
            }
            for (Thread t : threads) {
                t.join();
            }
            assertEquals(200_000, counter[0]);
        }
    }

    @Test
    void aConditionTimesOutHoldingTheMutexAndSignalsWakeWaiters() throws Exception {
        try (PiMutex m = new PiMutex()) {
            PiCondition c = m.newCondition();
            m.lock();
            c.signal(); // nobody waits yet
            m.unlock();
            assertThrows(IllegalMonitorStateException.class, c::signal);
            m.lock();
            long t0 = System.nanoTime();
            assertFalse(c.awaitUntil(t0 + 3_000_000));
            assertTrue(System.nanoTime() - t0 >= 3_000_000);
            assertTrue(m.isHeldByCurrentThread());
            m.unlock();
            assertThrows(IllegalMonitorStateException.class, () -> c.awaitUntil(System.nanoTime()));
            AtomicInteger ready = new AtomicInteger();
            boolean[] go = {false};
            Runnable waiter = () -> {
                m.lock();
                ready.incrementAndGet();
                while (!go[0]) {
                    c.awaitUntil(System.nanoTime() + 5_000_000_000L);
                }
                m.unlock();
            };
            Thread a = new Thread(waiter);
            Thread b = new Thread(waiter);
            a.start();
            b.start();
            while (ready.get() < 2) {
                Thread.sleep(1);
            }
            m.lock();
            go[0] = true;
            c.signalAll();
            m.unlock();
            a.join(5000);
            b.join(5000);
            assertFalse(a.isAlive() || b.isAlive());
        }
    }

    @Test
    void theHolderRunsAtTheWaitersPriority() throws Exception {
        assumeTrue(Proc.root(), "needs root for SCHED_FIFO");
        try (PiMutex m = new PiMutex()) {
            int before = Proc.prio();
            m.lock();
            AtomicReference<Throwable> failed = new AtomicReference<>();
            Thread waiter = new Thread(() -> {
                try {
                    RtThread.setFifo(20);
                    m.lock();
                    m.unlock();
                } catch (Throwable t) {
                    failed.set(t);
                }
            });
            waiter.start();
            int boosted = before;
            for (int i = 0; i < 1000 && boosted == before; i++) {
                Thread.sleep(1);
                boosted = Proc.prio();
            }
            assertEquals(-21, boosted, "SCHED_FIFO 20 while the FIFO 20 thread waits");
            m.unlock();
            waiter.join();
            assertEquals(null, failed.get());
            assertEquals(before, Proc.prio());
        }
    }
}
