/*
 * coll.c: the table of the collectives' descriptors (coll.h), and negotiation's words of
 * them, each packed and unpacked by its own descriptor.
 */
#include "coll/coll.h"

static const scd_coll_desc_t *const colls[SCD_COLL_COUNT] = {
#define SCD_COLL_ENTRY_(K, n) [SCD_COLL_##K] = &scd_coll_##n,
    SCD_COLLS(SCD_COLL_ENTRY_)
#undef SCD_COLL_ENTRY_
};

const scd_coll_desc_t *scd_coll_desc(scd_coll_kind_t kind)
{
	return colls[(unsigned)kind < SCD_COLL_COUNT ? kind : SCD_COLL_ALLREDUCE];
}

uint32_t scd_coll_pack(const scd_coll_t *c)
{
	return scd_coll_desc(c->kind)->pack(c);
}

/* The allreduce's words are the small ones: every other kind is asked first. */
int scd_coll_unpack(uint32_t word, scd_coll_t *c_p)
{
	for (int k = SCD_COLL_COUNT - 1; k >= 0; k--) {
		scd_coll_t c = {.kind = (scd_coll_kind_t)k};
		if (colls[k]->unpack(word, &c)) {
			*c_p = c;
			return 1;
		}
	}
	return 0;
}

const char *scd_coll_word_name(uint32_t word)
{
	scd_coll_t c;
	return scd_coll_unpack(word, &c) ? scd_coll_name(&c) : "operation";
}

int scd_coll_word_valid(uint32_t word, uint32_t trainers)
{
	scd_coll_t c;
	char err[256];
	if (!scd_coll_unpack(word, &c))
		return 0;
	/* its own arguments as a trainer's request of them would be checked (a reduce-scatter's
	 * row divides a tensor of one row) */
	scd_coll_req_t rq = {.coll = c,
			     .tensor = "?",
			     .numel = c.row ? c.row : 1,
			     .count = c.row,
			     .trainers = trainers};
	return scd_coll_desc(c.kind)->check(&rq, err, sizeof(err)) == SC_OK;
}

const char *scd_coll_describe(const scd_coll_t *c, char *buf, size_t len)
{
	scd_coll_desc(c->kind)->describe(c, buf, len);
	return buf;
}

const char *scd_coll_describe_word(uint32_t word, char *buf, size_t len)
{
	scd_coll_t c;
	if (!scd_coll_unpack(word, &c)) {
		snprintf(buf, len, "operation 0x%x", word);
		return buf;
	}
	return scd_coll_describe(&c, buf, len);
}

sc_status_t scd_coll_dense_check(const scd_coll_req_t *rq, char *err, size_t len)
{
	char name[64];
	if (!rq->coo && !rq->sparsifier)
		return SC_OK;
	snprintf(
	    err, len,
	    "tensor '%s': %s is a dense operation: a tensor with a sparsifier or COO input "
	    "takes sum and average only",
	    rq->tensor, scd_coll_describe(&rq->coll, name, sizeof(name)));
	return SC_ERR_UNSUPPORTED;
}

sc_status_t scd_coll_pset_check(scd_coll_kind_t kind, uint32_t pset, const char *tensor,
				char *err, size_t len)
{
	const scd_coll_desc_t *c = scd_coll_desc(kind);
	if (!pset || c->psets)
		return SC_OK;
	snprintf(err, len,
		 "%s of tensor '%s' in process set %u is not supported (the global set runs "
		 "every collective)",
		 c->name, tensor ? tensor : "?", pset);
	return SC_ERR_UNSUPPORTED;
}
