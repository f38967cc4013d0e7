/*
 * psname.c: process sets' qualified tensor names (psname.h).
 */
#include "util/psname.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sc_status_t scd_pset_key(const char *name, uint32_t id, char *buf, size_t len)
{
	int n = id ? snprintf(buf, len, "%s%c%u", name, SCD_PSET_SEP, id)
		   : snprintf(buf, len, "%s", name);
	return n < 0 || (size_t)n >= len ? SC_ERR_LIMIT : SC_OK;
}

uint32_t scd_pset_of(const char *key, size_t *name_len_p)
{
	const char *sep = strchr(key, SCD_PSET_SEP);
	if (name_len_p)
		*name_len_p = sep ? (size_t)(sep - key) : strlen(key);
	return sep ? (uint32_t)strtoul(sep + 1, NULL, 10) : 0;
}

void scd_pset_show(char *text, size_t cap)
{
	char *sep;
	while ((sep = strchr(text, SCD_PSET_SEP)) != NULL) {
		char *digits = sep + 1, *end = digits;
		while (*end >= '0' && *end <= '9')
			end++;
		char show[48];
		int n = snprintf(show, sizeof(show), " [process set %.*s]", (int)(end - digits),
				 digits);
		if (n < 0)
			return;
		if ((size_t)n >= sizeof(show)) /* a peer's text with a long run of digits */
			n = (int)sizeof(show) - 1;
		size_t head = (size_t)(sep - text), tail = strlen(end);
		size_t room = cap - 1 - head;
		size_t put = (size_t)n < room ? (size_t)n : room;
		size_t keep = tail < room - put ? tail : room - put;
		memmove(sep + put, end, keep);
		memcpy(sep, show, put);
		sep[put + keep] = 0;
		text = sep + put;
	}
}
