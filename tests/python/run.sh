#!/bin/sh
# Runs the Python/PyTorch tests (tests/python/run_tests.py) with Debian's python3 and its
# python3-torch / python3-sklearn, installing them with apt-get when missing. Skips, with
# the reason, only when they cannot be installed. Ends with `N passed, N failed`.
# $SPARSECOMM_PYTHON names another interpreter (one with torch already: nothing is
# installed for it); with SPARSECOMM_REQUIRE_GPU=1 a python without torch is a failure.
set -u
cd "$(dirname "$0")/../.." || exit 1
PY=${SPARSECOMM_PYTHON:-/usr/bin/python3}
have() { "$PY" -c 'import torch, sklearn, numpy' >/dev/null 2>&1; }
# OpenBLAS too: without it Debian's torch runs on the reference BLAS, some 15x slower.
pkgs="python3-torch python3-sklearn python3-numpy libopenblas0-pthread"
missing=""
if [ -z "${SPARSECOMM_PYTHON:-}" ]; then
	for p in $pkgs; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
			missing="$missing $p"
	done
fi
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
	if [ -n "${SPARSECOMM_PYTHON:-}" ]; then
		why="$PY has no torch, sklearn or numpy"
	else
		why="python3-torch/python3-sklearn could not be installed (apt-get failed; not root"
		why="$why or no package index)"
	fi
	if [ "${SPARSECOMM_REQUIRE_GPU:-}" = 1 ]; then
		echo "FAIL python tests: $why (SPARSECOMM_REQUIRE_GPU=1)"
		echo "0 passed, 1 failed"
		exit 1
	fi
	echo "SKIP python tests: $why"
	echo "0 passed, 0 failed"
	exit 0
fi
exec "$PY" tests/python/run_tests.py "$@"
