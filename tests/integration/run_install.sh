#!/bin/sh
# run_install.sh: `make install` puts every file where README.md ("Installing") says, with
# its mode; a second install keeps an edited /etc/sparsecomm/sparsecommd.conf; the
# installed units pass `systemd-analyze verify` (their binaries and man pages included)
# and score at most 4.0 in `systemd-analyze security`; the installed Python package finds
# the installed library; `make uninstall` removes all but the configuration. Prints
# ok/FAIL/skip per check and "N passed, N failed" (tests/run.sh adds it up).
#
#   sh tests/integration/run_install.sh       (NVCC= in the environment skips CUDA)
set -u

root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sc-install.XXXXXX") ||
	{ echo "run_install.sh: cannot create a temporary directory" >&2; exit 1; }
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
skipped=0

check() { # check NAME OK DETAIL
	if [ "$2" -eq 1 ]; then
		echo "ok    install: $1"
		passed=$((passed + 1))
	else
		echo "FAIL  install: $1: $3"
		failed=$((failed + 1))
	fi
}

mk() { # the build's make, quiet, with NVCC passed on when set
	# shellcheck disable=SC2086
	make -s -C "$root" ${NVCC+NVCC=$NVCC} "$@" >"$tmp/make.log" 2>&1
}

echo "install tests"
# 1. the staged layout of a package (DESTDIR, PREFIX /usr/local)
d=$tmp/stage
dirs="PREFIX=/usr/local SYSCONFDIR=/etc SYSTEMD_UNIT_DIR=/usr/local/lib/systemd/system"
dirs="$dirs SYSUSERS_DIR=/usr/local/lib/sysusers.d PYTHON_SITE=/usr/local/lib/py/site"
# shellcheck disable=SC2086
if ! mk install DESTDIR="$d" $dirs; then
	check "make install DESTDIR" 0 "make failed: $(tail -n 5 "$tmp/make.log")"
	echo "$passed passed, $failed failed"
	exit 1
fi
missing=""
while read -r mode path; do
	[ -z "$mode" ] && continue
	if [ ! -e "$d$path" ]; then
		missing="$missing $path(absent)"
	elif [ "$(stat -L -c '%a' "$d$path")" != "$mode" ]; then
		missing="$missing $path(mode $(stat -L -c '%a' "$d$path"), want $mode)"
	fi
done <<LIST
755 /usr/local/bin/sparsecommd
755 /usr/local/bin/sparsectl
755 /usr/local/bin/sparsecomm-run
755 /usr/local/lib/libsparseclient.so.0
755 /usr/local/lib/libsparseclient.so
644 /usr/local/lib/libsparseclient.a
644 /usr/local/include/sparsecomm.h
644 /usr/local/lib/pkgconfig/sparsecomm.pc
644 /usr/local/share/sparsecomm/sparsecommd.conf
644 /etc/sparsecomm/sparsecommd.conf
644 /usr/local/lib/systemd/system/sparsecommd.service
644 /usr/local/lib/systemd/system/sparsecommd@.service
644 /usr/local/lib/sysusers.d/sparsecomm.conf
644 /usr/local/share/man/man8/sparsecommd.8
644 /usr/local/share/man/man1/sparsectl.1
644 /usr/local/lib/py/site/sparsecomm/__init__.py
644 /usr/local/lib/py/site/sparsecomm/_lib.py
644 /usr/local/lib/py/site/sparsecomm/torch.py
644 /usr/local/lib/py/site/sparsecomm/_install.py
LIST
check "every file in place" "$([ -z "$missing" ] && echo 1 || echo 0)" "$missing"

unit=$d/usr/local/lib/systemd/system/sparsecommd.service
tmpl=$d/usr/local/lib/systemd/system/sparsecommd@.service
ok=0
grep -q '^ExecStart=/usr/local/bin/sparsecommd --config /etc/sparsecomm/sparsecommd.conf ' \
	"$unit" && grep -q '^User=sparsecomm$' "$unit" && grep -q '^Group=sparsecomm$' "$unit" &&
	grep -q '^ExecStart=.* --config /etc/sparsecomm/%i.conf --runtime_dir /run/sparsecomm-%i ' \
		"$tmpl" && grep -q '^RuntimeDirectory=sparsecomm-%i$' "$tmpl" && ok=1
check "units name the installed daemon and configuration" "$ok" \
	"$(grep -h '^ExecStart\|^User\|^Group\|^RuntimeDirectory=' "$unit" "$tmpl" | tr '\n' ' ')"

echo "# kept" >>"$d/etc/sparsecomm/sparsecommd.conf"
# shellcheck disable=SC2086
mk install DESTDIR="$d" $dirs
ok=0
tail -n 1 "$d/etc/sparsecomm/sparsecommd.conf" | grep -q '^# kept$' && ok=1
check "an existing configuration is kept" "$ok" "the edited file was overwritten"

# the package's loader alone (its __init__ wants numpy, which this check does not need)
out=$(python3 -c 'import sys, types
pkg = types.ModuleType("sparsecomm")
pkg.__path__ = [sys.argv[1]]
sys.modules["sparsecomm"] = pkg
import sparsecomm._lib as l
print(l.candidate_paths())' "$d/usr/local/lib/py/site/sparsecomm" 2>&1)
ok=0
case $out in *"'/usr/local/lib/libsparseclient.so'"*) ok=1 ;; esac
check "the Python package looks in the installed library directory" "$ok" "$out"

# The default PYTHON_SITE is a directory each python3 here searches: for its own prefix,
# and for /usr/local where it searches one under it (Debian's python3:
# /usr/local/lib/python3.X/dist-packages, where its default sysconfig scheme would name
# /usr/local/local/lib/...). A package installed elsewhere would not import.
for py in /usr/bin/python3 "$(command -v python3)"; do
	[ -x "$py" ] || continue
	for pre in $("$py" -c 'import sys; print(sys.prefix)') /usr/local; do
		want=$("$py" -c 'import sys; p = sys.argv[1] + "/lib/"
print(" ".join(d for d in sys.path if d.startswith(p)))' "$pre")
		[ -z "$want" ] && continue
		site=$(env PATH="$(dirname "$py"):$PATH" make -s -C "$root" \
			--no-print-directory PREFIX="$pre" print-python-site 2>&1)
		ok=0
		case " $want " in *" $site "*) ok=1 ;; esac
		check "PYTHON_SITE for $py, PREFIX $pre, is on its path" "$ok" \
			"'$site', not one of: $want"
	done
done

# shellcheck disable=SC2086
mk uninstall DESTDIR="$d" $dirs
left=$(cd "$d" && find . -type f -o -type l | sort | tr '\n' ' ')
check "uninstall leaves only the configuration" \
	"$([ "$left" = "./etc/sparsecomm/sparsecommd.conf " ] && echo 1 || echo 0)" "left: $left"

# 2. the units against their installed files: a prefix install whose paths exist here
p=$tmp/prefix
if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "skip  install: systemd-analyze verify and security: systemd-analyze is not installed"
	skipped=$((skipped + 1))
elif ! mk install PREFIX="$p" SYSCONFDIR="$p/etc" SYSTEMD_UNIT_DIR="$p/units" \
	SYSUSERS_DIR="$p/sysusers" PYTHON_SITE="$p/py"; then
	check "make install PREFIX" 0 "$(tail -n 5 "$tmp/make.log")"
else
	MANPATH=$p/share/man systemd-analyze verify --man=yes "$p/units/sparsecommd.service" \
		"$p/units/sparsecommd@.service" >"$tmp/verify" 2>&1
	rc=$?
	check "systemd-analyze verify is clean" "$([ $rc -eq 0 ] && [ ! -s "$tmp/verify" ] &&
		echo 1 || echo 0)" "exit $rc: $(cat "$tmp/verify")"
	for u in sparsecommd.service sparsecommd@.service; do
		score=$(systemd-analyze security --offline=yes "$p/units/$u" 2>/dev/null |
			sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
		ok=0
		[ -n "$score" ] && awk "BEGIN { exit !($score <= 4.0) }" && ok=1
		check "systemd-analyze security of $u at most 4.0" "$ok" "score '$score'"
	done
fi

[ "$skipped" -gt 0 ] && echo "($skipped skipped)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
