/*
 * metrics.c: the Prometheus exposition of a daemon's statistics (see metrics.h).
 */
#include "metrics/metrics.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"
#include "metrics/http.h"
#include "util/arena.h"
#include "util/log.h"
#include "world/addr.h"

struct scd_metrics {
	scd_http_t *http;
};

/* A label value, escaped as the format wants (backslash, quote, newline). */
static void label(FILE *out, const char *s)
{
	fputc('"', out);
	for (; s && *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', out);
		if (*s == '\n')
			fputs("\\n", out);
		else
			fputc(*s, out);
	}
	fputc('"', out);
}

static void family(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP sparsecomm_%s %s\n# TYPE sparsecomm_%s %s\n", name, help, name,
		type);
}

/* The per-tensor counters: one family after the other, every tensor in each. */
static void tensors(FILE *out, const Sparsecomm__StatsReply *s)
{
	static const struct {
		const char *name, *help;
	} fams[] = {
	    {"tensor_calls_total", "Allreduce calls of the tensor completed on this node."},
	    {"tensor_errors_total", "Allreduce calls of the tensor that failed."},
	    {"tensor_bytes_sent_total", "Data-plane bytes sent for the tensor (a fused "
					"buffer's split by the tensors' sizes)."},
	    {"tensor_bytes_received_total", "Data-plane bytes received for the tensor."},
	    {"tensor_seconds_total", "Data-plane seconds spent on the tensor."},
	    {"tensor_nonfinite_total", "NaN or infinite values in this node's input "
				       "(nonfinite = warn or error)."},
	};
	for (size_t f = 0; f < sizeof(fams) / sizeof(fams[0]); f++) {
		family(out, fams[f].name, "counter", fams[f].help);
		for (size_t i = 0; i < s->n_tensors; i++) {
			const Sparsecomm__TensorStats *t = s->tensors[i];
			fprintf(out, "sparsecomm_%s{tensor=", fams[f].name);
			label(out, t->name);
			fprintf(out, ",process_set=\"%u\"", t->process_set);
			switch (f) {
			case 0:
				fprintf(out, "} %" PRIu64 "\n", t->calls);
				break;
			case 1:
				fprintf(out, "} %" PRIu64 "\n", t->errors);
				break;
			case 2:
				fprintf(out, "} %" PRIu64 "\n", t->bytes_sent);
				break;
			case 3:
				fprintf(out, "} %" PRIu64 "\n", t->bytes_received);
				break;
			case 4:
				fprintf(out, "} %.9g\n", t->time_s);
				break;
			default:
				fprintf(out, "} %" PRIu64 "\n", t->nonfinite);
			}
		}
	}
}

static void schemes(FILE *out, const scd_daemon_t *d)
{
	static const char *const names[] = {"buffers_total", "errors_total", "bytes_sent_total",
					    "bytes_received_total", "seconds_total"};
	static const char *const helps[] = {
	    "Buffers (fused or single tensors) the scheme ran on this node.",
	    "Buffers the scheme ran that failed.", "Data-plane bytes the scheme sent.",
	    "Data-plane bytes the scheme received.", "Data-plane seconds the scheme took."};
	for (int f = 0; f < 5; f++) {
		char fam[64];
		snprintf(fam, sizeof(fam), "scheme_%s", names[f]);
		family(out, fam, "counter", helps[f]);
		for (int k = 0; k < SCD_SCHEME_COUNT; k++) {
			const scd_scheme_counters_t *c = &d->scheme_stats[k];
			fprintf(out, "sparsecomm_%s{scheme=\"%s\"} ", fam,
				scd_scheme_name((scd_scheme_t)k));
			if (f == 4)
				fprintf(out, "%.9g\n", c->time_s);
			else
				fprintf(out, "%" PRIu64 "\n",
					f == 0	 ? c->buffers
					: f == 1 ? c->errors
					: f == 2 ? c->bytes_sent
						 : c->bytes_recv);
		}
	}
}

static void gauge(FILE *out, const char *name, const char *type, const char *help, double v)
{
	family(out, name, type, help);
	fprintf(out, "sparsecomm_%s %.17g\n", name, v);
}

static void world(FILE *out, const Sparsecomm__StatusReply *st)
{
	int up = 0;
	family(out, "peer_up", "gauge",
	       "1 when the data-plane connection to the peer is up (the world has formed).");
	for (size_t i = 0; i < st->n_peers; i++) {
		const Sparsecomm__PeerInfo *p = st->peers[i];
		/* the host only: the data port is chosen again at each re-form, and a label
		 * that changes starts a new series */
		fprintf(out, "sparsecomm_peer_up{rank=\"%d\",addr=", p->rank);
		label(out, p->addr);
		fprintf(out, "} %d\n", p->connected ? 1 : 0);
		up += p->connected;
	}
	gauge(out, "world_formed", "gauge", "1 once every rank has joined and the mesh is up.",
	      st->n_peers && up == (int)st->n_peers);
	gauge(out, "rank", "gauge", "This node's rank.", st->rank);
	gauge(out, "world_size", "gauge", "Nodes in the world.", st->world_size);
	gauge(out, "local_size", "gauge", "Trainers per node.", st->local_size);
	gauge(out, "trainers", "gauge", "Trainers connected to this daemon.",
	      (double)st->n_clients);
	gauge(out, "gpu_bytes", "gauge", "GPU memory held for cuda tensors.",
	      (double)st->gpu_bytes);
	gauge(out, "gpu_lost", "gauge",
	      "1 once a sticky CUDA fault has left the GPU failing every call (GPU work fails, "
	      "cpu tensors are served).",
	      st->gpu_lost ? 1 : 0);
	family(out, "uptime_seconds", "gauge", "Seconds since the daemon started.");
	fprintf(out, "sparsecomm_uptime_seconds %" PRIu64 ".%03u\n", st->uptime_ms / 1000,
		(unsigned)(st->uptime_ms % 1000));
	family(out, "info", "gauge", "The daemon's version and coordinator.");
	fprintf(out, "sparsecomm_info{version=");
	label(out, st->version);
	fprintf(out, ",coordinator=");
	label(out, st->coordinator);
	fprintf(out, "} 1\n");
}

int scd_metrics_render(scd_daemon_t *d, FILE *out)
{
	scd_arena_t a = {0};
	Sparsecomm__StatsReply stats = SPARSECOMM__STATS_REPLY__INIT;
	Sparsecomm__StatusReply status = SPARSECOMM__STATUS_REPLY__INIT;
	scd_ctl_collect(d->ctl); /* the operations ended before the request, counted */
	scd_ctl_fill_stats(d->ctl, &stats, &a);
	scd_ctl_fill_status(d->ctl, &status, &a);
	tensors(out, &stats);
	schemes(out, d);
	gauge(out, "cycles_total", "counter", "Plans applied.", (double)stats.cycles);
	gauge(out, "buffers_total", "counter", "Buffers (fused or single) run.",
	      (double)stats.fused_buffers);
	gauge(out, "fusion_plan_version", "gauge", "Version of the fusion plan in use.",
	      (double)stats.fusion_plan_version);
	world(out, &status);
	scd_arena_free(&a);
	return ferror(out) ? -1 : 0;
}

static int render(void *arg, FILE *out)
{
	return scd_metrics_render(arg, out);
}

sc_status_t scd_metrics_start(scd_daemon_t *d)
{
	const char *where = scd_cfg_str(&d->cfg, SCD_CFG_metrics_addr);
	char host[256], port[8], addr[SCD_ADDR_MAX], err[400];
	int v6 = 0;
	d->metrics = NULL;
	if (!where[0])
		return SC_OK;
	sc_status_t st =
	    scd_addr_split(where, host, sizeof(host), port, sizeof(port), err, sizeof(err));
	if (st == SC_OK)
		st = scd_addr_resolve(host, addr, sizeof(addr), &v6, err, sizeof(err));
	scd_metrics_t *m = st == SC_OK ? calloc(1, sizeof(*m)) : NULL;
	if (st == SC_OK && !m) {
		snprintf(err, sizeof(err), "out of memory");
		st = SC_ERR_NOMEM;
	}
	if (st == SC_OK)
		st = scd_http_start(d->loop, addr, atoi(port), "/metrics",
				    "text/plain; version=0.0.4; charset=utf-8", render, d,
				    &m->http, err, sizeof(err));
	if (st != SC_OK) {
		free(m);
		scd_error(SCD_SUB_MAIN, "metrics_addr %s: %s", where, err);
		return st;
	}
	d->metrics = m;
	scd_info(SCD_SUB_MAIN, "metrics on http://%s%s%s:%s/metrics", v6 ? "[" : "", addr,
		 v6 ? "]" : "", port);
	return SC_OK;
}

void scd_metrics_stop(scd_daemon_t *d)
{
	if (!d->metrics)
		return;
	scd_http_stop(d->metrics->http);
	free(d->metrics);
	d->metrics = NULL;
}
