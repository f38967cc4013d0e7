#!/bin/sh
# Runs the Python/PyTorch tests (tests/python/run_tests.py) with Debian's python3 and its
# python3-torch / python3-sklearn, installing them with apt-get when missing. Skips, with
# the reason, only when they cannot be installed. Ends with `N passed, N failed`.
set -u
cd "$(dirname "$0")/../.." || exit 1
PY=/usr/bin/python3
have() { "$PY" -c 'import torch, sklearn, numpy' >/dev/null 2>&1; }
# OpenBLAS too: without it Debian's torch runs on the reference BLAS, some 15x slower.
pkgs="python3-torch python3-sklearn python3-numpy libopenblas0-pthread"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "python tests: installing$missing" >&2
	SUDO=""
	[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq >/dev/null 2>&1 || true
	# shellcheck disable=SC2086
	$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1 || true
fi
if ! have; then
	echo "SKIP python tests: python3-torch/python3-sklearn could not be installed" \
		"(apt-get failed; not root or no package index)"
	echo "0 passed, 0 failed"
	exit 0
fi
exec "$PY" tests/python/run_tests.py "$@"
