#!/usr/bin/env bash
# Seed 003's ratios, measured here: rtlab lock between two processes (the seed's method) and
# between threads, interleaved; rtlab invert for the inversion row.
#
#   sudo bench/lock-seed.sh [ROUNDS] [SECONDS]      (defaults: 20 rounds of 2 s per mode)
#
# Each round runs `rtlab lock --processes` and `rtlab lock` (threads), the order alternating
# between rounds, over the same implementations (every one measured batch by batch,
# round-robin, inside each run). Ratios are taken within a run (both sides measured in the
# same seconds) and summarised over the rounds as a median with its 95 % interval
# (order statistics, bench/ci.py). The inversion row comes from one `rtlab invert` run of
# 20 s (none/glibc vs inherit/glibc worst waits: the seed's 805 ms vs 23 ms).
set -euo pipefail
ROUNDS=${1:-20}
SECS=${2:-2}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (SCHED_FIFO, glibc-pp)" >&2; exit 2; fi
cargo build --release -q
RTLAB=$PWD/target/release/rtlab
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
IMPLS=rtlab-pi,rtlab-robust,glibc-normal,glibc-pi,glibc-pp,glibc-robust,glibc-robust-pi,sysv-sem
echo "# seed 003 vs rtlab: $ROUNDS rounds x ${SECS}s per mode, $(nproc) CPUs, $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
for r in $(seq 1 "$ROUNDS"); do
  procs=("$RTLAB" lock --processes --impl "$IMPLS" --duration "${SECS}s" -q --json "$WORK/p$r.json")
  threads=("$RTLAB" lock --impl "$IMPLS" --duration "${SECS}s" -q --json "$WORK/t$r.json")
  if [ $((r % 2)) = 1 ]; then "${procs[@]}" >/dev/null; "${threads[@]}" >/dev/null
  else "${threads[@]}" >/dev/null; "${procs[@]}" >/dev/null; fi
  printf '.' >&2
done
"$RTLAB" invert --variant none/glibc,inherit/glibc,none/rtlab,inherit/rtlab --duration 20s -q --json "$WORK/invert.json" >/dev/null
echo >&2
python3 - "$WORK" "$ROUNDS" <<'PY'
import json, sys
sys.path.insert(0, "bench")
from ci import fmt_ci
work, rounds = sys.argv[1], int(sys.argv[2])
def vals(doc):
    return {s["name"]: s.get("value") for s in doc["series"]}
P = [vals(json.load(open(f"{work}/p{r}.json"))) for r in range(1, rounds + 1)]
T = [vals(json.load(open(f"{work}/t{r}.json"))) for r in range(1, rounds + 1)]
med = lambda xs: sorted(xs)[len(xs) // 2]
def ratio(docs, a, b):
    return fmt_ci([d[a] / d[b] for d in docs if d.get(a) and d.get(b)])
def ns(docs, a):
    xs = [d[a] for d in docs if d.get(a)]
    return f"{med(xs) / 1000:.3f} us" if xs else "-"
print()
print("| seed 003 | seed | rtlab here, processes (median [95 % CI]) | threads |")
print("|---|---|---|---|")
rows = [
    ("PI vs normal mutex, fast path", "~1.5x", "glibc-pi/uncontended", "glibc-normal/uncontended"),
    ("  rtlab PI vs glibc normal, fast path", "-", "rtlab-pi/uncontended", "glibc-normal/uncontended"),
    ("PI vs normal mutex, slow path", "~1.6x", "glibc-pi/handoff", "glibc-normal/handoff"),
    ("  rtlab PI vs glibc normal, slow path", "-", "rtlab-pi/handoff", "glibc-normal/handoff"),
    ("PP vs normal mutex, fast path", "5-15x", "glibc-pp/uncontended", "glibc-normal/uncontended"),
    ("PP vs normal mutex, slow path", "~1.2x", "glibc-pp/handoff", "glibc-normal/handoff"),
    ("robust mutex vs SysV sem, fast path", "0.42x (1.8 vs 4.3 us)", "glibc-robust/uncontended", "sysv-sem/uncontended"),
    ("  rtlab robust vs SysV sem, fast path", "-", "rtlab-robust/uncontended", "sysv-sem/uncontended"),
    ("robust mutex vs SysV sem, slow path", "1.29x (8.5 vs 6.6 us)", "glibc-robust/handoff", "sysv-sem/handoff"),
    ("  rtlab robust vs SysV sem, slow path", "-", "rtlab-robust/handoff", "sysv-sem/handoff"),
]
for label, seed, a, b in rows:
    print(f"| {label} | {seed} | {ratio(P, a, b)} | {ratio(T, a, b)} |")
print()
print("| series (median) | processes | threads |")
print("|---|---|---|")
for name in sorted(P[0]):
    print(f"| {name} | {ns(P, name)} | {ns(T, name)} |")
inv = {s["name"]: s for s in json.load(open(f"{work}/invert.json"))["series"]}
def mx(n):
    return inv[n]["max"] / 1e6 if n in inv and inv[n].get("max") is not None else float("nan")
print()
print("| inversion (worst wait, one 20 s run) | seed | here |")
print("|---|---|---|")
print(f"| no protocol (glibc) | 805 ms | {mx('none/glibc'):.2f} ms |")
print(f"| priority inheritance (glibc) | 23 ms | {mx('inherit/glibc'):.2f} ms |")
print(f"| no protocol (rtlab) | - | {mx('none/rtlab'):.2f} ms |")
print(f"| priority inheritance (rtlab) | - | {mx('inherit/rtlab'):.2f} ms |")
print(f"| ratio none/inherit (glibc) | 35x | {mx('none/glibc') / mx('inherit/glibc'):.1f}x |")
PY
