#!/bin/sh
# run.sh: the integration tests. Each case starts real sparsecommd daemons on this machine
# with sparsecomm-run (N nodes x M trainers per node), runs one sparsecomm-itest scenario
# in every trainer, and passes only when the launcher's exit status is the expected one,
# every trainer that should finish printed its "itest <scenario>: rank R passed" line, and
# no trainer printed a FAIL line. Prints "ok"/"FAIL"/"skip" per case (with the tail of the
# output on failure) and ends with "N passed, N failed"; exits non-zero on any failure.
#
#   sh tests/integration/run.sh [SUBSTRING...]   run only cases whose name contains one
#
# The matrix covers 1 to 5 nodes and 1 to 3 trainers per node while staying within a few
# minutes on a 2-core machine: the 64 MiB case runs once, on 4 nodes.
set -u

root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/build/bin
launcher=$bin/sparsecomm-run
itest=$bin/sparsecomm-itest
tail_lines=${ITEST_TAIL_LINES:-40}
passed=0
failed=0
skipped=0

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sc-itest.XXXXXX") ||
	{ echo "tests/integration/run.sh: cannot create a temporary directory in ${TMPDIR:-/tmp}" >&2; exit 1; }
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

for f in "$launcher" "$itest" "$bin/sparsecommd" "$bin/sparsectl"; do
	if [ ! -x "$f" ]; then
		echo "FAIL integration: $f is missing (run make first)"
		echo "0 passed, 1 failed"
		exit 1
	fi
done

# Filters from the command line, one per line (a filter may contain spaces).
filters=$(printf '%s\n' "$@")
nl='
'

selected() {
	[ -z "$filters" ] && return 0
	saved_ifs=$IFS
	IFS=$nl
	set -f
	for pat in $filters; do
		case $1 in *"$pat"*)
			IFS=$saved_ifs
			set +f
			return 0
			;;
		esac
	done
	IFS=$saved_ifs
	set +f
	return 1
}

# run_case NAME NODES PER_NODE TIMEOUT_S EXPECT PASSES [LAUNCHER_OPTS...] -- CMD [ARGS...]
#   EXPECT: the launcher's exit status (0, or 137 when a trainer dies of SIGKILL: the
#   first non-zero trainer status, 128 + signal); PASSES: distinct "passed" lines the
#   trainers must print. 124 (the launcher's --timeout) always fails.
run_case() {
	name=$1 nodes=$2 per=$3 limit=$4 expect=$5 want=$6
	shift 6
	selected "$name" || return 0
	opts=""
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do
		opts="$opts $1"
		shift
	done
	shift
	out=$tmp/out
	t0=$(date +%s)
	# The outer timeout only guards against a launcher that ignores its own --timeout.
	# shellcheck disable=SC2086
	timeout -k 10 $((limit + 60)) "$launcher" -n "$nodes" --per-node "$per" \
		--timeout "$limit" $opts -- "$@" >"$out" 2>&1 </dev/null
	rc=$?
	dt=$(($(date +%s) - t0))
	got=$(grep -o 'itest [a-z-]*: rank [0-9]* passed' "$out" | sort -u | wc -l)
	nfail=$(grep -c 'FAIL (' "$out")
	why=""
	if [ "$rc" -eq 124 ] || [ "$dt" -ge $((limit + 60)) ]; then
		why="timed out after ${limit} s (exit $rc)"
	elif [ "$rc" -ne "$expect" ]; then
		why="launcher exited with $rc, expected $expect"
	fi
	if [ -z "$why" ] && [ "$nfail" -ne 0 ]; then
		why="$nfail trainer(s) reported FAIL"
	fi
	if [ -z "$why" ] && [ "$got" -ne "$want" ]; then
		why="$got of $want expected 'passed' lines"
	fi
	if [ -z "$why" ]; then
		echo "ok    $name (${dt} s)"
		passed=$((passed + 1))
	else
		echo "FAIL  $name: $why (${dt} s)"
		echo "      command: sparsecomm-run -n $nodes --per-node $per --timeout $limit$opts -- $*"
		grep 'FAIL (' "$out" | head -n 10 | sed 's/^/      | /'
		echo "      -- last $tail_lines lines of output:"
		tail -n "$tail_lines" "$out" | sed 's/^/      | /'
		failed=$((failed + 1))
	fi
}

skip_case() {
	selected "$1" || return 0
	echo "skip  $1: $2"
	skipped=$((skipped + 1))
}

# A free TCP port on loopback.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_lone_coordinator DIR [ARGS...]: a coordinator (rank 0 of 2) alone on a free port,
# in the background, with DIR as its runtime directory and ARGS added; sets $port and
# $coord, logs to $tmp/coord.log.
start_lone_coordinator() {
	port=$(free_port)
	mkdir -p "$1"
	rt=$1
	shift
	"$bin/sparsecommd" --rank 0 --world_size 2 --coordinator "127.0.0.1:$port" \
		--runtime_dir "$rt" --join_timeout_ms 60000 "$@" >"$tmp/coord.log" 2>&1 </dev/null &
	coord=$!
}

# lone_verdict NAME OK WHY: counts a case run against a lone daemon; on failure (OK not
# 1) prints WHY, the scenario's output and the coordinator's log.
lone_verdict() {
	if [ "$2" -eq 1 ]; then
		echo "ok    $1"
		passed=$((passed + 1))
	else
		echo "FAIL  $1: $3"
		sed 's/^/      | /' "$tmp/out" | tail -n "$tail_lines"
		sed 's/^/      | coordinator: /' "$tmp/coord.log" 2>/dev/null | tail -n "$tail_lines"
		failed=$((failed + 1))
	fi
}

echo "integration tests ($launcher)"

# sums: every node count 1..5 with one trainer per node, 2 nodes with 2 and 3 per node.
for n in 1 2 3 4 5; do
	run_case "sums n=$n" "$n" 1 180 0 "$n" -- "$itest" sums
done
run_case "sums n=2 per-node=2" 2 2 180 0 4 -- "$itest" sums
run_case "sums n=2 per-node=3" 2 3 180 0 6 -- "$itest" sums
run_case "sums 64MiB n=4" 4 1 400 0 4 -- "$itest" sums-small --big

# ops: min, max and product of every dtype, fused beside sums; refusals and mismatches.
run_case "ops n=3" 3 1 180 0 3 -- "$itest" ops
run_case "ops n=2 per-node=2" 2 2 180 0 4 -- "$itest" ops

# broadcast: every dtype from several roots, fused, its bytes (half a sum's), errors.
run_case "broadcast n=3" 3 1 180 0 3 -- "$itest" broadcast
run_case "broadcast n=2 per-node=2" 2 2 180 0 4 -- "$itest" broadcast

# allgather: counts that vary by rank and step, in rank order; a total over the size.
run_case "allgather n=3" 3 1 180 0 3 -- "$itest" allgather
run_case "allgather n=2 per-node=2" 2 2 180 0 4 -- "$itest" allgather

# reducescatter: rows split unevenly, every slice exact; rows of another length.
run_case "reducescatter n=3" 3 1 120 0 3 -- "$itest" reducescatter
run_case "reducescatter n=2 per-node=2" 2 2 120 0 4 -- "$itest" reducescatter

# join: rank r runs 2 (r + 1) steps, then joins; the others' sums go on without it.
run_case "join n=3" 3 1 120 0 3 -- "$itest" join
run_case "join n=2 per-node=2" 2 2 120 0 4 -- "$itest" join
run_case "join killed n=3" 3 1 120 137 2 --keep-going -- "$itest" join-killed

# barrier: a late rank holds every other rank's barrier; a missing one stalls it.
run_case "barrier n=3" 3 1 120 0 3 -- "$itest" barrier
run_case "barrier n=2 per-node=2" 2 2 120 0 4 -- "$itest" barrier
run_case "barrier stalled n=3" 3 1 120 0 3 --daemon-arg --stall_timeout_ms --daemon-arg 1500 -- "$itest" barrier-stalled
run_case "barrier stalled n=2 per-node=2" 2 2 120 0 4 --daemon-arg --stall_timeout_ms --daemon-arg 1500 -- "$itest" barrier-stalled

# fusion: 300 tensors in a rank-dependent order.
run_case "fusion n=1" 1 1 120 0 1 -- "$itest" fusion
run_case "fusion n=3" 3 1 180 0 3 -- "$itest" fusion
run_case "fusion n=2 per-node=2" 2 2 180 0 4 -- "$itest" fusion
run_case "fusion n=5" 5 1 240 0 5 -- "$itest" fusion

# Errors that must reach every rank, precisely and in bounded time.
run_case "mismatch n=2" 2 1 120 0 2 -- "$itest" mismatch
run_case "mismatch n=3" 3 1 120 0 3 -- "$itest" mismatch
run_case "mismatch n=1 per-node=2" 1 2 120 0 2 -- "$itest" mismatch
run_case "mismatch n=2 per-node=2" 2 2 120 0 4 -- "$itest" mismatch
run_case "busy n=2" 2 1 120 0 2 -- "$itest" busy
run_case "busy n=3" 3 1 120 0 3 -- "$itest" busy
run_case "busy n=2 per-node=2" 2 2 120 0 4 -- "$itest" busy
# A sparsifier the daemon cannot make from options that passed registration: every rank
# gets SC_ERR_INVALID (not "out of memory"), and the job goes on.
run_case "badopts n=1" 1 1 60 0 1 -- "$itest" badopts
run_case "badopts n=2 per-node=2" 2 2 120 0 4 -- "$itest" badopts
# killed: rank 1 dies, so the launcher fails; the survivors must still pass their checks.
run_case "killed n=2" 2 1 120 137 1 --keep-going -- "$itest" killed
run_case "killed n=3" 3 1 120 137 2 --keep-going -- "$itest" killed
run_case "killed n=1 per-node=3" 1 3 120 137 2 --keep-going -- "$itest" killed
run_case "killed n=2 per-node=2" 2 2 120 137 3 --keep-going -- "$itest" killed

# The raw control protocol.
run_case "unknown n=1" 1 1 60 0 1 -- "$itest" unknown
run_case "unknown n=2 per-node=2" 2 2 90 0 4 -- "$itest" unknown
run_case "version n=1" 1 1 60 0 1 -- "$itest" version
run_case "version n=2" 2 1 60 0 2 -- "$itest" version
run_case "oversize control frame n=1" 1 1 90 0 1 -- "$itest" oversize
# One rank's invalid input fails the operation on every rank, naming the rank and the
# tensor (a COO index out of range; a NaN with nonfinite = error); with nonfinite = warn
# the sum proceeds and the offender's node counts the values; pass counts nothing.
run_case "badinput coo n=3" 3 1 120 0 3 -- "$itest" badinput coo
run_case "badinput coo n=2 per-node=2" 2 2 120 0 4 -- "$itest" badinput coo
run_case "badinput nan error n=3" 3 1 120 0 3 --daemon-arg --nonfinite --daemon-arg error -- \
	"$itest" badinput nan-error
run_case "badinput nan error n=2 per-node=2" 2 2 120 0 4 --daemon-arg --nonfinite \
	--daemon-arg error -- "$itest" badinput nan-error
run_case "badinput nan warn n=3" 3 1 120 0 3 --daemon-arg --nonfinite --daemon-arg warn -- \
	"$itest" badinput nan-warn
run_case "badinput nan pass n=2" 2 1 120 0 2 -- "$itest" badinput nan-pass
run_case "badinput header n=2 per-node=2" 2 2 120 0 4 -- "$itest" badinput header

# The data plane's backend named explicitly (the `transport` key); a name that is no
# backend stops every daemon at start, with an error naming it.
run_case "transport=tcp n=3" 3 1 120 0 3 --daemon-arg --transport --daemon-arg tcp -- \
	"$itest" sums-small
if selected "transport=bogus refused"; then
	timeout 60 "$launcher" -n 2 --timeout 30 --daemon-arg --transport --daemon-arg bogus \
		-- true >"$tmp/out" 2>&1 </dev/null
	rc=$?
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] &&
		grep -q "unknown transport 'bogus'" "$tmp/out"; then
		echo "ok    transport=bogus refused"
		passed=$((passed + 1))
	else
		echo "FAIL  transport=bogus refused: launcher exited with $rc, or no error naming it"
		tail -n "$tail_lines" "$tmp/out" | sed 's/^/      | /'
		failed=$((failed + 1))
	fi
fi
# A rank whose transport differs (or whose bootstrap blob is malformed) is refused by the
# coordinator, naming the rank: a lone coordinator (rank 0 of 2) against raw joins.
if selected "transport mismatch refused"; then
	start_lone_coordinator "$tmp/coord"
	SPARSECOMM_SOCKET="tcp://127.0.0.1:$port" SPARSECOMM_RANK=1 timeout 60 "$itest" \
		join-refused >"$tmp/out" 2>&1 </dev/null
	rc=$?
	kill "$coord" 2>/dev/null
	wait "$coord" 2>/dev/null
	ok=0
	[ "$rc" -eq 0 ] && grep -q 'join-refused: rank 1 passed' "$tmp/out" &&
		grep -q "join refused: rank 1 uses transport 'nccl'" "$tmp/coord.log" && ok=1
	lone_verdict "transport mismatch refused" "$ok" "scenario exited with $rc"
fi

# The nonfinite key decides which jobs take the input check's round, so every rank must
# agree: a rank whose key differs is refused at its join, naming both values.
if selected "nonfinite mismatch refused"; then
	start_lone_coordinator "$tmp/coord-nf" --nonfinite error
	mkdir -p "$tmp/rank1-nf"
	timeout 60 "$bin/sparsecommd" --rank 1 --world_size 2 --coordinator "127.0.0.1:$port" \
		--runtime_dir "$tmp/rank1-nf" --nonfinite warn >"$tmp/out" 2>&1 </dev/null
	rc=$?
	kill "$coord" 2>/dev/null
	wait "$coord" 2>/dev/null
	ok=0
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] &&
		grep -q "rank 1 has nonfinite 'warn', the coordinator 'error'" "$tmp/coord.log" && ok=1
	lone_verdict "nonfinite mismatch refused" "$ok" "rank 1 exited with $rc"
fi

# A 192 MiB frame to a lone coordinator's peer socket (over its 128 MiB bound): refused as
# its header arrives, so the coordinator's peak resident memory stays under 96 MiB, and it
# still answers a join.
if selected "peer oversize frame"; then
	start_lone_coordinator "$tmp/coord-big"
	SPARSECOMM_SOCKET="tcp://127.0.0.1:$port" SPARSECOMM_RANK=1 timeout 60 "$itest" \
		peer-oversize >"$tmp/out" 2>&1 </dev/null
	rc=$?
	hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$coord/status" 2>/dev/null)
	kill "$coord" 2>/dev/null
	wait "$coord" 2>/dev/null
	ok=0
	[ "$rc" -eq 0 ] && grep -q 'peer-oversize: rank 1 passed' "$tmp/out" &&
		[ -n "$hwm" ] && [ "$hwm" -lt 98304 ] && ok=1
	lone_verdict "peer oversize frame" "$ok" \
		"scenario exited with $rc, coordinator peak '${hwm}' KiB (limit 98304)"
fi

# Two daemons on one runtime directory: the second stops at start, naming the directory
# and the pid of the daemon that holds it; the first keeps running.
if selected "runtime dir locked"; then
	start_lone_coordinator "$tmp/shared-rt"
	i=0
	while [ ! -s "$tmp/shared-rt/sparsecommd.lock" ] && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	timeout 30 "$bin/sparsecommd" --rank 0 --world_size 2 --coordinator "127.0.0.1:$(free_port)" \
		--runtime_dir "$tmp/shared-rt" >"$tmp/out" 2>&1 </dev/null
	rc=$?
	alive=0
	kill -0 "$coord" 2>/dev/null && alive=1
	kill "$coord" 2>/dev/null
	wait "$coord" 2>/dev/null
	ok=0
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$alive" -eq 1 ] &&
		grep -q "runtime directory $tmp/shared-rt is in use by another sparsecommd (pid $coord" \
			"$tmp/out" && ok=1
	lone_verdict "runtime dir locked" "$ok" \
		"second daemon exited with $rc (first alive: $alive), or no error naming the directory and pid $coord"
fi

# A rank that stays alive but never submits a tensor: the others fail with
# SC_ERR_STALLED after stall_timeout_ms (1.5 s here), and the job goes on.
run_case "stalled n=3" 3 1 120 0 3 --daemon-arg --stall_timeout_ms --daemon-arg 1500 -- "$itest" stalled
run_case "stalled n=2 per-node=2" 2 2 120 0 4 --daemon-arg --stall_timeout_ms --daemon-arg 1500 -- "$itest" stalled

# Two jobs, one after the other, on the same daemons (fresh clients, same tensor names).
run_case "two jobs n=3" 3 1 240 0 6 -- sh -c "'$itest' sums-small && '$itest' fusion"
run_case "two jobs n=2 per-node=2" 2 2 240 0 8 -- sh -c "'$itest' sums-small && '$itest' fusion"

# A daemon that died without cleaning up (SIGKILL, the OOM killer) leaves its shared
# memory behind: the next daemon of the same user removes objects whose pid is gone.
if selected "stale shm"; then
	sh -c 'exit 0' &
	dead=$!
	wait "$dead"
	stale=/dev/shm/sparsecomm.$dead.1
	if kill -0 "$dead" 2>/dev/null || ! : >"$stale" 2>/dev/null; then
		skip_case "stale shm" "cannot set up a dead daemon's object in /dev/shm"
	else
		timeout 60 "$launcher" -n 1 --timeout 30 -- true >"$tmp/out" 2>&1 </dev/null
		if [ -e "$stale" ]; then
			rm -f "$stale"
			echo "FAIL  stale shm: $stale (pid $dead is gone) was not removed"
			failed=$((failed + 1))
		else
			echo "ok    stale shm"
			passed=$((passed + 1))
		fi
	fi
fi

# Every sparse scheme pinned, and the cost model's choice, through the daemons (see
# tests/integration/itest_sparse.c): node counts 1 to 8 and 2 nodes x 2 trainers; lossless
# schemes exact, lossy ones conserving mass, identical bits on every trainer.
for n in 1 2 3 4 5 6 7 8; do
	run_case "sparse n=$n" "$n" 1 240 0 "$n" -- "$itest" sparse
done
run_case "sparse n=2 per-node=2" 2 2 240 0 4 -- "$itest" sparse
# The same on a tensor big enough for the streamed schemes to send their lists in pieces
# (AGsparse and HC by count, Balanced Parallelism by index range: 2 ranges at 2M elements).
for s in agsparse hier_central balanced_par; do
	run_case "sparse streamed n=4 $s" 4 1 300 0 4 -- "$itest" sparse --numel 2097169 --scheme "$s"
done

# The collective benchmark's JSON (tests/integration/bench_json.py): every field of each
# result, 0 wrong, identical ranks, and a bound that follows from the bytes it reports.
bench_case() {
	name=$1 schemes=$2
	shift 2
	selected "$name" || return 0
	json=$tmp/collective.json
	rm -f "$json"
	t0=$(date +%s)
	timeout -k 10 300 "$launcher" -n 3 --timeout 240 -- "$bin/sparsecomm-bench" collective \
		--numel 262144 --density 0.01 --scheme "$schemes" --warmup 2 --iters 3 --check \
		--rate 1gbit --json-out "$json" "$@" >"$tmp/out" 2>&1 </dev/null
	rc=$?
	dt=$(($(date +%s) - t0))
	if [ "$rc" -eq 0 ] && python3 "$root/tests/integration/bench_json.py" "$json" \
		"$schemes" >"$tmp/why" 2>&1; then
		echo "ok    $name (${dt} s)"
		passed=$((passed + 1))
	else
		echo "FAIL  $name: benchmark exited with $rc (${dt} s)"
		sed 's/^/      | /' "$tmp/why" 2>/dev/null | head -n 20
		tail -n "$tail_lines" "$tmp/out" | sed 's/^/      | /'
		failed=$((failed + 1))
	fi
}
bench_case "bench collective zipf n=3" agsparse,spardl,exdyna,auto --workload zipf --sparse-result
bench_case "bench collective topk n=3" hier_central,balanced_par,spardl,exdyna --workload topk

# sparsectl while a job runs.
run_case "fplan n=2" 2 1 180 0 2 -- "$itest" fplan
run_case "fplan n=3" 3 1 180 0 3 -- "$itest" fplan
run_case "ctl n=1" 1 1 90 0 1 -- "$itest" ctl
run_case "ctl n=3" 3 1 120 0 3 -- "$itest" ctl
run_case "ctl n=2 per-node=2" 2 2 120 0 4 -- "$itest" ctl

# The timeline: sparsectl timeline start/stop around a few steps; every node's file is
# checked by tests/integration/timeline_check.py (valid JSON, nesting, every tensor).
mkdir -p "$tmp/timeline3" "$tmp/timeline22"
run_case "timeline n=3" 3 1 120 0 3 -- "$itest" timeline "$tmp/timeline3"
run_case "timeline n=2 per-node=2" 2 2 120 0 4 -- "$itest" timeline "$tmp/timeline22"

# cuda tensors (tests/integration/itest_cuda.c). Refused registrations need neither a GPU
# nor daemons that serve GPU tensors: no driver, a library without the driver's symbols, a
# GPU the driver stand-in (build/lib/libcuda-host.so) lacks, daemons whose GPU library is
# missing; cpu tensors of the same trainer keep working.
cudahost=$root/build/lib/libcuda-host.so
run_case "cuda driver plumbing n=1" 1 1 60 0 1 -- "$itest" cuda-driver "$cudahost" "$tmp/cuda-driver.log"
run_case "cuda fake daemon n=1" 1 1 90 0 1 -- "$itest" cuda-fake "$cudahost" "$tmp/cuda-fake.log"
run_case "cuda refused no driver n=2" 2 1 60 0 2 -- "$itest" cuda-refused "$tmp/none/libcuda.so.1" \
	"cuda:0 needs the CUDA driver: $tmp/none/libcuda.so.1: cannot open shared object file"
run_case "cuda refused no symbols n=1" 1 1 60 0 1 -- "$itest" cuda-refused \
	"$root/build/lib/libsparseclient.so" "cuda:0 needs the CUDA driver: $root/build/lib/libsparseclient.so has no symbol cuInit"
run_case "cuda refused ordinal n=1" 1 1 60 0 1 -- "$itest" cuda-refused "$cudahost" \
	"cuda:1 does not exist: the CUDA driver sees 1 GPU" 1
export SPARSECOMM_CUDA_LIB="$tmp/none/libsparsecomm-cuda.so"
run_case "cuda refused by the daemon n=2" 2 1 60 0 2 -- "$itest" cuda-refused "$cudahost" "cuda"
unset SPARSECOMM_CUDA_LIB
# The engine's pipeline (compression of one buffer while the previous one is on the
# network) keeps every result's bits: the same job with it on and off, hashes compared.
# A buffer per tensor (fusion_mode layerwise): which tensors the adaptive and fixed plans
# fuse depends on measured times and arrival, and a buffer's sum order on its make-up.
pipe="--daemon-arg --fusion_mode --daemon-arg layerwise --daemon-arg --engine_pipeline"
# shellcheck disable=SC2086
run_case "pipeline on n=3" 3 1 120 0 3 $pipe --daemon-arg 1 -- "$itest" bits "$tmp/bits-on"
# shellcheck disable=SC2086
run_case "pipeline off n=3" 3 1 120 0 3 $pipe --daemon-arg 0 -- "$itest" bits "$tmp/bits-off"
if selected "pipeline on n=3" && selected "pipeline off n=3"; then
	cat "$tmp"/bits-on.* >"$tmp/bits-all-on" 2>/dev/null
	cat "$tmp"/bits-off.* >"$tmp/bits-all-off" 2>/dev/null
	if [ -s "$tmp/bits-all-on" ] && cmp -s "$tmp/bits-all-on" "$tmp/bits-all-off"; then
		echo "ok    pipeline on and off: every result and residual bit-identical"
		passed=$((passed + 1))
	else
		echo "FAIL  pipeline on and off: results differ (or are missing):"
		diff "$tmp/bits-all-on" "$tmp/bits-all-off" 2>&1 | head -5 | sed 's/^/      | /'
		failed=$((failed + 1))
	fi
fi
# End to end: written before the daemons served cuda tensors; it runs once the host build
# of the GPU library exists for the daemons to load ($SPARSECOMM_CUDA_LIB). Every handle the
# trainers opened must be closed (the stand-in's log), also with a trainer killed, and the
# daemons must unlink the handles' objects.
cudalib=$root/build/lib/libsparsecomm-cuda-host.so
if [ ! -e "$cudalib" ]; then
	for c in "cuda sums n=2 per-node=2" "cuda sums n=3" "cuda killed n=2"; do
		skip_case "$c" "$cudalib is not built (the daemons' host GPU library)"
	done
else
	export SPARSECOMM_CUDA_LIB="$cudalib"
	run_case "cuda sums n=2 per-node=2" 2 2 120 0 4 -- "$itest" cuda-sums "$tmp/cuda-sums.log"
	run_case "cuda sums n=3" 3 1 120 0 3 -- "$itest" cuda-sums "$tmp/cuda-sums3.log"
	run_case "cuda killed n=2" 2 1 120 137 1 --keep-going -- "$itest" cuda-killed \
		"$tmp/cuda-killed.log"
	unset SPARSECOMM_CUDA_LIB
	if selected "cuda killed n=2"; then
		left=""
		for name in $(cat "$tmp"/cuda-killed.log.* 2>/dev/null |
			awk '$2 == "mem_open" || $2 == "event_open" { print $3 }'); do
			[ -e "/dev/shm$name" ] && left="$left $name"
		done
		if [ -z "$left" ]; then
			echo "ok    cuda killed n=2: handle objects unlinked"
			passed=$((passed + 1))
		else
			echo "FAIL  cuda killed n=2: objects of the trainers' handles left:$left"
			failed=$((failed + 1))
		fi
	fi
fi

# Nodes in separate network namespaces over a shaped bridge (needs root).
if [ "$(id -u)" -ne 0 ]; then
	skip_case "netns sums n=3" "needs root to create network namespaces"
elif ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
	skip_case "netns sums n=3" "needs ip and tc (iproute2)"
elif ! ip netns add sc-itest-probe.$$ 2>/dev/null; then
	skip_case "netns sums n=3" "cannot create network namespaces here"
else
	ip netns delete sc-itest-probe.$$ 2>/dev/null
	run_case "netns sums n=3" 3 1 240 0 3 --netns --rate 1gbit -- "$itest" sums
	run_case "netns killed n=2" 2 1 120 137 1 --netns --keep-going -- "$itest" killed
fi

[ "$skipped" -gt 0 ] && echo "($skipped skipped)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
