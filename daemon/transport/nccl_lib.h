/*
 * nccl_lib.h: NCCL, loaded at run time. The daemon links nothing of NCCL: the first call
 * of scd_nccl_api_get opens libnccl.so.2 ($SPARSECOMM_NCCL_LIB names the one file to
 * use; else the loader's search, then the nvidia-nccl wheel of the trainers' Python
 * (wheel.h), then the CUDA toolkit's copy the build found) and resolves the entry points the
 * nccl backend uses into a table of pointers typed from nccl.h. A machine without the
 * library, or with one older than the non-blocking communicators (NCCL 2.14), reports
 * SC_ERR_UNSUPPORTED, with the reason in scd_nccl_unavailable_reason() (logged once at
 * debug level), and nothing else changes.
 */
#ifndef SCD_TRANSPORT_NCCL_LIB_H
#define SCD_TRANSPORT_NCCL_LIB_H

#include <nccl.h>

#include "sparsecomm.h"

#define SCD_NCCL_API(X)                                                                        \
	X(GetVersion, ncclGetVersion)                                                          \
	X(GetUniqueId, ncclGetUniqueId)                                                        \
	X(CommInitRankConfig, ncclCommInitRankConfig)                                          \
	X(CommGetAsyncError, ncclCommGetAsyncError)                                            \
	X(CommAbort, ncclCommAbort)                                                            \
	X(CommFinalize, ncclCommFinalize)                                                      \
	X(CommDestroy, ncclCommDestroy)                                                        \
	X(GetErrorString, ncclGetErrorString)                                                  \
	X(GetLastError, ncclGetLastError)                                                      \
	X(GroupStart, ncclGroupStart)                                                          \
	X(GroupEnd, ncclGroupEnd)                                                              \
	X(Send, ncclSend)                                                                      \
	X(Recv, ncclRecv)                                                                      \
	X(AllReduce, ncclAllReduce)

typedef struct scd_nccl_api {
	int version;	/* as ncclGetVersion gives it, e.g. 22809 */
	char path[512]; /* SCD_WHEEL_PATH_MAX (transport/wheel.h) */
#define SCD_NCCL_FIELD_(field, sym) __typeof__(&sym) field;
	SCD_NCCL_API(SCD_NCCL_FIELD_)
#undef SCD_NCCL_FIELD_
} scd_nccl_api_t;

/* The loaded library's entry points, or SC_ERR_UNSUPPORTED (see above). Thread-safe. */
sc_status_t scd_nccl_api_get(const scd_nccl_api_t **api_p);
const char *scd_nccl_unavailable_reason(void);

#endif
