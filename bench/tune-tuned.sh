#!/usr/bin/env bash
# The profile `rtlab tune --export tuned` writes, read by tuned itself: Debian's tuned package
# is downloaded and unpacked (not installed: no daemon runs, nothing on this machine changes),
# and tuned's own profile loader reads the profile (its [main], its variables expanded),
# then each section's plugin is asked whether it takes each option. Exit 0 when tuned takes
# every one.
#
# With LIVE=1, tuned itself then applies the profile: its daemon runs in the foreground
# (no D-Bus, no socket) from the unpacked package, every path it keeps state in redirected
# into a temporary directory, and `rtlab check` is asked before, while the profile is applied,
# and after tuned stopped (tuned puts back what it changed when it stops). Each check the
# profile is for must pass while it is applied and be as before after. This changes the
# machine for the seconds it runs (the values are also saved and put back by this script if
# tuned did not); it needs python3-linux-procfs and python3-pyudev (tuned's own imports).
#
#   bench/tune-tuned.sh                 # the plan of this machine
#   bench/tune-tuned.sh STATE.json      # what `rtlab tune --apply --state STATE.json` kept
#   LIVE=1 bench/tune-tuned.sh          # and applied by tuned, checked by rtlab check
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${RTLAB:-}" ]; then cargo build --release -q; RTLAB=$PWD/target/release/rtlab; fi
work=$(mktemp -d)
cleanup() {
  [ -n "${tuned_pid:-}" ] && kill "$tuned_pid" 2>/dev/null && wait "$tuned_pid" 2>/dev/null
  [ -f "$work/saved" ] && restore_saved
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
(cd "$work" && apt-get download -q tuned >/dev/null 2>&1) || { echo "skipped: tuned could not be downloaded (apt-get download tuned)" >&2; exit 0; }
dpkg-deb -x "$work"/tuned_*.deb "$work/root"
version=$(dpkg-deb -f "$work"/tuned_*.deb Version)
state=()
[ $# -gt 0 ] && state=(--state "$1")
mkdir -p "$work/profiles/rtlab-rt"
"$RTLAB" tune "${state[@]}" --export tuned "$work/profiles/rtlab-rt"
echo "# tuned $version (Debian, unpacked), $(uname -r), $(date -u +%FT%TZ)"
cat "$work/profiles/rtlab-rt/tuned.conf"
(python3 - "$work" <<'PY'
import importlib, inspect, sys, types
work = sys.argv[1]
sys.path.insert(0, f"{work}/root/usr/lib/python3/dist-packages")
# The plugins' imports of system bindings (perf, procfs, udev, D-Bus) are not needed to read
# their option lists: stand-ins.
class Stub(types.ModuleType):
    def __getattr__(self, k):
        return Stub(k)
    def __call__(self, *a, **k):
        return Stub("call")
for m in ["perf", "procfs", "pyudev", "dbus", "dbus.service", "dbus.mainloop", "dbus.mainloop.glib", "gi", "gi.repository", "ethtool", "linux"]:
    sys.modules.setdefault(m, Stub(m))
import tuned.profiles.factory, tuned.profiles.loader, tuned.profiles.locator, tuned.profiles.merger, tuned.profiles.variables
class Config:
    def get(self, k, d=None): return d
    def get_bool(self, k, d=None): return d
    def get_list(self, k, d=None): return d or []
locator = tuned.profiles.locator.Locator([f"{work}/root/usr/lib/tuned", f"{work}/profiles"])
variables = tuned.profiles.variables.Variables()
loader = tuned.profiles.loader.Loader(locator, tuned.profiles.factory.Factory(), tuned.profiles.merger.Merger(), Config(), variables)
profile = loader.load(["rtlab-rt"])
unknown = 0
for name, unit in profile.units.items():
    module = importlib.import_module("tuned.plugins.plugin_" + unit.type)
    plugin = next(getattr(module, c) for c in dir(module) if c.lower() == unit.type + "plugin")
    options = plugin._get_config_options()
    source = inspect.getsource(module)
    dynamic = "self._has_dynamic_options = True" in source
    # The bootloader plugin merges every option whose name starts with "cmdline" (the
    # realtime profile's cmdline_realtime=+...) into its cmdline.
    merged = lambda k: k.startswith("cmdline") and 'startswith("cmdline")' in source
    for k, v in unit.options.items():
        ok = k in options or dynamic or merged(k)
        unknown += not ok
        how = ("one of its options" if k in options else "taken (it takes any key)" if dynamic
               else "taken (merged into its cmdline)" if merged(k) else "NOT one of its options")
        print(f"[{name}] {k} = {variables.expand(v)}: tuned's {unit.type} plugin: {how}")
print("tuned reads the profile; every option is its plugins'" if not unknown else f"{unknown} options tuned does not know")
sys.exit(1 if unknown else 0)
PY
) && static=0 || static=$?
[ "${LIVE:-0}" = 1 ] || exit "$static"
. bench/tune-tuned-live.sh
exit "$static"
