/* agree.c: see agree.h. */
#include "world/agree.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "ctl/tensor.h"
#include "world/world_int.h"

enum {
	F_COO,
	F_COO_AREA,
	F_LOSSY,
	F_SPARSIFIER,
	F_DENSITY,
	F_THRESHOLD,
	F_ROWS,
	F_COLS,
	F_SCHEME,
	F_BLOCK,
	F_SHAPE,
	F_COUNT
};

static const char *const field_names[F_COUNT] = {"input (dense or COO)",
						 "COO area (coo_capacity)",
						 "allow_lossy",
						 "sparsifier",
						 "density",
						 "threshold",
						 "sketch rows",
						 "sketch columns",
						 "pinned scheme",
						 "block (S2 bitmap, block top-K)",
						 "shape"};

static const char *const sparsifier_names[] = {"none",	 "topk",    "threshold", "dgc",
					       "exdyna", "natural", "block_topk"};

void scd_tsig_of(const scd_ntensor_t *nt, scd_tsig_t *s)
{
	memset(s, 0, sizeof(*s));
	s->flags = (nt->coo ? SCD_TSIG_COO : 0) |
		   (nt->opts.coo_capacity > 0 ? SCD_TSIG_COO_AREA : 0) |
		   (nt->opts.allow_lossy ? SCD_TSIG_LOSSY : 0);
	s->sparsifier = nt->opts.sparsifier;
	s->density = nt->opts.density;
	s->threshold = nt->opts.threshold;
	s->sketch_rows = nt->opts.sketch_rows;
	s->sketch_cols = nt->opts.sketch_cols;
	s->block = nt->opts.block;
	snprintf(s->scheme, sizeof(s->scheme), "%s", nt->opts.scheme);
	s->shape = nt->shape;
}

int scd_tsig_diff(const scd_tsig_t *a, const scd_tsig_t *b)
{
	static const uint32_t bit[3] = {SCD_TSIG_COO, SCD_TSIG_COO_AREA, SCD_TSIG_LOSSY};
	for (int f = F_COO; f <= F_LOSSY; f++)
		if ((a->flags ^ b->flags) & bit[f])
			return f;
	if (a->sparsifier != b->sparsifier)
		return F_SPARSIFIER;
	/* compared as bits: the same option gives the same double on every rank */
	if (memcmp(&a->density, &b->density, sizeof(double)))
		return F_DENSITY;
	if (memcmp(&a->threshold, &b->threshold, sizeof(double)))
		return F_THRESHOLD;
	if (a->sketch_rows != b->sketch_rows)
		return F_ROWS;
	if (memcmp(&a->sketch_cols, &b->sketch_cols, sizeof(double)))
		return F_COLS;
	if (strncmp(a->scheme, b->scheme, sizeof(a->scheme)))
		return F_SCHEME;
	if (a->block != b->block)
		return F_BLOCK;
	if (!scd_shape_equal(&a->shape, &b->shape))
		return F_SHAPE;
	return -1;
}

int scd_tsig_equal(const scd_tsig_t *a, const scd_tsig_t *b)
{
	return scd_tsig_diff(a, b) < 0;
}

void scd_tsig_to_msg(const scd_tsig_t *s, Sparsecomm__TensorSig *m)
{
	sparsecomm__tensor_sig__init(m);
	m->coo = !!(s->flags & SCD_TSIG_COO);
	m->coo_area = !!(s->flags & SCD_TSIG_COO_AREA);
	m->allow_lossy = !!(s->flags & SCD_TSIG_LOSSY);
	m->sparsifier = s->sparsifier;
	m->density = s->density;
	m->threshold = s->threshold;
	m->sketch_rows = s->sketch_rows;
	m->sketch_cols = s->sketch_cols;
	m->block = s->block;
	m->scheme = (char *)s->scheme;
	m->ndim = s->shape.ndim;
	m->n_dims = scd_shape_kept(&s->shape);
	m->dims = (uint64_t *)s->shape.dim;
}

void scd_tsig_from_msg(const Sparsecomm__TensorSig *m, scd_tsig_t *s)
{
	memset(s, 0, sizeof(*s));
	if (!m)
		return;
	s->flags = (m->coo ? SCD_TSIG_COO : 0) | (m->coo_area ? SCD_TSIG_COO_AREA : 0) |
		   (m->allow_lossy ? SCD_TSIG_LOSSY : 0);
	s->sparsifier = m->sparsifier;
	s->density = m->density;
	s->threshold = m->threshold;
	s->sketch_rows = m->sketch_rows;
	s->sketch_cols = m->sketch_cols;
	s->block = m->block;
	snprintf(s->scheme, sizeof(s->scheme), "%s", m->scheme ? m->scheme : "");
	scd_shape_from_kept(&s->shape, m->ndim, m->dims, m->n_dims);
}

const char *scd_tsig_field_name(int f)
{
	return f >= 0 && f < F_COUNT ? field_names[f] : "?";
}

void scd_tsig_field_text(const scd_tsig_t *s, int f, uint64_t numel, char *buf, size_t len)
{
	switch (f) {
	case F_COO:
		snprintf(buf, len, "%s", s->flags & SCD_TSIG_COO ? "COO" : "dense");
		break;
	case F_COO_AREA:
		snprintf(buf, len, "%s", s->flags & SCD_TSIG_COO_AREA ? "one" : "none");
		break;
	case F_LOSSY:
		snprintf(buf, len, "%s", s->flags & SCD_TSIG_LOSSY ? "true" : "false");
		break;
	case F_SPARSIFIER:
		if (s->sparsifier < sizeof(sparsifier_names) / sizeof(*sparsifier_names))
			snprintf(buf, len, "%s", sparsifier_names[s->sparsifier]);
		else
			snprintf(buf, len, "%u", s->sparsifier);
		break;
	case F_DENSITY:
		snprintf(buf, len, "%.17g", s->density);
		break;
	case F_THRESHOLD:
		snprintf(buf, len, "%.17g", s->threshold);
		break;
	case F_ROWS:
		snprintf(buf, len, "%u", s->sketch_rows);
		break;
	case F_COLS:
		snprintf(buf, len, "%.17g", s->sketch_cols);
		break;
	case F_SCHEME:
		snprintf(buf, len, "'%.31s'", s->scheme);
		break;
	case F_BLOCK:
		snprintf(buf, len, "%u", s->block);
		break;
	case F_SHAPE:
		scd_shape_text(&s->shape, numel, buf, len);
		break;
	default:
		snprintf(buf, len, "?");
	}
}

/* Appends to buf (len bytes, *n of them used), truncating at its end. */
__attribute__((format(printf, 4, 5))) static void put(char *buf, size_t len, size_t *n,
						      const char *fmt, ...)
{
	if (*n + 1 >= len)
		return;
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(buf + *n, len - *n, fmt, ap);
	va_end(ap);
	if (k > 0)
		*n = *n + (size_t)k < len - 1 ? *n + (size_t)k : len - 1;
}

/* A submission's element count (0: an empty tensor's stand-in), then its shape when one
 * of more than one dimension, or an empty one, was given: "6 [2, 3]". */
static void count_text(const scd_shape_t *s, uint64_t numel, char *val, size_t len)
{
	int empty = scd_shape_empty(s);
	int n = snprintf(val, len, "%llu", empty ? 0ull : (unsigned long long)numel);
	if (s->ndim && n > 0 && (size_t)n + 1 < len) {
		val[n] = ' ';
		scd_shape_text(s, numel, val + n + 1, len - (size_t)n - 1);
	}
}

/* Rank r's value of the attribute kind (field: the signature's) as text. */
static void value_text(const scd_centry_t *e, int kind, int field, int r, char *val, size_t len)
{
	if (kind == 0) /* the count of the shape given too, as Horovod names shapes */
		count_text(&e->sig[r].shape, e->numel[r], val, len);
	else if (kind == 1)
		snprintf(val, len, "%s", scd_tw_values_name(e->dtype[r]));
	else if (kind == 3)
		snprintf(val, len, "%s", sc_wire_name(scd_tw_wire(e->dtype[r])));
	else if (kind == 4)
		scd_tsig_field_text(&e->sig[r], field, e->numel[r], val, len);
	else
		scd_coll_describe_word(e->op[r], val, len);
}

int scd_agree_describe(const scd_world_t *w, const scd_centry_t *e, char *buf, size_t len)
{
	int P = w->d->world_size;
	const char *who = w->d->local_size == 1 ? "rank" : "node";
	const char *what = NULL;
	int kind = -1, field = -1;
	for (int r = 1; r < P && kind < 0; r++) {
		if (e->numel[r] != e->numel[0])
			kind = 0, what = "element count";
		else if (scd_tw_values(e->dtype[r]) != scd_tw_values(e->dtype[0]))
			kind = 1, what = "dtype";
		else if (e->dtype[r] != e->dtype[0])
			kind = 3, what = "wire format";
		else if (e->op[r] != e->op[0])
			kind = 2, what = "operation";
		else if ((field = scd_tsig_diff(&e->sig[r], &e->sig[0])) >= 0)
			kind = 4, what = scd_tsig_field_name(field);
	}
	if (kind < 0)
		return 0;
	size_t n = 0;
	/* the operation's name, unless that is what differs */
	put(buf, len, &n, "%s%stensor '%s' failed: %s differs across ranks:",
	    kind == 2 ? "" : scd_centry_coll_name(e, P), kind == 2 ? "" : " of ", e->name,
	    what);
	/* each value once, with the ranks that have it ("ranks 0, 2-5 have 1000; rank 1 has
	 * 1001"), so that every value shows whatever the world's size */
	char(*val)[96] = malloc(sizeof(*val) * (size_t)P);
	unsigned char *mark = calloc((size_t)P, 1); /* 1: listed, 2: this value's */
	if (!val || !mark) {
		put(buf, len, &n, " (out of memory listing the ranks)");
		free(val);
		free(mark);
		return 1;
	}
	for (int r = 0; r < P; r++) {
		value_text(e, kind, field, r, val[r], sizeof(val[r]));
		if (e->have && e->have[r] == SCD_HAVE_OUTSIDE) /* not in its process set */
			mark[r] = 1;
	}
	for (int r = 0, groups = 0; r < P; r++) {
		if (mark[r])
			continue;
		int count = 0;
		for (int q = r; q < P; q++)
			if (!mark[q] && !strcmp(val[q], val[r]))
				mark[q] = 2, count++;
		put(buf, len, &n, "%s %s%s", groups++ ? ";" : "", who, count > 1 ? "s" : "");
		for (int q = r, first = 1; q < P; q++) {
			if (mark[q] != 2)
				continue;
			int end = q;
			while (end + 1 < P && mark[end + 1] == 2)
				end++;
			if (end - q < 2) /* a run of three or more is written as one */
				end = q;
			if (end > q)
				put(buf, len, &n, "%s %d-%d", first ? "" : ",", q, end);
			else
				put(buf, len, &n, "%s %d", first ? "" : ",", q);
			for (int k = q; k <= end; k++)
				mark[k] = 1;
			q = end;
			first = 0;
		}
		put(buf, len, &n, " %s %s", count > 1 ? "have" : "has", val[r]);
	}
	free(val);
	free(mark);
	return 1;
}
