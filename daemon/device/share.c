/*
 * share.c: the device-level face of what the GPU device shares with trainers (share.h),
 * answered by the registry's cuda slot (cuda.c, cuda_free.c).
 */
#include "device/share.h"

#include "device/cuda.h"
#include "device/cuda_free.h"

sc_status_t scd_device_share_get(scd_device_kind_t kind, const scd_device_share_t **share_p)
{
	if (kind != SCD_DEVICE_CUDA)
		return SC_ERR_UNSUPPORTED;
	return scd_cuda_ipc_get(share_p);
}

size_t scd_device_share_bytes(size_t bytes)
{
	return scg_ipc_bytes(bytes);
}

const char *scd_device_uuid_text(const unsigned char *uuid, char *buf)
{
	return scd_cuda_uuid_text(uuid, buf);
}

void scd_device_share_free_async(const scd_device_share_t *share, int ordinal, void *mem,
				 void *ready, void *done, const char *what)
{
	scd_cuda_free_async(share, ordinal, mem, ready, done, what);
}

int scd_device_share_drain(int timeout_ms)
{
	return scd_cuda_free_drain(timeout_ms);
}
