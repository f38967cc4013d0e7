/*
 * itest_wire.c: the 16-bit wire (sc_tensor_opts_t.wire) between real daemons.
 *
 *   wire: fp16 and bf16 tensors summed and averaged alone and fused with native ones,
 *       small integers (every partial sum exact in 16 bits) coming back exact; random
 *       floats coming back as the same bits on every rank (the int32 MIN and MAX of the
 *       results' bit patterns agree), each a 16-bit value; `sparsectl stats` naming each
 *       tensor's wire and its bytes_sent about half a native tensor's of the same size; a
 *       MIN on a 16-bit tensor exact (its wire stays 32-bit); registrations a 16-bit
 *       wire refuses; and rank 1 registering another wire format: SC_ERR_MISMATCH on
 *       every rank naming the tensor, the wire format and rank 1 (one trainer a node).
 */
#include "itest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIRE_N	   100003 /* large enough for the ring, not a multiple of any P */
#define WIRE_STEPS 3

static sc_tensor_t *reg_wire(sc_client_t *c, const char *name, size_t n, sc_wire_t wire)
{
	sc_tensor_opts_t o = {.struct_size = sizeof(o), .wire = wire};
	sc_tensor_t *t = NULL;
	IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, n, &o, &t), "registering '%s' (%s)",
		    name, sc_wire_name(wire));
	return t;
}

static void check_exact(sc_client_t *c, sc_tensor_t *t, uint64_t seed, sc_reduce_op_t op)
{
	char why[512];
	size_t bad = it_check(sc_tensor_data(t), SC_FLOAT32, sc_tensor_numel(t), seed,
			      sc_size(c), 1, op, why, sizeof(why));
	if (bad)
		IT_FAIL("'%s' (%s): %zu wrong elements: %s", sc_tensor_name(t),
			sc_reduce_op_name(op), bad, why);
}

/* Alone, sum and average, for a few steps: exact. */
static void alone(sc_client_t *c, sc_tensor_t *t)
{
	for (int s = 0; s < WIRE_STEPS; s++) {
		sc_reduce_op_t op = s == 1 ? SC_OP_AVERAGE : SC_OP_SUM;
		it_fill(sc_tensor_data(t), SC_FLOAT32, sc_tensor_numel(t), (uint64_t)s,
			sc_rank(c), 1);
		IT_CHECK_SC(sc_allreduce(c, t, op, IT_OP_TIMEOUT_MS), "allreduce of '%s'",
			    sc_tensor_name(t));
		check_exact(c, t, (uint64_t)s, op);
	}
}

/* Tensors of three wire formats submitted together: they fuse by format, and each comes
 * back exact. */
static void fused(sc_client_t *c)
{
	enum { K = 9 };
	sc_tensor_t *t[K];
	sc_handle_t h[K];
	for (int k = 0; k < K; k++) {
		char name[32];
		snprintf(name, sizeof(name), "wire.fused.%d", k);
		t[k] = reg_wire(c, name, 1000 + 37 * (size_t)k, (sc_wire_t)(k % 3));
	}
	for (int s = 0; s < WIRE_STEPS; s++) {
		for (int k = 0; k < K; k++) {
			it_fill(sc_tensor_data(t[k]), SC_FLOAT32, sc_tensor_numel(t[k]),
				(uint64_t)(s * K + k), sc_rank(c), 1);
			IT_CHECK_SC(sc_allreduce_async(c, t[k], SC_OP_SUM, &h[k]),
				    "allreduce of '%s'", sc_tensor_name(t[k]));
		}
		for (int k = 0; k < K; k++) {
			int r = it_wait(c, h[k], IT_OP_TIMEOUT_MS);
			if (r != SC_OK)
				IT_FAIL("fused '%s': %s (%s)", sc_tensor_name(t[k]),
					it_wait_name(r), it_wait_error());
			check_exact(c, t[k], (uint64_t)(s * K + k), SC_OP_SUM);
		}
	}
}

/* Random floats: the same bits everywhere, each a 16-bit value near the exact sum. */
static void identical(sc_client_t *c, sc_wire_t wire)
{
	char name[32];
	snprintf(name, sizeof(name), "wire.bits.%s", sc_wire_name(wire));
	sc_tensor_t *t = reg_wire(c, name, WIRE_N, wire);
	snprintf(name, sizeof(name), "wire.bits.%s.lo", sc_wire_name(wire));
	sc_tensor_t *lo = it_register(c, name, SC_INT32, WIRE_N);
	snprintf(name, sizeof(name), "wire.bits.%s.hi", sc_wire_name(wire));
	sc_tensor_t *hi = it_register(c, name, SC_INT32, WIRE_N);
	float *x = sc_tensor_data(t);
	for (size_t i = 0; i < WIRE_N; i++) {
		uint64_t v =
		    (i * 2654435761u + (uint64_t)sc_rank(c) * 40503u) * 0x9e3779b97f4a7c15ull;
		x[i] = (float)((double)((v >> 20) % 2000001) / 1e6 - 1.0);
	}
	IT_CHECK_SC(sc_allreduce(c, t, SC_OP_SUM, IT_OP_TIMEOUT_MS), "allreduce of '%s'",
		    sc_tensor_name(t));
	double ulp = wire == SC_WIRE_FP16 ? 0x1p-10 : 0x1p-7;
	for (size_t i = 0; i < WIRE_N; i++) {
		double sum = 0;
		for (int r = 0; r < sc_size(c); r++) {
			uint64_t v =
			    (i * 2654435761u + (uint64_t)r * 40503u) * 0x9e3779b97f4a7c15ull;
			sum += (float)((double)((v >> 20) % 2000001) / 1e6 - 1.0);
		}
		uint32_t b;
		memcpy(&b, &x[i], 4);
		int lowbits = wire == SC_WIRE_BF16 ? (b & 0xffffu) != 0 : 0;
		if (lowbits || !(fabs(x[i] - sum) <= sc_size(c) * (ulp * sc_size(c) + 0x1p-24)))
			IT_FAIL("'%s' element %zu: %.9g (0x%08x), expected %.9g within 16-bit "
				"rounding",
				sc_tensor_name(t), i, x[i], b, sum);
	}
	memcpy(sc_tensor_data(lo), x, 4 * WIRE_N);
	memcpy(sc_tensor_data(hi), x, 4 * WIRE_N);
	IT_CHECK_SC(sc_allreduce(c, lo, SC_OP_MIN, IT_OP_TIMEOUT_MS), "min of the bits");
	IT_CHECK_SC(sc_allreduce(c, hi, SC_OP_MAX, IT_OP_TIMEOUT_MS), "max of the bits");
	const int32_t *l = sc_tensor_data(lo), *h = sc_tensor_data(hi);
	for (size_t i = 0; i < WIRE_N; i++)
		if (l[i] != h[i])
			IT_FAIL("'%s' element %zu differs across ranks: bits 0x%08x .. 0x%08x",
				sc_tensor_name(t), i, (uint32_t)l[i], (uint32_t)h[i]);
}

/* `sparsectl stats --json`: the tensor's wire and bytes_sent. */
static double stats_of(const char *name, const char *want_wire)
{
	const char *args[] = {"stats", NULL};
	it_json_t *s = it_ctl_json(it_env.socket, args);
	const it_json_t *ts = it_json_get(s, "tensors");
	double sent = -1;
	for (size_t i = 0; ts && i < ts->n; i++) {
		const it_json_t *nm = it_json_get(ts->items[i], "name");
		if (!nm || nm->type != IT_JSTR || strcmp(nm->str, name))
			continue;
		const it_json_t *w = it_json_get(ts->items[i], "wire");
		const it_json_t *b = it_json_get(ts->items[i], "bytes_sent");
		if (!w || w->type != IT_JSTR || strcmp(w->str, want_wire))
			IT_FAIL("stats of '%s': wire %s, expected %s", name,
				w && w->type == IT_JSTR ? w->str : "(none)", want_wire);
		sent = b && b->type == IT_JNUM ? b->num : -1;
	}
	it_json_free(s);
	if (sent < 0)
		IT_FAIL("stats --json lists no '%s' with its bytes_sent", name);
	return sent;
}

static void refused(sc_client_t *c)
{
	sc_tensor_t *t = NULL;
	sc_tensor_opts_t o = {.struct_size = sizeof(o),
			      .wire = SC_WIRE_FP16,
			      .sparsifier = SC_SPARSIFY_TOPK,
			      .density = 0.1};
	sc_status_t st = sc_register_ex(c, "wire.refused.topk", SC_FLOAT32, 1000, &o, &t);
	if (st != SC_ERR_INVALID || !strstr(sc_last_error(), "wire.refused.topk") ||
	    !strstr(sc_last_error(), "sparsifier"))
		IT_FAIL("fp16 wire with top-k: %s (%s), expected SC_ERR_INVALID naming the "
			"tensor and the sparsifier",
			sc_status_name(st), sc_last_error());
	o = (sc_tensor_opts_t){.struct_size = sizeof(o), .wire = SC_WIRE_BF16};
	st = sc_register_ex(c, "wire.refused.f64", SC_FLOAT64, 1000, &o, &t);
	if (st != SC_ERR_INVALID || !strstr(sc_last_error(), "wire.refused.f64"))
		IT_FAIL("bf16 wire on float64: %s (%s), expected SC_ERR_INVALID",
			sc_status_name(st), sc_last_error());
	o = (sc_tensor_opts_t){.struct_size = sizeof(o), .wire = (sc_wire_t)9};
	st = sc_register_ex(c, "wire.refused.unknown", SC_FLOAT32, 1000, &o, &t);
	if (st != SC_ERR_INVALID)
		IT_FAIL("wire format 9: %s, expected SC_ERR_INVALID", sc_status_name(st));
}

static void mismatch(sc_client_t *c)
{
	const char *name = "wire.mismatch";
	sc_tensor_t *t = reg_wire(c, name, 1000, sc_rank(c) == 1 ? SC_WIRE_BF16 : SC_WIRE_FP16);
	it_fill(sc_tensor_data(t), SC_FLOAT32, 1000, 1, sc_rank(c), 1);
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "allreduce of '%s'", name);
	int r = it_wait(c, h, IT_ERROR_TIMEOUT_MS);
	const char *msg = it_wait_error();
	if (r != SC_ERR_MISMATCH || !strstr(msg, name) || !strstr(msg, "wire format") ||
	    !it_mentions_rank(msg, 1) || !strstr(msg, "bf16") || !strstr(msg, "fp16"))
		IT_FAIL("rank 1's bf16 wire against fp16: %s ('%s'), expected SC_ERR_MISMATCH "
			"naming the tensor, the wire format and rank 1",
			it_wait_name(r), msg);
	it_log("wire mismatch: %s", msg);
}

int it_wire16(int argc, char **argv)
{
	(void)argc, (void)argv;
	sc_client_t *c = it_connect();
	sc_tensor_t *f16 = reg_wire(c, "wire.alone.fp16", WIRE_N, SC_WIRE_FP16);
	sc_tensor_t *b16 = reg_wire(c, "wire.alone.bf16", WIRE_N, SC_WIRE_BF16);
	/* the native tensor pinned to the ring, to compare the bytes of the same ring */
	sc_tensor_opts_t ring = {.struct_size = sizeof(ring), .scheme = "dense_ring"};
	sc_tensor_t *f32 = NULL;
	IT_CHECK_SC(sc_register_ex(c, "wire.alone.native", SC_FLOAT32, WIRE_N, &ring, &f32),
		    "registering 'wire.alone.native'");
	alone(c, f16);
	alone(c, b16);
	alone(c, f32);
	fused(c);
	identical(c, SC_WIRE_FP16);
	identical(c, SC_WIRE_BF16);
	/* min keeps 32 bits: exact even for values 16 bits cannot hold */
	sc_tensor_t *m = reg_wire(c, "wire.min", 1000, SC_WIRE_FP16);
	float *x = sc_tensor_data(m);
	for (size_t i = 0; i < 1000; i++)
		x[i] = 1.0f + 0x1p-20f * (float)(i + (size_t)sc_rank(c));
	IT_CHECK_SC(sc_allreduce(c, m, SC_OP_MIN, IT_OP_TIMEOUT_MS), "min of 'wire.min'");
	for (size_t i = 0; i < 1000; i++)
		if (x[i] != 1.0f + 0x1p-20f * (float)i)
			IT_FAIL("'wire.min' element %zu: %.9g, expected %.9g", i, x[i],
				1.0f + 0x1p-20f * (float)i);
	refused(c);
	if (sc_size(c) > 1) {
		double s16 = stats_of("wire.alone.fp16", "fp16");
		double sb16 = stats_of("wire.alone.bf16", "bf16");
		double s32 = stats_of("wire.alone.native", "native");
		/* the ring's 2 (N - 1)/N of the buffer a step, N nodes, 2 bytes a value (up
		 * to the chunks' rounding), half the native ring's */
		double N = sc_size(c) / sc_local_size(c);
		double want = WIRE_STEPS * 2 * (N - 1) / N * 2.0 * WIRE_N;
		if (fabs(s16 - want) > 0.001 * want || fabs(sb16 - want) > 0.001 * want ||
		    !(s16 > 0.499 * s32 && s16 < 0.501 * s32))
			IT_FAIL("bytes_sent: fp16 %.0f, bf16 %.0f, native %.0f: expected %.0f, "
				"about half the native",
				s16, sb16, s32, want);
		it_log("bytes_sent over %d steps: fp16 %.0f, bf16 %.0f, native %.0f (%.3f)",
		       WIRE_STEPS, s16, sb16, s32, s16 / s32);
		sc_tensor_stats_t st = {.struct_size = sizeof(st)};
		IT_CHECK_SC(sc_tensor_stats(c, f16, &st), "sc_tensor_stats");
		if (strcmp(st.wire, "fp16"))
			IT_FAIL("sc_tensor_stats of 'wire.alone.fp16': wire '%s'", st.wire);
	}
	if (sc_size(c) > 1 && sc_local_size(c) == 1)
		mismatch(c);
	it_barrier(c, "wire.end", 0);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
