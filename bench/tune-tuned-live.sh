# Sourced by bench/tune-tuned.sh with LIVE=1 (its $work holds tuned unpacked and the profile
# in $work/profiles/rtlab-rt): tuned's own daemon applies the profile, `rtlab check` judges
# the machine before, while it is applied and after tuned stopped.
# tuned's own interpreter (its first line): the system's, where its imports are installed.
py=/usr/bin/python3
for m in procfs pyudev; do
  "$py" -c "import $m" 2>/dev/null || {
    echo "skipped: the live run needs tuned's imports (apt-get install python3-linux-procfs python3-pyudev)" >&2
    exit "$static"
  }
done
pkg=$work/root/usr/lib/python3/dist-packages
# Every path tuned keeps state, logs or profiles in, and irqbalance's config file (which its
# irqbalance plugin edits), redirected into $work: nothing of tuned's stays on the machine.
sed -i -e "s#\"/etc/tuned#\"$work/etc#g" -e "s#\"/run/tuned#\"$work/run#g" \
  -e "s#\"/var/lib/tuned#\"$work/lib#g" -e "s#\"/var/log/tuned#\"$work/log#g" \
  -e "s#\"/usr/lib/tuned#\"$work/root/usr/lib/tuned#g" \
  -e "s#\"/etc/default/irqbalance#\"$work/irqbalance#g" "$pkg/tuned/consts.py"
if grep -q '"/etc/tuned\|"/run/tuned\|"/var/lib/tuned\|"/var/log/tuned' "$pkg/tuned/consts.py"; then
  echo "tune-tuned: not every path of tuned's was redirected; not run" >&2
  exit 1
fi
mkdir -p "$work/etc" "$work/run" "$work/lib" "$work/log"
cp -r "$work/profiles/rtlab-rt" "$work/etc/"
# Static tuning only (no monitors), as the realtime profiles run.
printf 'daemon = 1\ndynamic_tuning = 0\n' >"$work/etc/tuned-main.conf"

# What the profile may change, saved: put back by `cleanup` where tuned did not.
for f in /proc/sys/kernel/sched_rt_runtime_us /sys/kernel/mm/damon/admin/kdamonds/*/state \
  /proc/irq/default_smp_affinity /proc/irq/*/smp_affinity_list; do
  [ -r "$f" ] && printf '%s %s\n' "$f" "$(cat "$f")"
done >"$work/saved"
restore_saved() {
  local f v put=0
  while read -r f v; do
    if [ "$(cat "$f" 2>/dev/null)" != "$v" ]; then
      echo "$v" >"$f" 2>/dev/null || true
      put=$((put + 1))
    fi
  done <"$work/saved"
  rm -f "$work/saved"
  [ "$put" = 0 ] || echo "tune-tuned: $put value(s) tuned left changed were put back by this script" >&2
}

# The status of every check, one "id status value-found" line each.
statuses() {
  "$RTLAB" check --json "$work/check.json" >/dev/null 2>&1 || true
  python3 -c '
import json, sys
for s in json.load(open(sys.argv[1]))["series"]:
    c = s["config"]
    print(s["name"].removeprefix("check/"), c["status"], " ".join(str(c.get("value", "")).split()))' "$work/check.json"
}
statuses >"$work/before"
tuned_log=$work/log/run.log
PYTHONPATH=$pkg "$py" "$work/root/usr/sbin/tuned" --no-dbus --no-socket --profile rtlab-rt \
  --log "$tuned_log" --pid "$work/run/tuned.pid" >"$work/log/stdout" 2>&1 &
tuned_pid=$!
for _ in $(seq 600); do
  grep -q "static tuning from profile 'rtlab-rt' applied" "$tuned_log" 2>/dev/null && break
  kill -0 "$tuned_pid" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q "static tuning from profile 'rtlab-rt' applied" "$tuned_log" 2>/dev/null; then
  echo "tune-tuned: tuned did not apply the profile:" >&2
  cat "$tuned_log" "$work/log/stdout" >&2 2>/dev/null
  exit 1
fi
statuses >"$work/during"
kill "$tuned_pid"
wait "$tuned_pid" 2>/dev/null || true
tuned_pid=
statuses >"$work/after"
echo
echo "# tuned $version applied the profile (foreground daemon, $(date -u +%FT%TZ)); its log's warnings and errors:"
grep -E " (WARNING|ERROR) " "$tuned_log" | sed 's/^[0-9-]* [0-9:,]* */  /' || echo "  none"
# The checks each line of the profile is for.
expect=()
grep -q '^kernel.sched_rt_runtime_us' "$work/profiles/rtlab-rt/tuned.conf" && expect+=(rt_throttling)
grep -q 'kdamonds/' "$work/profiles/rtlab-rt/tuned.conf" && expect+=(damon)
grep -q '^banned_cpus\|^isolated_cores' "$work/profiles/rtlab-rt/tuned.conf" && expect+=(irq_affinity)
grep -q 'transparent_hugepage' "$work/profiles/rtlab-rt/tuned.conf" && expect+=(transparent_hugepages)
python3 - "$work" "${expect[@]}" <<'PY' || static=1
import sys
work, expect = sys.argv[1], sys.argv[2:]
def read(w):
    found = {}
    for l in open(f"{work}/{w}"):
        check, status, value = (l.rstrip("\n").split(" ", 2) + [""])[:3]
        found[check], values[w, check] = status, value
    return found
values = {}
before, during, after = read("before"), read("during"), read("after")
print("| check (rtlab check) | before | tuned's profile applied | after tuned stopped |")
print("|---|---|---|---|")
bad = 0
for c in before:
    if c in expect or len({before[c], during.get(c), after.get(c)}) > 1:
        print(f"| {c} | {before[c]} | {during.get(c)} | {after.get(c)} |")
import re
def kernel_kept_only(value):
    # "19 of 19 device IRQs ... may run on CPU 1 (...), 1 of them kept there by the kernel":
    # every IRQ still there is one the kernel keeps (its affinity read-only): moved as far as
    # any run-time tool can; only the boot parameter check names moves those.
    m = re.match(r"(\d+) of \d+ device IRQs", value)
    k = re.search(r", (\d+) of them kept there by the kernel", value)
    return bool(m and k and m.group(1) == k.group(1))
for c in expect:
    if c == "irq_affinity" and kernel_kept_only(values.get(("during", c), "")):
        print(f"irq_affinity: every interrupt that can be moved was; the kernel keeps the rest ({values[('during', c)]})")
        continue
    if during.get(c) != "ok":
        print(f"NOT FIXED by tuned: {c} ({during.get(c)} while the profile was applied: {values.get(('during', c), '')})")
        bad += 1
for c in before:
    if after.get(c) != before[c]:
        print(f"NOT PUT BACK by tuned: {c} ({before[c]} before, {after.get(c)} after)")
        bad += 1
print("every fix of the profile applied by tuned, and put back when it stopped" if not bad else f"{bad} finding(s)")
sys.exit(1 if bad else 0)
PY
