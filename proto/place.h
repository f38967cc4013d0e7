/*
 * place.h: where a trainer stands in its job, read from the environment a scheduler gives
 * it (docs/deployment.md, "Under a scheduler"): its rank, its node and its place on the
 * node, the job's key, and where the job's coordinator is. A pure function of the
 * variables (read through a callback) and this host's name, so that every scheduler's set
 * of variables is unit-tested without the scheduler.
 *
 * Sources, innermost launcher first (the first whose rank variable is set is the job's;
 * a field it lacks is taken from the sources after it, never from one before it):
 *   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE
 *             (RANK and LOCAL_RANK both set), TORCHELASTIC_RUN_ID
 *   openmpi   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, OMPI_MCA_orte_num_nodes,
 *             OMPI_MCA_ess_base_jobid
 *   pmix      PMIX_RANK, PMIX_NAMESPACE
 *   pmi       PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS (MPICH's Hydra)
 *   slurm     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE,
 *             SLURM_NODEID, SLURM_NNODES, SLURM_STEP_NODELIST, SLURM_JOB_ID, SLURM_STEP_ID
 * SPARSECOMM_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _NODE_RANK, _NODE_COUNT, _COORDINATOR,
 * _PORT and _JOB_ID win over every source.
 */
#ifndef SC_PROTO_PLACE_H
#define SC_PROTO_PLACE_H

#include <stddef.h>

/* Returns the value of the variable name, or NULL when it is not set. */
typedef const char *(*sc_env_get_fn)(void *ctx, const char *name);

#define SC_PLACE_HOST_BYTES 256
#define SC_PLACE_JOB_BYTES  128

typedef struct sc_place {
	int rank, size; /* the trainer's, as sparsecomm numbers them */
	int sched_rank; /* the scheduler's rank: rank, unless it numbers ranks otherwise
			   (Open MPI mapping by node: node_from says so) */
	int local_rank, local_size; /* on its node; local_size is the same on every node */
	int node_rank, node_count;
	const char *source;    /* "torchrun", "openmpi", "pmix", "pmi", "slurm", "sparsecomm" */
	const char *node_from; /* how node_rank was found: the variable, "node list",
				  "ranks in blocks" */
	char job[SC_PLACE_JOB_BYTES]; /* the job's key: letters, digits, '.', '_', '-' */
	char coordinator_host[SC_PLACE_HOST_BYTES]; /* "" when the environment names none */
	int coordinator_port;
} sc_place_t;

/*
 * Reads the placement. Returns 1 with *out filled when a source names this trainer's rank,
 * 0 when none does (no scheduler: *out untouched), -1 when the variables are inconsistent
 * or incomplete, with err saying which variable is wrong and what to set. host is this
 * host's name, matched against a node list.
 */
int sc_place_from_env(sc_env_get_fn get, void *ctx, const char *host, sc_place_t *out,
		      char *err, size_t err_len);

/* The index of host in a Slurm host list ("a,b", "node[1-3,7],gpu[01-02]"), -1 when it is
 * not there or the list is malformed; the first host is copied to first (may be NULL). */
int sc_hostlist_find(const char *list, const char *host, char *first, size_t first_len);

#endif
