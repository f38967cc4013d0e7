/*
 * fuzz_peer_msg.c: the daemons' protocol (world/) as a peer or the coordinator sends it.
 * The input is a sequence of records (sender's rank u8, length u16, a PeerMsg of that
 * length), each unpacked as scd_world_drain does and handed to what checks and applies it
 * without the network:
 *   Plan           scd_neg_plan_check, then scd_neg_plan_entries on a rank's response
 *                  cache kept across the records; every id of an accepted plan's
 *                  responses must then name a cached entry (what the job reads);
 *   Join, World    the transport's bootstrap blobs, through the tcp backend's describe;
 *   Config*        the runtime change of a setting (scd_config_set), as apply_config;
 *   Ready          what the coordinator of a world of three ranks collects of it
 *                  (scd_neg_ready_collect); every name collected must then be counted
 *                  once for each rank that announced it;
 *   Heartbeat,     what rank 1 takes of its coordinator's (scd_live_on_heartbeat,
 *   NodeState      scd_live_on_node_state): no peer is then heard in the future, and
 *                  every state is one of the three.
 * The world (one per input) is a coordinator's and a rank's at once: the plans' entries
 * go to its cache as on a rank, the announcements to its collection.
 */
#include "fuzz.h"

#include "transport/transport_internal.h"
#include "util/clock.h"
#include "world/world_int.h"

static void plan(scd_world_t *w, const Sparsecomm__Plan *p)
{
	char err[200];
	if (scd_neg_plan_check(w, p, err, sizeof(err)) != SC_OK ||
	    scd_neg_plan_entries(w, p) != SC_OK)
		return;
	for (size_t i = 0; i < p->n_responses; i++) {
		const Sparsecomm__Response *r = p->responses[i];
		if (r->kind == SPARSECOMM__RESPONSE_KIND__RESPONSE_ERROR)
			continue;
		for (size_t k = 0; k < r->n_cache_ids; k++)
			FUZZ_REQUIRE(scd_cache_get(w, r->cache_ids[k]) != NULL);
	}
}

static void blob(const ProtobufCBinaryData *b)
{
	char addr[128];
	uint16_t port;
	if (b->len <= SCD_TRANSPORT_BLOB_MAX)
		scd_transport_tcp_ops.describe(b->data, b->len, addr, sizeof(addr), &port);
}

static void config(scd_config_t *cfg, const Sparsecomm__ConfigSet *cs)
{
	char err[256];
	scd_config_set(cfg, scd_config_find(cs->key ? cs->key : ""), cs->value ? cs->value : "",
		       SCD_SRC_RUNTIME, err, sizeof(err));
}

enum { WORLD_SIZE = 3 };

/* A group that the pass fails: an error with its reason (the entry stays: the fuzzer's
 * world plans nothing). */
static void group_fail(scd_world_t *w, void *arg, scd_centry_t *e, sc_status_t st,
		       const char *msg, int late)
{
	FUZZ_REQUIRE(st < 0 && msg && msg[0] && e->gid);
}

static void ready(scd_world_t *w, int from, const Sparsecomm__ReadyList *rl)
{
	scd_neg_ready_collect(w, from, rl);
	for (const scd_centry_t *e = w->ehead; e; e = e->next) {
		int n = 0;
		for (int r = 0; r < WORLD_SIZE; r++)
			n += e->have[r] != 0; /* announced, stood in for, or failed there */
		FUZZ_REQUIRE(n == e->count && n <= WORLD_SIZE);
	}
	/* the coordinator's groups decided from whatever tags came (world/group.c) */
	scd_group_pass(w, scd_now_ms(), 0, group_fail, NULL);
	for (const scd_centry_t *e = w->ehead; e; e = e->next)
		FUZZ_REQUIRE(!e->gid || e->detached || e->gstate != SCD_GROUP_NONE);
}

static void liveness(scd_world_t *w)
{
	uint64_t now = scd_now_ms();
	for (int r = 0; r < WORLD_SIZE; r++)
		FUZZ_REQUIRE(w->peers[r].heard_ms <= now &&
			     (unsigned)w->peers[r].state <= SPARSECOMM__PEER_STATE__PEER_LEFT);
}

static void handle(scd_world_t *w, scd_config_t *cfg, int from, const Sparsecomm__PeerMsg *m)
{
	switch (m->body_case) {
	case SPARSECOMM__PEER_MSG__BODY_HEARTBEAT:
		scd_live_on_heartbeat(w, from, m->heartbeat);
		liveness(w);
		break;
	case SPARSECOMM__PEER_MSG__BODY_NODE_STATE:
		scd_live_on_node_state(w, m->node_state);
		liveness(w);
		break;
	case SPARSECOMM__PEER_MSG__BODY_READY:
		ready(w, from, m->ready);
		break;
	case SPARSECOMM__PEER_MSG__BODY_PLAN:
		plan(w, m->plan);
		break;
	case SPARSECOMM__PEER_MSG__BODY_JOIN:
		blob(&m->join->transport_blob);
		break;
	case SPARSECOMM__PEER_MSG__BODY_WORLD:
		for (size_t i = 0; i < m->world->n_peers; i++)
			blob(&m->world->peers[i]->transport_blob);
		break;
	case SPARSECOMM__PEER_MSG__BODY_CONFIG_APPLY:
		config(cfg, m->config_apply);
		break;
	case SPARSECOMM__PEER_MSG__BODY_CONFIG_PROPOSE:
		config(cfg, m->config_propose);
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_quiet();
	static scd_daemon_t d;
	scd_world_t *w = calloc(1, sizeof(*w));
	scd_config_t cfg;
	if (!w || !(w->peers = calloc(WORLD_SIZE, sizeof(*w->peers)))) {
		free(w);
		return 0;
	}
	d.world_size = WORLD_SIZE, d.local_size = 1, d.rank = 1;
	w->d = &d;
	scd_config_init(&cfg);
	while (size) {
		int from = (int)(fuzz_take(&data, &size, 1) % WORLD_SIZE);
		size_t len = (size_t)fuzz_take(&data, &size, 2);
		len = len < size ? len : size;
		uint8_t *buf = fuzz_copy(data, len);
		Sparsecomm__PeerMsg *m = sparsecomm__peer_msg__unpack(NULL, len, buf);
		if (m) {
			handle(w, &cfg, from, m);
			sparsecomm__peer_msg__free_unpacked(m, NULL);
		}
		free(buf);
		data += len, size -= len;
	}
	scd_neg_destroy(w);
	free(w->peers);
	free(w);
	scd_config_free(&cfg);
	return 0;
}
