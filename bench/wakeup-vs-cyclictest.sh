#!/usr/bin/env bash
# rtlab wakeup vs cyclictest (Debian rt-tests), identical settings, interleaved.
#
#   sudo bench/wakeup-vs-cyclictest.sh [ROUNDS] [SECONDS]      (defaults: 5 rounds, 10 s)
#
# Settings for both: SCHED_FIFO 95, 1 ms interval, one thread pinned per CPU, mlockall,
# /dev/cpu_dma_latency held at 0, equal intervals for all threads (cyclictest -d0); neither
# tool wakes its threads in lockstep (rtlab spreads thread phases over the interval).
# Each round runs both tools idle and then both under `stress-ng --cpu <ncpu>`; the order of
# the two tools alternates between rounds so neither always runs first.
#
# Percentiles: cyclictest records whole microseconds (latency truncated to a 1 us bin), so
# p50/p99 of both tools are compared on the same 1 us bins (bin + 0.5 us); rtlab's exact ns
# p50 is shown beside. max is compared as reported (cyclictest: us, rtlab: ns).
# CPU per sample = (user + sys CPU time of the whole process) / samples taken.
set -euo pipefail
ROUNDS=${1:-5}
SECS=${2:-10}
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then echo "run as root (SCHED_FIFO, mlockall, cpu_dma_latency)" >&2; exit 2; fi
need=()
command -v cyclictest >/dev/null || need+=(rt-tests)
command -v stress-ng >/dev/null || need+=(stress-ng)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
cargo build --profile profiling -q
RTLAB=$PWD/target/profiling/rtlab
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
    cyclictest -m -p95 -i1000 -a -t -d0 -D "${SECS}s" -q -h 100000 --json="$1.json"
}
run_rtlab() {
  timed "$1.time" \
    "$RTLAB" wakeup --duration "${SECS}s" --interval 1ms --prio 95 --quiet --json "$1.json"
}

echo "# rtlab wakeup vs cyclictest: $ROUNDS rounds x ${SECS}s, $NCPU CPUs, $(uname -r), $(date -u +%FT%TZ)"
for round in $(seq 1 "$ROUNDS"); do
  for cond in idle stress; do
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

python3 - "$WORK" "$ROUNDS" <<'PY'
import json, sys, statistics
work, rounds = sys.argv[1], int(sys.argv[2])

def cpu_rss(prefix):
    u, s, rss = open(prefix + ".time").read().split()[-3:]
    return float(u) + float(s), int(rss)

def ct_percentile(hist, q):
    # Nearest rank over 1 us bins; a bin k holds latencies in [k, k+1) us.
    items = sorted((int(k), v) for k, v in hist.items())
    total = sum(v for _, v in items)
    rank, seen = max(1, -(-int(q * total * 1e6) // int(1e6))), 0
    for k, v in items:
        seen += v
        if seen >= rank:
            return k + 0.5
    return items[-1][0] + 0.5

def cyclictest(prefix):
    d = json.load(open(prefix + ".json"))
    th = d["thread"].values()
    samples = sum(t["cycles"] for t in th)
    cpu, rss = cpu_rss(prefix)
    return dict(p50=statistics.mean(ct_percentile(t["histogram"], .5) for t in th),
                p99=statistics.mean(ct_percentile(t["histogram"], .99) for t in th),
                max=max(t["max"] for t in th), exact50=None,
                cpu_per_sample=cpu / samples * 1e9, rss=rss, samples=samples)

def rtlab(prefix):
    d = json.load(open(prefix + ".json"))
    ss = d["series"]
    samples = sum(s["raw_count"] for s in ss)
    cpu, rss = cpu_rss(prefix)
    binned = lambda ns: ns // 1000 + 0.5
    return dict(p50=statistics.mean(binned(s["p50"]) for s in ss),
                p99=statistics.mean(binned(s["p99"]) for s in ss),
                max=max(s["max"] for s in ss) / 1000, exact50=statistics.mean(s["p50"] for s in ss) / 1000,
                cpu_per_sample=cpu / samples * 1e9, rss=rss, samples=samples)

ratios = {"idle": [], "stress": []}
print()
print("| round | load | tool | samples | p50 us (1us bins) | p50 us exact | p99 us | max us | CPU ns/sample | peak RSS KiB |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in range(1, rounds + 1):
    for cond in ("idle", "stress"):
        c = cyclictest(f"{work}/{r}-{cond}-cyclictest")
        t = rtlab(f"{work}/{r}-{cond}-rtlab")
        for name, m in (("cyclictest", c), ("rtlab", t)):
            ex = "-" if m["exact50"] is None else f"{m['exact50']:.2f}"
            print(f"| {r} | {cond} | {name} | {m['samples']} | {m['p50']:.1f} | {ex} | {m['p99']:.1f} | {m['max']:.1f} | {m['cpu_per_sample']:.0f} | {m['rss']} |")
        ratios[cond].append({k: (t[k] / c[k] if c[k] else float('nan')) for k in ("p50", "p99", "max", "cpu_per_sample")})
print()
print("Ratios rtlab / cyclictest (median over rounds; below 1.00 means rtlab is lower):")
print()
print("| load | p50 | p99 | max | CPU per sample |")
print("|---|---|---|---|---|")
for cond, rs in ratios.items():
    med = lambda k: statistics.median(x[k] for x in rs)
    print(f"| {cond} | {med('p50'):.3f} | {med('p99'):.3f} | {med('max'):.3f} | {med('cpu_per_sample'):.3f} |")
PY
