#!/usr/bin/env bash
# rtlab's primitives from Java (issue 18): dev.rtlab.PiMutex against ReentrantLock and
# synchronized, interleaved blocks, ratios with 95 % intervals (bench/ci.py).
#
#   sudo bench/java.sh [BLOCKS]        (default 40)
#
# 1. Uncontended lock + unlock (one thread; bench/java/LockBench.java, which prints the
#    counter so the JIT cannot drop the loops), BLOCKS blocks of 200 ms per implementation,
#    A B C A B C ... after a warm-up. Target: PiMutex <= 1.2x ReentrantLock.
# 2. Hand-off between two threads (a ring of three locks: every step waits for the other
#    thread's unlock), BLOCKS/2 blocks of 500 ms: PiMutex vs ReentrantLock.
# 3. Seed 003's inversion test from Java (examples/java/Inversion.java; root, two CPUs).
# 4. Timed parks of 10 us: LockSupport.parkNanos vs dev.rtlab.Parker.parkUntil, how late
#    they return (p50, p99 per block of 2000), at the default timer slack and at 1 ns.
set -euo pipefail
BLOCKS=${1:-40}
cd "$(dirname "$0")/.."
JAVA_HOME=${JAVA_HOME:-$(ls -d /usr/lib/jvm/temurin-25* 2>/dev/null | head -1)}
if [ ! -x "$JAVA_HOME/bin/java" ]; then echo "skipped: no JDK 22+ (set JAVA_HOME)"; exit 0; fi
export JAVA_HOME
cargo build --profile profiling -q
(cd bindings/java && mvn -B -q package -DskipTests)
JAR=$(ls bindings/java/target/rtlab-java-*.jar | head -1)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
run() {
  "$JAVA_HOME/bin/java" -XX:-EliminateLocks --enable-native-access=ALL-UNNAMED -Drtlab.library="$PWD/target/profiling/librtlab.so" \
    -cp "$JAR" bench/java/LockBench.java "$@" 2>/dev/null
}
echo "# rtlab from Java: $BLOCKS blocks, $(nproc) CPUs, $(uname -r), $("$JAVA_HOME/bin/java" -version 2>&1 | head -1), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
run uncontended "$BLOCKS" 200 >"$WORK/uncontended.txt"
run handoff "$((BLOCKS / 2))" 500 >"$WORK/handoff.txt"
"$JAVA_HOME/bin/java" --enable-native-access=ALL-UNNAMED -Drtlab.library="$PWD/target/profiling/librtlab.so" \
  -cp "$JAR" bench/java/ParkBench.java "$((BLOCKS / 2))" 2000 >"$WORK/park.txt" 2>/dev/null
if [ "$(id -u)" = 0 ] && [ "$(nproc)" -ge 2 ]; then
  "$JAVA_HOME/bin/java" --enable-native-access=ALL-UNNAMED -Drtlab.library="$PWD/target/profiling/librtlab.so" \
    -cp "$JAR" examples/java/Inversion.java 5 >"$WORK/inversion.txt" 2>&1
else
  echo "skipped: needs root and two CPUs" >"$WORK/inversion.txt"
fi
python3 - "$WORK" <<'PY'
import sys
sys.path.insert(0, "bench")
from ci import fmt_ci, met
work = sys.argv[1]
def rows(name):
    out = []
    for line in open(f"{work}/{name}.txt"):
        f = line.split()
        out.append({f[i]: float(f[i + 1]) for i in range(0, len(f), 2)})
    return out
med = lambda xs: sorted(xs)[len(xs) // 2]
u = rows("uncontended")
print("\n## 1. uncontended lock + unlock, ns per pair (one thread)")
print("| implementation | ns (median of blocks) | ratio to ReentrantLock, median [95 % interval] | target | met? |")
print("|---|---|---|---|---|")
for impl in ("pi", "reentrant", "synchronized", "two_cas", "cas_store"):
    r = [x[impl] / x["reentrant"] for x in u]
    name = {"pi": "dev.rtlab.PiMutex", "reentrant": "ReentrantLock", "synchronized": "synchronized",
            "two_cas": "floor of a PI futex word: two CAS on native memory",
            "cas_store": "floor of ReentrantLock: CAS + volatile store on a field"}[impl]
    target = "<= 1.2" if impl == "pi" else ""
    print(f"| {name} | {med([x[impl] for x in u]):.2f} | {fmt_ci(r) if impl != 'reentrant' else ''} | {target} | {met(r, 1.2) if impl == 'pi' else ''} |")
h = rows("handoff")
print("\n## 2. hand-off between two threads (ring of three locks), ns per hand-off")
print("| implementation | ns (median of blocks) | ratio to ReentrantLock, median [95 % interval] |")
print("|---|---|---|")
print(f"| dev.rtlab.PiMutex | {med([x['pi'] for x in h]):.0f} | {fmt_ci([x['pi'] / x['reentrant'] for x in h])} |")
print(f"| ReentrantLock | {med([x['reentrant'] for x in h]):.0f} | |")
print("\n## 3. seed 003's inversion test from Java (examples/java/Inversion.java, 5 trials each)")
print("```")
print(open(f"{work}/inversion.txt").read().rstrip())
print("```")
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
PY
