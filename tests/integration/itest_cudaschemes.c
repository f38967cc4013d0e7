/*
 * itest_cudaschemes.c: every scheme of the daemons, pinned, on cuda tensors (the host build
 * of the GPU library and the CUDA driver stand-in, as itest_cuda.c), over the transport the
 * job's daemons give GPU buffers.
 *
 *   cuda-schemes LOG TRANSPORT: per scheme, a cuda tensor taking COO input (rank r's
 *       entries at distinct indices, small-integer values, so every sum is exact in any
 *       order). A lossless scheme must deliver the exact sum on every rank; a lossy one
 *       must conserve: the result plus what the ranks kept in their residuals equals the
 *       sum of the inputs (every rank sends input - residual through a lossless cpu
 *       tensor). `sparsectl stats` must name the scheme and TRANSPORT for each tensor.
 */
#include "itest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCH_N	4096
#define SCH_NNZ 200

typedef struct {
	const char *name;
	int lossless;
} sch_t;

static const sch_t schemes[] = {
    {"dense_ring", 1},	 {"agsparse", 1},     {"hier_central", 1},
    {"balanced_par", 1}, {"omnireduce", 1},   {"spardl", 0},
    {"exdyna", 0},	 {"exdyna_owner", 0}, {"s2_sketch", 0},
};

/* Rank r's k-th entry of step 0: distinct indices (13 is prime to SCH_N). */
static uint32_t entry_idx(int r, uint32_t j)
{
	return (13u * j + 7u * (uint32_t)r) % SCH_N;
}

static float entry_val(int r, uint32_t j)
{
	return (float)((r + 1) * (int)(j % 5 + 1) * (j % 2 ? 1 : -1));
}

static const char *stats_string(const char *name, const char *field)
{
	static char out[64];
	const char *args[] = {"stats", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *ts = it_json_get(s, "tensors");
	out[0] = 0;
	for (size_t i = 0; ts && ts->type == IT_JARR && i < ts->n; i++) {
		const it_json_t *nm = it_json_get(ts->items[i], "name");
		const it_json_t *v = it_json_get(ts->items[i], field);
		if (nm && nm->type == IT_JSTR && !strcmp(nm->str, name) && v &&
		    v->type == IT_JSTR)
			snprintf(out, sizeof(out), "%s", v->str);
	}
	it_json_free(s);
	return out;
}

static void one_scheme(sc_client_t *c, const sch_t *sch, const char *transport)
{
	char name[64];
	snprintf(name, sizeof(name), "sch.%s", sch->name);
	sc_tensor_opts_t o = {.struct_size = sizeof(o),
			      .device = SC_DEVICE_CUDA,
			      .coo_capacity = SCH_NNZ,
			      .scheme = sch->name,
			      .allow_lossy = !sch->lossless,
			      .density = 0.05};
	sc_tensor_t *t = NULL;
	IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, SCH_N, &o, &t), "registering '%s'",
		    name);
	uint32_t *ci = sc_tensor_coo_indices(t);
	float *cv = sc_tensor_coo_values(t);
	static float in[SCH_N], want[SCH_N];
	memset(in, 0, sizeof(in));
	memset(want, 0, sizeof(want));
	for (uint32_t j = 0; j < SCH_NNZ; j++) {
		ci[j] = entry_idx(it_env.rank, j);
		cv[j] = entry_val(it_env.rank, j);
		in[ci[j]] = cv[j];
	}
	for (int r = 0; r < it_env.size; r++)
		for (uint32_t j = 0; j < SCH_NNZ; j++)
			want[entry_idx(r, j)] += entry_val(r, j);
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_allreduce_coo_async(c, t, SCH_NNZ, SC_OP_SUM, &h), "allreduce '%s'",
		    name);
	IT_CHECK_SC(sc_wait(c, h, IT_OP_TIMEOUT_MS), "sc_wait '%s'", name);
	const float *got = sc_tensor_data(t);
	if (sch->lossless) {
		for (int i = 0; i < SCH_N; i++)
			if (got[i] != want[i])
				IT_FAIL("'%s'[%d] = %g, the sum over %d ranks is %g", name, i,
					got[i], it_env.size, want[i]);
	} else {
		/* what the ranks sent: the input less what each node kept (read by local
		 * rank 0; the others' residual reads 0) */
		const float *res = sc_tensor_residual(t);
		if (!res)
			IT_FAIL("'%s' (lossy) has no residual", name);
		char sname[80];
		snprintf(sname, sizeof(sname), "sent.%s", sch->name);
		sc_tensor_t *sent = it_register(c, sname, SC_FLOAT32, SCH_N);
		float *s = sc_tensor_data(sent);
		for (int i = 0; i < SCH_N; i++)
			s[i] = in[i] - res[i];
		IT_CHECK_SC(sc_allreduce(c, sent, SC_OP_SUM, IT_OP_TIMEOUT_MS),
			    "allreduce '%s'", sname);
		double worst = 0, scale = 0;
		int at = 0;
		for (int i = 0; i < SCH_N; i++) {
			double e = fabs((double)got[i] - (double)s[i]);
			if (e > worst) {
				worst = e;
				at = i;
			}
			if (fabs((double)want[i]) > scale)
				scale = fabs((double)want[i]);
		}
		if (worst > 1e-4 * scale)
			IT_FAIL("'%s'[%d] = %g, but the ranks sent %g in all: not conserved "
				"(error %g of inputs up to %g)",
				name, at, got[at], s[at], worst, scale);
	}
	if (sc_local_rank(c) == 0) {
		const char *ran = stats_string(name, "scheme");
		if (strcmp(ran, sch->name))
			IT_FAIL("'%s' ran scheme '%s', pinned to '%s'", name, ran, sch->name);
		it_expect_transport(name, transport);
	}
}

int it_cuda_schemes(int argc, char **argv)
{
	if (argc < 3)
		IT_FAIL("usage: %s LOG TRANSPORT", argv[0]);
	it_cuda_stand_in(argc, argv);
	sc_client_t *c = it_connect();
	for (size_t k = 0; k < sizeof(schemes) / sizeof(schemes[0]); k++)
		one_scheme(c, &schemes[k], argv[2]);
	sc_finalize(c);
	it_pass();
}
