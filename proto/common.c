/* common.c: status, dtype and reduction tables shared by the client library and the daemon. */
#include "sparsecomm.h"

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
	}
	return "unknown";
}
