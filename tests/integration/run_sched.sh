#!/bin/sh
# run_sched.sh: jobs started by the schedulers clusters use, with no sparsecomm-run and no
# SPARSECOMM_* variable but the job secret of a job on several hosts (docs/deployment.md,
# "Under a scheduler"): mpirun (one node; two hosts on loopback; two hosts that are
# network namespaces, one rank per slot), srun (a real one on one node where slurm-wlm is
# installed; its variables for two nodes), torchrun (its c10d rendezvous on loopback and
# on the namespaces, its static one on the namespaces), a trainer killed under mpirun, and
# a trainer started alone (a job of one). Each case runs
# tests/integration/sched_trainer.py (exact sums; its rank is the scheduler's) and passes
# only when every trainer passed, the job's daemons were there (rank 0 counts their
# sockets) and nothing is left afterwards: no daemon, no process in a namespace, no job
# directory. Ends with "N passed, N failed" (tests/run.sh adds it up).
#
#   sh tests/integration/run_sched.sh [SUBSTRING...]   only cases whose name contains one
set -u

root=$(cd "$(dirname "$0")/../.." && pwd)
trainer=$root/tests/integration/sched_trainer.py
agent="sh $root/tests/integration/mpirun_agent.sh"
py=${SPARSECOMM_PYTHON:-/usr/bin/python3}
tail_lines=${ITEST_TAIL_LINES:-30}
passed=0
failed=0
skipped=0

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sc-sched.XXXXXX") ||
	{ echo "run_sched.sh: cannot create a temporary directory" >&2; exit 1; }
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
jobs=$tmp/j # the trainers' TMPDIR: the job directories appear here, nowhere else
mkdir -p "$jobs"

# No SPARSECOMM_* variable reaches the jobs, whatever this shell has.
unset_own="$(env | sed -n 's/^\(SPARSECOMM_[A-Za-z0-9_]*\)=.*/-u \1/p' | tr '\n' ' ')"
# shellcheck disable=SC2086
clean() { env $unset_own TMPDIR="$jobs" OMP_NUM_THREADS=1 "$@"; }

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
skip() {
	selected "$1" || return 0
	echo "skip  $1: $2"
	skipped=$((skipped + 1))
}
root_opt=""
[ "$(id -u)" -eq 0 ] && root_opt="--allow-run-as-root"

# left_behind PATTERN: what of the job is still there after a bounded wait (10 s): job
# directories, processes whose command line names the jobs' directory or PATTERN.
left_behind() {
	i=0
	while [ $i -lt 100 ]; do
		dirs=$(find "$jobs" -mindepth 1 -maxdepth 1 -name 'sparsecomm-job-*' | tr '\n' ' ')
		procs=$(pgrep -f "$jobs/|$1" | tr '\n' ' ')
		[ -z "$dirs$procs" ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	echo "left: files '$dirs' processes '$procs'"
}

# verdict NAME RC EXPECT_RC PASSES DAEMONS [TEXT]: the case passes with exit status
# EXPECT_RC ('nonzero': any but 0 and 124), PASSES distinct "sched: rank R passed" lines,
# rank 0's "daemons DAEMONS" (- : not asked), TEXT in the output (when given), no FAIL
# line and nothing left behind.
verdict() {
	name=$1 rc=$2 expect=$3 want=$4 daemons=$5 text=${6:-}
	out=$tmp/out
	got=$(grep -o 'sched: rank [0-9]* passed' "$out" | sort -u | wc -l)
	why=""
	if [ "$rc" -eq 124 ]; then
		why="timed out"
	elif [ "$expect" = nonzero ] && [ "$rc" -eq 0 ]; then
		why="exited 0, expected a failure"
	elif [ "$expect" != nonzero ] && [ "$rc" -ne "$expect" ]; then
		why="exited $rc, expected $expect"
	elif grep -q 'FAIL (' "$out"; then
		why="a trainer reported FAIL"
	elif [ "${want#+}" != "$want" ] && [ "$got" -lt "${want#+}" ]; then
		why="$got 'passed' lines, expected at least ${want#+}"
	elif [ "${want#+}" = "$want" ] && [ "$got" -ne "$want" ]; then
		why="$got of $want 'passed' lines"
	elif [ "$daemons" != - ] && ! grep -Eq "sched: daemons $daemons([^0-9]|$)" "$out"; then
		why="rank 0 did not see $daemons daemon socket(s)"
	elif [ -n "$text" ] && ! grep -qF -- "$text" "$out"; then
		why="no '$text' in the output"
	fi
	left=$(left_behind "${7:-no-such-marker}")
	[ -z "$why" ] && [ -n "$left" ] && why=$left
	if [ -z "$why" ]; then
		echo "ok    $name"
		passed=$((passed + 1))
	else
		echo "FAIL  $name: $why"
		tail -n "$tail_lines" "$out" | sed 's/^/      | /'
		failed=$((failed + 1))
		pkill -9 -f "$jobs/" 2>/dev/null
		rm -rf "${jobs:?}"/*
	fi
}

# The Kubernetes example (no cluster runs here): yamllint (mk/deps.sh installs Debian's),
# then examples/kubernetes/check_manifests.py on each manifest, and on a JobSet whose
# master is not its first pod, which it must refuse. No Dockerfile linter is packaged by Debian
# (hadolint is not), so the Dockerfile is not linted.
name="kubernetes manifests lint"
if ! selected "$name"; then
	:
elif ! command -v yamllint >/dev/null 2>&1; then
	skip "$name" "yamllint is not installed (mk/deps.sh installs Debian's yamllint)"
else
	k8s=$root/examples/kubernetes
	if yamllint -s -c "$k8s/.yamllint" "$k8s"/*.yaml >"$tmp/out" 2>&1 &&
		"$py" "$k8s/check_manifests.py" "$k8s"/*.yaml >>"$tmp/out" 2>&1 &&
		sed 's/nodes-0-0/nodes-0-1/' "$k8s/jobset.yaml" >"$tmp/bad.yaml" &&
		! "$py" "$k8s/check_manifests.py" "$tmp/bad.yaml" >>"$tmp/out" 2>&1 &&
		grep -q 'master-addr is not the first pod' "$tmp/out"; then
		echo "ok    $name"
		passed=$((passed + 1))
	else
		echo "FAIL  $name"
		sed 's/^/      | /' "$tmp/out"
		failed=$((failed + 1))
	fi
fi

if ! command -v mpirun >/dev/null 2>&1; then
	echo "FAIL  mpirun: not found (mk/deps.sh installs openmpi-bin)"
	echo "$passed passed, $((failed + 1)) failed"
	exit 1
fi
if ! "$py" -c 'import numpy' 2>/dev/null; then
	echo "skip  mpirun, srun and torchrun cases: $py has no numpy (python3-numpy;" \
		"mk/deps.sh installs it)"
	echo "(1 skipped)"
	echo "$passed passed, $failed failed"
	exit "$([ "$failed" -eq 0 ] && echo 0 || echo 1)"
fi

# A daemon that serves this machine would be used instead of the job's own (as designed).
own_sock=${XDG_RUNTIME_DIR:+$XDG_RUNTIME_DIR/sparsecomm/ctl.sock}
for sock in /run/sparsecomm/ctl.sock "${own_sock:-/tmp/sparsecomm-$(id -u)/ctl.sock}"; do
	if [ -e "$sock" ]; then
		echo "skip  mpirun, srun and torchrun cases: a daemon serves this machine ($sock)," \
			"and the trainers would use it"
		echo "(1 skipped)"
		echo "$passed passed, $failed failed"
		exit "$([ "$failed" -eq 0 ] && echo 0 || echo 1)"
	fi
done

# mpirun -np 4 on this machine: one node, its daemon started by local rank 0.
name="mpirun -np 4 one node"
if selected "$name"; then
	clean timeout 120 mpirun $root_opt --oversubscribe -np 4 "$py" "$trainer" sums \
		>"$tmp/out" 2>&1 </dev/null
	verdict "$name" $? 0 4 1
fi

# python3 train.py with no launcher and no scheduler: a job of one trainer on a daemon of
# its own (docs/deployment.md, "Started alone"), which goes with it.
name="python started alone is a job of one"
if selected "$name"; then
	clean timeout 120 "$py" "$trainer" sums >"$tmp/out" 2>&1 </dev/null
	verdict "$name" $? 0 1 1
fi

# A node's daemon that cannot start (sparsecomm-run not found): the trainers fail at once
# saying so (mpirun may stop the second before it prints: one line at least), not after
# the 130 s wait. Nothing watches the node then: whatever a trainer killed by mpirun could
# not remove is removed here.
name="mpirun daemon that cannot start fails the trainers"
if selected "$name"; then
	t0=$(date +%s)
	clean SPARSECOMM_RUN=/nonexistent/sparsecomm-run timeout 120 mpirun $root_opt \
		--oversubscribe -np 2 "$py" "$trainer" sums >"$tmp/out" 2>&1 </dev/null
	rc=$?
	dt=$(($(date +%s) - t0))
	n=$(grep -c "did not start: cannot run sparsecomm-run" "$tmp/out")
	if [ "$n" -lt 1 ] || [ "$rc" -eq 0 ] || [ "$dt" -ge 60 ]; then
		echo "FAIL  $name: $n trainer(s) said why, exit $rc, after $dt s"
		tail -n "$tail_lines" "$tmp/out" | sed 's/^/      | /'
		failed=$((failed + 1))
	else
		echo "ok    $name"
		passed=$((passed + 1))
	fi
	rm -rf "${jobs:?}"/sparsecomm-job-*
fi

# SPARSECOMM_JOB_DAEMON=0: the library without scheduler support. No daemon serves this
# machine (checked above), so the trainers fail naming the default socket, and no job's
# daemon or job directory appears.
name="mpirun SPARSECOMM_JOB_DAEMON=0 starts no daemon"
if selected "$name"; then
	clean SPARSECOMM_JOB_DAEMON=0 SCHED_CONNECT_TIMEOUT=3 timeout 120 mpirun $root_opt \
		--oversubscribe -np 2 "$py" "$trainer" sums >"$tmp/out" 2>&1 </dev/null
	rc=$?
	if [ -n "$(ls -A "$jobs")" ]; then
		echo "FAIL  $name: a job directory appeared: $(ls -A "$jobs")"
		failed=$((failed + 1))
		rm -rf "${jobs:?}"/*
	else
		verdict "$name" $rc nonzero 0 - "cannot reach the daemon: no socket at"
	fi
fi

# SPARSECOMM_JOB_DAEMON=1 beside a daemon that serves the node: the job starts its own.
# As an unprivileged user (nobody), whose default socket is under $XDG_RUNTIME_DIR, where
# a decoy file where no daemon listens stands for the node's daemon; without the variable
# the trainers take the decoy and fail, saying no daemon listens there (the second half),
# with it they pass on the job's own.
name="mpirun SPARSECOMM_JOB_DAEMON=1 beside a node's daemon"
if ! selected "$name"; then
	:
elif [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null 2>&1; then
	skip "$name" "needs root and setpriv to run the job as another user"
else
	u=$tmp/nobody
	mkdir -p "$u/x/sparsecomm" "$u/t" && : >"$u/x/sparsecomm/ctl.sock" &&
		chmod 755 "$tmp" && chmod 700 "$u/x" && chown -R 65534:65534 "$u"
	as_nobody() {
		env $unset_own HOME="$u" XDG_RUNTIME_DIR="$u/x" TMPDIR="$u/t" OMP_NUM_THREADS=1 \
			SCHED_CONNECT_TIMEOUT=3 setpriv --reuid=65534 --regid=65534 --clear-groups env \
			"$@"
	}
	jobs_root=$jobs
	jobs=$u/t # what verdict waits to see gone: the job's directory and processes
	as_nobody SPARSECOMM_JOB_DAEMON=1 timeout 120 mpirun --oversubscribe -np 2 "$py" \
		"$trainer" sums >"$tmp/out" 2>&1 </dev/null
	verdict "$name" $? 0 2 1
	name="mpirun beside a node's daemon uses it"
	as_nobody timeout 120 mpirun --oversubscribe -np 2 "$py" "$trainer" sums \
		>"$tmp/out" 2>&1 </dev/null
	verdict "$name" $? nonzero 0 - "no daemon listens at $u/x/sparsecomm/ctl.sock"
	jobs=$jobs_root
	rm -rf "$u"
fi

# Two hosts of two slots that are both this machine (mpirun's agent runs "remote" orteds
# here): two nodes, two daemons, meeting on loopback without a secret.
h2="-H localhost:2,127.0.0.2:2 -np 4 --mca plm_rsh_agent"
name="mpirun 2x2 on loopback"
if selected "$name"; then
	# shellcheck disable=SC2086
	clean timeout 120 mpirun $root_opt $h2 "$agent" -x MASTER_ADDR=127.0.0.1 \
		"$py" "$trainer" sums >"$tmp/out" 2>&1 </dev/null
	verdict "$name" $? 0 4 2
fi

# The same with mpirun --map-by node: ranks round-robin over the two hosts, each node
# found from Open MPI's mapping, the trainers numbered node by node (sched_trainer.py
# checks each rank's number and local rank against Open MPI's).
name="mpirun 2x2 on loopback --map-by node"
if selected "$name"; then
	# shellcheck disable=SC2086
	clean timeout 120 mpirun $root_opt $h2 "$agent" --map-by node -x MASTER_ADDR=127.0.0.1 \
		"$py" "$trainer" sums >"$tmp/out" 2>&1 </dev/null
	verdict "$name" $? 0 4 2
fi

# A trainer killed (SIGKILL) after the first allreduces: the others' next one fails
# naming it, mpirun ends the job, the daemons go. mpirun kills the survivors as soon as it
# sees the death, so only some may live to report (each report must name the victim).
name="mpirun killed trainer names its rank"
if selected "$name"; then
	# shellcheck disable=SC2086
	clean timeout 120 mpirun $root_opt $h2 "$agent" -x MASTER_ADDR=127.0.0.1 \
		"$py" "$trainer" kill 1 >"$tmp/out" 2>&1 </dev/null
	verdict "$name" $? nonzero +1 - "trainer rank 1 (node 0, local rank 1"
fi
# The same under sparsecomm-run --keep-going, where every survivor lives to report: rank
# 0, beside the victim on node 0, submits a tensor the victim never registered; its wait
# must end at once naming the victim, not at its 60 s timeout.
name="killed trainer beside a new tensor (sparsecomm-run)"
if selected "$name"; then
	clean timeout 120 "$root/build/bin/sparsecomm-run" -n 2 --per-node 2 --keep-going -- \
		"$py" "$trainer" kill 1 >"$tmp/out" 2>&1 </dev/null
	verdict "$name" $? nonzero 3 - "trainer rank 1 (node 0, local rank 1"
fi

# srun -N 2 -n 4 --distribution=block, as srun sets the variables of each task; the
# tasks are started here, node 1 on 127.0.0.2 (the node list's first host, localhost, is
# the coordinator's).
name="srun variables 2x2"
if selected "$name"; then
	for r in 0 1 2 3; do
		clean timeout 120 env SLURM_JOB_ID=$$ SLURM_STEP_ID=0 SLURM_PROCID=$r \
			SLURM_LOCALID=$((r % 2)) SLURM_NODEID=$((r / 2)) SLURM_NNODES=2 \
			SLURM_NTASKS=4 SLURM_STEP_TASKS_PER_NODE='2(x2)' \
			SLURM_STEP_NODELIST='localhost,127.0.0.2' SLURM_JOB_NODELIST='localhost,127.0.0.2' \
			"$py" "$trainer" sums >"$tmp/srun.$r" 2>&1 </dev/null &
		pids="${pids:-} $!"
	done
	rc=0
	for p in $pids; do wait "$p" || rc=$?; done
	pids=""
	cat "$tmp"/srun.* >"$tmp/out"
	verdict "$name" $rc 0 4 2
fi
# A real srun, on one node: Slurm's controller and node daemon started here for the test
# (root, Debian's slurm-wlm and munge), on ports of their own, unless a controller answers.
name="srun one node"
slurm_pids=""
slurm_start() {
	sd=$tmp/slurm
	mkdir -p "$sd/state" "$sd/spool"
	h=$(hostname)
	cpus=$(nproc)
	cat >"$sd/slurm.conf" <<-EOF
		ClusterName=sctest$$
		SlurmctldHost=$h
		SlurmctldPort=$((36000 + $$ % 1000 * 2))
		SlurmdPort=$((36001 + $$ % 1000 * 2))
		AuthType=auth/munge
		StateSaveLocation=$sd/state
		SlurmdSpoolDir=$sd/spool
		SlurmctldPidFile=$sd/ctld.pid
		SlurmdPidFile=$sd/d.pid
		SlurmctldLogFile=$sd/ctld.log
		SlurmdLogFile=$sd/d.log
		ProctrackType=proctrack/linuxproc
		TaskPlugin=task/none
		SelectType=select/cons_tres
		SelectTypeParameters=CR_CPU
		ReturnToService=2
		SlurmUser=root
		MpiDefault=none
		JobAcctGatherType=jobacct_gather/none
		NodeName=$h CPUs=$cpus State=UNKNOWN
		PartitionName=sctest Nodes=$h Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
	EOF
	export SLURM_CONF="$sd/slurm.conf"
	if [ ! -S /run/munge/munge.socket.2 ]; then
		mkdir -p /run/munge /var/log/munge /var/lib/munge &&
			chown munge:munge /run/munge /var/log/munge /var/lib/munge &&
			runuser -u munge -- /usr/sbin/munged || return 1
		slurm_pids="$(pgrep -n -x munged)"
	fi
	slurmctld -f "$SLURM_CONF" && slurmd -f "$SLURM_CONF" || return 1
	sleep 1
	slurm_pids="$slurm_pids $(cat "$sd/ctld.pid" "$sd/d.pid" 2>/dev/null)"
	i=0
	while [ $i -lt 100 ]; do
		[ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}
if ! selected "$name"; then
	:
elif ! command -v srun >/dev/null 2>&1; then
	skip "$name" "srun is not installed (Debian's slurm-wlm and munge)"
elif ! timeout 5 sinfo >/dev/null 2>&1 && { [ "$(id -u)" -ne 0 ] ||
	! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; }; then
	skip "$name" "no Slurm controller answers, and one cannot be started here (root, slurmctld, munged)"
elif ! timeout 5 sinfo >/dev/null 2>&1 && ! slurm_start; then
	echo "FAIL  $name: cannot start slurmctld and slurmd here"
	tail -n 5 "$tmp/slurm/ctld.log" "$tmp/slurm/d.log" 2>/dev/null | sed 's/^/      | /'
	failed=$((failed + 1))
else
	clean timeout 120 srun -N 1 -n 4 --overcommit "$py" "$trainer" sums >"$tmp/out" 2>&1 \
		</dev/null
	verdict "$name" $? 0 4 1
fi
# shellcheck disable=SC2086
[ -n "$slurm_pids" ] && kill $slurm_pids 2>/dev/null

# torchrun --nnodes 2 --nproc_per_node 2 with the c10d rendezvous, both nodes' agents
# here. torch 1.13 on Python 3.11 reads its default --redirects/--tee wrongly, hence
# -r 1 -t 1 (stdout teed).
name="torchrun 2x2 c10d"
if ! selected "$name"; then
	:
elif ! command -v torchrun >/dev/null 2>&1; then
	skip "$name" "torchrun is not installed (Debian's python3-torch)"
else
	port=$((29000 + $$ % 500))
	for n in 0 1; do
		clean timeout 180 torchrun --nnodes 2 --nproc_per_node 2 --rdzv_backend c10d \
			--rdzv_endpoint "127.0.0.1:$port" --rdzv_id "sc$$" -r 1 -t 1 \
			--log_dir "$tmp/tl$n" "$trainer" sums >"$tmp/torch.$n" 2>&1 </dev/null &
		pids="${pids:-} $!"
	done
	rc=0
	for p in $pids; do wait "$p" || rc=$?; done
	pids=""
	cat "$tmp"/torch.* >"$tmp/out"
	verdict "$name" $rc 0 4 2
fi

# Two hosts that are network namespaces joined by a veth pair, two slots each: mpirun runs
# on the first, its agent starts the second's orted there. A job on several hosts needs
# a secret (mpirun -x SPARSECOMM_SECRET_FILE); without one it is refused, saying so.
ns_cases="mpirun 2x2 namespaces|torchrun 2x2 namespaces|torchrun 2x2 c10d namespaces|mpirun namespaces without a secret refused"
ns_skip() {
	saved_ifs=$IFS
	IFS='|'
	for c in $ns_cases; do skip "$c" "$1"; done
	IFS=$saved_ifs
}
if ! selected "mpirun 2x2 namespaces" && ! selected "torchrun 2x2 namespaces" &&
	! selected "torchrun 2x2 c10d namespaces" && ! selected "mpirun namespaces without"; then
	:
elif [ "$(id -u)" -ne 0 ]; then
	ns_skip "needs root to create network namespaces"
elif ! command -v ip >/dev/null 2>&1 || ! ip netns add "scs$$a" 2>/dev/null; then
	ns_skip "cannot create network namespaces here"
else
	ha=scs$$a hb=scs$$b
	addr_a=10.253.$(($$ % 250)).1 addr_b=10.253.$(($$ % 250)).2
	if ip netns add "$hb" && ip link add "scs$$x" type veth peer name "scs$$y" &&
		ip link set "scs$$x" netns "$ha" && ip link set "scs$$y" netns "$hb" &&
		ip -n "$ha" addr add "$addr_a/24" dev "scs$$x" &&
		ip -n "$hb" addr add "$addr_b/24" dev "scs$$y" &&
		ip -n "$ha" link set "scs$$x" up && ip -n "$hb" link set "scs$$y" up &&
		ip -n "$ha" link set lo up && ip -n "$hb" link set lo up; then
		head -c 32 /dev/urandom >"$tmp/secret" && chmod 600 "$tmp/secret"
		hns="-H $addr_a:2,$addr_b:2 -np 4 --mca plm_rsh_agent"
		name="mpirun 2x2 namespaces"
		if selected "$name"; then
			# shellcheck disable=SC2086
			clean SC_AGENT_HOSTS="$addr_a=$ha $addr_b=$hb" timeout 120 \
				ip netns exec "$ha" mpirun $root_opt $hns "$agent" \
				-x MASTER_ADDR="$addr_a" -x SPARSECOMM_SECRET_FILE="$tmp/secret" \
				"$py" "$trainer" sums >"$tmp/out" 2>&1 </dev/null
			verdict "$name" $? 0 4 2
			left=$( (ip netns pids "$ha"; ip netns pids "$hb") | tr '\n' ' ')
			[ -n "$left" ] && echo "FAIL  $name: processes left in the namespaces: $left" &&
				failed=$((failed + 1)) && kill -9 $left
		fi
		# torchrun on the namespaces: its static rendezvous at the first host.
		name="torchrun 2x2 namespaces"
		if ! selected "$name"; then
			:
		elif ! command -v torchrun >/dev/null 2>&1; then
			skip "$name" "torchrun is not installed (Debian's python3-torch)"
		else
			for n in 0 1; do
				ns=$ha
				[ $n = 1 ] && ns=$hb
				clean SPARSECOMM_SECRET_FILE="$tmp/secret" timeout 180 ip netns exec "$ns" \
					torchrun --nnodes 2 --nproc_per_node 2 --node_rank $n \
					--master_addr "$addr_a" --master_port 29555 -r 1 -t 1 \
					--log_dir "$tmp/tn$n" "$trainer" sums >"$tmp/torchns.$n" 2>&1 \
					</dev/null &
				pids="${pids:-} $!"
			done
			rc=0
			for p in $pids; do wait "$p" || rc=$?; done
			pids=""
			cat "$tmp"/torchns.* >"$tmp/out"
			verdict "$name" $rc 0 4 2
		fi
		# torchrun's c10d rendezvous on the namespaces. It gives the workers MASTER_ADDR =
		# the first agent's host name, so each host gets a name of its own (a UTS
		# namespace per agent, as separate machines have) that both resolve through the
		# namespace's hosts file (ip netns exec mounts /etc/netns/NS/hosts on /etc/hosts).
		name="torchrun 2x2 c10d namespaces"
		if ! selected "$name"; then
			:
		elif ! command -v torchrun >/dev/null 2>&1; then
			skip "$name" "torchrun is not installed (Debian's python3-torch)"
		elif ! unshare --uts true 2>/dev/null; then
			skip "$name" "cannot create a UTS namespace (unshare --uts) for each host's name"
		else
			for ns in "$ha" "$hb"; do
				mkdir -p "/etc/netns/$ns" &&
					printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "$addr_a" "$ha" \
						"$addr_b" "$hb" >"/etc/netns/$ns/hosts"
			done
			for n in 0 1; do
				ns=$ha
				[ $n = 1 ] && ns=$hb
				clean SPARSECOMM_SECRET_FILE="$tmp/secret" timeout 180 ip netns exec "$ns" \
					unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" \
					torchrun --nnodes 2 --nproc_per_node 2 --rdzv_backend c10d \
					--rdzv_endpoint "$addr_a:29556" --rdzv_id "sc$$" -r 1 -t 1 \
					--log_dir "$tmp/tc$n" "$trainer" sums >"$tmp/torchc.$n" 2>&1 \
					</dev/null &
				pids="${pids:-} $!"
			done
			rc=0
			for p in $pids; do wait "$p" || rc=$?; done
			pids=""
			cat "$tmp"/torchc.* >"$tmp/out"
			verdict "$name" $rc 0 4 2 "sched: master $ha"
		fi
		name="mpirun namespaces without a secret refused"
		if selected "$name"; then
			# shellcheck disable=SC2086
			clean SC_AGENT_HOSTS="$addr_a=$ha $addr_b=$hb" timeout 120 \
				ip netns exec "$ha" mpirun $root_opt $hns "$agent" \
				-x MASTER_ADDR="$addr_a" "$py" "$trainer" sums >"$tmp/out" 2>&1 </dev/null
			verdict "$name" $? nonzero 0 - "set SPARSECOMM_SECRET_FILE"
		fi
	else
		ns_skip "cannot connect two network namespaces with a veth pair"
	fi
	ip netns delete "$ha" 2>/dev/null
	ip netns delete "$hb" 2>/dev/null
	rm -rf "/etc/netns/$ha" "/etc/netns/$hb"
fi

[ "$skipped" -gt 0 ] && echo "($skipped skipped)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
