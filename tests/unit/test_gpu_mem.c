/*
 * test_gpu_mem.c: the GPU device's memory and streams (gpu/mem.cu) and the cuda slot of
 * the device registry (daemon/device/cuda.c). In sparsecomm-unit they run on the host
 * build of gpu/ (libscgpu-host.a); in sparsecomm-unit-gpu (make test-gpu, -DSCG_TEST_GPU)
 * the same tests run on the CUDA build. Device memory is only touched through scg_* or
 * the ops table.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/cuda.h"
#include "scg.h"
#include "unit.h"

#define OK(x) CHECK_EQ_INT((x), SC_OK)

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)unit_rng();
}

/* The host build's (or, under SCG_TEST_GPU, the CUDA build's) functions. */
static scd_cuda_fns_t linked_fns(void)
{
	scd_cuda_fns_t f = {
	    .error = scg_error,
	    .backend = scg_backend,
	    .init = scg_init,
	    .stream_set = scg_stream_set,
	    .alloc = scg_alloc,
	    .free = scg_free,
	    .clear = scg_clear,
	    .copy = scg_copy,
	    .to_host = scg_to_host,
	    .from_host = scg_from_host,
	    .sync = scg_sync,
	};
	return f;
}

UNIT_TEST(gpu_mem_backend)
{
#ifdef SCG_TEST_GPU
	CHECK_TRUE(!strcmp(scg_backend(), "cuda"));
#else
	CHECK_TRUE(!strcmp(scg_backend(), "host"));
#endif
	OK(scg_init(0));
	CHECK_EQ_INT(scg_init(-1), SC_ERR_UNSUPPORTED);
	CHECK_TRUE(scg_error()[0] != '\0');
}

UNIT_TEST(gpu_mem_round_trip)
{
	OK(scg_init(0));
	for (int round = 0; round < 20; round++) {
		size_t n =
		    round == 0 ? 0 : (size_t)unit_rng_below(round < 10 ? 64 : 1 << 20) + 1;
		uint8_t *src = malloc(n + 1), *back = malloc(n + 1), *zero = calloc(1, n + 1);
		CHECK_TRUE(src && back && zero);
		fill_random(src, n);
		void *a = NULL, *b = NULL;
		OK(scg_alloc(n, &a));
		OK(scg_alloc(n, &b));
		CHECK_TRUE(a && b);
		/* zeroed */
		memset(back, 0xa5, n);
		OK(scg_to_host(back, a, n));
		CHECK_TRUE(memcmp(back, zero, n) == 0);
		/* host -> a -> b -> host */
		OK(scg_from_host(a, src, n));
		OK(scg_copy(b, a, n));
		OK(scg_to_host(back, b, n));
		CHECK_TRUE(memcmp(back, src, n) == 0);
		/* a cleared range of b */
		if (n) {
			size_t lo = (size_t)unit_rng_below(n),
			       len = (size_t)unit_rng_below(n - lo + 1);
			OK(scg_clear((uint8_t *)b + lo, len));
			OK(scg_sync());
			memset(src + lo, 0, len);
			OK(scg_to_host(back, b, n));
			CHECK_TRUE(memcmp(back, src, n) == 0);
		}
		OK(scg_sync());
		OK(scg_free(a));
		OK(scg_free(b));
		free(src);
		free(back);
		free(zero);
	}
	OK(scg_free(NULL));
	OK(scg_sync());
}

/* The same memory sequence through the partial cuda table and the cpu device gives the
 * same bytes. */
UNIT_TEST(gpu_mem_ops_table)
{
	scd_cuda_fns_t f = linked_fns();
	scd_device_ops_t ops;
	char missing[4096];
	unsigned n_missing = scd_cuda_ops_fill(&f, &ops, missing, sizeof missing);
	CHECK_TRUE(!strcmp(ops.name, "cuda"));
	CHECK_TRUE(n_missing > 0 && n_missing < SCD_DEVICE_OPS_COUNT);
	CHECK_EQ_INT(n_missing, SCD_DEVICE_OPS_COUNT - 7);
	CHECK_MSG(strstr(missing, "sparsify") && !strstr(missing, "alloc") &&
		      !strstr(missing, "to_host"),
		  "missing: %s", missing);
	CHECK_TRUE(ops.alloc && ops.free && ops.clear && ops.copy && ops.to_host &&
		   ops.from_host && ops.sync);
	CHECK_TRUE(!ops.sparsify && !ops.reduce_sum);

	const scd_device_ops_t *cpu = &scd_device_cpu_ops;
	for (int round = 0; round < 10; round++) {
		size_t n = (size_t)unit_rng_below(1 << 16) + 1;
		uint8_t *src = malloc(n), *got = malloc(n), *want = malloc(n);
		CHECK_TRUE(src && got && want);
		fill_random(src, n);
		size_t lo = (size_t)unit_rng_below(n), len = (size_t)unit_rng_below(n - lo + 1);
		const scd_device_ops_t *devs[2] = {&ops, cpu};
		uint8_t *outs[2] = {got, want};
		for (int d = 0; d < 2; d++) {
			const scd_device_ops_t *o = devs[d];
			uint8_t *a = o->alloc(n), *b = o->alloc(n);
			CHECK_TRUE(a && b);
			o->from_host(a, src, n);
			o->copy(b, a, n);
			o->clear(b + lo, len);
			OK(o->sync());
			o->to_host(outs[d], b, n);
			OK(o->sync());
			o->free(a);
			o->free(b);
		}
		CHECK_TRUE(memcmp(got, want, n) == 0);
		free(src);
		free(got);
		free(want);
	}
	OK(ops.sync());
}

/* A failing op without a status: its first failure comes back from sync, once. */
static sc_status_t failing_copy(void *dst, const void *src, size_t bytes)
{
	(void)dst;
	(void)src;
	(void)bytes;
	return SC_ERR_SYSTEM;
}

UNIT_TEST(gpu_mem_ops_sticky_failure)
{
	scd_cuda_fns_t f = linked_fns();
	f.copy = failing_copy;
	scd_device_ops_t ops;
	scd_cuda_ops_fill(&f, &ops, NULL, 0);
	void *a = ops.alloc(64), *b = ops.alloc(64);
	CHECK_TRUE(a && b);
	OK(ops.sync());
	ops.copy(b, a, 64);
	ops.clear(a, 64); /* still works; the first failure is kept */
	CHECK_EQ_INT(ops.sync(), SC_ERR_SYSTEM);
	OK(ops.sync());
	/* out of memory: NULL, not a sticky failure */
	CHECK_TRUE(ops.alloc((size_t)1 << 62) == NULL);
	OK(ops.sync());
	ops.free(a);
	ops.free(b);
	OK(ops.sync());
}

#ifndef SCG_TEST_GPU
/* On a machine without a GPU (or without the library) the cuda slot says so, with a
 * reason, the same every time. */
UNIT_TEST(gpu_device_cuda_unavailable)
{
	const scd_device_ops_t *ops = NULL;
	sc_status_t st = scd_device_get(SCD_DEVICE_CUDA, &ops);
	const char *why = scd_cuda_unavailable_reason();
	printf("        cuda: %s\n", st == SC_OK ? "available" : why);
	if (st == SC_OK) {
		/* a machine with a GPU and every op built */
		CHECK_TRUE(ops && !strcmp(ops->name, "cuda"));
		return;
	}
	CHECK_EQ_INT(st, SC_ERR_UNSUPPORTED);
	CHECK_TRUE(ops == NULL && why[0] != '\0');
	CHECK_EQ_INT(scd_device_get(SCD_DEVICE_CUDA, &ops), SC_ERR_UNSUPPORTED);
	CHECK_TRUE(ops == NULL);
	OK(scd_device_get(SCD_DEVICE_CPU, &ops));
	CHECK_TRUE(ops == &scd_device_cpu_ops);
}

UNIT_TEST(gpu_device_cuda_no_library)
{
	setenv("SPARSECOMM_CUDA_LIB", "/nonexistent/libsparsecomm-cuda.so", 1);
	const scd_device_ops_t *ops = NULL;
	CHECK_EQ_INT(scd_device_get(SCD_DEVICE_CUDA, &ops), SC_ERR_UNSUPPORTED);
	const char *why = scd_cuda_unavailable_reason();
	CHECK_MSG(strstr(why, "cannot load /nonexistent/libsparsecomm-cuda.so"), "reason: %s",
		  why);
}

/* Nothing CUDA-related is linked into the daemon, and it starts without a GPU driver:
 * sparsecommd (next to this runner) reaches "ready" as a world of one. */
static int bin_dir(char *dir, size_t cap)
{
	ssize_t n = readlink("/proc/self/exe", dir, cap - 1);
	if (n <= 0)
		return 0;
	dir[n] = '\0';
	char *slash = strrchr(dir, '/');
	if (!slash)
		return 0;
	*slash = '\0';
	return 1;
}

UNIT_TEST_TIMEOUT(gpu_daemon_starts_without_cuda, 30)
{
	char dir[4096], path[4200], cmd[4300], line[512];
	CHECK_TRUE(bin_dir(dir, sizeof dir));
	snprintf(path, sizeof path, "%s/sparsecommd", dir);
	if (access(path, X_OK) != 0)
		unit_skip("%s is not built", path);
	/* its dynamic dependencies */
	snprintf(cmd, sizeof cmd, "readelf -d '%s' 2>/dev/null", path);
	FILE *p = popen(cmd, "r");
	CHECK_TRUE(p);
	int needed = 0;
	while (fgets(line, sizeof line, p)) {
		if (!strstr(line, "(NEEDED)"))
			continue;
		needed++;
		CHECK_MSG(!strstr(line, "cuda") && !strstr(line, "nvidia") &&
			      !strstr(line, "nccl"),
			  "sparsecommd needs %s", line);
	}
	pclose(p);
	if (!needed)
		printf("        (readelf unavailable: dependencies not checked)\n");

	/* it starts: READY=1 on its notify fd */
	char rundir[] = "/tmp/sc-gpu-unit.XXXXXX";
	CHECK_TRUE(mkdtemp(rundir));
	int fd[2];
	CHECK_TRUE(pipe(fd) == 0);
	unsigned port = 20000 + (unsigned)unit_rng_below(30000);
	pid_t pid = fork();
	CHECK_TRUE(pid >= 0);
	if (pid == 0) {
		close(fd[0]);
		char nfd[16], coord[64];
		snprintf(nfd, sizeof nfd, "%d", fd[1]);
		snprintf(coord, sizeof coord, "127.0.0.1:%u", port);
		int devnull = open("/dev/null", O_WRONLY);
		if (devnull >= 0) {
			dup2(devnull, 1);
			dup2(devnull, 2);
		}
		unsetenv("SPARSECOMM_CONFIG");
		setenv("CUDA_VISIBLE_DEVICES", "", 1);
		execl(path, path, "--runtime_dir", rundir, "--coordinator", coord,
		      "--notify-fd", nfd, (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	struct pollfd pfd = {.fd = fd[0], .events = POLLIN};
	char got[32] = {0};
	int ready = 0;
	if (poll(&pfd, 1, 20000) == 1 && read(fd[0], got, sizeof got - 1) > 0)
		ready = strstr(got, "READY=1") != NULL;
	close(fd[0]);
	kill(pid, SIGTERM);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", rundir);
	if (system(cmd) != 0)
		printf("        could not remove %s\n", rundir);
	CHECK_MSG(ready, "sparsecommd did not report ready (status %d)", status);
}
#endif
