/*
 * test_verdict_carry.c: the input check round carried inside the one-round exchange of a
 * small buffer (engine/verdict.h, coll/bufctx.c), over a real tcp mesh of four forked
 * ranks. Without a fault every rank holds the exact sum; with a fault on one rank (a
 * non-finite input, or a compute stage that failed before it prepared, whose rank passes
 * neither a buffer nor a device) every rank fails with the same status and the same
 * error naming that rank and the tensor, and no rank's buffer is touched: no rank delivers
 * a sum.
 */
#include "unit.h"

#include <string.h>
#include <sys/mman.h>

#include "coll/bufctx.h"
#include "engine/engine.h"
#include "engine/verdict.h"
#include "unit_mesh.h"
#include "util/log.h"

#define P      4
#define N      1000 /* 4000 bytes: the one-round path */
#define TMO_MS 10000

typedef enum { CASE_NONE, CASE_NONFINITE, CASE_LOCAL } carry_case_t;

/* What each rank's child reports to the parent, in shared memory. */
typedef struct rank_out {
	int done;
	sc_status_t st;
	char error[512];
	int buf_untouched; /* every element still this rank's input */
	int sum_exact;	   /* every element the sum over the ranks */
} rank_out_t;

typedef struct carry_arg {
	unit_mesh_t *mesh;
	int rank, bad;
	carry_case_t kind;
	rank_out_t *out;
} carry_arg_t;

static float input(int i, int rank)
{
	return (float)((i + rank) % 7 + 1);
}

static void carry_rank(const carry_arg_t *a)
{
	scd_log_level = -1; /* the failures logged are expected */
	scd_transport_t *t = NULL;
	sc_status_t st = unit_mesh_create(a->mesh, a->rank, 0, TMO_MS, &t);
	CHECK_MSG(st == SC_OK, "rank %d: mesh: %s", a->rank, scd_transport_error());
	const scd_device_ops_t *dev = NULL;
	scd_bufctx_table_t *tab = NULL;
	CHECK_TRUE(scd_device_get(SCD_DEVICE_CPU, &dev) == SC_OK);
	CHECK_TRUE(scd_bufctx_table_create(NULL, &tab) == SC_OK);
	static float buf[N];
	for (int i = 0; i < N; i++)
		buf[i] = input(i, a->rank);
	scd_job_item_t it = {.name = "layer.small", .numel = N, .op = SC_OP_SUM, .cache_id = 3};
	scd_job_t job = {.kind = SCD_JOB_ALLREDUCE,
			 .n_items = 1,
			 .items = &it,
			 .total_numel = N,
			 .dtype = SC_FLOAT32,
			 .average_divisor = 1,
			 .pin = -1,
			 .timeout_ms = TMO_MS};
	CHECK_TRUE(scd_bufctx_one_round(&job, P));
	scd_fault_t f = {0};
	int faulty = a->rank == a->bad && a->kind != CASE_NONE;
	if (faulty && a->kind == CASE_NONFINITE)
		f = (scd_fault_t){.kind = SCD_FAULT_NONFINITE, .item = 0, .count = 3};
	if (faulty && a->kind == CASE_LOCAL) {
		f = (scd_fault_t){.kind = SCD_FAULT_LOCAL,
				  .item = SCD_FAULT_ITEM_BUFFER,
				  .count = (uint64_t) - (int64_t)SC_ERR_NOMEM};
		snprintf(job.error, sizeof(job.error), "no memory for the buffer here");
	}
	scd_verdict_carry_t carry;
	scd_verdict_carry_init(&carry, &job, &f, a->rank, 1);
	scd_job_prep_t prep = {0};
	int gone = faulty && a->kind == CASE_LOCAL; /* failed before it prepared */
	if (!gone)
		CHECK_TRUE(scd_bufctx_prepare(tab, &job, dev, buf, t, 20e-6, 1e-10, 42,
					      &prep) == SC_OK);
	prep.verdict = &carry;
	st = scd_bufctx_communicate(tab, &job, gone ? NULL : dev, gone ? NULL : buf, t, 20e-6,
				    1e-10, &prep);
	if (st != SC_OK)
		scd_verdict_carry_end(&carry, &job, st);
	scd_bufctx_release(&prep);
	rank_out_t *o = &a->out[a->rank];
	o->st = st;
	snprintf(o->error, sizeof(o->error), "%s", job.error);
	o->buf_untouched = o->sum_exact = 1;
	for (int i = 0; i < N; i++) {
		float want = 0;
		for (int q = 0; q < P; q++)
			want += input(i, q);
		o->buf_untouched &= buf[i] == input(i, a->rank);
		o->sum_exact &= buf[i] == want;
	}
	o->done = 1;
	scd_bufctx_table_destroy(tab);
	scd_transport_destroy(t);
}

static void carry_child(unit_mesh_t *m, int rank, void *arg)
{
	carry_arg_t a = *(const carry_arg_t *)arg;
	(void)m;
	a.rank = rank;
	carry_rank(&a);
}

/* Runs the four ranks of one case; out[] gets what each reported. */
static void run_case(carry_case_t kind, int bad, rank_out_t *out)
{
	unit_mesh_t mesh;
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", P, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	memset(out, 0, sizeof(rank_out_t) * P);
	carry_arg_t a = {&mesh, -1, bad, kind, out};
	unit_mesh_fork(&mesh, carry_child, &a);
	for (int r = 0; r < P; r++)
		CHECK_MSG(out[r].done, "rank %d did not report", r);
}

static rank_out_t *shared_out(void)
{
	rank_out_t *out = mmap(NULL, sizeof(rank_out_t) * P, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK_TRUE(out != MAP_FAILED);
	return out;
}

UNIT_TEST(verdict_carried_no_fault_sums_exactly)
{
	rank_out_t *out = shared_out();
	run_case(CASE_NONE, -1, out);
	for (int r = 0; r < P; r++)
		CHECK_MSG(out[r].st == SC_OK && out[r].sum_exact,
			  "rank %d: %s (%s), sum exact %d", r, sc_status_name(out[r].st),
			  out[r].error, out[r].sum_exact);
	munmap(out, sizeof(rank_out_t) * P);
}

UNIT_TEST(verdict_carried_fault_fails_every_rank_alike)
{
	rank_out_t *out = shared_out();
	int bad = (int)unit_rng_below(P);
	run_case(CASE_NONFINITE, bad, out);
	char who[32];
	snprintf(who, sizeof(who), "rank %d ", bad);
	for (int r = 0; r < P; r++) {
		CHECK_MSG(out[r].st == SC_ERR_INVALID,
			  "rank %d: %s (%s), expected SC_ERR_INVALID", r,
			  sc_status_name(out[r].st), out[r].error);
		CHECK_MSG(!strcmp(out[r].error, out[0].error),
			  "rank %d's error differs from rank 0's: '%s' vs '%s'", r,
			  out[r].error, out[0].error);
		CHECK_MSG(out[r].buf_untouched, "rank %d's buffer changed: a sum was delivered",
			  r);
	}
	CHECK_MSG(strstr(out[0].error, who) && strstr(out[0].error, "'layer.small'") &&
		      strstr(out[0].error, "non-finite"),
		  "the error does not name rank %d, the tensor and the fault: '%s'", bad,
		  out[0].error);
	munmap(out, sizeof(rank_out_t) * P);
}

UNIT_TEST(verdict_carried_local_failure_fails_every_rank_alike)
{
	rank_out_t *out = shared_out();
	int bad = 1 + (int)unit_rng_below(P - 1);
	run_case(CASE_LOCAL, bad, out);
	char node[32];
	snprintf(node, sizeof(node), "node %d ", bad);
	for (int r = 0; r < P; r++) {
		CHECK_MSG(out[r].st == SC_ERR_NOMEM, "rank %d: %s (%s), expected SC_ERR_NOMEM",
			  r, sc_status_name(out[r].st), out[r].error);
		CHECK_MSG(strstr(out[r].error, node) && strstr(out[r].error, "'layer.small'"),
			  "rank %d's error does not name node %d and the tensor: '%s'", r, bad,
			  out[r].error);
		/* the shared text, and the failed node's own account after it */
		if (r != bad)
			CHECK_MSG(!strcmp(out[r].error, out[(bad + 1) % P].error),
				  "rank %d's error differs: '%s'", r, out[r].error);
		else
			CHECK_MSG(strstr(out[r].error, "; here: no memory for the buffer here"),
				  "the failed node's error lacks its own account: '%s'",
				  out[r].error);
		CHECK_MSG(out[r].buf_untouched, "rank %d's buffer changed", r);
	}
	munmap(out, sizeof(rank_out_t) * P);
}
