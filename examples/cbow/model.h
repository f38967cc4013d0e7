/*
 * model.h: CBOW with negative sampling (word2vec, Mikolov et al. 2013) written as an
 * explicit gradient computation followed by an optimiser step, so that data-parallel
 * training can average the gradients across ranks in between.
 *
 * Input embeddings W_in [V x D] and output embeddings W_out [V x D]. For a centre word t
 * with context words c_1..c_n (up to `window` on each side), h = mean(W_in[c_j]), and the
 * loss is -log s(h.W_out[t]) - sum_k log s(-h.W_out[n_k]) over `negatives` words n_k drawn
 * from the unigram^0.75 distribution (s: the logistic function). A batch's loss is the
 * mean over its centre words; with W_out starting at zero the first loss is
 * (1 + negatives) ln 2 (4.16 for 5 negatives).
 *
 * Gradients of a batch touch only the rows of the words in it: they are naturally
 * sparse, which is what sparsecomm exploits. The optimiser step skips all-zero rows and
 * clears the gradient buffers as it goes, ready for the next batch.
 */
#ifndef CBOW_MODEL_H
#define CBOW_MODEL_H

#include "corpus.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { OPT_ADAGRAD, OPT_SGD } optimizer_t;

typedef struct model {
	size_t vocab_size, dim;
	float *w_in, *w_out;	 /* [V * D] row-major */
	float *acc_in, *acc_out; /* Adagrad sums of squared gradients; NULL for SGD */
	optimizer_t opt;
	float lr;
	float *h, *dh; /* [D] scratch */
} model_t;

/* A contiguous range of the token stream that one rank trains on, and where it is. */
typedef struct shard {
	size_t begin, end, cursor; /* cursor: offset of the next centre word from begin */
} shard_t;

/* Same seed, same initial weights: W_in uniform in +-0.5/D, W_out zero. 0 or -1 (ENOMEM). */
int model_init(model_t *m, size_t vocab_size, size_t dim, optimizer_t opt, float lr,
	       uint64_t seed);
void model_free(model_t *m);

/*
 * Computes the gradient of the mean loss over the next `batch` centre words of the shard
 * (wrapping around at its end), ADDING it into g_in and g_out ([V * D] each), and returns
 * the mean loss. Negative words come from *rng.
 */
double model_grad(model_t *m, const corpus_t *c, shard_t *s, size_t batch, unsigned window,
		  unsigned negatives, uint64_t *rng, float *g_in, float *g_out);

/*
 * Applies one optimiser step with the gradients and sets them back to zero. Returns the
 * number of rows that had a non-zero gradient (both matrices together).
 */
size_t model_apply(model_t *m, float *g_in, float *g_out);

/* A 64-bit digest of both weight matrices, bit-exact: equal weights, equal digest. */
uint64_t model_digest(const model_t *m);

/* The k words nearest to word id w by cosine similarity of W_in rows, best first. */
size_t model_neighbours(const model_t *m, int32_t w, size_t k, int32_t *ids, float *sims);

#endif /* CBOW_MODEL_H */
