#!/bin/sh
# sched_startup.sh: how long a job takes to its first allreduce when mpirun starts it (the
# node's daemon started by the job's first trainer, docs/deployment.md "Under a
# scheduler") and when sparsecomm-run does (its daemons ready before the trainers start).
# Both run 2 nodes x 2 trainers on this machine (mpirun's two hosts are this machine, as
# in tests/integration/run_sched.sh), tests/integration/sched_trainer.py in `time` mode,
# RUNS times each, and print per run: the slowest trainer's time from its own process
# start, and from the command's start, to the end of its first allreduce.
#
#   sh bench/sched_startup.sh [RUNS]      (default 5)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-5}
py=${SPARSECOMM_PYTHON:-/usr/bin/python3}
trainer=$root/tests/integration/sched_trainer.py
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sc-schedbench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
root_opt=""
[ "$(id -u)" -eq 0 ] && root_opt="--allow-run-as-root"
unset_own="$(env | sed -n 's/^\(SPARSECOMM_[A-Za-z0-9_]*\)=.*/-u \1/p' | tr '\n' ' ')"

# summary LABEL T0: the slowest trainer's two times from the sched-time lines in $tmp/out
# (mpirun may run two trainers' lines together)
summary() {
	grep -o 'sched-time: rank [0-9]* first allreduce after [0-9.]* s, at [0-9.]*' "$tmp/out" \
		>"$tmp/times"
	awk -v label="$1" -v t0="$2" '
		/sched-time: rank/ { n++; s = $0; sub(/.*after /, "", s); s += 0; at = $NF + 0
			if (s > smax) smax = s; if (at - t0 > wmax) wmax = at - t0 }
		END { if (n != 4) { printf "%-16s %d of 4 trainers reported\n", label, n; exit 1 }
		      printf "%-16s process start %.3f s, command start %.3f s\n", label, smax, wmax }' \
		"$tmp/times"
}

echo "2 nodes x 2 trainers, first allreduce of 1000 float64 (slowest trainer), $runs runs"
for i in $(seq 1 "$runs"); do
	t0=$(date +%s.%N)
	# shellcheck disable=SC2086
	env $unset_own TMPDIR="$tmp" mpirun $root_opt -H localhost:2,127.0.0.2:2 -np 4 \
		--mca plm_rsh_agent "sh $root/tests/integration/mpirun_agent.sh" \
		-x MASTER_ADDR=127.0.0.1 "$py" "$trainer" time >"$tmp/out" 2>&1 </dev/null
	summary "mpirun" "$t0" || tail -n 20 "$tmp/out"
	t0=$(date +%s.%N)
	# shellcheck disable=SC2086
	env $unset_own "$root/build/bin/sparsecomm-run" -n 2 --per-node 2 --timeout 120 -- \
		"$py" "$trainer" time >"$tmp/out" 2>&1 </dev/null
	summary "sparsecomm-run" "$t0" || tail -n 20 "$tmp/out"
done
