#!/bin/sh
# run_sparse.sh: the sparse-collective integration tests. For every node count 1..8 (3, 5, 6
# and 7 included) and for 2 nodes x 2 trainers, starts real sparsecommd daemons with
# sparsecomm-run and runs `sparsecomm-itest sparse` in every trainer: every scheme pinned
# (dense_ring, agsparse, hier_central, balanced_par, omnireduce, spardl, s2_sketch, exdyna)
# and the cost model's choice, on uniform index sets (overlap none/half/full), Zipf-skewed
# index sets and top-k sparsified dense inputs, densities 1e-4 to 1: lossless schemes give
# exactly the dense sum, lossy ones conserve mass (result + residual changes = inputs),
# every trainer holds identical bits. A case passes when the launcher exits 0, every
# trainer printed its "passed" line and none printed FAIL. Prints ok/FAIL per case and
# ends with "N passed, N failed"; exits non-zero on any failure.
#
#   sh tests/integration/run_sparse.sh [SUBSTRING...]   run only cases whose name contains one
set -u

root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/build/bin
launcher=$bin/sparsecomm-run
itest=$bin/sparsecomm-itest
tail_lines=${ITEST_TAIL_LINES:-40}
passed=0
failed=0

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sc-itest-sparse.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

for f in "$launcher" "$itest" "$bin/sparsecommd"; do
	if [ ! -x "$f" ]; then
		echo "FAIL sparse integration: $f is missing (run make first)"
		echo "0 passed, 1 failed"
		exit 1
	fi
done

filters=$*
selected() {
	[ -n "$filters" ] || return 0
	for pat in $filters; do
		case $1 in *"$pat"*) return 0 ;; esac
	done
	return 1
}

# run_case NAME NODES PER_NODE TIMEOUT_S [SCENARIO ARGS...]
run_case() {
	name=$1 nodes=$2 per=$3 limit=$4
	shift 4
	selected "$name" || return 0
	want=$((nodes * per))
	out=$tmp/out
	t0=$(date +%s)
	timeout -k 10 $((limit + 60)) "$launcher" -n "$nodes" --per-node "$per" \
		--timeout "$limit" -- "$itest" sparse "$@" >"$out" 2>&1 </dev/null
	rc=$?
	dt=$(($(date +%s) - t0))
	got=$(grep -o 'itest sparse: rank [0-9]* passed' "$out" | sort -u | wc -l)
	nfail=$(grep -c 'FAIL (' "$out")
	why=""
	if [ "$rc" -eq 124 ]; then
		why="timed out after ${limit} s"
	elif [ "$rc" -ne 0 ]; then
		why="launcher exited with $rc"
	elif [ "$nfail" -ne 0 ]; then
		why="$nfail trainer(s) reported FAIL"
	elif [ "$got" -ne "$want" ]; then
		why="$got of $want expected 'passed' lines"
	fi
	if [ -z "$why" ]; then
		echo "ok    $name (${dt} s)"
		passed=$((passed + 1))
	else
		echo "FAIL  $name: $why (${dt} s)"
		echo "      command: sparsecomm-run -n $nodes --per-node $per --timeout $limit -- $itest sparse $*"
		grep -E 'MISMATCH|FAIL \(' "$out" | head -n 20 | sed 's/^/      | /'
		echo "      -- last $tail_lines lines of output:"
		tail -n "$tail_lines" "$out" | sed 's/^/      | /'
		failed=$((failed + 1))
	fi
}

echo "sparse integration tests ($launcher)"
for n in 1 2 3 4 5 6 7 8; do
	run_case "sparse n=$n" "$n" 1 240
done
run_case "sparse n=2 per-node=2" 2 2 240
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
