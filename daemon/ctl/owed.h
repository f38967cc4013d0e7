/*
 * owed.h: the failed steps a node's trainers still owe for names no trainer of the node
 * holds any more. A node tensor counts, per local rank, the steps that failed before that
 * trainer submitted them (ctl.c, carry): the trainer's next submissions of the name
 * are those steps, refused, so that the one after pairs with the other ranks' step of the
 * same number. When every trainer of the node releases the name (a binding that releases
 * names it has not used for a while does so routinely) the node tensor goes, and its
 * counts would go with it: the late trainer's step would then pair with the others' next
 * one, a wrong sum on every rank. So the counts are kept here by name until the name is
 * registered again, and go when the trainer that owes them ends (its successor starts
 * afresh). At most SCD_OWED_KEEP_MAX names are kept; past that the oldest is dropped,
 * with an error logged.
 */
#ifndef SCD_CTL_OWED_H
#define SCD_CTL_OWED_H

#include <stdint.h>

#include "daemon.h"

#define SCD_OWED_KEEP_MAX  4096
#define SCD_OWED_MSG_BYTES 384

typedef struct scd_owed {
	uint16_t count[SCD_MAX_LOCAL]; /* by local rank */
	int status;		       /* the error the owed submissions get */
	char msg[SCD_OWED_MSG_BYTES];
} scd_owed_t;

typedef struct scd_owed_kept scd_owed_kept_t;

/* Zero-initialised it is empty. */
typedef struct scd_owed_keep {
	scd_owed_kept_t *v; /* oldest first */
	size_t n, cap;
} scd_owed_keep_t;

/* Whether o counts any owed step. */
int scd_owed_any(const scd_owed_t *o);
/* Keeps o for name (a name kept already: o replaces it); nothing when o owes nothing. */
void scd_owed_put(scd_owed_keep_t *k, const char *name, const scd_owed_t *o);
/* Takes name's kept counts into *o (and forgets them): 1, or 0 when none are kept. */
int scd_owed_take(scd_owed_keep_t *k, const char *name, scd_owed_t *o);
/* Local rank l owes nothing any more, for any name kept. */
void scd_owed_forgive(scd_owed_keep_t *k, int l);
void scd_owed_clear(scd_owed_keep_t *k);

#endif
