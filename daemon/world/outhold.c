/*
 * outhold.c: a planned buffer's announcements go together (docs/design.md, "Announcing a
 * planned buffer whole"). Under a fusion plan (aligned, adaptive) the coordinator sends a
 * buffer out when every rank has announced all of its tensors, or when none of them has
 * become ready for fusion_wait_ms: an announcement of one tensor while its buffer's others
 * are still coming on this node changes nothing there but costs a message, its sealing, a
 * wake-up of the coordinator and a pass of its table. So the flush timer's pass keeps back
 * a cached announcement whose planned buffer still misses a tensor on this node, until the
 * last one comes (one ReadyList for the buffer) or fusion_wait_ms after the latest of them
 * (the coordinator then learns the break, as from a node that sent each as it came).
 *
 * Each announcement kept back carries how long it waited (ReadyList.cached_held_us),
 * so the coordinator's ready times (the plan's waits, the step period it times plans
 * with) are the tensors' own, not their buffer's. Nothing is kept back where the order of
 * what was queued matters (a world re-forming: held.c), for a group's member (its group
 * goes out whole: group.c), an announcement in full (its tensor has no plan place yet),
 * a buffer with a tensor of another process set (this node may never announce it), or
 * with fusion_announce_whole = 0.
 */
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"
#include "ctl/tensor.h"
#include "util/clock.h"
#include "world/world_int.h"

/* fb_mark's states of a buffer, found once a pass */
enum { FB_UNSEEN, FB_WHOLE, FB_MISSING };

void scd_outhold_plan(scd_world_t *w)
{
	free(w->fb_mark);
	free(w->fb_last);
	w->fb_mark = calloc((size_t)w->n_fusion_bufs + 1, 1);
	w->fb_last = calloc((size_t)w->n_fusion_bufs + 1, sizeof(double));
	if (!w->fb_mark || !w->fb_last) { /* out of memory: nothing is kept back */
		free(w->fb_mark);
		free(w->fb_last);
		w->fb_mark = NULL;
		w->fb_last = NULL;
		return;
	}
	for (int b = 0; b < w->n_fusion_bufs; b++)
		for (uint32_t k = 1; k <= w->fusion_bufs[b][0]; k++) {
			scd_cache_ent_t *c = scd_cache_get(w, w->fusion_bufs[b][k]);
			if (c) {
				c->fbuf = b;
				c->fbuf_version = w->fusion_version;
			}
		}
	if (w->n_out) /* what waits for a buffer of the old plan may be whole in the new */
		scd_world_arm_flush(w);
}

void scd_outhold_free(scd_world_t *w)
{
	free(w->fb_mark);
	free(w->fb_last);
	w->fb_mark = NULL;
	w->fb_last = NULL;
}

/* Whether the tensor of plan place id needs no wait: this node announced it and no plan
 * has answered it (queued or sent), by this id or another (a new form of the tensor takes
 * the old one's place in the coordinator's plan, which nodes see only when a buffer
 * changes); or its id is no longer known here (evicted): nothing says what to wait for. */
static int announced_here(scd_world_t *w, uint32_t id)
{
	const scd_cache_ent_t *c = scd_cache_get(w, id);
	if (!c)
		return 1;
	const scd_ntensor_t *nt = w->d->ctl ? scd_ctl_tensor(w->d->ctl, c->name) : NULL;
	return nt && nt->state == SCD_NT_ANNOUNCED;
}

/* o's planned buffer (its index), or -1 where o goes now whatever the rest does. */
static int out_buffer(scd_world_t *w, const scd_outreq_t *o)
{
	if (!o->cached || o->gname || !w->fb_mark)
		return -1;
	const scd_cache_ent_t *c = scd_cache_get(w, o->id);
	if (!c || !w->fusion_version || c->fbuf_version != w->fusion_version || c->fbuf < 0 ||
	    c->fbuf >= w->n_fusion_bufs || w->fusion_bufs[c->fbuf][0] < 2)
		return -1;
	return c->fbuf;
}

/* Whether buffer b has every tensor announced here: its last tensors first, the ones
 * that come last in a backward pass; a tensor of another process set: -1 (never kept). */
static int buffer_whole(scd_world_t *w, int b, uint32_t pset)
{
	const uint32_t *v = w->fusion_bufs[b];
	for (uint32_t k = v[0]; k >= 1; k--) {
		const scd_cache_ent_t *c = scd_cache_get(w, v[k]);
		if (c && c->pset != pset)
			return -1;
		if (!announced_here(w, v[k]))
			return 0;
	}
	return 1;
}

void scd_neg_flush_turn(scd_world_t *w)
{
	int mode = scd_fusion_mode_parse(scd_cfg_str(&w->d->cfg, SCD_CFG_fusion_mode));
	if (!w->formed || w->n_held_states || !w->n_out || !w->fb_mark ||
	    (mode != SCD_FUSION_ALIGNED && mode != SCD_FUSION_ADAPTIVE) ||
	    !scd_cfg_int(&w->d->cfg, SCD_CFG_fusion_announce_whole)) {
		scd_neg_flush(w);
		return;
	}
	double now = scd_now_s();
	double wait = (double)scd_cfg_int(&w->d->cfg, SCD_CFG_fusion_wait_ms) / 1000.0;
	memset(w->fb_mark, FB_UNSEEN, (size_t)w->n_fusion_bufs);
	for (int i = 0; i < w->n_out; i++) {
		int b = out_buffer(w, &w->out[i]);
		if (b < 0)
			continue;
		if (w->fb_mark[b] == FB_UNSEEN) {
			const scd_cache_ent_t *c = scd_cache_get(w, w->out[i].id);
			w->fb_mark[b] = buffer_whole(w, b, c->pset) ? FB_WHOLE : FB_MISSING;
			w->fb_last[b] = 0;
		}
		if (w->out[i].queued_s > w->fb_last[b])
			w->fb_last[b] = w->out[i].queued_s;
	}
	/* what goes now to the front, in its order; what is kept back after it, in its */
	scd_outreq_t *kept = malloc(sizeof(*kept) * (size_t)w->n_out);
	if (!kept) {
		scd_neg_flush(w);
		return;
	}
	int n_go = 0, n_kept = 0;
	double due = 0;
	for (int i = 0; i < w->n_out; i++) {
		int b = out_buffer(w, &w->out[i]);
		if (b >= 0 && w->fb_mark[b] == FB_MISSING && now < w->fb_last[b] + wait) {
			kept[n_kept++] = w->out[i];
			if (!due || w->fb_last[b] + wait < due)
				due = w->fb_last[b] + wait;
		} else {
			w->out[n_go++] = w->out[i];
		}
	}
	memcpy(w->out + n_go, kept, sizeof(*kept) * (size_t)n_kept);
	free(kept);
	for (int i = n_go; i < w->n_out; i++) /* counted once, at the first pass kept */
		if (!w->out[i].kept) {
			w->out[i].kept = 1;
			w->announcements_kept++;
		}
	if (n_go || w->out_abandon)
		scd_neg_flush_first(w, n_go, scd_neg_out_abandons(w));
	if (n_kept) /* the latest tensor's wait, in whole milliseconds up (the same clock) */
		scd_world_arm_flush_at(w, (uint64_t)(due * 1000.0) + 1);
}
