package dev.rtlab;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Date;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Predicate;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The contracts of {@link Lock} and {@link Condition} that code written for
 * {@link ReentrantLock} relies on, checked on PiMutex and, as the reference that shows each
 * test is right, on ReentrantLock itself. Each test checks one contract. Waits for another
 * thread to reach a state are bounded by {@link #PATIENCE_MS}, far above the binding's
 * interrupt check period, so a loaded machine slows them down but does not fail them.
 */
class LockConformanceTest {
    static final long PATIENCE_MS = 10_000;

    /** A lock under test: how to make one and ask whether the calling thread holds it. */
    record Subject(String name, java.util.function.Supplier<Lock> make, Predicate<Lock> heldByMe) {
        @Override
        public String toString() {
            return name;
        }
    }

    static Stream<Subject> locks() {
        return Stream.of(
                new Subject("ReentrantLock", ReentrantLock::new, l -> ((ReentrantLock) l).isHeldByCurrentThread()),
                new Subject("PiMutex", PiMutex::new, l -> ((PiMutex) l).isHeldByCurrentThread()));
    }

    /** Runs body on a new platform thread; join() rethrows what it threw. */
    static final class Side {
        final Thread thread;
        final AtomicReference<Throwable> failed = new AtomicReference<>();

        Side(ThrowingRunnable body) {
            thread = new Thread(() -> {
                try {
                    body.run();
                } catch (Throwable t) {
                    failed.set(t);
                }
            });
            thread.start();
        }

        void join() throws Throwable {
            thread.join(PATIENCE_MS);
            assertFalse(thread.isAlive(), "the other thread did not finish in time");
            if (failed.get() != null) {
                throw failed.get();
            }
        }
    }

    interface ThrowingRunnable {
        void run() throws Throwable;
    }

    /** Waits until {@code t} is blocked or waiting (in the kernel or parked). */
    static void awaitBlocked(Thread t) throws InterruptedException {
        long end = System.nanoTime() + PATIENCE_MS * 1_000_000;
        // A thread in a native call stays RUNNABLE to the JVM: give it time to get there.
        while (t.getState() == Thread.State.NEW && System.nanoTime() < end) {
            Thread.sleep(1);
        }
        Thread.sleep(20);
    }

    @ParameterizedTest
    @MethodSource("locks")
    void unlockByAThreadThatDoesNotHoldItThrowsIllegalMonitorState(Subject s) throws Throwable {
        Lock lock = s.make.get();
        assertThrows(IllegalMonitorStateException.class, lock::unlock, "unlock of a free lock");
        lock.lock();
        new Side(() -> assertThrows(IllegalMonitorStateException.class, lock::unlock)).join();
        assertTrue(s.heldByMe.test(lock), "still held by its owner after the failed unlock");
        lock.unlock();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void conditionMethodsWithoutTheLockThrowIllegalMonitorState(Subject s) throws Throwable {
        Lock lock = s.make.get();
        Condition c = lock.newCondition();
        assertThrows(IllegalMonitorStateException.class, c::await);
        assertThrows(IllegalMonitorStateException.class, c::awaitUninterruptibly);
        assertThrows(IllegalMonitorStateException.class, () -> c.awaitNanos(1_000_000));
        assertThrows(IllegalMonitorStateException.class, () -> c.await(1, TimeUnit.MILLISECONDS));
        assertThrows(IllegalMonitorStateException.class, c::signal);
        assertThrows(IllegalMonitorStateException.class, c::signalAll);
        lock.lock();
        new Side(() -> {
            assertThrows(IllegalMonitorStateException.class, c::signal);
            assertThrows(IllegalMonitorStateException.class, c::await);
        }).join();
        lock.unlock();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void onlyOneThreadHoldsItAtATime(Subject s) throws Throwable {
        Lock lock = s.make.get();
        int[] counter = {0};
        AtomicInteger inside = new AtomicInteger();
        AtomicBoolean overlapped = new AtomicBoolean();
        Side[] sides = new Side[4];
        for (int i = 0; i < sides.length; i++) {
            sides[i] = new Side(() -> {
                for (int j = 0; j < 20_000; j++) {
                    lock.lock();
                    try {
                        if (inside.incrementAndGet() != 1) {
                            overlapped.set(true);
                        }
                        counter[0]++;
                        inside.decrementAndGet();
                    } finally {
                        lock.unlock();
                    }
                }
            });
        }
        for (Side side : sides) {
            side.join();
        }
        assertFalse(overlapped.get());
        assertEquals(80_000, counter[0]);
    }

    @ParameterizedTest
    @MethodSource("locks")
    void tryLockFailsWhileAnotherThreadHoldsItAndSucceedsOnceFree(Subject s) throws Throwable {
        Lock lock = s.make.get();
        lock.lock();
        new Side(() -> {
            assertFalse(lock.tryLock());
            assertFalse(lock.tryLock(0, TimeUnit.NANOSECONDS));
        }).join();
        lock.unlock();
        new Side(() -> {
            assertTrue(lock.tryLock());
            lock.unlock();
        }).join();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void timedTryLockGivesUpAfterItsTimeout(Subject s) throws Throwable {
        Lock lock = s.make.get();
        lock.lock();
        new Side(() -> {
            long t0 = System.nanoTime();
            assertFalse(lock.tryLock(30, TimeUnit.MILLISECONDS));
            long waited = System.nanoTime() - t0;
            assertTrue(waited >= 30_000_000, "gave up after " + waited + " ns");
        }).join();
        lock.unlock();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void timedTryLockGetsALockReleasedBeforeItsTimeout(Subject s) throws Throwable {
        Lock lock = s.make.get();
        lock.lock();
        CountDownLatch trying = new CountDownLatch(1);
        Side side = new Side(() -> {
            trying.countDown();
            assertTrue(lock.tryLock(PATIENCE_MS, TimeUnit.MILLISECONDS));
            lock.unlock();
        });
        trying.await();
        awaitBlocked(side.thread);
        lock.unlock();
        side.join();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void lockInterruptiblyThrowsWhenInterruptedWhileWaitingAndClearsTheStatus(Subject s) throws Throwable {
        Lock lock = s.make.get();
        lock.lock();
        CountDownLatch trying = new CountDownLatch(1);
        Side side = new Side(() -> {
            trying.countDown();
            assertThrows(InterruptedException.class, lock::lockInterruptibly);
            assertFalse(Thread.currentThread().isInterrupted(), "interrupt status cleared");
            assertFalse(s.heldByMe.test(lock));
        });
        trying.await();
        awaitBlocked(side.thread);
        side.thread.interrupt();
        side.join();
        assertTrue(s.heldByMe.test(lock));
        lock.unlock();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void interruptibleLocksThrowWhenInterruptedOnEntryEvenIfFree(Subject s) throws Throwable {
        Lock lock = s.make.get();
        Thread.currentThread().interrupt();
        assertThrows(InterruptedException.class, lock::lockInterruptibly);
        assertFalse(Thread.interrupted());
        Thread.currentThread().interrupt();
        assertThrows(InterruptedException.class, () -> lock.tryLock(1, TimeUnit.SECONDS));
        assertFalse(Thread.interrupted());
        assertFalse(s.heldByMe.test(lock));
        lock.lockInterruptibly(); // not interrupted: takes it
        assertTrue(s.heldByMe.test(lock));
        lock.unlock();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void timedTryLockThrowsWhenInterruptedWhileWaiting(Subject s) throws Throwable {
        Lock lock = s.make.get();
        lock.lock();
        CountDownLatch trying = new CountDownLatch(1);
        Side side = new Side(() -> {
            trying.countDown();
            assertThrows(InterruptedException.class, () -> lock.tryLock(PATIENCE_MS * 10, TimeUnit.MILLISECONDS));
            assertFalse(Thread.currentThread().isInterrupted());
        });
        trying.await();
        awaitBlocked(side.thread);
        side.thread.interrupt();
        side.join();
        lock.unlock();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void lockIgnoresInterruptsAndKeepsTheStatus(Subject s) throws Throwable {
        Lock lock = s.make.get();
        lock.lock();
        CountDownLatch trying = new CountDownLatch(1);
        Side side = new Side(() -> {
            trying.countDown();
            lock.lock();
            assertTrue(Thread.currentThread().isInterrupted(), "interrupt status kept");
            lock.unlock();
        });
        trying.await();
        awaitBlocked(side.thread);
        side.thread.interrupt();
        Thread.sleep(30);
        assertTrue(side.thread.isAlive(), "lock() returned while the lock was held");
        lock.unlock();
        side.join();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void signalWakesAWaiterWhichReturnsHoldingTheLock(Subject s) throws Throwable {
        Lock lock = s.make.get();
        Condition c = lock.newCondition();
        boolean[] ready = {false};
        CountDownLatch waiting = new CountDownLatch(1);
        Side side = new Side(() -> {
            lock.lock();
            try {
                waiting.countDown();
                while (!ready[0]) {
                    c.await();
                    assertTrue(s.heldByMe.test(lock), "await returned without the lock");
                }
            } finally {
                lock.unlock();
            }
        });
        waiting.await();
        lock.lock(); // taken only once the waiter released it in await
        ready[0] = true;
        c.signal();
        lock.unlock();
        side.join();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void signalAllWakesEveryWaiter(Subject s) throws Throwable {
        Lock lock = s.make.get();
        Condition c = lock.newCondition();
        boolean[] ready = {false};
        int n = 3;
        CountDownLatch waiting = new CountDownLatch(n);
        Side[] sides = new Side[n];
        for (int i = 0; i < n; i++) {
            sides[i] = new Side(() -> {
                lock.lock();
                try {
                    waiting.countDown();
                    while (!ready[0]) {
                        c.awaitUninterruptibly();
                    }
                } finally {
                    lock.unlock();
                }
            });
        }
        waiting.await();
        lock.lock(); // every waiter has released it in its wait
        ready[0] = true;
        c.signalAll();
        lock.unlock();
        for (Side side : sides) {
            side.join();
        }
    }

    @ParameterizedTest
    @MethodSource("locks")
    void aSignalIsNotLostBetweenTwoWaitersUnderRepeatedHandOffs(Subject s) throws Throwable {
        // A bounded buffer of one slot: every put signals, every take waits for a put. A lost
        // signal leaves the taker waiting for ever (the test then times out in join).
        Lock lock = s.make.get();
        Condition changed = lock.newCondition();
        int[] slot = {0};
        int rounds = 2_000;
        Side taker = new Side(() -> {
            for (int i = 1; i <= rounds; i++) {
                lock.lock();
                try {
                    while (slot[0] == 0) {
                        changed.await();
                    }
                    assertEquals(i, slot[0]);
                    slot[0] = 0;
                    changed.signal();
                } finally {
                    lock.unlock();
                }
            }
        });
        for (int i = 1; i <= rounds; i++) {
            lock.lock();
            try {
                while (slot[0] != 0) {
                    changed.await();
                }
                slot[0] = i;
                changed.signal();
            } finally {
                lock.unlock();
            }
        }
        taker.join();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void awaitReleasesTheLockWhileWaiting(Subject s) throws Throwable {
        Lock lock = s.make.get();
        Condition c = lock.newCondition();
        CountDownLatch waiting = new CountDownLatch(1);
        AtomicBoolean done = new AtomicBoolean();
        Side side = new Side(() -> {
            lock.lock();
            try {
                waiting.countDown();
                while (!done.get()) {
                    c.await();
                }
            } finally {
                lock.unlock();
            }
        });
        waiting.await();
        assertTrue(lock.tryLock(PATIENCE_MS, TimeUnit.MILLISECONDS), "the waiter kept the lock in await");
        done.set(true);
        c.signal();
        lock.unlock();
        side.join();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void awaitThrowsWhenInterruptedHoldingTheLockAgainAndClearsTheStatus(Subject s) throws Throwable {
        Lock lock = s.make.get();
        Condition c = lock.newCondition();
        CountDownLatch waiting = new CountDownLatch(1);
        Side side = new Side(() -> {
            lock.lock();
            try {
                waiting.countDown();
                assertThrows(InterruptedException.class, () -> {
                    while (true) {
                        c.await();
                    }
                });
                assertTrue(s.heldByMe.test(lock), "await threw without taking the lock back");
                assertFalse(Thread.currentThread().isInterrupted(), "interrupt status cleared");
            } finally {
                lock.unlock();
            }
        });
        waiting.await();
        lock.lock(); // the waiter is in await
        side.thread.interrupt();
        lock.unlock();
        side.join();
    }

    @ParameterizedTest
    @MethodSource("locks")
    void timedAwaitsThrowWhenInterruptedOnEntry(Subject s) throws Throwable {
        Lock lock = s.make.get();
        Condition c = lock.newCondition();
        lock.lock();
        try {
            Thread.currentThread().interrupt();
            assertThrows(InterruptedException.class, c::await);
            Thread.currentThread().interrupt();
            assertThrows(InterruptedException.class, () -> c.awaitNanos(PATIENCE_MS * 1_000_000));
            Thread.currentThread().interrupt();
            assertThrows(InterruptedException.class, () -> c.await(PATIENCE_MS, TimeUnit.MILLISECONDS));
            Thread.currentThread().interrupt();
            assertThrows(InterruptedException.class, () -> c.awaitUntil(new Date(System.currentTimeMillis() + PATIENCE_MS)));
            assertFalse(Thread.interrupted());
            assertTrue(s.heldByMe.test(lock));
        } finally {
            lock.unlock();
        }
    }

    @ParameterizedTest
    @MethodSource("locks")
    void awaitUninterruptiblyWaitsThroughAnInterruptAndKeepsTheStatus(Subject s) throws Throwable {
        Lock lock = s.make.get();
        Condition c = lock.newCondition();
        AtomicBoolean ready = new AtomicBoolean();
        AtomicBoolean returnedEarly = new AtomicBoolean();
        CountDownLatch waiting = new CountDownLatch(1);
        Side side = new Side(() -> {
            lock.lock();
            try {
                waiting.countDown();
                while (!ready.get()) {
                    c.awaitUninterruptibly();
                }
                assertTrue(Thread.currentThread().isInterrupted(), "interrupt status kept");
                assertTrue(s.heldByMe.test(lock));
            } finally {
                lock.unlock();
            }
        });
        waiting.await();
        lock.lock();
        side.thread.interrupt();
        lock.unlock();
        Thread.sleep(50);
        returnedEarly.set(!side.thread.isAlive());
        lock.lock();
        ready.set(true);
        c.signal();
        lock.unlock();
        side.join();
        assertFalse(returnedEarly.get(), "the interrupt ended awaitUninterruptibly's loop");
    }

    @ParameterizedTest
    @MethodSource("locks")
    void timedAwaitsTimeOutHoldingTheLock(Subject s) throws Throwable {
        Lock lock = s.make.get();
        Condition c = lock.newCondition();
        lock.lock();
        try {
            long t0 = System.nanoTime();
            long left = c.awaitNanos(20_000_000);
            while (left > 0) { // spurious wake-ups are allowed: wait out the rest
                left = c.awaitNanos(left);
            }
            assertTrue(System.nanoTime() - t0 >= 20_000_000, "awaitNanos returned early");
            assertTrue(s.heldByMe.test(lock));

            t0 = System.nanoTime();
            boolean signalled = c.await(20, TimeUnit.MILLISECONDS);
            while (signalled) {
                signalled = c.await(20_000_000 - (System.nanoTime() - t0), TimeUnit.NANOSECONDS);
            }
            assertTrue(System.nanoTime() - t0 >= 20_000_000, "await(time) returned false early");
            assertTrue(s.heldByMe.test(lock));

            Date deadline = new Date(System.currentTimeMillis() + 20);
            while (c.awaitUntil(deadline)) {
                // spurious
            }
            assertTrue(System.currentTimeMillis() >= deadline.getTime(), "awaitUntil returned false early");
            assertTrue(s.heldByMe.test(lock));
            assertFalse(c.awaitUntil(new Date(System.currentTimeMillis() - 1000)), "a past deadline");
            assertTrue(c.awaitNanos(0) <= 0);
        } finally {
            lock.unlock();
        }
    }
}
