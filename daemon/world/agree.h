/*
 * agree.h: what negotiation makes every rank agree on about one submission of a tensor
 * (docs/design.md, "Errors"). The coordinator compares, rank by rank, the tensor's name,
 * its type word (dtype and wire format), its element count and its operation word (with a
 * reduce-scatter's rows, a broadcast's root), and the signature below: everything else a
 * buffer's scheme or its bytes on the wire depend on. A difference fails the tensor on
 * every rank with SC_ERR_MISMATCH naming the field and each rank's value, before any byte
 * moves; the job then takes its items' options from the agreed cache entry, never from
 * the node's own registration, so a node that takes part with zeros (its tensor gone, or
 * its trainers joined) runs the same scheme as the others.
 */
#ifndef SCD_WORLD_AGREE_H
#define SCD_WORLD_AGREE_H

#include <stddef.h>
#include <stdint.h>

#include "sparsecomm.pb-c.h"
#include "util/shape.h"

struct scd_ntensor;
struct scd_world;
struct scd_centry;

#define SCD_TSIG_COO	  1u /* this submission's input is the COO area */
#define SCD_TSIG_COO_AREA 2u /* registered with a COO area */
#define SCD_TSIG_LOSSY	  4u /* allow_lossy */

typedef struct scd_tsig {
	uint32_t flags; /* SCD_TSIG_* */
	uint32_t sparsifier;
	double density, threshold;
	uint32_t sketch_rows;
	double sketch_cols;
	uint32_t block; /* S2's bitmap block, block top-K's (0: the default) */
	char scheme[32];
	scd_shape_t shape; /* the submission's shape (sc_tensor_set_shape) */
} scd_tsig_t;

/* The signature of nt's submission in progress (its options and its input's form). */
void scd_tsig_of(const struct scd_ntensor *nt, scd_tsig_t *s);
int scd_tsig_equal(const scd_tsig_t *a, const scd_tsig_t *b);
/* The message form (m's scheme points into s) and back (a NULL message reads as the
 * signature of a dense tensor with default options). */
void scd_tsig_to_msg(const scd_tsig_t *s, Sparsecomm__TensorSig *m);
void scd_tsig_from_msg(const Sparsecomm__TensorSig *m, scd_tsig_t *s);

/* The first field in which a and b differ, or -1 (the same). */
int scd_tsig_diff(const scd_tsig_t *a, const scd_tsig_t *b);
/* The name of field f of scd_tsig_diff, and s's value of it as text (numel: the tensor's
 * element count, which a shape of one dimension is). */
const char *scd_tsig_field_name(int f);
void scd_tsig_field_text(const scd_tsig_t *s, int f, uint64_t numel, char *buf, size_t len);

/* How the ranks of entry e (the coordinator's, world_int.h) disagree: the first attribute
 * in which a rank differs from rank 0 (count, dtype, wire, operation, then the signature's
 * fields in order), with every rank's value, into buf; 0 when they agree. */
int scd_agree_describe(const struct scd_world *w, const struct scd_centry *e, char *buf,
		       size_t len);

#endif
