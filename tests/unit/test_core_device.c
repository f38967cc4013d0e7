/*
 * test_core_device.c: the device registry and the cpu ops table (device/device.h): the
 * cpu device is always there with every op filled; cuda is "not supported" in a build
 * without it; an op called through the table behaves as the plain function.
 */
#include "unit.h"

#include "device/device.h"

#include <string.h>

UNIT_TEST(core_device_registry)
{
	const scd_device_ops_t *ops = NULL;
	CHECK_EQ_INT(scd_device_get(SCD_DEVICE_CPU, &ops), SC_OK);
	CHECK_TRUE(ops && !strcmp(ops->name, "cpu"));
	/* every member after the name is a function pointer, all must be set */
	void (*const *fns)(void) = (void (*const *)(void))((const char *)ops + sizeof(char *));
	size_t nfns = (sizeof(*ops) - sizeof(char *)) / sizeof(void (*)(void));
	for (size_t i = 0; i < nfns; i++)
		CHECK_MSG(fns[i] != NULL, "cpu op #%zu is missing", i);
	const scd_device_ops_t *cuda = NULL;
	sc_status_t st = scd_device_get(SCD_DEVICE_CUDA, &cuda);
	CHECK_TRUE(st == SC_ERR_UNSUPPORTED || (st == SC_OK && cuda));
	CHECK_EQ_INT(scd_device_get(SCD_DEVICE_COUNT, &cuda), SC_ERR_UNSUPPORTED);
	/* through the table: a reduction and a scatter-add */
	float a[5] = {1, 2, 3, 4, 5}, b[5] = {1, 1, 1, 1, 1};
	ops->reduce_sum(a, b, 5);
	CHECK_TRUE(a[0] == 2 && a[4] == 6);
	uint32_t idx[2] = {0, 4};
	float val[2] = {10, 20};
	scd_coo_t c = {idx, val, 2, 2};
	ops->coo_scatter_add(a, &c);
	CHECK_TRUE(a[0] == 12 && a[4] == 26 && a[2] == 4);
}
