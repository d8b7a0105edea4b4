#!/usr/bin/env bash
# rtlab's mutexes vs glibc pthread mutexes (and std, parking_lot), seed 003's method.
#
#   sudo bench/lock.sh [RUNS] [SECONDS]        (defaults: 3 runs of 20 s)
#
# Every run measures all implementations in one process, batch by batch round-robin, so
# machine drift hits them alike; glibc's mutexes are the real libc ones (pthread_mutex_*).
# Prints each run's values and the target ratios (median over runs).
set -euo pipefail
RUNS=${1:-3}
SECS=${2:-20}
cd "$(dirname "$0")/.."
cargo build --release -q
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "# rtlab lock: $RUNS runs x ${SECS}s, $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ)"
for r in $(seq 1 "$RUNS"); do
  target/release/rtlab lock --duration "${SECS}s" --quiet --json "$WORK/$r.json" >/dev/null
done
python3 - "$WORK" "$RUNS" <<'PY'
import json, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
docs = [json.load(open(f"{work}/{r}.json")) for r in range(1, runs + 1)]
def val(doc, name):
    for s in doc["series"]:
        if s["name"] == name:
            return s.get("value", s.get("p50"))
    return None
names = [s["name"] for s in docs[0]["series"]]
print()
print("| series | " + " | ".join(f"run {r}" for r in range(1, runs + 1)) + " | median |")
print("|---|" + "---|" * (runs + 1))
for n in names:
    vals = [val(d, n) for d in docs]
    unit = "ns" if "condvar" not in n else "ns (p50)"
    cells = " | ".join(f"{v:.1f}" if v is not None else "-" for v in vals)
    med = statistics.median(v for v in vals if v is not None)
    print(f"| {n} ({unit}) | {cells} | {med:.1f} |")
print()
print("| target | ratio per run | median | met? |")
print("|---|---|---|---|")
for ours, theirs, limit in [
    ("rtlab-pi/uncontended", "glibc-normal/uncontended", 1.2),
    ("rtlab-pi/handoff", "glibc-pi/handoff", 1.0),
    ("rtlab-robust/uncontended", "glibc-robust/uncontended", 1.0),
]:
    ratios = [val(d, ours) / val(d, theirs) for d in docs]
    med = statistics.median(ratios)
    print(f"| {ours} <= {limit}x {theirs} | {', '.join(f'{x:.2f}' for x in ratios)} | {med:.2f} | {'yes' if med <= limit else 'NO'} |")
for ours, theirs in [("rtlab-robust/uncontended", "glibc-robust-pi/uncontended"),
                     ("rtlab-ceiling/uncontended", "glibc-pp/uncontended"),
                     ("rtlab-pi/condvar_wake", "glibc-normal/condvar_wake")]:
    ratios = [val(d, ours) / val(d, theirs) for d in docs if val(d, ours) and val(d, theirs)]
    if ratios:
        print(f"| (context) {ours} / {theirs} | {', '.join(f'{x:.2f}' for x in ratios)} | {statistics.median(ratios):.2f} | - |")
PY
