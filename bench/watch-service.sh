#!/usr/bin/env bash
# rtlab watch as a node exporter, for MINUTES, in the sandbox deploy/systemd/rtlab-watch.service
# asks for (emulated where systemd is not PID 1: a private mount namespace with / and /sys
# read-only and /tmp, /root and /home empty; only CAP_BPF and CAP_PERFMON in the bounding
# set; no_new_privs; nice 5), scraped every 2 s as Prometheus would.
#
#   sudo bench/watch-service.sh [MINUTES]        (default 15)
#   CHURN=0 sudo bench/watch-service.sh 10       (no short-lived threads)
#   CHURNERS=4 sudo bench/watch-service.sh 8     (four such streams: the series limit sooner)
#
# Meanwhile a FIFO 50 loop runs for the whole time (examples/c/periodic.c, 1 ms) and a
# short-lived FIFO 10 process with a thread of the same name starts every 3 s (a new pid and
# tid each time). Each minute: rtlab's VmRSS, the number of sample lines and of distinct
# label sets on /metrics (bounded: names and cgroups, never tids), and the scrape's time.
# At the end: SIGTERM (exit status, time to exit), then a restart on the same port (time to
# the first answered scrape), as `systemctl restart` does.
set -euo pipefail
MINUTES=${1:-15}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (eBPF)" >&2; exit 2; fi
RTLAB=${RTLAB:-}
if [ -z "$RTLAB" ]; then cargo build --release -q -p rtlab; RTLAB=target/release/rtlab; fi
RTLAB=$(realpath "$RTLAB")
WORK=$(mktemp -d /var/tmp/rtlab-service.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
cc -O2 -pthread -o "$WORK/periodic" examples/c/periodic.c
cp "$RTLAB" "$WORK/rtlab"
PORT=${PORT:-19464}

# The unit's sandbox, as far as it can be made without systemd.
start_watch() {
  unshare --mount --propagation private sh -c "
    mount -o remount,bind,ro / && mount -o remount,bind,ro /sys &&
    mount -t tmpfs -o ro tmpfs /root && mount -t tmpfs tmpfs /tmp &&
    { [ ! -d /home ] || mount -t tmpfs -o ro tmpfs /home; } &&
    exec setpriv --bounding-set -all,+bpf,+perfmon --inh-caps=-all --no-new-privs \
      nice -n 5 $WORK/rtlab watch --all --rt-only --quiet --metrics 127.0.0.1:$PORT" \
    >"$WORK/watch.out" 2>"$WORK/watch.err" &
  WATCH=$!
  PIDS+=("$WATCH")
}
# The rtlab process itself (unshare execs sh, which execs setpriv, nice, rtlab: one pid).
scrape() { curl -s -o "$WORK/page" -w '%{time_total}' "http://127.0.0.1:$PORT/metrics"; }

chrt -f 50 "$WORK/periodic" $((MINUTES * 60 + 120)) 1000 >/dev/null &
PIDS+=($!)
if [ "${CHURN:-1}" = 1 ]; then
  for _ in $(seq 1 "${CHURNERS:-1}"); do
    (while :; do chrt -f 10 "$WORK/periodic" 2 1000 >/dev/null; sleep 1; done) &
    PIDS+=($!)
  done
fi
start_watch
(sleep 3; while :; do scrape >/dev/null || true; sleep 2; done) &
PIDS+=($!)
sleep 5
echo "# rtlab watch as a service: $MINUTES min, churn ${CHURN:-1} x ${CHURNERS:-1}, $(uname -r), $(nproc) CPUs, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"
grep -E '^Cap(Bnd|Eff)|^NoNewPrivs' "/proc/$WATCH/status" | tr '\n' ' '; echo
for m in $(seq 1 "$MINUTES"); do
  sleep 60
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$WATCH/status" 2>/dev/null || echo gone)
  t=$(scrape || echo failed)
  lines=$(grep -vc '^#' "$WORK/page" || true)
  sets=$(grep -v '^#' "$WORK/page" | sed -e 's/ [^ ]*$//' -e 's/,le="[^"]*"//' -e 's/_\(bucket\|sum\|count\){/{/' | sort -u | wc -l)
  tids=$(grep -c 'tid=' "$WORK/page" || true)
  unwatched=$(awk '/^rtlab_watch_threads_unwatched_total/ {s += $2} END {print s + 0}' "$WORK/page")
  loops=$(awk '/^rtlab_watch_delay_seconds_count\{.*rt-loop/ {s += $2} END {print s + 0}' "$WORK/page")
  echo "minute $m: VmRSS $rss KiB, /metrics $lines samples in $sets label sets (tid labels: $tids), scrape ${t}s, threads unwatched $unwatched, rt-loop delays counted $loops"
done
grep -E 'rtlab_watch_delay_seconds_count\{.*rt-loop' "$WORK/page" || true
{ grep -E '^rtlab_watch_events_lost_total' "$WORK/page" || true; } | awk '{s += $2} END {print "events lost, all CPUs:", s + 0}'
t0=$(date +%s%N)
kill -TERM "$WATCH"
status=0; wait "$WATCH" || status=$?
echo "SIGTERM: exit status $status after $(( ($(date +%s%N) - t0) / 1000000 )) ms; stderr: $(head -c 300 "$WORK/watch.err")"
t0=$(date +%s%N)
start_watch
until scrape >/dev/null 2>&1; do
  sleep 0.05
  [ $(( ($(date +%s%N) - t0) / 1000000000 )) -lt 30 ] || { echo "restart: no answer in 30 s"; exit 1; }
done
echo "restart: first answered scrape after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
kill -TERM "$WATCH"; wait "$WATCH" || true
