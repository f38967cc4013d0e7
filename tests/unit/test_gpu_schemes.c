/*
 * test_gpu_schemes.c: every scheme of the registry on the GPU device's table, against the
 * cpu device. In sparsecomm-unit the table is built from the host build of gpu/ (whose
 * memory is host memory), wrapped in the guard of test_device_guard.c (so no scheme reads
 * its memory outside an op), and every case of device_guard_<scheme> must give the cpu
 * device's results and residuals bit for bit: gpu_schemes_<scheme>. This is the test of
 * the ops as the schemes use them (orders of calls, capacities, in-place arguments), where
 * test_gpu_*.c test each op alone.
 */
#include "unit.h"

#include "device_guard.h"
#include "gpu_fns.h"

#ifndef SCG_TEST_GPU

/* The host build's complete table (the test fails naming the missing ops otherwise). */
static const scd_device_ops_t *host_gpu_device(void)
{
	static scd_device_ops_t ops;
	gpu_linked_table(&ops);
	return &ops;
}

#define GPU_SCHEME_TEST_(id, name)                                                             \
	UNIT_TEST_TIMEOUT(gpu_schemes_##name, 600)                                             \
	{                                                                                      \
		device_guard_compare(SCD_SCHEME_##id, host_gpu_device());                      \
	}
SCD_SCHEMES(GPU_SCHEME_TEST_)

#else

UNIT_TEST(gpu_schemes)
{
	unit_skip(
	    "the schemes on GPU memory need a transport that moves device memory "
	    "(tcp reads host memory); here they run on the host build, in sparsecomm-unit");
}

#endif
