#!/usr/bin/env bash
# rtlab wakeup vs cyclictest (Debian rt-tests), identical settings, interleaved.
#
#   sudo bench/wakeup-vs-cyclictest.sh [ROUNDS] [SECONDS]      (defaults: 20 rounds, 3 s)
#
# Settings for both: SCHED_FIFO 95, 1 ms interval, one thread pinned per CPU, mlockall,
# /dev/cpu_dma_latency held at 0, equal intervals for all threads (cyclictest -d0); neither
# tool wakes its threads in lockstep (rtlab spreads thread phases over the interval).
# Each round runs both tools idle and then both under `stress-ng --cpu <ncpu>`; the order of
# the two tools alternates between rounds so neither always runs first.
#
# Percentiles: cyclictest runs with -N (nanoseconds), so its histogram has 1 ns bins up to
# 1 ms (-h 1000000; a later wakeup counts as its overflow and as its max) and both tools'
# p50/p99 are exact to the nanosecond (rtlab's HdrHistogram: 3 significant digits).
# CPU per sample = (user + sys CPU time of the whole process) / samples taken.
# Ratios rtlab / cyclictest are taken per round and condition (the two runs next to each
# other) and given as the median over rounds with its 95 % interval (bench/ci.py); a
# target is met only when the interval's upper end is under it.
set -euo pipefail
ROUNDS=${1:-20}
SECS=${2:-3}
CONDS=${CONDS:-idle stress} # CONDS=idle (or stress) for one condition only
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then echo "run as root (SCHED_FIFO, mlockall, cpu_dma_latency)" >&2; exit 2; fi
need=()
command -v cyclictest >/dev/null || need+=(rt-tests)
command -v stress-ng >/dev/null || need+=(stress-ng)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# RTLAB=path measures that binary (e.g. target/release/rtlab, the same code without line tables).
if [ -z "${RTLAB:-}" ]; then
  cargo build --profile profiling -q
  RTLAB=$PWD/target/profiling/rtlab
fi
NCPU=$(nproc)
WORK=$(mktemp -d)
STRESS_PID=
cleanup() { [ -n "$STRESS_PID" ] && kill "$STRESS_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

# Runs a command and writes "user_s sys_s maxrss_kib" of it. CPU comes from getrusage of the
# children (us resolution; /usr/bin/time rounds to 10 ms, too coarse for CPU per sample).
# Peak RSS comes from /usr/bin/time, because a child forked from python keeps python's
# pre-exec RSS as its maxrss, which would hide the tool's own.
timed() { # $1 = output file, rest = command
  local out=$1; shift
  python3 -c 'import resource, subprocess, sys
subprocess.run(["/usr/bin/time", "-f", "%M", "-o", sys.argv[1] + ".rss"] + sys.argv[2:],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
rss = open(sys.argv[1] + ".rss").read().split()[-1]
open(sys.argv[1], "w").write(f"{r.ru_utime} {r.ru_stime} {rss}\n")' "$out" "$@"
}
run_cyclictest() { # $1 = output prefix
  timed "$1.time" \
    cyclictest -m -p95 -i1000 -a -t -d0 -D "${SECS}s" -q -N -h 1000000 --json="$1.json"
}
run_rtlab() {
  timed "$1.time" \
    "$RTLAB" wakeup --duration "${SECS}s" --interval 1ms --prio 95 --quiet --json "$1.json"
}

echo "# rtlab wakeup vs cyclictest: $ROUNDS rounds x ${SECS}s, $NCPU CPUs, $(uname -r), $(date -u +%FT%TZ)"
for round in $(seq 1 "$ROUNDS"); do
  for cond in $CONDS; do
    if [ "$cond" = stress ]; then
      stress-ng --cpu "$NCPU" --timeout "$((2 * SECS + 30))s" >/dev/null 2>&1 &
      STRESS_PID=$!
      sleep 1
    fi
    if [ $((round % 2)) = 1 ]; then order="cyclictest rtlab"; else order="rtlab cyclictest"; fi
    for tool in $order; do "run_$tool" "$WORK/$round-$cond-$tool"; done
    if [ -n "$STRESS_PID" ]; then kill "$STRESS_PID" 2>/dev/null || true; wait "$STRESS_PID" 2>/dev/null || true; STRESS_PID=; fi
  done
done

python3 - "$WORK" "$ROUNDS" "$CONDS" <<'PY'
import json, sys, statistics
sys.path.insert(0, "bench")
from ci import fmt_ci, met
work, rounds, conds = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()

def cpu_rss(prefix):
    u, s, rss = open(prefix + ".time").read().split()[-3:]
    return float(u) + float(s), int(rss)

def ct_percentile(hist, q, overflow):
    # Nearest rank over 1 ns bins; wakeups past the histogram (1 ms) rank above them all.
    items = sorted((int(k), v) for k, v in hist.items())
    total = sum(v for _, v in items) + overflow
    rank, seen = max(1, -(-int(q * total * 1e6) // int(1e6))), 0
    for k, v in items:
        seen += v
        if seen >= rank:
            return k
    return float("nan")

def cyclictest(prefix):
    d = json.load(open(prefix + ".json"))
    th = d["thread"].values()
    samples = sum(t["cycles"] for t in th)
    cpu, rss = cpu_rss(prefix)
    over = lambda t: t.get("overflows", 0) or 0
    return dict(p50=statistics.mean(ct_percentile(t["histogram"], .5, over(t)) for t in th) / 1000,
                p99=statistics.mean(ct_percentile(t["histogram"], .99, over(t)) for t in th) / 1000,
                max=max(t["max"] for t in th) / 1000,
                cpu_per_sample=cpu / samples * 1e9, rss=rss, samples=samples)

def rtlab(prefix):
    d = json.load(open(prefix + ".json"))
    ss = d["series"]
    samples = sum(s["raw_count"] for s in ss)
    cpu, rss = cpu_rss(prefix)
    return dict(p50=statistics.mean(s["p50"] for s in ss) / 1000,
                p99=statistics.mean(s["p99"] for s in ss) / 1000,
                max=max(s["max"] for s in ss) / 1000,
                cpu_per_sample=cpu / samples * 1e9, rss=rss, samples=samples)

keys = ("p50", "p99", "max", "cpu_per_sample")
ratios = {cond: {k: [] for k in keys} for cond in conds}
print()
print("| round | load | tool | samples | p50 us | p99 us | max us | CPU ns/sample | peak RSS KiB |")
print("|---|---|---|---|---|---|---|---|---|")
for r in range(1, rounds + 1):
    for cond in conds:
        c = cyclictest(f"{work}/{r}-{cond}-cyclictest")
        t = rtlab(f"{work}/{r}-{cond}-rtlab")
        for name, m in (("cyclictest", c), ("rtlab", t)):
            print(f"| {r} | {cond} | {name} | {m['samples']} | {m['p50']:.2f} | {m['p99']:.2f} | {m['max']:.1f} | {m['cpu_per_sample']:.0f} | {m['rss']} |")
        for k in keys:
            if c[k] and c[k] == c[k]:
                ratios[cond][k].append(t[k] / c[k])
print()
print("Ratios rtlab / cyclictest, per round, median and 95 % interval over rounds (below 1 means")
print("rtlab is lower):")
print()
print("| load | p50 | p99 | max | CPU per sample | p50 <= 1.02x | p99 <= 1.05x |")
print("|---|---|---|---|---|---|---|")
for cond, rs in ratios.items():
    print(f"| {cond} | {fmt_ci(rs['p50'], 3)} | {fmt_ci(rs['p99'], 3)} | {fmt_ci(rs['max'], 3)} "
          f"| {fmt_ci(rs['cpu_per_sample'], 3)} | {met(rs['p50'], 1.02)} | {met(rs['p99'], 1.05)} |")
PY
