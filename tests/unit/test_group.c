/*
 * test_group.c: the coordinator's decisions on grouped operations (world/group.c), on
 * entries made by hand for a world of two ranks: a whole group goes out together, an
 * incomplete one is held and then stalls naming the missing member, groups the ranks
 * formed differently fail every member once settled (and owe no step), and an ungrouped
 * tensor is left alone.
 */
#include <stdio.h>
#include <string.h>

#include "unit.h"
#include "world/world_int.h"

#define GT_P 2

typedef struct gt_fix {
	scd_daemon_t d;
	scd_world_t w;
	scd_peer_t peers[GT_P];
	/* failures the pass reported, in order */
	char failed[8][32];
	int n_failed, late[8], status[8];
	char msg[1400];
} gt_fix_t;

static void gt_init(gt_fix_t *f)
{
	memset(f, 0, sizeof(*f));
	f->d.world_size = GT_P;
	f->d.local_size = 1;
	f->w.d = &f->d;
	f->w.peers = f->peers;
	f->w.is_coord = 1;
}

/* An entry for name, announced by the ranks in have (a bit per rank), in arrival order. */
static scd_centry_t *gt_entry(gt_fix_t *f, const char *name, unsigned have, uint64_t first_ms)
{
	scd_centry_t *e = calloc(1, sizeof(*e));
	CHECK_TRUE(e != NULL);
	e->name = strdup(name);
	e->have = calloc(GT_P, 1);
	e->dtype = calloc(GT_P, sizeof(uint32_t));
	e->op = calloc(GT_P, sizeof(uint32_t));
	e->numel = calloc(GT_P, sizeof(uint64_t));
	e->sig = calloc(GT_P, sizeof(scd_tsig_t));
	for (int r = 0; r < GT_P; r++) {
		e->numel[r] = 16;
		if (have >> r & 1) {
			e->have[r] = 1;
			e->count++;
		}
	}
	e->first_ms = first_ms;
	scd_centry_t **pp = &f->w.ehead;
	while (*pp)
		pp = &(*pp)->next;
	*pp = e;
	return e;
}

static void gt_tag(gt_fix_t *f, int rank, const char *name, uint64_t group, uint32_t size)
{
	Sparsecomm__GroupTag t = SPARSECOMM__GROUP_TAG__INIT;
	t.name = (char *)name;
	t.group = group;
	t.size = size;
	scd_group_tag(&f->w, rank, &t);
}

/* The pass's failure: recorded, and the entry taken out and freed as negotiate.c does. */
static void gt_fail(scd_world_t *w, void *arg, scd_centry_t *e, sc_status_t st, const char *msg,
		    int late)
{
	gt_fix_t *f = arg;
	if (f->n_failed < 8) {
		snprintf(f->failed[f->n_failed], sizeof(f->failed[0]), "%s", e->name);
		f->late[f->n_failed] = late;
		f->status[f->n_failed++] = st;
	}
	snprintf(f->msg, sizeof(f->msg), "%s", msg);
	scd_centry_t **pp = &w->ehead;
	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	scd_centry_release(e);
}

static void gt_free(gt_fix_t *f)
{
	while (f->w.ehead) {
		scd_centry_t *e = f->w.ehead;
		f->w.ehead = e->next;
		scd_centry_release(e);
	}
}

UNIT_TEST(group_whole_goes_out_together_and_partial_is_held)
{
	gt_fix_t f;
	gt_init(&f);
	scd_centry_t *a = gt_entry(&f, "a", 3, 1000);
	scd_centry_t *u = gt_entry(&f, "u", 3, 1000); /* not grouped */
	scd_centry_t *b = gt_entry(&f, "b", 1, 1000); /* rank 1 has not announced b */
	gt_tag(&f, 0, "a", 7, 2);
	gt_tag(&f, 0, "b", 7, 2);
	gt_tag(&f, 1, "a", 3, 2); /* rank 1 numbers its groups its own way */
	scd_group_pass(&f.w, 1100, 5000, gt_fail, &f);
	CHECK_EQ_INT(f.n_failed, 0);
	CHECK_EQ_INT(a->gstate, SCD_GROUP_HOLD);
	CHECK_EQ_INT(b->gstate, SCD_GROUP_HOLD);
	CHECK_EQ_INT(u->gstate, SCD_GROUP_NONE);
	/* rank 1 announces b in its group: both go out, led by a */
	b->have[1] = 1;
	b->count++;
	gt_tag(&f, 1, "b", 3, 2);
	scd_group_pass(&f.w, 1200, 5000, gt_fail, &f);
	CHECK_EQ_INT(f.n_failed, 0);
	CHECK_EQ_INT(a->gstate, SCD_GROUP_READY);
	CHECK_EQ_INT(b->gstate, SCD_GROUP_READY);
	CHECK_TRUE(a->gleader == a && b->gleader == a);
	CHECK_TRUE(u->gleader == NULL);
	gt_free(&f);
}

UNIT_TEST(group_incomplete_stalls_naming_the_missing_member)
{
	gt_fix_t f;
	gt_init(&f);
	gt_entry(&f, "a", 3, 1000);
	gt_entry(&f, "b", 1, 1000);
	gt_tag(&f, 0, "a", 1, 2);
	gt_tag(&f, 0, "b", 1, 2);
	gt_tag(&f, 1, "a", 1, 2);
	scd_group_pass(&f.w, 5999, 5000, gt_fail, &f);
	CHECK_EQ_INT(f.n_failed, 0);
	scd_group_pass(&f.w, 6000, 5000, gt_fail, &f);
	CHECK_EQ_INT(f.n_failed, 2);
	CHECK_TRUE(f.status[0] == SC_ERR_STALLED && f.late[0] && f.late[1]);
	CHECK_MSG(strstr(f.msg, "tensor 'b' of the group was not submitted by rank 1"), "%s",
		  f.msg);
	CHECK_TRUE(f.w.ehead == NULL);
}

UNIT_TEST(group_formed_differently_fails_every_member_once_settled)
{
	gt_fix_t f;
	gt_init(&f);
	/* rank 0 groups {a, b}, rank 1 groups {a, c}, and an ungrouped tensor waits too */
	gt_entry(&f, "a", 3, 1000);
	gt_entry(&f, "b", 1, 1000);
	gt_entry(&f, "c", 2, 1000);
	scd_centry_t *u = gt_entry(&f, "u", 1, 1000);
	gt_tag(&f, 0, "a", 4, 2);
	gt_tag(&f, 0, "b", 4, 2);
	gt_tag(&f, 1, "a", 9, 2);
	gt_tag(&f, 1, "c", 9, 2);
	scd_group_pass(&f.w, 1000, 60000, gt_fail, &f); /* just changed: held */
	CHECK_EQ_INT(f.n_failed, 0);
	scd_group_pass(&f.w, 1300, 60000, gt_fail, &f);
	CHECK_EQ_INT(f.n_failed, 3);
	/* the nodes that had not submitted a member owe its step (late.c): rank 1's b, rank
	 * 0's c might be coming on their own for this very step */
	for (int i = 0; i < 3; i++)
		CHECK_TRUE(f.status[i] == SC_ERR_MISMATCH && f.late[i]);
	CHECK_MSG(strstr(f.msg, "'a', 'b', 'c'") && strstr(f.msg, "rank 0") &&
		      strstr(f.msg, "rank 1"),
		  "%s", f.msg);
	CHECK_TRUE(f.w.ehead == u && u->gstate == SCD_GROUP_NONE);
	gt_free(&f);
}

UNIT_TEST(group_sizes_that_differ_fail)
{
	gt_fix_t f;
	gt_init(&f);
	gt_entry(&f, "a", 3, 1000);
	gt_entry(&f, "b", 3, 1000);
	gt_tag(&f, 0, "a", 1, 2);
	gt_tag(&f, 0, "b", 1, 2);
	gt_tag(&f, 1, "a", 1, 1); /* rank 1: a alone in a group, b ungrouped */
	scd_group_pass(&f.w, 1000, 60000, gt_fail, &f);
	scd_group_pass(&f.w, 1300, 60000, gt_fail, &f);
	CHECK_EQ_INT(f.n_failed, 2);
	CHECK_MSG(strstr(f.msg, "the group has 2 tensors on rank 0, 1 on rank 1") ||
		      strstr(f.msg, "not grouped on rank 1"),
		  "%s", f.msg);
	CHECK_TRUE(f.w.ehead == NULL);
}
