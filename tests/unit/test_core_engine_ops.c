/*
 * test_core_engine_ops.c: the device ops the engine runs on tensor data (device.h,
 * "-- engine --"), through the cpu device's table, against the plain loops the engine ran
 * before they became ops, bit for bit: the typed local sum and averaging of every dtype,
 * min, max (NaN winning) and product (integers wrapping) of every dtype,
 * the sum of a trainer's COO input with out-of-range entries, the dense residual drain,
 * and the residual folded into a COO input (which must give the bits of the dense
 * x[i] += residual[i], whatever superset of the residual's support the bitmap marks).
 */
#include "unit.h"

#include <math.h>
#include <string.h>

#include "device/device.h"
#include "device/reduce.h"

static const scd_device_ops_t *cpu(void)
{
	const scd_device_ops_t *dev = NULL;
	CHECK_TRUE(scd_device_get(SCD_DEVICE_CPU, &dev) == SC_OK && dev);
	CHECK_TRUE(dev->reduce_typed && dev->average_typed && dev->coo_add_checked &&
		   dev->residual_drain && dev->acc_aside && dev->residual_bits &&
		   dev->bits_set && dev->coo_fold_residual);
	return dev;
}

/* A float that is zero a third of the time, else of random sign and magnitude. */
static float rand_f32(void)
{
	if (unit_rng_below(3) == 0)
		return 0.0f;
	return (float)((unit_rng_double() - 0.5) * 1e3);
}

UNIT_TEST(engine_ops_sum_and_average)
{
	const scd_device_ops_t *dev = cpu();
	const sc_dtype_t dtypes[] = {SC_FLOAT32, SC_FLOAT64, SC_INT32, SC_INT64};
	enum { N = 1031 };
	for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
		sc_dtype_t dt = dtypes[d];
		size_t esz = sc_dtype_size(dt);
		unsigned char a[N * 8], b[N * 8], ref[N * 8], got[N * 8];
		for (size_t i = 0; i < sizeof(a); i++) {
			a[i] = (unsigned char)unit_rng();
			b[i] = (unsigned char)unit_rng();
		}
		if (dt == SC_FLOAT32 || dt == SC_FLOAT64) /* finite values */
			for (size_t i = 0; i < N; i++) {
				if (dt == SC_FLOAT32) {
					((float *)a)[i] = rand_f32();
					((float *)b)[i] = rand_f32();
				} else {
					((double *)a)[i] = rand_f32() * 1.25;
					((double *)b)[i] = rand_f32() * 0.75;
				}
			}
		/* the sum: wrap-around for the integers */
		memcpy(ref, a, N * esz);
		for (size_t i = 0; i < N; i++) {
			switch (dt) {
			case SC_FLOAT32:
				((float *)ref)[i] += ((float *)b)[i];
				break;
			case SC_FLOAT64:
				((double *)ref)[i] += ((double *)b)[i];
				break;
			case SC_INT32:
				((uint32_t *)ref)[i] += ((uint32_t *)b)[i];
				break;
			case SC_INT64:
				((uint64_t *)ref)[i] += ((uint64_t *)b)[i];
				break;
			}
		}
		memcpy(got, a, N * esz);
		dev->reduce_typed(dt, SC_OP_SUM, got, b, N);
		CHECK_MSG(memcmp(got, ref, N * esz) == 0, "%s: reduce_typed differs",
			  sc_dtype_name(dt));
		/* the average over 3 and over 8 trainers */
		for (int div = 3; div <= 8; div += 5) {
			memcpy(ref, a, N * esz);
			for (size_t i = 0; i < N; i++) {
				switch (dt) {
				case SC_FLOAT32:
					((float *)ref)[i] *= (float)(1.0 / div);
					break;
				case SC_FLOAT64:
					((double *)ref)[i] /= (double)div;
					break;
				case SC_INT32:
					((int32_t *)ref)[i] /= div;
					break;
				case SC_INT64:
					((int64_t *)ref)[i] /= div;
					break;
				}
			}
			memcpy(got, a, N * esz);
			dev->average_typed(dt, got, N, (double)div);
			CHECK_MSG(memcmp(got, ref, N * esz) == 0,
				  "%s: average_typed / %d differs", sc_dtype_name(dt), div);
		}
	}
}

/* Element i of a op b for one dtype, as the plain loop (NaN wins in min and max). */
#define OPS_REF_(T, U, isnanf)                                                                 \
	do {                                                                                   \
		T x = ((const T *)a)[i], y = ((const T *)b)[i];                                \
		T *r = &((T *)ref)[i];                                                         \
		if (op == SC_OP_MIN)                                                           \
			*r = isnanf(x) || isnanf(y) ? (isnanf(x) ? x : y) : (y < x ? y : x);   \
		else if (op == SC_OP_MAX)                                                      \
			*r = isnanf(x) || isnanf(y) ? (isnanf(x) ? x : y) : (y > x ? y : x);   \
		else                                                                           \
			*r = (T)((U)x * (U)y);                                                 \
	} while (0)
#define OPS_NO_NAN_(x) 0

UNIT_TEST(engine_ops_min_max_product)
{
	const scd_device_ops_t *dev = cpu();
	const sc_dtype_t dtypes[] = {SC_FLOAT32, SC_FLOAT64, SC_INT32, SC_INT64};
	const sc_reduce_op_t ops[] = {SC_OP_MIN, SC_OP_MAX, SC_OP_PRODUCT};
	enum { N = 1031 };
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
		for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
			sc_dtype_t dt = dtypes[d];
			sc_reduce_op_t op = ops[o];
			size_t esz = sc_dtype_size(dt);
			unsigned char a[N * 8], b[N * 8], ref[N * 8], got[N * 8];
			for (size_t i = 0; i < sizeof(a); i++) {
				a[i] = (unsigned char)unit_rng();
				b[i] = (unsigned char)unit_rng();
			}
			/* floats: random finite values, and a NaN in a or b every 50 */
			for (size_t i = 0; i < N && (dt == SC_FLOAT32 || dt == SC_FLOAT64);
			     i++) {
				double x = i % 50 == 7 ? NAN : rand_f32();
				double y = i % 50 == 31 ? NAN : rand_f32();
				if (dt == SC_FLOAT32)
					((float *)a)[i] = (float)x, ((float *)b)[i] = (float)y;
				else
					((double *)a)[i] = x * 1.25,
						 ((double *)b)[i] = y * 0.75;
			}
			for (size_t i = 0; i < N; i++) {
				switch (dt) {
				case SC_FLOAT32:
					OPS_REF_(float, float, isnan);
					break;
				case SC_FLOAT64:
					OPS_REF_(double, double, isnan);
					break;
				case SC_INT32:
					OPS_REF_(int32_t, uint32_t, OPS_NO_NAN_);
					break;
				case SC_INT64:
					OPS_REF_(int64_t, uint64_t, OPS_NO_NAN_);
					break;
				}
			}
			memcpy(got, a, N * esz);
			dev->reduce_typed(dt, op, got, b, N);
			size_t bad = N;
			for (size_t i = 0; i < N && bad == N;
			     i++) /* NaNs compare by their bits */
				if (memcmp(got + i * esz, ref + i * esz, esz))
					bad = i;
			CHECK_MSG(bad == N, "%s %s: element %zu differs", sc_reduce_op_name(op),
				  sc_dtype_name(dt), bad);
		}
	/* the op decides: the same inputs under sum and min differ */
	int32_t x[2] = {3, -4}, y[2] = {5, 6};
	dev->reduce_typed(SC_INT32, SC_OP_MIN, x, y, 2);
	CHECK_TRUE(x[0] == 3 && x[1] == -4);
	dev->reduce_typed(SC_INT32, SC_OP_MAX, x, y, 2);
	CHECK_TRUE(x[0] == 5 && x[1] == 6);
	dev->reduce_typed(SC_INT32, SC_OP_PRODUCT, x, y, 2);
	CHECK_TRUE(x[0] == 25 && x[1] == 36);
	dev->reduce_typed(SC_INT32, SC_OP_AVERAGE, x, y, 2); /* adds: the average divides */
	CHECK_TRUE(x[0] == 30 && x[1] == 42);
}
#undef OPS_REF_
#undef OPS_NO_NAN_

/* The identity of min, max and product (what a node holding nothing of a tensor gives)
 * leaves every value as it is, on either side, NaN included; a sum's is zeros. */
UNIT_TEST(engine_ops_reduce_identity)
{
	const scd_device_ops_t *dev = cpu();
	const sc_dtype_t dtypes[] = {SC_FLOAT32, SC_FLOAT64, SC_INT32, SC_INT64};
	const sc_reduce_op_t ops[] = {SC_OP_MIN, SC_OP_MAX, SC_OP_PRODUCT};
	enum { N = 257 };
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
		for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
			sc_dtype_t dt = dtypes[d];
			sc_reduce_op_t op = ops[o];
			size_t esz = sc_dtype_size(dt);
			unsigned char a[N * 8], id[N * 8], got[N * 8];
			for (size_t i = 0; i < sizeof(a); i++)
				a[i] = (unsigned char)unit_rng();
			for (size_t i = 0; i < N && dt == SC_FLOAT32; i++)
				((float *)a)[i] = i % 40 == 3 ? NAN : (float)rand_f32() * 1e3f;
			for (size_t i = 0; i < N && dt == SC_FLOAT64; i++)
				((double *)a)[i] = i % 40 == 3 ? NAN : rand_f32() * -1e300;
			scd_reduce_identity_typed(dt, op, id, N);
			memcpy(got, a, N * esz);
			dev->reduce_typed(dt, op, got, id, N);
			CHECK_MSG(!memcmp(got, a, N * esz), "%s %s: x op identity changed x",
				  sc_reduce_op_name(op), sc_dtype_name(dt));
			memcpy(got, id, N * esz);
			dev->reduce_typed(dt, op, got, a, N);
			CHECK_MSG(!memcmp(got, a, N * esz), "%s %s: identity op x is not x",
				  sc_reduce_op_name(op), sc_dtype_name(dt));
		}
	int64_t z[3] = {7, 7, 7};
	scd_reduce_identity_typed(SC_INT64, SC_OP_AVERAGE, z, 3);
	CHECK_TRUE(z[0] == 0 && z[1] == 0 && z[2] == 0);
	double w[2] = {7, 7};
	scd_reduce_identity_typed(SC_FLOAT64, SC_OP_SUM, w, 2);
	CHECK_TRUE(w[0] == 0 && w[1] == 0 && !signbit(w[0]));
}

UNIT_TEST(engine_ops_coo_add_checked)
{
	const scd_device_ops_t *dev = cpu();
	enum { NUMEL = 5000, NNZ = 3000 };
	static float ref[NUMEL], got[NUMEL];
	static uint32_t idx[NNZ];
	static float val[NNZ];
	uint64_t bad = 0;
	for (int j = 0; j < NNZ; j++) { /* repeats, and some entries out of range */
		idx[j] = (uint32_t)unit_rng_below(NUMEL + NUMEL / 20);
		if (unit_rng_below(50) == 0)
			idx[j] = UINT32_MAX - (uint32_t)j;
		val[j] = rand_f32();
	}
	for (int i = 0; i < NUMEL; i++)
		ref[i] = got[i] = rand_f32();
	for (int j = 0; j < NNZ; j++) {
		if (idx[j] < NUMEL)
			ref[idx[j]] += val[j];
		else
			bad++;
	}
	CHECK_EQ_INT(dev->coo_add_checked(got, NUMEL, idx, val, NNZ), bad);
	CHECK_TRUE(memcmp(got, ref, sizeof(ref)) == 0);
	CHECK_EQ_INT(dev->coo_add_checked(got, NUMEL, idx, val, 0), 0);
}

UNIT_TEST(engine_ops_residual_drain)
{
	const scd_device_ops_t *dev = cpu();
	enum { N = 4097 };
	static float x[N], res[N], ref[N];
	for (int i = 0; i < N; i++) {
		x[i] = rand_f32();
		res[i] = rand_f32();
		ref[i] = x[i] + res[i];
	}
	dev->residual_drain(x, res, N);
	CHECK_TRUE(memcmp(x, ref, sizeof(x)) == 0);
	for (int i = 0; i < N; i++)
		CHECK_TRUE(res[i] == 0);
}

UNIT_TEST(engine_ops_acc_aside)
{
	const scd_device_ops_t *dev = cpu();
	enum { N = 4097 };
	static float x[N], res[N], acc[N], x0[N], r0[N];
	for (int i = 0; i < N; i++) {
		x0[i] = x[i] = rand_f32();
		r0[i] = res[i] = rand_f32();
	}
	dev->acc_aside(acc, x, res, N);
	for (int i = 0; i < N; i++)
		CHECK_TRUE(acc[i] == x0[i] + r0[i]);
	CHECK_TRUE(!memcmp(x, x0, sizeof(x)) && !memcmp(res, r0, sizeof(res)));
}

/* The fold of a COO input with a residual against the dense sum, for numel that is and is
 * not a multiple of 64, with an exact bitmap (residual_bits) and with one that also marks
 * zeros (bits_set of a superset, as after a scheme's additions). */
UNIT_TEST(engine_ops_coo_fold_residual)
{
	const scd_device_ops_t *dev = cpu();
	const uint64_t sizes[] = {1, 63, 64, 65, 1000, 4096, 100003};
	for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
		for (int exact = 0; exact <= 1; exact++) {
			uint64_t n = sizes[c], nw = (n + 63) / 64;
			float *res = calloc(n, sizeof(float)),
			      *dense = calloc(n, sizeof(float));
			uint64_t *bits = calloc(nw, 8);
			uint32_t *ii = calloc(n, 4), *oi = calloc(2 * n + 1, 4),
				 *extra = calloc(n, 4);
			float *iv = calloc(n, 4), *ov = calloc(2 * n + 1, 4);
			CHECK_TRUE(res && dense && bits && ii && oi && extra && iv && ov);
			uint64_t nnz = 0, nextra = 0;
			for (uint64_t i = 0; i < n; i++) {
				if (unit_rng_below(4) ==
				    0) { /* input entries, a few of them 0 */
					ii[nnz] = (uint32_t)i;
					iv[nnz++] = unit_rng_below(10) ? rand_f32() : 0.0f;
				}
				if (unit_rng_below(5) == 0)
					res[i] = rand_f32();
				if (unit_rng_below(7) == 0)
					extra[nextra++] = (uint32_t)i;
			}
			if (n > 2 && nnz) { /* an input value the residual cancels */
				res[ii[0]] = -iv[0];
			}
			for (uint64_t j = 0; j < nnz; j++)
				dense[ii[j]] = iv[j];
			for (uint64_t i = 0; i < n; i++)
				dense[i] += res[i];
			uint64_t set = dev->residual_bits(res, n, bits);
			uint64_t nzres = 0;
			for (uint64_t i = 0; i < n; i++)
				nzres += res[i] != 0;
			CHECK_EQ_INT(set, nzres);
			if (!exact) { /* a superset of the support, an index listed twice */
				dev->bits_set(bits, extra, nextra);
				dev->bits_set(bits, extra, nextra ? 1 : 0);
			}
			scd_coo_t in = {ii, iv, nnz, nnz};
			uint64_t m = dev->coo_fold_residual(&in, res, bits, n, oi, ov);
			uint64_t w = 0;
			for (uint64_t i = 0; i < n; i++) {
				if (dense[i] == 0)
					continue;
				CHECK_MSG(
				    w < m && oi[w] == i,
				    "numel %llu: entry %llu of the fold is not index %llu",
				    (unsigned long long)n, (unsigned long long)w,
				    (unsigned long long)i);
				CHECK_MSG(memcmp(&ov[w], &dense[i], 4) == 0,
					  "numel %llu, index %llu: fold %.9g, dense %.9g",
					  (unsigned long long)n, (unsigned long long)i, ov[w],
					  dense[i]);
				w++;
			}
			CHECK_EQ_INT(m, w);
			for (uint64_t i = 0; i < n; i++)
				CHECK_TRUE(res[i] == 0);
			for (uint64_t k = 0; k < nw; k++)
				CHECK_TRUE(bits[k] == 0);
			free(res), free(dense), free(bits), free(ii), free(oi), free(extra);
			free(iv), free(ov);
		}
	}
}
