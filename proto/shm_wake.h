/*
 * shm_wake.h: the futex on a tensor's shared header (proto/shm_layout.h) that lets the
 * daemon wake a trainer's waiting thread directly when the tensor's operation succeeds,
 * instead of through the chain daemon loop -> ZeroMQ's I/O threads on both sides -> the
 * library's I/O thread -> the condition variable. The Completion message is still sent:
 * it carries errors and counts, and ends the wait where the shortcut does not apply.
 *
 * The word is shared between processes (the futex is not FUTEX_PRIVATE) and anyone who
 * maps the object may write it, so it carries no meaning beyond "look again": a waiter
 * rechecks its operation after every wake and never trusts the word for more.
 */
#ifndef SC_SHM_WAKE_H
#define SC_SHM_WAKE_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm_layout.h"

/* The word's current value, read before the state it guards is checked (after
 * sc_shm_alive in a trainer). */
static inline uint32_t sc_shm_done_seq(sc_shm_header_t *h)
{
	return __atomic_load_n(&h->done_seq, __ATOMIC_ACQUIRE);
}

/*
 * Bumps the word and wakes every thread waiting on it, in any process. One FUTEX_WAKE_OP
 * does both inside the kernel, so a header whose page is gone (a trainer truncated its
 * object) fails the call with EFAULT instead of raising SIGBUS.
 */
static inline void sc_shm_wake(sc_shm_header_t *h)
{
	syscall(SYS_futex, &h->done_seq, FUTEX_WAKE_OP, INT_MAX, (void *)(long)INT_MAX,
		&h->done_seq, FUTEX_OP(FUTEX_OP_ADD, 1, FUTEX_OP_CMP_EQ, 0));
}

/*
 * Whether the header's page is still there to read: a FUTEX_WAKE of nobody looks the page
 * up and fails with EFAULT where a plain read would raise SIGBUS. (A trainer that truncates
 * its object while it waits on it can still fault; one that truncated before cannot.)
 */
static inline int sc_shm_alive(sc_shm_header_t *h)
{
	return syscall(SYS_futex, &h->done_seq, FUTEX_WAKE, 0, NULL, NULL, 0) >= 0;
}

/* The daemon: the operation with handle succeeded, its result is in place. (The daemon's
 * mappings are guarded against a truncation, util/shmguard.h.) */
static inline void sc_shm_done(sc_shm_header_t *h, uint64_t handle)
{
	__atomic_store_n(&h->done_handle, handle, __ATOMIC_RELEASE);
	sc_shm_wake(h);
}

/* Whether the daemon said the operation with handle succeeded. */
static inline int sc_shm_is_done(sc_shm_header_t *h, uint64_t handle)
{
	return handle && __atomic_load_n(&h->done_handle, __ATOMIC_ACQUIRE) == handle;
}

/*
 * Sleeps while the word still holds seen, at most until deadline (CLOCK_MONOTONIC,
 * absolute; NULL: no deadline). Returns 0 on a wake, a changed word or a signal (the caller
 * looks again), ETIMEDOUT once the deadline has passed.
 */
static inline int sc_shm_wait(sc_shm_header_t *h, uint32_t seen,
			      const struct timespec *deadline)
{
	long rc = syscall(SYS_futex, &h->done_seq, FUTEX_WAIT_BITSET, seen, deadline, NULL,
			  FUTEX_BITSET_MATCH_ANY);
	return rc < 0 && errno == ETIMEDOUT ? ETIMEDOUT : 0;
}

#endif
