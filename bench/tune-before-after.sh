#!/usr/bin/env bash
# Seed 001's story on this machine: survey, apply the run-time tuning, survey again, compare,
# revert, and check the machine is as it was.
#
#   sudo bench/tune-before-after.sh [SURVEY ARGS...]       (default: --quick)
#
# Prints rtlab diff of the two surveys (B/A per series, * where the 95 % intervals do not
# overlap) and the check rows that changed; at the end every file tune touched must read as
# before (the script compares them itself and exits 1 if one does not).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (rtlab tune writes /proc and /sys)" >&2; exit 2; fi
ARGS=("$@"); [ ${#ARGS[@]} -eq 0 ] && ARGS=(--quick)
cargo build --release -q
RTLAB=$PWD/target/release/rtlab
WORK=$(mktemp -d)
STATE=$WORK/tune.json
cleanup() { [ -f "$STATE" ] && "$RTLAB" tune --revert "$STATE" >/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
# shellcheck source=bench/tune-files.sh
. bench/tune-files.sh
snapshot > "$WORK/machine-before"
echo "# before: rtlab survey ${ARGS[*]}"
"$RTLAB" survey "${ARGS[@]}" --out "$WORK/before" -q >/dev/null 2>"$WORK/before.err"
"$RTLAB" tune --apply --state "$STATE"
echo "# after: rtlab survey ${ARGS[*]}"
"$RTLAB" survey "${ARGS[@]}" --out "$WORK/after" -q >/dev/null 2>"$WORK/after.err"
echo "# rtlab diff before after"
"$RTLAB" diff "$WORK/before/report.json" "$WORK/after/report.json" || true
echo "# checks that changed"
python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
def checks(d):
    doc = json.load(open(f"{w}/{d}/report.json"))
    return {s["name"]: (s["config"].get("status"), s["config"].get("found", s["config"].get("value")))
            for s in doc["series"] if s["name"].startswith("check/")}
a, b = checks("before"), checks("after")
for k in sorted(a):
    if a[k] != b.get(k):
        print(f"{k}: {a[k][0]} ({a[k][1]}) -> {b[k][0]} ({b[k][1]})")
for d in ("before", "after"):
    doc = json.load(open(f"{w}/{d}/report.json"))
    for row in doc["verdict"].get("survey", []):
        if row["area"] in ("wakeup", "noise"):
            print(f"{d} {row['area']}: {row['reading']}")
PY
"$RTLAB" tune --revert "$STATE"
snapshot > "$WORK/machine-after"
if diff "$WORK/machine-before" "$WORK/machine-after"; then
  echo "# machine as found: $(wc -l < "$WORK/machine-before") files compared, all equal"
else
  echo "# NOT as found (above)" >&2; exit 1
fi
