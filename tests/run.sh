#!/bin/sh
# run.sh: every test of the project: the unit tests (build/bin/sparsecomm-unit), the layer
# check's own (tests/layers/run.sh), then the integration tests against real daemons
# (tests/integration/run.sh, then any tests/integration/run_<name>.sh), the NCCL stand-in's
# checks (tests/ncclhost/check.c), the bounded fuzz run (tests/fuzz/run.sh) and the Python
# tests. Adds up their "N passed, N failed" lines into one final line of the same form and
# exits non-zero when anything failed, including a runner that crashed before printing its
# summary.
#
#   sh tests/run.sh [SUBSTRING...]   the filters go to the integration tests only
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sc-tests.XXXXXX") ||
	{ echo "tests/run.sh: cannot create a temporary directory in ${TMPDIR:-/tmp}" >&2; exit 1; }
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
passed=0
failed=0

# suite NAME COMMAND...: runs it with its output shown, then adds its summary line.
suite() {
	suite_name=$1
	shift
	"$@" 2>&1 | tee "$tmp/out"
	# The pipeline's status is tee's; the summary line is what counts.
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/out" | tail -n 1)
	if [ -z "$line" ]; then
		echo "FAIL  $suite_name: ended without a 'N passed, N failed' line"
		failed=$((failed + 1))
		return
	fi
	p=${line%% passed*}
	f=${line#*passed, }
	f=${f%% failed}
	passed=$((passed + p))
	failed=$((failed + f))
}

if [ -x "$root/build/bin/sparsecomm-unit" ]; then
	suite unit "$root/build/bin/sparsecomm-unit"
else
	echo "FAIL  unit: $root/build/bin/sparsecomm-unit is missing (run make first)"
	failed=$((failed + 1))
fi
echo
# The layer check's own tests (mk/layers.sh on scratch copies of daemon/; seconds).
suite layers sh "$root/tests/layers/run.sh"
echo
suite integration sh "$root/tests/integration/run.sh" "$@"
# Further integration suites follow the same convention: tests/integration/run_<name>.sh.
for extra in "$root"/tests/integration/run_*.sh; do
	[ -f "$extra" ] || continue
	echo
	suite "$(basename "$extra" .sh)" sh "$extra" "$@"
done
# The NCCL stand-in (tests/ncclhost/check.c), built only where nccl.h is found.
echo
if [ -x "$root/build/bin/sparsecomm-ncclhost-check" ] && [ -f "$root/build/lib/libnccl-host.so" ]
then
	suite ncclhost "$root/build/bin/sparsecomm-ncclhost-check" "$root/build/lib/libnccl-host.so"
else
	echo "ncclhost: skipped, build/lib/libnccl-host.so is not built (make builds it where nccl.h is found)"
fi
# The bounded fuzz run: every libFuzzer harness for 20 s (skips, saying why, without clang).
if [ -f "$root/tests/fuzz/run.sh" ]; then
	echo
	suite fuzz env FUZZ_SECONDS=20 sh "$root/tests/fuzz/run.sh"
fi
# The Python binding and PyTorch integration (installs python3-torch when missing; skips
# with a printed reason only when it cannot).
if [ -f "$root/tests/python/run.sh" ]; then
	echo
	suite python sh "$root/tests/python/run.sh"
fi

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
