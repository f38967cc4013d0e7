/*
 * model.c: forward pass, gradients, optimiser steps and inspection of the CBOW model
 * (see model.h for the maths). Arithmetic is plain float loops the compiler vectorises;
 * the work per batch is O(batch x (window + negatives) x D) for the gradient and
 * O(V x D) for the optimiser's scan of the averaged gradient.
 */
#include "model.h"

#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ADAGRAD_EPS 1e-8f

static float *alloc_floats(size_t n)
{
	size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
	float *p = aligned_alloc(64, bytes ? bytes : 64);

	if (p)
		memset(p, 0, bytes); /* also faults the pages in now, not during training */
	return p;
}

int model_init(model_t *m, size_t vocab_size, size_t dim, optimizer_t opt, float lr,
	       uint64_t seed)
{
	size_t n = vocab_size * dim;
	uint64_t rng = rng_derive(seed, 0x1417);

	memset(m, 0, sizeof(*m));
	m->vocab_size = vocab_size;
	m->dim = dim;
	m->opt = opt;
	m->lr = lr;
	m->w_in = alloc_floats(n);
	m->w_out = alloc_floats(n);
	m->h = alloc_floats(dim);
	m->dh = alloc_floats(dim);
	if (opt == OPT_ADAGRAD) {
		m->acc_in = alloc_floats(n);
		m->acc_out = alloc_floats(n);
	}
	if (!m->w_in || !m->w_out || !m->h || !m->dh ||
	    (opt == OPT_ADAGRAD && (!m->acc_in || !m->acc_out))) {
		model_free(m);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		m->w_in[i] = (float)((rng_uniform(&rng) - 0.5) / (double)dim);
	return 0;
}

void model_free(model_t *m)
{
	free(m->w_in);
	free(m->w_out);
	free(m->acc_in);
	free(m->acc_out);
	free(m->h);
	free(m->dh);
	memset(m, 0, sizeof(*m));
}

/* log(1 + e^x) without overflow. */
static double softplus(double x)
{
	return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

static float dot(const float *a, const float *b, size_t n)
{
	float s = 0;

	for (size_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

static void axpy(float a, const float *x, float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] += a * x[i];
}

/* One centre word at absolute position t of the shard; returns its loss. */
static double centre_grad(model_t *m, const corpus_t *c, const shard_t *s, size_t t,
			  unsigned window, unsigned negatives, uint64_t *rng, float scale,
			  float *g_in, float *g_out)
{
	const size_t D = m->dim;
	size_t lo = t >= s->begin + window ? t - window : s->begin;
	size_t hi = t + window < s->end ? t + window : s->end - 1;
	size_t n_ctx = hi - lo;
	int32_t target = c->tokens[t];
	double loss = 0;

	if (n_ctx == 0)
		return 0;
	memset(m->h, 0, D * sizeof(float));
	memset(m->dh, 0, D * sizeof(float));
	for (size_t p = lo; p <= hi; p++)
		if (p != t)
			axpy(1.0f / (float)n_ctx, m->w_in + (size_t)c->tokens[p] * D, m->h, D);
	for (unsigned k = 0; k <= negatives; k++) {
		int32_t w = target;

		if (k > 0) {
			/* A negative equal to the target is redrawn (a few times at most). */
			for (int tries = 0; tries < 8 && w == target; tries++)
				w = c->neg_table[rng_next(rng) % c->neg_table_size];
			if (w == target)
				continue;
		}
		float *out = m->w_out + (size_t)w * D;
		double score = dot(m->h, out, D);
		double label = k == 0 ? 1.0 : 0.0;

		loss += k == 0 ? softplus(-score) : softplus(score);
		float g = (float)(1.0 / (1.0 + exp(-score)) - label) * scale;

		axpy(g, out, m->dh, D);
		axpy(g, m->h, g_out + (size_t)w * D, D);
	}
	for (size_t p = lo; p <= hi; p++)
		if (p != t)
			axpy(1.0f / (float)n_ctx, m->dh, g_in + (size_t)c->tokens[p] * D, D);
	return loss;
}

double model_grad(model_t *m, const corpus_t *c, shard_t *s, size_t batch, unsigned window,
		  unsigned negatives, uint64_t *rng, float *g_in, float *g_out)
{
	size_t len = s->end - s->begin;
	double loss = 0;

	for (size_t i = 0; i < batch; i++) {
		size_t t = s->begin + s->cursor;

		loss += centre_grad(m, c, s, t, window, negatives, rng, 1.0f / (float)batch,
				    g_in, g_out);
		s->cursor = (s->cursor + 1) % len;
	}
	return loss / (double)batch;
}

static int row_is_zero(const float *g, size_t n)
{
	unsigned acc = 0;

	for (size_t i = 0; i < n; i++)
		acc |= g[i] != 0.0f;
	return !acc;
}

static size_t apply_matrix(model_t *m, float *w, float *acc, float *g)
{
	const size_t D = m->dim;
	const float lr = m->lr;
	size_t rows = 0;

	for (size_t r = 0; r < m->vocab_size; r++) {
		float *gr = g + r * D, *wr = w + r * D;

		if (row_is_zero(gr, D))
			continue;
		rows++;
		if (acc) {
			float *ar = acc + r * D;

			for (size_t i = 0; i < D; i++) {
				ar[i] += gr[i] * gr[i];
				wr[i] -= lr * gr[i] / (sqrtf(ar[i]) + ADAGRAD_EPS);
			}
		} else {
			for (size_t i = 0; i < D; i++)
				wr[i] -= lr * gr[i];
		}
		memset(gr, 0, D * sizeof(float));
	}
	return rows;
}

size_t model_apply(model_t *m, float *g_in, float *g_out)
{
	return apply_matrix(m, m->w_in, m->acc_in, g_in) +
	       apply_matrix(m, m->w_out, m->acc_out, g_out);
}

static uint64_t digest_floats(uint64_t h, const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t bits;

		memcpy(&bits, &x[i], sizeof(bits));
		h = (h ^ bits) * 0x100000001b3ull;
		h ^= h >> 29;
	}
	return h;
}

uint64_t model_digest(const model_t *m)
{
	uint64_t h = 0xcbf29ce484222325ull;

	h = digest_floats(h, m->w_in, m->vocab_size * m->dim);
	return digest_floats(h, m->w_out, m->vocab_size * m->dim);
}

size_t model_neighbours(const model_t *m, int32_t w, size_t k, int32_t *ids, float *sims)
{
	const size_t D = m->dim;
	const float *x = m->w_in + (size_t)w * D;
	float nx = sqrtf(dot(x, x, D));
	size_t n = 0;

	for (size_t r = 0; r < m->vocab_size; r++) {
		const float *y = m->w_in + r * D;
		float ny = sqrtf(dot(y, y, D));

		if ((int32_t)r == w || nx == 0 || ny == 0)
			continue;
		float sim = dot(x, y, D) / (nx * ny);
		size_t i = n < k ? n++ : k;

		/* Insertion into the sorted top k. */
		while (i > 0 && sims[i - 1] < sim) {
			if (i < k) {
				sims[i] = sims[i - 1];
				ids[i] = ids[i - 1];
			}
			i--;
		}
		if (i < k) {
			sims[i] = sim;
			ids[i] = (int32_t)r;
		}
	}
	return n;
}
