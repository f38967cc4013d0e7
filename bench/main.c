/* main.c: sparsecomm-bench, the benchmark driver; dispatches to the registered commands. */
#include "bench.h"

#include <stdio.h>
#include <string.h>

#define BENCH_MAX 32

static struct {
	const char *name, *summary;
	bench_fn fn;
} commands[BENCH_MAX];
static int n_commands;

void bench_register(const char *name, const char *summary, bench_fn fn)
{
	if (n_commands < BENCH_MAX)
		commands[n_commands++] = (typeof(commands[0])){name, summary, fn};
}

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: sparsecomm-bench COMMAND [ARGS...]   (COMMAND --help for its options)\n");
	for (int i = 0; i < n_commands; i++)
		fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (int i = 0; i < n_commands; i++)
		if (!strcmp(commands[i].name, argv[1]))
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "sparsecomm-bench: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
