//! The long help texts, one per command (clap's `after_help`).

pub(super) const ABOUT: &str = "Measure, explain and fix worst-case latency on stock Linux.";

pub(super) const AFTER_HELP: &str = "\
Examples:
  rtlab survey                                  check this machine end to end (about 3 minutes)
  rtlab wakeup --duration 30s                   timed-wakeup latency on every CPU
  rtlab wakeup --cpus 1 --load cpu --load mmap  ... on CPU 1 under CPU and mmap load
  rtlab load cpu:2 hog:99:3ms/200ms:0 --duration 1m   run a disturbance load alone

Exit status: 0 success, 1 the run failed, 2 bad usage or input, 3 a gate was hit
(--fail-above, --fail-on, --fail-area, --fail-worse).

Most measurements need root (SCHED_FIFO, mlockall, /dev/cpu_dma_latency); without it rtlab
measures in the best mode it can and says so in a warning.";

pub(super) const WATCH_HELP: &str = "\
Measures, from kernel events only (no change to the program, any language), three delays of
each watched thread:
  wakeup  from becoming runnable (its wakeup, or being preempted) to running again in its
          own code: for a wait in clock_nanosleep, nanosleep, futex, epoll, poll or select,
          where that call returned to user space, as the program sees it; else where it got
          a CPU, what runqlat and perf sched timehist measure (metric wakeup_latency);
  timer   from its deadline to its return to user space: what a periodic loop loses each
          period, timer slack included, every period counted (metric timer_latency; needs
          the eBPF source). Each deadline is named by its source (the final table's
          deadline column, --samples): sleep (the clock_nanosleep/nanosleep request),
          futex-timeout, poll-timeout, sigwait-timeout (the wait's own timeout), timerfd,
          posix-timer, itimer (a timer that wakes the thread through a file or a signal),
          java-park, java-sleep (from the thread's own clock read), java-period (a period
          a Java thread ran at once after a late one); --until-running ends both at the
          switch-in instead;
  lock    blocked waiting for a priority-inheritance mutex (pthread PTHREAD_PRIO_INHERIT,
          FUTEX_LOCK_PI), explained by what kept the holder from releasing it (metric
          lock_wait; eBPF source: function probes on futex_lock_pi where the kernel allows
          them, else only with --locks, on every system call). Plain futex waits (default
          mutexes, condition variables, Java monitors) are not lock waits to the kernel and
          are not counted.
What: --pid's process or a command's (after --, started once tracing is ready), with the
processes it starts, each from its first instruction (--no-children: the process alone);
--cgroup: every process of a container or pod; --all: every process of the machine (with
--rt-only: its real-time threads, new ones included). Threads created later are picked up
(re-read every 10 ms for 3 s, then every second).
Series: <name>/<tid>/<kind> per real-time thread (<name>:ts/<tid>/<kind> while it is
time-sharing: each delay counts to the class its thread had then); <name>/<kind> summed over
the real-time threads of one name (a pool reads as one), <name>:ts/<kind> over its
time-sharing ones; real-time first in the tables. JSON series carry the process name and cgroup; /metrics labels are bounded
(process, cgroup, thread name, class, kind; never a thread id).
Losses are never silent: the watched threads' events have rings of their own, other tasks'
storms cannot take them; whatever is lost is counted (an 'events lost:' line, 'unmeasured'
per series, /metrics by CPU), and --fail-on-loss exits 3 when the watched threads lost any.
Explained, as in --explain (preempting tasks with pid and priority, IRQs and softirqs by name,
idle exit, hypervisor gaps, wake-up IPIs, the thread's own timer slack): the --top longest
delays of each interval and kind, only those over --threshold when given. The result keeps
the worst of each of the last 30 intervals and of the run, and counts every explained one by
cause (verdict.outlier_summary). rtlab's own threads (its reader, writers, metrics server,
watchdog) are the observer, never a cause: one 'observer' cause where they ran, and their
whole time on the watched CPUs in the series watch/observer.
A JVM (a process mapping a libjvm.so with HotSpot's USDT probes) is watched through them too,
with no agent or flag: its safepoints are series jvm:<operation>/safepoint, a Java thread's
park or sleep is late from the time it asked for to where its Java code goes on (after a
safepoint, too), and outliers overlapping one are named by it (JVM safepoint: <VM
operation>, the time to reach it and at it). Its clock (System.nanoTime) is probed in each
watched JVM process, so a park counts from the thread's read before it to its read after
it, as the thread times itself: each read then traps (about a microsecond), and a process
reading it over --java-clock-limit times a second (default 20000) has that probe removed;
--no-java-clock leaves it alone (parks are then timed at HotSpot's park probes, a few
microseconds inside the thread's own figures).
--stacks adds kernel stacks to each explained delay (eBPF only): the late thread's as it left
its CPU, the waker's at the wakeup (for a sleep timer, the code its interrupt stopped) and
the culprit's (the main cause's task) as it gave the CPU back.

It runs until --duration, Ctrl-C or SIGTERM, or until the watched process exits, then writes
the complete result (--json; with --json - the JSON is rtlab's stdout and the command's
own stdout goes to stderr, so `rtlab watch --json - -- ./app | jq` reads only the JSON).
Every --interval-log it shows the interval on stderr (a table
redrawn in place on a terminal, one line otherwise) and, with --hlog, appends each series'
interval histogram to an HdrHistogram interval log (tagged with the series name).
--metrics ADDR:PORT serves the figures to Prometheus at /metrics (no authentication: bind it
to localhost or a management network).

Needs root (eBPF, or tracefs as the fallback). The eBPF source traces only the CPUs the
watched threads may run on (their affinity, followed as it changes; the wakeups of those
threads are recorded wherever their waker runs), so the rest of the machine pays nothing;
a waker's or lock holder's own delay on another CPU is then not followed: --all-cpus traces
every CPU. The tracefs source traces every CPU.

Examples:
  rtlab watch --pid $(pgrep -f MyApp) --thread 'rt-*' --duration 10m --json app.json
  rtlab watch --pid 4242 --rt-only --threshold 200us --hlog app.hlog
  rtlab watch --pid 4242 --metrics 127.0.0.1:9464
  rtlab watch --json loop.json -- ./control-loop --period 1ms
  rtlab watch --json app.json -- sh -c './start-app.sh'
  rtlab watch --cgroup system.slice/app.service --duration 1h --metrics 127.0.0.1:9464
  rtlab watch --all --rt-only --duration 10m --fail-on-loss
  rtlab watch --pid 4242 --threshold 500us --stacks --duration 1m
";

pub(super) const WAKEUP_HELP: &str = "\
Series: thread0, thread1, ... (metric wakeup_latency), one per measuring thread, with cpu,
interval_ns, phase_ns, policy, prio, mlock and timer_slack_ns in their config.

The method is cyclictest's: each thread sleeps with clock_nanosleep(TIMER_ABSTIME) on
CLOCK_MONOTONIC until next = previous deadline + interval and records wake time - deadline.
A wakeup so late that later deadlines already passed counts those periods in 'missed' and
records them too (coordinated-omission correction), so overruns are never hidden.
Thread i of n wakes i x interval / n after thread 0, so CPUs do not leave idle in lockstep;
--aligned makes them wake together (a harsher, different test, like cyclictest -A).

--explain (root) traces the measured CPUs while measuring (eBPF; a private tracefs instance
where eBPF cannot start, or with --explain-with tracefs) and names the cause of each outlier
(the --top worst, or all over --threshold): IRQs and vectors by name, softirqs, preempting tasks (name, pid, priority), the CPU idling
past the deadline (idle_exit; hypervisor_gap on a VM), silent gaps in the trace
(hypervisor_gap), and what is left (unexplained). They go to the result's outliers array and
one line each after the table. Without a tracer it says so and reports /proc counters instead.

Examples:
  rtlab wakeup --duration 10s --json out.json
  rtlab wakeup --cpus 0 --interval 200us --prio 99 --load cpu --fail-above 500us
  rtlab wakeup --threads 4 --policy other        unpinned SCHED_OTHER threads
  rtlab wakeup --cpus 0 --explain --threshold 1ms --load hog:99:3ms/200ms:0 --duration 10s
  rtlab wakeup --cpus 1 --duration forever --hlog node.hlog --json node.json 2>node.log
      runs until Ctrl-C/SIGTERM: an interval log every 10 s, a status line every minute";

pub(super) const NOISE_HELP: &str = "\
Series: cpu0, cpu1, ... (metric loop_gap), one per measured CPU, with cpu, policy, prio,
threshold_ns, interruptions (gaps over --threshold), lost_ns (their sum), spun_ns and
available_pct (the share of the run the spinner had) in their config.

The method is oslat's: a thread per CPU, pinned, never sleeps; it reads CLOCK_MONOTONIC in a
tight loop and records the gap between consecutive reads, every iteration. A busy-spinning
thread (Aeron, the Disruptor, a Java spin-wait) has no wakeup latency: what delays it is the
CPU being taken away while it spins, and that is each gap over a few tens of ns. The default
is SCHED_FIFO 1 (above every time-sharing task, below kernel and load threads: oslat -f 1);
--policy other measures a time-sharing spinner.

--explain (root) traces the measured CPUs and names, for each interruption over --threshold
(the --top longest kept), what held the CPU: IRQs and vectors by name, softirqs, the task that
preempted the spinner (name, pid, priority), or a silence with the spinner current that the
kernel did not see (hypervisor_gap on a VM).

Examples:
  rtlab noise                                   every CPU but the lowest, 10 s, FIFO 1
  rtlab noise --cpus 1 --threshold 2ms --explain --load hog:99:3ms/200ms:1
  rtlab noise --cpus 2-7 --duration 10m --policy other --json noise.json
  rtlab noise --cpus 1 --fail-above 50us        exit 3 if any gap on CPU 1 exceeds 50 us";

pub(super) const LOCK_HELP: &str = "\
Series: <impl>/uncontended (metric lock_unlock: ns per lock+unlock pair, one thread) and
<impl>/handoff (metric handoff: ns per hand-off, two threads passing a ring of three
mutexes, the method of a 2007 study of glibc's then new PI and robust mutexes), for impl in
rtlab-pi, rtlab-robust, rtlab-ceiling, glibc-normal, glibc-pi, glibc-pp, glibc-robust,
glibc-robust-pi, std, parking_lot and sysv-sem (a System V semaphore used as a lock: semop
-1/+1 with SEM_UNDO). Each value is the median of many batches, interleaved across
implementations. <impl>/condvar_wake (metric
condvar_wake, a distribution) for rtlab-pi (PiCondvar), glibc-normal (pthread_cond_t), std
and parking_lot: from the notifier's time stamp (predicate set under the mutex, then unlock
and notify) to the waiter running again. glibc-pp (PTHREAD_PRIO_PROTECT) and rtlab-ceiling
(ceilings = --prio + 1) need real-time privilege and are skipped with a warning without it;
glibc-pp also refuses SCHED_OTHER callers (--policy other). std and parking_lot
spin briefly before sleeping: with the two threads on different CPUs their hand-off is a
cache-line transfer rather than a wake-up; --cpus 0 compares real wake-ups.
Default scheduling: SCHED_FIFO 10. The uncontended thread and hand-off thread B run on the
first of --cpus, thread C on the second (the same CPU if only one is given).

--processes is that study's own method: every lock is made process-shared (glibc's with
PTHREAD_PROCESS_SHARED, rtlab's on non-private futexes) in a MAP_SHARED mapping, the fast
path runs in this process, and the hand-off ring runs between a thread here and a child
process forked for each batch (on the second CPU). rtlab-ceiling, std and parking_lot cannot
be shared between processes and are skipped; there are no condvar series. The series keep
their names, with processes = 2 in the hand-off's config.

Examples:
  rtlab lock --duration 6s --json lock.json
  rtlab lock --processes --impl rtlab-robust,sysv-sem,glibc-robust
      robust mutexes against a System V semaphore, between processes
  rtlab lock --impl rtlab-pi,glibc-pi --cpus 0        both hand-off threads on CPU 0";

pub(super) const INVERT_HELP: &str = "\
The priority-inversion test of a 2007 study of glibc's then new mutexes (805 ms worst wait
without priority inheritance, 23 ms with it, on an embedded board). On one CPU (default: the
last usable one): a low-priority thread (--prio - 2) takes the lock and works --hold inside it;
--hogs medium-priority threads (--prio - 1) spin --hog-run of every --hog-period; a
high-priority thread (--prio) asks for the lock every --period; its wait is measured from
the scheduled request time (so a delay before it even runs counts too).
Variants run in interleaved slices; every thread stops with its slice, so a run without a
protocol cannot hang the machine.

Series: none/glibc, none/rtlab, inherit/rtlab, inherit/glibc, protect/rtlab, protect/glibc
(metric lock_wait, with bound_ns, bounded and exceeded_by_ns in config) and
high/wakeup_latency. A wait is bounded when max <= hold + the high thread's wakeup p99.

--check is the correctness mode (like pi_stress): inversion groups on rtlab's PiMutex for
--duration; exit 1 if a high thread ever waited over 1 s. Series check/lock_wait,
check/groups, check/stalls. Needs SCHED_FIFO (root).

Examples:
  rtlab invert --duration 10s --json invert.json
  rtlab invert --variant none/rtlab,inherit/rtlab --hold 2ms --hog-run 40ms
  rtlab invert --check --duration 30s";

pub(super) const MMAP_HELP: &str = "\
In 2008, porting real-time Java (Sun's Java RTS) to Linux, a non-real-time thread mapping
100 MB delayed a real-time thread's futex wait by up to 1 s when the futex was not private
(worse with mlock). A SCHED_FIFO thread
(--prio, default 95, on the first of --cpus, default the last CPU) wakes every --interval at
an absolute deadline through a timed wait that always times out, while a SCHED_OTHER thread
maps, touches and unmaps --size in a loop.

Series: <waiter>/<disturbance> (metric wakeup_latency) for waiter private (FUTEX_WAIT_BITSET
with FUTEX_PRIVATE_FLAG), shared (without it, word in MAP_SHARED memory), glibc-private and
glibc-shared (pthread_cond_timedwait on CLOCK_MONOTONIC, process-private or
PTHREAD_PROCESS_SHARED) and disturbance idle, mmap, mlock (each mapping also mlocked).
mlockall is off by default here (--mlock turns it on): MCL_FUTURE would lock every mapping
of the load and erase the difference between mmap and mlock.

Examples:
  rtlab mmap --duration 8s --json mmap.json
  rtlab mmap --size 1GiB --waiter private,shared";

pub(super) const SLACK_HELP: &str = "\
Java's LockSupport.parkNanos(10 us) sleeps ~60 us because the kernel may delay a
SCHED_OTHER thread's wakeup by its timer slack (50 us by default) to batch timers. Slack is
per thread, inherited by new threads and child processes, and ignored for SCHED_FIFO/RR.
It lives in /proc/<tid>/timerslack_ns; changing another process's needs CAP_SYS_NICE.
Without a command rtlab slack runs the sweep: every mechanism x --sleeps x --slacks
(SCHED_OTHER) plus a SCHED_FIFO row, the table showing each one's p50 oversleep, the 50 us
step included; get and set read and change a running process's threads.

Sweep series: <mechanism>/<requested>/<slack> (metric oversleep = actual - requested sleep),
e.g. futex/10us/50us, and fifo/futex/<requested>/<slack>. Mechanisms: clock_nanosleep_rel,
clock_nanosleep_abs, nanosleep, futex (a timed park, what parkNanos does), cond_timedwait,
timerfd_epoll. Default --duration 20s, on the last CPU (or the first of --cpus).

Java: HotSpot gives every thread a native name, cut to 15 characters: its own threads
(VM Thread, GC Thread#0, C2 CompilerThre...) and Java threads after Thread.getName()
(Finalizer, Common-Cleaner, your own names); the main thread shows as 'java'. So
--thread NAME works on a JVM, e.g. `rtlab slack set --pid $(pgrep -f MyApp) --thread
worker- 1us`. By hand, `jstack PID` prints nid=0x1a2b per thread: its tid in hex (6699).
Threads a JVM creates later inherit the slack of the thread that creates them; start it with
`rtlab exec --slack 1us -- java ...` to cover every thread from the beginning.

Examples:
  rtlab slack                               the sweep (20 s)
  rtlab slack --mechanism futex --sleeps 10us --slacks 1ns,50us --duration 5s
  rtlab slack get --pid PID                 every thread: tid, name, slack
  rtlab slack set --pid PID --all 1us       every thread of PID
  rtlab slack set --pid PID --tid TID 1us   one thread
  rtlab slack set --pid PID --thread NAME 1us   threads whose name matches (prefix)";

pub(super) const EXEC_HELP: &str = "\
rtlab exec sets the requested attributes on itself and then replaces itself with CMD
(like chrt and taskset), so CMD's exit status and signals are its own.

Inherited by CMD and by every thread and child it creates:
  --slack DUR            timer slack (ignored while a thread runs SCHED_FIFO/RR)
  --policy P --prio N    scheduling policy and priority (threads created with the default
                         PTHREAD_INHERIT_SCHED, as the JVM's are)
  --cpus LIST            CPU affinity
Not inherited:
  memory locks: execve removes them. --mlock raises RLIMIT_MEMLOCK to unlimited so CMD may
  lock its own memory (mlockall), and says so.

Examples:
  rtlab exec --slack 1us -- java -cp examples/java ParkNanos
  rtlab exec --policy fifo --prio 80 --cpus 1 -- ./my-control-loop";

pub(super) const IPC_HELP: &str = "\
A 2007 study of glibc's then new mutexes asked whether a message queue on a robust mutex in
shared memory could reach POSIX mq.
Two processes (this one and a forked child, on two CPUs, or one with --same-cpu) exchange
messages of each --size through each mechanism:
  rtlab-shm                  rtlab-ipc's ShmChannel: a lock-free ring that sleeps on a futex
                             only when empty or full (no syscall per message when busy)
  rtlab-shm-mpsc             the same ring in its several-producer form (robust PI mutex on
                             the producer side)
  rtlab-shm-mutex-condvar    that study's first design: slots, a robust PI mutex, PI condvars
  rtlab-shm-mutex-semaphore  that study's final design: slots, a robust PI mutex, 2 semaphores
  posix-mq, sysv-msg, pipe, unix-stream, unix-dgram
  eventfd-shm                a shared slot per direction signalled by eventfds
  rtlab-shm-busy             (--busy-poll only) the ring with both ends spinning: lowest
                             latency, but each end burns a CPU
Sizes above a kernel limit (fs.mqueue.msgsize_max and kernel.msgmax are 8192 by default) are
reported as skipped with the sysctl that raises the limit.

Series: <mechanism>/rtt (metric rtt: ping-pong round trip with blocking waits, a
distribution), <mechanism>/oneway (metric oneway: send-to-receive latency on the shared
CLOCK_MONOTONIC of messages sent 200 us apart, so the receiver sleeps between them) and
<mechanism>/throughput (messages per second one way, ops/s). With several sizes the size is
appended: rtlab-shm/rtt/1KiB. Default scheduling SCHED_FIFO 50.

Examples:
  rtlab ipc --duration 10s --size 64 --json ipc.json
  rtlab ipc --size 64,1KiB,16KiB,64KiB --mechanism rtlab-shm,posix-mq,pipe
  rtlab ipc --busy-poll --mechanism rtlab-shm --same-cpu";

pub(super) const NET_HELP: &str = "\
Two 2009 studies of real-time Java on Solaris (a proof of concept on two servers, and one of
bounded-time TCP) in one command: periodic real-time threads exchange messages over TCP, each
message acknowledged by the peer, and the worst round trip is the figure of merit.

  rtlab net run       periodic streams (--stream SIZE@PERIOD, repeatable), each with its own
                      sender thread on an absolute schedule and its own connection; the peer
                      acknowledges each message as soon as its useful bytes arrived
  rtlab net pingpong  one message in flight, echoed whole (comparable with sockperf
                      ping-pong --full-rtt)
  rtlab net serve     the peer, for a second host (run and pingpong start their own peer
                      with --topology loopback, the default, or netns)

Examples:
  rtlab net pingpong --proto tcp --size 64 --duration 5s --json pp.json
  rtlab net run --stream 1KiB@10ms --stream 100B@10ms --duration 30s
  rtlab net run --profile rt-java-poc --load cpu --background-traffic
  rtlab net run --topology netns --loss 1 --stream 100B@10ms --pad-segments 3 --duration 60s
  rtlab net serve --listen 0.0.0.0:7471             (on host B)
  rtlab net run --peer hostB:7471 --stream 120KiB@50ms   (on host A)";

pub(super) const NET_RUN_HELP: &str = "\
Series: <SIZE>@<PERIOD>/rtt per stream, named as written (metric rtt: from the scheduled send
time to the acknowledgement, so a stall shows in every message it delayed), and
<SIZE>@<PERIOD>/send_lateness (actual send start minus scheduled time); reverse/<SIZE>@<PERIOD>/...
for streams the peer sends (--reverse-stream, TCP only; measured on the peer, reported back);
all/rtt over every stream. Counters (sent, acked, lost, duplicates, reordered, deadline_misses,
warmup_trimmed, retransmits from TCP_INFO, pad_bytes), the socket options, the topology and
the TCP loss-recovery sysctls are in each series' config.

A message's size includes rtlab's 40-byte header (smaller sizes are sent as 40 bytes).
--pad-segments N (the bounded-time TCP study's trick): each message is followed by padding up
to N full segments, so a lost segment is followed by enough others for fast retransmit (or
RACK) to fire instead of the retransmission timer; the peer acknowledges as soon as the useful
bytes are in and discards the padding. --profile rt-java-poc is the proof of concept's mix:
120KiB, 50KiB (its 'under 45 ms for 50KB' result), 1KiB, 100B and 200B every 50ms this way,
300B and 350B every 50ms the other way. Messages of the first --warmup (default min(1s,
duration/5)) are sent but not recorded; the output says how many.

--topology netns creates a namespace rtlab-<pid> and a veth pair (--mtu, static neighbour
entries; --loss PCT drops that share of packets both ways with nftables inside the
namespace), runs the peer in it, and removes it all at the end, on Ctrl-C and on error; if
rtlab is killed, the peer removes it (it gets SIGTERM when its parent dies).

--explain (root) traces the CPUs of the stream threads and names the causes of the worst
send_lateness samples (a sender thread woken late), as rtlab wakeup --explain does; pin the
streams with --cpus to keep a CPU free for the trace reader.

Examples:
  rtlab net run --stream 1KiB@10ms --duration 10s --json run.json
  rtlab net run --profile rt-java-poc --load cpu:2 --background-traffic
  rtlab net run --topology netns --mtu 9000 --stream 120KiB@50ms --sndbuf 2MiB --rcvbuf 2MiB
  rtlab net run --topology netns --loss 1 --stream 100B@10ms --pad-segments 3 --duration 60s";

pub(super) const NET_PINGPONG_HELP: &str = "\
Series: pingpong/rtt (metric rtt): one message of --size bytes in flight, echoed whole by the
peer, timed from the send to the last byte of the echo; over UDP a reply missing for 200 ms
counts as lost (config: lost). The first tenth of the run (at most 500 ms) is warm-up.
With --explain the slowest round trips are attributed on the measured CPUs (--cpus): what ran
there while the thread waited for the echo (the peer, when it shares the CPU).

Examples:
  rtlab net pingpong --proto tcp --size 64 --duration 5s --json pp.json
  rtlab net pingpong --proto udp --size 1KiB --busy-poll 50
  sudo rtlab net pingpong --cpus 0 --load hog:99:2ms/100ms:0 --explain --top 5";

pub(super) const REPORT_HELP: &str = "\
Writes DIR/report.html: one file, no scripts, no network, readable on a laptop and printable.
Per document: the machine, the survey's verdict and tuning actions, the check table, and per
area the percentile curves (HdrHistogram style, idle and loaded on one chart), log-scale
histograms, explained outliers over time (causes on hover), bars for single values (lock,
ipc throughput) and the slack sweep, with the numbers behind each chart. `rtlab survey`
writes the same file next to its report.json.

Examples:
  rtlab report rtlab-report/report.json -o rtlab-report
  rtlab report idle.json loaded.json net.json -o /tmp/report";

pub(super) const CHECK_HELP: &str = "\
Checks (read-only: nothing is changed): preempt_model (and, on a PREEMPT_DYNAMIC kernel, its
run-time switch in debugfs), rt_throttling, fair_server (Linux 6.12+: the time each CPU lends
SCHED_OTHER work over real-time threads, from debugfs), cpu_isolation
(isolcpus/nohz_full/rcu_nocbs), irq_affinity (device IRQs allowed on the suggested RT CPU: the
last isolated one, else the last one), cpufreq_governor, c_states, transparent_hugepages, damon, swap, rlimits (MEMLOCK,
RTPRIO), cgroup (the container's cpuset against the isolated CPUs, its real-time budget, a
Kubernetes pod's QoS class, irqbalance's banned CPUs), net_stack (who processes received
packets), clocksource, virtualization (steal time since boot), timer_slack, numa, tracing.
Each has a status (ok, warn, fail, skipped), what was found, why it matters, and the exact
command that fixes it; the three that matter most are listed last. Where a file cannot be
read (debugfs refuses even root on some kernels and VMs) the item says so and what it
therefore cannot judge. Each item reads the machine's state, never a short sample, so runs on
an unchanged machine agree.

--json writes one value series per check (check/<id>: 0 ok, 1 warn, 2 fail, -1 skipped) with
status, value, why and fix in its config.

--fail-on warn|fail exits 3 (after printing and writing everything) when a check is at that
level or worse: a node-qualification gate for CI or a provisioning script.

Examples:
  rtlab check
  rtlab check --json check.json
  rtlab check --fail-on fail || echo 'this node is not fit for real-time work'";

pub(super) const DIFF_HELP: &str = "\
For every series present in both documents (same name and metric): p50, p99, p99.9 and max
of distributions, or the value of single-value series, with B/A. A percentile change is
marked * when the 95 % intervals of the two percentiles do not overlap (order statistics of
the stored histograms: no assumption about the distribution); the max has no interval.
'worse' means higher latency or lower throughput.

--fail-worse PCT exits 3 when a p50, p99, p99.9 or value got worse by more than PCT percent
(and, for percentiles, the change is significant): a CI gate for tuning regressions. The
max never fails the gate: one sample decides it.

--json writes a result document whose series are <series>/<stat> ratios (unit ratio).

Examples:
  rtlab diff before/report.json after/report.json
  rtlab diff base.json new.json --fail-worse 10 --json diff.json";

pub(super) const SURVEY_HELP: &str = "\
Stages: rtlab check, then wakeup idle, then wakeup under --load cpu --load mmap with
--explain (each --duration long: 60 s by default, about 3 minutes in all; 4 s with
--quick, about 30 s in all), then
short stages (at most 4 s each) of lock (rtlab's PI and robust mutexes against glibc's),
invert (priority inversion without a protocol vs with PI), mmap (does mmap still delay a
shared futex?), slack (what the default timer slack costs a 10 us wait), ipc (rtlab's
shared-memory channel vs POSIX mq and a pipe between two processes), net (periodic TCP
streams both ways over loopback, each message acknowledged) and noise (a FIFO 1 thread
spinning on the last CPU: the share of it kept, and what took the rest). Writes
DIR/report.json (all series, schema-valid) and one .hgrm file per distribution series. The verdict has one line per area.

Gates (exit 3 after the report is written; any number of them): --fail-above DUR on the
loaded wakeup stage's worst wakeup, --fail-area AREA=DUR on every latency of one area
(the first part of its series' names), --fail-on warn|fail on the checks. Each gate that
trips says so in one line on stderr.

Examples:
  rtlab survey
  rtlab survey --duration 30s --out /tmp/rtlab-report
  rtlab survey --quick --fail-above 500us --fail-area ipc=200us --fail-on fail   # a CI gate";

pub(super) const TUNE_HELP: &str = "\
Without --apply or --revert it prints the plan: each file it would write, its value now and
the new one, and the fixes it leaves to you (boot-time ones such as isolcpus and preempt=full,
irqbalance's configuration, the network stack's threads). --apply writes FILE first (every
prior value, atomically), then the new values, and prints what changed; --revert FILE writes
every prior value back, the last change first, checks each one reads back as it was, and
removes FILE (kept, exit 1, if any did not). Nothing is changed without root.

What it applies (each only where rtlab check would warn): on a PREEMPT_DYNAMIC kernel the
preemption model none or voluntary -> full through debugfs (until the next boot: preempt=full
on the kernel command line keeps it; preempt_model); kernel.sched_rt_runtime_us=-1
(rt_throttling); each RT CPU's fair server runtime to 0 through debugfs (Linux 6.12+: on those
kernels sched_rt_runtime_us=-1 alone leaves SCHED_OTHER work 50 ms of every second over RT
threads; fair_server); every device IRQ allowed on an RT CPU moved to the other CPUs
(irq_affinity); transparent hugepages always -> madvise; DAMON's kdamonds off; the RT CPUs'
cpufreq governor to performance and their idle states deeper than 10 us disabled; with --pid,
that process's threads' timer slack to 1 ns. Where debugfs cannot be read (some kernels and
VMs refuse even root) it says so and leaves those two to you. Without RT throttling and the
fair server a runaway real-time thread holds its CPU for good: run your RT programs with a
watchdog (rtlab's runs have one), or leave them out with --only.

--verify measures each fix before keeping it. FILE is written first as for --apply; then
timed wakeups (rtlab wakeup, SCHED_FIFO 95, on the real-time CPUs) run in --rounds rounds:
each round measures the machine as found and each fix alone, one --block each, in an order
that rotates from round to round (the host's drift hits every arm alike). A fix's effect is
its block's p99 and max over the same round's block without it: the median ratio and its
95 % interval over the rounds. It is kept when one of the two intervals lies wholly under 1
and neither wholly over 1 (helped); every other fix is reverted (hurt, unclear, or not
measurable, such as the timer slack of a process the blocks do not run), unless
--keep-all. One block at the start and one with the kept fixes are explained (rtlab wakeup
--top 10), and the causes of their outliers compared kind by kind. FILE ends holding the
kept changes only (removed when none was kept); exit 3 when no fix helped. --verify-with --
CMD measures your own program instead: each block runs it anew under rtlab watch and takes
the worst p99 and max of its threads;
with --pid PID and no --verify-with, each block watches that running process (rtlab watch
--pid PID), so the timer slack --pid changes is measured with the rest.
--load SPEC runs a load beside every block. Ctrl-C or SIGTERM stop the run and revert every
change; should the run die any other way (SIGKILL, a crash), a guard process it started
reverts FILE. Fixes are measured one at a time: one that helps only beside another shows as
unclear. A fix with no effect at all still comes out as helped by chance a few runs in a
hundred (the intervals are 95 % ones): more --rounds do not change that rate, they make a
real effect clearer.

Examples:
  rtlab tune                                         the plan, changing nothing
  sudo rtlab tune --apply --state /var/tmp/rtlab-tune.json --cpus 2-3
  sudo rtlab tune --apply --state t.json --only rt_throttling,irq_affinity
  sudo rtlab tune --revert /var/tmp/rtlab-tune.json
  rtlab tune --export tuned /etc/tuned/rtlab-rt --state /var/tmp/rtlab-tune.json
  rtlab tune --export systemd /etc/systemd/system --cpus 2-3
  rtlab tune --export cmdline --cpus 2-3                kernel parameters, alone on stdout
  sudo rtlab tune --apply --verify --state t.json --load cpu     keep what measurably helps
  sudo rtlab tune --apply --verify --state t.json --verify-with -- ./my-rt-app --config x
  sudo rtlab tune --apply --verify --state t.json --pid $(pgrep -o my-rt-app)
A before/after: rtlab survey --out before; rtlab tune --apply --state t.json; rtlab survey
--out after; rtlab diff before/report.json after/report.json; rtlab tune --revert t.json";

pub(super) const COMPLETIONS_HELP: &str = "\
Prints the script on stdout; install it where your shell looks for completions.

Examples:
  rtlab completions bash > /etc/bash_completion.d/rtlab
  rtlab completions zsh > \"${fpath[1]}/_rtlab\"
  rtlab completions fish > ~/.config/fish/completions/rtlab.fish";

pub(super) const MAN_HELP: &str = "\
Prints the page as troff on stdout: rtlab's own, or one command's (rtlab-wakeup,
rtlab-net-run ...), made from the same text as --help.

Examples:
  rtlab man | man -l -
  rtlab man wakeup | man -l -
  rtlab man --out-dir /usr/local/share/man/man1     # every page, as a package has them";

pub(super) const NET_SERVE_HELP: &str = "\
The peer obeys its owner, not its clients: a client asks for priorities, socket options,
buffer sizes and reverse streams, and gets them only within --max-prio, --max-buffer and
the idle timeout. It listens on loopback unless told otherwise.

Examples:
  rtlab net serve                                  # this host only, SCHED_OTHER
  rtlab net serve --listen 0.0.0.0:7471 --max-prio 80   # for a client on another host
  rtlab net run --peer 10.0.0.2:7471 --stream 1KiB@10ms --duration 60s  # on the client";
