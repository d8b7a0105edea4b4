#!/usr/bin/env bash
# Priority inversion (seed 003) and mmap/futex (seed 000), with pi_stress side by side.
#
#   sudo bench/invert.sh [ROUNDS] [SECONDS] [CHECK_SECONDS]      (defaults: 3, 10, 30)
#
# 1. `rtlab invert` ROUNDS times with its defaults (one CPU, hold 1 ms, high every 10 ms, one
#    hog spinning 30 ms of every 50 ms): worst waits per variant, PI/no-PI ratio.
# 2. pi_stress (Debian rt-tests, one group, uniprocessor) and `rtlab invert --check`, each
#    CHECK_SECONDS, one after the other: both must finish without a stall.
# 3. `rtlab mmap` twice (8 s): the seed-000 reading on this kernel.
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-10}
CHECK=${3:-30}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (SCHED_FIFO)" >&2; exit 2; fi
command -v pi_stress >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rt-tests >/dev/null; }
cargo build --profile profiling -q
R=target/profiling/rtlab
WORK=$(mktemp -d)
# KEEP=1 keeps the raw result documents.
trap '[ "${KEEP:-0}" = 1 ] && echo "raw results: $WORK" >&2 || rm -rf "$WORK"' EXIT
echo "# invert and mmap: $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ)"
for r in $(seq 1 "$ROUNDS"); do
  "$R" invert --duration "${SECS}s" --quiet --json "$WORK/invert-$r.json" >/dev/null
done
pi_stress --duration "$CHECK" --groups 1 --uniprocessor --mlockall --quiet --json="$WORK/pi_stress.json" >/dev/null 2>&1 \
  && echo ok > "$WORK/pi_stress.rc" || echo "failed ($?)" > "$WORK/pi_stress.rc"
"$R" invert --check --duration "${CHECK}s" --quiet --json "$WORK/check.json" >/dev/null 2>&1 \
  && echo ok > "$WORK/check.rc" || echo "failed ($?)" > "$WORK/check.rc"
for r in 1 2; do
  "$R" mmap --duration 8s --quiet --json "$WORK/mmap-$r.json" >/dev/null
done
python3 - "$WORK" "$ROUNDS" "$CHECK" <<'PY'
import json, statistics, sys
work, rounds, check = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def series(doc, name):
    return next((s for s in doc["series"] if s["name"] == name), None)
docs = [json.load(open(f"{work}/invert-{r}.json")) for r in range(1, rounds + 1)]
variants = ["none/glibc", "none/rtlab", "inherit/rtlab", "inherit/glibc", "protect/rtlab", "protect/glibc"]
print("\n| variant | max wait per run (ms) | p99 per run (ms) | bounded per run |")
print("|---|---|---|---|")
for v in variants:
    ss = [series(d, v) for d in docs]
    maxes = ", ".join(f"{s['max'] / 1e6:.2f}" for s in ss)
    p99s = ", ".join(f"{s['p99'] / 1e6:.2f}" for s in ss)
    bounded = ", ".join("yes" if s["config"]["bounded"] else "NO" for s in ss)
    print(f"| {v} | {maxes} | {p99s} | {bounded} |")
print("\n| ratio of worst waits | per run | median | target |")
print("|---|---|---|---|")
for a, b in [("inherit/rtlab", "none/rtlab"), ("inherit/glibc", "none/glibc"), ("protect/rtlab", "none/rtlab"), ("protect/glibc", "none/glibc")]:
    rs = [series(d, a)["max"] / series(d, b)["max"] for d in docs]
    target = "<= 0.2" if a.startswith("inherit") else "-"
    per_run = ", ".join(f"{x:.3f}" for x in rs)
    print(f"| {a} / {b} | {per_run} | {statistics.median(rs):.3f} | {target} |")
ps = json.load(open(f"{work}/pi_stress.json"))
ck = json.load(open(f"{work}/check.json"))
groups = series(ck, "check/groups")["value"]; stalls = series(ck, "check/stalls")["value"]
wait = series(ck, "check/lock_wait")
print("\n| tool | result | inversions | per second | worst high wait |")
print("|---|---|---|---|---|")
ps_rc = open(work + "/pi_stress.rc").read().strip()
ck_rc = open(work + "/check.rc").read().strip()
print(f"| pi_stress (1 group, -u) | {ps_rc} | {ps['inversion']} | {ps['inversion'] / check:.0f} | not reported |")
print(f"| rtlab invert --check | {ck_rc}, {stalls:.0f} stalls | {groups:.0f} | {groups / check:.0f} | {wait['max'] / 1e6:.2f} ms |")
print()
for r in (1, 2):
    reading = json.load(open(f"{work}/mmap-{r}.json"))["verdict"]["reading"]
    print(f"mmap run {r}: {reading}")
m = json.load(open(f"{work}/mmap-1.json"))
print("\n| series (mmap run 1) | p99 us | max us |")
print("|---|---|---|")
for s in m["series"]:
    print(f"| {s['name']} | {s['p99']/1e3:.1f} | {s['max']/1e3:.1f} |")
PY
