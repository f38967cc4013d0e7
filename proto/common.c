/* common.c: status, dtype and reduction tables shared by the client library and the
 * daemon, and the default places of a daemon's control socket (rundir.h). */
#include "sparsecomm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rundir.h"

SC_API const char *sc_status_name(sc_status_t status)
{
	switch (status) {
#define SC_STATUS_NAME_(name, value, msg)                                                      \
	case SC_##name:                                                                        \
		return "SC_" #name;
		SC_STATUS_MAP(SC_STATUS_NAME_)
#undef SC_STATUS_NAME_
	}
	return "SC_UNKNOWN_STATUS";
}

SC_API const char *sc_status_message(sc_status_t status)
{
	switch (status) {
#define SC_STATUS_MSG_(name, value, msg)                                                       \
	case SC_##name:                                                                        \
		return msg;
		SC_STATUS_MAP(SC_STATUS_MSG_)
#undef SC_STATUS_MSG_
	}
	return "unknown status";
}

SC_API size_t sc_dtype_size(sc_dtype_t dtype)
{
	switch (dtype) {
	case SC_FLOAT32:
	case SC_INT32:
		return 4;
	case SC_FLOAT64:
	case SC_INT64:
		return 8;
	}
	return 0;
}

SC_API const char *sc_dtype_name(sc_dtype_t dtype)
{
	switch (dtype) {
	case SC_FLOAT32:
		return "float32";
	case SC_FLOAT64:
		return "float64";
	case SC_INT32:
		return "int32";
	case SC_INT64:
		return "int64";
	}
	return "unknown";
}

SC_API const char *sc_wire_name(sc_wire_t wire)
{
	switch (wire) {
	case SC_WIRE_NATIVE:
		return "native";
	case SC_WIRE_FP16:
		return "fp16";
	case SC_WIRE_BF16:
		return "bf16";
	}
	return "unknown";
}

SC_API int sc_src_type_carrier(sc_src_type_t src)
{
	switch (src) {
	case SC_SRC_INT8:
	case SC_SRC_UINT8:
	case SC_SRC_INT16:
	case SC_SRC_UINT16:
	case SC_SRC_UINT32:
	case SC_SRC_BOOL:
		return SC_INT32;
	case SC_SRC_FLOAT16:
	case SC_SRC_BFLOAT16:
		return SC_FLOAT32;
	case SC_SRC_UINT64:
		return SC_INT64;
	case SC_SRC_NATIVE:
		break;
	}
	return -1;
}

SC_API const char *sc_src_type_name(sc_src_type_t src, sc_dtype_t dtype)
{
	static const char *const names[] = {
	    [SC_SRC_INT8] = "int8",	  [SC_SRC_UINT8] = "uint8",
	    [SC_SRC_INT16] = "int16",	  [SC_SRC_UINT16] = "uint16",
	    [SC_SRC_UINT32] = "uint32",	  [SC_SRC_BOOL] = "bool",
	    [SC_SRC_FLOAT16] = "float16", [SC_SRC_BFLOAT16] = "bfloat16",
	    [SC_SRC_UINT64] = "uint64",
	};
	if (src == SC_SRC_NATIVE)
		return sc_dtype_name(dtype);
	if ((unsigned)src < sizeof(names) / sizeof(names[0]) && names[src])
		return names[src];
	return "unknown";
}

char *sc_rundir_default(unsigned uid, char *buf, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (uid == 0)
		snprintf(buf, len, "%s", SC_RUNDIR_SYSTEM);
	else if (xdg && *xdg)
		snprintf(buf, len, "%s/sparsecomm", xdg);
	else
		snprintf(buf, len, "/tmp/sparsecomm-%u", uid);
	return buf;
}

char *sc_socket_default(char *buf, size_t len)
{
	const char *env = getenv("SPARSECOMM_SOCKET");
	char dir[PATH_MAX];
	struct stat st;
	if (env && *env) {
		snprintf(buf, len, "%s", env);
		return buf;
	}
	snprintf(buf, len, "%s/ctl.sock",
		 sc_rundir_default((unsigned)geteuid(), dir, sizeof(dir)));
	if (stat(buf, &st) != 0)
		snprintf(buf, len, "%s/ctl.sock", SC_RUNDIR_SYSTEM);
	return buf;
}

SC_API const char *sc_reduce_op_name(sc_reduce_op_t op)
{
	switch (op) {
	case SC_OP_SUM:
		return "sum";
	case SC_OP_AVERAGE:
		return "average";
	case SC_OP_MIN:
		return "min";
	case SC_OP_MAX:
		return "max";
	case SC_OP_PRODUCT:
		return "product";
	case SC_OP_ADASUM:
		return "adasum";
	}
	return "unknown";
}
