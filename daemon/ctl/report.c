/*
 * report.c: the control socket's reports, what `sparsectl status`, `stats`, `pending` and
 * `config` ask (and the metrics endpoint's view of the first two), and runtime changes of
 * the configuration, with the check that keys marked SCD_CFG_RT_OWNER come from the
 * daemon's user or root.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl/ctl.h"
#include "ctl/ctl_int.h"
#include "ctl/peer.h"
#include "device/share.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/timeline.h"

/* How long a request that the coordinator answers (config set, pending) waits for it. */
#define CTL_COORD_ANSWER_MS 3000

/* The GPUs the daemon serves (0 when it cannot tell). */
static int gpu_count(void)
{
	const scd_device_share_t *share;
	int n = 0;
	if (scd_device_share_get(SCD_DEVICE_CUDA, &share) != SC_OK ||
	    share->devices(&n) != SC_OK)
		return 0;
	return n;
}

void scd_ctl_fill_status(scd_ctl_t *ctl, Sparsecomm__StatusReply *rp, scd_arena_t *a)
{
	scd_daemon_t *d = ctl->d;
	Sparsecomm__StatusReply r = *rp;
	r.rank = d->rank;
	r.world_size = d->world_size;
	r.local_size = d->local_size;
	r.protocol_version = SC_PROTOCOL_VERSION;
	r.version = SC_VERSION_STRING;
	r.uptime_ms = scd_now_ms() - d->start_ms;
	r.coordinator = (char *)scd_cfg_str(&d->cfg, SCD_CFG_coordinator);
	char gpu[600];
	const scd_device_ops_t *gops;
	const scd_device_kind_t cuda = SCD_DEVICE_CUDA;
	if (!strcmp(scd_cfg_str(&d->cfg, SCD_CFG_device), "cpu"))
		snprintf(gpu, sizeof(gpu), "none (device = cpu)");
	else if (scd_device_get(cuda, &gops) == SC_OK && scd_device_lost(cuda))
		snprintf(gpu, sizeof(gpu), "lost: %.580s", scd_device_lost(cuda));
	else if (scd_device_get(cuda, &gops) == SC_OK)
		snprintf(gpu, sizeof(gpu), "cuda:%d, the engine's, of %d (%s)",
			 scd_device_home(cuda), gpu_count(), scd_device_backend(cuda));
	else
		snprintf(gpu, sizeof(gpu), "none (%.580s)",
			 scd_device_unavailable_reason(cuda));
	r.gpu = scd_arena_strdup(a, gpu);
	r.gpu_lost = scd_device_lost(cuda) != NULL;
	r.gpu_bytes = scd_tensors_gpu_bytes(ctl->tensors);
	ctl->up->status(d->world, &r, a);
	r.clients = scd_arena_alloc(a, sizeof(*r.clients) * (size_t)(ctl->n_trainers + 1));
	for (scd_session_t *t = ctl->sessions; t && r.clients; t = t->next) {
		if (t->role != SPARSECOMM__ROLE__ROLE_TRAINER)
			continue;
		Sparsecomm__ClientInfo *ci = scd_arena_alloc(a, sizeof(*ci));
		if (!ci)
			break;
		sparsecomm__client_info__init(ci);
		ci->local_rank = t->local_rank;
		ci->rank = d->rank * d->local_size + t->local_rank;
		ci->pid = t->pid ? t->pid : t->declared_pid;
		ci->submit_channel = t->submit_fd >= 0;
		ci->submit_requests = t->submit_requests;
		ci->submit_batches = t->submit_batches;
		for (scd_reg_t *g = t->regs; g; g = g->next_in_session) {
			ci->tensors++;
			ci->in_flight += g->handle != 0;
		}
		r.clients[r.n_clients++] = ci;
	}
	*rp = r;
}

void scd_ctl_handle_status(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq)
{
	scd_arena_t a = {0};
	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	Sparsecomm__StatusReply r = SPARSECOMM__STATUS_REPLY__INIT;
	scd_ctl_fill_status(ctl, &r, &a);
	m.seq = seq;
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_STATUS;
	m.status = &r;
	scd_ctl_send(ctl, s->ident, s->ident_len, &m);
	scd_arena_free(&a);
}

/* One tensor's entry of a stats reply (name and scheme point into st and name). */
static void stats_entry(scd_arena_t *a, Sparsecomm__StatsReply *r, char *name, uint32_t dtype,
			uint64_t numel, scd_tensor_stats_t *st)
{
	Sparsecomm__TensorStats *ts = scd_arena_alloc(a, sizeof(*ts));
	if (!ts)
		return;
	sparsecomm__tensor_stats__init(ts);
	size_t name_len;
	ts->process_set = scd_pset_of(name, &name_len);
	ts->name = ts->process_set ? scd_arena_strndup(a, name, name_len) : name;
	if (!ts->name)
		return;
	ts->numel = numel;
	ts->dtype = dtype;
	ts->calls = st->calls;
	ts->errors = st->errors;
	ts->nonfinite = st->nonfinite;
	ts->bytes_sent = st->bytes_sent;
	ts->bytes_received = st->bytes_recv;
	ts->time_s = st->time_s;
	ts->scheme = st->scheme;
	ts->transport = st->transport;
	ts->predicted_s = st->predicted_s;
	ts->measured_s = st->measured_s;
	ts->density = st->density;
	ts->densification = st->densification;
	ts->imbalance = st->imbalance;
	ts->exchange_s = st->exchange_s;
	ts->cpu_s = st->cpu_s;
	ts->device = st->device_kind == SC_DEVICE_CUDA ? "cuda:0" : "cpu";
	ts->wire = st->wire[0] ? st->wire : "native";
	r->tensors[r->n_tensors++] = ts;
}

/* The registered tensors' statistics, then those kept of released ones; with reset,
 * every counter is zeroed once the reply has been sent. */
void scd_ctl_fill_stats(scd_ctl_t *ctl, Sparsecomm__StatsReply *r, scd_arena_t *a)
{
	scd_stats_keep_t *kept = scd_tensors_kept(ctl->tensors);
	size_t n = kept->n;
	for (scd_ntensor_t *nt = scd_tensors_first(ctl->tensors); nt; nt = nt->all_next)
		n++;
	r->tensors = scd_arena_alloc(a, sizeof(*r->tensors) * (n + 1));
	for (scd_ntensor_t *nt = scd_tensors_first(ctl->tensors); nt && r->tensors;
	     nt = nt->all_next)
		stats_entry(a, r, nt->name, nt->dtype, nt->numel, &nt->stats);
	for (size_t i = 0; i < kept->n && r->tensors; i++)
		stats_entry(a, r, kept->v[i].name, kept->v[i].dtype, kept->v[i].numel,
			    &kept->v[i].stats);
	r->cycles = ctl->d->stats_cycles;
	r->fused_buffers = ctl->d->stats_buffers;
	ctl->up->fusion_stats(ctl->d->world, r, a);
}

void scd_ctl_handle_stats(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq, int reset)
{
	scd_arena_t a = {0};
	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	Sparsecomm__StatsReply r = SPARSECOMM__STATS_REPLY__INIT;
	scd_ctl_fill_stats(ctl, &r, &a);
	m.seq = seq;
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_STATS;
	m.stats = &r;
	scd_ctl_send(ctl, s->ident, s->ident_len, &m);
	scd_arena_free(&a);
	if (reset) {
		scd_tensors_reset_stats(ctl->tensors);
		ctl->d->stats_cycles = ctl->d->stats_buffers = 0;
		memset(ctl->d->scheme_stats, 0, sizeof(ctl->d->scheme_stats));
		scd_info(SCD_SUB_CTL, "statistics reset");
	}
}

void scd_ctl_handle_pending(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq)
{
	struct pending_q *q = &ctl->pq[ctl->next_query % 16];
	if (q->id) /* the query sixteen before this one still waits: answered now */
		scd_ctl_send_error(
		    ctl, q->ident, q->ident_len, q->seq, SC_ERR_PEER,
		    "pending: the coordinator (node 0) had not answered when newer "
		    "queries replaced this one");
	q->id = ++ctl->next_query;
	q->seq = seq;
	q->deadline_ms = scd_now_ms() + CTL_COORD_ANSWER_MS;
	memcpy(q->ident, s->ident, s->ident_len);
	q->ident_len = s->ident_len;
	ctl->up->pending(ctl->d->world, q->id);
}

void scd_ctl_reply_pending(scd_ctl_t *ctl, uint64_t query_id, const Sparsecomm__PendingReply *r)
{
	struct pending_q *q = &ctl->pq[(query_id - 1) % 16];
	if (q->id != query_id)
		return; /* superseded */
	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	m.seq = q->seq;
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_PENDING;
	m.pending = (Sparsecomm__PendingReply *)r;
	scd_ctl_send(ctl, q->ident, q->ident_len, &m);
	q->id = 0;
}

void scd_ctl_local_pending(scd_ctl_t *ctl, Sparsecomm__PendingReply *r, scd_arena_t *a)
{
	size_t n = 0;
	for (scd_ntensor_t *nt = scd_tensors_first(ctl->tensors); nt; nt = nt->all_next)
		n += nt->state == SCD_NT_LOCAL_WAIT;
	if (!n)
		return;
	Sparsecomm__PendingTensor **v = scd_arena_alloc(a, sizeof(*v) * (r->n_tensors + n));
	if (!v)
		return;
	if (r->n_tensors) /* the reply may have none yet, and no array */
		memcpy(v, r->tensors, sizeof(*v) * r->n_tensors);
	r->tensors = v;
	uint64_t now = scd_now_ms();
	for (scd_ntensor_t *nt = scd_tensors_first(ctl->tensors); nt; nt = nt->all_next) {
		if (nt->state != SCD_NT_LOCAL_WAIT)
			continue;
		Sparsecomm__PendingTensor *p = scd_arena_alloc(a, sizeof(*p));
		int32_t *miss = scd_arena_alloc(a, sizeof(int32_t));
		if (!p || !miss)
			return;
		sparsecomm__pending_tensor__init(p);
		size_t name_len;
		p->process_set = scd_pset_of(nt->name, &name_len);
		p->name = scd_arena_strndup(a, nt->name, name_len);
		miss[0] = ctl->d->rank;
		p->missing_ranks = miss;
		p->n_missing_ranks = 1;
		p->waiting_s = (double)(now - nt->state_since_ms) / 1000.0;
		r->tensors[r->n_tensors++] = p;
	}
}

/*
 * A config set is answered when the coordinator's apply reaches this node (it sends it to
 * every node, this one included), not when it is proposed: a coordinator that is lost,
 * or that refuses the value, applies it nowhere, and sparsectl must not say it was
 * applied. One that has not come back within CTL_COORD_ANSWER_MS is answered with an
 * error (scd_ctl_report_expire), as is a pending query the coordinator has not answered.
 */

static void config_wait_end(scd_ctl_t *ctl, struct config_wait *w, sc_status_t st,
			    const char *why)
{
	if (st == SC_OK) {
		Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
		Sparsecomm__Empty e = SPARSECOMM__EMPTY__INIT;
		m.seq = w->seq;
		m.body_case = SPARSECOMM__DAEMON_MSG__BODY_OK;
		m.ok = &e;
		scd_ctl_send(ctl, w->ident, w->ident_len, &m);
	} else {
		char msg[900];
		snprintf(msg, sizeof(msg), "config set %s '%.200s' %s",
			 scd_cfg_desc[w->key].name, w->value, why);
		scd_ctl_send_error(ctl, w->ident, w->ident_len, w->seq, st, msg);
	}
	free(w->value);
	w->value = NULL;
}

/* Holds sparsectl's answer until the change is applied here; 0 (answered with the error):
 * nothing to wait with, so nothing may be proposed. */
static int config_wait(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq, int key,
		       const char *value)
{
	struct config_wait *w = &ctl->cw[0]; /* a free slot, else the oldest */
	for (size_t i = 0; i < sizeof(ctl->cw) / sizeof(ctl->cw[0]) && w->value; i++)
		if (!ctl->cw[i].value || ctl->cw[i].deadline_ms < w->deadline_ms)
			w = &ctl->cw[i];
	if (w->value) /* every slot waits: the oldest is answered now */
		config_wait_end(
		    ctl, w, SC_ERR_PEER,
		    "was proposed, but not yet applied on this node when newer config "
		    "sets replaced its wait; check with config get");
	if (!(w->value = strdup(value))) {
		scd_ctl_send_error(ctl, s->ident, s->ident_len, seq, SC_ERR_NOMEM,
				   "config set: no memory, nothing proposed");
		return 0;
	}
	w->seq = seq;
	w->key = key;
	w->deadline_ms = scd_now_ms() + CTL_COORD_ANSWER_MS;
	memcpy(w->ident, s->ident, s->ident_len);
	w->ident_len = s->ident_len;
	return 1;
}

void scd_ctl_config_applied(scd_ctl_t *ctl, const char *key, const char *value, sc_status_t st,
			    const char *why)
{
	if (!ctl) /* a world run alone (the peer message fuzzer) */
		return;
	int k = scd_config_find(key ? key : "");
	char text[600];
	snprintf(text, sizeof(text), "was refused on node %d: %.500s", ctl->d->rank,
		 why ? why : "");
	for (size_t i = 0; i < sizeof(ctl->cw) / sizeof(ctl->cw[0]); i++) {
		struct config_wait *w = &ctl->cw[i];
		if (w->value && w->key == k && !strcmp(w->value, value ? value : ""))
			config_wait_end(ctl, w, st, text);
	}
}

void scd_ctl_report_expire(scd_ctl_t *ctl, int all)
{
	uint64_t now = scd_now_ms();
	char why[300];
	snprintf(why, sizeof(why),
		 "pending: the coordinator (node 0), which gathers every node's waiting "
		 "tensors, did not answer within %d ms (lost?)",
		 CTL_COORD_ANSWER_MS);
	for (size_t i = 0; i < sizeof(ctl->pq) / sizeof(ctl->pq[0]); i++) {
		struct pending_q *q = &ctl->pq[i];
		if (q->id && (all || now >= q->deadline_ms)) {
			scd_ctl_send_error(ctl, q->ident, q->ident_len, q->seq,
					   all ? SC_ERR_SHUTDOWN : SC_ERR_PEER,
					   all ? "pending: the daemon is shutting down" : why);
			q->id = 0;
		}
	}
	snprintf(why, sizeof(why),
		 "was not applied within %d ms: the coordinator (node 0), which applies it on "
		 "every node, did not send it back (lost, or it refused the value: its log "
		 "says); check with config get",
		 CTL_COORD_ANSWER_MS);
	for (size_t i = 0; i < sizeof(ctl->cw) / sizeof(ctl->cw[0]); i++) {
		struct config_wait *w = &ctl->cw[i];
		if (w->value && (all || now >= w->deadline_ms))
			config_wait_end(ctl, w, all ? SC_ERR_SHUTDOWN : SC_ERR_PEER,
					all ? "was not applied: the daemon is shutting down"
					    : why);
	}
}

void scd_ctl_handle_config(scd_ctl_t *ctl, scd_session_t *s, uint64_t seq,
			   const Sparsecomm__ClientMsg *msg)
{
	scd_config_t *cfg = &ctl->d->cfg;
	char err[256];
	if (msg->body_case == SPARSECOMM__CLIENT_MSG__BODY_CONFIG_SET) {
		const Sparsecomm__ConfigSet *cs = msg->config_set;
		int k = scd_config_find(cs->key ? cs->key : "");
		char why[512], msg2[700];
		sc_status_t st = scd_config_probe(cs->key ? cs->key : "",
						  cs->value ? cs->value : "", why, sizeof(why));
		if (st == SC_OK && (scd_cfg_desc[k].runtime & SCD_CFG_OWNER) &&
		    !scd_peer_is_owner(s->uid)) {
			st = SC_ERR_INVALID;
			snprintf(
			    why, sizeof(why),
			    "%s may be changed only by the daemon's user (uid %u) or root, "
			    "and this client runs as uid %u",
			    scd_cfg_desc[k].name, (unsigned)geteuid(), s->uid);
		}
		/* a timeline this node cannot open is refused here, not logged later while
		 * sparsectl says it is on; after the owner's check, so that another user learns
		 * nothing of what the daemon's user may write */
		if (st == SC_OK && k == SCD_CFG_timeline_file && cs->value && cs->value[0])
			st = scd_tl_writable(cs->value, ctl->d->rank, ctl->d->world_size, why,
					     sizeof(why));
		if (st != SC_OK) {
			snprintf(msg2, sizeof(msg2),
				 "config set %.60s '%.100s' refused, nothing applied on any "
				 "node: %s",
				 cs->key ? cs->key : "", cs->value ? cs->value : "", why);
			scd_ctl_send_error(ctl, s->ident, s->ident_len, seq, st, msg2);
			return;
		}
		if (config_wait(ctl, s, seq, k, cs->value ? cs->value : ""))
			ctl->up->config_propose(ctl->d->world, scd_cfg_desc[k].name, cs->value);
		return;
	}
	const char *key = msg->config_get->key;
	int only = key && key[0] ? scd_config_find(key) : -1;
	if (key && key[0] && only < 0) {
		snprintf(err, sizeof(err), "config get: unknown key '%s'", key);
		scd_ctl_send_error(ctl, s->ident, s->ident_len, seq, SC_ERR_NOT_FOUND, err);
		return;
	}
	Sparsecomm__ConfigEntry ents[SCD_CFG_COUNT], *ptrs[SCD_CFG_COUNT];
	char bufs[SCD_CFG_COUNT][32];
	Sparsecomm__ConfigReply r = SPARSECOMM__CONFIG_REPLY__INIT;
	for (int i = 0; i < SCD_CFG_COUNT; i++) {
		if (only >= 0 && i != only)
			continue;
		Sparsecomm__ConfigEntry *e = &ents[r.n_entries];
		sparsecomm__config_entry__init(e);
		e->key = (char *)scd_cfg_desc[i].name;
		e->value = (char *)scd_config_text(cfg, i, bufs[i], sizeof(bufs[i]));
		e->source = (char *)scd_config_source_name(cfg->source[i]);
		e->runtime = (scd_cfg_desc[i].runtime & SCD_CFG_RT) != 0;
		e->doc = (char *)scd_cfg_desc[i].doc;
		ptrs[r.n_entries++] = e;
	}
	r.entries = ptrs;
	Sparsecomm__DaemonMsg m = SPARSECOMM__DAEMON_MSG__INIT;
	m.seq = seq;
	m.body_case = SPARSECOMM__DAEMON_MSG__BODY_CONFIG;
	m.config = &r;
	scd_ctl_send(ctl, s->ident, s->ident_len, &m);
}
