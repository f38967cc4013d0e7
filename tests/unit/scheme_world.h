/*
 * scheme_world.h: what the scheme tests share (test_scheme.c, test_device_guard.c): worlds
 * of P forked ranks over the real tcp transport on loopback (unit_mesh.h), each rank
 * running fn with its transport, and the synthetic contributions every rank can generate
 * for every other rank from a shared seed (so each computes the reference itself).
 * Results compared across ranks go through shared anonymous mappings (shared_map).
 */
#ifndef SC_TESTS_SCHEME_WORLD_H
#define SC_TESTS_SCHEME_WORLD_H

#include "unit.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/sparse.h"
#include "transport/transport.h"
#include "unit_mesh.h"
#include "util/log.h"

#define MAX_P  8
#define TMO_MS 20000

/* ---- worlds ---------------------------------------------------------------------------- */

typedef void (*rank_fn)(scd_transport_t *t, int rank, int size, void *arg);

static inline void *shared_map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK_TRUE(p != MAP_FAILED);
	return p;
}

/* Runs fn on P forked ranks; fails naming the first rank that did not exit cleanly (with
 * its signal when it was killed: SIGSEGV for a host access to guarded device memory). */
static inline void run_world(int P, rank_fn fn, void *arg)
{
	pid_t pids[MAX_P];
	unit_mesh_t mesh;
	sc_status_t st = unit_mesh_prepare(&mesh, "tcp", P, unit_rng());
	CHECK_MSG(st == SC_OK, "prepare: %s", scd_transport_error());
	fflush(NULL);
	for (int r = 0; r < P; r++) {
		pids[r] = fork();
		CHECK_TRUE(pids[r] >= 0);
		if (pids[r] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			scd_log_level = SCD_LOG_WARN;
			scd_transport_t *t = NULL;
			st = unit_mesh_create(&mesh, r, 1 << 20, TMO_MS, &t);
			CHECK_MSG(st == SC_OK, "rank %d: tcp: %s", r, scd_transport_error());
			fn(t, r, P, arg);
			scd_transport_destroy(t);
			_exit(0);
		}
	}
	unit_mesh_release(&mesh);
	int bad = -1, bad_status = 0;
	for (int r = 0; r < P; r++) {
		int status = 0;
		while (waitpid(pids[r], &status, 0) < 0 && errno == EINTR)
			;
		if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && bad < 0)
			bad = r, bad_status = status;
	}
	CHECK_MSG(bad < 0, "P = %d: rank %d failed (wait status 0x%x%s%s)", P, bad, bad_status,
		  WIFSIGNALED(bad_status) ? ": " : "",
		  WIFSIGNALED(bad_status) ? strsignal(WTERMSIG(bad_status)) : "");
}

/* ---- data ------------------------------------------------------------------------------ */

typedef struct spec {
	uint64_t numel;
	double density; /* per rank */
	double overlap; /* fraction of each rank's indices drawn from a pool shared by all */
	int zipf;	/* indices ~ Zipf(1) (log-uniform), hot at low indices */
	int coo;	/* hand the input as COO */
	int floats;	/* random floats instead of small integers */
	uint64_t seed;
	int sparse_out; /* with coo: ask for the result as COO (scheme.h, sparse results) */
	uint32_t rows;	/* > 1: non-zeros come in whole rows of this many elements */
} spec_t;

static inline uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline uint32_t draw_idx(const spec_t *sp, uint64_t *s)
{
	if (!sp->zipf)
		return (uint32_t)(mix(s) % sp->numel);
	double u = (double)(mix(s) >> 11) / 9007199254740992.0;
	uint64_t i = (uint64_t)pow((double)sp->numel, u) - 1;
	return (uint32_t)(i < sp->numel ? i : sp->numel - 1);
}

static inline float draw_val(const spec_t *sp, uint64_t *s)
{
	if (sp->floats)
		return (float)((double)(mix(s) >> 11) / 9007199254740992.0 * 2 - 1) + 1e-3f;
	int v = (int)(mix(s) % 8) - 4;
	return (float)(v >= 0 ? v + 1 : v);
}

/* Rank r's contribution, dense (g: numel floats). */
static inline void gen_rank(const spec_t *sp, int r, float *g)
{
	memset(g, 0, 4 * sp->numel);
	uint64_t vs = sp->seed ^ (0x1000u + (uint64_t)r), ps = sp->seed ^ 0x77,
		 rs = sp->seed ^ (0x2000u + (uint64_t)r);
	if (sp->density >= 1) {
		for (uint64_t i = 0; i < sp->numel; i++)
			g[i] = draw_val(sp, &vs);
		return;
	}
	uint64_t nnz = (uint64_t)(sp->density * (double)sp->numel + 0.5);
	if (nnz < 1)
		nnz = 1;
	uint64_t shared = (uint64_t)(sp->overlap * (double)nnz + 0.5), got = 0;
	for (uint64_t a = 0; got < shared && a < 8 * nnz; a++) {
		uint32_t i = draw_idx(sp, &ps);
		if (g[i] == 0)
			g[i] = draw_val(sp, &vs), got++;
	}
	for (uint64_t a = 0; got < nnz && a < 8 * nnz; a++) {
		uint32_t i = draw_idx(sp, &rs);
		if (g[i] == 0)
			g[i] = draw_val(sp, &vs), got++;
	}
	if (sp->rows > 1) /* every row holding a non-zero becomes whole (embedding rows) */
		for (uint64_t lo = 0; lo < sp->numel; lo += sp->rows) {
			uint64_t hi = lo + sp->rows < sp->numel ? lo + sp->rows : sp->numel, i;
			for (i = lo; i < hi && g[i] == 0; i++)
				;
			if (i < hi)
				for (i = lo; i < hi; i++)
					if (g[i] == 0)
						g[i] = draw_val(sp, &vs);
		}
}

static inline void dense_to_coo(const float *g, uint64_t n, scd_coo_t *out)
{
	out->nnz = 0;
	for (uint64_t i = 0; i < n; i++)
		if (g[i] != 0) {
			out->idx[out->nnz] = (uint32_t)i;
			out->val[out->nnz++] = g[i];
		}
}

/* Every rank's contribution of case sp summed into ref (numel n, in rank order), and this
 * rank's own into in (tmp: scratch of n floats). */
static inline void gen_case(const spec_t *sp, int P, int rank, uint64_t n, float *tmp,
			    float *ref, float *in)
{
	memset(ref, 0, 4 * n);
	for (int r = 0; r < P; r++) {
		gen_rank(sp, r, tmp);
		for (uint64_t i = 0; i < n; i++)
			ref[i] += tmp[i];
		if (r == rank)
			memcpy(in, tmp, 4 * n);
	}
}

static inline uint64_t hash_bytes(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ULL;
	return h;
}

#endif
