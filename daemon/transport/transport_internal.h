/*
 * transport_internal.h: what the transport backends and the registry share and the engine
 * does not see: the setter of the thread-local error text behind scd_transport_error(),
 * and each backend's ops table.
 */
#ifndef SCD_TRANSPORT_INTERNAL_H
#define SCD_TRANSPORT_INTERNAL_H

#include "transport/transport.h"

/* Formats this thread's transport error text (truncated to a fixed size). */
void scd_transport_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The backends' ops tables (tcp.c; nccl.c where built, see transport.c). */
extern const scd_transport_ops_t scd_transport_tcp_ops;
extern const scd_transport_ops_t scd_transport_nccl_ops;

#endif
