#!/usr/bin/env bash
# rtlab net against sockperf (Debian), the padding experiment, and the seed-poc profile.
#
#   sudo bench/net.sh [ROUNDS] [SECONDS]       (defaults: 5 rounds of 5 s per tool and protocol)
#   PARTS=padding sudo bench/net.sh          (any of pingpong,padding,poc; default all)
#
# 1. Ping-pong, 64 B, loopback, TCP and UDP: `rtlab net pingpong` against a separate
#    `rtlab net serve`, and `sockperf ping-pong --full-rtt` against `sockperf server`,
#    interleaved round by round, both sides of both tools at SCHED_FIFO 80 (chrt for sockperf).
#    Ratio of the p50 per round; target rtlab <= 1.1x sockperf.
# 2. Padding (seed 002): netns, --loss 1, --stream 100B@10ms, 60 s, without and with
#    --pad-segments 3: max and p99.9, retransmits. Then the same at 100B@50ms with tail-loss
#    probes off on both sides (net.ipv4.tcp_early_retrans=0 here, restored at exit, and in the
#    peer's namespace via --netns-sysctl), the closest this kernel gets to the seed's TCP.
# 3. seed-poc profile (seed 001), loopback, under --load cpu, without and with
#    --background-traffic, 30 s each.
set -euo pipefail
ROUNDS=${1:-5}
SECS=${2:-5}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (SCHED_FIFO, netns)" >&2; exit 2; fi
need=""
command -v sockperf >/dev/null || need="$need sockperf"
command -v nft >/dev/null || need="$need nftables"
command -v stress-ng >/dev/null || true
if [ -n "$need" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null; fi
cargo build --profile profiling -q
R=$PWD/target/profiling/rtlab
WORK=$(mktemp -d)
PIDS=()
PARTS=${PARTS:-pingpong,padding,poc}
has() { [[ ",$PARTS," == *",$1,"* ]]; }
EARLY=$(sysctl -n net.ipv4.tcp_early_retrans)
cleanup() {
  for p in "${PIDS[@]:-}"; do kill "$p" 2>/dev/null || true; done
  sysctl -q -w net.ipv4.tcp_early_retrans="$EARLY"
  rm -rf "$WORK"
}
trap cleanup EXIT
echo "# net: $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ), sockperf $(sockperf --version 2>&1 | grep -o 'version #[^ ]*' | head -1)"

if has pingpong; then
chrt -f 80 "$R" net serve --listen 127.0.0.1:7471 --max-prio 80 >/dev/null 2>&1 & PIDS+=($!)
chrt -f 80 sockperf server -i 127.0.0.1 -p 11111 --tcp >/dev/null 2>&1 & PIDS+=($!)
chrt -f 80 sockperf server -i 127.0.0.1 -p 11112 >/dev/null 2>&1 & PIDS+=($!)
sleep 1
for r in $(seq 1 "$ROUNDS"); do
  for proto in tcp udp; do
    "$R" net pingpong --peer 127.0.0.1:7471 --proto "$proto" --size 64 --duration "${SECS}s" --prio 80 \
      --quiet --json "$WORK/rtlab-$proto-$r.json" >/dev/null
    if [ "$proto" = tcp ]; then flag="--tcp"; port=11111; else flag=""; port=11112; fi
    chrt -f 80 sockperf ping-pong -i 127.0.0.1 -p "$port" $flag -m 64 -t "$SECS" --full-rtt \
      > "$WORK/sockperf-$proto-$r.txt" 2>&1
  done
done
fi
if has padding; then
  "$R" net run --topology netns --loss 1 --stream 100B@10ms --duration 60s --quiet --json "$WORK/pad0.json" >/dev/null
  "$R" net run --topology netns --loss 1 --stream 100B@10ms --pad-segments 3 --duration 60s --quiet --json "$WORK/pad3.json" >/dev/null
  sysctl -q -w net.ipv4.tcp_early_retrans=0
  for pad in 0 3; do
    extra=(); [ "$pad" = 3 ] && extra=(--pad-segments 3)
    "$R" net run --topology netns --loss 1 --stream 100B@50ms "${extra[@]}" --duration 60s \
      --netns-sysctl net.ipv4.tcp_early_retrans=0 --quiet --json "$WORK/tlp-off-pad$pad.json" >/dev/null
  done
  sysctl -q -w net.ipv4.tcp_early_retrans="$EARLY"
fi
if has poc; then
  "$R" net run --profile seed-poc --load cpu --duration 30s --quiet --json "$WORK/poc.json" >/dev/null
  "$R" net run --profile seed-poc --load cpu --background-traffic --duration 30s --quiet --json "$WORK/poc-bg.json" >/dev/null
fi

python3 - "$WORK" "$ROUNDS" "$PARTS" <<'PY'
import json, os, re, statistics, sys
work, rounds, parts = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
def series(doc, name):
    return next((s for s in doc["series"] if s["name"] == name), None)
def sockperf(path):
    text = open(path).read()
    get = lambda label: float(re.search(r"percentile\s+" + label + r"\s*=\s*([\d.]+)", text).group(1)) * 1000
    mx = float(re.search(r"<MAX> observation =\s*([\d.]+)", text).group(1)) * 1000
    return {"p50": get("50.000"), "p99": get("99.000"), "p999": get("99.900"), "max": mx}
us = lambda ns: f"{ns/1000:.2f}"
if "pingpong" in parts:
  print("\n### Ping-pong, 64 B, loopback, both tools at SCHED_FIFO 80 (rtlab net serve / sockperf server as separate processes)\n")
  print("| proto | round | rtlab p50 us | sockperf p50 us | ratio | rtlab p99 us | sockperf p99 us | rtlab max us | sockperf max us |")
  print("|---|---|---|---|---|---|---|---|---|")
  ratios = {"tcp": [], "udp": []}
  for proto in ("tcp", "udp"):
      for r in range(1, rounds + 1):
          s = series(json.load(open(f"{work}/rtlab-{proto}-{r}.json")), "pingpong/rtt")
          k = sockperf(f"{work}/sockperf-{proto}-{r}.txt")
          ratios[proto].append(s["p50"] / k["p50"])
          print(f"| {proto} | {r} | {us(s['p50'])} | {us(k['p50'])} | {s['p50']/k['p50']:.3f} | {us(s['p99'])} | {us(k['p99'])} | {us(s['max'])} | {us(k['max'])} |")
  print("\n| target | per round | median | met? |")
  print("|---|---|---|---|")
  for proto in ("tcp", "udp"):
      m = statistics.median(ratios[proto])
      print(f"| {proto}: pingpong/rtt p50 <= 1.1x sockperf --full-rtt p50 | {', '.join(f'{x:.3f}' for x in ratios[proto])} | {m:.3f} | {'yes' if m <= 1.1 else 'NO'} |")
if "padding" in parts:
  print("\n### Padding (seed 002): netns, 1 % loss both ways, 60 s per run\n")
  print("| run | count | p50 us | p99 us | p99.9 us | max us | deadline misses | retransmits | pad bytes |")
  print("|---|---|---|---|---|---|---|---|---|")
  for name, f, stream in (("100B@10ms, no padding", "pad0", "100B@10ms"), ("100B@10ms, --pad-segments 3", "pad3", "100B@10ms"),
                          ("100B@50ms, TLP off, no padding", "tlp-off-pad0", "100B@50ms"), ("100B@50ms, TLP off, --pad-segments 3", "tlp-off-pad3", "100B@50ms")):
      s = series(json.load(open(f"{work}/{f}.json")), f"{stream}/rtt")
      c = s["config"]["counters"]
      print(f"| {name} | {s['count']} | {us(s['p50'])} | {us(s['p99'])} | {us(s['p999'])} | {us(s['max'])} | {c['deadline_misses']} | {c['retransmits']} | {c['pad_bytes']} |")
  s0 = series(json.load(open(f"{work}/pad0.json")), "all/rtt")
  print("\nsysctls (measuring side, TLP-on runs): " + json.dumps(s0["config"]["sysctls"]))
if "poc" in parts:
  print("\n### seed-poc profile, loopback, --load cpu, 30 s\n")
  print("| stream | max us (no bg) | p99.9 us (no bg) | max us (bg traffic) | p99.9 us (bg traffic) |")
  print("|---|---|---|---|---|")
  a, b = json.load(open(f"{work}/poc.json")), json.load(open(f"{work}/poc-bg.json"))
  for s in a["series"]:
      if not s["name"].endswith("/rtt"):
          continue
      t = series(b, s["name"])
      print(f"| {s['name']} | {us(s['max'])} | {us(s['p999'])} | {us(t['max']) if t else '-'} | {us(t['p999']) if t else '-'} |")
PY
