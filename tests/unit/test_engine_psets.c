/*
 * test_engine_psets.c: the engine runs process sets' jobs (coll/job.h: pset, nodes) among
 * their member nodes over views of the mesh (engine/psview.h), in a world of four forked
 * daemons' engines of one trainer each, fed jobs the way negotiation hands them over (the
 * mesh job from every rank's bootstrap blob, then each node's jobs in plan order, a node
 * skipping the sets it is not in). Sets {0, 2} (id 1) and {1, 3} (id 2) run at the same
 * time: float32 sums (the one-round path, a larger buffer through the schemes, and each
 * lossless sparse scheme pinned on sparse input), an int64 max, a fused broadcast from
 * global trainer rank 3, an allgather in set rank order, a reduce-scatter, an alltoall and
 * Adasum; results exact. A NaN on node 3 under nonfinite = error fails set 2's sums on both
 * members, naming trainer rank 3 on node 3. A reduce-scatter in a set of part of its
 * nodes' trainers is refused on both members naming the tensor and the set; a set of node
 * 0 alone averages nothing away and moves no byte; set 1 regrouped over nodes {0, 1, 3}
 * sums exactly on views and buffers made afresh; a global sum afterwards is exact on all
 * four (the mesh still in step).
 *
 * Sets that split nodes, in a world of two engines of two trainers each: {0, 2} and
 * {0, 1, 3} with their member ranks on the job, as negotiation builds them; a
 * reduce-scatter, an alltoall and Adasum in each, exact in set rank order over the set's
 * trainers only, and an alltoall's refusal naming the trainer's global and set ranks.
 */
#include "unit.h"

#include <string.h>

#include <uv.h>

#include "../adasum_ref.h"
#include "engine/engine.h"
#include "unit_engine.h"
#include "util/log.h"

#define P      4
#define TMO_MS 20000
#define BIG    100000

typedef struct node {
	uv_loop_t loop;
	scd_engine_t *e;
	int rank, done;
	scd_job_t *back[16];
} node_t;

static void on_done(void *arg, scd_job_t *job)
{
	node_t *n = arg;
	n->back[n->done++] = job;
}

/* Submits job and runs the loop until it is back; returns it. */
static scd_job_t *run_job(node_t *n, scd_job_t *job)
{
	int want = n->done + 1;
	scd_engine_submit(n->e, job);
	while (n->done < want)
		uv_run(&n->loop, UV_RUN_ONCE);
	return n->back[want - 1];
}

/* A job of one tensor of numel elements in buf (this node's one trainer), in set pset
 * over nodes (NULL: the global set). */
static scd_job_t *new_job(scd_coll_kind_t kind, uint32_t dtype, uint64_t numel, void *buf,
			  uint32_t pset, const int *nodes, int n_nodes)
{
	static uint64_t seq; /* the node's own count, for logs */
	scd_job_t *job = calloc(1, sizeof(*job));
	scd_job_item_t *it = calloc(1, sizeof(*it));
	CHECK_TRUE(job && it);
	*it = (scd_job_item_t){.name = "t", .numel = numel, .op = SC_OP_SUM, .n_src = 1};
	/* the same on every member of the set for the same tensor */
	it->cache_id = (uint32_t)(pset * 100000 + kind * 1000 + dtype * 100 + numel % 97);
	++seq;
	it->src[0] = (scd_job_src_t){.device = SCD_DEVICE_CPU, .dense = buf};
	*job = (scd_job_t){.kind = SCD_JOB_ALLREDUCE,
			   .seq = seq,
			   .n_items = 1,
			   .items = it,
			   .total_numel = numel,
			   .dtype = dtype,
			   .coll = {.kind = kind, .op = SC_OP_SUM},
			   .average_divisor = nodes ? n_nodes : P,
			   .pset = pset,
			   .n_nodes = nodes ? n_nodes : 0,
			   .pin = -1,
			   .timeout_ms = TMO_MS,
			   .world_seed = 7,
			   .lossless_only = 1};
	if (nodes) {
		job->nodes = malloc(sizeof(int) * (size_t)n_nodes);
		memcpy(job->nodes, nodes, sizeof(int) * (size_t)n_nodes);
	}
	return job;
}

static void free_job(scd_job_t *job)
{
	free(job->items);
	free(job->nodes);
	free(job->set_ranks);
	free(job);
}

static float val(size_t i, int rank)
{
	return (float)((int)((i * 3 + (size_t)rank * 7) % 13) - 6);
}

static void check_ok(const scd_job_t *job, int rank, const char *what)
{
	CHECK_MSG(job->status == SC_OK, "rank %d: %s: %s (%s)", rank, what,
		  sc_status_name(job->status), job->error);
}

static float sparse_val(size_t i, int rank)
{
	return i % 97 == (size_t)rank * 5 ? val(i, rank) + 20 : 0;
}

/* The lossless sparse schemes, pinned, on sparse float32 sums of each node's set: each
 * runs over the set's view as its own world of two. */
static void set_sparse_sums(node_t *n, uint32_t pset, const int *nodes)
{
	static float x[BIG];
	static const scd_scheme_t pins[] = {SCD_SCHEME_AGSPARSE, SCD_SCHEME_HIER_CENTRAL,
					    SCD_SCHEME_BALANCED_PAR, SCD_SCHEME_OMNIREDUCE};
	for (size_t k = 0; k < sizeof(pins) / sizeof(pins[0]); k++) {
		for (size_t i = 0; i < BIG; i++)
			x[i] = sparse_val(i, n->rank);
		scd_job_t *job =
		    new_job(SCD_COLL_ALLREDUCE, SC_FLOAT32, BIG, x, pset, nodes, 2);
		job->pin = (int)pins[k];
		job->items[0].sparsifier = SC_SPARSIFY_NATURAL;
		job = run_job(n, job);
		check_ok(job, n->rank, scd_scheme_name(pins[k]));
		CHECK_MSG(job->scheme == (int)pins[k], "rank %d: %s ran, not %s", n->rank,
			  scd_scheme_name((scd_scheme_t)job->scheme), scd_scheme_name(pins[k]));
		for (size_t i = 0; i < BIG; i++)
			CHECK_MSG(x[i] == sparse_val(i, nodes[0]) + sparse_val(i, nodes[1]),
				  "rank %d: set %u %s sum, element %zu: %g", n->rank, pset,
				  scd_scheme_name(pins[k]), i, (double)x[i]);
		free_job(job);
	}
}

/* Set sums: 1000 float32 (one round) and BIG float32 (the schemes), each node's set. */
static void set_sums(node_t *n, uint32_t pset, const int *nodes)
{
	static float x[BIG];
	size_t sizes[2] = {1000, BIG};
	for (int k = 0; k < 2; k++) {
		for (size_t i = 0; i < sizes[k]; i++)
			x[i] = val(i, n->rank);
		scd_job_t *job = run_job(
		    n, new_job(SCD_COLL_ALLREDUCE, SC_FLOAT32, sizes[k], x, pset, nodes, 2));
		check_ok(job, n->rank, "set sum");
		CHECK_TRUE(job->bytes_sent > 0);
		for (size_t i = 0; i < sizes[k]; i++)
			CHECK_MSG(x[i] == val(i, nodes[0]) + val(i, nodes[1]),
				  "rank %d: set %u sum of %zu, element %zu: %g", n->rank, pset,
				  sizes[k], i, (double)x[i]);
		free_job(job);
	}
}

static void set_max_and_broadcast(node_t *n, const int *nodes)
{
	int64_t y[300];
	for (int i = 0; i < 300; i++)
		y[i] = (int64_t)val((size_t)i, n->rank) * 1000000007ll;
	scd_job_t *job = new_job(SCD_COLL_ALLREDUCE, SC_INT64, 300, y, 2, nodes, 2);
	job->coll.op = job->items[0].op = SC_OP_MAX;
	job = run_job(n, job);
	check_ok(job, n->rank, "set max");
	for (int i = 0; i < 300; i++) {
		float a = val((size_t)i, nodes[0]), b = val((size_t)i, nodes[1]);
		CHECK_TRUE(y[i] == (int64_t)(a > b ? a : b) * 1000000007ll);
	}
	free_job(job);
	/* two tensors fused into one buffer (the root's node copies its trainer's in) */
	float z[80];
	for (int i = 0; i < 80; i++)
		z[i] = val((size_t)i, n->rank) + 100;
	job = new_job(SCD_COLL_BROADCAST, SC_FLOAT32, 50, z, 2, nodes, 2);
	job->items = realloc(job->items, 2 * sizeof(*job->items));
	CHECK_TRUE(job->items != NULL);
	job->items[1] = job->items[0];
	job->items[1].numel = 30;
	job->items[1].offset = 64;
	job->items[1].cache_id += 1000;
	job->items[1].src[0].dense = z + 50;
	job->n_items = 2;
	job->total_numel = 94;
	job->coll.root = 3; /* global trainer rank 3: node 3, the set's rank 1 */
	job = run_job(n, job);
	check_ok(job, n->rank, "set broadcast");
	for (int i = 0; i < 80; i++)
		CHECK_MSG(z[i] == val((size_t)i, 3) + 100, "rank %d: broadcast element %d: %g",
			  n->rank, i, (double)z[i]);
	free_job(job);
}

/* With nonfinite = error, a NaN in node 3's input fails set 2's sum on both members alike,
 * naming global trainer rank 3 on node 3 (not the view's rank 1): through the input check
 * round (a large buffer) and carried in the one-round sum (a small one). */
static void set_fault_names_node(node_t *n, const int *nodes)
{
	static float x[BIG];
	size_t sizes[2] = {1000, BIG};
	for (int k = 0; k < 2; k++) {
		for (size_t i = 0; i < sizes[k]; i++)
			x[i] = val(i, n->rank);
		if (n->rank == 3)
			x[5] = NAN;
		scd_job_t *job =
		    new_job(SCD_COLL_ALLREDUCE, SC_FLOAT32, sizes[k], x, 2, nodes, 2);
		job->items[0].name = "layer.bad";
		job->nonfinite = SCD_NONFINITE_ERROR;
		job = run_job(n, job);
		CHECK_MSG(job->status == SC_ERR_INVALID &&
			      strstr(job->error, "rank 3 (node 3, local rank 0) sent 1 "
						 "non-finite") &&
			      strstr(job->error, "'layer.bad'"),
			  "rank %d, %zu elements: %s (%s)", n->rank, sizes[k],
			  sc_status_name(job->status), job->error);
		free_job(job);
	}
}

/* Allgather in set 1: node 0 gives 2 elements, node 2 gives 3, in that order. */
static void set_allgather(node_t *n, const int *nodes)
{
	float g[5] = {0};
	uint64_t total = 0;
	int give = n->rank == 0 ? 2 : 3;
	for (int i = 0; i < give; i++)
		g[i] = (float)(10 * n->rank + i);
	scd_job_t *job = new_job(SCD_COLL_ALLGATHER, SC_FLOAT32, 5, g, 1, nodes, 2);
	job->items[0].src[0].count = (uint64_t)give;
	job->items[0].src[0].result_nnz = &total;
	job = run_job(n, job);
	check_ok(job, n->rank, "set allgather");
	float want[5] = {0, 1, 20, 21, 22};
	CHECK_EQ_INT(total, 5);
	for (int i = 0; i < 5; i++)
		CHECK_MSG(g[i] == want[i], "rank %d: gathered element %d: %g", n->rank, i,
			  (double)g[i]);
	free_job(job);
}

/* In set 1, whole nodes of one trainer each: a reduce-scatter of 5 rows of 2 (set rank 0,
 * node 0, gets 3 rows, set rank 1, node 2, the other 2), an alltoall (node 0 sends 1 and
 * 2 elements, node 2 sends 3 and 1) and Adasum of two float64 tensors, exact; then a
 * reduce-scatter whose trainer count does not fit its nodes (no member ranks, one trainer
 * of two whole nodes'), refused on both alike before any byte moves. */
static void set_whole_nodes(node_t *n, const int *nodes)
{
	int me = n->rank / 2; /* the set rank */
	float r[10];
	uint64_t got = 0;
	for (int i = 0; i < 10; i++)
		r[i] = val((size_t)i, n->rank);
	scd_job_t *job = new_job(SCD_COLL_REDUCESCATTER, SC_FLOAT32, 10, r, 1, nodes, 2);
	job->coll.row = 2;
	job->items[0].src[0].result_nnz = &got;
	job = run_job(n, job);
	check_ok(job, n->rank, "set reduce-scatter");
	CHECK_EQ_INT(got, me ? 4 : 6);
	for (uint64_t i = 0; i < got; i++)
		CHECK_TRUE(r[i] == val(i + (me ? 6 : 0), 0) + val(i + (me ? 6 : 0), 2));
	free_job(job);

	float a[8];
	uint64_t counts[2] = {me ? 3u : 1u, me ? 1u : 2u};
	for (int i = 0; i < 8; i++)
		a[i] = (float)(10 * n->rank + i);
	job = new_job(SCD_COLL_ALLTOALL, SC_FLOAT32, 8, a, 1, nodes, 2);
	scd_job_src_t *src = &job->items[0].src[0];
	src->a2a = counts;
	src->a2a_n = 2;
	src->a2a_given = 2;
	src->a2a_sum = counts[0] + counts[1];
	src->result_nnz = &got;
	job = run_job(n, job);
	check_ok(job, n->rank, "set alltoall");
	float want0[4] = {0, 20, 21, 22}, want1[3] = {1, 2, 23};
	CHECK_EQ_INT(got, me ? 3 : 4);
	CHECK_EQ_INT(counts[0], me ? 2 : 1);
	CHECK_EQ_INT(counts[1], me ? 1 : 3);
	for (uint64_t i = 0; i < got; i++)
		CHECK_MSG(a[i] == (me ? want1 : want0)[i], "rank %d: alltoall element %d: %g",
			  n->rank, (int)i, (double)a[i]);
	free_job(job);

	double d[6], ref[2][6];
	for (int q = 0; q < 2; q++)
		for (int i = 0; i < 6; i++)
			ref[q][i] = val((size_t)i, nodes[q]) + 0.5 * (i + q);
	memcpy(d, ref[me], sizeof(d));
	ref_pair(ref[0], ref[1], 6);
	job = run_job(n, new_job(SCD_COLL_ADASUM, SC_FLOAT64, 6, d, 1, nodes, 2));
	check_ok(job, n->rank, "set adasum");
	for (int i = 0; i < 6; i++)
		CHECK_MSG(fabs(d[i] - ref[0][i]) <= 1e-12 * (1 + fabs(ref[0][i])),
			  "rank %d: adasum element %d: %.17g, not %.17g", n->rank, i, d[i],
			  ref[0][i]);
	free_job(job);

	job = new_job(SCD_COLL_REDUCESCATTER, SC_FLOAT32, 4, r, 1, nodes, 2);
	job->items[0].name = "layer.rs";
	job->coll.row = 1;
	job->average_divisor = 1; /* one trainer of the two nodes' two, but which? */
	job = run_job(n, job);
	CHECK_MSG(job->status == SC_ERR_INVALID &&
		      strstr(job->error, "process set 1: its 1 trainers do not lie on its 2 "
					 "nodes"),
		  "rank %d: a set without its member ranks: %s (%s)", n->rank,
		  sc_status_name(job->status), job->error);
	CHECK_EQ_INT(job->bytes_sent, 0);
	free_job(job);
}

/* Set 3 holds node 0 alone: its average is its own values, and nothing moves. */
static void solo_set(node_t *n)
{
	int only[1] = {0};
	float x[100];
	for (int i = 0; i < 100; i++)
		x[i] = val((size_t)i, n->rank);
	scd_job_t *job = new_job(SCD_COLL_ALLREDUCE, SC_FLOAT32, 100, x, 3, only, 1);
	job->items[0].op = SC_OP_AVERAGE;
	job = run_job(n, job);
	check_ok(job, n->rank, "a set of one node");
	CHECK_EQ_INT(job->bytes_sent + job->bytes_recv, 0);
	for (int i = 0; i < 100; i++)
		CHECK_TRUE(x[i] == val((size_t)i, 0));
	free_job(job);
}

/* Set 1 again, now over nodes {0, 1, 3}: node 0 makes its view anew (and drops the old
 * one, of {0, 2}), and its buffer of the earlier set sum's tensor starts afresh like the
 * new members' (a scheme context made for two nodes would not fit three); twice, the
 * second on the views and buffers the first made. */
static void set_regrouped(node_t *n)
{
	static float x[BIG];
	int nodes[3] = {0, 1, 3};
	for (int k = 0; k < 2; k++) {
		for (size_t i = 0; i < BIG; i++)
			x[i] = val(i, n->rank);
		scd_job_t *job =
		    run_job(n, new_job(SCD_COLL_ALLREDUCE, SC_FLOAT32, BIG, x, 1, nodes, 3));
		check_ok(job, n->rank, "the regrouped set's sum");
		for (size_t i = 0; i < BIG; i++)
			CHECK_MSG(x[i] == val(i, 0) + val(i, 1) + val(i, 3),
				  "rank %d: regrouped sum %d, element %zu: %g", n->rank, k, i,
				  (double)x[i]);
		free_job(job);
	}
}

static void global_sum(node_t *n)
{
	float x[777];
	for (int i = 0; i < 777; i++)
		x[i] = val((size_t)i, n->rank);
	scd_job_t *job =
	    run_job(n, new_job(SCD_COLL_ALLREDUCE, SC_FLOAT32, 777, x, 0, NULL, 0));
	check_ok(job, n->rank, "global sum");
	for (int i = 0; i < 777; i++)
		CHECK_TRUE(x[i] == val((size_t)i, 0) + val((size_t)i, 1) + val((size_t)i, 2) +
				       val((size_t)i, 3));
	free_job(job);
}

/* This node's engine of world nodes of local trainers each, over the mesh m prepared (a
 * mesh job from every rank's bootstrap blob, as negotiation hands it over). */
static void node_start(unit_mesh_t *m, int rank, int local, node_t *n)
{
	scd_log_level = SCD_LOG_WARN;
	*n = (node_t){.rank = rank};
	n->e = unit_engine_start(m, rank, local, TMO_MS, &n->loop, on_done, n);
	while (n->done < 1)
		uv_run(&n->loop, UV_RUN_ONCE);
	scd_job_t *mesh = n->back[0];
	check_ok(mesh, rank, "mesh");
	scd_transport_boot_clear(&mesh->boot);
	free(mesh);
}

static void node_stop(node_t *n)
{
	unit_engine_stop(n->e, &n->loop);
}

static void node_main(unit_mesh_t *m, int rank, void *arg)
{
	(void)arg;
	node_t n;
	node_start(m, rank, 1, &n);
	/* the plan, in order: set 1's and set 2's jobs (each node its own set's), then a
	 * global one */
	int even[2] = {0, 2}, odd[2] = {1, 3};
	if (rank % 2 == 0) {
		set_sums(&n, 1, even);
		set_sparse_sums(&n, 1, even);
		set_allgather(&n, even);
		set_whole_nodes(&n, even);
		if (rank == 0)
			solo_set(&n);
	} else {
		set_sums(&n, 2, odd);
		set_sparse_sums(&n, 2, odd);
		set_max_and_broadcast(&n, odd);
		set_fault_names_node(&n, odd);
	}
	if (rank != 2)
		set_regrouped(&n);
	global_sum(&n);
	node_stop(&n);
}

UNIT_TEST_TIMEOUT(engine_psets_two_sets_and_the_world, 120)
{
	unit_mesh_t mesh;
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", P, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	unit_mesh_fork(&mesh, node_main, NULL);
}

/*
 * Sets that split nodes: two engines of two trainers each (global ranks 0 and 1 on node 0,
 * 2 and 3 on node 1), set 1 = {0, 2} (local rank 0 of each node) and set 2 = {0, 1, 3}
 * (node 0 whole, local rank 1 of node 1), each job carrying the set's member ranks as
 * negotiation builds it, a source for each member trainer of the node.
 */
#define SP_L 2

/* A job of set pset (members set, n of them, ascending) on node rank: a source for each of
 * its member trainers, local rank l's buffer bufs[l]. */
static scd_job_t *sp_job(int rank, scd_coll_kind_t kind, uint32_t dtype, uint64_t numel,
			 void *const bufs[SP_L], uint32_t pset, const int *set, int n)
{
	static const int nodes[2] = {0, 1};
	scd_job_t *job = new_job(kind, dtype, numel, bufs[0], pset, nodes, 2);
	scd_job_item_t *it = &job->items[0];
	it->n_src = 0;
	for (int k = 0; k < n; k++)
		if (set[k] / SP_L == rank)
			it->src[it->n_src++] = (scd_job_src_t){.device = SCD_DEVICE_CPU,
							       .local_rank = set[k] % SP_L,
							       .dense = bufs[set[k] % SP_L]};
	job->set_ranks = malloc(sizeof(int) * (size_t)n);
	CHECK_TRUE(job->set_ranks != NULL);
	memcpy(job->set_ranks, set, sizeof(int) * (size_t)n);
	job->n_set_ranks = n;
	job->average_divisor = n;
	return job;
}

/* The first row of set rank k of n in a reduce-scatter of rows rows. */
static uint64_t sp_first_row(uint64_t rows, int n, int k)
{
	uint64_t N = (uint64_t)n, K = (uint64_t)k;
	return K * (rows / N) + (K < rows % N ? K : rows % N);
}

/* Reduce-scatters of 7 rows of 3: int32 sums and float64 averages of global rank g's
 * (g + 1) x 100 + i; set rank k gets its rows of the reduction over the members only. */
static void sp_reducescatter(node_t *nd, uint32_t pset, const int *set, int n)
{
	for (int avg = 0; avg < 2; avg++) {
		int32_t xi[SP_L][21];
		double xd[SP_L][21];
		uint64_t got[SP_L] = {0};
		for (int l = 0; l < SP_L; l++)
			for (int i = 0; i < 21; i++) {
				xd[l][i] = (nd->rank * SP_L + l + 1) * 100.0 + i;
				xi[l][i] = (nd->rank * SP_L + l + 1) * 100 + i;
			}
		void *const bufs[SP_L] = {avg ? (void *)xd[0] : (void *)xi[0],
					  avg ? (void *)xd[1] : (void *)xi[1]};
		scd_job_t *job = sp_job(nd->rank, SCD_COLL_REDUCESCATTER,
					avg ? SC_FLOAT64 : SC_INT32, 21, bufs, pset, set, n);
		job->coll.row = 3;
		job->coll.op = job->items[0].op = avg ? SC_OP_AVERAGE : SC_OP_SUM;
		for (int k = 0; k < job->items[0].n_src; k++)
			job->items[0].src[k].result_nnz = &got[job->items[0].src[k].local_rank];
		job = run_job(nd, job);
		check_ok(job, nd->rank,
			 avg ? "split reduce-scatter, average" : "split reduce-scatter");
		for (int k = 0; k < n; k++) {
			if (set[k] / SP_L != nd->rank)
				continue;
			int l = set[k] % SP_L;
			uint64_t f = sp_first_row(7, n, k), cnt = sp_first_row(7, n, k + 1) - f;
			CHECK_MSG(got[l] == cnt * 3,
				  "set %u, set rank %d: %llu elements, not %llu", pset, k,
				  (unsigned long long)got[l], (unsigned long long)cnt * 3);
			for (uint64_t j = 0; j < cnt * 3; j++) {
				double want = 0;
				for (int m = 0; m < n; m++)
					want += (set[m] + 1) * 100.0 + (double)(f * 3 + j);
				double v = avg ? xd[l][j] : xi[l][j];
				if (avg)
					want /= n;
				CHECK_MSG(v == want,
					  "set %u, set rank %d, element %llu: %.17g, not %.17g",
					  pset, k, (unsigned long long)j, v, want);
			}
		}
		free_job(job);
	}
}

/* What set rank s of an alltoall sends set rank q: 1 to 3 elements. */
static uint64_t sp_count(int s, int q)
{
	return 1 + (uint64_t)(s + 2 * q) % 3;
}

/* One alltoall of int32 on this node's members of set pset: set rank k sends sp_count(k,
 * q) to set rank q (or bad[k] counts summing over the tensor where given); the job. */
static scd_job_t *sp_a2a_run(node_t *nd, uint32_t pset, const int *set, int n,
			     int32_t x[SP_L][16], uint64_t counts[SP_L][4], uint64_t got[SP_L],
			     int bad_rank)
{
	void *const bufs[SP_L] = {x[0], x[1]};
	scd_job_t *job = sp_job(nd->rank, SCD_COLL_ALLTOALL, SC_INT32, 16, bufs, pset, set, n);
	for (int k = 0; k < n; k++) {
		if (set[k] / SP_L != nd->rank)
			continue;
		int l = set[k] % SP_L, off = 0;
		for (int q = 0; q < n; q++)
			off += (int)(counts[l][q] = sp_count(k, q));
		for (int i = 0; i < off; i++)
			x[l][i] = set[k] * 100 + i;
		for (int s = 0; s < job->items[0].n_src; s++) {
			scd_job_src_t *src = &job->items[0].src[s];
			if (src->local_rank != l)
				continue;
			src->a2a = counts[l];
			src->a2a_n = (uint32_t)n;
			src->a2a_given = (uint64_t)n;
			src->a2a_sum = (uint64_t)off;
			src->a2a_bad = set[k] == bad_rank;
			if (src->a2a_bad)
				src->a2a_sum = 17;
			src->result_nnz = &got[l];
		}
	}
	return run_job(nd, job);
}

/* Alltoalls in set pset: each member receives the members' blocks in set rank order, and
 * its counts from each; then rank 3, where it is a member, gives counts summing over the
 * tensor: refused on every node, naming its global and set ranks. */
static void sp_alltoall(node_t *nd, uint32_t pset, const int *set, int n)
{
	int32_t x[SP_L][16];
	uint64_t counts[SP_L][4], got[SP_L] = {0};
	scd_job_t *job = sp_a2a_run(nd, pset, set, n, x, counts, got, -1);
	check_ok(job, nd->rank, "split alltoall");
	for (int q = 0; q < n; q++) {
		if (set[q] / SP_L != nd->rank)
			continue;
		int l = set[q] % SP_L, at = 0;
		for (int s = 0; s < n; s++) {
			int off = 0;
			for (int r = 0; r < q; r++)
				off += (int)sp_count(s, r);
			CHECK_MSG(counts[l][s] == sp_count(s, q),
				  "set %u, set rank %d from %d: %llu elements", pset, q, s,
				  (unsigned long long)counts[l][s]);
			for (uint64_t j = 0; j < sp_count(s, q); j++, at++)
				CHECK_MSG(x[l][at] == set[s] * 100 + off + (int)j,
					  "set %u, set rank %d, element %d: %d, not %d", pset,
					  q, at, x[l][at], set[s] * 100 + off + (int)j);
		}
		CHECK_EQ_INT(got[l], at);
	}
	free_job(job);
	if (set[n - 1] != 3)
		return;
	job = sp_a2a_run(nd, pset, set, n, x, counts, got, 3);
	char want[64];
	snprintf(want, sizeof(want), "rank 3 (set rank %d) gave %d counts summing to 17", n - 1,
		 n);
	CHECK_MSG(job->status == SC_ERR_INVALID && strstr(job->error, want),
		  "rank %d: set %u, rank 3's counts over the tensor: %s (%s)", nd->rank, pset,
		  sc_status_name(job->status), job->error);
	free_job(job);
}

/* Adasum of float64 leaves in set pset: set rank k's leaf is leaves[k], whose tree's dot
 * products and coefficients are binary fractions (exact in any summation order) and
 * whose value depends on the leaves' order; against adasum_ref.h's tree in set rank
 * order, exactly. */
static void sp_adasum(node_t *nd, uint32_t pset, const int *set, int n)
{
	static const double leaves[3][4] = {{2, 0, 0, 0}, {2, 2, 0, 0}, {1, 4, 0, 0}};
	double d[SP_L][4] = {{0}}, ref[3 * 4];
	for (int k = 0; k < n; k++)
		if (set[k] / SP_L == nd->rank)
			memcpy(d[set[k] % SP_L], leaves[k], sizeof(leaves[k]));
	memcpy(ref, leaves, sizeof(double) * 4 * (size_t)n);
	ref_tree(ref, n, 4);
	void *const bufs[SP_L] = {d[0], d[1]};
	scd_job_t *job =
	    run_job(nd, sp_job(nd->rank, SCD_COLL_ADASUM, SC_FLOAT64, 4, bufs, pset, set, n));
	check_ok(job, nd->rank, "split adasum");
	for (int k = 0; k < n; k++)
		for (int i = 0; i < 4 && set[k] / SP_L == nd->rank; i++)
			CHECK_MSG(d[set[k] % SP_L][i] == ref[i],
				  "set %u, set rank %d, element %d: %.17g, not %.17g", pset, k,
				  i, d[set[k] % SP_L][i], ref[i]);
	free_job(job);
}

static void split_main(unit_mesh_t *m, int rank, void *arg)
{
	(void)arg;
	node_t n;
	node_start(m, rank, SP_L, &n);
	static const int even[2] = {0, 2}, three[3] = {0, 1, 3};
	sp_reducescatter(&n, 1, even, 2);
	sp_reducescatter(&n, 2, three, 3);
	sp_alltoall(&n, 1, even, 2);
	sp_alltoall(&n, 2, three, 3);
	sp_adasum(&n, 1, even, 2);
	sp_adasum(&n, 2, three, 3);
	node_stop(&n);
}

UNIT_TEST_TIMEOUT(engine_psets_split_nodes, 120)
{
	unit_mesh_t mesh;
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", 2, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	unit_mesh_fork(&mesh, split_main, NULL);
}

/*
 * A small host job that finds the communication stage idle runs that stage on the compute
 * thread, saving the hand-over's wake-up (engine.c, comm_here_locked); a large one goes
 * to the communication thread, which keeps the pipeline's overlap. Either way the results
 * are exact and in order: three small float32 sums and an int64 max communicated on the
 * compute thread, a sum of BIG elements (400 KB) not, on each of four engines.
 */
static void inline_main(unit_mesh_t *m, int rank, void *arg)
{
	(void)arg;
	node_t n;
	static float x[BIG];
	node_start(m, rank, 1, &n);
	uint64_t before = scd_engine_inline_jobs(n.e);
	for (int k = 0; k < 3; k++)
		global_sum(&n);
	CHECK_MSG(scd_engine_inline_jobs(n.e) == before + 3,
		  "rank %d: %llu of 3 small sums communicated on the compute thread", rank,
		  (unsigned long long)(scd_engine_inline_jobs(n.e) - before));
	for (size_t i = 0; i < BIG; i++)
		x[i] = val(i, rank);
	scd_job_t *job =
	    run_job(&n, new_job(SCD_COLL_ALLREDUCE, SC_FLOAT32, BIG, x, 0, NULL, 0));
	check_ok(job, rank, "large sum");
	for (size_t i = 0; i < BIG; i++)
		CHECK_MSG(x[i] == val(i, 0) + val(i, 1) + val(i, 2) + val(i, 3),
			  "rank %d: large sum, element %zu: %g", rank, i, (double)x[i]);
	free_job(job);
	CHECK_MSG(scd_engine_inline_jobs(n.e) == before + 3,
		  "rank %d: the large sum was communicated on the compute thread", rank);
	int64_t v[8];
	for (int i = 0; i < 8; i++)
		v[i] = (int64_t)rank * 1000 - i;
	job = new_job(SCD_COLL_ALLREDUCE, SC_INT64, 8, v, 0, NULL, 0);
	job->coll.op = job->items[0].op = SC_OP_MAX;
	job = run_job(&n, job);
	check_ok(job, rank, "int64 max");
	for (int i = 0; i < 8; i++)
		CHECK_MSG(v[i] == 3000 - i, "rank %d: max, element %d: %lld", rank, i,
			  (long long)v[i]);
	free_job(job);
	CHECK_TRUE(scd_engine_inline_jobs(n.e) == before + 4);
	node_stop(&n);
}

UNIT_TEST_TIMEOUT(engine_small_job_communicates_on_the_compute_thread, 120)
{
	unit_mesh_t mesh;
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", P, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	unit_mesh_fork(&mesh, inline_main, NULL);
}
