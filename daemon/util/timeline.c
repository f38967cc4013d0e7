/*
 * timeline.c: the Chrome Trace Event writer (timeline.h). One timeline per process: the
 * hooks of every layer (ctl, engine, schemes) reach it without a handle.
 *
 * Producers format an event on their stack and append it under one mutex to the buffer
 * being filled; the writer thread swaps the two buffers (every flush_ms, or when the
 * filled one is half full) and writes the other one with write(2) outside the mutex. So
 * a producer waits at most for a memcpy and a swap, never for the disk. Lanes (tids) are
 * numbered per file in order of first use; each new lane's "thread_name" and
 * "thread_sort_index" metadata go into the buffer ahead of its first event (threads sort
 * above tensors).
 */
#include "util/timeline.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/log.h"

#define LANE_SLOTS (2 * SCD_TL_LANES_MAX) /* open addressing, at most half full */
#define EVENT_MAX  2048			  /* one formatted event */
#define NAME_MAX_  512			  /* an escaped lane or phase name */

enum { LANE_THREAD = 1, LANE_TENSOR = 2 };

typedef struct lane {
	char *key; /* kind byte, then the name; NULL: free slot */
	int tid;
	int labelled; /* its metadata made it into the buffer */
} lane_t;

atomic_int scd_tl_enabled_;

static struct {
	pthread_mutex_t ctl_mu; /* start and stop */
	pthread_mutex_t mu;	/* everything below */
	pthread_cond_t cv;	/* wakes the writer */
	int cv_ready;
	pthread_t writer;
	int open, stopping;
	int fd;
	char path[PATH_MAX];
	int rank;
	uint64_t start_ns;
	char *buf[2];
	int cur; /* the buffer being filled */
	size_t len, cap;
	int flush_ms;
	scd_tl_counts_t counts;
	lane_t lanes[LANE_SLOTS];
	int n_lanes;
} tl = {.ctl_mu = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static __thread const char *thread_name;
static __thread char thread_auto[32];

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + 1;
}

/* ---- text ----------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (1 to 4), or 0 when it is not one. */
static int utf8_len(const unsigned char *s)
{
	unsigned c = s[0];
	int n;
	unsigned lo = 0x80, hi = 0xBF;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 3;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 4;
	else
		return 0;
	if (c == 0xE0)
		lo = 0xA0;
	else if (c == 0xED)
		hi = 0x9F; /* no surrogates */
	else if (c == 0xF0)
		lo = 0x90;
	else if (c == 0xF4)
		hi = 0x8F;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (int i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return n;
}

size_t scd_tl_escape(const char *s, char *out, size_t len)
{
	size_t o = 0;
	if (!len)
		return 0;
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	while (*p) {
		char tmp[8];
		const char *add = tmp;
		size_t n;
		int adv = 1;
		if (*p == '"' || *p == '\\') {
			tmp[0] = '\\';
			tmp[1] = (char)*p;
			n = 2;
		} else if (*p < 0x20) {
			n = (size_t)snprintf(tmp, sizeof(tmp), "\\u%04x", *p);
		} else if ((adv = utf8_len(p)) == 0) {
			add = "\\ufffd";
			n = 6;
			adv = 1;
		} else {
			add = (const char *)p;
			n = (size_t)adv;
		}
		if (o + n >= len)
			break;
		memcpy(out + o, add, n);
		o += n;
		p += adv;
	}
	out[o] = 0;
	return o;
}

sc_status_t scd_tl_path(const char *pattern, int rank, int world_size, char *out, size_t len,
			char *err, size_t err_len)
{
	size_t o = 0;
	int has_rank = 0;
	for (const char *p = pattern; *p; p++) {
		char tmp[16];
		const char *add = tmp;
		if (p[0] == '%' && p[1] == 'r') {
			snprintf(tmp, sizeof(tmp), "%d", rank);
			has_rank = 1;
			p++;
		} else if (p[0] == '%' && p[1] == '%') {
			add = "%";
			p++;
		} else {
			tmp[0] = *p;
			tmp[1] = 0;
		}
		size_t n = strlen(add);
		if (o + n >= len)
			goto too_long;
		memcpy(out + o, add, n);
		o += n;
	}
	out[o] = 0;
	if (o == 0) {
		snprintf(err, err_len, "timeline file: empty name");
		return SC_ERR_INVALID;
	}
	if (!has_rank && world_size > 1 && rank != 0) {
		char sfx[24];
		int ext = o >= 5 && strcmp(out + o - 5, ".json") == 0;
		size_t keep = ext ? o - 5 : o;
		int n = snprintf(sfx, sizeof(sfx), ".%d%s", rank, ext ? ".json" : "");
		if (keep + (size_t)n >= len)
			goto too_long;
		memcpy(out + keep, sfx, (size_t)n + 1);
	}
	return SC_OK;
too_long:
	snprintf(err, err_len, "timeline file '%.200s' for rank %d: longer than %zu bytes",
		 pattern, rank, len - 1);
	return SC_ERR_INVALID;
}

/* ---- the buffer (tl.mu held) ------------------------------------------------------------ */

/* Appends one event (a JSON object) behind a separator; counts it, or drops it when the
 * buffer is full. 1 when it went in. */
static int put_locked(const char *ev, size_t n)
{
	if (tl.len + n + 2 > tl.cap) {
		tl.counts.dropped++;
		return 0;
	}
	size_t before = tl.len;
	char *b = tl.buf[tl.cur];
	b[tl.len++] = ',';
	b[tl.len++] = '\n';
	memcpy(b + tl.len, ev, n);
	tl.len += n;
	tl.counts.events++;
	if (before < tl.cap / 2 && tl.len >= tl.cap / 2)
		pthread_cond_signal(&tl.cv);
	return 1;
}

static uint64_t key_hash(const char *k)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (; *k; k++)
		h = (h ^ (unsigned char)*k) * 1099511628211ull;
	return h;
}

/* The lane's metadata: its label and where it sorts. */
static int label_locked(const lane_t *l, int kind, const char *name)
{
	char esc[NAME_MAX_], ev[EVENT_MAX];
	scd_tl_escape(name, esc, sizeof(esc));
	int n =
	    snprintf(ev, sizeof(ev),
		     "{\"name\":\"thread_name\",\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":%d,"
		     "\"args\":{\"name\":\"%s%s\"}}",
		     tl.rank, l->tid, kind == LANE_THREAD ? "thread " : "", esc);
	if (!put_locked(ev, (size_t)n))
		return 0;
	n = snprintf(
	    ev, sizeof(ev),
	    "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"ts\":0,\"pid\":%d,\"tid\":%d,"
	    "\"args\":{\"sort_index\":%d}}",
	    tl.rank, l->tid, kind == LANE_THREAD ? l->tid : 100000 + l->tid);
	return put_locked(ev, (size_t)n);
}

/* The tid of the lane (kind, name), made and labelled at its first use; -1 when the
 * table is full or the name cannot be held. */
static int lane_locked(int kind, const char *name)
{
	size_t nl = strlen(name);
	char key[NAME_MAX_];
	if (nl + 2 > sizeof(key))
		nl = sizeof(key) - 2; /* long names share the lane of their first 510 bytes */
	key[0] = (char)kind;
	memcpy(key + 1, name, nl);
	key[nl + 1] = 0;
	size_t i = key_hash(key) & (LANE_SLOTS - 1);
	while (tl.lanes[i].key && strcmp(tl.lanes[i].key, key) != 0)
		i = (i + 1) & (LANE_SLOTS - 1);
	lane_t *l = &tl.lanes[i];
	if (!l->key) {
		if (tl.n_lanes >= SCD_TL_LANES_MAX || !(l->key = strdup(key)))
			return -1;
		l->tid = ++tl.n_lanes;
		l->labelled = 0;
	}
	if (!l->labelled)
		l->labelled = label_locked(l, kind, key + 1);
	return l->tid;
}

static void lanes_free_locked(void)
{
	for (size_t i = 0; i < LANE_SLOTS; i++) {
		free(tl.lanes[i].key);
		tl.lanes[i].key = NULL;
	}
	tl.n_lanes = 0;
}

/* ---- events --------------------------------------------------------------------------- */

/* Appends "fmt" to b (cap bytes) at *at; sets *at past cap when it did not fit. */
static void add(char *b, size_t cap, size_t *at, const char *fmt, ...)
{
	if (*at >= cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b + *at, cap - *at, fmt, ap);
	va_end(ap);
	*at = n < 0 ? cap : *at + (size_t)n;
}

static void emit(int kind, const char *lane, const char *phase, uint64_t t0,
		 const scd_tl_arg_t *args, int n_args)
{
	if (!t0 || !scd_tl_on())
		return;
	uint64_t t1 = now_ns();
	char ph[128], ev[EVENT_MAX];
	scd_tl_escape(phase, ph, sizeof(ph));
	pthread_mutex_lock(&tl.mu);
	if (!tl.open || tl.stopping || t0 < tl.start_ns) {
		pthread_mutex_unlock(&tl.mu);
		return;
	}
	int tid = lane_locked(kind, lane);
	if (tid < 0) {
		tl.counts.dropped++;
		pthread_mutex_unlock(&tl.mu);
		return;
	}
	uint64_t ts = t0 - 1, dur = t1 > t0 ? t1 - t0 : 0;
	size_t at = 0;
	add(ev, sizeof(ev), &at,
	    "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%llu.%03u,\"dur\":%llu.%03u,"
	    "\"pid\":%d,\"tid\":%d,\"args\":{",
	    ph, kind == LANE_THREAD ? "buffer" : "tensor", (unsigned long long)(ts / 1000),
	    (unsigned)(ts % 1000), (unsigned long long)(dur / 1000), (unsigned)(dur % 1000),
	    tl.rank, tid);
	for (int i = 0; i < n_args; i++) {
		char k[64], v[256];
		scd_tl_escape(args[i].key, k, sizeof(k));
		if (args[i].s) {
			scd_tl_escape(args[i].s, v, sizeof(v));
			add(ev, sizeof(ev), &at, "%s\"%s\":\"%s\"", i ? "," : "", k, v);
		} else {
			add(ev, sizeof(ev), &at, "%s\"%s\":%lld", i ? "," : "", k,
			    (long long)args[i].i);
		}
	}
	add(ev, sizeof(ev), &at, "}}");
	if (at >= sizeof(ev))
		tl.counts.dropped++; /* cannot happen with the bounded parts above */
	else
		put_locked(ev, at);
	pthread_mutex_unlock(&tl.mu);
}

void scd_tl_tensor(const char *tensor, const char *phase, uint64_t t0, const scd_tl_arg_t *args,
		   int n)
{
	emit(LANE_TENSOR, tensor ? tensor : "(gone)", phase, t0, args, n);
}

void scd_tl_here(const char *phase, uint64_t t0, const scd_tl_arg_t *args, int n)
{
	if (!t0)
		return;
	if (!thread_name) {
		snprintf(thread_auto, sizeof(thread_auto), "%ld", (long)syscall(SYS_gettid));
		thread_name = thread_auto;
	}
	emit(LANE_THREAD, thread_name, phase, t0, args, n);
}

void scd_tl_thread(const char *name)
{
	thread_name = name;
}

/* ---- the file --------------------------------------------------------------------------- */

/* Writes all of p to the timeline's file; the first failure is remembered and ends the
 * writing (the trailer then reports it). Only the writer thread, or start and stop while
 * it does not run, write. */
static void write_all(const char *p, size_t n)
{
	while (n && !tl.counts.write_errno) {
		ssize_t w = write(tl.fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			tl.counts.write_errno = w < 0 ? errno : EIO;
			return;
		}
		p += w;
		n -= (size_t)w;
	}
}

static void *writer_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&tl.mu);
	for (;;) {
		if (!tl.stopping && (tl.len < tl.cap / 2 || tl.flush_ms < 0)) {
			struct timespec dl;
			clock_gettime(CLOCK_MONOTONIC, &dl);
			int ms = tl.flush_ms < 0 ? 1000 : tl.flush_ms;
			uint64_t ns = (uint64_t)dl.tv_nsec + (uint64_t)ms * 1000000u;
			dl.tv_sec += (time_t)(ns / 1000000000u);
			dl.tv_nsec = (long)(ns % 1000000000u);
			pthread_cond_timedwait(&tl.cv, &tl.mu, &dl);
		}
		int stop = tl.stopping;
		if (!stop && tl.flush_ms < 0)
			continue;
		char *out = tl.buf[tl.cur];
		size_t n = tl.len;
		tl.cur ^= 1;
		tl.len = 0;
		pthread_mutex_unlock(&tl.mu);
		int failed = tl.counts.write_errno;
		write_all(out, n);
		/* said when it happens (a full disk), not only when the timeline stops */
		if (!failed && tl.counts.write_errno)
			scd_error(
			    SCD_SUB_MAIN,
			    "timeline file %s: writing failed: %s; no more is written, and "
			    "the file stays cut (sparsectl timeline stop ends it)",
			    tl.path, strerror(tl.counts.write_errno));
		pthread_mutex_lock(&tl.mu);
		if (stop)
			break;
	}
	pthread_mutex_unlock(&tl.mu);
	return NULL;
}

static sc_status_t cv_init(void)
{
	if (tl.cv_ready)
		return SC_OK;
	pthread_condattr_t a;
	if (pthread_condattr_init(&a) != 0)
		return SC_ERR_SYSTEM;
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(&tl.cv, &a);
	pthread_condattr_destroy(&a);
	if (rc != 0)
		return SC_ERR_SYSTEM;
	tl.cv_ready = 1;
	return SC_OK;
}

/* Stops with tl.ctl_mu held. */
static sc_status_t stop_locked(scd_tl_counts_t *counts_p)
{
	scd_tl_counts_t none = {0};
	if (!tl.open) {
		if (counts_p)
			*counts_p = none;
		return SC_OK;
	}
	atomic_store_explicit(&scd_tl_enabled_, 0, memory_order_relaxed);
	pthread_mutex_lock(&tl.mu);
	tl.stopping = 1;
	pthread_cond_signal(&tl.cv);
	pthread_mutex_unlock(&tl.mu);
	pthread_join(tl.writer, NULL);
	char trailer[256];
	int n =
	    snprintf(trailer, sizeof(trailer),
		     "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"sparsecomm_timeline\":1,"
		     "\"rank\":%d,\"events\":%llu,\"dropped_events\":%llu}}\n",
		     tl.rank, (unsigned long long)tl.counts.events,
		     (unsigned long long)tl.counts.dropped);
	write_all(trailer, (size_t)n);
	if (close(tl.fd) != 0 && !tl.counts.write_errno)
		tl.counts.write_errno = errno;
	pthread_mutex_lock(&tl.mu);
	tl.fd = -1;
	tl.open = tl.stopping = 0;
	free(tl.buf[0]);
	free(tl.buf[1]);
	tl.buf[0] = tl.buf[1] = NULL;
	tl.len = tl.cap = 0;
	lanes_free_locked();
	if (counts_p)
		*counts_p = tl.counts;
	int bad = tl.counts.write_errno != 0;
	pthread_mutex_unlock(&tl.mu);
	return bad ? SC_ERR_SYSTEM : SC_OK;
}

sc_status_t scd_tl_stop(scd_tl_counts_t *counts_p)
{
	pthread_mutex_lock(&tl.ctl_mu);
	sc_status_t st = stop_locked(counts_p);
	pthread_mutex_unlock(&tl.ctl_mu);
	return st;
}

static sc_status_t start_locked(const char *path, int rank, size_t buf_bytes, int flush_ms,
				char *err, size_t err_len)
{
	char *b0 = calloc(1, buf_bytes), *b1 = calloc(1, buf_bytes);
	if (!b0 || !b1 || cv_init() != SC_OK) {
		free(b0);
		free(b1);
		snprintf(err, err_len,
			 "timeline file %.200s: no memory for two %zu-byte buffers", path,
			 buf_bytes);
		return SC_ERR_NOMEM;
	}
	int fd;
	do
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	while (fd < 0 && errno == EINTR);
	if (fd < 0) {
		snprintf(err, err_len, "timeline file %.200s: %s", path, strerror(errno));
		free(b0);
		free(b1);
		return SC_ERR_SYSTEM;
	}
	pthread_mutex_lock(&tl.mu);
	tl.fd = fd;
	snprintf(tl.path, sizeof(tl.path), "%s", path);
	tl.rank = rank;
	tl.buf[0] = b0;
	tl.buf[1] = b1;
	tl.cur = 0;
	tl.len = 0;
	tl.cap = buf_bytes;
	tl.flush_ms = flush_ms;
	memset(&tl.counts, 0, sizeof(tl.counts));
	tl.stopping = 0;
	tl.start_ns = now_ns();
	pthread_mutex_unlock(&tl.mu);
	char head[256];
	int n = snprintf(head, sizeof(head),
			 "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"ts\":0,"
			 "\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"sparsecommd rank %d\"}}",
			 rank, rank);
	write_all(head, (size_t)n);
	int rc = tl.counts.write_errno;
	if (!rc)
		rc = pthread_create(&tl.writer, NULL, writer_main, NULL);
	if (rc != 0) {
		snprintf(err, err_len, "timeline file %.200s: %s", path, strerror(rc));
		close(fd);
		pthread_mutex_lock(&tl.mu);
		tl.fd = -1;
		free(tl.buf[0]);
		free(tl.buf[1]);
		tl.buf[0] = tl.buf[1] = NULL;
		tl.cap = 0;
		pthread_mutex_unlock(&tl.mu);
		return SC_ERR_SYSTEM;
	}
	pthread_mutex_lock(&tl.mu);
	tl.open = 1;
	pthread_mutex_unlock(&tl.mu);
	atomic_store_explicit(&scd_tl_enabled_, 1, memory_order_relaxed);
	return SC_OK;
}

sc_status_t scd_tl_writable(const char *pattern, int rank, int world_size, char *err,
			    size_t err_len)
{
	char path[PATH_MAX], dir[PATH_MAX];
	sc_status_t st =
	    scd_tl_path(pattern, rank, world_size, path, sizeof(path), err, err_len);
	if (st != SC_OK)
		return st;
	const char *slash = strrchr(path, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	if (access(dir, W_OK | X_OK) != 0) {
		snprintf(err, err_len, "node %d cannot write its timeline file %s: %s: %s",
			 rank, path, dir, strerror(errno));
		return SC_ERR_INVALID;
	}
	return SC_OK;
}

sc_status_t scd_tl_start(const char *pattern, int rank, int world_size, size_t buf_bytes,
			 int flush_ms, char *err, size_t err_len)
{
	char path[PATH_MAX];
	sc_status_t st =
	    scd_tl_path(pattern, rank, world_size, path, sizeof(path), err, err_len);
	if (st != SC_OK)
		return st;
	pthread_mutex_lock(&tl.ctl_mu);
	stop_locked(NULL);
	st = start_locked(path, rank, buf_bytes ? buf_bytes : SCD_TL_BUF_BYTES,
			  flush_ms ? flush_ms : SCD_TL_FLUSH_MS, err, err_len);
	pthread_mutex_unlock(&tl.ctl_mu);
	return st;
}

sc_status_t scd_tl_configure(const char *pattern, int rank, int world_size)
{
	char old[PATH_MAX], err[512];
	scd_tl_counts_t c;
	pthread_mutex_lock(&tl.ctl_mu);
	int was_open = tl.open;
	snprintf(old, sizeof(old), "%s", tl.path);
	sc_status_t st = stop_locked(&c);
	pthread_mutex_unlock(&tl.ctl_mu);
	if (was_open && st != SC_OK)
		scd_error(SCD_SUB_MAIN,
			  "timeline file %s: writing failed: %s (the file is cut)", old,
			  strerror(c.write_errno));
	else if (was_open)
		scd_info(SCD_SUB_MAIN, "timeline file %s closed: %llu events, %llu dropped",
			 old, (unsigned long long)c.events, (unsigned long long)c.dropped);
	if (!pattern || !pattern[0])
		return st;
	if ((st = scd_tl_start(pattern, rank, world_size, 0, 0, err, sizeof(err))) != SC_OK) {
		scd_error(SCD_SUB_MAIN, "timeline not started: %s", err);
		return st;
	}
	scd_info(SCD_SUB_MAIN, "timeline started: %s", tl.path);
	return SC_OK;
}
