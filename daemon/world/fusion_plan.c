/*
 * fusion_plan.c: the fusion planner and the coordinator's cached plan (see fusion_plan.h).
 */
#include "world/fusion_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const mode_names[SCD_FUSION_MODE_COUNT] = {"layerwise", "fixed", "aligned",
							      "adaptive"};

int scd_fusion_mode_parse(const char *name)
{
	for (int m = 0; name && m < SCD_FUSION_MODE_COUNT; m++)
		if (!strcmp(name, mode_names[m]))
			return m;
	return -1;
}

const char *scd_fusion_mode_name(scd_fusion_mode_t m)
{
	return (unsigned)m < SCD_FUSION_MODE_COUNT ? mode_names[m] : "?";
}

static double pos0(double v)
{
	return v > 0 ? v : 0;
}

/* T_cm of a buffer of x dense bytes from the measured points (see scd_fplan_comm_t), or
 * -1 when fewer than two sizes are measured. */
static double comm_at(const scd_fplan_comm_t *m, double alpha_s, double x)
{
	int n = 0, k[SCD_FPLAN_COMM_POINTS];
	for (int i = 0; m && i < SCD_FPLAN_COMM_POINTS; i++)
		if (m->bytes[i] > 0)
			k[n++] = i;
	if (n < 2)
		return -1;
	int i = 1; /* the segment [k[i-1], k[i]] holding x, or the nearest end one */
	while (i < n - 1 && m->bytes[k[i]] < x)
		i++;
	double x0 = m->bytes[k[i - 1]], x1 = m->bytes[k[i]];
	double y0 = m->time_s[k[i - 1]], y1 = m->time_s[k[i]];
	double slope = x1 > x0 ? pos0((y1 - y0) / (x1 - x0)) : 0;
	double y = x < x0 ? y0 - slope * (x0 - x) : y0 + slope * (x - x0);
	return y > alpha_s ? y : alpha_s;
}

double scd_fplan_tcm(const scd_fplan_cfg_t *cfg, const scd_fplan_tensor_t *t, int a, int b)
{
	double s = cfg->alpha_s, bytes = 0;
	for (int j = a; j < b; j++) {
		s += pos0(t[j].cm_s);
		bytes += (double)t[j].bytes;
	}
	double m = comm_at(cfg->comm, cfg->alpha_s, bytes);
	return m >= 0 ? m : s;
}

double scd_fplan_fuse(const scd_fplan_tensor_t *t, int a, int b)
{
	double s = 0;
	for (int j = a; j < b; j++)
		s += pos0(t[j].tcp_s) + pos0(t[j].tb_s);
	return s;
}

/* Whether tensor j must open a buffer whatever the mode: a solo tensor, the one after
 * it, a learnt break, or a change of fusion key. */
static int forced(const scd_fplan_tensor_t *t, int j)
{
	return j == 0 || t[j].solo || t[j - 1].solo || t[j].brk || t[j].key != t[j - 1].key;
}

/* Whether tensor j continues the buffer before it whatever the mode: a class that fuses
 * whole (ExDyna over the model), not forced apart. */
static int joins(const scd_fplan_tensor_t *t, int j)
{
	return t[j].whole && !forced(t, j);
}

/* Whether every tensor but the idle ones has all its times. */
static int measured(const scd_fplan_tensor_t *t, int L)
{
	for (int j = 0; j < L; j++)
		if (!t[j].idle && (t[j].tcp_s < 0 || t[j].tb_s < 0 || t[j].cm_s < 0))
			return 0;
	return 1;
}

/* eq. 2 for a first buffer of tensors [0, n): its fusion time plus its communication beat
 * the layer-wise communication of the same tensors. */
static int eq2_holds(const scd_fplan_cfg_t *cfg, const scd_fplan_tensor_t *t, int n)
{
	double tb = 0, layerwise = 0;
	for (int l = 0; l < n; l++) {
		tb += pos0(t[l].tb_s);
		layerwise += scd_fplan_tcm(cfg, t, l, l + 1);
	}
	return tb + scd_fplan_tcm(cfg, t, 0, n) < layerwise;
}

/* The first buffer's size: the fewest tensors (at least two) for which eq. 2 holds, so
 * that the pipeline starts as early as fusing pays; 1 when no such prefix exists before
 * a forced boundary. */
static int first_size(const scd_fplan_cfg_t *cfg, const scd_fplan_tensor_t *t, int L)
{
	for (int n = 2; n <= L && n <= SCD_FPLAN_MAX_ITEMS && !forced(t, n - 1); n++)
		if (eq2_holds(cfg, t, n))
			return n;
	return 1;
}

/* eq. 3: the first M' with sum_{i<=M'} T_cm(i) > sum_{i>=2} (T_cp(i) + T_b(i)), M' < M;
 * buffers M' .. M then merge (key and solo boundaries stay, and a buffer still holds at
 * most SCD_FPLAN_MAX_ITEMS tensors). */
static void long_tail(const scd_fplan_cfg_t *cfg, const scd_fplan_tensor_t *t, int L,
		      uint8_t *start)
{
	int M = 0, *first = malloc(sizeof(int) * ((size_t)L + 1));
	if (!first)
		return; /* the plan stays without the merge */
	for (int j = 0; j < L; j++)
		if (start[j])
			first[M++] = j;
	first[M] = L;
	double fuse_rest = M > 1 ? scd_fplan_fuse(t, first[1], L) : 0, comm = 0;
	for (int i = 0; i + 1 < M; i++) {
		comm += scd_fplan_tcm(cfg, t, first[i], first[i + 1]);
		if (comm > fuse_rest) {
			for (int j = first[i] + 1, items = 1; j < L; j++, items++) {
				start[j] = forced(t, j) || items == SCD_FPLAN_MAX_ITEMS;
				items = start[j] ? 0 : items;
			}
			break;
		}
	}
	free(first);
}

int scd_fplan_plan(const scd_fplan_cfg_t *cfg, const scd_fplan_tensor_t *t, int L,
		   uint8_t *start)
{
	scd_fusion_mode_t mode = cfg->mode;
	int M = cfg->buffers > 0 ? cfg->buffers : 1;
	int per = (L + M - 1) / M; /* aligned: N_i = ceil(L / M) */
	if (mode == SCD_FUSION_ADAPTIVE && !measured(t, L))
		mode = SCD_FUSION_ALIGNED;
	uint64_t bytes = 0;
	int a = 0, n_buf = 0, items = 0;
	int first = mode == SCD_FUSION_ADAPTIVE ? first_size(cfg, t, L) : 0;
	double prev_cm = 0;
	for (int j = 0; j < L; j++) {
		int open = forced(t, j) || items == SCD_FPLAN_MAX_ITEMS;
		switch (mode) {
		case SCD_FUSION_LAYERWISE:
			open = 1;
			break;
		case SCD_FUSION_FIXED:
			open = open || bytes + t[j].bytes > cfg->fixed_bytes ||
			       t[j - 1].bytes >= cfg->fixed_bytes;
			break;
		case SCD_FUSION_ALIGNED:
			open = open || j % per == 0;
			break;
		default: /* buffer 1 by eq. 2; buffer i >= 2 grows while eq. 1 holds:
			  * T_cm(i-1) >= T_cp(i) + T_b(i) */
			open = open || (n_buf == 1 ? j >= first
						   : prev_cm < scd_fplan_fuse(t, a, j + 1));
			break;
		}
		if (joins(t, j) && items < SCD_FPLAN_MAX_ITEMS)
			open = 0;
		if (open) {
			if (j > 0)
				prev_cm = scd_fplan_tcm(cfg, t, a, j);
			a = j, bytes = 0, items = 0, n_buf++;
		}
		start[j] = (uint8_t)open;
		bytes += t[j].bytes;
		items++;
	}
	if (mode == SCD_FUSION_ADAPTIVE) {
		long_tail(cfg, t, L, start);
		n_buf = 0;
		for (int j = 0; j < L; j++)
			n_buf += start[j];
	}
	return n_buf;
}

/* ---- the cached plan ------------------------------------------------------------------ */

int scd_fplan_state_init(scd_fplan_state_t *s, int P)
{
	memset(s, 0, sizeof(*s));
	s->P = P > 0 ? P : 1;
	s->cfg.mode = SCD_FUSION_MODE_COUNT; /* none yet: the first update plans */
	return 0;
}

void scd_fplan_state_free(scd_fplan_state_t *s)
{
	free(s->ids);
	free(s->t);
	free(s->rank_t);
	free(s->snap);
	free(s->buf);
	free(s->pos_of);
	free(s->prev_buf);
	memset(s, 0, sizeof(*s));
}

/*
 * Positions by cache id: open addressing over cap_pos slots (a power of two, at least
 * twice the tensors), each a position plus one (0: free) of the id at that position. The
 * ids grow without bound (a job naming a tensor anew every step; the response cache evicts
 * the old ones, world/cache.c) while the plan's tensors do not, so the map is sized by the
 * tensors; it is made again whenever positions move (a tensor added, replaced or removed),
 * which is at a new or evicted id, not at every step.
 */
static uint32_t pos_home(const scd_fplan_state_t *s, uint32_t id)
{
	return (id * 2654435761u) & (s->cap_pos - 1);
}

int scd_fplan_pos(const scd_fplan_state_t *s, uint32_t id)
{
	for (uint32_t h = s->cap_pos ? pos_home(s, id) : 0; s->cap_pos;
	     h = (h + 1) & (s->cap_pos - 1)) {
		int32_t p = s->pos_of[h];
		if (!p)
			break;
		if (s->ids[p - 1] == id)
			return p - 1;
	}
	return -1;
}

/* Maps ids[k] to position k. */
static void pos_put(scd_fplan_state_t *s, int k)
{
	uint32_t h = pos_home(s, s->ids[k]);
	while (s->pos_of[h])
		h = (h + 1) & (s->cap_pos - 1);
	s->pos_of[h] = k + 1;
}

/* Makes the map again from ids[0..n-1]. */
static void pos_rebuild(scd_fplan_state_t *s)
{
	memset(s->pos_of, 0, sizeof(int32_t) * s->cap_pos);
	for (int k = 0; k < s->n; k++)
		pos_put(s, k);
}

static int grow(void **p, size_t elem, int cap)
{
	void *q = realloc(*p, elem * (size_t)cap);
	if (!q)
		return -1;
	*p = q;
	return 0;
}

/* Room in the map for n tensors (it stays at most half full). */
static int pos_map(scd_fplan_state_t *s, int n)
{
	if (2 * (uint64_t)n <= s->cap_pos)
		return 0;
	uint32_t cap = s->cap_pos ? s->cap_pos : 256;
	while (2 * (uint64_t)n > cap)
		cap *= 2;
	int32_t *p = realloc(s->pos_of, cap * sizeof(int32_t));
	if (!p)
		return -1;
	s->pos_of = p;
	s->cap_pos = cap;
	pos_rebuild(s);
	return 0;
}

static void clear_times(scd_fplan_state_t *s, int k)
{
	s->t[k].tcp_s = s->t[k].tb_s = s->t[k].cm_s = -1;
	for (int i = 0; i < 3 * s->P; i++)
		s->rank_t[(size_t)k * 3 * (size_t)s->P + (size_t)i] = -1;
	for (int i = 0; i < 3; i++)
		s->snap[3 * k + i] = -1;
}

/* A tensor of a class that fuses whole, appended at position k (the last): moved to just
 * after the class's last tensor, so the class stays one run of the plan order (and one
 * buffer) whatever tensors of other classes were planned between its members. Returns
 * its position. */
static int class_slot(scd_fplan_state_t *s, int k, uint32_t key)
{
	int p = k;
	while (p > 0 && !(s->t[p - 1].whole && s->t[p - 1].key == key))
		p--;
	if (p == 0 || p == k)
		return k;
	size_t rest = (size_t)(k - p), P3 = 3 * (size_t)s->P;
	memmove(&s->ids[p + 1], &s->ids[p], rest * sizeof(uint32_t));
	memmove(&s->t[p + 1], &s->t[p], rest * sizeof(scd_fplan_tensor_t));
	memmove(&s->rank_t[(p + 1) * P3], &s->rank_t[p * P3], rest * P3 * sizeof(double));
	memmove(&s->snap[3 * (p + 1)], &s->snap[3 * p], rest * 3 * sizeof(double));
	memmove(&s->buf[p + 1], &s->buf[p], rest * sizeof(int));
	s->buf[p] = -1;
	return p;
}

int scd_fplan_add(scd_fplan_state_t *s, uint32_t id, uint32_t old_id, uint64_t bytes,
		  uint32_t key, int flags)
{
	if (pos_map(s, s->n + 1) != 0)
		return -1;
	int k = scd_fplan_pos(s, old_id), moved = k >= 0; /* (the place's id changes) */
	if (k < 0) {
		if (s->n == s->cap) {
			int cap = s->cap ? 2 * s->cap : 64;
			if (grow((void **)&s->ids, sizeof(uint32_t), cap) ||
			    grow((void **)&s->t, sizeof(scd_fplan_tensor_t), cap) ||
			    grow((void **)&s->rank_t, sizeof(double) * 3 * (size_t)s->P, cap) ||
			    grow((void **)&s->snap, sizeof(double) * 3, cap) ||
			    grow((void **)&s->buf, sizeof(int), cap))
				return -1;
			s->cap = cap;
		}
		k = s->n++;
		s->buf[k] = -1;
		if (flags & SCD_FPLAN_WHOLE) {
			int p = class_slot(s, k, key);
			moved = p != k;
			k = p;
		}
	}
	s->ids[k] = id;
	if (moved)
		pos_rebuild(s);
	else /* appended */
		pos_put(s, k);
	s->t[k] = (scd_fplan_tensor_t){.bytes = bytes,
				       .seen = s->arrivals,
				       .seen_ms = UINT64_MAX,
				       .key = key,
				       .solo = !!(flags & SCD_FPLAN_SOLO),
				       .whole = !!(flags & SCD_FPLAN_WHOLE)};
	clear_times(s, k);
	s->from_times = 0;
	s->dirty = 1;
	return 0;
}

void scd_fplan_break(scd_fplan_state_t *s, uint32_t id)
{
	int k = scd_fplan_pos(s, id);
	if (k > 0 && !s->t[k].brk && ++s->t[k].misses >= SCD_FPLAN_MISSES) {
		s->t[k].brk = 1;
		s->broke = 1;
	}
}

/* Breaks learnt under a running adaptive plan made from measured times: the plan stays,
 * each learnt break opening a buffer where it is not one's first tensor (re-planned from
 * the profiles, a break took no trial and moved every boundary: at width 512 on a loaded
 * host the plan jumped from 9 buffers to 48). buf[0..n-1] is a plan's buffer of each
 * position (the running one, or the one a trial may bring back, split alike); *n_buf its
 * count. Returns whether a boundary was added. */
static int split_at_breaks(const scd_fplan_state_t *s, int *buf, int *n_buf)
{
	int b = -1, changed = 0, was = -1; /* was: position k - 1's buffer before */
	for (int k = 0; k < s->n; k++) {
		int open = k == 0 || buf[k] != was;
		changed |= !open && s->t[k].brk;
		open = open || s->t[k].brk;
		was = buf[k];
		b += open;
		buf[k] = b;
	}
	*n_buf = b + 1;
	return changed;
}

void scd_fplan_partial(scd_fplan_state_t *s, int a, int end, const uint8_t *ready, int grouped,
		       uint64_t last_ms)
{
	if (a < 0 || end > s->n || end - a > SCD_FPLAN_MAX_ITEMS)
		return;
	int went = 0;
	uint8_t was_pend[SCD_FPLAN_MAX_ITEMS]; /* missing the last time too */
	for (int k = a; k < end; k++) {
		went += ready[k - a] != 0;
		was_pend[k - a] = (uint8_t)s->t[k].pend;
	}
	int pattern = went < 2 || grouped;
	for (int k = a; k < end; k++) {
		int is = ready[k - a] != 0, was = k > a ? ready[k - 1 - a] != 0 : is;
		/* counts if still missing the next time; the first one missing after those
		 * that went teaches the wait when it comes (the gap after the latest that went)
		 */
		if (!pattern && !is)
			s->t[k].pend = 1, s->t[k].pend_ms = was && k > a ? last_ms : UINT64_MAX;
		if (is && was && k > a) /* went with the one before it: misses in a row */
			s->t[k].misses = 0;
		if (is == was)
			continue;
		/* a pattern; else a tensor missing since the last time (the steps skip it):
		 * a break where it goes missing, and where the tensors after it come without
		 * it (a buffer's first tensor that never comes) */
		if (pattern || (!is && was_pend[k - a]) || (is && was_pend[k - 1 - a]))
			scd_fplan_break(s, s->ids[k]);
	}
}

void scd_fplan_arrived(scd_fplan_state_t *s, int pos, uint64_t ready_ms, uint64_t wait_ms)
{
	if (pos < 0 || pos >= s->n)
		return;
	if (s->t[pos].seen_ms != ready_ms) {
		s->t[pos].seen_ms = ready_ms;
		s->t[pos].seen = ++s->arrivals;
	}
	s->t[pos].idle = 0;
	if (!s->t[pos].pend)
		return;
	s->t[pos].pend = 0;
	/* a gap the longest wait would not cover is a step that skipped the tensor, not a
	 * slow one: nothing to learn */
	uint64_t gap = ready_ms > s->t[pos].pend_ms ? ready_ms - s->t[pos].pend_ms : 0;
	if (gap <= SCD_FPLAN_WAIT_MAX * wait_ms && gap + gap / 4 > s->late_ms)
		s->late_ms = gap + gap / 4;
}

uint64_t scd_fplan_wait_ms(const scd_fplan_state_t *s, uint64_t wait_ms)
{
	uint64_t w = s->late_ms > wait_ms ? s->late_ms : wait_ms;
	return w > SCD_FPLAN_WAIT_MAX * wait_ms ? SCD_FPLAN_WAIT_MAX * wait_ms : w;
}

/* The current plan's step time is measured anew (it just changed). */
static void period_reset(scd_fplan_state_t *s)
{
	s->period_n = 0;
	s->period_skip = SCD_FPLAN_TRIAL_SKIP;
}

/* The median of the last SCD_FPLAN_TRIAL_STEPS periods (the upper one of an even count). */
static double period_median(const scd_fplan_state_t *s)
{
	int n = s->period_n < SCD_FPLAN_TRIAL_STEPS ? s->period_n : SCD_FPLAN_TRIAL_STEPS;
	double v[SCD_FPLAN_TRIAL_STEPS];
	memcpy(v, s->period, sizeof(double) * (size_t)n);
	for (int i = 1; i < n; i++) /* insertion sort: a handful */
		for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
			double x = v[j];
			v[j] = v[j - 1];
			v[j - 1] = x;
		}
	return n ? v[n / 2] : 0;
}

void scd_fplan_step(scd_fplan_state_t *s, uint64_t ms)
{
	uint64_t last = s->step_ms;
	if (ms <= last)
		return; /* the same step's mark again, or out of order */
	s->step_ms = ms;
	if (s->hold > 0)
		s->hold--;
	if (!last)
		return;
	if (s->period_skip > 0) {
		s->period_skip--;
		return;
	}
	s->period[s->period_n % SCD_FPLAN_TRIAL_STEPS] = (double)(ms - last) * 1e-3;
	s->period_n++;
}

void scd_fplan_whole(scd_fplan_state_t *s, int a, int end)
{
	s->late_ms -= (s->late_ms + 15) / 16;
	for (int k = a < 0 ? 0 : a; k < end && k < s->n; k++)
		s->t[k].misses = 0;
}

void scd_fplan_remove(scd_fplan_state_t *s, uint32_t id)
{
	int k = scd_fplan_pos(s, id);
	if (k < 0)
		return;
	size_t rest = (size_t)(s->n - k - 1), P3 = 3 * (size_t)s->P;
	memmove(&s->ids[k], &s->ids[k + 1], rest * sizeof(uint32_t));
	memmove(&s->t[k], &s->t[k + 1], rest * sizeof(scd_fplan_tensor_t));
	memmove(&s->rank_t[k * P3], &s->rank_t[(k + 1) * P3], rest * P3 * sizeof(double));
	memmove(&s->snap[3 * k], &s->snap[3 * (k + 1)], rest * 3 * sizeof(double));
	memmove(&s->buf[k], &s->buf[k + 1], rest * sizeof(int));
	s->n--;
	pos_rebuild(s);
	s->dirty = 1;
}

void scd_fplan_report(scd_fplan_state_t *s, int rank, uint32_t id, double tcp_s, double tb_s,
		      double cm_s)
{
	int k = scd_fplan_pos(s, id);
	if (k < 0 || rank < 0 || rank >= s->P)
		return;
	double in[3] = {tcp_s, tb_s, cm_s}, out[3];
	double *r = &s->rank_t[((size_t)k * (size_t)s->P + (size_t)rank) * 3];
	for (int i = 0; i < 3; i++) {
		double v = isfinite(in[i]) && in[i] > 0 ? in[i] : 0;
		r[i] = r[i] < 0 ? v : (1 - SCD_FPLAN_EWMA) * r[i] + SCD_FPLAN_EWMA * v;
		out[i] = -1; /* the slowest rank's, once every rank reported */
	}
	int all = 1;
	for (int q = 0; q < s->P; q++) {
		const double *o = &s->rank_t[((size_t)k * (size_t)s->P + (size_t)q) * 3];
		all = all && o[0] >= 0;
		for (int i = 0; i < 3; i++)
			if (o[i] > out[i])
				out[i] = o[i];
	}
	if (all) {
		s->t[k].tcp_s = out[0];
		s->t[k].tb_s = out[1];
		s->t[k].cm_s = out[2];
	}
	s->reports++;
}

/* Whether some tensor's times moved past the hysteresis since the plan was made. */
static int drifted(const scd_fplan_state_t *s)
{
	if (s->reports < SCD_FPLAN_MIN_REPORTS * (uint64_t)s->n)
		return 0;
	for (int k = 0; k < s->n; k++) {
		const double now[3] = {s->t[k].tcp_s, s->t[k].tb_s, s->t[k].cm_s};
		for (int i = 0; i < 3; i++) {
			double was = s->snap[3 * k + i];
			if ((was < 0) != (now[i] < 0))
				return 1;
			double scale =
			    was > SCD_FPLAN_DRIFT_FLOOR_S ? was : SCD_FPLAN_DRIFT_FLOOR_S;
			if (fabs(now[i] - was) > SCD_FPLAN_DRIFT * scale)
				return 1;
		}
	}
	return 0;
}

double scd_fplan_step_s(const scd_fplan_cfg_t *cfg, const scd_fplan_tensor_t *t, int L,
			const uint8_t *start)
{
	double fuse_end = 0, comm_end = 0;
	for (int a = 0, b; a < L; a = b) {
		for (b = a + 1; b < L && !start[b]; b++)
			;
		fuse_end += scd_fplan_fuse(t, a, b);
		comm_end =
		    (comm_end > fuse_end ? comm_end : fuse_end) + scd_fplan_tcm(cfg, t, a, b);
	}
	return comm_end;
}

/* The point of a buffer of x dense bytes: its power of two. */
static int comm_point(double x)
{
	int i = x >= 1 ? (int)floor(log2(x)) : 0;
	return i < SCD_FPLAN_COMM_POINTS ? i : SCD_FPLAN_COMM_POINTS - 1;
}

/* Folds the current plan's buffers, every tensor of which is measured, into s->comm: each
 * buffer's alpha_s + the sum of its cm_s (its measured communication: the shares are of
 * it) at its bytes. */
static void fold_comm(scd_fplan_state_t *s)
{
	for (int a = 0, b; a < s->n; a = b) {
		int timed = s->t[a].cm_s >= 0;
		for (b = a + 1; b < s->n && s->buf[b] == s->buf[a]; b++)
			timed = timed && s->t[b].cm_s >= 0;
		if (!timed || s->buf[a] < 0)
			continue;
		double bytes = 0, tcm = s->cfg.alpha_s;
		for (int j = a; j < b; j++) {
			bytes += (double)s->t[j].bytes;
			tcm += s->t[j].cm_s;
		}
		int i = comm_point(bytes);
		double *x = &s->comm.bytes[i], *y = &s->comm.time_s[i];
		int first = *x <= 0;
		*x = first ? bytes : (1 - SCD_FPLAN_EWMA) * *x + SCD_FPLAN_EWMA * bytes;
		*y = first ? tcm : (1 - SCD_FPLAN_EWMA) * *y + SCD_FPLAN_EWMA * tcm;
	}
}

/* A plan's hash from its start flags: start[k] for position k, or, start NULL, whether
 * buf[k] opens a buffer (the current plan). */
static uint64_t plan_hash_of(const uint8_t *start, const int *buf, int n)
{
	uint64_t h = 1469598103934665603ull;
	for (int k = 0; k < n; k++) {
		uint8_t open = start ? start[k] : (uint8_t)(k == 0 || buf[k] != buf[k - 1]);
		h = (h ^ open ^ ((uint64_t)k << 8)) * 1099511628211ull;
	}
	return h ? h : 1;
}

static uint64_t plan_hash(const uint8_t *start, int n)
{
	return plan_hash_of(start, NULL, n);
}

/* Whether plan start is predicted SCD_FPLAN_GAIN faster than the current one (s->buf). */
static int gains(const scd_fplan_state_t *s, const uint8_t *start)
{
	uint8_t *cur = malloc((size_t)s->n + 1);
	if (!cur)
		return 0; /* the plan stays */
	for (int k = 0; k < s->n; k++)
		cur[k] = k == 0 || s->buf[k] != s->buf[k - 1];
	double now = scd_fplan_step_s(&s->cfg, s->t, s->n, cur);
	free(cur);
	return scd_fplan_step_s(&s->cfg, s->t, s->n, start) < (1 - SCD_FPLAN_GAIN) * now;
}

static int refused(const scd_fplan_state_t *s, uint64_t h)
{
	for (int i = 0; i < s->n_refused; i++)
		if (s->refused[i] == h)
			return 1;
	return 0;
}

/* The tensors or the configuration changed: no trial, no refusal holds. */
static void trial_cancel(scd_fplan_state_t *s)
{
	s->trial = 0;
	s->n_refused = 0;
	s->hold = 0;
	s->hold_next = SCD_FPLAN_HOLD;
	period_reset(s);
}

/* Ends a trial that has its steps: kept when not slower than the plan before it, else that
 * plan comes back and this one is refused. Returns 1 when the plan changed back. */
static int trial_end(scd_fplan_state_t *s)
{
	if (!s->trial || s->period_n < SCD_FPLAN_TRIAL_STEPS)
		return 0;
	s->trial = 0;
	if (period_median(s) <= s->prev_s) {
		s->hold_next = SCD_FPLAN_HOLD;
		return 0;
	}
	if (s->n_refused == SCD_FPLAN_REFUSED) { /* the oldest goes */
		memmove(&s->refused[0], &s->refused[1],
			sizeof(uint64_t) * (SCD_FPLAN_REFUSED - 1));
		s->n_refused--;
	}
	s->refused[s->n_refused++] = plan_hash_of(NULL, s->buf, s->n);
	memcpy(s->buf, s->prev_buf, sizeof(int) * (size_t)s->n);
	s->n_buf = s->prev_nbuf;
	s->version++;
	s->why = "slower";
	s->pending = 0;
	s->hold = s->hold_next ? s->hold_next : SCD_FPLAN_HOLD;
	s->hold_next = 2 * s->hold > SCD_FPLAN_HOLD_MAX ? SCD_FPLAN_HOLD_MAX : 2 * s->hold;
	period_reset(s);
	return 1;
}

/* Puts the current plan on trial (a plan from measured times replaces it). 0 when its
 * copy cannot be made (then the new plan is not taken). */
static int trial_begin(scd_fplan_state_t *s)
{
	int *p = realloc(s->prev_buf, sizeof(int) * ((size_t)s->n + 1));
	if (!p)
		return 0;
	s->prev_buf = p;
	memcpy(p, s->buf, sizeof(int) * (size_t)s->n);
	s->prev_nbuf = s->n_buf;
	s->prev_s = period_median(s);
	s->trial = 1;
	return 1;
}

int scd_fplan_lead(const scd_fplan_state_t *s)
{
	for (int k = 0; k < s->n; k++)
		if (!s->t[k].idle)
			return k;
	return 0;
}

/* Whether position k's tensor goes after the step's tensors (idle_to_end): idle now, or
 * moved there before. */
static int trails(const scd_fplan_state_t *s, int k)
{
	return (s->t[k].idle || s->t[k].tail) && !s->t[k].whole;
}

/* Marks the tensors that went idle, and moves the idle tensors (but a whole class's,
 * which stays one run) after the others, in their order, each opening a buffer; until the
 * re-plan that follows (dirty), each position is a buffer of its own. Returns 1 when the
 * order changed, 0 when not, -1 out of memory (the order stays). */
static int idle_to_end(scd_fplan_state_t *s)
{
	int n = s->n, j = 0, moved = 0;
	uint64_t span = (uint64_t)SCD_FPLAN_IDLE_STEPS * (uint64_t)n;
	for (int k = 0; k < n; k++)
		if (s->arrivals - s->t[k].seen > span)
			s->t[k].idle = 1;
	for (int k = 0; k < n; k++) {
		moved |= trails(s, k) ? 0 : j != k;
		j += !trails(s, k);
	}
	if (!moved)
		return 0;
	size_t P3 = 3 * (size_t)s->P;
	int *perm = malloc(sizeof(int) * (size_t)n);
	uint32_t *ids = malloc(sizeof(uint32_t) * (size_t)n);
	scd_fplan_tensor_t *t = malloc(sizeof(*t) * (size_t)n);
	double *rank_t = malloc(sizeof(double) * P3 * (size_t)n);
	double *snap = malloc(sizeof(double) * 3 * (size_t)n);
	int ok = perm && ids && t && rank_t && snap;
	if (ok) {
		j = 0;
		for (int pass = 0; pass < 2; pass++)
			for (int k = 0; k < n; k++)
				if (trails(s, k) == pass)
					perm[j++] = k;
		for (int k = 0; k < n; k++) {
			int f = perm[k];
			ids[k] = s->ids[f];
			t[k] = s->t[f];
			t[k].brk |= trails(s, f);
			t[k].tail = trails(s, f);
			memcpy(&rank_t[k * P3], &s->rank_t[f * P3], P3 * sizeof(double));
			memcpy(&snap[3 * k], &s->snap[3 * f], 3 * sizeof(double));
		}
		memcpy(s->ids, ids, sizeof(uint32_t) * (size_t)n);
		memcpy(s->t, t, sizeof(*t) * (size_t)n);
		memcpy(s->rank_t, rank_t, sizeof(double) * P3 * (size_t)n);
		memcpy(s->snap, snap, sizeof(double) * 3 * (size_t)n);
		for (int k = 0; k < n; k++) /* a valid plan, whatever returns before the next */
			s->buf[k] = k;
		s->n_buf = n;
		pos_rebuild(s);
		s->dirty = 1;
	}
	free(perm);
	free(ids);
	free(t);
	free(rank_t);
	free(snap);
	return ok ? 1 : -1;
}

int scd_fplan_update(scd_fplan_state_t *s, const scd_fplan_cfg_t *cfg)
{
	int idled = idle_to_end(s);
	if (idled < 0)
		return -1;
	/* a re-measured latency moves a little at every probe: only a real change re-plans */
	int cfg_changed = cfg->mode != s->cfg.mode || cfg->fixed_bytes != s->cfg.fixed_bytes ||
			  cfg->buffers != s->cfg.buffers ||
			  fabs(cfg->alpha_s - s->cfg.alpha_s) > 0.25 * s->cfg.alpha_s;
	if (s->broke && !s->dirty && !cfg_changed && s->from_times &&
	    cfg->mode == SCD_FUSION_ADAPTIVE && s->cfg.mode == SCD_FUSION_ADAPTIVE) {
		s->broke = 0;
		if (s->trial) /* what the trial measures against: split alike */
			split_at_breaks(s, s->prev_buf, &s->prev_nbuf);
		if (split_at_breaks(s, s->buf, &s->n_buf)) {
			s->version++;
			s->why = "break";
			period_reset(s); /* a trial measures the split plan from here */
			return 1;
		}
	}
	s->dirty |= s->broke;
	s->broke = 0;
	int structural = s->dirty || cfg_changed;
	if (structural)
		trial_cancel(s);
	else if (trial_end(s))
		return 1;
	/* an adaptive plan from measured times replaces a running one only on trial, once
	 * the running one's step time is measured, while no trial runs and no hold lasts
	 * (nothing to look at in the profiles before) */
	int on_trial = !structural && cfg->mode == SCD_FUSION_ADAPTIVE;
	if (on_trial && (s->trial || s->hold > 0 || s->period_n < SCD_FPLAN_TRIAL_STEPS))
		return 0;
	int all_timed = measured(s->t, s->n);
	int confirm = s->pending && s->reports >= SCD_FPLAN_MIN_REPORTS * (uint64_t)s->n;
	int profiled = cfg->mode == SCD_FUSION_ADAPTIVE && (confirm || drifted(s));
	if (!structural && !profiled)
		return 0;
	uint8_t *start = malloc((size_t)s->n + 1);
	if (!start)
		return -1;
	int forced_replan = structural || (all_timed && !s->from_times);
	const char *why = structural	  ? (idled	? "idle"
					     : s->dirty ? "tensors"
							: "config")
			  : forced_replan ? "measured"
					  : "profiles";
	if (!s->dirty && !cfg_changed)
		fold_comm(s); /* the current plan's buffers, before they change */
	s->from_times = all_timed;
	s->cfg = *cfg;
	s->cfg.comm = &s->comm;
	s->dirty = 0;
	s->reports = 0;
	for (int k = 0; k < s->n; k++) {
		s->snap[3 * k] = s->t[k].tcp_s;
		s->snap[3 * k + 1] = s->t[k].tb_s;
		s->snap[3 * k + 2] = s->t[k].cm_s;
	}
	int n_buf = scd_fplan_plan(&s->cfg, s->t, s->n, start), changed = 0, b = -1;
	for (int k = 0; k < s->n; k++) {
		b += start[k];
		changed |= s->buf[k] != b;
	}
	changed |= idled; /* the order changed, if not the buffers by position */
	/* hysteresis: a plan rebuilt from drifted times is taken when confirmed, and only on
	 * a predicted gain on the same measured times */
	uint64_t h = plan_hash(start, s->n);
	if (!forced_replan && changed && (s->pending != h || !gains(s, start))) {
		s->pending = s->pending != h ? h : 0;
		free(start);
		return 0;
	}
	if (on_trial && changed && (refused(s, h) || !trial_begin(s))) {
		s->pending = 0; /* a plan measured slower: the running one stays */
		free(start);
		return 0;
	}
	s->pending = 0;
	b = -1;
	for (int k = 0; k < s->n; k++) {
		b += start[k];
		s->buf[k] = b;
	}
	free(start);
	s->n_buf = n_buf;
	if (changed) {
		s->version++;
		s->why = why;
		period_reset(s);
	}
	return changed;
}
