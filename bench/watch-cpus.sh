#!/usr/bin/env bash
# What tracing only the watched threads' CPUs saves the rest of the machine (issue 17).
#
#   sudo bench/watch-cpus.sh [BLOCKS]        (default 30)
#
# The watched program (examples/c/periodic.c, rt-loop, 1 ms, SCHED_FIFO 80) is pinned to
# CPU 0. On CPU 1, a context-switch loop (bench/switch-loop.c: two threads passing a byte
# through pipes) measures its own cost per round trip for 1 s, in blocks interleaved
# A B C A B C ...: the program alone (A), watched by `rtlab watch` (B: the default, which
# traces CPU 0 only, where rt-loop may run, and the wakeups of CPU 0's tasks from anywhere),
# and by `rtlab watch --all-cpus` (C: every CPU). Ratios B/A and C/A (medians with 95 %
# intervals, bench/ci.py), and the watcher's own CPU time per second in B and C.
set -euo pipefail
BLOCKS=${1:-30}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (eBPF, SCHED_FIFO)" >&2; exit 2; fi
if [ "$(nproc)" -lt 2 ]; then echo "skipped: needs two CPUs"; exit 0; fi
cargo build --profile profiling -q
RTLAB=$PWD/target/profiling/rtlab
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cc -O2 -pthread -o "$WORK/periodic" examples/c/periodic.c
cc -O2 -pthread -o "$WORK/switch-loop" bench/switch-loop.c
echo "# rtlab watch CPU-filter bench: $BLOCKS blocks, $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"

# CPU time (ms) a process has used so far.
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) * 1000 / hz}' "/proc/$1/stat"; }

: >"$WORK/rows.txt"
for b in $(seq 1 "$BLOCKS"); do
  row=""
  for mode in alone default all; do
    "$RTLAB" exec --cpus 0 --policy fifo --prio 80 -- "$WORK/periodic" 3 1000 >/dev/null 2>&1 &
    prog=$!
    sleep 0.2
    w=""
    if [ "$mode" != alone ]; then
      flags=""
      [ "$mode" = all ] && flags="--all-cpus"
      # shellcheck disable=SC2086
      "$RTLAB" watch --pid "$prog" --thread rt-loop --quiet $flags --json "$WORK/$mode.json" >/dev/null 2>&1 &
      w=$!
      sleep 0.5
    fi
    before=$([ -n "$w" ] && cpu_ms "$w" || echo 0)
    v=$(taskset -c 1 "$WORK/switch-loop" 1)
    used=$([ -n "$w" ] && awk -v a="$(cpu_ms "$w")" -v b="$before" 'BEGIN { print a - b }' || echo 0)
    [ -n "$w" ] && { kill -INT "$w" 2>/dev/null || true; wait "$w" 2>/dev/null || true; }
    wait "$prog" 2>/dev/null || true
    row="$row $v $used"
  done
  echo "$row" >>"$WORK/rows.txt"
done
python3 - "$WORK" <<'PY'
import json, sys
sys.path.insert(0, "bench")
from ci import fmt_ci
work = sys.argv[1]
rows = [list(map(float, l.split())) for l in open(f"{work}/rows.txt")]
med = lambda xs: sorted(xs)[len(xs) // 2]
traced = {m: json.load(open(f"{work}/{m}.json"))["verdict"].get("traced_cpus", "?") for m in ("default", "all")}
print()
print("| watcher | CPUs traced | ns per round trip on CPU 1 (median) | ratio to alone, median [95 % interval] | watcher's CPU time, ms per s (median) |")
print("|---|---|---|---|---|")
print(f"| none | | {med([r[0] for r in rows]):.0f} | | |")
print(f"| rtlab watch (default) | {traced['default']} | {med([r[2] for r in rows]):.0f} | {fmt_ci([r[2] / r[0] for r in rows])} | {med([r[3] for r in rows]):.0f} |")
print(f"| rtlab watch --all-cpus | {traced['all']} | {med([r[4] for r in rows]):.0f} | {fmt_ci([r[4] / r[0] for r in rows])} | {med([r[5] for r in rows]):.0f} |")
PY
