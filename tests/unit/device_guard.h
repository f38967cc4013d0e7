/*
 * device_guard.h: the guarded scheme runs of test_device_guard.c, offered to the tests of
 * other devices whose memory is host memory (test_gpu_schemes.c: the host build of the GPU
 * device).
 */
#ifndef SC_UNIT_DEVICE_GUARD_H
#define SC_UNIT_DEVICE_GUARD_H

#include "device/device.h"
#include "scheme/registry.h"

/* Scheme s's guard cases (every P of 2..4, whole and streamed messages) run through the
 * guard over the cpu device and over dev; each run checked as device_guard_<scheme>
 * checks it, and dev's results and residuals must equal the cpu's bit for bit (the cases'
 * values are small integers, so every sum is exact in any order). */
void device_guard_compare(scd_scheme_t s, const scd_device_ops_t *dev);

#endif
