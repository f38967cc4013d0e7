/*
 * psname.h: the names of process sets' tensors inside the daemons. A tensor of a set other
 * than the global one (0) is known by its qualified name: the trainer's name, SCD_PSET_SEP
 * and the set's id in decimal. A name is a name within its set, so everything keyed by name
 * (the node's tensors, negotiation's tables and cache, residuals) keeps sets apart.
 * Trainers' names are printable, so the separator (a control byte) never occurs in one;
 * scd_pset_show rewrites qualified names for people ("w [process set 2]"), where text
 * leaves the daemon (replies to trainers, logs).
 */
#ifndef SCD_UTIL_PSNAME_H
#define SCD_UTIL_PSNAME_H

#include <stddef.h>
#include <stdint.h>

#include "sparsecomm.h"

#define SCD_PSET_SEP '\x1f'

/* The qualified name of name in set id (id 0: name itself) into buf; SC_ERR_LIMIT when it
 * does not fit. */
sc_status_t scd_pset_key(const char *name, uint32_t id, char *buf, size_t len);
/* The set of a qualified name (0: none) and the length of its trainer's name. */
uint32_t scd_pset_of(const char *key, size_t *name_len_p);
/* Rewrites, in place, every qualified name in text (NUL-terminated, in a buffer of cap
 * bytes) as "NAME [process set ID]", truncating at cap. */
void scd_pset_show(char *text, size_t cap);

#endif
