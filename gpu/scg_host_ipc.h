/*
 * scg_host_ipc.h: the host build's stand-in for CUDA IPC handles (gpu/ipc.cu, SCG_HOST),
 * shared with the test stand-in of the CUDA driver that the client library loads in tests
 * (tests/cudahost/). A handle is 64 bytes, as CUDA's: a magic that says memory or event,
 * the object's size and the name of a POSIX shared-memory object (mode 0600) that the
 * exporting process created and unlinks when it frees the memory or destroys the event,
 * and the emulated device it belongs to (the exporting thread's current device), which
 * the driver stand-in checks against the device of the context that opens it. An event's
 * object is one scg_host_event_t: the number of records so far.
 *
 * Emulated device d's UUID (scg_device_uuid, the stand-in's cuDeviceGetUuid_v2) is
 * scg_host_uuid(d), GPU-53434748-0000-0000-0000-0000000000dd in nvidia-smi's spelling, the
 * same in every process, so that the daemon can map a trainer's GPU to its own ordinal.
 */
#ifndef SCG_HOST_IPC_H
#define SCG_HOST_IPC_H

#include <stdint.h>

#define SCG_HOST_IPC_MEM   0x4d474353U /* "SCGM" */
#define SCG_HOST_IPC_EVENT 0x45474353U /* "SCGE" */

typedef struct scg_host_ipc {
	uint32_t magic;
	uint32_t device; /* the emulated device the object belongs to */
	uint64_t bytes;
	char name[48]; /* NUL-terminated */
} scg_host_ipc_t;

typedef struct scg_host_event {
	uint64_t records; /* atomically incremented by every record, in either process */
} scg_host_event_t;

static inline void scg_host_uuid(int d, unsigned char uuid[16])
{
	static const unsigned char head[4] = {0x53, 0x43, 0x47, 0x48}; /* "SCGH" */
	for (int i = 0; i < 16; i++)
		uuid[i] = i < 4 ? head[i] : 0;
	uuid[14] = (unsigned char)((unsigned)d >> 8);
	uuid[15] = (unsigned char)d;
}

#ifdef __cplusplus
static_assert(sizeof(scg_host_ipc_t) == 64, "a CUDA IPC handle is 64 bytes");
#else
_Static_assert(sizeof(scg_host_ipc_t) == 64, "a CUDA IPC handle is 64 bytes");
#endif

#endif
