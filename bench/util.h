/*
 * util.h: helpers the benchmark commands share: a monotonic clock, medians, tc-style rate
 * parsing, and locating bench/mpi/run-peer.sh (the Open MPI peer across the launcher's
 * namespaces).
 */
#ifndef SC_BENCH_UTIL_H
#define SC_BENCH_UTIL_H

#include <stddef.h>

double bench_now_s(void);
/* qsort comparator of doubles, ascending. */
int bench_cmp_double(const void *a, const void *b);
/* The median of v[0..n) (sorts v). */
double bench_median(double *v, int n);
/* The p-quantile of v[0..n) (sorts v): for p = 0.5 the median (the mean of the middle two
 * when n is even), else the nearest rank above, v[ceil(p n) - 1]. n >= 1. */
double bench_percentile(double *v, int n, double p);
/* A tc-style rate (1gbit, 500mbit, 100mbps) in bits per second; 0 on success. */
int bench_parse_rate(const char *rate, double *bits_p);
/* "4M" -> 4 MiB (K, M, G binary; an optional B or iB); a plain number is bytes. 0 on
 * success. */
int bench_parse_bytes(const char *s, size_t *out_p);
/* bench/mpi/run-peer.sh: explicit (may be NULL), else $SPARSECOMM_RUN_PEER, else found
 * relative to the running binary. 0 when an executable script was found. */
int bench_find_peer_script(const char *explicit_path, char *path, size_t cap);
/* Creates the directories of path's prefix up to its last '/' that do not exist yet, as
 * mkdir -p does (0755); 0, or -1 with the error printed naming the directory. */
int bench_mkdir_parents(const char *path);

/* Runs argv[0] with argv, stdout captured (stderr passes through), for at most timeout_s
 * (then SIGTERM). The output (malloc'd, NUL-terminated) when it exited 0, else NULL after
 * printing why. */
char *bench_run_capture(char *const argv[], int timeout_s);

#endif
