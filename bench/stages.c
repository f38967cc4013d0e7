/* stages.c: see stages.h. */
#include "stages.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STAGES_RANKS_MAX 64
#define STAGES_WAIT_S	 10.0
#define LAT_LANE	 "bench.allreduce.lat4k"
#define COMM_LANE	 "thread engine.comm"
#define LOOP_LANE	 "thread loop"

enum {
	ST_SUBMIT,
	ST_NEGOTIATE,
	ST_TO_COORD,
	ST_COORD,
	ST_PLAN_BACK,
	ST_HANDOFF,
	ST_VERDICT,
	ST_DATA,
	ST_COMPLETE,
	ST_TOTAL,
	ST_N
};
/* the negotiation's three parts are indented under it */
static const char *const stage_names[ST_N] = {
    "submit",	"negotiation", "  to coord", "  coord",	   "  plan back",
    "hand-off", "verdict",     "data",	     "completion", "round trip"};

typedef struct span {
	double ts, end; /* microseconds of CLOCK_MONOTONIC */
	long step;	/* wait_ranks: the tensor's call; ready_in: the announcing rank */
} span_t;

typedef struct spans {
	span_t *v;
	int n, cap;
} spans_t;

/* One rank's events of the latency tensor (its waits and kept fast turns), of its engine's
 * communication stage and, on the coordinator, of its loop's announcements in and plans
 * out. */
typedef struct rank_tl {
	spans_t wait, fast, buffer, scheme, client, ready_in, plan_out;
} rank_tl_t;

int stages_start(sc_client_t *c, const char *prefix)
{
	char v[1024];
	snprintf(v, sizeof(v), "%s.d%%r.json", prefix);
	sc_status_t st = sc_config_set(c, "timeline_file", v);
	if (st != SC_OK)
		fprintf(stderr, "stages: cannot start the timelines: %s: %s\n",
			sc_status_name(st), sc_last_error());
	return st == SC_OK ? 0 : -1;
}

int stages_stop(sc_client_t *c)
{
	sc_status_t st = sc_config_set(c, "timeline_file", "");
	if (st != SC_OK)
		fprintf(stderr, "stages: cannot stop the timelines: %s: %s\n",
			sc_status_name(st), sc_last_error());
	return st == SC_OK ? 0 : -1;
}

int stages_write_client(const char *prefix, int rank, const int *call, const double *t0_s,
			const double *t1_s, int n)
{
	char path[1100];
	snprintf(path, sizeof(path), "%s.client%d.txt", prefix, rank);
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "stages: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++)
		fprintf(f, "%d %.3f %.3f\n", call[i], t0_s[i] * 1e6, t1_s[i] * 1e6);
	return fclose(f) == 0 ? 0 : -1;
}

static int spans_add(spans_t *s, span_t x)
{
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 256;
		span_t *v = realloc(s->v, sizeof(*v) * (size_t)cap);
		if (!v)
			return -1;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = x;
	return 0;
}

/* The number after "key": in line, or NAN. */
static double num_after(const char *line, const char *key)
{
	const char *p = strstr(line, key);
	return p ? strtod(p + strlen(key), NULL) : NAN;
}

/* Whether the timeline file at path is complete (stopped: its trailer is written). */
static int tl_complete(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	char tail[512] = "";
	if (fseek(f, -(long)(sizeof(tail) - 1), SEEK_END) != 0)
		rewind(f);
	size_t n = fread(tail, 1, sizeof(tail) - 1, f);
	tail[n] = 0;
	fclose(f);
	return strstr(tail, "\"otherData\"") != NULL;
}

/* Reads one daemon's timeline: the latency tensor's wait_ranks, the communication stage's
 * buffer and scheme events, and the loop's ready_in and plan_out (one event a line, as the
 * daemon writes them). */
static int read_timeline(const char *path, rank_tl_t *r)
{
	for (double end = bench_now_s() + STAGES_WAIT_S; !tl_complete(path);) {
		if (bench_now_s() > end) {
			fprintf(stderr, "stages: %s is missing or was not stopped\n", path);
			return -1;
		}
		usleep(20000);
	}
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char *line = NULL;
	size_t cap = 0;
	long lat = -1, comm = -1, loop = -1;
	int rc = 0;
	while (getline(&line, &cap, f) > 0 && rc == 0) {
		long tid = (long)num_after(line, "\"tid\":");
		if (strstr(line, "\"name\":\"thread_name\"")) {
			if (strstr(line, "\"name\":\"" LAT_LANE "\""))
				lat = tid;
			else if (strstr(line, "\"name\":\"" COMM_LANE "\""))
				comm = tid;
			else if (strstr(line, "\"name\":\"" LOOP_LANE "\""))
				loop = tid;
			continue;
		}
		span_t s = {num_after(line, "\"ts\":"), 0, 0};
		s.end = s.ts + num_after(line, "\"dur\":");
		if (tid == lat && strstr(line, "\"name\":\"wait_ranks\"")) {
			s.step = (long)num_after(line, "\"step\":");
			rc = spans_add(&r->wait, s);
		} else if (tid == lat && strstr(line, "\"name\":\"fast_turn\"") &&
			   strstr(line, "\"outcome\":\"kept\""))
			rc = spans_add(&r->fast, s);
		else if (tid == comm && strstr(line, "\"name\":\"buffer\"") &&
			 strstr(line, "\"bytes\":4096,"))
			rc = spans_add(&r->buffer, s);
		else if (tid == comm && strstr(line, "\"name\":\"scheme\"") &&
			 strstr(line, "\"bytes\":4096,"))
			rc = spans_add(&r->scheme, s);
		else if (tid == loop && strstr(line, "\"name\":\"ready_in\"")) {
			s.step = (long)num_after(line, "\"rank\":");
			rc = spans_add(&r->ready_in, s);
		} else if (tid == loop && strstr(line, "\"name\":\"plan_out\""))
			rc = spans_add(&r->plan_out, s);
	}
	free(line);
	fclose(f);
	return rc;
}

static int read_client(const char *path, rank_tl_t *r)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "stages: cannot read %s: %s\n", path, strerror(errno));
		return -1;
	}
	span_t s;
	while (fscanf(f, "%ld %lf %lf", &s.step, &s.ts, &s.end) == 3)
		if (spans_add(&r->client, s) < 0)
			break;
	fclose(f);
	return 0;
}

/* The first span of s that starts at or after t (s sorted by start), or NULL. */
static const span_t *first_after(const spans_t *s, double t)
{
	for (int i = 0; i < s->n; i++)
		if (s->v[i].ts >= t)
			return &s->v[i];
	return NULL;
}

/* The first span of s that starts at or after t with step (s sorted by start), or NULL. */
static const span_t *first_after_step(const spans_t *s, double t, long step)
{
	for (int i = 0; i < s->n; i++)
		if (s->v[i].ts >= t && s->v[i].step == step)
			return &s->v[i];
	return NULL;
}

static const span_t *by_step(const spans_t *s, long step)
{
	for (int i = 0; i < s->n; i++)
		if (s->v[i].step == step)
			return &s->v[i];
	return NULL;
}

static int cmp_span(const void *a, const void *b)
{
	double x = ((const span_t *)a)->ts, y = ((const span_t *)b)->ts;
	return (x > y) - (x < y);
}

static double median_of(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Whether rank 0's buffer b ran as a kept fast turn (its daemon's fast_turn event). */
static int kept_fast(const rank_tl_t *tl0, const span_t *b)
{
	for (int i = 0; i < tl0->fast.n; i++)
		if (tl0->fast.v[i].ts <= b->ts && b->ts <= tl0->fast.v[i].end)
			return 1;
	return 0;
}

/* One call's stages (stages.h): 0 for a planned step, 1 for a fast turn (the daemon's
 * timeline says it ran as a kept fast turn, or the last rank's announcement reached the
 * coordinator only after the plan: its readiness went in its exchange, and its
 * negotiation is 0), or -1 when some rank lacks one of its events (a planned call with no
 * announcement found among them too). */
static int call_stages(rank_tl_t *tl, int P, long step, double out[ST_N])
{
	double last_ready = 0, last_plan = 0, last_buf = 0, last_in = 0, last_out = 0;
	int last = 0, fast = 0; /* the rank ready last; rank 0's buffer a kept fast turn */
	double submit[STAGES_RANKS_MAX], done[STAGES_RANKS_MAX];
	for (int r = 0; r < P; r++) {
		const span_t *w = by_step(&tl[r].wait, step), *c = by_step(&tl[r].client, step);
		const span_t *b = w ? first_after(&tl[r].buffer, w->end) : NULL;
		const span_t *s = b ? first_after(&tl[r].scheme, b->ts) : NULL;
		if (!w || !c || !b || !s || s->end > b->end + 1)
			return -1;
		if (w->ts > last_ready)
			last_ready = w->ts, last = r;
		last_plan = fmax(last_plan, w->end);
		last_buf = fmax(last_buf, b->ts);
		last_in = fmax(last_in, s->ts);
		last_out = fmax(last_out, s->end);
		submit[r] = w->ts - c->ts;
		done[r] = c->end - b->end;
		if (r == 0) {
			out[ST_TOTAL] = c->end - c->ts;
			fast = kept_fast(&tl[r], b);
		}
	}
	out[ST_SUBMIT] = median_of(submit, P);
	out[ST_NEGOTIATE] = last_plan - last_ready;
	out[ST_HANDOFF] = last_buf - last_plan;
	out[ST_VERDICT] = last_in - last_buf;
	out[ST_DATA] = last_out - last_in;
	out[ST_COMPLETE] = median_of(done, P);
	/* the last rank's announcement read by the coordinator (rank 0's own: handled at
	 * once), the coordinator's plan sent to every rank, the last rank's plan applied */
	const span_t *in = first_after_step(&tl[0].ready_in, last_ready, last);
	const span_t *sent = in ? first_after(&tl[0].plan_out, in->ts) : NULL;
	out[ST_TO_COORD] = out[ST_COORD] = out[ST_PLAN_BACK] = NAN;
	if (!tl[0].ready_in.n) /* a daemon that does not write them */
		return 0;
	if (fast || (in && in->ts > last_plan)) { /* a fast turn: no announcement */
		out[ST_HANDOFF] = last_buf - last_ready;
		out[ST_NEGOTIATE] = out[ST_TO_COORD] = out[ST_COORD] = out[ST_PLAN_BACK] = 0;
		return 1;
	}
	if (!in || !sent)
		return -1;
	out[ST_TO_COORD] = in->ts - last_ready;
	out[ST_COORD] = sent->end - in->ts;
	out[ST_PLAN_BACK] = last_plan - sent->end;
	return 0;
}

static void print_table(double *per_stage[ST_N], int n, int P, int fast)
{
	printf("# 4 KiB round trip by stage (us; %d calls matched on %d ranks: %d planned, %d "
	       "fast turns):\n",
	       n, P, n - fast, fast);
	printf("# %-12s %10s %10s\n", "stage", "median", "p99");
	for (int k = 0; k < ST_N; k++) {
		double *v = per_stage[k];
		if (isnan(v[0])) /* the negotiation's parts, from a daemon without them */
			continue;
		qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
		int i99 = (int)ceil(0.99 * n) - 1;
		printf("# %-12s %10.1f %10.1f\n", stage_names[k], median_of(v, n),
		       v[i99 < 0 ? 0 : i99]);
	}
}

/* By start; an empty list has no array (qsort takes none). */
static void sort_spans(spans_t *l)
{
	if (l->n > 0)
		qsort(l->v, (size_t)l->n, sizeof(span_t), cmp_span);
}

int stages_report(const char *prefix, int P)
{
	if (P > STAGES_RANKS_MAX) {
		fprintf(stderr, "stages: at most %d ranks\n", STAGES_RANKS_MAX);
		return -1;
	}
	rank_tl_t *tl = calloc((size_t)P, sizeof(*tl));
	double *per_stage[ST_N] = {0};
	int rc = tl ? 0 : -1, n = 0, fast = 0;
	char path[1100];
	for (int r = 0; r < P && rc == 0; r++) {
		snprintf(path, sizeof(path), "%s.d%d.json", prefix, r);
		rc = read_timeline(path, &tl[r]);
		snprintf(path, sizeof(path), "%s.client%d.txt", prefix, r);
		if (rc == 0)
			rc = read_client(path, &tl[r]);
		if (rc == 0) {
			sort_spans(&tl[r].buffer);
			sort_spans(&tl[r].scheme);
			sort_spans(&tl[r].fast);
			sort_spans(&tl[r].ready_in); /* the coordinator's alone */
			sort_spans(&tl[r].plan_out);
		}
	}
	int calls = rc == 0 ? tl[0].client.n : 0;
	for (int k = 0; k < ST_N && rc == 0; k++)
		if (!(per_stage[k] = calloc((size_t)calls + 1, sizeof(double))))
			rc = -1;
	for (int i = 0; i < calls && rc == 0; i++) {
		double one[ST_N] = {0};
		int kind = call_stages(tl, P, tl[0].client.v[i].step, one);
		if (kind < 0)
			continue;
		fast += kind;
		for (int k = 0; k < ST_N; k++)
			per_stage[k][n] = one[k];
		n++;
	}
	if (rc == 0 && n > 0)
		print_table(per_stage, n, P, fast);
	else if (rc == 0) {
		fprintf(stderr,
			"stages: no call has every rank's events (timelines %s.d*.json)\n",
			prefix);
		rc = -1;
	}
	for (int k = 0; k < ST_N; k++)
		free(per_stage[k]);
	for (int r = 0; tl && r < P; r++) {
		free(tl[r].wait.v);
		free(tl[r].buffer.v);
		free(tl[r].scheme.v);
		free(tl[r].client.v);
		free(tl[r].fast.v);
		free(tl[r].ready_in.v);
		free(tl[r].plan_out.v);
	}
	free(tl);
	return rc;
}
