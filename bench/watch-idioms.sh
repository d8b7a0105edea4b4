#!/usr/bin/env bash
# rtlab watch against periodic programs written in different ways, each timing itself, period
# by period: the watch's `timer` delays (`--samples`) joined with the program's own log of
# each period (its deadline and lateness, CLOCK_MONOTONIC ns) on the same run.
#
#   sudo bench/watch-idioms.sh [RUNS] [SECONDS]      (defaults: 10 runs of 5 s)
#   sudo IDIOMS="timerfd-epoll" bench/watch-idioms.sh 6 5   (some of them)
#
# The idioms (one thread "rt-loop", SCHED_FIFO 80, 1 ms absolute deadlines, started by
# `rtlab watch -- ...` so every period is watched):
#   clock_nanosleep   examples/c/periodic.c (as cyclictest sleeps)
#   cond-timedwait    ... condwait: pthread_cond_timedwait, CLOCK_MONOTONIC, never signalled
#   epoll-timeout     ... epoll: epoll_pwait2 on an empty set, its timeout the time left
#   timerfd-read      examples/c/timer_loop.c read: a timerfd, blocking read()
#   timerfd-epoll     ... epoll: epoll_wait() on the timerfd, then read()
#   posix-sigwait     ... sigwait: a POSIX timer's signal taken in sigwaitinfo()
#   java-park         examples/java/Periodic.java (JAVA, default the newest JDK here):
#                     LockSupport.parkNanos of the time left
#   java-sleep        ... Thread.sleep(ms, ns) of the time left
#   java-wait         ... Object.wait(ms, ns) (the JDK rounds it up to whole milliseconds)
#   java-await        ... Condition.awaitNanos of a ReentrantLock
#   java-executor     ... a ScheduledThreadPoolExecutor at a fixed rate (each run's deadline
#                     is the executor's own)
#   python-asyncio    examples/python/periodic.py: await asyncio.sleep(time left) (the loop
#                     waits in epoll_wait, the time left rounded up to whole ms)
#   python-sleep      ... HOW=sleep: time.sleep(time left) (clock_nanosleep, relative)
# Each idle and beside `stress-ng --cpu 2 --switch 2`. Per run and idiom: the watch's count,
# p50, p99 and max over the program's own (the periods both saw), and how many periods the
# program logged that the watch has no delay for, and where the watch's deadlines came from
# (its --samples' source column); medians with 95 % intervals (bench/ci.py) over the runs.
# KEEP=DIR keeps each run's files.
set -euo pipefail
RUNS=${1:-10}
SECS=${2:-5}
IDIOMS=${IDIOMS:-clock_nanosleep cond-timedwait epoll-timeout timerfd-read timerfd-epoll posix-sigwait java-park java-sleep java-wait java-await java-executor python-asyncio python-sleep}
JAVA=${JAVA:-$(ls -d /usr/lib/jvm/*/bin/java 2>/dev/null | sort -V | tail -1)}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (eBPF, SCHED_FIFO)" >&2; exit 2; fi
command -v stress-ng >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; }
if [ -z "${RTLAB:-}" ]; then cargo build --release -q; RTLAB=$PWD/target/release/rtlab; fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"; kill $(jobs -p) 2>/dev/null || true' EXIT
cc -O2 -pthread -o "$WORK/periodic" examples/c/periodic.c
cc -O2 -pthread -o "$WORK/timer_loop" examples/c/timer_loop.c
if [[ " $IDIOMS " == *" java-"* ]]; then
  [ -x "$JAVA" ] || { echo "no JDK found (JAVA=path/to/bin/java)" >&2; exit 2; }
  "$(dirname "$JAVA")/javac" -d "$WORK" examples/java/Periodic.java
fi
echo "# rtlab watch vs each program's own log, per period: $RUNS runs x ${SECS}s, $(nproc) CPUs, $(uname -r), $("$JAVA" -version 2>&1 | head -1), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
: >"$WORK/rows.txt"
for load in idle busy; do
  for run in $(seq 1 "$RUNS"); do
    if [ $load = busy ]; then stress-ng --cpu 2 --switch 2 --timeout $((SECS * 4 + 10))s >/dev/null 2>&1 & BUSY=$!; sleep 0.5; fi
    for idiom in $IDIOMS; do
      case $idiom in
        clock_nanosleep) prog=("$WORK/periodic" "$SECS" 1000) ;;
        cond-timedwait) prog=("$WORK/periodic" "$SECS" 1000 condwait) ;;
        epoll-timeout) prog=("$WORK/periodic" "$SECS" 1000 epoll) ;;
        timerfd-read) prog=("$WORK/timer_loop" "$SECS" 1000 read) ;;
        timerfd-epoll) prog=("$WORK/timer_loop" "$SECS" 1000 epoll) ;;
        posix-sigwait) prog=("$WORK/timer_loop" "$SECS" 1000 sigwait) ;;
        java-*) prog=(env HOW="${idiom#java-}" "$JAVA" -cp "$WORK" Periodic "$SECS" 1000) ;;
        python-*) prog=(env HOW="${idiom#python-}" python3 examples/python/periodic.py "$SECS" 1000) ;;
      esac
      rm -f "$WORK/s.tsv" "$WORK/own.txt"
      "$RTLAB" watch --thread rt-loop --quiet --samples "$WORK/s.tsv" --json "$WORK/w.json" -- \
        "$RTLAB" exec --policy fifo --prio 80 -- env LOG="$WORK/own.txt" "${prog[@]}" >/dev/null 2>&1 || true
      if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP"; cp "$WORK/s.tsv" "$KEEP/$load-$run-$idiom.samples.tsv"; cp "$WORK/own.txt" "$KEEP/$load-$run-$idiom.own.txt"; fi
      python3 - "$WORK" "$load" "$idiom" >>"$WORK/rows.txt" <<'PY'
import json, sys
work, load, idiom = sys.argv[1:4]
own = {}
for l in open(f"{work}/own.txt"):
    d, late = map(int, l.split())
    own[d] = late
watch = {}
sources = {}
for l in open(f"{work}/s.tsv"):
    if l.startswith("#"):
        continue
    tid, kind, deadline, end, delay, source = l.rstrip("\n").split("\t")
    # (Up to the program's last period: the wait that brought it may have taken an expiry
    # after it, which the program does not count.)
    if kind == "timer" and own and int(deadline) <= max(own):
        watch[int(deadline)] = int(delay)
        sources[source] = sources.get(source, 0) + 1
# Each of the program's periods with the watch's delay of the nearest deadline, within a
# tenth of a period (a C program's deadlines are the kernel's exactly; a Java thread's park
# is timed from its own clock read before it, its executor's from the executor's deadline).
import bisect
counted = len(watch)
keys = sorted(watch)
pair = {}
for d in own:
    k = bisect.bisect_left(keys, d)
    near = [keys[j] for j in (k - 1, k) if 0 <= j < len(keys)]
    best = min(near, key=lambda x: abs(x - d), default=None)
    if best is not None and abs(best - d) <= 100_000:
        pair[d] = watch[best]
watch = pair
both = sorted(own.keys() & watch.keys())
def q(xs, f):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * f))]
if both:
    o = [own[d] for d in both]
    w = [watch[d] for d in both]
    print(json.dumps({"load": load, "idiom": idiom, "n": counted / len(own),
                      "p50": q(w, .5) / q(o, .5), "p99": q(w, .99) / q(o, .99), "max": max(w) / max(o),
                      "missed": len(set(own) - set(watch)), "periods": len(own), "sources": sources}))
else:
    print(json.dumps({"load": load, "idiom": idiom, "n": counted / max(1, len(own)), "missed": len(own), "periods": len(own), "sources": sources}))
PY
    done
    if [ $load = busy ]; then kill $BUSY 2>/dev/null || true; wait $BUSY 2>/dev/null || true; fi
  done
done
python3 - "$WORK/rows.txt" <<'PY'
import json, sys
sys.path.insert(0, "bench")
from ci import median_ci
rows = [json.loads(l) for l in open(sys.argv[1])]
def f(xs):
    m, lo, hi = median_ci(xs)
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}]" if lo is not None else f"{m:.3f}"
def named(r):
    total = {}
    for x in r:
        for k, v in x.get("sources", {}).items():
            total[k] = total.get(k, 0) + v
    n = sum(total.values()) or 1
    return ", ".join(f"{k} {100 * v / n:.1f} %" for k, v in sorted(total.items(), key=lambda kv: -kv[1])[:3]) or "-"
print("| idiom | load | count | p50 | p99 | max | periods not seen (all runs) | deadlines from |")
print("|---|---|---|---|---|---|---|---|")
for idiom in ["clock_nanosleep", "cond-timedwait", "epoll-timeout", "timerfd-read", "timerfd-epoll", "posix-sigwait", "java-park", "java-sleep", "java-wait", "java-await", "java-executor", "python-asyncio", "python-sleep"]:
    for load in ["idle", "busy"]:
        r = [x for x in rows if x["idiom"] == idiom and x["load"] == load]
        if not r:
            continue
        cols = [f([x[k] for x in r if k in x]) if any(k in x for x in r) else "no timer series" for k in ["n", "p50", "p99", "max"]]
        print(f"| {idiom} | {load} | " + " | ".join(cols) + f" | {sum(x['missed'] for x in r)} of {sum(x['periods'] for x in r)} | {named(r)} |")
PY
