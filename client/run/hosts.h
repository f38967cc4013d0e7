/*
 * hosts.h: the hosts of a multi-host job (sparsecomm-run -H, --hostfile): one daemon per
 * host, with as many trainers as the host has slots.
 *
 *   -H host1:4,host2:4        a comma-separated list; ":N" omitted means one slot
 *   --hostfile FILE           one host a line, "host slots=N" or "host:N" or "host";
 *                             '#' starts a comment, blank lines are skipped
 *
 * An IPv6 address goes in brackets, [fd00::1]:4. A host is local (run without the
 * remote-shell agent) when it is this machine (run_host_is_local).
 */
#ifndef SC_RUN_HOSTS_H
#define SC_RUN_HOSTS_H

#include <stdbool.h>
#include <stddef.h>

#define RUN_HOST_NAME_BYTES 256
#define RUN_HOSTS_MAX	    4096

typedef struct run_host {
	char name[RUN_HOST_NAME_BYTES]; /* without brackets */
	int slots;
	bool local;
} run_host_t;

typedef struct run_hosts {
	run_host_t *h;
	int n;
} run_hosts_t;

/* Appends the hosts of a -H list. -1 with the reason in err (naming the item) on error. */
int run_hosts_parse_list(run_hosts_t *hs, const char *list, char *err, size_t err_len);
/* Appends the hosts of a host file; err names the file and line on error. */
int run_hosts_parse_file(run_hosts_t *hs, const char *path, char *err, size_t err_len);
/* Whether name is this machine: localhost, gethostname()'s name (with or without its
 * domain), or a name or address that resolves (getaddrinfo) to a loopback address or an
 * address of one of this machine's interfaces. */
bool run_host_is_local(const char *name);
/* Whether name resolves here to a loopback address (as a host's own name often does in
 * /etc/hosts: Debian's 127.0.1.1). */
bool run_host_is_loopback(const char *name);
/* Sets every host's local flag (run_host_is_local: names are resolved). */
void run_hosts_classify(run_hosts_t *hs);
void run_hosts_free(run_hosts_t *hs);

#endif
