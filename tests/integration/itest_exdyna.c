/*
 * itest_exdyna.c: ExDyna over the model (docs/schemes.md, "ExDyna"). One trainer per node
 * registers NE ExDyna tensors of one density (the last of tiny magnitudes beside the
 * others') and a dense tensor submitted between them, and runs STEPS steps. Inputs are small
 * integers held in float32, a pure function of (tensor, rank, step, index), so sums are exact
 * and every trainer rebuilds every other trainer's input. Checks, in the scope the daemons run
 * (exdyna_scope, passed as the argument model or tensor):
 *  - buffers per step (sparsectl stats --json, fused_buffers, after the first two steps,
 *    which may run as the tensors come), the dense tensor's own aside: model, one for all
 *    NE tensors (the dense one between them does not split them); tensor, NE; and every
 *    tensor's last scheme is exdyna; the dense tensor's sum is exact;
 *  - per tensor and step: result sum = the ranks' inputs + residuals before - residuals
 *    after (each tensor keeps its own error feedback);
 *  - per element, over all steps (the error-feedback invariant of a reference run over
 *    the concatenation): the results summed over steps plus the ranks' final residuals
 *    equal the inputs summed over steps and ranks, exactly;
 *  - one threshold over the concatenation: model, the tiny tensor gets under a tenth of
 *    its own share of elements (its magnitudes never reach the model's threshold);
 *    tensor, at least a third (its own threshold).
 * Rank 0 prints the bytes sent per step (this node, all tensors) for the measurements.
 */
#include "itest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NE = 6, STEPS = 12, SETTLE = 2 };
#define EX_DENSITY 0.05

static uint64_t ex_numel(int l)
{
	return l == NE - 1 ? 1500 : 3000 + 700 * (uint64_t)l;
}

static float ex_value(int l, int rank, int step, uint64_t i)
{
	uint64_t h = (i * 2654435761u + (uint64_t)rank * 7919 + (uint64_t)step * 104729 +
		      (uint64_t)l * 15485863u) %
		     1000003;
	int v = l == NE - 1 ? (int)(h % 2) + 1 : 100 + (int)(h % 301);
	return (float)((h >> 7) & 1 ? v : -v);
}

static double fused_buffers(void)
{
	const char *args[] = {"stats", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *f = it_json_get(s, "fused_buffers");
	if (!f || f->type != IT_JNUM)
		IT_FAIL("stats --json has no fused_buffers");
	double v = f->num;
	it_json_free(s);
	return v;
}

static void allreduce_wait(sc_client_t *c, sc_tensor_t *t, const char *what)
{
	sc_handle_t h;
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "%s", what);
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("%s: %s (%s)", what, it_wait_name(r), it_wait_error());
}

/* One step of the NE tensors; cons[l] gets this rank's input + residual before minus
 * its residual after, summed (the per-tensor conservation, allreduced next). */
static void ex_step(sc_client_t *c, sc_tensor_t **ts, sc_tensor_t *dense, int rank, int size,
		    int step, double *cons)
{
	sc_handle_t h[NE], hd;
	float *d = sc_tensor_data(dense);
	for (int i = 0; i < 100; i++)
		d[i] = (float)(rank + 1 + i);
	for (int l = 0; l < NE; l++) {
		float *x = sc_tensor_data(ts[l]);
		const float *res = sc_tensor_residual(ts[l]);
		cons[l] = 0;
		for (uint64_t i = 0; i < ex_numel(l); i++) {
			x[i] = ex_value(l, rank, step, i);
			cons[l] += (double)x[i] + (res ? res[i] : 0);
		}
	}
	for (int l = 0; l < NE; l++) {
		IT_CHECK_SC(sc_allreduce_async(c, ts[l], SC_OP_SUM, &h[l]),
			    "step %d: tensor %d", step, l);
		if (l == NE / 2)
			IT_CHECK_SC(sc_allreduce_async(c, dense, SC_OP_SUM, &hd),
				    "step %d: the dense tensor", step);
	}
	for (int l = 0; l < NE; l++) {
		int r = it_wait(c, h[l], IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("step %d: tensor %d: %s (%s)", step, l, it_wait_name(r),
				it_wait_error());
		const float *res = sc_tensor_residual(ts[l]);
		for (uint64_t i = 0; res && i < ex_numel(l); i++)
			cons[l] -= res[i];
	}
	int r = it_wait(c, hd, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("step %d: the dense tensor: %s (%s)", step, it_wait_name(r),
			it_wait_error());
	for (int i = 0; i < 100; i++)
		if (d[i] != (float)(size * (size + 1) / 2 + size * i))
			IT_FAIL("step %d: the dense tensor's element %d is %g", step, i,
				(double)d[i]);
}

int it_exdyna(int argc, char **argv)
{
	int model = !(argc > 1 && !strcmp(argv[1], "tensor"));
	sc_client_t *c = it_connect();
	int rank = sc_rank(c), size = sc_size(c);
	if (it_env.env_local_size > 1)
		IT_FAIL("exdyna runs with one trainer per node");
	sc_tensor_t *ts[NE];
	char name[64];
	uint64_t total = 0, off[NE + 1];
	for (int l = 0; l < NE; l++) {
		sc_tensor_opts_t o = {.struct_size = sizeof(o),
				      .sparsifier = SC_SPARSIFY_EXDYNA,
				      .density = EX_DENSITY};
		snprintf(name, sizeof(name), "ex.%d", l);
		IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, ex_numel(l), &o, &ts[l]),
			    "register %s", name);
		off[l] = total;
		total += ex_numel(l);
	}
	off[NE] = total;
	sc_tensor_t *dense = it_register(c, "ex.dense", SC_FLOAT32, 100);
	sc_tensor_t *cons_t = it_register(c, "ex.conservation", SC_FLOAT64, NE);
	sc_tensor_t *acc_t = it_register(c, "ex.residuals", SC_FLOAT64, total);
	double *acc = calloc(total, sizeof(double)); /* results summed over steps */
	if (!acc)
		IT_FAIL("no memory");
	double buf0 = 0, sent0 = 0, tiny_got = 0, tiny_share = 0;
	for (int step = 0; step < STEPS; step++) {
		if (step == SETTLE) {
			buf0 = fused_buffers();
			for (int l = 0; l < NE; l++) {
				snprintf(name, sizeof(name), "ex.%d", l);
				sent0 += it_stats_number(it_env.socket, name, "bytes_sent");
			}
		}
		double *cons = sc_tensor_data(cons_t);
		ex_step(c, ts, dense, rank, size, step, cons);
		allreduce_wait(c, cons_t, "conservation");
		for (int l = 0; l < NE; l++) {
			const float *x = sc_tensor_data(ts[l]);
			double got = 0;
			uint64_t nz = 0;
			for (uint64_t i = 0; i < ex_numel(l); i++) {
				got += x[i];
				acc[off[l] + i] += x[i];
				nz += x[i] != 0;
			}
			double want = cons[l];
			if (fabs(got - want) > 1e-6 * (fabs(want) + 1))
				IT_FAIL(
				    "step %d: tensor ex.%d: result sums to %.17g, inputs and "
				    "residuals to %.17g",
				    step, l, got, want);
			if (l == NE - 1 && step >= SETTLE) {
				tiny_got += (double)nz;
				tiny_share += EX_DENSITY * (double)ex_numel(l);
			}
		}
	}
	/* less the dense tensor's and the conservation's */
	double per_step = (fused_buffers() - buf0) / (STEPS - SETTLE) - 2;
	double sent = -sent0;
	for (int l = 0; l < NE; l++) {
		snprintf(name, sizeof(name), "ex.%d", l);
		sent += it_stats_number(it_env.socket, name, "bytes_sent");
		char scheme[64] = "";
		const char *args[] = {"stats", NULL};
		it_json_t *s = it_ctl_json(it_env.socket, args);
		const it_json_t *tl = it_json_get(s, "tensors");
		for (size_t i = 0; tl && tl->type == IT_JARR && i < tl->n; i++) {
			const it_json_t *nm = it_json_get(tl->items[i], "name");
			const it_json_t *sc = it_json_get(tl->items[i], "scheme");
			if (nm && nm->type == IT_JSTR && !strcmp(nm->str, name) && sc &&
			    sc->type == IT_JSTR)
				snprintf(scheme, sizeof(scheme), "%s", sc->str);
		}
		it_json_free(s);
		if (strcmp(scheme, "exdyna"))
			IT_FAIL("tensor %s ran scheme '%s', not exdyna", name, scheme);
	}
	double want_bufs = model ? 1 : NE;
	if (fabs(per_step - want_bufs) > 1e-9)
		IT_FAIL("scope %s: %.3f buffers per step for %d ExDyna tensors, expected %g",
			model ? "model" : "tensor", per_step, NE, want_bufs);
	/* the error-feedback invariant, element by element over all steps */
	double *res_sum = sc_tensor_data(acc_t);
	for (int l = 0; l < NE; l++) {
		const float *res = sc_tensor_residual(ts[l]);
		for (uint64_t i = 0; i < ex_numel(l); i++)
			res_sum[off[l] + i] = res ? res[i] : 0;
	}
	allreduce_wait(c, acc_t, "final residuals");
	uint64_t bad = 0;
	for (int l = 0; l < NE; l++)
		for (uint64_t i = 0; i < ex_numel(l); i++) {
			double in = 0;
			for (int r = 0; r < size; r++)
				for (int s = 0; s < STEPS; s++)
					in += ex_value(l, r, s, i);
			double out = acc[off[l] + i] + res_sum[off[l] + i];
			if (out != in && bad++ < 5)
				it_log(
				    "MISMATCH: ex.%d[%llu]: results + residuals %.17g, inputs "
				    "%.17g",
				    l, (unsigned long long)i, out, in);
		}
	if (bad)
		IT_FAIL("%llu elements break the error-feedback invariant over %d steps",
			(unsigned long long)bad, STEPS);
	double ratio = tiny_got / tiny_share;
	if (model ? ratio >= 0.1 : ratio < 1.0 / 3)
		IT_FAIL("scope %s: the tiny tensor got %.3f x its share (%s)",
			model ? "model" : "tensor", ratio,
			model ? "one threshold over the model should leave it out"
			      : "its own threshold should select about its share");
	if (rank == 0)
		printf(
		    "exdyna scope %s: %d tensors, %.0f buffers per step, %.0f bytes sent per "
		    "step (this node), tiny tensor %.3f x its share\n",
		    model ? "model" : "tensor", NE, per_step, sent / (STEPS - SETTLE), ratio);
	free(acc);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
