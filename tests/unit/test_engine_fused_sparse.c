/*
 * test_engine_fused_sparse.c: one buffer of several sparsified tensors (sparsification
 * ahead, coll/bufctx.c). 40 tensors whose magnitudes spread over 8 decades, top-k 1%
 * each, fused into one buffer on 2 ranks: each tensor's selection is its own top-k (no
 * tensor goes missing, however small its values beside the others'), a lossless scheme's
 * result is exactly the sum of the ranks' selections, and a lossy scheme's discards go
 * back to the tensor they came from (per tensor: inputs = result + residuals); the scheme
 * gets the selections as one ascending COO list in the buffer's index space, not a dense
 * buffer to scan, with the same sums under every lossless scheme.
 */
#include "unit.h"

#include <math.h>
#include <string.h>
#include <sys/mman.h>

#include "coll/bufctx.h"
#include "scheme_world.h"

enum { NT = 40, RANKS = 2 };

typedef struct fused_arg {
	int pin;
	int steps; /* the same input each step (0: one); out holds the sum of the results */
	uint64_t total;
	float *in[RANKS], *res[RANKS], *out[RANKS]; /* shared: [total] each */
	double *tcm, *tcp;			    /* shared: [RANKS] each */
	/* shared: [RANKS] each: the list the scheme got (UINT64_MAX: none, a dense buffer),
	 * and whether its indices ascended within the buffer */
	uint64_t *list_nnz, *list_ok;
	/* fused_out_ok: the result may come back as COO (job.fused_out_ok, as allreduce's
	 * delivery takes it); then list_out[rank] counts the steps whose result did */
	int fused_out_ok;
	uint64_t *list_out;
} fused_arg_t;

static uint64_t t_numel(int l)
{
	return 1000 + 37 * (uint64_t)l;
}

/* The items of the buffer, 16-element aligned like the coordinator's plan. */
static uint64_t layout(scd_job_item_t *it, float **res)
{
	uint64_t off = 0;
	for (int l = 0; l < NT; l++) {
		it[l] = (scd_job_item_t){.name = "fused",
					 .numel = t_numel(l),
					 .op = SC_OP_SUM,
					 .cache_id = (uint32_t)l,
					 .sparsifier = SC_SPARSIFY_TOPK,
					 .density = 0.01,
					 .offset = off};
		if (res)
			it[l].residual = *res + off;
		off += (t_numel(l) + 15) & ~(uint64_t)15;
	}
	return off;
}

static void fused_rank(scd_transport_t *t, int rank, int P, void *arg)
{
	fused_arg_t *a = arg;
	scd_job_item_t it[NT];
	float *res = a->res[rank];
	uint64_t total = layout(it, &res);
	float *buf = calloc(total, sizeof(float));
	scd_bufctx_table_t *tab = NULL;
	CHECK_TRUE(scd_bufctx_table_create(NULL, &tab) == SC_OK);
	const scd_device_ops_t *dev = NULL;
	CHECK_TRUE(scd_device_get(SCD_DEVICE_CPU, &dev) == SC_OK);
	scd_job_t job = {.kind = SCD_JOB_ALLREDUCE,
			 .n_items = NT,
			 .items = it,
			 .total_numel = total,
			 .dtype = SC_FLOAT32,
			 .average_divisor = 1,
			 .pin = a->pin,
			 .timeout_ms = 10000,
			 .fused_out_ok = a->fused_out_ok};
	sc_status_t st = SC_OK;
	for (int step = 0; step < (a->steps ? a->steps : 1) && st == SC_OK; step++) {
		memcpy(buf, a->in[rank], total * sizeof(float));
		scd_job_prep_t prep;
		st = scd_bufctx_prepare(tab, &job, dev, buf, t, 20e-6, 1e-10, 42, &prep);
		a->list_nnz[rank] = prep.sel ? prep.sel->nnz : UINT64_MAX;
		a->list_ok[rank] = 1;
		for (uint64_t j = 0; prep.sel && j < prep.sel->nnz; j++)
			a->list_ok[rank] &= prep.sel->idx[j] < total && prep.sel->val[j] != 0 &&
					    (j == 0 || prep.sel->idx[j] > prep.sel->idx[j - 1]);
		if (st == SC_OK)
			st =
			    scd_bufctx_communicate(tab, &job, dev, buf, t, 20e-6, 1e-10, &prep);
		CHECK_MSG(st == SC_OK, "rank %d step %d: %s (%s)", rank, step,
			  sc_status_name(st), job.error);
		if (st == SC_OK && job.fused_out && job.coo_out.nnz != SCD_RESULT_DENSE) {
			a->list_out[rank]++; /* buf is scratch: the result is the list */
			for (uint64_t j = 0; j < job.coo_out.nnz; j++) {
				CHECK_TRUE(j == 0 ||
					   job.coo_out.idx[j] > job.coo_out.idx[j - 1]);
				a->out[rank][job.coo_out.idx[j]] += job.coo_out.val[j];
			}
		} else {
			for (uint64_t i = 0; i < total; i++)
				a->out[rank][i] += buf[i];
		}
		scd_bufctx_release(&prep);
	}
	a->tcm[rank] = job.tcm_s;
	a->tcp[rank] = 0;
	for (int l = 0; l < NT; l++)
		a->tcp[rank] += it[l].tcp_s + it[l].tb_s;
	scd_bufctx_table_destroy(tab);
	free(buf);
}

static void run_fused(fused_arg_t *a, int pin)
{
	scd_job_item_t it[NT];
	a->pin = pin;
	a->total = layout(it, NULL);
	a->tcm = shared_map(2 * RANKS * sizeof(double));
	a->tcp = a->tcm + RANKS;
	a->list_nnz = shared_map(3 * RANKS * sizeof(uint64_t));
	a->list_ok = a->list_nnz + RANKS;
	a->list_out = a->list_nnz + 2 * RANKS;
	for (int r = 0; r < RANKS; r++) {
		a->in[r] = shared_map(a->total * sizeof(float));
		a->res[r] = shared_map(a->total * sizeof(float));
		a->out[r] = shared_map(a->total * sizeof(float));
	}
	/* tensor l's magnitudes around 10^(-8 l / 39): 8 decades from the first to the last;
	 * distinct magnitudes per element so that each top-k is unique */
	for (int l = 0; l < NT; l++) {
		double scale = pow(10.0, -8.0 * l / (NT - 1));
		for (int r = 0; r < RANKS; r++)
			for (uint64_t i = 0; i < t_numel(l); i++) {
				uint64_t h =
				    (i * 2654435761u + (uint64_t)r * 97 + (uint64_t)l) % 100003;
				double v = scale * (1.0 + (double)h / 1000.0);
				a->in[r][it[l].offset + i] = (float)(h & 1 ? v : -v);
			}
	}
	run_world(RANKS, fused_rank, a);
}

static void free_fused(fused_arg_t *a)
{
	munmap(a->tcm, 2 * RANKS * sizeof(double));
	munmap(a->list_nnz, 3 * RANKS * sizeof(uint64_t));
	for (int r = 0; r < RANKS; r++) {
		munmap(a->in[r], a->total * sizeof(float));
		munmap(a->res[r], a->total * sizeof(float));
		munmap(a->out[r], a->total * sizeof(float));
	}
}

UNIT_TEST(engine_fused_topk_per_tensor_no_tensor_missing)
{
	fused_arg_t a = {0};
	scd_job_item_t it[NT];
	layout(it, NULL);
	run_fused(&a, SCD_SCHEME_AGSPARSE); /* lossless: the residual is the sparsifier's */
	for (int l = 0; l < NT; l++) {
		uint64_t off = it[l].offset, n = t_numel(l);
		uint64_t k = (uint64_t)floor(0.01 * (double)n + 0.5);
		for (int r = 0; r < RANKS; r++) {
			/* selection = input - residual: exactly k elements, all at least as
			 * large as any left in the residual */
			uint64_t sel = 0;
			float min_sel = INFINITY, max_left = 0;
			for (uint64_t i = 0; i < n; i++) {
				float x = a.in[r][off + i], left = a.res[r][off + i];
				if (left == 0) {
					sel++;
					min_sel = fminf(min_sel, fabsf(x));
				} else {
					CHECK_TRUE(left == x);
					max_left = fmaxf(max_left, fabsf(left));
				}
			}
			CHECK_MSG(sel == k, "tensor %d rank %d: %llu selected, k = %llu", l, r,
				  (unsigned long long)sel, (unsigned long long)k);
			CHECK_MSG(min_sel >= max_left, "tensor %d rank %d: not its top-k", l,
				  r);
		}
		/* every tensor receives elements, and exactly the sum of the selections */
		uint64_t got = 0;
		for (uint64_t i = 0; i < n; i++) {
			float want = (a.in[0][off + i] - a.res[0][off + i]) +
				     (a.in[1][off + i] - a.res[1][off + i]);
			CHECK_TRUE(a.out[0][off + i] == want && a.out[1][off + i] == want);
			got += want != 0;
		}
		CHECK_MSG(got >= k, "tensor %d received %llu elements", l,
			  (unsigned long long)got);
	}
	CHECK_TRUE(a.tcm[0] > 0 && a.tcp[0] > 0);
	free_fused(&a);
}

/* A fused buffer of sparsified tensors reaches the scheme as the concatenation of their
 * selections (work of the selections' size, no dense buffer cleared, filled and scanned),
 * and every lossless scheme sums it exactly: the sum of the two ranks' selections. */
UNIT_TEST(engine_fused_selections_go_as_one_list)
{
	static const int lossless[] = {SCD_SCHEME_AGSPARSE, SCD_SCHEME_BALANCED_PAR,
				       SCD_SCHEME_OMNIREDUCE, SCD_SCHEME_HIER_CENTRAL,
				       SCD_SCHEME_DENSE_RING};
	scd_job_item_t it[NT];
	layout(it, NULL);
	uint64_t k_sum = 0;
	for (int l = 0; l < NT; l++)
		k_sum += (uint64_t)floor(0.01 * (double)t_numel(l) + 0.5);
	for (size_t s = 0; s < 2 * sizeof(lossless) / sizeof(lossless[0]); s++) {
		/* each scheme twice: the result in the buffer, then where the scheme builds it
		 * from the lists it merges, as a list of its own (job.fused_out) */
		fused_arg_t a = {.fused_out_ok = s % 2};
		scd_scheme_t sch = (scd_scheme_t)lossless[s / 2];
		run_fused(&a, sch);
		int lists = sch != SCD_SCHEME_OMNIREDUCE && sch != SCD_SCHEME_DENSE_RING;
		for (int r = 0; r < RANKS; r++)
			CHECK_MSG(a.list_out[r] == (uint64_t)(a.fused_out_ok && lists),
				  "%s, rank %d: %llu results as a list (fused_out_ok %d)",
				  scd_scheme_name(sch), r, (unsigned long long)a.list_out[r],
				  a.fused_out_ok);
		for (int r = 0; r < RANKS; r++) {
			CHECK_MSG(
			    a.list_nnz[r] == k_sum,
			    "%s, rank %d: the scheme got %llu listed entries (UINT64_MAX: a "
			    "dense buffer), the selections hold %llu",
			    scd_scheme_name(sch), r, (unsigned long long)a.list_nnz[r],
			    (unsigned long long)k_sum);
			CHECK_MSG(a.list_ok[r], "%s, rank %d: the list is not ascending",
				  scd_scheme_name(sch), r);
		}
		for (uint64_t i = 0; i < a.total; i++) {
			float want = (a.in[0][i] - a.res[0][i]) + (a.in[1][i] - a.res[1][i]);
			CHECK_MSG(a.out[0][i] == want && a.out[1][i] == want,
				  "%s: element %llu: %g and %g, the selections sum to %g",
				  scd_scheme_name(sch), (unsigned long long)i,
				  (double)a.out[0][i], (double)a.out[1][i], (double)want);
		}
		free_fused(&a);
	}
}

UNIT_TEST(engine_fused_lossy_conserves_per_tensor)
{
	fused_arg_t a = {0};
	scd_job_item_t it[NT];
	layout(it, NULL);
	run_fused(&a, SCD_SCHEME_SPARDL);
	double discarded = 0;
	for (int l = 0; l < NT; l++) {
		uint64_t off = it[l].offset, n = t_numel(l);
		double scale = pow(10.0, -8.0 * l / (NT - 1));
		for (uint64_t i = 0; i < n; i++) {
			double in = (double)a.in[0][off + i] + a.in[1][off + i];
			double kept = (double)a.res[0][off + i] + a.res[1][off + i];
			double err = fabs(in - (a.out[0][off + i] + kept));
			CHECK_MSG(err <= 1e-5 * scale * 200,
				  "tensor %d element %llu: inputs %g, result %g + residuals %g",
				  l, (unsigned long long)i, in, (double)a.out[0][off + i],
				  kept);
			CHECK_TRUE(a.out[0][off + i] == a.out[1][off + i]);
		}
	}
	/* the scheme's discards (beyond the sparsifiers' leftovers) went into the residuals:
	 * some selected element of some tensor holds residual */
	for (int r = 0; r < RANKS; r++)
		for (uint64_t i = 0; i < a.total; i++)
			if (a.res[r][i] != 0 && a.res[r][i] != a.in[r][i])
				discarded += 1;
	printf("    SparDL on 40 fused top-k tensors: %g selected values kept in residuals\n",
	       discarded);
	free_fused(&a);
}

/* Over several steps the buffer's residual is taken back each step and nothing twice: a
 * lossy scheme that tracks where it discards (SparDL: the residual split back entry by
 * entry, the buffer's residual left zero) and one that writes the residual over the whole
 * buffer (the S2 sketch: split densely, the buffer's residual cleared before the next
 * run) both conserve, per tensor and element, steps x inputs = the results' sum + the
 * residuals. A discard split back twice, or left in the buffer's residual for the next
 * step, breaks the sum. */
UNIT_TEST(engine_fused_lossy_conserves_over_steps)
{
	static const int lossy[] = {SCD_SCHEME_SPARDL, SCD_SCHEME_S2_SKETCH};
	enum { STEPS = 4 };
	for (size_t s = 0; s < sizeof(lossy) / sizeof(lossy[0]); s++) {
		/* SparDL's result comes back as its own list (as allreduce takes it), S2's
		 * in the buffer */
		fused_arg_t a = {.steps = STEPS, .fused_out_ok = 1};
		scd_job_item_t it[NT];
		layout(it, NULL);
		run_fused(&a, lossy[s]);
		CHECK_MSG(a.list_out[0] == (lossy[s] == SCD_SCHEME_SPARDL ? STEPS : 0),
			  "%s: %llu of %d results as a list", scd_scheme_name(lossy[s]),
			  (unsigned long long)a.list_out[0], STEPS);
		uint64_t kept = 0;
		double worst = 0;
		for (int l = 0; l < NT; l++) {
			uint64_t off = it[l].offset, n = t_numel(l);
			double scale = pow(10.0, -8.0 * l / (NT - 1));
			for (uint64_t i = 0; i < n; i++) {
				double in =
				    STEPS * ((double)a.in[0][off + i] + a.in[1][off + i]);
				double res = (double)a.res[0][off + i] + a.res[1][off + i];
				double err = fabs(in - (a.out[0][off + i] + res));
				/* the sketch's collisions put the largest tensor's values
				 * (near 100) into every tensor's results and residuals for a
				 * step: float error at that magnitude */
				double tol = 1e-5 *
					     (lossy[s] == SCD_SCHEME_S2_SKETCH ? 1 : scale) *
					     200 * STEPS;
				worst = fmax(worst, err / tol);
				CHECK_MSG(
				    err <= tol,
				    "%s: tensor %d element %llu: %d x inputs %g, results %g "
				    "+ residuals %g",
				    scd_scheme_name((scd_scheme_t)lossy[s]), l,
				    (unsigned long long)i, STEPS, in, (double)a.out[0][off + i],
				    res);
				CHECK_TRUE(a.out[0][off + i] == a.out[1][off + i]);
				kept += a.res[0][off + i] != 0;
			}
		}
		CHECK_MSG(kept > 0, "%s: nothing was kept in a residual",
			  scd_scheme_name((scd_scheme_t)lossy[s]));
		printf("    %s, %d steps: %llu elements of rank 0 hold residual, worst error "
		       "%.3g of its tolerance\n",
		       scd_scheme_name((scd_scheme_t)lossy[s]), STEPS, (unsigned long long)kept,
		       worst);
		free_fused(&a);
	}
}
