#!/usr/bin/env bash
# Peak RSS of `rtlab wakeup` for a short and a long run: memory must not grow with duration.
#
#   sudo bench/wakeup-memory.sh [SHORT] [LONG]      (defaults: 10s and 10m)
set -euo pipefail
SHORT=${1:-10s}
LONG=${2:-10m}
cd "$(dirname "$0")/.."
[ -x /usr/bin/time ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null; }
cargo build --profile profiling -q
for d in "$SHORT" "$LONG"; do
  out=$(mktemp)
  /usr/bin/time -f "%M" -o "$out" target/profiling/rtlab wakeup --duration "$d" --quiet >/dev/null
  echo "wakeup --duration $d (all CPUs, mlockall): peak RSS $(cat "$out") KiB"
  rm -f "$out"
done
