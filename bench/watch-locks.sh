#!/usr/bin/env bash
# rtlab watch's `lock` kind (issue 17): what recording PI lock waits costs, and how its
# figures compare with the program's own measurement.
#
#   sudo bench/watch-locks.sh [BLOCKS]        (default 30)
#
# 1. System calls: examples' cheapest call (getppid, bench/syscall-loop.c) on CPU 1, 1 s
#    blocks interleaved A B C A B C ...: alone (A), beside `rtlab watch` of an idle process
#    (B: the default, lock waits only through function probes, absent on some kernels) and
#    beside `rtlab watch --locks` (C: on kernels without function probes, the raw syscall
#    tracepoints, which run a program on every system call). Ratios B/A and C/A.
# 2. examples/c/pilock.c (pi-waiter takes a PTHREAD_PRIO_INHERIT mutex every 100 us that
#    pi-holder holds for 200 us every ~1.2 ms), 3 runs of 5 s watched with --locks: rtlab's
#    pi-waiter lock series vs the waits the program measured itself (lock calls over 1 us).
# 3. The same program's own waits alone and watched with --locks, BLOCKS blocks of 3 s
#    interleaved: p50 and p99 ratios.
set -euo pipefail
BLOCKS=${1:-30}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (eBPF)" >&2; exit 2; fi
cargo build --profile profiling -q
RTLAB=$PWD/target/profiling/rtlab
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cc -O2 -o "$WORK/syscall-loop" bench/syscall-loop.c
cc -O2 -pthread -o "$WORK/pilock" examples/c/pilock.c
echo "# rtlab watch lock-kind bench: $BLOCKS blocks, $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"

probe_how() {
  sleep 60 &
  local idle=$!
  "$RTLAB" watch --pid "$idle" --duration 1s --quiet --json "$WORK/how.json" "$@" >/dev/null 2>&1 || true
  kill "$idle" 2>/dev/null || true
  wait "$idle" 2>/dev/null || true
  python3 -c "import json,sys; w=[x for x in json.load(open(sys.argv[1]))['warnings'] if 'lock series' in x]; print(w[0] if w else 'lock waits recorded')" "$WORK/how.json"
}
echo
echo "default: $(probe_how)"
echo "--locks: $(probe_how --locks)"

echo
echo "## 1. a system call's cost (getppid, CPU 1), alone / watched / watched --locks"
: >"$WORK/sys.txt"
for b in $(seq 1 "$BLOCKS"); do
  a=$(taskset -c 1 "$WORK/syscall-loop" 1)
  for flags in "" "--locks"; do
    sleep 60 &
    idle=$!
    # shellcheck disable=SC2086
    "$RTLAB" watch --pid "$idle" --quiet $flags >/dev/null 2>&1 &
    w=$!
    sleep 0.7
    v=$(taskset -c 1 "$WORK/syscall-loop" 1)
    kill -INT "$w" 2>/dev/null || true
    wait "$w" 2>/dev/null || true
    kill "$idle" 2>/dev/null || true
    wait "$idle" 2>/dev/null || true
    a="$a $v"
  done
  echo "$a" >>"$WORK/sys.txt"
done
python3 - "$WORK/sys.txt" <<'PY'
import sys
sys.path.insert(0, "bench")
from ci import fmt_ci
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda xs: sorted(xs)[len(xs) // 2]
print("| | ns per getppid (median of blocks) | ratio to alone, median [95 % interval] |")
print("|---|---|---|")
print(f"| alone | {med([r[0] for r in rows]):.0f} | |")
print(f"| watched (default) | {med([r[1] for r in rows]):.0f} | {fmt_ci([r[1] / r[0] for r in rows])} |")
print(f"| watched --locks | {med([r[2] for r in rows]):.0f} | {fmt_ci([r[2] / r[0] for r in rows])} |")
PY

echo
echo "## 2. the lock kind vs the program's own measurement (3 runs of 5 s, --locks)"
echo "| run | waits rtlab / program | p50 rtlab | p50 program | ratio | p99 rtlab | p99 program | ratio |"
echo "|---|---|---|---|---|---|---|---|"
for run in 1 2 3; do
  "$RTLAB" watch --locks --thread pi-waiter --quiet --json "$WORK/l.json" -- "$WORK/pilock" 5 200 >"$WORK/l.out" 2>/dev/null
  python3 - "$WORK" "$run" <<'PY'
import json, sys
work, run = sys.argv[1], sys.argv[2]
f = next((l.split() for l in open(f"{work}/l.out") if l.startswith("waits")), [])
doc = json.load(open(f"{work}/l.json"))
s = [x for x in doc["series"] if x["name"] == "pi-waiter/lock"]
if not s or len(f) < 7:
    print(f"| {run} | skipped: no lock series or no program output | | | | | | |")
else:
    s = s[0]
    n, p50, p99 = int(f[1]), int(f[3]), int(f[5])
    print(f"| {run} | {s['count']} / {n} | {s['p50']/1e3:.1f} us | {p50/1e3:.1f} us | {s['p50']/p50:.2f} | {s['p99']/1e3:.1f} us | {p99/1e3:.1f} us | {s['p99']/p99:.2f} |")
PY
done

echo
echo "## 3. cost on the program's own lock waits: alone (A) and watched --locks (B), $BLOCKS x 3 s"
: >"$WORK/alone.txt"
: >"$WORK/watched.txt"
for b in $(seq 1 "$BLOCKS"); do
  "$WORK/pilock" 3 200 >>"$WORK/alone.txt"
  "$RTLAB" watch --locks --thread pi-waiter --quiet -- "$WORK/pilock" 3 200 2>/dev/null >>"$WORK/watched.txt" || true
done
python3 - "$WORK" <<'PY'
import sys
sys.path.insert(0, "bench")
from ci import fmt_ci
work = sys.argv[1]
def rows(name):
    return [dict(p50=int(l.split()[3]), p99=int(l.split()[5])) for l in open(f"{work}/{name}.txt") if l.startswith("waits") and len(l.split()) >= 7]
a, b = rows("alone"), rows("watched")
print("| ratio watched / alone | median [95 % interval] |")
print("|---|---|")
for key in ("p50", "p99"):
    print(f"| {key} | {fmt_ci([y[key] / x[key] for x, y in zip(a, b)])} |")
PY
