/*
 * cuda_free.h: freeing what the daemon shares with trainers on the GPU (a registration's
 * memory and its two interprocess events, scd_cuda_ipc_t) off the calling thread.
 *
 * cudaFree waits for the whole device, the NCCL work in flight included, and the loop
 * thread, which owns the registrations, frees them when a trainer unregisters a tensor or
 * exits: freed there, a long collective on the GPU would hold up the loop's heartbeats,
 * control requests and every other trainer. scd_cuda_free_async hands the pointers to one
 * thread of this module's, which frees them in the order given. By then nothing of the
 * daemon refers to them (the registration is gone; a buffer the engine still reads is a
 * zombie until the engine is done, ctl/tensor.c), and cudaFree itself waits for the work
 * queued on the device before it returns the memory.
 */
#ifndef SCD_DEVICE_CUDA_FREE_H
#define SCD_DEVICE_CUDA_FREE_H

#include <stdint.h>

#include "device/cuda.h"

/* Queues the release of mem (an allocation of ipc->alloc) and the events ready and done
 * (of ipc->event_create; NULL: none) on GPU ordinal; what names them in a warning if
 * freeing fails ("tensor 'w', local rank 1"). Returns at once. Without memory or a thread
 * for the queue, frees them here (and says so once). */
void scd_cuda_free_async(const scd_cuda_ipc_t *ipc, int ordinal, void *mem, void *ready,
			 void *done, const char *what);

/* Waits until everything queued so far is freed, at most timeout_ms; 0 when it is, -1 on
 * timeout (logged). For shutdown, which must leave no exported memory behind. */
int scd_cuda_free_drain(int timeout_ms);

/* Releases queued and done so far (for tests). */
void scd_cuda_free_counts(uint64_t *queued, uint64_t *done);

#endif
