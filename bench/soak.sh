#!/usr/bin/env bash
# Runs the timing-dependent test binaries (the end-to-end tests of the experiments, the
# explainer, the watcher, the survey and the report; the trace and lab unit tests; the C ABI's
# and the Java binding's, whose inversion test is timed) ROUNDS times in a row, first on an idle machine,
# then beside `stress-ng --cpu 2`, and counts failures. A test that fails by chance here
# would fail a CI landing by chance too: the goal is 0 failures. The loads, besides idle:
# `stress` (stress-ng --cpu 2), `switch` (stress-ng --cpu 2 --switch 1: a storm of context
# switches too), `build` (a looping `cargo build -j2` of a copy of this repository, its own
# target directory: what a developer's machine or a CI runner does beside the suite).
#
#   sudo bench/soak.sh [ROUNDS] [idle|stress|switch|build|both|busy] [BINARY_REGEX]
#   sudo bench/soak.sh 20                 # the acceptance run: 20 x idle, 20 x stress
#   sudo bench/soak.sh 5 busy '.'         # every test binary, 5 x beside each busy load
#   sudo bench/soak.sh 3 stress 'explain' # a quick look at one binary
#
# The test binaries and the rtlab binary are copied to a temporary directory first, so a
# rebuild while the soak runs does not swap them. A failed run's output is kept under
# $OUT (default bench/soak-out/) as <binary>-<mode>-<round>.log; the summary is printed
# and written to $OUT/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-20}
modes=${2:-both}
pattern=${3:-'^(explain|wakeup|lock|net|slack|load_survey|report|hostile|watch|rtlab_trace|rtlab_lab|c_abi|java)-'}
out=${OUT:-bench/soak-out}
case $modes in idle | stress | switch | build) modes=("$modes") ;; both) modes=(idle stress) ;;
  busy) modes=(switch build) ;;
  *) echo "soak: mode must be idle, stress, switch, build, both or busy, got '$modes'" >&2; exit 2 ;; esac
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "soak: ROUNDS must be a positive number, got '$rounds'" >&2; exit 2; }
if [[ " ${modes[*]} " == *" stress "* || " ${modes[*]} " == *" switch "* ]] && ! command -v stress-ng >/dev/null; then
  echo "soak: stress-ng is not installed (apt-get install stress-ng)" >&2; exit 2
fi

work=$(mktemp -d /tmp/rtlab-soak.XXXXXX)
stress_pid=
cleanup() {
  [ -n "$stress_pid" ] && kill -- -"$stress_pid" 2>/dev/null && wait "$stress_pid" 2>/dev/null
  rm -rf "$work"
}
# The load of `mode` in the background, in a process group of its own ($stress_pid).
start_load() {
  case $1 in
    stress) setsid stress-ng --cpu 2 --timeout 0 --quiet & ;;
    switch) setsid stress-ng --cpu 2 --switch 1 --timeout 0 --quiet & ;;
    build)
      mkdir -p "$work/copy"
      git archive HEAD | tar -x -C "$work/copy"
      setsid bash -c 'cd "$1" && while :; do cargo build -j2 --release -q --target-dir "$1/target" >/dev/null 2>&1; touch crates/rtlab-trace/src/lib.rs; done' _ "$work/copy" & ;;
    *) return ;;
  esac
  stress_pid=$!
  sleep 1
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "soak: building the tests (release)" >&2
cargo build --release >&2
# The test executables cargo would run, from its JSON messages.
cargo test --release --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"], m["manifest_path"].rsplit("/", 1)[0])' >"$work/executables"
cp target/release/rtlab "$work/rtlab"
# The C ABI's libraries, for the C and Java tests (they take RTLAB_LIBDIR).
cp target/release/librtlab.so target/release/librtlab.a "$work/"
export RTLAB_LIBDIR="$work"
mkdir -p "$work/bin" "$out"
# Cargo runs a test binary in its package's directory; so does the soak.
while read -r exe dir; do
  name=$(basename "$exe")
  if [[ $name =~ $pattern ]]; then
    cp "$exe" "$work/bin/$name"
    echo "$dir" >"$work/bin/$name.dir"
  fi
done <"$work/executables"
bins=$(ls "$work/bin" | grep -v '\.dir$' || true)
[ -n "$bins" ] || { echo "soak: no test binary matches '$pattern'" >&2; exit 2; }
export CARGO_BIN_EXE_rtlab="$work/rtlab"

summary="$out/summary.txt"
{
  echo "# bench/soak.sh $rounds ${modes[*]} on $(uname -r), $(nproc) CPUs, $(date -u +%FT%TZ)"
  echo "# commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
  printf '%-28s %-7s %5s %7s %9s\n' binary mode runs failed seconds
} | tee "$summary"
total_failed=0
for mode in "${modes[@]}"; do
  start_load "$mode"
  for b in $bins; do
    failed=0
    started=$(date +%s)
    for ((i = 1; i <= rounds; i++)); do
      log="$out/${b%-*}-$mode-$i.log"
      # Tests of one binary run in parallel as cargo would run them (default threads).
      if (cd "$(cat "$work/bin/$b.dir")" && "$work/bin/$b") >"$log" 2>&1; then
        rm -f "$log"
      else
        failed=$((failed + 1))
        echo "soak: $b ($mode) failed in round $i: $log" >&2
      fi
    done
    printf '%-28s %-7s %5d %7d %9d\n' "${b%-*}" "$mode" "$rounds" "$failed" $(($(date +%s) - started)) | tee -a "$summary"
    total_failed=$((total_failed + failed))
  done
  if [ -n "$stress_pid" ]; then
    kill -- -"$stress_pid" 2>/dev/null || true
    wait "$stress_pid" 2>/dev/null || true
    stress_pid=
  fi
done
echo "# $total_failed failed runs" | tee -a "$summary"
[ "$total_failed" = 0 ]
