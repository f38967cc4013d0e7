/*
 * port.h: a free TCP port on loopback for a coordinator that binds it only later (the
 * launcher's, and the tests' lone daemons). The port is drawn at random below the
 * kernel's ephemeral range (ip_local_port_range): a port the kernel hands out for bind(0)
 * or connect() meanwhile, which the daemons' and the tests' own sockets take by the
 * thousand, cannot be it. Falls back to bind(0) where that range leaves no room below it.
 * Header-only, so that programs which link none of the project's libraries can use it.
 */
#ifndef SC_PORT_H
#define SC_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

/* Whether port is free on 127.0.0.1 now (bound and let go again): the port bound (the
 * kernel's choice for 0), or -1. */
static inline int sc_port_free(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), got = -1;
	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		got = ntohs(a.sin_port);
	close(fd);
	return got;
}

/* The lower bound of the kernel's ephemeral range (32768 when it cannot be read). */
static inline int sc_port_ephemeral_low(void)
{
	int lo = 32768, hi = 60999;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
	if (f) {
		if (fscanf(f, "%d %d", &lo, &hi) != 2)
			lo = 32768;
		fclose(f);
	}
	return lo;
}

/* A port free on 127.0.0.1 now, below the ephemeral range where there is room; -1 when
 * none could be bound. */
static inline int sc_port_pick(void)
{
	int lo = sc_port_ephemeral_low();
	int base = lo / 2 > 1024 ? lo / 2 : 1024, span = lo - base;
	for (int i = 0; span >= 256 && i < 64; i++) {
		uint32_t x = 0;
		if (getrandom(&x, sizeof(x), 0) != sizeof(x))
			break;
		int port = base + (int)(x % (uint32_t)span);
		if (sc_port_free(port) == port)
			return port;
	}
	return sc_port_free(0);
}

#endif
