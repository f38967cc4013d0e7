/*
 * stream.h: sparsecomm-run's output relay: a child's output read from its pipe and written
 * line by line with a prefix ("[rank] ", "[d<i>] "), optionally copied raw to a log file.
 */
#ifndef SC_RUN_STREAM_H
#define SC_RUN_STREAM_H

#include <stddef.h>

#define STREAM_BUF_BYTES 65536

typedef struct stream {
	int fd;	    /* -1 once closed */
	int out_fd; /* where prefixed lines go (1, 2), -1: nowhere */
	int log_fd; /* raw copy (daemon log), -1: none */
	char prefix[24];
	char *buf;
	size_t len;
} stream_t;

/* Relays fd's lines to out_fd (-1: nowhere) with prefix, and its bytes raw to log_fd (-1:
 * none); exits on out of memory. */
void run_stream_init(stream_t *s, int fd, int out_fd, int log_fd, const char *prefix);
/* Reads what is there (fd readable); closes the stream at its end. */
void run_stream_read(stream_t *s);
/* Emits the last partial line and closes fd and log_fd. */
void run_stream_close(stream_t *s);

#endif
