/*
 * test_world_host.c: the nodes per core the daemons derive from their hosts and cores at
 * join (world/host.c): one value from the busiest host, daemons of a host counted over
 * the most cores any of them may use, never under 1; unknown hosts and cores count as a
 * host and a core of their own; the order of the ranks does not change it (every rank
 * computes it from the same list). This process's own host identity is read.
 */
#include <sched.h>

#include "unit.h"
#include "world/host.h"

UNIT_TEST(world_host_cpu_share)
{
	/* 4 emulated nodes on one 2-core machine: 2 nodes a core */
	scd_host_t four[4] = {{7, 2}, {7, 2}, {7, 2}, {7, 2}};
	CHECK_NEAR(scd_host_cpu_share(four, sizeof(scd_host_t), 4), 2, 0);
	/* 6 on 2 cores, one of them pinned to 1: the host's most cores count */
	scd_host_t six[6] = {{7, 2}, {7, 1}, {7, 2}, {7, 2}, {7, 2}, {7, 2}};
	CHECK_NEAR(scd_host_cpu_share(six, sizeof(scd_host_t), 6), 3, 0);
	/* one node per machine, or more cores than nodes: 1 */
	scd_host_t apart[3] = {{1, 8}, {2, 8}, {3, 1}};
	CHECK_NEAR(scd_host_cpu_share(apart, sizeof(scd_host_t), 3), 1, 0);
	scd_host_t roomy[3] = {{5, 16}, {5, 16}, {5, 16}};
	CHECK_NEAR(scd_host_cpu_share(roomy, sizeof(scd_host_t), 3), 1, 0);
	/* the busiest host decides: 3 on 1 core beside 2 on 4 */
	scd_host_t mixed[5] = {{9, 4}, {3, 1}, {9, 4}, {3, 1}, {3, 1}};
	CHECK_NEAR(scd_host_cpu_share(mixed, sizeof(scd_host_t), 5), 3, 0);
	/* any order of the ranks: the same */
	scd_host_t mixed2[5] = {{3, 1}, {9, 4}, {3, 1}, {3, 1}, {9, 4}};
	CHECK_NEAR(scd_host_cpu_share(mixed2, sizeof(scd_host_t), 5), 3, 0);
	/* unknown host (an old or unreadable peer): a host of its own; unknown cores: as
	 * many as the host's daemons */
	scd_host_t unknown[4] = {{0, 1}, {0, 1}, {4, 0}, {4, 0}};
	CHECK_NEAR(scd_host_cpu_share(unknown, sizeof(scd_host_t), 4), 1, 0);
	scd_host_t none[1] = {{0, 0}};
	CHECK_NEAR(scd_host_cpu_share(none, sizeof(scd_host_t), 1), 1, 0);
	/* 3 nodes on 2 cores */
	scd_host_t three[3] = {{7, 2}, {7, 2}, {7, 2}};
	CHECK_NEAR(scd_host_cpu_share(three, sizeof(scd_host_t), 3), 1.5, 1e-12);
	/* read in place from a larger struct, as the world reads its peers */
	struct {
		char before[40];
		scd_host_t host;
		int after;
	} peers[4] = {{.host = {7, 1}}, {.host = {8, 1}}, {.host = {7, 1}}, {.host = {7, 1}}};
	CHECK_NEAR(scd_host_cpu_share(&peers[0].host, sizeof(peers[0]), 4), 3, 0);
}

UNIT_TEST(world_host_self)
{
	scd_host_t a = scd_host_self(), b = scd_host_self();
	cpu_set_t set;
	CPU_ZERO(&set);
	CHECK_TRUE(sched_getaffinity(0, sizeof(set), &set) == 0);
	CHECK_EQ_INT((int)a.cores, CPU_COUNT(&set));
	CHECK_TRUE(a.id == b.id); /* the same machine, the same identity */
	CHECK_TRUE(a.id != 0);	  /* this machine has a boot id */
}
