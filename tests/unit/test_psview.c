/*
 * test_psview.c: the engine's cache of process sets' views (engine/psview.h). A view the
 * cache lets go takes its set's GPU transport with it only as far as a parking place: made
 * again, the view gets the same one back (what the set decided with its other members
 * outlives a view that one node alone let go), while another set's view is never given it.
 */
#include <string.h>

#include "engine/psview.h"
#include "unit.h"
#include "unit_mesh.h"

UNIT_TEST(psview_gpu_transport_outlives_its_view)
{
	unit_mesh_t m;
	scd_transport_t *mesh = NULL;
	CHECK_EQ_INT(unit_mesh_prepare(&m, "tcp", 1, 7), SC_OK);
	CHECK_EQ_INT(unit_mesh_create(&m, 0, 0, 5000, &mesh), SC_OK);
	scd_psviews_t c;
	scd_psviews_init(&c);
	int nodes[1] = {0};
	scd_job_t job;
	memset(&job, 0, sizeof(job));
	job.nodes = nodes;
	job.n_nodes = 1;
	scd_gpunet_t *first = NULL;
	/* set 1, then SCD_PSVIEWS_MAX others: set 1's view goes */
	for (uint32_t s = 1; s <= SCD_PSVIEWS_MAX + 1; s++) {
		job.pset = s;
		scd_transport_t *t = NULL;
		CHECK_EQ_INT(scd_psviews_make(&c, mesh, &job, &t), SC_OK);
		CHECK_TRUE(t != NULL && scd_psviews_find(&c, &job) == t);
		scd_gpunet_t *g = scd_psviews_gpunet(&c, &job, "tcp", 0);
		CHECK_TRUE(g != NULL);
		if (s == 1)
			first = g;
		else
			CHECK_TRUE(g != first);
	}
	job.pset = 1;
	CHECK_TRUE(scd_psviews_find(&c, &job) == NULL); /* let go, its transport parked */
	CHECK_EQ_INT(c.n_parked, 1);
	scd_transport_t *t = NULL;
	CHECK_EQ_INT(scd_psviews_make(&c, mesh, &job, &t), SC_OK);
	CHECK_MSG(scd_psviews_gpunet(&c, &job, "tcp", 0) == first,
		  "set 1's view made again has another GPU transport than the one it had");
	CHECK_EQ_INT(c.n_parked, 1); /* set 2's, let go in turn */
	scd_psviews_destroy(&c);
	scd_transport_destroy(mesh);
	unit_mesh_release(&m);
}
