/*
 * itest_timeline.c: the daemons' timelines (docs/design.md, Timeline) around a few steps.
 *
 * Rank 0 runs `sparsectl timeline start DIR/tl-%r.json` on its node's socket (the setting
 * reaches every node); every trainer waits until its node's file exists, then all run
 * TL_STEPS steps of three small dense tensors (fused into one buffer) and one top-k
 * sparsified tensor. After a barrier rank 0 runs `sparsectl timeline stop`, every trainer
 * waits until its node's file is closed, and local rank 0 of each node runs
 * tests/integration/timeline_check.py on it: valid JSON, phases nesting on every lane,
 * every tensor with wait_ranks, local_sum and copy_out in every step, sparsify for the
 * top-k tensor, and buffers with their scheme and exchange rounds.
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TL_STEPS     3
#define TL_FILE_MS   10000 /* the setting reaching a node, or the file closed */
#define TL_CHECK_S   60	   /* the checker's run */
#define TL_TOPK_N    100000
#define TL_N_TENSORS 4

static const char *const tl_names[TL_N_TENSORS] = {"tl.dense.a", "tl.dense.b", "tl.dense.c",
						   "tl.topk"};
static const size_t tl_numel[TL_N_TENSORS] = {1000, 3000, 10, TL_TOPK_N};

static void ctl_ok(const char *const *args)
{
	static char out[1 << 16];
	int rc = it_run_ctl(it_env.socket, out, sizeof(out), args);
	if (rc != 0)
		IT_FAIL("sparsectl %s %s exited with %d: %.300s", args[0], args[1], rc, out);
}

/* Whether the file exists and, with closed, ends as a stopped timeline does. */
static int file_ready(const char *path, int closed)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	int ok = !closed;
	if (closed && fseek(f, -3, SEEK_END) == 0) {
		char end[4] = {0};
		ok = fread(end, 1, 3, f) == 3 && !strcmp(end, "}}\n");
	}
	fclose(f);
	return ok;
}

static void wait_file(const char *path, int closed)
{
	double deadline = it_now_s() + TL_FILE_MS / 1000.0;
	while (!file_ready(path, closed)) {
		if (it_now_s() > deadline)
			IT_FAIL("timeline file %s not %s within %d ms", path,
				closed ? "closed" : "created", TL_FILE_MS);
		it_sleep_ms(20);
	}
}

static void step(sc_client_t *c, sc_tensor_t **t, int s, int rank, int size)
{
	sc_handle_t h[TL_N_TENSORS];
	char why[512];
	for (int k = 0; k < TL_N_TENSORS; k++) {
		it_fill(sc_tensor_data(t[k]), SC_FLOAT32, tl_numel[k], (uint64_t)s, rank, 1);
		IT_CHECK_SC(sc_allreduce_async(c, t[k], SC_OP_SUM, &h[k]), "step %d: '%s'", s,
			    tl_names[k]);
	}
	for (int k = 0; k < TL_N_TENSORS; k++) {
		int w = it_wait(c, h[k], IT_OP_TIMEOUT_MS);
		if (w != SC_OK)
			IT_FAIL("step %d: '%s': %s (%s)", s, tl_names[k], it_wait_name(w),
				it_wait_error());
	}
	for (int k = 0; k < TL_N_TENSORS - 1; k++) /* the dense ones are exact */
		if (it_check(sc_tensor_data(t[k]), SC_FLOAT32, tl_numel[k], (uint64_t)s, size,
			     1, SC_OP_SUM, why, sizeof(why)))
			IT_FAIL("step %d: '%s': wrong sum: %s", s, tl_names[k], why);
}

int it_timeline(int argc, char **argv)
{
	if (argc < 2)
		IT_FAIL("usage: timeline DIR");
	const char *dir = argv[1];
	if (it_env.env_node_rank < 0)
		IT_FAIL("$SPARSECOMM_NODE_RANK is not set: the node's file is unknown");
	it_sparsectl_find();
	sc_client_t *c = it_connect();
	int rank = sc_rank(c), size = sc_size(c);
	sc_tensor_t *t[TL_N_TENSORS];
	for (int k = 0; k < TL_N_TENSORS - 1; k++)
		t[k] = it_register(c, tl_names[k], SC_FLOAT32, tl_numel[k]);
	sc_tensor_opts_t o = {.struct_size = sizeof(o)};
	o.allow_lossy = 1;
	o.sparsifier = SC_SPARSIFY_TOPK;
	o.density = 0.01;
	IT_CHECK_SC(sc_register_ex(c, tl_names[3], SC_FLOAT32, TL_TOPK_N, &o, &t[3]),
		    "register '%s'", tl_names[3]);

	char pattern[4200], mine[4200];
	snprintf(pattern, sizeof(pattern), "%s/tl-%%r.json", dir);
	snprintf(mine, sizeof(mine), "%s/tl-%d.json", dir, it_env.env_node_rank);
	if (rank == 0) {
		const char *args[] = {"timeline", "start", pattern, NULL};
		ctl_ok(args);
	}
	wait_file(mine, 0);
	for (int s = 0; s < TL_STEPS; s++)
		step(c, t, s, rank, size);
	it_barrier(c, "timeline", 0);
	if (rank == 0) {
		const char *args[] = {"timeline", "stop", NULL};
		ctl_ok(args);
	}
	wait_file(mine, 1);
	it_log("timeline file %s closed", mine);
	if (it_env.env_local_rank <= 0) {
		char cmd[9000];
		snprintf(
		    cmd, sizeof(cmd),
		    "timeout %d python3 %s/../../tests/integration/timeline_check.py %s "
		    "--rank %d --world %d --steps %d --tensors %s,%s,%s,%s --sparsified %s",
		    TL_CHECK_S, it_env.self_dir, mine, it_env.env_node_rank,
		    it_env.env_node_count, TL_STEPS, tl_names[0], tl_names[1], tl_names[2],
		    tl_names[3], tl_names[3]);
		fflush(NULL);
		int rc = system(cmd);
		if (rc != 0)
			IT_FAIL(
			    "timeline_check.py on %s failed (status %d): see its lines above",
			    mine, rc);
		it_log("timeline_check.py: %s holds every tensor of the %d steps", mine,
		       TL_STEPS);
	}
	it_barrier(c, "timeline.checked", 0);
	sc_finalize(c);
	it_pass();
}
