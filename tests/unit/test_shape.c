/* test_shape.c: a submission's shape as the daemons compare it (util/shape.h), and its
 * place in the signature negotiation compares (world/agree.h). */
#include <stdio.h>
#include <string.h>

#include "unit.h"
#include "util/shape.h"
#include "world/world_int.h"

/* One dimension and none are the same; [17, 1311] and [17, 23, 57] are not; a product
 * that is not the element count, an overflow or too many dimensions are refused. */
UNIT_TEST(shape_make_compare_refuse)
{
	const uint64_t a[] = {17, 1311}, b[] = {17, 23, 57}, one[] = {22287};
	const uint64_t wrong[] = {17, 1312}, huge[] = {1ull << 40, 1ull << 40};
	scd_shape_t sa, sb, s1, s0;
	char err[256], text[128];
	CHECK_EQ_INT(scd_shape_make(&sa, a, 2, 22287, err, sizeof(err)), 0);
	CHECK_EQ_INT(scd_shape_make(&sb, b, 3, 22287, err, sizeof(err)), 0);
	CHECK_EQ_INT(scd_shape_make(&s1, one, 1, 22287, err, sizeof(err)), 0);
	CHECK_EQ_INT(scd_shape_make(&s0, NULL, 0, 22287, err, sizeof(err)), 0);
	CHECK_TRUE(!scd_shape_equal(&sa, &sb));
	CHECK_TRUE(scd_shape_equal(&s1, &s0));
	CHECK_TRUE(!scd_shape_equal(&sa, &s0));
	scd_shape_text(&sb, 22287, text, sizeof(text));
	CHECK_MSG(!strcmp(text, "[17, 23, 57]"), "text '%s'", text);
	scd_shape_text(&s0, 22287, text, sizeof(text));
	CHECK_MSG(!strcmp(text, "[22287]"), "text '%s'", text);
	CHECK_EQ_INT(scd_shape_make(&sa, wrong, 2, 22287, err, sizeof(err)), -1);
	CHECK_MSG(strstr(err, "[17, 1312]") && strstr(err, "22287"), "err '%s'", err);
	CHECK_EQ_INT(scd_shape_make(&sa, huge, 2, 0, err, sizeof(err)), -1);
	CHECK_MSG(strstr(err, "overflow"), "err '%s'", err);
	uint64_t many[SCD_SHAPE_MAX_DIMS + 1];
	for (int i = 0; i <= SCD_SHAPE_MAX_DIMS; i++)
		many[i] = 1;
	CHECK_EQ_INT(scd_shape_make(&sa, many, SCD_SHAPE_MAX_DIMS + 1, 1, err, sizeof(err)),
		     -1);
	CHECK_EQ_INT(scd_shape_make(&sa, many, SCD_SHAPE_MAX_DIMS, 1, err, sizeof(err)), 0);
}

/* Past the kept dimensions the rest compare by a hash: shapes that differ only in their
 * ninth dimension differ, the same long shape is equal, and the text says so. */
UNIT_TEST(shape_long_compared_by_hash)
{
	uint64_t x[10] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2}, y[10];
	memcpy(y, x, sizeof(x));
	y[8] = 4, y[9] = 1;
	scd_shape_t sx, sy, sx2;
	char err[256], text[160];
	CHECK_EQ_INT(scd_shape_make(&sx, x, 10, 1024, err, sizeof(err)), 0);
	CHECK_EQ_INT(scd_shape_make(&sy, y, 10, 1024, err, sizeof(err)), 0);
	CHECK_EQ_INT(scd_shape_make(&sx2, x, 10, 1024, err, sizeof(err)), 0);
	CHECK_TRUE(!scd_shape_equal(&sx, &sy));
	CHECK_TRUE(scd_shape_equal(&sx, &sx2));
	scd_shape_text(&sx, 1024, text, sizeof(text));
	CHECK_MSG(!strncmp(text, "[2, 2, 2, 2, 2, 2, 2, 3 more (hash ", 34), "text '%s'", text);
}

/* The signature carries the shape through its message form (a peer's, bounded) and its
 * difference names the field and each value. */
UNIT_TEST(shape_in_the_signature)
{
	const uint64_t a[] = {17, 1311}, b[] = {17, 23, 57};
	scd_tsig_t sa = {0}, sb = {0}, back;
	char err[128], text[96];
	CHECK_EQ_INT(scd_shape_make(&sa.shape, a, 2, 22287, err, sizeof(err)), 0);
	CHECK_EQ_INT(scd_shape_make(&sb.shape, b, 3, 22287, err, sizeof(err)), 0);
	int f = scd_tsig_diff(&sa, &sb);
	CHECK_TRUE(f >= 0);
	CHECK_MSG(!strcmp(scd_tsig_field_name(f), "shape"), "field '%s'",
		  scd_tsig_field_name(f));
	scd_tsig_field_text(&sb, f, 22287, text, sizeof(text));
	CHECK_MSG(!strcmp(text, "[17, 23, 57]"), "text '%s'", text);
	Sparsecomm__TensorSig m;
	scd_tsig_to_msg(&sb, &m);
	scd_tsig_from_msg(&m, &back);
	CHECK_TRUE(scd_tsig_equal(&back, &sb));
	/* a peer's message with more words than kept, and a dimension count past the limit */
	uint64_t words[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
	m.ndim = 1000;
	m.n_dims = 12;
	m.dims = words;
	scd_tsig_from_msg(&m, &back);
	CHECK_EQ_INT(back.shape.ndim, 1000);
	CHECK_TRUE(back.shape.dim[SCD_SHAPE_KEPT - 1] == 8);
	scd_tsig_field_text(&back, f, 0, text, sizeof(text));
	CHECK_MSG(strstr(text, "993 more"), "text '%s'", text);
}

/* e's per-rank arrays: every rank present, dtype and operation 0. */
static void centry_of(scd_centry_t *e, uint8_t *have, uint64_t *numel, uint32_t *zero,
		      scd_tsig_t *sig)
{
	e->have = have;
	e->numel = numel;
	e->dtype = zero;
	e->op = zero;
	e->sig = sig;
}

/* A disagreement among many ranks names every value once with the ranks that have it, so
 * the odd rank shows however many ranks the world has: 300 ranks, rank 177 alone with
 * another shape. */
UNIT_TEST(agree_describe_groups_ranks_by_value)
{
	enum { P = 300 };
	static scd_daemon_t d = {.world_size = P, .local_size = 1};
	scd_world_t w = {.d = &d};
	scd_centry_t e = {.name = "wide"};
	uint64_t numel[P];
	uint32_t zero[P] = {0};
	uint8_t have[P];
	static scd_tsig_t sig[P];
	const uint64_t a[] = {17, 1311}, b[] = {17, 23, 57};
	char err[128], msg[1024];
	for (int r = 0; r < P; r++) {
		numel[r] = 22287;
		CHECK_EQ_INT(scd_shape_make(&sig[r].shape, r == 177 ? b : a, r == 177 ? 3 : 2,
					    22287, err, sizeof(err)),
			     0);
	}
	memset(have, 1, sizeof(have));
	centry_of(&e, have, numel, zero, sig);
	CHECK_EQ_INT(scd_agree_describe(&w, &e, msg, sizeof(msg)), 1);
	CHECK_MSG(strstr(msg,
			 "allreduce of tensor 'wide' failed: "
			 "shape differs across ranks: ranks 0-176, 178-299 have [17, 1311]; "
			 "rank 177 has [17, 23, 57]"),
		  "message: %s", msg);
	/* two ranks that differ and a short buffer: cut, terminated */
	d.world_size = 2;
	sig[1] = sig[177];
	CHECK_EQ_INT(scd_agree_describe(&w, &e, msg, 40), 1);
	CHECK_TRUE(strlen(msg) == 39);
	d.world_size = P;
}

/* An empty tensor's shape is kept on its one-element stand-in, one dimension too, and
 * read as empty (its zero past the kept words too); a product of 0 on more elements, or
 * a one-element tensor's own shape, is not. */
UNIT_TEST(shape_empty_stand_in)
{
	const uint64_t e1[] = {0}, e2[] = {0, 3}, one[] = {1, 1}, full[] = {2, 3};
	uint64_t tail[10] = {2, 2, 2, 2, 2, 2, 2, 2, 0, 2};
	scd_shape_t s1, s2, so, sf, st, sk;
	char err[256], text[128];
	CHECK_EQ_INT(scd_shape_make(&s1, e1, 1, 1, err, sizeof(err)), 0);
	CHECK_EQ_INT(scd_shape_make(&s2, e2, 2, 1, err, sizeof(err)), 0);
	CHECK_EQ_INT(scd_shape_make(&so, one, 2, 1, err, sizeof(err)), 0);
	CHECK_EQ_INT(scd_shape_make(&sf, full, 2, 6, err, sizeof(err)), 0);
	CHECK_EQ_INT(scd_shape_make(&st, tail, 10, 1, err, sizeof(err)), 0);
	CHECK_TRUE(scd_shape_empty(&s1) && scd_shape_empty(&s2) && scd_shape_empty(&st));
	CHECK_TRUE(!scd_shape_empty(&so) && !scd_shape_empty(&sf));
	CHECK_TRUE(!scd_shape_equal(&s1, &s2) && !scd_shape_equal(&s1, &so));
	scd_shape_text(&s1, 1, text, sizeof(text));
	CHECK_MSG(!strcmp(text, "[0]"), "text '%s'", text);
	scd_shape_text(&s2, 1, text, sizeof(text));
	CHECK_MSG(!strcmp(text, "[0, 3]"), "text '%s'", text);
	/* through a peer's message form */
	scd_shape_from_kept(&sk, s1.ndim, s1.dim, scd_shape_kept(&s1));
	CHECK_TRUE(scd_shape_equal(&sk, &s1) && scd_shape_empty(&sk));
	CHECK_EQ_INT(scd_shape_make(&sk, e2, 2, 6, err, sizeof(err)), -1);
	CHECK_EQ_INT(scd_shape_make(&sk, e1, 1, 4, err, sizeof(err)), -1);
}

/* An empty tensor's stand-in against a tensor of elements: the element counts differ,
 * named as 0 with the empty shape, and the other rank's shape when it gave one. */
UNIT_TEST(agree_describe_names_an_empty_tensor)
{
	static scd_daemon_t d = {.world_size = 3, .local_size = 1};
	scd_world_t w = {.d = &d};
	scd_centry_t e = {.name = "grad"};
	uint64_t numel[3] = {1, 6, 6};
	uint32_t zero[3] = {0};
	uint8_t have[3] = {1, 1, 1};
	static scd_tsig_t sig[3];
	const uint64_t empty[] = {0, 3}, full[] = {2, 3};
	char err[128], msg[512];
	CHECK_EQ_INT(scd_shape_make(&sig[0].shape, empty, 2, 1, err, sizeof(err)), 0);
	CHECK_EQ_INT(scd_shape_make(&sig[1].shape, full, 2, 6, err, sizeof(err)), 0);
	CHECK_EQ_INT(scd_shape_make(&sig[2].shape, full, 2, 6, err, sizeof(err)), 0);
	centry_of(&e, have, numel, zero, sig);
	CHECK_EQ_INT(scd_agree_describe(&w, &e, msg, sizeof(msg)), 1);
	CHECK_MSG(strstr(msg, "tensor 'grad' failed: element count differs across ranks: "
			      "rank 0 has 0 [0, 3]; ranks 1, 2 have 6 [2, 3]"),
		  "message: %s", msg);
}
