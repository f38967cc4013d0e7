#!/bin/sh
# device_check.sh: everything sparsecomm does on a GPU, proved in one bounded run, from the
# unpacked package (make dist) or a source tree:
#
#   tests/gpu/device_check.sh OUTDIR [SECONDS]
#
#   tests/gpu/device_check.sh OUTDIR SECONDS --figures
#
# Steps, in order of what each proves per minute, each under its own timeout (and never
# past SECONDS, default 450, counted from the start):
#   S0 environment: the driver, the GPU, MIG and confidential-computing modes, a python
#      whose torch sees CUDA ($SPARSECOMM_PYTHON, else python3 on PATH, then
#      /opt/torch/.venv/bin/python3, /usr/bin/python3), numpy, NCCL in that python's
#      nvidia packages (the daemon looks there too, docs/gpu.md), libraries the programs
#      cannot resolve, /dev/shm, whether `ip` exists. Without a GPU, torch with CUDA, numpy,
#      a writable /dev/shm or with an unresolved library nothing else runs;
#   S1 sparsecomm-bench compress on the cuda device at 16M elements: every op runs;
#   S2 one daemon, one torch trainer: CUDA IPC of memory and events, dense sums exact,
#      sparse results equal to the CPU path's, top-k tensors selected at submission on the
#      GPU equal to the CPU path's (tests/python/worker_gpu.py);
#   S3 sparsecomm-unit-gpu: every kernel bit for bit against the cpu device;
#   S4 four daemons on the one GPU over nccl (transport = nccl, sparsecomm-run
#      --nccl-hostid), every check of worker_gpu.py;
#   S5 over tcp: 2 nodes x 2 trainers (staging and the local sums), 4 x 1, and auto's
#      fallback to tcp where NCCL cannot load;
#   S6 (optional: only when the time left allows it) tensors of 2^30 and past 2^31
#      elements, two trainers on one daemon.
# With --figures, S0 and then the measurements instead (docs/gpu.md, "The figures on a GPU"):
#   F1 sparsecomm-bench compress --device cuda at 214M elements, 5% density: every op
#      against its HBM floor, exact top-k against torch.topk;
#   F2, F3 bench/gpu_collective.py, 4 daemons on the one GPU over nccl, zipf and topk
#      workloads at 64M elements, 1%: every scheme and auto against torch.distributed's
#      NCCL allreduce and all_gather of the COO (in network namespaces at 1 Gbit/s where
#      root and ip allow, else --nccl-hostid, no emulated link);
#   F4 examples/pytorch/digits_mlp.py on cuda, 4 trainers: sparsecomm lossless and top-k
#      1% against torch's DistributedDataParallel over NCCL (--backend torchddp);
#   F5 (optional: only when the time left allows it) bench/pytorch_fusion.py's fusion
#      modes on CPU tensors, 4 nodes with a core for each process, two rounds.
# They run in the order F1 F4 F2 F3 F5, or that of $FIG_STEPS (a list of some of them:
# a later session runs what an earlier one had no time for; F5 is not optional there).
# Each writes its JSON beside its log (F1.json, F2.json, F3.json, F4.*.json, F5.json).
# SPARSECOMM_REQUIRE_GPU=1 is set for every step: a test that would skip fails instead.
#
# OUTDIR gets results.jsonl (one JSON object per step, appended as each ends, so that a
# run killed midway keeps what it had), summary.json (written last), S<n>.log per step and
# the daemons' logs of S2, S4 and S5 (S<n>-daemons/). Exit status 0 when every step that
# ran passed and S0..S5 all ran (with --figures: S0 and those of F1..F4 it was given); 1
# otherwise; 2 on a usage error.
set -u

if [ "${1:-}" = "--step" ]; then
	mode=step
	shift
else
	mode=main
fi

pkg=$(cd "$(dirname "$0")/../.." && pwd)
if [ -x "$pkg/bin/sparsecommd" ]; then
	bin=$pkg/bin
	pypath=$pkg/python
else
	bin=$pkg/build/bin
	pypath=$pkg/client/python
fi
worker=$pkg/tests/python/worker_gpu.py

# ---- helpers -------------------------------------------------------------------------

# A JSON string's contents: backslashes and quotes escaped, control characters as spaces.
js() {
	printf '%s' "$1" | tr '\n\r\t' '   ' | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' \
		-e 's/[[:cntrl:]]/ /g'
}

# launch NODES PER_NODE LOGDIR SECONDS [LAUNCHER_OPTS...] -- WORKER_ARGS...: worker_gpu.py
# under sparsecomm-run, with the daemons' logs kept in LOGDIR.
launch() {
	nodes=$1 per=$2 logs=$3 secs=$4
	shift 4
	opts=""
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do
		opts="$opts $1"
		shift
	done
	shift
	mkdir -p "$logs"
	# shellcheck disable=SC2086
	"$bin/sparsecomm-run" -n "$nodes" --per-node "$per" --timeout "$secs" --log-dir "$logs" \
		$opts -- "$PY" "$worker" "$@"
}

# The worker's verdict from its output (file): every rank's CHECK lines ok, none FAIL.
checks_ok() { # FILE RANKS
	fails=$(grep -c 'CHECK [^ ]* FAIL' "$1")
	oks=$(grep -c 'CHECK [^ ]* ok$' "$1")
	echo "checks: $oks ok, $fails failed"
	[ "$fails" -eq 0 ] && [ "$oks" -ge "$2" ]
}

# ---- the steps (each runs in a child: sh device_check.sh --step Sn OUTDIR) -------------

step_S0() {
	ok=1
	reason=""
	fail() {
		ok=0
		reason="$reason${reason:+; }$1"
		echo "S0: $1"
	}
	gpu="" driver="" mig="" cc=""
	if command -v nvidia-smi >/dev/null 2>&1; then
		q=$(timeout 15 nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current \
			--format=csv,noheader 2>&1)
		echo "nvidia-smi: $q"
		gpu=$(echo "$q" | head -n 1 | cut -d, -f1)
		driver=$(echo "$q" | head -n 1 | cut -d, -f2 | tr -d ' ')
		mig=$(echo "$q" | head -n 1 | cut -d, -f4 | tr -d ' ')
		cc=$(timeout 10 nvidia-smi conf-compute -f 2>&1 | head -n 1)
		echo "confidential computing: $cc"
	else
		echo "nvidia-smi: not found"
	fi
	# the python: the named one alone, else the first whose torch sees CUDA
	if [ -n "${SPARSECOMM_PYTHON:-}" ]; then
		cands=$SPARSECOMM_PYTHON
	else
		cands=$(printf '%s\n' "$(command -v python3 2>/dev/null)" \
			/opt/torch/.venv/bin/python3 /usr/bin/python3 | awk 'NF && !seen[$0]++')
	fi
	py="" torch="" numpy="" tried=""
	for c in $cands; do
		[ -x "$c" ] || continue
		info=$(timeout 60 "$c" -c 'import torch
print(torch.__version__, torch.version.cuda, torch.cuda.is_available(),
      torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")' \
			2>&1 | tail -n 1)
		echo "python $c: torch: $info"
		tried="$tried${tried:+, }$c: $info"
		case $info in *" True "*)
			py=$c
			torch=$info
			break
			;;
		esac
	done
	if [ -z "$py" ]; then
		fail "no python whose torch sees CUDA (${tried:-no python3 found}; set SPARSECOMM_PYTHON)"
	else
		numpy=$(timeout 30 "$py" -c 'import numpy; print(numpy.__version__)' 2>&1 | tail -n 1)
		echo "numpy: $numpy"
		case $numpy in [0-9]*) ;; *) fail "numpy: $numpy" ;; esac
	fi
	# NCCL from that python's nvidia packages (the nvidia-nccl wheel), and its version
	nccl="" nccl_version=""
	if [ -n "$py" ]; then
		n=$(timeout 30 "$py" -c 'import ctypes, importlib.util, os
spec = importlib.util.find_spec("nvidia.nccl")
for d in (spec.submodule_search_locations if spec else []):
    p = os.path.join(d, "lib", "libnccl.so.2")
    if os.path.exists(p):
        v = ctypes.c_int()
        ctypes.CDLL(p).ncclGetVersion(ctypes.byref(v))
        print(p, v.value)
        break
else:
    print("none: no nvidia.nccl package")' 2>&1 | tail -n 1)
		echo "nccl: $n"
		case $n in /*)
			nccl=${n% *}
			nccl_version=${n##* }
			;;
		esac
	fi
	[ -n "$nccl" ] || echo "nccl: not in the python's packages: S4 will fail unless" \
		"\$SPARSECOMM_NCCL_LIB or the loader finds it"
	unresolved=$(for f in "$bin"/* "$bin"/../lib/libsparse*.so; do
		# (2>&1: a symbol version the system's library lacks is reported on stderr)
		[ -f "$f" ] && ldd "$f" 2>&1 | grep 'not found' | sed "s|^|$(basename "$f"): |"
	done | tr -s ' \t' ' ' | sort -u | tr '\n' ';')
	[ -z "$unresolved" ] || fail "unresolved libraries: $unresolved"
	shm=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print int($4 / 1024) }')
	echo "/dev/shm: ${shm:-missing} MiB free"
	if ! { [ -n "$shm" ] && : >"/dev/shm/sc-check.$$" 2>/dev/null; }; then
		fail "/dev/shm is missing or not writable"
	fi
	rm -f "/dev/shm/sc-check.$$"
	ipcmd=$(command -v ip 2>/dev/null)
	echo "ip: ${ipcmd:-not found (sparsecomm-run --nccl-hostid needs none)}"
	[ -n "$gpu" ] || [ -n "$py" ] || fail "no GPU: nvidia-smi ${driver:-not found}"
	printf '{"gpu":"%s","driver":"%s","mig":"%s","confidential":"%s","python":"%s",' \
		"$(js "$gpu")" "$(js "$driver")" "$(js "$mig")" "$(js "$cc")" "$(js "$py")" \
		>"$out/S0.json"
	printf '"torch":"%s","numpy":"%s","nccl":"%s","nccl_version":"%s","unresolved":"%s",' \
		"$(js "$torch")" "$(js "$numpy")" "$(js "$nccl")" "$(js "$nccl_version")" \
		"$(js "$unresolved")" >>"$out/S0.json"
	printf '"shm_free_mib":"%s","ip":"%s","cpus":"%s"}' "$(js "$shm")" "$(js "$ipcmd")" \
		"$(nproc 2>/dev/null)" >>"$out/S0.json"
	printf 'PY=%s\nNCCL=%s\n' "$py" "$nccl" >"$out/S0.env"
	[ "$ok" -eq 1 ] && echo "S0: ok" && return 0
	echo "S0 failed: $reason"
	printf '%s\n' "$reason" >"$out/S0.reason"
	return 1
}

# compress_json NUMEL DENSITY REPS FILE: the compress bench on the cuda device, its JSON
# line in FILE and on the log.
compress_json() {
	"$bin/sparsecomm-bench" compress --device cuda --numel "$1" --density "$2" --reps "$3" \
		--json >"$4" || return 1
	cat "$4"
}

step_S1() {
	compress_json 16777216 0.01 3 "$out/S1.json" || return 1
	"$PY" -c 'import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
bad = [o["op"] for o in d["ops"] if not o["seconds"] > 0]
assert d["device"] == "cuda", d["device"]
assert d["ops"] and not bad, "ops without a time: %s" % bad
print("S1: %d ops on %s, copy at %.0f GB/s" % (len(d["ops"]), d["device"],
                                              d["hbm_bytes_per_s"] / 1e9))' "$out/S1.json"
}

step_S2() {
	launch 1 1 "$out/S2-daemons" 75 -- dense_exact_sums sparse_embedding sparse_result_forms \
		topk_selected_at_submission >"$out/S2.out" 2>&1
	rc=$?
	cat "$out/S2.out"
	checks_ok "$out/S2.out" 4 && [ "$rc" -eq 0 ]
}

step_S3() {
	"$bin/sparsecomm-unit-gpu"
}

step_S4() {
	launch 4 1 "$out/S4-daemons" 110 --nccl-hostid --daemon-arg --transport --daemon-arg nccl \
		-- >"$out/S4.out" 2>&1
	rc=$?
	cat "$out/S4.out"
	# every daemon's GPU buffers went over NCCL (the library found as docs/gpu.md says)
	n=$(grep -l 'GPU buffers over nccl' "$out"/S4-daemons/daemon*.log 2>/dev/null | wc -l)
	echo "daemons whose GPU buffers went over nccl: $n of 4"
	checks_ok "$out/S4.out" 32 && [ "$rc" -eq 0 ] && [ "$n" -eq 4 ]
}

step_S5() {
	r=0
	launch 2 2 "$out/S5-daemons/2x2" 75 --daemon-arg --transport --daemon-arg tcp -- \
		>"$out/S5.2x2.out" 2>&1 || r=1
	echo "== 2 nodes x 2 trainers over tcp"
	cat "$out/S5.2x2.out"
	checks_ok "$out/S5.2x2.out" 32 || r=1
	launch 4 1 "$out/S5-daemons/4x1" 55 --daemon-arg --transport --daemon-arg tcp -- \
		dense_exact_sums sparse_embedding sparse_result_forms >"$out/S5.4x1.out" 2>&1 || r=1
	echo "== 4 nodes x 1 over tcp"
	cat "$out/S5.4x1.out"
	checks_ok "$out/S5.4x1.out" 12 || r=1
	SPARSECOMM_NCCL_LIB=/nonexistent/libnccl.so.2 launch 2 1 "$out/S5-daemons/auto" 35 -- \
		dense_exact_sums >"$out/S5.auto.out" 2>&1 || r=1
	echo "== transport auto where NCCL cannot load: tcp"
	cat "$out/S5.auto.out"
	checks_ok "$out/S5.auto.out" 2 || r=1
	grep -q 'GPU buffers over tcp: rank [0-9]* cannot run NCCL' \
		"$out/S5-daemons/auto/daemon0.log" || { echo "auto did not say it fell back" && r=1; }
	return $r
}

step_S6() {
	launch 1 2 "$out/S6-daemons" 110 -- large_tensors >"$out/S6.out" 2>&1
	rc=$?
	cat "$out/S6.out"
	checks_ok "$out/S6.out" 2 && [ "$rc" -eq 0 ]
}

# ---- the figures (device_check.sh OUTDIR SECONDS --figures: S0, then F1..F4) -----------

# The launcher's options for 4 emulated nodes on the one GPU ($FIG_NET, chosen once by
# the run: fig_net_pick).
fig_net() {
	echo "$FIG_NET"
}

# Network namespaces at 1 Gbit/s where the launcher can make them here (tried: root and ip
# alone do not say that a container lets them be made), else --nccl-hostid (every node a
# host of its own to NCCL, meeting over sockets on loopback, no emulated link).
fig_net_pick() {
	if timeout 40 "$bin/sparsecomm-run" -n 1 --timeout 30 --netns --rate 1gbit -- true \
		>"$out/F.net.log" 2>&1 </dev/null; then
		echo "--netns --rate 1gbit"
	else
		echo "--nccl-hostid"
	fi
}

# F1: the compression core on the GPU at ZEN's size against its HBM floor (the bytes each
# op must read and write, at the device-to-device copy's rate in the same run) and exact
# top-k against torch.topk. Goals: threshold selection with compaction and the hash
# within 2x of their floors, top-k faster than torch.topk.
step_F1() {
	compress_json 214000000 0.05 5 "$out/F1.json" || return 1
	"$PY" -c 'import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert d["device"] == "cuda", d["device"]
for o in d["ops"]:
    print("F1: %-22s %9.3f ms  %.2fx its floor" % (o["op"], o["seconds"] * 1e3,
                                                 o.get("vs_floor", 0)))
t = d.get("torch_topk") or {}
print("F1: torch.topk %s" % ("%.3f ms, %.2fx our exact top-k" % (
    t["seconds"] * 1e3, t["over_topk_select"]) if t else d.get("torch_topk_reason")))
print("F1: copy at %.0f GB/s; worst op %.2fx its floor" % (
    d["hbm_bytes_per_s"] / 1e9, max(o.get("vs_floor", 0) for o in d["ops"])))' "$out/F1.json"
}

# F2, F3: every scheme and auto against torch.distributed's NCCL allreduce and all_gather
# of the COO, 4 daemons over nccl, 64M elements at 1% (bench/gpu_collective.py).
fig_collective() { # WORKLOAD STEP
	echo "nodes: $(fig_net)"
	# shellcheck disable=SC2046
	"$bin/sparsecomm-run" -n 4 --timeout $((STEP_LIMIT - 15)) --log-dir "$out/$2-daemons" \
		$(fig_net) --daemon-arg --transport --daemon-arg nccl -- "$PY" \
		"$pkg/bench/gpu_collective.py" --workload "$1" --numel 67108864 --density 0.01 \
		--scheme all --check --warmup 2 --iters 5 --json-out "$out/$2.json" \
		>"$out/$2.out" 2>&1
	rc=$?
	cat "$out/$2.out"
	[ "$rc" -eq 0 ] && [ -s "$out/$2.json" ] || return 1
	# a lossless scheme's sums exact (zipf) or conserved with the residuals (topk)
	"$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
bad = [r["pinned"] for r in d["schemes"]
       if r.get("exact") is False or r.get("conserved") is False]
assert d["schemes"] and not bad, "wrong results: %s" % bad
print("%s: %d schemes, every lossless one exact" % (sys.argv[2], len(d["schemes"])))' \
		"$out/$2.json" "$2"
}

step_F2() { fig_collective zipf F2; }
step_F3() { fig_collective topk F3; }

# F4: one PyTorch model with CUDA tensors through the daemons (lossless, then top-k 1%)
# against torch's DDP over NCCL, 4 trainers on the GPU: steps per second and final loss.
step_F4() {
	r=0
	for run in "sparsecomm --sparsifier none" "sparsecomm --sparsifier topk" torchddp; do
		tag=$(echo "$run" | tr ' ' '_' | tr -d '-')
		mkdir -p "$out/F4-daemons"
		echo "== $run, nodes: $(fig_net)"
		# shellcheck disable=SC2046,SC2086
		"$bin/sparsecomm-run" -n 4 --timeout 60 --log-dir "$out/F4-daemons/$tag" \
			$(fig_net) -- "$PY" "$pkg/examples/pytorch/digits_mlp.py" --device cuda \
			--steps 600 --log-every 200 --backend $run --json-out "$out/F4.$tag.json" \
			>"$out/F4.$tag.out" 2>&1 || r=1
		grep 'summary:' "$out/F4.$tag.out" || { tail -n 20 "$out/F4.$tag.out" && r=1; }
	done
	return $r
}

# F5: the fusion modes of bench/pytorch_fusion.py (CPU tensors, top-k 1%, 4 nodes) on a
# machine with a core for every trainer and daemon: sparsification ahead of fusion per
# tensor (layerwise, aligned, adaptive, adaptive_batched) against one fused top-k buffer,
# where the per-tensor work no longer competes with training for the cores (docs/
# schemes.md, "SAFusion's headline"). Two interleaved rounds; the goals from the medians.
step_F5() {
	netns=--no-netns
	case $FIG_NET in --netns*) netns="" ;; esac
	echo "nodes: ${netns:-$FIG_NET}"
	# shellcheck disable=SC2086
	"$PY" "$pkg/bench/pytorch_fusion.py" --all $netns --rounds 2 --steps 200 --warmup 30 \
		--modes layerwise,fused_topk,aligned,adaptive,adaptive_batched --timeout 60 \
		--json "$out/F5.json" >"$out/F5.out" 2>&1
	rc=$?
	sed -n '/^| mode /,$p' "$out/F5.out"
	if [ "$rc" -ne 0 ] || [ ! -s "$out/F5.json" ]; then
		tail -n 20 "$out/F5.out"
		return 1
	fi
}

if [ "$mode" = step ]; then
	step=$1
	out=$2
	"step_$step"
	exit $?
fi

# ---- the run -------------------------------------------------------------------------

figures=0
if [ $# -eq 3 ] && [ "$3" = --figures ]; then
	figures=1
	set -- "$1" "$2"
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 OUTDIR [SECONDS]   or   $0 OUTDIR SECONDS --figures" >&2
	exit 2
fi
for f in ${FIG_STEPS:-}; do
	case $f in F[1-5]) ;; *)
		echo "device_check.sh: FIG_STEPS names F1..F5, not '$f'" >&2
		exit 2
		;;
	esac
done
out=$1
budget=${2:-450}
case $budget in '' | *[!0-9]*)
	echo "device_check.sh: SECONDS must be a whole number, not '$budget'" >&2
	exit 2
	;;
esac
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
rm -rf "$out/results.jsonl" "$out/summary.json" "$out"/S[0-9]* "$out"/F[0-9]*
: >"$out/results.jsonl"
export SPARSECOMM_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$pypath${PYTHONPATH:+:$PYTHONPATH}"
t0=$(date +%s)
failed=""
not_run=""
first=""

# record STEP NAME STATUS SECONDS RC DETAIL: one line of results.jsonl; S0's carries the
# environment it read.
record() {
	env_json=""
	[ "$1" = S0 ] && [ -s "$out/S0.json" ] && env_json=$(cat "$out/S0.json")
	printf '{"step":"%s","name":"%s","status":"%s","seconds":%s,"rc":%s,"log":"%s.log","detail":"%s"%s}\n' \
		"$1" "$(js "$2")" "$3" "$4" "$5" "$1" "$(js "$6")" \
		"${env_json:+,\"environment\":$env_json}" >>"$out/results.jsonl"
	echo "$1 $3 (${4} s): $2${6:+: $6}"
	case $3 in
	fail)
		failed="$failed $1"
		[ -n "$first" ] || first="$1: $6"
		;;
	not_run) not_run="$not_run $1" ;;
	esac
}

# run_step STEP NAME TIMEOUT [optional]: the step in a child under its timeout, cut to the
# time left; an optional step without its full timeout left does not run.
run_step() {
	left=$((budget - ($(date +%s) - t0)))
	limit=$3
	if [ "${4:-}" = optional ] && [ "$left" -lt "$limit" ]; then
		record "$1" "$2" not_run 0 0 "optional, and only $left s of the $budget s budget left"
		return
	fi
	[ "$left" -lt "$limit" ] && limit=$left
	if [ "$limit" -lt 5 ]; then
		record "$1" "$2" fail 0 0 "the $budget s budget is spent"
		return
	fi
	s=$(date +%s)
	STEP_LIMIT=$limit timeout -k 5 "$limit" sh "$0" --step "$1" "$out" >"$out/$1.log" 2>&1
	rc=$?
	dt=$(($(date +%s) - s))
	if [ "$rc" -eq 0 ]; then
		record "$1" "$2" pass "$dt" 0 "$(tail -n 1 "$out/$1.log")"
	elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		record "$1" "$2" fail "$dt" "$rc" "timed out after $limit s; last line: $(tail -n 1 \
			"$out/$1.log")"
	elif [ -s "$out/$1.reason" ]; then
		record "$1" "$2" fail "$dt" "$rc" "$(cat "$out/$1.reason")"
	else
		why=$(grep -E 'FAIL|rror|S[0-9]: ' "$out/$1.log" | tail -n 3 | tr '\n' ' ')
		record "$1" "$2" fail "$dt" "$rc" "${why:-$(tail -n 2 "$out/$1.log" | tr '\n' ' ')}"
	fi
}

# step STEP NAME TIMEOUT [optional]: run_step, once S0 has found the machine fit to run it.
step() {
	if [ ! -f "$out/S0.env" ] || [ -f "$out/S0.reason" ]; then
		record "$1" "$2" not_run 0 0 "S0 failed: $(cat "$out/S0.reason" 2>/dev/null)"
		return
	fi
	run_step "$@"
}

echo "device check of $pkg, $budget s, results in $out"
run_step S0 "environment" 60
[ -f "$out/S0.env" ] || echo "S0 ended without its findings (timed out?)" >"$out/S0.reason"
PY=$(sed -n 's/^PY=//p' "$out/S0.env" 2>/dev/null)
# the daemons (NCCL's wheel) and the bench (its torch peer) use the trainers' python
if [ -n "$PY" ]; then
	PATH="$(dirname "$PY"):$PATH"
	export PY SPARSECOMM_PYTHON="$PY" PATH
fi
if [ "$figures" -eq 1 ]; then
	FIG_NET=--nccl-hostid
	[ -f "$out/S0.env" ] && [ ! -f "$out/S0.reason" ] && FIG_NET=$(fig_net_pick)
	export FIG_NET
	echo "figures: the 4 nodes of F2..F4 run with $FIG_NET"
	f5=optional # F5 only when its whole timeout is left, unless FIG_STEPS asks for it
	[ -n "${FIG_STEPS:-}" ] && f5=""
	for f in ${FIG_STEPS:-F1 F4 F2 F3 F5}; do
		case $f in
		F1) step F1 "compress at 214M elements against the HBM floor and torch.topk" 120 ;;
		F4) step F4 "digits MLP on cuda: sparsecomm against torch DDP over NCCL" 200 ;;
		F2) step F2 "schemes against torch's NCCL, zipf, 64M at 1%" 240 ;;
		F3) step F3 "schemes against torch's NCCL, topk, 64M at 1%" 240 ;;
		F5) step F5 "fusion modes on cpu tensors, a core per process" 200 $f5 ;;
		esac
	done
else
	step S1 "compress bench on cuda, 16M elements" 60
	step S2 "one daemon, one torch trainer" 90
	step S3 "sparsecomm-unit-gpu" 120
	step S4 "four daemons on one GPU over nccl" 120
	step S5 "tcp 2x2, 4x1 and auto's fallback" 180
	step S6 "2^30 and past 2^31 elements" 120 optional
fi

total=$(($(date +%s) - t0))
ok=true
[ -z "$failed" ] || ok=false
case $not_run in *S[0-5]* | *F[1-4]*) ok=false ;; esac
printf '{"ok":%s,"seconds":%s,"budget_s":%s,"failed":"%s","not_run":"%s","first_failure":"%s","package":"%s"}\n' \
	"$ok" "$total" "$budget" "${failed# }" "${not_run# }" "$(js "$first")" "$(js "$pkg")" \
	>"$out/summary.json"
echo "device check: $([ "$ok" = true ] && echo passed || echo FAILED) in $total s" \
	"(failed:${failed:- none}; not run:${not_run:- none})${first:+; first failure $first}"
[ "$ok" = true ]
