#!/bin/sh
# run.sh: the bounded fuzz run. Runs every libFuzzer harness (fuzz/fuzz_<name>.c, built by
# `make fuzz-build` into build/fuzz/) for FUZZ_SECONDS seconds (20 by default; `make fuzz`
# passes 60), starting from its committed seed corpus (fuzz/corpus/<name>/, read only: what
# the run adds goes to a temporary corpus). A harness that crashes (an ASan or UBSan error,
# a broken decoder promise, a timeout) fails, and the input that crashed it is kept under
# build/fuzz/crashes/<name>/ and named. Skips, saying why, where clang cannot build
# libFuzzer harnesses. Ends with `N passed, N failed`.
#
#   sh tests/fuzz/run.sh [SUBSTRING...]   only the harnesses whose name contains one
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${FUZZ_SECONDS:-20}
cc=${FUZZ_CC:-clang}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sc-fuzz.XXXXXX") ||
	{ echo "tests/fuzz/run.sh: cannot create a temporary directory" >&2; exit 1; }
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

skip() {
	echo "SKIP fuzz: $*"
	echo "0 passed, 0 failed"
	exit 0
}
command -v "$cc" >/dev/null 2>&1 ||
	skip "$cc not found (make deps installs clang and libclang-rt-14-dev)"
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ return 0; }\n' \
	>"$tmp/probe.c"
"$cc" -fsanitize=fuzzer,address,undefined "$tmp/probe.c" -o "$tmp/probe" >/dev/null 2>&1 ||
	skip "$cc cannot link -fsanitize=fuzzer,address,undefined (the libFuzzer runtime," \
		"libclang-rt-14-dev, is missing: make deps)"

passed=0
failed=0
for src in "$root"/fuzz/fuzz_*.c; do
	name=$(basename "$src" .c)
	name=${name#fuzz_}
	if [ $# -gt 0 ]; then
		want=0
		for f in "$@"; do case $name in *"$f"*) want=1 ;; esac; done
		[ $want -eq 1 ] || continue
	fi
	bin=$root/build/fuzz/fuzz_$name
	if [ ! -x "$bin" ]; then
		echo "  FAIL  $name: $bin is missing (make fuzz-build)"
		failed=$((failed + 1))
		continue
	fi
	crashes=$root/build/fuzz/crashes/$name
	mkdir -p "$crashes" "$tmp/corpus-$name"
	"$bin" -max_total_time="$secs" -timeout=10 -print_final_stats=1 \
		-artifact_prefix="$crashes/" "$tmp/corpus-$name" "$root/fuzz/corpus/$name" \
		>"$tmp/log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/log")
	cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$tmp/log" | tail -n 1)
	rate=$(grep -o 'exec/s: [0-9]*' "$tmp/log" | tail -n 1)
	if [ $rc -eq 0 ]; then
		echo "  ok    $name: ${execs:-?} runs in ${secs} s (${rate:-exec/s: ?}), ${cov:-cov: ?}"
		passed=$((passed + 1))
	else
		input=$(sed -n 's/.*Test unit written to \([^ ]*\).*/\1/p' "$tmp/log" | tail -n 1)
		echo "  FAIL  $name: exit $rc, crash input ${input:-(none written)}"
		grep -E 'ERROR|SUMMARY|runtime error|decoder promise' "$tmp/log" | head -n 5 |
			sed 's/^/        /'
		echo "        replay: $bin ${input:-}"
		failed=$((failed + 1))
	fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
