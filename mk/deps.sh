#!/bin/sh
# Installs the Debian packages the build, the tests (clang and its libFuzzer runtime for the
# fuzz harnesses too, numpy for the launchers' trainers) and the demo need, and only those
# that are missing. Run by `make deps` and, implicitly, before every build.
set -eu
pkgs="build-essential pkg-config libuv1-dev libzmq3-dev libsodium-dev libprotobuf-c-dev protobuf-c-compiler
      bible-kjv bible-kjv-text iproute2 openmpi-bin libopenmpi-dev util-linux procps
      passwd systemd yamllint python3-numpy
      clang-format clang libclang-rt-14-dev"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing missing Debian packages:$missing" >&2
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
		echo "deps: missing packages:$missing (run 'make deps' as root)" >&2; exit 1
	fi
else SUDO=""; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
