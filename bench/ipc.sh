#!/usr/bin/env bash
# rtlab ipc (rtlab-shm vs the kernel's mechanisms), with rt-tests pmqtest and ptsematest.
#
#   sudo bench/ipc.sh [RUNS] [SECONDS]        (defaults: 3 runs of 10 s)
#
# 1. `rtlab ipc --size 64,1KiB` RUNS times (parent and child on two CPUs, SCHED_FIFO 50):
#    rtlab-shm vs posix-mq, rtt p50 and throughput ratios per run.
# 2. `rtlab ipc --same-cpu --size 64` once.
# 3. pmqtest and ptsematest (-S: pairs of threads on one CPU, FIFO 50, 1 ms intervals, 5000
#    loops): one-way wake-up latency through a POSIX mq and a POSIX semaphore, as context.
set -euo pipefail
RUNS=${1:-3}
SECS=${2:-10}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (SCHED_FIFO)" >&2; exit 2; fi
command -v pmqtest >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rt-tests >/dev/null; }
cargo build --release -q
R=target/release/rtlab
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "# ipc: $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ)"
for r in $(seq 1 "$RUNS"); do
  "$R" ipc --duration "${SECS}s" --size 64,1KiB --quiet --json "$WORK/ipc-$r.json" >/dev/null
done
"$R" ipc --duration 6s --size 64 --same-cpu --quiet --json "$WORK/same.json" >/dev/null
pmqtest -S -p 50 -i 1000 -l 5000 -q > "$WORK/pmqtest.txt" 2>&1 || true
ptsematest -S -p 50 -i 1000 -l 5000 -q > "$WORK/ptsematest.txt" 2>&1 || true
python3 - "$WORK" "$RUNS" <<'PY'
import json, re, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
docs = [json.load(open(f"{work}/ipc-{r}.json")) for r in range(1, runs + 1)]
def get(doc, name, key):
    s = next((s for s in doc["series"] if s["name"] == name), None)
    return None if s is None else s.get(key)
mechs = ["rtlab-shm", "posix-mq", "sysv-msg", "pipe", "unix-stream", "unix-dgram", "eventfd-shm"]
for size in ("64B", "1KiB"):
    print(f"\n### {size}, two CPUs (run 1)\n")
    print("| mechanism | rtt p50 us | rtt p99 us | rtt max us | throughput msg/s |")
    print("|---|---|---|---|---|")
    d = docs[0]
    for m in mechs:
        p50, p99, mx = (get(d, f"{m}/rtt/{size}", k) for k in ("p50", "p99", "max"))
        tp = get(d, f"{m}/throughput/{size}", "value")
        print(f"| {m} | {p50/1e3:.2f} | {p99/1e3:.2f} | {mx/1e3:.1f} | {tp:,.0f} |")
print("\n| target | per run | median | met? |")
print("|---|---|---|---|")
for size in ("64B", "1KiB"):
    rtt = [get(d, f"rtlab-shm/rtt/{size}", "p50") / get(d, f"posix-mq/rtt/{size}", "p50") for d in docs]
    tp = [get(d, f"rtlab-shm/throughput/{size}", "value") / get(d, f"posix-mq/throughput/{size}", "value") for d in docs]
    fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
    print(f"| {size}: rtlab-shm rtt p50 <= 0.5x posix-mq | {fmt(rtt)} | {statistics.median(rtt):.2f} | {'yes' if statistics.median(rtt) <= 0.5 else 'NO'} |")
    print(f"| {size}: rtlab-shm throughput >= 3x posix-mq | {fmt(tp)} | {statistics.median(tp):.2f} | {'yes' if statistics.median(tp) >= 3 else 'NO'} |")
s = json.load(open(f"{work}/same.json"))
print("\n### 64B, both processes on one CPU\n")
print("| mechanism | rtt p50 us | throughput msg/s |")
print("|---|---|---|")
for m in mechs:
    print(f"| {m} | {get(s, f'{m}/rtt', 'p50')/1e3:.2f} | {get(s, f'{m}/throughput', 'value'):,.0f} |")
for tool in ("pmqtest", "ptsematest"):
    text = open(f"{work}/{tool}.txt").read()
    rows = re.findall(r"Min\s+(\d+), Cur\s+\d+, Avg\s+(\d+), Max\s+(\d+)", text)
    print(f"\n{tool} (one-way wake-up, thread pairs on one CPU, us): " + "; ".join(f"min {a} avg {b} max {c}" for a, b, c in rows))
PY
