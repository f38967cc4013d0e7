/* test_core_place.c: a trainer's place from each scheduler's variables (proto/place.h), as
 * mpirun, srun, torchrun and PMI set them, the precedence between them, and the refusals. */
#include <stdio.h>
#include <string.h>

#include "place.h"
#include "unit.h"

/* An environment: "NAME=VALUE" strings, NULL-terminated. */
static const char *lookup(void *ctx, const char *name)
{
	size_t n = strlen(name);
	for (const char *const *e = ctx; *e; e++)
		if (!strncmp(*e, name, n) && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

static int place(const char *const *envv, const char *host, sc_place_t *p, char *err)
{
	memset(p, 0x55, sizeof(*p));
	err[0] = '\0';
	return sc_place_from_env(lookup, (void *)envv, host, p, err, 300);
}

#define CHECK_PLACE(p, r, sz, lr, ls, nr, nc)                                                  \
	do {                                                                                   \
		CHECK_EQ_INT((p).rank, r);                                                     \
		CHECK_EQ_INT((p).size, sz);                                                    \
		CHECK_EQ_INT((p).local_rank, lr);                                              \
		CHECK_EQ_INT((p).local_size, ls);                                              \
		CHECK_EQ_INT((p).node_rank, nr);                                               \
		CHECK_EQ_INT((p).node_count, nc);                                              \
	} while (0)

UNIT_TEST(place_none)
{
	const char *envv[] = {"PATH=/bin", "RANK=3", NULL}; /* a bare RANK is no launcher's */
	sc_place_t p;
	char err[300];
	CHECK_EQ_INT(place(envv, "h", &p, err), 0);
}

/* mpirun -np 4 -H a:2,b:2: no node index, ranks in blocks; the coordinator is MASTER_ADDR
 * (mpirun -x), the port the job id's hash, the same for every rank. */
UNIT_TEST(place_openmpi)
{
	const char *envv[] = {"OMPI_COMM_WORLD_RANK=3",
			      "OMPI_COMM_WORLD_SIZE=4",
			      "OMPI_COMM_WORLD_LOCAL_RANK=1",
			      "OMPI_COMM_WORLD_LOCAL_SIZE=2",
			      "OMPI_COMM_WORLD_NODE_RANK=1",
			      "OMPI_MCA_orte_num_nodes=2",
			      "OMPI_MCA_ess_base_jobid=4228",
			      "PMIX_RANK=3",
			      "PMIX_NAMESPACE=4228",
			      "MASTER_ADDR=10.0.0.1",
			      NULL};
	const char *envv0[] = {"OMPI_COMM_WORLD_RANK=0",       "OMPI_COMM_WORLD_SIZE=4",
			       "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
			       "OMPI_MCA_orte_num_nodes=2",    "OMPI_MCA_ess_base_jobid=4228",
			       "MASTER_ADDR=10.0.0.1",	       NULL};
	sc_place_t p, p0;
	char err[300];
	CHECK_MSG(place(envv, "b", &p, err) == 1, "%s", err);
	CHECK_PLACE(p, 3, 4, 1, 2, 1, 2);
	CHECK_TRUE(!strcmp(p.source, "openmpi"));
	CHECK_TRUE(!strcmp(p.node_from, "ranks in blocks"));
	CHECK_TRUE(!strcmp(p.job, "openmpi.4228"));
	CHECK_TRUE(!strcmp(p.coordinator_host, "10.0.0.1"));
	CHECK_MSG(place(envv0, "a", &p0, err) == 1, "%s", err);
	CHECK_PLACE(p0, 0, 4, 0, 2, 0, 2);
	CHECK_EQ_INT(p0.coordinator_port, p.coordinator_port);
	CHECK_TRUE(p.coordinator_port >= 20000 && p.coordinator_port < 32000);

	/* one node: the coordinator is on loopback; two nodes without MASTER_ADDR: none */
	const char *one[] = {"OMPI_COMM_WORLD_RANK=2",
			     "OMPI_COMM_WORLD_SIZE=4",
			     "OMPI_COMM_WORLD_LOCAL_RANK=2",
			     "OMPI_COMM_WORLD_LOCAL_SIZE=4",
			     "OMPI_MCA_orte_num_nodes=1",
			     "OMPI_MCA_ess_base_jobid=7",
			     NULL};
	CHECK_MSG(place(one, "a", &p, err) == 1, "%s", err);
	CHECK_PLACE(p, 2, 4, 2, 4, 0, 1);
	CHECK_TRUE(!strcmp(p.coordinator_host, "127.0.0.1"));
	envv0[6] = NULL; /* MASTER_ADDR */
	CHECK_MSG(place(envv0, "a", &p, err) == 1, "%s", err);
	CHECK_TRUE(p.coordinator_host[0] == '\0');

	/* round-robin placement without Open MPI saying so: refused, saying how to place them
	 */
	const char *rr[] = {"OMPI_COMM_WORLD_RANK=1",
			    "OMPI_COMM_WORLD_SIZE=4",
			    "OMPI_COMM_WORLD_LOCAL_RANK=0",
			    "OMPI_COMM_WORLD_LOCAL_SIZE=2",
			    "OMPI_MCA_orte_num_nodes=2",
			    "OMPI_MCA_ess_base_jobid=7",
			    NULL,
			    NULL};
	CHECK_EQ_INT(place(rr, "a", &p, err), -1);
	CHECK_MSG(strstr(err, "--map-by slot") && strstr(err, "rank 1"), "%s", err);
	/* mpirun --map-by node, which Open MPI tells every rank: rank 1 is trainer 0 of node
	 * 1, which sparsecomm numbers 2 */
	rr[6] = "OMPI_MCA_rmaps_base_mapping_policy=node";
	CHECK_MSG(place(rr, "a", &p, err) == 1, "%s", err);
	CHECK_PLACE(p, 2, 4, 0, 2, 1, 2);
	CHECK_EQ_INT(p.sched_rank, 1);
	CHECK_TRUE(!strcmp(p.node_from, "Open MPI's mapping by node"));
	/* 3 nodes of 2: ranks 0..5 round-robin; every rank lands on its node, numbered node
	 * by node, each number once */
	int seen = 0;
	for (int r = 0; r < 6; r++) {
		char rank[40], local[40];
		snprintf(rank, sizeof(rank), "OMPI_COMM_WORLD_RANK=%d", r);
		snprintf(local, sizeof(local), "OMPI_COMM_WORLD_LOCAL_RANK=%d", r / 3);
		const char *e3[] = {rank,
				    "OMPI_COMM_WORLD_SIZE=6",
				    local,
				    "OMPI_COMM_WORLD_LOCAL_SIZE=2",
				    "OMPI_MCA_orte_num_nodes=3",
				    "OMPI_MCA_ess_base_jobid=7",
				    "OMPI_MCA_rmaps_base_mapping_policy=node",
				    NULL};
		CHECK_MSG(place(e3, "a", &p, err) == 1, "%s", err);
		CHECK_EQ_INT(p.node_rank, r % 3);
		CHECK_EQ_INT(p.local_rank, r / 3);
		CHECK_EQ_INT(p.rank, (r % 3) * 2 + r / 3);
		CHECK_EQ_INT(p.sched_rank, r);
		seen |= 1 << p.rank;
	}
	CHECK_EQ_INT(seen, 0x3f);
	/* a local rank that contradicts the mapping (a node short of slots): refused */
	const char *bad[] = {"OMPI_COMM_WORLD_RANK=1",
			     "OMPI_COMM_WORLD_SIZE=4",
			     "OMPI_COMM_WORLD_LOCAL_RANK=1",
			     "OMPI_COMM_WORLD_LOCAL_SIZE=2",
			     "OMPI_MCA_orte_num_nodes=2",
			     "OMPI_MCA_ess_base_jobid=7",
			     "OMPI_MCA_rmaps_base_mapping_policy=node",
			     NULL};
	CHECK_EQ_INT(place(bad, "a", &p, err), -1);
	CHECK_MSG(strstr(err, "maps the ranks by node") && strstr(err, "rank 1"), "%s", err);
	/* --map-by node --rank-by slot: Open MPI numbers them in blocks after all */
	const char *slot[] = {"OMPI_COMM_WORLD_RANK=1",
			      "OMPI_COMM_WORLD_SIZE=4",
			      "OMPI_COMM_WORLD_LOCAL_RANK=1",
			      "OMPI_COMM_WORLD_LOCAL_SIZE=2",
			      "OMPI_MCA_orte_num_nodes=2",
			      "OMPI_MCA_ess_base_jobid=7",
			      "OMPI_MCA_rmaps_base_mapping_policy=node",
			      "OMPI_MCA_rmaps_base_ranking_policy=slot",
			      NULL};
	CHECK_MSG(place(slot, "a", &p, err) == 1, "%s", err);
	CHECK_PLACE(p, 1, 4, 1, 2, 0, 2);
	CHECK_TRUE(!strcmp(p.node_from, "ranks in blocks"));
	/* mpirun --map-by node inside a Slurm allocation: the node from the node list, the
	 * trainers still numbered node by node (Open MPI's rank 1, on the list's second
	 * host, is sparsecomm's 2) */
	const char *slurm[] = {"OMPI_COMM_WORLD_RANK=1",
			       "OMPI_COMM_WORLD_SIZE=4",
			       "OMPI_COMM_WORLD_LOCAL_RANK=0",
			       "OMPI_COMM_WORLD_LOCAL_SIZE=2",
			       "OMPI_MCA_orte_num_nodes=2",
			       "OMPI_MCA_ess_base_jobid=7",
			       "OMPI_MCA_rmaps_base_mapping_policy=node",
			       "SLURM_JOB_NODELIST=gpu[01-02]",
			       NULL};
	CHECK_MSG(place(slurm, "gpu02", &p, err) == 1, "%s", err);
	CHECK_PLACE(p, 2, 4, 0, 2, 1, 2);
	CHECK_EQ_INT(p.sched_rank, 1);
	CHECK_TRUE(!strcmp(p.node_from, "node list"));
}

/* srun -N 2 -n 4 (block distribution) as srun sets it: the node from SLURM_NODEID, the
 * coordinator the first host of the step's node list. */
UNIT_TEST(place_slurm)
{
	const char *envv[] = {"SLURM_PROCID=2",
			      "SLURM_NTASKS=4",
			      "SLURM_LOCALID=0",
			      "SLURM_NODEID=1",
			      "SLURM_NNODES=2",
			      "SLURM_STEP_TASKS_PER_NODE=2(x2)",
			      "SLURM_TASKS_PER_NODE=2(x2)",
			      "SLURM_STEP_NODELIST=gpu[07-08]",
			      "SLURM_JOB_NODELIST=gpu[07-08]",
			      "SLURM_JOB_ID=991",
			      "SLURM_STEP_ID=0",
			      "SLURMD_NODENAME=gpu08",
			      NULL};
	sc_place_t p;
	char err[300];
	CHECK_MSG(place(envv, "gpu08", &p, err) == 1, "%s", err);
	CHECK_PLACE(p, 2, 4, 0, 2, 1, 2);
	CHECK_TRUE(!strcmp(p.source, "slurm"));
	CHECK_TRUE(!strcmp(p.node_from, "SLURM_NODEID"));
	CHECK_TRUE(!strcmp(p.job, "slurm.991.0"));
	CHECK_TRUE(!strcmp(p.coordinator_host, "gpu07"));

	/* without SLURM_NODEID the node is the host's place in the node list */
	const char *nolist[] = {"SLURM_PROCID=5",
				"SLURM_NTASKS=6",
				"SLURM_LOCALID=1",
				"SLURM_NNODES=3",
				"SLURM_JOB_ID=5",
				"SLURM_STEP_ID=2",
				"SLURM_STEP_NODELIST=a,b[1-2]",
				NULL};
	CHECK_MSG(place(nolist, "b2", &p, err) == 1, "%s", err);
	CHECK_PLACE(p, 5, 6, 1, 2, 2, 3);
	CHECK_TRUE(!strcmp(p.node_from, "node list"));

	/* uneven tasks per node: refused */
	const char *uneven[] = {"SLURM_PROCID=0",  "SLURM_NTASKS=3",
				"SLURM_LOCALID=0", "SLURM_NODEID=0",
				"SLURM_NNODES=2",  "SLURM_STEP_TASKS_PER_NODE=2,1",
				"SLURM_JOB_ID=5",  NULL};
	CHECK_EQ_INT(place(uneven, "a", &p, err), -1);
	CHECK_MSG(strstr(err, "same number of trainers"), "%s", err);
}

/* torchrun --nnodes 2 --nproc-per-node 2 under srun: torchrun's variables win over the
 * Slurm step's (which describe torchrun's agent), the port is MASTER_PORT + 1. */
UNIT_TEST(place_torchrun)
{
	const char *envv[] = {"RANK=3",
			      "WORLD_SIZE=4",
			      "LOCAL_RANK=1",
			      "LOCAL_WORLD_SIZE=2",
			      "GROUP_RANK=1",
			      "GROUP_WORLD_SIZE=2",
			      "MASTER_ADDR=node0",
			      "MASTER_PORT=29400",
			      "TORCHELASTIC_RUN_ID=none",
			      "SLURM_PROCID=1",
			      "SLURM_NTASKS=2",
			      "SLURM_LOCALID=0",
			      "SLURM_NODEID=1",
			      "SLURM_NNODES=2",
			      "SLURM_JOB_ID=3",
			      NULL};
	sc_place_t p;
	char err[300];
	CHECK_MSG(place(envv, "node1", &p, err) == 1, "%s", err);
	CHECK_PLACE(p, 3, 4, 1, 2, 1, 2);
	CHECK_TRUE(!strcmp(p.source, "torchrun"));
	CHECK_TRUE(!strcmp(p.node_from, "GROUP_RANK"));
	CHECK_TRUE(!strcmp(p.coordinator_host, "node0"));
	CHECK_EQ_INT(p.coordinator_port, 29401);
	CHECK_TRUE(!strcmp(p.job, "torchrun.none.node0.29400"));
}

/* srun --mpi=pmix: PMIX_RANK names the rank, Slurm's variables the rest; MPICH's Hydra. */
UNIT_TEST(place_pmi)
{
	const char *pmix[] = {"PMIX_RANK=1",
			      "PMIX_NAMESPACE=slurm.pmix.77.0",
			      "SLURM_PROCID=1",
			      "SLURM_NTASKS=2",
			      "SLURM_LOCALID=1",
			      "SLURM_NODEID=0",
			      "SLURM_NNODES=1",
			      "SLURM_JOB_ID=77",
			      NULL};
	const char *hydra[] = {"PMI_RANK=2",	    "PMI_SIZE=4",	 "MPI_LOCALRANKID=0",
			       "MPI_LOCALNRANKS=2", "PMI_KVSNAME=kvs_9", NULL};
	sc_place_t p;
	char err[300];
	CHECK_MSG(place(pmix, "h", &p, err) == 1, "%s", err);
	CHECK_PLACE(p, 1, 2, 1, 2, 0, 1);
	CHECK_TRUE(!strcmp(p.source, "pmix"));
	CHECK_TRUE(!strcmp(p.job, "pmix.slurm.pmix.77.0"));
	CHECK_MSG(place(hydra, "h", &p, err) == 1, "%s", err);
	CHECK_PLACE(p, 2, 4, 0, 2, 1, 2);
	CHECK_TRUE(!strcmp(p.source, "pmi"));
}

/* SPARSECOMM_* wins over the scheduler's; malformed values are named. */
UNIT_TEST(place_own_variables_win)
{
	const char *envv[] = {"OMPI_COMM_WORLD_RANK=1",
			      "OMPI_COMM_WORLD_SIZE=2",
			      "OMPI_COMM_WORLD_LOCAL_RANK=1",
			      "OMPI_COMM_WORLD_LOCAL_SIZE=2",
			      "OMPI_MCA_orte_num_nodes=1",
			      "OMPI_MCA_ess_base_jobid=5",
			      "SPARSECOMM_LOCAL_SIZE=1",
			      "SPARSECOMM_LOCAL_RANK=0",
			      "SPARSECOMM_NODE_RANK=1",
			      "SPARSECOMM_NODE_COUNT=2",
			      "SPARSECOMM_COORDINATOR=[fd00::1]:7700",
			      "SPARSECOMM_JOB_ID=my job",
			      NULL};
	sc_place_t p;
	char err[300];
	CHECK_MSG(place(envv, "h", &p, err) == 1, "%s", err);
	CHECK_PLACE(p, 1, 2, 0, 1, 1, 2);
	CHECK_TRUE(!strcmp(p.node_from, "SPARSECOMM_NODE_RANK"));
	CHECK_TRUE(!strcmp(p.coordinator_host, "fd00::1"));
	CHECK_EQ_INT(p.coordinator_port, 7700);
	CHECK_TRUE(!strcmp(p.job, "my_job"));

	const char *bad[] = {"SLURM_PROCID=x1", "SLURM_NTASKS=2", NULL};
	CHECK_EQ_INT(place(bad, "h", &p, err), -1);
	CHECK_MSG(strstr(err, "SLURM_PROCID") && strstr(err, "x1"), "%s", err);
	const char *range[] = {"SLURM_PROCID=4",
			       "SLURM_NTASKS=4",
			       "SLURM_LOCALID=0",
			       "SLURM_NODEID=0",
			       "SLURM_NNODES=4",
			       "SLURM_JOB_ID=1",
			       NULL};
	CHECK_EQ_INT(place(range, "h", &p, err), -1);
	CHECK_MSG(strstr(err, "out of range"), "%s", err);
	const char *nojob[] = {"PMI_RANK=0", "PMI_SIZE=1", "MPI_LOCALNRANKS=1", NULL};
	CHECK_EQ_INT(place(nojob, "h", &p, err), -1);
	CHECK_MSG(strstr(err, "SPARSECOMM_JOB_ID"), "%s", err);
}

UNIT_TEST(place_hostlist)
{
	char first[64];
	CHECK_EQ_INT(sc_hostlist_find("n[1-3],m", "m", first, sizeof(first)), 3);
	CHECK_TRUE(!strcmp(first, "n1"));
	CHECK_EQ_INT(sc_hostlist_find("gpu[007-010]-ib", "gpu009-ib", first, sizeof(first)), 2);
	CHECK_TRUE(!strcmp(first, "gpu007-ib"));
	CHECK_EQ_INT(sc_hostlist_find("a[1,3-4]", "a4", NULL, 0), 2);
	CHECK_EQ_INT(sc_hostlist_find("a[1-3]", "a9", NULL, 0), -1);
	CHECK_EQ_INT(sc_hostlist_find("a[1-", "a1", NULL, 0), -1);
	CHECK_EQ_INT(sc_hostlist_find("a[3-1]", "a1", NULL, 0), -1);
	CHECK_EQ_INT(sc_hostlist_find("a[0-999999]", "b", NULL, 0), -1);
}
