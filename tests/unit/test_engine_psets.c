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
 */
#include "unit.h"

#include <string.h>

#include <uv.h>

#include "../adasum_ref.h"
#include "engine/engine.h"
#include "unit_mesh.h"
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
 * reduce-scatter in a set that holds part of its nodes' trainers, refused on both alike
 * before any byte moves. */
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
	job->average_divisor = 1; /* one trainer of the two nodes' two */
	job = run_job(n, job);
	CHECK_MSG(job->status == SC_ERR_UNSUPPORTED &&
		      strstr(job->error, "reducescatter of tensor 'layer.rs' in process set 1 "
					 "is not supported: the set holds 1 of its 2 nodes' 2 "
					 "trainers"),
		  "rank %d: reduce-scatter in a set of part of its nodes: %s (%s)", n->rank,
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

static void node_main(unit_mesh_t *m, int rank, void *arg)
{
	(void)arg;
	scd_log_level = SCD_LOG_WARN;
	node_t n = {.rank = rank};
	CHECK_TRUE(uv_loop_init(&n.loop) == 0);
	scd_engine_params_t p = {.loop = &n.loop,
				 .rank = rank,
				 .world_size = P,
				 .local_size = 1,
				 .pipeline = 1,
				 .fusion_bytes = 1u << 20,
				 .join_timeout_ms = TMO_MS,
				 .transport = "tcp",
				 .schemes = scd_scheme_cfg_default(0, 0),
				 .done = on_done,
				 .done_arg = &n};
	CHECK_TRUE(scd_engine_create(&p, &n.e) == SC_OK);
	scd_job_t *mesh = calloc(1, sizeof(*mesh));
	CHECK_TRUE(mesh != NULL);
	mesh->kind = SCD_JOB_MESH;
	CHECK_TRUE(scd_transport_boot_init(&mesh->boot, m->ep[rank], rank, P, m->world_id) ==
		   SC_OK);
	m->ep[rank] = NULL;
	for (int r = 0; r < P; r++)
		if (r != rank)
			CHECK_TRUE(scd_transport_boot_set_blob(&mesh->boot, r, m->ep[r]->blob,
							       m->ep[r]->blob_len) == SC_OK);
	unit_mesh_release(m);
	mesh = run_job(&n, mesh);
	check_ok(mesh, rank, "mesh");
	scd_transport_boot_clear(&mesh->boot);
	free(mesh);
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
	CHECK_TRUE(scd_engine_destroy(n.e, 10000) == SC_OK);
	uv_run(&n.loop, UV_RUN_DEFAULT); /* the engine's handle closes */
	uv_loop_close(&n.loop);
}

UNIT_TEST_TIMEOUT(engine_psets_two_sets_and_the_world, 120)
{
	unit_mesh_t mesh;
	CHECK_MSG(unit_mesh_prepare(&mesh, "tcp", P, unit_rng()) == SC_OK, "prepare: %s",
		  scd_transport_error());
	unit_mesh_fork(&mesh, node_main, NULL);
}
