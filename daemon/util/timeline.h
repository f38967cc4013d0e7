/*
 * timeline.h: the daemon's timeline, a Chrome Trace Event file (JSON object form,
 * {"traceEvents":[...]}) that chrome://tracing and Perfetto open, like Horovod's timeline.
 * One file per daemon: pid is the node rank; tid is a lane, one per tensor name (the
 * tensor's phases: wait_ranks, local_sum, sparsify, copy_out) and one per daemon thread
 * (the buffer's phases: buffer, scheme and each exchange round inside it). Lanes are
 * labelled with "thread_name" metadata events; every event is a complete event ("ph":"X",
 * ts and dur in microseconds of the monotonic clock, so the files of the daemons of one
 * host line up).
 *
 * Events are formatted into an in-memory buffer under a mutex and written to the file by
 * a writer thread of this module, so the engine never waits on file I/O. The buffer is
 * bounded: an event that finds it full is dropped and counted, and the count is written
 * into the file's trailer ("otherData") when the timeline stops. Starting while running
 * closes the old file first; stopping closes the JSON, so the file is valid.
 *
 * Off, a hook costs one relaxed atomic load (scd_tl_begin returns 0 and the matching end
 * call returns at once). An event whose begin was taken before the timeline started is
 * not written, nor is one that ends after it stopped.
 */
#ifndef SCD_UTIL_TIMELINE_H
#define SCD_UTIL_TIMELINE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "sparsecomm.h"

/* Default size of each of the two event buffers, and how often the writer flushes. */
#define SCD_TL_BUF_BYTES (4u << 20)
#define SCD_TL_FLUSH_MS	 200
/* Lanes (tensor names and threads) one daemon labels; events of more are dropped. */
#define SCD_TL_LANES_MAX 4096

/* One argument of an event: a string when s is not NULL, else the integer i. */
typedef struct scd_tl_arg {
	const char *key;
	const char *s;
	int64_t i;
} scd_tl_arg_t;

/* What a running or finished timeline counted (for its file's trailer and the log). */
typedef struct scd_tl_counts {
	uint64_t events;  /* written into the buffer */
	uint64_t dropped; /* the buffer was full, or more lanes than SCD_TL_LANES_MAX */
	int write_errno;  /* the first failed write to the file (0: none) */
} scd_tl_counts_t;

extern atomic_int scd_tl_enabled_;

static inline int scd_tl_on(void)
{
	return atomic_load_explicit(&scd_tl_enabled_, memory_order_relaxed);
}

/* Nanoseconds of the monotonic clock when the timeline is on (never 0), else 0: the begin
 * of a phase, handed to the end call below. */
static inline uint64_t scd_tl_begin(void)
{
	if (!scd_tl_on())
		return 0;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + 1;
}

/* Ends the phase begun at t0 (from scd_tl_begin) now, on the lane of tensor: a complete
 * event called phase with n args. Nothing when t0 is 0 or the timeline is off. */
void scd_tl_tensor(const char *tensor, const char *phase, uint64_t t0, const scd_tl_arg_t *args,
		   int n);
/* The same on the calling thread's lane (scd_tl_thread names it). */
void scd_tl_here(const char *phase, uint64_t t0, const scd_tl_arg_t *args, int n);
/* Names the calling thread's lane ("engine", "loop"); name must outlive the thread. A
 * thread that never names its lane gets "thread <tid>". */
void scd_tl_thread(const char *name);

/* Starts writing to the file the pattern names (scd_tl_path), closing a running
 * timeline's file first. buf_bytes and flush_ms: 0 for the defaults; flush_ms < 0 writes
 * only at stop (what the tests of the drop count use). err names the file and the cause
 * on failure (and the timeline is then off). */
sc_status_t scd_tl_start(const char *pattern, int rank, int world_size, size_t buf_bytes,
			 int flush_ms, char *err, size_t err_len);
/* Stops: writes what is buffered and the trailer, closes the file. What it counted goes
 * to counts_p (optional); SC_OK when nothing ran or every write succeeded. */
sc_status_t scd_tl_stop(scd_tl_counts_t *counts_p);
/* The configuration's timeline_file: empty stops, anything else starts (or switches to)
 * that file. Logs what it did, and the failure. */
sc_status_t scd_tl_configure(const char *pattern, int rank, int world_size);
/* The file a pattern names for a rank: every "%r" is the rank and "%%" a '%'; a pattern
 * without "%r" is node 0's file as it is (where Horovod writes its timeline), and another
 * node's with ".<rank>" before a final ".json" (or at its end), so that daemons sharing a
 * host never share a file. SC_ERR_INVALID (err says why) when the result does not fit
 * len. */
sc_status_t scd_tl_path(const char *pattern, int rank, int world_size, char *out, size_t len,
			char *err, size_t err_len);
/* Whether this daemon could create the file the pattern names for its rank: the
 * directory exists and it may write there. SC_ERR_INVALID (err names the file, the
 * directory and the cause) when not; the file itself is not made. */
sc_status_t scd_tl_writable(const char *pattern, int rank, int world_size, char *err,
			    size_t err_len);
/* Writes s as the inside of a JSON string into out (at most len - 1 bytes and a NUL):
 * quotes, backslashes and control characters escaped, invalid UTF-8 replaced by U+FFFD,
 * cut before an escape or character that would not fit. Returns the bytes written. */
size_t scd_tl_escape(const char *s, char *out, size_t len);

#endif
