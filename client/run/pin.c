/* pin.c: see pin.h. */
#include "pin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends set as a cpulist ("0", "2-3", "0,2") to buf (cap bytes, NUL-terminated): 0, or
 * -1 when it does not fit. */
static int cpulist(const cpu_set_t *set, char *buf, size_t cap)
{
	size_t len = strlen(buf);
	const char *sep = "";
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, set))
			continue;
		int last = c;
		while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set))
			last++;
		int n = last > c ? snprintf(buf + len, cap - len, "%s%d-%d", sep, c, last)
				 : snprintf(buf + len, cap - len, "%s%d", sep, c);
		if (n < 0 || (size_t)n >= cap - len)
			return -1;
		len += (size_t)n;
		sep = ",";
		c = last;
	}
	return 0;
}

int run_pin_plan(run_pin_t *p, int nodes)
{
	*p = (run_pin_t){.nodes = nodes};
	cpu_set_t all;
	if (sched_getaffinity(0, sizeof(all), &all) < 0) {
		fprintf(stderr, "sparsecomm-run: --pin-nodes: sched_getaffinity: %s\n",
			strerror(errno));
		return -1;
	}
	int cpus[CPU_SETSIZE], C = 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all))
			cpus[C++] = c;
	/* a CPU is at most 4 digits and a separator in the lists; each node adds a space,
	 * and where there are more nodes than CPUs each node lists one CPU of its own */
	size_t cap = 5 * ((size_t)C + (size_t)nodes) + (size_t)nodes + 1;
	p->sets = calloc((size_t)nodes, sizeof(*p->sets));
	p->list = calloc(1, cap);
	if (!p->sets || !p->list || C == 0) {
		fprintf(stderr, "sparsecomm-run: --pin-nodes: %s\n",
			C == 0 ? "no CPU in this process's affinity mask" : "out of memory");
		run_pin_free(p);
		return -1;
	}
	for (int i = 0; i < nodes; i++) {
		CPU_ZERO(&p->sets[i]);
		if (nodes > C)
			CPU_SET(cpus[i % C], &p->sets[i]);
		else
			for (int k = i * C / nodes; k < (i + 1) * C / nodes; k++)
				CPU_SET(cpus[k], &p->sets[i]);
		size_t len = strlen(p->list);
		int fits = !i || len + 1 < cap;
		if (fits && i) {
			p->list[len] = ' ';
			p->list[len + 1] = '\0';
		}
		if (!fits || cpulist(&p->sets[i], p->list, cap) < 0) {
			fprintf(stderr,
				"sparsecomm-run: --pin-nodes: the CPU lists do not fit\n");
			run_pin_free(p);
			return -1;
		}
	}
	return 0;
}

void run_pin_apply(const run_pin_t *p, int node)
{
	if (!p || !p->sets || node < 0 || node >= p->nodes)
		return;
	if (sched_setaffinity(0, sizeof(p->sets[node]), &p->sets[node]) < 0)
		fprintf(stderr, "sparsecomm-run: node %d: cannot pin it to its CPUs: %s\n",
			node, strerror(errno));
}

void run_pin_free(run_pin_t *p)
{
	free(p->sets);
	free(p->list);
	p->sets = NULL;
	p->list = NULL;
}
