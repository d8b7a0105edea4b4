#!/usr/bin/env bash
# What a hotspot probe hit costs the JVM under `rtlab watch`.
#
#   sudo bench/jvm-probe-cost.sh [CYCLES]      (default 10 cycles of three 3 s windows)
#
# bench/java/SafepointLoop.java brings the JVM to a safepoint as fast as it can
# (ThreadMXBean.findDeadlockedThreads: one FindDeadlocks VM operation each, four probe hits:
# safepoint begin/end, VM operation begin/end) and prints its time per call every 100 ms;
# the JVM logs each safepoint (-Xlog:safepoint). The VM operation's two probes fire inside
# the time the JVM logs as "At safepoint": their cost is the rise of its median.
# Then the same JVM program parks with its permit already given (LockSupport.unpark of
# itself, then park: two probe hits, thread park begin and end, and no system call): one hit
# costs half the rise of its time per call, JVM watched over another process watched. (In
# these two the watch's clock probe is left off: the loop reads the clock at every call.)
# Then each call is one System.nanoTime(): one hit of the watch's clock probe (its limit
# lifted for the run), the rise of the time per call.
# Beside each, windows in turn: no watch; `rtlab watch --pid` of another process (the kernel's
# scheduler events are recorded, no probe is on this JVM); `rtlab watch --pid` of the JVM (its
# probes attached too). Per cycle: the time per call watched over not watched, and the cost
# of one probe hit = (median "At safepoint", JVM watched - other watched) / 2. Medians with
# 95 % intervals
# (bench/ci.py). Every JDK of /usr/lib/jvm.
set -euo pipefail
CYCLES=${1:-10}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (eBPF, uprobes)" >&2; exit 2; fi
# RTLAB=path runs a copy of the binary (a build elsewhere cannot replace it mid-run).
if [ -z "${RTLAB:-}" ]; then cargo build --release -q; RTLAB=$PWD/target/release/rtlab; fi
WORK=$(mktemp -d)
OTHER=
cleanup() { [ -n "$OTHER" ] && kill "$OTHER" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
echo "# hotspot probe cost under rtlab watch: $CYCLES cycles x 3 windows x 3 s, $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
sleep 100000 & OTHER=$!
now_ms() { date +%s%3N; }
for jdk in /usr/lib/jvm/*/; do
  jdk=${jdk%/}
  [ -L "$jdk" ] && continue
  [ -x "$jdk/bin/javac" ] && [ -f "$jdk/lib/server/libjvm.so" ] || continue
  mkdir -p "$WORK/classes"
  "$jdk/bin/javac" -d "$WORK/classes" bench/java/SafepointLoop.java
  for loop in safepoint park clock; do
    rm -f "$WORK"/w*.json "$WORK/sp.log"
    "$jdk/bin/java" "-Xlog:safepoint:file=$WORK/sp.log::filecount=0" -cp "$WORK/classes" SafepointLoop $((CYCLES * 20 + 10)) 100 "$loop" >"$WORK/blocks.txt" &
    JVM=$!
    sleep 2
    : >"$WORK/windows.txt"
    for c in $(seq 1 "$CYCLES"); do
      for mode in off other jvm; do
        start=$(now_ms)
        case $mode in
          off) sleep 3 ;;
          other) "$RTLAB" watch --pid "$OTHER" --duration 3s --quiet >/dev/null 2>&1 || true ;;
          jvm)
            case $loop in
              safepoint | park) clock=(--no-java-clock) ;;
              clock) clock=(--java-clock-limit 1000000000) ;;
              *) clock=() ;;
            esac
            "$RTLAB" watch --pid "$JVM" --duration 3s --quiet "${clock[@]}" --json "$WORK/w$c.json" >/dev/null 2>&1 || true ;;
        esac
        echo "$c $mode $start $(now_ms)" >>"$WORK/windows.txt"
      done
    done
    sleep 0.3
    kill "$JVM" 2>/dev/null || true
    wait "$JVM" 2>/dev/null || true
    python3 - "$WORK" "$(basename "$jdk")" "$CYCLES" "$loop" <<'PY'
import json, os, sys
sys.path.insert(0, "bench")
from ci import fmt_ci
work, jdk, cycles, loop = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
import re
blocks, start = [], 0
for l in open(f"{work}/blocks.txt"):
    f = l.split()
    if f and f[0] == "block":
        blocks.append((int(f[1]), int(f[2]), int(f[3])))
    elif f and f[0] == "start":
        start = int(f[1])
# [12.345s][info][safepoint] Safepoint "FindDeadlocks", ... At safepoint: 1319 ns, ...
at = []
pat = re.compile(r"^\[([0-9.]+)s\].*\"FindDeadlocks\".*At safepoint: (\d+) ns")
for l in open(f"{work}/sp.log"):
    m = pat.match(l)
    if m:
        at.append((start + int(float(m.group(1)) * 1000), int(m.group(2))))
def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None
at_med = {}
means = {}
for l in open(f"{work}/windows.txt"):
    c, mode, a, b = l.split()
    a, b = int(a), int(b)
    # A watch attaches in its first second: its last 2 s only (blocks end-stamped, 100 ms).
    lo = b - 1900 if mode != "off" else a + 1100
    xs = [(n, ns) for (t, n, ns) in blocks if lo <= t - 100 and t <= b - 100]
    if xs:
        means[(int(c), mode)] = sum(n * ns for n, ns in xs) / sum(n for n, _ in xs)
    m = median([ns for (t, ns) in at if lo <= t <= b - 100])
    if m is not None:
        at_med[(int(c), mode)] = m
seen = []
for c in range(1, cycles + 1):
    try:
        doc = json.load(open(f"{work}/w{c}.json"))
        seen.append(doc["verdict"].get("jvm_safepoints", {}).get("count", 0))
    except (OSError, ValueError):
        seen.append(0)
if loop in ("park", "clock"):
    full = [c for c in range(1, cycles + 1) if all((c, m) in means for m in ("off", "other", "jvm"))]
    what = {"park": "parks", "clock": "clock reads"}[loop]
    if len(full) < 6:
        print(f"{jdk} ({what}): skipped: {len(full)} complete cycles")
        sys.exit(0)
    hits = 2 if loop == "park" else 1
    hit = [(means[(c, "jvm")] - means[(c, "other")]) / hits for c in full]
    print(f"{jdk} ({what}): {fmt_ci([means[(c, 'off')] for c in full], 1)} ns per call unwatched; "
          f"watching another process {fmt_ci([means[(c, 'other')] / means[(c, 'off')] for c in full])}x, "
          f"watching the JVM {fmt_ci([means[(c, 'jvm')] / means[(c, 'off')] for c in full])}x; "
          f"one probe hit {fmt_ci([h / 1000 for h in hit], 2)} us")
    sys.exit(0)
full = [c for c in range(1, cycles + 1)
        if all((c, m) in means and (c, m) in at_med for m in ("off", "other", "jvm"))]
if len(full) < 6:
    print(f"{jdk}: skipped: {len(full)} complete cycles")
    sys.exit(0)
other = [means[(c, "other")] / means[(c, "off")] for c in full]
jvm = [means[(c, "jvm")] / means[(c, "off")] for c in full]
hit = [(at_med[(c, "jvm")] - at_med[(c, "other")]) / 2 for c in full]
at_off = [at_med[(c, "off")] for c in full]
base = [means[(c, "off")] for c in full]
print(f"{jdk}: {fmt_ci([b / 1000 for b in base], 1)} us per safepoint unwatched; "
      f"watching another process {fmt_ci(other)}x, watching the JVM {fmt_ci(jvm)}x; "
      f"at safepoint {fmt_ci([a / 1000 for a in at_off], 2)} us unwatched (median of each window); "
      f"one probe hit {fmt_ci([h / 1000 for h in hit], 2)} us; "
      f"safepoints the watch counted per window: median {sorted(seen)[len(seen) // 2]}")
PY
  done
done
