#!/usr/bin/env bash
# rtlab noise vs oslat (Debian rt-tests), identical settings, interleaved.
#
#   sudo bench/noise.sh [PAIRS] [SECONDS] [CPU]     (defaults: 20 pairs of 2 s blocks, last CPU)
#
# Both: one thread pinned to CPU, SCHED_FIFO 1, memory locked, the main thread elsewhere
# (oslat -C 0; rtlab's coordinator is not pinned), no /dev/cpu_dma_latency hold (oslat takes
# none). Two conditions: idle, and a FIFO 99 hog (3 ms every 200 ms) on the measured CPU,
# started once by `rtlab load` for the whole condition so both tools see the same hog. In
# each condition PAIRS pairs of blocks, the order alternating (A B, B A, ...).
#
# Compared per pair (rtlab / oslat), medians with 95 % intervals (bench/ci.py):
#   max     the longest gap
#   >=10us  gaps of 10 us or more per second (oslat: its 1 us buckets from 10 us up, overflow
#           included; rtlab: the interruptions over --threshold 10us)
#   >=1ms   gaps of about 1 ms or more per second (oslat -b 1024: its last bucket, 1023 us
#           and over; rtlab: gaps_over.1ms): the hog's runs and RT throttling
#   loops   loop iterations per second (each tool's own cost per iteration: oslat reads the
#           TSC, rtlab the vDSO clock and records every gap in its histogram)
#   p50, p99, p99.99 of the gap distribution: oslat's from its 1 us buckets (a bucket k holds
#           gaps under k us, so its percentiles are whole microseconds), rtlab's exact (ns) and
#           put in the same 1 us buckets for the ratio
set -euo pipefail
PAIRS=${1:-20}
SECS=${2:-2}
CPU=${3:-$(( $(nproc) - 1 ))}
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then echo "run as root (SCHED_FIFO, mlockall)" >&2; exit 2; fi
if ! command -v oslat >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rt-tests >/dev/null
fi
cargo build --release -q
RTLAB=$PWD/target/release/rtlab
WORK=$(mktemp -d)
LOAD_PID=
cleanup() { [ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

run_rtlab() { # $1 = output file
  "$RTLAB" noise --cpus "$CPU" --duration "${SECS}s" --threshold 10us --no-dma-latency -q \
    --json "$1" >/dev/null 2>>"$WORK/rtlab.err"
}
run_oslat() { # $1 = output file
  oslat -c "$CPU" -C 0 -D "$SECS" -f 1 -b 1024 -q --json="$1" >/dev/null 2>>"$WORK/oslat.err"
}

for cond in idle hog; do
  if [ "$cond" = hog ]; then
    "$RTLAB" load "hog:99:3ms/200ms:$CPU" --duration 1h -q >/dev/null 2>&1 &
    LOAD_PID=$!
    sleep 1
  fi
  for i in $(seq 1 "$PAIRS"); do
    if [ $((i % 2)) = 1 ]; then
      run_rtlab "$WORK/$cond-rtlab-$i.json"; run_oslat "$WORK/$cond-oslat-$i.json"
    else
      run_oslat "$WORK/$cond-oslat-$i.json"; run_rtlab "$WORK/$cond-rtlab-$i.json"
    fi
    printf '.' >&2
  done
  if [ -n "$LOAD_PID" ]; then kill "$LOAD_PID"; wait "$LOAD_PID" 2>/dev/null || true; LOAD_PID=; fi
done
echo >&2

python3 - "$WORK" "$PAIRS" "$SECS" "$CPU" <<'EOF'
import json, sys
sys.path.insert(0, "bench")
from ci import fmt_ci
work, pairs, secs, cpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def rtlab(path):
    s = json.load(open(path))["series"][0]
    spun = s["config"]["spun_ns"] / 1e9
    bucket = lambda ns: float(int(ns // 1000) + 1)
    return {"max": s["max"] / 1e3, "over": s["config"]["interruptions"] / spun,
            "p50": bucket(s["p50"]), "p99": bucket(s["p99"]), "p9999": bucket(s["p9999"]),
            "p50ns": s["p50"], "p99ns": s["p99"], "p9999ns": s["p9999"],
            "ms": s["config"]["gaps_over"]["1ms"] / spun,
            "loops": s["count"] / spun}

def oslat(path):
    t = json.load(open(path))["thread"]["0"]
    h = {int(k): v for k, v in t["histogram"].items()}
    dur = t["duration"]
    total, seen, q = sum(h.values()), 0, {}
    for k in sorted(h):
        seen += h[k]
        for name, frac in (("p50", 0.5), ("p99", 0.99), ("p9999", 0.9999)):
            if name not in q and seen >= frac * total:
                q[name] = float(k)
    return {**q, "max": float(t["max"]), "over": sum(v for k, v in h.items() if k >= 11) / dur,
            "ms": h.get(1024, 0) / dur,
            "loops": sum(h.values()) / dur}

print(f"rtlab noise vs oslat on CPU {cpu}: {pairs} pairs of {secs} s blocks per condition, "
      "SCHED_FIFO 1, interleaved")
print()
print("| condition | metric | rtlab (median) | oslat (median) | rtlab / oslat [95 % CI] |")
print("|---|---|---|---|---|")
med = lambda xs: sorted(xs)[len(xs) // 2]
for cond in ("idle", "hog"):
    a = [rtlab(f"{work}/{cond}-rtlab-{i}.json") for i in range(1, pairs + 1)]
    b = [oslat(f"{work}/{cond}-oslat-{i}.json") for i in range(1, pairs + 1)]
    for key, label, unit in (("p50", "p50 (1 us buckets)", "us"), ("p99", "p99 (1 us buckets)", "us"),
                             ("p9999", "p99.99 (1 us buckets)", "us"), ("max", "max gap", "us"),
                             ("over", "gaps >= 10 us", "/s"),
                             ("ms", "gaps >= 1 ms", "/s"), ("loops", "loops", "/s")):
        ratios = [x[key] / y[key] for x, y in zip(a, b) if y[key] > 0]
        print(f"| {cond} | {label} | {med([x[key] for x in a]):.4g} {unit} | "
              f"{med([y[key] for y in b]):.4g} {unit} | {fmt_ci(ratios)} |")
    print(f"| {cond} | rtlab exact p50 / p99 / p99.99 | {med([x['p50ns'] for x in a]):.0f} / "
          f"{med([x['p99ns'] for x in a]):.0f} / {med([x['p9999ns'] for x in a]):.0f} ns | - | - |")
EOF
