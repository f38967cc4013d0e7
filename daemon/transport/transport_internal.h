/*
 * transport_internal.h: what the transport backends share and the engine does not see:
 * the setter of the thread-local error text behind scd_transport_error().
 */
#ifndef SCD_TRANSPORT_INTERNAL_H
#define SCD_TRANSPORT_INTERNAL_H

/* Formats this thread's transport error text (truncated to a fixed size). */
void scd_transport_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
