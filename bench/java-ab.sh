#!/usr/bin/env bash
# Two (or more) builds of the Java binding against each other, each against Aeron in its own
# run: ShmChannel's busy-spin round trip over Aeron's, one pair of JVMs per jar and round,
# the jars' order rotating every round, so that the host's drift hits every jar alike.
#
#   sudo bench/java-ab.sh ROUNDS SIZE JAR_A JAR_B [JAR_C ...]
#
# Each run: bench/java/PingPong.java with only the shm-spin and aeron-spin links, 6 blocks
# of 300 ms per link after the warm-up; a run's figure is the median over its blocks of
# ShmChannel's p50 over Aeron's next to it. Prints per jar the median of its runs with a
# 95 % interval, and each jar's ratio to the first jar, round by round. The jars must be
# built against the same librtlab.so (target/profiling, as bench/java.sh builds it).
# KEEP=DIR keeps every run's blocks (DIR/ROUND.JAR_INDEX.txt).
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: bench/java-ab.sh ROUNDS SIZE JAR_A JAR_B [JAR_C ...]" >&2
  exit 2
fi
ROUNDS=$1 SIZE=$2
shift 2
JARS=("$@")
cd "$(dirname "$0")/.."
JAVA_HOME=${JAVA_HOME:-$(ls -d /usr/lib/jvm/temurin-25* 2>/dev/null | head -1)}
if [ ! -x "$JAVA_HOME/bin/java" ]; then echo "skipped: no JDK 22+ (set JAVA_HOME)"; exit 0; fi
for j in "${JARS[@]}"; do [ -f "$j" ] || { echo "no such jar: $j" >&2; exit 2; }; done
LIB=${RTLAB_LIBRARY:-$PWD/target/profiling/librtlab.so}
[ -f "$LIB" ] || cargo build --profile profiling -q -p rtlab-ffi
AERON_VERSION=1.51.0
AERON=$HOME/.m2/repository/io/aeron/aeron-all/$AERON_VERSION/aeron-all-$AERON_VERSION.jar
[ -f "$AERON" ] || mvn -B -q dependency:get -Dartifact=io.aeron:aeron-all:$AERON_VERSION >/dev/null 2>&1
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP"
  WORK=$KEEP
else
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
fi
echo "# ShmChannel builds against each other, each over Aeron $AERON_VERSION: $ROUNDS rounds, $SIZE B, $(nproc) CPUs, $(uname -r), $("$JAVA_HOME/bin/java" -version 2>&1 | head -1), $(date -u +%FT%TZ)"
n=${#JARS[@]}
for ((r = 0; r < ROUNDS; r++)); do
  for ((k = 0; k < n; k++)); do
    i=$(((r + k) % n))
    "$JAVA_HOME/bin/java" --add-exports java.base/jdk.internal.misc=ALL-UNNAMED --enable-native-access=ALL-UNNAMED \
      -Dagrona.disable.bounds.checks=true -Drtlab.library="$LIB" -Dpingpong.links=shm-spin,aeron-spin \
      -cp "${JARS[$i]}:$AERON" bench/java/PingPong.java ping bench/java/PingPong.java "$SIZE" 6 300 \
      >"$WORK/$r.$i.txt" 2>>"$WORK/err" || { echo "run $r of ${JARS[$i]} failed:"; tail -5 "$WORK/err"; exit 1; }
  done
done
python3 - "$WORK" "$ROUNDS" "${JARS[@]}" <<'PY'
import sys
sys.path.insert(0, "bench")
from ci import fmt_ci, read_pingpong
work, rounds, jars = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
med = lambda xs: sorted(xs)[len(xs) // 2]
def run_ratio(path):
    pp = read_pingpong(path)
    (shm,), (aeron,) = ([v for (link, _), v in pp.items() if link == name] for name in ("shm-spin", "aeron-spin"))
    return med([a["p50"] / b["p50"] for a, b in zip(shm, aeron)]), med([a["p50"] for a in shm])
runs = [[run_ratio(f"{work}/{r}.{i}.txt") for r in range(rounds)] for i in range(len(jars))]
print("| jar | ShmChannel p50, ns (median of runs) | p50 over Aeron's, median of runs [95 %] | over the first jar's, round by round [95 %] |")
print("|---|---|---|---|")
for i, jar in enumerate(jars):
    rel = fmt_ci([x[0] / a[0] for x, a in zip(runs[i], runs[0])], 3) if i else ""
    print(f"| {jar} | {med([x[1] for x in runs[i]])} | {fmt_ci([x[0] for x in runs[i]], 3)} | {rel} |")
PY
