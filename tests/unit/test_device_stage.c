/*
 * test_device_stage.c: the device-level answers of the registry (device.h: home, lost,
 * backend), what a device shares with trainers (share.h) and the staging between a
 * device's places (stage.h): trivial on the cpu device; on the GPU device (the host build
 * of gpu/, build/lib/libsparsecomm-cuda-host.so, emulating two GPUs), copies from a
 * trainer's GPU to the home GPU and back, a failed copy kept and named, and the trainers'
 * events.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/device.h"
#include "device/share.h"
#include "device/stage.h"
#include "scg.h"
#include "unit.h"

#define OK(x) CHECK_EQ_INT((x), SC_OK)

UNIT_TEST(device_stage_cpu)
{
	const scd_device_ops_t *cpu = &scd_device_cpu_ops;
	CHECK_EQ_INT(cpu->kind, SCD_DEVICE_CPU);
	CHECK_EQ_INT(scd_device_home(SCD_DEVICE_CPU), 0);
	CHECK_TRUE(scd_device_at_home(SCD_DEVICE_CPU, 3));
	CHECK_TRUE(scd_device_lost(SCD_DEVICE_CPU) == NULL);
	CHECK_TRUE(!strcmp(scd_device_backend(SCD_DEVICE_CPU), "cpu"));
	CHECK_TRUE(!strcmp(scd_device_unavailable_reason(SCD_DEVICE_CPU), ""));
	CHECK_TRUE(*scd_device_unavailable_reason(SCD_DEVICE_COUNT) != 0);
	const scd_device_share_t *share = NULL;
	CHECK_EQ_INT(scd_device_share_get(SCD_DEVICE_CPU, &share), SC_ERR_UNSUPPORTED);
	CHECK_TRUE(share == NULL);

	/* every buffer is at home: no area, reads in place, plain copies, no events */
	scd_stage_t pe = {0};
	OK(scd_stage_reserve(&pe, cpu, 1u << 20));
	CHECK_TRUE(pe.buf == NULL && pe.share == NULL && pe.cap == 0);
	CHECK_TRUE(scd_stage_local(&pe, SCD_DEVICE_CPU, 7));
	float a[8], b[8] = {0};
	for (int i = 0; i < 8; i++)
		a[i] = (float)i + 0.5f;
	scd_stage_src_t src = {SCD_DEVICE_CPU, 0, 1, "w"};
	CHECK_TRUE(scd_stage_in(&pe, src, a, sizeof(a), 64) == a);
	OK(scd_stage_from_host(&pe, src, b, a, sizeof(a)));
	CHECK_TRUE(!memcmp(a, b, sizeof(a)));
	char err[256] = "";
	OK(scd_stage_event(src, (void *)a, 0, err, sizeof(err)));
	OK(scd_stage_event(src, (void *)a, 1, err, sizeof(err)));
	CHECK_TRUE(err[0] == 0 && pe.st == SC_OK);
	scd_stage_free(&pe);

	/* host staging: kept while large enough, grown when not */
	scd_stage_host_t h = {0};
	char *p = scd_stage_host_get(&h, cpu, 100);
	CHECK_TRUE(p != NULL && h.cap == 100);
	memset(p, 1, 100);
	CHECK_TRUE(scd_stage_host_get(&h, cpu, 50) == p);
	p = scd_stage_host_get(&h, cpu, 1u << 16);
	CHECK_TRUE(p != NULL && h.cap == 1u << 16);
	memset(p, 2, 1u << 16);
	scd_stage_host_free(&h);
	CHECK_TRUE(h.p == NULL && h.cap == 0);
}

/* The GPU device on the host build of gpu/ next to this runner, two GPUs emulated, its
 * home GPU 1; skips, saying why, where that library is not built. */
static const scd_device_ops_t *host_gpus(void)
{
	char dir[4096], path[4200];
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	if (n <= 0)
		unit_skip("cannot read /proc/self/exe");
	dir[n] = 0;
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	snprintf(path, sizeof(path), "%s/../lib/libsparsecomm-cuda-host.so", dir);
	if (access(path, R_OK) != 0)
		unit_skip("%s is not built (the CUDA toolkit's headers are missing)", path);
	setenv("SPARSECOMM_CUDA_LIB", path, 1);
	setenv("SCG_HOST_DEVICES", "2", 1);
	scd_device_home_set(SCD_DEVICE_CUDA, 1);
	const scd_device_ops_t *dev = NULL;
	sc_status_t st = scd_device_get(SCD_DEVICE_CUDA, &dev);
	CHECK_MSG(st == SC_OK, "the host GPU library: %s",
		  scd_device_unavailable_reason(SCD_DEVICE_CUDA));
	return dev;
}

UNIT_TEST(device_stage_gpus)
{
	enum { N = 1000 };
	const scd_device_ops_t *dev = host_gpus();
	CHECK_EQ_INT(dev->kind, SCD_DEVICE_CUDA);
	CHECK_EQ_INT(scd_device_home(SCD_DEVICE_CUDA), 1);
	CHECK_TRUE(scd_device_at_home(SCD_DEVICE_CUDA, 1) &&
		   !scd_device_at_home(SCD_DEVICE_CUDA, 0));
	CHECK_TRUE(scd_device_lost(SCD_DEVICE_CUDA) == NULL);
	CHECK_TRUE(!strcmp(scd_device_backend(SCD_DEVICE_CUDA), "host"));
	const scd_device_share_t *share = NULL;
	int gpus = 0;
	OK(scd_device_share_get(SCD_DEVICE_CUDA, &share));
	OK(share->devices(&gpus));
	CHECK_EQ_INT(gpus, 2);

	/* a trainer's buffer on GPU 0, the result written there from the home */
	unsigned char handle[SCG_IPC_HANDLE_BYTES];
	void *theirs = NULL;
	OK(share->alloc(0, N * sizeof(float), &theirs, handle));
	float host[N], back[N];
	for (int i = 0; i < N; i++)
		host[i] = (float)i;
	float *home = dev->alloc(N * sizeof(float));
	CHECK_TRUE(home != NULL);
	dev->from_host(home, host, sizeof(host));
	scd_stage_src_t s0 = {SCD_DEVICE_CUDA, 0, 1, "w"};
	char err[300] = "";
	OK(scd_stage_out(s0, theirs, home, sizeof(host), err, sizeof(err)));

	/* read on the home through the area: a kernel there sums it */
	scd_stage_t pe = {0};
	OK(scd_stage_reserve(&pe, dev, sizeof(host)));
	CHECK_TRUE(pe.buf != NULL && pe.cap >= sizeof(host));
	CHECK_TRUE(!scd_stage_local(&pe, SCD_DEVICE_CUDA, 0));
	CHECK_TRUE(scd_stage_local(&pe, SCD_DEVICE_CUDA, 1));
	const float *in = scd_stage_in(&pe, s0, theirs, sizeof(host), 0);
	CHECK_TRUE(in != theirs);
	dev->reduce_sum(home, in, N);
	OK(dev->sync());
	CHECK_EQ_INT(pe.st, SC_OK);
	dev->to_host(back, home, sizeof(back));
	for (int i = 0; i < N; i++)
		CHECK_TRUE(back[i] == 2.0f * (float)i);

	/* host memory to GPU 0 through the area, read back the same way */
	for (int i = 0; i < N; i++)
		host[i] = 3.0f * (float)i;
	OK(scd_stage_from_host(&pe, s0, theirs, host, sizeof(host)));
	dev->clear(home, sizeof(host));
	scd_stage_copy_in(&pe, s0, home, theirs, sizeof(host));
	OK(dev->sync());
	dev->to_host(back, home, sizeof(back));
	CHECK_TRUE(!memcmp(back, host, sizeof(back)));

	/* a copy that fails (home's memory named as GPU 0's) is kept, the first one only,
	 * naming the tensor, the trainer and both GPUs; the next job starts clean */
	scd_stage_copy_in(&pe, s0, pe.buf, home, 64);
	CHECK_TRUE(pe.st != SC_OK);
	CHECK_MSG(strstr(pe.what, "tensor 'w', local rank 1") && strstr(pe.what, "cuda:0") &&
		      strstr(pe.what, "cuda:1"),
		  "%s", pe.what);
	scd_stage_src_t s2 = {SCD_DEVICE_CUDA, 0, 2, "v"};
	scd_stage_copy_in(&pe, s2, pe.buf, home, 64);
	CHECK_MSG(strstr(pe.what, "tensor 'w'") != NULL, "%s", pe.what);
	OK(scd_stage_reserve(&pe, dev, 16));
	CHECK_TRUE(pe.st == SC_OK && pe.what[0] == 0 && pe.cap >= sizeof(host));
	/* nothing off home: the area is not used */
	OK(scd_stage_reserve(&pe, dev, 0));
	CHECK_TRUE(scd_stage_local(&pe, SCD_DEVICE_CUDA, 0));
	CHECK_TRUE(scd_stage_in(&pe, s0, theirs, 4, 0) == theirs);

	/* a result copy that fails says so */
	scd_stage_src_t wrong = {SCD_DEVICE_CUDA, 0, 3, "u"};
	CHECK_TRUE(scd_stage_out(wrong, home, home, 64, err, sizeof(err)) != SC_OK);
	CHECK_MSG(strstr(err, "tensor 'u', local rank 3: copying the result to its cuda:0"),
		  "%s", err);

	/* a trainer's events on GPU 0: recorded there, waited on from the home */
	void *ev = NULL;
	OK(share->event_create(0, &ev, handle));
	OK(scd_stage_event(s0, ev, 1, err, sizeof(err)));
	OK(scd_stage_event(s0, ev, 0, err, sizeof(err)));
	OK(scd_stage_event(s0, NULL, 1, err, sizeof(err)));
	scd_stage_src_t s1 = {SCD_DEVICE_CUDA, 1, 2, "v"};
	CHECK_TRUE(scd_stage_event(s1, ev, 1, err, sizeof(err)) != SC_OK);
	CHECK_MSG(strstr(err, "tensor 'v', local rank 2: its done event"), "%s", err);

	/* host staging of the GPU's buffers */
	scd_stage_host_t h = {0};
	void *p = scd_stage_host_get(&h, dev, 4096);
	CHECK_TRUE(p != NULL);
	dev->to_host(p, home, sizeof(host)); /* home holds N floats */
	scd_stage_host_free(&h);

	OK(share->event_destroy(0, ev));
	OK(share->free(0, theirs));
	dev->free(home);
	scd_stage_free(&pe);
	CHECK_TRUE(pe.buf == NULL);
	OK(dev->sync());
}
