/*
 * shmreap.h: which daemons' shared-memory objects in /dev/shm are stale.
 *
 * A daemon names its objects "/sparsecomm.<pid>.<n>.<nonce>" and removes them when it
 * ends; one killed (SIGKILL, the OOM killer) leaves them behind, and the next daemon of
 * the same user removes them. Whether their daemon is gone cannot be told from the pid
 * alone: a daemon in another PID namespace (a container) on the same /dev/shm has a pid
 * that this one cannot see, or that names another process here. So each daemon holds a
 * shared flock(2) on "/dev/shm/sparsecomm.<pid>.lock" for its whole life (two daemons of
 * one pid number in two namespaces share it, both holding it), and an object is stale
 * only when that lock can be taken exclusively; where no lock file exists (a daemon that
 * did not make one), only when its pid is gone here.
 */
#ifndef SCD_UTIL_SHMREAP_H
#define SCD_UTIL_SHMREAP_H

/* Takes this process's lock: the descriptor, kept open and locked until exit, when the lock
 * file goes unless another daemon shares it; or -1 when /dev/shm refuses it (the daemon
 * still runs, its objects then judged by its pid alone). */
int scd_shmreap_hold(void);

/* Removes the stale objects of this user's dead daemons, and their lock files, logging
 * each; dir is "/dev/shm" (a test may give another directory of the same layout). */
void scd_shmreap_stale(const char *dir);

#endif
