/*
 * test_coll.c: the collectives' descriptors (coll/coll.h): negotiation's words keep the
 * bytes the world protocol has always carried, each word is one collective's, and the
 * checks of a trainer's request refuse what each collective cannot run, naming the tensor;
 * a process set's trainers in set rank order (coll/job.h).
 */
#include <string.h>

#include "coll/coll.h"
#include "coll/job.h"
#include "unit.h"

/* A collective with every argument, and the word older daemons send for it. */
static const struct {
	scd_coll_t c;
	uint32_t word;
} words[] = {
    {{SCD_COLL_ALLREDUCE, SC_OP_SUM, 0, 0}, 0},
    {{SCD_COLL_ALLREDUCE, SC_OP_AVERAGE, 0, 0}, 1},
    {{SCD_COLL_ALLREDUCE, SC_OP_PRODUCT, 0, 0}, 4},
    {{SCD_COLL_BROADCAST, SC_OP_SUM, 0, 0}, 0x80000000u},
    {{SCD_COLL_BROADCAST, SC_OP_SUM, 4095, 0}, 0x80000fffu},
    {{SCD_COLL_ALLGATHER, SC_OP_SUM, 0, 0}, 0x40000000u},
    {{SCD_COLL_REDUCESCATTER, SC_OP_MAX, 0, 3}, 0x20000000u | 3u << 3 | 3u},
    {{SCD_COLL_REDUCESCATTER, SC_OP_AVERAGE, 0, SCD_RS_ROW_MAX - 1},
     0x20000000u | (SCD_RS_ROW_MAX - 1) << 3 | 1u},
    {{SCD_COLL_ALLTOALL, SC_OP_SUM, 0, 0}, 0x10000000u},
    {{SCD_COLL_ADASUM, SC_OP_SUM, 0, 0}, 0x08000000u},
};

UNIT_TEST(coll_words_keep_their_bytes_and_round_trip)
{
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		CHECK_EQ_INT(scd_coll_pack(&words[i].c), words[i].word);
		scd_coll_t c;
		CHECK_TRUE(scd_coll_unpack(words[i].word, &c));
		CHECK_EQ_INT(c.kind, words[i].c.kind);
		CHECK_EQ_INT(scd_coll_pack(&c), words[i].word);
		/* no other descriptor takes the word for its own */
		int claims = 0;
		for (int k = 0; k < SCD_COLL_COUNT; k++) {
			scd_coll_t d = {.kind = (scd_coll_kind_t)k};
			claims += scd_coll_desc((scd_coll_kind_t)k)->unpack(words[i].word, &d);
		}
		CHECK_EQ_INT(claims, 1);
	}
	char buf[64];
	CHECK_TRUE(!scd_coll_unpack(7, &(scd_coll_t){0}));
	CHECK_TRUE(!strcmp(scd_coll_describe_word(7, buf, sizeof(buf)), "operation 0x7"));
	CHECK_TRUE(!strcmp(scd_coll_describe_word(0x80000003u, buf, sizeof(buf)),
			   "broadcast from rank 3"));
	CHECK_TRUE(!strcmp(scd_coll_describe_word(0x20000000u | 8u << 3 | 2u, buf, sizeof(buf)),
			   "reducescatter (min, rows of 8)"));
}

/* Which collectives share a buffer, and with whom. */
UNIT_TEST(coll_fuse_classes)
{
	CHECK_TRUE(!scd_coll_solo(&(scd_coll_t){.kind = SCD_COLL_ALLREDUCE}));
	CHECK_TRUE(!scd_coll_solo(&(scd_coll_t){.kind = SCD_COLL_BROADCAST}));
	CHECK_TRUE(scd_coll_solo(&(scd_coll_t){.kind = SCD_COLL_ALLGATHER}));
	CHECK_TRUE(scd_coll_solo(&(scd_coll_t){.kind = SCD_COLL_REDUCESCATTER}));
	CHECK_TRUE(scd_coll_solo(&(scd_coll_t){.kind = SCD_COLL_ALLTOALL}));
	CHECK_TRUE(scd_coll_solo(&(scd_coll_t){.kind = SCD_COLL_ADASUM}));
	/* sum and average share a class; min and a broadcast from root 2 have their own */
	CHECK_EQ_INT(scd_coll_fuse_word(SC_OP_SUM), scd_coll_fuse_word(SC_OP_AVERAGE));
	CHECK_TRUE(scd_coll_fuse_word(SC_OP_MIN) != scd_coll_fuse_word(SC_OP_SUM));
	CHECK_TRUE(scd_coll_fuse_word(0x80000002u) != scd_coll_fuse_word(0x80000001u));
}

static sc_status_t check(scd_coll_t c, uint64_t count, int coo, int sparsifier, char *err)
{
	scd_coll_req_t rq = {.coll = c,
			     .tensor = "layer.w",
			     .numel = 12,
			     .count = count,
			     .coo = coo,
			     .sparsifier = sparsifier,
			     .trainers = 4};
	err[0] = 0;
	return scd_coll_desc(c.kind)->check(&rq, err, 512);
}

UNIT_TEST(coll_checks_refuse_what_a_collective_cannot_run)
{
	char err[512];
	scd_coll_t ar = {.kind = SCD_COLL_ALLREDUCE, .op = SC_OP_MAX};
	CHECK_EQ_INT(check(ar, 0, 0, 0, err), SC_OK);
	CHECK_EQ_INT(check(ar, 0, 0, 1, err), SC_ERR_UNSUPPORTED); /* max of a sparsified */
	CHECK_TRUE(strstr(err, "'layer.w'") && strstr(err, "max is a dense operation"));
	ar.op = SC_OP_AVERAGE;
	CHECK_EQ_INT(check(ar, 0, 1, 1, err), SC_OK);
	ar.op = (sc_reduce_op_t)9;
	CHECK_EQ_INT(check(ar, 0, 0, 0, err), SC_ERR_INVALID);
	CHECK_TRUE(strstr(err, "unknown reduction 9") != NULL);

	scd_coll_t bc = {.kind = SCD_COLL_BROADCAST, .root = 3};
	CHECK_EQ_INT(check(bc, 0, 0, 0, err), SC_OK);
	bc.root = 4;
	CHECK_EQ_INT(check(bc, 0, 0, 0, err), SC_ERR_INVALID);
	CHECK_TRUE(strstr(err, "root rank 4 is not a rank of the job (0 to 3)") != NULL);

	scd_coll_t ag = {.kind = SCD_COLL_ALLGATHER};
	CHECK_EQ_INT(check(ag, 12, 0, 0, err), SC_OK);
	CHECK_EQ_INT(check(ag, 13, 0, 0, err), SC_ERR_INVALID);
	CHECK_TRUE(strstr(err, "13 elements given, over its 12") != NULL);
	CHECK_EQ_INT(check(ag, 12, 0, 1, err), SC_ERR_UNSUPPORTED); /* a sparsified tensor */
	CHECK_TRUE(strstr(err, "'layer.w'") && strstr(err, "allgather is a dense operation"));

	scd_coll_t rs = {.kind = SCD_COLL_REDUCESCATTER, .op = SC_OP_SUM, .row = 4};
	CHECK_EQ_INT(check(rs, 4, 0, 0, err), SC_OK);
	CHECK_EQ_INT(check(rs, 5, 0, 0, err), SC_ERR_INVALID); /* 5 does not divide 12 */
	CHECK_TRUE(strstr(err, "rows of 5 elements do not divide its 12") != NULL);
	CHECK_EQ_INT(check(rs, 0, 0, 0, err), SC_ERR_INVALID);
	CHECK_EQ_INT(check(rs, 4, 0, 1, err), SC_ERR_UNSUPPORTED); /* a sparsified tensor */
	CHECK_TRUE(strstr(err, "'layer.w'") && strstr(err, "is a dense operation"));

	scd_coll_t a2a = {.kind = SCD_COLL_ALLTOALL};
	CHECK_EQ_INT(check(a2a, 0, 0, 0, err), SC_OK);
	CHECK_EQ_INT(check(a2a, 0, 0, 1, err), SC_ERR_UNSUPPORTED);
	CHECK_TRUE(strstr(err, "alltoall of tensor 'layer.w'") != NULL);

	/* adasum: float32 and float64, dense */
	scd_coll_t ad = {.kind = SCD_COLL_ADASUM};
	CHECK_EQ_INT(check(ad, 0, 0, 0, err), SC_OK);
	CHECK_EQ_INT(check(ad, 0, 0, 1, err), SC_ERR_UNSUPPORTED);
	CHECK_TRUE(strstr(err, "'layer.w'") && strstr(err, "adasum is a dense operation"));
	CHECK_EQ_INT(check(ad, 0, 1, 0, err), SC_ERR_UNSUPPORTED);
	CHECK_TRUE(strstr(err, "'layer.w'") && strstr(err, "adasum is a dense operation"));
	scd_coll_req_t rq = {.coll = ad, .tensor = "steps", .numel = 4, .trainers = 2};
	for (sc_dtype_t dt = SC_FLOAT32; dt <= SC_INT64; dt++) {
		rq.dtype = dt;
		sc_status_t st = scd_coll_desc(ad.kind)->check(&rq, err, 512);
		CHECK_EQ_INT(st, dt <= SC_FLOAT64 ? SC_OK : SC_ERR_UNSUPPORTED);
		if (st != SC_OK)
			CHECK_TRUE(strstr(err, "adasum of tensor 'steps'") &&
				   strstr(err, sc_dtype_name(dt)));
	}
	char buf[64];
	CHECK_TRUE(!strcmp(scd_coll_describe_word(SCD_OP_ADASUM, buf, sizeof(buf)), "adasum"));
}

UNIT_TEST(coll_words_from_the_network_are_checked)
{
	/* the words a peer daemon may send: those a trainer's request makes in a job of 4 */
	CHECK_TRUE(scd_coll_word_valid(SC_OP_SUM, 4));
	CHECK_TRUE(scd_coll_word_valid(SC_OP_PRODUCT, 4));
	CHECK_TRUE(scd_coll_word_valid(SCD_OP_BROADCAST | 3u, 4));
	CHECK_TRUE(scd_coll_word_valid(SCD_OP_ALLGATHER, 4));
	CHECK_TRUE(scd_coll_word_valid(SCD_OP_REDUCESCATTER | 4u << 3 | SC_OP_MAX, 4));
	CHECK_TRUE(scd_coll_word_valid(SCD_OP_ALLTOALL, 4));
	CHECK_TRUE(scd_coll_word_valid(SCD_OP_ADASUM, 4));
	/* and those none does: a root that is no rank, rows of 0 elements (a division by
	 * zero where the rows are counted), an unknown reduction */
	CHECK_TRUE(!scd_coll_word_valid(SCD_OP_BROADCAST | 4u, 4));
	CHECK_TRUE(!scd_coll_word_valid(SCD_OP_REDUCESCATTER | 0u << 3 | SC_OP_SUM, 4));
	CHECK_TRUE(!scd_coll_word_valid(9, 4));
	CHECK_TRUE(!scd_coll_word_valid(SCD_OP_REDUCESCATTER | 4u << 3 | 7u, 4));
}

UNIT_TEST(coll_process_sets_run_every_collective)
{
	char err[512];
	/* every collective runs in the global set and in any other, whatever part of its
	 * nodes' trainers the set holds: the engine places per-trainer slices in set rank
	 * order (job.h) */
	for (int k = 0; k < SCD_COLL_COUNT; k++) {
		CHECK_EQ_INT(scd_coll_pset_check((scd_coll_kind_t)k, 0, "t", err, 512), SC_OK);
		CHECK_EQ_INT(scd_coll_pset_check((scd_coll_kind_t)k, 2, "t", err, 512), SC_OK);
	}
}

/* A job of set {0, 2, 3} of a world of 3 nodes x 2 trainers, over nodes {0, 1}: node 0
 * (view rank 0) holds set rank 0 (local rank 0), node 1 (view rank 1) set ranks 1 and 2
 * (local ranks 0 and 1). */
UNIT_TEST(coll_job_places_a_split_set_in_set_rank_order)
{
	int nodes[2] = {0, 1}, ranks[3] = {0, 2, 3};
	scd_job_t job = {.pset = 4,
			 .n_nodes = 2,
			 .nodes = nodes,
			 .n_set_ranks = 3,
			 .set_ranks = ranks,
			 .average_divisor = 3};
	char err[256], name[64];
	CHECK_EQ_INT(scd_job_set_check(&job, 2, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(scd_job_trainers(&job, 2, 2), 3);
	CHECK_EQ_INT(scd_job_first_trainer(&job, 0, 2, 2), 0);
	CHECK_EQ_INT(scd_job_first_trainer(&job, 1, 2, 2), 1);
	CHECK_EQ_INT(scd_job_first_trainer(&job, 2, 2, 2), 3);
	CHECK_EQ_INT(scd_job_set_rank(&job, 0, 0, 2), 0);
	CHECK_EQ_INT(scd_job_set_rank(&job, 0, 1, 2), -1); /* global rank 1: not a member */
	CHECK_EQ_INT(scd_job_set_rank(&job, 1, 0, 2), 1);
	CHECK_EQ_INT(scd_job_set_rank(&job, 1, 1, 2), 2);
	CHECK_EQ_INT(scd_job_set_rank(&job, 1, 2, 2), -1);
	CHECK_EQ_INT(scd_job_global_rank(&job, 2, 2), 3);
	CHECK_MSG(!strcmp(scd_job_trainer_name(&job, 1, 2, name, sizeof(name)),
			  "rank 2 (set rank 1)"),
		  "%s", name);
	/* set {1, 4} over nodes {0, 2}, world of 3 x 2: node 1 holds no member */
	int far[2] = {0, 2}, odd[2] = {1, 4};
	job.nodes = far;
	job.set_ranks = odd;
	job.n_set_ranks = 2;
	job.average_divisor = 2;
	CHECK_EQ_INT(scd_job_set_check(&job, 2, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(scd_job_first_trainer(&job, 1, 2, 2), 1);
	CHECK_EQ_INT(scd_job_set_rank(&job, 1, 0, 2), 1);
	CHECK_EQ_INT(scd_job_set_rank(&job, 0, 0, 2), -1);
	/* layouts the collectives cannot rely on: a member on a node outside the job's, a
	 * node without a member, ranks out of order, a count other than the divisor */
	int outside[2] = {1, 2}, unordered[2] = {4, 1};
	job.set_ranks = outside; /* global rank 2 is on node 1 */
	CHECK_EQ_INT(scd_job_set_check(&job, 2, err, sizeof(err)), SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "process set 4"), "%s", err);
	job.set_ranks = odd;
	job.n_set_ranks = 1;
	job.average_divisor = 1; /* node 2 without a member */
	CHECK_EQ_INT(scd_job_set_check(&job, 2, err, sizeof(err)), SC_ERR_INVALID);
	job.n_set_ranks = 2;
	job.set_ranks = unordered;
	job.average_divisor = 2;
	CHECK_EQ_INT(scd_job_set_check(&job, 2, err, sizeof(err)), SC_ERR_INVALID);
	job.set_ranks = odd;
	job.average_divisor = 3;
	CHECK_EQ_INT(scd_job_set_check(&job, 2, err, sizeof(err)), SC_ERR_INVALID);
	/* without set_ranks: every trainer of the job's nodes, node by node */
	job.set_ranks = NULL;
	job.n_set_ranks = 0;
	job.average_divisor = 4;
	CHECK_EQ_INT(scd_job_set_check(&job, 2, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(scd_job_first_trainer(&job, 1, 2, 2), 2);
	CHECK_EQ_INT(scd_job_global_rank(&job, 3, 2), 5);
	CHECK_MSG(!strcmp(scd_job_trainer_name(&job, 3, 2, name, sizeof(name)),
			  "rank 5 (set rank 3)"),
		  "%s", name);
	job.average_divisor = 3; /* not every trainer of its nodes: it needs its ranks */
	CHECK_EQ_INT(scd_job_set_check(&job, 2, err, sizeof(err)), SC_ERR_INVALID);
	/* the global set: ranks are global ranks */
	scd_job_t all = {.average_divisor = 6};
	CHECK_EQ_INT(scd_job_set_check(&all, 2, err, sizeof(err)), SC_OK);
	CHECK_EQ_INT(scd_job_set_rank(&all, 2, 1, 2), 5);
	CHECK_MSG(!strcmp(scd_job_trainer_name(&all, 5, 2, name, sizeof(name)), "rank 5"), "%s",
		  name);
}
