#!/usr/bin/python3
"""Compares the ctypes mirror (client/python/sparsecomm/_lib.py) with the C header:
compiles a program that prints every enum value and the size and field offsets of
sc_tensor_opts_t, and checks them against the Python side.  Prints CHECK lines.

With --example: the example at the top of the header (the indented lines after its
"Example (compiled and run by tests/python/check_header.py)" line) is wrapped in a main()
that fills grad, compiled against the built library, run by 2 trainers on 2 daemons under
build/bin/sparsecomm-run, and must exit 0 with the average in grad on every trainer."""
import ctypes
import os
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
from sparsecomm import _lib  # noqa: E402

PROG = r"""
#include <stdio.h>
#include <stddef.h>
#include "sparsecomm.h"
int main(void) {
#define S(name, value, msg) printf("status %s %d\n", #name, SC_##name);
	SC_STATUS_MAP(S)
	printf("dtype FLOAT32 %d\ndtype FLOAT64 %d\ndtype INT32 %d\ndtype INT64 %d\n",
	       SC_FLOAT32, SC_FLOAT64, SC_INT32, SC_INT64);
	printf("op SUM %d\nop AVERAGE %d\nop MIN %d\nop MAX %d\nop PRODUCT %d\nop ADASUM %d\n",
	       SC_OP_SUM, SC_OP_AVERAGE, SC_OP_MIN, SC_OP_MAX, SC_OP_PRODUCT, SC_OP_ADASUM);
	printf("dev CPU %d\ndev CUDA %d\n", SC_DEVICE_CPU, SC_DEVICE_CUDA);
	printf("wire NATIVE %d\nwire FP16 %d\nwire BF16 %d\n", SC_WIRE_NATIVE, SC_WIRE_FP16,
	       SC_WIRE_BF16);
	printf("sp NONE %d\nsp TOPK %d\nsp THRESHOLD %d\nsp DGC %d\nsp EXDYNA %d\n"
	       "sp NATURAL %d\nsp BLOCK_TOPK %d\n", SC_SPARSIFY_NONE, SC_SPARSIFY_TOPK,
	       SC_SPARSIFY_THRESHOLD, SC_SPARSIFY_DGC, SC_SPARSIFY_EXDYNA, SC_SPARSIFY_NATURAL,
	       SC_SPARSIFY_BLOCK_TOPK);
	printf("size opts %zu\nsize sparsifier %zu\nsize handle %zu\n",
	       sizeof(sc_tensor_opts_t), sizeof(sc_sparsifier_t), sizeof(sc_handle_t));
#define O(f) printf("off %s %zu\n", #f, offsetof(sc_tensor_opts_t, f));
	O(struct_size) O(allow_lossy) O(sparsifier) O(density) O(threshold) O(scheme)
	O(coo_capacity) O(sketch_rows) O(sketch_cols) O(device) O(device_ordinal) O(wire)
	O(block) O(process_set) O(src_type)
	printf("pset GLOBAL %d\n", SC_PROCESS_SET_GLOBAL);
	printf("proto %d\n", SC_PROTOCOL_VERSION);
	return 0;
}
"""


HEADER = os.path.join(ROOT, "client", "include", "sparsecomm.h")
EXAMPLE_MARK = "Example (compiled and run by tests/python/check_header.py)"

WRAP = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sparsecomm.h"
static int example(float *grad, size_t n)
{
@EXAMPLE@
	return st == SC_OK ? 0 : 1;
}
int main(void)
{
	const char *r = getenv("SPARSECOMM_RANK"), *p = getenv("SPARSECOMM_SIZE");
	int rank = r ? atoi(r) : 0, size = p ? atoi(p) : 1;
	size_t n = 1000;
	float *grad = malloc(n * sizeof(float));
	if (!grad)
		return 2;
	for (size_t i = 0; i < n; i++)
		grad[i] = (float)((rank + 1) * (int)(i % 7));
	if (example(grad, n) != 0)
		return 1;
	for (size_t i = 0; i < n; i++) {
		float want = (float)((size + 1) * (int)(i % 7)) / 2.0f;
		if (grad[i] != want) {
			printf("CHECK header_example FAIL rank %d: grad[%zu] = %g, want %g\n",
			       rank, i, grad[i], want);
			return 1;
		}
	}
	printf("CHECK header_example ok\n");
	free(grad);
	return 0;
}
"""


def header_example():
    """The example's code lines from the header comment, without the ' * ' prefix."""
    with open(HEADER) as f:
        lines = f.read().splitlines()
    start = [i for i, ln in enumerate(lines) if EXAMPLE_MARK in ln]
    if len(start) != 1:
        raise SystemExit("CHECK header_example FAIL the header has %d '%s' lines" %
                         (len(start), EXAMPLE_MARK))
    code = []
    for ln in lines[start[0] + 1:]:
        if not ln.startswith(" *     "):
            break
        code.append("\t" + ln[len(" *     "):])
    if not code:
        raise SystemExit("CHECK header_example FAIL no indented code after the mark")
    return "\n".join(code)


def run_example():
    lib = os.path.join(ROOT, "build", "lib")
    run = os.path.join(ROOT, "build", "bin", "sparsecomm-run")
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "example.c"), os.path.join(d, "example")
        with open(src, "w") as f:
            f.write(WRAP.replace("@EXAMPLE@", header_example()))
        cc = subprocess.run(["cc", "-std=gnu11", "-Wall", "-Werror", "-I",
                             os.path.join(ROOT, "client", "include"), src, "-o", exe,
                             "-L", lib, "-Wl,-rpath," + lib, "-lsparseclient"],
                            capture_output=True, text=True)
        if cc.returncode != 0:
            print("CHECK header_example FAIL the header's example does not compile:\n" +
                  cc.stdout + cc.stderr)
            return 1
        try:
            p = subprocess.run([run, "-n", "2", "--timeout", "60", "--", exe],
                               capture_output=True, text=True, timeout=90)
        except subprocess.TimeoutExpired:
            print("CHECK header_example FAIL no result within 90 s")
            return 1
    out = p.stdout + p.stderr
    ok = p.returncode == 0 and out.count("CHECK header_example ok") == 2
    print("CHECK header_example %s" % ("ok" if ok else "FAIL exit %d:\n%s" %
                                         (p.returncode, out[-2000:])))
    return 0 if ok else 1


def main():
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "h.c"), os.path.join(d, "h")
        with open(src, "w") as f:
            f.write(PROG)
        subprocess.run(["cc", "-std=gnu11", "-I", os.path.join(ROOT, "client", "include"),
                        src, "-o", exe], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    c = {}
    for ln in out.splitlines():
        kind, *rest = ln.split()
        c.setdefault(kind, {})[rest[0] if len(rest) > 1 else ""] = int(rest[-1])
    bad = []
    if c["status"] != _lib.STATUS_VALUES:
        bad.append("status codes: header %s, python %s" % (c["status"], _lib.STATUS_VALUES))
    for kind, enum in (("dtype", _lib.DType), ("sp", _lib.Sparsifier),
                       ("dev", _lib.DeviceKind), ("wire", _lib.Wire)):
        py = {m.name: int(m) for m in enum}
        if c[kind] != py:
            bad.append("%s: header %s, python %s" % (kind, c[kind], py))
    # ReduceOp is numbered as Horovod's; what it gives the library is c_op
    py = {m.name: m.c_op for m in _lib.ReduceOp}
    if c["op"] != py:
        bad.append("op: header %s, python ReduceOp.c_op %s" % (c["op"], py))
    if c["size"]["opts"] != ctypes.sizeof(_lib.TensorOpts):
        bad.append("sizeof(sc_tensor_opts_t) %d, ctypes %d" %
                   (c["size"]["opts"], ctypes.sizeof(_lib.TensorOpts)))
    if c["size"]["sparsifier"] != ctypes.sizeof(ctypes.c_int):
        bad.append("sc_sparsifier_t is not int-sized")
    if c["size"]["handle"] != ctypes.sizeof(_lib.c_handle):
        bad.append("sc_handle_t size")
    for name, _ in _lib.TensorOpts._fields_:
        if getattr(_lib.TensorOpts, name).offset != c["off"][name]:
            bad.append("offset of %s: header %d, ctypes %d" %
                       (name, c["off"][name], getattr(_lib.TensorOpts, name).offset))
    if c["pset"]["GLOBAL"] != _lib.SC_PROCESS_SET_GLOBAL:
        bad.append("SC_PROCESS_SET_GLOBAL")
    if c["proto"][""] != _lib.SC_PROTOCOL_VERSION:
        bad.append("protocol version")
    print("CHECK header_mirror %s" % ("ok" if not bad else "FAIL " + "; ".join(bad)))
    return 1 if bad else 0


sys.exit(run_example() if sys.argv[1:] == ["--example"] else main())
