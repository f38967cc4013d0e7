/*
 * itest.h: shared helpers of build/bin/sparsecomm-itest, the trainer side of the
 * integration tests. tests/integration/run.sh starts real daemons with sparsecomm-run and
 * runs one scenario of this binary per trainer; each scenario exits 0 when every check
 * held and 1 with a precise message (rank, tensor, expected and observed values) otherwise.
 *
 * Every scenario prints "itest <scenario>: rank R passed" as its last line, so run.sh can
 * count that every trainer really ran and finished, instead of trusting an exit status.
 * Every wait is bounded: a daemon that never answers fails the test, it never hangs it.
 */
#ifndef SC_TESTS_ITEST_H
#define SC_TESTS_ITEST_H

#include "sparsecomm.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The trainer's identity, from the launcher's environment and the daemon's handshake. */
typedef struct {
	const char *scenario;
	const char *socket;  /* $SPARSECOMM_SOCKET */
	int env_rank;	     /* $SPARSECOMM_RANK, -1 when unset */
	int env_size;	     /* $SPARSECOMM_SIZE, -1 when unset */
	int env_local_rank;  /* $SPARSECOMM_LOCAL_RANK, -1 when unset */
	int env_local_size;  /* $SPARSECOMM_LOCAL_SIZE, -1 when unset */
	int env_node_rank;   /* $SPARSECOMM_NODE_RANK, -1 when unset */
	int env_node_count;  /* $SPARSECOMM_NODE_COUNT, -1 when unset */
	int rank, size;	     /* from sc_rank/sc_size once connected (env values before) */
	char self_dir[4096]; /* directory of this executable (build/bin) */
} it_env_t;

extern it_env_t it_env;

/* Bounded waits, in milliseconds. */
#define IT_OP_TIMEOUT_MS      60000 /* one allreduce, 64 MiB included */
#define IT_ERROR_TIMEOUT_MS   30000 /* an operation expected to fail */
#define IT_CONNECT_TIMEOUT_MS 20000

/* sc_wait's result, or IT_HANG when the wait ran out and the handle is still pending. */
#define IT_HANG 1000

/* Prints "itest <scenario>: rank R: FAIL: ..." to stderr and exits 1. */
void it_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
#define IT_FAIL(...) it_fail_at(__FILE__, __LINE__, __VA_ARGS__)
/* Prints "itest <scenario>: rank R: ..." to stdout (flushed). */
void it_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the line run.sh counts and exits 0. */
void it_pass(void) __attribute__((noreturn));

/* Fails with the status name and sc_last_error() unless st is SC_OK. */
#define IT_CHECK_SC(st, ...)                                                                   \
	do {                                                                                   \
		sc_status_t st_ = (st);                                                        \
		if (st_ != SC_OK)                                                              \
			it_fail_sc(__FILE__, __LINE__, st_, __VA_ARGS__);                      \
	} while (0)
void it_fail_sc(const char *file, int line, sc_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));

double it_now_s(void);
void it_sleep_ms(int ms);
/* Waits for child pid to end, at most timeout_s (then kills it and fails the test, naming
 * what); returns its waitpid status. */
int it_wait_child(pid_t pid, double timeout_s, const char *what);

/* sc_connect to $SPARSECOMM_SOCKET; checks rank/size against the environment. */
sc_client_t *it_connect(void);
/* sc_register that fails the test on error. */
sc_tensor_t *it_register(sc_client_t *c, const char *name, sc_dtype_t dtype, size_t numel);
/* A float32 tensor with a top-k sparsifier (density 0.1), registered or the test fails. */
sc_tensor_t *it_register_topk(sc_client_t *c, const char *name, size_t numel);
/* sc_wait bounded by timeout_ms; tells a wait that ran out (IT_HANG) from a daemon error. */
int it_wait(sc_client_t *c, sc_handle_t h, int timeout_ms);
/* Name of an it_wait result, and the error text of the last it_wait (sc_last_error() as
 * the wait left it, or why the wait itself ran out). */
const char *it_wait_name(int r);
const char *it_wait_error(void);
/* A barrier across every trainer of the job: a one-element allreduce named tag. Returns
 * the sum over ranks of contrib (so ranks can learn whether any rank failed). */
double it_barrier(sc_client_t *c, const char *tag, double contrib);

/* The test pattern: a small integer in [-8, 8] depending on (seed, rank, index), so sums
 * over up to 15 ranks are exact in every dtype. */
static inline int it_value(uint64_t seed, int rank, uint64_t i)
{
	return (int)((seed * 5u + (uint64_t)rank * 7u + i * 13u + (i >> 7) * 3u) % 17u) - 8;
}
/* Sum of it_value over ranks 0..size-1. */
static inline int it_value_sum(uint64_t seed, int size, uint64_t i)
{
	int s = 0;
	for (int r = 0; r < size; r++)
		s += it_value(seed, r, i);
	return s;
}

/* Fills a buffer of dtype with scale * it_value(seed, rank, i). */
void it_fill(void *data, sc_dtype_t dtype, size_t n, uint64_t seed, int rank, int scale);
/* Checks a reduced buffer: op SUM expects scale * sum; AVERAGE expects scale * sum / size
 * (exact for integers; within one unit in the last place for floats, the rounding of one
 * division). Returns the number of wrong elements and describes the first few in why. */
size_t it_check(const void *data, sc_dtype_t dtype, size_t n, uint64_t seed, int size,
		int scale, sc_reduce_op_t op, char *why, size_t why_len);

/* True when msg names rank r: "rank 1", "ranks 0, 1", "rank=1", "ranks [0,1]". */
int it_mentions_rank(const char *msg, int r);
/* True when msg contains the decimal number v as a whole token. */
int it_mentions_number(const char *msg, long long v);
/* The daemon's pid, from the name of a shared object this process maps
 * ("/dev/shm/sparsecomm.<pid>.<n>.<random>": a tensor registered first). */
int it_daemon_pid(void);

/* Scenarios. */
int it_sums(int argc, char **argv);
int it_fusion(int argc, char **argv);
int it_mismatch(int argc, char **argv);
int it_busy(int argc, char **argv);
int it_release(int argc, char **argv);
int it_release_one(int argc, char **argv);
int it_badopts(int argc, char **argv);
int it_killed(int argc, char **argv);
int it_killed_late(int argc, char **argv);
int it_killed_first(int argc, char **argv);
int it_killed_twice(int argc, char **argv);
int it_killed_refused(int argc, char **argv);
int it_killed_afresh(int argc, char **argv);
int it_killed_barrier(int argc, char **argv);
int it_stalled(int argc, char **argv);
int it_fast(int argc, char **argv); /* itest_fast.c */
int it_unknown(int argc, char **argv);
int it_version(int argc, char **argv);
int it_bodyless(int argc, char **argv);
int it_silent_accept(int argc, char **argv);
int it_oversize(int argc, char **argv); /* itest_raw.c */
int it_false_pid(int argc, char **argv);
int it_ctl_flood(int argc, char **argv);
int it_submit_channel(int argc, char **argv);
int it_submit_order(int argc, char **argv);
int it_submit_threads(int argc, char **argv);
int it_submit_batch(int argc, char **argv);
int it_submit_poll(int argc, char **argv);
int it_submit_fork(int argc, char **argv);
int it_submit_reconnect(int argc, char **argv);
int it_submit_open(int argc, char **argv);
int it_submit_emfile(int argc, char **argv);
int it_finalize_race(int argc, char **argv); /* itest_finalize.c */
int it_join_left(int argc, char **argv);     /* itest_sessions.c */
int it_join_timeout(int argc, char **argv);  /* itest_sessions.c */
int it_crash(int argc, char **argv);
int it_ctl(int argc, char **argv);
int it_many_names(int argc, char **argv); /* itest_sums.c */
int it_psets(int argc, char **argv);	  /* itest_psets.c */
int it_psets_killed(int argc, char **argv);
int it_psets_timeout(int argc, char **argv);
int it_capi(int argc, char **argv);	/* itest_capi.c */
int it_timeline(int argc, char **argv); /* itest_timeline.c */
int it_presel(int argc, char **argv);	/* itest_presel.c */
/* Finds sparsectl ($SPARSECTL, else next to this executable), failing when it cannot run;
 * then it_run_ctl runs `sparsectl --socket SOCK --json ARGS...` (args NULL-terminated),
 * bounded in time, with its stdout in out, and returns its exit status (itest_ctl.c). */
void it_sparsectl_find(void);
int it_run_ctl(const char *sock, char *out, size_t out_len, const char *const *args);
/* A number of tensor name's entry in `sparsectl --socket SOCK --json stats`, or -1 when
 * the tensor is not listed. */
double it_stats_number(const char *sock, const char *name, const char *field);
int it_badinput(int argc, char **argv); /* itest_badinput.c */
int it_fplan(int argc, char **argv);	/* itest_fplan.c */
int it_exdyna(int argc, char **argv);	/* itest_exdyna.c */
int it_group(int argc, char **argv);	/* itest_group.c */
int it_ops(int argc, char **argv);	/* itest_colls.c */
int it_barrier_case(int argc, char **argv);
int it_shapes(int argc, char **argv);
int it_evict(int argc, char **argv); /* itest_evict.c */
int it_broadcast(int argc, char **argv);
int it_allgather(int argc, char **argv);
int it_join(int argc, char **argv);
int it_join_killed(int argc, char **argv);
int it_join_carry(int argc, char **argv);
int it_join_root(int argc, char **argv);
int it_reducescatter(int argc, char **argv);
int it_adasum(int argc, char **argv);	/* itest_adasum.c */
int it_alltoall(int argc, char **argv); /* itest_a2a.c */
int it_barrier_stalled(int argc, char **argv);
int it_join_refused(int argc, char **argv); /* itest_peer.c */
int it_live_gone(int argc, char **argv);    /* itest_live.c */
int it_live_rejoin(int argc, char **argv);
int it_live_busy(int argc, char **argv);
int it_live_bigreg(int argc, char **argv);
int it_live_own(int argc, char **argv);
int it_wait_race(int argc, char **argv);
int it_peer_oversize(int argc, char **argv);
int it_peer_stranger(int argc, char **argv);
int it_peer_spoof(int argc, char **argv);
int it_cuda_refused(int argc, char **argv); /* itest_cuda.c */
int it_cuda_sums(int argc, char **argv);
int it_cuda_psets(int argc, char **argv);
int it_bits(int argc, char **argv);
int it_cuda_killed(int argc, char **argv);
int it_cuda_visible(int argc, char **argv);
int it_cuda_lost(int argc, char **argv);
/* GET /metrics of the daemon's endpoint at HOST:PORT: the whole answer, malloc'd
 * (itest_metrics.c). */
char *it_metrics_scrape(const char *hostport);
int it_cuda_schemes(int argc, char **argv); /* itest_cudaschemes.c */
/* Sets up the CUDA driver stand-in and its log (argv[1], LOG: LOG.<rank>) for this rank;
 * returns the log's path (itest_cuda.c). */
const char *it_cuda_stand_in(int argc, char **argv);
/* Fails unless `sparsectl stats` on this node says tensor name went over want. */
void it_expect_transport(const char *name, const char *want);
/* The CUDA driver stand-in's log (tests/cudahost/driver.c) at path: this process's lines of
 * kind with arg (NULL: any), and a check that tensors cuda tensors opened and closed every
 * handle once (nothing else logged). */
int it_cuda_log_count(const char *path, const char *kind, const char *arg);
void it_cuda_log_balanced(const char *path, int tensors);
int it_cuda_driver(int argc, char **argv); /* itest_cudadrv.c */
int it_cuda_fake(int argc, char **argv);   /* itest_cudafake.c */
int it_metrics(int argc, char **argv);	   /* itest_metrics.c */
int it_wire16(int argc, char **argv);	   /* itest_wire.c */
int it_agree(int argc, char **argv);	   /* itest_agree.c */
int it_late(int argc, char **argv);
int it_late_exit(int argc, char **argv);
int it_late_reform(int argc, char **argv);
int it_late_release(int argc, char **argv);
int it_coo_forms(int argc, char **argv);
int it_random(int argc, char **argv); /* itest_random.c */

/* Minimal JSON reader for sparsectl's --json output (itest_json.c). */
typedef enum { IT_JNULL, IT_JBOOL, IT_JNUM, IT_JSTR, IT_JARR, IT_JOBJ } it_jtype_t;
typedef struct it_json {
	it_jtype_t type;
	double num;		/* JNUM, JBOOL */
	char *str;		/* JSTR */
	char **keys;		/* JOBJ: keys[i] names items[i] */
	struct it_json **items; /* JARR, JOBJ */
	size_t n;
} it_json_t;
/* Parses text (one JSON value, surrounding whitespace allowed); NULL and a reason in err
 * on failure. */
it_json_t *it_json_parse(const char *text, char *err, size_t err_len);
void it_json_free(it_json_t *v);
/* Member of an object, or NULL. */
const it_json_t *it_json_get(const it_json_t *obj, const char *key);

/* sparsectl --socket SOCK --json ARGS... parsed (itest_ctl.c); fails the trainer on a
 * non-zero exit or invalid JSON. */
it_json_t *it_ctl_json(const char *sock, const char *const *args);
/* A number of this node's sparsectl stats (cache_entries, fast_kept ...); fails the test
 * when the field is missing. */
double it_node_stat(const char *field);
/* `config set KEY VALUE` on sock, then waits (bounded) until sock's node shows it. */
void it_ctl_config_set(const char *sock, const char *key, const char *value);

#endif
