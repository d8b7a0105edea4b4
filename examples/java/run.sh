#!/usr/bin/env bash
# Seed 004 on this machine: a 10 us park, three ways, in Java (the machine's JDK) and in C.
#
#   examples/java/run.sh [PARKS_PER_ROUND] [ROUNDS]        (defaults: 20000, 3)
#
#   default    the program as it is (50 us default timer slack)
#   exec       under `rtlab exec --slack 1us` (every thread starts with 1 us)
#   live       started as is; after its first round, `rtlab slack set --pid PID --all 1us`
#              changes every thread of the running process; the rounds after that are used
#
# Prints us per park (median of the rounds used) and how much shorter the rtlab cases are.
# `rtlab slack set` on another process needs CAP_SYS_NICE (run as root).
set -euo pipefail
PARKS=${1:-20000}
ROUNDS=${2:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
(cd "$ROOT" && cargo build --release -q)
RTLAB=$ROOT/target/release/rtlab
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
javac -d "$WORK" "$HERE/ParkNanos.java"
cc -O2 -o "$WORK/parknanos" "$ROOT/examples/c/parknanos.c" -lpthread

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
per_park() { sed -n 's/^round [0-9]*: \([0-9.]*\) us per park.*/\1/p'; }

run_default() { "$@" 10000 "$PARKS" "$ROUNDS" | per_park | median; }
run_exec() { "$RTLAB" exec --slack 1us -- "$@" 10000 "$PARKS" "$ROUNDS" 2>/dev/null | per_park | median; }
run_live() {
  # One round before the change, one during it (discarded), then ROUNDS after it.
  local out=$WORK/live.out
  "$@" 10000 "$PARKS" $((ROUNDS + 2)) > "$out" &
  local pid=$!
  until grep -q '^round 1:' "$out" 2>/dev/null; do sleep 0.05; done
  local target
  target=$(sed -n 's/^pid \([0-9]*\)$/\1/p' "$out")
  "$RTLAB" slack set --pid "$target" --all 1us > /dev/null
  wait "$pid"
  tail -n "$ROUNDS" "$out" | per_park | median
}

printf '%-6s %-10s %12s\n' lang case "us/park"
for lang in java c; do
  if [ $lang = java ]; then cmd=(java -cp "$WORK" ParkNanos); else cmd=("$WORK/parknanos"); fi
  d=$(run_default "${cmd[@]}"); e=$(run_exec "${cmd[@]}"); l=$(run_live "${cmd[@]}")
  printf '%-6s %-10s %12s\n' $lang default "$d" $lang exec "$e" $lang live "$l"
  awk -v d="$d" -v e="$e" -v l="$l" -v lang=$lang 'BEGIN {
    printf "%s: rtlab exec --slack 1us parks %.0f%% shorter, rtlab slack set --all 1us %.0f%% shorter\n",
      lang, 100 * (1 - e / d), 100 * (1 - l / d) }'
done
