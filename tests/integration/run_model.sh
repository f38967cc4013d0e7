#!/bin/sh
# run_model.sh: the cost model's planner, `sparsecomm-bench model` (bench/model.c), held by
# tests/integration/bench_model.py to the registry (every scheme priced, with the peers)
# and to what the model must do (positive times and bytes, monotone where the formulas
# are). No daemons. Ends with "N passed, N failed" (tests/run.sh adds it up).
#
#   sh tests/integration/run_model.sh [SUBSTRING...]   the filters are ignored: one suite
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bench=$root/build/bin/sparsecomm-bench
if [ ! -x "$bench" ]; then
	echo "FAIL  model: $bench is missing (run make first)"
	echo "0 passed, 1 failed"
	exit 1
fi
python3 "$root/tests/integration/bench_model.py" "$bench" "$root/daemon/scheme/registry.h"
