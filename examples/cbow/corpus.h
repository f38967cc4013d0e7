/*
 * corpus.h: the training text of the CBOW example as a stream of word ids.
 *
 * Every rank builds exactly the same vocabulary and token stream from the same text, so
 * word ids agree across ranks without any communication: words are lower-case runs of
 * a-z, the vocabulary keeps words seen at least min_count times, sorted by decreasing
 * count then alphabetically, and the optional frequent-word subsampling draws from a
 * generator seeded identically everywhere.
 */
#ifndef CBOW_CORPUS_H
#define CBOW_CORPUS_H

#include <stddef.h>
#include <stdint.h>

typedef struct corpus {
	size_t vocab_size; /* V */
	char **words;	   /* [V] word of each id */
	uint64_t *counts;  /* [V] occurrences in the text (before subsampling) */
	int32_t *tokens;   /* [n_tokens] the text as ids, rare words dropped */
	size_t n_tokens;
	size_t n_raw_tokens; /* words in the text, rare ones included */
	int32_t *neg_table;  /* negative-sampling table, id frequency ~ count^0.75 */
	size_t neg_table_size;
} corpus_t;

/*
 * Loads the text from path, or when path is NULL from `bible Gen1:1-Rev22:21`, drops
 * chapter headings ("Genesis 1" after an empty line; verse numbers are not words), builds
 * the vocabulary and the token stream. sample > 0 discards each occurrence of a word of
 * relative frequency f with probability 1 - (sqrt(f/sample) + 1) * sample / f (word2vec).
 * Returns 0, or -1 after printing why to stderr.
 */
int corpus_load(corpus_t *c, const char *path, unsigned min_count, double sample,
		uint64_t seed);

/* The id of word, or -1 when it is not in the vocabulary. */
int32_t corpus_lookup(const corpus_t *c, const char *word);

void corpus_free(corpus_t *c);

#endif /* CBOW_CORPUS_H */
