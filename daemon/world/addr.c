/*
 * addr.c: host:port parsing, name resolution and the route to the coordinator (see
 * addr.h).
 */
#include "world/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

sc_status_t scd_addr_split(const char *hostport, char *host, size_t host_len, char *port,
			   size_t port_len, char *err, size_t err_len)
{
	const char *h = hostport, *colon;
	size_t hlen;
	if (hostport[0] == '[') {
		const char *close = strchr(hostport, ']');
		if (!close || close[1] != ':') {
			snprintf(err, err_len, "'%s' is not [ADDRESS]:PORT", hostport);
			return SC_ERR_INVALID;
		}
		h = hostport + 1;
		hlen = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(hostport, ':');
		if (!colon || memchr(hostport, ':', (size_t)(colon - hostport))) {
			snprintf(err, err_len,
				 "'%s' is not HOST:PORT (an IPv6 address goes in brackets)",
				 hostport);
			return SC_ERR_INVALID;
		}
		hlen = (size_t)(colon - hostport);
	}
	const char *p = colon + 1;
	char *end;
	errno = 0;
	long n = strtol(p, &end, 10);
	if (!*p || *end || errno || n < 1 || n > 65535) {
		snprintf(err, err_len, "'%s': the port must be 1 to 65535", hostport);
		return SC_ERR_INVALID;
	}
	if (hlen >= host_len || strlen(p) >= port_len) {
		snprintf(err, err_len, "'%s' is too long", hostport);
		return SC_ERR_INVALID;
	}
	memcpy(host, h, hlen);
	host[hlen] = 0;
	snprintf(port, port_len, "%ld", n);
	return SC_OK;
}

int scd_addr_is_wildcard(const char *addr)
{
	return !addr || !*addr || !strcmp(addr, "*") || !strcmp(addr, "0.0.0.0") ||
	       !strcmp(addr, "::");
}

/* The first address of host of family (AF_UNSPEC: the first IPv4 one, else the first). */
static sc_status_t lookup(const char *host, int family, struct sockaddr_storage *ss,
			  socklen_t *len, char *err, size_t err_len)
{
	struct addrinfo hints = {.ai_family = family, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	int rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc != 0) {
		snprintf(err, err_len, "cannot resolve '%s': %s", host,
			 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return SC_ERR_INVALID;
	}
	const struct addrinfo *pick = res;
	for (const struct addrinfo *ai = res; ai && family == AF_UNSPEC; ai = ai->ai_next) {
		if (ai->ai_family == AF_INET) {
			pick = ai;
			break;
		}
	}
	memcpy(ss, pick->ai_addr, pick->ai_addrlen);
	*len = pick->ai_addrlen;
	freeaddrinfo(res);
	return SC_OK;
}

static sc_status_t numeric(const struct sockaddr_storage *ss, socklen_t len, char *out,
			   size_t out_len, char *err, size_t err_len)
{
	char buf[NI_MAXHOST];
	int rc = getnameinfo((const struct sockaddr *)ss, len, buf, sizeof(buf), NULL, 0,
			     NI_NUMERICHOST);
	if (rc != 0 || strlen(buf) >= out_len) {
		snprintf(err, err_len, "cannot render an address: %s",
			 rc ? gai_strerror(rc) : "too long");
		return SC_ERR_INVALID;
	}
	memcpy(out, buf, strlen(buf) + 1);
	return SC_OK;
}

sc_status_t scd_addr_resolve(const char *host, char *out, size_t out_len, int *v6, char *err,
			     size_t err_len)
{
	if (!*host || !strcmp(host, "*"))
		host = "0.0.0.0";
	struct sockaddr_storage ss;
	socklen_t len;
	sc_status_t st = lookup(host, AF_UNSPEC, &ss, &len, err, err_len);
	if (st != SC_OK)
		return st;
	*v6 = ss.ss_family == AF_INET6;
	return numeric(&ss, len, out, out_len, err, err_len);
}

sc_status_t scd_addr_zmq_endpoint(const char *hostport, char *out, size_t out_len, int *v6,
				  char *err, size_t err_len)
{
	char host[256], port[8], addr[SCD_ADDR_MAX];
	sc_status_t st =
	    scd_addr_split(hostport, host, sizeof(host), port, sizeof(port), err, err_len);
	if (st == SC_OK)
		st = scd_addr_resolve(host, addr, sizeof(addr), v6, err, err_len);
	if (st != SC_OK)
		return st;
	int n = snprintf(out, out_len, *v6 ? "tcp://[%s]:%s" : "tcp://%s:%s", addr, port);
	if (n < 0 || (size_t)n >= out_len) {
		snprintf(err, err_len, "'%s' is too long", hostport);
		return SC_ERR_INVALID;
	}
	return SC_OK;
}

/* This host's source address towards host: a connected UDP socket sends nothing. */
static sc_status_t route_to(const char *host, int family, char *out, size_t out_len, char *err,
			    size_t err_len)
{
	struct sockaddr_storage to, from;
	socklen_t to_len, from_len = sizeof(from);
	sc_status_t st = lookup(host, family, &to, &to_len, err, err_len);
	if (st != SC_OK)
		return st;
	/* any port will do: connect only picks the route */
	if (to.ss_family == AF_INET)
		((struct sockaddr_in *)&to)->sin_port = htons(9);
	else
		((struct sockaddr_in6 *)&to)->sin6_port = htons(9);
	int fd = socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&to, to_len) < 0 ||
	    getsockname(fd, (struct sockaddr *)&from, &from_len) < 0) {
		snprintf(err, err_len, "no route to the coordinator's host '%s': %s", host,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		return SC_ERR_SYSTEM;
	}
	close(fd);
	return numeric(&from, from_len, out, out_len, err, err_len);
}

sc_status_t scd_addr_advertised(const char *advertise, const char *data_addr,
				const char *coord_host, char *out, size_t out_len, char *err,
				size_t err_len)
{
	const char *pick = advertise && *advertise ? advertise : data_addr;
	if (!scd_addr_is_wildcard(pick)) {
		if (strlen(pick) >= out_len) {
			snprintf(err, err_len, "address '%s' is longer than %zu bytes", pick,
				 out_len - 1);
			return SC_ERR_INVALID;
		}
		memcpy(out, pick, strlen(pick) + 1);
		return SC_OK;
	}
	if (pick == advertise) {
		snprintf(err, err_len,
			 "advertise_addr '%s' is a wildcard: name an address "
			 "the other ranks reach",
			 advertise);
		return SC_ERR_INVALID;
	}
	if (scd_addr_is_wildcard(coord_host))
		coord_host = "127.0.0.1"; /* rank 0 bound to every interface: see the caller */
	return route_to(coord_host, data_addr && !strcmp(data_addr, "::") ? AF_UNSPEC : AF_INET,
			out, out_len, err, err_len);
}
