/*
 * test_pset.c: process sets' qualified names (util/psname.h) and the node's set table
 * (ctl/pset.h).
 */
#include <string.h>

#include "ctl/pset.h"
#include "unit.h"
#include "util/psname.h"

/* A name within its set: the global set's is the name itself; another set's carries the
 * id after the separator, and reads back; names of two sets differ. */
UNIT_TEST(pset_key_roundtrip)
{
	char a[64], b[64];
	size_t len;
	CHECK_EQ_INT(scd_pset_key("grad.w", 0, a, sizeof(a)), SC_OK);
	CHECK_TRUE(!strcmp(a, "grad.w"));
	CHECK_EQ_INT(scd_pset_of(a, &len), 0);
	CHECK_EQ_INT(len, 6);
	CHECK_EQ_INT(scd_pset_key("grad.w", 17, b, sizeof(b)), SC_OK);
	CHECK_TRUE(strcmp(a, b) != 0);
	CHECK_EQ_INT(scd_pset_of(b, &len), 17);
	CHECK_EQ_INT(len, 6);
	CHECK_EQ_INT(scd_pset_key("grad.w", 17, b, 8), SC_ERR_LIMIT);
}

/* Text leaving the daemon shows every qualified name for people, and a buffer too small
 * is cut, never overrun. */
UNIT_TEST(pset_show_text)
{
	char key[32], text[200];
	scd_pset_key("w", 3, key, sizeof(key));
	snprintf(text, sizeof(text), "tensor '%s' and '%s' failed", key, key);
	scd_pset_show(text, sizeof(text));
	CHECK_MSG(!strcmp(text, "tensor 'w [process set 3]' and 'w [process set 3]' failed"),
		  "shown as: %s", text);
	char small[16];
	strcpy(small, "'w\x1f"
		      "3' x"); /* shown, it needs more than 16 bytes */
	scd_pset_show(small, sizeof(small));
	CHECK_TRUE(strlen(small) < sizeof(small));
	CHECK_TRUE(!strchr(small, SCD_PSET_SEP));
	CHECK_TRUE(!strncmp(small, "'w [process", 11));
}

/* Node 1 of 2-trainer nodes: {0, 3, 5} has its local trainer 1 (rank 3), nodes 0, 1, 2; a
 * repeat is accepted, other ranks for the id are not, nor are unsorted or out-of-range
 * ranks; removal forgets it. */
UNIT_TEST(pset_table)
{
	scd_psets_t t;
	scd_psets_init(&t, 1, 2);
	char err[200];
	const int32_t r[] = {0, 3, 5};
	CHECK_EQ_INT(scd_psets_define(&t, 4, r, 3, 6, err, sizeof(err)), SC_OK);
	const scd_pset_t *p = scd_psets_find(&t, 4);
	CHECK_TRUE(p != NULL);
	CHECK_EQ_INT(p->n_nodes, 3);
	CHECK_EQ_INT(p->nodes[0], 0);
	CHECK_EQ_INT(p->nodes[2], 2);
	CHECK_EQ_INT(p->n_local, 1);
	CHECK_EQ_INT((int)p->local_mask, 2);
	CHECK_TRUE(scd_pset_member(p, 5) && !scd_pset_member(p, 2));
	CHECK_TRUE(scd_pset_member(NULL, 2)); /* the global set */
	CHECK_EQ_INT(scd_psets_define(&t, 4, r, 3, 6, err, sizeof(err)), SC_OK);
	const int32_t other[] = {0, 3};
	CHECK_EQ_INT(scd_psets_define(&t, 4, other, 2, 6, err, sizeof(err)), SC_ERR_MISMATCH);
	const int32_t unsorted[] = {3, 0};
	CHECK_EQ_INT(scd_psets_define(&t, 5, unsorted, 2, 6, err, sizeof(err)), SC_ERR_INVALID);
	const int32_t far[] = {0, 6};
	CHECK_EQ_INT(scd_psets_define(&t, 5, far, 2, 6, err, sizeof(err)), SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "6") != NULL, "%s", err);
	CHECK_EQ_INT(scd_psets_define(&t, 0, r, 3, 6, err, sizeof(err)), SC_ERR_INVALID);
	CHECK_TRUE(scd_psets_find(&t, 0) == NULL);
	scd_psets_remove(&t, 4);
	CHECK_TRUE(scd_psets_find(&t, 4) == NULL);
	scd_psets_free(&t);
}
