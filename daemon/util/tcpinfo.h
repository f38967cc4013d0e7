/*
 * tcpinfo.h: what the kernel counts of a TCP connection, from linux/tcp.h (whose struct
 * tcp_info is newer than the C library's, and cannot be included beside it).
 */
#ifndef SCD_UTIL_TCPINFO_H
#define SCD_UTIL_TCPINFO_H

#include <stdint.h>

/* The bytes the connection fd has received; -1 when the kernel does not say. */
int scd_tcp_bytes_received(int fd, uint64_t *bytes_p);

#endif
