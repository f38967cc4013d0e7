/*
 * world.c: world formation, the mesh job and its completion, and the peer control channel
 * (see world.h). The coordinator's ROUTER and the other ranks' DEALERs carry one packed
 * PeerMsg per frame; the coordinator handles its own messages by direct call instead of
 * through a socket, and stream.c sends them (numbered, on the peer pipe or this channel).
 * Formation carries the transport's bootstrap blobs without reading
 * them: the backend's describe checks a Join's blob and renders it for status and logs.
 *
 * The calls that start or stop the daemon (the hooks main.c gives, scd_world_hooks_t) are
 * made here and in liveness.c, not in negotiate.c: negotiation returns its failures.
 */
#include "world/admit.h"
#include "world/world_int.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <zmq.h>

#include "ctl/ctl.h"
#include "ctl/tensor.h"
#include "engine/engine.h"
#include "engine/gpunet.h"
#include "transport/tcp_seal.h"
#include "transport/transport.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/timeline.h"
#include "util/zmsg.h"
#include "world/addr.h"
#include "world/pipe.h"
#include "world_protocol.h"

/* ---- formation ---------------------------------------------------------------------- */

/* A peer's blob rendered by the backend ("127.0.0.1:40123" for tcp), for logs. */
static const char *describe_blob(const scd_world_t *w, const scd_peer_t *p, char *buf,
				 size_t len)
{
	char addr[128];
	uint16_t port = 0;
	if (!p->blob_len ||
	    w->tops->describe(p->blob, p->blob_len, addr, sizeof(addr), &port) != SC_OK)
		snprintf(buf, len, "?");
	else if (port)
		snprintf(buf, len, "%s:%u", addr, (unsigned)port);
	else
		snprintf(buf, len, "%s", addr);
	return buf;
}

/* Hands this rank's endpoint and every rank's blob to the engine, whose mesh job builds
 * the transport, with the nodes per core of the world's busiest host (from every rank's
 * host and cores as the world was announced: the same list, hence the same number, on
 * every rank); the job comes back through scd_world_job_done. */
static void start_mesh(scd_world_t *w)
{
	scd_daemon_t *d = w->d;
	uv_timer_stop(&w->join_timer);
	scd_job_t *job = calloc(1, sizeof(*job));
	sc_status_t st = SC_ERR_NOMEM;
	if (job)
		st = scd_transport_boot_init(&job->boot, w->endpoint, d->rank, d->world_size,
					     w->world_id);
	if (st == SC_OK) {
		w->endpoint = NULL; /* the job's now */
		scd_secret_data_key(&d->secret, job->boot.auth_key);
		job->boot.protect =
		    scd_seal_mode_parse(scd_cfg_str(&d->cfg, SCD_CFG_data_protection));
	}
	for (int r = 0; st == SC_OK && r < d->world_size; r++)
		if (r != d->rank)
			st = scd_transport_boot_set_blob(&job->boot, r, w->peers[r].blob,
							 w->peers[r].blob_len);
	if (st != SC_OK) {
		scd_error(SCD_SUB_WORLD, "cannot start the data plane: %s",
			  job ? scd_transport_error() : "out of memory");
		if (job)
			scd_transport_boot_clear(&job->boot);
		free(job);
		scd_world_stop_daemon(w, 1);
		return;
	}
	job->kind = SCD_JOB_MESH;
	job->cpu_share =
	    scd_host_cpu_share(&w->peers[0].host, sizeof(scd_peer_t), d->world_size);
	scd_engine_submit(d->engine, job);
}

static void on_join_timeout(uv_timer_t *t);
static void cfg_formed(scd_world_t *w);

/* This rank's data-plane endpoint, prepared anew (at start, and when the world re-forms:
 * the mesh job took the last one), and its blob as this rank's. Failures are logged by
 * the backend. */
static sc_status_t prepare_endpoint(scd_world_t *w)
{
	scd_daemon_t *d = w->d;
	scd_transport_cfg_t tc = {
	    .addr = scd_cfg_str(&d->cfg, SCD_CFG_data_addr),
	    .advertise = w->advertise[0] ? w->advertise : NULL,
	    .port = (uint16_t)scd_cfg_int(&d->cfg, SCD_CFG_data_port),
	    .rank = d->rank,
	};
	scd_transport_release(w->endpoint);
	w->endpoint = NULL;
	sc_status_t st = scd_transport_prepare(w->tops, &tc, &w->endpoint);
	if (st != SC_OK)
		return st;
	scd_peer_t *self = &w->peers[d->rank];
	memcpy(self->blob, w->endpoint->blob, w->endpoint->blob_len);
	self->blob_len = w->endpoint->blob_len;
	self->joined = 1;
	return SC_OK;
}

/* Key k's value as a Join carries it: numbers in full (scd_config_text rounds them to six
 * digits, which two different values may share). */
static const char *same_text(const scd_config_t *cfg, int k, char *buf, size_t len)
{
	if (scd_cfg_desc[k].type == SCD_CFG_STR)
		return cfg->sval[k] ? cfg->sval[k] : "";
	if (scd_cfg_desc[k].type == SCD_CFG_NUM)
		snprintf(buf, len, "%.17g", cfg->dval[k]);
	else
		snprintf(buf, len, "%lld", (long long)cfg->ival[k]);
	return buf;
}

/* The keys the configuration table marks the same on every node (SCD_CFG_SAME), as text in
 * keys (room for SCD_CFG_COUNT) and their values in vals (SCD_CFG_COUNT x 256); the count. */
static size_t same_keys(const scd_config_t *cfg, Sparsecomm__ConfigSet *keys,
			Sparsecomm__ConfigSet **ptrs, char (*vals)[256])
{
	size_t n = 0;
	for (int k = 0; k < SCD_CFG_COUNT; k++) {
		if (!(scd_cfg_desc[k].runtime & SCD_CFG_SAME))
			continue;
		sparsecomm__config_set__init(&keys[n]);
		keys[n].key = (char *)scd_cfg_desc[k].name;
		keys[n].value = (char *)same_text(cfg, k, vals[n], sizeof(vals[n]));
		ptrs[n] = &keys[n];
		n++;
	}
	return n;
}

/* Whether a Join's keys that must be the same on every node differ from this daemon's (why
 * then names the first such key and both values): every key the table marks, none left
 * out. */
static int same_keys_differ(const scd_config_t *cfg, const Sparsecomm__Join *j, char *why,
			    size_t len)
{
	char own[256];
	for (int k = 0; k < SCD_CFG_COUNT; k++) {
		if (!(scd_cfg_desc[k].runtime & SCD_CFG_SAME))
			continue;
		const char *mine = same_text(cfg, k, own, sizeof(own)), *theirs = NULL;
		for (size_t i = 0; i < j->n_same_keys && !theirs; i++)
			if (j->same_keys[i]->key &&
			    !strcmp(j->same_keys[i]->key, scd_cfg_desc[k].name))
				theirs = j->same_keys[i]->value ? j->same_keys[i]->value : "";
		if (!theirs) {
			snprintf(why, len,
				 "rank %d does not say its %s (the coordinator has '%.64s')",
				 j->rank, scd_cfg_desc[k].name, mine);
			return 1;
		}
		if (strcmp(theirs, mine)) {
			/* a value changed at run time is not in the restarted node's file */
			int rt = cfg->source[k] == SCD_SRC_RUNTIME;
			snprintf(
			    why, len, "rank %d has %s '%.64s', the coordinator '%.64s'%s",
			    j->rank, scd_cfg_desc[k].name, theirs, mine,
			    rt ? " (set at run time by sparsectl config set: start the node "
				 "with that value, or set it back)"
			       : "");
			return 1;
		}
	}
	return 0;
}

static void send_join(scd_world_t *w)
{
	scd_daemon_t *d = w->d;
	scd_peer_t *self = &w->peers[d->rank];
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__Join j = SPARSECOMM__JOIN__INIT;
	Sparsecomm__ConfigSet keys[SCD_CFG_COUNT], *ptrs[SCD_CFG_COUNT];
	char vals[SCD_CFG_COUNT][256];
	j.n_same_keys = same_keys(&d->cfg, keys, ptrs, vals);
	j.same_keys = ptrs;
	j.protocol_version = SCD_WORLD_PROTOCOL_VERSION;
	j.rank = d->rank;
	j.world_size = d->world_size;
	j.local_size = d->local_size;
	j.transport = (char *)w->tops->name;
	j.nonfinite = (char *)scd_cfg_str(&d->cfg, SCD_CFG_nonfinite);
	j.transport_blob.data = self->blob;
	j.transport_blob.len = self->blob_len;
	j.host_id = self->host.id;
	j.cores = self->host.cores;
	/* the world left and the last message sent the coordinator in it, which discards
	 * none of them before it has read them all (stream.c, scd_world_reform_unread):
	 * this node discards its copies once the new world has formed */
	j.old_world = w->world_id;
	j.old_last_seq = w->peers[0].tx_seq;
	Sparsecomm__FastState fs;
	scd_fast_join_fill(w, &j, &fs);
	m.body_case = SPARSECOMM__PEER_MSG__BODY_JOIN;
	m.join = &j;
	scd_world_send_raw(w, NULL, 0, &m);
}

/* How long after a data-plane failure's report a node must be heard from for the world to
 * re-form with it: a message that left before the report is no sign of life. */
#define MESH_REFORM_SLACK_MS 20

/*
 * The world re-forms (every rank): what was negotiated is forgotten (every operation
 * submitted fails, naming why: the coordinator's text, the same on every rank), the old
 * mesh's connections are shut down (a transfer waiting on them ends now, and its job,
 * planned in the old world, delivers nothing: scd_neg_job_done), this rank prepares a new
 * endpoint, and the next WorldInfo rebuilds the mesh (the engine's mesh job replaces its
 * transport). The coordinator, for node back (which joins again; -1 for none: a data
 * plane failed, or on the other nodes, which the coordinator told), tells every other
 * node in the world, and formation waits for each to join again (join_timeout_ms).
 */
/*
 * What the re-form fails: the steps planned (in the engine, or held back by a data-plane
 * failure), which every rank planned alike, since each applies the plans that came
 * before the Reform in its stream first; and a barrier in progress. A step that this node
 * announced and no plan answered was planned nowhere, and one that only some of its
 * trainers submitted was not announced: failing them here alone would put this node a
 * step ahead of the others, which submit that step in the new world (its next step paired
 * with their step, SC_OK with the wrong values). So they stay, and the announced ones are
 * announced again once the world has re-formed (reannounce). Returns how many were kept
 * in *kept_p (an array the caller frees, NULL when none or out of memory: then everything
 * fails, as before).
 */
static void reform_fail(scd_world_t *w, const char *why, int idle, scd_ntensor_t ***kept_p,
			int *n_p)
{
	scd_daemon_t *d = w->d;
	scd_tensors_t *ts = d->ctl ? scd_ctl_tensors(d->ctl) : NULL;
	int n = 0;
	for (scd_ntensor_t *nt = ts ? scd_tensors_first(ts) : NULL; nt; nt = nt->all_next)
		n += nt->state == SCD_NT_ANNOUNCED || nt->state == SCD_NT_LOCAL_WAIT;
	scd_ntensor_t **kept = n ? malloc(sizeof(*kept) * (size_t)n) : NULL;
	scd_nt_state_t *was = n ? malloc(sizeof(*was) * (size_t)n) : NULL;
	int k = 0;
	for (scd_ntensor_t *nt = kept && was ? scd_tensors_first(ts) : NULL; nt;
	     nt = nt->all_next)
		if (nt->state == SCD_NT_ANNOUNCED || nt->state == SCD_NT_LOCAL_WAIT) {
			kept[k] = nt;
			was[k++] = nt->state;
			nt->state = SCD_NT_IDLE; /* passed over by the failing below */
		}
	if (d->ctl)
		scd_ctl_fail_all(d->ctl, SC_ERR_PEER, why, idle);
	int a = 0;
	for (int i = 0; i < k; i++) {
		kept[i]->state = was[i];
		if (was[i] == SCD_NT_ANNOUNCED)
			kept[a++] = kept[i];
	}
	free(was);
	if (!a) {
		free(kept);
		kept = NULL;
	}
	*kept_p = kept;
	*n_p = a;
}

/* After the engine's fence and peer_gone for every other rank: waits until no job of the
 * old world uses its trainers' memory, so that they can be told it failed. The loop sends
 * no heartbeat meanwhile, so the wait is bounded by a quarter of peer_timeout_ms (and
 * SCD_ENGINE_QUIESCE_MS), warned past it. Returns whether the engine is quiet
 * (scd_ctl_fail_all's idle). */
static int quiesce(scd_world_t *w)
{
	int64_t ms = scd_cfg_int(&w->d->cfg, SCD_CFG_peer_timeout_ms) / 4;
	if (ms > SCD_ENGINE_QUIESCE_MS)
		ms = SCD_ENGINE_QUIESCE_MS;
	int left = scd_engine_quiesce(w->d->engine, (int)ms);
	if (left)
		scd_warn(
		    SCD_SUB_WORLD,
		    "%d job(s) of the old world still use their trainers' memory after %lld "
		    "ms; their trainers are told now that they failed, and a registration "
		    "released meanwhile stays until the daemon stops",
		    left, (long long)ms);
	return left == 0;
}

static sc_status_t reform(scd_world_t *w, int back, const char *why)
{
	scd_daemon_t *d = w->d;
	scd_ntensor_t **kept = NULL;
	int n_kept = 0;
	if (w->formed) /* what its fast turns were, for its Join (fast.c) */
		scd_fast_snapshot(w);
	/* no job of the old world writes its trainers' buffers after they are told it failed
	 * (they then write their next step's input there): none delivers its result, none
	 * starts, and the transfers under way end before they are told */
	scd_engine_fence(d->engine);
	for (int r = 0; r < d->world_size; r++)
		if (r != d->rank)
			scd_engine_peer_gone(d->engine, r);
	int idle = quiesce(w);
	reform_fail(w, why, idle, &kept, &n_kept);
	scd_neg_release_held(w, 0); /* their tensors failed with why just now */
	w->mesh_reform_ms = 0;
	if (w->is_coord) {
		/* numbered like what came before it, so that it comes after all of it */
		Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
		Sparsecomm__Reform e = SPARSECOMM__REFORM__INIT;
		e.reason = (char *)why;
		m.body_case = SPARSECOMM__PEER_MSG__BODY_REFORM;
		m.reform = &e;
		for (int r = 1; r < d->world_size; r++) {
			scd_peer_t *p = &w->peers[r];
			if (r != back && p->state == SPARSECOMM__PEER_STATE__PEER_CONNECTED)
				scd_world_send_peer(w, r, &m);
			p->joined = 0; /* until its Join */
		}
		w->n_joined = 1;
		uv_timer_start(&w->join_timer, on_join_timeout,
			       (uint64_t)scd_cfg_int(&d->cfg, SCD_CFG_join_timeout_ms), 0);
		scd_pipe_flush(w->pipe, 1000, "the world re-forms");
	} else {
		scd_pipe_close_all(w->pipe, "the world re-forms");
	}
	w->formed = 0;
	if (!w->is_coord) /* the coordinator's listener stays: its next WorldInfo names it */
		w->pipe_port = 0;
	scd_neg_reset(w);
	/* announced again: they go once the world has formed (scd_neg_flush) */
	for (int i = 0; i < n_kept; i++)
		scd_world_announce(w, kept[i]);
	free(kept);
	sc_status_t st = prepare_endpoint(w);
	if (st != SC_OK) {
		scd_error(SCD_SUB_WORLD, "cannot re-form the world: no data-plane endpoint");
		scd_world_stop_daemon(w, 1);
		return st;
	}
	if (!w->is_coord)
		send_join(w);
	return SC_OK;
}

/* Rank's data plane failed (reason: its transport's text): the coordinator re-forms the
 * world with the first report of the world, so that every rank fails what was in flight
 * with this one text and the next operations run on a new mesh. A world with a node gone
 * is left as it is: its failures name that node, and the world re-forms when it joins
 * again. */
static void coord_mesh_failed(scd_world_t *w, int rank, const char *reason)
{
	if (!w->formed || scd_live_cause(w))
		return;
	if (w->mesh_reform_ms) { /* another report of it: its sender is alive */
		w->peers[rank].mesh_reported = 1;
		scd_world_mesh_check(w);
		return;
	}
	for (int r = 0; r < w->d->world_size; r++)
		w->peers[r].mesh_reported = r == rank;
	snprintf(w->mesh_reform_why, sizeof(w->mesh_reform_why),
		 "the world re-forms: the data plane failed on node %d: %.500s", rank,
		 reason && reason[0] ? reason : "?");
	/* a message already on its way from a node that died as the failure began is not
	 * a sign of life: what counts comes a little after the report */
	w->mesh_reform_ms = scd_now_ms() + MESH_REFORM_SLACK_MS;
	scd_info(SCD_SUB_WORLD,
		 "data plane failed on node %d: the world re-forms once every "
		 "node is heard",
		 rank);
	scd_world_mesh_check(w);
}

void scd_world_mesh_check(scd_world_t *w)
{
	if (!w->is_coord || !w->mesh_reform_ms)
		return;
	if (!w->formed || scd_live_cause(w)) { /* re-forming already, or a node is gone */
		w->mesh_reform_ms = 0;
		return;
	}
	for (int r = 1; r < w->d->world_size; r++)
		if (!w->peers[r].mesh_reported && w->peers[r].heard_ms < w->mesh_reform_ms)
			return;
	w->mesh_reform_ms = 0;
	scd_warn(SCD_SUB_WORLD, "%s", w->mesh_reform_why);
	reform(w, -1, w->mesh_reform_why);
}

void scd_world_mesh_failed(scd_world_t *w, const char *reason)
{
	scd_daemon_t *d = w->d;
	if (!w->formed || w->mesh_failed_world == w->world_id + 1)
		return; /* told already in this world */
	w->mesh_failed_world = w->world_id + 1;
	if (w->is_coord) {
		coord_mesh_failed(w, d->rank, reason);
		return;
	}
	scd_warn(SCD_SUB_WORLD,
		 "rank %d: the data plane failed (%s): the coordinator re-forms "
		 "the world",
		 d->rank, reason);
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__MeshFailed mf = SPARSECOMM__MESH_FAILED__INIT;
	mf.rank = d->rank;
	mf.reason = (char *)reason;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_MESH_FAILED;
	m.mesh_failed = &mf;
	scd_world_send_coord(w, &m);
}

void scd_world_join_tick(scd_world_t *w)
{
	if (!w->is_coord && !w->formed && w->served && !w->left)
		send_join(w);
}

static void coord_send_world(scd_world_t *w)
{
	scd_daemon_t *d = w->d;
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__WorldInfo wi = SPARSECOMM__WORLD_INFO__INIT;
	Sparsecomm__PeerInfo *infos = calloc((size_t)d->world_size, sizeof(*infos));
	Sparsecomm__PeerInfo **ptrs = calloc((size_t)d->world_size, sizeof(*ptrs));
	if (!infos || !ptrs) {
		free(infos);
		free(ptrs);
		scd_error(SCD_SUB_WORLD, "no memory to announce the world of %d ranks",
			  d->world_size);
		scd_world_stop_daemon(w, 1);
		return;
	}
	if (getrandom(&w->world_id, sizeof(w->world_id), 0) != sizeof(w->world_id))
		w->world_id = (uint64_t)getpid() << 32 ^ scd_now_ms();
	for (int r = 0; r < d->world_size; r++) {
		sparsecomm__peer_info__init(&infos[r]);
		infos[r].rank = r;
		infos[r].connected = 1;
		infos[r].transport_blob.data = w->peers[r].blob;
		infos[r].transport_blob.len = w->peers[r].blob_len;
		infos[r].host_id = w->peers[r].host.id;
		infos[r].cores = w->peers[r].host.cores;
		ptrs[r] = &infos[r];
	}
	wi.peers = ptrs;
	wi.n_peers = (size_t)d->world_size;
	wi.world_id = w->world_id;
	wi.transport = (char *)w->tops->name;
	wi.pipe_port = w->pipe_port;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_WORLD;
	m.world = &wi;
	/* unnumbered: the world's streams start after it; sent again until each node shows
	 * it holds it (a reset coordinator channel loses what it held) */
	scd_world_streams_reset(w);
	scd_pipe_world(w->pipe, w->world_id);
	size_t n = sparsecomm__peer_msg__get_packed_size(&m);
	uint8_t *buf = malloc(n ? n : 1);
	if (buf) {
		sparsecomm__peer_msg__pack(&m, buf);
		scd_world_info_send(w, buf, n);
	}
	free(buf);
	free(infos);
	free(ptrs);
	if (!buf) {
		scd_error(SCD_SUB_WORLD, "no memory to announce the world of %d ranks",
			  d->world_size);
		scd_world_stop_daemon(w, 1);
		return;
	}
	scd_info(SCD_SUB_WORLD, "world of %d formed (id %016llx)", d->world_size,
		 (unsigned long long)w->world_id);
	scd_live_start(w);
	start_mesh(w);
}

static void refuse(scd_world_t *w, const uint8_t *ident, size_t ident_len, const char *why)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__JoinRefused jr = SPARSECOMM__JOIN_REFUSED__INIT;
	jr.reason = (char *)why;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_REFUSED;
	m.refused = &jr;
	scd_world_send_raw(w, ident, ident_len, &m);
	scd_warn(SCD_SUB_WORLD, "join refused: %s", why);
}

/* Rank j->rank is in (coordinator): the world forms once every rank is. */
static void accept_join(scd_world_t *w, const uint8_t *ident, size_t ident_len,
			const Sparsecomm__Join *j)
{
	scd_daemon_t *d = w->d;
	scd_peer_t *p = &w->peers[j->rank];
	/* the same daemon, joining again as the world re-forms, stays as it was (degraded,
	 * its late and answered steps: world/late.c), and says what changed meanwhile once
	 * the world has formed (held.c); a node given up, or another daemon of the
	 * rank, starts afresh */
	int same = p->state == SPARSECOMM__PEER_STATE__PEER_CONNECTED &&
		   p->ident_len == ident_len && !memcmp(p->ident, ident, ident_len);
	/* another daemon of a rank still in the world (it joins while the world re-forms,
	 * the old one not rejoined yet: its daemon started again): the old one is gone, as
	 * when it is found lost in a formed world, which lets the new one in only then. So
	 * the joins its trainers were counted in end on every rank: kept, the new daemon's
	 * node was joined, its share zeros on every other rank while its new trainers
	 * submitted their own steps, which paired with the others' next ones */
	if (!same && p->ident_len && p->state == SPARSECOMM__PEER_STATE__PEER_CONNECTED)
		scd_live_lost(
		    w, j->rank,
		    "another daemon of the rank joined while the world re-formed (its "
		    "daemon started again)");
	/* the same daemon that never held the world left (its Join names an older one)
	 * read none of it: an end of its joins sent there goes to it again */
	scd_join_rejoined(w, j->rank, same && w->world_id && j->old_world != w->world_id);
	scd_fast_coord_join(w, j->rank, j, same);
	p->joined = 1;
	p->state = SPARSECOMM__PEER_STATE__PEER_CONNECTED;
	p->heard_ms = scd_now_ms();
	if (!same) {
		p->degraded = 0;
		scd_late_forget_rank(w, j->rank);
		scd_world_reform_drop(w, j->rank, 0); /* an earlier daemon's messages */
	}
	scd_world_stream_free(p); /* what an earlier daemon of the rank held or was sent */
	memcpy(p->ident, ident, ident_len);
	p->ident_len = ident_len;
	memcpy(p->blob, j->transport_blob.data, j->transport_blob.len);
	p->blob_len = j->transport_blob.len;
	p->host = (scd_host_t){j->host_id, j->cores};
	w->n_joined++;
	char where[160];
	scd_info(SCD_SUB_WORLD, "rank %d joined (%d of %d), data plane %s %s", j->rank,
		 w->n_joined, d->world_size, w->tops->name,
		 describe_blob(w, p, where, sizeof(where)));
	if (w->n_joined == d->world_size) {
		w->formed = 1;
		scd_fast_coord_formed(w); /* before the world's id changes */
		coord_send_world(w);
		scd_world_coord_formed(w);
	}
}

void scd_world_coord_formed(scd_world_t *w)
{
	scd_join_formed(w); /* the joins a node lost meanwhile ended */
	/* what the nodes sent in the world left and came while it re-formed first
	 * (stream.c), the configuration changes proposed meanwhile, then what was announced
	 * while the world re-formed (kept back by the flush) and this node's state: nothing
	 * else might send it (the trainers wait on it) */
	scd_world_reform_replay(w);
	cfg_formed(w);
	scd_world_held_resend(w);
}

static void on_join(scd_world_t *w, const uint8_t *ident, size_t ident_len,
		    const Sparsecomm__Join *j)
{
	scd_daemon_t *d = w->d;
	char why[384];
	const char *tname = j->transport ? j->transport : "";
	const char *own_nonfinite = scd_cfg_str(&d->cfg, SCD_CFG_nonfinite);
	own_nonfinite = own_nonfinite ? own_nonfinite : "";
	uint16_t port;
	if (j->protocol_version != SCD_WORLD_PROTOCOL_VERSION) {
		snprintf(why, sizeof(why),
			 "rank %d speaks protocol version %u, the coordinator %u", j->rank,
			 j->protocol_version, SCD_WORLD_PROTOCOL_VERSION);
	} else if (j->world_size != d->world_size) {
		snprintf(why, sizeof(why), "rank %d has world_size %d, the coordinator %d",
			 j->rank, j->world_size, d->world_size);
	} else if (j->local_size != d->local_size) {
		snprintf(why, sizeof(why), "rank %d has local_size %d, the coordinator %d",
			 j->rank, j->local_size, d->local_size);
	} else if (j->rank <= 0 || j->rank >= d->world_size) {
		snprintf(why, sizeof(why), "rank %d is outside 1 .. %d", j->rank,
			 d->world_size - 1);
	} else if (strcmp(tname, w->tops->name) != 0) {
		snprintf(why, sizeof(why),
			 "rank %d uses transport '%.40s', the coordinator '%s'", j->rank, tname,
			 w->tops->name);
	} else if (j->transport_blob.len > SCD_TRANSPORT_BLOB_MAX ||
		   w->tops->describe(j->transport_blob.data, j->transport_blob.len, NULL, 0,
				     &port) != SC_OK) {
		snprintf(why, sizeof(why),
			 "rank %d sent a malformed %s bootstrap blob (%zu bytes)", j->rank,
			 w->tops->name, j->transport_blob.len);
	} else if (strcmp(j->nonfinite ? j->nonfinite : "", own_nonfinite) != 0) {
		snprintf(why, sizeof(why),
			 "rank %d has nonfinite '%.16s', the coordinator '%s'", j->rank,
			 j->nonfinite ? j->nonfinite : "", own_nonfinite);
	} else if (same_keys_differ(&d->cfg, j, why, sizeof(why))) {
		/* why says which */
	} else if (w->formed &&
		   w->peers[j->rank].state != SPARSECOMM__PEER_STATE__PEER_CONNECTED) {
		/* a node given up (lost, left) comes back: the world re-forms with it */
		scd_info(SCD_SUB_WORLD, "rank %d joins again after it %s", j->rank,
			 w->peers[j->rank].state == SPARSECOMM__PEER_STATE__PEER_LEFT
			     ? "left"
			     : "was lost");
		snprintf(why, sizeof(why), "the world re-forms: node %d joins again", j->rank);
		if (reform(w, j->rank, why) == SC_OK)
			accept_join(w, ident, ident_len, j);
		return;
	} else if (w->peers[j->rank].joined && w->peers[j->rank].ident_len == ident_len &&
		   !memcmp(w->peers[j->rank].ident, ident, ident_len)) {
		/* the same daemon's Join sent again (scd_world_join_tick): it has not heard
		 * this world's WorldInfo yet, or the world is still forming */
		if (w->formed)
			scd_world_info_to(w, j->rank);
		return;
	} else if (w->formed) {
		/* most often the node's daemon started again (a crash, a service restart)
		 * before the coordinator found the old one lost: say when it will be let in */
		uint64_t now = scd_now_ms(), heard = w->peers[j->rank].heard_ms;
		snprintf(why, sizeof(why),
			 "rank %d has already joined: its daemon was last heard %llu ms ago; a "
			 "daemon started again for that rank is let in once the old one is "
			 "found lost, peer_timeout_ms = %lld after it was last heard",
			 j->rank, (unsigned long long)(now > heard ? now - heard : 0),
			 (long long)scd_cfg_int(&d->cfg, SCD_CFG_peer_timeout_ms));
	} else if (w->peers[j->rank].joined) {
		snprintf(why, sizeof(why), "rank %d has already joined", j->rank);
	} else if (w->peers[j->rank].state == SPARSECOMM__PEER_STATE__PEER_CONNECTED &&
		   w->peers[j->rank].ident_len == ident_len &&
		   !memcmp(w->peers[j->rank].ident, ident, ident_len) &&
		   scd_world_reform_unread(w, j->rank, j->old_world, j->old_last_seq)) {
		/* the same daemon joins again before every message it sent in the world left
		 * came (the coordinator channel reset and lost them): it would discard them
		 * once the world has formed, and a failed step it reported would go unread,
		 * its trainers' next step paired with the others' step that failed. Let in
		 * once they have come, or given up (stream.c) */
		return;
	} else {
		accept_join(w, ident, ident_len, j);
		return;
	}
	refuse(w, ident, ident_len, why);
}

static void on_world(scd_world_t *w, const Sparsecomm__WorldInfo *wi)
{
	scd_daemon_t *d = w->d;
	if (w->world_id && wi->world_id == w->world_id)
		return; /* sent again: this node's numbered messages tell the coordinator; or,
			 * while it re-forms, a copy of the world it leaves, sent before the
			 * Reform and come after it on the other channel (its blobs name the old
			 * endpoints: forming it would leave this node out of the new world) */
	if (w->formed || wi->n_peers != (size_t)d->world_size) {
		scd_error(SCD_SUB_WORLD, "unexpected world info with %zu peers", wi->n_peers);
		return;
	}
	const char *tname = wi->transport ? wi->transport : "";
	if (strcmp(tname, w->tops->name) != 0) {
		scd_error(SCD_SUB_WORLD, "the coordinator uses transport '%.40s', rank %d '%s'",
			  tname, d->rank, w->tops->name);
		scd_world_stop_daemon(w, 1);
		return;
	}
	for (size_t i = 0; i < wi->n_peers; i++) {
		const Sparsecomm__PeerInfo *pi = wi->peers[i];
		if (pi->rank < 0 || pi->rank >= d->world_size)
			continue;
		if (pi->transport_blob.len > SCD_TRANSPORT_BLOB_MAX) {
			scd_error(SCD_SUB_WORLD,
				  "world info: rank %d's bootstrap blob has %zu bytes",
				  pi->rank, pi->transport_blob.len);
			scd_world_stop_daemon(w, 1);
			return;
		}
		scd_peer_t *p = &w->peers[pi->rank];
		p->joined = 1;
		if (pi->transport_blob.len)
			memcpy(p->blob, pi->transport_blob.data, pi->transport_blob.len);
		p->blob_len = pi->transport_blob.len;
		p->host = (scd_host_t){pi->host_id, pi->cores};
	}
	w->formed = 1;
	w->world_id = wi->world_id;
	scd_world_streams_reset(w);
	scd_pipe_world(w->pipe, w->world_id);
	w->pipe_port = (uint16_t)(wi->pipe_port <= 65535 ? wi->pipe_port : 0);
	if (w->pipe_port)
		scd_pipe_connect(w->pipe, w->pipe_host, w->pipe_port);
	scd_live_start(w);
	start_mesh(w);
	scd_world_held_resend(w); /* what was announced while the world re-formed (as above) */
}

static void on_join_timeout(uv_timer_t *t)
{
	scd_world_t *w = t->data;
	scd_daemon_t *d = w->d;
	if (!w->is_coord) {
		scd_error(SCD_SUB_WORLD,
			  "rank %d could not join the coordinator at %s within %lld ms%s",
			  d->rank, scd_cfg_str(&d->cfg, SCD_CFG_coordinator),
			  (long long)scd_cfg_int(&d->cfg, SCD_CFG_join_timeout_ms),
			  d->secret.present ? " (a coordinator whose secret differs refuses "
					      "this rank's key without an answer)"
					    : "");
		scd_world_stop_daemon(w, 1);
		return;
	}
	char missing[512];
	int n = 0;
	missing[0] = 0;
	for (int r = 1; r < d->world_size && n < (int)sizeof(missing) - 12; r++)
		if (!w->peers[r].joined)
			n += snprintf(missing + n, sizeof(missing) - (size_t)n, "%s%d",
				      n ? ", " : "", r);
	char why[600];
	snprintf(why, sizeof(why),
		 "world formation timed out after %lld ms: rank(s) %s never joined",
		 (long long)scd_cfg_int(&d->cfg, SCD_CFG_join_timeout_ms), missing);
	scd_error(SCD_SUB_WORLD, "%s", why);
	for (int r = 1; r < d->world_size; r++)
		if (w->peers[r].joined)
			refuse(w, w->peers[r].ident, w->peers[r].ident_len, why);
	scd_world_stop_daemon(w, 1);
}

/* ---- configuration, pending, status --------------------------------------------------- */

static void apply_config(scd_world_t *w, const Sparsecomm__ConfigSet *cs)
{
	scd_daemon_t *d = w->d;
	char err[256];
	int k = scd_config_find(cs->key ? cs->key : "");
	sc_status_t st = scd_config_set(&d->cfg, k, cs->value ? cs->value : "", SCD_SRC_RUNTIME,
					err, sizeof(err));
	scd_ctl_config_applied(d->ctl, cs->key, cs->value, st, err); /* sparsectl's answer */
	if (st != SC_OK) {
		scd_warn(SCD_SUB_CONFIG, "runtime change refused: %s", err);
		return;
	}
	scd_info(SCD_SUB_CONFIG, "%s = %s (runtime)", cs->key, cs->value);
	if (k == SCD_CFG_log_level)
		scd_log_parse_level(cs->value, &scd_log_level);
	if (k == SCD_CFG_fusion_threshold_bytes)
		scd_engine_set_fusion_bytes(d->engine, (uint64_t)scd_cfg_int(&d->cfg, k));
	if (k == SCD_CFG_timeline_file)
		scd_tl_configure(cs->value, d->rank, d->world_size);
}

void scd_world_config_propose(scd_world_t *w, const char *key, const char *value)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__ConfigSet cs = SPARSECOMM__CONFIG_SET__INIT;
	cs.key = (char *)key;
	cs.value = (char *)value;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_CONFIG_PROPOSE;
	m.config_propose = &cs;
	scd_world_send_coord(w, &m);
}

/* The coordinator checks a proposed change again (the proposing daemon has) before any
 * node applies it: a value some daemon would refuse is applied on none. */
#define SCD_CFG_HELD_MAX 64

/* A change proposed while the world re-forms waits for it to form (cfg_formed): applied
 * now, it would reach only the nodes joined again, and a node that joins after with the
 * old value of a key that must be the same everywhere would be refused. */
static void cfg_hold(scd_world_t *w, int from, const Sparsecomm__ConfigSet *cs)
{
	char **v = w->n_cfg_held < 2 * SCD_CFG_HELD_MAX
		       ? realloc(w->cfg_held, sizeof(*v) * (size_t)(w->n_cfg_held + 2))
		       : NULL;
	char *key = v ? strdup(cs->key ? cs->key : "") : NULL;
	char *value = key ? strdup(cs->value ? cs->value : "") : NULL;
	if (v)
		w->cfg_held = v;
	if (!value) {
		free(key);
		scd_error(
		    SCD_SUB_CONFIG,
		    "config set %s from rank %d refused, applied nowhere: %d changes wait "
		    "for the world to re-form",
		    cs->key ? cs->key : "", from, w->n_cfg_held / 2);
		return;
	}
	w->cfg_held[w->n_cfg_held++] = key;
	w->cfg_held[w->n_cfg_held++] = value;
}

static void coord_on_propose(scd_world_t *w, int from, const Sparsecomm__ConfigSet *cs);

/* The world has formed: the changes proposed while it re-formed go to every node. */
static void cfg_formed(scd_world_t *w)
{
	char **v = w->cfg_held;
	int n = w->n_cfg_held;
	w->cfg_held = NULL;
	w->n_cfg_held = 0;
	for (int i = 0; i + 1 < n; i += 2) {
		Sparsecomm__ConfigSet cs = SPARSECOMM__CONFIG_SET__INIT;
		cs.key = v[i];
		cs.value = v[i + 1];
		coord_on_propose(w, 0, &cs);
	}
	for (int i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void coord_on_propose(scd_world_t *w, int from, const Sparsecomm__ConfigSet *cs)
{
	char err[512];
	if (scd_config_probe(cs->key ? cs->key : "", cs->value ? cs->value : "", err,
			     sizeof(err)) != SC_OK) {
		scd_error(SCD_SUB_CONFIG,
			  "config set from rank %d refused, applied nowhere: %s", from, err);
		return;
	}
	if (!w->formed) {
		cfg_hold(w, from, cs);
		return;
	}
	scd_fast_coord_end(w, "a configuration change", 0);
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_CONFIG_APPLY;
	m.config_apply = (Sparsecomm__ConfigSet *)cs;
	scd_world_send_all(w, &m);
}

static void answer_pending(scd_world_t *w, int to, uint64_t query_id)
{
	scd_arena_t a = {0};
	Sparsecomm__PendingReply r = SPARSECOMM__PENDING_REPLY__INIT;
	scd_neg_pending(w, &r, &a);
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__PendingAnswer pa = SPARSECOMM__PENDING_ANSWER__INIT;
	pa.query_id = query_id;
	pa.reply = &r;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_PENDING_ANSWER;
	m.pending_answer = &pa;
	scd_world_send_peer(w, to, &m);
	scd_arena_free(&a);
}

static void on_pending_answer(scd_world_t *w, const Sparsecomm__PendingAnswer *pa)
{
	scd_arena_t a = {0};
	Sparsecomm__PendingReply r = SPARSECOMM__PENDING_REPLY__INIT;
	if (pa->reply)
		r = *pa->reply;
	scd_ctl_local_pending(w->d->ctl, &r, &a);
	scd_ctl_reply_pending(w->d->ctl, pa->query_id, &r);
	scd_arena_free(&a);
}

void scd_world_pending(scd_world_t *w, uint64_t query_id)
{
	Sparsecomm__PeerMsg m = SPARSECOMM__PEER_MSG__INIT;
	Sparsecomm__PendingQuery pq = SPARSECOMM__PENDING_QUERY__INIT;
	pq.query_id = query_id;
	m.body_case = SPARSECOMM__PEER_MSG__BODY_PENDING_QUERY;
	m.pending_query = &pq;
	scd_world_send_coord(w, &m);
}

void scd_world_status(scd_world_t *w, Sparsecomm__StatusReply *r, scd_arena_t *a)
{
	int n = w->d->world_size;
	r->peers = scd_arena_alloc(a, sizeof(*r->peers) * (size_t)n);
	if (!r->peers)
		return;
	for (int i = 0; i < n; i++) {
		Sparsecomm__PeerInfo *pi = scd_arena_alloc(a, sizeof(*pi));
		if (!pi)
			return;
		sparsecomm__peer_info__init(pi);
		pi->rank = i;
		char addr[128] = "";
		uint16_t port = 0;
		const scd_peer_t *p = &w->peers[i];
		if (p->blob_len &&
		    w->tops->describe(p->blob, p->blob_len, addr, sizeof(addr), &port) != SC_OK)
			addr[0] = 0, port = 0;
		pi->addr = scd_arena_strdup(a, addr);
		pi->port = port;
		pi->connected = w->formed && scd_engine_transport(w->d->engine) != NULL &&
				p->state == SPARSECOMM__PEER_STATE__PEER_CONNECTED;
		scd_live_status(w, i, pi, a);
		r->peers[r->n_peers++] = pi;
	}
}

/* ---- receiving ---------------------------------------------------------------------- */

static int rank_of_ident(scd_world_t *w, const uint8_t *ident, size_t len)
{
	for (int r = 1; r < w->d->world_size; r++)
		if (w->peers[r].ident_len && w->peers[r].ident_len == len &&
		    !memcmp(w->peers[r].ident, ident, len))
			return r;
	return -1;
}

/* What only the coordinator sends (plans, world info, refusals, configuration changes,
 * barriers' ends)
 * is taken from it alone: on the coordinator, from itself (no ident), never from a peer. */
static int coord_only(const Sparsecomm__PeerMsg *m)
{
	return m->body_case == SPARSECOMM__PEER_MSG__BODY_WORLD ||
	       m->body_case == SPARSECOMM__PEER_MSG__BODY_REFUSED ||
	       m->body_case == SPARSECOMM__PEER_MSG__BODY_PLAN ||
	       m->body_case == SPARSECOMM__PEER_MSG__BODY_CONFIG_APPLY ||
	       m->body_case == SPARSECOMM__PEER_MSG__BODY_REFORM ||
	       m->body_case == SPARSECOMM__PEER_MSG__BODY_BARRIER_DONE ||
	       m->body_case == SPARSECOMM__PEER_MSG__BODY_JOIN_DONE ||
	       m->body_case == SPARSECOMM__PEER_MSG__BODY_FAST_END;
}

/* What the coordinator takes from a peer's connection: a Join first (under a secret, for
 * the rank whose CURVE key the connection proved, world/curve.h), then messages only as
 * the rank it joined as (under a secret, over that rank's key), about that rank alone. */
/* What the coordinator takes from rank from, whose connection proved key_rank: messages
 * as that rank alone, about that rank alone. */
static int admitted_as(scd_world_t *w, int from, int key_rank, const Sparsecomm__PeerMsg *m)
{
	char why[160] = "";
	if (from < 0)
		snprintf(why, sizeof(why), "from a connection that has not joined");
	else if (key_rank != from)
		snprintf(why, sizeof(why), "from rank %d with the key of rank %d", from,
			 key_rank);
	else if (m->body_case == SPARSECOMM__PEER_MSG__BODY_JOIN)
		snprintf(why, sizeof(why), "a join on the peer pipe");
	else if (m->body_case == SPARSECOMM__PEER_MSG__BODY_NODE_STATE &&
		 m->node_state->rank != from)
		snprintf(why, sizeof(why), "from rank %d about rank %d", from,
			 m->node_state->rank);
	else if (m->body_case == SPARSECOMM__PEER_MSG__BODY_MESH_FAILED &&
		 m->mesh_failed->rank != from)
		snprintf(why, sizeof(why), "from rank %d about rank %d", from,
			 m->mesh_failed->rank);
	else if (m->body_case == SPARSECOMM__PEER_MSG__BODY_READY && m->ready->rank != from)
		snprintf(why, sizeof(why), "from rank %d for rank %d", from, m->ready->rank);
	else if (m->body_case == SPARSECOMM__PEER_MSG__BODY_FAST_WAITING &&
		 m->fast_waiting->rank != from)
		snprintf(why, sizeof(why), "from rank %d for rank %d", from,
			 m->fast_waiting->rank);
	else
		return 1;
	scd_warn_limited(SCD_SUB_WORLD, "peer message %d %s ignored", m->body_case, why);
	return 0;
}

static int admitted(scd_world_t *w, int from, scd_zmsg_t *z, const Sparsecomm__PeerMsg *m)
{
	int key_rank = w->curve ? scd_curve_rank(z) : -1;
	if (m->body_case == SPARSECOMM__PEER_MSG__BODY_JOIN) {
		if (!w->curve || m->join->rank == key_rank)
			return 1;
		char why[160];
		snprintf(why, sizeof(why),
			 "a join as rank %d came with the key of rank %d, not its own",
			 m->join->rank, key_rank);
		refuse(w, z->ident, z->ident_len, why);
		return 0;
	}
	return admitted_as(w, from, w->curve ? key_rank : from, m);
}

void scd_world_handle(scd_world_t *w, int from, const uint8_t *ident, size_t ident_len,
		      const Sparsecomm__PeerMsg *m)
{
	if (w->is_coord && ident && coord_only(m)) {
		scd_warn(SCD_SUB_WORLD,
			 "peer message %d from rank %d ignored: only the coordinator sends it",
			 m->body_case, from);
		return;
	}
	switch (m->body_case) {
	case SPARSECOMM__PEER_MSG__BODY_JOIN:
		if (w->is_coord && ident)
			on_join(w, ident, ident_len, m->join);
		break;
	case SPARSECOMM__PEER_MSG__BODY_WORLD:
		if (!w->is_coord)
			on_world(w, m->world);
		break;
	case SPARSECOMM__PEER_MSG__BODY_REFUSED:
		scd_error(SCD_SUB_WORLD, "the coordinator refused this rank: %s",
			  m->refused->reason);
		scd_world_stop_daemon(w, 1);
		break;
	case SPARSECOMM__PEER_MSG__BODY_READY:
		if (w->is_coord && from >= 0)
			scd_neg_on_ready(w, from, m->ready);
		break;
	case SPARSECOMM__PEER_MSG__BODY_PLAN:
		if (scd_neg_on_plan(w, m->plan) != SC_OK) /* logged there */
			scd_world_stop_daemon(w, 1);
		break;
	case SPARSECOMM__PEER_MSG__BODY_NODE_STATE:
		if (w->is_coord && m->node_state->no_trainers) {
			if (from >= 0 && m->node_state->rank == from)
				scd_late_forget_rank(w, from);
		} else if (w->is_coord && m->node_state->left && m->node_state->left[0])
			scd_join_on_left(w, m->node_state->rank, m->node_state->left);
		else if (w->is_coord)
			scd_neg_on_node_state(w, m->node_state);
		else
			scd_live_on_node_state(w, m->node_state);
		break;
	case SPARSECOMM__PEER_MSG__BODY_LEAVE:
		scd_live_on_leave(w, from, m->leave);
		break;
	case SPARSECOMM__PEER_MSG__BODY_REFORM:
		if (!w->is_coord && w->formed) {
			const char *why = m->reform->reason && m->reform->reason[0]
					      ? m->reform->reason
					      : "the world re-forms";
			scd_info(SCD_SUB_WORLD, "%s", why);
			reform(w, -1, why);
		}
		break;
	case SPARSECOMM__PEER_MSG__BODY_HEARTBEAT:
		scd_live_on_heartbeat(w, from, m->heartbeat);
		break;
	case SPARSECOMM__PEER_MSG__BODY_MESH_FAILED: /* not one of the world left's mesh */
		if (w->is_coord && from >= 0 && !w->old_world)
			coord_mesh_failed(w, from, m->mesh_failed->reason);
		break;
	case SPARSECOMM__PEER_MSG__BODY_CONFIG_PROPOSE:
		if (w->is_coord)
			coord_on_propose(w, from, m->config_propose);
		break;
	case SPARSECOMM__PEER_MSG__BODY_CONFIG_APPLY:
		apply_config(w, m->config_apply);
		break;
	case SPARSECOMM__PEER_MSG__BODY_PENDING_QUERY:
		if (w->is_coord && from >= 0)
			answer_pending(w, from, m->pending_query->query_id);
		break;
	case SPARSECOMM__PEER_MSG__BODY_PENDING_ANSWER:
		on_pending_answer(w, m->pending_answer);
		break;
	case SPARSECOMM__PEER_MSG__BODY_BARRIER_ENTER:
		if (w->is_coord && from >= 0)
			scd_barrier_on_enter(w, from, m->barrier_enter);
		break;
	case SPARSECOMM__PEER_MSG__BODY_BARRIER_DONE:
		scd_barrier_on_done(w, m->barrier_done);
		break;
	case SPARSECOMM__PEER_MSG__BODY_NODE_JOIN:
		if (w->is_coord && from >= 0)
			scd_join_on_node(w, from, m->node_join, w->old_world ? 0 : m->ack);
		break;
	case SPARSECOMM__PEER_MSG__BODY_JOIN_DONE:
		scd_join_on_done(w, m->join_done);
		break;
	case SPARSECOMM__PEER_MSG__BODY_FAST_END:
		if (w->formed)
			scd_fast_on_end(w, m->fast_end);
		break;
	case SPARSECOMM__PEER_MSG__BODY_FAST_WAITING:
		if (w->is_coord && from >= 0 && w->formed && !w->old_world)
			scd_fast_coord_waiting(w, from, m->fast_waiting);
		break;
	default:
		scd_warn_limited(SCD_SUB_WORLD, "unexpected peer message %d from rank %d",
				 m->body_case, from);
	}
}

void scd_world_drain(scd_world_t *w)
{
	if (!w || !w->sock)
		return;
	scd_zmsg_t z = {0};
	scd_curve_drain(w->curve);
	while (scd_zmsg_recv(w->sock, w->is_coord, &z)) {
		Sparsecomm__PeerMsg *m = sparsecomm__peer_msg__unpack(NULL, z.len, z.data);
		if (!m) {
			scd_warn_limited(SCD_SUB_WORLD,
					 "malformed peer message (%zu bytes) ignored", z.len);
			continue;
		}
		int from = w->is_coord ? rank_of_ident(w, z.ident, z.ident_len) : 0;
		if ((!w->is_coord || admitted(w, from, &z, m)) &&
		    scd_live_heard(w, from, z.ident, z.ident_len, m) &&
		    scd_world_deliver(w, from, w->is_coord ? z.ident : NULL, z.ident_len, m))
			continue; /* held for its turn */
		sparsecomm__peer_msg__free_unpacked(m, NULL);
	}
	scd_zmsg_done(&z);
	scd_world_mesh_check(w);
}

/* A message on rank from's peer pipe (a node: from the coordinator). */
static void on_pipe_msg(void *ctx, int from, const uint8_t *data, size_t len)
{
	scd_world_t *w = ctx;
	Sparsecomm__PeerMsg *m = sparsecomm__peer_msg__unpack(NULL, len, data);
	if (!m) {
		scd_warn_limited(
		    SCD_SUB_WORLD,
		    "malformed peer message (%zu bytes) from rank %d's pipe ignored", len,
		    from);
		return;
	}
	scd_peer_t *p = &w->peers[from];
	const uint8_t *ident = w->is_coord ? p->ident : NULL;
	if ((!w->is_coord || admitted_as(w, from, from, m)) &&
	    scd_live_heard(w, from, p->ident, p->ident_len, m) &&
	    scd_world_deliver(w, from, ident, p->ident_len, m))
		return;
	sparsecomm__peer_msg__free_unpacked(m, NULL);
	scd_world_mesh_check(w);
}

/* Rank's pipe failed (world/pipe.h): what it carried and rank did not acknowledge goes
 * again on the coordinator channel. */
static void on_pipe_closed(void *ctx, int rank)
{
	scd_world_pipe_closed(ctx, rank);
}

static void on_readable(uv_poll_t *h, int status, int events)
{
	scd_world_drain(h->data);
}

static void on_flush(uv_timer_t *t)
{
	scd_world_t *w = t->data;
	w->flush_armed = 0;
	scd_neg_flush_turn(w);
}

void scd_world_tick(scd_world_t *w)
{
	if (w->formed) {
		scd_neg_tick(w);
		scd_barrier_tick(w);
	}
}

/* The coordinator knows a node by its DEALER's routing id, taken at its Join. Left to
 * ZeroMQ, a node gets a new one each time its connection is made again (a reset, a link
 * that failed): the coordinator then ignores what it sends ("a connection that has not
 * joined") and routes what it sends it nowhere, for good, and whatever a failing peer pipe
 * sends again on this channel is lost. So a node keeps one random id for its life, and
 * the coordinator's ROUTER gives that id to the newest connection that shows it. Under a
 * job secret only a holder of the job's keys can connect at all; admitted() checks that
 * what comes in is from the rank the key names, and the id is random and never shown. */
static void set_routing_id(scd_world_t *w)
{
	if (w->is_coord) {
		int one = 1;
		zmq_setsockopt(w->sock, ZMQ_ROUTER_HANDOVER, &one, sizeof(one));
		return;
	}
	uint8_t id[16];
	randombytes_buf(id, sizeof(id));
	id[0] = 's'; /* an id that starts with 0 is ZeroMQ's own */
	zmq_setsockopt(w->sock, ZMQ_ROUTING_ID, id, sizeof(id));
}

/* ---- lifecycle ---------------------------------------------------------------------- */

/* How many meshes built again after a re-form may fail in a row before the daemon stops. */
#define MESH_REBUILD_MAX 3

/* The mesh job came back: the daemon serves its trainers, or leaves (the transport logged
 * the failure where it found it, naming the rank). */
static void mesh_done(scd_world_t *w, scd_job_t *job)
{
	sc_status_t st = job->status;
	char error[sizeof(job->error)];
	snprintf(error, sizeof(error), "%s", job->error);
	uint64_t world = job->boot.world_id;
	scd_transport_boot_clear(&job->boot);
	free(job);
	if (st != SC_OK && w->served) {
		/* a mesh built again after a re-form failed (a connection reset while it
		 * formed): the world re-forms once more, as for a failure in a job; one of
		 * a world re-formed since says nothing. A mesh that cannot be built again
		 * (a peer's data port unreachable for good) would re-form the world for
		 * ever, every operation failing: after MESH_REBUILD_MAX in a row the daemon
		 * stops, as when the first mesh fails, and the others' failures name it */
		if (!w->formed || world != w->world_id)
			return;
		if (++w->mesh_rebuild_failed >= MESH_REBUILD_MAX) {
			scd_error(SCD_SUB_WORLD,
				  "rank %d: the data-plane mesh could not be built again %d "
				  "times in a row, the last: %s; the daemon stops",
				  w->d->rank, w->mesh_rebuild_failed, error);
			scd_world_stop_daemon(w, 1);
			return;
		}
		scd_world_mesh_failed(w, error);
		return;
	}
	if (st != SC_OK) {
		scd_world_stop_daemon(w, 1);
		return;
	}
	w->mesh_rebuild_failed = 0;
	if (!w->served) {
		w->served = 1;
		w->hooks->ready(w->d);
	} else {
		scd_info(SCD_SUB_WORLD, "the world of %d is whole again (id %016llx)",
			 w->d->world_size, (unsigned long long)w->world_id);
	}
}

void scd_world_job_done(scd_daemon_t *d, scd_job_t *job)
{
	switch (job->kind) {
	case SCD_JOB_MESH:
		mesh_done(d->world, job);
		break;
	case SCD_JOB_FORGET:
		free(job);
		break;
	case SCD_JOB_ALLREDUCE:
		scd_neg_job_done(d->world, job);
		break;
	case SCD_JOB_PRESELECT:
		scd_world_presel_done(d->world, job);
		break;
	}
}

sc_status_t scd_world_create(scd_daemon_t *d, const scd_world_hooks_t *hooks, scd_world_t **w_p)
{
	scd_world_t *w = calloc(1, sizeof(*w));
	if (!w || !(w->peers = calloc((size_t)d->world_size, sizeof(*w->peers)))) {
		free(w);
		return SC_ERR_NOMEM;
	}
	w->d = d;
	w->hooks = hooks;
	w->is_coord = d->rank == 0;
	w->peers[d->rank].host = scd_host_self();
	uv_timer_init(d->loop, &w->join_timer);
	uv_timer_init(d->loop, &w->flush_timer);
	uv_timer_init(d->loop, &w->hold_timer);
	uv_timer_init(d->loop, &w->fast.timer);
	w->fast.timer.data = w;
	uv_timer_init(d->loop, &w->beat_timer);
	uv_timer_init(d->loop, &w->orphan_timer);
	w->join_timer.data = w->flush_timer.data = w->hold_timer.data = w->beat_timer.data = w;
	w->orphan_timer.data = w;
	scd_fplan_state_init(&w->fplan, d->world_size);
	*w_p = w;
	return SC_OK;
}

void scd_world_arm_flush_at(scd_world_t *w, uint64_t due_ms)
{
	uint64_t now = scd_now_ms();
	if (w->flush_armed && w->flush_due_ms <= due_ms)
		return;
	w->flush_armed = 1;
	w->flush_due_ms = due_ms;
	uv_timer_start(&w->flush_timer, on_flush, due_ms > now ? due_ms - now : 0, 0);
}

void scd_world_arm_flush(scd_world_t *w)
{
	scd_world_arm_flush_at(w, scd_now_ms() +
				      (uint64_t)scd_cfg_int(&w->d->cfg, SCD_CFG_cycle_time_ms));
}

/* The peer pipe's end (world/pipe.h): the coordinator listens on its host, a node keeps
 * the coordinator's address to connect to once the world forms. */
static sc_status_t start_pipe(scd_world_t *w, const char *host)
{
	scd_daemon_t *d = w->d;
	char addr[SCD_ADDR_MAX], err[400];
	int v6 = 0;
	if (scd_addr_resolve(host, addr, sizeof(addr), &v6, err, sizeof(err)) != SC_OK) {
		scd_error(SCD_SUB_WORLD, "coordinator host: %s", err);
		return SC_ERR_INVALID;
	}
	if (!strcmp(addr, "*") || !*addr)
		snprintf(addr, sizeof(addr), "0.0.0.0");
	snprintf(w->pipe_host, sizeof(w->pipe_host), "%s", addr);
	uint8_t key[SCD_SECRET_KEY_BYTES];
	scd_secret_pipe_key(&d->secret, key);
	w->pipe = scd_pipe_new(d->loop, d->rank, d->world_size, key, d->secret.present,
			       on_pipe_msg, w);
	sodium_memzero(key, sizeof(key));
	if (!w->pipe) {
		scd_error(SCD_SUB_WORLD, "no memory for the peer pipe");
		return SC_ERR_NOMEM;
	}
	scd_pipe_on_closed(w->pipe, on_pipe_closed);
	if (!w->is_coord)
		return SC_OK;
	uint16_t bound = 0;
	if (scd_pipe_listen(w->pipe, addr, (uint16_t)scd_cfg_int(&d->cfg, SCD_CFG_peer_port),
			    &bound, err, sizeof(err)) != SC_OK) {
		scd_error(SCD_SUB_WORLD, "peer pipe: %s", err);
		return SC_ERR_SYSTEM;
	}
	w->pipe_port = bound;
	scd_info(SCD_SUB_WORLD, "peer pipe on %s port %u", addr, bound);
	return SC_OK;
}

sc_status_t scd_world_start(scd_world_t *w)
{
	scd_daemon_t *d = w->d;
	const char *coord = scd_cfg_str(&d->cfg, SCD_CFG_coordinator);
	/* the mesh is tcp whatever the key says: it carries host memory and the engine's
	 * rounds; the key's choice for GPU buffers is checked here and made by the engine
	 * (engine/gpunet.h) */
	const scd_transport_ops_t *want;
	char why[256] = "";
	sc_status_t st = scd_transport_lookup(scd_cfg_str(&d->cfg, SCD_CFG_transport), &want);
	if (st != SC_OK)
		snprintf(why, sizeof why, "%s", scd_transport_error());
	else if (want->device_memory && !scd_gpunet_usable(why, sizeof why))
		st = SC_ERR_UNSUPPORTED;
	if (st == SC_OK && (st = scd_transport_get(SCD_TRANSPORT_TCP, &w->tops)) != SC_OK)
		snprintf(why, sizeof why, "%s", scd_transport_error());
	if (st != SC_OK) {
		scd_error(SCD_SUB_WORLD, "transport = %s: %s",
			  scd_cfg_str(&d->cfg, SCD_CFG_transport), why);
		return st;
	}
	char endpoint[300], host[256], port[8], advertise[256], err[400];
	int v6 = 0;
	const char *data_addr = scd_cfg_str(&d->cfg, SCD_CFG_data_addr);
	if (scd_addr_zmq_endpoint(coord, endpoint, sizeof(endpoint), &v6, err, sizeof(err)) !=
		SC_OK ||
	    scd_addr_split(coord, host, sizeof(host), port, sizeof(port), err, sizeof(err)) !=
		SC_OK) {
		scd_error(SCD_SUB_WORLD, "coordinator %s: %s", coord, err);
		return SC_ERR_INVALID;
	}
	if (scd_addr_advertised(scd_cfg_str(&d->cfg, SCD_CFG_advertise_addr), data_addr, host,
				advertise, sizeof(advertise), err, sizeof(err)) != SC_OK) {
		scd_error(SCD_SUB_WORLD, "data plane address: %s", err);
		return SC_ERR_INVALID;
	}
	if (scd_addr_is_wildcard(data_addr) && scd_addr_is_wildcard(host) &&
	    !*scd_cfg_str(&d->cfg, SCD_CFG_advertise_addr) && d->world_size > 1)
		scd_warn(
		    SCD_SUB_WORLD,
		    "data_addr and the coordinator's host are both wildcards: announcing %s; "
		    "set advertise_addr to an address the other ranks reach",
		    advertise);
	snprintf(w->advertise, sizeof(w->advertise), "%s", advertise);
	if ((st = prepare_endpoint(w)) != SC_OK)
		return st;
	scd_peer_t *self = &w->peers[d->rank];
	w->sock = zmq_socket(d->zctx, w->is_coord ? ZMQ_ROUTER : ZMQ_DEALER);
	int hwm = 1 << 20, linger = 0, ivl = 100;
	zmq_setsockopt(w->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(w->sock, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(w->sock, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(w->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl));
	zmq_setsockopt(w->sock, ZMQ_IPV6, &v6, sizeof(v6));
	set_routing_id(w);
	if (scd_zsock_bound(w->sock, SCD_PEER_MSG_MAX_BYTES) != 0) {
		scd_error(SCD_SUB_WORLD,
			  "cannot bound the peer socket's messages to %lld bytes: %s",
			  SCD_PEER_MSG_MAX_BYTES, zmq_strerror(errno));
		return SC_ERR_SYSTEM;
	}
	st = scd_curve_setup(d, w->sock, w->is_coord, &w->curve);
	if (st != SC_OK)
		return st; /* logged there */
	if (w->is_coord &&
	    (st = scd_admit_start(
		 d, w->sock, w->curve ? SCD_ADMIT_PROVEN_BYTES : SCD_ADMIT_PROVEN_BYTES_NULL,
		 &w->admit)) != SC_OK)
		return st; /* logged there */
	if (d->world_size > 1 && (st = start_pipe(w, host)) != SC_OK)
		return st; /* logged there */
	if (w->is_coord) {
		if (zmq_bind(w->sock, endpoint) != 0) {
			scd_error(SCD_SUB_WORLD,
				  "cannot listen on coordinator address %s (%s): %s", coord,
				  endpoint + 6, zmq_strerror(errno));
			return SC_ERR_SYSTEM;
		}
		w->n_joined = 1;
	} else if (zmq_connect(w->sock, endpoint) != 0) {
		scd_error(SCD_SUB_WORLD, "bad coordinator address %s: %s", coord,
			  zmq_strerror(errno));
		return SC_ERR_INVALID;
	}
	int fd;
	size_t sz = sizeof(fd);
	zmq_getsockopt(w->sock, ZMQ_FD, &fd, &sz);
	uv_poll_init(d->loop, &w->poll, fd);
	w->poll.data = w;
	uv_poll_start(&w->poll, UV_READABLE, on_readable);
	w->polling = 1;
	uv_timer_start(&w->join_timer, on_join_timeout,
		       (uint64_t)scd_cfg_int(&d->cfg, SCD_CFG_join_timeout_ms), 0);
	char where[160];
	scd_info(SCD_SUB_WORLD, "rank %d of %d, %s %s, data plane %s %s", d->rank,
		 d->world_size, w->is_coord ? "coordinator on" : "joining", coord,
		 w->tops->name, describe_blob(w, self, where, sizeof(where)));
	if (d->world_size == 1) {
		w->formed = 1;
		scd_live_start(w);
		start_mesh(w);
	} else if (!w->is_coord) {
		send_join(w);
	}
	return SC_OK;
}

void scd_world_destroy(scd_world_t *w)
{
	if (!w)
		return;
	uv_timer_stop(&w->join_timer);
	uv_timer_stop(&w->flush_timer);
	uv_timer_stop(&w->hold_timer);
	uv_timer_stop(&w->fast.timer);
	uv_timer_stop(&w->beat_timer);
	uv_close((uv_handle_t *)&w->beat_timer, NULL);
	uv_close((uv_handle_t *)&w->orphan_timer, NULL);
	uv_close((uv_handle_t *)&w->join_timer, NULL);
	uv_close((uv_handle_t *)&w->flush_timer, NULL);
	uv_close((uv_handle_t *)&w->hold_timer, NULL);
	uv_close((uv_handle_t *)&w->fast.timer, NULL);
	scd_fast_free(w);
	if (w->polling) {
		uv_poll_stop(&w->poll);
		uv_close((uv_handle_t *)&w->poll, NULL);
	}
	scd_admit_stop(w->admit);
	w->admit = NULL;
	scd_pipe_destroy(w->pipe);
	w->pipe = NULL;
	for (int r = 0; w->peers && r < w->d->world_size; r++)
		scd_world_stream_free(&w->peers[r]);
	free(w->world_info);
	w->world_info = NULL;
	w->world_info_len = 0;
	scd_neg_release_held(w, 0);
	scd_world_reform_drop(w, -1, 0);
	for (int i = 0; i < w->n_cfg_held; i++)
		free(w->cfg_held[i]);
	free(w->cfg_held);
	w->cfg_held = NULL;
	w->n_cfg_held = 0;
	scd_world_held_free(w);
	if (w->sock)
		zmq_close(w->sock);
	scd_curve_destroy(w->curve);
	w->curve = NULL;
	scd_transport_release(w->endpoint); /* not handed to a mesh job */
	w->endpoint = NULL;
	scd_neg_destroy(w);
	/* w and its peers are freed once the loop has closed the handles (main.c) */
}

void scd_world_collect(scd_world_t *w)
{
	if (w && w->d->engine)
		scd_engine_collect(w->d->engine);
}
