/*
 * pset.h: the node's process sets (sc_process_set_add): each set's id, its members' global
 * trainer ranks and what follows from them for this node (which local trainers are members,
 * which nodes have one). The trainers agree on a set among themselves before they tell
 * their daemon (client/lib/pset.c), so the table only records it; every trainer of the node
 * tells it, and a repeat is accepted when it says the same.
 *
 * A tensor of a set other than the global one (0) is known inside the daemons by its
 * qualified name (util/psname.h).
 */
#ifndef SCD_CTL_PSET_H
#define SCD_CTL_PSET_H

#include <stddef.h>
#include <stdint.h>

#include "sparsecomm.h"
#include "util/psname.h"

typedef struct scd_pset {
	uint32_t id;
	int n_ranks;
	int *ranks;	     /* ascending global trainer ranks */
	int n_nodes;	     /* nodes with a member */
	int *nodes;	     /* ascending */
	uint64_t local_mask; /* this node's member trainers, by local rank */
	int n_local;	     /* their number */
} scd_pset_t;

typedef struct scd_psets {
	scd_pset_t *v;
	int n, cap;
	int node, local_size; /* this node and the trainers a node */
} scd_psets_t;

void scd_psets_init(scd_psets_t *t, int node, int local_size);
void scd_psets_free(scd_psets_t *t);
/* The set of that id (NULL: unknown; the global set 0 is never in the table). */
const scd_pset_t *scd_psets_find(const scd_psets_t *t, uint32_t id);
/* Records set id with n ranks (checked: in range, ascending, no repeats; an id known with
 * other ranks is SC_ERR_MISMATCH), with err naming what was wrong. */
sc_status_t scd_psets_define(scd_psets_t *t, uint32_t id, const int32_t *ranks, int n,
			     int world_ranks, char *err, size_t err_len);
/* Forgets set id (nothing when unknown: another trainer of the node removed it first). */
void scd_psets_remove(scd_psets_t *t, uint32_t id);
/* Whether trainer (global rank) is a member of set id (0: always). */
int scd_pset_member(const scd_pset_t *p, int rank);

#endif
