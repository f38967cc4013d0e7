/*
 * addr.h: the addresses world formation names: the coordinator's host:port, and the data
 * plane's address announced to the peers.
 *
 * A host is a name or a numeric address; names are resolved with getaddrinfo, and where a
 * name has both IPv4 and IPv6 addresses the first IPv4 one is taken, so every host that
 * resolves a name the same way picks the same address. A wildcard (empty, "*", 0.0.0.0,
 * "::") binds every interface but is never announced: the daemon announces instead the
 * address of its interface that routes to the coordinator (a UDP socket connected to it,
 * read back with getsockname; no packet is sent), or advertise_addr when set.
 */
#ifndef SCD_WORLD_ADDR_H
#define SCD_WORLD_ADDR_H

#include <stddef.h>

#include "sparsecomm.h"

/* Longest numeric address with its NUL (INET6_ADDRSTRLEN). */
#define SCD_ADDR_MAX 46

/* Splits "host:port" or "[v6-address]:port" into host and port (both non-empty but for
 * an empty host before ':'); err names what is wrong otherwise. */
sc_status_t scd_addr_split(const char *hostport, char *host, size_t host_len, char *port,
			   size_t port_len, char *err, size_t err_len);
/* Whether addr binds every interface: empty, "*", 0.0.0.0 or "::". */
int scd_addr_is_wildcard(const char *addr);
/* host as a numeric address (IPv4 preferred; a wildcard as it is, "*" and "" as 0.0.0.0);
 * *v6 set when it is IPv6. err names the host and the resolver's reason on failure. */
sc_status_t scd_addr_resolve(const char *host, char *out, size_t out_len, int *v6, char *err,
			     size_t err_len);
/* The ZeroMQ endpoint "tcp://ADDR:PORT" ("[ADDR]" for IPv6) of a host:port, resolved. */
sc_status_t scd_addr_zmq_endpoint(const char *hostport, char *out, size_t out_len, int *v6,
				  char *err, size_t err_len);
/* The data-plane address to announce: advertise when non-empty; else data_addr unless it
 * is a wildcard; else this host's address on the route to coord_host (the coordinator's
 * host, resolved), IPv4 unless data_addr is "::". */
sc_status_t scd_addr_advertised(const char *advertise, const char *data_addr,
				const char *coord_host, char *out, size_t out_len, char *err,
				size_t err_len);

#endif
