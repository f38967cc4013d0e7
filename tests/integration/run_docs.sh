#!/bin/sh
# run_docs.sh: the command lines that README.md, docs/ and the man pages show for
# sparsecommd, sparsectl, sparsecomm-run and sparsecomm-bench take only options and
# commands the built tools have, and horovodrun's flags are accepted or refused as the
# README says (tests/integration/docs_commands.py). No daemons. Ends with
# "N passed, N failed" (tests/run.sh adds it up).
#
#   sh tests/integration/run_docs.sh [SUBSTRING...]   the filters are ignored: one suite
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
for b in sparsecommd sparsectl sparsecomm-run sparsecomm-bench; do
	if [ ! -x "$root/build/bin/$b" ]; then
		echo "FAIL  docs: $root/build/bin/$b is missing (run make first)"
		echo "0 passed, 1 failed"
		exit 1
	fi
done
python3 "$root/tests/integration/docs_commands.py" "$root"
