#!/usr/bin/env bash
# rtlab tune --verify on this machine: each run-time fix measured alone against the machine as
# found, in interleaved rounds, kept only where it measurably helped; idle, then beside
# `stress-ng --cpu 2`: by timed wakeups, by a running program watched (--pid: its timer slack
# measured too) and, beside the load, by a program started anew in each block (--verify-with);
# the program is examples/c/periodic.c at SCHED_OTHER. Each run ends with every value it
# did not keep as it was found; the script reverts what a run kept before the next one and
# checks, at the end, that every file tune may touch reads as before (exit 1 if one does not).
#
#   sudo bench/tune-verify.sh [ROUNDS] [BLOCK]        (default: 20 rounds of 2s blocks)
set -euo pipefail
ROUNDS=${1:-20}
BLOCK=${2:-2s}
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root (rtlab tune writes /proc and /sys)" >&2; exit 2; fi
command -v stress-ng >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; }
if [ -z "${RTLAB:-}" ]; then cargo build --release -q; RTLAB=$PWD/target/release/rtlab; fi
WORK=$(mktemp -d)
LOADPID=
SLACKPID=
cleanup() {
  [ -n "$LOADPID" ] && kill -- -"$LOADPID" 2>/dev/null
  [ -n "$SLACKPID" ] && kill "$SLACKPID" 2>/dev/null
  for s in "$WORK"/state-*.json; do [ -f "$s" ] && "$RTLAB" tune --revert "$s" >/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
# shellcheck source=bench/tune-files.sh
. bench/tune-files.sh
gcc -O2 -pthread -o "$WORK/periodic" examples/c/periodic.c
snapshot > "$WORK/machine-before"
echo "host: $(uname -r), $(nproc) CPUs; $ROUNDS rounds of $BLOCK blocks"
# A running program (SCHED_OTHER, 1 ms periods) whose timer slack --pid asks to change: with
# --pid, each block watches it (rtlab watch --pid), so its slack is measured with the rest.
# On the real-time CPU (tune's default, the last one here), where the CPU fixes act.
taskset -c "$(( $(nproc) - 1 ))" "$WORK/periodic" 100000 1000 >/dev/null &
SLACKPID=$!
verify() {  # verify LABEL [ARGS...]
  local label=$1; shift
  local state=$WORK/state-$label.json
  echo
  echo "## $label"
  echo '```'
  "$RTLAB" tune --apply --verify --state "$state" --rounds "$ROUNDS" --block "$BLOCK" --json "$WORK/$label.json" "$@" 2>"$WORK/$label.err" \
    | sed -n '/^rtlab tune --verify:/,/^not applied/p' | grep -v '^not applied' || true
  echo '```'
  grep -E '^  (round|as found|with the kept)' "$WORK/$label.err" | tail -3 | sed 's/^/    /'
  [ -f "$state" ] && "$RTLAB" tune --revert "$state" >/dev/null && echo "(reverted what it kept before the next run)"
  return 0
}
verify idle
verify idle-running-program --pid "$SLACKPID"
setsid stress-ng --cpu 2 --quiet >/dev/null 2>&1 & LOADPID=$!
sleep 1
verify stress-ng
verify stress-ng-running-program --pid "$SLACKPID"
verify stress-ng-own-program --verify-with -- "$WORK/periodic" 100 1000
kill -- -"$LOADPID" 2>/dev/null || true; LOADPID=
kill "$SLACKPID" 2>/dev/null || true; SLACKPID=
snapshot > "$WORK/machine-after"
if diff "$WORK/machine-before" "$WORK/machine-after"; then
  echo; echo "every file tune may touch reads as before"
else
  echo "NOT as before (above)"; exit 1
fi
