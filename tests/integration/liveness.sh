# liveness.sh: sourced by run.sh (its selected, free_port, counters, $tmp, $bin and
# $itest). A daemon that goes away while the trainers of the others wait on it: three
# daemons started by hand (one trainer each, peer_timeout_ms 2000), one of them stopped
# once every other trainer waits in an allreduce it never joins (itest_live.c):
#
#   peer leave n=3        SIGTERM: the others fail within 5 s naming the node that left;
#                         `sparsectl status` on a survivor shows it left
#   peer kill n=3         SIGKILL: they fail naming it lost within peer_timeout_ms + 5 s
#   peer stop n=3         SIGSTOP: the same, and status shows it lost, last heard at least
#                         peer_timeout_ms ago; resumed, it is told it was given up and stops
#   coordinator kill n=3  SIGKILL of rank 0: the others fail naming the coordinator lost,
#                         and exit with status 3 twice peer_timeout_ms later
#   peer kill busy n=3    SIGKILL of rank 2 while 16 MiB buffers move: the others' first
#                         failure names it, within peer_timeout_ms + 5 s
#   peer rejoin n=3       SIGKILL of rank 2, which is then started again with its rank: the
#                         world re-forms (the data-plane mesh is rebuilt) and an allreduce
#                         of every trainer, the restarted node's new one included, is exact; the
#                         restarted node's barriers, numbered from 1 again, fail at once
#                         (its first) and then meet the job's (its second); status on
#                         the coordinator then shows every node connected, with its
#                         peer pipe up again and no reason left from the loss
#   peer restart early n=3  SIGKILL of rank 2, started again at once: refused (exit 1),
#                         saying it is let in once the old one is found lost
#   ctl without coordinator n=3  sparsectl config set and pending on node 1 just after
#                         the coordinator was killed: exit 1, naming the coordinator
#   peer rejoin after a runtime change n=3  scheme_pins set by sparsectl, rank 2 killed
#                         and started again from its file: refused, saying the value
#                         was set at run time
#   own daemon kill n=2   SIGKILL of node 1's daemon while its trainer waits on an
#                         operation nobody else submits: the wait ends within 3 s with
#                         SC_ERR_CONNECT naming the rank and the tensor, not at its timeout
live_peer_timeout=2000

# live_daemon R N: daemon R of N on $lport, its log appended to $live/dR.log, its pid in
# live_dR.
live_daemon() {
	mkdir -p "$live/node$1"
	"$bin/sparsecommd" --rank "$1" --world_size "$2" --coordinator "127.0.0.1:$lport" \
		--runtime_dir "$live/node$1" --join_timeout_ms 30000 \
		--peer_timeout_ms $live_peer_timeout >>"$live/d$1.log" 2>&1 </dev/null &
	eval "live_d$1=\$!"
}

# live_start N: N daemons on a free port, logs in $live/dR.log, pids in live_dR.
live_start() {
	live=$tmp/live
	rm -rf "$live"
	mkdir -p "$live"
	lport=$(free_port)
	r=0
	while [ $r -lt "$1" ]; do
		live_daemon $r "$1"
		r=$((r + 1))
	done
	i=0 # the world formed: every control socket is there
	while [ $i -lt 300 ]; do
		r=0 ready=1
		while [ $r -lt "$1" ]; do
			[ -S "$live/node$r/ctl.sock" ] || ready=0
			r=$((r + 1))
		done
		[ $ready -eq 1 ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# live_trainers N ARGS...: one itest trainer per node, output in $live/tR.out.
live_trainers() {
	n=$1
	shift
	r=0
	while [ $r -lt "$n" ]; do
		SPARSECOMM_SOCKET="ipc://$live/node$r/ctl.sock" SPARSECOMM_RANK=$r \
			SPARSECOMM_SIZE=$n SPARSECOMM_LOCAL_RANK=0 SPARSECOMM_LOCAL_SIZE=1 \
			SPARSECOMM_NODE_RANK=$r SPARSECOMM_NODE_COUNT=$n \
			"$itest" "$@" >"$live/t$r.out" 2>&1 </dev/null &
		eval "live_t$r=\$!"
		r=$((r + 1))
	done
}

# live_wait_for COUNT PATTERN: until COUNT trainer outputs hold PATTERN (30 s at most).
live_wait_for() {
	i=0
	while [ $i -lt 300 ]; do
		[ "$(grep -l "$2" "$live"/t*.out 2>/dev/null | wc -l)" -ge "$1" ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# live_end N: every trainer and daemon still running is stopped and reaped.
live_end() {
	r=0
	while [ $r -lt "$1" ]; do
		eval "tp=\$live_t$r dp=\$live_d$r"
		kill -CONT "$dp" 2>/dev/null
		kill -KILL "$tp" 2>/dev/null
		kill -TERM "$dp" 2>/dev/null
		wait "$tp" 2>/dev/null
		wait "$dp" 2>/dev/null
		r=$((r + 1))
	done
}

# live_verdict NAME OK WHY: counts the case; on failure, the tails of every output.
live_verdict() {
	if [ "$2" -eq 1 ]; then
		echo "ok    $1"
		passed=$((passed + 1))
		return 0
	fi
	echo "FAIL  $1: $3"
	for f in "$live"/t*.out "$live"/d*.log; do
		echo "      == $f"
		tail -n 15 "$f" | sed 's/^/      | /'
	done
	failed=$((failed + 1))
}

# live_case NAME VICTIM SIGNAL WORD LIMIT_MS CHECK_NODE: the scenario; CHECK_NODE's status
# must then show the victim as WORD.
live_case() {
	selected "$1" || return 0
	ok=0 why="the world did not form"
	if live_start 3; then
		live_trainers 3 gone "$2" "$4" "$5"
		why="the trainers never all waited"
		if live_wait_for 2 "waiting"; then
			eval "kill -$3 \$live_d$2"
			why="the trainers did not pass"
			live_wait_for 3 "passed" && ok=1
			st=$("$bin/sparsectl" --socket "ipc://$live/node$6/ctl.sock" --timeout-ms 5000 \
				--json status 2>&1)
			peer=$(printf '%s' "$st" | grep -o "{\"rank\":$2,[^}]*}")
			if [ $ok -eq 1 ] && ! printf '%s' "$peer" | grep -q "\"state\":\"$4\""; then
				ok=0 why="status on node $6 does not show node $2 $4: $peer"
			fi
			heard=$(printf '%s' "$peer" | sed -n 's/.*"heard_ms_ago":\([0-9-]*\).*/\1/p')
			if [ $ok -eq 1 ] && [ "$4" = lost ] && [ "${heard:-0}" -lt $live_peer_timeout ]; then
				ok=0 why="status on node $6 shows node $2 last heard ${heard} ms ago"
			fi
			if [ $ok -eq 1 ] && [ "$3" = STOP ]; then # resumed, it is told and stops
				eval "kill -CONT \$live_d$2"
				i=0
				while eval "kill -0 \$live_d$2" 2>/dev/null && [ $i -lt 100 ]; do
					sleep 0.1
					i=$((i + 1))
				done
				grep -q "the world gave this node up: node $2 (rank $2) was lost" \
					"$live/d$2.log" ||
					ok=0 why="node $2, resumed, was not told it was given up"
			fi
			if [ $ok -eq 1 ] && [ "$2" -eq 0 ]; then # the orphans exit, status 3
				i=0
				while { kill -0 "$live_d1" || kill -0 "$live_d2"; } 2>/dev/null &&
					[ $i -lt $((live_peer_timeout / 50 + 100)) ]; do
					sleep 0.1
					i=$((i + 1))
				done
				rc1=running rc2=running # never waited on while they run
				kill -0 "$live_d1" 2>/dev/null || { wait "$live_d1"; rc1=$?; }
				kill -0 "$live_d2" 2>/dev/null || { wait "$live_d2"; rc2=$?; }
				[ "$rc1" = 3 ] && [ "$rc2" = 3 ] &&
					grep -q "exiting with status 3: the coordinator, node 0" "$live/d1.log" ||
					ok=0 why="nodes 1 and 2 exited with $rc1 and $rc2, not 3, without the coordinator"
			fi
		fi
	fi
	grep -q 'FAIL (' "$live"/t*.out 2>/dev/null && ok=0 why="a trainer reported FAIL"
	live_end 3
	live_verdict "$1" "$ok" "$why"
}

# live_whole N: after a re-form, `sparsectl status` on the coordinator shows every node
# connected with its peer pipe up again and no reason left from when one was lost (5 s at
# most for the pipes to connect); sets why when not.
live_whole() {
	i=0
	while [ $i -lt 50 ]; do
		st=$("$bin/sparsectl" --socket "ipc://$live/node0/ctl.sock" --timeout-ms 5000 \
			--json status 2>&1)
		r=1 whole=1
		while [ $r -lt "$1" ]; do
			peer=$(printf '%s' "$st" | grep -o "{\"rank\":$r,[^}]*}")
			printf '%s' "$peer" | grep -q '"state":"connected"' &&
				printf '%s' "$peer" | grep -q '"pipe":true' &&
				printf '%s' "$peer" | grep -q '"reason":""' || whole=0
			r=$((r + 1))
		done
		[ $whole -eq 1 ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	why="after the re-form, status on node 0 does not show every node connected, its pipe up and no reason: $st"
	return 1
}

# live_rejoin NAME: rank 2 killed, then started again (live_case's first steps, then the
# restart and the restarted node's trainer).
live_rejoin() {
	selected "$1" || return 0
	ok=0 why="the world did not form"
	if live_start 3; then
		live_trainers 3 gone 2 lost $((live_peer_timeout + 5000)) rejoin
		why="the trainers never all waited"
		if live_wait_for 2 "waiting"; then
			kill -KILL "$live_d2"
			wait "$live_d2" 2>/dev/null
			why="the survivors did not see node 2 lost"
			if live_wait_for 2 "rejoin-ready"; then
				rm -f "$live/node2/ctl.sock" # the killed daemon's, left behind
				live_daemon 2 3
				SPARSECOMM_SOCKET="ipc://$live/node2/ctl.sock" SPARSECOMM_RANK=2 \
					SPARSECOMM_SIZE=3 SPARSECOMM_LOCAL_RANK=0 SPARSECOMM_LOCAL_SIZE=1 \
					SPARSECOMM_NODE_RANK=2 SPARSECOMM_NODE_COUNT=3 \
					"$itest" rejoin >"$live/t2-again.out" 2>&1 </dev/null &
				live_t2=$!
				why="the world did not become whole again (no exact allreduce on all 3)"
				live_wait_for 3 "live.c' exact" && live_wait_for 4 "passed" && ok=1
				[ $ok -eq 1 ] && ! live_whole 3 && ok=0
			fi
		fi
	fi
	grep -q 'FAIL (' "$live"/t*.out 2>/dev/null && ok=0 why="a trainer reported FAIL"
	live_end 3
	live_verdict "$1" "$ok" "$why"
}

# live_restart_refused: node 2's daemon (killed) started again, with a fresh log, and
# waited on until it exits (10 s at most); rc is its exit status, or "running".
live_restart_refused() {
	rm -f "$live/node2/ctl.sock" # the killed daemon's, left behind
	: >"$live/d2.log"
	live_daemon 2 3
	i=0
	while kill -0 "$live_d2" 2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	rc=running
	kill -0 "$live_d2" 2>/dev/null || { wait "$live_d2"; rc=$?; }
}

# live_early NAME: rank 2's daemon killed and started again at once, before the
# coordinator finds it lost: the new one is refused and exits 1, saying when it will be
# let in (it used to say only "rank 2 has already joined", of a daemon that was dead).
live_early() {
	selected "$1" || return 0
	ok=0 why="the world did not form"
	live_t0="" live_t1="" live_t2="" # no trainers here
	if live_start 3; then
		kill -KILL "$live_d2"
		wait "$live_d2" 2>/dev/null
		live_restart_refused
		why="the early restart exited with $rc (expected 1), or its log does not say when it is let in"
		[ "$rc" = 1 ] && grep -q "rank 2 has already joined: its daemon was last heard [0-9]* ms ago;.*found lost, peer_timeout_ms = $live_peer_timeout after" \
			"$live/d2.log" && ok=1
	fi
	live_end 3
	live_verdict "$1" "$ok" "$why"
}

# live_config NAME: sparsectl config set on node 1 right after the coordinator was
# killed: the coordinator applies a change on every node, so none is applied, and
# sparsectl must say so (exit 1, naming the coordinator) instead of "applied on every
# node" with exit 0; node 1's value stays. Before that, with the world whole, a set is
# answered once applied: config get on node 2 already shows it. sparsectl pending, which
# the coordinator answers, then fails within 3 s naming it, not "no reply from the
# daemon" at sparsectl's own timeout.
live_config() {
	selected "$1" || return 0
	ok=0 why="the world did not form"
	live_t0="" live_t1="" live_t2="" # no trainers here
	if live_start 3; then
		ctl1="$bin/sparsectl --socket ipc://$live/node1/ctl.sock"
		$ctl1 config set cycle_time_ms 3 >"$live/set1.out" 2>&1
		rc1=$?
		got=$("$bin/sparsectl" --socket "ipc://$live/node2/ctl.sock" config get cycle_time_ms 2>&1)
		kill -KILL "$live_d0"
		wait "$live_d0" 2>/dev/null
		# at once, side by side: each waits 3 s for the coordinator, and the node exits
		# twice peer_timeout_ms after it finds the coordinator lost
		$ctl1 --timeout-ms 10000 pending >"$live/pending.out" 2>&1 &
		pend=$!
		$ctl1 config set cycle_time_ms 9 >"$live/set2.out" 2>&1
		rc2=$?
		wait $pend
		rc3=$?
		after=$($ctl1 config get cycle_time_ms 2>&1)
		why="set with the world whole exited $rc1 (node 2 then: $got); without the coordinator $rc2: $(cat "$live/set2.out"); node 1 then: $after; pending exited $rc3: $(cat "$live/pending.out")"
		[ $rc1 -eq 0 ] && printf '%s' "$got" | grep -q "cycle_time_ms = 3 " &&
			[ $rc2 -eq 1 ] && grep -q "was not applied within .* the coordinator (node 0)" "$live/set2.out" &&
			printf '%s' "$after" | grep -q "cycle_time_ms = 3 " &&
			[ $rc3 -eq 1 ] && grep -q "pending: the coordinator (node 0), .* did not answer within 3000 ms" "$live/pending.out" && ok=1
	fi
	live_end 3
	live_verdict "$1" "$ok" "$why"
}

# live_retuned NAME: scheme_pins changed at run time (sparsectl config set), then rank 2
# killed and, once found lost, started again from its old settings: it is refused (exit
# 1), and the refusal says the coordinator's value was set at run time and what to do.
live_retuned() {
	selected "$1" || return 0
	ok=0 why="the world did not form"
	live_t0="" live_t1="" live_t2="" # no trainers here
	if live_start 3; then
		"$bin/sparsectl" --socket "ipc://$live/node1/ctl.sock" config set scheme_pins \
			'emb.*=agsparse' >"$live/set.out" 2>&1
		kill -KILL "$live_d2"
		wait "$live_d2" 2>/dev/null
		i=0 # until the coordinator has found it lost
		while ! grep -q "node 2 (rank 2) was lost" "$live/d0.log" && [ $i -lt 100 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		live_restart_refused
		why="the restarted node exited with $rc (expected 1), or its log does not say the coordinator's scheme_pins was set at run time"
		[ "$rc" = 1 ] && grep -q "rank 2 has scheme_pins '', the coordinator 'emb.\*=agsparse' (set at run time by sparsectl config set" \
			"$live/d2.log" && ok=1
	fi
	live_end 3
	live_verdict "$1" "$ok" "$why"
}

# live_busy NAME: rank 2's daemon killed while every trainer runs allreduces.
live_busy() {
	selected "$1" || return 0
	ok=0 why="the world did not form"
	if live_start 3; then
		live_trainers 3 gone-busy 2 $((live_peer_timeout + 5000))
		why="the trainers never all ran a step"
		if live_wait_for 3 "busy"; then
			kill -KILL "$live_d2"
			why="the trainers did not pass"
			live_wait_for 3 "passed" && ok=1
		fi
	fi
	grep -q 'FAIL (' "$live"/t*.out 2>/dev/null && ok=0 why="a trainer reported FAIL"
	live_end 3
	live_verdict "$1" "$ok" "$why"
}

# live_own NAME: node 1's own daemon killed while its trainer waits.
live_own() {
	selected "$1" || return 0
	ok=0 why="the world did not form"
	if live_start 2; then
		live_trainers 2 own 1 3000
		why="the victim's trainer never waited"
		if live_wait_for 1 "rank 1 waiting"; then
			kill -KILL "$live_d1"
			why="the victim's trainer did not pass"
			live_wait_for 1 "passed" && ok=1
		fi
	fi
	grep -q 'FAIL (' "$live"/t*.out 2>/dev/null && ok=0 why="a trainer reported FAIL"
	live_end 2
	live_verdict "$1" "$ok" "$why"
}

live_case "peer leave n=3" 2 TERM left 5000 1
live_case "peer kill n=3" 2 KILL lost $((live_peer_timeout + 5000)) 1
live_case "peer stop n=3" 2 STOP lost $((live_peer_timeout + 5000)) 1
live_case "coordinator kill n=3" 0 KILL lost $((live_peer_timeout + 5000)) 1
live_busy "peer kill busy n=3"
live_rejoin "peer rejoin n=3"
live_early "peer restart early n=3"
live_config "ctl without coordinator n=3"
live_retuned "peer rejoin after a runtime change n=3"
live_own "own daemon kill n=2"
