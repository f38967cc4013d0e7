/* test_verdict.c: the input check's wire word and its decision (engine/verdict.c), and the
 * local sum's non-finite count (device/reduce.c). */
#include <math.h>
#include <string.h>

#include "device/reduce.h"
#include "engine/verdict.h"
#include "unit.h"

UNIT_TEST(verdict_fault_word_round_trip)
{
	scd_fault_t none = {0};
	CHECK_EQ_INT(scd_fault_pack(&none), 0);
	CHECK_EQ_INT(scd_fault_unpack(0).kind, SCD_FAULT_NONE);
	scd_fault_t f = {SCD_FAULT_COO_RANGE, 511, 63, 12345};
	scd_fault_t g = scd_fault_unpack(scd_fault_pack(&f));
	CHECK_EQ_INT(g.kind, SCD_FAULT_COO_RANGE);
	CHECK_EQ_INT(g.item, 511);
	CHECK_EQ_INT(g.local_rank, 63);
	CHECK_EQ_INT(g.count, 12345);
	f = (scd_fault_t){SCD_FAULT_NONFINITE, 0, 0, 1ull << 40}; /* the count saturates */
	g = scd_fault_unpack(scd_fault_pack(&f));
	CHECK_EQ_INT(g.kind, SCD_FAULT_NONFINITE);
	CHECK_EQ_INT(g.count, UINT32_MAX);
}

/* A node's failed compute stage travels as its status: every rank fails the job with it,
 * and a word no build knows still fails it. */
UNIT_TEST(verdict_local_fault_carries_the_status)
{
	scd_fault_t f = {SCD_FAULT_LOCAL, 0, 0, (uint64_t)-SC_ERR_NOMEM};
	scd_fault_t g = scd_fault_unpack(scd_fault_pack(&f));
	CHECK_EQ_INT(g.kind, SCD_FAULT_LOCAL);
	CHECK_EQ_INT(scd_fault_status(&g), SC_ERR_NOMEM);
	g.count = 0;
	CHECK_EQ_INT(scd_fault_status(&g), SC_ERR_SYSTEM);
	g.count = 9999;
	CHECK_EQ_INT(scd_fault_status(&g), SC_ERR_SYSTEM);
	f = (scd_fault_t){SCD_FAULT_COO_RANGE, 0, 0, 3};
	CHECK_EQ_INT(scd_fault_status(&f), SC_ERR_INVALID);
}

UNIT_TEST(verdict_describe_names_rank_and_tensor)
{
	scd_job_item_t items[2] = {{.name = "emb.w", .numel = 1000},
				   {.name = "fc.b", .numel = 8}};
	scd_job_t job = {.n_items = 2, .items = items, .dtype = SC_FLOAT32};
	char msg[512];
	scd_fault_t f = {SCD_FAULT_COO_RANGE, 0, 1, 3};
	scd_verdict_describe(&job, 2, 4, &f, msg, sizeof(msg)); /* node 2 of 4 trainers each */
	CHECK_MSG(strstr(msg, "rank 9 (node 2, local rank 1)") && strstr(msg, "'emb.w'") &&
		      strstr(msg, "3 COO indices out of range") && strstr(msg, "1000"),
		  "%s", msg);
	f = (scd_fault_t){SCD_FAULT_NONFINITE, 1, 0, 2};
	scd_verdict_describe(&job, 1, 1, &f, msg, sizeof(msg));
	CHECK_MSG(strstr(msg, "rank 1 (node 1, local rank 0)") && strstr(msg, "'fc.b'") &&
		      strstr(msg, "2 non-finite values"),
		  "%s", msg);
	f.item = 7; /* past the job's items: named by index, never read past them */
	scd_verdict_describe(&job, 1, 1, &f, msg, sizeof(msg));
	CHECK_MSG(strstr(msg, "item 7"), "%s", msg);
	/* a node's local fault: the node, its trainers, the tensor or the buffer, the status */
	f = (scd_fault_t){SCD_FAULT_LOCAL, 0, 0, (uint64_t)-SC_ERR_INVALID};
	scd_verdict_describe(&job, 1, 2, &f, msg, sizeof(msg));
	CHECK_MSG(strstr(msg, "node 1 (ranks 2, 3)") && strstr(msg, "tensor 'emb.w'") &&
		      strstr(msg, "SC_ERR_INVALID"),
		  "%s", msg);
	f.item = SCD_FAULT_ITEM_BUFFER;
	scd_verdict_describe(&job, 0, 1, &f, msg, sizeof(msg));
	CHECK_MSG(strstr(msg, "node 0 (rank 0)") && strstr(msg, "tensors 'emb.w', 'fc.b'"),
		  "%s", msg);
	/* in process set 2 = {0, 1, 3} of 2 nodes x 2 trainers: node 1's member is rank 3 */
	int nodes[2] = {0, 1}, ranks[3] = {0, 1, 3};
	job.pset = 2;
	job.n_nodes = 2;
	job.nodes = nodes;
	job.n_set_ranks = 3;
	job.set_ranks = ranks;
	job.average_divisor = 3;
	scd_verdict_describe(&job, 1, 2, &f, msg, sizeof(msg));
	CHECK_MSG(strstr(msg, "node 1 (rank 3 of process set 2)"), "%s", msg);
	scd_verdict_describe(&job, 0, 2, &f, msg, sizeof(msg));
	CHECK_MSG(strstr(msg, "node 0 (ranks 0, 1 of process set 2)"), "%s", msg);
}

/* The checked copy and sum write what the plain ones do and count NaN and infinities of
 * what they wrote, overflow included. */
UNIT_TEST(reduce_nonfinite_counts_in_the_summing_pass)
{
	enum { N = 37 };
	float a[N], b[N], d[N];
	for (int i = 0; i < N; i++)
		a[i] = (float)i, b[i] = (float)(2 * i);
	a[3] = NAN;
	b[5] = INFINITY;
	a[7] = 3e38f, b[7] = 3e38f; /* the sum overflows */
	CHECK_EQ_INT(scd_copy_f32_nonfinite(d, a, N), 1);
	CHECK_TRUE(isnan(d[3]) && d[4] == 4.0f);
	CHECK_EQ_INT(scd_sum_f32_nonfinite(d, b, N), 3);
	CHECK_TRUE(isnan(d[3]) && isinf(d[5]) && isinf(d[7]) && d[4] == 12.0f);
	CHECK_EQ_INT(scd_count_f32_nonfinite(d, N), 3);
	CHECK_EQ_INT(scd_count_f32_nonfinite(b, N), 1);
}
