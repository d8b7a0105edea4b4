#!/usr/bin/env bash
# rtlab ipc: every rtlab-ipc variant against the kernel's mechanisms, with rt-tests pmqtest
# and ptsematest.
#
#   sudo bench/ipc.sh [RUNS] [SECONDS] [PARTS]   (defaults: 3 runs of 40 s; parts 1,2,3,4)
#
# 1. `rtlab ipc --size 64,1KiB,16KiB,64KiB --busy-poll` RUNS times (parent and child on two
#    CPUs, SCHED_FIFO 50; all mechanisms, interleaved inside each run). For 16/64 KiB the
#    script raises fs.mqueue.msgsize_max, kernel.msgmax and kernel.msgmnb to 65536 for the
#    run (POSIX mq and SysV queues refuse larger messages by default) and restores them.
#    The targets: rtlab-shm vs posix-mq, rtt p50 and throughput ratios per run, 64 B and 1 KiB.
# 2. `rtlab ipc --same-cpu --size 64` once.
# 3. pmqtest and ptsematest (-S: pairs of threads on one CPU, FIFO 50, 1 ms intervals, 5000
#    loops): one-way wake-up latency through a POSIX mq and a POSIX semaphore, as context.
# 4. rtlab-ipc beside iceoryx2 (crates.io, bench/iceoryx2, built outside the workspace into
#    target/iceoryx2): a ping-pong between two processes pinned to two CPUs at SCHED_FIFO 50,
#    64 B and 1 KiB, 20 blocks of 400 ms per link, interleaved: both busy-polling, and each
#    waiting its own way (rtlab: a 20 us spin, then a futex; iceoryx2: its event listener).
set -euo pipefail
RUNS=${1:-3}
SECS=${2:-40}
PARTS=${3:-1,2,3,4}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (SCHED_FIFO)" >&2; exit 2; fi
command -v pmqtest >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rt-tests >/dev/null; }
cargo build --profile profiling -q
R=target/profiling/rtlab
WORK=$(mktemp -d)
LIMITS="fs.mqueue.msgsize_max kernel.msgmax kernel.msgmnb"
declare -A SAVED
for k in $LIMITS; do SAVED[$k]=$(sysctl -n "$k"); done
restore() {
  for k in $LIMITS; do sysctl -q -w "$k=${SAVED[$k]}"; done
  rm -rf "$WORK"
}
trap restore EXIT
for k in $LIMITS; do sysctl -q -w "$k=65536"; done
echo "# ipc: $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
if part 1 || part 2 || part 3; then
for r in $(seq 1 "$RUNS"); do
  "$R" ipc --duration "${SECS}s" --size 64,1KiB,16KiB,64KiB --busy-poll --quiet --json "$WORK/ipc-$r.json" >/dev/null
done
"$R" ipc --duration 10s --size 64 --same-cpu --busy-poll --quiet --json "$WORK/same.json" >/dev/null
pmqtest -S -p 50 -i 1000 -l 5000 -q > "$WORK/pmqtest.txt" 2>&1 || true
ptsematest -S -p 50 -i 1000 -l 5000 -q > "$WORK/ptsematest.txt" 2>&1 || true
python3 - "$WORK" "$RUNS" <<'PY'
import json, re, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
docs = [json.load(open(f"{work}/ipc-{r}.json")) for r in range(1, runs + 1)]
def get(doc, name, key):
    s = next((s for s in doc["series"] if s["name"] == name), None)
    return None if s is None else s.get(key)
mechs = ["rtlab-shm", "rtlab-shm-mpsc", "rtlab-shm-mutex-condvar", "rtlab-shm-mutex-semaphore",
         "posix-mq", "sysv-msg", "pipe", "unix-stream", "unix-dgram", "eventfd-shm", "rtlab-shm-busy"]
def med(name, key, size):
    xs = [get(d, f"{name}/{size}", key) for d in docs]
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
us = lambda x: "skipped" if x is None else f"{x/1e3:.2f}"
for size in ("64B", "1KiB", "16KiB", "64KiB"):
    print(f"\n### {size}, two CPUs (median of {runs} runs)\n")
    print("| mechanism | rtt p50 us | rtt p99 us | rtt max us | oneway p50 us | throughput msg/s | vs posix-mq |")
    print("|---|---|---|---|---|---|---|")
    mq = med("posix-mq/throughput", "value", size)
    for m in mechs:
        tp = med(f"{m}/throughput", "value", size)
        ratio = f"{tp/mq:.2f}x" if tp and mq else "-"
        print(f"| {m} | {us(med(f'{m}/rtt', 'p50', size))} | {us(med(f'{m}/rtt', 'p99', size))} | "
              f"{us(med(f'{m}/rtt', 'max', size))} | {us(med(f'{m}/oneway', 'p50', size))} | "
              f"{'skipped' if tp is None else f'{tp:,.0f}'} | {ratio} |")
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
    print(f"| {m} | {us(get(s, f'{m}/rtt', 'p50'))} | {get(s, f'{m}/throughput', 'value') or 0:,.0f} |")
for tool in ("pmqtest", "ptsematest"):
    text = open(f"{work}/{tool}.txt").read()
    rows = re.findall(r"Min\s+(\d+), Cur\s+\d+, Avg\s+(\d+), Max\s+(\d+)", text)
    print(f"\n{tool} (one-way wake-up, thread pairs on one CPU, us): " + "; ".join(f"min {a} avg {b} max {c}" for a, b, c in rows))
PY
fi
if part 4; then
  (cd bench/iceoryx2 && cargo build --release -q --target-dir ../../target/iceoryx2)
  for size in 64 1024; do
    target/iceoryx2/release/rtlab-bench-iceoryx2 "$size" 20 400 >>"$WORK/iox.txt" 2>"$WORK/iox.err" \
      || { echo "iceoryx2 ping-pong failed:"; tail -5 "$WORK/iox.err"; }
  done
  python3 - "$WORK" <<'PY'
import sys
sys.path.insert(0, "bench")
from ci import pingpong_table, read_pingpong
print("\n## rtlab-ipc beside iceoryx2 0.10.0: ping-pong between two processes, round trip, us")
pingpong_table(read_pingpong(f"{sys.argv[1]}/iox.txt"),
               [("rtlab-spin", "iceoryx2-spin", "busy-polling on both"), ("rtlab-wait", "iceoryx2-wait", "each its own wait")],
               ("rtlab-ipc", "iceoryx2"))
PY
fi
