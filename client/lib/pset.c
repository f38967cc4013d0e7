/*
 * pset.c: process sets (sparsecomm.h, "Process sets"). Adding or removing a set is a
 * collective of every trainer of the job, in three steps:
 *   1. the trainers agree: each contributes what it was asked ({op, id, n, ranks as given};
 *      an addition's id is the trainer's count of additions plus one) to an allgather over
 *      the global set, and every trainer checks every contribution the same way, so an
 *      invalid or a differing request fails on every trainer alike, naming the trainers;
 *   2. each trainer tells its node's daemon the agreed set (its id: the job's count of
 *      additions, the same on every trainer), which records it (daemon/ctl/pset.h);
 *   3. a barrier: once it completes, every daemon knows the set, so no announcement of the
 *      set's tensors can reach a daemon before the set does.
 * The client keeps its own table for sc_process_set_size/rank/ranks and to check a
 * registration before sending it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* PS_BAD: an add this trainer's arguments refuse (a NULL pointer); it still takes part in
 * the agreement, so that every trainer fails alike and their counts of set calls (the
 * agreement's tensor names) stay in step. */
enum { PS_ADD = 1, PS_REMOVE = 2, PS_BAD = 3 };

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* The client's set of that id (NULL: none); with c->mu held. */
static struct scl_pset *pset_find(const sc_client_t *c, int id)
{
	for (int i = 0; i < c->n_psets; i++)
		if (c->psets[i].id == id)
			return &c->psets[i];
	return NULL;
}

/* Writes at most cap ranks of list (n of them) as "0, 2, 5" into buf. */
static void ranks_text(const int32_t *list, int n, char *buf, size_t cap)
{
	int k = 0;
	buf[0] = 0;
	for (int i = 0; i < n && (size_t)k < cap - 16; i++)
		k += snprintf(buf + k, cap - (size_t)k, "%s%d", i ? ", " : "", list[i]);
	if (n && (size_t)k >= cap - 16)
		snprintf(buf + k, cap - (size_t)k, ", ...");
}

/* One trainer's contribution, parsed: op, count, its ranks (sorted copy). */
typedef struct {
	int op, id, n;
	const int32_t *given;
	int32_t *sorted;
} ps_vote_t;

/* Why a request is invalid (text into why), or 0 when it is valid. */
static int vote_invalid(const sc_client_t *c, const ps_vote_t *v, char *why, size_t len)
{
	if (v->op == PS_REMOVE) {
		int id = v->id;
		pthread_mutex_lock((pthread_mutex_t *)&c->mu);
		int known = id > 0 && pset_find(c, id);
		pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
		if (id == SC_PROCESS_SET_GLOBAL)
			snprintf(why, len, "the global process set (0) cannot be removed");
		else if (!known)
			snprintf(why, len, "process set %d is not defined", id);
		return !known;
	}
	if (v->op == PS_BAD) {
		snprintf(why, len, "a set with a NULL argument (ranks or id_p)");
		return 1;
	}
	if (v->n < 1 || v->n > c->size) {
		snprintf(why, len, "%d ranks (a set has 1 to %d)", v->n, c->size);
		return 1;
	}
	for (int i = 0; i < v->n; i++) {
		if (v->sorted[i] < 0 || v->sorted[i] >= c->size) {
			snprintf(why, len, "rank %d is out of range (0 to %d)", v->sorted[i],
				 c->size - 1);
			return 1;
		}
		if (i && v->sorted[i] == v->sorted[i - 1]) {
			snprintf(why, len, "rank %d is given twice", v->sorted[i]);
			return 1;
		}
	}
	return 0;
}

static int votes_differ(const ps_vote_t *a, const ps_vote_t *b)
{
	return a->op != b->op || a->id != b->id || a->n != b->n ||
	       memcmp(a->sorted, b->sorted, sizeof(int32_t) * (size_t)a->n);
}

/* Parses the allgathered contributions (total int32 values at buf) into votes[size]. */
static sc_status_t votes_parse(const sc_client_t *c, int32_t *buf, size_t total,
			       ps_vote_t *votes, const char *what)
{
	size_t off = 0;
	for (int r = 0; r < c->size; r++) {
		if (off + 3 > total)
			return scl_error(SC_ERR_PROTOCOL, "%s: rank %d's request is missing",
					 what, r);
		ps_vote_t *v = &votes[r];
		v->op = buf[off];
		v->id = buf[off + 1];
		v->n = buf[off + 2];
		size_t m = v->n > 0 && v->n <= c->size ? (size_t)v->n : 0;
		if (off + 3 + m > total)
			return scl_error(SC_ERR_PROTOCOL, "%s: rank %d's request is cut short",
					 what, r);
		v->given = buf + off + 3;
		v->sorted = malloc(sizeof(int32_t) * (m + 1));
		if (!v->sorted)
			return scl_error(SC_ERR_NOMEM, "%s: out of memory", what);
		memcpy(v->sorted, v->given, sizeof(int32_t) * m);
		if (v->op == PS_ADD)
			qsort(v->sorted, m, sizeof(int32_t), cmp_int);
		off += 3 + m;
	}
	return SC_OK;
}

/* Step 1: every trainer's request, gathered; SC_OK when they are valid and alike, else the
 * same error on every trainer. votes[size] are filled (their sorted copies freed by the
 * caller). */
static sc_status_t agree(sc_client_t *c, int op, int id, const int *ranks, int n,
			 int timeout_ms, ps_vote_t *votes, const char *what)
{
	char name[64];
	pthread_mutex_lock(&c->mu);
	uint64_t call = ++c->pset_calls;
	pthread_mutex_unlock(&c->mu);
	snprintf(name, sizeof(name), "sparsecomm.process_set.%llu", (unsigned long long)call);
	size_t per = (size_t)c->size + 3;
	sc_tensor_t *t = NULL;
	sc_status_t st = sc_register(c, name, SC_INT32, per * (size_t)c->size, &t);
	if (st != SC_OK)
		return st;
	int32_t *buf = sc_tensor_data(t);
	size_t m = n > 0 && n <= c->size ? (size_t)n : 0;
	buf[0] = op;
	buf[1] = id;
	buf[2] = n;
	for (size_t i = 0; i < m; i++)
		buf[3 + i] = ranks[i];
	sc_handle_t h = 0;
	st = sc_allgather_async(c, t, 3 + m, &h);
	if (st == SC_OK)
		st = sc_wait(c, h, timeout_ms);
	if (st == SC_ERR_TIMEOUT) {
		/* the agreement stays in flight: its handle is given up (freed when it ends)
		 * and its buffer, which a release now would refuse (in flight), is released
		 * by the first registration after it ended (scl_pset_sweep; past
		 * SCL_PSET_LEFT such buffers at once, at sc_finalize) */
		sc_abandon(c, h);
		pthread_mutex_lock(&c->mu);
		if (c->n_pset_left < SCL_PSET_LEFT) { /* read unlocked by scl_pset_sweep */
			c->pset_left[c->n_pset_left] = t;
			__atomic_store_n(&c->n_pset_left, c->n_pset_left + 1, __ATOMIC_RELAXED);
		}
		pthread_mutex_unlock(&c->mu);
		return scl_error(SC_ERR_TIMEOUT,
				 "%s: not every trainer of the job called it within %d ms "
				 "(the agreement through tensor '%s' is still in flight)",
				 what, timeout_ms, name);
	}
	if (st == SC_OK)
		st = votes_parse(c, buf, sc_tensor_result_nnz(t), votes, what);
	if (st != SC_OK) {
		char text[SCL_ERR_MAX];
		snprintf(text, sizeof(text), "%s", sc_last_error());
		sc_tensor_release(c, t);
		return scl_error(st, "%s", text);
	}
	char why[200], a[160], b[160];
	for (int r = 0; r < c->size; r++)
		if (vote_invalid(c, &votes[r], why, sizeof(why))) {
			st = scl_error(SC_ERR_INVALID, "%s: rank %d's request is refused: %s",
				       what, r, why);
			goto out;
		}
	for (int r = 1; r < c->size; r++)
		if (votes_differ(&votes[r], &votes[0])) {
			ranks_text(votes[0].sorted, votes[0].n, a, sizeof(a));
			ranks_text(votes[r].sorted, votes[r].n, b, sizeof(b));
			st = scl_error(
			    SC_ERR_MISMATCH,
			    "%s: the ranks disagree: rank 0 asked to %s set %d [%s], rank "
			    "%d to %s set %d [%s]",
			    what, votes[0].op == PS_ADD ? "add" : "remove", votes[0].id, a, r,
			    votes[r].op == PS_ADD ? "add" : "remove", votes[r].id, b);
			goto out;
		}
out:
	sc_tensor_release(c, t);
	return st;
}

void scl_pset_sweep(sc_client_t *c)
{
	if (!__atomic_load_n(&c->n_pset_left, __ATOMIC_RELAXED))
		return;
	for (;;) {
		struct sc_tensor *ended = NULL;
		pthread_mutex_lock(&c->mu);
		for (int i = 0; i < c->n_pset_left && !ended; i++)
			if (scl_op_settle(c, c->pset_left[i])) { /* its word read too */
				ended = c->pset_left[i];
				c->pset_left[i] = c->pset_left[c->n_pset_left - 1];
				__atomic_store_n(&c->n_pset_left, c->n_pset_left - 1,
						 __ATOMIC_RELAXED);
			}
		pthread_mutex_unlock(&c->mu);
		if (!ended)
			return;
		sc_tensor_release(c, ended);
	}
}

static void votes_free(ps_vote_t *votes, int n)
{
	for (int i = 0; votes && i < n; i++)
		free(votes[i].sorted);
	free(votes);
}

/* Step 3: every trainer waits for every other's daemon to know the set, whatever happened
 * here (the others count on this trainer's barrier); st, what happened, is kept. */
static sc_status_t barrier_after(sc_client_t *c, sc_status_t st, int timeout_ms)
{
	char text[SCL_ERR_MAX];
	snprintf(text, sizeof(text), "%s", st != SC_OK ? sc_last_error() : "");
	sc_status_t bst = sc_barrier(c, timeout_ms);
	if (st != SC_OK)
		return scl_error(st, "%s", text);
	return bst;
}

/* Steps 2 and 3: the daemon learns the set (or forgets it), then every trainer waits for
 * every other's daemon to have done the same. */
static sc_status_t tell_daemon(sc_client_t *c, int id, const int32_t *ranks, int n, int remove,
			       int timeout_ms, const char *what)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__ProcessSet ps = SPARSECOMM__PROCESS_SET__INIT;
	ps.id = (uint32_t)id;
	ps.ranks = (int32_t *)ranks;
	ps.n_ranks = (size_t)n;
	ps.remove = remove;
	msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_PROCESS_SET;
	msg.process_set = &ps;
	return barrier_after(c, scl_client_call_ok(c, &msg, what), timeout_ms);
}

static sc_status_t pset_add(sc_client_t *client, const int *ranks, int n_ranks, int timeout_ms,
			    int *id_p)
{
	if (!client)
		return scl_error(SC_ERR_INVALID, "sc_process_set_add: NULL argument");
	int bad = !id_p || (!ranks && n_ranks > 0);
	char what[96];
	snprintf(what, sizeof(what), "rank %d: adding a process set", client->rank);
	ps_vote_t *votes = calloc((size_t)client->size, sizeof(*votes));
	if (!votes)
		return scl_error(SC_ERR_NOMEM, "%s: out of memory", what);
	pthread_mutex_lock(&client->mu);
	int next = client->pset_next_id + 1;
	pthread_mutex_unlock(&client->mu);
	sc_status_t st = agree(client, bad ? PS_BAD : PS_ADD, next, bad ? NULL : ranks,
			       bad ? 0 : n_ranks, timeout_ms, votes, what);
	if (st != SC_OK) {
		votes_free(votes, client->size);
		return st;
	}
	const ps_vote_t *v = &votes[0];
	pthread_mutex_lock(&client->mu);
	int id = v->id, same = 0;
	for (int i = 0; i < client->n_psets && !same; i++)
		if (client->psets[i].n == v->n &&
		    !memcmp(client->psets[i].ranks, v->sorted, sizeof(int32_t) * (size_t)v->n))
			same = client->psets[i].id;
	struct scl_pset *grown = NULL;
	if (!same && client->n_psets == client->cap_psets) {
		int cap = client->cap_psets ? client->cap_psets * 2 : 8;
		grown = realloc(client->psets, (size_t)cap * sizeof(*grown));
		if (grown)
			client->psets = grown, client->cap_psets = cap;
	}
	int room = same || client->n_psets < client->cap_psets;
	if (!same && room)
		client->pset_next_id = id;
	pthread_mutex_unlock(&client->mu);
	if (same) {
		votes_free(votes, client->size);
		return scl_error(SC_ERR_INVALID, "%s: process set %d has these ranks already",
				 what, same);
	}
	if (!room) {
		votes_free(votes, client->size);
		return barrier_after(client, scl_error(SC_ERR_NOMEM, "%s: out of memory", what),
				     timeout_ms);
	}
	snprintf(what, sizeof(what), "rank %d: adding process set %d", client->rank, id);
	st = tell_daemon(client, id, v->sorted, v->n, 0, timeout_ms, what);
	if (st == SC_OK) {
		pthread_mutex_lock(&client->mu);
		struct scl_pset *p = &client->psets[client->n_psets++];
		p->id = id;
		p->n = v->n;
		p->ranks = votes[0].sorted;
		votes[0].sorted = NULL;
		pthread_mutex_unlock(&client->mu);
		*id_p = id;
	}
	votes_free(votes, client->size);
	return st;
}

SC_API sc_status_t sc_process_set_add(sc_client_t *client, const int *ranks, int n_ranks,
				      int timeout_ms, int *id_p)
{
	sc_status_t st = scl_enter_call(client, "sc_process_set_add");

	if (st != SC_OK)
		return st;
	return scl_left(client, pset_add(client, ranks, n_ranks, timeout_ms, id_p));
}

static sc_status_t pset_remove(sc_client_t *client, int id, int timeout_ms)
{
	char what[96];
	snprintf(what, sizeof(what), "rank %d: removing process set %d", client->rank, id);
	ps_vote_t *votes = calloc((size_t)client->size, sizeof(*votes));
	if (!votes)
		return scl_error(SC_ERR_NOMEM, "%s: out of memory", what);
	sc_status_t st = agree(client, PS_REMOVE, id, NULL, 0, timeout_ms, votes, what);
	votes_free(votes, client->size);
	if (st != SC_OK)
		return st;
	st = tell_daemon(client, id, NULL, 0, 1, timeout_ms, what);
	pthread_mutex_lock(&client->mu);
	for (int i = 0; i < client->n_psets; i++)
		if (client->psets[i].id == id) {
			free(client->psets[i].ranks);
			client->psets[i] = client->psets[--client->n_psets];
			break;
		}
	pthread_mutex_unlock(&client->mu);
	return st;
}

/* pset_query's answer, the call counted. */
static int pset_query_in(const sc_client_t *c, int id, int *ranks, int cap, int *mine_p)
{
	if (id == SC_PROCESS_SET_GLOBAL) {
		for (int i = 0; ranks && i < cap && i < c->size; i++)
			ranks[i] = i;
		*mine_p = c->rank;
		return c->size;
	}
	pthread_mutex_lock((pthread_mutex_t *)&c->mu);
	const struct scl_pset *p = pset_find(c, id);
	int n = p ? p->n : -1;
	for (int i = 0; p && i < p->n; i++) {
		if (ranks && i < cap)
			ranks[i] = p->ranks[i];
		if (p->ranks[i] == c->rank)
			*mine_p = i;
	}
	pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
	return n;
}

SC_API sc_status_t sc_process_set_remove(sc_client_t *client, int id, int timeout_ms)
{
	sc_status_t st = scl_enter_call(client, "sc_process_set_remove");

	if (st != SC_OK)
		return st;
	return scl_left(client, pset_remove(client, id, timeout_ms));
}

/* The set's rank list into ranks (cap of them), its size, and this trainer's rank in it;
 * -1 for an unknown set, and once sc_finalize has begun. */
static int pset_query(const sc_client_t *c, int id, int *ranks, int cap, int *mine_p)
{
	*mine_p = -1;
	if (!c)
		return -1;
	if (scl_enter(c)) {
		scl_leave(c);
		return -1;
	}
	int n = pset_query_in(c, id, ranks, cap, mine_p);
	scl_leave(c);
	return n;
}

SC_API int sc_process_set_size(const sc_client_t *client, int id)
{
	int mine;
	return pset_query(client, id, NULL, 0, &mine);
}

SC_API int sc_process_set_rank(const sc_client_t *client, int id)
{
	int mine = -1;
	pset_query(client, id, NULL, 0, &mine);
	return mine;
}

SC_API int sc_process_set_ranks(const sc_client_t *client, int id, int *ranks, int cap)
{
	int mine;
	return pset_query(client, id, ranks, cap, &mine);
}

sc_status_t scl_pset_check(const sc_client_t *c, int id, const char *name)
{
	if (id == SC_PROCESS_SET_GLOBAL)
		return SC_OK;
	int mine = -1, n = id > 0 ? pset_query(c, id, NULL, 0, &mine) : -1;
	if (n < 0)
		return scl_error(
		    SC_ERR_INVALID,
		    "rank %d: registering tensor '%s': process set %d is not defined "
		    "(sc_process_set_add)",
		    c->rank, name, id);
	if (mine < 0)
		return scl_error(SC_ERR_INVALID,
				 "rank %d: registering tensor '%s': rank %d is not a member of "
				 "process set %d",
				 c->rank, name, c->rank, id);
	return SC_OK;
}

void scl_pset_free_all(sc_client_t *c)
{
	for (int i = 0; i < c->n_psets; i++)
		free(c->psets[i].ranks);
	free(c->psets);
	c->psets = NULL;
	c->n_psets = c->cap_psets = 0;
}

int scl_pset_has(const sc_client_t *c, int id, int rank)
{
	if (id == SC_PROCESS_SET_GLOBAL)
		return rank >= 0 && rank < c->size;
	int in = 0;
	pthread_mutex_lock((pthread_mutex_t *)&c->mu);
	const struct scl_pset *p = pset_find(c, id);
	for (int i = 0; p && i < p->n && !in; i++)
		in = p->ranks[i] == rank;
	pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
	return in;
}
