/*
 * transport.c: the parts of the transport layer common to every backend. For now that is
 * the error text: one buffer per thread, so that the engine thread's last failure stays
 * readable after the call returns without any locking (the transport is used by one
 * thread at a time, but a daemon may run tests or probes on others).
 */
#include "transport/transport.h"

#include <stdarg.h>
#include <stdio.h>

#include "transport/transport_internal.h"

static __thread char transport_error_text[512];

const char *scd_transport_error(void)
{
	return transport_error_text;
}

void scd_transport_set_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(transport_error_text, sizeof(transport_error_text), fmt, ap);
	va_end(ap);
}
