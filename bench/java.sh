#!/usr/bin/env bash
# rtlab's primitives from Java (issue 18): dev.rtlab.PiMutex against ReentrantLock and
# synchronized, interleaved blocks, ratios with 95 % intervals (bench/ci.py).
#
#   sudo bench/java.sh [BLOCKS] [PARTS]     (default 40 blocks; parts 1,2,3,4,5)
#
# 1. Uncontended lock + unlock (one thread; bench/java/LockBench.java, which prints the
#    counter so the JIT cannot drop the loops), BLOCKS blocks of 200 ms per implementation,
#    A B C A B C ... after a warm-up. Target: PiMutex <= 1.0x ReentrantLock.
# 2. Hand-off between two threads (a ring of three locks: every step waits for the other
#    thread's unlock), BLOCKS/2 blocks of 500 ms: PiMutex vs ReentrantLock.
# 3. Seed 003's inversion test from Java (examples/java/Inversion.java; root, two CPUs).
# 4. Timed parks of 10 us: LockSupport.parkNanos vs dev.rtlab.Parker.parkUntil, how late
#    they return (p50, p99 per block of 2000), at the default timer slack and at 1 ns.
# 5. Ping-pong between two JVMs, 64 B and 1 KiB (bench/java/PingPong.java): dev.rtlab.ShmChannel
#    against Aeron IPC (io.aeron:aeron-all from Maven Central, embedded media driver,
#    exclusive publications; -Dagrona.disable.bounds.checks=true as Aeron's own benchmarks
#    run), busy-spin and Agrona's BackoffIdleStrategy on both, plus ShmChannel's own wait;
#    BLOCKS/2 blocks of 400 ms per link, interleaved. Target: p50 <= 1.0x Aeron's, lower max.
set -euo pipefail
BLOCKS=${1:-40}
PARTS=${2:-1,2,3,4,5}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
cd "$(dirname "$0")/.."
JAVA_HOME=${JAVA_HOME:-$(ls -d /usr/lib/jvm/temurin-25* 2>/dev/null | head -1)}
if [ ! -x "$JAVA_HOME/bin/java" ]; then echo "skipped: no JDK 22+ (set JAVA_HOME)"; exit 0; fi
export JAVA_HOME
cargo build --profile profiling -q -p rtlab-ffi
(cd bindings/java && mvn -B -q package -DskipTests -Drtlab.native="$PWD/../../target/profiling/librtlab.so")
JAR=$(ls bindings/java/target/rtlab-java-*.jar | head -1)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
run() {
  "$JAVA_HOME/bin/java" -XX:-EliminateLocks --enable-native-access=ALL-UNNAMED -Drtlab.library="$PWD/target/profiling/librtlab.so" \
    -cp "$JAR" bench/java/LockBench.java "$@" 2>/dev/null
}
echo "# rtlab from Java: $BLOCKS blocks, $(nproc) CPUs, $(uname -r), $("$JAVA_HOME/bin/java" -version 2>&1 | head -1), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
if part 1; then run uncontended "$BLOCKS" 200 >"$WORK/uncontended.txt"; fi
if part 2; then run handoff "$((BLOCKS / 2))" 500 >"$WORK/handoff.txt"; fi
part 4 && "$JAVA_HOME/bin/java" --enable-native-access=ALL-UNNAMED -Drtlab.library="$PWD/target/profiling/librtlab.so" \
  -cp "$JAR" bench/java/ParkBench.java "$((BLOCKS / 2))" 2000 >"$WORK/park.txt" 2>/dev/null
if ! part 3; then
  :
elif [ "$(id -u)" = 0 ] && [ "$(nproc)" -ge 2 ]; then
  "$JAVA_HOME/bin/java" --enable-native-access=ALL-UNNAMED -Drtlab.library="$PWD/target/profiling/librtlab.so" \
    -cp "$JAR" examples/java/Inversion.java 5 >"$WORK/inversion.txt" 2>&1
else
  echo "skipped: needs root and two CPUs" >"$WORK/inversion.txt"
fi
if part 5; then
  AERON_VERSION=1.51.0
  AERON=$HOME/.m2/repository/io/aeron/aeron-all/$AERON_VERSION/aeron-all-$AERON_VERSION.jar
  [ -f "$AERON" ] || mvn -B -q dependency:get -Dartifact=io.aeron:aeron-all:$AERON_VERSION >/dev/null 2>&1
  for size in 64 1024; do
    "$JAVA_HOME/bin/java" --add-exports java.base/jdk.internal.misc=ALL-UNNAMED --enable-native-access=ALL-UNNAMED \
      -Dagrona.disable.bounds.checks=true -Drtlab.library="$PWD/target/profiling/librtlab.so" \
      -cp "$JAR:$AERON" bench/java/PingPong.java ping bench/java/PingPong.java "$size" "$((BLOCKS / 2))" 400 \
      >>"$WORK/pingpong.txt" 2>"$WORK/pingpong.err" || { echo "ping-pong failed:"; tail -5 "$WORK/pingpong.err"; }
  done
  echo "aeron $AERON_VERSION" >"$WORK/aeron.txt"
fi
python3 - "$WORK" <<'PY'
import os, sys
sys.path.insert(0, "bench")
from ci import fmt_ci, met, pingpong_table, read_pingpong
work = sys.argv[1]
have = lambda name: os.path.exists(f"{work}/{name}.txt")
def rows(name):
    out = []
    for line in open(f"{work}/{name}.txt"):
        f = line.split()
        out.append({f[i]: float(f[i + 1]) for i in range(0, len(f), 2)})
    return out
med = lambda xs: sorted(xs)[len(xs) // 2]
if have("uncontended"):
    u = rows("uncontended")
    print("\n## 1. uncontended lock + unlock, ns per pair (one thread)")
    print("| implementation | ns (median of blocks) | ratio to ReentrantLock, median [95 % interval] | target | met? |")
    print("|---|---|---|---|---|")
    for impl in ("pi", "reentrant", "synchronized", "two_cas", "cas_store"):
        r = [x[impl] / x["reentrant"] for x in u]
        name = {"pi": "dev.rtlab.PiMutex", "reentrant": "ReentrantLock", "synchronized": "synchronized",
                "two_cas": "floor of a PI futex word: two CAS on native memory",
                "cas_store": "floor of ReentrantLock: CAS + volatile store on a field"}[impl]
        target = "<= 1.0" if impl == "pi" else ""
        print(f"| {name} | {med([x[impl] for x in u]):.2f} | {fmt_ci(r) if impl != 'reentrant' else ''} | {target} | {met(r, 1.0) if impl == 'pi' else ''} |")
if have("handoff"):
    h = rows("handoff")
    print("\n## 2. hand-off between two threads (ring of three locks), ns per hand-off")
    print("| implementation | ns (median of blocks) | ratio to ReentrantLock, median [95 % interval] |")
    print("|---|---|---|")
    print(f"| dev.rtlab.PiMutex | {med([x['pi'] for x in h]):.0f} | {fmt_ci([x['pi'] / x['reentrant'] for x in h])} |")
    print(f"| ReentrantLock | {med([x['reentrant'] for x in h]):.0f} | |")
if have("inversion"):
    print("\n## 3. seed 003's inversion test from Java (examples/java/Inversion.java, 5 trials each)")
    print("```")
    print(open(f"{work}/inversion.txt").read().rstrip())
    print("```")
if have("park"):
    print("\n## 4. a 10 us park: how late it returns (us; medians over blocks of 2000 parks)")
    print("| timer slack | parkNanos p50 | Parker.parkUntil p50 | ratio p50 [95 %] | parkNanos p99 | parkUntil p99 | ratio p99 [95 %] |")
    print("|---|---|---|---|---|---|---|")
    park = [l.split() for l in open(f"{work}/park.txt")]
    for slack in ("default", "1ns"):
        rows_ = [list(map(int, (r[2], r[3], r[5], r[6]))) for r in park if r[0] == slack]
        if not rows_:
            continue
        j50, j99, r50, r99 = ([x[i] for x in rows_] for i in range(4))
        print(f"| {slack} | {med(j50)/1e3:.1f} | {med(r50)/1e3:.1f} | {fmt_ci([b / a for a, b in zip(j50, r50)])} "
              f"| {med(j99)/1e3:.1f} | {med(r99)/1e3:.1f} | {fmt_ci([b / a for a, b in zip(j99, r99)])} |")
if have("pingpong"):
    print(f"\n## 5. ping-pong between two JVMs: ShmChannel vs Aeron IPC ({open(f'{work}/aeron.txt').read().strip()}), round trip, us")
    pingpong_table(read_pingpong(f"{work}/pingpong.txt"),
                   [("shm-spin", "aeron-spin", "busy-spin on both"), ("shm-backoff", "aeron-backoff", "BackoffIdleStrategy on both"),
                    ("shm-wait", "aeron-backoff", "ShmChannel's own wait vs Aeron's backoff")],
                   ("ShmChannel", "Aeron"), target=1.0)
PY
