/*
 * itest_presel.c: sparsification ahead at submission (coll/presel.h; docs/design.md,
 * "Fusion plans"). Run with one fused buffer of every tensor (fusion_mode aligned,
 * fusion_buffers 1, a long fusion_wait_ms) and a pinned scheme, so that only the moment of
 * the selection differs between the two phases:
 *  - reference: sparsify_on_submit 0 on every node; PS_N top-k tensors (residuals kept),
 *    tensor 0 with COO input (PS_COO_NNZ entries a trainer), the others dense, PS_STEPS
 *    steps, each submitting tensors 0 and 1, then after PS_GAP_MS the others;
 *  - ahead: sparsify_on_submit 1, the same steps on PS_N fresh tensors under a timeline:
 *    every result and every residual (local rank 0's view) is bit-identical to the
 *    reference's, and timeline_check.py finds, from the first step on (then speculative:
 *    the response cache does not know the tensors yet), the selections at submission of
 *    tensors 0 (COO) and 1 (dense) ended before the last tensor was submitted, and their
 *    buffer took them (--ahead-before);
 *  - a failed step: a cached tensor whose node 0 announces a sum while the other nodes
 *    announce an average fails on every rank (the plan's error), after node 0 may have
 *    selected it at submission; node 0's residual is then bit for bit what it was, and
 *    the next step's result and residual equal those of a tensor that never had the failed
 *    step (nothing lost, nothing counted twice);
 *  - a failed first step: the same with a tensor's first step, which every node selects
 *    speculatively at submission with its own options: node 0's residual is as it was,
 *    and the next step's result and residual equal a fresh tensor's first step's;
 *  - a COO first step with an index out of range on rank 0 (found by its selection at
 *    submission): fails on every rank (SC_ERR_INVALID), and the residual it leaves and
 *    the next step are bit for bit those of the same steps selected at the buffer.
 * Usage: presel DIR (for the timeline files) [cuda LOG]: with cuda, every tensor is a cuda
 * tensor (the host build of the GPU library and the CUDA driver stand-in, as
 * itest_cuda.c; LOG its log), on GPU local rank % $SCG_HOST_DEVICES (a source off the
 * engine GPU is copied there), selected at submission on the GPU device, and every check
 * above holds for it alike.
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PS_N	   4
#define PS_NUMEL   20000
#define PS_STEPS   4
#define PS_GAP_MS  200
#define PS_COO_NNZ 3000
#define PS_FILE_S  10.0

static int ps_cuda; /* the tensors are cuda tensors */

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

static void ctl_set(const char *key, const char *value)
{
	static char out[1 << 14];
	const char *args[] = {"config", "set", key, value, NULL};
	if (it_run_ctl(it_env.socket, out, sizeof(out), args) != 0)
		IT_FAIL("sparsectl config set %s %s: %.300s", key, value, out);
}

static void ctl_run(const char *const *args)
{
	static char out[1 << 14];
	if (it_run_ctl(it_env.socket, out, sizeof(out), args) != 0)
		IT_FAIL("sparsectl %s %s: %.300s", args[0], args[1], out);
}

/* Distinct magnitudes (no ties at the k-th largest), different on every rank and step. */
static void fill(float *x, int t, int rank, int step)
{
	for (int i = 0; i < PS_NUMEL; i++) {
		uint32_t h = (uint32_t)(i * 2654435761u) ^
			     (uint32_t)(t * 40503 + rank * 7919 + step * 104729);
		h = (h ^ (h >> 15)) * 2246822519u;
		x[i] = (float)((h >> 8) % 1000003) * (h & 1 ? 1e-3f : -1e-3f);
	}
}

/* A COO list of PS_COO_NNZ distinct indices (repeated across ranks: summed) and values
 * of distinct magnitudes, different on every rank and step. */
static void fill_coo(uint32_t *idx, float *val, int t, int rank, int step)
{
	for (int j = 0; j < PS_COO_NNZ; j++) {
		idx[j] = (uint32_t)((j * 7 + t + rank * 3 + step * 11) % PS_NUMEL);
		uint32_t h =
		    (uint32_t)(j * 2654435761u) ^ (uint32_t)(rank * 7919 + step * 104729);
		h = (h ^ (h >> 15)) * 2246822519u;
		val[j] = (float)((h >> 8) % 1000003) * (h & 1 ? 1e-3f : -1e-3f);
	}
}

static sc_tensor_t *reg(sc_client_t *c, const char *name, int coo)
{
	sc_tensor_opts_t o = {.struct_size = sizeof(o)};
	o.allow_lossy = 1;
	o.coo_capacity = coo ? PS_COO_NNZ : 0;
	o.sparsifier = SC_SPARSIFY_TOPK;
	o.density = 0.01;
	if (ps_cuda) {
		const char *g = getenv("SCG_HOST_DEVICES");
		int gpus = g && atoi(g) > 0 ? atoi(g) : 1;
		o.device = SC_DEVICE_CUDA;
		o.device_ordinal = it_env.env_local_rank > 0 ? it_env.env_local_rank % gpus : 0;
	}
	sc_tensor_t *t;
	IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, PS_NUMEL, &o, &t), "register '%s'",
		    name);
	return t;
}

static void wait_ok(sc_client_t *c, sc_handle_t h, const char *what, int step)
{
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("step %d: '%s': %s (%s)", step, what, it_wait_name(r), it_wait_error());
}

/* PS_STEPS steps of the PS_N tensors named PREFIX.k; hash[s][k]: result and residual. */
static void run_steps(sc_client_t *c, const char *prefix, int rank, uint64_t hash[][PS_N])
{
	sc_tensor_t *t[PS_N];
	char name[PS_N][64];
	for (int k = 0; k < PS_N; k++) {
		snprintf(name[k], sizeof(name[k]), "%s.%d", prefix, k);
		t[k] = reg(c, name[k], k == 0);
	}
	for (int s = 0; s < PS_STEPS; s++) {
		sc_handle_t h[PS_N];
		for (int k = 0; k < PS_N; k++) {
			if (k == 2)
				it_sleep_ms(PS_GAP_MS); /* the later tensors' backward pass */
			if (k == 0) {
				fill_coo(sc_tensor_coo_indices(t[k]),
					 sc_tensor_coo_values(t[k]), k, rank, s);
				IT_CHECK_SC(sc_allreduce_coo_async(c, t[k], PS_COO_NNZ,
								   SC_OP_SUM, &h[k]),
					    "step %d: '%s'", s, name[k]);
				continue;
			}
			fill(sc_tensor_data(t[k]), k, rank, s);
			IT_CHECK_SC(sc_allreduce_async(c, t[k], SC_OP_SUM, &h[k]),
				    "step %d: '%s'", s, name[k]);
		}
		for (int k = 0; k < PS_N; k++) {
			wait_ok(c, h[k], name[k], s);
			const float *res = sc_tensor_residual(t[k]);
			hash[s][k] = hash_bytes(sc_tensor_data(t[k]), PS_NUMEL * sizeof(float),
						1469598103934665603ull);
			if (res && it_env.env_local_rank <= 0)
				hash[s][k] =
				    hash_bytes(res, PS_NUMEL * sizeof(float), hash[s][k]);
		}
	}
}

/* The timeline of the ahead phase: started before, stopped and checked after. */
static void timeline(sc_client_t *c, const char *dir, int rank, int start)
{
	char pattern[4200], mine[4200];
	snprintf(pattern, sizeof(pattern), "%s/ps-%%r.json", dir);
	snprintf(mine, sizeof(mine), "%s/ps-%d.json", dir, it_env.env_node_rank);
	if (rank == 0) {
		const char *on[] = {"timeline", "start", pattern, NULL};
		const char *off[] = {"timeline", "stop", NULL};
		ctl_run(start ? on : off);
	}
	double deadline = it_now_s() + PS_FILE_S;
	for (;;) { /* the setting reaches every node; a stopped file ends with "}}" */
		FILE *f = fopen(mine, "rb");
		char end[4] = {0};
		int ok = f && (start || (fseek(f, -3, SEEK_END) == 0 &&
					 fread(end, 1, 3, f) == 3 && !strcmp(end, "}}\n")));
		if (f)
			fclose(f);
		if (ok)
			break;
		if (it_now_s() > deadline)
			IT_FAIL("timeline file %s not %s in %.0f s", mine,
				start ? "created" : "closed", PS_FILE_S);
		it_sleep_ms(20);
	}
	if (start || it_env.env_local_rank > 0)
		return;
	char cmd[9000];
	snprintf(
	    cmd, sizeof(cmd),
	    "timeout 60 python3 %s/../../tests/integration/timeline_check.py %s --rank %d "
	    "--world %d --steps %d --tensors ps.ahead.0,ps.ahead.1,ps.ahead.%d --sparsified "
	    "ps.ahead.0,ps.ahead.1,ps.ahead.%d --ahead-before "
	    "ps.ahead.0:ps.ahead.%d,ps.ahead.1:ps.ahead.%d --ahead-from 1",
	    it_env.self_dir, mine, it_env.env_node_rank, it_env.env_node_count, PS_STEPS,
	    PS_N - 1, PS_N - 1, PS_N - 1, PS_N - 1);
	fflush(NULL);
	if (system(cmd) != 0)
		IT_FAIL("timeline_check.py on %s failed: see its lines above", mine);
}

/* The failed step (see the top): tensor ps.fail with its failed step 1, ps.clean without. */
static void failed_step(sc_client_t *c, int rank)
{
	sc_tensor_t *f = reg(c, "ps.fail", 0), *g = reg(c, "ps.clean", 0);
	int node = it_env.env_node_rank, lead = it_env.env_local_rank <= 0;
	sc_handle_t h;
	static float before[PS_NUMEL];
	for (int s = 0; s < 3; s++) {
		fill(sc_tensor_data(f), 9, rank, s == 0 ? 0 : s - 1);
		if (s == 1 && lead && sc_tensor_residual(f))
			memcpy(before, sc_tensor_residual(f), sizeof(before));
		/* step 1: node 0 sums, the others average: the plan fails it everywhere */
		sc_reduce_op_t op = s == 1 && node != 0 ? SC_OP_AVERAGE : SC_OP_SUM;
		IT_CHECK_SC(sc_allreduce_async(c, f, op, &h), "ps.fail step %d", s);
		int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
		if (s == 1 && r == SC_OK)
			IT_FAIL("ps.fail step 1 (sum on node 0, average elsewhere) succeeded");
		if (s != 1 && r != SC_OK)
			IT_FAIL("ps.fail step %d: %s (%s)", s, it_wait_name(r),
				it_wait_error());
		if (s == 1 && lead && sc_tensor_residual(f) &&
		    memcmp(before, sc_tensor_residual(f), sizeof(before)))
			IT_FAIL("ps.fail: the failed step changed node %d's residual", node);
		it_barrier(c, "presel.fail", 0);
	}
	for (int s = 0; s < 2; s++) {
		fill(sc_tensor_data(g), 9, rank, s);
		IT_CHECK_SC(sc_allreduce_async(c, g, SC_OP_SUM, &h), "ps.clean step %d", s);
		wait_ok(c, h, "ps.clean", s);
	}
	if (memcmp(sc_tensor_data(f), sc_tensor_data(g), PS_NUMEL * sizeof(float)))
		IT_FAIL(
		    "ps.fail's step after the failed one differs from ps.clean's second step");
	if (lead && sc_tensor_residual(f) &&
	    memcmp(sc_tensor_residual(f), sc_tensor_residual(g), PS_NUMEL * sizeof(float)))
		IT_FAIL("ps.fail's residual after the failed step differs from ps.clean's");
}

/* The failed first step (see the top): ps.fail0's first step fails, ps.clean0 has none. */
static void failed_first_step(sc_client_t *c, int rank)
{
	sc_tensor_t *f = reg(c, "ps.fail0", 0), *g = reg(c, "ps.clean0", 0);
	int node = it_env.env_node_rank, lead = it_env.env_local_rank <= 0;
	sc_handle_t h;
	static float before[PS_NUMEL];
	if (lead && sc_tensor_residual(f))
		memcpy(before, sc_tensor_residual(f), sizeof(before));
	fill(sc_tensor_data(f), 8, rank, 0);
	IT_CHECK_SC(sc_allreduce_async(c, f, node != 0 ? SC_OP_AVERAGE : SC_OP_SUM, &h),
		    "ps.fail0 step 0");
	if (it_wait(c, h, IT_OP_TIMEOUT_MS) == SC_OK)
		IT_FAIL("ps.fail0 step 0 (sum on node 0, average elsewhere) succeeded");
	if (lead && sc_tensor_residual(f) &&
	    memcmp(before, sc_tensor_residual(f), sizeof(before)))
		IT_FAIL("ps.fail0: the failed first step changed node %d's residual", node);
	it_barrier(c, "presel.fail0", 0);
	fill(sc_tensor_data(f), 8, rank, 0);
	IT_CHECK_SC(sc_allreduce_async(c, f, SC_OP_SUM, &h), "ps.fail0 step 1");
	wait_ok(c, h, "ps.fail0", 1);
	fill(sc_tensor_data(g), 8, rank, 0);
	IT_CHECK_SC(sc_allreduce_async(c, g, SC_OP_SUM, &h), "ps.clean0 step 0");
	wait_ok(c, h, "ps.clean0", 0);
	if (memcmp(sc_tensor_data(f), sc_tensor_data(g), PS_NUMEL * sizeof(float)))
		IT_FAIL("ps.fail0's step after its failed first step differs from ps.clean0's "
			"first step");
	if (lead && sc_tensor_residual(f) &&
	    memcmp(sc_tensor_residual(f), sc_tensor_residual(g), PS_NUMEL * sizeof(float)))
		IT_FAIL("ps.fail0's residual after its failed first step differs from "
			"ps.clean0's");
}

/* The COO first step with a bad index (see the top) of tensor NAME: it fails on every
 * rank; h[0]: the residual it left (local rank 0's), h[1]: the next step's result and
 * residual. */
static void bad_coo_first_step(sc_client_t *c, int rank, const char *name, uint64_t h[2])
{
	sc_tensor_t *f = reg(c, name, 1);
	int lead = it_env.env_local_rank <= 0;
	sc_handle_t hd;
	fill_coo(sc_tensor_coo_indices(f), sc_tensor_coo_values(f), 5, rank, 0);
	if (rank == 0)
		sc_tensor_coo_indices(f)[PS_COO_NNZ / 2] = PS_NUMEL;
	IT_CHECK_SC(sc_allreduce_coo_async(c, f, PS_COO_NNZ, SC_OP_SUM, &hd), "%s step 0",
		    name);
	int r = it_wait(c, hd, IT_OP_TIMEOUT_MS);
	if (r != SC_ERR_INVALID)
		IT_FAIL("%s step 0 (an index out of range on rank 0): %s, not SC_ERR_INVALID "
			"(%s)",
			name, it_wait_name(r), it_wait_error());
	const float *res = sc_tensor_residual(f);
	h[0] = lead && res ? hash_bytes(res, PS_NUMEL * sizeof(float), 1) : 0;
	it_barrier(c, "presel.badcoo", 0);
	fill_coo(sc_tensor_coo_indices(f), sc_tensor_coo_values(f), 5, rank, 1);
	IT_CHECK_SC(sc_allreduce_coo_async(c, f, PS_COO_NNZ, SC_OP_SUM, &hd), "%s step 1",
		    name);
	wait_ok(c, hd, name, 1);
	h[1] = hash_bytes(sc_tensor_data(f), PS_NUMEL * sizeof(float), 1);
	if (lead && res)
		h[1] = hash_bytes(res, PS_NUMEL * sizeof(float), h[1]);
}

int it_presel(int argc, char **argv)
{
	if (argc < 2 || (argc > 2 && (argc < 4 || strcmp(argv[2], "cuda"))))
		IT_FAIL("usage: presel DIR [cuda LOG]");
	ps_cuda = argc > 2;
	if (ps_cuda)
		it_cuda_stand_in(argc - 2, argv + 2);
	if (it_env.env_node_rank < 0)
		IT_FAIL(
		    "$SPARSECOMM_NODE_RANK is not set: the node's timeline file is unknown");
	it_sparsectl_find();
	sc_client_t *c = it_connect();
	int rank = sc_rank(c);
	static uint64_t ref[PS_STEPS][PS_N], ahead[PS_STEPS][PS_N];
	if (it_env.env_local_rank <= 0)
		ctl_set("sparsify_on_submit", "0");
	it_barrier(c, "presel.off", 0);
	run_steps(c, "ps.ref", rank, ref);
	if (it_env.env_local_rank <= 0)
		ctl_set("sparsify_on_submit", "1");
	it_barrier(c, "presel.on", 0);
	timeline(c, argv[1], rank, 1);
	run_steps(c, "ps.ahead", rank, ahead);
	it_barrier(c, "presel.ran", 0);
	timeline(c, argv[1], rank, 0);
	for (int s = 0; s < PS_STEPS; s++)
		for (int k = 0; k < PS_N; k++)
			if (ref[s][k] != ahead[s][k])
				IT_FAIL("step %d, tensor %d: result or residual selected at "
					"submission "
					"differs from the one selected at its buffer",
					s, k);
	it_log("%d steps of %d %s tensors: results and residuals bit-identical", PS_STEPS, PS_N,
	       ps_cuda ? "cuda" : "cpu");
	failed_step(c, rank);
	it_log("a failed step left the residual as it was; the next step is exact");
	failed_first_step(c, rank);
	it_log("a failed first step left the residual as it was; the next step is exact");
	uint64_t bad_off[2], bad_on[2];
	if (it_env.env_local_rank <= 0)
		ctl_set("sparsify_on_submit", "0");
	it_barrier(c, "presel.off2", 0);
	bad_coo_first_step(c, rank, "ps.badcoo.off", bad_off);
	if (it_env.env_local_rank <= 0)
		ctl_set("sparsify_on_submit", "1");
	it_barrier(c, "presel.on2", 0);
	bad_coo_first_step(c, rank, "ps.badcoo.on", bad_on);
	if (bad_off[0] != bad_on[0] || bad_off[1] != bad_on[1])
		IT_FAIL("a COO first step with a bad index: the %s selected at submission "
			"differs from the one selected at its buffer",
			bad_off[0] != bad_on[0] ? "residual it left" : "next step");
	it_log("a COO first step with a bad index failed everywhere, as at its buffer");
	it_barrier(c, "presel.done", 0);
	sc_finalize(c);
	it_pass();
}
