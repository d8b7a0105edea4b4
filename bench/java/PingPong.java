// Ping-pong between two JVMs (issue 18): dev.rtlab.ShmChannel against Aeron IPC (io.aeron,
// an embedded media driver, exclusive publications on aeron:ipc), the same message, the same
// wait strategy on both, in interleaved blocks. Run by bench/java.sh:
//
//   java ... -cp rtlab-java.jar:aeron-all.jar PingPong.java ping SRC SIZE BLOCKS BLOCK_MS
//
// The pinger starts the media driver and the ponger (the same java command, `pong`), pins its
// measuring thread to the first usable CPU and the ponger's to the second (threads stay
// SCHED_OTHER: the JVMs' compiler and GC threads share the two CPUs). Five links, every block
// visits each, its first one rotating; the receiving side of each:
//   shm-spin       ShmChannel.receive(buf, Duration.ZERO) in a loop, Thread.onSpinWait between
//   aeron-spin     Subscription.poll in a loop, BusySpinIdleStrategy between
//   shm-backoff    ShmChannel.receive(buf, Duration.ZERO) polled with Agrona's BackoffIdleStrategy
//   aeron-backoff  Subscription.poll with Agrona's BackoffIdleStrategy (Aeron's default)
//   shm-wait       ShmChannel.receive(buf, timeout): rtlab's own wait (a 20 us spin, a futex)
// Prints one line per block and link: LINK SIZE p50 NS p99 NS max NS n COUNT.
// -Dpingpong.links=shm-spin,aeron-spin visits only those links (bench/java-ab.sh).
import dev.rtlab.RtThread;
import dev.rtlab.ShmChannel;
import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.Subscription;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;
import io.aeron.logbuffer.FragmentHandler;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.agrona.concurrent.BackoffIdleStrategy;
import org.agrona.concurrent.BusySpinIdleStrategy;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.UnsafeBuffer;

public class PingPong {
    static final byte DATA = 0, SWITCH = 1, STOP = 2;
    static final String[] LINKS = {"shm-spin", "aeron-spin", "shm-backoff", "aeron-backoff", "shm-wait"};
    static final Duration FOREVER = Duration.ofSeconds(30);

    interface Link {
        void send(byte[] m, int len);

        int recv(byte[] buf);
    }

    static final class Shm implements Link {
        final ShmChannel tx, rx;
        final IdleStrategy idle; // null: rtlab's own wait

        Shm(ShmChannel tx, ShmChannel rx, IdleStrategy idle) {
            this.tx = tx;
            this.rx = rx;
            this.idle = idle;
        }

        public void send(byte[] m, int len) {
            if (!tx.send(m, 0, len, FOREVER)) throw new IllegalStateException("send timed out");
        }

        public int recv(byte[] buf) {
            if (idle == null) {
                int n = rx.receive(buf, FOREVER);
                if (n < 0) throw new IllegalStateException("receive timed out");
                return n;
            }
            idle.reset();
            for (;;) {
                int n = rx.receive(buf, Duration.ZERO);
                if (n >= 0) return n;
                idle.idle();
            }
        }
    }

    static final class AeronLink implements Link {
        final ExclusivePublication pub;
        final Subscription sub;
        final IdleStrategy idle;
        final UnsafeBuffer out = new UnsafeBuffer(ByteBuffer.allocateDirect(1 << 14));
        byte[] into;
        int got = -1;
        final FragmentHandler handler = (buffer, offset, length, header) -> {
            buffer.getBytes(offset, into, 0, length);
            got = length;
        };

        AeronLink(ExclusivePublication pub, Subscription sub, IdleStrategy idle) {
            this.pub = pub;
            this.sub = sub;
            this.idle = idle;
        }

        public void send(byte[] m, int len) {
            out.putBytes(0, m, 0, len);
            idle.reset();
            while (pub.offer(out, 0, len) < 0) idle.idle();
        }

        public int recv(byte[] buf) {
            into = buf;
            got = -1;
            idle.reset();
            while (sub.poll(handler, 1) == 0) idle.idle();
            return got;
        }
    }

    static IdleStrategy backoff() {
        return new BackoffIdleStrategy(); // Aeron's default: spins, yields, then parks up to 1 ms
    }

    static List<Link> links(Aeron aeron, String tag, boolean ping) {
        String out = ping ? "a2b" : "b2a", in = ping ? "b2a" : "a2b";
        List<Link> l = new ArrayList<>();
        // shm-spin, shm-backoff and shm-wait each have their own pair of channels.
        ShmChannel[][] shm = new ShmChannel[3][];
        for (int i = 0; i < 3; i++) {
            String o = tag + "-" + i + "-" + out, n = tag + "-" + i + "-" + in;
            shm[i] = ping
                    ? new ShmChannel[] {ShmChannel.create(o, 1 << 16), ShmChannel.create(n, 1 << 16)}
                    : new ShmChannel[] {ShmChannel.open(o), ShmChannel.open(n)};
        }
        int outStream = ping ? 1001 : 1002, inStream = ping ? 1002 : 1001;
        ExclusivePublication[] pubs = new ExclusivePublication[2];
        Subscription[] subs = new Subscription[2];
        for (int i = 0; i < 2; i++) {
            pubs[i] = aeron.addExclusivePublication("aeron:ipc", outStream + 10 * i);
            subs[i] = aeron.addSubscription("aeron:ipc", inStream + 10 * i);
        }
        l.add(new Shm(shm[0][0], shm[0][1], new BusySpinIdleStrategy()));
        l.add(new AeronLink(pubs[0], subs[0], new BusySpinIdleStrategy()));
        l.add(new Shm(shm[1][0], shm[1][1], backoff()));
        l.add(new AeronLink(pubs[1], subs[1], backoff()));
        l.add(new Shm(shm[2][0], shm[2][1], null));
        return l;
    }

    static void connected(Aeron aeron, List<Link> links) throws InterruptedException {
        for (Link k : links) {
            if (k instanceof AeronLink a) {
                while (!a.pub.isConnected() || !a.sub.isConnected()) Thread.sleep(1);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("pong")) {
            pong(args[1], args[2], Integer.parseInt(args[3]));
        } else if (args.length == 5 && args[0].equals("ping")) {
            ping(args[1], Integer.parseInt(args[2]), Integer.parseInt(args[3]), Integer.parseInt(args[4]));
        } else {
            System.err.println("usage: PingPong ping SRC SIZE BLOCKS BLOCK_MS");
            System.exit(2);
        }
    }

    static void pong(String dir, String tag, int size) throws Exception {
        RtThread.setAffinity(1);
        try (Aeron aeron = Aeron.connect(new Aeron.Context().aeronDirectoryName(dir))) {
            List<Link> links = links(aeron, tag, false);
            connected(aeron, links);
            byte[] buf = new byte[1 << 14];
            int at = 0;
            links.get(at).send(new byte[] {DATA}, 1); // ready
            for (;;) {
                Link k = links.get(at);
                int n = k.recv(buf);
                if (buf[0] == STOP) return;
                k.send(buf, n);
                if (buf[0] == SWITCH) at = buf[1];
            }
        }
    }

    static void ping(String src, int size, int blocks, int blockMs) throws Exception {
        String tag = "rtlab-pp-" + ProcessHandle.current().pid();
        String dir = "/dev/shm/aeron-" + tag;
        MediaDriver.Context dctx = new MediaDriver.Context()
                .aeronDirectoryName(dir)
                .threadingMode(ThreadingMode.SHARED)
                .dirDeleteOnStart(true)
                .dirDeleteOnShutdown(true);
        try (MediaDriver driver = MediaDriver.launch(dctx);
                Aeron aeron = Aeron.connect(new Aeron.Context().aeronDirectoryName(dir))) {
            List<Link> links = links(aeron, tag, true);
            List<String> cmd = new ArrayList<>();
            cmd.add(ProcessHandle.current().info().command().orElse("java"));
            cmd.addAll(java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments());
            cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), src, "pong", dir, tag, "" + size));
            Process kid = new ProcessBuilder(cmd).inheritIO().start();
            try {
                RtThread.setAffinity(0);
                connected(aeron, links);
                byte[] buf = new byte[1 << 14], msg = new byte[Math.max(size, 2)];
                int[] at = {0};
                links.get(0).recv(buf); // the ponger is ready
                long[] rtts = new long[1 << 24];
                int[] visit = visited();
                for (int to : visit) block(links, at, to, 300, msg, buf, rtts, false);
                for (int b = 0; b < blocks; b++) {
                    for (int k = 0; k < visit.length; k++) {
                        block(links, at, visit[(b + k) % visit.length], blockMs, msg, buf, rtts, true);
                    }
                }
                msg[0] = STOP;
                links.get(at[0]).send(msg, msg.length);
                kid.waitFor();
            } finally {
                kid.destroyForcibly();
                // The channels this process created are never closed (the links hold them to
                // the end): remove their names, or every run leaves six in /dev/shm.
                try (var names = java.nio.file.Files.list(java.nio.file.Path.of("/dev/shm"))) {
                    for (var p : names.filter(p -> p.getFileName().toString().startsWith(tag + "-")).toList()) {
                        java.nio.file.Files.deleteIfExists(p);
                    }
                }
            }
        }
    }

    /** The links a run visits: all, or those -Dpingpong.links names. */
    static int[] visited() {
        String only = System.getProperty("pingpong.links");
        if (only == null) return java.util.stream.IntStream.range(0, LINKS.length).toArray();
        return Arrays.stream(only.split(",")).mapToInt(name -> {
            int i = Arrays.asList(LINKS).indexOf(name);
            if (i < 0) throw new IllegalArgumentException("unknown link " + name + ": one of " + String.join(", ", LINKS));
            return i;
        }).toArray();
    }

    static void block(List<Link> links, int[] at, int to, int ms, byte[] msg, byte[] buf, long[] rtts, boolean print) {
        if (to != at[0]) {
            msg[0] = SWITCH;
            msg[1] = (byte) to;
            links.get(at[0]).send(msg, msg.length);
            links.get(at[0]).recv(buf);
            at[0] = to;
        }
        msg[0] = DATA;
        Link k = links.get(to);
        int n = 0;
        long end = System.nanoTime() + ms * 1_000_000L;
        for (;;) {
            long t0 = System.nanoTime();
            k.send(msg, msg.length);
            int got = k.recv(buf);
            long t1 = System.nanoTime();
            if (got != msg.length) throw new IllegalStateException("echo of " + got + " bytes, sent " + msg.length);
            if (n < rtts.length) rtts[n++] = t1 - t0;
            if (t1 >= end) break;
        }
        if (!print) return;
        Arrays.sort(rtts, 0, n);
        System.out.printf("%s %d p50 %d p99 %d max %d n %d%n", LINKS[to], msg.length,
                rtts[(int) ((n - 1) * 0.5)], rtts[(int) ((n - 1) * 0.99)], rtts[n - 1], n);
    }
}
