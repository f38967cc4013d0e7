/*
 * itest_shapes.c: the shapes that allreduces and broadcasts give (sc_tensor_set_shape)
 * must agree across ranks, as Horovod's do.
 *
 * shapes: rank 0 gives [17, 1311] and every other rank [17, 23, 57], the same 22287
 *   elements: every rank's allreduce must end with SC_ERR_MISMATCH naming the tensor, the
 *   field and both shapes (on a node of two trainers the node's own trainers disagree, and
 *   the other nodes must still fail alike; "by-node": the trainers of node 0 give one shape,
 *   the other nodes' the other), promptly; so must a broadcast, and shapes of
 *   ten dimensions that differ only past the seventh (compared by a hash past it). Then the
 * same names with one shape on every rank, changed from step to step ([17, 1311], [1311, 17],
 * none, ten dimensions), must sum exactly: a change leaves the response cache's entry, never
 *   pairs with the old one, and a shape that alternates step after step takes its two
 *   forms' cache entries again (sparsectl stats: the node's count stays). The library refuses a
 * shape whose product is not the element count, or of more than SC_MAX_DIMS dimensions, naming
 * the tensor; an allgather of a tensor that has a shape takes none and succeeds. An empty
 * tensor's one-element stand-in (shape [0, 3]) completes where every rank gives it, and
 * against [2, 3] fails at once naming "0 [0, 3]" and "6 [2, 3]".
 */
#include "itest.h"

#include <stdio.h>
#include <string.h>

#define SH_NUMEL     22287 /* 17 x 1311 = 17 x 23 x 57 */
#define SH_ERR_LIMIT 20.0  /* seconds: far below the operation and stall timeouts */

static const uint64_t flat2[] = {17, 1311}, flat2t[] = {1311, 17}, deep3[] = {17, 23, 57};

/* Fills t with this rank's values of seed, starts op (root 0 for a broadcast) and waits:
 * the wait's result, its error text into msg. */
static int step(sc_client_t *c, sc_tensor_t *t, int bcast, uint64_t seed, char *msg, size_t len)
{
	sc_handle_t h = 0;
	it_fill(sc_tensor_data(t), SC_FLOAT32, sc_tensor_numel(t), seed, sc_rank(c), 1);
	sc_status_t st =
	    bcast ? sc_broadcast_async(c, t, 0, &h) : sc_allreduce_async(c, t, SC_OP_SUM, &h);
	if (st != SC_OK) {
		snprintf(msg, len, "%s", sc_last_error());
		return st;
	}
	int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
	snprintf(msg, len, "%s", it_wait_error());
	return r;
}

/* t's next step with shape (ndim dims) on this rank must fail with SC_ERR_MISMATCH naming
 * the tensor, "shape" and both texts given. */
static void expect_mismatch(sc_client_t *c, sc_tensor_t *t, int bcast, int ndim,
			    const uint64_t *dims, const char *a, const char *b)
{
	char msg[2048];
	IT_CHECK_SC(sc_tensor_set_shape(t, ndim, dims), "sc_tensor_set_shape('%s')",
		    sc_tensor_name(t));
	double t0 = it_now_s();
	int r = step(c, t, bcast, 5, msg, sizeof(msg));
	double dt = it_now_s() - t0;
	if (r != SC_ERR_MISMATCH)
		IT_FAIL("%s of '%s' with shapes %s and %s across ranks: expected "
			"SC_ERR_MISMATCH, got %s after %.1f s: %s",
			bcast ? "broadcast" : "allreduce", sc_tensor_name(t), a, b,
			it_wait_name(r), dt, msg);
	if (dt > SH_ERR_LIMIT)
		IT_FAIL("'%s': SC_ERR_MISMATCH only after %.1f s", sc_tensor_name(t), dt);
	if (!strstr(msg, sc_tensor_name(t)) || !strstr(msg, "shape") || !strstr(msg, a) ||
	    !strstr(msg, b))
		IT_FAIL("the SC_ERR_MISMATCH of '%s' does not name the tensor, 'shape', %s and "
			"%s: %s",
			sc_tensor_name(t), a, b, msg);
	it_log("%s, shapes %s and %s: SC_ERR_MISMATCH after %.2f s: %s",
	       bcast ? "broadcast" : "allreduce", a, b, dt, msg);
}

/* t's next step with shape (ndim dims) on every rank must be exact. */
static void expect_exact(sc_client_t *c, sc_tensor_t *t, int bcast, int ndim,
			 const uint64_t *dims, uint64_t seed, const char *what)
{
	char msg[2048], why[512];
	IT_CHECK_SC(sc_tensor_set_shape(t, ndim, dims), "sc_tensor_set_shape('%s', %s)",
		    sc_tensor_name(t), what);
	int r = step(c, t, bcast, seed, msg, sizeof(msg));
	if (r != SC_OK)
		IT_FAIL("%s of '%s' with shape %s on every rank: %s: %s",
			bcast ? "broadcast" : "allreduce", sc_tensor_name(t), what,
			it_wait_name(r), msg);
	size_t n = sc_tensor_numel(t), wrong = 0;
	if (bcast) { /* rank 0's values */
		static float want[SH_NUMEL];
		const float *got = sc_tensor_data(t);
		it_fill(want, SC_FLOAT32, n, seed, 0, 1);
		for (size_t i = 0; i < n; i++)
			wrong += memcmp(&want[i], &got[i], sizeof(float)) != 0;
		snprintf(why, sizeof(why), "not rank 0's values");
	} else {
		wrong = it_check(sc_tensor_data(t), SC_FLOAT32, n, seed, sc_size(c), 1,
				 SC_OP_SUM, why, sizeof(why));
	}
	if (wrong)
		IT_FAIL("'%s' with shape %s: %zu of %zu elements wrong: %s", sc_tensor_name(t),
			what, wrong, n, why);
}

/* The library's own refusals of a shape. */
static void refusals(sc_client_t *c, sc_tensor_t *t)
{
	const uint64_t wrong[] = {17, 1312};
	uint64_t many[SC_MAX_DIMS + 1];
	for (int i = 0; i <= SC_MAX_DIMS; i++)
		many[i] = 1;
	many[0] = SH_NUMEL;
	sc_status_t st = sc_tensor_set_shape(t, 2, wrong);
	if (st != SC_ERR_INVALID || !strstr(sc_last_error(), sc_tensor_name(t)))
		IT_FAIL("shape [17, 1312] for %d elements: %s (%s), expected SC_ERR_INVALID "
			"naming the tensor",
			SH_NUMEL, sc_status_name(st), sc_last_error());
	st = sc_tensor_set_shape(t, SC_MAX_DIMS + 1, many);
	if (st != SC_ERR_INVALID)
		IT_FAIL("a shape of %d dimensions: %s (%s), expected SC_ERR_INVALID",
			SC_MAX_DIMS + 1, sc_status_name(st), sc_last_error());
	IT_CHECK_SC(sc_tensor_set_shape(t, SC_MAX_DIMS, many), "a shape of %d dimensions",
		    SC_MAX_DIMS);
	it_log("refused: %s", sc_last_error());
}

/* This node's response cache entries (sparsectl stats). */
static double cache_entries(void)
{
	const char *args[] = {"stats", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *v = it_json_get(s, "cache_entries");
	double n = v && v->type == IT_JNUM ? v->num : -1;
	it_json_free(s);
	if (n < 0)
		IT_FAIL("sparsectl stats gives no cache_entries");
	return n;
}

/* The places of name in the fusion plan this node last received (sparsectl stats). */
static int plan_places(const char *name)
{
	const char *args[] = {"stats", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *f = it_json_get(s, "fusion");
	const it_json_t *bs = f ? it_json_get(f, "buffers") : NULL;
	int n = 0;
	for (size_t b = 0; bs && bs->type == IT_JARR && b < bs->n; b++) {
		const it_json_t *ts = it_json_get(bs->items[b], "tensors");
		for (size_t k = 0; ts && ts->type == IT_JARR && k < ts->n; k++)
			n += ts->items[k]->str && !strcmp(ts->items[k]->str, name);
	}
	it_json_free(s);
	return n;
}

/* A name whose shape alternates from step to step, exact every step, takes its two
 * forms' cache entries again instead of a new one each step, and keeps one place in the
 * fusion plan (a buffer holding both forms would wait every step for the one not
 * submitted). */
static void alternating(sc_client_t *c)
{
	sc_tensor_t *t = it_register(c, "shapes.alt", SC_FLOAT32, SH_NUMEL);
	expect_exact(c, t, 0, 2, flat2, 40, "[17, 1311]");
	expect_exact(c, t, 0, 2, flat2t, 41, "[1311, 17]");
	double before = cache_entries();
	for (int k = 0; k < 12; k++)
		expect_exact(c, t, 0, 2, k % 2 ? flat2t : flat2, 42 + (uint64_t)k,
			     k % 2 ? "[1311, 17]" : "[17, 1311]");
	double after = cache_entries();
	if (after != before)
		IT_FAIL("12 steps of 'shapes.alt' alternating between two shapes took the "
			"cache from %.0f to %.0f entries (its two forms were cached already)",
			before, after);
	it_log("12 alternating steps: %.0f cache entries before and after", before);
	int places = plan_places("shapes.alt");
	if (places > 1)
		IT_FAIL("after 12 steps alternating between two shapes, 'shapes.alt' has %d "
			"places in the fusion plan (one per form), not one",
			places);
	/* 68 forms twice: more than a name remembers (64), so the oldest go, their engine
	 * state forgotten, and come back as new ids; every step exact */
	uint64_t dims[SC_MAX_DIMS];
	for (int pass = 0; pass < 2; pass++)
		for (int k = 1; k <= 68; k++) {
			int ones = k <= 63 ? k : k - 63, nd = ones + 1;
			for (int i = 0; i < nd; i++)
				dims[i] = 1;
			dims[k <= 63 ? 0 : nd - 1] = SH_NUMEL;
			char what[48];
			snprintf(what, sizeof(what), "form %d of 68, pass %d", k, pass);
			expect_exact(c, t, 0, nd, dims, 100 + (uint64_t)k, what);
		}
	it_log("68 forms twice: %.0f cache entries", cache_entries());
}

/* An empty tensor's one-element stand-in (a shape with a 0): against a tensor of elements
 * on the other ranks it fails at once on every rank naming both counts and shapes (where
 * a node's own trainers would register the name alike: one trainer per node, or
 * "by-node"); given on every rank it completes; the library refuses a product of 0 on a
 * tensor of more than one element. */
static void empty_stand_in(sc_client_t *c, int rank, int apart)
{
	static const uint64_t empty[] = {0, 3}, full[] = {2, 3}, empty1[] = {0};
	char msg[2048];
	sc_tensor_t *x = it_register(c, "shapes.x6", SC_FLOAT32, 6);
	sc_status_t st = sc_tensor_set_shape(x, 2, empty);
	if (st != SC_ERR_INVALID || !strstr(sc_last_error(), "shapes.x6"))
		IT_FAIL("shape [0, 3] on a tensor of 6 elements: %s (%s), expected "
			"SC_ERR_INVALID naming the tensor",
			sc_status_name(st), sc_last_error());
	sc_tensor_t *e = it_register(c, "shapes.empty", SC_FLOAT32, 1);
	for (int k = 0; k < 2; k++)
		expect_exact(c, e, k, k ? 1 : 2, k ? empty1 : empty, 30 + (uint64_t)k,
			     k ? "[0] (broadcast)" : "[0, 3]");
	if (!apart)
		return;
	sc_tensor_t *t = it_register(c, "shapes.mixed", SC_FLOAT32, rank == 0 ? 1 : 6);
	IT_CHECK_SC(sc_tensor_set_shape(t, 2, rank == 0 ? empty : full),
		    "sc_tensor_set_shape('shapes.mixed')");
	double t0 = it_now_s();
	int r = step(c, t, 0, 7, msg, sizeof(msg));
	double dt = it_now_s() - t0;
	if (r != SC_ERR_MISMATCH || dt > SH_ERR_LIMIT || !strstr(msg, "shapes.mixed") ||
	    !strstr(msg, "element count") || !strstr(msg, "has 0 [0, 3]") ||
	    !strstr(msg, " 6 [2, 3]"))
		IT_FAIL(
		    "an empty [0, 3] on rank 0 against [2, 3]: expected SC_ERR_MISMATCH "
		    "within %.0f s naming 'shapes.mixed', 'has 0 [0, 3]' and '6 [2, 3]', got "
		    "%s after %.1f s: %s",
		    SH_ERR_LIMIT, it_wait_name(r), dt, msg);
	it_log("empty against full: SC_ERR_MISMATCH after %.2f s: %s", dt, msg);
	expect_exact(c, x, 0, 0, NULL, 33, "the next step, one shape everywhere");
}

int it_shapes(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	/* "by-node": the trainers of node 0 against the others' (else rank 0 against) */
	int by_node = argc > 1 && !strcmp(argv[1], "by-node");
	int rank = by_node ? sc_rank(c) / sc_local_size(c) : sc_rank(c);
	if (sc_size(c) < 2)
		IT_FAIL("needs at least 2 trainers, the job has %d", sc_size(c));
	sc_tensor_t *a = it_register(c, "shapes.a", SC_FLOAT32, SH_NUMEL);
	sc_tensor_t *b = it_register(c, "shapes.b", SC_FLOAT32, SH_NUMEL);
	sc_tensor_t *d = it_register(c, "shapes.deep", SC_FLOAT32, 1024);
	refusals(c, a);
	/* a shape kept across an allgather, which takes none */
	sc_handle_t h = 0;
	it_fill(sc_tensor_data(a), SC_FLOAT32, 8, 3, sc_rank(c), 1);
	IT_CHECK_SC(sc_allgather_async(c, a, 8, &h), "allgather of 'shapes.a' with a shape");
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("allgather of 'shapes.a' (a tensor with a shape): %s: %s",
			it_wait_name(r), it_wait_error());

	expect_exact(c, a, 0, 2, flat2, 10, "[17, 1311]");
	if (rank == 0)
		expect_mismatch(c, a, 0, 2, flat2, "[17, 1311]", "[17, 23, 57]");
	else
		expect_mismatch(c, a, 0, 3, deep3, "[17, 1311]", "[17, 23, 57]");
	if (rank == 0)
		expect_mismatch(c, b, 1, 2, flat2, "[17, 1311]", "[17, 23, 57]");
	else
		expect_mismatch(c, b, 1, 3, deep3, "[17, 1311]", "[17, 23, 57]");
	/* ten dimensions alike up to the eighth, then [4, 1] against [2, 2] */
	uint64_t ten[10] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
	if (rank != 0)
		ten[8] = 4, ten[9] = 1;
	expect_mismatch(c, d, 0, 10, ten, "[2, 2, 2, 2, 2, 2, 2, 3 more (hash ", "3 more");

	/* the same names, one shape everywhere, changed from step to step */
	expect_exact(c, a, 0, 3, deep3, 20, "[17, 23, 57]");
	expect_exact(c, a, 0, 2, flat2t, 21, "[1311, 17]");
	expect_exact(c, a, 0, 0, NULL, 22, "(none)");
	expect_exact(c, a, 0, 2, flat2, 23, "[17, 1311]");
	expect_exact(c, a, 0, 2, flat2, 24, "[17, 1311] again");
	expect_exact(c, b, 1, 3, deep3, 25, "[17, 23, 57]");
	ten[8] = 2, ten[9] = 2;
	expect_exact(c, d, 0, 10, ten, 26, "ten dimensions");
	alternating(c);
	empty_stand_in(c, rank, by_node || sc_local_size(c) == 1);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
