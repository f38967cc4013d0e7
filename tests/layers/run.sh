#!/bin/sh
# run.sh: the layer check's own tests (mk/layers.sh, `make check-layers`). Each case copies
# daemon/ and the check into a scratch tree, breaks one rule there (an include a rule
# forbids, a circle, a stale ALLOWED line, an upcall into main.c at link time) and passes
# when the check fails naming the file, the line and the include; the untouched copy must
# pass. Prints "ok"/"FAIL" per case and ends with "N passed, N failed". A few seconds.
#
#   sh tests/layers/run.sh
set -u

root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sc-layers-test.XXXXXX") ||
	{ echo "tests/layers/run.sh: cannot create a temporary directory" >&2; exit 1; }
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
passed=0
failed=0
n=0

# scratch: a fresh copy of daemon/ and mk/layers.sh in $tree.
scratch() {
	n=$((n + 1))
	tree=$tmp/t$n
	mkdir -p "$tree/mk" && cp -R "$root/daemon" "$tree/" &&
		cp "$root/mk/layers.sh" "$tree/mk/"
}

# add_include FILE INC: appends #include "INC" to daemon/FILE; $line is its line number.
add_include() {
	printf '#include "%s"\n' "$2" >>"$tree/daemon/$1"
	line=$(wc -l <"$tree/daemon/$1" | tr -d ' ')
}

# expect NAME STATUS TEXT: the check on $tree exits STATUS (0 or 1), printing TEXT.
expect() {
	sh "$tree/mk/layers.sh" "$tree" >"$tmp/out" 2>&1
	rc=$?
	if [ "$rc" -eq "$2" ] && grep -qF -- "$3" "$tmp/out"; then
		echo "ok    $1"
		passed=$((passed + 1))
	else
		echo "FAIL  $1: exit $rc (want $2), wanted the line: $3"
		sed 's/^/      | /' "$tmp/out"
		failed=$((failed + 1))
	fi
}

scratch
expect "the tree as it is passes" 0 "layers: ok ("

scratch
add_include ctl/ctl.c world/world.h
expect "ctl includes world" 1 \
	"daemon/ctl/ctl.c:$line includes \"world/world.h\" (daemon/world/world.h), which \"ctl/*"

scratch
add_include device/reduce.c engine/engine.h
expect "a lower layer includes the engine" 1 \
	"daemon/device/reduce.c:$line includes \"engine/engine.h\""

scratch
add_include scheme/scheme.c daemon.h
expect "a lower layer includes daemon.h" 1 "daemon/scheme/scheme.c:$line includes \"daemon.h\""

scratch
add_include engine/engine.c ctl/ctl.h
expect "the engine includes ctl" 1 "daemon/engine/engine.c:$line includes \"ctl/ctl.h\""

scratch
add_include world/world.c ../main.c
expect "world includes main.c" 1 "daemon/world/world.c:$line includes \"../main.c\""

scratch
add_include transport/tcp.c device/cuda.h
expect "CUDA above the device layer" 1 "daemon/transport/tcp.c:$line includes \"device/cuda.h\""

# a rule taken out, so that only the circle finds what the include does
scratch
sed -i '/^engine\/\* | world\/\*/d' "$tree/mk/layers.sh"
add_include engine/engine.c world/world.h
expect "a circle between engine and world" 1 \
	"the layers include each other in a circle: engine/* -> world/* -> engine/*"

# an ALLOWED line whose include is not there
scratch
sed -i "s|^ALLOWED='\$|&\\nengine/engine.c device/cuda.h|" "$tree/mk/layers.sh"
expect "a stale ALLOWED line" 1 "ALLOWED lists engine/engine.c -> device/cuda.h"

# the link: a libscd.a whose world.o calls a function of main.o
if command -v cc >/dev/null 2>&1 && command -v ar >/dev/null 2>&1 &&
	command -v nm >/dev/null 2>&1; then
	scratch
	mkdir -p "$tree/build/obj/daemon" "$tree/build/lib"
	printf 'void scd_up(int c) { (void)c; }\nint main(void) { return 0; }\n' >"$tmp/main.c"
	printf 'void scd_up(int c);\nvoid world_stop(void) { scd_up(1); }\n' >"$tmp/world.c"
	printf 'void world_stop(void) {}\n' >"$tmp/hooked.c"
	cc -c "$tmp/main.c" -o "$tree/build/obj/daemon/main.o" &&
		cc -c "$tmp/world.c" -o "$tmp/world.o" && cc -c "$tmp/hooked.c" -o "$tmp/hooked.o" &&
		ar rcs "$tree/build/lib/libscd.a" "$tmp/world.o"
	expect "libscd.a calls into main.c" 1 \
		"layers: build/lib/libscd.a uses what daemon/main.c defines (scd_up )"
	rm -f "$tree/build/lib/libscd.a" && ar rcs "$tree/build/lib/libscd.a" "$tmp/hooked.o"
	expect "libscd.a that does not" 0 \
		"layers: ok (build/lib/libscd.a uses nothing daemon/main.c defines)"
else
	echo "skip  the link cases: cc, ar or nm not found"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
