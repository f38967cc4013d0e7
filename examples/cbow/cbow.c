/*
 * cbow.c: data-parallel training of word embeddings (CBOW with negative sampling) on the
 * King James Bible, synchronising gradients through sparsecomm. The reference workload of
 * the project: its embedding gradients are naturally sparse (only the rows of the words
 * in a batch are non-zero) and skewed towards frequent words.
 *
 * Every rank reads the whole text and builds the same vocabulary (corpus.c), trains on
 * its own contiguous 1/size of the token stream, and starts from the same weights. Each
 * step it computes the gradient of its batch into the registered tensors' buffers, has
 * them averaged across ranks (SC_OP_AVERAGE), and applies the same optimiser step, so the
 * weights stay identical everywhere; --check-sync K verifies that every K steps by summing
 * a digest of the weights. --local trains alone without any daemon.
 *
 * Run: sparsecomm-run -n 4 -- sparsecomm-cbow [options]   (or sparsecomm-cbow --local)
 */
#include "comm.h"
#include "corpus.h"
#include "model.h"
#include "rng.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct options {
	long steps, batch, dim, print_every, check_every;
	unsigned window, negatives, min_count;
	double lr, sample, exdyna;
	optimizer_t opt;
	uint64_t seed;
	const char *corpus;
	const char *neighbours;
	int local, local_ranks, verbose_all, timeout_ms;
} options_t;

static const options_t defaults = {
    .steps = 2400,
    .batch = 512,
    .dim = 64,
    .print_every = 20,
    .check_every = 0,
    .window = 2,
    .negatives = 5,
    .min_count = 5,
    .lr = NAN, /* per optimiser: 0.1 Adagrad, 20 SGD */
    .sample = 0,
    .opt = OPT_ADAGRAD,
    .seed = 1,
    .corpus = NULL,
    .neighbours = "god,king,jesus,david,water,egypt",
    .local = 0,
    .local_ranks = 1,
    .verbose_all = 0,
    .timeout_ms = 60000,
    .exdyna = 0,
};

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: sparsecomm-run -n N -- sparsecomm-cbow [options]\n"
	    "       sparsecomm-cbow --local [options]\n"
	    "Trains CBOW word embeddings with negative sampling, data-parallel over "
	    "sparsecomm.\n"
	    "  --steps N          training steps (default %ld)\n"
	    "  --batch B          centre words per rank per step (default %ld)\n"
	    "  --dim D            embedding size (default %ld)\n"
	    "  --window W         context words on each side (default %u)\n"
	    "  --negatives K      negative samples per centre word (default %u)\n"
	    "  --lr X             learning rate (default 0.1 adagrad, 20 sgd)\n"
	    "  --optimizer NAME   adagrad (default) or sgd\n"
	    "  --seed S           seed of the initial weights and sampling (default %llu)\n"
	    "  --corpus FILE      text to train on (default: output of `bible "
	    "Gen1:1-Rev22:21`)\n"
	    "  --min-count N      drop words seen fewer times (default %u)\n"
	    "  --sample T         subsample frequent words (word2vec t, e.g. 1e-3; default "
	    "off)\n"
	    "  --print-every N    progress line every N steps (default %ld)\n"
	    "  --check-sync K     verify every K steps that all ranks hold identical weights\n"
	    "  --neighbours LIST  words whose nearest neighbours are printed at the end\n"
	    "                     (comma-separated; empty: none; default %s)\n"
	    "  --timeout-ms MS    limit of every wait on the daemon (default %d)\n"
	    "  --exdyna D         the daemon sparsifies the gradients with ExDyna at density "
	    "D\n"
	    "                     (lossy, error feedback) instead of sending their non-zeros\n"
	    "  --verbose-all      every rank prints progress, not only rank 0\n"
	    "  --local            train alone, without sparsecomm\n"
	    "  --local-ranks N    with --local: simulate N ranks in this process (their own\n"
	    "                     shards, averaged gradients), to compare with a real run\n",
	    defaults.steps, defaults.batch, defaults.dim, defaults.window, defaults.negatives,
	    (unsigned long long)defaults.seed, defaults.min_count, defaults.print_every,
	    defaults.neighbours, defaults.timeout_ms);
}

static int parse_long(const char *name, const char *s, long min, long max, long *out)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || v < min || v > max) {
		fprintf(stderr, "cbow: --%s wants an integer in [%ld, %ld], not '%s'\n", name,
			min, max, s);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_double(const char *name, const char *s, double min, double *out)
{
	char *end;
	double v = strtod(s, &end);

	if (*s == '\0' || *end != '\0' || !(v >= min) || !isfinite(v)) {
		fprintf(stderr, "cbow: --%s wants a number >= %g, not '%s'\n", name, min, s);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_options(int argc, char **argv, options_t *o)
{
	enum {
		O_STEPS = 256,
		O_BATCH,
		O_DIM,
		O_WINDOW,
		O_NEG,
		O_LR,
		O_OPT,
		O_SEED,
		O_CORPUS,
		O_MIN,
		O_SAMPLE,
		O_PRINT,
		O_CHECK,
		O_NEIGH,
		O_TIMEOUT,
		O_VERBOSE,
		O_LOCAL,
		O_LOCAL_RANKS,
		O_EXDYNA
	};
	static const struct option longopts[] = {
	    {"steps", 1, 0, O_STEPS},
	    {"batch", 1, 0, O_BATCH},
	    {"dim", 1, 0, O_DIM},
	    {"window", 1, 0, O_WINDOW},
	    {"negatives", 1, 0, O_NEG},
	    {"lr", 1, 0, O_LR},
	    {"optimizer", 1, 0, O_OPT},
	    {"seed", 1, 0, O_SEED},
	    {"corpus", 1, 0, O_CORPUS},
	    {"min-count", 1, 0, O_MIN},
	    {"sample", 1, 0, O_SAMPLE},
	    {"print-every", 1, 0, O_PRINT},
	    {"check-sync", 1, 0, O_CHECK},
	    {"neighbours", 1, 0, O_NEIGH},
	    {"timeout-ms", 1, 0, O_TIMEOUT},
	    {"verbose-all", 0, 0, O_VERBOSE},
	    {"local", 0, 0, O_LOCAL},
	    {"local-ranks", 1, 0, O_LOCAL_RANKS},
	    {"exdyna", 1, 0, O_EXDYNA},
	    {"help", 0, 0, 'h'},
	    {0, 0, 0, 0},
	};
	long v;
	int c, rc = 0;

	*o = defaults;
	while (rc == 0 && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case O_STEPS:
			rc = parse_long("steps", optarg, 1, 100000000, &o->steps);
			break;
		case O_BATCH:
			rc = parse_long("batch", optarg, 1, 1 << 24, &o->batch);
			break;
		case O_DIM:
			rc = parse_long("dim", optarg, 1, 4096, &o->dim);
			break;
		case O_WINDOW:
			rc = parse_long("window", optarg, 1, 64, &v);
			o->window = (unsigned)v;
			break;
		case O_NEG:
			rc = parse_long("negatives", optarg, 0, 100, &v);
			o->negatives = (unsigned)v;
			break;
		case O_LR:
			rc = parse_double("lr", optarg, 0, &o->lr);
			break;
		case O_OPT:
			if (strcmp(optarg, "adagrad") == 0) {
				o->opt = OPT_ADAGRAD;
			} else if (strcmp(optarg, "sgd") == 0) {
				o->opt = OPT_SGD;
			} else {
				fprintf(stderr, "cbow: --optimizer is adagrad or sgd\n");
				rc = -1;
			}
			break;
		case O_SEED:
			rc = parse_long("seed", optarg, 0, __LONG_MAX__, &v);
			o->seed = (uint64_t)v;
			break;
		case O_CORPUS:
			o->corpus = optarg;
			break;
		case O_MIN:
			rc = parse_long("min-count", optarg, 1, 1 << 30, &v);
			o->min_count = (unsigned)v;
			break;
		case O_SAMPLE:
			rc = parse_double("sample", optarg, 0, &o->sample);
			break;
		case O_PRINT:
			rc =
			    parse_long("print-every", optarg, 1, __LONG_MAX__, &o->print_every);
			break;
		case O_CHECK:
			rc = parse_long("check-sync", optarg, 0, __LONG_MAX__, &o->check_every);
			break;
		case O_NEIGH:
			o->neighbours = optarg;
			break;
		case O_TIMEOUT:
			rc = parse_long("timeout-ms", optarg, 1, 1 << 30, &v);
			o->timeout_ms = (int)v;
			break;
		case O_VERBOSE:
			o->verbose_all = 1;
			break;
		case O_LOCAL:
			o->local = 1;
			break;
		case O_LOCAL_RANKS:
			rc = parse_long("local-ranks", optarg, 1, 1024, &v);
			o->local_ranks = (int)v;
			break;
		case O_EXDYNA:
			rc = parse_double("exdyna", optarg, 0, &o->exdyna);
			if (rc == 0 && o->exdyna > 1) {
				fprintf(stderr, "cbow: --exdyna wants a density in (0, 1]\n");
				rc = -1;
			}
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (rc == 0 && optind < argc) {
		fprintf(stderr, "cbow: unexpected argument '%s'\n", argv[optind]);
		rc = -1;
	}
	if (rc == 0 && o->local_ranks > 1 && !o->local) {
		fprintf(stderr, "cbow: --local-ranks needs --local\n");
		rc = -1;
	}
	if (isnan(o->lr))
		o->lr = o->opt == OPT_ADAGRAD ? 0.1 : 20;
	return rc;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*
 * Sums a digest of the weights over all ranks and compares with size x own digest. The
 * digest travels as four 16-bit pieces in float32 so that the sum is exact for up to 256
 * ranks. Returns 0 when every rank agrees, -1 on divergence or failure.
 */
static int check_sync(comm_t *cm, const model_t *m, long step)
{
	static const int which[] = {COMM_CHECK};
	uint64_t digest = model_digest(m);
	float *buf = cm->buf[COMM_CHECK];
	float own[COMM_CHECK_NUMEL];

	for (int i = 0; i < COMM_CHECK_NUMEL; i++)
		buf[i] = own[i] = (float)((digest >> (16 * i)) & 0xffff);
	if (comm_allreduce(cm, which, 1, SC_OP_SUM) < 0)
		return -1;
	for (int i = 0; i < COMM_CHECK_NUMEL; i++) {
		if (buf[i] != (float)cm->size * own[i]) {
			fprintf(
			    stderr,
			    "cbow: rank %d: weights diverged across ranks at step %ld (digest "
			    "%016llx; piece %d: sum %.0f, expected %d x %.0f)\n",
			    cm->rank, step, (unsigned long long)digest, i, (double)buf[i],
			    cm->size, (double)own[i]);
			return -1;
		}
	}
	return 0;
}

/* Averages vals[0..n) across ranks (through the stats tensor), in place. */
static int average_stats(comm_t *cm, double *vals, int n)
{
	static const int which[] = {COMM_STATS};
	float *buf = cm->buf[COMM_STATS];

	for (int i = 0; i < COMM_STATS_NUMEL; i++)
		buf[i] = i < n ? (float)vals[i] : 0.0f;
	if (comm_allreduce(cm, which, 1, SC_OP_AVERAGE) < 0)
		return -1;
	for (int i = 0; i < n; i++)
		vals[i] = buf[i];
	return 0;
}

static void print_neighbours(const corpus_t *c, const model_t *m, const char *list)
{
	char *copy = strdup(list), *save = NULL;

	for (char *w = copy ? strtok_r(copy, ",", &save) : NULL; w;
	     w = strtok_r(NULL, ",", &save)) {
		int32_t id = corpus_lookup(c, w), ids[6];
		float sims[6];

		if (id < 0) {
			printf("neighbours of %s: not in the vocabulary\n", w);
			continue;
		}
		size_t n = model_neighbours(m, id, 6, ids, sims);

		printf("neighbours of %s:", w);
		for (size_t i = 0; i < n && i < 6; i++)
			printf(" %s(%.2f)", c->words[ids[i]], (double)sims[i]);
		printf("\n");
	}
	free(copy);
}

/* The data-parallel part of one rank: its shard and its sampling stream. */
typedef struct worker {
	shard_t shard;
	uint64_t rng;
} worker_t;

typedef struct run {
	options_t o;
	comm_t cm;
	corpus_t corpus;
	model_t model;
	worker_t *workers; /* 1, or --local-ranks simulated ranks */
	int n_workers;
	int size;	   /* ranks of the job, simulated ones included */
	float *scratch[2]; /* per-worker gradients when simulating ranks */
	float *losses;	   /* [steps] this rank's loss of each step */
	double t_start;
	int show; /* this rank prints progress */
} run_t;

/* rows: the mean fraction of non-zero rows in the averaged gradients since the last line. */
static void print_progress(run_t *r, long step, double loss, double local_loss, double rows)
{
	double el = now_s() - r->t_start;
	double tokens = (double)r->size * (double)r->o.batch * (double)step;

	if (r->o.verbose_all)
		printf("rank=%d ", r->cm.rank);
	printf("step=%ld loss=%.4f", step, loss);
	if (r->o.verbose_all)
		printf(" local_loss=%.4f", local_loss);
	printf(" tokens/s=%.0f synced=%.1fMB nonzero_rows=%.1f%% elapsed=%.1fs\n", tokens / el,
	       (double)r->cm.synced_bytes / 1e6, 100.0 * rows, el);
}

/*
 * Computes this step's gradient into the gradient tensors and returns the mean loss. When
 * simulating ranks, each one's gradient goes through scratch buffers and the tensors get
 * their average, which is what the allreduce would have produced.
 */
static double compute_step(run_t *r)
{
	const options_t *o = &r->o;
	float *g_in = r->cm.buf[COMM_IN], *g_out = r->cm.buf[COMM_OUT];
	size_t n = r->cm.numel[COMM_IN];
	double loss = 0;

	if (r->n_workers == 1)
		return model_grad(&r->model, &r->corpus, &r->workers[0].shard, (size_t)o->batch,
				  o->window, o->negatives, &r->workers[0].rng, g_in, g_out);
	for (int w = 0; w < r->n_workers; w++) {
		loss += model_grad(&r->model, &r->corpus, &r->workers[w].shard,
				   (size_t)o->batch, o->window, o->negatives,
				   &r->workers[w].rng, r->scratch[0], r->scratch[1]);
		for (size_t i = 0; i < n; i++) {
			g_in[i] += r->scratch[0][i];
			g_out[i] += r->scratch[1][i];
		}
		memset(r->scratch[0], 0, n * sizeof(float));
		memset(r->scratch[1], 0, n * sizeof(float));
	}
	for (size_t i = 0; i < n; i++) {
		g_in[i] /= (float)r->n_workers;
		g_out[i] /= (float)r->n_workers;
	}
	return loss / r->n_workers;
}

/* The training loop. Returns 0, or -1 when a step, a check or an allreduce failed. */
static int train(run_t *r)
{
	static const int grads[] = {COMM_IN, COMM_OUT};
	const options_t *o = &r->o;
	double interval_loss = 0;
	long interval_steps = 0;
	size_t interval_rows = 0;

	r->t_start = now_s();
	for (long step = 1; step <= o->steps; step++) {
		double loss = compute_step(r);

		r->losses[step - 1] = (float)loss;
		interval_loss += loss;
		interval_steps++;
		if (comm_allreduce(&r->cm, grads, 2, SC_OP_AVERAGE) < 0)
			return -1;
		interval_rows +=
		    model_apply(&r->model, r->cm.buf[COMM_IN], r->cm.buf[COMM_OUT]);
		if (o->check_every > 0 && (step % o->check_every == 0 || step == o->steps) &&
		    check_sync(&r->cm, &r->model, step) < 0)
			return -1;
		if (step == 1 || step % o->print_every == 0 || step == o->steps) {
			double local = interval_loss / (double)interval_steps, avg = local;

			if (average_stats(&r->cm, &avg, 1) < 0)
				return -1;
			if (r->show)
				print_progress(r, step, avg, local,
					       (double)interval_rows / (double)interval_steps /
						   (2.0 * (double)r->corpus.vocab_size));
			interval_loss = 0;
			interval_steps = 0;
			interval_rows = 0;
		}
	}
	return 0;
}

/* Mean loss over the first and the last few steps, averaged across ranks; prints it. */
static int summarise(run_t *r)
{
	const options_t *o = &r->o;
	double elapsed = now_s() - r->t_start;
	long n = o->steps / 10 < 50 ? (o->steps / 10 ? o->steps / 10 : 1) : 50;
	double v[3] = {0, 0, r->losses[0]};

	for (long i = 0; i < n; i++) {
		v[0] += r->losses[i] / (double)n;
		v[1] += r->losses[o->steps - 1 - i] / (double)n;
	}
	if (average_stats(&r->cm, v, 3) < 0)
		return -1;
	if (r->cm.rank != 0 && !o->verbose_all)
		return 0;
	double tokens = (double)r->size * (double)o->batch * (double)o->steps;

	if (o->verbose_all)
		printf("rank=%d ", r->cm.rank);
	printf(
	    "done: steps=%ld loss %.4f at step 1, %.4f over the first %ld steps -> %.4f over "
	    "the last %ld; time=%.1fs tokens/s=%.0f synced=%.1fMB waiting=%.0f%%%s\n",
	    o->steps, v[2], v[0], n, v[1], n, elapsed, tokens / elapsed,
	    (double)r->cm.synced_bytes / 1e6, 100.0 * r->cm.wait_s / elapsed,
	    o->check_every > 0 && !o->local ? "; weights identical on all ranks" : "");
	comm_report(&r->cm);
	return 0;
}

static int setup(run_t *r)
{
	const options_t *o = &r->o;
	corpus_t *c = &r->corpus;

	if (corpus_load(c, o->corpus, o->min_count, o->sample, o->seed) < 0)
		return -1;
	size_t numel = c->vocab_size * (size_t)o->dim;

	if (comm_open(&r->cm, o->local, numel, o->timeout_ms, o->exdyna) < 0)
		return -1;
	r->show = r->cm.rank == 0 || o->verbose_all;
	r->n_workers = o->local ? o->local_ranks : 1;
	r->size = r->cm.size * r->n_workers;
	r->workers = calloc((size_t)r->n_workers, sizeof(*r->workers));
	if (!r->workers)
		return -1;
	for (int w = 0; w < r->n_workers; w++) {
		size_t rank = (size_t)(r->cm.rank + w);
		worker_t *wk = &r->workers[w];

		wk->shard.begin = c->n_tokens * rank / (size_t)r->size;
		wk->shard.end = c->n_tokens * (rank + 1) / (size_t)r->size;
		if (wk->shard.end - wk->shard.begin < 2 * (size_t)o->window + 1) {
			fprintf(stderr, "cbow: rank %zu: shard of %zu tokens is too small\n",
				rank, wk->shard.end - wk->shard.begin);
			return -1;
		}
		wk->rng = rng_derive(o->seed, 1000 + rank);
	}
	if (r->n_workers > 1) {
		r->scratch[0] = calloc(numel, sizeof(float));
		r->scratch[1] = calloc(numel, sizeof(float));
		if (!r->scratch[0] || !r->scratch[1])
			return -1;
	}
	r->losses = calloc((size_t)o->steps, sizeof(*r->losses));
	if (!r->losses || model_init(&r->model, c->vocab_size, (size_t)o->dim, o->opt,
				     (float)o->lr, o->seed) < 0) {
		fprintf(stderr, "cbow: out of memory for the model (%zu x %ld)\n",
			c->vocab_size, o->dim);
		return -1;
	}
	if (r->cm.rank == 0)
		printf("cbow: %s: %zu words, vocabulary %zu (min count %u), %zu tokens trained "
		       "on; %d rank%s%s, %zu tokens per shard\n"
		       "cbow: dim=%ld batch=%ld window=%u negatives=%u %s lr=%g steps=%ld; "
		       "gradients 2 x %.1f MB per step\n",
		       o->corpus ? o->corpus : "King James Bible", c->n_raw_tokens,
		       c->vocab_size, o->min_count, c->n_tokens, r->size,
		       r->size > 1 ? "s" : "",
		       !o->local     ? ""
		       : r->size > 1 ? " simulated locally"
				     : " (local, no sparsecomm)",
		       r->workers[0].shard.end - r->workers[0].shard.begin, o->dim, o->batch,
		       o->window, o->negatives, o->opt == OPT_ADAGRAD ? "adagrad" : "sgd",
		       o->lr, o->steps, (double)numel * 4 / 1e6);
	return 0;
}

int main(int argc, char **argv)
{
	run_t r = {0};
	int rc = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (parse_options(argc, argv, &r.o) < 0)
		return 2;
	if (setup(&r) == 0 && train(&r) == 0 && summarise(&r) == 0) {
		if (r.cm.rank == 0 && *r.o.neighbours)
			print_neighbours(&r.corpus, &r.model, r.o.neighbours);
		rc = 0;
	}
	comm_close(&r.cm);
	model_free(&r.model);
	corpus_free(&r.corpus);
	free(r.workers);
	free(r.scratch[0]);
	free(r.scratch[1]);
	free(r.losses);
	return rc;
}
