#!/bin/sh
# run_dist.sh: the relocatable package (`make dist`, mk/dist.sh), unpacked into an empty
# directory outside the tree, with no LD_LIBRARY_PATH: under 40 MiB; every file in place;
# the programs carry DT_RPATH $ORIGIN/../lib and every library they need resolves inside
# the tree or to glibc (and the compiler's libstdc++/libgcc_s); the carried libraries'
# own needs are carried too; the CUDA runtime is inside libsparsecomm-cuda.so;
# `sparsecommd --version` and a 2-node allreduce run from the tree; the Python package
# loads the tree's library. Then tests/gpu/device_check.sh from the tree: without a GPU it
# fails at S0 within 30 s with every step recorded; with a stand-in python that claims a
# GPU every later step runs and fails (SPARSECOMM_REQUIRE_GPU=1: no step passes by
# skipping); with --figures, the same for F1..F5, after the packaged bench/gpu_collective.py,
# examples/pytorch/digits_mlp.py (--backend torchddp) and bench/pytorch_fusion.py ran on the
# cpu, and the package's digits (for a python without scikit-learn) matched scikit-learn's.
# Prints ok/FAIL per check and "N passed, N failed" (tests/run.sh adds it up).
#
#   sh tests/integration/run_dist.sh       (skips, saying why, where nvcc is not found)
set -u

root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sc-dist.XXXXXX") ||
	{ echo "run_dist.sh: cannot create a temporary directory" >&2; exit 1; }
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
figures="" # dc(): device_check.sh --figures when set

check() { # check NAME OK DETAIL
	if [ "$2" -eq 1 ]; then
		echo "ok    dist: $1"
		passed=$((passed + 1))
	else
		echo "FAIL  dist: $1: $3"
		failed=$((failed + 1))
	fi
}
finish() {
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
	exit
}

echo "package tests"
nvcc=${NVCC-$(command -v nvcc 2>/dev/null)}
if [ -z "$nvcc" ]; then
	echo "skip  dist: make dist: nvcc is not found (the package carries the CUDA device)"
	finish
fi
if ! make -s -C "$root" dist >"$tmp/make.log" 2>&1; then
	check "make dist" 0 "$(tail -n 5 "$tmp/make.log")"
	finish
fi
tarball=$(ls "$root"/build/sparsecomm-*.tar.gz | head -n 1)
size=$(stat -c %s "$tarball")
check "the tarball is under 40 MiB" "$([ "$size" -lt $((40 << 20)) ] && echo 1 || echo 0)" \
	"$size bytes"

mkdir "$tmp/u"
tar -C "$tmp/u" -xzf "$tarball"
p=$(ls -d "$tmp"/u/*)
missing=""
for f in bin/sparsecommd bin/sparsectl bin/sparsecomm-run bin/sparsecomm-bench \
	bin/sparsecomm-unit-gpu lib/libsparseclient.so lib/libsparsecomm-cuda.so \
	lib/libzmq.so.5 lib/libuv.so.1 python/sparsecomm/__init__.py python/sparsecomm/_install.py \
	share/man/man8/sparsecommd.8 share/man/man1/sparsectl.1 tests/gpu/device_check.sh \
	tests/python/worker_gpu.py tests/python/run_tests.py bench/gpu_collective.py \
	bench/pytorch_fusion.py bench/_tree.py examples/pytorch/digits_mlp.py \
	examples/pytorch/_common.py MANIFEST; do
	[ -e "$p/$f" ] || missing="$missing $f"
done
# scikit-learn's digits, where make dist found scikit-learn (mk/dist.sh)
for py in /usr/bin/python3 python3; do
	if "$py" -c 'import sklearn' >/dev/null 2>&1; then
		[ -e "$p/examples/pytorch/digits.csv.gz" ] ||
			missing="$missing examples/pytorch/digits.csv.gz"
		break
	fi
done
check "every file in place" "$([ -z "$missing" ] && echo 1 || echo 0)" "missing:$missing"
# nothing of the build machine's toolkit or compiler runtime is carried
extra=$(for f in "$p"/lib/*; do basename "$f"; done |
	grep -E '^lib(cudart|stdc\+\+|gcc_s|gomp|c|m|pthread)\.so' | tr '\n' ' ')
check "no CUDA runtime, compiler runtime or glibc in lib/" "$([ -z "$extra" ] && echo 1 ||
	echo 0)" "$extra"

# every program and our libraries: RPATH (not RUNPATH) to the tree's lib/
bad=""
for f in "$p"/bin/*; do
	readelf -d "$f" | grep -q 'RPATH.*\[\$ORIGIN/\.\./lib\]' || bad="$bad $(basename "$f")"
	! readelf -d "$f" | grep -q RUNPATH || bad="$bad $(basename "$f")(RUNPATH)"
done
readelf -d "$p/lib/libsparseclient.so" | grep -q 'RPATH.*\[\$ORIGIN\]' ||
	bad="$bad libsparseclient.so"
check "DT_RPATH \$ORIGIN-relative" "$([ -z "$bad" ] && echo 1 || echo 0)" "without it:$bad"

# ldd of every program and our libraries: inside the tree, or the system's glibc and
# compiler runtime; and the carried libraries need nothing that is not carried
system='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libresolv\.so\.2|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'
env -u LD_LIBRARY_PATH sh -c 'for f in "$@"; do ldd "$f" | sed "s|^|$(basename "$f"): |"; done' \
	sh "$p"/bin/* "$p/lib/libsparseclient.so" "$p/lib/libsparsecomm-cuda.so" >"$tmp/ldd"
bad=$(awk -v p="$p/" -v sys="$system" '
	/not found/ { print; next }
	$3 == "=>" && index($4, p) != 1 && $2 !~ sys { print }
	' "$tmp/ldd" | tr -s ' \t' ' ')
n=$(grep -c "=> $p" "$tmp/ldd")
check "every library resolves inside the tree or to glibc ($n from the tree)" \
	"$([ -z "$bad" ] && [ "$n" -gt 20 ] && echo 1 || echo 0)" "$bad"
bad=""
for f in "$p"/lib/*.so*; do
	for need in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
		echo "$need" | grep -Eq "$system" || [ -e "$p/lib/$need" ] ||
			bad="$bad $(basename "$f")->$need"
	done
done
check "the carried libraries' needs are carried" "$([ -z "$bad" ] && echo 1 || echo 0)" "$bad"
ok=0
grep -q 'libsparsecomm-cuda.so: .*libcudart' "$tmp/ldd" || ok=1
check "the CUDA runtime is linked into libsparsecomm-cuda.so" "$ok" \
	"$(grep 'libsparsecomm-cuda.so: .*libcudart' "$tmp/ldd")"

# run from the tree, from another directory, with a plain PATH
out=$(cd "$tmp" && env -u LD_LIBRARY_PATH "$p/bin/sparsecommd" --version 2>&1)
check "sparsecommd --version" "$(echo "$out" | grep -q '^sparsecommd [0-9]' && echo 1 ||
	echo 0)" "$out"
(cd "$tmp" && env -u LD_LIBRARY_PATH -u SPARSECOMM_DAEMON PATH=/usr/bin:/bin timeout 150 \
	"$p/bin/sparsecomm-run" -n 2 --timeout 120 -- "$p/bin/sparsecomm-bench" allreduce \
	--sizes 4K,1M --iters 2) >"$tmp/ar.out" 2>&1 </dev/null
rc=$?
ok=0
[ "$rc" -eq 0 ] && grep -Eq '^\[0\] +1048576 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0 ' "$tmp/ar.out" && ok=1
check "a 2-node allreduce from the tree" "$ok" "exit $rc: $(tail -n 5 "$tmp/ar.out")"
out=$(cd "$tmp" && env -u LD_LIBRARY_PATH -u SPARSECOMM_LIB python3 -c 'import sys, types
pkg = types.ModuleType("sparsecomm")
pkg.__path__ = [sys.argv[1]]
sys.modules["sparsecomm"] = pkg
import sparsecomm._lib as l
lib = l.load()
print(l.library_path(), lib.sc_status_name(-6).decode())' "$p/python/sparsecomm" 2>&1)
check "the Python package loads the tree's library" "$(echo "$out" |
	grep -q "^$p/lib/libsparseclient.so SC_ERR_TIMEOUT$" && echo 1 || echo 0)" "$out"

# what device_check.sh --figures runs, from the tree on the cpu (torch's gloo in place of
# NCCL, small sizes): the package's bench and example import, find the tree's programs and
# give exact sums; the example's torch DDP trains
pkgrun() { # LOG NODES ARGS...: a trainer under the tree's launcher, the tree's Python package
	log=$1 nodes=$2
	shift 2
	(cd "$tmp" && env -u LD_LIBRARY_PATH -u SPARSECOMM_DAEMON PYTHONPATH="$p/python" \
		timeout 200 "$p/bin/sparsecomm-run" -n "$nodes" --timeout 180 -- "$tpy" "$@") \
		>"$log" 2>&1 </dev/null
}
tpy="" # a python with torch and numpy (Debian's, which make test installs them in)
for c in /usr/bin/python3 "$(command -v python3)"; do
	[ -x "$c" ] && "$c" -c 'import torch, numpy' >/dev/null 2>&1 && tpy=$c && break
done
if [ -z "$tpy" ]; then
	echo "skip  dist: the figures' scripts from the tree: no python3 with torch and numpy"
else
	for wl in zipf topk; do
		pkgrun "$tmp/gc.$wl.out" 2 "$p/bench/gpu_collective.py" --device cpu --workload "$wl" \
			--numel 65536 --density 0.01 --scheme all --check --warmup 1 --iters 1 \
			--json-out "$tmp/gc.$wl.json"
		rc=$?
		got=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(" ".join("%s:%s" % (r["pinned"], r.get("exact", r.get("conserved")))
               for r in d["schemes"]))' "$tmp/gc.$wl.json" 2>&1)
		ok=0
		[ "$rc" -eq 0 ] && [ "$(echo "$got" | wc -w)" -eq 9 ] &&
			! echo "$got" | grep -q ':False' && ok=1
		check "bench/gpu_collective.py --workload $wl from the tree (cpu): $got" "$ok" \
			"exit $rc: $(tail -n 5 "$tmp/gc.$wl.out")"
	done
	pkgrun "$tmp/ddp.out" 2 "$p/examples/pytorch/digits_mlp.py" --backend torchddp \
		--steps 20 --log-every 20
	rc=$?
	ok=0
	[ "$rc" -eq 0 ] && grep -q 'summary: backend=torchddp device=cpu ranks=2' "$tmp/ddp.out" &&
		ok=1
	check "examples/pytorch/digits_mlp.py --backend torchddp from the tree (cpu)" "$ok" \
		"exit $rc: $(tail -n 5 "$tmp/ddp.out")"
	# the digits without scikit-learn (the GPU machine's python has none): the package's
	# copy, read by _common.digits(), equal to load_digits()
	if "$tpy" -c 'import sklearn' >/dev/null 2>&1; then
		out=$(cd "$tmp" && "$tpy" -c 'import sys
sys.modules["sklearn"] = None  # import sklearn fails, as where it is not installed
sys.path.insert(0, sys.argv[1])
import _common
x, y = _common.digits()
del sys.modules["sklearn"]
import numpy as np
from sklearn.datasets import load_digits
d = load_digits()
print("equal" if np.array_equal(x, d.data) and np.array_equal(y, d.target) else "differ",
      x.shape, y.shape)' "$p/examples/pytorch" 2>&1)
		check "the package's digits without scikit-learn: $out" \
			"$(echo "$out" | grep -q '^equal (1797, 64) (1797,)$' && echo 1 || echo 0)" "$out"
	else
		echo "skip  dist: the package's digits: no scikit-learn here to compare with"
	fi
	# device_check.sh's F5: the fusion driver from the tree, its own launches of the tree's
	# programs (2 nodes on loopback, a few steps of two modes)
	(cd "$tmp" && env -u LD_LIBRARY_PATH -u SPARSECOMM_DAEMON PYTHONPATH="$p/python" \
		timeout 300 "$tpy" "$p/bench/pytorch_fusion.py" --all --nodes 2 --no-netns \
		--modes fused_topk,adaptive --steps 20 --warmup 5 --timeout 60 \
		--json "$tmp/pf.json") >"$tmp/pf.out" 2>&1 </dev/null
	rc=$?
	got=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(" ".join("%s:%d:%s" % (r["mode"], r["ranks"], r["missing_per_step"]) for r in d["modes"]))' \
		"$tmp/pf.json" 2>&1)
	ok=0
	# (the single buffer may miss tensors; the per-tensor selection must not)
	[ "$rc" -eq 0 ] && echo "$got" | grep -Eq '^fused_topk:2:[0-9.]+ adaptive:2:0\.0$' && ok=1
	check "bench/pytorch_fusion.py --all from the tree (2 nodes, loopback): $got" "$ok" \
		"exit $rc: $(tail -n 5 "$tmp/pf.out")"
fi

# SPARSECOMM_REQUIRE_GPU=1: the GPU unit runner's skips are failures
"$p/bin/sparsecomm-unit-gpu" gpu_bitmap >"$tmp/u1" 2>&1
rc1=$?
SPARSECOMM_REQUIRE_GPU=1 "$p/bin/sparsecomm-unit-gpu" gpu_bitmap >"$tmp/u2" 2>&1
rc2=$?
if grep -q 'no usable GPU' "$tmp/u1"; then
	check "sparsecomm-unit-gpu: skips fail under SPARSECOMM_REQUIRE_GPU=1" \
		"$([ "$rc1" -eq 0 ] && [ "$rc2" -ne 0 ] && grep -q '^0 passed, 1 failed$' "$tmp/u2" &&
			echo 1 || echo 0)" "exit $rc1 without, $rc2 with: $(tail -n 2 "$tmp/u2")"
else
	echo "skip  dist: sparsecomm-unit-gpu skips: this machine has a usable GPU"
fi

# device_check.sh without a GPU: S0 fails fast, every step recorded
dc() { # OUTDIR [ENV...]: runs the tree's device check, prints its exit status and seconds
	d=$1
	shift
	s=$(date +%s)
	(cd "$tmp" && env -u LD_LIBRARY_PATH "$@" sh "$p/tests/gpu/device_check.sh" "$d" 300 \
		${figures:+--figures}) >"$d.out" 2>&1 </dev/null
	echo "$? $(($(date +%s) - s))"
}
# the steps' statuses as "S0:fail S1:not_run ..."
statuses() {
	python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
s = json.load(open(sys.argv[2]))
print(" ".join("%s:%s" % (r["step"], r["status"]) for r in rows), "ok=%s" % s["ok"])' \
		"$1/results.jsonl" "$1/summary.json" 2>&1
}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
	echo "skip  dist: device_check.sh without a GPU: this machine has one"
else
	# shellcheck disable=SC2046
	set -- $(dc "$tmp/dc0")
	got=$(statuses "$tmp/dc0")
	want="S0:fail S1:not_run S2:not_run S3:not_run S4:not_run S5:not_run S6:not_run ok=False"
	ok=0
	[ "$1" -eq 1 ] && [ "$2" -lt 30 ] && [ "$got" = "$want" ] &&
		grep -q '"first_failure":"S0: no python whose torch sees CUDA' "$tmp/dc0/summary.json" &&
		[ -s "$tmp/dc0/S0.log" ] && ok=1
	check "device_check.sh without a GPU fails at S0 in $2 s, every step recorded" "$ok" \
		"exit $1 after $2 s; $got; $(cat "$tmp/dc0/summary.json" 2>/dev/null)"
	# a python that claims torch with CUDA: the later steps run, and none passes
	cat >"$tmp/fakepy" <<'EOF'
#!/bin/sh
case "$*" in
*"import torch"*) echo "2.11.0 13.0 True 1 stand-in" ;;
*"import numpy"*) echo "2.0.0" ;;
*nvidia.nccl*) echo "none: no nvidia.nccl package" ;;
*) echo "stand-in python: no GPU here"; exit 1 ;;
esac
EOF
	chmod +x "$tmp/fakepy"
	# shellcheck disable=SC2046
	set -- $(dc "$tmp/dc1" SPARSECOMM_PYTHON="$tmp/fakepy")
	got=$(statuses "$tmp/dc1")
	want="S0:pass S1:fail S2:fail S3:fail S4:fail S5:fail S6:fail ok=False"
	# each for the reason this machine gives: the trainers' python, the missing driver
	why=""
	for s in S2:1 S5:3 S6:1; do
		n=$(grep -c 'stand-in python: no GPU here' "$tmp/dc1/${s%:*}.log")
		[ "$n" -ge "${s#*:}" ] || why="$why ${s%:*}: $n stand-in trainer runs;"
	done
	grep -q 'every skipped test counts as failed' "$tmp/dc1/S3.log" || why="$why S3;"
	grep -q 'the cuda device is unavailable' "$tmp/dc1/S1.log" || why="$why S1;"
	grep -q 'transport = nccl: the cuda device is not available' "$tmp/dc1/S4.log" ||
		why="$why S4;"
	ok=0
	[ "$1" -eq 1 ] && [ "$got" = "$want" ] && [ -z "$why" ] && ok=1
	check "device_check.sh with a stand-in python: S1..S6 run and fail ($2 s)" "$ok" \
		"exit $1; $got;$why $(tail -n 3 "$tmp/dc1.out")"
	# the figures: after S0, F1..F4 from the package's own bench and examples, each failing
	# here for the reason this machine gives
	figures=1
	# shellcheck disable=SC2046
	set -- $(dc "$tmp/dc2")
	got=$(statuses "$tmp/dc2")
	ok=0
	[ "$1" -eq 1 ] &&
		[ "$got" = "S0:fail F1:not_run F4:not_run F2:not_run F3:not_run F5:not_run ok=False" ] &&
		ok=1
	check "device_check.sh --figures without a GPU: F1..F5 not run" "$ok" "exit $1; $got"
	# shellcheck disable=SC2046
	set -- $(dc "$tmp/dc3" SPARSECOMM_PYTHON="$tmp/fakepy")
	got=$(statuses "$tmp/dc3")
	why=""
	grep -q 'the cuda device is unavailable' "$tmp/dc3/F1.log" || why="$why F1;"
	for s in F2 F3; do
		grep -q 'transport = nccl: the cuda device is not available' "$tmp/dc3/$s.log" ||
			why="$why $s;"
	done
	for f in "$tmp"/dc3/F4.sparsecomm_sparsifier_none.out \
		"$tmp"/dc3/F4.sparsecomm_sparsifier_topk.out "$tmp"/dc3/F4.torchddp.out; do
		grep -q 'stand-in python: no GPU here' "$f" 2>/dev/null ||
			why="$why $(basename "$f"): no stand-in trainer run;"
	done
	grep -q 'stand-in python: no GPU here' "$tmp/dc3/F5.out" 2>/dev/null ||
		why="$why F5: no stand-in driver run;"
	ok=0
	[ "$1" -eq 1 ] && [ "$got" = "S0:pass F1:fail F4:fail F2:fail F3:fail F5:fail ok=False" ] &&
		[ -z "$why" ] && ok=1
	check "device_check.sh --figures with a stand-in python: F1..F5 run and fail ($2 s)" \
		"$ok" "exit $1; $got;$why $(tail -n 3 "$tmp/dc3.out")"
	figures=""
fi
finish
