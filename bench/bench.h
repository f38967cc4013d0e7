/*
 * bench.h: sparsecomm-bench's subcommands. Each bench/<name>.c defines one with
 * BENCH_COMMAND(name, "summary") { ... argc/argv ... }; it registers itself at load time
 * and main.c dispatches `sparsecomm-bench <name> ARGS...` to it.
 */
#ifndef SC_BENCH_H
#define SC_BENCH_H

typedef int (*bench_fn)(int argc, char **argv);

void bench_register(const char *name, const char *summary, bench_fn fn);

#define BENCH_COMMAND(name, summary)                                                           \
	static int bench_cmd_##name(int argc, char **argv);                                    \
	__attribute__((constructor)) static void bench_reg_##name(void)                        \
	{                                                                                      \
		bench_register(#name, summary, bench_cmd_##name);                              \
	}                                                                                      \
	static int bench_cmd_##name(int argc, char **argv)

#endif
