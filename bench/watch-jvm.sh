#!/usr/bin/env bash
# rtlab watch on a JVM against the JVM's own figures: its -Xlog:safepoint, and a Java thread
# timing its own parks.
#
#   sudo bench/watch-jvm.sh [RUNS] [SECONDS]      (defaults: 10 runs of 6 s)
#
# examples/java/Periodic.java (thread rt-loop parks to 1 ms deadlines and measures its own
# lateness; another thread calls System.gc() every 250 ms on 100 MB of small objects), run
# SCHED_FIFO 50 under every JDK of /usr/lib/jvm, with SerialGC and G1, each watched by
# `rtlab watch -- rtlab exec ... java -Xlog:safepoint:file=...`. Per run: safepoints the JVM
# logged and the watch saw (matched in order, same operation), the largest relative difference
# of a safepoint's total; the watch's rt-loop/timer series over the thread's own figures
# (count, p50, p99, max); the share of the thread's periods late by over 1 ms that lie in
# delays the watch named a safepoint of a VM operation the JVM logged over 1 ms, and the share
# of the periods the logged safepoints themselves made late by over 1 ms (the thread's own
# count also holds those the host made late). Medians with 95 % intervals (bench/ci.py).
#
#   LOAD="stress-ng --cpu 2"   a load beside each run (started before the watch, ended after)
#   STOPS=dump                 stops by thread dumps (`jcmd PID Thread.print` every 0.5 s)
#                              instead of System.gc() every 250 ms
#   PROBES=none                each JDK's copy whose libjvm.so has no USDT probes (its
#                              .note.stapsdt removed, as in a JDK built without them): the
#                              safepoints then come from the JVM's own log, turned on by the
#                              watch (those before it was turned on are not compared)
#   WITNESS=log                `--jvm-log`: the JVM's own log read beside its probes too; the
#                              stops both told and those whose two totals differ by over 5 %
#                              are added up at the end
#   CONTAINER=1                each JVM in a container of its own: its own mount and pid
#                              namespace and its own /tmp (`unshare --mount --pid --fork
#                              --mount-proc`, a tmpfs on /tmp), watched from outside; with
#                              PROBES=none its log is turned on through its own /tmp
#   JDKS=GLOB, GCS="SerialGC"  only the JDKs under /usr/lib/jvm whose directory matches GLOB
#                              (default every one), only these collectors (default SerialGC
#                              and G1GC)
#   KEEP=DIR                   keep each run's files (the watch's JSON, the JVM's safepoint
#                              log, the program's output) in DIR/<jdk>-<gc>-<run>/
set -euo pipefail
RUNS=${1:-10}
SECS=${2:-6}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (eBPF, uprobes, SCHED_FIFO)" >&2; exit 2; fi
# RTLAB=path runs a copy of the binary (a build elsewhere cannot replace it mid-run).
if [ -z "${RTLAB:-}" ]; then cargo build --release -q; RTLAB=$PWD/target/release/rtlab; fi
# (Not under /tmp, which a container's own /tmp hides from the JVM inside.)
WORK=$(mktemp -d /var/tmp/rtlab-watch-jvm.XXXXXX)
LOADPID=
DUMPS=
cleanup() {
  [ -n "$DUMPS" ] && kill "$DUMPS" 2>/dev/null
  [ -n "$LOADPID" ] && kill -- -"$LOADPID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
STOPS=${STOPS:-gc}
PROBES=${PROBES:-yes}
JVM_LOG=()
[ "${WITNESS:-}" = log ] && JVM_LOG=(--jvm-log)
# A copy of JDK $1 at $2 whose libjvm.so has no probes: the launcher copied (it finds its
# libraries from its own path), the rest linked.
without_probes() {
  local j; j=$(readlink -f "$1")
  mkdir -p "$2/bin" "$2/lib/server"
  cp "$j/bin/java" "$2/bin/"
  for e in "$j"/*; do case $(basename "$e") in bin|lib) ;; *) ln -s "$e" "$2/";; esac; done
  for e in "$j"/lib/*; do [ "$(basename "$e")" = server ] || ln -s "$e" "$2/lib/"; done
  for e in "$j"/lib/server/*; do [ "$(basename "$e")" = libjvm.so ] || ln -s "$e" "$2/lib/server/"; done
  objcopy --remove-section .note.stapsdt "$j/lib/server/libjvm.so" "$2/lib/server/libjvm.so"
}
case $STOPS in
  gc) GC_MS=250 ;;
  dump) GC_MS=0 ;;
  *) echo "STOPS: gc or dump" >&2; exit 2 ;;
esac
echo "# rtlab watch on a JVM vs its own figures: stops by ${STOPS}, load: ${LOAD:-none}, probes: ${PROBES}$([ "${CONTAINER:-0}" != 0 ] && echo ', in a container'), $RUNS runs x ${SECS}s, $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
: >"$WORK/rows.txt"
for jdk in /usr/lib/jvm/${JDKS:-*}/; do
  jdk=${jdk%/}
  [ -L "$jdk" ] && continue
  [ -x "$jdk/bin/javac" ] && [ -f "$jdk/lib/server/libjvm.so" ] || continue
  mkdir -p "$WORK/classes"
  "$jdk/bin/javac" -d "$WORK/classes" examples/java/Periodic.java
  home=$jdk
  if [ "$PROBES" = none ]; then home=$WORK/np-$(basename "$jdk"); without_probes "$jdk" "$home"; fi
  for gc in ${GCS:-SerialGC G1GC}; do
    for run in $(seq 1 "$RUNS"); do
      rm -f "$WORK/sp.log"
      if [ -n "${LOAD:-}" ]; then setsid $LOAD >/dev/null 2>&1 & LOADPID=$!; sleep 0.5; fi
      if [ "$STOPS" = dump ]; then
        # The JVM once it runs Periodic, then a thread dump every 0.5 s.
        ( for _ in $(seq 1 100); do
            pid=
            for p in $(pgrep -f "Periodic $SECS 1000 0" || true); do
              [ "$(cat /proc/$p/comm 2>/dev/null)" = java ] && pid=$p
            done
            [ -n "$pid" ] && break
            sleep 0.05
          done
          sleep 1
          while kill -0 "$pid" 2>/dev/null; do
            "$jdk/bin/jcmd" "$pid" Thread.print >/dev/null 2>&1 || true
            sleep 0.5
          done ) & DUMPS=$!
      fi
      java=("$home/bin/java" -XX:+Use$gc "-Xlog:safepoint:file=$WORK/sp.log" -cp "$WORK/classes"
        Periodic "$SECS" 1000 "$GC_MS" 100)
      if [ "${CONTAINER:-0}" != 0 ]; then
        java=(unshare --mount --pid --fork --kill-child --mount-proc sh -c 'mount -t tmpfs tmpfs /tmp && exec "$@"' _ "${java[@]}")
      fi
      "$RTLAB" watch "${JVM_LOG[@]}" --thread rt-loop --threshold 1ms --top 200 --quiet --json "$WORK/w.json" -- \
        "$RTLAB" exec --policy fifo --prio 50 -- "${java[@]}" >"$WORK/out.txt" 2>/dev/null || true
      if [ -n "$DUMPS" ]; then wait "$DUMPS" 2>/dev/null || true; DUMPS=; fi
      if [ -n "${KEEP:-}" ]; then
        kept="$KEEP/$(basename "$jdk")-$gc-$run"
        mkdir -p "$kept" && cp "$WORK/w.json" "$WORK/sp.log" "$WORK/out.txt" "$kept/" 2>/dev/null || true
      fi
      if [ -n "$LOADPID" ]; then kill -- -"$LOADPID" 2>/dev/null || true; wait "$LOADPID" 2>/dev/null || true; LOADPID=; fi
      python3 - "$WORK" "$(basename "$jdk")" "$gc" "$PROBES" >>"$WORK/rows.txt" <<'PY'
import json, re, sys
work, jdk, gc, probes = sys.argv[1:5]
out = open(f"{work}/out.txt").read()
m = re.search(r"samples (\d+) p50 (\d+) p99 (\d+) max (\d+) late1ms (\d+)", out)
d = json.load(open(f"{work}/w.json"))
t = [s for s in d["series"] if s["name"] == "rt-loop/timer"]
if not m or not t:
    sys.exit(0)
n, p50, p99, mx, late = map(int, m.groups())
t = t[0]
logged = []
for l in open(f"{work}/sp.log"):
    a = re.search(r'Safepoint "([^"]+)".*Total: (\d+) ns', l)
    if a:
        logged.append((a.group(1), int(a.group(2))))
seen = [(s["operation"], s["total_ns"]) for s in d["verdict"].get("jvm_safepoints", {}).get("latest", [])]
if probes == "none":
    # Through its own log: the stops after the watch turned it on, the last ones logged.
    logged = logged[max(0, len(logged) - len(seen)):]
same = sum(1 for a, b in zip(seen, logged) if a[0] == b[0])
worst = max([abs(a[1] - b[1]) / b[1] for a, b in zip(seen, logged) if a[0] == b[0]] or [0])
# A delay of L absorbs the periods due in it, one a millisecond, each late by what is left:
# floor((L - 1 ms) / 1 ms) + 1 of them late by over 1 ms. Named: a safepoint of a VM operation
# the JVM logged over 1 ms is among its causes.
long_ops = {op for op, total in logged if total > 1e6}
named = sum(int((o["latency_ns"] - 1e6) // 1e6) + 1 for o in d.get("outliers", [])
            if o["series"].startswith("rt-loop/") and o["series"].endswith("/timer")
            and o["latency_ns"] > 1e6
            and any(c["kind"] == "safepoint" and any(op in c.get("detail", "") for op in long_ops)
                    for c in o["causes"]))
# The periods the JVM's own log says its safepoints made late by over 1 ms: a stop of D
# absorbs the periods due in it, (D - 1 ms) / 1 ms of them late by over 1 ms on average.
by_log = sum(max(0.0, (total - 1e6) / 1e6) for _, total in logged)
print(json.dumps({"jdk": jdk, "gc": gc, "logged": len(logged), "seen": len(seen), "same": same, "worst": worst,
                  "n": t["count"] / n, "p50": t["p50"] / p50, "p99": t["p99"] / p99, "max": t["max"] / mx,
                  "named": min(named / late, 1.0) if late else None, "late": late,
                  "by_log": by_log, "named_n": named,
                  "named_of_log": min(named / by_log, 1.0) if by_log >= 1 else None,
                  "compared": d["verdict"].get("jvm_witnesses", {}).get("compared"),
                  "differing": d["verdict"].get("jvm_witnesses", {}).get("differing")}))
PY
    done
  done
done
python3 - "$WORK/rows.txt" <<'PY'
import json, sys
sys.path.insert(0, "bench")
from ci import median_ci
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def f(v, d=3):
    v = [x for x in v if x is not None]
    if not v:
        return "-"
    m, lo, hi = median_ci(v)
    return f"{m:.{d}f}" + (f" [{lo:.{d}f}, {hi:.{d}f}]" if lo is not None else "")
def pooled(r):
    by_log = sum(x.get("by_log", 0) for x in r)
    if by_log < 1:
        return "0"
    named = sum(x.get("named_n", 0) for x in r)
    return f"{by_log:.0f}: {min(named / by_log, 1):.3f}; {f([x.get('named_of_log') for x in r])}"
print("| JDK | GC | runs | safepoints logged / seen / same operation | worst safepoint total vs the log | count ratio | p50 ratio | p99 ratio | max ratio | periods late > 1 ms in delays named a safepoint | periods the log's safepoints made late > 1 ms: in all, share named (pooled; per run) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for jdk in sorted({r["jdk"] for r in rows}):
    for gc in ["SerialGC", "G1GC"]:
        r = [x for x in rows if x["jdk"] == jdk and x["gc"] == gc]
        if r:
            print(f"| {jdk} | {gc} | {len(r)} | {sum(x['logged'] for x in r)} / {sum(x['seen'] for x in r)} / {sum(x['same'] for x in r)} | {max(x['worst'] for x in r):.4f} | {f([x['n'] for x in r], 4)} | {f([x['p50'] for x in r])} | {f([x['p99'] for x in r])} | {f([x['max'] for x in r])} | {f([x['named'] for x in r])} | {pooled(r)} |")
if any(r.get("compared") is not None for r in rows):
    both = sum(r.get("compared") or 0 for r in rows)
    apart = sum(r.get("differing") or 0 for r in rows)
    print(f"\nthe JVM's own log beside its probes: {both} safepoints both told, {apart} differing by over 5 %")
PY
