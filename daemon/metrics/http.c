/*
 * http.c: the metrics endpoint's HTTP server (see http.h).
 */
#include "metrics/http.h"

#include <stdlib.h>
#include <string.h>

typedef struct conn {
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_write_t wr;
	struct scd_http *srv;
	struct conn *next, **pprev;
	int open_handles; /* freed when both handles have closed */
	int closing;
	size_t len;
	char *resp;
	char buf[SCD_HTTP_MAX_REQUEST];
} conn_t;

struct scd_http {
	uv_tcp_t listen;
	char path[64];
	char content_type[64];
	scd_http_render_fn render;
	void *arg;
	conn_t *conns;
	int n_conns;
	int listen_open;
	int stopping;
};

static void srv_maybe_free(scd_http_t *srv)
{
	if (srv->stopping && !srv->listen_open && !srv->conns)
		free(srv);
}

static void on_conn_closed(uv_handle_t *h)
{
	conn_t *c = h->data;
	if (--c->open_handles > 0)
		return;
	scd_http_t *srv = c->srv;
	free(c->resp);
	free(c);
	srv_maybe_free(srv);
}

static void conn_close(conn_t *c)
{
	if (c->closing)
		return;
	c->closing = 1;
	*c->pprev = c->next; /* unlinked now: it no longer counts against the limit */
	if (c->next)
		c->next->pprev = c->pprev;
	c->srv->n_conns--;
	uv_timer_stop(&c->timer);
	uv_close((uv_handle_t *)&c->timer, on_conn_closed);
	uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_written(uv_write_t *wr, int status)
{
	conn_close(wr->data);
}

static const char *reason(int code)
{
	switch (code) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 431:
		return "Request Header Fields Too Large";
	case 503:
		return "Service Unavailable";
	default:
		return "Internal Server Error";
	}
}

/* Sends the answer (body NULL: a one-line text of the reason) and closes after it. */
static void respond(conn_t *c, int code, const char *type, const char *body, size_t body_len,
		    int head_only)
{
	char line[96];
	if (!body) {
		snprintf(line, sizeof(line), "%d %s\n", code, reason(code));
		body = line;
		body_len = strlen(line);
		type = "text/plain; charset=utf-8";
	}
	uv_read_stop((uv_stream_t *)&c->tcp);
	char head[256];
	int hl = snprintf(head, sizeof(head),
			  "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			  "Connection: close\r\n%s\r\n",
			  code, reason(code), type, body_len,
			  code == 405 ? "Allow: GET, HEAD\r\n" : "");
	size_t n = (size_t)hl + (head_only ? 0 : body_len);
	c->resp = malloc(n);
	if (!c->resp) {
		conn_close(c);
		return;
	}
	memcpy(c->resp, head, (size_t)hl);
	if (!head_only)
		memcpy(c->resp + hl, body, body_len);
	uv_buf_t b = uv_buf_init(c->resp, (unsigned)n);
	c->wr.data = c;
	if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0)
		conn_close(c);
}

/* The request line "METHOD TARGET HTTP/1.x" is complete in c->buf. */
static void serve(conn_t *c)
{
	scd_http_t *srv = c->srv;
	char *eol = memchr(c->buf, '\n', c->len);
	size_t n = (size_t)(eol - c->buf);
	if (n && c->buf[n - 1] == '\r')
		n--;
	c->buf[n] = 0;
	char *save = NULL;
	char *method = strtok_r(c->buf, " ", &save), *target = strtok_r(NULL, " ", &save);
	char *version = strtok_r(NULL, " ", &save);
	if (!method || !target || !version || strtok_r(NULL, " ", &save) ||
	    strncmp(version, "HTTP/1.", 7)) {
		respond(c, 400, NULL, NULL, 0, 0);
		return;
	}
	target[strcspn(target, "?")] = 0; /* a query string changes nothing */
	if (strcmp(target, srv->path)) {
		respond(c, 404, NULL, NULL, 0, 0);
		return;
	}
	int head = !strcmp(method, "HEAD");
	if (!head && strcmp(method, "GET")) {
		respond(c, 405, NULL, NULL, 0, 0);
		return;
	}
	char *body = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&body, &len);
	int rc = out ? srv->render(srv->arg, out) : -1;
	if (out && fclose(out) != 0)
		rc = -1;
	if (rc != 0)
		respond(c, 500, NULL, NULL, 0, head);
	else
		respond(c, 200, srv->content_type, body, len, head);
	free(body);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	conn_t *c = h->data;
	*b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
	conn_t *c = s->data;
	if (nread < 0) {
		conn_close(c);
		return;
	}
	c->len += (size_t)nread;
	/* the headers end at an empty line; nothing after it is read */
	if (memmem(c->buf, c->len, "\r\n\r\n", 4) || memmem(c->buf, c->len, "\n\n", 2))
		serve(c);
	else if (c->len == sizeof(c->buf))
		respond(c, 431, NULL, NULL, 0, 0);
}

static void on_timeout(uv_timer_t *t)
{
	conn_close(t->data);
}

static void on_connection(uv_stream_t *ls, int status)
{
	scd_http_t *srv = ls->data;
	if (status < 0)
		return;
	conn_t *c = calloc(1, sizeof(*c));
	if (!c)
		return; /* the connection waits in the backlog for the next try */
	c->srv = srv;
	uv_tcp_init(ls->loop, &c->tcp);
	uv_timer_init(ls->loop, &c->timer);
	c->tcp.data = c->timer.data = c;
	c->open_handles = 2;
	c->next = srv->conns;
	c->pprev = &srv->conns;
	if (srv->conns)
		srv->conns->pprev = &c->next;
	srv->conns = c;
	srv->n_conns++;
	if (uv_accept(ls, (uv_stream_t *)&c->tcp) != 0) {
		conn_close(c);
		return;
	}
	if (srv->n_conns > SCD_HTTP_MAX_CONNS) {
		respond(c, 503, NULL, NULL, 0, 0);
		return;
	}
	uv_timer_start(&c->timer, on_timeout, SCD_HTTP_READ_TIMEOUT_MS, 0);
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
		conn_close(c);
}

static void on_listen_closed(uv_handle_t *h)
{
	scd_http_t *srv = h->data;
	srv->listen_open = 0;
	srv_maybe_free(srv);
}

sc_status_t scd_http_start(uv_loop_t *loop, const char *addr, int port, const char *path,
			   const char *content_type, scd_http_render_fn render, void *arg,
			   scd_http_t **srv_p, char *err, size_t err_len)
{
	struct sockaddr_storage ss;
	int rc = strchr(addr, ':') ? uv_ip6_addr(addr, port, (struct sockaddr_in6 *)&ss)
				   : uv_ip4_addr(addr, port, (struct sockaddr_in *)&ss);
	if (rc != 0) {
		snprintf(err, err_len, "'%s': %s", addr, uv_strerror(rc));
		return SC_ERR_INVALID;
	}
	scd_http_t *srv = calloc(1, sizeof(*srv));
	if (!srv) {
		snprintf(err, err_len, "out of memory");
		return SC_ERR_NOMEM;
	}
	snprintf(srv->path, sizeof(srv->path), "%s", path);
	snprintf(srv->content_type, sizeof(srv->content_type), "%s", content_type);
	srv->render = render;
	srv->arg = arg;
	uv_tcp_init(loop, &srv->listen);
	srv->listen.data = srv;
	srv->listen_open = 1;
	if ((rc = uv_tcp_bind(&srv->listen, (struct sockaddr *)&ss, 0)) != 0 ||
	    (rc = uv_listen((uv_stream_t *)&srv->listen, 64, on_connection)) != 0) {
		snprintf(err, err_len, "%s port %d: %s", addr, port, uv_strerror(rc));
		srv->stopping = 1;
		uv_close((uv_handle_t *)&srv->listen, on_listen_closed);
		return SC_ERR_SYSTEM;
	}
	*srv_p = srv;
	return SC_OK;
}

void scd_http_stop(scd_http_t *srv)
{
	if (!srv || srv->stopping)
		return;
	srv->stopping = 1;
	while (srv->conns)
		conn_close(srv->conns);
	uv_close((uv_handle_t *)&srv->listen, on_listen_closed);
}
