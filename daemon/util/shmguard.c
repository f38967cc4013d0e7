/*
 * shmguard.c: the SIGBUS handler over the daemon's shared mappings (see shmguard.h).
 *
 * The table is read by the handler on whichever thread faulted, so it is made of chunks
 * that are allocated once and never freed or moved, and each slot's fields are atomics:
 * the length is stored before the start that publishes a slot, and the start is cleared
 * before its mapping goes away. Adding and removing take a mutex (writers only). The
 * handler replaces the whole faulting mapping with a private anonymous one (one
 * mapping still, never split) through the raw system call (MAP_FIXED is atomic: the range is
 * never unmapped in between), so the access it interrupted and all later ones read zeros.
 */
#include "util/shmguard.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CHUNK_SLOTS 4096u
#define MAX_CHUNKS  256u /* 1 Mi mappings, far above the kernel's vm.max_map_count */

typedef struct {
	_Atomic uintptr_t start; /* 0: free */
	_Atomic size_t len;
	_Atomic uint64_t lost_at; /* UINT64_MAX: nothing lost */
} slot_t;

static _Atomic(slot_t *) chunks[MAX_CHUNKS];
static _Atomic uint32_t n_chunks;
static _Atomic uint64_t n_faults;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t *free_slots, n_free, cap_free;
static struct sigaction prev;
static uintptr_t page_mask;
static int installed;

static slot_t *slot_at(uint32_t i)
{
	return &atomic_load(&chunks[i / CHUNK_SLOTS])[i % CHUNK_SLOTS];
}

/* The slot whose mapping holds addr, or NULL. */
static slot_t *find(uintptr_t addr)
{
	uint32_t n = atomic_load_explicit(&n_chunks, memory_order_acquire);
	for (uint32_t c = 0; c < n; c++) {
		slot_t *s = atomic_load_explicit(&chunks[c], memory_order_acquire);
		for (uint32_t i = 0; i < CHUNK_SLOTS; i++) {
			uintptr_t start =
			    atomic_load_explicit(&s[i].start, memory_order_acquire);
			if (start && addr >= start && addr - start < atomic_load(&s[i].len))
				return &s[i];
		}
	}
	return NULL;
}

static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
	int saved = errno;
	uintptr_t addr = (uintptr_t)si->si_addr;
	slot_t *s = find(addr);
	if (s) {
		/* the whole mapping: a part would split it in two, and the process's count
		 * of mappings is bounded (vm.max_map_count) */
		uintptr_t start = atomic_load(&s->start), page = addr & page_mask;
		long r = syscall(SYS_mmap, (void *)start, atomic_load(&s->len),
				 PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		if (r != -1) {
			uint64_t off = page - start, was = atomic_load(&s->lost_at);
			while (off < was &&
			       !atomic_compare_exchange_weak(&s->lost_at, &was, off))
				;
			atomic_fetch_add(&n_faults, 1);
			errno = saved;
			return; /* the access runs again, on the zero pages */
		}
	}
	/* not the daemon's shared memory: what would have happened without the guard */
	if (prev.sa_flags & SA_SIGINFO && prev.sa_sigaction) {
		prev.sa_sigaction(sig, si, uctx);
		return;
	}
	if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
		prev.sa_handler(sig);
		return;
	}
	signal(SIGBUS, SIG_DFL); /* the access faults again and the process ends */
	errno = saved;
}

sc_status_t scd_shmguard_install(void)
{
	pthread_mutex_lock(&mu);
	sc_status_t st = SC_OK;
	if (!installed) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_sigbus;
		sa.sa_flags = SA_SIGINFO | SA_NODEFER;
		sigemptyset(&sa.sa_mask);
		page_mask = ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
		if (sigaction(SIGBUS, &sa, &prev) == 0)
			installed = 1;
		else
			st = SC_ERR_SYSTEM;
	}
	pthread_mutex_unlock(&mu);
	return st;
}

/* A free slot's index, a new chunk's when none is free (under mu). */
static int take_slot(uint32_t *i_p)
{
	if (n_free) {
		*i_p = free_slots[--n_free];
		return 1;
	}
	uint32_t n = atomic_load(&n_chunks);
	if (n == MAX_CHUNKS)
		return 0;
	if (cap_free < (n + 1) * CHUNK_SLOTS) {
		uint32_t *f = realloc(free_slots, sizeof(*f) * (n + 1) * CHUNK_SLOTS);
		if (!f)
			return 0;
		free_slots = f;
		cap_free = (n + 1) * CHUNK_SLOTS;
	}
	slot_t *c = calloc(CHUNK_SLOTS, sizeof(*c));
	if (!c)
		return 0;
	atomic_store_explicit(&chunks[n], c, memory_order_release);
	atomic_store_explicit(&n_chunks, n + 1, memory_order_release);
	for (uint32_t i = CHUNK_SLOTS; i-- > 1;)
		free_slots[n_free++] = n * CHUNK_SLOTS + i;
	*i_p = n * CHUNK_SLOTS;
	return 1;
}

sc_status_t scd_shmguard_add(void *map, size_t bytes, uint32_t *slot_p)
{
	uint32_t i;
	pthread_mutex_lock(&mu);
	int ok = take_slot(&i);
	pthread_mutex_unlock(&mu);
	if (!ok)
		return SC_ERR_NOMEM;
	slot_t *s = slot_at(i);
	atomic_store(&s->lost_at, UINT64_MAX);
	atomic_store(&s->len, bytes);
	atomic_store_explicit(&s->start, (uintptr_t)map, memory_order_release);
	*slot_p = i;
	return SC_OK;
}

void scd_shmguard_remove(uint32_t slot)
{
	atomic_store_explicit(&slot_at(slot)->start, 0, memory_order_release);
	pthread_mutex_lock(&mu);
	free_slots[n_free++] = slot;
	pthread_mutex_unlock(&mu);
}

int scd_shmguard_lost(uint32_t slot, uint64_t *lost_at_p)
{
	slot_t *s = slot_at(slot);
	volatile const char *p = (const char *)atomic_load(&s->start);
	if (p) {
		(void)p[0];
		(void)p[atomic_load(&s->len) - 1];
	}
	uint64_t at = atomic_load(&s->lost_at);
	if (at == UINT64_MAX)
		return 0;
	*lost_at_p = at;
	return 1;
}

uint64_t scd_shmguard_faults(void)
{
	return atomic_load(&n_faults);
}
