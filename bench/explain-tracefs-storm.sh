#!/usr/bin/env bash
# The explainer's tracefs source (where eBPF cannot start) beside a storm of context switches:
# does its reader keep up, and are the outliers still named?
#
#   sudo bench/explain-tracefs-storm.sh [ROUNDS] [RTLAB...]
#
# Each round runs every given rtlab binary once (default: target/release/rtlab), in a
# rotating order, beside `stress-ng --cpu 2 --switch 1` (started once): `rtlab wakeup --cpus 0
# --threshold 1ms --load hog:99:3ms/200ms:0 --duration 3s --explain --explain-with tracefs`.
# Per binary: events the kernel lost (the run's warning), outliers over 1 ms, how many name
# rtlab-hog as their largest cause, how many say their trace was lost or not read, and the
# rtlab process's CPU time per second of run (user + system), and the machine's context
# switches per second over the run (/proc/stat), the storm's rate.
set -euo pipefail
ROUNDS=${1:-5}
shift || true
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (tracefs, SCHED_FIFO)" >&2; exit 2; fi
command -v stress-ng >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; }
BINS=("$@")
if [ ${#BINS[@]} = 0 ]; then cargo build --release -q; BINS=("$PWD/target/release/rtlab"); fi
WORK=$(mktemp -d)
setsid stress-ng --cpu 2 --switch 1 --timeout 0 --quiet >/dev/null 2>&1 & STORM=$!
trap 'kill -- -$STORM 2>/dev/null || true; rm -rf "$WORK"' EXIT
sleep 1
echo "# tracefs source beside stress-ng --cpu 2 --switch 1: $ROUNDS rounds, $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ)"
n=${#BINS[@]}
for r in $(seq 1 "$ROUNDS"); do
  for k in $(seq 0 $((n - 1))); do
    i=$(( (k + r) % n ))
    awk '/^ctxt/ {print $2}' /proc/stat >"$WORK/ctxt-$i-$r"
    /usr/bin/time -f "%U %S %e" -o "$WORK/time-$i-$r" "${BINS[$i]}" wakeup --cpus 0 --threshold 1ms \
      --load hog:99:3ms/200ms:0 --duration 3s --explain --explain-with tracefs --top 1000 \
      --quiet --json "$WORK/run-$i-$r.json" >/dev/null 2>>"$WORK/err-$i" || true
    awk '/^ctxt/ {print $2}' /proc/stat >>"$WORK/ctxt-$i-$r"
  done
done
/usr/bin/python3 - "$WORK" "$ROUNDS" "${BINS[@]}" <<'PY'
import json, re, sys
work, rounds, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("\n| build | round | events lost | outliers over 1 ms | named rtlab-hog | lost or not read | rtlab CPU ms/s | switches/s |")
print("|---|---|---|---|---|---|---|---|")
for i, b in enumerate(bins):
    tot = [0, 0, 0, 0]
    for r in range(1, rounds + 1):
        try:
            d = json.load(open(f"{work}/run-{i}-{r}.json"))
        except (OSError, ValueError) as e:
            print(f"| {b} | {r} | no result ({e}) | | | | | |")
            continue
        lost = sum(int(m) for w in d["warnings"]
                   for m in re.findall(r"the kernel lost (\d+) trace events", w))
        outs = [o for o in d.get("outliers", []) if o["latency_ns"] > 1_000_000]
        named = sum(1 for o in outs if o["causes"] and o["causes"][0].get("task") == "rtlab-hog")
        unknown = sum(1 for o in outs if any(c["kind"] in ("events_lost", "unread") for c in o["causes"]))
        u, s, e = (float(x) for x in open(f"{work}/time-{i}-{r}").read().split()[-3:])
        cpu = 1000 * (u + s) / max(e, 1e-9)
        c0, c1 = (int(x) for x in open(f"{work}/ctxt-{i}-{r}").read().split())
        rate = (c1 - c0) / max(e, 1e-9)
        for j, v in enumerate((lost, len(outs), named, unknown)):
            tot[j] += v
        print(f"| {b} | {r} | {lost} | {len(outs)} | {named} | {unknown} | {cpu:.0f} | {rate:,.0f} |")
    print(f"| {b} | all | {tot[0]} | {tot[1]} | {tot[2]} | {tot[3]} | | |")
PY
