#!/usr/bin/env bash
# rtlab watch's memory over a long run (issue 17): RSS at minute 1 and at the end.
#
#   sudo bench/watch-memory.sh [MINUTES]        (default 10)
#
# Watches examples/c/periodic.c (one thread, 1 ms) with --hlog and --interval-log 10s, and
# reads rtlab's VmRSS from /proc every minute.
set -euo pipefail
MINUTES=${1:-10}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (eBPF)" >&2; exit 2; fi
cargo build --release -q
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cc -O2 -pthread -o "$WORK/periodic" examples/c/periodic.c
"$WORK/periodic" $((MINUTES * 60 + 30)) 1000 >/dev/null &
prog=$!
target/release/rtlab watch --pid "$prog" --duration "${MINUTES}m" --quiet --hlog "$WORK/w.hlog" --json "$WORK/w.json" >/dev/null &
watch=$!
echo "# rtlab watch memory: $MINUTES min, $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"
for m in $(seq 1 "$MINUTES"); do
  sleep 60
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$watch/status" 2>/dev/null || echo gone)
  echo "minute $m: VmRSS $rss KiB"
done
wait "$watch"
kill "$prog" 2>/dev/null || true
python3 -c "
import json; d = json.load(open('$WORK/w.json'))
s = [x for x in d['series'] if x['name'].endswith('/wakeup')]
print('samples', max(x['count'] for x in s), 'hlog bytes', $(stat -c %s "$WORK/w.hlog"), 'warnings', d['warnings'])"
