#!/usr/bin/env bash
# The network stack's own priority inversion (seed 002's central finding), without and with
# the fix, interleaved.
#
#   sudo bench/net-stack.sh [ROUNDS] [SECONDS] [CPU]    (defaults: 6 rounds of 4 s, last CPU)
#
# One RT stream (200 B every 5 ms, SCHED_FIFO 80, on CPU) to rtlab's peer in a network
# namespace behind a veth pair; on the same CPU a SCHED_FIFO 50 hog (20 ms of every 100 ms)
# and bulk background traffic on another connection. What changes is who processes the
# packets the host end of the veth receives (`rtlab net run --napi`):
#   backlog      as created: NET_RX softirq on the CPU that sent them (the peer's send)
#   softirq      GRO on, so the veth has NAPI, polled in NET_RX softirq
#   threaded     threaded NAPI: a napi/<dev> kernel thread, SCHED_OTHER, pinned to CPU
#   threaded:51  the same thread at SCHED_FIFO 51: above the hog, below the RT stream (the fix
#                rtlab check's net_stack item prints)
# Each round runs the four in a rotated order. Per mode: the median over rounds of the round
# trip's p99 and max, the worst max, and the share of round trips over 5 ms (a deadline of one
# period). Then one `rtlab net pingpong --explain` in the threaded mode, to show the cause.
set -euo pipefail
ROUNDS=${1:-6}
SECS=${2:-4}
CPU=${3:-$(( $(nproc) - 1 ))}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (network namespaces, SCHED_FIFO)" >&2; exit 2; fi
cargo build --release -q
RTLAB=$PWD/target/release/rtlab
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MODES=(backlog softirq threaded threaded:51)
echo "# net-stack inversion: $ROUNDS rounds x ${SECS}s per mode, CPU $CPU, $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
for r in $(seq 1 "$ROUNDS"); do
  for k in $(seq 0 3); do
    mode=${MODES[$(( (r + k) % 4 ))]}
    "$RTLAB" net run --topology netns --napi "$mode" --cpus "$CPU" --prio 80 \
      --stream 200B@5ms --deadline 5ms --background-traffic \
      --load "hog:50:20ms/100ms:$CPU" --duration "${SECS}s" -q \
      --json "$WORK/${mode/:/-}-$r.json" >/dev/null 2>>"$WORK/err"
    printf '.' >&2
  done
done
echo >&2
"$RTLAB" net pingpong --topology netns --napi threaded --cpus "$CPU" --prio 80 --size 200 \
  --load "hog:50:20ms/100ms:$CPU" --duration "${SECS}s" --explain --top 3 -q \
  > "$WORK/pingpong.txt" 2>>"$WORK/err" || true
python3 - "$WORK" "$ROUNDS" <<'PY'
import json, sys
work, rounds = sys.argv[1], int(sys.argv[2])
med = lambda xs: sorted(xs)[len(xs) // 2]
print()
print("| --napi | who processes the acks | rtt p99 (median) | rtt max (median) | rtt max (worst) | round trips over 5 ms |")
print("|---|---|---|---|---|---|")
who = {"backlog": "NET_RX softirq, sending CPU", "softirq": "NAPI in NET_RX softirq",
       "threaded": "napi thread, SCHED_OTHER", "threaded:51": "napi thread, SCHED_FIFO 51"}
for mode in ("backlog", "softirq", "threaded", "threaded:51"):
    p99, mx, over, n = [], [], 0, 0
    for r in range(1, rounds + 1):
        doc = json.load(open(f"{work}/{mode.replace(':', '-')}-{r}.json"))
        s = next(s for s in doc["series"] if s["name"].endswith("/rtt") and not s["name"].startswith("all"))
        p99.append(s["p99"] / 1e3); mx.append(s["max"] / 1e3)
        c = s["config"]["counters"]
        over += c["deadline_misses"]; n += c["acked"]
    print(f"| {mode} | {who[mode]} | {med(p99):.0f} us | {med(mx):.0f} us | {max(mx):.0f} us | {100 * over / max(n, 1):.2f} % |")
print()
print("rtlab net pingpong --napi threaded --explain (the slowest round trips):")
print()
for line in open(f"{work}/pingpong.txt"):
    if "late by" in line or "waited" in line:
        print("    " + line.strip())
PY
