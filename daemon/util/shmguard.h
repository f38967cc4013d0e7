/*
 * shmguard.h: keeps the daemon alive when memory a trainer shares with it disappears.
 *
 * A trainer holds a read-write descriptor of each of its tensors' shared objects: it can
 * ftruncate one, or punch a hole in it while /dev/shm is full, and the daemon's next access
 * to the lost pages raises SIGBUS. The guard knows every shared mapping the daemon holds;
 * its SIGBUS handler replaces the faulting mapping with private zero pages
 * (so the access, and any other, completes), marks the mapping lost, and lets the fault of
 * any other address take its default action (a real bug still crashes). The owner of a
 * mapping asks scd_shmguard_lost at its next step and fails the tensor, naming it.
 */
#ifndef SCD_UTIL_SHMGUARD_H
#define SCD_UTIL_SHMGUARD_H

#include <stddef.h>
#include <stdint.h>

#include "sparsecomm.h"

/* Installs the SIGBUS handler once for the process (any thread may fault). */
sc_status_t scd_shmguard_install(void);
/* Watches [map, map + bytes); *slot_p: its slot for the calls below (SC_ERR_NOMEM when the
 * table is full). */
sc_status_t scd_shmguard_add(void *map, size_t bytes, uint32_t *slot_p);
/* Stops watching a slot (before its mapping is unmapped). */
void scd_shmguard_remove(uint32_t slot);
/* Whether part of the slot's mapping was lost (the trainer shrank the object, or its pages
 * could not be allocated); *lost_at_p: the first offset found lost. Reads the first and the
 * last byte of the mapping first, so a shrink since the last access shows. */
int scd_shmguard_lost(uint32_t slot, uint64_t *lost_at_p);
/* The faults the handler has turned into lost mappings since the start. */
uint64_t scd_shmguard_faults(void);

#endif
