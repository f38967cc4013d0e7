/*
 * itest_psets.c: process sets (sc_process_set_add and friends; daemon/ctl/pset.h). Run
 * with 4 trainers, as 2 nodes x 2 trainers and as 4 nodes x 1 (run.sh):
 *
 *   - sets {0, 2} and {1, 3} (one trainer of each node with 2 x 2), {0, 1} (within node 0
 *     with 2 x 2) and {2, 3}, added by every rank: the same ids 1 to 4 everywhere, sizes
 *     and ranks as given;
 *   - the same name "w" registered in every set a rank belongs to, and in the global set:
 *     sums and averages exact over each set's members only (each set its own tensor);
 *   - two overlapping sets used at the same time ({0, 2} and {0, 1} by rank 0);
 *   - a broadcast in {1, 3} from global rank 3, an allgather in {0, 2} of per-rank counts:
 *     exact, in set rank order;
 *   - errors on every rank alike: a non-member registering in a set, an add the ranks
 *     disagree on (SC_ERR_MISMATCH naming them), an add with an out-of-range rank from
 *     one rank (SC_ERR_INVALID naming it), an add of ranks a set already has, an add with
 *     a NULL rank list on one rank (SC_ERR_INVALID naming it, at once);
 *   - a set removed while rank 1 waits on an operation in it: the wait ends with
 *     SC_ERR_ABORTED naming the set; the set is unknown afterwards, its registration
 *     refused; the others still exact;
 *   - a reduce-scatter (int32 sums, float64 averages), an alltoall and an Adasum (float64)
 *     in {0, 2} and in {0, 1, 3}, which split nodes with 2 x 2: exact, every trainer's
 *     share, blocks and leaf in set rank order over the set's trainers only; an alltoall
 *     whose counts rank 3 gives over the tensor's size fails on every member naming rank
 *     3 and its set rank 2;
 *   - grouped allreduces in {0, 2} and {1, 2, 3} in flight together, rank 0's and rank
 *     1's (node 0's two trainers with 2 x 2) under the same number of their own: both
 *     exact (two groups on node 0, not one that node 1 formed differently);
 *   - with 4 nodes x 1: an allreduce in {0, 2} moves no byte of node 1 or node 3 (their
 *     daemons' counters, sparsectl status, unchanged around it).
 */
#include "itest.h"

#include "../adasum_ref.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PS_N 1000

/* Element i of rank r's input: exact in float32 and distinct per rank. */
static float ps_value(int r, size_t i)
{
	return (float)((r + 1) * 1000 + (int)(i % 97));
}

static void ps_fill(sc_tensor_t *t, int rank)
{
	float *v = sc_tensor_data(t);
	for (size_t i = 0; i < sc_tensor_numel(t); i++)
		v[i] = ps_value(rank, i);
}

/* Checks t's sum (or average) over the n ranks of set. */
static void ps_check(sc_tensor_t *t, const int *set, int n, int average, const char *what)
{
	const float *v = sc_tensor_data(t);
	for (size_t i = 0; i < sc_tensor_numel(t); i++) {
		double want = 0;
		for (int k = 0; k < n; k++)
			want += ps_value(set[k], i);
		if (average)
			want /= n;
		if (v[i] != (float)want)
			IT_FAIL(
			    "%s: element %zu is %g, expected %g (the %s over ranks %d..%d of "
			    "%d)",
			    what, i, (double)v[i], want, average ? "average" : "sum", set[0],
			    set[n - 1], n);
	}
}

static sc_tensor_t *ps_register(sc_client_t *c, const char *name, sc_dtype_t dtype,
				size_t numel, int pset)
{
	sc_tensor_opts_t o;
	memset(&o, 0, sizeof(o));
	o.struct_size = sizeof(o);
	o.process_set = pset;
	sc_tensor_t *t = NULL;
	IT_CHECK_SC(sc_register_ex(c, name, dtype, numel, &o, &t),
		    "registering '%s' in process set %d", name, pset);
	return t;
}

static int ps_in(const int *set, int n, int rank)
{
	for (int k = 0; k < n; k++)
		if (set[k] == rank)
			return 1;
	return 0;
}

static void ps_add(sc_client_t *c, const int *ranks, int n, int want_id)
{
	int id = -1;
	IT_CHECK_SC(sc_process_set_add(c, ranks, n, IT_OP_TIMEOUT_MS, &id),
		    "sc_process_set_add (set %d)", want_id);
	if (id != want_id)
		IT_FAIL("sc_process_set_add gave id %d, expected %d", id, want_id);
	int got[8], mine = -1;
	if (sc_process_set_size(c, id) != n || sc_process_set_ranks(c, id, got, 8) != n)
		IT_FAIL("process set %d: size %d, expected %d", id, sc_process_set_size(c, id),
			n);
	for (int k = 0; k < n; k++) {
		if (got[k] != ranks[k])
			IT_FAIL("process set %d: rank %d at %d, expected %d", id, got[k], k,
				ranks[k]);
		if (ranks[k] == sc_rank(c))
			mine = k;
	}
	if (sc_process_set_rank(c, id) != mine)
		IT_FAIL("process set %d: this trainer's rank in it is %d, expected %d", id,
			sc_process_set_rank(c, id), mine);
}

/* An add every rank must fail with st, its message naming rank blame (>= 0). */
static void ps_add_fails(sc_client_t *c, const int *ranks, int n, sc_status_t st, int blame,
			 const char *what)
{
	int id = -1;
	sc_status_t got = sc_process_set_add(c, ranks, n, IT_ERROR_TIMEOUT_MS, &id);
	if (got != st)
		IT_FAIL("%s: sc_process_set_add gave %s (%s), expected %s", what,
			sc_status_name(got), sc_last_error(), sc_status_name(st));
	if (blame >= 0 && !it_mentions_rank(sc_last_error(), blame))
		IT_FAIL("%s: the error does not name rank %d: %s", what, blame,
			sc_last_error());
	it_log("%s: %s", what, sc_last_error());
}

/* The bytes the node's daemon sent for all its tensors, from sparsectl stats. */
static long long node_bytes(const char *sock)
{
	const char *args[] = {"stats", NULL};
	char out[65536];
	if (it_run_ctl(sock, out, sizeof(out), args) != 0)
		IT_FAIL("sparsectl stats on %s failed: %.300s", sock, out);
	long long sum = 0;
	for (const char *p = out; (p = strstr(p, "\"bytes_sent\":")) != NULL; p++)
		sum += atoll(p + strlen("\"bytes_sent\":"));
	return sum;
}

/* The bytes through this network namespace's interfaces but loopback, sent and received. */
static long long iface_bytes(void)
{
	DIR *d = opendir("/sys/class/net");
	if (!d)
		IT_FAIL("cannot list /sys/class/net: %s", strerror(errno));
	long long sum = 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' || !strcmp(e->d_name, "lo"))
			continue;
		for (int k = 0; k < 2; k++) {
			char path[512], text[64] = {0};
			snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/%s_bytes",
				 e->d_name, k ? "rx" : "tx");
			FILE *f = fopen(path, "r");
			if (f && fgets(text, sizeof(text), f))
				sum += atoll(text), n++;
			if (f)
				fclose(f);
		}
	}
	closedir(d);
	if (!n)
		IT_FAIL("no network interface but loopback here: run with --netns");
	return sum;
}

/* The first of rows rows that set rank k of n gets in a reduce-scatter (the first
 * rows % n one row more). */
static size_t ps_first_row(size_t rows, int n, int k)
{
	return (size_t)k * (rows / (size_t)n) +
	       ((size_t)k < rows % (size_t)n ? (size_t)k : rows % (size_t)n);
}

/* Reduce-scatters of 7 rows of 3 in set id: int32 sums and float64 averages, set rank me of
 * n getting its rows of the reduction over the members only. */
static void ps_split_rs(sc_client_t *c, int id, const int *set, int n, int me)
{
	size_t rows = 7, row = 3, f = ps_first_row(rows, n, me);
	size_t got = (ps_first_row(rows, n, me + 1) - f) * row;
	char name[32];
	for (int avg = 0; avg < 2; avg++) {
		snprintf(name, sizeof(name), "rs.%d.%d", id, avg);
		sc_tensor_t *t =
		    ps_register(c, name, avg ? SC_FLOAT64 : SC_INT32, rows * row, id);
		for (size_t i = 0; i < rows * row; i++)
			if (avg)
				((double *)sc_tensor_data(t))[i] =
				    (sc_rank(c) + 1) * 100.0 + (double)i;
			else
				((int32_t *)sc_tensor_data(t))[i] =
				    (sc_rank(c) + 1) * 100 + (int32_t)i;
		sc_handle_t h = 0;
		IT_CHECK_SC(
		    sc_reducescatter_async(c, t, avg ? SC_OP_AVERAGE : SC_OP_SUM, row, &h),
		    "reducescatter of '%s' in set %d", name, id);
		int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("reducescatter of '%s' in set %d: %s: %s", name, id,
				it_wait_name(r), it_wait_error());
		if (sc_tensor_result_nnz(t) != got)
			IT_FAIL(
			    "reducescatter of '%s' in set %d: set rank %d got %zu elements, "
			    "expected %zu",
			    name, id, me, sc_tensor_result_nnz(t), got);
		for (size_t j = 0; j < got; j++) {
			double want = 0;
			for (int k = 0; k < n; k++)
				want += (set[k] + 1) * 100.0 + (double)(f * row + j);
			double v = avg ? ((double *)sc_tensor_data(t))[j]
				       : ((int32_t *)sc_tensor_data(t))[j];
			if (avg)
				want /= n;
			if (v != want)
				IT_FAIL("reducescatter of '%s' in set %d: set rank %d's "
					"element %zu "
					"is %.17g, expected %.17g",
					name, id, me, j, v, want);
		}
	}
}

/* What set rank s of an alltoall in a set sends set rank q: 1 to 3 elements. */
static size_t ps_a2a_count(int s, int q)
{
	return 1 + (size_t)(s + 2 * q) % 3;
}

/* An alltoall in set id: set rank me sends ps_a2a_count(me, q) elements to set rank q,
 * its global rank x 100 + its element's index; each receives the blocks of the set's
 * members in set rank order. Then rank 3, where it is a member, gives counts summing over
 * the tensor's 16 elements: refused on every member, naming rank 3 and its set rank. */
static void ps_split_a2a(sc_client_t *c, int id, const int *set, int n, int me)
{
	char name[32];
	snprintf(name, sizeof(name), "a2a.%d", id);
	sc_tensor_t *t = ps_register(c, name, SC_INT32, 16, id);
	int32_t *v = sc_tensor_data(t);
	size_t send[8] = {0}, got[8], total = 0;
	for (int q = 0; q < n; q++)
		total += send[q] = ps_a2a_count(me, q);
	for (size_t i = 0; i < total; i++)
		v[i] = sc_rank(c) * 100 + (int32_t)i;
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_alltoall_async(c, t, send, &h), "alltoall in set %d", id);
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("alltoall in set %d: %s: %s", id, it_wait_name(r), it_wait_error());
	IT_CHECK_SC(sc_tensor_result_counts(t, got, n), "alltoall counts in set %d", id);
	size_t at = 0;
	for (int s = 0; s < n; s++) {
		size_t off = 0; /* where s's block to me starts in s's buffer */
		for (int q = 0; q < me; q++)
			off += ps_a2a_count(s, q);
		if (got[s] != ps_a2a_count(s, me))
			IT_FAIL(
			    "alltoall in set %d: set rank %d got %zu elements from set rank "
			    "%d, expected %zu",
			    id, me, got[s], s, ps_a2a_count(s, me));
		for (size_t j = 0; j < got[s]; j++, at++)
			if (v[at] != set[s] * 100 + (int32_t)(off + j))
				IT_FAIL("alltoall in set %d: set rank %d's element %zu is %d, "
					"expected %d (from rank %d)",
					id, me, at, v[at], set[s] * 100 + (int32_t)(off + j),
					set[s]);
	}
	if (sc_tensor_result_nnz(t) != at)
		IT_FAIL("alltoall in set %d: %zu elements received, expected %zu", id,
			sc_tensor_result_nnz(t), at);
	if (set[n - 1] != 3)
		return;
	if (sc_rank(c) == 3)
		send[0] = 16;
	r = sc_alltoall_async(c, t, send, &h) == SC_OK ? it_wait(c, h, IT_ERROR_TIMEOUT_MS)
						       : SC_OK;
	char set_rank[32];
	snprintf(set_rank, sizeof(set_rank), "set rank %d", n - 1);
	if (r != SC_ERR_INVALID || !it_mentions_rank(it_wait_error(), 3) ||
	    !strstr(it_wait_error(), set_rank))
		IT_FAIL("alltoall in set %d with rank 3's counts over the tensor: %s: %s", id,
			it_wait_name(r), it_wait_error());
	it_log("alltoall in set %d, rank 3's counts refused: %s", id, it_wait_error());
}

/* Adasum of float64 leaves in set id: set rank k's leaf is leaves[k], chosen so that
 * every dot product and coefficient of the tree is a binary fraction (the result exact
 * in any summation order), and so that another order of the leaves gives another result.
 * Checked exactly against adasum_ref.h's tree over the set's trainers in set rank order. */
static void ps_split_adasum(sc_client_t *c, int id, int n, int me)
{
	static const double leaves[3][4] = {{2, 0, 0, 0}, {2, 2, 0, 0}, {1, 4, 0, 0}};
	double ref[3 * 4];
	char name[32];
	snprintf(name, sizeof(name), "adasum.%d", id);
	sc_tensor_t *t = ps_register(c, name, SC_FLOAT64, 4, id);
	memcpy(sc_tensor_data(t), leaves[me], sizeof(leaves[me]));
	memcpy(ref, leaves, sizeof(double) * 4 * (size_t)n);
	ref_tree(ref, n, 4);
	sc_handle_t h = 0;
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_ADASUM, &h), "adasum in set %d", id);
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("adasum in set %d: %s: %s", id, it_wait_name(r), it_wait_error());
	const double *v = sc_tensor_data(t);
	for (int i = 0; i < 4; i++)
		if (v[i] != ref[i])
			IT_FAIL("adasum in set %d: set rank %d's element %d is %.17g, expected "
				"%.17g",
				id, me, i, v[i], ref[i]);
}

/* Reduce-scatter, alltoall and Adasum in set id (members set, ascending: the set rank
 * order), on its members. */
static void ps_split(sc_client_t *c, int id, const int *set, int n)
{
	int me = -1;
	for (int k = 0; k < n; k++)
		if (set[k] == sc_rank(c))
			me = k;
	if (me < 0)
		return;
	ps_split_rs(c, id, set, n, me);
	ps_split_a2a(c, id, set, n, me);
	ps_split_adasum(c, id, n, me);
}

/* Registers 'Pa' and 'Pb' (P: prefix) in set id and starts their grouped allreduce: the
 * tensors into gt, the handles into gh. */
static void ps_group_start(sc_client_t *c, const char *prefix, int id, sc_tensor_t **gt,
			   sc_handle_t *gh)
{
	sc_group_t grp = 0;
	IT_CHECK_SC(sc_group_begin(c, 2, &grp), "sc_group_begin in set %d", id);
	for (int k = 0; k < 2; k++) {
		char name[32];
		snprintf(name, sizeof(name), "%s%c", prefix, 'a' + k);
		gt[k] = ps_register(c, name, SC_FLOAT32, k ? PS_N / 2 : PS_N, id);
		ps_fill(gt[k], sc_rank(c));
		IT_CHECK_SC(sc_group_add(c, grp, gt[k]), "sc_group_add");
		IT_CHECK_SC(sc_allreduce_async(c, gt[k], SC_OP_SUM, &gh[k]),
			    "group member '%s' in set %d", name, id);
	}
	IT_CHECK_SC(sc_group_end(c, grp), "sc_group_end in set %d", id);
}

/* Waits for the group ps_group_start started: both members exact over the n ranks of set. */
static void ps_group_check(sc_client_t *c, sc_tensor_t **gt, const sc_handle_t *gh,
			   const int *set, int n, const char *what)
{
	for (int k = 0; k < 2; k++) {
		int r = it_wait(c, gh[k], IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("%s: member '%s' on rank %d: %s: %s", what,
				sc_tensor_name(gt[k]), sc_rank(c), it_wait_name(r),
				it_wait_error());
		ps_check(gt[k], set, n, 0, what);
	}
}

int it_psets(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	int rank = sc_rank(c), size = sc_size(c);
	if (size != 4)
		IT_FAIL("process sets run with 4 trainers, not %d", size);
	static const int sets[4][2] = {{0, 2}, {1, 3}, {0, 1}, {2, 3}};
	for (int s = 0; s < 4; s++)
		ps_add(c, sets[s], 2, s + 1);
	if (sc_process_set_size(c, 0) != 4 || sc_process_set_rank(c, 0) != rank)
		IT_FAIL("the global set: size %d, rank %d", sc_process_set_size(c, 0),
			sc_process_set_rank(c, 0));
	it_log("sets {0,2} {1,3} {0,1} {2,3} added as ids 1 to 4");

	/* "w" in the global set and in each of this rank's sets: four tensors */
	sc_tensor_t *w[5] = {0};
	w[0] = ps_register(c, "w", SC_FLOAT32, PS_N, 0);
	for (int s = 0; s < 4; s++)
		if (ps_in(sets[s], 2, rank))
			w[s + 1] = ps_register(c, "w", SC_FLOAT32, PS_N, s + 1);
	static const int all[4] = {0, 1, 2, 3};
	for (int step = 0; step < 3; step++) {
		int avg = step == 2;
		sc_reduce_op_t op = avg ? SC_OP_AVERAGE : SC_OP_SUM;
		for (int s = 0; s <= 4; s++) {
			if (!w[s])
				continue;
			ps_fill(w[s], rank);
			IT_CHECK_SC(sc_allreduce(c, w[s], op, IT_OP_TIMEOUT_MS),
				    "allreduce of 'w' in set %d, step %d", s, step);
			char what[64];
			snprintf(what, sizeof(what), "'w' in set %d, step %d", s, step);
			ps_check(w[s], s ? sets[s - 1] : all, s ? 2 : 4, avg, what);
		}
	}
	it_log("sums and averages of 'w' exact in the global set and each set");

	/* overlapping sets at the same time: every set's operation in flight together */
	sc_handle_t h[5] = {0};
	for (int s = 1; s <= 4; s++)
		if (w[s]) {
			ps_fill(w[s], rank);
			IT_CHECK_SC(sc_allreduce_async(c, w[s], SC_OP_SUM, &h[s]),
				    "allreduce of 'w' in set %d", s);
		}
	for (int s = 1; s <= 4; s++)
		if (w[s]) {
			int r = it_wait(c, h[s], IT_OP_TIMEOUT_MS);
			if (r != SC_OK)
				IT_FAIL("'w' in set %d, in flight with the others: %s: %s", s,
					it_wait_name(r), it_wait_error());
			ps_check(w[s], sets[s - 1], 2, 0, "'w' with its sets in flight");
		}
	it_log("overlapping sets in flight together: exact");

	/* broadcast in {1, 3} from global rank 3; allgather in {0, 2} */
	if (ps_in(sets[1], 2, rank)) {
		sc_tensor_t *b = ps_register(c, "b", SC_INT32, 64, 2);
		int32_t *v = sc_tensor_data(b);
		for (int i = 0; i < 64; i++)
			v[i] = rank * 100 + i;
		IT_CHECK_SC(sc_broadcast(c, b, 3, IT_OP_TIMEOUT_MS), "broadcast in set 2");
		for (int i = 0; i < 64; i++)
			if (v[i] != 300 + i)
				IT_FAIL("broadcast in set 2 from rank 3: element %d is %d", i,
					v[i]);
	}
	if (ps_in(sets[0], 2, rank)) {
		sc_tensor_t *g = ps_register(c, "g", SC_INT32, 16, 1);
		int32_t *v = sc_tensor_data(g);
		int mine = rank == 0 ? 3 : 5;
		for (int i = 0; i < mine; i++)
			v[i] = rank * 10 + i;
		sc_handle_t gh = 0;
		IT_CHECK_SC(sc_allgather_async(c, g, (size_t)mine, &gh), "allgather in set 1");
		int r = it_wait(c, gh, IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("allgather in set 1: %s: %s", it_wait_name(r), it_wait_error());
		static const int32_t want[8] = {0, 1, 2, 20, 21, 22, 23, 24};
		if (sc_tensor_result_nnz(g) != 8 || memcmp(v, want, sizeof(want)))
			IT_FAIL("allgather in set 1: %zu elements, first %d %d %d %d",
				sc_tensor_result_nnz(g), v[0], v[1], v[3], v[7]);
	}
	it_log("broadcast in {1,3} from rank 3 and allgather in {0,2}: exact");

	/* a grouped operation in {0, 2}: both members exact; a broadcast in {1, 3} from rank
	 * 0, not a member: refused on both members, naming the set */
	if (w[1]) {
		sc_tensor_t *gt[2];
		sc_handle_t gh[2];
		ps_group_start(c, "g", 1, gt, gh);
		ps_group_check(c, gt, gh, sets[0], 2, "a group in set 1");
	}
	if (w[2]) {
		sc_tensor_t *b0 = ps_register(c, "b0", SC_INT32, 8, 2);
		sc_status_t st = sc_broadcast(c, b0, 0, IT_ERROR_TIMEOUT_MS);
		if (st != SC_ERR_INVALID || !strstr(sc_last_error(), "process set 2"))
			IT_FAIL("a broadcast in set 2 from rank 0, not a member: %s (%s)",
				sc_status_name(st), sc_last_error());
	}
	/* an alltoall in {0, 2}: one count per member, in set rank order */
	if (w[1]) {
		sc_tensor_t *a = ps_register(c, "a2a", SC_INT32, 16, 1);
		int32_t *v = sc_tensor_data(a);
		int me = rank == 0 ? 0 : 1;
		size_t send[2] = {(size_t)(1 + me), (size_t)(2 + me)}; /* to set ranks 0, 1 */
		for (int i = 0; i < 3 + 2 * me; i++)
			v[i] = rank * 100 + i;
		sc_handle_t ah = 0;
		IT_CHECK_SC(sc_alltoall_async(c, a, send, &ah), "alltoall in set 1");
		int r = it_wait(c, ah, IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("alltoall in set 1: %s: %s", it_wait_name(r), it_wait_error());
		size_t got[2];
		IT_CHECK_SC(sc_tensor_result_counts(a, got, 2), "alltoall counts in set 1");
		/* set rank 0 (rank 0) sends 1 to itself, 2 to rank 2; rank 2 sends 2 to rank 0,
		 * 3 to itself */
		size_t want0 = me ? 2 : 1, want1 = me ? 3 : 2;
		int32_t first = me ? 1 : 0, second = me ? 202 : 200;
		if (got[0] != want0 || got[1] != want1 || v[0] != first || v[want0] != second)
			IT_FAIL("alltoall in set 1: counts %zu %zu, elements %d %d", got[0],
				got[1], v[0], v[want0]);
	}
	it_log("a group in {0,2}, a refused broadcast in {1,3}, an alltoall in {0,2}");

	/* errors, alike on every rank */
	if (!ps_in(sets[0], 2, rank)) {
		sc_tensor_opts_t o;
		memset(&o, 0, sizeof(o));
		o.struct_size = sizeof(o);
		o.process_set = 1;
		sc_tensor_t *t = NULL;
		sc_status_t st = sc_register_ex(c, "x", SC_FLOAT32, 4, &o, &t);
		if (st != SC_ERR_INVALID || !strstr(sc_last_error(), "process set 1"))
			IT_FAIL("a non-member registering in set 1: %s (%s)",
				sc_status_name(st), sc_last_error());
	}
	int mixed[2] = {0, rank == 0 ? 1 : 2};
	ps_add_fails(c, mixed, 2, SC_ERR_MISMATCH, 1, "an add the ranks disagree on");
	int bad[2] = {0, rank == 1 ? 9 : 3};
	ps_add_fails(c, bad, 2, SC_ERR_INVALID, 1, "an add with rank 9 from rank 1");
	ps_add_fails(c, sets[2], 2, SC_ERR_INVALID, -1, "an add of set 3's ranks again");
	/* a NULL rank list on rank 2 alone: every rank fails at once naming it (rank 2
	 * refused it without the others, which waited out their stall timeout, and the
	 * agreements' tensor names went out of step for every later add) */
	ps_add_fails(c, rank == 2 ? NULL : sets[1], 2, SC_ERR_INVALID, 2,
		     "an add with a NULL rank list from rank 2");
	ps_add(c, (const int[]){1, 2, 3}, 3, 5); /* ids go on after refusals */
	it_log("errors alike on every rank; the next add is id 5");

	/* remove set 2 while rank 1 waits on 'w' there (rank 3 never submits it): the wait
	 * ends with SC_ERR_ABORTED naming the set; the set is gone, its registration
	 * refused; the others go on */
	sc_handle_t orphan = 0;
	if (rank == 1) {
		ps_fill(w[2], rank);
		IT_CHECK_SC(sc_allreduce_async(c, w[2], SC_OP_SUM, &orphan),
			    "'w' of set 2, which rank 3 does not submit");
	}
	IT_CHECK_SC(sc_process_set_remove(c, 2, IT_OP_TIMEOUT_MS), "removing set 2");
	if (rank == 1) {
		sc_status_t st = sc_wait(c, orphan, IT_ERROR_TIMEOUT_MS);
		if (st != SC_ERR_ABORTED || !strstr(sc_last_error(), "process set 2"))
			IT_FAIL("'w' of set 2 in flight when the set was removed: %s (%s)",
				sc_status_name(st), sc_last_error());
		it_log("in flight when its set went: %s", sc_last_error());
	}
	if (rank == 3) { /* still registered: its submission is refused at once */
		ps_fill(w[2], rank);
		sc_status_t st = sc_allreduce(c, w[2], SC_OP_SUM, IT_ERROR_TIMEOUT_MS);
		if (st != SC_ERR_ABORTED || !strstr(sc_last_error(), "process set 2"))
			IT_FAIL("'w' of the removed set 2 submitted: %s (%s)",
				sc_status_name(st), sc_last_error());
	}
	if (w[2]) {
		IT_CHECK_SC(sc_tensor_release(c, w[2]), "releasing 'w' of set 2");
		w[2] = NULL;
	}
	{
		sc_tensor_opts_t o;
		memset(&o, 0, sizeof(o));
		o.struct_size = sizeof(o);
		o.process_set = 2;
		sc_tensor_t *t = NULL;
		if (sc_register_ex(c, "w2", SC_FLOAT32, 4, &o, &t) != SC_ERR_INVALID)
			IT_FAIL("registering in the removed set 2 was not refused: %s",
				sc_last_error());
	}
	if (sc_process_set_size(c, 2) != -1)
		IT_FAIL("set 2 still has size %d after its removal", sc_process_set_size(c, 2));
	if (sc_process_set_remove(c, 0, IT_ERROR_TIMEOUT_MS) != SC_ERR_INVALID)
		IT_FAIL("removing the global set was not refused: %s", sc_last_error());
	for (int s = 1; s <= 4; s++)
		if (w[s]) {
			ps_fill(w[s], rank);
			IT_CHECK_SC(sc_allreduce(c, w[s], SC_OP_SUM, IT_OP_TIMEOUT_MS),
				    "'w' in set %d after set 2 went", s);
			ps_check(w[s], sets[s - 1], 2, 0, "'w' after a removal");
		}
	it_log("set 2 removed; the others exact");

	/* sets that split nodes with 2 x 2 ({0, 2}: local rank 0 of each; {0, 1, 3}: node 0
	 * and node 1's local rank 1), whole nodes with 4 x 1 */
	static const int three[3] = {0, 1, 3};
	ps_add(c, three, 3, 6);
	ps_split(c, 1, sets[0], 2);
	ps_split(c, 6, three, 3);
	it_log("reduce-scatter, alltoall and adasum in {0, 2} and {0, 1, 3}: exact, in set "
	       "rank order");

	/* with 2 x 2, groups of two trainers of node 0 in flight together, each in its own
	 * set, under the same number (each trainer numbers its groups from 1): rank 0's in
	 * {0, 2} (its second) waits for rank 2, which submits it only after the group in
	 * {1, 2, 3} that rank 1 starts meanwhile (its second too) is over. Both exact: node 0
	 * announced them as two groups, not one that node 1 formed differently. */
	static const int five[3] = {1, 2, 3};
	sc_tensor_t *gt1[2], *gt5[2];
	sc_handle_t gh1[2], gh5[2];
	if (rank != 0) {
		ps_group_start(c, "h", 5, gt5, gh5);
		ps_group_check(c, gt5, gh5, five, 3, "a first group in {1, 2, 3}");
	}
	IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "barrier");
	if (rank == 0)
		ps_group_start(c, "k", 1, gt1, gh1);
	else
		it_sleep_ms(200); /* rank 0's group announced first */
	if (rank != 0) {
		ps_group_start(c, "k", 5, gt5, gh5);
		ps_group_check(c, gt5, gh5, five, 3, "a group in {1, 2, 3}");
	}
	if (rank == 2)
		ps_group_start(c, "k", 1, gt1, gh1);
	if (rank % 2 == 0)
		ps_group_check(c, gt1, gh1, sets[0], 2, "a group in {0, 2} meanwhile");
	it_log("groups in {0, 2} and {1, 2, 3} of node 0's two trainers at once: exact");

	/* 4 nodes x 1: an allreduce in {0, 2} leaves nodes 1 and 3 out of the data plane:
	 * what the daemons counted for their tensors, or with --wire (each node in a network
	 * namespace of its own) what went through the node's network interfaces */
	int wire = argc > 1 && !strcmp(argv[1], "--wire");
	if (sc_local_size(c) == 1) {
		it_sparsectl_find();
		IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "barrier");
		long long before = wire ? iface_bytes() : node_bytes(it_env.socket);
		IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "barrier");
		sc_tensor_t *big = w[1] ? ps_register(c, "big", SC_FLOAT32, 1 << 18, 1) : NULL;
		if (big) {
			ps_fill(big, rank);
			IT_CHECK_SC(sc_allreduce(c, big, SC_OP_SUM, IT_OP_TIMEOUT_MS),
				    "1 MiB allreduce in set 1");
			ps_check(big, sets[0], 2, 0, "'big' in set 1");
		}
		IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "barrier");
		long long moved = (wire ? iface_bytes() : node_bytes(it_env.socket)) - before;
		it_log("node %d moved %lld bytes (%s) during a 1 MiB allreduce in {0, 2}", rank,
		       moved, wire ? "its interfaces, sent and received" : "its tensors, sent");
		if (big && moved < (1 << 20) / 2)
			IT_FAIL("node %d is in set 1 but moved only %lld bytes", rank, moved);
		/* barriers go through the coordinator, not the data plane: on the wire they
		 * and the heartbeats are a few kilobytes */
		if (!big && moved > (wire ? 64 << 10 : 0))
			IT_FAIL("node %d is outside set 1 but moved %lld bytes", rank, moved);
	}
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}

/*
 * psets-killed, 4 nodes x 1: sets {0, 1} and {2, 3}; rank 3 dies. An allreduce of the
 * global set and one of {2, 3} fail on the ranks left, naming rank 3; {0, 1} goes on,
 * exact, step after step.
 */
int it_psets_killed(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	int rank = sc_rank(c);
	if (sc_size(c) != 4)
		IT_FAIL("runs with 4 trainers, not %d", sc_size(c));
	static const int low[2] = {0, 1}, high[2] = {2, 3};
	ps_add(c, low, 2, 1);
	ps_add(c, high, 2, 2);
	sc_tensor_t *g = ps_register(c, "g", SC_FLOAT32, PS_N, 0);
	sc_tensor_t *w = ps_register(c, "w", SC_FLOAT32, PS_N, rank < 2 ? 1 : 2);
	ps_fill(w, rank);
	IT_CHECK_SC(sc_allreduce(c, w, SC_OP_SUM, IT_OP_TIMEOUT_MS), "'w' before the death");
	ps_check(w, rank < 2 ? low : high, 2, 0, "'w' before the death");
	IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "barrier");
	if (rank == 3) {
		it_log("dying");
		fflush(NULL);
		raise(SIGKILL);
		IT_FAIL("still alive after SIGKILL");
	}
	if (rank == 2) {
		ps_fill(w, rank);
		sc_status_t st = sc_allreduce(c, w, SC_OP_SUM, IT_ERROR_TIMEOUT_MS);
		if (st == SC_OK || !it_mentions_rank(sc_last_error(), 3))
			IT_FAIL("'w' of {2, 3} after rank 3 died: %s (%s)", sc_status_name(st),
				sc_last_error());
		it_log("'w' of {2, 3}: %s", sc_last_error());
	} else {
		for (int step = 0; step < 3; step++) {
			ps_fill(w, rank);
			IT_CHECK_SC(sc_allreduce(c, w, SC_OP_SUM, IT_OP_TIMEOUT_MS),
				    "'w' of {0, 1} after rank 3 died, step %d", step);
			ps_check(w, low, 2, 0, "'w' of {0, 1} after rank 3 died");
		}
		it_log("{0, 1} went on, exact, after rank 3 died");
	}
	ps_fill(g, rank);
	sc_status_t st = sc_allreduce(c, g, SC_OP_SUM, IT_ERROR_TIMEOUT_MS);
	if (st == SC_OK || !it_mentions_rank(sc_last_error(), 3))
		IT_FAIL("'g' of every rank after rank 3 died: %s (%s)", sc_status_name(st),
			sc_last_error());
	it_log("'g' of every rank: %s", sc_last_error());
	sc_finalize(c);
	it_pass();
}

/*
 * psets-timeout, 2 nodes x 1: rank 0's sc_process_set_add times out before rank 1 calls
 * it; rank 1's then completes the agreement (and waits in the barrier that follows, which
 * rank 0 enters). The agreement's buffer ('sparsecomm.process_set.1') is released by rank
 * 0's next registration once the agreement has ended, not kept until sc_finalize: that
 * registration may take the name itself.
 */
int it_psets_timeout(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	int ranks[2] = {0, 1}, id = -1;
	if (sc_size(c) != 2)
		IT_FAIL("runs with 2 trainers, not %d", sc_size(c));
	it_barrier(c, "psets-timeout.start", 0);
	if (sc_rank(c) == 0) {
		sc_status_t st = sc_process_set_add(c, ranks, 2, 300, &id);
		if (st != SC_ERR_TIMEOUT)
			IT_FAIL("rank 0's add alone: %s (%s), expected SC_ERR_TIMEOUT",
				sc_status_name(st), sc_last_error());
		IT_CHECK_SC(sc_barrier(c, IT_OP_TIMEOUT_MS), "the barrier of rank 1's add");
		/* the agreement has ended (rank 1 passed it to reach the barrier) */
		sc_tensor_t *t = NULL;
		IT_CHECK_SC(sc_register(c, "sparsecomm.process_set.1", SC_INT32, 4, &t),
			    "registering the timed-out agreement's name after it ended");
		IT_CHECK_SC(sc_tensor_release(c, t), "sc_tensor_release");
	} else {
		it_sleep_ms(1000); /* after rank 0's add has timed out */
		IT_CHECK_SC(sc_process_set_add(c, ranks, 2, IT_OP_TIMEOUT_MS, &id),
			    "rank 1's add");
	}
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
