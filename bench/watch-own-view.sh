#!/usr/bin/env bash
# rtlab watch against the watched program's own figures (the program's own view).
#
#   sudo bench/watch-own-view.sh [RUNS] [SECONDS]      (defaults: 10 runs of 10 s)
#
# Two programs that measure their own lateness, each started by `rtlab watch -- ...` so that
# every period is watched: examples/c/periodic.c (thread rt-loop, SCHED_FIFO 80, 1 ms
# absolute deadlines, prints its own count, p50, p99, max in ns) and rt-tests' cyclictest
# (-t1 -p80 -i997, each of its periods in ns: -N -v), and the first started by a wrapper
# shell (`sh -c '...; true'`: the program is the shell's child). Per run: the watch's `timer` series of
# the measuring thread over the program's own figures (count, p50, p99, max), idle and
# beside `stress-ng --switch 2` (a busy time-sharing load); medians with 95 % intervals
# (bench/ci.py) over the runs, and the observer's time per second of watch.
set -euo pipefail
RUNS=${1:-10}
SECS=${2:-10}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (eBPF, SCHED_FIFO)" >&2; exit 2; fi
command -v cyclictest >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rt-tests >/dev/null; }
command -v stress-ng >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; }
# RTLAB=path runs a copy of the binary (a build elsewhere cannot replace it mid-run).
if [ -z "${RTLAB:-}" ]; then cargo build --release -q; RTLAB=$PWD/target/release/rtlab; fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"; kill $(jobs -p) 2>/dev/null || true' EXIT
cc -O2 -pthread -o "$WORK/periodic" examples/c/periodic.c
LOOPS=$((SECS * 1000))
echo "# rtlab watch vs the program's own figures: $RUNS runs x ${SECS}s, $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
: >"$WORK/rows.txt"
for load in idle busy; do
  for run in $(seq 1 "$RUNS"); do
    if [ $load = busy ]; then stress-ng --switch 2 --timeout $((SECS + 5))s >/dev/null 2>&1 & BUSY=$!; sleep 0.5; fi
    "$RTLAB" watch --thread rt-loop --quiet --json "$WORK/p.json" -- \
      "$RTLAB" exec --policy fifo --prio 80 -- "$WORK/periodic" "$SECS" 1000 >"$WORK/p.txt" 2>/dev/null || true
    "$RTLAB" watch --rt-only --quiet --json "$WORK/c.json" -- \
      cyclictest -t1 -p80 -i997 -l "$LOOPS" -q -m -N -v >"$WORK/cv.txt" 2>/dev/null || true
    "$RTLAB" watch --thread rt-loop --quiet --json "$WORK/w.json" -- \
      sh -c "'$RTLAB' exec --policy fifo --prio 80 -- '$WORK/periodic' $SECS 1000; true" >"$WORK/w.txt" 2>/dev/null || true
    if [ $load = busy ]; then kill $BUSY 2>/dev/null || true; wait $BUSY 2>/dev/null || true; fi
    python3 - "$WORK" "$load" "$SECS" >>"$WORK/rows.txt" <<'PY'
import json, re, sys
work, load, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
def timer(doc, prefix):
    d = json.load(open(doc))
    t = [s for s in d["series"] if s["name"].startswith(prefix) and s["name"].endswith("/timer") and s["name"].count("/") == 2]
    obs = [s["value"] for s in d["series"] if s["name"] == "watch/observer"]
    # The watched thread's own events lost (delays cut short), and rtlab named as the main
    # cause of an outlier of that thread.
    lost = bool(t and t[0].get("unmeasured", 0) > 0)
    return (t[0] if t else None), (obs[0] if obs else 0.0), lost
def observer_named(doc, prefix):
    d = json.load(open(doc))
    return sum(1 for o in d.get("outliers", []) if o["series"].startswith(prefix) and o["causes"] and o["causes"][0]["kind"] == "observer")
for prog, out, doc in [("periodic", "p.txt", "p.json"), ("wrapper", "w.txt", "w.json")]:
    m = re.search(r"samples (\d+) p50 (\d+) p99 (\d+) max (\d+)", open(f"{work}/{out}").read())
    t, obs, lost = timer(f"{work}/{doc}", "rt-loop/")
    if m and t:
        n, p50, p99, mx = map(int, m.groups())
        print(json.dumps({"prog": prog, "load": load, "n": t["count"] / n, "p50": t["p50"] / p50, "p99": t["p99"] / p99, "max": t["max"] / mx, "obs": obs / 1e6 / secs, "lost": lost, "named": observer_named(f"{work}/{doc}", "rt-loop/")}))
# cyclictest's every period, in ns (-N -v: "thread: cycle: latency" each, printed at its end).
vals = sorted(int(m.group(1)) for m in re.finditer(r"(?m)^\s*0:\s*\d+:\s*(\d+)\s*$", open(f"{work}/cv.txt").read()))
tot = len(vals)
def pct(q):
    return vals[min(tot - 1, int(q * tot))]
t, obs, lost = timer(f"{work}/c.json", "cyclictest/")
if t and tot:
    print(json.dumps({"prog": "cyclictest", "load": load, "n": t["count"] / tot, "p50": t["p50"] / pct(0.5), "p99": t["p99"] / pct(0.99), "max": t["max"] / vals[-1], "obs": obs / 1e6 / secs, "lost": lost, "named": observer_named(f"{work}/c.json", "cyclictest/")}))
PY
  done
done
python3 - "$WORK/rows.txt" <<'PY'
import json, sys
sys.path.insert(0, "bench")
from ci import median_ci
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| program | load | runs | runs with the thread's events lost | count ratio | p50 ratio | p99 ratio | max ratio | observer ms/s | outliers of the thread whose main cause is the observer |")
print("|---|---|---|---|---|---|---|---|---|---|")
def f(v, d=3):
    m, lo, hi = median_ci(v)
    return f"{m:.{d}f}" + (f" [{lo:.{d}f}, {hi:.{d}f}]" if lo is not None else "")
for prog in ["periodic", "cyclictest", "wrapper"]:
    for load in ["idle", "busy"]:
        r = [x for x in rows if x["prog"] == prog and x["load"] == load]
        if not r:
            continue
        print(f"| {prog} | {load} | {len(r)} | {sum(x['lost'] for x in r)} | {f([x['n'] for x in r], 4)} | {f([x['p50'] for x in r])} | {f([x['p99'] for x in r])} | {f([x['max'] for x in r])} | {f([x['obs'] for x in r], 1)} | {sum(x['named'] for x in r)} |")
PY
