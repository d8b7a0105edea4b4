#!/usr/bin/env bash
# The eBPF recorder on CPUs numbered 64 and above (issue 19), on a machine that has them: a
# QEMU guest with CPUS vCPUs (default 72) booting Debian's kernel and a busybox initramfs
# that holds this build's rtlab. In the guest, as root:
#   1. rtlab wakeup --cpus <high> --explain-with bpf --load hog:...: the measured CPU is
#      above 63, the hog on it makes outliers, the recorder must name the hog;
#   2. rtlab watch of a program pinned to a high CPU: the traced CPU is the high one.
# The guest is emulated (TCG): KVM inside this VM stops the kernel at boot, and 72 vCPUs on
# two host CPUs would say nothing about timing anyway; this checks that the recorder works
# there, not how fast. Needs qemu-system-x86, busybox-static and cpio (installed below when
# missing) and Debian's kernel package (downloaded, not installed).
#
#   sudo bench/many-cpus.sh [CPUS]
set -euo pipefail
CPUS=${1:-72}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "skipped: needs root (KVM, apt)"; exit 0; }
if ! command -v qemu-system-x86_64 >/dev/null || ! command -v cpio >/dev/null || ! [ -x /bin/busybox ]; then
  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-system-x86 busybox-static cpio >/dev/null
fi
cargo build --release -q
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && apt-get download -q "$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')" >/dev/null 2>&1)
dpkg-deb -x "$WORK"/linux-image-*.deb "$WORK/k"
KERNEL=$(ls "$WORK"/k/boot/vmlinuz-*)
ROOT=$WORK/root
mkdir -p "$ROOT"/{bin,sbin,proc,sys,dev,tmp,out,lib64,lib/x86_64-linux-gnu}
cp /bin/busybox "$ROOT/bin/"
for a in sh mount mkdir cat poweroff sleep taskset ls grep head echo; do ln -s busybox "$ROOT/bin/$a"; done
cp target/release/rtlab "$ROOT/bin/"
for lib in $(ldd target/release/rtlab | grep -o '/lib[^ ]*'); do cp "$lib" "$ROOT$lib"; done
HIGH=${HIGH:-$((CPUS - 3))} # the measured CPU (HIGH=1: a control with low numbers)
cat >"$ROOT/init" <<EOF
#!/bin/sh
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tracefs tracefs /sys/kernel/tracing; mount -t debugfs debugfs /sys/kernel/debug
mount -t tmpfs tmp /tmp
# Emulating 72 busy vCPUs on two host CPUs is too slow to run anything: every CPU but 0,
# $HIGH and $((HIGH + 1)) (the reader's) goes offline; the numbers stay.
for c in /sys/devices/system/cpu/cpu[0-9]*; do
  case \${c##*cpu} in 0|$HIGH|$((HIGH + 1))) ;; *) echo 0 >\$c/online ;; esac
done
echo "guest: \$(grep -c ^processor /proc/cpuinfo) CPUs online (\$(cat /sys/devices/system/cpu/online)) of \$(cat /sys/devices/system/cpu/possible), kernel \$(cat /proc/sys/kernel/osrelease)"
echo "=== 1. wakeup on CPU $HIGH, a hog beside it, explained with bpf"
rtlab wakeup --cpus $HIGH --duration 4s --interval 1ms --explain-with bpf --top 20 \\
  --load hog:99:3ms/200ms:$HIGH --json /tmp/w.json --quiet >/tmp/w.txt 2>&1; echo "exit \$?"
cat /tmp/w.txt
echo "=== 2. watch a program on CPU $HIGH"
rtlab watch --duration 4s --threshold 1ms --json /tmp/watch.json --quiet -- \\
  taskset -c $HIGH sh -c 'while :; do sleep 0.001; done' >/tmp/watch.txt 2>&1; echo "exit \$?"
cat /tmp/watch.txt
echo "=== json"
cat /tmp/w.json; echo; cat /tmp/watch.json; echo
echo "=== end"
poweroff -f
EOF
chmod +x "$ROOT/init"
(cd "$ROOT" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$WORK/initrd.gz"
echo "# the eBPF recorder on high CPU numbers: a $CPUS-vCPU emulated guest, $(basename "$KERNEL"), host $(uname -r), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with local changes)')"
timeout 1200 qemu-system-x86_64 -accel tcg,thread=multi -cpu max -smp "$CPUS" -m 4G -nographic -no-reboot \
  -kernel "$KERNEL" -initrd "$WORK/initrd.gz" \
  -append "console=ttyS0 loglevel=${GUEST_LOGLEVEL:-3} panic=-1 nokaslr" >"$WORK/console.txt" 2>&1 || true
tr -d '\r' <"$WORK/console.txt" | sed 's/^.*guest: /guest: /' | sed -n '/^guest:/,/^=== end/p' >"$WORK/out.txt"
python3 - "$WORK/out.txt" "$HIGH" "$WORK/console.txt" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
high = int(sys.argv[2])
if "=== json" not in text:
    print(text or "the guest printed nothing (boot failed?); its console: " + open(sys.argv[3]).read()[-3000:])
    sys.exit(1)
head, js = text.split("=== json", 1)
print(head.rstrip())
docs = []
dec = json.JSONDecoder()
s = js.replace("=== end", "").strip()
while s:
    d, n = dec.raw_decode(s)
    docs.append(d)
    s = s[n:].strip()
w = docs[0]
print("\n## 1. wakeup on CPU %d (--explain-with bpf)" % high)
for x in w.get("warnings", []):
    print("  warning:", x)
named = 0
for i, o in enumerate(w.get("outliers", [])):
    cs = o.get("causes", [])
    hog = any("rtlab-hog" in c.get("detail", "") or "rtlab-hog" in json.dumps(c) for c in cs)
    named += hog
    if i < 5 or hog and i < 10:
        print("  outlier on CPU %s, %.0f us late: %s" % (o.get("cpu"), o.get("latency_ns", 0) / 1e3,
              "; ".join("%s %.0f us %s" % (c["kind"], c.get("duration_ns", 0) / 1e3, c.get("detail", "")) for c in cs[:2])))
print("outliers on CPU %d naming rtlab-hog: %d of %d" % (high, named, len(w.get("outliers", []))))
if len(docs) > 1:
    d = docs[1]
    print("\n## 2. watch of a program on CPU %d" % high)
    for x in d.get("warnings", []):
        print("  warning:", x)
    def find(x, key):
        if isinstance(x, dict):
            if key in x:
                return x[key]
            x = list(x.values())
        if isinstance(x, list):
            for v in x:
                r = find(v, key)
                if r is not None:
                    return r
        return None
    print("  CPUs traced at any time of the run:", find(d, "traced_cpus"))
    for o in d.get("outliers", [])[:3]:
        print("  outlier on CPU %s, %.0f us late: %s" % (o.get("cpu"), o.get("latency_ns", 0) / 1e3,
              "; ".join("%s %.0f us %s" % (c["kind"], c.get("duration_ns", 0) / 1e3, c.get("detail", "")) for c in o.get("causes", [])[:2])))
    print("  series:", ", ".join("%s n=%s" % (s.get("name"), s.get("count") or s.get("n")) for s in d.get("series", [])[:3]))
PY
