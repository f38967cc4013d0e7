/*
 * itest_evict.c: the response cache's bound (cache_max_entries, world/cache.c). The daemons
 * run with a small bound: hundreds of uniquely named allreduces stay exact while every
 * daemon keeps at most the bound in entries; a name whose entry went while it was idle
 * is used again, exact; and names in rotation, submitted in another order on each rank
 * with one trainer late, have nodes announce ids the coordinator has just evicted, which
 * it drops and the node announces again in full, every step exact; and lanes of grouped
 * allreduces and of a process set without the last rank among them (mixed).
 */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EV_NUMEL = 4 };

static double cache_entries(void)
{
	return it_node_stat("cache_entries");
}

/* Starts an allreduce of t with the pattern of seed. */
static sc_handle_t start(sc_client_t *c, sc_tensor_t *t, uint64_t seed)
{
	sc_handle_t h = 0;
	it_fill(sc_tensor_data(t), SC_FLOAT32, EV_NUMEL, seed, sc_rank(c), 1);
	IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "allreduce of '%s'",
		    sc_tensor_name(t));
	return h;
}

/* Checks t's sum of the pattern of seed. */
static void check_sum(sc_client_t *c, sc_tensor_t *t, uint64_t seed)
{
	char why[256];
	if (it_check(sc_tensor_data(t), SC_FLOAT32, EV_NUMEL, seed, sc_size(c), 1, SC_OP_SUM,
		     why, sizeof(why)))
		IT_FAIL("allreduce of '%s' (seed %llu): wrong sum: %s", sc_tensor_name(t),
			(unsigned long long)seed, why);
}

/* Waits for h, t's allreduce of seed, and checks the sum. */
static void finish(sc_client_t *c, sc_tensor_t *t, sc_handle_t h, uint64_t seed)
{
	int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
	if (r != SC_OK)
		IT_FAIL("allreduce of '%s' (seed %llu): %s: %s", sc_tensor_name(t),
			(unsigned long long)seed, it_wait_name(r), it_wait_error());
	check_sum(c, t, seed);
}

/* Fails when this daemon holds more than bound entries. */
static void within(double bound, const char *when)
{
	double n = cache_entries();
	if (n > bound)
		IT_FAIL("%s: this daemon holds %.0f response cache entries, cache_max_entries "
			"is %.0f",
			when, n, bound);
}

/* Hundreds of names used once each (and released, as a binding does past its bound),
 * the held name idle meanwhile and used again after. */
static void unique_names(sc_client_t *c, double bound)
{
	enum { N = 300 };
	sc_tensor_t *held = it_register(c, "evict.held", SC_FLOAT32, EV_NUMEL);
	finish(c, held, start(c, held, 1), 1);
	double peak = 0;
	for (int k = 0; k < N; k++) {
		char name[32];
		snprintf(name, sizeof(name), "evict.step.%d", k);
		sc_tensor_t *t = it_register(c, name, SC_FLOAT32, EV_NUMEL);
		finish(c, t, start(c, t, 100 + (uint64_t)k), 100 + (uint64_t)k);
		IT_CHECK_SC(sc_tensor_release(c, t), "release of '%s'", name);
		if (k % 25 == 24) {
			char when[64];
			snprintf(when, sizeof(when), "after %d uniquely named allreduces",
				 k + 1);
			within(bound, when);
			double n = cache_entries();
			peak = n > peak ? n : peak;
		}
	}
	/* its entry went long ago (the least recently planned): announced in full again */
	for (int k = 0; k < 3; k++)
		finish(c, held, start(c, held, 2 + (uint64_t)k), 2 + (uint64_t)k);
	within(bound, "after 'evict.held' came back");
	it_log("%d uniquely named allreduces exact, at most %.0f cache entries (bound %.0f); "
	       "'evict.held' exact again after its eviction",
	       N, peak, bound);
	IT_CHECK_SC(sc_tensor_release(c, held), "release of 'evict.held'");
}

/* Names in lanes, each its own sequence of steps (the next submitted as soon as the last
 * is checked), rank 0 (on the coordinator's node) late by up to 3 ms a submission: with a
 * bound below the lanes, every plan evicts, and the coordinator often evicts the id of a
 * name another node has just announced by it, before that announcement arrives (it drops
 * it, and the node announces the name again in full). */
static void rotation(sc_client_t *c, int steps)
{
	enum { R = 8 };
	int rank = sc_rank(c);
	sc_tensor_t *t[R];
	sc_handle_t h[R];
	int done[R], left = R;
	srand(1000u + (unsigned)rank);
	for (int i = 0; i < R; i++) {
		char name[32];
		snprintf(name, sizeof(name), "evict.lane.%d", i);
		t[i] = it_register(c, name, SC_FLOAT32, EV_NUMEL);
		done[i] = 0;
		h[i] = start(c, t[i], (uint64_t)i);
	}
	double t0 = it_now_s();
	while (left) {
		int moved = 0;
		for (int i = 0; i < R; i++) {
			sc_status_t st = done[i] == steps ? SC_IN_PROGRESS : sc_poll(c, h[i]);
			if (st == SC_IN_PROGRESS)
				continue;
			if (st != SC_OK)
				IT_FAIL("allreduce of '%s' step %d: %s: %s",
					sc_tensor_name(t[i]), done[i], sc_status_name(st),
					sc_last_error());
			moved = 1;
			check_sum(c, t[i], (uint64_t)(done[i] * R + i));
			if (++done[i] == steps) {
				left--;
				continue;
			}
			if (rank == 0)
				it_sleep_ms(rand() % 4);
			h[i] = start(c, t[i], (uint64_t)(done[i] * R + i));
		}
		if (!moved)
			it_sleep_ms(1);
		if (it_now_s() - t0 > IT_OP_TIMEOUT_MS / 1000.0)
			IT_FAIL("%d lanes of %d steps not done after %d ms", R, steps,
				IT_OP_TIMEOUT_MS);
	}
	/* how often this node's announcement by id lost the race (not checked: timing) */
	it_log("%d lanes of %d steps each, rank 0 late: exact; this node announced %.0f again "
	       "in full after an eviction",
	       R, steps, it_node_stat("cache_reannounced"));
}

/* Lanes of three kinds past a bound of 2: a lone allreduce, a grouped allreduce of two
 * tensors (each member's id evicted on its own, one announced by id and its mate again in
 * full), and an allreduce in the process set of every rank but the last (whose node never
 * announces it, and still drops its ids with the others). Rank 0 late by up to 3 ms a
 * submission, lanes in another order on each rank. */
enum { MX_LANES = 6 };

typedef struct {
	int kind; /* 0: alone, 1: a group of two, 2: in the process set */
	sc_tensor_t *t[2];
	sc_handle_t h[2];
	int ended[2]; /* the member's handle has been collected */
	int n, done;
} mx_lane_t;

static void mx_start(sc_client_t *c, mx_lane_t *l, uint64_t seed)
{
	l->ended[0] = l->ended[1] = 0;
	if (l->kind != 1) {
		l->h[0] = start(c, l->t[0], seed);
		return;
	}
	sc_group_t g = 0;
	IT_CHECK_SC(sc_group_begin(c, 2, &g), "sc_group_begin");
	for (int k = 0; k < 2; k++) {
		IT_CHECK_SC(sc_group_add(c, g, l->t[k]), "sc_group_add");
		l->h[k] = start(c, l->t[k], seed + 1000u * (uint64_t)k);
	}
	IT_CHECK_SC(sc_group_end(c, g), "sc_group_end");
}

static void mixed(sc_client_t *c, int steps)
{
	int rank = sc_rank(c), size = sc_size(c), set[8], n_set = size - 1;
	if (size > 8)
		IT_FAIL("mixed: at most 8 trainers, the job has %d", size);
	for (int r = 0; r < n_set; r++)
		set[r] = r;
	int ps = -1;
	IT_CHECK_SC(sc_process_set_add(c, set, n_set, IT_OP_TIMEOUT_MS, &ps),
		    "sc_process_set_add");
	mx_lane_t lanes[MX_LANES];
	int left = 0;
	srand(2000u + (unsigned)rank);
	for (int i = 0; i < MX_LANES; i++) {
		mx_lane_t *l = &lanes[i];
		memset(l, 0, sizeof(*l));
		l->kind = i % 3;
		l->n = l->kind == 1 ? 2 : 1;
		if (l->kind == 2 && rank >= n_set) { /* outside the set: never registers it */
			l->done = steps;
			continue;
		}
		for (int k = 0; k < l->n; k++) {
			char name[32];
			snprintf(name, sizeof(name), "evict.mixed.%d.%d", i, k);
			if (l->kind != 2) {
				l->t[k] = it_register(c, name, SC_FLOAT32, EV_NUMEL);
				continue;
			}
			sc_tensor_opts_t o;
			memset(&o, 0, sizeof(o));
			o.struct_size = sizeof(o);
			o.process_set = ps;
			IT_CHECK_SC(sc_register_ex(c, name, SC_FLOAT32, EV_NUMEL, &o, &l->t[k]),
				    "registering '%s' in process set %d", name, ps);
		}
		left++;
	}
	for (int j = 0; j < MX_LANES; j++) { /* rank 0 in lane order, the others reversed */
		int i = rank ? MX_LANES - 1 - j : j;
		if (lanes[i].done < steps)
			mx_start(c, &lanes[i], (uint64_t)i);
	}
	double t0 = it_now_s();
	while (left) {
		int moved = 0;
		for (int i = 0; i < MX_LANES; i++) {
			mx_lane_t *l = &lanes[i];
			if (l->done == steps)
				continue;
			int ended = 0;
			for (int k = 0; k < l->n; k++) {
				if (l->ended[k]) {
					ended++;
					continue;
				}
				sc_status_t st = sc_poll(c, l->h[k]);
				if (st != SC_OK && st != SC_IN_PROGRESS)
					IT_FAIL("allreduce of '%s' step %d: %s: %s",
						sc_tensor_name(l->t[k]), l->done,
						sc_status_name(st), sc_last_error());
				l->ended[k] = st == SC_OK;
				ended += st == SC_OK;
			}
			if (ended < l->n)
				continue;
			moved = 1;
			uint64_t seed = (uint64_t)(l->done * MX_LANES + i);
			for (int k = 0; k < l->n; k++) {
				char why[256];
				if (it_check(sc_tensor_data(l->t[k]), SC_FLOAT32, EV_NUMEL,
					     seed + 1000u * (uint64_t)k,
					     l->kind == 2 ? n_set : size, 1, SC_OP_SUM, why,
					     sizeof(why)))
					IT_FAIL("allreduce of '%s' step %d: wrong sum: %s",
						sc_tensor_name(l->t[k]), l->done, why);
			}
			if (++l->done == steps) {
				left--;
				continue;
			}
			if (rank == 0)
				it_sleep_ms(rand() % 4);
			mx_start(c, l, (uint64_t)(l->done * MX_LANES + i));
		}
		if (!moved)
			it_sleep_ms(1);
		if (it_now_s() - t0 > IT_OP_TIMEOUT_MS / 1000.0)
			IT_FAIL("%d mixed lanes of %d steps not done after %d ms", MX_LANES,
				steps, IT_OP_TIMEOUT_MS);
	}
	it_log("%d lanes (alone, grouped, in a process set without rank %d) of %d steps, "
	       "rank 0 late: exact; this node announced %.0f again in full after an eviction",
	       MX_LANES, size - 1, steps, it_node_stat("cache_reannounced"));
}

int it_evict(int argc, char **argv)
{
	if (argc < 3)
		IT_FAIL("usage: evict BOUND unique|rotation|mixed (BOUND: the daemons' "
			"cache_max_entries)");
	double bound = atof(argv[1]);
	sc_client_t *c = it_connect();
	if (sc_size(c) < 2)
		IT_FAIL("needs at least 2 trainers, the job has %d", sc_size(c));
	it_sparsectl_find();
	if (!strcmp(argv[2], "unique"))
		unique_names(c, bound);
	else if (!strcmp(argv[2], "mixed"))
		mixed(c, 300);
	else
		rotation(c, 400);
	IT_CHECK_SC(sc_finalize(c), "sc_finalize");
	it_pass();
}
