/*
 * place.c: a trainer's place in its job from the scheduler's environment (place.h). The
 * table below lists each source's variables; sc_place_from_env picks the first source that
 * names a rank, fills each field from SPARSECOMM_* first, then that source, then the
 * sources after it, derives what is still missing from what is known (a node from the
 * node list or from ranks placed in blocks), and checks that the result is one that the
 * daemons can run: the same number of trainers on every node, ranks numbered node by node.
 */
#include "place.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the job key's port: below the kernel's default ephemeral range (32768 up), whose ports
 * any socket's bind(0) or connect() may hold at the moment the daemon binds (29600 +
 * 10000 reached into it: "Address already in use" for an mpirun job, once) */
#define PLACE_PORT_BASE	  20000
#define PLACE_PORT_SPAN	  12000
#define HOSTLIST_MAX_HOST 65536

enum { F_RANK, F_SIZE, F_LOCAL_RANK, F_LOCAL_SIZE, F_NODE_RANK, F_NODE_COUNT, F_N };

typedef struct source {
	const char *name;
	const char *var[F_N]; /* NULL: this source does not give the field */
	const char *job[2];   /* the variables that make its job key */
} source_t;

static const char *const own_var[F_N] = {"SPARSECOMM_RANK",	  "SPARSECOMM_SIZE",
					 "SPARSECOMM_LOCAL_RANK", "SPARSECOMM_LOCAL_SIZE",
					 "SPARSECOMM_NODE_RANK",  "SPARSECOMM_NODE_COUNT"};

/* Innermost launcher first: torchrun runs under srun or mpirun, mpirun inside a Slurm
 * allocation, and Slurm's PMI variables come with its own. */
static const source_t sources[] = {
    {"torchrun",
     {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE"},
     {"TORCHELASTIC_RUN_ID", NULL}},
    {"openmpi",
     {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE", NULL, "OMPI_MCA_orte_num_nodes"},
     {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}},
    {"pmix", {"PMIX_RANK", NULL, NULL, NULL, NULL, NULL}, {"PMIX_NAMESPACE", NULL}},
    {"pmi",
     {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", NULL, NULL},
     {"PMI_KVSNAME", NULL}},
    {"slurm",
     {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE",
      "SLURM_NODEID", "SLURM_NNODES"},
     {"SLURM_JOB_ID", "SLURM_STEP_ID"}},
};
#define N_SOURCES ((int)(sizeof(sources) / sizeof(sources[0])))

static int fail(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -1;
}

static const char *env(sc_env_get_fn get, void *ctx, const char *name)
{
	const char *v = name ? get(ctx, name) : NULL;
	return v && *v ? v : NULL;
}

/* A count or an index: digits only, at most INT_MAX. Slurm's tasks per node ("2(x3),1")
 * is read up to its first count. */
static int parse_count(const char *name, const char *v, int *out, char *err, size_t len)
{
	char *end;
	errno = 0;
	long n = strtol(v, &end, 10);
	int ok = !errno && end != v && n >= 0 && n <= INT_MAX &&
		 (!*end ||
		  (!strcmp(name, "SLURM_STEP_TASKS_PER_NODE") && (*end == '(' || *end == ',')));
	if (!ok)
		return fail(err, len, "$%s is not a number: '%s'", name, v);
	*out = (int)n;
	return 0;
}

/* Fills field f from SPARSECOMM_*, then the sources from first on; *from_p names the
 * variable. Returns 1 when found, 0 when not, -1 on a malformed value. */
static int field(sc_env_get_fn get, void *ctx, int first, int f, int *out, const char **from_p,
		 char *err, size_t len)
{
	const char *v = env(get, ctx, own_var[f]);
	const char *name = own_var[f];
	for (int s = first; !v && s < N_SOURCES; s++) {
		name = sources[s].var[f];
		v = env(get, ctx, name);
	}
	if (!v)
		return 0;
	if (parse_count(name, v, out, err, len) < 0)
		return -1;
	if (from_p)
		*from_p = name;
	return 1;
}

/* The job key: SPARSECOMM_JOB_ID, else the source's job variables joined by '.', with
 * every character outside [A-Za-z0-9._-] made '_'. torchrun's run id is not unique across
 * jobs ("none" by default), so its master's address and port are added. */
static int job_key(sc_env_get_fn get, void *ctx, int s, char *out, size_t cap, char *err,
		   size_t len)
{
	const char *own = env(get, ctx, "SPARSECOMM_JOB_ID");
	const char *a = own ? own : env(get, ctx, sources[s].job[0]);
	const char *b = own ? NULL : env(get, ctx, sources[s].job[1]);
	if (strcmp(sources[s].name, "slurm")) { /* openmpi: PMIX_NAMESPACE without ORTE's id */
		a = a ? a : b;
		b = NULL;
	}
	if (!a && !strcmp(sources[s].name, "torchrun"))
		a = "none";
	if (!a)
		return fail(err, len,
			    "cannot tell the job apart: %s gives no job id ($%s); set "
			    "SPARSECOMM_JOB_ID to one string, the same for every trainer",
			    sources[s].name, sources[s].job[0]);
	if (!own && !strcmp(sources[s].name, "torchrun"))
		snprintf(out, cap, "torchrun.%s.%s.%s", a, env(get, ctx, "MASTER_ADDR") ?: "",
			 env(get, ctx, "MASTER_PORT") ?: "");
	else
		snprintf(out, cap, "%s%s%s%s%s", own ? "" : sources[s].name, own ? "" : ".", a,
			 b ? "." : "", b ? b : "");
	for (char *p = out; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_'))
			*p = '_';
	return 0;
}

/* Expands one element of a host list ("node[01-03,7]x" or "name") and looks for host in
 * it; *index_p counts the hosts seen. Returns 1 found, 0 not, -1 malformed. */
static int hostlist_elem(const char *e, size_t n, const char *host, int *index_p, char *first,
			 size_t first_len)
{
	const char *lb = memchr(e, '[', n);
	char name[SC_PLACE_HOST_BYTES];
	if (!lb) {
		if (n >= sizeof(name))
			return -1;
		snprintf(name, sizeof(name), "%.*s", (int)n, e);
		if (*index_p == 0 && first)
			snprintf(first, first_len, "%s", name);
		if (host && !strcmp(name, host))
			return 1;
		++*index_p;
		return 0;
	}
	const char *rb = memchr(lb, ']', n - (size_t)(lb - e));
	if (!rb || (size_t)(lb - e) >= sizeof(name) / 2)
		return -1;
	const char *suffix = rb + 1;
	size_t suffix_len = n - (size_t)(suffix - e);
	for (const char *r = lb + 1; r < rb;) {
		const char *comma = memchr(r, ',', (size_t)(rb - r));
		const char *stop = comma ? comma : rb;
		char *end;
		long lo = strtol(r, &end, 10), hi = lo;
		int width = (int)(end - r);
		if (end == r || lo < 0)
			return -1;
		if (*end == '-')
			hi = strtol(end + 1, &end, 10);
		if (end != stop || hi < lo || hi - lo > HOSTLIST_MAX_HOST)
			return -1;
		for (long k = lo; k <= hi; k++) {
			if (*index_p >= HOSTLIST_MAX_HOST)
				return -1;
			snprintf(name, sizeof(name), "%.*s%0*ld%.*s", (int)(lb - e), e, width,
				 k, (int)suffix_len, suffix);
			if (*index_p == 0 && first)
				snprintf(first, first_len, "%s", name);
			if (host && !strcmp(name, host))
				return 1;
			++*index_p;
		}
		r = comma ? comma + 1 : rb;
	}
	return 0;
}

int sc_hostlist_find(const char *list, const char *host, char *first, size_t first_len)
{
	int index = 0, depth = 0;
	if (first && first_len)
		first[0] = '\0';
	if (!list)
		return -1;
	for (const char *e = list, *p = list;; p++) {
		if (*p == '[')
			depth++;
		else if (*p == ']')
			depth--;
		if (depth < 0 || depth > 1)
			return -1;
		if ((*p == ',' && depth == 0) || !*p) {
			int r = p > e ? hostlist_elem(e, (size_t)(p - e), host, &index, first,
						      first_len)
				      : -1;
			if (r != 0)
				return r < 0 ? -1 : index;
			if (!*p)
				break;
			e = p + 1;
		}
	}
	return -1;
}

/* Where the coordinator is: SPARSECOMM_COORDINATOR (HOST:PORT); else the host from
 * MASTER_ADDR, the first host of Slurm's node list, or loopback for a job on one node;
 * the port from SPARSECOMM_PORT, MASTER_PORT + 1 (torchrun's store has MASTER_PORT), or
 * the job key's hash. */
static int coordinator(sc_env_get_fn get, void *ctx, sc_place_t *p, char *err, size_t len)
{
	const char *c = env(get, ctx, "SPARSECOMM_COORDINATOR");
	const char *port_s = env(get, ctx, "SPARSECOMM_PORT");
	const char *master = env(get, ctx, "MASTER_PORT");
	int port = -1;
	p->coordinator_host[0] = '\0';
	if (c) {
		const char *colon = strrchr(c, ':');
		const char *h = c;
		size_t hl = colon ? (size_t)(colon - c) : 0;
		if (hl >= 2 && c[0] == '[' && c[hl - 1] == ']')
			h++, hl -= 2;
		if (!colon || !hl || hl >= sizeof(p->coordinator_host) ||
		    parse_count("SPARSECOMM_COORDINATOR", colon + 1, &port, err, len) < 0 ||
		    port < 1 || port > 65535)
			return fail(err, len, "$SPARSECOMM_COORDINATOR is not HOST:PORT: '%s'",
				    c);
		snprintf(p->coordinator_host, sizeof(p->coordinator_host), "%.*s", (int)hl, h);
		p->coordinator_port = port;
		return 0;
	}
	const char *host = env(get, ctx, "MASTER_ADDR");
	const char *list =
	    env(get, ctx, "SLURM_STEP_NODELIST") ?: env(get, ctx, "SLURM_JOB_NODELIST");
	if (host)
		snprintf(p->coordinator_host, sizeof(p->coordinator_host), "%s", host);
	else if (list && !strcmp(p->source, "slurm"))
		sc_hostlist_find(list, NULL, p->coordinator_host, sizeof(p->coordinator_host));
	else if (p->node_count == 1)
		snprintf(p->coordinator_host, sizeof(p->coordinator_host), "127.0.0.1");
	if (port_s) {
		if (parse_count("SPARSECOMM_PORT", port_s, &port, err, len) < 0 || port < 1 ||
		    port > 65535)
			return fail(err, len, "$SPARSECOMM_PORT is not a port: '%s'", port_s);
	} else if (master) {
		if (parse_count("MASTER_PORT", master, &port, err, len) < 0 || port < 1 ||
		    port >= 65535)
			return fail(err, len, "$MASTER_PORT is not a port: '%s'", master);
		port++;
	} else {
		uint32_t h = 2166136261u; /* FNV-1a of the job key */
		for (const char *q = p->job; *q; q++)
			h = (h ^ (unsigned char)*q) * 16777619u;
		port = PLACE_PORT_BASE + (int)(h % PLACE_PORT_SPAN);
	}
	p->coordinator_port = port;
	return 0;
}

/* Whether Open MPI placed the ranks round-robin over the nodes (mpirun --map-by node,
 * which it tells every rank in OMPI_MCA_rmaps_base_mapping_policy): 1 when it did, the
 * same number on each node, so that rank r is trainer r / N of node r % N, as this rank's
 * local rank confirms; 0 when it did not; -1 (err says why) when it did but this rank's
 * place contradicts it. Every rank of such a job takes this rule, none the blocks'. */
static int by_node(sc_env_get_fn get, void *ctx, const sc_place_t *p, char *err, size_t len)
{
	const char *pol = env(get, ctx, "OMPI_MCA_rmaps_base_mapping_policy");
	const char *rank_by = env(get, ctx, "OMPI_MCA_rmaps_base_ranking_policy");
	if (!pol || strcmp(p->source, "openmpi") ||
	    (strcmp(pol, "node") && strncmp(pol, "node:", 5)))
		return 0;
	/* --rank-by slot (or core...) numbers the mapped ranks in blocks after all */
	if (rank_by && strcmp(rank_by, "node") && strncmp(rank_by, "node:", 5))
		return 0;
	if (p->node_count > 0 && p->size == p->node_count * p->local_size &&
	    p->local_rank == p->rank / p->node_count)
		return 1;
	return fail(
	    err, len,
	    "Open MPI maps the ranks by node, but its rank %d is trainer %d of %d on its "
	    "node of %d nodes (expected trainer %d): every node must run the same number "
	    "of trainers",
	    p->rank, p->local_rank, p->local_size, p->node_count,
	    p->node_count > 0 ? p->rank / p->node_count : 0);
}

/* What is not given but follows from what is. */
static int derive(sc_env_get_fn get, void *ctx, const char *host, sc_place_t *p, int have[F_N],
		  char *err, size_t len)
{
	if (!have[F_LOCAL_SIZE] && have[F_SIZE] && have[F_NODE_COUNT] && p->node_count > 0 &&
	    p->size % p->node_count == 0)
		p->local_size = p->size / p->node_count, have[F_LOCAL_SIZE] = 1;
	if (!have[F_NODE_COUNT] && have[F_SIZE] && have[F_LOCAL_SIZE] && p->local_size > 0 &&
	    p->size % p->local_size == 0)
		p->node_count = p->size / p->local_size, have[F_NODE_COUNT] = 1;
	if (!have[F_SIZE] && have[F_NODE_COUNT] && have[F_LOCAL_SIZE])
		p->size = p->node_count * p->local_size, have[F_SIZE] = 1;
	if (!have[F_SIZE] || !have[F_LOCAL_SIZE])
		return fail(err, len,
			    "%s gives rank %d but not the %s: set SPARSECOMM_SIZE and "
			    "SPARSECOMM_LOCAL_SIZE (trainers per node)",
			    p->source, p->rank,
			    have[F_SIZE] ? "number of trainers per node"
					 : "number of trainers");
	if (!have[F_LOCAL_RANK] && p->local_size == 1)
		p->local_rank = 0, have[F_LOCAL_RANK] = 1;
	if (!have[F_LOCAL_RANK])
		return fail(err, len,
			    "%s gives rank %d but not its place on the node: set "
			    "SPARSECOMM_LOCAL_RANK",
			    p->source, p->rank);
	if (!have[F_NODE_RANK]) {
		const char *list =
		    env(get, ctx, "SLURM_STEP_NODELIST") ?: env(get, ctx, "SLURM_JOB_NODELIST");
		int at = list && host ? sc_hostlist_find(list, host, NULL, 0) : -1;
		int rr = by_node(get, ctx, p, err, len);
		if (rr < 0)
			return -1;
		if (at >= 0) {
			p->node_rank = at, p->node_from = "node list";
		} else if (rr) {
			p->node_rank = p->rank % p->node_count;
			p->node_from = "Open MPI's mapping by node";
		} else if (p->local_size > 0 && p->rank % p->local_size == p->local_rank) {
			p->node_rank = p->rank / p->local_size,
			p->node_from = "ranks in blocks";
		} else {
			return fail(
			    err, len,
			    "%s's rank %d is trainer %d of %d on its node, so its node "
			    "cannot be told from the ranks; place ranks in blocks per node "
			    "(mpirun --map-by slot, srun --distribution=block) or set "
			    "SPARSECOMM_NODE_RANK",
			    p->source, p->rank, p->local_rank, p->local_size);
		}
		/* ranks round-robin over the nodes (whichever rule named this one's node):
		 * sparsecomm numbers the trainers node by node (place.h) */
		if (rr)
			p->rank = p->node_rank * p->local_size + p->local_rank;
	}
	if (!have[F_NODE_COUNT])
		p->node_count = p->local_size ? p->size / p->local_size : 0;
	return 0;
}

/* Whether the daemons can run the placement, with what is wrong said. */
static int check(const sc_place_t *p, char *err, size_t len)
{
	if (p->size < 1 || p->local_size < 1 || p->node_count < 1)
		return fail(err, len, "%s gives %d trainers, %d per node on %d nodes",
			    p->source, p->size, p->local_size, p->node_count);
	if (p->rank >= p->size || p->local_rank >= p->local_size ||
	    p->node_rank >= p->node_count)
		return fail(
		    err, len,
		    "%s gives rank %d of %d, trainer %d of %d on node %d of %d: out of range",
		    p->source, p->rank, p->size, p->local_rank, p->local_size, p->node_rank,
		    p->node_count);
	if ((long)p->node_count * p->local_size != p->size)
		return fail(
		    err, len,
		    "%s gives %d trainers on %d nodes but %d on this one: every node must "
		    "run the same number of trainers",
		    p->source, p->size, p->node_count, p->local_size);
	if (p->node_rank * p->local_size + p->local_rank != p->rank)
		return fail(
		    err, len,
		    "%s's rank %d is trainer %d of node %d (%s), which sparsecomm numbers "
		    "%d: place ranks in blocks per node (mpirun --map-by slot, srun "
		    "--distribution=block)",
		    p->source, p->rank, p->local_rank, p->node_rank, p->node_from,
		    p->node_rank * p->local_size + p->local_rank);
	return 0;
}

int sc_place_from_env(sc_env_get_fn get, void *ctx, const char *host, sc_place_t *out,
		      char *err, size_t len)
{
	sc_place_t p = {0};
	int have[F_N] = {0}, s;
	const char *node_from = NULL;

	for (s = 0; s < N_SOURCES; s++) {
		if (!env(get, ctx, sources[s].var[F_RANK]))
			continue;
		if (!strcmp(sources[s].name, "torchrun") && !env(get, ctx, "LOCAL_RANK"))
			continue; /* a bare RANK is no launcher's */
		break;
	}
	if (s == N_SOURCES && !env(get, ctx, own_var[F_RANK]))
		return 0;
	p.source = s < N_SOURCES ? sources[s].name : "sparsecomm";
	int first = s < N_SOURCES ? s : N_SOURCES;
	int *slot[F_N] = {&p.rank,	 &p.size,      &p.local_rank,
			  &p.local_size, &p.node_rank, &p.node_count};
	for (int f = 0; f < F_N; f++) {
		int r = field(get, ctx, first, f, slot[f], f == F_NODE_RANK ? &node_from : NULL,
			      err, len);
		if (r < 0)
			return -1;
		have[f] = r;
	}
	p.node_from = node_from;
	p.sched_rank = p.rank;
	if (s == N_SOURCES) {
		s = N_SOURCES - 1; /* SPARSECOMM_* alone: the job key must be given */
		if (!env(get, ctx, "SPARSECOMM_JOB_ID"))
			return fail(err, len,
				    "SPARSECOMM_RANK is set without a scheduler: set "
				    "SPARSECOMM_JOB_ID too, or SPARSECOMM_SOCKET");
	}
	if (derive(get, ctx, host, &p, have, err, len) < 0 || check(&p, err, len) < 0 ||
	    job_key(get, ctx, s, p.job, sizeof(p.job), err, len) < 0 ||
	    coordinator(get, ctx, &p, err, len) < 0)
		return -1;
	*out = p;
	return 1;
}
