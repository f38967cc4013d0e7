/*
 * itest_badinput.c: one trainer's invalid input fails the operation on every rank, naming
 * that rank and the tensor, and the job goes on afterwards (the daemons' byte streams stay
 * in step). The last rank is the offender.
 *
 * badinput coo: a COO index past numel; every rank's allreduce fails with
 *   SC_ERR_INVALID naming the offending rank and the tensor, then a valid step is exact.
 * badinput nan-error (nonfinite = error): a NaN and an infinity in a dense tensor; the same.
 * badinput nan-warn (nonfinite = warn): the sum proceeds (every rank gets the NaN and the
 *   infinity where they were, every other element exact) and the offender's node counts the
 *   two non-finite values for the tensor in `sparsectl stats`; the others count none.
 * badinput nan-pass (nonfinite = pass): the sum proceeds as with warn and nothing is
 *   counted.
 * badinput compute: a threshold-sparsified tensor with a threshold that is positive as a
 *   double but 0 as float32 (the tensor's options are agreed, so every node has it), so
 *   every node's compute stage fails (the sparsifier cannot be made) before it
 *   communicates; every rank's allreduce fails within a few seconds (not at the stall or
 *   operation timeout) with the same error naming the lowest faulty node's rank (rank 0)
 *   and the tensor, and a valid step of another tensor is then exact.
 * badinput header: every trainer scribbles over the offsets and capacities in its shared
 *   buffer's header (proto/shm_layout.h) before each step; the daemon uses its own copies,
 *   so COO and dense steps stay exact and no daemon crashes.
 * badinput truncate: after a valid step, the offender truncates its tensor's shared object
 *   (as any process holding its descriptor can); its next allreduce of that tensor fails at
 *   once with SC_ERR_INVALID naming the tensor and the truncation, its daemon stays up, and
 *   a valid step of another tensor is then exact on every rank.
 */
#include "itest.h"
#include "shm_layout.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BI_NUMEL 1000

/* Every rank's allreduce of t, started by start, must fail with SC_ERR_INVALID naming
 * the offending rank and the tensor name. */
static void expect_everyone_fails(sc_client_t *c, sc_handle_t h, int bad, const char *name)
{
	int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
	const char *why = it_wait_error();
	if (r != SC_ERR_INVALID)
		IT_FAIL(
		    "'%s' with rank %d's invalid input: %s (%s), expected SC_ERR_INVALID on "
		    "every rank",
		    name, bad, it_wait_name(r), why);
	char quoted[300];
	snprintf(quoted, sizeof(quoted), "'%s'", name);
	if (!it_mentions_rank(why, bad) || !strstr(why, quoted))
		IT_FAIL("the error of '%s' does not name rank %d and the tensor: %s", name, bad,
			why);
	it_log("'%s' failed as expected: %s", name, why);
}

/* A valid step of a dense tensor: exact on every rank. */
static void valid_dense_step(sc_client_t *c, sc_tensor_t *t, const char *name, uint64_t seed)
{
	char why[512];
	it_fill(sc_tensor_data(t), SC_FLOAT32, BI_NUMEL, seed, sc_rank(c), 1);
	IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS), "valid step of '%s'",
		    name);
	size_t wrong = it_check(sc_tensor_data(t), SC_FLOAT32, BI_NUMEL, seed, sc_size(c), 1,
				SC_OP_SUM, why, sizeof(why));
	if (wrong)
		IT_FAIL("'%s' after the failed step: %zu of %d elements wrong: %s", name, wrong,
			BI_NUMEL, why);
}

/* Rank me's COO input: 1 at j * 100 + me for j < 4 (4 entries). */
static void fill_coo(sc_tensor_t *t, int me)
{
	uint32_t *idx = sc_tensor_coo_indices(t);
	float *val = sc_tensor_coo_values(t);
	for (int j = 0; j < 4; j++) {
		idx[j] = (uint32_t)(j * 100 + me);
		val[j] = 1.0f;
	}
}

/* The sum of every rank's fill_coo: 1 at j * 100 + r for j < 4 and r < size. */
static void check_coo_sum(sc_client_t *c, sc_tensor_t *t, const char *name, const char *when)
{
	const float *x = sc_tensor_data(t);
	for (int i = 0; i < BI_NUMEL; i++) {
		int want = i / 100 < 4 && i % 100 < sc_size(c) ? 1 : 0;
		if (x[i] != (float)want)
			IT_FAIL("'%s' element %d is %g %s, expected %d", name, i, (double)x[i],
				when, want);
	}
}

static void bad_coo(sc_client_t *c, int bad)
{
	const char *name = "badinput.coo";
	sc_tensor_opts_t o = {.struct_size = sizeof(o), .coo_capacity = 8};
	sc_tensor_t *t;
	IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, BI_NUMEL, &o, &t), "register '%s'",
		    name);
	int me = sc_rank(c);
	for (int step = 0; step < 2; step++) {
		fill_coo(t, me);
		if (step == 0 && me == bad)
			sc_tensor_coo_indices(t)[2] = BI_NUMEL + 7; /* out of range */
		sc_handle_t h;
		IT_CHECK_SC(sc_allreduce_coo_async(c, t, 4, SC_OP_SUM, &h), "COO allreduce");
		if (step == 0) {
			expect_everyone_fails(c, h, bad, name);
			continue;
		}
		int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("valid COO step of '%s' after the failed one: %s (%s)", name,
				it_wait_name(r), it_wait_error());
		check_coo_sum(c, t, name, "after the valid step");
	}
}

static void bad_nan(sc_client_t *c, int bad, const char *mode)
{
	const char *name = "badinput.nan";
	sc_tensor_t *t = it_register(c, name, SC_FLOAT32, BI_NUMEL);
	int me = sc_rank(c), size = sc_size(c);
	float *x = sc_tensor_data(t);
	it_fill(x, SC_FLOAT32, BI_NUMEL, 3, me, 1);
	if (me == bad) {
		x[3] = NAN;
		x[5] = INFINITY;
	}
	sc_handle_t h;
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "allreduce of '%s'", name);
	if (!strcmp(mode, "nan-error")) {
		expect_everyone_fails(c, h, bad, name);
		valid_dense_step(c, t, name, 4);
		/* an Adasum (a collective of its own) checks its input the same way */
		const char *an = "badinput.nan.adasum";
		sc_tensor_t *a = it_register(c, an, SC_FLOAT32, BI_NUMEL);
		float *y = sc_tensor_data(a);
		it_fill(y, SC_FLOAT32, BI_NUMEL, 3, me, 1);
		if (me == bad)
			y[2] = NAN;
		IT_CHECK_SC(sc_allreduce_async(c, a, SC_OP_ADASUM, &h), "adasum of '%s'", an);
		expect_everyone_fails(c, h, bad, an);
		return;
	}
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("'%s' with a NaN under %s: %s (%s), expected the sum to proceed", name,
			mode, it_wait_name(r), it_wait_error());
	for (int i = 0; i < BI_NUMEL; i++) {
		int want = it_value_sum(3, size, (uint64_t)i);
		int ok = i == 3 ? isnan(x[i]) : i == 5 ? isinf(x[i]) : x[i] == (float)want;
		if (!ok)
			IT_FAIL("'%s' under %s: element %d is %g", name, mode, i, (double)x[i]);
	}
	/* the node of the offender counts its two values, under warn only */
	int node = it_env.env_node_rank, bad_node = bad / it_env.env_local_size;
	double want = !strcmp(mode, "nan-warn") && node == bad_node ? 2 : 0;
	double got = it_stats_number(it_env.socket, name, "nonfinite");
	if (got != want)
		IT_FAIL("stats of '%s' on node %d under %s: nonfinite %g, expected %g", name,
			node, mode, got, want);
	it_log("'%s' under %s: summed, node %d counts %g non-finite values", name, mode, node,
	       got);
	valid_dense_step(c, t, name, 4);
}

static void bad_compute(sc_client_t *c, int bad)
{
	const char *name = "badinput.compute";
	int me = sc_rank(c);
	sc_tensor_opts_t o = {
	    .struct_size = sizeof(o), .sparsifier = SC_SPARSIFY_THRESHOLD, .threshold = 1e-50};
	bad = 0; /* every node fails: the error names the lowest */
	sc_tensor_t *t, *d = it_register(c, "badinput.compute.dense", SC_FLOAT32, BI_NUMEL);
	IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, BI_NUMEL, &o, &t), "register '%s'",
		    name);
	it_fill(sc_tensor_data(t), SC_FLOAT32, BI_NUMEL, 5, me, 1);
	it_barrier(c, "badinput.compute", 0);
	double t0 = it_now_s();
	sc_handle_t h;
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "allreduce of '%s'", name);
	expect_everyone_fails(c, h, bad, name);
	double took = it_now_s() - t0;
	if (took > 10)
		IT_FAIL("'%s' failed only after %.1f s: its peers waited for rank %d", name,
			took, bad);
	it_log("'%s' failed on every rank after %.2f s", name, took);
	for (int step = 0; step < 2; step++)
		valid_dense_step(c, d, "badinput.compute.dense", (uint64_t)step);
}

/* Offsets and capacities a daemon that trusted them would read past its mapping with. */
static void scribble_header(sc_tensor_t *t)
{
	sc_shm_header_t *h =
	    (sc_shm_header_t *)((char *)sc_tensor_data(t) - SC_SHM_DATA_OFFSET);
	h->data_offset = UINT64_MAX / 2;
	h->numel = UINT64_MAX;
	h->coo_cap = UINT64_MAX;
	h->coo_idx_offset = 1ull << 40;
	h->coo_val_offset = 1ull << 41;
	h->total_bytes = 1;
	h->residual_offset = 1ull << 42;
}

static void scribbled_header(sc_client_t *c)
{
	const char *name = "badinput.header";
	sc_tensor_opts_t o = {.struct_size = sizeof(o), .coo_capacity = 8};
	sc_tensor_t *t, *d = it_register(c, "badinput.header.dense", SC_FLOAT32, BI_NUMEL);
	IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, BI_NUMEL, &o, &t), "register '%s'",
		    name);
	int me = sc_rank(c);
	for (int step = 0; step < 3; step++) {
		fill_coo(t, me);
		scribble_header(t);
		sc_handle_t h;
		IT_CHECK_SC(sc_allreduce_coo_async(c, t, 4, SC_OP_SUM, &h), "COO allreduce");
		int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("COO step %d of '%s' with a scribbled header: %s (%s)", step,
				name, it_wait_name(r), it_wait_error());
		check_coo_sum(c, t, name, "with a scribbled header");
		scribble_header(d);
		valid_dense_step(c, d, "badinput.header.dense", (uint64_t)step);
	}
}

/* The path of the /dev/shm object mapped at addr, from /proc/self/maps. */
static void shm_path_of(const void *addr, char *path, size_t len)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[1024];
	path[0] = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char *p = strstr(line, "/dev/shm/");
		if (p && sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)addr >= lo &&
		    (uintptr_t)addr < hi) {
			p[strcspn(p, "\n")] = 0;
			snprintf(path, len, "%s", p);
		}
	}
	if (f)
		fclose(f);
	if (!path[0])
		IT_FAIL("no /dev/shm mapping holds the tensor's data at %p", addr);
}

static void truncated(sc_client_t *c, int bad)
{
	const char *name = "badinput.trunc";
	sc_tensor_t *t = it_register(c, name, SC_FLOAT32, BI_NUMEL);
	sc_tensor_t *d = it_register(c, "badinput.trunc.dense", SC_FLOAT32, BI_NUMEL);
	valid_dense_step(c, t, name, 1);
	if (sc_rank(c) == bad) {
		char path[512];
		shm_path_of(sc_tensor_data(t), path, sizeof(path));
		if (truncate(path, 0) != 0)
			IT_FAIL("truncate(%s): %s", path, strerror(errno));
		sc_handle_t h;
		int r = sc_allreduce_async(c, t, SC_OP_SUM, &h);
		if (r == SC_OK)
			r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
		const char *why = r == SC_OK ? "" : it_wait_error();
		if (r != SC_ERR_INVALID || !strstr(why, "'badinput.trunc'") ||
		    !strstr(why, "truncated"))
			IT_FAIL(
			    "allreduce of a truncated '%s': %s (%s), expected SC_ERR_INVALID "
			    "naming the tensor and the truncation",
			    name, it_wait_name(r), why);
		it_log("'%s' refused as expected: %s", name, why);
	}
	for (int step = 0; step < 2; step++)
		valid_dense_step(c, d, "badinput.trunc.dense", (uint64_t)step);
}

int it_badinput(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	if (strcmp(mode, "coo") && strcmp(mode, "nan-error") && strcmp(mode, "nan-warn") &&
	    strcmp(mode, "nan-pass") && strcmp(mode, "header") && strcmp(mode, "compute") &&
	    strcmp(mode, "truncate"))
		IT_FAIL(
		    "badinput: mode '%s' is not coo, nan-error, nan-warn, nan-pass, header, "
		    "compute or truncate",
		    mode);
	sc_client_t *c = it_connect();
	int bad = sc_size(c) - 1;
	if (!strcmp(mode, "header"))
		scribbled_header(c);
	else if (!strcmp(mode, "coo"))
		bad_coo(c, bad);
	else if (!strcmp(mode, "compute"))
		bad_compute(c, bad);
	else if (!strcmp(mode, "truncate"))
		truncated(c, bad);
	else
		bad_nan(c, bad, mode);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
