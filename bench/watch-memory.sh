#!/usr/bin/env bash
# rtlab watch's memory over a long run (issue 17): RSS at minute 1 and at the end.
#
#   sudo bench/watch-memory.sh [MINUTES]        (default 10)
#   BURST=1 sudo bench/watch-memory.sh 6        (a context-switch storm in minute 3)
#
# Watches examples/c/periodic.c (one thread, 1 ms) with --hlog, --interval-log 10s and
# --metrics (scraped every 2 s, as a Prometheus would), and reads rtlab's VmRSS from /proc
# every minute.
set -euo pipefail
MINUTES=${1:-10}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (eBPF)" >&2; exit 2; fi
# RTLAB=path: another build (e.g. an older commit's, for a before/after).
RTLAB=${RTLAB:-}
if [ -z "$RTLAB" ]; then cargo build --profile profiling -q; RTLAB=target/profiling/rtlab; fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cc -O2 -pthread -o "$WORK/periodic" examples/c/periodic.c
"$WORK/periodic" $((MINUTES * 60 + 60)) 1000 >/dev/null &
prog=$!
PORT=19464
# (30 s past the last reading, so that reading is never of a watch that is ending)
"$RTLAB" watch --pid "$prog" --duration "$((MINUTES * 60 + 30))s" --quiet --hlog "$WORK/w.hlog" \
  --metrics "127.0.0.1:$PORT" --json "$WORK/w.json" >/dev/null &
watch=$!
python3 - "$PORT" "$watch" <<'PY' &
import os, sys, time, urllib.request
port, watch = sys.argv[1], int(sys.argv[2])
time.sleep(3)
while os.path.exists(f"/proc/{watch}"):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:
        pass
    time.sleep(2)
PY
scraper=$!
echo "# rtlab watch memory: $MINUTES min, $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"
for m in $(seq 1 "$MINUTES"); do
  if [ "${BURST:-0}" = 1 ] && [ "$m" = 3 ]; then
    # stress-ng's switch stressor: hundreds of thousands of context switches a second on
    # every CPU, each a trace event the reader keeps in its per-CPU history for a while.
    stress-ng --switch "$(nproc)" --timeout 60s >/dev/null 2>&1 &
  fi
  sleep 60
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$watch/status" 2>/dev/null || echo gone)
  echo "minute $m: VmRSS $rss KiB"
done
wait "$watch"
kill "$prog" "$scraper" 2>/dev/null || true
python3 -c "
import json; d = json.load(open('$WORK/w.json'))
s = [x for x in d['series'] if x['name'].endswith(('/wakeup', '/timer'))]
print('samples', {x['name']: x['count'] for x in s}, 'outliers kept', len(d['outliers']),
      'explained', d['verdict']['outlier_summary']['explained'], 'hlog bytes', $(stat -c %s "$WORK/w.hlog"), 'warnings', d['warnings'])"
