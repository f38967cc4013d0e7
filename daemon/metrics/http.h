/*
 * http.h: a tiny HTTP/1.x server on the daemon's libuv loop that serves one read-only
 * resource. GET (or HEAD) on its path answers 200 with what the render callback writes;
 * any other path answers 404, another method on the path 405, a malformed request line
 * 400. The request line and headers may take at most SCD_HTTP_MAX_REQUEST bytes (431
 * past that); a request body is never read. Every connection carries one request and is
 * closed after the answer. A connection past SCD_HTTP_MAX_CONNS open ones answers 503 at
 * once, and one that has not sent its whole request within SCD_HTTP_READ_TIMEOUT_MS is
 * closed.
 */
#ifndef SCD_METRICS_HTTP_H
#define SCD_METRICS_HTTP_H

#include <stdio.h>
#include <uv.h>

#include "sparsecomm.h"

#define SCD_HTTP_MAX_REQUEST	 8192
#define SCD_HTTP_MAX_CONNS	 16
#define SCD_HTTP_READ_TIMEOUT_MS 5000

typedef struct scd_http scd_http_t;

/* Writes the resource to out; returns 0, or -1 for a 500 answer. */
typedef int (*scd_http_render_fn)(void *arg, FILE *out);

/* Listens on addr (a numeric address from world/addr.h) and port for path, served as
 * content_type. err gets the reason on failure. */
sc_status_t scd_http_start(uv_loop_t *loop, const char *addr, int port, const char *path,
			   const char *content_type, scd_http_render_fn render, void *arg,
			   scd_http_t **srv_p, char *err, size_t err_len);
/* Closes the listener and every connection; the memory goes with the handles' close
 * callbacks (the loop must run once more). NULL is ignored. */
void scd_http_stop(scd_http_t *srv);

#endif
