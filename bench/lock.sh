#!/usr/bin/env bash
# rtlab's mutexes vs glibc pthread mutexes (and std, parking_lot), seed 003's method.
#
#   sudo bench/lock.sh [RUNS] [SECONDS]        (defaults: 30 runs of 2 s)
#
# Every run measures all implementations in one process, batch by batch round-robin, so
# machine drift hits them alike; glibc's mutexes are the real libc ones (pthread_mutex_*).
# Prints each series' median over the runs and each target ratio's median with its 95 %
# interval (order statistics over the runs, bench/ci.py); a target is met only when the
# interval's upper end is under it.
set -euo pipefail
RUNS=${1:-30}
SECS=${2:-2}
cd "$(dirname "$0")/.."
cargo build --profile profiling -q
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "# rtlab lock: $RUNS runs x ${SECS}s, $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
for r in $(seq 1 "$RUNS"); do
  target/profiling/rtlab lock --duration "${SECS}s" --quiet --json "$WORK/$r.json" >/dev/null
done
python3 - "$WORK" "$RUNS" <<'PY'
import json, sys
sys.path.insert(0, "bench")
from ci import fmt_ci, met
work, runs = sys.argv[1], int(sys.argv[2])
docs = [json.load(open(f"{work}/{r}.json")) for r in range(1, runs + 1)]
def val(doc, name):
    for s in doc["series"]:
        if s["name"] == name:
            return s.get("value", s.get("p50"))
    return None
names = [s["name"] for s in docs[0]["series"]]
print()
print(f"| series | median over {runs} runs [95 % interval] |")
print("|---|---|")
for n in names:
    vals = [v for v in (val(d, n) for d in docs) if v is not None]
    unit = "ns" if "condvar" not in n else "ns (p50)"
    print(f"| {n} ({unit}) | {fmt_ci(vals, 1)} |")
print()
print("| target | ratio: median [95 % interval] | met? |")
print("|---|---|---|")
for ours, theirs, limit in [
    ("rtlab-pi/uncontended", "glibc-normal/uncontended", 1.2),
    ("rtlab-pi/handoff", "glibc-pi/handoff", 1.0),
    ("rtlab-robust/uncontended", "glibc-robust/uncontended", 1.0),
]:
    ratios = [val(d, ours) / val(d, theirs) for d in docs]
    print(f"| {ours} <= {limit}x {theirs} | {fmt_ci(ratios)} | {met(ratios, limit)} |")
for ours, theirs in [("rtlab-robust/uncontended", "glibc-robust-pi/uncontended"),
                     ("rtlab-ceiling/uncontended", "glibc-pp/uncontended"),
                     ("rtlab-pi/condvar_wake", "glibc-normal/condvar_wake")]:
    ratios = [val(d, ours) / val(d, theirs) for d in docs if val(d, ours) and val(d, theirs)]
    if ratios:
        print(f"| (context) {ours} / {theirs} | {fmt_ci(ratios)} | - |")
PY
