/*
 * group.c: grouped operations (coordinator). A trainer marks operations as the members of
 * one group (sc_group_begin, sc_group_add: Horovod's grouped_allreduce, grouped_allgather,
 * grouped_reducescatter); its node announces each member with a GroupTag (the group's
 * number, its lowest local trainer's with that trainer's local rank, and its size), and
 * the coordinator keeps the tags by rank in the members' entries (scd_centry_t.gid,
 * gsize).
 *
 * Before each plan, scd_group_pass collects every group among the entries: from a tagged
 * entry, every entry that a rank tagged with the same number as that rank tagged a
 * collected one, until nothing is added (the ranks number their groups independently).
 * Like Horovod's group table, the group is released to the fusion step as a whole: its
 * members are held until every one of them is announced, grouped alike, by every rank and
 * agreed (world/agree.h); then they go out in the same plan, next to each other
 * (negotiate.c, group_together), so they share buffers as far as their classes and the
 * fusion threshold allow. A group that every rank has announced whole but that the ranks
 * formed differently (a tensor in it on one rank and not on another, different sizes, a
 * member ungrouped on a rank, or in two groups), once no announcement of its members has
 * come for SCD_GROUP_SETTLE_MS, fails every member on every rank with
 * SC_ERR_MISMATCH naming the tensor and the ranks, and no node owes a step for it
 * (late.c): what a node did not announce, it did not submit in this group. A member that
 * disagrees across ranks, or that a node failed, fails the whole group with its reason. A
 * group still incomplete after stall_timeout_ms fails with SC_ERR_STALLED naming a
 * missing member and the rank that lacks it (the late nodes then owe the step, as for a
 * single tensor).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "world/world_int.h"

/* A group the ranks formed differently fails once no announcement of its members has
 * come for this long: a rank may still be announcing, alone, a tensor that another rank
 * put in the group (and a step failed before it comes would leave it waiting alone). */
#define SCD_GROUP_SETTLE_MS 200

/* A number a rank gave the group: the members it tagged with it, and their size. */
typedef struct grp_pair {
	int rank;
	uint64_t gid;
	uint32_t cnt, size;
} grp_pair_t;

/* One group as a pass collects it: its members, and the (rank, number) pairs seen. */
typedef struct grp {
	scd_centry_t **m;
	int n, cap;
	grp_pair_t *pairs;
	int np, cap_p;
} grp_t;

void scd_group_free(scd_centry_t *e)
{
	free(e->gid);
	free(e->gsize);
	e->gid = NULL;
	e->gsize = NULL;
}

void scd_group_tag(scd_world_t *w, int from, const Sparsecomm__GroupTag *t)
{
	if (!t->name || !t->group || !t->size || t->size > SC_GROUP_MAX)
		return;
	scd_centry_t *e = w->ehead;
	while (e && (e->detached || strcmp(e->name, t->name)))
		e = e->next;
	if (!e || e->have[from] != 1) /* refused as a late step, or a stand-in */
		return;
	if (!e->gid) {
		e->gid = calloc((size_t)w->d->world_size, sizeof(*e->gid));
		e->gsize = calloc((size_t)w->d->world_size, sizeof(*e->gsize));
		if (!e->gid || !e->gsize) { /* the tensor then goes alone */
			scd_error(SCD_SUB_NEGOTIATE, "out of memory grouping tensor '%s'",
				  e->name);
			scd_group_free(e);
			return;
		}
	}
	e->gid[from] = t->group;
	e->gsize[from] = t->size;
}

static int grp_add(grp_t *g, scd_centry_t *e, uint64_t mark)
{
	if (e->gmark == mark)
		return 0;
	if (g->n == g->cap) {
		int cap = g->cap ? 2 * g->cap : 16;
		scd_centry_t **m = realloc(g->m, sizeof(*m) * (size_t)cap);
		if (!m)
			return -1;
		g->m = m, g->cap = cap;
	}
	e->gmark = mark;
	g->m[g->n++] = e;
	return 0;
}

static int grp_pair_add(grp_t *g, int rank, uint64_t gid)
{
	for (int i = 0; i < g->np; i++)
		if (g->pairs[i].rank == rank && g->pairs[i].gid == gid)
			return 0;
	if (g->np == g->cap_p) {
		int cap = g->cap_p ? 2 * g->cap_p : 16;
		grp_pair_t *p = realloc(g->pairs, sizeof(*p) * (size_t)cap);
		if (!p)
			return -1;
		g->pairs = p, g->cap_p = cap;
	}
	g->pairs[g->np++] = (grp_pair_t){.rank = rank, .gid = gid};
	return 1;
}

static int tagged(const scd_centry_t *e, int r)
{
	return e->gid && e->have[r] == 1 && e->gsize[r];
}

/* The group of e: every entry tagged, on some rank, with a number that rank gave one of
 * its members (-1 out of memory). */
static int grp_collect(scd_world_t *w, scd_centry_t *e, grp_t *g)
{
	int P = w->d->world_size;
	g->n = g->np = 0;
	if (grp_add(g, e, w->group_pass) != 0)
		return -1;
	for (int k = 0; k < g->n; k++)
		for (int r = 0; r < P; r++) {
			if (!tagged(g->m[k], r))
				continue;
			uint64_t gid = g->m[k]->gid[r];
			int fresh = grp_pair_add(g, r, gid);
			if (fresh < 0)
				return -1;
			for (scd_centry_t *y = w->ehead; fresh && y; y = y->next)
				if (!y->detached && tagged(y, r) && y->gid[r] == gid &&
				    grp_add(g, y, w->group_pass) != 0)
					return -1;
		}
	for (int p = 0; p < g->np; p++) /* each number's members, once */
		for (int i = 0; i < g->n; i++)
			if (tagged(g->m[i], g->pairs[p].rank) &&
			    g->m[i]->gid[g->pairs[p].rank] == g->pairs[p].gid) {
				g->pairs[p].cnt++;
				g->pairs[p].size = g->m[i]->gsize[g->pairs[p].rank];
			}
	return 0;
}

/* "rank" or, with several trainers per node, "node": what the ranks of an entry are. */
static const char *who(const scd_world_t *w)
{
	return w->d->local_size > 1 ? "node" : "rank";
}

/* The members' names, quoted, into buf (the first few, then how many more). */
static void grp_names(const grp_t *g, char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = 0;
	for (int i = 0; i < g->n && n < len; i++) {
		if (i == 6) {
			snprintf(buf + n, len - n, " and %d more", g->n - i);
			return;
		}
		n += (size_t)snprintf(buf + n, len - n, "%s'%s'", i ? ", " : "", g->m[i]->name);
	}
}

/* A rank other than r that tagged x (-1: none). */
static int tagged_elsewhere(const scd_world_t *w, const scd_centry_t *x, int r)
{
	for (int s = 0; s < w->d->world_size; s++)
		if (s != r && tagged(x, s))
			return s;
	return -1;
}

/*
 * Rank r's view of the group: *whole_p 0 while r has not announced all of its group (a
 * member it tagged whose group has fewer members announced than its size, or none at all);
 * the first way the view differs from the others' into why (kept if already set) and the
 * first member it lacks into missing. size_p/size_rank_p: the size the first rank gave.
 */
static void grp_view(const scd_world_t *w, const grp_t *g, int r, int *whole_p, char *why,
		     size_t why_len, char *missing, size_t miss_len, uint32_t *size_p,
		     int *size_rank_p)
{
	const char *R = who(w);
	int announced = 0, outside = 0;
	const scd_centry_t *first = NULL;
	for (int i = 0; i < g->n; i++) {
		const scd_centry_t *x = g->m[i];
		outside += x->have[r] == SCD_HAVE_OUTSIDE;
		if (x->have[r] == 2 ||
		    x->have[r] == SCD_HAVE_OUTSIDE) /* stands in, or outside its set */
			continue;
		int s = tagged_elsewhere(w, x, r);
		if (x->have[r] != 1) {
			if (!missing[0])
				snprintf(missing, miss_len,
					 "tensor '%s' of the group was not submitted by %s %d",
					 x->name, R, r);
			if (!why[0])
				snprintf(why, why_len,
					 "tensor '%s' is in the group on %s %d, not on %s %d",
					 x->name, R, s, R, r);
			continue;
		}
		announced++;
		if (!tagged(x, r)) {
			if (!why[0])
				snprintf(
				    why, why_len,
				    "tensor '%s' is in a group on %s %d, not grouped on %s %d",
				    x->name, R, s, R, r);
			continue;
		}
		if (!first)
			first = x;
		else if (x->gid[r] != first->gid[r] && !why[0])
			snprintf(why, why_len,
				 "tensors '%s' and '%s' are in two groups on %s %d, one on the "
				 "others",
				 first->name, x->name, R, r);
		if (!*size_p) {
			*size_p = x->gsize[r];
			*size_rank_p = r;
		} else if (x->gsize[r] != *size_p && !why[0]) {
			snprintf(why, why_len, "the group has %u tensors on %s %d, %u on %s %d",
				 *size_p, R, *size_rank_p, x->gsize[r], R, r);
		}
	}
	if (!announced && !w->peers[r].join_seq && outside < g->n)
		*whole_p = 0;
	for (int p = 0; p < g->np; p++) { /* each of r's groups announced whole */
		const grp_pair_t *q = &g->pairs[p];
		if (q->rank != r || q->cnt >= q->size)
			continue;
		*whole_p = 0;
		if (!missing[0])
			snprintf(missing, miss_len,
				 "%s %d submitted %u of the group's %u tensors", R, r, q->cnt,
				 q->size);
	}
}

/* Decides the collected group g; SC_OK to go out, SC_IN_PROGRESS to hold, or an error
 * with msg (*late_p: the nodes that have not announced a member owe its step). */
static sc_status_t grp_decide(scd_world_t *w, grp_t *g, uint64_t now, uint64_t stall_ms,
			      char *msg, size_t len, int *late_p)
{
	int P = w->d->world_size, whole = 1;
	char names[400], why[512] = "", missing[512] = "";
	uint32_t size = 0;
	int size_rank = -1;
	uint64_t first_ms = now;
	grp_names(g, names, sizeof(names));
	*late_p = 1;
	uint64_t changed_ms = 0;
	for (int i = 0; i < g->n; i++) {
		scd_centry_t *x = g->m[i];
		if (x->gcount != x->count || !x->gchange_ms) {
			x->gcount = x->count;
			x->gchange_ms = now;
		}
		if (x->gchange_ms > changed_ms)
			changed_ms = x->gchange_ms;
		if (x->failed) { /* a node failed its step of a member: the group's */
			snprintf(msg, len, "grouped operation of tensors %s failed: %s", names,
				 x->failed);
			return x->failed_status;
		}
		if (x->count < P)
			scd_join_fill(w, x);
		if (x->first_ms < first_ms)
			first_ms = x->first_ms;
	}
	for (int r = 0; r < P; r++)
		grp_view(w, g, r, &whole, why, sizeof(why), missing, sizeof(missing), &size,
			 &size_rank);
	if (whole && why[0] && now - changed_ms >= SCD_GROUP_SETTLE_MS) {
		/* a node that has not submitted a member owes its step (late.c): it may be
		 * submitting the member on its own, for this very step, and paired with the
		 * others' next step that would sum two steps */
		snprintf(msg, len, "grouped operation of tensors %s failed: %s", names, why);
		return SC_ERR_MISMATCH;
	}
	if (whole && !missing[0] && !why[0]) {
		for (int i = 0; i < g->n; i++) {
			char what[600];
			if (scd_agree_describe(w, g->m[i], what, sizeof(what))) {
				*late_p = 0;
				snprintf(msg, len, "grouped operation of tensors %s failed: %s",
					 names, what);
				return SC_ERR_MISMATCH;
			}
		}
		return SC_OK;
	}
	if (now - first_ms < stall_ms)
		return SC_IN_PROGRESS;
	snprintf(msg, len, "grouped operation of tensors %s stalled: %s within %llu ms", names,
		 missing[0] ? missing : why, (unsigned long long)stall_ms);
	return SC_ERR_STALLED;
}

void scd_group_pass(scd_world_t *w, uint64_t now, uint64_t stall_ms, scd_group_fail_cb fail,
		    void *arg)
{
	grp_t g = {0};
	char msg[1400];
	w->group_pass++;
restart:
	for (scd_centry_t *e = w->ehead; e; e = e->next) {
		if (!e->gid || e->detached || e->gmark == w->group_pass)
			continue;
		if (grp_collect(w, e, &g) != 0) {
			scd_warn(SCD_SUB_NEGOTIATE,
				 "out of memory collecting the group of '%s'", e->name);
			e->gstate = SCD_GROUP_HOLD; /* tried again at the next plan */
			e->gmark = w->group_pass;
			continue;
		}
		int late = 1;
		sc_status_t st = grp_decide(w, &g, now, stall_ms, msg, sizeof(msg), &late);
		for (int i = 0; i < g.n; i++) {
			g.m[i]->gstate = st == SC_OK ? SCD_GROUP_READY : SCD_GROUP_HOLD;
			g.m[i]->gleader = st == SC_OK ? g.m[0] : NULL;
		}
		if (st == SC_OK || st == SC_IN_PROGRESS)
			continue;
		scd_info(SCD_SUB_NEGOTIATE, "%s", msg);
		for (int i = 0; i < g.n; i++) /* frees the members: the walk starts again */
			fail(w, arg, g.m[i], st, msg, late);
		goto restart;
	}
	free(g.m);
	free(g.pairs);
}
