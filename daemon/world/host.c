/*
 * host.c: a daemon's host identity and cores, and the nodes per core of a world's
 * busiest host (host.h).
 */
#include "world/host.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"

/* FNV-1a of the file's first line (up to 127 bytes) into h; returns 1 when it was read. */
static int hash_file(const char *path, uint64_t *h)
{
	char buf[128];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n;
	do
		n = read(fd, buf, sizeof(buf) - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n <= 0)
		return 0;
	for (ssize_t i = 0; i < n && buf[i] != '\n'; i++) {
		*h ^= (uint8_t)buf[i];
		*h *= 0x100000001b3ull;
	}
	return 1;
}

scd_host_t scd_host_self(void)
{
	scd_host_t h = {0, 0};
	uint64_t id = 0xcbf29ce484222325ull;
	int got = hash_file("/proc/sys/kernel/random/boot_id", &id);
	got += hash_file("/etc/machine-id", &id);
	h.id = got ? (id ? id : 1) : 0;
	cpu_set_t set;
	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		h.cores = (uint32_t)CPU_COUNT(&set);
	else
		scd_warn(SCD_SUB_WORLD,
			 "sched_getaffinity: %s (this node's cores unknown: its host counts as "
			 "a core a node)",
			 strerror(errno));
	if (!got)
		scd_warn(SCD_SUB_WORLD, "neither the boot id nor the machine id can be read: "
					"this node counts as a host of its own");
	return h;
}

/* Daemon i's host in scd_host_cpu_share's list. */
static const scd_host_t *host_at(const scd_host_t *hosts, size_t stride, int i)
{
	return (const scd_host_t *)((const char *)hosts + (size_t)i * stride);
}

double scd_host_cpu_share(const scd_host_t *hosts, size_t stride, int n)
{
	double share = 1;
	for (int i = 0; i < n; i++) {
		const scd_host_t *hi = host_at(hosts, stride, i);
		int first = 1, daemons = 0;
		uint32_t cores = 0;
		for (int j = 0; j < i && first; j++) /* each host counted at its first daemon */
			first = !(hi->id && host_at(hosts, stride, j)->id == hi->id);
		if (!first)
			continue;
		for (int j = i; j < n; j++) {
			const scd_host_t *hj = host_at(hosts, stride, j);
			if (j == i || (hi->id && hj->id == hi->id)) {
				daemons++;
				cores = hj->cores > cores ? hj->cores : cores;
			}
		}
		double s = (double)daemons / (cores ? cores : (uint32_t)daemons);
		share = s > share ? s : share;
	}
	return share;
}
