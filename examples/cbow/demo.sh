#!/bin/sh
# demo.sh: the `make demo` entry point. Trains CBOW word embeddings on the King James Bible
# data-parallel over 4 local nodes: sparsecomm-run starts 4 sparsecommd daemons and one
# trainer per node, every trainer averages its gradients through its daemon each step, and
# every 100 steps the ranks verify that they hold identical weights. Arguments are passed
# to the trainer (e.g. `sh examples/cbow/demo.sh --steps 200`; see sparsecomm-cbow --help).
# Exits with the launcher's status.
set -u
cd "$(dirname "$0")/../.." || exit 1
BIN=build/bin
NODES=4
for f in "$BIN/sparsecomm-run" "$BIN/sparsecommd" "$BIN/sparsecomm-cbow"; do
	if [ ! -x "$f" ]; then
		echo "demo: $f is missing: run 'make all' first" >&2
		exit 1
	fi
done
if ! command -v bible >/dev/null 2>&1; then
	echo "demo: the 'bible' reader is missing: install bible-kjv (make deps)" >&2
	exit 1
fi
echo "demo: training word embeddings (CBOW, negative sampling) on the King James Bible"
echo "demo: $NODES nodes, one daemon and one trainer each; the gradients of both embedding"
echo "demo: matrices are averaged through sparsecomm every step; progress from rank 0:"
echo "demo: $BIN/sparsecomm-run -n $NODES --timeout 600 -- $BIN/sparsecomm-cbow --check-sync 100 --print-every 100 $*"
start=$(date +%s)
"$BIN/sparsecomm-run" -n "$NODES" --timeout 600 -- "$BIN/sparsecomm-cbow" --check-sync 100 --print-every 100 "$@"
rc=$?
end=$(date +%s)
if [ "$rc" -eq 0 ]; then
	echo "demo: done in $((end - start)) s"
else
	echo "demo: FAILED with status $rc after $((end - start)) s" >&2
fi
exit "$rc"
