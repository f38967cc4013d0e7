/* stream.c: sparsecomm-run's output relay (stream.h). */
#include "stream.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			struct pollfd pfd = {.fd = fd, .events = POLLOUT};
			poll(&pfd, 1, 1000);
			continue;
		}
		if (w <= 0)
			return; /* EPIPE and friends: nobody is reading */
		p += w;
		n -= (size_t)w;
	}
}

static void emit_line(stream_t *s, const char *line, size_t n)
{
	static char out[STREAM_BUF_BYTES + 64];
	size_t plen = strlen(s->prefix);
	if (s->out_fd < 0)
		return;
	memcpy(out, s->prefix, plen);
	memcpy(out + plen, line, n);
	out[plen + n] = '\n';
	write_all(s->out_fd, out, plen + n + 1);
}

void run_stream_init(stream_t *s, int fd, int out_fd, int log_fd, const char *prefix)
{
	s->fd = fd;
	s->out_fd = out_fd;
	s->log_fd = log_fd;
	s->len = 0;
	snprintf(s->prefix, sizeof(s->prefix), "%s", prefix);
	s->buf = malloc(STREAM_BUF_BYTES);
	if (!s->buf) {
		fprintf(stderr, "sparsecomm-run: out of memory\n");
		exit(1);
	}
}

/* Emits every complete line; with flush also the partial last one. */
static void stream_lines(stream_t *s, bool flush)
{
	size_t start = 0;
	for (size_t i = 0; i < s->len; i++) {
		if (s->buf[i] == '\n') {
			emit_line(s, s->buf + start, i - start);
			start = i + 1;
		}
	}
	if (start == 0 && s->len == STREAM_BUF_BYTES) { /* a line longer than the buffer */
		emit_line(s, s->buf, s->len);
		start = s->len;
	}
	if (flush && start < s->len) {
		emit_line(s, s->buf + start, s->len - start);
		start = s->len;
	}
	memmove(s->buf, s->buf + start, s->len - start);
	s->len -= start;
}

void run_stream_close(stream_t *s)
{
	if (s->fd >= 0) {
		stream_lines(s, true);
		close(s->fd);
		s->fd = -1;
	}
	if (s->log_fd >= 0) {
		close(s->log_fd);
		s->log_fd = -1;
	}
	free(s->buf);
	s->buf = NULL;
}

void run_stream_read(stream_t *s)
{
	ssize_t n = read(s->fd, s->buf + s->len, STREAM_BUF_BYTES - s->len);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		run_stream_close(s);
		return;
	}
	if (s->log_fd >= 0)
		write_all(s->log_fd, s->buf + s->len, (size_t)n);
	s->len += (size_t)n;
	stream_lines(s, false);
}
