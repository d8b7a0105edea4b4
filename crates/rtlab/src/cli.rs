//! Raw command-line arguments (clap) and the value parsers that make bad input one clear line.

use clap::{Args, Parser, Subcommand};
use rtlab_load::{LoadSpec, LOAD_HELP};
use rtlab_stats::{parse_duration, Nanos};
use rtlab_sys::affinity::{usable_cpus, CpuList};
use rtlab_sys::sched::Policy;
use std::path::PathBuf;
use std::process::ExitCode;

const ABOUT: &str = "Measure, explain and fix worst-case latency on stock Linux.";

const AFTER_HELP: &str = "\
Examples:
  rtlab survey                                  check this machine end to end (about 30 s)
  rtlab wakeup --duration 30s                   timed-wakeup latency on every CPU
  rtlab wakeup --cpus 1 --load cpu --load mmap  ... on CPU 1 under CPU and mmap load
  rtlab load cpu:2 hog:99:3ms/200ms:0 --duration 1m   run a disturbance load alone

Exit status: 0 success, 1 the run failed, 2 bad usage or input, 3 --fail-above was hit.
Most measurements need root (SCHED_FIFO, mlockall, /dev/cpu_dma_latency); without it rtlab
measures in the best mode it can and says so in a warning.";

#[derive(Debug, Parser)]
#[command(name = "rtlab", version, about = ABOUT, after_help = AFTER_HELP, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
// Parsed once per run: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Timed-wakeup latency: wake at absolute deadlines, latency = actual - scheduled.
    #[command(after_help = WAKEUP_HELP)]
    Wakeup(WakeupArgs),
    /// Mutex cost: fast path (uncontended) and slow path (hand-off) of rtlab's and others' locks.
    #[command(after_help = LOCK_HELP)]
    Lock(LockArgs),
    /// Priority inversion: how long a high-priority thread waits for a lock, per protocol.
    #[command(after_help = INVERT_HELP)]
    Invert(InvertArgs),
    /// Seed 000: does a non-RT thread's mmap delay an RT thread's (non-private) futex wait?
    #[command(after_help = MMAP_HELP)]
    Mmap(MmapArgs),
    /// Timer slack: read or set it on a running process's threads.
    #[command(after_help = SLACK_HELP, args_conflicts_with_subcommands = true)]
    Slack(SlackArgs),
    /// Run a command with timer slack, scheduling and CPU affinity set (like chrt/taskset).
    #[command(after_help = EXEC_HELP)]
    Exec(ExecArgs),
    /// Message passing between two processes: rtlab's shared-memory channel vs the kernel's.
    #[command(after_help = IPC_HELP)]
    Ipc(IpcArgs),
    /// Bounded-latency messaging over TCP/UDP: periodic streams, ping-pong, the peer.
    #[command(after_help = NET_HELP)]
    Net(NetArgs),
    /// Audit this machine's real-time settings: status, value, why, and the fix for each.
    #[command(after_help = CHECK_HELP)]
    Check(CheckArgs),
    /// Render result documents as one self-contained HTML report with SVG plots.
    #[command(after_help = REPORT_HELP)]
    Report(ReportArgs),
    /// Compare two result documents: B/A per series and percentile, with significance.
    #[command(after_help = DIFF_HELP)]
    Diff(DiffArgs),
    /// Run disturbance loads alone (the same loads --load adds to any experiment).
    #[command(after_help = LOAD_HELP)]
    Load(LoadArgs),
    /// Check this machine end to end: wakeup idle and under load, one verdict, a report.
    #[command(after_help = SURVEY_HELP)]
    Survey(SurveyArgs),
    /// Watch a running program's threads: how late each was scheduled, and why.
    #[command(after_help = WATCH_HELP)]
    Watch(WatchArgs),
}

const WATCH_HELP: &str = "\
Measures, from kernel events only (no change to the program, any language), two delays of
each watched thread:
  wakeup  from becoming runnable (its wakeup, or being preempted) to running: the scheduling
          delay, what runqlat and perf sched timehist measure (metric wakeup_latency);
  timer   from the expiry its sleep timer was set for (clock_nanosleep, nanosleep, a timed
          futex wait such as Java's parkNanos, epoll/poll timeouts) to running: what a
          periodic loop loses each period, timer slack included (metric timer_latency;
          needs the eBPF source).
Series: <name>/<tid>/<kind> per thread and <name>/<kind> summed over the threads of one name
(a pool reads as one). Threads created later are picked up (the process's threads are re-read
every second). Every delay over --threshold (default: the --top worst) is explained as in
--explain: preempting tasks with pid and priority, IRQs and softirqs by name, idle exit,
hypervisor gaps, wake-up IPIs.

It runs until --duration, Ctrl-C or SIGTERM, or until the watched process exits, then writes
the complete result (--json). Every --interval-log it prints one line per busy series to
stderr and, with --hlog, appends each series' interval histogram to an HdrHistogram interval
log (tagged with the series name; HdrHistogram's log tools read it).

Needs root (eBPF, or tracefs as the fallback); every CPU is traced. Not measured: time
blocked on locks (see the README).

Examples:
  rtlab watch --pid $(pgrep -f MyApp) --thread 'rt-*' --duration 10m --json app.json
  rtlab watch --pid 4242 --rt-only --threshold 200us --hlog app.hlog
  rtlab watch --json loop.json -- ./control-loop --period 1ms
";

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The process to watch (all of its threads, and those it creates later).
    #[arg(long, value_name = "PID", value_parser = parse_pid)]
    pub pid: Option<i32>,
    /// Threads to watch, repeatable: a name as in /proc/<tid>/comm, a glob such as 'rt-*', or
    /// a TID (default: all).
    #[arg(long = "thread", value_name = "PATTERN")]
    pub threads: Vec<String>,
    /// Only threads with a real-time policy (SCHED_FIFO, SCHED_RR).
    #[arg(long)]
    pub rt_only: bool,
    /// How long to watch (default: until Ctrl-C, SIGTERM or the process's exit).
    #[arg(long, value_name = "DUR", value_parser = positive_duration)]
    pub duration: Option<Nanos>,
    /// Explain every delay longer than DUR (default: the --top worst).
    #[arg(long, value_name = "DUR", value_parser = positive_duration)]
    pub threshold: Option<Nanos>,
    /// How many explained outliers to keep, the worst first (default 10).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub top: Option<u16>,
    /// Every DUR: one summary line per series on stderr, and the interval histograms to
    /// --hlog.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = positive_duration)]
    pub interval_log: Nanos,
    /// Append each series' interval histograms to FILE (HdrHistogram interval log).
    #[arg(long, value_name = "FILE")]
    pub hlog: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (e.g. 127.0.0.1:9464; port 0
    /// picks a free one, printed at the start).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Write the result document to PATH ('-' for stdout).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Where the events come from: bpf, tracefs or auto.
    #[arg(long, value_name = "SOURCE", default_value = "auto", value_parser = parse_backend)]
    pub explain_with: rtlab_lab::explain::Backend,
    /// Print only the final table (warnings still go to stderr).
    #[arg(short, long)]
    pub quiet: bool,
    /// A command to start and watch instead of --pid, after `--`; rtlab ends with its exit
    /// status.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

const WAKEUP_HELP: &str = "\
Series: thread0, thread1, ... (metric wakeup_latency), one per measuring thread, with cpu,
interval_ns, phase_ns, policy, prio, mlock and timer_slack_ns in their config.

The method is cyclictest's: each thread sleeps with clock_nanosleep(TIMER_ABSTIME) on
CLOCK_MONOTONIC until next = previous deadline + interval and records wake time - deadline.
A wakeup so late that later deadlines already passed counts those periods in 'missed' and
records them too (coordinated-omission correction), so overruns are never hidden.
Thread i of n wakes i x interval / n after thread 0, so CPUs do not leave idle in lockstep;
--aligned makes them wake together (a harsher, different test, like cyclictest -A).

--explain (root: tracefs) traces the measured CPUs in a private tracefs instance while
measuring and names the cause of each outlier (the --top worst, or all over --threshold):
IRQs and vectors by name, softirqs, preempting tasks (name, pid, priority), the CPU idling
past the deadline (idle_exit; hypervisor_gap on a VM), silent gaps in the trace
(hypervisor_gap), and what is left (unexplained). They go to the result's outliers array and
one line each after the table. Without tracefs it says so and reports /proc counters instead.

Examples:
  rtlab wakeup --duration 10s --json out.json
  rtlab wakeup --cpus 0 --interval 200us --prio 99 --load cpu --fail-above 500us
  rtlab wakeup --threads 4 --policy other        unpinned SCHED_OTHER threads
  rtlab wakeup --cpus 0 --explain --threshold 1ms --load hog:99:3ms/200ms:0 --duration 10s";

const LOCK_HELP: &str = "\
Series: <impl>/uncontended (metric lock_unlock: ns per lock+unlock pair, one thread) and
<impl>/handoff (metric handoff: ns per hand-off, two threads passing a ring of three
mutexes, seed 003's method), for impl in rtlab-pi, rtlab-robust, rtlab-ceiling,
glibc-normal, glibc-pi, glibc-pp, glibc-robust, glibc-robust-pi, std, parking_lot. Each
value is the median
of many batches, interleaved across implementations. <impl>/condvar_wake (metric
condvar_wake, a distribution) for rtlab-pi (PiCondvar), glibc-normal (pthread_cond_t), std
and parking_lot: from the notifier's time stamp (predicate set under the mutex, then unlock
and notify) to the waiter running again. glibc-pp (PTHREAD_PRIO_PROTECT) and rtlab-ceiling
(ceilings = --prio + 1) need real-time privilege and are skipped with a warning without it;
glibc-pp also refuses SCHED_OTHER callers (--policy other). std and parking_lot
spin briefly before sleeping: with the two threads on different CPUs their hand-off is a
cache-line transfer rather than a wake-up; --cpus 0 compares real wake-ups.
Default scheduling: SCHED_FIFO 10. The uncontended thread and hand-off thread B run on the
first of --cpus, thread C on the second (the same CPU if only one is given).

Examples:
  rtlab lock --duration 6s --json lock.json
  rtlab lock --impl rtlab-pi,glibc-pi --cpus 0        both hand-off threads on CPU 0";

const INVERT_HELP: &str = "\
Seed 003's experiment (805 ms without PI, 23 ms with PI). On one CPU (default: the last
usable one): a low-priority thread (--prio - 2) takes the lock and works --hold inside it;
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

const MMAP_HELP: &str = "\
Seed 000: in 2008 a non-real-time thread mapping 100 MB delayed a real-time thread's futex
wait by up to 1 s when the futex was not private (worse with mlock). A SCHED_FIFO thread
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

const SLACK_HELP: &str = "\
Seed 004: LockSupport.parkNanos(10 us) sleeps ~60 us because the kernel may delay a
SCHED_OTHER thread's wakeup by its timer slack (50 us by default) to batch timers. Slack is
per thread, inherited by new threads and child processes, and ignored for SCHED_FIFO/RR.
It lives in /proc/<tid>/timerslack_ns; changing another process's needs CAP_SYS_NICE.

  rtlab slack                               the sweep: every mechanism x --sleeps x --slacks
                                            (SCHED_OTHER) plus a SCHED_FIFO row; the table
                                            shows p50 oversleep, the 50 us step included
  rtlab slack get --pid PID                 every thread: tid, name, slack
  rtlab slack set --pid PID --all 1us       every thread of PID
  rtlab slack set --pid PID --tid TID 1us   one thread
  rtlab slack set --pid PID --thread NAME 1us   threads whose name matches (prefix)

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
`rtlab exec --slack 1us -- java ...` to cover every thread from the beginning.";

const EXEC_HELP: &str = "\
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

const IPC_HELP: &str = "\
Seed 003 asked whether a message queue on a robust mutex in shared memory could reach POSIX mq.
Two processes (this one and a forked child, on two CPUs, or one with --same-cpu) exchange
messages of each --size through each mechanism:
  rtlab-shm                  rtlab-ipc's ShmChannel: a lock-free ring that sleeps on a futex
                             only when empty or full (no syscall per message when busy)
  rtlab-shm-mpsc             the same ring in its several-producer form (robust PI mutex on
                             the producer side)
  rtlab-shm-mutex-condvar    seed 003's first design: slots, a robust PI mutex, PI condvars
  rtlab-shm-mutex-semaphore  seed 003's final design: slots, a robust PI mutex, 2 semaphores
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

const NET_HELP: &str = "\
Seeds 001 and 002: periodic real-time threads exchange messages over TCP, each message
acknowledged by the peer, and the worst round trip is the figure of merit.

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
  rtlab net run --profile seed-poc --load cpu --background-traffic
  rtlab net run --topology netns --loss 1 --stream 100B@10ms --pad-segments 3 --duration 60s
  rtlab net serve --listen 0.0.0.0:7471             (on host B)
  rtlab net run --peer hostB:7471 --stream 120KiB@50ms   (on host A)";

const NET_RUN_HELP: &str = "\
Series: <SIZE>@<PERIOD>/rtt per stream, named as written (metric rtt: from the scheduled send
time to the acknowledgement, so a stall shows in every message it delayed), and
<SIZE>@<PERIOD>/send_lateness (actual send start minus scheduled time); reverse/<SIZE>@<PERIOD>/...
for streams the peer sends (--reverse-stream, TCP only; measured on the peer, reported back);
all/rtt over every stream. Counters (sent, acked, lost, duplicates, reordered, deadline_misses,
warmup_trimmed, retransmits from TCP_INFO, pad_bytes), the socket options, the topology and
the TCP loss-recovery sysctls are in each series' config.

A message's size includes rtlab's 40-byte header (smaller sizes are sent as 40 bytes).
--pad-segments N (seed 002): each message is followed by padding up to N full segments, so a
lost segment is followed by enough others for fast retransmit (or RACK) to fire instead of the
retransmission timer; the peer acknowledges as soon as the useful bytes are in and discards
the padding. --profile seed-poc is seed 001's mix: 120KiB, 1KiB, 100B and 200B every 50ms
this way, 300B and 350B every 50ms the other way. Messages of the first --warmup (default
min(1s, duration/5)) are sent but not recorded; the output says how many.

--topology netns creates a namespace rtlab-<pid> and a veth pair (--mtu, static neighbour
entries; --loss PCT drops that share of packets both ways with nftables inside the
namespace), runs the peer in it, and removes it all at the end, on Ctrl-C and on error; if
rtlab is killed, the peer removes it (it gets SIGTERM when its parent dies).

--explain (root) traces the CPUs of the stream threads and names the causes of the worst
send_lateness samples (a sender thread woken late), as rtlab wakeup --explain does; pin the
streams with --cpus to keep a CPU free for the trace reader.

Examples:
  rtlab net run --stream 1KiB@10ms --duration 10s --json run.json
  rtlab net run --profile seed-poc --load cpu:2 --background-traffic
  rtlab net run --topology netns --mtu 9000 --stream 120KiB@50ms --sndbuf 2MiB --rcvbuf 2MiB
  rtlab net run --topology netns --loss 1 --stream 100B@10ms --pad-segments 3 --duration 60s";

const NET_PINGPONG_HELP: &str = "\
Series: pingpong/rtt (metric rtt): one message of --size bytes in flight, echoed whole by the
peer, timed from the send to the last byte of the echo; over UDP a reply missing for 200 ms
counts as lost (config: lost). The first tenth of the run (at most 500 ms) is warm-up.
With --explain the slowest round trips are attributed on the measured CPUs (--cpus): what ran
there while the thread waited for the echo (the peer, when it shares the CPU).

Examples:
  rtlab net pingpong --proto tcp --size 64 --duration 5s --json pp.json
  rtlab net pingpong --proto udp --size 1KiB --busy-poll 50
  sudo rtlab net pingpong --cpus 0 --load hog:99:2ms/100ms:0 --explain --top 5";

const REPORT_HELP: &str = "\
Writes DIR/report.html: one file, no scripts, no network, readable on a laptop and printable.
Per document: the machine, the survey's verdict and tuning actions, the check table, and per
area the percentile curves (HdrHistogram style, idle and loaded on one chart), log-scale
histograms, explained outliers over time (causes on hover), bars for single values (lock,
ipc throughput) and the slack sweep, with the numbers behind each chart. `rtlab survey`
writes the same file next to its report.json.

Examples:
  rtlab report rtlab-report/report.json -o rtlab-report
  rtlab report idle.json loaded.json net.json -o /tmp/report";

const CHECK_HELP: &str = "\
Checks (read-only: nothing is changed): preempt_model, rt_throttling, cpu_isolation
(isolcpus/nohz_full/rcu_nocbs), irq_affinity (device IRQs allowed on the suggested RT CPU, the
last one), cpufreq_governor, c_states, transparent_hugepages, damon, swap, rlimits (MEMLOCK,
RTPRIO), clocksource, virtualization (with a 1 s steal-time sample), timer_slack, numa,
tracing. Each has a status (ok, warn, fail, skipped), what was found, why it matters, and the
exact command that fixes it; the three that matter most are listed last.

--json writes one value series per check (check/<id>: 0 ok, 1 warn, 2 fail, -1 skipped) with
status, value, why and fix in its config.

Examples:
  rtlab check
  rtlab check --json check.json";

const DIFF_HELP: &str = "\
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

const SURVEY_HELP: &str = "\
Stages: rtlab check, then wakeup idle, then wakeup under --load cpu --load mmap with
--explain (each --duration long: 60 s by default, about 3 minutes in all; 4 s with
--quick, about 30 s in all), then
short stages (at most 4 s each) of lock (rtlab's PI and robust mutexes against glibc's),
invert (priority inversion without a protocol vs with PI), mmap (does mmap still delay a
shared futex?), slack (what the default timer slack costs a 10 us wait), ipc (rtlab's
shared-memory channel vs POSIX mq and a pipe between two processes) and net (periodic TCP
streams both ways over loopback, each message acknowledged). Writes DIR/report.json (all series, schema-valid) and one .hgrm file per
distribution series. The verdict has one line per area.

Examples:
  rtlab survey
  rtlab survey --duration 30s --out /tmp/rtlab-report";

/// Options every experiment command shares (see CONTRACT.md).
#[derive(Debug, Args, Clone)]
pub struct CommonArgs {
    /// How long to measure: 500ms, 10s, 2m (units ns, us, ms, s, m, h).
    #[arg(long, value_name = "DUR", value_parser = positive_duration, allow_hyphen_values = true)]
    pub duration: Option<Nanos>,
    /// Write the result document to PATH ('-' for stdout).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write one HdrHistogram percentile file (<series>.hgrm) per distribution into DIR.
    #[arg(long, value_name = "DIR")]
    pub hgrm: Option<PathBuf>,
    /// Run a disturbance load while measuring; repeatable (see 'rtlab load --help').
    #[arg(long = "load", value_name = "SPEC", value_parser = parse_load)]
    pub loads: Vec<LoadSpec>,
    /// CPUs for the measuring threads: 0, 0,1, 0-3 (default: all usable CPUs).
    #[arg(long, value_name = "LIST", value_parser = parse_cpus, allow_hyphen_values = true)]
    pub cpus: Option<CpuList>,
    /// Priority of the measuring threads, 1-99 for fifo/rr (default 95).
    #[arg(long, value_name = "N", value_parser = parse_prio, allow_hyphen_values = true)]
    pub prio: Option<u32>,
    /// Scheduling policy of the measuring threads: fifo, rr or other (default fifo).
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    pub policy: Option<Policy>,
    /// Exit 3 when any measured latency exceeds DUR (a CI gate).
    #[arg(long, value_name = "DUR", value_parser = duration_arg, allow_hyphen_values = true)]
    pub fail_above: Option<Nanos>,
    /// Print only the final table (warnings still go to stderr).
    #[arg(long, short)]
    pub quiet: bool,
    /// Lock all memory with mlockall before measuring (default).
    #[arg(long, overrides_with = "no_mlock")]
    pub mlock: bool,
    /// Do not lock memory.
    #[arg(long)]
    pub no_mlock: bool,
    /// Do not hold /dev/cpu_dma_latency at 0 during the run.
    #[arg(long)]
    pub no_dma_latency: bool,
}

#[derive(Debug, Args)]
pub struct WakeupArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Period between wakeups.
    #[arg(long, value_name = "DUR", default_value = "1ms", value_parser = positive_duration, allow_hyphen_values = true)]
    pub interval: Nanos,
    /// Wake all threads at the same instants (default: phases spread evenly over the interval).
    #[arg(long)]
    pub aligned: bool,
    /// Number of measuring threads instead of one per CPU; with --cpus, spread over them.
    #[arg(long, value_name = "N", value_parser = parse_threads, allow_hyphen_values = true)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub explain: ExplainArgs,
}

/// `--explain` and its settings (wakeup, net run).
#[derive(Debug, Args, Clone)]
pub struct ExplainArgs {
    /// Trace the measured CPUs (eBPF or tracefs, root) and name the cause of each outlier:
    /// IRQs, softirqs, preempting tasks, lock holders, idle exit, hypervisor gaps.
    #[arg(long)]
    pub explain: bool,
    /// Explain every sample later than DUR (implies --explain; default: the --top worst).
    #[arg(long, value_name = "DUR", value_parser = positive_duration)]
    pub threshold: Option<Nanos>,
    /// How many outliers to keep, the worst first (default 10; 1000 with --threshold).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub top: Option<u16>,
    /// Save the raw trace window of each outlier as DIR/outlier-NNNN-<series>.txt (implies
    /// --explain).
    #[arg(long, value_name = "DIR")]
    pub trace_out: Option<std::path::PathBuf>,
    /// Where the events come from: `bpf` (programs on raw tracepoints write per-CPU rings in a
    /// BPF map; the cheapest per event), `tracefs` (a private tracefs instance, any kernel with tracefs), or `auto`
    /// (bpf, else tracefs with a warning).
    #[arg(long, value_name = "SOURCE", default_value = "auto", value_parser = parse_backend)]
    pub explain_with: rtlab_lab::explain::Backend,
}

fn parse_backend(text: &str) -> Result<rtlab_lab::explain::Backend, String> {
    use rtlab_lab::explain::Backend;
    [Backend::Auto, Backend::Bpf, Backend::Tracefs]
        .into_iter()
        .find(|b| b.name() == text)
        .ok_or_else(|| format!("unknown event source `{text}` (auto, bpf, tracefs)"))
}

impl ExplainArgs {
    /// The settings, when any of the options asks for explaining.
    pub fn settings(&self) -> Option<rtlab_lab::explain::ExplainSettings> {
        (self.explain || self.threshold.is_some() || self.trace_out.is_some() || self.top.is_some())
            .then(|| rtlab_lab::explain::ExplainSettings {
                threshold: self.threshold,
                top: self.top.map_or(
                    if self.threshold.is_some() { 1000 } else { 10 },
                    usize::from,
                ),
                trace_out: self.trace_out.clone(),
                backend: self.explain_with,
            })
    }
}

#[derive(Debug, Args)]
pub struct LockArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Implementations to measure, comma-separated (default: all).
    #[arg(long = "impl", value_name = "LIST", value_delimiter = ',', value_parser = parse_impl)]
    pub impls: Vec<rtlab_lab::lock::Impl>,
    #[command(flatten)]
    pub explain: ExplainArgs,
}

fn parse_impl(text: &str) -> Result<rtlab_lab::lock::Impl, String> {
    rtlab_lab::lock::Impl::ALL
        .into_iter()
        .find(|i| i.name() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = rtlab_lab::lock::Impl::ALL
                .iter()
                .map(|i| i.name())
                .collect();
            format!(
                "unknown implementation '{text}' (expected one of {})",
                names.join(", ")
            )
        })
}

#[derive(Debug, Args)]
pub struct InvertArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Work the low-priority owner does inside the lock.
    #[arg(long, value_name = "DUR", default_value = "1ms", value_parser = positive_duration, allow_hyphen_values = true)]
    pub hold: Nanos,
    /// Period of the high-priority thread's lock requests.
    #[arg(long, value_name = "DUR", default_value = "10ms", value_parser = positive_duration, allow_hyphen_values = true)]
    pub period: Nanos,
    /// Medium-priority hogs (default: one per CPU in --cpus).
    #[arg(long, value_name = "N", value_parser = parse_threads, allow_hyphen_values = true)]
    pub hogs: Option<usize>,
    /// Spin time of each hog per hog period.
    #[arg(long, value_name = "DUR", default_value = "30ms", value_parser = positive_duration, allow_hyphen_values = true)]
    pub hog_run: Nanos,
    /// Hog period.
    #[arg(long, value_name = "DUR", default_value = "50ms", value_parser = positive_duration, allow_hyphen_values = true)]
    pub hog_period: Nanos,
    /// Variants to run, comma-separated (default: all).
    #[arg(long = "variant", value_name = "LIST", value_delimiter = ',', value_parser = parse_variant)]
    pub variants: Vec<rtlab_lab::invert::Variant>,
    /// Correctness mode: pi_stress-style inversion groups; exit 1 on a stall.
    #[arg(long)]
    pub check: bool,
    /// Attribute the high thread's late lock waits: the holder, the tasks that ran while it
    /// waited (priority inversion), IRQs.
    #[command(flatten)]
    pub explain: ExplainArgs,
}

fn parse_variant(text: &str) -> Result<rtlab_lab::invert::Variant, String> {
    use rtlab_lab::invert::Variant;
    Variant::ALL
        .into_iter()
        .find(|v| v.name() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
            format!(
                "unknown variant '{text}' (expected one of {})",
                names.join(", ")
            )
        })
}

#[derive(Debug, Args)]
pub struct MmapArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Bytes the disturbing thread maps, touches and unmaps per cycle.
    #[arg(long, value_name = "SIZE", default_value = "100MiB", value_parser = parse_size_arg)]
    pub size: u64,
    /// Period of the real-time thread's timed waits.
    #[arg(long, value_name = "DUR", default_value = "1ms", value_parser = positive_duration, allow_hyphen_values = true)]
    pub interval: Nanos,
    /// Waiters to compare, comma-separated (default: all).
    #[arg(long = "waiter", value_name = "LIST", value_delimiter = ',', value_parser = parse_waiter)]
    pub waiters: Vec<rtlab_lab::mmap::Waiter>,
    #[command(flatten)]
    pub explain: ExplainArgs,
}

fn parse_size_arg(text: &str) -> Result<u64, String> {
    rtlab_stats::parse_size(text).map_err(|e| e.to_string())
}

fn parse_waiter(text: &str) -> Result<rtlab_lab::mmap::Waiter, String> {
    use rtlab_lab::mmap::Waiter;
    Waiter::ALL
        .into_iter()
        .find(|w| w.name() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = Waiter::ALL.iter().map(|w| w.name()).collect();
            format!(
                "unknown waiter '{text}' (expected one of {})",
                names.join(", ")
            )
        })
}

#[derive(Debug, Args)]
pub struct SlackArgs {
    #[command(subcommand)]
    pub action: Option<SlackAction>,
    #[command(flatten)]
    pub sweep: SweepArgs,
}

/// The sweep (`rtlab slack` without a subcommand).
#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Requested sleeps, comma-separated.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1us,2us,5us,10us,20us,50us,100us,200us", value_parser = positive_duration)]
    pub sleeps: Vec<Nanos>,
    /// Timer slack values, comma-separated.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1ns,1us,10us,50us,200us", value_parser = positive_duration)]
    pub slacks: Vec<Nanos>,
    /// Mechanisms, comma-separated (default: all): clock_nanosleep_rel, clock_nanosleep_abs,
    /// nanosleep, futex, cond_timedwait, timerfd_epoll.
    #[arg(long = "mechanism", value_name = "LIST", value_delimiter = ',', value_parser = parse_mechanism)]
    pub mechanisms: Vec<rtlab_sys::sleep::Mechanism>,
    /// Attribute sleeps that end later than requested + slack (the slack itself is by
    /// design): IRQs, preempting tasks, hypervisor gaps.
    #[command(flatten)]
    pub explain: ExplainArgs,
}

fn parse_mechanism(text: &str) -> Result<rtlab_sys::sleep::Mechanism, String> {
    use rtlab_sys::sleep::Mechanism;
    Mechanism::ALL
        .into_iter()
        .find(|m| m.name() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = Mechanism::ALL.iter().map(|m| m.name()).collect();
            format!(
                "unknown mechanism '{text}' (expected one of {})",
                names.join(", ")
            )
        })
}

#[derive(Debug, Subcommand)]
pub enum SlackAction {
    /// List every thread of a process with its timer slack.
    Get {
        /// The process.
        #[arg(long, value_name = "PID", value_parser = parse_pid)]
        pid: i32,
        /// Write the threads as a result document to PATH ('-' for stdout).
        #[arg(long, value_name = "PATH")]
        json: Option<PathBuf>,
    },
    /// Set the timer slack of threads of a process.
    Set {
        /// The process.
        #[arg(long, value_name = "PID", value_parser = parse_pid)]
        pid: i32,
        /// Every thread of the process.
        #[arg(long, group = "which")]
        all: bool,
        /// One thread by its tid.
        #[arg(long, value_name = "TID", value_parser = parse_pid, group = "which")]
        tid: Option<i32>,
        /// Threads whose name (comm) equals NAME or starts with it (15 characters at most count).
        #[arg(long, value_name = "NAME", group = "which")]
        thread: Option<String>,
        /// The new slack: 1ns to 1s; 0 restores each thread's default.
        #[arg(value_name = "DUR", value_parser = duration_arg, allow_hyphen_values = true)]
        slack: Nanos,
    },
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Timer slack for CMD and its threads.
    #[arg(long, value_name = "DUR", value_parser = duration_arg, allow_hyphen_values = true)]
    pub slack: Option<Nanos>,
    /// Scheduling policy: fifo, rr or other.
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    pub policy: Option<Policy>,
    /// Priority, 1-99 for fifo/rr.
    #[arg(long, value_name = "N", value_parser = parse_prio, allow_hyphen_values = true)]
    pub prio: Option<u32>,
    /// CPU affinity: 0, 0,1, 0-3.
    #[arg(long, value_name = "LIST", value_parser = parse_cpus, allow_hyphen_values = true)]
    pub cpus: Option<CpuList>,
    /// Raise RLIMIT_MEMLOCK so CMD may lock its memory (locks themselves do not survive exec).
    #[arg(long)]
    pub mlock: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

fn parse_pid(text: &str) -> Result<i32, String> {
    match text.parse::<i64>() {
        Ok(p) if (1..=i32::MAX as i64).contains(&p) => Ok(p as i32),
        _ => Err(format!("'{text}' is not a process or thread id")),
    }
}

#[derive(Debug, Args)]
pub struct IpcArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Message sizes, comma-separated (16 bytes to 64KiB).
    #[arg(long = "size", value_name = "LIST", value_delimiter = ',', default_value = "64", value_parser = parse_size_arg)]
    pub sizes: Vec<u64>,
    /// Mechanisms, comma-separated (default: all).
    #[arg(long = "mechanism", value_name = "LIST", value_delimiter = ',', value_parser = parse_ipc_mechanism)]
    pub mechanisms: Vec<rtlab_lab::ipc::Mechanism>,
    /// Run both processes on one CPU (default: two different CPUs).
    #[arg(long)]
    pub same_cpu: bool,
    /// Add the busy-polling variants (rtlab-shm-busy): both ends spin instead of sleeping,
    /// each burning a CPU; reported as separate series.
    #[arg(long)]
    pub busy_poll: bool,
    #[command(flatten)]
    pub explain: ExplainArgs,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Result documents (from --json of any command, or a survey's report.json).
    #[arg(value_name = "FILE.json", required = true)]
    pub files: Vec<std::path::PathBuf>,
    /// Directory to write report.html into.
    #[arg(
        short = 'o',
        long = "out",
        value_name = "DIR",
        default_value = "rtlab-report"
    )]
    pub out: std::path::PathBuf,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Write the audit as a result document to PATH ('-' for stdout).
    #[arg(long, value_name = "PATH")]
    pub json: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline result document.
    #[arg(value_name = "A.json")]
    pub a: std::path::PathBuf,
    /// The result document to compare with it.
    #[arg(value_name = "B.json")]
    pub b: std::path::PathBuf,
    /// Exit 3 when a statistic got worse by more than PCT percent (significantly).
    #[arg(long, value_name = "PCT", value_parser = parse_regression_pct)]
    pub fail_worse: Option<f64>,
    /// Write the comparison as a result document to PATH ('-' for stdout).
    #[arg(long, value_name = "PATH")]
    pub json: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct NetArgs {
    #[command(subcommand)]
    pub action: NetAction,
}

#[derive(Debug, Subcommand)]
pub enum NetAction {
    /// Periodic streams to a peer, each message acknowledged; round trips from the schedule.
    #[command(after_help = NET_RUN_HELP)]
    Run(NetRunArgs),
    /// One message in flight, echoed whole (like sockperf ping-pong).
    #[command(after_help = NET_PINGPONG_HELP)]
    Pingpong(NetPingPongArgs),
    /// The peer: acknowledges, echoes, runs reverse streams (TCP and UDP, one port).
    #[command(after_help = NET_SERVE_HELP)]
    Serve(NetServeArgs),
}

/// Where the peer is and how sockets are set up (run and pingpong).
#[derive(Debug, Args, Clone)]
pub struct NetPathArgs {
    /// A peer started with `rtlab net serve` on another host (ADDR:PORT or HOST:PORT).
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_peer, conflicts_with = "topology")]
    pub peer: Option<std::net::SocketAddr>,
    /// Where rtlab starts its own peer: loopback (a thread here) or netns (a network
    /// namespace behind a veth pair, root only).
    #[arg(long, value_name = "KIND", value_parser = ["loopback", "netns"], default_value = "loopback")]
    pub topology: String,
    /// MTU of the veth pair (netns), e.g. 9000 for jumbo frames.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(576..=65535))]
    pub mtu: Option<u32>,
    /// Drop this percentage of packets in both directions (netns; nftables).
    #[arg(long, value_name = "PCT", value_parser = parse_pct)]
    pub loss: Option<f64>,
    /// A net.* sysctl for the peer's namespace (netns; repeatable), e.g.
    /// net.ipv4.tcp_early_retrans=0 to turn tail-loss probes off on the peer's side.
    #[arg(long, value_name = "KEY=VALUE")]
    pub netns_sysctl: Vec<String>,
    /// tcp or udp.
    #[arg(long, value_name = "PROTO", value_parser = ["tcp", "udp"], default_value = "tcp")]
    pub proto: String,
    /// Leave Nagle's algorithm on (TCP_NODELAY is set by default).
    #[arg(long)]
    pub no_nodelay: bool,
    /// Set TCP_QUICKACK, re-armed after every receive (both ends).
    #[arg(long)]
    pub quickack: bool,
    /// SO_BUSY_POLL microseconds on both ends.
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub busy_poll: Option<u32>,
    /// SO_PRIORITY of the sockets (0-6 without CAP_NET_ADMIN).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=15))]
    pub priority: Option<u32>,
    /// IP_TOS byte (e.g. 0x10 low delay, 0xb8 DSCP EF).
    #[arg(long, value_name = "BYTE", value_parser = parse_tos)]
    pub tos: Option<u8>,
    /// SO_SNDBUF (the seed used 2MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    pub sndbuf: Option<u64>,
    /// SO_RCVBUF.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    pub rcvbuf: Option<u64>,
    /// TCP_THIN_LINEAR_TIMEOUTS: no exponential backoff of the first retransmission timeouts.
    #[arg(long)]
    pub thin_linear_timeouts: bool,
}

#[derive(Debug, Args)]
pub struct NetRunArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub path: NetPathArgs,
    /// A stream this side sends: SIZE@PERIOD (repeatable), e.g. 120KiB@50ms.
    #[arg(long = "stream", value_name = "SIZE@PERIOD", value_parser = parse_stream)]
    pub streams: Vec<rtlab_lab::net::StreamSpec>,
    /// A stream the peer sends back (repeatable; TCP).
    #[arg(long = "reverse-stream", value_name = "SIZE@PERIOD", value_parser = parse_stream)]
    pub reverse: Vec<rtlab_lab::net::StreamSpec>,
    /// A predefined mix: seed-poc (seed 001's two machines).
    #[arg(long, value_name = "NAME", value_parser = ["seed-poc"])]
    pub profile: Option<String>,
    /// Pad each message to at least N full segments (TCP; seed 002's fast-retransmit trick).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub pad_segments: Option<u32>,
    /// Bulk TCP traffic on another connection while measuring (the seed's background load).
    #[arg(long)]
    pub background_traffic: bool,
    /// Round trips over DUR count as deadline misses (default: the stream's period).
    #[arg(long, value_name = "DUR", value_parser = positive_duration)]
    pub deadline: Option<Nanos>,
    /// Not recorded at the start of each stream (default: min(1s, duration/5)).
    #[arg(long, value_name = "DUR", value_parser = duration_arg)]
    pub warmup: Option<Nanos>,
    /// --explain here names the causes of late sends (the stream threads' send_lateness).
    #[command(flatten)]
    pub explain: ExplainArgs,
}

#[derive(Debug, Args)]
pub struct NetPingPongArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub path: NetPathArgs,
    /// Message size (rtlab's 40-byte header included; smaller sizes send 40 bytes).
    #[arg(long, value_name = "SIZE", default_value = "64", value_parser = parse_size_arg)]
    pub size: u64,
    #[command(flatten)]
    pub explain: ExplainArgs,
}

#[derive(Debug, Args)]
pub struct NetServeArgs {
    /// Address and port to listen on (TCP and UDP). The default answers this host only;
    /// for a client on another host, listen on its interface (e.g. 0.0.0.0:7471).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7471", value_parser = parse_peer)]
    pub listen: std::net::SocketAddr,
    /// Let clients ask for SCHED_FIFO/RR up to this priority for the peer's threads (and
    /// SO_BUSY_POLL up to 100 us). Without it every connection is served under SCHED_OTHER.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=99))]
    pub max_prio: Option<u32>,
    /// Connections served at once; more are closed at once.
    #[arg(long, value_name = "N", default_value = "16", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_connections: u32,
    /// Largest socket buffer, echoed message or reverse-stream message a client may ask for.
    #[arg(long, value_name = "SIZE", default_value = "4MiB", value_parser = parse_size_arg)]
    pub max_buffer: u64,
    /// A connection with nothing to read (or whose client does not read) for this long ends.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = positive_duration)]
    pub idle_timeout: Nanos,
    /// Enter this network namespace first (used by --topology netns).
    #[arg(long, value_name = "NAME", hide = true)]
    pub netns: Option<String>,
    /// Delete the namespace when stopping.
    #[arg(long, hide = true)]
    pub owns_netns: bool,
    /// Create this namespace and a veth pair first, serve inside it, delete it when stopping
    /// (what --topology netns runs).
    #[arg(long, value_name = "NAME", hide = true, conflicts_with = "netns")]
    pub create_netns: Option<String>,
    /// With --create-netns: the address of the veth end outside.
    #[arg(long, value_name = "IP", hide = true)]
    pub host_ip: Option<std::net::Ipv4Addr>,
    /// With --create-netns: the MTU of the veth pair.
    #[arg(long, value_name = "BYTES", hide = true)]
    pub veth_mtu: Option<u32>,
    /// With --create-netns: random loss in percent.
    #[arg(long, value_name = "PCT", hide = true, value_parser = parse_pct)]
    pub veth_loss: Option<f64>,
    /// With --create-netns: net.* sysctls set inside the namespace.
    #[arg(long, value_name = "KEY=VALUE", hide = true)]
    pub veth_sysctl: Vec<String>,
}

const NET_SERVE_HELP: &str = "\
The peer obeys its owner, not its clients: a client asks for priorities, socket options,
buffer sizes and reverse streams, and gets them only within --max-prio, --max-buffer and
the idle timeout. It listens on loopback unless told otherwise.

Examples:
  rtlab net serve                                  # this host only, SCHED_OTHER
  rtlab net serve --listen 0.0.0.0:7471 --max-prio 80   # for a client on another host
  rtlab net run --peer 10.0.0.2:7471 --stream 1KiB@10ms --duration 60s  # on the client";

fn parse_peer(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if !text.contains(':') {
        return Err(format!("'{text}': expected ADDR:PORT, e.g. 10.0.0.2:7471"));
    }
    text.to_socket_addrs()
        .map_err(|e| format!("'{text}': {e}"))?
        .next()
        .ok_or_else(|| format!("'{text}': no address"))
}

fn parse_pct(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("'{text}': a percentage from 0 to 100")),
    }
}

fn parse_regression_pct(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p >= 0.0 && p.is_finite() => Ok(p),
        _ => Err(format!(
            "'{text}': a percentage, 0 or more (10 means 10 % worse)"
        )),
    }
}

fn parse_tos(text: &str) -> Result<u8, String> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| format!("'{text}': a byte, 0-255 or 0x00-0xff"))
}

fn parse_stream(text: &str) -> Result<rtlab_lab::net::StreamSpec, String> {
    text.parse()
}

fn parse_ipc_mechanism(text: &str) -> Result<rtlab_lab::ipc::Mechanism, String> {
    use rtlab_lab::ipc::Mechanism;
    Mechanism::every()
        .into_iter()
        .find(|m| m.name() == text)
        .ok_or_else(|| {
            let names: Vec<&str> = Mechanism::every().iter().map(|m| m.name()).collect();
            format!(
                "unknown mechanism '{text}' (expected one of {})",
                names.join(", ")
            )
        })
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Loads to run (see below).
    #[arg(value_name = "SPEC", required = true, value_parser = parse_load)]
    pub specs: Vec<LoadSpec>,
    /// How long to run them.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = positive_duration, allow_hyphen_values = true)]
    pub duration: Nanos,
    /// Write what each load did as a result document to PATH ('-' for stdout).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Print only the final table.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct SurveyArgs {
    /// Duration of each wakeup stage (the other stages take at most 4 s each).
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = positive_duration, allow_hyphen_values = true)]
    pub duration: Nanos,
    /// A quick survey (4 s per wakeup stage; about a minute in all).
    #[arg(long, conflicts_with = "duration")]
    pub quick: bool,
    /// Report directory.
    #[arg(long, value_name = "DIR", default_value = "rtlab-report")]
    pub out: PathBuf,
    /// CPUs to measure on (default: all usable CPUs).
    #[arg(long, value_name = "LIST", value_parser = parse_cpus, allow_hyphen_values = true)]
    pub cpus: Option<CpuList>,
    /// Print only the final verdict.
    #[arg(long, short)]
    pub quiet: bool,
    /// Do not lock memory.
    #[arg(long)]
    pub no_mlock: bool,
    /// Do not hold /dev/cpu_dma_latency at 0 during the run.
    #[arg(long)]
    pub no_dma_latency: bool,
}

fn duration_arg(text: &str) -> Result<Nanos, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

fn positive_duration(text: &str) -> Result<Nanos, String> {
    match duration_arg(text)? {
        Nanos(0) => Err("must be above 0".into()),
        d => Ok(d),
    }
}

fn parse_load(text: &str) -> Result<LoadSpec, String> {
    text.parse()
}

fn parse_cpus(text: &str) -> Result<CpuList, String> {
    let list = CpuList::parse(text)?;
    list.check_within(&usable_cpus())?;
    Ok(list)
}

fn parse_prio(text: &str) -> Result<u32, String> {
    match text.parse::<i64>() {
        Ok(p) if (0..=99).contains(&p) => Ok(p as u32),
        Ok(p) => Err(format!(
            "{p} is outside 1-99 (SCHED_FIFO/RR priorities; 0 with --policy other)"
        )),
        Err(_) => Err(format!("'{text}' is not a number")),
    }
}

fn parse_policy(text: &str) -> Result<Policy, String> {
    text.parse()
}

fn parse_threads(text: &str) -> Result<usize, String> {
    match text.parse::<i64>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n as usize),
        _ => Err(format!("'{text}' is not a thread count from 1 to 1024")),
    }
}

/// Parses the process arguments. Help and version print and exit 0; any other error prints
/// its first line (which names the argument and why) and exits 2.
pub fn parse() -> Result<Cli, ExitCode> {
    Cli::try_parse().map_err(|err| {
        use clap::error::ErrorKind;
        match err.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                let _ = err.print();
                if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                }
            }
            _ => {
                let text = err.render().to_string();
                let first = text
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("error: bad arguments");
                eprintln!("{first}");
                ExitCode::from(2)
            }
        }
    })
}
