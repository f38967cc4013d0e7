/*
 * itest_metrics.c: the metrics endpoint (metrics_addr) scraped over a raw socket around
 * allreduces. Each trainer scrapes its own node's daemon, given as argv[1 + node rank]
 * (HOST:PORT, one per node), runs IT_METRICS_CALLS allreduces of one tensor and checks
 * that the tensor's counters grew by exactly that many calls and by the bytes (those of
 * the one-round sum of a 16 KiB buffer with its input check words, and those `sparsectl
 * stats` reports) and some seconds, that the schemes'
 * buffers grew by at least as many, and that the world shows formed with every peer up
 * (labelled by its host, no port) and the uptime in milliseconds. Other
 * paths answer 404, another method 405, a request over the bound 431, a connection past 16
 * silent ones 503.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "itest.h"

#define IT_METRICS_CALLS 5
#define IT_METRICS_NUMEL 4096
#define IT_METRICS_BYTES (1 << 20)

/* Sends request to host:port and returns the whole answer (malloc'd), bounded in time. */
static char *http(const char *hostport, const char *request, size_t request_len)
{
	char host[256], *colon;
	snprintf(host, sizeof(host), "%s", hostport);
	if (!(colon = strrchr(host, ':')))
		IT_FAIL("metrics address '%s' is not HOST:PORT", hostport);
	*colon = 0;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	int rc = getaddrinfo(host, colon + 1, &hints, &res);
	if (rc != 0)
		IT_FAIL("cannot resolve %s: %s", hostport, gai_strerror(rc));
	int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0)
		IT_FAIL("cannot connect to the metrics endpoint %s: %s", hostport,
			strerror(errno));
	freeaddrinfo(res);
	for (size_t off = 0; off < request_len;) {
		ssize_t w = send(fd, request + off, request_len - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break; /* the server may answer (431) before reading it all */
		off += (size_t)w;
	}
	char *buf = malloc(IT_METRICS_BYTES + 1);
	size_t len = 0;
	double deadline = it_now_s() + 10;
	while (len < IT_METRICS_BYTES) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = (int)((deadline - it_now_s()) * 1000);
		if (left <= 0 || poll(&p, 1, left) <= 0)
			IT_FAIL("the metrics endpoint %s did not answer within 10 s", hostport);
		ssize_t n = recv(fd, buf + len, IT_METRICS_BYTES - len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == ECONNRESET && len > 0)
			break;
		if (n < 0)
			IT_FAIL("reading %s: %s", hostport, strerror(errno));
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = 0;
	return buf;
}

/* A connection to host:port that sends nothing. */
static int open_idle(const char *hostport)
{
	char host[256], *colon;
	snprintf(host, sizeof(host), "%s", hostport);
	colon = strrchr(host, ':');
	*colon = 0;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
		IT_FAIL("cannot resolve %s", hostport);
	int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0)
		IT_FAIL("cannot connect to %s: %s", hostport, strerror(errno));
	freeaddrinfo(res);
	return fd;
}

char *it_metrics_scrape(const char *hostport)
{
	const char req[] = "GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n";
	char *a = http(hostport, req, sizeof(req) - 1);
	if (strncmp(a, "HTTP/1.1 200 ", 13) || !strstr(a, "text/plain; version=0.0.4"))
		IT_FAIL("GET /metrics answered: %.200s", a);
	return a;
}

/* The value of the sample "NAME" or "NAME{LABELS}" (exactly), or -1 when absent. */
static double sample(const char *text, const char *series)
{
	size_t n = strlen(series);
	for (const char *p = text; (p = strstr(p, series)) != NULL; p += n) {
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	}
	return -1;
}

/* The sum of every sample of a family. */
static double family_sum(const char *text, const char *name)
{
	double sum = 0;
	size_t n = strlen(name);
	for (const char *p = text; (p = strstr(p, name)) != NULL; p += n) {
		if ((p == text || p[-1] == '\n') && (p[n] == '{' || p[n] == ' ')) {
			const char *sp = strchr(p, ' ');
			if (sp)
				sum += strtod(sp + 1, NULL);
		}
	}
	return sum;
}

/* Fails when a peer_up sample's addr label carries a port (it changes at each re-form) or
 * the uptime is not printed in whole milliseconds. */
static void check_labels(const char *text)
{
	const char fam[] = "\nsparsecomm_peer_up{", up[] = "\nsparsecomm_uptime_seconds ";
	for (const char *p = text; (p = strstr(p, fam)) != NULL; p += sizeof(fam) - 1) {
		const char *a = strstr(p, "addr=\""), *end = a ? strchr(a + 6, '"') : NULL;
		if (!end)
			IT_FAIL("a peer_up sample has no addr label: %.80s", p + 1);
		const char *colon = memchr(a + 6, ':', (size_t)(end - a - 6));
		if (colon && (a[6] == '[' || !strchr(colon + 1, ':')))
			IT_FAIL("peer_up's addr label carries a port: %.*s", (int)(end - a + 1),
				a);
	}
	const char *u = strstr(text, up);
	if (!u)
		IT_FAIL("no sparsecomm_uptime_seconds sample");
	u += sizeof(up) - 1;
	size_t whole = strspn(u, "0123456789");
	if (!whole || u[whole] != '.' || strspn(u + whole + 1, "0123456789") != 3 ||
	    u[whole + 4] != '\n')
		IT_FAIL("uptime printed as '%.30s', not seconds with 3 decimals", u);
}

static void expect_status(const char *hostport, const char *req, size_t len, const char *code)
{
	char *a = http(hostport, req, len);
	if (strncmp(a, "HTTP/1.1 ", 9) || strncmp(a + 9, code, 3))
		IT_FAIL("'%.30s...' answered %.60s, not %s", req, a, code);
	free(a);
}

int it_metrics(int argc, char **argv)
{
	sc_client_t *c = it_connect();
	int node = sc_rank(c) / sc_local_size(c), nodes = sc_size(c) / sc_local_size(c);
	if (argc < 1 + nodes)
		IT_FAIL("give one metrics HOST:PORT per node (%d nodes, %d given)", nodes,
			argc - 1);
	const char *where = argv[1 + node];
	it_sparsectl_find();
	const char *sock = it_env.socket;
	char name[64], series[160];
	snprintf(name, sizeof(name), "metrics.t");

	char *before = it_metrics_scrape(where);
	snprintf(series, sizeof(series),
		 "sparsecomm_tensor_calls_total{tensor=\"%s\",process_set=\"0\"}", name);
	double calls0 = sample(before, series);
	if (calls0 > 0)
		IT_FAIL("%s is %g before any call", series, calls0);
	double buffers0 = family_sum(before, "sparsecomm_scheme_buffers_total");
	double sent_all0 = family_sum(before, "sparsecomm_scheme_bytes_sent_total");
	double kept0 = it_node_stat("fast_kept");

	sc_tensor_t *t = it_register(c, name, SC_FLOAT32, IT_METRICS_NUMEL);
	for (int k = 0; k < IT_METRICS_CALLS; k++) {
		it_fill(sc_tensor_data(t), SC_FLOAT32, IT_METRICS_NUMEL, (uint64_t)k,
			it_env.rank, 1);
		sc_handle_t h = 0;
		IT_CHECK_SC(sc_allreduce_async(c, t, SC_OP_SUM, &h), "allreduce %d", k);
		int r = it_wait(c, h, IT_OP_TIMEOUT_MS);
		if (r != SC_OK)
			IT_FAIL("allreduce %d: %s (%s)", k, it_wait_name(r), it_wait_error());
	}
	char *after = it_metrics_scrape(where);
	double calls = sample(after, series);
	if (calls != IT_METRICS_CALLS)
		IT_FAIL("%s is %g after %d calls", series, calls, IT_METRICS_CALLS);
	snprintf(series, sizeof(series),
		 "sparsecomm_tensor_errors_total{tensor=\"%s\",process_set=\"0\"}", name);
	if (sample(after, series) != 0)
		IT_FAIL("%s is %g", series, sample(after, series));
	snprintf(series, sizeof(series),
		 "sparsecomm_tensor_bytes_sent_total{tensor=\"%s\",process_set=\"0\"}", name);
	double sent = sample(after, series),
	       ctl_sent = it_stats_number(sock, name, "bytes_sent");
	if (nodes > 1 && !(sent > 0))
		IT_FAIL("%s is %g after %d calls between %d nodes", series, sent,
			IT_METRICS_CALLS, nodes);
	if (sent != ctl_sent)
		IT_FAIL("%s is %g, sparsectl stats says %g", series, sent, ctl_sent);
	/* a dense float32 tensor of 16 KiB is summed in one round: each node sends every
	 * other node its buffer behind the 16 bytes of its input check words
	 * (docs/design.md, "One step of a fused buffer", step 7) */
	/* ... and a kept fast turn 32 bytes more, its fast words (docs/design.md, "Fast
	 * turns"); a discarded turn is not counted (it is planned again) */
	double kept = it_node_stat("fast_kept") - kept0;
	double one_round =
	    (double)IT_METRICS_CALLS * (nodes - 1) * (IT_METRICS_NUMEL * 4.0 + 16) +
	    kept * (nodes - 1) * 32.0;
	if (nodes > 1 && sent != one_round)
		IT_FAIL("%s is %g; %d one-round allreduces of %d float32 over %d nodes, %g of "
			"them kept fast turns, send %g",
			series, sent, IT_METRICS_CALLS, IT_METRICS_NUMEL, nodes, kept,
			one_round);
	snprintf(series, sizeof(series),
		 "sparsecomm_tensor_seconds_total{tensor=\"%s\",process_set=\"0\"}", name);
	if (!(sample(after, series) > 0))
		IT_FAIL("%s is %g", series, sample(after, series));
	double buffers = family_sum(after, "sparsecomm_scheme_buffers_total") - buffers0;
	double sent_all = family_sum(after, "sparsecomm_scheme_bytes_sent_total") - sent_all0;
	if (buffers < IT_METRICS_CALLS)
		IT_FAIL("the schemes ran %g buffers for %d calls", buffers, IT_METRICS_CALLS);
	if (sent_all + 0.5 < sent)
		IT_FAIL("the schemes sent %g bytes, less than the tensor's %g", sent_all, sent);
	if (sample(after, "sparsecomm_world_formed") != 1 ||
	    sample(after, "sparsecomm_world_size") != nodes ||
	    sample(after, "sparsecomm_rank") != node)
		IT_FAIL("world: formed %g, size %g, rank %g (want 1, %d, %d)",
			sample(after, "sparsecomm_world_formed"),
			sample(after, "sparsecomm_world_size"),
			sample(after, "sparsecomm_rank"), nodes, node);
	check_labels(after);
	if (family_sum(after, "sparsecomm_peer_up") != nodes)
		IT_FAIL("%g of %d peers up", family_sum(after, "sparsecomm_peer_up"), nodes);
	it_log("%s: %d calls, %g bytes sent, %g buffers, world of %d formed", where,
	       IT_METRICS_CALLS, sent, buffers, nodes);

	const char nf[] = "GET /nope HTTP/1.1\r\n\r\n",
		   post[] = "POST /metrics HTTP/1.1\r\n\r\n";
	expect_status(where, nf, sizeof(nf) - 1, "404");
	expect_status(where, post, sizeof(post) - 1, "405");
	size_t big = 2 * 8192;
	char *huge = malloc(big);
	memset(huge, 'a', big);
	memcpy(huge, "GET /metrics HTTP/1.1\r\nX: ", 26);
	expect_status(where, huge, big, "431");
	free(huge);
	/* connections past the limit (16 open, silent) answer 503 at once */
	int idle[16];
	for (int i = 0; i < 16; i++)
		idle[i] = open_idle(where);
	it_sleep_ms(200); /* the daemon accepts them in order */
	expect_status(where, nf, sizeof(nf) - 1, "503");
	for (int i = 0; i < 16; i++)
		close(idle[i]);
	free(before);
	free(after);
	it_barrier(c, "metrics.done", 0);
	sc_finalize(c);
	it_pass();
}
