/*
 * test_fast_mode.c: the coordinator's side of fast mode (world/fast.c, docs/design.md
 * "Fast mode"): it begins after 3 plans in a row each planned the same small cached
 * buffer alone, or 2n plans each one buffer alone repeated a cycle of n, and never with
 * anything pending or excluded; a history that is not periodic never begins it; an
 * announcement or a node's FastWaiting ends it (a stale fast_left does not); a late record
 * whose steps were all answered does not keep it off, and a group's member never begins
 * it; a node refuses a fast_begin it could not run; and a re-form in the middle of a turn
 * makes every node that did not take part in it owe the step, even once the turn's cache
 * id is evicted, and no node owe one from a record more than a turn off the others'. A
 * turn's exchange outlasts fast_wait_ms. An epoch that kept fewer than 2 turns holds the
 * next off for a number of plans that doubles per short epoch in a row. A FastWaiting for
 * a turn that came back on the coordinator's node ends nothing.
 */
#include <string.h>

#include "coll/coll.h"
#include "coll/job.h"
#include "unit.h"
#include "world/world_int.h"

static const scd_transport_ops_t tcp_ops = {.name = "tcp"};

typedef struct fast_fixture {
	scd_daemon_t d;
	scd_world_t *w;
	Sparsecomm__Plan plan;
	Sparsecomm__Response resp, *presp[1];
	uint32_t ids[1];
	Sparsecomm__FastBegin fb;
	uint32_t fb_ids[SCD_FAST_CYCLE + 1];
} fast_fixture_t;

/* The coordinator of 2 nodes with fast_path as given, and cached float32 sums: id 0 and
 * 1 of 1024 elements (4 KiB, one round), id 2 of 1 << 20 (not), id 3 of 1 (one round). */
static void fast_make(fast_fixture_t *f, const char *fast_path)
{
	memset(f, 0, sizeof(*f));
	f->d.world_size = 2, f->d.local_size = 1, f->d.rank = 0;
	scd_config_init(&f->d.cfg);
	char err[200];
	CHECK_EQ_INT(scd_config_set(&f->d.cfg, SCD_CFG_fast_path, fast_path, SCD_SRC_FLAG, err,
				    sizeof(err)),
		     SC_OK);
	scd_world_t *w = f->w = calloc(1, sizeof(*w));
	CHECK_TRUE(w != NULL);
	w->d = &f->d;
	w->is_coord = w->formed = 1;
	w->world_id = 42;
	w->tops = &tcp_ops;
	w->peers = calloc(2, sizeof(*w->peers));
	CHECK_TRUE(w->peers != NULL);
	w->peers[1].state = SPARSECOMM__PEER_STATE__PEER_CONNECTED;
	scd_coll_t sum = {.kind = SCD_COLL_ALLREDUCE, .op = SC_OP_SUM};
	scd_tsig_t sig;
	memset(&sig, 0, sizeof(sig));
	static const char *names[] = {"fast.a", "fast.b", "fast.big", "fast.one"};
	static const uint64_t numel[] = {1024, 1024, 1u << 20, 1};
	for (uint32_t id = 0; id < 4; id++)
		CHECK_EQ_INT(scd_cache_set(w, id, names[id], SC_FLOAT32, numel[id],
					   scd_coll_pack(&sum), 0, 0, &sig),
			     SC_OK);
}

static void fast_free(fast_fixture_t *f)
{
	scd_neg_destroy(f->w);
	free(f->w->peers);
	free(f->w);
	scd_config_free(&f->d.cfg);
}

/* The plan of one allreduce of cache id id, as coord_emit makes it; then the coordinator's
 * entry rule over it: whether it began fast mode. */
static int plan_one(fast_fixture_t *f, uint32_t id)
{
	sparsecomm__plan__init(&f->plan);
	sparsecomm__response__init(&f->resp);
	f->resp.kind = SPARSECOMM__RESPONSE_KIND__RESPONSE_ALLREDUCE;
	f->ids[0] = id;
	f->resp.cache_ids = f->ids;
	f->resp.n_cache_ids = 1;
	f->presp[0] = &f->resp;
	f->plan.responses = f->presp;
	f->plan.n_responses = 1;
	scd_fast_coord_plan(f->w, &f->plan, &f->fb, f->fb_ids);
	return f->plan.fast_begin != NULL;
}

UNIT_TEST(negotiate_fast_begin_after_steady_plans)
{
	fast_fixture_t f;
	fast_make(&f, "1");
	CHECK_TRUE(!plan_one(&f, 0) && !plan_one(&f, 0));
	CHECK_TRUE(plan_one(&f, 0)); /* the third in a row */
	CHECK_EQ_INT((int)f.plan.fast_begin->epoch, 1);
	CHECK_EQ_INT((int)f.plan.fast_begin->n_cache_ids, 1);
	CHECK_EQ_INT((int)f.plan.fast_begin->cache_ids[0], 0);
	CHECK_EQ_INT((int)f.w->fast.coord_epoch, 1);
	CHECK_TRUE(!plan_one(&f, 0)); /* in force already */
	f.w->fast.coord_epoch = 0;
	/* another buffer in between starts the count again */
	CHECK_TRUE(!plan_one(&f, 0) && !plan_one(&f, 1) && !plan_one(&f, 0) &&
		   !plan_one(&f, 0));
	CHECK_TRUE(plan_one(&f, 0));
	CHECK_EQ_INT((int)f.plan.fast_begin->epoch, 2);
	f.w->fast.coord_epoch = 0;
	/* a buffer not summed in one round never begins it */
	for (int i = 0; i < 5; i++)
		CHECK_TRUE(!plan_one(&f, 2));
	/* nor does anything pending, a degraded node, a process set's transport, a held
	 * configuration change, a node joined */
	scd_centry_t pending;
	memset(&pending, 0, sizeof(pending));
	f.w->ehead = &pending;
	for (int i = 0; i < 5; i++)
		CHECK_TRUE(!plan_one(&f, 0));
	f.w->ehead = NULL;
	f.w->peers[1].degraded = 1;
	CHECK_TRUE(!plan_one(&f, 0));
	f.w->peers[1].degraded = 0;
	f.w->n_cfg_held = 1;
	CHECK_TRUE(!plan_one(&f, 0));
	f.w->n_cfg_held = 0;
	f.w->join_count = 1;
	CHECK_TRUE(!plan_one(&f, 0));
	f.w->join_count = 0;
	static const scd_transport_ops_t nccl_ops = {.name = "nccl"};
	f.w->tops = &nccl_ops;
	CHECK_TRUE(!plan_one(&f, 0));
	f.w->tops = &tcp_ops;
	CHECK_TRUE(plan_one(&f, 0)); /* the plans kept counting */
	fast_free(&f);
	/* fast_path 0: never */
	fast_make(&f, "0");
	for (int i = 0; i < 6; i++)
		CHECK_TRUE(!plan_one(&f, 0));
	fast_free(&f);
}

/* Plans of the ids in order; whether the last began fast mode and none before it. */
static int plan_seq(fast_fixture_t *f, const uint32_t *ids, int n)
{
	for (int i = 0; i < n - 1; i++)
		if (plan_one(f, ids[i]))
			return 0;
	return plan_one(f, ids[n - 1]);
}

/* The fast_begin's cycle is ids (n of them). */
static void check_cycle(fast_fixture_t *f, const uint32_t *ids, size_t n)
{
	CHECK_EQ_INT((int)f->plan.fast_begin->n_cache_ids, (int)n);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ_INT((int)f->plan.fast_begin->cache_ids[i], (int)ids[i]);
}

UNIT_TEST(negotiate_fast_begin_on_a_repeated_cycle)
{
	fast_fixture_t f;
	fast_make(&f, "1");
	/* period 2 (a 1-element buffer, then a 4 KiB one), seen twice: the cycle from the
	 * next plan on, which is the first's again */
	CHECK_TRUE(plan_seq(&f, (uint32_t[]){3, 0, 3, 0}, 4));
	check_cycle(&f, (uint32_t[]){3, 0}, 2);
	f.w->fast.coord_epoch = 0;
	/* period 3, after other plans: not before the cycle was seen twice */
	CHECK_TRUE(plan_seq(&f, (uint32_t[]){0, 0, 1, 3, 0, 1, 3}, 7));
	check_cycle(&f, (uint32_t[]){0, 1, 3}, 3);
	f.w->fast.coord_epoch = 0;
	/* not periodic: never */
	static const uint32_t odd[] = {0, 1, 3, 0, 3, 1, 1, 0, 3, 3, 0, 1, 0, 3, 1, 3};
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
		CHECK_MSG(!plan_one(&f, odd[i]), "began at plan %zu", i);
	/* a plan of something else in between starts the count again */
	CHECK_TRUE(!plan_seq(&f, (uint32_t[]){0, 1, 0}, 3));
	sparsecomm__plan__init(&f.plan); /* no responses */
	scd_fast_coord_plan(f.w, &f.plan, &f.fb, f.fb_ids);
	CHECK_TRUE(!plan_seq(&f, (uint32_t[]){1, 0, 1}, 3) && plan_one(&f, 0));
	check_cycle(&f, (uint32_t[]){1, 0}, 2);
	f.w->fast.coord_epoch = 0;
	/* a cycle with a buffer not summed in one round never begins it */
	for (int i = 0; i < 8; i++)
		CHECK_TRUE(!plan_one(&f, i % 2 ? 2 : 0));
	fast_free(&f);
}

/* The coordinator's node kept n turns of the epoch in force (as scd_fast_on_plan and
 * scd_fast_job_done count them on a node). */
static void kept_turns(fast_fixture_t *f, uint64_t n)
{
	f->w->fast.seen = f->w->fast.coord_epoch;
	f->w->fast.epoch_kept = n;
}

UNIT_TEST(negotiate_fast_end_on_planned_announcement)
{
	fast_fixture_t f;
	fast_make(&f, "1");
	plan_one(&f, 0), plan_one(&f, 0);
	CHECK_TRUE(plan_one(&f, 0));
	kept_turns(&f, 16); /* a long epoch: no backoff after it */
	/* a ReadyList that only reports the node's turns leaves it in force */
	Sparsecomm__ReadyList rl = SPARSECOMM__READY_LIST__INIT;
	Sparsecomm__FastReport rep = SPARSECOMM__FAST_REPORT__INIT;
	rep.epoch = 1, rep.kept = 10;
	rl.rank = 1;
	rl.fast_report = &rep;
	scd_fast_coord_ready(f.w, 1, &rl);
	CHECK_EQ_INT((int)f.w->fast.coord_epoch, 1);
	/* an announcement by cache id ends it before it is planned */
	uint32_t ids[1] = {1};
	rl.cached_ids = ids;
	rl.n_cached_ids = 1;
	scd_fast_coord_ready(f.w, 1, &rl);
	CHECK_EQ_INT((int)f.w->fast.coord_epoch, 0);
	CHECK_EQ_INT(f.w->fast.run, 0); /* three plans again before the next epoch */
	CHECK_TRUE(!plan_one(&f, 0) && !plan_one(&f, 0) && plan_one(&f, 0));
	CHECK_EQ_INT((int)f.w->fast.coord_epoch, 2);
	kept_turns(&f, 100);
	/* a node that left says so with its announcement */
	Sparsecomm__ReadyList left = SPARSECOMM__READY_LIST__INIT;
	left.rank = 1, left.fast_left = 2;
	scd_fast_coord_ready(f.w, 1, &left);
	CHECK_EQ_INT((int)f.w->fast.coord_epoch, 0);
	/* FastWaiting: of the epoch in force, as its own rank, ends it; else nothing */
	plan_one(&f, 0), plan_one(&f, 0);
	CHECK_TRUE(plan_one(&f, 0));
	Sparsecomm__FastWaiting fw = SPARSECOMM__FAST_WAITING__INIT;
	fw.rank = 1, fw.epoch = 2, fw.turn = 5;
	scd_fast_coord_waiting(f.w, 1, &fw); /* an epoch ended already */
	CHECK_EQ_INT((int)f.w->fast.coord_epoch, 3);
	fw.epoch = 3;
	scd_fast_coord_waiting(f.w, 0, &fw); /* about another rank */
	CHECK_EQ_INT((int)f.w->fast.coord_epoch, 3);
	f.w->fast.seen = 3, f.w->fast.done_turn = 5; /* turn 5 came back on this node */
	scd_fast_coord_waiting(f.w, 1, &fw);	     /* so it comes back on node 1 too */
	CHECK_EQ_INT((int)f.w->fast.coord_epoch, 3);
	fw.turn = 6;
	scd_fast_coord_waiting(f.w, 1, &fw);
	CHECK_EQ_INT((int)f.w->fast.coord_epoch, 0);
	fast_free(&f);
}

/* The backoff: an epoch that kept fewer than 2 turns makes the coordinator let 8 plans
 * pass before it begins the next (its history of plans keeps counting meanwhile), then 16,
 * 32 ... after each short epoch in a row, at most 512; an epoch of 2 turns or more clears
 * it, and so does a re-form; an end from outside the workload moves nothing. */
UNIT_TEST(negotiate_fast_backoff_after_short_epochs)
{
	fast_fixture_t f;
	fast_make(&f, "1");
	CHECK_TRUE(plan_seq(&f, (uint32_t[]){0, 0, 0}, 3));
	kept_turns(&f, 1);
	scd_fast_coord_end(f.w, "a short epoch", 1);
	CHECK_EQ_INT((int)f.w->fast.hold, 8);
	for (int i = 0; i < 8; i++)
		CHECK_MSG(!plan_one(&f, 0), "began after %d plans", i + 1);
	CHECK_TRUE(plan_one(&f, 0)); /* the 9th, on a history still steady */
	kept_turns(&f, 1);
	scd_fast_coord_end(f.w, "short again", 1);
	CHECK_EQ_INT((int)f.w->fast.hold, 16);
	for (int i = 0; i < 16; i++)
		CHECK_MSG(!plan_one(&f, 0), "began after %d plans", i + 1);
	CHECK_TRUE(plan_one(&f, 0));
	/* a cycle of two broken by a third buffer: the hold counts every plan */
	kept_turns(&f, 1);
	scd_fast_coord_end(f.w, "a third buffer", 1);
	CHECK_EQ_INT((int)f.w->fast.hold, 32);
	int began = -1;
	for (int i = 0; i < 64 && began < 0; i++)
		if (plan_one(&f, (uint32_t[]){0, 1, 0, 1, 3}[i % 5]))
			began = i;
	CHECK_MSG(began >= 32, "began at plan %d", began);
	for (uint32_t want = 64; want <= 1024; want *= 2) { /* doubling, up to 512 */
		kept_turns(&f, 0);
		scd_fast_coord_end(f.w, "short", 1);
		CHECK_EQ_INT((int)f.w->fast.hold, want > 512 ? 512 : (int)want);
		f.w->fast.hold = 0; /* let it begin at once */
		CHECK_TRUE(plan_seq(&f, (uint32_t[]){0, 0, 0}, 3));
	}
	kept_turns(&f, 2); /* a long epoch clears it */
	scd_fast_coord_end(f.w, "long", 1);
	CHECK_EQ_INT((int)f.w->fast.hold, 0);
	CHECK_TRUE(plan_seq(&f, (uint32_t[]){0, 0, 0}, 3));
	kept_turns(&f, 0);
	scd_fast_coord_end(f.w, "short after a long one", 1);
	CHECK_EQ_INT((int)f.w->fast.hold, 8);
	/* an end from outside the workload (a node degraded) moves nothing */
	f.w->fast.hold = 0;
	CHECK_TRUE(plan_seq(&f, (uint32_t[]){0, 0, 0}, 3));
	kept_turns(&f, 0);
	scd_fast_coord_end(f.w, "a node is degraded", 0);
	CHECK_EQ_INT((int)f.w->fast.hold, 0);
	CHECK_EQ_INT((int)f.w->fast.hold_next, 16);
	scd_fast_reset(f.w);
	CHECK_EQ_INT((int)f.w->fast.hold, 0);
	CHECK_TRUE(plan_seq(&f, (uint32_t[]){0, 0, 0}, 3));
	fast_free(&f);
}

/* The entry rule's finer points: a late record whose steps were all answered keeps
 * nothing off, one still owed does; a node's fast_left of an epoch that ended already does
 * not end the next; plans of a group's member (even of one member) never begin an epoch. */
UNIT_TEST(negotiate_fast_entry_rule_late_left_group)
{
	fast_fixture_t f;
	fast_make(&f, "1");
	scd_poison_t late = {.name = "fast.a", .rank = 1, .answered = 1};
	f.w->lates = &late;
	plan_one(&f, 0), plan_one(&f, 0);
	CHECK_TRUE(plan_one(&f, 0)); /* an answered record alone: epoch 1 */
	f.w->fast.coord_epoch = 0;
	late.owed = 1;
	for (int i = 0; i < 4; i++)
		CHECK_TRUE(!plan_one(&f, 0));
	late.owed = 0;
	f.w->lates = NULL;
	CHECK_TRUE(plan_one(&f, 0)); /* epoch 2 */
	/* rank 1 left epoch 1 as a plan came: its stale fast_left leaves epoch 2 on */
	Sparsecomm__ReadyList rl = SPARSECOMM__READY_LIST__INIT;
	rl.rank = 1, rl.fast_left = 1;
	scd_fast_coord_ready(f.w, 1, &rl);
	CHECK_EQ_INT((int)f.w->fast.coord_epoch, 2);
	kept_turns(&f, 2); /* a long epoch: no backoff hides the group rule below */
	rl.fast_left = 2;
	scd_fast_coord_ready(f.w, 1, &rl);
	CHECK_EQ_INT((int)f.w->fast.coord_epoch, 0);
	/* a tensor announced with a group tag at every step: planned alone, never fast */
	Sparsecomm__GroupTag tag = SPARSECOMM__GROUP_TAG__INIT, *tags[1] = {&tag};
	Sparsecomm__ReadyList grl = SPARSECOMM__READY_LIST__INIT;
	grl.rank = 1, grl.groups = tags, grl.n_groups = 1;
	for (int i = 0; i < 6; i++) {
		scd_fast_coord_ready(f.w, 1, &grl);
		CHECK_TRUE(!plan_one(&f, 0));
	}
	fast_free(&f);
}

/* A fast_begin of epoch with the given ids, checked by a node. */
static sc_status_t check_begin(fast_fixture_t *f, uint64_t epoch, const uint32_t *ids, size_t n,
			       char *err, size_t len)
{
	sparsecomm__plan__init(&f->plan);
	sparsecomm__fast_begin__init(&f->fb);
	memcpy(f->fb_ids, ids, n * sizeof(*ids));
	f->fb.epoch = epoch;
	f->fb.cache_ids = f->fb_ids;
	f->fb.n_cache_ids = n;
	f->plan.fast_begin = &f->fb;
	f->plan.cycle = 9;
	err[0] = 0;
	return scd_neg_plan_check(f->w, &f->plan, err, len);
}

UNIT_TEST(negotiate_plan_check_refuses_ineligible_fast_set)
{
	fast_fixture_t f;
	char err[200];
	fast_make(&f, "1");
	f.w->is_coord = 0;
	CHECK_EQ_INT(check_begin(&f, 1, (uint32_t[]){0}, 1, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(check_begin(&f, 1, (uint32_t[]){2}, 1, err, sizeof(err)), SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "plan cycle 9 begins fast mode") &&
		      strstr(err, "'fast.big' is not a float32 sum of one round"),
		  "error: %s", err);
	CHECK_EQ_INT(check_begin(&f, 1, (uint32_t[]){7}, 1, err, sizeof(err)), SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "cache id 7 is not cached"), "error: %s", err);
	/* a cycle: of 1 to SCD_FAST_CYCLE ids, each one it could run */
	CHECK_EQ_INT(check_begin(&f, 1, (uint32_t[]){0, 1, 3}, 3, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(check_begin(&f, 1, (uint32_t[]){0, 2}, 2, err, sizeof(err)),
		     SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "'fast.big' is not a float32 sum of one round"), "error: %s",
		  err);
	CHECK_EQ_INT(
	    check_begin(&f, 1, (uint32_t[]){0, 1, 0, 1, 0, 1, 0, 1, 0}, 9, err, sizeof(err)),
	    SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "9 cache ids, not 1 to 8"), "error: %s", err);
	CHECK_EQ_INT(check_begin(&f, 1, (uint32_t[]){0}, 0, err, sizeof(err)), SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "0 cache ids, not 1 to 8"), "error: %s", err);
	/* an epoch not after the last one begun */
	f.w->fast.seen = 4;
	CHECK_EQ_INT(check_begin(&f, 4, (uint32_t[]){0}, 1, err, sizeof(err)), SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "epoch 4, not after 4"), "error: %s", err);
	CHECK_EQ_INT(check_begin(&f, 5, (uint32_t[]){0}, 1, err, sizeof(err)), SC_OK);
	/* a plan that begins with an id it also evicts (every node would be fast with the
	 * id gone); evicting another id is no matter */
	uint32_t evict[1] = {0};
	f.w->fast.seen = 0;
	f.fb.epoch = 1;
	f.fb_ids[0] = 0;
	f.fb.n_cache_ids = 1;
	f.plan = (Sparsecomm__Plan)SPARSECOMM__PLAN__INIT;
	f.plan.fast_begin = &f.fb;
	f.plan.cycle = 9;
	f.plan.evicted = evict;
	f.plan.n_evicted = 1;
	CHECK_EQ_INT(scd_neg_plan_check(f.w, &f.plan, err, sizeof(err)), SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "plan cycle 9 begins fast mode with cache id 0, which the plan "
			      "evicts"),
		  "error: %s", err);
	evict[0] = 1;
	CHECK_EQ_INT(scd_neg_plan_check(f.w, &f.plan, err, sizeof(err)), SC_OK);
	fast_free(&f);
	/* a node with fast_path 0 runs no fast turn */
	fast_make(&f, "0");
	f.w->is_coord = 0;
	CHECK_EQ_INT(check_begin(&f, 1, (uint32_t[]){0}, 1, err, sizeof(err)), SC_ERR_PROTOCOL);
	CHECK_MSG(strstr(err, "fast_path is 0 here"), "error: %s", err);
	fast_free(&f);
}

/* The re-form rule (scd_fast_coord_formed): a coordinator of 3 nodes whose world 42
 * re-forms, each node's record of its fast turns as given (world 0: a daemon that joined
 * afresh); returns the nodes that owe a step of "fast.a" as bits. */
typedef struct rep {
	uint64_t world, epoch, turn, leave;
	int state;
} rep_t;

static unsigned owed_after(const rep_t r[3])
{
	scd_daemon_t d;
	memset(&d, 0, sizeof(d));
	d.world_size = 3, d.local_size = 1, d.rank = 0;
	scd_world_t *w = calloc(1, sizeof(*w));
	CHECK_TRUE(w != NULL);
	w->d = &d;
	w->is_coord = 1;
	w->world_id = 42;
	w->peers = calloc(3, sizeof(*w->peers));
	CHECK_TRUE(w->peers != NULL);
	for (int i = 0; i < 3; i++) {
		w->peers[i].state = SPARSECOMM__PEER_STATE__PEER_CONNECTED;
		scd_fast_snap_t *s = i ? &w->peers[i].fast_rep : &w->fast_snap;
		*s = (scd_fast_snap_t){r[i].world, r[i].epoch,
				       r[i].turn,  r[i].leave,
				       r[i].state, r[i].turn ? strdup("fast.a") : NULL};
	}
	scd_fast_coord_formed(w);
	unsigned owed = 0;
	for (int i = 0; i < 3; i++) {
		if (scd_late_take(w, i, "fast.a", 0))
			owed |= 1u << i;
		CHECK_EQ_INT(scd_late_take(w, i, "fast.a", 0), 0); /* one step at most */
		CHECK_TRUE(w->peers[i].fast_rep.name == NULL);
	}
	CHECK_TRUE(w->fast_snap.name == NULL && w->lates == NULL);
	free(w->peers);
	free(w);
	return owed;
}

UNIT_TEST(negotiate_fast_reform_rule)
{
	enum { D = SCD_FAST_DONE, U = SCD_FAST_UNDECIDED, X = SCD_FAST_DISCARDED };
	/* node 0 submitted turn 5, nodes 1 and 2 had not (their turn 4 came back): they owe */
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{42, 2, 5, 0, U}, {42, 2, 4, 0, D}, {42, 2, 4, 0, D}}), 6);
	/* node 0 kept turn 5, the others' exchange did not complete: all took part */
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{42, 2, 5, 0, D}, {42, 2, 5, 0, U}, {42, 2, 5, 0, U}}), 0);
	/* every node decided turn 5 alike: nothing in doubt */
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{42, 2, 5, 6, D}, {42, 2, 5, 6, D}, {42, 2, 5, 0, D}}), 0);
	/* node 2 left turn 5 (discarded on every rank that decided it): announced again */
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{42, 2, 5, 0, X}, {42, 2, 5, 6, X}, {42, 2, 4, 5, D}}), 0);
	/* node 2 left turn 5, nodes 0 and 1 had submitted it and left 6 before it came back:
	 * their step fails, node 2 owes its own */
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{42, 2, 5, 6, U}, {42, 2, 5, 6, U}, {42, 2, 4, 5, D}}), 4);
	/* ... and node 1 had discarded it: it owes its step too (announced again) */
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{42, 2, 5, 6, U}, {42, 2, 5, 6, X}, {42, 2, 4, 5, D}}), 6);
	/* node 2 took no turn of epoch 3 (its last was in epoch 2), node 0 submitted turn 1 */
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{42, 3, 1, 0, U}, {42, 3, 1, 0, U}, {42, 2, 9, 0, D}}), 4);
	/* node 2 joined afresh (another daemon): it owes nothing, and leaves nothing in doubt
	 */
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{42, 2, 5, 0, D}, {42, 2, 5, 0, D}, {0, 0, 0, 0, D}}), 0);
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{42, 2, 5, 0, U}, {42, 2, 4, 0, D}, {0, 0, 0, 0, D}}), 2);
	/* records of an older world count for nothing */
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{41, 2, 5, 0, U}, {41, 2, 4, 0, D}, {41, 2, 4, 0, D}}), 0);
	/* a turn beyond the others' last plus one is no node's (one behind at most): not
	 * settled, so node 0's turn 5 is, and node 1 owes it */
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{42, 2, 5, 0, U}, {42, 2, 4, 0, D}, {42, 2, 1000, 0, D}}), 2);
	/* ... nor is one below the last minus one: node 2 owes nothing of it */
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{42, 2, 5, 0, D}, {42, 2, 5, 0, D}, {42, 2, 2, 0, D}}), 0);
	CHECK_EQ_INT(
	    owed_after((rep_t[3]){{42, 2, 5, 0, U}, {42, 2, 4, 0, D}, {42, 2, 2, 0, D}}), 2);
	/* a record of turn 2^64 - 1 (no node's) is dropped, and the others' are not: the
	 * comparisons do not wrap */
	CHECK_EQ_INT(owed_after((rep_t[3]){
			 {42, 2, 5, 0, U}, {42, 2, 4, 0, D}, {42, 2, UINT64_MAX, 0, D}}),
		     2);
}

/* A turn's exchange waits past fast_wait_ms, after which its node tells the coordinator,
 * and past the stall's naming; never less than a plan's job. */
UNIT_TEST(negotiate_fast_turn_timeout_past_fast_wait)
{
	scd_config_t cfg;
	scd_config_init(&cfg);
	char err[200];
	CHECK_EQ_INT(scd_fast_turn_timeout_ms(&cfg, 1000), 50 + 60000 + 2 * 10000);
	CHECK_EQ_INT(scd_fast_turn_timeout_ms(&cfg, 100000), 100000);
	static const char *set[][2] = {
	    {"stall_timeout_ms", "100"}, {"peer_timeout_ms", "200"}, {"fast_wait_ms", "60000"}};
	static const int keys[] = {SCD_CFG_stall_timeout_ms, SCD_CFG_peer_timeout_ms,
				   SCD_CFG_fast_wait_ms};
	for (int i = 0; i < 3; i++)
		CHECK_EQ_INT(
		    scd_config_set(&cfg, keys[i], set[i][1], SCD_SRC_FLAG, err, sizeof(err)),
		    SC_OK);
	CHECK_EQ_INT(scd_fast_turn_timeout_ms(&cfg, 1000), 60000 + 100 + 2 * 200);
	scd_config_free(&cfg);
}

/* A node's last turn is settled by its name, whatever the cache holds as the world
 * re-forms: the coordinator (node 0) submitted turn 1 of its cycle's buffer, node 1 never
 * did (its turn 1 waited), and plans after FastEnd evicted the buffer's id on every node.
 * Node 0 still reports its turn and name, and node 1 owes the step; else node 1 would
 * submit it in the new world, where it pairs with node 0's next. Ending the epoch also
 * makes the cycle's buffers the coordinator's most recently used. */
UNIT_TEST(negotiate_fast_reform_rule_after_eviction)
{
	fast_fixture_t f;
	fast_make(&f, "1");
	scd_world_t *w = f.w;
	for (int i = 0; i < 3; i++) /* 3 plans of id 0 alone: fast mode begins */
		if (plan_one(&f, 0))
			break;
	CHECK_TRUE(f.plan.fast_begin != NULL);
	uint64_t E = f.plan.fast_begin->epoch;
	scd_fast_on_plan(w, &f.plan);
	scd_job_t turn;
	memset(&turn, 0, sizeof(turn));
	turn.fast = (scd_fast_t){.epoch = E, .turn = 1};
	scd_fast_turn_taken(w, &turn);
	/* the coordinator ends the epoch (node 1's turn waited); its node leaves at turn 2
	 * as fast_leave does, with no engine here to submit the LEAVE to */
	turn.fast = (scd_fast_t){.epoch = E, .turn = 2, .leave = 1};
	scd_fast_turn_taken(w, &turn);
	w->fast.epoch = 0;
	w->cycle = 7;
	scd_fast_coord_end(w, "rank 0's turn 1 waited for the others", 1);
	CHECK_EQ_INT((int)scd_cache_get(w, 0)->used_cycle, 8);
	scd_cache_evict(w, 0);
	CHECK_TRUE(scd_cache_get(w, 0) == NULL);
	w->peers[1].fast_rep =
	    (scd_fast_snap_t){w->world_id, E, 0, 0, SCD_FAST_DONE, NULL}; /* no turn yet */
	scd_fast_snapshot(w);
	CHECK_EQ_INT((int)w->fast_snap.turn, 1);
	CHECK_MSG(w->fast_snap.name && !strcmp(w->fast_snap.name, "fast.a"), "name: %s",
		  w->fast_snap.name ? w->fast_snap.name : "(none)");
	scd_fast_reset(w);
	scd_fast_coord_formed(w);
	CHECK_EQ_INT(scd_late_take(w, 1, "fast.a", 0), 1);
	CHECK_EQ_INT(scd_late_take(w, 0, "fast.a", 0), 0);
	fast_free(&f);
}
