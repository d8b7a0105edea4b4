#!/usr/bin/env bash
# rtlab-watch.service under a real systemd, where this machine's PID 1 is not systemd: a
# Debian tree (debootstrap) booted with systemd-nspawn, the .deb installed in it, the unit
# enabled as a user would. Checks the unit starts with its sandbox (capabilities, no new
# privileges, seccomp), serves /metrics, is restarted after a SIGKILL (Restart=on-failure),
# stops cleanly, and what SIGHUP does. Removes the tree at the end.
#
#   sudo bench/watch-systemd.sh            (needs debootstrap, systemd-container, dpkg-dev, patchelf)
#
# nspawn's own seccomp filter refuses bpf() and perf_event_open() to its containers unless
# told (--system-call-filter); the container has its own PID namespace, so the watch finds
# its threads (by the container's PIDs) but cannot match them to the kernel's events (the
# host's): no delays are measured in here. Measuring is what tests/fleet.rs and
# bench/watch-service.sh check, on the host.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "run as root" >&2; exit 2; fi
for tool in debootstrap systemd-nspawn nsenter curl; do
  command -v "$tool" >/dev/null || { echo "needs $tool (apt-get install debootstrap systemd-container)" >&2; exit 2; }
done
WORK=$(mktemp -d /var/tmp/rtlab-systemd.XXXXXX)
PORT=${PORT:-19477}
NSPAWN=
cleanup() {
  if [ -n "$NSPAWN" ] && kill -0 "$NSPAWN" 2>/dev/null; then
    in_container systemctl poweroff 2>/dev/null || kill "$NSPAWN" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$NSPAWN" 2>/dev/null || break; sleep 0.2; done
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
in_container() { nsenter -t "$(pgrep -P "$NSPAWN" -x systemd)" -a "$@"; }

echo "# rtlab-watch.service under systemd in nspawn: $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"
DEB=$(RTLAB_DEB_COMPRESSION=gzip packaging/deb/build.sh "$WORK/deb")
debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus bookworm "$WORK/root" \
  http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1
cp "$DEB" "$WORK/root/tmp/"
chroot "$WORK/root" sh -c "dpkg -i /tmp/$(basename "$DEB") >/dev/null &&
  sed -i 's/^RTLAB_METRICS=.*/RTLAB_METRICS=127.0.0.1:$PORT/' /etc/default/rtlab-watch &&
  systemctl enable rtlab-watch 2>/dev/null"
systemd-nspawn -D "$WORK/root" -b --register=no --keep-unit --console=pipe \
  --capability=CAP_BPF,CAP_PERFMON --system-call-filter='bpf perf_event_open' \
  >"$WORK/nspawn.log" 2>&1 &
NSPAWN=$!
for _ in $(seq 1 100); do
  curl -s -m 1 -o /dev/null "http://127.0.0.1:$PORT/metrics" && break
  sleep 0.2
done
echo "systemd $(in_container systemctl --version | head -1 | awk '{print $2}') in the container; unit: $(in_container systemctl is-active rtlab-watch)"
MAIN=$(in_container systemctl show rtlab-watch -p MainPID --value)
HOSTPID=$(pgrep -f "rtlab watch .*--metrics 127.0.0.1:$PORT")
echo "its process: $(grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' "/proc/$HOSTPID/status" | tr -s '\t\n' '  ')"
echo "/metrics: $(curl -s -m 3 "http://127.0.0.1:$PORT/metrics" | grep -c '^rtlab_') sample lines"
in_container journalctl -u rtlab-watch --no-pager -o cat | grep -iE 'warning|error' | head -3 || true
kill -KILL "$HOSTPID"
sleep 7
echo "after SIGKILL: $(in_container systemctl show rtlab-watch -p ActiveState -p NRestarts | tr '\n' ' '), main pid $MAIN -> $(in_container systemctl show rtlab-watch -p MainPID --value), /metrics $(curl -s -m 3 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/metrics")"
t0=$(date +%s%N)
in_container systemctl stop rtlab-watch
echo "systemctl stop: $(( ($(date +%s%N) - t0) / 1000000 )) ms, $(in_container systemctl show rtlab-watch -p Result -p ExecMainStatus | tr '\n' ' ')"
in_container systemctl start rtlab-watch
sleep 2
in_container systemctl kill -s HUP rtlab-watch
sleep 7
echo "after SIGHUP: $(in_container systemctl show rtlab-watch -p ActiveState -p Result -p NRestarts | tr '\n' ' ')"
