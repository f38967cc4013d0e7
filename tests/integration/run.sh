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
# the launcher's SIGTERM-to-SIGKILL delay on stop (--kill-grace): the sanitizer build's
# daemons take seconds to exit (make test-sanitize sets 30), past the default 5 s on a
# loaded host, and a daemon killed on its way out fails its case
kill_grace=${ITEST_KILL_GRACE:+ --kill-grace $ITEST_KILL_GRACE}
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
	opts="$kill_grace"
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

# refused_at_start NAME TEXT [LAUNCHER_OPTS...]: daemons started with LAUNCHER_OPTS stop
# at start (the launcher fails, not by its timeout) with an error containing TEXT.
refused_at_start() {
	name=$1 text=$2
	shift 2
	selected "$name" || return 0
	timeout 60 "$launcher" -n 2 --timeout 30 "$@" -- true >"$tmp/out" 2>&1 </dev/null
	rc=$?
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -qF "$text" "$tmp/out"; then
		echo "ok    $name"
		passed=$((passed + 1))
	else
		echo "FAIL  $name: launcher exited with $rc, or no error saying \"$text\""
		tail -n "$tail_lines" "$tmp/out" | sed 's/^/      | /'
		failed=$((failed + 1))
	fi
}

skip_case() {
	selected "$1" || return 0
	echo "skip  $1: $2"
	skipped=$((skipped + 1))
}

# A free TCP port on loopback, drawn below the kernel's ephemeral range so that no socket
# the kernel numbers itself (bind to 0, connect) takes it before the daemon binds it; as
# proto/port.h's sc_port_pick (the launcher's) does.
free_port() {
	python3 -c '
import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
base = max(lo // 2, 1024)
for port in [random.randrange(base, lo) for _ in range(64)] if lo - base >= 256 else []:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        print(port)
        break
    except OSError:
        pass
    finally:
        s.close()
else:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_lone_coordinator DIR [ARGS...]: a coordinator (rank 0 of 2) alone on a free port,
# in the background, with DIR as its runtime directory and ARGS added; sets $port and
# $coord, logs to $tmp/coord.log.
start_lone_coordinator() {
	port=$(free_port)
	mkdir -p "$1"
	rt=$1
	shift
	# the log emptied before the daemon starts: a wait on its lines must not read the
	# previous case's before the background redirection truncates the file
	: >"$tmp/coord.log"
	"$bin/sparsecommd" --rank 0 --world_size 2 --coordinator "127.0.0.1:$port" \
		--runtime_dir "$rt" --join_timeout_ms 60000 "$@" >>"$tmp/coord.log" 2>&1 </dev/null &
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

# why_verdict NAME WHY: counts a case; on failure (WHY not empty: '; '-separated reasons)
# prints WHY and the tail of $tmp/out.
why_verdict() {
	if [ -z "$2" ]; then
		echo "ok    $1"
		passed=$((passed + 1))
	else
		echo "FAIL  $1: ${2#; }"
		tail -n "$tail_lines" "$tmp/out" | sed 's/^/      | /'
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

# The nodes per core the schemes are priced with (world/host.h): 3 daemons on this
# machine learn max(1, 3 / the cores they may use) at join, every one the same; the
# cpu_share key overrides it.
nodes_per_core() {
	name=$1 want=$2
	shift 2
	selected "$name" || return 0
	rm -rf "$tmp/npc"
	timeout -k 10 240 "$launcher" -n 3 --timeout 180 --log-dir "$tmp/npc" "$@" -- \
		"$itest" sums >"$tmp/out" 2>&1 </dev/null
	rc=$?
	n=$(grep -l "schemes priced at $want nodes per core" "$tmp"/npc/daemon*.log 2>/dev/null | wc -l)
	if [ "$rc" -eq 0 ] && [ "$n" -eq 3 ]; then
		echo "ok    $name"
		passed=$((passed + 1))
	else
		echo "FAIL  $name: exit $rc, $n of 3 daemons priced at $want nodes per core"
		grep -h "nodes per core" "$tmp"/npc/daemon*.log 2>/dev/null | sed 's/^/      | /'
		tail -n "$tail_lines" "$tmp/out" | sed 's/^/      | /'
		failed=$((failed + 1))
	fi
}
cores=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
npc=$(python3 -c "print('%.3g' % max(1, 3 / $cores))")
nodes_per_core "nodes per core n=3" "$npc"
nodes_per_core "nodes per core key n=3" 2.5 --daemon-arg --cpu_share --daemon-arg 2.5

# ops: min, max and product of every dtype, fused beside sums; refusals and mismatches.
# 16-bit wires: exact sums alone and fused, every rank's bits the same, half the bytes
run_case "wire n=2" 2 1 180 0 2 -- "$itest" wire
run_case "wire n=3" 3 1 180 0 3 -- "$itest" wire
run_case "wire n=2 per-node=2" 2 2 180 0 4 -- "$itest" wire

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
# adasum: the reference tree's values, the same bits on every rank; its refusals.
run_case "adasum n=2" 2 1 120 0 2 -- "$itest" adasum
run_case "adasum n=3" 3 1 120 0 3 -- "$itest" adasum
run_case "adasum n=2 per-node=2" 2 2 120 0 4 -- "$itest" adasum

# alltoall: counts that vary by pair and step, every element and byte; over the size; one
# rank's bad counts failing every rank; a joined rank.
run_case "alltoall n=3" 3 1 120 0 3 -- "$itest" alltoall
run_case "alltoall n=2 per-node=2" 2 2 120 0 4 -- "$itest" alltoall

# join: rank r runs 2 (r + 1) steps, then joins; the others' sums go on without it.
run_case "join n=3" 3 1 120 0 3 -- "$itest" join
run_case "join n=2 per-node=2" 2 2 120 0 4 -- "$itest" join
# a broadcast whose root has joined fails on every rank (its values were zeros, SC_OK)
run_case "join root n=3" 3 1 120 0 3 -- "$itest" join-root
run_case "join root n=2 per-node=2" 2 2 120 0 4 -- "$itest" join-root
run_case "join root n=1 per-node=3" 1 3 120 0 3 -- "$itest" join-root
run_case "join carry n=1 per-node=2" 1 2 120 0 2 -- "$itest" join-carry
run_case "join carry n=2 per-node=2" 2 2 120 0 4 -- "$itest" join-carry
run_case "join carry after n=1 per-node=2" 1 2 120 0 2 -- "$itest" join-carry after
run_case "join carry after n=2 per-node=2" 2 2 120 0 4 -- "$itest" join-carry after
run_case "join carry flush n=2" 2 1 120 0 2 --daemon-arg --cycle_time_ms --daemon-arg 300 -- \
	"$itest" join-carry flush
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
# Everything that decides a tensor's scheme or its bytes on the wire is agreed: each option
# differing on rank 1 fails that tensor with SC_ERR_MISMATCH on every rank naming the field,
# and other tensors then sum exactly (world/agree.h).
# Grouped operations: a group's members held until all are ready on every rank and run in
# one fused buffer; groups the ranks formed differently fail on every rank (world/group.c).
run_case "group n=2" 2 1 180 0 2 --daemon-arg --fusion_mode --daemon-arg fixed --daemon-arg --stall_timeout_ms --daemon-arg 3000 -- "$itest" group
# Process sets: collectives among subsets of the trainers, as 2 nodes x 2 and 4 nodes x 1
# (daemon/ctl/pset.h, client/lib/pset.c).
# Hundreds of new names in one plan: the response cache grows while the plan is built.
run_case "many names n=2" 2 1 180 0 2 -- "$itest" many-names
run_case "psets n=2 per-node=2" 2 2 180 0 4 -- "$itest" psets
run_case "psets n=4" 4 1 180 0 4 -- "$itest" psets
# capi: what the public header promises a program written from it (itest_capi.c).
run_case "capi n=2" 2 1 120 0 2 -- "$itest" capi
run_case "capi n=2 per-node=2" 2 2 120 0 4 -- "$itest" capi
run_case "psets killed n=4" 4 1 180 137 3 --keep-going -- "$itest" psets-killed
run_case "psets timeout n=2" 2 1 120 0 2 -- "$itest" psets-timeout
run_case "group n=3" 3 1 180 0 3 --daemon-arg --fusion_mode --daemon-arg fixed --daemon-arg --stall_timeout_ms --daemon-arg 3000 -- "$itest" group
# A group after a plain allreduce under the planned fusion modes: the plan puts the plain
# tensor and the group's first member in one buffer; the group still goes out whole at
# its next steps, exact (a member held back for the plain tensor stalled alone).
for mode in adaptive aligned; do
	run_case "group after another $mode n=2" 2 1 120 0 2 --daemon-arg --fusion_mode \
		--daemon-arg $mode --daemon-arg --stall_timeout_ms --daemon-arg 3000 -- \
		"$itest" group after-another
done
# Shapes given with allreduces and broadcasts agree across ranks (and a node's trainers).
run_case "shapes n=2" 2 1 120 0 2 -- "$itest" shapes
run_case "shapes n=3" 3 1 120 0 3 -- "$itest" shapes
run_case "shapes n=2 per-node=2" 2 2 120 0 4 -- "$itest" shapes
run_case "shapes n=3 per-node=2 by-node" 3 2 120 0 6 -- "$itest" shapes by-node
# Fast mode (itest_fast.c, fast_path 1): a 4 KiB tensor's steps are kept fast turns, exact;
# a shape changed on one rank fails alike on every rank naming both shapes; a rank that
# skips a step is named in the stall, its late step refused; a group whose first member is
# the fast tensor is exact (no member held); exact steps after each. The counts of kept
# turns run with fast_wait_ms 1000: at the default 50 ms a busy host's scheduling alone can
# end an epoch, and the backoff after short epochs then keeps turns planned for a while.
fw="--daemon-arg --fast_wait_ms --daemon-arg 1000"
run_case "fast n=4" 4 1 180 0 4 --daemon-arg --fast_path --daemon-arg 1 $fw -- "$itest" fast \
	2000
run_case "fast n=2 per-node=2" 2 2 180 0 4 --daemon-arg --fast_path --daemon-arg 1 $fw -- \
	"$itest" fast 500
# A cycle of 2 or 3 tensors of different sizes, each in turn: the cycle's steps are kept
# fast turns, exact.
run_case "fast cycle n=3" 3 1 180 0 3 --daemon-arg --fast_path --daemon-arg 1 $fw -- \
	"$itest" fast cycle 3 700
run_case "fast cycle n=2 two" 2 1 180 0 2 --daemon-arg --fast_path --daemon-arg 1 $fw -- \
	"$itest" fast cycle 2 700
run_case "fast shape n=3" 3 1 120 0 3 --daemon-arg --fast_path --daemon-arg 1 -- "$itest" \
	fast shape
# the same two shapes given by the two trainers of one node (per-node=2): that node fails
# the step on its own and leaves the epoch (its turn is a LEAVE), so its trainers' next
# step is never summed with the others' failed one
run_case "fast shape n=2 per-node=2" 2 2 120 0 4 --daemon-arg --fast_path --daemon-arg 1 -- \
	"$itest" fast shape 10
run_case "fast stall n=3" 3 1 120 0 3 --daemon-arg --fast_path --daemon-arg 1 \
	--daemon-arg --stall_timeout_ms --daemon-arg 3000 -- "$itest" fast stall
run_case "fast group n=3" 3 1 120 0 3 --daemon-arg --fast_path --daemon-arg 1 \
	--daemon-arg --stall_timeout_ms --daemon-arg 3000 -- "$itest" fast group
# The response cache's bound (itest_evict.c): at most cache_max_entries entries on every
# daemon over hundreds of new names; names in rotation past a bound of 2, one trainer late,
# so that nodes announce ids the coordinator has just evicted.
run_case "cache evict n=3" 3 1 180 0 3 --daemon-arg --cache_max_entries --daemon-arg 8 \
	-- "$itest" evict 8 unique
run_case "cache evict rotation n=2" 2 1 180 0 2 --daemon-arg --cache_max_entries \
	--daemon-arg 2 -- "$itest" evict 2 rotation
run_case "cache evict rotation n=3 per-node=2" 3 2 180 0 6 --daemon-arg --cache_max_entries \
	--daemon-arg 2 -- "$itest" evict 2 rotation
# Grouped allreduces whose members go separately, and a process set whose last node never
# announces its tensors, past a bound of 2.
run_case "cache evict mixed n=3" 3 1 180 0 3 --daemon-arg --cache_max_entries \
	--daemon-arg 2 -- "$itest" evict 2 mixed
run_case "cache evict mixed n=2 per-node=2" 2 2 180 0 4 --daemon-arg --cache_max_entries \
	--daemon-arg 2 -- "$itest" evict 2 mixed
run_case "agree n=2" 2 1 240 0 2 -- "$itest" agree
run_case "agree n=3" 3 1 240 0 3 -- "$itest" agree
run_case "wait-race n=2" 2 1 180 0 2 -- "$itest" wait-race
run_case "wait-race n=2 per-node=2" 2 2 180 0 4 -- "$itest" wait-race
run_case "busy n=2" 2 1 120 0 2 -- "$itest" busy
run_case "busy n=3" 3 1 120 0 3 -- "$itest" busy
run_case "busy n=2 per-node=2" 2 2 120 0 4 -- "$itest" busy
run_case "release n=2" 2 1 120 0 2 -- "$itest" release
run_case "release n=3" 3 1 120 0 3 -- "$itest" release
run_case "release n=2 per-node=2" 2 2 120 0 4 -- "$itest" release
run_case "release-one n=2" 2 1 120 0 2 -- "$itest" release-one
# A sparsifier the daemon cannot make from options that passed registration: every rank
# gets SC_ERR_INVALID (not "out of memory"), and the job goes on.
run_case "badopts n=1" 1 1 60 0 1 -- "$itest" badopts
run_case "badopts n=2 per-node=2" 2 2 120 0 4 -- "$itest" badopts
# killed: rank 1 dies, so the launcher fails; the survivors must still pass their checks.
run_case "killed n=2" 2 1 120 137 1 --keep-going -- "$itest" killed
run_case "killed n=3" 3 1 120 137 2 --keep-going -- "$itest" killed
run_case "killed n=1 per-node=3" 1 3 120 137 2 --keep-going -- "$itest" killed
run_case "killed n=2 per-node=2" 2 2 120 137 3 --keep-going -- "$itest" killed
# killed late: rank 2's worker dies in a step its node-mate rank 3 submits only after a
# new worker of rank 2 came: rank 3's late submission is that failed step and gets its
# error at once, and the next step is exact on every rank
run_case "killed late n=2 per-node=2" 2 2 120 0 4 \
	--daemon-arg --stall_timeout_ms --daemon-arg 6000 -- "$itest" killed-late
# killed first: rank 3's worker dies before a step its node-mate rank 2 submitted, and
# node 0 submits that step only after a new worker of rank 3 came: node 1 failed the step
# before announcing it, so node 0's late submission is that step and gets its error at
# once, and the next steps are exact on every rank (node 1 owes nothing)
run_case "killed first n=2 per-node=2" 2 2 120 0 4 \
	--daemon-arg --stall_timeout_ms --daemon-arg 6000 -- "$itest" killed-first
# the same two deaths in fast mode (fast_path 1; 20 exact steps first begin it): the
# dying step is a fast turn on the node ahead, whose wait ends the epoch
run_case "fast killed late n=2 per-node=2" 2 2 120 0 4 --daemon-arg --fast_path \
	--daemon-arg 1 --daemon-arg --stall_timeout_ms --daemon-arg 6000 -- "$itest" \
	killed-late fast
run_case "fast killed first n=2 per-node=2" 2 2 120 0 4 --daemon-arg --fast_path \
	--daemon-arg 1 --daemon-arg --stall_timeout_ms --daemon-arg 6000 -- "$itest" \
	killed-first fast
# killed twice: rank 2's worker dies before a step that node 0 submits while node 1 is
# degraded (it fails at once there); once node 1 is whole again, rank 3's worker dies in
# that step, waiting for rank 2's next worker: node 1's report of the step charges node 0
# nothing (the coordinator answered it already), and the next steps are exact everywhere
run_case "killed twice n=2 per-node=2" 2 2 120 0 4 \
	--daemon-arg --stall_timeout_ms --daemon-arg 6000 -- "$itest" killed-twice
# killed refused: the same first death, but rank 3's step is refused by its degraded node;
# node 1 then fails its next step before announcing it (its trainers ask for different
# reductions): that report is of the next step, not of the one answered while node 1 was
# degraded, so node 0's next step fails at once too, and the one after is exact
run_case "killed refused n=2 per-node=2" 2 2 120 0 4 \
	--daemon-arg --stall_timeout_ms --daemon-arg 6000 -- "$itest" killed-refused
# killed afresh: the same first death, and rank 3's worker ends before that step: node 1
# comes back with new trainers only, which owe nothing; its next step, failed before it
# announced it, fails node 0's at once too, and the one after is exact
run_case "killed afresh n=2 per-node=2" 2 2 120 0 4 \
	--daemon-arg --stall_timeout_ms --daemon-arg 6000 -- "$itest" killed-afresh
# killed barrier: the same first death; rank 2's next worker waits in the barrier before
# the next step while rank 3, which lived through the death, submits the step its dead
# node-mate never did: that step stalls, and rank 2's worker, past it, owes nothing, so
# the next steps are exact everywhere
run_case "killed barrier n=2 per-node=2" 2 2 120 0 4 \
	--daemon-arg --stall_timeout_ms --daemon-arg 6000 -- "$itest" killed-barrier

# The raw control protocol.
run_case "unknown n=1" 1 1 60 0 1 -- "$itest" unknown
run_case "unknown n=2 per-node=2" 2 2 90 0 4 -- "$itest" unknown
run_case "version n=1" 1 1 60 0 1 -- "$itest" version
run_case "version n=2" 2 1 60 0 2 -- "$itest" version
# A request that names no collective fails the tensor's step on every rank, naming the
# trainer, well before the stall timeout; the next step succeeds.
run_case "bodyless n=1 per-node=2" 1 2 90 0 2 -- "$itest" bodyless
run_case "bodyless n=2" 2 1 90 0 2 -- "$itest" bodyless
run_case "silent-accept n=2" 2 1 60 0 2 -- "$itest" silent-accept
run_case "silent-accept n=1 per-node=2" 1 2 60 0 2 -- "$itest" silent-accept
run_case "oversize control frame n=1" 1 1 90 0 1 -- "$itest" oversize
# Control clients as the kernel sees them: a trainer whose hello declares pid 1 (a PID
# namespace of its own) or a pid no process has is tracked by its real pid, and its death
# frees its local rank; clients that never read their replies are dropped, each with a
# log line, the daemon's memory bounded.
run_case "false pid init n=1 per-node=2" 1 2 60 0 2 -- "$itest" false-pid init
run_case "false pid invisible n=1 per-node=2" 1 2 60 0 2 -- "$itest" false-pid invisible
# A trainer whose process the daemon cannot see (the daemon in a PID namespace of its own;
# needs root): its death is noticed through its connection's hang-up. The daemon gets a
# /dev/shm of its own too: at start it removes the objects of daemons whose pid it cannot
# see, and from there it sees none.
if selected "false pid foreign n=1 per-node=2"; then
	name="false pid foreign n=1 per-node=2"
	if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null 2>&1; then
		skip_case "$name" "needs root and unshare (util-linux) for a PID namespace"
	elif ! unshare --pid --mount --fork sh -c 'mount -t tmpfs tmpfs /dev/shm' 2>/dev/null; then
		skip_case "$name" "cannot create a PID and a mount namespace here"
	else
		fns=$tmp/foreign
		mkdir -p "$fns"
		: >"$tmp/coord.log"
		unshare --pid --mount --kill-child sh -c \
			'mount -t tmpfs -o size=16m tmpfs /dev/shm && exec "$0" "$@"' \
			"$bin/sparsecommd" --rank 0 --world_size 1 --local_size 2 \
			--coordinator "127.0.0.1:$(free_port)" --runtime_dir "$fns" \
			>>"$tmp/coord.log" 2>&1 </dev/null &
		fnsd=$!
		i=0
		while [ ! -S "$fns/ctl.sock" ] && [ $i -lt 100 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		SPARSECOMM_SOCKET="ipc://$fns/ctl.sock" SPARSECOMM_RANK=0 SPARSECOMM_SIZE=2 \
			SPARSECOMM_LOCAL_RANK=0 SPARSECOMM_LOCAL_SIZE=2 timeout 60 "$itest" false-pid \
			foreign >"$tmp/out" 2>&1 </dev/null
		rc=$?
		# unshare waits for the daemon (its child) whatever it is sent: the daemon is stopped
		kill $(cat "/proc/$fnsd/task/$fnsd/children" 2>/dev/null) 2>/dev/null
		wait "$fnsd" 2>/dev/null
		ok=0
		[ "$rc" -eq 0 ] && grep -q 'false-pid: rank 0 passed' "$tmp/out" &&
			grep -q "a process this daemon cannot see" "$tmp/coord.log" &&
			grep -q "pid unknown (1 in its own PID namespace)) closed its connection" \
				"$tmp/coord.log" && ok=1
		lone_verdict "$name" "$ok" "scenario exited with $rc"
	fi
fi
rm -rf "$tmp/flood"
run_case "ctl flood n=1" 1 1 180 0 1 --log-dir "$tmp/flood" -- "$itest" ctl-flood
if selected "ctl flood n=1"; then
	if grep -q "control client pid [0-9]* (uid [0-9]*) dropped: it does not read its replies (unread reports" \
		"$tmp/flood"/daemon*.log &&
		grep -q "control client pid [0-9]* (uid [0-9]*) dropped: it does not read its replies (queued messages" \
			"$tmp/flood"/daemon*.log; then
		echo "ok    ctl flood n=1: both clients dropped, logged"
		passed=$((passed + 1))
	else
		echo "FAIL  ctl flood n=1: the daemon's log does not say both clients were dropped"
		grep -h "dropped" "$tmp/flood"/daemon*.log 2>/dev/null | head -n 5 | sed 's/^/      | /'
		failed=$((failed + 1))
	fi
fi
# The submit channel (daemon/ctl/submit.h): a wrong token, the right one from another
# process and a silent connection refused, each logged naming the pid and uid; a request
# over the control socket after binding and garbage, a message of zero bytes or an oversize
# message on the channel drop only that session. Order: submissions then a barrier or a
# join at once, exact; the same without the channel (the control socket's path). Four
# threads of each trainer submitting at once, exact; a forked child refused a request and
# its sc_finalize leaves the parent's session working. sc_connect right after sc_finalize,
# many times: the goodbye on the channel is served before the new hello. Against a scripted
# daemon: the channel found beside the control socket, a token unanswered fails sc_connect
# in time, a full backlog falls back at once. The daemon out of descriptors with a
# connection waiting: no spin on the listener, one warning, and it goes on.
rm -rf "$tmp/submit"
run_case "submit channel n=1" 1 1 120 0 1 --log-dir "$tmp/submit" -- "$itest" submit-channel
if selected "submit channel n=1"; then
	log="$tmp/submit"/daemon*.log
	# shellcheck disable=SC2086
	if grep -q "submit channel from pid [0-9]* (uid [0-9]*) refused: its token is no session's" $log &&
		grep -q "submit channel from pid [0-9]* (uid [0-9]*) refused: no session of that pid and uid waits for its channel" $log &&
		grep -q "submit channel from pid [0-9]* (uid [0-9]*) closed: no token within" $log &&
		grep -q "trainer client pid [0-9]* (uid [0-9]*) dropped: pid [0-9]* sent a request .* after binding its submit channel" $log &&
		grep -q "dropped: it sent a message that is not a ClientMsg over its submit channel" $log &&
		grep -q "dropped: it sent a message of zero bytes over its submit channel" $log &&
		grep -q "dropped: it sent a message of [0-9]* bytes over its submit channel" $log; then
		echo "ok    submit channel n=1: refusals and drops logged naming the pid"
		passed=$((passed + 1))
	else
		echo "FAIL  submit channel n=1: the daemon's log lacks a refusal or a drop"
		# shellcheck disable=SC2086
		grep -h "submit channel" $log 2>/dev/null | head -n 8 | sed 's/^/      | /'
		failed=$((failed + 1))
	fi
fi
run_case "submit order n=2 per-node=2" 2 2 240 0 4 -- "$itest" submit-order
run_case "submit order n=3" 3 1 240 0 3 -- "$itest" submit-order
run_case "submit order without the channel n=2" 2 1 240 0 2 -- \
	env SPARSECOMM_SUBMIT_CHANNEL=0 "$itest" submit-order 10
run_case "submit threads n=2 per-node=2" 2 2 240 0 4 -- "$itest" submit-threads
run_case "submit batch n=2 per-node=2" 2 2 240 0 4 -- "$itest" submit-batch
# sc_poll and a short sc_wait do not block behind another thread's send on a full channel
# (the test stops its daemon for about a second: one node, one trainer)
run_case "submit poll n=1" 1 1 120 0 1 -- "$itest" submit-poll
run_case "submit fork n=2" 2 1 120 0 2 -- "$itest" submit-fork
run_case "submit reconnect n=1 per-node=2" 1 2 120 0 2 -- "$itest" submit-reconnect
run_case "submit open n=1" 1 1 60 0 1 -- "$itest" submit-open
# sc_finalize while threads of the trainer wait (without a limit), poll, register and enter
# barriers on the same client: each ends with SC_ERR_SHUTDOWN, sc_finalize within its bound;
# then a call held inside past that bound (a blocking log callback) completes and frees the
# client as it leaves (itest_finalize.c); with and without the submit channel.
run_case "finalize race n=1 per-node=2" 1 2 240 0 2 -- "$itest" finalize-race
run_case "finalize race without the channel n=1 per-node=2" 1 2 240 0 2 -- \
	env SPARSECOMM_SUBMIT_CHANNEL=0 "$itest" finalize-race 20
rm -rf "$tmp/emfile"
run_case "submit emfile n=1" 1 1 60 0 1 --log-dir "$tmp/emfile" -- "$itest" submit-emfile
if selected "submit emfile n=1"; then
	# shellcheck disable=SC2086
	n=$(cat "$tmp/emfile"/daemon*.log 2>/dev/null | grep -c "submit channel: out of descriptors")
	if [ "$n" -eq 1 ]; then
		echo "ok    submit emfile n=1: out of descriptors warned of once"
		passed=$((passed + 1))
	else
		echo "FAIL  submit emfile n=1: the daemon warned $n times of running out of descriptors, expected once"
		failed=$((failed + 1))
	fi
fi
run_case "submit fork without the channel n=2" 2 1 120 0 2 -- \
	env SPARSECOMM_SUBMIT_CHANNEL=0 "$itest" submit-fork
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
run_case "badinput truncate n=2" 2 1 120 0 2 -- "$itest" badinput truncate
# A 3 GiB registration takes seconds to reserve and map in: prepared beside the loop, the
# heartbeats go on and no node is lost at a 1 s peer timeout.
run_case "large registration beside heartbeats n=2" 2 1 180 0 2 --daemon-arg --peer_timeout_ms \
	--daemon-arg 1000 -- "$itest" bigreg 3072
# A failure of the nodes' compute stage (a sparsifier the options cannot make) fails the
# operation on every rank at once, naming the lowest faulty node's rank and the tensor.
run_case "badinput compute n=3" 3 1 120 0 3 -- "$itest" badinput compute
run_case "badinput compute n=2 per-node=2" 2 2 120 0 4 -- "$itest" badinput compute

# The data plane's backend named explicitly (the `transport` key); a name that is no
# backend stops every daemon at start, with an error naming it.
run_case "transport=tcp n=3" 3 1 120 0 3 --daemon-arg --transport --daemon-arg tcp -- \
	"$itest" sums-small
refused_at_start "transport=bogus refused" "unknown transport 'bogus'" \
	--daemon-arg --transport --daemon-arg bogus

# --nccl-hostid: every node's daemon and trainers share one NCCL_HOSTID, each node its
# own, over loopback unless NCCL_SOCKET_IFNAME is set; with -H it is refused.
hostid_case() { # NAME IFNAME_SET IFNAME_WANT
	selected "$1" || return 0
	rm -f "$tmp/hostid-env".*
	SPARSECOMM_REAL_DAEMON="$bin/sparsecommd" SPARSECOMM_ENV_LOG="$tmp/hostid-env" \
		NCCL_SOCKET_IFNAME=$2 timeout 90 "$launcher" -n 3 --per-node 2 --timeout 60 \
		--nccl-hostid --daemon "$root/tests/integration/daemon_env.sh" -- sh -c \
		'echo "hostid $SPARSECOMM_NODE_RANK $NCCL_HOSTID $NCCL_SOCKET_IFNAME"' \
		>"$tmp/out" 2>&1 </dev/null
	rc=$?
	why=""
	[ "$rc" -eq 0 ] || why="launcher exited with $rc"
	ids=""
	for n in 0 1 2; do
		t=$(sed -n "s/^\[[0-9]*\] hostid $n //p" "$tmp/out" | sort -u)
		d=$(cut -d' ' -f2- "$tmp/hostid-env.$n" 2>/dev/null)
		[ "$(echo "$t" | wc -l)" -eq 1 ] && [ -n "${t%% *}" ] ||
			why="$why; node $n's trainers: '$t'"
		[ "$t" = "$d" ] || why="$why; node $n's daemon '$d', trainers '$t'"
		[ "${t#* }" = "$3" ] || why="$why; node $n's interface '${t#* }', want '$3'"
		ids="$ids${t%% *}$nl"
	done
	[ "$(printf '%s' "$ids" | sort -u | wc -l)" -eq 3 ] || why="$why; ids not distinct: $ids"
	why_verdict "$1" "$why"
}
hostid_case "nccl-hostid per node n=3 per-node=2" "" lo
hostid_case "nccl-hostid keeps NCCL_SOCKET_IFNAME" eth7 eth7
refused_at_start "nccl-hostid with hosts refused" "runs one node per host" --nccl-hostid \
	-H 127.0.0.1:1,localhost:1

# data_protection = encrypt: every byte between the daemons travels in sealed records (the
# daemons' logs say so), and the sums of dense tensors and of every sparse scheme, the
# 16-bit wire's ring and the alltoall's blocks stay exact; integrity likewise with two
# trainers a node. Without a job secret (insecure) the daemons refuse it at start.
rm -rf "$tmp/seal"
run_case "data_protection=encrypt n=3" 3 1 300 0 12 --log-dir "$tmp/seal" \
	--daemon-arg --data-protection --daemon-arg encrypt -- \
	sh -c "'$itest' sums-small && '$itest' sparse && '$itest' wire && '$itest' alltoall"
run_case "data_protection=integrity n=2 per-node=2" 2 2 300 0 12 \
	--daemon-arg --data-protection --daemon-arg integrity -- \
	sh -c "'$itest' sums-small && '$itest' wire && '$itest' alltoall"
if selected "data_protection=encrypt n=3"; then
	sealed=$(grep -l 'tcp mesh of 3 ranks ready .*data_protection encrypt' \
		"$tmp/seal"/daemon*.log 2>/dev/null | wc -l)
	if [ "$sealed" -eq 3 ]; then
		echo "ok    data_protection=encrypt n=3: every mesh sealed"
		passed=$((passed + 1))
	else
		echo "FAIL  data_protection=encrypt n=3: $sealed of 3 daemons logged a sealed mesh"
		failed=$((failed + 1))
	fi
fi
refused_at_start "data_protection without secret refused" \
	"data_protection = integrity needs secret_file" --insecure --daemon-arg \
	--data-protection --daemon-arg integrity

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

# The nonfinite key decides what the input check counts as a fault, so every rank must
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

# Every key the configuration table marks the same on every node (--dump-config says which:
# the keys a buffer's scheme or its bytes on the wire depend on) is compared at the join: a
# node whose value differs is refused, naming the key and both values. The list comes from
# the daemon itself; a key without an alternative value below fails the case.
same_alt() {
	case $1 in
	scheme) echo dense_ring ;;
	scheme_pins) echo "emb.*=dense_ring" ;;
	netprobe_interval_jobs) echo 7 ;;
	spardl_teams) echo 2 ;;
	exdyna_blocks) echo 512 ;;
	exdyna_move_blocks) echo 3 ;;
	exdyna_alpha) echo 1.5 ;;
	exdyna_beta) echo 1.3 ;;
	exdyna_gamma) echo 0.0125 ;;
	exdyna_cap) echo 1.75 ;;
	exdyna_grid) echo 1.5 ;;
	exdyna_fine_symmetric) echo 1 ;;
	exdyna_scope) echo tensor ;;
	sketch_rows) echo 3 ;;
	sketch_cols) echo 4 ;;
	nonfinite) echo warn ;;
	data_protection) echo integrity ;;
	cpu_share) echo 3 ;;
	cache_max_entries) echo 64 ;;
	fast_path) echo 0 ;;
	*) return 1 ;;
	esac
}
# same_key_refused N KEY: a lone coordinator of N nodes with the defaults; rank N-1 (with
# rank 1 .. N-2 agreeing) has KEY's alternative value and must be refused.
same_key_refused() {
	n=$1 key=$2
	alt=$(same_alt "$key") || { echo "no alternative value for $key in run.sh"; return 1; }
	head -c 32 /dev/urandom >"$tmp/same-secret" && chmod 600 "$tmp/same-secret"
	port=$(free_port)
	: >"$tmp/coord.log"
	"$bin/sparsecommd" --rank 0 --world_size "$n" --coordinator "127.0.0.1:$port" \
		--runtime_dir "$tmp/same0" --secret_file "$tmp/same-secret" \
		--join_timeout_ms 60000 >>"$tmp/coord.log" 2>&1 </dev/null &
	coord=$!
	mids=""
	r=1
	while [ "$r" -lt $((n - 1)) ]; do
		"$bin/sparsecommd" --rank "$r" --world_size "$n" --coordinator "127.0.0.1:$port" \
			--runtime_dir "$tmp/same$r" --secret_file "$tmp/same-secret" \
			>"$tmp/same$r.log" 2>&1 </dev/null &
		mids="$mids $!"
		r=$((r + 1))
	done
	timeout 60 "$bin/sparsecommd" --rank $((n - 1)) --world_size "$n" \
		--coordinator "127.0.0.1:$port" --runtime_dir "$tmp/same-last" \
		--secret_file "$tmp/same-secret" "--$key" "$alt" >"$tmp/out" 2>&1 </dev/null
	rc=$?
	for p in $mids $coord; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] &&
		grep -qF "rank $((n - 1)) has $key '" "$tmp/coord.log" || {
		echo "rank $((n - 1)) of $n with $key = $alt: exited with $rc, the coordinator said:"
		tail -n 5 "$tmp/coord.log"
		return 1
	}
}
if selected "same keys refused"; then
	ok=1 why=""
	keys=$("$bin/sparsecommd" --dump-config | sed -n 's/^\([a-z_0-9]*\) = .*same on every node.*/\1/p')
	[ -n "$keys" ] || { ok=0; why="--dump-config lists no key the same on every node"; }
	for key in $keys; do
		out_k=$(same_key_refused 2 "$key") || { ok=0; why="$why $out_k"; }
	done
	for key in sketch_rows scheme; do
		out_k=$(same_key_refused 3 "$key") || { ok=0; why="$why $out_k"; }
	done
	echo "$why" >"$tmp/out"
	: >"$tmp/coord.log"
	lone_verdict "same keys refused ($(echo $keys | wc -w) keys)" "$ok" "$why"
fi

# pair_start NAME ARGS0 ARGS1: two daemons (rank 0 and 1 of 2, one trainer each) on a
# coordinator "localhost:PORT", rank R with ARGS<R> added (split on blanks), runtime
# directories $tmp/pair<R>; waits (bounded) for their sockets. pair_trainers SCENARIO
# ARGS...: one trainer per daemon; sets $rc0 $rc1, output in $tmp/pair-t<R>.out.
# pair_stop: stops both, logs in $tmp/pair<R>.log (rank 0's as coord.log for
# lone_verdict).
pair_start() {
	port=$(free_port)
	pids=""
	for r in 0 1; do
		mkdir -p "$tmp/pair$r"
		if [ $r -eq 0 ]; then extra=$2; else extra=$3; fi
		# shellcheck disable=SC2086
		"$bin/sparsecommd" --rank $r --world_size 2 --coordinator "localhost:$port" \
			--runtime_dir "$tmp/pair$r" --join_timeout_ms 30000 $extra \
			>"$tmp/pair$r.log" 2>&1 </dev/null &
		pids="$pids $!"
	done
	i=0
	while { [ ! -S "$tmp/pair0/ctl.sock" ] || [ ! -S "$tmp/pair1/ctl.sock" ]; } &&
		[ $i -lt 200 ]; do
		sleep 0.1
		i=$((i + 1))
	done
}
pair_trainers() {
	for r in 0 1; do
		SPARSECOMM_SOCKET="ipc://$tmp/pair$r/ctl.sock" SPARSECOMM_RANK=$r SPARSECOMM_SIZE=2 \
			timeout 60 "$itest" "$@" >"$tmp/pair-t$r.out" 2>&1 </dev/null &
		eval "t$r=\$!"
	done
	# shellcheck disable=SC2154
	wait "$t0"
	rc0=$?
	# shellcheck disable=SC2154
	wait "$t1"
	rc1=$?
}
pair_stop() {
	# shellcheck disable=SC2086
	kill $pids 2>/dev/null
	# shellcheck disable=SC2086
	wait $pids 2>/dev/null
	cat "$tmp/pair-t0.out" "$tmp/pair-t1.out" "$tmp/pair1.log" >"$tmp/out"
	cp "$tmp/pair0.log" "$tmp/coord.log"
}

# Addresses by name and wildcards: two daemons whose coordinator is "localhost:PORT" (a
# name, resolved) and whose data planes bind 0.0.0.0. They must form, sum right, and
# announce the interface that reaches the coordinator (127.0.0.1), never the wildcard.
if selected "wildcard data_addr, coordinator localhost"; then
	name="wildcard data_addr, coordinator localhost"
	# not loopback: the daemons run with a job secret (README.md, "Security")
	(umask 077 && head -c 32 /dev/urandom >"$tmp/wild-secret")
	pair_start "$name" "--data_addr 0.0.0.0 --secret_file $tmp/wild-secret" \
		"--data_addr 0.0.0.0 --secret_file $tmp/wild-secret"
	pair_trainers sums-small
	timeout 20 "$bin/sparsectl" --socket "ipc://$tmp/pair1/ctl.sock" --json status \
		>"$tmp/wild-status.json" 2>&1 </dev/null
	rcs=$?
	pair_stop
	cat "$tmp/wild-status.json" >>"$tmp/out"
	ok=0
	why="trainers exited with $rc0 and $rc1, sparsectl status with $rcs"
	if [ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] && [ "$rcs" -eq 0 ] &&
		grep -q 'sums-small: rank 0 passed' "$tmp/pair-t0.out" &&
		grep -q 'sums-small: rank 1 passed' "$tmp/pair-t1.out"; then
		peers=$(python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
print(" ".join(p["addr"] for p in s["peers"]))' "$tmp/wild-status.json" 2>&1)
		why="peer addresses in sparsectl status: '$peers' (expected 127.0.0.1 twice)"
		[ "$peers" = "127.0.0.1 127.0.0.1" ] && ok=1
	fi
	lone_verdict "$name" "$ok" "$why"
fi

# The metrics endpoint (metrics_addr) of each of two daemons, scraped by its trainer
# around allreduces (tests/integration/itest_metrics.c).
if selected "metrics endpoint"; then
	m0=127.0.0.1:$(free_port)
	m1=127.0.0.1:$(free_port)
	pair_start "metrics endpoint" "--metrics_addr $m0" "--metrics_addr $m1"
	pair_trainers metrics "$m0" "$m1"
	pair_stop
	ok=0
	grep -q 'metrics: rank 0 passed' "$tmp/pair-t0.out" &&
		grep -q 'metrics: rank 1 passed' "$tmp/pair-t1.out" && ok=1
	lone_verdict "metrics endpoint" "$ok" "trainers exited with $rc0 and $rc1"
fi

# A daemon shared by a group (ctl_group, needs root): a root daemon whose ctl_group is a
# fresh group; a fresh user in that group connects, registers tensors (their shared memory
# is 0660 of the group) and sums, and sparsectl status works for it; a user outside the
# group is refused at once, sparsectl and the library alike, naming the permissions and
# the uid. Without a named socket, sparsectl falls back to the system daemon's
# /run/sparsecomm/ctl.sock when the user's own default has none. The member may change a
# tuning key but not one that names a file the daemon writes (timeline_file) or lifts a
# limit (max_tensor_bytes): it is refused by name, and no file is made; root may.
if selected "ctl_group member connects"; then
	name="ctl_group member connects"
	if [ "$(id -u)" -ne 0 ]; then
		skip_case "$name" "needs root to create a user and a group"
	elif ! command -v useradd >/dev/null 2>&1 || ! command -v setpriv >/dev/null 2>&1; then
		skip_case "$name" "needs useradd, groupadd (passwd) and setpriv (util-linux)"
	elif ! shared=$(mktemp -d /tmp/sc-group.XXXXXX); then
		: >"$tmp/out"
		lone_verdict "$name" 0 "cannot create the users' shared directory in /tmp"
	else
		grp=scg$$ member=scm$$ other=sco$$
		groupadd "$grp" && useradd -M -N -g users -G "$grp" "$member" &&
			useradd -M -N -g users "$other"
		chmod 0755 "$shared"
		rt=$shared/rt
		"$bin/sparsecommd" --runtime_dir "$rt" --ctl_group "$grp" >"$tmp/coord.log" 2>&1 \
			</dev/null &
		gd=$!
		i=0
		while [ ! -S "$rt/ctl.sock" ] && [ $i -lt 100 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		modes="$(stat -c '%a %G' "$rt") / $(stat -c '%a %G' "$rt/ctl.sock" 2>/dev/null)"
		as_member() {
			setpriv --reuid="$member" --regid=users --init-groups env -i PATH="$PATH" \
				HOME=/ "$@"
		}
		as_member timeout 60 env SPARSECOMM_SOCKET="$rt/ctl.sock" SPARSECOMM_RANK=0 \
			SPARSECOMM_SIZE=1 "$itest" sums-small >"$tmp/out" 2>&1 </dev/null
		rc_member=$?
		as_member timeout 20 "$bin/sparsectl" --socket "$rt/ctl.sock" status \
			>>"$tmp/out" 2>&1 </dev/null
		rc_ctl=$?
		as_member timeout 20 "$bin/sparsectl" --socket "$rt/ctl.sock" config set \
			timeline_file "$shared/owned.json" >"$tmp/priv.out" 2>&1 </dev/null
		rc_priv=$?
		as_member timeout 20 "$bin/sparsectl" --socket "$rt/ctl.sock" config set \
			max_tensor_bytes 64G >>"$tmp/priv.out" 2>&1 </dev/null
		rc_priv2=$?
		# a directory the daemon cannot write: the member hears the owner's refusal,
		# not whether the daemon's user may write there
		as_member timeout 20 "$bin/sparsectl" --socket "$rt/ctl.sock" config set \
			timeline_file "$shared/nodir/owned.json" >"$tmp/priv3.out" 2>&1 </dev/null
		rc_priv3=$?
		as_member timeout 20 "$bin/sparsectl" --socket "$rt/ctl.sock" config set \
			cycle_time_ms 2 >>"$tmp/priv.out" 2>&1 </dev/null
		rc_tune=$?
		timeout 20 "$bin/sparsectl" --socket "$rt/ctl.sock" config set max_tensor_bytes 8G \
			>>"$tmp/priv.out" 2>&1 </dev/null
		rc_root=$?
		member_uid=$(id -u "$member") other_uid=$(id -u "$other")
		t_other=$(date +%s)
		setpriv --reuid="$other" --regid=users --init-groups env -i PATH="$PATH" \
			timeout 20 "$bin/sparsectl" --socket "$rt/ctl.sock" status \
			>"$tmp/other.out" 2>&1 </dev/null
		rc_other=$?
		setpriv --reuid="$other" --regid=users --init-groups env -i PATH="$PATH" \
			SPARSECOMM_SOCKET="$rt/ctl.sock" timeout 30 "$itest" sums-small \
			>>"$tmp/other.out" 2>&1 </dev/null
		rc_other_lib=$?
		t_other=$(($(date +%s) - t_other))
		as_member env XDG_RUNTIME_DIR="$shared" timeout 20 "$bin/sparsectl" status \
			>"$tmp/default.out" 2>&1 </dev/null
		kill "$gd" 2>/dev/null
		wait "$gd" 2>/dev/null
		userdel "$member" 2>/dev/null
		userdel "$other" 2>/dev/null
		groupdel "$grp" 2>/dev/null
		rm -rf "$shared"
		cat "$tmp/other.out" "$tmp/default.out" "$tmp/priv.out" "$tmp/priv3.out" >>"$tmp/out"
		ok=0
		# the system socket is either missing (named in the error) or answers
		[ "$modes" = "750 $grp / 660 $grp" ] && [ "$rc_member" -eq 0 ] &&
			[ "$rc_ctl" -eq 0 ] && [ "$rc_other" -ne 0 ] && [ "$rc_other_lib" -ne 0 ] &&
			[ "$t_other" -lt 8 ] && [ "$rc_priv" -ne 0 ] && [ "$rc_priv2" -ne 0 ] &&
			[ "$rc_tune" -eq 0 ] && [ "$rc_root" -eq 0 ] &&
			[ ! -e "$shared/owned.json" ] &&
			grep -q "timeline_file may be changed only by the daemon's user (uid 0) or root, and this client runs as uid $member_uid" "$tmp/priv.out" &&
			grep -q "max_tensor_bytes may be changed only by the daemon's user" "$tmp/priv.out" &&
			[ "$rc_priv3" -eq 1 ] && grep -q "timeline_file may be changed only by the daemon's user" "$tmp/priv3.out" &&
			grep -q 'sums-small: rank 0 passed' "$tmp/out" &&
			[ "$(grep -c "Permission denied for uid $other_uid" "$tmp/other.out")" -eq 2 ] &&
			! grep -q 'is sparsecommd running' "$tmp/other.out" &&
			{ grep -q '/run/sparsecomm/ctl.sock' "$tmp/default.out" ||
				grep -q '^daemon ' "$tmp/default.out"; } && ok=1
		lone_verdict "$name" "$ok" "modes '$modes' (want '750 $grp / 660 $grp'), the \
member's trainer exited $rc_member, its sparsectl $rc_ctl, the other user's $rc_other and \
$rc_other_lib after $t_other s; config set by the member: timeline_file $rc_priv, \
max_tensor_bytes $rc_priv2, cycle_time_ms $rc_tune, a timeline in a missing directory \
$rc_priv3 ($(cat "$tmp/priv3.out")); by root: $rc_root"
	fi
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

# Authentication (README.md, "Security"). make_secret FILE: a secret file as the
# documentation makes one.
make_secret() {
	(umask 077 && head -c 32 /dev/urandom >"$1")
}
# auth_job_runs COORD_DIR: rank 1 joins the lone coordinator with the job's secret
# ($tmp/secret), one trainer per node sums, and both pass; sets $ok_job (1 when they did).
auth_job_runs() {
	mkdir -p "$tmp/auth-r1"
	"$bin/sparsecommd" --rank 1 --world_size 2 --coordinator "127.0.0.1:$port" \
		--runtime_dir "$tmp/auth-r1" --secret_file "$tmp/secret" >"$tmp/r1.log" 2>&1 </dev/null &
	r1=$!
	i=0
	while { [ ! -S "$1/ctl.sock" ] || [ ! -S "$tmp/auth-r1/ctl.sock" ]; } && [ $i -lt 300 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	SPARSECOMM_SOCKET="ipc://$1/ctl.sock" timeout 60 "$itest" sums-small >"$tmp/out0" 2>&1 </dev/null &
	t0=$!
	SPARSECOMM_SOCKET="ipc://$tmp/auth-r1/ctl.sock" timeout 60 "$itest" sums-small \
		>"$tmp/out1" 2>&1 </dev/null
	rc1=$?
	wait "$t0"
	rc0=$?
	kill "$coord" "$r1" 2>/dev/null
	wait "$coord" "$r1" 2>/dev/null
	cat "$tmp/out0" "$tmp/out1" "$tmp/r1.log" >>"$tmp/out"
	ok_job=0
	[ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] && grep -q 'sums-small: rank 0 passed' "$tmp/out0" &&
		grep -q 'sums-small: rank 1 passed' "$tmp/out1" && ok_job=1
}

# A daemon started for rank 1 with another secret never joins (the coordinator's CURVE
# handshake fails for it, and the coordinator logs that, naming the address) and gives up
# at its join timeout, saying why; the real rank 1 then joins and the job's sums are exact.
if selected "auth impostor refused"; then
	make_secret "$tmp/secret"
	make_secret "$tmp/secret-other"
	start_lone_coordinator "$tmp/auth-coord" --secret_file "$tmp/secret"
	mkdir -p "$tmp/auth-imp"
	timeout 60 "$bin/sparsecommd" --rank 1 --world_size 2 --coordinator "127.0.0.1:$port" \
		--runtime_dir "$tmp/auth-imp" --secret_file "$tmp/secret-other" \
		--join_timeout_ms 6000 >"$tmp/out" 2>&1 </dev/null
	rc=$?
	auth_job_runs "$tmp/auth-coord"
	ok=0
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$ok_job" -eq 1 ] &&
		grep -q "rank 1 could not join the coordinator .*secret differs" "$tmp/out" &&
		grep -q "rank 1 joined" "$tmp/coord.log" &&
		grep -q "coordinator-channel handshake from 127.0.0.1 failed .*another job secret" \
			"$tmp/coord.log" && ok=1
	lone_verdict "auth impostor refused" "$ok" "impostor exited with $rc, job passed: $ok_job"
fi

# Peers without the secret (plain ZeroMQ, and CurveZMQ with the coordinator's public key
# but a key pair of their own) send garbage, a Join and a Plan: no answer, the CURVE one
# refused by the ZAP handler naming its address; the job then forms and sums.
if selected "auth stranger ignored"; then
	make_secret "$tmp/secret"
	start_lone_coordinator "$tmp/auth-coord2" --secret_file "$tmp/secret"
	i=0
	key=""
	while [ -z "$key" ] && [ $i -lt 300 ]; do
		key=$(sed -n 's/.*CurveZMQ server key \([^;]*\);.*/\1/p' "$tmp/coord.log" | head -n 1)
		[ -n "$key" ] || sleep 0.1
		i=$((i + 1))
	done
	SPARSECOMM_SOCKET="tcp://127.0.0.1:$port" SPARSECOMM_RANK=1 SPARSECOMM_CURVE_SERVERKEY="$key" \
		timeout 60 "$itest" peer-stranger >"$tmp/out" 2>&1 </dev/null
	rc=$?
	auth_job_runs "$tmp/auth-coord2"
	ok=0
	[ "$rc" -eq 0 ] && [ "$ok_job" -eq 1 ] && grep -q 'peer-stranger: rank 1 passed' "$tmp/out" &&
		grep -q "refused a coordinator-channel connection from 127.0.0.1: the client key is no rank's key" \
			"$tmp/coord.log" && ok=1
	lone_verdict "auth stranger ignored" "$ok" "scenario exited with $rc, job passed: $ok_job"
fi

# A stranger's idle connections to the coordinator's port, more than its descriptor limit
# (256 here, hard): the coordinator closes the oldest unauthenticated ones past its bounds,
# saying so, and the job still forms and sums while they are held. Then a daemon under
# `ulimit -n 16` refuses to start, naming the limit, instead of aborting in libzmq, and
# one started with a soft limit of 100 runs at its hard limit.
if selected "stranger connection flood"; then
	make_secret "$tmp/secret"
	: >"$tmp/out"
	port=$(free_port)
	mkdir -p "$tmp/flood-coord"
	: >"$tmp/coord.log"
	(ulimit -n 256 && exec "$bin/sparsecommd" --rank 0 --world_size 2 \
		--coordinator "127.0.0.1:$port" --runtime_dir "$tmp/flood-coord" \
		--join_timeout_ms 60000 --secret_file "$tmp/secret") >>"$tmp/coord.log" 2>&1 </dev/null &
	coord=$!
	i=0
	while [ ! -S "$tmp/flood-coord/ctl.sock" ] && [ $i -lt 300 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	python3 -c '
import socket, sys, time
held = []
for _ in range(600):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", int(sys.argv[1])))
        held.append(s)
    except OSError as e:
        print("connect:", e)
print("flood: %d connections opened" % len(held), flush=True)
time.sleep(60)
' "$port" >"$tmp/flood.out" 2>&1 &
	flood=$!
	i=0
	while ! grep -q "connections opened" "$tmp/flood.out" && [ $i -lt 600 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	auth_job_runs "$tmp/flood-coord"
	kill "$flood" 2>/dev/null
	wait "$flood" 2>/dev/null
	cat "$tmp/flood.out" >>"$tmp/out"
	(ulimit -n 16 && exec "$bin/sparsecommd" --rank 0 --world_size 1 \
		--runtime_dir "$tmp/flood-16") >"$tmp/out16" 2>&1 </dev/null
	rc16=$?
	cat "$tmp/out16" >>"$tmp/out"
	# a soft limit below the hard one is raised to it at start
	mkdir -p "$tmp/flood-soft"
	(ulimit -Sn 100 && exec "$bin/sparsecommd" --rank 0 --world_size 1 \
		--coordinator "127.0.0.1:$(free_port)" --runtime_dir "$tmp/flood-soft") \
		>"$tmp/outsoft" 2>&1 </dev/null &
	softd=$!
	i=0
	while [ ! -S "$tmp/flood-soft/ctl.sock" ] && [ $i -lt 300 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	nofile=$(sed -n 's/^Max open files *\([0-9a-z]*\) *\([0-9a-z]*\).*/\1 \2/p' \
		"/proc/$softd/limits" 2>/dev/null)
	kill "$softd" 2>/dev/null
	wait "$softd" 2>/dev/null
	echo "descriptor limit (soft hard) of a daemon started at 100: $nofile" >>"$tmp/out"
	ok=0
	[ -n "$nofile" ] && [ "${nofile% *}" = "${nofile#* }" ] && [ "${nofile% *}" != 100 ] ||
		rc16="$rc16, soft limit not raised ($nofile)"
	[ "$ok_job" -eq 1 ] && grep -q "flood: 600 connections opened" "$tmp/flood.out" &&
		grep -q "closed an unauthenticated coordinator-channel connection from 127.0.0.1" \
			"$tmp/coord.log" && [ "$rc16" = 1 ] &&
		grep -q "the descriptor limit is 16 (ulimit -n; hard limit 16)" "$tmp/out16" && ok=1
	lone_verdict "stranger connection flood" "$ok" "job passed: $ok_job, ulimit -n 16: exit $rc16"
fi

# Messages are taken only from the rank that may send them: a connection that has not
# joined, a rank reporting for rank 0, and a rank sending what only the coordinator sends
# are each dropped and logged, naming the sender; none is applied. A data-port connection
# with a wrong proof of the secret is closed, logged with its address.
if selected "peer messages bound to their rank"; then
	start_lone_coordinator "$tmp/coord-spoof"
	SPARSECOMM_SOCKET="tcp://127.0.0.1:$port" SPARSECOMM_RANK=1 timeout 60 "$itest" \
		peer-spoof >"$tmp/out" 2>&1 </dev/null
	rc=$?
	kill "$coord" 2>/dev/null
	wait "$coord" 2>/dev/null
	ok=0
	[ "$rc" -eq 0 ] && grep -q 'peer-spoof: rank 1 passed' "$tmp/out" &&
		grep -q "peer message [0-9]* from a connection that has not joined ignored" "$tmp/coord.log" &&
		grep -q "peer message [0-9]* from rank 1 about rank 0 ignored" "$tmp/coord.log" &&
		grep -q "peer message [0-9]* from rank 1 for rank 0 ignored" "$tmp/coord.log" &&
		[ "$(grep -c "from rank 1 ignored: only the coordinator sends it" "$tmp/coord.log")" -eq 2 ] &&
		grep -q "closed a data-port connection from 127.0.0.1:[0-9]* claiming rank 1: its proof of the job secret is wrong" "$tmp/coord.log" &&
		! grep -q "node 0 is degraded\|log_level = debug" "$tmp/coord.log" && ok=1
	lone_verdict "peer messages bound to their rank" "$ok" "scenario exited with $rc"
fi

# A secret file that group or others may read stops the daemon at start, naming the file;
# without a secret, a daemon on an address other than loopback stops at start unless
# insecure = true, which it warns about.
if selected "auth secret file and insecure"; then
	make_secret "$tmp/secret644"
	chmod 644 "$tmp/secret644"
	mkdir -p "$tmp/auth-start"
	timeout 30 "$bin/sparsecommd" --rank 0 --world_size 1 --coordinator "127.0.0.1:$(free_port)" \
		--runtime_dir "$tmp/auth-start" --secret_file "$tmp/secret644" >"$tmp/out" 2>&1 </dev/null
	rc_mode=$?
	timeout 30 "$bin/sparsecommd" --rank 0 --world_size 1 --coordinator "127.0.0.1:$(free_port)" \
		--runtime_dir "$tmp/auth-start" --data_addr 0.0.0.0 >>"$tmp/out" 2>&1 </dev/null
	rc_open=$?
	timeout 60 "$launcher" -n 1 -v --insecure --timeout 30 --daemon-arg --data-addr \
		--daemon-arg 0.0.0.0 -- "$itest" sums-small >>"$tmp/out" 2>&1 </dev/null
	rc_insecure=$?
	ok=0
	[ "$rc_mode" -ne 0 ] && [ "$rc_mode" -ne 124 ] && [ "$rc_open" -ne 0 ] &&
		[ "$rc_open" -ne 124 ] && [ "$rc_insecure" -eq 0 ] &&
		grep -q "secret_file $tmp/secret644 has mode 0644" "$tmp/out" &&
		grep -q "no secret_file, and coordinator .* or data_addr '0.0.0.0' is not a loopback" "$tmp/out" &&
		grep -q "insecure = 1 and no secret_file" "$tmp/out" && ok=1
	lone_verdict "auth secret file and insecure" "$ok" \
		"0644 file: exit $rc_mode; 0.0.0.0 without a secret: exit $rc_open; insecure: exit $rc_insecure"
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
# A rank later than stall_timeout_ms: its late step fails too (never paired with the
# others' next step), and the steps after it are exact (world/late.c).
# The randomised run: 3 nodes, 600 steps, each step's collective drawn from a seed
# (allreduce dense or COO, broadcast, allgather, reduce-scatter, alltoall, a grouped
# allreduce) and one rank may (by a seeded choice) differ in an option or an argument,
# submit late, die and come back, or give bad input; every result must be exact or an
# error on every rank. The seed is fresh each run and printed with the counts (rerun one:
# sparsecomm-run -n 3 --daemon-arg --stall_timeout_ms --daemon-arg 1000 --
# sparsecomm-itest random --seed SEED; or the whole case: ITEST_SEED=SEED sh run.sh NAME).
rnd_seed=${ITEST_SEED:-$(date +%s)}
rnd() { # name nodes per-node steps rate seed [more arguments of the scenario]
	name=$1 nodes=$2 per=$3 steps=$4 rate=$5 seed=$6
	shift 6
	run_case "random $name ($steps steps, rate $rate, seed $seed)" "$nodes" "$per" 300 0 \
		$((nodes * per)) --daemon-arg --stall_timeout_ms --daemon-arg 1000 -- "$itest" \
		random --steps "$steps" --rate "$rate" --seed "$seed" "$@"
	selected "random $name" && grep -o 'random: [0-9]* steps (seed.*' "$tmp/out" | sed 's/^/      /'
}
rnd "n=3" 3 1 600 12 "$rnd_seed"
# the same with two trainers a node: a trainer late, dead or refused fails its node's step
rnd "n=2 per-node=2" 2 2 400 12 "$rnd_seed"
rnd "n=3 per-node=2" 3 2 400 12 "$rnd_seed"
# the same seeded plan with fast mode on (fast_path 1): every result exact or an error on
# every rank, whatever fast turns the steps between take
run_case "random fast n=3 (600 steps, rate 12, seed $rnd_seed)" 3 1 300 0 3 \
	--daemon-arg --stall_timeout_ms --daemon-arg 1000 --daemon-arg --fast_path \
	--daemon-arg 1 -- "$itest" random --steps 600 --rate 12 --seed "$rnd_seed"
# a trainer replaced after a reduce-scatter (step 68, rank 1): its node made rnd.g's scheme
# state anew and the others kept theirs, so every later COO allreduce of rnd.g failed
# with SC_ERR_MISMATCH (another step, another scheme); now only the first (step 74) does
rnd "state after a death n=3" 3 1 80 12 1795975241
# a trainer dies before an alltoall its node-mate had submitted (step 104, rank 3) while
# the other node, late, submits that step only after the node is whole again: the
# coordinator stalled it and charged the node a step it never submits, so node 0's step
# 122 paired with node 1's 123 (SC_OK with another step's values); now it fails at once
rnd "death before a late node's step n=2 per-node=2" 2 2 125 12 1796010956
# many events: one step in four or more has one
rnd "n=3 rate=30" 3 1 200 30 "$rnd_seed"
rnd "n=2 per-node=2 rate=30" 2 2 200 30 "$rnd_seed"
# the same with a response cache bound below the names in use (cache_max_entries 4):
# every plan evicts, and names come back announced in full; the outcomes stay the same
run_case "random cache bound n=3 (300 steps, rate 12, seed $rnd_seed)" 3 1 300 0 3 \
	--daemon-arg --stall_timeout_ms --daemon-arg 1000 --daemon-arg --cache_max_entries \
	--daemon-arg 4 -- "$itest" random --steps 300 --rate 12 --seed "$rnd_seed"
selected "random cache bound" && grep -o 'random: [0-9]* steps (seed.*' "$tmp/out" | sed 's/^/      /'

# can_destroy_sockets: whether ss -K ends a loopback connection here (root, iproute2's ss,
# a kernel with INET_DIAG_DESTROY).
can_destroy_sockets() {
	[ "$(id -u)" -eq 0 ] && command -v ss >/dev/null 2>&1 || return 1
	python3 - <<'PYEOF' 2>/dev/null
import socket, subprocess, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
port = s.getsockname()[1]
c = socket.create_connection(("127.0.0.1", port))
a, _ = s.accept()
subprocess.run(["ss", "-K", "dst", "127.0.0.1", "dport", "=", str(port)],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
a.settimeout(2)
try:
    a.recv(1)
except ConnectionResetError:
    sys.exit(0)
except OSError:
    pass
sys.exit(1)
PYEOF
}

# Connections reset under traffic (ss -K, both ends) while 8000 random steps run; the nodes
# connect their pipes again at each heartbeat (peer_timeout_ms / 4). "pipe reset": every
# node's peer pipe every 50 ms: a reset socket drops the bytes its kernel held, so each end
# keeps what it numbered until the other acknowledges it (PeerMsg.ack) and sends it again
# on the coordinator channel when the pipe closes (world/stream.c). "channel reset": every
# second the coordinator channel's connections, then half a second later the pipes: a node
# keeps its ZeroMQ routing id when it connects again, so the coordinator still knows it and
# what is sent again reaches the other end (before, the coordinator ignored the node's
# messages as from a connection that had not joined, and routed its own nowhere). "channel
# and pipe reset": the pipes every 50 ms, so that most messages go on the coordinator
# channel, and that channel's connections every 1.5 s: ZeroMQ drops what a reset
# connection held, and what is not acknowledged a heartbeat later goes again (before, a
# plan lost last in the stream left every rank waiting 60 s; stall_timeout_ms is above
# that heartbeat, 500 ms here, so the steps wait for it). No daemon may log a message that
# never came or a connection that had not joined, and every step is exact.
reset_case() { # NAME: "pipe reset", "channel reset" or "channel and pipe reset"
	rname="$1 n=3 (8000 steps, seed $rnd_seed)"
	selected "$1" || return 0
	if ! can_destroy_sockets; then
		skip_case "$rname" "needs root and ss -K (iproute2, a kernel with INET_DIAG_DESTROY)"
		return 0
	fi
	cport=$(free_port)
	pport=$(free_port)
	rm -rf "$tmp/reset-logs"
	(i=0; while :; do
		i=$((i + 1))
		case $1 in
		"pipe reset") sleep 0.05 ;;
		"channel reset")
			sleep 0.5
			ss -K "( sport = :$cport or dport = :$cport )" >/dev/null 2>&1
			sleep 0.5
			;;
		*)
			sleep 0.05
			[ $((i % 30)) -eq 0 ] &&
				ss -K "( sport = :$cport or dport = :$cport )" >/dev/null 2>&1
			;;
		esac
		ss -K "( sport = :$pport or dport = :$pport )" >/dev/null 2>&1
	done) &
	killer=$!
	failed_before=$failed
	run_case "$rname" 3 1 300 0 3 --port "$cport" --log-dir "$tmp/reset-logs" \
		--daemon-arg --peer_port --daemon-arg "$pport" --daemon-arg --peer_timeout_ms \
		--daemon-arg 2000 --daemon-arg --stall_timeout_ms --daemon-arg 3000 -- "$itest" \
		random --steps 8000 --rate 0 --seed "$rnd_seed"
	kill "$killer"
	wait "$killer" 2>/dev/null
	resets=$(cat "$tmp"/reset-logs/daemon*.log | grep -c "peer pipe .* closed")
	gaps=$(cat "$tmp"/reset-logs/daemon*.log | grep "never came\|has not joined" | head -n 3)
	echo "      $resets pipe closes in the daemons' logs"
	if [ "$failed" -eq "$failed_before" ] && { [ -n "$gaps" ] || [ "$resets" -lt 6 ]; }; then
		echo "FAIL  $rname: $resets pipe closes (6 at least), messages lost:"
		echo "$gaps" | sed 's/^/      | /'
		failed=$((failed + 1))
		passed=$((passed - 1))
	fi
}
reset_case "pipe reset"
reset_case "channel reset"
reset_case "channel and pipe reset"
# reset_rank1_data DAEMON0_LOG: resets (ss -K, both ends) the data-plane connections at rank
# 1's endpoint, the last the coordinator logged at its join (ranks 1 and 2's with 3 nodes).
reset_rank1_data() {
	dport=$(grep -h "rank 1 joined" "$1" 2>/dev/null | tail -n 1 |
		sed -n 's/.*:\([0-9]*\)$/\1/p')
	[ -n "$dport" ] && ss -K "( sport = :$dport or dport = :$dport )" >/dev/null 2>&1
}
# A data-plane connection reset (ss -K, both ends) between ranks 1 and 2 under 20000 random
# steps, once a second, 6 times (each time on the port rank 1's new endpoint has, which
# the coordinator logs at its join). The rank that finds it tells the coordinator, which
# re-forms the world with that one reason: every rank fails what was in flight at once
# with it (before, ranks 1 and 2 failed with their own texts and rank 0, waiting on
# rank 1, only after op_timeout_ms, 60 s here, with another; and every later step failed,
# the mesh out of step for good), and the steps after succeed on the new mesh.
# data_reset NAME NODES PER LIMIT_S RESETS PERIOD_S [more arguments of sparsecomm-run]: the
# case, with rank 1's data-plane connections reset RESETS times every PERIOD_S meanwhile
data_reset() {
	dname=$1 nodes=$2 per=$3 limit=$4 resets=$5 period=$6
	shift 6
	selected "$dname" || return 0
	if ! can_destroy_sockets; then
		skip_case "$dname" "needs root and ss -K (iproute2, a kernel with INET_DIAG_DESTROY)"
		return 0
	fi
	rm -rf "$tmp/data-logs"
	(for i in $(seq 1 "$resets"); do
		sleep "$period"
		reset_rank1_data "$tmp/data-logs/daemon0.log"
	done) &
	killer=$!
	failed_before=$failed
	run_case "$dname" "$nodes" "$per" "$limit" 0 $((nodes * per)) --log-dir "$tmp/data-logs" "$@"
	kill "$killer" 2>/dev/null
	wait "$killer" 2>/dev/null
	if [ "$failed" -ne "$failed_before" ]; then # what the daemons saw: the logs go with $tmp
		for f in "$tmp"/data-logs/daemon*.log; do
			echo "      -- $(basename "$f"), its last warnings and errors:"
			grep -E " (warn|error) " "$f" | tail -30 | sed 's/^/      | /'
		done
	fi
	grep -o 'random: [0-9]* steps \(failed by\|(seed\).*' "$tmp/out" | sed 's/^/      /'
	reforms=$(cat "$tmp"/data-logs/daemon0.log | grep -c "the data plane failed on node")
	echo "      $reforms re-forms after a data-plane failure"
	if [ "$failed" -eq "$failed_before" ] && [ "$reforms" -lt 2 ]; then
		echo "FAIL  $dname: $reforms re-forms (2 at least): the resets missed"
		failed=$((failed + 1))
		passed=$((passed - 1))
	fi
}
data_reset "data reset n=3 (20000 steps, seed $rnd_seed)" 3 1 120 6 1 --daemon-arg \
	--op_timeout_ms --daemon-arg 60000 -- "$itest" random --steps 20000 --rate 0 \
	--seed "$rnd_seed" --resets 1
# the same with deaths (two trainers a node), late steps, differing and bad input (rate
# 30), every half second: steps late past a re-form, nodes degraded as the world re-forms
data_reset "data reset events n=3 per-node=2 (600 steps, rate 30, seed $rnd_seed)" 3 2 120 \
	60 0.5 --daemon-arg --stall_timeout_ms --daemon-arg 1000 --daemon-arg --op_timeout_ms \
	--daemon-arg 60000 -- "$itest" random --steps 600 --rate 30 --seed "$rnd_seed" --resets 1
# fast reform: the same resets under fast turns (fast_path 1, itest_fast.c "reset"): the
# world re-forms while some nodes have submitted a turn and another has not; that node
# owes the step (its late submission is refused), so every step is exact or fails, and
# none pairs with another rank's next step
data_reset "fast reform n=3 (4000 steps)" 3 1 120 6 1 --daemon-arg --fast_path \
	--daemon-arg 1 --daemon-arg --op_timeout_ms --daemon-arg 60000 -- "$itest" fast reset 4000
data_reset "fast reform n=3 per-node=2 (3000 steps)" 3 2 120 6 1 --daemon-arg --fast_path \
	--daemon-arg 1 --daemon-arg --op_timeout_ms --daemon-arg 60000 -- "$itest" fast reset 3000
# with process set steps of every collective: {0, 2, ...} and {1, 2, ...} (with 2 x 2 and
# 3 x 2, sets that split nodes), the same names in both and in the global set; until the
# first death, and without deaths throughout
rnd "psets n=3" 3 1 400 12 "$rnd_seed" --psets 1
rnd "psets n=2 per-node=2" 2 2 400 12 "$rnd_seed" --psets 1
rnd "psets no deaths n=3 per-node=2 rate=30" 3 2 200 30 "$rnd_seed" --psets 1 --deaths 0
rnd "psets no deaths n=2 per-node=2 rate=40" 2 2 300 40 "$rnd_seed" --psets 1 --deaths 0
# A COO list in any order comes back in the same (sparse) form on every rank; entries over
# the COO area's capacity fail the step on every rank at once (coll/coo_in.h).
run_case "coo forms n=2" 2 1 120 0 2 -- "$itest" coo-forms
run_case "coo forms n=3" 3 1 120 0 3 -- "$itest" coo-forms
# every trainer of a node refused: each answers the failed step, the next step is exact
run_case "coo forms all over n=2 per-node=2" 2 2 120 0 4 -- "$itest" coo-forms all-over
run_case "late n=2" 2 1 120 0 2 --daemon-arg --stall_timeout_ms --daemon-arg 1500 -- "$itest" late
run_case "late n=3" 3 1 120 0 3 --daemon-arg --stall_timeout_ms --daemon-arg 1500 -- "$itest" late
run_case "late n=2 per-node=2" 2 2 120 0 4 --daemon-arg --stall_timeout_ms --daemon-arg 1500 -- "$itest" late
# A job ends with rank 0's node owing a late step; the next job on the same daemons starts
# afresh (the coordinator forgets the steps when the node's last trainer leaves cleanly).
run_case "late then a new job n=2" 2 1 120 0 2 --daemon-arg --stall_timeout_ms --daemon-arg 1500 -- sh -c "'$itest' late-exit leave && '$itest' late-exit again"
run_case "late then a new job n=2 per-node=2" 2 2 120 0 4 --daemon-arg --stall_timeout_ms --daemon-arg 1500 -- sh -c "'$itest' late-exit leave && '$itest' late-exit again"
run_case "late twice n=3" 3 1 120 0 3 --daemon-arg --stall_timeout_ms --daemon-arg 1500 -- "$itest" late 4000
# rank 0 late past two of its node's failed steps: it owes both on its node (the node's
# trainers count their owed steps, ctl.c), so its third step pairs with the others' third
run_case "late twice n=2 per-node=2" 2 2 120 0 4 --daemon-arg --stall_timeout_ms --daemon-arg 1500 -- "$itest" late 4000
# late reform: rank 0 late past a re-form (the connection between ranks 1 and 2 reset while
# they run steps of a set of their own, once rank 1 says so): the re-form kept what rank
# 0's node owes, so its late step fails, and its next pairs with the others' next (before,
# the re-form dropped it: SC_OK with the sum of two steps)
if selected "late reform"; then
	lname="late reform n=3"
	if ! can_destroy_sockets; then
		skip_case "$lname" "needs root and ss -K (iproute2, a kernel with INET_DIAG_DESTROY)"
	else
		rm -rf "$tmp/lr-logs" "$tmp/lr-mark"
		(for i in $(seq 1 600); do
			sleep 0.1
			[ -e "$tmp/lr-mark" ] || continue
			grep -q "the data plane failed" "$tmp"/lr-logs/daemon0.log && break
			reset_rank1_data "$tmp/lr-logs/daemon0.log"
		done) &
		killer=$!
		export LATE_REFORM_MARK="$tmp/lr-mark"
		run_case "$lname" 3 1 120 0 3 --log-dir "$tmp/lr-logs" --daemon-arg \
			--stall_timeout_ms --daemon-arg 1500 -- "$itest" late-reform
		unset LATE_REFORM_MARK
		kill "$killer" 2>/dev/null
		wait "$killer" 2>/dev/null
	fi
fi
run_case "late-release n=2 per-node=2" 2 2 120 0 4 --daemon-arg --stall_timeout_ms --daemon-arg 1500 -- "$itest" late-release 2500

# A peer daemon that leaves (SIGTERM), dies (SIGKILL) or stops (SIGSTOP), and a coordinator
# that dies, while the others' trainers wait on it: they fail at once or within
# peer_timeout_ms, naming it (liveness.sh).
. "$root/tests/integration/liveness.sh"

# A join that cannot complete and a barrier beside it fail at once on every rank, each
# naming why (rank 0 joined; the others entered a barrier, then left without joining);
# the next session's sums are exact (itest_sessions.c).
run_case "join left n=2" 2 1 60 0 2 -- "$itest" join-left
run_case "join left n=3" 3 1 60 0 3 -- "$itest" join-left
run_case "join left n=1 per-node=2" 1 2 60 0 2 -- "$itest" join-left
run_case "join timeout n=2" 2 1 60 0 2 -- "$itest" join-timeout

# A trainer that crashed ends its job, not the daemon's next one: on a daemon that stays
# (world of 1, two trainers per node), local rank 1 submits and kills itself; the next
# job's local rank 0 starts a second before its local rank 1, and both sum exactly.
if selected "crashed trainer, next job"; then
	nj=$tmp/nextjob
	mkdir -p "$nj"
	: >"$tmp/coord.log"
	"$bin/sparsecommd" --rank 0 --world_size 1 --local_size 2 \
		--coordinator "127.0.0.1:$(free_port)" --runtime_dir "$nj" >>"$tmp/coord.log" 2>&1 \
		</dev/null &
	njd=$!
	i=0
	while [ ! -S "$nj/ctl.sock" ] && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	nj_trainer() { # LOCAL_RANK SCENARIO
		SPARSECOMM_SOCKET="ipc://$nj/ctl.sock" SPARSECOMM_RANK=$1 SPARSECOMM_SIZE=2 \
			SPARSECOMM_LOCAL_RANK=$1 SPARSECOMM_LOCAL_SIZE=2 timeout 60 "$itest" "$2"
	}
	nj_trainer 1 crash >"$tmp/out" 2>&1 </dev/null
	rc_crash=$?
	i=0
	while ! grep -q "local rank 1, pid [0-9]*) exited" "$tmp/coord.log" && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	nj_trainer 0 sums-small >"$tmp/nj0.out" 2>&1 </dev/null &
	nj0=$!
	sleep 1
	nj_trainer 1 sums-small >"$tmp/nj1.out" 2>&1 </dev/null
	rc_nj1=$?
	wait "$nj0"
	rc_nj0=$?
	kill "$njd" 2>/dev/null
	wait "$njd" 2>/dev/null
	cat "$tmp/nj0.out" "$tmp/nj1.out" >>"$tmp/out"
	ok=0
	[ "$rc_crash" -eq 137 ] && [ "$rc_nj0" -eq 0 ] && [ "$rc_nj1" -eq 0 ] &&
		grep -q 'sums-small: rank 0 passed' "$tmp/nj0.out" &&
		grep -q 'sums-small: rank 1 passed' "$tmp/nj1.out" && ok=1
	lone_verdict "crashed trainer, next job" "$ok" \
		"the crash exited $rc_crash (want 137), the next job's trainers $rc_nj0 and $rc_nj1"
fi

# Two jobs, one after the other, on the same daemons (fresh clients, same tensor names).
run_case "two jobs n=3" 3 1 240 0 6 -- sh -c "'$itest' sums-small && '$itest' fusion"
run_case "two jobs n=2 per-node=2" 2 2 240 0 8 -- sh -c "'$itest' sums-small && '$itest' fusion"

# --kill-grace: a trainer that ignores SIGTERM is killed that long after it, when the
# job's --timeout stops it (the default, 5 s, would take the run past 7 s)
if selected "launcher kill grace"; then
	t0=$(date +%s)
	timeout -k 10 60 "$launcher" -n 1 --timeout 2 --kill-grace 1 -- \
		sh -c 'trap "" TERM; sleep 40' >"$tmp/out" 2>&1 </dev/null
	rc=$?
	dt=$(($(date +%s) - t0))
	ok=0
	[ "$rc" -eq 124 ] && [ "$dt" -le 6 ] && grep -q 'rank 0 .*killed by signal 9' "$tmp/out" &&
		ok=1
	lone_verdict "launcher kill grace" "$ok" \
		"exit $rc after $dt s (want 124 within 6 s, the trainer killed 1 s after its SIGTERM)"
fi

# The job secret the launcher writes for its daemons is gone once they are ready, and
# when the launcher is killed (SIGKILL) before that: here the daemons never become ready
# (a world of 3 for 2 nodes), the launcher is killed while it waits, and its janitor
# removes the secret; the daemons go too (their parent-death signal).
if selected "launcher secret removed"; then
	sdir=$tmp/secret-tmp
	rm -rf "$sdir"
	mkdir -p "$sdir"
	: >"$tmp/out"
	# not under timeout(1): $! must be the launcher (its --timeout bounds it)
	TMPDIR=$sdir "$launcher" -n 2 --timeout 60 --ready-timeout 50 \
		--daemon-arg --world_size --daemon-arg 3 -- true >"$tmp/out" 2>&1 </dev/null &
	lpid=$!
	i=0
	while ! ls "$sdir"/sparsecomm-run.*/secret >/dev/null 2>&1 && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	sleep 1
	had=$(ls "$sdir"/sparsecomm-run.*/secret 2>/dev/null | wc -l)
	kill -KILL "$lpid"
	wait "$lpid" 2>/dev/null
	i=0
	while ls "$sdir"/sparsecomm-run.*/secret >/dev/null 2>&1 && [ $i -lt 50 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	left=$(ls "$sdir"/sparsecomm-run.*/secret 2>/dev/null | wc -l)
	# and a job that runs: no secret left while its trainers run
	TMPDIR=$sdir timeout 60 "$launcher" -n 2 --timeout 60 -- \
		sh -c 'ls "$TMPDIR"/sparsecomm-run.*/secret 2>/dev/null | wc -l' >"$tmp/out2" 2>&1 </dev/null
	rc2=$?
	cat "$tmp/out2" >>"$tmp/out"
	ok=0
	[ "$had" -eq 1 ] && [ "$left" -eq 0 ] && [ "$rc2" -eq 0 ] &&
		[ "$(grep -c '^\[[01]\] 0$' "$tmp/out2")" -eq 2 ] && ok=1
	lone_verdict "launcher secret removed" "$ok" \
		"secret before the kill: $had, after: $left; running job: exit $rc2"
	rm -rf "$sdir"
fi

# A daemon that died without cleaning up (SIGKILL, the OOM killer) leaves its shared
# memory behind: the next daemon of the same user removes objects whose pid is gone, and
# lock files nobody holds. An object whose daemon this one cannot see (another PID
# namespace on the same /dev/shm: its pid is gone here) but whose lock file is held
# (util/shmreap.h) stays, and so does that lock file.
if selected "stale shm"; then
	sh -c 'exit 0' &
	dead=$!
	wait "$dead"
	sh -c 'exit 0' &
	hidden=$!
	wait "$hidden"
	stale=/dev/shm/sparsecomm.$dead.1
	stale_lock=/dev/shm/sparsecomm.$dead.lock
	live=/dev/shm/sparsecomm.$hidden.1
	live_lock=/dev/shm/sparsecomm.$hidden.lock
	if kill -0 "$dead" 2>/dev/null || kill -0 "$hidden" 2>/dev/null ||
		! command -v flock >/dev/null || ! : >"$stale" 2>/dev/null; then
		rm -f "$stale"
		skip_case "stale shm" "cannot set up a dead daemon's object in /dev/shm (or no flock)"
	else
		: >"$stale_lock"
		: >"$live"
		: >"$live_lock"
		flock -s "$live_lock" sleep 120 &
		holder=$!
		sleep 0.2
		timeout 60 "$launcher" -n 1 --timeout 30 -- true >"$tmp/out" 2>&1 </dev/null
		why=
		[ -e "$stale" ] && why="$stale (pid $dead is gone) was not removed"
		[ -e "$stale_lock" ] && why="$why; $stale_lock (held by nobody) was not removed"
		[ -e "$live" ] || why="$why; $live was removed while its daemon's lock is held"
		[ -e "$live_lock" ] || why="$why; $live_lock was removed while held"
		kill "$holder" 2>/dev/null
		wait "$holder" 2>/dev/null
		rm -f "$stale" "$stale_lock" "$live" "$live_lock"
		if [ -n "$why" ]; then
			echo "FAIL  stale shm: ${why#; }"
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
# ExDyna with its variants grid and cap (1.25 each), whose bound bench_json.py checks; the
# paper's Algorithm 5 alone (the default) runs away on these workloads (docs/schemes.md)
export SPARSECOMM_EXDYNA_CAP=1.25 SPARSECOMM_EXDYNA_GRID=1.25
bench_case "bench collective zipf n=3" agsparse,spardl,exdyna,auto --workload zipf --sparse-result \
	--rounds 2
bench_case "bench collective topk n=3" hier_central,balanced_par,spardl,exdyna --workload topk
# the KJV embedding gradient (bench/workload.h), 8 wide: 100K elements from the text
if command -v bible >/dev/null 2>&1; then
	bench_case "bench collective kjv n=3" agsparse,hier_central,balanced_par,omnireduce,dense_ring,auto \
		--workload kjv --dim 8
else
	skip_case "bench collective kjv n=3" "needs the KJV text (the bible command, Debian bible-kjv)"
fi
unset SPARSECOMM_EXDYNA_CAP SPARSECOMM_EXDYNA_GRID

# The allreduce benchmark's stages (bench/stages.h): every timed latency call matched on
# every rank from the daemons' timelines and the trainers' clocks, every stage a number,
# the negotiation's three parts (to coord, coord, plan back) among them.
stages_case() {
	name="bench allreduce stages n=3"
	selected "$name" || return 0
	rm -rf "$tmp/stages"
	t0=$(date +%s)
	# a prefix whose directories do not exist: the benchmark makes them, as mkdir -p
	# fast_path 0: every call planned, so the negotiation's parts are measured (a fast
	# turn has none)
	timeout -k 10 300 "$launcher" -n 3 --timeout 240 --daemon-arg --fast_path --daemon-arg 0 \
		-- "$bin/sparsecomm-bench" allreduce \
		--sizes 4K --iters 1 --lat-iters 50 --stages "$tmp/stages/run/s" >"$tmp/out" 2>&1 </dev/null
	rc=$?
	dt=$(($(date +%s) - t0))
	rows=$(grep -cE '^\[0\] # (submit|negotiation|  to coord|  coord|  plan back|hand-off|verdict|data|completion|round trip) +-?[0-9]+\.[0-9] +-?[0-9]+\.[0-9]$' "$tmp/out")
	matched=$(sed -n 's/.*(us; \([0-9]*\) calls matched on 3 ranks[):].*/\1/p' "$tmp/out")
	planned=$(grep -c 'calls matched on 3 ranks: 50 planned, 0 fast turns' "$tmp/out")
	if [ "$rc" -eq 0 ] && [ "$rows" -eq 10 ] && [ "${matched:-0}" -eq 50 ] &&
		[ "$planned" -eq 1 ]; then
		echo "ok    $name (${dt} s)"
		passed=$((passed + 1))
	else
		echo "FAIL  $name: exited with $rc, $rows of 10 stages, ${matched:-no} of 50 calls matched, planned line $planned (${dt} s)"
		tail -n "$tail_lines" "$tmp/out" | sed 's/^/      | /'
		failed=$((failed + 1))
	fi
}
stages_case

# The allreduce benchmark against Open MPI (bench/mpi/run-peer.sh, on loopback here): the
# table's 4 KiB row has MPI's time and the ratio, and MPI_Allreduce runs the same latency
# loop, its median and p99 set against ours.
if selected "bench allreduce peer-mpi n=2"; then
	name="bench allreduce peer-mpi n=2"
	why=""
	if ! command -v mpirun >/dev/null 2>&1; then
		skip_case "$name" "needs mpirun (openmpi-bin)"
	else
		timeout -k 10 200 "$launcher" -n 2 --timeout 180 -- "$bin/sparsecomm-bench" \
			allreduce --sizes 4K --iters 2 --lat-iters 30 --peer-mpi >"$tmp/out" 2>&1 </dev/null ||
			why="exited with $?"
		grep -qE '^\[0\] +4096 +[0-9.]+ .* [0-9]+\.[0-9]{3} +[0-9]+\.[0-9]{3}$' "$tmp/out" ||
			why="$why; no 4 KiB row with MPI's time and the ratio"
		grep -qE "^\[0\] # MPI_Allreduce's 4 KiB round trip, the same loop: median [0-9.]+ us, p99 [0-9.]+ us; ours/mpi: median [0-9.]+, p99 [0-9.]+$" "$tmp/out" ||
			why="$why; no MPI latency loop line"
		why_verdict "$name" "$why"
	fi
fi

# sparsectl while a job runs.
run_case "fplan n=2" 2 1 180 0 2 -- "$itest" fplan
run_case "fplan n=3" 3 1 180 0 3 -- "$itest" fplan
# a buffer's tensors handed over 100 ms apart, over more than fusion_wait_ms in all: the
# aligned plan stays one buffer (itest_fplan.c, late_steps)
run_case "fplan late n=3" 3 1 120 0 3 --daemon-arg --fusion_mode --daemon-arg aligned \
	--daemon-arg --fusion_buffers --daemon-arg 1 --daemon-arg --fusion_wait_ms \
	--daemon-arg 500 -- "$itest" fplan --late
# a planned buffer's announcements go together: one ReadyList a step, every step exact,
# and steps that hand the last tensor over only after the others' results complete
# (itest_fplan.c, whole_steps)
run_case "fplan whole n=3" 3 1 120 0 3 --daemon-arg --fusion_mode --daemon-arg aligned \
	--daemon-arg --fusion_buffers --daemon-arg 1 --daemon-arg --fusion_wait_ms \
	--daemon-arg 500 -- "$itest" fplan --whole
run_case "exdyna model n=3" 3 1 180 0 3 -- "$itest" exdyna model
run_case "exdyna model fixed n=3" 3 1 180 0 3 --daemon-arg --fusion_mode --daemon-arg fixed -- "$itest" exdyna model
run_case "exdyna tensor n=3" 3 1 180 0 3 --daemon-arg --exdyna_scope --daemon-arg tensor -- "$itest" exdyna tensor
run_case "ctl n=1" 1 1 90 0 1 -- "$itest" ctl
run_case "ctl n=3" 3 1 120 0 3 -- "$itest" ctl
run_case "ctl n=2 per-node=2" 2 2 120 0 4 -- "$itest" ctl

# solo_daemon DIR: a daemon of one node with runtime directory DIR (its log DIR/d.log)
# on a free port, waited on until its control socket is there (10 s at most); its pid
# in solo_pid.
solo_daemon() {
	mkdir -p "$1"
	"$bin/sparsecommd" --runtime_dir "$1" --coordinator "127.0.0.1:$(free_port)" \
		>"$1/d.log" 2>&1 </dev/null &
	solo_pid=$!
	i=0
	while [ ! -S "$1/ctl.sock" ] && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
}

# A control socket left by a daemon killed with SIGKILL: sparsectl says that nothing
# listens there (connection refused), not that the daemon "did not answer the handshake",
# which reads as a hung daemon.
if selected "sparsectl stale socket"; then
	name="sparsectl stale socket"
	rt=$tmp/stale
	solo_daemon "$rt"
	kill -KILL $solo_pid
	wait $solo_pid 2>/dev/null
	timeout 20 "$bin/sparsectl" --socket "$rt/ctl.sock" --timeout-ms 1000 status \
		>"$rt/st.out" 2>&1
	rc_st=$?
	if [ $rc_st -eq 1 ] && grep -q "no daemon listens at $rt/ctl.sock (connection refused)" "$rt/st.out"; then
		echo "ok    $name"
		passed=$((passed + 1))
	else
		echo "FAIL  $name: sparsectl status exited $rc_st: $(cat "$rt/st.out")"
		failed=$((failed + 1))
	fi
fi

# SIGHUP (a closing terminal, or an operator who expects the file to be re-read) ends no
# job: the daemon logs that it ignored it and still answers sparsectl; SIGTERM then stops
# it with status 0 and removes its sockets. SIGHUP's default action used to kill it at
# once, leaving ctl.sock behind and its peers to find it lost later.
if selected "daemon SIGHUP n=1"; then
	name="daemon SIGHUP n=1"
	rt=$tmp/hup
	solo_daemon "$rt"
	hpid=$solo_pid
	kill -HUP $hpid
	sleep 0.5
	timeout 20 "$bin/sparsectl" --socket "$rt/ctl.sock" status >"$rt/st.out" 2>&1
	rc_st=$?
	kill -TERM $hpid 2>/dev/null
	wait $hpid
	rc_d=$?
	if [ $rc_st -eq 0 ] && [ $rc_d -eq 0 ] && [ ! -e "$rt/ctl.sock" ] &&
		grep -q "SIGHUP ignored: the configuration file is not re-read" "$rt/d.log"; then
		echo "ok    $name"
		passed=$((passed + 1))
	else
		echo "FAIL  $name: sparsectl status after SIGHUP exited $rc_st, the daemon $rc_d after SIGTERM"
		tail -n 10 "$rt/d.log" "$rt/st.out" | sed 's/^/      | /'
		failed=$((failed + 1))
	fi
fi

# A daemon that listens but is frozen (SIGSTOP, a host that hangs) and whose socket's
# queue of connections not yet accepted is full: sparsectl says after --timeout-ms that it
# did not answer the handshake. Its probes of the socket (permissions; whether a
# connection is refused) used to block in connect() for as long as the queue stayed full.
if selected "sparsectl frozen listener"; then
	name="sparsectl frozen listener"
	rt=$tmp/frozen
	mkdir -p "$rt"
	python3 -c '
import os, socket, sys, time
path = sys.argv[1]
l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
l.bind(path)
l.listen(0)
held = []
while True:  # the queue filled: no connection is accepted
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.setblocking(False)
    try:
        c.connect(path)
    except BlockingIOError:
        break
    held.append(c)
open(sys.argv[2], "w").close()
time.sleep(60)
' "$rt/ctl.sock" "$rt/full" &
	fpid=$!
	i=0
	while [ ! -e "$rt/full" ] && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	timeout 20 "$bin/sparsectl" --socket "$rt/ctl.sock" --timeout-ms 1000 status \
		>"$rt/st.out" 2>&1
	rc_st=$?
	kill $fpid 2>/dev/null
	wait $fpid 2>/dev/null
	if [ $rc_st -eq 1 ] && grep -q "did not answer the handshake within 1000 ms" "$rt/st.out"; then
		echo "ok    $name"
		passed=$((passed + 1))
	else
		echo "FAIL  $name: sparsectl status exited $rc_st (124: still blocked after 20 s): $(cat "$rt/st.out")"
		failed=$((failed + 1))
	fi
fi

# The timeline: sparsectl timeline start/stop around a few steps; every node's file is
# checked by tests/integration/timeline_check.py (valid JSON, nesting, every tensor).
mkdir -p "$tmp/timeline3" "$tmp/timeline22"
run_case "timeline n=3" 3 1 120 0 3 -- "$itest" timeline "$tmp/timeline3"
run_case "timeline n=2 per-node=2" 2 2 120 0 4 -- "$itest" timeline "$tmp/timeline22"

# Sparsification ahead at submission (itest_presel.c): one fused buffer, a pinned scheme;
# results and residuals bit-identical to the selection at the buffer, the first tensor
# selected before the last is submitted (its timeline), a failed step that leaves the
# residual as it was.
mkdir -p "$tmp/presel"
run_case "presel n=2 per-node=2" 2 2 180 0 4 --daemon-arg --fusion_mode --daemon-arg aligned \
	--daemon-arg --fusion_buffers --daemon-arg 1 --daemon-arg --fusion_wait_ms \
	--daemon-arg 5000 --daemon-arg --scheme --daemon-arg agsparse -- "$itest" presel "$tmp/presel"

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
	for c in "cuda sums n=2 per-node=2" "cuda sums n=3" "cuda killed n=2" \
		"cuda alltoall n=2 per-node=2" "cuda gpus alltoall n=2 per-node=2" \
		"cuda adasum n=2 per-node=2" "cuda gpus adasum n=2 per-node=2" \
		"cuda gpus sums n=1 per-node=2" "cuda gpus sums n=2 per-node=2" \
		"cuda gpus killed n=1 per-node=2" "cuda gpus engine 1 n=1 per-node=2" \
		"cuda gpus visible n=2 per-node=2" "cuda gpu lost n=1 per-node=2" \
		"cuda gpus engine 2 refused n=1 per-node=2" "cuda presel n=2 per-node=2" \
		"cuda gpus presel n=2 per-node=2"; do
		skip_case "$c" "$cudalib is not built (the daemons' host GPU library)"
	done
else
	export SPARSECOMM_CUDA_LIB="$cudalib"
	# GPU buffers over tcp, staged through host memory: no node can load NCCL (auto)
	export SPARSECOMM_NCCL_LIB="$tmp/none/libnccl.so.2"
	run_case "cuda sums n=2 per-node=2" 2 2 120 0 4 -- "$itest" cuda-sums "$tmp/cuda-sums.log" tcp
	run_case "cuda sums n=3" 3 1 120 0 3 -- "$itest" cuda-sums "$tmp/cuda-sums3.log" tcp
	run_case "cuda schemes n=3" 3 1 180 0 3 -- "$itest" cuda-schemes "$tmp/cuda-schemes.log" tcp
	# selection at submission of cuda tensors, on the GPU device (itest_presel.c, as
	# 'presel n=2 per-node=2' above)
	mkdir -p "$tmp/cuda-presel" "$tmp/cuda-gpus-presel"
	run_case "cuda presel n=2 per-node=2" 2 2 180 0 4 --daemon-arg --fusion_mode \
		--daemon-arg aligned --daemon-arg --fusion_buffers --daemon-arg 1 \
		--daemon-arg --fusion_wait_ms --daemon-arg 5000 --daemon-arg --scheme \
		--daemon-arg agsparse -- "$itest" presel "$tmp/cuda-presel" cuda \
		"$tmp/cuda-presel.log"
	run_case "cuda alltoall n=2 per-node=2" 2 2 120 0 4 -- "$itest" alltoall cuda \
		"$tmp/cuda-a2a.log"
	run_case "cuda adasum n=2 per-node=2" 2 2 120 0 4 -- "$itest" adasum cuda \
		"$tmp/cuda-adasum.log"
	run_case "cuda killed n=2" 2 1 120 137 1 --keep-going -- "$itest" cuda-killed \
		"$tmp/cuda-killed.log"
	# Several GPUs per node, emulated by the host build and the driver stand-in: local
	# rank r's cuda tensors on cuda:r, summed on cuda:0 (a kernel reading cuda:1's memory
	# fails the operation), the results copied back; a trainer on cuda:1 killed
	export SCG_HOST_DEVICES=2
	run_case "cuda gpus sums n=1 per-node=2" 1 2 120 0 2 -- "$itest" cuda-sums \
		"$tmp/cuda-gpus-sums.log" tcp
	run_case "cuda gpus sums n=2 per-node=2" 2 2 120 0 4 -- "$itest" cuda-sums \
		"$tmp/cuda-gpus-sums2.log" tcp
	# local rank 1's tensors copied from cuda:1 to the engine GPU for their selection at
	# submission
	run_case "cuda gpus presel n=2 per-node=2" 2 2 180 0 4 --daemon-arg --fusion_mode \
		--daemon-arg aligned --daemon-arg --fusion_buffers --daemon-arg 1 \
		--daemon-arg --fusion_wait_ms --daemon-arg 5000 --daemon-arg --scheme \
		--daemon-arg agsparse -- "$itest" presel "$tmp/cuda-gpus-presel" cuda \
		"$tmp/cuda-gpus-presel.log"
	run_case "cuda gpus alltoall n=2 per-node=2" 2 2 120 0 4 -- "$itest" alltoall cuda \
		"$tmp/cuda-gpus-a2a.log"
	run_case "cuda gpus adasum n=2 per-node=2" 2 2 120 0 4 -- "$itest" adasum cuda \
		"$tmp/cuda-gpus-adasum.log"
	run_case "cuda gpus killed n=1 per-node=2" 1 2 120 137 1 --keep-going -- "$itest" \
		cuda-killed "$tmp/cuda-gpus-killed.log"
	# one GPU visible per trainer: each trainer's cuda:0 is the node's GPU of its local
	# rank, which the daemon finds by UUID; a GPU the daemon lacks refused naming its UUID
	run_case "cuda gpus visible n=2 per-node=2" 2 2 120 0 4 -- "$itest" cuda-visible \
		"$tmp/cuda-gpus-visible.log"
	# a sticky GPU fault at the daemon's first sync: GPU work fails at once naming it,
	# cpu tensors are served, status and metrics say the GPU is lost
	if selected "cuda gpu lost n=1 per-node=2"; then
		lost_m=127.0.0.1:$(free_port)
		export SCG_HOST_FAULT=1
		run_case "cuda gpu lost n=1 per-node=2" 1 2 120 0 2 \
			--daemon-arg --metrics_addr --daemon-arg "$lost_m" -- "$itest" cuda-lost \
			"$tmp/cuda-gpu-lost.log" "$lost_m"
		unset SCG_HOST_FAULT
	fi
	# the engine on cuda:1: local rank 0's tensors copied over and back, and its top-k
	# residual on cuda:0 refused
	export SPARSECOMM_CUDA_DEVICE=1
	run_case "cuda gpus engine 1 n=1 per-node=2" 1 2 120 0 2 -- "$itest" cuda-sums \
		"$tmp/cuda-gpus-engine1.log" tcp 1
	# an engine GPU the node lacks: cuda tensors refused with the reason, cpu ones served
	export SPARSECOMM_CUDA_DEVICE=2
	run_case "cuda gpus engine 2 refused n=1 per-node=2" 1 2 60 0 2 -- "$itest" \
		cuda-refused "$cudahost" "the engine GPU cuda:2 (cuda_device): scg_init: no device 2"
	unset SPARSECOMM_CUDA_DEVICE
	unset SCG_HOST_DEVICES
	# GPU buffers over the nccl transport, NCCL stood in by build/lib/libnccl-host.so
	# (tests/ncclhost/): the same sums, stats naming nccl; a world where only rank 0
	# loads NCCL settles on tcp; a trainer killed mid-job
	ncclhost=$root/build/lib/libnccl-host.so
	if [ ! -e "$ncclhost" ]; then
		for c in "cuda nccl sums n=2 per-node=2" "cuda nccl sums n=3" "cuda nccl psets n=3" \
			"cuda gpus nccl sums n=2 per-node=2" \
			"cuda nccl disagree n=2" "cuda nccl killed n=2" "cuda nccl schemes n=2" \
			"cuda nccl schemes n=3" "cuda nccl schemes n=4"; do
			skip_case "$c" "$ncclhost is not built (needs the CUDA toolkit's nccl.h)"
		done
	else
		export SPARSECOMM_NCCL_LIB="$ncclhost"
		run_case "cuda nccl sums n=2 per-node=2" 2 2 120 0 4 -- "$itest" cuda-sums \
			"$tmp/cuda-nccl-sums.log" nccl
		run_case "cuda nccl sums n=3" 3 1 120 0 3 -- "$itest" cuda-sums \
			"$tmp/cuda-nccl-sums3.log" nccl
		# process sets {0,2} and {1,2}: each set's GPU buffers over its own communicator
		run_case "cuda nccl psets n=3" 3 1 120 0 3 --daemon-arg --transport \
			--daemon-arg nccl -- "$itest" cuda-psets "$tmp/cuda-nccl-psets.log" nccl
		export SCG_HOST_DEVICES=2
		run_case "cuda gpus nccl sums n=2 per-node=2" 2 2 120 0 4 -- "$itest" cuda-sums \
			"$tmp/cuda-gpus-nccl-sums.log" nccl
		unset SCG_HOST_DEVICES
		for P in 2 3 4; do
			run_case "cuda nccl schemes n=$P" "$P" 1 180 0 "$P" -- "$itest" cuda-schemes \
				"$tmp/cuda-nccl-schemes$P.log" nccl
		done
		run_case "cuda nccl killed n=2" 2 1 120 137 1 --keep-going -- "$itest" \
			cuda-killed "$tmp/cuda-nccl-killed.log"
		# one GPU for every node: the stand-in then refuses two ranks of one host, as NCCL
		# does (NCCL_HOST_SAME_GPU, tests/ncclhost/setup.c); --nccl-hostid makes each
		# node a host of its own, without namespaces
		export NCCL_HOST_SAME_GPU=1
		run_case "cuda nccl one GPU nccl-hostid n=3" 3 1 120 0 3 --nccl-hostid -- \
			"$itest" cuda-sums "$tmp/cuda-nccl-hostid.log" nccl
		if selected "cuda nccl one GPU refused n=2"; then
			timeout 150 "$launcher" -n 2 --timeout 90 -v -- "$itest" cuda-sums \
				"$tmp/cuda-nccl-dup.log" nccl >"$tmp/out" 2>&1 </dev/null
			rc=$?
			if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] &&
				grep -q 'Duplicate GPU detected: rank 0 and rank 1' "$tmp/out"; then
				echo "ok    cuda nccl one GPU refused n=2"
				passed=$((passed + 1))
			else
				echo "FAIL  cuda nccl one GPU refused n=2: launcher exited with $rc," \
					"or no error saying 'Duplicate GPU detected'"
				tail -n "$tail_lines" "$tmp/out" | sed 's/^/      | /'
				failed=$((failed + 1))
			fi
		fi
		unset NCCL_HOST_SAME_GPU
		export NCCL_RANK0_LIB="$ncclhost" SPARSECOMM_REAL_DAEMON="$root/build/bin/sparsecommd"
		run_case "cuda nccl disagree n=2" 2 1 120 0 2 \
			--daemon "$root/tests/integration/daemon_nccl_rank0.sh" -- "$itest" cuda-sums \
			"$tmp/cuda-nccl-disagree.log" tcp
		unset NCCL_RANK0_LIB SPARSECOMM_REAL_DAEMON
	fi
	unset SPARSECOMM_CUDA_LIB SPARSECOMM_NCCL_LIB
	# the killed cases' logs (CASE:LOG): the daemons unlinked every handle's object
	for c in "cuda killed n=2:cuda-killed" "cuda gpus killed n=1 per-node=2:cuda-gpus-killed"; do
		cname=${c%%:*}
		selected "$cname" || continue
		left=""
		for name in $(cat "$tmp/${c#*:}".log.* 2>/dev/null |
			awk '$2 == "mem_open" || $2 == "event_open" { print $3 }'); do
			[ -e "/dev/shm$name" ] && left="$left $name"
		done
		if [ -z "$left" ]; then
			echo "ok    $cname: handle objects unlinked"
			passed=$((passed + 1))
		else
			echo "FAIL  $cname: objects of the trainers' handles left:$left"
			failed=$((failed + 1))
		fi
	done
fi

# Nodes in separate network namespaces over a shaped bridge (needs root).
if [ "$(id -u)" -ne 0 ]; then
	skip_case "netns sums n=3" "needs root to create network namespaces"
	skip_case "netns psets wire n=4" "needs root to create network namespaces"
elif ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
	skip_case "netns sums n=3" "needs ip and tc (iproute2)"
	skip_case "netns psets wire n=4" "needs ip and tc (iproute2)"
elif ! ip netns add sc-itest-probe.$$ 2>/dev/null; then
	skip_case "netns sums n=3" "cannot create network namespaces here"
	skip_case "netns psets wire n=4" "cannot create network namespaces here"
else
	ip netns delete sc-itest-probe.$$ 2>/dev/null
	run_case "netns sums n=3" 3 1 240 0 3 --netns --rate 1gbit -- "$itest" sums
	run_case "netns killed n=2" 2 1 120 137 1 --netns --keep-going -- "$itest" killed
	run_case "netns psets wire n=4" 4 1 240 0 4 --netns --rate 1gbit -- "$itest" psets --wire
fi

# Host lists naming this machine run without an agent (a bogus one proves it is unused);
# a malformed host list or file is a usage error naming the item or the line.
printf '# this machine\n\nlocalhost slots=2   # two trainers\n' >"$tmp/hostfile"
run_case "hostfile localhost" 1 2 120 0 2 --hostfile "$tmp/hostfile" --rsh-agent /nonexistent \
	-- "$itest" sums-small
if selected "host lists refused"; then
	printf 'a slots=2\nb slots=x\n' >"$tmp/hostfile-bad"
	bad=0
	# shellcheck disable=SC2089
	for spec in "-H a:2,b:3|b has 3 slot(s) but a has 2" "-H a:0|'a:0': slots must be 1 to 64" \
		"-H -oProxy=x|'-oProxy=x' is not a host name" "-H a,a|host 'a' is listed twice" \
		"--hostfile $tmp/hostfile-bad|hostfile-bad:2: expected 'HOST slots=N'" \
		"-n 3 -H a,b|-n 3 but 2 host(s) given"; do
		# the options split on blanks; the expected text keeps its quotes
		# shellcheck disable=SC2086,SC2090
		timeout 20 "$launcher" ${spec%%|*} -- true >"$tmp/out" 2>&1 </dev/null
		rc=$?
		if [ "$rc" -ne 2 ] || ! grep -qF -- "${spec#*|}" "$tmp/out"; then
			echo "FAIL  host lists refused: '${spec%%|*}' exited $rc without '${spec#*|}'"
			sed 's/^/      | /' "$tmp/out"
			bad=1
		fi
	done
	if [ "$bad" -eq 0 ]; then
		echo "ok    host lists refused"
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
	fi
fi

# horovodrun's command lines: -np P with -H localhost:P and the command without '--' runs
# P trainers; its tuning flags (and HOROVOD_* variables the daemons read) set the daemons'
# settings of the same meaning, read back through sparsectl; its flags with no equivalent
# are usage errors naming the flag.
if selected "horovodrun command line"; then
	timeout 150 "$launcher" -np 2 -H localhost:2 --timeout 100 --start-timeout 30 \
		--disable-cache "$itest" sums-small >"$tmp/out" 2>&1 </dev/null
	rc=$?
	got=$(grep -o 'itest [a-z-]*: rank [0-9]* passed' "$tmp/out" | sort -u | wc -l)
	why=""
	[ "$rc" -eq 0 ] && [ "$got" -eq 2 ] || why="exit $rc, $got of 2 'passed' lines"
	# -np P alone is horovodrun's localhost:P: one node of P trainers, local ranks 0 to
	# P-1; with -n P, P nodes of one
	for spec in "-np 3|0 3 1 0,1 3 1 0,2 3 1 0" "-n 3 -np 3|0 1 3 0,0 1 3 1,0 1 3 2"; do
		# shellcheck disable=SC2016,SC2086
		timeout 60 "$launcher" ${spec%%|*} sh -c 'echo "ranks: $HOROVOD_LOCAL_RANK \
$HOROVOD_LOCAL_SIZE $HOROVOD_CROSS_SIZE $HOROVOD_CROSS_RANK"' >"$tmp/out2" 2>&1 </dev/null
		got=$(sed -n 's/.*ranks: //p' "$tmp/out2" | sort | paste -sd, -)
		[ "$got" = "${spec#*|}" ] ||
			why="$why; '${spec%%|*}' gave local rank, local size, cross size, cross \
rank '$got', not '${spec#*|}'"
	done
	why_verdict "horovodrun command line" "$why"
fi
if selected "horovodrun flags"; then
	why=""
	HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=45 HOROVOD_LOG_LEVEL=error timeout 60 "$launcher" \
		-n 2 --num-proc=2 --cache-capacity 1024 --fusion-threshold-mb 2 --cycle-time-ms 2.6 --log-level WARNING \
		--timeline-filename "$tmp/tl-%r.json" sh -c \
		'"$1" --socket "$SPARSECOMM_SOCKET" config get' sh "$bin/sparsectl" \
		>"$tmp/out" 2>&1 </dev/null || why="launcher exited with $?"
	for want in "fusion_threshold_bytes = 2097152    (from flag" \
		"fusion_mode = fixed    (from flag" "cycle_time_ms = 3    (from flag" \
		"log_level = warn    (from flag" "stall_timeout_ms = 45000    (from env" \
		"cache_max_entries = 1024    (from flag" "timeline_file = $tmp/tl-%r.json"; do
		n=$(grep -cF -- "$want" "$tmp/out")
		[ "$n" -eq 2 ] || why="$why; $n of 2 nodes say '$want'"
	done
	# a flag repeated (each --fusion-threshold-mb=N adds four daemon arguments) still
	# gives the daemons exactly the last value, with nothing written past their arguments
	many=""
	for _ in $(seq 1 200); do many="$many --fusion-threshold-mb=3"; done
	# shellcheck disable=SC2086
	timeout 60 "$launcher" -n 1 $many sh -c '"$1" --socket "$SPARSECOMM_SOCKET" config get' \
		sh "$bin/sparsectl" >"$tmp/out2" 2>&1 </dev/null || why="$why; 200 times \
--fusion-threshold-mb=3: launcher exited with $?: $(tail -n 1 "$tmp/out2")"
	grep -qF "fusion_threshold_bytes = 3145728    (from flag" "$tmp/out2" ||
		why="$why; 200 times --fusion-threshold-mb=3 did not set fusion_threshold_bytes"
	for spec in "--cache-capacity 1|--cache-capacity: 0 or at least 2 entries" \
		"--autotune|horovodrun's --autotune has no equivalent" \
		"--hierarchical-allreduce|horovodrun's --hierarchical-allreduce has no" \
		"-np 3 -H a:2,b:2|-np 3 with 2 host(s) of 2 slot(s)" \
		"-np 65|a node serves at most 64: give -n N too" \
		"--netns -np 4|--netns emulates a node per namespace: give -n N too" \
		"--log-level LOUD|--log-level is TRACE, DEBUG" \
		"--cycle-time-ms 5000|--cycle-time-ms needs milliseconds from 0 to 1000"; do
		# shellcheck disable=SC2086
		timeout 20 "$launcher" -np 2 ${spec%%|*} true >"$tmp/out2" 2>&1 </dev/null
		rc=$?
		[ "$rc" -eq 2 ] && grep -qF -- "${spec#*|}" "$tmp/out2" ||
			why="$why; '${spec%%|*}' exited $rc without '${spec#*|}'"
	done
	timeout 20 "$launcher" -n 1 --per-node 65 true >"$tmp/out2" 2>&1 </dev/null
	rc=$?
	[ "$rc" -eq 2 ] && grep -qF -- "65 trainers per node: a node serves at most 64" "$tmp/out2" ||
		why="$why; '-n 1 --per-node 65' exited $rc: $(tail -n 1 "$tmp/out2")"
	# HOROVOD_AUTOTUNE=1 is refused as --autotune is, naming the variable (0 is "off")
	HOROVOD_AUTOTUNE=1 timeout 20 "$launcher" -np 2 true >"$tmp/out2" 2>&1 </dev/null
	rc=$?
	[ "$rc" -eq 2 ] && grep -qF "HOROVOD_AUTOTUNE=1 asks for Horovod's autotuner" "$tmp/out2" ||
		why="$why; HOROVOD_AUTOTUNE=1 exited $rc: $(tail -n 1 "$tmp/out2")"
	HOROVOD_AUTOTUNE=0 timeout 60 "$launcher" -np 1 true >"$tmp/out2" 2>&1 </dev/null ||
		why="$why; HOROVOD_AUTOTUNE=0 exited $?: $(tail -n 1 "$tmp/out2")"
	# --netns without root prints the same job on loopback: the command's own --rate and
	# --netns (after the options, with no '--') are kept
	as_user=""
	[ "$(id -u)" -eq 0 ] && as_user="setpriv --reuid=65534 --regid=65534 --clear-groups"
	if [ -z "$as_user" ] || command -v setpriv >/dev/null 2>&1; then
		# shellcheck disable=SC2086
		$as_user "$launcher" -n 2 --netns --rate 1gbit ./train --rate 5 --netns \
			>"$tmp/out2" 2>&1 </dev/null
		grep -qF -- "sparsecomm-run -n 2 ./train --rate 5 --netns" "$tmp/out2" ||
			why="$why; the loopback fallback is not '-n 2 ./train --rate 5 --netns': \
$(tail -n 1 "$tmp/out2")"
	fi
	why_verdict "horovodrun flags" "$why"
fi

# --pin-nodes: every trainer and daemon runs on its node's share of the launcher's CPUs,
# which SPARSECOMM_NODE_CPUS lists in node order (3 nodes: one CPU each on up to 2 CPUs, 0
# and 1 then 0 again), and the nodes' shares differ where there are CPUs enough; -H
# refuses it.
if selected "launcher pins nodes"; then
	why=""
	# shellcheck disable=SC2016
	timeout 60 "$launcher" -n 3 --per-node 2 --pin-nodes sh -c \
		'd=${SPARSECOMM_SOCKET#ipc://}; d=${d%/ctl.sock}
		dp=$(pgrep -f -- "--runtime-dir $d( |$)" | head -n 1)
		echo "node=$SPARSECOMM_NODE_RANK cpus=$SPARSECOMM_NODE_CPUS dmask=$(taskset -pc "$dp" | sed "s/.*: //") mask=$(taskset -pc $$ | sed "s/.*: //")"' \
		>"$tmp/out" 2>&1 </dev/null || why="launcher exited with $?"
	n=$(grep -c "node=[0-9]* cpus=" "$tmp/out")
	[ "$n" -eq 6 ] || why="$why; $n of 6 trainers reported"
	cpus=$(sed -n 's/.*node=0 cpus=\(.*\) dmask=.*/\1/p' "$tmp/out" | head -n 1)
	[ "$(echo "$cpus" | wc -w)" -eq 3 ] || why="$why; SPARSECOMM_NODE_CPUS '$cpus' is not 3 nodes'"
	while read -r line; do
		node=$(echo "$line" | sed -n 's/.*node=\([0-9]*\) .*/\1/p')
		mask=${line##*mask=}
		dmask=${line##*dmask=}
		dmask=${dmask%% *}
		want=$(echo "$cpus" | awk -v k=$((node + 1)) '{print $k}')
		[ "$mask" = "$want" ] || why="$why; a trainer of node $node runs on CPUs $mask, not $want"
		[ "$dmask" = "$want" ] || why="$why; the daemon of node $node runs on CPUs '$dmask', not $want"
	done <<EOT
$(grep "node=[0-9]* cpus=" "$tmp/out" | sed 's/^\[[0-9]*\] //')
EOT
	if [ "$(nproc)" -ge 2 ]; then
		[ "$(echo "$cpus" | awk '{print $1}')" != "$(echo "$cpus" | awk '{print $2}')" ] ||
			why="$why; nodes 0 and 1 share CPUs $cpus with $(nproc) CPUs here"
	fi
	timeout 20 "$launcher" --pin-nodes -H a:1,b:1 true >"$tmp/out2" 2>&1 </dev/null
	rc=$?
	[ "$rc" -eq 2 ] && grep -qF -- "--pin-nodes shares this machine's CPUs" "$tmp/out2" ||
		why="$why; --pin-nodes with -H exited $rc: $(tail -n 1 "$tmp/out2")"
	why_verdict "launcher pins nodes" "$why"
fi

# Several hosts through a remote-shell agent (needs root): two network namespaces joined
# by a veth pair are the hosts, tests/integration/netns_agent.sh the agent, so the
# launcher starts every daemon and trainer through the agent and sparsecomm-run --tether.
# A 2-host x 2-slot job sums right; SIGINT or SIGKILL to the launcher leaves no process
# in either namespace (nor the trainers' marker command anywhere).
hosts_cases="hosts 2x2 through an agent|hosts SIGINT leaves nothing|hosts SIGKILL leaves nothing"
hosts_skip() {
	saved_ifs=$IFS
	IFS='|'
	for c in $hosts_cases; do
		skip_case "$c" "$1"
	done
	IFS=$saved_ifs
}
if ! selected "hosts 2x2 through an agent" && ! selected "hosts SIGINT leaves nothing" &&
	! selected "hosts SIGKILL leaves nothing"; then
	:
elif [ "$(id -u)" -ne 0 ]; then
	hosts_skip "needs root to create network namespaces"
elif ! command -v ip >/dev/null 2>&1 || ! command -v pgrep >/dev/null 2>&1; then
	hosts_skip "needs ip (iproute2) and pgrep (procps)"
elif ! ip netns add "sch$$a" 2>/dev/null; then
	hosts_skip "cannot create network namespaces here"
else
	ha=sch$$a hb=sch$$b
	addr_a=10.252.$(($$ % 250)).1 addr_b=10.252.$(($$ % 250)).2
	if ip netns add "$hb" && ip link add "sch$$x" type veth peer name "sch$$y" &&
		ip link set "sch$$x" netns "$ha" && ip link set "sch$$y" netns "$hb" &&
		ip -n "$ha" addr add "$addr_a/24" dev "sch$$x" &&
		ip -n "$hb" addr add "$addr_b/24" dev "sch$$y" &&
		ip -n "$ha" link set "sch$$x" up && ip -n "$hb" link set "sch$$y" up &&
		ip -n "$ha" link set lo up && ip -n "$hb" link set lo up; then
		export SC_AGENT_HOSTS="$addr_a=$ha $addr_b=$hb"
		agent="--rsh-agent $root/tests/integration/netns_agent.sh"
		run_case "hosts 2x2 through an agent" 2 2 120 0 4 -H "$addr_a:2,$addr_b:2" $agent \
			-- "$itest" sums-small
		# SIGINT: the launcher stops everything and exits 130; SIGKILL: the agents lose
		# their launcher, and the tethers stop what they hold by themselves.
		for sig in INT KILL; do
			name="hosts SIG$sig leaves nothing"
			selected "$name" || continue
			want=130
			[ "$sig" = KILL ] && want=137
			marker=$((3000 + $$ % 1000))
			# a file of its own, empty before the launcher starts: the loop below must
			# not count the lines of an earlier case before the redirection truncates
			out=$tmp/out.$sig
			: >"$out"
			# shellcheck disable=SC2086
			"$launcher" -H "$addr_a:2,$addr_b:2" $agent --timeout 100 -- \
				sh -c "echo started; exec sleep $marker" >>"$out" 2>&1 </dev/null &
			lpid=$!
			i=0
			while [ "$(grep -c 'started' "$out")" -lt 4 ] && [ $i -lt 300 ]; do
				sleep 0.1
				i=$((i + 1))
			done
			up=$(grep -c 'started' "$out")
			kill -"$sig" "$lpid"
			wait "$lpid" 2>/dev/null
			rc=$?
			# bounded: the tethers' grace period (5 s) and a margin
			i=0
			while [ $i -lt 150 ]; do
				left=$( (ip netns pids "$ha"; ip netns pids "$hb") | tr '\n' ' ')
				stray=$(pgrep -f "sleep $marker" | tr '\n' ' ')
				[ -z "$left$stray" ] && break
				sleep 0.1
				i=$((i + 1))
			done
			if [ "$up" -eq 4 ] && [ "$rc" -eq "$want" ] && [ -z "$left" ] &&
				[ -z "$stray" ] && grep -q 'daemons up 2/2' "$out"; then
				echo "ok    $name"
				passed=$((passed + 1))
			else
				echo "FAIL  $name: $up of 4 trainers started, launcher exit $rc" \
					"(expected $want), processes left in the namespaces '$left'," \
					"'$stray' running sleep $marker"
				tail -n "$tail_lines" "$out" | sed 's/^/      | /'
				failed=$((failed + 1))
				# shellcheck disable=SC2086
				[ -n "$left$stray" ] && kill -9 $left $stray 2>/dev/null
			fi
		done
	else
		hosts_skip "cannot connect two network namespaces with a veth pair"
	fi
	ip netns delete "$ha" 2>/dev/null
	ip netns delete "$hb" 2>/dev/null
fi

[ "$skipped" -gt 0 ] && echo "($skipped skipped)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
