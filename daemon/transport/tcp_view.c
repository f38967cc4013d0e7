/*
 * tcp_view.c: a view of the tcp mesh for a process set (docs/design.md, "Process sets: the
 * data plane"). A view is an scd_tcp_t of its own whose rank is this rank's index in the
 * set's ranks and whose size is theirs, so that every operation of the backend (exchange,
 * exchange_v, the ring allreduce of every dtype and op, the 16-bit wire, the probe) runs
 * on it unchanged among the set's ranks only. Its connections and their record layers are
 * the parent's for those ranks, shared and not owned (destroying a view closes nothing);
 * its scratch, its poll and progress arrays and its byte counters are its own, so its
 * counters count its traffic only.
 *
 * Both share the byte streams, so a failure on either leaves both out of step: a view
 * marks its parent failed with its own text when it fails, takes the parent's failure at
 * the start of each operation (scd_tcp_begin), and the peers either sees close stay gone
 * for the other. A peer that goes away (peer_gone) is shut down on the parent's socket,
 * which is the view's, so a view waiting on it wakes as the parent would.
 */
#include "transport/tcp_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "transport/transport_internal.h"
#include "util/log.h"

sc_status_t scd_tcp_begin(scd_tcp_t *t)
{
	scd_tcp_t *p = t->parent;
	if (p && p->failed && !t->failed) {
		t->failed = p->failed;
		memcpy(t->failed_text, p->failed_text, sizeof(t->failed_text));
	}
	for (int q = 0; p && q < t->base.size; q++)
		if (q != t->base.rank && p->gone[t->names[q]] && !t->gone[q]) {
			t->gone[q] = 1;
			if (t->suspect < 0)
				t->suspect = q;
		}
	return t->failed ? scd_tcp_failed_again(t) : SC_OK;
}

void scd_tcp_view_failed(scd_tcp_t *t)
{
	scd_tcp_t *p = t->parent;
	if (p->failed)
		return;
	p->failed = t->failed;
	snprintf(p->failed_text, sizeof(p->failed_text), "%s", t->failed_text);
}

void scd_tcp_view_gone(scd_tcp_t *t, int q)
{
	scd_tcp_t *p = t->parent;
	int r = t->names[q];
	p->gone[r] = 1;
	if (p->suspect < 0)
		p->suspect = r;
}

/* Whether ranks[0..n) ascend within [0, size) and hold me. */
static int ranks_valid(const int *ranks, int n, int size, int me)
{
	int mine = 0;
	for (int i = 0; i < n; i++) {
		if (ranks[i] < 0 || ranks[i] >= size || (i && ranks[i] <= ranks[i - 1]))
			return 0;
		mine |= ranks[i] == me;
	}
	return mine;
}

/*
 * See transport.h (subgroup). ranks are tr's ranks; a view of a view is a view of the mesh
 * (its ranks mapped through). Reads only what the parent never changes after creation
 * (its sockets, records, size and scratch size), so it may run beside an operation of the
 * parent on another thread; the parent's failure and gone peers are taken at each
 * operation instead.
 */
sc_status_t scd_tcp_subgroup(scd_transport_t *tr, const int *ranks, int n,
			     scd_transport_t **view_p)
{
	scd_tcp_t *t = (scd_tcp_t *)tr;
	scd_tcp_t *root = t->parent ? t->parent : t;
	if (n < 1 || n > tr->size || !ranks || !ranks_valid(ranks, n, tr->size, tr->rank)) {
		scd_transport_set_error("tcp: a view of %d ranks that do not ascend within the "
					"%d ranks or do not hold this rank (%d)",
					n, tr->size, tr->rank);
		return SC_ERR_INVALID;
	}
	scd_tcp_t *v = calloc(1, sizeof(*v));
	if (!v)
		goto err_nomem;
	v->base.ops = tr->ops; /* its destroy frees what is made so far */
	v->parent = root;
	v->world_id = root->world_id;
	v->protect = root->protect;
	v->suspect = -1;
	v->fds = malloc(sizeof(int) * (size_t)n);
	v->seal = calloc((size_t)n, sizeof(*v->seal));
	v->names = malloc(sizeof(int) * (size_t)n);
	v->pfds = calloc((size_t)n, sizeof(*v->pfds));
	v->pfd_peer = calloc((size_t)n, sizeof(int));
	v->io = calloc((size_t)n, sizeof(*v->io));
	v->gone = calloc((size_t)n, 1);
	v->listed = calloc((size_t)n, 1);
	if (!v->fds || !v->seal || !v->names || !v->pfds || !v->pfd_peer || !v->io ||
	    !v->gone || !v->listed)
		goto err_free;
	for (int i = 0; i < n; i++) {
		int r = scd_tcp_name(t, ranks[i]); /* the mesh's rank */
		v->names[i] = r;
		v->fds[i] = root->fds[r];
		v->seal[i] = root->seal[r];
		if (ranks[i] == tr->rank)
			v->base.rank = i;
	}
	v->base.size = n;
	v->scratch_bytes = root->scratch_bytes;
	void *m = mmap(NULL, v->scratch_bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (m == MAP_FAILED) {
		scd_transport_set_error("tcp: cannot map %zu bytes of scratch for a view: %s",
					v->scratch_bytes, strerror(errno));
		v->scratch = NULL;
		scd_transport_destroy(&v->base);
		return SC_ERR_NOMEM;
	}
	v->scratch = m;
	scd_debug(SCD_SUB_TRANSPORT, "rank %d: a view of %d ranks (its rank %d)",
		  root->base.rank, n, v->base.rank);
	*view_p = &v->base;
	return SC_OK;
err_free:
	scd_transport_destroy(&v->base);
err_nomem:
	scd_transport_set_error("tcp: out of memory for a view of %d ranks", n);
	return SC_ERR_NOMEM;
}
