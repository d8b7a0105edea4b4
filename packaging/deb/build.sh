#!/usr/bin/env bash
# Builds rtlab_<version>_<arch>.deb: the binary, a manual page per command, bash/zsh/fish
# completions, librtlab.so (soname librtlab.so.0) and librtlab.a, rtlab.h, rtlab.pc for
# pkg-config, the rtlab-watch systemd unit (not enabled) and its defaults file.
#
#   packaging/deb/build.sh [OUTDIR]          (default target/deb; prints the .deb's path)
#
# Builds the release binary and library with cargo first, unless RTLAB_NO_BUILD=1; then takes
# them from RTLAB_BIN (default target/release/rtlab) and RTLAB_LIBDIR (the directory holding
# librtlab.so and librtlab.a, default target/release). Needs dpkg-deb, dpkg-architecture,
# dpkg-shlibdeps (dpkg-dev), patchelf and gzip. RTLAB_DEB_COMPRESSION: dpkg-deb's -Z (xz by
# default: 15 s on 2 CPUs for the 32 MB; none in the suite's test).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$REPO/target/deb}
if [ "${RTLAB_NO_BUILD:-0}" != 1 ]; then
  (cd "$REPO" && cargo build --release --locked -p rtlab -p rtlab-ffi >&2)
fi
BIN=${RTLAB_BIN:-$REPO/target/release/rtlab}
LIBDIR=${RTLAB_LIBDIR:-$REPO/target/release}
for tool in dpkg-deb dpkg-architecture dpkg-shlibdeps patchelf gzip; do
  command -v "$tool" >/dev/null || { echo "build.sh: needs $tool (apt-get install dpkg-dev patchelf)" >&2; exit 2; }
done
for f in "$BIN" "$LIBDIR/librtlab.so" "$LIBDIR/librtlab.a"; do
  [ -f "$f" ] || { echo "build.sh: $f is missing (cargo build --release -p rtlab -p rtlab-ffi)" >&2; exit 2; }
done

VERSION=$("$BIN" --version | awk '{print $2}')
ARCH=$(dpkg-architecture -qDEB_HOST_ARCH)
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
SOVERSION=${VERSION%%.*}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PKG=$WORK/pkg
LIB=$PKG/usr/lib/$MULTIARCH

install -d "$PKG/DEBIAN" "$PKG/usr/bin" "$PKG/usr/share/man/man1" "$PKG/usr/include" \
  "$LIB/pkgconfig" "$PKG/usr/share/bash-completion/completions" \
  "$PKG/usr/share/zsh/vendor-completions" "$PKG/usr/share/fish/vendor_completions.d" \
  "$PKG/lib/systemd/system" "$PKG/etc/default" "$PKG/usr/share/doc/rtlab/examples"

install -m 0755 "$BIN" "$PKG/usr/bin/rtlab"
"$BIN" man --out-dir "$PKG/usr/share/man/man1" 2>/dev/null
gzip -9n "$PKG"/usr/share/man/man1/*.1
"$BIN" completions bash >"$PKG/usr/share/bash-completion/completions/rtlab"
"$BIN" completions zsh >"$PKG/usr/share/zsh/vendor-completions/_rtlab"
"$BIN" completions fish >"$PKG/usr/share/fish/vendor_completions.d/rtlab.fish"

# The library under its soname (cargo's cdylib has none), the usual two links to it.
install -m 0644 "$LIBDIR/librtlab.so" "$LIB/librtlab.so.$VERSION"
patchelf --set-soname "librtlab.so.$SOVERSION" "$LIB/librtlab.so.$VERSION"
ln -s "librtlab.so.$VERSION" "$LIB/librtlab.so.$SOVERSION"
ln -s "librtlab.so.$SOVERSION" "$LIB/librtlab.so"
install -m 0644 "$LIBDIR/librtlab.a" "$LIB/librtlab.a"
install -m 0644 "$REPO/include/rtlab.h" "$PKG/usr/include/rtlab.h"
sed -e "s|@VERSION@|$VERSION|" -e "s|@LIBDIR@|/usr/lib/$MULTIARCH|" \
  "$REPO/packaging/rtlab.pc.in" >"$LIB/pkgconfig/rtlab.pc"

install -m 0644 "$REPO/deploy/systemd/rtlab-watch.service" "$PKG/lib/systemd/system/"
install -m 0644 "$REPO/deploy/systemd/rtlab-watch.default" "$PKG/etc/default/rtlab-watch"
echo /etc/default/rtlab-watch >"$PKG/DEBIAN/conffiles"

DOC=$PKG/usr/share/doc/rtlab
install -m 0644 "$REPO/README.md" "$DOC/"
gzip -9n "$DOC/README.md"
cat "$REPO/packaging/deb/copyright" >"$DOC/copyright"
install -m 0644 "$REPO/deploy/prometheus/rtlab.rules.yml" "$REPO/deploy/grafana/rtlab.json" \
  "$REPO/examples/c/periodic.c" "$DOC/examples/"

# What the binary and the library link against, as Debian's own packages say it.
mkdir -p "$WORK/debian"
printf 'Source: rtlab\n\nPackage: rtlab\nArchitecture: any\n' >"$WORK/debian/control"
DEPENDS=$(cd "$WORK" && dpkg-shlibdeps -O -e"$PKG/usr/bin/rtlab" -e"$LIB/librtlab.so.$VERSION" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
SIZE=$(du -sk --exclude=DEBIAN "$PKG" | cut -f1)
sed -e "s|@VERSION@|$VERSION|" -e "s|@ARCH@|$ARCH|" -e "s|@DEPENDS@|${DEPENDS:-libc6}|" \
  -e "s|@SIZE@|$SIZE|" "$REPO/packaging/deb/control.in" >"$PKG/DEBIAN/control"
install -m 0755 "$REPO/packaging/deb/postinst" "$REPO/packaging/deb/prerm" \
  "$REPO/packaging/deb/postrm" "$PKG/DEBIAN/"
install -m 0644 "$REPO/packaging/deb/triggers" "$PKG/DEBIAN/"

mkdir -p "$OUT"
DEB=$OUT/rtlab_${VERSION}_${ARCH}.deb
dpkg-deb --root-owner-group "-Z${RTLAB_DEB_COMPRESSION:-xz}" --build "$PKG" "$DEB" >/dev/null
echo "$DEB"
