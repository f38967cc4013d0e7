#!/bin/sh
# dist.sh: assembles the relocatable binary package (`make dist`) from a finished build:
#
#   sh mk/dist.sh BUILD_DIR VERSION OUT.tar.gz
#
# The tarball holds one folder, sparsecomm-VERSION-ARCH/, with bin/ (sparsecommd,
# sparsectl, sparsecomm-run, sparsecomm-bench, sparsecomm-unit-gpu), lib/
# (libsparseclient.so, libsparsecomm-cuda.so and every shared library they and the programs
# need that is not part of glibc), python/sparsecomm (the Python package, which loads
# ../../lib/libsparseclient.so), share/man, share/sparsecomm/sparsecommd.conf, and the GPU
# tests (tests/gpu/device_check.sh and the Python workers it runs), and what its --figures
# run measures with (bench/gpu_collective.py, bench/pytorch_fusion.py,
# examples/pytorch/digits_mlp.py and _common.py, and scikit-learn's digits.csv.gz, which
# _common.digits() reads where the python has no scikit-learn). The programs were
# linked with DT_RPATH $ORIGIN/../lib and the libraries with $ORIGIN (Makefile, RPATH_BIN
# and RPATH_LIB), so the unpacked tree runs from anywhere without LD_LIBRARY_PATH.
#
# The libraries to carry are read off the binaries themselves (ldd). Never carried: glibc's
# own libraries, and the compiler's runtime (libstdc++, libgcc_s), which every machine
# that runs PyTorch has; libgomp is not carried either, so a packaged binary that needs it
# is an error here. Debug information is stripped from everything in the package.
set -eu

build=$1
version=$2
out=$3
root=$(cd "$(dirname "$0")/.." && pwd)
name=sparsecomm-$version-$(uname -m)
mkdir -p "$build"
build=$(cd "$build" && pwd)
stage=$build/dist/$name

die() {
	echo "dist: $*" >&2
	exit 1
}

bins="sparsecommd sparsectl sparsecomm-run sparsecomm-bench sparsecomm-unit-gpu"
libs="libsparseclient.so libsparsecomm-cuda.so"
for b in $bins; do [ -x "$build/bin/$b" ] || die "$build/bin/$b is missing"; done
for l in $libs; do [ -f "$build/lib/$l" ] || die "$build/lib/$l is missing"; done

rm -rf "$build/dist"
mkdir -p "$stage/bin" "$stage/lib" "$stage/python/sparsecomm" "$stage/share/man/man1" \
	"$stage/share/man/man8" "$stage/share/sparsecomm" "$stage/tests/gpu" "$stage/tests/python" \
	"$stage/bench" "$stage/examples/pytorch"

for b in $bins; do cp "$build/bin/$b" "$stage/bin/"; done
for l in $libs; do cp "$build/lib/$l" "$stage/lib/"; done
ln -s libsparseclient.so "$stage/lib/libsparseclient.so.0"

# glibc's libraries (the loader among them) are the system's; so are the compiler's runtime
# libraries, which every machine with PyTorch has (carrying libstdc++ would shadow a newer
# one that the trainers' own extensions need).
glibc_re='^(ld-linux[^ ]*|linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libanl\.so\.1|libBrokenLocale\.so\.1|libnss_[a-z]*\.so\.2)$'
system_re='^(libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'
ldd_out=$build/dist/ldd.txt
for f in "$stage"/bin/* "$stage"/lib/libsparseclient.so "$stage"/lib/libsparsecomm-cuda.so; do
	ldd "$f" | sed "s|^|$(basename "$f"): |"
done >"$ldd_out"
if grep -q 'not found' "$ldd_out"; then
	die "unresolved libraries: $(grep 'not found' "$ldd_out" | tr '\n' ' ')"
fi
grep -q 'libgomp' "$ldd_out" &&
	die "a packaged binary needs libgomp, which GPU nodes need not have: $(grep libgomp \
		"$ldd_out" | tr '\n' ' ')"
# "prog: 	libzmq.so.5 => /lib/x86_64-linux-gnu/libzmq.so.5 (0x...)" -> name and path
awk '$3 == "=>" && $4 ~ /^\// { print $2, $4 }' "$ldd_out" | sort -u | while read -r soname path; do
	if echo "$soname" | grep -Eq "$glibc_re" || echo "$soname" | grep -Eq "$system_re"; then
		continue
	fi
	case $(readlink -f "$path") in "$stage"/*) continue ;; esac # our own, through the rpath
	cp -L "$path" "$stage/lib/$soname"
	echo "$soname"
done >"$build/dist/carried.txt"
chmod 0755 "$stage"/lib/*.so*

# Debug information only: the symbols stay (backtraces, dlsym of the GPU library).
for f in "$stage"/bin/* "$stage"/lib/*.so*; do
	[ -L "$f" ] || strip --strip-debug "$f"
done

install -m 0644 "$root"/client/python/sparsecomm/*.py "$stage/python/sparsecomm/"
cat >"$stage/python/sparsecomm/_install.py" <<'EOF'
# written by make dist: the package's own lib/, two folders up from this one
import os

LIBDIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                       "lib"))
EOF
install -m 0644 "$root/man/sparsectl.1" "$stage/share/man/man1/"
install -m 0644 "$root/man/sparsecommd.8" "$stage/share/man/man8/"
install -m 0644 "$root/config/sparsecommd.conf" "$stage/share/sparsecomm/"
install -m 0755 "$root/tests/gpu/device_check.sh" "$stage/tests/gpu/"
for f in run_tests.py worker_gpu.py checks.py forms.py; do
	install -m 0644 "$root/tests/python/$f" "$stage/tests/python/"
done
for f in _tree.py gpu_collective.py pytorch_fusion.py; do
	install -m 0644 "$root/bench/$f" "$stage/bench/"
done
for f in _common.py digits_mlp.py; do
	install -m 0644 "$root/examples/pytorch/$f" "$stage/examples/pytorch/"
done
# the digits the examples train on, for a python without scikit-learn (the GPU machine's):
# scikit-learn's own copy (Debian's python3-sklearn here), read by _common.digits()
digits=$(for py in /usr/bin/python3 python3; do
	"$py" -c 'import os, sklearn.datasets as d
print(os.path.join(os.path.dirname(d.__file__), "data", "digits.csv.gz"))' 2>/dev/null && break
done)
if [ -n "$digits" ] && [ -f "$digits" ]; then
	install -m 0644 "$digits" "$stage/examples/pytorch/digits.csv.gz"
else
	echo "dist: no scikit-learn here (python3-sklearn): the package goes without" \
		"digits.csv.gz, so its examples need scikit-learn where they run" >&2
fi
install -m 0644 "$root/docs/gpu.md" "$stage/README.md"
{
	echo "sparsecomm $version, built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
	echo "libraries carried in lib/ (the rest is glibc, libstdc++ and libgcc_s):"
	sed 's/^/  /' "$build/dist/carried.txt"
} >"$stage/MANIFEST"

tar -C "$build/dist" --owner=0 --group=0 -czf "$out" "$name"
size=$(stat -c %s "$out")
limit=$((40 << 20))
[ "$size" -lt "$limit" ] || die "$out is $size bytes, over the 40 MiB limit"
echo "dist: $out, $((size >> 10)) KiB, carrying $(wc -l <"$build/dist/carried.txt")" \
	"libraries: $(tr '\n' ' ' <"$build/dist/carried.txt")"
