/*
 * hosts.c: -H lists and host files (see hosts.h).
 */
#include "hosts.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A host name reaches a remote shell's command line: letters, digits and ".-_:" only, and
 * never a leading '-' (it would read as an option of the agent). */
static bool name_ok(const char *s)
{
	if (!*s || *s == '-')
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr(".-_:", *s))
			return false;
	return true;
}

static int parse_slots(const char *s, int *slots)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (!*s || *end || errno || v < 1 || v > 64)
		return -1;
	*slots = (int)v;
	return 0;
}

static int add(run_hosts_t *hs, const char *name, size_t len, int slots, const char *what,
	       char *err, size_t err_len)
{
	char buf[RUN_HOST_NAME_BYTES];
	if (len >= 2 && name[0] == '[' && name[len - 1] == ']')
		name++, len -= 2;
	if (len == 0 || len >= sizeof(buf)) {
		snprintf(err, err_len, "%s: no host name, or one longer than %d bytes", what,
			 RUN_HOST_NAME_BYTES - 1);
		return -1;
	}
	memcpy(buf, name, len);
	buf[len] = 0;
	if (!name_ok(buf)) {
		snprintf(err, err_len,
			 "%s: '%s' is not a host name (letters, digits, '.', '-', '_', ':'; no "
			 "leading '-')",
			 what, buf);
		return -1;
	}
	if (hs->n >= RUN_HOSTS_MAX) {
		snprintf(err, err_len, "%s: more than %d hosts", what, RUN_HOSTS_MAX);
		return -1;
	}
	for (int i = 0; i < hs->n; i++) {
		if (!strcmp(hs->h[i].name, buf)) {
			snprintf(err, err_len,
				 "%s: host '%s' is listed twice (one daemon per host: give it "
				 "more slots)",
				 what, buf);
			return -1;
		}
	}
	run_host_t *h = realloc(hs->h, (size_t)(hs->n + 1) * sizeof(*h));
	if (!h) {
		snprintf(err, err_len, "out of memory");
		return -1;
	}
	hs->h = h;
	h = &hs->h[hs->n++];
	memcpy(h->name, buf, len + 1);
	h->slots = slots;
	h->local = false; /* run_hosts_classify, once the list is known to be valid */
	return 0;
}

/* One "host", "host:N" or "[v6]:N" item. */
static int add_item(run_hosts_t *hs, const char *item, size_t len, const char *what, char *err,
		    size_t err_len)
{
	char tmp[RUN_HOST_NAME_BYTES + 16];
	if (len >= sizeof(tmp)) {
		snprintf(err, err_len, "%s: '%.40s...' is too long", what, item);
		return -1;
	}
	memcpy(tmp, item, len);
	tmp[len] = 0;
	const char *close = tmp[0] == '[' ? strchr(tmp, ']') : NULL;
	char *colon = strrchr(close ? close : tmp, ':');
	if (colon && !close && strchr(tmp, ':') != colon)
		colon = NULL; /* a bare IPv6 address: no slot count */
	int slots = 1;
	if (colon) {
		if (parse_slots(colon + 1, &slots) < 0) {
			snprintf(err, err_len, "%s: '%s': slots must be 1 to 64", what, tmp);
			return -1;
		}
		*colon = 0;
	}
	return add(hs, tmp, strlen(tmp), slots, what, err, err_len);
}

int run_hosts_parse_list(run_hosts_t *hs, const char *list, char *err, size_t err_len)
{
	const char *p = list;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char what[64];
		snprintf(what, sizeof(what), "-H item %d", hs->n + 1);
		if (add_item(hs, p, len, what, err, err_len) < 0)
			return -1;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

int run_hosts_parse_file(run_hosts_t *hs, const char *path, char *err, size_t err_len)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, err_len, "--hostfile %s: %s", path, strerror(errno));
		return -1;
	}
	char line[1024], what[256];
	int lineno = 0, rc = 0, before = hs->n;
	while (rc == 0 && fgets(line, sizeof(line), f)) {
		lineno++;
		snprintf(what, sizeof(what), "%.200s:%d", path, lineno);
		if (!strchr(line, '\n') && !feof(f)) {
			snprintf(err, err_len, "%s: line longer than %zu bytes", what,
				 sizeof(line) - 2);
			rc = -1;
			break;
		}
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char *save = NULL, *host = strtok_r(line, " \t\r\n", &save);
		if (!host)
			continue;
		char *rest = strtok_r(NULL, " \t\r\n", &save);
		if (!rest) {
			rc = add_item(hs, host, strlen(host), what, err, err_len);
			continue;
		}
		int slots;
		if (strncmp(rest, "slots=", 6) || parse_slots(rest + 6, &slots) < 0 ||
		    strtok_r(NULL, " \t\r\n", &save)) {
			snprintf(err, err_len,
				 "%s: expected 'HOST slots=N' (N from 1 to 64), 'HOST:N' or "
				 "'HOST'",
				 what);
			rc = -1;
			break;
		}
		rc = add(hs, host, strlen(host), slots, what, err, err_len);
	}
	if (rc == 0 && ferror(f)) {
		snprintf(err, err_len, "--hostfile %s: %s", path, strerror(errno));
		rc = -1;
	}
	fclose(f);
	if (rc == 0 && hs->n == before) {
		snprintf(err, err_len, "--hostfile %s names no host", path);
		rc = -1;
	}
	return rc;
}

static bool is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	return sa->sa_family == AF_INET6 &&
	       IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

static bool same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return a->sa_family == AF_INET6 &&
	       !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
}

/* Whether one of name's addresses (getaddrinfo) is loopback, or with every_local, an
 * address of one of this machine's interfaces. A name that does not resolve here is
 * neither (the agent may know it, e.g. an ssh alias). */
static bool resolves_local(const char *name, bool every_local)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	struct ifaddrs *ifs = NULL;
	bool found = false;
	if (getaddrinfo(name, NULL, &hints, &res) != 0)
		return false;
	if (every_local && getifaddrs(&ifs) != 0)
		ifs = NULL;
	for (const struct addrinfo *ai = res; ai && !found; ai = ai->ai_next) {
		found = is_loopback(ai->ai_addr);
		for (const struct ifaddrs *i = ifs; i && !found; i = i->ifa_next)
			found = i->ifa_addr && same_addr(ai->ai_addr, i->ifa_addr);
	}
	freeifaddrs(ifs);
	freeaddrinfo(res);
	return found;
}

bool run_host_is_local(const char *name)
{
	char self[RUN_HOST_NAME_BYTES];
	if (!strcmp(name, "localhost"))
		return true;
	if (gethostname(self, sizeof(self)) == 0) {
		self[sizeof(self) - 1] = 0;
		/* "node1" against "node1.example.org", either way round */
		size_t a = strcspn(name, "."), b = strcspn(self, ".");
		if (a == b && !strncmp(name, self, a) && (!name[a] || !self[b]))
			return true;
	}
	return resolves_local(name, true);
}

bool run_host_is_loopback(const char *name)
{
	return resolves_local(name, false);
}

void run_hosts_classify(run_hosts_t *hs)
{
	for (int i = 0; i < hs->n; i++)
		hs->h[i].local = run_host_is_local(hs->h[i].name);
}

void run_hosts_free(run_hosts_t *hs)
{
	free(hs->h);
	hs->h = NULL;
	hs->n = 0;
}
