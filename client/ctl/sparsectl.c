/*
 * sparsectl: inspect and tune a running sparsecommd through its control socket.
 *
 *   sparsectl [--socket PATH] [--timeout-ms N] [--json] COMMAND [ARGS]
 *     status               rank, world size, peers (state, last heard) and the node's
 *                          trainers
 *     stats [--reset]      per tensor: calls, bytes, time, last scheme and its prediction
 *                          (kept after the trainers leave; --reset zeroes them after
 *                          printing)
 *     pending              tensors some ranks submitted and others have not
 *     config get [KEY]     every setting, or one
 *     config set KEY VALUE change a runtime setting on every node
 *     timeline start FILE  every node writes a Chrome-trace timeline (%r in FILE: the
 *                          node's rank); timeline stop closes the files
 *
 * It speaks the same protocol as the trainers (one ClientMsg frame per request over a
 * ZeroMQ DEALER, hello with role CONTROL) through the client library's internal request
 * path, so it shares the library's handshake, timeouts and daemon-death detection; it
 * links the static library, where those functions are visible. --json prints exactly one
 * JSON object per command, errors included: {"error": TEXT, "status": "SC_ERR_..."}
 * on stdout. Exit status: 0 success, 1 the daemon failed or could not be
 * reached, 2 usage error.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "rundir.h"

#define EXIT_DAEMON	   1
#define EXIT_USAGE	   2
#define DEFAULT_TIMEOUT_MS 5000

struct ctl {
	const char *socket;
	int timeout_ms;
	int json;
	int reset;
	sc_client_t *client;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sparsectl [--socket PATH] [--timeout-ms N] [--json] COMMAND [ARGS]\n"
		"\n"
		"Inspect and tune the node's sparsecommd.\n"
		"\n"
		"commands:\n"
		"  status                rank, world size, peers and the node's trainers\n"
		"  stats [--reset]       per tensor: calls, bytes sent/received, time, last "
		"scheme,\n"
		"                        predicted/measured time, of it inside exchanges,\n"
		"                        density, densification, imbalance; kept after the\n"
		"                        trainers leave until --reset (prints, then zeroes)\n"
		"  pending               tensors waiting, with the ranks that have not "
		"submitted them\n"
		"  config get [KEY]      show every setting, or KEY\n"
		"  config set KEY VALUE  change a runtime setting (applied on every node)\n"
		"  timeline start FILE   every node writes a Chrome-trace timeline (chrome://"
		"tracing,\n"
		"                        Perfetto) to FILE, %%r in it the node's rank (without "
		"it,\n"
		"                        node 0 writes FILE, the others FILE.<rank>.json)\n"
		"  timeline stop         close the timelines (the setting timeline_file)\n"
		"\n"
		"options:\n"
		"  --socket PATH         the daemon's control socket (a path or a ZeroMQ "
		"endpoint);\n"
		"                        default $SPARSECOMM_SOCKET, else ctl.sock in your\n"
		"                        own daemon's default runtime directory when it\n"
		"                        exists, else /run/sparsecomm/ctl.sock\n"
		"  --timeout-ms N        how long to wait for the daemon (default %d)\n"
		"  --json                print one JSON object (errors too: \"error\", "
		"\"status\")\n"
		"  -h, --help            this text\n"
		"\n"
		"exit status: 0 success, 1 daemon error or unreachable, 2 usage error\n",
		DEFAULT_TIMEOUT_MS);
}

/* ---- JSON output --------------------------------------------------------------------- */

static void json_str(const char *s)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		switch (*p) {
		case '"':
			fputs("\\\"", stdout);
			break;
		case '\\':
			fputs("\\\\", stdout);
			break;
		case '\n':
			fputs("\\n", stdout);
			break;
		case '\r':
			fputs("\\r", stdout);
			break;
		case '\t':
			fputs("\\t", stdout);
			break;
		default:
			if (*p < 0x20)
				printf("\\u%04x", *p);
			else
				putchar(*p);
		}
	}
	putchar('"');
}

/* A double as JSON (which has no NaN or infinity). */
static void json_num(double v)
{
	if (v != v || v > 1e308 || v < -1e308)
		fputs("null", stdout);
	else
		printf("%.9g", v);
}

static void json_int_array(const int32_t *v, size_t n)
{
	putchar('[');
	for (size_t i = 0; i < n; i++)
		printf("%s%d", i ? "," : "", v[i]);
	putchar(']');
}

static void json_str_array(char *const *v, size_t n)
{
	putchar('[');
	for (size_t i = 0; i < n; i++) {
		if (i)
			putchar(',');
		json_str(v[i]);
	}
	putchar(']');
}

/* ---- errors ------------------------------------------------------------------------- */

/* Reports an error: "sparsectl: TEXT" on stderr, or with --json one object
 * {"error": TEXT, "status": NAME} on stdout. */
static void ctl_error(int json, sc_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ctl_error(int json, sc_status_t st, const char *fmt, ...)
{
	char text[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (!json) {
		fprintf(stderr, "sparsectl: %s\n", text);
		return;
	}
	fputs("{\"error\":", stdout);
	json_str(text);
	fputs(",\"status\":", stdout);
	json_str(sc_status_name(st));
	fputs("}\n", stdout);
}

/* ---- talking to the daemon ----------------------------------------------------------- */

/* Sends one request and returns the reply, checking its kind; NULL after printing why. */
static Sparsecomm__DaemonMsg *ctl_call(struct ctl *ctl, Sparsecomm__ClientMsg *msg,
				       const char *what, Sparsecomm__DaemonMsg__BodyCase want)
{
	Sparsecomm__DaemonMsg *reply = NULL;
	sc_status_t st;

	if (!ctl->client) {
		st = scl_client_open(ctl->socket, ctl->timeout_ms,
				     SPARSECOMM__ROLE__ROLE_CONTROL, &ctl->client);
		if (st != SC_OK) {
			ctl_error(ctl->json, st, "%s", sc_last_error());
			return NULL;
		}
	}
	/* The daemon's error messages name the request themselves; ours do not. */
	st = scl_client_call(ctl->client, msg, ctl->timeout_ms, "", &reply);
	if (st != SC_OK) {
		if (st == SC_ERR_TIMEOUT || st == SC_ERR_CONNECT)
			ctl_error(ctl->json, st, "%s: %s", what, sc_last_error());
		else
			ctl_error(ctl->json, st, "%s", sc_last_error());
		return NULL;
	}
	if (reply->body_case != want) {
		ctl_error(ctl->json, SC_ERR_PROTOCOL,
			  "%s: unexpected reply from the daemon (body %d)", what,
			  (int)reply->body_case);
		sparsecomm__daemon_msg__free_unpacked(reply, NULL);
		return NULL;
	}
	return reply;
}

/* ---- status -------------------------------------------------------------------------- */

/* A peer's state as status shows it. */
static const char *peer_state(Sparsecomm__PeerState st)
{
	switch (st) {
	case SPARSECOMM__PEER_STATE__PEER_CONNECTED:
		return "connected";
	case SPARSECOMM__PEER_STATE__PEER_LOST:
		return "lost";
	case SPARSECOMM__PEER_STATE__PEER_LEFT:
		return "left";
	default:
		return "?";
	}
}

static void status_json(const Sparsecomm__StatusReply *s)
{
	printf("{\"rank\":%d,\"world_size\":%d,\"local_size\":%d,\"protocol_version\":%u,"
	       "\"version\":",
	       s->rank, s->world_size, s->local_size, s->protocol_version);
	json_str(s->version);
	printf(",\"uptime_ms\":%llu,\"coordinator\":", (unsigned long long)s->uptime_ms);
	json_str(s->coordinator);
	fputs(",\"gpu\":", stdout);
	json_str(s->gpu);
	printf(",\"gpu_bytes\":%llu,\"gpu_lost\":%s", (unsigned long long)s->gpu_bytes,
	       s->gpu_lost ? "true" : "false");
	fputs(",\"peers\":[", stdout);
	for (size_t i = 0; i < s->n_peers; i++) {
		const Sparsecomm__PeerInfo *p = s->peers[i];

		printf("%s{\"rank\":%d,\"addr\":", i ? "," : "", p->rank);
		json_str(p->addr);
		printf(",\"port\":%u,\"connected\":%s,\"state\":\"%s\",\"heard_ms_ago\":%lld,"
		       "\"pipe\":%s,\"reason\":",
		       p->port, p->connected ? "true" : "false", peer_state(p->state),
		       (long long)p->heard_ms_ago, p->pipe ? "true" : "false");
		json_str(p->reason);
		fputs("}", stdout);
	}
	fputs("],\"clients\":[", stdout);
	for (size_t i = 0; i < s->n_clients; i++) {
		const Sparsecomm__ClientInfo *c = s->clients[i];

		printf("%s{\"local_rank\":%d,\"rank\":%d,\"pid\":%d,\"tensors\":%u,"
		       "\"in_flight\":%u,\"submit_channel\":%s,\"submit_requests\":%llu,"
		       "\"submit_batches\":%llu}",
		       i ? "," : "", c->local_rank, c->rank, c->pid, c->tensors, c->in_flight,
		       c->submit_channel ? "true" : "false",
		       (unsigned long long)c->submit_requests,
		       (unsigned long long)c->submit_batches);
	}
	fputs("]}\n", stdout);
}

static void status_text(const Sparsecomm__StatusReply *s)
{
	printf("node rank %d of %d, %d trainer(s) per node\n", s->rank, s->world_size,
	       s->local_size);
	printf("daemon %s, protocol %u, up %.1f s, coordinator %s\n",
	       *s->version ? s->version : "?", s->protocol_version, s->uptime_ms / 1000.0,
	       *s->coordinator ? s->coordinator : "-");
	printf("gpu %s, %.1f MiB held by cuda tensors\n", *s->gpu ? s->gpu : "-",
	       s->gpu_bytes / 1048576.0);
	printf("\npeers (%zu):\n", s->n_peers);
	if (s->n_peers)
		printf("  %-6s %-24s %-6s %-10s %-10s %-10s %-5s %s\n", "RANK", "ADDRESS",
		       "PORT", "CONNECTED", "STATE", "HEARD", "PIPE", "REASON");
	for (size_t i = 0; i < s->n_peers; i++) {
		const Sparsecomm__PeerInfo *p = s->peers[i];
		char heard[32] = "-";
		if (p->heard_ms_ago >= 0)
			snprintf(heard, sizeof(heard), "%lld ms", (long long)p->heard_ms_ago);
		printf("  %-6d %-24s %-6u %-10s %-10s %-10s %-5s %s\n", p->rank, p->addr,
		       p->port, p->connected ? "yes" : "no", peer_state(p->state), heard,
		       p->pipe ? "up" : "-", p->reason && *p->reason ? p->reason : "-");
	}
	printf("\nclients (%zu):\n", s->n_clients);
	if (s->n_clients)
		printf("  %-6s %-6s %-8s %-8s %s\n", "LOCAL", "RANK", "PID", "TENSORS",
		       "IN-FLIGHT");
	for (size_t i = 0; i < s->n_clients; i++) {
		const Sparsecomm__ClientInfo *c = s->clients[i];

		printf("  %-6d %-6d %-8d %-8u %u\n", c->local_rank, c->rank, c->pid, c->tensors,
		       c->in_flight);
	}
}

static int cmd_status(struct ctl *ctl)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__Empty empty = SPARSECOMM__EMPTY__INIT;
	Sparsecomm__DaemonMsg *r;

	msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_STATUS;
	msg.status = &empty;
	r = ctl_call(ctl, &msg, "status", SPARSECOMM__DAEMON_MSG__BODY_STATUS);
	if (!r)
		return EXIT_DAEMON;
	if (ctl->json)
		status_json(r->status);
	else
		status_text(r->status);
	sparsecomm__daemon_msg__free_unpacked(r, NULL);
	return 0;
}

/* ---- stats --------------------------------------------------------------------------- */

static void stats_json(const Sparsecomm__StatsReply *s, int reset)
{
	printf("{\"cycles\":%llu,\"fused_buffers\":%llu,\"cache_entries\":%llu,"
	       "\"cache_reannounced\":%llu,\"fast_epochs\":%llu,\"fast_kept\":%llu,"
	       "\"fast_discarded\":%llu,\"ready_lists\":%llu,\"announcements_kept\":%llu,"
	       "\"reset\":%s,\"tensors\":[",
	       (unsigned long long)s->cycles, (unsigned long long)s->fused_buffers,
	       (unsigned long long)s->cache_entries, (unsigned long long)s->cache_reannounced,
	       (unsigned long long)s->fast_epochs, (unsigned long long)s->fast_kept,
	       (unsigned long long)s->fast_discarded, (unsigned long long)s->ready_lists,
	       (unsigned long long)s->announcements_kept, reset ? "true" : "false");
	for (size_t i = 0; i < s->n_tensors; i++) {
		const Sparsecomm__TensorStats *t = s->tensors[i];

		printf("%s{\"name\":", i ? "," : "");
		json_str(t->name);
		printf(",\"process_set\":%u,\"dtype\":", t->process_set);
		json_str(sc_dtype_name((sc_dtype_t)t->dtype));
		printf(",\"device\":");
		json_str(*t->device ? t->device : "cpu");
		fputs(",\"wire\":", stdout);
		json_str(*t->wire ? t->wire : "native");
		printf(",\"numel\":%llu,\"calls\":%llu,\"errors\":%llu,\"nonfinite\":%llu,"
		       "\"bytes_sent\":%llu,\"bytes_received\":%llu,\"time_s\":",
		       (unsigned long long)t->numel, (unsigned long long)t->calls,
		       (unsigned long long)t->errors, (unsigned long long)t->nonfinite,
		       (unsigned long long)t->bytes_sent,
		       (unsigned long long)t->bytes_received);
		json_num(t->time_s);
		if (*t->scheme) {
			fputs(",\"scheme\":", stdout);
			json_str(t->scheme);
			fputs(",\"transport\":", stdout);
			json_str(t->transport);
			fputs(",\"predicted_s\":", stdout);
			json_num(t->predicted_s);
			fputs(",\"measured_s\":", stdout);
			json_num(t->measured_s);
			fputs(",\"density\":", stdout);
			json_num(t->density);
			fputs(",\"densification\":", stdout);
			json_num(t->densification);
			fputs(",\"imbalance\":", stdout);
			json_num(t->imbalance);
			fputs(",\"exchange_s\":", stdout);
			json_num(t->exchange_s);
			fputs(",\"cpu_s\":", stdout);
			json_num(t->cpu_s);
		}
		putchar('}');
	}
	fputs("],\"fusion\":{\"mode\":", stdout);
	json_str(s->fusion_mode);
	printf(",\"plan_version\":%llu,\"buffers\":[",
	       (unsigned long long)s->fusion_plan_version);
	for (size_t i = 0; i < s->n_fusion_buffers; i++) {
		const Sparsecomm__FusionBufferStats *b = s->fusion_buffers[i];

		printf("%s{\"tcm_s\":", i ? "," : "");
		json_num(b->tcm_s);
		fputs(",\"tcp_s\":", stdout);
		json_num(b->tcp_s);
		fputs(",\"tensors\":", stdout);
		json_str_array(b->tensors, b->n_tensors);
		putchar('}');
	}
	fputs("]}}\n", stdout);
}

/* The fusion plan: its version, then a line per buffer (its measured times, its tensors). */
static void fusion_text(const Sparsecomm__StatsReply *s)
{
	printf("fusion %s, plan version %llu, %zu buffer(s)\n", s->fusion_mode,
	       (unsigned long long)s->fusion_plan_version, s->n_fusion_buffers);
	for (size_t i = 0; i < s->n_fusion_buffers; i++) {
		const Sparsecomm__FusionBufferStats *b = s->fusion_buffers[i];

		printf("  buffer %zu: T_cm %.3f ms, T_cp %.3f ms, %zu tensor(s):", i,
		       b->tcm_s * 1e3, b->tcp_s * 1e3, b->n_tensors);
		for (size_t k = 0; k < b->n_tensors; k++)
			printf(" %s", b->tensors[k]);
		putchar('\n');
	}
}

/* Bytes with a binary unit, in a static buffer of the caller's choice. */
/* A tensor's name in a table: "w", or "w [ps 2]" for one of process set 2. */
static void tensor_label(char *buf, size_t n, const char *name, uint32_t pset)
{
	if (pset)
		snprintf(buf, n, "%s [ps %u]", name, pset);
	else
		snprintf(buf, n, "%s", name);
}

static const char *human_bytes(char *buf, size_t n, uint64_t b)
{
	static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int u = 0;

	while (v >= 1024.0 && u < 4) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
	return buf;
}

static void stats_text(const Sparsecomm__StatsReply *s)
{
	char sent[32], recv[32];

	printf("%llu cycle(s), %llu fused buffer(s), %zu tensor(s), %llu cache entries (%llu "
	       "announced again after an eviction)\n",
	       (unsigned long long)s->cycles, (unsigned long long)s->fused_buffers,
	       s->n_tensors, (unsigned long long)s->cache_entries,
	       (unsigned long long)s->cache_reannounced);
	if (s->fast_epochs)
		printf("fast mode: %llu epoch(s), %llu turn(s) kept, %llu discarded\n",
		       (unsigned long long)s->fast_epochs, (unsigned long long)s->fast_kept,
		       (unsigned long long)s->fast_discarded);
	if (s->announcements_kept)
		printf("%llu announcement message(s) sent, %llu announcement(s) kept back for "
		       "their planned buffer\n",
		       (unsigned long long)s->ready_lists,
		       (unsigned long long)s->announcements_kept);
	fusion_text(s);
	if (!s->n_tensors)
		return;
	printf("%-32s %-7s %-4s %-6s %8s %6s %9s %11s %11s %10s  %-18s %10s %10s %10s %9s %8s "
	       "%8s %6s\n",
	       "TENSOR", "DEVICE", "VIA", "WIRE", "CALLS", "ERRORS", "NONFINITE", "SENT",
	       "RECEIVED", "TIME(s)", "SCHEME", "PRED(ms)", "MEAS(ms)", "XCHG(ms)", "CPU(ms)",
	       "DENSITY", "DENSIF", "IMBAL");
	for (size_t i = 0; i < s->n_tensors; i++) {
		const Sparsecomm__TensorStats *t = s->tensors[i];
		char name[300];
		tensor_label(name, sizeof(name), t->name, t->process_set);

		printf("%-32s %-7s %-4s %-6s %8llu %6llu %9llu %11s %11s %10.4f", name,
		       *t->device ? t->device : "cpu", *t->transport ? t->transport : "-",
		       *t->wire ? t->wire : "native", (unsigned long long)t->calls,
		       (unsigned long long)t->errors, (unsigned long long)t->nonfinite,
		       human_bytes(sent, sizeof(sent), t->bytes_sent),
		       human_bytes(recv, sizeof(recv), t->bytes_received), t->time_s);
		if (*t->scheme)
			printf("  %-18s %10.3f %10.3f %10.3f %9.3f %8.4f %8.3f %6.2f\n",
			       t->scheme, t->predicted_s * 1e3, t->measured_s * 1e3,
			       t->exchange_s * 1e3, t->cpu_s * 1e3, t->density,
			       t->densification, t->imbalance);
		else
			printf("  %-18s\n", "-");
	}
}

static int cmd_stats(struct ctl *ctl)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__Empty empty = SPARSECOMM__EMPTY__INIT;
	Sparsecomm__DaemonMsg *r;

	if (ctl->reset) {
		msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_STATS_RESET;
		msg.stats_reset = &empty;
	} else {
		msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_STATS;
		msg.stats = &empty;
	}
	r = ctl_call(ctl, &msg, ctl->reset ? "stats --reset" : "stats",
		     SPARSECOMM__DAEMON_MSG__BODY_STATS);
	if (!r)
		return EXIT_DAEMON;
	if (ctl->json) {
		stats_json(r->stats, ctl->reset);
	} else {
		stats_text(r->stats);
		if (ctl->reset)
			printf("statistics reset on this node\n");
	}
	sparsecomm__daemon_msg__free_unpacked(r, NULL);
	return 0;
}

/* ---- pending ------------------------------------------------------------------------- */

/* "0,2,5" (or "-") into buf, truncated with "..." when it does not fit. */
static const char *rank_list(char *buf, size_t n, const int32_t *v, size_t count)
{
	size_t len = 0;

	snprintf(buf, n, "-");
	for (size_t i = 0; i < count; i++) {
		int w = snprintf(buf + len, n - len, "%s%d", i ? "," : "", v[i]);

		if (w < 0 || (size_t)w >= n - len) {
			snprintf(buf + (n > 4 ? n - 4 : 0), n > 4 ? 4 : n, "...");
			break;
		}
		len += (size_t)w;
	}
	return buf;
}

static int cmd_pending(struct ctl *ctl)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__Empty empty = SPARSECOMM__EMPTY__INIT;
	Sparsecomm__DaemonMsg *r;
	Sparsecomm__PendingReply *p;
	char ready[256], missing[256];

	msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_PENDING;
	msg.pending = &empty;
	r = ctl_call(ctl, &msg, "pending", SPARSECOMM__DAEMON_MSG__BODY_PENDING);
	if (!r)
		return EXIT_DAEMON;
	p = r->pending;
	if (ctl->json) {
		fputs("{\"tensors\":[", stdout);
		for (size_t i = 0; i < p->n_tensors; i++) {
			const Sparsecomm__PendingTensor *t = p->tensors[i];

			printf("%s{\"name\":", i ? "," : "");
			json_str(t->name);
			printf(",\"process_set\":%u", t->process_set);
			fputs(",\"waiting_s\":", stdout);
			json_num(t->waiting_s);
			fputs(",\"ready_ranks\":", stdout);
			json_int_array(t->ready_ranks, t->n_ready_ranks);
			fputs(",\"missing_ranks\":", stdout);
			json_int_array(t->missing_ranks, t->n_missing_ranks);
			putchar('}');
		}
		fputs("]}\n", stdout);
	} else if (!p->n_tensors) {
		printf("no tensor is waiting\n");
	} else {
		printf("%-40s %10s  %-20s %s\n", "TENSOR", "WAITING(s)", "READY", "MISSING");
		for (size_t i = 0; i < p->n_tensors; i++) {
			const Sparsecomm__PendingTensor *t = p->tensors[i];
			char name[300];
			tensor_label(name, sizeof(name), t->name, t->process_set);

			printf(
			    "%-40s %10.3f  %-20s %s\n", name, t->waiting_s,
			    rank_list(ready, sizeof(ready), t->ready_ranks, t->n_ready_ranks),
			    rank_list(missing, sizeof(missing), t->missing_ranks,
				      t->n_missing_ranks));
		}
	}
	sparsecomm__daemon_msg__free_unpacked(r, NULL);
	return 0;
}

/* ---- config -------------------------------------------------------------------------- */

static void config_print(const Sparsecomm__ConfigReply *cr, int json, int one)
{
	if (json) {
		fputs("{\"config\":[", stdout);
		for (size_t i = 0; i < cr->n_entries; i++) {
			const Sparsecomm__ConfigEntry *e = cr->entries[i];

			printf("%s{\"key\":", i ? "," : "");
			json_str(e->key);
			fputs(",\"value\":", stdout);
			json_str(e->value);
			fputs(",\"source\":", stdout);
			json_str(e->source);
			printf(",\"runtime\":%s,\"doc\":", e->runtime ? "true" : "false");
			json_str(e->doc);
			putchar('}');
		}
		fputs("]}\n", stdout);
		return;
	}
	for (size_t i = 0; i < cr->n_entries; i++) {
		const Sparsecomm__ConfigEntry *e = cr->entries[i];

		if (!one && *e->doc)
			printf("# %s\n", e->doc);
		printf("%s = %s    (from %s%s)\n", e->key, e->value,
		       *e->source ? e->source : "?",
		       e->runtime ? ", changeable at runtime" : "");
	}
}

/* Sets a runtime setting on every node (checked by the daemon, then by the coordinator).
 * A relative timeline_file (timeline start FILE, or config set) is made absolute here:
 * the daemons do not share this command's directory. */
static int config_set(struct ctl *ctl, const char *key, const char *value)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__ConfigSet set = SPARSECOMM__CONFIG_SET__INIT;
	char what[256], cwd[4096], path[8192];
	if (!strcmp(key, "timeline_file") && value[0] && value[0] != '/') {
		if (!getcwd(cwd, sizeof(cwd))) {
			ctl_error(ctl->json, SC_ERR_SYSTEM,
				  "timeline file %s: the current directory is unknown (%s); "
				  "give an absolute path",
				  value, strerror(errno));
			return EXIT_USAGE;
		}
		snprintf(path, sizeof(path), "%s/%s", cwd, value);
		value = path;
	}
	set.key = (char *)key;
	set.value = (char *)value;
	msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_CONFIG_SET;
	msg.config_set = &set;
	snprintf(what, sizeof(what), "config set %.100s %.100s", set.key, set.value);
	Sparsecomm__DaemonMsg *r = ctl_call(ctl, &msg, what, SPARSECOMM__DAEMON_MSG__BODY_OK);
	if (!r)
		return EXIT_DAEMON;
	if (ctl->json) {
		fputs("{\"ok\":true,\"key\":", stdout);
		json_str(set.key);
		fputs(",\"value\":", stdout);
		json_str(set.value);
		fputs("}\n", stdout);
	} else {
		printf("%s = %s (checked, then applied on every node)\n", set.key, set.value);
	}
	sparsecomm__daemon_msg__free_unpacked(r, NULL);
	return 0;
}

static int cmd_config(struct ctl *ctl, int argc, char **argv)
{
	Sparsecomm__ClientMsg msg = SPARSECOMM__CLIENT_MSG__INIT;
	Sparsecomm__ConfigGet get = SPARSECOMM__CONFIG_GET__INIT;
	Sparsecomm__DaemonMsg *r;
	char what[256];

	if (argc >= 1 && strcmp(argv[0], "get") == 0 && argc <= 2) {
		get.key = argc == 2 ? argv[1] : "";
		msg.body_case = SPARSECOMM__CLIENT_MSG__BODY_CONFIG_GET;
		msg.config_get = &get;
		snprintf(what, sizeof(what), "config get%s%.200s", argc == 2 ? " " : "",
			 get.key);
		r = ctl_call(ctl, &msg, what, SPARSECOMM__DAEMON_MSG__BODY_CONFIG);
		if (!r)
			return EXIT_DAEMON;
		config_print(r->config, ctl->json, argc == 2);
		sparsecomm__daemon_msg__free_unpacked(r, NULL);
		return 0;
	}
	if (argc == 3 && strcmp(argv[0], "set") == 0)
		return config_set(ctl, argv[1], argv[2]);
	ctl_error(ctl->json, SC_ERR_INVALID, "usage: config get [KEY] | config set KEY VALUE");
	return EXIT_USAGE;
}

/* ---- timeline ------------------------------------------------------------------------ */

/* timeline start FILE | stop: the setting timeline_file on every node (config_set makes
 * a relative FILE absolute). */
static int cmd_timeline(struct ctl *ctl, int argc, char **argv)
{
	if (argc == 1 && strcmp(argv[0], "stop") == 0)
		return config_set(ctl, "timeline_file", "");
	if (argc != 2 || strcmp(argv[0], "start") != 0 || !argv[1][0]) {
		ctl_error(ctl->json, SC_ERR_INVALID,
			  "usage: timeline start FILE | timeline stop");
		return EXIT_USAGE;
	}
	return config_set(ctl, "timeline_file", argv[1]);
}

/* ---- main ---------------------------------------------------------------------------- */

/* A missing IPC socket file is reported at once rather than after the whole timeout. */
/* The command line's shape, checked before the daemon is reached, so that a usage error
 * exits 2 with its usage line whether or not a daemon runs: NULL when args is a command
 * sparsectl has, with the right number of words, else what is wrong. */
static const char *command_shape_error(int nargs, char **args, char *buf, size_t len)
{
	const char *c = nargs ? args[0] : "";
	if (nargs == 0)
		return "no command (see sparsectl --help)";
	if (!strcmp(c, "status") || !strcmp(c, "stats") || !strcmp(c, "pending")) {
		if (nargs == 1)
			return NULL;
	} else if (!strcmp(c, "config")) {
		if ((nargs >= 2 && nargs <= 3 && !strcmp(args[1], "get")) ||
		    (nargs == 4 && !strcmp(args[1], "set")))
			return NULL;
		return "usage: config get [KEY] | config set KEY VALUE";
	} else if (!strcmp(c, "timeline")) {
		if ((nargs == 2 && !strcmp(args[1], "stop")) ||
		    (nargs == 3 && !strcmp(args[1], "start") && args[2][0]))
			return NULL;
		return "usage: timeline start FILE | timeline stop";
	}
	snprintf(buf, len,
		 "unknown command or wrong arguments: '%.100s' (see sparsectl --help)", c);
	return buf;
}

static int check_socket(const char *sock, int json)
{
	const char *path = strstr(sock, "://") ? NULL : sock;
	struct stat st;

	if (strncmp(sock, "ipc://", 6) == 0)
		path = sock + 6;
	if (path && stat(path, &st) < 0 && errno != EACCES) {
		ctl_error(json, SC_ERR_CONNECT,
			  "no daemon socket at %s (%s); is sparsecommd running?", path,
			  strerror(errno));
		return EXIT_DAEMON;
	}
	if (path && scl_probe_socket(path) != SC_OK) {
		ctl_error(json, SC_ERR_CONNECT, "%s", sc_last_error());
		return EXIT_DAEMON;
	}
	return 0;
}

/* Takes the value of an option given as "--opt VALUE" or "--opt=VALUE". */
static const char *opt_value(const char *opt, int argc, char **argv, int *i)
{
	size_t n = strlen(opt);
	const char *a = argv[*i];

	if (strncmp(a, opt, n) != 0)
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		fprintf(stderr, "sparsectl: %s needs a value\n", opt);
		exit(EXIT_USAGE);
	}
	return argv[++*i];
}

int main(int argc, char **argv)
{
	struct ctl ctl = {.timeout_ms = DEFAULT_TIMEOUT_MS};
	char **args = calloc((size_t)argc + 1, sizeof(*args));
	int nargs = 0, rc;
	const char *v;
	char fallback[PATH_MAX + 16];

	if (!args)
		return EXIT_DAEMON;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			free(args);
			return 0;
		} else if (strcmp(a, "--json") == 0) {
			ctl.json = 1;
		} else if (strcmp(a, "--reset") == 0) {
			ctl.reset = 1;
		} else if ((v = opt_value("--socket", argc, argv, &i))) {
			ctl.socket = v;
		} else if ((v = opt_value("--timeout-ms", argc, argv, &i))) {
			char *end;
			long t = strtol(v, &end, 10);

			if (*end || end == v || t <= 0 || t > 86400000) {
				fprintf(stderr,
					"sparsectl: --timeout-ms takes a positive number "
					"of milliseconds, not '%s'\n",
					v);
				free(args);
				return EXIT_USAGE;
			}
			ctl.timeout_ms = (int)t;
		} else if (strcmp(a, "--") == 0) {
			while (++i < argc)
				args[nargs++] = argv[i];
		} else if (a[0] == '-' && a[1] == '-') {
			fprintf(stderr, "sparsectl: unknown option %s (see sparsectl --help)\n",
				a);
			free(args);
			return EXIT_USAGE;
		} else {
			args[nargs++] = argv[i];
		}
	}
	if (!ctl.socket)
		ctl.socket = sc_socket_default(fallback, sizeof(fallback));
	if (ctl.reset && (nargs != 1 || strcmp(args[0], "stats") != 0)) {
		ctl_error(ctl.json, SC_ERR_INVALID, "--reset goes with the stats command only");
		free(args);
		return EXIT_USAGE;
	}
	char why[192];
	const char *bad = command_shape_error(nargs, args, why, sizeof(why));
	if (bad) {
		if (nargs == 0 && !ctl.json)
			usage(stderr);
		else
			ctl_error(ctl.json, SC_ERR_INVALID, "%s", bad);
		free(args);
		return EXIT_USAGE;
	}
	if ((rc = check_socket(ctl.socket, ctl.json))) {
		free(args);
		return rc;
	}
	if (strcmp(args[0], "status") == 0 && nargs == 1) {
		rc = cmd_status(&ctl);
	} else if (strcmp(args[0], "stats") == 0 && nargs == 1) {
		rc = cmd_stats(&ctl);
	} else if (strcmp(args[0], "pending") == 0 && nargs == 1) {
		rc = cmd_pending(&ctl);
	} else if (strcmp(args[0], "config") == 0) {
		rc = cmd_config(&ctl, nargs - 1, args + 1);
	} else if (strcmp(args[0], "timeline") == 0) {
		rc = cmd_timeline(&ctl, nargs - 1, args + 1);
	} else {
		ctl_error(ctl.json, SC_ERR_INVALID,
			  "unknown command or wrong arguments: '%s' (see sparsectl --help)",
			  args[0]);
		rc = EXIT_USAGE;
	}
	sc_finalize(ctl.client);
	free(args);
	return rc;
}
