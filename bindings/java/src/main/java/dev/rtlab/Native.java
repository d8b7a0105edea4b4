package dev.rtlab;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;

/** The downcalls into librtlab.so (include/rtlab.h), and its codes. */
final class Native {
    private Native() {}

    static final int EINVAL = 22;
    static final int EBUSY = 16;
    static final int EOWNERDEAD = 130;
    static final int ENOTRECOVERABLE = 131;
    static final int ETIMEDOUT = 110;
    static final int EPEERDIED = 32;
    static final int EDEADLK = 35;
    static final int EPERM = 1;
    static final int EMSGSIZE = 90;
    static final int ENOBUFS = 105;
    /** RTLAB_FOREVER (UINT64_MAX). */
    static final long FOREVER = -1L;

    private static final Linker LINKER = Linker.nativeLinker();
    private static final SymbolLookup LIB = load();

    /** Where the jar carries librtlab.so for this platform. */
    static final String BUNDLED = "/native/linux-x86_64/librtlab.so";

    /**
     * Where librtlab.so is: -Drtlab.library or $RTLAB_LIBRARY when set; else the copy inside
     * this jar (linux-x86_64); else java.library.path.
     */
    private static SymbolLookup load() {
        String path = System.getProperty("rtlab.library");
        if (path == null || path.isEmpty()) {
            path = System.getenv("RTLAB_LIBRARY");
        }
        if (path != null && !path.isEmpty()) {
            Path p = Path.of(path);
            if (!Files.isRegularFile(p)) {
                throw new UnsatisfiedLinkError("rtlab: no librtlab.so at " + p.toAbsolutePath()
                        + " (build it with `cargo build --release`: target/release/librtlab.so)");
            }
            return SymbolLookup.libraryLookup(p, Arena.global());
        }
        if (bundledFits()) {
            java.net.URL bundled = Native.class.getResource(BUNDLED);
            if (bundled != null) {
                return loadBundled(bundled);
            }
        }
        try {
            System.loadLibrary("rtlab");
        } catch (UnsatisfiedLinkError e) {
            throw new UnsatisfiedLinkError("rtlab: cannot find librtlab.so: this jar carries none for "
                    + System.getProperty("os.name") + "/" + System.getProperty("os.arch")
                    + "; build it with `cargo build --release` and pass -Drtlab.library=<repo>/target/release/librtlab.so "
                    + "(or set RTLAB_LIBRARY, or put its directory on java.library.path): "
                    + e.getMessage());
        }
        return SymbolLookup.loaderLookup();
    }

    private static boolean bundledFits() {
        String arch = System.getProperty("os.arch", "");
        return System.getProperty("os.name", "").equals("Linux")
                && (arch.equals("amd64") || arch.equals("x86_64"));
    }

    /**
     * Loads the jar's librtlab.so from a private copy: a new directory only this user may
     * enter (0700), the file created exclusively in it (O_EXCL: nothing planted there
     * beforehand is loaded), both deleted as soon as the library is mapped (the mapping
     * stays), and at exit should loading fail.
     */
    private static SymbolLookup loadBundled(java.net.URL bundled) {
        var owner = java.nio.file.attribute.PosixFilePermissions.asFileAttribute(
                java.nio.file.attribute.PosixFilePermissions.fromString("rwx------"));
        Path dir = null;
        Path file = null;
        try {
            dir = Files.createTempDirectory("rtlab-", owner);
            dir.toFile().deleteOnExit();
            file = Files.createFile(dir.resolve("librtlab.so"), owner);
            file.toFile().deleteOnExit();
            try (var in = bundled.openStream();
                    var out = Files.newOutputStream(file, java.nio.file.StandardOpenOption.WRITE)) {
                in.transferTo(out);
            }
            return SymbolLookup.libraryLookup(file, Arena.global());
        } catch (java.io.IOException e) {
            throw new UnsatisfiedLinkError("rtlab: cannot copy the jar's librtlab.so to a temporary file: " + e);
        } finally {
            try {
                if (file != null) {
                    Files.deleteIfExists(file);
                }
                if (dir != null) {
                    Files.deleteIfExists(dir);
                }
            } catch (java.io.IOException ignored) {
                // deleteOnExit stays registered
            }
        }
    }

    private static MethodHandle fn(String name, FunctionDescriptor d, Linker.Option... options) {
        MemorySegment symbol = LIB.find(name).orElseThrow(
                () -> new UnsatisfiedLinkError("rtlab: librtlab.so has no " + name + " (an older build?)"));
        return LINKER.downcallHandle(symbol, d, options);
    }

    private static final FunctionDescriptor INT_PTR = FunctionDescriptor.of(JAVA_INT, ADDRESS);
    private static final FunctionDescriptor INT_PTR_INT = FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT);
    private static final FunctionDescriptor INT_PTR_LONG = FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG);

    static final MethodHandle NOW_NS = fn("rtlab_now_ns", FunctionDescriptor.of(JAVA_LONG), Linker.Option.critical(false));
    static final MethodHandle GETTID = fn("rtlab_gettid", FunctionDescriptor.of(JAVA_LONG), Linker.Option.critical(false));
    static final MethodHandle STRERROR = fn("rtlab_strerror", FunctionDescriptor.of(ADDRESS, JAVA_INT));
    static final MethodHandle SET_FIFO = fn("rtlab_thread_set_fifo", FunctionDescriptor.of(JAVA_INT, JAVA_INT));
    static final MethodHandle SET_SCHEDULER = fn("rtlab_thread_set_scheduler", FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_INT));
    static final MethodHandle SET_AFFINITY = fn("rtlab_thread_set_affinity", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG));
    static final MethodHandle SET_SLACK = fn("rtlab_thread_set_timer_slack_ns", FunctionDescriptor.of(JAVA_INT, JAVA_LONG));
    static final MethodHandle MLOCKALL = fn("rtlab_mlockall", FunctionDescriptor.of(JAVA_INT));

    static final MethodHandle PI_INIT = fn("rtlab_pi_mutex_init", INT_PTR_INT);
    static final MethodHandle PI_LOCK = fn("rtlab_pi_mutex_lock", INT_PTR);
    static final MethodHandle PI_TRYLOCK = fn("rtlab_pi_mutex_trylock", INT_PTR);
    static final MethodHandle PI_LOCK_UNTIL = fn("rtlab_pi_mutex_lock_until", INT_PTR_LONG);
    static final MethodHandle PI_UNLOCK = fn("rtlab_pi_mutex_unlock", INT_PTR);

    static final MethodHandle ROBUST_INIT = fn("rtlab_robust_mutex_init", INT_PTR);
    static final MethodHandle ROBUST_LOCK = fn("rtlab_robust_mutex_lock", INT_PTR);
    static final MethodHandle ROBUST_CONSISTENT = fn("rtlab_robust_mutex_make_consistent", INT_PTR);
    static final MethodHandle ROBUST_UNLOCK = fn("rtlab_robust_mutex_unlock", INT_PTR);

    static final MethodHandle COND_INIT = fn("rtlab_pi_cond_init", INT_PTR_INT);
    static final MethodHandle COND_WAIT_UNTIL = fn("rtlab_pi_cond_wait_until",
            FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG));
    static final MethodHandle COND_SIGNAL = fn("rtlab_pi_cond_signal", INT_PTR);
    static final MethodHandle COND_BROADCAST = fn("rtlab_pi_cond_broadcast", INT_PTR);

    static final MethodHandle PARKER_INIT = fn("rtlab_parker_init", INT_PTR);
    static final MethodHandle PARK_UNTIL = fn("rtlab_parker_park_until", INT_PTR_LONG);
    static final MethodHandle UNPARK = fn("rtlab_parker_unpark", INT_PTR);

    static final MethodHandle CH_CREATE = fn("rtlab_channel_create",
            FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS));
    static final MethodHandle CH_OPEN = fn("rtlab_channel_open", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
    static final MethodHandle CH_MAX = fn("rtlab_channel_max_message", FunctionDescriptor.of(JAVA_LONG, ADDRESS));
    static final MethodHandle CH_SEND = fn("rtlab_channel_send",
            FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_LONG));
    static final MethodHandle CH_RECV = fn("rtlab_channel_recv",
            FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, JAVA_LONG));
    static final MethodHandle CH_CLOSE = fn("rtlab_channel_close", FunctionDescriptor.ofVoid(ADDRESS));
    static final MethodHandle CH_LAYOUT = fn("rtlab_channel_layout",
            FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS, JAVA_LONG));
    static final MethodHandle CH_WAKE = fn("rtlab_channel_wake", INT_PTR_INT);

    /** A native call, as {@link #invoke} runs it: {@code invokeExact} declares Throwable. */
    @FunctionalInterface
    interface IntCall {
        int call() throws Throwable;
    }

    /** As {@link IntCall}, for a function returning a long. */
    @FunctionalInterface
    interface LongCall {
        long call() throws Throwable;
    }

    /**
     * Runs a call of the native {@code function}. What it throws unchecked passes through (an
     * exception thrown by the caller's own code in {@code call}, a closed segment's
     * IllegalStateException, an Error); anything else, which {@code invokeExact} declares and a
     * call matching its descriptor never throws, becomes IllegalStateException naming it.
     */
    static int invoke(String function, IntCall call) {
        try {
            return call.call();
        } catch (Throwable t) {
            throw unexpected(function, t);
        }
    }

    /** {@link #invoke} for a function returning a long. */
    static long invokeLong(String function, LongCall call) {
        try {
            return call.call();
        } catch (Throwable t) {
            throw unexpected(function, t);
        }
    }

    static long nowNs() {
        return invokeLong("rtlab_now_ns", () -> (long) NOW_NS.invokeExact());
    }

    static long gettid() {
        return invokeLong("rtlab_gettid", () -> (long) GETTID.invokeExact());
    }

    /** Calls a function taking one object, returning its code. */
    static int call(MethodHandle h, MemorySegment object) {
        return invoke("an rtlab function", () -> (int) h.invokeExact(object));
    }

    static int call(MethodHandle h, MemorySegment object, long arg) {
        return invoke("an rtlab function", () -> (int) h.invokeExact(object, arg));
    }

    static int call(MethodHandle h, MemorySegment object, int arg) {
        return invoke("an rtlab function", () -> (int) h.invokeExact(object, arg));
    }

    /** The text of a code. */
    static String describe(int code) {
        try {
            MemorySegment text = (MemorySegment) STRERROR.invokeExact(code);
            return text.reinterpret(256).getString(0);
        } catch (Throwable t) {
            throw unexpected("rtlab_strerror", t);
        }
    }

    /** A failure `what` with `code`: the exception users see. */
    static RtlabException failure(String what, int code) {
        String message = what + ": " + describe(code) + " (code " + code + ")";
        return switch (code) {
            case EPEERDIED -> new PeerDiedException(message);
            case ENOTRECOVERABLE -> new NotRecoverableException(message);
            default -> new RtlabException(message, code);
        };
    }

    /**
     * {@link #check} for a lock operation: the caller's misuse (locking again what it holds,
     * unlocking or waiting without holding) is an IllegalMonitorStateException, as for Java's
     * own locks.
     */
    static void checkLock(String what, int code) {
        if (code == EDEADLK) {
            throw new IllegalMonitorStateException(what + ": this thread already holds it (not reentrant)");
        }
        if (code == EPERM) {
            throw new IllegalMonitorStateException(what + ": the calling thread does not hold the lock");
        }
        check(what, code);
    }

    static void check(String what, int code) {
        if (code != 0) {
            throw failure(what, code);
        }
    }

    /** A deadline in System.nanoTime() terms as CLOCK_MONOTONIC ns (FOREVER if it overflows). */
    static long monotonicDeadline(long deadlineNanos) {
        long left = deadlineNanos - System.nanoTime();
        if (left <= 0) {
            return nowNs();
        }
        long now = nowNs();
        return now + left < now ? FOREVER : now + left;
    }

    /** A timeout from now as CLOCK_MONOTONIC ns. */
    static long deadlineAfter(java.time.Duration timeout) {
        if (timeout.isNegative()) {
            throw new IllegalArgumentException("negative timeout " + timeout);
        }
        if (timeout.isZero()) {
            return 0; // passed already: poll, without reading the clock
        }
        long ns;
        try {
            ns = timeout.toNanos();
        } catch (ArithmeticException e) {
            return FOREVER;
        }
        long now = nowNs();
        return now + ns < now ? FOREVER : now + ns;
    }

    private static RuntimeException unexpected(String function, Throwable t) {
        if (t instanceof RuntimeException r) {
            return r;
        }
        if (t instanceof Error e) {
            throw e;
        }
        return new IllegalStateException("rtlab: " + function + " failed", t);
    }
}
