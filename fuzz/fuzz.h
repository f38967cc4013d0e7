/*
 * fuzz.h: what the libFuzzer harnesses (fuzz/fuzz_*.c) share. Each harness feeds one family
 * of decoders of untrusted input and checks what a successful decode promises (indices
 * below numel and ascending, counts within the room given); a broken promise aborts, which
 * libFuzzer reports as a crash, as it does every ASan or UBSan error.
 */
#ifndef SC_FUZZ_H
#define SC_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Fails the run, naming the broken promise. */
#define FUZZ_REQUIRE(cond)                                                                     \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			fprintf(stderr, "%s:%d: decoder promise broken: %s\n", __FILE__,       \
				__LINE__, #cond);                                              \
			abort();                                                               \
		}                                                                              \
	} while (0)

/* The daemon's logging off: a malformed input is logged where it is refused, millions of
 * times in a run. */
static inline void fuzz_quiet(void)
{
	scd_log_subsystems = 0;
}

/* Reads a little-endian field off the front of the input, 0 past its end. */
static inline uint64_t fuzz_take(const uint8_t **data, size_t *size, size_t n)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n && *size; i++, (*data)++, (*size)--)
		v |= (uint64_t) * *data << (8 * i);
	return v;
}

/* A copy of the rest of the input in its own 8-aligned allocation of exactly its size, as
 * a receive buffer holds it (ASan then catches a read past its end). */
static inline void *fuzz_copy(const uint8_t *data, size_t size)
{
	void *b = malloc(size ? size : 1);
	if (b && size)
		memcpy(b, data, size);
	return b;
}

/* The indices of a decoded list are below numel and strictly ascending. */
static inline void fuzz_check_list(const uint32_t *idx, uint64_t n, uint64_t numel)
{
	for (uint64_t i = 0; i < n; i++) {
		FUZZ_REQUIRE(idx[i] < numel);
		FUZZ_REQUIRE(i == 0 || idx[i] > idx[i - 1]);
	}
}

#endif
