/*
 * corpus.c: reads the text (a file, or the output of the `bible` reader), splits it into
 * words, and builds the deterministic vocabulary, token stream and negative-sampling
 * table described in corpus.h.
 *
 * Text rules: a chapter heading of the `bible` output is a line that follows an empty
 * line, does not start with a space and ends in a number ("Song of Solomon 2"); it is
 * skipped. Words are maximal runs of letters, lower-cased; a possessive or contraction
 * suffix after an apostrophe ("LORD's") is dropped. Digits and punctuation separate words,
 * so verse numbers vanish.
 */
#include "corpus.h"

#include "rng.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIBLE_COMMAND  "bible Gen1:1-Rev22:21"
#define MAX_WORD_BYTES 64
#define NEG_TABLE_SIZE (1u << 22)

typedef struct entry {
	char *word;
	uint64_t count;
} entry_t;

/* Word -> entry index, open addressing with linear probing; grows at half full. */
typedef struct dict {
	uint32_t *slots; /* entry index + 1, 0 = empty */
	size_t n_slots;
	entry_t *entries;
	size_t n_entries, cap_entries;
} dict_t;

static uint64_t hash_word(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
	return h;
}

static int dict_grow(dict_t *d)
{
	size_t n = d->n_slots ? 2 * d->n_slots : 1u << 14;
	uint32_t *slots = calloc(n, sizeof(*slots));

	if (!slots)
		return -1;
	for (size_t e = 0; e < d->n_entries; e++) {
		const char *w = d->entries[e].word;
		size_t i = hash_word(w, strlen(w)) & (n - 1);

		while (slots[i])
			i = (i + 1) & (n - 1);
		slots[i] = (uint32_t)e + 1;
	}
	free(d->slots);
	d->slots = slots;
	d->n_slots = n;
	return 0;
}

/* Returns the entry index of word (n bytes), adding it with count 0 if new; -1: no memory. */
static long dict_intern(dict_t *d, const char *word, size_t n)
{
	if (2 * (d->n_entries + 1) > d->n_slots && dict_grow(d) < 0)
		return -1;
	size_t i = hash_word(word, n) & (d->n_slots - 1);

	while (d->slots[i]) {
		const char *w = d->entries[d->slots[i] - 1].word;

		if (strncmp(w, word, n) == 0 && w[n] == '\0')
			return d->slots[i] - 1;
		i = (i + 1) & (d->n_slots - 1);
	}
	if (d->n_entries == d->cap_entries) {
		size_t cap = d->cap_entries ? 2 * d->cap_entries : 4096;
		entry_t *e = realloc(d->entries, cap * sizeof(*e));

		if (!e)
			return -1;
		d->entries = e;
		d->cap_entries = cap;
	}
	char *copy = strndup(word, n);

	if (!copy)
		return -1;
	d->entries[d->n_entries] = (entry_t){.word = copy, .count = 0};
	d->slots[i] = (uint32_t)++d->n_entries;
	return (long)d->n_entries - 1;
}

/* Reads all of f into a NUL-terminated buffer. */
static char *read_all(FILE *f, size_t *len_p)
{
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap);

	while (buf) {
		if (len + 1 == cap) {
			char *b = realloc(buf, 2 * cap);

			if (!b)
				break;
			buf = b;
			cap *= 2;
		}
		size_t n = fread(buf + len, 1, cap - 1 - len, f);

		len += n;
		if (n == 0) {
			if (ferror(f))
				break;
			buf[len] = '\0';
			*len_p = len;
			return buf;
		}
	}
	free(buf);
	return NULL;
}

static char *load_text(const char *path, size_t *len_p)
{
	const char *what = path ? path : BIBLE_COMMAND;
	FILE *f = path ? fopen(path, "r") : popen(BIBLE_COMMAND " 2>/dev/null", "r");

	if (!f) {
		fprintf(stderr, "cbow: cannot read '%s': %s\n", what, strerror(errno));
		return NULL;
	}
	char *text = read_all(f, len_p);
	int err = errno;
	int rc = path ? fclose(f) : pclose(f);

	if (!text) {
		fprintf(stderr, "cbow: reading '%s' failed: %s\n", what, strerror(err));
		return NULL;
	}
	if (!path && rc != 0) {
		fprintf(stderr,
			"cbow: '%s' failed (status %d); is the bible-kjv package "
			"installed? Or pass --corpus FILE\n",
			what, rc);
		free(text);
		return NULL;
	}
	return text;
}

/* True when line [s, e) is a chapter heading: starts with a non-space, ends in digits. */
static int is_heading(const char *s, const char *e)
{
	while (e > s && isspace((unsigned char)e[-1]))
		e--;
	return e > s && !isspace((unsigned char)*s) && isdigit((unsigned char)e[-1]);
}

/*
 * Splits text into words, interning each; appends the entry index of every word to
 * *ids_p (grown as needed). Returns the number of words, or -1 when out of memory.
 */
static long tokenize(dict_t *d, const char *text, uint32_t **ids_p)
{
	size_t n = 0, cap = 1 << 20;
	uint32_t *ids = malloc(cap * sizeof(*ids));
	int prev_blank = 1;
	const char *p = text;

	if (!ids)
		return -1;
	while (*p) {
		const char *eol = strchr(p, '\n');

		if (!eol)
			eol = p + strlen(p);
		int blank = 1;

		for (const char *q = p; q < eol; q++)
			blank &= isspace((unsigned char)*q) != 0;
		int skip = prev_blank && is_heading(p, eol);

		prev_blank = blank;
		for (const char *q = p; !skip && q < eol;) {
			char word[MAX_WORD_BYTES];
			size_t len = 0;

			if (!isalpha((unsigned char)*q)) {
				q++;
				continue;
			}
			while (q < eol && isalpha((unsigned char)*q)) {
				if (len < sizeof(word))
					word[len++] = (char)tolower((unsigned char)*q);
				q++;
			}
			if (q + 1 < eol && *q == '\'' && isalpha((unsigned char)q[1]))
				for (q++; q < eol && isalpha((unsigned char)*q); q++)
					;
			long e = dict_intern(d, word, len);

			if (e < 0)
				goto err;
			d->entries[e].count++;
			if (n == cap) {
				uint32_t *b = realloc(ids, 2 * cap * sizeof(*ids));

				if (!b)
					goto err;
				ids = b;
				cap *= 2;
			}
			ids[n++] = (uint32_t)e;
		}
		p = *eol ? eol + 1 : eol;
	}
	*ids_p = ids;
	return (long)n;
err:
	free(ids);
	return -1;
}

static int cmp_entry_ptr(const void *a, const void *b)
{
	const entry_t *x = *(entry_t *const *)a, *y = *(entry_t *const *)b;

	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return strcmp(x->word, y->word);
}

/* Fills the table so that id i appears in proportion to counts[i]^0.75. */
static int build_neg_table(corpus_t *c)
{
	double total = 0, acc = 0;
	size_t i = 0;

	c->neg_table_size = NEG_TABLE_SIZE;
	c->neg_table = malloc(c->neg_table_size * sizeof(*c->neg_table));
	if (!c->neg_table)
		return -1;
	for (size_t w = 0; w < c->vocab_size; w++)
		total += pow((double)c->counts[w], 0.75);
	for (size_t w = 0; w < c->vocab_size; w++) {
		acc += pow((double)c->counts[w], 0.75) / total;
		for (; i < c->neg_table_size && (double)i < acc * (double)c->neg_table_size;
		     i++)
			c->neg_table[i] = (int32_t)w;
	}
	for (; i < c->neg_table_size; i++)
		c->neg_table[i] = (int32_t)c->vocab_size - 1;
	return 0;
}

/* Sorts the dictionary into the vocabulary and maps the raw words to the token stream. */
static int build_vocab(corpus_t *c, dict_t *d, const uint32_t *ids, size_t n_ids,
		       unsigned min_count, double sample, uint64_t seed)
{
	entry_t **order = malloc(d->n_entries * sizeof(*order));
	int32_t *remap = malloc(d->n_entries * sizeof(*remap));
	uint64_t rng = rng_derive(seed, 0x5a3);
	size_t kept = 0;

	if (!order || !remap)
		goto err;
	for (size_t e = 0; e < d->n_entries; e++)
		order[e] = &d->entries[e];
	qsort(order, d->n_entries, sizeof(*order), cmp_entry_ptr);
	while (c->vocab_size < d->n_entries && order[c->vocab_size]->count >= min_count)
		c->vocab_size++;
	c->words = calloc(c->vocab_size ? c->vocab_size : 1, sizeof(*c->words));
	c->counts = calloc(c->vocab_size ? c->vocab_size : 1, sizeof(*c->counts));
	c->tokens = malloc((n_ids ? n_ids : 1) * sizeof(*c->tokens));
	if (!c->words || !c->counts || !c->tokens)
		goto err;
	for (size_t e = 0; e < d->n_entries; e++)
		remap[e] = -1;
	for (size_t w = 0; w < c->vocab_size; w++) {
		remap[order[w] - d->entries] = (int32_t)w;
		c->words[w] = order[w]->word;
		order[w]->word = NULL; /* owned by the corpus now */
		c->counts[w] = order[w]->count;
		kept += c->counts[w];
	}
	for (size_t i = 0; i < n_ids; i++) {
		int32_t w = remap[ids[i]];

		if (w < 0)
			continue;
		if (sample > 0) {
			double f = (double)c->counts[w] / (double)kept;
			double keep = (sqrt(f / sample) + 1) * sample / f;

			if (keep < 1 && rng_uniform(&rng) >= keep)
				continue;
		}
		c->tokens[c->n_tokens++] = w;
	}
	free(order);
	free(remap);
	return 0;
err:
	free(order);
	free(remap);
	return -1;
}

int corpus_load(corpus_t *c, const char *path, unsigned min_count, double sample, uint64_t seed)
{
	dict_t d = {0};
	uint32_t *ids = NULL;
	size_t len;
	char *text = load_text(path, &len);
	int rc = -1;

	memset(c, 0, sizeof(*c));
	if (!text)
		return -1;
	long n = tokenize(&d, text, &ids);

	if (n < 0 ||
	    build_vocab(c, &d, ids, (size_t)n, min_count ? min_count : 1, sample, seed) < 0) {
		fprintf(stderr, "cbow: out of memory while reading the corpus\n");
		goto out;
	}
	c->n_raw_tokens = (size_t)n;
	if (c->vocab_size < 2 || c->n_tokens < 16) {
		fprintf(stderr,
			"cbow: the corpus is too small: %zu words, %zu in the vocabulary "
			"(min count %u)\n",
			c->n_raw_tokens, c->vocab_size, min_count);
		goto out;
	}
	if (build_neg_table(c) < 0) {
		fprintf(stderr, "cbow: out of memory for the negative-sampling table\n");
		goto out;
	}
	rc = 0;
out:
	for (size_t e = 0; e < d.n_entries; e++)
		free(d.entries[e].word);
	free(d.entries);
	free(d.slots);
	free(ids);
	free(text);
	if (rc < 0)
		corpus_free(c);
	return rc;
}

int32_t corpus_lookup(const corpus_t *c, const char *word)
{
	/* Used a handful of times at the end of a run: a linear scan is enough. */
	for (size_t w = 0; w < c->vocab_size; w++)
		if (strcmp(c->words[w], word) == 0)
			return (int32_t)w;
	return -1;
}

void corpus_free(corpus_t *c)
{
	if (c->words)
		for (size_t w = 0; w < c->vocab_size; w++)
			free(c->words[w]);
	free(c->words);
	free(c->counts);
	free(c->tokens);
	free(c->neg_table);
	memset(c, 0, sizeof(*c));
}
