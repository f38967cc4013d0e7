/*
 * setup.c: the sockets of libnccl-host.so.
 *
 * Address: with $NCCL_SOCKET_IFNAME, the IPv4 address of the first interface it selects
 * (a comma-separated list of name prefixes; '=' first: exact names; '^' first: every
 * interface but those), else 127.0.0.1.
 *
 * Set-up of a comm (run by its worker thread, every wait bounded by $NCCL_HOST_TIMEOUT_MS
 * and cut short by ncclCommAbort):
 *  1. every rank opens its mesh listener; ranks 1.. connect to the root's listener (the
 *     one ncclGetUniqueId opened) and send a hello: magic, nonce, rank, nranks, address;
 *  2. rank 0 checks each hello (nonce, nranks, rank range, duplicates; a failure names
 *     the rank) and sends every rank the table of the ranks' addresses;
 *     with $NCCL_HOST_SAME_GPU=1 every rank stands for cuda:0 of its host, as on a machine
 *     of one GPU, and rank 0 refuses two ranks of one host as NCCL does ("Duplicate GPU
 *     detected"): a host is $NCCL_HOSTID where set, else the host name, as in NCCL;
 *  3. each rank connects to every higher rank and accepts every lower one, each connection
 *     opened by a hello naming its rank; the connections then stay open, non-blocking.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "host.h"

/* The set-up messages: hellos (to the root and between peers) and the root's table. */
struct nh_hello {
	uint32_t magic, rank, nranks, addr; /* network order */
	uint16_t port, pad;
	uint32_t pad2;
	uint64_t nonce; /* as the id carries it */
	uint64_t host;	/* the sender's host identity, hashed (host_hash) */
};
struct nh_entry {
	uint32_t addr; /* network order */
	uint16_t port, pad;
};

/* ---- addresses and listeners -------------------------------------------------------- */

/* Whether the interface name is selected by the $NCCL_SOCKET_IFNAME list. */
static int if_selected(const char *name, const char *spec)
{
	int exclude = 0, exact = 0, hit = 0;
	const char *p;

	if (*spec == '^') {
		exclude = 1;
		spec++;
	}
	if (*spec == '=') {
		exact = 1;
		spec++;
	}
	for (p = spec; *p && !hit;) {
		size_t n = strcspn(p, ",");

		if (n > 0 &&
		    (exact ? strlen(name) == n && !strncmp(name, p, n) : !strncmp(name, p, n)))
			hit = 1;
		p += n;
		if (*p == ',')
			p++;
	}
	return exclude ? !hit : hit;
}

ncclResult_t nh_pick_addr(struct in_addr *addr, char *text, size_t len)
{
	const char *spec = getenv("NCCL_SOCKET_IFNAME");
	struct ifaddrs *ifs, *i;

	if (!spec || !*spec) {
		addr->s_addr = htonl(INADDR_LOOPBACK);
		return ncclSuccess;
	}
	if (getifaddrs(&ifs) < 0) {
		snprintf(text, len, "getifaddrs: %s", strerror(errno));
		return ncclSystemError;
	}
	for (i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
		    !(i->ifa_flags & IFF_UP) || !if_selected(i->ifa_name, spec))
			continue;
		*addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
		freeifaddrs(ifs);
		return ncclSuccess;
	}
	freeifaddrs(ifs);
	snprintf(text, len, "NCCL_SOCKET_IFNAME \"%s\" selects no IPv4 interface that is up",
		 spec);
	return ncclSystemError;
}

int nh_listen(struct in_addr addr, uint16_t *port, char *text, size_t len)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = addr};
	socklen_t salen = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, SOMAXCONN) < 0 || getsockname(fd, (struct sockaddr *)&sa, &salen) < 0) {
		snprintf(text, len, "listen on %s: %s", inet_ntoa(addr), strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = sa.sin_port;
	return fd;
}

/* The listeners ncclGetUniqueId opened, until rank 0's comm of that id takes its own. */
static pthread_mutex_t listeners_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint64_t nonce;
	int fd; /* 0: a free slot (a listener is never fd 0 once stdin exists) */
} listeners[64];

ncclResult_t nh_keep_listener(uint64_t nonce, int fd)
{
	ncclResult_t r = ncclSystemError;

	pthread_mutex_lock(&listeners_mu);
	for (size_t i = 0; i < sizeof(listeners) / sizeof(listeners[0]); i++)
		if (listeners[i].fd <= 0) {
			listeners[i].nonce = nonce;
			listeners[i].fd = fd;
			r = ncclSuccess;
			break;
		}
	pthread_mutex_unlock(&listeners_mu);
	return r;
}

int nh_take_listener(uint64_t nonce)
{
	int fd = -1;

	pthread_mutex_lock(&listeners_mu);
	for (size_t i = 0; i < sizeof(listeners) / sizeof(listeners[0]); i++)
		if (listeners[i].fd > 0 && listeners[i].nonce == nonce) {
			fd = listeners[i].fd;
			listeners[i].fd = 0;
			break;
		}
	pthread_mutex_unlock(&listeners_mu);
	return fd;
}

/* ---- bounded I/O ----------------------------------------------------------------------- */

/* Waits for events on fd until the deadline, in slices that look at the abort flag. */
static ncclResult_t wait_fd(struct ncclComm *comm, int fd, short events, uint64_t deadline,
			    const char *what)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = events};
		uint64_t now = nh_now_ms();
		int n;

		if (atomic_load(&comm->abort))
			return nh_fail(comm, ncclSystemError, "rank %d: aborted during set-up",
				       comm->rank);
		if (now >= deadline)
			return nh_fail(comm, ncclSystemError,
				       "%s: no answer within NCCL_HOST_TIMEOUT_MS=%d", what,
				       comm->timeout_ms);
		n = poll(&p, 1,
			 deadline - now < NH_SLICE_MS ? (int)(deadline - now) : NH_SLICE_MS);
		if (n > 0)
			return ncclSuccess;
		if (n < 0 && errno != EINTR)
			return nh_fail(comm, ncclSystemError, "%s: poll: %s", what,
				       strerror(errno));
	}
}

/* Reads or writes len bytes on a non-blocking socket before the deadline. */
static ncclResult_t io_full(struct ncclComm *comm, int fd, void *buf, size_t len, int out,
			    uint64_t deadline, const char *what)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = out ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL)
				: recv(fd, (char *)buf + done, len - done, 0);
		ncclResult_t r;

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == 0)
			return nh_fail(comm, ncclRemoteError, "%s: connection closed by peer",
				       what);
		if (errno != EAGAIN && errno != EINTR)
			return nh_fail(comm, ncclRemoteError, "%s: %s", what, strerror(errno));
		r = wait_fd(comm, fd, out ? POLLOUT : POLLIN, deadline, what);
		if (r != ncclSuccess)
			return r;
	}
	return ncclSuccess;
}

static ncclResult_t connect_to(struct ncclComm *comm, struct sockaddr_in sa, uint64_t deadline,
			       const char *what, int *fd_p)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), err = 0;
	socklen_t len = sizeof(err);
	ncclResult_t r;

	if (fd < 0)
		return nh_fail(comm, ncclSystemError, "%s: socket: %s", what, strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno != EINPROGRESS) {
			err = errno;
		} else {
			r = wait_fd(comm, fd, POLLOUT, deadline, what);
			if (r != ncclSuccess) {
				close(fd);
				return r;
			}
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
				err = errno;
		}
	}
	if (err) {
		close(fd);
		return nh_fail(comm, ncclSystemError, "%s: connect to %s:%u: %s", what,
			       inet_ntoa(sa.sin_addr), ntohs(sa.sin_port), strerror(err));
	}
	*fd_p = fd;
	return ncclSuccess;
}

static ncclResult_t accept_one(struct ncclComm *comm, int lfd, uint64_t deadline,
			       const char *what, int *fd_p)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		ncclResult_t r;

		if (fd >= 0) {
			*fd_p = fd;
			return ncclSuccess;
		}
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			return nh_fail(comm, ncclSystemError, "%s: accept: %s", what,
				       strerror(errno));
		r = wait_fd(comm, lfd, POLLIN, deadline, what);
		if (r != ncclSuccess)
			return r;
	}
}

/* ---- set-up ---------------------------------------------------------------------------- */

/* FNV-1a of $NCCL_HOSTID, else of the host name: which ranks share a host. */
static uint64_t host_hash(void)
{
	const char *id = getenv("NCCL_HOSTID");
	char name[256] = "";
	uint64_t h = 0xcbf29ce484222325ull;

	if (!id || !*id) {
		gethostname(name, sizeof(name) - 1);
		id = name;
	}
	for (const unsigned char *p = (const unsigned char *)id; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return h;
}

static void hello_fill(struct nh_hello *h, struct ncclComm *comm, struct sockaddr_in *self)
{
	memset(h, 0, sizeof(*h));
	h->magic = htonl(NH_HELLO_MAGIC);
	h->rank = htonl((uint32_t)comm->rank);
	h->nranks = htonl((uint32_t)comm->nranks);
	h->addr = self ? self->sin_addr.s_addr : 0;
	h->port = self ? self->sin_port : 0;
	h->nonce = comm->nonce;
	h->host = host_hash();
}

/* Checks a hello from a connection; its rank must lie in [lo, hi) and not be seen yet. */
static ncclResult_t hello_check(struct ncclComm *comm, const struct nh_hello *h, int lo, int hi,
				const char *seen, int *rank_p)
{
	int rank = (int)ntohl(h->rank);

	if (ntohl(h->magic) != NH_HELLO_MAGIC)
		return nh_fail(comm, ncclRemoteError, "rank %d: a connection sent no hello",
			       comm->rank);
	if (h->nonce != comm->nonce)
		return nh_fail(comm, ncclInvalidUsage,
			       "rank %d: connected with another unique id (wrong nonce)", rank);
	if ((int)ntohl(h->nranks) != comm->nranks)
		return nh_fail(comm, ncclInvalidUsage, "rank %d: nranks %d, rank %d has %d",
			       rank, (int)ntohl(h->nranks), comm->rank, comm->nranks);
	if (rank < lo || rank >= hi)
		return nh_fail(comm, ncclInvalidUsage,
			       "rank %d: not a rank expected here (%d..%d)", rank, lo, hi - 1);
	if (seen[rank])
		return nh_fail(comm, ncclInvalidUsage, "rank %d: joined twice", rank);
	*rank_p = rank;
	return ncclSuccess;
}

/* Rank 0: gathers every rank's hello and answers with the table. */
static ncclResult_t rendezvous_root(struct ncclComm *comm, struct nh_entry *table,
				    uint64_t deadline)
{
	int n = comm->nranks, *fds = calloc((size_t)n, sizeof(int));
	char *seen = calloc((size_t)n, 1), what[64];
	uint64_t *hosts = calloc((size_t)n, sizeof(uint64_t));
	const char *same = getenv("NCCL_HOST_SAME_GPU");
	ncclResult_t r = ncclSuccess;
	int joined = 0;

	if (!fds || !seen || !hosts) {
		free(fds);
		free(seen);
		free(hosts);
		return nh_fail(comm, ncclSystemError, "rank 0: out of memory");
	}
	seen[0] = 1;
	hosts[0] = host_hash();
	while (r == ncclSuccess && joined < n - 1) {
		struct nh_hello h;
		int fd = -1, rank;

		snprintf(what, sizeof(what), "rank 0: waiting for %d more ranks",
			 n - 1 - joined);
		r = accept_one(comm, comm->rfd, deadline, what, &fd);
		if (r == ncclSuccess)
			r = io_full(comm, fd, &h, sizeof(h), 0, deadline, what);
		if (r == ncclSuccess)
			r = hello_check(comm, &h, 1, n, seen, &rank);
		if (r != ncclSuccess) {
			if (fd >= 0)
				close(fd);
			break;
		}
		seen[rank] = 1;
		fds[rank] = fd;
		hosts[rank] = h.host;
		for (int i = 0; same && !strcmp(same, "1") && i < n && r == ncclSuccess; i++)
			if (i != rank && seen[i] && hosts[i] == h.host)
				r = nh_fail(
				    comm, ncclInvalidUsage,
				    "Duplicate GPU detected: rank %d and rank %d both on CUDA "
				    "device 0 of one host (the same NCCL_HOSTID, or host name)",
				    i < rank ? i : rank, i < rank ? rank : i);
		if (r != ncclSuccess)
			break;
		table[rank].addr = h.addr;
		table[rank].port = h.port;
		joined++;
	}
	for (int i = 1; i < n && r == ncclSuccess; i++) {
		snprintf(what, sizeof(what), "rank %d", i);
		r = io_full(comm, fds[i], table, (size_t)n * sizeof(*table), 1, deadline, what);
	}
	for (int i = 1; i < n; i++)
		if (seen[i])
			close(fds[i]);
	free(fds);
	free(seen);
	free(hosts);
	return r;
}

static ncclResult_t rendezvous(struct ncclComm *comm, struct nh_entry *table,
			       struct sockaddr_in *self, uint64_t deadline)
{
	struct nh_hello h;
	ncclResult_t r;
	int fd = -1;

	table[comm->rank].addr = self->sin_addr.s_addr;
	table[comm->rank].port = self->sin_port;
	if (comm->rank == 0)
		return rendezvous_root(comm, table, deadline);
	hello_fill(&h, comm, self);
	r = connect_to(comm, comm->root, deadline, "rank 0", &fd);
	if (r == ncclSuccess)
		r = io_full(comm, fd, &h, sizeof(h), 1, deadline, "rank 0");
	if (r == ncclSuccess)
		r = io_full(comm, fd, table, (size_t)comm->nranks * sizeof(*table), 0, deadline,
			    "rank 0");
	if (fd >= 0)
		close(fd);
	return r;
}

/* Publishes a peer's connection (ncclCommAbort shuts it down from another thread). */
static void set_peer(struct ncclComm *comm, int peer, int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	pthread_mutex_lock(&comm->mu);
	comm->fds[peer] = fd;
	pthread_mutex_unlock(&comm->mu);
}

static ncclResult_t mesh(struct ncclComm *comm, const struct nh_entry *table, uint64_t deadline)
{
	char *seen = calloc((size_t)comm->nranks, 1), what[64];
	ncclResult_t r = seen ? ncclSuccess : nh_fail(comm, ncclSystemError, "out of memory");
	struct nh_hello h;

	hello_fill(&h, comm, NULL);
	for (int p = comm->rank + 1; p < comm->nranks && r == ncclSuccess; p++) {
		struct sockaddr_in sa = {.sin_family = AF_INET,
					 .sin_addr.s_addr = table[p].addr,
					 .sin_port = table[p].port};
		int fd = -1;

		snprintf(what, sizeof(what), "rank %d", p);
		r = connect_to(comm, sa, deadline, what, &fd);
		if (r == ncclSuccess) {
			set_peer(comm, p, fd);
			r = io_full(comm, fd, &h, sizeof(h), 1, deadline, what);
		}
	}
	for (int i = 0; i < comm->rank && r == ncclSuccess; i++) {
		struct nh_hello in;
		int fd = -1, p;

		snprintf(what, sizeof(what), "rank %d: waiting for lower ranks", comm->rank);
		r = accept_one(comm, comm->lfd, deadline, what, &fd);
		if (r == ncclSuccess)
			r = io_full(comm, fd, &in, sizeof(in), 0, deadline, what);
		if (r == ncclSuccess)
			r = hello_check(comm, &in, 0, comm->rank, seen, &p);
		if (r != ncclSuccess) {
			if (fd >= 0)
				close(fd);
			break;
		}
		seen[p] = 1;
		set_peer(comm, p, fd);
	}
	free(seen);
	return r;
}

ncclResult_t nh_setup(struct ncclComm *comm)
{
	uint64_t deadline = nh_now_ms() + (uint64_t)comm->timeout_ms;
	struct sockaddr_in self = {.sin_family = AF_INET};
	struct nh_entry *table = calloc((size_t)comm->nranks, sizeof(*table));
	char text[NH_TEXT];
	ncclResult_t r;

	if (!table)
		return nh_fail(comm, ncclSystemError, "rank %d: out of memory", comm->rank);
	r = nh_pick_addr(&self.sin_addr, text, sizeof(text));
	if (r == ncclSuccess) {
		comm->lfd = nh_listen(self.sin_addr, &self.sin_port, text, sizeof(text));
		if (comm->lfd < 0)
			r = ncclSystemError;
	}
	if (r != ncclSuccess)
		nh_fail(comm, r, "rank %d: %s", comm->rank, text);
	if (r == ncclSuccess)
		r = rendezvous(comm, table, &self, deadline);
	if (r == ncclSuccess)
		r = mesh(comm, table, deadline);
	free(table);
	if (comm->rfd >= 0)
		close(comm->rfd);
	if (comm->lfd >= 0)
		close(comm->lfd);
	comm->rfd = comm->lfd = -1;
	return r;
}
